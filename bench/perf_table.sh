#!/bin/sh
# Produce the GFLOP/s table of docs/PERFORMANCE.md: forward/backward x
# causal/non-causal x S in {512 .. 8192} x D in {64, 128}, B=1, H=8, 2 threads,
# each row next to OpenBLAS sgemm 2048^3 measured in the same process.
# usage: bench/perf_table.sh [ATTN_BINARY] > table.md
set -eu
attn=${1:-build/attn}
threads=${THREADS:-2}
echo "| pass | mask | D | S | ms | GFLOP/s | sgemm GFLOP/s (same run) | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for pass in forward backward; do
  for mask in non-causal causal; do
    for D in 64 128; do
      for S in 512 1024 2048 4096 8192; do
        flags="--threads $threads --heads 8 --seq $S --head-dim $D --json --min-time 1"
        [ "$pass" = backward ] && flags="$flags --backward"
        [ "$mask" = causal ] && flags="$flags --causal"
        line=$("$attn" bench $flags)
        ms=$(echo "$line" | sed 's/.*"ms": \([0-9.]*\).*/\1/')
        gf=$(echo "$line" | sed 's/.*"gflops": \([0-9.]*\).*/\1/')
        sg=$(echo "$line" | sed 's/.*"sgemm_gflops": \([0-9.]*\).*/\1/')
        ra=$(echo "$line" | sed 's/.*"ratio_to_sgemm": \([0-9.]*\).*/\1/')
        echo "| $pass | $mask | $D | $S | $ms | $gf | $sg | $ra |"
      done
    done
  done
done
