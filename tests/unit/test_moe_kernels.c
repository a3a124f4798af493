/*
 * MoE kernels (cpu/avx512, cpu/avx2) against the scalar reference (cpu/ref)
 * over ragged shapes: rows and inputs not multiples of the vector width (where
 * the format allows), 1..17 tokens (decode and prefill paths), sub-ranges of
 * rows and inputs (NUMA slices), gathered activation rows.
 *
 * Tolerance per output: c * sum_k |a_k| |w_k| with c = 1e-5 where the kernel
 * computes the same products as the reference (BF16; FP8 up to 3 tokens, plus
 * the products of E4M3 subnormals, which the AVX-512 shift decode reads as zero;
 * RAWINT4 on the AVX-512 VNNI set, INT8 activations per 32-group), c = 8e-3 where
 * it rounds dequantized weights to BF16 (FP8 prefill from 4 tokens, the AMX sets).
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kt/hw.h"
#include "kt/moe.h"
#include "kt_config.h"
#include "moe/moe_internal.h"
#include "moe_test_util.h"
#include "test_moe_common.h"

#define AVX512_BITS \
    (KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ | \
     KT_ISA_AVX512VNNI | KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI)
#define AVX2_BITS (KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C)

static float fp8_scale(void)
{
    return 0.5f + tst_uniform() * 0.25f;
}

/* Any E4M3 code but NaN. */
static uint8_t fp8_code(void)
{
    uint8_t b = (uint8_t)(tst_rand() & 0xff);
    return (b & 0x7f) == 0x7f ? b ^ 1 : b;
}

/* Random weights of a method, [rows][cols], with scales; dequantized copy. */
static void rand_weights(int method, int rows, int cols, void **w, void **s, float **f)
{
    size_t n = (size_t)rows * cols;
    *f = malloc(n * sizeof(float));
    *s = NULL;
    if (method == KT_METHOD_BF16) {
        *w = tst_bf16_values(n, 1.0f, *f);
    } else if (method == KT_METHOD_FP8) {
        tst_fp8_matrix(rows, cols, fp8_scale, fp8_code, w, s, *f);
    } else if (method == KT_METHOD_AMXINT8) {
        int8_t *q = malloc(n);
        float *sc = malloc((size_t)rows * sizeof(float));
        for (int r = 0; r < rows; r++)
            sc[r] = 0.01f + 0.01f * (tst_uniform() + 1.0f);
        for (size_t i = 0; i < n; i++) {
            q[i] = (int8_t)((int)(tst_rand() % 255u) - 127);
            (*f)[i] = (float)q[i] * sc[i / (size_t)cols];
        }
        *w = q;
        *s = sc;
    } else {
        tst_rawint4_matrix(rows, cols, 32, 0.05f, w, s, *f);
    }
}

/* INT4 scales [rows][ng] moved onto the grid of format version 2 (lib/convert,
 * kt__int4_quant_row): the row's largest scale C rounded down to a 4-bit
 * mantissa, each other e C / 16 with e = round(16 s / C) in 1..16. */
static void scales_on_grid(void *scales, int rows, int ng)
{
    uint16_t *sc = scales;
    for (int r = 0; r < rows; r++) {
        uint16_t *sr = sc + (size_t)r * ng;
        float m = 0.0f;
        for (int g = 0; g < ng; g++)
            m = fmaxf(m, tst_bf16(sr[g]));
        int p;
        frexpf(m, &p);
        float C = ldexpf(floorf(ldexpf(m, 4 - p)), p - 4);
        for (int g = 0; g < ng; g++) {
            float e = fminf(16.0f, fmaxf(1.0f, nearbyintf(tst_bf16(sr[g]) * 16.0f / C)));
            sr[g] = tst_to_bf16(tst_bf16(sr[g]) == m ? C : e * C / 16.0f);
        }
    }
}

/* check_int8_act: INT4 scales on the grid (format version 2's files) */
static int grid_scales;
/* check_int8_act: the packer's grid data made for each matrix (W->grid), its
 * outputs also compared bit for bit with the same calls without; with
 * grid_scales every 11th row from row 10 is put off the grid */
static int use_grid;

/* The activation rows x [n][K] quantized by a kernel set (row bytes in *row_bytes);
 * the caller frees them. */
static uint8_t *quant_rows(const kt__moe_kernels *ks, const float *x, int n, int K,
                           size_t *row_bytes)
{
    size_t rb = kt__moe_act_row_bytes(ks->act, K);
    uint8_t *a = calloc((size_t)n, rb);
    for (int t = 0; t < n; t++)
        ks->quant(x + (size_t)t * K, 0, K, K, a + (size_t)t * rb);
    *row_bytes = rb;
    return a;
}

/* precise: a KT_MOE_PREC_BF16X2 set, checked against the scalar F32-activation
 * set on activations that are not BF16 numbers (so the lo halves matter), and
 * that oracle against a double-precision dot product. */
static void check_set_mode(const kt__moe_kernels *ks, int method, int precise)
{
    const kt__moe_kernels *ref =
        precise ? kt__moe_kernels_ref_precise(method) : kt__moe_kernels_ref(method);
    static const int rows_list[] = {1, 5, 67, 130};
    /* the last: rows longer than the prefill kernels' K chunks (2048 for FP8 / INT4);
     * RAWINT4 past 2560 inputs, BF16 past 5461 (the one-token decodes' 2-row tiles;
     * BF16X2: on a 32 KiB L1); RAWINT4 1184: the decode's blocks of 512 inputs, a
     * whole step after them and a partial one (9 x 128 + 32) */
    static const int cols_fp[] = {7, 64, 200, 300, 5800};
    static const int cols_i4[] = {32, 96, 160, 1184, 2720};
    static const int m_list[] = {1, 2, 3, 4, 5, 17, 170};
    double worst = 0;
    for (int ri = 0; ri < 4; ri++) {
        for (int ci = 0; ci < 5; ci++) {
            if (ci == 4 && ri != 2)
                continue; /* long rows: one row count */
            int N = rows_list[ri];
            int K = method == KT_METHOD_RAWINT4 ? cols_i4[ci] : cols_fp[ci];
            void *w, *s;
            float *f;
            rand_weights(method, N, K, &w, &s, &f);
            kt__wmat W = {w, s, N, K, 0, 0, NULL};
            for (int mi = 0; mi < 7; mi++) {
                int M = m_list[mi];
                int n_act = M + 3;
                float *x = malloc((size_t)n_act * K * sizeof(float));
                for (int i = 0; i < n_act * K; i++)
                    x[i] = precise ? tst_uniform() : tst_bf16(tst_to_bf16(tst_uniform()));
                size_t sr, st;
                uint8_t *ar = quant_rows(ref, x, n_act, K, &sr);
                uint8_t *at = quant_rows(ks, x, n_act, K, &st);
                int32_t rows_idx[170];
                for (int m = 0; m < M; m++)
                    rows_idx[m] = (m * 5 + 2) % n_act;
                /* full range, then a slice of rows and inputs */
                /* part 2 (the AVX2 RAWINT4 set, which reads 2 groups a step):
                 * inputs from an odd group on */
                int parts = !strcmp(ks->name, "avx2-int4e") ? 3 : 2;
                for (int part = 0; part < parts; part++) {
                    int n0 = part ? N / 3 : 0, n1 = N;
                    int k0 = (part && K > 128) ? 128 : 0, k1 = K;
                    if (part == 2)
                        k0 = K > 32 ? 32 * (K / 64 > 1 ? 3 : 1) : 0;
                    if (n1 <= n0)
                        continue;
                    if (part == 2 && k0) /* the group before k0 must not count, even
                                          * NaN (its Q8E64 d lanes 0-3) */
                        for (int t = 0; t < n_act; t++) {
                            float *d = (float *)(at + (size_t)t * st + (size_t)(K + 63) / 64 * 64) +
                                       16 * (k0 / 64);
                            for (int l = 0; l < 4; l++)
                                d[l] = NAN;
                        }
                    int nb = n1 - n0;
                    float *cr = malloc((size_t)M * nb * sizeof(float));
                    float *ct = malloc((size_t)M * nb * sizeof(float));
                    void *scr_r = calloc(1, ref->scratch_bytes + 64);
                    void *scr_t = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
                    kt__moe_new_epoch(); /* fresh activation buffers */
                    ref->gemm(&W, n0, n1, k0, k1, ar, sr, rows_idx, M, cr, nb, scr_r);
                    ks->gemm(&W, n0, n1, k0, k1, at, st, rows_idx, M, ct, nb, scr_t);
                    double c = precise ? 2e-5 : 1e-5;
                    /* RAWINT4's VNNI prefill: the reference's integer products */
                    int int4_vnni = method == KT_METHOD_RAWINT4 &&
                                     !strcmp(ks->name, "avx512-vnni");
                    if (!precise && method != KT_METHOD_BF16 && M >= 4 && !int4_vnni &&
                        (strstr(ks->name, "avx512") || strstr(ks->name, "amx")))
                        c = 8e-3;
                    /* kernels that quantize each token to int8 over [k0, k1) (AMX-INT8
                     * tiles, the VNNI AMXINT8 kernel) may also be off by half a step,
                     * max|a| / 254, per input (test_int8_act checks them exactly) */
                    int act_q8 = !precise && (strstr(ks->name, "amx-int8") ||
                                              (method == KT_METHOD_AMXINT8 &&
                                               strstr(ks->name, "avx512-vnni")));
                    if (act_q8)
                        c = 8e-3;
                    /* the AVX-512 FP8 decode's shifts read E4M3 subnormals (|q| <=
                     * 0.875 2^-6, a 16th of these random codes, under 1e-4 of a real
                     * checkpoint's) as BF16 denormals, which vdpbf16ps takes as zero:
                     * their products may be missing, on top of c */
                    int fp8_daz = method == KT_METHOD_FP8 && !precise &&
                                  (!strcmp(ks->name, "avx512-fp8") ||
                                   !strcmp(ks->name, "amx-bf16+fp8"));
                    for (int m = 0; m < M; m++)
                        for (int n = n0; n < n1; n++) {
                            double mag = 0, dot = 0, wsum = 0, amax = 0, sub = 0;
                            for (int k = k0; k < k1; k++) {
                                double a = x[(size_t)rows_idx[m] * K + k];
                                double p = a * f[(size_t)n * K + k];
                                if (fp8_daz && !(((const uint8_t *)w)[(size_t)n * K + k] & 0x78))
                                    sub += fabs(p);
                                mag += fabs(p);
                                dot += p;
                                wsum += fabs(f[(size_t)n * K + k]);
                                amax = fmax(amax, fabs(a));
                            }
                            if (act_q8)
                                mag += wsum * amax / 127 / c;
                            size_t at = (size_t)m * nb + n - n0;
                            if (precise && !(fabs(cr[at] - dot) <= 1e-5 * mag + 1e-30))
                                fail_msg("oracle %s %s: C[%d][%d] = %g, double %g",
                                         ref->name, kt_method_name((kt_method)method), m, n,
                                         cr[at], dot);
                            double d = fabs(ct[at] - cr[at]);
                            double rel = (d > sub ? d - sub : 0) / (mag + 1e-30);
                            if (rel > worst && c < 1e-4)
                                worst = rel;
                            if (!(d <= c * mag + sub + 1e-30))
                                fail_msg("%s %s N=%d K=%d M=%d rows [%d,%d) inputs [%d,%d): "
                                         "C[%d][%d] = %g, reference %g (tol %g)",
                                         ks->name, kt_method_name((kt_method)method), N, K, M, n0,
                                         n1, k0, k1, m, n, ct[(size_t)m * nb + n - n0],
                                         cr[(size_t)m * nb + n - n0], c * mag + sub);
                        }
                    if (!strncmp(ks->name, "amx", 3) && nb > 1) {
                        /* Same epoch, fewer rows: reuses the packed activations
                         * (as an item's up call does after its gate call) and must
                         * give the same numbers. */
                        float *c2 = malloc((size_t)M * nb * sizeof(float));
                        ks->gemm(&W, n0 + 1, n1, k0, k1, at, st, rows_idx, M, c2, nb, scr_t);
                        for (int m = 0; m < M; m++)
                            for (int n = n0 + 1; n < n1; n++)
                                if (c2[(size_t)m * nb + n - n0 - 1] != ct[(size_t)m * nb + n - n0])
                                    fail_msg("%s: repeated call differs at [%d][%d]", ks->name, m,
                                             n);
                        free(c2);
                    }
                    free(cr);
                    free(ct);
                    free(scr_r);
                    free(scr_t);
                }
                free(x);
                free(ar);
                free(at);
            }
            free(w);
            free(s);
            free(f);
        }
    }
    printf("  %-12s %-8s ok (worst exact-path error %.2g of sum|a||w|)\n", ks->name,
           kt_method_name((kt_method)method), worst);
}

