/*
 * moe_port_probe: cycles per zmm instruction of the operations the AVX-512
 * MoE decode kernels are made of, alone and in pairs, on one thread (CPU
 * seconds at the clock in KT_BENCH_GHZ, default 3.65). Eight independent
 * chains per operation, so the figures are throughputs: 1.00 = one per
 * cycle, 0.50 = two; a pair at 0.50 runs on separate pipes, at 1.00 on one.
 * A developer's probe (docs/moe.md, session 8), not a kernel.
 *
 *   gcc -O2 -march=native scripts/moe_port_probe.c -o moe_port_probe
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 100000000L

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* one operation on 8 chains: a = OP(a) with loop-invariant t, u */
#define ONE(NAME, OP)                                                                          \
    __attribute__((noinline)) static void NAME(__m512i *io)                                    \
    {                                                                                          \
        __m512i a[8], t = io[8], u = io[9];                                                    \
        for (int i = 0; i < 8; i++)                                                            \
            a[i] = io[i];                                                                      \
        (void)t, (void)u;                                                                      \
        for (long n = 0; n < N / 8; n++)                                                       \
            _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) a[i] = OP(a[i], t, u);         \
        for (int i = 0; i < 8; i++)                                                            \
            io[i] = a[i];                                                                      \
    }
/* two operations, 4 chains each, issued alternately */
#define TWO(NAME, OP1, OP2)                                                                    \
    __attribute__((noinline)) static void NAME(__m512i *io)                                    \
    {                                                                                          \
        __m512i a[8], t = io[8], u = io[9];                                                    \
        for (int i = 0; i < 8; i++)                                                            \
            a[i] = io[i];                                                                      \
        (void)t, (void)u;                                                                      \
        for (long n = 0; n < N / 8; n++)                                                       \
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                              \
                a[i] = OP1(a[i], t, u);                                                        \
                a[i + 4] = OP2(a[i + 4], t, u);                                                \
            }                                                                                  \
        for (int i = 0; i < 8; i++)                                                            \
            io[i] = a[i];                                                                      \
    }

#define DPBUSD(a, t, u) _mm512_dpbusd_epi32(a, t, u)
#define DPBF16(a, t, u) ((__m512i)_mm512_dpbf16_ps((__m512)(a), (__m512bh)(t), (__m512bh)(u)))
#define PERMT2B(a, t, u) _mm512_permutex2var_epi8(t, a, u)
#define PERMB(a, t, u) _mm512_permutexvar_epi8(a, t)
#define UNPCK(a, t, u) _mm512_unpacklo_epi8(a, t)
#define PERMW(a, t, u) _mm512_permutexvar_epi16(a, t)
#define PERMPS(a, t, u) _mm512_castps_si512(_mm512_permutexvar_ps(a, _mm512_castsi512_ps(t)))
#define ZXBW(a, t, u) _mm512_cvtepu8_epi16(_mm512_castsi512_si256(a))
#define SRLW(a, t, u) _mm512_srli_epi16(a, 4)
#define SRAW(a, t, u) _mm512_srai_epi16(a, 4)
#define SLLW(a, t, u) _mm512_slli_epi16(a, 8)
#define AND(a, t, u) _mm512_and_si512(a, t)
#define TERN(a, t, u) _mm512_ternarylogic_epi32(a, t, u, 0x78)
#define GF2P8(a, t, u) _mm512_gf2p8affine_epi64_epi8(a, t, 0)
#define CVT(a, t, u) _mm512_castps_si512(_mm512_cvtepi32_ps(a))
#define ADD(a, t, u) _mm512_add_epi32(a, t)
#define SHUF128(a, t, u) _mm512_shuffle_i32x4(a, t, 0x88)
#define FMA(a, t, u)                                                                           \
    _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(t),        \
                                        _mm512_castsi512_ps(u)))

