#!/bin/sh
# Ring attention measurements on this machine (docs/PERFORMANCE.md, "Ring
# attention"): mpirun -np 2 (one OpenMP thread per rank, the machine's two
# cores), D = 128, forward and backward, causal (zigzag) and not
# (contiguous), S = 8k .. 64k. H is lowered for the longest sequences to keep
# each run under a minute: the per-step compute/message ratio does not depend
# on H when Hkv = H. JSON lines appended to bench/results/<host kind>/ring.jsonl.
# usage: bench/ring_scaling.sh [BUILD_DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
attn=${1:-$here/../build}/attn
out=$here/results/$(sh "$here/host_kind.sh")/ring.jsonl
mkdir -p "$(dirname "$out")"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {
  mpirun --oversubscribe -np 2 "$attn" bench --ring --head-dim 128 --min-time 0 --json "$@" |
    "${PYTHON:-/usr/bin/python3}" "$here/record.py" "$out" "mpirun -np 2 attn bench --ring --head-dim 128 $*"
}
for S in 8192 16384; do
  run --heads 8 --seq $S --causal
  run --heads 8 --seq $S
  run --heads 8 --seq $S --causal --backward
done
for S in 32768 65536; do
  run --heads 1 --seq $S --causal
  run --heads 1 --seq $S --causal --backward
done
