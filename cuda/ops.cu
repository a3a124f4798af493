/* The GPU forward's building blocks behind kt_cuda.h's C ABI: a runtime (device,
 * stream, decode graph), memory, copies, host functions and the kernels the
 * driver in lib/gpu strings together. Activations are F32; weights F32, BF16
 * or FP8 E4M3 with block scales, read through kt__cuda_mat. Every kernel that
 * depends on the position reads it from device memory, so a captured decode
 * step replays at any position. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt_cuda.h"

struct kt__cuda_rt {
    int device;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    size_t attn_smem; /* dynamic shared memory the attention kernel was allowed */
    cublasHandle_t blas;  /* NULL: every product runs on k_linear */
    uint16_t *xb;         /* BF16 copy of the activations for cuBLAS */
    size_t xb_elems;
};

static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

static int fail(char *err, size_t err_size, const char *what, cudaError_t e)
{
    set_err(err, err_size, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
}

#define CK(call, what)                                                                       \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            return fail(err, err_size, what, e_);                                            \
    } while (0)

/* ------------------------------------------------------------- runtime --- */

extern "C" int kt__cuda_rt_create(kt__cuda_rt **out, int32_t device, char *err, size_t err_size)
{
    *out = NULL;
    CK(cudaSetDevice(device), "cudaSetDevice");
    kt__cuda_rt *rt = (kt__cuda_rt *)calloc(1, sizeof *rt);
    if (!rt) {
        set_err(err, err_size, "out of host memory");
        return -1;
    }
    rt->device = device;
    cudaError_t e = cudaStreamCreateWithFlags(&rt->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(rt);
        return fail(err, err_size, "cudaStreamCreate", e);
    }
    *out = rt;
    return 0;
}

extern "C" void kt__cuda_rt_free(kt__cuda_rt *rt)
{
    if (!rt)
        return;
    cudaSetDevice(rt->device);
    cudaStreamSynchronize(rt->stream);
    kt__cuda_graph_drop(rt);
    if (rt->blas)
        cublasDestroy(rt->blas);
    cudaStreamDestroy(rt->stream);
    free(rt);
}

extern "C" int kt__cuda_mem_info(kt__cuda_rt *rt, uint64_t *free_b, uint64_t *total_b)
{
    size_t f = 0, t = 0;
    cudaSetDevice(rt->device);
    if (cudaMemGetInfo(&f, &t) != cudaSuccess)
        return -1;
    *free_b = f;
    *total_b = t;
    return 0;
}

extern "C" void *kt__cuda_alloc(kt__cuda_rt *rt, size_t bytes)
{
    void *p = NULL;
    cudaSetDevice(rt->device);
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void kt__cuda_free(kt__cuda_rt *rt, void *p)
{
    if (p) {
        cudaSetDevice(rt->device);
        cudaFree(p);
    }
}

extern "C" void *kt__cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void kt__cuda_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" int kt__cuda_upload(kt__cuda_rt *rt, void *dst, const void *src, size_t bytes,
                               char *err, size_t err_size)
{
    cudaSetDevice(rt->device);
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
    return 0;
}

extern "C" int kt__cuda_copy_async(kt__cuda_rt *rt, void *dst, const void *src, size_t bytes)
{
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, rt->stream) == cudaSuccess ? 0
                                                                                           : -1;
}

extern "C" int kt__cuda_host_fn(kt__cuda_rt *rt, void (*fn)(void *), void *arg)
{
    return cudaLaunchHostFunc(rt->stream, fn, arg) == cudaSuccess ? 0 : -1;
}

extern "C" int kt__cuda_sync(kt__cuda_rt *rt, char *err, size_t err_size)
{
    CK(cudaGetLastError(), "kernel launch");
    CK(cudaStreamSynchronize(rt->stream), "cudaStreamSynchronize");
    return 0;
}

extern "C" int kt__cuda_check(kt__cuda_rt *rt, char *err, size_t err_size)
{
    (void)rt;
    CK(cudaGetLastError(), "kernel launch");
    return 0;
}

extern "C" int kt__cuda_capture_begin(kt__cuda_rt *rt, char *err, size_t err_size)
{
    kt__cuda_graph_drop(rt);
    CK(cudaStreamBeginCapture(rt->stream, cudaStreamCaptureModeThreadLocal),
       "cudaStreamBeginCapture");
    return 0;
}

