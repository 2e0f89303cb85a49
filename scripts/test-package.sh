#!/usr/bin/env bash
# Installs the Debian package on a clean root and checks it as an operator
# would: scripts/test-package.sh target/debian/stealscope_*.deb
#
# First lintian: no errors, no warnings (overrides carry their reason).
# The clean root is a Debian minbase (debootstrap, the host's release, with
# systemd and man-db as on a KVM host), cached as a tarball under
# /var/cache/stealscope-testenv and unpacked afresh for every run. The test
# runs in its own mount and network namespaces (its mounts and port 9464
# vanish with it) and, inside the root with chroot:
#   dpkg -i, saying that systemd does not run here (it is not PID 1 here
#   nor in CI) and enabling serve, not place; stealscope --version (the
#   commit of this checkout); a man page for every command; systemd-analyze
#   verify of both units; serve started as its unit starts it (ExecStart
#   with /etc/default/stealscope, as an unprivileged user with no
#   capabilities) answering /metrics that promtool check metrics accepts;
#   reinstall (upgrade path) and dpkg -r keeping the placement journal;
#   dpkg -r leaving only what policy keeps; dpkg -P leaving nothing; then
#   the same cycle with systemd's client side logged, for the start, restart
#   and stop decisions made where systemd runs.
set -euo pipefail

fail() { echo "test-package: FAIL: $*" >&2; exit 1; }

if [ "${STEALSCOPE_PKGTEST_INSIDE:-}" != 1 ]; then
  # --prepare-root: only build the cached root (test.sh starts that early,
  # in the background, as it waits on the network rather than the CPUs).
  prepare_only=
  if [ "${1:-}" = --prepare-root ]; then
    prepare_only=1
  else
    deb=$(realpath "${1:?usage: test-package.sh PACKAGE.deb | --prepare-root}")
    [ -f "$deb" ] || fail "$deb: no such file"
  fi
  repo=$(cd "$(dirname "$0")/.." && pwd)
  for tool in debootstrap lintian promtool curl unshare setpriv; do
    command -v "$tool" >/dev/null || fail "$tool missing (scripts/test.sh installs it)"
  done
  . /etc/os-release
  suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
  include=systemd,man-db
  cache=/var/cache/stealscope-testenv
  tarball=$cache/pkgroot-$suite-${include//,/-}.tar.gz
  if [ ! -f "$tarball" ]; then
    echo "== debootstrap $suite (minbase + $include) into $tarball (once)"
    mkdir -p "$cache"
    build=$(mktemp -d "$cache/pkgroot.XXXXXX")
    chmod 755 "$build" # it becomes the root's /, which mktemp made 0700
    debootstrap --variant=minbase --include="$include" "$suite" "$build" \
      http://deb.debian.org/debian >"$build.log" 2>&1 ||
      { tail -n 20 "$build.log" >&2; fail "debootstrap failed ($build.log)"; }
    chroot "$build" apt-get clean
    tar -C "$build" -czf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$build" "$build.log"
  fi
  [ -z "$prepare_only" ] || { echo "$tarball"; exit 0; }

  echo "== lintian"
  # No error and no warning; the one overridden warning has its reason in
  # deploy/debian/lintian-overrides. Info tags are printed, not judged.
  lintian --fail-on error,warning --display-info --tag-display-limit 0 "$deb" ||
    fail "lintian reports errors or warnings"

  work=$(mktemp -d /tmp/stealscope-pkgtest.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  echo "== clean root: $work/root"
  mkdir "$work/root"
  tar -C "$work/root" -xzf "$tarball"
  chmod 755 "$work/root"
  commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  STEALSCOPE_PKGTEST_INSIDE=1 DEB="$deb" ROOT="$work/root" COMMIT="$commit" \
    unshare --mount --net --fork -- "$0"
  echo "== package test passed"
  exit 0
fi

# ---- inside the private mount and network namespaces ----
root=$ROOT
mount --make-rprivate /
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
ip link set lo up
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }

# Everything on the root's file system but dpkg's own records and logs,
# which dpkg keeps by design (and caches rebuilt by triggers).
listing() {
  (cd "$root" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./tmp \
    -o -path ./var/lib/dpkg -o -path ./var/log -o -path ./var/cache/man -o -path ./run \) -prune \
    -o -printf '%y %m %p\n') | sort
}
listing >"$root/../before"

