/* LLAMAFILE kernels on AVX-512 VNNI. Runs only after kt_hw_isa() reported
 * AVX512F/BW/VL/DQ + VNNI. Four families, picked in cpu/ref/moe_llamafile.c:
 * - "raw" tiles for Q4_0 / Q8_0 / IQ4_NL (below),
 * - per-256-block tiles for Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS,
 * - 4-blocks-of-32 tiles for Q4_1 / Q5_0 / Q5_1,
 * - the prefill GEMM over per-call int8 panels (every type above).
 * Tiles: 4 rows x 1 token, or 2 rows x up to 4 tokens.
 *
 * Q4_0 / Q8_0 / IQ4_NL ("raw"): a weight row is read 64 bytes at a time exactly
 * as it lies in the file, scale bytes included. The activation's R40 / R80 section
 * (cpu/ref/moe_llamafile.c) holds the Q8_0 codes at the byte positions of the
 * weight codes they multiply (0 under the scale bytes), so per 64 bytes:
 *
 *   Q4_0  d = bias + lo(w) . a_lo + hi(w) . a_hi    (vpdpbusd, u8 x s8)
 *   Q8_0  d = bias + (w + 128) . a
 *   IQ4_NL as Q4_0 with the nibbles mapped to level + 128 (vpshufb), bias x 16
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
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "moe_kernels.h"
#include "ref/ggml_quants.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Q4_0: 32 blocks of 18 bytes; Q8_0: 32 of 34 */
#define PERIOD40 576
#define PERIOD80 1088
/* Decode prefetch distance in bytes of the rows a call reads, into L2: rows
 * ahead = LF_AHEAD / (bytes per row), at least one tile's rows and, by default,
 * at most LF_AHEAD_ROWS. Was 12 rows whatever their length (26 KB of 2048-input
 * Q8_0 rows, 5.2 KB of 768-input Q4_0). One Zen 4 core from memory, 64-row calls
 * with the next-call hint (scripts/lf_kernel_bench.c; 11-30 06:30, load 7):
 * 4 / 8 / 16 / 32 KiB ahead read Q8_0 x 2048 10.3 / 18.3 / 17.6 / 16.2 GB/s (4 KiB
 * is 2 rows, inside the tile being read), Q4_0 x 2048 10.9 / 11.7 / 10.4 / 10.5;
 * quiet (07:25): Q4_0 x 2048 5 / 8 / 12 KiB 14.2 / 16.3 / 14.9, but Q4_0 x 768
 * (432-byte rows) 3 / 5 / 8 KiB 11.1 / 12.1 / 10.7: short rows want about 12
 * rows. KT_LF_AHEAD (256..65536 bytes, no row cap; 0: none) overrides it, for measuring
 * elsewhere (the Xeon's BF16 / FP8 decode also wanted 8 KiB ahead, where Zen 4
 * wanted 1 KiB: cpu/avx512/moe_avx512_common.h). */
#define LF_AHEAD 8192
#define LF_AHEAD_ROWS 12
/* On Intel CPUs with at most 4 online CPUs: 3 KiB for every tile, no row cap
 * (as the BF16 / FP8 decode's DEC_PF_INTEL_FEW). The 2-core AMX Xeon VM, 2
 * threads, kt-bench moe --gguf Qwen3-30B-A3B shape, T=1 / 4 of stream, against
 * the default above alternating (session 17, 2 pairs): Q4_0 0.79-0.80 / 0.84
 * -> 0.84-0.85 / 0.88-0.89, Q4_K 0.75-0.76 / 0.79-0.80 -> 0.75-0.77 / 0.79-0.80,
 * Q8_0 0.84-0.86 / 0.89-0.95 -> 0.87-0.88 / 0.90-0.93; in the sweep 2 KiB read
 * Q4_K 0.72 / 0.76-0.77, 4 KiB 0.75-0.76 / 0.81. */
#define LF_AHEAD_FEW 3072
#define LF_HINT _MM_HINT_T1
static int lf_ahead = LF_AHEAD, lf_ahead_rows = LF_AHEAD_ROWS;
/* The Q80X tiles' distance unless KT_LF_AHEAD sets one: half. One Zen 4 core from
 * memory, 384 x 2048 one token (load 3-11, docs/bench/epyc2-lf-gguf10.txt): 4 KiB
 * read more than 8 KiB in 10 of 10 comparisons (13.8-28.2 against 12.5-20.6 GB/s). */
static int lf_x80_ahead = LF_AHEAD / 2;
/* The Q40X tiles' distance unless KT_LF_AHEAD sets one: LF_AHEAD, but none (the
 * hardware prefetchers alone) on AMD CPUs with at most KT__FEW_CPUS online CPUs.
 * The backend's repacks lie in 2 MiB pages, where the prefetchers run across the
 * page ends; the 4 KiB pages of lf_kernel_bench's memory mode (which chose
 * LF_AHEAD) stop them at each. Zen 4 VM (session 19): one core from memory in
 * 2 MiB pages (KT_BENCH_HUGE=1, 384 x 2048, one token, quiet) 0 / 1 / 2 / 4 /
 * 8 KiB ahead read 23.2-25.4 / 23.7-24.0 / 19.9-20.3 / 17.9-18.5 / 18.5-23.5
 * GB/s (Q4_K there wants its 8 KiB: 14.1-15.8 at 0, 21.2-22.1 at 8 KiB);
 * kt-bench moe --gguf, 2 threads, KT_LF_AHEAD=0 against the default
 * alternating, 4 pairs (19:46): T=1 0.91 / 0.86 / 0.88 / 0.66 of the stream
 * between the calls against 0.88 / 0.79 / 0.85 / 0.65, T=4 0.94 / 0.90 / 0.93
 * / 0.68 against 0.88 / 0.89 / 0.87 / 0.65. */
static int lf_x40_ahead = LF_AHEAD;
/* Rows side by side in a one-token tile (weight streams per core): Zen 4 VM, one
 * core from memory, 384 x 2048: Q4_0 4 rows 13.4 GB/s, 2 rows 12.7, 1 row 10.8
 * (Q8_0 17.2 / 12.8 / 11.9); the 16-core Xeon (kt-bench moe --gguf, T=1): at
 * 04:36 Q4_0 74.4 / 82.4 / 67.5 GB/s, Q8_0 79.9 / 90.8 / 79.9, but at 04:41, 2
 * vs 4 rows twice: Q4_0 75.9 / 88.1, 71.2 / 73.2, Q8_0 85.5 / 85.1, 84.3 / 85.0
 * (run-to-run noise of +-10%). So 4; KT_LF_DEC_ROWS (4, 2, 1) overrides, 1 for
 * Q4_0 / Q8_0 / IQ4_NL only (the other tiles take 2). */
static int lf_dec_rows = 4;
/* One-token raw tiles (Q4_0 / Q8_0 / IQ4_NL): the tile's rows read one after
 * another (KT_LF_DEC_ORDER=seq: one sequential stream, as the BF16 / FP8
 * decode reads) or side by side, a 64-byte piece of each in turn (the
 * default). Either way the tile's sums are reduced together at its end. */
static bool lf_dec_seq;
/* KT_LF_NOHINT=1: the backend's hints for the next call ignored (measuring;
 * until 11-30 06:30 an empty value counted as set, so scripts/device-gguf-items.sh's
 * prefill "hint" rows ran without them too) */
static bool lf_nohint;
/* How the prefill panels take the 16 rows' f16 scales: 16 vpinsrw (the
 * default but for Q8_0) or 16 scalar stores and a vector load over them, which
 * waits on store forwarding. One Zen 4 core, 64 x 2048, 32 tokens, alternating
 * (load 4-6; docs/performance.md, "LLAMAFILE, session 9"): Q4_0 +4-9% in 16 of
 * 16 pairs, Q4_1 / Q5_0 / IQ4_NL +3-10% in 4 of 4, Q8_0 -2..+5% (15 of 16: kept
 * off). KT_LF_F16=insert / scalar sets it for every type. */
static int lf_f16 = -1; /* -1: by type, 0: scalar, 1: insert */
/* The Q4KX decode's group kernel for one-token tiles: 1 (session 9's, the
 * 2-4-token tiles' one) or 3 (k4x3_group, the default: the scales in integers,
 * two rows a register); KT_LF_Q4K=1 / 3, or kt__lf_set_q4k_avx512 for the
 * tests. (Session 11's kernel 2 went with the packed scales, session 21: level
 * with 1 in session 20's runs.) The 2-core AMX Xeon VM, kt-bench moe --gguf Qwen3-30B-A3B shape, 2
 * threads, T=1 of the stream between the calls, 4 rounds alternating (session
 * 20): 3 read 0.85 / 0.83 / 0.86 / 0.89 against 1's 0.81 / 0.80 / 0.85 / 0.87
 * (the build before: 0.77 / 0.79 / 0.79 / 0.85). Above KT__FEW_CPUS online CPUs
 * the memory, not a core, is the limit, and 1 stays: the 16-core Xeon, 8-layer
 * file, 16 threads, 9 clean alternating pairs (session 21, both Q4KX layouts): 1
 * read 1.02 / 0.97 / 1.00 / 0.92 / 0.90 / 0.94 / 0.90 / 0.97 / 0.91, 3 0.90 /
 * 0.93 / 0.97 / 0.99 / 0.84 / 0.83 / 0.95 / 0.96 / 0.94 (at or above 0.9 in 9 of
 * 9 against 7; ahead in the first 5 of 6 pairs, behind in 2 of the last 3). */
static int lf_q4k = 3;

/* Scale-word index of lane l of 64 bytes starting at byte p (a multiple of 4)
 * of a row: words 0..31 the previous 64 bytes, 32..63 these. */
static uint16_t idx40[PERIOD40 / 4][16], idx80[PERIOD80 / 4][16];
static pthread_once_t idx_once = PTHREAD_ONCE_INIT;

static void idx_init(void)
{
    const char *e = getenv("KT_LF_AHEAD"); /* "0": no software prefetch in decode */
    if (e && ((atoi(e) >= 256 && atoi(e) <= 65536) || !strcmp(e, "0")))
        lf_ahead = lf_x80_ahead = lf_x40_ahead = atoi(e), lf_ahead_rows = 64;
    else if (kt__few_core_intel())
        lf_ahead = lf_x80_ahead = lf_x40_ahead = LF_AHEAD_FEW, lf_ahead_rows = 64;
    else if (__builtin_cpu_is("amd") && sysconf(_SC_NPROCESSORS_ONLN) <= KT__FEW_CPUS)
        lf_x40_ahead = 0;
    e = getenv("KT_LF_NOHINT"); /* set and empty (a script's "off") is no */
    lf_nohint = e && *e && strcmp(e, "0") != 0;
    e = getenv("KT_LF_DEC_ORDER");
    lf_dec_seq = e && !strcmp(e, "seq");
    e = getenv("KT_LF_F16");
    lf_f16 = e && !strcmp(e, "insert") ? 1 : e && !strcmp(e, "scalar") ? 0 : -1;
    if (sysconf(_SC_NPROCESSORS_ONLN) > KT__FEW_CPUS)
        lf_q4k = 1;
    e = getenv("KT_LF_Q4K");
    if (e && (!strcmp(e, "1") || !strcmp(e, "3")))
        lf_q4k = atoi(e);
    e = getenv("KT_LF_DEC_ROWS");
    if (e && (atoi(e) == 4 || atoi(e) == 2 || atoi(e) == 1))
        lf_dec_rows = atoi(e);
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

int kt__lf_set_q4k_avx512(int kernel)
{
    pthread_once(&idx_once, idx_init); /* so that the environment does not undo it */
    int was = lf_q4k;
    if (kernel == 1 || kernel == 3)
        lf_q4k = kernel;
    return was;
}

/* The lane sums of a, b, c, d. */
ALWAYS_INLINE __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
    __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
    __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a8, b8), _mm256_hadd_ps(c8, d8));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* out[r * 4 + m] = the lane sum of acc[r][m]: NR rows x MT tokens of a tile. */
ALWAYS_INLINE void tile_store(const int NR, const int MT, __m512 acc[4][4], float *out)
{
    if (NR == 4 && MT == 1) { /* the four sums at once */
        _mm_storeu_ps(out, sum4(acc[0][0], acc[1][0], acc[2][0], acc[3][0]));
        out[4] = out[1], out[8] = out[2], out[12] = out[3];
        return;
    }
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            out[r * 4 + m] = _mm512_reduce_add_ps(acc[r][m]);
}

/* acc[r][m] = 0 for NR rows x MT tokens. */
ALWAYS_INLINE void acc_zero(const int NR, const int MT, __m512 acc[4][4])
{
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            acc[r][m] = _mm512_setzero_ps();
}

/* The cache lines of the `bytes` at x + ahead started into L2 (ahead 0: none):
 * the next tile's block, `ahead` bytes (dist rows, about lf_ahead bytes) further on. */
ALWAYS_INLINE void prefetch_block(const void *x, size_t ahead, const size_t bytes)
{
    if (!ahead)
        return;
    const char *p = (const char *)x + ahead;
    #pragma GCC unroll 4
    for (size_t o = 0; o + 1 < bytes; o += 64)
        _mm_prefetch(p + o, LF_HINT);
    _mm_prefetch(p + bytes - 1, LF_HINT);
}

/* The backend's hints: weights this thread's next calls read (the item's up rows,
 * the next item's gate rows, the next expert's down rows), oldest first. Each
 * call takes the oldest. A panel call starts it into L2 a share per tile,
 * between its tiles: on the Zen 4 VM software prefetches in bursts of a few
 * hundred lines mostly came to nothing, 4-16 lines at a time between work all
 * landed. A decode call (tile_rows) starts the next call's first rows in its
 * last tiles, where its own rows ahead ran out, so that the row stream does not
 * stop and restart at every call. */
typedef struct lf_region {
    const uint8_t *w;
    size_t wrow, len;
    int rows;
} lf_region;
static _Thread_local lf_region lf_hints[2];
static _Thread_local int lf_nhints;

void kt__lf_hint_avx512(const void *W, size_t wrow, int n0, int n1, size_t len)
{
    pthread_once(&idx_once, idx_init);
    if (n1 <= n0 || !len || lf_nohint)
        return;
    if (lf_nhints == 2) { /* keep the newest two */
        lf_hints[0] = lf_hints[1];
        lf_nhints = 1;
    }
    lf_hints[lf_nhints++] = (lf_region){(const uint8_t *)W + (size_t)n0 * wrow, wrow, len,
                                        n1 - n0};
}

/* A walk over a region's cache lines, step() starting the next n. */
typedef struct lf_walk {
    lf_region g;
    int r;
    size_t c;
} lf_walk;

/* A walk over the oldest hint, taken off the queue; false (and an empty walk)
 * when none is queued. */
static bool hint_take(lf_walk *k)
{
    *k = (lf_walk){{0}, 0, 0};
    if (!lf_nhints)
        return false;
    k->g = lf_hints[0];
    lf_hints[0] = lf_hints[1];
    lf_nhints--;
    return true;
}

static void walk_step(lf_walk *k, long n)
{
    for (; n > 0 && k->r < k->g.rows; n--) {
        _mm_prefetch((const char *)k->g.w + (size_t)k->r * k->g.wrow + k->c, _MM_HINT_T1);
        k->c += 64;
        if (k->c >= k->g.len)
            k->c = 0, k->r++;
    }
}

/* What a tile family's kernels need besides rows and tokens. */
typedef struct tile_job {
    int type;
    int nb;        /* blocks per row in the call (K types: of 256; Q4_1 / Q5: of 32) */
    int R, phase;  /* raw: bytes per row in the call, offset of the first in its period */
    size_t rp;     /* raw: the activation sections' stride */
} tile_job;