extern "C" int kt__cuda_capture_end(kt__cuda_rt *rt, char *err, size_t err_size)
{
    cudaGraph_t g = NULL;
    CK(cudaStreamEndCapture(rt->stream, &g), "cudaStreamEndCapture");
    rt->graph = g;
    CK(cudaGraphInstantiate(&rt->exec, g, 0), "cudaGraphInstantiate");
    return 0;
}

extern "C" int kt__cuda_graph_launch(kt__cuda_rt *rt, char *err, size_t err_size)
{
    if (!rt->exec) {
        set_err(err, err_size, "no captured graph");
        return -1;
    }
    CK(cudaGraphLaunch(rt->exec, rt->stream), "cudaGraphLaunch");
    return 0;
}

extern "C" void kt__cuda_graph_drop(kt__cuda_rt *rt)
{
    if (rt->exec)
        cudaGraphExecDestroy(rt->exec);
    if (rt->graph)
        cudaGraphDestroy(rt->graph);
    rt->exec = NULL;
    rt->graph = NULL;
}

/* -------------------------------------------------------------- weights --- */

/* e4m3 (bias 7, no infinities, S.1111.111 = NaN) to F32 */
__device__ __forceinline__ float fp8_e4m3(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -9); /* subnormal: m/8 * 2^-6 */
    else if (e == 15 && m == 7)
        v = NAN;
    else
        v = ldexpf(1.0f + m / 8.0f, e - 7);
    return s ? -v : v;
}

