/*
 * Internal MoE kernel interface shared by cpu/{ref,avx2,avx512} and lib/moe.
 *
 * A kernel set computes C = A * W^T for one weight matrix of one expert,
 * restricted to output rows [n0, n1) and reduction range [k0, k1):
 *
 *     C[m][n - n0] = sum_{k0 <= k < k1} A_m[k] * W[n][k]     m < M
 *
 * where A_m is an activation row in the kernel set's activation format (made
 * once per token by `quant`) and W is stored as the method says (BF16; FP8
 * E4M3 with F32 128x128 block scales; RAWINT4 packed nibbles with BF16 scales
 * per 32 inputs). Alignment: FP8 k0 is a multiple of 128, RAWINT4 k0 and k1
 * are multiples of 32.
 */
#ifndef KT_CPU_MOE_KERNELS_H
#define KT_CPU_MOE_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kt/core.h"

/* 1 on an Intel CPU with 1 to KT__FEW_CPUS online CPUs: there (the 2-core AMX
 * Xeon VM, session 17) the decode kernels' software prefetch runs nearer than on
 * the 16-core Xeon (DEC_PF_INTEL_FEW, LF_AHEAD_FEW; 2 and 16 CPUs measured). */
#define KT__FEW_CPUS 4
static inline int kt__few_core_intel(void)
{
    __builtin_cpu_init();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return __builtin_cpu_is("intel") && cpus >= 1 && cpus <= KT__FEW_CPUS;
}

/* Activation row formats. */
enum {
    KT__ACT_F32 = 0,   /* float [K]                                               */
    KT__ACT_BF16 = 1,  /* uint16 [K]                                              */
    KT__ACT_Q8G32 = 2, /* int8 q[K], float d[K/32], int32 s[K/32]: x = q * d per
                          group of 32, s = 8 * sum(q) of the group (INT4 offset)  */
    KT__ACT_BF16P64 = 3, /* AVX-512 FP8: BF16, K padded to 64, each chunk of 64 inputs
                          permuted as the byte-table decode leaves the weights:
                          input 16L + j goes to 8L + j (j < 8), 32 + 8L + j - 8 */
    KT__ACT_Q8P128 = 4, /* AVX-512 RAWINT4, K padded to 128: per chunk of 128 inputs
                          int8 q[128] (the 64 even inputs, then the 64 odd); after
                          all chunks, per chunk float d[16] (lane l holds the scale
                          of group l / 4) and int32 c[16] (-8 * the lane's sum over
                          both halves); then the inputs as BF16; then int32
                          gs[K/32]: -8 * each group's sum (the VNNI prefill);
                          then int32 eb[K/32]: d as an exponent step, bits(d) -
                          bits(1.0f) (0 where d = 0; d is a power of two)    */
    KT__ACT_BF16X2 = 5, /* KT_MOE_PREC_BF16X2: uint16 hi[Kp], then lo[Kp] (Kp = K padded
                          to 64), x = hi + lo, hi = bf16(x), lo = bf16(x - hi)     */
    KT__ACT_BF16P64E = 6, /* AVX-512 FP8: the BF16P64 row (Kp = K padded to 64 words),
                          then bf16(x * 2^64) [Kp], each chunk of 64 inputs as its 32
                          even inputs, then its 32 odd ones (the shift decode's order) */
    KT__ACT_Q8E64 = 7,  /* AVX2 RAWINT4, K padded to 64 (Kp): per chunk of 64 inputs
                          (groups 2c, 2c + 1) int8 q[64]: the 32 even inputs, then
                          the 32 odd (what a 32-byte load's low / high nibbles
                          meet); then per chunk float d[8] (lanes 0-3 the first
                          group's scale, 4-7 the second's) and int32 c[8] (-2 x
                          the lane's group sum: 4 lanes add up to -8 x it); a
                          group past K has q, d, c zero. Quantized as Q8G32     */
    KT__ACT_GGML = 16  /* LLAMAFILE: KT__ACT_GGML + mask of KT__GGML_ACT_* sections
                          (cpu/ref/moe_llamafile.c)                               */
};

/* LLAMAFILE activation sections (partner formats of the ggml weight types). */
#define KT__GGML_ACT_F32 1u
#define KT__GGML_ACT_Q80 2u
#define KT__GGML_ACT_Q81 4u
#define KT__GGML_ACT_Q8K 8u
/* AVX-512 decode forms of the Q8_0 codes laid out like a Q4_0 / Q8_0 weight
 * row's bytes (cpu/ref/moe_llamafile.c; only the AVX-512 set asks for them). */
#define KT__GGML_ACT_R40 16u
#define KT__GGML_ACT_R80 32u
size_t kt__ggml_act_row_bytes(unsigned mask, int K);
/* The section a weight of kt_type `type` reads (0: not a LLAMAFILE type). */
unsigned kt__ggml_act_section(int type);

