#!/usr/bin/env bash
# Rebuilds bpf/ledger.bpf.o from bpf/ledger.bpf.c (the driver-call ledger's
# uprobes, loaded by src/collect/ledger/ through aya). The object is checked in, so
# building gpumemd needs only Rust; run this after changing the C file, and
# `scripts/build-bpf.sh --check` in CI to prove the checked-in object is what
# the source builds (same disassembly, maps and BTF).
#
# Needs clang, llvm and libbpf's headers (Debian: apt-get install clang llvm
# libbpf-dev). x86_64 only: the probes read x86_64 registers.
set -euo pipefail
cd "$(dirname "$0")/.."

out=bpf/ledger.bpf.o
check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  out=$(mktemp -d)/ledger.bpf.o
fi

# Relative paths and a fixed prefix map keep the build directory out of
# the object's BTF line information, so any checkout builds the same bytes.
clang -O2 -g -target bpf -D__TARGET_ARCH_x86 \
  -I/usr/include/x86_64-linux-gnu \
  -fdebug-prefix-map="$PWD"=. -fno-ident \
  -c bpf/ledger.bpf.c -o "$out"
# DWARF is not needed to load; BTF (kept) is.
llvm-strip --strip-debug "$out"

if [ "$check" = 1 ]; then
  if cmp -s "$out" bpf/ledger.bpf.o; then
    echo "bpf/ledger.bpf.o: byte-identical to a rebuild"
    exit 0
  fi
  dis() { llvm-objdump -d --no-show-raw-insn -r "$1" | tail -n +3; llvm-objdump -h "$1" | tail -n +3 | awk '{print $2, $3}'; }
  if diff <(dis bpf/ledger.bpf.o) <(dis "$out"); then
    echo "bpf/ledger.bpf.o: same code and sections as a rebuild (bytes differ: another clang)"
    exit 0
  fi
  echo "bpf/ledger.bpf.o is stale: run scripts/build-bpf.sh and commit the object" >&2
  exit 1
fi
ls -l "$out"
