/* LLAMAFILE tile kernel for Q4_0 and Q8_0 weights with Q8_0 activations
 * (AVX-512 VNNI): 4 weight rows x up to 4 tokens per tile, so each weight
 * block is unpacked once for all tokens and each activation block loaded once
 * for all rows. Same maths as the ggml vec_dots (exact integer block sums,
 * one F32 scale product per block); only the float summation order differs.
 * Runs only after kt_hw_isa() reported AVX512F/BW/VL/DQ + VNNI. */
#include <immintrin.h>

#include "moe_kernels.h"
#include "ref/ggml_quants.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float f16(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* Lanes 0..7: a, lanes 8..15: b. */
ALWAYS_INLINE __m512 two_scales(float a, float b)
{
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* The 64 codes of two Q4_0 blocks in element order (0..15 low nibbles, 16..31 high). */
ALWAYS_INLINE __m512i q4_codes(const kt_block_q4_0 *x)
{
    __m128i v0 = _mm_loadu_si128((const __m128i *)x[0].qs);
    __m128i v1 = _mm_loadu_si128((const __m128i *)x[1].qs);
    __m128i m = _mm_set1_epi8(15);
    __m256i b0 = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v0, 4), m), _mm_and_si128(v0, m));
    __m256i b1 = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v1, 4), m), _mm_and_si128(v1, m));
    return _mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1);
}

ALWAYS_INLINE __m512i q8_codes(const kt_block_q8_0 *x)
{
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[0].qs)),
        _mm256_loadu_si256((const __m256i *)x[1].qs), 1);
}

/* out[r * 4 + m] = sum over block pairs [0, np) of row r . token m.
 * Q4_0: sum_b dw da (sum q a - 8 sum a);  Q8_0: sum_b dw da sum q a. */
ALWAYS_INLINE void tile(const bool q4, const uint8_t *const *w, const kt_block_q8_0 *const *a,
                        const int MR, int np, float *out)
{
    __m512 acc[4][4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            acc[r][m] = _mm512_setzero_ps();
    const __m512i eight = _mm512_set1_epi8(8);
    for (int p = 0; p < np; p++) {
        __m512i av[4], s8[4];
        __m512 da[4];
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            const kt_block_q8_0 *y = a[m] + 2 * p;
            av[m] = q8_codes(y);
            da[m] = two_scales(f16(y[0].d), f16(y[1].d));
            if (q4)
                s8[m] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, av[m]);
        }
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512i wq;
            __m512 dw;
            __mmask64 neg = 0;
            if (q4) {
                const kt_block_q4_0 *x = (const kt_block_q4_0 *)w[r] + 2 * p;
                wq = q4_codes(x);
                dw = two_scales(f16(x[0].d), f16(x[1].d));
            } else {
                const kt_block_q8_0 *x = (const kt_block_q8_0 *)w[r] + 2 * p;
                __m512i q = q8_codes(x);
                neg = _mm512_movepi8_mask(q);
                wq = _mm512_abs_epi8(q);
                dw = two_scales(f16(x[0].d), f16(x[1].d));
            }
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++) {
                __m512i s;
                if (q4) {
                    s = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, av[m]),
                                         s8[m]);
                } else {
                    /* |q| . (a with q's sign): u8 x s8 */
                    __m512i as = _mm512_mask_sub_epi8(av[m], neg, _mm512_setzero_si512(), av[m]);
                    s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, as);
                }
                acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, da[m]),
                                            acc[r][m]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            out[r * 4 + m] = _mm512_reduce_add_ps(acc[r][m]);
}

/* C[m][n - n0] = row n . token m over blocks [b0, b1) of 32, rows n0..n1 of
 * W (Q4_0 or Q8_0, row stride wrow bytes), tokens a[m] (Q8_0 block arrays,
 * block 0 = input 0). An odd last block goes through the ggml vec_dot. */
void kt__lf_gemm_q80_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                            const void *const *act, int M, float *C, int ldc)
{
    const kt_block_q8_0 *const *a = (const kt_block_q8_0 *const *)act;
    bool q4 = type == KT_TYPE_Q4_0;
    size_t bb = q4 ? sizeof(kt_block_q4_0) : sizeof(kt_block_q8_0);
    int np = (b1 - b0) / 2;
    bool odd = (b1 - b0) & 1;
    kt_ggml_vec_dot_fn dot1 = q4 ? kt__ggml_vec_dot_q4_0_avx512 : kt__ggml_vec_dot_q8_0_avx512;
    for (int n = n0; n < n1; n += 4) {
        int nr = n1 - n < 4 ? n1 - n : 4;
        const uint8_t *wr[4];
        for (int r = 0; r < 4; r++)
            wr[r] = (const uint8_t *)W + (size_t)(n + (r < nr ? r : nr - 1)) * wrow + b0 * bb;
        for (int m = 0; m < M; m += 4) {
            int mr = M - m < 4 ? M - m : 4;
            const kt_block_q8_0 *ar[4];
            for (int i = 0; i < 4; i++)
                ar[i] = a[m + (i < mr ? i : mr - 1)] + b0;
            float t[16];
            if (q4) {
                switch (mr) {
                case 1: tile(true, wr, ar, 1, np, t); break;
                case 2: tile(true, wr, ar, 2, np, t); break;
                case 3: tile(true, wr, ar, 3, np, t); break;
                default: tile(true, wr, ar, 4, np, t); break;
                }
            } else {
                switch (mr) {
                case 1: tile(false, wr, ar, 1, np, t); break;
                case 2: tile(false, wr, ar, 2, np, t); break;
                case 3: tile(false, wr, ar, 3, np, t); break;
                default: tile(false, wr, ar, 4, np, t); break;
                }
            }
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++) {
                    float v = t[r * 4 + i];
                    if (odd)
                        v += dot1(32, wr[r] + (size_t)(2 * np) * bb, ar[i] + 2 * np);
                    C[(size_t)(m + i) * ldc + (n + r - n0)] = v;
                }
        }
    }
}
