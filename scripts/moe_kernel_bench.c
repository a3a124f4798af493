/*
 * moe_kernel_bench: one CPU MoE kernel on one pinned thread, timed in CPU
 * seconds of that thread (so that other processes sharing the cores cancel
 * out), next to a plain AVX-512 read loop timed the same way in the same run.
 * A developer's tool for kernel work; the official figures come from
 * `kt-bench moe` (whole backend, wall clock, several threads).
 *
 *   decode:  weights of `rows` x K per matrix, 512 MiB of them (huge pages
 *            advised), visited in a shuffled order, M tokens; prints the
 *            median over 11 passes of (kernel GB/s) / (read loop GB/s); the
 *            set's hint for the next matrix is given as the backend does
 *            (KT_BENCH_NO_HINT=1: not)
 *   prefill: 16 matrices of `rows` x K (cache-resident), M tokens; prints
 *            GFLOP/s per CPU second
 *   resident: one matrix of `rows` x K (64: L1 / L2), called over and over
 *            (>= 2e8 weight-token products per pass, best of 5); prints
 *            cycles per 64 weights (all M tokens) at the clock given in
 *            KT_BENCH_GHZ (default 3.65, this VM's), and weight GB/s;
 *            KT_BENCH_MIN=N: instead the fastest of N single calls in TSC
 *            cycles (rdtsc around each), which a loaded machine's other
 *            processes disturb far less than the best of 5 long passes
 *
 * Build (from the repository root, after `ninja -C BUILD`):
 *   B=BUILD; gcc -O2 -march=native -Icpu -Iinclude -I$B/include -I$B \
 *     scripts/moe_kernel_bench.c -o moe_kernel_bench -Wl,--start-group \
 *     $B/lib/libkt_internal.a $B/cpu/libkt_cpu_*.a $B/cpu/amx/libkt_amx_emulated.a \
 *     -Wl,--end-group -lpthread -lm -lhwloc -lnuma -lcjson -lpcre2-8 -ldnnl
 *   (a CUDA build: $B/cuda/libkt_cuda.a inside the group, and
 *    -L/usr/local/cuda/lib64 -lcudart -lcublas -lstdc++ at the end)
 * Run:
 *   ./moe_kernel_bench decode|prefill|resident avx512|x2|avx2|amx METHOD K M [rows]
 *   (METHOD: 1 BF16, 2 FP8, 3 RAWINT4, 4 AMXINT8 as in kt_method; amx: the
 *   AMX set, its tiles from its thresholds' tokens, the AVX-512 set below)
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

#include "kt/core.h"
#include "kt/hw.h"
#include "moe_kernels.h"

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* sum of a buffer: the read loop yardstick (AVX2 where the CPU has no
 * AVX-512: a Zen 3 reads memory at the same rate with 32-byte loads) */
__attribute__((target("avx2"))) static float read_loop_avx2(const float *a, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(a + i + 24));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