static void check_set(const kt__moe_kernels *ks, int method)
{
    check_set_mode(ks, method, 0);
}

static void run_isa(uint64_t need, const kt__moe_kernels *(*get)(int), const char *what)
{
    if ((kt_hw_isa() & need) != need) {
        printf("  %s: not on this CPU, skipped\n", what);
        return;
    }
    int methods[] = {KT_METHOD_BF16, KT_METHOD_FP8, KT_METHOD_RAWINT4, KT_METHOD_AMXINT8};
    for (int i = 0; i < 4; i++) {
        const kt__moe_kernels *ks = get(methods[i]);
        if (ks)
            check_set(ks, methods[i]);
        else
            printf("  %s %s: no kernel (scalar fallback)\n", what,
                   kt_method_name((kt_method)methods[i]));
    }
}

static void test_avx512(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX512
    run_isa(AVX512_BITS, kt__moe_kernels_avx512, "avx512");
#else
    skip();
#endif
}

static void test_avx2(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX2
    run_isa(AVX2_BITS, kt__moe_kernels_avx2, "avx2");
#else
    skip();
#endif
}

/* The AVX2 FP8 set's block scales: above 2^7 (the prefill's decode takes two
 * multiplies), above 2^64 and infinite (the call goes to the scalar kernel),
 * tiny, zero and negative; every path (1-3 tokens decoded in registers, more
 * through the decoded chunk) against the reference within 1e-5 of
 * sum |a||w|. */
static void test_avx2_fp8_scales(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX2
    if ((kt_hw_isa() & AVX2_BITS) != AVX2_BITS) {
        skip();
        return;
    }
    const kt__moe_kernels *ks = kt__moe_kernels_avx2(KT_METHOD_FP8);
    const kt__moe_kernels *ref = kt__moe_kernels_ref(KT_METHOD_FP8);
    static const float scales[] = {300.0f, -0x1p20f, 1e-30f, 0.0f, -0.7f, 0x1p70f, INFINITY};
    const int N = 136, K = 392; /* 2 row blocks, 4 input blocks (the last partial) */
    for (int si = 0; si < 7; si++) {
        void *w, *s;
        float *f = malloc((size_t)N * K * sizeof(float));
        tst_fp8_matrix(N, K, fp8_scale, fp8_code, &w, &s, f);
        ((float *)s)[si % 4] = scales[si]; /* one of the first row block's scales */
        ((float *)s)[4 + si % 4] = scales[(si + 1) % 7];
        for (int n = 0; n < N; n++) /* the dequantized weights with those scales */
            for (int k = 0; k < K; k++)
                f[(size_t)n * K + k] = tst_e4m3(((const uint8_t *)w)[(size_t)n * K + k]) *
                                       ((const float *)s)[(n / 128) * 4 + k / 128];
        kt__wmat W = {w, s, N, K, 0, 0, NULL};
        static const int m_list[] = {1, 2, 3, 5, 13};
        for (int mi = 0; mi < 5; mi++) {
            int M = m_list[mi];
            float *x = malloc((size_t)M * K * sizeof(float));
            for (int i = 0; i < M * K; i++)
                x[i] = tst_uniform();
            size_t sr, st;
            uint8_t *ar = quant_rows(ref, x, M, K, &sr);
            uint8_t *at = quant_rows(ks, x, M, K, &st);
            float *cr = malloc((size_t)M * N * sizeof(float));
            float *ct = malloc((size_t)M * N * sizeof(float));
            void *scr = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
            ref->gemm(&W, 0, N, 0, K, ar, sr, NULL, M, cr, N, NULL);
            ks->gemm(&W, 0, N, 0, K, at, st, NULL, M, ct, N, scr);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double mag = 0;
                    for (int k = 0; k < K; k++)
                        mag += fabs((double)x[(size_t)m * K + k] * f[(size_t)n * K + k]);
                    float c = ct[(size_t)m * N + n], r = cr[(size_t)m * N + n];
                    if (!isfinite(r) ? !(isnan(r) ? isnan(c) : c == r)
                                     : !(fabs((double)c - r) <= 1e-5 * mag + 1e-30))
                        fail_msg("%s scale %g M=%d C[%d][%d] = %g, reference %g", ks->name,
                                 (double)scales[si], M, m, n, (double)c, (double)r);
                }
            free(x);
            free(ar);
            free(at);
            free(cr);
            free(ct);
            free(scr);
        }
        free(w);
        free(s);
        free(f);
    }
    printf("  %s: block scales 300, -2^20, 1e-30, 0, -0.7, 2^70, inf: ok\n", ks->name);
#else
    skip();
#endif
}

/* The AVX2 FP8 decode (1-3 tokens) on E4M3's extreme codes, 0x01 / 0x81 (the
 * smallest subnormals), 0x7e / 0xfe (+-448, the largest), 0x80 (-0), 0x08
 * (the smallest normal), beside random ones: one-hot activations read each
 * weight alone, whose product the kernel must give bit for bit as the
 * reference (e4m3 times its block scale, one rounding); then all inputs at
 * once within the usual tolerance. 136 rows (the one-token quarter streams
 * and a remainder), 392 inputs (a last partial block). */
static void test_avx2_fp8_extreme_codes(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX2
    if ((kt_hw_isa() & AVX2_BITS) != AVX2_BITS) {
        skip();
        return;
    }
    const kt__moe_kernels *ks = kt__moe_kernels_avx2(KT_METHOD_FP8);
    const kt__moe_kernels *ref = kt__moe_kernels_ref(KT_METHOD_FP8);
    static const uint8_t extreme[] = {0x01, 0x81, 0x7e, 0xfe, 0x80, 0x08};
    const int N = 136, K = 392;
    void *w, *s;
    float *f = malloc((size_t)N * K * sizeof(float));
    tst_fp8_matrix(N, K, fp8_scale, fp8_code, &w, &s, f);
    uint8_t *q = w;
    const float *sc = s;
    for (int n = 0; n < N; n++) /* 3 of 4 weights extreme */
        for (int k = 0; k < K; k++)
            if ((n + k) % 4) {
                uint8_t b = extreme[(n * 7 + k) % 6];
                q[(size_t)n * K + k] = b;
                f[(size_t)n * K + k] = tst_e4m3(b) * sc[(n / 128) * 4 + k / 128];
            }
    kt__wmat W = {w, s, N, K, 0, 0, NULL};
    static const int hot[] = {0, 37, 130, 255, 391};
    float *x = malloc((size_t)3 * K * sizeof(float));
    float *cr = malloc((size_t)3 * N * sizeof(float));
    float *ct = malloc((size_t)3 * N * sizeof(float));
    void *scr = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
    for (int M = 1; M <= 3; M++) {
        for (int hi = 0; hi < 5; hi++) {
            /* token m: 1 at input hot[(hi + m) % 5] */
            memset(x, 0, (size_t)3 * K * sizeof(float));
            for (int m = 0; m < M; m++)
                x[(size_t)m * K + hot[(hi + m) % 5]] = 1.0f;
            size_t sr, st;
            uint8_t *ar = quant_rows(ref, x, M, K, &sr);
            uint8_t *at = quant_rows(ks, x, M, K, &st);
            ref->gemm(&W, 0, N, 0, K, ar, sr, NULL, M, cr, N, NULL);
            ks->gemm(&W, 0, N, 0, K, at, st, NULL, M, ct, N, scr);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    int k = hot[(hi + m) % 5];
                    float want = tst_e4m3(q[(size_t)n * K + k]) * sc[(n / 128) * 4 + k / 128];
                    float c = ct[(size_t)m * N + n], r = cr[(size_t)m * N + n];
                    if (memcmp(&c, &r, sizeof c) || c != want)
                        fail_msg("%s M=%d C[%d][%d] (code 0x%02x alone) = %a, reference %a, "
                                 "e4m3 x s %a", ks->name, M, m, n, q[(size_t)n * K + k],
                                 (double)c, (double)r, (double)want);
                }
            free(ar);
            free(at);
        }
        for (int i = 0; i < M * K; i++)
            x[i] = tst_uniform();
        size_t sr, st;
        uint8_t *ar = quant_rows(ref, x, M, K, &sr);
        uint8_t *at = quant_rows(ks, x, M, K, &st);
        ref->gemm(&W, 0, N, 0, K, ar, sr, NULL, M, cr, N, NULL);
        ks->gemm(&W, 0, N, 0, K, at, st, NULL, M, ct, N, scr);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double mag = 0;
                for (int k = 0; k < K; k++)
                    mag += fabs((double)x[(size_t)m * K + k] * f[(size_t)n * K + k]);
                float c = ct[(size_t)m * N + n], r = cr[(size_t)m * N + n];
                if (!(fabs((double)c - r) <= 1e-5 * mag + 1e-30))
                    fail_msg("%s extreme codes M=%d C[%d][%d] = %g, reference %g", ks->name, M,
                             m, n, (double)c, (double)r);
            }
        free(ar);
        free(at);
    }
    printf("  %s: E4M3 codes 0x01 0x81 0x7e 0xfe 0x80 0x08 alone bit for bit, together ok\n",
           ks->name);
    free(x);
    free(cr);
    free(ct);
    free(scr);
    free(w);
    free(s);
    free(f);
