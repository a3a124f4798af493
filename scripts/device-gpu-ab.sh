#!/bin/sh
# A/B of decode kernel variants on the device machine (one H200) in one call,
# from the repository root with .devdeps carried and release binaries built
# here (sm_90) copied into $BIN, a git-ignored folder carried along, laid out
# as the build directory (lib/libkt.so.0, tools/kt-bench/kt-bench,
# tests/unit/test_gpu; default .gpu8), so nothing is compiled there:
#   sh scripts/device-gpu-ab.sh
# First test_gpu's decode comparisons (test_*_decode: the kernels against the
# CPU engine over 300 cached positions, the folds and KT_GPU_GEMV variants
# against the earlier kernels), then the 12-layer Qwen3-30B-A3B decode at
# 100 % of the experts on the GPU (kt-bench e2e, checkpoint kept between runs)
# with $AB_VAR at each of $AB_VALS (default KT_GPU_GEMV: 31 the default, 0 the
# earlier kernels, each bit alone, the first two again), a KT_GPU_TRACE=2
# phase profile of the default, and the whole test_gpu within what is left of
# $LIMIT seconds (default 200). Logs in $OUT.
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; BIN=${BIN:-.gpu8}; LIMIT=${LIMIT:-200}
T0=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - T0))); }
mkdir -p "$OUT" && kt_device_tmpfs 40G && kt_device_bin "$BIN" || exit 1
t=$OUT/test_gpu.log
{ date -u +%T; echo "# KT_TEST_FILTER='test_*_decode'"; } >"$t"
KT_TEST_FILTER='test_*_decode' timeout 60 "$BIN/tests/unit/test_gpu" >>"$t" 2>&1
echo "test_*_decode rc=$? ($(left) s left)"
E2E="$BIN/tools/kt-bench/kt-bench e2e --dir /mnt/kt --keep --model qwen3-30b-a3b --layers 12
  --budgets 100 --prompts 2048 --gen 32 --warmup 2048 --no-cpu-row"
log=$OUT/e2e-ab.log
{ date -u +%T; uptime; echo "# $E2E"; } >"$log"
for v in ${AB_VALS:-31 0 1 2 4 8 16 31 0}; do
  [ "$(left)" -gt 75 ] || break
  echo "# ${AB_VAR:-KT_GPU_GEMV}=$v" >>"$log"
  env "${AB_VAR:-KT_GPU_GEMV}=$v" timeout 50 $E2E 2>&1 | grep -v "^# CPU\|^# ISA" >>"$log"
done
echo "# KT_GPU_TRACE=2 (default)" >>"$log"
[ "$(left)" -gt 60 ] && KT_GPU_TRACE=2 timeout 45 $E2E 2>&1 | grep -v "^# CPU\|^# ISA" >>"$log"
grep -E "^# KT|^# [A-Z_]+=|qwen3-30b-a3b +100%|phase|decode step" "$log"
echo "# the whole test_gpu, $(left) s left" >>"$t"
timeout $(( $(left) > 20 ? $(left) - 5 : 15 )) "$BIN/tests/unit/test_gpu" >>"$t" 2>&1
echo "test_gpu rc=$?"
grep -E "^\[  (FAILED|PASSED)|^\[       OK|Failure|DIFFERENT" "$t" | head -40
