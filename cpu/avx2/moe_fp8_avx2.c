/*
 * AVX2 + FMA FP8 kernels (E4M3 weights, 128x128 block scales, F32
 * activations): what a CPU without AVX-512 (the Zen 3 VM) runs for FP8.
 *
 * E4M3 -> F32 without a table: a byte sign-extended to a dword and shifted
 * left by 20 puts its eeee mmm on the F32 exponent's low 4 bits and the
 * mantissa's top 3; an and clears the sign's copies above bit 31. The F32
 * number is the code's value times 2^-120 exactly, subnormal codes included
 * (they become F32 denormals with the same factor); E4M3's NaN code reads as
 * 480. Three integer operations per 8 weights (the old kernel: eleven).
 *
 *  up to 3 tokens  rows read start to end, decoded in registers (32
 *                  codes a load, each of a dword's 4 bytes making a "plane"
 *                  of 8 codes: 5 shifts and 4 ands per 32 codes where a
 *                  sign-extending load a code per dword takes 4 loads, 4
 *                  shifts and 4 ands; met by the activation copy stored
 *                  plane by plane; one token: 4 quarter streams a tile,
 *                  quarters_dec1; 2-3 tokens: a row a tile, rows_t2/_t3); per
 *                  128-input block the products e4m3 2^-120 x a 2^64 (a
 *                  copy of the call's activations times 2^64 keeps them far
 *                  from F32's denormals) summed exactly as the reference's
 *                  block sums, then times s 2^56.
 *  more tokens     a chunk of 4 rows x FP8_KC inputs decoded once to F32
 *                  weights fl(e4m3 s) (the reference's numbers: one multiply
 *                  by s 2^120) in L1, then register tiles of 4 rows x FP8_MT
 *                  tokens reuse it for every token of the call (the old
 *                  kernel decoded each weight again for every 2 tokens).
 *
 * Calls with a block scale above 2^64 (or not finite) are left to the scalar
 * reference, whose activations are the same F32 rows.
 */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define FP8_KC 4096                /* prefill chunk, at most (inputs)                 */
#define FP8_PS (FP8_KC + 16)       /* its row stride (off 4 KiB, so rows do not alias) */
#define FP8_DEC_KC 8192            /* decode: inputs per pass (the x 2^64 copy)       */
#define FP8_DEC_M 3                /* tokens up to which rows decode in registers     */

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

/* The 4 sums of a, b, c, d's lanes. */
static inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* 8 E4M3 codes (a dword each, sign-extended) -> F32 e4m3 x 2^-120, exactly. */
ALWAYS_INLINE __m256 e4m3_bits(__m256i v)
{
    return _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_slli_epi32(v, 20), _mm256_set1_epi32((int)0x87f00000u)));
}

/* The 8 codes at p; the last n (< 8) of a row through a zero-padded copy. */
ALWAYS_INLINE __m256 e4m3x8(const uint8_t *p)
{
    return e4m3_bits(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

static inline __m256 e4m3x8_tail(const uint8_t *p, int n)
{
    uint8_t b[8] = {0};
    memcpy(b, p, (size_t)n);
    return e4m3x8(b);
}

/* The 32 codes at p as 4 planes, pl[b][j] = e4m3(p[4 j + b]) 2^-120 (byte b
 * of dword j): a 16-bit arithmetic shift by 4 sign-extends each word's high
 * byte to the place e4m3_bits' shift puts it in its dword's high word (odd
 * bytes); the even bytes first move up a byte; a dword shift by 16 brings
 * the low words' codes up. */
ALWAYS_INLINE void e4m3x32_planes(const uint8_t *p, __m256 pl[4])
{
    const __m256i keep = _mm256_set1_epi32((int)0x87f00000u);
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    __m256i odd = _mm256_srai_epi16(v, 4);
    __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 4);
    pl[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(even, 16), keep));
    pl[1] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(odd, 16), keep));
    pl[2] = _mm256_castsi256_ps(_mm256_and_si256(even, keep));
    pl[3] = _mm256_castsi256_ps(_mm256_and_si256(odd, keep));
}

/* x[0, 32) times 2^64 -> d in the planes' order: d[8 b + j] = x[4 j + b] 2^64. */
static inline void planes_x32(const float *x, float *d)
{
    const __m256 two64 = _mm256_set1_ps(0x1p64f);
    const __m256i pairs = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256d q[4]; /* q[i] = 64-bit pairs (x[8i + b], x[8i + 4 + b]), b = 0..3 */
    for (int i = 0; i < 4; i++)
        q[i] = _mm256_castps_pd(
            _mm256_permutevar8x32_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), two64), pairs));
    __m256d b02 = _mm256_unpacklo_pd(q[0], q[1]), b13 = _mm256_unpackhi_pd(q[0], q[1]);
    __m256d c02 = _mm256_unpacklo_pd(q[2], q[3]), c13 = _mm256_unpackhi_pd(q[2], q[3]);
    _mm256_storeu_ps(d, _mm256_castpd_ps(_mm256_permute2f128_pd(b02, c02, 0x20)));
    _mm256_storeu_ps(d + 8, _mm256_castpd_ps(_mm256_permute2f128_pd(b13, c13, 0x20)));
    _mm256_storeu_ps(d + 16, _mm256_castpd_ps(_mm256_permute2f128_pd(b02, c02, 0x31)));
    _mm256_storeu_ps(d + 24, _mm256_castpd_ps(_mm256_permute2f128_pd(b13, c13, 0x31)));
}

