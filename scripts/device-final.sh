#!/bin/sh
# The lead's closing evidence in one device call (~8 min), from the repository
# root with .devdeps carried:   sh scripts/device-final.sh
# Builds a release (CUDA sm_90), runs test_gpu (every fixture family on the
# H200), AMX prefill (kt-bench moe on the Xeon), the GPU end-to-end rows at 12
# Qwen3-30B-A3B layers and 3 DeepSeek-V3 FP8 layers, test_moe_kernels on the
# real tiles, then compute-sanitizer racecheck on one fixture for what time is
# left. Most important first: a cut-off run still brings back the early logs.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
kt_device_tmpfs 100G || exit 1
kt_device_build build-device tools/kt-bench/kt-bench tests/unit/test_gpu \
    tests/unit/test_moe_kernels || exit 1
timeout 150 ./tests/unit/test_gpu > "$OUT/test_gpu.log" 2>&1
echo "test_gpu rc=$?"; grep -E "^\[  (PASSED|FAILED)|DIFFERENT|Failure|error" "$OUT/test_gpu.log" | head
bench=./tools/kt-bench/kt-bench
date +%H:%M > "$OUT/amx.txt"
timeout 70 $bench moe --model deepseek-v3 --method AMXINT8,AMXINT4 --group-size 128 \
    --tokens 1024,4096 --no-onednn --layers 2 >> "$OUT/amx.txt" 2>&1
timeout 30 $bench moe --model qwen3-30b-a3b --method AMXINT8,AMXINT4 --group-size 128 \
    --tokens 1024 --layers 4 >> "$OUT/amx.txt" 2>&1
echo "amx rc=$?"; grep -v "^#" "$OUT/amx.txt" | tail -14
for m in qwen3-30b-a3b:12 deepseek-v3:3; do
    timeout 100 $bench e2e --dir /mnt/kt --model "${m%%:*}" --layers "${m#*:}" --budgets 100,50 \
        --prompts 2048 --gen 32 --no-cpu-row --warmup 2048 > "$OUT/e2e-${m%%:*}.log" 2>&1
    echo "e2e $m rc=$?"; grep -v "^# CPU\|^# ISA" "$OUT/e2e-${m%%:*}.log" | tail -8
    rm -rf /mnt/kt/*
done
timeout 60 ./tests/unit/test_moe_kernels > "$OUT/test_moe_kernels.log" 2>&1
echo "test_moe_kernels rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$OUT/test_moe_kernels.log"
KT_TEST_FILTER=test_qwen3_moe timeout 70 /usr/local/cuda/bin/compute-sanitizer --tool racecheck \
    ./tests/unit/test_gpu > "$OUT/racecheck.log" 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|hazard|Error" "$OUT/racecheck.log" | head
