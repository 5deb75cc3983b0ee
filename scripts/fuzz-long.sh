#!/bin/sh
# The differential fuzzer (tests/fuzz_paths) on every kernel table this
# build and CPU run, and on the products through oneDNN, several seeds each
# for a fixed budget: the run a release makes (docs/ERRORS.md).
# usage: fuzz-long.sh BUILD_DIR "SEEDS" SECONDS   (a seed "random" draws a fresh one)
set -u
build=$1 seeds=$2 secs=$3
fz=$build/tests/fuzz_paths
[ -x "$fz" ] || { echo "fuzz-long: $fz not built (make build first)"; exit 2; }
fail=0 total=0 runs=0
for side in $("$fz" --tables) onednn; do
  for seed in $seeds; do
    if [ "$side" = onednn ]; then
      out=$(ATTN_PRODUCTS=onednn OMP_WAIT_POLICY=passive "$fz" --seed "$seed" --seconds "$secs" 2>&1)
    else
      out=$(ATTN_ISA=$side ATTN_TEST_SKIP_UNSUPPORTED=1 OMP_WAIT_POLICY=passive "$fz" --seed "$seed" --seconds "$secs" 2>&1)
    fi
    rc=$?
    if [ $rc -eq 77 ]; then echo "$side: not runnable here"; break; fi
    line=$(echo "$out" | grep '^fuzz_paths: seed' | tail -1)
    echo "$side: $line"
    n=$(echo "$line" | sed -n 's/.*, \([0-9]*\) cases in.*/\1/p')
    total=$((total + ${n:-0})) runs=$((runs + 1))
    if [ $rc -ne 0 ]; then
      fail=1
      echo "$out" | grep -E 'FAIL|reproduce' | head -20
    fi
  done
done
echo "fuzz-long: $runs runs, $total cases, $([ $fail -eq 0 ] && echo 'all clean' || echo 'FAILURES above')"
exit $fail
