/*
 * AVX-512 MoE kernels (compiled with -mavx512f/bw/vl/dq/vnni/bf16/vbmi; run
 * only when kt_hw_isa() reports all of them).
 *
 *  BF16     vdpbf16ps on BF16 activations; 4 weight rows x up to 4 tokens per
 *           register tile, K in chunks that stay in L1.
 *  FP8      E4M3 bytes -> BF16 through a 128-entry table held in 4 registers
 *           (vpermt2w), sign or'ed back. Up to 2 tokens: decoded in registers,
 *           block scale applied per 128 inputs to block partial sums. More
 *           tokens: a 4-row chunk is decoded once with its scales folded in,
 *           then the BF16 tile kernel reuses it for every token.
 *  RAWINT4  up to 3 tokens: nibbles (value + 8, unsigned) x INT8 activations
 *           (per 32-group scales) with vpdpbusd, the +8 offset removed by
 *           starting each lane at -8 * (sum of its activation bytes). More
 *           tokens: chunk dequantized to BF16 (scales folded) + BF16 tiles.
 */
#include <immintrin.h>

#include "moe_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* BF16 bits of the E4M3 magnitudes 0..127 (127 = NaN). */
static const uint16_t e4m3_lut[128] = {
    0x0000, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60,
    0x3c80, 0x3c90, 0x3ca0, 0x3cb0, 0x3cc0, 0x3cd0, 0x3ce0, 0x3cf0,
    0x3d00, 0x3d10, 0x3d20, 0x3d30, 0x3d40, 0x3d50, 0x3d60, 0x3d70,
    0x3d80, 0x3d90, 0x3da0, 0x3db0, 0x3dc0, 0x3dd0, 0x3de0, 0x3df0,
    0x3e00, 0x3e10, 0x3e20, 0x3e30, 0x3e40, 0x3e50, 0x3e60, 0x3e70,
    0x3e80, 0x3e90, 0x3ea0, 0x3eb0, 0x3ec0, 0x3ed0, 0x3ee0, 0x3ef0,
    0x3f00, 0x3f10, 0x3f20, 0x3f30, 0x3f40, 0x3f50, 0x3f60, 0x3f70,
    0x3f80, 0x3f90, 0x3fa0, 0x3fb0, 0x3fc0, 0x3fd0, 0x3fe0, 0x3ff0,
    0x4000, 0x4010, 0x4020, 0x4030, 0x4040, 0x4050, 0x4060, 0x4070,
    0x4080, 0x4090, 0x40a0, 0x40b0, 0x40c0, 0x40d0, 0x40e0, 0x40f0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
    0x4180, 0x4190, 0x41a0, 0x41b0, 0x41c0, 0x41d0, 0x41e0, 0x41f0,
    0x4200, 0x4210, 0x4220, 0x4230, 0x4240, 0x4250, 0x4260, 0x4270,
    0x4280, 0x4290, 0x42a0, 0x42b0, 0x42c0, 0x42d0, 0x42e0, 0x42f0,
    0x4300, 0x4310, 0x4320, 0x4330, 0x4340, 0x4350, 0x4360, 0x4370,
    0x4380, 0x4390, 0x43a0, 0x43b0, 0x43c0, 0x43d0, 0x43e0, 0x7fc0
};

#define KC_BF16 2048 /* BF16 K chunk: 4 rows x 4 KiB stay in L1            */
#define KC_DEQ 2048  /* FP8 / INT4 dequantized chunk (multiple of 128)       */

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

static inline __mmask32 tail32(int left)
{
    return left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1u);
}

/* ---- activations ---------------------------------------------------------- */

static void quant_bf16(const float *x, int k0, int k1, int K, void *row)
{
    (void)K;
    uint16_t *r = row;
    int k = k0;
    for (; k + 32 <= k1; k += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
        _mm512_storeu_si512(r + k, (__m512i)v);
    }
    for (; k < k1; k++)
        r[k] = kt__moe_f32_bf16(x[k]);
}

/* Q8P64 row (see moe_kernels.h): per 32-group d = max|x| / 127, q = round(x / d);
 * chunk of 64 stored even inputs first; lane scales and -8 * lane sums; and a
 * BF16 copy for the prefill path. */