/* Whether every block scale the call reads is finite with |s| <= 2^64 (so
 * that s 2^56 stays finite: any checkpoint's weight_scale_inv). */
static int scales_in_range(const kt__wmat *W, int n0, int n1, int k0, int k1)
{
    const float *sc = W->scale;
    int cb = (W->cols + 127) / 128;
    for (int rb = n0 / 128; rb <= (n1 - 1) / 128; rb++)
        for (int b = k0 / 128; b <= (k1 - 1) / 128; b++)
            if (!(fabsf(sc[(size_t)rb * cb + b]) <= 0x1p64f))
                return 0;
    return 1;
}

/* ---- decode: up to 3 tokens ------------------------------------------------
 * out[m * 4 + i] = sum_b s_i[b] sum_{k in b} e4m3(w_i[k]) a_m[k] for NI rows
 * (side by side, sharing each activation load) and MR tokens; xs[m] is token
 * m's copy times 2^64 from k0 (zeros after k1, to a multiple of 8); with
 * PL, its whole 32-input groups from k0 in the planes' order (planes_x32). */

/* blk[i][m][b % CH] += planes of rows i at k . token m's planes there. */
ALWAYS_INLINE void group32_dec(const uint8_t *const *w, const float *const *xs, const int MR,
                               const int NI, const int CH, int k, int k0, __m256 blk[4][3][4])
{
    __m256 x[3][4];
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int b = 0; b < 4; b++)
            x[m][b] = _mm256_loadu_ps(xs[m] + (k - k0) + 8 * b);
    #pragma GCC unroll 4
    for (int i = 0; i < NI; i++) {
        __m256 pl[4];
        e4m3x32_planes(w[i] + k, pl);
        #pragma GCC unroll 4
        for (int b = 0; b < 4; b++)
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                blk[i][m][b % CH] = _mm256_fmadd_ps(pl[b], x[m][b], blk[i][m][b % CH]);
    }
}

ALWAYS_INLINE void rows_dec(const uint8_t *const *w, const float *const *srow,
                            const float *const *xs, const int MR, const int NI, const int PL,
                            int k0, int k1, size_t pf, float *out)
{
    /* FMA chains per row and token: at least 4 in flight (an FMA's latency
     * is 4 cycles; one chain per row read 0.5 of a read loop at one row);
     * the planes' decode (one token) is short enough to want 8 */
    const int CH = PL ? (NI == 4 ? 2 : 4) : (NI * MR >= 4 ? 1 : NI * MR == 1 ? 4 : 2);
    __m256 tot[4][3];
    #pragma GCC unroll 4
    for (int i = 0; i < NI; i++)
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            tot[i][m] = _mm256_setzero_ps();
    for (int kb = k0; kb < k1; kb += 128) {
        int ke = imin(kb + 128, k1);
        __m256 blk[4][3][4]; /* e4m3 2^-120 x a 2^64: F32 normal numbers */
        #pragma GCC unroll 4
        for (int i = 0; i < NI; i++)
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                #pragma GCC unroll 4
                for (int c = 0; c < CH; c++)
                    blk[i][m][c] = _mm256_setzero_ps();
        int k = kb;
        if (PL && ke - kb == 128) {
            /* hot loop: 4 groups of 32 inputs of NI rows */
            #pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                if (pf && !(g & 1))
                    #pragma GCC unroll 4
                    for (int i = 0; i < NI; i++)
                        _mm_prefetch((const char *)(w[i] + kb + 32 * g) + pf, _MM_HINT_T0);
                group32_dec(w, xs, MR, NI, CH, kb + 32 * g, k0, blk);
            }
            k = ke;
        } else if (PL) { /* a row's last, partial block: its whole 32s, then 8s below */
            for (; k + 32 <= ke; k += 32)
                group32_dec(w, xs, MR, NI, CH, k, k0, blk);
        } else if (ke - kb == 128) {
            /* hot loop: 128 / (8 CH) steps of 8 CH inputs of NI rows */
            for (; k < ke; k += 8 * CH) {
                if (pf && !(k & 63))
                    #pragma GCC unroll 4
                    for (int i = 0; i < NI; i++)
                        _mm_prefetch((const char *)(w[i] + k) + pf, _MM_HINT_T0);
                #pragma GCC unroll 4
                for (int c = 0; c < CH; c++) {
                    __m256 x[3];
                    #pragma GCC unroll 3
                    for (int m = 0; m < MR; m++)
                        x[m] = _mm256_loadu_ps(xs[m] + (k + 8 * c - k0));
                    #pragma GCC unroll 4
                    for (int i = 0; i < NI; i++) {
                        __m256 v = e4m3x8(w[i] + k + 8 * c);
                        #pragma GCC unroll 3
                        for (int m = 0; m < MR; m++)
                            blk[i][m][c] = _mm256_fmadd_ps(v, x[m], blk[i][m][c]);
                    }
                }
            }
        }
        if (k < ke) { /* the row's last, partial block (with PL, after its whole 32s) */
            for (; k < ke; k += 8) {
                #pragma GCC unroll 4
                for (int i = 0; i < NI; i++) {
                    __m256 v = k + 8 <= ke ? e4m3x8(w[i] + k) : e4m3x8_tail(w[i] + k, ke - k);
                    #pragma GCC unroll 3
                    for (int m = 0; m < MR; m++)
                        blk[i][m][0] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xs[m] + (k - k0)),
                                                       blk[i][m][0]);
                }
            }
        }
        #pragma GCC unroll 4
        for (int i = 0; i < NI; i++) {
            __m256 s = _mm256_set1_ps(srow[i][kb / 128] * 0x1p56f);
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++) {
                __m256 b = blk[i][m][0];
                #pragma GCC unroll 4
                for (int c = 1; c < CH; c++)
                    b = _mm256_add_ps(b, blk[i][m][c]);
                tot[i][m] = _mm256_fmadd_ps(b, s, tot[i][m]);
            }
        }
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++) {
        __m256 z = _mm256_setzero_ps();
        _mm_storeu_ps(out + m * 4, hsum4(tot[0][m], NI > 1 ? tot[1][m] : z,
                                         NI > 2 ? tot[2][m] : z, NI > 3 ? tot[3][m] : z));
    }
}