typedef struct kt__wmat {
    const void *w;     /* [rows][cols] as stored (RAWINT4: int32 [rows][cols/8])  */
    const void *scale; /* FP8: F32 [ceil(rows/128)][ceil(cols/128)];
                          RAWINT4: BF16 [rows][cols/32]; BF16: NULL           */
    int rows, cols;
    int type;          /* LLAMAFILE: kt_type of the ggml blocks; RAWINT4: layout
                          (0 rows as stored, KT__INT4_TILED below); else unused */
    int group;         /* grouped INT4 (kt__moe_int4g_*): inputs per scale, a
                          multiple of 32 dividing cols; 0: 32                    */
    const void *grid;  /* derived data a kernel set made of this matrix once at
                          create (kt__moe_packer.grid_make), or NULL: the AMX
                          INT4 sets' per-row grid factors                        */
} kt__wmat;

/* RAWINT4 repacked at load time (W->type == KT__INT4_TILED; kt__moe_int4_tile):
 * rows in tiles of 4 (the last one zero-padded), each tile one sequential
 * stream of blocks of 512 inputs (the last block shorter):
 *   [4 rows][16] BF16 scales, row r's group 4j + gi at position 4 gi + j
 *   (the order the decode's group sums come out in); then per step j of 128
 *   inputs, [4 rows][64 bytes] of the rows' packed nibbles as stored.
 * Steps past K are zero bytes, scales past K zero. W->w is the first tile,
 * W->scale == W->w. The kernels take k0 a multiple of 512, k1 too or K. */
#define KT__INT4_TILED 1
#define KT__INT4T_ROWS 4
#define KT__INT4T_BLOCK (128 + 4 * 256) /* bytes of a whole block           */

/* An environment knob of the kernels (tuning, for measuring) read once per
 * process: *cache holds parse(value) + 1 (0: not read yet); parse gets NULL
 * when the variable is unset. */
