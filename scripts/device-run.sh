#!/bin/sh
# Run on the GPU machine (Ubuntu 24.04, CUDA 13, H200), in the project root,
# with .devdeps/ carried along (made here by /work/shared/device/fetch-debs.sh):
#     sh scripts/device-run.sh
# Builds a release with CUDA (sm_90), runs `kt-run doctor` in text and JSON,
# then the whole test suite (the cuda suite's hw_gpu runs a kernel on every
# GPU). Every log goes to $OUT (default ./device-out); a step that fails does
# not stop the later ones. The exit status is that of the first failing step.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
B=build-device
status=0
step() { # name command...
    name=$1
    shift
    "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: exit $rc" | tee -a "$OUT/summary.txt"
    if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
    return $rc
}

: > "$OUT/summary.txt"
{ uname -a; nvidia-smi; nproc; head -n 3 /proc/meminfo; } > "$OUT/machine.txt" 2>&1
if [ -f "$B/build.ninja" ]; then
    step setup meson setup --reconfigure "$B" --buildtype=release -Dcuda=enabled -Dgpu_sm=90
else
    step setup meson setup "$B" --buildtype=release -Dcuda=enabled -Dgpu_sm=90
fi
step build ninja -C "$B" -j "$(nproc)"
step doctor "$B/tools/kt-run/kt-run" doctor
cp "$OUT/doctor.log" "$OUT/doctor.txt"
"$B/tools/kt-run/kt-run" doctor --json > "$OUT/doctor.json" 2> "$OUT/doctor-json.err"
echo "doctor-json: exit $?" | tee -a "$OUT/summary.txt"
# Tests last, bounded so that the logs come back within the device tool's 10 minutes.
step test timeout 420 meson test -C "$B" --print-errorlogs
cp "$B/meson-logs/testlog.txt" "$OUT/testlog.txt" 2> /dev/null
cat "$OUT/doctor.txt"
tail -n 15 "$OUT/test.log"
exit $status
