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
mkdir -p "$OUT" && kt_device_bin "$BIN" || exit 1
timeout 170 compute-sanitizer --tool memcheck "$BIN/tests/unit/test_gpu" > "$OUT/memcheck.log" 2>&1
echo "memcheck test_gpu rc=$? ($(left) s left)"; kt_summary "$OUT/memcheck.log"
for t in test_moe_kernels test_moe test_llamafile; do
    timeout 90 "$BIN/tests/unit/$t" > "$OUT/$t.log" 2>&1
    echo "$t rc=$? ($(left) s left)"; kt_summary "$OUT/$t.log"
done
kt_device_sanitize racecheck "$BIN/tests/unit/test_gpu" 60 $((T0 + LIMIT))