__device__ __forceinline__ float bf16(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

/* W[r][c] as F32 */
__device__ __forceinline__ float wval(const kt__cuda_mat &W, int32_t r, int32_t c)
{
    size_t i = (size_t)r * W.cols + c;
    switch (W.type) {
    case KT__CUDA_W_F32:
        return ((const float *)W.data)[i];
    case KT__CUDA_W_BF16:
        return bf16(((const uint16_t *)W.data)[i]);
    default: {
        size_t si = (size_t)(r / W.block_rows) * W.scale_cols + c / W.block_cols;
        float s = W.scale_bf16 ? bf16(((const uint16_t *)W.scale)[si])
                               : ((const float *)W.scale)[si];
        return fp8_e4m3(((const uint8_t *)W.data)[i]) * s;
    }
    }
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ------------------------------------------------------------- kernels --- */

#define TOK_TILE 8 /* tokens one warp serves per weight row read */

/* y[t][r] (+)= Σ_c x[t][c] W[r][c] + b[r]: a warp per row, TOK_TILE tokens per block */
__global__ void k_linear(const float *x, int32_t T, int32_t xs, kt__cuda_mat W, const float *b,
                         float *y, int32_t ys, int acc)
{
    int32_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    int32_t t0 = blockIdx.y * TOK_TILE, nt = min(TOK_TILE, T - t0);
    if (r >= W.rows)
        return;
    float s[TOK_TILE] = {0};
    for (int32_t c = lane; c < W.cols; c += 32) {
        float w = wval(W, r, c);
        for (int32_t t = 0; t < nt; t++)
            s[t] += w * x[(size_t)(t0 + t) * xs + c];
    }
    for (int32_t t = 0; t < nt; t++) {
        float v = warp_sum(s[t]);
        if (lane == 0) {
            v += b ? b[r] : 0.0f;
            float *o = &y[(size_t)(t0 + t) * ys + r];
            *o = acc ? *o + v : v;
        }
    }
}

/* xb[t][c] = bf16(x[t][c]) (round to nearest even) */
__global__ void k_to_bf16(const float *x, int32_t xs, int32_t cols, size_t n, uint16_t *xb)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    uint32_t u = __float_as_uint(x[(i / cols) * xs + i % cols]);
    xb[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* y[t][r] += b[r] */
__global__ void k_bias(float *y, int32_t ys, int32_t rows, size_t n, const float *b)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[(i / rows) * ys + i % rows] += b[i % rows];
}

extern "C" int kt__cuda_gemm_enable(kt__cuda_rt *rt, void *staging, size_t staging_elems,
                                    char *err, size_t err_size)
{
    if (!rt->blas) {
        if (cublasCreate(&rt->blas) != CUBLAS_STATUS_SUCCESS) {
            rt->blas = NULL;
            set_err(err, err_size, "cublasCreate failed");
            return -1;
        }
        cublasSetStream(rt->blas, rt->stream);
    }
    rt->xb = (uint16_t *)staging;
    rt->xb_elems = staging_elems;
    return 0;
}

/* Products of GEMM_MIN_T tokens or more go to cuBLAS when it is enabled:
 * column-major, yᵀ[rows][T] = W[rows][cols] · xᵀ, W read transposed in place. */
#define GEMM_MIN_T 16

static bool gemm(kt__cuda_rt *rt, const float *x, int32_t T, int32_t xs, const kt__cuda_mat *W,
                 const float *bias, float *y, int32_t ys, int acc)
{
    if (!rt->blas || T < GEMM_MIN_T ||
        (W->type != KT__CUDA_W_BF16 && W->type != KT__CUDA_W_F32))
        return false;
    float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
    cublasStatus_t st;
    if (W->type == KT__CUDA_W_F32) {
        st = cublasGemmEx(rt->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, T, W->cols, &alpha,
                          W->data, CUDA_R_32F, W->cols, x, CUDA_R_32F, xs, &beta, y, CUDA_R_32F,
                          ys, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
    } else {
        size_t n = (size_t)T * W->cols;
        if (n > rt->xb_elems)
            return false;
        k_to_bf16<<<(unsigned)((n + 255) / 256), 256, 0, rt->stream>>>(x, xs, W->cols, n,
                                                                          rt->xb);
        st = cublasGemmEx(rt->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, T, W->cols, &alpha,
                          W->data, CUDA_R_16BF, W->cols, rt->xb, CUDA_R_16BF, W->cols, &beta,
                          y, CUDA_R_32F, ys, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return false;
    if (bias) {
        size_t n = (size_t)T * W->rows;
        k_bias<<<(unsigned)((n + 255) / 256), 256, 0, rt->stream>>>(y, ys, W->rows, n, bias);
    }
    return true;
}

extern "C" int kt__cuda_linear(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride,
                               const kt__cuda_mat *W, const float *bias, float *y,
                               int32_t y_stride, int accumulate)
{
    if (T <= 0)
        return 0;
    if (gemm(rt, x, T, x_stride, W, bias, y, y_stride, accumulate))
        return 0;
    dim3 grid((W->rows + 7) / 8, (T + TOK_TILE - 1) / TOK_TILE);
    k_linear<<<grid, 256, 0, rt->stream>>>(x, T, x_stride, *W, bias, y, y_stride, accumulate);
    return 0;
}

/* x[t] = E[tok[t]] */
__global__ void k_embed(kt__cuda_mat E, const int32_t *tok, float *x)
{
    int32_t t = blockIdx.x;
    for (int32_t c = threadIdx.x; c < E.cols; c += blockDim.x)
        x[(size_t)t * E.cols + c] = wval(E, tok[t], c);
}

extern "C" int kt__cuda_embed(kt__cuda_rt *rt, const kt__cuda_mat *E, const int32_t *tokens,
                              int32_t T, float *x)
{
    k_embed<<<T, 256, 0, rt->stream>>>(*E, tokens, x);
    return 0;
}

/* y = x / sqrt(mean(x²) + eps) · w, one block per row */
__global__ void k_rmsnorm(const float *x, float *y, int32_t n, int32_t xs, int32_t ys,
                          const float *w, float eps)
{
    __shared__ float part[32];
    const float *xr = x + (size_t)blockIdx.x * xs;
    float *yr = y + (size_t)blockIdx.x * ys;
    float s = 0.0f;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
        s += xr[i] * xr[i];
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
        s = warp_sum(s);
        if (threadIdx.x == 0)
            part[0] = s;
    }
    __syncthreads();
    float inv = 1.0f / sqrtf(part[0] / n + eps);
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = xr[i] * inv * w[i];
}

extern "C" int kt__cuda_rmsnorm(kt__cuda_rt *rt, const float *x, float *y, int32_t rows,
                                int32_t n, int32_t x_stride, int32_t y_stride, const float *w,
                                float eps)
{
    if (rows > 0)
        k_rmsnorm<<<rows, 128, 0, rt->stream>>>(x, y, n, x_stride, y_stride, w, eps);
    return 0;
}

/* rotate the first rope_dim values at v[t][h] + off: angle (pos0 + t) · inv_freq[i] */
__global__ void k_rope(float *v, int32_t ts, int32_t hs, int32_t off, int32_t half,
                       int interleave, const float *inv_freq, float factor, const int32_t *pos0)
{
    int32_t t = blockIdx.x, h = blockIdx.y;
    float *p = v + (size_t)t * ts + (size_t)h * hs + off;
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        float ang = (float)(*pos0 + t) * inv_freq[i];
        float c = cosf(ang) * factor, s = sinf(ang) * factor;
        int32_t ia = interleave ? 2 * i : i, ib = interleave ? 2 * i + 1 : i + half;
        float a = p[ia], b = p[ib];
        p[ia] = a * c - b * s;
        p[ib] = b * c + a * s;
    }
}

extern "C" int kt__cuda_rope(kt__cuda_rt *rt, float *v, int32_t T, int32_t n_head,
                             int32_t t_stride, int32_t h_stride, int32_t offset,
                             int32_t rope_dim, int interleave, const float *inv_freq,
                             float factor, const int32_t *pos0)
{
    if (T > 0 && n_head > 0 && rope_dim > 0)
        k_rope<<<dim3(T, n_head), 64, 0, rt->stream>>>(v, t_stride, h_stride, offset,
                                                        rope_dim / 2, interleave, inv_freq,
                                                        factor, pos0);
    return 0;
}

/* cache[pos0 + t][0..n) = src[t][0..n) */
__global__ void k_store(const float *src, int32_t ss, int32_t n, float *cache, int32_t row,
                        const int32_t *pos0)
{
    int32_t t = blockIdx.x;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
        cache[(size_t)(*pos0 + t) * row + i] = src[(size_t)t * ss + i];
}

extern "C" int kt__cuda_store_rows(kt__cuda_rt *rt, const float *src, int32_t T,
                                   int32_t src_stride, int32_t n, float *cache, int32_t row,
                                   const int32_t *pos0)
{
    if (T > 0)
        k_store<<<T, 128, 0, rt->stream>>>(src, src_stride, n, cache, row, pos0);
    return 0;
}

/* o[t][h] = Σ_j softmax_j(scale · (qa·ka_j + qb·kb_j) (+ sink)) v_j over the visible
 * positions lo..pos0+t; one block per (head, token), scores in shared memory */
__global__ void k_attention(kt__cuda_attn a)
{
    extern __shared__ float sc[];
    __shared__ float red[32];
    int32_t h = blockIdx.x, t = blockIdx.y, kh = h / a.group;
    int32_t pos = *a.pos0 + t;
    int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    int32_t n = pos + 1 - lo;
    const float *q = a.q + (size_t)t * a.q_st + (size_t)h * a.q_sh;
    /* s_j = scale · q·k_j */
    float mx = -INFINITY;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        int32_t p = lo + i;
        const float *ka = a.ka + (size_t)p * a.ka_sp + (size_t)kh * a.ka_sh;
        float s = 0.0f;
        for (int32_t d = 0; d < a.ka_dim; d++)
            s += q[d] * ka[d];
        if (a.kb_dim) {
            const float *kb = a.kb + (size_t)p * a.kb_sp + (size_t)kh * a.kb_sh;
            for (int32_t d = 0; d < a.kb_dim; d++)
                s += q[a.ka_dim + d] * kb[d];
        }
        s *= a.scale;
        sc[i] = s;
        mx = fmaxf(mx, s);
    }
    /* block max (the sink takes part) */
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = a.sinks ? a.sinks[h] : -INFINITY;
        for (int32_t w = 0; w < (int32_t)blockDim.x / 32; w++)
            m = fmaxf(m, red[w]);
        red[0] = m;
    }
    __syncthreads();
    mx = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        sc[i] = expf(sc[i] - mx);
        sum += sc[i];
    }
    sum = warp_sum(sum);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = a.sinks ? expf(a.sinks[h] - mx) : 0.0f;
        for (int32_t w = 0; w < (int32_t)blockDim.x / 32; w++)
            s += red[w];
        red[0] = s;
    }
    __syncthreads();
    float inv = 1.0f / red[0];
    /* o = Σ p_j v_j, threads over the value dims */
    float *o = a.o + (size_t)t * a.o_st + (size_t)h * a.o_sh;
    for (int32_t e = threadIdx.x; e < a.v_dim; e += blockDim.x) {
        float acc = 0.0f;
        for (int32_t i = 0; i < n; i++)
            acc += sc[i] * a.v[(size_t)(lo + i) * a.v_sp + (size_t)kh * a.v_sh + e];
        o[e] = acc * inv;
    }
}

