/* Scalar AMXINT4 kernel for any group size (the oracle of the grouped INT4
 * kernels, and their fallback without AVX-512): packed nibbles v + 8, one
 * BF16 scale per group of W->group inputs; F32 activations. */
#include "moe_kernels.h"

/* C[m][n - n0] = sum_g s[n][g] sum_{k in g, k0 <= k < k1} a_m[k] v[n][k] */
static void gemm_int4g(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                       size_t a_stride, const int32_t *a_rows, int M, float *C, int ldc,
                       void *scratch)
{
    (void)scratch;
    const uint32_t *w = W->w;
    const uint16_t *sc = W->scale;
    int K = W->cols, G = W->group ? W->group : 32;
    for (int m = 0; m < M; m++) {
        const float *a = (const float *)((const char *)A +
                                         (size_t)(a_rows ? a_rows[m] : m) * a_stride);
        for (int n = n0; n < n1; n++) {
            const uint32_t *wr = w + (size_t)n * (K / 8);
            double acc = 0.0;
            for (int g = k0 / G; g * G < k1; g++) {
                double part = 0.0;
                for (int k = g * G > k0 ? g * G : k0; k < (g + 1) * G && k < k1; k++)
                    part += (double)a[k] * ((int)((wr[k / 8] >> (4 * (k % 8))) & 0xfu) - 8);
                acc += part * kt__moe_bf16_f32(sc[(size_t)n * (K / G) + g]);
            }
            C[(size_t)m * ldc + (n - n0)] = (float)acc;
        }
    }
}

static const kt__moe_kernels ref_int4g = {"scalar-int4g", KT__ACT_F32, kt__moe_quant_f32,
                                          gemm_int4g, 0, NULL};

const kt__moe_kernels *kt__moe_int4g_ref(void)
{
    return &ref_int4g;
}
