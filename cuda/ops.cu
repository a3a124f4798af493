/* The GPU forward's building blocks behind kt_cuda.h's C ABI: a runtime (device,
 * stream, decode graph), memory, copies, host functions and the kernels the
 * driver in lib/gpu strings together. Activations are F32; weights F32, BF16
 * or FP8 E4M3 with block scales, read through kt__cuda_mat. Every kernel that
 * depends on the position reads it from device memory, so a captured decode
 * step replays at any position. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_mma.cuh"
#include "check.cuh"
#include "kt_cuda.h"
#include "mma.cuh"

/* A residual row's RMSNorm left to the next one-token product that reads it
 * (GEMV_NORM_IN): x already holds the residual sum (the kernel that made the
 * addend added it), xn = RMSNorm(x) · w is computed by each block of that
 * product into its shared memory (block 0 also stores it). x NULL: none. */
struct norm_in {
    const float *x;
    float *xn;
    const float *w;
    float eps;
    int32_t n;
};

struct kt__cuda_rt {
    int device;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    /* the host waits on this (blocking sync: a spinning host thread would take a
     * core from the CPU experts' pinned workers, whose barriers then wait out
     * scheduler time slices) */
    cudaEvent_t done;
    cudaEvent_t spin_done; /* the same without blocking sync, polled (kt__cuda_wait) */
    /* layerwise prefill: weights copied on a side stream into two slots */
    cudaStream_t side;
    cudaEvent_t copied[2], freed[2];
    cudaEvent_t staged[KT__CUDA_STAGES]; /* a staging piece's copy, queued on side */
    size_t attn_smem; /* dynamic shared memory the attention kernel was allowed */
    int split_smem_set; /* the split attention kernel's larger tiles allowed */
    /* device counters of finished blocks ("the last block to finish does the
     * rest"), TK_* below; each put back to 0 by that last block */
    unsigned *ticket;
    int fuse;           /* KT_GPU_FUSE bits, FUSE_* below */
    cublasHandle_t blas;  /* NULL: every product runs on libkt's own kernels */
    uint16_t *xb;         /* activations split into BF16 hi and lo halves: [2][xb_elems] */
    size_t xb_elems;
    uint16_t *wb;         /* an FP8 matrix dequantized into BF16 hi and lo: [2][wb_elems] */
    size_t wb_elems;
    int32_t gemm_min_t;   /* products of this many tokens or more go to cuBLAS */
    int32_t sms;          /* multiprocessors: how many blocks fill the device */
    int32_t cc_major;     /* compute capability: BF16 tensor cores (WMMA) from 8 */
    int pdl;              /* programmatic dependent launch of the decode kernels (sm_90+) */
    int group_mma;        /* grouped experts as k_group_mma (KT_GPU_GROUP_MMA=0: k_group_gemm) */
    int attn_tile;        /* prefill attention: KT_GPU_ATTN_TILE 0: k_attention, 1: F32 tiles,
                           * 2 (default): tensor-core tiles on BF16 hi + lo halves where
                           * they apply and the call allows (kt__cuda_attn.tc), 3: the
                           * same on BF16 alone (cuda/attn_mma.cu) */
    int gemv;             /* KT_GPU_GEMV bits, GEMV_* below (default all) */
    int upp_blocks;       /* k_expert_up_p's resident blocks a multiprocessor (0: not yet asked) */
    size_t upp_smem;      /* ... with this much dynamic shared memory */
    /* GEMV_QK_ATTN: a one-token q / k post step the next attention call runs */
    kt__cuda_qk_post post;
    int post_pending;
    norm_in pn; /* GEMV_NORM_IN: the pending norm (pn.x NULL: none) */
    /* GEMV_ROUTE_UP: a one-token router's selection left to the expert kernels
     * (rp_on 0: none); launched by flush_pending when anything else comes first */
    kt__cuda_router_desc rp;
    const float *rp_logits;
    int32_t *rp_ids;
    float *rp_w;
    int rp_on;
    int skip; /* KT_GPU_SKIP bits, SKIP_* below: decode launches left out, for timing */
    /* KT_GPU_TRACE=2: timing events between phases, and the stream held while a
     * step is queued */
    cudaEvent_t *prof_ev;
    int *prof_phase;
    int prof_n;
    int hold;
};

static void flush_pending(kt__cuda_rt *rt);

#define PROF_EVENTS 8192

/* the tickets' places: one per fused launch site (tokens or head groups each
 * their own) */
#define TK_ROUTER 0
#define TK_QKV 1
#define TK_LINEAR 2
#define TK_DOWN 64   /* + token, below DOWN_FOLD_T */
#define TK_ATTN 128  /* + token x head group */
#define TK_COUNT 4096
#define DOWN_FOLD_T 64

/* decode folds, opt-in (KT_GPU_FUSE bits; default none): the residual add +
 * RMSNorm into the last block of the product before it; q/k norm, RoPE and
 * cache rows into the last block of the q/k/v product; the split attention's
 * merge into each head group's last split block. Each made a 12-layer
 * Qwen3-30B-A3B decode step slower on the H200 (2026-11-30: all three 694 tok/s
 * against 755 with none at 03:53; the first alone 764.5 against 799.1 at
 * 04:08): every block's fence and ticket, then one block walking through work
 * that a launch of its own (started early by programmatic dependent launch)
 * spreads over 32-40 blocks, cost more than the launch they save. */
#define FUSE_ADD_NORM 1
#define FUSE_QK_POST 2
#define FUSE_ATTN_MERGE 4

/* decode kernels that start streaming before they wait (KT_GPU_GEMV bits,
 * default GEMV_DEFAULT; 0: the earlier kernels, for A/B runs in one process): one-token
 * BF16 products load their weight rows into registers before pdl_wait (weights
 * never depend on the kernel before; the router's logits too); the expert-up
 * product for one token as one resident wave of warps that loop over the
 * (expert, row) pairs with x and the descriptors read once a block; the expert
 * down product reads the router's ids and its weight rows before pdl_wait (the
 * router finished before the up kernel let it start) and keeps a lane's 24
 * loads in flight; the split attention prefetches its positions' key and
 * value rows into L2 before it waits. */
#define GEMV_PRE 1
#define GEMV_UP 2
#define GEMV_DOWN 4
#define GEMV_ATTN 8
#define GEMV_ATTN_EARLY 16
/* 32: the one-wave up kernel prefetches the chosen experts' down matrices into
 * L2 (bulk prefetches spread over its blocks, each warp's once its rows are
 * done) and streams its own gate / up rows with an evict-first policy, so the
 * down kernel reads L2 instead of starting its 25 MB (Qwen3) cold from HBM */
#define GEMV_L2 32
/* 64: the split attention runs the q / k norm, RoPE and cache rows itself for
 * one token (no k_qk_post launch): each block norms and rotates its query
 * heads in shared memory, the block whose split holds the position also the
 * kv head's key and value row (into the cache and into its tile) */
#define GEMV_QK_ATTN 64
/* 128: the one-wave up kernel one block a multiprocessor (its registers leave
 * room for one block of the down kernel beside it, whose weight loads before
 * the wait then run during the up product instead of after it) */
#define GEMV_UP1 128
/* 256: no residual add + norm launch between one-token products: the output
 * product and the expert down product add their rows into the residual as
 * they store them, and the next product that reads the normed row (q / k / v,
 * the router) norms it in each of its blocks (norm_in); any other call first
 * launches the norm (flush_pending) */
#define GEMV_NORM_IN 256
/* 512: the expert-down product of one token with a warp per (expert, 8 output
 * rows), contiguous rows of one matrix a warp (k_expert_down_w, I <= 768;
 * else k_expert_down_p; H200 11-30 09:19: 12-layer Qwen3-30B-A3B decode 914-917
 * against 828-842 tok/s without) */
#define GEMV_DOWNW 512
/* 1024 (opt-in, measured no faster): the one-token q / k / v product two rows
 * a warp, in one wave (k_gemv1_n2: 7.65 against 8.31 us alone, decode 875-905
 * against 914-917 tok/s, 09:20) */
#define GEMV_QKV2 1024
/* 2048: k_expert_down_w also for I up to 2048 (4 rows a warp to 1536, 3 to
 * 2048; else k_expert_down_p); not yet run on a device */
#define GEMV_DOWNW_WIDE 2048
/* 4096: the one-token router launch computes the logits only; the top-k and
 * its weights are computed from them by every block of the expert-up kernel
 * (after its wait, block 0 also stores them) and of the expert-down kernel
 * (before its wait: the router finished before the up kernel let it start),
 * a rank a thread in shared memory (route_block): no ticket, no last block
 * selecting while the rest of the device waits (k_expert_up_p with
 * k_expert_down_w, routers without group limits, E <= ROUTE_MAXE, the caller
 * saying the expert kernels come next: experts_next; anything else between
 * them launches the selection, flush_pending). H200 11-30 12:20: Qwen3-30B-A3B
 * decode 910-913 against 854-869 tok/s at 12 layers, 279.3 against 261.0 at 48
 * (default 13151 = 863 + 4096 + 8192 from then) */
#define GEMV_ROUTE_UP 4096
/* 8192: the router's last block selects by route_block's ranks (every thread
 * of it) instead of router_select's k rounds of a warp arg-max (same routers;
 * the paths 4096 leaves to it: CPU experts, k_expert_up8 / down_p / down8).
 * 12:20, all experts on the GPU, 8192 alone: 899-902 tok/s against 854-869 */
#define GEMV_ROUTE_RANK 8192
#define GEMV_ALL 16383
/* the default: what measured fastest (KT_GPU_GEMV overrides) */
#define GEMV_DEFAULT (GEMV_ALL & ~(GEMV_L2 | GEMV_UP1 | GEMV_QKV2 | GEMV_DOWNW_WIDE))

/* KT_GPU_SKIP bits (for timing only: the step's results are wrong): one-token
 * launches left out of a decode step, so that a step's time without them says
 * what they cost inside the captured graph, where PDL overlaps the kernels
 * (KT_GPU_TRACE=2's phases run eagerly, each with its launch gap): the split
 * attention, its merge, the expert-down product (the launches before and after
 * them read only finite stale rows, so the step still runs) */
#define SKIP_SPLIT 2
#define SKIP_MERGE 4
#define SKIP_DOWN 16

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
    if (cudaDeviceGetAttribute(&rt->sms, cudaDevAttrMultiProcessorCount, device) !=
            cudaSuccess || rt->sms <= 0)
        rt->sms = 32;
    if (cudaDeviceGetAttribute(&rt->cc_major, cudaDevAttrComputeCapabilityMajor, device) !=
        cudaSuccess)
        rt->cc_major = 0;
    const char *pdl = getenv("KT_GPU_PDL");
    rt->pdl = rt->cc_major >= 9 && !(pdl && !strcmp(pdl, "0"));
    const char *tile = getenv("KT_GPU_ATTN_TILE");
    rt->attn_tile = tile ? atoi(tile) : 2;
    const char *gm = getenv("KT_GPU_GROUP_MMA");
    rt->group_mma = !(gm && !strcmp(gm, "0"));
    const char *fuse = getenv("KT_GPU_FUSE");
    rt->fuse = fuse ? atoi(fuse) : 0;
    const char *gemv = getenv("KT_GPU_GEMV");
    rt->gemv = gemv ? atoi(gemv) & GEMV_ALL : GEMV_DEFAULT;
    const char *skip = getenv("KT_GPU_SKIP");
    rt->skip = skip ? atoi(skip) : 0;
    cudaError_t e = cudaStreamCreateWithFlags(&rt->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(rt);
        return fail(err, err_size, "cudaStreamCreate", e);
    }
    e = cudaEventCreateWithFlags(&rt->done, cudaEventBlockingSync | cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaStreamDestroy(rt->stream);
        free(rt);
        return fail(err, err_size, "cudaEventCreate", e);
    }
    if (cudaEventCreateWithFlags(&rt->spin_done, cudaEventDisableTiming) != cudaSuccess)
        rt->spin_done = NULL;
    /* without them the router runs as two launches and nothing is folded */
    if (cudaMalloc((void **)&rt->ticket, sizeof(unsigned) * TK_COUNT) != cudaSuccess ||
        cudaMemset(rt->ticket, 0, sizeof(unsigned) * TK_COUNT) != cudaSuccess) {
        cudaFree(rt->ticket);
        rt->ticket = NULL;
        rt->fuse = 0;
        cudaGetLastError();
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
    if (rt->side) {
        cudaStreamSynchronize(rt->side);
        for (int i = 0; i < 2; i++) {
            cudaEventDestroy(rt->copied[i]);
            cudaEventDestroy(rt->freed[i]);
        }
        for (int i = 0; i < KT__CUDA_STAGES; i++) {
            if (rt->staged[i])
                cudaEventDestroy(rt->staged[i]);
        }
        cudaStreamDestroy(rt->side);
    }
    if (rt->prof_ev) {
        for (int i = 0; i < PROF_EVENTS; i++)
            cudaEventDestroy(rt->prof_ev[i]);
        free(rt->prof_ev);
        free(rt->prof_phase);
    }
    cudaFree(rt->ticket);
    if (rt->spin_done)
        cudaEventDestroy(rt->spin_done);
    cudaEventDestroy(rt->done);
    cudaStreamDestroy(rt->stream);
    free(rt);
}

extern "C" int kt__cuda_prof_enable(kt__cuda_rt *rt, char *err, size_t err_size)
{
    if (rt->prof_ev)
        return 0;
    rt->prof_ev = (cudaEvent_t *)calloc(PROF_EVENTS, sizeof(cudaEvent_t));
    rt->prof_phase = (int *)calloc(PROF_EVENTS, sizeof(int));
    if (!rt->prof_ev || !rt->prof_phase) {
        free(rt->prof_ev);
        free(rt->prof_phase);
        rt->prof_ev = NULL;
        set_err(err, err_size, "out of host memory");
        return -1;
    }
    for (int i = 0; i < PROF_EVENTS; i++)
        CK(cudaEventCreate(&rt->prof_ev[i]), "cudaEventCreate (phase timing)");
    return 0;
}

extern "C" void kt__cuda_prof_mark(kt__cuda_rt *rt, int phase)
{
    if (!rt->prof_ev || rt->prof_n >= PROF_EVENTS)
        return;
    cudaEventRecord(rt->prof_ev[rt->prof_n], rt->stream);
    rt->prof_phase[rt->prof_n++] = phase;
}

extern "C" int kt__cuda_prof_collect(kt__cuda_rt *rt, double *ms, int n_phase)
{
    if (!rt->prof_ev || rt->prof_n == 0)
        return 0;
    int rc = 0;
    if (cudaEventSynchronize(rt->prof_ev[rt->prof_n - 1]) != cudaSuccess)
        rc = -1;
    for (int i = 1; rc == 0 && i < rt->prof_n; i++) {
        float t = 0.0f;
        if (cudaEventElapsedTime(&t, rt->prof_ev[i - 1], rt->prof_ev[i]) == cudaSuccess &&
            rt->prof_phase[i] >= 0 && rt->prof_phase[i] < n_phase)
            ms[rt->prof_phase[i]] += t;
    }
    rt->prof_n = 0;
    cudaGetLastError();
    return rc;
}

/* CUDA's host thread: the stream waits here until kt__cuda_release, 50 ms at
 * most (a launch that has to wait for the device, as a first launch of a lazily
 * loaded kernel may, would otherwise wait for this forever: the 22:37 device
 * run's KT_GPU_TRACE=2 pass hung at its first held step) */
static void CUDART_CB hold_fn(void *p)
{
    kt__cuda_rt *rt = (kt__cuda_rt *)p;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (__atomic_load_n(&rt->hold, __ATOMIC_ACQUIRE)) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) > 0.05)
            break;
    }
}

extern "C" int kt__cuda_hold(kt__cuda_rt *rt)
{
    __atomic_store_n(&rt->hold, 1, __ATOMIC_RELEASE);
    if (cudaLaunchHostFunc(rt->stream, hold_fn, rt) != cudaSuccess) {
        __atomic_store_n(&rt->hold, 0, __ATOMIC_RELEASE);
        return -1;
    }
    return 0;
}

extern "C" void kt__cuda_release(kt__cuda_rt *rt)
{
    __atomic_store_n(&rt->hold, 0, __ATOMIC_RELEASE);
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
    /* mapped: kernels may read it at the same address (unified addressing) */
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped) !=
        cudaSuccess) {
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
    flush_pending(rt);
    cudaSetDevice(rt->device);
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
    return 0;
}

extern "C" int kt__cuda_copy_async(kt__cuda_rt *rt, void *dst, const void *src, size_t bytes)
{
    flush_pending(rt);
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, rt->stream) == cudaSuccess ? 0
                                                                                           : -1;
}

extern "C" int kt__cuda_side_enable(kt__cuda_rt *rt, char *err, size_t err_size)
{
    flush_pending(rt);
    if (rt->side)
        return 0;
    CK(cudaStreamCreateWithFlags(&rt->side, cudaStreamNonBlocking), "cudaStreamCreate (copies)");
    for (int i = 0; i < 2; i++) {
        CK(cudaEventCreateWithFlags(&rt->copied[i], cudaEventDisableTiming), "cudaEventCreate");
        CK(cudaEventCreateWithFlags(&rt->freed[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    for (int i = 0; i < KT__CUDA_STAGES; i++)
        CK(cudaEventCreateWithFlags(&rt->staged[i], cudaEventDisableTiming | cudaEventBlockingSync),
           "cudaEventCreate");
    return 0;
}

extern "C" int kt__cuda_side_copy(kt__cuda_rt *rt, void *dst, const void *src, size_t bytes)
{
    flush_pending(rt);
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, rt->side) == cudaSuccess
               ? 0 : -1;
}

extern "C" int kt__cuda_side_fence(kt__cuda_rt *rt, int slot, int what)
{
    flush_pending(rt);
    cudaError_t e;
    switch (what) {
    case KT__CUDA_SIDE_WAIT_FREED:
        e = cudaStreamWaitEvent(rt->side, rt->freed[slot], 0);
        break;
    case KT__CUDA_SIDE_COPIED:
        e = cudaEventRecord(rt->copied[slot], rt->side);
        break;
    case KT__CUDA_MAIN_WAIT_COPIED:
        e = cudaStreamWaitEvent(rt->stream, rt->copied[slot], 0);
        break;
    default: /* KT__CUDA_MAIN_FREED */
        e = cudaEventRecord(rt->freed[slot], rt->stream);
        break;
    }
    return e == cudaSuccess ? 0 : -1;
}

extern "C" int kt__cuda_side_stage(kt__cuda_rt *rt, int piece, int what)
{
    flush_pending(rt);
    cudaEvent_t ev = rt->staged[piece % KT__CUDA_STAGES];
    if (what == KT__CUDA_STAGE_QUEUED)
        return cudaEventRecord(ev, rt->side) == cudaSuccess ? 0 : -1;
    return cudaEventSynchronize(ev) == cudaSuccess ? 0 : -1;
}

extern "C" int kt__cuda_host_fn(kt__cuda_rt *rt, void (*fn)(void *), void *arg)
{
    flush_pending(rt);
    return cudaLaunchHostFunc(rt->stream, fn, arg) == cudaSuccess ? 0 : -1;
}

/* the stream, for the launches in hybrid.cu (no CUDA type crosses kt_cuda.h) */
extern "C" void *kt__cuda_stream_handle(kt__cuda_rt *rt)
{
    flush_pending(rt);
    return (void *)rt->stream;
}

extern "C" int kt__cuda_sync(kt__cuda_rt *rt, char *err, size_t err_size)
{
    flush_pending(rt);
    CK(cudaGetLastError(), "kernel launch");
    CK(cudaEventRecord(rt->done, rt->stream), "cudaEventRecord");
    CK(cudaEventSynchronize(rt->done), "cudaEventSynchronize");
    return 0;
}

extern "C" int kt__cuda_wait(kt__cuda_rt *rt, int spin, char *err, size_t err_size)
{
    flush_pending(rt);
    if (!spin || !rt->spin_done)
        return kt__cuda_sync(rt, err, err_size);
    CK(cudaGetLastError(), "kernel launch");
    CK(cudaEventRecord(rt->spin_done, rt->stream), "cudaEventRecord");
    cudaError_t e;
    while ((e = cudaEventQuery(rt->spin_done)) == cudaErrorNotReady)
        ;
    if (cudaPeekAtLastError() == cudaErrorNotReady)
        cudaGetLastError(); /* the polls' answer is no error to report later */
    CK(e, "cudaEventQuery");
    return 0;
}

extern "C" int kt__cuda_check(kt__cuda_rt *rt, char *err, size_t err_size)
{
    flush_pending(rt);
    CK(cudaGetLastError(), "kernel launch");
    return 0;
}

extern "C" int kt__cuda_capture_begin(kt__cuda_rt *rt, char *err, size_t err_size)
{
    flush_pending(rt);
    kt__cuda_graph_drop(rt);
    CK(cudaStreamBeginCapture(rt->stream, cudaStreamCaptureModeThreadLocal),
       "cudaStreamBeginCapture");
    return 0;
}

extern "C" int kt__cuda_capture_end(kt__cuda_rt *rt, char *err, size_t err_size)
{
    flush_pending(rt);
    cudaGraph_t g = NULL;
    CK(cudaStreamEndCapture(rt->stream, &g), "cudaStreamEndCapture");
    rt->graph = g;
    CK(cudaGraphInstantiate(&rt->exec, g, 0), "cudaGraphInstantiate");
    return 0;
}

extern "C" int kt__cuda_graph_launch(kt__cuda_rt *rt, char *err, size_t err_size)
{
    flush_pending(rt);
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
    case KT__CUDA_W_I4: {
        uint32_t word = ((const uint32_t *)W.data)[i / 8];
        size_t si = (size_t)r * W.scale_cols + c / W.block_cols;
        float s = W.scale_bf16 ? bf16(((const uint16_t *)W.scale)[si])
                               : ((const float *)W.scale)[si];
        return (float)((int32_t)((word >> (4 * (c % 8))) & 15u) - 8) * s;
    }
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

/* e4m3 bits moved into an F32's exponent and mantissa fields give 2^-120 times
 * the value, normal and subnormal alike (exact; weights hold no NaN) */
__device__ __forceinline__ float fp8_fast(uint32_t b)
{
    return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * 0x1p120f;
}

/* 8 BF16 values (16 bytes, lowest first) as F32 */
__device__ __forceinline__ void bf16x8(uint4 u, float w[8])
{
    const uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        w[2 * j] = __uint_as_float(p[j] << 16);
        w[2 * j + 1] = __uint_as_float(p[j] & 0xffff0000u);
    }
}

/* an L2 policy for weights read once: their lines are the first evicted (so
 * they do not push out what was prefetched for the next kernel) */
__device__ __forceinline__ uint64_t l2_evict_first()
{
    uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
    return pol;
}

/* 16 read-only bytes at p with the L2 policy pol (l2_evict_first) */
__device__ __forceinline__ uint4 ldg_policy(const uint4 *p, uint64_t pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint4 r;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p), "l"(pol));
    return r;
#else
    (void)pol;
    return __ldg(p);
#endif
}

/* W[r][c..c+8) as F32 in one 16-byte (BF16, F32: two) or 8-byte (FP8) load;
 * c is a multiple of 8 and the FP8 column blocks are multiples of 8 wide; EF:
 * BF16 rows read with the L2 policy pol */
template <int TY, bool EF = false>
__device__ __forceinline__ void load8t(const kt__cuda_mat &W, int32_t r, int32_t c, float w[8],
                                       uint64_t pol = 0)
{
    size_t i = (size_t)r * W.cols + c;
    if constexpr (TY == KT__CUDA_W_BF16) {
        const uint4 *p = (const uint4 *)((const uint16_t *)W.data + i);
        bf16x8(EF ? ldg_policy(p, pol) : __ldg(p), w);
    } else if constexpr (TY == KT__CUDA_W_F8) {
        uint2 u = __ldg((const uint2 *)((const uint8_t *)W.data + i));
        size_t si = (size_t)(r / W.block_rows) * W.scale_cols + c / W.block_cols;
        /* the scale without a branch (one would split the unrolled loops' loads
         * into separate blocks): the aligned 4 bytes holding it, BF16 or F32
         * (scale buffers are allocated in 256-byte units) */
        uintptr_t sa = (uintptr_t)W.scale + (si << (W.scale_bf16 ? 1 : 2));
        uint32_t word = __ldg((const uint32_t *)(sa & ~(uintptr_t)3));
        float s = __uint_as_float(W.scale_bf16 ? (word >> (8 * (sa & 2))) << 16 : word);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            w[j] = fp8_fast((u.x >> (8 * j)) & 0xffu) * s;
            w[4 + j] = fp8_fast((u.y >> (8 * j)) & 0xffu) * s;
        }
    } else if constexpr (TY == KT__CUDA_W_I4) {
        /* one word: 8 nibbles q + 8, lowest first; the group's scale as above */
        uint32_t u = __ldg((const uint32_t *)W.data + i / 8);
        size_t si = (size_t)r * W.scale_cols + c / W.block_cols;
        uintptr_t sa = (uintptr_t)W.scale + (si << (W.scale_bf16 ? 1 : 2));
        uint32_t word = __ldg((const uint32_t *)(sa & ~(uintptr_t)3));
        float s = __uint_as_float(W.scale_bf16 ? (word >> (8 * (sa & 2))) << 16 : word);
#pragma unroll
        for (int j = 0; j < 8; j++)
            w[j] = (float)((int32_t)((u >> (4 * j)) & 15u) - 8) * s;
    } else {
        const float4 *p = (const float4 *)((const float *)W.data + i);
        float4 a = __ldg(p), b = __ldg(p + 1);
        w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
        w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    }
}

