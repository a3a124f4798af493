/* The LLAMAFILE method: MoE experts in ggml block types.
 *
 * - kernels: one gemm call per block type and ISA level against the
 *   dequantize-then-F32 product of the same weights and of the activation as
 *   the kernel quantized it (exact integer sums: only float rounding differs);
 * - backend: a whole MoE layer per type against the F32 layer of the
 *   dequantized weights (the error is the activation's Q8 rounding), at every
 *   ISA level, decode and prefill, mixed types (Q4_K gate/up + Q6_K down as
 *   in Q4_K_M files), and bad types rejected with a message. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../cpu/moe_kernels.h"
#include "kt_config.h"
#include "../../cpu/ref/ggml_quants.h"
#include "kt/convert.h"
#include "kt/engine.h"
#include "kt/hw.h"
#include "kt/model.h"
#include "kt/moe.h"
#include "kt/tokenizer.h"
#include "io/gguf.h"
#include <cjson/cJSON.h>
#include "kt_internal.h"
#include "moe/moe_internal.h"
#include "test_moe_common.h"

static const kt_type all_types[] = {
    KT_TYPE_Q4_0, KT_TYPE_Q4_1, KT_TYPE_Q5_0, KT_TYPE_Q5_1, KT_TYPE_Q8_0,
    KT_TYPE_Q2_K, KT_TYPE_Q3_K, KT_TYPE_Q4_K, KT_TYPE_Q5_K, KT_TYPE_Q6_K,
    KT_TYPE_IQ4_NL, KT_TYPE_IQ4_XS, KT_TYPE_BF16, KT_TYPE_F16, KT_TYPE_F32,
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* rows x cols weights of `type` (quantized from random F32) and their
 * dequantized values. */
static void make_weights(kt_type type, int rows, int cols, float scale, uint8_t **q, float **deq)
{
    const kt_ggml_traits *tr = kt__ggml_traits(type);
    size_t rb = kt__ggml_row_bytes(type, cols);
    float *src = malloc((size_t)cols * sizeof(float));
    *q = malloc((size_t)rows * rb);
    *deq = malloc((size_t)rows * cols * sizeof(float));
    assert_non_null(tr);
    assert_non_null(tr->quantize);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            src[c] = frand() * scale;
        tr->quantize(src, *q + (size_t)r * rb, cols);
        tr->to_float(*q + (size_t)r * rb, *deq + (size_t)r * cols, cols);
    }
    free(src);
}

/* The activation as the kernel sees it: x quantized to type's partner and back. */
static void partner_roundtrip(kt_type type, const float *x, int K, float *out)
{
    const kt_ggml_traits *tr = kt__ggml_traits(type);
    const kt_ggml_traits *pt = kt__ggml_traits(tr->vec_dot_type);
    if (tr->vec_dot_type == type && pt->block_size == 1) {
        memcpy(out, x, (size_t)K * sizeof(float)); /* plain float types: F32 activations */
        return;
    }
    void *buf = malloc(kt__ggml_row_bytes(tr->vec_dot_type, K));
    pt->from_float(x, buf, K);
    pt->to_float(buf, out, K);
    free(buf);
}

/* Whether the CPU runs AMX-INT8 tiles (and the process may: kt_hw_isa asks). */
static bool amx_tiles(void)
{
    const uint64_t amx = KT_ISA_AMX_TILE | KT_ISA_AMX_INT8 | KT_ISA_AVX512VNNI;
    return (kt_hw_isa() & amx) == amx;
}

/* gemm of every type and ISA level vs dequantize-then-F32 (double sums), over
 * token counts that take every AVX-512 path (4-row and 2 x 4 tiles, the
 * panel GEMM) with ragged row and token tails, and a pool's slice of the
 * inputs that spans several panel segments. */
static void test_kernels(void **state)
{
    (void)state;
    enum { N = 40, K = 1536, MMAX = 128 };
    static const int Ms[] = {1, 2, 3, 17, 128};
    float *x = malloc((size_t)MMAX * K * sizeof(float));
    float *xr = malloc((size_t)MMAX * K * sizeof(float));
    float *C = malloc((size_t)MMAX * N * sizeof(float));
    int32_t rows[MMAX];
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        kt_type type = all_types[ti];
        uint8_t *q;
        float *deq;
        make_weights(type, N, K, 0.5f, &q, &deq);
        unsigned mask = kt__ggml_act_section(type);
        assert_true(mask != 0);
        for (int isa = 0; isa <= 3; isa++) {
            const kt__moe_kernels *kern = kt__moe_llamafile_kernels(isa, mask | KT__GGML_ACT_Q80);
            if (isa == 3 && (!kern || !amx_tiles())) /* the AMX set: 17 and 128 on the tiles */
                continue;
            uint64_t rng_before = rng; /* (isa 3 leaves the later tests' draws as they were) */
            if (isa == 2 && kt__ggml_isa_best() < KT_GGML_AVX512)
                continue;
            if (isa == 1 && kt__ggml_isa_best() < KT_GGML_AVX2)
                continue;
            size_t rowb = kt__moe_act_row_bytes(kern->act, K);
            uint8_t *A = calloc(MMAX, rowb);
            void *scratch = kern->scratch_bytes ? malloc(kern->scratch_bytes) : NULL;
            for (int m = 0; m < MMAX; m++) {
                for (int k = 0; k < K; k++)
                    x[m * K + k] = frand() * (1.0f + (float)(m % 5));
                /* written in 64-wide pieces, as phase 1 does */
                for (int k0 = 0; k0 < K; k0 += 64)
                    kern->quant(x + (size_t)m * K, k0, k0 + 64, K, A + m * rowb);
                partner_roundtrip(type, x + (size_t)m * K, K, xr + (size_t)m * K);
            }
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                int M = Ms[mi];
                for (int m = 0; m < M; m++)
                    rows[m] = (m * 37 + 11) % MMAX;
                kt__wmat W = {.w = q, .rows = N, .cols = K, .type = type};
                int bs = (int)kt__ggml_traits(type)->block_size > 32 ? 256 : 32;
                int k0 = bs == 256 ? 256 : 64, k1 = K; /* a pool's slice of the inputs */
                kt__moe_new_epoch(); /* new rows: kernels drop packed copies */
                if (kern->prefetch) /* as the backend: the next call's rows named first */
                    kern->prefetch(&W, 3, N, M);
                kern->gemm(&W, 3, N, k0, k1, A, rowb, rows, M, C, N, scratch);
                for (int m = 0; m < M; m++) {
                    for (int n = 3; n < N; n++) {
                        double ref = 0, mag = 0;
                        for (int k = k0; k < k1; k++) {
                            ref += (double)deq[n * K + k] * xr[rows[m] * K + k];
                            mag += fabs((double)deq[n * K + k] * xr[rows[m] * K + k]);
                        }
                        double got = C[m * N + n - 3];
                        if (fabs(got - ref) > 1e-4 * mag + 1e-6) {
                            fprintf(stderr, "%s isa %d M %d m %d n %d: got %g want %g (mag %g)\n",
                                    kt_type_name(type), isa, M, m, n, got, ref, mag);
                            fail();
                        }
                    }
                }
            }
            free(A);
            free(scratch);
            if (isa == 3)
                rng = rng_before;
        }
        free(q);
        free(deq);
    }
    free(x);
    free(xr);
    free(C);
}

/* The AMX set's prefill (kt__lf_gemm_amx: 16 or more tokens an expert) against the
 * AVX-512 set's panels and dequantize-then-F32: each type with an even and an odd
 * number of blocks, 70 rows (two 32-row blocks and a ragged 6, from row n0), 16 to 256
 * tokens (ragged token blocks), the whole K and a slice; the rows as stored and (Q4_0,
 * Q8_0, Q4_K) their load-time repack, whose stored rows it reads; the gate and the up
 * call of one token set in one epoch (the packed tokens reused), then another token set
 * of the same count. Runs on the real tiles; skipped where there are none. */
