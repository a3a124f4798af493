/*
 * LLAMAFILE kernels: MoE experts stored as ggml (GGUF) block types, read in
 * place. The weight type travels in kt__wmat.type (each of gate / up / down
 * may differ, as in Q4_K_M files); the dot products are the ggml vec_dots of
 * cpu/{ref,avx2,avx512}/ggml_*.c, picked per call for the set's ISA level.
 *
 * Activation rows (KT__ACT_GGML + mask) hold one section per partner format
 * the backend's weight types need, each made once per token:
 *
 *   F32   float [K]          F16 / BF16 / F32 weights, and the staging of Q8_K
 *   Q8_0  [K/32] blocks      Q4_0, Q5_0, Q8_0, IQ4_NL
 *   Q8_1  [K/32] blocks      Q4_1, Q5_1
 *   Q8_K  [K/256] blocks     Q2_K..Q6_K, IQ4_XS
 *   cnt   int32 [K/256]      Q8_K blocks: elements written so far
 *   R40   4 arrays [rp]      Q4_0, IQ4_NL on AVX-512: the Q8_0 codes where a Q4_0 row's
 *                            bytes are (lo: the low nibble's input, hi: the
 *                            high one's; 0 under the scale bytes), then per
 *                            4-byte lane int32 -8 * (sum of the lane's codes)
 *                            and float the activation block's scale
 *   R80   3 arrays [rp]      Q8_0 on AVX-512: the same for a Q8_0 row (one code
 *                            array; -128 * sum: the weights go in as w + 128)
 *
 * (rp: the weight row's bytes rounded up to 64, plus 64.) R80 ends with the codes
 * in the Q80X order (the Q8_0 decode's from the load-time repack). With these the
 * AVX-512 kernel reads 64 weight bytes at a time as they lie in the file: no
 * per-block unpacking, every 4-byte lane belongs to one block. After the
 * arrays, per block of 32: int32 -8 (R40) / -128 (R80) * (sum of the block's
 * codes), then float the block's scale (the prefill GEMM's offset and scale).
 * The Q8_K section is followed by float d * (sum of the codes) and float d per
 * 32 inputs (for Q4_K's minimum term in the prefill GEMM and the Q4KX decode),
 * then the codes in the Q40X order (the Q4KX decode's), then int16 code sums per 32
 * (the AVX2 Q4KX decode's), then the AVX2 Q6KX decode's biases (the AVX2 set's rows
 * only; the other sets leave them as they were): per 32 inputs two
 * int16 pairs, lo (codes 0-15) then hi (16-31) in arrays of their own, pair slot k
 * -32 x the sum of the codes 4p + 2k, 4p + 2k + 1 (p < 4) of the half: what a
 * 4-byte lane's two int16 pair sums meet over a group's steps (the Q6_K offset).
 *
 * The backend writes an activation row in pieces ([k0, k1), 32-aligned, from
 * several threads). Q8_0 / Q8_1 blocks are whole in a piece; a Q8_K block (256)
 * spans pieces, so pieces go to the F32 staging first and the thread whose
 * piece completes a block (atomic count reaches 256) quantizes it and resets
 * the count for the next call.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kt_config.h"
#include "moe_kernels.h"
#include "ref/ggml_quants.h"

/* Tokens per expert from which the AVX-512 set repacks Q4_0 / Q8_0 / Q4_K
 * weights into int8 panels (below: the tiles read the weights as stored). */
#ifndef LF_PANEL_MIN
#define LF_PANEL_MIN 6
#endif

static size_t align64(size_t b)
{
    return (b + 63) & ~(size_t)63;
}

typedef struct act_layout {
    size_t f32, q80, q81, q8k, cnt, q8x, r40, r80, total; /* byte offsets; SIZE_MAX: absent */
} act_layout;

/* rp of the R40 / R80 sections: a row's bytes of the weight type (block of
 * bb bytes per 32 inputs) rounded up to 64, plus 64 so that a kernel's last
 * 64-byte load stays inside. */
static size_t raw_rp(int K, int bb)
{
    return align64((size_t)(K / 32) * (size_t)bb) + 64;
}

/* Bytes of one per-32-inputs array of int32 / float. */
static size_t blk_arr(int K)
{
    return align64((size_t)(K / 32) * 4);
}

/* The Q40X codes after R40's per-block arrays: per step of 4 blocks the low and
 * the high nibbles' codes, 64 bytes each, placed as kt__q40x_group says. */
static size_t x40_bytes(int K)
{
    return (size_t)(K / 32 + 3) / 4 * 128;
}

static act_layout layout(unsigned mask, int K)
{
    act_layout L;
    size_t o = 0;
    bool f32 = mask & (KT__GGML_ACT_F32 | KT__GGML_ACT_Q8K);
    L.f32 = f32 ? o : SIZE_MAX;
    o += f32 ? align64((size_t)K * 4) : 0;
    L.q80 = (mask & KT__GGML_ACT_Q80) ? o : SIZE_MAX;
    o += (mask & KT__GGML_ACT_Q80) ? align64((size_t)(K / 32) * sizeof(kt_block_q8_0)) : 0;
    L.q81 = (mask & KT__GGML_ACT_Q81) ? o : SIZE_MAX;
    o += (mask & KT__GGML_ACT_Q81) ? align64((size_t)(K / 32) * sizeof(kt_block_q8_1)) : 0;
    L.q8k = (mask & KT__GGML_ACT_Q8K) ? o : SIZE_MAX;
    o += (mask & KT__GGML_ACT_Q8K) ? align64((size_t)(K / 256) * sizeof(kt_block_q8_K)) : 0;
    L.cnt = (mask & KT__GGML_ACT_Q8K) ? o : SIZE_MAX;
    o += (mask & KT__GGML_ACT_Q8K) ? align64((size_t)(K / 256 + 1) * 4) : 0;
    L.q8x = (mask & KT__GGML_ACT_Q8K) ? o : SIZE_MAX;
    o += (mask & KT__GGML_ACT_Q8K)
             ? 4 * blk_arr(K) + x40_bytes(K) + align64((size_t)K / 16) /* ..., Q6KX biases */
             : 0;
    L.r40 = (mask & KT__GGML_ACT_R40) ? o : SIZE_MAX;
    o += (mask & KT__GGML_ACT_R40) ? 4 * raw_rp(K, 18) + 2 * blk_arr(K) + x40_bytes(K) : 0;
    L.r80 = (mask & KT__GGML_ACT_R80) ? o : SIZE_MAX;
    o += (mask & KT__GGML_ACT_R80) ? 3 * raw_rp(K, 34) + 2 * blk_arr(K) + x40_bytes(K) : 0;
    L.total = o ? o : 64;
    return L;
}

size_t kt__ggml_act_row_bytes(unsigned mask, int K)
{
    return layout(mask, K).total;
}

unsigned kt__ggml_act_section(int type)
{
    switch (type) {
    case KT_TYPE_F32: case KT_TYPE_F16: case KT_TYPE_BF16:
        return KT__GGML_ACT_F32;
    case KT_TYPE_Q4_0: case KT_TYPE_IQ4_NL: /* same 18-byte blocks */
        return KT__GGML_ACT_Q80 | KT__GGML_ACT_R40;
    case KT_TYPE_Q8_0:
        return KT__GGML_ACT_Q80 | KT__GGML_ACT_R80;
    case KT_TYPE_Q5_0: /* R40: its per-block offsets and scales (prefill panels) */
        return KT__GGML_ACT_Q80 | KT__GGML_ACT_R40;
    case KT_TYPE_Q4_1: case KT_TYPE_Q5_1:
        return KT__GGML_ACT_Q81;
    case KT_TYPE_Q2_K: case KT_TYPE_Q3_K: case KT_TYPE_Q4_K: case KT_TYPE_Q5_K:
    case KT_TYPE_Q6_K: case KT_TYPE_IQ4_XS:
        return KT__GGML_ACT_Q8K;
    default:
        return 0;
    }
}