/* W[r][c..c+8) as F32 in one 16-byte (BF16, F32: two) or 8-byte (FP8) load;
 * c is a multiple of 8 and the FP8 column blocks are multiples of 8 wide. The
 * loops that keep several loads in flight call load8t with the type fixed:
 * a branch on the type inside the loop keeps the compiler from batching them */
__device__ __forceinline__ void load8(const kt__cuda_mat &W, int32_t r, int32_t c, float w[8])
{
    if (W.type == KT__CUDA_W_BF16)
        load8t<KT__CUDA_W_BF16>(W, r, c, w);
    else if (W.type == KT__CUDA_W_F8)
        load8t<KT__CUDA_W_F8>(W, r, c, w);
    else if (W.type == KT__CUDA_W_I4)
        load8t<KT__CUDA_W_I4>(W, r, c, w);
    else
        load8t<KT__CUDA_W_F32>(W, r, c, w);
}

/* Σ_j w[j] x[c + j] with x 16-byte aligned */
__device__ __forceinline__ float dot8(const float w[8], const float *x)
{
    float4 a = *(const float4 *)x, b = *(const float4 *)(x + 4);
    return w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y +
           w[6] * b.z + w[7] * b.w;
}

/* Whether W can be read 8 columns at a time (load8). */
static bool vec8_ok(const kt__cuda_mat *W)
{
    return W->data && W->cols % 8 == 0 && ((uintptr_t)W->data & 15) == 0 &&
           (W->type != KT__CUDA_W_F8 || (W->block_cols % 8 == 0 && W->block_rows > 0)) &&
           (W->type != KT__CUDA_W_I4 || (W->block_cols % 8 == 0 && W->block_rows == 1));
}

static bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static bool x_ok(const float *x, int32_t stride)
{
    return ((uintptr_t)x & 15) == 0 && stride % 4 == 0;
}

/* ------------------------------------------------------------- kernels --- */

/* k<<<grid, block, smem, stream>>>(args) with programmatic dependent launch
 * where the runtime uses it: only for kernels that call pdl_wait() before they
 * touch anything the kernel before them reads or writes */
template <typename... P, typename... A>
static void launch_pdl(kt__cuda_rt *rt, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                       A... args)
{
    cudaLaunchAttribute at;
    memset(&at, 0, sizeof at);
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = rt->stream;
    cfg.attrs = &at;
    cfg.numAttrs = rt->pdl ? 1 : 0;
    cudaLaunchKernelEx(&cfg, k, args...);
}

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

/* One token (decode): x in shared memory, a warp per row, each lane 8 columns
 * a step with up to 8 steps' weight loads in flight (k_gemv keeps 8 tokens'
 * sums and reads x from global memory: more registers, fewer warps resident,
 * fewer bytes in flight; about half of HBM speed on large matrices) */
#define GEMV1_THREADS 512
#define GEMV1_MAX_COLS 12288 /* x in at most 48 KB of shared memory */

/* n floats (a multiple of 4) of x into shared memory, then a barrier: 4 loads
 * a thread in flight (their indices clamped, not guarded: a load behind a
 * branch is waited for before the next one is issued) */
__device__ __forceinline__ void x_to_smem(float *xs, const float *x, int32_t n)
{
    const int32_t n4 = n / 4, step = blockDim.x;
    for (int32_t base = threadIdx.x; base < n4; base += 4 * step) {
        float4 r[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            r[j] = __ldg((const float4 *)x + min(base + j * step, n4 - 1));
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (base + j * step < n4)
                ((float4 *)xs)[base + j * step] = r[j];
    }
    __syncthreads();
}

/* Programmatic dependent launch (sm_90+; KT_GPU_PDL=0 turns it off): a kernel
 * that launch_pdl starts may begin while the kernel before it in the stream
 * still runs, and waits here before it reads or writes anything that kernel
 * touches; then it lets the next one begin (only once all of its blocks have
 * got here: the one before has finished by then). A no-op in a kernel launched
 * the usual way. */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* Σ of every thread's s over the block (part: a warp's sum each, 32 floats) */
__device__ __forceinline__ float block_sum(float s, float *part)
{
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
    return part[0];
}

/* Whether this block is the last of `blocks` to get here (a ticket in device
 * memory, put back to 0 by that block for the next launch); the writes of every
 * block before the call are visible to it. Every thread of the block calls it. */
__device__ __forceinline__ bool last_block(unsigned *ticket, unsigned blocks)
{
    __shared__ bool last;
    __threadfence(); /* this block's writes visible device-wide before its ticket */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(ticket, 1u) == blocks - 1;
        if (last)
            *ticket = 0;
    }
    __syncthreads();
    if (last)
        __threadfence();
    return last;
}

/* x += a (+ a2); y = x / sqrt(mean(x²) + eps) · w over one row of n floats (n a
 * multiple of 4, at most ARN_MAX; a NULL: the norm alone, x only read), by the
 * whole block of NT threads: the row's values in registers between the sum and
 * the scaling, every load in flight at once. a and a2 are read through L2
 * (other blocks of the same grid may have just written them). */
#define ARN_MAX 8192
#define ARN_THREADS 512 /* k_add_rmsnorm4's block */
template <int NT>
__device__ __forceinline__ void add_norm_row(float *x, const float *a, const float *a2, float *y,
                                             int32_t n, const float *w, float eps)
{
    constexpr int ARN_V = ARN_MAX / (4 * NT);
    __shared__ float part[32];
    const int32_t n4 = n / 4, tid = threadIdx.x, nt = NT;
    float4 *xr = (float4 *)x;
    float4 v[ARN_V];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < ARN_V; j++) {
        int32_t i = tid + j * nt;
        if (i < n4) {
            v[j] = xr[i];
            if (a) {
                float4 q = __ldcg((const float4 *)a + i);
                if (a2) {
                    float4 q2 = __ldcg((const float4 *)a2 + i);
                    q = make_float4(q.x + q2.x, q.y + q2.y, q.z + q2.z, q.w + q2.w);
                }
                v[j] = make_float4(v[j].x + q.x, v[j].y + q.y, v[j].z + q.z, v[j].w + q.w);
                xr[i] = v[j];
            }
            s += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        }
    }
    float inv = 1.0f / sqrtf(block_sum(s, part) / n + eps);
#pragma unroll
    for (int j = 0; j < ARN_V; j++) {
        int32_t i = tid + j * nt;
        if (i < n4) {
            float4 g = __ldg((const float4 *)w + i);
            ((float4 *)y)[i] = make_float4(v[j].x * inv * g.x, v[j].y * inv * g.y,
                                           v[j].z * inv * g.z, v[j].w * inv * g.w);
        }
    }
}

/* the product's x: ni's norm (add_norm_row's sums in its order, so the same
 * values) into shared memory xs by every block, block 0 also into ni.xn (blocks
 * of ARN_THREADS); else x_to_smem. The row is read twice (the second time from
 * L1) rather than held in registers beside the product's weights. */
template <int NT = ARN_THREADS, int NMAX = ARN_MAX>
__device__ __forceinline__ void x_or_norm_to_smem(float *xs, const float *x, int32_t n,
                                                  const norm_in &ni)
{
    if (!ni.x) {
        x_to_smem(xs, x, n);
        return;
    }
    __shared__ float part[32];
    constexpr int ARN_V = NMAX / (4 * NT); /* NMAX: the longest row the caller norms */
    const int32_t n4 = ni.n / 4, tid = threadIdx.x;
    const float4 *xr = (const float4 *)ni.x;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < ARN_V; j++) {
        int32_t i = tid + j * NT;
        if (i < n4) {
            float4 v = xr[i];
            s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    }
    float inv = 1.0f / sqrtf(block_sum(s, part) / ni.n + ni.eps);
#pragma unroll
    for (int j = 0; j < ARN_V; j++) {
        int32_t i = tid + j * NT;
        if (i < n4) {
            float4 v = xr[i], g = __ldg((const float4 *)ni.w + i);
            float4 r = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z,
                                   v.w * inv * g.w);
            ((float4 *)xs)[i] = r;
            if (blockIdx.x == 0)
                ((float4 *)ni.xn)[i] = r;
        }
    }
    __syncthreads();
}

/* After a decode product: x += y (+ a2); xn = RMSNorm(x) · w, by the grid's last
 * block (ticket NULL: nothing) */
struct norm_tail {
    float *x, *xn;
    const float *a2, *w;
    float eps;
    unsigned *ticket;
};

/* bytes of one row of W's data */
__device__ __forceinline__ uint32_t row_bytes(const kt__cuda_mat &W)
{
    return W.type == KT__CUDA_W_BF16 ? 2u * W.cols
           : W.type == KT__CUDA_W_F32 ? 4u * W.cols
           : W.type == KT__CUDA_W_F8  ? (uint32_t)W.cols
                                      : (uint32_t)W.cols / 2u;
}

/* weight row r of W into L2 ahead of its loads (one bulk prefetch by lane 0,
 * before pdl_wait: the weights do not depend on the kernel before) */
__device__ __forceinline__ void prefetch_row(const kt__cuda_mat &W, int32_t r)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t bytes = row_bytes(W);
    const char *p = (const char *)W.data + (size_t)r * bytes;
    if (threadIdx.x % 32 == 0 && bytes % 16 == 0 && ((uintptr_t)p & 15) == 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes)
                     : "memory");
#endif
}

/* this lane's share of W[r]·x, up to 8 steps' loads in flight */
template <int TY>
__device__ __forceinline__ float row_dot_t(const kt__cuda_mat &W, int32_t r, const float *xs)
{
    float s = 0.0f;
#pragma unroll 8
    for (int32_t c = (threadIdx.x % 32) * 8; c < W.cols; c += 256) {
        float w[8];
        load8t<TY>(W, r, c, w);
        s += dot8(w, xs + c);
    }
    return s;
}

/* By lane 0 of row r's warp, s the warp's sum W[r]·x: y[r] (+)= s + b[r], and
 * with res (GEMV_NORM_IN) the residual sum res[r] += y[r] */
__device__ __forceinline__ void gemv1_store(float s, const float *b, float *y, int acc, int32_t r,
                                            float *res)
{
    if (threadIdx.x % 32 == 0) {
        s += b ? b[r] : 0.0f;
        s = acc ? y[r] + s : s;
        y[r] = s;
        if (res)
            res[r] += s;
    }
}

__device__ __forceinline__ void gemv1_row(const float *xs, const kt__cuda_mat &W, const float *b,
                                          float *y, int acc, int32_t r, float *res = NULL)
{
    float s = W.type == KT__CUDA_W_BF16 ? row_dot_t<KT__CUDA_W_BF16>(W, r, xs)
              : W.type == KT__CUDA_W_F8 ? row_dot_t<KT__CUDA_W_F8>(W, r, xs)
              : W.type == KT__CUDA_W_I4 ? row_dot_t<KT__CUDA_W_I4>(W, r, xs)
                                        : row_dot_t<KT__CUDA_W_F32>(W, r, xs);
    gemv1_store(warp_sum(s), b, y, acc, r, res);
}

/* BF16 row r of W, this lane's NB 16-byte chunks (columns 8 (lane + 32 j)) into
 * registers, all in flight; chunks past the row's end read its last one again
 * (weighted 0 by row_consume_bf16) */
template <int NB>
__device__ __forceinline__ void row_issue_bf16(const kt__cuda_mat &W, int32_t r, uint4 raw[NB])
{
    const uint4 *p = (const uint4 *)((const uint16_t *)W.data + (size_t)r * W.cols);
    const int32_t n16 = W.cols / 8, lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < NB; j++)
        raw[j] = __ldg(p + min(lane + 32 * j, n16 - 1));
}

/* this lane's share of W[r]·x from row_issue_bf16's chunks, x in shared memory:
 * Σ_j Σ_i w[8 q_j + i] x[8 q_j + i], q_j = lane + 32 j < cols / 8 */
template <int NB>
__device__ __forceinline__ float row_consume_bf16(const uint4 raw[NB], const float *xs,
                                                  int32_t cols)
{
    const int32_t n16 = cols / 8, lane = threadIdx.x % 32;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NB; j++) {
        const int32_t q = lane + 32 * j, qq = min(q, n16 - 1);
        float w[8];
        bf16x8(raw[j], w);
        s += (float)(q < n16) * dot8(w, xs + 8 * qq); /* arithmetic: no branch */
    }
    return s;
}

/* columns a one-token BF16 product streams before it waits: NB 16-byte chunks a
 * lane (0: the row is read after the wait, through k_gemv1's L2 prefetch) */
static int gemv_pre_nb(const kt__cuda_rt *rt, const kt__cuda_mat *W)
{
    if (!(rt->gemv & GEMV_PRE) || W->type != KT__CUDA_W_BF16)
        return 0;
    return W->cols <= 8 * 32 * 8 ? 8 : W->cols <= 8 * 32 * 16 ? 16 : 0;
}

/* a block's rows of y (+)= W x + b, x through shared memory xs; NB > 0 (BF16
 * weights, cols <= 256 NB): each warp's row in registers before the wait */
template <int NB>
__device__ __forceinline__ void gemv1_block(float *xs, const float *__restrict__ x,
                                            const kt__cuda_mat &W, const float *b, float *y,
                                            int acc, float *res, const norm_in &ni)
{
    int32_t r = blockIdx.x * (GEMV1_THREADS / 32) + threadIdx.x / 32;
    if constexpr (NB > 0) {
        uint4 raw[NB];
        if (r < W.rows)
            row_issue_bf16<NB>(W, r, raw);
        pdl_wait();
        x_or_norm_to_smem(xs, x, W.cols, ni);
        if (r < W.rows)
            gemv1_store(warp_sum(row_consume_bf16<NB>(raw, xs, W.cols)), b, y, acc, r, res);
        return;
    }
    if (r < W.rows)
        prefetch_row(W, r);
    pdl_wait();
    x_or_norm_to_smem(xs, x, W.cols, ni);
    if (r < W.rows)
        gemv1_row(xs, W, b, y, acc, r, res);
}

/* NB 8: two blocks a multiprocessor (64 registers a thread) */
template <int NB>
__global__ void __launch_bounds__(GEMV1_THREADS, NB == 8 ? 2 : 0)
    k_gemv1(const float *__restrict__ x, kt__cuda_mat W, const float *b, float *y, int acc,
            norm_tail nt, float *res)
{
    extern __shared__ float4 xs4[];
    norm_in none = {};
    gemv1_block<NB>((float *)xs4, x, W, b, y, acc, res, none);
    /* the residual add and the next norm over the finished y */
    if (nt.ticket && last_block(nt.ticket, gridDim.x))
        add_norm_row<GEMV1_THREADS>(nt.x, y, nt.a2, nt.xn, W.rows, nt.w, nt.eps);
}

/* One row r of y for up to TOK_TILE tokens with 16-byte weight loads: a warp
 * per row, each lane 8 columns per step, several steps in flight */
__device__ __forceinline__ void gemv_row(const float *__restrict__ x, int32_t T, int32_t xs,
                                         const kt__cuda_mat &W, const float *b, float *y,
                                         int32_t ys, int acc, int32_t r)
{
    int32_t lane = threadIdx.x % 32;
    int32_t t0 = blockIdx.y * TOK_TILE, nt = min(TOK_TILE, T - t0);
    float s[TOK_TILE];
#pragma unroll
    for (int t = 0; t < TOK_TILE; t++)
        s[t] = 0.0f;
    const float *xt = x + (size_t)t0 * xs;
#pragma unroll 4
    for (int32_t c = lane * 8; c < W.cols; c += 256) {
        float w[8];
        load8(W, r, c, w);
#pragma unroll
        for (int t = 0; t < TOK_TILE; t++)
            if (t < nt)
                s[t] += dot8(w, xt + (size_t)t * xs + c);
    }
#pragma unroll
    for (int t = 0; t < TOK_TILE; t++) {
        if (t >= nt)
            break;
        float v = warp_sum(s[t]);
        if (lane == 0) {
            v += b ? b[r] : 0.0f;
            float *o = &y[(size_t)(t0 + t) * ys + r];
            *o = acc ? *o + v : v;
        }
    }
}

/* k_linear for up to TOK_TILE tokens per block with 16-byte weight loads */
__global__ void k_gemv(const float *__restrict__ x, int32_t T, int32_t xs, kt__cuda_mat W,
                       const float *b, float *y, int32_t ys, int acc)
{
    int32_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r < W.rows)
        gemv_row(x, T, xs, W, b, y, ys, acc, r);
}

/* Up to three products of one input in one launch: the warps' rows run over
 * W_0's rows, then W_1's, then W_2's */
struct gemv_set {
    kt__cuda_mat W[3];
    const float *b[3];
    float *y[3];
    int32_t ys[3];
};

/* One q or k head in buf (head_dim floats of shared memory, by one warp, in
 * place): its RMSNorm with the weights w (NULL: none), then RoPE at position pos
 * (k_rope's angles) over the first rope_dim values */
__device__ void qk_norm_rope(const kt__cuda_qk_post &a, const float *w, float *buf, int32_t pos)
{
    const int32_t hd = a.head_dim, lane = threadIdx.x % 32;
    float s = 0.0f;
    for (int32_t i = lane; i < hd; i += 32)
        s += buf[i] * buf[i];
    if (w) {
        /* y = x / sqrt(mean(x²) + eps) · w */
        float inv = 1.0f / sqrtf(warp_sum(s) / hd + a.eps);
        for (int32_t i = lane; i < hd; i += 32)
            buf[i] = buf[i] * inv * w[i];
    }
    __syncwarp();
    /* rotate the pairs of the first rope_dim values: angle pos · inv_freq[i] */
    int32_t rd = a.inv_freq && a.rope_dim > 0 ? a.rope_dim : 0, half = rd / 2;
    for (int32_t i = lane; i < half; i += 32) {
        float ang = (float)pos * a.inv_freq[i];
        float c = cosf(ang) * a.factor, sn = sinf(ang) * a.factor;
        int32_t ia = a.interleave ? 2 * i : i, ib = a.interleave ? 2 * i + 1 : i + half;
        float x0 = buf[ia], x1 = buf[ib];
        buf[ia] = x0 * c - x1 * sn;
        buf[ib] = x1 * c + x0 * sn;
    }
    __syncwarp();
}

/* GQA after the q, k, v products, head b of token t (q heads, then k heads, then
 * v heads) by one warp: the head's RMSNorm, RoPE at *pos0 + t (k_rope's angles)
 * in place, and k, v into the caches at that row; buf: head_dim floats of shared
 * memory. q, k, v are read through L2 (other blocks of the same grid may have
 * just written them). */
__device__ void qk_post_head(const kt__cuda_qk_post &a, int32_t b, int32_t t, float *buf)
{
    const int32_t hd = a.head_dim, kvdim = a.n_head_kv * hd, lane = threadIdx.x % 32;
    const int32_t pos = *a.pos0 + t;
    if (b >= a.n_head + a.n_head_kv) {
        /* v: a copy into the cache */
        int32_t h = b - a.n_head - a.n_head_kv;
        const float *src = a.v + (size_t)t * a.kv_stride + (size_t)h * hd;
        float *dst = a.v_cache + (size_t)pos * kvdim + (size_t)h * hd;
        for (int32_t i = lane; i < hd; i += 32)
            dst[i] = __ldcg(src + i);
        return;
    }
    bool is_q = b < a.n_head;
    int32_t h = is_q ? b : b - a.n_head;
    float *p = is_q ? a.q + (size_t)t * a.q_stride + (size_t)h * hd
                    : a.k + (size_t)t * a.kv_stride + (size_t)h * hd;
    float *cache = is_q ? NULL : a.k_cache + (size_t)pos * kvdim + (size_t)h * hd;
    for (int32_t i = lane; i < hd; i += 32)
        buf[i] = __ldcg(p + i);
    qk_norm_rope(a, is_q ? a.q_norm : a.k_norm, buf, pos);
    for (int32_t i = lane; i < hd; i += 32) {
        p[i] = buf[i];
        if (cache)
            cache[i] = buf[i];
    }
    __syncwarp(); /* buf read whole before the warp's next head */
}

/* k_gemv_n for one token (k_gemv1's way); with a ticket, the grid's last block
 * then runs qk_post over the finished q, k, v (a warp per head, each warp's
 * head_dim floats where x was) */
template <int NB>
__global__ void __launch_bounds__(GEMV1_THREADS, NB == 8 ? 2 : 1)
    k_gemv1_n(const float *__restrict__ x, gemv_set g, kt__cuda_qk_post qp, unsigned *ticket,
              norm_in ni)
{
    extern __shared__ float4 xs4[];
    float *xs = (float *)xs4;
    /* this warp's matrix m and row r */
    int32_t r = blockIdx.x * (GEMV1_THREADS / 32) + threadIdx.x / 32, m = 0;
    while (m < 3 && r >= g.W[m].rows)
        r -= g.W[m++].rows;
    /* the matrix by value (selects): indexed in the parameters it kept the
     * compiler from batching the row's loads */
    const kt__cuda_mat W = m == 0 ? g.W[0] : m == 1 ? g.W[1] : g.W[2];
    const float *b = m == 0 ? g.b[0] : m == 1 ? g.b[1] : g.b[2];
    float *y = m == 0 ? g.y[0] : m == 1 ? g.y[1] : g.y[2];
    if constexpr (NB > 0) {
        /* every matrix BF16 (the host checked): the row in registers first */
        uint4 raw[NB];
        if (m < 3)
            row_issue_bf16<NB>(W, r, raw);
        pdl_wait();
        x_or_norm_to_smem(xs, x, g.W[0].cols, ni);
        if (m < 3)
            gemv1_store(warp_sum(row_consume_bf16<NB>(raw, xs, W.cols)), b, y, 0, r, NULL);
    } else {
        if (m < 3)
            prefetch_row(W, r);
        pdl_wait();
        x_or_norm_to_smem(xs, x, g.W[0].cols, ni);
        if (m < 3)
            gemv1_row(xs, W, b, y, 0, r);
    }
    if (ticket && last_block(ticket, gridDim.x)) {
        const int32_t warps = GEMV1_THREADS / 32, warp = threadIdx.x / 32;
        for (int32_t b = warp; b < qp.n_head + 2 * qp.n_head_kv; b += warps)
            qk_post_head(qp, b, 0, xs + (size_t)warp * qp.head_dim);
    }
}