static void test_amx_prefill(void **state)
{
    (void)state;
    if (!amx_tiles() || !kt__moe_llamafile_kernels(3, KT__GGML_ACT_Q80))
        skip();
    uint64_t rng_before = rng; /* the later tests' draws as they were */
    enum { N = 70, MMAX = 256 };
    static const kt_type types[] = {KT_TYPE_Q4_0, KT_TYPE_Q8_0, KT_TYPE_IQ4_NL, KT_TYPE_Q4_K,
                                    KT_TYPE_Q5_K, KT_TYPE_Q6_K};
    static const int Ms[] = {9, 16, 17, 33, 48, 255, 256}; /* 9: the K types' tiles from 8 */
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (int odd = 0; odd < 2; odd++) {
            kt_type type = types[ti];
            bool kt = kt__ggml_traits(type)->block_size == 256;
            int K = kt ? (odd ? 2304 : 1024) : (odd ? 2080 : 1024);
            unsigned mask = kt__ggml_act_section(type) | KT__GGML_ACT_Q80;
            const kt__moe_kernels *amx = kt__moe_llamafile_kernels(3, mask);
            const kt__moe_kernels *ref = kt__moe_llamafile_kernels(2, mask);
            assert_non_null(amx);
            uint8_t *q[2];
            float *deq[2];
            make_weights(type, N, K, 0.5f, &q[0], &deq[0]);
            make_weights(type, N, K, 0.5f, &q[1], &deq[1]);
            size_t rowb = kt__moe_act_row_bytes(amx->act, K);
            uint8_t *A = calloc(MMAX, rowb);
            float *x = malloc((size_t)K * sizeof(float));
            float *xr = malloc((size_t)MMAX * K * sizeof(float));
            float *C = malloc((size_t)MMAX * N * sizeof(float));
            float *C2 = malloc((size_t)MMAX * N * sizeof(float));
            void *scr = malloc(amx->scratch_bytes), *scr2 = malloc(ref->scratch_bytes);
            size_t xb = kt__lf_repack_bytes(type, N, K);
            void *xbuf[2] = {xb ? malloc(xb) : NULL, xb ? malloc(xb) : NULL};
            int32_t rows[2][MMAX];
            for (int m = 0; m < MMAX; m++) {
                for (int k = 0; k < K; k++)
                    x[k] = frand() * (1.0f + (float)(m % 7));
                amx->quant(x, 0, K, K, A + (size_t)m * rowb);
                partner_roundtrip(type, x, K, xr + (size_t)m * K);
            }
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
                for (int rep = 0; rep < (xb ? 2 : 1); rep++) {
                    int M = Ms[mi], n0 = rep ? 3 : 0, k0 = rep ? (kt ? 256 : 96) : 0;
                    kt__moe_new_epoch();
                    for (int set = 0; set < 2; set++) /* two token sets of M in one epoch */
                        for (int j = 0; j < 2; j++) { /* gate, up: the same tokens */
                            for (int m = 0; m < M; m++)
                                rows[set][m] = (m * (set ? 53 : 37) + 11 + set) % MMAX;
                            kt__wmat W = {.w = q[j], .rows = N, .cols = K, .type = type};
                            if (rep)
                                W = kt__lf_repack(&W, xbuf[j]);
                            amx->gemm(&W, n0, N, k0, K, A, rowb, rows[set], M, C, N, scr);
                            ref->gemm(&W, n0, N, k0, K, A, rowb, rows[set], M, C2, N, scr2);
                            for (int m = 0; m < M; m++)
                                for (int n = n0; n < N; n++) {
                                    double want = 0, mag = 0;
                                    const float *wd = deq[j] + (size_t)n * K;
                                    const float *a = xr + (size_t)rows[set][m] * K;
                                    for (int k = k0; k < K; k++) {
                                        want += (double)wd[k] * a[k];
                                        mag += fabs((double)wd[k] * a[k]);
                                    }
                                    double got = C[m * N + n - n0], avx = C2[m * N + n - n0];
                                    double tol = 1e-4 * mag + 1e-6;
                                    if (fabs(got - want) > tol || fabs(got - avx) > tol) {
                                        fprintf(stderr, "%s amx K %d M %d rep %d set %d j %d "
                                                "m %d n %d: got %g, avx512 %g, want %g\n",
                                                kt_type_name(type), K, M, rep, set, j, m, n,
                                                got, avx, want);
                                        fail();
                                    }
                                }
                        }
                }
            for (int j = 0; j < 2; j++) {
                free(q[j]);
                free(deq[j]);
                free(xbuf[j]);
            }
            free(A);
            free(x);
            free(xr);
            free(C);
            free(C2);
            free(scr);
            free(scr2);
        }
    rng = rng_before;
}

/* The AVX2 set's prefill panels of a type (6 or more tokens; 1 to 5 take the decode tiles
 * or vec_dots) against the scalar set's vec_dots and dequantize-then-F32: 37 rows (a
 * ragged group of 8), rows and inputs sliced off the panels (inputs [256, 1280): segments
 * of 512, 512 and a ragged 256), 1 to 256 tokens (257 and more: test_backend_tokens),
 * every 8th token's inputs all alike (the largest int16 sums). raw: the rows also hold
 * the type's R40 / R80 section, whose per-block arrays the panels then read (else they sum
 * the blocks themselves). */
static void panel_case_rows(kt_type type, bool raw)
{
    enum { N = 37, K = 1280, MMAX = 256 };
    static const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 64, 255, 256};
    /* Q4_1 / Q5_1: their Q8_1 section too */
    const bool q81 = kt__ggml_act_section(type) & KT__GGML_ACT_Q81;
    const unsigned mask = KT__GGML_ACT_Q8K | KT__GGML_ACT_Q80 | (q81 ? KT__GGML_ACT_Q81 : 0) |
                          (raw ? kt__ggml_act_section(type) : 0);
    const kt__moe_kernels *ref = kt__moe_llamafile_kernels(0, mask);
    const kt__moe_kernels *vec = kt__moe_llamafile_kernels(1, mask);
    uint8_t *q;
    float *deq;
    make_weights(type, N, K, 0.5f, &q, &deq);
    size_t rb0 = kt__moe_act_row_bytes(ref->act, K), rb1 = kt__moe_act_row_bytes(vec->act, K);
    uint8_t *A0 = calloc(MMAX, rb0), *A1 = calloc(MMAX, rb1);
    float *x = malloc((size_t)K * sizeof(float)), *xr = malloc((size_t)MMAX * K * sizeof(float));
    float *C0 = malloc((size_t)MMAX * N * sizeof(float));
    float *C1 = malloc((size_t)MMAX * N * sizeof(float));
    void *scratch = malloc(vec->scratch_bytes);
    for (int m = 0; m < MMAX; m++) {
        for (int k = 0; k < K; k++) /* every 8th token all near +1: codes near 127 */
            x[k] = m % 8 == 5 ? 1.0f + 0.01f * frand() : frand() * (1.0f + (float)(m % 7));
        ref->quant(x, 0, K, K, A0 + m * rb0);
        vec->quant(x, 0, K, K, A1 + m * rb1);
        partner_roundtrip(type, x, K, xr + (size_t)m * K);
    }
    kt__wmat W = {.w = q, .rows = N, .cols = K, .type = type};
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (int k0 = 0; k0 <= 256; k0 += 256) {
            const int M = Ms[mi], n0 = k0 ? 5 : 0;
            ref->gemm(&W, n0, N, k0, K, A0, rb0, NULL, M, C0, N, NULL);
            vec->gemm(&W, n0, N, k0, K, A1, rb1, NULL, M, C1, N, scratch);
            for (int m = 0; m < M; m++)
                for (int n = n0; n < N; n++) {
                    double want = 0, mag = 0;
                    for (int k = k0; k < K; k++) {
                        want += (double)deq[(size_t)n * K + k] * xr[(size_t)m * K + k];
                        mag += fabs((double)deq[(size_t)n * K + k] * xr[(size_t)m * K + k]);
                    }
                    double got = C1[m * N + n - n0], dot = C0[m * N + n - n0];
                    double tol = 1e-4 * mag + 1e-6;
                    /* Q8_1 blocks carry s = d x (code sum) in f16, which the minimum term
                     * reads (got and vec_dot alike): 2^-11 of it off the roundtrip, most
                     * at the near-+1 tokens */
                    double tol_want = q81 ? 1e-3 * mag + 1e-6 : tol;
                    if (fabs(got - want) > tol_want || fabs(got - dot) > tol) {
                        fprintf(stderr, "%s panel%s M %d k0 %d m %d n %d: got %g, vec_dot %g, "
                                        "want %g\n", kt_type_name(type), raw ? " (raw rows)" : "",
                                M, k0, m, n, got, dot, want);
                        fail();
                    }
                }
        }
    free(q);
    free(deq);
    free(A0);
    free(A1);
    free(x);
    free(xr);
    free(C0);
    free(C1);
    free(scratch);
}

static void panel_case(kt_type type)
{
    if (kt__ggml_isa_best() < KT_GGML_AVX2)
        skip();
    panel_case_rows(type, false);
    if (kt__ggml_act_section(type) & (KT__GGML_ACT_R40 | KT__GGML_ACT_R80))
        panel_case_rows(type, true);
}

static void test_panel_q6k(void **state)
{
    (void)state;
    panel_case(KT_TYPE_Q6_K);
}

/* Q5_K: codes to 31, so the int16 sums are widened every 4 steps (a sum of 8 could
 * pass int16 where the activation codes are large and alike in sign) */
static void test_panel_q5k(void **state)
{
    (void)state;
    panel_case(KT_TYPE_Q5_K);
}

/* IQ4_NL: the table's values as Q8_0's signed steps */
static void test_panel_iq4nl(void **state)
{
    (void)state;
    panel_case(KT_TYPE_IQ4_NL);
}

/* IQ4_XS: IQ4_NL's values with a 6-bit scale per 32 inputs, Q8_K activations; the
 * scales go into the widening vpmaddwd and a superblock sums in int32 */
static void test_panel_iq4xs(void **state)
{
    (void)state;
    panel_case(KT_TYPE_IQ4_XS);
}

