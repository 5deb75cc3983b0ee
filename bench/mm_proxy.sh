#!/bin/sh
# The block products through oneDNN measured where the host has no AMX: the
# same calls, reorders and tiles as on an AMX host, with float32 matmuls on
# the rounded operands (ATTN_PRODUCTS=onednn), against oneDNN's own float32
# matmul line and the kernels' path (ATTN_PRODUCTS=kernels), each bench
# timing its line in alternating rounds; the softmax pass's cycles a score
# on every table; decode with many rows a kv head (cascade's prefix, MLA).
# Appends to bench/results/<host kind>/mm-proxy.jsonl.
# usage: bench/mm_proxy.sh [ATTN_BINARY] [MIN_TIME]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
attn=${1:-$here/../build/attn}
t=${2:-4}
kind=$(sh "$here/host_kind.sh")
out=$here/results/$kind/mm-proxy.jsonl
mkdir -p "$(dirname "$out")"
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
rec() { # products label args...
  p=$1 label=$2
  shift 2
  ATTN_PRODUCTS=$p "$attn" bench "$@" --json --min-time "$t" |
    python3 "$here/record.py" "$out" "ATTN_PRODUCTS=$p attn bench $* --json" products="$p" case="$label" commit="$commit"
}
for D in 128 64; do
  for c in "" --causal; do
    for p in onednn kernels; do
      rec $p prefill --seq 2048 --heads 8 --head-dim $D --dtype bf16 --math data $c --threads 2
    done
  done
  for p in onednn kernels; do
    rec $p backward --seq 2048 --heads 8 --head-dim $D --dtype bf16 --math data --backward --threads 2
  done
done
for isa in avx2 avx512 avx512-256 generic; do
  ATTN_ISA=$isa "$attn" bench --pass --json --min-time 1 2>/dev/null |
    python3 "$here/record.py" "$out" "ATTN_ISA=$isa attn bench --pass --json" case=pass commit="$commit" || true
done
for p in onednn kernels; do
  rec $p cascade --decode --cascade --batch 16 --heads 32 --kv-heads 8 --kv-seq 16384 --head-dim 128 --kv-dtype bf16 \
    --math data --threads 2
  rec $p mla --decode --mla --heads 128 --head-dim 576 --kv-seq 8192 --kv-dtype bf16 --math data --threads 2
done
rec kernels cascade --decode --cascade --batch 16 --heads 32 --kv-heads 8 --kv-seq 16384 --head-dim 128 --threads 2
rec kernels mla --decode --mla --heads 128 --head-dim 576 --kv-seq 8192 --threads 2
echo "appended to $out"