extern "C" int kt__cuda_attention(kt__cuda_rt *rt, const kt__cuda_attn *a, int32_t max_pos,
                                  char *err, size_t err_size)
{
    size_t smem = sizeof(float) * (size_t)max_pos;
    if (smem > rt->attn_smem) {
        CK(cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)smem),
           "cudaFuncSetAttribute (attention scores of n_ctx positions)");
        rt->attn_smem = smem;
    }
    if (a->T > 0)
        k_attention<<<dim3(a->n_head, a->T), 256, smem, rt->stream>>>(*a);
    return 0;
}

/* g = silu(g) · u   or gpt-oss: (clamp(u) + 1) · min(g, L) · σ(α min(g, L)) */
__global__ void k_act(float *g, const float *u, size_t n, int oai, float alpha, float limit)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float gv = g[i], uv = u[i];
    if (oai) {
        gv = fminf(gv, limit);
        uv = fminf(fmaxf(uv, -limit), limit);
        g[i] = (uv + 1.0f) * gv / (1.0f + expf(-alpha * gv));
    } else {
        g[i] = gv / (1.0f + expf(-gv)) * uv;
    }
}

extern "C" int kt__cuda_act(kt__cuda_rt *rt, float *g, const float *u, size_t n, int oai,
                            float alpha, float limit)
{
    if (n)
        k_act<<<(unsigned)((n + 255) / 256), 256, 0, rt->stream>>>(g, u, n, oai, alpha, limit);
    return 0;
}

