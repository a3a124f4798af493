/* LLAMAFILE prefill GEMM on AVX2 without VNNI (Zen 3, Haswell..Ice Lake client):
 * Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_0, IQ4_NL, IQ4_XS, Q3_K and Q2_K: every
 * block type but the float ones. Each call repacks 64 rows x 512 inputs at a time into int8
 * panels (8 rows per register, 4 inputs per 32-bit lane; Q4_0 / Q4_1 / Q4_K codes unsigned
 * 0..15, Q5_0's / Q5_1's / Q5_K's 0..31, Q3_K's 0..7, Q2_K's 0..3, Q8_0's as stored,
 * IQ4_NL's / IQ4_XS's table values)
 * and runs a register-blocked GEMM of 16 rows x 3 tokens (Q8_0, IQ4_NL: 2) over them; the
 * activation is the token's Q8_0 / Q8_K codes as quantized (Q8_K codes are -127..127).
 *
 *   per block of 32 inputs b, row r, token t (a: the token's s8 codes):
 *     p16 = sum_{j < 8} vpmaddubsw(w[r][4j..4j+3], a[t][4j..4j+3])  int16 pairs
 *     i   = vpmaddwd(p16, 1) + off[t][b]                              int32, exact
 *     C[t][r] += float(i) * (s[r][b] * da[t][b])        (+ m[r][b] * dsum[t][b]: Q4_K)
 *
 * A pair of products is at most 2 x 15 x 127 = 3810 and a block's 8 pairs 30480,
 * so the int16 sums neither saturate nor wrap and i is ggml's integer block sum.
 * Q4_0's codes are w + 8: off = -8 x (the token's block code sum). Q4_K: s = d x
 * scale, m = -dmin x min per row and block, dsum = da x (the block's code sum).
 * Q5_K: as Q4_K with the codes' 5th bit from qh; a block's 8 pairs could reach
 * 8 x 2 x 31 x 127 = 62992, so each 4 steps go through vpmaddwd:
 *     i = vpmaddwd(sum_{j < 4} p_j, 1) + vpmaddwd(sum_{j >= 4} p_j, 1)
 * Q5_0: Q4_0's steps on codes w + 16 (0..31, the 5th bit from qh) widened each 4 steps
 * as Q5_K's; off = -16 x (the token's block code sum). Q4_1 / Q5_1 (Q8_1 activations):
 * Q4_0's / Q5_0's steps, s = d, and Q4_K's float minimum term with m[r][b] = the block's
 * f16 m and dsum[t][b] = the Q8_1 block's s (d x its code sum).
 * Q8_0: p16 cannot hold more than one step (2 x 128 x 127 per pair), so each step
 * goes through vpmaddwd into int32 sums, and the signed weights take ggml's sign
 * trick: vpmaddubsw(|w|, sign(a, w)) = w . a per pair. IQ4_NL: Q8_0's steps on the
 * nibbles' values (-127..113, vpshufb from the 16-entry table), Q4_0's scales.
 * Q6_K: codes u = q + 32 (0..63), a scale per 16 inputs; a pair is at most 2 x 63 x
 * 127 = 16002, so two steps sum in int16 and vpmaddwd by the rows' (sc, sc) pairs
 * widens them, scaled (the ints of ggml's Q6_K vec_dot):
 *     i = sum_h vpmaddwd(p16_h, sc_h) + vpmaddwd((-32 sc0, -32 sc1), (bsum0, bsum1)[t])
 *     C[t][r] += float(i) * (d[r] * da[t])
 * IQ4_XS (panel_tile_sb): IQ4_NL's packed values and signed steps, Q8_K activations, an
 * integer scale s = ls - 32 (-32..31) per block that the widening vpmaddwd takes in place
 * of IQ4_NL's ones; a step's pairs are at most 2 x 127 x 127 = 32258 (int16), scaled
 * 2 x 32258 x 32 per lane, so a superblock's 64 steps stay under 1.33e8 in int32 and
 * the float update comes once per superblock (d and the token's d are the superblock's):
 *     isum = sum_{b < 8, j < 8} vpmaddwd(vpmaddubsw(|w|, sign(a, w)), (s, s)[r][b])
 *     C[t][r] += float(isum) * (d[r] * da[t])
 * Q3_K (the same tile): codes u = q + 4 (0..7), a 6-bit scale sc (-32..31) per 16 inputs.
 * A pair is at most 2 x 7 x 127 = 1778, so the 4 steps of a scale sum in int16 (7112),
 * widened by the rows' (sc, sc) pairs (at most 2 x 7112 x 32 a lane); the -4 offsets come
 * from the token's Q8_K bsums at the superblock's end (16 of at most 2 x 128 x 2032):
 *     isum = sum_{b, h < 2} vpmaddwd(sum_{j < 4} p16_{4h+j}, (sc_h, sc_h))
 *          + sum_b vpmaddwd((-4 sc0, -4 sc1)[r][b], (bsum0, bsum1)[t][b])   < 1.2e7
 * Q2_K: Q3_K's steps on codes 0..3 with 4-bit scales (a scale's 4 steps at most 3048); its
 * 4-bit minimums m take the offsets' place with their own float scale, dmin:
 *     imin = sum_b vpmaddwd((-m0, -m1)[r][b], (bsum0, bsum1)[t][b])          < 5e5
 *     C[t][r] += float(isum) * (d[r] * da[t]) + float(imin) * (dmin[r] * da[t])
 * Only the float summation order differs from the ggml vec_dots. It replaces one
 * vec_dot per (row, token), which read every weight block once per token.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "moe_kernels.h"
#include "ref/ggml_quants.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define P2_KS 512  /* inputs per repack segment */
#define P2_ROWS 64 /* rows per repack */
#define P2_NB (P2_KS / 32)
#define P2_TOK 256 /* tokens per call at most */
#define P2_S6 96   /* Q6_K: bytes of int16 pairs per group of 8 rows and block of 32 */

/* the 16 bytes at p[r] + o of rows r = 0..7 as 4 registers: lane r of u[j] is
 * row r's bytes 4j..4j+3 */
ALWAYS_INLINE void rows8_dwords4(const uint8_t *const *p, size_t o, __m256i u[4])
{
    __m256i z[4];
    for (int q = 0; q < 4; q++) /* z[q]: rows q (low half), q + 4 (high) */
        z[q] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[q] + o))),
            _mm_loadu_si128((const __m128i *)(p[q + 4] + o)), 1);
    __m256i t01l = _mm256_unpacklo_epi32(z[0], z[1]), t01h = _mm256_unpackhi_epi32(z[0], z[1]);
    __m256i t23l = _mm256_unpacklo_epi32(z[2], z[3]), t23h = _mm256_unpackhi_epi32(z[2], z[3]);
    u[0] = _mm256_unpacklo_epi64(t01l, t23l);
    u[1] = _mm256_unpackhi_epi64(t01l, t23l);
    u[2] = _mm256_unpacklo_epi64(t01h, t23h);
    u[3] = _mm256_unpackhi_epi64(t01h, t23h);
}