#else
    skip();
#endif
}

/* The AVX2 RAWINT4 set's Q8E64 activations (8-lane groups) byte for byte
 * against kt__moe_q8g32_group laid out even-then-odd: ragged K (a last chunk
 * of one group), sub-ranges of groups, an all-zero group, a group whose
 * codes are halves rounding to even. */
static void test_avx2_q8e64(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX2
    if ((kt_hw_isa() & AVX2_BITS) != AVX2_BITS) {
        skip();
        return;
    }
    const kt__moe_kernels *ks = kt__moe_kernels_avx2(KT_METHOD_RAWINT4);
    assert_int_equal(ks->act, KT__ACT_Q8E64);
    static const int ks_list[] = {32, 64, 96, 1184, 2048};
    for (int ki = 0; ki < 5; ki++) {
        int K = ks_list[ki], ng = K / 32, nc = (K + 63) / 64;
        float *x = malloc((size_t)K * sizeof(float));
        for (int i = 0; i < K; i++)
            x[i] = tst_uniform() * (1 + i % 5);
        if (ng > 1)
            for (int i = 32; i < 64; i++) /* group 1: zeros */
                x[i] = 0.0f;
        if (ng > 2) /* group 2: d = 2, the others' x / d halves (0.5 -> 0, 1.5 -> 2, -2.5 -> -2) */
            for (int i = 64; i < 96; i++)
                x[i] = i == 70 ? 254.0f : i % 3 == 0 ? 1.0f : i % 3 == 1 ? 3.0f : -5.0f;
        size_t rb = kt__moe_act_row_bytes(KT__ACT_Q8E64, K);
        uint8_t *got = malloc(rb), *want = malloc(rb);
        for (int part = 0; part < 3; part++) {
            int g0 = part == 1 && ng > 2 ? 1 : 0, g1 = part == 2 && ng > 1 ? ng - 1 : ng;
            memset(got, 0xa5, rb);
            memset(want, 0xa5, rb);
            ks->quant(x, 32 * g0, 32 * g1, K, got);
            float *dc = (float *)(want + (size_t)nc * 64);
            for (int g = g0; g < g1; g++) {
                int8_t q[32];
                float d;
                int32_t sum = kt__moe_q8g32_group(x + 32 * g, q, &d);
                int8_t *qe = (int8_t *)want + (size_t)(g / 2) * 64 + 16 * (g % 2);
                for (int i = 0; i < 32; i++)
                    qe[(i % 2) * 32 + i / 2] = q[i];
                for (int l = 0; l < 4; l++) {
                    dc[(g / 2) * 16 + 4 * (g % 2) + l] = d;
                    ((int32_t *)dc)[(g / 2) * 16 + 8 + 4 * (g % 2) + l] = -2 * sum;
                }
            }
            if (g1 == ng && ng % 2) { /* the last chunk's second group: zeros */
                memset(want + (size_t)(ng / 2) * 64 + 16, 0, 16);
                memset(want + (size_t)(ng / 2) * 64 + 48, 0, 16);
                memset(dc + (ng / 2) * 16 + 4, 0, 16);
                memset(dc + (ng / 2) * 16 + 12, 0, 16);
            }
            for (size_t i = 0; i < rb; i++)
                if (got[i] != want[i])
                    fail_msg("K=%d groups [%d,%d): byte %zu = %d, want %d", K, g0, g1, i,
                             got[i], want[i]);
        }
        free(x);
        free(got);
        free(want);
    }
#else
    skip();
#endif
}

/* AMX-BF16 prefill (AVX-512 below 8 tokens): on AMX machines for real, and
 * everywhere with AVX-512 through a scalar tile emulation of the same code. */
static void test_amx(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AMX
    if ((kt_hw_isa() & (KT_ISA_AMX_TILE | KT_ISA_AMX_BF16)) != (KT_ISA_AMX_TILE | KT_ISA_AMX_BF16))
        skip();
    run_isa(AVX512_BITS | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16, kt__moe_kernels_amx, "amx");
#else
    skip();
#endif
}

static void test_amx_emulated(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX512
    run_isa(AVX512_BITS, kt__moe_kernels_amx_emulated, "amx-emulated");
#else
    skip();
#endif
}

/* Kernels with int8 activations quantized per token over the call's inputs,
 * against an oracle that quantizes the same way (d = max|x| / 127 over
 * [k0, k1), q = round-to-even(x * (127 / max|x|))) and sums the integer
 * products exactly: AMXINT8 C = d s_n sum q w, INT4 C = d sum_g s_g sum q v.
 * From rescale_m tokens (0: never) the INT4 tile sets rescale each row to int8
 * on one scale per row when the packed copy holds the call's whole K
 * (cpu/amx/moe_amx.c, "INT4 on one scale per row"), and so does the oracle:
 * S = max_g |s_g| / 16, w = rint(v (s_g (16 / max_g |s_g|))), C = d S sum q w.
 * Shapes cover ragged rows and inputs, several K chunks, token batches past
 * 256, sub-ranges, and (AMXINT8) a K too long for the whole-K copy. */
