/* Dense products of the fast path with activations as accurate as F32:
 * each activation x is split into two BF16 numbers, hi = bf16(x) and
 * lo = bf16(x - hi) (|x - hi - lo| <= 2^-16 |x|), and W x = W hi + W lo with
 * exact BF16 (or FP8) weight products summed in F32.
 *
 *   T >= KT__DNNL_MIN_T, BF16 weights, oneDNN built: oneDNN BF16 matmuls,
 *       one per chunk of 64 tokens ([2 cp][K]: the chunk's hi rows, then its
 *       lo rows), by W packed into the layout oneDNN prefers the first time a
 *       prefill needs it (never, when a GPU runs the dense layers),
 *       split by output rows over the workers (each worker runs its own
 *       slice's primitives single-threaded);
 *   otherwise (decode; FP8 weights; no oneDNN): the CPU MoE backend's
 *       BF16X2 kernels (cpu/avx512/moe_x2_avx512.c) on the weights in place.
 *
 * Both need AVX-512 BF16; without it (or for F32 weights) the engine's own
 * F32 kernels (ops.c) run. The router keeps the F32 kernels: its logits pick
 * experts, and near ties must break as in the reference. */
#include <stdlib.h>
#include <string.h>

#include "../../cpu/moe_kernels.h"
#include "core/threadpool.h"
#include "engine_internal.h"
#include "kt/hw.h"

#if KT_HAVE_ONEDNN
#include <dnnl.h>
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#define KT__DNNL_OMP 1
#endif
#endif

/* Below this many tokens the x2 kernels beat oneDNN on the doubled rows
 * (Zen 4, one core, isolated: 4 tokens 29 vs 22 GFLOP/s; in the engine 8
 * tokens already favour oneDNN, 91 vs 73). */
#define KT__DNNL_MIN_T 8
/* Primitives kept per context (shapes x chunk rows); full: start over (oneDNN's
 * own primitive cache keeps recreating a seen shape cheap). */
#define KT__DNNL_CACHE 128

typedef struct dn_slice dn_slice;
typedef struct dn_prim dn_prim;

struct kt__dense {
    const kt__moe_kernels *x2;      /* BF16 weights, BF16X2 activations            */
    const kt__moe_kernels *x2_fp8;  /* FP8 128x128 block-scaled weights            */
    int n_workers;                  /* slices per packed matrix                    */
#if KT_HAVE_ONEDNN
    bool dnnl_on;
    bool logged;                    /* the first packing was logged                */
    dnnl_engine_t eng;
    dnnl_stream_t *streams;         /* [n_workers]                                 */
    void **ws;                      /* [n_workers] scratchpads                     */
    size_t *ws_size;
    dn_prim *prims;                 /* [KT__DNNL_CACHE]                            */
    int n_prims;
    struct dn_packed **packed;      /* every packed matrix, to free                */
    int n_packed, cap_packed;
    uint64_t packed_bytes;
#endif
};

/* ------------------------------------------------------------ x2 kernels --- */

typedef struct x2_job {
    const kt__moe_kernels *k;
    const kt__wmat *wm;
    struct kt_pool *pool;
    const float *x;       /* [T][K] F32 activations          */
    uint8_t *A;           /* [T] activation rows of rb bytes */
    size_t rb;
    int32_t T, rows;
    const float *bias;
    float *y;             /* [T][rows] */
    uint8_t *scr;         /* [n][scr_bytes] */
    size_t scr_bytes;
    int n;
} x2_job;

static void x2_rows(const x2_job *j, int32_t r0, int32_t r1, void *scr)
{
    j->k->gemm(j->wm, r0, r1, 0, j->wm->cols, j->A, j->rb, NULL, j->T, j->y + r0, j->rows,
               scr);
    if (j->bias)
        for (int32_t t = 0; t < j->T; t++)
            for (int32_t r = r0; r < r1; r++)
                j->y[(size_t)t * j->rows + r] += j->bias[r];
}

