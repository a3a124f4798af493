/*
 * AVX2 + FMA MoE kernels (compiled with -mavx2 -mfma -mf16c; run only when
 * kt_hw_isa() reports all three). F32 activations for BF16 and FP8 (weights
 * widened to f32 in registers), INT8 activations per 32-group for RAWINT4
 * (vpmaddubsw on the unsigned stored nibbles, the +8 offset removed with the
 * activation sums). 4 weight rows x 2 tokens per register tile.
 */
#include <immintrin.h>
#include <math.h>

#include "moe_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

static inline float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

ALWAYS_INLINE __m256 bf16x8(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* 8 E4M3 bytes -> f32: normals by re-biasing the exponent, subnormals m * 2^-9. */
ALWAYS_INLINE __m256 fp8x8(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7f));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
    __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
    return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
}

/* ---- BF16 and FP8: out[m * 4 + r] = sum_{k0 <= k < k1} w_r[k] a_m[k] ---- */

/* 8 weights of row r from k, widened to F32 (FP8: times the block scale). */
ALWAYS_INLINE __m256 widen8(const uint16_t *wb, const uint8_t *w8, const float *srow,
                            const int fp8, int k)
{
    return fp8 ? _mm256_mul_ps(fp8x8(w8 + k), _mm256_set1_ps(srow[k / 128])) : bf16x8(wb + k);
}

/* BF16 (fp8 = 0; wb rows) or FP8 (w8 rows, block scale rows srow). */
ALWAYS_INLINE void tile_plain(const uint16_t *const *wb, const uint8_t *const *w8,
                              const float *const *srow, const int fp8, const float *const *a,
                              const int MR, int k0, int k1, float *out)
{
    __m256 acc[2][4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm256_setzero_ps();
    int k = k0;
    /* hot loop */
    for (; k + 8 <= k1; k += 8) {
        __m256 v[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            v[r] = widen8(wb[r], w8[r], fp8 ? srow[r] : NULL, fp8, k);
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m256 x = _mm256_loadu_ps(a[m] + k);
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm256_fmadd_ps(v[r], x, acc[m][r]);
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            float s = hsum(acc[m][r]);
            for (int kk = k; kk < k1; kk++)
                s += fp8 ? kt__moe_e4m3_f32(w8[r][kk]) * srow[r][kk / 128] * a[m][kk]
                         : kt__moe_bf16_f32(wb[r][kk]) * a[m][kk];
            out[m * 4 + r] = s;
        }
}

/* KT_MOE_AVX2_SPLIT=0: a tile's rows adjacent instead of one from each
 * part of the call's rows (BF16 and RAWINT4; for measuring). */
static long parse_split(const char *e)
{
    return !(e && *e == '0');
}
static long split_knob;

/* BF16 tiles take their 4 rows from the 4 quarters of [n0, n1) (tile j: rows
 * n0 + r q + j), so each row is a sequential stream; 4 adjacent rows read 32
 * bytes of each in turn, which the hardware prefetchers follow worse (0.63-0.69
 * of stream in decode on the Zen 3). The rows past 4 q, and FP8, 4 adjacent. */
static void gemm_plain(const kt__wmat *W, int fp8, int n0, int n1, int k0, int k1, const void *A,
                       size_t a_stride, const int32_t *rows, int M, float *C, int ldc)
{
    int cols = W->cols, cb = (cols + 127) / 128;
    int q = !fp8 && env_knob(&split_knob, "KT_MOE_AVX2_SPLIT", parse_split) ? (n1 - n0) / 4 : 0;
    int n_adj = n0 + 4 * q, tiles = q + (n1 - n_adj + 3) / 4;
    for (int j = 0; j < tiles; j++) {
        int row[4], nr = 4;
        if (j < q) {
            for (int r = 0; r < 4; r++)
                row[r] = n0 + r * q + j;
        } else {
            int n = n_adj + 4 * (j - q);
            nr = imin(4, n1 - n);
            for (int r = 0; r < 4; r++)
                row[r] = n + (r < nr ? r : nr - 1);
        }
        const uint16_t *wb[4];
        const uint8_t *w8[4];
        const float *sr[4];
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            wb[r] = (const uint16_t *)W->w + (size_t)row[r] * cols;
            w8[r] = (const uint8_t *)W->w + (size_t)row[r] * cols;
            sr[r] = fp8 ? (const float *)W->scale + (size_t)(row[r] / 128) * cb : NULL;
        }
        for (int m = 0; m < M; m += 2) {
            int mr = imin(2, M - m);
            const float *a[2];
            #pragma GCC unroll 4
            for (int i = 0; i < 2; i++)
                a[i] = arow(A, a_stride, rows, m + (i < mr ? i : mr - 1));
            float t[8];
            switch (2 * fp8 + mr) {
            case 1: tile_plain(wb, w8, sr, 0, a, 1, k0, k1, t); break;
            case 2: tile_plain(wb, w8, sr, 0, a, 2, k0, k1, t); break;
            case 3: tile_plain(wb, w8, sr, 1, a, 1, k0, k1, t); break;
            default: tile_plain(wb, w8, sr, 1, a, 2, k0, k1, t); break;
            }
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++)
                    C[(size_t)(m + i) * ldc + (row[r] - n0)] = t[i * 4 + r];
        }
    }
}

