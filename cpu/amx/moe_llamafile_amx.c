/*
 * LLAMAFILE (GGUF) prefill on AMX-INT8 tiles: Q4_0, Q8_0, IQ4_NL weights against the
 * tokens' Q8_0 blocks, Q4_K and Q5_K against their Q8_K blocks.
 *
 * The ggml vec_dot's integers, block by block of 32 inputs: each weight block
 * decoded to int8 codes v (Q4_0: q - 8, Q8_0: q, IQ4_NL: its table value, Q4_K /
 * Q5_K: q, the minimum apart), each token's codes a as its activation blocks hold
 * them (the set's quantizer, once per token), and every block's exact int32 sum
 * from the tiles folded into F32:
 *
 *   C[m][n] += dw[n][b] da[m][b] sum_{k in b} v[n][k] a_m[k]  +  mw[n][b] sa[m][b]
 *
 * dw the weight block's scale (Q4_K / Q5_K: d x the 6-bit sub-block scale), da the
 * activation block's (Q8_K: its 256-block's d); Q4_K / Q5_K only: mw = -dmin x the
 * 6-bit minimum and sa = da x the sum of the block's codes (the Q8_K bsums).
 *
 * The tiles compute C^T as cpu/amx/moe_amx.c's do: A operand 16 decoded weight rows
 * x 32 bytes (one block), B operand one block of 16 tokens in the VNNI layout
 * (8 rows of [16 tokens][4 codes]), C 16 rows x 16 tokens int32. The tokens' blocks
 * are packed once per epoch (the gate and up calls of an item and a thread's next
 * items of the same expert reuse them); the weights are decoded 32 rows over the
 * call's whole K at a time and reused by every token block. Each block's tile is
 * folded while the tiles compute the next one (two C tiles, two stored copies, as
 * moe_amx.c's tiles_i8_groups).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "moe_kernels.h"
#include "ref/ggml_quants.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define LFA_NB 32                     /* weight rows decoded at a time           */
#define LFA_BMAX (KT__LF_AMX_KMAX / 32) /* blocks of 32 a call may have          */
#define LFA_MB (KT__LF_AMX_MMAX / 16) /* token blocks of 16                      */
/* bytes between the decoded blocks: 32 rows x 32 codes and a line, so that a row's
 * blocks do not all fall into the same few L1 sets */
#define LFA_WB (LFA_NB * 32 + 64)

/* Tile registers: two C tiles (blocks alternate), the weights, the tokens. */
#define TC0 0
#define TC1 1
#define TW 2
#define TX 3

/* Which activations the packed copy holds (compared bytewise). */
typedef struct lfa_key {
    const void *A;
    const int32_t *rows;
    size_t a_stride, q_off;
    uint64_t epoch;
    int M, k0, k1, q8k, valid;
} lfa_key;

typedef struct lfa_scratch {
    lfa_key key;
    _Alignas(64) int32_t ring[2][256];          /* two blocks' int32 tiles          */
    _Alignas(64) float ct[256];                  /* one C^T tile on its way out      */
    _Alignas(64) float ws[LFA_BMAX * LFA_NB];    /* [block][row] dw                  */
    _Alignas(64) float wm[LFA_BMAX * LFA_NB];    /* [block][row] mw (Q4_K, Q5_K)     */
    _Alignas(64) int8_t wdec[LFA_BMAX * LFA_WB]; /* [block][row][32] codes v, LFA_WB apart */
    _Alignas(64) float xs[LFA_MB * LFA_BMAX * 16]; /* [token block][block][16] da    */
    _Alignas(64) float xm[LFA_MB * LFA_BMAX * 16]; /* the same, sa (Q8_K)            */
    _Alignas(64) uint8_t xq[LFA_MB * LFA_BMAX * 512]; /* [token block][block][8][16][4] */
} lfa_scratch;
_Static_assert(sizeof(lfa_scratch) + 64 <= KT__LF_AMX_SCRATCH, "KT__LF_AMX_SCRATCH too small");

