/*
 * AVX-512 MoE kernels (compiled with -mavx512f/bw/vl/dq/vnni/bf16/vbmi; run
 * only when kt_hw_isa() reports all of them).
 *
 *  BF16     vdpbf16ps on BF16 activations; 4 weight rows x up to 4 tokens per
 *           register tile, K in chunks that stay in L1.
 *  FP8      Up to 3 tokens: E4M3 bytes -> BF16 x 2^-120 by shifts and a mask
 *           (fp8x64_shift: even and odd bytes of 64 apart, no table), decoded
 *           in registers against activations x 2^64 stored in the same even /
 *           odd order; block scale applied per 128 inputs to block partial
 *           sums; one token reads 4 quarter streams. More tokens: a 4-row
 *           chunk is decoded once through two 128-entry byte tables
 *           (vpermt2b) with the 128x128 block's scale folded in, then BF16
 *           tiles reuse it for every token.
 *  RAWINT4  up to 3 tokens: 128 inputs per step, nibbles (value + 8, unsigned)
 *           x INT8 activations (scale per 32-group) with vpdpbusd, each lane
 *           started at -8 * (sum of its activation bytes) to remove the +8;
 *           4 steps' lanes summed to whole groups before one scale step per
 *           row and token (int4_block4). More tokens: 32 rows x 512 inputs
 *           unpacked once to nibble bytes along the vector, 8 vpdpbusd per
 *           32-group and token on broadcast activations, one scale step per
 *           group (prefill_int4).
 */
#include "moe_avx512_common.h"

#define KC_BF16 4096 /* BF16 K chunk (prefill): 4 rows x 8 KiB, reductions rare */
#define KC_DEQ 2048  /* FP8 dequantized chunk (multiple of 128)              */
#define FP8_BLKS (KC_DEQ / 128 + 1) /* 128-input blocks a chunk can touch */
/* Row stride (elements) of the FP8 chunk: off 4 KiB multiples, so that a
 * tile's rows do not share one L1 set. */
#define DEQ_STRIDE (KC_DEQ + 64)
/* Decode prefetch distance in bytes: the same place in the next 4-row tile,
 * 1 KiB on (the hardware prefetchers see 4 interleaved streams that restart
 * at every tile; measured best for both long and short rows on Zen 4). */
#define PF_BF16(stride_elems) ((size_t)(stride_elems) * 8 + 1024)


/* ---- activations ---------------------------------------------------------- */

static void quant_bf16(const float *x, int k0, int k1, int K, void *row)
{
    (void)K;
    uint16_t *r = row;
    int k = k0;
    for (; k + 32 <= k1; k += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
        _mm512_storeu_si512(r + k, (__m512i)v);
    }
    for (; k < k1; k++)
        r[k] = kt__moe_f32_bf16(x[k]);
}

/* Position of input j (0..63) of a chunk in the BF16P64 order. */
static inline int p64_pos(int j)
{
    int L = j / 16, i = j % 16;
    return i < 8 ? 8 * L + i : 32 + 8 * L + i - 8;
}

static void quant_bf16p64(const float *x, int k0, int k1, int K, void *row)
{
    (void)K;
    uint16_t *r = row;
    /* source input of each position: 16L + j at 8L + j, 16L + 8 + j at 32 + 8L + j */
    const __m512i idx0 = _mm512_set_epi16(55, 54, 53, 52, 51, 50, 49, 48, 39, 38, 37, 36, 35, 34,
                                          33, 32, 23, 22, 21, 20, 19, 18, 17, 16, 7, 6, 5, 4, 3,
                                          2, 1, 0);
    const __m512i idx1 = _mm512_add_epi16(idx0, _mm512_set1_epi16(8));
    int k = k0;
    for (; k < k1 && (k & 63); k++)
        r[(k & ~63) + p64_pos(k & 63)] = kt__moe_f32_bf16(x[k]);
    for (; k + 64 <= k1; k += 64) {
        __m512i n0 = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16),
                                                  _mm512_loadu_ps(x + k));
        __m512i n1 = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 48),
                                                  _mm512_loadu_ps(x + k + 32));
        _mm512_storeu_si512(r + k, _mm512_permutex2var_epi16(n0, idx0, n1));
        _mm512_storeu_si512(r + k + 32, _mm512_permutex2var_epi16(n0, idx1, n1));
    }
    for (; k < k1; k++)
        r[(k & ~63) + p64_pos(k & 63)] = kt__moe_f32_bf16(x[k]);
}

/* Position of input j (0..63) of a chunk in the even / odd order. */
static inline int eo_pos(int j)
{
    return j % 2 ? 32 + j / 2 : j / 2;
}

/* BF16P64E row (moe_kernels.h): the BF16P64 row, then bf16(x 2^64) with each
 * chunk's even inputs first (exact scaling: it keeps the shift decode's
 * products, e4m3 2^-120 x a 2^64, far from FP32's denormals, which vdpbf16ps
 * flushes). */
static void quant_bf16p64e(const float *x, int k0, int k1, int K, void *row)
{
    quant_bf16p64(x, k0, k1, K, row);
    uint16_t *r = (uint16_t *)row + ((K + 63) & ~63);
    const __m512 two64 = _mm512_set1_ps(0x1p64f);
    /* word 2i + (0 | 32) of the two converted halves: input 2i, 2i + 1 */
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38,
                                          36, 34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                          10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
    int k = k0;
    for (; k < k1 && (k & 63); k++)
        r[(k & ~63) + eo_pos(k & 63)] = kt__moe_f32_bf16(x[k] * 0x1p64f);
    for (; k + 64 <= k1; k += 64) {
        __m512 f[4];
        for (int j = 0; j < 4; j++)
            f[j] = _mm512_mul_ps(_mm512_loadu_ps(x + k + 16 * j), two64);
        __m512i n0 = (__m512i)_mm512_cvtne2ps_pbh(f[1], f[0]);
        __m512i n1 = (__m512i)_mm512_cvtne2ps_pbh(f[3], f[2]);
        _mm512_storeu_si512(r + k, _mm512_permutex2var_epi16(n0, even, n1));
        _mm512_storeu_si512(r + k + 32, _mm512_permutex2var_epi16(n0, odd, n1));
    }
    for (; k < k1; k++)
        r[(k & ~63) + eo_pos(k & 63)] = kt__moe_f32_bf16(x[k] * 0x1p64f);
}

/* Q8P128 row (see moe_kernels.h), one 32-group at a time: d = max|x| / 127
 * (KT_MOE_Q8_POW2: the smallest power of two >= it), q = round(x / d); lane
 * scales and -8 * lane sums; BF16 copy (AMX prefill); -8 * group sums and d
 * as an exponent step (VNNI prefill). */
static void quant_q8p128(const float *x, int k0, int k1, int K, void *row)
{
    int K128 = (K + 127) & ~127;
    int8_t *q = row;
    float *lanes = (float *)((char *)row + K128);
    uint16_t *xb = (uint16_t *)((char *)row + 2 * (size_t)K128);
    int32_t *gsum = (int32_t *)((char *)row + 4 * (size_t)K128);
    int32_t *ebits = gsum + K128 / 32;
    int pow2 = kt__moe_q8_pow2();
    const __m256i evens_first = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11,
                                                 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7,
                                                 9, 11, 13, 15);
    for (int g = k0 / 32; g < k1 / 32; g++) {
        /* d = max|x| / 127, q = round(x / d) over the 32 inputs of the group */
        __m512 x0 = _mm512_loadu_ps(x + g * 32), x1 = _mm512_loadu_ps(x + g * 32 + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        float dg = pow2 ? kt__moe_pow2_ceil(amax / 127.0f) : amax / 127.0f;
        __m512 inv = _mm512_set1_ps(dg > 0.0f ? 1.0f / dg : 0.0f);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
        __m256i v = _mm256_set_m128i(_mm512_cvtsepi32_epi8(q1), _mm512_cvtsepi32_epi8(q0));
        /* even inputs of the group, then the odd ones */
        v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, evens_first), 0xD8);
        int c = g / 4, gi = g % 4;
        int8_t *qc = q + (size_t)c * 128;
        _mm_storeu_si128((__m128i *)(qc + 16 * gi), _mm256_castsi256_si128(v));
        _mm_storeu_si128((__m128i *)(qc + 64 + 16 * gi), _mm256_extracti128_si256(v, 1));
        __m512bh b = _mm512_cvtne2ps_pbh(x1, x0);
        _mm512_storeu_si512(xb + (size_t)g * 32, (__m512i)b);
        float *dl = lanes + (size_t)c * 32;
        int32_t *cl = (int32_t *)(dl + 16);
        /* lane 4 gi + j covers inputs 8j..8j+7 of the group (4 even + 4 odd) */
        cl[4 * gi + 0] = -8 * _mm512_mask_reduce_add_epi32(0x00ff, q0);
        cl[4 * gi + 1] = -8 * _mm512_mask_reduce_add_epi32(0xff00, q0);
        cl[4 * gi + 2] = -8 * _mm512_mask_reduce_add_epi32(0x00ff, q1);
        cl[4 * gi + 3] = -8 * _mm512_mask_reduce_add_epi32(0xff00, q1);
        gsum[g] = cl[4 * gi] + cl[4 * gi + 1] + cl[4 * gi + 2] + cl[4 * gi + 3];
        for (int l = 4 * gi; l < 4 * gi + 4; l++)
            dl[l] = dg;
        int32_t db;
        memcpy(&db, &dg, 4);
        ebits[g] = db ? db - 0x3f800000 : 0;
    }
}

/* Tokens of token block b of M (<= 6 each): M split into ceil(M / 6) blocks
 * as even as can be, larger first (32 tokens: 6 6 5 5 5 5, not 6 x 5 + 2: a
 * block of 2 loads the weight vectors for few products). One Zen 4 core, K
 * 2048: RAWINT4 26 tokens 297 -> 309, 32 tokens 308 -> 315-320 GFLOP/s; at
 * 32 tokens BF16 211 -> 218, FP8 182 -> 187. */
static inline int mtile(int M, int b)
{
    int n = (M + 5) / 6;
    return M / n + (b < M % n);
}

/* ---- BF16 tiles ----------------------------------------------------------- */

/* 32 words at p under msk; a plain load when msk is all ones (constant). */
ALWAYS_INLINE __m512i load_words(__mmask32 msk, const uint16_t *p)
{
    return msk == (__mmask32)~0u ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(msk, p);
}

/* acc[m][r] += w_r[k..k+32) . a_m[k..k+32) under msk (all ones: plain loads),
 * prefetching pf bytes ahead in the rows (0: none). */
