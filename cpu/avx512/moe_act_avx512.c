/*
 * The MoE backend's activation of prefill, 16 lanes at a time: with expf a
 * libm call per element, h = silu(g) u took 33 of 378 ms per DeepSeek-V3 call
 * of 4096 tokens on the 16-core Xeon (kt-bench moe, KT_MOE_PROFILE).
 */
#include <immintrin.h>

#include "moe_kernels.h"

/* e^x for x in [-87.3, 88.3]: x = i ln2 + r, i = round(x / ln2), ln2 in two
 * parts (Cody-Waite); e^r by Cephes' expf polynomial (relative error about
 * 1e-7 for |r| <= ln2 / 2); times 2^i by scalef. */
static inline __m512 exp16(__m512 x)
{
    __m512 fi = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fi, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(fi, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    /* 1 + r + r^2 p */
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, fi);
}

/* h[n] = g[n] / (1 + e^-g[n]) * u[n], n < len. -g is clamped to [-87.3,
 * 88.3], where e^-g is a normal number (silu(g) for g < -88.3 is then a tiny
 * negative number instead of -0); a NaN g gives NaN. */
void kt__moe_silu_mul_avx512(const float *g, const float *u, float *h, int len)
{
    const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int n = 0; n < len; n += 16) {
        __mmask16 m = len - n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - n)) - 1u);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + n), uv = _mm512_maskz_loadu_ps(m, u + n);
        /* max / min return their second operand for a NaN first: e finite */
        __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv), lo), hi);
        __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, exp16(x)));
        _mm512_mask_storeu_ps(h + n, m, _mm512_mul_ps(s, uv));
    }
}

/* kt__moe_read_sum 512 bytes a step: eight 64-byte loads into eight sums of 8
 * words, the rest by the scalar one (word sums mod 2^64: any order). */
uint64_t kt__moe_read_sum_avx512(const void *p, size_t n)
{
    const uint8_t *b = p;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    __m512i s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    size_t i = 0;
    for (; i + 512 <= n; i += 512) {
        const uint8_t *v = b + i;
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(v));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(v + 64));
        s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(v + 128));
        s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(v + 192));
        s4 = _mm512_add_epi64(s4, _mm512_loadu_si512(v + 256));
        s5 = _mm512_add_epi64(s5, _mm512_loadu_si512(v + 320));
        s6 = _mm512_add_epi64(s6, _mm512_loadu_si512(v + 384));
        s7 = _mm512_add_epi64(s7, _mm512_loadu_si512(v + 448));
    }
    s0 = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)),
                          _mm512_add_epi64(_mm512_add_epi64(s4, s5), _mm512_add_epi64(s6, s7)));
    /* the lanes summed as uint64_t: _mm512_reduce_add_epi64 adds them as long long
     * (gcc 12), an overflow UBSan stops at once the sums wrap */
    uint64_t w[8], sum = 0;
    _mm512_storeu_si512(w, s0);
    for (int l = 0; l < 8; l++)
        sum += w[l];
    return sum + kt__moe_read_sum(b + i, n - i);
}
