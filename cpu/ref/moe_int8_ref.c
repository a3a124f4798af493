/* Scalar AMXINT8 kernel (the oracle): W = q * scale[row], q int8 [rows][cols],
 * scale F32 [rows]; F32 activations. */
#include "moe_kernels.h"

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

/* C[m][n - n0] = scale[n] * sum_{k0 <= k < k1} a_m[k] q[n][k] */
static void gemm_int8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *a_rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    const int8_t *q = W->w;
    const float *scale = W->scale;
    for (int m = 0; m < M; m++) {
        const float *a = arow(A, a_stride, a_rows, m);
        for (int n = n0; n < n1; n++) {
            const int8_t *row = q + (size_t)n * W->cols;
            double acc = 0.0;
            for (int k = k0; k < k1; k++)
                acc += (double)a[k] * row[k];
            C[(size_t)m * ldc + (n - n0)] = (float)(acc * scale[n]);
        }
    }
}

static const kt__moe_kernels ref_int8 = {"scalar", KT__ACT_F32, kt__moe_quant_f32, gemm_int8, 0,
                                         NULL};

const kt__moe_kernels *kt__moe_int8_ref(void)
{
    return &ref_int8;
}
