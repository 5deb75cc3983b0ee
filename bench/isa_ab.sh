#!/bin/sh
# Kernel tables side by side: `attn bench ARGS --json` run under each ATTN_ISA
# in turn, ROUNDS alternating rounds (the VM's speed drifts: compare within a
# round). Prints each line tagged with its round; with --summary (python3), the
# median and range per table of the figure and its same-run ratio.
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
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
fam=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
model=$(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
tmp=$(mktemp)
r=1
while [ "$r" -le "$rounds" ]; do
  for isa in $isas; do
    line=$(ATTN_ISA=$isa "$attn" bench "$@" --json)
    echo "$line" | sed "s|^{|{\"round\": $r, \"host_cpu\": \"$cpu\", \"cpu_family\": $fam, \"cpu_model\": $model, \"date\": \"$(date -u +%Y-%m-%dT%H:%M)\", \"args\": \"$*\", |" | tee -a "$tmp" >>"$out"
  done
  r=$((r + 1))
done
python3 - "$tmp" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    fig = "gflops" if "gflops" in r else "gbps"
    rat = "ratio_to_sgemm" if "ratio_to_sgemm" in r else "ratio_to_read"
    by.setdefault(r["kernels"], []).append((r[fig], r[rat]))
for k, v in by.items():
    f = [a for a, _ in v]; q = [b for _, b in v]
    print("%-8s figure median %.1f (%.1f-%.1f)  ratio median %.3f (%.3f-%.3f)  n=%d" % (
        k, st.median(f), min(f), max(f), st.median(q), min(q), max(q), len(v)))
PY
rm -f "$tmp"
