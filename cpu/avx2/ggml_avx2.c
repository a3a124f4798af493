/* AVX2 dot products of ggml block types with their quantized activations
 * (LLAMAFILE decode). Same maths as cpu/ref/ggml_quants.c; only the float
 * summation order differs. Runs only after kt_hw_isa() reported AVX2 + FMA. */
#include <immintrin.h>
#include <string.h>

#include "avx2/ggml_x86.h"
#include "moe_kernels.h"

/* 32 x (s8 * s8) summed into 8 int32 lanes: |x| * (y signed like x). */
static inline __m256i dot_s8(__m256i x, __m256i y)
{
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* sum_b d_x d_y sum_j (q_j - 8) y_j */
float kt__ggml_vec_dot_q4_0_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q = _mm256_sub_epi8(unpack_nibbles32(x[i].qs), _mm256_set1_epi8(8));
        __m256i a = _mm256_loadu_si256((const __m256i *)y[i].qs);
        float d = f16(x[i].d) * f16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8(q, a)), _mm256_set1_ps(d), acc);
    }
    return hsum8(acc);
}

float kt__ggml_vec_dot_q8_0_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q8_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i a = _mm256_loadu_si256((const __m256i *)y[i].qs);
        float d = f16(x[i].d) * f16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8(q, a)), _mm256_set1_ps(d), acc);
    }
    return hsum8(acc);
}

/* acc + float(isum) d_y d_x, and *mins += d_y dmin_x msum: a super-block of
 * a K type with minimums (Q2_K, Q4_K, Q5_K). */
static inline __m256 acc_dmin(__m256 acc, __m256i isum, float dy, uint16_t dx, uint16_t dmin,
                              int msum, float *mins)
{
    *mins += dy * f16(dmin) * (float)msum;
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * f16(dx)), acc);
}

/* acc + float(isum + (corr in lane 0)) * d: a super-block's integer sums with
 * a correction (Q6_K's -32, Q3_K's -4 offsets), scaled. */
static inline __m256 acc_block(__m256 acc, __m256i isum, int corr, float d)
{
    __m256i c = _mm256_setr_epi32(corr, 0, 0, 0, 0, 0, 0, 0);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(isum, c)), _mm256_set1_ps(d), acc);
}

/* sum_b d_y (d_x sum_g sc_g sum q y - dmin_x sum_g m_g bsum_g), 8 groups of 32 */
float kt__ggml_vec_dot_q4_K_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_K *x = vx;
    const kt_block_q8_K *y = vy;
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        uint8_t sc[8];
        int msum = k4_scales(x[i].scales, &y[i], sc);
        __m256i isum = _mm256_setzero_si256();
        /* hot loop: 64 elements (two groups) per step */
        for (int p = 0; p < 4; p++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * p));
            __m256i lo = _mm256_and_si256(q, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            __m256i a0 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * p));
            __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * p + 32));
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0),
                                           _mm256_set1_epi16(sc[2 * p]));
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1),
                                           _mm256_set1_epi16(sc[2 * p + 1]));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
        }
        acc = acc_dmin(acc, isum, y[i].d, x[i].d, x[i].dmin, msum, &mins);
    }
    return hsum8(acc) - mins;
}

/* sum_b d_x d_y sum_g sc_g sum (q - 32) y, 16 groups of 16; the -32 comes
 * from the activation's block sums: sum (q-32) y = sum q y - 32 bsum */