/* R40 (q4) / R80 section of blocks [b0, b1) of nb from their Q8_0 blocks. */
static void raw_fill(const kt_block_q8_0 *q, int b0, int b1, int nb, bool q4, uint8_t *sec,
                     size_t rp)
{
    const int bb = q4 ? 18 : 34, n = q4 ? 16 : 32, mul = q4 ? -8 : -128;
    int8_t *lo = (int8_t *)sec, *hi = (int8_t *)(sec + rp);
    int32_t *bias = (int32_t *)(sec + (q4 ? 2 : 1) * rp);
    float *da = (float *)(sec + (q4 ? 3 : 2) * rp);
    int32_t *boff = (int32_t *)(sec + (q4 ? 4 : 3) * rp);
    float *bd = (float *)((uint8_t *)boff + blk_arr(nb * 32));
    for (int b = b0; b < b1; b++) {
        /* D[i]: the sum of the codes at row bytes base + 2 + 2i and + 1 (Q4_0:
         * the low and the high nibbles' inputs; Q8_0: the inputs); lanes hold
         * two such pairs (no chain of additions through the block) */
        int D[16], total = 0;
        for (int i = 0; i < n / 2; i++) {
            D[i] = q[b].qs[2 * i] + q[b].qs[2 * i + 1];
            if (q4)
                D[i] += q[b].qs[2 * i + 16] + q[b].qs[2 * i + 17];
            total += D[i];
        }
        boff[b] = mul * total;
        float d = kt__ggml_f16_to_f32(q[b].d);
        bd[b] = d;
        int base = b * bb;
        lo[base] = lo[base + 1] = 0;
        memcpy(lo + base + 2, q[b].qs, (size_t)n);
        if (q4) {
            hi[base] = hi[base + 1] = 0;
            memcpy(hi + base + 2, q[b].qs + 16, 16);
        }
        /* lanes starting inside the block (base is even): the first at base when
         * base % 4 == 0 (bytes 0, 1 the scale), else at base + 2; bytes past the
         * block are the next block's scale (no input) */
        for (int e0 = base % 4 ? 0 : -2; e0 < n; e0 += 4) {
            int i = e0 / 2; /* the lane's pairs i, i + 1 (those inside the block) */
            int sum = (i >= 0 ? D[i] : 0) + (i + 1 < n / 2 ? D[i + 1] : 0);
            bias[(base + 2 + e0) / 4] = mul * sum;
            da[(base + 2 + e0) / 4] = d;
        }
    }
    if (b1 == nb) { /* the tail past the row: no input */
        size_t end = (size_t)nb * bb, lane = (end + 3) / 4;
        memset(lo + end, 0, rp - end);
        if (q4)
            memset(hi + end, 0, rp - end);
        memset(bias + lane, 0, (rp / 4 - lane) * 4);
        memset(da + lane, 0, (rp / 4 - lane) * 4);
    }
}

/* The 32 codes qs of block b of nb in the Q40X order (x: the section's codes):
 * piece p (4 codes of the low nibbles, 4 of the high) to lane l of step s as
 * the weights' nibble bytes lie (moe_kernels.h). */
static void x40_put(const int8_t *qs, int b, int nb, uint8_t *x)
{
    int gb, g = kt__q40x_group(b, nb, &gb), per = 16 / g;
    for (int p = 0; p < 4; p++) {
        uint8_t *d = x + (size_t)(gb / 4 + p / per) * 128 + 4 * (b - gb + g * (p % per));
        memcpy(d, qs + 4 * p, 4);
        memcpy(d + 64, qs + 16 + 4 * p, 4);
    }
}

/* The Q40X codes of blocks [b0, b1) of nb; the steps' lanes past the row zero. */
static void x40_fill(const kt_block_q8_0 *q, int b0, int b1, int nb, uint8_t *x)
{
    for (int b = b0; b < b1; b++)
        x40_put(q[b].qs, b, nb, x);
    int gb, g = kt__q40x_group(nb - 1, nb, &gb);
    if (b1 == nb && nb - gb < g) /* the padded group: its missing blocks' lanes */
        for (int b = nb; b < gb + g; b++)
            for (int p = 0; p < 4; p++) {
                memset(x + (size_t)(gb / 4) * 128 + 4 * (b - gb + 4 * p), 0, 4);
                memset(x + (size_t)(gb / 4) * 128 + 64 + 4 * (b - gb + 4 * p), 0, 4);
            }
}

/* The Q80X codes of blocks [b0, b1) of nb: block b's codes 4p..4p+3 to lane l of
 * step s as the weights' lie (moe_kernels.h); the padded group's missing lanes zero. */
static void x80_fill(const kt_block_q8_0 *q, int b0, int b1, int nb, uint8_t *x)
{
    for (int b = b0; b < b1; b++) {
        int gb, g = kt__q40x_group(b, nb, &gb), per = 16 / g;
        for (int p = 0; p < 8; p++)
            memcpy(x + (size_t)(gb / 2 + p / per) * 64 + 4 * (b - gb + g * (p % per)),
                   q[b].qs + 4 * p, 4);
    }
    int gb, g = kt__q40x_group(nb - 1, nb, &gb);
    if (b1 == nb && nb - gb < g)
        for (int b = nb; b < gb + g; b++)
            for (int p = 0; p < 8; p++)
                memset(x + (size_t)(gb / 2 + p / 4) * 64 + 4 * (b - gb + 4 * (p % 4)), 0, 4);
}

#if KT_HAVE_ISA_AVX2
/* KT_LF_QUANT=scalar: the AVX2 set quantizes Q8_0 / Q8_1 / Q8_K with the scalar
 * reference quantizers, as before kt__lf_quant_q8_avx2 / kt__lf_quant_q8k_avx2 (the
 * same bytes; for A/B) */
static long parse_lf_quant(const char *e)
{
    return !(e && !strcmp(e, "scalar"));
}
static long lf_quant_vec_cache;

/* Whether the AVX2 set's quantizers are the vector ones. */
static bool lf_quant_vec(void)
{
    return env_knob(&lf_quant_vec_cache, "KT_LF_QUANT", parse_lf_quant);
}
#endif

int kt__lf_set_quant_avx2(int vec)
{
#if KT_HAVE_ISA_AVX2
    int old = lf_quant_vec();
    __atomic_store_n(&lf_quant_vec_cache, (long)(vec != 0) + 1, __ATOMIC_RELAXED);
    return old;
#else
    (void)vec;
    return 0;
#endif
}

/* Q8_0 / Q8_1 blocks of n inputs (the AVX-512 and AVX2 sets: the same bytes,
 * vectorised). */
static void quant_q8(kt_ggml_isa isa, kt_type t, const float *x, void *y, int n)
{
#if KT_HAVE_ISA_AVX512
    if (isa == KT_GGML_AVX512) {
        kt__lf_quant_q8_avx512(x, y, n / 32, t == KT_TYPE_Q8_1);
        return;
    }
#endif
#if KT_HAVE_ISA_AVX2
    if (isa == KT_GGML_AVX2 && lf_quant_vec()) {
        kt__lf_quant_q8_avx2(x, y, n / 32, t == KT_TYPE_Q8_1);
        return;
    }
#endif
    (void)isa;
    kt__ggml_traits(t)->from_float(x, y, n);
}

/* The Q6KX biases of Q8_K block q (layout above): lo[2 j + k] / hi[2 j + k] = -32 x
 * the sum of codes 4 p + 2 k, 4 p + 2 k + 1 (p < 4) of sub-block j's first / second
 * 16 codes. */
static void q6x_biases(const kt_block_q8_K *q, int16_t *lo, int16_t *hi)
{
    for (int j = 0; j < 8; j++)
        for (int half = 0; half < 2; half++)
            for (int k = 0; k < 2; k++) {
                int sum = 0;
                for (int p = 0; p < 4; p++)
                    sum += q->qs[32 * j + 16 * half + 4 * p + 2 * k] +
                           q->qs[32 * j + 16 * half + 4 * p + 2 * k + 1];
                (half ? hi : lo)[2 * j + k] = (int16_t)(-32 * sum);
            }
}

/* Writes elements [k0, k1) of a row of length K (k0, k1 multiples of 32 or
 * k1 == K) into every section of mask. */