echo "== dpkg -i (systemd is not running)"
cp "$DEB" "$root/tmp/stealscope.deb"
out=$(in_root dpkg -i /tmp/stealscope.deb 2>&1) || { echo "$out"; fail "dpkg -i failed"; }
echo "$out" | sed 's/^/   /'
grep -q 'systemd is not running here' <<<"$out" || fail "postinst did not say that systemd is not running"
[ -L "$root/etc/systemd/system/multi-user.target.wants/stealscope.service" ] ||
  fail "stealscope.service not enabled for the next boot"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/stealscope-place.service" ] ||
  fail "stealscope-place.service enabled (it must not be)"

echo "== stealscope --version"
version=$(in_root stealscope --version)
echo "   $version"
want_version=$(dpkg-deb -f "$DEB" Version)
[[ "$version" == "stealscope ${want_version%%-*} (commit $COMMIT)" ]] ||
  fail "--version says '$version', expected version ${want_version%%-*} and commit $COMMIT"

echo "== man pages"
in_root man -w stealscope-doctor >/dev/null || fail "man stealscope-doctor does not resolve"
page=$(in_root env MANWIDTH=80 man -P cat stealscope-doctor 2>/dev/null)
grep -q 'stealscope-doctor' <<<"$page" || fail "man stealscope-doctor renders no page"
# Every command and subcommand in --help has its page.
commands() { in_root stealscope "$@" --help | awk '/^Commands:/{on=1;next} on&&/^  [a-z]/{print $1} on&&/^$/{exit}' | grep -vx help || true; }
pages=0
for cmd in $(commands); do
  for sub in "" $(commands "$cmd"); do
    page=stealscope-$cmd${sub:+-$sub}
    in_root man -w "$page" >/dev/null || fail "no man page $page"
    pages=$((pages + 1))
  done
done
[ "$pages" -ge 10 ] || fail "only $pages commands found in --help"
echo "   $pages commands and subcommands, each with its page"
for f in usr/share/bash-completion/completions/stealscope usr/share/zsh/vendor-completions/_stealscope \
  usr/share/fish/vendor_completions.d/stealscope.fish usr/share/stealscope/prometheus/rules.yml \
  usr/share/stealscope/grafana/dashboard.json usr/share/doc/stealscope/copyright \
  etc/default/stealscope etc/stealscope/place.toml; do
  [ -s "$root/$f" ] || fail "/$f missing or empty"
done
in_root stealscope place plan --config /etc/stealscope/place.toml --help >/dev/null

echo "== systemd-analyze verify"
units=()
for u in stealscope.service stealscope-place.service; do
  p=$(cd "$root" && ls -d {usr/,}lib/systemd/system/"$u" 2>/dev/null | head -n 1)
  [ -n "$p" ] || fail "$u not installed"
  units+=("/$p")
done
out=$(in_root systemd-analyze verify --man=yes "${units[@]}" 2>&1) || { echo "$out"; fail "systemd-analyze verify"; }
[ -z "$out" ] || { echo "$out"; fail "systemd-analyze verify printed warnings"; }
echo "   ${units[*]}: no warnings"

echo "== serve as stealscope.service starts it"
unit=$root${units[0]}
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
envfile=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$unit")
ARGS=
# shellcheck disable=SC1090
[ -z "$envfile" ] || [ ! -f "$root$envfile" ] || . "$root$envfile"
read -ra cmd <<<"${exec_start//\$ARGS/$ARGS}"
echo "   ${cmd[*]}"
# DynamicUser=yes, CapabilityBoundingSet= (empty), NoNewPrivileges=yes.
chroot "$root" setpriv --reuid 61999 --regid 61999 --clear-groups --inh-caps=-all \
  --bounding-set=-all --no-new-privs "${cmd[@]}" >"$root/../serve.log" 2>&1 &
