#!/bin/sh
# The CPU MoE figures of the GPU machine's Xeon in one device call (~8 min), from
# the repository root with .devdeps carried:   sh scripts/device-bench.sh
# Builds a release (CUDA, sm_90), runs the unit and kernel suites (AMX tests run
# on the real tiles there), then kt-bench moe for every method on the
# DeepSeek-V3 shape and kt-bench moe --gguf on 12-layer Qwen3-30B-A3B-shaped
# GGUF files (Q4_0 3.9 GB, 13x the 300 MiB L3). Logs in $OUT. STEPS picks a subset
# (tests, moe, gguf); MOE_METHODS, MOE_TOKENS and GGUF_TYPES narrow the runs.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=build-device
STEPS=${STEPS:-tests moe gguf}
meson setup "$B" --buildtype=release -Dcuda=enabled -Dgpu_sm=90 > /dev/null &&
    ninja -C "$B" -j "$(nproc)" > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
bench=$B/tools/kt-bench/kt-bench
for step in $STEPS; do
    case $step in
    tests)
        timeout 240 meson test -C "$B" --no-rebuild --suite unit --suite kernels --suite cuda \
            > "$OUT/tests.log" 2>&1
        echo "tests rc=$?"; tail -n 9 "$OUT/tests.log"
        grep -E "FAIL|TIMEOUT" "$OUT/tests.log" | head ;;
    moe)
        timeout 300 "$bench" moe --model deepseek-v3 \
            --method "${MOE_METHODS:-BF16,FP8,RAWINT4,AMXINT8,AMXINT4}" \
            --tokens "${MOE_TOKENS:-1,4,1024,4096}" --json "$OUT/moe.json" > "$OUT/moe.log" 2>&1
        echo "moe rc=$?"; sed -n '/^summary/,$p' "$OUT/moe.log" ;;
    gguf)
        python3 tools/kt-bench/random_qwen3_moe.py /dev/shm/q3 --layers 12 > /dev/null || exit 1
        for t in ${GGUF_TYPES:-Q4_0 Q8_0 Q4_K}; do
            "$B/tools/kt-convert/kt-convert" --input /dev/shm/q3 --output /dev/shm/q3_$t.gguf \
                --method gguf:$t --quiet &&
            timeout 90 "$bench" moe --gguf /dev/shm/q3_$t.gguf --tokens 1,4,512,1024 \
                > "$OUT/gguf-$t.log" 2>&1
            echo "gguf $t rc=$?"; grep -v "^#" "$OUT/gguf-$t.log" | tail -n 6
            rm -f /dev/shm/q3_$t.gguf
        done ;;
    esac
done
