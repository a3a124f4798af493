/* Dense kernels of the inference engine (lib/engine), one set per ISA.
 * Internal; not installed. Call an ISA variant only after kt_hw_isa() says
 * the CPU and OS support it. */
#ifndef KT_CPU_ENGINE_KERNELS_H
#define KT_CPU_ENGINE_KERNELS_H

#include <stdint.h>

/* y[t][r] = Σ_c x[t][c] · W[r][c] + bias[r] (bias may be NULL), for rows
 * r0 <= r < r1 of W [rows][cols]; y has row stride `rows`. W is BF16 or F32.
 * AVX-512F + AVX-512BW. */
void kt__engine_linear_bf16_avx512(const float *x, int32_t T, int32_t rows, int32_t cols,
                                   const uint16_t *W, const float *bias, float *y, int32_t r0,
                                   int32_t r1);
void kt__engine_linear_f32_avx512(const float *x, int32_t T, int32_t rows, int32_t cols,
                                  const float *W, const float *bias, float *y, int32_t r0,
                                  int32_t r1);

/* FP8 E4M3 weights [rows][cols] with block scales: w = fp8 · scale[r / br][c / bc]
 * (scale F32, or BF16 when scale_bf16); bc must be a multiple of 16. Rows
 * r0 <= r < r1; y row stride `rows`. AVX-512F + AVX-512BW. */
void kt__engine_linear_fp8_avx512(const float *x, int32_t T, int32_t rows, int32_t cols,
                                  const uint8_t *W, const void *scale, int scale_bf16,
                                  int32_t br, int32_t bc, int32_t scale_cols, const float *bias,
                                  float *y, int32_t r0, int32_t r1);

/* out[c] = W[c] widened to F32 over one row of n values: BF16, or E4M3 times
 * the row's block scales scales[c / bc] (F32; bc a multiple of 16). */
void kt__engine_row_bf16_avx512(const uint16_t *w, int32_t n, float *out);
void kt__engine_row_fp8_avx512(const uint8_t *w, int32_t n, const float *scales, int32_t bc,
                               float *out);

/* Σ a[i]·b[i] over n F32 values (AVX-512F). */
float kt__engine_dot_avx512(const float *a, const float *b, int32_t n);
/* y[i] += s · x[i] over n F32 values (AVX-512F). */
void kt__engine_axpy_avx512(float *y, float s, const float *x, int32_t n);

#endif /* KT_CPU_ENGINE_KERNELS_H */