ALWAYS_INLINE void step_bf16(const uint16_t *const *w, const uint16_t *const *a, const int MR,
                             int k, __mmask32 msk, size_t pf, __m512 (*acc)[4])
{
    __m512bh v[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (pf) /* the next tile, from memory */
            _mm_prefetch((const char *)(w[r] + k) + pf, _MM_HINT_T1);
        v[r] = (__m512bh)load_words(msk, w[r] + k);
    }
    #pragma GCC unroll 6
    for (int m = 0; m < MR; m++) {
        __m512bh x = (__m512bh)load_words(msk, a[m] + k);
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm512_dpbf16_ps(acc[m][r], v[r], x);
    }
}

/* out[m * 4 + r] = sum_{k < kn} w_r[k] a_m[k] for 4 rows and MR (<= 6) tokens. */
ALWAYS_INLINE void tile_bf16(const uint16_t *const *w, const uint16_t *const *a, const int MR,
                             int kn, size_t pf, float *out)
{
    __m512 acc[6][4];
    #pragma GCC unroll 6
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm512_setzero_ps();
    int k = 0;
    /* hot loop: 4 weight vectors x MR activation vectors per 32 inputs */
    for (; k + 32 <= kn; k += 32)
        step_bf16(w, a, MR, k, ~(__mmask32)0, pf, acc);
    if (k < kn)
        step_bf16(w, a, MR, k, tail32(kn - k), 0, acc);
    #pragma GCC unroll 6
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4, hsum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
}

/* C[m][r] (+)= sum over inputs [kofs, kofs + kn) of W tile rows (nr <= 4 rows at
 * wtile + r * wstride, already offset to kofs) times activation rows; rows
 * read in place prefetch the next 4 (pf_next), a decoded chunk nothing. */
static void tiles_bf16(const uint16_t *wtile, size_t wstride, int nr, const void *A,
                       size_t a_stride, const int32_t *rows, int M, int kofs, int kn, float *C,
                       int ldc, int accumulate, int pf_next)
{
    size_t pf = pf_next ? PF_BF16(wstride) : 0;
    const uint16_t *w[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        w[r] = wtile + (size_t)(r < nr ? r : nr - 1) * wstride;
    for (int m = 0, tb = 0; m < M; m += mtile(M, tb++)) {
        int mr = mtile(M, tb);
        const uint16_t *a[6];
        for (int i = 0; i < 6; i++)
            a[i] = (const uint16_t *)arow(A, a_stride, rows, m + (i < mr ? i : mr - 1)) + kofs;
        float t[24];
        switch (mr) {
        case 1: tile_bf16(w, a, 1, kn, pf, t); break;
        case 2: tile_bf16(w, a, 2, kn, pf, t); break;
        case 3: tile_bf16(w, a, 3, kn, pf, t); break;
        case 4: tile_bf16(w, a, 4, kn, pf, t); break;
        case 5: tile_bf16(w, a, 5, kn, pf, t); break;
        default: tile_bf16(w, a, 6, kn, pf, t); break;
        }
        for (int i = 0; i < mr; i++)
            for (int r = 0; r < nr; r++) {
                float *c = &C[(size_t)(m + i) * ldc + r];
                *c = accumulate ? *c + t[i * 4 + r] : t[i * 4 + r];
            }
    }
}

/* ---- prefill: outer-product tiles on VNNI-packed weight blocks ----------------
 * A block of PB_N weight rows x PB_K inputs is decoded to BF16 rows once,
 * transposed into pairs ([PB_K / 2][PB_N] dwords: rows (n) along a vector,
 * inputs k, k+1 in each dword), and every token's activation pair is
 * broadcast against 4 row vectors: C[m][n..n+63] += sum_k a[m][k] w[n][k],
 * no horizontal sums. The transposes cost about as much as the horizontal
 * sums they save until ~160 tokens per expert (measured on Zen 4), so the
 * dot-product tiles serve smaller batches. */
#define PB_N 64
#define PB_K 256
#define PB_MIN_M 160

typedef struct pblock {
    uint16_t rows[PB_N][PB_K];      /* decoded weights, row-major        */
    uint32_t vnni[PB_K / 2][PB_N];  /* transposed pairs                  */
} pblock;

static inline uint32_t load32(const uint16_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 16x16 transpose of 32-bit elements (rows in, columns out). */
ALWAYS_INLINE void transpose16(__m512i *r)
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            t[8 * h + i] = _mm512_shuffle_i32x4(r[8 * h + i], r[8 * h + 4 + i], 0x88);
            t[8 * h + 4 + i] = _mm512_shuffle_i32x4(r[8 * h + i], r[8 * h + 4 + i], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xdd);
    }
}

/* pb->vnni[p][n] = pair p of row n (row n at src + n * stride, inputs valid
 * below kn, rows valid below nr; zeros elsewhere), for np pairs (a multiple
 * of 16). */
static void pack_vnni(pblock *pb, const uint16_t *src, size_t stride, int nr, int kn, int np)
{
    for (int rb = 0; rb < PB_N; rb += 16)
        for (int pc = 0; pc < np; pc += 16) {
            __m512i r[16];
            __mmask32 km = tail32(kn - 2 * pc);
            for (int i = 0; i < 16; i++)
                r[i] = rb + i < nr ? _mm512_maskz_loadu_epi16(km, src + (size_t)(rb + i) * stride +
                                                                      2 * pc)
                                   : _mm512_setzero_si512();
            transpose16(r);
            for (int j = 0; j < 16; j++)
                _mm512_storeu_si512(&pb->vnni[pc + j][rb], r[j]);
        }
}

/* C tiles of MR tokens x NJ vectors of 16 rows (acc[m * NJ + j]), nvalid rows
 * valid: the row masks, and the tile loaded (load_c) or zeroed. */
ALWAYS_INLINE void ctile_load(const float *C, int ldc, int nvalid, int load_c, const int MR,
                              const int NJ, __m512 *acc, __mmask16 *mk)
{
    #pragma GCC unroll 4
    for (int j = 0; j < NJ; j++) {
        int v = nvalid - 16 * j;
        mk[j] = v >= 16 ? (__mmask16)0xffff : (v <= 0 ? 0 : (__mmask16)((1u << v) - 1u));
    }
    #pragma GCC unroll 6
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            acc[m * NJ + j] = load_c ? _mm512_maskz_loadu_ps(mk[j], C + (size_t)m * ldc + 16 * j)
                                     : _mm512_setzero_ps();
}

ALWAYS_INLINE void ctile_store(float *C, int ldc, const __mmask16 *mk, const int MR, const int NJ,
                               const __m512 *acc)
{
    #pragma GCC unroll 6
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int j = 0; j < NJ; j++)
            _mm512_mask_storeu_ps(C + (size_t)m * ldc + 16 * j, mk[j], acc[m * NJ + j]);
}

/* C rows of MR tokens x 64 weight rows over np pairs. */
ALWAYS_INLINE void otile(const pblock *pb, int np, const uint16_t *const *a, const int MR,
                         float *C, int ldc, int nvalid, int load_c)
{
    __m512 acc[6][4];
    __mmask16 mk[4];
    ctile_load(C, ldc, nvalid, load_c, MR, 4, acc[0], mk);
    /* hot loop: 4 weight vectors x MR broadcast activation pairs */
    for (int p = 0; p < np; p++) {
        __m512bh w[4];
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            w[j] = (__m512bh)_mm512_loadu_si512(&pb->vnni[p][16 * j]);
        #pragma GCC unroll 6
        for (int m = 0; m < MR; m++) {
            __m512bh b = (__m512bh)_mm512_set1_epi32((int)load32(a[m] + 2 * p));
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                acc[m][j] = _mm512_dpbf16_ps(acc[m][j], w[j], b);
        }
    }
    ctile_store(C, ldc, mk, MR, 4, acc[0]);
}

/* Fills pb->rows[0..nr) with inputs [kc, kc + kn) of weight rows n..n+nr-1 as
 * BF16 (the activation order of the kernel set), zeros elsewhere up to kpad. */
typedef void (*pb_fill_fn)(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                           pblock *pb);

static void prefill_blocks(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                           size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                           pblock *pb, pb_fill_fn fill, int kalign)
{
    for (int nb = n0; nb < n1; nb += PB_N) {
        int nr = imin(PB_N, n1 - nb);
        for (int kc = k0; kc < k1; kc += PB_K) {
            int kn = imin(PB_K, k1 - kc);
            int kpad = (kn + kalign - 1) / kalign * kalign;
            kpad = (kpad + 31) & ~31; /* whole 16-pair transposes */
            if (fill) {
                fill(W, nb, nr, kc, kn, kpad, pb);
                pack_vnni(pb, &pb->rows[0][0], PB_K, nr, kpad, kpad / 2);
            } else { /* BF16: straight from the weights */
                pack_vnni(pb, (const uint16_t *)W->w + (size_t)nb * W->cols + kc,
                          (size_t)W->cols, nr, kn, kpad / 2);
            }
            for (int m = 0; m < M; m += 6) {
                int mr = imin(6, M - m);
                const uint16_t *a[6];
                for (int i = 0; i < 6; i++)
                    a[i] = (const uint16_t *)arow(A, a_stride, rows, m + (i < mr ? i : mr - 1)) +
                           kc;
                float *c = C + (size_t)m * ldc + (nb - n0);
                int lc = kc > k0;
                switch (mr) {
                case 1: otile(pb, kpad / 2, a, 1, c, ldc, nr, lc); break;
                case 2: otile(pb, kpad / 2, a, 2, c, ldc, nr, lc); break;
                case 3: otile(pb, kpad / 2, a, 3, c, ldc, nr, lc); break;
                case 4: otile(pb, kpad / 2, a, 4, c, ldc, nr, lc); break;
                case 5: otile(pb, kpad / 2, a, 5, c, ldc, nr, lc); break;
                default: otile(pb, kpad / 2, a, 6, c, ldc, nr, lc); break;
                }
            }
        }
    }
}

/* ---- decode: one row at a time ----------------------------------------------
 * Up to 4 tokens: each weight row is read start to end before the next, so
 * the rows of a block form one sequential stream (the hardware prefetchers
 * follow it; 4 interleaved row streams reached only 0.6-0.75 of a read loop
 * on Zen 4, this order 0.9-1.0), with a software prefetch DEC_PF bytes ahead. */
#define DEC_WARM 4096

/* The first DEC_WARM (or pf, if more) bytes of an item's stream, requested
 * at once: the steady prefetch runs pf ahead, so without this the item's
 * first lines arrive one demand miss at a time. */