/* k_gemv1_n<NB> two rows a warp in blocks of 4 warps (GEMV_QKV2): one warp a
 * row in blocks of 16 (two a multiprocessor at 64 registers) holds 4,224 rows
 * at once on 132 multiprocessors, and Qwen3's 5,120 rows of q / k / v then ran
 * in two waves; two rows a warp (both rows' NB chunks a lane in flight before
 * the wait) fit them in one. Every matrix's rows even (a pair never spans two
 * matrices), BF16, no fold (the host checks). */
#define GEMV2_THREADS 128
template <int NB>
__global__ void __launch_bounds__(GEMV2_THREADS, 5)
    k_gemv1_n2(const float *__restrict__ x, gemv_set g, norm_in ni)
{
    extern __shared__ float4 xs4[];
    float *xs = (float *)xs4;
    int32_t r = 2 * (blockIdx.x * (GEMV2_THREADS / 32) + threadIdx.x / 32), m = 0;
    while (m < 3 && r >= g.W[m].rows)
        r -= g.W[m++].rows;
    const kt__cuda_mat W = m == 0 ? g.W[0] : m == 1 ? g.W[1] : g.W[2];
    const float *b = m == 0 ? g.b[0] : m == 1 ? g.b[1] : g.b[2];
    float *y = m == 0 ? g.y[0] : m == 1 ? g.y[1] : g.y[2];
    uint4 ra[NB], rb[NB];
    if (m < 3) {
        row_issue_bf16<NB>(W, r, ra);
        row_issue_bf16<NB>(W, r + 1, rb);
    }
    pdl_wait();
    x_or_norm_to_smem<GEMV2_THREADS, 8 * 32 * NB>(xs, x, g.W[0].cols, ni);
    if (m < 3) {
        const float sa = warp_sum(row_consume_bf16<NB>(ra, xs, W.cols));
        const float sb = warp_sum(row_consume_bf16<NB>(rb, xs, W.cols));
        gemv1_store(sa, b, y, 0, r, NULL);
        gemv1_store(sb, b, y, 0, r + 1, NULL);
    }
}

__global__ void k_gemv_n(const float *__restrict__ x, int32_t T, int32_t xs, gemv_set g)
{
    int32_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r < g.W[0].rows) {
        gemv_row(x, T, xs, g.W[0], g.b[0], g.y[0], g.ys[0], 0, r);
        return;
    }
    r -= g.W[0].rows;
    if (r < g.W[1].rows) {
        gemv_row(x, T, xs, g.W[1], g.b[1], g.y[1], g.ys[1], 0, r);
        return;
    }
    r -= g.W[1].rows;
    if (r < g.W[2].rows)
        gemv_row(x, T, xs, g.W[2], g.b[2], g.y[2], g.ys[2], 0, r);
}

__device__ __forceinline__ uint16_t bf16_rne(float f)
{
    uint32_t u = __float_as_uint(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* x[t][c] = hi + lo + O(2^-17 |x|): hi = bf16(x), lo = bf16(x - hi), rows packed */
__global__ void k_split_bf16(const float *x, int32_t xs, int32_t cols, size_t n, uint16_t *hi,
                             uint16_t *lo)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = x[(i / cols) * xs + i % cols];
    uint16_t h = bf16_rne(v);
    hi[i] = h;
    lo[i] = bf16_rne(v - bf16(h));
}

/* FP8 block-scaled or INT4 grouped W[r][c] = q · s into BF16 hi and lo (q · s to
 * 2^-17; INT4 with BF16 scales exactly) */
__global__ void k_fp8_split(kt__cuda_mat W, size_t n, uint16_t *hi, uint16_t *lo)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = wval(W, (int32_t)(i / W.cols), (int32_t)(i % W.cols));
    uint16_t h = bf16_rne(v);
    hi[i] = h;
    lo[i] = bf16_rne(v - bf16(h));
}

/* y[t][r] += b[r] */
__global__ void k_bias(float *y, int32_t ys, int32_t rows, size_t n, const float *b)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[(i / rows) * ys + i % rows] += b[i % rows];
}

extern "C" int kt__cuda_gemm_enable(kt__cuda_rt *rt, void *staging, size_t staging_elems,
                                    void *wstaging, size_t wstaging_elems, int32_t min_tokens,
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
    rt->wb = (uint16_t *)wstaging;
    rt->wb_elems = wstaging_elems;
    rt->gemm_min_t = min_tokens > 0 ? min_tokens : 16;
    return 0;
}

/* yᵀ[rows][T] (+)= A[rows][cols] · Bᵀ in cuBLAS's column-major terms (A read
 * transposed in place, B = [T][cols] packed) */
