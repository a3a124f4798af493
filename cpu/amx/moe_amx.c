/*
 * AMX prefill kernels for the BF16, FP8, RAWINT4 / AMXINT4 and AMXINT8 MoE
 * methods.
 *
 * Same contract as every kernel set (cpu/moe_kernels.h): C = A W^T over output
 * rows [n0, n1) and inputs [k0, k1). Each set here keeps the activation format
 * and the decode path of the AVX-512 set of its method, and takes over only
 * calls with enough tokens per expert that tiles pay (see AMX_MIN_*).
 *
 * The tiles compute the transposed product, C^T = W A^T:
 *   tile A operand = 16 weight rows x 64 bytes, loaded straight from the
 *                    weights (BF16, AMXINT8) or from a decoded copy (FP8, INT4),
 *   tile B operand = 64 bytes of inputs x 16 tokens in the VNNI layout,
 *                    packed once per epoch from the activations,
 *   tile C         = 16 weight rows x 16 tokens, FP32 or INT32.
 * So the weights, the operand that streams from memory, are never repacked;
 * only the activations (reused by every weight row) are.
 *
 * BF16 and FP8 run on AMX-BF16 tiles (FP8 decoded to BF16 per block); AMXINT8
 * and INT4 on AMX-INT8 tiles with the activations quantized to int8 once per
 * token (see the AMX-INT8 section). KT_MOE_PREC_BF16X2 (hi + lo BF16
 * activations) runs every method on AMX-BF16 tiles with exact weights (see the
 * BF16X2 section).
 *
 * Built twice: into the AMX library with -mamx-*, and, with KT_AMX_EMULATE,
 * into a unit test whose scalar tile emulation checks the packing and the
 * loop structure on machines without AMX.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "avx512/q8_token.h" /* q8t_mask32, q8t_q16, q8t_absmax_bf16 */
#include "moe_kernels.h"

#ifdef KT_AMX_EMULATE
#include "amx_emulate.h"
#define AMX_FN(name) name##_emulated
#else
#define AMX_FN(name) name
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Fewest tokens of an expert that take the tiles; fewer take the AVX-512
 * path. Measured on the GPU machine's 16-core Xeon (docs/performance.md,
 * docs/bench/h200-xeon16-amx2-crossover.txt): grouped INT4 (64, 128) from 2;
 * INT4 in groups of 32 (a fold per 32 inputs) from about 4. BF16 tiles: 8
 * (not re-measured). AMXINT8: the VNNI decode up to 4 tokens (its rows read
 * one after the other), the tiles from 5. The tiles read an expert's 32-row
 * blocks 256 bytes a row at a time, which the 2-core AMX Xeon VM (xeon2)
 * streams at 0.76-0.79 of stream at Qwen3-30B-A3B shape (K 768 rows: 0.75 of
 * a read loop on one core against the VNNI decode's 0.98), the VNNI decode at
 * 0.90-0.94; DeepSeek-V3 0.93 -> 0.97-0.98; prefill T=64 / 512 / 2048 level
 * (docs/bench/xeon2-int8dec-1153-*, -1156-*). On the 16-core Xeon the tiles
 * were level with session 9's VNNI kernel at T=1 (72.3 / 70.5 GB/s): not
 * re-measured since. KT_AMX_MIN_TOKENS overrides them all, for measuring. */
#define AMX_MIN_M 8
#define AMX_MIN_INT8 5
#define AMX_MIN_INT4G 2
#define AMX_MIN_INT4 4
#define KCH 512       /* inputs per chunk (multiple of 64)                     */
#define MMAX 256      /* tokens per packed batch                                */
#define NB 32         /* weight rows per tile block (two A tiles)               */

/* Tile registers: C00 C01 C10 C11 (rows x tokens), W0 W1, X0 X1. Macros, not
 * enums: GCC's tile intrinsics paste the register number into the assembly. */
#define TC00 0
#define TC01 1
#define TC10 2
#define TC11 3
#define TW0 4
#define TW1 5
#define TX0 6
#define TX1 7
/* 2 x 3 C tiles (33 to 48 tokens, tiles_i8_rows): C02 and C12 in the W
 * registers, the weight and token operands in the X registers */
#define TC02 4
#define TC12 5
#define TWX TX0
#define TXX TX1

typedef struct tile_config {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Configured once per call (cheap): every tile 16 rows x 64 bytes, but the
 * W operands 16 rows x ks bytes and X ks / 4 rows (ks 64, or 32 for INT8
 * products of the INT4 groups of 32). */
static void configure_tiles(int ks)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    cfg.colsb[TW0] = cfg.colsb[TW1] = (uint16_t)ks;
    cfg.rows[TX0] = cfg.rows[TX1] = (uint8_t)(ks / 4);
    _tile_loadconfig(&cfg);
}

/* Which activations the packed copy holds: reused while the key matches
 * (the gate and up calls of an item, a thread's next item of the same
 * expert). The epoch changes with every backend call, so a copy never outlives
 * the activations it was made from. */
typedef struct pack_key {
    const void *A;
    const int32_t *rows;
    size_t a_stride, view;
    uint64_t epoch;
    int m0, mn, k0, kx, valid;
} pack_key;

#define KTMAX (8192 / 32) /* 32-input steps the whole-K copy holds (K <= 8192) */

#define GMAX (KCH / 32)  /* weight scale groups per chunk (INT4 groups >= 32)        */
#define I4E_GROUPS 512   /* INT4 groups of a row whose integer factors are kept (K 16384) */

typedef struct amx_scratch {
    pack_key key;
    _Alignas(64) float ctile[16 * 16];         /* one C^T tile on its way out        */
    _Alignas(64) int32_t ring[2][16 * 16];     /* INT8 tiles: two groups' int32 sums  */
    _Alignas(64) uint16_t wdec[NB * KCH];      /* [32][KCH] decoded weight rows (BF16,
                                                  or int8 [32][KCH] for INT8 tiles)   */
    _Alignas(64) float facc[NB * MMAX];        /* INT8 tiles: [32 rows][tokens] sums  */
    float gsc[NB * GMAX];                      /* INT8 tiles: [32 rows][group] scales */
    float tscale[MMAX], tinv[MMAX];            /* INT8 tiles: token scale, 1 / scale  */
    int8_t i4e[2][NB * I4E_GROUPS];            /* INT4 rescale: two blocks' integer
                                                  factors [NB][groups]                 */
    _Alignas(64) int8_t panel[NB * (256 + 8) * 64]; /* INT4 rows rescaled over the whole
                                                  K (KTMAX8 steps, chunks of up to
                                                  KQ_MAX), tiles_i8_rows' passes      */
    _Alignas(64) uint16_t xpack[(MMAX / 16) * KTMAX * 512]; /* [M/16][K/32][16 pairs][16 tok][2];
                                                  INT8: [M/16][K/64][16 quads][16 tok][4] */
} amx_scratch;

/* ---- KT_AMX_PROFILE=1 (for measuring) ----------------------------------------
 *
 * Per thread TSC cycles of the AMX-INT8 row loop's parts (tiles_i8_rows and
 * the INT4 rescale around it; of the loop, the token blocks after the first:
 * with passes, what reads the block's rows from L2; and the first token block
 * of the blocks whose rows nobody prefetched whole, i.e. read from memory as
 * it goes), in two sets: gate / up
 * (W rows < cols) and down; with the calls' token counts.
 * kt__moe_amx_profile() reports and clears them (the backend logs it with
 * KT_MOE_PROFILE). KT_AMX_PROBE (bits,
 * for measuring; the results are wrong): 1 no INT4 rescale in the loop, 2 no
 * tile products (the 2 x 2 loop), 4 no weight prefetches, 8 the rescale reads
 * every row's nibbles from the block's first row (in L1: the rescale's work
 * without its share of the weight stream), 16 the EO128 rescale without its
 * stores (its results folded into one store a row), 32 the rescale's stores
 * into a buffer the tiles do not read (no store-to-tile-load dependency). */
enum { AP_BLOCK, AP_DEC0, AP_LOOP, AP_DEC, AP_LATER, AP_COLD, AP_PARK, AP_EPI, AP_N };
#define AP_HIST 17      /* calls by tokens: 1-16, 17-32, ..., 241-256, more */
#define AP_THREADS 256  /* slots (threads past it share one: measuring only) */

typedef struct amx_prof {
    uint64_t cyc[AP_N];
    uint64_t calls, products, hist[AP_HIST];
    uint64_t cold; /* tile calls (32-row blocks) whose rows nobody prefetched whole */
} amx_prof;

static int amx_profile_on, probe;
static amx_prof prof_tab[AP_THREADS][2];
static int prof_next;
static _Thread_local int prof_slot = -1, prof_set;
static uint64_t prof_tsc0;
static double prof_sec0;

static double prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This thread's counters of the current set (NULL when off). */
static inline amx_prof *prof_here(void)
{
    if (!amx_profile_on)
        return NULL;
    if (prof_slot < 0)
        prof_slot = __atomic_fetch_add(&prof_next, 1, __ATOMIC_RELAXED) % AP_THREADS;
    return &prof_tab[prof_slot][prof_set];
}

static inline uint64_t prof_tsc(const amx_prof *p)
{
    return p ? __rdtsc() : 0;
}

static inline void prof_add(amx_prof *p, int part, uint64_t *t)
{
    if (!p)
        return;
    uint64_t now = __rdtsc();
    p->cyc[part] += now - *t;
    *t = now;
}

/* 64-input steps the whole-K int8 copy holds. */
#define KTMAX8 ((int)(sizeof(((amx_scratch *)0)->xpack) / ((MMAX / 16) * 1024)))
_Static_assert(KTMAX8 == 256, "amx_scratch.panel holds 256 steps (and a chunk's rounding)");

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

/* Fills *key for the copy of tokens [m0, m0 + mn) x inputs [k0, k0 + kx) of
 * this call's activations (`valid`: which copy) and says whether s holds it;
 * if not, s holds none from now on (the caller packs, then stores the key). */
static int key_cached(amx_scratch *s, pack_key *key, const void *A, const int32_t *rows,
                      size_t a_stride, size_t view, int m0, int mn, int k0, int kx, int valid)
{
    memset(key, 0, sizeof *key); /* padding too: the key is compared bytewise */
    key->A = A;
    key->rows = rows;
    key->a_stride = a_stride;
    key->view = view;
    key->epoch = __atomic_load_n(&kt__moe_epoch, __ATOMIC_ACQUIRE);
    key->m0 = m0;
    key->mn = mn;
    key->k0 = k0;
    key->kx = kx;
    key->valid = valid;
    if (!memcmp(key, &s->key, sizeof *key))
        return 1;
    s->key.valid = 0;
    return 0;
}

/* 16 x 16 transpose of 32-bit elements: out[i][j] = in[j][i]. */
ALWAYS_INLINE void transpose16(__m512i r[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[4i + j], 128-bit lane L = column 4L + j of rows 4i..4i+3 */
    for (int j = 0; j < 4; j++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
        __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
        __m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        __m512i w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
        r[4 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
    }
}

/* Pack the BF16 view of tokens [m0, m0 + mn) x inputs [kb, kb + kn) into VNNI
 * tiles: xpack[mb][kt][r][c][j] = x[m0 + 16 mb + c][kb + 32 kt + 2 r + j], with
 * kt_stride tiles between token blocks. As 32-bit pairs each (mb, kt) tile is
 * a 16 x 16 transpose. Tokens and inputs past the ends are zero. `view` is the
 * byte offset of the BF16 copy in an activation row. */
static void pack_x(const void *A, size_t a_stride, const int32_t *rows, size_t view, int m0,
                   int mn, int kb, int kn, uint16_t *xpack, int kt_stride)
{
    int kt_n = (kn + 31) / 32, mb_n = (mn + 15) / 16;
    for (int mb = 0; mb < mb_n; mb++) {
        const uint16_t *src[16];
        for (int c = 0; c < 16; c++) {
            int m = mb * 16 + c;
            src[c] = m < mn ? (const uint16_t *)((const char *)arow(A, a_stride, rows, m0 + m) +
                                                 view) + kb
                            : NULL;
        }
        for (int kt = 0; kt < kt_n; kt++) {
            int left = kn - kt * 32;
            __mmask32 msk = left >= 32 ? ~(__mmask32)0 : (((__mmask32)1 << left) - 1);
            __m512i r[16];
            for (int c = 0; c < 16; c++)
                r[c] = src[c] ? _mm512_maskz_loadu_epi16(msk, src[c] + kt * 32)
                              : _mm512_setzero_si512();
            transpose16(r);
            uint16_t *dst = xpack + ((size_t)mb * kt_stride + kt) * 512;
            for (int i = 0; i < 16; i++)
                _mm512_store_si512(dst + i * 32, r[i]);
        }
    }
}

/* C rows m, columns (n - n0) += / = C^T tile (16 weight rows x 16 tokens). */
static void store_ct(const float *ct, float *C, int ldc, int n_off, int nr, int m0, int mr,
                     int accumulate)
{
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_si512(ct + i * 16);
    transpose16(r); /* r[t] = the 16 weight rows of token t */
    __mmask16 msk = (__mmask16)((1u << nr) - 1u);
    for (int t = 0; t < mr; t++) {
        float *c = C + (size_t)(m0 + t) * ldc + n_off;
        __m512 v = _mm512_castsi512_ps(r[t]);
        if (accumulate)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(msk, c));
        _mm512_mask_storeu_ps(c, msk, v);
    }
}

/* The tile loop for one block of up to 32 weight rows (BF16, row stride ldw
 * bytes, KCH-chunk local, kt_n 32-input steps) against every packed token
 * block: the hot loop. */
/* With at most 32 tokens, `first` / `last` let a caller keep the C tiles in
 * the tile registers across several calls (successive K chunks): zero them
 * only on the first, store them only on the last. */
static void tiles_block(const uint16_t *w, size_t ldw, int nr, const uint16_t *xpack,
                        size_t x_mb_stride, int mn, int kt_n, float *C, int ldc, int n_off,
                        int accumulate, int prefetch, int first, int last, amx_scratch *s)
{
    int two_w = nr > 16;
    for (int mb = 0; mb < mn; mb += 32) {
        int two_x = mn - mb > 16;
        if (first) {
            _tile_zero(TC00);
            _tile_zero(TC01);
            _tile_zero(TC10);
            _tile_zero(TC11);
        }
        const uint16_t *x0 = xpack + (size_t)(mb / 16) * x_mb_stride;
        const uint16_t *x1 = x0 + x_mb_stride;
        /* hot loop: 4 tile products per 32 inputs; on the first token block
         * the weights come from memory, so fetch 8 steps ahead */
        for (int kt = 0; kt < kt_n; kt++) {
            if (prefetch && mb == 0)
                for (int r = 0; r < nr; r++)
                    _mm_prefetch((const char *)w + (size_t)r * ldw + (kt + 8) * 64, _MM_HINT_T0);
            _tile_loadd(TW0, w + kt * 32, ldw);
            _tile_loadd(TX0, x0 + (size_t)kt * 512, 64);
            _tile_dpbf16ps(TC00, TW0, TX0);
            if (two_x) {
                _tile_loadd(TX1, x1 + (size_t)kt * 512, 64);
                _tile_dpbf16ps(TC01, TW0, TX1);
            }
            if (two_w) {
                _tile_loadd(TW1, (const char *)w + 16 * ldw + kt * 64, ldw);
                _tile_dpbf16ps(TC10, TW1, TX0);
                if (two_x)
                    _tile_dpbf16ps(TC11, TW1, TX1);
            }
        }
        if (!last)
            continue;
        int mr0 = imin(16, mn - mb), mr1 = imin(16, mn - mb - 16);
        _tile_stored(TC00, s->ctile, 64);
        store_ct(s->ctile, C, ldc, n_off, imin(16, nr), mb, mr0, accumulate);
        if (two_x) {
            _tile_stored(TC01, s->ctile, 64);
            store_ct(s->ctile, C, ldc, n_off, imin(16, nr), mb + 16, mr1, accumulate);
        }
        if (two_w) {
            _tile_stored(TC10, s->ctile, 64);
            store_ct(s->ctile, C, ldc, n_off + 16, nr - 16, mb, mr0, accumulate);
            if (two_x) {
                _tile_stored(TC11, s->ctile, 64);
                store_ct(s->ctile, C, ldc, n_off + 16, nr - 16, mb + 16, mr1, accumulate);
            }
        }
    }
}

/* Fills s->wdec rows [0, nr) x [0, kpad) with BF16 weights of rows [n, n + nr)
 * and inputs [kc, kc + kn) (zero past kn), in the order of the activation view. */
typedef void (*decode_fn)(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                          uint16_t *dst);

static void decode_bf16(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                        uint16_t *dst)
{
    const uint16_t *w = W->w;
    for (int r = 0; r < NB; r++) {
        uint16_t *d = dst + (size_t)r * KCH;
        if (r < nr)
            memcpy(d, w + (size_t)(n + r) * W->cols + kc, (size_t)kn * 2);
        memset(d + (r < nr ? kn : 0), 0, (size_t)(kpad - (r < nr ? kn : 0)) * 2);
    }
}

/* E4M3 -> BF16 by byte tables, the sign or'ed / xor'ed into the high byte; the
 * unpack leaves the BF16P64 order the activations of this method use.
 * e4m3_hi / e4m3_lo: the BF16 of each of the 128 magnitudes (decode_x2_fp8's
 * exact weights); e4m3_mag: the magnitudes as F32, from which decode_fp8 makes
 * each block's tables with its scale folded in. */
static uint8_t e4m3_hi[128], e4m3_lo[128];
static float e4m3_mag[128];
static void init_e4m3_tables(void)
{
    for (int b = 0; b < 128; b++) {
        e4m3_mag[b] = kt__moe_e4m3_f32((uint8_t)b);
        uint16_t h = kt__moe_f32_bf16(e4m3_mag[b]);
        e4m3_lo[b] = (uint8_t)(h & 0xff);
        e4m3_hi[b] = (uint8_t)(h >> 8);
    }
}

/* The tables of one 128 x 128 block with its scale s folded in: t[0] / t[1]
 * the high and t[2] / t[3] the low bytes of bf16(e4m3(i) * s) for i = 0..63 /
 * 64..127: the BF16 numbers of widening each decoded weight, multiplying by s
 * in F32 and rounding once, made once a block instead of per 32 weights. */
ALWAYS_INLINE void fp8_scaled_tables(float s, __m512i t[4])
{
    const __m512 sv = _mm512_set1_ps(s);
    __m256i h[4], l[4];
    for (int j = 0; j < 4; j++) {
        __m512 f0 = _mm512_mul_ps(_mm512_loadu_ps(e4m3_mag + 32 * j), sv);
        __m512 f1 = _mm512_mul_ps(_mm512_loadu_ps(e4m3_mag + 32 * j + 16), sv);
        __m512i b = (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
        h[j] = _mm512_cvtepi16_epi8(_mm512_srli_epi16(b, 8));
        l[j] = _mm512_cvtepi16_epi8(b);
    }
    t[0] = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
    t[1] = _mm512_inserti64x4(_mm512_castsi256_si512(h[2]), h[3], 1);
    t[2] = _mm512_inserti64x4(_mm512_castsi256_si512(l[0]), l[1], 1);
    t[3] = _mm512_inserti64x4(_mm512_castsi256_si512(l[2]), l[3], 1);
}

/* FP8 rows -> scaled BF16 (kc a multiple of 64), a 128-input block at a time:
 * its tables made once for the rows of one scale block, then per 64 weights 2
 * vpermt2b, a vpternlogd (the sign; a negative scale's entries carry their
 * own) and 2 unpacks. */
static void decode_fp8(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                       uint16_t *dst)
{
    const uint8_t *w = W->w;
    const float *sc = W->scale;
    int cols = W->cols, cb = (cols + 127) / 128;
    for (int k = 0; k < kpad;) {
        int b = (kc + k) / 128, ke = imin(kpad, (b + 1) * 128 - kc); /* the block's end */
        for (int r0 = 0; r0 < nr;) {
            int rb = (n + r0) / 128, re = imin(nr, (rb + 1) * 128 - n); /* one scale's rows */
            __m512i t[4];
            fp8_scaled_tables(sc[(size_t)rb * cb + b], t);
            for (int r = r0; r < re; r++) {
                const uint8_t *row = w + (size_t)(n + r) * cols + kc;
                uint16_t *d = dst + (size_t)r * KCH;
                for (int j = k; j < ke; j += 64) {
                    int left = kn - j;
                    __mmask64 msk = left >= 64 ? ~(__mmask64)0
                                               : (left <= 0 ? 0 : (((__mmask64)1 << left) - 1));
                    _mm_prefetch((const char *)row + j + KCH, _MM_HINT_T0); /* next chunk */
                    __m512i v = _mm512_maskz_loadu_epi8(msk, row + j);
                    __asm__("" : "+v"(v)); /* one load for both permutes */
                    __m512i hi = _mm512_permutex2var_epi8(t[0], v, t[1]);
                    __m512i lo = _mm512_permutex2var_epi8(t[2], v, t[3]);
                    hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0x78);
                    _mm512_storeu_si512(d + j, _mm512_unpacklo_epi8(lo, hi));
                    _mm512_storeu_si512(d + j + 32, _mm512_unpackhi_epi8(lo, hi));
                }
            }
            r0 = re;
        }
        k = ke;
    }
    for (int r = nr; r < NB; r++)
        memset(dst + (size_t)r * KCH, 0, (size_t)kpad * 2);
}

/* Packed nibbles (first input in the low bits, stored as value + 8) times the
 * BF16 scale of each 32 inputs -> BF16 in input order. */
static void decode_int4(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                        uint16_t *dst)
{
    const uint8_t *w = W->w;
    const uint16_t *sc = W->scale;
    size_t rb = (size_t)W->cols / 2, sb = (size_t)W->cols / 32;
    for (int r = 0; r < NB; r++) {
        uint16_t *d = dst + (size_t)r * KCH;
        if (r >= nr) {
            memset(d, 0, (size_t)kpad * 2);
            continue;
        }
        const uint8_t *row = w + (size_t)(n + r) * rb;
        const uint16_t *srow = sc + (size_t)(n + r) * sb;
        for (int k = 0; k < kn; k += 32) {
            if (!(k & 127))
                _mm_prefetch((const char *)row + (size_t)(kc + k + KCH) / 2, _MM_HINT_T0);
            __m256i b = _mm256_cvtepu8_epi16(
                _mm_loadu_si128((const __m128i *)(row + (size_t)(kc + k) / 2)));
            __m256i nib = _mm256_or_si256(
                _mm256_and_si256(b, _mm256_set1_epi16(0x0f)),
                _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0xf0)), 4));
            __m512 s = _mm512_set1_ps(kt__moe_bf16_f32(srow[(kc + k) / 32]));
            __m512i eight = _mm512_set1_epi32(8);
            __m512 lo = _mm512_cvtepi32_ps(
                _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(nib)), eight));
            __m512 hi = _mm512_cvtepi32_ps(
                _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(nib, 1)), eight));
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, s), _mm512_mul_ps(lo, s));
            _mm512_storeu_si512(d + k, (__m512i)v);
        }
        if (kpad > kn)
            memset(d + kn, 0, (size_t)(kpad - kn) * 2);
    }
}