static inline void decode_warmup(const void *p, size_t bytes, size_t pf)
{
    size_t n = pf > DEC_WARM ? pf : DEC_WARM;
    n = bytes < n ? bytes : n;
    for (size_t off = 0; off < n; off += 64)
        _mm_prefetch((const char *)p + off, _MM_HINT_T0);
}

/* out[m * 4 + r] = sum_{k0 <= k < k1} w_r[k] a_m[k] for nr (<= 4) rows and MR
 * tokens; rows at w + r * stride, NI (1, 2 or 4; MR * NI <= 4) of them read
 * side by side (sharing each activation load). */
ALWAYS_INLINE void rows_bf16(const uint16_t *w, size_t stride, int nr, const uint16_t *const *a,
                             const int MR, const int NI, int k0, int k1, size_t pf, float *out)
{
    __m512 row_sum[4][4];
    #pragma GCC unroll 4
    for (int r0 = 0; r0 < 4; r0 += NI) {
        const uint16_t *wr[4];
        __m512 s0[4][4], s1[4][4]; /* [row of the group][token] */
        #pragma GCC unroll 4
        for (int i = 0; i < NI; i++) {
            wr[i] = w + (size_t)(r0 + i < nr ? r0 + i : nr - 1) * stride;
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                s0[i][m] = s1[i][m] = _mm512_setzero_ps();
        }
        int k = k0;
        /* hot loop: 64 inputs of NI rows, two accumulators per row and token */
        for (; k + 64 <= k1; k += 64) {
            __m512bh v0[4], v1[4];
            #pragma GCC unroll 4
            for (int i = 0; i < NI; i++) {
                _mm_prefetch((const char *)(wr[i] + k) + pf, _MM_HINT_T1);
                _mm_prefetch((const char *)(wr[i] + k) + pf + 64, _MM_HINT_T1);
                v0[i] = (__m512bh)_mm512_loadu_si512(wr[i] + k);
                v1[i] = (__m512bh)_mm512_loadu_si512(wr[i] + k + 32);
            }
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++) {
                __m512bh x0 = (__m512bh)_mm512_loadu_si512(a[m] + k);
                __m512bh x1 = (__m512bh)_mm512_loadu_si512(a[m] + k + 32);
                #pragma GCC unroll 4
                for (int i = 0; i < NI; i++) {
                    s0[i][m] = _mm512_dpbf16_ps(s0[i][m], v0[i], x0);
                    s1[i][m] = _mm512_dpbf16_ps(s1[i][m], v1[i], x1);
                }
            }
        }
        for (; k < k1; k += 32) {
            __mmask32 msk = tail32(k1 - k);
            #pragma GCC unroll 4
            for (int i = 0; i < NI; i++) {
                __m512bh v = (__m512bh)_mm512_maskz_loadu_epi16(msk, wr[i] + k);
                #pragma GCC unroll 4
                for (int m = 0; m < MR; m++)
                    s0[i][m] = _mm512_dpbf16_ps(
                        s0[i][m], v, (__m512bh)_mm512_maskz_loadu_epi16(msk, a[m] + k));
            }
        }
        #pragma GCC unroll 4
        for (int i = 0; i < NI; i++)
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                row_sum[m][r0 + i] = _mm512_add_ps(s0[i][m], s1[i][m]);
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4,
                      hsum4(row_sum[m][0], row_sum[m][1], row_sum[m][2], row_sum[m][3]));
}

static void decode_bf16(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                        size_t a_stride, const int32_t *rows, int M, float *C, int ldc)
{
    const uint16_t *a[4];
    for (int i = 0; i < 4; i++)
        a[i] = (const uint16_t *)arow(A, a_stride, rows, i < M ? i : M - 1);
    size_t pf = M >= 3 ? dec_pf_slow() : dec_pf();
    /* rows side by side: 1, 2 or 4 (one token), 1 or 2 (two tokens) */
    int ni = dec_rows();
    int sel = M == 1 ? (ni >= 4 ? 6 : ni == 2 ? 5 : 1) : M == 2 && ni >= 2 ? 7 : M;
    for (int n = n0; n < n1; n += 4) {
        int nr = imin(4, n1 - n);
        const uint16_t *w = (const uint16_t *)W->w + (size_t)n * W->cols;
        size_t st = (size_t)W->cols;
        float t[16];
        switch (sel) {
        case 1: rows_bf16(w, st, nr, a, 1, 1, k0, k1, pf, t); break;
        case 2: rows_bf16(w, st, nr, a, 2, 1, k0, k1, pf, t); break;
        case 3: rows_bf16(w, st, nr, a, 3, 1, k0, k1, pf, t); break;
        case 5: rows_bf16(w, st, nr, a, 1, 2, k0, k1, pf, t); break;
        case 6: rows_bf16(w, st, nr, a, 1, 4, k0, k1, pf, t); break;
        case 7: rows_bf16(w, st, nr, a, 2, 2, k0, k1, pf, t); break;
        default: rows_bf16(w, st, nr, a, 4, 1, k0, k1, pf, t); break;
        }
        store_tile(C, ldc, n - n0, t, M, nr);
    }
}

/* C = A W^T, W BF16 [rows][cols]. */
static void gemm_bf16(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    if (M >= PB_MIN_M) {
        prefill_blocks(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch, NULL, 2);
        return;
    }
    if (M <= 4) {
        decode_bf16(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc);
        return;
    }
    const uint16_t *w = W->w;
    /* prefill: L1-sized chunks */
    int kc_step = KC_BF16;
    for (int kc = k0; kc < k1; kc += kc_step) {
        int kn = imin(kc_step, k1 - kc);
        for (int n = n0; n < n1; n += 4)
            tiles_bf16(w + (size_t)n * W->cols + kc, (size_t)W->cols, imin(4, n1 - n), A,
                       a_stride, rows, M, kc, kn, C + (n - n0), ldc, kc > k0, 1);
    }
}

/* ---- FP8 E4M3 ------------------------------------------------------------- */

/* 64 E4M3 bytes -> 64 BF16 in BF16P64 order (u[0]: first 32, u[1]: last 32). */
ALWAYS_INLINE void fp8x64_bf16(const lut8 *L, __m512i v, __m512i *u)
{
    /* v stays in a register: both permutes overwrite an operand, and gcc
     * would otherwise load v from memory again for each (loads set the pace) */
    __asm__("" : "+v"(v));
    __m512i hi = _mm512_permutex2var_epi8(L->h0, v, L->h1);
    __m512i lo = _mm512_permutex2var_epi8(L->l0, v, L->l1);
    hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0xF8); /* | sign */
    u[0] = _mm512_unpacklo_epi8(lo, hi);
    u[1] = _mm512_unpackhi_epi8(lo, hi);
}

/* 64 E4M3 bytes -> 64 BF16 numbers e4m3 x 2^-120, exactly, in the even / odd
 * order (u[0]: the even bytes, u[1]: the odd ones). A normal E4M3 s eeee mmm is
 * the BF16 s 0000eeee mmm0000 times 2^120: a 16-bit word's high byte moves to
 * those bits by an arithmetic shift of 4 (the sign stays), a mask clears the
 * sign's copies and what the low byte left; the low byte goes up by 8 first.
 * Subnormal codes (eeee = 0, |q| <= 0.875 2^-6, below E4M3's own rounding
 * step of its normal range) become BF16 denormals, which vdpbf16ps reads as
 * zero; the NaN code (S.1111.111) reads as 480. */
ALWAYS_INLINE void fp8x64_shift(__m512i v, __m512i *u)
{
    const __m512i keep = _mm512_set1_epi16((short)0x87f0);
    __asm__("" : "+v"(v)); /* one load for both halves */
    u[0] = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 4), keep);
    u[1] = _mm512_and_si512(_mm512_srai_epi16(v, 4), keep);
}

/* 64 bytes at p under msk; a plain load when msk is all ones (constant). */
ALWAYS_INLINE __m512i load_bytes(__mmask64 msk, const uint8_t *p)
{
    return msk == ~(__mmask64)0 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(msk, p);
}

/* The 64 E4M3 bytes at p under msk -> 64 BF16: the shift decode (SH,
 * activations in the even / odd order, times 2^64) or the tables (BF16P64
 * order). */
ALWAYS_INLINE void fp8x64_dec(const int SH, const lut8 *L, const uint8_t *p, __mmask64 msk,
                              __m512i *u)
{
    if (SH)
        fp8x64_shift(load_bytes(msk, p), u);
    else
        fp8x64_bf16(L, load_bytes(msk, p), u);
}

/* Decode (up to 3 tokens), NI rows (1, 2 or 4) at a time read side by side: per
 * 128-input block the exact BF16 partial sums (two chains) are scaled by the
 * block's weight_scale_inv:
 *     out[m * 4 + r] = sum_b s_r[b] * sum_{k in b} e4m3(w_r[k]) a_m[k] */
