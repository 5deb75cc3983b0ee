#!/bin/sh
# libattn next to ggml's CPU flash attention (ggml_flash_attn_ext: what
# llama.cpp runs) on the same data, alternating rounds in one process
# (bench/ggml/ggml_bench.c). ggml is not a dependency of libattn: point
# GGML_DIR at a ggml checkout (https://github.com/ggml-org/ggml, or
# llama.cpp's ggml/ directory); it is built once into $GGML_DIR/build-attn
# with its defaults (-march=native). Not part of `make test`.
# usage: GGML_DIR=/path/to/ggml bench/ggml/compare.sh [ROUNDS] [THREADS]
#   SHAPES="H S D CAUSAL ..." (groups of four) replaces the default shapes
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
rounds=${1:-5}
threads=${2:-2}
: "${GGML_DIR:?set GGML_DIR to a ggml source checkout}"
exe=$(mktemp -d)/ggml_bench
trap 'rm -rf "$(dirname "$exe")"' EXIT
sh "$here/build.sh" "$here/ggml_bench.c" "$exe" "$threads"
all=$root/bench/results/$(sh "$root/bench/host_kind.sh")/ggml-compare.jsonl # every run, appended
mkdir -p "$(dirname "$all")"
out=$(mktemp) # this run's rows, summarized below
trap 'rm -rf "$(dirname "$exe")" "$out"' EXIT
echo "libattn vs ggml flash_attn_ext, $threads threads, $rounds rounds; JSON appended to $all" >&2
set -- ${SHAPES:-8 2048 64 0 8 2048 64 1 8 4096 64 1 8 2048 128 0 8 2048 128 1}
while [ $# -ge 4 ]; do
  OMP_NUM_THREADS=$threads "$exe" "$1" "$2" "$3" "$4" "$threads" "$rounds" >> "$out"
  shift 4
done
${PYTHON:-/usr/bin/python3} - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cases = {}
for r in rows:
    cases.setdefault((r["H"], r["S"], r["D"], r["causal"]), []).append(r)
f = lambda v: "%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v))
print("| H | S | D | causal | libattn GFLOP/s | ggml GFLOP/s | libattn / ggml (per round) |")
print("|---|---|---|---|---|---|---|")
for (H, S, D, c), v in cases.items():
    la = [x["libattn_gflops"] for x in v]; gg = [x["ggml_gflops"] for x in v]
    rt = [a / b for a, b in zip(la, gg)]
    print("| %d | %d | %d | %s | %s | %s | %.2f (%.2f-%.2f) |" % (H, S, D, "yes" if c else "no", f(la), f(gg),
          statistics.median(rt), min(rt), max(rt)))
PY
RECORD_ALL=1 ${PYTHON:-/usr/bin/python3} "$root/bench/record.py" "$all" "GGML_DIR=... bench/ggml/compare.sh $rounds $threads" \
  peer=ggml <"$out" >/dev/null
