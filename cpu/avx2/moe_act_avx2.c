/*
 * The MoE backend's activation on AVX2 (CPUs without AVX-512F: the Zen 3 VM),
 * 8 lanes at a time, as cpu/avx512/moe_act_avx512.c does with 16: with expf a
 * libm call per element, h = silu(g) u of a Qwen3-30B-A3B decode item (768
 * rows) took about as long as reading 5% of the item's Q4_0 weights.
 */
#include <immintrin.h>

#include "moe_kernels.h"

/* e^x for x in [-87.3, 88.3]: x = i ln2 + r, i = round(x / ln2), ln2 in two
 * parts (Cody-Waite); e^r by Cephes' expf polynomial (relative error about
 * 1e-7 for |r| <= ln2 / 2); times 2^i built in the exponent bits (i in
 * [-126, 127]: a normal number). */
static inline __m256 exp8(__m256 x)
{
    __m256 fi = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fi, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fi, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    /* 1 + r + r^2 p */
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fi), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* h[n] = g[n] / (1 + e^-g[n]) * u[n], n < len. -g is clamped to [-87.3,
 * 88.3], where e^-g is a normal number (silu(g) for g < -88.3 is then a tiny
 * negative number instead of -0); a NaN g gives NaN. */
void kt__moe_silu_mul_avx2(const float *g, const float *u, float *h, int len)
{
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int n = 0; n < len; n += 8) {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(len - n), lane); /* the tail */
        __m256 gv = _mm256_maskload_ps(g + n, m), uv = _mm256_maskload_ps(u + n, m);
        /* max / min return their second operand for a NaN first: e finite */
        __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv), lo), hi);
        __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, exp8(x)));
        _mm256_maskstore_ps(h + n, m, _mm256_mul_ps(s, uv));
    }
}

/* kt__moe_read_sum 256 bytes a step: eight 32-byte loads into eight sums of 4
 * words (as kt-bench's stream read keeps eight loads in flight), the rest by
 * the scalar one; word sums mod 2^64 do not depend on the order. */
uint64_t kt__moe_read_sum_avx2(const void *p, size_t n)
{
    const uint8_t *b = p;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    __m256i s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        const __m256i *v = (const __m256i *)(b + i);
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(v));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(v + 1));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(v + 2));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(v + 3));
        s4 = _mm256_add_epi64(s4, _mm256_loadu_si256(v + 4));
        s5 = _mm256_add_epi64(s5, _mm256_loadu_si256(v + 5));
        s6 = _mm256_add_epi64(s6, _mm256_loadu_si256(v + 6));
        s7 = _mm256_add_epi64(s7, _mm256_loadu_si256(v + 7));
    }
    s0 = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)),
                          _mm256_add_epi64(_mm256_add_epi64(s4, s5), _mm256_add_epi64(s6, s7)));
    uint64_t w[4];
    _mm256_storeu_si256((__m256i *)w, s0);
    return w[0] + w[1] + w[2] + w[3] + kt__moe_read_sum(b + i, n - i);
}
