/*
 * AVX-512 MoE kernels for KT_MOE_PREC_BF16X2 (compiled with the AVX-512 BF16
 * flags; run only when kt_hw_isa() reports them).
 *
 * Activations are split x = hi + lo, both BF16 (hi = bf16(x), lo = bf16(x - hi):
 * |x - hi - lo| <= 2^-17 |x|). Every weight is turned into an exact BF16 number
 * (BF16 as is; E4M3 through byte tables; INT4 nibble - 8; INT8), so each
 * vdpbf16ps product is exact and the sums run in F32:
 *
 *     C[m][n] = sum_blocks s[n][b] * sum_{k in b} w[n][k] (hi_m[k] + lo_m[k])
 *
 * with the FP8 128x128 / INT4 per-group (32, 64 or 128: W->group) scales
 * applied in F32 to the exact block sums, and the AMXINT8 per-row scale to the
 * whole dot product.
 *
 * Shape: from 4 tokens, weights are decoded 4 rows x KC_X2 inputs at a time
 * into an L1 chunk (BF16 weights are read in place) and every token of the
 * call runs against the chunk, MR tokens per register tile. Up to 3 tokens
 * (decode), BF16 / FP8 / INT4 rows are read start to end and decoded in
 * registers.
 */
#include <unistd.h>

#include "moe_avx512_common.h"

#define KC_X2 1024 /* inputs per decoded chunk: 4 rows x 2 KiB, a multiple of 128 */

static inline int pad64(int K)
{
    return (K + 63) & ~63;
}

/* The hi half of activation row m (BF16X2). */
static inline const uint16_t *arow16(const void *A, size_t stride, const int32_t *rows, int m)
{
    return arow(A, stride, rows, m);
}

/* ---- activations: [K] f32 -> hi [Kp] BF16, lo [Kp] BF16 ------------------ */

static void quant_x2(const float *x, int k0, int k1, int K, void *row)
{
    uint16_t *hi = row, *lo = hi + pad64(K);
    int k = k0;
    for (; k + 16 <= k1; k += 16) {
        /* hi = bf16(x), lo = bf16(x - hi) */
        __m512 v = _mm512_loadu_ps(x + k);
        __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
        __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        __m256i l = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf));
        _mm256_storeu_si256((__m256i *)(hi + k), h);
        _mm256_storeu_si256((__m256i *)(lo + k), l);
    }
    for (; k < k1; k++) {
        hi[k] = kt__moe_f32_bf16(x[k]);
        lo[k] = kt__moe_f32_bf16(x[k] - kt__moe_bf16_f32(hi[k]));
    }
}

/* ---- register tiles ------------------------------------------------------- */

/* out[m * 4 + r] = sum_{k < kn} w_r[k] (hi_m[k] + lo_m[k]), 4 rows x MR (<= 6)
 * tokens; lo_m = hi_m + lo_off. pf: prefetch distance in bytes (0: none). */
ALWAYS_INLINE void tile_x2(const uint16_t *const *w, const uint16_t *const *a, size_t lo_off,
                           const int MR, int kn, size_t pf, float *out)
{
    __m512 acc[6][4];
    #pragma GCC unroll 6
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm512_setzero_ps();
    /* hot loop: 4 weight vectors x MR tokens x (hi, lo) per 32 inputs */
    for (int k = 0; k < kn; k += 32) {
        __mmask32 msk = tail32(kn - k);
        __m512bh v[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (pf)
                _mm_prefetch((const char *)(w[r] + k) + pf, _MM_HINT_T1);
            v[r] = (__m512bh)_mm512_maskz_loadu_epi16(msk, w[r] + k);
        }
        #pragma GCC unroll 6
        for (int m = 0; m < MR; m++) {
            __m512bh xh = (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + k);
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_dpbf16_ps(acc[m][r], v[r], xh);
            __m512bh xl = (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + lo_off + k);
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_dpbf16_ps(acc[m][r], v[r], xl);
        }
    }
    #pragma GCC unroll 6
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4, hsum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
}

/* The same over blocks of B inputs (B a multiple of 32), each block's exact
 * sum scaled by bsc[r][b] in F32; MR <= 3 (block and total accumulators). */
ALWAYS_INLINE void tile_x2_blocks(const uint16_t *const *w, const uint16_t *const *a,
                                  size_t lo_off, const int MR, int kn, int B,
                                  const float (*bsc)[KC_X2 / 32], float *out)
{
    __m512 tot[3][4];
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            tot[m][r] = _mm512_setzero_ps();
    for (int kb = 0, b = 0; kb < kn; kb += B, b++) {
        int ke = imin(kb + B, kn);
        __m512 blk[3][4];
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                blk[m][r] = _mm512_setzero_ps();
        /* hot loop: 4 weight vectors x MR tokens x (hi, lo) per 32 inputs */
        for (int k = kb; k < ke; k += 32) {
            __mmask32 msk = tail32(ke - k);
            __m512bh v[4];
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                v[r] = (__m512bh)_mm512_maskz_loadu_epi16(msk, w[r] + k);
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++) {
                __m512bh xh = (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + k);
                __m512bh xl = (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + lo_off + k);
                #pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
                    blk[m][r] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(blk[m][r], v[r], xh), v[r],
                                                 xl);
            }
        }
        /* tot += s[r][b] * block sum */
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512 s = _mm512_set1_ps(bsc[r][b]);
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                tot[m][r] = _mm512_fmadd_ps(blk[m][r], s, tot[m][r]);
        }
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4, hsum4(tot[m][0], tot[m][1], tot[m][2], tot[m][3]));
}