/* Q3_K: codes q + 4 (0..7) from qs and hmask, a 6-bit signed scale per 16 inputs in the
 * widening vpmaddwd, the -4 offsets through the token's bsums */
static void test_panel_q3k(void **state)
{
    (void)state;
    panel_case(KT_TYPE_Q3_K);
}

/* Q2_K: codes 0..3, a 4-bit scale per 16 inputs in the widening vpmaddwd, the 4-bit
 * minimums through the token's bsums (their own dmin term) */
static void test_panel_q2k(void **state)
{
    (void)state;
    panel_case(KT_TYPE_Q2_K);
}

/* Q5_0: Q4_0's nibbles with a 5th bit from qh (codes 0..31, 4 steps an int16 sum), the
 * -16 offsets through the token's code sums */
static void test_panel_q50(void **state)
{
    (void)state;
    panel_case(KT_TYPE_Q5_0);
}

/* Q4_1 / Q5_1: Q4_0's / Q5_0's codes, the minimum through the Q8_1 block's s (d x sum) */
static void test_panel_q41(void **state)
{
    (void)state;
    panel_case(KT_TYPE_Q4_1);
}

static void test_panel_q51(void **state)
{
    (void)state;
    panel_case(KT_TYPE_Q5_1);
}

/* Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K / IQ4_NL repacked at load time (KT__LF_Q40X / Q80X
 * / Q4KX / Q5KX / Q6KX / IQ4NLX): the AVX-512 and AVX2 decodes on the repack (Q5KX,
 * Q6KX, IQ4NLX: AVX2 only) against dequantize-then-F32 for row lengths with every group
 * kind (Q4_0, Q8_0, IQ4_NL: 16s, an 8, a 4, a padded last 4; the K types: 16s, a last
 * 8), 1-5 tokens, row ranges off the tiles; 6 tokens (the prefill panels), the scalar
 * set (and the AVX-512 one for Q5KX, Q6KX, IQ4NLX) read the rows kept in W->scale: the
 * same figures as on the rows themselves. */
static void repack_case(kt_type type, const int *Ks, size_t nk)
{
    enum { N = 37, MMAX = 6 };
    int32_t rows[MMAX] = {4, 0, 5, 2, 1, 3};
    uint64_t rng0 = rng; /* the later tests' data as without this test */
    for (size_t ki = 0; ki < nk; ki++) {
        int K = Ks[ki];
        uint8_t *q;
        float *deq;
        make_weights(type, N, K, 0.5f, &q, &deq);
        size_t rpb = kt__lf_repack_bytes(type, N, K);
        assert_true(rpb > 0);
        void *rp = malloc(rpb);
        kt__wmat W = {.w = q, .rows = N, .cols = K, .type = type};
        kt__wmat X = kt__lf_repack(&W, rp);
        assert_int_equal(X.type, type == KT_TYPE_Q4_0   ? KT__LF_Q40X
                                 : type == KT_TYPE_Q8_0 ? KT__LF_Q80X
                                 : type == KT_TYPE_Q6_K ? KT__LF_Q6KX
                                 : type == KT_TYPE_Q5_K ? KT__LF_Q5KX
                                 : type == KT_TYPE_IQ4_NL ? KT__LF_IQ4NLX
                                                        : KT__LF_Q4KX);
        assert_ptr_equal(X.scale, q);
        float *x = malloc((size_t)MMAX * K * sizeof(float));
        float *xr = malloc((size_t)MMAX * K * sizeof(float));
        float *C = malloc((size_t)MMAX * N * sizeof(float));
        float *C0 = malloc((size_t)MMAX * N * sizeof(float));
        for (int isa = 0; isa <= 2; isa++) {
            if (kt__ggml_isa_best() < (kt_ggml_isa)isa)
                continue;
            const kt__moe_kernels *kern =
                kt__moe_llamafile_kernels(isa, kt__ggml_act_section(type));
            assert_int_equal(kt__lf_repacks(kern, type),
                             type == KT_TYPE_Q6_K || type == KT_TYPE_IQ4_NL ||
                                     type == KT_TYPE_Q5_K
                                 ? isa == 1
                                 : isa >= 1);
            size_t rowb = kt__moe_act_row_bytes(kern->act, K);
            uint8_t *A = calloc(MMAX, rowb);
            void *scratch = kern->scratch_bytes ? malloc(kern->scratch_bytes) : NULL;
            for (int m = 0; m < MMAX; m++) {
                for (int k = 0; k < K; k++)
                    x[m * K + k] = frand() * (1.0f + (float)m);
                for (int k0 = 0; k0 < K; k0 += 64) /* in pieces, as phase 1 writes it */
                    kern->quant(x + (size_t)m * K, k0, k0 + 64 < K ? k0 + 64 : K, K,
                                A + m * rowb);
                partner_roundtrip(type, x + (size_t)m * K, K, xr + (size_t)m * K);
            }
            for (int M = 1; M <= MMAX; M++) {
                for (int n0 = 0; n0 <= 3; n0 += 3) {
                    int n1 = n0 ? N - 2 : N;
                    if (kern->prefetch) { /* as the backend: the next call named first */
                        kern->prefetch(&X, n0, n1, M);
                        kern->prefetch(&X, 0, N, M);
                    }
                    kern->gemm(&X, n0, n1, 0, K, A, rowb, rows, M, C, N, scratch);
                    kern->gemm(&W, n0, n1, 0, K, A, rowb, rows, M, C0, N, scratch);
                    for (int m = 0; m < M; m++)
                        for (int n = n0; n < n1; n++) {
                            double ref = 0, mag = 0;
                            for (int k = 0; k < K; k++) {
                                double p = (double)deq[n * K + k] * xr[rows[m] * K + k];
                                ref += p;
                                mag += fabs(p);
                            }
                            double got = C[m * N + n - n0], raw = C0[m * N + n - n0];
                            if (fabs(got - ref) > 1e-4 * mag + 1e-6 ||
                                fabs(got - raw) > 1e-4 * mag + 1e-6) {
                                fprintf(stderr, "K %d isa %d M %d m %d n %d: got %g rows %g "
                                        "want %g (mag %g)\n", K, isa, M, m, n, got, raw, ref,
                                        mag);
                                fail();
                            }
                        }
                }
            }
            free(A);
            free(scratch);
        }
        free(x);
        free(xr);
        free(C);
        free(C0);
        free(rp);
        free(q);
        free(deq);
    }
    rng = rng0;
}

/* The AVX2 decode's stream orders (kt__lf_set_streams_avx2: one stream, two a tile
 * at a time, two woven a group at a time for one token or any, four, three) compute
 * every tile as x_tile does:
 * the same bits, for 37 rows (a ragged last tile; 10 tiles, so two streams of 5,
 * three of 3 with 1 left and four of 2 with 2 left), row ranges off the tiles, K with
 * 16s, an 8, a 4 and a padded 4 (Q4_0, Q8_0, IQ4_NL: 1472, 416) or a last 8 (the K
 * types: 1280), 1-9 tokens (the woven tiles take at most 8; tokens past a type's
 * decode bound: the rows' vec_dots, the same in every order). Every layout the woven
 * tiles compile (Q5_K, Q6_K, IQ4_NL read two streams under KT_LF_STREAMS=2 only). */
static void test_repack_streams(void **state)
{
    (void)state;
    if (kt__ggml_isa_best() < KT_GGML_AVX2)
        skip();
    enum { N = 37, MMAX = 9 };
    static const kt_type types[] = {KT_TYPE_Q4_0, KT_TYPE_Q8_0, KT_TYPE_Q4_K,
                                    KT_TYPE_Q6_K, KT_TYPE_Q5_K, KT_TYPE_IQ4_NL};
    static const int orders[][2] = {{1, 0}, {2, 0}, {2, 1}, {2, 2}, {4, 0}, {3, 2}};
    int32_t rows[MMAX] = {4, 0, 8, 5, 2, 7, 1, 3, 6};
    uint64_t rng0 = rng;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const bool b32 = kt__ggml_traits(types[ti])->block_size == 32;
        const int Ks[] = {2048, b32 ? 1472 : 1280, b32 ? 416 : 768};
        for (int ki = 0; ki < 3; ki++) {
            int K = Ks[ki];
            uint8_t *q;
            float *deq;
            make_weights(types[ti], N, K, 0.5f, &q, &deq);
            void *rp = malloc(kt__lf_repack_bytes(types[ti], N, K));
            kt__wmat W = {.w = q, .rows = N, .cols = K, .type = types[ti]};
            kt__wmat X = kt__lf_repack(&W, rp);
            const kt__moe_kernels *kern =
                kt__moe_llamafile_kernels(1, kt__ggml_act_section(types[ti]));
            size_t rowb = kt__moe_act_row_bytes(kern->act, K);
            uint8_t *A = calloc(MMAX, rowb);
            float *x = malloc((size_t)K * sizeof(float));
            for (int m = 0; m < MMAX; m++) {
                for (int k = 0; k < K; k++)
                    x[k] = frand();
                kern->quant(x, 0, K, K, A + m * rowb);
            }
            float *C0 = malloc((size_t)MMAX * N * sizeof(float));
            float *C = malloc((size_t)MMAX * N * sizeof(float));
            for (int M = 1; M <= MMAX; M++)
                for (int n0 = 0; n0 <= 3; n0 += 3) {
                    int n1 = n0 ? N - 2 : N;
                    for (size_t o = 0; o < sizeof orders / sizeof *orders; o++) {
                        int was = kt__lf_set_streams_avx2(orders[o][0], orders[o][1]);
                        memset(C, 0xff, (size_t)MMAX * N * sizeof(float));
                        kern->gemm(&X, n0, n1, 0, K, A, rowb, rows, M, o ? C : C0, N, NULL);
                        kt__lf_set_streams_avx2(was & 15, was >> 4);
                        if (!o)
                            continue;
                        for (int m = 0; m < M; m++)
                            if (memcmp(C + m * N, C0 + m * N, (size_t)(n1 - n0) * sizeof(float))) {
                                fprintf(stderr, "type %d K %d M %d n0 %d order %zu m %d differs\n",
                                        types[ti], K, M, n0, o, m);
                                fail();
                            }
                    }
                }
            free(C0);
            free(C);
            free(x);
            free(A);
            free(rp);
            free(q);
            free(deq);
        }
    }
    rng = rng0;
}