ALWAYS_INLINE void rows_fp8(const uint8_t *const *w, const float *const *srow,
                            const uint16_t *const *a, const int MR, const int NI, const int SH,
                            int k0, int k1, size_t pf, float *out)
{
    lut8 L;
    if (!SH)
        L = lut_load();
    __m512 row_sum[3][4];
    #pragma GCC unroll 4
    for (int r0 = 0; r0 < 4; r0 += NI) {
        __m512 tot[4][3];
        #pragma GCC unroll 4
        for (int i = 0; i < NI; i++)
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                tot[i][m] = _mm512_setzero_ps();
        int kb = k0;
        /* hot loop: whole 128-input blocks, 2 x 64 weights of each row decoded to BF16 */
        for (; kb + 128 <= k1; kb += 128) {
            __m512bh x[3][4];
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                #pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
                    x[m][j] = (__m512bh)_mm512_loadu_si512(a[m] + kb + 32 * j);
            #pragma GCC unroll 4
            for (int i = 0; i < NI; i++) {
                const uint8_t *wr = w[r0 + i];
                __m512i u[2], v[2];
                _mm_prefetch((const char *)(wr + kb) + pf, _MM_HINT_T1);
                _mm_prefetch((const char *)(wr + kb) + pf + 64, _MM_HINT_T1);
                fp8x64_dec(SH, &L, wr + kb, ~(__mmask64)0, u);
                fp8x64_dec(SH, &L, wr + kb + 64, ~(__mmask64)0, v);
                __m512 sv = _mm512_set1_ps(srow[r0 + i][kb / 128]);
                #pragma GCC unroll 3
                for (int m = 0; m < MR; m++) {
                    __m512 b0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)u[0], x[m][0]);
                    __m512 b1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)u[1], x[m][1]);
                    b0 = _mm512_dpbf16_ps(b0, (__m512bh)v[0], x[m][2]);
                    b1 = _mm512_dpbf16_ps(b1, (__m512bh)v[1], x[m][3]);
                    tot[i][m] = _mm512_fmadd_ps(_mm512_add_ps(b0, b1), sv, tot[i][m]);
                }
            }
        }
        #pragma GCC unroll 4
        for (int i = 0; i < NI; i++) {
            if (kb < k1) { /* a partial last block */
                const uint8_t *wr = w[r0 + i];
                __m512 b0[3];
                #pragma GCC unroll 3
                for (int m = 0; m < MR; m++)
                    b0[m] = _mm512_setzero_ps();
                for (int k = kb; k < k1; k += 64) {
                    __m512i u[2];
                    fp8x64_dec(SH, &L, wr + k, tail64(k1 - k), u);
                    #pragma GCC unroll 3
                    for (int m = 0; m < MR; m++) {
                        b0[m] = _mm512_dpbf16_ps(b0[m], (__m512bh)u[0],
                                                 (__m512bh)_mm512_loadu_si512(a[m] + k));
                        b0[m] = _mm512_dpbf16_ps(b0[m], (__m512bh)u[1],
                                                 (__m512bh)_mm512_loadu_si512(a[m] + k + 32));
                    }
                }
                __m512 sv = _mm512_set1_ps(srow[r0 + i][kb / 128]);
                #pragma GCC unroll 3
                for (int m = 0; m < MR; m++)
                    tot[i][m] = _mm512_fmadd_ps(b0[m], sv, tot[i][m]);
            }
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                row_sum[m][r0 + i] = tot[i][m];
        }
    }
    /* the shift decode's weights are e4m3 2^-120, its activations a 2^64 */
    const __m128 unscale = _mm_set1_ps(SH ? 0x1p56f : 1.0f);
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4, _mm_mul_ps(hsum4(row_sum[m][0], row_sum[m][1], row_sum[m][2],
                                                    row_sum[m][3]),
                                              unscale));
}

/* One 4-row tile of rows_fp8 by the tile's shape sel (gemm_fp8). */
ALWAYS_INLINE void tile_fp8(const int SH, int sel, const uint8_t *const *w,
                            const float *const *srow, const uint16_t *const *a, int k0, int k1,
                            size_t pf, float *out)
{
    switch (sel) {
    case 1: rows_fp8(w, srow, a, 1, 1, SH, k0, k1, pf, out); break;
    case 2: rows_fp8(w, srow, a, 2, 1, SH, k0, k1, pf, out); break;
    case 3: rows_fp8(w, srow, a, 3, 1, SH, k0, k1, pf, out); break;
    case 4: rows_fp8(w, srow, a, 1, 2, SH, k0, k1, pf, out); break;
    default: rows_fp8(w, srow, a, 1, 4, SH, k0, k1, pf, out); break;
    }
}

/* FP8 decode's E4M3 -> BF16: the shifts (fp8x64_shift, the default) or the
 * tables (KT_MOE_FP8_DEC=table, for measuring). */
static long parse_fp8_dec(const char *e)
{
    return !(e && !strcmp(e, "table"));
}

static int fp8_shift(void)
{
    static long cached;
    return (int)env_knob(&cached, "KT_MOE_FP8_DEC", parse_fp8_dec);
}

/* One token's rows as 4 quarter streams (the shift decode, 16 rows or more):
 * one Zen 4 core, 256-row blocks from memory, alternating (14:56): K 768
 * 0.70-0.72 -> 0.71-0.81 of a read loop, K 2048 0.87-0.91 -> 0.87-0.93.
 * KT_MOE_FP8_QUARTERS=0: rows one after another (for measuring). */
static long parse_fp8_quarters(const char *e)
{
    return !(e && *e == '0');
}

static int fp8_quarters(void)
{
    static long cached;
    return (int)env_knob(&cached, "KT_MOE_FP8_QUARTERS", parse_fp8_quarters);
}

/* The E4M3 tables of one 128x128 block with its scale folded in: t[0..127]
 * the high and t[128..255] the low bytes of bf16(e4m3(i) * s) for magnitudes
 * i = 0..127 (the same BF16 numbers as scaling each decoded weight, without
 * the widen, multiply and narrow per 64 weights). */
static void fp8_scaled_lut(float s, uint8_t *t)
{
    __m512 sv = _mm512_set1_ps(s);
    for (int j = 0; j < 128; j += 16) {
        /* f32 bits of e4m3(i): the BF16 bytes in the top half */
        __m512i h = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(e4m3_hi + j)));
        __m512i l = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(e4m3_lo + j)));
        __m512 f = _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(h, 24),
                                                       _mm512_slli_epi32(l, 16)));
        __m256i b = (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(f, sv));
        _mm_storeu_si128((__m128i *)(t + j), _mm256_cvtepi16_epi8(_mm256_srli_epi16(b, 8)));
        _mm_storeu_si128((__m128i *)(t + 128 + j), _mm256_cvtepi16_epi8(b));
    }
}

/* 64 E4M3 bytes -> 64 BF16 (BF16P64 order) through a scaled table: the sign
 * is xor'ed into the high byte (a negative scale's entries carry their own). */
ALWAYS_INLINE void fp8x64_scaled(const lut8 *L, __m512i v, __m512i *u)
{
    __asm__("" : "+v"(v));
    __m512i hi = _mm512_permutex2var_epi8(L->h0, v, L->h1);
    __m512i lo = _mm512_permutex2var_epi8(L->l0, v, L->l1);
    hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0x78); /* ^ sign */
    u[0] = _mm512_unpacklo_epi8(lo, hi);
    u[1] = _mm512_unpackhi_epi8(lo, hi);
}

/* C = A W^T, W = e4m3(q) * scale[n / 128][k / 128]; A in BF16P64 order. */
static void gemm_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                     void *scratch)
{
    const uint8_t *w = W->w;
    const float *sc = W->scale;
    int cols = W->cols, cb = (cols + 127) / 128;
    if (M < 4) {
        int sh = fp8_shift();
        const uint16_t *a[3]; /* the BF16P64E row's second half for the shifts */
        for (int i = 0; i < 3; i++)
            a[i] = (const uint16_t *)arow(A, a_stride, rows, i < M ? i : M - 1) +
                   (sh ? (cols + 63) & ~63 : 0);
        size_t pf = M >= 2 ? dec_pf_slow() : dec_pf();
        int nq = (n1 - n0) / 4, nd = n0; /* rows done */
        if (M == 1 && sh && nq >= 4 && fp8_quarters()) {
            /* 4 quarter streams of nq rows, one row of each a tile, sharing
             * the loads of the token's activations; the 0-3 rows left after
             * them as below */
            for (int r = 0; r < 4; r++)
                decode_warmup(w + (size_t)(n0 + r * nq) * cols + k0, (size_t)nq * cols, 256);
            for (int n = n0; n < n0 + nq; n++) {
                const uint8_t *wr[4];
                const float *sr[4];
                for (int r = 0; r < 4; r++) {
                    int row = n + r * nq;
                    wr[r] = w + (size_t)row * cols;
                    sr[r] = sc + (size_t)(row / 128) * cb;
                }
                float t[4];
                rows_fp8(wr, sr, a, 1, 4, 1, k0, k1, pf, t);
                for (int r = 0; r < 4; r++)
                    C[n - n0 + r * nq] = t[r];
            }
            nd = n0 + 4 * nq;
        }
        /* one token: rows side by side (dec_rows: 1, 2 or 4) */
        int sel = M == 1 && dec_rows() > 1 ? 3 + dec_rows() / 2 : M;
        if (nd < n1)
            decode_warmup(w + (size_t)nd * cols + k0, (size_t)(n1 - nd) * cols, pf);
        for (int n = nd; n < n1; n += 4) {
            int nr = imin(4, n1 - n);
            const uint8_t *wr[4];
            const float *sr[4];
            for (int r = 0; r < 4; r++) {
                int row = n + imin(r, nr - 1);
                wr[r] = w + (size_t)row * cols;
                sr[r] = sc + (size_t)(row / 128) * cb;
            }
            float t[12];
            if (sh)
                tile_fp8(1, sel, wr, sr, a, k0, k1, pf, t);
            else
                tile_fp8(0, sel, wr, sr, a, k0, k1, pf, t);
            store_tile(C, ldc, n - n0, t, M, nr);
        }
        return;
    }
    /* prefill: a 4-row chunk decoded once through the block's scaled tables
     * (made once per 128-row block and K chunk), then BF16 tiles reuse it for
     * every token; the chunk keeps the BF16P64 order, so tiles run over whole
     * 64s. A row's result does not depend on the call's rows or tokens. */
    uint16_t *deq = scratch;                           /* [4][DEQ_STRIDE]       */
    uint8_t *luts = (uint8_t *)(deq + 4 * DEQ_STRIDE); /* [FP8_BLKS][256]       */
    for (int kc = k0; kc < k1; kc += KC_DEQ) {
        int kn = imin(KC_DEQ, k1 - kc), kn64 = (kn + 63) & ~63;
        for (int bn = n0; bn < n1;) {
            int be = imin(n1, (bn / 128 + 1) * 128); /* rows of one scale block */
            const float *sblk = sc + (size_t)(bn / 128) * cb;
            /* the tables of the chunk's 128-input blocks (kc need not be a
             * multiple of 128) */
            int b0 = kc / 128, nblk = (kc + kn - 1) / 128 - b0 + 1;
            for (int b = 0; b < nblk; b++)
                fp8_scaled_lut(sblk[b0 + b], luts + (size_t)b * 256);
            for (int n = bn; n < be; n += 4) {
                int nr = imin(4, be - n);
                /* [4][kn] bytes -> [4][kn] BF16, 64 inputs of the 4 rows at a time */
                for (int k = 0; k < kn; k += 64) {
                    const uint8_t *t = luts + (size_t)((kc + k) / 128 - b0) * 256;
                    lut8 L = {_mm512_loadu_si512(t), _mm512_loadu_si512(t + 64),
                              _mm512_loadu_si512(t + 128), _mm512_loadu_si512(t + 192)};
                    __mmask64 msk = tail64(kn - k);
                    for (int r = 0; r < nr; r++) {
                        const uint8_t *row = w + (size_t)(n + r) * cols + kc + k;
                        uint16_t *d = deq + (size_t)r * DEQ_STRIDE + k;
                        __m512i u[2];
                        _mm_prefetch((const char *)row + 4 * (size_t)cols, _MM_HINT_T1);
                        fp8x64_scaled(&L, _mm512_maskz_loadu_epi8(msk, row), u);
                        _mm512_storeu_si512(d, u[0]);
                        _mm512_storeu_si512(d + 32, u[1]);
                    }
                }
                tiles_bf16(deq, DEQ_STRIDE, nr, A, a_stride, rows, M, kc, kn64, C + (n - n0),
                           ldc, kc > k0, 0);
            }
            bn = be;
        }
    }
}