static void check_int8_act(const kt__moe_kernels *ks, int method, int min_m, int G,
                           const kt__moe_packer *pk, int rescale_m)
{
    static const int rows_list[] = {5, 32, 67};
    static const int cols_i8[] = {7, 200, 640, 16448};
    /* (G 32: 640 and, from input 128, 512 are whole 128-input pairs: the
     * rescale 128 inputs a load, PERM_EO128) */
    static const int cols_i4[] = {96, 160, 608, 16416, 640};
    /* (G 64: 448, not whole 128-input pairs: the rescale 64 inputs a load) */
    static const int cols_i4g[] = {128, 256, 640, 16896}, cols_i4g64[] = {128, 448, 640, 16896};
    /* 329: batches of 256 and 73 tokens (the AMX-INT8 tiles: 8 passes, and 3 with
     * a last of 9 tokens), with the shared packing 16, 256 and 57; 1-4: the
     * VNNI decode's token counts */
    static const int m_list[] = {1, 2, 3, 4, 8, 17, 40, 329};
    /* the fourth: longer than the whole-K copy of the AMX tiles */
    int n_cols = method != KT_METHOD_AMXINT8 && G <= 32 ? 5 : 4;
    for (int ri = 0; ri < 3; ri++)
        for (int ci = 0; ci < n_cols; ci++) {
            int N = rows_list[ri];
            int K = method == KT_METHOD_AMXINT8 ? cols_i8[ci]
                    : G > 64                    ? cols_i4g[ci]
                    : G == 64                   ? cols_i4g64[ci]
                                                : cols_i4[ci];
            if (K > 4096 && N != 67)
                continue;
            void *w, *s;
            float *f;
            rand_weights(method, N, K, &w, &s, &f);
            if (G > 32) { /* one scale per G inputs */
                uint16_t *sg = malloc((size_t)N * (K / G) * 2);
                for (int i = 0; i < N * (K / G); i++)
                    sg[i] = tst_to_bf16(0.05f + 0.05f * (tst_uniform() + 1.0f));
                free(s);
                s = sg;
            }
            if (grid_scales && method != KT_METHOD_AMXINT8) {
                scales_on_grid(s, N, K / G);
                for (int r = 10; use_grid && r < N; r += 11) /* off the grid */
                    ((uint16_t *)s)[(size_t)r * (K / G) + 1] =
                        tst_to_bf16(tst_bf16(((uint16_t *)s)[(size_t)r * (K / G) + 1]) * 0.93f);
            }
            kt__wmat W = {w, s, N, K, 0, G > 32 ? G : 0, NULL};
            void *gtab = NULL;
            if (use_grid && pk && pk->grid_bytes && pk->grid_bytes(&W)) {
                gtab = aligned_alloc(64, pk->grid_bytes(&W));
                pk->grid_make(&W, gtab);
                W.grid = gtab;
            }
            for (int mi = 0; mi < 8; mi++) {
                int M = m_list[mi];
                if (M < min_m || (K > 4096 && M > 40))
                    continue;
                int n_act = M + 3;
                float *x = malloc((size_t)n_act * K * sizeof(float));
                for (int i = 0; i < n_act * K; i++)
                    x[i] = tst_bf16(tst_to_bf16(tst_uniform() * (1 + i % 7)));
                size_t st;
                uint8_t *at = quant_rows(ks, x, n_act, K, &st);
                int32_t *rows_idx = malloc((size_t)M * sizeof(int32_t));
                for (int m = 0; m < M; m++)
                    rows_idx[m] = (m * 5 + 2) % n_act;
                /* part 2: the shared packing (pk), tokens in two calls */
                for (int part = 0; part < (pk ? 3 : 2); part++) {
                    int n0 = part ? N / 3 : 0, n1 = N;
                    int k0 = (part == 1 && K > 128) ? 128 : 0, k1 = K;
                    int nb = n1 - n0;
                    float *ct = malloc((size_t)M * nb * sizeof(float));
                    float *c0 = malloc((size_t)M * nb * sizeof(float));
                    void *scr = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
                    /* with W.grid, then the same without (bit for bit) */
                    for (int gi = 0; gi < (W.grid ? 2 : 1); gi++) {
                        kt__wmat Wc = W;
                        float *cc = gi ? c0 : ct;
                        Wc.grid = gi ? NULL : W.grid;
                        kt__moe_new_epoch();
                        if (part < 2) {
                            ks->gemm(&Wc, n0, n1, k0, k1, at, st, rows_idx, M, cc, nb, scr);
                            continue;
                        }
                        assert_int_equal(pk->bytes(M, K),
                                         (size_t)((M + 15) / 16) * pk->bytes(16, K));
                        void *P = aligned_alloc(64, (pk->bytes(M, K) + 63) & ~(size_t)63);
                        memset(P, 0xA5, pk->bytes(M, K)); /* every byte read is written */
                        pk->pack(at, st, rows_idx, M, K, P);
                        int ms = M > 16 ? 16 : M;
                        pk->gemm(&Wc, n0, n1, P, M, 0, ms, cc, nb, scr);
                        if (ms < M)
                            pk->gemm(&Wc, n0, n1, P, M, ms, M - ms, cc + (size_t)ms * nb, nb,
                                     scr);
                        free(P);
                    }
                    if (W.grid && memcmp(ct, c0, (size_t)M * nb * sizeof(float)))
                        fail_msg("%s N=%d K=%d M=%d rows [%d,%d) inputs [%d,%d) part %d: "
                                 "W->grid's output differs from the per-call one", ks->name, N,
                                 K, M, n0, n1, k0, k1, part);
                    free(c0);
                    int8_t *q = malloc((size_t)K);
                    for (int m = 0; m < M; m++) {
                        const float *xm = x + (size_t)rows_idx[m] * K;
                        float amax = 0;
                        for (int k = k0; k < k1; k++)
                            amax = fmaxf(amax, fabsf(xm[k]));
                        float inv = amax > 0 ? 127.0f / amax : 0.0f;
                        float d = amax > 0 ? amax / 127.0f : 0.0f;
                        for (int k = k0; k < k1; k++)
                            q[k] = (int8_t)nearbyintf(xm[k] * inv);
                        for (int n = n0; n < n1; n++) {
                            double want = 0, mag = 0;
                            if (method == KT_METHOD_AMXINT8) {
                                const int8_t *wq = (const int8_t *)w + (size_t)n * K;
                                int64_t acc = 0, am = 0;
                                for (int k = k0; k < k1; k++) {
                                    acc += (int64_t)q[k] * wq[k];
                                    am += llabs((int64_t)q[k] * wq[k]);
                                }
                                want = (double)acc * d * ((const float *)s)[n];
                                mag = (double)am * d * ((const float *)s)[n];
                            } else {
                                const uint32_t *pw = (const uint32_t *)w + (size_t)n * (K / 8);
                                const uint16_t *sr = (const uint16_t *)s + (size_t)n * (K / G);
                                /* the whole-K copy: 256 steps of 64 (KTMAX8) */
                                int rescale = rescale_m && (part == 2 || (M >= rescale_m &&
                                                                (k1 - k0 + 63) / 64 <= 256));
                                float smax = 0;
                                for (int g = k0 / G; g < k1 / G; g++)
                                    smax = fmaxf(smax, fabsf(tst_bf16(sr[g])));
                                float inv16 = smax > 0 ? 16.0f / smax : 0.0f;
                                for (int g = k0 / G; g < k1 / G; g++) {
                                    int64_t acc = 0, am = 0;
                                    float f = tst_bf16(sr[g]) * inv16;
                                    for (int k = G * g; k < G * g + G; k++) {
                                        int v = (int)((pw[k / 8] >> (4 * (k % 8))) & 15u) - 8;
                                        if (rescale)
                                            v = (int)fminf(fmaxf(nearbyintf((float)v * f), -128),
                                                           127);
                                        acc += (int64_t)q[k] * v;
                                        am += llabs((int64_t)q[k] * v);
                                    }
                                    double sg = rescale ? smax / 16.0f : tst_bf16(sr[g]);
                                    want += (double)acc * sg * d;
                                    mag += (double)am * sg * d;
                                }
                            }
                            double got = ct[(size_t)m * nb + n - n0];
                            if (!(fabs(got - want) <= 1e-5 * mag + 1e-30))
                                fail_msg("%s %s N=%d K=%d M=%d rows [%d,%d) inputs [%d,%d): "
                                         "C[%d][%d] = %.9g, int8 oracle %.9g", ks->name,
                                         kt_method_name((kt_method)method), N, K, M, n0, n1, k0,
                                         k1, m, n, got, want);
                        }
                    }
                    free(q);
                    free(ct);
                    free(scr);
                }
                free(rows_idx);
                free(x);
                free(at);
            }
            free(w);
            free(s);
            free(f);
            free(gtab);
        }
    printf("  %-14s %-8s ok (int8 activations, exact oracle, group %d%s%s%s)\n", ks->name,
           kt_method_name((kt_method)method), method == KT_METHOD_AMXINT8 ? 0 : G,
           pk ? ", shared packing too" : "", grid_scales ? ", scales on the v2 grid" : "",
           use_grid && pk && pk->grid_bytes ? ", W->grid = per call" : "");
}

/* cpu/amx/moe_amx.c, emulated build only: INT4 tiles by exact group folds
 * (mode 1) or rescaled rows (0: 128 inputs a load where K allows, 2: 64, 3: as 0
 * with the lean rescale of grid rows, g >= 64). */
void kt__amx_int4_mode_emulated(int mode);

static void test_int8_act(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX512
    if ((kt_hw_isa() & AVX512_BITS) != AVX512_BITS)
        skip();
    const kt__moe_kernels *e8 = kt__moe_kernels_amx_emulated(KT_METHOD_AMXINT8);
    const kt__moe_kernels *e4 = kt__moe_kernels_amx_emulated(KT_METHOD_RAWINT4);
    const kt__moe_kernels *e4g = kt__moe_int4g_amx_emulated();
    assert_non_null(kt__moe_packer_amx_emulated(e8));
    assert_null(kt__moe_packer_amx_emulated(kt__moe_kernels_amx_emulated(KT_METHOD_BF16)));
    check_int8_act(kt__moe_kernels_avx512(KT_METHOD_AMXINT8), KT_METHOD_AMXINT8, 1, 0, NULL, 0);
    /* KT_TEST_TILES=real: the emulated tiles' checks left out (a device run
     * on AMX hardware, where the real tiles check the same code below) */
    const char *tiles = getenv("KT_TEST_TILES");
    if (!(tiles && !strcmp(tiles, "real"))) {
        check_int8_act(e8, KT_METHOD_AMXINT8, 1, 0, kt__moe_packer_amx_emulated(e8), 0);
        /* INT4 on the tiles: rescaled rows (the general code), the exact group folds,
         * rescaled rows 64 inputs a load; tiles from 4 tokens (groups of 32) and
         * from 2 (64, 128) */
        for (int mode = 0; mode < 3; mode++) {
            int exact = mode == 1;
            kt__amx_int4_mode_emulated(mode);
            check_int8_act(e4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx_emulated(e4),
                           exact ? 0 : 4);
            for (int G = 64; G <= 128; G *= 2)
                check_int8_act(e4g, KT_METHOD_AMXINT4, 1, G, kt__moe_packer_amx_emulated(e4g),
                               exact ? 0 : 2);
        }
        kt__amx_int4_mode_emulated(0);
        /* scales on format version 2's grid: the rescale's constant tables (where
         * a sub-range's largest scale is not the row's: the computed ones) */
        grid_scales = 1;
        check_int8_act(e4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx_emulated(e4), 4);
        for (int G = 64; G <= 128; G *= 2)
            check_int8_act(e4g, KT_METHOD_AMXINT4, 1, G, kt__moe_packer_amx_emulated(e4g), 2);
        kt__amx_int4_mode_emulated(3); /* the default: decode_i4_lean (g 128), _lean64, _lean32 */
        check_int8_act(e4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx_emulated(e4), 4);
        for (int G = 64; G <= 128; G *= 2)
            check_int8_act(e4g, KT_METHOD_AMXINT4, 1, G, kt__moe_packer_amx_emulated(e4g), 2);
        /* the factors made once (W->grid), some rows off the grid; then no grid */
        use_grid = 1;
        check_int8_act(e4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx_emulated(e4), 4);
        check_int8_act(e4g, KT_METHOD_AMXINT4, 1, 64, kt__moe_packer_amx_emulated(e4g), 2);
        grid_scales = 0;
        check_int8_act(e4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx_emulated(e4), 4);
        use_grid = 0;
    }
    for (int G = 64; G <= 128; G *= 2)
        check_int8_act(kt__moe_int4g_avx512(), KT_METHOD_AMXINT4, 1, G, NULL, 0);
#if KT_HAVE_ISA_AMX
    if ((kt_hw_isa() & (KT_ISA_AMX_TILE | KT_ISA_AMX_INT8)) ==
        (KT_ISA_AMX_TILE | KT_ISA_AMX_INT8)) {
        const kt__moe_kernels *a8 = kt__moe_kernels_amx(KT_METHOD_AMXINT8);
        const kt__moe_kernels *a4 = kt__moe_kernels_amx(KT_METHOD_RAWINT4);
        const kt__moe_kernels *a4g = kt__moe_int4g_amx();
        check_int8_act(a8, KT_METHOD_AMXINT8, 1, 0, kt__moe_packer_amx(a8), 0);
        check_int8_act(a4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx(a4), 4);
        check_int8_act(a4g, KT_METHOD_AMXINT4, 1, 64, kt__moe_packer_amx(a4g), 2);
        check_int8_act(a4g, KT_METHOD_AMXINT4, 1, 128, kt__moe_packer_amx(a4g), 2);
        grid_scales = 1;
        check_int8_act(a4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx(a4), 4);
        check_int8_act(a4g, KT_METHOD_AMXINT4, 1, 64, kt__moe_packer_amx(a4g), 2);
        check_int8_act(a4g, KT_METHOD_AMXINT4, 1, 128, kt__moe_packer_amx(a4g), 2);
        /* the factors made once (W->grid), some rows off the grid; then no grid */
        use_grid = 1;
        check_int8_act(a4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx(a4), 4);
        check_int8_act(a4g, KT_METHOD_AMXINT4, 1, 64, kt__moe_packer_amx(a4g), 2);
        check_int8_act(a4g, KT_METHOD_AMXINT4, 1, 128, kt__moe_packer_amx(a4g), 2);
        grid_scales = 0;
        check_int8_act(a4, KT_METHOD_RAWINT4, 8, 32, kt__moe_packer_amx(a4), 4);
        use_grid = 0;
    } else {
        printf("  amx: no AMX-INT8 on this CPU, real tiles skipped\n");
    }
#endif
#else
    skip();
#endif
}

