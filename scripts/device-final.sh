#!/bin/sh
# The lead's closing evidence in one device call (~6 min), from release
# binaries built here for sm_90 and carried in $BIN (scripts/device-pack.sh B;
# with .devdeps):   LIMIT=370 sh scripts/device-final.sh
# Most important first, so that a call cut short still brings back the logs:
# 1. test_gpu (every fixture family against transformers) and test_gpu_attn
#    (the prefill attention kernels against attention in double);
# 2. the CPU MoE kernel tests on the Xeon's real AMX tiles;
# 3. 12-layer Qwen3-30B-A3B, all experts on the GPU: session 7's prefill
#    kernels (F32 attention tiles, wmma grouped experts), today's defaults, BF16
#    attention, session 7's decode kernels (KT_GPU_GEMV=863), with the phase
#    split (KT_GPU_TRACE=2);
# 4. 48-layer Qwen3-30B-A3B end to end: GPU experts 100 / 50 %, prompts 2048
#    and 8192 (layerwise prefill auto, the default);
# 5. kt-run on that checkpoint, half the experts on the GPU, with and without
#    --gpu-rebalance, and the prefill attention under compute-sanitizer
#    memcheck, while LIMIT (s) allows.
# Logs in $OUT.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; BIN=${BIN:-.lead}
mkdir -p "$OUT" && kt_device_bin "$BIN" || exit 1
kt_device_tmpfs 100G || exit 1
T0=$(date +%s)
at() { echo "($(($(date +%s) - T0)) s)"; }
left() { echo $((${LIMIT:-370} - ($(date +%s) - T0))); }
tests=$BIN/tests/unit
bench=$BIN/tools/kt-bench/kt-bench
timeout 150 "$tests/test_gpu" > "$OUT/test_gpu.log" 2>&1
echo "test_gpu rc=$? $(at)"; kt_summary "$OUT/test_gpu.log"
grep -E "FAILED|ERROR" "$OUT/test_gpu.log" | head -8
timeout 40 "$tests/test_gpu_attn" > "$OUT/test_gpu_attn.log" 2>&1
echo "test_gpu_attn rc=$? $(at)"; grep -E "tiles|PASSED|FAILED" "$OUT/test_gpu_attn.log"
for t in test_moe_kernels test_moe test_llamafile test_mover; do
    [ -x "$tests/$t" ] && [ "$(left)" -gt 200 ] || continue
    timeout 60 "$tests/$t" > "$OUT/$t.log" 2>&1
    echo "$t rc=$? $(at)"; kt_summary "$OUT/$t.log"
done
# 3. prefill kernels A/B on 12 layers, one process a row
ab() { # label, then env assignments
    lab=$1; shift
    env "$@" KT_GPU_TRACE=2 timeout 60 $bench e2e --dir /mnt/kt --keep --model qwen3-30b-a3b \
        --layers 12 --budgets 100 --prompts 2048,8192 --gen 8 --no-cpu-row \
        >> "$OUT/ab-$lab.log" 2>&1
    echo "== $lab ($*) rc=$? $(at)"
    grep -E "^qwen3" "$OUT/ab-$lab.log"
    grep -o "chunks: .*" "$OUT/ab-$lab.log" | sed 's/norms and residual adds/norms/'
}
if [ "$(left)" -gt 120 ]; then
    ab session7 KT_GPU_ATTN_TILE=1 KT_GPU_GROUP_MMA=0
    ab default KT_GPU_ATTN_TILE=2
    ab attn-bf16 KT_GPU_ATTN_TILE=3
    ab gemv863 KT_GPU_GEMV=863
    ab session7 KT_GPU_ATTN_TILE=1 KT_GPU_GROUP_MMA=0
    ab default KT_GPU_ATTN_TILE=2
    ab gemv863 KT_GPU_GEMV=863
fi
if [ "$(left)" -gt 110 ]; then
    timeout $(($(left) - 30)) $bench e2e --dir /mnt/kt --keep --model qwen3-30b-a3b \
        --budgets 100,50 --prompts 2048,8192 --gen 32 --warmup 2048 --no-cpu-row \
        > "$OUT/e2e-qwen3-48.log" 2>&1
    echo "e2e 48 layers rc=$? $(at)"; grep -v "^# CPU\|^# ISA" "$OUT/e2e-qwen3-48.log" | tail -9
fi
ck=/mnt/kt/kt-e2e-qwen3-30b-a3b-48
ids=$(seq -s, 11 74)
for rb in 0 8; do
    [ -d "$ck" ] && [ "$(left)" -gt 40 ] || break
    timeout 30 $BIN/tools/kt-run/kt-run generate --model "$ck" --prompt-ids "$ids" -n 96 \
        --gpu-experts 0.5 --gpu-rebalance $rb > "$OUT/kt-run-rebalance-$rb.log" 2>&1
    echo "kt-run --gpu-rebalance $rb rc=$? $(at)"; tail -3 "$OUT/kt-run-rebalance-$rb.log"
done
if [ "$(left)" -gt 25 ]; then
    timeout $(($(left) - 5)) compute-sanitizer --tool memcheck "$tests/test_gpu_attn" \
        > "$OUT/memcheck-attn.log" 2>&1
    echo "memcheck test_gpu_attn rc=$? $(at)"; kt_summary "$OUT/memcheck-attn.log"
fi
