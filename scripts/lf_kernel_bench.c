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
 *   TYPE: q4_0 q4_1 q5_0 q5_1 q8_0 q2_K ... (ggml names); ISA 2 / avx512 AVX-512
 *   VNNI, 3 / amx its AMX-INT8 prefill (kt-bench's pick on an AMX CPU; the packed
 *   tokens reused by every call, as the backend's gate and up calls and a thread's next
 *   items of one expert do), 1 / avx2 AVX2, 0 / scalar; default the best this CPU runs. KT_BENCH_REPACK=1: a type with a load-time repack
 *   (Q4_0, Q4_K, Q8_0; Q5_K, Q6_K and IQ4_NL with ISA 1) read from it (KT__LF_Q40X /
 *   Q4KX / Q80X / Q5KX / Q6KX / IQ4NLX, as the backend's decode does by default).
 *   KT_BENCH_HUGE=1: the matrices in 2 MiB pages, as the backend's copies and repacks.
 *   KT_BENCH_QUANT=1: times the set's activation quantizer instead (ks->quant of
 *   one row of K inputs into the sections TYPE needs), us per row.
 *   KT_BENCH_VS_READ=1 (MIB > 0): moe_kernel_bench's decode yardstick instead: the
 *   matrices in one huge-page mapping, visited in a fixed shuffle, 11 passes each
 *   followed by an AVX2 read loop over the same bytes; prints the median of kernel
 *   GB/s / read loop GB/s (the bytes the kernel reads: repacked ones with
 *   KT_BENCH_REPACK=1).
 * e.g. decode of a gate item: q4_0 1 384 2048 0; a prefill expert: q4_0 32 64 2048 0
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kt/hw.h"
#include "moe_kernels.h"
#include "ref/ggml_quants.h"
#include "bench_read_loop.h"

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

/* The weight matrices: with KT_BENCH_HUGE=1 in 2 MiB pages (THP "madvise"), as the
 * backend's expert copies and repacks (lib/moe/backend.c), else as malloc gives them
 * (4 KiB pages here: the hardware prefetchers stop at each page's end, so a kernel's
 * software prefetch helps more than it does in the backend). */
static void *weights_alloc(size_t bytes)
{
    const char *e = getenv("KT_BENCH_HUGE");
    if (!e || strcmp(e, "1"))
        return malloc(bytes);
    size_t huge = (size_t)2 << 20, n = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, n);
    if (p)
        madvise(p, n, MADV_HUGEPAGE);
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* KT_BENCH_VS_READ=1: nmat matrices of `per` bytes at base (each starting on a
 * 64-byte boundary) in a fixed shuffle, kernel against read loop, 11 passes. */