typedef struct tile_config {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void configure(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    cfg.rows[TC0] = cfg.rows[TC1] = cfg.rows[TW] = 16;
    cfg.colsb[TC0] = cfg.colsb[TC1] = 64;
    cfg.colsb[TW] = 32;   /* 16 rows x one block's 32 codes */
    cfg.rows[TX] = 8;     /* 32 codes = 8 quads x 16 tokens */
    cfg.colsb[TX] = 64;
    _tile_loadconfig(&cfg);
}

static int imin(int a, int b)
{
    return a < b ? a : b;
}

static float f16(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* Q4_K / Q5_K sub-block j's 6-bit scale and minimum (ggml's get_scale_min_k4). */
ALWAYS_INLINE void k4_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ---- the next call's weights ------------------------------------------------ */

/* The backend's hints (kt__lf_hint_amx), oldest first: a call takes the oldest and
 * starts its rows into L2 while it computes, a share with each 32-row block. */
typedef struct lfa_hint {
    const uint8_t *w; /* the first row */
    size_t wrow, len;
    int n;            /* rows */
} lfa_hint;
static _Thread_local lfa_hint hints[2];
static _Thread_local int n_hints;

void kt__lf_hint_amx(const void *W, size_t wrow, int n0, int n1, size_t len)
{
    if (n_hints == 2) {
        hints[0] = hints[1];
        n_hints = 1;
    }
    hints[n_hints++] = (lfa_hint){(const uint8_t *)W + (size_t)n0 * wrow, wrow, len, n1 - n0};
}

/* ---- the tokens' blocks ----------------------------------------------------- */

/* Packs blocks [b0, b0 + nbk) of tokens [0, M) (activation rows at A, a_stride
 * bytes apart, rows[m] or m; their Q8_0 (q8k 0) or Q8_K blocks q_off bytes into a
 * row) into s->xq / xs / xm; tokens past M zero. */
static void pack(lfa_scratch *s, const void *A, size_t a_stride, const int32_t *rows,
                 size_t q_off, int q8k, int M, int b0, int nbk)
{
    int mb_n = (M + 15) / 16;
    for (int mb = 0; mb < mb_n; mb++) {
        uint8_t *xq = s->xq + (size_t)mb * nbk * 512;
        float *xs = s->xs + (size_t)mb * nbk * 16, *xm = s->xm + (size_t)mb * nbk * 16;
        for (int t = 0; t < 16; t++) {
            int m = mb * 16 + t;
            if (m >= M) {
                for (int j = 0; j < nbk; j++) {
                    for (int p = 0; p < 8; p++)
                        memset(xq + (size_t)j * 512 + p * 64 + t * 4, 0, 4);
                    xs[j * 16 + t] = xm[j * 16 + t] = 0.0f;
                }
                continue;
            }
            const uint8_t *row =
                (const uint8_t *)A + (size_t)(rows ? rows[m] : m) * a_stride + q_off;
            for (int j = 0; j < nbk; j++) {
                int b = b0 + j;
                const int8_t *qs;
                if (q8k) {
                    const kt_block_q8_K *k = (const kt_block_q8_K *)row + b / 8;
                    int sub = b % 8;
                    qs = k->qs + 32 * sub;
                    xs[j * 16 + t] = k->d;
                    xm[j * 16 + t] = k->d * (float)(k->bsums[2 * sub] + k->bsums[2 * sub + 1]);
                } else {
                    const kt_block_q8_0 *k = (const kt_block_q8_0 *)row + b;
                    qs = k->qs;
                    xs[j * 16 + t] = f16(k->d);
                }
                /* quad p of the block to row p of the B tile, column t */
                __m256i v = _mm256_loadu_si256((const __m256i *)qs);
                uint8_t *d = xq + (size_t)j * 512 + t * 4;
                _mm256_i32scatter_epi32(d, _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448),
                                        v, 1);
            }
        }
    }
}