/* KT_MOE_PREC_BF16X2 INT4 with a scale per G inputs (AMXINT4 --group-size
 * 32 / 64 / 128; W->group 0 means 32): the AVX-512 x2 set (decode up to 3
 * tokens, chunked prefill above) against the scalar grouped F32-activation
 * oracle at the x2 tolerance 2e-5 of sum |a w|; ragged rows, K past the
 * prefill chunk, a sub-range of rows and inputs. */
static void check_x2_groups(const kt__moe_kernels *ks, int G)
{
    const kt__moe_kernels *ref = kt__moe_int4g_ref();
    static const int rows_list[] = {1, 5, 67};
    static const int m_list[] = {1, 2, 3, 4, 5, 17};
    const int cols_list[] = {G, 3 * G, 2304 / G * G + (G == 32 ? 3 : 1) * G};
    for (int ri = 0; ri < 3; ri++)
        for (int ci = 0; ci < 3; ci++) {
            int N = rows_list[ri], K = cols_list[ci];
            void *wv, *sv;
            tst_rawint4_matrix(N, K, G, 0.05f, &wv, &sv, NULL);
            uint32_t *w = wv;
            uint16_t *s = sv;
            kt__wmat W = {w, s, N, K, 0, G == 32 && ci == 0 ? 0 : G, NULL};
            for (int mi = 0; mi < 6; mi++) {
                int M = m_list[mi], n_act = M + 3;
                float *x = malloc((size_t)n_act * K * sizeof(float));
                for (int i = 0; i < n_act * K; i++)
                    x[i] = tst_uniform() * (1 + i % 5);
                size_t sr, st;
                uint8_t *ar = quant_rows(ref, x, n_act, K, &sr);
                uint8_t *at = quant_rows(ks, x, n_act, K, &st);
                int32_t rows_idx[17];
                for (int m = 0; m < M; m++)
                    rows_idx[m] = (m * 5 + 2) % n_act;
                for (int part = 0; part < 2; part++) {
                    int n0 = part ? N / 3 : 0, n1 = N;
                    int k0 = (part && K > G) ? G : 0, k1 = K, nb = n1 - n0;
                    float *cr = malloc((size_t)M * nb * sizeof(float));
                    float *ct = malloc((size_t)M * nb * sizeof(float));
                    void *scr = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
                    kt__moe_new_epoch();
                    ref->gemm(&W, n0, n1, k0, k1, ar, sr, rows_idx, M, cr, nb, NULL);
                    ks->gemm(&W, n0, n1, k0, k1, at, st, rows_idx, M, ct, nb, scr);
                    for (int m = 0; m < M; m++)
                        for (int n = n0; n < n1; n++) {
                            double mag = 0;
                            for (int k = k0; k < k1; k++) {
                                int v = (int)((w[(size_t)n * (K / 8) + k / 8] >> (4 * (k % 8))) &
                                              15u) - 8;
                                mag += fabs(x[(size_t)rows_idx[m] * K + k] * v *
                                            tst_bf16(s[(size_t)n * (K / G) + k / G]));
                            }
                            size_t at2 = (size_t)m * nb + n - n0;
                            if (!(fabs(ct[at2] - cr[at2]) <= 2e-5 * mag + 1e-30))
                                fail_msg("%s group %d N=%d K=%d M=%d rows [%d,%d) inputs "
                                         "[%d,%d): C[%d][%d] = %.9g, oracle %.9g", ks->name, G,
                                         N, K, M, n0, n1, k0, k1, m, n, ct[at2], cr[at2]);
                        }
                    free(cr);
                    free(ct);
                    free(scr);
                }
                free(x);
                free(ar);
                free(at);
            }
            free(w);
            free(s);
        }
    printf("  %-14s AMXINT4  ok (BF16X2, group %d, vs scalar F32 oracle)\n", ks->name, G);
}

/* KT_MOE_PREC_BF16X2: the AVX-512 hi/lo sets and the scalar F32 RAWINT4 set. */
static void test_precise(void **state)
{
    (void)state;
    int methods[] = {KT_METHOD_BF16, KT_METHOD_FP8, KT_METHOD_RAWINT4, KT_METHOD_AMXINT8};
    check_set_mode(kt__moe_kernels_ref_precise(KT_METHOD_RAWINT4), KT_METHOD_RAWINT4, 1);
#if KT_HAVE_ISA_AVX512
    if ((kt_hw_isa() & AVX512_BITS) != AVX512_BITS) {
        printf("  avx512: not on this CPU, skipped\n");
        return;
    }
    for (int i = 0; i < 4; i++)
        check_set_mode(kt__moe_kernels_avx512_x2(methods[i]), methods[i], 1);
    for (int G = 32; G <= 128; G *= 2)
        check_x2_groups(kt__moe_kernels_avx512_x2(KT_METHOD_AMXINT4), G);
#else
    (void)methods;
#endif
}

#if KT_HAVE_ISA_AVX512
/* A KT_MOE_PREC_BF16X2 AMX set on its tile path: 8 to 140 tokens (token
 * blocks of 16 ragged, two batches past 128), ragged rows and inputs, a
 * sub-range, BF16 in place (K 1088), K past the whole-K copy (BF16, AMXINT8),
 * against the scalar F32-activation set with the x2 tolerance 2e-5 of
 * sum |a||w|; a second call in the same epoch (the packed hi / lo copies
 * reused) must agree exactly. */
static void check_x2_tiles(const kt__moe_kernels *ks, int method)
{
    const kt__moe_kernels *ref = kt__moe_kernels_ref_precise(method);
    static const int m_list[] = {8, 15, 33, 140};
    int long_k = method == KT_METHOD_BF16 || method == KT_METHOD_AMXINT8;
    /* 1088: whole 32-input steps (BF16 tiled in place), not whole FP8 blocks */
    int Ks[] = {method == KT_METHOD_RAWINT4 ? 96 : 200, 1088, long_k ? 8250 : 0};
    double worst = 0;
    for (int ci = 0; ci < 3; ci++) {
        int K = Ks[ci], N = ci == 2 ? 35 : 67;
        if (!K)
            continue;
        void *w, *s;
        float *f;
        rand_weights(method, N, K, &w, &s, &f);
        kt__wmat W = {w, s, N, K, 0, 0, NULL};
        for (int mi = 0; mi < 4; mi++) {
            int M = m_list[mi], n_act = M + 3;
            if (ci == 2 && M > 33)
                continue; /* the long rows: fewer tokens, to keep the emulation quick */
            float *x = malloc((size_t)n_act * K * sizeof(float));
            for (int i = 0; i < n_act * K; i++)
                x[i] = tst_uniform();
            size_t sr, st;
            uint8_t *ar = quant_rows(ref, x, n_act, K, &sr);
            uint8_t *at = quant_rows(ks, x, n_act, K, &st);
            int32_t rows_idx[160];
            for (int m = 0; m < M; m++)
                rows_idx[m] = (m * 7 + 1) % n_act;
            for (int part = 0; part < 2; part++) {
                int n0 = part ? 3 : 0, k0 = part ? 128 : 0, nb = N - n0;
                float *cr = malloc((size_t)M * nb * sizeof(float));
                float *ct = malloc((size_t)M * nb * sizeof(float));
                float *c2 = malloc((size_t)M * nb * sizeof(float));
                void *scr_r = calloc(1, ref->scratch_bytes + 64);
                void *scr_t = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
                kt__moe_new_epoch();
                ref->gemm(&W, n0, N, k0, K, ar, sr, rows_idx, M, cr, nb, scr_r);
                ks->gemm(&W, n0, N, k0, K, at, st, rows_idx, M, ct, nb, scr_t);
                ks->gemm(&W, n0, N, k0, K, at, st, rows_idx, M, c2, nb, scr_t);
                for (int m = 0; m < M; m++)
                    for (int n = n0; n < N; n++) {
                        double mag = 0;
                        for (int k = k0; k < K; k++)
                            mag += fabs((double)x[(size_t)rows_idx[m] * K + k] *
                                        f[(size_t)n * K + k]);
                        size_t i = (size_t)m * nb + n - n0;
                        double d = fabs((double)ct[i] - cr[i]);
                        if (d / (mag + 1e-30) > worst)
                            worst = d / (mag + 1e-30);
                        if (!(d <= 2e-5 * mag + 1e-30))
                            fail_msg("%s %s N=%d K=%d M=%d rows [%d,%d) inputs [%d,%d): "
                                     "C[%d][%d] = %g, reference %g (tol %g)",
                                     ks->name, kt_method_name((kt_method)method), N, K, M, n0, N,
                                     k0, K, m, n, ct[i], cr[i], 2e-5 * mag);
                        if (c2[i] != ct[i])
                            fail_msg("%s: repeated call differs at [%d][%d]", ks->name, m, n);
                    }
                free(cr);
                free(ct);
                free(c2);
                free(scr_r);
                free(scr_t);
            }
            free(x);
            free(ar);
            free(at);
        }
        free(w);
        free(s);
        free(f);
    }
    printf("  %-18s %-8s tiles ok (worst error %.2g of sum|a||w|)\n", ks->name,
           kt_method_name((kt_method)method), worst);
}