/* out[r * 4 + m] = rows w[r] . tokens a[m]: nrow 4: 4 rows x 1 token; 1 (the raw
 * family only): 1 row x 1 token; else 2 rows x mr tokens. */
typedef void (*tile_family)(const tile_job *j, int nrow, int mr, const uint8_t *const *w,
                            const uint8_t *const *a, size_t ahead, float *out);

/* A family's tile at (NR, MT) from the runtime nrow / mr: CALL(NR, MT, args...)
 * with literal sizes, so that each tile is compiled for its shape. */
#define TILE_SWITCH(CALL, ...)                                                          \
    do {                                                                                \
        if (nrow == 4)                                                                  \
            CALL(4, 1, __VA_ARGS__);                                                    \
        else if (mr == 1)                                                               \
            CALL(2, 1, __VA_ARGS__);                                                    \
        else if (mr == 2)                                                               \
            CALL(2, 2, __VA_ARGS__);                                                    \
        else if (mr == 3)                                                               \
            CALL(2, 3, __VA_ARGS__);                                                    \
        else                                                                            \
            CALL(2, 4, __VA_ARGS__);                                                    \
    } while (0)

/* Rows of `bytes` each that lf_ahead bytes cover, at most lf_ahead_rows, at
 * least `least`. */
static int ahead_rows(size_t bytes, int least)
{
    size_t r = bytes ? ((size_t)lf_ahead + bytes - 1) / bytes : 1;
    r = r > (size_t)lf_ahead_rows ? (size_t)lf_ahead_rows : r;
    return r < (size_t)least ? least : (int)r;
}

/* The rows the last decode call's tail started of the region it was hinted
 * (skipped by the burst of the call that reads them). */
static _Thread_local const uint8_t *lf_tail_w;
static _Thread_local int lf_tail_rows;

/* C[m][n - n0] = rows [n0, n1) of W (bytes [o0, o0 + span) of each) . tokens
 * act[m] + aoff, in tiles of fam: one token 4 rows at a time, more 2 rows x up
 * to 4 tokens. Each row is read once; rows are short (a few KB), so the first
 * dist rows (lf_ahead bytes) are started at once, each tile starts the one dist
 * rows on, and the tiles of the last dist rows start the first rows of the
 * next call the backend hinted. */
ALWAYS_INLINE void tile_rows(tile_family fam, const tile_job *j, const uint8_t *W, size_t wrow,
                             size_t o0, size_t span, int n0, int n1, const void *const *act,
                             size_t aoff, int M, float *C, int ldc, bool row1)
{
    pthread_once(&idx_once, idx_init);
    const int NR = M > 1 ? 2 : lf_dec_rows == 1 ? (row1 ? 1 : 2) : lf_dec_rows;
    /* row after row (lf_dec_seq): a distance below the tile's rows still runs ahead */
    const bool seq = lf_dec_seq && row1 && M == 1;
    const int dist = lf_ahead ? ahead_rows(span, seq ? 1 : NR) : 0;
    int started = 0; /* rows the previous call's tail started */
    if (lf_tail_w && lf_tail_w == W + (size_t)n0 * wrow && o0 == 0)
        started = lf_tail_rows;
    lf_tail_w = NULL;
    for (int n = n0 + started; n < n0 + dist && n < n1; n++)
        for (size_t c = 0; c < span; c += 64)
            _mm_prefetch((const char *)W + (size_t)n * wrow + o0 + c, LF_HINT);
    /* the next call's first rows, a share per tile of the last dist rows */
    lf_walk next;
    long per = 0;
    if (hint_take(&next) && dist) {
        int rows = ahead_rows(next.g.len, NR);
        next.g.rows = next.g.rows < rows ? next.g.rows : rows;
        int head = n1 - dist - NR >= n0 ? (n1 - dist - NR - n0) / NR + 1 : 0;
        long tail = (n1 - n0 + NR - 1) / NR - head;
        long lines = (long)next.g.rows * (long)((next.g.len + 63) / 64);
        per = tail > 0 ? (lines + tail - 1) / tail : 0;
    }
    for (int n = n0; n < n1; n += NR) {
        int nr = n1 - n < NR ? n1 - n : NR;
        const uint8_t *wr[4];
        for (int r = 0; r < NR; r++)
            wr[r] = W + (size_t)(n + (r < nr ? r : nr - 1)) * wrow + o0;
        bool in_tail = n + dist + NR > n1;
        if (in_tail)
            walk_step(&next, per);
        for (int m = 0; m < M; m += 4) {
            int mr = M - m < 4 ? M - m : 4;
            size_t ahead = m == 0 && !in_tail ? (size_t)dist * wrow : 0;
            const uint8_t *ar[4];
            for (int i = 0; i < 4; i++)
                ar[i] = (const uint8_t *)act[m + (i < mr ? i : mr - 1)] + aoff;
            float t[16] = {0}; /* only mr x nr written; zeroed for gcc -O2 */
            fam(j, M == 1 ? NR : 2, mr, wr, ar, ahead, t);
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < nr; r++)
                    C[(size_t)(m + i) * ldc + (n + r - n0)] = t[r * 4 + i];
        }
    }
    if (per) {
        lf_tail_w = next.g.w;
        lf_tail_rows = next.r;
    }
}

/* The 64 bytes at c of rows w[r] . tokens act[m] into acc[r][m] (last: the
 * row's final, shorter piece, R - c bytes); prev[r]: the row's previous 64
 * bytes (scale words of blocks begun there), idx: this piece's scale-word
 * indices. */
ALWAYS_INLINE void raw_chunk(const bool q4, const bool nl, const int NR, const int MT,
                             const bool last, const uint8_t *const *w, int c, int R,
                             __m512i idx, const uint8_t *const *act, size_t rp, size_t ahead,
                             __m512i prev[4], __m512 acc[4][4])
{
    /* IQ4_NL: the nibble indexes a level; level + 128 as u8, bias -128 * sum */
    const __m512i levels = _mm512_broadcast_i32x4(_mm_add_epi8(
        _mm_loadu_si128((const __m128i *)kt__iq4nl_values), _mm_set1_epi8((char)0x80)));
    const __m512i low4 = _mm512_set1_epi8(15), top = _mm512_set1_epi8((char)0x80);
    const size_t obias = (q4 ? 2 : 1) * rp, oda = obias + rp;
    __mmask64 lm = last ? ((__mmask64)1 << (R - c)) - 1 : ~(__mmask64)0;
    __mmask16 fm = last ? (__mmask16)((1u << ((R - c + 3) / 4)) - 1) : (__mmask16)0xffff;
    __m512i wl[4], wh[4];
    __m512 dw[4];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        /* rows are short (a few KB): the hardware prefetcher would not ramp
         * up in time, so fetch the next tile's bytes now (ahead 0, in the
         * last tiles: these bytes again, a no-op instead of a branch) */
        _mm_prefetch((const char *)(w[r] + c + ahead), LF_HINT);
        __m512i v = last ? _mm512_maskz_loadu_epi8(lm, w[r] + c)
                         : _mm512_loadu_si512((const void *)(w[r] + c));
        __asm__("" : "+v"(v)); /* one load: gcc would fold it into each use */
        if (q4) {
            wl[r] = _mm512_and_si512(v, low4);
            wh[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            if (nl) {
                wl[r] = _mm512_shuffle_epi8(levels, wl[r]);
                wh[r] = _mm512_shuffle_epi8(levels, wh[r]);
            }
        } else {
            wl[r] = _mm512_xor_si512(v, top);
        }
        __m512i sw = _mm512_permutex2var_epi16(prev[r], idx, v);
        dw[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(sw));
        prev[r] = v;
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MT; m++) {
        const uint8_t *a = act[m] + c;
        __m512i alo = _mm512_loadu_si512((const void *)a);
        __m512i ahi = q4 ? _mm512_loadu_si512((const void *)(a + rp)) : alo;
        __m512i bias = _mm512_loadu_si512((const void *)(a + obias));
        if (nl)
            bias = _mm512_slli_epi32(bias, 4); /* -8 * sum -> -128 * sum */
        __m512 da = _mm512_loadu_ps((const void *)(a + oda));
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m512i d = _mm512_dpbusd_epi32(bias, wl[r], alo);
            if (q4)
                d = _mm512_dpbusd_epi32(d, wh[r], ahi);
            __m512 s = _mm512_mul_ps(dw[r], da);
            acc[r][m] = last ? _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[r][m], fm)
                             : _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), s, acc[r][m]);
        }
    }
}

/* acc[r][m] += the R bytes of rows w[r] . tokens act[m], NR rows x MT tokens
 * side by side: whole 64-byte pieces in a loop without masks or branches, then
 * the last. */
ALWAYS_INLINE void raw_rows(const bool q4, const bool nl, const int NR, const int MT,
                            const uint8_t *const *w, int R, int phase, const uint8_t *const *act,
                            size_t rp, size_t ahead, __m512 acc[4][4])
{
    /* this piece's scale-word indices, 16 entries (64 bytes) on a piece */
    const uint16_t(*tab)[16] = q4 ? (const uint16_t(*)[16])idx40 : (const uint16_t(*)[16])idx80;
    const uint16_t(*end)[16] = tab + (q4 ? PERIOD40 : PERIOD80) / 4, (*t)[16] = tab + phase / 4;
    __m512i prev[4];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        prev[r] = _mm512_setzero_si512();
    int c = 0;
    for (; c + 64 <= R; c += 64) {
        __m512i idx = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)*t));
        t = t + 16 >= end ? t + 16 - (end - tab) : t + 16;
        raw_chunk(q4, nl, NR, MT, false, w, c, R, idx, act, rp, ahead, prev, acc);
    }
    if (c < R) {
        __m512i idx = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)*t));
        raw_chunk(q4, nl, NR, MT, true, w, c, R, idx, act, rp, ahead, prev, acc);
    }
}

/* out[r][m] = rows w[r] . tokens act[m]; one token (SEQ): row after row. */
ALWAYS_INLINE void raw_tile(const bool q4, const bool nl, const int NR, const int MT,
                            const bool seq, const uint8_t *const *w, int R, int phase,
                            const uint8_t *const *act, size_t rp, size_t ahead, float *out)
{
    __m512 acc[4][4];
    acc_zero(NR, MT, acc);
    if (seq && MT == 1)
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            raw_rows(q4, nl, 1, 1, w + r, R, phase, act, rp, ahead, acc + r);
    else
        raw_rows(q4, nl, NR, MT, w, R, phase, act, rp, ahead, acc);
    tile_store(NR, MT, acc, out);
}

#define RAW_TILE(NR, MT, Q4, NL)                                                               \
    (lf_dec_seq ? raw_tile(Q4, NL, NR, MT, true, w, j->R, j->phase, a, j->rp, ahead, out)     \
                : raw_tile(Q4, NL, NR, MT, false, w, j->R, j->phase, a, j->rp, ahead, out))

static void raw_family(const tile_job *j, int nrow, int mr, const uint8_t *const *w,
                       const uint8_t *const *a, size_t ahead, float *out)
{
    if (nrow == 1) { /* KT_LF_DEC_ROWS=1 */
        if (j->type == KT_TYPE_Q4_0)
            RAW_TILE(1, 1, true, false);
        else if (j->type == KT_TYPE_IQ4_NL)
            RAW_TILE(1, 1, true, true);
        else
            RAW_TILE(1, 1, false, false);
        return;
    }
    if (j->type == KT_TYPE_Q4_0)
        TILE_SWITCH(RAW_TILE, true, false);
    else if (j->type == KT_TYPE_IQ4_NL)
        TILE_SWITCH(RAW_TILE, true, true);
    else
        TILE_SWITCH(RAW_TILE, false, false);
}

void kt__lf_gemm_raw_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                            const void *const *act, size_t rp, int M, float *C, int ldc)
{
    pthread_once(&idx_once, idx_init); /* idx40 / idx80 */
    const bool q4 = type != KT_TYPE_Q8_0; /* Q4_0, IQ4_NL: 18-byte blocks */
    const int bb = q4 ? 18 : 34, period = q4 ? PERIOD40 : PERIOD80;
    const size_t o0 = (size_t)b0 * bb;
    const tile_job j = {type, 0, (b1 - b0) * bb, (int)(o0 % (size_t)period), rp};
    tile_rows(raw_family, &j, W, wrow, o0, (size_t)j.R, n0, n1, act, o0, M, C, ldc, true);
}

/* ---------------------------------------------------------------------------
 * Q4_0 repacked at load time (KT__LF_Q40X, cpu/moe_kernels.h): each 4-byte lane
 * of a step holds 8 nibbles of one block, so a lane's integer sums gather over
 * the steps of a group (g blocks) and the scales are applied once a group:
 *
 *   d    = bias + lo(w) . a_lo + hi(w) . a_hi    per step (vpdpbusd, u8 x s8)
 *   acc += float(d) * dw * da                    per group, 16 lanes
 *
 * bias: -8 x the sum of the block's codes, in the block's first lane (g 16:
 * every lane is a block), dw / da the lane's block's weight / activation
 * scales. Per 64 weight bytes: a load, 3 nibble operations and 2 vpdpbusd;
 * per 16 blocks one conversion, scale product and FMA. The tile's 4 rows
 * lie in one stream, prefetched lf_ahead bytes on (into the hinted next
 * call's tiles at the end).
 *
 * Q4_K repacked (KT__LF_Q4KX) runs the same steps over its sub-blocks of 32
 * (unsigned codes: no bias), then per group of 16 sub-blocks
 *
 *   acc += float(d) * (d_w sc) * da - (dmin_w m) * (da sum_a)   16 lanes
 *
 * with sc, m the sub-blocks' 6-bit scale and min (bytes in the tile), d_w,
 * dmin_w their block's f16, da sum_a the Q8_K section's d x (sum of the codes).
 *
 * Q8_0 repacked (KT__LF_Q80X): twice the steps, the codes stored + 128:
 *
 *   d    = bias + (w + 128) . a     per step (one vpdpbusd), bias -128 x sum_a
 *   acc += float(d) * dw * da       per group, as Q40X
 */

/* A Q4KX group's scale, min and (d, dmin) lines (128 bytes for groups of 16
 * sub-blocks, 64 for 8), after its S steps at pf + go, started into L2 (pf
 * NULL: none). */
ALWAYS_INLINE void k4x_pf_scales(const int S, const uint8_t *pf, size_t go)
{
    if (!pf)
        return;
    _mm_prefetch((const char *)pf + go + S * 256, LF_HINT);
    if (S == 4)
        _mm_prefetch((const char *)pf + go + S * 256 + 64, LF_HINT);
}

/* Row pair h's scales and mins of the Q4KX group (g = 4 S sub-blocks) whose
 * steps end at meta, as words in the pair order (moe_kernels.h: word 8 k + 4 p + i
 * sub-block 4 k + i of row 2 h + p; S 2: words 16-31 repeat 0-15 in scw, zero in
 * mw). nib: the group's min nibble bytes as words (k4x_nibs). */
ALWAYS_INLINE void k4x_pair(const int S, const uint8_t *meta, int h, __m512i nib, __m512i *scw,
                            __m512i *mw)
{
    const uint8_t *pa = meta + (size_t)h * 8 * S;
    __m512i a = S == 4 ? _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)pa))
                       : _mm512_cvtepu8_epi16(_mm256_broadcastsi128_si256(
                             _mm_loadu_si128((const __m128i *)pa)));
    *scw = _mm512_and_si512(a, _mm512_set1_epi16(63));
    /* m = (a >> 2) & 0x30 | nibble: one bit select (vpternlog 0xd8: c ? b : a) */
    __m512i n = h ? _mm512_srli_epi16(nib, 4) : nib;
    __m512i x = _mm512_srli_epi16(a, 2);
    *mw = S == 4 ? _mm512_ternarylogic_epi32(x, n, _mm512_set1_epi16(15), 0xd8)
                 : _mm512_maskz_ternarylogic_epi32(0x00ff, x, n, _mm512_set1_epi16(15), 0xd8);
}

