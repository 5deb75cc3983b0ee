#!/bin/sh
# libattn's decode next to ggml's flash attention (bench/ggml/ggml_decode.c)
# on T = 4k .. 128k cached tokens (TS), Hq = 32, Hkv = 8, D = 128, f32 / f16 /
# q8_0 / q4_0 caches (KVS), libattn's math mode MATH (strict, or data: q
# rounded for the products as ggml rounds it), alternating rounds in one
# process; rows appended to bench/results/<host kind>/$OUT (default
# ggml-decode.jsonl, which make plots draws). ggml
# is not a dependency: GGML_DIR is a ggml checkout, built once as
# bench/ggml/compare.sh builds it. Not part of `make test`.
# usage: GGML_DIR=/path/to/ggml [TS=...] [KVS=...] [MATH=data] [OUT=...] bench/ggml/decode.sh [ROUNDS] [THREADS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
rounds=${1:-3}
threads=${2:-2}
: "${GGML_DIR:?set GGML_DIR to a ggml source checkout}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sh "$here/build.sh" "$here/ggml_decode.c" "$tmp/ggml_decode" "$threads"
all=$root/bench/results/$(sh "$root/bench/host_kind.sh")/${OUT:-ggml-decode.jsonl}
mkdir -p "$(dirname "$all")"
for T in ${TS:-4096 16384 65536 131072}; do
  for kv in ${KVS:-f32 f16 q8_0 q4_0}; do
    OMP_NUM_THREADS=$threads "$tmp/ggml_decode" 32 8 "$T" 128 $kv "$threads" "$rounds" ${MATH:-strict} >"$tmp/rows"
    RECORD_ALL=1 ${PYTHON:-/usr/bin/python3} "$root/bench/record.py" "$all" \
      "GGML_DIR=... TS=\"${TS:-}\" KVS=\"${KVS:-}\" MATH=${MATH:-strict} bench/ggml/decode.sh $rounds $threads" \
      peer=ggml <"$tmp/rows"
  done
done
