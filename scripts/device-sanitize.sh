#!/bin/sh
# compute-sanitizer over the GPU tests on the device machine (H200), in one
# call, from release binaries built here (sm_90) and carried in $BIN
# (scripts/device-pack.sh; default .gpu15):
#   BIN=.gpu15 sh scripts/device-pack.sh build-rel      (here), then on the device
#   sh scripts/device-sanitize.sh                       (.devdeps and $BIN carried)
# Every test of tests/unit/test_gpu.c and test_gpu_attn, one process a test,
# $PAR processes at once (default 8), each on its own nproc/$PAR cores (taskset:
# the MoE workers pin to the first cores a process may use, so processes
# sharing cores would spin on the same two), the longest tests first; each cut
# at what is left of $LIMIT seconds (default 540), none started with less than
# 15 s left. Under racecheck the device is the bottleneck (100 % busy, the CPUs
# half idle with 8 processes, 11-30 14:55): more processes add no speed.
# Tools in $TOOLS, in order (default "racecheck synccheck initcheck"):
#   racecheck  --kernel-name kns=k_ (libkt's kernels), KT_GPU_BLAS_MIN_TOKENS=
#              100000: the dense products on libkt's kernels instead of cuBLAS,
#              whose GEMMs the sanitizer stops in ("failed to handle a hardware
#              exception", also when they are not instrumented); the grouped
#              experts and everything else as by default. test_limits (cuBLAS
#              GEMMs and k_fill, which has no shared memory) is left out.
#   synccheck  --kernel-name kns=k_, the default environment (cuBLAS on).
#   initcheck  every kernel instrumented (writes by cuBLAS's kernels count;
#              filtered to ours they read as uninitialized), cuBLAS on.
# test_gpu runs with KT_TEST_SHORT=$SHORT (default 2: decode steps at the
# prompt's first and last 2 positions, the rest as one chunk; greedy 3 ids;
# tests/unit/test_gpu.c) and KT_TEST_TIMES=1 (each case's phase times).
# $TESTS: test_gpu's tests (default all). stdout and $OUT/sanitize.log: a line
# a (tool, test): rc (124: cut), seconds, cmocka's verdict, the sanitizer's
# summary and reports by kernel; then the first lines of each report.
# $OUT/times.log: the phase times; $OUT/load.log: GPU utilization and vmstat
# every 10 s; $OUT/raw.tar.xz: the logs.
. scripts/device-env.sh >/dev/null 2>&1
OUT=${OUT:-$PWD/device-out}; BIN=${BIN:-.gpu15}; LIMIT=${LIMIT:-540}; PAR=${PAR:-8}
mkdir -p "$OUT" && kt_device_bin "$BIN" || exit 1
END=$(($(date +%s) + LIMIT))
W=/tmp/ktsan; rm -rf $W; mkdir -p $W/log
U=$PWD/$BIN/tests/unit
all=$(grep -o 'cmocka_unit_test(test_[a-z0-9_]*)' tests/unit/test_gpu.c | sed 's/.*(\(.*\))/\1/')
# the longest first (five variant tests of 18-24 contexts, then the fixtures)
first="test_l2_qk_decode test_downw_decode test_router_decode test_gemv_decode
       test_fused_decode test_layerwise test_grouped_device test_own_kernels test_long_decode"
tests=$(for t in $first ${TESTS:-$all}; do echo $t; done | awk '!seen[$0]++' |
        grep -x -F "$(echo ${TESTS:-$all} | tr ' ' '\n')")
for tool in ${TOOLS:-racecheck synccheck initcheck}; do
    echo "$tool test_gpu_attn"
    for t in $tests; do
        [ "$tool $t" = "racecheck test_limits" ] || echo "$tool $t"
    done
done > $W/jobs
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader -l 10 \
    > $W/gpu.txt 2>&1 &
p1=$!
vmstat 10 > $W/vmstat.txt 2>&1 &
p2=$!
{ date -u +%T; compute-sanitizer --version | tail -1; nproc
  echo "PAR=$PAR LIMIT=$LIMIT SHORT=${SHORT:-2} $(wc -l < $W/jobs) jobs"; } | tee $OUT/sanitize.log
export W U END PAR SHORT=${SHORT:-2} NCPU=$(nproc)
# one job: "$tool $test" on the cores of xargs's slot $KT_SLOT
job() {
    tool=$1; t=$2; n=$((NCPU / PAR)); c0=$((KT_SLOT * n)); log=$W/log/$tool-$t.log
    left=$((END - $(date +%s)))
    [ $left -gt 15 ] || { echo "$tool $t: not started" > $log.sum; return 0; }
    bin=$U/test_gpu; f=--kernel-name; k=kns=k_; env=
    [ "$t" = test_gpu_attn ] && bin=$U/test_gpu_attn
    case $tool in
    racecheck) env=KT_GPU_BLAS_MIN_TOKENS=100000 ;;
    initcheck) f=; k= ;;
    esac
    s=$(date +%s)
    env $env KT_TEST_FILTER=$t KT_TEST_SHORT=$SHORT KT_TEST_TIMES=1 timeout $left \
        taskset -c $c0-$((c0 + n - 1)) compute-sanitizer --tool $tool $f $k $bin > $log 2>&1
    rc=$?
    echo "$tool $t: rc=$rc $(($(date +%s) - s)) s (cores $c0-$((c0 + n - 1)))" > $log.sum
}
# xargs's sh -c reads the function from this file's text
sed -n '/^job() {/,/^}/p' "$0" > $W/job.sh
xargs -P "$PAR" --process-slot-var=KT_SLOT -L 1 sh -c '. $W/job.sh; job "$0" "$1"' < $W/jobs
kill $p1 $p2 2>/dev/null
# the summary: a line a job, then the reports' first lines
while read -r tool t; do
    log=$W/log/$tool-$t.log
    sum=$(cat $log.sum 2>/dev/null || echo "$tool $t: no result")
    [ -f $log ] || { echo "$sum"; continue; }
    verdict=$(grep -E -o '^\[  (PASSED|FAILED)  \] [0-9]+' $log | tr '\n' ' ')
    san=$(grep -E -o '(RACECHECK|ERROR) SUMMARY: .*' $log | head -1)
    internal=$(grep -c 'Internal Sanitizer Error' $log)
    by=$(grep -v -E 'Host Frame|backtrace' $log |
         sed -n 's/^=========.* at \(void \)\{0,1\}\([A-Za-z_][A-Za-z0-9_]*\).*/\2/p' | sort |
         uniq -c | awk '{printf "%s x%s ", $2, $1}')
    echo "$sum; ${verdict:-no verdict}; ${san:-no sanitizer summary}${by:+; reports: $by}$(
         [ "$internal" -gt 0 ] && echo "; internal errors $internal")"
done < $W/jobs | tee -a $OUT/sanitize.log
date -u +%T | tee -a $OUT/sanitize.log
for f in $W/log/*.log; do
    grep -q -E '^=========  *(Error|Warning|Uninitialized|Barrier|Race|Internal|Invalid)' $f ||
        continue
    echo "#### $(basename $f)"
    grep -E -m 4 -A 6 '^========= (Error|Warning|Uninitialized|Barrier|Race|Internal|Invalid)' $f |
        head -40
done >> $OUT/sanitize.log
grep -E 'times:|^\[ RUN' $W/log/*.log | sed "s|^$W/log/||" > $OUT/times.log
{ echo "# GPU utilization, memory (10 s)"; cat $W/gpu.txt; echo "# vmstat 10"; cat $W/vmstat.txt
} > $OUT/load.log
tar -C $W -cJf $OUT/raw.tar.xz log