/* A tile's rows n, n + step, ... (nr of them, the last repeated to 4) and
 * their block scales' rows. */
static void tile_rows(const kt__wmat *W, int n, int step, int nr, const uint8_t *wr[4],
                      const float *sr[4])
{
    int cb = (W->cols + 127) / 128;
    for (int r = 0; r < 4; r++) {
        int row = n + imin(r, nr - 1) * step;
        wr[r] = (const uint8_t *)W->w + (size_t)row * W->cols;
        sr[r] = (const float *)W->scale + (size_t)(row / 128) * cb;
    }
}

/* The one-token decode of 4 rows over whole 128-input blocks [k0, k1)
 * (planes' xs from k0): tot[i][0..8) += block sums of row i times s 2^56.
 * rows_dec's version kept 17+ vectors live (8 block chains, 4 totals, 4
 * activation vectors, the mask) and gcc spilled block chains inside the
 * 128-input loop; here the totals stay in memory (caller's, which the byte
 * loads may alias), touched once a block. */
ALWAYS_INLINE void rows4_dec1(const uint8_t *const *w, const float *const *srow,
                              const float *xs, int k0, int k1, size_t pf, float *tot)
{
    const __m256i keep = _mm256_set1_epi32((int)0x87f00000u);
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    for (int kb = k0; kb < k1; kb += 128) {
        /* [4 rows][2 chains]: e4m3 2^-120 x a 2^64 */
        __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00;
        __m256 c20 = c00, c21 = c00, c30 = c00, c31 = c00;
        #pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            int k = kb + 32 * g;
            if (pf && !(g & 1)) {
                _mm_prefetch((const char *)(w0 + k) + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)(w1 + k) + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)(w2 + k) + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)(w3 + k) + pf, _MM_HINT_T0);
            }
            const float *x = xs + (k - k0);
            __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
            __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
/* a row's 32 codes at k as e4m3x32_planes' 4 planes, each met at once by its
 * activations: plane b into chain b % 2 */
#define ROW_PLANES(wr, ca, cb)                                                             \
    do {                                                                                   \
        __m256i v = _mm256_loadu_si256((const __m256i *)((wr) + k));                       \
        __m256i odd = _mm256_srai_epi16(v, 4);                                             \
        __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 4);                      \
        ca = _mm256_fmadd_ps(                                                              \
            _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(even, 16), keep)), x0,  \
            ca);                                                                           \
        cb = _mm256_fmadd_ps(                                                              \
            _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(odd, 16), keep)), x1,   \
            cb);                                                                           \
        ca = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(even, keep)), x2, ca);   \
        cb = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(odd, keep)), x3, cb);    \
    } while (0)
            ROW_PLANES(w0, c00, c01);
            ROW_PLANES(w1, c10, c11);
            ROW_PLANES(w2, c20, c21);
            ROW_PLANES(w3, c30, c31);
