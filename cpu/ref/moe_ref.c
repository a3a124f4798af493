/* Scalar MoE kernels: the oracle every SIMD kernel is tested against. */
#include <math.h>
#include <stdlib.h>

#include "moe_kernels.h"

/* ---- activation formats ---- */

void kt__moe_quant_f32(const float *x, int k0, int k1, int K, void *row)
{
    (void)K;
    memcpy((float *)row + k0, x + k0, (size_t)(k1 - k0) * sizeof(float));
}

void kt__moe_quant_bf16(const float *x, int k0, int k1, int K, void *row)
{
    (void)K;
    uint16_t *r = row;
    for (int k = k0; k < k1; k++)
        r[k] = kt__moe_f32_bf16(x[k]);
}

/* 0: not read yet, 1: exact scales (the default), 2: powers of two */
static int q8_mode;

int kt__moe_q8_pow2(void)
{
    int v = __atomic_load_n(&q8_mode, __ATOMIC_RELAXED);
    if (!v) {
        const char *e = getenv("KT_MOE_Q8_POW2");
        v = e && *e && strcmp(e, "0") != 0 ? 2 : 1;
        __atomic_store_n(&q8_mode, v, __ATOMIC_RELAXED);
    }
    return v == 2;
}

void kt__moe_q8_set_pow2(int on)
{
    __atomic_store_n(&q8_mode, on ? 2 : 1, __ATOMIC_RELAXED);
}

int32_t kt__moe_q8g32_group(const float *x, int8_t *q, float *d)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    float dg = kt__moe_q8_pow2() ? kt__moe_pow2_ceil(amax / 127.0f) : amax / 127.0f;
    float inv = dg > 0.0f ? 1.0f / dg : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 32; i++) {
        int v = (int)nearbyintf(x[i] * inv);
        v = v > 127 ? 127 : (v < -127 ? -127 : v);
        q[i] = (int8_t)v;
        sum += v;
    }
    *d = dg;
    return sum;
}

/* Per group of 32 (kt__moe_q8g32_group): q, d, s = 8 * sum(q). */
void kt__moe_quant_q8g32(const float *x, int k0, int k1, int K, void *row)
{
    int8_t *q = row;
    float *d = (float *)(q + K);
    int32_t *s = (int32_t *)(d + K / 32);
    for (int g = k0 / 32; g < k1 / 32; g++) {
        int32_t sum = kt__moe_q8g32_group(x + g * 32, q + g * 32, &d[g]);
        s[g] = 8 * sum;
    }
}

static const void *arow(const void *A, size_t stride, const int32_t *rows, int m)
{
    return (const char *)A + (size_t)(rows ? rows[m] : m) * stride;
}

/* ---- BF16: C = A W^T, F32 activations ---- */
static void gemm_bf16(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *a_rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    const uint16_t *w = W->w;
    for (int m = 0; m < M; m++) {
        const float *a = arow(A, a_stride, a_rows, m);
        for (int n = n0; n < n1; n++) {
            const uint16_t *wr = w + (size_t)n * W->cols;
            float acc = 0.0f;
            for (int k = k0; k < k1; k++)
                acc += a[k] * kt__moe_bf16_f32(wr[k]);
            C[(size_t)m * ldc + (n - n0)] = acc;
        }
    }
}

/* ---- FP8: w = e4m3(q) * scale[n/128][k/128], F32 activations ---- */
static void gemm_fp8(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                     size_t a_stride, const int32_t *a_rows, int M, float *C, int ldc,
                     void *scratch)
{
    (void)scratch;
    const uint8_t *w = W->w;
    const float *sc = W->scale;
    int kb_n = (W->cols + 127) / 128;
    for (int m = 0; m < M; m++) {
        const float *a = arow(A, a_stride, a_rows, m);
        for (int n = n0; n < n1; n++) {
            const uint8_t *wr = w + (size_t)n * W->cols;
            float acc = 0.0f;
            for (int kb = k0; kb < k1; kb += 128) {
                int ke = kb + 128 < k1 ? kb + 128 : k1;
                float part = 0.0f;
                for (int k = kb; k < ke; k++)
                    part += a[k] * kt__moe_e4m3_f32(wr[k]);
                acc += part * sc[(size_t)(n / 128) * kb_n + kb / 128];
            }
            C[(size_t)m * ldc + (n - n0)] = acc;
        }
    }
}

/* ---- RAWINT4: C[m][n] = sum over groups g of 32 inputs of group(g), with
 *   INT8 activations:  d_x[g] * s_w[n][g] * sum_k q_x[k] * (nibble[n][k] - 8)
 *   F32 activations (KT_MOE_PREC_BF16X2):  s_w[n][g] * sum_k a[k] * (nibble[n][k] - 8) ---- */

/* The 32 weights of group g of row n, nibble - 8, and the group's scale
 * (either layout: rows as stored or KT__INT4_TILED). */
