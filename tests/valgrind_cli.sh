#!/bin/sh
# Malformed inputs through the CLI under valgrind memcheck: each must fail
# with exit 1 or 2 (never valgrind's 42: invalid reads/writes, uninitialized
# values, definite leaks) and leave the sentinel output untouched.
# usage: valgrind_cli.sh ATTN_BINARY TESTS_DIR
set -u
attn=$1
g=$2/golden
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
vg="valgrind -q --error-exitcode=42 --leak-check=full --errors-for-leak-kinds=definite"
printf 'garbage, not safetensors' > "$tmp/garbage.safetensors"
head -c 40 "$g/sa_v2_0.weights.safetensors" > "$tmp/truncated.safetensors"
pass=0
fail=0
check() { # expected-exit-codes args...
  want=$1
  shift
  printf 'sentinel' > "$tmp/out.safetensors"
  OMP_NUM_THREADS=1 $vg "$attn" "$@" --output "$tmp/out.safetensors" >/dev/null 2>"$tmp/err"
  rc=$?
  if echo " $want " | grep -q " $rc " && [ "$(cat "$tmp/out.safetensors")" = sentinel ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAILED (exit $rc, want $want): attn $*"
    cat "$tmp/err"
  fi
}
check "1" run sa_v2 --weights "$tmp/garbage.safetensors" --input "$g/sa_v2_0.io.safetensors"
check "1" run sa_v2 --weights "$tmp/truncated.safetensors" --input "$g/sa_v2_0.io.safetensors"
check "1" run sa_v2 --weights "$g/sa_v2_0.weights.safetensors" --input "$tmp/garbage.safetensors"
check "1" run causal --weights "$g/sa_v2_0.weights.safetensors" --input "$g/sa_v2_0.io.safetensors"
check "1" run sa_v2 --weights "$g/causal_0.weights.safetensors" --input "$g/sa_v2_0.io.safetensors"
check "1" run fused_mha --heads 7 --weights "$g/fused_mha_41.weights.safetensors" --input "$g/fused_mha_41.io.safetensors"
check "1" run sa_v2 --weights "$g/sa_v2_0.weights.safetensors" --input "$g/sa_v2_0.io.safetensors" --grad --input "$g/simple_0.io.safetensors"
check "2" run causal --weights w --input i --dropout 2
check "2" run bogus --weights w --input i
# and one valid run, with gradients
printf 'sentinel' > "$tmp/ok.safetensors"
if OMP_NUM_THREADS=1 $vg "$attn" run cross --heads 3 --weights "$g/cross_44.weights.safetensors" \
     --input "$g/cross_44.io.safetensors" --output "$tmp/ok.safetensors" --grad >/dev/null 2>"$tmp/err"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAILED: valid cross --grad run under valgrind"
  cat "$tmp/err"
fi
# heatmaps: the layout and both renderings, with labels that stress them
# (UTF-8, empty, long, markup), and a failing one that must keep the sentinel
for ext in svg png; do
  printf 'sentinel' > "$tmp/map.$ext"
  if OMP_NUM_THREADS=1 $vg "$attn" heatmap causal_mha --heads 2 --context-length 18 \
       --weights "$g/causal_mha_16.weights.safetensors" --input "$g/causal_mha_16.io.safetensors" --batch 1 --head 1 \
       --output "$tmp/map.$ext" >/dev/null 2>"$tmp/err" &&
     OMP_NUM_THREADS=1 $vg "$attn" heatmap sa_v1 --weights "$g/sa_v1_0.weights.safetensors" \
       --input "$g/sa_v1_0.io.safetensors" --output "$tmp/tok.$ext" \
       --tokens "Ünïcödé,,a-very-long-token-that-gets-cut,<b>&,\",x" >/dev/null 2>>"$tmp/err" &&
     [ "$(head -c 8 "$tmp/map.$ext")" != sentinel ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAILED: heatmap .$ext under valgrind"
    cat "$tmp/err"
  fi
done
printf 'sentinel' > "$tmp/keep.png"
OMP_NUM_THREADS=1 $vg "$attn" heatmap sa_v1 --weights "$g/sa_v1_0.weights.safetensors" --input "$g/sa_v1_0.io.safetensors" \
  --output "$tmp/keep.png" --tokens a,b >/dev/null 2>"$tmp/err"
rc=$?
if [ "$rc" = 2 ] && [ "$(cat "$tmp/keep.png")" = sentinel ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAILED (exit $rc, want 2): heatmap with too few tokens"
fi
echo "valgrind_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