#undef ROW_PLANES
        }
        int b = kb / 128;
        _mm256_storeu_ps(tot, _mm256_fmadd_ps(_mm256_add_ps(c00, c01),
                                              _mm256_set1_ps(srow[0][b] * 0x1p56f),
                                              _mm256_loadu_ps(tot)));
        _mm256_storeu_ps(tot + 8, _mm256_fmadd_ps(_mm256_add_ps(c10, c11),
                                                  _mm256_set1_ps(srow[1][b] * 0x1p56f),
                                                  _mm256_loadu_ps(tot + 8)));
        _mm256_storeu_ps(tot + 16, _mm256_fmadd_ps(_mm256_add_ps(c20, c21),
                                                   _mm256_set1_ps(srow[2][b] * 0x1p56f),
                                                   _mm256_loadu_ps(tot + 16)));
        _mm256_storeu_ps(tot + 24, _mm256_fmadd_ps(_mm256_add_ps(c30, c31),
                                                   _mm256_set1_ps(srow[3][b] * 0x1p56f),
                                                   _mm256_loadu_ps(tot + 24)));
    }
}

/* The one-token decode's quarter streams (decode_fp8): rows n + r nq (r < 4)
 * for n in [n0, n0 + nq), inputs [k0, k1), into C[n - n0 + r nq] (+= with
 * acc). The whole loop in one call, so that a 4-row tile costs its blocks and
 * little else (rows4_dec1 per tile_dec call, 64 rows x K 256 resident: ~65
 * TSC cycles a tile besides the blocks); tot is scratch memory (32 floats). */
__attribute__((noinline)) static void quarters_dec1(const kt__wmat *W, int n0, int nq,
                                                    const float *const *xs, int k0, int k1,
                                                    size_t pf, float *C, int acc, float *tot)
{
    int kw = k0 + (k1 - k0) / 128 * 128;
    for (int n = n0; n < n0 + nq; n++) {
        const uint8_t *wr[4];
        const float *sr[4];
        tile_rows(W, n, nq, 4, wr, sr);
        for (int i = 0; i < 32; i += 8)
            _mm256_storeu_ps(tot + i, _mm256_setzero_ps());
        rows4_dec1(wr, sr, xs[0], k0, kw, pf, tot);
        __m128 r = hsum4(_mm256_loadu_ps(tot), _mm256_loadu_ps(tot + 8),
                         _mm256_loadu_ps(tot + 16), _mm256_loadu_ps(tot + 24));
        if (kw < k1) { /* a last, partial block: rows_dec's (planes from kw) */
            const float *xt[3] = {xs[0] + (kw - k0), xs[1], xs[2]};
            float t[12];
            rows_dec(wr, sr, xt, 1, 4, 1, kw, k1, pf, t);
            r = _mm_add_ps(r, _mm_loadu_ps(t));
        }
        float o[4];
        _mm_storeu_ps(o, r);
        for (int i = 0; i < 4; i++) {
            float *c = &C[(size_t)(n - n0) + (size_t)i * nq];
            *c = acc ? *c + o[i] : o[i];
        }
    }
}

/* The 2-3 token decode of one row over whole 128-input blocks [k0, k1), its
 * codes as planes (planes' xs from k0): tot[m][0..8) += block sums of token m
 * times s 2^56. One row a tile, so that each activation vector is read once
 * (a memory operand of its FMA) and the registers hold only the chains (4
 * per token at 2 tokens, 2 at 3), the mask and the decode's temporaries;
 * rows read one after the other make one stream. */
ALWAYS_INLINE void row1_dec(const uint8_t *w, const float *srow, const float *const *xs,
                            const int MR, int k0, int k1, size_t pf, float *tot)
{
    const int CH = MR == 2 ? 4 : 2;
    for (int kb = k0; kb < k1; kb += 128) {
        __m256 c[3][4]; /* [token][chain]: e4m3 2^-120 x a 2^64 */
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            #pragma GCC unroll 4
            for (int j = 0; j < CH; j++)
                c[m][j] = _mm256_setzero_ps();
        #pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            int k = kb + 32 * g;
            if (pf && !(g & 1))
                _mm_prefetch((const char *)(w + k) + pf, _MM_HINT_T0);
            __m256 pl[4];
            e4m3x32_planes(w + k, pl);
            #pragma GCC unroll 4
            for (int b = 0; b < 4; b++)
                #pragma GCC unroll 3
                for (int m = 0; m < MR; m++)
                    c[m][(b + 4 * g) % CH] = _mm256_fmadd_ps(
                        pl[b], _mm256_loadu_ps(xs[m] + (k - k0) + 8 * b), c[m][(b + 4 * g) % CH]);
        }
        __m256 sc = _mm256_set1_ps(srow[kb / 128] * 0x1p56f);
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++) {
            __m256 t = c[m][0];
            #pragma GCC unroll 4
            for (int j = 1; j < CH; j++)
                t = _mm256_add_ps(t, c[m][j]);
            _mm256_storeu_ps(tot + 8 * m, _mm256_fmadd_ps(t, sc, _mm256_loadu_ps(tot + 8 * m)));
        }
    }
}