float kt__ggml_vec_dot_q6_K_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q6_K *x = vx;
    const kt_block_q8_K *y = vy;
    const __m256i low4 = _mm256_set1_epi8(15), two = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        const int8_t *sc = x[i].scales;
        int offset = 0;
        for (int g = 0; g < 16; g++)
            offset += sc[g] * y[i].bsums[g];
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            /* the four 32-element slices of this half: 6-bit codes 0..63 */
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
                                   _mm256_slli_epi16(_mm256_and_si256(hb, two), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                                   _mm256_slli_epi16(
                                       _mm256_and_si256(_mm256_srli_epi16(hb, 2), two), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                   _mm256_slli_epi16(
                                       _mm256_and_si256(_mm256_srli_epi16(hb, 4), two), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                   _mm256_slli_epi16(
                                       _mm256_and_si256(_mm256_srli_epi16(hb, 6), two), 4));
            for (int s = 0; s < 4; s++) {
                int g = 8 * h + 2 * s;   /* the slice spans groups g and g + 1 */
                __m256i a = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * s));
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                isum = _mm256_add_epi32(isum,
                                        _mm256_madd_epi16(_mm256_maddubs_epi16(q[s], a), scv));
            }
        }
        acc = acc_block(acc, isum, -32 * offset, y[i].d * f16(x[i].d));
    }
    return hsum8(acc);
}

/* ---- the other block types ------------------------------------------------- */

/* 0xff in byte j where bit j of the 32-bit word at qh is set. */
static inline __m256i bits_to_bytes(const uint8_t *qh)
{
    uint32_t bits;
    __builtin_memcpy(&bits, qh, 4);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                             0x0101010101010101ll, 0x0000000000000000ll);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfell));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* 32 x (u8 * s8) summed into 8 int32 lanes. */
static inline __m256i dot_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* sum_b d_x d_y sum q y + m_x s_y */
float kt__ggml_vec_dot_q4_1_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_1 *x = vx;
    const kt_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float ms = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)y[i].qs);
        float d = f16(x[i].d) * f16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(unpack_nibbles32(x[i].qs), a)),
                              _mm256_set1_ps(d), acc);
        ms += f16(x[i].m) * f16(y[i].s);
    }
    return hsum8(acc) + ms;
}

/* 5-bit codes: nibble | (qh bit) << 4 */
static inline __m256i q5_codes(const uint8_t *qs, const uint8_t *qh)
{
    return _mm256_or_si256(unpack_nibbles32(qs),
                           _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
}

/* sum_b d_x d_y sum (q - 16) y */
float kt__ggml_vec_dot_q5_0_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q = _mm256_sub_epi8(q5_codes(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        __m256i a = _mm256_loadu_si256((const __m256i *)y[i].qs);
        float d = f16(x[i].d) * f16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8(q, a)), _mm256_set1_ps(d), acc);
    }
    return hsum8(acc);
}

float kt__ggml_vec_dot_q5_1_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_1 *x = vx;
    const kt_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float ms = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)y[i].qs);
        float d = f16(x[i].d) * f16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(q5_codes(x[i].qs, x[i].qh), a)),
                              _mm256_set1_ps(d), acc);
        ms += f16(x[i].m) * f16(y[i].s);
    }
    return hsum8(acc) + ms;
}

/* The grid levels of 32 IQ4 codes (a 16-entry byte table lookup). */
static inline __m256i iq4_levels(const uint8_t *qs)
{
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)kt__iq4nl_values));
    return _mm256_shuffle_epi8(table, unpack_nibbles32(qs));
}

/* sum_b d_x d_y sum level(q) y */
float kt__ggml_vec_dot_iq4_nl_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_iq4_nl *x = vx;
    const kt_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)y[i].qs);
        float d = f16(x[i].d) * f16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8(iq4_levels(x[i].qs), a)),
                              _mm256_set1_ps(d), acc);
    }
    return hsum8(acc);
}

/* sum_b d_x d_y sum_ib (ls_ib - 32) sum level(q) y */
float kt__ggml_vec_dot_iq4_xs_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_iq4_xs *x = vx;
    const kt_block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        __m256i isum = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) |
                     (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            __m256i q = iq4_levels(x[i].qs + 16 * ib);
            __m256i a = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * ib));
            __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, _mm256_set1_epi16(
                                                                    (short)(ls - 32))));
        }
        float d = y[i].d * f16(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
    }
    return hsum8(acc);
}