static void quant_row(kt_ggml_isa isa, unsigned mask, const float *x, int k0, int k1, int K,
                      void *row)
{
    act_layout L = layout(mask, K);
    uint8_t *r = row;
    if (L.f32 != SIZE_MAX)
        memcpy((float *)(r + L.f32) + k0, x + k0, (size_t)(k1 - k0) * sizeof(float));
    int b0 = k0 / 32, b1 = k1 / 32; /* whole blocks of 32 in the piece */
    if (L.q80 != SIZE_MAX && b1 > b0)
        quant_q8(isa, KT_TYPE_Q8_0, x + 32 * b0, (kt_block_q8_0 *)(r + L.q80) + b0,
                 (b1 - b0) * 32);
    if (L.q81 != SIZE_MAX && b1 > b0)
        quant_q8(isa, KT_TYPE_Q8_1, x + 32 * b0, (kt_block_q8_1 *)(r + L.q81) + b0,
                 (b1 - b0) * 32);
    if (L.r40 != SIZE_MAX && b1 > b0) {
        raw_fill((const kt_block_q8_0 *)(r + L.q80), b0, b1, K / 32, true, r + L.r40,
                 raw_rp(K, 18));
        x40_fill((const kt_block_q8_0 *)(r + L.q80), b0, b1, K / 32,
                 r + L.r40 + 4 * raw_rp(K, 18) + 2 * blk_arr(K));
    }
    if (L.r80 != SIZE_MAX && b1 > b0) {
        raw_fill((const kt_block_q8_0 *)(r + L.q80), b0, b1, K / 32, false, r + L.r80,
                 raw_rp(K, 34));
        x80_fill((const kt_block_q8_0 *)(r + L.q80), b0, b1, K / 32,
                 r + L.r80 + 3 * raw_rp(K, 34) + 2 * blk_arr(K));
    }
    if (L.q8k != SIZE_MAX) {
        const float *stage = (const float *)(r + L.f32);
        _Atomic int *cnt = (_Atomic int *)(r + L.cnt);
        kt_block_q8_K *q = (kt_block_q8_K *)(r + L.q8k);
        int nfull = K / 256;
        /* count the piece into each Q8_K block it touches; the completer quantizes */
        for (int b = k0 / 256; b < nfull && 256 * b < k1; b++) {
            int lo = k0 > 256 * b ? k0 : 256 * b;
            int hi = k1 < 256 * (b + 1) ? k1 : 256 * (b + 1);
            int done = atomic_fetch_add_explicit(&cnt[b], hi - lo, memory_order_acq_rel) +
                       (hi - lo);
            if (done == 256) {
#if KT_HAVE_ISA_AVX512
                if (isa == KT_GGML_AVX512)
                    kt__lf_quant_q8k_avx512(stage + 256 * b, q + b, 1);
                else
#endif
#if KT_HAVE_ISA_AVX2
                if (isa == KT_GGML_AVX2 && lf_quant_vec())
                    kt__lf_quant_q8k_avx2(stage + 256 * b, q + b, 1);
                else
#endif
                    kt__ggml_traits(KT_TYPE_Q8_K)->from_float(stage + 256 * b, q + b, 256);
                float *ds = (float *)(r + L.q8x), *d32 = (float *)(r + L.q8x + blk_arr(K));
                int16_t *bs = (int16_t *)(r + L.q8x + 2 * blk_arr(K) + x40_bytes(K));
                int16_t *b6 = (int16_t *)((uint8_t *)bs + align64((size_t)K / 16));
                uint8_t *codes = r + L.q8x + 2 * blk_arr(K);
#if KT_HAVE_ISA_AVX2
                if (isa == KT_GGML_AVX2 && lf_quant_vec()) {
                    kt__lf_q8k_extras_avx2(q + b, 8 * b, K / 32, ds, d32, bs, codes, b6,
                                           b6 + blk_arr(K) / 2);
                    atomic_store_explicit(&cnt[b], 0, memory_order_relaxed);
                    continue;
                }
#endif
                if (isa == KT_GGML_AVX2) /* the only set whose decode reads Q6KX */
                    q6x_biases(&q[b], b6 + 16 * b, b6 + blk_arr(K) / 2 + 16 * b);
                for (int j = 0; j < 8; j++) {
                    /* the AVX2 Q4KX decode's int16 code sums per 32 */
                    bs[8 * b + j] = (int16_t)(q[b].bsums[2 * j] + q[b].bsums[2 * j + 1]);
                    ds[8 * b + j] = q[b].d * (float)(q[b].bsums[2 * j] + q[b].bsums[2 * j + 1]);
                    d32[8 * b + j] = q[b].d;
                    /* the Q4KX decode's codes (every set: one row layout) */
                    x40_put(q[b].qs + 32 * j, 8 * b + j, K / 32, codes);
                }
                atomic_store_explicit(&cnt[b], 0, memory_order_relaxed);
            }
        }
    }
}

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

/* The activation section and its block size for weight type t. */
static const uint8_t *act_section(unsigned mask, const void *row, int K, int t, size_t *bbytes,
                                  int *bsize)
{
    act_layout L = layout(mask, K);
    const uint8_t *r = row;
    switch (kt__ggml_act_section(t) & ~(KT__GGML_ACT_R40 | KT__GGML_ACT_R80)) {
    case KT__GGML_ACT_Q80: *bbytes = sizeof(kt_block_q8_0); *bsize = 32; return r + L.q80;
    case KT__GGML_ACT_Q81: *bbytes = sizeof(kt_block_q8_1); *bsize = 32; return r + L.q81;
    case KT__GGML_ACT_Q8K: *bbytes = sizeof(kt_block_q8_K); *bsize = 256; return r + L.q8k;
    default: *bbytes = 4; *bsize = 1; return r + L.f32;
    }
}

/* sum_k a[k] w[k] for a plain-float weight row (F32 / F16 / BF16), dequantized
 * 256 at a time. */
static float dot_float_row(const kt_ggml_traits *tr, const uint8_t *w, const float *a, int n)
{
    float buf[256];
    double acc = 0;
    for (int k = 0; k < n; k += 256) {
        int c = n - k < 256 ? n - k : 256;
        tr->to_float(w + (size_t)k * tr->block_bytes, buf, c);
        float s = 0;
        for (int j = 0; j < c; j++)
            s += buf[j] * a[k + j];
        acc += s;
    }
    return (float)acc;
}

/* The load-time repacks (moe_kernels.h): each block type that has one, the
 * repack type it is made into, and whether only the AVX2 decode reads it (the
 * AVX-512 set keeps its own kernels on the rows). Every type <-> repack question
 * is answered here. */
typedef struct lf_x {
    int type, xtype;
    bool avx2_only;
} lf_x;
static const lf_x lf_xs[] = {
    {KT_TYPE_Q4_0, KT__LF_Q40X, false},  {KT_TYPE_Q8_0, KT__LF_Q80X, false},
    {KT_TYPE_Q4_K, KT__LF_Q4KX, false},  {KT_TYPE_Q6_K, KT__LF_Q6KX, true},
    {KT_TYPE_IQ4_NL, KT__LF_IQ4NLX, true}, {KT_TYPE_Q5_K, KT__LF_Q5KX, true},
};

/* The entry of block type v (by_x: of repack type v); NULL: none. */
static const lf_x *lf_x_find(int v, bool by_x)
{
    for (size_t i = 0; i < sizeof lf_xs / sizeof *lf_xs; i++)
        if ((by_x ? lf_xs[i].xtype : lf_xs[i].type) == v)
            return &lf_xs[i];
    return NULL;
}

/* The block type a load-time repack (KT__LF_*X) was made from; 0: not one. */
static int x_stored(int xtype)
{
    const lf_x *x = lf_x_find(xtype, true);
    return x ? x->type : 0;
}

#if KT_HAVE_ISA_AVX512 || KT_HAVE_ISA_AVX2
/* KT_LF_XMAX unset: 0 (each set's own bound, lf_xmax) */
static long parse_lf_xmax(const char *e)
{
    return e && atoi(e) > 0 ? atoi(e) : 0;
}
#endif

#if KT_HAVE_ISA_AVX2
/* Tokens per expert from which the AVX2 set runs a block type's prefill as int8 panels
 * (kt__lf_gemm_panel_avx2); below, the decode tiles of its load-time repack (Q4_0, Q4_K,
 * Q5_K, Q6_K, Q8_0, IQ4_NL) or one vec_dot per (row, token). Session 15 (gguf24), one Zen 3
 * core, 64 x 2048 in L2, panels / tiles GMAC/s at 2..8, 10, 12, 16 tokens, two rounds at
 * load 10 (11:48-11:58): the first count from which the panels led in both rounds at every
 * larger count but one (Q4_K 16: 0.92 / 1.15): Q4_0 10 (1.11 / 1.09; 6-8: 0.89-1.03), Q4_K 8
 * (1.10 / 1.23), Q8_0 7 (1.01 / 1.04), Q6_K 8 (1.07 / 1.10), Q5_K 4 (1.13 / 1.17), IQ4_NL 5
 * (1.03 / 1.19); panels / vec_dots, one round: Q5_0, Q4_1, Q5_1 ahead from 2 (1.76-2.14x),
 * IQ4_XS from 3 (1.32x), Q3_K, Q2_K from 4 (1.42, 1.18x; 3: 1.06, 1.01). Until then 6 for
 * every type. Not measured from memory. */
static const struct {
    kt_type type;
    int min;
} avx2_panel_mins[] = {
    {KT_TYPE_Q4_0, 10}, {KT_TYPE_Q4_K, 8},   {KT_TYPE_Q5_K, 4},   {KT_TYPE_Q6_K, 8},
    {KT_TYPE_Q8_0, 7},  {KT_TYPE_IQ4_NL, 5}, {KT_TYPE_IQ4_XS, 3}, {KT_TYPE_Q3_K, 4},
    {KT_TYPE_Q2_K, 4},  {KT_TYPE_Q5_0, 2},   {KT_TYPE_Q4_1, 2},   {KT_TYPE_Q5_1, 2},
};

/* KT_LF_PANEL_MIN (for A/B): "N" sets every type's to N, "q4_0:4,q8_0:8" the named
 * types' (ggml names); unset: the table's (session 14 and before: 6 for every type). */
static int parse_panel_min(const char *e, const char *name, int dflt)
{
    if (!e || !*e)
        return dflt;
    if (!strchr(e, ':'))
        return atoi(e) > 0 ? atoi(e) : dflt;
    size_t len = strlen(name);
    for (const char *p = e; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, len) && p[len] == ':' && atoi(p + len + 1) > 0)
            return atoi(p + len + 1);
    return dflt;
}