/* ---- weight decoders: 4 rows x kn inputs from kc -> exact BF16 ------------ */

typedef struct x2_chunk {
    uint16_t deq[4][KC_X2];    /* [4 rows][KC_X2] decoded weights, unscaled      */
    float bsc[4][KC_X2 / 32];  /* [4 rows][blocks] block scales (FP8, INT4)     */
    float rsc[4];              /* row scales (AMXINT8)                           */
} x2_chunk;

/* Returns the scale block length B (0: no block scales). Rows >= nr are
 * copies of row nr - 1. */
typedef int (*x2_fill_fn)(const kt__wmat *W, int n, int nr, int kc, int kn, x2_chunk *ch);

/* FP8: 64 bytes at a time, BF16 high bytes (| sign) and low bytes from the
 * tables, interleaved back into input order; scale per 128 x 128 block. */
static int fill_fp8(const kt__wmat *W, int n, int nr, int kc, int kn, x2_chunk *ch)
{
    const lut8 L = lut_load();
    /* word j of the first half: low byte lo[j], high byte hi[j] (j < 32); second: j + 32 */
    uint8_t ia[64], ib[64];
    for (int j = 0; j < 32; j++) {
        ia[2 * j] = (uint8_t)j;
        ia[2 * j + 1] = (uint8_t)(64 + j);
        ib[2 * j] = (uint8_t)(32 + j);
        ib[2 * j + 1] = (uint8_t)(96 + j);
    }
    const __m512i idx_a = _mm512_loadu_si512(ia), idx_b = _mm512_loadu_si512(ib);
    int cols = W->cols, cb = (cols + 127) / 128;
    const float *sc = W->scale;
    for (int r = 0; r < 4; r++) {
        int row = n + imin(r, nr - 1);
        const uint8_t *src = (const uint8_t *)W->w + (size_t)row * cols + kc;
        for (int k = 0; k < kn; k += 64) {
            _mm_prefetch((const char *)(src + k) + 4 * (size_t)cols, _MM_HINT_T1);
            __m512i v = _mm512_maskz_loadu_epi8(tail64(kn - k), src + k);
            __m512i hi = _mm512_permutex2var_epi8(L.h0, v, L.h1);
            __m512i lo = _mm512_permutex2var_epi8(L.l0, v, L.l1);
            hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0xF8);
            _mm512_storeu_si512(ch->deq[r] + k, _mm512_permutex2var_epi8(lo, idx_a, hi));
            _mm512_storeu_si512(ch->deq[r] + k + 32, _mm512_permutex2var_epi8(lo, idx_b, hi));
        }
        for (int b = 0; b * 128 < kn; b++)
            ch->bsc[r][b] = sc[(size_t)(row / 128) * cb + (kc + b * 128) / 128];
    }
    return 128;
}

/* RAWINT4 / AMXINT4: 16 bytes = 32 inputs (the even one in the low nibble) ->
 * 32 BF16 of nibble - 8 through a 16-entry table; scale per W->group (0: 32)
 * inputs (kc a multiple of it). */
static int fill_int4(const kt__wmat *W, int n, int nr, int kc, int kn, x2_chunk *ch)
{
    uint16_t tab[32];
    for (int i = 0; i < 32; i++)
        tab[i] = kt__moe_f32_bf16((float)((i & 15) - 8));
    const __m512i table = _mm512_loadu_si512(tab), m4 = _mm512_set1_epi32(0xf);
    int G = W->group ? W->group : 32;
    size_t rb = (size_t)W->cols / 2, sb = (size_t)(W->cols / G);
    for (int r = 0; r < 4; r++) {
        int row = n + imin(r, nr - 1);
        const uint8_t *src = (const uint8_t *)W->w + (size_t)row * rb + kc / 2;
        const uint16_t *srow = (const uint16_t *)W->scale + (size_t)row * sb + kc / G;
        for (int k = 0; k < kn; k += 32) {
            if (k % 128 == 0)
                _mm_prefetch((const char *)(src + k / 2) + 4 * rb, _MM_HINT_T1);
            /* dword j = byte j -> words (low nibble, high nibble) -> table */
            __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + k / 2)));
            __m512i pairs = _mm512_or_si512(_mm512_and_si512(d, m4),
                                            _mm512_slli_epi32(_mm512_srli_epi32(d, 4), 16));
            _mm512_storeu_si512(ch->deq[r] + k, _mm512_permutexvar_epi16(pairs, table));
        }
        for (int b = 0; b * G < kn; b++)
            ch->bsc[r][b] = kt__moe_bf16_f32(srow[b]);
    }
    return G;
}