static void test_repack_q40(void **state)
{
    (void)state;
    static const int Ks[] = {2048, 768, 1472, 416, 160, 96, 32};
    repack_case(KT_TYPE_Q4_0, Ks, sizeof Ks / sizeof Ks[0]);
}

static void test_repack_q80(void **state)
{
    (void)state;
    static const int Ks[] = {2048, 768, 1472, 416, 160, 96, 32};
    repack_case(KT_TYPE_Q8_0, Ks, sizeof Ks / sizeof Ks[0]);
}

static void test_repack_q4k(void **state)
{
    (void)state;
    static const int Ks[] = {2048, 768, 1280, 512, 256};
    repack_case(KT_TYPE_Q4_K, Ks, sizeof Ks / sizeof Ks[0]);
#if KT_HAVE_ISA_AVX512
    if (kt__ggml_isa_best() >= KT_GGML_AVX512) /* both one-token kernels (KT_LF_Q4K) */
        for (int k = 1; k <= 3; k += 2) {
            int was = kt__lf_set_q4k_avx512(k);
            repack_case(KT_TYPE_Q4_K, Ks, sizeof Ks / sizeof Ks[0]);
            assert_int_equal(kt__lf_set_q4k_avx512(was), k);
        }
#endif
}

static void test_repack_q6k(void **state)
{
    (void)state;
    static const int Ks[] = {2048, 768, 1280, 512, 256};
    repack_case(KT_TYPE_Q6_K, Ks, sizeof Ks / sizeof Ks[0]);
}

static void test_repack_q5k(void **state)
{
    (void)state;
    static const int Ks[] = {2048, 768, 1280, 512, 256};
    repack_case(KT_TYPE_Q5_K, Ks, sizeof Ks / sizeof Ks[0]);
}

static void test_repack_iq4nl(void **state)
{
    (void)state;
    static const int Ks[] = {2048, 768, 1472, 416, 160, 96, 32};
    repack_case(KT_TYPE_IQ4_NL, Ks, sizeof Ks / sizeof Ks[0]);
}

typedef struct layer_data {
    uint8_t *g[8], *u[8], *d[8];
    float *gf[8], *uf[8], *df[8];
} layer_data;

static float silu(float v)
{
    return v / (1.0f + expf(-v));
}

/* out[t] = sum_j w * down(silu(gate x) * up x) in double from dequantized weights */
static void moe_ref(const layer_data *L, int H, int I, int T, int k, const float *x,
                    const int32_t *ids, const float *w, float *out)
{
    float *h = malloc((size_t)I * sizeof(float));
    for (int t = 0; t < T; t++) {
        for (int c = 0; c < H; c++)
            out[t * H + c] = 0;
        for (int j = 0; j < k; j++) {
            int e = ids[t * k + j];
            for (int i = 0; i < I; i++) {
                double g = 0, u = 0;
                for (int c = 0; c < H; c++) {
                    g += (double)L->gf[e][(size_t)i * H + c] * x[t * H + c];
                    u += (double)L->uf[e][(size_t)i * H + c] * x[t * H + c];
                }
                h[i] = silu((float)g) * (float)u;
            }
            for (int c = 0; c < H; c++) {
                double s = 0;
                for (int i = 0; i < I; i++)
                    s += (double)L->df[e][(size_t)c * I + i] * h[i];
                out[t * H + c] += w[t * k + j] * (float)s;
            }
        }
    }
    free(h);
}

/* One layer of E experts, types (tg, tg, td), T tokens, at an ISA cap;
 * returns the relative RMS error vs the F32 reference. */
static int layer_max_tokens = 16; /* T above: chunked */
static int layer_pools = 0;        /* kt_moe_options.n_pools */
static uint64_t layer_pool_bytes;  /* kt_moe_info.pool_bytes of the last layer */