static float int4_group_weights(const kt__wmat *W, int n, int g, int *v)
{
    int K = W->cols;
    const uint8_t *b;
    uint16_t s;
    if (W->type == KT__INT4_TILED) {
        b = kt__int4t_step(W, n, g / 4) + 16 * (g % 4);
        s = kt__int4t_scale(W, n, g);
    } else {
        b = (const uint8_t *)W->w + (size_t)n * (K / 2) + 16 * (size_t)g;
        s = ((const uint16_t *)W->scale)[(size_t)n * (K / 32) + g];
    }
    /* input 2i in the low nibble of byte i, 2i + 1 in its high one */
    for (int i = 0; i < 16; i++) {
        v[2 * i] = (b[i] & 0xf) - 8;
        v[2 * i + 1] = (b[i] >> 4) - 8;
    }
    return kt__moe_bf16_f32(s);
}

/* Group g of activation row a (format of the set) against the weights v of
 * scale s (F32). */
typedef float (*int4_group_fn)(const void *a, int K, const int *v, int g, float s);

static float group_q8(const void *a, int K, const int *v, int g, float s)
{
    const int8_t *q = a;
    int32_t isum = 0;
    for (int i = 0; i < 32; i++)
        isum += v[i] * q[g * 32 + i];
    return (float)isum * (kt__q8_scales(q, K)[g] * s);
}

static float group_f32(const void *a, int K, const int *v, int g, float s)
{
    (void)K;
    const float *x = a;
    float part = 0.0f;
    for (int i = 0; i < 32; i++)
        part += x[g * 32 + i] * (float)v[i];
    return part * s;
}

static void int4_rows(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *a_rows, int M, float *C, int ldc,
                      int4_group_fn group)
{
    int K = W->cols;
    for (int m = 0; m < M; m++) {
        const void *a = arow(A, a_stride, a_rows, m);
        for (int n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (int g = k0 / 32; g < k1 / 32; g++) {
                int v[32];
                float s = int4_group_weights(W, n, g, v);
                acc += group(a, K, v, g, s);
            }
            C[(size_t)m * ldc + (n - n0)] = acc;
        }
    }
}

kt__wmat kt__moe_int4_tile(const kt__wmat *W, int r0, int r1, int c0, int c1, void *dst)
{
    kt__wmat t = *W;
    int K = c1 - c0, steps = (K + 127) / 128;
    size_t rb = (size_t)W->cols / 2;
    const uint8_t *w = W->w;
    const uint16_t *sc = W->scale;
    t.w = t.scale = dst;
    t.rows = r1 - r0;
    t.cols = K;
    t.type = KT__INT4_TILED;
    memset(dst, 0, kt__int4t_bytes(r1 - r0, K));
    for (int n = 0; n < r1 - r0; n++) {
        const uint8_t *src = w + (size_t)(r0 + n) * rb + c0 / 2;
        for (int c = 0; c < steps; c++) /* bytes past the row stay zero */
            memcpy((uint8_t *)kt__int4t_step(&t, n, c), src + 64 * (size_t)c,
                   K - 128 * c >= 128 ? 64 : (size_t)(K - 128 * c) / 2);
        for (int g = 0; g < K / 32; g++) {
            uint16_t s = sc[(size_t)(r0 + n) * (W->cols / 32) + c0 / 32 + g];
            int pos = 4 * (g % 4) + g % 16 / 4;
            uint8_t *p = (uint8_t *)kt__int4t_block(&t, n, g / 16) + (n % 4) * 32 + 2 * pos;
            p[0] = (uint8_t)s;
            p[1] = (uint8_t)(s >> 8);
        }
    }
    return t;
}

static void gemm_int4(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                      size_t a_stride, const int32_t *a_rows, int M, float *C, int ldc,
                      void *scratch)
{
    (void)scratch;
    int4_rows(W, n0, n1, k0, k1, A, a_stride, a_rows, M, C, ldc, group_q8);
}

static void gemm_int4_f32(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                          size_t a_stride, const int32_t *a_rows, int M, float *C, int ldc,
                          void *scratch)
{
    (void)scratch;
    int4_rows(W, n0, n1, k0, k1, A, a_stride, a_rows, M, C, ldc, group_f32);
}

static const kt__moe_kernels ref_bf16 = {"scalar", KT__ACT_F32, kt__moe_quant_f32, gemm_bf16, 0,
                                         NULL};
static const kt__moe_kernels ref_fp8 = {"scalar", KT__ACT_F32, kt__moe_quant_f32, gemm_fp8, 0,
                                        NULL};
static const kt__moe_kernels ref_int4 = {"scalar", KT__ACT_Q8G32, kt__moe_quant_q8g32,
                                         gemm_int4, 0, NULL};

static const kt__moe_kernels ref_int4_f32 = {"scalar-f32", KT__ACT_F32, kt__moe_quant_f32,
                                             gemm_int4_f32, 0, NULL};

const kt__moe_kernels *kt__moe_kernels_ref_precise(int method)
{
    return method == KT_METHOD_RAWINT4 ? &ref_int4_f32 : kt__moe_kernels_ref(method);
}

const kt__moe_kernels *kt__moe_kernels_ref(int method)
{
    switch (method) {
    case KT_METHOD_BF16:
        return &ref_bf16;
    case KT_METHOD_FP8:
        return &ref_fp8;
    case KT_METHOD_RAWINT4:
        return &ref_int4;
    case KT_METHOD_AMXINT8:
        return kt__moe_int8_ref();
    default:
        return NULL;
    }
}

uint64_t kt__moe_read_sum(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        s += w;
    }
    uint64_t last = 0; /* bytes past n read as zero */
    if (i < n)
        memcpy(&last, b + i, n - i);
    return s + last;
}
