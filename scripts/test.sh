#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests need,
# then checks formatting, lints and runs every test. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in qemu-system-x86 busybox-static cpio prometheus prometheus-node-exporter \
  chromium-headless-shell sysstat tmux \
  libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients \
  lintian debootstrap man-db systemd \
  clang-14 llvm-14 bpftool bpftrace linux-perf util-linux; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "== installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

echo "== clean Debian root for the package test (in the background, cached)"
mkdir -p target
scripts/test-package.sh --prepare-root >target/pkgroot.log 2>&1 &
pkgroot=$!

echo "== guest kernel and initramfs for the QEMU tests"
testenv/setup.sh

echo "== fixtures: regenerate with fixtures/gen, fail on drift"
python3 fixtures/gen/gen_fixtures.py --check
python3 fixtures/gen/check_fixtures.py >/dev/null
echo "== BPF object rebuilt from source gives the committed bytes"
scripts/build-bpf.sh --check

echo "== module cycles"
python3 scripts/check-module-cycles.py
echo "== commit messages since the baseline"
scripts/check-commits.sh
echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
echo "== Debian package: build (scripts/package.sh), then install on a clean root"
wait "$pkgroot" || { cat target/pkgroot.log; exit 1; }
deb=$(scripts/package.sh | tail -n 1)
scripts/test-package.sh "$deb"