static void gemm_bf16(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    gemm_plain(W, 0, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
}

static void gemm_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                     void *scratch)
{
    (void)scratch;
    gemm_plain(W, 1, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
}

/* ---- RAWINT4 with Q8G32 activations ----
 * per group g: i = sum_k nib_k q_k (nib = value + 8, unsigned);
 * C += d_x[g] s_w[g] (i - 8 sum_k q_k) */
ALWAYS_INLINE void tile_int4(const uint8_t *w, const uint16_t *s, const int8_t *const *a,
                             const int MR, int K, int g0, int g1, float *out)
{
    __m256 acc[4];
    float corr[4] = {0, 0, 0, 0};
    const float *d[4];
    const int32_t *sums[4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        acc[m] = _mm256_setzero_ps();
        d[m] = kt__q8_scales(a[m], K);
        sums[m] = kt__q8_sums(a[m], K);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    /* hot loop: one group of 32 inputs per step */
    for (int g = g0; g < g1; g++) {
        __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(w + (size_t)g * 16)));
        __m256i nib = _mm256_or_si256(
            _mm256_and_si256(b, _mm256_set1_epi16(0x0f)),
            _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0xf0)), 4));
        float sw = kt__moe_bf16_f32(s[g]);
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(a[m] + (size_t)g * 32));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(nib, q), ones);
            float f = d[m][g] * sw;
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(f), acc[m]);
            corr[m] += (float)sums[m][g] * f;
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        out[m] = hsum(acc[m]) - corr[m];
}

static void gemm_int4(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    if (W->type == KT__INT4_TILED) { /* the repacked layout: the scalar kernel
                                       * (same activations; the backend repacks
                                       * for the AVX-512 set only) */
        kt__moe_kernels_ref(KT_METHOD_RAWINT4)->gemm(W, n0, n1, k0, k1, A, a_stride, rows, M,
                                                     C, ldc, scratch);
        return;
    }
    int K = W->cols;
    for (int n = n0; n < n1; n++) {
        const uint8_t *w = (const uint8_t *)W->w + (size_t)n * (K / 2);
        const uint16_t *s = (const uint16_t *)W->scale + (size_t)n * (K / 32);
        for (int m = 0; m < M; m += 4) {
            int mr = imin(4, M - m);
            const int8_t *a[4];
            for (int i = 0; i < 4; i++)
                a[i] = arow(A, a_stride, rows, m + (i < mr ? i : mr - 1));
            float t[4];
            switch (mr) {
            case 1: tile_int4(w, s, a, 1, K, k0 / 32, k1 / 32, t); break;
            case 2: tile_int4(w, s, a, 2, K, k0 / 32, k1 / 32, t); break;
            case 3: tile_int4(w, s, a, 3, K, k0 / 32, k1 / 32, t); break;
            default: tile_int4(w, s, a, 4, K, k0 / 32, k1 / 32, t); break;
            }
            for (int i = 0; i < mr; i++)
                C[(size_t)(m + i) * ldc + (n - n0)] = t[i];
        }
    }
}