/* ---- RAWINT4 -------------------------------------------------------------- */

/* Decode (up to 3 tokens): NR rows (4 for one token on rows under 2560
 * inputs, else 2) share each activation load (INT8 activations are twice the
 * weight bytes, so the loads decide the speed), 128 inputs (64 bytes of a
 * row) per step. Per lane l of
 * step c (group 4c + l / 4):
 *     i = -8 * sum(q) + sum(nib * q) = sum((nib - 8) * q)    (vpdpbusd, exact)
 *     acc += i * (s_w[group] * d_x[group])
 * sv[r]: the weight scales of row r for the step's lanes. */
ALWAYS_INLINE void int4_step(const uint8_t *const *w, const __mmask64 msk, const __m512 *sv,
                             const int8_t *const *a, const int NR, const int MR, int K128, int c,
                             size_t pf, __m512 (*acc)[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i lo[4], hi[4];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        _mm_prefetch((const char *)(w[r] + (size_t)c * 64) + pf, _MM_HINT_T1);
        __m512i b = _mm512_maskz_loadu_epi8(msk, w[r] + (size_t)c * 64);
        __asm__("" : "+v"(b)); /* one load: gcc would fold it into both uses */
        lo[r] = _mm512_and_si512(b, m4);
        hi[r] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++) {
        const int8_t *q = a[m] + (size_t)c * 128;
        const float *lane = (const float *)(a[m] + K128) + (size_t)c * 32;
        __m512i qlo = _mm512_loadu_si512(q), qhi = _mm512_loadu_si512(q + 64);
        __m512 dv = _mm512_loadu_ps(lane);
        __m512i cv = _mm512_loadu_si512(lane + 16);
        /* loaded once for the NR rows (zmm loads, not arithmetic, set the pace
         * on Zen 4; gcc would fold a load into every row's instruction) */
        __asm__("" : "+v"(qlo), "+v"(qhi), "+v"(dv), "+v"(cv));
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m512i iv = _mm512_dpbusd_epi32(cv, lo[r], qlo);
            iv = _mm512_dpbusd_epi32(iv, hi[r], qhi);
            acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iv), _mm512_mul_ps(sv[r], dv),
                                        acc[m][r]);
        }
    }
}

/* The int32 sums of step c (lanes as in int4_step) for NR rows and MR tokens,
 * the rows' 64 bytes of the step at w[r] + off. */
ALWAYS_INLINE void int4_sums(const uint8_t *const *w, size_t off, const int8_t *const *a,
                             const int NR, const int MR, int K128, int c, size_t pf,
                             __m512i (*iv)[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i lo[4], hi[4];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        _mm_prefetch((const char *)(w[r] + off) + pf, _MM_HINT_T1);
        __m512i b = _mm512_loadu_si512(w[r] + off);
        __asm__("" : "+v"(b));
        lo[r] = _mm512_and_si512(b, m4);
        hi[r] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++) {
        const int8_t *q = a[m] + (size_t)c * 128;
        __m512i qlo = _mm512_loadu_si512(q), qhi = _mm512_loadu_si512(q + 64);
        __m512i cv = _mm512_loadu_si512((const float *)(a[m] + K128) + (size_t)c * 32 + 16);
        __asm__("" : "+v"(qlo), "+v"(qhi), "+v"(cv));
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            iv[m][r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(cv, lo[r], qlo), hi[r], qhi);
    }
}

/* Half of the lane reduction: per 128-bit block gi, the half-group sums of
 * steps A and B, [A0 + A2, A1 + A3, B0 + B2, B1 + B3]. */
ALWAYS_INLINE __m512i int4_pair(__m512i A, __m512i B)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi64(A, B), _mm512_unpackhi_epi64(A, B));
}

/* Four steps (512 inputs, 16 groups; NS < 4: the first NS, the rest count
 * as zeros) with one scale step per row and token: the steps' int32 lanes
 * summed to whole groups first,
 *     z[4 gi + j] = sum of group 4 j + gi (all 32 inputs)      (exact)
 *     acc += z * (s_w * d_x)     (s_w, d_x permuted to the same order)
 * instead of a conversion, scale product and FMA per step: those share the
 * two multiply pipes with vpdpbusd on Zen 4, the shuffles and adds do not.
 * Step j of row r at w[r] + j * cs; s[r]: the row's 16 BF16 scales, in
 * group order (ZS 0: rows as stored) or already in z's order (ZS 1: the
 * tiled layout, whose scales sit in the stream: sp, prefetched pf ahead).
 * dx[m]: the token's 16 group scales in z's order (int4_dx). */
ALWAYS_INLINE void int4_block4(const uint8_t *const *w, size_t cs, const uint16_t *const *s,
                               const int ZS, const int8_t *const *a, const float *const *dx,
                               const int NR, const int MR, int K128, int c, const int NS,
                               size_t pf, __m512 (*acc)[4])
{
    /* output word 2L + 1 (a dword's high half) <- scale 4 (L % 4) + L / 4 */
    const __m512i sidx = _mm512_set_epi16(15, 0, 11, 0, 7, 0, 3, 0, 14, 0, 10, 0, 6, 0, 2, 0,
                                          13, 0, 9, 0, 5, 0, 1, 0, 12, 0, 8, 0, 4, 0, 0, 0);
    __m512i x[3][4], y[3][4], iv[3][4]; /* steps c, c + 2, the one after each */
    int4_sums(w, 0, a, NR, MR, K128, c, pf, x);
    if (NS > 1)
        int4_sums(w, cs, a, NR, MR, K128, c + 1, pf, iv);
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            x[m][r] = int4_pair(x[m][r], NS > 1 ? iv[m][r] : _mm512_setzero_si512());
    if (NS > 2)
        int4_sums(w, 2 * cs, a, NR, MR, K128, c + 2, pf, y);
    if (NS > 3)
        int4_sums(w, 3 * cs, a, NR, MR, K128, c + 3, pf, iv);
    __m512 sw[4];
    if (ZS) { /* the block's two scale lines, as far ahead as the rows */
        _mm_prefetch((const char *)s[0] + pf, _MM_HINT_T1);
        _mm_prefetch((const char *)s[0] + pf + 64, _MM_HINT_T1);
    } else { /* the scales as far ahead as the rows (K / 16 bytes a row for K / 2
              * bytes of nibbles; without it, 0.50-0.64 -> 0.54-0.72 of a read
              * loop, one core) */
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            _mm_prefetch((const char *)s[r] + pf / 8, _MM_HINT_T1);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        __m256i h = _mm256_loadu_si256((const __m256i *)s[r]);
        sw[r] = _mm512_castsi512_ps(
            ZS ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)
               : _mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, sidx, _mm512_castsi256_si512(h)));
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++) {
        __m512 d = _mm512_loadu_ps(dx[m]);
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m512i yi = NS > 2 ? int4_pair(y[m][r], NS > 3 ? iv[m][r] : _mm512_setzero_si512())
                                : _mm512_setzero_si512();
            __m512 yv = _mm512_castsi512_ps(yi);
            __m512 xv = _mm512_castsi512_ps(x[m][r]);
            __m512i z = _mm512_add_epi32(
                _mm512_castps_si512(_mm512_shuffle_ps(xv, yv, _MM_SHUFFLE(2, 0, 2, 0))),
                _mm512_castps_si512(_mm512_shuffle_ps(xv, yv, _MM_SHUFFLE(3, 1, 3, 1))));
            acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(z), _mm512_mul_ps(sw[r], d),
                                        acc[m][r]);
        }
    }
}

/* A Q8P128 row's group scales d_x for the 4-step blocks from step c on
 * (nb blocks), each in int4_block4's order: dx[16 b + 4 gi + j] = d_x of
 * group 4 (c + 4 b + j) + gi, zero from group ng on (the row's end). */
static void int4_dx(const int8_t *a, int K128, int c, int nb, int ng, float *dx)
{
    const float *lane = (const float *)(a + K128);
    for (int b = 0; b < nb; b++)
        for (int gi = 0; gi < 4; gi++)
            for (int j = 0; j < 4; j++) {
                int st = c + 4 * b + j;
                dx[16 * b + 4 * gi + j] = 4 * st + gi < ng ? lane[(size_t)st * 32 + 4 * gi] : 0;
            }
}

/* The BF16 scales of groups [g, g + 16) as F32, those outside [lo, hi) zero. */
ALWAYS_INLINE __m512 scales16(const uint16_t *s, int g, int lo, int hi)
{
    int a = lo - g, b = hi - g;
    __mmask16 mk = (__mmask16)((b >= 16 ? 0xffffu : (b <= 0 ? 0u : (1u << b) - 1u)) &
                               (a <= 0 ? 0xffffu : ~((1u << a) - 1u)));
    __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, s + g));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

/* out[m * 4 + r] for NR rows and MR tokens over inputs [k0, k1); dx (or NULL)
 * the tokens' group scales for int4_block4, from the first whole step on. */
