/* LLAMAFILE decode on AVX2 without VNNI (Zen 3, Haswell..Ice Lake client) from
 * the load-time repacks the AVX-512 decode reads (moe_kernels.h: KT__LF_Q40X,
 * KT__LF_Q4KX, KT__LF_Q80X) and from Q5_K's, Q6_K's and IQ4_NL's (KT__LF_Q5KX,
 * KT__LF_Q6KX, KT__LF_IQ4NLX, this set's only; the Q5_K / Q6_K tensors of Q4_K_M /
 * Q5_K_M files).
 * Until these, an AVX2 machine decoded with one ggml vec_dot per (row, token): one
 * Zen 3 core, 384 x 2048 in L2, 13.7 / 8.7 / 3.9 ns per 64 weight bytes for Q4_0 /
 * Q4_K / Q8_0.
 *
 * A tile of 4 rows is one stream of groups of g blocks of 32 inputs (Q4_K: its
 * sub-blocks); per group [steps][4 rows][64 bytes] of codes in which 4-byte lane
 * l holds codes of block l % g only, then the rows' scales. A row's 64 bytes are
 * two registers here (lanes 0-7 and 8-15); the activation's codes lie in the
 * same order (cpu/ref/moe_llamafile.c), so per step and row:
 *
 *   Q4_0 / Q4_K   p16 += vpmaddubsw(w & 15, a_lo) + vpmaddubsw(w >> 4 & 15, a_hi)
 *   Q8_0          i32 += vpmaddwd(vpmaddubsw(|c|, sign(a, c)), 1)    c = w ^ 0x80
 *   IQ4_NL        i32 += the same with c = vpshufb(table, nibble), low and high
 *   (Q5_K: k5x_steps, Q6_K: k6x_group below)
 *
 * and per group and row (i32 = vpmaddwd(p16, 1) for the 4-bit types):
 *
 *   Q4_0   acc += float(i32 + bias) * (dw * da)     bias = -8 x the block's code sum
 *   Q8_0, IQ4_NL   acc += float(i32) * (dw * da)
 *   Q4_K   acc += float(i32 * sc) * (d * da) - float(m) * dmin * (da * sum_a)
 *
 * A 4-bit pair is at most 2 x 15 x 128 = 3840, a step's two 7680 and a group's 4
 * steps 30720, so the int16 sums neither saturate nor wrap and every integer
 * block sum is ggml's; only the float summation order differs from the vec_dots.
 * Q8_0's sign trick is ggml's too: a code of -128 (which ggml's quantizer never
 * writes) would saturate a pair.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe_kernels.h"
#include "ref/ggml_quants.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The layouts, by their repack type (W->type). */
enum {
    X40 = KT__LF_Q40X,
    X4K = KT__LF_Q4KX,
    X80 = KT__LF_Q80X,
    X6K = KT__LF_Q6KX,
    XNL = KT__LF_IQ4NLX,
    X5K = KT__LF_Q5KX
};

/* Prefetch distance in bytes of the tile stream (KT_LF_AHEAD: 0 none, else
 * 256..65536), into L2. */
static int x2_ahead = 4096;
/* KT_LF_NOHINT=1: no next-call hints (each call's stream starts cold, and its
 * prefetches run on past its end, as before the hints) */
static int x2_nohint;
/* KT_LF_STREAMS: a call's tiles read as this many streams side by side (1..4);
 * 0, unset: 2 for Q4_0, Q4_K and Q8_0 (x2_streams_for) */
static int x2_streams;
/* KT_LF_WEAVE: 1 (unset) two streams of a one-token call read a group of each
 * tile in turn (x_tiles_woven), 2 the same for any tokens, 0 a whole tile of each
 * in turn (session 14's order) */
static int x2_weave = 1;
static pthread_once_t x2_once = PTHREAD_ONCE_INIT;

static void x2_init(void)
{
    const char *e = getenv("KT_LF_AHEAD");
    if (e && ((atoi(e) >= 256 && atoi(e) <= 65536) || !strcmp(e, "0")))
        x2_ahead = atoi(e);
    e = getenv("KT_LF_NOHINT"); /* set and empty (a script's "off") is no */
    x2_nohint = e && *e && strcmp(e, "0") != 0;
    e = getenv("KT_LF_STREAMS");
    if (e && atoi(e) >= 1 && atoi(e) <= 4)
        x2_streams = atoi(e);
    e = getenv("KT_LF_WEAVE");
    if (e && *e) /* 2: any number of tokens (for measuring) */
        x2_weave = atoi(e) == 2 ? 2 : strcmp(e, "0") != 0;
}

int kt__lf_set_streams_avx2(int streams, int weave)
{
    pthread_once(&x2_once, x2_init);
    int old = x2_streams | x2_weave << 4;
    x2_streams = streams >= 0 && streams <= 4 ? streams : 0;
    x2_weave = weave >= 0 && weave <= 2 ? weave : 1;
    return old;
}

/* The backend's hints (kt__lf_hint_avx2): the tile streams of this thread's next
 * calls (the item's up rows, the next item's gate rows, the next expert's down
 * rows), oldest first; each call takes the oldest. A call's prefetches, which ran
 * x2_ahead bytes past its own end into rows it does not read, run on into the
 * next call's first bytes instead, and that call skips the ones already started:
 * down items are one call per expert of 256 rows (Q4_0 at K 768: 108 KiB), so
 * each stream restarted cold 4 KiB in 108. */
typedef struct x2_region {
    const uint8_t *w;
    size_t len;
} x2_region;
static _Thread_local x2_region x2_hints[2];
static _Thread_local int x2_nhints;
/* where the last call's prefetches into its hinted successor stopped */
static _Thread_local const uint8_t *x2_tail_w;
static _Thread_local size_t x2_tail_len;
static _Thread_local int x2_tail_streams; /* of that call's streams (KT_LF_STREAMS) */

void kt__lf_hint_avx2(const void *W, size_t tile_bytes, int t0, int t1)
{
    pthread_once(&x2_once, x2_init);
    if (t1 <= t0 || x2_nohint)
        return;
    if (x2_nhints == 2) { /* keep the newest two */
        x2_hints[0] = x2_hints[1];
        x2_nhints = 1;
    }
    x2_hints[x2_nhints++] =
        (x2_region){(const uint8_t *)W + (size_t)t0 * tile_bytes, (size_t)(t1 - t0) * tile_bytes};
}

/* The oldest hint, taken off the queue ({NULL, 0}: none). */
static x2_region x2_hint_take(void)
{
    x2_region g = {NULL, 0};
    if (x2_nhints) {
        g = x2_hints[0];
        x2_hints[0] = x2_hints[1];
        x2_nhints--;
    }
    return g;
}