/* C = A W^T with tiles. `view` is the byte offset of the BF16 activations in
 * a row; `decode` is NULL when the weights are BF16 and can be tiled in place. */
static void amx_gemm(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                     amx_scratch *s, size_t view, decode_fn decode, int kalign)
{
    configure_tiles(64);
    /* kalign 64: the FP8 activations are permuted within each 64 inputs, so a
     * partial 64 is covered whole (the decoded weights past the end are zero) */
    int kx_all = kalign == 64 ? (k1 - k0 + 63) & ~63 : k1 - k0;
    int kt_all = (kx_all + 31) / 32;
    int whole_k = kt_all <= KTMAX; /* the packed copy holds all of [k0, k1) */
    int in_place = !decode && (k1 - k0) % 32 == 0;
    for (int m0 = 0; m0 < M; m0 += MMAX) {
        int mn = imin(MMAX, M - m0);
        const int32_t *r = rows ? rows + m0 : NULL;
        int mfirst = rows ? 0 : m0;
        float *Cm = C + (size_t)m0 * ldc;
        size_t x_mb_stride = (size_t)(whole_k ? kt_all : KCH / 32) * 512;
        if (whole_k) {
            pack_key key;
            if (!key_cached(s, &key, A, r, a_stride, view, mfirst, mn, k0, kx_all, 1)) {
                pack_x(A, a_stride, r, view, mfirst, mn, k0, kx_all, s->xpack, kt_all);
                s->key = key;
            }
        }
        /* with the whole-K copy: one pass over K (BF16 weights in place; decoded
         * weights chunk by chunk below, C staying in the tiles) */
        int step = whole_k ? k1 - k0 : KCH;
        for (int kc = k0; kc < k1; kc += step) {
            int kn = imin(step, k1 - kc), kpad = (kn + kalign - 1) / kalign * kalign;
            int kt_n = (kpad + 31) / 32;
            const uint16_t *xk = s->xpack;
            if (whole_k)
                xk += (size_t)((kc - k0) / 32) * 512;
            else
                pack_x(A, a_stride, r, view, mfirst, mn, kc, kalign == 64 ? kpad : kn, s->xpack,
                       KCH / 32);
            for (int nb = n0; nb < n1; nb += NB) {
                int nr = imin(NB, n1 - nb);
                if (in_place && nr == NB) {
                    const uint16_t *w = (const uint16_t *)W->w + (size_t)nb * W->cols + kc;
                    tiles_block(w, (size_t)W->cols * 2, nr, xk, x_mb_stride, mn, kt_n, Cm, ldc,
                                nb - n0, kc > k0, 1, 1, 1, s);
                    continue;
                }
                /* decoded (or ragged BF16) rows, KCH inputs at a time; up to 32
                 * tokens keep their C tiles in registers over all the chunks */
                int keep = mn <= 32;
                for (int sc = kc; sc < kc + kn; sc += KCH) {
                    int sn = imin(KCH, kc + kn - sc);
                    int st = ((kalign == 64 ? (sn + 63) & ~63 : sn) + 31) / 32;
                    int first = !keep || sc == kc, last = !keep || sc + KCH >= kc + kn;
                    (decode ? decode : decode_bf16)(W, nb, nr, sc, sn, st * 32, s->wdec);
                    tiles_block(s->wdec, KCH * 2, nr, xk + (size_t)((sc - kc) / 32) * 512,
                                x_mb_stride, mn, st, Cm, ldc, nb - n0,
                                keep ? kc > k0 : sc > k0, 0, first, last, s);
                }
            }
        }
    }
}

/* ---- AMX-INT8: AMXINT8 and INT4 weights --------------------------------------
 *
 * The activations are quantized once per token over the call's inputs:
 *   d_m = max_k |x_m[k]| / 127,  q_m[k] = round(x_m[k] / d_m)  (int8),
 * and packed into VNNI tiles of 64 inputs x 16 tokens (one 16 x 16 dword
 * transpose). The weights are the signed int8 A operand: AMXINT8 rows in
 * place, INT4 nibbles decoded to int8 per chunk. _tile_dpbssd accumulates
 * int32; the scales come in the epilogue:
 *   AMXINT8:  C[m][n] = d_m s_n sum_k q_m[k] w[n][k]
 *   INT4:     C[m][n] = d_m sum_g s[n][g] sum_{k in g} q_m[k] v[n][k]
 * INT4 folds each group's int32 tile into F32 accumulators (facc) with the
 * group's scales; groups of 32 use tiles of 32 inputs (W 16 x 32 bytes, X 8
 * rows), larger groups tiles of 64.
 */

#define XSTEP 1024 /* bytes of one packed 64-input x 16-token step */

/* Per-token scales over inputs [kb, kb + kn) of the BF16 view: inv[m] = 127 /
 * max|x| (0 for a zero row), d[m] = 1 / inv[m] as the epilogue applies it. */
static void token_scales(const void *A, size_t a_stride, const int32_t *rows, size_t view, int m0,
                         int mn, int kb, int kn, float *d, float *inv)
{
    for (int m = 0; m < mn; m++) {
        const uint16_t *x =
            (const uint16_t *)((const char *)arow(A, a_stride, rows, m0 + m) + view) + kb;
        float amax = q8t_absmax_bf16(x, kn);
        inv[m] = amax > 0.0f ? 127.0f / amax : 0.0f;
        d[m] = amax > 0.0f ? amax / 127.0f : 0.0f;
    }
}

/* Input orders of a packed 64-input step: as is, or as the INT4 decoder
 * leaves the weights (low nibbles = even inputs first, then the odd ones)
 * per 64 or per 32 inputs; or (EO128) per pair of steps, the even inputs of
 * its 128 in the first step and the odd ones in the second (the rescale's
 * 64-byte loads: one per 128 inputs). */
enum { PERM_NONE = 0, PERM_EO64 = 1, PERM_EO32 = 2, PERM_EO128 = 3 };

/* The byte permute of a step (EO128: of the pair's first step from two
 * 64-input vectors; `odd` its second's) */
static __m512i perm_index(int perm, int odd)
{
    uint8_t idx[64];
    for (int j = 0; j < 64; j++) {
        if (perm == PERM_EO128) {
            idx[j] = (uint8_t)(2 * j + odd);
        } else if (perm == PERM_EO64) {
            idx[j] = (uint8_t)(j < 32 ? 2 * j : 2 * (j - 32) + 1);
        } else {
            int h = j / 32, i = j % 32;
            idx[j] = (uint8_t)(32 * h + (i < 16 ? 2 * i : 2 * (i - 16) + 1));
        }
    }
    return _mm512_loadu_si512(idx);
}

/* 64 BF16 inputs (`left` of them there, zero past) times s, rounded to even,
 * saturated to int8. */
ALWAYS_INLINE __m512i q8_step(const uint16_t *x, int left, __m512 s)
{
    __m512i a = _mm512_maskz_loadu_epi16(q8t_mask32(left), x);
    __m512i b = _mm512_maskz_loadu_epi16(q8t_mask32(left - 32), x + 32);
    __m512i v = _mm512_castsi128_si512(q8t_q16(_mm512_castsi512_si256(a), s));
    v = _mm512_inserti32x4(v, q8t_q16(_mm512_extracti64x4_epi64(a, 1), s), 1);
    v = _mm512_inserti32x4(v, q8t_q16(_mm512_castsi512_si256(b), s), 2);
    return _mm512_inserti32x4(v, q8t_q16(_mm512_extracti64x4_epi64(b, 1), s), 3);
}

/* Quantize and pack tokens [m0, m0 + mn) x inputs [kb, kb + kn) into VNNI
 * int8 tiles: xpack[mb][kt][quad r][token c][4] = q[m0 + 16 mb + c][kb + 64 kt
 * + p(4 r + j)], p the step's input order (perm), kt_stride steps between
 * token blocks; zero past the ends. */
static void pack_x_i8(const void *A, size_t a_stride, const int32_t *rows, size_t view, int m0,
                      int mn, int kb, int kn, const float *inv, uint8_t *xpack, int kt_stride,
                      int perm)
{
    int kt_n = (kn + 63) / 64, mb_n = (mn + 15) / 16;
    const __m512i pidx = perm ? perm_index(perm, 0) : _mm512_setzero_si512();
    const __m512i pidx1 = perm == PERM_EO128 ? perm_index(perm, 1) : _mm512_setzero_si512();
    __m512i odd[16]; /* EO128: the pair's second step, made with its first */
    for (int mb = 0; mb < mb_n; mb++) {
        const uint16_t *src[16];
        __m512 s[16];
        for (int c = 0; c < 16; c++) {
            int m = mb * 16 + c;
            src[c] = m < mn ? (const uint16_t *)((const char *)arow(A, a_stride, rows, m0 + m) +
                                                 view) + kb
                            : NULL;
            s[c] = _mm512_set1_ps(m < mn ? inv[m] : 0.0f);
        }
        for (int kt = 0; kt < kt_n; kt++) {
            int left = kn - kt * 64;
            __m512i r[16];
            for (int c = 0; c < 16; c++) {
                if (!src[c]) {
                    r[c] = _mm512_setzero_si512();
                    continue;
                }
                if (perm == PERM_EO128 && (kt & 1)) {
                    r[c] = odd[c];
                    continue;
                }
                __m512i v = q8_step(src[c] + kt * 64, left, s[c]);
                if (perm == PERM_EO128) {
                    __m512i h = q8_step(src[c] + kt * 64 + 64, left - 64, s[c]);
                    odd[c] = _mm512_permutex2var_epi8(v, pidx1, h);
                    r[c] = _mm512_permutex2var_epi8(v, pidx, h);
                } else {
                    r[c] = perm ? _mm512_permutexvar_epi8(pidx, v) : v;
                }
            }
            transpose16(r);
            uint8_t *dst = xpack + ((size_t)mb * kt_stride + kt) * XSTEP;
            for (int i = 0; i < 16; i++)
                _mm512_store_si512(dst + i * 64, r[i]);
        }
    }
}

/* C[m0 + t][n_off + r] (=, or += with accumulate) = tile[r][t] * rs[r] * ts[t]
 * for a 16 x 16 tile (weight rows x tokens, `ld` floats between rows; int32
 * when is_int), nr rows and mr tokens. */
static void store_scaled(const void *tile, int ld, int is_int, const float *rs, const float *ts,
                         float *C, int ldc, int n_off, int nr, int m0, int mr, int accumulate)
{
    __m512i r[16];
    for (int i = 0; i < 16; i++) {
        __m512i v = _mm512_loadu_si512((const char *)tile + (size_t)i * ld * 4);
        __m512 f = is_int ? _mm512_cvtepi32_ps(v) : _mm512_castsi512_ps(v);
        r[i] = _mm512_castps_si512(rs ? _mm512_mul_ps(f, _mm512_set1_ps(rs[i])) : f);
    }
    transpose16(r); /* r[t] = the 16 weight rows of token t */
    __mmask16 msk = (__mmask16)((1u << nr) - 1u);
    for (int t = 0; t < mr; t++) {
        float *c = C + (size_t)(m0 + t) * ldc + n_off;
        __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(r[t]), _mm512_set1_ps(ts[t]));
        if (accumulate)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(msk, c));
        _mm512_mask_storeu_ps(c, msk, v);
    }
}

/* ---- INT4 on one scale per row ----------------------------------------------
 *
 * Folding each group's int32 tile into F32 with its scales (tiles_i8_groups)
 * costs a tile store, 16 loads and 16 FMAs per group of every 16 x 16 tile and
 * leaves the tiles at one product per two tile loads. Instead the INT4 rows of
 * a 32-row block are rescaled to int8 on one scale per row and run through the
 * AMXINT8 kernel (tiles_i8_rows: C in the tiles over the whole K, 2 x 2 tiles):
 *   S_n = max_g |s[n][g]| / 16,   f[n][g] = s[n][g] * (16 / max_g |s[n][g]|),
 *   w'[n][k] = rint(v[n][k] f[n][g]),   C[m][n] = d_m S_n sum_k q_m[k] w'[n][k]
 * v in [-8, 7] times at most 16 fits int8; the groups with the row's largest
 * scale stay exact, the others move by at most S_n / 2 = max_s / 32 per weight
 * (their own INT4 step is s_g: docs/moe.md has the measured error). A table of
 * the 16 values of w' per (row, group) makes the decode one byte permute per 64
 * inputs. KT_AMX_INT4_EXACT=1 keeps the exact group folds, for comparison.
 */
