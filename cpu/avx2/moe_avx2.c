/*
 * AVX2 + FMA MoE kernels (compiled with -mavx2 -mfma -mf16c; run only when
 * kt_hw_isa() reports all three). F32 activations for BF16 and FP8 (weights
 * widened to f32 in registers), INT8 activations per 32-group for RAWINT4
 * (vpmaddubsw on the unsigned stored nibbles, the +8 offset removed with the
 * activation sums). 4 weight rows x 2 tokens per register tile.
 */
#include <immintrin.h>

#include "moe_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

ALWAYS_INLINE __m256 bf16x8(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* 8 E4M3 bytes -> f32: normals by re-biasing the exponent, subnormals m * 2^-9. */
ALWAYS_INLINE __m256 fp8x8(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7f));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
    __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
    return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
}

/* ---- BF16 and FP8: out[m * 4 + r] = sum_{k0 <= k < k1} w_r[k] a_m[k] ---- */

/* 8 weights of row r from k, widened to F32 (FP8: times the block scale). */
ALWAYS_INLINE __m256 widen8(const uint16_t *wb, const uint8_t *w8, const float *srow,
                            const int fp8, int k)
{
    return fp8 ? _mm256_mul_ps(fp8x8(w8 + k), _mm256_set1_ps(srow[k / 128])) : bf16x8(wb + k);
}

/* BF16 (fp8 = 0; wb rows) or FP8 (w8 rows, block scale rows srow). */
ALWAYS_INLINE void tile_plain(const uint16_t *const *wb, const uint8_t *const *w8,
                              const float *const *srow, const int fp8, const float *const *a,
                              const int MR, int k0, int k1, float *out)
{
    __m256 acc[2][4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm256_setzero_ps();
    int k = k0;
    /* hot loop */
    for (; k + 8 <= k1; k += 8) {
        __m256 v[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            v[r] = widen8(wb[r], w8[r], fp8 ? srow[r] : NULL, fp8, k);
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m256 x = _mm256_loadu_ps(a[m] + k);
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm256_fmadd_ps(v[r], x, acc[m][r]);
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            float s = hsum(acc[m][r]);
            for (int kk = k; kk < k1; kk++)
                s += fp8 ? kt__moe_e4m3_f32(w8[r][kk]) * srow[r][kk / 128] * a[m][kk]
                         : kt__moe_bf16_f32(wb[r][kk]) * a[m][kk];
            out[m * 4 + r] = s;
        }
}

static void gemm_plain(const kt__wmat *W, int fp8, int n0, int n1, int k0, int k1, const void *A,
                       size_t a_stride, const int32_t *rows, int M, float *C, int ldc)
{
    int cols = W->cols, cb = (cols + 127) / 128;
    for (int n = n0; n < n1; n += 4) {
        int nr = imin(4, n1 - n);
        const uint16_t *wb[4];
        const uint8_t *w8[4];
        const float *sr[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            int row = n + (r < nr ? r : nr - 1);
            wb[r] = (const uint16_t *)W->w + (size_t)row * cols;
            w8[r] = (const uint8_t *)W->w + (size_t)row * cols;
            sr[r] = fp8 ? (const float *)W->scale + (size_t)(row / 128) * cb : NULL;
        }
        for (int m = 0; m < M; m += 2) {
            int mr = imin(2, M - m);
            const float *a[2];
            #pragma GCC unroll 4
            for (int i = 0; i < 2; i++)
                a[i] = arow(A, a_stride, rows, m + (i < mr ? i : mr - 1));
            float t[8];
            switch (2 * fp8 + mr) {
            case 1: tile_plain(wb, w8, sr, 0, a, 1, k0, k1, t); break;
            case 2: tile_plain(wb, w8, sr, 0, a, 2, k0, k1, t); break;
            case 3: tile_plain(wb, w8, sr, 1, a, 1, k0, k1, t); break;
            default: tile_plain(wb, w8, sr, 1, a, 2, k0, k1, t); break;
            }
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++)
                    C[(size_t)(m + i) * ldc + (n - n0) + r] = t[i * 4 + r];
        }
    }
}

static void gemm_bf16(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    gemm_plain(W, 0, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
}

static void gemm_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                     void *scratch)
{
    (void)scratch;
    gemm_plain(W, 1, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
}

/* ---- RAWINT4 with Q8G32 activations ----
 * per group g: i = sum_k nib_k q_k (nib = value + 8, unsigned);
 * C += d_x[g] s_w[g] (i - 8 sum_k q_k) */
ALWAYS_INLINE void tile_int4(const uint8_t *w, const uint16_t *s, const int8_t *const *a,
                             const int MR, int K, int g0, int g1, float *out)
{
    __m256 acc[4];
    float corr[4] = {0, 0, 0, 0};
    const float *d[4];
    const int32_t *sums[4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        acc[m] = _mm256_setzero_ps();
        d[m] = kt__q8_scales(a[m], K);
        sums[m] = kt__q8_sums(a[m], K);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    /* hot loop: one group of 32 inputs per step */
    for (int g = g0; g < g1; g++) {
        __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(w + (size_t)g * 16)));
        __m256i nib = _mm256_or_si256(
            _mm256_and_si256(b, _mm256_set1_epi16(0x0f)),
            _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0xf0)), 4));
        float sw = kt__moe_bf16_f32(s[g]);
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(a[m] + (size_t)g * 32));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(nib, q), ones);
            float f = d[m][g] * sw;
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(f), acc[m]);
            corr[m] += (float)sums[m][g] * f;
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        out[m] = hsum(acc[m]) - corr[m];
}