ONE(o_dpbusd, DPBUSD)
ONE(o_dpbf16, DPBF16)
ONE(o_permt2b, PERMT2B)
ONE(o_permb, PERMB)
ONE(o_unpck, UNPCK)
ONE(o_permw, PERMW)
ONE(o_permps, PERMPS)
ONE(o_zxbw, ZXBW)
ONE(o_srlw, SRLW)
ONE(o_sraw, SRAW)
ONE(o_sllw, SLLW)
ONE(o_and, AND)
ONE(o_tern, TERN)
ONE(o_gf2p8, GF2P8)
ONE(o_cvt, CVT)
ONE(o_fma, FMA)
ONE(o_add, ADD)
ONE(o_shuf128, SHUF128)
TWO(p_dpbusd_and, DPBUSD, AND)
TWO(p_dpbusd_unpck, DPBUSD, UNPCK)
TWO(p_dpbusd_srlw, DPBUSD, SRLW)
TWO(p_dpbusd_gf2p8, DPBUSD, GF2P8)
TWO(p_dpbusd_fma, DPBUSD, FMA)
/* the prefill tiles' other work next to their products: RAWINT4's scale step
 * (vcvtdq2ps, the exponent add), the transposes' shuffles */
TWO(p_dpbusd_cvt, DPBUSD, CVT)
TWO(p_dpbusd_add, DPBUSD, ADD)
TWO(p_dpbusd_shuf128, DPBUSD, SHUF128)
TWO(p_dpbf16_unpck, DPBF16, UNPCK)
TWO(p_dpbf16_tern, DPBF16, TERN)
TWO(p_permt2b_dpbf16, PERMT2B, DPBF16)
TWO(p_permt2b_unpck, PERMT2B, UNPCK)
TWO(p_permw_dpbf16, PERMW, DPBF16)
TWO(p_sraw_dpbf16, SRAW, DPBF16)
TWO(p_and_dpbf16, AND, DPBF16)
TWO(p_sraw_and, SRAW, AND)

/* Weights and activations in L1 for the FP8 sequences below. */
static uint8_t l1_w[16384] __attribute__((aligned(64)));
static uint16_t l1_x[8192] __attribute__((aligned(64)));
static uint16_t l1_chunk[8192] __attribute__((aligned(64)));

/* 64 E4M3 bytes -> 64 BF16 (u[0], u[1]): the tables (cpu/avx512/moe_avx512.c
 * fp8x64_bf16, table contents aside) or the shifts (fp8x64_shift: 3 shifts,
 * 2 ands; the even / odd order). */
static inline __attribute__((always_inline)) void decode64(__m512i v, int shifts, __m512i *u)
{
    __asm__("" : "+v"(v)); /* one load, as in the kernels */
    if (shifts) {
        const __m512i keep = _mm512_set1_epi16((short)0x87f0);
        u[0] = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 4), keep);
        u[1] = _mm512_and_si512(_mm512_srai_epi16(v, 4), keep);
    } else {
        __m512i hi = _mm512_permutex2var_epi8(_mm512_set1_epi8(0x3c), v, _mm512_set1_epi8(0x40));
        __m512i lo = _mm512_permutex2var_epi8(_mm512_set1_epi8(0x10), v, _mm512_set1_epi8(0x20));
        hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0x78);
        u[0] = _mm512_unpacklo_epi8(lo, hi);
        u[1] = _mm512_unpackhi_epi8(lo, hi);
    }
}

/* The FP8 decode's sequence per 64 weights: decode64 and one token's two dot
 * products. */