/* The lane sums of a, b, c, d into out[0..3]. */
ALWAYS_INLINE void sum4_store(__m256 a, __m256 b, __m256 c, __m256 d, float *out)
{
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* The 4 lines of a 256-byte step at pf started into L2 (pf NULL: none). */
ALWAYS_INLINE void step_prefetch(const uint8_t *pf)
{
    if (pf)
        for (int l = 0; l < 4; l++)
            _mm_prefetch((const char *)pf + 64 * l, _MM_HINT_T1);
}

/* acc += one row's 32 code bytes v of a step against the activation's codes at the
 * same positions (alo; the 4-bit layouts: alo the low nibbles', ahi the high ones'):
 *
 *   X40, X4K   int16 pairs   vpmaddubsw(v & 15, alo) + vpmaddubsw(v >> 4 & 15, ahi)
 *   XNL        int32 lanes   w = kt__iq4nl_values[nibble], -127..113, by ggml's sign
 *                            trick (|w| . a sign(w)); its pair sums (up to 2 x 127 x 127)
 *                            leave no room for a second one in int16: vpmaddwd by 1
 *   X80        int32 lanes   the same with c = v ^ 0x80 (the codes are stored + 128) */
ALWAYS_INLINE __m256i step_row(const int kind, __m256i v, __m256i alo, __m256i ahi, __m256i acc)
{
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi16(1);
    if (kind == X80) {
        __m256i c = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));
        __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(alo, c));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(p, one));
    }
    if (kind == XNL) {
        const __m256i tab =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kt__iq4nl_values));
        __m256i wl = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
        __m256i wh = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(wl), _mm256_sign_epi8(alo, wl));
        __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(wh), _mm256_sign_epi8(ahi, wh));
        return _mm256_add_epi32(
            acc, _mm256_add_epi32(_mm256_madd_epi16(pl, one), _mm256_madd_epi16(ph, one)));
    }
    __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(v, m4), alo);
    __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), ahi);
    return _mm256_add_epi16(acc, _mm256_add_epi16(lo, hi));
}

/* acc[r][h] += step_row over the NS steps of 4 rows x 64 bytes at st (row r's half h
 * the 32 bytes at r 64 + 32 h) against the activation's codes at a: a step 64 bytes
 * (X80) or the low nibbles' 64 then the high ones' (the 4-bit layouts). */
ALWAYS_INLINE void tile_steps(const int kind, const int NS, const uint8_t *st, const uint8_t *pf,
                              const uint8_t *a, __m256i acc[4][2])
{
    const size_t astep = kind == X80 ? 64 : 128;
    /* the hot loop */
    #pragma GCC unroll 8
    for (int s = 0; s < NS; s++) {
        const uint8_t *as = a + (size_t)s * astep;
        step_prefetch(pf ? pf + s * 256 : NULL);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i alo = _mm256_loadu_si256((const __m256i *)(as + 32 * h));
            __m256i ahi = kind == X80 ? alo
                                      : _mm256_loadu_si256((const __m256i *)(as + 64 + 32 * h));
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[r][h] = step_row(
                    kind, _mm256_loadu_si256((const __m256i *)(st + s * 256 + r * 64 + 32 * h)),
                    alo, ahi, acc[r][h]);
        }
    }
}

/* The lanes [0, n) of the 8 floats at p, the others 0. */
ALWAYS_INLINE __m256 load_first(const float *p, int n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx));
}

/* Q40X / Q80X group of g = 4 S blocks at byte go of the tile t, block gb of nb:
 * acc[r] += rows . token (act: the section's per-block int32 biases, their float
 * scales xs bytes on, the codes 2 xs on). */
ALWAYS_INLINE void x_group(const int kind, const int S, const uint8_t *t, size_t go,
                           const uint8_t *pf, int gb, int nb, const uint8_t *act, size_t xs,
                           __m256 acc[4])
{
    const int g = 4 * S;
    const int nvalid = nb - gb < g ? nb - gb : g; /* the padded last group: fewer */
    /* X80: 2 S steps of the codes; X40: int16 pair sums, widened after the group */
    const int NS = kind == X80 ? 2 * S : S;
    __m256i i32[4][2];
    for (int r = 0; r < 4; r++)
        i32[r][0] = i32[r][1] = _mm256_setzero_si256();
    tile_steps(kind, NS, t + go, pf ? pf + go : NULL,
               act + 2 * xs + (size_t)(kind == X80 ? gb / 2 * 64 : gb / 4 * 128), i32);
    if (kind == X40) {
        const __m256i one = _mm256_set1_epi16(1);
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < 2; h++)
                i32[r][h] = _mm256_madd_epi16(i32[r][h], one);
    }
    const uint8_t *sc = t + go + (size_t)NS * 256; /* [4 rows][g] f16 */
    if (pf) /* the scale lines: 128 bytes (g 16) or 64 */
        for (int o = 0; o < (S == 4 ? 128 : 64); o += 64)
            _mm_prefetch((const char *)pf + go + NS * 256 + o, _MM_HINT_T1);
    const int32_t *bias = (const int32_t *)act + gb;
    const float *bd = (const float *)(act + xs) + gb;
    /* lanes l of both halves hold block l % g: g 16 two sets, else one (g 4 twice
     * over) */
    __m256 da0, da1;
    __m256i b0 = _mm256_setzero_si256();
    if (S == 4) {
        da0 = _mm256_loadu_ps(bd), da1 = _mm256_loadu_ps(bd + 8);
    } else if (S == 2) {
        da0 = da1 = _mm256_loadu_ps(bd);
    } else {
        __m128 d4 = _mm256_castps256_ps128(load_first(bd, nvalid));
        da0 = da1 = _mm256_set_m128(d4, d4);
    }
    if (kind == X40) {
        if (S == 4) {
            b0 = _mm256_loadu_si256((const __m256i *)bias);
        } else {
            b0 = _mm256_castps_si256(load_first((const float *)bias, nvalid));
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const uint8_t *sr = sc + (size_t)r * 2 * g;
        if (S == 4) {
            __m256i i0 = i32[r][0], i1 = i32[r][1];
            if (kind == X40) {
                i0 = _mm256_add_epi32(i0, b0);
                i1 = _mm256_add_epi32(i1, _mm256_loadu_si256((const __m256i *)(bias + 8)));
            }
            __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sr));
            __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sr + 16)));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(dw0, da0), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(dw1, da1), acc[r]);
        } else {
            __m256i i = _mm256_add_epi32(_mm256_add_epi32(i32[r][0], i32[r][1]), b0);
            __m128i h;
            if (S == 2) {
                h = _mm_loadu_si128((const __m128i *)sr);
            } else {
                long long q;
                memcpy(&q, sr, 8);
                h = _mm_set1_epi64x(q);
            }
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(_mm256_cvtph_ps(h), da0),
                                     acc[r]);
        }
    }
}