/* The AVX2 panels' minimum tokens per expert for block type `type` (no panels: INT_MAX). */
static int avx2_panel_min(int type)
{
    static long cache[64]; /* by type - 100; value + 1, 0: not read yet */
    if (type < 100 || type >= 164)
        return INT_MAX;
    long v = __atomic_load_n(&cache[type - 100], __ATOMIC_RELAXED);
    if (!v) {
        int dflt = INT_MAX;
        for (size_t i = 0; i < sizeof avx2_panel_mins / sizeof *avx2_panel_mins; i++)
            if (avx2_panel_mins[i].type == type)
                dflt = avx2_panel_mins[i].min;
        v = dflt == INT_MAX ? INT_MAX
                            : parse_panel_min(getenv("KT_LF_PANEL_MIN"),
                                              kt__ggml_traits((kt_type)type)->name, dflt);
        v = v == INT_MAX ? v : v + 1;
        __atomic_store_n(&cache[type - 100], v, __ATOMIC_RELAXED);
    }
    return v == INT_MAX ? INT_MAX : (int)v - 1;
}
#endif

#if KT_HAVE_ISA_AVX512 || KT_HAVE_ISA_AVX2
/* The most tokens an expert for which a call of set isa reads the load-time repack of
 * block type `stored` (its decode tiles): KT_LF_XMAX (for measuring) when set, else one
 * fewer than the set's panels take. */
static int lf_xmax(kt_ggml_isa isa, int stored)
{
    static long xmax_cache;
    int x = (int)env_knob(&xmax_cache, "KT_LF_XMAX", parse_lf_xmax);
    if (x > 0)
        return x;
#if KT_HAVE_ISA_AVX2
    if (isa == KT_GGML_AVX2) {
        int m = avx2_panel_min(stored);
        return m == INT_MAX ? 256 : m - 1;
    }
#endif
    (void)isa, (void)stored;
    return LF_PANEL_MIN - 1;
}
#endif

#if KT_HAVE_ISA_AVX2
/* The types the AVX2 set's prefill runs as int8 panels (kt__lf_gemm_panel_avx2) */
static const kt_type avx2_panel_types[] = {KT_TYPE_Q4_0, KT_TYPE_Q4_K, KT_TYPE_Q5_K,
                                           KT_TYPE_Q6_K, KT_TYPE_Q8_0, KT_TYPE_IQ4_NL,
                                           KT_TYPE_IQ4_XS, KT_TYPE_Q3_K, KT_TYPE_Q2_K,
                                           KT_TYPE_Q5_0, KT_TYPE_Q4_1, KT_TYPE_Q5_1};

/* KT_LF_PANEL_EXT=0 (for A/B): the AVX2 panels sum each call's activation blocks
 * themselves, as before session 15, instead of reading the arrays made at quantization */
static long parse_on(const char *e)
{
    return !(e && !strcmp(e, "0"));
}

/* KT_LF_AVX2_PANEL (for A/B): which of them do, as a mask of bits type - 100; the
 * others' prefill is one vec_dot per (row, token). Unset, empty or 1: all; 0: none;
 * else a list of ggml names ("q4_0,q4_K,q8_0,q6_K": session 12's, before Q5_K's and
 * IQ4_NL's; "q4_0,q4_K,q5_K,q6_K,q8_0,iq4_nl": session 13's, before IQ4_XS's, Q3_K's,
 * Q2_K's, Q5_0's, Q4_1's and Q5_1's). */