/* The 2-3 token decode's rows [n0, n1), inputs [k0, k1), row by row (row1_dec,
 * a last partial block through rows_dec) into C[m ldc + n - n0] (+= with acc);
 * tot is scratch memory (24 floats). */
ALWAYS_INLINE void rows_t23(const kt__wmat *W, int n0, int n1, const float *const *xs,
                            const int MR, int k0, int k1, size_t pf, float *C, int ldc, int acc,
                            float *tot)
{
    int kw = k0 + (k1 - k0) / 128 * 128;
    for (int n = n0; n < n1; n++) {
        const uint8_t *wr[4];
        const float *sr[4];
        tile_rows(W, n, 1, 1, wr, sr);
        for (int i = 0; i < 24; i += 8)
            _mm256_storeu_ps(tot + i, _mm256_setzero_ps());
        row1_dec(wr[0], sr[0], xs, MR, k0, kw, pf, tot);
        __m128 r = hsum4(_mm256_loadu_ps(tot), _mm256_loadu_ps(tot + 8),
                         MR > 2 ? _mm256_loadu_ps(tot + 16) : _mm256_setzero_ps(),
                         _mm256_setzero_ps());
        if (kw < k1) { /* a last, partial block (planes from kw) */
            const float *xt[3] = {xs[0] + (kw - k0), xs[1] + (kw - k0), xs[2] + (kw - k0)};
            float t[12] = {0};
            rows_dec(wr, sr, xt, MR, 1, 1, kw, k1, pf, t);
            r = _mm_add_ps(r, _mm_setr_ps(t[0], t[4], t[8], 0.0f));
        }
        float o[4];
        _mm_storeu_ps(o, r);
        for (int m = 0; m < MR; m++) {
            float *c = &C[(size_t)m * ldc + (size_t)(n - n0)];
            *c = acc ? *c + o[m] : o[m];
        }
    }
}

__attribute__((noinline)) static void rows_t2(const kt__wmat *W, int n0, int n1,
                                              const float *const *xs, int k0, int k1, size_t pf,
                                              float *C, int ldc, int acc, float *tot)
{
    rows_t23(W, n0, n1, xs, 2, k0, k1, pf, C, ldc, acc, tot);
}

__attribute__((noinline)) static void rows_t3(const kt__wmat *W, int n0, int n1,
                                              const float *const *xs, int k0, int k1, size_t pf,
                                              float *C, int ldc, int acc, float *tot)
{
    rows_t23(W, n0, n1, xs, 3, k0, k1, pf, C, ldc, acc, tot);
}

/* rows_dec of MR tokens and NI rows (the pairs the decode uses); PL at one token */
static void tile_dec(const uint8_t *const *w, const float *const *srow, const float *const *xs,
                     int MR, int NI, int PL, int k0, int k1, size_t pf, float *out)
{
#define TILE_DEC(mr, ni, pl)                                                               \
    if (MR == mr && NI == ni && PL == pl) {                                                \
        rows_dec(w, srow, xs, mr, ni, pl, k0, k1, pf, out);                                \
        return;                                                                            \
    }
    PL = PL != 0;
    TILE_DEC(1, 4, 1)
    TILE_DEC(1, 2, 1)
    TILE_DEC(1, 1, 1)
    TILE_DEC(1, 4, 0)
    TILE_DEC(1, 2, 0)
    TILE_DEC(1, 1, 0)
    TILE_DEC(2, 2, 0)
    TILE_DEC(3, 2, 0)
    TILE_DEC(3, 1, 0)
#undef TILE_DEC
}

/* Software prefetch distance of the decode (bytes ahead in each row; 0 none):
 * KT_MOE_AVX2_FP8_PF, for measuring. Unset: 512 with the planes (one
 * token), none otherwise.
 * One Zen 3 core from memory, alternating with none (21:43-22:22, load 4-11):
 * K 2048 ahead in 11 of 11 rounds (0.78-0.97 against 0.66-0.85 of a read
 * loop), K 768 in 8 of 11 (0.74-0.89 against 0.69-0.84); the loaded whole
 * backend less clearly (T=1 ahead in 4 of 6 rounds). */
#define PF_UNSET (1L << 21)
static long parse_pf(const char *e)
{
    long v = e ? atol(e) : -1;
    return !e || !*e ? PF_UNSET : v >= 0 && v <= (1 << 20) ? v : 0;
}

/* Rows side by side in the one-token decode (1, 2 or 4): KT_MOE_AVX2_FP8_ROWS,
 * for measuring. */
static long parse_rows(const char *e)
{
    int n = e ? atoi(e) : 0;
    return n == 1 || n == 2 ? n : 4;
}

/* One token's rows as 4 quarter streams, two tokens' as 2 halves
 * (KT_MOE_AVX2_FP8_QUARTERS=0: adjacent rows side by side, for measuring). */