static double run_layer(kt_type tg, kt_type td, int T, uint64_t cap, int n_threads)
{
    enum { H = 512, I = 256, E = 6, K = 2 };
    layer_data L;
    const void *gp[E], *up[E], *dp[E];
    for (int e = 0; e < E; e++) {
        make_weights(tg, I, H, 0.2f, &L.g[e], &L.gf[e]);
        make_weights(tg, I, H, 0.2f, &L.u[e], &L.uf[e]);
        make_weights(td, H, I, 0.2f, &L.d[e], &L.df[e]);
        gp[e] = L.g[e];
        up[e] = L.u[e];
        dp[e] = L.d[e];
    }
    kt_moe_desc d = tst_moe_desc(KT_METHOD_LLAMAFILE, H, I, E, K);
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
    lw.gate = gp;
    lw.up = up;
    lw.down = dp;
    lw.gate_type = lw.up_type = tg;
    lw.down_type = td;
    kt_moe_options o = tst_moe_options(n_threads, layer_max_tokens);
    o.n_pools = layer_pools;
    kt__moe_set_isa_cap(cap);
    kt_moe_backend *moe = NULL;
    kt_status st = kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o);
    kt__moe_set_isa_cap(~UINT64_C(0));
    if (st < 0)
        fprintf(stderr, "%s\n", kt_last_error());
    assert_int_equal(st, KT_OK);
    float *x = malloc((size_t)T * H * sizeof(float));
    float *out = malloc((size_t)T * H * sizeof(float));
    float *ref = malloc((size_t)T * H * sizeof(float));
    int32_t *ids = malloc((size_t)T * K * sizeof(int32_t));
    float *w = malloc((size_t)T * K * sizeof(float));
    for (int i = 0; i < T * H; i++)
        x[i] = frand();
    for (int t = 0; t < T; t++) {
        ids[t * K] = (t * 7 + 1) % E;
        ids[t * K + 1] = (t * 3 + 2) % E == ids[t * K] ? (ids[t * K] + 1) % E : (t * 3 + 2) % E;
        w[t * K] = 0.7f;
        w[t * K + 1] = 0.3f;
    }
    int32_t n_tok = T;
    kt_moe_io io = tst_moe_io_f32(&n_tok, K, x, ids, w, out);
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
    kt_moe_info info = KT_MOE_INFO_INIT;
    assert_int_equal(kt_moe_backend_info(moe, &info), KT_OK);
    layer_pool_bytes = info.pool_bytes;
    moe_ref(&L, H, I, T, K, x, ids, w, ref);
    double num = 0, den = 0;
    for (int i = 0; i < T * H; i++) {
        num += (double)(out[i] - ref[i]) * (out[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    kt_moe_backend_free(moe);
    for (int e = 0; e < E; e++) {
        free(L.g[e]); free(L.u[e]); free(L.d[e]);
        free(L.gf[e]); free(L.uf[e]); free(L.df[e]);
    }
    free(x); free(out); free(ref); free(ids); free(w);
    return sqrt(num / den);
}

static void test_backend_types(void **state)
{
    (void)state;
    const uint64_t caps[3] = {0, KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C, ~UINT64_C(0)};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        kt_type t = all_types[ti];
        /* the F32 reference uses the exact activations: the error is the
         * partner's rounding of x and h (8 bits), none for float weights */
        /* Q8_K has one scale per 256 inputs (Q8_0: per 32): coarser rounding
         * of the activations' small values (1-2% measured) */
        double tol = kt__ggml_act_section(t) == KT__GGML_ACT_F32   ? 1e-5
                     : kt__ggml_act_section(t) == KT__GGML_ACT_Q8K ? 0.03
                                                                   : 0.02;
        for (int c = 0; c < 3; c++) {
            double err = run_layer(t, t, c == 2 ? 21 : 1, caps[c], 2);
            if (getenv("KT_TEST_VERBOSE"))
                fprintf(stderr, "%s cap %d: rel rms err %g\n", kt_type_name(t), c, err);
            if (err > tol) {
                fprintf(stderr, "%s cap %d: rel rms err %g > %g\n", kt_type_name(t), c, err,
                        tol);
                fail();
            }
        }
    }
}

/* The AVX2 set's cap where the CPU runs more (an AVX2-only machine runs that set at
 * every cap); 0: none to add. */
static uint64_t avx2_cap_extra(void)
{
    return kt__ggml_isa_best() > KT_GGML_AVX2 ? KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C : 0;
}

/* The benchmark types at token counts that take each AVX-512 path in one
 * chunk (tiles for few tokens per expert, the panel GEMM for many); on a CPU
 * above AVX2 also at the AVX2 cap (its decode tiles, one token's woven streams,
 * the panels on the quantizer's arrays), which only an AVX2 machine's best runs
 * otherwise. */
static void test_backend_tokens(void **state)
{
    (void)state;
    static const kt_type types[] = {KT_TYPE_Q4_0, KT_TYPE_Q8_0, KT_TYPE_Q4_K, KT_TYPE_Q6_K};
    static const int Ts[] = {1, 2, 3, 17, 128, 257};
    /* and, where the AMX set takes the prefill, the AVX-512 set's panels */
    const uint64_t caps[3] = {~UINT64_C(0), avx2_cap_extra(),
                              amx_tiles() ? ~(KT_ISA_AMX_TILE | KT_ISA_AMX_INT8) : 0};
    layer_max_tokens = 512;
    for (int c = 0; c < 3; c++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
                if (!caps[c] || (c == 1 && (Ts[i] == 3 || Ts[i] == 257))) /* AVX2: 1, 2, 17, 128 */
                    continue;
                /* Q8_K activations (one scale per 256 inputs): test_backend_types' 0.03 */
                double tol = kt__ggml_act_section(types[ti]) == KT__GGML_ACT_Q8K ? 0.03 : 0.02;
                uint64_t rng_before = rng; /* cap 2 leaves the later draws as they were */
                double err = run_layer(types[ti], types[ti], Ts[i], caps[c], 2);
                if (c == 2)
                    rng = rng_before;
                if (err > tol) {
                    fprintf(stderr, "%s T %d cap %d: rel rms err %g > %g\n",
                            kt_type_name(types[ti]), Ts[i], c, err, tol);
                    fail();
                }
            }
    layer_max_tokens = 16;
}

static void test_backend_mixed(void **state)
{
    (void)state;
    /* Q4_K_M: Q4_K gate/up, Q6_K down; Q8_0 with a K-type down; decode + prefill */
    assert_true(run_layer(KT_TYPE_Q4_K, KT_TYPE_Q6_K, 1, ~UINT64_C(0), 2) < 0.02);
    assert_true(run_layer(KT_TYPE_Q4_K, KT_TYPE_Q6_K, 37, ~UINT64_C(0), 2) < 0.02);
    assert_true(run_layer(KT_TYPE_Q8_0, KT_TYPE_Q5_K, 9, ~UINT64_C(0), 1) < 0.02);
    assert_true(run_layer(KT_TYPE_Q4_1, KT_TYPE_IQ4_NL, 5, 0, 2) < 0.02);
}

/* A layer of gate / up type tg, down td, T tokens, with its load-time repacks
 * (KT_LF_REPACK=1) and as stored (=0): the same error (its size is the draw's: Q4_K
 * 0.013-0.024); one pool's copies at least `least` bytes. */
static uint64_t repack_cap = ~UINT64_C(0); /* the ISA cap of repack_same_error's layers */

static void repack_same_error(kt_type tg, kt_type td, int T, int pools, uint64_t least)
{
    uint64_t rng1 = rng;
    setenv("KT_LF_REPACK", "0", 1);
    double err0 = run_layer(tg, td, T, repack_cap, 2);
    setenv("KT_LF_REPACK", "1", 1); /* every type's (the default) */
    rng = rng1;
    double err = run_layer(tg, td, T, repack_cap, 2);
    unsetenv("KT_LF_REPACK");
    if (err > 0.03 || fabs(err - err0) > 1e-3 * err0 ||
        (pools == 1 && layer_pool_bytes < least)) {
        fprintf(stderr, "%s / %s pools %d T %d: rel rms err %g (as stored %g), pool bytes "
                "%llu\n", kt__ggml_traits(tg)->name, kt__ggml_traits(td)->name, pools, T, err,
                err0, (unsigned long long)layer_pool_bytes);
        fail();
    }
}

/* The backend with its Q4_0, Q8_0 and Q4_K experts repacked (the AVX-512 and
 * AVX2 decodes' default): one pool (the repacks beside the matrices in place) and two
 * (each pool's slice copies and their repacks), decode and prefill (which reads
 * the rows), a Q4_0 gate / up with a Q8_0 down; KT_LF_REPACK=0 keeps the experts
 * in place, a list picks types; by default no repack beyond half of the memory
 * available. */
static void test_backend_repack(void **state)
{
    (void)state;
    if (kt__ggml_isa_best() < KT_GGML_AVX2)
        skip();
    static const int Ts[] = {1, 3, 17};
    /* 6 experts of gate, up [256][512] and down [512][256] Q4_0 */
    const uint64_t q40 = 6 * 3 * (uint64_t)kt__ggml_row_bytes(KT_TYPE_Q4_0, 512) * 256;
    const uint64_t q4k = 6 * 3 * (uint64_t)kt__ggml_row_bytes(KT_TYPE_Q4_K, 512) * 256;
    const uint64_t q80 = 6 * 3 * (uint64_t)kt__ggml_row_bytes(KT_TYPE_Q8_0, 512) * 256;
    const uint64_t q6k = 6 * 3 * (uint64_t)kt__ggml_row_bytes(KT_TYPE_Q6_K, 512) * 256;
    const uint64_t q5k = 6 * 3 * (uint64_t)kt__ggml_row_bytes(KT_TYPE_Q5_K, 512) * 256;
    const uint64_t nl = 6 * 3 * (uint64_t)kt__ggml_row_bytes(KT_TYPE_IQ4_NL, 512) * 256;
    for (int pools = 1; pools <= 2; pools++)
        for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
            layer_pools = pools;
            double err = run_layer(KT_TYPE_Q4_0, KT_TYPE_Q4_0, Ts[i], ~UINT64_C(0), 2);
            if (err > 0.02 || layer_pool_bytes < (pools == 1 ? q40 : 2 * q40)) {
                fprintf(stderr, "pools %d T %d: rel rms err %g, pool bytes %llu\n", pools,
                        Ts[i], err, (unsigned long long)layer_pool_bytes);
                fail();
            }
            /* Q4_0 + Q8_0; Q8_0; Q4_K: every matrix repacked with one pool; with
             * two, Q4_K's down slices of 128 inputs (not a multiple of 256) read as
             * stored */
            repack_same_error(KT_TYPE_Q4_0, KT_TYPE_Q8_0, Ts[i], pools, 0);
            repack_same_error(KT_TYPE_Q8_0, KT_TYPE_Q8_0, Ts[i], pools, q80);
            repack_same_error(KT_TYPE_Q4_K, KT_TYPE_Q4_K, Ts[i], pools, q4k);
            /* Q6_K (the AVX2 decode's; AVX-512: read as stored), alone and as Q4_K_M's
             * down; on a CPU above AVX2 at the AVX2 cap, one T a pool count */
            const uint64_t extra = avx2_cap_extra();
            if (kt__ggml_isa_best() == KT_GGML_AVX2 || (extra && Ts[i] == (pools == 1 ? 1 : 17))) {
                repack_cap = extra ? extra : ~UINT64_C(0);
                repack_same_error(KT_TYPE_Q6_K, KT_TYPE_Q6_K, Ts[i], pools, q6k);
                repack_same_error(KT_TYPE_Q4_K, KT_TYPE_Q6_K, Ts[i], pools,
                                  (2 * q4k + q6k) / 3);
                repack_same_error(KT_TYPE_IQ4_NL, KT_TYPE_IQ4_NL, Ts[i], pools, nl);
                /* Q5_K alone and as Q5_K_M's gate / up (with a Q6_K down) */
                repack_same_error(KT_TYPE_Q5_K, KT_TYPE_Q5_K, Ts[i], pools, q5k);
                repack_same_error(KT_TYPE_Q5_K, KT_TYPE_Q6_K, Ts[i], pools,
                                  (2 * q5k + q6k) / 3);
                repack_cap = ~UINT64_C(0);
            }
        }
    setenv("KT_LF_REPACK", "0", 1);
    layer_pools = 1;
    assert_true(run_layer(KT_TYPE_Q4_0, KT_TYPE_Q4_0, 1, ~UINT64_C(0), 2) < 0.02);
    assert_true(layer_pool_bytes == 0 || layer_pool_bytes == 64);
    setenv("KT_LF_REPACK", "q4_0", 1); /* Q4_0's only */
    assert_true(run_layer(KT_TYPE_Q4_K, KT_TYPE_Q8_0, 1, ~UINT64_C(0), 2) < 0.03);
    assert_true(layer_pool_bytes == 0 || layer_pool_bytes == 64);
    setenv("KT_LF_REPACK", "q4_0,q4_K,q8_0", 1); /* the types before Q5_K's, Q6_K's, IQ4_NL's */
    assert_true(run_layer(KT_TYPE_Q6_K, KT_TYPE_Q6_K, 1, ~UINT64_C(0), 2) < 0.03);
    assert_true(layer_pool_bytes == 0 || layer_pool_bytes == 64);
    assert_true(run_layer(KT_TYPE_IQ4_NL, KT_TYPE_IQ4_NL, 1, ~UINT64_C(0), 2) < 0.03);
    assert_true(layer_pool_bytes == 0 || layer_pool_bytes == 64);
    assert_true(run_layer(KT_TYPE_Q5_K, KT_TYPE_Q5_K, 1, ~UINT64_C(0), 2) < 0.03);
    assert_true(layer_pool_bytes == 0 || layer_pool_bytes == 64);
    setenv("KT_LF_REPACK", "q4_K,q6_K", 1); /* not Q5_K's */
    assert_true(run_layer(KT_TYPE_Q5_K, KT_TYPE_Q6_K, 1, ~UINT64_C(0), 2) < 0.03);
    if (kt__ggml_isa_best() == KT_GGML_AVX2) /* the Q6_K down's only */
        assert_true(layer_pool_bytes >= q6k / 3 && layer_pool_bytes < q6k / 3 + q5k / 3);
    unsetenv("KT_LF_REPACK"); /* by default Q8_0's too */
    assert_true(run_layer(KT_TYPE_Q8_0, KT_TYPE_Q8_0, 1, ~UINT64_C(0), 2) < 0.03);
    assert_true(layer_pool_bytes >= q80);
    /* by default not where the copies would take more than half of the memory
     * available (1 MiB here), unless asked for */
    setenv("KT_LF_MEM_AVAILABLE", "1048576", 1);
    assert_true(run_layer(KT_TYPE_Q8_0, KT_TYPE_Q8_0, 1, ~UINT64_C(0), 2) < 0.03);
    assert_true(layer_pool_bytes == 0 || layer_pool_bytes == 64);
    setenv("KT_LF_REPACK", "1", 1);
    assert_true(run_layer(KT_TYPE_Q8_0, KT_TYPE_Q8_0, 1, ~UINT64_C(0), 2) < 0.03);
    assert_true(layer_pool_bytes >= q80);
    unsetenv("KT_LF_REPACK");
    unsetenv("KT_LF_MEM_AVAILABLE");
    layer_pools = 0;
}