static void quant_q8p64(const float *x, int k0, int k1, int K, void *row)
{
    int K64 = (K + 63) & ~63;
    int8_t *q = row;
    float *lanes = (float *)((char *)row + K64);
    uint16_t *xb = (uint16_t *)((char *)row + 3 * (size_t)K64);
    for (int c = k0 / 64; c * 64 < k1; c++) {
        float d[2] = {0.0f, 0.0f}, inv[2] = {0.0f, 0.0f};
        for (int g = 0; g < 2; g++) {
            int kg = c * 64 + g * 32;
            if (kg >= k1)
                continue;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                float a = x[kg + i] < 0 ? -x[kg + i] : x[kg + i];
                amax = a > amax ? a : amax;
            }
            d[g] = amax / 127.0f;
            inv[g] = amax > 0.0f ? 127.0f / amax : 0.0f;
        }
        int8_t *qc = q + c * 64;
        for (int j = 0; j < 64; j++) {
            int k = c * 64 + j, v = 0;
            if (k < k1) {
                v = (int)__builtin_nearbyintf(x[k] * inv[j / 32]);
                v = v > 127 ? 127 : (v < -127 ? -127 : v);
            }
            qc[(j & 1) ? 32 + j / 2 : j / 2] = (int8_t)v;
            xb[k] = k < k1 ? kt__moe_f32_bf16(x[k]) : 0;
        }
        float *dl = lanes + c * 32;
        int32_t *cl = (int32_t *)(dl + 16);
        for (int l = 0; l < 16; l++) {
            dl[l] = d[(l & 4) ? 1 : 0]; /* lanes 4-7 and 12-15 hold the second group */
            cl[l] = -8 * (qc[4 * l] + qc[4 * l + 1] + qc[4 * l + 2] + qc[4 * l + 3]);
        }
    }
}

/* ---- BF16 tiles ----------------------------------------------------------- */

/* out[m * 4 + r] = sum_{k < kn} w_r[k] a_m[k] for 4 rows and MR tokens. */
ALWAYS_INLINE void tile_bf16(const uint16_t *const *w, const uint16_t *const *a, const int MR,
                             int kn, float *out)
{
    __m512 acc[4][4];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm512_setzero_ps();
    int k = 0;
    /* hot loop: 4 weight vectors x MR activation vectors per 32 inputs */
    for (; k + 32 <= kn; k += 32) {
        __m512bh v[4];
        for (int r = 0; r < 4; r++)
            v[r] = (__m512bh)_mm512_loadu_si512(w[r] + k);
        for (int m = 0; m < MR; m++) {
            __m512bh x = (__m512bh)_mm512_loadu_si512(a[m] + k);
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_dpbf16_ps(acc[m][r], v[r], x);
        }
    }
    if (k < kn) {
        __mmask32 msk = tail32(kn - k);
        __m512bh v[4];
        for (int r = 0; r < 4; r++)
            v[r] = (__m512bh)_mm512_maskz_loadu_epi16(msk, w[r] + k);
        for (int m = 0; m < MR; m++) {
            __m512bh x = (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + k);
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_dpbf16_ps(acc[m][r], v[r], x);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 4; r++)
            out[m * 4 + r] = _mm512_reduce_add_ps(acc[m][r]);
}

/* C[m][r] (+)= sum over inputs [kofs, kofs + kn) of W tile rows (nr <= 4 rows at
 * wtile + r * wstride, already offset to kofs) times activation rows. */
static void tiles_bf16(const uint16_t *wtile, size_t wstride, int nr, const void *A,
                       size_t a_stride, const int32_t *rows, int M, int kofs, int kn, float *C,
                       int ldc, int accumulate)
{
    const uint16_t *w[4];
    for (int r = 0; r < 4; r++)
        w[r] = wtile + (size_t)(r < nr ? r : nr - 1) * wstride;
    for (int m = 0; m < M; m += 4) {
        int mr = imin(4, M - m);
        const uint16_t *a[4];
        for (int i = 0; i < 4; i++)
            a[i] = (const uint16_t *)arow(A, a_stride, rows, m + (i < mr ? i : mr - 1)) + kofs;
        float t[16];
        switch (mr) {
        case 1: tile_bf16(w, a, 1, kn, t); break;
        case 2: tile_bf16(w, a, 2, kn, t); break;
        case 3: tile_bf16(w, a, 3, kn, t); break;
        default: tile_bf16(w, a, 4, kn, t); break;
        }
        for (int i = 0; i < mr; i++)
            for (int r = 0; r < nr; r++) {
                float *c = &C[(size_t)(m + i) * ldc + r];
                *c = accumulate ? *c + t[i * 4 + r] : t[i * 4 + r];
            }
    }
}

/* C = A W^T, W BF16 [rows][cols]. */
static void gemm_bf16(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    const uint16_t *w = W->w;
    for (int kc = k0; kc < k1; kc += KC_BF16) {
        int kn = imin(KC_BF16, k1 - kc);
        for (int n = n0; n < n1; n += 4)
            tiles_bf16(w + (size_t)n * W->cols + kc, (size_t)W->cols, imin(4, n1 - n), A,
                       a_stride, rows, M, kc, kn, C + (n - n0), ldc, kc > k0);
    }
}

/* ---- FP8 E4M3 ------------------------------------------------------------- */

typedef struct lut4 {
    __m512i t0, t1, t2, t3;
} lut4;

ALWAYS_INLINE lut4 lut_load(void)
{
    lut4 L;
    L.t0 = _mm512_loadu_si512(e4m3_lut);
    L.t1 = _mm512_loadu_si512(e4m3_lut + 32);
    L.t2 = _mm512_loadu_si512(e4m3_lut + 64);
    L.t3 = _mm512_loadu_si512(e4m3_lut + 96);
    return L;
}

/* 32 E4M3 bytes -> 32 BF16: magnitude from the table, sign bit or'ed in. */
ALWAYS_INLINE __m512i fp8x32_bf16(const lut4 *L, __m256i b)
{
    __m512i v = _mm512_cvtepu8_epi16(b);
    __m512i lo = _mm512_permutex2var_epi16(L->t0, v, L->t1);
    __m512i hi = _mm512_permutex2var_epi16(L->t2, v, L->t3);
    __mmask32 h = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x40));
    __m512i mag = _mm512_mask_blend_epi16(h, lo, hi);
    return _mm512_ternarylogic_epi32(mag, _mm512_slli_epi16(v, 8),
                                     _mm512_set1_epi16((short)0x8000), 0xF8);
}