/* ---- RAWINT4 with Q8E64 activations (the default) ----
 * A row's 32 bytes at chunk c hold inputs 64c .. 64c + 63: low nibbles the
 * even inputs, high nibbles the odd ones, bytes 0-15 group 2c, 16-31 group
 * 2c + 1, so the nibble vectors meet the token's even / odd q as loaded:
 *     p16 = maddubs(lo, q_even) + maddubs(hi, q_odd)  (4 products a word,
 *                                                     |p16| <= 4 * 15 * 127)
 *     i32 = madd(p16, 1) + c      lanes 0-3 group 2c, 4-7 group 2c + 1;
 *                                 c = -2 x group sum: sum (nib - 8) q, exact
 *     acc += f32(i32) * (s_w * d_x)
 * where the old kernel widened every byte to a word, recombined the nibbles
 * in natural order and ran a scalar scale product per group. */

/* kt__moe_q8g32_group in 8 lanes (the same d, codes and sum: the same
 * products rounded to nearest even, max ignoring NaN as fmaxf does), the
 * codes stored even-then-odd: qe[j] = q[2j], qo[j] = q[2j + 1]. */
static int32_t q8g32_group_eo(const float *x, int8_t *qe, int8_t *qo, float *d)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], mx = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        mx = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), mx); /* a NaN lane keeps mx */
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    float dg = kt__moe_q8_pow2() ? kt__moe_pow2_ceil(amax / 127.0f) : amax / 127.0f;
    __m256 inv = _mm256_set1_ps(dg > 0.0f ? 1.0f / dg : 0.0f);
    __m256i q[4], sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) { /* round to nearest even (MXCSR), clamp to +-127 */
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
        q[i] = _mm256_max_epi32(_mm256_min_epi32(q[i], _mm256_set1_epi32(127)),
                                _mm256_set1_epi32(-127));
        sum = _mm256_add_epi32(sum, q[i]);
    }
    /* bytes per lane: x 0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31 */
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)); /* 0-31 */
    b = _mm256_shuffle_epi8(b, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11,
                                                13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7,
                                                9, 11, 13, 15));
    b = _mm256_permute4x64_epi64(b, 0xd8); /* evens of both halves, then odds */
    _mm_storeu_si128((__m128i *)qe, _mm256_castsi256_si128(b));
    _mm_storeu_si128((__m128i *)qo, _mm256_extracti128_si256(b, 1));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    *d = dg;
    return _mm_cvtsi128_si32(s4);
}

/* KT_MOE_AVX2_Q8E64=scalar: the groups through kt__moe_q8g32_group (for
 * measuring; the same bytes). */
static long parse_q8e64_scalar(const char *e)
{
    return e && !strcmp(e, "scalar");
}

static void quant_q8e64(const float *x, int k0, int k1, int K, void *row)
{
    static long scalar_knob;
    int scalar = (int)env_knob(&scalar_knob, "KT_MOE_AVX2_Q8E64", parse_q8e64_scalar);
    int nc = (K + 63) / 64;
    int8_t *q = row;
    float *dc = (float *)(q + (size_t)nc * 64); /* per chunk d[8], then c[8] */
    for (int g = k0 / 32; g < k1 / 32; g++) {
        float dg;
        int32_t sum;
        int8_t *qe = q + (size_t)(g / 2) * 64 + 16 * (g % 2), *qo = qe + 32;
        if (scalar) {
            int8_t qg[32];
            sum = kt__moe_q8g32_group(x + g * 32, qg, &dg);
            for (int i = 0; i < 32; i++)
                (i % 2 ? qo : qe)[i / 2] = qg[i];
        } else {
            sum = q8g32_group_eo(x + g * 32, qe, qo, &dg);
        }
        float *d = dc + (size_t)(g / 2) * 16 + 4 * (g % 2);
        int32_t *c = (int32_t *)(d + 8);
        for (int l = 0; l < 4; l++) {
            d[l] = dg;
            c[l] = -2 * sum;
        }
    }
    if (k1 == K && K % 64) { /* the last chunk's second group: zeros */
        int g = K / 32;
        memset(q + (size_t)(g / 2) * 64 + 16, 0, 16);
        memset(q + (size_t)(g / 2) * 64 + 48, 0, 16);
        memset(dc + (size_t)(g / 2) * 16 + 4, 0, 16);
        memset(dc + (size_t)(g / 2) * 16 + 12, 0, 16);
    }
}

/* acc[m][r] += chunk c of NR rows (w[r], BF16 scales s[r]) x MR tokens a[m];
 * masked: only the lanes in keep (the chunk's groups inside the call's range)
 * count, both scales masked (a group outside may hold anything, NaN too);
 * half: only the first group lies inside the row (16 bytes). */