/* The vector quantizers of each set this CPU runs (Q8_0 / Q8_1 / Q8_K blocks and
 * what the sets make from them) write the scalar reference's bytes: random scales
 * from 1e-30 to 1e4, zero blocks of 32 and of 256, codes on exact halves (amax 127:
 * x * 127 / amax = x), ties of +-max; rows of 256 to 2816 inputs written in ragged
 * pieces (multiples of 32, a Q8_K block completed by its last piece) as phase 1
 * does. The reference: AVX-512 against the scalar set (neither writes the AVX2
 * decode's Q6KX biases); AVX2 against itself with KT_LF_QUANT=scalar (its scalar
 * quantizers, and the biases from them). */
static void quant_exact(int level)
{
    const unsigned mask = KT__GGML_ACT_Q80 | KT__GGML_ACT_Q81 | KT__GGML_ACT_Q8K;
    const kt__moe_kernels *ref = kt__moe_llamafile_kernels(level == 1 ? 1 : 0, mask);
    const kt__moe_kernels *vec = kt__moe_llamafile_kernels(level, mask);
    const int Ks[] = {256, 768, 1024, 2816};
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
        const int K = Ks[ki];
        size_t rowb = kt__moe_act_row_bytes(ref->act, K);
        assert_int_equal(rowb, kt__moe_act_row_bytes(vec->act, K));
        uint8_t *a = calloc(1, rowb), *b = calloc(1, rowb);
        float *x = malloc((size_t)K * sizeof(float));
        for (int trial = 0; trial < 100; trial++) {
            for (int k = 0; k < K; k++) {
                int blk = k / 32;
                float scale = powf(10.0f, (float)((trial * 7 + blk * 13) % 35) - 30.0f);
                if ((trial + blk) % 9 == 0 || (trial % 4 == 1 && k / 256 == trial % (K / 256)))
                    x[k] = 0.0f;
                else if ((trial + blk) % 5 == 0) /* halves: amax 127 */
                    x[k] = k % 32 == 0 ? 127.0f : (float)((k * 37 + trial) % 254 - 127) * 0.5f;
                else
                    x[k] = frand() * scale;
            }
            if (trial % 3 == 0) /* a tie of magnitudes: the first one's sign wins */
                x[(trial * 11) % K] = -(x[(trial * 11 + 40) % K] = 1e5f);
            int vec_before = kt__lf_set_quant_avx2(0);
            for (int k0 = 0, n = 0; k0 < K; k0 += 32 * n) {
                n = 1 + (trial + k0 / 32) % 7; /* pieces of 32 to 224 inputs */
                int k1 = k0 + 32 * n < K ? k0 + 32 * n : K;
                ref->quant(x, k0, k1, K, a);
            }
            kt__lf_set_quant_avx2(1);
            for (int k0 = 0, n = 0; k0 < K; k0 += 32 * n) {
                n = 1 + (trial * 3 + k0 / 32) % 5;
                int k1 = k0 + 32 * n < K ? k0 + 32 * n : K;
                vec->quant(x, k0, k1, K, b);
            }
            kt__lf_set_quant_avx2(vec_before);
            if (memcmp(a, b, rowb)) {
                for (size_t i = 0; i < rowb; i++)
                    if (a[i] != b[i]) {
                        fprintf(stderr, "K %d trial %d: byte %zu: %s %u, %s %u\n", K, trial, i,
                                level == 1 ? "scalar quantizers" : "scalar set", a[i],
                                vec->name, b[i]);
                        break;
                    }
                fail();
            }
        }
        free(a);
        free(b);
        free(x);
    }
}

static void test_quant_exact(void **state)
{
    (void)state;
    if (kt__ggml_isa_best() < KT_GGML_AVX2)
        skip();
    quant_exact(1);
    if (kt__ggml_isa_best() >= KT_GGML_AVX512)
        quant_exact(2);
}

static void test_bad_types(void **state)
{
    (void)state;
    uint8_t buf[4096] = {0};
    const void *p[1] = {buf};
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = KT_METHOD_LLAMAFILE;
    d.hidden = 64;  /* not a multiple of 256 */
    d.intermediate = 32;
    d.n_experts = 1;
    d.top_k = 1;
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
    lw.gate = lw.up = lw.down = p;
    kt_moe_backend *moe = NULL;
    /* types left unset */
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &d, &lw, 1, NULL), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "gate_type"));
    lw.gate_type = lw.up_type = KT_TYPE_Q4_K;
    lw.down_type = KT_TYPE_Q8_0;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &d, &lw, 1, NULL), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "Q4_K"));
    lw.gate_type = lw.up_type = KT_TYPE_Q8_K; /* activation-only type */
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &d, &lw, 1, NULL), KT_ERR_INVALID_ARG);
    assert_null(moe);
}

/* ---- GGUFs written by kt_convert from the fixtures, run by the engine ---- */

static char tmp_root[] = "/tmp/kt_llamafile_XXXXXX";

static kt_status to_gguf(const char *model_dir, kt_type type, const char *out,
                         kt_convert_report *rep)
{
    kt_convert_options co = KT_CONVERT_OPTIONS_INIT;
    co.method = KT_METHOD_LLAMAFILE;
    co.gguf_type = type;
    co.n_threads = 2;
    return kt_convert(NULL, model_dir, out, &co, rep);
}

/* Logits of tokens 1..T over the model, experts from weight_path (NULL: BF16). */
static kt_status logits_of(const kt_model *m, const char *weight_path, int method, float *out,
                           int T)
{
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = 64;
    co.n_threads = 2;
    /* the reference: the engine's own F32 experts */
    co.precision = weight_path || method ? KT_PRECISION_FAST : KT_PRECISION_F32;
    co.weight_path = weight_path;
    co.method = method;
    kt_context *ctx = NULL;
    kt_status st = kt_context_create(&ctx, NULL, m, &co);
    if (st < 0)
        return st;
    int32_t toks[32];
    for (int t = 0; t < T; t++)
        toks[t] = 1 + (t * 37) % 200;
    assert_int_equal(kt_context_expert_method(ctx),
                     weight_path ? KT_METHOD_LLAMAFILE : kt_context_expert_method(ctx));
    st = kt_context_eval(ctx, toks, (size_t)T, out, KT_EVAL_ALL_LOGITS);
    kt_context_free(ctx);
    return st;
}

