#!/bin/sh
# Kernel tables side by side: one attn binary under each ATTN_ISA in turn,
# in alternating rounds (bench/alternate.sh).
# usage: bench/isa_ab.sh ROUNDS "avx2 avx512" [--out FILE] -- BENCH_ARGS...
# e.g.   bench/isa_ab.sh 5 "avx2 avx512" -- --heads 8 --seq 2048 --head-dim 64 --causal
set -eu
here=$(cd "$(dirname "$0")" && pwd)
attn=${ATTN:-$here/../build/attn}
rounds=$1 isas=$2
shift 2
out=/dev/null
if [ "${1:-}" = --out ]; then out=$2; shift 2; fi
[ "${1:-}" = -- ] && shift
sides=""
for isa in $isas; do sides="$sides $isa=$isa@$attn"; done
# shellcheck disable=SC2086
exec "$here/alternate.sh" "$rounds" "$out" $sides -- "$@"
