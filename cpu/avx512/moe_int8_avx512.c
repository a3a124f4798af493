/*
 * AVX-512 VNNI AMXINT8 kernel: int8 weights (scale per row) times int8
 * activations quantized once per token over the call's inputs:
 *
 *   d_m = max_k |x_m[k]| / 127,   q_m[k] = round(x_m[k] / d_m),
 *   C[m][n] = d_m s_n sum_k q_m[k] w[n][k].
 *
 * vpdpbusd multiplies unsigned by signed bytes, so the weights enter as
 * w + 128 (one xor, shared by the tokens) and the offset comes off at the
 * end with the token's sum of q, made when it was quantized:
 *   sum_k q w = sum_k q (w + 128) - 128 sum_k q.
 * The quantized rows of a call are cached in the scratch for the epoch (the
 * gate and up calls of an item, the thread's next items of the same tokens).
 * Decode (up to 4 tokens) reads each weight row once, start to end, the rows
 * one after the other (rows_vnni): the call's rows are one sequential stream.
 */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "moe_avx512_common.h"
#include "q8_token.h"

/* out[m * 4 + r] = sum_k q_m[k] (w_r[k] + 128) over kn inputs, 4 rows, MR
 * (1..4) tokens; pf: prefetch distance in bytes, the same place in the next
 * 4 rows + 1 KiB (the hardware prefetchers see 4 interleaved streams
 * restarting at every tile; the distance the AVX-512 BF16 kernel measured
 * best on Zen 4). */
ALWAYS_INLINE void tile_vnni(const int8_t *const *w, const uint8_t *const *q, const int MR,
                             int kn, size_t pf, int32_t *out)
{
    __m512i acc[4][4];
    const __m512i sign = _mm512_set1_epi8((char)0x80);
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            acc[m][r] = _mm512_setzero_si512();
    /* hot loop: 64 inputs, 4 rows, MR tokens */
    int k = 0;
    for (; k + 64 <= kn; k += 64) {
        __m512i x[4];
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            x[m] = _mm512_load_si512(q[m] + k);
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            _mm_prefetch((const char *)(w[r] + k) + pf, _MM_HINT_T1);
            __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(w[r] + k), sign);
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                acc[m][r] = _mm512_dpbusd_epi32(acc[m][r], wv, x[m]);
        }
    }
    if (k < kn) { /* past kn: w + 128 against q = 0 */
        __mmask64 msk = ((__mmask64)1 << (kn - k)) - 1;
        __m512i x[4];
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            x[m] = _mm512_load_si512(q[m] + k);
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512i wv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(msk, w[r] + k), sign);
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                acc[m][r] = _mm512_dpbusd_epi32(acc[m][r], wv, x[m]);
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            out[m * 4 + r] = _mm512_reduce_add_epi32(acc[m][r]);
}

/* The sums of 4 int32 vectors, as one 4-int vector. */
ALWAYS_INLINE __m128i hsum4_epi32(__m512i a, __m512i b, __m512i c, __m512i d)
{
    __m256i a8 = _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
    __m256i b8 = _mm256_add_epi32(_mm512_castsi512_si256(b), _mm512_extracti64x4_epi64(b, 1));
    __m256i c8 = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
    __m256i d8 = _mm256_add_epi32(_mm512_castsi512_si256(d), _mm512_extracti64x4_epi64(d, 1));
    __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a8, b8), _mm256_hadd_epi32(c8, d8));
    return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

/* out[m * 4 + r] = sum_k q_m[k] (w_r[k] + 128) over kn inputs for 4 rows
 * w_r and MR (1..4) tokens, the rows read one after the other, each start to
 * end (rows one after the other in memory: one sequential stream), 128 bytes
 * a step on two accumulators per token, prefetched pf bytes ahead. */
