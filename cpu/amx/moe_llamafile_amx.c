/*
 * LLAMAFILE (GGUF) prefill on AMX-INT8 tiles: Q4_0, Q8_0, IQ4_NL weights against the
 * tokens' Q8_0 blocks, Q4_K, Q5_K and Q6_K against their Q8_K blocks.
 *
 * The ggml vec_dot's integers, block by block of 32 inputs: each weight block
 * decoded to int8 codes v (Q4_0: q - 8, Q8_0: q, IQ4_NL: its table value), each
 * token's codes a as its activation blocks hold
 * them (the set's quantizer, once per token), and every block's exact int32 sum
 * from the tiles folded into F32:
 *
 *   C[m][n] += dw[n][b] da[m][b] sum_{k in b} v[n][k] a_m[k]
 *
 * dw the weight block's scale, da the activation block's.
 *
 * The tiles compute C^T as cpu/amx/moe_amx.c's do: A operand 16 decoded weight rows
 * x 32 bytes (one block), B operand one block of 16 tokens in the VNNI layout
 * (8 rows of [16 tokens][4 codes]), C 16 rows x 16 tokens int32. The tokens' blocks
 * are packed once per epoch (the gate and up calls of an item and a thread's next
 * items of the same expert reuse them); the weights are decoded 32 rows over the
 * call's whole K at a time and reused by every token block. Each block's tile is
 * folded while the tiles compute the next one (two C tiles, two stored copies, as
 * moe_amx.c's tiles_i8_groups).
 *
 * The K types (Q4_K, Q5_K, Q6_K) take the super-block path instead: each code times
 * its sub-block's integer scale, P = sc q (Q4_K / Q5_K: q 0-31, sc 0-63) or sc (q - 32)
 * (Q6_K: sub-blocks of 16, sc int8; P in [-4064, 4096]), split P = 128 H + L (H in
 * [-32, 32], L in [0, 127], both int8); H and L of 64 inputs as two A operands (K 64:
 * two 32-input token blocks as one B operand) into two C tiles over a 256-input
 * super-block, folded once a super-block, not once a block:
 *
 *   C[m][n] += dw[n][B] da[m][B] (128 CH[n][m] + CL[n][m])  +  sum_b mw[n][b] sa[m][b]
 *
 * 128 CH + CL is the vec_dot's own integer sum_g sc_g sum q a (|.| < 2^27), dw the
 * super-block's d, da the Q8_K block's; Q4_K / Q5_K only: mw = -dmin x the 6-bit
 * minimum of sub-block b and sa = da x the sum of its codes (the Q8_K bsums).
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
/* the super-block path: bytes between the decoded pairs of blocks (an H and an L plane
 * of 32 rows x 64 codes, and a line) */
#define LFA_PB (2 * LFA_NB * 64 + 64)
#define LFA_PL (LFA_NB * 64) /* the L plane after the H plane */
#define LFA_WDEC (LFA_BMAX / 2 * LFA_PB > LFA_BMAX * LFA_WB ? LFA_BMAX / 2 * LFA_PB : LFA_BMAX * LFA_WB)

/* Tile registers: two C tiles (blocks alternate), the weights, the tokens; the
 * super-block path: C tiles H and L of even and odd super-blocks, the H and L weights,
 * the tokens. */
#define TC0 0
#define TC1 1
#define TW 2
#define TX 3
#define TH0 0
#define TL0 1
#define TH1 2
#define TL1 3
#define TWH 4
#define TWL 5
#define TX2 6

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
    _Alignas(64) int32_t ring[4][256];          /* two blocks' (super-blocks' H, L) int32 tiles */
    _Alignas(64) float ct[256];                  /* one C^T tile on its way out      */
    _Alignas(64) float ws[LFA_BMAX * LFA_NB];    /* [block][row] dw                  */
    _Alignas(64) float wm[LFA_BMAX * LFA_NB];    /* [row][block] mw (Q4_K, Q5_K)     */
    /* [block][row][32] codes v, LFA_WB apart; super-block path: [pair][H, L][row][64] */
    _Alignas(64) int8_t wdec[LFA_WDEC];
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