/* The 4 rows' int32 lanes T[r] (lanes 0-3 and 4-7 two parts of the same sum) as
 * [r0 r1 r2 r3 | r0 r1 r2 r3] */
ALWAYS_INLINE __m256i rows4_hadd(const __m256i T[4])
{
    return _mm256_hadd_epi32(_mm256_hadd_epi32(T[0], T[1]), _mm256_hadd_epi32(T[2], T[3]));
}

/* The 4 rows' sums of a group's blocks as [r0 r1 r2 r3 | r0 r1 r2 r3] of blocks A
 * | B (S 2: the one block, B zero), from the rows' lanes TA (block A's sub-blocks;
 * S 2: both halves of the one block) and TB (block B's). */
ALWAYS_INLINE __m256i rows4_blocks(const int S, const __m256i TA[4], const __m256i TB[4])
{
    __m256i tA = rows4_hadd(TA);
    if (S == 4) {
        __m256i tB = rows4_hadd(TB);
        return _mm256_add_epi32(_mm256_permute2x128_si256(tA, tB, 0x20),
                                _mm256_permute2x128_si256(tA, tB, 0x31));
    }
    return _mm256_zextsi128_si256(
        _mm_add_epi32(_mm256_castsi256_si128(tA), _mm256_extracti128_si256(tA, 1)));
}

/* The 4 rows' bytes p[r g ..] (16 with S 4, else 8) as words . the words b16, pairs
 * of sub-blocks a lane, as [r0 r1 r2 r3 | r0 r1 r2 r3] of blocks A | B (S 2: B zero). */
ALWAYS_INLINE __m256i rows4_bytes_dot(const int S, const uint8_t *p, int g, __m256i b16)
{
    __m256i d[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m128i v = S == 4 ? _mm_loadu_si128((const __m128i *)(p + r * g))
                           : _mm_loadl_epi64((const __m128i *)(p + r * g));
        d[r] = _mm256_madd_epi16(_mm256_cvtepu8_epi16(v), b16);
    }
    return rows4_hadd(d);
}

/* The Q6KX biases of the token's sub-blocks gb.. (k6x_group) halved and summed: per
 * pair slot -16 x the sum of the 16 activation codes it meets in a Q5KX group (lo and
 * hi halves; each bias a multiple of 32, so the halves are exact). */
ALWAYS_INLINE __m256i q5_bias(const int16_t *blo, const int16_t *bhi)
{
    return _mm256_add_epi16(_mm256_srai_epi16(_mm256_loadu_si256((const __m256i *)blo), 1),
                            _mm256_srai_epi16(_mm256_loadu_si256((const __m256i *)bhi), 1));
}

/* p[r][h] = the int16 pair sums of a Q5KX group's S steps (st: [S][4 rows][64] nibble
 * bytes, then [S][4 rows][16] 5th bits; a: the activation's codes in the Q40X order),
 * started at the biases b[h]:
 *
 *   u    = nibble | (5th bit << 4)              code q, 0..31
 *   p16 += vpmaddubsw(u_lo, a_lo) + vpmaddubsw(u_hi, a_hi)
 *
 * A pair slot meets 16 codes: with the bias of -16 x their activation codes' sum it
 * holds sum (q - 16) a, within 16 x 16 x 127 = 32512, so the int16 sums wrap on the
 * way but end exact. The 16 bytes of 5th bits of a row and step, broadcast to both
 * 128-bit lanes, hold bit 2 h + L (low nibbles) and 4 + 2 h + L (high) for lane L of
 * half h: vpsllvd / vpsrlvd by per-lane counts move it to bit 4. */
ALWAYS_INLINE void k5x_steps(const int S, const uint8_t *st, const uint8_t *pf, const uint8_t *a,
                             const __m256i b[2], __m256i p[4][2])
{
    const __m256i m4 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);
    const __m256i sl[2] = {_mm256_setr_epi32(4, 4, 4, 4, 3, 3, 3, 3),
                           _mm256_setr_epi32(2, 2, 2, 2, 1, 1, 1, 1)};
    const __m256i sr[2] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                           _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)};
    const uint8_t *bits = st + (size_t)S * 256;
    for (int r = 0; r < 4; r++)
        p[r][0] = b[0], p[r][1] = b[1];
    /* the hot loop: 128 codes a row and step */
    #pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        const uint8_t *as = a + (size_t)s * 128;
        step_prefetch(pf ? pf + s * 256 : NULL);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i alo = _mm256_loadu_si256((const __m256i *)(as + 32 * h));
            __m256i ahi = _mm256_loadu_si256((const __m256i *)(as + 64 + 32 * h));
            #pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(st + s * 256 + r * 64 + 32 * h));
                __m256i q = _mm256_broadcastsi128_si256(
                    _mm_loadu_si128((const __m128i *)(bits + (4 * s + r) * 16)));
                __m256i ulo = _mm256_or_si256(_mm256_and_si256(v, m4),
                                              _mm256_and_si256(_mm256_sllv_epi32(q, sl[h]), m16));
                __m256i uhi =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                    _mm256_and_si256(_mm256_srlv_epi32(q, sr[h]), m16));
                __m256i d = _mm256_add_epi16(_mm256_maddubs_epi16(ulo, alo),
                                             _mm256_maddubs_epi16(uhi, ahi));
                p[r][h] = _mm256_add_epi16(p[r][h], d);
            }
        }
    }
}

/* Q4KX's T and M (k4x_group) from the group's packed scales and mins at meta
 * (moe_kernels.h; row 2 h + p's sub-block x at byte 8 (x / 4) + 4 p + x % 4 of pair
 * h's 2 g). T: per row and half one vpshufb of the pair's 16 bytes puts the row's
 * scales as (sc, sc) word pairs, and vpmaddwd against the int16 pair sums gives
 * sc (p0 + p1) (the products < 2^21: the same integers as a sum then a product).
 * M: the mins made whole in the pair order, vpmaddwd against the code sums spread to
 * that order (vpermq), the rows' lanes summed by vphaddd. */