ALWAYS_INLINE void rows_vnni(const int8_t *const *w, const uint8_t *const *q, const int MR,
                             int kn, size_t pf, int32_t *out)
{
    const __m512i sign = _mm512_set1_epi8((char)0x80);
    __m512i sum[4][4]; /* [token][row] */
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const int8_t *wr = w[r];
        __m512i a0[4], a1[4];
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            a0[m] = a1[m] = _mm512_setzero_si512();
        int k = 0;
        for (; k + 128 <= kn; k += 128) {
            _mm_prefetch((const char *)(wr + k) + pf, _MM_HINT_T1);
            _mm_prefetch((const char *)(wr + k) + pf + 64, _MM_HINT_T1);
            __m512i v0 = _mm512_xor_si512(_mm512_loadu_si512(wr + k), sign);
            __m512i v1 = _mm512_xor_si512(_mm512_loadu_si512(wr + k + 64), sign);
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++) {
                a0[m] = _mm512_dpbusd_epi32(a0[m], v0, _mm512_load_si512(q[m] + k));
                a1[m] = _mm512_dpbusd_epi32(a1[m], v1, _mm512_load_si512(q[m] + k + 64));
            }
        }
        for (; k < kn; k += 64) { /* past kn: w + 128 against q = 0 */
            __m512i v = _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail64(kn - k), wr + k), sign);
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                a0[m] = _mm512_dpbusd_epi32(a0[m], v, _mm512_load_si512(q[m] + k));
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++)
            sum[m][r] = _mm512_add_epi32(a0[m], a1[m]);
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        _mm_storeu_si128((__m128i *)(out + m * 4),
                         hsum4_epi32(sum[m][0], sum[m][1], sum[m][2], sum[m][3]));
}

/* KT_MOE_INT8_DEC=tile (for measuring): decode reads 4 adjacent rows side by
 * side (tile_vnni, session 16's) instead of one after the other. */
static long parse_int8_dec(const char *e)
{
    return e && !strcmp(e, "tile");
}

static int int8_dec_tile(void)
{
    static long cached;
    return (int)env_knob(&cached, "KT_MOE_INT8_DEC", parse_int8_dec);
}

/* Decode: rows [n0, n1) for mn (1..4) tokens quantized in the cache (qsum:
 * their sums of q), 4 rows at a time, each read start to end, prefetched
 * dec_pf() ahead. xeon2 (2-core AMX Xeon VM, kt-bench moe Qwen3-30B-A3B, 2
 * threads, 11:27-11:33): T=1 / 4 28.4-28.7 / 28.4-28.5 GB/s with 4 adjacent
 * rows side by side (tile_vnni), 29.3-30.7 / 29.3-30.8 this way; prefetch 8
 * KiB ahead 26.8-26.9 / 27.5, 1 KiB 28.3-29.1 / 29.9, 3 KiB (dec_pf there)
 * 28.6-28.7 / 30.0-30.2; the first 4 KiB of the next item's rows hinted into
 * L2 (as RAWINT4's decode) read 2-3% slower (docs/bench/xeon2-int8dec-1127-*). */
static void decode_int8(const kt__wmat *W, int n0, int n1, int k0, int kn, int kpad,
                        const q8t_cache *cache, const int32_t *qsum, int mn, float *C, int ldc)
{
    const int8_t *w = (const int8_t *)W->w + k0;
    const float *scale = W->scale;
    size_t K = (size_t)W->cols, pf = dec_pf();
    const uint8_t *u[4];
    for (int i = 0; i < 4; i++)
        u[i] = cache->q + (size_t)(i < mn ? i : mn - 1) * kpad;
    for (int n = n0; n < n1; n += 4) {
        int nr = imin(4, n1 - n);
        const int8_t *wr[4];
        for (int r = 0; r < 4; r++) /* past nr: the last row again (from L1) */
            wr[r] = w + (size_t)(n + imin(r, nr - 1)) * K;
        int32_t t[16];
        switch (mn) {
        case 1: rows_vnni(wr, u, 1, kn, pf, t); break;
        case 2: rows_vnni(wr, u, 2, kn, pf, t); break;
        case 3: rows_vnni(wr, u, 3, kn, pf, t); break;
        default: rows_vnni(wr, u, 4, kn, pf, t); break;
        }
        for (int i = 0; i < mn; i++) {
            int32_t corr = 128 * qsum[i]; /* minus 128 sum_k q of the token */
            for (int r = 0; r < nr; r++)
                C[(size_t)i * ldc + (n + r - n0)] =
                    (float)(t[i * 4 + r] - corr) * cache->d[i] * scale[n + r];
        }
    }
}

