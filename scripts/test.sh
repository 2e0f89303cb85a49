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

# A CI build starts from a clean clone: incremental compilation only adds
# its caches' cost there. And CI builds the package's binary at opt-level 1,
# not the release profile's 3: it tests the package (its files, maintainer
# scripts, units, man pages, serve answering), not the optimizer, and the
# third level cost the suite's budget most of a minute on two CPUs.
# scripts/package.sh run by hand builds what ships, at opt-level 3.
if [[ -n ${CI:-} && ${CI} != 0 && ${CI} != false ]]; then
  export CARGO_INCREMENTAL=0 CARGO_PROFILE_RELEASE_OPT_LEVEL=1
fi

echo "== Debian package, in the background: build (scripts/package.sh), then install"
echo "   on a clean root (scripts/test-package.sh); done before any test runs"
# Built beside the debug build, and done before any test runs, so that no
# timed test shares the machine with it. (The two builds share two CPUs:
# the phase is bound by their total work, 435 s either way on 2026-12-06.)
mkdir -p target
# A session of its own, so that a failure below stops the whole of it.
setsid bash -euo pipefail -c '
  scripts/test-package.sh --prepare-root
  deb=$(scripts/package.sh | tail -n 1)
  scripts/test-package.sh "$deb"
' >target/package.log 2>&1 &
package=$!
trap 'kill -- -"$package" 2>/dev/null || true' EXIT

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
# Each test that skips (a part missing here) appends "<test>: <why>" to the
# skip log (crates/testkit); under CI a skip is already a failure.
export STEALSCOPE_SKIP_LOG="$PWD/target/skipped.log"
rm -f "$STEALSCOPE_SKIP_LOG"
cargo test --workspace --no-run --quiet
echo "== Debian package (started at the beginning)"
if ! wait "$package"; then
  cat target/package.log
  echo "test.sh: the package build or its test failed (target/package.log)" >&2
  exit 1
fi
grep -E '^(==|   )' target/package.log
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
echo "== tests skipped at run time, and ignored ones"
skipped=0
[[ -f $STEALSCOPE_SKIP_LOG ]] && skipped=$(wc -l <"$STEALSCOPE_SKIP_LOG")
echo "$skipped test(s) skipped:"
[[ $skipped -gt 0 ]] && sed 's/^/  /' "$STEALSCOPE_SKIP_LOG"
ignored=$(grep -cE '^test .* \.\.\. ignored' target/test.log || true)
echo "$ignored test(s) ignored (#[ignore], each with its reason):"
grep -E '^test .* \.\.\. ignored' target/test.log | sed 's/^test /  /' || true
if [[ $skipped -gt 0 ]] && [[ -n ${CI:-} && ${CI} != 0 && ${CI} != false ]]; then
  echo "test.sh: $skipped test(s) skipped under CI=$CI" >&2
  exit 1
fi