/* Activation rows [t0, t1) as the kernels want them (hi + lo BF16). */
static void x2_quant(const x2_job *j, int32_t t0, int32_t t1)
{
    int32_t K = j->wm->cols;
    for (int32_t t = t0; t < t1; t++)
        j->k->quant(j->x + (size_t)t * K, 0, K, K, j->A + (size_t)t * j->rb);
}

static void x2_worker(void *arg, int tid)
{
    const x2_job *j = arg;
    /* every worker splits a share of the tokens, then all read all of them */
    x2_quant(j, (int32_t)((int64_t)j->T * tid / j->n), (int32_t)((int64_t)j->T * (tid + 1) / j->n));
    kt__pool_barrier(j->pool, tid);
    /* contiguous shares of whole 4-row tiles */
    int32_t per = ((j->rows + j->n - 1) / j->n + 3) & ~3;
    int32_t r0 = tid * per, r1 = KT_MIN(j->rows, r0 + per);
    if (r0 < r1)
        x2_rows(j, r0, r1, j->scr + (size_t)tid * j->scr_bytes);
}

static bool x2_linear(kt_context *ctx, const kt__moe_kernels *k, const float *x, int32_t T,
                      const kt__mat *W, const float *bias, float *y)
{
    int32_t K = W->cols;
    bool par = ctx->pool && (int64_t)W->rows * K * T >= (1 << 20);
    int n = par ? kt__pool_n_threads(ctx->pool) : 1;
    size_t rb = kt__moe_act_row_bytes(k->act, K), sb = (k->scratch_bytes + 63) & ~(size_t)63;
    kt__scratch_mark mark = kt__scratch_get_mark(&ctx->scratch);
    uint8_t *A = kt__scratch_alloc(&ctx->scratch, (size_t)T, rb);
    uint8_t *scr = kt__scratch_alloc(&ctx->scratch, (size_t)n, sb ? sb : 64);
    if (!A || !scr) {
        kt__scratch_release(&ctx->scratch, mark);
        return false;
    }
    /* activations hi + lo, once per product (new rows: a new epoch) */
    kt__moe_new_epoch();
    kt__wmat wm = {.w = W->data, .scale = W->scale, .rows = W->rows, .cols = K};
    x2_job j = {k, &wm, ctx->pool, x, A, rb, T, W->rows, bias, y, scr, sb, n};
    if (par) {
        kt__pool_run(ctx->pool, x2_worker, &j);
    } else {
        x2_quant(&j, 0, T);
        x2_rows(&j, 0, W->rows, scr);
    }
    kt__scratch_release(&ctx->scratch, mark);
    return true;
}

/* ---------------------------------------------------------------- oneDNN --- */

#if KT_HAVE_ONEDNN

struct dn_slice {
    int32_t r0, r1;            /* output rows of W in this slice                    */
    dnnl_memory_desc_t md;     /* packed [K][r1 - r0] as the matmul wants it         */
    void *data;                /* 64-byte aligned, owned                            */
};

typedef struct dn_packed {
    int n;
    dn_slice s[];
} dn_packed;

struct dn_prim {
    int64_t M, N, K, ldd;      /* key: [M][K] x [K][N] -> dst rows ldd apart          */
    dnnl_memory_desc_t src_md, wei_md, dst_md, scr_md;
    dnnl_primitive_t prim;     /* NULL: creation failed, use the x2 kernels           */
};

static bool dn_ok(dnnl_status_t s)
{
    return s == dnnl_success;
}

static void dn_cache_clear(kt__dense *d)
{
    for (int i = 0; i < d->n_prims; i++)
        if (d->prims[i].prim)
            dnnl_primitive_destroy(d->prims[i].prim);
    d->n_prims = 0;
}

/* Matmul primitive for one slice shape (weights in `wei`), cached; the cache
 * has room (dn_linear clears it first when a call could overflow it). */
