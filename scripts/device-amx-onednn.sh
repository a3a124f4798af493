#!/bin/sh
# AMX prefill against oneDNN's INT8 and BF16 per-expert matmuls (kt-bench moe's
# yardsticks on), in one device call from the repository root, with .devdeps and
# BIN (release binaries packed by scripts/device-pack.sh) carried:
#   BIN=.gpu-NAME sh scripts/device-amx-onednn.sh
# ROUNDS (2) rounds, one kt-bench process a shape each (its yardsticks serve
# every row of that process): DeepSeek-V3 --layers 2 at T 1024 and 4096, then
# Qwen3-30B-A3B --layers 4 at T 1024, METHODS (AMXINT8,AMXINT4,BF16) with
# AMXINT4 at group size GS (128); then for each of VARIANTS (kt-bench options,
# ',' between the words of one, e.g. "--onednn-pack-m,128 --onednn-weights,plain")
# the same two shapes, AMXINT8 and AMXINT4, with the INT8 yardstick alone under
# those options; then AMXINT4 at each of GSIZES (64 32; empty: none) on
# DeepSeek-V3 without yardsticks (read them against the round's INT8 figure);
# then kt-bench gemm int8 / bf16 at M 32, 128, K 7168, N 2048 (hot weights, for
# scale). Raw output in $OUT/moe.txt; the summary lines on stdout.
set -u
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
B=${BIN:?BIN= names the carried binaries}
kt_device_bin "$B" || exit 1
f=$OUT/moe.txt; : > "$f"
kb=$B/tools/kt-bench/kt-bench
m=${METHODS:-AMXINT8,AMXINT4,BF16}
blk() { # a header, then the command's output
    echo "### $(date -u +%H:%M:%S) $*" >> "$f"; "$@" >> "$f" 2>&1; echo "rc=$?" >> "$f"
}
for r in $(seq "${ROUNDS:-2}"); do
    blk timeout 150 $kb moe --min-time 0.5 --method "$m" --group-size "${GS:-128}" \
        --model deepseek-v3 --layers 2 --tokens 1024,4096
    blk timeout 60 $kb moe --min-time 0.5 --method "$m" --group-size "${GS:-128}" \
        --model qwen3-30b-a3b --layers 4 --tokens 1024
done
for v in ${VARIANTS:-}; do
    a=$(echo "$v" | tr , ' ')
    blk timeout 150 $kb moe --min-time 0.5 --method AMXINT8,AMXINT4 --group-size "${GS:-128}" \
        --onednn-types int8 $a --model deepseek-v3 --layers 2 --tokens 1024,4096
    blk timeout 60 $kb moe --min-time 0.5 --method AMXINT8,AMXINT4 --group-size "${GS:-128}" \
        --onednn-types int8 $a --model qwen3-30b-a3b --layers 4 --tokens 1024
done
for g in ${GSIZES-64 32}; do
    blk timeout 60 $kb moe --min-time 0.5 --no-onednn --method AMXINT4 --group-size "$g" \
        --model deepseek-v3 --layers 2 --tokens 1024,4096
done
blk timeout 60 $kb gemm --model deepseek-v3 --m 32,128 --reps 5
echo "### $(date -u +%H:%M:%S) end" >> "$f"
grep -E "^(###|rc=|prefill|oneDNN|  T=|  note|# ISA|# L3| *M  |  *(32|128)  )" "$f"
exit 0