ALWAYS_INLINE void k4x_tm(const int S, const uint8_t *meta, __m256i p[4][2], __m256i b16,
                          __m256i *T, __m256i *Mi)
{
    const __m256i s63 = _mm256_set1_epi16(63);
    /* row p's scales of a half: lane 0 sub-blocks 0-3 of it, lane 1 4-7 */
    const __m256i ctl[2] = {
        _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3, -128,
                         8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11,
                         -128),
        _mm256_setr_epi8(4, -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7, -128, 7, -128,
                         12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15,
                         -128)};
    __m256i tr[2][4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        for (int h = 0; h < S / 2; h++) {
            __m256i c = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(meta + (size_t)(r / 2) * 8 * S + 16 * h)));
            __m256i w = _mm256_and_si256(_mm256_shuffle_epi8(c, ctl[r % 2]), s63);
            /* S 2: both halves hold sub-blocks 0-7 (a step's two pieces) */
            tr[h][r] = _mm256_madd_epi16(S == 4 ? p[r][h] : _mm256_add_epi16(p[r][0], p[r][1]), w);
        }
    *T = rows4_blocks(S, tr[0], tr[1]);
    /* m = (byte >> 2) & 0x30 | the pair's nibble; code sums: 128-bit lane of pair order
     * sub-blocks 4k..4k+3 twice */
    const __m256i bA = _mm256_permute4x64_epi64(b16, 0x50);
    if (S == 4) {
        const __m256i m30 = _mm256_set1_epi8(0x30), m15 = _mm256_set1_epi8(15);
        const __m256i bB = _mm256_permute4x64_epi64(b16, 0xfa);
        const __m256i nib = _mm256_loadu_si256((const __m256i *)(meta + 64));
        __m256i X[2][2];
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(meta + 32 * h));
            __m256i n = _mm256_and_si256(h ? _mm256_srli_epi16(nib, 4) : nib, m15);
            __m256i m = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 2), m30), n);
            X[0][h] = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(m)), bA);
            X[1][h] = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(m, 1)), bB);
        }
        /* [r0 r1 r2 r3] of sub-blocks 0-3 | 4-7 (hA; hB: 8-11 | 12-15) */
        __m256i hA = _mm256_hadd_epi32(X[0][0], X[0][1]), hB = _mm256_hadd_epi32(X[1][0], X[1][1]);
        *Mi = _mm256_add_epi32(_mm256_permute2x128_si256(hA, hB, 0x20),
                               _mm256_permute2x128_si256(hA, hB, 0x31));
    } else {
        const __m128i m30 = _mm_set1_epi8(0x30), m15 = _mm_set1_epi8(15);
        const __m128i nib = _mm_loadu_si128((const __m128i *)(meta + 32));
        __m256i X[2];
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m128i a = _mm_loadu_si128((const __m128i *)(meta + 16 * h));
            __m128i n = _mm_and_si128(h ? _mm_srli_epi16(nib, 4) : nib, m15);
            __m128i m = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 2), m30), n);
            X[h] = _mm256_madd_epi16(_mm256_cvtepu8_epi16(m), bA);
        }
        __m256i hA = _mm256_hadd_epi32(X[0], X[1]);
        *Mi = _mm256_zextsi128_si256(
            _mm_add_epi32(_mm256_castsi256_si128(hA), _mm256_extracti128_si256(hA, 1)));
    }
}

/* Q4KX (kind X4K) or Q5KX (X5K) group of g = 4 S sub-blocks (S 4 or 2) at byte go
 * of the tile t from sub-block gb of nb: acc += rows . token, lane r (and r + 4) of
 * acc summing row r (act: the Q8_K section's d per 32 xs bytes on, the codes in the
 * Q40X order 2 xs on, then their int16 sums per 32; Q5KX: then the Q6KX biases). The
 * 4 rows' integer sums are reduced together before the float products:
 *
 *   T[r][blk] = sum_j sc_j (q_j . a_j)    vpmaddwd by 1, vpmulld by sc, vphaddd
 *                                         (Q5KX: q_j - 16, then + 16 sum_j sc_j sum(a_j))
 *   M[r][blk] = sum_j m_j sum(a_j)         vpmaddwd, vphaddd
 *   acc      += float(T) (d da) - float(M) (dmin da)    [4 rows][2 blocks] lanes
 */
