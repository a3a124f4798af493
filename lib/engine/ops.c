/* Scalar building blocks of the forward pass: linear layers, RMSNorm,
 * softmax, type conversions. F32 accumulation throughout. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "../../cpu/engine_kernels.h"
#include "core/threadpool.h"
#include "engine_internal.h"
#include "kt/hw.h"

/* Kernel choice, made once: AVX-512 when the CPU and OS have it. */
typedef void (*linear_bf16_fn)(const float *, int32_t, int32_t, int32_t, const uint16_t *,
                               const float *, float *, int32_t, int32_t);
typedef void (*linear_f32_fn)(const float *, int32_t, int32_t, int32_t, const float *,
                              const float *, float *, int32_t, int32_t);
static void (*g_linear_fp8)(const float *, int32_t, int32_t, int32_t, const uint8_t *,
                            const void *, int, int32_t, int32_t, int32_t, const float *, float *,
                            int32_t, int32_t);
static float (*g_dot)(const float *, const float *, int32_t);
static void (*g_row_bf16)(const uint16_t *, int32_t, float *);
static void (*g_row_fp8)(const uint8_t *, int32_t, const float *, int32_t, float *);
static void (*g_axpy)(float *, float, const float *, int32_t);
static linear_bf16_fn g_linear_bf16;
static linear_f32_fn g_linear_f32;
static float g_e4m3_lut[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void pick_kernels_once(void)
{
    for (int i = 0; i < 256; i++)
        g_e4m3_lut[i] = kt__e4m3_to_f32((uint8_t)i);
#if KT_HAVE_ISA_AVX512
    uint64_t need = KT_ISA_AVX512F | KT_ISA_AVX512BW;
    if ((kt_hw_isa() & need) == need) {
        g_linear_bf16 = kt__engine_linear_bf16_avx512;
        g_linear_f32 = kt__engine_linear_f32_avx512;
        g_linear_fp8 = kt__engine_linear_fp8_avx512;
        g_dot = kt__engine_dot_avx512;
        g_row_bf16 = kt__engine_row_bf16_avx512;
        g_row_fp8 = kt__engine_row_fp8_avx512;
        g_axpy = kt__engine_axpy_avx512;
    }
#endif
}

static void pick_kernels(void)
{
    pthread_once(&g_once, pick_kernels_once);
}

float kt__dot(const float *a, const float *b, int32_t n)
{
    pick_kernels();
    if (g_dot)
        return g_dot(a, b, n);
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void kt__axpy(float *y, float s, const float *x, int32_t n)
{
    pick_kernels();
    if (g_axpy) {
        g_axpy(y, s, x, n);
        return;
    }
    for (int32_t i = 0; i < n; i++)
        y[i] += s * x[i];
}

float kt__silu(float x)
{
    return x / (1.0f + expf(-x));
}

void kt__softmax(float *x, int32_t n)
{
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int32_t i = 0; i < n; i++)
        x[i] /= sum;
}

/* y = x / sqrt(mean(x²) + eps) * w */
void kt__rmsnorm_to(const float *x, float *y, int32_t n, const float *w, float eps)
{
    double ss = 0.0;
    for (int32_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int32_t i = 0; i < n; i++)
        y[i] = x[i] * r * (w ? w[i] : 1.0f);
}

void kt__rmsnorm(float *x, int32_t n, const float *w, float eps)
{
    kt__rmsnorm_to(x, x, n, w, eps);
}

/* a · b over n floats: 8 partial sums keep the compiler's vectoriser busy; the tail is
 * summed first, then the 8 partials (the order every linear kernel here uses). */
static inline float dot8(const float *a, const float *b, int32_t n)
{
    float acc[8] = {0};
    int32_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += a[c + k] * b[c + k];
    float s = 0;
    for (; c < n; c++)
        s += a[c] * b[c];
    for (int k = 0; k < 8; k++)
        s += acc[k];
    return s;
}

/* y[t][r] = rowbuf · x[t][c0 .. c0+nc) (+ bias) for every token; the column chunks after the
 * first (c0 > 0) add onto y. rowbuf is row r's weights, widened to F32. */
static void chunk_dot_tokens(const float *rowbuf, const float *x, int32_t T, int32_t rows,
                             int32_t cols, int32_t c0, int32_t nc, int32_t r, const float *bias,
                             float *y)
{
    for (int32_t t = 0; t < T; t++) {
        float s = dot8(rowbuf, x + (size_t)t * cols + c0, nc);
        float *yo = &y[(size_t)t * rows + r];
        *yo = c0 == 0 ? s + (bias ? bias[r] : 0.0f) : *yo + s;
    }
}

/* Dot products over 4 tokens at once so that each weight row is read once per
 * 4 tokens; the remaining tokens one at a time (dot8). */
static void linear_f32(const float *x, int32_t T, int32_t rows, int32_t cols, const float *W,
                       const float *bias, float *y, int32_t r0, int32_t r1)
{
    for (int32_t r = r0; r < r1; r++) {
        const float *wr = W + (size_t)r * cols;
        int32_t t = 0;
        for (; t + 4 <= T; t += 4) {
            const float *x0 = x + (size_t)t * cols;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int32_t c = 0; c < cols; c++) {
                float wv = wr[c];
                s0 += wv * x0[c];
                s1 += wv * x0[cols + c];
                s2 += wv * x0[2 * (size_t)cols + c];
                s3 += wv * x0[3 * (size_t)cols + c];
            }
            float b = bias ? bias[r] : 0.0f;
            y[(size_t)t * rows + r] = s0 + b;
            y[(size_t)(t + 1) * rows + r] = s1 + b;
            y[(size_t)(t + 2) * rows + r] = s2 + b;
            y[(size_t)(t + 3) * rows + r] = s3 + b;
        }
        for (; t < T; t++)
            y[(size_t)t * rows + r] = dot8(wr, x + (size_t)t * cols, cols) +
                                      (bias ? bias[r] : 0.0f);
    }
}

