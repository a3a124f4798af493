#!/bin/sh
# GPU runtime evidence on the device machine (one H200): builds the GPU test and
# kt-bench, runs test_gpu, then kt-bench e2e on the models in $MODELS (default
# full-depth Qwen3-30B-A3B, then DeepSeek-V3-shaped FP8 layers), checkpoints in
# a RAM-backed tmpfs, each model bounded by $LIMIT seconds. Logs in $OUT.
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT" /mnt/kt
mount -t tmpfs -o size=120G,huge=always tmpfs /mnt/kt || exit 1
meson setup build-device --buildtype=release -Dcuda=enabled -Dgpu_sm=90 >/dev/null &&
  ninja -C build-device -j16 tests/unit/test_gpu tools/kt-bench/kt-bench >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
cd build-device
export KT_TEST_DATA=$PWD/../tests/data KT_SOURCE_ROOT=$PWD/.. KT_BUILD_ROOT=$PWD
export LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH
timeout ${TEST_LIMIT:-60} ./tests/unit/test_gpu >"$OUT/test_gpu.log" 2>&1; echo "test_gpu rc=$?"
grep -E "^\[  (FAILED|PASSED)|DIFFERENT|Failure" "$OUT/test_gpu.log" | head -20
for m in ${MODELS:-qwen3-30b-a3b deepseek-v3}; do
  KT_GPU_TRACE=1 timeout $((${LIMIT:-150} + 30)) ./tools/kt-bench/kt-bench e2e --dir /mnt/kt \
    --gen 16 --budgets 100,50,25,0 --json "$OUT/e2e.json" --model $m --time-limit ${LIMIT:-150} \
    ${E2E_ARGS:-} >"$OUT/e2e-$m.log" 2>&1
  echo "$m rc=$?"; grep -v "^# CPU\|^# ISA" "$OUT/e2e-$m.log"
done
