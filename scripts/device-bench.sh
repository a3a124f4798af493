#!/bin/sh
# The CPU MoE figures of the GPU machine's Xeon in one device call (~8 min), from
# the repository root with .devdeps carried:   sh scripts/device-bench.sh
# Builds a release (CUDA, sm_90), runs the MoE, LLAMAFILE and GPU unit tests (AMX
# tests run on the real tiles there), then kt-bench moe for every method on the
# DeepSeek-V3 shape and kt-bench moe --gguf on 12-layer Qwen3-30B-A3B-shaped
# GGUF files (Q4_0 3.9 GB, 13x the 300 MiB L3). Logs in $OUT. STEPS picks a subset
# (tests, moe, moex2 = the bf16x2 activations, gguf); MOE_METHODS, MOE_TOKENS,
# X2_METHODS, X2_TOKENS, GGUF_TYPES and GGUF_LAYERS narrow the runs.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=build-device
STEPS=${STEPS:-tests moe moex2 gguf}
meson setup "$B" --buildtype=release -Dcuda=enabled -Dgpu_sm=90 > /dev/null &&
    ninja -C "$B" -j "$(nproc)" tools/kt-bench/kt-bench tools/kt-convert/kt-convert \
        tests/unit/test_moe_kernels tests/unit/test_moe tests/unit/test_llamafile \
        tests/unit/test_gpu > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
bench=$B/tools/kt-bench/kt-bench
for step in $STEPS; do
    case $step in
    tests)
        for t in test_moe_kernels test_moe test_llamafile test_gpu; do
            (cd "$B" && KT_TEST_DATA=$PWD/../tests/data KT_SOURCE_ROOT=$PWD/.. KT_BUILD_ROOT=$PWD \
                LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH timeout 120 ./tests/unit/$t) \
                > "$OUT/$t.log" 2>&1
            echo "$t rc=$?"; grep -E "^\[  (PASSED|FAILED)" "$OUT/$t.log"
        done ;;
    moe)
        timeout 300 "$bench" moe --model deepseek-v3 \
            --method "${MOE_METHODS:-BF16,FP8,RAWINT4,AMXINT8,AMXINT4}" \
            --tokens "${MOE_TOKENS:-1,4,1024,4096}" --json "$OUT/moe.json" > "$OUT/moe.log" 2>&1
        echo "moe rc=$?"; sed -n '/^summary/,$p' "$OUT/moe.log" ;;
    moex2) # the engine's default activations (hi + lo BF16)
        timeout 200 "$bench" moe --model deepseek-v3 --precision bf16x2 \
            --method "${X2_METHODS:-BF16,FP8,RAWINT4}" --tokens "${X2_TOKENS:-1,4}" \
            > "$OUT/moe-x2.log" 2>&1
        echo "moex2 rc=$?"; sed -n '/^summary/,$p' "$OUT/moe-x2.log" ;;
    gguf)
        python3 tools/kt-bench/random_qwen3_moe.py /dev/shm/q3 --layers "${GGUF_LAYERS:-12}" > /dev/null || exit 1
        for t in ${GGUF_TYPES:-Q4_0 Q8_0 Q4_K}; do
            LD_LIBRARY_PATH=$B/lib:$LD_LIBRARY_PATH "$B/tools/kt-convert/kt-convert" --input /dev/shm/q3 --output /dev/shm/q3_$t.gguf \
                --method gguf:$t --quiet &&
            timeout 90 "$bench" moe --gguf /dev/shm/q3_$t.gguf --tokens 1,4,512 \
                > "$OUT/gguf-$t.log" 2>&1
            echo "gguf $t rc=$?"; grep -v "^#" "$OUT/gguf-$t.log" | tail -n 6
            rm -f /dev/shm/q3_$t.gguf
        done ;;
    esac
done