/* y += s · x  (gate: s = σ(gate[t]) per row of width n, else 1) */
__global__ void k_add(float *y, const float *x, size_t total, int32_t n, const float *gate)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    float s = gate ? 1.0f / (1.0f + expf(-gate[i / n])) : 1.0f;
    y[i] += s * x[i];
}

extern "C" int kt__cuda_add(kt__cuda_rt *rt, float *y, const float *x, int32_t rows, int32_t n,
                            const float *row_gate)
{
    size_t total = (size_t)rows * n;
    if (total)
        k_add<<<(unsigned)((total + 255) / 256), 256, 0, rt->stream>>>(y, x, total, n, row_gate);
    return 0;
}

/* logits [T][E] -> ids, weights [T][k]: one thread per token, as the CPU router */
__global__ void k_router(kt__cuda_router_desc r, const float *logit, int32_t T, int32_t *ids,
                         float *wts)
{
    int32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T)
        return;
    const int32_t E = r.n_expert, k = r.k;
    const float *lg = logit + (size_t)t * E;
    float sel[KT__CUDA_MAX_EXPERTS], score[KT__CUDA_MAX_EXPERTS];
    int32_t *id = ids + (size_t)t * k;
    float *w = wts + (size_t)t * k;
    if (r.kind == KT__CUDA_ROUTER_SOFTMAX_TOPK) {
        float mx = -INFINITY, sum = 0.0f;
        for (int32_t e = 0; e < E; e++)
            mx = fmaxf(mx, lg[e]);
        for (int32_t e = 0; e < E; e++)
            sum += (score[e] = expf(lg[e] - mx));
        for (int32_t e = 0; e < E; e++)
            sel[e] = score[e] = score[e] / sum;
    } else if (r.kind == KT__CUDA_ROUTER_SIGMOID_BIAS) {
        for (int32_t e = 0; e < E; e++) {
            score[e] = 1.0f / (1.0f + expf(-lg[e]));
            sel[e] = score[e] + (r.e_bias ? r.e_bias[e] : 0.0f);
        }
        if (r.n_group > 1 && r.topk_group < r.n_group) {
            /* group score = sum of its top two; keep topk_group groups */
            int32_t gs = E / r.n_group;
            float gscore[64];
            bool keep[64];
            for (int32_t g = 0; g < r.n_group; g++) {
                float a = -INFINITY, b = -INFINITY;
                for (int32_t i = 0; i < gs; i++) {
                    float v = sel[g * gs + i];
                    if (v > a) {
                        b = a;
                        a = v;
                    } else if (v > b) {
                        b = v;
                    }
                }
                gscore[g] = a + (gs > 1 ? b : 0.0f);
                keep[g] = false;
            }
            for (int32_t q = 0; q < r.topk_group; q++) {
                int32_t best = -1;
                for (int32_t g = 0; g < r.n_group; g++)
                    if (!keep[g] && (best < 0 || gscore[g] > gscore[best]))
                        best = g;
                keep[best] = true;
            }
            for (int32_t g = 0; g < r.n_group; g++)
                if (!keep[g])
                    for (int32_t i = 0; i < gs; i++)
                        sel[g * gs + i] = 0.0f;
        }
    } else {
        for (int32_t e = 0; e < E; e++)
            sel[e] = score[e] = lg[e];
    }
    /* top-k of sel, best first, lower index on ties */
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            bool taken = false;
            for (int32_t i = 0; i < j; i++)
                taken |= id[i] == e;
            if (!taken && (best < 0 || sel[e] > sel[best]))
                best = e;
        }
        id[j] = best;
        w[j] = score[best];
    }
    if (r.kind == KT__CUDA_ROUTER_TOPK_SOFTMAX) {
        float mx = -INFINITY, sum = 0.0f;
        for (int32_t j = 0; j < k; j++)
            mx = fmaxf(mx, w[j]);
        for (int32_t j = 0; j < k; j++)
            sum += (w[j] = expf(w[j] - mx));
        for (int32_t j = 0; j < k; j++)
            w[j] /= sum;
        return;
    }
    if (r.renorm) {
        float sum = 0.0f;
        for (int32_t j = 0; j < k; j++)
            sum += w[j];
        float den = r.kind == KT__CUDA_ROUTER_SIGMOID_BIAS ? sum + 1e-20f : sum;
        for (int32_t j = 0; j < k; j++)
            w[j] /= den;
    }
    for (int32_t j = 0; j < k; j++)
        w[j] *= r.scale;
}