/* sum_b d_y (d_x sum_g sc_g sum q y - dmin_x sum_g m_g bsum_g), q = 5 bits */
float kt__ggml_vec_dot_q5_K_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_K *x = vx;
    const kt_block_q8_K *y = vy;
    const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        uint8_t sc[8];
        int msum = k4_scales(x[i].scales, &y[i], sc);
        __m256i hb = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i isum = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * p));
            /* bit 2p of qh[l] is group 2p's fifth bit, bit 2p+1 group 2p+1's */
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * p), one);
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * p + 1), one);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), _mm256_slli_epi16(h0, 4));
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                                         _mm256_slli_epi16(h1, 4));
            __m256i a0 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * p));
            __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * p + 32));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0),
                                                            _mm256_set1_epi16(sc[2 * p])));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1),
                                                            _mm256_set1_epi16(sc[2 * p + 1])));
        }
        acc = acc_dmin(acc, isum, y[i].d, x[i].d, x[i].dmin, msum, &mins);
    }
    return hsum8(acc) - mins;
}

/* Scales of the two 16-element groups a 32-element slice spans. */
static inline __m256i two_group_scales(int a, int b)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
}

/* sum_b d_y (d_x sum_g sc_g sum q y - dmin_x sum_g m_g bsum_g), q = 2 bits,
 * 16 groups of 16 */
float kt__ggml_vec_dot_q2_K_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q2_K *x = vx;
    const kt_block_q8_K *y = vy;
    const __m256i mask2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        const uint8_t *sc = x[i].scales;
        int msum = 0;
        for (int g = 0; g < 16; g++)
            msum += (sc[g] >> 4) * y[i].bsums[g];
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int s = 0; s < 4; s++) {
                int g = 8 * h + 2 * s;
                __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), mask2);
                __m256i a = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * s));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(c, a),
                                                                two_group_scales(sc[g] & 15,
                                                                                 sc[g + 1] & 15)));
            }
        }
        acc = acc_dmin(acc, isum, y[i].d, x[i].d, x[i].dmin, msum, &mins);
    }
    return hsum8(acc) - mins;
}

/* sum_b d_x d_y sum_g sc_g (sum c y - 4 bsum_g), c = q2 | hbit << 2 in 0..7
 * (the code minus 4 is q - 4 (1 - hbit)) */
float kt__ggml_vec_dot_q3_K_avx2(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q3_K *x = vx;
    const kt_block_q8_K *y = vy;
    const __m256i mask2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int sc[16], offset = 0;
        for (int g = 0; g < 16; g++) {
            int lo = g < 8 ? x[i].scales[g] & 15 : x[i].scales[g - 8] >> 4;
            int hi = (x[i].scales[8 + g % 4] >> (2 * (g / 4))) & 3;
            sc[g] = (lo | (hi << 4)) - 32;
            offset += sc[g] * y[i].bsums[g];
        }
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int s = 0; s < 4; s++) {
                int g = 8 * h + 2 * s;
                __m256i hbit = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + s), one);
                __m256i c = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), mask2),
                                            _mm256_slli_epi16(hbit, 2));
                __m256i a = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * s));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(c, a),
                                                                two_group_scales(sc[g],
                                                                                 sc[g + 1])));
            }
        }
        acc = acc_block(acc, isum, -4 * offset, y[i].d * f16(x[i].d));
    }
    return hsum8(acc);
}

/* Q8_0 (q81: Q8_1) activation blocks, bit for bit ggml's from_float (the scalar
 * one calls nearbyintf per input: 15 us of the 2048 inputs' R40 row on a Zen 3
 * core, while the other worker waits at the barrier): per 32 inputs amax, id =
 * 127 / amax, q = vcvtps2dq(x id) (round to nearest even, as nearbyintf), d =
 * amax / 127 in f16 by vcvtps2ph (round to nearest even, as the reference). */