/* The group's min nibble bytes (both pairs') as words, in the pair order. */
ALWAYS_INLINE __m512i k4x_nibs(const int S, const uint8_t *meta)
{
    const uint8_t *pb = meta + (size_t)16 * S;
    return S == 4 ? _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)pb))
                  : _mm512_cvtepu8_epi16(
                        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pb)));
}

/* The group's (d, dmin) pairs as floats: lane 4 r + 2 blk + (0: d, 1: dmin)
 * (S 2: 2 r + ...). */
ALWAYS_INLINE __m512 k4x_dmins(const int S, const uint8_t *meta)
{
    const uint8_t *pd = meta + (size_t)24 * S;
    return S == 4 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)pd))
                  : _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pd)));
}

/* The Q4KX group's weight factors of rows r0 .. r0 + NR - 1 (NR 4, or 2 with r0 a
 * pair's first): ws = d_w sc, wm = dmin_w m per lane (S 2: lanes 8-15 repeat 0-7 in
 * ws, zero in wm). */
ALWAYS_INLINE void k4x_factors(const int S, const int NR, const uint8_t *t, size_t go, int r0,
                               __m512 ws[4], __m512 wm[4])
{
    const int g = 4 * S;
    const uint8_t *meta = t + go + (size_t)g * 64;
    const __m512 f = k4x_dmins(S, meta);
    const __m512i nib = k4x_nibs(S, meta);
    /* dword lane l <- pair word 8 (l / 4) + 4 p + l % 4, the odd words zero */
    const __m512i wi = _mm512_set_epi16(0, 27, 0, 26, 0, 25, 0, 24, 0, 19, 0, 18, 0, 17, 0, 16,
                                        0, 11, 0, 10, 0, 9, 0, 8, 0, 3, 0, 2, 0, 1, 0, 0);
    #pragma GCC unroll 2
    for (int h = r0 / 2; h < (r0 + NR) / 2; h++) {
        __m512i scw, mw;
        k4x_pair(S, meta, h, nib, &scw, &mw);
        #pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const int r = 2 * h + p;
            __m512i idx = _mm512_add_epi16(wi, _mm512_set1_epi16((short)(4 * p)));
            __m512i sc = _mm512_maskz_permutexvar_epi16(0x55555555, idx, scw);
            __m512i mn = _mm512_maskz_permutexvar_epi16(0x55555555, idx, mw);
            /* lanes 0-7 the first block's (d, dmin), 8-15 the second's (S 2: the one) */
            const int i0 = S == 4 ? 4 * r : 2 * r, i1 = S == 4 ? 4 * r + 2 : 2 * r;
            const __m512i di = _mm512_set_epi32(i1, i1, i1, i1, i1, i1, i1, i1, i0, i0, i0, i0, i0,
                                                i0, i0, i0);
            ws[r - r0] = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_permutexvar_ps(di, f));
            wm[r - r0] = _mm512_mul_ps(_mm512_cvtepi32_ps(mn),
                                       _mm512_permutexvar_ps(
                                           _mm512_add_epi32(di, _mm512_set1_epi32(1)), f));
        }
    }
}

/* The repacked layouts (moe_kernels.h). */
enum { X40, X4K, X80, X4K3 };

/* v[r] = the 64 bytes of row r0 + r of the step at st; the step's 256 bytes at pf
 * started into L2 (pf NULL: none). */
ALWAYS_INLINE void x_step_rows(const int NR, const uint8_t *st, int r0, const uint8_t *pf,
                               __m512i v[4])
{
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        v[r] = _mm512_loadu_si512((const void *)(st + (r0 + r) * 64));
        __asm__("" : "+v"(v[r])); /* one load: gcc would fold it into each use */
    }
    if (pf)
        #pragma GCC unroll 4
        for (int l = 0; l < 4; l++)
            _mm_prefetch((const char *)pf + 64 * l, LF_HINT);
}

/* acc[r][m] += rows r0 .. r0 + NR - 1 of the tile at t . tokens act[m], over the
 * group at byte go of g = 4 S blocks from block gb of nb (S 1: maybe the padded
 * last) in layout kind: S steps of 64 bytes a row (X80: 2 S); pf: where to
 * prefetch the tile's byte 0 (NULL: none). */
ALWAYS_INLINE void x40_group(const int kind, const int S, const int NR, const int MT,
                             const uint8_t *t, size_t go, const uint8_t *pf, int r0, int gb,
                             int nb, const uint8_t *const *act, size_t xs, __m512 acc[4][4])
{
    const bool k4 = kind == X4K;
    const int g = 4 * S, NS = kind == X80 ? 2 * S : S;
    const __m512i low4 = _mm512_set1_epi8(15);
    const __mmask16 bm = S == 4 ? (__mmask16)0xffff
                                : (__mmask16)((1u << (nb - gb < g ? nb - gb : g)) - 1);
    __m512i d[4][4];
    #pragma GCC unroll 4
    for (int m = 0; m < MT; m++) {
        __m512i bias = k4       ? _mm512_setzero_si512()
                       : S == 4 ? _mm512_loadu_si512((const void *)(act[m] + 4 * gb))
                                : _mm512_maskz_loadu_epi32(bm, act[m] + 4 * gb);
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            d[r][m] = bias;
    }
    #pragma GCC unroll 8
    for (int s = 0; s < NS && kind == X80; s++) { /* d += (w + 128) . a */
        __m512i v[4];
        x_step_rows(NR, t + go + s * 256, r0, pf ? pf + go + s * 256 : NULL, v);
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            __m512i a = _mm512_loadu_si512(
                (const void *)(act[m] + 2 * xs + (size_t)(gb / 2 + s) * 64));
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                d[r][m] = _mm512_dpbusd_epi32(d[r][m], v[r], a);
        }
    }
    #pragma GCC unroll 4
    for (int s = 0; s < S && kind != X80; s++) {
        __m512i v[4], lo[4], hi[4];
        x_step_rows(NR, t + go + s * 256, r0, pf ? pf + go + s * 256 : NULL, v);
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            lo[r] = _mm512_and_si512(v[r], low4);
            hi[r] = _mm512_and_si512(_mm512_srli_epi16(v[r], 4), low4);
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const uint8_t *a = act[m] + 2 * xs + (size_t)(gb / 4 + s) * 128;
            __m512i alo = _mm512_loadu_si512((const void *)a);
            __m512i ahi = _mm512_loadu_si512((const void *)(a + 64));
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                d[r][m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(d[r][m], lo[r], alo), hi[r],
                                              ahi);
        }
    }
    const uint8_t *sc = t + go + NS * 256;
    if (pf) { /* the scale lines: 128 bytes (g 16) or 64 */
        _mm_prefetch((const char *)pf + go + NS * 256, LF_HINT);
        if (S == 4)
            _mm_prefetch((const char *)pf + go + NS * 256 + 64, LF_HINT);
    }
    if (k4) {
        __m512 ws[4], wm[4];
        k4x_factors(S, NR, t, go, r0, ws, wm);
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const float *sa = (const float *)act[m] + gb, *da = (const float *)(act[m] + xs) + gb;
            __m512 vs = S == 4 ? _mm512_loadu_ps(sa) : _mm512_broadcast_f32x8(_mm256_loadu_ps(sa));
            __m512 va = S == 4 ? _mm512_loadu_ps(da) : _mm512_broadcast_f32x8(_mm256_loadu_ps(da));
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                acc[r][m] = _mm512_fnmadd_ps(wm[r], vs,
                                             _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r][m]),
                                                             _mm512_mul_ps(ws[r], va), acc[r][m]));
        }
        return;
    }
    __m512 dw[4];
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        const uint8_t *p = sc + (r0 + r) * 2 * g; /* g f16, repeated over 16 lanes */
        __m256i h;
        if (S == 4) {
            h = _mm256_loadu_si256((const __m256i *)p);
        } else if (S == 2) {
            h = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
        } else {
            long long q;
            memcpy(&q, p, 8);
            h = _mm256_set1_epi64x(q);
        }
        dw[r] = _mm512_cvtph_ps(h);
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MT; m++) {
        const float *bd = (const float *)(act[m] + xs) + gb;
        __m512 da = S == 4   ? _mm512_loadu_ps(bd)
                    : S == 2 ? _mm512_broadcast_f32x8(_mm256_loadu_ps(bd))
                             : _mm512_broadcast_f32x4(_mm_maskz_loadu_ps((__mmask8)(bm & 0xf), bd));
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r][m]), _mm512_mul_ps(dw[r], da),
                                        acc[r][m]);
    }
}

/* Q4KX, the third group kernel (KT_LF_Q4K=3; one-token tiles, 4 rows): the
 * sub-block scales applied in integers, two rows a register. Per step a row
 * costs a load, two ands and two vpdpbusd (no shift: the high nibbles stay in
 * place, v & 0xf0 = 16 x the code, summed apart); per group and row pair
 *
 *   T  = (dl r0 | dl r1) . sc + (dh r0 | dh r1) >> 4 . sc   vpackssdw, vpmaddwd
 *   M  = (m r0 | m r1) . bsum                                vpmaddwd
 *   acct += float(T) * d_w da;  accm += float(M) * dmin_w da   16 lanes each
 *
 * against session 9's conversion and product of sc and m per row and group
 * (k4x_factors). The words fit:
 * |dl|, |dh >> 4| <= 16 x 15 x 128 (a lane's 16 products of a group), sc, m
 * < 64, |bsum| <= 32 x 128; a lane of T sums 4 products (< 2^23): exact in
 * float. T's 128-bit lane k holds sub-blocks 4k..4k+3 (mod g), its 4 words
 * pairs: r0, r0, r1, r1; the repack stores sc and m in that order (k4x_pair),
 * so M's lanes are T's and the token's bsum is spread to match (one vpermq a
 * group). The 4 rows' (d, dmin) of the group are one load (k4x_dmins), times
 * da once; each pair's T and M factors a vpermps from it. */
ALWAYS_INLINE void k4x3_group(const int S, const uint8_t *t, size_t go, const uint8_t *pf,
                              int gb, int nb, const uint8_t *act, size_t xs, __m512 acct[2],
                              __m512 accm[2])
{
    const int g = 4 * S;
    const __m512i low4 = _mm512_set1_epi8(15), high4 = _mm512_set1_epi8((char)0xf0);
    __m512i dl[4], dh[4];
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        dl[r] = dh[r] = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        __m512i v[4];
        x_step_rows(4, t + go + s * 256, 0, pf ? pf + go + s * 256 : NULL, v);
        const uint8_t *a = act + 2 * xs + (size_t)(gb / 4 + s) * 128;
        __m512i alo = _mm512_loadu_si512((const void *)a);
        __m512i ahi = _mm512_loadu_si512((const void *)(a + 64));
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            dl[r] = _mm512_dpbusd_epi32(dl[r], _mm512_and_si512(v[r], low4), alo);
            dh[r] = _mm512_dpbusd_epi32(dh[r], _mm512_and_si512(v[r], high4), ahi);
        }
    }
    k4x_pf_scales(S, pf, go);
    const uint8_t *meta = t + go + (size_t)g * 64;
    /* the token's: va lanes 0-7 the first block's da, 8-15 the second's (S 2:
     * the one); bw the code sums per 32 in the pair order (qword 2k, 2k + 1 <-
     * sub-blocks 4k..4k+3) */
    const float *dap = (const float *)(act + xs) + gb;
    const int16_t *bs = (const int16_t *)(act + 2 * xs + (size_t)(nb + 3) / 4 * 128) + gb;
    const __m512i qi = _mm512_set_epi64(3, 3, 2, 2, 1, 1, 0, 0);
    __m512i bw = S == 4 ? _mm512_permutexvar_epi64(
                              qi, _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)bs)))
                        : _mm512_permutexvar_epi64(
                              qi, _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)bs)));
    /* fd = the (d, dmin) pairs (k4x_dmins' lanes) times their block's da */
    __m512 fd;
    if (S == 4) {
        __m512 va = _mm512_loadu_ps(dap);
        fd = _mm512_mul_ps(k4x_dmins(4, meta),
                           _mm512_permutexvar_ps(
                               _mm512_set_epi32(8, 8, 0, 0, 8, 8, 0, 0, 8, 8, 0, 0, 8, 8, 0, 0),
                               va));
    } else {
        fd = _mm512_mul_ps(k4x_dmins(2, meta), _mm512_set1_ps(dap[0]));
    }
    const __m512i nib = k4x_nibs(S, meta);
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        /* T / M lane 4k + j: row 2h + j / 2, block k / 2 (S 2: 0) */
        const __m512i ti =
            S == 4 ? _mm512_add_epi32(_mm512_set_epi32(6, 6, 2, 2, 6, 6, 2, 2, 4, 4, 0, 0, 4, 4, 0, 0),
                                      _mm512_set1_epi32(8 * h))
                   : _mm512_add_epi32(_mm512_set_epi32(2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0, 0),
                                      _mm512_set1_epi32(4 * h));
        __m512i scw, mw;
        k4x_pair(S, meta, h, nib, &scw, &mw);
        __m512i pl = _mm512_packs_epi32(dl[2 * h], dl[2 * h + 1]);
        __m512i ph = _mm512_packs_epi32(_mm512_srai_epi32(dh[2 * h], 4),
                                        _mm512_srai_epi32(dh[2 * h + 1], 4));
        __m512i T = _mm512_add_epi32(_mm512_madd_epi16(pl, scw), _mm512_madd_epi16(ph, scw));
        acct[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(T), _mm512_permutexvar_ps(ti, fd), acct[h]);
        accm[h] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(_mm512_madd_epi16(mw, bw)),
            _mm512_permutexvar_ps(_mm512_add_epi32(ti, _mm512_set1_epi32(1)), fd), accm[h]);
    }
}

/* out[r * 4] = row r of the tile at t . the token at act (r < 4): k4x3_group
 * over groups of 16 and 8 sub-blocks (K a multiple of 256). */
ALWAYS_INLINE void k4x3_tile(const uint8_t *t, const uint8_t *pf, int nb, const uint8_t *act,
                             size_t xs, float *out)
{
    __m512 acct[2], accm[2], acc[4][4];
    acct[0] = acct[1] = accm[0] = accm[1] = _mm512_setzero_ps();
    size_t go = 0;
    int b = 0;
    for (; b + 16 <= nb; b += 16, go += (size_t)72 * 16)
        k4x3_group(4, t, go, pf, b, nb, act, xs, acct, accm);
    if (nb - b >= 8)
        k4x3_group(2, t, go, pf, b, nb, act, xs, acct, accm);
    /* row 2h: T's lanes 0, 1 of each 4; row 2h + 1: the others. M's lanes back
     * to sub-block pair order (0-7 r0's pairs, 8-15 r1's) first, so that the
     * lanes sum in the order they did before the packed scales (same floats). */
    const __m512i mo = _mm512_set_epi32(15, 14, 11, 10, 7, 6, 3, 2, 13, 12, 9, 8, 5, 4, 1, 0);
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512 a = _mm512_maskz_mov_ps(0x3333, acct[h]), c = _mm512_maskz_mov_ps(0xcccc, acct[h]);
        __m512 m = _mm512_permutexvar_ps(mo, accm[h]);
        acc[2 * h][0] = _mm512_mask_sub_ps(a, 0x00ff, a, m);
        acc[2 * h + 1][0] = _mm512_mask_sub_ps(c, 0xff00, c, m);
    }
    tile_store(4, 1, acc, out);
}