static int int4_exact; /* KT_AMX_INT4_EXACT=1: INT4 folds every group exactly */
/* KT_AMX_INT4_TABLES=computed: every row's tables computed per chunk, also on
 * format version 2's grid (for measuring the constant tables against) */
static int int_tables = 1;

/* Where a 32-row block's int8 weights come from: AMXINT8 rows in place (sc
 * NULL), or INT4 nibbles rescaled chunk by chunk into s->wdec. */
typedef struct i8_src {
    const uint8_t *w;      /* the block's first row at input k0                   */
    const uint8_t *w_next; /* the next block's (prefetched near the end), or NULL */
    size_t ldw;            /* bytes between rows                                   */
    int bps;               /* bytes per 64 inputs: 64 (int8) or 32 (int4)          */
    /* INT4 only */
    const uint16_t *sc;    /* BF16 scales of the first row's group at k0           */
    size_t lds;            /* scales between rows                                  */
    int g, ng, kn, nr;     /* group; groups, inputs (k1 - k0) and rows present     */
    int eo128;             /* 1: in PERM_EO128 order (g >= 64), else EO64 / EO32   */
    const float *inv16;    /* [NB] 16 / max |s| of each row (0: a zero row)        */
    const int8_t *e;       /* [NB][ng] the factors e = rint(16 s / max |s|) of the
                              rows in int_rows                                      */
    uint32_t int_rows;     /* bit r: every factor of row r within 1/32 of e        */
    const struct i8_src *next; /* the next block: its first chunk rescaled during
                                  this one's last, or NULL                         */
    int base, ready;       /* chunks rescaled before this block's first (the two
                              halves of s->wdec alternate); 1: that first chunk is
                              rescaled already                                     */
    int in_l2;             /* the block before's later passes prefetched these rows */
} i8_src;

#define KQ_MAX 8 /* steps per rescaled chunk: two [NB][KQ_MAX * 64] buffers fill wdec */

/* Byte permutes: byte 0 of dword i % 16 into byte i (every lane); lanes 0-1
 * from the first vector, 2-3 from the second. */
static uint8_t lut_low4[64], lut_low2[64];
/* The tables of integer factors: lut_int[e][i] = (i % 16 - 8) e, e = 0..16
 * (format version 2's grid: -128 .. 112). */
static _Alignas(64) int8_t lut_int[17][64];
/* Two lanes of them: lut_pair[17 a + b] = [lut_int[a] lane, lut_int[b] lane]
 * (g 32: a pair's 4 groups' table from two 32-byte loads) */
static _Alignas(64) int8_t lut_pair[17 * 17][32];
static void init_lut_index(void)
{
    for (int i = 0; i < 64; i++) {
        lut_low4[i] = (uint8_t)(4 * (i % 16));
        lut_low2[i] = (uint8_t)(4 * (i % 16) + (i < 32 ? 0 : 64));
        for (int e = 0; e <= 16; e++)
            lut_int[e][i] = (int8_t)((i % 16 - 8) * e);
    }
    for (int a = 0; a <= 16; a++)
        for (int b = 0; b <= 16; b++)
            for (int i = 0; i < 32; i++)
                lut_pair[17 * a + b][i] = lut_int[i < 16 ? a : b][i];
}

/* The table of 4 groups of 32 (lane i: lut_int[e[i]]'s) from lut_pair: a
 * load and an insert from memory. */
ALWAYS_INLINE __m512i lut_quad(const int8_t *e)
{
    __m256i lo = _mm256_load_si256((const __m256i *)lut_pair[17 * e[0] + e[1]]);
    __m256i hi = _mm256_load_si256((const __m256i *)lut_pair[17 * e[2] + e[3]]);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The factors f_j = s_j * inv16 of n <= 16 groups from their BF16 scales sb
 * (0 past n): i4_block's grid test and the computed tables both take them. */
ALWAYS_INLINE __m512 i4_factors(const uint16_t *sb, int n, float inv16)
{
    __m256i b = _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1u), sb);
    __m512 sf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    return _mm512_mul_ps(sf, _mm512_set1_ps(inv16));
}

/* rint(v f) for v = -8..7 as int32 (at most 127: never above for f <= 16). */
ALWAYS_INLINE __m512i lut_i4_i32(const float *f)
{
    const __m512 v = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(*f)));
    return _mm512_min_epi32(q, _mm512_set1_epi32(127));
}

/* One row's 64-input steps [st, st + sn) (st, sn even) in PERM_EO128 order
 * into d, g = 1 << lg >= 32, its groups from g0 on: integer factors e (NULL:
 * the factors f). Per 128 inputs one 64-byte load, a shift, two vpermb and
 * two stores (EO64: two 32-byte loads, shifts, vpermb and stores): the low
 * nibbles are the even inputs, step j; the high ones the odd, step j + 1.
 * g >= 128: one table of 4 equal lanes, so vpermb's index bits 4-5 (the next
 * nibble) do not matter; g = 64: lanes 0-1 the first group's table, 2-3 the
 * second's, the index masked to its nibble and bit 5 set in the upper half;
 * g = 32: lane i the table of group i of the pair, lane i's index bits 4-5 = i. */
ALWAYS_INLINE void decode_i4_pairs(const uint8_t *row, int st, int sn, int g0, int lg,
                                   const int8_t *e, const float *f, int8_t *d)
{
    const __m512i low4 = _mm512_loadu_si512(lut_low4), low2 = _mm512_loadu_si512(lut_low2);
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const __m512i half = _mm512_mask_set1_epi8(_mm512_setzero_si512(), 0xffffffff00000000ull,
                                               0x20);
    const __m512i quarter = _mm512_or_si512(
        half, _mm512_mask_set1_epi8(_mm512_setzero_si512(), 0xffff0000ffff0000ull, 0x10));
    __m512i lut = _mm512_setzero_si512(), sink = lut;
    for (int j = 0; j < sn; j += 2) {
        int k = (st + j) * 64, gi = (k >> lg) - g0;
        __m512i b = _mm512_loadu_si512(row + k / 2);
        __m512i h = _mm512_srli_epi16(b, 4);
        if (lg == 5) { /* (v & 0x0f) | quarter */
            if (e) {
                lut = lut_quad(e + gi);
            } else {
                lut = _mm512_castsi128_si512(_mm512_cvtepi32_epi8(lut_i4_i32(f + gi)));
                lut = _mm512_inserti32x4(lut, _mm512_cvtepi32_epi8(lut_i4_i32(f + gi + 1)), 1);
                lut = _mm512_inserti32x4(lut, _mm512_cvtepi32_epi8(lut_i4_i32(f + gi + 2)), 2);
                lut = _mm512_inserti32x4(lut, _mm512_cvtepi32_epi8(lut_i4_i32(f + gi + 3)), 3);
            }
            b = _mm512_ternarylogic_epi32(b, nib, quarter, 0xEA);
            h = _mm512_ternarylogic_epi32(h, nib, quarter, 0xEA);
        } else if (lg == 6) { /* (v & 0x0f) | half: ternary logic 0xEA = (A & B) | C */
            lut = e ? _mm512_mask_blend_epi64(0xF0, _mm512_load_si512(lut_int[e[gi]]),
                                              _mm512_load_si512(lut_int[e[gi + 1]]))
                    : _mm512_permutex2var_epi8(lut_i4_i32(f + gi), low2,
                                               lut_i4_i32(f + gi + 1));
            b = _mm512_ternarylogic_epi32(b, nib, half, 0xEA);
            h = _mm512_ternarylogic_epi32(h, nib, half, 0xEA);
        } else if (j == 0 || !(k & ((1 << lg) - 1))) {
            lut = e ? _mm512_load_si512(lut_int[e[gi]])
                    : _mm512_permutexvar_epi8(low4, lut_i4_i32(f + gi));
        }
        if (probe & 16) { /* (measuring: the work without its stores) */
            sink = _mm512_xor_si512(sink, _mm512_xor_si512(_mm512_permutexvar_epi8(b, lut),
                                                           _mm512_permutexvar_epi8(h, lut)));
            continue;
        }
        _mm512_storeu_si512(d + (size_t)j * 64, _mm512_permutexvar_epi8(b, lut));
        _mm512_storeu_si512(d + (size_t)j * 64 + 64, _mm512_permutexvar_epi8(h, lut));
    }
    if (probe & 16)
        _mm512_storeu_si512(d, sink);
}

/* Rows on the grid in PERM_EO128 order through decode_i4_lean (g >= 128) and
 * decode_i4_lean64 (g = 64), and the row loop's L2 prefetches a row at a time
 * (pf_issue): the default since the Xeon's alternating A/B (11-30 15:56,
 * AMXINT4 g128 T=1024 4.0-4.2 -> 6.1-6.4 TFLOP/s); KT_AMX_LEAN=0 keeps the
 * general code, KT_AMX_LEAN=128 the lean code for g >= 128 only (session 9's) */
static int lean_on = 1;
/* INT4 in groups of 32 (RAWINT4's layout, AMXINT4 g32) where K is whole
 * 128-input pairs: 2 (the default) in PERM_EO128 order, grid rows through
 * decode_i4_lean32 (a pair's 4 groups are its load's 4 lanes: vpshufb on 4
 * tables); 1 (KT_AMX_G32=general) EO128 through the general code only; 0
 * (KT_AMX_G32=eo32) the order before, PERM_EO32 on the general code (a
 * table pair, broadcast, masked shift and lane shuffle per 64 inputs and
 * ~50 instructions a row). Xeon, session 15, 5 alternating pairs in two calls,
 * AMXINT4 g32 DeepSeek-V3 T=1024 / 4096: eo32 3.94-4.74 / 7.97-10.52, lean32
 * 5.57-7.63 / 9.34-12.09 TFLOP/s (ahead in 10 of 10 pairs) */
static int g32_mode = 2;

/* decode_i4_pairs for the rows the kernel rescales most (g >= 128, format
 * version 2's grid, PERM_EO128, rows [r0, r1) all present and on the grid, sn
 * even) without the general code's choices: per 128 inputs a load, a shift, a
 * table load, two vpermb and two stores, no branch per row. The general path
 * compiles (gcc 12 -O3) to about 36 instructions per 128 inputs and 50 more a
 * row, some 120 per row of a 4-step chunk; this one to 25 (sn 4, unrolled).
 * A step rescales 8 such rows beside 6-10 tile instructions: about 1,000
 * instructions against 200, twice what the out-of-order window holds. */
static void decode_i4_lean(const i8_src *src, int st, int sn, int r0, int r1, int8_t *dst,
                           size_t dld)
{
    const int gs = __builtin_ctz((unsigned)src->g) - 6; /* steps per group: 1 << gs */
    const size_t ldw = src->ldw, ng = (size_t)src->ng;
    const uint8_t *row = src->w + (size_t)r0 * ldw + (size_t)st * 32;
    const int8_t *e = src->e + (size_t)r0 * ng;
    int8_t *d = dst + (size_t)r0 * dld;
    if (sn == 4) { /* the default chunk (KT_AMX_KC 4): two pairs a row, unrolled */
        const int g0 = st >> gs, g1 = (st + 2) >> gs;
        for (int r = r0; r < r1; r++, row += ldw, e += ng, d += dld) {
            __m512i b0 = _mm512_loadu_si512(row), b1 = _mm512_loadu_si512(row + 64);
            __m512i l0 = _mm512_load_si512(lut_int[e[g0]]);
            __m512i l1 = _mm512_load_si512(lut_int[e[g1]]);
            _mm512_storeu_si512(d, _mm512_permutexvar_epi8(b0, l0));
            _mm512_storeu_si512(d + 64, _mm512_permutexvar_epi8(_mm512_srli_epi16(b0, 4), l0));
            _mm512_storeu_si512(d + 128, _mm512_permutexvar_epi8(b1, l1));
            _mm512_storeu_si512(d + 192, _mm512_permutexvar_epi8(_mm512_srli_epi16(b1, 4), l1));
        }
        return;
    }
    for (int r = r0; r < r1; r++, row += ldw, e += ng, d += dld)
        for (int j = 0; j < sn; j += 2) {
            __m512i b = _mm512_loadu_si512(row + (size_t)j * 32);
            __m512i lut = _mm512_load_si512(lut_int[e[(st + j) >> gs]]);
            _mm512_storeu_si512(d + (size_t)j * 64, _mm512_permutexvar_epi8(b, lut));
            _mm512_storeu_si512(d + (size_t)j * 64 + 64,
                                _mm512_permutexvar_epi8(_mm512_srli_epi16(b, 4), lut));
        }
}

/* decode_i4_lean's rows for g = 64. A pair's 128 inputs span two groups: the
 * first's nibbles in bytes 0-31 of the load, the second's in 32-63, so the
 * table is the lanes [e_a, e_a, e_b, e_b] (one load and one masked load) and
 * vpshufb looks each byte up in its own lane. Its index bit 7 zeroes the
 * byte, so the nibbles are masked first: per 128 inputs a load, a shift, two
 * ands, two shuffles and two stores besides the table (g >= 128: no ands). */
ALWAYS_INLINE void lean64_rows(const uint8_t *row, size_t ldw, const int8_t *e, size_t ng,
                               int8_t *d, size_t dld, int rows, const int sn)
{
    const __m512i nib = _mm512_set1_epi8(0x0f);
    for (int r = 0; r < rows; r++, row += ldw, e += ng, d += dld)
        for (int j = 0; j < sn; j += 2) {
            __m512i b = _mm512_loadu_si512(row + (size_t)j * 32);
            __m512i lut = _mm512_mask_load_epi64(_mm512_load_si512(lut_int[e[j]]), 0xF0,
                                                 lut_int[e[j + 1]]);
            _mm512_storeu_si512(d + (size_t)j * 64,
                                _mm512_shuffle_epi8(lut, _mm512_and_si512(b, nib)));
            _mm512_storeu_si512(
                d + (size_t)j * 64 + 64,
                _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(b, 4), nib)));
        }
}

/* decode_i4_lean's rows for g = 32: a pair's 128 inputs are 4 groups, one a
 * 16-byte lane of the load (byte b holds inputs 2b and 2b + 1), so the table
 * is the lanes [e_a, e_b, e_c, e_d] (lut_quad: a load and an insert) and the
 * rest is lean64_rows': per 128 inputs a load, a shift, two ands, two
 * shuffles and two stores. */
ALWAYS_INLINE void lean32_rows(const uint8_t *row, size_t ldw, const int8_t *e, size_t ng,
                               int8_t *d, size_t dld, int rows, const int sn)
{
    const __m512i nib = _mm512_set1_epi8(0x0f);
    for (int r = 0; r < rows; r++, row += ldw, e += ng, d += dld)
        for (int j = 0; j < sn; j += 2) {
            __m512i b = _mm512_loadu_si512(row + (size_t)j * 32);
            __m512i lut = lut_quad(e + 2 * j); /* groups of steps j, j + 1 */
            _mm512_storeu_si512(d + (size_t)j * 64,
                                _mm512_shuffle_epi8(lut, _mm512_and_si512(b, nib)));
            _mm512_storeu_si512(
                d + (size_t)j * 64 + 64,
                _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(b, 4), nib)));
        }
}

/* decode_i4_lean's contract for g = 32 (steps s, s + 1 are groups 2s .. 2s + 3). */
static void decode_i4_lean32(const i8_src *src, int st, int sn, int r0, int r1, int8_t *dst,
                             size_t dld)
{
    const size_t ldw = src->ldw, ng = (size_t)src->ng;
    const uint8_t *row = src->w + (size_t)r0 * ldw + (size_t)st * 32;
    const int8_t *e = src->e + (size_t)r0 * ng + 2 * (size_t)st;
    int8_t *d = dst + (size_t)r0 * dld;
    if (sn == 4) /* the default chunk, unrolled */
        lean32_rows(row, ldw, e, ng, d, dld, r1 - r0, 4);
    else
        lean32_rows(row, ldw, e, ng, d, dld, r1 - r0, sn);
}

/* decode_i4_lean's contract for g = 64 (step s is group s of the block). */
static void decode_i4_lean64(const i8_src *src, int st, int sn, int r0, int r1, int8_t *dst,
                             size_t dld)
{
    const size_t ldw = src->ldw, ng = (size_t)src->ng;
    const uint8_t *row = src->w + (size_t)r0 * ldw + (size_t)st * 32;
    const int8_t *e = src->e + (size_t)r0 * ng + st;
    int8_t *d = dst + (size_t)r0 * dld;
    if (sn == 4) /* the default chunk, unrolled */
        lean64_rows(row, ldw, e, ng, d, dld, r1 - r0, 4);
    else
        lean64_rows(row, ldw, e, ng, d, dld, r1 - r0, sn);
}

/* Rows [r0, r1) x 64-input steps [st, st + sn) of the block rescaled (above)
 * into dst (dld bytes between rows, step st at 0), in the input order of the
 * packed activations (PERM_EO64, PERM_EO32 for g = 32, or PERM_EO128 through
 * decode_i4_pairs); zero for rows past nr and inputs past kn. The tables are
 * built with one byte permute each (the low bytes of the int32 values into
 * every lane) and the factors f read from memory, to keep shuffle-port work
 * low: it runs between tile products. Where every factor of the row's chunk
 * is within 1/32 of an integer e (format version 2 rows: all of them) the
 * tables are the constants lut_int[e] instead, the same bytes: |v (f - e)| <=
 * 1/4, so rint(v f) = v e. */