static void run_x2_amx(const kt__moe_kernels *(*get)(int))
{
    int methods[] = {KT_METHOD_BF16, KT_METHOD_FP8, KT_METHOD_RAWINT4, KT_METHOD_AMXINT8};
    for (int i = 0; i < 4; i++) {
        const kt__moe_kernels *ks = get(methods[i]);
        assert_non_null(ks);
        assert_int_equal(ks->act, KT__ACT_BF16X2);
        check_x2_tiles(ks, methods[i]);
        /* and every path of the set (1..5 tokens: the AVX-512 x2 kernels) */
        check_set_mode(ks, methods[i], 1);
    }
}

#endif

/* KT_MOE_PREC_BF16X2 on AMX-BF16 tiles: through the scalar tile emulation
 * wherever AVX-512 runs, and on the real tiles on AMX machines. */
static void test_amx_x2_emulated(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX512
    if ((kt_hw_isa() & AVX512_BITS) != AVX512_BITS)
        skip();
    run_x2_amx(kt__moe_kernels_amx_x2_emulated);
#else
    skip();
#endif
}

static void test_amx_x2(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AMX
    if ((kt_hw_isa() & (AVX512_BITS | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16)) !=
        (AVX512_BITS | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16)) {
        printf("  amx: no AMX-BF16 on this CPU, BF16X2 real tiles skipped\n");
        skip();
    }
    run_x2_amx(kt__moe_kernels_amx_x2);
#else
    skip();
#endif
}

/* The scalar INT8 quantizer itself: round(x / d) with d = max|x| / 127, or
 * (KT_MOE_Q8_POW2) the smallest power of two >= it (kt__moe_pow2_ceil). */
static void test_quant_q8(void **state)
{
    (void)state;
    assert_true(kt__moe_pow2_ceil(0.0f) == 0.0f);
    assert_true(kt__moe_pow2_ceil(1.0f) == 1.0f);
    assert_true(kt__moe_pow2_ceil(0.75f) == 1.0f);
    assert_true(kt__moe_pow2_ceil(0x1.000002p-3f) == 0.25f);
    assert_true(kt__moe_pow2_ceil(0x1p-140f) == 0x1p-126f); /* subnormal: the smallest normal */
    int was = kt__moe_q8_pow2();
    for (int pow2 = 0; pow2 < 2; pow2++) {
        kt__moe_q8_set_pow2(pow2);
        float x[64];
        for (int i = 0; i < 64; i++)
            x[i] = (float)(i - 20) * 0.25f;
        uint8_t row[256];
        kt__moe_quant_q8g32(x, 0, 64, 64, row);
        const int8_t *q = (const int8_t *)row;
        const float *d = kt__q8_scales(row, 64);
        const int32_t *s = kt__q8_sums(row, 64);
        if (!pow2) {
            assert_float_equal(d[0], 5.0f / 127.0f, 1e-7); /* group 0: max |x| = 20 * 0.25 */
            assert_int_equal(q[0], -127);
        } else { /* 5 / 127 -> 2^-4; group 1: max 43 * 0.25 = 10.75, / 127 -> 2^-3 */
            assert_true(d[0] == 0.0625f);
            assert_int_equal(q[0], -80);
            assert_true(d[1] == 0.125f);
        }
        assert_int_equal(q[20], 0);
        int sum = 0;
        for (int i = 0; i < 32; i++)
            sum += q[i];
        assert_int_equal(s[0], 8 * sum);
        for (int i = 0; i < 64; i++)
            assert_true(fabsf(q[i] * d[i / 32] - x[i]) <= d[i / 32] / 2 + 1e-6f);
    }
    kt__moe_q8_set_pow2(was);
}

/* One RAWINT4 set against the scalar reference on the rows as stored:
 * weights W (n x K, stored layout, dequantized f), the set's view V of them
 * (repacked or W itself) from row r0 and input c0 on; tokens x [n_act][K].
 * Rows [n0, n1) and inputs [k0, k1) of V; 1e-5 of sum |a||w| (+ 1e-30). */
static void check_int4_view(const kt__moe_kernels *ks, const kt__wmat *W, const kt__wmat *V,
                            const float *f, const float *x, int n_act, int r0, int c0, int n0,
                            int n1, int k0, int k1, int M)
{
    const kt__moe_kernels *ref = kt__moe_kernels_ref(KT_METHOD_RAWINT4);
    int K = W->cols, KV = V->cols, nb = n1 - n0;
    /* the view's tokens: inputs [c0, c0 + KV) of x, quantized as rows of KV */
    float *xv = malloc((size_t)n_act * KV * sizeof(float));
    for (int t = 0; t < n_act; t++)
        memcpy(xv + (size_t)t * KV, x + (size_t)t * K + c0, (size_t)KV * sizeof(float));
    size_t sr, st;
    uint8_t *ar = quant_rows(ref, x, n_act, K, &sr);
    uint8_t *at = quant_rows(ks, xv, n_act, KV, &st);
    int32_t rows_idx[64];
    for (int m = 0; m < M; m++)
        rows_idx[m] = (m * 5 + 2) % n_act;
    float *cr = malloc((size_t)M * nb * sizeof(float));
    float *ct = malloc((size_t)M * nb * sizeof(float));
    void *scr = aligned_alloc(64, (ks->scratch_bytes + 127) & ~(size_t)63);
    kt__moe_new_epoch();
    ref->gemm(W, r0 + n0, r0 + n1, c0 + k0, c0 + k1, ar, sr, rows_idx, M, cr, nb, NULL);
    ks->gemm(V, n0, n1, k0, k1, at, st, rows_idx, M, ct, nb, scr);
    for (int m = 0; m < M; m++)
        for (int n = n0; n < n1; n++) {
            double mag = 0;
            for (int k = c0 + k0; k < c0 + k1; k++)
                mag += fabs((double)x[(size_t)rows_idx[m] * K + k] *
                            f[(size_t)(r0 + n) * K + k]);
            double c = ct[(size_t)m * nb + n - n0], r = cr[(size_t)m * nb + n - n0];
            if (!(fabs(c - r) <= 1e-5 * mag + 1e-30))
                fail_msg("%s%s N=%d K=%d M=%d rows [%d,%d) inputs [%d,%d) of the view "
                         "(from row %d, input %d): C[%d][%d] = %g, reference %g",
                         ks->name, V->type == KT__INT4_TILED ? " tiled" : "", W->rows, K, M,
                         n0, n1, k0, k1, r0, c0, m, n, c, r);
        }
    free(xv);
    free(ar);
    free(at);
    free(cr);
    free(ct);
    free(scr);
}

/* RAWINT4 repacked into 4-row tiles (KT__INT4_TILED, kt__moe_int4_tile): the
 * scalar, AVX2 and AVX-512 sets on the repacked view against the scalar set
 * on the rows as stored, at decode (1-3 tokens) and prefill token counts, for
 * whole matrices and for slices (rows from 8, inputs from 256: a NUMA pool's
 * copy), ragged rows (67: a zero-padded last tile), K with a partial last
 * block (768 = 512 + 256, 1184 = 2 x 512 + 160) and sub-ranges (rows from 4,
 * inputs from 512). */
static void test_int4_tiled(void **state)
{
    (void)state;
    const kt__moe_kernels *sets[3] = {kt__moe_kernels_ref(KT_METHOD_RAWINT4), NULL, NULL};
#if KT_HAVE_ISA_AVX2
    if ((kt_hw_isa() & AVX2_BITS) == AVX2_BITS)
        sets[1] = kt__moe_kernels_avx2(KT_METHOD_RAWINT4);
#endif
#if KT_HAVE_ISA_AVX512
    if ((kt_hw_isa() & AVX512_BITS) == AVX512_BITS)
        sets[2] = kt__moe_kernels_avx512(KT_METHOD_RAWINT4);
#endif
    static const int Ns[] = {5, 67};
    static const int Ks[] = {96, 768, 1184, 2048};
    static const int Ms[] = {1, 2, 3, 4, 17};
    for (int ni = 0; ni < 2; ni++)
        for (int ki = 0; ki < 4; ki++) {
            int N = Ns[ni], K = Ks[ki];
            void *w, *s;
            float *f = malloc((size_t)N * K * sizeof(float));
            tst_rawint4_matrix(N, K, 32, 0.05f, &w, &s, f);
            kt__wmat W = {w, s, N, K, 0, 0, NULL};
            int n_act = 20;
            float *x = malloc((size_t)n_act * K * sizeof(float));
            for (int i = 0; i < n_act * K; i++)
                x[i] = tst_uniform();
            for (int sl = 0; sl < 2; sl++) { /* whole, then a slice */
                int r0 = sl ? (N > 8 ? 8 : 1) : 0, c0 = sl && K > 256 ? 256 : 0;
                int rn = N - r0, kn = K - c0;
                void *buf = aligned_alloc(64, (kt__int4t_bytes(rn, kn) + 63) & ~(size_t)63);
                kt__wmat T = kt__moe_int4_tile(&W, r0, N, c0, K, buf);
                assert_int_equal(T.type, KT__INT4_TILED);
                for (int i = 0; i < 3; i++)
                    for (int mi = 0; sets[i] && mi < 5; mi++)
                        for (int part = 0; part < 2; part++) {
                            int n0 = part && rn > 4 ? 4 : 0, k0 = part && kn > 512 ? 512 : 0;
                            check_int4_view(sets[i], &W, &T, f, x, n_act, r0, c0, n0, rn, k0,
                                            kn, Ms[mi]);
                        }
                free(buf);
            }
            free(x);
            free(w);
            free(s);
            free(f);
        }
}

/* RAWINT4 prefill on VNNI under KT_MOE_Q8_POW2: the scale product s_w d_x is
 * an exponent add when d_x is a power of two and both are in range, with
 * zero weight scales' rows made value 0 in the packed tile; a tile with a
 * tiny weight scale (2^-100) or a call with a token of tiny inputs (d_x
 * 2^-110) takes the product instead. Against the scalar reference (the same
 * numbers: s_w 2^e is exact). */