extern "C" int kt__cuda_router(kt__cuda_rt *rt, const kt__cuda_router_desc *r, const float *logits,
                               int32_t T, int32_t *ids, float *w)
{
    if (T > 0)
        k_router<<<(T + 63) / 64, 64, 0, rt->stream>>>(*r, logits, T, ids, w);
    return 0;
}

/* h[t][j][i] = act(gate_e x_t, up_e x_t) for GPU-resident e = ids[t][j] */
__global__ void k_expert_up(const kt__cuda_mat *gate, const kt__cuda_mat *up, const float *x,
                            int32_t H, const int32_t *ids, int32_t k, int32_t I, float *h,
                            int oai, float alpha, float limit)
{
    int32_t i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    int32_t tj = blockIdx.y, t = tj / k;
    int32_t e = ids[tj];
    if (i >= I || e < 0 || !gate[e].data)
        return;
    const float *xt = x + (size_t)t * H;
    float g = 0.0f, u = 0.0f;
    for (int32_t c = lane; c < H; c += 32) {
        g += wval(gate[e], i, c) * xt[c];
        u += wval(up[e], i, c) * xt[c];
    }
    g = warp_sum(g);
    u = warp_sum(u);
    if (lane == 0) {
        float a;
        if (oai) {
            float gv = fminf(g, limit), uv = fminf(fmaxf(u, -limit), limit);
            a = (uv + 1.0f) * gv / (1.0f + expf(-alpha * gv));
        } else {
            a = g / (1.0f + expf(-g)) * u;
        }
        h[(size_t)tj * I + i] = a;
    }
}

/* out[t][c] += Σ_j w[t][j] · down_e[c]·h[t][j] over the GPU-resident e = ids[t][j] */
__global__ void k_expert_down(const kt__cuda_mat *down, const int32_t *ids, const float *wts,
                              int32_t k, int32_t I, const float *h, int32_t H, float *out)
{
    int32_t c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    int32_t t = blockIdx.y;
    if (c >= H)
        return;
    float acc = 0.0f;
    for (int32_t j = 0; j < k; j++) {
        int32_t e = ids[(size_t)t * k + j];
        if (e < 0 || !down[e].data)
            continue;
        const float *ht = h + ((size_t)t * k + j) * I;
        float s = 0.0f;
        for (int32_t i = lane; i < I; i += 32)
            s += wval(down[e], c, i) * ht[i];
        acc += wts[(size_t)t * k + j] * warp_sum(s);
    }
    if (lane == 0)
        out[(size_t)t * H + c] += acc;
}