/* Decode path: 4 rows x MR (1..2) tokens; per 128-input block the partial
 * dot products are scaled by the block's weight_scale_inv. */
ALWAYS_INLINE void tile_fp8(const uint8_t *const *w, const float *srow,
                            const uint16_t *const *a, const int MR, int k0, int k1, float *out)
{
    lut4 L = lut_load();
    __m512 tot[2][4];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 4; r++)
            tot[m][r] = _mm512_setzero_ps();
    for (int kb = k0; kb < k1; kb += 128) {
        int ke = imin(kb + 128, k1);
        __m512 blk[2][4];
        for (int m = 0; m < MR; m++)
            for (int r = 0; r < 4; r++)
                blk[m][r] = _mm512_setzero_ps();
        /* hot loop: decode 4 x 32 weights, dot with MR tokens */
        for (int k = kb; k < ke; k += 32) {
            __mmask32 msk = tail32(ke - k);
            __m512bh v[4];
            for (int r = 0; r < 4; r++)
                v[r] = (__m512bh)fp8x32_bf16(&L, _mm256_maskz_loadu_epi8(msk, w[r] + k));
            for (int m = 0; m < MR; m++) {
                __m512bh x = (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + k);
                for (int r = 0; r < 4; r++)
                    blk[m][r] = _mm512_dpbf16_ps(blk[m][r], v[r], x);
            }
        }
        __m512 s = _mm512_set1_ps(srow[kb / 128]);
        for (int m = 0; m < MR; m++)
            for (int r = 0; r < 4; r++)
                tot[m][r] = _mm512_fmadd_ps(blk[m][r], s, tot[m][r]);
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 4; r++)
            out[m * 4 + r] = _mm512_reduce_add_ps(tot[m][r]);
}

/* bf16 x32 -> two f32 x16 vectors, times s, back to bf16 x32. */
ALWAYS_INLINE __m512i scale_bf16x32(__m512i b, __m512 s)
{
    __m512 lo = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(b)), 16));
    __m512 hi = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(b, 1)), 16));
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, s), _mm512_mul_ps(lo, s));
}

