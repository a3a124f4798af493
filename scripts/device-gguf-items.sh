#!/bin/sh
# LLAMAFILE decode work split on the GPU machine's Xeon, one device call (~3 min):
#   sh scripts/device-gguf-items.sh     (repository root, .devdeps carried)
# Builds kt-bench and kt-convert (release, no CUDA), writes a GGUF_LAYERS-layer
# Qwen3-30B-A3B-shaped model in /dev/shm, converts it to Q4_0 / Q4_K / Q8_0 and runs
# kt-bench moe --gguf at T = 1 and 4 for each KT_MOE_DECODE_GRAIN:KT_MOE_DECODE_ITEMS
# pair of ITEMS for Q4_0, ITEMS2 for the other types ("default" = the backend's own
# choice, 64:4),
# each KT_LF_AHEAD of AHEADS (decode prefetch distance in bytes; "default" =
# 8 KiB, at most 12 rows), each KT_LF_DEC_ROWS of ROWS (rows side by side in a one-token tile;
# "default" = 4), each of HINTS ("hint": the backend's next-call hints, as it
# runs; "nohint": KT_LF_NOHINT=1) and each KT_LF_DEC_ORDER of ORDERS (one-token
# raw tiles' rows "side" by side or "seq" one after another; "default" = side;
# AHEADS may hold 0: no software prefetch), each KT_MOE_DECODE_TAIL of TAILS (0 / 1: the
# decode tail off / on; "default" = the backend's choice), each KT_LF_REPACK of REPACKS
# (the types repacked for decode: 1 Q4_0, Q4_K and Q8_0, 0 none, or a list such as
# q4_0,q4_K; "default" = 1), at the T of DEC_T (1,4) for DEC_TIME
# (0.5) s, with KT_MOE_PROFILE's per-phase times; then,
# for each T of PREFILL, a prefill row with and without the hints (PREFILL_HINTS;
# ONEDNN=1: oneDNN beside the first). Steps past DEADLINE seconds are skipped. With
# BIN=DIR (release binaries carried in DIR, scripts/device-env.sh's
# kt_device_bin) nothing is built. Logs in $OUT.
set -u
. scripts/device-env.sh # NO_ENV=1: its functions only
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=${BIN:-${B:-build-device}}
T0=$(date +%s)
late() { [ $(($(date +%s) - T0)) -gt "${DEADLINE:-170}" ]; }
if [ -n "${BIN:-}" ]; then
    kt_device_bin "$BIN" || exit 1
else
    { [ -d "$B" ] || meson setup "$B" --buildtype=release -Dcuda=disabled > /dev/null; } &&
        ninja -C "$B" -j "$(nproc)" tools/kt-bench/kt-bench tools/kt-convert/kt-convert \
            > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
echo "built at $(($(date +%s) - T0)) s"
python3 tools/kt-bench/random_qwen3_moe.py /dev/shm/q3 --layers "${GGUF_LAYERS:-4}" > /dev/null ||
    exit 1
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for t in ${GGUF_TYPES:-Q4_0 Q4_K Q8_0}; do
    late && { echo "skipped $t (deadline)"; continue; }
    "$B/tools/kt-convert/kt-convert" --input /dev/shm/q3 --output /dev/shm/q3_$t.gguf \
        --method gguf:$t --quiet > /dev/null || continue
    echo "$t converted at $(($(date +%s) - T0)) s; $(uptime)"
    items=${ITEMS:-default 64:4 32:16 64:8 32:4}
    [ "$t" = "${GGUF_TYPES:-Q4_0}" ] || [ "$t" = Q4_0 ] || items=${ITEMS2:-default 64:4}
    for it in $items; do for d in ${AHEADS:-default}; do for rw in ${ROWS:-default}; do
    for h in ${HINTS:-hint}; do for o in ${ORDERS:-default}; do for tl in ${TAILS:-default}; do
    for rp in ${REPACKS:-default}; do
        late && { echo "skipped $t $it $d $rw $h $o $tl $rp (deadline)"; continue; }
        if [ "$it" = default ]; then g=; n=; else g=${it%%:*}; n=${it##*:}; fi
        [ "$d" = default ] && pf= || pf=$d
        [ "$rw" = default ] && nr= || nr=$rw
        [ "$h" = hint ] && nh= || nh=1
        [ "$o" = default ] && od= || od=$o
        [ "$tl" = default ] && ot= || ot=$tl
        [ "$rp" = default ] && orp= || orp=$rp
        log=$OUT/items-$t-$(echo "$it" | tr : x)-$d-$rw-$h-$o-$tl-$rp-$(date +%s).log
        KT_MOE_DECODE_GRAIN=$g KT_MOE_DECODE_ITEMS=$n KT_LF_AHEAD=$pf KT_LF_DEC_ROWS=$nr \
            KT_LF_NOHINT=$nh KT_LF_DEC_ORDER=$od KT_MOE_DECODE_TAIL=$ot KT_LF_REPACK=$orp \
            KT_MOE_PROFILE=1 \
            timeout 40 \
            "$B/tools/kt-bench/kt-bench" moe --gguf /dev/shm/q3_$t.gguf --tokens "${DEC_T:-1,4}" \
            --no-onednn --min-time "${DEC_TIME:-0.5}" > "$log" 2>&1
        echo "== $t items $it ahead $d rows $rw $h order $o tail $tl repack $rp rc=$?"
        grep -E "T=|profile|repacked" "$log" | sed 's/libkt: warning: moe profile: //'
    done; done; done; done; done; done; done
    # prefill (PREFILL="512 ..." token counts): as it runs, then without the backend's
    # next-call hints (KT_LF_NOHINT=1); ONEDNN=1 adds oneDNN's BF16 matmuls to the first
    for T in ${PREFILL:-}; do for h in ${PREFILL_HINTS:-hint nohint}; do
        late && { echo "skipped $t T=$T $h (deadline)"; continue; }
        [ "$h" = hint ] && nh= || nh=1
        od=--no-onednn; [ "$h" = hint ] && [ -n "${ONEDNN:-}" ] && od=
        log=$OUT/prefill-$t-$T-$h.log
        KT_LF_NOHINT=$nh timeout 60 "$B/tools/kt-bench/kt-bench" moe \
            --gguf /dev/shm/q3_$t.gguf --tokens "$T" $od --min-time 1 > "$log" 2>&1
        echo "== $t prefill T=$T $h rc=$?"
        grep -E "T=" "$log"
    done; done
    rm -f /dev/shm/q3_$t.gguf
done
echo "done at $(($(date +%s) - T0)) s"