static dn_prim *dn_prim_get(kt__dense *d, int64_t M, int64_t N, int64_t K, int64_t ldd,
                            const dnnl_memory_desc_t *wei)
{
    for (int i = 0; i < d->n_prims; i++) {
        dn_prim *p = &d->prims[i];
        if (p->M == M && p->N == N && p->K == K && p->ldd == ldd &&
            dnnl_memory_desc_equal(&p->wei_md, wei))
            return p;
    }
    dn_prim *p = &d->prims[d->n_prims++];
    memset(p, 0, sizeof *p);
    p->M = M, p->N = N, p->K = K, p->ldd = ldd;
    p->wei_md = *wei;
    dnnl_dims_t sd = {M, K}, dd = {M, N}, ds = {ldd, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dn_ok(dnnl_memory_desc_init_by_tag(&p->src_md, 2, sd, dnnl_bf16, dnnl_ab)) &&
        dn_ok(dnnl_memory_desc_init_by_strides(&p->dst_md, 2, dd, dnnl_f32, ds)) &&
        dn_ok(dnnl_matmul_desc_init(&desc, &p->src_md, wei, NULL, &p->dst_md)) &&
        dn_ok(dnnl_primitive_attr_create(&attr)) &&
        /* our own scratchpads: this build would allocate one per execution */
        dn_ok(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) &&
        dn_ok(dnnl_primitive_desc_create(&pd, &desc, attr, d->eng, NULL))) {
        p->scr_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (!dn_ok(dnnl_primitive_create(&p->prim, pd)))
            p->prim = NULL;
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return p;
}

/* The layout oneDNN wants for weights [K][N] (format any, M = m_ref). */
static bool dn_packed_md(kt__dense *d, int64_t m_ref, int64_t N, int64_t K,
                         dnnl_memory_desc_t *out)
{
    dnnl_dims_t sd = {m_ref, K}, wd = {K, N}, dd = {m_ref, N};
    dnnl_memory_desc_t smd, wmd, dmd;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    bool ok = dn_ok(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_bf16, dnnl_ab)) &&
              dn_ok(dnnl_memory_desc_init_by_tag(&wmd, 2, wd, dnnl_bf16, dnnl_format_tag_any)) &&
              dn_ok(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab)) &&
              dn_ok(dnnl_matmul_desc_init(&desc, &smd, &wmd, NULL, &dmd)) &&
              dn_ok(dnnl_primitive_desc_create(&pd, &desc, NULL, d->eng, NULL));
    if (ok)
        *out = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* Copies rows [r0, r1) of W [N][K] (BF16, i.e. [K][N] in "ba" order) into md's layout. */
static bool dn_reorder(kt__dense *d, const uint16_t *W, int64_t K, int32_t r0, int32_t r1,
                       const dnnl_memory_desc_t *md, void *dst)
{
    dnnl_dims_t wd = {K, r1 - r0};
    dnnl_memory_desc_t plain;
    dnnl_memory_t from = NULL, to = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t rp = NULL;
    bool ok = dn_ok(dnnl_memory_desc_init_by_tag(&plain, 2, wd, dnnl_bf16, dnnl_ba)) &&
              dn_ok(dnnl_memory_create(&from, &plain, d->eng, (void *)(W + (size_t)r0 * K))) &&
              dn_ok(dnnl_memory_create(&to, md, d->eng, dst)) &&
              dn_ok(dnnl_reorder_primitive_desc_create(&rpd, &plain, d->eng, md, d->eng, NULL)) &&
              dn_ok(dnnl_primitive_create(&rp, rpd));
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        ok = dn_ok(dnnl_primitive_execute(rp, d->streams[0], 2, args)) &&
             dn_ok(dnnl_stream_wait(d->streams[0]));
    }
    if (rp)
        dnnl_primitive_destroy(rp);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    if (from)
        dnnl_memory_destroy(from);
    if (to)
        dnnl_memory_destroy(to);
    return ok;
}

static void dn_packed_free(dn_packed *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        kt__free_aligned(p->s[i].data);
    kt__free(p);
}

/* Packs a BF16 matrix into one slice per worker (multiples of 64 rows when
 * there are enough, else of 16). Failure leaves W->packed NULL and
 * pack_state -1 (x2 kernels from then on). */