/* the 32 bytes at p[r] + o of rows r = 0..7: lane r of u[j] is row r's bytes
 * 4j..4j+3 (an 8 x 8 transpose of dwords) */
ALWAYS_INLINE void rows8_dwords8(const uint8_t *const *p, size_t o, __m256i u[8])
{
    __m256i lo[4], hi[4];
    rows8_dwords4(p, o, lo);
    rows8_dwords4(p, o + 16, hi);
    for (int j = 0; j < 4; j++)
        u[j] = lo[j], u[4 + j] = hi[j];
}

ALWAYS_INLINE int u16_at(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* the f16 at p[r] + o of rows r = 0..7 as floats */
ALWAYS_INLINE __m256 rows8_f16(const uint8_t *const *p, size_t o)
{
    __m128i h = _mm_cvtsi32_si128(u16_at(p[0] + o));
    h = _mm_insert_epi16(h, u16_at(p[1] + o), 1);
    h = _mm_insert_epi16(h, u16_at(p[2] + o), 2);
    h = _mm_insert_epi16(h, u16_at(p[3] + o), 3);
    h = _mm_insert_epi16(h, u16_at(p[4] + o), 4);
    h = _mm_insert_epi16(h, u16_at(p[5] + o), 5);
    h = _mm_insert_epi16(h, u16_at(p[6] + o), 6);
    h = _mm_insert_epi16(h, u16_at(p[7] + o), 7);
    return _mm256_cvtph_ps(h);
}

/* Q4_K's 8 6-bit scales and minimums of a block (12 bytes at s), one byte each */
ALWAYS_INLINE void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *mn)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = (u0 & 0x3f3f3f3fu) | (uint64_t)sc_hi << 32;
    *mn = (u1 & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
}

/* Q3_K's scale j (of 16, 6 bits, -32..31): the low nibble in byte j (j < 8) or the high
 * one of byte j - 8, the top 2 bits in byte 8 + j % 4 bits 2 (j / 4) */
ALWAYS_INLINE int q3k_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    return (lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}

/* v's words shifted so that each byte's bit c (< 8) is at its bit 4; the bits that
 * cross from the word's other byte land below bit 4 (<<) or above it (>>) */
ALWAYS_INLINE __m256i bit_to_4(__m256i v, int c)
{
    return c <= 4 ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(4 - c))
                  : _mm256_srl_epi16(v, _mm_cvtsi32_si128(c - 4));
}

/* out[8 s + r] = v[r][s]: an 8 x 8 transpose */
ALWAYS_INLINE void transpose8_store(const __m256 v[8], float *out)
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 2; h++) {
            u[4 * i + h] = _mm256_shuffle_ps(t[4 * i + h], t[4 * i + 2 + h], 0x44);
            u[4 * i + 2 + h] = _mm256_shuffle_ps(t[4 * i + h], t[4 * i + 2 + h], 0xee);
        }
    /* u[q]: rows 0-3 (q < 4) or 4-7 of columns {c, c + 4}, c = (0, 2, 1, 3)[q % 4] */
    static const int col[4] = {0, 2, 1, 3};
    for (int q = 0; q < 4; q++) {
        int c = col[q];
        _mm256_storeu_ps(out + 8 * c, _mm256_permute2f128_ps(u[q], u[4 + q], 0x20));
        _mm256_storeu_ps(out + 8 * (c + 4), _mm256_permute2f128_ps(u[q], u[4 + q], 0x31));
    }
}

/* The 16 nibble bytes at p[r] + o of rows r = 0..7 (a Q4_0 / IQ4_NL block's qs: byte i
 * holds input i in its low nibble, input 16 + i in its high one) as the 8 steps of a
 * panel block at cb: step j < 4 the low nibbles of bytes 4j.., step 4 + j the high ones;
 * nl: the nibbles' IQ4_NL values, signed (Q8_0's steps), else the codes 0..15 */
ALWAYS_INLINE void pack_nibbles(const uint8_t *const *p, size_t o, bool nl, uint8_t *cb)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m256i values =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kt__iq4nl_values));
    __m256i u[4];
    rows8_dwords4(p, o, u);
    for (int j = 0; j < 4; j++) {
        __m256i lo = _mm256_and_si256(u[j], low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(u[j], 4), low4);
        if (nl) {
            lo = _mm256_shuffle_epi8(values, lo);
            hi = _mm256_shuffle_epi8(values, hi);
        }
        _mm256_storeu_si256((__m256i *)(cb + 32 * j), lo);
        _mm256_storeu_si256((__m256i *)(cb + 32 * (j + 4)), hi);
    }
}

/* Or the 5th bits of Q5_0 / Q5_1 blocks (the 32-bit qh at p[r] + o of rows r = 0..7: input
 * i's in bit i) into the panel block at cb: step s (inputs 4s..4s+3 of the panel order,
 * 16 + 4 (s - 4) for s >= 4) takes qh bits 4s..4s+3, spread to its lane's 4 bytes by a
 * multiply (copies of the 4 bits at bits 0, 7, 14, 21: bit i lands on bit 8 i) */
ALWAYS_INLINE void or_bit4(const uint8_t *const *p, size_t o, uint8_t *cb)
{
    const __m256i low4d = _mm256_set1_epi32(15), spread = _mm256_set1_epi32(0x00204081);
    const __m256i bit0 = _mm256_set1_epi8(1);
    uint32_t h[8];
    for (int r = 0; r < 8; r++)
        memcpy(&h[r], p[r] + o, 4);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)h);
    for (int j = 0; j < 8; j++) {
        __m256i x = _mm256_and_si256(_mm256_srli_epi32(qh, 4 * j), low4d);
        __m256i hb = _mm256_slli_epi32(_mm256_and_si256(_mm256_mullo_epi32(x, spread), bit0), 4);
        __m256i *c = (__m256i *)(cb + 32 * j);
        _mm256_storeu_si256(c, _mm256_or_si256(_mm256_loadu_si256(c), hb));
    }
}