static void gemm_int4(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    if (W->type == KT__INT4_TILED) { /* the repacked layout: the scalar kernel
                                       * (same activations; the backend repacks
                                       * for the AVX-512 set only) */
        kt__moe_kernels_ref(KT_METHOD_RAWINT4)->gemm(W, n0, n1, k0, k1, A, a_stride, rows, M,
                                                     C, ldc, scratch);
        return;
    }
    int K = W->cols;
    for (int n = n0; n < n1; n++) {
        const uint8_t *w = (const uint8_t *)W->w + (size_t)n * (K / 2);
        const uint16_t *s = (const uint16_t *)W->scale + (size_t)n * (K / 32);
        for (int m = 0; m < M; m += 4) {
            int mr = imin(4, M - m);
            const int8_t *a[4];
            for (int i = 0; i < 4; i++)
                a[i] = arow(A, a_stride, rows, m + (i < mr ? i : mr - 1));
            float t[4];
            switch (mr) {
            case 1: tile_int4(w, s, a, 1, K, k0 / 32, k1 / 32, t); break;
            case 2: tile_int4(w, s, a, 2, K, k0 / 32, k1 / 32, t); break;
            case 3: tile_int4(w, s, a, 3, K, k0 / 32, k1 / 32, t); break;
            default: tile_int4(w, s, a, 4, K, k0 / 32, k1 / 32, t); break;
            }
            for (int i = 0; i < mr; i++)
                C[(size_t)(m + i) * ldc + (n - n0)] = t[i];
        }
    }
}

static const kt__moe_kernels k_bf16 = {"avx2-bf16", KT__ACT_F32, kt__moe_quant_f32, gemm_bf16, 0,
                                       NULL};
static const kt__moe_kernels k_fp8 = {"avx2-fp8", KT__ACT_F32, kt__moe_quant_f32, gemm_fp8, 0,
                                      NULL};
static const kt__moe_kernels k_int4 = {"avx2-int8", KT__ACT_Q8G32, kt__moe_quant_q8g32,
                                       gemm_int4, 0, NULL};

const kt__moe_kernels *kt__moe_kernels_avx2(int method)
{
    switch (method) {
    case KT_METHOD_BF16:
        return &k_bf16;
    case KT_METHOD_FP8:
        return &k_fp8;
    case KT_METHOD_RAWINT4:
        return &k_int4;
    case KT_METHOD_AMXINT8:
        return kt__moe_int8_avx2();
    default:
        return NULL;
    }
}