static void decode_i4_rescaled(const i8_src *src, int st, int sn, int r0, int r1, int8_t *dst,
                               size_t dld)
{
    /* g = 32 << lg: shifts, not divisions (a call rescales as few as 8 rows) */
    const int g = src->g, lg = __builtin_ctz((unsigned)g), g0 = (st * 64) >> lg;
    const int ngc = imin((((st + sn) * 64 - 1) >> lg) + 1, src->ng) - g0; /* <= 16 (sn <= 8) */
    const uint64_t want = (1ull << (r1 - r0)) - 1u;
    if (lean_on && src->eo128 &&
        (g >= (lean_on == 128 ? 128 : 64) || (g == 32 && lean_on == 1 && g32_mode == 2)) &&
        r1 <= src->nr && !(probe & 24) && ((src->int_rows >> r0) & want) == want) {
        (g == 32   ? decode_i4_lean32
         : g == 64 ? decode_i4_lean64
                   : decode_i4_lean)(src, st, sn, r0, r1, dst, dld);
        return;
    }
    const __m512i low4 = _mm512_loadu_si512(lut_low4), low2 = _mm512_loadu_si512(lut_low2);
    for (int r = r0; r < r1; r++) {
        int8_t *d = dst + (size_t)r * dld;
        if (r >= src->nr) {
            memset(d, 0, (size_t)sn * 64);
            continue;
        }
        const uint8_t *row = src->w + (probe & 8 ? 0 : (size_t)r * src->ldw);
        /* integer factors e[j] of groups g0 + j (i4_block), or f[j] = s_(g0 + j)
         * * (16 / max |s|), 0 past the groups */
        const int ints = (src->int_rows >> r) & 1u;
        const int8_t *e = ints ? src->e + (size_t)r * src->ng + g0 : NULL;
        _Alignas(64) float f[17];
        if (!ints) {
            _mm512_store_ps(f, i4_factors(src->sc + (size_t)r * src->lds + g0, ngc,
                                          src->inv16[r]));
            f[16] = 0.0f;
        }
        /* 32 bytes = 64 inputs, loaded into both halves, the upper shifted:
         * low nibbles (even inputs), then high */
        if (g == 32 && !src->eo128) {
            for (int j = 0; j < sn; j++) {
                int k = (st + j) * 64, gi = k / g - g0;
                __m256i b = k + 64 <= src->kn
                                ? _mm256_loadu_si256((const __m256i *)(row + k / 2))
                                : _mm256_maskz_loadu_epi8(0xffff, row + k / 2); /* 32 left */
                __m512i v = _mm512_broadcast_i64x4(b);
                v = _mm512_mask_srli_epi16(v, 0xffff0000u, v, 4);
                /* lanes [even, odd inputs of group gi | of gi + 1]: in-lane tables */
                int e1 = ints && gi + 1 < ngc ? e[gi + 1] : 0;
                __m512i lut =
                    ints ? _mm512_mask_blend_epi64(0xF0, _mm512_load_si512(lut_int[e[gi]]),
                                                   _mm512_load_si512(lut_int[e1]))
                         : _mm512_permutex2var_epi8(lut_i4_i32(f + gi), low2,
                                                    lut_i4_i32(f + gi + 1));
                v = _mm512_shuffle_i64x2(v, v, 0xD8);
                v = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, _mm512_set1_epi8(0x0f)));
                _mm512_storeu_si512(d + (size_t)j * 64, v);
            }
            continue;
        }
        if (src->eo128) {
            decode_i4_pairs(row, st, sn, g0, lg, e, f, d);
            continue;
        }
        const int gs = lg - 6, gmask = (1 << gs) - 1; /* steps per group: 1 << gs */
        __m512i lut = _mm512_setzero_si512();
        for (int j = 0; j < sn; j++) {
            int k = (st + j) * 64, gi = ((st + j) >> gs) - g0;
            if (j == 0 || !((st + j) & gmask))
                lut = ints ? _mm512_load_si512(lut_int[e[gi]])
                           : _mm512_permutexvar_epi8(low4, lut_i4_i32(f + gi));
            __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(row + k / 2)));
            v = _mm512_mask_srli_epi16(v, 0xffff0000u, v, 4);
            /* vpermb reads 6 index bits: the table's 4 lanes are equal, so the
             * neighbouring nibble in bits 4-5 does not matter */
            _mm512_storeu_si512(d + (size_t)j * 64, _mm512_permutexvar_epi8(v, lut));
        }
    }
}

/* 32 int8 weight rows (src: AMXINT8 in place, or INT4 rescaled) x every packed
 * token block over kt_n 64-input steps; int32 sums over the whole range, then
 * scaled by the row scales rs and token scales ts for nr rows:
 *   C[m][n] = ts[m] rs[n] sum_k q[m][k] w[n][k]
 * The C tiles stay in the registers over the whole K: up to 32 tokens on 2 x 2
 * tiles, 33-48 on 2 x 3 (45% of the row blocks of DeepSeek-V3 at T=1024), more
 * in passes of 32 tokens, one after the other over the whole K (tiles_i8_rows).
 * The first pass streams the weights in chunks of kc8 steps (4: 32 rows x 256
 * bytes), each prefetched into L2 `ahead` chunks before (INT4: rescaled during
 * the chunk before into s->wdec's other half, or with passes into the panel);
 * the later passes read them from L2 (INT4: the panel) while the next block's
 * rows are prefetched into L2. Session 6's order, K in chunks over every token
 * block with the C tiles parked in s->facc between chunks (KT_AMX_PASSES=0),
 * spent 62 of ~385 ms a DeepSeek-V3 T=4096 call on those parked tiles (Xeon
 * 08:51, KT_AMX_PROFILE); with passes 2.4 (09:24). Prefetching the next chunk's
 * tokens too (from L3 on a call's first pass) ran 1.34x slower (9.6 vs 12.9
 * TFLOP/s, DeepSeek-V3 T=4096, Xeon 01:42): not done. */
#define KC8_MAX 16
/* steps per chunk: on the Xeon 4 ran 2-4% above 8, and 16 2-5% below it (one
 * run each, docs/bench/h200-xeon16-amx4-2257-ds-knobs.txt); KT_AMX_KC (1..16)
 * overrides (INT4 takes at most KQ_MAX) */
static int kc8 = 4;
/* chunks between the one computing and the one prefetched (INT4: one more, the
 * next is being rescaled); KT_AMX_AHEAD (1..4) overrides, for measuring */
static int ahead8 = 1;
/* KT_AMX_PF: which prefetches the row loop issues (for measuring): 0 ("t1", the
 * default) into L2 `ahead` chunks on; 1 ("t1t0") that one chunk further and
 * into L1 the chunk the next one reads; 2 ("t0") only the latter. On the Xeon
 * (09:24, one row each) t1 read AMXINT8 6.57 / 9.90 and AMXINT4 g128 4.81 /
 * 10.27 TFLOP/s at T 1024 / 4096, t1t0 5.77-5.81 / 9.11-9.87 and 4.21-5.48 /
 * 8.57-8.70, t0 6.10 / 10.84 and 5.14 / 8.73 */
static int pf_mode = 0;
/* 33 to 48 tokens on 2 x 3 C tiles over the whole K instead of two parked
 * blocks (KT_AMX_WIDE=0: off, for measuring); the C tiles' time of a
 * DeepSeek-V3 T=1024 call 11.2 -> 0.6 ms (Xeon 08:51 / 09:24, KT_AMX_PROFILE) */
static int wide_on = 1;
/* more than one token block: token blocks one after the other over the whole
 * K (1) or K in chunks over every token block (0); KT_AMX_PASSES overrides.
 * DeepSeek-V3 T=4096, same call (09:24, KT_AMX_PF=t1t0): AMXINT8 9.11-9.87
 * against 8.65 TFLOP/s, AMXINT4 g128 8.57-8.70 against 8.75 */
static int passes_on = 1;
/* KT_AMX_FIRST_PF=0: a first pass issues no L2 prefetches of its own chunks
 * where the later passes of the block before prefetched its rows whole
 * (in_l2; those prefetches then hit L2). Xeon 18:55, alternating, DeepSeek-V3
 * T=4096: AMXINT8 +2-3% in 3 of 3 pairs, AMXINT4 g128 2 of 3 (-3.5% in one):
 * not default. The later passes rescaling the whole next block instead of its
 * first pass (KT_AMX_LATER, 2087017) read AMXINT4 T=4096 6-16% lower in 3 of 3
 * pairs (docs/bench/h200-xeon16-amx12-1849-later-rescale.txt): removed. */
static int first_pf = 1;
/* KT_AMX_WIDE_FIRST=1: a block's first pass over more than 48 tokens (the
 * pass that rescales the INT4 rows and reads the weights in) takes 48 tokens
 * on 2 x 3 C tiles, the later passes 32 from token 48 on. The first pass waits
 * on the rescale and the weight stream, so its tiles have room for a third
 * product per weight tile; 113-160 tokens then take one pass fewer or a
 * 16-token last pass instead of a 32 (all passes on 2 x 3 lost: the 2 x 3
 * loop's own rate; docs/performance.md, session 10). Xeon 21:38,
 * alternating, DeepSeek-V3 T=4096: AMXINT4 g128 ahead in 1 of 3 pairs, AMXINT8
 * 2 of 3 (the first passes 4-10 ms a call and thread longer, the later ones
 * 6-23 shorter; docs/bench/h200-xeon16-amx13-2138-wide-first.txt): not default. */
static int wide_first = 0;
/* INT4 with passes: the first pass takes next_w / (next_w + later passes) of the
 * next block's rows' L2 prefetches, the later passes the rest (KT_AMX_NEXT_W
 * overrides; 0: the later passes all of them, as before). A prefetch that
 * misses L2 holds one of the core's L1 fill buffers until its line comes from
 * memory, and the later passes' tile loads take each of their 64 lines a step
 * from L2 through the same buffers: the whole next block over the later
 * passes alone (5-6 lines a step) left them ~12% slower than without it, the
 * next block's first pass then cold. The first pass (rescale-bound, ~3.4
 * times a later pass's time at T=4096) takes its share by time. xeon2,
 * DeepSeek-V3 T=4096, 2 threads: 2.50-2.60 -> 2.63-2.71 TFLOP/s; AMXINT8
 * (not rescale-bound) read level and keeps the old way (amx4, session 20;
 * docs/performance.md) */
static int next_w = 3;
/* KT_AMX_NEXT_CALL=1 (amx13, session 11; removed): a call's last 32-row block
 * prefetched, during its later passes, the first block of the thread's next call
 * (the packer's hints queued per thread). Xeon 21:24 / 21:38, alternating,
 * DeepSeek-V3 T=4096: AMXINT4 g128 ahead in 2 of 6 pairs, AMXINT8 3 of 6; the
 * profile showed why: the first passes of blocks read from memory took no longer
 * than those of blocks in L2 (docs/bench/h200-xeon16-amx13-2124-next-call.txt). */

/* INT4 rows rescaled 128 inputs a load (PERM_EO128) where they can be;
 * KT_AMX_EO128=0: 64 (EO64), for measuring */
static int eo128_on = 1;

/* Chunk c (kq steps each) of the block's chunks followed by the next block's:
 * its first byte, and *lines the 64-byte lines of each row (0: none). */
static const uint8_t *chunk_at(const i8_src *src, int kt_n, int kq, int c, int *lines)
{
    int n_ch = (kt_n + kq - 1) / kq;
    const uint8_t *base = src->w;
    *lines = 0;
    if (c >= n_ch) {
        c -= n_ch;
        base = src->w_next;
        if (!base || c >= n_ch)
            return NULL;
    }
    *lines = (imin(kq, kt_n - c * kq) * src->bps + 63) / 64;
    return base + (size_t)c * kq * src->bps;
}

/* The lines of one chunk (NB rows x pn lines), walked row by row and issued a
 * few at a time between tile steps (no division per line). */
typedef struct pf_stream {
    const char *row; /* the current row's first line, NULL: done      */
    size_t ldw;
    int pn, line, rows_left, per;
} pf_stream;

static void pf_start(pf_stream *p, const i8_src *src, int kt_n, int kq, int c, int steps)
{
    p->row = (const char *)chunk_at(src, kt_n, kq, c, &p->pn);
    p->ldw = src->ldw;
    p->line = 0;
    p->rows_left = NB;
    p->per = (NB * p->pn + steps - 1) / steps;
    if (!p->pn)
        p->row = NULL;
}

/* A stream over whole rows: NB rows of pn lines from base (NULL: none). */
static void pf_rows(pf_stream *p, const uint8_t *base, size_t ldw, int pn, int steps)
{
    p->row = (const char *)base;
    p->ldw = ldw;
    p->pn = pn;
    p->line = 0;
    p->rows_left = NB;
    p->per = (NB * pn + steps - 1) / steps;
}

/* Issues the stream's next `per` lines into L1 (t0) or L2. */
ALWAYS_INLINE void pf_issue(pf_stream *p, const int t0)
{
    /* KT_AMX_LEAN: the chunks' whole rows of 2 (INT4) or 4 (AMXINT8) lines
     * without the branches of a line at a time (about 12 instructions a line,
     * 16 or 32 lines a step), the same lines */
    if (lean_on && !t0 && p->row && !p->line && (p->pn == 2 || p->pn == 4) &&
        !(p->per % p->pn)) {
        int rows = imin(p->per / p->pn, p->rows_left);
        const char *a = p->row;
        for (int i = 0; i < rows; i++, a += p->ldw) {
            _mm_prefetch(a, _MM_HINT_T1);
            _mm_prefetch(a + 64, _MM_HINT_T1);
            if (p->pn == 4) {
                _mm_prefetch(a + 128, _MM_HINT_T1);
                _mm_prefetch(a + 192, _MM_HINT_T1);
            }
        }
        p->rows_left -= rows;
        p->row = p->rows_left ? a : NULL;
        return;
    }
    for (int i = 0; i < p->per && p->row; i++) {
        const char *a = p->row + (size_t)p->line * 64;
        if (t0)
            _mm_prefetch(a, _MM_HINT_T0);
        else
            _mm_prefetch(a, _MM_HINT_T1);
        if (++p->line == p->pn) {
            p->line = 0;
            p->row = --p->rows_left ? p->row + p->ldw : NULL;
        }
    }
}

/* One 64-input step of the tile products: W rows wk (two A tiles, ldt bytes
 * apart) against the token tiles at x (x_mb_stride bytes per 16 tokens):
 * 2 x 2 C tiles (two_x: the second token tile present) or, wide, 2 x 3. */
ALWAYS_INLINE void i8_step(const int8_t *wk, size_t ldt, const uint8_t *x, size_t x_mb_stride,
                           int two_x, int wide)
{
    if (wide) {
        /* 6 products, 7 loads: W0 x X0 X1 X2, then W1 x X2 X1 X0 */
        _tile_loadd(TWX, wk, ldt);
        _tile_loadd(TXX, x, 64);
        _tile_dpbssd(TC00, TWX, TXX);
        _tile_loadd(TXX, x + x_mb_stride, 64);
        _tile_dpbssd(TC01, TWX, TXX);
        _tile_loadd(TXX, x + 2 * x_mb_stride, 64);
        _tile_dpbssd(TC02, TWX, TXX);
        _tile_loadd(TWX, wk + 16 * ldt, ldt);
        _tile_dpbssd(TC12, TWX, TXX);
        _tile_loadd(TXX, x + x_mb_stride, 64);
        _tile_dpbssd(TC11, TWX, TXX);
        _tile_loadd(TXX, x, 64);
        _tile_dpbssd(TC10, TWX, TXX);
        return;
    }
    _tile_loadd(TW0, wk, ldt);
    _tile_loadd(TX0, x, 64);
    if (!(probe & 2))
        _tile_dpbssd(TC00, TW0, TX0);
    _tile_loadd(TW1, wk + 16 * ldt, ldt);
    if (!(probe & 2))
        _tile_dpbssd(TC10, TW1, TX0);
    if (two_x) {
        _tile_loadd(TX1, x + x_mb_stride, 64);
        if (!(probe & 2)) {
            _tile_dpbssd(TC01, TW0, TX1);
            _tile_dpbssd(TC11, TW1, TX1);
        }
    }
}

/* The C tiles of a token block: zeroed, loaded from or stored to cacc at
 * token mb (op 0 / 1 / 2). */
static void c_tiles(int op, int32_t *cacc, int mb, int two_x, int wide)
{
    const size_t cld = MMAX * sizeof(int32_t);
    int32_t *c0 = cacc + mb, *c1 = cacc + (size_t)16 * MMAX + mb;
    if (op == 0) {
        _tile_zero(TC00);
        _tile_zero(TC10);
        _tile_zero(TC01);
        _tile_zero(TC11);
        if (wide) {
            _tile_zero(TC02);
            _tile_zero(TC12);
        }
    } else if (op == 1) {
        _tile_loadd(TC00, c0, cld);
        _tile_loadd(TC10, c1, cld);
        if (two_x) {
            _tile_loadd(TC01, c0 + 16, cld);
            _tile_loadd(TC11, c1 + 16, cld);
        }
    } else {
        _tile_stored(TC00, c0, cld);
        _tile_stored(TC10, c1, cld);
        if (two_x) {
            _tile_stored(TC01, c0 + 16, cld);
            _tile_stored(TC11, c1 + 16, cld);
        }
        if (wide) {
            _tile_stored(TC02, c0 + 32, cld);
            _tile_stored(TC12, c1 + 32, cld);
        }
    }
}