static cublasStatus_t gemm_bf16(kt__cuda_rt *rt, const kt__cuda_mat *W, const void *A,
                                const void *B, int32_t T, float *y, int32_t ys, float beta)
{
    float alpha = 1.0f;
    return cublasGemmEx(rt->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, T, W->cols, &alpha, A,
                        CUDA_R_16BF, W->cols, B, CUDA_R_16BF, W->cols, &beta, y, CUDA_R_32F, ys,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* Products of gemm_min_t tokens or more on the tensor cores when cuBLAS is
 * enabled. The activations go in as two BF16 halves (x = hi + lo to 2^-17), so
 * with BF16 weights the product is that of the F32 activations to about F32's
 * accuracy (two GEMMs); FP8 weights are dequantized (q · s) into hi and lo
 * halves too (three GEMMs: hi·hi + hi·lo + lo·hi). F32 weights: F32 pedantic. */
static bool gemm(kt__cuda_rt *rt, const float *x, int32_t T, int32_t xs, const kt__cuda_mat *W,
                 const float *bias, float *y, int32_t ys, int acc)
{
    if (!rt->blas || T < rt->gemm_min_t || !W->data)
        return false;
    float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
    cublasStatus_t st;
    if (W->type == KT__CUDA_W_F32) {
        st = cublasGemmEx(rt->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, T, W->cols, &alpha,
                          W->data, CUDA_R_32F, W->cols, x, CUDA_R_32F, xs, &beta, y, CUDA_R_32F,
                          ys, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
    } else {
        size_t n = (size_t)T * W->cols, nw = (size_t)W->rows * W->cols;
        if (n > rt->xb_elems || (W->type != KT__CUDA_W_BF16 && nw > rt->wb_elems))
            return false;
        uint16_t *xh = rt->xb, *xl = rt->xb + rt->xb_elems;
        k_split_bf16<<<(unsigned)((n + 255) / 256), 256, 0, rt->stream>>>(x, xs, W->cols, n,
                                                                             xh, xl);
        if (W->type == KT__CUDA_W_BF16) {
            st = gemm_bf16(rt, W, W->data, xh, T, y, ys, beta);
            if (st == CUBLAS_STATUS_SUCCESS)
                st = gemm_bf16(rt, W, W->data, xl, T, y, ys, 1.0f);
        } else {
            uint16_t *wh = rt->wb, *wl = rt->wb + rt->wb_elems;
            k_fp8_split<<<(unsigned)((nw + 255) / 256), 256, 0, rt->stream>>>(*W, nw, wh, wl);
            st = gemm_bf16(rt, W, wh, xh, T, y, ys, beta);
            if (st == CUBLAS_STATUS_SUCCESS)
                st = gemm_bf16(rt, W, wh, xl, T, y, ys, 1.0f);
            if (st == CUBLAS_STATUS_SUCCESS)
                st = gemm_bf16(rt, W, wl, xh, T, y, ys, 1.0f);
        }
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return false;
    if (bias) {
        size_t n = (size_t)T * W->rows;
        k_bias<<<(unsigned)((n + 255) / 256), 256, 0, rt->stream>>>(y, ys, W->rows, n, bias);
    }
    return true;
}

/* k_gemv1 over W's rows, 16 a block, with the weight rows read before the wait
 * where gemv_pre_nb allows */
static void launch_gemv1(kt__cuda_rt *rt, const float *x, const kt__cuda_mat *W, const float *b,
                         float *y, int acc, norm_tail nt, float *res = NULL)
{
    unsigned blocks = (W->rows + GEMV1_THREADS / 32 - 1) / (GEMV1_THREADS / 32);
    size_t xs = sizeof(float) * (size_t)W->cols;
    int nb = gemv_pre_nb(rt, W);
    launch_pdl(rt, nb == 8 ? k_gemv1<8> : nb == 16 ? k_gemv1<16> : k_gemv1<0>, blocks,
               GEMV1_THREADS, xs, x, *W, b, y, acc, nt, res);
}

/* Whether GEMV_NORM_IN applies to a residual row of n floats x, its norm xn
 * with weights w (add_norm_row's limits, blocks of GEMV1_THREADS) */
static bool norm_in_ok(const kt__cuda_rt *rt, int32_t n, const float *x, const float *xn,
                       const float *w)
{
    return (rt->gemv & GEMV_NORM_IN) && x && xn && w && n % 4 == 0 && n <= ARN_MAX &&
           al16(x) && al16(xn) && al16(w) && GEMV1_THREADS == ARN_THREADS;
}

/* The work left pending to the next call (a q / k post step, a norm), launched
 * now: every entry point that queues work runs this first, but those that
 * take it over */
static void qk_post_launch(kt__cuda_rt *rt, const kt__cuda_qk_post *a);
__global__ void __launch_bounds__(ARN_THREADS) k_add_rmsnorm4(float *x, const float *a,
                                                              const float *a2, float *y,
                                                              int32_t n, const float *w,
                                                              float eps);
static void flush_norm(kt__cuda_rt *rt)
{
    if (rt->pn.x) {
        norm_in p = rt->pn;
        rt->pn.x = NULL;
        launch_pdl(rt, k_add_rmsnorm4, 1, ARN_THREADS, 0, (float *)p.x, (const float *)NULL,
                   (const float *)NULL, p.xn, p.n, p.w, p.eps);
    }
}

static void flush_route(kt__cuda_rt *rt);
static void flush_pending(kt__cuda_rt *rt)
{
    flush_route(rt); /* GEMV_ROUTE_UP: set by the router, before anything else pending */
    if (rt->post_pending) {
        rt->post_pending = 0;
        qk_post_launch(rt, &rt->post);
    }
    flush_norm(rt);
}

/* the pending norm for a one-token product of x (n floats) when x is its row
 * (taken over: none left pending), else none (anything pending launched) */
static norm_in take_norm(kt__cuda_rt *rt, const float *x, int32_t n)
{
    norm_in ni = {};
    if (rt->pn.x && rt->pn.xn == x && rt->pn.n == n && !rt->post_pending) {
        ni = rt->pn;
        rt->pn.x = NULL;
    }
    flush_pending(rt);
    return ni;
}

extern "C" int kt__cuda_linear(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride,
                               const kt__cuda_mat *W, const float *bias, float *y,
                               int32_t y_stride, int accumulate)
{
    flush_pending(rt);
    if (T <= 0)
        return 0;
    if (gemm(rt, x, T, x_stride, W, bias, y, y_stride, accumulate))
        return 0;
    dim3 grid((W->rows + 7) / 8, (T + TOK_TILE - 1) / TOK_TILE);
    if (T == 1 && vec8_ok(W) && x_ok(x, x_stride) && W->cols <= GEMV1_MAX_COLS) {
        norm_tail none;
        memset(&none, 0, sizeof none);
        launch_gemv1(rt, x, W, bias, y, accumulate, none);
    } else if (vec8_ok(W) && x_ok(x, x_stride))
        k_gemv<<<grid, 256, 0, rt->stream>>>(x, T, x_stride, *W, bias, y, y_stride, accumulate);
    else
        k_linear<<<grid, 256, 0, rt->stream>>>(x, T, x_stride, *W, bias, y, y_stride,
                                               accumulate);
    return 0;
}

/* Whether a one-token product's last block can add its rows into x and norm
 * them (add_norm_row's limits) */
static bool tail_ok(const kt__cuda_rt *rt, int32_t n, const float *x, const float *y,
                    const float *xn, const float *w)
{
    return (rt->fuse & FUSE_ADD_NORM) && n % 4 == 0 && n <= ARN_MAX && al16(x) && al16(y) &&
           al16(xn) && al16(w);
}

extern "C" int kt__cuda_linear_add_norm(kt__cuda_rt *rt, const float *in, int32_t T,
                                        int32_t in_stride, const kt__cuda_mat *W,
                                        const float *bias, float *y, float *x, float *xn,
                                        const float *w, float eps)
{
    flush_pending(rt);
    if (T == 1 && vec8_ok(W) && x_ok(in, in_stride) && W->cols <= GEMV1_MAX_COLS &&
        tail_ok(rt, W->rows, x, y, xn, w)) {
        norm_tail nt = {x, xn, NULL, w, eps, rt->ticket + TK_LINEAR};
        launch_gemv1(rt, in, W, bias, y, 0, nt);
        return 0;
    }
    if (T == 1 && vec8_ok(W) && x_ok(in, in_stride) && W->cols <= GEMV1_MAX_COLS &&
        norm_in_ok(rt, W->rows, x, xn, w)) {
        /* the rows added into x as they are stored, the norm left to the next
         * product (GEMV_NORM_IN) */
        norm_tail none;
        memset(&none, 0, sizeof none);
        launch_gemv1(rt, in, W, bias, y, 0, none, x);
        rt->pn = {x, xn, w, eps, W->rows};
        return 0;
    }
    kt__cuda_linear(rt, in, T, in_stride, W, bias, y, W->rows, 0);
    return kt__cuda_add_rmsnorm(rt, x, y, xn, T, W->rows, w, eps);
}

/* kt__cuda_linear_n; with qp, qk_post after it, folded into the one-token
 * launch's last block where that applies (false: qp still to run) */
static bool linear_n(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride, int32_t n,
                     const kt__cuda_mat *const W[], const float *const bias[],
                     float *const y[], const int32_t y_stride[], const kt__cuda_qk_post *qp)
{
    if (T <= 0)
        return true;
    bool one = n >= 1 && n <= 3 && x_ok(x, x_stride) && !(rt->blas && T >= rt->gemm_min_t);
    for (int32_t i = 0; i < n && one; i++)
        one = vec8_ok(W[i]) && W[i]->cols == W[0]->cols;
    if (!one) {
        for (int32_t i = 0; i < n; i++)
            kt__cuda_linear(rt, x, T, x_stride, W[i], bias[i], y[i], y_stride[i], 0);
        return false;
    }
    gemv_set g;
    memset(&g, 0, sizeof g);
    int32_t rows = 0;
    for (int32_t i = 0; i < n; i++) {
        g.W[i] = *W[i];
        g.b[i] = bias[i];
        g.y[i] = y[i];
        g.ys[i] = y_stride[i];
        rows += W[i]->rows;
    }
    if (T == 1 && W[0]->cols <= GEMV1_MAX_COLS) {
        norm_in ni = take_norm(rt, x, W[0]->cols);
        /* the heads' buffers where x was: a warp each */
        bool fold = qp && (rt->fuse & FUSE_QK_POST) &&
                    (int64_t)(GEMV1_THREADS / 32) * qp->head_dim <= W[0]->cols;
        kt__cuda_qk_post none;
        memset(&none, 0, sizeof none);
        int nb = gemv_pre_nb(rt, W[0]);
        bool even = true;
        for (int32_t i = 1; i < n; i++)
            nb = gemv_pre_nb(rt, W[i]) == nb ? nb : 0;
        for (int32_t i = 0; i < n; i++)
            even = even && W[i]->rows % 2 == 0;
        if ((rt->gemv & GEMV_QKV2) && nb == 8 && even && !fold) {
            const int32_t pairs = rows / 2, per = GEMV2_THREADS / 32;
            launch_pdl(rt, k_gemv1_n2<8>, (pairs + per - 1) / per, GEMV2_THREADS,
                       sizeof(float) * (size_t)W[0]->cols, x, g, ni);
            return false;
        }
        launch_pdl(rt, nb == 8 ? k_gemv1_n<8> : nb == 16 ? k_gemv1_n<16> : k_gemv1_n<0>,
                   (rows + GEMV1_THREADS / 32 - 1) / (GEMV1_THREADS / 32), GEMV1_THREADS,
                   sizeof(float) * (size_t)W[0]->cols, x, g, fold ? *qp : none,
                   fold ? rt->ticket + TK_QKV : (unsigned *)NULL, ni);
        return fold;
    }
    flush_pending(rt);
    dim3 grid((rows + 7) / 8, (T + TOK_TILE - 1) / TOK_TILE);
    k_gemv_n<<<grid, 256, 0, rt->stream>>>(x, T, x_stride, g);
    return false;
}

extern "C" int kt__cuda_linear_n(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride,
                                 int32_t n, const kt__cuda_mat *const W[],
                                 const float *const bias[], float *const y[],
                                 const int32_t y_stride[])
{
    flush_pending(rt);
    linear_n(rt, x, T, x_stride, n, W, bias, y, y_stride, NULL);
    return 0;
}

extern "C" int kt__cuda_qkv_post(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride,
                                 const kt__cuda_mat *const W[3], const float *const bias[3],
                                 float *const y[3], const int32_t y_stride[3],
                                 const kt__cuda_qk_post *qp)
{
    return linear_n(rt, x, T, x_stride, 3, W, bias, y, y_stride, qp) ? 0 : 1;
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
    flush_pending(rt);
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
    float inv = 1.0f / sqrtf(block_sum(s, part) / n + eps);
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = xr[i] * inv * w[i];
}

/* x += a; y = x / sqrt(mean(x²) + eps) · w, one block of 128 per row (the sums
 * in k_rmsnorm's order: the same result as k_add then k_rmsnorm) */
__global__ void k_add_rmsnorm(float *x, const float *a, float *y, int32_t n, const float *w,
                              float eps)
{
    __shared__ float part[32];
    float *xr = x + (size_t)blockIdx.x * n;
    const float *ar = a + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i] + ar[i];
        xr[i] = v;
        s += v * v;
    }
    float inv = 1.0f / sqrtf(block_sum(s, part) / n + eps);
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = xr[i] * inv * w[i];
}

/* The same with 4-float loads (add_norm_row: n a multiple of 4, at most
 * ARN_MAX), x += a + a2 (a2 optional; a NULL: the norm alone) */
__global__ void __launch_bounds__(ARN_THREADS) k_add_rmsnorm4(float *x, const float *a,
                                                              const float *a2, float *y,
                                                              int32_t n, const float *w,
                                                              float eps)
{
    pdl_wait();
    size_t row = (size_t)blockIdx.x * n;
    add_norm_row<ARN_THREADS>(x + row, a ? a + row : NULL, a2 ? a2 + row : NULL, y + row, n, w,
                              eps);
}

static bool add_rmsnorm4_ok(const float *x, const float *add, const float *y, int32_t n,
                            const float *w)
{
    return n % 4 == 0 && n <= ARN_MAX && al16(x) && al16(add) && al16(y) &&
           al16(w);
}

extern "C" int kt__cuda_rmsnorm(kt__cuda_rt *rt, const float *x, float *y, int32_t rows,
                                int32_t n, int32_t x_stride, int32_t y_stride, const float *w,
                                float eps)
{
    flush_pending(rt);
    if (rows <= 0)
        return 0;
    if (x_stride == n && y_stride == n && add_rmsnorm4_ok(x, NULL, y, n, w))
        launch_pdl(rt, k_add_rmsnorm4, rows, ARN_THREADS, 0, (float *)x, (const float *)NULL,
                   (const float *)NULL, y, n, w, eps);
    else
        k_rmsnorm<<<rows, 128, 0, rt->stream>>>(x, y, n, x_stride, y_stride, w, eps);
    return 0;
}

extern "C" int kt__cuda_add_rmsnorm2(kt__cuda_rt *rt, float *x, const float *add,
                                     const float *add2, float *y, int32_t rows, int32_t n,
                                     const float *w, float eps)
{
    flush_pending(rt);
    if (rows <= 0)
        return 0;
    if (add_rmsnorm4_ok(x, add, y, n, w) && al16(add2)) {
        launch_pdl(rt, k_add_rmsnorm4, rows, ARN_THREADS, 0, x, add, add2, y, n, w, eps);
        return 0;
    }
    if (add2)
        kt__cuda_add(rt, (float *)add, add2, rows, n, NULL);
    k_add_rmsnorm<<<rows, 128, 0, rt->stream>>>(x, add, y, n, w, eps);
    return 0;
}

extern "C" int kt__cuda_add_rmsnorm(kt__cuda_rt *rt, float *x, const float *add, float *y,
                                    int32_t rows, int32_t n, const float *w, float eps)
{
    flush_pending(rt);
    return kt__cuda_add_rmsnorm2(rt, x, add, NULL, y, rows, n, w, eps);
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
    flush_pending(rt);
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
    flush_pending(rt);
    if (T > 0)
        k_store<<<T, 128, 0, rt->stream>>>(src, src_stride, n, cache, row, pos0);
    return 0;
}

/* GQA after the products: a warp per (head, token), 4 a block */
#define QKP_WARPS 4
__global__ void __launch_bounds__(32 * QKP_WARPS) k_qk_post(kt__cuda_qk_post a)
{
    extern __shared__ float buf[];
    pdl_wait();
    int32_t warp = threadIdx.x / 32, b = blockIdx.x * QKP_WARPS + warp;
    if (b < a.n_head + 2 * a.n_head_kv)
        qk_post_head(a, b, blockIdx.y, buf + (size_t)warp * a.head_dim);
}

static void qk_post_launch(kt__cuda_rt *rt, const kt__cuda_qk_post *a)
{
    if (a->T > 0)
        launch_pdl(rt, k_qk_post,
                   dim3((a->n_head + 2 * a->n_head_kv + QKP_WARPS - 1) / QKP_WARPS, a->T),
                   32 * QKP_WARPS, sizeof(float) * QKP_WARPS * (size_t)a->head_dim, *a);
}

/* GEMV_QK_ATTN, one token: left to the next kt__cuda_attention (the split
 * kernel runs it, or that call launches it first) */
extern "C" int kt__cuda_qk_post_run(kt__cuda_rt *rt, const kt__cuda_qk_post *a)
{
    flush_pending(rt);
    if ((rt->gemv & GEMV_QK_ATTN) && a->T == 1) {
        rt->post = *a;
        rt->post_pending = 1;
        return 0;
    }
    qk_post_launch(rt, a);
    return 0;
}

/* o[t][h] = Σ_j softmax_j(scale · (qa·ka_j + qb·kb_j) (+ sink)) v_j over the visible
 * positions lo..pos0+t; one block per (head, token): the query in shared memory,
 * a warp per position for the scores (coalesced key rows), scores in shared memory,
 * threads over the value dims for the sum */
#define ATTN_MAX_QDIM 1024
__global__ void k_attention(kt__cuda_attn a)
{
    extern __shared__ float sm[];
    __shared__ float red[32];
    const int32_t qd = a.ka_dim + a.kb_dim, qpad = (qd + 3) & ~3;
    float *qs = sm, *sc = sm + qpad;
    int32_t h = blockIdx.x, t = blockIdx.y, kh = h / a.group;
    int32_t pos = *a.pos0 + t;
    int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    int32_t n = pos + 1 - lo;
    const float *q = a.q + (size_t)t * a.q_st + (size_t)h * a.q_sh;
    for (int32_t d = threadIdx.x; d < qd; d += blockDim.x)
        qs[d] = q[d];
    __syncthreads();
    /* s_j = scale · q·k_j */
    int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    float mx = -INFINITY;
    for (int32_t i = warp; i < n; i += nw) {
        int32_t p = lo + i;
        const float *ka = a.ka + (size_t)p * a.ka_sp + (size_t)kh * a.ka_sh;
        float s = 0.0f;
        for (int32_t d = lane; d < a.ka_dim; d += 32)
            s += qs[d] * ka[d];
        if (a.kb_dim) {
            const float *kb = a.kb + (size_t)p * a.kb_sp + (size_t)kh * a.kb_sh;
            for (int32_t d = lane; d < a.kb_dim; d += 32)
                s += qs[a.ka_dim + d] * kb[d];
        }
        s = warp_sum(s) * a.scale;
        if (lane == 0)
            sc[i] = s;
        mx = fmaxf(mx, s);
    }
    /* block max (the sink takes part) */
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = a.sinks ? a.sinks[h] : -INFINITY;
        for (int32_t w = 0; w < nw; w++)
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
    if (lane == 0)
        red[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = a.sinks ? expf(a.sinks[h] - mx) : 0.0f;
        for (int32_t w = 0; w < nw; w++)
            s += red[w];
        red[0] = s;
    }
    __syncthreads();
    float inv = 1.0f / red[0];
    /* o = Σ p_j v_j, threads over the value dims */
    float *o = a.o + (size_t)t * a.o_st + (size_t)h * a.o_sh;
    for (int32_t e = threadIdx.x; e < a.v_dim; e += blockDim.x) {
        float acc = 0.0f;
        const float *vp = a.v + (size_t)lo * a.v_sp + (size_t)kh * a.v_sh + e;
        for (int32_t i = 0; i < n; i++)
            acc += sc[i] * vp[(size_t)i * a.v_sp];
        o[e] = acc * inv;
    }
}

/* Decode attention split over the positions (flash-decoding). A block of
 * AS_THREADS serves nhb query heads that share one kv head (gsz query heads a kv
 * head) for token t over its share s of the visible positions, in tiles of up
 * to tp positions: the tile's key rows (and value rows, unless the values are
 * the keys' first columns, as in absorbed MLA) are loaded into shared memory
 * with every load of the tile in flight at once, then the scores (a warp per
 * position, every head of the block from one key row), the tile's softmax
 * folded into running max m and sum l per head (online softmax), and
 * acc = Σ_j p_j v_j with each thread on one 4-float column of v for up to
 * AS_MAXP heads. Writes m, l and acc per (t, head, split); k_attn_merge joins
 * them. */
#define AS_THREADS 256
#define AS_TILE 64
#define AS_MAXH 8
#define AS_MAXP 4
#define AS_LOADS 12               /* 16-byte loads a thread issues before storing */
#define AS_SMEM_MAX (96 * 1024)   /* dynamic shared memory the split kernel may take */
#define AS_QLOADS 5               /* the queries' float4s a thread: 8 heads of 576 */

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sums over the warp of 8 values a lane (d[h], h < 8): lane l ends with the
 * sum of d[h] for h = 4 b4 + 2 b3 + b2 (bits of l), in 9 shuffles instead of 8
 * warp_sums' 40: each of the first three steps keeps half of the values a lane
 * holds and adds the partner's other half (checked by a lane-level simulation) */
__device__ __forceinline__ float warp_sum8(const float d[8], int32_t lane)
{
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
    float e[4], f[2];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float send = b4 ? d[i] : d[i + 4], keep = b4 ? d[i + 4] : d[i];
        e[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float send = b3 ? e[i] : e[i + 2], keep = b3 ? e[i + 2] : e[i];
        f[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
    }
    float send = b2 ? f[0] : f[1], keep = b2 ? f[1] : f[0];
    float g = keep + __shfl_xor_sync(0xffffffffu, send, 4);
    g += __shfl_xor_sync(0xffffffffu, g, 2);
    return g + __shfl_xor_sync(0xffffffffu, g, 1);
}

__device__ __forceinline__ float dot4(float4 a, float4 b)
{
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

/* where the partial sums start in the split kernel's scratch: after the m, l
 * pairs, 16-byte aligned */
__host__ __device__ __forceinline__ size_t as_po_off(int32_t T, int32_t n_head, int32_t S)
{
    return ((size_t)T * n_head * S * 2 + 3) & ~(size_t)3;
}

/* The shapes of one split launch (host-computed) */
struct as_shape {
    int32_t nhb, gsz, S, T, tp; /* heads a block, heads a kv head, splits, tokens, tile */
    int32_t qpad, vshared;      /* query row in floats (x4); values = the keys' columns */
    int32_t pre, early;         /* GEMV_ATTN: the split's rows into L2 before the wait;
                                 * GEMV_ATTN_EARLY: its first tile's final rows into
                                 * shared memory before the wait */
    int32_t qkp;                /* GEMV_QK_ATTN: the q / k post step of qp done here */
};

/* bytes at p (16-byte aligned, a multiple of 16) into L2, no wait (a hint: safe
 * before pdl_wait whatever the kernel before writes, L2 being coherent) */
__device__ __forceinline__ void prefetch_l2(const void *p, uint32_t bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

/* The split block's key (and value) rows into L2 before it waits: the cached
 * positions were written by earlier steps and the position by the step's first
 * copy; a row the kernel before still writes (this step's) is only a hint. A
 * thread a row: the split's positions' ka, kb and v rows. */
__device__ __forceinline__ void attn_split_prefetch(const kt__cuda_attn &a, const as_shape &sh)
{
    const int32_t h0 = blockIdx.x * sh.nhb, s = blockIdx.y, t = blockIdx.z;
    const int32_t kh = h0 / sh.gsz, S = sh.S;
    const int32_t pos = *a.pos0 + t;
    const int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    const int32_t n = pos + 1 - lo, per = (n + S - 1) / S;
    const int32_t p0 = lo + s * per, p1 = min(p0 + per, pos + 1);
    const int32_t kinds = sh.vshared ? 2 : 3;
    for (int32_t i = threadIdx.x; i < (p1 - p0) * kinds; i += blockDim.x) {
        const int32_t p = p0 + i / kinds, kind = i % kinds;
        if (kind == 0)
            prefetch_l2(a.ka + (size_t)kh * a.ka_sh + (size_t)p * a.ka_sp, 4u * a.ka_dim);
        else if (kind == 1 && a.kb && a.kb_dim > 0)
            prefetch_l2(a.kb + (size_t)kh * a.kb_sh + (size_t)p * a.kb_sp, 4u * a.kb_dim);
        else if (kind == 2)
            prefetch_l2(a.v + (size_t)kh * a.v_sh + (size_t)p * a.v_sp, 4u * a.v_dim);
    }
}

/* float4 c4 of position p's tile row: the key row (ka then kb columns), then the
 * value row; the address by selects (no branch: the loads stay batched) */
__device__ __forceinline__ const float4 *as_src(const kt__cuda_attn &a, const float *ka,
                                                const float *kb, const float *vb, int32_t p,
                                                int32_t c4, int32_t q4)
{
    const int32_t c = 4 * c4;
    const bool in_a = c < a.ka_dim, in_k = c4 < q4;
    const float *base = in_k ? (in_a ? ka : kb) : vb;
    const int32_t sp = in_k ? (in_a ? a.ka_sp : a.kb_sp) : a.v_sp;
    const int32_t col = in_k ? (in_a ? c : c - a.ka_dim) : c - 4 * q4;
    return (const float4 *)(base + (size_t)p * sp + col);
}

/* o[t][h] = Σ_s e^(m_s - M) acc_s / (Σ_s e^(m_s - M) l_s (+ e^(sink - M))), M the
 * largest m_s (and the sink), for heads h0..h0+nh of token t, by the whole
 * block: the weights of every (head, split) in shared memory (a warp per head:
 * lane l holds splits l and l + 32), then thread (part, head, c4) sums the
 * 4-float column c4 of its head over the splits part, part + parts, ... (8
 * loads in flight), and the parts' sums are added in shared memory. The
 * partials are read through L2 (the other blocks of the split kernel wrote
 * them when the last of them merges). */
struct as_merge_smem {
    float w[AS_MAXH][KT__CUDA_ATTN_SPLITS];
    float4 red[AS_THREADS];
};

__device__ void merge_heads(const kt__cuda_attn &a, int32_t S, int32_t T, const float *part,
                            int32_t h0, int32_t nh, int32_t t, as_merge_smem &sm)
{
    const int32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (int32_t hh = warp; hh < nh; hh += AS_THREADS / 32) {
        const int32_t h = h0 + hh;
        const float *ml = part + ((size_t)t * a.n_head + h) * S * 2;
        /* empty splits (l = 0) weigh nothing */
        float m0 = -INFINITY, l0 = 0.0f, m1 = -INFINITY, l1 = 0.0f;
        if (lane < S && __ldcg(ml + 2 * lane + 1) > 0.0f)
            m0 = __ldcg(ml + 2 * lane), l0 = __ldcg(ml + 2 * lane + 1);
        if (lane + 32 < S && __ldcg(ml + 2 * lane + 65) > 0.0f)
            m1 = __ldcg(ml + 2 * lane + 64), l1 = __ldcg(ml + 2 * lane + 65);
        float sink = a.sinks ? a.sinks[h] : -INFINITY;
        float M = warp_max(fmaxf(fmaxf(m0, m1), sink));
        float e0 = l0 > 0.0f ? expf(m0 - M) : 0.0f, e1 = l1 > 0.0f ? expf(m1 - M) : 0.0f;
        float L = warp_sum(e0 * l0 + e1 * l1) + (a.sinks ? expf(sink - M) : 0.0f);
        float inv = 1.0f / L;
        if (lane < S)
            sm.w[hh][lane] = e0 * inv;
        if (lane + 32 < S)
            sm.w[hh][lane + 32] = e1 * inv;
    }
    __syncthreads();
    const int32_t V4 = a.v_dim / 4, units = nh * V4;
    const int32_t parts = units >= AS_THREADS ? 1 : AS_THREADS / units;
    const size_t po0 = as_po_off(T, a.n_head, S);
    for (int32_t base = 0; base < units * parts; base += AS_THREADS) {
        const int32_t idx = base + tid, pt = idx / units, u = idx % units;
        const int32_t hh = u / V4, c4 = u % V4;
        const bool on = idx < units * parts;
        const float *po =
            part + po0 + ((size_t)t * a.n_head + h0 + min(hh, nh - 1)) * S * a.v_dim;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int32_t i0 = pt; on && i0 < S; i0 += 8 * parts) {
#pragma unroll
            for (int q = 0; q < 8; q++) {
                /* an empty split's sums were never written, and a split past the
                 * end reads the last one: weight 0, not added (selects after the
                 * load: no branch around it) */
                int32_t i = i0 + q * parts, ii = min(i, S - 1);
                float w = sm.w[hh][ii] * (float)(i < S); /* arithmetic: no branch */
                float4 p = __ldcg((const float4 *)(po + (size_t)ii * a.v_dim) + c4);
                bool use = w != 0.0f;
                acc.x += use ? w * p.x : 0.0f, acc.y += use ? w * p.y : 0.0f;
                acc.z += use ? w * p.z : 0.0f, acc.w += use ? w * p.w : 0.0f;
            }
        }
        float *o = a.o + (size_t)t * a.o_st + (size_t)(h0 + min(hh, nh - 1)) * a.o_sh;
        if (parts == 1) {
            if (on)
                *(float4 *)(o + 4 * c4) = acc;
            continue;
        }
        sm.red[tid] = acc;
        __syncthreads();
        if (on && pt == 0) {
            for (int32_t q = 1; q < parts; q++) {
                float4 b = sm.red[q * units + u];
                acc.x += b.x, acc.y += b.y, acc.z += b.z, acc.w += b.w;
            }
            *(float4 *)(o + 4 * c4) = acc;
        }
    }
}

/* merge_heads for one head a block, grid (heads, tokens) */
__global__ void __launch_bounds__(AS_THREADS) k_attn_merge(kt__cuda_attn a, int32_t S, int32_t T,
                                                           const float *part)
{
    __shared__ as_merge_smem sm;
    pdl_wait();
    merge_heads(a, S, T, part, blockIdx.x, 1, blockIdx.y, sm);
}

/* positions p .. p + n of the kv head's key (and value) rows into tile rows
 * r0 .. r0 + n of kv: AS_LOADS loads a thread in flight, then their stores */
__device__ __forceinline__ void as_tile_load(const kt__cuda_attn &a, const float *ka,
                                             const float *kb, const float *vb, float *kv,
                                             int32_t r0, int32_t p, int32_t n, int32_t row4,
                                             int32_t q4)
{
    const int32_t total = n * row4, tid = threadIdx.x;
    float4 *dst = (float4 *)kv + (size_t)r0 * row4;
    for (int32_t base = 0; base < total; base += AS_THREADS * AS_LOADS) {
        float4 r[AS_LOADS];
#pragma unroll
        for (int j = 0; j < AS_LOADS; j++) {
            int32_t i = min(base + j * AS_THREADS + tid, total - 1); /* clamped */
            r[j] = __ldg(as_src(a, ka, kb, vb, p + i / row4, i % row4, q4));
        }
#pragma unroll
        for (int j = 0; j < AS_LOADS; j++) {
            int32_t i = base + j * AS_THREADS + tid;
            if (i < total)
                dst[i] = r[j];
        }
    }
}

__device__ __forceinline__ void attn_split_block(const kt__cuda_attn &a, const as_shape &sh,
                                                 const kt__cuda_qk_post &qp, float *part);

/* The split kernel; with tickets (one per head group and token), the last of a
 * group's S split blocks merges the group's heads (no merge launch); sh.qkp: the
 * queries and the step's key and value rows are qp's raw products (one token) */
__global__ void __launch_bounds__(AS_THREADS) k_attn_split(kt__cuda_attn a, as_shape sh,
                                                           kt__cuda_qk_post qp, float *part,
                                                           unsigned *tickets)
{
    __shared__ as_merge_smem msm;
    if (sh.pre)
        attn_split_prefetch(a, sh);
    if (!sh.early)
        pdl_wait();
    attn_split_block(a, sh, qp, part); /* early: it waits after its first tile's loads */
    if (!tickets)
        return;
    unsigned *tk = tickets + (size_t)blockIdx.z * gridDim.x + blockIdx.x;
    if (last_block(tk, sh.S))
        merge_heads(a, sh.S, sh.T, part, blockIdx.x * sh.nhb, sh.nhb, blockIdx.z, msm);
}

/* With sh.qkp (one token): the block's query heads in qs normed and rotated in
 * place, and, in the block whose split holds the position, the kv head kh's key
 * row (normed, rotated) and value row from qp's products into kvn[0..qpad) and
 * kvn[qpad..2 qpad), stored into the caches by the group's first block; a warp
 * a head. qk_norm_rope and the stores are k_qk_post's, so the same values. */
__device__ __forceinline__ void split_qk_post(const kt__cuda_qk_post &qp, const as_shape &sh,
                                              float *qs, float *kvn, int32_t kh, bool own,
                                              bool store, int32_t pos)
{
    const int32_t hd = qp.head_dim, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t row = (size_t)pos * qp.n_head_kv * hd + (size_t)kh * hd;
    __syncthreads(); /* the queries in place */
    for (int32_t b = warp; b < sh.nhb + (own ? 2 : 0); b += AS_THREADS / 32) {
        if (b < sh.nhb) {
            qk_norm_rope(qp, qp.q_norm, qs + (size_t)b * sh.qpad, pos);
            continue;
        }
        const bool is_k = b == sh.nhb;
        float *buf = kvn + (is_k ? 0 : sh.qpad);
        const float *src = (is_k ? qp.k : qp.v) + (size_t)kh * hd;
        for (int32_t i = lane; i < hd; i += 32)
            buf[i] = __ldcg(src + i);
        if (is_k)
            qk_norm_rope(qp, qp.k_norm, buf, pos);
        else
            __syncwarp();
        float *dst = (is_k ? qp.k_cache : qp.v_cache) + row;
        for (int32_t i = lane; store && i < hd; i += 32)
            dst[i] = buf[i];
    }
    __syncthreads();
}

/* one split block's partial softmax (m, l, acc) for its heads (k_attn_split) */
__device__ __forceinline__ void attn_split_block(const kt__cuda_attn &a, const as_shape &sh,
                                                 const kt__cuda_qk_post &qp, float *part)
{
    extern __shared__ float4 sm4[];
    const int32_t nhb = sh.nhb, S = sh.S, T = sh.T, TP = sh.tp, qpad = sh.qpad;
    const int32_t q4 = (a.ka_dim + a.kb_dim) / 4, v4 = sh.vshared ? 0 : a.v_dim / 4;
    const int32_t row4 = q4 + v4; /* float4s of a tile row */
    float *sm = (float *)sm4;
    float *qs = sm;                          /* [nhb][qpad] queries          */
    float *kv = qs + nhb * qpad;             /* [TP][row4 * 4] keys, values  */
    float *sc = kv + (size_t)TP * row4 * 4;  /* [nhb][TP] scores             */
    float *m_s = sc + nhb * TP;              /* [AS_MAXH] running max        */
    float *l_s = m_s + AS_MAXH;              /* [AS_MAXH] running sum        */
    float *c_s = l_s + AS_MAXH;              /* [AS_MAXH] rescale            */
    float *kvn = c_s + AS_MAXH;              /* [2][qpad] sh.qkp: the step's k, v rows */
    const int32_t h0 = blockIdx.x * nhb, s = blockIdx.y, t = blockIdx.z;
    const int32_t kh = h0 / sh.gsz, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const float *ka = a.ka + (size_t)kh * a.ka_sh;
    const float *kb = a.kb ? a.kb + (size_t)kh * a.kb_sh : NULL;
    const float *vb = a.v + (size_t)kh * a.v_sh;
    const int32_t pos = *a.pos0 + t;
    const int32_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    const int32_t n = pos + 1 - lo, per = (n + S - 1) / S;
    const int32_t p0 = lo + s * per, p1 = min(p0 + per, pos + 1);
    /* early (the kernel has not waited yet): the first tile's rows before the
     * step's first position into shared memory, then the wait; `done` rows of
     * that tile are in place */
    int32_t done = 0;
    if (sh.early) {
        done = max(0, min(min(TP, p1 - p0), *a.pos0 - p0));
        as_tile_load(a, ka, kb, vb, kv, 0, p0, done, row4, q4);
        pdl_wait();
    }
    /* the block's queries (q4 float4s a head; qpad = 4 q4) */
    const int32_t nq4 = nhb * q4;
    const float4 *qg = (const float4 *)(a.q + (size_t)t * a.q_st);
    float4 qr[AS_QLOADS];
#pragma unroll
    for (int j = 0; j < AS_QLOADS; j++) {
        int32_t i = min(tid + j * AS_THREADS, nq4 - 1);
        qr[j] = __ldg(qg + (size_t)(h0 + i / q4) * (a.q_sh / 4) + i % q4);
    }
    float *ml = part + (((size_t)t * a.n_head + h0) * S + s) * 2;
    float *po = part + as_po_off(T, a.n_head, S) + (((size_t)t * a.n_head + h0) * S + s) * a.v_dim;
    const size_t ml_h = (size_t)S * 2, po_h = (size_t)S * a.v_dim; /* to the next head */
    if (p0 >= p1) {
        if (tid < nhb) {
            ml[tid * ml_h] = -INFINITY;
            ml[tid * ml_h + 1] = 0.0f;
        }
        return;
    }
    const int32_t qd = a.ka_dim + a.kb_dim;
#pragma unroll
    for (int j = 0; j < AS_QLOADS; j++)
        if (tid + j * AS_THREADS < nq4)
            ((float4 *)qs)[tid + j * AS_THREADS] = qr[j];
    if (tid < AS_MAXH) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    const bool own = sh.qkp && p0 <= pos && pos < p1; /* this block holds the step's row */
    if (sh.qkp)
        split_qk_post(qp, sh, qs, kvn, kh, own, h0 % sh.gsz == 0, pos);
    /* this thread's v column and heads: hh = hb + j·hstep */
    const int32_t V4 = a.v_dim / 4, c4 = tid % V4, hb = tid / V4, hstep = AS_THREADS / V4;
    const int32_t vcol = sh.vshared ? 0 : 4 * q4; /* a value row's offset in a tile row */
    float4 acc[AS_MAXP];
#pragma unroll
    for (int j = 0; j < AS_MAXP; j++)
        acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int32_t tp = p0; tp < p1; tp += TP) {
        const int32_t nt = min(TP, p1 - tp), skip = tp == p0 ? done : 0;
        /* the tile (but the rows loaded before the wait) */
        as_tile_load(a, ka, kb, vb, kv, skip, tp + skip, nt - skip, row4, q4);
        __syncthreads();
        if (own && pos < tp + nt) {
            /* the step's row as computed here (the cache's copy was read through
             * the non-coherent path in the same kernel that stored it) */
            float *dst = kv + (size_t)(pos - tp) * row4 * 4;
            for (int32_t i = tid; i < 4 * row4; i += AS_THREADS)
                dst[i] = kvn[i < 4 * q4 ? i : i - 4 * q4 + qpad];
            __syncthreads();
        }
        /* s_hj = scale · q_h · k_j: a warp per position */
        for (int32_t i = warp; i < nt; i += AS_THREADS / 32) {
            const float *kr = kv + (size_t)i * row4 * 4;
            float d[AS_MAXH];
#pragma unroll
            for (int hh = 0; hh < AS_MAXH; hh++)
                d[hh] = 0.0f;
            for (int32_t c = 4 * lane; c < qd; c += 128) {
                float4 k4 = *(const float4 *)(kr + c);
#pragma unroll
                for (int hh = 0; hh < AS_MAXH; hh++)
                    if (hh < nhb)
                        d[hh] += dot4(*(const float4 *)(qs + hh * qpad + c), k4);
            }
            /* the heads' sums spread over the lanes (d[h] = 0 for h >= nhb) */
            static_assert(AS_MAXH == 8, "warp_sum8 reduces 8 heads");
            float v = warp_sum8(d, lane);
            int32_t hs = 4 * ((lane >> 4) & 1) + 2 * ((lane >> 3) & 1) + ((lane >> 2) & 1);
            if ((lane & 3) == 0 && hs < nhb)
                sc[hs * TP + i] = v * a.scale;
        }
        __syncthreads();
        /* per head: m' = max(m, max_j s_j), p_j = e^(s_j - m'), l' = l e^(m - m') + Σ p_j */
        for (int32_t hh = warp; hh < nhb; hh += AS_THREADS / 32) {
            float mx = -INFINITY;
            for (int32_t i = lane; i < nt; i += 32)
                mx = fmaxf(mx, sc[hh * TP + i]);
            mx = warp_max(mx);
            float m_old = m_s[hh], m_new = fmaxf(m_old, mx), sum = 0.0f;
            for (int32_t i = lane; i < nt; i += 32) {
                float pj = expf(sc[hh * TP + i] - m_new);
                sc[hh * TP + i] = pj;
                sum += pj;
            }
            sum = warp_sum(sum);
            /* every lane has read m_s[hh] before lane 0 writes it (the shuffles
             * order that too, but compute-sanitizer's racecheck counts only
             * barriers: it reported this pair on the H200) */
            __syncwarp();
            if (lane == 0) {
                float corr = expf(m_old - m_new);
                m_s[hh] = m_new;
                l_s[hh] = l_s[hh] * corr + sum;
                c_s[hh] = corr;
            }
        }
        __syncthreads();
        /* acc_h = acc_h e^(m - m') + Σ_j p_hj v_j */
#pragma unroll
        for (int j = 0; j < AS_MAXP; j++) {
            int32_t hh = hb + j * hstep;
            if (hh < nhb) {
                float c = c_s[hh];
                acc[j].x *= c, acc[j].y *= c, acc[j].z *= c, acc[j].w *= c;
            }
        }
        const float *vt = kv + vcol + 4 * c4;
#pragma unroll 4
        for (int32_t i = 0; i < nt; i++) {
            float4 v4 = *(const float4 *)(vt + (size_t)i * row4 * 4);
#pragma unroll
            for (int j = 0; j < AS_MAXP; j++) {
                int32_t hh = hb + j * hstep;
                if (hh < nhb) {
                    float pj = sc[hh * TP + i];
                    acc[j].x += pj * v4.x, acc[j].y += pj * v4.y;
                    acc[j].z += pj * v4.z, acc[j].w += pj * v4.w;
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < AS_MAXP; j++) {
        int32_t hh = hb + j * hstep;
        if (hh < nhb)
            *(float4 *)(po + hh * po_h + 4 * c4) = acc[j];
    }
    if (tid < nhb) {
        ml[tid * ml_h] = m_s[tid];
        ml[tid * ml_h + 1] = l_s[tid];
    }
}

/* Whether the split kernel can run qp's post step for a (GEMV_QK_ATTN): one
 * token of GQA over qp's own products and caches, keys and values of head_dim */
static bool split_post_ok(const kt__cuda_attn *a, const kt__cuda_qk_post *qp)
{
    const int32_t hd = qp->head_dim, kvdim = qp->n_head_kv * hd;
    return a->T == 1 && qp->T == 1 && qp->n_head_kv > 0 && a->n_head == qp->n_head &&
           a->group * qp->n_head_kv == qp->n_head && a->q == qp->q && a->q_sh == hd &&
           a->ka == qp->k_cache && a->v == qp->v_cache && (!a->kb || a->kb_dim == 0) &&
           a->ka_dim == hd && a->v_dim == hd && a->ka_sh == hd && a->v_sh == hd &&
           a->ka_sp == kvdim && a->v_sp == kvdim && a->pos0 == qp->pos0 && hd % 4 == 0 &&
           qp->rope_dim <= hd;
}

/* The split kernel's launch for a (false: not applicable, run k_attention); qp
 * (NULL: none): the q / k post step to run in it (split_post_ok) */
static bool attn_split(kt__cuda_rt *rt, const kt__cuda_attn *a, int32_t max_pos,
                       const kt__cuda_qk_post *qp)
{
    if (a->T > KT__CUDA_ATTN_SPLIT_T || !a->work || a->v_dim <= 0 || a->v_dim % 4 ||
        a->ka_dim % 4 || a->kb_dim % 4 || a->v_dim > 512 || AS_THREADS % (a->v_dim / 4) != 0 ||
        a->group <= 0 || a->ka_dim + a->kb_dim > ATTN_MAX_QDIM)
        return false;
    if (a->ka_sp % 4 || a->ka_sh % 4 || a->v_sp % 4 || a->v_sh % 4 || !al16(a->ka) ||
        !al16(a->q) || a->q_st % 4 || a->q_sh % 4 ||
        !al16(a->v) || !al16(a->work) || !al16(a->o) || a->o_st % 4 || a->o_sh % 4 ||
        (a->kb && (a->kb_sp % 4 || a->kb_sh % 4 || !al16(a->kb))))
        return false;
    /* query heads that read the same keys: a group, or all of them when the kv
     * strides are 0 (absorbed MLA's one latent cache) */
    as_shape sh;
    sh.gsz = a->ka_sh == 0 && a->v_sh == 0 && (!a->kb || a->kb_sh == 0) ? a->n_head : a->group;
    if (sh.gsz <= 0 || a->n_head % sh.gsz)
        return false;
    sh.nhb = 1;
    for (int32_t d = AS_MAXH; d >= 1; d--)
        if (sh.gsz % d == 0) {
            sh.nhb = d;
            break;
        }
    int32_t hstep = AS_THREADS / (a->v_dim / 4);
    if ((sh.nhb + hstep - 1) / hstep > AS_MAXP ||
        sh.nhb * (a->ka_dim + a->kb_dim) / 4 > AS_QLOADS * AS_THREADS)
        return false;
    int32_t blocks = a->n_head / sh.nhb * a->T;
    int32_t S = (2 * rt->sms + blocks - 1) / blocks;
    S = S < 1 ? 1 : S > KT__CUDA_ATTN_SPLITS ? KT__CUDA_ATTN_SPLITS : S;
    int32_t most = (max_pos + 15) / 16; /* at least 16 positions a split at full context */
    if (most >= 1 && S > most)
        S = most;
    if (a->splits > 0)
        S = a->splits < KT__CUDA_ATTN_SPLITS ? a->splits : KT__CUDA_ATTN_SPLITS;
    while (S > 1 && as_po_off(a->T, a->n_head, S) + (size_t)a->T * a->n_head * S * a->v_dim >
                        a->work_elems)
        S /= 2;
    if (as_po_off(a->T, a->n_head, S) + (size_t)a->T * a->n_head * S * a->v_dim > a->work_elems)
        return false;
    /* the values are the keys' first columns (absorbed MLA's latent rows) */
    sh.vshared = a->v == a->ka && a->v_sp == a->ka_sp && a->v_sh == a->ka_sh &&
                 a->v_dim <= a->ka_dim;
    sh.qpad = (a->ka_dim + a->kb_dim + 3) & ~3;
    sh.S = S, sh.T = a->T;
    sh.pre = (rt->gemv & GEMV_ATTN) != 0;
    sh.early = (rt->gemv & GEMV_ATTN_EARLY) && a->rows_final;
    sh.qkp = qp && split_post_ok(a, qp) && sh.gsz == a->group && !sh.vshared;
    if (qp && !sh.qkp)
        return false;
    /* the tile: as many positions as the split holds at max_pos, up to AS_TILE and
     * what fits in AS_SMEM_MAX */
    size_t row = (size_t)(a->ka_dim + a->kb_dim + (sh.vshared ? 0 : a->v_dim));
    size_t fixed = (size_t)sh.nhb * sh.qpad + 3 * AS_MAXH + (sh.qkp ? 2 * sh.qpad : 0);
    int32_t fit = (int32_t)((AS_SMEM_MAX / sizeof(float) - fixed) / (row + sh.nhb));
    int32_t want = (max_pos + S - 1) / S;
    sh.tp = want < AS_TILE ? want : AS_TILE;
    sh.tp = sh.tp < fit ? sh.tp : fit;
    if (sh.tp < 1)
        return false;
    size_t smem = sizeof(float) * (fixed + (size_t)sh.tp * (row + sh.nhb));
    /* the merge in each head group's last split block: a ticket per group */
    bool fold = (rt->fuse & FUSE_ATTN_MERGE) &&
                (size_t)a->n_head / sh.nhb * a->T <= TK_COUNT - TK_ATTN;
    kt__cuda_qk_post none;
    memset(&none, 0, sizeof none);
    if (!(rt->skip & SKIP_SPLIT))
        launch_pdl(rt, k_attn_split, dim3(a->n_head / sh.nhb, S, a->T), AS_THREADS, smem, *a,
                   sh, qp ? *qp : none, a->work, fold ? rt->ticket + TK_ATTN : (unsigned *)NULL);
    if (!fold && !(rt->skip & SKIP_MERGE))
        launch_pdl(rt, k_attn_merge, dim3(a->n_head, a->T), AS_THREADS, 0, *a, S, a->T,
                   (const float *)a->work);
    return true;
}

/* Prefill attention in tiles (T > KT__CUDA_ATTN_SPLIT_T, F32 on the CUDA
 * cores): a block of AT_THREADS serves AT_R query rows, BT tokens x the G query
 * heads of one kv head, so one read of a tile's key and value rows (AT_BK
 * positions, in shared memory) serves all of them (k_attention, a block per
 * head and token, read every key and value row once per query). Per tile:
 * S = scale · Q Kᵀ (4 rows x 4 keys a thread: thread (ty, tx) rows 4 ty..,
 * keys 4 tx..), the causal and window mask, the online softmax per row
 * (m, l; the row's 16 threads reduce by shuffles), O = O e^(m - m') + P V
 * (the same 4 rows x CP value columns a thread). Rows past the last token
 * compute a copy of its row and are not written. */
#define AT_R 64
#define AT_BK 64
#define AT_THREADS 256
#define AT_MAXQD 256
#define AT_LD (AT_R + 4) /* transposed rows padded: stores of a warp across banks */

static size_t attn_tile_smem(int32_t qd, int32_t vd)
{
    return sizeof(float) * (2 * (size_t)qd * AT_LD + (size_t)AT_BK * vd + (size_t)AT_BK * AT_LD);
}

template <int CP>
__global__ void __launch_bounds__(AT_THREADS) k_attn_tile(kt__cuda_attn a, int32_t G, int32_t BT)
{
    extern __shared__ float4 sm4[];
    const int32_t qd = a.ka_dim + a.kb_dim, q4 = qd / 4, vd = 16 * CP, v4 = vd / 4;
    float *qT = (float *)sm4;               /* [qd][AT_LD] queries, by dimension */
    float *kT = qT + (size_t)qd * AT_LD;    /* [qd][AT_LD] a tile's keys, by dimension */
    float *vs = kT + (size_t)qd * AT_LD;    /* [AT_BK][vd] its values */
    float *ps = vs + (size_t)AT_BK * vd;    /* [AT_BK][AT_LD] probabilities, by key */
    const int32_t tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int32_t kh = blockIdx.y, t0 = blockIdx.x * BT, pos0 = *a.pos0;
    const int32_t t_last = min(t0 + BT, a.T) - 1;
    const float *ka = a.ka + (size_t)kh * a.ka_sh;
    const float *kb = a.kb ? a.kb + (size_t)kh * a.kb_sh : ka;
    const float *vb = a.v + (size_t)kh * a.v_sh;
    /* Qᵀ: row r = token t0 + r / G (clamped), head kh G + r % G; 8 loads in flight */
    for (int32_t b0 = tid; b0 < AT_R * q4; b0 += 8 * AT_THREADS) {
        float4 r8[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int32_t i = min(b0 + u * AT_THREADS, AT_R * q4 - 1), r = i % AT_R, d4 = i / AT_R;
            int32_t t = min(t0 + r / G, t_last), h = kh * G + r % G;
            r8[u] = __ldg((const float4 *)(a.q + (size_t)t * a.q_st + (size_t)h * a.q_sh) + d4);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int32_t i = b0 + u * AT_THREADS, r = i % AT_R, d = 4 * (i / AT_R);
            if (i < AT_R * q4) {
                qT[(d + 0) * AT_LD + r] = r8[u].x, qT[(d + 1) * AT_LD + r] = r8[u].y;
                qT[(d + 2) * AT_LD + r] = r8[u].z, qT[(d + 3) * AT_LD + r] = r8[u].w;
            }
        }
    }
    /* this thread's rows: visible positions lo_r ..= hi_r */
    int32_t lo_r[4], hi_r[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int32_t t = min(t0 + (4 * ty + i) / G, t_last), p = pos0 + t;
        hi_r[i] = p;
        lo_r[i] = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    }
    const int32_t pf = pos0 + t0, p_begin = a.window > 0 && pf - a.window + 1 > 0
                                                 ? pf - a.window + 1 : 0;
    const int32_t p_end = pos0 + t_last;
    float m[4], l[4], acc[4][CP];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < CP; c++)
            acc[i][c] = 0.0f;
    }
    for (int32_t tp = p_begin; tp <= p_end; tp += AT_BK) {
        const int32_t nt = min(AT_BK, p_end - tp + 1);
        /* Kᵀ (position j fastest: a warp's stores across banks) and V, rows past
         * the end read again as the last one (masked below) */
        for (int32_t b0 = tid; b0 < AT_BK * (q4 + v4); b0 += 8 * AT_THREADS) {
            float4 r8[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int32_t i = min(b0 + u * AT_THREADS, AT_BK * (q4 + v4) - 1);
                const float *src;
                if (i < AT_BK * q4) {
                    int32_t p = tp + min(i % AT_BK, nt - 1), d = 4 * (i / AT_BK);
                    src = d < a.ka_dim ? ka + (size_t)p * a.ka_sp + d
                                       : kb + (size_t)p * a.kb_sp + (d - a.ka_dim);
                } else {
                    int32_t iv = i - AT_BK * q4, p = tp + min(iv / v4, nt - 1);
                    src = vb + (size_t)p * a.v_sp + 4 * (iv % v4);
                }
                r8[u] = __ldg((const float4 *)src);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int32_t i = b0 + u * AT_THREADS;
                if (i < AT_BK * q4) {
                    int32_t j = i % AT_BK, d = 4 * (i / AT_BK);
                    kT[(d + 0) * AT_LD + j] = r8[u].x, kT[(d + 1) * AT_LD + j] = r8[u].y;
                    kT[(d + 2) * AT_LD + j] = r8[u].z, kT[(d + 3) * AT_LD + j] = r8[u].w;
                } else if (i < AT_BK * (q4 + v4)) {
                    ((float4 *)vs)[i - AT_BK * q4] = r8[u];
                }
            }
        }
        __syncthreads();
        /* s_ij = scale · q_i · k_j */
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] = 0.0f;
#pragma unroll 4
        for (int32_t d = 0; d < qd; d++) {
            float4 qv = *(const float4 *)(qT + d * AT_LD + 4 * ty);
            float4 kv = *(const float4 *)(kT + d * AT_LD + 4 * tx);
            float qa[4] = {qv.x, qv.y, qv.z, qv.w}, kk[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    s[i][j] += qa[i] * kk[j];
        }
        /* mask; m' = max(m, max_j s_ij), p_ij = e^(s_ij - m'), l' = l e^(m - m') + Σ p */
        float corr[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int32_t jj = 4 * tx + j, p = tp + jj;
                bool on = jj < nt && p <= hi_r[i] && p >= lo_r[i];
                s[i][j] = on ? s[i][j] * a.scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            for (int o = 8; o > 0; o >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_new = fmaxf(m[i], mx), mref = m_new == -INFINITY ? 0.0f : m_new;
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++)
                rs += (s[i][j] = expf(s[i][j] - mref));
            for (int o = 8; o > 0; o >>= 1)
                rs += __shfl_xor_sync(0xffffffffu, rs, o);
            corr[i] = expf(m[i] - mref);
            l[i] = l[i] * corr[i] + rs;
            m[i] = m_new;
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            *(float4 *)(ps + (4 * tx + j) * AT_LD + 4 * ty) =
                make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
        __syncthreads();
        /* acc_i = acc_i e^(m - m') + Σ_j p_ij v_j */
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int c = 0; c < CP; c++)
                acc[i][c] *= corr[i];
#pragma unroll 4
        for (int32_t j = 0; j < nt; j++) {
            float4 pv = *(const float4 *)(ps + j * AT_LD + 4 * ty);
            float pa[4] = {pv.x, pv.y, pv.z, pv.w}, vv[CP];
            const float *vr = vs + j * vd + CP * tx;
            if constexpr (CP % 4 == 0) {
#pragma unroll
                for (int c = 0; c < CP; c += 4) {
                    float4 w4 = *(const float4 *)(vr + c);
                    vv[c] = w4.x, vv[c + 1] = w4.y, vv[c + 2] = w4.z, vv[c + 3] = w4.w;
                }
            } else {
#pragma unroll
                for (int c = 0; c < CP; c++)
                    vv[c] = vr[c];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int c = 0; c < CP; c++)
                    acc[i][c] += pa[i] * vv[c];
        }
        __syncthreads();
    }
    /* o = acc / l (with a sink: both scaled to M = max(m, sink), l + e^(sink - M)) */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int32_t r = 4 * ty + i, t = t0 + r / G, h = kh * G + r % G;
        if (r / G >= BT || t > t_last)
            continue;
        float sc = 1.0f, den = l[i];
        if (a.sinks) {
            float M = fmaxf(m[i], a.sinks[h]);
            sc = expf(m[i] - M);
            den = l[i] * sc + expf(a.sinks[h] - M);
        }
        float *o = a.o + (size_t)t * a.o_st + (size_t)h * a.o_sh + CP * tx;
#pragma unroll
        for (int c = 0; c < CP; c++)
            o[c] = acc[i][c] * sc / den;
    }
}

/* The tiled kernel's launch for a (false: not applicable, run k_attention) */
static bool attn_tile(kt__cuda_rt *rt, const kt__cuda_attn *a)
{
    int32_t qd = a->ka_dim + a->kb_dim, vd = a->v_dim, G = a->group;
    if (!rt->attn_tile || a->T <= KT__CUDA_ATTN_SPLIT_T || qd % 4 || qd > AT_MAXQD ||
        a->ka_dim % 4 || (vd != 16 && vd != 32 && vd != 64 && vd != 128) || G < 1 ||
        G > AT_R || a->n_head % G)
        return false;
    if (!al16(a->q) || a->q_st % 4 || a->q_sh % 4 || !al16(a->ka) || a->ka_sp % 4 ||
        a->ka_sh % 4 || !al16(a->v) || a->v_sp % 4 || a->v_sh % 4 ||
        (a->kb_dim && (!a->kb || !al16(a->kb) || a->kb_sp % 4 || a->kb_sh % 4)))
        return false;
    int32_t BT = AT_R / G;
    dim3 grid((a->T + BT - 1) / BT, a->n_head / G);
    size_t smem = attn_tile_smem(qd, vd);
    if (vd == 16)
        k_attn_tile<1><<<grid, AT_THREADS, smem, rt->stream>>>(*a, G, BT);
    else if (vd == 32)
        k_attn_tile<2><<<grid, AT_THREADS, smem, rt->stream>>>(*a, G, BT);
    else if (vd == 64)
        k_attn_tile<4><<<grid, AT_THREADS, smem, rt->stream>>>(*a, G, BT);
    else
        k_attn_tile<8><<<grid, AT_THREADS, smem, rt->stream>>>(*a, G, BT);
    return true;
}

extern "C" int kt__cuda_attention(kt__cuda_rt *rt, const kt__cuda_attn *a, int32_t max_pos,
                                  char *err, size_t err_size)
{
    int32_t qd = a->ka_dim + a->kb_dim;
    if (qd > ATTN_MAX_QDIM) {
        set_err(err, err_size, "attention: query of %d values (kernel limit %d)", qd,
                ATTN_MAX_QDIM);
        return -1;
    }
    /* the attribute is set once for the largest query, outside any graph capture */
    size_t limit = sizeof(float) * ((size_t)max_pos + ATTN_MAX_QDIM);
    if (limit > rt->attn_smem) {
        CK(cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)limit),
           "cudaFuncSetAttribute (attention scores of n_ctx positions)");
        rt->attn_smem = limit;
    }
    if (!rt->split_smem_set) {
        CK(cudaFuncSetAttribute(k_attn_split, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                AS_SMEM_MAX),
           "cudaFuncSetAttribute (split attention tiles)");
        int most = (int)attn_tile_smem(AT_MAXQD, 128);
        if (cudaFuncSetAttribute(k_attn_tile<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 most) != cudaSuccess ||
            cudaFuncSetAttribute(k_attn_tile<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 most) != cudaSuccess ||
            cudaFuncSetAttribute(k_attn_tile<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 most) != cudaSuccess ||
            cudaFuncSetAttribute(k_attn_tile<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 most) != cudaSuccess) {
            cudaGetLastError(); /* a device with less shared memory: k_attention */
            rt->attn_tile = 0;
        }
        rt->split_smem_set = 1;
    }
    /* a post step kt__cuda_qk_post_run left to this call: in the split kernel, or
     * launched now, ahead of whichever kernel attends */
    flush_norm(rt);
    if (rt->post_pending) {
        rt->post_pending = 0;
        if (attn_split(rt, a, max_pos, &rt->post))
            return 0;
        qk_post_launch(rt, &rt->post);
    }
    if (a->T > 0 && (attn_split(rt, a, max_pos, NULL) ||
                     (rt->attn_tile >= 2 && a->tc && a->T > KT__CUDA_ATTN_SPLIT_T &&
                      kt__cuda_attn_mma(rt->stream, a, rt->attn_tile == 2)) ||
                     attn_tile(rt, a)))
        return 0;
    size_t smem = sizeof(float) * ((size_t)max_pos + ((qd + 3) & ~3));
    if (a->T > 0)
        k_attention<<<dim3(a->n_head, a->T), 256, smem, rt->stream>>>(*a);
    return 0;
}

/* silu(g) · u   or gpt-oss: (clamp(u) + 1) · min(g, L) · σ(α min(g, L)) */
__device__ __forceinline__ float act_value(float gv, float uv, int oai, float alpha,
                                           float limit)
{
    if (oai) {
        gv = fminf(gv, limit);
        uv = fminf(fmaxf(uv, -limit), limit);
        return (uv + 1.0f) * gv / (1.0f + expf(-alpha * gv));
    }
    return gv / (1.0f + expf(-gv)) * uv;
}

/* g = act(g, u) */
__global__ void k_act(float *g, const float *u, size_t n, int oai, float alpha, float limit)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        g[i] = act_value(g[i], u[i], oai, alpha, limit);
}

