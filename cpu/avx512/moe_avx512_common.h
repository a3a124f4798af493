/*
 * Helpers shared by the AVX-512 MoE kernel files (moe_avx512.c, the default
 * sets; moe_x2_avx512.c, the BF16X2 sets). Include only from code compiled
 * with the AVX-512 BF16 flags.
 */
#ifndef KT_CPU_MOE_AVX512_COMMON_H
#define KT_CPU_MOE_AVX512_COMMON_H

#include <immintrin.h>
#include <stdlib.h>

#include "moe_kernels.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline int imin(int a, int b)
{
    return a < b ? a : b;
}

/* Activation row m of A: rows[m] when gathered, else m. */
static inline const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

static inline __mmask32 tail32(int left)
{
    return left >= 32 ? (__mmask32)0xffffffffu
                      : (left <= 0 ? (__mmask32)0 : (__mmask32)((1u << left) - 1u));
}

static inline __mmask64 tail64(int left)
{
    return left >= 64 ? ~(__mmask64)0 : (left <= 0 ? 0 : (((__mmask64)1 << left) - 1));
}

/* C[i][c0 + r] = t[i * 4 + r] for M tokens and nr rows of a 4-row tile. */
static inline void store_tile(float *C, int ldc, int c0, const float *t, int M, int nr)
{
    for (int i = 0; i < M; i++)
        for (int r = 0; r < nr; r++)
            C[(size_t)i * ldc + c0 + r] = t[i * 4 + r];
}

/* The sums of 4 vectors, as one 4-float vector (4 rows of one token). */
ALWAYS_INLINE __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
    __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
    __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
    __m256 ab = _mm256_hadd_ps(a8, b8), cd = _mm256_hadd_ps(c8, d8);
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* High and low bytes of the BF16 of each E4M3 magnitude 0..127 (127 = NaN). */
static const uint8_t e4m3_hi[128] = {
    0x00, 0x3b, 0x3b, 0x3b, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c, 0x3c,
    0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d, 0x3d,
    0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e, 0x3e,
    0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f,
    0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
    0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41,
    0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42,
    0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x7f};
static const uint8_t e4m3_lo[128] = {
    0x00, 0x00, 0x80, 0xc0, 0x00, 0x20, 0x40, 0x60, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0,
    0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xc0};

/* The two tables in registers: h0 / h1 and l0 / l1 (entries 0..63, 64..127). */
typedef struct lut8 {
    __m512i h0, h1, l0, l1;
} lut8;

ALWAYS_INLINE lut8 lut_load(void)
{
    lut8 L;
    L.h0 = _mm512_loadu_si512(e4m3_hi);
    L.h1 = _mm512_loadu_si512(e4m3_hi + 64);
    L.l0 = _mm512_loadu_si512(e4m3_lo);
    L.l1 = _mm512_loadu_si512(e4m3_lo + 64);
    return L;
}

/* Decode (rows read start to end): the software prefetch distance in bytes.
 * The best one depends on the memory system, measured:
 *  - Zen 4 (2-core EPYC VM, one core, K 7168 FP8 rows): 1 KiB 0.84 of a read
 *    loop, 2 KiB 0.57, 4 KiB 0.74 (K 2048): DEC_PF;
 *  - Sapphire Rapids (16-core Xeon VM, kt-bench moe DeepSeek-V3, T=1): 1 KiB
 *    BF16 0.91-0.92 / FP8 0.78-0.82 of stream, 8 KiB 1.18 / 1.05: DEC_PF_INTEL
 *    (its mesh's longer latency needs more bytes in flight per core);
 *  - xeon2 (2-core AMX Xeon VM, 2 threads, kt-bench moe, session 17): 8 KiB
 *    FP8 0.88-0.90 / BF16 0.88-0.91 of stream, 2-3 KiB 1.01-1.07 / 0.93-1.02
 *    (Qwen3-30B-A3B and DeepSeek-V3 shapes): DEC_PF_INTEL_FEW on Intel CPUs
 *    with at most KT__FEW_CPUS online (2 and 16 measured, none between).
 * KT_MOE_DEC_PF (64 B to 1 MiB) overrides them, for measuring. */
#define DEC_PF 1024
#define DEC_PF_INTEL 8192
#define DEC_PF_INTEL_FEW 3072

/* KT_MOE_DEC_PF's distance, 64 B to 1 MiB; 0: unset or out of that range */
static inline long dec_pf_env(const char *e)
{
    long n = e ? atol(e) : 0;
    return n >= 64 && n <= (1L << 20) ? n : 0;
}

static inline long parse_dec_pf(const char *e)
{
    if (dec_pf_env(e))
        return dec_pf_env(e);
    __builtin_cpu_init();
    if (!__builtin_cpu_is("intel"))
        return DEC_PF;
    return kt__few_core_intel() ? DEC_PF_INTEL_FEW : DEC_PF_INTEL;
}

static inline size_t dec_pf(void)
{
    static long cached;
    return (size_t)env_knob(&cached, "KT_MOE_DEC_PF", parse_dec_pf);
}

/* Decode that spends more time per weight byte (FP8 at 2-3 tokens, BF16 at
 * 3-4) reads memory best with its prefetch further ahead: one Zen 4 core,
 * 256-row blocks, x read loop, 1 KiB -> 8 KiB (2026-11-30 15:16, load 7-9):
 * FP8 K 2048 2 / 3 tokens 0.62 / 0.37 -> 0.87 / 0.73, K 768 0.49 / 0.36 ->
 * 0.70 / 0.60; BF16 K 2048 3 / 4 tokens 0.76-0.78 / 0.60-0.64 -> 0.86-0.89 /
 * 0.83-0.88 (at 2 tokens 0.96 -> 0.80: BF16 keeps dec_pf there, and one
 * token everywhere). KT_MOE_DEC_PF sets both. */
#define DEC_PF_SLOW 8192

static inline long parse_dec_pf_slow(const char *e)
{
    return dec_pf_env(e) ? dec_pf_env(e) : DEC_PF_SLOW;
}

static inline size_t dec_pf_slow(void)
{
    static long cached;
    return (size_t)env_knob(&cached, "KT_MOE_DEC_PF", parse_dec_pf_slow);
}

/* Decode (one token): weight rows read side by side, 1 (default: one
 * sequential stream per item, the prefetchers' best case on Zen 4), 2 or 4;
 * KT_MOE_DEC_ROWS, for measuring. */
static inline long parse_dec_rows(const char *e)
{
    int n = e ? atoi(e) : 0;
    return n == 2 || n == 4 ? n : 1;
}

static inline int dec_rows(void)
{
    static long cached;
    return (int)env_knob(&cached, "KT_MOE_DEC_ROWS", parse_dec_rows);
}

#endif