static long parse_quarters(const char *e)
{
    return !(e && *e == '0');
}

/* The decode's codes 32 a load as planes: one token's 4 quarter streams in
 * quarters_dec1, 2-3 tokens row by row in rows_t2 / rows_t3.
 * KT_MOE_AVX2_FP8_DEC=planes: session 13's kernels (one token: planes through
 * tile_dec, which spilled block chains and spent ~65 TSC cycles a 4-row tile
 * outside its blocks; 2-3 tokens: sign-extending loads, 2 rows a tile, since
 * planes with 2 rows a tile held 8-12 activation vectors and spilled, 2
 * tokens 14.6-15.1 against 13.8-14.6 TSC cycles per 64 weights, 3 tokens
 * 21.2-21.5 against 17.7-17.9); =sx: session 10's sign-extending load of 8
 * at every token count. Both for measuring. */
static long parse_planes(const char *e)
{
    return e && !strcmp(e, "sx") ? 0 : e && !strcmp(e, "planes") ? 1 : 2;
}

static void decode_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                       size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                       float *scratch)
{
    static long pf_knob, rows_knob, quarters_knob, planes_knob;
    int dec = (int)env_knob(&planes_knob, "KT_MOE_AVX2_FP8_DEC", parse_planes);
    /* planes: 1-2 at one token (tile_dec / quarters_dec1), 3 at 2-3 (rows_t2 / _t3) */
    int pl = M == 1 ? dec : dec == 2 ? 3 : 0;
    long pf_set = env_knob(&pf_knob, "KT_MOE_AVX2_FP8_PF", parse_pf);
    size_t pf = pf_set != PF_UNSET ? (size_t)pf_set : pl ? 512 : 0;
    int quarters = (int)env_knob(&quarters_knob, "KT_MOE_AVX2_FP8_QUARTERS", parse_quarters);
    int ni = M == 1 ? (int)env_knob(&rows_knob, "KT_MOE_AVX2_FP8_ROWS", parse_rows) : M == 2 ? 2
                                                                                             : 1;
    for (int kc = k0; kc < k1; kc += FP8_DEC_KC) {
        int kn = imin(FP8_DEC_KC, k1 - kc), kn8 = (kn + 7) & ~7;
        /* [M][kn8] the tokens' inputs [kc, kc + kn) times 2^64, zeros after;
         * with pl the whole 32s as planes */
        const float *xs[3];
        for (int m = 0; m < 3; m++) {
            float *d = scratch + (size_t)imin(m, M - 1) * FP8_DEC_KC;
            xs[m] = d;
            if (m >= M)
                continue;
            const float *x = (const float *)arow(A, a_stride, rows, m) + kc;
            const __m256 two64 = _mm256_set1_ps(0x1p64f);
            int k = 0;
            for (; pl && k + 32 <= kn; k += 32)
                planes_x32(x + k, d + k);
            for (; k + 8 <= kn; k += 8)
                _mm256_storeu_ps(d + k, _mm256_mul_ps(_mm256_loadu_ps(x + k), two64));
            for (; k < kn8; k++)
                d[k] = k < kn ? x[k] * 0x1p64f : 0.0f;
        }
        int kend = kc + kn, acc = kc > k0;
        int nd = n0; /* rows done */
        /* parts of the call's rows read side by side: 4 at one token, 2 at 2-3 */
        int parts = M == 1 && ni == 4 ? 4 : M >= 2 ? 2 : 1;
        int nq = (n1 - n0) / parts;
        if (pl == 3) {
            if (M == 2)
                rows_t2(W, n0, n1, xs, kc, kend, pf, C, ldc, acc, scratch + 3 * FP8_DEC_KC);
            else
                rows_t3(W, n0, n1, xs, kc, kend, pf, C, ldc, acc, scratch + 3 * FP8_DEC_KC);
            nd = n1;
        } else if (parts == 4 && pl == 2 && quarters && nq >= 4) {
            quarters_dec1(W, n0, nq, xs, kc, kend, pf, C, acc, scratch + 3 * FP8_DEC_KC);
            nd = n0 + 4 * nq;
        } else if (parts > 1 && quarters && nq >= 4) {
            /* a tile's rows from the parts of the call's rows (j, j + q, ...),
             * so that each stream reads row after row, which the prefetchers
             * follow (adjacent rows read 0.39-0.48 of a read loop, quarters
             * 0.71-0.82 at K 2048, one Zen 3 core) */
            for (int n = n0; n < n0 + nq; n++) {
                const uint8_t *wr[4];
                const float *sr[4];
                tile_rows(W, n, nq, parts, wr, sr);
                float t[12];
                tile_dec(wr, sr, xs, M, parts, pl, kc, kend, pf, t);
                for (int m = 0; m < M; m++)
                    for (int r = 0; r < parts; r++) {
                        float *c = &C[(size_t)m * ldc + (size_t)(n - n0) + (size_t)r * nq];
                        *c = acc ? *c + t[m * 4 + r] : t[m * 4 + r];
                    }
            }
            nd = n0 + parts * nq;
        }
        for (int n = nd; n < n1; n += ni) {
            int nr = imin(ni, n1 - n);
            const uint8_t *wr[4];
            const float *sr[4];
            tile_rows(W, n, 1, nr, wr, sr);
            float t[12];
            tile_dec(wr, sr, xs, M, ni, pl, kc, kend, pf, t);
            for (int m = 0; m < M; m++)
                for (int r = 0; r < nr; r++) {
                    float *c = &C[(size_t)m * ldc + (n - n0) + r];
                    *c = acc ? *c + t[m * 4 + r] : t[m * 4 + r];
                }
        }
    }
}

