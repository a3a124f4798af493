/* AVX-512 AMXINT8 kernel: int8 weights turned into BF16 in registers (exact:
 * |q| <= 128), dot products with BF16 activations by vdpbf16ps; the per-row
 * scale is applied once per output in F32. Decode streams each row once for
 * up to 4 tokens; larger batches take the AMX path where there is one. */
#include <immintrin.h>

#include "moe_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

/* 32 int8 -> 32 BF16 in input order. */
ALWAYS_INLINE __m512bh int8x32_bf16(__m256i v)
{
    __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
    return _mm512_cvtne2ps_pbh(hi, lo);
}

/* out[m * 4 + r] = sum_k a_m[k] q_r[k] for 4 rows and MR (1..4) tokens. */
ALWAYS_INLINE void tile_int8(const int8_t *const *w, const uint16_t *const *a, const int MR,
                             int k0, int k1, float *out)
{
    __m512 acc[4][4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm512_setzero_ps();
    /* hot loop: 32 inputs, 4 rows, MR tokens */
    for (int k = k0; k < k1; k += 32) {
        int left = k1 - k;
        __mmask32 msk = left >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << left) - 1);
        __m512bh x[4];
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            x[m] = (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + k);
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            _mm_prefetch((const char *)(w[r] + k) + 1024, _MM_HINT_T0);
            __m512bh wv = int8x32_bf16(_mm256_maskz_loadu_epi8(msk, w[r] + k));
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv, x[m]);
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            out[m * 4 + r] = _mm512_reduce_add_ps(acc[m][r]);
}

static void gemm_int8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    const int8_t *q = W->w;
    const float *scale = W->scale;
    int K = W->cols;
    for (int n = n0; n < n1; n += 4) {
        int nr = n1 - n < 4 ? n1 - n : 4;
        const int8_t *wr[4];
        for (int r = 0; r < 4; r++)
            wr[r] = q + (size_t)(n + (r < nr ? r : nr - 1)) * K;
        for (int m = 0; m < M; m += 4) {
            int mr = M - m < 4 ? M - m : 4;
            const uint16_t *a[4];
            for (int i = 0; i < 4; i++)
                a[i] = arow(A, a_stride, rows, m + (i < mr ? i : mr - 1));
            float t[16];
            switch (mr) {
            case 1: tile_int8(wr, a, 1, k0, k1, t); break;
            case 2: tile_int8(wr, a, 2, k0, k1, t); break;
            case 3: tile_int8(wr, a, 3, k0, k1, t); break;
            default: tile_int8(wr, a, 4, k0, k1, t); break;
            }
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++)
                    C[(size_t)(m + i) * ldc + (n + r - n0)] = t[i * 4 + r] * scale[n + r];
        }
    }
}

static const kt__moe_kernels avx512_int8 = {"avx512-int8w", KT__ACT_BF16, kt__moe_quant_bf16,
                                            gemm_int8, 0};

const kt__moe_kernels *kt__moe_int8_avx512(void)
{
    return &avx512_int8;
}