extern "C" int kt__cuda_act(kt__cuda_rt *rt, float *g, const float *u, size_t n, int oai,
                            float alpha, float limit)
{
    flush_pending(rt);
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
    flush_pending(rt);
    size_t total = (size_t)rows * n;
    if (total)
        k_add<<<(unsigned)((total + 255) / 256), 256, 0, rt->stream>>>(y, x, total, n, row_gate);
    return 0;
}

/* the selected experts' weights w[0..k) from their scores: a softmax over them
 * (top-k softmax routers), or renormalised to sum 1 if the router says so, then
 * scaled */
/* out[i] = e^(in[i] - max) / Σ e^(in[j] - max), i < n (out may be in) */
__device__ void softmax_to(const float *in, float *out, int32_t n)
{
    float mx = -INFINITY, sum = 0.0f;
    for (int32_t i = 0; i < n; i++)
        mx = fmaxf(mx, in[i]);
    for (int32_t i = 0; i < n; i++)
        sum += (out[i] = expf(in[i] - mx));
    for (int32_t i = 0; i < n; i++)
        out[i] /= sum;
}

__device__ void router_weights(const kt__cuda_router_desc &r, float *w)
{
    const int32_t k = r.k;
    if (r.kind == KT__CUDA_ROUTER_TOPK_SOFTMAX) {
        softmax_to(w, w, k);
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
        softmax_to(lg, score, E);
        for (int32_t e = 0; e < E; e++)
            sel[e] = score[e];
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
    router_weights(r, w);
}


/* The same selection as k_router, a warp per token: lane l holds experts l,
 * l + 32, ...; group limits as k_router (group score = its top two, the best
 * topk_group groups kept, the others' experts at 0); then each of the k rounds
 * takes the warp's best not-taken expert (the larger value, the lower index on
 * ties). */
/* one warp: lane l's scores and selection values of experts l + 32 i from the
 * logits lg (read through L2: other blocks' rows), before any group limit */
template <int RW>
__device__ __forceinline__ void router_scores(const kt__cuda_router_desc &r, const float *lg,
                                              float score[RW], float sel[RW])
{
    const int32_t lane = threadIdx.x % 32, E = r.n_expert;
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < RW; i++) {
        int32_t e = lane + 32 * i;
        float v = __ldcg(lg + min(e, E - 1)); /* L2: other blocks' rows; clamped */
        score[i] = e < E ? v : -INFINITY;
        mx = fmaxf(mx, score[i]);
    }
    if (r.kind == KT__CUDA_ROUTER_SOFTMAX_TOPK) {
        for (int o = 16; o > 0; o >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < RW; i++) {
            score[i] = lane + 32 * i < E ? expf(score[i] - mx) : 0.0f;
            sum += score[i];
        }
        sum = warp_sum(sum);
#pragma unroll
        for (int i = 0; i < RW; i++)
            sel[i] = score[i] = score[i] / sum;
    } else if (r.kind == KT__CUDA_ROUTER_SIGMOID_BIAS) {
#pragma unroll
        for (int i = 0; i < RW; i++) {
            int32_t e = lane + 32 * i;
            score[i] = e < E ? 1.0f / (1.0f + expf(-score[i])) : 0.0f;
            sel[i] = score[i] + (e < E && r.e_bias ? r.e_bias[e] : 0.0f);
        }
    } else {
#pragma unroll
        for (int i = 0; i < RW; i++)
            sel[i] = score[i];
    }
}