ALWAYS_INLINE void int4e_chunk(const uint8_t *const *w, const uint16_t *const *s, int cb,
                               const int8_t *const *a, const int NR, const int MR, int nc, int c,
                               const int masked, __m256i keep, const int half,
                               __m256 (*acc)[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    /* a dword pair of BF16 scales -> F32 lanes: 0-3 the first, 4-7 the second */
    const __m256i sperm = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 0, 1, -1, -1, 0, 1, -1, -1, 0,
                                           1, -1, -1, 2, 3, -1, -1, 2, 3, -1, -1, 2, 3, -1, -1,
                                           2, 3);
    __m256i lo[4], hi[4];
    __m256 sw[4];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        const uint8_t *wc = w[r] + 32 * (size_t)(c - cb);
        __m256i b = half ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)wc))
                         : _mm256_loadu_si256((const __m256i *)wc);
        lo[r] = _mm256_and_si256(b, m4);
        hi[r] = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
        int32_t s2;
        if (half)
            s2 = s[r][2 * (c - cb)];
        else
            memcpy(&s2, s[r] + 2 * (c - cb), 4);
        __m256i sv = _mm256_shuffle_epi8(_mm256_set1_epi32(s2), sperm);
        sw[r] = _mm256_castsi256_ps(masked ? _mm256_and_si256(sv, keep) : sv);
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        const int8_t *q = a[m] + 64 * (size_t)c;
        const float *dx = (const float *)(a[m] + 64 * (size_t)nc) + 16 * (size_t)c;
        __m256i qe = _mm256_loadu_si256((const __m256i *)q);
        __m256i qo = _mm256_loadu_si256((const __m256i *)(q + 32));
        __m256 d = _mm256_loadu_ps(dx);
        if (masked)
            d = _mm256_and_ps(d, _mm256_castsi256_ps(keep));
        __m256i cv = _mm256_loadu_si256((const __m256i *)(dx + 8));
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[r], qe),
                                         _mm256_maddubs_epi16(hi[r], qo));
            __m256i i = _mm256_add_epi32(_mm256_madd_epi16(p, ones), cv);
            acc[m][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(sw[r], d),
                                        acc[m][r]);
        }
    }
}

/* out[m * 4 + r] for NR rows x MR tokens over groups [g0, g1); w[r] and
 * s[r] hold the rows from chunk cb (inputs 64 cb) on. */