/* ---- the weights ------------------------------------------------------------ */

/* f16 scales of 16 blocks (at p, `stride` bytes apart) to F32 at out[0], out[32], ... */
ALWAYS_INLINE void scales16(const uint8_t *p, int stride, int n, float *out)
{
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15),
                                     _mm512_set1_epi32(stride));
    __mmask16 m = (__mmask16)((1u << n) - 1u);
    /* (each lane reads 4 bytes from its scale on: inside the row, the block's codes) */
    __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, p, 1);
    __m512 f = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
    for (int i = 0; i < n; i++)
        out[32 * i] = f[i];
}

/* Rows [n, n + nr) x blocks [b0, b0 + nbk) of the stored rows W (wrow bytes each)
 * decoded into s->wdec ([block][LFA_NB rows][32 codes], LFA_WB bytes a block: a tile's
 * 16 rows of a block are 512 contiguous bytes), s->ws and s->wm ([block][LFA_NB rows]); rows past nr get zero
 * scales. The next 32 rows' bytes (nnext of them) start into L2. */
static void decode(int type, const uint8_t *W, size_t wrow, int n, int nr, int nnext, int b0,
                   int nbk, const lfa_hint *h, int h0, int h1, lfa_scratch *s)
{
    /* the hinted rows [h0, h1) of the next call: one a row decoded, the rest after */
    for (int i = h0 + LFA_NB; i < h1; i++)
        for (size_t o = 0; o < h->len; o += 64)
            _mm_prefetch((const char *)h->w + (size_t)i * h->wrow + o, _MM_HINT_T1);
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
    const __m512i lo4z = _mm512_set1_epi8(0x0f);
    const __m512i inter = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11); /* L0 H0 L1 H1 */
    const __m512i inter2 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15); /* L2 H2 L3 H3 */
    const __m512i iq4 = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kt__iq4nl_values));
    const int kq = type == KT_TYPE_Q4_K || type == KT_TYPE_Q5_K;
    const size_t bb = kt__ggml_traits((kt_type)type)->block_bytes;
    const size_t len = kq ? (size_t)nbk / 8 * bb : (size_t)nbk * bb;
    const size_t ofs = kq ? (size_t)b0 / 8 * bb : (size_t)b0 * bb;
    for (int r = 0; r < LFA_NB; r++) {
        float *ws = s->ws + r, *wm = s->wm + r;
        int8_t *d = s->wdec + (size_t)r * 32;
        if (r >= nr) {
            for (int j = 0; j < nbk; j++)
                ws[32 * j] = wm[32 * j] = 0.0f;
            for (int i = h0 + r; r == nr && i < imin(h1, h0 + LFA_NB); i++) /* (their hints) */
                for (size_t o = 0; o < h->len; o += 64)
                    _mm_prefetch((const char *)h->w + (size_t)i * h->wrow + o, _MM_HINT_T1);
            continue;
        }
        const uint8_t *row = W + (size_t)(n + r) * wrow + ofs;
        if (r + 2 < nr) /* (from L2, two rows on: into L1) */
            for (size_t o = 0; o < len; o += 64)
                _mm_prefetch((const char *)row + 2 * wrow + o, _MM_HINT_T0);
        if (r < nnext) /* the next block's row r: into L2 while this one computes */
            for (size_t o = 0; o < len; o += 64)
                _mm_prefetch((const char *)row + (size_t)LFA_NB * wrow + o, _MM_HINT_T1);
        if (h0 + r < h1)
            for (size_t o = 0; o < h->len; o += 64)
                _mm_prefetch((const char *)h->w + (size_t)(h0 + r) * h->wrow + o, _MM_HINT_T1);
        switch (type) {
        case KT_TYPE_Q4_0:
        case KT_TYPE_IQ4_NL: {
            const kt_block_q4_0 *q = (const kt_block_q4_0 *)row;
            int j = 0;
            for (; j + 4 <= nbk; j += 4) { /* 4 blocks: codes 0-15 low nibbles, 16-31 high */
                __m512i b = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)q[j].qs));
                b = _mm512_inserti32x4(b, _mm_loadu_si128((const __m128i *)q[j + 1].qs), 1);
                b = _mm512_inserti32x4(b, _mm_loadu_si128((const __m128i *)q[j + 2].qs), 2);
                b = _mm512_inserti32x4(b, _mm_loadu_si128((const __m128i *)q[j + 3].qs), 3);
                __m512i lo = _mm512_and_si512(b, lo4z);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), lo4z);
                __m512i v0 = _mm512_permutex2var_epi64(lo, inter, hi);
                __m512i v1 = _mm512_permutex2var_epi64(lo, inter2, hi);
                if (type == KT_TYPE_Q4_0) {
                    v0 = _mm512_sub_epi8(v0, _mm512_set1_epi8(8));
                    v1 = _mm512_sub_epi8(v1, _mm512_set1_epi8(8));
                } else {
                    v0 = _mm512_shuffle_epi8(iq4, v0);
                    v1 = _mm512_shuffle_epi8(iq4, v1);
                }
                _mm256_storeu_si256((__m256i *)(d + LFA_WB * (size_t)j),
                                    _mm512_castsi512_si256(v0));
                _mm256_storeu_si256((__m256i *)(d + LFA_WB * (size_t)(j + 1)),
                                    _mm512_extracti64x4_epi64(v0, 1));
                _mm256_storeu_si256((__m256i *)(d + LFA_WB * (size_t)(j + 2)),
                                    _mm512_castsi512_si256(v1));
                _mm256_storeu_si256((__m256i *)(d + LFA_WB * (size_t)(j + 3)),
                                    _mm512_extracti64x4_epi64(v1, 1));
            }
            for (; j < nbk; j++) {
                __m128i b = _mm_loadu_si128((const __m128i *)q[j].qs);
                __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(b),
                                                    _mm_srli_epi16(b, 4), 1);
                v = _mm256_and_si256(v, lo4);
                v = type == KT_TYPE_Q4_0 ? _mm256_sub_epi8(v, _mm256_set1_epi8(8))
                                         : _mm256_shuffle_epi8(_mm512_castsi512_si256(iq4), v);
                _mm256_storeu_si256((__m256i *)(d + LFA_WB * (size_t)j), v);
            }
            for (j = 0; j < nbk; j += 16)
                scales16((const uint8_t *)&q[j].d, (int)sizeof *q, imin(16, nbk - j), ws + 32 * j);
            break;
        }
        case KT_TYPE_Q8_0: {
            const kt_block_q8_0 *q = (const kt_block_q8_0 *)row;
            for (int j = 0; j < nbk; j++)
                _mm256_storeu_si256((__m256i *)(d + LFA_WB * (size_t)j),
                                    _mm256_loadu_si256((const __m256i *)q[j].qs));
            for (int j = 0; j < nbk; j += 16)
                scales16((const uint8_t *)&q[j].d, (int)sizeof *q, imin(16, nbk - j), ws + 32 * j);
            break;
        }
        case KT_TYPE_Q4_K:
        case KT_TYPE_Q5_K:
            for (int B = 0; B < nbk / 8; B++) {
                const uint8_t *scales, *qs, *qh = NULL;
                uint16_t dh, mh;
                if (type == KT_TYPE_Q4_K) {
                    const kt_block_q4_K *k = (const kt_block_q4_K *)row + B;
                    scales = k->scales, qs = k->qs, dh = k->d, mh = k->dmin;
                } else {
                    const kt_block_q5_K *k = (const kt_block_q5_K *)row + B;
                    scales = k->scales, qs = k->qs, qh = k->qh, dh = k->d, mh = k->dmin;
                }
                float dd = f16(dh), dm = f16(mh);
                __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
                int8_t *o = d + (size_t)8 * B * LFA_WB;
                for (int i = 0; i < 4; i++) { /* sub-blocks 2i (low nibbles), 2i + 1 (high) */
                    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));
                    __m256i a = _mm256_and_si256(v, lo4);
                    __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
                    if (qh) { /* their 5th bits: bits 2i, 2i + 1 of qh[e] */
                        const __m256i one = _mm256_set1_epi8(1);
                        __m256i ha = _mm256_and_si256(_mm256_srli_epi16(h, 2 * i), one);
                        __m256i hc = _mm256_and_si256(_mm256_srli_epi16(h, 2 * i + 1), one);
                        a = _mm256_or_si256(a, _mm256_slli_epi16(ha, 4));
                        c = _mm256_or_si256(c, _mm256_slli_epi16(hc, 4));
                    }
                    _mm256_storeu_si256((__m256i *)(o + LFA_WB * (size_t)(2 * i)), a);
                    _mm256_storeu_si256((__m256i *)(o + LFA_WB * (size_t)(2 * i + 1)), c);
                }
                for (int j = 0; j < 8; j++) {
                    int sc, mn;
                    k4_scale_min(j, scales, &sc, &mn);
                    ws[32 * (8 * B + j)] = dd * (float)sc;
                    wm[32 * (8 * B + j)] = -dm * (float)mn;
                }
            }
            break;
        }
    }
}