/* Panels of rows [n, n + nr) over blocks [kb, kb + nb) of 32 (the K types, IQ4_XS: kb,
 * nb multiples of 8): group g of 8 rows at codes + g nb 256, block b's step j (4
 * inputs) at + 256 b + 32 j; scales (Q6_K, IQ4_XS: d; Q4_K's minimum terms in off) at
 * + 8 (g nb + b); Q6_K's [8 rows] (sc0, sc0), (sc1, sc1), (-32 sc0, -32 sc1) int16 pairs
 * at sc6 + P2_S6 (g nb + b), Q3_K's with -4 for -32, Q2_K's with (-m0, -m1) (its dmin in
 * off), IQ4_XS's (s, s) there. */
static void panel_pack(int type, const uint8_t *W, size_t wrow, int n, int nr, int kb, int nb,
                       uint8_t *codes, float *scale, float *off, uint8_t *sc6)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int g = 0; g * 8 < nr; g++) {
        const uint8_t *p[8];
        for (int r = 0; r < 8; r++) /* ragged: repeat the last row */
            p[r] = W + (size_t)(n + (8 * g + r < nr ? 8 * g + r : nr - 1)) * wrow;
        uint8_t *cg = codes + (size_t)g * nb * 256;
        float *sg = scale + (size_t)g * nb * 8, *og = off + (size_t)g * nb * 8;
        if (type == KT_TYPE_Q4_0 || type == KT_TYPE_IQ4_NL) {
            for (int b = 0; b < nb; b++) {
                size_t o = (size_t)(kb + b) * sizeof(kt_block_q4_0);
                _mm256_storeu_ps(sg + 8 * b, rows8_f16(p, o));
                pack_nibbles(p, o + 2, type == KT_TYPE_IQ4_NL, cg + (size_t)b * 256);
            }
        } else if (type == KT_TYPE_Q5_0) { /* Q4_0's nibbles at qs, the 5th bits in qh */
            for (int b = 0; b < nb; b++) {
                size_t o = (size_t)(kb + b) * sizeof(kt_block_q5_0);
                _mm256_storeu_ps(sg + 8 * b, rows8_f16(p, o));
                uint8_t *cb = cg + (size_t)b * 256;
                pack_nibbles(p, o + offsetof(kt_block_q5_0, qs), false, cb);
                or_bit4(p, o + offsetof(kt_block_q5_0, qh), cb);
            }
        } else if (type == KT_TYPE_Q4_1 || type == KT_TYPE_Q5_1) {
            /* Q4_0's / Q5_0's codes, the f16 d as the scale, the f16 minimum m in off */
            const bool q51 = type == KT_TYPE_Q5_1;
            const size_t bbytes = q51 ? sizeof(kt_block_q5_1) : sizeof(kt_block_q4_1);
            const size_t qs = q51 ? offsetof(kt_block_q5_1, qs) : offsetof(kt_block_q4_1, qs);
            for (int b = 0; b < nb; b++) {
                size_t o = (size_t)(kb + b) * bbytes;
                _mm256_storeu_ps(sg + 8 * b, rows8_f16(p, o));
                _mm256_storeu_ps(og + 8 * b, rows8_f16(p, o + offsetof(kt_block_q4_1, m)));
                uint8_t *cb = cg + (size_t)b * 256;
                pack_nibbles(p, o + qs, false, cb);
                if (q51)
                    or_bit4(p, o + offsetof(kt_block_q5_1, qh), cb);
            }
        } else if (type == KT_TYPE_IQ4_XS) {
            /* block c of a superblock: IQ4_NL's 16 nibble bytes at qs + 16 c, its 6-bit
             * scale ls (low 4 bits in scales_l, top 2 in scales_h) as s = ls - 32 */
            uint8_t *s6g = sc6 + (size_t)g * nb * P2_S6;
            for (int b = 0; b < nb; b++) {
                const int c = (kb + b) % 8;
                size_t o = (size_t)((kb + b) / 8) * sizeof(kt_block_iq4_xs);
                _mm256_storeu_ps(sg + 8 * b, rows8_f16(p, o));
                pack_nibbles(p, o + offsetof(kt_block_iq4_xs, qs) + 16 * (size_t)c, true,
                             cg + (size_t)b * 256);
                int32_t s2[8]; /* [8 rows] (s, s) int16 pairs */
                for (int r = 0; r < 8; r++) {
                    const kt_block_iq4_xs *x = (const kt_block_iq4_xs *)(const void *)(p[r] + o);
                    int ls = ((x->scales_l[c / 2] >> (4 * (c % 2))) & 15) |
                             (((x->scales_h >> (2 * c)) & 3) << 4);
                    s2[r] = (int32_t)((uint32_t)(uint16_t)(ls - 32) * 0x10001u);
                }
                memcpy(s6g + (size_t)b * P2_S6, s2, 32);
            }
        } else if (type == KT_TYPE_Q3_K || type == KT_TYPE_Q2_K) {
            /* block c of 32 in a 256 (h = c / 4, s = c % 4): input l's 2 low bits in
             * qs[32 h + l] bits 2 s; Q3_K: its bit 2 in hmask[l] bit c, codes u = q + 4
             * (0..7); Q2_K: codes 0..3, scale and minimum nibbles of the 16 inputs in
             * scales[2 c + i] */
            const bool k3 = type == KT_TYPE_Q3_K;
            const size_t bbytes = k3 ? sizeof(kt_block_q3_K) : sizeof(kt_block_q2_K);
            const size_t qs = k3 ? offsetof(kt_block_q3_K, qs) : offsetof(kt_block_q2_K, qs);
            const size_t d = k3 ? offsetof(kt_block_q3_K, d) : offsetof(kt_block_q2_K, d);
            const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
            uint8_t *s6g = sc6 + (size_t)g * nb * P2_S6;
            for (int b = 0; b < nb; b++) {
                const int c = (kb + b) % 8, h = c / 4, sq = c % 4;
                size_t o = (size_t)((kb + b) / 8) * bbytes;
                __m256i q2[8], hm[8];
                rows8_dwords8(p, o + qs + 32 * h, q2);
                if (k3)
                    rows8_dwords8(p, o + offsetof(kt_block_q3_K, hmask), hm);
                const __m128i qsh = _mm_cvtsi32_si128(2 * sq);
                const __m256i bitc = _mm256_set1_epi8((char)(1 << c));
                uint8_t *cb = cg + (size_t)b * 256;
                for (int j = 0; j < 8; j++) {
                    __m256i u = _mm256_and_si256(_mm256_srl_epi16(q2[j], qsh), m3);
                    if (k3)
                        u = _mm256_or_si256(u, _mm256_and_si256(_mm256_cmpeq_epi8(
                                                   _mm256_and_si256(hm[j], bitc), bitc),
                                               four));
                    _mm256_storeu_si256((__m256i *)(cb + 32 * j), u);
                }
                int32_t s0[8], s1[8], so[8];
                float dm[8];
                for (int r = 0; r < 8; r++) {
                    int a, e, oa, oe; /* the scales, and the offsets' multipliers */
                    if (k3) {
                        const kt_block_q3_K *x = (const kt_block_q3_K *)(const void *)(p[r] + o);
                        a = q3k_scale(x->scales, 2 * c), e = q3k_scale(x->scales, 2 * c + 1);
                        oa = -4 * a, oe = -4 * e;
                    } else {
                        const kt_block_q2_K *x = (const kt_block_q2_K *)(const void *)(p[r] + o);
                        a = x->scales[2 * c] & 15, e = x->scales[2 * c + 1] & 15;
                        oa = -(x->scales[2 * c] >> 4), oe = -(x->scales[2 * c + 1] >> 4);
                        dm[r] = _cvtsh_ss(x->dmin);
                    }
                    s0[r] = (int32_t)((uint32_t)(uint16_t)a * 0x10001u);
                    s1[r] = (int32_t)((uint32_t)(uint16_t)e * 0x10001u);
                    so[r] = (int32_t)((uint32_t)(uint16_t)oa | (uint32_t)(uint16_t)oe << 16);
                }
                if (!k3)
                    memcpy(og + 8 * b, dm, 32);
                _mm256_storeu_ps(sg + 8 * b, rows8_f16(p, o + d));
                uint8_t *sb = s6g + (size_t)b * P2_S6;
                memcpy(sb, s0, 32);
                memcpy(sb + 32, s1, 32);
                memcpy(sb + 64, so, 32);
            }
        } else if (type == KT_TYPE_Q8_0) { /* qs byte i: input i */
            for (int b = 0; b < nb; b++) {
                size_t o = (size_t)(kb + b) * sizeof(kt_block_q8_0);
                _mm256_storeu_ps(sg + 8 * b, rows8_f16(p, o));
                __m256i u[8];
                rows8_dwords8(p, o + 2, u);
                uint8_t *cb = cg + (size_t)b * 256;
                for (int j = 0; j < 8; j++)
                    _mm256_storeu_si256((__m256i *)(cb + 32 * j), u[j]);
            }
        } else if (type == KT_TYPE_Q6_K) {
            /* block c of 32 in a 256 (half h = c / 4, quarter s = c % 4): input l's low 4
             * bits in ql[64 h + 32 (s & 1) + l] (high nibble when s >= 2), its top 2 in
             * qh[32 h + l] bits 2 s */
            const __m256i m3 = _mm256_set1_epi8(3);
            uint8_t *s6g = sc6 + (size_t)g * nb * P2_S6;
            for (int b = 0; b < nb; b++) {
                const int c = (kb + b) % 8, h = c / 4, sq = c % 4;
                size_t o = (size_t)((kb + b) / 8) * sizeof(kt_block_q6_K);
                __m256i ql[8], qh[8];
                rows8_dwords8(p, o + offsetof(kt_block_q6_K, ql) + 64 * h + 32 * (sq & 1), ql);
                rows8_dwords8(p, o + offsetof(kt_block_q6_K, qh) + 32 * h, qh);
                const __m128i lsh = _mm_cvtsi32_si128(4 * (sq >> 1));
                const __m128i hsh = _mm_cvtsi32_si128(2 * sq);
                uint8_t *cb = cg + (size_t)b * 256;
                for (int j = 0; j < 8; j++) {
                    __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql[j], lsh), low4);
                    __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh[j], hsh), m3);
                    _mm256_storeu_si256((__m256i *)(cb + 32 * j),
                                        _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
                }
                int32_t s0[8], s1[8], so[8];
                float dr[8];
                for (int r = 0; r < 8; r++) {
                    const kt_block_q6_K *x = (const kt_block_q6_K *)(const void *)(p[r] + o);
                    int a = x->scales[2 * c], e = x->scales[2 * c + 1];
                    s0[r] = (int32_t)((uint32_t)(uint16_t)a * 0x10001u);
                    s1[r] = (int32_t)((uint32_t)(uint16_t)e * 0x10001u);
                    so[r] = (int32_t)((uint32_t)(uint16_t)(-32 * a) |
                                      (uint32_t)(uint16_t)(-32 * e) << 16);
                    dr[r] = _cvtsh_ss(x->d);
                }
                uint8_t *sb = s6g + (size_t)b * P2_S6;
                memcpy(sb, s0, 32);
                memcpy(sb + 32, s1, 32);
                memcpy(sb + 64, so, 32);
                memcpy(sg + 8 * b, dr, 32);
            }
        } else { /* Q4_K, Q5_K: qs bytes 32i..32i+31: sub-block 2i (low nibbles), 2i + 1
                  * (high); Q5_K: bit c of qh[l] is sub-block c's input l's bit 4 */
            const bool k5 = type == KT_TYPE_Q5_K;
            const size_t bbytes = k5 ? sizeof(kt_block_q5_K) : sizeof(kt_block_q4_K);
            const size_t qs = k5 ? offsetof(kt_block_q5_K, qs) : offsetof(kt_block_q4_K, qs);
            const __m256i bit4 = _mm256_set1_epi8(16);
            for (int b = 0; b < nb; b += 8) {
                size_t o = (size_t)((kb + b) / 8) * bbytes;
                __m256i qh[8] = {0};
                if (k5)
                    rows8_dwords8(p, o + offsetof(kt_block_q5_K, qh), qh);
                for (int i = 0; i < 4; i++) {
                    __m256i u[8];
                    rows8_dwords8(p, o + qs + 32 * (size_t)i, u);
                    uint8_t *cb = cg + (size_t)(b + 2 * i) * 256;
                    for (int j = 0; j < 8; j++) {
                        __m256i lo = _mm256_and_si256(u[j], low4);
                        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(u[j], 4), low4);
                        if (k5) {
                            lo = _mm256_or_si256(lo, _mm256_and_si256(bit_to_4(qh[j], 2 * i), bit4));
                            hi = _mm256_or_si256(hi,
                                                 _mm256_and_si256(bit_to_4(qh[j], 2 * i + 1), bit4));
                        }
                        _mm256_storeu_si256((__m256i *)(cb + 32 * j), lo);
                        _mm256_storeu_si256((__m256i *)(cb + 256 + 32 * j), hi);
                    }
                }
                __m256 vs[8], vm[8]; /* row r: d x scale, -dmin x min over the 8 blocks */
                for (int r = 0; r < 8; r++) { /* d, dmin, scales: the same in Q5_K */
                    const kt_block_q4_K *x = (const kt_block_q4_K *)(const void *)(p[r] + o);
                    uint64_t s8, m8;
                    k4_scales(x->scales, &s8, &m8);
                    vs[r] = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(x->d)),
                                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                              _mm_cvtsi64_si128((long long)s8))));
                    vm[r] = _mm256_mul_ps(_mm256_set1_ps(-_cvtsh_ss(x->dmin)),
                                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                              _mm_cvtsi64_si128((long long)m8))));
                }
                transpose8_store(vs, sg + 8 * b);
                transpose8_store(vm, og + 8 * b);
            }
        }
    }
}

