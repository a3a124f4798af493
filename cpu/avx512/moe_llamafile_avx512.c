/* LLAMAFILE kernels on AVX-512 VNNI. Runs only after kt_hw_isa() reported
 * AVX512F/BW/VL/DQ + VNNI.
 *
 * Q4_0 / Q8_0 ("raw"): a weight row is read 64 bytes at a time exactly as it
 * lies in the file, scale bytes included. The activation's R40 / R80 section
 * (cpu/ref/moe_llamafile.c) holds the Q8_0 codes at the byte positions of the
 * weight codes they multiply (0 under the scale bytes), so per 64 bytes:
 *
 *   Q4_0  d = bias + lo(w) . a_lo + hi(w) . a_hi    (vpdpbusd, u8 x s8)
 *   Q8_0  d = bias + (w + 128) . a
 *   acc  += float(d) * dw * da                       per 4-byte lane
 *
 * where every 4-byte lane lies in one block (blocks are 18 / 34 bytes, their
 * 2-byte scales at even offsets), bias = -8 / -128 * (the lane's codes) takes
 * the offset of the unsigned weight codes out, da is the lane's activation
 * block scale, and dw the lane's weight block scale, moved from its f16 in this
 * or the previous 64 bytes by one vpermt2w with an index per position of the
 * row (the pattern repeats every 32 blocks). Integer sums per lane are exact;
 * only the float summation order differs from the ggml vec_dots.
 */
#include <immintrin.h>
#include <pthread.h>

#include "moe_kernels.h"
#include "ref/ggml_quants.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Q4_0: 32 blocks of 18 bytes; Q8_0: 32 of 34 */
#define PERIOD40 576
#define PERIOD80 1088
#ifndef LF_NR1
#define LF_NR1 4
#endif
#ifndef LF_DIST
#define LF_DIST 12
#endif
#ifndef LF_HINT
#define LF_HINT _MM_HINT_T1
#endif

/* Scale-word index of lane l of 64 bytes starting at byte p (a multiple of 4)
 * of a row: words 0..31 the previous 64 bytes, 32..63 these. */
static uint16_t idx40[PERIOD40 / 4][16], idx80[PERIOD80 / 4][16];
static pthread_once_t idx_once = PTHREAD_ONCE_INIT;

static void idx_init(void)
{
    for (int t = 0; t < 2; t++) {
        int bb = t ? 34 : 18, period = t ? PERIOD80 : PERIOD40;
        uint16_t(*tab)[16] = t ? idx80 : idx40;
        for (int p = 0; p < period; p += 4)
            for (int l = 0; l < 16; l++) {
                int start = (p + 4 * l) / bb * bb; /* the lane's block */
                tab[p / 4][l] = (uint16_t)(32 + (start - p) / 2);
            }
    }
}

/* out[r][m] = sum over R bytes of rows w[r] . token act[m], NR rows x MT tokens. */
ALWAYS_INLINE void raw_tile(const bool q4, const int NR, const int MT, const uint8_t *const *w,
                            int R, int phase, const uint8_t *const *act, size_t o0, size_t rp,
                            size_t ahead, float *out)
{
    const int period = q4 ? PERIOD40 : PERIOD80;
    const uint16_t(*tab)[16] = q4 ? (const uint16_t(*)[16])idx40 : (const uint16_t(*)[16])idx80;
    const size_t obias = (q4 ? 2 : 1) * rp, oda = obias + rp;
    __m512 acc[4][4];
    __m512i prev[4];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        prev[r] = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            acc[r][m] = _mm512_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(15), top = _mm512_set1_epi8((char)0x80);
    for (int c = 0; c < R; c += 64) {
        bool last = R - c < 64;
        __mmask64 lm = last ? ((__mmask64)1 << (R - c)) - 1 : ~(__mmask64)0;
        __mmask16 fm = last ? (__mmask16)((1u << ((R - c + 3) / 4)) - 1) : (__mmask16)0xffff;
        __m512i idx = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)tab[phase / 4]));
        phase = phase + 64 >= period ? phase + 64 - period : phase + 64;
        __m512i wl[4], wh[4];
        __m512 dw[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            /* rows are short (a few KB): the hardware prefetcher would not
             * ramp up in time, so fetch the next tile's bytes now */
            if (ahead)
                _mm_prefetch((const char *)(w[r] + c + ahead), LF_HINT);
            __m512i v = last ? _mm512_maskz_loadu_epi8(lm, w[r] + c)
                             : _mm512_loadu_si512((const void *)(w[r] + c));
            if (q4) {
                wl[r] = _mm512_and_si512(v, low4);
                wh[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            } else {
                wl[r] = _mm512_xor_si512(v, top);
            }
            __m512i sw = _mm512_permutex2var_epi16(prev[r], idx, v);
            dw[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(sw));
            prev[r] = v;
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const uint8_t *a = act[m] + o0 + c;
            __m512i alo = _mm512_loadu_si512((const void *)a);
            __m512i ahi = q4 ? _mm512_loadu_si512((const void *)(a + rp)) : alo;
            __m512i bias = _mm512_loadu_si512((const void *)(a + obias));
            __m512 da = _mm512_loadu_ps((const void *)(a + oda));
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i d = _mm512_dpbusd_epi32(bias, wl[r], alo);
                if (q4)
                    d = _mm512_dpbusd_epi32(d, wh[r], ahi);
                __m512 s = _mm512_mul_ps(dw[r], da);
                acc[r][m] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[r][m], fm);
            }
        }
    }
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            out[r * 4 + m] = _mm512_reduce_add_ps(acc[r][m]);
}