static long parse_avx2_panel(const char *e)
{
    long mask = 0;
    for (size_t i = 0; i < sizeof avx2_panel_types / sizeof *avx2_panel_types; i++) {
        const char *name = kt__ggml_traits(avx2_panel_types[i])->name;
        size_t len = strlen(name);
        bool on = !e || !*e || !strcmp(e, "1");
        for (const char *p = e; !on && p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
            on = !strncmp(p, name, len) && (p[len] == ',' || !p[len]);
        if (on)
            mask |= 1L << (avx2_panel_types[i] - 100);
    }
    return mask;
}
#endif

/* C[m][n - n0] = sum_{k0 <= k < k1} a_m[k] W[n][k], one vec_dot per (row, token);
 * rows outer so a weight row is read from memory once for all M tokens. */
static void gemm_ggml(unsigned mask, kt_ggml_isa isa, const kt__wmat *W, int n0, int n1, int k0,
                      int k1, const void *A, size_t a_stride, const int32_t *rows, int M,
                      float *C, int ldc, void *scratch)
{
    const lf_x *xr = lf_x_find(W->type, true);
    if (xr) { /* decode from the repacked tiles, else the rows they were made from */
        int stored = xr->type;
#if KT_HAVE_ISA_AVX512 || KT_HAVE_ISA_AVX2
        act_layout L = layout(mask, W->cols);
        /* the activation section the repack reads, and its codes after the
         * per-block arrays (moe_kernels.h) */
        bool r40 = stored == KT_TYPE_Q4_0 || stored == KT_TYPE_IQ4_NL;
        size_t sec = r40 ? L.r40 : stored == KT_TYPE_Q8_0 ? L.r80 : L.q8x;
        size_t x = sec + (r40                      ? 4 * raw_rp(W->cols, 18)
                          : stored == KT_TYPE_Q8_0 ? 3 * raw_rp(W->cols, 34)
                                                   : 0);
        int xmax = lf_xmax(isa, stored);
        bool tiles = !xr->avx2_only || isa == KT_GGML_AVX2;
        if (isa >= KT_GGML_AVX2 && M <= xmax && M <= 256 && k0 == 0 && k1 == W->cols &&
            sec != SIZE_MAX && tiles) {
            const void *act[256];
            for (int m = 0; m < M; m++)
                act[m] = (const uint8_t *)arow(A, a_stride, rows, m) + x;
#if KT_HAVE_ISA_AVX512
            if (isa == KT_GGML_AVX512) {
                kt__lf_gemm_q40x_avx512(W, n0, n1, act, blk_arr(W->cols), M, C, ldc);
                return;
            }
#endif
#if KT_HAVE_ISA_AVX2
            if (isa == KT_GGML_AVX2) {
                kt__lf_gemm_x_avx2(W, n0, n1, act, blk_arr(W->cols), M, C, ldc);
                return;
            }
#endif
        }
#endif
        kt__wmat src = {W->scale, NULL, W->rows, W->cols, stored, 0, NULL};
        gemm_ggml(mask, isa, &src, n0, n1, k0, k1, A, a_stride, rows, M, C, ldc, scratch);
        return;
    }
    const kt_ggml_traits *tr = kt__ggml_traits((kt_type)W->type);
    size_t wrow = kt__ggml_row_bytes((kt_type)W->type, W->cols);
    size_t wofs = (size_t)(k0 / (int)tr->block_size) * tr->block_bytes;
    size_t abytes;
    int absize;
    /* Zen 4 measurement (L2-resident rows of 2048): the AVX2 vec_dots of Q8_0
     * and the K types beat the AVX-512 ones (1.7 vs 2.1 ns per Q8_0 block,
     * 25 vs 36 ns per Q4_K block); Q4_0's and Q6_K's AVX-512 ones win (2.8 vs
     * 3.2, 8.5 vs 13.6); the other types have AVX2 ones only */
    kt_ggml_isa use = isa;
    if (isa == KT_GGML_AVX512 && (W->type == KT_TYPE_Q8_0 || W->type == KT_TYPE_Q4_K))
        use = KT_GGML_AVX2;
    kt_ggml_vec_dot_fn dot = kt__ggml_vec_dot_for((kt_type)W->type, use);
    bool plain = kt__ggml_act_section(W->type) == KT__GGML_ACT_F32;
#if KT_HAVE_ISA_AVX512
    act_layout L = layout(mask, W->cols);
    if (isa == KT_GGML_AVX512 && M >= LF_PANEL_MIN && M <= 256 && scratch &&
        (((W->type == KT_TYPE_Q4_0 || W->type == KT_TYPE_IQ4_NL || W->type == KT_TYPE_Q5_0) &&
          L.r40 != SIZE_MAX) ||
         W->type == KT_TYPE_Q4_1 || W->type == KT_TYPE_Q5_1 ||
         (W->type == KT_TYPE_Q8_0 && L.r80 != SIZE_MAX) || W->type == KT_TYPE_Q4_K ||
         W->type == KT_TYPE_Q5_K || W->type == KT_TYPE_Q6_K || W->type == KT_TYPE_Q3_K ||
         W->type == KT_TYPE_Q2_K || W->type == KT_TYPE_IQ4_XS)) {
        /* prefill: repacked int8 panels, a register-blocked GEMM */
        const void *act[256], *ext[256];
        bool q4 = W->type == KT_TYPE_Q4_0 || W->type == KT_TYPE_IQ4_NL ||
                  W->type == KT_TYPE_Q5_0;
        bool q81 = W->type == KT_TYPE_Q4_1 || W->type == KT_TYPE_Q5_1; /* no ext arrays */
        size_t x = q4                        ? L.r40 + 4 * raw_rp(W->cols, 18)
                   : W->type == KT_TYPE_Q8_0 ? L.r80 + 3 * raw_rp(W->cols, 34)
                                             : L.q8x; /* Q4_K, Q5_K; Q6_K: unused */
        size_t c = kt__ggml_act_section(W->type) == KT__GGML_ACT_Q8K ? L.q8k
                   : q81                                                ? L.q81
                                                                        : L.q80;
        for (int m = 0; m < M; m++) {
            const uint8_t *r = arow(A, a_stride, rows, m);
            act[m] = r + c;
            ext[m] = q81 ? NULL : r + x;
        }
        kt__lf_gemm_panel_avx512(W->type, W->w, wrow, n0, n1, k0, k1, act, q81 ? NULL : ext,
                                 blk_arr(W->cols), M, C, ldc, scratch);
        return;
    }
    size_t raw = W->type == KT_TYPE_Q4_0 || W->type == KT_TYPE_IQ4_NL ? L.r40
                 : W->type == KT_TYPE_Q8_0                            ? L.r80
                                                                      : SIZE_MAX;
    if (isa == KT_GGML_AVX512 && raw != SIZE_MAX && M <= 256) {
        /* 64 weight bytes at a time against the R40 / R80 sections */
        const void *act[256];
        for (int m = 0; m < M; m++)
            act[m] = (const uint8_t *)arow(A, a_stride, rows, m) + raw;
        kt__lf_gemm_raw_avx512(W->type, W->w, wrow, n0, n1, k0 / 32, k1 / 32, act,
                               raw_rp(W->cols, W->type == KT_TYPE_Q8_0 ? 34 : 18), M, C, ldc);
        return;
    }
    if (isa == KT_GGML_AVX512 && M <= 256 &&
        (W->type == KT_TYPE_Q4_1 || W->type == KT_TYPE_Q5_0 || W->type == KT_TYPE_Q5_1)) {
        /* 4 blocks of 32 at a time, gathered in registers */
        const void *act[256];
        for (int m = 0; m < M; m++)
            act[m] = act_section(mask, arow(A, a_stride, rows, m), W->cols, W->type, &abytes,
                                 &absize);
        kt__lf_gemm_q5_avx512(W->type, W->w, wrow, n0, n1, k0 / 32, k1 / 32, act, M, C, ldc);
        return;
    }
    if (isa == KT_GGML_AVX512 && M <= 256 &&
        (W->type == KT_TYPE_Q4_K || W->type == KT_TYPE_Q5_K || W->type == KT_TYPE_Q6_K ||
         W->type == KT_TYPE_IQ4_XS || W->type == KT_TYPE_Q2_K || W->type == KT_TYPE_Q3_K)) {
        const void *act[256];
        for (int m = 0; m < M; m++)
            act[m] = act_section(mask, arow(A, a_stride, rows, m), W->cols, W->type, &abytes,
                                 &absize);
        kt__lf_gemm_k_avx512(W->type, W->w, wrow, n0, n1, k0 / 256, k1 / 256, act, M, C, ldc);
        return;
    }
#endif
#if KT_HAVE_ISA_AVX2
    static long avx2_panel_cache;
    if (isa == KT_GGML_AVX2 && M >= avx2_panel_min(W->type) && M <= 256 && scratch &&
        W->type >= 100 &&
        W->type < 163 &&
        (env_knob(&avx2_panel_cache, "KT_LF_AVX2_PANEL", parse_avx2_panel) >> (W->type - 100) &
         1)) {
        /* prefill: int8 panels, vpmaddubsw into exact block sums; the per-block arrays
         * the quantizer made once per token (R40 / R80 / Q8K's) where the rows have them */
        act_layout La = layout(mask, W->cols);
        unsigned sec = kt__ggml_act_section(W->type);
        size_t x = (sec & KT__GGML_ACT_R40) && La.r40 != SIZE_MAX
                       ? La.r40 + 4 * raw_rp(W->cols, 18)
                   : (sec & KT__GGML_ACT_R80) && La.r80 != SIZE_MAX
                       ? La.r80 + 3 * raw_rp(W->cols, 34)
                   : sec & KT__GGML_ACT_Q8K ? La.q8x
                                            : SIZE_MAX;
        static long ext_cache;
        if (!env_knob(&ext_cache, "KT_LF_PANEL_EXT", parse_on))
            x = SIZE_MAX;
        const void *act[256], *ext[256];
        for (int m = 0; m < M; m++) {
            const uint8_t *r = arow(A, a_stride, rows, m);
            act[m] = act_section(mask, r, W->cols, W->type, &abytes, &absize);
            ext[m] = x == SIZE_MAX ? NULL : r + x;
        }
        kt__lf_gemm_panel_avx2(W->type, W->w, wrow, n0, n1, k0, k1, act,
                               x == SIZE_MAX ? NULL : ext, blk_arr(W->cols), M, C, ldc, scratch);
        return;
    }
#endif
    for (int n = n0; n < n1; n++) {
        const uint8_t *w = (const uint8_t *)W->w + (size_t)n * wrow + wofs;
        for (int m = 0; m < M; m++) {
            const uint8_t *a = act_section(mask, arow(A, a_stride, rows, m), W->cols, W->type,
                                           &abytes, &absize);
            a += (size_t)(k0 / absize) * abytes;
            C[(size_t)m * ldc + (n - n0)] =
                plain ? dot_float_row(tr, w, (const float *)a, k1 - k0)
                      : dot(k1 - k0, w, a);
        }
    }
}

/* Q4_0 / IQ4_NL / Q8_0 into Q40X / IQ4NLX / Q80X (xtype; moe_kernels.h): block b's
 * pieces p of 4 bytes (Q4_0, IQ4_NL: 4 of nibble bytes; Q8_0: 8 of codes, stored + 128)
 * to lane l of step s. */
static kt__wmat x_repack(const kt__wmat *W, void *dst, int xtype)
{
    const bool q8 = xtype == KT__LF_Q80X;
    const int K = W->cols, nb = K / 32, np = q8 ? 8 : 4;
    const size_t wrow = kt__ggml_row_bytes(q8 ? KT_TYPE_Q8_0 : KT_TYPE_Q4_0, K);
    const size_t bb = q8 ? sizeof(kt_block_q8_0) : sizeof(kt_block_q4_0); /* d, then qs */
    const size_t tb = kt__lf_x_tile_bytes(q8 ? KT__LF_Q80X : KT__LF_Q40X, K);
    const uint8_t flip = q8 ? 0x80 : 0;
    memset(dst, 0, (size_t)(W->rows + 3) / 4 * tb);
    for (int n = 0; n < W->rows; n++) {
        const uint8_t *row = (const uint8_t *)W->w + n * wrow;
        uint8_t *t = (uint8_t *)dst + (size_t)(n / 4) * tb;
        size_t go = 0; /* the group's offset in the tile */
        for (int b0 = 0; b0 < nb;) {
            int gb, g = kt__q40x_group(b0, nb, &gb), per = 16 / g;
            for (int b = gb; b < gb + g && b < nb; b++) {
                const uint8_t *blk = row + b * bb;
                for (int p = 0; p < np; p++)
                    for (int i = 0; i < 4; i++)
                        t[go + (size_t)(p / per) * 256 + (n % 4) * 64 +
                          4 * (b - gb + g * (p % per)) + i] = blk[2 + 4 * p + i] ^ flip;
                memcpy(t + go + (size_t)g * 16 * np + (n % 4) * 2 * g + 2 * (b - gb), blk, 2);
            }
            go += q8 ? kt__q80x_group_bytes(g) : kt__q40x_group_bytes(g);
            b0 = gb + g;
        }
    }
    return (kt__wmat){dst, W->w, W->rows, K, xtype, 0, NULL};
}

kt__wmat kt__lf_q40x_repack(const kt__wmat *W, void *dst)
{
    return x_repack(W, dst, KT__LF_Q40X);
}

/* Q4_K into Q4KX (moe_kernels.h): sub-block b (block b / 8, j = b % 8) holds the
 * low (j even) or high nibbles of qs bytes 32 (j / 2) .. + 31; its scale and min go
 * to the group's pair arrays, its block's (d, dmin) to the group's factors. */
static kt__wmat q4kx_repack(const kt__wmat *W, void *dst)
{
    const int K = W->cols, nb = K / 32;
    const size_t wrow = kt__ggml_row_bytes(KT_TYPE_Q4_K, K), tb = kt__q4kx_tile_bytes(K);
    memset(dst, 0, kt__lf_repack_bytes(KT_TYPE_Q4_K, W->rows, K));
    for (int n = 0; n < W->rows; n++) {
        const kt_block_q4_K *q = (const kt_block_q4_K *)((const uint8_t *)W->w + n * wrow);
        uint8_t *t = (uint8_t *)dst + (size_t)(n / 4) * tb;
        const int r = n % 4, h = r / 2;
        for (int b = 0; b < nb; b++) {
            int gb = b & ~15, g = nb - gb >= 16 ? 16 : 8, per = 16 / g, j = b % 8, x = b - gb;
            int sc, mn;
            const kt_block_q4_K *k = q + b / 8;
            uint8_t *grp = t + (size_t)gb * 72, *meta = grp + (size_t)g * 64, code[32];
            for (int e = 0; e < 32; e++)
                code[e] = (uint8_t)(k->qs[32 * (j / 2) + e] >> (4 * (j % 2)) & 15);
            for (int p = 0; p < 4; p++)
                for (int i = 0; i < 4; i++)
                    grp[(p / per) * 256 + r * 64 + 4 * (x + g * (p % per)) + i] =
                        (uint8_t)(code[4 * p + i] | code[4 * p + i + 16] << 4);
            kt__ggml_k4_scale_min(j, k->scales, &sc, &mn);
            const int pos = 8 * (x / 4) + 4 * (r % 2) + x % 4; /* in the pair's 2 g */
            meta[(size_t)h * 2 * g + pos] = (uint8_t)(sc | (mn >> 4) << 6);
            meta[(size_t)g * 4 + pos] |= (uint8_t)((mn & 15) << (4 * h));
            if (j == 0) /* (d, dmin) of the block */
                memcpy(meta + (size_t)g * 6 + ((size_t)r * (g / 8) + (size_t)(x / 8)) * 4, &k->d,
                       4);
        }
    }
    return (kt__wmat){dst, W->w, W->rows, K, KT__LF_Q4KX, 0, NULL};
}

/* Q6_K element e's code plus 32 (0..63): in each half h (128 elements), element
 * 32 s + l has its low 4 bits in ql[64 h + l + 32 (s & 1)] (high nibble when s >= 2)
 * and its top 2 bits in qh[32 h + l] bits 2 s. */
static int q6_code(const kt_block_q6_K *k, int e)
{
    int h = e / 128, s = e % 128 / 32, l = e % 32;
    return (k->ql[64 * h + l + 32 * (s & 1)] >> (4 * (s >> 1)) & 15) |
           (k->qh[32 * h + l] >> (2 * s) & 3) << 4;
}

/* Q6_K into Q6KX (moe_kernels.h): sub-block b's lo / hi code i (i < 16, inputs
 * 32 (b % 8) + i and + 16 + i of block b / 8) to the step and byte where the
 * Q40X order puts the activation's lo / hi code i of block b. */
static kt__wmat q6kx_repack(const kt__wmat *W, void *dst)
{
    const int K = W->cols, nb = K / 32;
    const size_t wrow = kt__ggml_row_bytes(KT_TYPE_Q6_K, K), tb = kt__q6kx_tile_bytes(K);
    memset(dst, 0, kt__lf_repack_bytes(KT_TYPE_Q6_K, W->rows, K));
    for (int n = 0; n < W->rows; n++) {
        const kt_block_q6_K *q = (const kt_block_q6_K *)((const uint8_t *)W->w + n * wrow);
        uint8_t *t = (uint8_t *)dst + (size_t)(n / 4) * tb;
        int r = n % 4;
        for (int b = 0; b < nb; b++) {
            int gb, g = kt__q40x_group(b, nb, &gb), per = 16 / g, j = b % 8, S = g / 4;
            const kt_block_q6_K *k = q + b / 8;
            uint8_t *grp = t + (size_t)gb * 104;
            for (int p = 0; p < 4; p++) /* piece p: lo / hi codes 4p..4p+3 */
                for (int i = 0; i < 4; i++) {
                    int lo = q6_code(k, 32 * j + 4 * p + i);
                    int hi = q6_code(k, 32 * j + 16 + 4 * p + i);
                    int pos = 4 * (b - gb + g * (p % per)) + i; /* byte of the step's 64 */
                    uint8_t *st = grp + ((size_t)r * S + (size_t)(p / per)) * 96;
                    st[pos] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                    st[64 + pos % 32] |= (uint8_t)((lo >> 4) << (2 * (pos / 32)) |
                                                   (hi >> 4) << (4 + 2 * (pos / 32)));
                }
            /* g 16: block x's scales at x with bits 2 and 3 swapped */
            int x = b - gb, at = g == 16 ? (x & 3) | (x & 4) << 1 | (x & 8) >> 1 : x;
            grp[(size_t)g * 96 + (size_t)r * g + at] = (uint8_t)k->scales[2 * j];
            grp[(size_t)g * 100 + (size_t)r * g + at] = (uint8_t)k->scales[2 * j + 1];
            if (j == 0) /* d of the block */
                memcpy(t + (size_t)nb * 104 + (size_t)(b / 8) * 8 + 2 * r, &k->d, 2);
        }
    }
    return (kt__wmat){dst, W->w, W->rows, K, KT__LF_Q6KX, 0, NULL};
}

/* Q5_K into Q5KX (moe_kernels.h): Q4KX's nibble bytes, scales and mins of the codes'
 * low 4 bits (code e of sub-block j: qs[32 (j / 2) + e] >> 4 (j % 2), its 5th bit
 * qh[e] bit j), the 5th bits in their own plane after a group's steps. */
static kt__wmat q5kx_repack(const kt__wmat *W, void *dst)
{
    const int K = W->cols, nb = K / 32;
    const size_t wrow = kt__ggml_row_bytes(KT_TYPE_Q5_K, K), tb = kt__q5kx_tile_bytes(K);
    memset(dst, 0, kt__lf_repack_bytes(KT_TYPE_Q5_K, W->rows, K));
    for (int n = 0; n < W->rows; n++) {
        const kt_block_q5_K *q = (const kt_block_q5_K *)((const uint8_t *)W->w + n * wrow);
        uint8_t *t = (uint8_t *)dst + (size_t)(n / 4) * tb, *dd = t + (size_t)nb * 88;
        int r = n % 4;
        for (int b = 0; b < nb; b++) {
            int gb = b & ~15, g = nb - gb >= 16 ? 16 : 8, per = 16 / g, j = b % 8, sc, mn;
            const kt_block_q5_K *k = q + b / 8;
            uint8_t *grp = t + (size_t)gb * 88, *bits = grp + (size_t)g * 64, code[32];
            for (int e = 0; e < 32; e++)
                code[e] = (uint8_t)((k->qs[32 * (j / 2) + e] >> (4 * (j % 2)) & 15) |
                                    (k->qh[e] >> j & 1) << 4);
            for (int p = 0; p < 4; p++)
                for (int i = 0; i < 4; i++) {
                    int lo = code[4 * p + i], hi = code[4 * p + i + 16];
                    int step = p / per, pos = 4 * (b - gb + g * (p % per)) + i;
                    int h = pos / 32, L = pos % 32 / 16;
                    grp[(size_t)step * 256 + (size_t)r * 64 + pos] =
                        (uint8_t)((lo & 15) | (hi & 15) << 4);
                    bits[(size_t)(4 * step + r) * 16 + pos % 16] |=
                        (uint8_t)((lo >> 4) << (2 * h + L) | (hi >> 4) << (4 + 2 * h + L));
                }
            kt__ggml_k4_scale_min(j, k->scales, &sc, &mn);
            grp[(size_t)g * 80 + (size_t)r * g + (b - gb)] = (uint8_t)sc;
            grp[(size_t)g * 84 + (size_t)r * g + (b - gb)] = (uint8_t)mn;
            if (j == 0) /* (d, dmin) of the block */
                memcpy(dd + (size_t)r * (nb / 2) + 4 * (b / 8), &k->d, 4);
        }
    }
    return (kt__wmat){dst, W->w, W->rows, K, KT__LF_Q5KX, 0, NULL};
}

size_t kt__lf_repack_bytes(int type, int rows, int K)
{
    const lf_x *x = lf_x_find(type, false);
    if (!x || K <= 0 || K % (int)kt__ggml_traits((kt_type)type)->block_size)
        return 0;
    return (size_t)(rows + 3) / 4 * kt__lf_x_tile_bytes(x->xtype, K);
}

kt__wmat kt__lf_repack(const kt__wmat *W, void *dst)
{
    const lf_x *x = lf_x_find(W->type, false);
    const int xtype = x ? x->xtype : KT__LF_Q40X;
    return xtype == KT__LF_Q4KX   ? q4kx_repack(W, dst)
           : xtype == KT__LF_Q5KX ? q5kx_repack(W, dst)
           : xtype == KT__LF_Q6KX ? q6kx_repack(W, dst)
                                  : x_repack(W, dst, xtype);
}

/* Level 3, the AMX set: the AVX-512 set, but calls of at least KT_LF_AMX_MIN tokens
 * an expert on Q4_0 / Q8_0 / IQ4_NL / Q4_K / Q5_K / Q6_K weights (or their load-time
 * repacks' rows) take the AMX-INT8 tiles (kt__lf_gemm_amx). Only picked where the
 * CPU has the tiles and the process their permission (lib/moe: pick_llamafile). */
#define LF_AMX_MIN 16
/* the K types from 8 (their super-block path folds once per 256 inputs: ahead of the
 * AVX-512 panels from 8 tokens on one core, docs/bench/xeon2-gpre-1620-min8.txt) */
#define LF_AMX_MIN_K 8
#if KT_HAVE_ISA_AMX
static long parse_amx_min(const char *e) /* unset: 0, each type's default */
{
    return e && atoi(e) > 0 ? atoi(e) : 0;
}
static long amx_min_cache;
#endif

/* The block type and rows an AMX call of M tokens would read, or 0 (none). */
static int lf_amx_type(const kt__wmat *W, int k0, int k1, int M, const void **w)
{
#if KT_HAVE_ISA_AMX
    int type = x_stored(W->type) ? x_stored(W->type) : W->type;
    *w = x_stored(W->type) ? W->scale : W->w;
    long min = env_knob(&amx_min_cache, "KT_LF_AMX_MIN", parse_amx_min);
    if (!min) /* the AMX set's Q8_K partners are its K types */
        min = kt__ggml_act_section(type) == KT__GGML_ACT_Q8K ? LF_AMX_MIN_K : LF_AMX_MIN;
    if (M < min || M > KT__LF_AMX_MMAX || k1 - k0 > KT__LF_AMX_KMAX || !kt__lf_amx_type(type))
        return 0;
    return type;
#else
    (void)W, (void)k0, (void)k1, (void)M, (void)w;
    return 0;
#endif
}

/* The AMX set's gemm where it takes the call (true), else false. */
static bool lf_amx(unsigned mask, const kt__wmat *W, int n0, int n1, int k0, int k1,
                   const void *A, size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                   void *scratch)
{
#if KT_HAVE_ISA_AMX
    const void *w;
    int type = lf_amx_type(W, k0, k1, M, &w);
    act_layout L = layout(mask, W->cols);
    size_t q = kt__ggml_act_section(type) == KT__GGML_ACT_Q8K ? L.q8k : L.q80;
    if (!type || !scratch || q == SIZE_MAX)
        return false;
    kt__lf_gemm_amx(type, w, kt__ggml_row_bytes((kt_type)type, W->cols), n0, n1, k0, k1, A,
                    a_stride, rows, q, M, C, ldc, scratch);
    return true;
#else
    (void)mask, (void)W, (void)n0, (void)n1, (void)k0, (void)k1, (void)A, (void)a_stride;
    (void)rows, (void)M, (void)C, (void)ldc, (void)scratch;
    return false;
#endif
}

/* One kernel set per (ISA level, section mask): the quant and gemm function
 * pointers carry no context, so each pair gets its own small wrappers. */
#define LF_SET(ISA, MASK)                                                                      \
    static void quant_##ISA##_##MASK(const float *x, int k0, int k1, int K, void *row)        \
    {                                                                                          \
        quant_row(ISA == 3 ? 2 : ISA, MASK, x, k0, k1, K, row);                                \
    }                                                                                          \
    static void gemm_##ISA##_##MASK(const kt__wmat *W, int n0, int n1, int k0, int k1,        \
                                    const void *A, size_t s, const int32_t *r, int M,          \
                                    float *C, int ldc, void *scratch)                          \
    {                                                                                          \
        if (ISA == 3 && lf_amx(MASK, W, n0, n1, k0, k1, A, s, r, M, C, ldc, scratch))         \
            return;                                                                            \
        gemm_ggml(MASK, ISA == 3 ? 2 : ISA, W, n0, n1, k0, k1, A, s, r, M, C, ldc, scratch);  \
    }