/* ---- the tiles ---------------------------------------------------------------- */

/* Block j of 16 weight rows (w: 512 bytes) x 16 tokens (x) into tile TC. */
#define LFA_PRODUCT(TC, j)                                                               \
    do {                                                                                 \
        _tile_zero(TC);                                                                  \
        _tile_loadd(TW, w + LFA_WB * (size_t)(j), 32);                                     \
        _tile_loadd(TX, x + 512 * (size_t)(j), 64);                                      \
        _tile_dpbssd(TC, TW, TX);                                                        \
    } while (0)

/* acc[r] += ring[slot][r] dw[r][j] da[j] (+ mw[r][j] sa[j]) */
ALWAYS_INLINE void fold(__m512 *acc, const int32_t *ring, const float *ws, const float *wm,
                        const float *xs, const float *xm, int j, const int mins)
{
    __m512 da = _mm512_load_ps(xs + 16 * (size_t)j);
    __m512 sa = mins ? _mm512_load_ps(xm + 16 * (size_t)j) : da;
    for (int r = 0; r < 16; r++) {
        __m512 sc = _mm512_mul_ps(da, _mm512_set1_ps(ws[32 * (size_t)j + r]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(ring + 16 * r)), sc,
                                 acc[r]);
        if (mins)
            acc[r] = _mm512_fmadd_ps(sa, _mm512_set1_ps(wm[32 * (size_t)j + r]), acc[r]);
    }
}