void kt__lf_gemm_raw_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                            const void *const *act, size_t rp, int M, float *C, int ldc)
{
    pthread_once(&idx_once, idx_init);
    const bool q4 = type == KT_TYPE_Q4_0;
    const int bb = q4 ? 18 : 34, period = q4 ? PERIOD40 : PERIOD80;
    const size_t o0 = (size_t)b0 * bb;
    const int R = (b1 - b0) * bb, phase = (int)(o0 % (size_t)period);
    const uint8_t *const *a = (const uint8_t *const *)act;
    /* one token: 4 rows share each activation load; more: 2 rows x 4 tokens */
    const int NR = M == 1 ? LF_NR1 : 2;
    int dist = LF_DIST; /* rows prefetched ahead */
    for (int n = n0; n < n0 + dist && n < n1; n++)
        for (int c = 0; c < R; c += 64)
            _mm_prefetch((const char *)W + (size_t)n * wrow + o0 + c, LF_HINT);
    for (int n = n0; n < n1; n += NR) {
        int nr = n1 - n < NR ? n1 - n : NR;
        const uint8_t *wr[4];
        for (int r = 0; r < NR; r++)
            wr[r] = (const uint8_t *)W + (size_t)(n + (r < nr ? r : nr - 1)) * wrow + o0;
        for (int m = 0; m < M; m += 4) {
            int mr = M - m < 4 ? M - m : 4;
            size_t ahead = m == 0 && n + dist + NR <= n1 ? (size_t)dist * wrow : 0;
            float t[16];
            if (M == 1) {
                if (q4)
                    raw_tile(true, LF_NR1, 1, wr, R, phase, a, o0, rp, ahead, t);
                else
                    raw_tile(false, LF_NR1, 1, wr, R, phase, a, o0, rp, ahead, t);
            } else if (q4) {
                switch (mr) {
                case 1: raw_tile(true, 2, 1, wr, R, phase, a + m, o0, rp, ahead, t); break;
                case 2: raw_tile(true, 2, 2, wr, R, phase, a + m, o0, rp, ahead, t); break;
                case 3: raw_tile(true, 2, 3, wr, R, phase, a + m, o0, rp, ahead, t); break;
                default: raw_tile(true, 2, 4, wr, R, phase, a + m, o0, rp, ahead, t); break;
                }
            } else {
                switch (mr) {
                case 1: raw_tile(false, 2, 1, wr, R, phase, a + m, o0, rp, ahead, t); break;
                case 2: raw_tile(false, 2, 2, wr, R, phase, a + m, o0, rp, ahead, t); break;
                case 3: raw_tile(false, 2, 3, wr, R, phase, a + m, o0, rp, ahead, t); break;
                default: raw_tile(false, 2, 4, wr, R, phase, a + m, o0, rp, ahead, t); break;
                }
            }
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++)
                    C[(size_t)(m + i) * ldc + (n + r - n0)] = t[r * 4 + i];
        }
    }
}