/* C = A W^T, W = e4m3(q) * scale[n / 128][k / 128]. */
static void gemm_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                     void *scratch)
{
    const uint8_t *w = W->w;
    const float *sc = W->scale;
    int cols = W->cols, cb = (cols + 127) / 128;
    if (M < 4) {
        for (int n = n0, nr; n < n1; n += nr) {
            nr = imin(imin(4, n1 - n), 128 - n % 128); /* one scale row per tile */
            const uint8_t *wr[4];
            for (int r = 0; r < 4; r++)
                wr[r] = w + (size_t)(n + (r < nr ? r : nr - 1)) * cols;
            const float *srow = sc + (size_t)(n / 128) * cb;
            for (int m = 0; m < M; m += 2) {
                int mr = imin(2, M - m);
                const uint16_t *a[2];
                for (int i = 0; i < 2; i++)
                    a[i] = arow(A, a_stride, rows, m + (i < mr ? i : mr - 1));
                float t[8];
                if (mr == 2)
                    tile_fp8(wr, srow, a, 2, k0, k1, t);
                else
                    tile_fp8(wr, srow, a, 1, k0, k1, t);
                for (int i = 0; i < mr; i++)
                    for (int r = 0; r < nr; r++)
                        C[(size_t)(m + i) * ldc + (n - n0) + r] = t[i * 4 + r];
            }
        }
        return;
    }
    /* prefill: decode a 4-row chunk once (scales folded in), reuse it for all tokens */
    uint16_t *deq = scratch; /* [4][KC_DEQ] */
    lut4 L = lut_load();
    for (int kc = k0; kc < k1; kc += KC_DEQ) {
        int kn = imin(KC_DEQ, k1 - kc);
        for (int n = n0; n < n1; n += 4) {
            int nr = imin(4, n1 - n);
            for (int r = 0; r < nr; r++) {
                const uint8_t *row = w + (size_t)(n + r) * cols + kc;
                const float *srow = sc + (size_t)((n + r) / 128) * cb;
                for (int k = 0; k < kn; k += 32) {
                    __m512i b = fp8x32_bf16(&L, _mm256_maskz_loadu_epi8(tail32(kn - k), row + k));
                    __m512 s = _mm512_set1_ps(srow[(kc + k) / 128]);
                    _mm512_storeu_si512(deq + (size_t)r * KC_DEQ + k, scale_bf16x32(b, s));
                }
            }
            tiles_bf16(deq, KC_DEQ, nr, A, a_stride, rows, M, kc, kn, C + (n - n0), ldc, kc > k0);
        }
    }
}

/* ---- RAWINT4 -------------------------------------------------------------- */