/* Per token and block of the segment: Q4_0 / Q5_0 the offset -8 x (code sum) and the
 * scale; Q8_0 the scale; Q4_K the Q8_K block's d and d x (the 32 codes' sum, from
 * bsums); Q6_K its d and the block's two bsums as one int32 of int16s. What the tiles
 * read when the activation rows bring no such arrays (tok_arrays). */
static void token_prep(int type, const void *const *act, int M, int kb, int nb, int32_t *toff,
                       float *td, float *tds)
{
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int m = 0; m < M; m++) {
        for (int b = 0; b < nb; b++) {
            int k = kb + b;
            if (type == KT_TYPE_Q8_0 || type == KT_TYPE_IQ4_NL) {
                const kt_block_q8_0 *y = (const kt_block_q8_0 *)act[m] + k;
                toff[m * P2_NB + b] = 0;
                td[m * P2_NB + b] = _cvtsh_ss(y->d);
            } else if (type == KT_TYPE_Q4_0 || type == KT_TYPE_Q5_0) {
                const kt_block_q8_0 *y = (const kt_block_q8_0 *)act[m] + k;
                __m256i s = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)y->qs)),
                    ones16);
                __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s),
                                          _mm256_extracti128_si256(s, 1));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
                toff[m * P2_NB + b] = -8 * _mm_cvtsi128_si32(h); /* Q5_0: doubled in the tile */
                td[m * P2_NB + b] = _cvtsh_ss(y->d);
            } else if (type == KT_TYPE_Q6_K || type == KT_TYPE_Q3_K || type == KT_TYPE_Q2_K) {
                const kt_block_q8_K *y = (const kt_block_q8_K *)act[m] + k / 8;
                memcpy(&toff[m * P2_NB + b], &y->bsums[2 * (k % 8)], 4);
                td[m * P2_NB + b] = y->d;
            } else if (type == KT_TYPE_IQ4_XS) {
                td[m * P2_NB + b] = ((const kt_block_q8_K *)act[m])[k / 8].d;
            } else if (type == KT_TYPE_Q4_1 || type == KT_TYPE_Q5_1) { /* Q8_1: s = d x sum */
                const kt_block_q8_1 *y = (const kt_block_q8_1 *)act[m] + k;
                td[m * P2_NB + b] = _cvtsh_ss(y->d);
                tds[m * P2_NB + b] = _cvtsh_ss(y->s);
            } else {
                const kt_block_q8_K *y = (const kt_block_q8_K *)act[m] + k / 8;
                toff[m * P2_NB + b] = 0;
                td[m * P2_NB + b] = y->d;
                tds[m * P2_NB + b] =
                    y->d * (float)(y->bsums[2 * (k % 8)] + y->bsums[2 * (k % 8) + 1]);
            }
        }
    }
}

