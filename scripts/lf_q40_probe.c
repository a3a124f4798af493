/*
 * lf_q40_probe: what one Q4_0 one-token tile (cpu/avx512/moe_llamafile_avx512.c,
 * raw_chunk) spends per 64 weight bytes, by variants that leave parts out or do
 * them another way. 4 rows x 1152 bytes (2048 inputs) in L1, the activation in
 * the R40 layout, CPU time of one thread, ns per 64 bytes of one row. A probe
 * for kernel work, not a kernel: the variants without the scale work compute
 * wrong sums.
 *
 *   gcc -O2 -march=native scripts/lf_q40_probe.c -o lf_q40_probe && ./lf_q40_probe
 *
 * Variants: full      the kernel's piece (vpermt2w + vcvtph2ps weight scales,
 *                     scale product, convert, FMA)
 *           gfni      full with the high nibbles by one vgf2p8affineqb
 *           intonly   the integer dot products alone (summed as integers)
 *           nomul     full without the scale product (weight scale only)
 *           table     lane scales from a table of 32 block scales by one
 *                     vpermt2ps, the table free (the bound of "16 scales at a
 *                     time": no vpermt2w, vcvtph2ps or product per piece)
 *           table16   table with its real set-up: per 16 blocks 4 loads, 2
 *                     vpermt2w, a blend, vcvtph2ps and the product
 *           seq       full, the tile's rows one after another
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define R 1152 /* row bytes: 64 blocks of 18 */
#define NR 4
enum { FULL, GFNI, INTONLY, NOMUL, TABLE, TABLE16, SEQ, NVAR };
static const char *names[NVAR] = {"full", "gfni", "intonly", "nomul", "table", "table16", "seq"};

static uint16_t idx40[144][16]; /* lane -> scale word of (previous, this) 64 bytes */
static uint16_t sidx[9][16];    /* lane -> block of a 32-block window */
static __m512i gidx;            /* scale words of 8 blocks from 128 bytes */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The dot products of one 64-byte piece: d = bias + lo . alo + hi . ahi. */
static inline __m512i piece_dot(__m512i v, const uint8_t *a, size_t rp, int c, int gf)
{
    const __m512i low4 = _mm512_set1_epi8(15);
    __m512i wl = _mm512_and_si512(v, low4);
    __m512i wh = gf ? _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000LL), 0)
                    : _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    __m512i d = _mm512_dpbusd_epi32(_mm512_loadu_si512(a + c + 2 * rp), wl,
                                    _mm512_loadu_si512(a + c));
    return _mm512_dpbusd_epi32(d, wh, _mm512_loadu_si512(a + c + rp));
}

/* Blocks [16 g, 16 g + 16) of row w: f32 scale x the activation's block scale. */
static inline __m512 scales16(const uint8_t *w, int g, const float *dab)
{
    const uint8_t *p = w + 288 * g;
    __m512i p0 = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), gidx,
                                           _mm512_loadu_si512(p + 64));
    __m512i p1 = _mm512_permutex2var_epi16(_mm512_loadu_si512(p + 144),
                                           _mm512_alignr_epi32(gidx, gidx, 8),
                                           _mm512_loadu_si512(p + 208));
    __m512i sw = _mm512_mask_mov_epi16(p0, 0xFF00, p1);
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(sw)),
                         _mm512_loadu_ps(dab + 16 * g));
}

