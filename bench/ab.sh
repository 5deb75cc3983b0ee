#!/bin/sh
# Two attn binaries side by side in alternating rounds (bench/alternate.sh):
# per-binary medians and the median of the per-round ratio A/B.
# usage: bench/ab.sh ROUNDS ATTN_A ATTN_B [--out FILE] -- BENCH_ARGS...
set -eu
here=$(cd "$(dirname "$0")" && pwd)
rounds=$1 a=$2 b=$3
shift 3
out=/dev/null
if [ "${1:-}" = --out ]; then out=$2; shift 2; fi
[ "${1:-}" = -- ] && shift
exec "$here/alternate.sh" "$rounds" "$out" "A=@$a" "B=@$b" -- "$@"