static kt_status dn_pack(kt__dense *d, kt__mat *W, int64_t m_ref)
{
    W->pack_state = -1;
    if (!W->data || W->type != KT_TYPE_BF16 || W->rows < 16)
        return KT_OK;
    int32_t N = W->rows, K = W->cols;
    int32_t step = N >= 64 * d->n_workers ? 64 : 16;
    int32_t per = ((N + d->n_workers - 1) / d->n_workers + step - 1) / step * step;
    int n = (N + per - 1) / per;
    dn_packed *p = kt__calloc(1, sizeof *p + (size_t)n * sizeof(dn_slice));
    if (!p)
        return KT_ERR_NOMEM;
    if (d->n_packed == d->cap_packed) {
        int cap = d->cap_packed ? 2 * d->cap_packed : 64;
        void *np = kt__realloc(d->packed, (size_t)cap * sizeof *d->packed);
        if (!np) {
            kt__free(p);
            return KT_ERR_NOMEM;
        }
        d->packed = np;
        d->cap_packed = cap;
    }
    for (int i = 0; i < n; i++) {
        dn_slice *s = &p->s[i];
        s->r0 = i * per;
        s->r1 = KT_MIN(N, s->r0 + per);
        if (!dn_packed_md(d, m_ref, s->r1 - s->r0, K, &s->md))
            goto unsupported;
        size_t bytes = dnnl_memory_desc_get_size(&s->md);
        s->data = kt__malloc_aligned(bytes ? bytes : 64, 64);
        p->n = i + 1;
        if (!s->data) {
            dn_packed_free(p);
            return KT_ERR_NOMEM;
        }
        if (!dn_reorder(d, W->data, K, s->r0, s->r1, &s->md, s->data))
            goto unsupported;
        d->packed_bytes += bytes;
    }
    d->packed[d->n_packed++] = p;
    W->packed = p;
    W->pack_state = 1;
    return KT_OK;
unsupported:
    dn_packed_free(p);
    return KT_OK;
}

/* Token chunks of one oneDNN call: [2c][K] hi then lo rows of c tokens keep
 * the doubled output rows in cache (measured on Zen 4, N 4096, K 2048: 100
 * GFLOP/s at 64 tokens, 66 at 512 in one call). */
#define KT__DNNL_CHUNK 64

/* Rows a chunk of c tokens runs with: c rounded up to 8 (zero rows), so that
 * prompts of every length need at most 8 primitive shapes, each compiled once. */
static int32_t dn_rows(int32_t c)
{
    return (c + 7) & ~7;
}

typedef struct dn_job {
    kt__dense *d;
    const dn_packed *pk;
    dn_prim **prim;       /* [n slices][2]: full chunks, the last chunk */
    struct kt_pool *pool;
    const float *x;       /* [T][K] */
    int32_t K;
    uint16_t *xb;         /* per chunk of c tokens: [cp][K] hi rows, then [cp][K] lo rows
                             (cp = dn_rows(c)), chunk k at 2 * 64 k rows */
    float *y2;            /* per chunk: [2 cp][N] */
    float *y;             /* [T][N] */
    const float *bias;
    int32_t T, N;
    int failed;           /* set by a worker whose primitive failed */
} dn_job;

static bool dn_exec(kt__dense *d, int i, const dn_prim *p, const void *src_p, void *wei_p,
                    float *dst_p)
{
    dnnl_memory_t src = NULL, wei = NULL, dst = NULL, scr = NULL;
    bool ok = dn_ok(dnnl_memory_create(&src, &p->src_md, d->eng, (void *)src_p)) &&
              dn_ok(dnnl_memory_create(&wei, &p->wei_md, d->eng, wei_p)) &&
              dn_ok(dnnl_memory_create(&dst, &p->dst_md, d->eng, dst_p)) &&
              dn_ok(dnnl_memory_create(&scr, &p->scr_md, d->eng, d->ws[i]));
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei},
                                   {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scr}};
        ok = dn_ok(dnnl_primitive_execute(p->prim, d->streams[i], 4, args)) &&
             dn_ok(dnnl_stream_wait(d->streams[i]));
    }
    dnnl_memory_destroy(src), dnnl_memory_destroy(wei);
    dnnl_memory_destroy(dst), dnnl_memory_destroy(scr);
    return ok;
}