/* whether the router limits its choice to the best groups (DeepSeek's) */
__host__ __device__ __forceinline__ bool router_grouped(const kt__cuda_router_desc &r)
{
    return r.kind == KT__CUDA_ROUTER_SIGMOID_BIAS && r.n_group > 1 && r.topk_group < r.n_group;
}

template <int RW>
__device__ void router_select(const kt__cuda_router_desc &r, const float *logit, int32_t t,
                              int32_t *ids, float *wts)
{
    const int32_t lane = threadIdx.x % 32, E = r.n_expert, k = r.k;
    float sel[RW], score[RW];
    router_scores<RW>(r, logit + (size_t)t * E, score, sel);
    if (router_grouped(r)) {
        int32_t gs = E / r.n_group;
        float gscore[64];
        for (int32_t g = 0; g < r.n_group; g++) {
            /* the group's top two: this lane's, then the warp's (a >= b, duplicates kept) */
            float a = -INFINITY, b = -INFINITY;
#pragma unroll
            for (int i = 0; i < RW; i++) {
                int32_t e = lane + 32 * i;
                if (e >= g * gs && e < (g + 1) * gs) {
                    float v = sel[i];
                    if (v > a) {
                        b = a;
                        a = v;
                    } else if (v > b) {
                        b = v;
                    }
                }
            }
            for (int o = 16; o > 0; o >>= 1) {
                float oa = __shfl_xor_sync(0xffffffffu, a, o);
                float ob = __shfl_xor_sync(0xffffffffu, b, o);
                float hi = fmaxf(a, oa), lo = fmaxf(fminf(a, oa), fmaxf(b, ob));
                a = hi;
                b = lo;
            }
            gscore[g] = a + (gs > 1 ? b : 0.0f);
        }
        uint64_t keep = 0;
        for (int32_t q = 0; q < r.topk_group; q++) {
            int32_t best = -1;
            for (int32_t g = 0; g < r.n_group; g++)
                if (!(keep >> g & 1u) && (best < 0 || gscore[g] > gscore[best]))
                    best = g;
            keep |= (uint64_t)1 << best;
        }
#pragma unroll
        for (int i = 0; i < RW; i++) {
            int32_t g = (lane + 32 * i) / gs;
            if (g < r.n_group && !(keep >> g & 1u))
                sel[i] = 0.0f;
        }
    }
    int32_t *id = ids + (size_t)t * k;
    float *w = wts + (size_t)t * k;
    uint32_t taken = 0;
    for (int32_t j = 0; j < k; j++) {
        /* this lane's best, then the warp's: (value, index), none = (-inf, E) */
        float bv = -INFINITY;
        int32_t bi = E;
#pragma unroll
        for (int i = 0; i < RW; i++) {
            int32_t e = lane + 32 * i;
            if (e < E && !(taken >> i & 1u) && (bi == E || sel[i] > bv)) {
                bv = sel[i];
                bi = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            bool other = oi != E && (bi == E || ov > bv || (ov == bv && oi < bi));
            bv = other ? ov : bv;
            bi = other ? oi : bi;
        }
        /* lane 0's pick for all: NaN values order nothing, so the lanes could end
         * on different picks, each owner marked its own, and after RW rounds
         * none was left: id E, read past the expert tables (H200 11-30, a
         * decode step on NaN activations: an illegal address) */
        bi = __shfl_sync(0xffffffffu, bi, 0);
        /* the owner marks it taken and hands over its score */
        float mine = 0.0f;
#pragma unroll
        for (int i = 0; i < RW; i++)
            if (lane + 32 * i == bi) {
                taken |= 1u << i;
                mine = score[i];
            }
        float sc = __shfl_sync(0xffffffffu, mine, bi % 32);
        if (lane == 0) {
            id[j] = bi;
            w[j] = sc;
        }
    }
    if (lane == 0)
        router_weights(r, w);
}

/* RW experts a lane (E <= 32 RW): the selection of k_router, a warp per token */
template <int RW>
__global__ void k_router_warp(kt__cuda_router_desc r, const float *logit, int32_t T,
                              int32_t *ids, float *wts)
{
    int32_t t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (t < T)
        router_select<RW>(r, logit, t, ids, wts);
}

/* GEMV_ROUTE_UP: the selection of router_select (no group limits) by a whole
 * block into shared memory: warp 0 scores (router_scores, the same values),
 * then each thread ranks its experts e among all by (value, lower index on
 * ties) against the others in shared memory:
 *   rank(e) = #{j : sel_j > sel_e or (sel_j = sel_e and j < e)}
 * and rank(e) < k puts e into slot rank(e), best first, as router_select's k
 * rounds do; the weights by router_weights (thread 0). A slot no expert took
 * (NaN logits) stays -1 (skipped by the expert kernels). Every thread calls it
 * (barriers inside). */
#define ROUTE_MAXE 256
#define ROUTE_MAXK 32 /* the expert kernels' limit (UPP_MAXK, DOWN8_MAXK) */
struct __align__(16) route_smem {
    float sel[ROUTE_MAXE], score[ROUTE_MAXE], w[ROUTE_MAXK];
    int32_t id[ROUTE_MAXK];
};

/* #{j : u_j > v or (u_j = v and j < e)} over one float4 u of sel, its first j0 */
__device__ __forceinline__ int32_t rank4(float4 u, float v, int32_t j0, int32_t e)
{
    return ((u.x > v) | ((u.x == v) & (j0 < e))) + ((u.y > v) | ((u.y == v) & (j0 + 1 < e))) +
           ((u.z > v) | ((u.z == v) & (j0 + 2 < e))) + ((u.w > v) | ((u.w == v) & (j0 + 3 < e)));
}

template <int RW>
__device__ void route_block_t(const kt__cuda_router_desc &r, const float *lg, route_smem &rs)
{
    const int32_t tid = threadIdx.x, E = r.n_expert, k = r.k;
    if (tid < 32) {
        float score[RW], sel[RW];
        router_scores<RW>(r, lg, score, sel);
        /* past E: -inf, which ranks no expert lower */
#pragma unroll
        for (int i = 0; i < RW; i++) {
            rs.score[tid + 32 * i] = score[i];
            rs.sel[tid + 32 * i] = tid + 32 * i < E ? sel[i] : -INFINITY;
        }
    }
    if (tid < k)
        rs.id[tid] = -1, rs.w[tid] = 0.0f;
    __syncthreads();
    const float4 *s4 = (const float4 *)rs.sel; /* the same address for a warp: broadcasts */
    const int32_t n4 = (E + 3) / 4;
    for (int32_t e = tid; e < E; e += blockDim.x) {
        const float v = rs.sel[e];
        /* four sums in flight: the loop is the latency of its loads and adds */
        int32_t r0 = 0, r1 = 0, r2 = 0, r3 = 0, j4 = 0;
        for (; j4 + 4 <= n4; j4 += 4) {
            r0 += rank4(s4[j4], v, 4 * j4, e);
            r1 += rank4(s4[j4 + 1], v, 4 * j4 + 4, e);
            r2 += rank4(s4[j4 + 2], v, 4 * j4 + 8, e);
            r3 += rank4(s4[j4 + 3], v, 4 * j4 + 12, e);
        }
        for (; j4 < n4; j4++)
            r0 += rank4(s4[j4], v, 4 * j4, e);
        const int32_t rank = r0 + r1 + r2 + r3;
        if (rank < k) {
            rs.id[rank] = e;
            rs.w[rank] = rs.score[e];
        }
    }
    __syncthreads();
    if (tid == 0)
        router_weights(r, rs.w);
    __syncthreads();
}

__device__ __forceinline__ void route_block(const kt__cuda_router_desc &r, const float *lg,
                                            route_smem &rs)
{
    if (r.n_expert <= 128)
        route_block_t<4>(r, lg, rs);
    else
        route_block_t<8>(r, lg, rs);
}

/* One token: the router's logits (k_gemv1's rows, 16 a block) and the selection
 * in one launch: the last block to finish (a ticket in device memory, put back
 * to 0 by that block for the next step) selects (rank: by route_block); ticket
 * NULL: the logits only (GEMV_ROUTE_UP) */
template <int RW, int NB>
__global__ void __launch_bounds__(GEMV1_THREADS, NB == 8 ? 2 : 0)
    k_router_gemv1(const float *__restrict__ x, kt__cuda_mat W, const float *b, float *logit,
                   kt__cuda_router_desc r, int32_t *ids, float *wts, unsigned *ticket,
                   norm_in ni, int rank)
{
    extern __shared__ float4 xs4[];
    __shared__ bool last;
    __shared__ route_smem rs;
    gemv1_block<NB>((float *)xs4, x, W, b, logit, 0, NULL, ni);
    if (!ticket)
        return;
    __threadfence(); /* this block's logits visible device-wide before its ticket */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (rank) {
        route_block(r, logit, rs);
        if (threadIdx.x < r.k)
            ids[threadIdx.x] = rs.id[threadIdx.x], wts[threadIdx.x] = rs.w[threadIdx.x];
    } else if (threadIdx.x < 32) {
        router_select<RW>(r, logit, 0, ids, wts);
    }
    if (threadIdx.x == 0)
        *ticket = 0;
}

/* the warp router's limits: experts in registers, group masks in 64 bits */
static bool router_warp_ok(const kt__cuda_router_desc *r)
{
    return r->n_expert <= KT__CUDA_MAX_EXPERTS && r->n_group <= 64 && r->k > 0 &&
           r->k <= r->n_expert;
}

/* the selection of one token's logits as its own launch (a warp) */
static void router_launch(kt__cuda_rt *rt, const kt__cuda_router_desc *r, const float *logits,
                          int32_t T, int32_t *ids, float *w)
{
    unsigned g = (T + 3) / 4;
    if (!router_warp_ok(r))
        k_router<<<(T + 63) / 64, 64, 0, rt->stream>>>(*r, logits, T, ids, w);
    else if (r->n_expert <= 128)
        k_router_warp<4><<<g, 128, 0, rt->stream>>>(*r, logits, T, ids, w);
    else if (r->n_expert <= 256)
        k_router_warp<8><<<g, 128, 0, rt->stream>>>(*r, logits, T, ids, w);
    else
        k_router_warp<16><<<g, 128, 0, rt->stream>>>(*r, logits, T, ids, w);
}

/* GEMV_ROUTE_UP's pending selection, launched now (flush_pending) */
static void flush_route(kt__cuda_rt *rt)
{
    if (rt->rp_on) {
        rt->rp_on = 0;
        router_launch(rt, &rt->rp, rt->rp_logits, 1, rt->rp_ids, rt->rp_w);
    }
}

extern "C" int kt__cuda_router(kt__cuda_rt *rt, const kt__cuda_router_desc *r, const float *logits,
                               int32_t T, int32_t *ids, float *w)
{
    flush_pending(rt);
    if (T > 0)
        router_launch(rt, r, logits, T, ids, w);
    return 0;
}

extern "C" int kt__cuda_router_gemv(kt__cuda_rt *rt, const kt__cuda_router_desc *r,
                                    const float *x, const kt__cuda_mat *W, const float *bias,
                                    float *logits, int32_t T, int32_t *ids, float *w)
{
    if (T != 1 || !rt->ticket || !router_warp_ok(r) || !vec8_ok(W) || !x_ok(x, W->cols) ||
        W->cols > GEMV1_MAX_COLS || W->rows != r->n_expert)
        return 1; /* the caller's kt__cuda_linear launches anything pending */
    norm_in ni = take_norm(rt, x, W->cols);
    unsigned blocks = (W->rows + GEMV1_THREADS / 32 - 1) / (GEMV1_THREADS / 32);
    size_t xs = sizeof(float) * (size_t)W->cols;
    int nb = gemv_pre_nb(rt, W);
    void (*k)(const float *, kt__cuda_mat, const float *, float *, kt__cuda_router_desc,
              int32_t *, float *, unsigned *, norm_in, int) =
        r->n_expert <= 128   ? (nb == 8    ? k_router_gemv1<4, 8>
                                : nb == 16 ? k_router_gemv1<4, 16>
                                           : k_router_gemv1<4, 0>)
        : r->n_expert <= 256 ? (nb == 8    ? k_router_gemv1<8, 8>
                                : nb == 16 ? k_router_gemv1<8, 16>
                                           : k_router_gemv1<8, 0>)
                             : (nb == 8    ? k_router_gemv1<16, 8>
                                : nb == 16 ? k_router_gemv1<16, 16>
                                           : k_router_gemv1<16, 0>);
    /* GEMV_ROUTE_UP: the selection left to the expert kernels (kt__cuda_experts) */
    const bool ranks = !router_grouped(*r) && r->n_expert <= ROUTE_MAXE && r->k <= ROUTE_MAXK;
    const bool defer = (rt->gemv & GEMV_ROUTE_UP) && ranks && r->experts_next;
    launch_pdl(rt, k, blocks, GEMV1_THREADS, xs, x, *W, bias, logits, *r, ids, w,
               defer ? (unsigned *)NULL : rt->ticket, ni,
               (rt->gemv & GEMV_ROUTE_RANK) && ranks ? 1 : 0);
    if (defer) {
        rt->rp = *r;
        rt->rp_logits = logits, rt->rp_ids = ids, rt->rp_w = w;
        rt->rp_on = 1;
    }
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
    if (lane == 0)
        h[(size_t)tj * I + i] = act_value(g, u, oai, alpha, limit);
}

/* out[t][c] += Σ_j w[t][j] · down_e[c]·h[t][j] over the GPU-resident e = ids[t][j] */
__global__ void k_expert_down(const kt__cuda_mat *down, const int32_t *ids, const float *wts,
                              int32_t k, int32_t I, const float *h, int32_t H, float *out,
                              int assign)
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
        out[(size_t)t * H + c] = assign ? acc : out[(size_t)t * H + c] + acc;
}

/* k_expert_up with 8-column loads (H a multiple of 8); XS: the token's x in
 * shared memory (H <= GEMV1_MAX_COLS), which leaves registers for 4 steps of
 * gate and up loads in flight */
/* gate and up rows i against x: batches of 8 steps, their 16 loads in flight (a
 * step past the end reads the batch's first columns again, weighted 0: no exit
 * test between the loads) */
template <int TY, bool EF = false>
__device__ __forceinline__ void up_dot_t(const kt__cuda_mat &G, const kt__cuda_mat &U, int32_t i,
                                         const float *xt, int32_t H, float &g, float &u,
                                         uint64_t pol = 0)
{
    for (int32_t c0 = (threadIdx.x % 32) * 8; c0 < H; c0 += 8 * 256) {
#pragma unroll
        for (int32_t s = 0; s < 8; s++) {
            int32_t c = c0 + 256 * s, cc = c < H ? c : c0;
            float wg[8], wu[8], on = (float)(c < H);
            load8t<TY, EF>(G, i, cc, wg, pol);
            load8t<TY, EF>(U, i, cc, wu, pol);
            g += on * dot8(wg, xt + cc);
            u += on * dot8(wu, xt + cc);
        }
    }
}

/* this lane's shares g, u of gate_i·x and up_i·x for row i of one expert, the
 * loops typed where both matrices share a type; ef: BF16 rows read with the L2
 * policy pol */
__device__ __forceinline__ void up_sums(const kt__cuda_mat &G, const kt__cuda_mat &U, int32_t i,
                                        const float *xt, int32_t H, float &g, float &u,
                                        bool ef = false, uint64_t pol = 0)
{
    if (G.type == U.type && G.type == KT__CUDA_W_BF16 && ef)
        up_dot_t<KT__CUDA_W_BF16, true>(G, U, i, xt, H, g, u, pol);
    else if (G.type == U.type && G.type == KT__CUDA_W_BF16)
        up_dot_t<KT__CUDA_W_BF16>(G, U, i, xt, H, g, u);
    else if (G.type == U.type && G.type == KT__CUDA_W_F8)
        up_dot_t<KT__CUDA_W_F8>(G, U, i, xt, H, g, u);
    else if (G.type == U.type && G.type == KT__CUDA_W_I4)
        up_dot_t<KT__CUDA_W_I4>(G, U, i, xt, H, g, u);
    else
        for (int32_t c = (threadIdx.x % 32) * 8; c < H; c += 256) {
            float wg[8], wu[8];
            load8(G, i, c, wg);
            load8(U, i, c, wu);
            g += dot8(wg, xt + c);
            u += dot8(wu, xt + c);
        }
}

template <bool XS>
__global__ void k_expert_up8(const kt__cuda_mat *gate, const kt__cuda_mat *up, const float *x,
                             int32_t H, const int32_t *ids, int32_t k, int32_t I, float *h,
                             int oai, float alpha, float limit)
{
    extern __shared__ float4 xs4[];
    int32_t i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    int32_t tj = blockIdx.y, t = tj / k;
    pdl_wait();
    int32_t e = ids[tj];
    if (e < 0)
        return; /* the whole block: e depends on blockIdx only */
    /* the descriptors' loads in flight with x's */
    const kt__cuda_mat G = gate[e], U = up[e];
    const float *xt = x + (size_t)t * H;
    if (XS) {
        x_to_smem((float *)xs4, xt, H);
        xt = (const float *)xs4;
    }
    if (i >= I || !G.data)
        return;
    float g = 0.0f, u = 0.0f;
    up_sums(G, U, i, xt, H, g, u);
    g = warp_sum(g);
    u = warp_sum(u);
    if (lane == 0)
        h[(size_t)tj * I + i] = act_value(g, u, oai, alpha, limit);
}

/* k_expert_up8 for one token as one resident wave (GEMV_UP): each block reads x
 * and the k experts' gate / up descriptors once (x's loads in flight while one
 * warp reads the ids and then the descriptors), then its warps loop over the
 * (expert j, row i) pairs, row = j I + i, a grid's worth of warps apart, each
 * pair's 16 gate and up loads in flight (up_dot_t). Many short blocks (768 for
 * Qwen3's k = 8, I = 768) ran in about three waves, each block paying the
 * chain ids -> descriptors -> x -> weights before its first weight load. */
#define UPP_THREADS 256
#define UPP_MAXK 32 /* experts a token: a lane each */
#define UPP_PIECE 8192u /* bytes of one bulk L2 prefetch of the down matrices */

/* With GEMV_L2: the k chosen experts' down matrices (data Dp[j], Db[j] bytes;
 * NULL: on the CPU) into L2, in UPP_PIECE pieces dealt over the grid's threads
 * (neighbouring pieces to different blocks); only a hint, no wait */
__device__ __forceinline__ void down_prefetch(const char *const *Dp, const uint32_t *Db,
                                              int32_t k)
{
    uint32_t most = 0;
    for (int32_t j = 0; j < k; j++)
        most = Dp[j] && Db[j] > most ? Db[j] : most;
    const uint32_t per = (most + UPP_PIECE - 1) / UPP_PIECE, total = per * (uint32_t)k;
    for (uint32_t q = threadIdx.x * gridDim.x + blockIdx.x; q < total;
         q += gridDim.x * blockDim.x) {
        const uint32_t j = q / per, off = (q % per) * UPP_PIECE;
        const uint32_t n = Dp[j] && off < Db[j] ? min(UPP_PIECE, Db[j] - off) & ~15u : 0u;
        if (n)
            prefetch_l2(Dp[j] + off, n);
    }
}

/* GEMV_ROUTE_UP: the router's logits the expert kernels select from (logits
 * NULL: the ids and weights are in memory) */
struct route_in {
    kt__cuda_router_desc r;
    const float *logits;
};

