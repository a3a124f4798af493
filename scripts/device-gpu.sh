#!/bin/sh
# GPU runtime evidence on the device machine (one H200), from the repository
# root with .devdeps carried: builds the GPU test and kt-bench, runs test_gpu,
# then kt-bench e2e on the models in $MODELS (NAME:SECONDS ...; default
# full-depth Qwen3-30B-A3B for 300 s, then DeepSeek-V3-shaped FP8 layers for
# 140 s: about 9 minutes in all), checkpoints in a RAM-backed tmpfs. Logs in
# $OUT. E2E_ARGS adds kt-bench e2e flags (--layerwise auto, --no-cpu-row).
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
kt_device_tmpfs 120G || exit 1
kt_device_build build-device tests/unit/test_gpu tools/kt-bench/kt-bench || exit 1
timeout ${TEST_LIMIT:-90} ./tests/unit/test_gpu >"$OUT/test_gpu.log" 2>&1; echo "test_gpu rc=$?"
grep -E "^\[  (FAILED|PASSED)|DIFFERENT|Failure" "$OUT/test_gpu.log" | head -20
# SANITIZE="memcheck racecheck": compute-sanitizer over test_gpu, one test at
# a time, each cut at SAN_LIMIT seconds (default 120): kt_device_sanitize in
# scripts/device-env.sh. MODELS= (empty) skips the e2e runs below.
for tool in ${SANITIZE:-}; do
  kt_device_sanitize "$tool" ./tests/unit/test_gpu "${SAN_LIMIT:-120}"
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