/* ---- prefill: a decoded chunk reused by every token ------------------------- */

/* Inputs [kc, kc + kn) of row `row` -> pan[0 .. kn rounded up to 8) as F32
 * fl(e4m3 s), zeros from kn (kc a multiple of 128). One multiply by s 2^120
 * is exact up to |s| < 2^7; larger scales take 2^64, then s 2^56. */
static void decode_row_f32(const uint8_t *row, const float *srow, int kc, int kn, float *pan)
{
    const __m256 two64 = _mm256_set1_ps(0x1p64f);
    for (int kb = 0; kb < kn; kb += 128) {
        int ke = imin(kb + 128, kn);
        float sb = srow[(kc + kb) / 128];
        int k = kb;
        if (fabsf(sb) < 0x1p7f) {
            __m256 s = _mm256_set1_ps(sb * 0x1p120f);
            for (; k + 8 <= ke; k += 8)
                _mm256_storeu_ps(pan + k, _mm256_mul_ps(e4m3x8(row + kc + k), s));
            if (k < ke)
                _mm256_storeu_ps(pan + k, _mm256_mul_ps(e4m3x8_tail(row + kc + k, ke - k), s));
        } else {
            __m256 s = _mm256_set1_ps(sb * 0x1p56f);
            for (; k < ke; k += 8) {
                __m256 v = k + 8 <= ke ? e4m3x8(row + kc + k) : e4m3x8_tail(row + kc + k, ke - k);
                _mm256_storeu_ps(pan + k, _mm256_mul_ps(_mm256_mul_ps(v, two64), s));
            }
        }
    }
}

#define TILE_R 8 /* most rows a prefill tile reads */

/* out[m * TILE_R + r] = sum_{k < kn} p_r[k] x_m[k] for R panel rows and MT
 * tokens (R * MT <= 12 accumulators, MT activation registers and one weight
 * register: the tokens' vectors are loaded first, then each row's vector
 * meets them all); the last kn % 8 inputs through masked activation loads
 * (the rows end at kn, the panel is zero after it). */
ALWAYS_INLINE void tile_f32(const float *pan, const float *const *x, const int R, const int MT,
                            int kn, float *out)
{
    __m256 acc[TILE_R][3];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 3
        for (int m = 0; m < MT; m++)
            acc[r][m] = _mm256_setzero_ps();
    int k = 0;
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    /* hot loop: MT activation vectors, then R weight vectors against them */
    for (; k < kn; k += 8) {
        __m256 xv[3];
        if (k + 8 <= kn) {
            #pragma GCC unroll 3
            for (int m = 0; m < MT; m++)
                xv[m] = _mm256_loadu_ps(x[m] + k);
        } else {
            __m256i msk = _mm256_cmpgt_epi32(_mm256_set1_epi32(kn - k), lane);
            #pragma GCC unroll 3
            for (int m = 0; m < MT; m++)
                xv[m] = _mm256_maskload_ps(x[m] + k, msk);
        }
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256 v = _mm256_loadu_ps(pan + (size_t)r * FP8_PS + k);
            #pragma GCC unroll 3
            for (int m = 0; m < MT; m++)
                acc[r][m] = _mm256_fmadd_ps(v, xv[m], acc[r][m]);
        }
    }
    __m256 z = _mm256_setzero_ps();
    #pragma GCC unroll 3
    for (int m = 0; m < MT; m++)
        #pragma GCC unroll 3
        for (int r = 0; r < R; r += 4)
            _mm_storeu_ps(out + m * TILE_R + r,
                          hsum4(acc[r][m], r + 1 < R ? acc[r + 1][m] : z,
                                r + 2 < R ? acc[r + 2][m] : z, r + 3 < R ? acc[r + 3][m] : z));
}

/* The prefill's tile, rows x tokens: 4x3 (default), 6x2, 4x2 or 8x1
 * (KT_MOE_AVX2_FP8_TILE), and its chunk, 128 to FP8_KC inputs
 * (KT_MOE_AVX2_FP8_KC, default 2048): for measuring. */
static const struct {
    const char *name;
    int r, m;
} tiles[] = {{"4x3", 4, 3}, {"6x2", 6, 2}, {"4x2", 4, 2}, {"8x1", 8, 1}};