ALWAYS_INLINE void tile_int4e(const uint8_t *const *w, const uint16_t *const *s, int cb,
                              const int8_t *const *a, const int NR, const int MR, int K, int g0,
                              int g1, float *out)
{
    int nc = (K + 63) / 64;
    __m256 acc[4][4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[m][r] = _mm256_setzero_ps();
    const __m256i all = _mm256_set1_epi32(-1);
    const __m256i first = _mm256_setr_epi32(-1, -1, -1, -1, 0, 0, 0, 0);
    int c = g0 / 2;
    if (g0 % 2 && g0 < g1) { /* the first chunk's second group only */
        int4e_chunk(w, s, cb, a, NR, MR, nc, c, 1, _mm256_andnot_si256(first, all), 0, acc);
        c++;
    }
    /* hot loop: whole chunks, two at a time into two sets of accumulators
     * (one FMA chain per row and token is 4 cycles a chunk) */
    __m256 acc2[4][4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc2[m][r] = _mm256_setzero_ps();
    if (NR * MR < 4) /* (more chains already; the second set would spill) */
        for (; 2 * c + 4 <= g1; c += 2) {
            int4e_chunk(w, s, cb, a, NR, MR, nc, c, 0, all, 0, acc);
            int4e_chunk(w, s, cb, a, NR, MR, nc, c + 1, 0, all, 0, acc2);
        }
    for (; 2 * c + 2 <= g1; c++)
        int4e_chunk(w, s, cb, a, NR, MR, nc, c, 0, all, 0, acc);
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[m][r] = _mm256_add_ps(acc[m][r], acc2[m][r]);
    if (2 * c < g1) /* the last chunk's first group only */
        int4e_chunk(w, s, cb, a, NR, MR, nc, c, 1, first, 2 * c + 1 >= K / 32, acc);
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            out[m * 4 + r] = hsum(acc[m][r]);
}

/* KT_MOE_AVX2_ROWS: rows a tile shares each activation load with (1, 2 or 4;
 * for measuring; more than one token takes at most 2). One Zen 3 core, one
 * token, 256-row calls from memory, x read loop: K 2048 1 / 2 / 4 rows 0.55 /
 * 0.76 / 0.81, K 768 0.47 / 0.65 / 0.78 (the Q8G32 kernel 0.44 / 0.37). */
static long parse_int4e_rows(const char *e)
{
    int n = e ? atoi(e) : 0;
    return n == 1 || n == 2 ? n : 4;
}

/* Rows as NR streams: tile j takes row n0 + r * q + j from each of the NR
 * parts of q rows (adjacent rows read 32 bytes of each of NR rows in turn,
 * a pattern the hardware prefetchers do not follow); the rows past NR * q
 * one at a time. MR tokens (rows of C ldc apart). */
ALWAYS_INLINE void int4e_split(const kt__wmat *W, int n0, int n1, int g0, int g1,
                               const int8_t *const *a, const int NR, const int MR, float *C,
                               int ldc)
{
    int K = W->cols, q = (n1 - n0) / NR;
    const uint8_t *w[4];
    const uint16_t *s[4];
    for (int j = 0; j < q; j++) {
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            w[r] = (const uint8_t *)W->w + (size_t)(n0 + r * q + j) * (K / 2);
            s[r] = (const uint16_t *)W->scale + (size_t)(n0 + r * q + j) * (K / 32);
        }
        float t[16];
        tile_int4e(w, s, 0, a, NR, MR, K, g0, g1, t);
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                C[(size_t)m * ldc + r * q + j] = t[m * 4 + r];
    }
    for (int n = n0 + NR * q; n < n1; n++) {
        w[0] = (const uint8_t *)W->w + (size_t)n * (K / 2);
        s[0] = (const uint16_t *)W->scale + (size_t)n * (K / 32);
        float t[16];
        tile_int4e(w, s, 0, a, 1, MR, K, g0, g1, t);
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            C[(size_t)m * ldc + n - n0] = t[m * 4];
    }
}

static void gemm_int4e(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                       size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                       void *scratch)
{
    (void)scratch;
    static long rows_knob;
    int K = W->cols, g0 = k0 / 32, g1 = k1 / 32;
    int nr_tile = (int)env_knob(&rows_knob, "KT_MOE_AVX2_ROWS", parse_int4e_rows);
    if (M <= 3 && nr_tile > 1 && env_knob(&split_knob, "KT_MOE_AVX2_SPLIT", parse_split)) {
        const int8_t *a[3];
        for (int i = 0; i < 3; i++)
            a[i] = arow(A, a_stride, rows, imin(i, M - 1));
        if (M == 1 && nr_tile == 4)
            int4e_split(W, n0, n1, g0, g1, a, 4, 1, C, ldc);
        else if (M == 1)
            int4e_split(W, n0, n1, g0, g1, a, 2, 1, C, ldc);
        else if (M == 2)
            int4e_split(W, n0, n1, g0, g1, a, 2, 2, C, ldc);
        else
            int4e_split(W, n0, n1, g0, g1, a, 2, 3, C, ldc);
        return;
    }
    if (M > 1 && nr_tile > 2)
        nr_tile = 2;
    for (int n = n0; n < n1; n += nr_tile) {
        int nr = imin(nr_tile, n1 - n);
        const uint8_t *w[4];
        const uint16_t *s[4];
        for (int r = 0; r < 4; r++) {
            int row = n + imin(r, nr - 1);
            w[r] = (const uint8_t *)W->w + (size_t)row * (K / 2);
            s[r] = (const uint16_t *)W->scale + (size_t)row * (K / 32);
        }
        for (int m = 0; m < M; m += 3) {
            int mr = imin(3, M - m);
            const int8_t *a[3];
            for (int i = 0; i < 3; i++)
                a[i] = arow(A, a_stride, rows, m + imin(i, mr - 1));
            float t[16];
            if (nr_tile == 4)
                tile_int4e(w, s, 0, a, 4, 1, K, g0, g1, t);
            else if (nr_tile == 1)
                switch (mr) {
                case 1: tile_int4e(w, s, 0, a, 1, 1, K, g0, g1, t); break;
                case 2: tile_int4e(w, s, 0, a, 1, 2, K, g0, g1, t); break;
                default: tile_int4e(w, s, 0, a, 1, 3, K, g0, g1, t); break;
                }
            else
                switch (mr) {
                case 1: tile_int4e(w, s, 0, a, 2, 1, K, g0, g1, t); break;
                case 2: tile_int4e(w, s, 0, a, 2, 2, K, g0, g1, t); break;
                default: tile_int4e(w, s, 0, a, 2, 3, K, g0, g1, t); break;
                }
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++)
                    C[(size_t)(m + i) * ldc + (n - n0) + r] = t[i * 4 + r];
        }
    }
}