#define LF_ISA(ISA)                                                                            \
    LF_SET(ISA, 1) LF_SET(ISA, 2) LF_SET(ISA, 3) LF_SET(ISA, 4) LF_SET(ISA, 5) LF_SET(ISA, 6) \
    LF_SET(ISA, 7) LF_SET(ISA, 8) LF_SET(ISA, 9) LF_SET(ISA, 10) LF_SET(ISA, 11)              \
    LF_SET(ISA, 12) LF_SET(ISA, 13) LF_SET(ISA, 14) LF_SET(ISA, 15)
/* the AVX2 and AVX-512 sets also read the R40 / R80 sections (mask bits 16 and 32) */
LF_SET(1, 16) LF_SET(1, 17) LF_SET(1, 18) LF_SET(1, 19) LF_SET(1, 20) LF_SET(1, 21)
LF_SET(1, 22) LF_SET(1, 23) LF_SET(1, 24) LF_SET(1, 25) LF_SET(1, 26) LF_SET(1, 27)
LF_SET(1, 28) LF_SET(1, 29) LF_SET(1, 30) LF_SET(1, 31) LF_SET(1, 32) LF_SET(1, 33)
LF_SET(1, 34) LF_SET(1, 35) LF_SET(1, 36) LF_SET(1, 37) LF_SET(1, 38) LF_SET(1, 39)
LF_SET(1, 40) LF_SET(1, 41) LF_SET(1, 42) LF_SET(1, 43) LF_SET(1, 44) LF_SET(1, 45)
LF_SET(1, 46) LF_SET(1, 47) LF_SET(1, 48) LF_SET(1, 49) LF_SET(1, 50) LF_SET(1, 51)
LF_SET(1, 52) LF_SET(1, 53) LF_SET(1, 54) LF_SET(1, 55) LF_SET(1, 56) LF_SET(1, 57)
LF_SET(1, 58) LF_SET(1, 59) LF_SET(1, 60) LF_SET(1, 61) LF_SET(1, 62) LF_SET(1, 63)
LF_SET(2, 16) LF_SET(2, 17) LF_SET(2, 18) LF_SET(2, 19) LF_SET(2, 20) LF_SET(2, 21)
LF_SET(2, 22) LF_SET(2, 23) LF_SET(2, 24) LF_SET(2, 25) LF_SET(2, 26) LF_SET(2, 27)
LF_SET(2, 28) LF_SET(2, 29) LF_SET(2, 30) LF_SET(2, 31) LF_SET(2, 32) LF_SET(2, 33)
LF_SET(2, 34) LF_SET(2, 35) LF_SET(2, 36) LF_SET(2, 37) LF_SET(2, 38) LF_SET(2, 39)
LF_SET(2, 40) LF_SET(2, 41) LF_SET(2, 42) LF_SET(2, 43) LF_SET(2, 44) LF_SET(2, 45)
LF_SET(2, 46) LF_SET(2, 47) LF_SET(2, 48) LF_SET(2, 49) LF_SET(2, 50) LF_SET(2, 51)
LF_SET(2, 52) LF_SET(2, 53) LF_SET(2, 54) LF_SET(2, 55) LF_SET(2, 56) LF_SET(2, 57)
LF_SET(2, 58) LF_SET(2, 59) LF_SET(2, 60) LF_SET(2, 61) LF_SET(2, 62) LF_SET(2, 63)
LF_ISA(0)
LF_ISA(1)
LF_ISA(2)
#if KT_HAVE_ISA_AMX
LF_ISA(3)
LF_SET(3, 16) LF_SET(3, 17) LF_SET(3, 18) LF_SET(3, 19) LF_SET(3, 20) LF_SET(3, 21)
LF_SET(3, 22) LF_SET(3, 23) LF_SET(3, 24) LF_SET(3, 25) LF_SET(3, 26) LF_SET(3, 27)
LF_SET(3, 28) LF_SET(3, 29) LF_SET(3, 30) LF_SET(3, 31) LF_SET(3, 32) LF_SET(3, 33)
LF_SET(3, 34) LF_SET(3, 35) LF_SET(3, 36) LF_SET(3, 37) LF_SET(3, 38) LF_SET(3, 39)
LF_SET(3, 40) LF_SET(3, 41) LF_SET(3, 42) LF_SET(3, 43) LF_SET(3, 44) LF_SET(3, 45)
LF_SET(3, 46) LF_SET(3, 47) LF_SET(3, 48) LF_SET(3, 49) LF_SET(3, 50) LF_SET(3, 51)
LF_SET(3, 52) LF_SET(3, 53) LF_SET(3, 54) LF_SET(3, 55) LF_SET(3, 56) LF_SET(3, 57)
LF_SET(3, 58) LF_SET(3, 59) LF_SET(3, 60) LF_SET(3, 61) LF_SET(3, 62) LF_SET(3, 63)
#endif