static void vs_read(const kt__moe_kernels *ks, uint8_t *base, size_t per, size_t nmat, int rows,
                    int K, int type, const uint8_t *rows_src, size_t src_per, const uint8_t *A,
                    size_t xrow, int M, float *C, void *scratch, const char *tname)
{
    size_t *order = malloc(nmat * sizeof *order);
    for (size_t i = 0; i < nmat; i++)
        order[i] = i;
    for (size_t i = nmat - 1; i > 0; i--) { /* moe_kernel_bench's fixed shuffle */
        size_t j = (i * 2654435761u) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double ratio[11], best_k = 0, best_r = 0;
    float sink = 0;
    for (int rep = 0; rep < 11; rep++) {
        double t0 = cpu_now();
        for (size_t m = 0; m < nmat; m++) {
            kt__wmat W = {base + order[m] * per, (void *)(rows_src + order[m] * src_per), rows, K,
                          type, 0, NULL};
            if (ks->prefetch && m + 1 < nmat) { /* the next matrix, as the backend names it */
                kt__wmat nx = W;
                nx.w = base + order[m + 1] * per;
                nx.scale = (void *)(rows_src + order[m + 1] * src_per);
                ks->prefetch(&nx, 0, rows, M);
            }
            ks->gemm(&W, 0, rows, 0, K, A, xrow, NULL, M, C, rows, scratch);
        }
        double t1 = cpu_now();
        sink += read_loop((const float *)base, per * nmat / 4);
        double t2 = cpu_now();
        double gk = (double)nmat * per / (t1 - t0) * 1e-9, gr = (double)nmat * per / (t2 - t1) * 1e-9;
        ratio[rep] = gk / gr;
        best_k = gk > best_k ? gk : best_k;
        best_r = gr > best_r ? gr : best_r;
    }
    qsort(ratio, 11, sizeof ratio[0], cmp_double);
    printf("%s %s M %d rows %d K %d: %.2f x read loop [%.2f..%.2f], best %.2f GB/s (read %.2f)%s\n",
           ks->name, tname, M, rows, K, ratio[5], ratio[2], ratio[8], best_k, best_r,
           sink == 12345.0f ? " " : "");
    free(order);
}

/* ISA as a number (0..2) or a name (scalar, avx2, avx512); -1: neither */
static int parse_isa(const char *s)
{
    static const char *const names[] = {"scalar", "avx2", "avx512", "amx"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i]) || (s[0] == '0' + i && !s[1]))
            return i;
    return -1;
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
    /* default: the best set this CPU runs (2 on a Zen 3 died of SIGILL) */
    int isa = argc > 6 ? parse_isa(argv[6]) : (int)kt__ggml_isa_best();
    if (isa < 0) {
        fprintf(stderr, "%s: ISA is 0 / scalar, 1 / avx2, 2 / avx512 or 3 / amx\n", argv[0]);
        return 2;
    }
    if (!tr || !kt__ggml_act_section(tr->type) || M < 1 || M > 256 || rows < 1 || K < 256 ||
        !kt__ggml_row_bytes(tr->type, K)) {
        fprintf(stderr, "%s: bad type or shape\n", argv[0]);
        return 2;
    }
    size_t rb = kt__ggml_row_bytes(tr->type, K), per = rb * (size_t)rows;
    size_t nmat = mib ? (mib << 20) / per + 1 : 1;
    uint8_t *W = weights_alloc(per * nmat);
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
    if (isa == 3 && !(kt_hw_isa() & KT_ISA_AMX_INT8)) /* (asks the tile permission) */
        ks = NULL;
    if (!ks) {
        fprintf(stderr, "%s: no set of ISA %d in this build\n", argv[0], isa);
        return 2;
    }
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
        X = weights_alloc((xper * nmat + 63) / 64 * 64);
        for (size_t i = 0; i < nmat; i++) {
            kt__wmat src = {W + i * per, NULL, rows, K, tr->type, 0, NULL};
            xtype = kt__lf_repack(&src, X + i * xper).type;
        }
    }
    const char *vr = getenv("KT_BENCH_VS_READ");
    if (vr && !strcmp(vr, "1") && mib) {
        /* the bytes the kernel reads, each matrix 64-byte aligned, in huge pages */
        size_t kper = ((X ? xper : per) + 63) & ~(size_t)63;
        size_t map = (kper * nmat + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
        uint8_t *H = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (H == MAP_FAILED)
            return 1;
        madvise(H, map, MADV_HUGEPAGE);
        for (size_t i = 0; i < nmat; i++)
            memcpy(H + i * kper, (X ? X + i * xper : W + i * per), X ? xper : per);
        vs_read(ks, H, kper, nmat, rows, K, X ? xtype : tr->type, W, per, A, xrow, M, C, scratch,
                X ? "repacked" : tr->name);
        munmap(H, map);
        free(W); free(X); free(x); free(A); free(C); free(scratch);
        return 0;
    }
    /* KT_BENCH_CALLS=N: exactly N calls (for instruction counts under callgrind) */
    long calls = 0, ncalls = getenv("KT_BENCH_CALLS") ? atol(getenv("KT_BENCH_CALLS")) : 0;
    double t0 = cpu_now(), t;
    kt__moe_prefetch_fn hint = ks->prefetch;
    do {
        wm.w = W + (size_t)(calls % (long)nmat) * per;
        if (X)
            wm = (kt__wmat){X + (size_t)(calls % (long)nmat) * xper, wm.w, rows, K, xtype, 0, NULL};
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
