#!/usr/bin/env bash
# Builds the scheduler collector's BPF object from its C source, or with
# --check rebuilds it into a temporary file and fails unless the bytes equal
# the committed object. Needs Debian's clang-14 and llvm-14 (llvm-strip).
# Reproducible: relative source path, debug prefix mapped, DWARF stripped
# (the .BTF and .BTF.ext sections CO-RE needs are kept), .comment dropped.
set -euo pipefail
cd "$(dirname "$0")/../crates/sched/bpf"
CLANG=${CLANG:-clang-14}
STRIP=${LLVM_STRIP:-llvm-strip-14}
src=wait_by.bpf.c
obj=wait_by.bpf.o
out=$obj
if [[ ${1:-} == --check ]]; then
  out=$(mktemp --suffix=.bpf.o)
  trap 'rm -f "$out"' EXIT
fi
"$CLANG" -target bpf -mcpu=v3 -O2 -g -Wall -Werror \
  -fdebug-prefix-map="$PWD"=. -fno-ident -c "$src" -o "$out"
"$STRIP" -g --remove-section=.comment "$out"
if [[ ${1:-} == --check ]]; then
  if ! cmp -s "$out" "$obj"; then
    echo "crates/sched/bpf/$obj differs from a rebuild of $src with $($CLANG --version | head -1);" >&2
    echo "run scripts/build-bpf.sh and commit the object" >&2
    exit 1
  fi
  echo "crates/sched/bpf/$obj matches its source"
fi