/* Slice i of the output rows, chunk by chunk: y = W hi + W lo (+ bias). */
static void dn_slice_run(dn_job *j, int i)
{
    const dn_slice *s = &j->pk->s[i];
#ifdef KT__DNNL_OMP
    omp_set_num_threads(1); /* this worker's share runs on this worker only */
#endif
    for (int32_t t0 = 0; t0 < j->T; t0 += KT__DNNL_CHUNK) {
        int32_t c = KT_MIN(KT__DNNL_CHUNK, j->T - t0), cp = dn_rows(c);
        const dn_prim *p = j->prim[2 * i + (t0 + KT__DNNL_CHUNK >= j->T)];
        float *y2 = j->y2 + (size_t)2 * t0 * j->N;
        if (!dn_exec(j->d, i, p, j->xb + (size_t)2 * t0 * j->K, s->data, y2 + s->r0)) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        for (int32_t t = 0; t < c; t++) {
            const float *a = y2 + (size_t)t * j->N, *b = a + (size_t)cp * j->N;
            float *o = j->y + (size_t)(t0 + t) * j->N;
            for (int32_t r = s->r0; r < s->r1; r++)
                o[r] = a[r] + b[r] + (j->bias ? j->bias[r] : 0.0f);
        }
    }
}

/* Tokens [t0, t1): hi = bf16(x), lo = bf16(x - hi) into their chunks' rows. */
static void dn_split(const dn_job *j, int32_t t0, int32_t t1)
{
    int32_t K = j->K;
    for (int32_t t = t0; t < t1; t++) {
        int32_t c0 = t / KT__DNNL_CHUNK * KT__DNNL_CHUNK;
        int32_t cp = dn_rows(KT_MIN(KT__DNNL_CHUNK, j->T - c0));
        uint16_t *hi = j->xb + ((size_t)2 * c0 + (t - c0)) * K, *lo = hi + (size_t)cp * K;
        const float *x = j->x + (size_t)t * K;
        for (int32_t k = 0; k < K; k++) {
            uint16_t h = kt__f32_to_bf16(x[k]);
            hi[k] = h;
            lo[k] = kt__f32_to_bf16(x[k] - kt__bf16_to_f32(h));
        }
    }
}

static void dn_worker(void *arg, int tid)
{
    dn_job *j = arg;
    /* every worker splits a share of the tokens, then all read all of them */
    int nth = kt__pool_n_threads(j->pool);
    dn_split(j, (int32_t)((int64_t)j->T * tid / nth), (int32_t)((int64_t)j->T * (tid + 1) / nth));
    kt__pool_barrier(j->pool, tid);
    if (tid < j->pk->n)
        dn_slice_run(j, tid);
}