static void configure(int sb)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    if (sb) { /* every tile 16 x 64 bytes: C, A (16 rows x 64 codes), B (16 quads x 16 tokens) */
        for (int t = TH0; t <= TX2; t++) {
            cfg.rows[t] = 16;
            cfg.colsb[t] = 64;
        }
        _tile_loadconfig(&cfg);
        return;
    }
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

/* The super-block path's constants: the byte permutations that put the even and odd
 * words' low bytes (L) and bits 7-14 (H, after a shift up by one) back in input order,
 * and word w's lane (w / 8). */
typedef struct hl_consts {
    __m512i il, ih, lane;
} hl_consts;

ALWAYS_INLINE hl_consts hl_init(void)
{
    const __m512i iota = _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51,
                                         50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38,
                                         37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25,
                                         24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                         11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    hl_consts c;
    /* byte 2w: byte 2w of the even words; 2w + 1: byte 2w of the odd ones (64 on) */
    c.il = _mm512_add_epi8(_mm512_and_si512(iota, _mm512_set1_epi8(~1)),
                           _mm512_and_si512(_mm512_slli_epi16(iota, 6), _mm512_set1_epi8(64)));
    c.ih = _mm512_add_epi8(c.il, _mm512_set1_epi8(1));
    c.lane = _mm512_setr_epi64(0, 0, 0x0001000100010001, 0x0001000100010001,
                               0x0002000200020002, 0x0002000200020002, 0x0003000300030003,
                               0x0003000300030003);
    return c;
}

/* 64 inputs' products P (int16: pe of the even inputs, po of the odd) split into
 * P = 128 H + L, H to d (the H plane) and L to d + LFA_PL. */
ALWAYS_INLINE void emit_hl(const hl_consts *c, __m512i pe, __m512i po, int8_t *d)
{
    __m512i H = _mm512_permutex2var_epi8(_mm512_slli_epi16(pe, 1), c->ih,
                                         _mm512_slli_epi16(po, 1));
    __m512i L = _mm512_and_si512(_mm512_permutex2var_epi8(pe, c->il, po),
                                 _mm512_set1_epi8(0x7f));
    _mm512_storeu_si512(d, H);
    _mm512_storeu_si512(d + LFA_PL, L);
}

/* One Q6_K row's nsb super-blocks k to H and L codes (o: row r's H plane of pair 0,
 * LFA_PB a pair) and their scales d to ws[32 * 8 B]. */
ALWAYS_INLINE void q6k_row(const kt_block_q6_K *k, int nsb, int8_t *o, float *ws)
{
    const hl_consts c = hl_init();
    const __m512i lo4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i c32 = _mm512_set1_epi8(32);
    /* the 2-bit tops: inputs 0-31 / 32-63 of a half (sub-blocks s 0 / 1) from bits 0-1 /
     * 2-3 of qh (shifted up to bits 4-5), 64-95 / 96-127 (s 2 / 3) from bits 4-5 / 6-7 */
    const __m512i up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i dn = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    for (int B = 0; B < nsb; B++) {
        /* the 16 scales as words; a 64-input group's 4 from them, one a lane */
        __m512i sw = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)k[B].scales)));
        ws[32 * 8 * B] = f16(k[B].d);
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(k[B].ql + 64 * h);
            __m512i qh = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(k[B].qh + 32 * h)));
            /* q: inputs 128h + 0..63 (low nibbles), 64..127 (high nibbles) */
            __m512i q[2];
            q[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, lo4),
                                             _mm512_sllv_epi16(qh, up), m30, 0xF8); /* a | b & c */
            q[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4),
                                             _mm512_srlv_epi16(qh, dn), m30, 0xF8);
            for (int i = 0; i < 2; i++) {
                int g = 2 * h + i; /* inputs 64g.. of the super-block: sub-blocks 4g..4g+3 */
                __m512i sc = _mm512_permutexvar_epi16(
                    _mm512_add_epi16(_mm512_set1_epi16((short)(4 * g)), c.lane), sw);
                __m512i v = _mm512_sub_epi8(q[i], c32); /* P = (q - 32) sc */
                __m512i pe = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), sc);
                __m512i po = _mm512_mullo_epi16(_mm512_srai_epi16(v, 8), sc);
                emit_hl(&c, pe, po, o + (size_t)(4 * B + g) * LFA_PB);
            }
        }
    }
}