static void test_int4_scale_paths(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX512
    if ((kt_hw_isa() & AVX512_BITS) != AVX512_BITS)
        skip();
    const kt__moe_kernels *ks = kt__moe_kernels_avx512(KT_METHOD_RAWINT4);
    int N = 67, K = 1184, n_act = 12, was = kt__moe_q8_pow2();
    kt__moe_q8_set_pow2(1);
    check_set(ks, KT_METHOD_RAWINT4); /* every shape, pow2 scales on both sides */
    for (int variant = 0; variant < 3; variant++) {
        void *w, *s;
        float *f = malloc((size_t)N * K * sizeof(float));
        tst_rawint4_matrix(N, K, 32, 0.05f, &w, &s, NULL);
        uint16_t *sc = s;
        for (int r = 0; r < N; r++) /* zero scales (every variant) */
            sc[(size_t)r * (K / 32) + r % (K / 32)] = 0;
        if (variant == 1) /* one tiny scale in the second 32-row block */
            sc[(size_t)40 * (K / 32) + 3] = tst_to_bf16(0x1p-100f);
        tst_rawint4_dequant(N, K, 32, w, sc, f);
        float *x = malloc((size_t)n_act * K * sizeof(float));
        for (int i = 0; i < n_act * K; i++)
            x[i] = tst_uniform();
        for (int k = 64; k < 96; k++) /* token 0: a zero group */
            x[k] = 0.0f;
        if (variant == 2) /* token 2 (the call's first row): tiny inputs */
            for (int k = 0; k < K; k++)
                x[(size_t)2 * K + k] *= 0x1p-104f;
        kt__wmat W = {w, s, N, K, 0, 0, NULL};
        for (int M = 4; M <= 8; M += 4)
            check_int4_view(ks, &W, &W, f, x, n_act, 0, 0, 0, N, 0, K, M);
        free(x);
        free(w);
        free(s);
        free(f);
    }
    kt__moe_q8_set_pow2(was);
#else
    skip();
#endif
}

/* kt_moe_desc.group_size: AMXINT4 only, 32 / 64 / 128 dividing H and I. */
static void test_group_size_checks(void **state)
{
    (void)state;
    const struct {
        int method;
        uint32_t group, hidden;
    } bad[] = {
        {KT_METHOD_AMXINT4, 48, 256},  /* not a group size the kernels take */
        {KT_METHOD_AMXINT4, 128, 192}, /* does not divide H */
        {KT_METHOD_BF16, 64, 256},     /* other methods: 0 only */
        {KT_METHOD_RAWINT4, 32, 256},
    };
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT; /* not reached */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kt_moe_desc d = KT_MOE_DESC_INIT;
        d.method = bad[i].method;
        d.group_size = bad[i].group;
        d.hidden = bad[i].hidden;
        d.intermediate = 256;
        d.n_experts = 4;
        d.top_k = 2;
        kt_moe_backend *moe = NULL;
        assert_int_equal(kt_moe_backend_create(&moe, NULL, &d, &lw, 1, NULL), KT_ERR_INVALID_ARG);
        assert_null(moe);
        assert_non_null(strstr(kt_last_error(), "group_size"));
    }
}

/* The backend's shared packing (each expert's tokens packed once per call for
 * the gate / up items and once for the down items) with the AMX-INT8 sets
 * through the tile emulation: the layer output equals, bit for bit, the same
 * sets without the packer (every call quantizes and packs for itself), with
 * one pool and with two (I sliced), for AMXINT8 and INT4 in groups of 32 and
 * 128; and stays within 2e-3 of the largest output of the backend's own pick
 * (the AVX-512 VNNI sets here: the same int8 activations, float sums in another
 * order; on AMX machines the real tiles, packed). The INT4 scales are on
 * format version 2's grid (group scales up to 2x apart), which the tiles'
 * rescale to one scale per row reproduces exactly; 3e-2 in groups of 32, whose
 * VNNI set quantizes the activations per 32 inputs. 48 tokens, top 2 of 4
 * experts: about 24 tokens per expert, two chunks of max_tokens 32. */
static void test_amx_backend_packed(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX512
    if ((kt_hw_isa() & AVX512_BITS) != AVX512_BITS)
        skip();
    enum { H = 256, I = 384, E = 4, TOPK = 2, T = 48 };
    static const int cases[3][2] = {{KT_METHOD_AMXINT8, 0}, {KT_METHOD_AMXINT4, 32},
                                    {KT_METHOD_AMXINT4, 128}};
    for (int ci = 0; ci < 3; ci++) {
        int method = cases[ci][0], G = cases[ci][1];
        int wmethod = method == KT_METHOD_AMXINT8 ? method : KT_METHOD_RAWINT4;
        const kt__moe_kernels *ks = method == KT_METHOD_AMXINT8
                                        ? kt__moe_kernels_amx_emulated(KT_METHOD_AMXINT8)
                                    : G == 32 ? kt__moe_kernels_amx_emulated(KT_METHOD_RAWINT4)
                                              : kt__moe_int4g_amx_emulated();
        const kt__moe_packer *pk = kt__moe_packer_amx_emulated(ks);
        assert_non_null(ks);
        assert_non_null(pk);
        void *wm[3][E], *sm[3][E];
        for (int e = 0; e < E; e++)
            for (int j = 0; j < 3; j++) {
                int rows = j < 2 ? I : H, cols = j < 2 ? H : I;
                float *f;
                rand_weights(wmethod, rows, cols, &wm[j][e], &sm[j][e], &f);
                free(f);
                if (G > 32) {
                    uint16_t *sg = malloc((size_t)rows * (cols / G) * 2);
                    for (int i = 0; i < rows * (cols / G); i++)
                        sg[i] = tst_to_bf16(0.02f + 0.01f * (tst_uniform() + 1.0f));
                    free(sm[j][e]);
                    sm[j][e] = sg;
                }
                if (G)
                    scales_on_grid(sm[j][e], rows, cols / G);
            }
        kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
        lw.gate = (const void *const *)wm[0];
        lw.up = (const void *const *)wm[1];
        lw.down = (const void *const *)wm[2];
        lw.gate_scale = (const void *const *)sm[0];
        lw.up_scale = (const void *const *)sm[1];
        lw.down_scale = (const void *const *)sm[2];
        kt_moe_desc d = tst_moe_desc(method, H, I, E, TOPK);
        d.group_size = (uint32_t)G;
        float *x = malloc((size_t)T * H * sizeof(float)), w[T * TOPK];
        int32_t ids[T * TOPK];
        for (int i = 0; i < T * H; i++)
            x[i] = tst_uniform() * (1 + i % 5);
        for (int i = 0; i < T * TOPK; i++) {
            ids[i] = (i / TOPK * 3 + (i % TOPK) + i / 7) % E;
            if (i % TOPK && ids[i] == ids[i - 1])
                ids[i] = (ids[i] + 1) % E;
            w[i] = 0.3f + 0.1f * (float)(i % 3);
        }
        /* runs: packed / unpacked with 1 pool, the same with 2 (each pool
         * quantizes h over its slice), the backend's own pick with 1 pool */
        float *out[5];
        char own[32] = "";
        for (int run = 0; run < 5; run++) {
            kt__moe_force_kernels(run == 4 ? NULL : ks, run % 2 ? NULL : pk);
            kt_moe_options o = tst_moe_options(2, 32);
            o.n_pools = run == 2 || run == 3 ? 2 : 1;
            kt_moe_backend *moe = NULL;
            if (kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o) < 0)
                fail_msg("%s g%d run %d: create: %s", kt_method_name((kt_method)method), G, run,
                         kt_last_error());
            if (run == 4) {
                kt_moe_info info = KT_MOE_INFO_INIT;
                assert_int_equal(kt_moe_backend_info(moe, &info), KT_OK);
                snprintf(own, sizeof own, "%s", info.isa);
            }
            out[run] = calloc((size_t)T * H, sizeof(float));
            int32_t n_tokens = T;
            kt_moe_io io = tst_moe_io_f32(&n_tokens, TOPK, x, ids, w, out[run]);
            if (kt_moe_forward(moe, 0, &io) < 0)
                fail_msg("%s g%d run %d: forward: %s", kt_method_name((kt_method)method), G, run,
                         kt_last_error());
            kt_moe_backend_free(moe);
        }
        kt__moe_force_kernels(NULL, NULL);
        double maxref = 0, maxerr = 0;
        for (int i = 0; i < T * H; i++) {
            if (out[0][i] != out[1][i] || out[2][i] != out[3][i])
                fail_msg("%s g%d: out[%d] packed %.9g / %.9g, unpacked %.9g / %.9g (1 / 2 "
                         "pools)", kt_method_name((kt_method)method), G, i, out[0][i],
                         out[2][i], out[1][i], out[3][i]);
            maxref = fmax(maxref, fabs(out[4][i]));
            maxerr = fmax(maxerr, fabs(out[0][i] - out[4][i]));
        }
        printf("  %-14s %s g%-3d shared packing: equal to unpacked (1 and 2 pools); "
               "%.2g of max |out| from %s\n", ks->name, kt_method_name((kt_method)method), G,
               maxerr / maxref, own);
        double tol = G == 32 ? 3e-2 : 2e-3; /* g32's VNNI set: x quantized per 32 inputs */
        if (!(maxref > 0 && maxerr <= tol * maxref))
            fail_msg("%s g%d: packed AMX vs %s: %.3g of %.3g",
                     kt_method_name((kt_method)method), G, own, maxerr, maxref);
        for (int j = 0; j < 3; j++)
            for (int e = 0; e < E; e++) {
                free(wm[j][e]);
                free(sm[j][e]);
            }
        for (int run = 0; run < 5; run++)
            free(out[run]);
        free(x);
    }
#else
    skip();
#endif
}

/* AMXINT4 with groups of 64 / 128 under KT_MOE_PREC_BF16X2: the backend picks
 * the x2 set (not the scalar fallback) where the CPU has AVX-512 BF16, and its
 * layer output (5 tokens: the decode path; 16: the chunked one) matches the
 * scalar grouped F32 set's (every ISA capped away) within 2e-5 of the largest. */