/* 16 weight rows (from rb of the decoded block) x 16 tokens (token block mb) over
 * the nbk blocks into acc. */
ALWAYS_INLINE void tile_rows(lfa_scratch *s, int rb, int mb, int nbk, __m512 *acc,
                             const int mins)
{
    const int8_t *w = s->wdec + (size_t)rb * 32;
    const uint8_t *x = s->xq + (size_t)mb * nbk * 512;
    const float *ws = s->ws + rb, *wm = s->wm + rb;
    const float *xs = s->xs + (size_t)mb * nbk * 16, *xm = s->xm + (size_t)mb * nbk * 16;
    for (int r = 0; r < 16; r++)
        acc[r] = _mm512_setzero_ps();
    /* hot loop, block j in TC0 / copy 0 when even, TC1 / copy 1 when odd: the product
     * of j + 1 issues before j's tile is stored (the store waits for j's product
     * only), and the copy of j - 1 folds while the tiles compute */
    LFA_PRODUCT(TC0, 0);
    for (int j = 0; j < nbk; j += 2) {
        if (j + 1 < nbk)
            LFA_PRODUCT(TC1, j + 1);
        _tile_stored(TC0, s->ring[0], 64);
        if (j > 0)
            fold(acc, s->ring[1], ws, wm, xs, xm, j - 1, mins);
        if (j + 1 >= nbk)
            break;
        if (j + 2 < nbk)
            LFA_PRODUCT(TC0, j + 2);
        _tile_stored(TC1, s->ring[1], 64);
        fold(acc, s->ring[0], ws, wm, xs, xm, j, mins);
    }
    if (nbk & 1)
        fold(acc, s->ring[0], ws, wm, xs, xm, nbk - 1, mins);
    else
        fold(acc, s->ring[1], ws, wm, xs, xm, nbk - 1, mins);
}

