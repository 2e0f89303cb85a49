#!/bin/sh
# Behaviour-unchanged check for refactors (issue 18): `doctor --json`,
# doctor text and `host --json` on every snapshot fixture, written to DIR
# by `save`, compared byte for byte by `check`.
# Usage: scripts/doctor-identity.sh save|check DIR [BINARY]
set -eu
mode=$1 dir=$2 bin=${3:-target/debug/stealscope}
repo=$(cd "$(dirname "$0")/.." && pwd)
now=$(mktemp -d)
trap 'rm -rf "$now"' EXIT
n=0
for snap in "$repo"/fixtures/snapshots/*/snapshot.tar.gz; do
    name=$(basename "$(dirname "$snap")")
    # Exit codes are part of the behaviour: kept beside the output.
    for what in "doctor --json" "doctor" "host --json"; do
        f="$now/$name.$(echo "$what" | tr ' -' '__')"
        set +e
        COLUMNS=80 "$bin" $what --snapshot "$snap" >"$f" 2>&1
        echo "exit $?" >>"$f"
        set -e
        n=$((n + 1))
    done
done
case $mode in
save) [ ! -e "$dir" ] || { echo "$dir exists" >&2; exit 2; }; mkdir -p "$dir" && cp "$now"/* "$dir"/ && echo "saved $n outputs in $dir" ;;
check)
    if diff -r "$dir" "$now" >/dev/null; then
        echo "identical: $n outputs ($(ls "$repo"/fixtures/snapshots/*/snapshot.tar.gz | wc -l) fixtures x doctor --json, doctor, host --json)"
    else
        diff -r "$dir" "$now" | head -40
        echo "DIFFERENT"
        exit 1
    fi ;;
*) echo "usage: $0 save|check DIR [BINARY]" >&2; exit 2 ;;
esac
