#!/bin/sh
# AMX prefill evidence in one device call, from the repository root with .devdeps
# carried:   sh scripts/device-amx.sh
# With BIN=.gpu-NAME (release binaries built elsewhere, packed by
# scripts/device-pack.sh and carried) no build: about 2 min saved. Else a release
# build without CUDA (the CPU paths only). Then the tests (TESTS, default
# test_moe_kernels) on the real tiles, scripts/amx_tile_peak.c when PEAK=1, then
# kt-bench moe for AMXINT8 / AMXINT4 g128 on the DeepSeek-V3 shape (T 1024, 4096)
# and Qwen3-30B-A3B (T 1024) twice (the first with oneDNN's matmuls beside), each
# run with in-run variants of AMXINT4 (VARIANTS, default KT_AMX_INT4_TABLES=computed:
# the tables computed per chunk, not the grid's constants; run 1 also
# KT_AMX_INT4_EXACT=1, the exact group folds). Logs in $OUT.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
if [ -n "${BIN:-}" ]; then
    B=$BIN; kt_device_bin "$B" || exit 1
else
    B=build-amx
    meson setup "$B" --buildtype=release -Dcuda=disabled > /dev/null &&
        ninja -C "$B" -j "$(nproc)" tools/kt-bench/kt-bench tests/unit/test_moe_kernels \
            tests/unit/test_moe > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
for t in ${TESTS:-test_moe_kernels}; do
    (cd "$B" && KT_TEST_DATA=$PWD/../tests/data KT_SOURCE_ROOT=$PWD/.. KT_BUILD_ROOT=$PWD \
        LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH timeout 100 ./tests/unit/$t) > "$OUT/$t.txt" 2>&1
    echo "$t rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  ERROR|ERROR:" "$OUT/$t.txt" | head -5
done
if [ "${PEAK:-0}" = 1 ]; then
    gcc -O2 -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vbmi -pthread \
        scripts/amx_tile_peak.c -o "$OUT/amx_tile_peak" &&
        "$OUT/amx_tile_peak" > "$OUT/tile-peak.txt" 2>&1
    rm -f "$OUT/amx_tile_peak"
fi
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
    vars=${VARIANTS:-KT_AMX_INT4_TABLES=computed}
    [ $run = 1 ] && vars="$vars ${VARIANTS1:-KT_AMX_INT4_EXACT=1}"
    for v in $vars; do
        row "$f" $v timeout 40 $bench $ds --method AMXINT4 --tokens 1024,4096 --no-onednn \
            --min-time 0.5
    done
    row "$f" KT_X=0 timeout 40 $bench $q3 $onednn
    grep -E "^(###|  T=|libkt: warning: moe profile)" "$f"
done
[ -f "$OUT/tile-peak.txt" ] && cat "$OUT/tile-peak.txt"
exit 0