ALWAYS_INLINE void k4x_group(const int kind, const int S, const uint8_t *t, size_t go,
                             const uint8_t *pf, int gb, int nb, const uint8_t *act, size_t xs,
                             __m256 *acc)
{
    const int g = 4 * S;
    /* code bytes per sub-block and tile: nibbles (Q5KX: and 5th bits) */
    const size_t cb = kind == X5K ? 80 : 64;
    const uint8_t *codes = act + 2 * xs + (size_t)(gb / 4) * 128;
    __m256i p[4][2];
    if (kind == X5K) {
        const int16_t *blo = (const int16_t *)(act + 2 * xs + (size_t)(nb + 3) / 4 * 128 +
                                               (((size_t)nb * 2 + 63) & ~(size_t)63)) +
                             2 * gb;
        const int16_t *bhi = blo + xs / 2;
        const __m256i b[2] = {q5_bias(blo, bhi),
                              S == 4 ? q5_bias(blo + 16, bhi + 16) : _mm256_setzero_si256()};
        k5x_steps(S, t + go, pf ? pf + go : NULL, codes, b, p);
    } else {
        for (int r = 0; r < 4; r++)
            p[r][0] = p[r][1] = _mm256_setzero_si256();
        tile_steps(X4K, S, t + go, pf ? pf + go : NULL, codes, p);
    }
    if (pf) /* Q5KX: the 5th-bit lines; the scale and min lines: 128 bytes (g 16) or 64 */
        for (size_t o = (size_t)g * 64; o < (size_t)g * (cb + 8); o += 64)
            _mm_prefetch((const char *)pf + go + o, _MM_HINT_T1);
    const __m256i one = _mm256_set1_epi16(1);
    const uint8_t *sc = t + go + (size_t)g * cb, *mn = sc + 4 * g; /* [4 rows][g] bytes */
    /* the rows' (d, dmin) f16 pairs of the group's blocks, row r's at dd + r dstr:
     * Q4KX's in the group after its scales (packed, moe_kernels.h), Q5KX's after
     * the tile's groups */
    const uint8_t *dd = kind == X4K ? sc + (size_t)6 * g
                                    : t + (size_t)nb * (cb + 8) + (size_t)(gb / 8) * 4;
    const size_t dstr = kind == X4K ? (size_t)S * 2 : (size_t)nb / 2;
    const int16_t *bs = (const int16_t *)(act + 2 * xs + (size_t)(nb + 3) / 4 * 128) + gb;
    __m256i b16 = S == 4 ? _mm256_loadu_si256((const __m256i *)bs)
                         : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)bs));
    __m256i T, Mi;
    if (kind == X4K) /* packed scales and mins (moe_kernels.h) */
        k4x_tm(S, sc, p, b16, &T, &Mi);
    /* tr[h]: [4 rows] x (lanes 0-3: sub-blocks 0-3 of half h, 4-7: 4-7), summed below */
    __m256i tr[2][4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4 && kind == X5K; r++) {
        if (S == 4) {
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                tr[h][r] = _mm256_mullo_epi32(
                    _mm256_madd_epi16(p[r][h], one),
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + r * g + 8 * h))));
        } else { /* both halves hold sub-blocks 0-7 (a step's two pieces) */
            tr[0][r] = _mm256_mullo_epi32(
                _mm256_madd_epi16(_mm256_add_epi16(p[r][0], p[r][1]), one),
                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + r * g))));
        }
    }
    if (kind == X5K) {
        T = rows4_blocks(S, tr[0], tr[1]);
        /* the min term: m words . the sub-blocks' code sums, pairs of sub-blocks a lane */
        Mi = rows4_bytes_dot(S, mn, g, b16);
        /* T += 16 sum_j sc_j sum(a_j): the codes' -16 back */
        T = _mm256_add_epi32(T, _mm256_slli_epi32(rows4_bytes_dot(S, sc, g, b16), 4));
    }
    /* the rows' (d, dmin) f16 of blocks A, B into [d: r0..r3 A | r0..r3 B], [dmin: ...] */
    __m128i q[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        long long v = 0;
        memcpy(&v, dd + (size_t)r * dstr, S == 4 ? 8 : 4);
        q[r] = _mm_cvtsi64_si128(v);
    }
    __m128i a01 = _mm_unpacklo_epi16(q[0], q[1]), a23 = _mm_unpacklo_epi16(q[2], q[3]);
    __m128i c = _mm_unpacklo_epi32(a01, a23), e = _mm_unpackhi_epi32(a01, a23);
    const float *d32 = (const float *)(act + xs) + gb;
    __m256 da = S == 4 ? _mm256_set_m128(_mm_set1_ps(d32[8]), _mm_set1_ps(d32[0]))
                       : _mm256_zextps128_ps256(_mm_set1_ps(d32[0]));
    __m256 fd = _mm256_mul_ps(_mm256_cvtph_ps(_mm_unpacklo_epi64(c, e)), da);
    __m256 fm = _mm256_mul_ps(_mm256_cvtph_ps(_mm_unpackhi_epi64(c, e)), da);
    *acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(Mi), fm,
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(T), fd, *acc));
}

/* Q6KX group of g = 4 S sub-blocks (S 4 or 2) at byte go of the tile t from
 * sub-block gb of nb: acc += rows . token, lane r (and r + 4) of acc summing row r
 * (act: the Q8_K section's d per 32 xs bytes on, the codes in the Q40X order 2 xs
 * on, then their int16 sums per 32, then the lo / hi biases). Per row, step and
 * half h (lanes 0-7: sub-blocks 0-7, 8-15) of the lo and the hi codes:
 *
 *   u   = nibble | top 2 bits << 4                    6-bit code, q + 32
 *   p16 = bias + sum_steps vpmaddubsw(u, a)           int16 pairs, wrapping
 *   T   = vpmaddwd(p16, (sc, sc))                     int32 per sub-block half
 *   acc += float(T) (d da)                            [4 rows][2 blocks] lanes
 *
 * A pair slot meets 8 codes: sum (u - 32) a is within 8 x 32 x 127 = 32512, so the
 * wrapping int16 sums end exact (bias: -32 x the slot's activation code sum). */
ALWAYS_INLINE void k6x_group(const int S, const uint8_t *t, size_t go, const uint8_t *pf, int gb,
                             int nb, const uint8_t *act, size_t xs, __m256 *acc)
{
    const int g = 4 * S;
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const uint8_t *codes = act + 2 * xs + (size_t)(gb / 4) * 128;
    const int16_t *blo = (const int16_t *)(act + 2 * xs + (size_t)(nb + 3) / 4 * 128 +
                                           (((size_t)nb * 2 + 63) & ~(size_t)63)) +
                         2 * gb;
    const int16_t *bhi = blo + xs / 2;
    const uint8_t *sc = t + go + (size_t)g * 96; /* [4 rows][g] lo, then hi */
    __m256i TA[4], TB[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const uint8_t *w = t + go + (size_t)r * S * 96; /* [S steps][96] */
        if (pf)
            for (int o = 0; o < S * 96; o += 64)
                _mm_prefetch((const char *)pf + go + (size_t)r * S * 96 + o, _MM_HINT_T1);
        /* [lo, hi][half] */
        __m256i p[2][2];
        p[0][0] = _mm256_loadu_si256((const __m256i *)blo);
        p[1][0] = _mm256_loadu_si256((const __m256i *)bhi);
        if (S == 4) {
            p[0][1] = _mm256_loadu_si256((const __m256i *)(blo + 16));
            p[1][1] = _mm256_loadu_si256((const __m256i *)(bhi + 16));
        } else {
            p[0][1] = p[1][1] = _mm256_setzero_si256();
        }
        /* the hot loop: 128 codes a step */
        #pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const uint8_t *ws = w + s * 96, *as = codes + (size_t)s * 128;
            __m256i n0 = _mm256_loadu_si256((const __m256i *)ws);
            __m256i n1 = _mm256_loadu_si256((const __m256i *)(ws + 32));
            __m256i q = _mm256_loadu_si256((const __m256i *)(ws + 64));
            __m256i u[2][2];
            u[0][0] = _mm256_or_si256(_mm256_and_si256(n0, m4),
                                      _mm256_and_si256(_mm256_slli_epi16(q, 4), m30));
            u[0][1] = _mm256_or_si256(_mm256_and_si256(n1, m4),
                                      _mm256_and_si256(_mm256_slli_epi16(q, 2), m30));
            u[1][0] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n0, 4), m4),
                                      _mm256_and_si256(q, m30));
            u[1][1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n1, 4), m4),
                                      _mm256_and_si256(_mm256_srli_epi16(q, 2), m30));
            #pragma GCC unroll 2
            for (int c = 0; c < 2; c++)
                #pragma GCC unroll 2
                for (int h = 0; h < 2; h++)
                    p[c][h] = _mm256_add_epi16(
                        p[c][h],
                        _mm256_maddubs_epi16(
                            u[c][h], _mm256_loadu_si256((const __m256i *)(as + 64 * c + 32 * h))));
        }
        /* the int8 scales as (sc, sc) int16 pairs, lane l: sub-block l (S 2) or l, 8 + l */
        if (S == 4) {
            __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(sc + r * g)));
            __m256i hi =
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(sc + 4 * g + r * g)));
            TA[r] = _mm256_add_epi32(_mm256_madd_epi16(p[0][0], _mm256_unpacklo_epi16(lo, lo)),
                                     _mm256_madd_epi16(p[1][0], _mm256_unpacklo_epi16(hi, hi)));
            TB[r] = _mm256_add_epi32(_mm256_madd_epi16(p[0][1], _mm256_unpackhi_epi16(lo, lo)),
                                     _mm256_madd_epi16(p[1][1], _mm256_unpackhi_epi16(hi, hi)));
        } else {
            __m128i lo = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(sc + r * g)));
            __m128i hi = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(sc + 4 * g + r * g)));
            __m256i slo = _mm256_set_m128i(_mm_unpackhi_epi16(lo, lo), _mm_unpacklo_epi16(lo, lo));
            __m256i shi = _mm256_set_m128i(_mm_unpackhi_epi16(hi, hi), _mm_unpacklo_epi16(hi, hi));
            TA[r] = _mm256_add_epi32(
                _mm256_madd_epi16(_mm256_add_epi16(p[0][0], p[0][1]), slo),
                _mm256_madd_epi16(_mm256_add_epi16(p[1][0], p[1][1]), shi));
        }
    }
    if (pf) /* the scale lines: 128 bytes (g 16) or 64 */
        for (int o = 0; o < 8 * g; o += 64)
            _mm_prefetch((const char *)pf + go + (size_t)g * 96 + o, _MM_HINT_T1);
    __m256i T = rows4_blocks(S, TA, TB);
    /* the rows' d of blocks A, B: [K / 256][4 rows] f16 after the groups */
    const uint8_t *dd = t + (size_t)nb * 104 + (size_t)(gb / 8) * 8;
    __m128i h = S == 4 ? _mm_loadu_si128((const __m128i *)dd) : _mm_loadl_epi64((const __m128i *)dd);
    const float *d32 = (const float *)(act + xs) + gb;
    __m256 da = S == 4 ? _mm256_set_m128(_mm_set1_ps(d32[8]), _mm_set1_ps(d32[0]))
                       : _mm256_zextps128_ps256(_mm_set1_ps(d32[0]));
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T), _mm256_mul_ps(_mm256_cvtph_ps(h), da), *acc);
}

