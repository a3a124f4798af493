#!/bin/sh
# The closing correctness check on the device machine (H200 + AMX Xeon) from
# release binaries built here (sm_90) and carried in $BIN (git-ignored, packed
# by device-pack.sh; default .lead), so nothing compiles there:
#   ninja -C B lib/libkt.so.0.1.0 tests/unit/test_gpu tests/unit/test_moe_kernels \
#       tests/unit/test_moe tests/unit/test_llamafile && sh scripts/device-pack.sh B
#   then on the device, with .devdeps and $BIN carried:   sh scripts/device-check.sh
# 1. the whole test_gpu under compute-sanitizer memcheck (every fixture family
#    against transformers, and every device access checked), 2. the CPU MoE
#    kernel tests on the real AMX tiles, 3. racecheck over test_gpu one test at
#    a time for what is left of $LIMIT seconds. Logs in $OUT.
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; BIN=${BIN:-.lead}; LIMIT=${LIMIT:-330}
T0=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - T0))); }
mkdir -p "$OUT" && python3 scripts/unpack_data.py . > /dev/null || exit 1
[ -f "$BIN/bin.tar.xz" ] && { tar -C "$BIN" -xJf "$BIN/bin.tar.xz" || exit 1; }
export LD_LIBRARY_PATH=$PWD/$BIN/lib:$LD_LIBRARY_PATH KT_TEST_DATA=$PWD/tests/data
export KT_SOURCE_ROOT=$PWD KT_BUILD_ROOT=$PWD/$BIN
summary() { grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)|^\[  FAILED  \]" "$1"; }
timeout 170 compute-sanitizer --tool memcheck "$BIN/tests/unit/test_gpu" > "$OUT/memcheck.log" 2>&1
echo "memcheck test_gpu rc=$? ($(left) s left)"; summary "$OUT/memcheck.log"
for t in test_moe_kernels test_moe test_llamafile; do
    timeout 90 "$BIN/tests/unit/$t" > "$OUT/$t.log" 2>&1
    echo "$t rc=$? ($(left) s left)"; summary "$OUT/$t.log"
done
log=$OUT/racecheck.log; : > "$log"
for t in $(grep -o 'cmocka_unit_test(test_[a-z0-9_]*)' tests/unit/test_gpu.c |
           sed 's/.*(\(.*\))/\1/'); do
    [ "$(left)" -gt 20 ] || { echo "== racecheck: no time left for $t and after" | tee -a "$log"; break; }
    lim=$(left); [ "$lim" -gt 60 ] && lim=60
    start=$(date +%s)
    KT_TEST_FILTER=$t timeout "$lim" compute-sanitizer --tool racecheck \
        "$BIN/tests/unit/test_gpu" > "$OUT/san.tmp" 2>&1
    rc=$?
    echo "== racecheck $t: rc=$rc, $(( $(date +%s) - start )) s, $(summary "$OUT/san.tmp" | tr '\n' ' ')" |
        tee -a "$log"
    grep -B1 -A6 -m3 "Error\|hazard" "$OUT/san.tmp" >> "$log"
done
rm -f "$OUT/san.tmp"