__global__ void __launch_bounds__(UPP_THREADS)
    k_expert_up_p(const kt__cuda_mat *gate, const kt__cuda_mat *up, const kt__cuda_mat *down,
                  const float *x, int32_t H, int32_t *ids, int32_t k, int32_t I, float *h,
                  int oai, float alpha, float limit, int l2, route_in ri, float *wts)
{
    extern __shared__ float4 xs4[];
    __shared__ kt__cuda_mat Gs[UPP_MAXK], Us[UPP_MAXK];
    __shared__ const char *Dp[UPP_MAXK];
    __shared__ uint32_t Db[UPP_MAXK];
    __shared__ route_smem rs;
    const int32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32, n4 = H / 4;
    pdl_wait();
    /* x: the first 4 float4s a thread in flight before the descriptors' chain */
    float4 xr[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        xr[j] = __ldg((const float4 *)x + min(tid + j * UPP_THREADS, n4 - 1));
    if (ri.logits) {
        /* GEMV_ROUTE_UP: the top-k here (block 0 stores it for later readers) */
        route_block(ri.r, ri.logits, rs);
        if (blockIdx.x == 0 && tid < k)
            ids[tid] = rs.id[tid], wts[tid] = rs.w[tid];
    }
    if (warp == 0 && lane < k) {
        int32_t e = ri.logits ? rs.id[lane] : ids[lane];
        if (e >= 0) {
            Gs[lane] = gate[e];
            Us[lane] = up[e];
        } else {
            Gs[lane].data = NULL;
        }
        if (l2) {
            const kt__cuda_mat *D = e >= 0 ? &down[e] : NULL;
            Dp[lane] = D ? (const char *)D->data : NULL;
            Db[lane] = D ? (uint32_t)D->rows * row_bytes(*D) : 0u;
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (tid + j * UPP_THREADS < n4)
            xs4[tid + j * UPP_THREADS] = xr[j];
    for (int32_t i = tid + 4 * UPP_THREADS; i < n4; i += UPP_THREADS)
        xs4[i] = __ldg((const float4 *)x + i);
    __syncthreads();
    const uint64_t pol = l2_evict_first();
    const float *xs = (const float *)xs4;
    const int32_t rows = k * I, stride = gridDim.x * (UPP_THREADS / 32);
    for (int32_t row = blockIdx.x * (UPP_THREADS / 32) + warp; row < rows; row += stride) {
        const int32_t j = row / I, i = row - j * I;
        const kt__cuda_mat G = Gs[j];
        if (!G.data)
            continue; /* the whole warp: a CPU expert's pair */
        const kt__cuda_mat U = Us[j];
        float g = 0.0f, u = 0.0f;
        up_sums(G, U, i, xs, H, g, u, l2 != 0, pol);
        g = warp_sum(g);
        u = warp_sum(u);
        if (lane == 0)
            h[(size_t)j * I + i] = act_value(g, u, oai, alpha, limit);
    }
    /* after this warp's rows: issued at the start, the 25 MB (Qwen3) were
     * evicted again by the up rows streaming behind them (H200, 11-30 06:18) */
    if (l2)
        down_prefetch(Dp, Db, k);
}

/* k_expert_down with 8-column loads (I a multiple of 8, k <= DOWN8_MAXK): the
 * descriptors of the token's GPU-resident experts read once per block into
 * shared memory, packed (slot s: descriptor, weight, row hj[s] of h), then each
 * lane walks the (slot, 8-column chunk) pairs of all of them, so every weight
 * load of a row is independent of the others and none sits behind a branch
 * (no per-expert chain of id -> descriptor -> weights -> reduction; a skipped
 * pair inside the loop kept its loads from being batched: 21 us a layer on the
 * H200); HS: the token's k rows of h in shared memory too */
#define DOWN8_MAXK 32
#define DOWN8_THREADS 256
/* this lane's share of Σ_j w_j down_j[c]·h_j over the (expert, 8-column chunk)
 * pairs, up to 8 loads in flight (TY -1: the type read per matrix) */
template <int TY>
__device__ __forceinline__ float down_dot_t(const kt__cuda_mat *D, const float *wj,
                                            const int32_t *hj, int32_t kg, int32_t I, int32_t c,
                                            const float *ht)
{
    const uint32_t chunks = I / 8, total = kg * chunks;
    float acc = 0.0f;
    /* batches of 8 pairs a lane; a pair past the end reads the batch's first
     * pair again with weight 0 (no exit test between the loads) */
    for (uint32_t q0 = threadIdx.x % 32; q0 < total; q0 += 256) {
#pragma unroll
        for (uint32_t u = 0; u < 8; u++) {
            uint32_t q = q0 + 32 * u, qq = q < total ? q : q0;
            uint32_t j = qq / chunks, i = 8 * (qq - j * chunks);
            float w[8];
            if constexpr (TY < 0)
                load8(D[j], c, i, w);
            else
                load8t<TY>(D[j], c, i, w);
            float sw = wj[j] * (float)(q < total); /* arithmetic: no branch */
            acc += sw * dot8(w, ht + (size_t)hj[j] * I + i);
        }
    }
    return acc;
}

/* down_dot_t with the loads typed by the packed experts' common weight type
 * (-1: mixed, the generic loads), read from shared memory (a serial walk over
 * ids and descriptors in global memory by one thread cost several memory
 * latencies before the first load) */
__device__ __forceinline__ float down_dot_any(const kt__cuda_mat *D, const float *wj,
                                              const int32_t *hj, int32_t kg, int32_t I,
                                              int32_t c, const float *ht)
{
    int32_t ty = -2;
    for (int32_t j = 0; j < kg; j++)
        ty = ty == -2 || ty == D[j].type ? D[j].type : -1;
    return ty == KT__CUDA_W_BF16   ? down_dot_t<KT__CUDA_W_BF16>(D, wj, hj, kg, I, c, ht)
           : ty == KT__CUDA_W_F8  ? down_dot_t<KT__CUDA_W_F8>(D, wj, hj, kg, I, c, ht)
           : ty == KT__CUDA_W_I4  ? down_dot_t<KT__CUDA_W_I4>(D, wj, hj, kg, I, c, ht)
           : ty == KT__CUDA_W_F32 ? down_dot_t<KT__CUDA_W_F32>(D, wj, hj, kg, I, c, ht)
           : ty == -1             ? down_dot_t<-1>(D, wj, hj, kg, I, c, ht)
                                  : 0.0f;
}

/* By one warp: token t's GPU-resident experts packed into shared memory, lane
 * j's pair at slot s = the GPU-resident pairs before it (descriptor D[s],
 * router weight wj[s], row hj[s] = j of h), their count in *kg */
__device__ __forceinline__ void down_pack(const kt__cuda_mat *down, const int32_t *ids,
                                          const float *wts, int32_t k, int32_t t,
                                          kt__cuda_mat *D, float *wj, int32_t *hj, int32_t *kg)
{
    int32_t j = threadIdx.x % 32, e = j < k ? ids[(size_t)t * k + j] : -1;
    bool on = e >= 0 && down[e].data;
    uint32_t m = __ballot_sync(0xffffffffu, on);
    if (on) {
        int32_t slot = __popc(m & ((1u << j) - 1u));
        D[slot] = down[e];
        wj[slot] = wts[(size_t)t * k + j];
        hj[slot] = j;
    }
    if (j == 0)
        *kg = __popc(m);
}

/* with nt's ticket: the last block of each token's row then adds the row into
 * x and norms it (tickets nt.ticket + t) */
template <bool HS>
__global__ void k_expert_down8(const kt__cuda_mat *down, const int32_t *ids, const float *wts,
                               int32_t k, int32_t I, const float *h, int32_t H, float *out,
                               int assign, norm_tail nt)
{
    __shared__ kt__cuda_mat D[DOWN8_MAXK];
    __shared__ float wj[DOWN8_MAXK];
    __shared__ int32_t hj[DOWN8_MAXK], kg_s;
    extern __shared__ float4 hs4[];
    int32_t c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    int32_t t = blockIdx.y;
    pdl_wait();
    if (threadIdx.x < 32)
        down_pack(down, ids, wts, k, t, D, wj, hj, &kg_s);
    const float *ht = h + (size_t)t * k * I;
    if (HS) {
        x_to_smem((float *)hs4, ht, k * I); /* its barrier covers D and wj too */
        ht = (const float *)hs4;
    } else {
        __syncthreads();
    }
    if (c < H) {
        const float acc = warp_sum(down_dot_any(D, wj, hj, kg_s, I, c, ht));
        if (lane == 0)
            out[(size_t)t * H + c] = assign ? acc : out[(size_t)t * H + c] + acc;
    }
    /* the residual add and the next norm over the token's finished row */
    if (nt.ticket && last_block(nt.ticket + t, gridDim.x))
        add_norm_row<DOWN8_THREADS>(nt.x + (size_t)t * H, out + (size_t)t * H, NULL,
                                    nt.xn + (size_t)t * H, H, nt.w, nt.eps);
}

/* k_expert_down8 with the weights read before the wait (GEMV_DOWN, h in shared
 * memory): the router's ids and weights are final when this kernel starts
 * (programmatic dependent launch starts it only once every block of the up
 * kernel before it has waited for the router), so the token's descriptors and,
 * for BF16 experts, each lane's first DOWNP_NB (expert, 8-column) chunks of
 * its row are loaded before pdl_wait; only h waits for the up kernel. Chunk q
 * of a lane's batch: pair q / (I / 8) of the packed GPU experts, columns
 * 8 (q mod I / 8); past the end, chunk 0 again, weighted 0. */
#define DOWNP_NB 24
__device__ __forceinline__ void down_issue_bf16(const kt__cuda_mat *D, uint32_t total,
                                                uint32_t chunks, int32_t c, uint32_t q0,
                                                uint4 raw[DOWNP_NB])
{
#pragma unroll
    for (uint32_t u = 0; u < DOWNP_NB; u++) {
        uint32_t q = q0 + 32 * u, qq = q < total ? q : 0;
        uint32_t j = qq / chunks, i = 8 * (qq - j * chunks);
        raw[u] = __ldg((const uint4 *)((const uint16_t *)D[j].data + (size_t)c * D[j].cols + i));
    }
}

/* Σ over the batch of w_j down_j[c][i..i+8)·h_j[i..i+8) */
__device__ __forceinline__ float down_consume_bf16(const uint4 raw[DOWNP_NB], const float *wj,
                                                   const int32_t *hj, uint32_t total,
                                                   uint32_t chunks, int32_t I, uint32_t q0,
                                                   const float *hs)
{
    float acc = 0.0f;
#pragma unroll
    for (uint32_t u = 0; u < DOWNP_NB; u++) {
        uint32_t q = q0 + 32 * u, qq = q < total ? q : 0;
        uint32_t j = qq / chunks, i = 8 * (qq - j * chunks);
        float w[8];
        bf16x8(raw[u], w);
        float sw = wj[j] * (float)(q < total); /* arithmetic: no branch */
        acc += sw * dot8(w, hs + (size_t)hj[j] * I + i);
    }
    return acc;
}

__global__ void __launch_bounds__(DOWN8_THREADS, 2)
    k_expert_down_p(const kt__cuda_mat *down, const int32_t *ids, const float *wts, int32_t k,
                    int32_t I, const float *h, int32_t H, float *out, int assign, norm_tail nt,
                    float *res)
{
    __shared__ kt__cuda_mat D[DOWN8_MAXK];
    __shared__ float wj[DOWN8_MAXK];
    __shared__ int32_t hj[DOWN8_MAXK], kg_s;
    extern __shared__ float4 hs4[];
    const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = blockIdx.y;
    const int32_t c = min(blockIdx.x * (DOWN8_THREADS / 32) + warp, H - 1);
    const bool row_on = blockIdx.x * (DOWN8_THREADS / 32) + warp < H;
    if (warp == 0) /* before the wait: the router finished (above) */
        down_pack(down, ids, wts, k, t, D, wj, hj, &kg_s);
    __syncthreads();
    const int32_t kg = kg_s;
    int32_t ty = -2;
    for (int32_t j = 0; j < kg; j++)
        ty = ty == -2 || ty == D[j].type ? D[j].type : -1;
    const uint32_t chunks = I / 8, total = kg * chunks;
    float acc = 0.0f;
    if (ty == KT__CUDA_W_BF16) {
        uint4 raw[DOWNP_NB];
        uint32_t q0 = lane;
        down_issue_bf16(D, total, chunks, c, q0, raw);
        pdl_wait();
        x_to_smem((float *)hs4, h + (size_t)t * k * I, k * I);
        const float *hs = (const float *)hs4;
        for (;;) {
            acc += down_consume_bf16(raw, wj, hj, total, chunks, I, q0, hs);
            q0 += 32 * DOWNP_NB;
            if (q0 >= total)
                break;
            down_issue_bf16(D, total, chunks, c, q0, raw);
        }
    } else {
        pdl_wait();
        x_to_smem((float *)hs4, h + (size_t)t * k * I, k * I);
        const float *hs = (const float *)hs4;
        acc = ty == KT__CUDA_W_F8   ? down_dot_t<KT__CUDA_W_F8>(D, wj, hj, kg, I, c, hs)
              : ty == KT__CUDA_W_I4  ? down_dot_t<KT__CUDA_W_I4>(D, wj, hj, kg, I, c, hs)
              : ty == KT__CUDA_W_F32 ? down_dot_t<KT__CUDA_W_F32>(D, wj, hj, kg, I, c, hs)
              : ty == -1             ? down_dot_t<-1>(D, wj, hj, kg, I, c, hs)
                                     : 0.0f;
    }
    acc = warp_sum(acc);
    if (lane == 0 && row_on) {
        float v = assign ? acc : out[(size_t)t * H + c] + acc;
        out[(size_t)t * H + c] = v;
        if (res)
            res[(size_t)t * H + c] += v; /* GEMV_NORM_IN: the residual sum */
    }
    if (nt.ticket && last_block(nt.ticket + t, gridDim.x))
        add_norm_row<DOWN8_THREADS>(nt.x + (size_t)t * H, out + (size_t)t * H, NULL,
                                    nt.xn + (size_t)t * H, H, nt.w, nt.eps);
}

/* The expert-down product for one token with each warp streaming contiguous
 * weights (GEMV_DOWNW): a block owns R output rows, its warp w the rows of
 * packed GPU expert w (w + 8, ... when more than 8), so each warp reads R
 * consecutive rows of one matrix (12 KB in one run for Qwen3's I = 768, R = 8)
 * where k_expert_down_p's warp read one row of every chosen expert (8 separate
 * 1536-byte pieces): the same 25 MB read alone took 7.7 against 10.6 us on the
 * H200 (scripts/gpu_decode_probe.cu, 11-30 08:59), the products 10.4 against
 * 14.0. Lane l holds chunks l + 32 m (m < NC) of each row, all loads in flight
 * before the wait (BF16; other types after it, typed); the warp's R row sums
 * by warp_sum8, then the block weights them over the experts in slot order in
 * shared memory:
 *   out[c] = Σ_s w_s (down_s[c] · h_s),  c in the block's rows
 * R x NC <= 24 (a lane's loads): R 8 for I <= 768 (the default); with
 * GEMV_DOWNW_WIDE R 4 for I <= 1536 and R 3 for I <= 2048. */
#define DOWNW_ROWS 8
#define DOWNW_MAXNC 3 /* chunks a lane a row at R = 8: I <= 768 */

/* rows r0.. of D (clamped to H - 1), this lane's NC chunks of each (clamped to the
 * row's last: weighted 0 by the consumer) */
template <int R, int NC>
__device__ __forceinline__ void downw_issue(const kt__cuda_mat &D, int32_t r0, int32_t H,
                                            uint4 raw[R][NC])
{
    const int32_t n16 = D.cols / 8, lane = threadIdx.x % 32;
    const uint4 *p = (const uint4 *)D.data;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < NC; m++)
            raw[r][m] = __ldg(p + (size_t)min(r0 + r, H - 1) * n16 + min(lane + 32 * m, n16 - 1));
}

/* s[r] = this lane's share of row r0 + r of D times h_s from the BF16 chunks raw
 * (downw_issue), 0 for r >= R; hs: the expert's row of h, written by the kernel
 * before (read through L2) */
template <int R, int NC>
__device__ __forceinline__ void downw_dot(const uint4 raw[R][NC], int32_t n16, const float *hs,
                                          float s[8])
{
    const int32_t lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < 8; r++)
        s[r] = 0.0f;
#pragma unroll
    for (int m = 0; m < NC; m++) {
        const int32_t q = lane + 32 * m, qq = min(q, n16 - 1);
        const float on = (float)(q < n16); /* arithmetic: no branch */
        float hv[8];
        const float4 a = __ldcg((const float4 *)(hs + 8 * qq)),
                     b = __ldcg((const float4 *)(hs + 8 * qq) + 1);
        hv[0] = a.x, hv[1] = a.y, hv[2] = a.z, hv[3] = a.w;
        hv[4] = b.x, hv[5] = b.y, hv[6] = b.z, hv[7] = b.w;
#pragma unroll
        for (int r = 0; r < R; r++) {
            float w[8];
            bf16x8(raw[r][m], w);
            s[r] += on * dot8(w, hv);
        }
    }
}

template <int R, int NC>
__global__ void __launch_bounds__(DOWN8_THREADS, 2)
    k_expert_down_w(const kt__cuda_mat *down, const int32_t *ids, const float *wts, int32_t k,
                    const float *h, int32_t H, float *out, int assign, float *res, route_in ri)
{
    static_assert(R >= 1 && R <= 8 && R * NC <= 24, "a lane's loads");
    __shared__ kt__cuda_mat D[DOWN8_MAXK];
    __shared__ float wj[DOWN8_MAXK], part[DOWN8_MAXK][8];
    __shared__ int32_t hj[DOWN8_MAXK], kg_s;
    __shared__ route_smem rs;
    const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = blockIdx.x * R;
    const int32_t warps = DOWN8_THREADS / 32;
    /* before the wait: the router finished (k_expert_down_p); GEMV_ROUTE_UP: the
     * top-k from its logits here too */
    if (ri.logits)
        route_block(ri.r, ri.logits, rs);
    if (warp == 0)
        down_pack(down, ri.logits ? rs.id : ids, ri.logits ? rs.w : wts, k, 0, D, wj, hj, &kg_s);
    __syncthreads();
    const int32_t kg = kg_s;
    bool bf = true;
    for (int32_t s = 0; s < kg; s++)
        bf = bf && D[s].type == KT__CUDA_W_BF16;
    uint4 raw[R][NC];
    if (bf && warp < kg)
        downw_issue<R, NC>(D[warp], r0, H, raw);
    pdl_wait();
    if (!bf) {
        /* FP8 / INT4 / mixed experts: a warp per row over every expert (as
         * k_expert_down8 without h in shared memory) */
        const int32_t c = min(r0 + warp, H - 1);
        if (warp >= R)
            return;
        const float acc = warp_sum(down_dot_any(D, wj, hj, kg, D[0].cols, c, h));
        if (lane == 0 && r0 + warp < H) {
            const float v = assign ? acc : out[c] + acc;
            out[c] = v;
            if (res)
                res[c] += v;
        }
        return;
    }
    for (int32_t s = warp; s < kg; s += warps) {
        if (s != warp)
            downw_issue<R, NC>(D[s], r0, H, raw);
        const int32_t n16 = D[s].cols / 8;
        float v[8];
        downw_dot<R, NC>(raw, n16, h + (size_t)hj[s] * 8 * n16, v);
        const float sum = warp_sum8(v, lane);
        if (lane % 4 == 0)
            part[s][(lane >> 2) & 7] = sum;
    }
    __syncthreads();
    const int32_t c = r0 + threadIdx.x;
    if (threadIdx.x < R && c < H) {
        float acc = 0.0f;
        for (int32_t s = 0; s < kg; s++)
            acc += wj[s] * part[s][threadIdx.x];
        const float v = assign ? acc : out[c] + acc;
        out[c] = v;
        if (res)
            res[c] += v; /* GEMV_NORM_IN: the residual sum */
    }
}

/* k_expert_down_w's instance for nc chunks a lane a row (its rows a block in
 * *rows), NULL: none (more than 3 without wide, more than 8) */
typedef void (*downw_fn)(const kt__cuda_mat *, const int32_t *, const float *, int32_t,
                         const float *, int32_t, float *, int, float *, route_in);
static downw_fn downw_pick(int nc, bool wide, int32_t *rows)
{
    *rows = nc <= DOWNW_MAXNC ? DOWNW_ROWS : nc <= 6 ? 4 : 3;
    if (nc <= DOWNW_MAXNC)
        return nc == 1 ? k_expert_down_w<8, 1> : nc == 2 ? k_expert_down_w<8, 2>
                                                         : k_expert_down_w<8, 3>;
    if (!wide || nc > 8)
        return NULL;
    return nc <= 6 ? k_expert_down_w<4, 6> : k_expert_down_w<3, 8>;
}

/* resident blocks of k_expert_up_p a multiprocessor with smem bytes of x (asked
 * once a size) */
static int upp_blocks(kt__cuda_rt *rt, size_t smem)
{
    if (rt->upp_blocks <= 0 || rt->upp_smem != smem) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_expert_up_p, UPP_THREADS,
                                                          smem) != cudaSuccess || n <= 0) {
            cudaGetLastError();
            n = 1;
        }
        rt->upp_blocks = n;
        rt->upp_smem = smem;
    }
    return rt->upp_blocks;
}

extern "C" int kt__cuda_experts(kt__cuda_rt *rt, const kt__cuda_experts_args *a)
{
    /* every GPU expert matrix was uploaded 256-byte aligned; FP8 blocks of 128 */
    bool vec = a->H % 8 == 0 && a->I % 8 == 0 && a->vec8 && ((uintptr_t)a->x & 15) == 0 &&
               ((uintptr_t)a->h & 15) == 0 && a->k <= DOWN8_MAXK;
    dim3 g1((a->I + 7) / 8, a->T * a->k);
    dim3 g2((a->H + 7) / 8, a->T);
    const int nc = (a->I / 8 + 31) / 32;
    const bool upp = (rt->gemv & GEMV_UP) && a->T == 1 && a->k <= UPP_MAXK &&
                     a->H <= GEMV1_MAX_COLS;
    norm_tail nt;
    memset(&nt, 0, sizeof nt);
    bool fold = a->res && a->T <= DOWN_FOLD_T &&
                tail_ok(rt, a->H, a->res, a->out, a->res_norm, a->norm_w);
    if (fold) {
        nt.x = a->res, nt.xn = a->res_norm, nt.w = a->norm_w, nt.eps = a->eps;
        nt.ticket = rt->ticket + TK_DOWN;
    }
    int32_t wr = 0;
    downw_fn dw = downw_pick(nc, (rt->gemv & GEMV_DOWNW_WIDE) != 0, &wr);
    const bool downw = (rt->gemv & GEMV_DOWNW) && a->T == 1 && !fold && dw;
    /* GEMV_ROUTE_UP: the router's pending selection taken over by the up and
     * down kernels when both are these ids' readers (else launched first) */
    route_in ri;
    memset(&ri, 0, sizeof ri);
    if (rt->rp_on && vec && upp && downw && rt->rp_ids == a->ids && rt->rp_w == a->w &&
        rt->rp.k == a->k) {
        ri.r = rt->rp, ri.logits = rt->rp_logits;
        rt->rp_on = 0;
    }
    flush_pending(rt);
    if (a->T <= 0)
        return 0;
    if (vec) {
        size_t xs = sizeof(float) * (size_t)a->H, hs = sizeof(float) * (size_t)a->k * a->I;
        if (upp) {
            /* one resident wave: at most a warp a row */
            int64_t want = ((int64_t)a->k * a->I + UPP_THREADS / 32 - 1) / (UPP_THREADS / 32);
            int64_t fit = (int64_t)((rt->gemv & GEMV_UP1) ? 1 : upp_blocks(rt, xs)) * rt->sms;
            launch_pdl(rt, k_expert_up_p, (unsigned)(want < fit ? want : fit), UPP_THREADS, xs,
                       a->gate, a->up, a->down, a->x, a->H,
                       ri.logits ? rt->rp_ids : (int32_t *)a->ids, a->k, a->I, a->h, a->oai,
                       a->alpha, a->limit, (rt->gemv & GEMV_L2) ? 1 : 0, ri,
                       ri.logits ? rt->rp_w : (float *)NULL);
        } else {
            /* x (and h) in shared memory when they fit (48 KB default, D and wj too) */
            launch_pdl(rt, a->H <= GEMV1_MAX_COLS ? k_expert_up8<true> : k_expert_up8<false>,
                       g1, 256, a->H <= GEMV1_MAX_COLS ? xs : 0, a->gate, a->up, a->x, a->H,
                       a->ids, a->k, a->I, a->h, a->oai, a->alpha, a->limit);
        }
        if (downw) {
            bool res = a->res && norm_in_ok(rt, a->H, a->res, a->res_norm, a->norm_w);
            if (!(rt->skip & SKIP_DOWN))
                launch_pdl(rt, dw, (a->H + wr - 1) / wr, DOWN8_THREADS, 0, a->down, a->ids,
                           a->w, a->k, (const float *)a->h, a->H, a->out, a->assign,
                           res ? a->res : (float *)NULL, ri);
            if (res) {
                rt->pn = {a->res, a->res_norm, a->norm_w, a->eps, a->H};
                return 0;
            }
        } else if ((rt->gemv & GEMV_DOWN) && hs <= 40 * 1024) {
            /* GEMV_NORM_IN: the rows added into the residual as stored, its
             * norm left to the next product */
            bool res = a->res && !fold && a->T == 1 &&
                       norm_in_ok(rt, a->H, a->res, a->res_norm, a->norm_w);
            launch_pdl(rt, k_expert_down_p, g2, DOWN8_THREADS, hs, a->down, a->ids, a->w, a->k,
                       a->I, (const float *)a->h, a->H, a->out, a->assign, nt,
                       res ? a->res : (float *)NULL);
            if (res) {
                rt->pn = {a->res, a->res_norm, a->norm_w, a->eps, a->H};
                return 0;
            }
        } else
            launch_pdl(rt, hs <= 40 * 1024 ? k_expert_down8<true> : k_expert_down8<false>, g2,
                       DOWN8_THREADS, hs <= 40 * 1024 ? hs : 0, a->down, a->ids, a->w, a->k,
                       a->I, (const float *)a->h, a->H, a->out, a->assign, nt);
        return a->res && !fold;
    }
    k_expert_up<<<g1, 256, 0, rt->stream>>>(a->gate, a->up, a->x, a->H, a->ids, a->k, a->I,
                                            a->h, a->oai, a->alpha, a->limit);
    k_expert_down<<<g2, 256, 0, rt->stream>>>(a->down, a->ids, a->w, a->k, a->I, a->h, a->H,
                                              a->out, a->assign);
    return a->res ? 1 : 0;
}