#if KT_HAVE_ISA_AVX512
/* The backend's hint that a gemm on rows [n0, n1) of W for M tokens comes next:
 * queued for the AVX-512 call before it to start into L2 (the block types with
 * AVX-512 panels or decode tiles). */
static void lf_hint(const kt__wmat *W, int n0, int n1, int M)
{
    int stored = x_stored(W->type);
    if (stored && M < LF_PANEL_MIN) { /* the tiles: one stream */
        size_t tb = kt__lf_x_tile_bytes(W->type, W->cols);
        kt__lf_hint_avx512(W->w, tb, n0 / 4, (n1 + 3) / 4, tb);
        return;
    }
    kt__wmat src = {W->scale, NULL, W->rows, W->cols, stored, 0, NULL};
    if (stored)
        W = &src;
    unsigned sec = kt__ggml_act_section(W->type);
    if (M >= 1 && M <= 256 && sec && sec != KT__GGML_ACT_F32)
        kt__lf_hint_avx512(W->w, kt__ggml_row_bytes((kt_type)W->type, W->cols), n0, n1,
                           kt__ggml_row_bytes((kt_type)W->type, W->cols));
}
#define LF_HINT_2 lf_hint
#else
#define LF_HINT_2 NULL
#endif
#if KT_HAVE_ISA_AVX2
/* The same for the AVX2 set: its decode tiles only (its other kernels take none). */
static void lf_hint_avx2(const kt__wmat *W, int n0, int n1, int M)
{
    int stored = x_stored(W->type);
    if (stored && M <= lf_xmax(KT_GGML_AVX2, stored))
        kt__lf_hint_avx2(W->w, kt__lf_x_tile_bytes(W->type, W->cols), n0 / 4, (n1 + 3) / 4);
}
#define LF_HINT_1 lf_hint_avx2
#else
#define LF_HINT_1 NULL
#endif
#define LF_HINT_0 NULL /* the scalar set takes no hint */
#if KT_HAVE_ISA_AMX
/* The AMX set: the tiles' own hint queue for the calls they take, the AVX-512 one's
 * for the others. */
