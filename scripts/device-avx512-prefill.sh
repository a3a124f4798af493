#!/bin/sh
# #4's prefill targets (BF16 / FP8 >= 1.0x oneDNN BF16, RAWINT4 >= 1.5x) on
# AVX-512 BF16 hardware without AMX, in one device call: the Xeon with both
# sides capped below AMX, libkt by KT_ISA_MAX=avx512 (its AVX-512 kernel sets),
# oneDNN by ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (brgemm on vdpbf16ps). The Zen 4
# VM of sessions 1-9 measured the same comparison; the Xeon is a proxy for it,
# not the same core (2 FMA ports and its own shuffle port against Zen 4's
# double-pumped 512-bit units). From the repository root with .devdeps carried:
#     BIN=.gpu-NAME sh scripts/device-avx512-prefill.sh
# (BIN: release binaries from scripts/device-pack.sh, with tests/unit/test_moe
# when it was built; without BIN a release build without CUDA, minutes more.)
# In order, the bench rows skipped once less than their share of LIMIT (270 s,
# counted from the start) is left:
# - the ISA facts and oneDNN's own word on the cap (ONEDNN_VERBOSE's isa line
#   and the matmul implementations of a small kt-bench gemm, capped and not);
# - test_moe_kernels' AVX-512 tests (TESTS) and test_moe under KT_ISA_MAX=avx512,
#   $OUT/tests.txt;
# - kt-bench moe BF16,FP8,RAWINT4 (METHODS) at T 512,2048 (TOKENS), DeepSeek-V3
#   (2 layers) and Qwen3-30B-A3B (4 layers), capped, ROUNDS (2) rounds; then once
#   with KT_MOE_PROFILE=1 (no oneDNN; PROFILE=0: not); then AMX_ROUNDS (1) rounds
#   with AMX allowed on both sides, for scale; $OUT/moe.txt. Every summary row
#   names libkt's kernel set [..] and oneDNN's implementations (..., brg:...);
# - before the AMX rows, scripts/moe_port_probe.c (PROBE=0: not), $OUT/port-probe.txt.
set -u
end=$(($(date +%s) + ${LIMIT:-270}))
left() { echo $((end - $(date +%s))); }
case ${LD_LIBRARY_PATH:-} in */opt/ktdeps/*) NO_ENV=1 ;; esac   # already sourced
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
if [ -n "${BIN:-}" ]; then
    B=$BIN; kt_device_bin "$B" || exit 1
else
    B=build-avx512
    meson setup "$B" --buildtype=release -Dcuda=disabled > /dev/null &&
        ninja -C "$B" -j "$(nproc)" tools/kt-bench/kt-bench tests/unit/test_moe_kernels \
            tests/unit/test_moe > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    export LD_LIBRARY_PATH=$PWD/$B/lib:$LD_LIBRARY_PATH KT_TEST_DATA=$PWD/tests/data
    export KT_SOURCE_ROOT=$PWD KT_BUILD_ROOT=$PWD/$B
fi
KB=$B/tools/kt-bench/kt-bench
CAP="KT_ISA_MAX=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16"

echo "## $(date -u +%H:%M:%S) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)," \
     "$(nproc) CPUs; flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
                             grep -E '^(avx512(f|bw|_bf16|_vnni|vbmi)|amx_(tile|bf16|int8))$' |
                             tr '\n' ' ')"
# oneDNN's own word: its isa line and the implementations it picked, per cap
for cap in "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16" "-"; do
    env $(echo "$cap" | sed 's/^-$//') ONEDNN_VERBOSE=1 timeout 30 $KB gemm --m 32,512 --reps 2 \
        > "$OUT/onednn-verbose.tmp" 2>&1
    echo "## oneDNN with $cap: $(grep -m1 -o 'isa:[^,]*' "$OUT/onednn-verbose.tmp");" \
         "matmuls run (count, implementation, source type):" \
         "$(grep ',exec,cpu,matmul,' "$OUT/onednn-verbose.tmp" |
            awk -F, '{ split($7, t, ":"); print $5, t[1] }' | sort | uniq -c | tr -s ' \n' ' ')"
done
rm -f "$OUT/onednn-verbose.tmp"

test_run() { # NAME SECONDS TEST_BINARY [FILTER]: one test's verdict lines
    (cd "$B" && KT_ISA_MAX=avx512 KT_TEST_FILTER=${4:-} timeout "$2" "./tests/unit/$3") \
        > "$OUT/test.tmp" 2>&1
    rc=$?
    { echo "## KT_ISA_MAX=avx512 $1 rc=$rc"; cat "$OUT/test.tmp"; } >> "$OUT/tests.txt"
    echo "$1 rc=$rc: $(grep -E '^\[  (PASSED|FAILED)|skipped|ERROR' "$OUT/test.tmp" |
                       tr -s ' \n' ' ')"
}
for t in ${TESTS:-test_avx512 test_precise test_int4_scale_paths test_int4_tiled test_quant_q8}; do
    test_run "$t" 100 test_moe_kernels "$t"
done
if [ -x "$B/tests/unit/test_moe" ] && [ "$(left)" -gt 200 ]; then
    test_run test_moe 90 test_moe
fi
rm -f "$OUT/test.tmp"

f=$OUT/moe.txt; date -u +%H:%M:%S > "$f"
bench="$KB moe --min-time ${MIN_TIME:-0.5} --method ${METHODS:-BF16,FP8,RAWINT4}"
ds="--model deepseek-v3 --layers 2"
q3="--model qwen3-30b-a3b --layers 4"
tok="--tokens ${TOKENS:-512,2048}"
row() { # NEED_S MAX_S "ENV ..." BENCH_ARGS...: one block headed by the
        # environment, cut at MAX_S or 5 s before the end, skipped when fewer
        # than NEED_S seconds are left
    need=$1 max=$2 envs=$3; shift 3
    if [ "$(left)" -lt "$need" ]; then
        echo "### skipped (only $(left) s left): $envs $*" >> "$f"; return
    fi
    lim=$(($(left) - 5)); [ "$lim" -gt "$max" ] && lim=$max
    echo "### $(date -u +%H:%M:%S) $envs $*" >> "$f"
    env $envs timeout "$lim" $bench "$@" >> "$f" 2>&1
    echo "rc=$?" >> "$f"
}
for r in $(seq "${ROUNDS:-2}"); do
    row 60 90 "KT_X=avx512-r$r $CAP" $ds $tok
    row 25 60 "KT_X=avx512-r$r $CAP" $q3 $tok
done
if [ "${PROFILE:-1}" = 1 ]; then
    row 45 60 "KT_X=avx512-profile $CAP KT_MOE_PROFILE=1" $ds --tokens 2048 --no-onednn
    row 20 40 "KT_X=avx512-profile $CAP KT_MOE_PROFILE=1" $q3 --tokens 2048 --no-onednn
fi
# the Xeon's port throughputs behind the tiles (8 chains an operation: cycles per
# instruction at KT_BENCH_GHZ; read them against vfmadd, two a cycle on a core
# with two 512-bit FMA units, so the clock cancels)
if [ "${PROBE:-1}" = 1 ] && [ "$(left)" -gt 40 ]; then
    gcc -O2 -march=native scripts/moe_port_probe.c -o /tmp/moe_port_probe &&
        timeout $(($(left) - 5)) /tmp/moe_port_probe > "$OUT/port-probe.txt" 2>&1
    echo "## port probe rc=$?"; cat "$OUT/port-probe.txt"
fi
for r in $(seq "${AMX_ROUNDS:-1}"); do
    row 45 90 "KT_X=amx-r$r" $ds $tok
    row 20 60 "KT_X=amx-r$r" $q3 $tok
done
date -u +%H:%M:%S >> "$f"
grep -E "^(###|prefill T=|  implementations|libkt: warning: moe profile|rc=[1-9])" "$f"
exit 0
