/*
 * AVX-512 VNNI AMXINT8 kernel: int8 weights (scale per row) times int8
 * activations quantized once per token over the call's inputs:
 *
 *   d_m = max_k |x_m[k]| / 127,   q_m[k] = round(x_m[k] / d_m),
 *   C[m][n] = d_m s_n sum_k q_m[k] w[n][k].
 *
 * vpdpbusd multiplies unsigned by signed bytes, so the activations are kept
 * as u = q + 128 and the offset comes off at the end:
 *   sum_k q w = sum_k u w - 128 sum_k w,
 * with the row sums taken by one more vpdpbusd against ones, shared by the
 * tokens. The quantized rows of a call are cached in the scratch for the
 * epoch (the gate and up calls of an item, the thread's next items of the
 * same tokens). Decode streams each weight row once for up to 4 tokens.
 */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "moe_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define QTOK 256           /* tokens of one cached batch                          */
#define QBYTES (2u << 20)  /* quantized activation bytes the cache holds          */

typedef struct q8_cache {
    const void *A;
    const int32_t *rows;
    size_t a_stride;
    uint64_t epoch;
    int m0, mn, k0, k1, valid;
    float d[QTOK];
    _Alignas(64) uint8_t u[QBYTES]; /* [mn][kpad]: q + 128, 128 past k1 */
} q8_cache;

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

ALWAYS_INLINE __mmask32 mask32(int left)
{
    return left >= 32 ? ~(__mmask32)0 : (left <= 0 ? 0 : (((__mmask32)1 << left) - 1));
}

/* 16 BF16 times s, rounded to even, saturated to int8, + 128. */
ALWAYS_INLINE __m128i u16(__m256i h, __m512 s)
{
    __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    __m128i q = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(f, s)));
    return _mm_xor_si128(q, _mm_set1_epi8((char)0x80));
}

/* One BF16 row's inputs [k0, k1) -> u8 [kpad] and its scale d. */
static void quant_row(const uint16_t *x, int k0, int k1, int kpad, uint8_t *u, float *d)
{
    int kn = k1 - k0;
    x += k0;
    __m512i mx = _mm512_setzero_si512();
    for (int k = 0; k < kn; k += 32) {
        __m512i v = _mm512_maskz_loadu_epi16(mask32(kn - k), x + k);
        mx = _mm512_max_epu16(mx, _mm512_and_si512(v, _mm512_set1_epi16(0x7fff)));
    }
    __m512i w = _mm512_max_epu32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(mx)),
                                 _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(mx, 1)));
    float amax = kt__moe_bf16_f32((uint16_t)_mm512_reduce_max_epu32(w));
    __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    *d = amax > 0.0f ? amax / 127.0f : 0.0f;
    for (int k = 0; k < kpad; k += 32) {
        /* past k1: zero inputs, u = 128 */
        __m512i v = _mm512_maskz_loadu_epi16(mask32(kn - k), x + k);
        __m256i o = _mm256_setr_m128i(u16(_mm512_castsi512_si256(v), inv),
                                      u16(_mm512_extracti64x4_epi64(v, 1), inv));
        _mm256_store_si256((__m256i *)(u + k), o);
    }
}

/* out[m * 4 + r] = sum_k q_m[k] w_r[k] over kn inputs, 4 rows, MR (1..4) tokens. */
ALWAYS_INLINE void tile_vnni(const int8_t *const *w, const uint8_t *const *u, const int MR,
                             int kn, int32_t *out)
{
    __m512i acc[4][4], ws[4];
    const __m512i ones = _mm512_set1_epi8(1);
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        ws[r] = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            acc[m][r] = _mm512_setzero_si512();
    }
    /* hot loop: 64 inputs, 4 rows, MR tokens */
    for (int k = 0; k < kn; k += 64) {
        int left = kn - k;
        __mmask64 msk = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512i x[4];
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            x[m] = _mm512_load_si512(u[m] + k);
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            _mm_prefetch((const char *)(w[r] + k) + 1024, _MM_HINT_T0);
            __m512i wv = _mm512_maskz_loadu_epi8(msk, w[r] + k);
            ws[r] = _mm512_dpbusd_epi32(ws[r], ones, wv);
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                acc[m][r] = _mm512_dpbusd_epi32(acc[m][r], x[m], wv);
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        int32_t corr = 128 * _mm512_reduce_add_epi32(ws[r]);
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            out[m * 4 + r] = _mm512_reduce_add_epi32(acc[m][r]) - corr;
    }
}

