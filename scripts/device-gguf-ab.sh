#!/bin/sh
# LLAMAFILE decode A/B on the GPU machine's Xeon, one device call, release binaries
# carried (BIN=DIR from scripts/device-pack.sh; nothing is built):
#   BIN=.gpu-X SPECS="default KT_LF_Q4K=2" sh scripts/device-gguf-ab.sh
# Writes a GGUF_LAYERS-layer (4) Qwen3-30B-A3B-shaped model in /dev/shm, converts it
# once to each of GGUF_TYPES (Q4_K Q4_0 Q8_0), then runs ROUNDS (3) rounds; a round
# runs, for each type, kt-bench moe --gguf at the T of DEC_T (1,4) for DEC_TIME (0.5) s
# once per spec of SPECS_<type> (else SPECS; "default" alone if neither), specs in
# order, so that the arms alternate within a minute and each row has its own stream
# samples. A spec is "default" (nothing set) or VAR=VAL[,VAR=VAL...], e.g.
# KT_LF_AHEAD=4096,KT_LF_NOHINT=1; TOKENS=1+4 sets that run's T instead of DEC_T
# (a T=1-only run's profile lines are the one-token calls'). KT_MOE_PROFILE=1 on every run (its per-phase
# lines are printed). TESTS="test_llamafile ..." run first (each cut at 150 s).
# Steps past DEADLINE (250) seconds are skipped. Logs in $OUT.
set -u
. scripts/device-env.sh # NO_ENV=1: its functions only
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
T0=$(date +%s)
late() { [ $(($(date +%s) - T0)) -gt "${DEADLINE:-250}" ]; }
[ -n "${BIN:-}" ] || { echo "BIN= (carried release binaries) is required"; exit 1; }
kt_device_bin "$BIN" || exit 1
B=$BIN
echo "# $(date -u +%H:%M:%S) $(grep -m1 'model name' /proc/cpuinfo); $(nproc) CPUs; $(uptime)"
for t in ${TESTS:-}; do
    timeout 150 "$B/tests/unit/$t" > "$OUT/$t.log" 2>&1
    echo "== $t rc=$? at $(($(date +%s) - T0)) s"
    grep -E '^\[  (PASSED|FAILED|SKIPPED)|^\[  ERROR|^\[  FAILED  \]' "$OUT/$t.log"
done
python3 tools/kt-bench/random_qwen3_moe.py /dev/shm/q3 --layers "${GGUF_LAYERS:-4}" > /dev/null ||
    exit 1
for t in ${GGUF_TYPES:-Q4_K Q4_0 Q8_0}; do
    "$B/tools/kt-convert/kt-convert" --input /dev/shm/q3 --output /dev/shm/q3_$t.gguf \
        --method gguf:$t --quiet > /dev/null || { echo "convert $t failed"; continue; }
done
echo "converted at $(($(date +%s) - T0)) s; $(uptime)"
rm -rf /dev/shm/q3
r=1
while [ "$r" -le "${ROUNDS:-3}" ]; do
    for t in ${GGUF_TYPES:-Q4_K Q4_0 Q8_0}; do
        eval "specs=\${SPECS_$t:-\${SPECS:-default}}"
        for s in $specs; do
            late && { echo "skipped round $r $t $s (deadline)"; continue; }
            log=$OUT/ab-$t-r$r-$(echo "$s" | tr ',=' '_-').log
            vars=; tok=${DEC_T:-1,4}
            for v in $(echo "$s" | tr ',' ' '); do
                case $v in
                default) ;;
                TOKENS=*) tok=$(echo "${v#TOKENS=}" | tr + ,) ;;
                *) vars="$vars $v" ;;
                esac
            done
            env KT_MOE_PROFILE=1 $vars timeout 40 "$B/tools/kt-bench/kt-bench" moe \
                --gguf /dev/shm/q3_$t.gguf --tokens "$tok" --no-onednn \
                --min-time "${DEC_TIME:-0.5}" > "$log" 2>&1
            echo "== r$r $t $s rc=$? at $(($(date +%s) - T0)) s"
            grep -E "T=|profile" "$log" | sed 's/libkt: warning: moe profile: //'
        done
    done
    r=$((r + 1))
done
rm -f /dev/shm/q3_*.gguf
echo "done at $(($(date +%s) - T0)) s"