serve=$!
metrics=
for _ in $(seq 1 100); do
  metrics=$(curl -sf http://127.0.0.1:9464/metrics) && break
  kill -0 "$serve" 2>/dev/null || { cat "$root/../serve.log"; fail "serve exited"; }
  sleep 0.2
done
kill "$serve"; wait "$serve" || true
[ -n "$metrics" ] || { cat "$root/../serve.log"; fail "no answer on 127.0.0.1:9464/metrics"; }
grep -q '^stealscope_cpu_' <<<"$metrics" || fail "no stealscope_cpu_ series in /metrics"
promtool check metrics <<<"$metrics" || fail "promtool check metrics rejects /metrics"
echo "   $(grep -vc '^#' <<<"$metrics") samples; promtool check metrics: ok"

echo "== reinstall (upgrade path) and remove keep the placement journal"
mkdir -p "$root/var/lib/stealscope"
echo '{"journal":"from a daemon that ran"}' >"$root/var/lib/stealscope/place.journal"
in_root dpkg -i /tmp/stealscope.deb >/dev/null 2>&1 || fail "reinstall failed"
[ -s "$root/var/lib/stealscope/place.journal" ] || fail "upgrade removed the placement journal"
in_root dpkg -r stealscope >/dev/null 2>&1 || fail "dpkg -r failed"
[ -s "$root/var/lib/stealscope/place.journal" ] || fail "dpkg -r removed the placement journal"

echo "== dpkg -r leaves only conffiles, the state directory and systemd's enablement"
listing >"$root/../after-remove"
left=$(comm -13 "$root/../before" "$root/../after-remove")
echo "$left" | sed 's/^/   /'
# Policy for remove (not purge): conffiles stay, and so does the state
# directory; deb-systemd-helper (as dh_installsystemd has it) keeps the
# enablement so that a reinstall keeps the admin's choice, and masks the
# units whose files are gone. Purge undoes all of it.
allowed='^(d [0-9]+ \./etc/stealscope|f [0-9]+ \./etc/default/stealscope|f [0-9]+ \./etc/stealscope/place\.toml'
allowed+='|d [0-9]+ \./var/lib/stealscope|f [0-9]+ \./var/lib/stealscope/place\.journal'
allowed+='|l [0-9]+ \./etc/systemd/system/(multi-user\.target\.wants/)?stealscope(-place)?\.service'
allowed+='|[dfl] [0-9]+ \./var/lib/systemd/deb-systemd-helper-(enabled|masked)(/.*)?)$'
bad=$(grep -Ev "$allowed" <<<"$left" || true)
[ -z "$bad" ] || fail "dpkg -r left more than policy allows: $bad"
gone=$(comm -23 "$root/../before" "$root/../after-remove")
[ -z "$gone" ] || fail "dpkg -r removed files it did not install: $gone"

echo "== dpkg -P leaves nothing"
in_root dpkg -P stealscope >/dev/null 2>&1 || fail "dpkg -P failed"
listing >"$root/../after-purge"
diff "$root/../before" "$root/../after-purge" || fail "dpkg -P left the files above"

# Where systemd runs, the maintainer scripts must ask it to start serve (and
# only serve), restart on upgrade and stop on remove. systemd cannot be PID 1
# here, so its client side is stood in for by scripts that log their
# arguments: this checks the maintainer scripts' decisions, not systemd.
echo "== maintainer scripts where systemd runs (systemctl and deb-systemd-invoke logged)"
mkdir -p "$root/run/systemd/system" "$root/usr/local/sbin"
for tool in systemctl deb-systemd-invoke; do
  printf '#!/bin/sh\necho "%s $*" >>/tmp/systemd-calls\n' "$tool" >"$root/usr/local/sbin/$tool"
  chmod 755 "$root/usr/local/sbin/$tool"
done
with_systemd() { chroot "$root" env -i PATH=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }
calls() { cat "$root/tmp/systemd-calls" 2>/dev/null; rm -f "$root/tmp/systemd-calls"; }
out=$(with_systemd dpkg -i /tmp/stealscope.deb 2>&1) || { echo "$out"; fail "dpkg -i (systemd) failed"; }
c=$(calls); echo "$c" | sed 's/^/   install: /'
grep -qx 'deb-systemd-invoke start stealscope.service' <<<"$c" || fail "install did not start stealscope.service"
! grep -q 'stealscope-place.service' <<<"$c" || fail "install touched stealscope-place.service"
grep -q 'stealscope.service started' <<<"$out" || fail "postinst did not report the start"
with_systemd dpkg -i /tmp/stealscope.deb >/dev/null 2>&1 || fail "upgrade (systemd) failed"
c=$(calls); echo "$c" | sed 's/^/   upgrade: /'
grep -qx 'deb-systemd-invoke restart stealscope.service' <<<"$c" || fail "upgrade did not restart stealscope.service"
grep -qx 'deb-systemd-invoke try-restart stealscope-place.service' <<<"$c" ||
  fail "upgrade does not restart a running placement daemon"
! grep -q 'stop' <<<"$c" || fail "upgrade stopped a service before unpacking"
with_systemd dpkg -P stealscope >/dev/null 2>&1 || fail "dpkg -P (systemd) failed"
c=$(calls); echo "$c" | sed 's/^/   purge: /'
for u in stealscope.service stealscope-place.service; do
  grep -qx "deb-systemd-invoke stop $u" <<<"$c" || fail "remove did not stop $u"
done
rm -rf "$root/run/systemd/system" "$root/usr/local/sbin/systemctl" "$root/usr/local/sbin/deb-systemd-invoke"
listing >"$root/../after-purge2"
diff "$root/../before" "$root/../after-purge2" || fail "dpkg -P (systemd) left the files above"
