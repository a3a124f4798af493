#!/bin/sh
# Xeon decode between processes (session 12, cpu15), one device call from the
# repository root with .devdeps and BIN (scripts/device-pack.sh) carried:
#   BIN=.gpu-NAME sh scripts/device-decode-procs.sh
# The machine (lscpu -e, THP settings, NUMA nodes), then ROUNDS rounds of one
# kt-bench moe process per environment of AB (',' between the variables of one
# environment, '-' for none; default: the defaults and KT_MOE_DECODE_READ=1),
# DeepSeek-V3 T=1 over METHODS (FP8 again last: a second allocation in the same
# process), with KT_MOE_PROFILE=1 and /proc/vmstat's THP fault counters around
# each process. No process starts after STOP seconds. Raw in $OUT/procs.txt,
# the summary lines on stdout. MODEL, LAYERS, TOKENS, GS (the AMXINT4 group
# size) and THREADS (the workers) change the shape: MODEL=qwen3-30b-a3b
# LAYERS=16 GS=128 for Qwen3-30B-A3B (16 layers: the bytes many times the L3).
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
kt_device_bin "${BIN:?BIN=.gpu-NAME}" || exit 1
f=$OUT/procs.txt; t0=$(date +%s)
{
    date -u; nproc; lscpu | grep -E "Model name|Thread|Core|Socket|NUMA|MHz"; lscpu -e
    for k in enabled defrag khugepaged/defrag; do
        echo "thp $k: $(cat /sys/kernel/mm/transparent_hugepage/$k 2>/dev/null)"
    done
    numactl -H 2>/dev/null || ls /sys/devices/system/node/
    grep -E "MemTotal|MemFree|MemAvailable|AnonHuge|HugePages_Total" /proc/meminfo
} > "$f" 2>&1
sed -n '1,8p' "$f"; grep -E "^thp|node|Anon" "$f" | head -8
thp() { grep -E "^thp_fault_(alloc|fallback) " /proc/vmstat | tr '\n' ' '; }
bench="$BIN/tools/kt-bench/kt-bench moe --model ${MODEL:-deepseek-v3} --layers ${LAYERS:-2} \
--tokens ${TOKENS:-1} ${GS:+--group-size $GS} ${THREADS:+--threads $THREADS} \
--min-time ${MINT:-1} --no-onednn \
--method ${METHODS:-FP8,RAWINT4,BF16,FP8}"
for r in $(seq "${ROUNDS:-3}"); do
    for v in ${AB:-- KT_MOE_DECODE_READ=1}; do
        [ $(( $(date +%s) - t0 )) -lt "${STOP:-230}" ] || break 2
        echo "### round $r env $v $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$f"
        echo "before: $(thp)" >> "$f"
        env KT_MOE_PROFILE=1 $(echo "$v" | tr , ' ' | sed 's/^-$//') timeout 90 $bench >> "$f" 2>&1
        echo "rc=$? after: $(thp)" >> "$f"
    done
done
grep -E "^###|^  T=|^decode T=|pages:|threads:|clock:|moe profile: [0-9w]|^rc=" "$f"
exit 0
