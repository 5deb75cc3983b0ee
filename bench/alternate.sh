#!/bin/sh
# The one round-robin runner behind bench/ab.sh and bench/isa_ab.sh:
# `attn bench ARGS --json` for each SIDE in turn, ROUNDS rounds (the VM's
# speed drifts: compare within a round). A SIDE is LABEL=ISA@BINARY (ISA
# may be empty: the default table). Each JSON line is tagged with the round,
# the side, the host kind, CPU, date and command (the fields bench/record.py
# gives a row; python/tests/test_docs.py checks them) and appended to OUT;
# the summary gives per
# side the median and range of the figure (GFLOP/s or GB/s) and of its
# same-run ratio, and the median of the per-round ratio of the first side to
# the second.
# usage: bench/alternate.sh ROUNDS OUT SIDE... -- BENCH_ARGS...
set -eu
rounds=$1 out=$2
shift 2
sides=""
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do sides="$sides $1"; shift; done
[ "${1:-}" = -- ] && shift
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
kind=$(sh "$(dirname "$0")/host_kind.sh")
fam=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
model=$(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
tmp=$(mktemp)
r=1
while [ "$r" -le "$rounds" ]; do
  for s in $sides; do
    label=${s%%=*} rest=${s#*=}
    isa=${rest%%@*} bin=${rest#*@}
    if [ -n "$isa" ]; then line=$(ATTN_ISA=$isa "$bin" bench "$@" --json); else line=$("$bin" bench "$@" --json); fi
    cmd="${isa:+ATTN_ISA=$isa }attn bench $* --json"
    echo "$line" | sed "s|^{|{\"host_kind\": \"$kind\", \"cpu_model_name\": \"$cpu\", \"command\": \"$cmd\", \"round\": $r, \"side\": \"$label\", \"binary\": \"$bin\", \"host_cpu\": \"$cpu\", \"cpu_family\": $fam, \"cpu_model\": $model, \"date\": \"$(date -u +%Y-%m-%dT%H:%M)\", \"args\": \"$*\", |" | tee -a "$tmp" >>"$out"
  done
  r=$((r + 1))
done
python3 - "$tmp" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
fig = "gflops" if "gflops" in rows[0] else "gbps"
rat = "ratio_to_sgemm" if "ratio_to_sgemm" in rows[0] else "ratio_to_read"
sides = list(dict.fromkeys(r["side"] for r in rows))
for s in sides:
    v = [r for r in rows if r["side"] == s]
    f = [r[fig] for r in v]; q = [r[rat] for r in v]
    print("%-10s %-10s %s median %.1f (%.1f-%.1f)  %s median %.3f (%.3f-%.3f)  n=%d" % (
        s, v[0]["kernels"], fig, st.median(f), min(f), max(f), rat, st.median(q), min(q), max(q), len(v)))
if len(sides) >= 2:
    a = [r[fig] for r in rows if r["side"] == sides[0]]; b = [r[fig] for r in rows if r["side"] == sides[1]]
    pr = [x / y for x, y in zip(a, b)]
    print("%s/%s per round: median %.3f (%.3f-%.3f)" % (sides[0], sides[1], st.median(pr), min(pr), max(pr)))
PY
rm -f "$tmp"
