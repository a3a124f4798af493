#!/bin/sh
# moe_kernel_ab.sh BUILD REV_A REV_B [moe_kernel_bench args ...]
#
# A / B of the AVX-512 MoE kernels (cpu/avx512/moe_avx512.c) at two git
# revisions on one pinned core: builds scripts/moe_kernel_bench.c twice, each
# linked with that revision's moe_avx512.c (its kernel-set getter renamed, so
# the rest comes from BUILD's libraries), then runs the two alternately, each
# row twice. Without bench arguments it runs the rows of docs/moe.md's session 6
# (RAWINT4 decode resident and from memory, FP8 / BF16 prefill).
# REV "work" means the working tree. Example:
#   scripts/moe_kernel_ab.sh build 0c10cb8 HEAD
set -e
B=$1 A=$2 Z=$3
shift 3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
build() { # REV NAME
    if [ "$1" = work ]; then cp cpu/avx512/moe_avx512.c "$T/$2.c"; else git show "$1:cpu/avx512/moe_avx512.c" > "$T/$2.c"; fi
    gcc -std=gnu11 -O2 -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq \
        -mavx512vnni -mavx512bf16 -mavx512vbmi -Icpu -Icpu/avx512 -Iinclude -Ilib/internal \
        -I"$B" -I"$B/include" -Dkt__moe_kernels_avx512=ab_kernels_avx512 -c "$T/$2.c" -o "$T/$2.o"
    cuda=""
    [ -f "$B/cuda/libkt_cuda.a" ] && cuda="$B/cuda/libkt_cuda.a"
    gcc -O2 -march=native -Icpu -Iinclude -I"$B/include" -I"$B" \
        -Dkt__moe_kernels_avx512=ab_kernels_avx512 scripts/moe_kernel_bench.c "$T/$2.o" \
        -o "$T/$2" -Wl,--start-group "$B"/lib/libkt_internal.a "$B"/cpu/libkt_cpu_*.a \
        "$B"/cpu/amx/libkt_amx_emulated.a $cuda -Wl,--end-group -lpthread -lm -lhwloc -lnuma \
        -lcjson -lpcre2-8 -ldnnl ${cuda:+-L/usr/local/cuda/lib64 -lcudart -lcublas -lstdc++}
}
build "$A" a
build "$Z" b
echo "# A = $A, B = $Z; $(uptime)"
run() {
    for i in 1 2; do
        printf 'A '; "$T/a" "$@"
        printf 'B '; "$T/b" "$@"
    done
}
if [ $# -gt 0 ]; then
    run "$@"
else
    for r in "resident avx512 3 2048 1" "resident avx512 3 7168 1" "resident avx512 3 768 1" \
             "resident avx512 3 2048 2" "decode avx512 3 768 1 256" "decode avx512 3 2048 1 256" \
             "decode avx512 3 7168 1 256" "decode avx512 3 2048 1 64" "prefill avx512 2 2048 16" \
             "prefill avx512 2 7168 16" "prefill avx512 2 2048 32" "prefill avx512 1 2048 16" \
             "prefill avx512 1 2048 32" "prefill avx512 3 2048 16" "prefill avx512 3 2048 32"; do
        # shellcheck disable=SC2086
        run $r
    done
fi
echo "# $(uptime)"