static inline long env_knob(long *cache, const char *name, long (*parse)(const char *))
{
    long v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (!v) {
        v = parse(getenv(name)) + 1;
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v - 1;
}

static inline size_t kt__int4t_tile_bytes(int K)
{
    size_t steps = (size_t)(K + 127) / 128;
    return (steps + 3) / 4 * 128 + steps * 256;
}

/* Bytes of a repacked rows x K matrix. */
static inline size_t kt__int4t_bytes(int rows, int K)
{
    return (size_t)(rows + 3) / 4 * kt__int4t_tile_bytes(K);
}

/* Start of block b (512 inputs) of the tile holding row n: its scales. */
static inline const uint8_t *kt__int4t_block(const kt__wmat *W, int n, int b)
{
    return (const uint8_t *)W->w + (size_t)(n / 4) * kt__int4t_tile_bytes(W->cols) +
           (size_t)b * KT__INT4T_BLOCK;
}

/* Row n's 64 bytes of step c (inputs [128 c, 128 c + 128)). */
static inline const uint8_t *kt__int4t_step(const kt__wmat *W, int n, int c)
{
    return kt__int4t_block(W, n, c / 4) + 128 + (c % 4) * 256 + (n % 4) * 64;
}

/* Row n's BF16 scale of group g. */
static inline uint16_t kt__int4t_scale(const kt__wmat *W, int n, int g)
{
    int pos = 4 * (g % 4) + g % 16 / 4;
    const uint8_t *p = kt__int4t_block(W, n, g / 16) + (n % 4) * 32 + 2 * pos;
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Rows [r0, r1) x inputs [c0, c1) (multiples of 32) of a RAWINT4 matrix as
 * stored, repacked into dst (kt__int4t_bytes(r1 - r0,
 * c1 - c0) bytes); returns the view of it (cpu/ref/moe_ref.c). */
kt__wmat kt__moe_int4_tile(const kt__wmat *W, int r0, int r1, int c0, int c1, void *dst);

typedef void (*kt__moe_gemm_fn)(const kt__wmat *W, int n0, int n1, int k0, int k1,
                                const void *A, size_t a_stride, const int32_t *a_rows, int M,
                                float *C, int ldc, void *scratch);

/* Writes elements [k0, k1) of one activation row of length K from x[k0..k1). */
typedef void (*kt__moe_quant_fn)(const float *x, int k0, int k1, int K, void *row);

/* Hint: a gemm on rows [n0, n1) of W for M tokens comes next; starts its first
 * weights into L2 while the current call computes. */
typedef void (*kt__moe_prefetch_fn)(const kt__wmat *W, int n0, int n1, int M);

typedef struct kt__moe_kernels {
    const char *name;         /* "avx512-bf16", "scalar", ...                      */
    int act;                  /* KT__ACT_*                                          */
    kt__moe_quant_fn quant;
    kt__moe_gemm_fn gemm;
    size_t scratch_bytes;     /* per thread, for one call of gemm                  */
    kt__moe_prefetch_fn prefetch; /* hint before a gemm call, or NULL              */
} kt__moe_kernels;

/* Bytes of one activation row of length K (64-byte multiple). */
static inline size_t kt__moe_act_row_bytes(int act, int K)
{
    size_t b;
    if (act == KT__ACT_F32)
        b = (size_t)K * 4;
    else if (act == KT__ACT_BF16)
        b = (size_t)K * 2;
    else if (act == KT__ACT_Q8G32)
        b = (size_t)K + (size_t)(K / 32) * 8;
    else if (act >= KT__ACT_GGML)
        return kt__ggml_act_row_bytes((unsigned)(act - KT__ACT_GGML), K);
    else if (act == KT__ACT_BF16P64)
        b = (size_t)((K + 63) / 64) * 128;
    else if (act == KT__ACT_BF16X2 || act == KT__ACT_BF16P64E)
        b = (size_t)((K + 63) / 64) * 256;
    else if (act == KT__ACT_Q8E64)
        b = (size_t)((K + 63) / 64) * 128;
    else
        b = (size_t)((K + 127) / 128) * (512 + 32);
    return (b + 63) & ~(size_t)63;
}

static inline const float *kt__q8_scales(const void *row, int K)
{
    return (const float *)((const int8_t *)row + K);
}
static inline const int32_t *kt__q8_sums(const void *row, int K)
{
    return (const int32_t *)((const int8_t *)row + K + (size_t)(K / 32) * 4);
}

static inline float kt__moe_bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t kt__moe_f32_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* The smallest power of two >= v (v >= 0 finite; 0 stays 0, subnormals go
 * to 2^-126). */
static inline float kt__moe_pow2_ceil(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if (u && u < 0x7f000000u)
        u = (u + 0x7fffffu) & 0xff800000u;
    memcpy(&v, &u, 4);
    return v;
}

/* KT_MOE_Q8_POW2=1 (opt-in, a numerics trade: docs/moe.md): the RAWINT4
 * quantizers (Q8G32, Q8P128) round each group's d up to a power of two, and
 * the VNNI prefill's scale product becomes an exponent add (~6% faster per
 * core, ~1.4x the activation error). The setter is for tests. */
int kt__moe_q8_pow2(void);
void kt__moe_q8_set_pow2(int on);
/* One group of 32 inputs as the Q8G32 reference quantizes it (cpu/ref/moe_ref.c):
 * *d = max|x| / 127 (KT_MOE_Q8_POW2: the smallest power of two >= it, so
 * |q| <= 127), q[i] = round(x[i] / *d); returns sum(q). */
int32_t kt__moe_q8g32_group(const float *x, int8_t *q, float *d);

/* F8_E4M3 (fn) -> f32, exact. */
static inline float kt__moe_e4m3_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
    uint32_t u;
    float f;
    if (e == 0xf && m == 0x7) {
        u = sign | 0x7fc00000u;
    } else if (e != 0) {
        u = sign | ((e + 120u) << 23) | (m << 20);
    } else {
        f = (float)m * 0x1p-9f;
        return sign ? -f : f;
    }
    memcpy(&f, &u, 4);
    return f;
}

/* Kernels may keep data derived from activation rows (packed copies) between
 * calls of one epoch. Whoever rewrites activation buffers starts a new epoch
 * first (the backend does at every call; tests between cases). */
extern uint64_t kt__moe_epoch;
static inline void kt__moe_new_epoch(void)
{
    __atomic_add_fetch(&kt__moe_epoch, 1, __ATOMIC_RELEASE);
}

/* Kernel sets. Method: KT_METHOD_BF16 / _FP8 / _RAWINT4. NULL when the set
 * has no kernel for the method (or its ISA library was not built). */
const kt__moe_kernels *kt__moe_kernels_ref(int method);
const kt__moe_kernels *kt__moe_kernels_avx2(int method);
const kt__moe_kernels *kt__moe_kernels_avx512(int method);
/* AMXINT8 (int8 [rows][cols], F32 scale per row) kernels, one per ISA
 * (moe_int8_*.c in cpu/ref, cpu/avx2, cpu/avx512); the getters above return them for KT_METHOD_AMXINT8. */
const kt__moe_kernels *kt__moe_int8_ref(void);
const kt__moe_kernels *kt__moe_int8_avx2(void);
/* The AVX2 FP8 set (cpu/avx2/moe_fp8_avx2.c): E4M3 decoded by shifts, a
 * decoded chunk reused by every token from 4 tokens; kt__moe_kernels_avx2
 * returns it unless KT_MOE_AVX2_FP8=old (then this returns NULL). */
const kt__moe_kernels *kt__moe_fp8_avx2(void);
const kt__moe_kernels *kt__moe_int8_avx512(void);
/* KT_MOE_PREC_BF16X2 sets (activations within ~1e-5 of F32): the scalar one
 * with F32 activations for every method (cpu/ref/moe_ref.c), the AVX-512 one
 * with BF16X2 activations (cpu/avx512/moe_x2_avx512.c). */
const kt__moe_kernels *kt__moe_kernels_ref_precise(int method);
const kt__moe_kernels *kt__moe_kernels_avx512_x2(int method);
/* AMXINT4 with groups of W->group inputs (kt-convert --group-size 64, 128):
 * packed nibbles as RAWINT4, BF16 scales [rows][cols / group]. The scalar
 * set takes any multiple of 32 (F32 activations); the AVX-512 VNNI set and
 * the AMX set (AMX-INT8 tiles from min_m tokens, that VNNI set below) take
 * groups of 64 and 128, with k0 and k1 multiples of the group. */
const kt__moe_kernels *kt__moe_int4g_ref(void);
const kt__moe_kernels *kt__moe_int4g_avx512(void);
const kt__moe_kernels *kt__moe_int4g_amx(void);
const kt__moe_kernels *kt__moe_int4g_amx_emulated(void);
/* Shared packing of a kernel set's activations, for many gemm calls over the
 * same rows (the backend's items of one expert): pack() writes rows [0, M)
 * (a_rows as for gemm), inputs [0, K), to P (64-byte aligned, bytes(M, K) =
 * ceil(M / 16) x bytes(16, K)); gemm() then gives what the set's gemm over
 * inputs [0, K = W->cols) gives for tokens [m0, m0 + M) of the Mtot packed
 * (m0 a multiple of 16), reading P only. Worth it from min_m tokens. */
typedef struct kt__moe_packer {
    int min_m;
    size_t (*bytes)(int M, int K);
    void (*pack)(const void *A, size_t a_stride, const int32_t *a_rows, int M, int K, void *P);
    void (*gemm)(const kt__wmat *W, int n0, int n1, const void *P, int Mtot, int m0, int M,
                 float *C, int ldc, void *scratch);
    /* Hint: gemm will soon read rows [n0, n1) of W; starts their first inputs
     * on their way into L2 (a later call's weights while this one computes). */
    void (*prefetch)(const kt__wmat *W, int n0, int n1);
    /* Data derived from a weight matrix once at create instead of in every
     * call (NULL: none): grid_bytes(W) its size (0: none for this W),
     * grid_make(W, dst) writes it to dst (64-byte aligned); the backend then
     * hands the matrix to this set's gemm and pack's gemm with W->grid = dst
     * (the AMX INT4 sets: each row's scale and grid factors, cpu/amx). */
    size_t (*grid_bytes)(const kt__wmat *W);
    void (*grid_make)(const kt__wmat *W, void *dst);
} kt__moe_packer;
/* The packer of an AMX-INT8 set of cpu/amx/moe_amx.c (AMXINT8, INT4 groups of
 * 32 / 64 / 128); NULL for any other set. The emulated one for its sets. */
const kt__moe_packer *kt__moe_packer_amx(const kt__moe_kernels *k);
const kt__moe_packer *kt__moe_packer_amx_emulated(const kt__moe_kernels *k);
/* KT_AMX_PROFILE=1 (for measuring): the AMX-INT8 loops' time split per backend
 * call (`calls` since the last report) into buf, then cleared; 0 when off. */
size_t kt__moe_amx_profile(char *buf, size_t n, double calls);
size_t kt__moe_amx_profile_emulated(char *buf, size_t n, double calls);
/* AMX-BF16 prefill on top of the AVX-512 set (cpu/amx/moe_amx.c). */
const kt__moe_kernels *kt__moe_kernels_amx(int method);
/* The same with a scalar tile emulation; tests only. */
const kt__moe_kernels *kt__moe_kernels_amx_emulated(int method);
/* KT_MOE_PREC_BF16X2 on AMX-BF16 tiles (hi and lo packed as two B tile sets),
 * the AVX-512 x2 set below the crossover (cpu/amx/moe_amx.c); and emulated. */
const kt__moe_kernels *kt__moe_kernels_amx_x2(int method);
const kt__moe_kernels *kt__moe_kernels_amx_x2_emulated(int method);

/* LLAMAFILE kernel set for a ggml ISA level (0 scalar, 1 AVX2, 2 AVX-512
 * VNNI, 3 AMX-INT8 prefill over the AVX-512 set; NULL where not built) and a mask of
 * KT__GGML_ACT_* sections (cpu/ref/moe_llamafile.c). */
const kt__moe_kernels *kt__moe_llamafile_kernels(int isa, unsigned mask);
/* LLAMAFILE Q4_0 repacked at load time (W->type == KT__LF_Q40X; kt__lf_q40x_repack in
 * cpu/ref/moe_llamafile.c; docs/moe.md): rows in tiles of 4 (the last zero-padded),
 * each tile one stream of groups of g blocks of 32 inputs (16s, then at most one 8,
 * one 4 and a last 4 zero-padded past K; kt__q40x_group): per group [g/4 steps][4
 * rows][64] nibble bytes, then [4 rows][g] f16 scales (g 4: then 32 zero bytes).
 * Step s, lane l (4 bytes) holds nibble bytes 4p..4p+3 of block l % g, p = s 16 / g +
 * l / g, so that lane l sums one block only. W->scale: the Q4_0 rows it was made
 * from (the prefill panels and the other sets read those). */
#define KT__LF_Q40X 0x4066
/* The group of the Q40X layout holding block b of nb: its size, *gb its first block. */
static inline int kt__q40x_group(int b, int nb, int *gb)
{
    int s = nb & ~15;
    if (b < s)
        return *gb = b & ~15, 16;
    if (nb - s >= 8 && b < s + 8)
        return *gb = s, 8;
    s += nb - s >= 8 ? 8 : 0;
    if (nb - s >= 4 && b < s + 4)
        return *gb = s, 4;
    s += nb - s >= 4 ? 4 : 0;
    return *gb = s, 4;
}
static inline size_t kt__q40x_group_bytes(int g)
{
    return (size_t)g * 64 + (g == 4 ? 64 : (size_t)g * 8);
}
/* Bytes of a tile of 4 rows of K inputs (a rows x K matrix: kt__lf_repack_bytes). */
static inline size_t kt__q40x_tile_bytes(int K)
{
    size_t t = 0;
    int nb = K / 32, gb, g;
    for (int b = 0; b < nb; b = gb + g)
        t += kt__q40x_group_bytes(g = kt__q40x_group(b, nb, &gb));
    return t;
}
/* LLAMAFILE Q4_K repacked at load time (W->type == KT__LF_Q4KX; K a multiple of 256):
 * the Q40X geometry over Q4_K's sub-blocks of 32 (groups of 16, at most one last 8),
 * sub-block b's codes as a Q4_0 block's nibble bytes (byte i: code i low, code i + 16
 * high); per group after its steps 8 g bytes of scales, mins and block factors:
 *   [2 row pairs h][2 g] bytes sc | (m >> 4) << 6   (6-bit scale sc, min m)
 *   [2 g] bytes (m & 15) of pair 0 | (m & 15) << 4 of pair 1
 *   [4 rows][g / 8 blocks] (d, dmin) f16 pairs
 * where sub-block x (of the group) of row 2 h + p sits at byte 8 (x / 4) + 4 p + x % 4
 * of its pair's 2 g (the order the one-token kernel's packed row pair sums take).
 * 72 g bytes a group (64-byte aligned), 72 per sub-block and tile: exactly Q4_K's
 * 144 bytes per 256 inputs and row. W->scale: the Q4_K rows. */
#define KT__LF_Q4KX 0x4067
static inline size_t kt__q4kx_tile_bytes(int K)
{
    return (size_t)(K / 32) * 72;
}
/* LLAMAFILE Q8_0 repacked at load time (W->type == KT__LF_Q80X): the Q40X groups
 * (kt__q40x_group) with [g / 2 steps][4 rows][64] code bytes (code + 128), step s
 * lane l holding codes 4p..4p+3 of block l % g, p = s 16 / g + l / g, then the
 * Q40X group's scales (kt__q80x_group_bytes). W->scale: the Q8_0 rows. */
#define KT__LF_Q80X 0x4068
static inline size_t kt__q80x_group_bytes(int g)
{
    return kt__q40x_group_bytes(g) + (size_t)g * 64;
}
static inline size_t kt__q80x_tile_bytes(int K)
{
    return kt__q40x_tile_bytes(K) + (size_t)((K / 32 + 3) & ~3) * 64;
}
/* LLAMAFILE Q6_K repacked at load time (W->type == KT__LF_Q6KX; K a multiple of 256;
 * the AVX2 decode only): the Q4KX groups of g sub-blocks of 32 (16s, at most one
 * last 8), sub-block b (of block b / 8, j = b % 8) split in its lo half (inputs
 * 32 j .. + 15, Q6_K's scale 2 j) and hi half (+ 16 .. + 31, scale 2 j + 1). Codes
 * u = q + 32 (6 bits) go where the Q40X order puts the activation's lo / hi codes:
 * per group [4 rows][g / 4 steps][96 bytes], a step's 64 bytes of nibbles (byte i:
 * lo code i's low 4 bits low, hi code i's high) and 32 bytes of top bits (byte i:
 * bits 0-1 lo code i, 2-3 lo code 32 + i, 4-5 hi code i, 6-7 hi code 32 + i); then
 * [4 rows][g] lo scales, [4 rows][g] hi scales as int8, g 16 in the order 0-3, 8-11,
 * 4-7, 12-15 (the lanes one load's two epi16 unpacks make), g 8 in order (104 g bytes
 * a group, 64-byte aligned); after the groups [K / 256][4 rows] f16 d; the tile
 * rounded up to 64 bytes: exactly Q6_K's 210 bytes per 256 inputs and row.
 * W->scale: the Q6_K rows. */
#define KT__LF_Q6KX 0x4069
static inline size_t kt__q6kx_tile_bytes(int K)
{
    return ((size_t)(K / 32) * 105 + 63) & ~(size_t)63;
}
/* LLAMAFILE IQ4_NL repacked at load time (W->type == KT__LF_IQ4NLX; the AVX2 decode
 * only): Q4_0's blocks and bytes, so the Q40X layout of them, each nibble an index
 * into kt__iq4nl_values instead of a code + 8. W->scale: the IQ4_NL rows. */
#define KT__LF_IQ4NLX 0x406A
/* LLAMAFILE Q5_K repacked at load time (W->type == KT__LF_Q5KX; K a multiple of 256;
 * the AVX2 decode only): Q4KX's groups with the 5th bits beside the nibbles. Per group
 * of g sub-blocks: [g / 4 steps][4 rows][64] bytes of the codes' low 4 bits exactly as
 * Q4KX's, then [g / 4 steps][4 rows][16] bytes of 5th bits: for the nibble byte at
 * position 32 h + 16 L + k of the row's 64 (h, L < 2, k < 16), bit 2 h + L of byte k
 * the low nibble's code's, bit 4 + 2 h + L the high one's (so a 16-byte load broadcast
 * to both 128-bit lanes and shifted per lane by vpsllvd / vpsrlvd puts each code's bit
 * at 16); then [4 rows][g] 6-bit scales, [4 rows][g] mins as bytes (88 g bytes a
 * group, 64-byte aligned); after the groups per row [K / 256] (d, dmin) f16 pairs; the
 * tile rounded up to 64 bytes: Q5_K's bytes times 90 / 88. W->scale: the Q5_K rows. */
#define KT__LF_Q5KX 0x406B
static inline size_t kt__q5kx_tile_bytes(int K)
{
    return ((size_t)(K / 32) * 90 + 63) & ~(size_t)63;
}
/* Bytes of one 4-row tile of a load-time repack (xtype KT__LF_Q40X / Q80X / Q4KX /
 * Q5KX / Q6KX / IQ4NLX) of rows of K inputs. */
static inline size_t kt__lf_x_tile_bytes(int xtype, int K)
{
    return xtype == KT__LF_Q4KX   ? kt__q4kx_tile_bytes(K)
           : xtype == KT__LF_Q5KX ? kt__q5kx_tile_bytes(K)
           : xtype == KT__LF_Q6KX ? kt__q6kx_tile_bytes(K)
           : xtype == KT__LF_Q80X ? kt__q80x_tile_bytes(K)
                                  : kt__q40x_tile_bytes(K);
}
/* Whether the LLAMAFILE set k decodes weights of type (Q4_0, Q4_K, Q8_0; Q5_K, Q6_K
 * and IQ4_NL on AVX2 only) from their load-time repack (the AVX-512 and AVX2 sets; Q4_0,
 * IQ4_NL: with R40, Q8_0: with R80). */
_Bool kt__lf_repacks(const kt__moe_kernels *k, int type);
/* Bytes of a rows x K matrix of type once repacked; 0: the type has no repack. */
size_t kt__lf_repack_bytes(int type, int rows, int K);
/* The Q4_0, Q8_0, IQ4_NL (K a multiple of 32), Q4_K, Q5_K or Q6_K matrix W repacked
 * into dst (kt__lf_repack_bytes): a Q40X / Q80X / IQ4NLX / Q4KX / Q5KX / Q6KX view whose
 * scale is W->w. */
kt__wmat kt__lf_repack(const kt__wmat *W, void *dst);
kt__wmat kt__lf_q40x_repack(const kt__wmat *W, void *dst);
/* C[m][n - n0] = row n of a Q40X / Q80X / Q4KX matrix . token m (M <= 4 a pass):
 * act[m] is token m's R40 / R80 per-block offsets (Q4KX: the Q8_K section's d x
 * sum per 32), its block scales xs bytes on, its codes in the layout's order 2 xs
 * on. */
void kt__lf_gemm_q40x_avx512(const kt__wmat *W, int n0, int n1, const void *const *act,
                             size_t xs, int M, float *C, int ldc);
/* The Q4KX decode's group kernel on AVX-512 for one-token tiles (1: session 9's,
 * the 2-4-token tiles' kernel; 3: the default, the scales in integers); returns
 * the one in use before, for the tests. */
int kt__lf_set_q4k_avx512(int kernel);
/* The same on AVX2 (cpu/avx2/moe_llamafile_dec_avx2.c), any M: each tile read
 * from memory once, then from L1 for the other tokens; also Q6KX (act[m]: the Q8_K
 * section's arrays as for Q4KX, then its Q6KX biases; Q5KX the same) and IQ4NLX (act[m]
 * as Q40X's). */
void kt__lf_gemm_x_avx2(const kt__wmat *W, int n0, int n1, const void *const *act, size_t xs,
                        int M, float *C, int ldc);
/* Hint: this thread's next kt__lf_gemm_x_avx2 call reads tiles [t0, t1) of the
 * repack at W (tile_bytes each); the call before it runs its prefetches on into
 * their first bytes (two hints kept, oldest first). */
void kt__lf_hint_avx2(const void *W, size_t tile_bytes, int t0, int t1);
/* Its tile streams as KT_LF_STREAMS (0: the default per type, 1..4) and KT_LF_WEAVE
 * (0: a tile of each stream in turn, 1: a group for one token, 2: for any) set them;
 * returns the setting
 * before as streams | weave << 4, for the tests. */
int kt__lf_set_streams_avx2(int streams, int weave);
/* LLAMAFILE AVX-512 kernels for Q4_0 / Q8_0 weights (cpu/avx512/moe_llamafile_avx512.c):
 * C[m][n - n0] = row n of W . token m over blocks [b0, b1) of 32. act[m] is
 * token m's R40 (Q4_0) or R80 (Q8_0) section, whose arrays are rp bytes apart. */
void kt__lf_gemm_raw_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                            const void *const *act, size_t rp, int M, float *C, int ldc);
/* Prefill GEMM for Q4_0 / Q8_0 / Q4_K over inputs [k0, k1): act[m] is token m's
 * Q8_0 / Q8_K blocks, ext[m] its per-32-inputs arrays (int32 offset or float
 * d * sum, then float d at + xs bytes). scratch: KT__LF_PANEL_SCRATCH bytes. */