static inline __attribute__((always_inline)) float fp8_sequence(long reps, int shifts)
{
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (long r = 0; r < reps; r++)
        for (int i = 0; i < 16384; i += 128)
            for (int j = 0; j < 2; j++) {
                __m512i u[2];
                decode64(_mm512_load_si512(l1_w + i + 64 * j), shifts, u);
                const uint16_t *x = l1_x + (i + 64 * j) % 8192;
                acc[2 * j] = _mm512_dpbf16_ps(acc[2 * j], (__m512bh)u[0],
                                              (__m512bh)_mm512_load_si512(x));
                acc[2 * j + 1] = _mm512_dpbf16_ps(acc[2 * j + 1], (__m512bh)u[1],
                                                  (__m512bh)_mm512_load_si512(x + 32));
            }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* The FP8 prefill's chunk decode per 64 weights: decode64 and 2 stores into an
 * L1 chunk. */
static inline __attribute__((always_inline)) float fp8_chunk(long reps, int shifts)
{
    for (long r = 0; r < reps; r++)
        for (int i = 0; i < 16384; i += 64) {
            __m512i u[2];
            decode64(_mm512_load_si512(l1_w + i), shifts, u);
            _mm512_store_si512(l1_chunk + (i % 8192), u[0]);
            _mm512_store_si512(l1_chunk + (i % 8192) + 32, u[1]);
        }
    return (float)l1_chunk[7];
}

/* each with its decode fixed at compile time */
__attribute__((noinline)) static float seq_tables(long reps)
{
    return fp8_sequence(reps, 0);
}
__attribute__((noinline)) static float seq_shifts(long reps)
{
    return fp8_sequence(reps, 1);
}
__attribute__((noinline)) static float chunk_tables(long reps)
{
    return fp8_chunk(reps, 0);
}
__attribute__((noinline)) static float chunk_shifts(long reps)
{
    return fp8_chunk(reps, 1);
}

int main(void)
{
    static const struct {
        const char *name;
        void (*f)(__m512i *);
    } rows[] = {{"vpdpbusd", o_dpbusd},          {"vdpbf16ps", o_dpbf16},
                {"vpermt2b", o_permt2b},         {"vpermb", o_permb},
                {"vpunpcklbw", o_unpck},         {"vpsrlw", o_srlw},
                {"vpermw", o_permw},             {"vpermps", o_permps},
                {"vpmovzxbw", o_zxbw},
                {"vpandd", o_and},               {"vpternlogd", o_tern},
                {"vgf2p8affineqb", o_gf2p8},     {"vcvtdq2ps", o_cvt},
                {"vfmadd", o_fma},               {"vpaddd", o_add},
                {"vshufi32x4", o_shuf128},       {"vpdpbusd + vpandd", p_dpbusd_and},
                {"vpdpbusd + vpunpck", p_dpbusd_unpck}, {"vpdpbusd + vpsrlw", p_dpbusd_srlw},
                {"vpdpbusd + gf2p8", p_dpbusd_gf2p8},   {"vpdpbusd + vfmadd", p_dpbusd_fma},
                {"vpdpbusd + vcvtdq2ps", p_dpbusd_cvt}, {"vpdpbusd + vpaddd", p_dpbusd_add},
                {"vpdpbusd + vshufi32x4", p_dpbusd_shuf128},
                {"vdpbf16ps + vpunpck", p_dpbf16_unpck},
                {"vdpbf16ps + vpternlogd", p_dpbf16_tern},
                {"vpermt2b + vdpbf16ps", p_permt2b_dpbf16},
                {"vpermt2b + vpunpck", p_permt2b_unpck},
                {"vpermw + vdpbf16ps", p_permw_dpbf16},
                {"vpsraw", o_sraw},              {"vpsllw", o_sllw},
                {"vpsraw + vdpbf16ps", p_sraw_dpbf16},
                {"vpandd + vdpbf16ps", p_and_dpbf16},
                {"vpsraw + vpandd", p_sraw_and}};
    const char *ghz = getenv("KT_BENCH_GHZ");
    double hz = (ghz ? atof(ghz) : 3.65) * 1e9;
    __m512i io[10];
    for (int i = 0; i < 10; i++)
        io[i] = _mm512_set1_epi32(0x01020304 + i);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = cpu_now();
            rows[r].f(io);
            double t = cpu_now() - t0;
            best = t < best ? t : best;
        }
        printf("%-22s %.2f cycles per instruction\n", rows[r].name, best * hz / (double)N);
    }
    static const struct {
        const char *name;
        float (*f)(long);
    } seqs[] = {{"FP8 decode sequence", seq_tables},
                {"FP8 shift sequence", seq_shifts},
                {"FP8 chunk, tables", chunk_tables},
                {"FP8 chunk, shifts", chunk_shifts}};
    float sink = 0;
    for (size_t q = 0; q < sizeof seqs / sizeof seqs[0]; q++) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = cpu_now();
            sink += seqs[q].f(20000);
            double t = cpu_now() - t0;
            best = t < best ? t : best;
        }
        printf("%-22s %.2f cycles per 64 weights\n", seqs[q].name,
               best * hz / (20000.0 * 16384 / 64));
    }
    return _mm512_reduce_add_epi32(io[0]) == 7 || sink == 1.0f;
}