/* One Q4_K / Q5_K row (qh: Q5_K) on the super-block path: P = sc q (q 0-31, sc 0-63:
 * H 0-15), the super-block's d to ws[32 * 8 B], the sub-blocks' -dmin m to wm[j] (this
 * path's [row][block] order: 8 at a time). */
ALWAYS_INLINE void k45_row(const uint8_t *row, int q5, int nsb, int8_t *o, float *ws, float *wm)
{
    const hl_consts c = hl_init();
    const __m256i lo4 = _mm256_set1_epi8(0x0f);
    const __m512i lo8 = _mm512_set1_epi16(0xff), one = _mm512_set1_epi8(1);
    for (int B = 0; B < nsb; B++) {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t dh, mh;
        if (!q5) {
            const kt_block_q4_K *k = (const kt_block_q4_K *)row + B;
            scales = k->scales, qs = k->qs, dh = k->d, mh = k->dmin;
        } else {
            const kt_block_q5_K *k = (const kt_block_q5_K *)row + B;
            scales = k->scales, qs = k->qs, qh = k->qh, dh = k->d, mh = k->dmin;
        }
        /* the 8 6-bit scales to bytes 0-7, the minimums to 8-15, 4 sub-blocks a word
         * (sub-blocks 0-3: the low 6 bits of bytes 0-3 / 4-7; 4-7: the nibbles of
         * bytes 8-11 and the top 2 bits of bytes 0-3 / 4-7) */
        uint32_t u[3];
        memcpy(u, scales, 12);
        const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
        __m128i scm = _mm_setr_epi32((int)(u[0] & m6),
                                     (int)((u[2] & m4) | ((u[0] >> 6) & m2) << 4),
                                     (int)(u[1] & m6),
                                     (int)(((u[2] >> 4) & m4) | ((u[1] >> 6) & m2) << 4));
        _mm256_storeu_ps(wm + 8 * B,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                           _mm_srli_si128(scm, 8))),
                                       _mm256_set1_ps(-f16(mh))));
        ws[32 * 8 * B] = f16(dh);
        __m512i sw = _mm512_castsi128_si512(_mm_cvtepu8_epi16(scm));
        __m512i h5 = qh ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh))
                        : _mm512_setzero_si512();
        for (int g = 0; g < 4; g++) { /* inputs 64g..: sub-blocks 2g (low nibbles), 2g + 1 */
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, lo4)),
                                           _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4), 1);
            /* words [sc 2g x 16, sc 2g + 1 x 16] */
            __m512i sc = _mm512_permutexvar_epi16(
                _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * g)),
                                   _mm256_set1_epi16((short)(2 * g + 1)), 1), sw);
            if (qh) { /* the 5th bits: bit 2g / 2g + 1 of qh[l] */
                __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * g)),
                                                _mm256_set1_epi16((short)(2 * g + 1)), 1);
                q = _mm512_or_si512(q, _mm512_slli_epi16(
                                           _mm512_and_si512(_mm512_srlv_epi16(h5, sh), one), 4));
            }
            __m512i pe = _mm512_mullo_epi16(_mm512_and_si512(q, lo8), sc);
            __m512i po = _mm512_mullo_epi16(_mm512_srli_epi16(q, 8), sc);
            emit_hl(&c, pe, po, o + (size_t)(4 * B + g) * LFA_PB);
        }
    }
}

/* Rows [n, n + nr) x blocks [b0, b0 + nbk) of the stored rows W (wrow bytes each)
 * decoded into s->wdec ([block][LFA_NB rows][32 codes], LFA_WB bytes a block: a tile's
 * 16 rows of a block are 512 contiguous bytes; sb, the K types: [pair][H, L][LFA_NB
 * rows][64], LFA_PB a pair), s->ws ([block][LFA_NB rows]; sb: at each super-block's
 * first block) and s->wm ([row][block]); rows past nr get zero scales. The next 32
 * rows' bytes (nnext of them) start into L2. */