extern "C" int kt__cuda_experts(kt__cuda_rt *rt, const kt__cuda_experts_args *a)
{
    if (a->T <= 0)
        return 0;
    dim3 g1((a->I + 7) / 8, a->T * a->k);
    k_expert_up<<<g1, 256, 0, rt->stream>>>(a->gate, a->up, a->x, a->H, a->ids, a->k, a->I,
                                            a->h, a->oai, a->alpha, a->limit);
    dim3 g2((a->H + 7) / 8, a->T);
    k_expert_down<<<g2, 256, 0, rt->stream>>>(a->down, a->ids, a->w, a->k, a->I, a->h, a->H,
                                              a->out);
    return 0;
}

__global__ void k_fill(float *y, size_t n, float v)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = v;
}

extern "C" int kt__cuda_zero(kt__cuda_rt *rt, float *y, size_t n)
{
    if (n)
        k_fill<<<(unsigned)((n + 255) / 256), 256, 0, rt->stream>>>(y, n, 0.0f);
    return 0;
}

/* Absorbed MLA, query side: qa[t][h] = [W_ukᵀ q_nope (R) | q_rope (rd)], with
 * W_uk = rows h·(nope + v) + d of kv_b [nh·(nope + v)][R]; one block per (head, token) */
__global__ void k_mla_q(const float *q, int32_t nope, int32_t rd, kt__cuda_mat kvb,
                        int32_t kvb_rows, float *qa)
{
    int32_t h = blockIdx.x, t = blockIdx.y, nh = gridDim.x, R = kvb.cols;
    const float *qh = q + ((size_t)t * nh + h) * (nope + rd);
    float *o = qa + ((size_t)t * nh + h) * (R + rd);
    for (int32_t r = threadIdx.x; r < R; r += blockDim.x) {
        float acc = 0.0f;
        for (int32_t d = 0; d < nope; d++)
            acc += qh[d] * wval(kvb, h * kvb_rows + d, r);
        o[r] = acc;
    }
    for (int32_t i = threadIdx.x; i < rd; i += blockDim.x)
        o[R + i] = qh[nope + i];
}

/* Absorbed MLA, output side: o[t][h][e] = W_uv[e] · õ[t][h], W_uv = rows
 * h·(nope + v) + nope + e of kv_b; a warp per e */
__global__ void k_mla_o(const float *ot, kt__cuda_mat kvb, int32_t nope, int32_t vd,
                        int32_t kvb_rows, float *o)
{
    int32_t h = blockIdx.x, t = blockIdx.y, nh = gridDim.x, R = kvb.cols;
    int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const float *oh = ot + ((size_t)t * nh + h) * R;
    for (int32_t e = warp; e < vd; e += nw) {
        float s = 0.0f;
        for (int32_t r = lane; r < R; r += 32)
            s += wval(kvb, h * kvb_rows + nope + e, r) * oh[r];
        s = warp_sum(s);
        if (lane == 0)
            o[((size_t)t * nh + h) * vd + e] = s;
    }
}

extern "C" int kt__cuda_mla_absorb_q(kt__cuda_rt *rt, const float *q, int32_t T, int32_t n_head,
                                     int32_t nope, int32_t rope, const kt__cuda_mat *kv_b,
                                     float *qa)
{
    if (T > 0)
        k_mla_q<<<dim3(n_head, T), 256, 0, rt->stream>>>(q, nope, rope, *kv_b,
                                                         kv_b->rows / n_head, qa);
    return 0;
}

extern "C" int kt__cuda_mla_absorb_o(kt__cuda_rt *rt, const float *ot, int32_t T, int32_t n_head,
                                     int32_t nope, int32_t v_dim, const kt__cuda_mat *kv_b,
                                     float *o)
{
    if (T > 0)
        k_mla_o<<<dim3(n_head, T), 256, 0, rt->stream>>>(ot, *kv_b, nope, v_dim,
                                                         kv_b->rows / n_head, o);
    return 0;
}
