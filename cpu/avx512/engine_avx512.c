/* AVX-512 dense kernels of the engine: F32 activations times BF16 or F32
 * weights, F32 accumulation (exact widening of BF16, so results match the
 * scalar path up to summation order). */
#include <immintrin.h>
#include <stddef.h>

#include "engine_kernels.h"

/* 16 weights at w[c..c+16) (masked tail) widened to F32 */
static inline __m512 load_w_bf16(const uint16_t *w, __mmask16 m)
{
    __m256i h = _mm256_maskz_loadu_epi16(m, w);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m512 load_w_f32(const float *w, __mmask16 m)
{
    return _mm512_maskz_loadu_ps(m, w);
}

/* One block of R weight rows x TB tokens: R*TB accumulators over all columns.
 * The hot loop: per 16 columns, R weight loads, TB activation loads, R*TB FMAs. */
#define DEFINE_BLOCK(NAME, WT, LOAD)                                                       \
    static inline __attribute__((always_inline)) void NAME(                                \
        const float *x, int32_t cols, const WT *W, const float *bias, float *y,           \
        int32_t rows, int32_t r, int32_t t, const int R, const int TB)                     \
    {                                                                                      \
        __m512 acc[4][4];                                                                  \
        for (int i = 0; i < R; i++)                                                        \
            for (int j = 0; j < TB; j++)                                                   \
                acc[i][j] = _mm512_setzero_ps();                                           \
        for (int32_t c = 0; c < cols; c += 16) {                                           \
            __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff                               \
                                         : (__mmask16)((1u << (cols - c)) - 1u);           \
            __m512 xv[4], wv[4];                                                           \
            for (int j = 0; j < TB; j++)                                                   \
                xv[j] = _mm512_maskz_loadu_ps(m, x + (size_t)(t + j) * cols + c);          \
            for (int i = 0; i < R; i++)                                                    \
                wv[i] = LOAD(W + (size_t)(r + i) * cols + c, m);                           \
            for (int i = 0; i < R; i++)                                                    \
                for (int j = 0; j < TB; j++)                                               \
                    acc[i][j] = _mm512_fmadd_ps(wv[i], xv[j], acc[i][j]);                  \
        }                                                                                  \
        for (int i = 0; i < R; i++)                                                        \
            for (int j = 0; j < TB; j++)                                                   \
                y[(size_t)(t + j) * rows + r + i] =                                        \
                    _mm512_reduce_add_ps(acc[i][j]) + (bias ? bias[r + i] : 0.0f);         \
    }

DEFINE_BLOCK(block_bf16, uint16_t, load_w_bf16)
DEFINE_BLOCK(block_f32, float, load_w_f32)

/* Tiles of 32 tokens keep their activations in L2 while every row block of
 * W streams past them once per tile. */
#define DEFINE_LINEAR(NAME, BLOCK, WT)                                                     \
    void NAME(const float *x, int32_t T, int32_t rows, int32_t cols, const WT *W,          \
              const float *bias, float *y, int32_t r0, int32_t r1)                         \
    {                                                                                      \
        for (int32_t t0 = 0; t0 < T; t0 += 32) {                                           \
            int32_t t1 = T - t0 < 32 ? T : t0 + 32;                                        \
            int32_t r = r0;                                                                \
            for (; r + 4 <= r1; r += 4) {                                                  \
                int32_t t = t0;                                                            \
                for (; t + 4 <= t1; t += 4)                                                \
                    BLOCK(x, cols, W, bias, y, rows, r, t, 4, 4);                          \
                for (; t < t1; t++)                                                        \
                    BLOCK(x, cols, W, bias, y, rows, r, t, 4, 1);                          \
            }                                                                              \
            for (; r < r1; r++) {                                                          \
                int32_t t = t0;                                                            \
                for (; t + 4 <= t1; t += 4)                                                \
                    BLOCK(x, cols, W, bias, y, rows, r, t, 1, 4);                          \
                for (; t < t1; t++)                                                        \
                    BLOCK(x, cols, W, bias, y, rows, r, t, 1, 1);                          \
            }                                                                              \
        }                                                                                  \
    }

DEFINE_LINEAR(kt__engine_linear_bf16_avx512, block_bf16, uint16_t)
DEFINE_LINEAR(kt__engine_linear_f32_avx512, block_f32, float)

/* attention helpers: one score (q·k) and one value accumulation (o += p·v) */
float kt__engine_dot_avx512(const float *a, const float *b, int32_t n)
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                               acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void kt__engine_axpy_avx512(float *y, float s, const float *x, int32_t n)
{
    __m512 sv = _mm512_set1_ps(s);
    for (int32_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, x + i), yv));
    }
}