void kt__lf_gemm_panel_avx512(int type, const void *W, size_t wrow, int n0, int n1, int k0,
                              int k1, const void *const *act, const void *const *ext, size_t xs,
                              int M, float *C, int ldc, void *scratch);
#define KT__LF_PANEL_SCRATCH (64 * 512 + 2 * 64 * 32 * 4)
/* Prefill GEMM on AVX2 for Q4_0..Q8_0, IQ4_NL, Q2_K..Q6_K, IQ4_XS over [k0, k1)
 * (multiples of 32 / 256) for M <= 256 tokens: act[m] is token m's Q8_0 / Q8_1 / Q8_K blocks,
 * ext[m] (ext or ext[m] NULL: none, the kernel sums them itself) its per-32-inputs arrays as
 * kt__lf_gemm_panel_avx512's (Q4_0, Q5_0, IQ4_NL: R40's, Q8_0: R80's, the K types and IQ4_XS:
 * Q8K's) (cpu/avx2/moe_llamafile_avx2.c). scratch: KT__LF_PANEL2_SCRATCH bytes. */
void kt__lf_gemm_panel_avx2(int type, const void *W, size_t wrow, int n0, int n1, int k0, int k1,
                            const void *const *act, const void *const *ext, size_t xs, int M,
                            float *C, int ldc, void *scratch);