/* AMXINT8: int8 -> BF16 (exact), scale per row. */
static int fill_int8(const kt__wmat *W, int n, int nr, int kc, int kn, x2_chunk *ch)
{
    int cols = W->cols;
    for (int r = 0; r < 4; r++) {
        int row = n + imin(r, nr - 1);
        const int8_t *src = (const int8_t *)W->w + (size_t)row * cols + kc;
        for (int k = 0; k < kn; k += 32) {
            __m256i v = _mm256_maskz_loadu_epi8(tail32(kn - k), src + k);
            __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
            __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
            _mm512_storeu_si512(ch->deq[r] + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
        ch->rsc[r] = ((const float *)W->scale)[row];
    }
    return 0;
}

/* ---- C = A W^T -------------------------------------------------------------- */

static void gemm_x2(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                    size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                    x2_chunk *ch, x2_fill_fn fill, int row_scaled)
{
    size_t lo_off = (size_t)pad64(W->cols);
    /* BF16 in place: whole rows for decode (long streams), L1 chunks otherwise */
    int kstep = (!fill && M <= 4) ? k1 - k0 : KC_X2;
    for (int kc = k0; kc < k1; kc += kstep) {
        int kn = imin(kstep, k1 - kc);
        for (int n = n0; n < n1; n += 4) {
            int nr = imin(4, n1 - n);
            const uint16_t *w[4];
            int B = 0;
            size_t pf = 0;
            if (fill) {
                B = fill(W, n, nr, kc, kn, ch);
                for (int r = 0; r < 4; r++)
                    w[r] = ch->deq[r];
            } else {
                for (int r = 0; r < 4; r++)
                    w[r] = (const uint16_t *)W->w + (size_t)(n + imin(r, nr - 1)) * W->cols + kc;
                pf = (size_t)W->cols * 8 + 1024; /* the next 4-row tile */
            }
            int mstep = B ? 3 : 6;
            for (int m = 0; m < M; m += mstep) {
                int mr = imin(mstep, M - m);
                const uint16_t *a[6];
                for (int i = 0; i < 6; i++)
                    a[i] = arow16(A, a_stride, rows, m + imin(i, mr - 1)) + kc;
                float t[24];
                if (B) {
                    switch (mr) {
                    case 1: tile_x2_blocks(w, a, lo_off, 1, kn, B, ch->bsc, t); break;
                    case 2: tile_x2_blocks(w, a, lo_off, 2, kn, B, ch->bsc, t); break;
                    default: tile_x2_blocks(w, a, lo_off, 3, kn, B, ch->bsc, t); break;
                    }
                } else {
                    switch (mr) {
                    case 1: tile_x2(w, a, lo_off, 1, kn, pf, t); break;
                    case 2: tile_x2(w, a, lo_off, 2, kn, pf, t); break;
                    case 3: tile_x2(w, a, lo_off, 3, kn, pf, t); break;
                    case 4: tile_x2(w, a, lo_off, 4, kn, pf, t); break;
                    case 5: tile_x2(w, a, lo_off, 5, kn, pf, t); break;
                    default: tile_x2(w, a, lo_off, 6, kn, pf, t); break;
                    }
                }
                for (int i = 0; i < mr; i++)
                    for (int r = 0; r < nr; r++) {
                        float v = row_scaled ? t[i * 4 + r] * ch->rsc[r] : t[i * 4 + r];
                        float *c = &C[(size_t)(m + i) * ldc + (n - n0) + r];
                        *c = kc > k0 ? *c + v : v;
                    }
            }
        }
    }
}

/* ---- decode (up to 3 tokens): one weight row at a time ------------------------
 * Each row read start to end (one sequential stream, as the default decode
 * kernels), decoded in registers, FP8 block scales on exact 128-input sums. */

/* byte 16L + i of lane L: input 8L + i (i < 8), 32 + 8L + i - 8 (i >= 8) */
static const uint8_t fp8_lanes[64] __attribute__((aligned(64))) = {
    0,  1,  2,  3,  4,  5,  6,  7,  32, 33, 34, 35, 36, 37, 38, 39,
    8,  9,  10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47,
    16, 17, 18, 19, 20, 21, 22, 23, 48, 49, 50, 51, 52, 53, 54, 55,
    24, 25, 26, 27, 28, 29, 30, 31, 56, 57, 58, 59, 60, 61, 62, 63};

/* The registers of fp8x64_natural: the byte tables (high, low) and the lane
 * permute. */
ALWAYS_INLINE void fp8_tables(__m512i *tab)
{
    lut8 L = lut_load();
    tab[0] = L.h0;
    tab[1] = L.h1;
    tab[2] = L.l0;
    tab[3] = L.l1;
    tab[4] = _mm512_load_si512(fp8_lanes);
}

/* 64 E4M3 bytes -> 64 BF16 in input order (w[0]: inputs 0..31, w[1]: 32..63):
 * one byte permute puts inputs 8L..8L+7 and 32+8L..32+8L+7 in 128-bit lane
 * L, the tables give each byte's BF16 high and low bytes, and the in-lane
 * byte unpacks interleave them back into input order. */
ALWAYS_INLINE void fp8x64_natural(const __m512i *tab, __m512i v, __m512i *w)
{
    v = _mm512_permutexvar_epi8(tab[4], v);
    __m512i hi = _mm512_permutex2var_epi8(tab[0], v, tab[1]);
    __m512i lo = _mm512_permutex2var_epi8(tab[2], v, tab[3]);
    hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0xF8); /* | sign */
    w[0] = _mm512_unpacklo_epi8(lo, hi);
    w[1] = _mm512_unpackhi_epi8(lo, hi);
}

/* 64 weights of one row at k (masked by m64 / t0 / t1 when not NULL-free:
 * whole steps pass all-ones masks, which gcc folds into plain loads), exact
 * BF16, times (hi, lo) of MR tokens into four chains per token. */
ALWAYS_INLINE void step_x2(const void *w, int fp8, const __m512i *tab, const uint16_t *const *a,
                           size_t lo_off, size_t pf, const int MR, int k, __mmask64 m64,
                           __mmask32 t0, __mmask32 t1, __m512 *b0, __m512 *b1, __m512 *c0,
                           __m512 *c1)
{
    __m512i v[2];
    if (fp8) {
        const uint8_t *p = (const uint8_t *)w + k;
        _mm_prefetch((const char *)p + pf, _MM_HINT_T1);
        __m512i raw = _mm512_maskz_loadu_epi8(m64, p);
        __asm__("" : "+v"(raw)); /* loaded once (the permutes overwrite operands) */
        fp8x64_natural(tab, raw, v);
    } else {
        const uint16_t *p = (const uint16_t *)w + k;
        _mm_prefetch((const char *)p + pf, _MM_HINT_T1);
        v[0] = _mm512_maskz_loadu_epi16(t0, p);
        v[1] = _mm512_maskz_loadu_epi16(t1, p + 32);
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++) {
        const uint16_t *x = a[m] + k;
        b0[m] = _mm512_dpbf16_ps(b0[m], (__m512bh)v[0], (__m512bh)_mm512_maskz_loadu_epi16(t0, x));
        b1[m] = _mm512_dpbf16_ps(b1[m], (__m512bh)v[1],
                                 (__m512bh)_mm512_maskz_loadu_epi16(t1, x + 32));
        c0[m] = _mm512_dpbf16_ps(c0[m], (__m512bh)v[0],
                                 (__m512bh)_mm512_maskz_loadu_epi16(t0, x + lo_off));
        c1[m] = _mm512_dpbf16_ps(c1[m], (__m512bh)v[1],
                                 (__m512bh)_mm512_maskz_loadu_epi16(t1, x + lo_off + 32));
    }
}

/* out[m * 4 + r] for nr rows (w[r], FP8 scale row srow[r] or NULL for BF16)
 * and MR tokens (a[m]: hi, a[m] + lo_off: lo), inputs [k0, k1):
 *     out = sum_b s_r[b] * sum_{k in b} w_r[k] (hi_m[k] + lo_m[k])   (BF16: s = 1) */
ALWAYS_INLINE void rows_x2(const void *const *w, const float *const *srow, int fp8,
                           const uint16_t *const *a, size_t lo_off, size_t pf, const int MR,
                           int k0, int k1, float *out)
{
    __m512i tab[5];
    if (fp8)
        fp8_tables(tab);
    const __mmask64 all64 = ~(__mmask64)0;
    const __mmask32 all32 = ~(__mmask32)0;
    __m512 row_sum[3][4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512 tot[3];
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            tot[m] = _mm512_setzero_ps();
        int kb = k0;
        /* hot loop: whole blocks of 128 inputs (FP8 scale blocks; BF16 the same
         * steps, scale 1), two steps of 64 into four chains per token */
        for (; kb + 128 <= k1; kb += 128) {
            __m512 b0[3], b1[3], c0[3], c1[3];
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                b0[m] = b1[m] = c0[m] = c1[m] = _mm512_setzero_ps();
            step_x2(w[r], fp8, tab, a, lo_off, pf, MR, kb, all64, all32, all32, b0, b1, c0, c1);
            step_x2(w[r], fp8, tab, a, lo_off, pf, MR, kb + 64, all64, all32, all32, b0, b1, c0,
                    c1);
            __m512 sv = _mm512_set1_ps(fp8 ? srow[r][kb / 128] : 1.0f);
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                tot[m] = _mm512_fmadd_ps(
                    _mm512_add_ps(_mm512_add_ps(b0[m], b1[m]), _mm512_add_ps(c0[m], c1[m])), sv,
                    tot[m]);
        }
        if (kb < k1) { /* a partial last block, masked steps */
            __m512 b0[3], b1[3], c0[3], c1[3];
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                b0[m] = b1[m] = c0[m] = c1[m] = _mm512_setzero_ps();
            for (int k = kb; k < k1; k += 64)
                step_x2(w[r], fp8, tab, a, lo_off, pf, MR, k, tail64(k1 - k), tail32(k1 - k),
                        tail32(k1 - k - 32), b0, b1, c0, c1);
            __m512 sv = _mm512_set1_ps(fp8 ? srow[r][kb / 128] : 1.0f);
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                tot[m] = _mm512_fmadd_ps(
                    _mm512_add_ps(_mm512_add_ps(b0[m], b1[m]), _mm512_add_ps(c0[m], c1[m])), sv,
                    tot[m]);
        }
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            row_sum[m][r] = tot[m];
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4,
                      hsum4(row_sum[m][0], row_sum[m][1], row_sum[m][2], row_sum[m][3]));
}

/* One token, long rows: two rows at a time share each activation load. A row
 * of K inputs passes 4K bytes of hi / lo activations and the row itself
 * through L1 between two uses of the same activation line; once that exceeds
 * L1 the activations come from L2 and their loads, twice the weight bytes,
 * set the pace (BF16X2 decode on Zen 4, 32 KiB L1, x read loop: 0.95 at K
 * 3072, 0.63-0.66 at 4096-5120, 0.46 at 6144, 0.39-0.42 at 7168); two rows
 * halve them (0.55 at 6144 and 7168) but lose where one row still fits
 * (0.54-0.57 at 4096-5120). Reading rows in pieces instead (activations kept
 * in L1) read memory at 0.42-0.47: it breaks the rows' streams. */
static size_t l1d_bytes(void)
{
    static size_t cached;
    size_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (!v) {
        long s = sysconf(_SC_LEVEL1_DCACHE_SIZE);
        v = s > 0 ? (size_t)s : 32768;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

ALWAYS_INLINE void step2_x2(const void *const *w, int fp8, const __m512i *tab, const uint16_t *x,
                            size_t lo_off, size_t pf, int k, __mmask64 m64, __mmask32 t0,
                            __mmask32 t1, __m512 (*acc)[4])
{
    __m512i xh0 = _mm512_maskz_loadu_epi16(t0, x + k);
    __m512i xh1 = _mm512_maskz_loadu_epi16(t1, x + k + 32);
    __m512i xl0 = _mm512_maskz_loadu_epi16(t0, x + lo_off + k);
    __m512i xl1 = _mm512_maskz_loadu_epi16(t1, x + lo_off + k + 32);
    __asm__("" : "+v"(xh0), "+v"(xh1), "+v"(xl0), "+v"(xl1)); /* one load for both rows */
    #pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        __m512i v[2];
        if (fp8) {
            const uint8_t *p = (const uint8_t *)w[r] + k;
            _mm_prefetch((const char *)p + pf, _MM_HINT_T1);
            __m512i raw = _mm512_maskz_loadu_epi8(m64, p);
            __asm__("" : "+v"(raw));
            fp8x64_natural(tab, raw, v);
        } else {
            const uint16_t *p = (const uint16_t *)w[r] + k;
            _mm_prefetch((const char *)p + pf, _MM_HINT_T1);
            v[0] = _mm512_maskz_loadu_epi16(t0, p);
            v[1] = _mm512_maskz_loadu_epi16(t1, p + 32);
        }
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)v[0], (__m512bh)xh0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)v[1], (__m512bh)xh1);
        acc[r][2] = _mm512_dpbf16_ps(acc[r][2], (__m512bh)v[0], (__m512bh)xl0);
        acc[r][3] = _mm512_dpbf16_ps(acc[r][3], (__m512bh)v[1], (__m512bh)xl1);
    }
}

