#!/bin/sh
# AMX prefill evidence in one device call, from the repository root with .devdeps
# carried:   sh scripts/device-amx.sh
# With BIN=.gpu-NAME (release binaries built elsewhere, packed by
# scripts/device-pack.sh and carried) no build: about 2 min saved. Else a release
# build without CUDA (the CPU paths only). Then:
# - the AMX tests (TESTS, default test_moe_kernels' test_int8_act, test_amx and
#   test_amx_backend_packed) on the real tiles, $OUT/tests.txt;
# - kt-bench moe rows, AMXINT8 and AMXINT4 g128, DeepSeek-V3 (T 1024, 4096) and
#   Qwen3-30B-A3B (T 1024), the defaults alternating with OLD (the environment of
#   the previous code's choices) ROUNDS times, then each of VARIANTS (one
#   environment each, on top of the defaults) once, then with KT_MOE_PROFILE=1
#   KT_AMX_PROFILE=1 (PROFILE=0: not), $OUT/moe.txt;
# - scripts/amx_tile_peak.c when PEAK=1, $OUT/tile-peak.txt.
# Where the time goes: ROUNDS=0 PEAK=1 VARIANTS="KT_AMX_PROBE=1 KT_AMX_PROBE=2 KT_AMX_PROBE=4"
# (the probes drop the INT4 rescale, the tile products, the weight prefetches).
# METHODS (default AMXINT8,AMXINT4) names the kt-bench methods; AB="ENV1 ENV2 ..."
# (',' between the variables of one environment, '-' for none) replaces the
# new / OLD rounds by ROUNDS rounds over those environments in turn, DeepSeek-V3
# (then Qwen3-30B-A3B over ABQ3's); TEST_ENV is set for the tests (KT_TEST_TILES=real:
# the emulated tiles' checks left out), and the tests run once per environment of
# TEST_ENVS (same syntax as AB) on top of it; GS: the AMXINT4 group size (128).
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
if [ -n "${BIN:-}" ]; then
    B=$BIN; kt_device_bin "$B" || exit 1
else
    B=build-amx
    meson setup "$B" --buildtype=release -Dcuda=disabled > /dev/null &&
        ninja -C "$B" -j "$(nproc)" tools/kt-bench/kt-bench tests/unit/test_moe_kernels \
            > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
for te in ${TEST_ENVS:--}; do
for t in ${TESTS:-test_int8_act test_amx test_amx_backend_packed}; do
    echo "## $te $t" >> "$OUT/tests.txt"
    (cd "$B" && env ${TEST_ENV:-} $(echo "$te" | tr , ' ' | sed 's/^-$//') KT_TEST_DATA=$PWD/../tests/data KT_SOURCE_ROOT=$PWD/.. KT_BUILD_ROOT=$PWD \
        LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH KT_TEST_FILTER=$t \
        timeout 100 ./tests/unit/test_moe_kernels) >> "$OUT/tests.txt" 2>&1
    echo "$te $t rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  ERROR|ERROR:" "$OUT/tests.txt" | tail -2
done
done
f=$OUT/moe.txt; date -u +%H:%M:%S > "$f"
bench="$B/tools/kt-bench/kt-bench moe --no-onednn --min-time 0.5 --method ${METHODS:-AMXINT8,AMXINT4}"
dsb="--model deepseek-v3 --group-size ${GS:-128} --layers 2"; ds="$dsb --tokens 1024,4096"
q3="--model qwen3-30b-a3b --group-size ${GS:-128} --layers 4 --tokens 1024"
old=${OLD:-KT_AMX_PF=t1 KT_AMX_WIDE=0 KT_AMX_PASSES=0}
row() { # ENV... -- bench arguments: one block, headed by the environment
    echo "### $*" >> "$f"; env "$@" >> "$f" 2>&1; echo "rc=$?" >> "$f"
}
for r in $(seq "${ROUNDS:-2}"); do
    if [ -n "${AB:-}" ]; then
        for v in $AB; do
            row KT_X=$v $(echo "$v" | tr , ' ' | sed 's/^-$//') timeout 60 $bench $ds
        done
        for v in ${ABQ3:-}; do
            row KT_X=$v $(echo "$v" | tr , ' ' | sed 's/^-$//') timeout 60 $bench $q3
        done
        continue
    fi
    for shape in "$ds" "$q3"; do
        row KT_X=new timeout 60 $bench $shape
        row $old timeout 60 $bench $shape
    done
done
for v in ${VARIANTS:-}; do
    row $(echo "$v" | tr , ' ') timeout 60 $bench $ds
done
if [ "${PROFILE:-1}" = 1 ]; then
    for t in 1024 4096; do
        row KT_MOE_PROFILE=1 KT_AMX_PROFILE=1 timeout 60 $bench $dsb --tokens $t
    done
fi
date -u +%H:%M:%S >> "$f"
grep -E "^(###|  T=|libkt: warning: moe profile)" "$f"
if [ "${PEAK:-0}" = 1 ]; then
    gcc -O2 -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vbmi -pthread \
        scripts/amx_tile_peak.c -o /tmp/amx_tile_peak &&
        /tmp/amx_tile_peak > "$OUT/tile-peak.txt" 2>&1
    cat "$OUT/tile-peak.txt"
fi
exit 0
