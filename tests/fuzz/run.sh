#!/bin/sh
# Builds the libFuzzer harnesses (clang, -Dfuzz=enabled) and runs each for N
# seconds (default 60) on a scratch copy of its seed corpus; prints executions.
# Usage: tests/fuzz/run.sh [SECONDS] [BUILD_DIR]   Exit status: nonzero on a crash.
set -eu
secs=${1:-60}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$src/build-fuzz}
if [ ! -f "$build/build.ninja" ]; then
    CC=clang meson setup "$build" "$src" -Dfuzz=enabled -Dcuda=disabled -Dtools=disabled \
        -Dexamples=disabled >/dev/null
fi
ninja -C "$build" build.ninja >/dev/null # regenerate after a meson.build change
targets=$(ninja -C "$build" -t targets all | sed -n 's|^\(tests/fuzz/fuzz_[a-z0-9_]*\): .*|\1|p')
for c in "$src"/tests/fuzz/fuzz_*.c; do
    t=tests/fuzz/$(basename "$c" .c)
    echo "$targets" | grep -qx "$t" || echo "warning: $t is not in kt_fuzz_names (tests/fuzz/meson.build)"
done
ninja -C "$build" -j"${KT_FUZZ_JOBS:-2}" $targets >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in $targets; do
    exe=$build/$t
    name=$(basename "$exe" | sed 's/^fuzz_//')
    mkdir -p "$work/$name"
    seeds="$src/tests/fuzz/corpus/$name"
    dict=""
    [ -f "$src/tests/fuzz/$name.dict" ] && dict="-dict=$src/tests/fuzz/$name.dict"
    if "$exe" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/" $dict "$work/$name" "$seeds" >"$work/$name.log" 2>&1; then
        result=clean
    else
        result=CRASH
        status=1
        tail -n 40 "$work/$name.log"
        mkdir -p "$build/fuzz-artifacts"
        cp "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$build/fuzz-artifacts/" 2>/dev/null || :
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$name.log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$name.log" | tail -n 1)
    echo "fuzz_$name: ${execs:-?} executions in ${secs}s (${rate:-?}/s): $result"
done
exit $status
