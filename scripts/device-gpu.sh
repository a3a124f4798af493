#!/bin/sh
# GPU runtime evidence on the device machine (one H200), from the repository
# root with .devdeps carried: builds the GPU test and kt-bench, runs test_gpu,
# then kt-bench e2e on the models in $MODELS (NAME:SECONDS ...; default
# full-depth Qwen3-30B-A3B for 300 s, then DeepSeek-V3-shaped FP8 layers for
# 140 s: about 9 minutes in all), checkpoints in a RAM-backed tmpfs. Logs in
# $OUT. E2E_ARGS adds kt-bench e2e flags (--layerwise auto, --no-cpu-row).
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT" /mnt/kt
mount -t tmpfs -o size=120G,huge=always tmpfs /mnt/kt || exit 1
meson setup build-device --buildtype=release -Dcuda=enabled -Dgpu_sm=90 >/dev/null &&
  ninja -C build-device -j16 tests/unit/test_gpu tools/kt-bench/kt-bench >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
cd build-device
export KT_TEST_DATA=$PWD/../tests/data KT_SOURCE_ROOT=$PWD/.. KT_BUILD_ROOT=$PWD
export LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH
timeout ${TEST_LIMIT:-90} ./tests/unit/test_gpu >"$OUT/test_gpu.log" 2>&1; echo "test_gpu rc=$?"
grep -E "^\[  (FAILED|PASSED)|DIFFERENT|Failure" "$OUT/test_gpu.log" | head -20
# SANITIZE="memcheck racecheck": compute-sanitizer over test_gpu, one test a
# process and one process at a time (18 at once shared the GPU and the CPUs
# and none finished in 230 s: 11-30 03:53), each cut at SAN_LIMIT seconds
# (default 120); per tool one log in $OUT: a summary line a test, then the
# first lines of each report; SAN_ARGS adds compute-sanitizer options (its
# kernel-name filters keep cuBLAS's own kernels out, whose racecheck reports
# were the only ones at 03:53). MODELS= (empty) skips the e2e runs below.
for tool in ${SANITIZE:-}; do
  log="$OUT/$tool.log"; : >"$log"
  for t in $(grep -o 'cmocka_unit_test(test_[a-z0-9_]*)' ../tests/unit/test_gpu.c |
             sed 's/.*(\(.*\))/\1/'); do
    start=$(date +%s)
    KT_TEST_FILTER=$t timeout ${SAN_LIMIT:-120} compute-sanitizer --tool "$tool" \
      ${SAN_ARGS:-} ./tests/unit/test_gpu >"$OUT/san.tmp" 2>&1
    rc=$?
    echo "== $tool $t: rc=$rc, $(( $(date +%s) - start )) s, $(grep -E \
      'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)' "$OUT/san.tmp" | tr '\n' ' ')" |
      tee -a "$log"
    grep -B1 -A8 -m3 "Error\|hazard" "$OUT/san.tmp" >>"$log"
  done
  rm -f "$OUT/san.tmp"
done
# HYBRID_BENCH=1: first the CPU backend driven as the runtime drives it, with
# the weights on the huge-page tmpfs, with and without a spinning thread on
# worker 0's CPU (kt-bench hybrid; about a minute).
if [ "${HYBRID_BENCH:-0}" = 1 ]; then
  ./tools/kt-bench/kt-bench hybrid --dir /mnt/kt --memory anon,file --tokens 1,2048 \
    --gaps 0,300 --min-time 0.5 >"$OUT/hybrid-qwen3.log" 2>&1
  ./tools/kt-bench/kt-bench hybrid --dir /mnt/kt --memory anon --tokens 1 --gaps 300 \
    --min-time 0.5 --spinner 0 >"$OUT/hybrid-qwen3-spinner.log" 2>&1
  grep -v "^# CPU\|^# ISA" "$OUT/hybrid-qwen3.log" "$OUT/hybrid-qwen3-spinner.log"
fi
# Budgets from 100 % down, so the GPU-heavy rows come first; each model's
# kt-bench stops starting measurements after its limit (the 61 GB Qwen3
# checkpoint alone takes about 130 s to write there).
for m in ${MODELS-qwen3-30b-a3b:${QWEN_LIMIT:-300} deepseek-v3:${DSV3_LIMIT:-140}}; do
  name=${m%%:*}; lim=${m#*:}; [ "$lim" = "$m" ] && lim=150
  KT_GPU_TRACE=1 timeout $((lim + 25)) ./tools/kt-bench/kt-bench e2e --dir /mnt/kt --gen 16 \
    --budgets ${BUDGETS:-100,50,25,0} --json "$OUT/e2e-$name.json" --model "$name" \
    --time-limit "$lim" ${E2E_ARGS:-} >"$OUT/e2e-$name.log" 2>&1
  echo "$name rc=$?"; grep -v "^# CPU\|^# ISA" "$OUT/e2e-$name.log"
done
