#!/bin/sh
# The whole test suite on the GPU machine (H200 + AMX Xeon), where the CUDA and
# AMX tests run instead of skipping: from the repository root with .devdeps
# carried,   sh scripts/device-suite.sh   (~5 min). Logs in $OUT: build.log,
# meson-test.txt (meson's summary), testlog.txt (every test's output).
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
kt_device_build build-device || exit 1
timeout "${SUITE_LIMIT:-300}" meson test --no-rebuild --print-errorlogs \
    --num-processes "${SUITE_JOBS:-4}" > "$OUT/meson-test.txt" 2>&1
echo "meson test rc=$?"
cp meson-logs/testlog.txt "$OUT/testlog.txt" 2>/dev/null
grep -E "^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout):" "$OUT/meson-test.txt"
grep -E " (FAIL|TIMEOUT|SKIP) " "$OUT/meson-test.txt" | head -20