#define KT__LF_PANEL2_SCRATCH (64 * 512 + 2 * 64 * 16 * 4 + 3 * 256 * 16 * 4 + 8 * 16 * 96)
/* Hint: this thread's next LLAMAFILE call (panel or decode tiles) will read bytes
 * [0, len) of rows [n0, n1) of W; the call before it starts them into L2 (two
 * hints kept, oldest first). */
void kt__lf_hint_avx512(const void *W, size_t wrow, int n0, int n1, size_t len);
/* The same for the K types and IQ4_XS over blocks [b0, b1) of 256; act[m] are Q8_K
 * block arrays. */
void kt__lf_gemm_k_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                          const void *const *act, int M, float *C, int ldc);
/* The same for Q4_1 / Q5_1 (act[m]: Q8_1 blocks) and Q5_0 (Q8_0 blocks) over blocks
 * [b0, b1) of 32. */
void kt__lf_gemm_q5_avx512(int type, const void *W, size_t wrow, int n0, int n1, int b0, int b1,
                           const void *const *act, int M, float *C, int ldc);
/* LLAMAFILE prefill on AMX-INT8 tiles (cpu/amx/moe_llamafile_amx.c; the AMX set of
 * kt__moe_llamafile_kernels, level 3): C[m][n - n0] = row n of the stored rows W (wrow
 * bytes) . token m over inputs [k0, k1) (multiples of 32, Q4_K / Q5_K / Q6_K of 256; k1 - k0
 * at most KT__LF_AMX_KMAX), M <= KT__LF_AMX_MMAX tokens: activation rows at A, a_stride
 * bytes apart (rows[m], or m), their Q8_0 blocks (Q4_K / Q5_K / Q6_K: Q8_K) q_off bytes in.
 * The ggml vec_dot's integer sums per block (K types: per super-block; exact), folded in
 * F32. scratch: KT__LF_AMX_SCRATCH bytes; the caller holds the AMX tile permission. */