ALWAYS_INLINE void tile_int4(const uint8_t *const *w, const uint16_t *const *s,
                             const int8_t *const *a, const float *const *dx, const int NR,
                             const int MR, int K, int k0, int k1, size_t pf, float *out)
{
    int K128 = (K + 127) & ~127;
    __m512 acc[3][4];
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[m][r] = _mm512_setzero_ps();
    /* lane l of step j of a 4-step block: group 4j + l / 4 */
    const __m512i grp = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i four = _mm512_set1_epi32(4);
    const __m512i idx1 = _mm512_add_epi32(grp, four), idx2 = _mm512_add_epi32(idx1, four);
    const __m512i idx3 = _mm512_add_epi32(idx2, four);
    __m512 sv[4];
    int c = k0 / 128;
    if (k0 % 128) { /* a partial first step: groups before k0 get zero scales */
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            sv[r] = _mm512_permutexvar_ps(grp, scales16(s[r], 4 * c, k0 / 32, k1 / 32));
        int left = imin(128, k1 - c * 128);
        int4_step(w, tail64(left / 2), sv, a, NR, MR, K128, c, pf, acc);
        c++;
    }
    if (dx) /* hot loop: 4 whole steps, one scale step per row and token */
        for (int b = 0; (c + 4) * 128 <= k1; c += 4, b++) {
            const float *d[3];
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                d[m] = dx[m] + 16 * b;
            const uint8_t *wc[4];
            const uint16_t *sc[4];
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                wc[r] = w[r] + (size_t)c * 64;
                sc[r] = s[r] + 4 * c;
            }
            int4_block4(wc, 64, sc, 0, a, d, NR, MR, K128, c, 4, pf, acc);
        }
    /* (without dx) 4 whole steps (512 inputs, 16 scales per row) per iteration */
    for (; (c + 4) * 128 <= k1; c += 4) {
        __m512 s16[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            s16[r] = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s[r] + 4 * c))), 16));
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            sv[r] = _mm512_permutexvar_ps(grp, s16[r]);
        int4_step(w, ~(__mmask64)0, sv, a, NR, MR, K128, c, pf, acc);
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            sv[r] = _mm512_permutexvar_ps(idx1, s16[r]);
        int4_step(w, ~(__mmask64)0, sv, a, NR, MR, K128, c + 1, pf, acc);
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            sv[r] = _mm512_permutexvar_ps(idx2, s16[r]);
        int4_step(w, ~(__mmask64)0, sv, a, NR, MR, K128, c + 2, pf, acc);
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            sv[r] = _mm512_permutexvar_ps(idx3, s16[r]);
        int4_step(w, ~(__mmask64)0, sv, a, NR, MR, K128, c + 3, pf, acc);
    }
    for (; (c + 1) * 128 <= k1; c++) { /* whole steps after the blocks of 4 */
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) /* the step's 4 scales, widened */
            sv[r] = _mm512_permutexvar_ps(
                grp, _mm512_castsi512_ps(_mm512_slli_epi32(
                         _mm512_cvtepu16_epi32(_mm256_castsi128_si256(
                             _mm_loadl_epi64((const __m128i *)(s[r] + 4 * c)))),
                         16)));
        int4_step(w, ~(__mmask64)0, sv, a, NR, MR, K128, c, pf, acc);
    }
    if (c * 128 < k1) { /* a partial last step; groups from k1 on get zero scales */
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            sv[r] = _mm512_permutexvar_ps(grp, scales16(s[r], 4 * c, k0 / 32, k1 / 32));
        int4_step(w, tail64((k1 - c * 128) / 2), sv, a, NR, MR, K128, c, pf, acc);
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4, hsum4(acc[m][0], acc[m][NR > 1 ? 1 : 0],
                                         acc[m][NR > 2 ? 2 : 0], acc[m][NR > 3 ? 3 : 0]));
}

/* Decode prefetch distance of the tiled layout (one stream per 4-row tile):
 * KT_MOE_INT4_PF bytes (0 to 64 KiB) overrides it, for measuring. */
#define INT4T_PF 6144

static long parse_int4t_pf(const char *e)
{
    long n = e ? atol(e) : 0;
    return e && n >= 0 && n <= 65536 ? n : INT4T_PF;
}

static size_t int4t_pf(void)
{
    static long cached;
    return (size_t)env_knob(&cached, "KT_MOE_INT4_PF", parse_int4t_pf);
}

/* out[m * 4 + r] for the 4 rows of the tile holding row n (KT__INT4_TILED)
 * and MR tokens over the blocks [b0, b1) of 512 inputs (ns: steps up to k1);
 * dx[m]: the tokens' group scales in int4_block4's order from block b0 on.
 * One token: the 4 rows together, the tile one sequential stream; more: NR
 * rows of 2, the tile twice. */
ALWAYS_INLINE void tile_int4t(const kt__wmat *W, int n, const int8_t *const *a,
                              const float *const *dx, const int NR, const int MR, int b0,
                              int b1, int ns, size_t pf, float *out)
{
    int K128 = (W->cols + 127) & ~127;
    __m512 acc[3][4];
    #pragma GCC unroll 2
    for (int r0 = 0; r0 < 4; r0 += NR) {
        __m512 ac[3][4]; /* rows r0 .. r0 + NR - 1 */
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                ac[m][r] = _mm512_setzero_ps();
        for (int b = b0; b < b1; b++) {
            const uint8_t *blk = kt__int4t_block(W, n, b);
            const uint8_t *w[4];
            const uint16_t *sp[4];
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                w[r] = blk + 128 + (r0 + r) * 64;
                sp[r] = (const uint16_t *)(blk + (r0 + r) * 32);
            }
            const float *d[3];
            #pragma GCC unroll 3
            for (int m = 0; m < MR; m++)
                d[m] = dx[m] + 16 * (b - b0);
            int left = ns - 4 * b; /* steps of this block */
            /* hot loop: whole blocks of 4 steps */
            if (left >= 4)
                int4_block4(w, 256, sp, 1, a, d, NR, MR, K128, 4 * b, 4, pf, ac);
            else if (left == 3)
                int4_block4(w, 256, sp, 1, a, d, NR, MR, K128, 4 * b, 3, pf, ac);
            else if (left == 2)
                int4_block4(w, 256, sp, 1, a, d, NR, MR, K128, 4 * b, 2, pf, ac);
            else
                int4_block4(w, 256, sp, 1, a, d, NR, MR, K128, 4 * b, 1, pf, ac);
        }
        #pragma GCC unroll 3
        for (int m = 0; m < MR; m++)
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                acc[m][r0 + r] = ac[m][r];
    }
    #pragma GCC unroll 3
    for (int m = 0; m < MR; m++)
        _mm_storeu_ps(out + m * 4, hsum4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
}

/* Decode (up to 3 tokens) on the tiled layout: inputs [k0, k1), k0 a
 * multiple of 512, k1 too or K; rows from n0 (a multiple of 4). dx in
 * scratch: 16 floats per block and token. */
static void decode_int4t(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                         size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                         float *scratch)
{
    int K = W->cols, K128 = (K + 127) & ~127;
    int b0 = k0 / 512, b1 = (k1 + 511) / 512, ns = (k1 + 127) / 128;
    const int8_t *a[3];
    const float *dx[3];
    for (int i = 0; i < 3; i++)
        a[i] = arow(A, a_stride, rows, i < M ? i : M - 1);
    for (int m = 0; m < 3; m++) { /* tokens past M: the last one's */
        float *d = scratch + (size_t)imin(m, M - 1) * (b1 - b0) * 16;
        if (m < M)
            int4_dx(a[m], K128, 4 * b0, b1 - b0, k1 / 32, d);
        dx[m] = d;
    }
    size_t pf = int4t_pf();
    for (int n = n0; n < n1; n += 4) {
        float t[12];
        switch (M) {
        case 1: tile_int4t(W, n, a, dx, 4, 1, b0, b1, ns, pf, t); break;
        case 2: tile_int4t(W, n, a, dx, 2, 2, b0, b1, ns, pf, t); break;
        default: tile_int4t(W, n, a, dx, 2, 3, b0, b1, ns, pf, t); break;
        }
        store_tile(C, ldc, n - n0, t, M, imin(4, n1 - n));
    }
}

/* ---- RAWINT4 prefill: VNNI outer-product tiles ------------------------------
 * A tile of 32 weight rows x VT_K inputs is unpacked once into nibble bytes
 * laid out row-along-the-vector: for group g (32 inputs) and step s (0..7),
 * one vector per 16 rows whose dword r holds 4 nibbles of row r: the low
 * nibbles of the group's word s (s < 4) or the high nibbles of word s - 4,
 * i.e. inputs 8w + {0,2,4,6} or 8w + {1,3,5,7}. Every token then runs
 * against it: the matching 4 INT8 activations of the Q8P128 row broadcast,
 * 8 vpdpbusd per group into an int32 accumulator started at -8 x the group's
 * activation sum, then one conversion, scale product and FMA per group:
 *     C[m][n] = sum_g s_w[n][g] d_x[m][g] sum_{k in g} (nib[n][k] - 8) q[m][k]
 * (exact integer group sums; 2 x the MACs per instruction of the BF16 dot
 * products, and the 8-to-1 ratio of products to scale steps keeps it there). */
#define VT_ROWS 32
#define VT_K 512

typedef struct vtile {
    uint8_t w[VT_K / 32][8][VT_ROWS / 16][64]; /* [group][step][16 rows][row dwords] */
    float s[VT_K / 32][VT_ROWS / 16][16];      /* [group][16 rows] weight scales     */
    int exp_ok; /* every scale in [2^-63, 2^64): s_w d_x by an exponent add */
} vtile;

/* An F32 times a power of two 2^e, |e| <= 63, as an exponent add stays
 * normal for exponent fields in [EXP_LO, EXP_HI]. */
#define EXP_LO 64
#define EXP_HI 190

/* Rows nb..nb+nr-1 (at most 32), inputs [kc, kc + kn) (kn a multiple of 32,
 * at most VT_K) into vt; rows past nr are zero. */