/* dst[i] = src[idx[i] / div] (rows of n) */
__global__ void k_gather(const float *src, int32_t ss, const int32_t *idx, int32_t div,
                         int32_t n, float *dst)
{
    const float *s = src + (size_t)(idx[blockIdx.x] / div) * ss;
    float *d = dst + (size_t)blockIdx.x * n;
    for (int32_t c = threadIdx.x; c < n; c += blockDim.x)
        d[c] = s[c];
}

extern "C" int kt__cuda_gather_rows(kt__cuda_rt *rt, const float *src, int32_t src_stride,
                                    const int32_t *idx, int32_t div, int32_t rows, int32_t n,
                                    float *dst)
{
    flush_pending(rt);
    if (rows > 0)
        k_gather<<<rows, 256, 0, rt->stream>>>(src, src_stride, idx, div, n, dst);
    return 0;
}

/* out[t][c] += Σ_j w[t][j] · Y[slot[t][j]][c] over the slots >= 0 (in j order) */
__global__ void k_combine(float *out, int32_t H, int32_t k, const float *Y, const int32_t *slot,
                          const float *w)
{
    int32_t t = blockIdx.x;
    for (int32_t c = threadIdx.x; c < H; c += blockDim.x) {
        float acc = 0.0f;
        for (int32_t j = 0; j < k; j++) {
            int32_t s = slot[(size_t)t * k + j];
            if (s >= 0)
                acc += w[(size_t)t * k + j] * Y[(size_t)s * H + c];
        }
        out[(size_t)t * H + c] += acc;
    }
}

extern "C" int kt__cuda_combine(kt__cuda_rt *rt, float *out, int32_t T, int32_t H, int32_t k,
                                const float *Y, const int32_t *slot, const float *w)
{
    flush_pending(rt);
    if (T > 0)
        k_combine<<<T, 256, 0, rt->stream>>>(out, H, k, Y, slot, w);
    return 0;
}

/* ------------------------------------------- grouped experts on the device --- */
/* A chunk's routed (token, expert) pairs, sorted by expert and multiplied on the
 * device in three launches (gate, up with the activation, down) whatever the
 * number of experts: no host sync, no per-expert cuBLAS call. */
#define GRP_BM 64             /* pair rows of one expert per block */
#define GRP_BN 128            /* output columns per block */
#define GRP_BK 32             /* inputs per staged step */
#define GRP_LD (GRP_BK + 8)   /* BF16 pitch of a staged row (a 16-byte multiple, banks skewed) */
#define GRP_CLD (GRP_BN + 4)  /* F32 pitch of the staged result */
#define GRP_SMEM (GRP_BM * GRP_CLD * 4)

/* One block over n = T·k routed ids: the pairs whose expert has a device matrix
 * (and, with e_end > 0, an id below e_end) counted per expert, then
 * route[e] = first row of expert e (route[E] = rows in all), route[E + 1 + e] =
 * its first tile of GRP_BM rows (route[2E + 1] = tiles in all), perm[row] =
 * pair, slot[pair] = row or -1. Rows within an expert come in any order: each
 * row's products do not depend on the others. */
__global__ void k_group_route(const int32_t *ids, int32_t n, int32_t E, int32_t e_end,
                              const kt__cuda_mat *tab, int32_t *route, int32_t *perm,
                              int32_t *slot)
{
    __shared__ int32_t cnt[KT__CUDA_MAX_EXPERTS], next[KT__CUDA_MAX_EXPERTS];
    __shared__ unsigned char on[KT__CUDA_MAX_EXPERTS];
    for (int32_t e = threadIdx.x; e < E; e += blockDim.x) {
        cnt[e] = 0;
        on[e] = tab[e].data != NULL && (e_end <= 0 || e < e_end);
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        int32_t e = ids[i];
        if (e >= 0 && e < E && on[e])
            atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t rows = 0, tiles = 0;
        for (int32_t e = 0; e < E; e++) {
            next[e] = rows;
            route[e] = rows;
            route[E + 1 + e] = tiles;
            rows += cnt[e];
            tiles += (cnt[e] + GRP_BM - 1) / GRP_BM;
        }
        route[E] = rows;
        route[2 * E + 1] = tiles;
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        int32_t e = ids[i], s = -1;
        if (e >= 0 && e < E && on[e]) {
            s = atomicAdd(&next[e], 1);
            perm[s] = i;
        }
        slot[i] = s;
    }
}

/* Block blockIdx.x's tile of the route: its expert e and rows m0 ..< m1 (false:
 * past the last tile). The expert is the last one whose first tile is <= the
 * block's (an empty expert starts where the next one does, so the search lands
 * on the one that owns the tile). */
__device__ __forceinline__ bool group_tile(const int32_t *route, int32_t E, int32_t *e,
                                           int32_t *m0, int32_t *m1)
{
    const int32_t *tstart = route + E + 1;
    int32_t tile = blockIdx.x;
    if (tile >= tstart[E])
        return false;
    int32_t lo = 0, hi = E - 1;
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (tstart[mid] <= tile)
            lo = mid;
        else
            hi = mid - 1;
    }
    *e = lo;
    *m0 = route[lo] + (tile - tstart[lo]) * GRP_BM;
    *m1 = route[lo + 1];
    return true;
}

/* Y[r][0..N) = X[row(r)] · W_eᵀ over the rows r of every expert e (BF16 W_e
 * [N][K]; row(r) = perm[r] / div with perm, else r), or with act: Y[r] =
 * act(Y[r], X[row(r)] · W_eᵀ) (the gate's product already in Y). The F32
 * activations go in as BF16 hi + lo (x = hi + lo to 2^-17), both multiplied
 * with F32 accumulation on the tensor cores. Grid: (tiles bound, N / GRP_BN);
 * a block finds its expert from the route's tile starts, 8 warps of 32 x 32. */
__global__ void __launch_bounds__(256)
k_group_gemm(const float *X, int32_t xs, const int32_t *perm, int32_t div,
             const kt__cuda_mat *tab, const int32_t *route, int32_t E, int32_t N, int32_t K,
             float *Y, int32_t act, int32_t oai, float alpha, float limit)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    int32_t e, m0, m1;
    if (!group_tile(route, E, &e, &m0, &m1))
        return;
    int32_t n0 = blockIdx.y * GRP_BN;
    const __nv_bfloat16 *W = (const __nv_bfloat16 *)tab[e].data;
    __shared__ __align__(32) unsigned char smem[GRP_SMEM];
    __nv_bfloat16 *Ah = (__nv_bfloat16 *)smem;  /* [BM][LD] x hi */
    __nv_bfloat16 *Al = Ah + GRP_BM * GRP_LD;   /* [BM][LD] x lo */
    __nv_bfloat16 *Bs = Al + GRP_BM * GRP_LD;   /* [BN][LD] weight rows */
    float *Cs = (float *)smem;                  /* [BM][CLD] after the last step */
    int32_t warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    /* staging: x row ar, 8 inputs from ac; weight row br, 16 inputs from bc */
    int32_t ar = threadIdx.x / 4, ac = (threadIdx.x % 4) * 8;
    int32_t br = threadIdx.x / 2, bc = (threadIdx.x % 2) * 16;
    const float *xrow = NULL;
    if (m0 + ar < m1) {
        int32_t r = perm ? perm[m0 + ar] / div : m0 + ar;
        xrow = X + (size_t)r * xs;
    }
    const __nv_bfloat16 *wrow = n0 + br < N ? W + (size_t)(n0 + br) * K : NULL;
    for (int32_t k0 = 0; k0 < K; k0 += GRP_BK) {
        /* [BM][BK] x = hi + lo */
        float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
        if (xrow && k0 + ac < K) {
            v0 = *(const float4 *)(xrow + k0 + ac);
            v1 = *(const float4 *)(xrow + k0 + ac + 4);
        }
        float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
        for (int i = 0; i < 8; i++) {
            __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
            Ah[ar * GRP_LD + ac + i] = h;
            Al[ar * GRP_LD + ac + i] = __float2bfloat16_rn(v[i] - __bfloat162float(h));
        }
        /* [BN][BK] weights */
        uint4 b0 = make_uint4(0, 0, 0, 0), b1 = b0;
        if (wrow && k0 + bc < K)
            b0 = *(const uint4 *)(wrow + k0 + bc);
        if (wrow && k0 + bc + 8 < K)
            b1 = *(const uint4 *)(wrow + k0 + bc + 8);
        *(uint4 *)(Bs + br * GRP_LD + bc) = b0;
        *(uint4 *)(Bs + br * GRP_LD + bc + 8) = b1;
        __syncthreads();
        /* acc[32 x 32] += x_hi · Wᵀ + x_lo · Wᵀ */
        for (int kk = 0; kk < GRP_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> ah[2],
                al[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
            for (int i = 0; i < 2; i++) {
                wmma::load_matrix_sync(ah[i], Ah + (wm * 32 + i * 16) * GRP_LD + kk, GRP_LD);
                wmma::load_matrix_sync(al[i], Al + (wm * 32 + i * 16) * GRP_LD + kk, GRP_LD);
            }
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(b[j], Bs + (wn * 32 + j * 16) * GRP_LD + kk, GRP_LD);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) {
                    wmma::mma_sync(acc[i][j], ah[i], b[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], al[i], b[j], acc[i][j]);
                }
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * GRP_CLD + wn * 32 + j * 16,
                                    acc[i][j], GRP_CLD, wmma::mem_row_major);
    __syncthreads();
    for (int32_t i = threadIdx.x; i < GRP_BM * GRP_BN; i += blockDim.x) {
        int32_t r = i / GRP_BN, c = i % GRP_BN;
        if (m0 + r >= m1 || n0 + c >= N)
            continue;
        float *y = Y + (size_t)(m0 + r) * N + n0 + c;
        float p = Cs[r * GRP_CLD + c];
        *y = act ? act_value(*y, p, oai, alpha, limit) : p;
    }
#endif
}

/* k_group_gemm's product on mma.sync with a staged pipeline (the default;
 * KT_GPU_GROUP_MMA=0: k_group_gemm; H200 12:47, 12 layers of Qwen3-30B-A3B:
 * a 2048-token chunk's experts 26.7 -> 16.9 ms):
 * the next step's x rows (F32, split into BF16 hi + lo) and weight rows are
 * loaded into registers while the tensor cores work on this step's, then
 * stored into the other of two shared buffers (one barrier a step). 8 warps as
 * 2 x 4, each [32 rows][32 columns] = 2 x 4 fragments of m16n8:
 *   acc += x_hi · Wᵀ + x_lo · Wᵀ   (W exact in BF16; x to 2^-16) */
#define GM_LD (GRP_BK + 8) /* BF16 pitch of a staged row: 80 bytes, banks skewed */
__global__ void __launch_bounds__(256)
k_group_mma(const float *X, int32_t xs, const int32_t *perm, int32_t div,
            const kt__cuda_mat *tab, const int32_t *route, int32_t E, int32_t N, int32_t K,
            float *Y, int32_t act, int32_t oai, float alpha, float limit)
{
    int32_t e, m0, m1;
    if (!group_tile(route, E, &e, &m0, &m1))
        return;
    const int32_t n0 = blockIdx.y * GRP_BN;
    const __nv_bfloat16 *W = (const __nv_bfloat16 *)tab[e].data;
    __shared__ __align__(16) __nv_bfloat16 Ah[2][GRP_BM * GM_LD], Al[2][GRP_BM * GM_LD];
    __shared__ __align__(16) __nv_bfloat16 Bs[2][GRP_BN * GM_LD];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
    const int wm = warp / 4, wn = warp % 4;
    /* staging: x rows ar, ar + 32 at inputs ac..ac+3; weight rows br, br + 64 at bc..bc+7 */
    const int ar = tid / 8, ac = (tid % 8) * 4, br = tid / 4, bc = (tid % 4) * 8;
    const float *xrow[2];
    const __nv_bfloat16 *wrow[2];
    for (int u = 0; u < 2; u++) {
        int32_t r = m0 + ar + 32 * u;
        xrow[u] = r < m1 ? X + (size_t)(perm ? perm[r] / div : r) * xs : NULL;
        int32_t c = n0 + br + 64 * u;
        wrow[u] = c < N ? W + (size_t)c * K : NULL;
    }
    float4 xv[2];
    uint4 wv[2];
    auto load = [&](int32_t k0) {
        for (int u = 0; u < 2; u++) {
            xv[u] = xrow[u] && k0 + ac < K ? *(const float4 *)(xrow[u] + k0 + ac)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
            wv[u] = wrow[u] && k0 + bc < K ? *(const uint4 *)(wrow[u] + k0 + bc)
                                           : make_uint4(0, 0, 0, 0);
        }
    };
    auto store = [&](int b) {
        for (int u = 0; u < 2; u++) {
            float4 v = xv[u];
            __nv_bfloat16 *h = &Ah[b][(ar + 32 * u) * GM_LD + ac];
            __nv_bfloat16 *l = &Al[b][(ar + 32 * u) * GM_LD + ac];
            *(uint2 *)h = pack4(v);
            *(uint2 *)l = pack4(lo4(v));
            *(uint4 *)&Bs[b][(br + 64 * u) * GM_LD + bc] = wv[u];
        }
    };
    float acc[2][4][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    const int32_t steps = (K + GRP_BK - 1) / GRP_BK;
    load(0);
    store(0);
    __syncthreads();
    for (int32_t st = 0; st < steps; st++) {
        const int b = st & 1;
        if (st + 1 < steps)
            load((st + 1) * GRP_BK);
#pragma unroll
        for (int kk = 0; kk < GRP_BK; kk += 16) {
            uint32_t ah[2][4], al[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const __nv_bfloat16 *ph = &Ah[b][(wm * 32 + i * 16 + g) * GM_LD + kk + 2 * q];
                const __nv_bfloat16 *pl = &Al[b][(wm * 32 + i * 16 + g) * GM_LD + kk + 2 * q];
                ah[i][0] = ld2(ph), ah[i][1] = ld2(ph + 8 * GM_LD);
                ah[i][2] = ld2(ph + 8), ah[i][3] = ld2(ph + 8 * GM_LD + 8);
                al[i][0] = ld2(pl), al[i][1] = ld2(pl + 8 * GM_LD);
                al[i][2] = ld2(pl + 8), al[i][3] = ld2(pl + 8 * GM_LD + 8);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const __nv_bfloat16 *pb = &Bs[b][(wn * 32 + j * 8 + g) * GM_LD + kk + 2 * q];
                uint32_t b0 = ld2(pb), b1 = ld2(pb + 8);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    mma_bf16(acc[i][j], ah[i][0], ah[i][1], ah[i][2], ah[i][3], b0, b1);
                    mma_bf16(acc[i][j], al[i][0], al[i][1], al[i][2], al[i][3], b0, b1);
                }
            }
        }
        if (st + 1 < steps)
            store(b ^ 1);
        __syncthreads();
    }
    /* rows g and g + 8 of each fragment, columns 2q and 2q + 1 */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++) {
                int32_t r = m0 + wm * 32 + i * 16 + g + 8 * h;
                int32_t c = n0 + wn * 32 + j * 8 + 2 * q;
                if (r >= m1 || c >= N)
                    continue;
                float *y = Y + (size_t)r * N + c;
                float p0 = acc[i][j][2 * h], p1 = acc[i][j][2 * h + 1];
                if (act)
                    p0 = act_value(y[0], p0, oai, alpha, limit),
                    p1 = act_value(y[1], p1, oai, alpha, limit);
                *(float2 *)y = make_float2(p0, p1);
            }
}

extern "C" int kt__cuda_experts_grouped(kt__cuda_rt *rt, const kt__cuda_group_args *a)
{
    flush_pending(rt);
    int32_t n = a->T * a->k, E = a->E;
    if (rt->cc_major < 8 || E <= 0 || E > KT__CUDA_MAX_EXPERTS || a->H % 8 || a->I % 8 ||
        a->x_stride % 4)
        return 1;
    if (n <= 0)
        return 0;
    k_group_route<<<1, 1024, 0, rt->stream>>>(a->ids, n, E, a->e_end, a->gate, a->route,
                                              a->perm, a->slot);
    /* tiles: sum of ceil(cnt_e / BM) <= n / BM + E */
    unsigned tiles = (unsigned)((n + GRP_BM - 1) / GRP_BM + E);
    dim3 gi(tiles, (unsigned)((a->I + GRP_BN - 1) / GRP_BN));
    dim3 go(tiles, (unsigned)((a->H + GRP_BN - 1) / GRP_BN));
    auto gemm = rt->group_mma ? k_group_mma : k_group_gemm;
    gemm<<<gi, 256, 0, rt->stream>>>(a->x, a->x_stride, a->perm, a->k, a->gate, a->route, E,
                                      a->I, a->H, a->h, 0, 0, 0.f, 0.f);
    gemm<<<gi, 256, 0, rt->stream>>>(a->x, a->x_stride, a->perm, a->k, a->up, a->route, E,
                                      a->I, a->H, a->h, 1, a->oai, a->alpha, a->limit);
    gemm<<<go, 256, 0, rt->stream>>>(a->h, a->I, NULL, 1, a->down, a->route, E, a->H, a->I,
                                      a->y, 0, 0, 0.f, 0.f);
    k_combine<<<a->T, 256, 0, rt->stream>>>(a->out, a->H, a->k, a->y, a->slot, a->w);
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
    flush_pending(rt);
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
    flush_pending(rt);
    if (T > 0)
        k_mla_q<<<dim3(n_head, T), 256, 0, rt->stream>>>(q, nope, rope, *kv_b,
                                                         kv_b->rows / n_head, qa);
    return 0;
}

extern "C" int kt__cuda_mla_absorb_o(kt__cuda_rt *rt, const float *ot, int32_t T, int32_t n_head,
                                     int32_t nope, int32_t v_dim, const kt__cuda_mat *kv_b,
                                     float *o)
{
    flush_pending(rt);
    if (T > 0)
        k_mla_o<<<dim3(n_head, T), 256, 0, rt->stream>>>(ot, *kv_b, nope, v_dim,
                                                         kv_b->rows / n_head, o);
    return 0;
}

/* ------------------------------------------------------------ yardsticks --- */

/* best-of-reps milliseconds of fn() between two events on stream s */
template <typename F> static float time_best(cudaStream_t s, int reps, F fn)
{
    cudaEvent_t a, b;
    float best = -1.0f;
    if (cudaEventCreate(&a) != cudaSuccess)
        return -1.0f;
    if (cudaEventCreate(&b) != cudaSuccess) {
        cudaEventDestroy(a);
        return -1.0f;
    }
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(a, s);
        fn();
        cudaEventRecord(b, s);
        if (cudaEventSynchronize(b) != cudaSuccess)
            break;
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, a, b);
        if (best < 0 || ms < best)
            best = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

__global__ void k_fill_bf16(uint16_t *p, size_t n, uint32_t seed)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        /* uniform in [-1, 1): exponent of 1.0, random mantissa, minus 1.5, times 2 */
        float v = (__uint_as_float(0x3f800000u | (h >> 9)) - 1.5f) * 2.0f;
        p[i] = bf16_rne(v);
    }
}

extern "C" int kt__cuda_yardsticks(int32_t device, kt__cuda_yardsticks_out *out, char *err,
                                   size_t err_size)
{
    memset(out, 0, sizeof *out);
    CK(cudaSetDevice(device), "cudaSetDevice");
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t big = (size_t)1 << 31, pin = (size_t)1 << 30; /* 2 GiB, 1 GiB */
    void *d0 = NULL, *d1 = NULL, *h = NULL;
    int rc = -1;
    cublasHandle_t blas = NULL;
    cudaError_t e;
    if ((e = cudaMalloc(&d0, big)) != cudaSuccess || (e = cudaMalloc(&d1, big)) != cudaSuccess ||
        (e = cudaHostAlloc(&h, pin, cudaHostAllocPortable)) != cudaSuccess) {
        fail(err, err_size, "yardsticks: allocation", e);
        goto done;
    }
    cudaMemsetAsync(d0, 1, big, s);
    memset(h, 1, pin);
    {
        /* HBM: device-to-device copy, bytes read + written */
        float ms = time_best(s, 5, [&] { cudaMemcpyAsync(d1, d0, big, cudaMemcpyDeviceToDevice, s); });
        out->hbm_gbs = ms > 0 ? 2.0 * (double)big / (ms * 1e6) : 0;
        ms = time_best(s, 3, [&] { cudaMemcpyAsync(d0, h, pin, cudaMemcpyHostToDevice, s); });
        out->h2d_gbs = ms > 0 ? (double)pin / (ms * 1e6) : 0;
        ms = time_best(s, 3, [&] { cudaMemcpyAsync(h, d0, pin, cudaMemcpyDeviceToHost, s); });
        out->d2h_gbs = ms > 0 ? (double)pin / (ms * 1e6) : 0;
        /* tensor cores: C[N][N] = A · B, BF16 in, F32 accumulate, random operands */
        const int N = 8192;
        uint16_t *A = (uint16_t *)d0, *B = A + (size_t)N * N;
        float *C = (float *)d1;
        size_t nn = (size_t)N * N;
        k_fill_bf16<<<(unsigned)((nn + 255) / 256), 256, 0, s>>>(A, nn, 1u);
        k_fill_bf16<<<(unsigned)((nn + 255) / 256), 256, 0, s>>>(B, nn, 7u);
        if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
            blas = NULL;
            set_err(err, err_size, "yardsticks: cublasCreate failed");
            goto done;
        }
        cublasSetStream(blas, s);
        float alpha = 1.0f, beta = 0.0f;
        cublasStatus_t bst = CUBLAS_STATUS_SUCCESS;
        auto mm = [&] {
            bst = cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, N, N, N, &alpha, A, CUDA_R_16BF,
                               N, B, CUDA_R_16BF, N, &beta, C, CUDA_R_32F, N,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        };
        time_best(s, 1, mm); /* warm-up: handle workspace, kernel selection */
        ms = time_best(s, 5, mm);
        out->bf16_tflops = ms > 0 && bst == CUBLAS_STATUS_SUCCESS
                               ? 2.0 * N * (double)N * N / (ms * 1e9) : 0;
    }
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess) {
        fail(err, err_size, "yardsticks", e);
        goto done;
    }
    rc = 0;
done:
    if (blas)
        cublasDestroy(blas);
    cudaFree(d0);
    cudaFree(d1);
    cudaFreeHost(h);
    cudaStreamDestroy(s);
    cudaGetLastError();
    return rc;
}