static void gemm_int8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    q8t_cache *cache = scratch;
    const int8_t *q = W->w;
    const float *scale = W->scale;
    int K = W->cols, kn = k1 - k0, kpad = (kn + 63) & ~63;
    if (kpad == 0 || (size_t)kpad > Q8T_BYTES) {
        /* no inputs, or a row longer than the cache: plain BF16 x int8 */
        for (int m = 0; m < M; m++)
            for (int n = n0; n < n1; n++) {
                const uint16_t *a =
                    (const uint16_t *)((const char *)A + (size_t)(rows ? rows[m] : m) * a_stride);
                float acc = 0;
                for (int k = k0; k < k1; k++)
                    acc += kt__moe_bf16_f32(a[k]) * q[(size_t)n * K + k];
                C[(size_t)m * ldc + (n - n0)] = acc * scale[n];
            }
        return;
    }
    size_t pf = 4 * (size_t)K + 1024;
    int batch = (int)(Q8T_BYTES / (size_t)kpad);
    batch = batch < Q8T_TOK ? batch : Q8T_TOK;
    for (int mb = 0; mb < M; mb += batch) {
        int mn = M - mb < batch ? M - mb : batch;
        q8t_batch(cache, A, a_stride, rows, mb, mn, k0, k1, kpad, Q8T_S8);
        float *Cb = C + (size_t)mb * ldc;
        int32_t qsum[Q8T_TOK];
        for (int m = 0; m < mn; m++) {
            const int32_t *bs = cache->bsum + (size_t)m * (kpad / 64);
            int32_t sum = 0;
            for (int b = 0; b < kpad / 64; b++)
                sum += bs[b];
            qsum[m] = sum;
        }
        if (mn <= 4 && !int8_dec_tile()) {
            decode_int8(W, n0, n1, k0, kn, kpad, cache, qsum, mn, Cb, ldc);
            continue;
        }
        for (int n = n0; n < n1; n += 4) {
            int nr = n1 - n < 4 ? n1 - n : 4;
            const int8_t *wr[4];
            for (int r = 0; r < 4; r++)
                wr[r] = q + (size_t)(n + (r < nr ? r : nr - 1)) * K + k0;
            for (int m = 0; m < mn; m += 4) {
                int mr = mn - m < 4 ? mn - m : 4;
                const uint8_t *u[4];
                for (int i = 0; i < 4; i++)
                    u[i] = cache->q + (size_t)(m + (i < mr ? i : mr - 1)) * kpad;
                int32_t t[16];
                switch (mr) {
                case 1: tile_vnni(wr, u, 1, kn, pf, t); break;
                case 2: tile_vnni(wr, u, 2, kn, pf, t); break;
                case 3: tile_vnni(wr, u, 3, kn, pf, t); break;
                default: tile_vnni(wr, u, 4, kn, pf, t); break;
                }
                for (int i = 0; i < mr; i++) {
                    /* minus 128 sum_k q of the token */
                    int32_t corr = 128 * qsum[m + i];
                    for (int r = 0; r < nr; r++)
                        Cb[(size_t)(m + i) * ldc + (n + r - n0)] =
                            (float)(t[i * 4 + r] - corr) * cache->d[m + i] * scale[n + r];
                }
            }
        }
    }
}

static const kt__moe_kernels avx512_int8 = {"avx512-vnni8", KT__ACT_BF16, kt__moe_quant_bf16,
                                            gemm_int8, sizeof(q8t_cache), NULL};

const kt__moe_kernels *kt__moe_int8_avx512(void)
{
    return &avx512_int8;
}