static void test_fixture_ggufs(void **state)
{
    (void)state;
    const char *d = getenv("KT_TEST_DATA");
    const char *fixtures[] = {"qwen3_moe_tiny", "deepseek_v3_tiny", "mixtral_tiny",
                              "minimax_m2_tiny"};
    /* relative L2 of all prompt logits vs the engine's F32 experts; the weights'
     * own relative RMS error is ~0.005 (Q8_0; Q6_K falls back to Q8_0 for rows
     * of 64), ~0.04 (Q5_0: Q4_K's fallback), ~0.09 (Q4_0); the activations'
     * Q8 rounding and flipped near-tied routing add to it */
    const struct { kt_type type; double tol; } types[] = {
        {KT_TYPE_F32, 1e-3}, {KT_TYPE_BF16, 1e-3}, {KT_TYPE_F16, 1e-3}, {KT_TYPE_Q8_0, 0.02},
        {KT_TYPE_Q6_K, 0.02}, {KT_TYPE_Q4_K, 0.08}, {KT_TYPE_Q4_0, 0.25}};
    assert_non_null(mkdtemp(tmp_root));
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/fixtures/%s/bf16/config.json", d ? d : "tests/data",
                 fixtures[f]);
        FILE *probe = fopen(dir, "r");
        if (probe)
            fclose(probe);
        snprintf(dir, sizeof dir, "%s/fixtures/%s%s", d ? d : "tests/data", fixtures[f],
                 probe ? "/bf16" : "");
        kt_model *m = NULL;
        if (kt_model_open(&m, NULL, dir, NULL) < 0) {
            fprintf(stderr, "%s\n", kt_last_error());
            fail();
        }
        enum { T = 12 };
        int V = 0;
        {
            kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
            kt_context *c = NULL;
            co.n_ctx = 16;
            assert_int_equal(kt_context_create(&c, NULL, m, &co), KT_OK);
            V = kt_context_n_vocab(c);
            kt_context_free(c);
        }
        float *ref = malloc((size_t)T * V * sizeof(float));
        float *got = malloc((size_t)T * V * sizeof(float));
        assert_int_equal(logits_of(m, NULL, KT_METHOD_NONE, ref, T), KT_OK);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            char out[4200];
            snprintf(out, sizeof out, "%s/%s-%s.gguf", tmp_root, fixtures[f],
                     kt_type_name(types[ti].type));
            kt_convert_report rep = KT_CONVERT_REPORT_INIT;
            kt_status st = to_gguf(dir, types[ti].type, out, &rep);
            if (st < 0)
                fprintf(stderr, "%s\n", kt_last_error());
            assert_int_equal(st, KT_OK);
            assert_true(rep.n_layers >= 1);
            st = logits_of(m, out, KT_METHOD_LLAMAFILE, got, T);
            if (st < 0)
                fprintf(stderr, "%s\n", kt_last_error());
            assert_int_equal(st, KT_OK);
            /* per token; the median keeps one flipped near-tie of a router
             * (a different expert: a large change) from deciding */
            double tok[T];
            for (int t = 0; t < T; t++) {
                double num = 0, den = 0;
                for (int i = t * V; i < (t + 1) * V; i++) {
                    num += (double)(got[i] - ref[i]) * (got[i] - ref[i]);
                    den += (double)ref[i] * ref[i];
                }
                tok[t] = sqrt(num / den);
            }
            for (int a = 0; a < T; a++)
                for (int b = a + 1; b < T; b++)
                    if (tok[b] < tok[a]) {
                        double x = tok[a];
                        tok[a] = tok[b];
                        tok[b] = x;
                    }
            double rel = tok[T / 2];
            fprintf(stderr,
                    "  %-18s %-5s weights rel rms %.4f, logits rel L2 median %.4f max %.4f\n",
                    fixtures[f], kt_type_name(types[ti].type), rep.max_rel_rms, rel,
                    tok[T - 1]);
            assert_true(rel < types[ti].tol);
        }
        {
            /* the same experts as one 2-D tensor per expert (older converters'
             * layout): the same logits */
            char src[4200], dst[4200];
            snprintf(src, sizeof src, "%s/%s-Q8_0.gguf", tmp_root, fixtures[f]);
            snprintf(dst, sizeof dst, "%s/%s-per-expert.gguf", tmp_root, fixtures[f]);
            kt_gguf *g = NULL;
            assert_int_equal(kt__gguf_open_file(&g, src), KT_OK);
            kt_gguf_writer *w = NULL;
            assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
            char names[3 * 64][96]; /* blk.L.ffn_PROJ.E.weight, PROJ up to 31 */
            int nn = 0;
            for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
                const kt_gguf_tensor *t = kt__gguf_tensor_at(g, i);
                int l = 0;
                char proj[32];
                assert_int_equal(sscanf(t->name, "blk.%d.ffn_%31[a-z]_exps", &l, proj), 2);
                size_t per = (size_t)(t->nbytes / t->ne[2]);
                for (uint64_t e = 0; e < t->ne[2]; e++) {
                    assert_true(nn < 3 * 64);
                    snprintf(names[nn], sizeof names[nn], "blk.%d.ffn_%s.%llu.weight", l, proj,
                             (unsigned long long)e);
                    assert_int_equal(kt__gguf_writer_add_tensor(w, names[nn], t->ggml_type, 2,
                                                                t->ne,
                                                                (const uint8_t *)t->data +
                                                                    e * per),
                                     KT_OK);
                    nn++;
                }
            }
            assert_int_equal(kt__gguf_writer_write_file(w, dst), KT_OK);
            kt__gguf_writer_free(w);
            kt__gguf_close(g);
            float *a = malloc((size_t)T * V * sizeof(float));
            float *b = malloc((size_t)T * V * sizeof(float));
            assert_int_equal(logits_of(m, src, KT_METHOD_LLAMAFILE, a, T), KT_OK);
            assert_int_equal(logits_of(m, dst, KT_METHOD_NONE, b, T), KT_OK);
            assert_memory_equal(a, b, (size_t)T * V * sizeof(float));
            free(a);
            free(b);
        }
        if (f == 0) {
            /* kt_moe_backend_create_from_gguf: shapes from the file, the file's
             * layer numbers, the same output as the layer built by hand */
            char src[4200];
            snprintf(src, sizeof src, "%s/%s-Q8_0.gguf", tmp_root, fixtures[f]);
            kt_moe_backend *moe = NULL;
            assert_int_equal(kt_moe_backend_create_from_gguf(&moe, NULL, src, 2, NULL), KT_OK);
            kt_moe_info info = KT_MOE_INFO_INIT;
            assert_int_equal(kt_moe_backend_info(moe, &info), KT_OK);
            assert_int_equal(info.hidden, 64);
            assert_int_equal(info.intermediate, 96);
            assert_int_equal(info.n_experts, 8);
            assert_int_equal(info.method, KT_METHOD_LLAMAFILE);
            kt_gguf *g = NULL;
            assert_int_equal(kt__gguf_open_file(&g, src), KT_OK);
            const kt_gguf_tensor *t[3] = {kt__gguf_find_tensor(g, "blk.1.ffn_gate_exps.weight"),
                                          kt__gguf_find_tensor(g, "blk.1.ffn_up_exps.weight"),
                                          kt__gguf_find_tensor(g, "blk.1.ffn_down_exps.weight")};
            const void *pp[3][8];
            for (int p = 0; p < 3; p++)
                for (int e = 0; e < 8; e++)
                    pp[p][e] = (const uint8_t *)t[p]->data + e * (t[p]->nbytes / 8);
            kt_moe_desc dd = tst_moe_desc(KT_METHOD_LLAMAFILE, 64, 96, 8, 2);
            kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
            lw.gate = pp[0], lw.up = pp[1], lw.down = pp[2];
            lw.gate_type = lw.up_type = lw.down_type = KT_TYPE_Q8_0;
            kt_moe_backend *hand = NULL;
            assert_int_equal(kt_moe_backend_create(&hand, NULL, &dd, &lw, 1, NULL), KT_OK);
            float x[3 * 64], o1[3 * 64], o2[3 * 64], wts[6] = {0.6f, 0.4f, 0.5f, 0.5f, 1, 0};
            int32_t ids[6] = {0, 3, 7, 1, 2, 5}, n3 = 3;
            for (int i = 0; i < 3 * 64; i++)
                x[i] = frand();
            kt_moe_io io = tst_moe_io_f32(&n3, 2, x, ids, wts, o1);
            assert_int_equal(kt_moe_forward(moe, 1, &io), KT_OK);
            io.out = o2;
            assert_int_equal(kt_moe_forward(hand, 0, &io), KT_OK);
            assert_memory_equal(o1, o2, sizeof o1);
            assert_int_equal(kt_moe_forward(moe, 2, &io), KT_ERR_INVALID_ARG);
            kt_moe_backend_free(hand);
            kt_moe_backend_free(moe);
            kt__gguf_close(g);
            /* not a GGUF of experts */
            snprintf(src, sizeof src, "%s/config.json", dir);
            assert_true(kt_moe_backend_create_from_gguf(&moe, NULL, src, 2, NULL) < 0);
            assert_null(moe);
        }
        /* a method that does not read GGUF */
        char out[4200];
        snprintf(out, sizeof out, "%s/%s-Q8_0.gguf", tmp_root, fixtures[f]);
        assert_int_equal(logits_of(m, out, KT_METHOD_AMXINT8, got, 2), KT_ERR_INVALID_ARG);
        assert_non_null(strstr(kt_last_error(), "LLAMAFILE"));
        /* LLAMAFILE without a file */
        assert_int_equal(logits_of(m, NULL, KT_METHOD_LLAMAFILE, got, 2), KT_ERR_INVALID_ARG);
        free(ref);
        free(got);
        kt_model_free(m);
    }
    {
        /* another model's experts (hidden 64; MiniMax-M2's is 128): an error
         * naming the file and the tensor */
        char dir[4096], out[4200];
        float logits[512 * 2];
        snprintf(dir, sizeof dir, "%s/fixtures/minimax_m2_tiny/bf16", d ? d : "tests/data");
        snprintf(out, sizeof out, "%s/qwen3_moe_tiny-Q8_0.gguf", tmp_root);
        kt_model *m = NULL;
        assert_int_equal(kt_model_open(&m, NULL, dir, NULL), KT_OK);
        assert_int_equal(logits_of(m, out, KT_METHOD_LLAMAFILE, logits, 1), KT_ERR_FORMAT);
        assert_non_null(strstr(kt_last_error(), out));
        assert_non_null(strstr(kt_last_error(), "blk.0.ffn_gate_exps.weight"));
        kt_model_free(m);
    }
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    assert_int_equal(system(cmd), 0);
}