void kt__lf_quant_q8_avx2(const float *x, void *y, int nblocks, _Bool q81)
{
    const size_t bytes = q81 ? sizeof(kt_block_q8_1) : sizeof(kt_block_q8_0);
    const size_t oq = q81 ? 4 : 2;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    /* vpackssdw / vpacksswb interleave the 128-bit lanes: this puts them back */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < nblocks; b++, x += 32) {
        uint8_t *blk = (uint8_t *)y + (size_t)b * bytes;
        __m256 v[4];
        for (int i = 0; i < 4; i++)
            v[i] = _mm256_loadu_ps(x + 8 * i);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]),
                                               _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]),
                                               _mm256_andnot_ps(sign, v[3])));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h), d = amax / 127.0f;
        __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i q[4];
        for (int i = 0; i < 4; i++)
            q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
        __m256i q16 = _mm256_packs_epi32(q[0], q[1]), q16b = _mm256_packs_epi32(q[2], q[3]);
        __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16, q16b), order);
        _mm256_storeu_si256((__m256i *)(blk + oq), q8);
        uint16_t hd = (uint16_t)_mm_extract_epi16(
            _mm_cvtps_ph(_mm_set_ss(d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0);
        memcpy(blk, &hd, 2);
        if (q81) {
            int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                                _mm256_add_epi32(q[2], q[3])));
            uint16_t hs = (uint16_t)_mm_extract_epi16(
                _mm_cvtps_ph(_mm_set_ss(d * (float)sum), _MM_FROUND_TO_NEAREST_INT |
                                                             _MM_FROUND_NO_EXC),
                0);
            memcpy(blk + 2, &hs, 2);
        }
    }
}

/* Q8_K activation blocks (the partner of Q2_K..Q6_K and IQ4_XS), bit for bit the
 * reference quantizer (cpu/ref/ggml_quants.c, which spends most of the AVX2 set's
 * Q8_K section in round_even per input): per 256 inputs
 *
 *   max = the input of largest magnitude (the first one on ties), iscale = -127 / max
 *   q   = min(vcvtps2dq(iscale x), 127)     round to nearest even, as round_even
 *   bsums[g] = sum of codes 16 g .. 16 g + 15,  d = 1 / iscale
 *
 * and all zero when every input is. */
void kt__lf_quant_q8k_avx2(const float *x, void *y, int nblocks)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i cap = _mm256_set1_epi32(127);
    /* vpackssdw / vpacksswb interleave the 128-bit lanes: this puts them back */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < nblocks; b++, x += 256) {
        kt_block_q8_K *blk = (kt_block_q8_K *)y + b;
        /* [256] inputs: max |x| in 4 running maxima */
        __m256 m[4];
        for (int j = 0; j < 4; j++)
            m[j] = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * j));
        for (int i = 4; i < 32; i++)
            m[i % 4] = _mm256_max_ps(m[i % 4], _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)));
        __m256 mm = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(mm), _mm256_extractf128_ps(mm, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        if (amax == 0.0f) {
            memset(blk, 0, sizeof *blk);
            continue;
        }
        float max = 0.0f;
        const __m256 am = _mm256_set1_ps(amax);
        for (int i = 0; i < 32; i++) {
            int k = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)), am, _CMP_EQ_OQ));
            if (k) {
                max = x[8 * i + __builtin_ctz((unsigned)k)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        for (int i = 0; i < 8; i++) { /* codes 32 i .. + 31: bsums 2 i, 2 i + 1 */
            __m256i q[4];
            for (int j = 0; j < 4; j++)
                q[j] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * i + 8 * j))),
                    cap);
            __m256i q8 = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
                order);
            _mm256_storeu_si256((__m256i *)(blk->qs + 32 * i), q8);
            /* [q0+q1 lanes 0+1, 2+3, q2+q3 0+1, 2+3 | 4+5, 6+7, ...], then both sums twice */
            __m256i t =
                _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            t = _mm256_hadd_epi32(t, t);
            __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            blk->bsums[2 * i] = (int16_t)_mm_cvtsi128_si32(s2);
            blk->bsums[2 * i + 1] = (int16_t)_mm_extract_epi32(s2, 1);
        }
        blk->d = 1 / iscale;
    }
}