static void pack_vtile(const kt__wmat *W, int nb, int nr, int kc, int kn, vtile *vt)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    size_t rb = (size_t)W->cols / 2, sb = (size_t)W->cols / 32;
    const uint8_t *w = (const uint8_t *)W->w + kc / 2;
    const uint16_t *sc = (const uint16_t *)W->scale + kc / 32;
    int ng = kn / 32, ok = 1, tiled = W->type == KT__INT4_TILED; /* kc % 512 == 0 */
    for (int h = 0; h < VT_ROWS / 16; h++) {
        int r0 = nb + 16 * h;
        /* [16 rows][64 bytes] -> per (group, step) 16 row dwords, lo and hi nibbles:
         * the packed dwords transposed once, then split (the split commutes) */
        for (int c = 0; 128 * c < kn; c++) {
            __mmask64 msk = tail64((kn - 128 * c) / 2);
            __m512i b[16];
            for (int i = 0; i < 16; i++) /* tiled: steps past K are zero bytes */
                b[i] = r0 + i >= nb + nr ? _mm512_setzero_si512()
                       : tiled ? _mm512_loadu_si512(kt__int4t_step(W, r0 + i, kc / 128 + c))
                               : _mm512_maskz_loadu_epi8(msk, w + (size_t)(r0 + i) * rb + 64 * c);
            transpose16(b);
            /* dword l of the 64 bytes: word 4 gi + s of the chunk, group 4c + gi */
            for (int l = 0; l < 16 && 4 * c + l / 4 < ng; l++) {
                _mm512_storeu_si512(vt->w[4 * c + l / 4][l % 4][h], _mm512_and_si512(b[l], m4));
                _mm512_storeu_si512(vt->w[4 * c + l / 4][4 + l % 4][h],
                                    _mm512_and_si512(_mm512_srli_epi16(b[l], 4), m4));
            }
        }
        /* [16 rows][16 groups] BF16 scales -> per group 16 row scales, F32
         * (tiled: position l holds group 4 (l % 4) + l / 4, zero past K) */
        __m512i t[16];
        for (int i = 0; i < 16; i++) {
            const uint16_t *sp = tiled ? (const uint16_t *)(kt__int4t_block(W, r0 + i, kc / 512) +
                                                            (r0 + i) % 4 * 32)
                                       : sc + (size_t)(r0 + i) * sb;
            __m256i v = r0 + i < nb + nr
                            ? _mm256_maskz_loadu_epi16((__mmask16)tail32(tiled ? 16 : ng), sp)
                            : _mm256_setzero_si256();
            t[i] = _mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16);
        }
        transpose16(t);
        const __m512i lo = _mm512_set1_epi32(EXP_LO << 23), hi = _mm512_set1_epi32(EXP_HI << 23);
        for (int l = 0; l < 16; l++) {
            int g = tiled ? 4 * (l % 4) + l / 4 : l;
            if (g >= ng)
                continue;
            /* zero scales: the rows' weights made 8 (value 0: integer sums 0)
             * and the scale 1, so the exponent add needs no mask */
            __mmask16 zero = _mm512_testn_epi32_mask(t[l], _mm512_set1_epi32(0x7fffffff));
            if (zero) {
                t[l] = _mm512_mask_mov_epi32(t[l], zero, _mm512_set1_epi32(0x3f800000));
                for (int st = 0; st < 8; st++)
                    _mm512_storeu_si512(vt->w[g][st][h],
                                        _mm512_mask_mov_epi32(_mm512_loadu_si512(vt->w[g][st][h]),
                                                              zero, _mm512_set1_epi8(8)));
            }
            __m512i mag = _mm512_and_si512(t[l], _mm512_set1_epi32(0x7fffffff));
            ok &= !(_mm512_cmplt_epi32_mask(mag, lo) | _mm512_cmpge_epi32_mask(mag, hi));
            _mm512_storeu_si512(vt->s[g][h], t[l]);
        }
    }
    vt->exp_ok = ok;
}

/* C[m][0..32) (+)= the tile's ng groups from group g0 on, for MR (<= 6)
 * tokens (Q8P128 rows a[m]); rows at or past nvalid are not stored. */
ALWAYS_INLINE void vtile_run(const vtile *vt, int ng, int g0, int K128, const int8_t *const *a,
                             const int MR, const int EXP, float *C, int ldc, int nvalid,
                             int load_c)
{
    __mmask16 mk[2];
    __m512 f[6][2];
    ctile_load(C, ldc, nvalid, load_c, MR, 2, f[0], mk);
    for (int g = 0; g < ng; g++) {
        int G = g0 + g;
        size_t qoff = (size_t)128 * (G / 4) + 16 * (G % 4); /* the group's words, low nibbles */
        __m512i acc[6][2];
        #pragma GCC unroll 6
        for (int m = 0; m < MR; m++) {
            int32_t c0;
            memcpy(&c0, a[m] + 4 * (size_t)K128 + 4 * (size_t)G, 4);
            acc[m][0] = acc[m][1] = _mm512_set1_epi32(c0);
        }
        /* hot loop: 8 steps of 4 inputs, 2 weight vectors x MR broadcast tokens */
        #pragma GCC unroll 8
        for (int st = 0; st < 8; st++) {
            __m512i w0 = _mm512_loadu_si512(vt->w[g][st][0]);
            __m512i w1 = _mm512_loadu_si512(vt->w[g][st][1]);
            #pragma GCC unroll 6
            for (int m = 0; m < MR; m++) {
                int32_t q4;
                memcpy(&q4, a[m] + qoff + 4 * (st % 4) + 64 * (st / 4), 4);
                __m512i x = _mm512_set1_epi32(q4);
                acc[m][0] = _mm512_dpbusd_epi32(acc[m][0], w0, x);
                acc[m][1] = _mm512_dpbusd_epi32(acc[m][1], w1, x);
            }
        }
        /* f += int sum * s_w * d_x */
        __m512 s0 = _mm512_loadu_ps(vt->s[g][0]), s1 = _mm512_loadu_ps(vt->s[g][1]);
        #pragma GCC unroll 6
        for (int m = 0; m < MR; m++) {
            __m512 p0, p1;
            if (EXP) { /* d_x = 2^e: s_w d_x is s_w with e added to its exponent, an
                        * integer add off the two pipes that vpdpbusd, the
                        * product and the FMA share on Zen 4 (d_x = 0: e = 0,
                        * the sums are 0) */
                const int32_t *eb = (const int32_t *)(a[m] + 4 * (size_t)K128) + K128 / 32;
                __m512i e = _mm512_set1_epi32(eb[G]);
                p0 = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(s0), e));
                p1 = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(s1), e));
            } else {
                const float *dl = (const float *)(a[m] + K128);
                __m512 d = _mm512_set1_ps(dl[32 * (G / 4) + 4 * (G % 4)]);
                p0 = _mm512_mul_ps(s0, d);
                p1 = _mm512_mul_ps(s1, d);
            }
            f[m][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][0]), p0, f[m][0]);
            f[m][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][1]), p1, f[m][1]);
        }
    }
    ctile_store(C, ldc, mk, MR, 2, f[0]);
}

/* Row n's weights of inputs [k, k + kn) (at most VT_K, from a multiple of
 * 512 if tiled) and their scales, into L2. */
ALWAYS_INLINE void prefetch_row_int4(const kt__wmat *W, int n, int k, int kn)
{
    if (W->type == KT__INT4_TILED) {
        for (int c = k / 128; c < (k + kn + 127) / 128; c++)
            _mm_prefetch((const char *)kt__int4t_step(W, n, c), _MM_HINT_T1);
        _mm_prefetch((const char *)kt__int4t_block(W, n, k / 512) + n % 4 * 32, _MM_HINT_T1);
        return;
    }
    const char *wp = (const char *)W->w + (size_t)n * (W->cols / 2) + k / 2;
    for (int b = 0; b < kn / 2; b += 64)
        _mm_prefetch(wp + b, _MM_HINT_T1);
    _mm_prefetch((const char *)((const uint16_t *)W->scale + (size_t)n * (W->cols / 32) + k / 32),
                 _MM_HINT_T1);
}

/* Every token block of M against the packed tile vt (rows nb.., inputs kc..
 * of kn), EXP as in vtile_run; between the blocks, a share of the next tile's
 * rows (pn.., inputs pk.. of pkn; pnr rows, *pr done) into L2. */
ALWAYS_INLINE void vtile_tokens(const kt__wmat *W, const vtile *vt, int nb, int nr, int kc,
                                int kn, int k0, const void *A, size_t a_stride,
                                const int32_t *rows, int M, float *C, int ldc, const int EXP,
                                int pn, int pnr, int pk, int pkn, int *pr)
{
    int K128 = (W->cols + 127) & ~127;
    int per_block = (pnr * 6 + M - 1) / M;
    for (int m = 0, tb = 0; m < M; m += mtile(M, tb++)) {
        for (int e = *pr + per_block; *pr < e && *pr < pnr; (*pr)++)
            prefetch_row_int4(W, pn + *pr, pk, pkn);
        int mr = mtile(M, tb);
        const int8_t *a[6];
        for (int i = 0; i < 6; i++)
            a[i] = arow(A, a_stride, rows, m + imin(i, mr - 1));
        float *c = C + (size_t)m * ldc;
        int ng = kn / 32, g0 = kc / 32, lc = kc > k0;
        switch (mr) {
        case 1: vtile_run(vt, ng, g0, K128, a, 1, EXP, c, ldc, nr, lc); break;
        case 2: vtile_run(vt, ng, g0, K128, a, 2, EXP, c, ldc, nr, lc); break;
        case 3: vtile_run(vt, ng, g0, K128, a, 3, EXP, c, ldc, nr, lc); break;
        case 4: vtile_run(vt, ng, g0, K128, a, 4, EXP, c, ldc, nr, lc); break;
        case 5: vtile_run(vt, ng, g0, K128, a, 5, EXP, c, ldc, nr, lc); break;
        default: vtile_run(vt, ng, g0, K128, a, 6, EXP, c, ldc, nr, lc); break;
        }
    }
    (void)nb;
}

/* The same with the scale product (the default; scales out of the exponent
 * add's range). Kept out of line: six more inlined tiles in the hot
 * function cost the exponent add its gain (one Zen 4 core, K 2048, 32
 * tokens: 274 against 302-304 GFLOP/s with them apart). */
__attribute__((noinline)) static void vtile_tokens_mul(const kt__wmat *W, const vtile *vt, int nb,
                                                       int nr, int kc, int kn, int k0,
                                                       const void *A, size_t a_stride,
                                                       const int32_t *rows, int M, float *C,
                                                       int ldc, int pn, int pnr, int pk, int pkn,
                                                       int *pr)
{
    vtile_tokens(W, vt, nb, nr, kc, kn, k0, A, a_stride, rows, M, C, ldc, 0, pn, pnr, pk, pkn,
                 pr);
}

static void prefill_int4(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                         size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                         vtile *vt)
{
    int K128 = (W->cols + 127) & ~127;
    /* KT_MOE_Q8_POW2 and every token's exponent steps (groups [k0 / 32,
     * k1 / 32)) within [-63, 63] << 23 (d_x in [2^-63, 2^63] or 0): the
     * exponent add (else the product) */
    int act_ok = kt__moe_q8_pow2();
    const __m512i elo = _mm512_set1_epi32(-(63 << 23)), ehi = _mm512_set1_epi32(63 << 23);
    for (int m = 0; m < M && act_ok; m++) {
        const int32_t *eb = (const int32_t *)((const int8_t *)arow(A, a_stride, rows, m) +
                                              4 * (size_t)K128) + K128 / 32;
        for (int g = k0 / 32; g < k1 / 32; g += 16) {
            __mmask16 mk = (__mmask16)tail32(k1 / 32 - g);
            __m512i v = _mm512_maskz_loadu_epi32(mk, eb + g);
            act_ok &= !(_mm512_cmplt_epi32_mask(v, elo) | _mm512_cmpgt_epi32_mask(v, ehi));
        }
    }
    for (int nb = n0; nb < n1; nb += VT_ROWS) {
        int nr = imin(VT_ROWS, n1 - nb);
        for (int kc = k0; kc < k1; kc += VT_K) {
            int kn = imin(VT_K, k1 - kc);
            pack_vtile(W, nb, nr, kc, kn, vt);
            /* the next tile's rows (and scales) into L2, a few rows per token
             * block, while this one computes */
            int pn = kc + VT_K < k1 ? nb : nb + VT_ROWS, pk = kc + VT_K < k1 ? kc + VT_K : k0;
            int pnr = pn < n1 ? imin(VT_ROWS, n1 - pn) : 0, pkn = imin(VT_K, k1 - pk), pr = 0;
            float *c = C + (nb - n0);
            if (vt->exp_ok && act_ok)
                vtile_tokens(W, vt, nb, nr, kc, kn, k0, A, a_stride, rows, M, c, ldc, 1, pn,
                             pnr, pk, pkn, &pr);
            else
                vtile_tokens_mul(W, vt, nb, nr, kc, kn, k0, A, a_stride, rows, M, c, ldc, pn,
                                 pnr, pk, pkn, &pr);
        }
    }
}