static void decode(int type, int sb, const uint8_t *W, size_t wrow, int n, int nr, int nnext,
                   int b0, int nbk, const lfa_hint *h, int h0, int h1, lfa_scratch *s)
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
    const size_t bb = kt__ggml_traits((kt_type)type)->block_bytes; /* sb: 8 blocks' */
    const size_t len = sb ? (size_t)nbk / 8 * bb : (size_t)nbk * bb;
    const size_t ofs = sb ? (size_t)b0 / 8 * bb : (size_t)b0 * bb;
    for (int r = 0; r < LFA_NB; r++) {
        float *ws = s->ws + r, *wm = s->wm + (size_t)r * LFA_BMAX;
        int8_t *d = s->wdec + (size_t)r * (sb ? 64 : 32);
        if (r >= nr) {
            for (int j = 0; j < nbk; j++)
                ws[32 * j] = wm[j] = 0.0f;
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
        case KT_TYPE_Q6_K:
            q6k_row((const kt_block_q6_K *)row, nbk / 8, d, ws);
            break;
        case KT_TYPE_Q4_K:
        case KT_TYPE_Q5_K:
            k45_row(row, type == KT_TYPE_Q5_K, nbk / 8, d, ws, wm);
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

/* acc[r] += ring[slot][r] dw[r][j] da[j] */
ALWAYS_INLINE void fold(__m512 *acc, const int32_t *ring, const float *ws, const float *xs,
                        int j)
{
    __m512 da = _mm512_load_ps(xs + 16 * (size_t)j);
    for (int r = 0; r < 16; r++) {
        __m512 sc = _mm512_mul_ps(da, _mm512_set1_ps(ws[32 * (size_t)j + r]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(ring + 16 * r)), sc,
                                 acc[r]);
    }
}

/* 16 weight rows (from rb of the decoded block) x 16 tokens (token block mb) over
 * the nbk blocks into acc. */
static void tile_rows(lfa_scratch *s, int rb, int mb, int nbk, __m512 *acc)
{
    const int8_t *w = s->wdec + (size_t)rb * 32;
    const uint8_t *x = s->xq + (size_t)mb * nbk * 512;
    const float *ws = s->ws + rb, *xs = s->xs + (size_t)mb * nbk * 16;
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
            fold(acc, s->ring[1], ws, xs, j - 1);
        if (j + 1 >= nbk)
            break;
        if (j + 2 < nbk)
            LFA_PRODUCT(TC0, j + 2);
        _tile_stored(TC1, s->ring[1], 64);
        fold(acc, s->ring[0], ws, xs, j);
    }
    if (nbk & 1)
        fold(acc, s->ring[0], ws, xs, nbk - 1);
    else
        fold(acc, s->ring[1], ws, xs, nbk - 1);
}

/* The super-block path: super-block B's 4 pairs of blocks (w: the H plane of 16
 * weight rows, x: 16 tokens) into tiles TH (H codes) and TL (L codes). */
#define LFA_SUPER(TH, TL, B)                                                             \
    do {                                                                                 \
        _tile_zero(TH);                                                                  \
        _tile_zero(TL);                                                                  \
        for (int p_ = 4 * (B); p_ < 4 * (B) + 4; p_++) {                                 \
            _tile_loadd(TX2, x + 1024 * (size_t)p_, 64);                                 \
            _tile_loadd(TWH, w + LFA_PB * (size_t)p_, 64);                               \
            _tile_loadd(TWL, w + LFA_PB * (size_t)p_ + LFA_PL, 64);                      \
            _tile_dpbssd(TH, TWH, TX2);                                                  \
            _tile_dpbssd(TL, TWL, TX2);                                                  \
        }                                                                                \
    } while (0)

/* acc[r] += (128 H[r] + L[r]) dw[r][B] da[B] (+ sum_j mw[r][8B + j] sa[8B + j]) */
ALWAYS_INLINE void fold_super(__m512 *acc, const int32_t *rh, const int32_t *rl,
                              const float *ws, const float *wm, const float *xs,
                              const float *xm, int B, const int mins)
{
    __m512 da = _mm512_load_ps(xs + 16 * 8 * (size_t)B);
    for (int r = 0; r < 16; r++) {
        __m512i v = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(rh + 16 * r), 7),
                                     _mm512_load_si512(rl + 16 * r));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v),
                                 _mm512_mul_ps(da, _mm512_set1_ps(ws[32 * 8 * (size_t)B + r])),
                                 acc[r]);
    }
    if (mins)
        for (int j = 8 * B; j < 8 * B + 8; j++) {
            __m512 sa = _mm512_load_ps(xm + 16 * (size_t)j);
            for (int r = 0; r < 16; r++)
                acc[r] = _mm512_fmadd_ps(sa, _mm512_set1_ps(wm[(size_t)r * LFA_BMAX + j]),
                                         acc[r]);
        }
}