/* The repacked layout (KT__INT4_TILED, opt-in, made for the AVX-512 set): a
 * row's block of 512 inputs copied back to the stored order, then the same
 * tiles, one row at a time (correct, not fast). */
static void gemm_int4e_tiled(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                             size_t a_stride, const int32_t *rows, int M, float *C, int ldc)
{
    int K = W->cols;
    uint8_t wb[256];
    uint16_t sb[16];
    for (int n = n0; n < n1; n++)
        for (int b = k0 / 512; b < (k1 + 511) / 512; b++) {
            int c0 = 8 * b, ng = imin(16, K / 32 - 16 * b); /* chunks, groups of the block */
            for (int ch = 0; ch < (ng + 1) / 2; ch++)
                memcpy(wb + 32 * ch, kt__int4t_step(W, n, 4 * b + ch / 2) + 32 * (ch % 2), 32);
            for (int g = 0; g < ng; g++)
                sb[g] = kt__int4t_scale(W, n, 16 * b + g);
            const uint8_t *w[4] = {wb, wb, wb, wb};
            const uint16_t *s[4] = {sb, sb, sb, sb};
            int g0 = k0 / 32 > 16 * b ? k0 / 32 : 16 * b;
            int g1 = imin(k1 / 32, 16 * b + 16);
            for (int m = 0; m < M; m += 3) {
                int mr = imin(3, M - m);
                const int8_t *a[3];
                for (int i = 0; i < 3; i++)
                    a[i] = arow(A, a_stride, rows, m + imin(i, mr - 1));
                float t[16];
                switch (mr) {
                case 1: tile_int4e(w, s, c0, a, 1, 1, K, g0, g1, t); break;
                case 2: tile_int4e(w, s, c0, a, 1, 2, K, g0, g1, t); break;
                default: tile_int4e(w, s, c0, a, 1, 3, K, g0, g1, t); break;
                }
                for (int i = 0; i < mr; i++) {
                    float *c = C + (size_t)(m + i) * ldc + (n - n0);
                    *c = (b == k0 / 512 ? 0.0f : *c) + t[i * 4];
                }
            }
        }
}

static void gemm_int4_any(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                          size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                          void *scratch)
{
    if (W->type == KT__INT4_TILED)
        gemm_int4e_tiled(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
    else
        gemm_int4e(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
}

static const kt__moe_kernels k_bf16 = {"avx2-bf16", KT__ACT_F32, kt__moe_quant_f32, gemm_bf16, 0,
                                       NULL};
static const kt__moe_kernels k_fp8 = {"avx2-fp8", KT__ACT_F32, kt__moe_quant_f32, gemm_fp8, 0,
                                      NULL};
static const kt__moe_kernels k_int4 = {"avx2-int8", KT__ACT_Q8G32, kt__moe_quant_q8g32,
                                       gemm_int4, 0, NULL};
static const kt__moe_kernels k_int4e = {"avx2-int4e", KT__ACT_Q8E64, quant_q8e64,
                                        gemm_int4_any, 0, NULL};

/* KT_MOE_AVX2_INT4=old: the Q8G32 kernel (for measuring). */
static long parse_int4_old(const char *e)
{
    return e && !strcmp(e, "old");
}

const kt__moe_kernels *kt__moe_kernels_avx2(int method)
{
    switch (method) {
    case KT_METHOD_BF16:
        return &k_bf16;
    case KT_METHOD_FP8: {
        const kt__moe_kernels *k = kt__moe_fp8_avx2(); /* NULL: KT_MOE_AVX2_FP8=old */
        return k ? k : &k_fp8;
    }
    case KT_METHOD_RAWINT4: {
        static long old_knob;
        return env_knob(&old_knob, "KT_MOE_AVX2_INT4", parse_int4_old) ? &k_int4 : &k_int4e;
    }
    case KT_METHOD_AMXINT8:
        return kt__moe_int8_avx2();
    default:
        return NULL;
    }
}