/* One tile; var a constant in each instantiation below (no branches on it). */
static inline __attribute__((always_inline)) void tile(const int var, const uint8_t *const *w,
                                                       const uint8_t *a, size_t rp,
                                                       const float *dab, float *out)
{
    __m512 acc[NR], sa[NR], sb[NR];
    __m512i prev[NR];
    for (int r = 0; r < NR; r++) {
        acc[r] = _mm512_setzero_ps();
        prev[r] = _mm512_setzero_si512();
        sa[r] = scales16(w[r], 0, dab);
        sb[r] = scales16(w[r], 1, dab);
    }
    if (var == SEQ) {
        for (int r = 0; r < NR; r++)
            for (int c = 0, ph = 0; c + 64 <= R; c += 64, ph = (ph + 64) % 576) {
                __m512i idx = _mm512_castsi256_si512(_mm256_loadu_si256((const void *)idx40[ph / 4]));
                __m512i v = _mm512_loadu_si512(w[r] + c);
                __asm__("" : "+v"(v));
                __m512i d = piece_dot(v, a, rp, c, 0);
                __m512i sw = _mm512_permutex2var_epi16(prev[r], idx, v);
                prev[r] = v;
                __m512 s = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(sw)),
                                         _mm512_loadu_ps(a + c + 3 * rp));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[r]);
            }
    } else {
        int g = 0;
        for (int c = 0, ph = 0; c + 64 <= R; c += 64, ph = (ph + 64) % 576) {
            __m512i idx = _mm512_castsi256_si512(_mm256_loadu_si256((const void *)idx40[ph / 4]));
            if (var == TABLE16 && c - 288 * g >= 288) {
                g++;
                for (int r = 0; r < NR; r++)
                    sa[r] = sb[r], sb[r] = scales16(w[r], g + 1, dab);
            }
            __m512i tix = _mm512_castsi256_si512(
                _mm256_loadu_si256((const void *)sidx[(c - 288 * g) / 32 % 9]));
            __m512 da = _mm512_loadu_ps(a + c + 3 * rp);
            for (int r = 0; r < NR; r++) {
                __m512i v = _mm512_loadu_si512(w[r] + c);
                __asm__("" : "+v"(v));
                __m512i d = piece_dot(v, a, rp, c, var == GFNI);
                if (var == INTONLY) {
                    acc[r] = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(acc[r]), d));
                    continue;
                }
                __m512 s;
                if (var == TABLE || var == TABLE16) {
                    s = _mm512_permutex2var_ps(sa[r], tix, sb[r]);
                } else {
                    __m512i sw = _mm512_permutex2var_epi16(prev[r], idx, v);
                    s = _mm512_cvtph_ps(_mm512_castsi512_si256(sw));
                    if (var != NOMUL)
                        s = _mm512_mul_ps(s, da);
                }
                prev[r] = v;
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[r]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        out[r] = _mm512_reduce_add_ps(acc[r]);
}

#define TILE(V)                                                                                \
    __attribute__((noinline)) static void tile_##V(const uint8_t *const *w, const uint8_t *a,  \
                                                   size_t rp, const float *dab, float *out)    \
    {                                                                                          \
        tile(V, w, a, rp, dab, out);                                                           \
    }
TILE(FULL) TILE(GFNI) TILE(INTONLY) TILE(NOMUL) TILE(TABLE) TILE(TABLE16) TILE(SEQ)
typedef void (*tile_fn)(const uint8_t *const *, const uint8_t *, size_t, const float *, float *);
static const tile_fn tiles[NVAR] = {tile_FULL, tile_GFNI, tile_INTONLY, tile_NOMUL,
                                    tile_TABLE, tile_TABLE16, tile_SEQ};

int main(void)
{
    size_t rp = R + 64;
    uint8_t *w0 = aligned_alloc(64, NR * R + 512), *a = aligned_alloc(64, 4 * rp + 64);
    float *dab = aligned_alloc(64, 4096);
    srand(1);
    for (int i = 0; i < NR * R + 512; i++)
        w0[i] = (uint8_t)rand();
    for (int i = 0; i + 1 < NR * R + 512; i += 18) /* f16 scales near 1: no subnormals */
        w0[i + 1] = 0x3c;
    for (size_t i = 0; i < 4 * rp; i++)
        a[i] = (uint8_t)(rand() & 0x3f);
    for (size_t i = 0; i < rp; i += 4) {
        float f = 0.01f * (float)(1 + rand() % 100);
        memcpy(a + 3 * rp + i, &f, 4);
    }
    for (int i = 0; i < 1024; i++)
        dab[i] = 0.01f * (float)(1 + i % 100);
    for (int p = 0; p < 576; p += 4)
        for (int l = 0; l < 16; l++)
            idx40[p / 4][l] = (uint16_t)(32 + ((p + 4 * l) / 18 * 18 - p) / 2);
    for (int q = 0; q < 9; q++)
        for (int l = 0; l < 16; l++)
            sidx[q][l] = (uint16_t)((32 * q + 4 * l) / 18);
    uint16_t gi[32] = {0};
    for (int j = 0; j < 8; j++)
        gi[j] = gi[24 + j] = (uint16_t)(9 * j); /* words 8..15 after the 8-dword rotation */
    gidx = _mm512_loadu_si512(gi);
    const uint8_t *w[NR] = {w0, w0 + R, w0 + 2 * R, w0 + 3 * R};
    float out[NR];
    double best[NVAR];
    for (int v = 0; v < NVAR; v++)
        best[v] = 1e30;
    for (int rep = 0; rep < 5; rep++) /* interleaved, the best of 5 */
        for (int v = 0; v < NVAR; v++) {
            long n = 0;
            double t0 = now(), t;
            do {
                for (int k = 0; k < 1000; k++, n++)
                    tiles[v](w, a, rp, dab, out);
                t = now() - t0;
            } while (t < 0.3);
            double ns = t / (double)n / (NR * R / 64.0) * 1e9;
            best[v] = ns < best[v] ? ns : best[v];
        }
    for (int v = 0; v < NVAR; v++)
        printf("%-8s %.3f ns per 64 weight bytes of a row\n", names[v], best[v]);
    return 0;
}