/* tile_rows for the super-block path: 16 weight rows x 16 tokens over nsb super-blocks,
 * super-block B in TH0 / TL0 when even, TH1 / TL1 when odd; the tiles compute B + 1
 * while B folds. */
ALWAYS_INLINE void tile_rows_super(lfa_scratch *s, int rb, int mb, int nsb, __m512 *acc,
                                   const int mins)
{
    const int8_t *w = s->wdec + (size_t)rb * 64;
    const uint8_t *x = s->xq + (size_t)mb * nsb * 8 * 512;
    const float *ws = s->ws + rb, *xs = s->xs + (size_t)mb * nsb * 8 * 16;
    const float *wm = s->wm + (size_t)rb * LFA_BMAX, *xm = s->xm + (size_t)mb * nsb * 8 * 16;
    for (int r = 0; r < 16; r++)
        acc[r] = _mm512_setzero_ps();
    LFA_SUPER(TH0, TL0, 0);
    for (int B = 0; B < nsb; B += 2) {
        if (B + 1 < nsb)
            LFA_SUPER(TH1, TL1, B + 1);
        _tile_stored(TH0, s->ring[0], 64);
        _tile_stored(TL0, s->ring[1], 64);
        if (B > 0)
            fold_super(acc, s->ring[2], s->ring[3], ws, wm, xs, xm, B - 1, mins);
        if (B + 1 >= nsb)
            break;
        if (B + 2 < nsb)
            LFA_SUPER(TH0, TL0, B + 2);
        _tile_stored(TH1, s->ring[2], 64);
        _tile_stored(TL1, s->ring[3], 64);
        fold_super(acc, s->ring[0], s->ring[1], ws, wm, xs, xm, B, mins);
    }
    if (nsb & 1)
        fold_super(acc, s->ring[0], s->ring[1], ws, wm, xs, xm, nsb - 1, mins);
    else
        fold_super(acc, s->ring[2], s->ring[3], ws, wm, xs, xm, nsb - 1, mins);
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
           type == KT_TYPE_Q4_K || type == KT_TYPE_Q5_K || type == KT_TYPE_Q6_K;
}

void kt__lf_gemm_amx(int type, const void *W, size_t wrow, int n0, int n1, int k0, int k1,
                     const void *A, size_t a_stride, const int32_t *rows, size_t q_off, int M,
                     float *C, int ldc, void *scratch)
{
    lfa_scratch *s = (lfa_scratch *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    /* the K types (Q8_K partners): the super-block path */
    const int q8k = kt__ggml_act_section(type) == KT__GGML_ACT_Q8K, sb = q8k;
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
    configure(sb);
    for (int nb = n0; nb < n1; nb += LFA_NB) {
        int nr = imin(LFA_NB, n1 - nb), bi = (nb - n0) / LFA_NB;
        decode(type, sb, W, wrow, nb, nr, imin(LFA_NB, n1 - nb - LFA_NB), b0, nbk, &h,
               h.n * bi / blocks, h.n * (bi + 1) / blocks, s);
        for (int rb = 0; rb < nr; rb += 16)
            for (int mb = 0; mb < M; mb += 16) {
                __m512 acc[16];
                if (type == KT_TYPE_Q4_K || type == KT_TYPE_Q5_K)
                    tile_rows_super(s, rb, mb / 16, nbk / 8, acc, 1);
                else if (sb)
                    tile_rows_super(s, rb, mb / 16, nbk / 8, acc, 0);
                else
                    tile_rows(s, rb, mb / 16, nbk, acc);
                store_c(s, acc, C, ldc, nb - n0 + rb, imin(16, nr - rb), mb, imin(16, M - mb));
            }
    }
}
