#!/bin/sh
# libattn next to ONNX Runtime (CPU, npm package onnxruntime-node) on the
# same attention problems, in alternating rounds in one run (this VM's speed
# drifts: only ratios within a round mean something). ONNX Runtime runs its
# fused MultiHeadAttention (com.microsoft), non-causal or unidirectional
# (causal), on a model this script builds; `npm install` on first use is the
# only download (--ignore-scripts: the CPU library ships in the package; its
# install script would fetch GPU extras from nuget.org). Not part of `make test`.
# usage: bench/ort/compare.sh [ROUNDS] [THREADS]   (env ATTN: the attn binary)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
attn=${ATTN:-$here/../../build/attn}
py=${PYTHON:-/usr/bin/python3} # with numpy (Debian's python3-numpy)
rounds=${1:-5}
threads=${2:-2}
[ -d "$here/node_modules/onnxruntime-node" ] || (cd "$here" && npm install --no-audit --no-fund --ignore-scripts --silent >/dev/null)
# first: ONNX Runtime computes the same attention as libattn (S = 96, both kinds)
chk=$(mktemp -d)
trap 'rm -rf "$chk"' EXIT
for causal in 0 1; do
  ORT_DUMP=$chk node "$here/ort_bench.js" 1 2 96 32 $causal 1 0 >/dev/null
  PYTHONPATH=$here/../../python LIBATTN_LIBRARY=${LIBATTN_LIBRARY:-$here/../../build/libattn.so} "$py" - "$chk" $causal <<'PY'
import sys, numpy as np, libattn
d, causal = sys.argv[1], int(sys.argv[2])
q, k, v, o = (np.fromfile("%s/%s.f32" % (d, n), np.float32).reshape(1, 96, 2, 32).transpose(0, 2, 1, 3) for n in "q k v out".split())
ours = libattn.sdpa(q, k, v, causal="top-left" if causal else "none")
err = float(np.max(np.abs(ours - o)))
print("check: ONNX Runtime %s vs libattn, max |diff| %.2e" % ("causal" if causal else "non-causal", err), file=sys.stderr)
sys.exit(0 if err < 1e-4 else 1)
PY
done
all=$here/../results/$(sh "$here/../host_kind.sh")/ort-compare.jsonl # every run, appended
out=$(mktemp) # this run's rows, summarized below
trap 'rm -rf "$chk" "$out"' EXIT
mkdir -p "$here/../results"
mkdir -p "$(dirname "$all")"
echo "libattn vs ONNX Runtime, $threads threads, $rounds rounds; JSON appended to $all" >&2
for shape in "8 2048 64 0" "8 2048 64 1" "8 4096 64 0" "8 4096 64 1" "8 2048 128 0" "8 2048 128 1"; do
  set -- $shape
  H=$1 S=$2 D=$3 causal=$4
  cflag=""
  [ "$causal" = 1 ] && cflag="--causal"
  r=1
  while [ $r -le "$rounds" ]; do
    a=$("$attn" bench --heads "$H" --seq "$S" --head-dim "$D" $cflag --threads "$threads" --min-time 1 --json | tail -1)
    o=$(node "$here/ort_bench.js" 1 "$H" "$S" "$D" "$causal" "$threads" 1)
    echo "$a" >> "$out"
    echo "$o" >> "$out"
    r=$((r + 1))
  done
done
"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cases = {}
for i in range(0, len(rows), 2):
    a, o = rows[i], rows[i + 1]
    k = (a["H"], a["Sq"], a["D"], a["causal"])
    cases.setdefault(k, []).append((a["gflops"], o["gflops"], a.get("sgemm_gflops", 0.0)))
print("| H | S | D | causal | libattn GFLOP/s | ORT GFLOP/s | libattn / ORT (per round) | libattn / sgemm |")
print("|---|---|---|---|---|---|---|---|")
for (H, S, D, c), v in cases.items():
    la = [x[0] for x in v]; oo = [x[1] for x in v]; rt = [x[0] / x[1] for x in v]
    sg = [x[0] / x[2] for x in v if x[2] > 0]
    med = statistics.median
    print("| %d | %d | %d | %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f (%.2f-%.2f) | %s |" % (
        H, S, D, "yes" if c else "no", med(la), min(la), max(la), med(oo), min(oo), max(oo), med(rt), min(rt),
        max(rt), "%.2f" % med(sg) if sg else "-"))
PY
RECORD_ALL=1 "$py" "$here/../record.py" "$all" "bench/ort/compare.sh $rounds $threads" <"$out" >/dev/null