/* Returns 1 where the next block's rows were prefetched into L2 whole. */
static int tiles_i8_rows(const i8_src *src, const uint8_t *xpack, size_t x_mb_stride, int mn,
                         int kt_n, const float *rs, const float *ts, int nr, float *C, int ldc,
                         int n_off, amx_scratch *s)
{
    int32_t *cacc = (int32_t *)s->facc;
    /* one block of 32 tokens, or 48 on 2 x 3 C tiles, keeps its C tiles in the
     * registers over the whole K; more tokens take K in chunks, each over every
     * token block (C parked between chunks), or with passes on one token block
     * at a time over the whole K (the weights of the later passes from L2, the
     * INT4 ones from the rescaled panel) */
    int wide = wide_on && mn > 32 && mn <= 48, mbw = wide ? 48 : 32;
    /* KT_AMX_WIDE_FIRST: more than 48 tokens in passes, the first (the one
     * rescaling) 48 wide, the later ones 32 from token 48 */
    int first_w = wide_first && passes_on && mn > 48 ? 48 : mbw;
    int n_mb = 1 + (mn - first_w + mbw - 1) / mbw;
    if (mn <= first_w)
        n_mb = 1;
    int passes = passes_on && n_mb > 1, park = n_mb > 1 && !passes;
    int dec = src->sc != NULL;
    int kq = dec ? imin(kc8, KQ_MAX) : kc8, ahead = ahead8 + dec, n_ch = (kt_n + kq - 1) / kq;
    size_t dld = (size_t)kq * 64; /* INT4: bytes between rescaled rows */
    /* INT4: chunk c of the block in half (base + c) & 1 of s->wdec; with
     * passes chunk 0 there, the others in the panel */
    int8_t *buf[2] = {(int8_t *)s->wdec, (int8_t *)s->wdec + (size_t)NB * dld};
    int next_in_l2 = 0;
#define I4_CHUNK(c) (passes && (c) ? s->panel + (size_t)(c) * NB * dld \
                                   : buf[(src->base + (c)) & 1])
    amx_prof *pr = prof_here();
    uint64_t t = prof_tsc(pr), td = 0;
    if (pr) {
        pr->calls++;
        pr->cold += !src->in_l2;
        pr->hist[imin((mn - 1) / 16, AP_HIST - 1)]++;
        pr->products += (uint64_t)kt_n * (size_t)((mn + 15) / 16) * (size_t)((nr + 15) / 16);
    }
    if (dec && !src->ready && !(probe & 1))
        decode_i4_rescaled(src, 0, imin(kq, kt_n), 0, NB, buf[src->base & 1], dld);
    prof_add(pr, AP_DEC0, &t);
    pf_stream far = {0}, near = {0}, nxt = {0};
    int nxt_on = 0; /* the first pass started nxt (next_w) */
    int outer = passes ? n_mb : n_ch, inner = passes ? n_ch : n_mb;
    for (int o = 0; o < outer; o++) {
        for (int i = 0; i < inner; i++) {
            int ci = passes ? i : o, p = passes ? o : i, mb = p ? first_w + (p - 1) * mbw : 0;
            int kc = ci * kq, kn = imin(kq, kt_n - kc), last = ci == n_ch - 1;
            int two_x = mn - mb > 16, blk_wide = first_w == 48 && !p;
            const int8_t *wc = dec ? I4_CHUNK(ci) : (const int8_t *)src->w + (size_t)kc * 64;
            size_t ldt = dec ? dld : src->ldw;
            /* INT4: rescaled rps rows a step: the next chunk during the first
             * token block, or during the last one's last chunk the next
             * block's first */
            const i8_src *ns = src;
            int nst = kc + kq, nk = 0, rps = (NB + kn - 1) / kn;
            int8_t *wn = NULL;
            if (dec && !last && p == 0) {
                nk = imin(kq, kt_n - kc - kq);
                wn = I4_CHUNK(ci + 1);
            } else if (dec && last && src->next && p == n_mb - 1) {
                ns = src->next, nst = 0, nk = imin(kq, kt_n);
                wn = buf[(src->base + n_ch) & 1];
            }
            if (wn && (probe & 32) && 3 * NB * dld <= sizeof s->wdec)
                wn = (int8_t *)s->wdec + 2 * NB * dld; /* (measuring: stores nobody reads) */
            /* what to prefetch, spread over the steps between: into L2 the
             * chunk `ahead` on (pf_mode 1: one further), into L1 (pf_mode >=
             * 1) the one the next chunk's tiles (INT8) or rescale (INT4) read;
             * with passes the first pass takes the block's chunks and the
             * others the next block's rows (into L2) */
            if (p == 0) {
                int steps = passes ? kn : n_mb * kn, fc = ci + ahead + (pf_mode == 1);
                int nc = ci + 1 + dec; /* (passes: not past the block, chunk 2 n_ch: none) */
                pf_start(&far, src, kt_n, kq, passes && fc >= n_ch ? 2 * n_ch : fc, steps);
                pf_start(&near, src, kt_n, kq, passes && nc >= n_ch ? 2 * n_ch : nc, steps);
                if (pf_mode == 0 || (probe & 4))
                    near.row = NULL;
                if (pf_mode == 2 || (!first_pf && src->in_l2) || (probe & 4))
                    far.row = NULL;
                if (dec && passes && ci == 0 && next_w && src->w_next && pf_mode != 2 &&
                    !(probe & 4)) {
                    /* its share of the next block's rows, ending with the pass */
                    pf_rows(&nxt, src->w_next, src->ldw, (kt_n * src->bps + 63) / 64, kt_n);
                    nxt.per = (nxt.per * next_w + next_w + n_mb - 2) / (next_w + n_mb - 1);
                    nxt.per += !nxt.per;
                    nxt_on = 1;
                }
            } else if (passes && p == 1 && ci == 0 && nxt_on) {
                /* the rest of them over the later passes */
                int steps = (n_mb - 1) * kt_n;
                nxt.per = (nxt.rows_left * nxt.pn + steps - 1) / steps;
                next_in_l2 = 1;
                far.row = NULL;
                near.row = NULL;
            } else if (passes && p == 1 && ci == 0) {
                pf_rows(&far, src->w_next, src->ldw, (kt_n * src->bps + 63) / 64,
                        (n_mb - 1) * kt_n);
                next_in_l2 = src->w_next && pf_mode != 2 && !(probe & 4);
                near.row = NULL;
                if (probe & 4)
                    far.row = NULL;
            }
            td = prof_tsc(pr);
            uint64_t tp = td;
            if (ci == 0 || park)
                c_tiles(ci == 0 ? 0 : 1, cacc, mb, two_x, blk_wide);
            if (pr && ci > 0 && park)
                prof_add(pr, AP_PARK, &td);
            const uint8_t *x0 = xpack + (size_t)(mb / 16) * x_mb_stride + (size_t)kc * XSTEP;
            /* hot loop: 4 (2 x 2) or 6 (2 x 3) tile products per 64 inputs */
            for (int kt = 0; kt < kn; kt++) {
                pf_issue(&far, 0);
                pf_issue(&near, 1);
                pf_issue(&nxt, 0);
                i8_step(wc + (size_t)kt * 64, ldt, x0 + (size_t)kt * XSTEP, x_mb_stride, two_x,
                        blk_wide);
                /* after the products: their tile loads issue before these
                 * stores, so the tiles compute while the vector units decode
                 * (before them: 8% slower, scripts/amx_tile_peak.c dec / dec2) */
                if (nk && !(probe & 1)) {
                    uint64_t t1 = prof_tsc(pr);
                    decode_i4_rescaled(ns, nst, nk, kt * rps, imin(NB, kt * rps + rps), wn, dld);
                    prof_add(pr, AP_DEC, &t1);
                }
            }
            if (pr && p > 0)
                pr->cyc[AP_LATER] += __rdtsc() - tp;
            else if (pr && !src->in_l2)
                pr->cyc[AP_COLD] += __rdtsc() - tp;
            prof_add(pr, AP_LOOP, &td); /* (the loop's time, the rescale in it too) */
            if (park || last) {
                c_tiles(2, cacc, mb, two_x, blk_wide);
                prof_add(pr, AP_PARK, &td);
            }
        }
    }
#undef I4_CHUNK
    t = prof_tsc(pr);
    for (int mb = 0; mb < mn; mb += 16) {
        int mr = imin(16, mn - mb);
        store_scaled(cacc + mb, MMAX, 1, rs, ts + mb, C, ldc, n_off, imin(16, nr), mb, mr, 0);
        if (nr > 16)
            store_scaled(cacc + (size_t)16 * MMAX + mb, MMAX, 1, rs + 16, ts + mb, C, ldc,
                         n_off + 16, nr - 16, mb, mr, 0);
    }
    prof_add(pr, AP_EPI, &t);
    return next_in_l2;
}

/* Decoded int8 rows (wdec, [NB][KCH]) x every packed token block, one C
 * tile (16 rows x 16 tokens) at a time: each group of g inputs (ks inputs
 * per product) gives an int32 tile, folded with the group scales
 * gsc[row][group] into F32 sums held in registers, added to facc at the end:
 *   facc[r][t] += sum_g gsc[r][g] * sum_{k in g} w[r][k] x[t][k]
 * Groups alternate between two C tiles and two stored copies, and each fold
 * reads the copy of the group before the one just issued: the vector folds
 * run while the tiles compute the next group, instead of waiting for the
 * tile store they read. */
#define I8_GROUP(TC, gi, slot)                                                                  \
    do {                                                                                        \
        _tile_zero(TC);                                                                         \
        for (int st = 0; st < steps && (gi) * g + st * ks < kpad; st++) {                       \
            int k = (gi) * g + st * ks;                                                         \
            _tile_loadd(TW0, wr + k, KCH);                                                      \
            _tile_loadd(TX0, x + (size_t)(k / 64) * XSTEP + (size_t)(k % 64) / 4 * 64, 64);     \
            _tile_dpbssd(TC, TW0, TX0);                                                         \
        }                                                                                       \
        _tile_stored(TC, s->ring[slot], 64);                                                    \
    } while (0)
#define I8_FOLD(slot, gi)                                                                       \
    do {                                                                                        \
        for (int r = 0; r < 16; r++)                                                            \
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s->ring[slot] +       \
                                                                          r * 16)),             \
                                     _mm512_set1_ps(gr[(size_t)r * GMAX + (gi)]), acc[r]);      \
    } while (0)

static void tiles_i8_groups(int nr, const uint8_t *xk, size_t x_mb_stride, int mn, int kpad, int g,
                            int ks, const float *gsc, amx_scratch *s)
{
    const int8_t *w = (const int8_t *)s->wdec;
    int steps = g / ks, n_groups = (kpad + g - 1) / g;
    for (int rb = 0; rb < nr; rb += 16) {
        const int8_t *wr = w + (size_t)rb * KCH;
        const float *gr = gsc + (size_t)rb * GMAX;
        for (int tb = 0; tb < mn; tb += 16) {
            const uint8_t *x = xk + (size_t)(tb / 16) * x_mb_stride;
            __m512 acc[16];
            for (int r = 0; r < 16; r++)
                acc[r] = _mm512_setzero_ps();
            /* hot loop: group gi into TC00 / copy 0, gi + 1 into TC01 / copy 1 */
            for (int gi = 0; gi < n_groups; gi += 2) {
                I8_GROUP(TC00, gi, 0);
                if (gi > 0)
                    I8_FOLD(1, gi - 1);
                if (gi + 1 < n_groups) {
                    I8_GROUP(TC01, gi + 1, 1);
                    I8_FOLD(0, gi);
                }
            }
            if (n_groups & 1)
                I8_FOLD(0, n_groups - 1);
            else
                I8_FOLD(1, n_groups - 1);
            float *fa = s->facc + (size_t)rb * MMAX + tb;
            for (int r = 0; r < 16; r++)
                _mm512_store_ps(fa + (size_t)r * MMAX,
                                _mm512_add_ps(_mm512_load_ps(fa + (size_t)r * MMAX), acc[r]));
        }
    }
}

/* Fills s->wdec (int8 [NB][KCH]) with rows [n, n + nr) x inputs [kc, kc + kn)
 * of the weights, zero up to kpad and for rows past nr, and gsc[r][j] with
 * the scale of group j of the chunk (groups of g inputs). */
typedef void (*decode_i8_fn)(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad, int g,
                             int8_t *dst, float *gsc);

/* AMXINT8 rows copied (ragged rows or inputs); one "group" per chunk. */
static void decode_i8_rows(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad, int g,
                           int8_t *dst, float *gsc)
{
    (void)g;
    const int8_t *w = W->w;
    const float *sc = W->scale;
    for (int r = 0; r < NB; r++) {
        int8_t *d = dst + (size_t)r * KCH;
        int have = r < nr ? kn : 0;
        if (have)
            memcpy(d, w + (size_t)(n + r) * W->cols + kc, (size_t)kn);
        memset(d + have, 0, (size_t)(kpad - have));
        gsc[(size_t)r * GMAX] = r < nr ? sc[n + r] : 0.0f;
    }
}

/* INT4 nibbles (input 2b in the low bits of byte b, stored as v + 8) -> int8
 * v in the order the activations are packed with: per product of 64 inputs
 * (g >= 64) the low nibbles of its 32 bytes (even inputs), then the high
 * ones (PERM_EO64); per 32 (g = 32) the same within each 32 (PERM_EO32).
 * BF16 group scales (one per g inputs) -> F32. */
static void decode_i8_int4(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad, int g,
                           int8_t *dst, float *gsc)
{
    const uint8_t *w = W->w;
    const uint16_t *sc = W->scale;
    size_t rb = (size_t)W->cols / 2, sb = (size_t)W->cols / (size_t)g;
    const __m512i lo4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    /* 128-bit lanes [bytes 0-15, 16-31, 0-15 >> 4, 16-31 >> 4] -> lanes 0, 2, 1, 3 */
    const int eo32 = g == 32;
    for (int r = 0; r < NB; r++) {
        int8_t *d = dst + (size_t)r * KCH;
        if (r >= nr) {
            memset(d, 0, (size_t)kpad);
            for (int j = 0; j * g < kpad; j++)
                gsc[(size_t)r * GMAX + j] = 0.0f;
            continue;
        }
        const uint8_t *row = w + (size_t)(n + r) * rb + (size_t)kc / 2;
        const uint16_t *srow = sc + (size_t)(n + r) * sb + (size_t)kc / (size_t)g;
        for (int l = 0; l < KCH / 2; l += 64) /* this row's next chunk, whole */
            _mm_prefetch((const char *)row + KCH / 2 + l, _MM_HINT_T0);
        int k = 0;
        for (; k + 64 <= kn; k += 64) {
            /* 32 bytes = 64 inputs: low nibbles, then high (per 32 for g = 32) */
            __m256i b = _mm256_loadu_si256((const __m256i *)(row + k / 2));
            __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);
            if (eo32)
                v = _mm512_shuffle_i64x2(v, v, 0xD8);
            _mm512_storeu_si512(d + k, _mm512_sub_epi8(_mm512_and_si512(v, lo4), eight));
        }
        if (k < kn) { /* 32 inputs left (g = 32) */
            __m128i b = _mm_loadu_si128((const __m128i *)(row + k / 2));
            __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
            v = _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
            _mm256_storeu_si256((__m256i *)(d + k), v);
            k += 32;
        }
        if (kpad > kn)
            memset(d + kn, 0, (size_t)(kpad - kn));
        for (int j = 0; j * g < kpad; j++)
            gsc[(size_t)r * GMAX + j] = j * g < kn ? kt__moe_bf16_f32(srow[j]) : 0.0f;
    }
}

/* Rows [na, n1) through decoded (or copied) int8 weights, 32 rows at a time:
 * every chunk of KCH inputs folded into facc by groups of g, then
 * C[m][n] = facc[n][m] * ts[m]. The activations: packed over the whole K at
 * xw (x_mb_stride bytes per 16 tokens), or with xw NULL quantized with
 * s->tinv and packed chunk by chunk from the BF16 view of A. */
static void amx_rows_decoded(const kt__wmat *W, int na, int n1, int k0, int k1,
                             const uint8_t *xw, size_t x_mb_stride, const float *ts,
                             const void *A, size_t a_stride, const int32_t *r, int mfirst,
                             size_t view, int perm, int mn, float *Cm, int ldc, int n_off,
                             amx_scratch *s, decode_i8_fn decode, int g)
{
    int ks = g == 32 ? 32 : 64;
    int mpad = (mn + 15) & ~15;
    configure_tiles(ks);
    for (int nb = na; nb < n1; nb += NB) {
        int nr = imin(NB, n1 - nb);
        for (int i = 0; i < NB; i++)
            memset(s->facc + (size_t)i * MMAX, 0, (size_t)mpad * sizeof(float));
        for (int kc = k0; kc < k1; kc += KCH) {
            int kn = imin(KCH, k1 - kc), kpad = (kn + 63) & ~63;
            const uint8_t *xk;
            if (xw) {
                xk = xw + (size_t)((kc - k0) / 64) * XSTEP;
            } else {
                xk = (const uint8_t *)s->xpack;
                pack_x_i8(A, a_stride, r, view, mfirst, mn, kc, kn, s->tinv, (uint8_t *)s->xpack,
                          KCH / 64, perm);
            }
            decode(W, nb, nr, kc, kn, kpad, g, (int8_t *)s->wdec, s->gsc);
            tiles_i8_groups(nr, xk, x_mb_stride, mn, kpad, imin(g, kpad), ks, s->gsc, s);
        }
        for (int rb = 0; rb < nr; rb += 16)
            for (int mb = 0; mb < mn; mb += 16)
                store_scaled(s->facc + (size_t)rb * MMAX + mb, MMAX, 0, NULL, ts + mb, Cm, ldc,
                             n_off + (nb - na) + rb, imin(16, nr - rb), mb, imin(16, mn - mb),
                             0);
    }
}

