/*
 * Scalar reference of the ggml (GGUF) block types: dequantize, quantize and
 * the decode-time dot product, bit-compatible with ggml. Internal; the oracle
 * for the SIMD kernels of the LLAMAFILE method and the writer of kt-convert.
 *
 * A row of n elements (n a multiple of the type's block size) is n / block
 * blocks stored back to back. Byte layouts (little endian, "half" = IEEE
 * binary16; QK_K = 256; every scale below multiplies the integer code):
 *
 *   Q4_0   18 B / 32: half d; u8 qs[16]          x[j] = d*((qs[j]&15)-8),
 *                                               x[j+16] = d*((qs[j]>>4)-8)
 *   Q4_1   20 B / 32: half d, m; u8 qs[16]        x = d*q + m
 *   Q5_0   22 B / 32: half d; u8 qh[4]; u8 qs[16] bit 4 of code j in bit j of qh; x = d*(code-16)
 *   Q5_1   24 B / 32: half d, m; u8 qh[4]; u8 qs[16]
 *   Q8_0   34 B / 32: half d; i8 qs[32]
 *   Q8_1   36 B / 32: half d, s (= d * sum qs); i8 qs[32]
 *   Q2_K   84 B / 256: u8 scales[16] (lo: scale, hi: min, 4 bits); u8 qs[64] (2 bits);
 *                      half d, dmin           x = d*sc*q - dmin*m, 16 groups of 16
 *   Q3_K  110 B / 256: u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 x 6 bits, -32);
 *                      half d                 x = d*sc*(q - (hbit ? 0 : 4))
 *   Q4_K  144 B / 256: half d, dmin; u8 scales[12] (8 x (6-bit scale, 6-bit min));
 *                      u8 qs[128]             x = d*sc*q - dmin*m, 8 groups of 32
 *   Q5_K  176 B / 256: half d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 *   Q6_K  210 B / 256: u8 ql[128]; u8 qh[64]; i8 scales[16]; half d    x = d*sc*(q - 32)
 *   Q8_K  292 B / 256: f32 d; i8 qs[256]; i16 bsums[16] (sums of 16 codes)
 *   IQ4_NL 18 B / 32: half d; u8 qs[16]       x = d*kvalues[code] (non-linear 4-bit grid)
 *   IQ4_XS 136 B / 256: half d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
 *                      x = d*(ls-32)*kvalues[code], 6-bit ls per 32
 *   F32, F16, BF16: plain elements (block size 1).
 *
 * Dot products take a weight row of type X and an activation row quantized
 * to X's partner (kt__ggml_vec_dot_type): Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1
 * for Q4_1/Q5_1, Q8_K for the K types and IQ4_XS, itself for F32/F16/BF16.
 * Integer sums are exact; the float accumulation order may differ from
 * ggml's SIMD code (relative differences ~1e-6).
 */
#ifndef KT_CPU_REF_GGML_QUANTS_H
#define KT_CPU_REF_GGML_QUANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kt/types.h"

#define KT_QK4_0 32
#define KT_QK_K 256

/* Block structs, exactly as stored in GGUF files. */
typedef struct { uint16_t d; uint8_t qs[16]; } kt_block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } kt_block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } kt_block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } kt_block_q5_1;
typedef struct { uint16_t d; int8_t qs[32]; } kt_block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[32]; } kt_block_q8_1;
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } kt_block_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; }
    kt_block_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } kt_block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }
    kt_block_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; }
    kt_block_q6_K;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } kt_block_q8_K;
typedef struct { uint16_t d; uint8_t qs[16]; } kt_block_iq4_nl;
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; }
    kt_block_iq4_xs;

/* The 16 levels of IQ4_NL / IQ4_XS. */
extern const int8_t kt__iq4nl_values[16];

/* f16 <-> f32 as ggml converts them (round to nearest even, subnormals kept);
 * bf16 from f32 rounds to nearest even, NaN stays NaN. */
float kt__ggml_f16_to_f32(uint16_t h);
uint16_t kt__ggml_f32_to_f16(float f);
float kt__ggml_bf16_to_f32(uint16_t h);
uint16_t kt__ggml_f32_to_bf16(float f);

typedef void (*kt_ggml_to_float_fn)(const void *blocks, float *y, int64_t n);
typedef void (*kt_ggml_from_float_fn)(const float *x, void *blocks, int64_t n);
/* Dot product of n elements: x (blocks of the weight type) . y (blocks of its
 * vec_dot type). */
typedef float (*kt_ggml_vec_dot_fn)(int64_t n, const void *x, const void *y);

/* One traits entry per block type (K30). */
typedef struct kt_ggml_traits {
    kt_type type;
    const char *name;                 /* ggml spelling: "q4_K"                          */
    uint32_t block_size;              /* elements per block                             */
    uint32_t block_bytes;             /* bytes per block                                */
    kt_type vec_dot_type;             /* partner type of the activation                 */
    kt_ggml_to_float_fn to_float;     /* dequantize                                     */
    kt_ggml_from_float_fn quantize;   /* ggml's reference quantizer (GGUF writing)      */
    kt_ggml_from_float_fn from_float; /* activation quantizer as ggml's CPU backend
                                         (for the vec_dot types; else NULL)             */
    kt_ggml_vec_dot_fn vec_dot;       /* NULL for Q8_1 / Q8_K (activation-only types)   */
} kt_ggml_traits;

/* The entry of `type`, or NULL when it is not a ggml block or plain float type. */
const kt_ggml_traits *kt__ggml_traits(kt_type type);

/* Bytes of one row of n elements (0 if n is not a multiple of the block size). */
size_t kt__ggml_row_bytes(kt_type type, int64_t n);

/* SIMD dot products (cpu/avx2, cpu/avx512), same contract as the traits'
 * vec_dot. Call only after kt_hw_isa() reported AVX2 + FMA, respectively
 * AVX512F/BW/VL/DQ + VNNI. */
float kt__ggml_vec_dot_q4_0_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q8_0_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q4_K_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q6_K_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q4_1_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q5_0_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q5_1_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_iq4_nl_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_iq4_xs_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q5_K_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q2_K_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q3_K_avx2(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q4_0_avx512(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q8_0_avx512(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q4_K_avx512(int64_t n, const void *x, const void *y);
float kt__ggml_vec_dot_q6_K_avx512(int64_t n, const void *x, const void *y);

/* Q4_K / Q5_K: scale and min of sub-block j (0..7) from a block's 12 scale bytes. */
void kt__ggml_k4_scale_min(int j, const uint8_t *s, int *sc, int *m);

/* Where the SIMD variants come from. */
typedef enum kt_ggml_isa { KT_GGML_SCALAR = 0, KT_GGML_AVX2 = 1, KT_GGML_AVX512 = 2 } kt_ggml_isa;

/* The vec_dot of `type` for an ISA level: the best variant at or below `isa`
 * that this build has (falling back to the scalar reference); NULL if the
 * type has no vec_dot. kt__ggml_vec_dot_best() picks the level from
 * kt_hw_isa() (so KT_ISA_MAX caps it). Thread-safe. */
kt_ggml_vec_dot_fn kt__ggml_vec_dot_for(kt_type type, kt_ggml_isa isa);
kt_ggml_vec_dot_fn kt__ggml_vec_dot_best(kt_type type);
/* The level kt__ggml_vec_dot_best() uses on this CPU. */
kt_ggml_isa kt__ggml_isa_best(void);

#endif /* KT_CPU_REF_GGML_QUANTS_H */
