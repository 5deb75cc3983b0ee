#!/bin/sh
# Two attn binaries side by side: `attn bench ARGS --json` from A, then B, for
# ROUNDS alternating rounds (the VM's speed drifts: compare within a round).
# Prints per-binary medians and the median of the per-round ratios A/B of the
# figure (GFLOP/s or GB/s) and of the same-run ratio to the machine's limit.
# usage: bench/ab.sh ROUNDS ATTN_A ATTN_B [--out FILE] -- BENCH_ARGS...
set -eu
rounds=$1 a=$2 b=$3
shift 3
out=/dev/null
if [ "${1:-}" = --out ]; then out=$2; shift 2; fi
[ "${1:-}" = -- ] && shift
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
fam=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
tmp=$(mktemp)
r=1
while [ "$r" -le "$rounds" ]; do
  for side in A B; do
    bin=$a; [ $side = B ] && bin=$b
    line=$("$bin" bench "$@" --json)
    echo "$line" | sed "s|^{|{\"round\": $r, \"side\": \"$side\", \"binary\": \"$bin\", \"host_cpu\": \"$cpu\", \"cpu_family\": $fam, \"date\": \"$(date -u +%Y-%m-%dT%H:%M)\", \"args\": \"$*\", |" | tee -a "$tmp" >>"$out"
  done
  r=$((r + 1))
done
python3 - "$tmp" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
fig = "gflops" if "gflops" in rows[0] else "gbps"
rat = "ratio_to_sgemm" if "ratio_to_sgemm" in rows[0] else "ratio_to_read"
for side in "AB":
    v = [r for r in rows if r["side"] == side]
    f = [r[fig] for r in v]; q = [r[rat] for r in v]
    print("%s %-9s %s median %.1f (%.1f-%.1f)  %s median %.3f (%.3f-%.3f)" % (
        side, v[0]["kernels"], fig, st.median(f), min(f), max(f), rat, st.median(q), min(q), max(q)))
ra = [r[fig] for r in rows if r["side"] == "A"]; rb = [r[fig] for r in rows if r["side"] == "B"]
pr = [x / y for x, y in zip(ra, rb)]
print("A/B per round: median %.3f (%.3f-%.3f)" % (st.median(pr), min(pr), max(pr)))
PY
rm -f "$tmp"