/* One INT4 row's ng BF16 group scales sr: its row scale *rs = max |s| / 16,
 * *inv16 = 16 / max |s| (0: a zero row), and, with e, the integer factors
 * e[g] = rint(16 s_g / max |s|); returns 1 where all of them are within 1/32
 * of integers in 0..16 (format version 2's rows; e then holds them all). */
static int i4_row(const uint16_t *sr, int ng, float *rs, float *inv16, int8_t *e)
{
    float m = q8t_absmax_bf16(sr, ng);
    *rs = m / 16.0f;
    *inv16 = m > 0.0f ? 16.0f / m : 0.0f;
    int ok = e && int_tables;
    for (int g = 0; g < ng && ok; g += 16) {
        int n = imin(16, ng - g);
        __m512 fv = i4_factors(sr + g, n, *inv16);
        __m512i ev = _mm512_cvtps_epi32(fv);
        __m512 off = _mm512_abs_ps(_mm512_sub_ps(fv, _mm512_cvtepi32_ps(ev)));
        /* (e outside 0..16: a negative or NaN scale, the computed tables) */
        ok = !_mm512_cmp_ps_mask(off, _mm512_set1_ps(1.0f / 32), _CMP_GT_OQ) &&
             !_mm512_cmpgt_epu32_mask(ev, _mm512_set1_epi32(16));
        _mm_mask_storeu_epi8(e + g, (__mmask16)((1u << n) - 1u), _mm512_cvtepi32_epi8(ev));
    }
    return ok;
}

/* ---- INT4 grid factors made once at create (kt__moe_packer.grid_make) -------
 *
 * What i4_block derives from a 32-row block's BF16 scales in every call (each
 * row's scale, 16 / max |s|, the grid test and the integer factors: 224 groups
 * a DeepSeek-V3 gate row at g 32, with the tiles idle) made once per matrix
 * and handed back as W->grid. Layout for R rows of ng = cols / g groups, Rp =
 * R + NB rounded up to 16 (the rows past R zero: a block's loads of rs and
 * inv16 may run NB rows on):
 *   float rs[Rp], float inv16[Rp]   (i4_row's)
 *   uint32_t bits[Rp / 32 + 1]      (bit r % 32 of word r / 32: row r on the grid)
 *   int8_t e[R][ng], 64-byte aligned (a row on the grid: its factors)
 * One byte a group and 8 a row: a DeepSeek-V3 expert at g 32 (gate and up
 * 2048 x 224 groups, down 7168 x 64) 1.47 MB beside its 24.8 MB of weights and
 * scales (5.9%); at g 128 0.43 MB (1.9%). Only for whole-K calls (k0 = 0, k1 =
 * cols: the backend's; a row's scale is its largest over the call's inputs).
 * KT_AMX_GRID=0: none (i4_block's per-call analysis, for measuring). */
static int grid_on = 1;
/* KT_AMX_GRID_PF=0: i4_block does not prefetch the next block's factors into
 * L2 (the rescale's loads fetch them; for measuring) */
static int grid_pf = 1;

/* Bytes [p, end) on their way into L2, a cache line at a time. */
static void prefetch_l2(const void *p, const void *end)
{
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < (uintptr_t)end; a += 64)
        _mm_prefetch((const char *)a, _MM_HINT_T1);
}

typedef struct grid_view {
    const float *rs, *inv16;
    const uint32_t *bits;
    const int8_t *e;
} grid_view;

static size_t grid_layout(const kt__wmat *W, size_t *o_inv16, size_t *o_bits, size_t *o_e)
{
    size_t rp = ((size_t)W->rows + NB + 15) & ~(size_t)15;
    int g = W->group > 0 ? W->group : 32;
    *o_inv16 = rp * 4;
    *o_bits = 2 * rp * 4;
    *o_e = (*o_bits + (rp / 32 + 1) * 4 + 63) & ~(size_t)63;
    return *o_e + (size_t)W->rows * (size_t)(W->cols / g);
}

static grid_view grid_of(const kt__wmat *W)
{
    size_t oi, ob, oe;
    grid_layout(W, &oi, &ob, &oe);
    const uint8_t *b = W->grid;
    return (grid_view){(const float *)b, (const float *)(b + oi), (const uint32_t *)(b + ob),
                       (const int8_t *)(b + oe)};
}

static size_t grid_bytes_i4(const kt__wmat *W)
{
    size_t oi, ob, oe;
    return grid_on && int_tables && !int4_exact ? (grid_layout(W, &oi, &ob, &oe) + 63) & ~(size_t)63
                                                : 0;
}

static void grid_make_i4(const kt__wmat *W, void *dst)
{
    size_t oi, ob, oe, n = grid_layout(W, &oi, &ob, &oe);
    int g = W->group > 0 ? W->group : 32, ng = W->cols / g;
    uint8_t *b = dst;
    memset(b, 0, oe); /* rs, inv16 and bits of the rows past R zero */
    float *rs = (float *)b, *inv16 = (float *)(b + oi);
    uint32_t *bits = (uint32_t *)(b + ob);
    int8_t *e = (int8_t *)(b + oe);
    memset(e, 0, n - oe);
    for (int r = 0; r < W->rows; r++) {
        const uint16_t *sr = (const uint16_t *)W->scale + (size_t)r * (size_t)ng;
        if (i4_row(sr, ng, &rs[r], &inv16[r], e + (size_t)r * ng))
            bits[r / 32] |= 1u << (r % 32);
    }
}

/* Block b of INT4 rows [nb, nb + 32) (fewer at n1) over inputs from k0: its
 * pointers, the row scales rs[r] = max |s| / 16, inv16[r] = 16 / max |s|, and
 * for the rows whose factors 16 s / max |s| are all within 1/32 of integers
 * in 0..16 (format version 2's rows) those integers, in e ([NB][ng]), once per
 * block instead of per chunk. With W->grid (whole K) all of them are read
 * from there (and the block's factors prefetched into L2: this runs for the
 * next block while the tiles run the current one). Returns the row scales. */
static const float *i4_block(i8_src *b, const kt__wmat *W, int nb, int n1, int k0, float *rs,
                             float *inv16, int8_t *e)
{
    b->nr = imin(NB, n1 - nb);
    b->w = (const uint8_t *)W->w + (size_t)nb * b->ldw + (size_t)k0 / 2;
    b->w_next = nb + NB < n1 ? b->w + NB * b->ldw : NULL;
    b->sc = (const uint16_t *)W->scale + (size_t)nb * b->lds + (size_t)k0 / (size_t)b->g;
    if (W->grid && grid_on && k0 == 0 && b->kn == W->cols) {
        grid_view gv = grid_of(W);
        b->inv16 = gv.inv16 + nb;
        b->e = gv.e + (size_t)nb * (size_t)b->ng;
        /* bits nb .. nb + nr - 1 */
        uint64_t w2 = gv.bits[nb / 32] | (uint64_t)gv.bits[nb / 32 + 1] << 32;
        b->int_rows = (uint32_t)(w2 >> (nb % 32)) & (uint32_t)((1ull << b->nr) - 1u);
        if (grid_pf)
            prefetch_l2(b->e, b->e + (size_t)b->nr * (size_t)b->ng);
        return gv.rs + nb;
    }
    b->inv16 = inv16;
    b->e = e;
    b->int_rows = 0;
    for (int r = 0; r < NB; r++) {
        if (r >= b->nr) {
            rs[r] = inv16[r] = 0.0f;
            continue;
        }
        int ok = i4_row(b->sc + (size_t)r * b->lds, b->ng, &rs[r], &inv16[r],
                        e ? e + (size_t)r * b->ng : NULL);
        b->int_rows |= (uint32_t)ok << r;
    }
    return rs;
}

/* INT4 rows [n0, n1) rescaled to one scale per row (see "INT4 on one scale
 * per row") through tiles_i8_rows, 32 rows at a time, each block's first chunk
 * rescaled during the block before; the activations as for amx_i8_packed. */
static void amx_i4_rescaled(const kt__wmat *W, int n0, int n1, int k0, int k1, const uint8_t *xw,
                            size_t x_mb_stride, const float *ts, int mn, float *Cm, int ldc,
                            amx_scratch *s, int g, int perm)
{
    i8_src blk[2];
    float *rs[2] = {s->gsc, s->gsc + 2 * NB}, *inv16[2] = {s->gsc + NB, s->gsc + 3 * NB};
    /* the integer factors of the rows on format version 2's grid, whole K */
    int8_t *e[2] = {(k1 - k0) / g <= I4E_GROUPS ? s->i4e[0] : NULL,
                    (k1 - k0) / g <= I4E_GROUPS ? s->i4e[1] : NULL};
    int kt_n = (k1 - k0 + 63) / 64, kq = imin(kc8, KQ_MAX);
    for (int i = 0; i < 2; i++)
        blk[i] = (i8_src){.ldw = (size_t)W->cols / 2, .bps = 32,
                          .lds = (size_t)W->cols / (size_t)g, .g = g,
                          .ng = (k1 - k0 + g - 1) / g, .kn = k1 - k0,
                          .eo128 = perm == PERM_EO128};
    configure_tiles(64);
    amx_prof *pr = prof_here();
    uint64_t t = prof_tsc(pr);
    const float *rsb[2] = {i4_block(&blk[0], W, n0, n1, k0, rs[0], inv16[0], e[0]), NULL};
    prof_add(pr, AP_BLOCK, &t);
    for (int nb = n0, i = 0; nb < n1; nb += NB, i ^= 1) {
        i8_src *cur = &blk[i], *nx = &blk[i ^ 1];
        cur->next = NULL;
        if (nb + NB < n1) {
            t = prof_tsc(pr);
            rsb[i ^ 1] = i4_block(nx, W, nb + NB, n1, k0, rs[i ^ 1], inv16[i ^ 1], e[i ^ 1]);
            prof_add(pr, AP_BLOCK, &t);
            cur->next = nx;
            nx->base = cur->base + (kt_n + kq - 1) / kq;
        }
        nx->in_l2 = tiles_i8_rows(cur, xw, x_mb_stride, mn, kt_n, rsb[i], ts, cur->nr, Cm, ldc,
                                  nb - n0, s);
        nx->ready = 1;
    }
}

/* Tokens [0, mn) (mn <= MMAX) packed over all of [k0, k1) at xw, token
 * scales ts: C = A W^T over rows [n0, n1). AMXINT8 (decode NULL) in place by
 * whole 32-row blocks when K is whole 64-input steps; INT4 rescaled (unless
 * int4_exact); the rest decoded. */
static void amx_i8_packed(const kt__wmat *W, int n0, int n1, int k0, int k1, const uint8_t *xw,
                          size_t x_mb_stride, const float *ts, int mn, float *Cm, int ldc,
                          amx_scratch *s, decode_i8_fn decode, int g, int perm)
{
    int na = n0;
    if (decode == decode_i8_int4 && !int4_exact) {
        amx_i4_rescaled(W, n0, n1, k0, k1, xw, x_mb_stride, ts, mn, Cm, ldc, s, g, perm);
        return;
    }
    if (!decode && (k1 - k0) % 64 == 0) {
        int kt_all = (k1 - k0) / 64, nfull = n0 + (n1 - n0) / NB * NB;
        const int8_t *wq = (const int8_t *)W->w + k0;
        size_t ldw = (size_t)W->cols;
        configure_tiles(64);
        int in_l2 = 0;
        for (int nb = n0; nb < nfull; nb += NB) {
            const int8_t *w = wq + (size_t)nb * ldw;
            i8_src src = {.w = (const uint8_t *)w,
                          .w_next = nb + NB < nfull ? (const uint8_t *)(w + NB * ldw) : NULL,
                          .ldw = ldw, .bps = 64, .in_l2 = in_l2};
            in_l2 = tiles_i8_rows(&src, xw, x_mb_stride, mn, kt_all, (const float *)W->scale + nb,
                                  ts, NB, Cm, ldc, nb - n0, s);
        }
        na = nfull;
    }
    if (na < n1)
        amx_rows_decoded(W, na, n1, k0, k1, xw, x_mb_stride, ts, NULL, 0, NULL, 0, 0, perm, mn,
                         Cm, ldc, na - n0, s, decode ? decode : decode_i8_rows,
                         decode ? g : KCH);
}

/* Input order of the int8 copy for a decoder, group size and kx inputs a
 * call: INT4 in PERM_EO128 where the rescaled rows run (whole 128-input
 * pairs, whole-K copy, chunks of whole pairs; g 32 unless KT_AMX_G32=eo32),
 * else EO64 (EO32 for g 32). The same for g 64 and 128, so that the shared
 * packing (which does not know the group) agrees; g 32 has its own set. */
static int perm_of(decode_i8_fn decode, int g, int kx)
{
    if (decode != decode_i8_int4)
        return PERM_NONE;
    int eo128 = eo128_on && !int4_exact && kx % 128 == 0 && kx / 64 <= KTMAX8 &&
                !(imin(kc8, KQ_MAX) & 1) && (g > 32 || g32_mode);
    return eo128 ? PERM_EO128 : g == 32 ? PERM_EO32 : PERM_EO64;
}

/* C = A W^T on INT8 tiles. `view`: byte offset of the BF16 activations in a
 * row. decode NULL: AMXINT8 weights used in place where whole 32-row blocks
 * and 64-input steps allow (else copied); g: inputs per weight scale (INT4). */
static void amx_gemm_i8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                        size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                        amx_scratch *s, size_t view, decode_i8_fn decode, int g)
{
    int kt_all = (k1 - k0 + 63) / 64;
    int whole_k = kt_all <= KTMAX8;
    int perm = perm_of(decode, g, k1 - k0);
    prof_set = W->rows > W->cols; /* the down products (H > I) */
    uint8_t *xpack = (uint8_t *)s->xpack;
    for (int m0 = 0; m0 < M; m0 += MMAX) {
        int mn = imin(MMAX, M - m0);
        const int32_t *r = rows ? rows + m0 : NULL;
        int mfirst = rows ? 0 : m0;
        float *Cm = C + (size_t)m0 * ldc;
        pack_key key; /* valid 2 + perm: the int8 copy, in this input order */
        if (!whole_k ||
            !key_cached(s, &key, A, r, a_stride, view, mfirst, mn, k0, k1 - k0, 2 + perm)) {
            s->key.valid = 0;
            token_scales(A, a_stride, r, view, mfirst, mn, k0, k1 - k0, s->tscale, s->tinv);
            if (whole_k) {
                pack_x_i8(A, a_stride, r, view, mfirst, mn, k0, k1 - k0, s->tinv, xpack, kt_all,
                          perm);
                s->key = key;
            }
        }
        if (whole_k) {
            amx_i8_packed(W, n0, n1, k0, k1, xpack, (size_t)kt_all * XSTEP, s->tscale, mn, Cm,
                          ldc, s, decode, g, perm);
            continue;
        }
        amx_rows_decoded(W, n0, n1, k0, k1, NULL, (size_t)(KCH / 64) * XSTEP, s->tscale, A,
                         a_stride, r, mfirst, view, perm, mn, Cm, ldc, 0, s,
                         decode ? decode : decode_i8_rows, decode ? g : KCH);
    }
}

/* ---- Shared packing ---------------------------------------------------------
 *
 * The backend's down projection runs every block of H rows over the same
 * tokens of each expert (and the gate / up items of an expert share its
 * tokens): instead of each worker quantizing and packing them again for every
 * call, they are packed once per expert into memory all workers read:
 *   P = float d[blocks * 16]  token scales (0 past M)
 *       then [blocks][K64 / 64][16 quads][16 tokens][4] int8 VNNI tiles,
 * blocks = ceil(M / 16), K64 = K rounded up to 64: pack_bytes(M, K) =
 * blocks x pack_bytes(16, K). */

static size_t pack_bytes_i8(int M, int K)
{
    return (size_t)((M + 15) / 16) * (64 + (size_t)((K + 63) / 64) * XSTEP);
}

static void pack_i8(const void *A, size_t a_stride, const int32_t *rows, int M, int K, void *P,
                    size_t view, int perm)
{
    int blocks = (M + 15) / 16, kt_all = (K + 63) / 64;
    float *d = P;
    uint8_t *x = (uint8_t *)P + (size_t)blocks * 64;
    for (int b = 0; b < blocks; b++) {
        int m0 = 16 * b, mn = imin(16, M - m0);
        float inv[16];
        memset(d + m0, 0, 16 * sizeof(float));
        token_scales(A, a_stride, rows, view, m0, mn, 0, K, d + m0, inv);
        pack_x_i8(A, a_stride, rows, view, m0, mn, 0, K, inv, x + (size_t)b * kt_all * XSTEP,
                  kt_all, perm);
    }
}

/* gemm over inputs [0, K) for tokens [m0, m0 + M) of a packed set of Mtot
 * (m0 a multiple of 16). */
static void gemm_packed_i8(const kt__wmat *W, int n0, int n1, int K, const void *P, int Mtot,
                           int m0, int M, float *C, int ldc, amx_scratch *s, decode_i8_fn decode,
                           int g)
{
    size_t stride = (size_t)((K + 63) / 64) * XSTEP;
    const float *ts = (const float *)P + m0;
    prof_set = W->rows > W->cols; /* the down products (H > I) */
    const uint8_t *x = (const uint8_t *)P + (size_t)((Mtot + 15) / 16) * 64 +
                       (size_t)(m0 / 16) * stride;
    for (int mb = 0; mb < M; mb += MMAX)
        amx_i8_packed(W, n0, n1, 0, K, x + (size_t)(mb / 16) * stride, stride, ts + mb,
                      imin(MMAX, M - mb), C + (size_t)mb * ldc, ldc, s, decode, g,
                      perm_of(decode, g, K));
}