#define KT__LF_AMX_KMAX 8192
#define KT__LF_AMX_MMAX 256
#define KT__LF_AMX_SCRATCH ((size_t)4 << 20)
_Bool kt__lf_amx_type(int type); /* Q4_0, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K */
_Bool kt__lf_amx_set(const kt__moe_kernels *k); /* whether k is an AMX LLAMAFILE set */
/* Hint: this thread's next kt__lf_gemm_amx call will read bytes [0, len) of rows
 * [n0, n1) of W; the call before it starts them into L2 (two hints kept, oldest first). */
void kt__lf_hint_amx(const void *W, size_t wrow, int n0, int n1, size_t len);
void kt__lf_gemm_amx(int type, const void *W, size_t wrow, int n0, int n1, int k0, int k1,
                     const void *A, size_t a_stride, const int32_t *rows, size_t q_off, int M,
                     float *C, int ldc, void *scratch);
/* nblocks Q8_0 (q81: Q8_1) activation blocks of x, bit for bit ggml's from_float. */
void kt__lf_quant_q8_avx512(const float *x, void *y, int nblocks, _Bool q81);
/* nblocks Q8_K blocks of x, bit for bit the reference quantizer. */
void kt__lf_quant_q8k_avx512(const float *x, void *y, int nblocks);
/* The same Q8_0 / Q8_1 and Q8_K blocks on AVX2 (cpu/avx2/ggml_avx2.c). */
void kt__lf_quant_q8_avx2(const float *x, void *y, int nblocks, _Bool q81);
void kt__lf_quant_q8k_avx2(const float *x, void *y, int nblocks);
/* The decode's per-32 arrays and Q40X codes beside Q8_K block q8k (sub-blocks sb0 ..
 * sb0 + 7 of nb; cpu/ref/moe_llamafile.c's Q8_K section), the Q6KX biases included. */