/* BF16 weights: widen one row at a time into a small F32 buffer. */
static void linear_bf16(const float *x, int32_t T, int32_t rows, int32_t cols,
                        const uint16_t *W, const float *bias, float *y, int32_t r0, int32_t r1)
{
    float rowbuf[4096];
    for (int32_t c0 = 0; c0 < cols; c0 += 4096) {
        int32_t nc = KT_MIN(4096, cols - c0);
        for (int32_t r = r0; r < r1; r++) {
            const uint16_t *wr = W + (size_t)r * cols + c0;
            for (int32_t c = 0; c < nc; c++)
                rowbuf[c] = kt__bf16_to_f32(wr[c]);
            chunk_dot_tokens(rowbuf, x, T, rows, cols, c0, nc, r, bias, y);
        }
    }
}

/* FP8 E4M3 weights with block scales: each row widened exactly to F32
 * (fp8 · scale), then dotted with every token. */
static void linear_fp8(const float *x, int32_t T, const kt__mat *W, const float *bias, float *y,
                       int32_t r0, int32_t r1)
{
    const float *lut = g_e4m3_lut; /* filled by pick_kernels() */
    int32_t rows = W->rows, cols = W->cols;
    float rowbuf[4096];
    for (int32_t c0 = 0; c0 < cols; c0 += 4096) {
        int32_t nc = KT_MIN(4096, cols - c0);
        for (int32_t r = r0; r < r1; r++) {
            const uint8_t *q = (const uint8_t *)W->data + (size_t)r * cols + c0;
            size_t srow = (size_t)(r / W->block_rows) * W->scale_cols;
            for (int32_t c = 0; c < nc; c++) {
                size_t si = srow + (size_t)((c0 + c) / W->block_cols);
                float s = W->scale_type == KT_TYPE_BF16
                              ? kt__bf16_to_f32(((const uint16_t *)W->scale)[si])
                              : ((const float *)W->scale)[si];
                rowbuf[c] = lut[q[c]] * s;
            }
            chunk_dot_tokens(rowbuf, x, T, rows, cols, c0, nc, r, bias, y);
        }
    }
}