/* ---- BF16X2 activations on AMX-BF16 tiles ------------------------------------
 *
 * KT_MOE_PREC_BF16X2 rows hold x = hi + lo, both BF16 (hi[Kp] at byte 0, lo[Kp]
 * at byte 2 Kp, Kp = K rounded up to 64). Both halves are packed as B tile sets
 * (cached per epoch like the BF16 copy) and every K step issues two products
 * into the same F32 C tile. The weights go into the A operand as exact BF16
 * numbers (BF16 as is, E4M3 by table, INT4 nibble - 8, INT8), unscaled, so
 * every product is exact; the scales multiply the F32 sum of each scale group:
 *   facc[n][m] += s[n][g] * sum_{k in g} w[n][k] (hi_m[k] + lo_m[k])
 * (groups: FP8 128, INT4 its group, BF16 and AMXINT8 a whole chunk with scale
 * 1 or the row scale). Token batches of up to MX2 so both copies fit xpack.
 */

#define MX2 (MMAX / 2) /* tokens per BF16X2 batch: hi and lo halves of xpack */
#define XHALF ((size_t)(MX2 / 16) * KTMAX * 512) /* uint16 per half of xpack */

/* Fills s->wdec rows [0, NB) x [0, kpad) with exact, unscaled BF16 weights of
 * rows [n, n + nr) and inputs [kc, kc + kn) in input order (zero past kn and
 * nr), and gsc[r][j] with the scale of group j; returns the group length. */
typedef int (*decode_x2_fn)(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                            uint16_t *dst, float *gsc);

static int decode_x2_bf16(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                          uint16_t *dst, float *gsc)
{
    decode_bf16(W, n, nr, kc, kn, kpad, dst);
    for (int r = 0; r < NB; r++)
        gsc[(size_t)r * GMAX] = 1.0f;
    return KCH;
}

/* int8 -> BF16 (exact), one group per chunk with the row scale. */
static int decode_x2_int8(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                          uint16_t *dst, float *gsc)
{
    const int8_t *w = W->w;
    for (int r = 0; r < NB; r++) {
        uint16_t *d = dst + (size_t)r * KCH;
        gsc[(size_t)r * GMAX] = r < nr ? ((const float *)W->scale)[n + r] : 0.0f;
        if (r >= nr) {
            memset(d, 0, (size_t)kpad * 2);
            continue;
        }
        const int8_t *row = w + (size_t)(n + r) * W->cols + kc;
        for (int k = 0; k < kpad; k += 32) {
            __m256i v = _mm256_maskz_loadu_epi8(q8t_mask32(kn - k), row + k);
            __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
            __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
            _mm512_storeu_si512(d + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
    return KCH;
}

/* E4M3 -> BF16 by the byte tables, interleaved back into input order; the
 * scale per 128 x 128 block (kc a multiple of 128). */
static int decode_x2_fp8(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                         uint16_t *dst, float *gsc)
{
    const __m512i h0 = _mm512_loadu_si512(e4m3_hi), h1 = _mm512_loadu_si512(e4m3_hi + 64);
    const __m512i l0 = _mm512_loadu_si512(e4m3_lo), l1 = _mm512_loadu_si512(e4m3_lo + 64);
    /* word j of the first 32: low byte lo[j], high byte hi[j]; then j + 32 */
    uint8_t ia[64], ib[64];
    for (int j = 0; j < 32; j++) {
        ia[2 * j] = (uint8_t)j;
        ia[2 * j + 1] = (uint8_t)(64 + j);
        ib[2 * j] = (uint8_t)(32 + j);
        ib[2 * j + 1] = (uint8_t)(96 + j);
    }
    const __m512i idx_a = _mm512_loadu_si512(ia), idx_b = _mm512_loadu_si512(ib);
    const uint8_t *w = W->w;
    const float *sc = W->scale;
    int cols = W->cols, cb = (cols + 127) / 128;
    for (int r = 0; r < NB; r++) {
        uint16_t *d = dst + (size_t)r * KCH;
        const float *srow = r < nr ? sc + (size_t)((n + r) / 128) * cb : NULL;
        for (int j = 0; j * 128 < kpad; j++)
            gsc[(size_t)r * GMAX + j] = srow ? srow[(kc + j * 128) / 128] : 0.0f;
        if (r >= nr) {
            memset(d, 0, (size_t)kpad * 2);
            continue;
        }
        const uint8_t *row = w + (size_t)(n + r) * cols + kc;
        for (int k = 0; k < kpad; k += 64) {
            _mm_prefetch((const char *)row + k + KCH, _MM_HINT_T0); /* this row's next chunk */
            int left = kn - k;
            __mmask64 msk = left >= 64 ? ~(__mmask64)0
                                       : (left <= 0 ? 0 : (((__mmask64)1 << left) - 1));
            __m512i v = _mm512_maskz_loadu_epi8(msk, row + k);
            __m512i hi = _mm512_permutex2var_epi8(h0, v, h1);
            __m512i lo = _mm512_permutex2var_epi8(l0, v, l1);
            hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0xF8);
            _mm512_storeu_si512(d + k, _mm512_permutex2var_epi8(lo, idx_a, hi));
            if (k + 32 < kpad)
                _mm512_storeu_si512(d + k + 32, _mm512_permutex2var_epi8(lo, idx_b, hi));
        }
    }
    return 128;
}

/* INT4 nibbles (input 2b low, stored as v + 8) -> BF16 of v through a table;
 * BF16 scale per group (W->group inputs, 32 when 0). */
static int decode_x2_int4(const kt__wmat *W, int n, int nr, int kc, int kn, int kpad,
                          uint16_t *dst, float *gsc)
{
    uint16_t tab[32];
    for (int i = 0; i < 32; i++)
        tab[i] = kt__moe_f32_bf16((float)((i & 15) - 8));
    const __m512i table = _mm512_loadu_si512(tab), m4 = _mm512_set1_epi32(0xf);
    int g = W->group > 0 ? W->group : 32;
    size_t rb = (size_t)W->cols / 2, sb = (size_t)W->cols / (size_t)g;
    for (int r = 0; r < NB; r++) {
        uint16_t *d = dst + (size_t)r * KCH;
        const uint16_t *srow =
            r < nr ? (const uint16_t *)W->scale + (size_t)(n + r) * sb + (size_t)kc / g : NULL;
        for (int j = 0; j * g < kpad; j++)
            gsc[(size_t)r * GMAX + j] = srow && j * g < kn ? kt__moe_bf16_f32(srow[j]) : 0.0f;
        if (r >= nr) {
            memset(d, 0, (size_t)kpad * 2);
            continue;
        }
        const uint8_t *row = (const uint8_t *)W->w + (size_t)(n + r) * rb + (size_t)kc / 2;
        for (int k = 0; k < kn; k += 32) {
            if (k % 128 == 0)
                _mm_prefetch((const char *)row + (size_t)(k + KCH) / 2, _MM_HINT_T0);
            /* dword j = byte j -> words (low nibble, high nibble) -> table */
            __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + k / 2)));
            __m512i pairs = _mm512_or_si512(_mm512_and_si512(b, m4),
                                            _mm512_slli_epi32(_mm512_srli_epi32(b, 4), 16));
            _mm512_storeu_si512(d + k, _mm512_permutexvar_epi16(pairs, table));
        }
        if (kpad > kn)
            memset(d + kn, 0, (size_t)(kpad - kn) * 2);
    }
    return g;
}

/* Adds tile TC (16 rows x 16 tokens, F32) times the row scales sc[r * GMAX]
 * to acc[r]. */
#define FOLD_X2(TC, acc, sc)                                                                    \
    do {                                                                                        \
        _tile_stored(TC, s->ctile, 64);                                                         \
        for (int r = 0; r < 16; r++)                                                            \
            acc[r] = _mm512_fmadd_ps(_mm512_load_ps(s->ctile + r * 16),                         \
                                     _mm512_set1_ps((sc)[(size_t)r * GMAX]), acc[r]);           \
    } while (0)

/* Rows of BF16 weights (wdec [NB][KCH], or BF16 weights in place; ldw bytes
 * apart) x every packed token block, 32 rows x
 * 16 tokens at a time (two C tiles sharing the X tiles): per group of g
 * inputs, two products per 32 inputs and W tile (hi, lo) into F32 tiles,
 * folded with the group scales into F32 sums in registers, added to facc:
 *   facc[r][t] += sum_g gsc[r][g] * sum_{k in g} w[r][k] (hi[t][k] + lo[t][k]) */
static void tiles_x2_groups(const uint16_t *w, size_t ldw, int nr, const uint16_t *xh,
                            const uint16_t *xl, size_t x_mb_stride, int mn, int kpad, int g,
                            const float *gsc, amx_scratch *s)
{
    const uint16_t *w0 = w, *w1 = (const uint16_t *)((const char *)w + 16 * ldw);
    int two_w = nr > 16;
    int steps = g / 32, n_groups = (kpad + g - 1) / g;
    for (int tb = 0; tb < mn; tb += 16) {
        const uint16_t *h = xh + (size_t)(tb / 16) * x_mb_stride;
        const uint16_t *l = xl + (size_t)(tb / 16) * x_mb_stride;
        __m512 acc0[16], acc1[16];
        for (int r = 0; r < 16; r++)
            acc0[r] = acc1[r] = _mm512_setzero_ps();
        for (int gi = 0; gi < n_groups; gi++) {
            _tile_zero(TC00);
            _tile_zero(TC10);
            /* hot loop: one group, 2 or 4 products per 32 inputs */
            for (int st = 0; st < steps && gi * g + st * 32 < kpad; st++) {
                int k = gi * g + st * 32;
                _tile_loadd(TX0, h + (size_t)(k / 32) * 512, 64);
                _tile_loadd(TX1, l + (size_t)(k / 32) * 512, 64);
                _tile_loadd(TW0, w0 + k, ldw);
                _tile_dpbf16ps(TC00, TW0, TX0);
                _tile_dpbf16ps(TC00, TW0, TX1);
                if (two_w) {
                    _tile_loadd(TW1, w1 + k, ldw);
                    _tile_dpbf16ps(TC10, TW1, TX0);
                    _tile_dpbf16ps(TC10, TW1, TX1);
                }
            }
            FOLD_X2(TC00, acc0, gsc + gi);
            if (two_w)
                FOLD_X2(TC10, acc1, gsc + (size_t)16 * GMAX + gi);
        }
        for (int r = 0; r < 16; r++) {
            float *fa = s->facc + (size_t)r * MMAX + tb;
            _mm512_store_ps(fa, _mm512_add_ps(_mm512_load_ps(fa), acc0[r]));
            if (two_w) {
                fa += (size_t)16 * MMAX;
                _mm512_store_ps(fa, _mm512_add_ps(_mm512_load_ps(fa), acc1[r]));
            }
        }
    }
}

/* C = A W^T with BF16X2 activations on BF16 tiles. k0 a multiple of the
 * scale group (128 for FP8, the group for INT4). */
/* Scale 1 for every row (gsc layout: [NB][GMAX], group 0). */
static const float ones_gsc[NB * GMAX] = {[0 * GMAX] = 1, [1 * GMAX] = 1, [2 * GMAX] = 1,
    [3 * GMAX] = 1, [4 * GMAX] = 1, [5 * GMAX] = 1, [6 * GMAX] = 1, [7 * GMAX] = 1,
    [8 * GMAX] = 1, [9 * GMAX] = 1, [10 * GMAX] = 1, [11 * GMAX] = 1, [12 * GMAX] = 1,
    [13 * GMAX] = 1, [14 * GMAX] = 1, [15 * GMAX] = 1, [16 * GMAX] = 1, [17 * GMAX] = 1,
    [18 * GMAX] = 1, [19 * GMAX] = 1, [20 * GMAX] = 1, [21 * GMAX] = 1, [22 * GMAX] = 1,
    [23 * GMAX] = 1, [24 * GMAX] = 1, [25 * GMAX] = 1, [26 * GMAX] = 1, [27 * GMAX] = 1,
    [28 * GMAX] = 1, [29 * GMAX] = 1, [30 * GMAX] = 1, [31 * GMAX] = 1};

static void amx_gemm_x2(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                        size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                        amx_scratch *s, decode_x2_fn decode)
{
    static const float ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    configure_tiles(64);
    size_t lo_view = (size_t)((W->cols + 63) & ~63) * 2;
    int kt_all = (k1 - k0 + 31) / 32;
    int whole_k = kt_all <= KTMAX; /* both copies hold all of [k0, k1) */
    int in_place = decode == decode_x2_bf16 && (k1 - k0) % 32 == 0;
    uint16_t *xh = s->xpack, *xl = s->xpack + XHALF;
    for (int m0 = 0; m0 < M; m0 += MX2) {
        int mn = imin(MX2, M - m0), mpad = (mn + 15) & ~15;
        const int32_t *r = rows ? rows + m0 : NULL;
        int mfirst = rows ? 0 : m0;
        float *Cm = C + (size_t)m0 * ldc;
        size_t x_mb_stride = (size_t)(whole_k ? kt_all : KCH / 32) * 512;
        if (whole_k) {
            pack_key key; /* valid 9: the hi + lo copies */
            if (!key_cached(s, &key, A, r, a_stride, lo_view, mfirst, mn, k0, k1 - k0, 9)) {
                pack_x(A, a_stride, r, 0, mfirst, mn, k0, k1 - k0, xh, kt_all);
                pack_x(A, a_stride, r, lo_view, mfirst, mn, k0, k1 - k0, xl, kt_all);
                s->key = key;
            }
        }
        for (int nb = n0; nb < n1; nb += NB) {
            int nr = imin(NB, n1 - nb);
            for (int i = 0; i < NB; i++)
                memset(s->facc + (size_t)i * MMAX, 0, (size_t)mpad * sizeof(float));
            for (int kc = k0; kc < k1; kc += KCH) {
                int kn = imin(KCH, k1 - kc), kpad = (kn + 31) & ~31;
                size_t off = 0;
                if (whole_k) {
                    off = (size_t)((kc - k0) / 32) * 512;
                } else {
                    s->key.valid = 0;
                    pack_x(A, a_stride, r, 0, mfirst, mn, kc, kn, xh, KCH / 32);
                    pack_x(A, a_stride, r, lo_view, mfirst, mn, kc, kn, xl, KCH / 32);
                }
                if (in_place && nr == NB) {
                    /* whole 32-row blocks and 32-input steps: tiles load the rows */
                    tiles_x2_groups((const uint16_t *)W->w + (size_t)nb * W->cols + kc,
                                    (size_t)W->cols * 2, nr, xh + off, xl + off, x_mb_stride, mn,
                                    kpad, kpad, ones_gsc, s);
                    continue;
                }
                int g = decode(W, nb, nr, kc, kn, kpad, s->wdec, s->gsc);
                tiles_x2_groups(s->wdec, KCH * 2, nr, xh + off, xl + off, x_mb_stride, mn, kpad,
                                imin(g, kpad), s->gsc, s);
            }
            for (int rb = 0; rb < nr; rb += 16)
                for (int mb = 0; mb < mn; mb += 16)
                    store_scaled(s->facc + (size_t)rb * MMAX + mb, MMAX, 0, NULL, ones, Cm, ldc,
                                 nb - n0 + rb, imin(16, nr - rb), mb, imin(16, mn - mb), 0);
        }
    }
}

/* ---- the kernel sets ------------------------------------------------------ */

static const kt__moe_kernels *avx512_bf16, *avx512_fp8, *avx512_int4, *avx512_int8;
static const kt__moe_kernels *avx512_int4g; /* grouped AMXINT4 (64, 128): BF16 activations */
static const kt__moe_kernels *x2_bf16, *x2_fp8, *x2_int4, *x2_int8; /* KT_MOE_PREC_BF16X2 */
static int min_m = AMX_MIN_M, min_int8 = AMX_MIN_INT8, min_int4g = AMX_MIN_INT4G,
           min_int4 = AMX_MIN_INT4;
static int int4_bf16_tiles; /* KT_AMX_INT4_TILES=bf16: INT4 on BF16 tiles (comparison) */

/* INT4 in groups of 32 (RAWINT4's layout): Q8P128 rows, int8 part (K128 bytes),
 * lane scales and sums (K128 bytes), then the BF16 copy the tiles read. */
static void amx_int4(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                     void *scratch)
{
    size_t view = 2 * (size_t)((W->cols + 127) & ~127);
    if (int4_bf16_tiles)
        amx_gemm(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch, view, decode_int4, 32);
    else
        amx_gemm_i8(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch, view,
                    decode_i8_int4, 32);
}

/* A set's gemm: below `min` tokens per call the AVX-512 set `below` (its
 * scratch after ours), else `tiles`, a call on the same arguments. */
#define AMX_GEMM(name, below, min, tiles)                                                       \
    static void name(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,          \
                     size_t a_stride, const int32_t *rows, int M, float *C, int ldc,            \
                     void *scratch)                                                             \
    {                                                                                           \
        if (M < (min)) {                                                                        \
            below->gemm(W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc,                        \
                        (char *)scratch + sizeof(amx_scratch));                                 \
            return;                                                                             \
        }                                                                                       \
        tiles;                                                                                  \
    }