void kt__lf_q8k_extras_avx2(const void *q8k, int sb0, int nb, float *ds, float *d32,
                            int16_t *bs, uint8_t *codes, int16_t *b6lo, int16_t *b6hi);
/* Whether the AVX2 set quantizes with the two above (1, the default) or with the
 * scalar reference quantizers (0, KT_LF_QUANT=scalar); returns the setting before,
 * for the tests. */
int kt__lf_set_quant_avx2(int vec);

/* Shared scalar helpers (cpu/ref), used by every set for the Q8G32 format. */
void kt__moe_quant_f32(const float *x, int k0, int k1, int K, void *row);
void kt__moe_quant_bf16(const float *x, int k0, int k1, int K, void *row);
void kt__moe_quant_q8g32(const float *x, int k0, int k1, int K, void *row);
/* h[n] = silu(g[n]) u[n] for n < len, 16 lanes at a time (AVX-512F; the
 * backend's prefill activation). */
void kt__moe_silu_mul_avx512(const float *g, const float *u, float *h, int len);
/* The same 8 lanes at a time (AVX2 + FMA; cpu/avx2/moe_act_avx2.c). */
void kt__moe_silu_mul_avx2(const float *g, const float *u, float *h, int len);

/* KT_MOE_DECODE_READ's probe (for measuring): the sum mod 2^64 of the 64-bit
 * little-endian words of bytes [p, p + n), the last partial word zero-padded;
 * a plain read of the bytes a kernel would read (scalar in cpu/ref/moe_ref.c,
 * 8 accumulators of 4 / 8 lanes in moe_act_avx2.c / moe_act_avx512.c). */
uint64_t kt__moe_read_sum(const void *p, size_t n);
uint64_t kt__moe_read_sum_avx2(const void *p, size_t n);
uint64_t kt__moe_read_sum_avx512(const void *p, size_t n);

#endif /* KT_CPU_MOE_KERNELS_H */