static bool dn_linear(kt_context *ctx, const float *x, int32_t T, const kt__mat *W,
                      const float *bias, float *y)
{
    kt__dense *d = ctx->dense;
    const dn_packed *pk = W->packed;
    int32_t N = W->rows, K = W->cols;
    dn_prim *prims[2 * 256];
    if (pk->n > 256)
        return false;
    /* a matrix's slices have two shapes at most (the last may be shorter), the
     * chunks two lengths: four primitives */
    if (d->n_prims + 4 > KT__DNNL_CACHE)
        dn_cache_clear(d);
    /* rows of the chunks but the last, and of the last */
    int32_t c0_last = (T - 1) / KT__DNNL_CHUNK * KT__DNNL_CHUNK, c_last = T - c0_last;
    int32_t full = dn_rows(KT_MIN(T, KT__DNNL_CHUNK)), last = dn_rows(c_last);
    /* primitives and scratchpads first, on this thread (the cache is not shared) */
    for (int i = 0; i < pk->n; i++) {
        const dn_slice *s = &pk->s[i];
        for (int k = 0; k < 2; k++) {
            int32_t c = k == 0 ? full : last;
            dn_prim *p = dn_prim_get(d, 2 * (int64_t)c, s->r1 - s->r0, K, N, &s->md);
            if (!p->prim)
                return false;
            prims[2 * i + k] = p;
            size_t need = dnnl_memory_desc_get_size(&p->scr_md);
            if (need > d->ws_size[i]) {
                void *ws = kt__malloc_aligned(need, 64);
                if (!ws)
                    return false;
                kt__free_aligned(d->ws[i]);
                d->ws[i] = ws;
                d->ws_size[i] = need;
            }
        }
    }
    kt__scratch_mark mark = kt__scratch_get_mark(&ctx->scratch);
    size_t rows = (size_t)2 * (c0_last + last);
    uint16_t *xb = kt__scratch_alloc(&ctx->scratch, rows * K, sizeof(uint16_t));
    float *y2 = kt__scratch_alloc(&ctx->scratch, rows * N, sizeof(float));
    if (!xb || !y2) {
        kt__scratch_release(&ctx->scratch, mark);
        return false;
    }
    /* the last chunk's padding rows, hi and lo: zeros */
    uint16_t *pad = xb + ((size_t)2 * c0_last + c_last) * K;
    memset(pad, 0, sizeof(uint16_t) * (size_t)(last - c_last) * K);
    memset(pad + (size_t)last * K, 0, sizeof(uint16_t) * (size_t)(last - c_last) * K);
    dn_job j = {d, pk, prims, ctx->pool, x, K, xb, y2, y, bias, T, N, 0};
    if (ctx->pool && kt__pool_n_threads(ctx->pool) >= pk->n) {
        kt__pool_run(ctx->pool, dn_worker, &j);
    } else {
        dn_split(&j, 0, T);
#ifdef KT__DNNL_OMP
        int saved = omp_get_max_threads(); /* the caller's OpenMP setting */
#endif
        for (int i = 0; i < pk->n; i++)
            dn_slice_run(&j, i);
#ifdef KT__DNNL_OMP
        omp_set_num_threads(saved);
#endif
    }
    kt__scratch_release(&ctx->scratch, mark);
    return !j.failed;
}

/* Sets pack_state (and drops packed) on every dense matrix oneDNN may take:
 * all but the routers and the experts. */
static void dense_mats(kt_context *ctx, int8_t state)
{
    ctx->w.lm_head.pack_state = state;
    ctx->w.lm_head.packed = NULL;
    for (int32_t l = 0; ctx->w.layers && l < ctx->hp.n_layer; l++) {
        kt__layer *L = &ctx->w.layers[l];
        kt__mat *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wq_a, &L->wq_b, &L->wkv_a,
                           &L->wkv_b, &L->ffn_gate, &L->ffn_up, &L->ffn_down, &L->sh_gate,
                           &L->sh_up, &L->sh_down};
        for (size_t i = 0; i < KT_ARRAY_LEN(mats); i++) {
            mats[i]->pack_state = state;
            mats[i]->packed = NULL;
        }
    }
}

static kt_status dn_init(kt_context *ctx, kt__dense *d)
{
    if (!dn_ok(dnnl_engine_create(&d->eng, dnnl_cpu, 0)))
        return KT_OK; /* no oneDNN at run time: x2 kernels */
    d->streams = kt__calloc((size_t)d->n_workers, sizeof *d->streams);
    d->ws = kt__calloc((size_t)d->n_workers, sizeof *d->ws);
    d->ws_size = kt__calloc((size_t)d->n_workers, sizeof *d->ws_size);
    d->prims = kt__calloc(KT__DNNL_CACHE, sizeof *d->prims);
    if (!d->streams || !d->ws || !d->ws_size || !d->prims)
        return KT_ERR_NOMEM;
    for (int i = 0; i < d->n_workers; i++)
        if (!dn_ok(dnnl_stream_create(&d->streams[i], d->eng, dnnl_stream_default_flags)))
            return kt__error(KT_ERR_INTERNAL, "engine: oneDNN stream creation failed");
    /* every dense matrix but the routers, packed when a prefill first needs it */
    dense_mats(ctx, 1);
    d->dnnl_on = true;
    return KT_OK;
}

