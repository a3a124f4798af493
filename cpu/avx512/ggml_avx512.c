/* AVX-512 (BW, VL, DQ, VNNI) dot products of ggml block types with their
 * quantized activations (LLAMAFILE decode). Same maths as the scalar
 * reference; only the float summation order differs. Runs only after
 * kt_hw_isa() reported AVX512F/BW/VL/DQ + VNNI. */
#include <immintrin.h>

#include "avx2/ggml_x86.h"

/* Two 256-bit halves -> one 512-bit register. */
static inline __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Scale vector: 8 lanes of a, then 8 lanes of b. */
static inline __m512 join_scales(float a, float b)
{
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* sum_b d_x d_y (sum_j q_j y_j - 8 sum_j y_j), two blocks per step (VNNI) */
float kt__ggml_vec_dot_q4_0_avx512(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    int64_t nb = n / 32, i = 0;
    for (; i + 1 < nb; i += 2) {
        __m512i q = join256(unpack_nibbles32(x[i].qs), unpack_nibbles32(x[i + 1].qs));
        __m512i a = join256(_mm256_loadu_si256((const __m256i *)y[i].qs),
                            _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, a);
        __m512i s8 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, a);
        __m512 d = join_scales(f16(x[i].d) * f16(y[i].d),
                               f16(x[i + 1].d) * f16(y[i + 1].d));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s, s8)), d, acc);
    }
    float tail = 0;
    for (; i < nb; i++) {   /* odd block count */
        __m256i q = unpack_nibbles32(x[i].qs);
        __m256i a = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i s = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, a),
                                     _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                                         _mm256_set1_epi8(8), a));
        tail += (float)hsum_i32(s) * (f16(x[i].d) * f16(y[i].d));
    }
    return _mm512_reduce_add_ps(acc) + tail;
}

/* sum_b d_x d_y sum_j x_j y_j: |x| . (y signed like x) with VNNI */
float kt__ggml_vec_dot_q8_0_avx512(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q8_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    __m512 acc = _mm512_setzero_ps();
    int64_t nb = n / 32, i = 0;
    for (; i + 1 < nb; i += 2) {
        __m512i q = join256(_mm256_loadu_si256((const __m256i *)x[i].qs),
                            _mm256_loadu_si256((const __m256i *)x[i + 1].qs));
        __m512i a = join256(_mm256_loadu_si256((const __m256i *)y[i].qs),
                            _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        __mmask64 neg = _mm512_movepi8_mask(q);
        __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), sa);
        __m512 d = join_scales(f16(x[i].d) * f16(y[i].d),
                               f16(x[i + 1].d) * f16(y[i + 1].d));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
    }
    float tail = 0;
    for (; i < nb; i++) {
        int s = 0;
        for (int j = 0; j < 32; j++)
            s += x[i].qs[j] * y[i].qs[j];
        tail += (float)s * (f16(x[i].d) * f16(y[i].d));
    }
    return _mm512_reduce_add_ps(acc) + tail;
}

/* Q4_K: 16-bit lanes of the scale of each pair of elements, two groups per
 * 512-bit step: [sc_a x 16 | sc_b x 16]. */
static inline __m512i pair_scales(int a, int b)
{
    return join256(_mm256_set1_epi16((short)a), _mm256_set1_epi16((short)b));
}

/* sum_b d_y (d_x sum_g sc_g sum q y - dmin_x sum_g m_g bsum_g) */
float kt__ggml_vec_dot_q4_K_avx512(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_K *x = vx;
    const kt_block_q8_K *y = vy;
    const __m512i low4 = _mm512_set1_epi8(15);
    __m512 acc = _mm512_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        uint8_t sc[8];
        int msum = k4_scales(x[i].scales, &y[i], sc);
        __m512i isum = _mm512_setzero_si512();
        /* hot loop: 64 elements (groups 2p, 2p+1) per step */
        for (int p = 0; p < 4; p++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * p));
            __m512i q = join256(b, _mm256_srli_epi16(b, 4));
            q = _mm512_and_si512(q, low4);
            __m512i a = _mm512_loadu_si512(y[i].qs + 64 * p);
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q, a),
                                       pair_scales(sc[2 * p], sc[2 * p + 1]));
        }
        float dall = y[i].d * f16(x[i].d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dall), acc);
        mins += y[i].d * f16(x[i].dmin) * (float)msum;
    }
    return _mm512_reduce_add_ps(acc) - mins;
}

/* sum_b d_x d_y (sum_g sc_g sum q y - 32 sum_g sc_g bsum_g), 16 groups of 16 */
float kt__ggml_vec_dot_q6_K_avx512(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q6_K *x = vx;
    const kt_block_q8_K *y = vy;
    const __m512i low4 = _mm512_set1_epi8(15), two = _mm512_set1_epi8(3);
    /* lane l (a pair of elements) of step k of a super-block belongs to group
     * 4k + l/8 */
    __m512i group_idx[4];
    for (int k = 0; k < 4; k++) {
        short idx[32];
        for (int l = 0; l < 32; l++)
            idx[l] = (short)(4 * k + l / 8);
        group_idx[k] = _mm512_loadu_si512(idx);
    }
    float sum = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        const int8_t *sc = x[i].scales;
        int offset = 0;
        for (int g = 0; g < 16; g++)
            offset += sc[g] * y[i].bsums[g];
        __m512i scales16 = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)));
        __m512i isum = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            /* ql[64h..64h+63]: low nibbles are elements 0..63 of this half,
             * high nibbles 64..127; qh[32h + l] bits 2s: slice s's top bits */
            __m512i l = _mm512_loadu_si512(x[i].ql + 64 * h);
            __m256i hb = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m512i hh = join256(hb, _mm256_srli_epi16(hb, 2));
            __m512i q0 = _mm512_or_si512(_mm512_and_si512(l, low4),
                                         _mm512_slli_epi16(_mm512_and_si512(hh, two), 4));
            __m512i q1 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hh, 4), two), 4));
            __m512i a0 = _mm512_loadu_si512(y[i].qs + 128 * h);
            __m512i a1 = _mm512_loadu_si512(y[i].qs + 128 * h + 64);
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q0, a0),
                                       _mm512_permutexvar_epi16(group_idx[2 * h], scales16));
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q1, a1),
                                       _mm512_permutexvar_epi16(group_idx[2 * h + 1],
                                                                scales16));
        }
        int total = _mm512_reduce_add_epi32(isum) - 32 * offset;
        sum += (float)total * (y[i].d * f16(x[i].d));
    }
    return sum;
}