/* sum_b s_r[b] * sum_{k in b} w_r[k] (hi[k] + lo[k]) for the rows w[0], w[1]
 * (scale rows srow[0], srow[1]; BF16: s = 1) over [k0, k1), as F32 vectors. */
ALWAYS_INLINE void rows2_x2(const void *const *w, const float *const *srow, int fp8,
                            const __m512i *tab, const uint16_t *x, size_t lo_off, size_t pf,
                            int k0, int k1, __m512 *tot)
{
    const __mmask64 all64 = ~(__mmask64)0;
    const __mmask32 all32 = ~(__mmask32)0;
    tot[0] = tot[1] = _mm512_setzero_ps();
    for (int kb = k0; kb < k1; kb += 128) {
        __m512 acc[2][4];
        #pragma GCC unroll 2
        for (int r = 0; r < 2; r++)
            acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm512_setzero_ps();
        if (kb + 128 <= k1) { /* hot loop: a whole block of 128 inputs */
            step2_x2(w, fp8, tab, x, lo_off, pf, kb, all64, all32, all32, acc);
            step2_x2(w, fp8, tab, x, lo_off, pf, kb + 64, all64, all32, all32, acc);
        } else {
            for (int k = kb; k < k1; k += 64)
                step2_x2(w, fp8, tab, x, lo_off, pf, k, tail64(k1 - k), tail32(k1 - k),
                         tail32(k1 - k - 32), acc);
        }
        #pragma GCC unroll 2
        for (int r = 0; r < 2; r++)
            tot[r] = _mm512_fmadd_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]),
                                                   _mm512_add_ps(acc[r][2], acc[r][3])),
                                     _mm512_set1_ps(fp8 ? srow[r][kb / 128] : 1.0f), tot[r]);
    }
}