/* The token's codes of block k (of 32 inputs): Q8_0 block k, or the 32 at 32 (k % 8)
 * in Q8_K block k / 8. */
enum { P2_Q40, P2_Q4K, P2_Q80, P2_Q6K, P2_Q5K, P2_XS, P2_Q3K, P2_Q2K, P2_Q50, P2_Q41, P2_Q51 };

ALWAYS_INLINE const int8_t *block_codes(const bool k4, const bool q81, const void *act, int k)
{
    if (k4)
        return ((const kt_block_q8_K *)act)[k / 8].qs + 32 * (k % 8);
    if (q81)
        return ((const kt_block_q8_1 *)act)[k].qs;
    return ((const kt_block_q8_0 *)act)[k].qs;
}

/* A tile's tokens' numbers per block b of the segment (t < 3): td[t][b] the activation
 * block's d; tds[t][b] d x its code sum (Q4_K, Q5_K; Q4_1 / Q5_1: the Q8_1 block's s); the
 * int32 offset tok_off(ta, t, b) (Q4_0 / Q5_0: -8 x the code sum; Q6_K, Q3_K, Q2_K: the
 * block's two Q8_K bsums as int16s), at tof[t] + 4 (b / 8 tstride + b % 8): tstride 8 in
 * flat arrays, 73 in the Q8_K blocks' own bsums (292 bytes a block). From the activation
 * rows' arrays (quantized once per token) where they hold them, else token_prep's. */
typedef struct tok_arrays {
    const uint8_t *tof[3];
    const float *td[3], *tds[3];
    int tstride;
} tok_arrays;

ALWAYS_INLINE int32_t tok_off(const tok_arrays *ta, int t, int b)
{
    int32_t v;
    memcpy(&v, ta->tof[t] + 4 * ((size_t)(b / 8) * ta->tstride + b % 8), 4);
    return v;
}

/* C[t][8 g + r] (+)= accf[g][t] lane r, for the nv[g] valid rows of group g */
ALWAYS_INLINE void panel_store(const int G, const int MT, __m256 accf[2][4], float *C, int ldc,
                               const int nv[2], bool first)
{
    #pragma GCC unroll 2
    for (int g = 0; g < G; g++) {
        __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(nv[g]),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++) {
            float *c = C + (size_t)t * ldc + 8 * g;
            __m256 v = accf[g][t];
            if (nv[g] == 8) {
                if (!first)
                    v = _mm256_add_ps(v, _mm256_loadu_ps(c));
                _mm256_storeu_ps(c, v);
            } else {
                if (!first)
                    v = _mm256_add_ps(v, _mm256_maskload_ps(c, keep));
                _mm256_maskstore_ps(c, keep, v);
            }
        }
    }
}

/* C[t][16 g' + r] (+)= the tile of G groups x MT tokens over the segment's nb
 * blocks. nv: valid rows of each group (8 but in a ragged last group). */