/* Bytes of a group of g blocks in layout kind. */
ALWAYS_INLINE size_t x_group_bytes(const int kind, int g)
{
    return kind == X4K || kind == X4K3 ? (size_t)72 * g : kind == X80 ? kt__q80x_group_bytes(g)
                                                      : kt__q40x_group_bytes(g);
}

/* out[(r0 + r) * 4 + m] = row r0 + r of the tile at t . token act[m], r < NR, m < MT. */
ALWAYS_INLINE void x40_tile(const int kind, const int NR, const int MT, const uint8_t *t,
                            const uint8_t *pf, int r0, int nb, const uint8_t *const *act,
                            size_t xs, float *out)
{
    /* Q4KX: groups of 16 and 8 sub-blocks (K a multiple of 256) */
    const bool k4 = kind == X4K;
    __m512 acc[4][4];
    acc_zero(NR, MT, acc);
    size_t go = 0;
    int b = 0;
    for (; b + 16 <= nb; b += 16, go += x_group_bytes(kind, 16))
        x40_group(kind, 4, NR, MT, t, go, pf, r0, b, nb, act, xs, acc);
    if (nb - b >= 8) {
        x40_group(kind, 2, NR, MT, t, go, pf, r0, b, nb, act, xs, acc);
        go += x_group_bytes(kind, 8), b += 8;
    }
    if (!k4 && nb - b >= 4) {
        x40_group(kind, 1, NR, MT, t, go, pf, r0, b, nb, act, xs, acc);
        go += x_group_bytes(kind, 4), b += 4;
    }
    if (!k4 && nb > b)
        x40_group(kind, 1, NR, MT, t, go, pf, r0, b, nb, act, xs, acc);
    tile_store(NR, MT, acc, out + r0 * 4);
}

/* Rows 0..3 of the tile at t . tokens act[0 .. mr - 1] into out[r * 4 + m]: one
 * token 4 rows at once (X4K3: k4x3_tile), more 2 rows x mr tokens twice (pf: the
 * first pass only). */
ALWAYS_INLINE void x40_tiles(const int kind, int mr, const uint8_t *t, const uint8_t *pf,
                             int nb, const uint8_t *const *act, size_t xs, float *out)
{
    /* 2 rows x 2-4 tokens keep X4K: there session 11's kernel 2's shift and add
     * per row and token (and its min products per token) cost more than the
     * shift per row it saved (objdump, a group of 16: 292 against 264
     * instructions at 2 x 4) */
    const int k2 = kind == X4K3 ? X4K : kind;
    if (mr == 1 && kind == X4K3)
        k4x3_tile(t, pf, nb, act[0], xs, out);
    else if (mr == 1)
        x40_tile(kind, 4, 1, t, pf, 0, nb, act, xs, out);
    for (int r0 = 0; r0 < 4 && mr > 1; r0 += 2, pf = NULL) {
        if (mr == 2)
            x40_tile(k2, 2, 2, t, pf, r0, nb, act, xs, out);
        else if (mr == 3)
            x40_tile(k2, 2, 3, t, pf, r0, nb, act, xs, out);
        else
            x40_tile(k2, 2, 4, t, pf, r0, nb, act, xs, out);
    }
}

/* One tile of layout KIND at the call loop's position. */
#define X_CALL_TILE(KIND) x40_tiles(KIND, mr, tp, p1, nb, ar, xs, out)


void kt__lf_gemm_q40x_avx512(const kt__wmat *W, int n0, int n1, const void *const *act,
                             size_t xs, int M, float *C, int ldc)
{
    pthread_once(&idx_once, idx_init); /* lf_ahead */
    const int nb = W->cols / 32, t0 = n0 / 4, t1 = (n1 + 3) / 4;
    const int kind = W->type == KT__LF_Q4KX ? (lf_q4k == 3 ? X4K3 : X4K)
                     : W->type == KT__LF_Q80X ? X80
                                              : X40;
    const size_t tb = kt__lf_x_tile_bytes(W->type, W->cols);
    const size_t ahead = (size_t)(kind == X80   ? lf_x80_ahead
                                  : kind == X40 ? lf_x40_ahead
                                                : lf_ahead);
    const uint8_t *start = (const uint8_t *)W->w + (size_t)t0 * tb;
    const size_t total = (size_t)(t1 - t0) * tb;
    /* the first lf_ahead bytes at once, less what the last call's tail started */
    size_t o = lf_tail_w == start ? (size_t)lf_tail_rows * tb : 0;
    lf_tail_w = NULL;
    for (; ahead && o < ahead && o < total; o += 64)
        _mm_prefetch((const char *)start + o, LF_HINT);
    /* past this call's bytes the prefetches run on into the hinted next call's */
    lf_walk nx;
    size_t nbytes = 0, ndone = 0;
    if (hint_take(&nx) && ahead && nx.g.len == nx.g.wrow) {
        nbytes = (size_t)nx.g.rows * nx.g.wrow;
        nbytes = nbytes < ahead ? nbytes : ahead;
    }
    for (int t = t0; t < t1; t++) {
        const uint8_t *tp = (const uint8_t *)W->w + (size_t)t * tb, *pf = NULL;
        size_t to = (size_t)(t - t0) * tb + ahead;
        if (ahead && to < total) {
            pf = start + to;
        } else if (ahead && to - total < nbytes) {
            pf = nx.g.w + (to - total);
            ndone = to - total + tb < nbytes ? to - total + tb : nbytes;
        }
        for (int m = 0; m < M; m += 4) {
            int mr = M - m < 4 ? M - m : 4;
            const uint8_t *ar[4];
            for (int i = 0; i < 4; i++)
                ar[i] = (const uint8_t *)act[m + (i < mr ? i : mr - 1)];
            float out[16];
            const uint8_t *p1 = m == 0 ? pf : NULL;
            if (kind == X40) /* each layout's tiles compiled apart */
                X_CALL_TILE(X40);
            else if (kind == X4K)
                X_CALL_TILE(X4K);
            else if (kind == X4K3)
                X_CALL_TILE(X4K3);
            else
                X_CALL_TILE(X80);
            for (int r = 0; r < 4; r++)
                if (4 * t + r >= n0 && 4 * t + r < n1)
                    for (int i = 0; i < mr; i++)
                        C[(size_t)(m + i) * ldc + (4 * t + r - n0)] = out[r * 4 + i];
        }
    }
    if (ndone >= nx.g.wrow && nx.g.wrow) {
        lf_tail_w = nx.g.w;
        lf_tail_rows = (int)(ndone / nx.g.wrow);
    }
}

/* ---------------------------------------------------------------------------
 * Q4_K x Q8_K. Per 256-input block and row, with the nibbles of qs bytes
 * 0..63 / 64..127 in two registers (low nibbles: groups 0, 2 / 4, 6; high:
 * 1, 3 / 5, 7) against the activation codes gathered in the same order:
 *
 *   T    = sum_g sc_g (q_g . a_g)        vpmaddubsw, then vpdpwssd with sc_g
 *   Mn   = sum_g m_g (bsum_2g + bsum_2g+1)   vpmaddwd
 *   acc += float(T) d da;  accm += float(Mn) dmin da;  out = sum acc - sum accm
 *
 * (q <= 15, |a| <= 127: the 16-bit pair sums cannot saturate.)
 */

/* The 8 6-bit scales and mins of a Q4_K / Q5_K block as bytes. */
ALWAYS_INLINE void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *mn)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *mn = m_lo | (uint64_t)m_hi << 32;
}

/* Activation codes of block y in the weights' nibble order. */
ALWAYS_INLINE void k_act(const kt_block_q8_K *y, __m512i a[4])
{
    #pragma GCC unroll 4
    for (int h = 0; h < 4; h++) {
        const int8_t *q = y->qs + 128 * (h / 2) + 32 * (h % 2);
        a[h] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)q)),
                                  _mm256_loadu_si256((const __m256i *)(q + 64)), 1);
    }
}

/* (d, dmin, ...): the two f16 at p as floats. */
ALWAYS_INLINE __m128 d_dmin(const void *p)
{
    uint32_t dm;
    memcpy(&dm, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
}

/* sum_h sc[h] (q[h] . a[h]) per 16-bit pair, summed into 32-bit lanes
 * (vpmaddubsw, then vpdpwssd with the pairs' scales). */
ALWAYS_INLINE __m512i k_codes_dot(const __m512i q[4], const __m512i a[4], const __m512i sc[4])
{
    __m512i t = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
        t = _mm512_dpwssd_epi32(t, _mm512_maddubs_epi16(q[h], a[h]), sc[h]);
    return t;
}

/* One Q8_K block of token m against NR rows of a K type (Q4_K, Q5_K, Q2_K): the
 * codes' products through the 16-bit sub-block scales sc, times d_r d_m, into
 * acc; the minimum terms (bsums . mins[r]) times dmin_r d_m into accm.
 * dd[r] holds (d, dmin) of row r's block. */
ALWAYS_INLINE void k_block_accumulate(const int NR, const int m, const kt_block_q8_K *y,
                                      const __m512i a[4], const __m512i q[4][4],
                                      const __m512i sc[4][4], const __m256i mins[4],
                                      const __m128 dd[4], __m512 acc[4][4], __m256 accm[4][4])
{
    __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    __m128 da = _mm_set1_ps(y->d);
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        __m512i t = k_codes_dot(q[r], a, sc[r]);
        __m256i mn = _mm256_madd_epi16(bs, mins[r]);
        __m128 s = _mm_mul_ps(dd[r], da); /* (d_r d_m, dmin_r d_m) */
        acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_broadcastss_ps(s), acc[r][m]);
        accm[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mn),
                                     _mm256_permutexvar_ps(_mm256_set1_epi32(1),
                                                           _mm256_castps128_ps256(s)),
                                     accm[r][m]);
    }
}

/* acc[r][m] = 0, accm[r][m] = 0 (the K types with minimum terms). */
ALWAYS_INLINE void k_acc_zero(const int NR, const int MT, __m512 acc[4][4], __m256 accm[4][4])
{
    acc_zero(NR, MT, acc);
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++)
            accm[r][m] = _mm256_setzero_ps();
}

/* out[r * 4 + m] = sum of acc[r][m] - sum of accm[r][m]. */
ALWAYS_INLINE void k_tile_store(const int NR, const int MT, __m512 acc[4][4], __m256 accm[4][4],
                                float *out)
{
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc[r][m]),
                                     _mm512_extractf32x8_ps(acc[r][m], 1));
            h = _mm256_sub_ps(h, accm[r][m]);
            __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            x = _mm_add_ps(x, _mm_movehl_ps(x, x));
            x = _mm_add_ss(x, _mm_movehdup_ps(x));
            out[r * 4 + m] = _mm_cvtss_f32(x);
        }
}

/* out[r * 4 + m] = rows w[r] (nb Q4_K blocks; q5: Q5_K) . tokens act[m] (Q8_K blocks).
 * Q5_K: the 5th bit of the code of input 32g + l is bit g of qh[l]. */
ALWAYS_INLINE void q4k_tile(const bool q5, const int NR, const int MT, const uint8_t *const *w,
                            int nb, const uint8_t *const *act, size_t ahead, float *out)
{
    const size_t bb = q5 ? sizeof(kt_block_q5_K) : sizeof(kt_block_q4_K);
    const size_t oqs = q5 ? offsetof(kt_block_q5_K, qs) : offsetof(kt_block_q4_K, qs);
    __m512 acc[4][4];
    __m256 accm[4][4];
    k_acc_zero(NR, MT, acc, accm);
    const __m512i low4 = _mm512_set1_epi8(15);
    /* vpshufb patterns: 128-bit lanes of (sc_a, sc_a, sc_b, sc_b) as words */
    const __m512i pick[4] = {
        _mm512_set_epi64(0x0504050405040504, 0x0504050405040504, 0x0504050405040504,
                         0x0504050405040504, 0x0100010001000100, 0x0100010001000100,
                         0x0100010001000100, 0x0100010001000100),
        _mm512_set_epi64(0x0706070607060706, 0x0706070607060706, 0x0706070607060706,
                         0x0706070607060706, 0x0302030203020302, 0x0302030203020302,
                         0x0302030203020302, 0x0302030203020302),
        _mm512_set_epi64(0x0d0c0d0c0d0c0d0c, 0x0d0c0d0c0d0c0d0c, 0x0d0c0d0c0d0c0d0c,
                         0x0d0c0d0c0d0c0d0c, 0x0908090809080908, 0x0908090809080908,
                         0x0908090809080908, 0x0908090809080908),
        _mm512_set_epi64(0x0f0e0f0e0f0e0f0e, 0x0f0e0f0e0f0e0f0e, 0x0f0e0f0e0f0e0f0e,
                         0x0f0e0f0e0f0e0f0e, 0x0b0a0b0a0b0a0b0a, 0x0b0a0b0a0b0a0b0a,
                         0x0b0a0b0a0b0a0b0a, 0x0b0a0b0a0b0a0b0a),
    };
    for (int i = 0; i < nb; i++) {
        __m512i q[4][4], sc[4][4];
        __m256i mw[4];
        __m128 dd[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            /* d, dmin and scales lie at the same offsets in Q4_K and Q5_K */
            const kt_block_q4_K *x = (const kt_block_q4_K *)(w[r] + i * bb);
            prefetch_block(x, ahead, bb);
            const uint8_t *qs = (const uint8_t *)x + oqs;
            __m512i v0 = _mm512_loadu_si512((const void *)qs);
            __m512i v1 = _mm512_loadu_si512((const void *)(qs + 64));
            q[r][0] = _mm512_and_si512(v0, low4);
            q[r][1] = _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4);
            q[r][2] = _mm512_and_si512(v1, low4);
            q[r][3] = _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4);
            if (q5) {
                /* register h holds groups g = (h % 2) + 4 (h / 2) and g + 2:
                 * add 16 where bit g (g + 2) of qh[l] is set */
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    (const __m256i *)((const kt_block_q5_K *)(const void *)x)->qh));
                #pragma GCC unroll 4
                for (int h = 0; h < 4; h++) {
                    int g = (h % 2) + 4 * (h / 2);
                    __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << g)),
                                                     _mm256_set1_epi8((char)(1 << (g + 2))), 1);
                    q[r][h] = _mm512_mask_add_epi8(q[r][h], _mm512_test_epi8_mask(qh, sel),
                                                   q[r][h], _mm512_set1_epi8(16));
                }
            }
            uint64_t s8, m8;
            k4_scales(x->scales, &s8, &m8);
            __m512i sw =
                _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)s8)));
            #pragma GCC unroll 4
            for (int h = 0; h < 4; h++)
                sc[r][h] = _mm512_shuffle_epi8(sw, pick[h]);
            __m256i m32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8));
            mw[r] = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));
            dd[r] = d_dmin(&x->d);
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const kt_block_q8_K *y = (const kt_block_q8_K *)(const void *)act[m] + i;
            __m512i a[4];
            k_act(y, a);
            k_block_accumulate(NR, m, y, a, q, sc, mw, dd, acc, accm);
        }
    }
    k_tile_store(NR, MT, acc, accm, out);
}

/* The K types with 16 scales per 256 inputs (Q6_K, Q3_K, Q2_K): the 16-bit
 * scale of each word of the 4 code registers. widx[h] word w: scale 4 h + w / 8
 * (inputs in order: Q6_K) or 8 (w / 16) + 2 h + (w % 16) / 8 (Q2_K / Q3_K:
 * register h holds inputs 32 h + l and 128 + 32 h + l). */
ALWAYS_INLINE void k16_word_index(const bool in_order, __m512i widx[4])
{
    #pragma GCC unroll 4
    for (int h = 0; h < 4; h++) {
        uint16_t ix[32];
        for (int k = 0; k < 32; k++)
            ix[k] = (uint16_t)(in_order ? 4 * h + k / 8 : 8 * (k / 16) + 2 * h + (k % 16) / 8);
        widx[h] = _mm512_loadu_si512((const void *)ix);
    }
}