/* The Q4KX, Q5KX or Q6KX group kernel (kind X4K / X5K / X6K). */
ALWAYS_INLINE void kx_group(const int kind, const int S, const uint8_t *t, size_t go,
                            const uint8_t *pf, int gb, int nb, const uint8_t *act, size_t xs,
                            __m256 *acc)
{
    if (kind == X6K)
        k6x_group(S, t, go, pf, gb, nb, act, xs, acc);
    else
        k4x_group(kind, S, t, go, pf, gb, nb, act, xs, acc);
}

/* out[r] = row r of the tile at t . the token at act (Q4KX, Q5KX, Q6KX: K = 32 nb). */
ALWAYS_INLINE void x_tile(const int kind, const uint8_t *t, const uint8_t *pf, int nb,
                          const uint8_t *act, size_t xs, float *out)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    size_t go = 0;
    int b = 0;
    if (kind == X4K || kind == X5K || kind == X6K) {
        /* tile bytes per sub-block in the groups, then the rows' d (Q4_K, Q5_K: d, dmin) */
        const size_t sb = kind == X6K ? 104 : kind == X5K ? 88 : 72;
        const size_t tb = kt__lf_x_tile_bytes(kind, 32 * nb);
        for (; b + 16 <= nb; b += 16, go += sb * 16)
            kx_group(kind, 4, t, go, pf, b, nb, act, xs, &acc[0]);
        if (nb - b >= 8)
            kx_group(kind, 2, t, go, pf, b, nb, act, xs, &acc[0]), go += sb * 8;
        if (pf) /* the d lines after the groups */
            for (size_t o = go; o < tb; o += 64)
                _mm_prefetch((const char *)pf + o, _MM_HINT_T1);
        _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(acc[0]),
                                      _mm256_extractf128_ps(acc[0], 1)));
        return;
    } else {
        const int q8 = kind == X80;
        for (; b + 16 <= nb; b += 16)
            x_group(kind, 4, t, go, pf, b, nb, act, xs, acc),
                go += q8 ? kt__q80x_group_bytes(16) : kt__q40x_group_bytes(16);
        if (nb - b >= 8)
            x_group(kind, 2, t, go, pf, b, nb, act, xs, acc),
                go += q8 ? kt__q80x_group_bytes(8) : kt__q40x_group_bytes(8), b += 8;
        if (nb - b >= 4)
            x_group(kind, 1, t, go, pf, b, nb, act, xs, acc),
                go += q8 ? kt__q80x_group_bytes(4) : kt__q40x_group_bytes(4), b += 4;
        if (nb > b)
            x_group(kind, 1, t, go, pf, b, nb, act, xs, acc);
    }
    sum4_store(acc[0], acc[1], acc[2], acc[3], out);
}

/* Streams a call of this layout reads side by side. Two tile streams, each
 * prefetched as one was, read more of a read loop than one for Q4_0 and Q4_K,
 * where an AVX2 core streams at 0.80-0.83 of it with one (RAWINT4's four row
 * streams 0.84-0.94): one Zen 3 core, 12-01 07:41-07:50, 384 x 2048 Q4_0 0.87 /
 * 0.88 / 0.89 against 0.82 / 0.82 / 0.83, 256 x 768 0.87 against 0.80, Q4_K 0.88
 * against 0.80; Q8_0 level (0.84 / 0.83 against 0.84 / 0.85), so it keeps one;
 * four streams read less (0.76-0.81). The other layouts were not measured.
 * Session 15 (x_tiles_woven, a group of each stream's tile in turn, each with its
 * own loads): one Zen 3 core, 384 x 2048, 4 alternating rounds at load 9-10, median
 * x read loop Q4_0 0.84 against 0.77 (two streams a tile at a time), Q4_K 0.95
 * against 0.78, Q8_0 0.82 against 0.77 (one stream), RAWINT4 0.82-0.93: Q8_0 takes
 * two as well. */
static int x2_streams_for(int kind)
{
    return x2_streams ? x2_streams : kind == X40 || kind == X4K || kind == X80 ? 2 : 1;
}

