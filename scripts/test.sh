#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests need,
# then checks formatting, lints and runs every test. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says when it starts, so that a slow suite says where it went.
phase() { echo "== $* [$(date -u +%T), ${SECONDS} s in]"; }
# CI is any value but empty, 0 or false (the tests' rule, crates/testkit).
is_ci() { [[ -n ${CI:-} && ${CI} != 0 && ${CI} != false ]]; }

need_apt=()
for pkg in qemu-system-x86 busybox-static cpio prometheus prometheus-node-exporter \
  chromium-headless-shell sysstat tmux \
  libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients \
  lintian debootstrap man-db systemd \
  clang-14 llvm-14 bpftool bpftrace linux-perf util-linux; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  phase "installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# A CI build starts from a clean clone: incremental compilation only adds
# its caches' cost there.
if is_ci; then
  export CARGO_INCREMENTAL=0
fi

phase "the package test's clean root, in the background (scripts/test-package.sh)"
# It waits on the network and the disk rather than the CPUs.
mkdir -p target
# A session of its own, so that a failure below stops the whole of it.
setsid scripts/test-package.sh --prepare-root >target/package.log 2>&1 &
root=$!
trap 'kill -- -"$root" 2>/dev/null || true' EXIT

phase "guest kernel and initramfs for the QEMU tests"
testenv/setup.sh

phase "fixtures: regenerate with fixtures/gen, fail on drift"
python3 fixtures/gen/gen_fixtures.py --check
python3 fixtures/gen/check_fixtures.py >/dev/null
phase "BPF object rebuilt from source gives the committed bytes"
scripts/build-bpf.sh --check

phase "module cycles"
python3 scripts/check-module-cycles.py
phase "commit messages since the baseline"
scripts/check-commits.sh
phase "cargo fmt"
cargo fmt --all -- --check
phase "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
phase "test build (cargo test --no-run)"
# Each test that skips (a part missing here) appends "<test>: <why>" to the
# skip log (crates/testkit); under CI a skip is already a failure.
export STEALSCOPE_SKIP_LOG="$PWD/target/skipped.log"
rm -f "$STEALSCOPE_SKIP_LOG"
cargo test --workspace --no-run --quiet
phase "Debian package: built (scripts/package.sh), installed on a clean root"
echo "   (scripts/test-package.sh), before any test runs"
# Under CI the package holds the test build's binary (package.sh
# --from-debug): CI tests the package's files, maintainer scripts, units,
# man pages and serve answering, not the optimizer, and a second build of
# the whole tree at release settings cost the suite minutes on two CPUs.
# scripts/package.sh run by hand builds what ships, at opt-level 3.
from=()
is_ci && from=(--from-debug)
if ! wait "$root" || ! {
  deb=$(scripts/package.sh "${from[@]}" 2>>target/package.log | tail -n 1) &&
    scripts/test-package.sh "$deb" >>target/package.log 2>&1
}; then
  cat target/package.log
  echo "test.sh: the package build or its test failed (target/package.log)" >&2
  exit 1
fi
grep -E '^(==|   )' target/package.log
phase "cargo test"
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
phase "the slowest test binaries"
grep -E '^ +Running |finished in ' target/test.log |
  paste - - | awk '{print $NF, $2}' | sort -rn | head -12
phase "tests skipped at run time, and ignored ones"
skipped=0
[[ -f $STEALSCOPE_SKIP_LOG ]] && skipped=$(wc -l <"$STEALSCOPE_SKIP_LOG")
echo "$skipped test(s) skipped:"
[[ $skipped -gt 0 ]] && sed 's/^/  /' "$STEALSCOPE_SKIP_LOG"
ignored=$(grep -cE '^test .* \.\.\. ignored' target/test.log || true)
echo "$ignored test(s) ignored (#[ignore], each with its reason):"
grep -E '^test .* \.\.\. ignored' target/test.log | sed 's/^test /  /' || true
if [[ $skipped -gt 0 ]] && is_ci; then
  echo "test.sh: $skipped test(s) skipped under CI=$CI" >&2
  exit 1
fi