/* Decode of one token on rows of under 2560 inputs (4 rows a tile): blocks of
 * INT4_QUARTERS_MIN rows or more are read as 4 quarter streams (one Zen 4 core,
 * 256-row blocks from memory, alternating per pass with the 4 adjacent rows:
 * K 2048 0.72-0.74 vs 0.58-0.60 of a read loop, K 1536 0.70 vs 0.62, K 768
 * level, where the arithmetic sets the pace), each prefetched INT4_QUARTER_PF
 * bytes ahead (K 2048: 512 0.74, 1024 0.72, 2048 0.65; K 1536 alike). Rows of
 * 2560 or more keep 2 adjacent rows a tile (K 3072 / 7168: quarters read
 * 0.62-0.67 vs 0.67). */
#define INT4_QUARTERS_MIN 16
#define INT4_QUARTER_PF 768

/* KT_MOE_INT4_QUARTERS=0: adjacent rows as before (for measuring). */
static long parse_int4_quarters(const char *e)
{
    return !(e && *e == '0');
}

static int int4_quarters(void)
{
    static long cached;
    return (int)env_knob(&cached, "KT_MOE_INT4_QUARTERS", parse_int4_quarters);
}

/* C = A W^T, W = (nibble - 8) * scale[n][k / 32]; A in Q8P128 format. */
static void gemm_int4(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                      void *scratch)
{
    const uint8_t *w = W->w;
    const uint16_t *sc = W->scale;
    int K = W->cols;
    size_t rb = (size_t)K / 2, sb = (size_t)K / 32;
    if (W->type == KT__INT4_TILED && M < 4) {
        decode_int4t(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
        return;
    }
    if (M < 4) {
        const int8_t *a[3];
        for (int i = 0; i < 3; i++)
            a[i] = arow(A, a_stride, rows, i < M ? i : M - 1);
        /* one token, short rows: 4 rows share each activation load; rows of
         * 1280 bytes or more: 2 (4 interleaved long rows read memory at 0.5-0.6
         * of a read loop on Zen 4, 2 at 0.7; rows of 384 bytes the reverse) */
        int step = M == 1 && K < 2560 ? 4 : 2;
        /* rows side by side: two tiles on, per row (rows are short), at least
         * 8 KiB (rows of 768: 4 KiB read 0.49-0.51 of a read loop on one Zen 4
         * core, 8 KiB 0.54-0.57) */
        size_t pf = (size_t)step * K + 1024 > 8192 ? (size_t)step * K + 1024 : 8192;
        /* the tokens' group scales in int4_block4's order, for the blocks of 4
         * whole steps from the first whole step on (in the prefill tile's
         * scratch; past it, rows of over ~45000 inputs, the per-step path) */
        int c_hot = (k0 + 127) / 128, nb = (k1 / 128 - c_hot) / 4;
        const float *dx[3] = {NULL, NULL, NULL};
        if (nb > 0 && (size_t)nb * 16 * sizeof(float) * 3 <= sizeof(vtile))
            for (int m = 0; m < M; m++) {
                float *d = (float *)scratch + (size_t)m * nb * 16;
                int4_dx(a[m], (K + 127) & ~127, c_hot, nb, K / 32, d);
                dx[m] = d;
            }
        const float *const *dxs = dx[0] ? dx : NULL;
        if (M == 1 && step == 4 && n1 - n0 >= INT4_QUARTERS_MIN && int4_quarters()) {
            /* the 4 rows of a tile from the block's 4 quarters: 4 streams that
             * each read row after row (4 adjacent rows interleaved in one 4 KiB
             * page are a pattern the hardware prefetchers do not follow) */
            int q = (n1 - n0) / 4;
            for (int j = 0; j < q; j++) {
                const uint8_t *wr[4];
                const uint16_t *sr[4];
                for (int r = 0; r < 4; r++) {
                    wr[r] = w + (size_t)(n0 + r * q + j) * rb;
                    sr[r] = sc + (size_t)(n0 + r * q + j) * sb;
                }
                float t[4];
                tile_int4(wr, sr, a, dxs, 4, 1, K, k0, k1, INT4_QUARTER_PF, t);
                for (int r = 0; r < 4; r++)
                    C[r * q + j] = t[r];
            }
            C += 4 * q; /* the last (n1 - n0) % 4 rows as below */
            n0 += 4 * q;
        }
        for (int n = n0; n < n1; n += step) {
            int nr = imin(step, n1 - n);
            const uint8_t *wr[4];
            const uint16_t *sr[4];
            for (int r = 0; r < 4; r++) {
                int row = n + imin(r, nr - 1);
                wr[r] = w + (size_t)row * rb;
                sr[r] = sc + (size_t)row * sb;
            }
            float t[12];
            switch (M) {
            case 1:
                if (step == 4)
                    tile_int4(wr, sr, a, dxs, 4, 1, K, k0, k1, pf, t);
                else
                    tile_int4(wr, sr, a, dxs, 2, 1, K, k0, k1, pf, t);
                break;
            case 2: tile_int4(wr, sr, a, dxs, 2, 2, K, k0, k1, pf, t); break;
            default: tile_int4(wr, sr, a, dxs, 2, 3, K, k0, k1, pf, t); break;
            }
            store_tile(C, ldc, n - n0, t, M, nr);
        }
        return;
    }
    prefill_int4(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
}

/* The first VNNI tile a prefill gemm_int4 call on rows [n0, n1) will pack
 * (32 rows x VT_K inputs and their scales), into L2: the backend names the
 * next call's weights while this one computes (a call's later tiles are
 * prefetched by the call itself; its first one started cold, and phase 2's
 * down calls over an I slice of 768 have only 4 tiles). Decode: the first
 * rows, where the steady prefetch has not reached yet. */
static void prefetch_int4(const kt__wmat *W, int n0, int n1, int M)
{
    if (M < 4 && W->type == KT__INT4_TILED) { /* the first 4 KiB of the stream */
        const char *wp = (const char *)kt__int4t_block(W, n0, 0);
        size_t bytes = kt__int4t_bytes(n1 - n0, W->cols);
        for (size_t b = 0; b < bytes && b < 4096; b += 64)
            _mm_prefetch(wp + b, _MM_HINT_T1);
        return;
    }
    if (M == 1 && W->cols < 2560 && n1 - n0 >= INT4_QUARTERS_MIN && int4_quarters()) {
        /* quarter streams: the first 1 KiB of each and its rows' scales */
        size_t rb = (size_t)W->cols / 2, sb = (size_t)W->cols / 16;
        int q = (n1 - n0) / 4;
        for (int r = 0; r < 4; r++) {
            const char *wp = (const char *)W->w + (size_t)(n0 + r * q) * rb;
            const char *sp = (const char *)W->scale + (size_t)(n0 + r * q) * sb;
            for (size_t b = 0; b < 1024; b += 64)
                _mm_prefetch(wp + b, _MM_HINT_T1);
            _mm_prefetch(sp, _MM_HINT_T1);
            _mm_prefetch(sp + 64, _MM_HINT_T1);
        }
        return;
    }
    if (M < 4) { /* decode: the first 4 KiB of the rows and their scales (one
                    * Zen 4 core, K 2048, 64-row blocks from memory: 0.49-0.52 ->
                    * 0.55-0.57 of a read loop; 256-row blocks unchanged) */
        size_t rb = (size_t)W->cols / 2, bytes = (size_t)(n1 - n0) * rb;
        bytes = bytes < 4096 ? bytes : 4096;
        const char *wp = (const char *)W->w + (size_t)n0 * rb;
        for (size_t b = 0; b < bytes; b += 64)
            _mm_prefetch(wp + b, _MM_HINT_T1);
        const char *sp = (const char *)W->scale + (size_t)n0 * (W->cols / 16);
        for (size_t b = 0; b < bytes / 8; b += 64)
            _mm_prefetch(sp + b, _MM_HINT_T1);
        return;
    }
    int nr = imin(VT_ROWS, n1 - n0);
    if (W->type == KT__INT4_TILED) {
        for (int r = 0; r < nr; r++)
            prefetch_row_int4(W, n0 + r, 0, imin(VT_K, W->cols));
        return;
    }
    size_t rb = (size_t)W->cols / 2, sb = (size_t)W->cols / 32 * 2;
    size_t bytes = (size_t)imin(VT_K, W->cols) / 2;
    for (int r = 0; r < nr; r++) {
        const char *wp = (const char *)W->w + (size_t)(n0 + r) * rb;
        for (size_t b = 0; b < bytes; b += 64)
            _mm_prefetch(wp + b, _MM_HINT_T1);
    }
    const char *sp = (const char *)W->scale + (size_t)n0 * sb;
    for (size_t b = 0; b < (size_t)nr * sb; b += 64)
        _mm_prefetch(sp + b, _MM_HINT_T1);
}

static const kt__moe_kernels k_bf16 = {"avx512-bf16", KT__ACT_BF16, quant_bf16, gemm_bf16,
                                       sizeof(pblock), NULL};
static const kt__moe_kernels k_fp8 = {"avx512-fp8", KT__ACT_BF16P64E, quant_bf16p64e, gemm_fp8,
                                      4 * DEQ_STRIDE * 2 + FP8_BLKS * 256, NULL};
static const kt__moe_kernels k_int4 = {"avx512-vnni", KT__ACT_Q8P128, quant_q8p128, gemm_int4,
                                       sizeof(vtile), prefetch_int4};

const kt__moe_kernels *kt__moe_kernels_avx512(int method)
{
    switch (method) {
    case KT_METHOD_BF16:
        return &k_bf16;
    case KT_METHOD_FP8:
        return &k_fp8;
    case KT_METHOD_RAWINT4:
        return &k_int4;
    case KT_METHOD_AMXINT8:
        return kt__moe_int8_avx512();
    default:
        return NULL;
    }
}

