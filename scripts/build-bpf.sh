#!/usr/bin/env bash
# Builds the scheduler crate's BPF objects (wait_by, guest_steal) from their
# C sources, or with --check rebuilds each into a temporary file and fails
# unless the bytes equal the committed object. Needs Debian's clang-14 and
# llvm-14 (llvm-strip).
# Reproducible: relative source path, debug prefix mapped, DWARF stripped
# (the .BTF and .BTF.ext sections CO-RE needs are kept), .comment dropped.
set -euo pipefail
cd "$(dirname "$0")/../crates/sched/bpf"
CLANG=${CLANG:-clang-14}
STRIP=${LLVM_STRIP:-llvm-strip-14}
check=0
if [[ ${1:-} == --check ]]; then
  check=1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for name in wait_by guest_steal; do
  src=$name.bpf.c
  obj=$name.bpf.o
  out=$obj
  if ((check)); then
    out=$tmp/$obj
  fi
  "$CLANG" -target bpf -mcpu=v3 -O2 -g -Wall -Werror \
    -fdebug-prefix-map="$PWD"=. -fno-ident -c "$src" -o "$out"
  "$STRIP" -g --remove-section=.comment "$out"
  if ((check)); then
    if ! cmp -s "$out" "$obj"; then
      echo "crates/sched/bpf/$obj differs from a rebuild of $src with $($CLANG --version | head -1);" >&2
      echo "run scripts/build-bpf.sh and commit the object" >&2
      status=1
    else
      echo "crates/sched/bpf/$obj matches its source"
    fi
  fi
done
exit $status