/* sc[h] = the scales s16 (16 words) spread over register h's words. */
ALWAYS_INLINE void k16_scales(const __m512i widx[4], __m256i s16, __m512i sc[4])
{
    __m512i s512 = _mm512_castsi256_si512(s16);
    #pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
        sc[h] = _mm512_permutexvar_epi16(widx[h], s512);
}

/* Q2_K / Q3_K: the activation codes of block y in the 2-bit fields' order. */
ALWAYS_INLINE void k2_act(const kt_block_q8_K *y, __m512i a[4])
{
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        a[j] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 32 * j))),
            _mm256_loadu_si256((const __m256i *)(y->qs + 128 + 32 * j)), 1);
}

/* One Q8_K block of token m against NR rows of Q6_K / Q3_K codes (value + 2^shift):
 *   T = sum_g sc_g (q . a)_g - 2^shift sum_g sc_g bsum_g;  acc += float(T) d_r d_m */
ALWAYS_INLINE void k16_accumulate(const int NR, const int m, const int shift,
                                  const kt_block_q8_K *y, const __m512i a[4],
                                  const __m512i q[4][4], const __m512i sc[4][4],
                                  const __m256i s16[4], const float dw[4], __m512 acc[4][4])
{
    __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    #pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        __m512i t = k_codes_dot(q[r], a, sc[r]);
        /* the offsets, in 8 lanes */
        __m256i mn = _mm256_madd_epi16(bs, s16[r]);
        t = _mm512_sub_epi32(t, _mm512_zextsi256_si512(_mm256_slli_epi32(mn, shift)));
        acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(dw[r] * y->d),
                                    acc[r][m]);
    }
}

/* ---------------------------------------------------------------------------
 * Q6_K x Q8_K. Per 256-input block and row, for each half h of 128 inputs:
 * the 64 ql bytes' low nibbles with qh bits 0-1 / 2-3 are inputs 128h + 0..63
 * in order, the high nibbles with bits 4-5 / 6-7 inputs 128h + 64..127, so
 * the activation codes load as they are. Codes are 0..63 (value - 32):
 *
 *   T = sum_j sc_j (q . a)_j - 32 sum_j sc_j bsum_j   (16 groups of 16)
 *   acc += float(T) d da
 */
ALWAYS_INLINE void q6k_tile(const bool unused, const int NR, const int MT,
                            const uint8_t *const *w, int nb, const uint8_t *const *act,
                            size_t ahead, float *out)
{
    (void)unused;
    __m512 acc[4][4];
    acc_zero(NR, MT, acc);
    const __m512i low4 = _mm512_set1_epi8(15), bits54 = _mm512_set1_epi8(0x30);
    __m512i widx[4];
    k16_word_index(true, widx);
    for (int i = 0; i < nb; i++) {
        __m512i q[4][4], sc[4][4];
        __m256i s16[4];
        float dw[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const kt_block_q6_K *x = (const kt_block_q6_K *)(const void *)w[r] + i;
            prefetch_block(x, ahead, sizeof *x);
            #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m512i l = _mm512_loadu_si512((const void *)(x->ql + 64 * h));
                __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
                __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(qh),
                                                 _mm256_srli_epi16(qh, 2), 1);
                __m512i h23 = _mm512_srli_epi16(h01, 4);
                q[r][2 * h] = _mm512_or_si512(_mm512_and_si512(l, low4),
                                              _mm512_and_si512(_mm512_slli_epi16(h01, 4), bits54));
                q[r][2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                                                  _mm512_and_si512(_mm512_slli_epi16(h23, 4),
                                                                   bits54));
            }
            s16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            k16_scales(widx, s16[r], sc[r]);
            dw[r] = _cvtsh_ss(x->d);
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const kt_block_q8_K *y = (const kt_block_q8_K *)(const void *)act[m] + i;
            __m512i a[4];
            #pragma GCC unroll 4
            for (int h = 0; h < 4; h++)
                a[h] = _mm512_loadu_si512(y->qs + 64 * h);
            k16_accumulate(NR, m, 5, y, a, q, sc, s16, dw, acc);
        }
    }
    tile_store(NR, MT, acc, out);
}

/* ---------------------------------------------------------------------------
 * IQ4_XS x Q8_K. 16 qs bytes per 32 inputs (low nibbles: inputs 0..15, high:
 * 16..31), a 6-bit signed scale ls - 32 per 32. With the nibbles mapped to
 * level + 128 (vpshufb) and the activation's 16-byte chunks regrouped to match
 * (even chunks against low nibbles, odd against high):
 *
 *   T = sum_ib (ls_ib - 32) ((level + 128) . a - 128 sum a)_ib   vpdpbusd, vpmulld
 *   acc += float(T) d da
 */
ALWAYS_INLINE void iq4xs_tile(const bool unused, const int NR, const int MT,
                              const uint8_t *const *w, int nb, const uint8_t *const *act,
                              size_t ahead, float *out)
{
    (void)unused;
    __m512 acc[4][4];
    acc_zero(NR, MT, acc);
    const __m512i low4 = _mm512_set1_epi8(15), c128 = _mm512_set1_epi8((char)0x80);
    const __m512i levels = _mm512_broadcast_i32x4(_mm_add_epi8(
        _mm_loadu_si128((const __m128i *)kt__iq4nl_values), _mm_set1_epi8((char)0x80)));
    /* lane l of register v: sub-block 4 v + l / 4 */
    const __m512i sidx0 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i sidx1 = _mm512_add_epi32(sidx0, _mm512_set1_epi32(4));
    const __m256i sh4 = _mm256_set_epi32(28, 24, 20, 16, 12, 8, 4, 0);
    const __m256i sh2 = _mm256_set_epi32(14, 12, 10, 8, 6, 4, 2, 0);
    for (int i = 0; i < nb; i++) {
        __m512i lo[4][2], hi[4][2], sc[4][2];
        float dw[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const kt_block_iq4_xs *x = (const kt_block_iq4_xs *)(const void *)w[r] + i;
            prefetch_block(x, ahead, sizeof *x);
            #pragma GCC unroll 2
            for (int v = 0; v < 2; v++) {
                __m512i q = _mm512_loadu_si512((const void *)(x->qs + 64 * v));
                lo[r][v] = _mm512_shuffle_epi8(levels, _mm512_and_si512(q, low4));
                hi[r][v] = _mm512_shuffle_epi8(levels,
                                               _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
            }
            /* ls_ib = (scales_l >> 4 ib) & 15 | ((scales_h >> 2 ib) & 3) << 4, minus 32 */
            uint32_t sl;
            memcpy(&sl, x->scales_l, 4);
            __m256i l4 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), sh4),
                                          _mm256_set1_epi32(15));
            __m256i h2 = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_set1_epi32(x->scales_h), sh2), _mm256_set1_epi32(3));
            __m512i s32 = _mm512_castsi256_si512(_mm256_sub_epi32(
                _mm256_or_si256(l4, _mm256_slli_epi32(h2, 4)), _mm256_set1_epi32(32)));
            sc[r][0] = _mm512_permutexvar_epi32(sidx0, s32);
            sc[r][1] = _mm512_permutexvar_epi32(sidx1, s32);
            dw[r] = _cvtsh_ss(x->d);
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const kt_block_q8_K *y = (const kt_block_q8_K *)(const void *)act[m] + i;
            __m512i y0 = _mm512_loadu_si512((const void *)y->qs);
            __m512i y1 = _mm512_loadu_si512((const void *)(y->qs + 64));
            __m512i y2 = _mm512_loadu_si512((const void *)(y->qs + 128));
            __m512i y3 = _mm512_loadu_si512((const void *)(y->qs + 192));
            /* register v: even 16-byte chunks (low nibbles), odd ones (high) */
            __m512i ae[2] = {_mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_i64x2(y2, y3, _MM_SHUFFLE(2, 0, 2, 0))};
            __m512i ao[2] = {_mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm512_shuffle_i64x2(y2, y3, _MM_SHUFFLE(3, 1, 3, 1))};
            __m512i bias[2];
            #pragma GCC unroll 2
            for (int v = 0; v < 2; v++)
                bias[v] = _mm512_sub_epi32(
                    _mm512_setzero_si512(),
                    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, ae[v]),
                                        c128, ao[v]));
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i t = _mm512_setzero_si512();
                #pragma GCC unroll 2
                for (int v = 0; v < 2; v++) {
                    __m512i d = _mm512_dpbusd_epi32(bias[v], lo[r][v], ae[v]);
                    d = _mm512_dpbusd_epi32(d, hi[r][v], ao[v]);
                    t = _mm512_add_epi32(t, _mm512_mullo_epi32(d, sc[r][v]));
                }
                acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_set1_ps(dw[r] * y->d),
                                            acc[r][m]);
            }
        }
    }
    tile_store(NR, MT, acc, out);
}

/* ---------------------------------------------------------------------------
 * Q2_K x Q8_K. The 2-bit field j of qs byte l holds input 32 j + l (bytes
 * 0..31) or 128 + 32 j + l (bytes 32..63); one register of 64 qs bytes
 * shifted by 2 j gives 64 codes against the activation codes of those inputs.
 * 4-bit scale and min per 16 inputs:
 *
 *   T = sum_g sc_g (q . a)_g      vpmaddubsw, vpdpwssd
 *   Mn = sum_g m_g bsum_g         vpmaddwd
 *   acc += float(T) d da;  accm += float(Mn) dmin da;  out = sum acc - sum accm
 */
ALWAYS_INLINE void q2k_tile(const bool unused, const int NR, const int MT,
                            const uint8_t *const *w, int nb, const uint8_t *const *act,
                            size_t ahead, float *out)
{
    (void)unused;
    __m512 acc[4][4];
    __m256 accm[4][4];
    k_acc_zero(NR, MT, acc, accm);
    const __m512i low2 = _mm512_set1_epi8(3);
    const __m128i low4 = _mm_set1_epi8(15);
    __m512i widx[4];
    k16_word_index(false, widx);
    for (int i = 0; i < nb; i++) {
        __m512i q[4][4], sc[4][4];
        __m256i m16[4];
        __m128 dd[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const kt_block_q2_K *x = (const kt_block_q2_K *)(const void *)w[r] + i;
            prefetch_block(x, ahead, sizeof *x);
            __m512i v = _mm512_loadu_si512((const void *)x->qs);
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                q[r][j] = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), low2);
            __m128i sb = _mm_loadu_si128((const __m128i *)x->scales);
            k16_scales(widx, _mm256_cvtepu8_epi16(_mm_and_si128(sb, low4)), sc[r]);
            m16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), low4));
            dd[r] = d_dmin(&x->d);
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const kt_block_q8_K *y = (const kt_block_q8_K *)(const void *)act[m] + i;
            __m512i a[4];
            k2_act(y, a);
            k_block_accumulate(NR, m, y, a, q, sc, m16, dd, acc, accm);
        }
    }
    k_tile_store(NR, MT, acc, accm, out);
}

/* ---------------------------------------------------------------------------
 * Q3_K x Q8_K. The 2-bit fields as in Q2_K, plus bit 4 h + j of hmask[l] for
 * register j's half h: code u = q + 4 hbit (0..7) is the value + 4. Signed
 * 6-bit scales per 16 inputs:
 *
 *   T = sum_g sc_g ((u . a)_g - 4 bsum_g)      vpmaddubsw, vpdpwssd, vpmaddwd
 *   acc += float(T) d da
 */
ALWAYS_INLINE void q3k_tile(const bool unused, const int NR, const int MT,
                            const uint8_t *const *w, int nb, const uint8_t *const *act,
                            size_t ahead, float *out)
{
    (void)unused;
    __m512 acc[4][4];
    acc_zero(NR, MT, acc);
    const __m512i low2 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    __m512i widx[4], hsel[4];
    k16_word_index(false, widx);
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        hsel[j] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << j)),
                                     _mm256_set1_epi8((char)(1 << (4 + j))), 1);
    const __m128i shifts = _mm_set_epi32(6, 4, 2, 0);
    for (int i = 0; i < nb; i++) {
        __m512i q[4][4], sc[4][4];
        __m256i s16[4];
        float dw[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const kt_block_q3_K *x = (const kt_block_q3_K *)(const void *)w[r] + i;
            prefetch_block(x, ahead, sizeof *x);
            __m512i v = _mm512_loadu_si512((const void *)x->qs);
            __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->hmask));
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m512i f = _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), low2);
                q[r][j] = _mm512_mask_add_epi8(f, _mm512_test_epi8_mask(hm, hsel[j]), f, four);
            }
            /* scale j: low nibble of byte j (j < 8) or high of j - 8; bits 4-5 from
             * bits 2 (j / 4) of byte 8 + j % 4; minus 32 */
            uint64_t lo8;
            uint32_t hi4;
            memcpy(&lo8, x->scales, 8);
            memcpy(&hi4, x->scales + 8, 4);
            __m128i l = _mm_cvtsi64_si128((long long)lo8);
            __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(l, _mm_set1_epi8(15)),
                                            _mm_and_si128(_mm_srli_epi16(l, 4), _mm_set1_epi8(15)));
            __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)hi4), shifts),
                                       _mm_set1_epi8(3));
            __m128i s8 = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
            s16[r] = _mm256_cvtepi8_epi16(s8);
            k16_scales(widx, s16[r], sc[r]);
            dw[r] = _cvtsh_ss(x->d);
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            const kt_block_q8_K *y = (const kt_block_q8_K *)(const void *)act[m] + i;
            __m512i a[4];
            k2_act(y, a);
            k16_accumulate(NR, m, 2, y, a, q, sc, s16, dw, acc); /* the -4 offsets */
        }
    }
    tile_store(NR, MT, acc, out);
}

#define K_TILE(NR, MT, FN, F) FN(F, NR, MT, w, j->nb, a, ahead, out)

static void k_family(const tile_job *j, int nrow, int mr, const uint8_t *const *w,
                     const uint8_t *const *a, size_t ahead, float *out)
{
    if (j->type == KT_TYPE_Q4_K)
        TILE_SWITCH(K_TILE, q4k_tile, false);
    else if (j->type == KT_TYPE_Q5_K)
        TILE_SWITCH(K_TILE, q4k_tile, true);
    else if (j->type == KT_TYPE_Q6_K)
        TILE_SWITCH(K_TILE, q6k_tile, false);
    else if (j->type == KT_TYPE_Q2_K)
        TILE_SWITCH(K_TILE, q2k_tile, false);
    else if (j->type == KT_TYPE_Q3_K)
        TILE_SWITCH(K_TILE, q3k_tile, false);
    else
        TILE_SWITCH(K_TILE, iq4xs_tile, false);
}

/* Rows of Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS blocks [b0, b1) against Q8_K
 * tokens. */
void kt__lf_gemm_k_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                          const void *const *act, int M, float *C, int ldc)
{
    const size_t bb = kt__ggml_traits((kt_type)type)->block_bytes;
    const tile_job j = {type, b1 - b0, 0, 0, 0};
    tile_rows(k_family, &j, W, wrow, (size_t)b0 * bb, (size_t)j.nb * bb, n0, n1, act,
              (size_t)b0 * sizeof(kt_block_q8_K), M, C, ldc, false);
}