static void lf_hint_amx(const kt__wmat *W, int n0, int n1, int M)
{
    const void *w;
    int type = lf_amx_type(W, 0, W->cols, M, &w);
    size_t wrow = type ? kt__ggml_row_bytes((kt_type)type, W->cols) : 0;
    if (type)
        kt__lf_hint_amx(w, wrow, n0, n1, wrow);
    else
        lf_hint(W, n0, n1, M);
}
#define LF_HINT_3 lf_hint_amx
#endif

#define LF_ENTRY(ISA, NAME, MASK)                                              \
    {NAME, KT__ACT_GGML + MASK, quant_##ISA##_##MASK, gemm_##ISA##_##MASK,     \
     ISA == 3   ? KT__LF_AMX_SCRATCH                                               \
     : ISA == 2 ? KT__LF_PANEL_SCRATCH                                             \
     : ISA == 1 ? KT__LF_PANEL2_SCRATCH                                            \
                : 0,                                                               \
     LF_HINT_##ISA}
/* Entries 1-15 (the activation section masks every set has); the AVX-512 and
 * AVX2 sets add 16-63 (the R40 / R80 sections). */
#define LF_ENTRIES_1_15(ISA, NAME)                                                             \
    LF_ENTRY(ISA, NAME, 1), LF_ENTRY(ISA, NAME, 2), LF_ENTRY(ISA, NAME, 3),                    \
    LF_ENTRY(ISA, NAME, 4), LF_ENTRY(ISA, NAME, 5), LF_ENTRY(ISA, NAME, 6),                    \
    LF_ENTRY(ISA, NAME, 7), LF_ENTRY(ISA, NAME, 8), LF_ENTRY(ISA, NAME, 9),                    \
    LF_ENTRY(ISA, NAME, 10), LF_ENTRY(ISA, NAME, 11), LF_ENTRY(ISA, NAME, 12),                 \
    LF_ENTRY(ISA, NAME, 13), LF_ENTRY(ISA, NAME, 14), LF_ENTRY(ISA, NAME, 15)
#define LF_ROW(ISA, NAME) {{NULL, 0, NULL, NULL, 0, NULL}, LF_ENTRIES_1_15(ISA, NAME)}
#define LF_ROW_RAW(ISA, NAME)                                                                  \
    {{NULL, 0, NULL, NULL, 0, NULL}, LF_ENTRIES_1_15(ISA, NAME),                               \
     LF_ENTRY(ISA, NAME, 16), LF_ENTRY(ISA, NAME, 17), LF_ENTRY(ISA, NAME, 18),                \
     LF_ENTRY(ISA, NAME, 19), LF_ENTRY(ISA, NAME, 20), LF_ENTRY(ISA, NAME, 21),                \
     LF_ENTRY(ISA, NAME, 22), LF_ENTRY(ISA, NAME, 23), LF_ENTRY(ISA, NAME, 24),                \
     LF_ENTRY(ISA, NAME, 25), LF_ENTRY(ISA, NAME, 26), LF_ENTRY(ISA, NAME, 27),                \
     LF_ENTRY(ISA, NAME, 28), LF_ENTRY(ISA, NAME, 29), LF_ENTRY(ISA, NAME, 30),                \
     LF_ENTRY(ISA, NAME, 31), LF_ENTRY(ISA, NAME, 32), LF_ENTRY(ISA, NAME, 33),                \
     LF_ENTRY(ISA, NAME, 34), LF_ENTRY(ISA, NAME, 35), LF_ENTRY(ISA, NAME, 36),                \
     LF_ENTRY(ISA, NAME, 37), LF_ENTRY(ISA, NAME, 38), LF_ENTRY(ISA, NAME, 39),                \
     LF_ENTRY(ISA, NAME, 40), LF_ENTRY(ISA, NAME, 41), LF_ENTRY(ISA, NAME, 42),                \
     LF_ENTRY(ISA, NAME, 43), LF_ENTRY(ISA, NAME, 44), LF_ENTRY(ISA, NAME, 45),                \
     LF_ENTRY(ISA, NAME, 46), LF_ENTRY(ISA, NAME, 47), LF_ENTRY(ISA, NAME, 48),                \
     LF_ENTRY(ISA, NAME, 49), LF_ENTRY(ISA, NAME, 50), LF_ENTRY(ISA, NAME, 51),                \
     LF_ENTRY(ISA, NAME, 52), LF_ENTRY(ISA, NAME, 53), LF_ENTRY(ISA, NAME, 54),                \
     LF_ENTRY(ISA, NAME, 55), LF_ENTRY(ISA, NAME, 56), LF_ENTRY(ISA, NAME, 57),                \
     LF_ENTRY(ISA, NAME, 58), LF_ENTRY(ISA, NAME, 59), LF_ENTRY(ISA, NAME, 60),                \
     LF_ENTRY(ISA, NAME, 61), LF_ENTRY(ISA, NAME, 62), LF_ENTRY(ISA, NAME, 63)}

static const kt__moe_kernels lf_sets_scalar[16] = LF_ROW(0, "scalar-ggml");
static const kt__moe_kernels lf_sets_avx2[64] = LF_ROW_RAW(1, "avx2-ggml");
static const kt__moe_kernels lf_sets_avx512[64] = LF_ROW_RAW(2, "avx512-vnni-ggml");
#if KT_HAVE_ISA_AMX
static const kt__moe_kernels lf_sets_amx[64] = LF_ROW_RAW(3, "amx-int8-ggml");
#endif


bool kt__lf_amx_set(const kt__moe_kernels *k)
{
#if KT_HAVE_ISA_AMX
    return k >= lf_sets_amx && k < lf_sets_amx + 64;
#else
    (void)k;
    return false;
#endif
}

bool kt__lf_repacks(const kt__moe_kernels *k, int type)
{
    const lf_x *x = lf_x_find(type, false);
    /* the section the decode tiles read: R40 (Q4_0, IQ4_NL), R80 (Q8_0), Q8K */
    unsigned need = x ? kt__ggml_act_section(type) & ~KT__GGML_ACT_Q80 : 0;
    bool avx512 = KT_HAVE_ISA_AVX512 && k >= lf_sets_avx512 && k < lf_sets_avx512 + 64 && x &&
                  !x->avx2_only;
#if KT_HAVE_ISA_AMX
    avx512 |= k >= lf_sets_amx && k < lf_sets_amx + 64 && x && !x->avx2_only; /* its decode */
#endif
    bool avx2 = KT_HAVE_ISA_AVX2 && k >= lf_sets_avx2 && k < lf_sets_avx2 + 64;
    return need && (avx512 || avx2) && ((unsigned)(k->act - KT__ACT_GGML) & need);
}

const kt__moe_kernels *kt__moe_llamafile_kernels(int isa, unsigned mask)
{
    if (isa < 0 || isa > 3 || mask == 0 || mask > 63 || (isa == 3 && !KT_HAVE_ISA_AMX))
        return NULL; /* 3: the AMX set (built with the AMX library only) */
    if (isa == 0) /* the R40 / R80 sections are the AVX2 / AVX-512 decode's only */
        mask &= 15;
    if (mask & (KT__GGML_ACT_R40 | KT__GGML_ACT_R80)) /* made from the Q8_0 blocks */
        mask |= KT__GGML_ACT_Q80;
    if (mask == 0)
        mask = KT__GGML_ACT_Q80;
#if KT_HAVE_ISA_AMX
    if (isa == 3)
        return &lf_sets_amx[mask];
#endif
    return isa == 2   ? &lf_sets_avx512[mask]
           : isa == 1 ? &lf_sets_avx2[mask]
                      : &lf_sets_scalar[mask];
}