/* One token, long rows: out[r] for the 4 rows of a tile, two at a time. */
ALWAYS_INLINE void rows_x2_long(const void *const *w, const float *const *srow, const int fp8,
                                const uint16_t *x, size_t lo_off, size_t pf, int k0, int k1,
                                float *out)
{
    __m512i tab[5];
    if (fp8)
        fp8_tables(tab);
    __m512 t[4];
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
        rows2_x2(w + 2 * h, srow + 2 * h, fp8, tab, x, lo_off, pf, k0, k1, t + 2 * h);
    _mm_storeu_ps(out, hsum4(t[0], t[1], t[2], t[3]));
}

/* C for up to 3 tokens: BF16 (fp8 = 0) or FP8 weights. k0 is a multiple of
 * 128 for FP8 (its blocks); BF16 any. */
static void decode_x2(const kt__wmat *W, int fp8, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc)
{
    size_t lo_off = (size_t)pad64(W->cols);
    size_t pf = dec_pf();
    const uint16_t *a[3];
    for (int i = 0; i < 3; i++)
        a[i] = arow16(A, a_stride, rows, imin(i, M - 1));
    int cb = (W->cols + 127) / 128;
    size_t esz = fp8 ? 1 : 2;
    int long_rows = M == 1 && (size_t)(k1 - k0) * (4 + esz) > l1d_bytes();
    for (int n = n0; n < n1; n += 4) {
        int nr = imin(4, n1 - n);
        const void *wr[4];
        const float *sr[4];
        for (int r = 0; r < 4; r++) {
            int row = n + imin(r, nr - 1);
            wr[r] = (const uint8_t *)W->w + (size_t)row * W->cols * esz;
            sr[r] = fp8 ? (const float *)W->scale + (size_t)(row / 128) * cb : NULL;
        }
        float t[12];
        if (long_rows) {
            if (fp8)
                rows_x2_long((const void *const *)wr, sr, 1, a[0], lo_off, pf, k0, k1, t);
            else
                rows_x2_long((const void *const *)wr, sr, 0, a[0], lo_off, pf, k0, k1, t);
            for (int r = 0; r < nr; r++)
                C[n - n0 + r] = t[r];
            continue;
        }
        switch (M + 3 * fp8) {
        case 1: rows_x2(wr, sr, 0, a, lo_off, pf, 1, k0, k1, t); break;
        case 2: rows_x2(wr, sr, 0, a, lo_off, pf, 2, k0, k1, t); break;
        case 3: rows_x2(wr, sr, 0, a, lo_off, pf, 3, k0, k1, t); break;
        case 4: rows_x2(wr, sr, 1, a, lo_off, pf, 1, k0, k1, t); break;
        case 5: rows_x2(wr, sr, 1, a, lo_off, pf, 2, k0, k1, t); break;
        default: rows_x2(wr, sr, 1, a, lo_off, pf, 3, k0, k1, t); break;
        }
        store_tile(C, ldc, n - n0, t, M, nr);
    }
}

