#!/bin/sh
# The measurements behind docs/img (make plots), on this host, appended to
# bench/results/<host kind>/prefill.jsonl and decode.jsonl (JSON lines with
# host kind, CPU model, date and command; bench/record.py):
#   prefill: S = 512 .. 8192, H = 8, D = 64, causal and not: libattn (with the
#     same run's unrestricted sgemm, --blas-env clear) and ONNX Runtime
#     (bench/ort, when node is installed), alternating per round;
#   decode: T = 4k .. 128k, Hq = 32, Hkv = 8, D = 128, each cache type, with
#     the same run's read bandwidth.
# Not part of `make test` (minutes of machine time). ggml joins through
# bench/ggml/compare.sh (it needs a ggml checkout).
# usage: bench/sweep.sh [prefill|decode|all] [ROUNDS] [THREADS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
attn=${ATTN:-$here/../build/attn}
what=${1:-all}
rounds=${2:-3}
threads=${3:-2}
py=${PYTHON:-/usr/bin/python3}
dir=$here/results/$(sh "$here/host_kind.sh")
mkdir -p "$dir"
rec() { # rec FILE COMMAND...: run it, append its JSON line
  f=$1
  shift
  "$@" | "$py" "$here/record.py" "$f" "$*" peer="${peer:-libattn}" round="$r" >/dev/null
}
ort=0
if command -v node >/dev/null 2>&1; then
  [ -d "$here/ort/node_modules/onnxruntime-node" ] ||
    (cd "$here/ort" && npm install --no-audit --no-fund --ignore-scripts --silent >/dev/null 2>&1) || true
  [ -d "$here/ort/node_modules/onnxruntime-node" ] && ort=1
fi
if [ "$what" = prefill ] || [ "$what" = all ]; then
  for S in 512 1024 2048 4096 8192; do
    for c in 0 1; do
      cf=""
      [ $c = 1 ] && cf=--causal
      r=1
      while [ $r -le "$rounds" ]; do
        peer=libattn rec "$dir/prefill.jsonl" "$attn" bench --heads 8 --head-dim 64 --seq $S $cf --threads "$threads" \
          --min-time 0.5 --sgemm-n 2048 --blas-env clear --json
        [ $ort = 1 ] && peer=onnxruntime rec "$dir/prefill.jsonl" node "$here/ort/ort_bench.js" 1 8 $S 64 $c "$threads" 0.5
        r=$((r + 1))
      done
    done
  done
fi
if [ "$what" = decode ] || [ "$what" = all ]; then
  for T in 4096 16384 65536 131072; do
    for dt in f32 f16 bf16 q8_0; do
      r=1
      while [ $r -le "$rounds" ]; do
        peer=libattn rec "$dir/decode.jsonl" "$attn" bench --decode --heads 32 --kv-heads 8 --head-dim 128 \
          --kv-seq $T --kv-dtype $dt --threads "$threads" --min-time 0.5 --sgemm-n 0 --json
        r=$((r + 1))
      done
    done
  done
fi
echo "sweep: appended to $dir" >&2
