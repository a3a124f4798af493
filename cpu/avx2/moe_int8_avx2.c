/* AVX2 AMXINT8 kernel: int8 weights widened to F32, F32 activations, FMA;
 * the per-row scale is applied once per output. */
#include <immintrin.h>

#include "moe_kernels.h"

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* C = A W^T for 2 rows x up to 4 tokens at a time. */
static void gemm_int8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    const int8_t *q = W->w;
    const float *scale = W->scale;
    int K = W->cols;
    for (int n = n0; n < n1; n += 2) {
        int nr = n + 1 < n1 ? 2 : 1;
        const int8_t *w0 = q + (size_t)n * K, *w1 = q + (size_t)(n + nr - 1) * K;
        for (int m = 0; m < M; m += 4) {
            int mr = M - m < 4 ? M - m : 4;
            const float *a[4];
            for (int i = 0; i < 4; i++)
                a[i] = arow(A, a_stride, rows, m + (i < mr ? i : mr - 1));
            __m256 acc[4][2];
            for (int i = 0; i < 4; i++)
                acc[i][0] = acc[i][1] = _mm256_setzero_ps();
            int k = k0;
            /* hot loop: 8 inputs, 2 rows, 4 tokens */
            for (; k + 8 <= k1; k += 8) {
                __m256 f0 = _mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w0 + k))));
                __m256 f1 = _mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w1 + k))));
                for (int i = 0; i < 4; i++) {
                    __m256 x = _mm256_loadu_ps(a[i] + k);
                    acc[i][0] = _mm256_fmadd_ps(f0, x, acc[i][0]);
                    acc[i][1] = _mm256_fmadd_ps(f1, x, acc[i][1]);
                }
            }
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++) {
                    const int8_t *wr = r ? w1 : w0;
                    float s = hsum8(acc[i][r]);
                    for (int kk = k; kk < k1; kk++)
                        s += a[i][kk] * wr[kk];
                    C[(size_t)(m + i) * ldc + (n + r - n0)] = s * scale[n + r];
                }
        }
    }
}

static const kt__moe_kernels avx2_int8 = {"avx2-int8w", KT__ACT_F32, kt__moe_quant_f32, gemm_int8,
                                          0, NULL};

const kt__moe_kernels *kt__moe_int8_avx2(void)
{
    return &avx2_int8;
}