ALWAYS_INLINE void panel_tile(const int mode, const int G, const int MT, const uint8_t *codes,
                              const float *scale, const float *off, const uint8_t *sc6, int nb,
                              int kb, const void *const *act, const tok_arrays *ta,
                              float *C, int ldc, const int nv[2], bool first)
{
    const size_t gstride = (size_t)nb * 256, sstride = (size_t)nb * 8;
    const bool k5 = mode == P2_Q5K, k4 = mode == P2_Q4K || k5, q8 = mode == P2_Q80,
               q6 = mode == P2_Q6K, q81 = mode == P2_Q41 || mode == P2_Q51,
               w5 = k5 || mode == P2_Q50 || mode == P2_Q51; /* w5: codes to 31 */
    const size_t s6stride = (size_t)nb * P2_S6;
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 accf[2][4];
    #pragma GCC unroll 2
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++)
            accf[g][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const int8_t *ap[4];
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++)
            ap[t] = block_codes(k4 || q6, q81, act[t], kb + b);
        const uint8_t *cb = codes + (size_t)b * 256;
        __m256i p16[2][4], i6[2][4]; /* i6: Q6_K's scaled sums, Q5_K's first 4 steps */
        const uint8_t *s6b = sc6 + (size_t)b * P2_S6;
        /* the hot loop: 8 steps of 4 inputs */
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i w0 = _mm256_loadu_si256((const __m256i *)(cb + 32 * j));
            __m256i w1 = G == 2 ? _mm256_loadu_si256((const __m256i *)(cb + gstride + 32 * j))
                                : w0;
            for (int t = 0; t < MT && q8; t++) {
                int32_t a4;
                memcpy(&a4, ap[t] + 4 * j, 4);
                __m256i a = _mm256_set1_epi32(a4);
                #pragma GCC unroll 2
                for (int g = 0; g < G; g++) {
                    __m256i w = g ? w1 : w0;
                    __m256i q = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w)),
                        ones16);
                    p16[g][t] = j ? _mm256_add_epi32(p16[g][t], q) : q; /* int32 here */
                    __asm__("" : "+x"(p16[g][t]));
                }
            }
            for (int t = 0; t < MT && q6; t++) { /* two steps in int16, then scaled */
                int32_t a4;
                memcpy(&a4, ap[t] + 4 * j, 4);
                __m256i a = _mm256_set1_epi32(a4);
                #pragma GCC unroll 2
                for (int g = 0; g < G; g++) {
                    __m256i q = _mm256_maddubs_epi16(g ? w1 : w0, a);
                    if (j % 2 == 0) {
                        p16[g][t] = q;
                        continue;
                    }
                    __m256i i = _mm256_madd_epi16(
                        _mm256_add_epi16(p16[g][t], q),
                        _mm256_loadu_si256((const __m256i *)(s6b + g * s6stride + 32 * (j / 4))));
                    i6[g][t] = j == 1 ? i : _mm256_add_epi32(i6[g][t], i);
                    __asm__("" : "+x"(i6[g][t]));
                }
            }
            if (q6) /* (a loop with no trip drops gcc's unroll pragma with a warning) */
                continue;
            /* Q5_K's, Q5_0's codes reach 31: 4 steps fit in int16 (4 x 2 x 31 x 127 = 31496) */
            const bool restart = w5 ? j % 4 == 0 : j == 0;
            for (int t = 0; t < MT && !q8; t++) {
                int32_t a4;
                memcpy(&a4, ap[t] + 4 * j, 4);
                __m256i a = _mm256_set1_epi32(a4);
                __m256i q0 = _mm256_maddubs_epi16(w0, a);
                p16[0][t] = restart ? q0 : _mm256_add_epi16(p16[0][t], q0);
                /* kept a running sum: gcc otherwise reassociates the 8 adds into
                 * a tree over all 8 products and spills them */
                __asm__("" : "+x"(p16[0][t]));
                if (G == 2) {
                    __m256i q1 = _mm256_maddubs_epi16(w1, a);
                    p16[1][t] = restart ? q1 : _mm256_add_epi16(p16[1][t], q1);
                    __asm__("" : "+x"(p16[1][t]));
                }
                if (w5 && j == 3)
                    #pragma GCC unroll 2
                    for (int g = 0; g < G; g++)
                        i6[g][t] = _mm256_madd_epi16(p16[g][t], ones16);
            }
        }
        #pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            __m256 s = _mm256_loadu_ps(scale + g * sstride + 8 * b);
            #pragma GCC unroll 4
            for (int t = 0; t < MT; t++) {
                __m256i i32 = q8   ? p16[g][t]
                              : q6 ? i6[g][t]
                                   : _mm256_madd_epi16(p16[g][t], ones16);
                if (w5)
                    i32 = _mm256_add_epi32(i32, i6[g][t]);
                if (mode == P2_Q40) /* -8 x the code sum; Q5_0's -16 x */
                    i32 = _mm256_add_epi32(i32, _mm256_set1_epi32(tok_off(ta, t, b)));
                if (mode == P2_Q50)
                    i32 = _mm256_add_epi32(i32, _mm256_set1_epi32(2 * tok_off(ta, t, b)));
                if (q6) /* the -32 offsets: (-32 sc0, -32 sc1) . (bsum0, bsum1) */
                    i32 = _mm256_add_epi32(
                        i32, _mm256_madd_epi16(
                                 _mm256_loadu_si256((const __m256i *)(s6b + g * s6stride + 64)),
                                 _mm256_set1_epi32(tok_off(ta, t, b))));
                __m256 sd = _mm256_mul_ps(s, _mm256_set1_ps(ta->td[t][b]));
                accf[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sd, accf[g][t]);
                if (k4 || q81) /* Q4_1 / Q5_1: m x (the Q8_1 block's s) */
                    accf[g][t] = _mm256_fmadd_ps(_mm256_loadu_ps(off + g * sstride + 8 * b),
                                                 _mm256_set1_ps(ta->tds[t][b]), accf[g][t]);
            }
        }
    }
    panel_store(G, MT, accf, C, ldc, nv, first);
}

/* The superblock types (IQ4_XS, Q3_K, Q2_K): the rows' integer scales of each block go into the
 * vpmaddwd that widens the steps, so a superblock's 8 blocks sum exactly in int32 and
 * the float update comes once a superblock (its d, the token's Q8_K d):
 *     isum += vpmaddwd(vpmaddubsw(|w|, sign(a, w)), (s, s)[r][b])   per step (IQ4_XS)
 *     isum += vpmaddwd(sum_4 vpmaddubsw(u, a), (sc, sc)[r][b][h])   per 4 steps (Q3_K, Q2_K)
 *     isum += sum_b vpmaddwd(offsets[r][b], bsums[t][b])           (Q3_K; Q2_K: imin)
 *     C[t][r] += float(isum) * (d[r] * da[t])                       per superblock
 *              (+ float(imin) * (dmin[r] * da[t]): Q2_K)
 * nb, kb: multiples of 8. */