/* ---- tokenizer.ggml.* metadata ------------------------------------------- */

/* A GGUF holding only the tokenizer of a tokenizer.json, as llama.cpp's
 * converter writes it (tokens by id, token_type 3 for special added tokens,
 * merges as "a b", pre). */
static void write_tokenizer_gguf(const char *json_path, const char *pre, const char *out)
{
    FILE *f = fopen(json_path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(buf);
    assert_non_null(root);
    cJSON *model = cJSON_GetObjectItem(root, "model");
    cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    cJSON *merges = cJSON_GetObjectItem(model, "merges");
    cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
    int V = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, vocab) V = (int)it->valuedouble + 1 > V ? (int)it->valuedouble + 1 : V;
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItem(it, "id")->valueint;
        V = id + 1 > V ? id + 1 : V;
    }
    const char **toks = calloc((size_t)V, sizeof *toks);
    int32_t *types = calloc((size_t)V, sizeof *types);
    cJSON_ArrayForEach(it, vocab) {
        toks[(int)it->valuedouble] = it->string;
        types[(int)it->valuedouble] = 1;
    }
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItem(it, "id")->valueint;
        toks[id] = cJSON_GetObjectItem(it, "content")->valuestring;
        types[id] = cJSON_IsTrue(cJSON_GetObjectItem(it, "special")) ? 3 : 4;
    }
    for (int i = 0; i < V; i++)
        if (!toks[i])
            toks[i] = "[PAD]", types[i] = 5;
    int nm = cJSON_GetArraySize(merges);
    char **ms = calloc((size_t)nm, sizeof *ms);
    for (int i = 0; i < nm; i++) {
        cJSON *m = cJSON_GetArrayItem(merges, i);
        if (cJSON_IsString(m)) {
            ms[i] = strdup(m->valuestring);
        } else {
            const char *a = cJSON_GetArrayItem(m, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(m, 1)->valuestring;
            ms[i] = malloc(strlen(a) + strlen(b) + 2);
            sprintf(ms[i], "%s %s", a, b);
        }
    }
    kt_gguf_writer *w = NULL;
    assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
    assert_int_equal(kt__gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2"), KT_OK);
    assert_int_equal(kt__gguf_writer_add_str(w, "tokenizer.ggml.pre", pre), KT_OK);
    assert_int_equal(kt__gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, V), KT_OK);
    assert_int_equal(kt__gguf_writer_add_str_array(w, "tokenizer.ggml.merges",
                                                   (const char *const *)ms, nm), KT_OK);
    kt_gguf_value tv;
    memset(&tv, 0, sizeof tv);
    tv.type = KT_GGUF_ARRAY;
    tv.v.arr.elem = KT_GGUF_I32;
    tv.v.arr.n = (uint64_t)V;
    tv.v.arr.data = types;
    assert_int_equal(kt__gguf_writer_add(w, "tokenizer.ggml.token_type", &tv), KT_OK);
    assert_int_equal(kt__gguf_writer_write_file(w, out), KT_OK);
    kt__gguf_writer_free(w);
    for (int i = 0; i < nm; i++)
        free(ms[i]);
    free(ms);
    free(toks);
    free(types);
    cJSON_Delete(root);
    free(buf);
}

static void test_gguf_tokenizer(void **state)
{
    (void)state;
    const char *d = getenv("KT_TEST_DATA");
    const char *models[2][2] = {{"qwen3_moe_demo", "qwen2"}, {"kimi_k2_demo", "kimi-k2"}};
    const char *texts[] = {
        "The json module can be used to encode and decode JSON data.",
        "def f(x):\n    return x ** 2  # 12345 numbers, CamelCase and  spaces\n\n",
        "KTransformers \xe6\x98\xaf\xe4\xb8\x80\xe4\xb8\xaa\xe6\xa1\x86\xe6\x9e\xb6 "
        "(\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xe3\x81\x8b\xe3\x81\xaa) caf\xc3\xa9!",
    };
    char tmp[] = "/tmp/kt_lf_tok_XXXXXX";
    assert_non_null(mkdtemp(tmp));
    for (int mi = 0; mi < 2; mi++) {
        char json[4096], gguf[4200];
        snprintf(json, sizeof json, "%s/models/%s/tokenizer.json", d ? d : "tests/data",
                 models[mi][0]);
        snprintf(gguf, sizeof gguf, "%s/%s.gguf", tmp, models[mi][0]);
        write_tokenizer_gguf(json, models[mi][1], gguf);
        kt_tokenizer *ref = NULL, *tok = NULL;
        assert_int_equal(kt_tokenizer_open(&ref, json, NULL), KT_OK);
        kt_status st = kt_tokenizer_open(&tok, gguf, NULL);
        if (st < 0)
            fprintf(stderr, "%s\n", kt_last_error());
        assert_int_equal(st, KT_OK);
        assert_int_equal(kt_tokenizer_vocab_size(tok), kt_tokenizer_vocab_size(ref));
        for (size_t ti = 0; ti < sizeof texts / sizeof texts[0]; ti++) {
            int32_t a[256], b[256];
            size_t na = 0, nb = 0;
            assert_int_equal(kt_tokenizer_encode(ref, texts[ti], strlen(texts[ti]), 0, a, 256,
                                                 &na), KT_OK);
            assert_int_equal(kt_tokenizer_encode(tok, texts[ti], strlen(texts[ti]), 0, b, 256,
                                                 &nb), KT_OK);
            assert_int_equal(na, nb);
            assert_memory_equal(a, b, na * sizeof(int32_t));
        }
        kt_tokenizer_free(ref);
        kt_tokenizer_free(tok);
    }
    /* an unknown pre-tokenizer and a SentencePiece vocabulary: clear errors */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad.gguf", tmp);
    kt_gguf_writer *w = NULL;
    assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
    assert_int_equal(kt__gguf_writer_add_str(w, "tokenizer.ggml.model", "llama"), KT_OK);
    assert_int_equal(kt__gguf_writer_write_file(w, bad), KT_OK);
    kt__gguf_writer_free(w);
    kt_tokenizer *tok = NULL;
    assert_int_equal(kt_tokenizer_open(&tok, bad, NULL), KT_ERR_UNSUPPORTED);
    assert_non_null(strstr(kt_last_error(), "llama"));
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_repack_q40),
        cmocka_unit_test(test_repack_q80),
        cmocka_unit_test(test_repack_q4k),
        cmocka_unit_test(test_repack_q6k),
        cmocka_unit_test(test_repack_q5k),
        cmocka_unit_test(test_repack_iq4nl),
        cmocka_unit_test(test_repack_streams),
        cmocka_unit_test(test_backend_types),
        cmocka_unit_test(test_backend_tokens),
        cmocka_unit_test(test_backend_mixed),
        cmocka_unit_test(test_backend_repack),
        cmocka_unit_test(test_amx_prefill),
        cmocka_unit_test(test_panel_q6k),
        cmocka_unit_test(test_panel_q5k),
        cmocka_unit_test(test_panel_iq4nl),
        cmocka_unit_test(test_panel_iq4xs),
        cmocka_unit_test(test_panel_q3k),
        cmocka_unit_test(test_panel_q2k),
        cmocka_unit_test(test_panel_q50),
        cmocka_unit_test(test_panel_q41),
        cmocka_unit_test(test_panel_q51),
        cmocka_unit_test(test_quant_exact),
        cmocka_unit_test(test_bad_types),
        cmocka_unit_test(test_fixture_ggufs),
        cmocka_unit_test(test_gguf_tokenizer),
    };
    /* KT_TEST_FILTER=test_panel_*: a subset (sanitizer builds are slow) */
    const char *filter = getenv("KT_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