/* ---------------------------------------------------------------------------
 * Q4_1 / Q5_1 x Q8_1 and Q5_0 x Q8_0. Per row, 4 blocks of 32 at a time:
 * their bytes (80 / 88 / 96) are read as stored into two registers and one
 * vpermt2w each gathers the 4 x 16 nibble bytes (128-bit lane b = block b),
 * the block scales d (word l -> lane l / 4) with the qh words, and m (lane 4 b
 * only). Byte j of lane b holds inputs j (low nibble) and 16 + j (high), so the
 * activation codes are gathered the same way (lo: codes 0..15 of each block,
 * hi: 16..31). Q5: bit j / 16 + j of qh is the 5th bit of the low / high code:
 *
 *   Q5_0  T = lo . a_lo + hi . a_hi - 16 sum a          (vpdpbusd, u8 x s8)
 *   Q4_1, Q5_1  T = lo . a_lo + hi . a_hi
 *   acc += float(T) dw da  (+ m s per block: s = da sum a of the Q8_1 block)
 *
 * Integer sums per lane are exact; m s uses the Q8_1 block's f16 s as ggml's
 * vec_dot does.
 */

/* Word-permute indices for type (Q4_1, Q5_0, Q5_1) over 4 blocks read from 2
 * registers (words 0..63): qs words; d per lane (words 0..15), then the qh low
 * and high halves of the 4 blocks (words 16..23); m per lane 4 b. */
typedef struct q5_idx {
    __m512i qs, dq, m;
} q5_idx;

static q5_idx q5_indices(int bb, int oqh, int oqs, int om)
{
    uint16_t qs[32], dq[32], m[32];
    for (int w = 0; w < 32; w++) {
        int b = w / 8;
        qs[w] = (uint16_t)((b * bb + oqs) / 2 + w % 8);
        m[w] = (uint16_t)((w % 16 / 4 * bb + (om >= 0 ? om : 0)) / 2);
        if (w < 16)
            dq[w] = (uint16_t)(w / 4 * bb / 2);
        else if (w < 24 && oqh >= 0)
            dq[w] = (uint16_t)(((w - 16) % 4 * bb + oqh) / 2 + (w >= 20));
        else
            dq[w] = 0;
    }
    q5_idx x;
    x.qs = _mm512_loadu_si512((const void *)qs);
    x.dq = _mm512_loadu_si512((const void *)dq);
    x.m = _mm512_loadu_si512((const void *)m);
    return x;
}

/* Token codes of partner blocks y (abytes each: Q8_0 34, Q8_1 36) [0, nv) of 4,
 * in the weights' order; the blocks past nv are zero. da per lane; Q8_1: s of
 * block b in lane 4 b; Q5_0: the -16 sum offsets. */
ALWAYS_INLINE void q5_act(const uint8_t *y, size_t abytes, int nv, bool q81, bool off16,
                          __m512i *alo, __m512i *ahi, __m512 *da, __m512 *s, __m512i *init)
{
    const size_t oq = q81 ? 4 : 2;
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    __m128i ds = _mm_setzero_si128(); /* dword b: d | s << 16 of block b */
    /* the lane index of an insert must be a literal (also at -O0, where a loop
     * counter is not folded), hence one expansion per block */
#define Q5_ACT_BLOCK(b)                                                                   \
    if ((b) < nv) {                                                                       \
        const uint8_t *blk = y + (size_t)(b) * abytes;                                    \
        uint32_t v;                                                                       \
        lo = _mm512_inserti32x4(lo, _mm_loadu_si128((const __m128i *)(blk + oq)), b);      \
        hi = _mm512_inserti32x4(hi, _mm_loadu_si128((const __m128i *)(blk + oq + 16)), b); \
        memcpy(&v, blk, 4);                                                               \
        ds = _mm_insert_epi32(ds, (int)v, b);                                             \
    }
    Q5_ACT_BLOCK(0)
    Q5_ACT_BLOCK(1)
    Q5_ACT_BLOCK(2)
    Q5_ACT_BLOCK(3)
#undef Q5_ACT_BLOCK
    *alo = lo;
    *ahi = hi;
    /* floats d0 s0 d1 s1 ...: lane l takes d of block l / 4; s only in lane 4 b */
    __m512 f = _mm512_castps256_ps512(_mm256_cvtph_ps(ds));
    const __m512i quad = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    *da = _mm512_permutexvar_ps(quad, f);
    if (q81)
        *s = _mm512_maskz_permutexvar_ps(0x1111, _mm512_add_epi32(quad, _mm512_set1_epi32(1)), f);
    if (off16) {
        const __m512i c16 = _mm512_set1_epi8(16);
        *init = _mm512_sub_epi32(_mm512_setzero_si512(),
                                 _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                                         c16, lo),
                                                     c16, hi));
    }
}

/* out[r * 4 + m] = rows w[r] (nb blocks of kind Q4_1 / Q5_0 / Q5_1) . tokens
 * act[m] (their Q8_1 / Q8_0 blocks). */
ALWAYS_INLINE void q5_tile(const int type, const int NR, const int MT, const uint8_t *const *w,
                           int nb, const uint8_t *const *act, size_t ahead, float *out)
{
    const bool q5 = type != KT_TYPE_Q4_1, q81 = type != KT_TYPE_Q5_0;
    const int bb = type == KT_TYPE_Q4_1 ? 20 : type == KT_TYPE_Q5_0 ? 22 : 24;
    const size_t abytes = q81 ? sizeof(kt_block_q8_1) : sizeof(kt_block_q8_0);
    const q5_idx ix = q5_indices(bb, type == KT_TYPE_Q5_0 ? 2 : type == KT_TYPE_Q5_1 ? 4 : -1,
                                 type == KT_TYPE_Q4_1 ? 4 : type == KT_TYPE_Q5_0 ? 6 : 8,
                                 q81 ? 2 : -1);
    const __m512i low4 = _mm512_set1_epi8(15), c16 = _mm512_set1_epi8(16);
    __m512 acc[4][4];
    acc_zero(NR, MT, acc);
    for (int i = 0; i < nb; i += 4) {
        const int nv = nb - i < 4 ? nb - i : 4, nbytes = nv * bb;
        const __mmask64 m0 = nbytes >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << nbytes) - 1;
        const __mmask64 m1 = nbytes <= 64 ? 0 : ((__mmask64)1 << (nbytes - 64)) - 1;
        __m512i lo[4], hi[4];
        __m512 dw[4], mw[4];
        #pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *x = w[r] + (size_t)i * bb;
            if (ahead) {
                _mm_prefetch((const char *)x + ahead, LF_HINT);
                _mm_prefetch((const char *)x + ahead + 64, LF_HINT);
            }
            __m512i v0 = _mm512_maskz_loadu_epi8(m0, x);
            __m512i v1 = _mm512_maskz_loadu_epi8(m1, x + 64);
            __m512i qs = _mm512_permutex2var_epi16(v0, ix.qs, v1);
            __m512i dq = _mm512_permutex2var_epi16(v0, ix.dq, v1);
            lo[r] = _mm512_and_si512(qs, low4);
            hi[r] = _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4);
            if (q5) {
                __m128i h = _mm512_extracti32x4_epi32(dq, 2); /* qh low halves, high halves */
                __mmask64 klo = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(h));
                __mmask64 khi = _cvtu64_mask64((uint64_t)_mm_extract_epi64(h, 1));
                lo[r] = _mm512_mask_add_epi8(lo[r], klo, lo[r], c16);
                hi[r] = _mm512_mask_add_epi8(hi[r], khi, hi[r], c16);
            }
            dw[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(dq));
            if (q81)
                mw[r] = _mm512_cvtph_ps(_mm512_castsi512_si256(
                    _mm512_maskz_permutex2var_epi16(0x11111111, v0, ix.m, v1)));
            else
                mw[r] = _mm512_setzero_ps();
        }
        #pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            __m512i alo, ahi, init = _mm512_setzero_si512();
            __m512 da, s = _mm512_setzero_ps();
            q5_act(act[m] + (size_t)i * abytes, abytes, nv, q81, !q81, &alo, &ahi, &da, &s, &init);
            #pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, lo[r], alo), hi[r], ahi);
                acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw[r], da),
                                            acc[r][m]);
                if (q81)
                    acc[r][m] = _mm512_fmadd_ps(mw[r], s, acc[r][m]);
            }
        }
    }
    tile_store(NR, MT, acc, out);
}

#define Q5_TILE(NR, MT, TYPE) q5_tile(TYPE, NR, MT, w, j->nb, a, ahead, out)

static void q5_family(const tile_job *j, int nrow, int mr, const uint8_t *const *w,
                      const uint8_t *const *a, size_t ahead, float *out)
{
    if (j->type == KT_TYPE_Q4_1)
        TILE_SWITCH(Q5_TILE, KT_TYPE_Q4_1);
    else if (j->type == KT_TYPE_Q5_0)
        TILE_SWITCH(Q5_TILE, KT_TYPE_Q5_0);
    else
        TILE_SWITCH(Q5_TILE, KT_TYPE_Q5_1);
}

/* Rows of Q4_1 / Q5_0 / Q5_1 blocks [b0, b1) of 32 against tokens' Q8_1 / Q8_0
 * blocks (act[m]: the token's first block). */
void kt__lf_gemm_q5_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                           const void *const *act, int M, float *C, int ldc)
{
    const size_t bb = kt__ggml_traits((kt_type)type)->block_bytes;
    const size_t abytes = type == KT_TYPE_Q5_0 ? sizeof(kt_block_q8_0) : sizeof(kt_block_q8_1);
    const tile_job j = {type, b1 - b0, 0, 0, 0};
    tile_rows(q5_family, &j, W, wrow, (size_t)b0 * bb, (size_t)j.nb * bb, n0, n1, act,
              (size_t)b0 * abytes, M, C, ldc, false);
}


/* ---------------------------------------------------------------------------
 * Prefill: a GEMM over int8 panels. Per call, every 64 rows x 512 inputs of
 * the weights are repacked once into panels of 16 rows (one per 32-bit lane):
 *
 *   codes [block][k/4][16 rows][4]  u8  (Q4_0 nibbles, Q8_0 + 128, Q4_K nibbles)
 *   scale [block][16 rows]          f32 (d; Q4_K: d * sc)
 *   off   [block][16 rows]          f32 (Q4_K: -dmin * m)
 *
 * and each block of 32 inputs of a (16 rows x token) pair costs 8 vpdpbusd
 * against the token's 4 codes broadcast, then
 *
 *   acc += float(init + sum q a) * scale * da  (+ off * da * sum a for Q4_K)
 *
 * with init = -8 / -128 * (sum of the token's block codes) made once per
 * token when it was quantized (the same integers as the ggml vec_dots).
 * Tiles of 2 panels (32 rows) x 4 tokens.
 */

#define PANEL_KS 512   /* inputs per repack segment */
#define PANEL_ROWS 64  /* rows per repack */

/* u[j] (j < 4): dword j of the 16 bytes at p[r] + o, lane r = row r (16 rows):
 * 4-row groups loaded as 128-bit lanes, then a 4 x 4 dword transpose. */
ALWAYS_INLINE void rows16_dwords(const uint8_t *const *p, size_t o, __m512i u[4])
{
    __m512i z[4];
    #pragma GCC unroll 4
    for (int q = 0; q < 4; q++) { /* lane L of z[q]: row 4L + q */
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p[q] + o)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[4 + q] + o)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[8 + q] + o)), 2);
        z[q] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[12 + q] + o)), 3);
    }
    __m512i t01l = _mm512_unpacklo_epi32(z[0], z[1]), t01h = _mm512_unpackhi_epi32(z[0], z[1]);
    __m512i t23l = _mm512_unpacklo_epi32(z[2], z[3]), t23h = _mm512_unpackhi_epi32(z[2], z[3]);
    u[0] = _mm512_unpacklo_epi64(t01l, t23l);
    u[1] = _mm512_unpackhi_epi64(t01l, t23l);
    u[2] = _mm512_unpacklo_epi64(t01h, t23h);
    u[3] = _mm512_unpackhi_epi64(t01h, t23h);
}

/* The 16 rows' f16 at p[r] + o as floats. */
ALWAYS_INLINE __m512 rows16_f16(const uint8_t *const *p, size_t o)
{
    uint16_t h[16];
    for (int r = 0; r < 16; r++)
        memcpy(&h[r], p[r] + o, 2);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
}