#define GEMM_ARGS W, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch
AMX_GEMM(gemm_bf16, avx512_bf16, min_m, amx_gemm(GEMM_ARGS, 0, NULL, 32))
AMX_GEMM(gemm_fp8, avx512_fp8, min_m, amx_gemm(GEMM_ARGS, 0, decode_fp8, 64))
AMX_GEMM(gemm_int4, avx512_int4, int4_bf16_tiles ? min_m : min_int4, amx_int4(GEMM_ARGS))
AMX_GEMM(gemm_int8, avx512_int8, min_int8, amx_gemm_i8(GEMM_ARGS, 0, NULL, 0))
AMX_GEMM(gemm_int4g, avx512_int4g, min_int4g,
         amx_gemm_i8(GEMM_ARGS, 0, decode_i8_int4, W->group))
/* KT_MOE_PREC_BF16X2: BF16 tiles from min_m tokens, the AVX-512 x2 set below. */
AMX_GEMM(gemm_bf16_x2, x2_bf16, min_m, amx_gemm_x2(GEMM_ARGS, decode_x2_bf16))
AMX_GEMM(gemm_fp8_x2, x2_fp8, min_m, amx_gemm_x2(GEMM_ARGS, decode_x2_fp8))
AMX_GEMM(gemm_int4_x2, x2_int4, min_m, amx_gemm_x2(GEMM_ARGS, decode_x2_int4))
AMX_GEMM(gemm_int8_x2, x2_int8, min_m, amx_gemm_x2(GEMM_ARGS, decode_x2_int8))
#undef GEMM_ARGS

/* Shared packing (kt__moe_packer): int8 copies in each set's input order and
 * view (AMXINT8 and grouped INT4: BF16 at byte 0; INT4 in groups of 32: the
 * BF16 copy after Q8P128's int8 part, scales and sums). */
static void pack_int8(const void *A, size_t a_stride, const int32_t *rows, int M, int K, void *P)
{
    pack_i8(A, a_stride, rows, M, K, P, 0, PERM_NONE);
}

static void pack_int4(const void *A, size_t a_stride, const int32_t *rows, int M, int K, void *P)
{
    pack_i8(A, a_stride, rows, M, K, P, 2 * (size_t)((K + 127) & ~127),
            perm_of(decode_i8_int4, 32, K));
}

static void pack_int4g(const void *A, size_t a_stride, const int32_t *rows, int M, int K,
                       void *P)
{
    pack_i8(A, a_stride, rows, M, K, P, 0, perm_of(decode_i8_int4, 64, K));
}

static void gemm_packed_int8(const kt__wmat *W, int n0, int n1, const void *P, int Mtot, int m0,
                             int M, float *C, int ldc, void *scratch)
{
    gemm_packed_i8(W, n0, n1, W->cols, P, Mtot, m0, M, C, ldc, scratch, NULL, 0);
}

static void gemm_packed_int4(const kt__wmat *W, int n0, int n1, const void *P, int Mtot, int m0,
                             int M, float *C, int ldc, void *scratch)
{
    gemm_packed_i8(W, n0, n1, W->cols, P, Mtot, m0, M, C, ldc, scratch, decode_i8_int4,
                   W->group > 0 ? W->group : 32);
}

/* The first kc8 64-input steps of up to NB rows (the tile loop's first chunk;
 * the loops prefetch every later one themselves), row_bytes per row. */
static void prefetch_first(const uint8_t *w, size_t ldw, int n0, int n1, size_t row_bytes)
{
    for (int r = n0; r < n1 && r < n0 + NB; r++)
        for (size_t b = 0; b < row_bytes; b += 64)
            _mm_prefetch((const char *)w + (size_t)r * ldw + b, _MM_HINT_T1);
}

static int prefetch_on = 1; /* KT_AMX_PREFETCH=0: packer prefetch hints off (comparison) */

static void prefetch_int8(const kt__wmat *W, int n0, int n1)
{
    if (!prefetch_on)
        return;
    size_t ldw = (size_t)W->cols;
    prefetch_first(W->w, ldw, n0, n1, ldw < (size_t)kc8 * 64 ? ldw : (size_t)kc8 * 64);
}

static void prefetch_int4(const kt__wmat *W, int n0, int n1)
{
    if (!prefetch_on)
        return;
    size_t ldw = (size_t)W->cols / 2;
    prefetch_first(W->w, ldw, n0, n1, ldw < KCH / 2 ? ldw : KCH / 2);
    if (W->grid && grid_on) { /* the first block's factors and scales (i4_block) */
        grid_view gv = grid_of(W);
        int g = W->group > 0 ? W->group : 32, n = imin(n1 - n0, NB);
        size_t ng = (size_t)(W->cols / g);
        prefetch_l2(gv.e + (size_t)n0 * ng, gv.e + (size_t)(n0 + n) * ng);
        _mm_prefetch((const char *)(gv.rs + n0), _MM_HINT_T1);
        _mm_prefetch((const char *)(gv.rs + n0 + n - 1), _MM_HINT_T1);
        return;
    }
    /* and the rows' scales (contiguous), which i4_block reads at the call's start */
    size_t lds = (size_t)W->cols / (size_t)(W->group > 0 ? W->group : 32) * 2;
    prefetch_l2((const uint8_t *)W->scale + (size_t)n0 * lds,
                (const uint8_t *)W->scale + (size_t)n1 * lds);
}

static kt__moe_packer p_int8, p_int4, p_int4g;
static int shared_pack; /* 0 with KT_AMX_SHARED_PACK=0: every call packs (comparison) */

static kt__moe_kernels k_bf16, k_fp8, k_int4, k_int8, k_int4g;
static kt__moe_kernels k_bf16_x2, k_fp8_x2, k_int4_x2, k_int8_x2;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Ours, then the AVX-512 set's: each keeps its own cached activations. */
static size_t scratch_of(const kt__moe_kernels *k)
{
    return sizeof(amx_scratch) + k->scratch_bytes;
}

static void init_sets(void)
{
    avx512_bf16 = kt__moe_kernels_avx512(KT_METHOD_BF16);
    avx512_fp8 = kt__moe_kernels_avx512(KT_METHOD_FP8);
    avx512_int4 = kt__moe_kernels_avx512(KT_METHOD_RAWINT4);
    avx512_int8 = kt__moe_kernels_avx512(KT_METHOD_AMXINT8);
    avx512_int4g = kt__moe_int4g_avx512();
    if (!avx512_bf16 || !avx512_fp8 || !avx512_int4 || !avx512_int8 || !avx512_int4g)
        return;
    init_e4m3_tables();
    init_lut_index();
    const char *env = getenv("KT_AMX_MIN_TOKENS");
    if (env && atoi(env) >= 1)
        min_m = min_int8 = min_int4g = min_int4 = atoi(env);
    env = getenv("KT_AMX_INT4_TILES");
    int4_bf16_tiles = env && !strcmp(env, "bf16");
    k_bf16 = (kt__moe_kernels){"amx-bf16", avx512_bf16->act, avx512_bf16->quant, gemm_bf16,
                               scratch_of(avx512_bf16), NULL};
    k_fp8 = (kt__moe_kernels){"amx-bf16+fp8", avx512_fp8->act, avx512_fp8->quant, gemm_fp8,
                              scratch_of(avx512_fp8), NULL};
    k_int4 = (kt__moe_kernels){int4_bf16_tiles ? "amx-bf16+int4" : "amx-int8+int4",
                               avx512_int4->act, avx512_int4->quant, gemm_int4,
                               scratch_of(avx512_int4), NULL};
    k_int4g = (kt__moe_kernels){"amx-int8+int4g", avx512_int4g->act, avx512_int4g->quant,
                                gemm_int4g, scratch_of(avx512_int4g), NULL};
    k_int8 = (kt__moe_kernels){"amx-int8", avx512_int8->act, avx512_int8->quant, gemm_int8,
                               scratch_of(avx512_int8), NULL};
    env = getenv("KT_AMX_AHEAD");
    if (env && atoi(env) >= 1 && atoi(env) <= 4)
        ahead8 = atoi(env);
    env = getenv("KT_AMX_INT4_EXACT");
    int4_exact = env && !strcmp(env, "1");
    env = getenv("KT_AMX_INT4_TABLES");
    int_tables = !(env && !strcmp(env, "computed"));
    env = getenv("KT_AMX_SHARED_PACK");
    shared_pack = !(env && !strcmp(env, "0"));
    env = getenv("KT_AMX_PREFETCH");
    prefetch_on = !(env && !strcmp(env, "0"));
    env = getenv("KT_AMX_PASSES");
    if (env)
        passes_on = !strcmp(env, "1");
    env = getenv("KT_AMX_WIDE");
    wide_on = !(env && !strcmp(env, "0"));
    env = getenv("KT_AMX_PF");
    if (env)
        pf_mode = !strcmp(env, "t1t0") ? 1 : !strcmp(env, "t0") ? 2 : 0;
    env = getenv("KT_AMX_LEAN");
    lean_on = env && !strcmp(env, "0") ? 0 : env && !strcmp(env, "128") ? 128 : 1;
    env = getenv("KT_AMX_FIRST_PF");
    if (env)
        first_pf = strcmp(env, "0") != 0;
    env = getenv("KT_AMX_WIDE_FIRST");
    if (env)
        wide_first = !strcmp(env, "1");
    env = getenv("KT_AMX_NEXT_W");
    if (env) {
        int w = atoi(env);
        next_w = w < 0 ? 0 : imin(w, 64);
    }
    env = getenv("KT_AMX_EO128");
    eo128_on = !(env && !strcmp(env, "0"));
    env = getenv("KT_AMX_G32");
    if (env)
        g32_mode = !strcmp(env, "eo32") ? 0 : !strcmp(env, "general") ? 1 : 2;
    env = getenv("KT_AMX_GRID");
    grid_on = !(env && !strcmp(env, "0"));
    env = getenv("KT_AMX_GRID_PF");
    grid_pf = !(env && !strcmp(env, "0"));
    env = getenv("KT_AMX_PROFILE");
    amx_profile_on = env && !strcmp(env, "1");
    prof_tsc0 = __rdtsc();
    prof_sec0 = prof_now();
    env = getenv("KT_AMX_PROBE");
    probe = env ? atoi(env) & 63 : 0;
    env = getenv("KT_AMX_KC");
    if (env && atoi(env) >= 1 && atoi(env) <= KC8_MAX)
        kc8 = atoi(env);
    p_int8 = (kt__moe_packer){min_int8, pack_bytes_i8, pack_int8, gemm_packed_int8,
                              prefetch_int8, NULL, NULL};
    p_int4 = (kt__moe_packer){min_int4, pack_bytes_i8, pack_int4, gemm_packed_int4,
                              prefetch_int4, grid_bytes_i4, grid_make_i4};
    p_int4g = (kt__moe_packer){min_int4g, pack_bytes_i8, pack_int4g, gemm_packed_int4,
                               prefetch_int4, grid_bytes_i4, grid_make_i4};
    x2_bf16 = kt__moe_kernels_avx512_x2(KT_METHOD_BF16);
    x2_fp8 = kt__moe_kernels_avx512_x2(KT_METHOD_FP8);
    x2_int4 = kt__moe_kernels_avx512_x2(KT_METHOD_RAWINT4);
    x2_int8 = kt__moe_kernels_avx512_x2(KT_METHOD_AMXINT8);
    if (!x2_bf16 || !x2_fp8 || !x2_int4 || !x2_int8)
        return;
    k_bf16_x2 = (kt__moe_kernels){"amx-bf16x2", x2_bf16->act, x2_bf16->quant, gemm_bf16_x2,
                                  scratch_of(x2_bf16), NULL};
    k_fp8_x2 = (kt__moe_kernels){"amx-fp8-bf16x2", x2_fp8->act, x2_fp8->quant, gemm_fp8_x2,
                                 scratch_of(x2_fp8), NULL};
    k_int4_x2 = (kt__moe_kernels){"amx-int4-bf16x2", x2_int4->act, x2_int4->quant,
                                  gemm_int4_x2, scratch_of(x2_int4), NULL};
    k_int8_x2 = (kt__moe_kernels){"amx-int8w-bf16x2", x2_int8->act, x2_int8->quant,
                                  gemm_int8_x2, scratch_of(x2_int8), NULL};
}

/* The set of `method` among four (NULL: none, or the sets are not there). */
static const kt__moe_kernels *pick(int method, const kt__moe_kernels *bf16,
                                   const kt__moe_kernels *fp8, const kt__moe_kernels *int4,
                                   const kt__moe_kernels *int8)
{
    pthread_once(&init_once, init_sets);
    if (!bf16->gemm)
        return NULL;
    switch (method) {
    case KT_METHOD_BF16:
        return bf16;
    case KT_METHOD_FP8:
        return fp8;
    case KT_METHOD_RAWINT4:
        return int4;
    case KT_METHOD_AMXINT8:
        return int8;
    default:
        return NULL;
    }
}

/* Appends to buf (n bytes, used *at) what snprintf writes. */
static void prof_printf(char *buf, size_t n, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void prof_printf(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
    if (*at >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *at, n - *at, fmt, ap);
    va_end(ap);
    *at += w > 0 ? (size_t)w : 0;
}

/* KT_AMX_PROFILE's report (see there) into buf (n bytes), per backend call
 * (`calls`) and thread: each part's ms as mean [min max] over the threads that
 * ran, the tile calls and products, the calls by tokens; then cleared.
 * Returns 0 (nothing written) when the profile is off or empty. */
size_t AMX_FN(kt__moe_amx_profile)(char *buf, size_t n, double calls)
{
    static const char *part[AP_N] = {"i4 blocks",     "first rescale",
                                     "loop",          "rescale in it",
                                     "later token blocks in it",
                                     "first token blocks of cold blocks in it",
                                     "C tiles",       "epilogue"};
    if (!amx_profile_on || !n || calls <= 0)
        return 0;
    double hz = (double)(__rdtsc() - prof_tsc0) / (prof_now() - prof_sec0);
    size_t at = 0;
    buf[0] = 0;
    for (int set = 0; set < 2; set++) {
        int nth = 0;
        uint64_t hist[AP_HIST] = {0}, products = 0, cold = 0;
        for (int i = 0; i < AP_THREADS; i++)
            if (prof_tab[i][set].calls) {
                nth++;
                products += prof_tab[i][set].products;
                cold += prof_tab[i][set].cold;
                for (int h = 0; h < AP_HIST; h++)
                    hist[h] += prof_tab[i][set].hist[h];
            }
        if (!nth)
            continue;
        prof_printf(buf, n, &at, "%samx %s, ms per call and thread, mean [min max] of %d:",
                    at ? "\n" : "", set ? "down" : "gate/up", nth);
        for (int j = 0; j <= AP_N; j++) {
            double lo = 1e300, hi = 0, sum = 0;
            for (int i = 0; i < AP_THREADS; i++) {
                const amx_prof *p = &prof_tab[i][set];
                if (!p->calls)
                    continue;
                double v = (j < AP_N ? (double)p->cyc[j] * 1e3 / hz : (double)p->calls) / calls;
                sum += v;
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            prof_printf(buf, n, &at, " %s %.2f [%.2f %.2f]%s", j < AP_N ? part[j] : "tile calls",
                        sum / nth, lo, hi, j < AP_N ? "," : ";");
        }
        prof_printf(buf, n, &at, " %.1f M products, %.0f cold tile calls a call; calls by "
                    "tokens (16s):", (double)products / calls * 1e-6, (double)cold / calls);
        for (int h = 0; h < AP_HIST; h++)
            prof_printf(buf, n, &at, " %.0f", (double)hist[h] / calls);
    }
    memset(prof_tab, 0, sizeof prof_tab);
    return at < n ? at : n - 1;
}

#ifdef KT_AMX_EMULATE
/* Tests: INT4 on the tiles from now on by exact group folds (mode 1) or
 * rescaled rows (0: 128 inputs a load where they can be, the general code,
 * KT_AMX_LEAN=0; 2: 64 (g 32: 32), KT_AMX_EO128=0; 3, the default: as 0, grid
 * rows through decode_i4_lean / decode_i4_lean64 / decode_i4_lean32). */
void kt__amx_int4_mode_emulated(int mode);
void kt__amx_int4_mode_emulated(int mode)
{
    pthread_once(&init_once, init_sets);
    int4_exact = mode == 1;
    eo128_on = mode != 2;
    lean_on = mode == 3;
}
#endif

const kt__moe_kernels *AMX_FN(kt__moe_kernels_amx)(int method)
{
    return pick(method, &k_bf16, &k_fp8, &k_int4, &k_int8);
}

const kt__moe_kernels *AMX_FN(kt__moe_int4g_amx)(void)
{
    pthread_once(&init_once, init_sets);
    return k_int4g.gemm ? &k_int4g : NULL;
}

/* KT_MOE_PREC_BF16X2 on AMX-BF16 tiles (AMXINT4 of any group: the INT4 set). */
const kt__moe_kernels *AMX_FN(kt__moe_kernels_amx_x2)(int method)
{
    return pick(method == KT_METHOD_AMXINT4 ? KT_METHOD_RAWINT4 : method, &k_bf16_x2, &k_fp8_x2,
                &k_int4_x2, &k_int8_x2);
}

const kt__moe_packer *AMX_FN(kt__moe_packer_amx)(const kt__moe_kernels *k)
{
    /* a set not ours (AVX2 on a CPU without AVX-512): no packer, and no
     * init_sets, which is compiled for AVX-512 (SIGILL on a Zen 3) */
    if (k != &k_int8 && k != &k_int4 && k != &k_int4g)
        return NULL;
    pthread_once(&init_once, init_sets);
    if (!k_int8.gemm || !shared_pack)
        return NULL;
    if (k == &k_int8)
        return &p_int8;
    if (k == &k_int4 && !int4_bf16_tiles)
        return &p_int4;
    if (k == &k_int4g)
        return &p_int4g;
    return NULL;
}
