/*
 * Per-token INT8 activations for the AVX-512 VNNI kernels of AMXINT8 and
 * grouped INT4 (AVX-512 builds only): the BF16 activation rows of a call,
 * quantized over the call's inputs [k0, k1),
 *
 *   d_m = max_k |x_m[k]| / 127,   q_m[k] = round-to-even(x_m[k] * (127 / max|x_m|)),
 *
 * cached in the kernel's scratch for the epoch (the gate and up calls of an
 * item, the thread's next items of the same tokens reuse them). The AMX-INT8
 * tiles quantize with the same formula.
 */
#ifndef KT_CPU_Q8_TOKEN_H
#define KT_CPU_Q8_TOKEN_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "moe_kernels.h"

#define Q8T_TOK 256          /* tokens of one cached batch                   */
#define Q8T_BYTES (2u << 20) /* quantized activation bytes the cache holds   */
#define Q8T_GROUPS 512       /* per-64 sums per token the cache holds        */

/* One row's layout in the cache: `kpad` bytes (inputs padded to 64) in the
 * order the kernel asked for, then nothing else; per-token data separately. */
/* Which rows the cache holds (compared bytewise). */
typedef struct q8t_key {
    const void *A;
    const int32_t *rows;
    size_t a_stride;
    uint64_t epoch;
    int m0, mn, k0, k1, mode, valid;
} q8t_key;

typedef struct q8t_cache {
    q8t_key key;
    float d[Q8T_TOK];
    int32_t bsum[Q8T_BYTES / 64];      /* Q8T_S8*: [mn][kpad / 64] sums of q per block */
    _Alignas(64) uint8_t q[Q8T_BYTES]; /* [mn][kpad] */
} q8t_cache;

/* Cache modes: how each 64-input block of a row is stored. */
enum {
    Q8T_U8 = 1,     /* q + 128 in input order (vpdpbusd's unsigned operand)          */
    Q8T_S8_EO = 2,  /* q as int8, the 32 even inputs of the block, then the 32 odd   */
    Q8T_S8 = 3      /* q as int8 in input order                                     */
};

static inline __mmask32 q8t_mask32(int left)
{
    return left >= 32 ? ~(__mmask32)0 : (left <= 0 ? 0 : (((__mmask32)1 << left) - 1));
}

/* max |x[k]| over n BF16 values (as unsigned 15-bit magnitudes: the order of
 * the finite values), as F32. */
static inline float q8t_absmax_bf16(const uint16_t *x, int n)
{
    __m512i mx = _mm512_setzero_si512();
    for (int k = 0; k < n; k += 32) {
        __m512i v = _mm512_maskz_loadu_epi16(q8t_mask32(n - k), x + k);
        mx = _mm512_max_epu16(mx, _mm512_and_si512(v, _mm512_set1_epi16(0x7fff)));
    }
    __m512i w = _mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(mx)),
                                 _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(mx, 1)));
    return kt__moe_bf16_f32((uint16_t)_mm512_reduce_max_epu32(w));
}

/* 16 BF16 times s, rounded to even, saturated to int8. */
static inline __m128i q8t_q16(__m256i h, __m512 s)
{
    __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(f, s)));
}

/* One BF16 row's inputs [k0, k1) -> kpad bytes in `mode` order, d, and
 * (Q8T_S8, Q8T_S8_EO) the sum of q over each block of 64. */
static inline void q8t_row(const uint16_t *x, int k0, int k1, int kpad, int mode, uint8_t *out,
                           float *d, int32_t *bsum)
{
    int kn = k1 - k0;
    x += k0;
    float amax = q8t_absmax_bf16(x, kn);
    __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    *d = amax > 0.0f ? amax / 127.0f : 0.0f;
    /* byte j of the even/odd order takes input 2j (j < 32), 2(j - 32) + 1 */
    const __m512i eo = _mm512_set_epi8(
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21,
        19, 17, 15, 13, 11, 9, 7, 5, 3, 1, 62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36,
        34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int k = 0; k < kpad; k += 64) {
        /* past k1: zero inputs */
        __m512i a = _mm512_maskz_loadu_epi16(q8t_mask32(kn - k), x + k);
        __m512i b = _mm512_maskz_loadu_epi16(q8t_mask32(kn - k - 32), x + k + 32);
        __m512i v = _mm512_castsi128_si512(q8t_q16(_mm512_castsi512_si256(a), inv));
        v = _mm512_inserti32x4(v, q8t_q16(_mm512_extracti64x4_epi64(a, 1), inv), 1);
        v = _mm512_inserti32x4(v, q8t_q16(_mm512_castsi512_si256(b), inv), 2);
        v = _mm512_inserti32x4(v, q8t_q16(_mm512_extracti64x4_epi64(b, 1), inv), 3);
        if (mode == Q8T_U8) {
            v = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
        } else {
            bsum[k / 64] = _mm512_reduce_add_epi32(
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), v));
            if (mode == Q8T_S8_EO)
                v = _mm512_permutexvar_epi8(eo, v);
        }
        _mm512_store_si512(out + k, v);
    }
}

/* Quantized rows of tokens [m0, m0 + mn) over [k0, k1), made unless this
 * epoch's cache already holds them. */
static inline void q8t_batch(q8t_cache *c, const void *A, size_t a_stride, const int32_t *rows,
                             int m0, int mn, int k0, int k1, int kpad, int mode)
{
    q8t_key key; /* small: the cache itself is megabytes */
    memset(&key, 0, sizeof key); /* padding too: compared bytewise */
    key.A = A;
    key.rows = rows ? rows + m0 : NULL;
    key.a_stride = a_stride;
    key.epoch = __atomic_load_n(&kt__moe_epoch, __ATOMIC_ACQUIRE);
    key.m0 = rows ? 0 : m0;
    key.mn = mn;
    key.k0 = k0;
    key.k1 = k1;
    key.mode = mode;
    key.valid = 1;
    if (!memcmp(&key, &c->key, sizeof key))
        return;
    c->key.valid = 0;
    for (int m = 0; m < mn; m++) {
        const uint16_t *x =
            (const uint16_t *)((const char *)A + (size_t)(rows ? rows[m0 + m] : m0 + m) * a_stride);
        q8t_row(x, k0, k1, kpad, mode, c->q + (size_t)m * kpad, &c->d[m],
                c->bsum + (size_t)m * (kpad / 64));
    }
    c->key = key;
}

#endif
