#!/bin/sh
# `attn bench --decode`'s read bandwidth next to the plain multi-accumulator
# sum (bench/readbw_plain.c, -march=native), ROUNDS alternating rounds on 1
# and on 2 threads. JSON lines appended to OUT (default bench/results/<host kind>/readbw.jsonl).
# usage: bench/readbw_check.sh [ROUNDS] [OUT]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
attn=${ATTN:-$here/../build/attn}
rounds=${1:-3}
out=${2:-$here/results/$(sh "$here/host_kind.sh")/readbw.jsonl}
mkdir -p "$(dirname "$out")"
bin=$(mktemp)
gcc -O3 -march=native -ffast-math -fopenmp "$here/readbw_plain.c" -o "$bin"
r=1
while [ "$r" -le "$rounds" ]; do
  for th in 1 2; do
    plain=$(OMP_NUM_THREADS=$th "$bin" | sed 's/.*median \([0-9.]*\).*/\1/')
    bench=$(OMP_NUM_THREADS=$th "$attn" bench --decode --heads 32 --kv-heads 8 --head-dim 128 --kv-seq 32768 \
      --min-time 0.5 --json | sed 's/.*"read_gbps": \([0-9.]*\).*/\1/')
    line="{\"round\": $r, \"threads\": $th, \"cpu_family\": $fam, \"date\": \"$(date -u +%Y-%m-%dT%H:%M)\", \"plain_sum_gbps\": $plain, \"bench_read_gbps\": $bench}"
    echo "$line" | tee -a "$out"
  done
  r=$((r + 1))
done
rm -f "$bin"