/* ---- INT4 decode (up to 3 tokens): nibbles decoded in registers ------------
 * 16 bytes = 32 inputs (the even one in the low nibble) -> 32 exact BF16 of
 * nibble - 8 in input order: vpermb spreads byte j over words 2j, 2j + 1,
 * vpsrlvw brings the high nibble down in the odd words, the low 4 bits of
 * each byte pick from a 32-byte table (low bytes 0..15, high bytes 16..31). */
typedef struct int4_consts {
    __m512i spread, shift, table;
} int4_consts;

#define X4(a) a, a, a, a
static const uint8_t int4_spread[64] __attribute__((aligned(64))) = {
    X4(0),  X4(1),  X4(2),  X4(3),  X4(4),  X4(5),  X4(6),  X4(7),
    X4(8),  X4(9),  X4(10), X4(11), X4(12), X4(13), X4(14), X4(15)};
#undef X4
/* BF16 of (i & 15) - 8 for i < 32: vpermw reads the low 5 bits of each index */
static const uint16_t int4_words[32] __attribute__((aligned(64))) = {
    0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
    0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
    0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
    0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0};

ALWAYS_INLINE int4_consts int4_setup(void)
{
    int4_consts c = {_mm512_load_si512(int4_spread), _mm512_set1_epi32(4 << 16),
                     _mm512_load_si512(int4_words)};
    return c;
}