ALWAYS_INLINE void panel_tile_sb(const int mode, const int G, const int MT, const uint8_t *codes,
                                 const float *scale, const float *off, const uint8_t *sc6,
                                 int nb, int kb, const void *const *act, const tok_arrays *ta,
                                 float *C, int ldc, const int nv[2], bool first)
{
    const bool xs = mode == P2_XS, k2 = mode == P2_Q2K;
    const size_t gstride = (size_t)nb * 256, sstride = (size_t)nb * 8;
    const size_t s6stride = (size_t)nb * P2_S6;
    __m256 accf[2][4];
    __m256i isum[2][4], p16[2][4];
    #pragma GCC unroll 2
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++) {
            accf[g][t] = _mm256_setzero_ps();
            isum[g][t] = _mm256_setzero_si256();
        }
    for (int b = 0; b < nb; b++) {
        const int8_t *ap[4];
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++)
            ap[t] = block_codes(true, false, act[t], kb + b);
        const uint8_t *cb = codes + (size_t)b * 256;
        const uint8_t *s6b = sc6 + (size_t)b * P2_S6;
        __m256i sc[2];
        #pragma GCC unroll 2
        for (int g = 0; g < G; g++)
            sc[g] = _mm256_loadu_si256((const __m256i *)(s6b + g * s6stride));
        /* the hot loop: 8 steps of 4 inputs */
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i w[2], wa[2];
            #pragma GCC unroll 2
            for (int g = 0; g < G; g++) {
                w[g] = _mm256_loadu_si256((const __m256i *)(cb + g * gstride + 32 * j));
                wa[g] = _mm256_abs_epi8(w[g]);
            }
            for (int t = 0; t < MT && !xs; t++) { /* 4 steps (a scale's 16 inputs) in int16 */
                int32_t a4;
                memcpy(&a4, ap[t] + 4 * j, 4);
                __m256i a = _mm256_set1_epi32(a4);
                #pragma GCC unroll 2
                for (int g = 0; g < G; g++) {
                    __m256i q = _mm256_maddubs_epi16(w[g], a);
                    p16[g][t] = j % 4 ? _mm256_add_epi16(p16[g][t], q) : q;
                    __asm__("" : "+x"(p16[g][t]));
                    if (j % 4 == 3) {
                        __m256i s = _mm256_loadu_si256(
                            (const __m256i *)(s6b + g * s6stride + 32 * (j / 4)));
                        isum[g][t] = _mm256_add_epi32(isum[g][t], _mm256_madd_epi16(p16[g][t], s));
                        __asm__("" : "+x"(isum[g][t]));
                    }
                }
            }
            for (int t = 0; t < MT && xs; t++) {
                int32_t a4;
                memcpy(&a4, ap[t] + 4 * j, 4);
                __m256i a = _mm256_set1_epi32(a4);
                #pragma GCC unroll 2
                for (int g = 0; g < G; g++) {
                    __m256i q = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(wa[g], _mm256_sign_epi8(a, w[g])), sc[g]);
                    isum[g][t] = _mm256_add_epi32(isum[g][t], q);
                    __asm__("" : "+x"(isum[g][t]));
                }
            }
        }
        if (b % 8 != 7)
            continue;
        #pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            __m256 d = _mm256_loadu_ps(scale + g * sstride + 8 * b);
            #pragma GCC unroll 4
            for (int t = 0; t < MT; t++) {
                /* Q3_K's -4 offsets: sum_c (-4 sc0, -4 sc1)[c] . (bsum0, bsum1)[t][c];
                 * Q2_K's minimums (-m0, -m1) the same way, on their own (dmin) */
                __m256i io = _mm256_setzero_si256();
                for (int c = b - 7; c <= b && !xs; c++)
                    io = _mm256_add_epi32(
                        io, _mm256_madd_epi16(
                                _mm256_loadu_si256(
                                    (const __m256i *)(sc6 + g * s6stride + (size_t)c * P2_S6 + 64)),
                                _mm256_set1_epi32(tok_off(ta, t, c))));
                __m256 dt = _mm256_set1_ps(ta->td[t][b]);
                if (k2)
                    accf[g][t] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(io),
                        _mm256_mul_ps(_mm256_loadu_ps(off + g * sstride + 8 * b), dt), accf[g][t]);
                else
                    isum[g][t] = _mm256_add_epi32(isum[g][t], io);
                accf[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g][t]),
                                             _mm256_mul_ps(d, dt),
                                             accf[g][t]);
                isum[g][t] = _mm256_setzero_si256();
            }
        }
    }
    panel_store(G, MT, accf, C, ldc, nv, first);
}

#define P2_CASE(MODE, G, MT)                                                                  \
    do {                                                                                      \
        if (MODE == P2_XS || MODE == P2_Q3K || MODE == P2_Q2K)                                \
            panel_tile_sb(MODE, G, MT, cg, sg, og, s6, nb, kb, act + m, &ta, Cm, ldc, nv,     \
                          first);                                                             \
        else                                                                                  \
            panel_tile(MODE, G, MT, cg, sg, og, s6, nb, kb, act + m, &ta, Cm, ldc, nv, first); \
    } while (0)
#define P2_MT(MODE, G)                                                                        \
    do {                                                                                      \
        switch (mt) {                                                                         \
        case 1: P2_CASE(MODE, G, 1); break;                                                   \
        case 2: P2_CASE(MODE, G, 2); break;                                                   \
        default: P2_CASE(MODE, G, 3); break;                                                  \
        }                                                                                     \
    } while (0)
#define P2_G(MODE)                 \
    do {                           \
        if (G == 2)                \
            P2_MT(MODE, 2);        \
        else                       \
            P2_MT(MODE, 1);        \
    } while (0)

/* KT_LF_PANEL_ORDER (for A/B): "rows" runs a 64-row panel's tiles rows outer, tokens
 * inner; else (unset, "tokens") tokens outer as before */
static long parse_order(const char *e)
{
    return e && !strcmp(e, "rows");
}

/* Token m + i's arrays for the tile of mt tokens at m (tok_arrays): ext[m + i] (NULL: none)
 * holds per block of 32 the int32 offset (Q4_0, Q5_0: R40's -8 x code sum) or float d x
 * code sum (Q4_K, Q5_K: Q8K's), then at + xs bytes float d; else token_prep's arrays. */
static void tok_set(tok_arrays *ta, int type, const void *const *act, const void *const *ext,
                    size_t xs, int m, int mt, int kb, const int32_t *toff, const float *td,
                    const float *tds)
{
    const bool k8 = type == KT_TYPE_Q6_K || type == KT_TYPE_Q3_K || type == KT_TYPE_Q2_K;
    ta->tstride = ext && k8 ? (int)(sizeof(kt_block_q8_K) / 4) : 8;
    for (int i = 0; i < mt; i++) {
        const uint8_t *e = ext ? ext[m + i] : NULL;
        if (!e) {
            ta->tof[i] = (const uint8_t *)(toff + (size_t)(m + i) * P2_NB);
            ta->td[i] = td + (size_t)(m + i) * P2_NB;
            ta->tds[i] = tds + (size_t)(m + i) * P2_NB;
            continue;
        }
        ta->td[i] = (const float *)(e + xs) + kb;
        ta->tds[i] = (const float *)e + kb;
        ta->tof[i] = k8 ? (const uint8_t *)((const kt_block_q8_K *)act[m + i])[kb / 8].bsums
                        : e + 4 * (size_t)kb;
    }
}