/* What the decode kernels read beside Q8_K block q, sub-blocks sb0 .. sb0 + 7 of
 * the row's nb (cpu/ref/moe_llamafile.c's Q8_K section; its scalar loop is the
 * reference), from its codes in 8 registers. Per sub-block j of 32 codes:
 *
 *   d32[j] = d,  bs[j] = the codes' sum,  ds[j] = d x bs[j]
 *   codes: dword p of the sub-block (codes 4p..4p+3; p 4..7 the second 16's) where
 *          the Q40X order puts it: an 8 x 8 transpose of dwords, lane j sub-block j
 *   b6lo / b6hi[2 j + k] = -32 x the sum of codes 4p + 2k, 4p + 2k + 1 (p < 4) of the
 *          first / second 16 (the Q6KX biases)
 *
 * (arrays indexed by the row's sub-block: ds[sb0 + j] etc.; b6lo / b6hi by 2 sb0). */
void kt__lf_q8k_extras_avx2(const void *q8k, int sb0, int nb, float *ds, float *d32,
                            int16_t *bs, uint8_t *codes, int16_t *b6lo, int16_t *b6hi)
{
    const kt_block_q8_K *q = q8k;
    __m256i c[8]; /* [8 sub-blocks][8 dwords] */
    for (int j = 0; j < 8; j++)
        c[j] = _mm256_loadu_si256((const __m256i *)(q->qs + 32 * j));
    /* bs, ds, d32 from the bsums' pairs */
    __m128i b16 = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)q->bsums),
                                 _mm_loadu_si128((const __m128i *)(q->bsums + 8)));
    _mm_storeu_si128((__m128i *)(bs + sb0), b16);
    const __m256 d = _mm256_set1_ps(q->d);
    _mm256_storeu_ps(ds + sb0, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(b16))));
    _mm256_storeu_ps(d32 + sb0, d);
    /* t[2i], t[2i + 1]: dwords 0, 1, 4, 5 / 2, 3, 6, 7 of sub-blocks 2i, 2i + 1 interleaved */
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(c[2 * i], c[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(c[2 * i], c[2 * i + 1]);
    }
    /* u[4h + p]: dword p (lane 0) and p + 4 (lane 1) of sub-blocks 4h .. 4h + 3 */
    for (int h = 0; h < 2; h++) {
        u[4 * h] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    int gb, g = kt__q40x_group(sb0, nb, &gb), per = 16 / g;
    for (int p = 0; p < 4; p++) { /* the lo piece p and the hi piece p */
        uint8_t *dst = codes + (size_t)(gb / 4 + p / per) * 128 + 4 * (sb0 - gb + g * (p % per));
        _mm256_storeu_si256((__m256i *)dst, _mm256_permute2x128_si256(u[p], u[4 + p], 0x20));
        _mm256_storeu_si256((__m256i *)(dst + 64),
                            _mm256_permute2x128_si256(u[p], u[4 + p], 0x31));
    }
    /* the biases: pair sums, then per 16 the even pairs' and the odd pairs' sums in
     * its first dword (lane 0: the first 16, lane 1: the second) */
    const __m256i ones = _mm256_set1_epi8(1), m32 = _mm256_set1_epi16(-32);
    __m256i e[8];
    for (int j = 0; j < 8; j++) {
        __m256i pr = _mm256_maddubs_epi16(ones, c[j]);
        pr = _mm256_add_epi16(pr, _mm256_shuffle_epi32(pr, 0x4e));
        pr = _mm256_add_epi16(pr, _mm256_shuffle_epi32(pr, 0xb1));
        e[j] = _mm256_mullo_epi16(pr, m32);
    }
    /* dword 0 of each lane of e[0..7] into [lo of 0..7], [hi of 0..7] */
    __m256i f[4];
    for (int i = 0; i < 4; i++)
        f[i] = _mm256_unpacklo_epi32(e[2 * i], e[2 * i + 1]);
    __m256i g03 = _mm256_unpacklo_epi64(f[0], f[1]), g47 = _mm256_unpacklo_epi64(f[2], f[3]);
    _mm256_storeu_si256((__m256i *)(b6lo + 2 * sb0), _mm256_permute2x128_si256(g03, g47, 0x20));
    _mm256_storeu_si256((__m256i *)(b6hi + 2 * sb0), _mm256_permute2x128_si256(g03, g47, 0x31));
}