/* 16 bytes = 32 inputs -> 32 BF16 of nibble - 8 in input order: byte j in
 * both bytes of words 2j and 2j + 1, the odd word shifted right by 4, so the
 * low 4 bits of each word are its nibble (bit 4, the next nibble's low bit,
 * picks the table's second, identical half). */
ALWAYS_INLINE __m512bh int4x32(const int4_consts *c, const uint8_t *p)
{
    __m512i b = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    __m512i s = _mm512_srlv_epi16(_mm512_permutexvar_epi8(c->spread, b), c->shift);
    return (__m512bh)_mm512_permutexvar_epi16(s, c->table);
}

/* The exact sum over one group of G inputs at k (G a multiple of 32), hi and
 * lo in two chains, for MR tokens. */
ALWAYS_INLINE void int4_group(const int4_consts *c, const uint8_t *w, const uint16_t *const *a,
                              size_t lo_off, const int MR, int k, const int G, __m512 *g)
{
    __m512 h[3], l[3];
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        h[m] = l[m] = _mm512_setzero_ps();
    #pragma GCC unroll 4
    for (int j = 0; j < G; j += 32) {
        __m512bh v = int4x32(c, w + (k + j) / 2);
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++) {
            const uint16_t *x = a[m] + k + j;
            h[m] = _mm512_dpbf16_ps(h[m], v, (__m512bh)_mm512_loadu_si512(x));
            if (G == 32) /* one step: hi and lo in one chain */
                h[m] = _mm512_dpbf16_ps(h[m], v, (__m512bh)_mm512_loadu_si512(x + lo_off));
            else
                l[m] = _mm512_dpbf16_ps(l[m], v, (__m512bh)_mm512_loadu_si512(x + lo_off));
        }
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        g[m] = G == 32 ? h[m] : _mm512_add_ps(h[m], l[m]);
}

#define INT4_PIECE 2048 /* inputs per piece of F32 scales */

/* out[m * 4 + r] = sum_g s[r][g] sum_{k in g} w_r[k] (hi_m[k] + lo_m[k]) for
 * 4 rows (w[r], BF16 scales srow[r] per G inputs) over [k0, k1), multiples of G. */
ALWAYS_INLINE void rows_int4_x2(const uint8_t *const *w, const uint16_t *const *srow, const int G,
                                const uint16_t *const *a, size_t lo_off, size_t pf, const int MR,
                                int k0, int k1, float *out)
{
    const int4_consts c = int4_setup();
    float sf[INT4_PIECE / 32];
    __m512 row_sum[3][4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        /* two totals: consecutive groups' scaled sums in two chains */
        __m512 t0[3], t1[3];
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            t0[m] = t1[m] = _mm512_setzero_ps();
        for (int kp = k0; kp < k1; kp += INT4_PIECE) {
            int kpe = imin(kp + INT4_PIECE, k1), ng = (kpe - kp) / G;
            const uint16_t *sp = srow[r] + kp / G;
            /* BF16 -> F32 scales of the piece */
            for (int i = 0; i < ng; i += 16) {
                __m256i v = _mm256_maskz_loadu_epi16((__mmask16)tail32(ng - i), sp + i);
                _mm512_storeu_ps(sf + i, _mm512_castsi512_ps(
                                             _mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)));
            }
            int i = 0;
            for (; i + 2 <= ng; i += 2) {
                __m512 g0[3], g1[3];
                /* G bytes: the pair's weights */
                for (int b = 0; b < G; b += 64)
                    _mm_prefetch((const char *)(w[r] + (kp + i * G) / 2) + b + pf,
                                 _MM_HINT_T1);
                int4_group(&c, w[r], a, lo_off, MR, kp + i * G, G, g0);
                int4_group(&c, w[r], a, lo_off, MR, kp + (i + 1) * G, G, g1);
                __m512 s0 = _mm512_set1_ps(sf[i]), s1 = _mm512_set1_ps(sf[i + 1]);
                #pragma GCC unroll 3
                for (int m = 0; m < MR; m++) {
                    t0[m] = _mm512_fmadd_ps(g0[m], s0, t0[m]);
                    t1[m] = _mm512_fmadd_ps(g1[m], s1, t1[m]);
                }
            }
            if (i < ng) {
                __m512 g0[3];
                int4_group(&c, w[r], a, lo_off, MR, kp + i * G, G, g0);
                __m512 s0 = _mm512_set1_ps(sf[i]);
                #pragma GCC unroll 3
                for (int m = 0; m < MR; m++)
                    t0[m] = _mm512_fmadd_ps(g0[m], s0, t0[m]);
            }
        }
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            row_sum[m][r] = _mm512_add_ps(t0[m], t1[m]);
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4,
                      hsum4(row_sum[m][0], row_sum[m][1], row_sum[m][2], row_sum[m][3]));
}