/* Quantized rows of tokens [m0, m0 + mn) over [k0, k1), from the cache when
 * this epoch already made them. */
static void quantize_batch(q8_cache *c, const void *A, size_t a_stride, const int32_t *rows,
                           int m0, int mn, int k0, int k1, int kpad)
{
    q8_cache key;
    memset(&key, 0, offsetof(q8_cache, d)); /* padding too: compared bytewise */
    key.A = A;
    key.rows = rows ? rows + m0 : NULL;
    key.a_stride = a_stride;
    key.epoch = __atomic_load_n(&kt__moe_epoch, __ATOMIC_ACQUIRE);
    key.m0 = rows ? 0 : m0;
    key.mn = mn;
    key.k0 = k0;
    key.k1 = k1;
    key.valid = 1;
    if (!memcmp(&key, c, offsetof(q8_cache, d)))
        return;
    c->valid = 0;
    for (int m = 0; m < mn; m++)
        quant_row(arow(A, a_stride, rows, m0 + m), k0, k1, kpad, c->u + (size_t)m * kpad,
                  &c->d[m]);
    memcpy(c, &key, offsetof(q8_cache, d));
}

static void gemm_int8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    q8_cache *cache = scratch;
    const int8_t *q = W->w;
    const float *scale = W->scale;
    int K = W->cols, kn = k1 - k0, kpad = (kn + 63) & ~63;
    if (kpad == 0 || (size_t)kpad > QBYTES) {
        /* no inputs, or a row longer than the cache: plain BF16 x int8 */
        for (int m = 0; m < M; m++)
            for (int n = n0; n < n1; n++) {
                const uint16_t *a = arow(A, a_stride, rows, m);
                float acc = 0;
                for (int k = k0; k < k1; k++)
                    acc += kt__moe_bf16_f32(a[k]) * q[(size_t)n * K + k];
                C[(size_t)m * ldc + (n - n0)] = acc * scale[n];
            }
        return;
    }
    int batch = (int)(QBYTES / (size_t)kpad);
    batch = batch < QTOK ? batch : QTOK;
    for (int mb = 0; mb < M; mb += batch) {
        int mn = M - mb < batch ? M - mb : batch;
        quantize_batch(cache, A, a_stride, rows, mb, mn, k0, k1, kpad);
        float *Cb = C + (size_t)mb * ldc;
        for (int n = n0; n < n1; n += 4) {
            int nr = n1 - n < 4 ? n1 - n : 4;
            const int8_t *wr[4];
            for (int r = 0; r < 4; r++)
                wr[r] = q + (size_t)(n + (r < nr ? r : nr - 1)) * K + k0;
            for (int m = 0; m < mn; m += 4) {
                int mr = mn - m < 4 ? mn - m : 4;
                const uint8_t *u[4];
                for (int i = 0; i < 4; i++)
                    u[i] = cache->u + (size_t)(m + (i < mr ? i : mr - 1)) * kpad;
                int32_t t[16];
                switch (mr) {
                case 1: tile_vnni(wr, u, 1, kn, t); break;
                case 2: tile_vnni(wr, u, 2, kn, t); break;
                case 3: tile_vnni(wr, u, 3, kn, t); break;
                default: tile_vnni(wr, u, 4, kn, t); break;
                }
                for (int i = 0; i < mr; i++)
                    for (int r = 0; r < nr; r++)
                        Cb[(size_t)(m + i) * ldc + (n + r - n0)] =
                            (float)t[i * 4 + r] * cache->d[m + i] * scale[n + r];
            }
        }
    }
}

static const kt__moe_kernels avx512_int8 = {"avx512-vnni8", KT__ACT_BF16, kt__moe_quant_bf16,
                                            gemm_int8, sizeof(q8_cache)};

const kt__moe_kernels *kt__moe_int8_avx512(void)
{
    return &avx512_int8;
}