/* Tile t of W for the M tokens into C's rows in [n0, n1): its rows are read once
 * from memory, then from L1 for the other tokens. */
ALWAYS_INLINE void x_tile_tokens(const int kind, const kt__wmat *W, int t, const uint8_t *pf,
                                 int n0, int n1, const void *const *act, size_t xs, int M,
                                 float *C, int ldc)
{
    const int nb = W->cols / 32;
    const uint8_t *tp = (const uint8_t *)W->w + (size_t)t * kt__lf_x_tile_bytes(kind, W->cols);
    for (int m = 0; m < M; m++) {
        pf = m == 0 ? pf : NULL;
        const uint8_t *a = (const uint8_t *)act[m];
        float out[4];
        if (kind == X40) /* each layout's tile compiled apart */
            x_tile(X40, tp, pf, nb, a, xs, out);
        else if (kind == X4K)
            x_tile(X4K, tp, pf, nb, a, xs, out);
        else if (kind == X6K)
            x_tile(X6K, tp, pf, nb, a, xs, out);
        else if (kind == X5K)
            x_tile(X5K, tp, pf, nb, a, xs, out);
        else if (kind == XNL)
            x_tile(XNL, tp, pf, nb, a, xs, out);
        else
            x_tile(X80, tp, pf, nb, a, xs, out);
        for (int r = 0; r < 4; r++)
            if (4 * t + r >= n0 && 4 * t + r < n1)
                C[(size_t)m * ldc + (4 * t + r - n0)] = out[r];
    }
}

/* The most tokens the woven tiles take (more: a tile at a time). */
#define WEAVE_MMAX 8

/* Tiles tl[0..NT) of W (NT 2..4, one from each of a call's streams) for the M
 * tokens into C's rows in [n0, n1), a group of each tile in turn, each tile's
 * groups read by load instructions of their own (the tile loop written out): a
 * load then meets its tile's groups a constant distance apart, as RAWINT4's loads
 * meet their quarter row's chunks, where one tile after another (or one group
 * code for all tiles) hands each load a jump at every turn. Token 0 reads the
 * groups from memory, tokens 1.. from L1 with their own code. Each tile sums its
 * groups as x_tile does, in the same order: the same bits. pf[i]: tile i's
 * prefetch address (NULL: none), as x_tile's. */
ALWAYS_INLINE void x_tiles_woven(const int kind, const int NT, const kt__wmat *W, const int *tl,
                                 const uint8_t *const *pf, int n0, int n1,
                                 const void *const *act, size_t xs, int M, float *C, int ldc)
{
    const int nb = W->cols / 32;
    const size_t tb = kt__lf_x_tile_bytes(kind, W->cols);
    const bool kx = kind == X4K || kind == X5K || kind == X6K;
    const uint8_t *tp[4];
    __m256 acc[4][WEAVE_MMAX][4]; /* [tile][token][row] (the K types: [0] only) */
    for (int i = 0; i < NT; i++) {
        tp[i] = (const uint8_t *)W->w + (size_t)tl[i] * tb;
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                acc[i][m][r] = _mm256_setzero_ps();
    }
/* one group of S at byte go, block b, of tile i for every token */
#define WOVEN_TILE(S, i)                                                                     \
    if ((i) < NT) {                                                                         \
        if (kx)                                                                             \
            kx_group(kind, S, tp[i], go, pf[i], b, nb, act[0], xs, &acc[i][0][0]);          \
        else                                                                                \
            x_group(kind, S, tp[i], go, pf[i], b, nb, act[0], xs, acc[i][0]);               \
        for (int m = 1; m < M; m++) {                                                       \
            const uint8_t *a = (const uint8_t *)act[m];                                     \
            if (kx)                                                                         \
                kx_group(kind, S, tp[i], go, NULL, b, nb, a, xs, &acc[i][m][0]);            \
            else                                                                            \
                x_group(kind, S, tp[i], go, NULL, b, nb, a, xs, acc[i][m]);                 \
        }                                                                                   \
    }
#define WOVEN_GROUP(S)                                                                       \
    do {                                                                                     \
        WOVEN_TILE(S, 0) WOVEN_TILE(S, 1) WOVEN_TILE(S, 2) WOVEN_TILE(S, 3)                  \
    } while (0);
    size_t go = 0;
    int b = 0;
    if (kx) {
        const size_t sb = kind == X6K ? 104 : kind == X5K ? 88 : 72;
        for (; b + 16 <= nb; b += 16, go += sb * 16)
            WOVEN_GROUP(4)
        if (nb - b >= 8) {
            WOVEN_GROUP(2)
            go += sb * 8;
        }
        for (int i = 0; i < NT; i++) /* the d lines after the groups */
            for (size_t o = go; pf[i] && o < tb; o += 64)
                _mm_prefetch((const char *)pf[i] + o, _MM_HINT_T1);
    } else {
        const int q8 = kind == X80;
        for (; b + 16 <= nb; b += 16) {
            WOVEN_GROUP(4)
            go += q8 ? kt__q80x_group_bytes(16) : kt__q40x_group_bytes(16);
        }
        if (nb - b >= 8) {
            WOVEN_GROUP(2)
            go += q8 ? kt__q80x_group_bytes(8) : kt__q40x_group_bytes(8), b += 8;
        }
        if (nb - b >= 4) {
            WOVEN_GROUP(1)
            go += q8 ? kt__q80x_group_bytes(4) : kt__q40x_group_bytes(4), b += 4;
        }
        if (nb > b)
            WOVEN_GROUP(1)
    }
#undef WOVEN_GROUP
#undef WOVEN_TILE
    for (int i = 0; i < NT; i++)
        for (int m = 0; m < M; m++) {
            float out[4];
            if (kx)
                _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(acc[i][m][0]),
                                              _mm256_extractf128_ps(acc[i][m][0], 1)));
            else
                sum4_store(acc[i][m][0], acc[i][m][1], acc[i][m][2], acc[i][m][3], out);
            for (int r = 0; r < 4; r++)
                if (4 * tl[i] + r >= n0 && 4 * tl[i] + r < n1)
                    C[(size_t)m * ldc + (4 * tl[i] + r - n0)] = out[r];
        }
}

/* x_tiles_woven of two tiles compiled apart for each layout (3 or 4 streams, which
 * read less than 2 both ways, take a tile at a time: less code). */
