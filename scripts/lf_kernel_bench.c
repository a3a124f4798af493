/*
 * lf_kernel_bench: one LLAMAFILE kernel call (a gemm of the kernel set the
 * backend picks for the block type) on one thread, timed in CPU seconds of
 * that thread, so that other processes sharing the cores mostly cancel out.
 * A developer's tool for kernel work; the official figures come from
 * `kt-bench moe --gguf` (whole backend, wall clock, several threads).
 *
 *   rows x K weights of TYPE (ggml's reference quantizer, random values),
 *   M tokens; MIB 0: the same matrix every call (rows x K in L2 when small),
 *   MIB > 0: about that many MiB of matrices visited in turn (from memory).
 *   Prints weight GB/s and ns per 64 weight bytes per CPU second, and
 *   multiply-adds per CPU second (all M tokens). From memory, each call is given
 *   the backend's hint for the next one (the set's prefetch; KT_LF_NOHINT=1:
 *   none).
 *
 * Build (from the repository root, after `ninja -C BUILD`):
 *   B=BUILD; gcc -O2 -march=native -Icpu -Iinclude -I$B/include -I$B \
 *     scripts/lf_kernel_bench.c -o lf_kernel_bench -Wl,--start-group \
 *     $B/lib/libkt_internal.a $B/cpu/libkt_cpu_*.a $B/cpu/amx/libkt_amx_emulated.a \
 *     -Wl,--end-group -lpthread -lm -lhwloc -lnuma -lcjson -lpcre2-8 -ldnnl
 *   (with CUDA configured, add $B/cuda/libkt_cuda.a inside the group and
 *   -L/usr/local/cuda/lib64 -lcudart -lcublas -lstdc++ after it)
 * Run:
 *   ./lf_kernel_bench TYPE M ROWS K MIB [ISA]
 *   TYPE: q4_0 q4_1 q5_0 q5_1 q8_0 q2_K ... (ggml names); ISA 2 AVX-512 VNNI
 *   (default), 1 AVX2, 0 scalar. KT_BENCH_REPACK=1: a type with a load-time repack
 *   (Q4_0, Q4_K, Q8_0; Q5_K, Q6_K and IQ4_NL with ISA 1) read from it (KT__LF_Q40X /
 *   Q4KX / Q80X / Q5KX / Q6KX / IQ4NLX, as the backend's decode does by default).
 *   KT_BENCH_QUANT=1: times the set's activation quantizer instead (ks->quant of
 *   one row of K inputs into the sections TYPE needs), us per row.
 * e.g. decode of a gate item: q4_0 1 384 2048 0; a prefill expert: q4_0 32 64 2048 0
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe_kernels.h"
#include "ref/ggml_quants.h"

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s TYPE M ROWS K MIB [ISA]\n", argv[0]);
        return 2;
    }
    const kt_ggml_traits *tr = NULL;
    for (int t = 0; t < 200 && !tr; t++) {
        const kt_ggml_traits *c = kt__ggml_traits((kt_type)t);
        if (c && !strcmp(c->name, argv[1]))
            tr = c;
    }
    int M = atoi(argv[2]), rows = atoi(argv[3]), K = atoi(argv[4]);
    size_t mib = (size_t)atol(argv[5]);
    int isa = argc > 6 ? atoi(argv[6]) : 2;
    if (!tr || !kt__ggml_act_section(tr->type) || M < 1 || M > 256 || rows < 1 || K < 256 ||
        !kt__ggml_row_bytes(tr->type, K)) {
        fprintf(stderr, "%s: bad type or shape\n", argv[0]);
        return 2;
    }
    size_t rb = kt__ggml_row_bytes(tr->type, K), per = rb * (size_t)rows;
    size_t nmat = mib ? (mib << 20) / per + 1 : 1;
    uint8_t *W = malloc(per * nmat);
    /* 64-byte aligned as the backend's rows (with calloc'd ones the Q8_K quantizer of
     * K 1024 / 2048 ran 2-2.4x slower per input than K 768 / 1792; cause not isolated) */
    float *x = aligned_alloc(64, ((size_t)K * sizeof(float) + 63) & ~(size_t)63);
    for (size_t r = 0; r < (size_t)rows * nmat; r++) {
        for (int k = 0; k < K; k++)
            x[k] = frand();
        tr->quantize(x, W + r * rb, K);
    }
    unsigned mask = kt__ggml_act_section(tr->type);
    const kt__moe_kernels *ks = kt__moe_llamafile_kernels(isa, mask);
    size_t xrow = kt__moe_act_row_bytes(ks->act, K);
    uint8_t *A = aligned_alloc(64, ((size_t)M * xrow + 63) & ~(size_t)63);
    memset(A, 0, (size_t)M * xrow);
    for (int m = 0; m < M; m++) {
        for (int k = 0; k < K; k++)
            x[k] = frand();
        ks->quant(x, 0, K, K, A + (size_t)m * xrow);
    }
    const char *qb = getenv("KT_BENCH_QUANT");
    if (qb && !strcmp(qb, "1")) {
        long n = 0;
        double q0 = cpu_now(), dt;
        do {
            for (int i = 0; i < 100; i++, n++)
                ks->quant(x, 0, K, K, A);
            dt = cpu_now() - q0;
        } while (dt < 0.5);
        printf("%s %s quant K %d: %.2f us per row (act row %zu bytes)\n", ks->name, tr->name, K,
               dt / n * 1e6, xrow);
        free(W); free(x); free(A);
        return 0;
    }
    float *C = malloc(sizeof(float) * (size_t)M * (size_t)rows);
    void *scratch = ks->scratch_bytes ? malloc(ks->scratch_bytes) : NULL;
    kt__wmat wm = {.rows = rows, .cols = K, .type = tr->type};
    const char *rpk = getenv("KT_BENCH_REPACK");
    size_t xper = kt__lf_repack_bytes(tr->type, rows, K);
    uint8_t *X = NULL;
    int xtype = 0;
    if (rpk && !strcmp(rpk, "1") && xper) {
        X = aligned_alloc(64, (xper * nmat + 63) / 64 * 64);
        for (size_t i = 0; i < nmat; i++) {
            kt__wmat src = {W + i * per, NULL, rows, K, tr->type, 0};
            xtype = kt__lf_repack(&src, X + i * xper).type;
        }
    }
    /* KT_BENCH_CALLS=N: exactly N calls (for instruction counts under callgrind) */
    long calls = 0, ncalls = getenv("KT_BENCH_CALLS") ? atol(getenv("KT_BENCH_CALLS")) : 0;
    double t0 = cpu_now(), t;
    kt__moe_prefetch_fn hint = ks->prefetch;
    do {
        wm.w = W + (size_t)(calls % (long)nmat) * per;
        if (X)
            wm = (kt__wmat){X + (size_t)(calls % (long)nmat) * xper, wm.w, rows, K, xtype, 0};
        if (hint && mib) { /* as the backend: the next call's rows named before this one */
            kt__wmat nx = wm;
            nx.w = (X ? X + (size_t)((calls + 1) % (long)nmat) * xper
                      : W + (size_t)((calls + 1) % (long)nmat) * per);
            nx.scale = W + (size_t)((calls + 1) % (long)nmat) * per;
            hint(&nx, 0, rows, M);
        }
        ks->gemm(&wm, 0, rows, 0, K, A, xrow, NULL, M, C, rows, scratch);
        calls++;
        t = cpu_now() - t0;
    } while (ncalls ? calls < ncalls : t < 1.0);
    printf("%s %s%s M %d rows %d K %d %s: %.2f GB/s  %.2f ns per 64 B  %.1f GMAC/s\n", ks->name,
           tr->name, X ? " repacked" : "", M, rows, K, mib ? "memory" : "resident",
           (double)per * calls / t * 1e-9, t / calls / ((double)per / 64) * 1e9, (double)rows * K * M * calls / t * 1e-9);
    free(W); free(X); free(x); free(A); free(C); free(scratch);
    return 0;
}
