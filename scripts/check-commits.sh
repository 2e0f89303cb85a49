#!/bin/sh
# Commit messages as the house asks (issue 18 item 6): every commit since
# BASE has a subject under 72 characters and a body that says why. BASE is
# fixed (the merge that brought the check in), so older history is not
# judged again. Run by scripts/test.sh. Usage: scripts/check-commits.sh [REV]
set -eu
BASE=439d1bd
rev=${1:-HEAD}
cd "$(dirname "$0")/.."
if ! git rev-parse -q --verify "$BASE^{commit}" >/dev/null; then
    echo "check-commits: baseline $BASE is not in this clone (shallow?): fetch the history" >&2
    exit 1
fi
bad=0
n=0
for c in $(git rev-list "$BASE..$rev"); do
    n=$((n + 1))
    subject=$(git log -1 --format=%s "$c")
    # The body: the message after the subject line and its blank line.
    body=$(git log -1 --format=%b "$c" | grep -v '^[[:space:]]*$' || true)
    len=$(printf '%s' "$subject" | wc -m)
    if [ "$len" -ge 72 ]; then
        echo "$(git log -1 --format=%h "$c"): subject is $len characters (must be under 72): $subject"
        bad=$((bad + 1))
    fi
    if [ -z "$body" ]; then
        echo "$(git log -1 --format=%h "$c"): no body saying why: $subject"
        bad=$((bad + 1))
    fi
done
if [ "$bad" -gt 0 ]; then
    echo "check-commits: $bad problem(s) in $n commit(s) since $BASE"
    exit 1
fi
echo "check-commits: $n commit(s) since $BASE: subjects under 72 characters, each with a body"
