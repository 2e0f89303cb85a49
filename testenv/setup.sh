#!/bin/bash
# Install what the stealscope test VMs need and cache a guest kernel + initramfs.
#
# Usage: setup.sh [--force]
#   --force  re-download the kernel and rebuild the initramfs
#
# Env: STEALSCOPE_TESTENV_CACHE      cache dir (default /var/cache/stealscope-testenv)
#      STEALSCOPE_TESTENV_KERNEL_PKG kernel meta package (default linux-image-cloud-amd64,
#                                    which boots ~2x faster under TCG than linux-image-amd64)
# Prints KERNEL=<path> and INITRD=<path>. A second run does no apt work at all.
set -euo pipefail

CACHE=${STEALSCOPE_TESTENV_CACHE:-/var/cache/stealscope-testenv}
KPKG=${STEALSCOPE_TESTENV_KERNEL_PKG:-linux-image-cloud-amd64}
HERE=$(cd "$(dirname "$0")" && pwd)
FORCE=0
[ "${1:-}" = --force ] && FORCE=1

die() { echo "setup.sh: error: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (apt-get install)"

APT_UPDATED=0
apt_update_once() {
    if [ "$APT_UPDATED" = 0 ]; then
        echo "setup.sh: apt-get update" >&2
        apt-get update -qq || die "apt-get update failed"
        APT_UPDATED=1
    fi
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# 1. Host packages (only if something is missing).
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
installed busybox-static || missing+=(busybox-static)
command -v cpio >/dev/null || missing+=(cpio)
command -v python3 >/dev/null || missing+=(python3-minimal)
command -v readelf >/dev/null || missing+=(binutils)
if [ ${#missing[@]} -gt 0 ]; then
    apt_update_once
    echo "setup.sh: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
fi

# 2. Guest kernel: apt-get download the .deb and extract vmlinuz (not installed into /boot).
mkdir -p "$CACHE"
KERNEL="$CACHE/vmlinuz"
if [ "$FORCE" = 1 ] || [ ! -s "$KERNEL" ] || [ "$(cat "$CACHE/kernel.pkg" 2>/dev/null)" != "$KPKG" ]; then
    apt_update_once
    # The meta package depends on the versioned image package, e.g. linux-image-6.1.0-56-cloud-amd64.
    real=$(apt-cache depends "$KPKG" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [ -n "$real" ] || die "cannot resolve kernel package $KPKG (apt-cache depends found no linux-image-<version>)"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/stealscope-kernel.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "setup.sh: downloading $real" >&2
    (cd "$tmp" && apt-get download -qq "$real" 2>/dev/null) || die "apt-get download $real failed"
    dpkg-deb -x "$tmp"/*.deb "$tmp/x"
    found=("$tmp"/x/boot/vmlinuz-*)
    vmlinuz=${found[0]}
    [ -f "$vmlinuz" ] || die "no /boot/vmlinuz-* in $real"
    cp "$vmlinuz" "$KERNEL.tmp" && mv "$KERNEL.tmp" "$KERNEL"
    cp "$tmp"/x/boot/config-* "$CACHE/kernel.config" 2>/dev/null || true
    echo "$KPKG" >"$CACHE/kernel.pkg"
    echo "${real#linux-image-}" >"$CACHE/kernel.version"
fi

# 3. Default initramfs (no extra binaries); rebuilt only when stale.
mkargs=()
[ "$FORCE" = 1 ] && mkargs+=(--force)
INITRD=$(STEALSCOPE_TESTENV_CACHE="$CACHE" "$HERE/mkinitramfs.sh" "${mkargs[@]+"${mkargs[@]}"}")

echo "KERNEL=$KERNEL"
echo "KERNEL_VERSION=$(cat "$CACHE/kernel.version")"
echo "INITRD=$INITRD"