static void tiles_woven(const kt__wmat *W, const int *tl, const uint8_t *const *pf, int n0,
                        int n1, const void *const *act, size_t xs, int M, float *C, int ldc)
{
    switch (W->type) {
    case X40: x_tiles_woven(X40, 2, W, tl, pf, n0, n1, act, xs, M, C, ldc); break;
    case X4K: x_tiles_woven(X4K, 2, W, tl, pf, n0, n1, act, xs, M, C, ldc); break;
    case X6K: x_tiles_woven(X6K, 2, W, tl, pf, n0, n1, act, xs, M, C, ldc); break;
    case X5K: x_tiles_woven(X5K, 2, W, tl, pf, n0, n1, act, xs, M, C, ldc); break;
    case XNL: x_tiles_woven(XNL, 2, W, tl, pf, n0, n1, act, xs, M, C, ldc); break;
    default: x_tiles_woven(X80, 2, W, tl, pf, n0, n1, act, xs, M, C, ldc); break;
    }
}

void kt__lf_gemm_x_avx2(const kt__wmat *W, int n0, int n1, const void *const *act, size_t xs,
                        int M, float *C, int ldc)
{
    pthread_once(&x2_once, x2_init);
    const int t0 = n0 / 4, t1 = (n1 + 3) / 4;
    const int kind = W->type;
    const size_t tb = kt__lf_x_tile_bytes(W->type, W->cols), ahead = (size_t)x2_ahead;
    const uint8_t *start = (const uint8_t *)W->w + (size_t)t0 * tb;
    const size_t total = (size_t)(t1 - t0) * tb;
    const int S = x2_streams_for(kind), q = (t1 - t0) / S;
    if (S > 1 && q >= 2) {
        /* S streams side by side: stream s is tiles [t0 + s q, t0 + (s + 1) q), read
         * a tile of each in turn, each prefetched `ahead` bytes on, in its last
         * tiles the same part of the next call's stream s (its hint, split alike);
         * then the < S tiles left */
        const size_t sl = (size_t)q * tb;
        size_t o0 = x2_tail_w == start ? x2_tail_len : 0; /* started by the last call */
        int o0_streams = x2_tail_w == start ? x2_tail_streams : 0;
        x2_tail_w = NULL;
        for (int s = 0; s < S; s++)
            for (size_t o = s < o0_streams ? o0 : 0; o < ahead && o < sl; o += 64)
                _mm_prefetch((const char *)start + s * sl + o, _MM_HINT_T1);
        for (size_t o = (size_t)S * sl; ahead && o < total; o += 64)
            _mm_prefetch((const char *)start + o, _MM_HINT_T1);
        x2_region nx = x2_nohint ? (x2_region){NULL, 0} : x2_hint_take();
        size_t nq = nx.len / tb / (size_t)S, nsl = nq * tb; /* the next call's streams */
        int nS = nq >= 2 ? S : 1;
        if (nS == 1)
            nsl = nx.len;
        size_t nlen = nsl < ahead ? nsl : ahead, ndone = 0;
        /* one token only: 2 tokens woven read 0.44-0.61 of a read loop against
         * 0.57-0.64 a tile at a time (one Zen 3 core, 13:36, 2 rounds) */
        const bool weave = x2_weave && S == 2 && (M == 1 || x2_weave > 1) && M <= WEAVE_MMAX;
        for (int i = 0; i < q; i++) {
            size_t v = (size_t)i * tb + ahead, nto = 0;
            if (ahead && v + tb > sl) /* past the end: the next call's first bytes */
                nto = v + tb - sl < nlen ? v + tb - sl : nlen;
            const uint8_t *pfs[4];
            int tl[4];
            for (int s = 0; s < S; s++) {
                const uint8_t *base = start + s * sl, *pf = NULL;
                if (ahead && v + tb <= sl)
                    pf = base + v;
                else if (ahead && v < sl) /* the stream's end: the lines themselves */
                    for (size_t o = v; o < sl; o += 64)
                        _mm_prefetch((const char *)base + o, _MM_HINT_T1);
                if (s < nS)
                    for (size_t o = ndone; o < nto; o += 64)
                        _mm_prefetch((const char *)nx.w + (size_t)s * nsl + o, _MM_HINT_T1);
                pfs[s] = pf, tl[s] = t0 + s * q + i;
                if (!weave)
                    x_tile_tokens(kind, W, t0 + s * q + i, pf, n0, n1, act, xs, M, C, ldc);
            }
            if (weave)
                tiles_woven(W, tl, pfs, n0, n1, act, xs, M, C, ldc);
            ndone = nto > ndone ? nto : ndone;
        }
        for (int t = t0 + S * q; t < t1; t++)
            x_tile_tokens(kind, W, t, NULL, n0, n1, act, xs, M, C, ldc);
        if (ndone) {
            x2_tail_w = nx.w;
            x2_tail_len = ndone;
            x2_tail_streams = nS;
        }
        return;
    }
    x2_region nx = {NULL, 0};
    if (!x2_nohint) {
        /* the first `ahead` bytes at once, less what the last call's tail started */
        size_t o = x2_tail_w == start ? x2_tail_len : 0;
        x2_tail_w = NULL;
        for (; ahead && o < ahead && o < total; o += 64)
            _mm_prefetch((const char *)start + o, _MM_HINT_T1);
        nx = x2_hint_take();
        nx.len = nx.len < ahead ? nx.len : ahead;
    }
    size_t ndone = 0; /* bytes of nx started */
    for (int t = t0; t < t1; t++) {
        const uint8_t *pf = NULL;
        /* a tile prefetches [v, v + tb) of the stream: this call's bytes, then nx's */
        size_t v = (size_t)(t - t0) * tb + ahead;
        if (ahead && (v + tb <= total || x2_nohint)) {
            pf = start + v;
        } else if (ahead && v < total) { /* the end: the lines themselves */
            for (size_t o = v; o < total; o += 64)
                _mm_prefetch((const char *)start + o, _MM_HINT_T1);
            for (; ndone < v + tb - total && ndone < nx.len; ndone += 64)
                _mm_prefetch((const char *)nx.w + ndone, _MM_HINT_T1);
        } else if (ahead && v - total < nx.len) {
            for (; ndone < v - total; ndone += 64) /* a call shorter than ahead */
                _mm_prefetch((const char *)nx.w + ndone, _MM_HINT_T1);
            pf = nx.w + (v - total);
            ndone = v - total + tb < nx.len ? v - total + tb : nx.len;
        }
        x_tile_tokens(kind, W, t, pf, n0, n1, act, xs, M, C, ldc);
    }
    if (ndone) {
        x2_tail_w = nx.w;
        x2_tail_len = ndone;
        x2_tail_streams = 1;
    }
}