void kt__mat_row_f32(const kt__mat *W, int32_t r, float *out)
{
    pick_kernels();
    int32_t cols = W->cols;
    if (W->type == KT_TYPE_F32) {
        memcpy(out, (const float *)W->data + (size_t)r * cols, sizeof(float) * cols);
    } else if (W->type == KT_TYPE_BF16) {
        const uint16_t *s = (const uint16_t *)W->data + (size_t)r * cols;
        if (g_row_bf16) {
            g_row_bf16(s, cols, out);
            return;
        }
        for (int32_t c = 0; c < cols; c++)
            out[c] = kt__bf16_to_f32(s[c]);
    } else if (g_row_fp8 && W->scale_type == KT_TYPE_F32 && W->block_cols % 16 == 0) {
        g_row_fp8((const uint8_t *)W->data + (size_t)r * cols, cols,
                  (const float *)W->scale + (size_t)(r / W->block_rows) * W->scale_cols,
                  W->block_cols, out);
    } else { /* F8_E4M3: fp8 · block scale */
        const uint8_t *q = (const uint8_t *)W->data + (size_t)r * cols;
        size_t srow = (size_t)(r / W->block_rows) * W->scale_cols;
        for (int32_t c = 0; c < cols; c++) {
            size_t si = srow + (size_t)(c / W->block_cols);
            float sc = W->scale_type == KT_TYPE_BF16
                           ? kt__bf16_to_f32(((const uint16_t *)W->scale)[si])
                           : ((const float *)W->scale)[si];
            out[c] = g_e4m3_lut[q[c]] * sc;
        }
    }
}

void kt__linear_rows(const float *x, int32_t T, const kt__mat *W, const float *bias, float *y,
                     int32_t r0, int32_t r1)
{
    pick_kernels();
    if (W->type == KT_TYPE_BF16 && g_linear_bf16)
        g_linear_bf16(x, T, W->rows, W->cols, W->data, bias, y, r0, r1);
    else if (W->type == KT_TYPE_F32 && g_linear_f32)
        g_linear_f32(x, T, W->rows, W->cols, W->data, bias, y, r0, r1);
    else if (W->type == KT_TYPE_BF16)
        linear_bf16(x, T, W->rows, W->cols, W->data, bias, y, r0, r1);
    else if (W->type == KT_TYPE_F8_E4M3 && g_linear_fp8 && W->block_cols % 16 == 0)
        g_linear_fp8(x, T, W->rows, W->cols, W->data, W->scale, W->scale_type == KT_TYPE_BF16,
                     W->block_rows, W->block_cols, W->scale_cols, bias, y, r0, r1);
    else if (W->type == KT_TYPE_F8_E4M3)
        linear_fp8(x, T, W, bias, y, r0, r1);
    else
        linear_f32(x, T, W->rows, W->cols, W->data, bias, y, r0, r1);
}

void kt__linear(const float *x, int32_t T, const kt__mat *W, const float *bias, float *y)
{
    kt__linear_rows(x, T, W, bias, y, 0, W->rows);
}

/* One job of kt__linear_par: worker tid takes a contiguous share of the rows
 * (a multiple of 4, the kernels' row block). */
typedef struct linear_job {
    const float *x;
    int32_t T;
    const kt__mat *W;
    const float *bias;
    float *y;
    int n;
} linear_job;

static void linear_worker(void *arg, int tid)
{
    const linear_job *j = arg;
    int32_t rows = j->W->rows;
    int32_t per = ((rows + j->n - 1) / j->n + 3) & ~3;
    int32_t r0 = tid * per, r1 = KT_MIN(rows, r0 + per);
    if (r0 < r1)
        kt__linear_rows(j->x, j->T, j->W, j->bias, j->y, r0, r1);
}

void kt__linear_par(kt_context *ctx, const float *x, int32_t T, const kt__mat *W,
                    const float *bias, float *y)
{
    if (ctx->dense && kt__dense_linear(ctx, x, T, W, bias, y))
        return;
    kt__linear_par_exact(ctx, x, T, W, bias, y);
}

void kt__linear_par_exact(kt_context *ctx, const float *x, int32_t T, const kt__mat *W,
                          const float *bias, float *y)
{
    /* below ~1M multiply-adds waking the workers costs more than it saves */
    if (!ctx->pool || (int64_t)W->rows * W->cols * T < (1 << 20)) {
        kt__linear(x, T, W, bias, y);
        return;
    }
    linear_job j = {x, T, W, bias, y, kt__pool_n_threads(ctx->pool)};
    kt__pool_run(ctx->pool, linear_worker, &j);
}