/* acc (16 rows x 16 tokens) to C[m0 + t][n_off + r], nr rows and mr tokens. */
static void store_c(lfa_scratch *s, const __m512 *acc, float *C, int ldc, int n_off, int nr,
                    int m0, int mr)
{
    for (int r = 0; r < 16; r++)
        _mm512_store_ps(s->ct + 16 * r, acc[r]);
    for (int t = 0; t < mr; t++) {
        float *c = C + (size_t)(m0 + t) * ldc + n_off;
        for (int r = 0; r < nr; r++)
            c[r] = s->ct[16 * r + t];
    }
}

bool kt__lf_amx_type(int type)
{
    return type == KT_TYPE_Q4_0 || type == KT_TYPE_Q8_0 || type == KT_TYPE_IQ4_NL ||
           type == KT_TYPE_Q4_K || type == KT_TYPE_Q5_K;
}

void kt__lf_gemm_amx(int type, const void *W, size_t wrow, int n0, int n1, int k0, int k1,
                     const void *A, size_t a_stride, const int32_t *rows, size_t q_off, int M,
                     float *C, int ldc, void *scratch)
{
    lfa_scratch *s = (lfa_scratch *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const int q8k = type == KT_TYPE_Q4_K || type == KT_TYPE_Q5_K;
    const int b0 = k0 / 32, nbk = (k1 - k0) / 32;
    lfa_key key;
    memset(&key, 0, sizeof key); /* padding too: compared bytewise */
    key.A = A;
    key.rows = rows;
    key.a_stride = a_stride;
    key.q_off = q_off;
    key.epoch = __atomic_load_n(&kt__moe_epoch, __ATOMIC_ACQUIRE);
    key.M = M;
    key.k0 = k0;
    key.k1 = k1;
    key.q8k = q8k;
    key.valid = 1;
    if (memcmp(&key, &s->key, sizeof key)) {
        s->key.valid = 0;
        pack(s, A, a_stride, rows, q_off, q8k, M, b0, nbk);
        s->key = key;
    }
    lfa_hint h = {0};
    if (n_hints) { /* the oldest hint: its rows in shares, one per 32-row block */
        h = hints[0];
        hints[0] = hints[1];
        n_hints--;
    }
    int blocks = (n1 - n0 + LFA_NB - 1) / LFA_NB;
    configure();
    for (int nb = n0; nb < n1; nb += LFA_NB) {
        int nr = imin(LFA_NB, n1 - nb), bi = (nb - n0) / LFA_NB;
        decode(type, W, wrow, nb, nr, imin(LFA_NB, n1 - nb - LFA_NB), b0, nbk, &h,
               h.n * bi / blocks, h.n * (bi + 1) / blocks, s);
        for (int rb = 0; rb < nr; rb += 16)
            for (int mb = 0; mb < M; mb += 16) {
                __m512 acc[16];
                if (q8k)
                    tile_rows(s, rb, mb / 16, nbk, acc, 1);
                else
                    tile_rows(s, rb, mb / 16, nbk, acc, 0);
                store_c(s, acc, C, ldc, nb - n0 + rb, imin(16, nr - rb), mb, imin(16, M - mb));
            }
    }
}