/* 32 packed bytes (64 nibbles) -> 64 unsigned bytes: even inputs, then odd. */
ALWAYS_INLINE __m512i unpack_nibbles(const uint8_t *p, __mmask32 msk)
{
    __m256i b = _mm256_maskz_loadu_epi8(msk, p);
    __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i lo = _mm256_and_si256(b, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Weight scales of groups g and g + 1 spread over the lanes of a Q8P64 chunk. */
ALWAYS_INLINE __m512 lane_scales(const uint16_t *s, int g, int n_groups)
{
    float a = kt__moe_bf16_f32(s[g]);
    float b = g + 1 < n_groups ? kt__moe_bf16_f32(s[g + 1]) : 0.0f;
    return _mm512_mask_blend_ps((__mmask16)0xF0F0, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

/* Decode path: 2 rows x MR (1..3) tokens.
 * Per chunk of 64 inputs and lane: i = -8 * sum(q) + sum (nib) * q
 *                                    = sum (nib - 8) * q;  acc += i * (s_w * d_x). */
ALWAYS_INLINE void tile_int4(const uint8_t *const *w, const uint16_t *const *s,
                             const int8_t *const *a, const int MR, int K, int k0, int k1,
                             float *out)
{
    int K64 = (K + 63) & ~63, n_groups = K / 32;
    __m512 acc[3][2];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 2; r++)
            acc[m][r] = _mm512_setzero_ps();
    /* hot loop */
    for (int c = k0 / 64; c * 64 < k1; c++) {
        __mmask32 msk = k1 - c * 64 >= 64 ? (__mmask32)0xffffffffu : (__mmask32)0xffffu;
        __m512i wv[2];
        __m512 sv[2];
        for (int r = 0; r < 2; r++) {
            wv[r] = unpack_nibbles(w[r] + (size_t)c * 32, msk);
            sv[r] = lane_scales(s[r], 2 * c, n_groups);
        }
        for (int m = 0; m < MR; m++) {
            __m512i qv = _mm512_loadu_si512(a[m] + (size_t)c * 64);
            const float *lane = (const float *)(a[m] + K64) + (size_t)c * 32;
            __m512 dv = _mm512_loadu_ps(lane);
            __m512i cv = _mm512_loadu_si512(lane + 16);
            for (int r = 0; r < 2; r++) {
                __m512i iv = _mm512_dpbusd_epi32(cv, wv[r], qv);
                acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iv), _mm512_mul_ps(sv[r], dv),
                                            acc[m][r]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 2; r++)
            out[m * 2 + r] = _mm512_reduce_add_ps(acc[m][r]);
}

/* C = A W^T, W = (nibble - 8) * scale[n][k / 32]. */
static void gemm_int4(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    const uint8_t *w = W->w;
    const uint16_t *sc = W->scale;
    int K = W->cols, K64 = (K + 63) & ~63;
    size_t rb = (size_t)K / 2, sb = (size_t)K / 32;
    if (M < 4) {
        for (int n = n0; n < n1; n += 2) {
            int nr = imin(2, n1 - n);
            const uint8_t *wr[2];
            const uint16_t *sr[2];
            for (int r = 0; r < 2; r++) {
                int row = n + (r < nr ? r : nr - 1);
                wr[r] = w + (size_t)row * rb;
                sr[r] = sc + (size_t)row * sb;
            }
            const int8_t *a[3];
            for (int i = 0; i < 3; i++)
                a[i] = arow(A, a_stride, rows, i < M ? i : M - 1);
            float t[6];
            switch (M) {
            case 1: tile_int4(wr, sr, a, 1, K, k0, k1, t); break;
            case 2: tile_int4(wr, sr, a, 2, K, k0, k1, t); break;
            default: tile_int4(wr, sr, a, 3, K, k0, k1, t); break;
            }
            for (int i = 0; i < M; i++)
                for (int r = 0; r < nr; r++)
                    C[(size_t)i * ldc + (n - n0) + r] = t[i * 2 + r];
        }
        return;
    }
    /* prefill: dequantize a 4-row chunk to BF16 once, BF16 tiles against the
     * BF16 copy of the activations */
    uint16_t *deq = scratch; /* [4][KC_DEQ] */
    const void *Abf = (const char *)A + 3 * (size_t)K64;
    for (int kc = k0; kc < k1; kc += KC_DEQ) {
        int kn = imin(KC_DEQ, k1 - kc);
        for (int n = n0; n < n1; n += 4) {
            int nr = imin(4, n1 - n);
            for (int r = 0; r < nr; r++) {
                const uint8_t *row = w + (size_t)(n + r) * rb;
                const uint16_t *srow = sc + (size_t)(n + r) * sb;
                for (int k = 0; k < kn; k += 32) {
                    /* 16 bytes = 32 nibbles in input order -> 32 bytes */
                    __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                        (const __m128i *)(row + (size_t)(kc + k) / 2)));
                    __m256i nib = _mm256_or_si256(
                        _mm256_and_si256(b, _mm256_set1_epi16(0x0f)),
                        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0xf0)), 4));
                    __m512 s = _mm512_set1_ps(kt__moe_bf16_f32(srow[(kc + k) / 32]));
                    __m512i eight = _mm512_set1_epi32(8);
                    __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(
                        _mm512_cvtepu8_epi32(_mm256_castsi256_si128(nib)), eight));
                    __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(
                        _mm512_cvtepu8_epi32(_mm256_extracti128_si256(nib, 1)), eight));
                    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, s), _mm512_mul_ps(lo, s));
                    _mm512_storeu_si512(deq + (size_t)r * KC_DEQ + k, (__m512i)v);
                }
            }
            tiles_bf16(deq, KC_DEQ, nr, Abf, a_stride, rows, M, kc, kn, C + (n - n0), ldc,
                       kc > k0);
        }
    }
}

static const kt__moe_kernels k_bf16 = {"avx512-bf16", KT__ACT_BF16, quant_bf16, gemm_bf16, 0};
static const kt__moe_kernels k_fp8 = {"avx512-fp8", KT__ACT_BF16, quant_bf16, gemm_fp8,
                                      4 * KC_DEQ * 2};
static const kt__moe_kernels k_int4 = {"avx512-vnni", KT__ACT_Q8P64, quant_q8p64, gemm_int4,
                                       4 * KC_DEQ * 2};

const kt__moe_kernels *kt__moe_kernels_avx512(int method)
{
    switch (method) {
    case KT_METHOD_BF16:
        return &k_bf16;
    case KT_METHOD_FP8:
        return &k_fp8;
    case KT_METHOD_RAWINT4:
        return &k_int4;
    default:
        return NULL;
    }
}