ALWAYS_INLINE int u16_at(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* The same through 16 vpinsrw (no stores to forward; literal lane numbers, as
 * the -O0 sanitizer build needs). */
ALWAYS_INLINE __m512 rows16_f16_insert(const uint8_t *const *p, size_t o)
{
    __m128i lo = _mm_cvtsi32_si128(u16_at(p[0] + o)), hi = _mm_cvtsi32_si128(u16_at(p[8] + o));
#define F16_LANE(r)                                       \
    lo = _mm_insert_epi16(lo, u16_at(p[r] + o), r);       \
    hi = _mm_insert_epi16(hi, u16_at(p[8 + r] + o), r)
    F16_LANE(1); F16_LANE(2); F16_LANE(3); F16_LANE(4);
    F16_LANE(5); F16_LANE(6); F16_LANE(7);
#undef F16_LANE
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

#define F16_ROWS(o) (f16_insert ? rows16_f16_insert(p, o) : rows16_f16(p, o))

/* Panels of rows [n, n + nr) (nr <= 64) over blocks [kb, kb + nb) of 32. */
static void panel_pack(int type, const uint8_t *W, size_t wrow, int n, int nr, int kb, int nb,
                       uint8_t *codes, float *scale, float *off)
{
    const __m512i low4 = _mm512_set1_epi8(15), top = _mm512_set1_epi8((char)0x80);
    const bool f16_insert = lf_f16 < 0 ? type != KT_TYPE_Q8_0 : lf_f16 == 1;
    for (int g = 0; g * 16 < nr; g++) {
        const uint8_t *p[16];
        for (int r = 0; r < 16; r++) {
            int row = 16 * g + r < nr ? 16 * g + r : nr - 1; /* ragged: repeat the last */
            p[r] = W + (size_t)(n + row) * wrow;
        }
        bool k16 = type == KT_TYPE_Q6_K || type == KT_TYPE_Q3_K || type == KT_TYPE_Q2_K;
        uint8_t *cg = codes + (size_t)g * nb * (k16 ? 256 : 512);
        float *sg = scale + (size_t)g * nb * 16, *og = off + (size_t)g * nb * 16;
        if (type == KT_TYPE_Q4_0 || type == KT_TYPE_IQ4_NL || type == KT_TYPE_Q8_0) {
            bool q4 = type != KT_TYPE_Q8_0, nl = type == KT_TYPE_IQ4_NL;
            size_t bb = q4 ? 18 : 34;
            /* IQ4_NL: the nibble indexes a level; level + 128 as u8 */
            const __m512i levels = _mm512_broadcast_i32x4(_mm_add_epi8(
                _mm_loadu_si128((const __m128i *)kt__iq4nl_values), _mm_set1_epi8((char)0x80)));
            for (int b = 0; b < nb; b++) {
                size_t o = (size_t)(kb + b) * bb;
                _mm512_storeu_ps(sg + 16 * b, F16_ROWS(o));
                uint8_t *cb = cg + (size_t)b * 512;
                __m512i u[4];
                rows16_dwords(p, o + 2, u);
                if (q4) {
                    #pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        __m512i lo = _mm512_and_si512(u[j], low4);
                        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(u[j], 4), low4);
                        if (nl) {
                            lo = _mm512_shuffle_epi8(levels, lo);
                            hi = _mm512_shuffle_epi8(levels, hi);
                        }
                        _mm512_storeu_si512((void *)(cb + 64 * j), lo);
                        _mm512_storeu_si512((void *)(cb + 64 * (j + 4)), hi);
                    }
                } else {
                    #pragma GCC unroll 4
                    for (int j = 0; j < 4; j++)
                        _mm512_storeu_si512((void *)(cb + 64 * j), _mm512_xor_si512(u[j], top));
                    rows16_dwords(p, o + 18, u);
                    #pragma GCC unroll 4
                    for (int j = 0; j < 4; j++)
                        _mm512_storeu_si512((void *)(cb + 64 * (j + 4)),
                                            _mm512_xor_si512(u[j], top));
                }
            }
        } else if (type == KT_TYPE_Q4_1 || type == KT_TYPE_Q5_0 || type == KT_TYPE_Q5_1) {
            /* qs byte j: inputs j (low nibble) and 16 + j (high); Q5: + 16 where bit
             * j / 16 + j of qh is set; Q4_1 / Q5_1: m per block as the row offset */
            const bool q5 = type != KT_TYPE_Q4_1, mn = type != KT_TYPE_Q5_0;
            const size_t bb = kt__ggml_traits((kt_type)type)->block_bytes;
            const size_t oqs = type == KT_TYPE_Q4_1 ? 4 : type == KT_TYPE_Q5_0 ? 6 : 8;
            const size_t oqh = type == KT_TYPE_Q5_0 ? 2 : 4;
            const __m512i c16 = _mm512_set1_epi8(16);
            /* byte i of dword j's lanes: qh byte j / 2 (low codes) or 2 + j / 2
             * (high), bit 4 (j % 2) + i */
            __m512i pick_lo[4], pick_hi[4], bit[4];
            for (int j = 0; j < 4; j++) {
                uint8_t pl[64], ph[64], bs[64];
                for (int e = 0; e < 64; e++) {
                    pl[e] = (uint8_t)(e / 4 % 4 * 4 + j / 2);
                    ph[e] = (uint8_t)(pl[e] + 2);
                    bs[e] = (uint8_t)(1u << (4 * (j % 2) + e % 4));
                }
                pick_lo[j] = _mm512_loadu_si512((const void *)pl);
                pick_hi[j] = _mm512_loadu_si512((const void *)ph);
                bit[j] = _mm512_loadu_si512((const void *)bs);
            }
            for (int b = 0; b < nb; b++) {
                size_t o = (size_t)(kb + b) * bb;
                _mm512_storeu_ps(sg + 16 * b, F16_ROWS(o));
                if (mn)
                    _mm512_storeu_ps(og + 16 * b, F16_ROWS(o + 2));
                uint8_t *cb = cg + (size_t)b * 512;
                __m512i u[4], qh[4];
                rows16_dwords(p, o + oqs, u);
                if (q5)
                    rows16_dwords(p, o + oqh, qh); /* qh[0]: lane r = row r's qh */
                #pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m512i lo = _mm512_and_si512(u[j], low4);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(u[j], 4), low4);
                    if (q5) {
                        __mmask64 kl = _mm512_test_epi8_mask(
                            _mm512_shuffle_epi8(qh[0], pick_lo[j]), bit[j]);
                        __mmask64 kh = _mm512_test_epi8_mask(
                            _mm512_shuffle_epi8(qh[0], pick_hi[j]), bit[j]);
                        lo = _mm512_mask_add_epi8(lo, kl, lo, c16);
                        hi = _mm512_mask_add_epi8(hi, kh, hi, c16);
                    }
                    _mm512_storeu_si512((void *)(cb + 64 * j), lo);
                    _mm512_storeu_si512((void *)(cb + 64 * (j + 4)), hi);
                }
            }
        } else if (type == KT_TYPE_Q2_K || type == KT_TYPE_Q3_K) { /* blocks of 16 */
            bool q3 = type == KT_TYPE_Q3_K;
            size_t bb = q3 ? sizeof(kt_block_q3_K) : sizeof(kt_block_q2_K);
            size_t oqs = q3 ? offsetof(kt_block_q3_K, qs) : offsetof(kt_block_q2_K, qs);
            const __m512i low2 = _mm512_set1_epi8(3), bit2 = _mm512_set1_epi8(4);
            for (int b = 0; b < nb; b += 16) {
                size_t o = (size_t)((kb + b) / 16) * bb;
                /* input e: 2-bit field (e % 128) / 32 of qs[32 (e / 128) + e % 32];
                 * Q3_K: + 4 where bit e / 32 of hmask[e % 32] is set */
                for (int c0 = 0; c0 < 32; c0 += 16) {
                    __m512i uh[4];
                    if (q3)
                        rows16_dwords(p, o + offsetof(kt_block_q3_K, hmask) + (size_t)c0, uh);
                    for (int half = 0; half < 2; half++) {
                        __m512i u[4];
                        rows16_dwords(p, o + oqs + 32 * (size_t)half + (size_t)c0, u);
                        for (int sh = 0; sh < 4; sh++) {
                            int j = 8 * half + 2 * sh + c0 / 16;
                            uint8_t *cb = cg + (size_t)(b + j) * 256;
                            #pragma GCC unroll 4
                            for (int i = 0; i < 4; i++) {
                                __m512i q = _mm512_and_si512(_mm512_srli_epi16(u[i], 2 * sh),
                                                             low2);
                                if (q3) {
                                    __m512i hb = _mm512_srli_epi16(uh[i], 4 * half + sh);
                                    q = _mm512_or_si512(
                                        q, _mm512_and_si512(_mm512_slli_epi16(hb, 2), bit2));
                                }
                                _mm512_storeu_si512((void *)(cb + 64 * i), q);
                            }
                        }
                    }
                }
                for (int r = 0; r < 16; r++) {
                    if (q3) {
                        const kt_block_q3_K *x = (const kt_block_q3_K *)(const void *)(p[r] + o);
                        float d = _cvtsh_ss(x->d);
                        for (int j = 0; j < 16; j++) {
                            int lo = j < 8 ? x->scales[j] & 15 : x->scales[j - 8] >> 4;
                            int hi = (x->scales[8 + j % 4] >> (2 * (j / 4))) & 3;
                            sg[16 * (b + j) + r] = d * (float)((lo | (hi << 4)) - 32);
                        }
                    } else {
                        const kt_block_q2_K *x = (const kt_block_q2_K *)(const void *)(p[r] + o);
                        float d = _cvtsh_ss(x->d), dmin = _cvtsh_ss(x->dmin);
                        for (int j = 0; j < 16; j++) {
                            sg[16 * (b + j) + r] = d * (float)(x->scales[j] & 15);
                            og[16 * (b + j) + r] = -dmin * (float)(x->scales[j] >> 4);
                        }
                    }
                }
            }
        } else if (type == KT_TYPE_IQ4_XS) { /* blocks of 32: kb, nb multiples of 8 */
            const __m512i levels = _mm512_broadcast_i32x4(_mm_add_epi8(
                _mm_loadu_si128((const __m128i *)kt__iq4nl_values), _mm_set1_epi8((char)0x80)));
            for (int b = 0; b < nb; b += 8) {
                size_t o = (size_t)((kb + b) / 8) * sizeof(kt_block_iq4_xs);
                /* block ib: qs[16 ib..]: low nibbles inputs 0..15, high 16..31 */
                for (int ib = 0; ib < 8; ib++) {
                    __m512i u[4];
                    rows16_dwords(p, o + offsetof(kt_block_iq4_xs, qs) + 16 * (size_t)ib, u);
                    uint8_t *cb = cg + (size_t)(b + ib) * 512;
                    #pragma GCC unroll 4
                    for (int i = 0; i < 4; i++) {
                        _mm512_storeu_si512((void *)(cb + 64 * i),
                                            _mm512_shuffle_epi8(levels,
                                                                _mm512_and_si512(u[i], low4)));
                        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(u[i], 4), low4);
                        _mm512_storeu_si512((void *)(cb + 64 * (i + 4)),
                                            _mm512_shuffle_epi8(levels, hi));
                    }
                }
                for (int r = 0; r < 16; r++) {
                    const kt_block_iq4_xs *x = (const kt_block_iq4_xs *)(const void *)(p[r] + o);
                    float d = _cvtsh_ss(x->d);
                    for (int ib = 0; ib < 8; ib++) {
                        int ls = ((x->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) |
                                 (((x->scales_h >> (2 * ib)) & 3) << 4);
                        sg[16 * (b + ib) + r] = d * (float)(ls - 32);
                    }
                }
            }
        } else if (type == KT_TYPE_Q6_K) { /* blocks of 16: kb and nb multiples of 16 */
            const __m512i bits54 = _mm512_set1_epi8(0x30);
            for (int b = 0; b < nb; b += 16) {
                size_t o = (size_t)((kb + b) / 16) * sizeof(kt_block_q6_K);
                /* input e: h = e / 128, sq = e % 128 / 32, c = e % 32: nibble sq / 2
                 * of ql[64 h + 32 (sq % 2) + c], bits 2 sq of qh[32 h + c] */
                for (int h = 0; h < 2; h++)
                    for (int c0 = 0; c0 < 32; c0 += 16) {
                        __m512i uh[4];
                        rows16_dwords(p, o + 128 + 32 * (size_t)h + (size_t)c0, uh);
                        for (int s1 = 0; s1 < 2; s1++) {
                            __m512i ul[4];
                            rows16_dwords(p, o + 64 * (size_t)h + 32 * (size_t)s1 + (size_t)c0,
                                          ul);
                            for (int nib = 0; nib < 2; nib++) {
                                int sq = s1 + 2 * nib, j = 8 * h + 2 * sq + c0 / 16;
                                uint8_t *cb = cg + (size_t)(b + j) * 256;
                                #pragma GCC unroll 4
                                for (int i = 0; i < 4; i++) {
                                    __m512i lo = _mm512_and_si512(
                                        nib ? _mm512_srli_epi16(ul[i], 4) : ul[i], low4);
                                    __m512i hb = _mm512_srli_epi16(uh[i], 2 * sq);
                                    __m512i q = _mm512_or_si512(
                                        lo, _mm512_and_si512(_mm512_slli_epi16(hb, 4), bits54));
                                    _mm512_storeu_si512((void *)(cb + 64 * i), q);
                                }
                            }
                        }
                    }
                for (int r = 0; r < 16; r++) {
                    const kt_block_q6_K *x = (const kt_block_q6_K *)(const void *)(p[r] + o);
                    float d = _cvtsh_ss(x->d);
                    for (int j = 0; j < 16; j++)
                        sg[16 * (b + j) + r] = d * (float)x->scales[j];
                }
            }
        } else { /* Q4_K / Q5_K: kb and nb multiples of 8 */
            bool q5 = type == KT_TYPE_Q5_K;
            size_t bb = q5 ? sizeof(kt_block_q5_K) : sizeof(kt_block_q4_K);
            size_t oqs = q5 ? offsetof(kt_block_q5_K, qs) : offsetof(kt_block_q4_K, qs);
            const __m512i bit4 = _mm512_set1_epi8(16);
            for (int b = 0; b < nb; b += 8) {
                size_t o = (size_t)((kb + b) / 8) * bb;
                /* qs bytes 32j..32j+31: groups 2j (low nibbles), 2j + 1 (high);
                 * Q5_K: bit 4 of input 32g + l is bit g of qh[l] */
                for (int c = 0; c < 8; c++) {
                    __m512i u[4], h[4];
                    rows16_dwords(p, o + oqs + 16 * (size_t)c, u);
                    int j = c / 2, i0 = 4 * (c % 2);
                    if (q5)
                        rows16_dwords(p, o + offsetof(kt_block_q5_K, qh) + 16 * (size_t)(c % 2),
                                      h);
                    #pragma GCC unroll 4
                    for (int i = 0; i < 4; i++) {
                        __m512i lo = _mm512_and_si512(u[i], low4);
                        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(u[i], 4), low4);
                        if (q5) {
                            __m512i hl = _mm512_srli_epi16(h[i], 2 * j);
                            lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(hl, 4),
                                                                      bit4));
                            hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi16(hl, 3),
                                                                      bit4));
                        }
                        uint8_t *dst = cg + (size_t)(b + 2 * j) * 512 + 64 * (i0 + i);
                        _mm512_storeu_si512((void *)dst, lo);
                        _mm512_storeu_si512((void *)(dst + 512), hi);
                    }
                }
                /* the 16 rows' scales and mins at once, k4_scales per lane (lane r:
                 * row r), not a scalar loop over the rows: Zen 4, one core, 64 x
                 * 2048, 32 tokens (with PM_K32's super-block fold), Q5_K resident
                 * 88-95 -> 115-120 GMAC/s, Q4_K from memory 100-103 -> 119-120.
                 * d, dmin and scales lie at the same offsets in Q4_K and Q5_K. */
                __m512i su[4];
                rows16_dwords(p, o + offsetof(kt_block_q4_K, scales), su);
                const __m512i m6 = _mm512_set1_epi8(0x3f), b54 = _mm512_set1_epi8(0x30);
                const __m512i byte = _mm512_set1_epi32(0xff);
                __m512i sc[2] = {_mm512_and_si512(su[0], m6),
                                 _mm512_or_si512(_mm512_and_si512(su[2], low4),
                                                 _mm512_and_si512(_mm512_srli_epi32(su[0], 2),
                                                                  b54))};
                __m512i mn[2] = {_mm512_and_si512(su[1], m6),
                                 _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(su[2], 4),
                                                                  low4),
                                                 _mm512_and_si512(_mm512_srli_epi32(su[1], 2),
                                                                  b54))};
                __m512 d = F16_ROWS(o);
                __m512 ndmin = _mm512_sub_ps(_mm512_setzero_ps(), F16_ROWS(o + 2));
                #pragma GCC unroll 8
                for (int s = 0; s < 8; s++) {
                    int sh = 8 * (s % 4);
                    __m512i sb = _mm512_and_si512(_mm512_srli_epi32(sc[s / 4], sh), byte);
                    __m512i mb = _mm512_and_si512(_mm512_srli_epi32(mn[s / 4], sh), byte);
                    _mm512_storeu_ps(sg + 16 * (b + s), _mm512_mul_ps(d, _mm512_cvtepi32_ps(sb)));
                    _mm512_storeu_ps(og + 16 * (b + s),
                                     _mm512_mul_ps(ndmin, _mm512_cvtepi32_ps(mb)));
                }
            }
        }
    }
}

/* acc + w . (the 4 bytes at p, in every lane): the bytes broadcast by the
 * vpdpbusd itself ({1to16}), not by a vpbroadcastd of their own that gcc
 * shares between the two row groups. */
ALWAYS_INLINE __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

typedef struct panel_act {
    const uint8_t *code[4]; /* token's code blocks                       */
    const int32_t *init[4]; /* Q4_0 / Q8_0: per block offset; else NULL   */
    int init_mul;           /* IQ4_NL: 16 (R40's -8 * sum to -128 * sum)  */
    int init_shift;         /* log2 of init_mul (Q4_0 / Q8_0 / IQ4_NL / Q5_0) */
    const float *ds[4];     /* Q4_K: per block d * sum                    */
    const float *da[4];     /* per block d                                */
} panel_act;

/* Panel modes: blocks of 32 with an integer offset per token block (Q4_0,
 * Q8_0); blocks of 32 with a float offset per row (Q4_K, Q5_K); blocks of 16,
 * offset -32 per code (Q6_K). */
enum { PM_Q80 = 0, PM_K32 = 1, PM_Q6 = 2 };
/* The Q8_K modes with integer offsets straight from the token's bsums (init_mul
 * x the block's code sum): Q6_K (16, -32), Q3_K (16, -4), IQ4_XS (32, -128);
 * Q2_K: blocks of 16 with a float offset per row (-dmin * m) x d * bsum. */
enum { PM_Q3 = 3, PM_X4 = 4, PM_Q2 = 5 };
/* Q4_1 / Q5_1 against Q8_1 blocks: a float offset per row (m) x the block's s. */
enum { PM_Q81 = 6 };
/* PM_Q80 whose offset is init_mul (2 or 16) x the token block's: IQ4_NL, Q5_0
 * (PM_Q80 itself, Q4_0 / Q8_0, skips the shift: one vector op less a token
 * block). */
enum { PM_Q80S = 7 };