__attribute__((target("avx512f"))) static float read_loop_avx512(const float *a, size_t n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static float read_loop(const float *a, size_t n)
{
    return __builtin_cpu_supports("avx512f") ? read_loop_avx512(a, n) : read_loop_avx2(a, n);
}

/* KT_BENCH_PROBE=N (a measuring probe, not a kernel): each matrix's bytes
 * read as one sequential stream, a T1 prefetch pf bytes ahead (KT_MOE_INT4_PF,
 * default 4096) and N vpdpbusd per 64 bytes on 4 chains: how fast a single
 * stream with that much arithmetic per line reads memory. */
__attribute__((target("avx512f,avx512vnni"))) static int probe_stream(const uint8_t *p,
                                                                       size_t n, size_t pf,
                                                                       int work)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    const __m512i q = _mm512_set1_epi8(3);
    for (size_t i = 0; i < n; i += 64) {
        _mm_prefetch((const char *)p + i + pf, _MM_HINT_T1);
        __m512i v = _mm512_load_si512(p + i);
        for (int j = 0; j < work; j += 4) {
            a0 = _mm512_dpbusd_epi32(a0, v, q);
            a1 = _mm512_dpbusd_epi32(a1, v, q);
            a2 = _mm512_dpbusd_epi32(a2, v, q);
            a3 = _mm512_dpbusd_epi32(a3, v, q);
        }
        a0 = _mm512_xor_si512(a0, v);
    }
    return _mm512_reduce_add_epi32(
        _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s decode|prefill|resident avx512|x2|avx2 METHOD K M [rows]\n",
                argv[0]);
        return 2;
    }
    int decode = !strcmp(argv[1], "decode"), resident = !strcmp(argv[1], "resident");
    const char *set = argv[2];
    int method = atoi(argv[3]), K = atoi(argv[4]), M = atoi(argv[5]);
    int rows = argc > 6 ? atoi(argv[6]) : 64;
    (void)kt_hw_isa(); /* asks for the AMX tile permission where there are tiles */
    const kt__moe_kernels *ks = !strcmp(set, "avx512") ? kt__moe_kernels_avx512(method)
                                : !strcmp(set, "x2")   ? kt__moe_kernels_avx512_x2(method)
                                : !strcmp(set, "amx")  ? kt__moe_kernels_amx(method)
                                                       : kt__moe_kernels_avx2(method);
    if (!ks || M < 1 || M > 256 || K < 32 || K % 32 || rows < 1) {
        fprintf(stderr, "no such kernel set or bad shape\n");
        return 2;
    }
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(0, &cs);
    sched_setaffinity(0, sizeof cs, &cs);

    /* [n_mat][rows][K] weights (+ RAWINT4 / AMXINT8 scales after each matrix) */
    int i8 = method == KT_METHOD_AMXINT8;
    size_t wb = method == KT_METHOD_BF16                 ? (size_t)rows * K * 2
                : method == KT_METHOD_FP8 || i8          ? (size_t)rows * K
                                                         : (size_t)rows * K / 2;
    /* KT_BENCH_TILED=1: RAWINT4 repacked as the backend does (KT__INT4_TILED) */
    int tiled = method == KT_METHOD_RAWINT4 && getenv("KT_BENCH_TILED") &&
                atoi(getenv("KT_BENCH_TILED")) == 1;
    size_t mat = wb + (method == KT_METHOD_RAWINT4 ? (size_t)rows * K / 16 : i8 ? (size_t)rows * 4 : 0);
    if (tiled && kt__int4t_bytes(rows, K) > mat)
        mat = kt__int4t_bytes(rows, K);
    mat = (mat + 4095) & ~(size_t)4095;
    size_t bytes = decode ? (size_t)512 << 20 : resident ? mat : 16 * mat;
    uint8_t *w = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (w == MAP_FAILED)
        return 1;
    madvise(w, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < bytes; i += 8) { /* small finite values in every format */
        uint64_t v = (i * 0x9E3779B97F4A7C15ull) & 0x3f3f3f3f3f3f3f3full;
        memcpy(w + i, &v, 8);
    }
    size_t n_mat = bytes / mat;
    if (method == KT_METHOD_RAWINT4) /* scales BF16 +[2^-7, 2^-6), as kt-bench's */
        for (size_t i = 0; i < n_mat; i++) {
            uint16_t *sc = (uint16_t *)(w + i * mat + wb);
            for (size_t j = 0; j < (size_t)rows * K / 32; j++)
                sc[j] = (uint16_t)(0x3c00u | ((j * 0x9E37u) >> 3 & 0x7fu));
        }
    if (i8) /* row scales 2^-7 (the codes 0..63 are valid int8 weights) */
        for (size_t i = 0; i < n_mat; i++)
            for (int j = 0; j < rows; j++)
                ((float *)(w + i * mat + wb))[j] = 0x1p-7f;
    if (tiled) { /* each matrix as filled, repacked in place through a copy */
        uint8_t *tmp = malloc(mat);
        for (size_t i = 0; i < n_mat; i++) {
            uint8_t *base = w + i * mat;
            memcpy(tmp, base, mat);
            kt__wmat src = {tmp, tmp + wb, rows, K, 0, 0, NULL};
            kt__moe_int4_tile(&src, 0, rows, 0, K, base);
        }
        free(tmp);
    }
    size_t *order = malloc(n_mat * sizeof *order);
    for (size_t i = 0; i < n_mat; i++)
        order[i] = i;
    for (size_t i = n_mat - 1; i > 0; i--) { /* a fixed shuffle */
        size_t j = (i * 2654435761u) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    float *fp8_scales = malloc((size_t)((rows + 127) / 128) * ((K + 127) / 128) * 4);
    for (int i = 0; i < ((rows + 127) / 128) * ((K + 127) / 128); i++)
        fp8_scales[i] = 0.01f;
    size_t arow = kt__moe_act_row_bytes(ks->act, K);
    arow += arow % 4096 ? 0 : 64; /* as the backend's rows (act_stride in lib/moe/backend.c) */
    uint8_t *act = aligned_alloc(64, arow * (size_t)M);
    memset(act, 0, arow * (size_t)M);
    float *x = malloc((size_t)K * sizeof(float));
    for (int t = 0; t < M; t++) {
        for (int i = 0; i < K; i++)
            x[i] = 0.01f * (float)((i + t) % 7) - 0.03f;
        ks->quant(x, 0, K, K, act + (size_t)t * arow);
    }
    float *C = malloc(sizeof(float) * (size_t)M * rows);
    void *scratch = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
    /* the set's hint for its next call (the backend's use), unless KT_BENCH_NO_HINT */
    kt__moe_prefetch_fn hint = getenv("KT_BENCH_NO_HINT") ? NULL : ks->prefetch;
    int probe = getenv("KT_BENCH_PROBE") ? atoi(getenv("KT_BENCH_PROBE")) : -1;
    size_t probe_pf = getenv("KT_MOE_INT4_PF") ? (size_t)atol(getenv("KT_MOE_INT4_PF")) : 4096;
    double ratio[11], best = 1e30, best_k = 0, best_r = 0;
    float sink = 0;
    if (resident) { /* one matrix, many calls: the kernel's own speed */
        kt__wmat W = {w, method == KT_METHOD_RAWINT4 ? (void *)(w + (tiled ? 0 : wb))
                         : i8                        ? (void *)(w + wb)
                                                     : fp8_scales,
                      rows, K, tiled ? KT__INT4_TILED : 0, 0, NULL};
        if (getenv("KT_BENCH_MIN")) { /* the fastest single call */
            long n = atol(getenv("KT_BENCH_MIN"));
            unsigned long long best_c = ~0ull;
            for (long i = 0; i < n; i++) {
                kt__moe_new_epoch();
                unsigned long long c0 = __rdtsc();
                ks->gemm(&W, 0, rows, 0, K, act, arow, NULL, M, C, rows, scratch);
                unsigned long long c = __rdtsc() - c0;
                best_c = c < best_c ? c : best_c;
            }
            printf("%-18s K %5d M %d rows %4d: %.2f TSC cycles per 64 weights (fastest of %ld "
                   "calls)\n", ks->name, K, M, rows, (double)best_c / ((double)rows * K / 64), n);
            return 0;
        }
        long calls = (long)(2e8 / ((double)rows * K * M)) + 10;
        double best_t = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = cpu_now();
            for (long i = 0; i < calls; i++) {
                kt__moe_new_epoch();
                ks->gemm(&W, 0, rows, 0, K, act, arow, NULL, M, C, rows, scratch);
            }
            double t = cpu_now() - t0;
            best_t = t < best_t ? t : best_t;
        }
        const char *ghz = getenv("KT_BENCH_GHZ");
        double hz = (ghz ? atof(ghz) : 3.65) * 1e9;
        printf("%-18s K %5d M %d rows %4d: %.2f cycles per 64 weights, %.1f GB/s of weights "
               "per cpu-s\n", ks->name, K, M, rows,
               best_t * hz / ((double)calls * rows * K / 64), (double)calls * wb / best_t * 1e-9);
        return 0;
    }
    for (int rep = 0; rep < 11; rep++) {
        kt__moe_new_epoch();
        double t0 = cpu_now();
        for (size_t m = 0; m < n_mat; m++) {
            uint8_t *base = w + order[m] * mat;
            kt__wmat W = {base, method == KT_METHOD_RAWINT4 ? (void *)(base + (tiled ? 0 : wb))
                                : i8                        ? (void *)(base + wb)
                                                            : fp8_scales,
                          rows, K, tiled ? KT__INT4_TILED : 0, 0, NULL};
            if (hint && m + 1 < n_mat) { /* the next matrix, as the backend names it */
                uint8_t *nx = w + order[m + 1] * mat;
                kt__wmat Wn = {nx, method == KT_METHOD_RAWINT4 ? (void *)(nx + (tiled ? 0 : wb))
                                   : i8                        ? (void *)(nx + wb)
                                                               : fp8_scales,
                               rows, K, tiled ? KT__INT4_TILED : 0, 0, NULL};
                hint(&Wn, 0, rows, M);
            }
            if (probe >= 0)
                sink += (float)probe_stream(base, mat, probe_pf, probe);
            else
                ks->gemm(&W, 0, rows, 0, K, act, arow, NULL, M, C, rows, scratch);
        }
        double t1 = cpu_now();
        sink += read_loop((const float *)w, bytes / 4);
        double t2 = cpu_now();
        double gk = (double)n_mat * wb / (t1 - t0) * 1e-9, gr = (double)bytes / (t2 - t1) * 1e-9;
        ratio[rep] = gk / gr;
        best_k = gk > best_k ? gk : best_k;
        best_r = gr > best_r ? gr : best_r;
        best = t1 - t0 < best ? t1 - t0 : best;
    }
    qsort(ratio, 11, sizeof ratio[0], cmp_double);
    if (decode)
        printf("%-18s%s K %5d M %d rows %4d: %.2f x read loop [%.2f..%.2f], best %.2f GB/s "
               "(read %.1f), %.1f GFLOP/s per cpu-s%s\n",
               ks->name, tiled ? " tiled" : "", K, M, rows, ratio[5], ratio[2], ratio[8], best_k,
               best_r,
               2.0 * K * M * rows * (double)n_mat / best * 1e-9,
               hint ? ", next call hinted" : "");
    else
        printf("%-18s K %5d M %3d rows %4d: %.1f GFLOP/s per cpu-s\n", ks->name, K, M, rows,
               2.0 * K * M * rows * (double)n_mat / best * 1e-9);
    return sink == 12345.0f;
}