void kt__lf_gemm_panel_avx2(int type, const void *W, size_t wrow, int n0, int n1, int k0, int k1,
                            const void *const *act, const void *const *ext, size_t xs, int M,
                            float *C, int ldc, void *scratch)
{
    /* Q8_0: 2 tokens a tile (its int32 step sums need the registers); Q6_K 3 (one Zen 3
     * core, 64 x 2048 in L2, 6 / 32 / 128 tokens: ahead of 2 in 9 of 9 pairs); IQ4_XS 3
     * (16 / 32 / 128 tokens: ahead of 2 in 10 of 12 pairs), Q3_K 3 (8 of 9; Q2_K: its
     * steps) */
    const int mode = type == KT_TYPE_Q4_K   ? P2_Q4K
                     : type == KT_TYPE_Q5_K ? P2_Q5K
                     : type == KT_TYPE_Q8_0 || type == KT_TYPE_IQ4_NL ? P2_Q80
                     : type == KT_TYPE_Q6_K ? P2_Q6K
                     : type == KT_TYPE_IQ4_XS ? P2_XS
                     : type == KT_TYPE_Q3_K   ? P2_Q3K
                     : type == KT_TYPE_Q2_K   ? P2_Q2K
                     : type == KT_TYPE_Q5_0   ? P2_Q50
                     : type == KT_TYPE_Q4_1   ? P2_Q41
                     : type == KT_TYPE_Q5_1   ? P2_Q51
                                            : P2_Q40;
    const int MTMAX = mode == P2_Q80 ? 2 : 3;
    static long order_cache;
    const bool rows_outer = env_knob(&order_cache, "KT_LF_PANEL_ORDER", parse_order);
    uint8_t *codes = scratch;
    float *scale = (float *)(codes + (size_t)P2_ROWS * P2_KS);
    float *off = scale + P2_ROWS * P2_NB;
    int32_t *toff = (int32_t *)(off + P2_ROWS * P2_NB);
    float *td = (float *)(toff + P2_TOK * P2_NB), *tds = td + P2_TOK * P2_NB;
    uint8_t *sc6 = (uint8_t *)(tds + P2_TOK * P2_NB);
    for (int ks = k0; ks < k1; ks += P2_KS) {
        int ke = k1 - ks < P2_KS ? k1 : ks + P2_KS;
        int kb = ks / 32, nb = (ke - ks) / 32;
        bool first = ks == k0;
        /* Q4_1 / Q5_1 (no such arrays in their rows) and rows without them */
        if (!ext || type == KT_TYPE_Q4_1 || type == KT_TYPE_Q5_1)
            token_prep(type, act, M, kb, nb, toff, td, tds);
        const void *const *tx = type == KT_TYPE_Q4_1 || type == KT_TYPE_Q5_1 ? NULL : ext;
        for (int nc = n0; nc < n1; nc += P2_ROWS) {
            int nr = n1 - nc < P2_ROWS ? n1 - nc : P2_ROWS, ngroups = (nr + 7) / 8;
            panel_pack(type, W, wrow, nc, nr, kb, nb, codes, scale, off, sc6);
            /* tiles of MTMAX tokens x 16 rows; rows outer: a 16-row panel (8 KB) is read
             * for every token from L1, else the whole panel (32 KB) for each tile of tokens */
            const int ntm = (M + MTMAX - 1) / MTMAX, ntg = (ngroups + 1) / 2;
            for (int i = 0; i < ntm * ntg; i++) {
                int m = MTMAX * (rows_outer ? i % ntm : i / ntg);
                int g = 2 * (rows_outer ? i / ntm : i % ntg);
                int mt = M - m < MTMAX ? M - m : MTMAX;
                tok_arrays ta;
                tok_set(&ta, type, act, tx, xs, m, mt, kb, toff, td, tds);
                {
                    int G = ngroups - g < 2 ? 1 : 2;
                    int nv[2] = {nr - 8 * g < 8 ? nr - 8 * g : 8,
                                 G == 2 ? (nr - 8 * g - 8 < 8 ? nr - 8 * g - 8 : 8) : 0};
                    const uint8_t *cg = codes + (size_t)g * nb * 256;
                    const float *sg = scale + (size_t)g * nb * 8, *og = off + (size_t)g * nb * 8;
                    const uint8_t *s6 = sc6 + (size_t)g * nb * P2_S6;
                    float *Cm = C + (size_t)m * ldc + (nc - n0) + 8 * g;
                    if (mode == P2_Q4K)
                        P2_G(P2_Q4K);
                    else if (mode == P2_Q5K)
                        P2_G(P2_Q5K);
                    else if (mode == P2_Q6K)
                        P2_G(P2_Q6K);
                    else if (mode == P2_Q80)
                        P2_G(P2_Q80);
                    else if (mode == P2_XS)
                        P2_G(P2_XS);
                    else if (mode == P2_Q3K)
                        P2_G(P2_Q3K);
                    else if (mode == P2_Q2K)
                        P2_G(P2_Q2K);
                    else if (mode == P2_Q50)
                        P2_G(P2_Q50);
                    else if (mode == P2_Q41)
                        P2_G(P2_Q41);
                    else if (mode == P2_Q51)
                        P2_G(P2_Q51);
                    else
                        P2_G(P2_Q40);
                }
            }
        }
    }
}

_Static_assert(sizeof(kt_block_iq4_nl) == sizeof(kt_block_q4_0), "IQ4_NL's blocks are Q4_0's");
_Static_assert(sizeof(kt_block_q8_K) == 73 * 4 && offsetof(kt_block_q8_K, bsums) % 4 == 0,
               "tok_arrays' tstride: a Q8_K block's bsums 73 int32s on");
_Static_assert(offsetof(kt_block_q5_K, scales) == offsetof(kt_block_q4_K, scales) &&
                   offsetof(kt_block_q5_K, dmin) == offsetof(kt_block_q4_K, dmin),
               "Q5_K's d, dmin and scales where Q4_K's are");
_Static_assert(KT__LF_PANEL2_SCRATCH == P2_ROWS * P2_KS + 2 * P2_ROWS * P2_NB * 4 +
                                            3 * P2_TOK * P2_NB * 4 + P2_ROWS / 8 * P2_NB * P2_S6,
               "AVX2 panel scratch");