/* 16 E4M3 bytes widened to F32 exactly: a normal value S.EEEE.MMM becomes the
 * F32 with exponent E + 120 and mantissa MMM << 20; E = 0 is the subnormal
 * MMM · 2^-9. (0x7f / 0xff, the NaNs, do not occur in weights.) */
static inline __m512 fp8_to_f32(const uint8_t *p, __mmask16 m)
{
    __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
    __m512i em = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
    __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
    __mmask16 sub = _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x78)),
                                             _mm512_setzero_si512());
    __m512 subv = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(7))),
                                _mm512_set1_ps(1.0f / 512.0f));
    __m512 v = _mm512_mask_mov_ps(_mm512_castsi512_ps(normal), sub, subv);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

static inline float fp8_scale(const void *scale, int bf16, size_t i)
{
    if (bf16) {
        uint32_t u = (uint32_t)((const uint16_t *)scale)[i] << 16;
        float f;
        __builtin_memcpy(&f, &u, 4);
        return f;
    }
    return ((const float *)scale)[i];
}

/* 4 weight rows x up to 4 tokens per pass; the block scale is folded into the
 * widened weights once per 16 columns. The hot loop. */
void kt__engine_linear_fp8_avx512(const float *x, int32_t T, int32_t rows, int32_t cols,
                                  const uint8_t *W, const void *scale, int scale_bf16,
                                  int32_t br, int32_t bc, int32_t scale_cols, const float *bias,
                                  float *y, int32_t r0, int32_t r1)
{
    for (int32_t t0 = 0; t0 < T; t0 += 4) {
        int TB = T - t0 < 4 ? T - t0 : 4;
        for (int32_t r = r0; r < r1; r += 4) {
            int R = r1 - r < 4 ? r1 - r : 4;
            __m512 acc[4][4];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = _mm512_setzero_ps();
            for (int32_t c = 0; c < cols; c += 16) {
                __mmask16 m = cols - c >= 16 ? (__mmask16)0xffff
                                             : (__mmask16)((1u << (cols - c)) - 1u);
                __m512 xv[4], wv[4];
                for (int j = 0; j < TB; j++)
                    xv[j] = _mm512_maskz_loadu_ps(m, x + (size_t)(t0 + j) * cols + c);
                for (int i = 0; i < R; i++) {
                    float s = fp8_scale(scale, scale_bf16,
                                        (size_t)((r + i) / br) * scale_cols + (size_t)(c / bc));
                    wv[i] = _mm512_mul_ps(fp8_to_f32(W + (size_t)(r + i) * cols + c, m),
                                          _mm512_set1_ps(s));
                }
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < TB; j++)
                        acc[i][j] = _mm512_fmadd_ps(wv[i], xv[j], acc[i][j]);
            }
            for (int i = 0; i < R; i++)
                for (int j = 0; j < TB; j++)
                    y[(size_t)(t0 + j) * rows + r + i] =
                        _mm512_reduce_add_ps(acc[i][j]) + (bias ? bias[r + i] : 0.0f);
        }
    }
}

void kt__engine_row_bf16_avx512(const uint16_t *w, int32_t n, float *out)
{
    for (int32_t c = 0; c < n; c += 16) {
        __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1u);
        _mm512_mask_storeu_ps(out + c, m, load_w_bf16(w + c, m));
    }
}

void kt__engine_row_fp8_avx512(const uint8_t *w, int32_t n, const float *scales, int32_t bc,
                               float *out)
{
    for (int32_t c = 0; c < n; c += 16) {
        __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1u);
        __m512 v = _mm512_mul_ps(fp8_to_f32(w + c, m), _mm512_set1_ps(scales[c / bc]));
        _mm512_mask_storeu_ps(out + c, m, v);
    }
}
