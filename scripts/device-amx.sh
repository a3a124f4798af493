#!/bin/sh
# AMX prefill evidence in one device call (~2.5 min), from the repository root with
# .devdeps carried:   sh scripts/device-amx.sh
# A release build without CUDA (the CPU paths only), the tests (TESTS, default
# test_moe_kernels test_moe) on the real tiles, scripts/amx_tile_peak.c, then
# kt-bench moe for AMXINT8 / AMXINT4 g128 on the DeepSeek-V3 shape (T 1024, 4096)
# and Qwen3-30B-A3B (T 1024) twice (the first with oneDNN's matmuls beside, and
# in-run variants: KT_AMX_INT4_EXACT=1 the exact group folds, KT_AMX_DEC_FIRST=1,
# KT_MOE_PROFILE=1, KT_AMX_AHEAD=2 and KT_AMX_KC=2 at T 1024). Logs in $OUT.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=build-amx
meson setup "$B" --buildtype=release -Dcuda=disabled > /dev/null &&
    ninja -C "$B" -j "$(nproc)" tools/kt-bench/kt-bench tests/unit/test_moe_kernels \
        tests/unit/test_moe > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
gcc -O2 -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vbmi -pthread \
    scripts/amx_tile_peak.c -o "$B/amx_tile_peak" || exit 1
for t in ${TESTS:-test_moe_kernels test_moe}; do
    (cd "$B" && KT_TEST_DATA=$PWD/../tests/data KT_SOURCE_ROOT=$PWD/.. KT_BUILD_ROOT=$PWD \
        LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH timeout 100 ./tests/unit/$t) > "$OUT/$t.txt" 2>&1
    echo "$t rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  ERROR|ERROR:" "$OUT/$t.txt" | head -5
done
"$B/amx_tile_peak" > "$OUT/tile-peak.txt" 2>&1
bench="$B/tools/kt-bench/kt-bench moe"
ds="--model deepseek-v3 --group-size 128 --layers 2"
q3="--model qwen3-30b-a3b --group-size 128 --layers 4 --method AMXINT8,AMXINT4 --tokens 1024"
row() { # FILE ENV... COMMAND: one block, headed by the command
    f=$1; shift; echo "### $*" >> "$f"; env "$@" >> "$f" 2>&1; echo "rc=$?" >> "$f"
}
for run in 1 2; do
    f="$OUT/moe-run$run.txt"; date -u +%H:%M:%S > "$f"
    onednn=--no-onednn; [ $run = 1 ] && onednn=
    row "$f" KT_X=0 timeout 90 $bench $ds --method AMXINT8,AMXINT4 --tokens 1024,4096 $onednn
    if [ $run = 1 ]; then # in-run variants
        row "$f" KT_AMX_INT4_EXACT=1 timeout 40 $bench $ds --method AMXINT4 --tokens 1024,4096 \
            --no-onednn --min-time 0.5
        row "$f" KT_AMX_DEC_FIRST=1 timeout 40 $bench $ds --method AMXINT4 --tokens 1024,4096 \
            --no-onednn --min-time 0.5
        row "$f" KT_MOE_PROFILE=1 timeout 40 $bench $ds --method AMXINT4 --tokens 1024 \
            --no-onednn --min-time 0.5
        for v in KT_AMX_AHEAD=2 KT_AMX_KC=2; do
            row "$f" $v timeout 40 $bench $ds --method AMXINT4 --tokens 1024 --no-onednn \
                --min-time 0.5
        done
        row "$f" KT_MOE_PROFILE=1 timeout 40 $bench $ds --method AMXINT8 --tokens 1024 \
            --no-onednn --min-time 0.5
    fi
    row "$f" KT_X=0 timeout 40 $bench $q3 $onednn
    grep -E "^(###|  T=|libkt: warning: moe profile)" "$f"
done
cat "$OUT/tile-peak.txt"