/* accf[g][t] over nb blocks (absolute first block kb) of G panels x MT tokens. */
ALWAYS_INLINE void panel_tile(const int mode, const int G, const int MT, const uint8_t *codes,
                              const float *scale, const float *off, int nb, int kb,
                              const panel_act *a, float *C, int ldc, int nvalid0, int nvalid1,
                              bool first)
{
    const bool k16 = mode == PM_Q6 || mode == PM_Q3 || mode == PM_Q2;
    const bool foff = mode == PM_K32 || mode == PM_Q2 || mode == PM_Q81; /* per row */
    const int BK = k16 ? 16 : 32; /* inputs per block */
    __m512 accf[2][4], sub[2][4]; /* PM_K32: the super-block's sum_s cvt(I_s) d sc_s */
    __mmask16 vm[2] = {(__mmask16)((1u << nvalid0) - 1), (__mmask16)((1u << nvalid1) - 1)};
    #pragma GCC unroll 2
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++) {
            accf[g][t] = first ? _mm512_setzero_ps()
                               : _mm512_maskz_loadu_ps(vm[g], C + (size_t)t * ldc + 16 * g);
            sub[g][t] = _mm512_setzero_ps();
        }
    const size_t gstride = (size_t)nb * BK * 16, sstride = (size_t)nb * 16;
    for (int b = 0; b < nb; b++) {
        int k = kb + b;
        const uint8_t *ap[4];
        float da[4], ds[4];
        __m512i acci[2][4], inits[4];
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++) {
            __m512i init;
            if (k16) {
                const kt_block_q8_K *y = (const kt_block_q8_K *)(const void *)a->code[t] + k / 16;
                ap[t] = (const uint8_t *)y->qs + 16 * (k % 16);
                init = _mm512_set1_epi32(mode == PM_Q2 ? 0 : a->init_mul * y->bsums[k % 16]);
                da[t] = y->d;
                ds[t] = y->d * (float)y->bsums[k % 16];
            } else if (mode == PM_X4) {
                const kt_block_q8_K *y = (const kt_block_q8_K *)(const void *)a->code[t] + k / 8;
                ap[t] = (const uint8_t *)y->qs + 32 * (k % 8);
                init = _mm512_set1_epi32(-128 *
                                         (y->bsums[2 * (k % 8)] + y->bsums[2 * (k % 8) + 1]));
                da[t] = y->d;
            } else if (mode == PM_Q81) {
                const kt_block_q8_1 *y = (const kt_block_q8_1 *)(const void *)a->code[t] + k;
                ap[t] = (const uint8_t *)y->qs;
                init = _mm512_setzero_si512();
                da[t] = _cvtsh_ss(y->d);
                ds[t] = _cvtsh_ss(y->s);
            } else if (mode == PM_K32) {
                ap[t] = a->code[t] + (size_t)(k / 8) * sizeof(kt_block_q8_K) + 4 + 32 * (k % 8);
                init = _mm512_setzero_si512();
                da[t] = a->da[t][k];
                ds[t] = a->ds[t][k];
            } else {
                ap[t] = a->code[t] + (size_t)k * sizeof(kt_block_q8_0) + 2;
                /* init_mul 1, 2 or 16: a shift of the broadcast load */
                init = _mm512_set1_epi32(a->init[t][k]);
                if (mode == PM_Q80S)
                    init = _mm512_slli_epi32(init, a->init_shift);
                da[t] = a->da[t][k];
                ds[t] = 0;
            }
            /* the sums start at zero and take the offset after the block: a
             * copy of the offset into each accumulator before it cost ~10% */
            inits[t] = init;
            #pragma GCC unroll 2
            for (int g = 0; g < G; g++)
                acci[g][t] = _mm512_setzero_si512();
        }
        const uint8_t *cb = codes + (size_t)b * BK * 16;
        #pragma GCC unroll 8
        for (int j = 0; j < BK / 4; j++) {
            __m512i w0 = _mm512_loadu_si512((const void *)(cb + 64 * j));
            __m512i w1 = G == 2 ? _mm512_loadu_si512((const void *)(cb + gstride + 64 * j)) : w0;
            #pragma GCC unroll 4
            for (int t = 0; t < MT; t++) {
                acci[0][t] = dpbusd_bcast(acci[0][t], w0, ap[t] + 4 * j);
                if (G == 2)
                    acci[1][t] = dpbusd_bcast(acci[1][t], w1, ap[t] + 4 * j);
            }
        }
        if (mode != PM_Q81 && mode != PM_K32 && mode != PM_Q2)
            #pragma GCC unroll 2
            for (int g = 0; g < G; g++)
                #pragma GCC unroll 4
                for (int t = 0; t < MT; t++)
                    acci[g][t] = _mm512_add_epi32(acci[g][t], inits[t]);
        #pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            __m512 s = _mm512_loadu_ps(scale + g * sstride + 16 * b);
            __m512 o = foff ? _mm512_loadu_ps(off + g * sstride + 16 * b) : s;
            #pragma GCC unroll 4
            for (int t = 0; t < MT; t++) {
                if (mode == PM_K32) {
                    /* d_a is the super-block's: the sub-blocks' d sc_s sums
                     * times d_a once per 8 (one vmulps a sub-block fewer) */
                    sub[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[g][t]), s, sub[g][t]);
                    if (k % 8 == 7) {
                        accf[g][t] = _mm512_fmadd_ps(sub[g][t], _mm512_set1_ps(da[t]),
                                                     accf[g][t]);
                        sub[g][t] = _mm512_setzero_ps();
                    }
                } else {
                    __m512 sd = _mm512_mul_ps(s, _mm512_set1_ps(da[t]));
                    accf[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[g][t]), sd,
                                                 accf[g][t]);
                }
                if (foff)
                    accf[g][t] = _mm512_fmadd_ps(o, _mm512_set1_ps(ds[t]), accf[g][t]);
            }
        }
    }
    #pragma GCC unroll 2
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 4
        for (int t = 0; t < MT; t++)
            _mm512_mask_storeu_ps(C + (size_t)t * ldc + 16 * g, vm[g], accf[g][t]);
}

#define PANEL_CASE(MODE, G, MT) \
    panel_tile(MODE, G, MT, cg, sg, og, nb, kb, &pa, Cm, ldc, v0, v1, first)
#define PANEL_MT(MODE, G)                                                                     \
    do {                                                                                      \
        switch (mt) {                                                                         \
        case 1: PANEL_CASE(MODE, G, 1); break;                                                \
        case 2: PANEL_CASE(MODE, G, 2); break;                                                \
        case 3: PANEL_CASE(MODE, G, 3); break;                                                \
        default: PANEL_CASE(MODE, G, 4); break;                                               \
        }                                                                                     \
    } while (0)
#define PANEL_G(MODE)              \
    do {                           \
        if (G == 2)                \
            PANEL_MT(MODE, 2);     \
        else                       \
            PANEL_MT(MODE, 1);     \
    } while (0)

/* One load per cache line of bytes [o, o + len) of rows [n0, n1): all of a call's
 * weights requested at once, before the first repack. Zen 4 (lf_kernel_bench, 64
 * x 2048 Q4_0, 32 tokens, weights from L3 or memory): 30-33 -> 27.5 ns per 64
 * bytes (rows in L2: 25.4); software prefetches ahead in the repack and during
 * the GEMM won only ~2 of those ns: demand loads keep far more misses in flight. */
__attribute__((noinline)) /* its own line in profiles */
static void rows_touch(const uint8_t *W, size_t wrow, int n0, int n1, size_t o, size_t len)
{
    uint8_t x = 0;
    if (!len)
        return;
    for (int n = n0; n < n1; n++) {
        const uint8_t *r = W + (size_t)n * wrow + o;
        for (size_t c = 0; c < len; c += 64)
            x ^= r[c];
        x ^= r[len - 1];
    }
    __asm__ volatile("" : : "r"(x)); /* the loads are the point */
}

void kt__lf_gemm_panel_avx512(int type, const void *W, size_t wrow, int n0, int n1, int k0,
                              int k1, const void *const *act, const void *const *ext, size_t xs,
                              int M, float *C, int ldc, void *scratch)
{
    pthread_once(&idx_once, idx_init); /* lf_f16 */
    size_t o0 = kt__ggml_row_bytes((kt_type)type, k0);
    rows_touch(W, wrow, n0, n1, o0, kt__ggml_row_bytes((kt_type)type, k1) - o0);
    lf_walk next;
    long lines = 0, per = 0;
    if (hint_take(&next)) {
        /* its lines over the tiles of this call */
        long tiles = (long)((n1 - n0 + 31) / 32) * ((k1 - k0 + PANEL_KS - 1) / PANEL_KS) *
                     ((M + 3) / 4);
        lines = (long)next.g.rows * (long)((next.g.len + 63) / 64);
        per = (lines + tiles - 1) / tiles;
    }
    const int mode = type == KT_TYPE_Q4_1 || type == KT_TYPE_Q5_1  ? PM_Q81
                     : type == KT_TYPE_Q6_K                         ? PM_Q6
                     : type == KT_TYPE_Q3_K                         ? PM_Q3
                     : type == KT_TYPE_Q2_K                         ? PM_Q2
                     : type == KT_TYPE_IQ4_XS                       ? PM_X4
                     : type == KT_TYPE_Q4_K || type == KT_TYPE_Q5_K ? PM_K32
                     : type == KT_TYPE_IQ4_NL || type == KT_TYPE_Q5_0 ? PM_Q80S
                                                                    : PM_Q80;
    const int BK = mode == PM_Q6 || mode == PM_Q3 || mode == PM_Q2 ? 16 : 32;
    uint8_t *codes = scratch;
    float *scale = (float *)(codes + (size_t)PANEL_ROWS * PANEL_KS);
    float *off = scale + PANEL_ROWS * PANEL_KS / 16; /* per block of 16 or 32 */
    for (int nc = n0; nc < n1; nc += PANEL_ROWS) {
        int nr = n1 - nc < PANEL_ROWS ? n1 - nc : PANEL_ROWS;
        int ngroups = (nr + 15) / 16;
        for (int ks = k0; ks < k1; ks += PANEL_KS) {
            int ke = k1 - ks < PANEL_KS ? k1 : ks + PANEL_KS;
            int kb = ks / BK, nb = (ke - ks) / BK;
            bool first = ks == k0;
            panel_pack(type, W, wrow, nc, nr, kb, nb, codes, scale, off);
            for (int m = 0; m < M; m += 4) {
                int mt = M - m < 4 ? M - m : 4;
                panel_act pa;
                pa.init_mul = mode == PM_Q6                ? -32
                              : mode == PM_Q3              ? -4
                              : type == KT_TYPE_IQ4_NL     ? 16
                              : type == KT_TYPE_Q5_0       ? 2 /* R40's -8 sum to -16 sum */
                                                           : 1;
                pa.init_shift = pa.init_mul > 0 ? __builtin_ctz((unsigned)pa.init_mul) : 0;
                for (int t = 0; t < 4; t++) {
                    int tt = m + (t < mt ? t : mt - 1);
                    const uint8_t *x = ext ? ext[tt] : NULL;
                    pa.code[t] = act[tt];
                    pa.init[t] = mode == PM_Q80 || mode == PM_Q80S ? (const int32_t *)x : NULL;
                    pa.ds[t] = mode == PM_K32 ? (const float *)x : NULL;
                    pa.da[t] = x ? (const float *)(x + xs) : NULL;
                }
                for (int g = 0; g < ngroups; g += 2) {
                    int G = ngroups - g < 2 ? 1 : 2;
                    walk_step(&next, per);
                    int v0 = nr - 16 * g < 16 ? nr - 16 * g : 16;
                    int v1 = G == 2 ? (nr - 16 * g - 16 < 16 ? nr - 16 * g - 16 : 16) : 0;
                    const uint8_t *cg = codes + (size_t)g * nb * BK * 16;
                    const float *sg = scale + (size_t)g * nb * 16, *og = off + (size_t)g * nb * 16;
                    float *Cm = C + (size_t)m * ldc + (nc - n0) + 16 * g;
                    if (mode == PM_Q6)
                        PANEL_G(PM_Q6);
                    else if (mode == PM_Q3)
                        PANEL_G(PM_Q3);
                    else if (mode == PM_Q2)
                        PANEL_G(PM_Q2);
                    else if (mode == PM_X4)
                        PANEL_G(PM_X4);
                    else if (mode == PM_K32)
                        PANEL_G(PM_K32);
                    else if (mode == PM_Q81)
                        PANEL_G(PM_Q81);
                    else if (mode == PM_Q80S)
                        PANEL_G(PM_Q80S);
                    else
                        PANEL_G(PM_Q80);
                }
            }
        }
    }
}

_Static_assert(KT__LF_PANEL_SCRATCH ==
                   PANEL_ROWS * PANEL_KS + 2 * PANEL_ROWS * (PANEL_KS / 16) * 4,
               "panel scratch");

/* ---------------------------------------------------------------------------
 * Activation blocks Q8_0 / Q8_1 (ggml's from_float, bit for bit): per 32 inputs
 *
 *   amax = max |x|,  d = f16(amax / 127),  q = nearbyint(x * (127 / amax)),
 *   Q8_1: s = f16((amax / 127) * sum q)
 *
 * (vcvtps2ph and vcvtps2dq round to nearest even, as the reference does).
 */
void kt__lf_quant_q8_avx512(const float *x, void *y, int nblocks, bool q81)
{
    const size_t bytes = q81 ? sizeof(kt_block_q8_1) : sizeof(kt_block_q8_0);
    const size_t oq = q81 ? 4 : 2;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int b = 0; b < nblocks; b++, x += 32) {
        uint8_t *blk = (uint8_t *)y + (size_t)b * bytes;
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        float amax = _mm512_reduce_max_ps(
            _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        float d = amax / 127.0f;
        __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
        _mm_storeu_si128((__m128i *)(blk + oq), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(blk + oq + 16), _mm512_cvtepi32_epi8(q1));
        uint16_t h = (uint16_t)_mm_extract_epi16(
            _mm_cvtps_ph(_mm_set_ss(d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0);
        memcpy(blk, &h, 2);
        if (q81) {
            int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
            uint16_t s = (uint16_t)_mm_extract_epi16(
                _mm_cvtps_ph(_mm_set_ss(d * (float)sum), _MM_FROUND_TO_NEAREST_INT |
                                                             _MM_FROUND_NO_EXC), 0);
            memcpy(blk + 2, &s, 2);
        }
    }
}

/* Q8_K blocks (ggml's reference quantizer, bit for bit): per 256 inputs, max
 * the input of largest magnitude (the first one on ties), iscale = -127 / max,
 * q = min(nearbyint(iscale x), 127), bsums per 16, d = 1 / iscale; all zero
 * when every input is. */
void kt__lf_quant_q8k_avx512(const float *x, void *y, int nblocks)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int b = 0; b < nblocks; b++, x += 256) {
        kt_block_q8_K *blk = (kt_block_q8_K *)y + b;
        __m512 mx = _mm512_setzero_ps();
        for (int i = 0; i < 16; i++)
            mx = _mm512_max_ps(mx, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * i)));
        float amax = _mm512_reduce_max_ps(mx);
        if (amax == 0.0f) {
            memset(blk, 0, sizeof *blk);
            continue;
        }
        float max = 0.0f;
        const __m512 am = _mm512_set1_ps(amax);
        for (int i = 0; i < 16; i++) {
            __mmask16 k = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * i)),
                                             am, _CMP_EQ_OQ);
            if (k) {
                max = x[16 * i + __builtin_ctz((unsigned)k)];
                break;
            }
        }
        float iscale = -127.0f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int i = 0; i < 16; i++) {
            __m512i q = _mm512_min_epi32(
                _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * i))),
                _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(blk->qs + 16 * i), _mm512_cvtepi32_epi8(q));
            blk->bsums[i] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        blk->d = 1 / iscale;
    }
}