static void test_x2_group_backend(void **state)
{
    (void)state;
    enum { H = 256, I = 384, E = 4, TOPK = 2, TMAX = 16 };
    for (int G = 64; G <= 128; G *= 2) {
        void *gw[E], *uw[E], *dw[E], *gs[E], *us[E], *ds[E];
        for (int e = 0; e < E; e++) {
            void **m[3] = {&gw[e], &uw[e], &dw[e]}, **sc[3] = {&gs[e], &us[e], &ds[e]};
            for (int j = 0; j < 3; j++) {
                int rows = j < 2 ? I : H, cols = j < 2 ? H : I;
                uint32_t *p = malloc((size_t)rows * cols / 2);
                uint16_t *s = malloc((size_t)rows * (cols / G) * 2);
                for (int i = 0; i < rows * cols / 8; i++)
                    p[i] = tst_rand() ^ (tst_rand() << 16);
                for (int i = 0; i < rows * (cols / G); i++)
                    s[i] = tst_to_bf16(0.02f + 0.01f * (tst_uniform() + 1.0f));
                *m[j] = p;
                *sc[j] = s;
            }
        }
        kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
        lw.gate = (const void *const *)gw;
        lw.up = (const void *const *)uw;
        lw.down = (const void *const *)dw;
        lw.gate_scale = (const void *const *)gs;
        lw.up_scale = (const void *const *)us;
        lw.down_scale = (const void *const *)ds;
        kt_moe_desc d = tst_moe_desc(KT_METHOD_AMXINT4, H, I, E, TOPK);
        d.group_size = (uint32_t)G;
        float *x = malloc((size_t)TMAX * H * sizeof(float)), w[TMAX * TOPK];
        int32_t ids[TMAX * TOPK];
        for (int i = 0; i < TMAX * H; i++)
            x[i] = tst_uniform();
        for (int i = 0; i < TMAX * TOPK; i++) {
            ids[i] = (i / TOPK * 3 + (i % TOPK)) % E;
            w[i] = 0.3f + 0.1f * (float)(i % 3);
        }
        float *out[2];
        for (int lv = 0; lv < 2; lv++) {
            kt__moe_set_isa_cap(lv ? 0 : ~UINT64_C(0));
            kt_moe_options o = tst_moe_options(2, TMAX);
            o.act_precision = KT_MOE_PREC_BF16X2;
            kt_moe_backend *moe = NULL;
            if (kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o) < 0)
                fail_msg("group %d: create: %s", G, kt_last_error());
            kt_moe_info info = KT_MOE_INFO_INIT;
            assert_int_equal(kt_moe_backend_info(moe, &info), KT_OK);
            if (lv == 1)
                assert_string_equal(info.isa, "scalar-int4g");
            else if ((kt_hw_isa() & AVX512_BITS) == AVX512_BITS && KT_HAVE_ISA_AVX512)
                assert_non_null(strstr(info.isa, "int4-bf16x2"));
            out[lv] = calloc((size_t)2 * TMAX * H, sizeof(float));
            static const int32_t T_list[2] = {5, TMAX};
            for (int ti = 0; ti < 2; ti++) {
                int32_t n_tokens = T_list[ti];
                kt_moe_io io =
                    tst_moe_io_f32(&n_tokens, TOPK, x, ids, w, out[lv] + (size_t)ti * TMAX * H);
                if (kt_moe_forward(moe, 0, &io) < 0)
                    fail_msg("group %d: forward: %s", G, kt_last_error());
            }
            if (lv == 0)
                printf("  AMXINT4 group %3d BF16X2: %s\n", G, info.isa);
            kt_moe_backend_free(moe);
        }
        kt__moe_set_isa_cap(~UINT64_C(0));
        for (int ti = 0; ti < 2; ti++) {
            int T = ti ? TMAX : 5;
            double maxref = 0, maxerr = 0;
            for (int i = 0; i < T * H; i++) {
                float a = out[0][(size_t)ti * TMAX * H + i], b = out[1][(size_t)ti * TMAX * H + i];
                maxref = fmax(maxref, fabs(b));
                maxerr = fmax(maxerr, fabs(a - b));
            }
            printf("  AMXINT4 group %3d T %2d: max error %.2g of max |out| %.3g\n", G, T,
                   maxerr / maxref, maxref);
            if (!(maxref > 0 && maxerr <= 2e-5 * maxref))
                fail_msg("group %d T %d: BF16X2 vs scalar F32: %.3g of %.3g", G, T, maxerr,
                         maxref);
        }
        for (int e = 0; e < E; e++) {
            free(gw[e]);
            free(uw[e]);
            free(dw[e]);
            free(gs[e]);
            free(us[e]);
            free(ds[e]);
        }
        free(x);
        free(out[0]);
        free(out[1]);
    }
}

/* A vector activation of the backend, silu(g) u (lanes wide), against silu in
 * double: within 8 float ulps for g in [-88, 88] (Cephes' expf polynomial,
 * Cody-Waite reduction), every tail length 0..lanes; NaN stays NaN, +-inf as
 * the formula. */
static void check_silu(void (*silu_mul)(const float *, const float *, float *, int), int lanes,
                       const char *name)
{
    enum { N = 40000 };
    float *g = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float));
    float *h = malloc((N + 16) * sizeof(float));
    for (int i = 0; i < N; i++) {
        g[i] = -88.0f + 176.0f * (float)i / (float)(N - 1);
        if (i % 3 == 0)
            g[i] *= 0.01f;
        u[i] = 0.5f + tst_uniform();
    }
    double worst = 0;
    for (int len = 0; len <= lanes; len++) { /* masked tails: h[len] must stay untouched */
        h[len] = 42.0f;
        silu_mul(g + 100, u + 100, h, len);
        assert_true(h[len] == 42.0f);
    }
    silu_mul(g, u, h, N);
    for (int i = 0; i < N; i++) {
        double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        double err = fabs(h[i] - want) / fmax(fabs(want), 1e-30);
        worst = fmax(worst, err);
        if (!(err <= 8 * FLT_EPSILON))
            fail_msg("%s: silu(%.9g) * %.9g = %.9g, want %.9g", name, g[i], u[i], h[i], want);
    }
    float sg[4] = {NAN, INFINITY, -INFINITY, -200.0f}, su[4] = {1, 1, 1, 1}, sh[4];
    silu_mul(sg, su, sh, 4);
    assert_true(isnan(sh[0]));
    assert_true(sh[1] == INFINITY && sh[2] == -INFINITY);
    assert_true(sh[3] <= 0.0f && sh[3] > -1e-30f);
    printf("  silu %s: worst relative error %.2g (%.1f ulp)\n", name, worst,
           worst / FLT_EPSILON);
    free(g);
    free(u);
    free(h);
}

static void test_silu_avx512(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX512
    if (!(kt_hw_isa() & KT_ISA_AVX512F))
        skip();
    check_silu(kt__moe_silu_mul_avx512, 16, "avx512");
#else
    skip();
#endif
}

/* The same for the AVX2 one (CPUs without AVX-512F). */
static void test_silu_avx2(void **state)
{
    (void)state;
#if KT_HAVE_ISA_AVX2
    uint64_t need = KT_ISA_AVX2 | KT_ISA_FMA;
    if ((kt_hw_isa() & need) != need)
        skip();
    check_silu(kt__moe_silu_mul_avx2, 8, "avx2");
#else
    skip();
#endif
}

/* KT_MOE_DECODE_READ's read loops: the scalar sum of 64-bit words equals the
 * sum written out for a known buffer, and the AVX2 / AVX-512 loops equal the
 * scalar one at every start offset 0..63 and lengths across their 256 / 512-byte
 * steps and tails (0..1100, and 1 MiB + 37). */
static void test_read_sum(void **state)
{
    (void)state;
    size_t cap = ((size_t)1 << 20) + 200;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    for (size_t i = 0; i < cap; i++)
        buf[i] = (uint8_t)(tst_rand() >> 7);
    /* 16 bytes 1..16 and 3 more: words 0x0807..01, 0x100f..09, then 0x131211 */
    uint8_t known[19];
    for (int i = 0; i < 19; i++)
        known[i] = (uint8_t)(i + 1);
    assert_true(kt__moe_read_sum(known, 19) ==
                UINT64_C(0x0807060504030201) + UINT64_C(0x100f0e0d0c0b0a09) + UINT64_C(0x131211));
    assert_true(kt__moe_read_sum(known, 0) == 0);
    uint64_t isa = kt_hw_isa();
    int checked = 0;
    for (int off = 0; off < 64; off++)
        for (size_t n = 0; n <= 1100; n += (n < 40 ? 1 : 13)) {
            uint64_t want = kt__moe_read_sum(buf + off, n);
#if KT_HAVE_ISA_AVX2
            if (isa & KT_ISA_AVX2) {
                assert_true(kt__moe_read_sum_avx2(buf + off, n) == want);
                checked++;
            }
#endif
#if KT_HAVE_ISA_AVX512
            if (isa & KT_ISA_AVX512F) {
                assert_true(kt__moe_read_sum_avx512(buf + off, n) == want);
                checked++;
            }
#endif
        }
    size_t big = ((size_t)1 << 20) + 37;
    uint64_t want = kt__moe_read_sum(buf + 5, big);
#if KT_HAVE_ISA_AVX2
    if (isa & KT_ISA_AVX2)
        assert_true(kt__moe_read_sum_avx2(buf + 5, big) == want);
#endif
#if KT_HAVE_ISA_AVX512
    if (isa & KT_ISA_AVX512F)
        assert_true(kt__moe_read_sum_avx512(buf + 5, big) == want);
#endif
    (void)isa;
    (void)want;
    printf("  read sums: %d vector checks against the scalar loop\n", checked);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_q8),
        cmocka_unit_test(test_int4_tiled),
        cmocka_unit_test(test_int4_scale_paths),
        cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_precise),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avx2_fp8_scales),
        cmocka_unit_test(test_avx2_fp8_extreme_codes),
        cmocka_unit_test(test_avx2_q8e64),
        cmocka_unit_test(test_amx_emulated),
        cmocka_unit_test(test_int8_act),
        cmocka_unit_test(test_group_size_checks),
        cmocka_unit_test(test_x2_group_backend),
        cmocka_unit_test(test_amx),
        cmocka_unit_test(test_amx_x2_emulated),
        cmocka_unit_test(test_amx_x2),
        cmocka_unit_test(test_amx_backend_packed),
        cmocka_unit_test(test_silu_avx512),
        cmocka_unit_test(test_silu_avx2),
        cmocka_unit_test(test_read_sum),
    };
    /* KT_TEST_FILTER=test_amx_backend_packed: a subset (sanitizer builds are slow) */
    const char *filter = getenv("KT_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