/* C for up to 3 tokens, INT4 weights with a scale per G inputs (k0, k1
 * multiples of G). */
static void decode_int4_x2(const kt__wmat *W, int G, int n0, int n1, int k0, int k1,
                           const void *A, size_t a_stride, const int32_t *rows, int M, float *C,
                           int ldc)
{
    size_t lo_off = (size_t)pad64(W->cols);
    size_t pf = dec_pf();
    const uint16_t *a[3];
    for (int i = 0; i < 3; i++)
        a[i] = arow16(A, a_stride, rows, imin(i, M - 1));
    size_t rb = (size_t)W->cols / 2, sb = (size_t)(W->cols / G);
    for (int n = n0; n < n1; n += 4) {
        int nr = imin(4, n1 - n);
        const uint8_t *wr[4];
        const uint16_t *sr[4];
        for (int r = 0; r < 4; r++) {
            int row = n + imin(r, nr - 1);
            wr[r] = (const uint8_t *)W->w + (size_t)row * rb;
            sr[r] = (const uint16_t *)W->scale + (size_t)row * sb;
        }
        float t[12];
        int sel = (G == 32 ? 0 : G == 64 ? 3 : 6) + M;
        switch (sel) {
        case 1: rows_int4_x2(wr, sr, 32, a, lo_off, pf, 1, k0, k1, t); break;
        case 2: rows_int4_x2(wr, sr, 32, a, lo_off, pf, 2, k0, k1, t); break;
        case 3: rows_int4_x2(wr, sr, 32, a, lo_off, pf, 3, k0, k1, t); break;
        case 4: rows_int4_x2(wr, sr, 64, a, lo_off, pf, 1, k0, k1, t); break;
        case 5: rows_int4_x2(wr, sr, 64, a, lo_off, pf, 2, k0, k1, t); break;
        case 6: rows_int4_x2(wr, sr, 64, a, lo_off, pf, 3, k0, k1, t); break;
        case 7: rows_int4_x2(wr, sr, 128, a, lo_off, pf, 1, k0, k1, t); break;
        case 8: rows_int4_x2(wr, sr, 128, a, lo_off, pf, 2, k0, k1, t); break;
        default: rows_int4_x2(wr, sr, 128, a, lo_off, pf, 3, k0, k1, t); break;
        }
        store_tile(C, ldc, n - n0, t, M, nr);
    }
}

/* BF16 (fp8 = 0) or FP8 weights: rows read in registers up to 3 tokens,
 * else the chunk path. */
static void gemm_float_x2(const kt__wmat *W, int fp8, int n0, int n1, int k0, int k1,
                          const void *A, size_t a_stride, const int32_t *rows, int M, float *C,
                          int ldc, void *scratch)
{
    if (M <= 3)
        decode_x2(W, fp8, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
    else
        gemm_x2(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch,
                fp8 ? fill_fp8 : NULL, 0);
}

static void gemm_bf16_x2(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                         size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                         void *scratch)
{
    gemm_float_x2(W, 0, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
}

static void gemm_fp8_x2(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                        size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                        void *scratch)
{
    gemm_float_x2(W, 1, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
}

static void gemm_int4_x2(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                         size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                         void *scratch)
{
    int G = W->group ? W->group : 32;
    if (M <= 3 && (G == 32 || G == 64 || G == 128)) {
        decode_int4_x2(W, G, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
        return;
    }
    gemm_x2(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch, fill_int4, 0);
}

static void gemm_int8_x2(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                         size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                         void *scratch)
{
    gemm_x2(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch, fill_int8, 1);
}

static const kt__moe_kernels x2_bf16 = {"avx512-bf16x2", KT__ACT_BF16X2, quant_x2, gemm_bf16_x2,
                                        sizeof(x2_chunk), NULL};
static const kt__moe_kernels x2_fp8 = {"avx512-fp8-bf16x2", KT__ACT_BF16X2, quant_x2,
                                       gemm_fp8_x2, sizeof(x2_chunk), NULL};
static const kt__moe_kernels x2_int4 = {"avx512-int4-bf16x2", KT__ACT_BF16X2, quant_x2,
                                        gemm_int4_x2, sizeof(x2_chunk), NULL};
static const kt__moe_kernels x2_int8 = {"avx512-int8w-bf16x2", KT__ACT_BF16X2, quant_x2,
                                        gemm_int8_x2, sizeof(x2_chunk), NULL};

const kt__moe_kernels *kt__moe_kernels_avx512_x2(int method)
{
    switch (method) {
    case KT_METHOD_BF16:
        return &x2_bf16;
    case KT_METHOD_FP8:
        return &x2_fp8;
    case KT_METHOD_RAWINT4:
    case KT_METHOD_AMXINT4:
        return &x2_int4;
    case KT_METHOD_AMXINT8:
        return &x2_int8;
    default:
        return NULL;
    }
}