static void dn_free(kt_context *ctx, kt__dense *d)
{
    if (d->prims)
        dn_cache_clear(d);
    kt__free(d->prims);
    for (int i = 0; i < d->n_packed; i++)
        dn_packed_free(d->packed[i]);
    kt__free(d->packed);
    if (d->streams)
        for (int i = 0; i < d->n_workers; i++)
            if (d->streams[i])
                dnnl_stream_destroy(d->streams[i]);
    kt__free(d->streams);
    if (d->ws)
        for (int i = 0; i < d->n_workers; i++)
            kt__free_aligned(d->ws[i]);
    kt__free(d->ws);
    kt__free(d->ws_size);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    /* the matrices no longer point at packed copies */
    dense_mats(ctx, 0);
}

#endif /* KT_HAVE_ONEDNN */

/* ----------------------------------------------------------------- public --- */

kt_status kt__dense_init(kt_context *ctx)
{
    if (ctx->precision != KT_PRECISION_FAST)
        return KT_OK;
    /* diagnostics (docs/engine.md): KT_ENGINE_DENSE=f32 keeps the F32 kernels,
     * =x2 skips oneDNN */
    const char *env = getenv("KT_ENGINE_DENSE");
    if (env && !strcmp(env, "f32"))
        return KT_OK;
    uint64_t need = KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ |
                    KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI | KT_ISA_AVX512VNNI;
    if ((kt_hw_isa() & need) != need)
        return KT_OK;
    const kt__moe_kernels *x2 = kt__moe_kernels_avx512_x2(KT_METHOD_BF16);
    if (!x2)
        return KT_OK; /* AVX-512 kernels not built */
    kt__dense *d = kt__calloc(1, sizeof *d);
    if (!d)
        return KT_ERR_NOMEM;
    d->x2 = x2;
    d->x2_fp8 = kt__moe_kernels_avx512_x2(KT_METHOD_FP8);
    d->n_workers = ctx->pool ? kt__pool_n_threads(ctx->pool) : 1;
    ctx->dense = d;
#if KT_HAVE_ONEDNN
    if (!(env && !strcmp(env, "x2")))
        return dn_init(ctx, d);
#endif
    return KT_OK;
}

void kt__dense_free(kt_context *ctx)
{
    kt__dense *d = ctx->dense;
    if (!d)
        return;
#if KT_HAVE_ONEDNN
    dn_free(ctx, d);
#endif
    kt__free(d);
    ctx->dense = NULL;
}

bool kt__dense_linear(kt_context *ctx, const float *x, int32_t T, const kt__mat *W,
                      const float *bias, float *y)
{
    kt__dense *d = ctx->dense;
    if (!d || T <= 0)
        return false;
#if KT_HAVE_ONEDNN
    if (d->dnnl_on && W->pack_state == 1 && T >= KT__DNNL_MIN_T) {
        if (!W->packed) {
            /* first prefill use: pack it (the matrices are the context's) */
            if (dn_pack(d, (kt__mat *)W, 2 * (int64_t)KT__DNNL_CHUNK) < 0)
                kt_clear_error(); /* no memory for the copy: the x2 kernels */
            if (W->packed && !d->logged) {
                d->logged = true;
                kt__log(ctx->rt, KT_LOG_INFO, "engine: dense matrices packed for oneDNN on "
                        "first prefill use, %d slices each", d->n_workers);
            }
        }
        if (W->packed && dn_linear(ctx, x, T, W, bias, y))
            return true;
    }
#endif
    if (W->type == KT_TYPE_BF16)
        return x2_linear(ctx, d->x2, x, T, W, bias, y);
    /* the x2 FP8 kernel reads F32 scales of 128 x 128 blocks, one per block */
    if (W->type == KT_TYPE_F8_E4M3 && d->x2_fp8 && W->scale_type == KT_TYPE_F32 &&
        W->block_rows == 128 && W->block_cols == 128 && W->scale_cols == (W->cols + 127) / 128)
        return x2_linear(ctx, d->x2_fp8, x, T, W, bias, y);
    return false;
}