static long parse_tile(const char *e)
{
    for (int i = 0; e && i < (int)(sizeof tiles / sizeof tiles[0]); i++)
        if (!strcmp(e, tiles[i].name))
            return i;
    return 0;
}

static long parse_kc(const char *e)
{
    int n = e ? atoi(e) : 0;
    return n >= 128 && n <= FP8_KC && n % 128 == 0 ? n : 2048;
}

/* C[m][n - n0] (+)= rows [n, n + nr) . tokens, R rows (the panel) x MT tokens a tile. */
ALWAYS_INLINE void prefill_rows(const float *pan, const int R, const int MT, int nr, int n0,
                                int n, int kc, int kn, int accumulate, const void *A,
                                size_t a_stride, const int32_t *rows, int M, float *C, int ldc)
{
    for (int m = 0; m < M; m += MT) {
        int mr = imin(MT, M - m);
        const float *x[3];
        #pragma GCC unroll 3
        for (int i = 0; i < MT; i++)
            x[i] = (const float *)arow(A, a_stride, rows, m + imin(i, mr - 1)) + kc;
        float t[3 * TILE_R];
        if (mr == MT)
            tile_f32(pan, x, R, MT, kn, t);
        else if (mr == 1)
            tile_f32(pan, x, R, 1, kn, t);
        else
            tile_f32(pan, x, R, 2, kn, t);
        for (int i = 0; i < mr; i++)
            for (int r = 0; r < nr; r++) {
                float *c = &C[(size_t)(m + i) * ldc + (n - n0) + r];
                *c = accumulate ? *c + t[i * TILE_R + r] : t[i * TILE_R + r];
            }
    }
}

static void prefill_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                        size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                        float *pan)
{
    static long tile_knob, kc_knob;
    int shape = (int)env_knob(&tile_knob, "KT_MOE_AVX2_FP8_TILE", parse_tile);
    int kc_step = (int)env_knob(&kc_knob, "KT_MOE_AVX2_FP8_KC", parse_kc);
    int R = tiles[shape].r;
    const uint8_t *w = W->w;
    const float *sc = W->scale;
    int cols = W->cols, cb = (cols + 127) / 128;
    for (int kc = k0; kc < k1; kc += kc_step) {
        int kn = imin(kc_step, k1 - kc);
        for (int n = n0; n < n1; n += R) {
            int nr = imin(R, n1 - n);
            /* [R][FP8_PS] rows n..n+R-1 (the last repeated) as F32 */
            for (int r = 0; r < R; r++) {
                int row = n + imin(r, nr - 1);
                decode_row_f32(w + (size_t)row * cols, sc + (size_t)(row / 128) * cb, kc, kn,
                               pan + (size_t)r * FP8_PS);
            }
            int acc = kc > k0;
            switch (shape) {
            case 0: prefill_rows(pan, 4, 3, nr, n0, n, kc, kn, acc, A, a_stride, rows, M, C, ldc); break;
            case 1: prefill_rows(pan, 6, 2, nr, n0, n, kc, kn, acc, A, a_stride, rows, M, C, ldc); break;
            case 2: prefill_rows(pan, 4, 2, nr, n0, n, kc, kn, acc, A, a_stride, rows, M, C, ldc); break;
            default: prefill_rows(pan, 8, 1, nr, n0, n, kc, kn, acc, A, a_stride, rows, M, C, ldc); break;
            }
        }
    }
}

/* C = A W^T, W = e4m3(q) * scale[n / 128][k / 128] (k0 a multiple of 128). */
static void gemm_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                     void *scratch)
{
    if (n1 <= n0 || k1 <= k0)
        return;
    if (!scales_in_range(W, n0, n1, k0, k1)) {
        kt__moe_kernels_ref(KT_METHOD_FP8)
            ->gemm(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
        return;
    }
    if (M <= FP8_DEC_M)
        decode_fp8(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
    else
        prefill_fp8(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
}

#define FP8_SCRATCH                                                                        \
    ((3 * FP8_DEC_KC + 32) * sizeof(float) > TILE_R * FP8_PS * sizeof(float)              \
         ? (3 * FP8_DEC_KC + 32) * sizeof(float)                                           \
         : TILE_R * FP8_PS * sizeof(float))

static const kt__moe_kernels k_fp8 = {"avx2-fp8", KT__ACT_F32, kt__moe_quant_f32, gemm_fp8,
                                      FP8_SCRATCH, NULL};

/* KT_MOE_AVX2_FP8=old: the kernel before this one (cpu/avx2/moe_avx2.c), for
 * measuring. */
static long parse_old(const char *e)
{
    return e && !strcmp(e, "old");
}

const kt__moe_kernels *kt__moe_fp8_avx2(void)
{
    static long old_knob;
    return env_knob(&old_knob, "KT_MOE_AVX2_FP8", parse_old) ? NULL : &k_fp8;
}
