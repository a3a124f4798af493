/* Helpers of the ggml vec_dots shared by cpu/avx2/ggml_avx2.c and
 * cpu/avx512/ggml_avx512.c: AVX2 + F16C only, so either set may include them
 * (each compiles them with its own flags; they run under its own check). */
#ifndef KT_CPU_GGML_X86_H
#define KT_CPU_GGML_X86_H

#include <immintrin.h>
#include <stdint.h>

#include "ref/ggml_quants.h"

/* f16 -> f32 in hardware (F16C; exact, like the scalar reference). */
static inline float f16(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* Sum of the 8 floats of v. */
static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sum of the 8 int32 of v. */
static inline int hsum_i32(__m256i v)
{
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

/* The 32 4-bit codes of 16 bytes: low nibbles (elements 0..15), then high. */
static inline __m256i unpack_nibbles32(const uint8_t *qs)
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* Q4_K / Q5_K: the 8 (scale, min) pairs of 6 bits packed in 12 bytes, and
 * sum_g m_g (bsum_2g + bsum_2g+1) of the Q8_K block y (the minimum term). */
static inline int k4_scales(const uint8_t *s, const kt_block_q8_K *y, uint8_t sc[8])
{
    uint8_t m[8];
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
    int msum = 0;
    for (int g = 0; g < 8; g++)
        msum += m[g] * (y->bsums[2 * g] + y->bsums[2 * g + 1]);
    return msum;
}

#endif
