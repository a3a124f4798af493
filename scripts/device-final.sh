#!/bin/sh
# The lead's closing evidence in one device call (~5 min), from release
# binaries built here for sm_90 and carried in $BIN (scripts/device-pack.sh B;
# with .devdeps):   sh scripts/device-final.sh
# Most important first, so that a call cut short still brings back the logs:
# 1. test_gpu (every fixture family against transformers), then its expert-move
#    tests under compute-sanitizer memcheck;
# 2. the CPU MoE kernel tests on the Xeon's real AMX tiles;
# 3. 48-layer Qwen3-30B-A3B end to end: GPU experts 50 / 0 / 100 %, prompts
#    2048 and 8192, layerwise prefill auto (the default in kt-run);
# 4. kt-run on that checkpoint, half the experts on the GPU, with and without
#    --gpu-rebalance (decode tok/s while experts move);
# 5. AMX and CPU-method prefill rows on the Xeon while LIMIT (540 s) allows.
# Logs in $OUT.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; BIN=${BIN:-.lead}
mkdir -p "$OUT" && kt_device_bin "$BIN" || exit 1
kt_device_tmpfs 100G || exit 1
T0=$(date +%s)
at() { echo "($(($(date +%s) - T0)) s)"; }
tests=$BIN/tests/unit
timeout 150 "$tests/test_gpu" > "$OUT/test_gpu.log" 2>&1
echo "test_gpu rc=$? $(at)"; kt_summary "$OUT/test_gpu.log"
grep -E "moves|rebalance|layerwise prefill" "$OUT/test_gpu.log" | head -8
KT_TEST_FILTER='test_expert_moves*' timeout 90 compute-sanitizer --tool memcheck \
    "$tests/test_gpu" > "$OUT/memcheck-moves.log" 2>&1
echo "memcheck moves rc=$? $(at)"; kt_summary "$OUT/memcheck-moves.log"
for t in test_moe_kernels test_moe test_llamafile test_mover; do
    [ -x "$tests/$t" ] || continue
    timeout 90 "$tests/$t" > "$OUT/$t.log" 2>&1
    echo "$t rc=$? $(at)"; kt_summary "$OUT/$t.log"
done
bench=$BIN/tools/kt-bench/kt-bench
timeout 240 $bench e2e --dir /mnt/kt --keep --model qwen3-30b-a3b --budgets 50,0,100 \
    --prompts 2048,8192 --gen 32 --warmup 2048 --no-cpu-row --layerwise auto \
    > "$OUT/e2e-qwen3-48.log" 2>&1
echo "e2e rc=$? $(at)"; grep -v "^# CPU\|^# ISA" "$OUT/e2e-qwen3-48.log" | tail -12
ck=/mnt/kt/kt-e2e-qwen3-30b-a3b-48
ids=$(seq -s, 11 74)
for rb in 0 8; do
    timeout 60 $BIN/tools/kt-run/kt-run generate --model "$ck" --prompt-ids "$ids" -n 96 \
        --gpu-experts 0.5 --gpu-rebalance $rb > "$OUT/kt-run-rebalance-$rb.log" 2>&1
    echo "kt-run --gpu-rebalance $rb rc=$? $(at)"; tail -3 "$OUT/kt-run-rebalance-$rb.log"
done
# 5. AMX prefill (DeepSeek-V3 and Qwen3 shapes) and the CPU methods, while time is left
left() { echo $((${LIMIT:-540} - ($(date +%s) - T0))); }
if [ "$(left)" -gt 130 ]; then
    timeout 80 $bench moe --model deepseek-v3 --method AMXINT8,AMXINT4 --group-size 128 \
        --tokens 1024,4096 --no-onednn --layers 2 > "$OUT/amx.txt" 2>&1
    timeout 40 $bench moe --model qwen3-30b-a3b --method AMXINT8,AMXINT4 --group-size 128 \
        --tokens 1024 --layers 4 >> "$OUT/amx.txt" 2>&1
    echo "amx rc=$? $(at)"; grep -v "^#" "$OUT/amx.txt" | tail -12
fi
if [ "$(left)" -gt 70 ]; then
    timeout 60 $bench moe --model deepseek-v3 --method BF16,FP8,RAWINT4 --tokens 1,1024 \
        --layers 2 > "$OUT/cpu-moe.txt" 2>&1
    echo "cpu moe rc=$? $(at)"; grep -v "^#" "$OUT/cpu-moe.txt" | tail -10
fi
