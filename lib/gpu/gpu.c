/* The GPU runtime (kt/gpu.h): a context's forward pass on a CUDA device.
 *
 * The engine's context keeps the architecture (hparams), the host weights
 * and the CPU MoE backend; kt_context_use_gpu plans the device memory, uploads
 * the dense weights, the KV cache and the GPU-resident experts, and from then
 * on kt__forward hands each chunk to kt__gpu_forward. Per MoE layer with CPU
 * experts the step is: router on the GPU -> ids, weights and the normed input
 * copied into pinned host buffers -> a host function on the stream submits the
 * CPU experts (kt_moe_submit) -> the GPU experts and the shared expert run
 * meanwhile -> a second host function waits for the CPU -> its partial sum is
 * copied back and added. Everything is stream-ordered and reads the token
 * count and position through pointers, so a decode step is captured once as
 * a CUDA graph and replayed. */
#define _GNU_SOURCE /* sched_getcpu */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "kt/gpu.h"
#include "kt_config.h"
#include "kt_cuda.h"
#include "core/threadpool.h"
#include "gpu/feeder.h"
#include "gpu/mover.h"
#include "gpu/moves.h"
#include "moe/moe_internal.h"

KT__DEFINE_OPTIONS_INIT(kt_gpu_options_init, kt_gpu_options, KT_GPU_OPTIONS_INIT)

int32_t kt_gpu_count(void)
{
    int32_t n = 0;
    char err[256];
    if (!kt__cuda_built() || kt__cuda_device_count(&n, err, sizeof err) < 0)
        return 0;
    return n;
}

kt_status kt_gpu_measure_limits(int32_t device, kt_gpu_limits *out)
{
    if (!out || out->struct_size < sizeof(uint32_t))
        return kt__error(KT_ERR_INVALID_ARG, "kt_gpu_measure_limits: out is NULL or its "
                         "struct_size is unset (use KT_GPU_LIMITS_INIT)");
    kt_gpu_limits r = KT_GPU_LIMITS_INIT;
    int32_t n = kt_gpu_count();
    if (device < 0 || device >= n)
        return kt__error(KT_ERR_UNSUPPORTED, "kt_gpu_measure_limits: no CUDA device %d (%d "
                         "found)", device, n);
#if KT_HAVE_CUDA
    kt__cuda_yardsticks_out y;
    char err[256];
    if (kt__cuda_yardsticks(device, &y, err, sizeof err) < 0)
        return kt__error(KT_ERR_IO, "kt_gpu_measure_limits: device %d: %s", device, err);
    r.hbm_gbs = y.hbm_gbs, r.h2d_gbs = y.h2d_gbs, r.d2h_gbs = y.d2h_gbs;
    r.bf16_tflops = y.bf16_tflops;
#endif
    uint32_t size = out->struct_size;
    memcpy(out, &r, KT_MIN((size_t)size, sizeof r));
    out->struct_size = size;
    return KT_OK;
}

#if !KT_HAVE_CUDA

kt_status kt_context_use_gpu(kt_context *ctx, const kt_gpu_options *opts)
{
    (void)ctx, (void)opts;
    return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: this libkt was built without CUDA "
                     "(meson -Dcuda=enabled)");
}
int32_t kt_context_gpu(const kt_context *ctx) { (void)ctx; return -1; }
int32_t kt_context_gpu_experts(const kt_context *ctx) { (void)ctx; return 0; }
uint64_t kt_context_gpu_bytes(const kt_context *ctx) { (void)ctx; return 0; }
kt_status kt_context_gpu_move_experts(kt_context *ctx, const kt_expert_move *moves,
                                      size_t n_moves)
{
    (void)ctx, (void)moves, (void)n_moves;
    return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: this libkt was built without CUDA "
                     "(meson -Dcuda=enabled)");
}
kt_status kt_context_gpu_move_wait(kt_context *ctx)
{
    (void)ctx;
    return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: this libkt was built without CUDA "
                     "(meson -Dcuda=enabled)");
}
kt_status kt_context_gpu_rebalance(kt_context *ctx, uint32_t every_tokens,
                                   const kt_rebalancer_options *opts)
{
    (void)ctx, (void)every_tokens, (void)opts;
    return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: this libkt was built without CUDA "
                     "(meson -Dcuda=enabled)");
}
void kt_context_gpu_moved(const kt_context *ctx, uint64_t *batches, uint64_t *experts)
{
    (void)ctx;
    if (batches)
        *batches = 0;
    if (experts)
        *experts = 0;
}
void kt__gpu_free(kt_context *ctx) { (void)ctx; }
kt_status kt__gpu_forward(kt_context *ctx, const int32_t *tokens, int32_t T, float *logits,
                          bool all_logits)
{
    (void)ctx, (void)tokens, (void)T, (void)logits, (void)all_logits;
    return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: built without CUDA");
}

#else

typedef kt__cuda_mat gmat;

typedef struct glayer {
    float *attn_norm, *ffn_norm;
    gmat wq, wk, wv, wo;
    float *bq, *bk, *bv, *bo, *q_norm, *k_norm, *sinks;
    gmat wq_a, wq_b, wkv_a, wkv_b;
    float *q_a_norm, *kv_a_norm;
    gmat ffn_gate, ffn_up, ffn_down;
    gmat router, sh_gate, sh_up, sh_down, sh_gate_inp;
    float *router_b, *e_bias;
    gmat *egate, *eup, *edown; /* device tables [E]; data NULL: on the CPU */
    gmat *htab;                /* host copy of the three tables [3][E] (grouped products) */
    bool vec8;                 /* every GPU expert matrix readable 8 columns at a time */
    bool grp_dev;              /* every GPU expert BF16 in 16-byte rows: device-grouped chunks */
    kt__moves_layer mv;        /* which experts sit in which device slot (moves.h) */
    const uint8_t *mask;       /* mv's live mask [E + 1]: 1 = on the GPU (the backend skips it) */
    float *k_cache, *v_cache;
} glayer;

typedef struct cb_arg {
    struct kt__gpu *g;
    int32_t layer;
} cb_arg;

struct kt__gpu {
    kt_context *ctx;
    kt__cuda_rt *rt;
    int32_t device, n_gpu_experts;
    bool counting;            /* planning pass: add up bytes, allocate nothing */
    uint64_t bytes, expert_bytes;
    void **allocs;
    size_t n_allocs, cap_allocs;
    glayer *L;
    gmat tok_embd, lm_head;
    float *out_norm, *inv_freq;
    /* device workspaces for Tm tokens */
    int32_t Tm;
    /* xn: [Tm][H] normed rows, and behind the T rows of a chunk the router's ids
     * [T][k] and weights [T][k] (one copy takes all three to the CPU experts) */
    float *x, *xn, *out, *tmp, *q, *k, *v, *o, *g, *u, *eh, *rlogit, *cq, *kva, *kvb;
    float *logits, *gate1;
    float *qa, *ot;           /* absorbed MLA decode: [n_head][R + rope], [n_head][R] */
    float *attn_work;         /* the split decode attention's partials */
    size_t attn_work_elems;
    int32_t attn_splits;      /* KT_GPU_ATTN_SPLITS (tests): > 0 forces the split count */
    void *staging;            /* cuBLAS: BF16 hi/lo activations, [2][staging_elems] */
    size_t staging_elems;
    void *wstaging;           /* cuBLAS: an FP8 matrix as BF16 hi/lo, [2][wstaging_elems] */
    size_t wstaging_elems, max_f8;
    int32_t gemm_min_t;       /* tokens from which products and experts go grouped/cuBLAS */
    /* grouped experts (chunks of gemm_min_t tokens or more): pairs sorted by expert */
    float *xg, *gu, *gy;      /* [Tm·k][H], [Tm·k][I], [Tm·k][H] */
    int32_t *gperm, *gslot;   /* device [Tm·k]: pair of each sorted row; row of each pair */
    int32_t *gids_h, *gperm_h, *gslot_h, *gcount;
    int32_t *groute;          /* device [2E + 2]: the device-grouped experts' rows and tiles */
    bool group_dev;           /* chunks' experts grouped on the device (KT_GPU_GROUPED=0: off) */
    int32_t *tok, *pos;
    /* pinned host buffers */
    int32_t *tok_h, *pos_h, *T_h;
    float *xn_h, *out_h;      /* xn_h as xn: rows, ids, weights */
    float *logits_h;          /* [V]: one row of logits */
    cb_arg *cb;
    /* decode steps hand their CPU experts over by flags in mapped pinned memory
     * to gate jobs on the MoE workers instead of host functions
     * (lib/gpu/feeder.h; NULL: host functions, KT_GPU_HYBRID=hostfn) */
    kt__feeder *feeder;
    uint32_t *flags_h;        /* [n_layer] go, [n_layer] done, then the fail word */
    int32_t *feed_layers;     /* the MoE layers it serves, in order */
    uint32_t seq;             /* the last flag step's number (pos_h[1] on the device) */
    bool flag_step;           /* this forward's CPU experts go by the flags */
    bool dec_bf16;            /* one-token CPU experts on BF16 activations (decode_act) */
    volatile int cb_status;
    char cb_err[256];
    bool use_graph, graph_ready, graph_failed, absorb, cublas;
    char err[512];
    /* layerwise prefill: the CPU-resident experts of each MoE layer copied into
     * one of two device slots (lw_expert_bytes apart, the parts at lw_off),
     * described for the products by the host tables lw_tab[slot] */
    int32_t lw_tokens;        /* option: > 0 threshold, -1 auto, 0 off */
    bool lw_on;               /* this chunk runs layerwise */
    int32_t lw_cut;           /* it copies experts [n_gpu_experts, lw_cut); the CPU the rest */
    int32_t lw_i;             /* MoE layers done in this chunk */
    void *lw_buf[2];
    gmat *lw_tab[2];
    gmat lw_proto[3];         /* shape and type of a CPU expert's gate, up, down */
    size_t lw_off[6], lw_bytes[6], lw_expert_bytes, lw_f8_elems;
    int32_t *moe_next;        /* [n_layer + 1]: next MoE layer after l ([n_layer]: first) */
    /* device [n_layer][3E]: each MoE layer's tables as a layerwise chunk sees them
     * (its GPU-resident experts and its slot's copies) for the device-grouped
     * products; NULL: the host-sorted path (FP8 / INT4 experts) */
    gmat *lw_dtab;
    /* how the copies read the model's mapping (KT_GPU_LW_COPY): through pinned
     * staging pieces the MoE workers fill (staged, the default: lw_stage, pieces
     * of lw_piece_experts experts), or as it is (pageable: the driver stages on
     * the launching thread) */
    char *lw_stage;
    size_t lw_piece_bytes;
    int32_t lw_piece_experts;
    uint64_t lw_pieces;       /* pieces queued so far (the next one's index) */
    struct lw_seg *lw_segs;   /* [6 · CPU-resident experts]: one layer's copies */
    /* [n_layer][E]: each MoE layer's CPU-resident experts in the order of their
     * places in a slot (the first E - n_gpu_experts entries; expert moves swap
     * one in place of another), and each expert's place there (-1: on the GPU) */
    int32_t *lw_order, *lw_place;
    bool lw_moved;            /* experts moved: no split (it assumes the initial layout) */
    double lw_gbs;            /* one layer's copies timed at setup (GB/s), 0: not */
    double up_bytes, up_s;    /* weights uploaded at setup and the time: host -> device rate */
    /* expert moves copied while steps run (lib/gpu/mover.h): spare[3 * i + role]
     * is spare slot i's gate, up, down (device memory, shaped as every GPU
     * expert's); a started batch waits in mv_* until the forward that finds it
     * landed publishes it */
    gmat *spare;
    int32_t n_spare;
    kt__cuda_mover *cmover;
    kt__mover *mover;
    bool gathering;           /* refill_* add their copies to pieces instead of copying */
    kt__mover_piece *pieces;
    size_t n_pieces, cap_pieces;
    kt_expert_move *mv_batch; /* the started batch, by layer */
    int32_t *mv_slots;
    size_t mv_n;
    uint64_t moved_batches, moved_experts; /* published so far */
    /* the routes the CPU backend sees (its route observer, on a worker): the
     * context's statistics and trace, and kt_context_gpu_rebalance's rebalancer
     * over a placement kept equal to the GPU's */
    int32_t *moe_layer;       /* [MoE index]: the engine layer; NULL: not observed */
    int32_t n_moe_layers;
    kt_placement *rb_place;
    kt_rebalancer *rb;
    kt_expert_move *rb_moves; /* [n_spare] */
    uint32_t rb_every;        /* tokens between plans; 0: off */
    uint64_t rb_seen;         /* tokens routed (the first MoE layer's tasks count them) */
    uint64_t rb_advanced, rb_planned_at;
    double cpu_s, cpu_pairs;  /* CPU experts' time over the routed pairs they served (chunks) */
    /* KT_GPU_TRACE=1: where the time goes, [0] decode steps, [1] larger chunks;
     * logged when the runtime is freed */
    bool trace;
    int phase;
    double tr_submit, tr_fwd[2], tr_cpu[2], tr_block[2];
    int64_t tr_calls[2], tr_tokens[2], tr_layers[2];
    /* the CPU side of each MoE layer split up (the backend's task stamps): submit
     * -> first worker starts (wake), first -> last worker start (spread), first
     * start -> last end (run), last end -> the waiter returns (notify); and the
     * GPU's share between one layer's wait and the next submit (gap) */
    bool tr_stamps;
    double tr_done, tr_wake[2], tr_spread[2], tr_run[2], tr_notify[2], tr_gap[2];
    /* layerwise chunks: calls, tokens, time, and the host's time queuing copies */
    int64_t tr_lw_calls, tr_lw_tokens;
    double tr_lw_fwd, tr_lw_queue, tr_lw_bytes, tr_lw_streamed;
    int64_t tr_gaps[2];
    uint64_t tr_cpus;         /* CPUs the host-function thread submitted from (bit c % 64) */
    int tr_bound;             /* CPUs it was bound to (kt__pool_bind_spare), -1: not bound */
    /* KT_GPU_TRACE=2: device time per phase (events between phases, decode
     * eager with the stream held until a step is queued), [0] decode, [1] chunks */
    bool prof, held;
    int32_t marks;            /* events since the stream was held */
    double pr_ms[2][16];
    int64_t pr_steps[2];
};

/* phases of KT_GPU_TRACE=2; an event after each ends it */
enum { PH_START, PH_EMBED, PH_NORM, PH_QKV, PH_QKPOST, PH_ATTN, PH_WO, PH_FFN, PH_ROUTER,
       PH_SHARED, PH_EXPERTS, PH_CPU_SEND, PH_CPU_WAIT, PH_LMHEAD, PH_N };
static const char *const ph_name[PH_N] = {
    "", "embed", "norms and residual adds", "q/k/v products", "qk norm, rope, cache store",
    "attention", "output product", "dense FFN", "router", "shared expert", "GPU experts",
    "to the CPU experts (copies, submit)", "CPU experts' wait and add", "lm head"};

/* An event after a phase. A held stream is let go after a few hundred
 * operations: a stream whose queue fills blocks the launching thread, and a
 * held one would never drain (the later phases then show the launch rate). */
static void mark(kt__gpu *g, int phase)
{
    if (!g->prof)
        return;
    kt__cuda_prof_mark(g->rt, phase);
    if (g->held && ++g->marks > 150) {
        kt__cuda_release(g->rt);
        g->held = false;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static kt_status lw_layout(kt__gpu *g, int32_t l, int32_t e);
static kt_status lw_dtab_layer(kt__gpu *g, int32_t l, gmat *h);
static kt_status lw_setup(kt__gpu *g);

/* ------------------------------------------------------------- memory --- */

static kt_status cuda_error(kt__gpu *g, const char *what)
{
    return kt__error(KT_ERR_IO, "GPU runtime: %s: %s", what, g->err);
}

/* bytes of device memory (counted in the planning pass, allocated after) */
static void *dalloc(kt__gpu *g, size_t bytes)
{
    bytes = (bytes + 255) & ~(size_t)255;
    g->bytes += bytes;
    if (g->counting)
        return (void *)(uintptr_t)1; /* never dereferenced on the host */
    if (g->n_allocs == g->cap_allocs) {
        size_t cap = g->cap_allocs ? 2 * g->cap_allocs : 256;
        void **a = kt__realloc(g->allocs, cap * sizeof *a);
        if (!a)
            return NULL;
        g->allocs = a;
        g->cap_allocs = cap;
    }
    void *p = kt__cuda_alloc(g->rt, bytes);
    if (p)
        g->allocs[g->n_allocs++] = p;
    return p;
}

static kt_status upload(kt__gpu *g, void **dst, const void *src, size_t bytes)
{
    *dst = NULL;
    if (!src)
        return KT_OK;
    void *p = dalloc(g, bytes);
    if (!p)
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (%zu bytes)", bytes);
    if (!g->counting) {
        double t0 = now_s();
        if (kt__cuda_upload(g->rt, p, src, bytes, g->err, sizeof g->err) < 0)
            return cuda_error(g, "upload");
        g->up_s += now_s() - t0;
        g->up_bytes += (double)bytes;
    }
    *dst = p;
    return KT_OK;
}

static kt_status upload_vec(kt__gpu *g, float **dst, const float *src, int32_t n)
{
    return upload(g, (void **)dst, src, sizeof(float) * (size_t)n);
}

static size_t type_bytes(kt_type t)
{
    return t == KT_TYPE_F32 ? 4 : t == KT_TYPE_BF16 ? 2 : 1;
}

static kt_status upload_mat(kt__gpu *g, gmat *d, const kt__mat *m)
{
    memset(d, 0, sizeof *d);
    if (!m->data)
        return KT_OK;
    d->rows = m->rows, d->cols = m->cols;
    if (m->type == KT_TYPE_F32)
        d->type = KT__CUDA_W_F32;
    else if (m->type == KT_TYPE_BF16)
        d->type = KT__CUDA_W_BF16;
    else if (m->type == KT_TYPE_F8_E4M3)
        d->type = KT__CUDA_W_F8;
    else
        return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: weight type %s", kt_type_name(m->type));
    kt_status st = upload(g, (void **)&d->data, m->data,
                          (size_t)m->rows * m->cols * type_bytes(m->type));
    if (st < 0 || d->type != KT__CUDA_W_F8)
        return st;
    g->max_f8 = KT_MAX(g->max_f8, (size_t)m->rows * m->cols);
    d->block_rows = m->block_rows, d->block_cols = m->block_cols, d->scale_cols = m->scale_cols;
    d->scale_bf16 = m->scale_type == KT_TYPE_BF16;
    size_t srows = (size_t)(m->rows + m->block_rows - 1) / m->block_rows;
    return upload(g, (void **)&d->scale, m->scale,
                  srows * m->scale_cols * type_bytes(m->scale_type));
}

/* Whether a view of compressed-tensors INT4 has a GPU kernel: BF16 or F32
 * scales, groups of a multiple of 8 columns (the kernels read 8 at a time). */
static bool int4_gpu_ok(const kt_tensor_view *v)
{
    return v->storage == KT_STORAGE_INT4_PACKED && v->block_rows == 1 && v->block_cols &&
           v->block_cols % 8 == 0 && v->cols % v->block_cols == 0 &&
           (v->scale_type == KT_TYPE_BF16 || v->scale_type == KT_TYPE_F32) &&
           v->layout == KT_LAYOUT_OUT_IN;
}

/* An INT4 view as a device matrix: the packed words and the group scales. */
static kt_status upload_int4(kt__gpu *g, gmat *d, const kt_tensor_view *v)
{
    memset(d, 0, sizeof *d);
    d->rows = (int32_t)v->rows, d->cols = (int32_t)v->cols, d->type = KT__CUDA_W_I4;
    d->block_rows = 1, d->block_cols = (int32_t)v->block_cols;
    d->scale_cols = (int32_t)(v->cols / v->block_cols);
    d->scale_bf16 = v->scale_type == KT_TYPE_BF16;
    g->max_f8 = KT_MAX(g->max_f8, (size_t)v->rows * v->cols);
    kt_status st = upload(g, (void **)&d->data, v->data, (size_t)v->rows * v->cols / 2);
    if (st < 0)
        return st;
    return upload(g, (void **)&d->scale, v->scale_data,
                  (size_t)v->rows * d->scale_cols * type_bytes((kt_type)v->scale_type));
}

/* An expert matrix from the model's view (BF16, FP8 block or INT4 groups);
 * UNSUPPORTED otherwise. */
static kt_status upload_view(kt__gpu *g, gmat *d, const kt_model *m, int32_t l, kt_role role,
                             int32_t e)
{
    kt_tensor_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    kt_status st = kt_model_tensor(m, (uint32_t)l, role, (uint32_t)e, &v);
    if (st < 0)
        return st;
    kt__mat mat = {(int32_t)v.rows, (int32_t)v.cols, (kt_type)v.type, (void *)v.data, false,
                   v.scale_data, (kt_type)v.scale_type, (int32_t)v.block_rows,
                   (int32_t)v.block_cols, 0, NULL, 0};
    bool bf16 = v.storage == KT_STORAGE_PLAIN && v.type == KT_TYPE_BF16;
    bool fp8 = v.storage == KT_STORAGE_FP8_BLOCK && v.type == KT_TYPE_F8_E4M3 && v.block_rows &&
               v.block_cols;
    if (int4_gpu_ok(&v))
        return upload_int4(g, d, &v);
    if ((!bf16 && !fp8) || v.layout != KT_LAYOUT_OUT_IN)
        return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: %s: expert storage %s has no GPU "
                         "kernel (it stays on the CPU)", v.name,
                         kt_storage_name((kt_storage)v.storage));
    if (fp8)
        mat.scale_cols = (int32_t)((v.cols + v.block_cols - 1) / v.block_cols);
    return upload_mat(g, d, &mat);
}

/* ------------------------------------------------------------ planning --- */

static kt_status upload_layer(kt__gpu *g, int32_t l, glayer *G)
{
    kt_context *ctx = g->ctx;
    const kt__hparams *hp = &ctx->hp;
    const kt__layer *L = &ctx->w.layers[l];
    int32_t H = hp->n_embd, nh = hp->n_head, hd = hp->head_dim;
    kt_status st = KT_OK;
#define TRY(x)               \
    do {                     \
        if ((st = (x)) < 0)  \
            return st;       \
    } while (0)
    TRY(upload_vec(g, &G->attn_norm, L->attn_norm, H));
    TRY(upload_vec(g, &G->ffn_norm, L->ffn_norm, H));
    if (hp->mla) {
        TRY(upload_mat(g, &G->wq, &L->wq));
        TRY(upload_mat(g, &G->wq_a, &L->wq_a));
        TRY(upload_mat(g, &G->wq_b, &L->wq_b));
        TRY(upload_mat(g, &G->wkv_a, &L->wkv_a));
        TRY(upload_mat(g, &G->wkv_b, &L->wkv_b));
        TRY(upload_vec(g, &G->q_a_norm, L->q_a_norm, hp->q_lora_rank));
        TRY(upload_vec(g, &G->kv_a_norm, L->kv_a_norm, hp->kv_lora_rank));
        TRY(upload_mat(g, &G->wo, &L->wo));
    } else {
        int32_t qdim = nh * hd, kvdim = hp->n_head_kv * hd;
        TRY(upload_mat(g, &G->wq, &L->wq));
        TRY(upload_mat(g, &G->wk, &L->wk));
        TRY(upload_mat(g, &G->wv, &L->wv));
        TRY(upload_mat(g, &G->wo, &L->wo));
        TRY(upload_vec(g, &G->bq, L->bq, qdim));
        TRY(upload_vec(g, &G->bk, L->bk, kvdim));
        TRY(upload_vec(g, &G->bv, L->bv, kvdim));
        TRY(upload_vec(g, &G->bo, L->bo, H));
        bool full = hp->qk_norm == KT__QK_NORM_FULL;
        TRY(upload_vec(g, &G->q_norm, L->q_norm, full ? qdim : hd));
        TRY(upload_vec(g, &G->k_norm, L->k_norm, full ? kvdim : hd));
        TRY(upload_vec(g, &G->sinks, L->sinks, nh));
    }
    /* KV cache, F32: GQA keys and values, MLA [c_kv | k_rope] */
    size_t P = (size_t)ctx->n_ctx;
    if (hp->mla) {
        G->k_cache = dalloc(g, sizeof(float) * P * (hp->kv_lora_rank + hp->qk_rope));
    } else {
        G->k_cache = dalloc(g, sizeof(float) * P * hp->n_head_kv * hd);
        G->v_cache = dalloc(g, sizeof(float) * P * hp->n_head_kv * hd);
    }
    if (!G->k_cache || (!hp->mla && !G->v_cache))
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (KV cache)");
    if (!hp->layer_moe[l]) {
        TRY(upload_mat(g, &G->ffn_gate, &L->ffn_gate));
        TRY(upload_mat(g, &G->ffn_up, &L->ffn_up));
        return upload_mat(g, &G->ffn_down, &L->ffn_down);
    }
    int32_t E = hp->n_expert;
    TRY(upload_mat(g, &G->router, &L->router));
    TRY(upload_vec(g, &G->router_b, L->router_b, E));
    TRY(upload_vec(g, &G->e_bias, L->e_bias, E));
    TRY(upload_mat(g, &G->sh_gate, &L->sh_gate));
    TRY(upload_mat(g, &G->sh_up, &L->sh_up));
    TRY(upload_mat(g, &G->sh_down, &L->sh_down));
    TRY(upload_mat(g, &G->sh_gate_inp, &L->sh_gate_inp));
    /* routed experts: the first n_gpu_experts on the device, tables of E entries */
    gmat *tab = kt__calloc((size_t)3 * E, sizeof(gmat));
    if (!tab)
        return KT_ERR_NOMEM;
    for (int32_t e = 0; e < g->n_gpu_experts && st == KT_OK; e++) {
        if (ctx->moe) {
            kt_role rg = KT_ROLE_EXPERT_GATE, ru = KT_ROLE_EXPERT_UP, rd = KT_ROLE_EXPERT_DOWN;
            if ((st = upload_view(g, &tab[e], ctx->model, l, rg, e)) == KT_OK &&
                (st = upload_view(g, &tab[E + e], ctx->model, l, ru, e)) == KT_OK)
                st = upload_view(g, &tab[2 * E + e], ctx->model, l, rd, e);
        } else {
            const kt__expert *x = &L->experts[e];
            if ((st = upload_mat(g, &tab[e], &x->gate)) == KT_OK &&
                (st = upload_mat(g, &tab[E + e], &x->up)) == KT_OK)
                st = upload_mat(g, &tab[2 * E + e], &x->down);
        }
    }
    if (st == KT_OK) {
        void *d[3];
        for (int i = 0; i < 3 && st == KT_OK; i++)
            st = upload(g, &d[i], tab + (size_t)i * E, sizeof(gmat) * E);
        if (st == KT_OK)
            G->egate = d[0], G->eup = d[1], G->edown = d[2];
    }
    G->vec8 = true;
    for (int32_t i = 0; i < 3 * E; i++) {
        const gmat *t = &tab[i];
        if (t->data && (t->cols % 8 || (t->type >= KT__CUDA_W_F8 && (t->block_cols % 8 ||
                                                                    !t->block_rows))))
            G->vec8 = false;
    }
    G->grp_dev = true;
    for (int32_t i = 0; i < 3 * E; i++) {
        const gmat *t = &tab[i];
        if (t->data && (t->type != KT__CUDA_W_BF16 || t->cols % 8 || (uintptr_t)t->data % 16))
            G->grp_dev = false;
    }
    if (st < 0 || g->counting) {
        kt__free(tab);
        return st;
    }
    G->htab = tab;
    /* the first n_gpu_experts in slots 0.., [E] (a folded shared expert) on the GPU */
    if ((st = kt__moves_init(&G->mv, E, g->n_gpu_experts)) < 0)
        return st;
    G->mask = kt__moves_mask(&G->mv);
    if (ctx->moe)
        st = kt_moe_set_expert_mask(ctx->moe, (uint32_t)ctx->moe_index[l], G->mask);
    return st;
#undef TRY
}

static size_t imax(size_t a, size_t b) { return a > b ? a : b; }

/* Everything: weights, caches, workspaces and pinned buffers (or, counting, their bytes). */
static kt_status build(kt__gpu *g)
{
    kt_context *ctx = g->ctx;
    const kt__hparams *hp = &ctx->hp;
    int32_t H = hp->n_embd, V = hp->n_vocab, nh = hp->n_head, Tm = ctx->n_batch;
    kt_status st;
    g->bytes = 0;
    g->max_f8 = 0;
    g->Tm = Tm;
    if (!g->counting && !(g->L = kt__calloc((size_t)hp->n_layer, sizeof *g->L)))
        return KT_ERR_NOMEM;
    if ((st = upload_mat(g, &g->tok_embd, &ctx->w.tok_embd)) < 0 ||
        (st = upload_mat(g, &g->lm_head, &ctx->w.lm_head)) < 0 ||
        (st = upload_vec(g, &g->out_norm, ctx->w.out_norm, H)) < 0 ||
        (st = upload_vec(g, &g->inv_freq, hp->rope_dim >= 2 ? hp->inv_freq : NULL,
                         hp->rope_dim / 2)) < 0)
        return st;
    glayer scratch; /* the planning pass counts into it */
    for (int32_t l = 0; l < hp->n_layer; l++) {
        memset(&scratch, 0, sizeof scratch);
        if ((st = upload_layer(g, l, g->counting ? &scratch : &g->L[l])) < 0)
            return st;
    }
    size_t qk = hp->mla ? (size_t)hp->qk_nope + hp->qk_rope : (size_t)hp->head_dim;
    size_t vd = hp->mla ? (size_t)hp->v_head : (size_t)hp->head_dim;
    size_t kvdim = hp->mla ? 0 : (size_t)hp->n_head_kv * hp->head_dim;
    size_t ff = imax(imax((size_t)hp->n_ff, (size_t)hp->n_ff_shared), (size_t)hp->n_ff_exp);
    size_t k = (size_t)hp->n_expert_used, row = (size_t)hp->kv_lora_rank + hp->qk_rope;
    size_t f = sizeof(float), T = (size_t)Tm;
    float **bufs[] = {&g->x, &g->xn, &g->out, &g->tmp, &g->q, &g->k, &g->v, &g->o, &g->g,
                      &g->u, &g->eh, &g->rlogit, &g->cq, &g->kva, &g->kvb, &g->logits,
                      &g->gate1};
    size_t sizes[] = {T * H, T * (H + 2 * k), T * H, T * H, T * nh * qk, T * kvdim, T * kvdim,
                      T * nh * vd, T * ff, T * ff, T * k * hp->n_ff_exp, T * hp->n_expert,
                      T * hp->q_lora_rank, T * row,
                      hp->mla ? (size_t)ctx->n_ctx * nh * (hp->qk_nope + hp->v_head) : 0,
                      T * V, T};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!(*bufs[i] = dalloc(g, (sizes[i] + 1) * f)))
            return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (workspaces)");
    if (hp->mla && (!(g->qa = dalloc(g, (size_t)nh * (row + 1) * f)) ||
                    !(g->ot = dalloc(g, ((size_t)nh * hp->kv_lora_rank + 1) * f))))
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (workspaces)");
    /* the split decode attention: m, l and the partial sums per (token, head, split) */
    size_t vmax = hp->mla ? imax(vd, (size_t)hp->kv_lora_rank) : vd;
    g->attn_work_elems = (size_t)KT__CUDA_ATTN_SPLIT_T * nh * KT__CUDA_ATTN_SPLITS * (vmax + 2);
    if (!(g->attn_work = dalloc(g, g->attn_work_elems * f)))
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (workspaces)");
    if (g->cublas) {
        /* the widest product input: Tm tokens (or, MLA prefill, n_ctx cached rows of c_kv) */
        size_t cols = imax(imax((size_t)H, ff), imax((size_t)nh * qk, (size_t)nh * vd));
        cols = imax(cols, (size_t)hp->q_lora_rank);
        g->staging_elems = imax(T * cols, hp->mla ? (size_t)ctx->n_ctx * hp->kv_lora_rank : 0);
        g->wstaging_elems = KT_MAX(g->max_f8, g->lw_f8_elems);
        if (!(g->staging = dalloc(g, g->staging_elems * 4)) ||
            !(g->wstaging = dalloc(g, g->wstaging_elems * 4 + 16)))
            return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (workspaces)");
    }
    if (hp->n_expert > 0 && hp->n_ff_exp > 0) {
        size_t pairs = T * k + 1;
        if (!(g->xg = dalloc(g, pairs * H * f)) || !(g->gu = dalloc(g, pairs * hp->n_ff_exp * f)) ||
            !(g->gy = dalloc(g, pairs * H * f)) || !(g->gperm = dalloc(g, pairs * 4)) ||
            !(g->gslot = dalloc(g, pairs * 4)) ||
            !(g->groute = dalloc(g, ((size_t)hp->n_expert * 2 + 2) * 4)))
            return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (workspaces)");
    }
    if (!(g->tok = dalloc(g, T * 4)) || !(g->pos = dalloc(g, 8)))
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of device memory (workspaces)");
    if (g->counting)
        return KT_OK;
    g->tok_h = kt__cuda_host_alloc(T * 4);
    g->pos_h = kt__cuda_host_alloc(8);
    g->T_h = kt__cuda_host_alloc(8);
    g->xn_h = kt__cuda_host_alloc((T * (H + 2 * k) + 1) * f);
    g->out_h = kt__cuda_host_alloc(T * H * f);
    g->logits_h = kt__cuda_host_alloc((size_t)V * f);
    g->cb = kt__calloc((size_t)hp->n_layer, sizeof *g->cb);
    size_t flag_bytes = ((size_t)hp->n_layer * 2 + 1) * sizeof(uint32_t);
    g->flags_h = kt__cuda_host_alloc(flag_bytes);
    g->gids_h = kt__cuda_host_alloc((T * k + 1) * 4);
    g->gperm_h = kt__cuda_host_alloc((T * k + 1) * 4);
    g->gslot_h = kt__cuda_host_alloc((T * k + 1) * 4);
    g->gcount = kt__calloc((size_t)hp->n_expert + 1, 2 * sizeof(int32_t));
    if (!g->tok_h || !g->pos_h || !g->T_h || !g->xn_h || !g->out_h || !g->logits_h ||
        !g->cb || !g->gids_h || !g->gperm_h || !g->gslot_h || !g->gcount || !g->flags_h)
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of pinned host memory");
    memset(g->flags_h, 0, flag_bytes);
    for (int32_t l = 0; l < hp->n_layer; l++)
        g->cb[l] = (cb_arg){g, l};
    return KT_OK;
}

/* kt_context_gpu_rebalance's state freed (also when the runtime goes). */
static void rebalance_off(kt__gpu *g)
{
    kt_rebalancer_free(g->rb);
    kt_placement_free(g->rb_place);
    kt__free(g->rb_moves);
    g->rb = NULL, g->rb_place = NULL, g->rb_moves = NULL;
    g->rb_every = 0;
}

static void gpu_destroy(kt__gpu *g)
{
    if (!g)
        return;
    kt__feeder_free(g->feeder); /* first: its trace counts are logged below */
    g->feeder = NULL;
    if (g->dec_bf16) /* the context's own precision again for a CPU engine after this */
        kt__moe_set_decode_precision(g->ctx->moe, g->ctx->moe_precision);
    for (int i = 0; g->trace && i < 2; i++)
        if (g->tr_calls[i])
            kt__log(g->ctx->rt, KT_LOG_WARN, "GPU runtime trace: %s: %lld calls, %lld tokens, "
                    "%.3f s; CPU experts %.3f s from submit to done over %lld layers, the "
                    "stream blocked on them %.3f s", i ? "chunks" : "decode steps",
                    (long long)g->tr_calls[i], (long long)g->tr_tokens[i], g->tr_fwd[i],
                    g->tr_cpu[i], (long long)g->tr_layers[i], g->tr_block[i]);
    for (int i = 0; g->trace && g->tr_stamps && i < 2; i++)
        if (g->tr_layers[i])
            kt__log(g->ctx->rt, KT_LOG_WARN, "GPU runtime trace: %s, CPU experts per layer: "
                    "wake %.3f ms (submit, or the go flag seen, to the first worker's start), "
                    "starts spread over %.3f ms, run %.3f ms (first start to last end), notify "
                    "%.3f ms (last end to the waiter's return or the done flag); GPU gap %.3f "
                    "ms (one layer's return to the next submit); submitted from CPUs 0x%llx "
                    "(bit c %% 64); the host-function thread bound to %d CPUs",
                    i ? "chunks" : "decode steps", 1e3 * g->tr_wake[i] / g->tr_layers[i],
                    1e3 * g->tr_spread[i] / g->tr_layers[i], 1e3 * g->tr_run[i] / g->tr_layers[i],
                    1e3 * g->tr_notify[i] / g->tr_layers[i],
                    g->tr_gaps[i] ? 1e3 * g->tr_gap[i] / g->tr_gaps[i] : 0.0,
                    (unsigned long long)g->tr_cpus, g->tr_bound);
    if (g->trace && g->tr_lw_calls)
        kt__log(g->ctx->rt, KT_LOG_WARN, "GPU runtime trace: layerwise chunks: %lld calls, "
                "%lld tokens, %.3f s; %.1f of %d CPU-resident experts a layer copied (the CPU "
                "the rest), %.2f GB, the host %.3f s queuing them (%s; setup's one-layer copy "
                "%.1f GB/s)", (long long)g->tr_lw_calls, (long long)g->tr_lw_tokens,
                g->tr_lw_fwd, g->tr_lw_streamed / (double)g->tr_lw_calls,
                g->ctx->hp.n_expert - g->n_gpu_experts, g->tr_lw_bytes / 1e9, g->tr_lw_queue,
                g->lw_stage ? "staged" : "pageable", g->lw_gbs);
    for (int i = 0; g->prof && i < 2; i++) {
        if (!g->pr_steps[i])
            continue;
        char line[1024];
        int n = 0;
        double all = 0;
        for (int p = 1; p < PH_N; p++)
            all += g->pr_ms[i][p];
        for (int p = 1; p < PH_N && n < (int)sizeof line - 80; p++)
            if (g->pr_ms[i][p] > 0)
                n += snprintf(line + n, sizeof line - (size_t)n, "%s%s %.3f", n ? ", " : "",
                              ph_name[p], g->pr_ms[i][p] / (double)g->pr_steps[i]);
        kt__log(g->ctx->rt, KT_LOG_WARN, "GPU runtime phases (KT_GPU_TRACE=2: device time "
                "between events, %s): %s: %lld calls, %.3f ms a call: %s (ms a call)",
                i ? "chunks eager" : "decode eager, each step queued before it runs",
                i ? "chunks" : "decode steps", (long long)g->pr_steps[i],
                all / (double)g->pr_steps[i], line);
    }
    if (g->moe_layer && g->ctx && g->ctx->moe)
        kt__moe_set_route_observer(g->ctx->moe, NULL, NULL);
    rebalance_off(g);
    kt__free(g->moe_layer);
    kt__mover_free(g->mover); /* a batch still copying lands first */
    kt__cuda_mover_free(g->cmover);
    kt__free(g->spare);
    kt__free(g->pieces);
    kt__free(g->mv_batch);
    kt__free(g->mv_slots);
    if (g->rt) {
        char err[64];
        kt__cuda_sync(g->rt, err, sizeof err);
        for (size_t i = 0; i < g->n_allocs; i++)
            kt__cuda_free(g->rt, g->allocs[i]);
    }
    if (g->L && g->ctx) {
        for (int32_t l = 0; l < g->ctx->hp.n_layer; l++) {
            if (g->ctx->moe && g->ctx->moe_index && g->ctx->moe_index[l] >= 0)
                kt_moe_set_expert_mask(g->ctx->moe, (uint32_t)g->ctx->moe_index[l], NULL);
            kt__moves_free(&g->L[l].mv);
            kt__free(g->L[l].htab);
        }
    }
    kt__free(g->L);
    kt__free(g->allocs);
    kt__free(g->cb);
    kt__cuda_host_free(g->tok_h);
    kt__cuda_host_free(g->pos_h);
    kt__cuda_host_free(g->T_h);
    kt__cuda_host_free(g->xn_h);
    kt__cuda_host_free(g->out_h);
    kt__cuda_host_free(g->logits_h);
    kt__cuda_host_free(g->flags_h);
    kt__free(g->feed_layers);
    kt__cuda_host_free(g->gids_h);
    kt__cuda_host_free(g->gperm_h);
    kt__cuda_host_free(g->gslot_h);
    kt__free(g->gcount);
    kt__free(g->lw_segs);
    kt__free(g->lw_order);
    kt__free(g->lw_place);
    kt__cuda_host_free(g->lw_stage);
    kt__free(g->lw_tab[0]);
    kt__free(g->lw_tab[1]);
    kt__free(g->moe_next);
    kt__cuda_rt_free(g->rt);
    kt__free(g);
}

void kt__gpu_free(kt_context *ctx)
{
    if (ctx && ctx->gpu) {
        gpu_destroy(ctx->gpu);
        ctx->gpu = NULL;
    }
}

/* Whether the routed experts' storage has a GPU kernel (BF16, FP8 block). */
static bool experts_gpu_ok(kt_context *ctx)
{
    for (int32_t l = 0; l < ctx->hp.n_layer; l++) {
        if (!ctx->hp.layer_moe[l])
            continue;
        kt_tensor_view v;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        if (kt_model_tensor(ctx->model, (uint32_t)l, KT_ROLE_EXPERT_GATE, 0, &v) < 0)
            return false;
        bool ok = (v.storage == KT_STORAGE_PLAIN && v.type == KT_TYPE_BF16) ||
                  (v.storage == KT_STORAGE_FP8_BLOCK && v.type == KT_TYPE_F8_E4M3) ||
                  int4_gpu_ok(&v);
        if (!ok || v.layout != KT_LAYOUT_OUT_IN) {
            kt__error(KT_ERR_UNSUPPORTED, "%s: expert storage %s has no GPU kernel", v.name,
                      kt_storage_name((kt_storage)v.storage));
            return false;
        }
        return true;
    }
    return true;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static bool feed_submit(void *arg, int32_t layer);
static void feed_served(void *arg, int32_t layer, double t_open);

/* KT_GPU_F_DECODE_BF16, or KT_GPU_DECODE_ACT=bf16 (bf16x2: off, whatever the
 * flag): the CPU experts of one-token steps on the backend's BF16 activations
 * (its fastest; hybrid decode is bound by their run) while chunks keep the
 * context's F32-accurate BF16X2. Only for a backend of this context alone; put
 * back by gpu_destroy. */
static kt_status decode_act(kt__gpu *g, bool flag)
{
    kt_context *ctx = g->ctx;
    const char *a = getenv("KT_GPU_DECODE_ACT");
    if (a && strcmp(a, "bf16") && strcmp(a, "bf16x2"))
        return kt__error(KT_ERR_INVALID_ARG, "GPU runtime: KT_GPU_DECODE_ACT=%s: expected bf16 "
                         "or bf16x2", a);
    if (a ? strcmp(a, "bf16") != 0 : !flag)
        return KT_OK;
    if (ctx->moe_precision == KT_MOE_PREC_DEFAULT || ctx->borrowed || ctx->n_sharers)
        return KT_OK;
    if (kt__moe_set_decode_precision(ctx->moe, KT_MOE_PREC_DEFAULT) < 0) {
        kt__log(ctx->rt, KT_LOG_WARN, "GPU runtime: BF16 decode activations not taken: %s",
                kt_last_error());
        return KT_OK;
    }
    g->dec_bf16 = true;
    return KT_OK;
}

/* The decode's hand-over of the CPU experts by flags (lib/gpu/feeder.h):
 * KT_GPU_HYBRID=gated (the default) or hostfn (host functions, as chunks
 * always use; for comparing). */
static kt_status feeder_start(kt__gpu *g)
{
    const kt__hparams *hp = &g->ctx->hp;
    const char *hy = getenv("KT_GPU_HYBRID");
    if (hy && !strcmp(hy, "hostfn"))
        return KT_OK;
    if (hy && strcmp(hy, "gated"))
        return kt__error(KT_ERR_INVALID_ARG, "GPU runtime: KT_GPU_HYBRID=%s: expected gated or "
                         "hostfn", hy);
    if (!(g->feed_layers = kt__calloc((size_t)hp->n_layer, sizeof(int32_t))))
        return KT_ERR_NOMEM;
    kt__feeder_config fc = {0};
    for (int32_t l = 0; l < hp->n_layer; l++)
        if (hp->layer_moe[l])
            g->feed_layers[fc.n_layers++] = l;
    fc.layers = g->feed_layers;
    fc.go = g->flags_h;
    fc.done = g->flags_h + hp->n_layer;
    fc.submit = feed_submit;
    fc.served = feed_served;
    fc.arg = g;
    fc.pool = kt__moe_backend_pool(g->ctx->moe);
    return fc.pool ? kt__feeder_start(&g->feeder, &fc) : KT_OK;
}

/* Device bytes of a matrix's weights and of its scales (as upload_mat and upload_int4). */
static void gmat_bytes(const gmat *d, size_t *data, size_t *scale)
{
    size_t n = (size_t)d->rows * d->cols;
    *data = d->type == KT__CUDA_W_I4    ? n / 2
            : d->type == KT__CUDA_W_F32 ? n * 4
            : d->type == KT__CUDA_W_BF16 ? n * 2
                                          : n;
    *scale = 0;
    if (d->type == KT__CUDA_W_I4)
        *scale = (size_t)d->rows * d->scale_cols * (d->scale_bf16 ? 2 : 4);
    else if (d->type == KT__CUDA_W_F8)
        *scale = (size_t)((d->rows + d->block_rows - 1) / d->block_rows) * d->scale_cols *
                 (d->scale_bf16 ? 2 : 4);
}

static int mover_copy(void *arg, void *dst, const void *src, size_t bytes, char *err, size_t n)
{
    return kt__cuda_mover_copy(arg, dst, src, bytes, err, n);
}

static int mover_finish(void *arg, char *err, size_t n)
{
    return kt__cuda_mover_finish(arg, err, n);
}

/* n spare expert slots shaped as layer l's expert in slot 0 (a move checks that
 * the slot it leaves has the same shape) and the thread that fills them. */
static kt_status spares_start(kt__gpu *g, int32_t l, int32_t n)
{
    int32_t E = g->ctx->hp.n_expert, e0 = g->L[l].mv.expert_at[0];
    const gmat *tab = g->L[l].htab;
    if (!(g->spare = kt__calloc((size_t)3 * n, sizeof(gmat))))
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory");
    for (int32_t i = 0; i < n; i++)
        for (int r = 0; r < 3; r++) {
            gmat *d = &g->spare[3 * i + r];
            size_t data, scale;
            *d = tab[(size_t)r * E + e0];
            gmat_bytes(d, &data, &scale);
            d->data = dalloc(g, data);
            d->scale = scale ? dalloc(g, scale) : NULL;
            if (!d->data || (scale && !d->scale))
                return kt__error(KT_ERR_DEVICE_NOMEM, "GPU runtime: out of device memory "
                                 "(expert move slots)");
        }
    g->n_spare = n;
    if (kt__cuda_mover_create(&g->cmover, g->device, (size_t)4 << 20, g->err,
                              sizeof g->err) < 0)
        return cuda_error(g, "expert moves");
    kt__mover_ops ops = {mover_copy, mover_finish, g->cmover};
    return kt__mover_create(&g->mover, &ops);
}

/* The CPU backend's route observer (on the worker that starts a layer's task,
 * the ids final): the context's statistics and trace, and the rebalancer. */
static void route_seen(void *arg, uint32_t moe_layer, const int32_t *ids, int32_t T, int32_t k)
{
    kt__gpu *g = arg;
    if (moe_layer >= (uint32_t)g->n_moe_layers)
        return;
    int32_t l = g->moe_layer[moe_layer];
    kt_context *ctx = g->ctx;
    if (ctx->route_stats || ctx->route_trace)
        (void)kt__route_observe(ctx, l, ids, T); /* bad ids: the backend reports them */
    if (g->rb) {
        (void)kt_rebalancer_observe(g->rb, (uint32_t)l, ids, (size_t)T * (size_t)k);
        if (moe_layer == 0)
            g->rb_seen += (uint64_t)T;
    }
}

/* The backend's MoE indices back to engine layers, and the observer. */
static kt_status observe_routes(kt__gpu *g)
{
    kt_context *ctx = g->ctx;
    const kt__hparams *hp = &ctx->hp;
    if (!(g->moe_layer = kt__calloc((size_t)hp->n_layer, sizeof(int32_t))))
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory");
    for (int32_t l = 0; l < hp->n_layer; l++)
        if (ctx->moe_index[l] >= 0 && ctx->moe_index[l] < hp->n_layer) {
            g->moe_layer[ctx->moe_index[l]] = l;
            g->n_moe_layers = KT_MAX(g->n_moe_layers, ctx->moe_index[l] + 1);
        }
    kt__moe_set_route_observer(ctx->moe, route_seen, g);
    return KT_OK;
}

kt_status kt_context_use_gpu(kt_context *ctx, const kt_gpu_options *opts)
{
    kt_gpu_options o = KT_GPU_OPTIONS_INIT;
    if (!ctx)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_use_gpu: ctx is NULL");
    if (ctx->borrowed || ctx->n_sharers > 0)
        return kt__error(KT_ERR_UNSUPPORTED, "kt_context_use_gpu: this context shares its "
                         "weights and MoE backend with others (kt_context_options.share)");
    kt_status rs = kt__options_read(&o, sizeof o, opts, "kt_gpu_options");
    if (rs < 0)
        return rs;
    if (o.flags & ~(KT_GPU_F_NO_GRAPH | KT_GPU_F_MLA_ABSORB | KT_GPU_F_CUBLAS |
                    KT_GPU_F_MLA_NAIVE | KT_GPU_F_NO_CUBLAS | KT_GPU_F_DECODE_BF16))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_use_gpu: unknown flags 0x%x", o.flags);
    if (o.layerwise_tokens < -1)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_use_gpu: layerwise_tokens %d must be "
                         ">= -1", o.layerwise_tokens);
    if (o.reserved)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_use_gpu: reserved must be 0");
    if (o.expert_fraction > 1.0f || o.mem_fraction < 0.0f || o.mem_fraction > 1.0f)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_use_gpu: expert_fraction %g must be "
                         "<= 1 and mem_fraction %g within 0..1", o.expert_fraction,
                         o.mem_fraction);
    const kt__hparams *hp = &ctx->hp;
    if (hp->n_expert > KT__CUDA_MAX_EXPERTS || hp->n_group > 64)
        return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: %d experts (router kernel limit %d)",
                         hp->n_expert, KT__CUDA_MAX_EXPERTS);
    if ((int64_t)ctx->n_ctx * 4 > 200 * 1024)
        return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: n_ctx %d: the attention kernel keeps "
                         "a row of scores in shared memory (at most 51200 positions; lower "
                         "--ctx-size)", ctx->n_ctx);
    if (hp->family == KT__FAM_GPT_OSS && !ctx->moe)
        return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: gpt-oss experts (biases, fused "
                         "[in][out] layout) run only on the CPU MoE backend: use fast precision");
    int32_t n = kt_gpu_count();
    if (o.device < 0 || o.device >= n)
        return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: no CUDA device %d (%d found)",
                         o.device, n);
    kt__gpu_free(ctx);
    kt__gpu *g = kt__calloc(1, sizeof *g);
    if (!g)
        return KT_ERR_NOMEM;
    g->ctx = ctx;
    g->device = o.device;
    g->absorb = hp->mla && !(o.flags & KT_GPU_F_MLA_NAIVE);
    g->cublas = !(o.flags & KT_GPU_F_NO_CUBLAS);
    /* test hook: products of fewer tokens through cuBLAS and grouped experts */
    const char *mt = getenv("KT_GPU_GEMM_MIN_TOKENS");
    g->gemm_min_t = mt && atoi(mt) > 0 ? atoi(mt) : 16;
    /* comparison hook: KT_GPU_GROUPED=0 keeps the host-sorted, per-expert cuBLAS path */
    const char *gd = getenv("KT_GPU_GROUPED");
    g->group_dev = g->cublas && !(gd && !strcmp(gd, "0"));
    const char *sp = getenv("KT_GPU_ATTN_SPLITS");
    g->attn_splits = sp && atoi(sp) > 0 ? atoi(sp) : 0;
    const char *tr = getenv("KT_GPU_TRACE");
    g->trace = tr && *tr && strcmp(tr, "0");
    g->prof = tr && atoi(tr) >= 2;
    g->tr_stamps = g->trace && ctx->moe && kt__moe_stamp_enable(ctx->moe) == KT_OK;
    /* a naive MLA step's kv_b expansion is sized by the position: not replayable */
    g->use_graph = !(o.flags & KT_GPU_F_NO_GRAPH) && (!hp->mla || g->absorb) && !g->prof;
    g->lw_tokens = o.layerwise_tokens;
    kt_status st = KT_OK;
    if (!(g->moe_next = kt__calloc((size_t)hp->n_layer + 1, sizeof(int32_t)))) {
        kt__free(g);
        return KT_ERR_NOMEM;
    }
    if (kt__cuda_rt_create(&g->rt, o.device, g->err, sizeof g->err) < 0) {
        st = cuda_error(g, "device");
        goto fail;
    }
    /* planning: dense part, then one expert's bytes, against the budget */
    uint64_t free_b = 0, total_b = 0;
    kt__cuda_mem_info(g->rt, &free_b, &total_b);
    uint64_t budget = o.mem_limit ? o.mem_limit
                                  : (uint64_t)((double)free_b *
                                               (o.mem_fraction > 0 ? o.mem_fraction : 0.9));
    int32_t E = hp->n_expert, n_moe = 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        n_moe += hp->layer_moe[l];
    bool cpu_experts = ctx->moe != NULL && hp->family != KT__FAM_GPT_OSS;
    if (cpu_experts && !experts_gpu_ok(ctx)) {
        kt__log(ctx->rt, KT_LOG_INFO, "GPU runtime: %s; routed experts stay on the CPU",
                kt_last_error());
        cpu_experts = false;
    }
    g->counting = true;
    g->n_gpu_experts = 0;
    if ((st = build(g)) < 0)
        goto fail;
    uint64_t dense = g->bytes;
    if (E > 0 && n_moe > 0 && (cpu_experts || !ctx->moe)) {
        g->n_gpu_experts = 1;
        if ((st = build(g)) < 0)
            goto fail;
        g->expert_bytes = (g->bytes - dense) / (uint64_t)n_moe;
    }
    int32_t want;
    if (!ctx->moe)
        want = E; /* no CPU backend (f32 precision, engine experts): all on the GPU */
    else if (!cpu_experts)
        want = 0; /* gpt-oss's fused [in][out] or INT4 experts stay with the CPU backend */
    else if (o.expert_fraction < 0)
        want = g->expert_bytes && budget > dense
                   ? (int32_t)KT_MIN((uint64_t)E, (budget - dense) / (g->expert_bytes * n_moe))
                   : 0;
    else
        want = (int32_t)lrintf(o.expert_fraction * (float)E);
    uint64_t need = dense + (uint64_t)want * n_moe * g->expert_bytes;
    if (need > budget) {
        st = kt__error(KT_ERR_NOMEM, "GPU runtime: the plan needs %.2f GiB (weights, KV cache "
                       "of %d positions, workspaces, %d experts per layer at %.1f MiB) but the "
                       "budget is %.2f GiB of %.2f GiB free: lower --gpu-experts or --ctx-size, "
                       "or raise --mem-fraction-static", gib(need), ctx->n_ctx, want,
                       (double)g->expert_bytes / 1048576.0, gib(budget), gib(free_b));
        goto fail;
    }
    /* layerwise prefill: two slots of a layer's CPU-resident experts, if they fit */
    uint64_t lw_bytes = 0;
    int32_t first_moe = -1;
    for (int32_t l = hp->n_layer - 1; l >= 0; l--)
        if (hp->layer_moe[l]) {
            g->moe_next[l] = first_moe;
            first_moe = l;
        }
    g->moe_next[hp->n_layer] = first_moe;
    if (g->lw_tokens && ctx->moe && cpu_experts && want < E && first_moe >= 0) {
        if ((st = lw_layout(g, first_moe, want)) < 0)
            goto fail;
        lw_bytes = 2 * (uint64_t)(E - want) * g->lw_expert_bytes;
        /* and the device-grouped products' tables, [n_layer][3E] */
        uint64_t lw_tabs = (uint64_t)hp->n_layer * 3 * E * sizeof(gmat);
        if (need + lw_bytes + lw_tabs > budget) {
            kt__log(ctx->rt, KT_LOG_INFO, "GPU runtime: layerwise prefill needs %.2f GiB more "
                    "than the budget holds: off", gib(need + lw_bytes + lw_tabs - budget));
            lw_bytes = 0;
            g->lw_f8_elems = 0;
        }
    }
    /* spare slots for expert moves copied while steps run, as many as fit */
    int32_t spares = 0;
    if (o.move_slots >= 0 && cpu_experts && want > 0 && want < E && g->expert_bytes &&
        first_moe >= 0) {
        uint64_t used = need + (lw_bytes ? lw_bytes + (uint64_t)hp->n_layer * 3 * E *
                                                          sizeof(gmat) : 0);
        uint64_t left = budget > used ? budget - used : 0;
        spares = (int32_t)KT_MIN((uint64_t)(o.move_slots ? o.move_slots : 16),
                                 left / g->expert_bytes);
    }
    g->n_gpu_experts = want;
    g->counting = false;
    if ((st = build(g)) < 0)
        goto fail;
    if (spares > 0 && (st = spares_start(g, first_moe, spares)) < 0)
        goto fail;
    if (lw_bytes) {
        size_t slot = (size_t)(lw_bytes / 2);
        for (int i = 0; i < 2; i++) {
            g->lw_buf[i] = dalloc(g, slot);
            g->lw_tab[i] = kt__calloc((size_t)3 * E, sizeof(gmat));
            if (!g->lw_buf[i] || !g->lw_tab[i]) {
                st = kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory (layerwise slots of "
                               "%.2f GiB)", gib(slot));
                goto fail;
            }
        }
        if (kt__cuda_side_enable(g->rt, g->err, sizeof g->err) < 0) {
            st = cuda_error(g, "layerwise copies");
            goto fail;
        }
        if ((st = lw_setup(g)) < 0)
            goto fail;
    }
    if (g->prof && kt__cuda_prof_enable(g->rt, g->err, sizeof g->err) < 0) {
        st = cuda_error(g, "phase timing");
        goto fail;
    }
    /* test hook: KT_GPU_BLAS_MIN_TOKENS moves the dense products' cuBLAS threshold
     * alone, the grouped experts stay (racecheck stops inside cuBLAS's GEMMs) */
    const char *bt = getenv("KT_GPU_BLAS_MIN_TOKENS");
    int32_t blas_min_t = bt && atoi(bt) > 0 ? atoi(bt) : g->gemm_min_t;
    if (g->cublas &&
        kt__cuda_gemm_enable(g->rt, g->staging, g->staging_elems, g->wstaging,
                             g->wstaging_elems, blas_min_t, g->err, sizeof g->err) < 0) {
        st = cuda_error(g, "cuBLAS");
        goto fail;
    }
    if (ctx->moe && want < E && n_moe > 0 && /* some experts stay on the CPU */
        ((st = feeder_start(g)) < 0 ||
         (st = decode_act(g, (o.flags & KT_GPU_F_DECODE_BF16) != 0)) < 0 ||
         (ctx->moe_index && (st = observe_routes(g)) < 0)))
        goto fail;
    /* the attention kernel's shared memory for n_ctx scores, set outside any capture */
    kt__cuda_attn none;
    memset(&none, 0, sizeof none);
    if (kt__cuda_attention(g->rt, &none, ctx->n_ctx, g->err, sizeof g->err) < 0) {
        st = cuda_error(g, "attention setup");
        goto fail;
    }
    kt__log(ctx->rt, KT_LOG_INFO, "GPU runtime: device %d, %.2f GiB planned, %d of %d experts "
            "per layer on the GPU, decode graph %s%s%s%s%s%s", o.device, gib(g->bytes), want, E,
            g->use_graph ? "on" : "off", g->absorb ? ", absorbed MLA decode" : "",
            g->cublas ? ", cuBLAS prefill" : "", g->lw_buf[0] ? ", layerwise prefill" : "",
            g->feeder ? ", decode's CPU experts by flags" : "",
            g->dec_bf16 ? " on BF16 activations" : "");
    if (g->n_spare)
        kt__log(ctx->rt, KT_LOG_INFO, "GPU runtime: %d spare expert slots (%.2f GiB): expert "
                "moves copy while steps run", g->n_spare,
                gib((uint64_t)g->n_spare * g->expert_bytes));
    ctx->gpu = g;
    ctx->n_past = 0;
    return KT_OK;
fail:
    gpu_destroy(g);
    return st;
}

int32_t kt_context_gpu(const kt_context *ctx)
{
    return ctx && ctx->gpu ? ctx->gpu->device : -1;
}

int32_t kt_context_gpu_experts(const kt_context *ctx)
{
    return ctx && ctx->gpu ? ctx->gpu->n_gpu_experts : 0;
}

uint64_t kt_context_gpu_bytes(const kt_context *ctx)
{
    return ctx && ctx->gpu ? ctx->gpu->bytes : 0;
}

/* ------------------------------------------------------ expert moves --- */

/* Copies a host matrix into the device buffers of d (same shape and type). */
/* One host -> device copy of a move: gathered for the mover's thread, or now. */
static kt_status move_copy(kt__gpu *g, void *dst, const void *src, size_t bytes)
{
    if (!g->gathering)
        return kt__cuda_upload(g->rt, dst, src, bytes, g->err, sizeof g->err) < 0
                   ? cuda_error(g, "expert move") : KT_OK;
    kt__mover_piece *p = kt__grow(g->pieces, g->n_pieces, &g->cap_pieces, sizeof *p, 64);
    if (!p)
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory (expert moves)");
    g->pieces = p;
    p[g->n_pieces++] = (kt__mover_piece){dst, src, bytes};
    return KT_OK;
}

static kt_status refill_mat(kt__gpu *g, const gmat *d, const kt__mat *m, const char *what)
{
    if (!d->data || !m->data || d->rows != m->rows || d->cols != m->cols ||
        (m->type == KT_TYPE_F8_E4M3) != (d->type == KT__CUDA_W_F8))
        return kt__error(KT_ERR_INVALID_ARG, "GPU runtime: %s: shape or type differs from the "
                         "slot's (%d x %d)", what, d->rows, d->cols);
    size_t bytes = (size_t)m->rows * m->cols * type_bytes(m->type);
    kt_status st = move_copy(g, (void *)d->data, m->data, bytes);
    if (st < 0 || d->type != KT__CUDA_W_F8)
        return st;
    size_t srows = (size_t)(m->rows + m->block_rows - 1) / m->block_rows;
    return move_copy(g, (void *)d->scale, m->scale,
                     srows * (size_t)d->scale_cols * type_bytes(m->scale_type));
}

/* Expert e's matrix `role` of layer l (0 gate, 1 up, 2 down) into d. */
static kt_status refill_expert(kt__gpu *g, const gmat *d, int32_t l, int role, int32_t e)
{
    kt_context *ctx = g->ctx;
    char what[64];
    snprintf(what, sizeof what, "layer %d expert %d", (int)l, (int)e);
    if (!ctx->moe) {
        const kt__expert *x = &ctx->w.layers[l].experts[e];
        return refill_mat(g, d, role == 0 ? &x->gate : role == 1 ? &x->up : &x->down, what);
    }
    static const kt_role roles[3] = {KT_ROLE_EXPERT_GATE, KT_ROLE_EXPERT_UP,
                                     KT_ROLE_EXPERT_DOWN};
    kt_tensor_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    kt_status st = kt_model_tensor(ctx->model, (uint32_t)l, roles[role], (uint32_t)e, &v);
    if (st < 0)
        return st;
    if (d->type == KT__CUDA_W_I4) {
        /* INT4 groups: the packed words, then the scales */
        if (!int4_gpu_ok(&v) || (int32_t)v.rows != d->rows || (int32_t)v.cols != d->cols ||
            (int32_t)v.block_cols != d->block_cols || !d->data)
            return kt__error(KT_ERR_INVALID_ARG, "GPU runtime: %s: shape or storage differs "
                             "from the slot's (%d x %d INT4)", what, d->rows, d->cols);
        size_t sb = (size_t)d->rows * d->scale_cols * type_bytes((kt_type)v.scale_type);
        if ((st = move_copy(g, (void *)d->data, v.data, (size_t)d->rows * d->cols / 2)) < 0)
            return st;
        return move_copy(g, (void *)d->scale, v.scale_data, sb);
    }
    kt__mat m = {(int32_t)v.rows, (int32_t)v.cols, (kt_type)v.type, (void *)v.data, false,
                 v.scale_data, (kt_type)v.scale_type, (int32_t)v.block_rows,
                 (int32_t)v.block_cols, 0, NULL, 0};
    return refill_mat(g, d, &m, what);
}

static int cmp_move_layer(const void *a, const void *b)
{
    const kt_expert_move *x = a, *y = b;
    return x->layer < y->layer ? -1 : x->layer > y->layer;
}

/* End of the run of moves (sorted by layer) that starts at i: all of one layer. */
static size_t layer_end(const kt_expert_move *mv, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && mv[j].layer == mv[i].layer)
        j++;
    return j;
}

/* A layer's moved experts go live: its device tables from the host copy, then
 * the slot bookkeeping and the CPU backend's mask (one pointer store). */
static kt_status publish_layer(kt__gpu *g, uint32_t l, const kt_expert_move *mv, size_t n,
                               const int32_t *slots)
{
    kt_context *ctx = g->ctx;
    int32_t E = ctx->hp.n_expert;
    glayer *G = &g->L[l];
    gmat *dev[3] = {G->egate, G->eup, G->edown};
    for (int r = 0; r < 3; r++)
        if (kt__cuda_upload(g->rt, dev[r], G->htab + (size_t)r * E, sizeof(gmat) * E, g->err,
                            sizeof g->err) < 0)
            return cuda_error(g, "expert move");
    G->mask = kt__moves_commit(&G->mv, mv, n, slots);
    if (g->lw_order) {
        /* layerwise prefill: each outgoing expert takes the incoming one's place */
        int32_t *order = g->lw_order + (size_t)l * E, *place = g->lw_place + (size_t)l * E;
        for (size_t i = 0; i < n; i++) {
            int32_t p = place[mv[i].expert_in];
            order[p] = (int32_t)mv[i].expert_out;
            place[mv[i].expert_out] = p;
            place[mv[i].expert_in] = -1;
        }
        g->lw_moved = true;
        if (g->lw_dtab) {
            gmat *h = kt__malloc_array((size_t)3 * E, sizeof *h);
            kt_status st = h ? lw_dtab_layer(g, (int32_t)l, h)
                             : kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory");
            kt__free(h);
            if (st < 0)
                return st;
        }
    }
    return ctx->moe ? kt_moe_set_expert_mask(ctx->moe, (uint32_t)ctx->moe_index[l], G->mask)
                    : KT_OK;
}

/* Publishes a started batch once its copies landed (wait: blocks until then):
 * the spare slots holding the incoming experts take the outgoing experts'
 * places in the tables and the outgoing experts' memory becomes the spares.
 * Between steps only, with the GPU idle (nothing reads the old slots after). */
static kt_status publish_moves(kt__gpu *g, bool wait)
{
    if (!g->mv_n)
        return KT_OK;
    kt_status st = KT_OK;
    if (wait)
        st = kt__mover_wait(g->mover);
    else if (!kt__mover_poll(g->mover, &st))
        return KT_OK;
    size_t n = g->mv_n;
    g->mv_n = 0;
    if (st < 0)
        return kt__error_prefix(st, "kt_context_gpu_move_experts: moves dropped");
    if (kt__cuda_sync(g->rt, g->err, sizeof g->err) < 0)
        return cuda_error(g, "expert move");
    int32_t E = g->ctx->hp.n_expert;
    const kt_expert_move *mv = g->mv_batch;
    for (size_t i = 0; i < n && st == KT_OK;) {
        uint32_t l = mv[i].layer;
        size_t j = layer_end(mv, n, i);
        gmat *tab = g->L[l].htab;
        for (size_t q = i; q < j; q++)
            for (int r = 0; r < 3; r++) {
                gmat *in = &tab[(size_t)r * E + mv[q].expert_in];
                gmat *out = &tab[(size_t)r * E + mv[q].expert_out];
                gmat *spare = &g->spare[3 * q + (size_t)r];
                *in = *spare;
                *spare = *out;
                memset(out, 0, sizeof *out);
            }
        st = publish_layer(g, l, mv + i, j - i, g->mv_slots + i);
        i = j;
    }
    if (st == KT_OK)
        g->moved_batches++, g->moved_experts += n;
    return st;
}

/* Whether spare slot q can hold move q's expert: shaped as the slot it leaves. */
static bool spares_fit(const kt__gpu *g, const kt_expert_move *mv, size_t n)
{
    if (!g->mover || n > (size_t)g->n_spare)
        return false;
    int32_t E = g->ctx->hp.n_expert;
    for (size_t q = 0; q < n; q++)
        for (int r = 0; r < 3; r++) {
            const gmat *a = &g->L[mv[q].layer].htab[(size_t)r * E + mv[q].expert_out];
            const gmat *b = &g->spare[3 * q + (size_t)r];
            if (a->rows != b->rows || a->cols != b->cols || a->type != b->type ||
                a->scale_bf16 != b->scale_bf16 || a->block_rows != b->block_rows ||
                a->block_cols != b->block_cols || a->scale_cols != b->scale_cols)
                return false;
        }
    return true;
}

kt_status kt_context_gpu_move_experts(kt_context *ctx, const kt_expert_move *moves,
                                      size_t n_moves)
{
    if (!ctx || (n_moves && !moves))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_gpu_move_experts: ctx and moves are "
                         "required");
    kt__gpu *g = ctx->gpu;
    if (!g)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_gpu_move_experts: the context does "
                         "not run on a GPU (kt_context_use_gpu)");
    if (n_moves == 0)
        return KT_OK;
    /* a batch still copying lands first: the checks below see its placement */
    kt_status st = publish_moves(g, true);
    if (st < 0)
        return st;
    const kt__hparams *hp = &ctx->hp;
    int32_t E = hp->n_expert;
    /* by layer (qsort is not stable: the batch checks do not depend on the order) */
    kt_expert_move *mv = kt__malloc_array(n_moves, sizeof *mv);
    int32_t *slots = kt__malloc_array(n_moves, sizeof *slots);
    st = mv && slots ? KT_OK : kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory");
    if (st == KT_OK) {
        memcpy(mv, moves, n_moves * sizeof *mv);
        qsort(mv, n_moves, sizeof *mv, cmp_move_layer);
    }
    /* check every layer's batch before anything changes */
    for (size_t i = 0; i < n_moves && st == KT_OK;) {
        uint32_t l = mv[i].layer;
        size_t j = layer_end(mv, n_moves, i);
        if (l >= (uint32_t)hp->n_layer || !hp->layer_moe[l] || !g->L[l].htab)
            st = kt__error(KT_ERR_INVALID_ARG, "kt_context_gpu_move_experts: layer %u has no "
                           "routed experts on the GPU", l);
        else if ((st = kt__moves_check(&g->L[l].mv, mv + i, j - i, slots + i)) < 0)
            kt__error_prefix(st, "kt_context_gpu_move_experts: layer %u", l);
        i = j;
    }
    if (st == KT_OK && spares_fit(g, mv, n_moves)) {
        /* into the spares by the mover's thread; published by a later forward */
        g->gathering = true;
        g->n_pieces = 0;
        for (size_t q = 0; q < n_moves && st == KT_OK; q++)
            for (int r = 0; r < 3 && st == KT_OK; r++)
                st = refill_expert(g, &g->spare[3 * q + (size_t)r], (int32_t)mv[q].layer, r,
                                   (int32_t)mv[q].expert_in);
        g->gathering = false;
        if (st == KT_OK && (st = kt__mover_start(g->mover, g->pieces, g->n_pieces)) == KT_OK) {
            kt__free(g->mv_batch);
            kt__free(g->mv_slots);
            g->mv_batch = mv, g->mv_slots = slots, g->mv_n = n_moves;
            return KT_OK;
        }
        kt__free(mv);
        kt__free(slots);
        return st;
    }
    /* no spares for them: into the outgoing experts' memory, now */
    if (st == KT_OK && kt__cuda_sync(g->rt, g->err, sizeof g->err) < 0)
        st = cuda_error(g, "expert move");
    for (size_t i = 0; i < n_moves && st == KT_OK;) {
        uint32_t l = mv[i].layer;
        size_t j = layer_end(mv, n_moves, i);
        gmat *tab = g->L[l].htab;
        /* weights of expert_in into expert_out's buffers, then the table entries */
        for (size_t q = i; q < j && st == KT_OK; q++) {
            int32_t in = (int32_t)mv[q].expert_in, out = (int32_t)mv[q].expert_out;
            for (int r = 0; r < 3 && st == KT_OK; r++)
                st = refill_expert(g, &tab[(size_t)r * E + out], (int32_t)l, r, in);
            for (int r = 0; r < 3 && st == KT_OK; r++) {
                tab[(size_t)r * E + in] = tab[(size_t)r * E + out];
                memset(&tab[(size_t)r * E + out], 0, sizeof(gmat));
            }
        }
        if (st == KT_OK)
            st = publish_layer(g, l, mv + i, j - i, slots + i);
        i = j;
    }
    if (st == KT_OK)
        g->moved_batches++, g->moved_experts += n_moves;
    kt__free(mv);
    kt__free(slots);
    return st;
}

kt_status kt_context_gpu_move_wait(kt_context *ctx)
{
    if (!ctx || !ctx->gpu)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_gpu_move_wait: the context does not "
                         "run on a GPU (kt_context_use_gpu)");
    return publish_moves(ctx->gpu, true);
}

void kt_context_gpu_moved(const kt_context *ctx, uint64_t *batches, uint64_t *experts)
{
    const kt__gpu *g = ctx ? ctx->gpu : NULL;
    if (batches)
        *batches = g ? g->moved_batches : 0;
    if (experts)
        *experts = g ? g->moved_experts : 0;
}

kt_status kt_context_gpu_rebalance(kt_context *ctx, uint32_t every_tokens,
                                   const kt_rebalancer_options *opts)
{
    if (!ctx || !ctx->gpu)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_gpu_rebalance: the context does not "
                         "run on a GPU (kt_context_use_gpu)");
    kt__gpu *g = ctx->gpu;
    rebalance_off(g);
    if (every_tokens == 0)
        return KT_OK;
    if (!g->n_spare || !g->moe_layer)
        return kt__error(KT_ERR_UNSUPPORTED, "kt_context_gpu_rebalance: needs routed experts on "
                         "both the GPU and the CPU and spare slots for the moves "
                         "(kt_gpu_options.move_slots >= 0, room in the budget)");
    kt_status st = publish_moves(g, true);
    if (st < 0)
        return st;
    /* a placement equal to the GPU's: its experts per layer, then each layer's slots */
    const kt__hparams *hp = &ctx->hp;
    uint8_t *moe_layers = kt__calloc((size_t)hp->n_layer, 1);
    if (!moe_layers)
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory");
    for (int32_t l = 0; l < hp->n_layer; l++)
        moe_layers[l] = hp->layer_moe[l] && g->L[l].htab;
    kt_placement_options po = KT_PLACEMENT_OPTIONS_INIT;
    po.strategy = KT_PLACEMENT_UNIFORM;
    po.budget = KT_BUDGET_PER_LAYER;
    po.per_layer = (uint32_t)g->n_gpu_experts;
    st = kt_placement_create(&g->rb_place, (uint32_t)hp->n_layer, (uint32_t)hp->n_expert,
                             moe_layers, &po);
    kt__free(moe_layers);
    for (int32_t l = 0; l < hp->n_layer && st == KT_OK; l++) {
        if (!hp->layer_moe[l] || !g->L[l].htab)
            continue;
        for (int32_t e = 0; e < hp->n_expert && st == KT_OK; e++) {
            int32_t on = g->L[l].mv.slot_of[e] >= 0;
            if (kt_placement_on_gpu(g->rb_place, (uint32_t)l, (uint32_t)e) != on)
                st = kt_placement_set(g->rb_place, (uint32_t)l, (uint32_t)e, on);
        }
    }
    if (st == KT_OK)
        st = kt_rebalancer_create(&g->rb, g->rb_place, NULL, opts);
    if (st == KT_OK && !(g->rb_moves = kt__malloc_array((size_t)g->n_spare,
                                                        sizeof *g->rb_moves)))
        st = kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory");
    if (st < 0) {
        rebalance_off(g);
        return st;
    }
    g->rb_every = every_tokens;
    g->rb_advanced = g->rb_planned_at = g->rb_seen;
    return KT_OK;
}

/* kt_context_gpu_rebalance's turn, between steps: the tokens routed since the
 * last step decay the history; every rb_every tokens, with no batch copying,
 * the rebalancer's best moves start (copied while the next steps run). */
static kt_status rebalance_step(kt__gpu *g)
{
    uint64_t seen = g->rb_seen;
    if (seen > g->rb_advanced) {
        kt_rebalancer_advance(g->rb, seen - g->rb_advanced);
        g->rb_advanced = seen;
    }
    if (g->mv_n || seen - g->rb_planned_at < g->rb_every)
        return KT_OK;
    g->rb_planned_at = seen;
    size_t n = 0;
    kt_status st = kt_rebalancer_plan(g->rb, g->rb_moves, (size_t)g->n_spare, &n);
    if (st < 0 || n == 0)
        return st;
    st = kt_context_gpu_move_experts(g->ctx, g->rb_moves, n);
    if (st == KT_ERR_INVALID_ARG) {
        /* a plan the placement refuses costs this plan, not the step */
        kt__log(g->ctx->rt, KT_LOG_WARN, "GPU runtime: rebalancing skipped a plan: %s",
                kt_last_error());
        return KT_OK;
    }
    if (st < 0)
        return st;
    return kt_rebalancer_apply(g->rb, g->rb_moves, n);
}

/* ------------------------------------------------------------- forward --- */

/* chunks from which the CPU experts' time per routed pair is measured */
#define LW_RATE_MIN_T 128

/* The runtime a host-function thread was last bound for. */
static _Thread_local const kt__gpu *bound_for;

/* A layer's CPU experts could start at t_open (trace: the GPU's gap). */
static void cpu_opened(kt__gpu *g, double t_open)
{
    g->tr_submit = t_open;
    if (g->trace) {
        int cpu = sched_getcpu();
        if (cpu >= 0)
            g->tr_cpus |= UINT64_C(1) << (cpu % 64);
        if (g->tr_done > 0) {
            g->tr_gap[g->phase] += g->tr_submit - g->tr_done;
            g->tr_gaps[g->phase]++;
        }
    }
}

/* Queues layer `layer`'s CPU experts (the rows, ids and weights in xn_h). */
static void cpu_submit(kt__gpu *g, int32_t layer)
{
    kt_context *ctx = g->ctx;
    kt_moe_io io = KT_MOE_IO_INIT;
    io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
    io.n_tokens = g->T_h;
    io.top_k = (uint32_t)ctx->hp.n_expert_used;
    /* the router's ids and weights came over with the rows, right behind them */
    size_t rows = (size_t)*g->T_h * (size_t)ctx->hp.n_embd;
    size_t pairs = (size_t)*g->T_h * (size_t)ctx->hp.n_expert_used;
    io.x = g->xn_h;
    io.ids = (const int32_t *)(g->xn_h + rows);
    io.w = g->xn_h + rows + pairs;
    io.out = g->out_h;
    if (g->lw_on) {
        /* a layerwise chunk that left the CPU experts from lw_cut on: the ones
         * copied to the GPU hidden from the backend */
        int32_t *ids = (int32_t *)(g->xn_h + rows);
        for (size_t i = 0; i < pairs; i++)
            if (ids[i] < g->lw_cut)
                ids[i] = -1;
    }
    if (kt_moe_submit(ctx->moe, (uint32_t)ctx->moe_index[layer], &io) < 0 && !g->cb_status) {
        snprintf(g->cb_err, sizeof g->cb_err, "%s", kt_last_error());
        g->cb_status = -1;
    }
}

/* CUDA host thread: queue this layer's CPU experts */
static void submit_cpu(void *p)
{
    cb_arg *a = p;
    kt__gpu *g = a->g;
    if (bound_for != g) {
        /* CUDA's thread inherits the CPU mask of the thread that started it (an
         * application or an OpenMP runtime may have pinned that one to a single
         * CPU, a worker's): moved off the workers' cores once, so that its waits
         * never steal time from a pinned worker the others then wait for */
        struct kt_pool *pool = kt__moe_backend_pool(g->ctx->moe);
        g->tr_bound = pool ? kt__pool_bind_spare(pool) : -1;
        bound_for = g;
    }
    cpu_opened(g, now_s());
    cpu_submit(g, a->layer);
}

/* Counts of a layer's CPU experts that ended by t1, waited for from t0. */
static void cpu_account(kt__gpu *g, double t0, double t1)
{
    if (*g->T_h >= LW_RATE_MIN_T) {
        /* the CPU's time per routed pair, for the layerwise decision (chunks whose
         * experts see several tokens each: a few tokens' cost is the weights' read) */
        const kt__hparams *hp = &g->ctx->hp;
        int32_t first = g->lw_on ? g->lw_cut : g->n_gpu_experts;
        g->cpu_s += t1 - g->tr_submit;
        g->cpu_pairs += (double)*g->T_h * hp->n_expert_used * (double)(hp->n_expert - first) /
                        hp->n_expert;
    }
    if (g->trace) {
        g->tr_block[g->phase] += t1 - t0;
        g->tr_cpu[g->phase] += t1 - g->tr_submit;
        g->tr_layers[g->phase]++;
        double first = 0, last = 0, end = 0;
        if (g->tr_stamps && kt__moe_task_stamps(g->ctx->moe, &first, &last, &end)) {
            g->tr_wake[g->phase] += first - g->tr_submit;
            g->tr_spread[g->phase] += last - first;
            g->tr_run[g->phase] += end - first;
            g->tr_notify[g->phase] += t1 - end;
        }
        g->tr_done = t1;
    }
}

/* The backend's error of the tasks since the last call, kept for the caller. */
static void cpu_errors(kt__gpu *g)
{
    if (kt_moe_wait(g->ctx->moe, 0) < 0 && !g->cb_status) {
        snprintf(g->cb_err, sizeof g->cb_err, "%s", kt_last_error());
        g->cb_status = -1;
    }
}

/* A flag step whose hand-over was cut short: an error for the caller. */
static void cpu_cut(kt__gpu *g)
{
    if (!g->cb_status) {
        snprintf(g->cb_err, sizeof g->cb_err, "the hand-over to the CPU experts was cut short "
                 "(the step failed, or the MoE workers' queue was busy)");
        g->cb_status = -1;
    }
}

/* CUDA host thread: block the stream until the CPU experts are done */
static void wait_cpu(void *p)
{
    cb_arg *a = p;
    double t0 = now_s();
    cpu_errors(a->g);
    cpu_account(a->g, t0, now_s());
}

/* The feeder's jobs (lib/gpu/feeder.h): queue a layer's CPU experts, no wait */
static bool feed_submit(void *arg, int32_t layer)
{
    kt__gpu *g = arg;
    cpu_submit(g, layer);
    return !g->cb_status;
}

/* A feeder job, once the layer's done word is written: its counts (nothing
 * waited: the flags have no blocked host thread) */
static void feed_served(void *arg, int32_t layer, double t_open)
{
    (void)layer;
    kt__gpu *g = arg;
    cpu_opened(g, t_open);
    double t = now_s();
    cpu_account(g, t, t);
}

/* out[T][H] = down(act(gate x, up x)); with next_norm, then the residual add and
 * that norm: g->x += out; g->xn = RMSNorm(g->x) */
static void ffn(kt__gpu *g, const float *x, int32_t T, const gmat *gate, const gmat *up,
                const gmat *down, float *out, const float *next_norm)
{
    const kt__hparams *hp = &g->ctx->hp;
    int32_t I = gate->rows, H = hp->n_embd;
    const kt__cuda_mat *W[2] = {gate, up};
    const float *B[2] = {NULL, NULL};
    float *Y[2] = {g->g, g->u};
    const int32_t YS[2] = {I, I};
    kt__cuda_linear_n(g->rt, x, T, H, 2, W, B, Y, YS);
    kt__cuda_act(g->rt, g->g, g->u, (size_t)T * I, hp->gptoss_act, hp->act_alpha,
                 hp->act_limit);
    if (next_norm)
        kt__cuda_linear_add_norm(g->rt, g->g, T, I, down, NULL, out, g->x, g->xn, next_norm,
                                 hp->rms_eps);
    else
        kt__cuda_linear(g->rt, g->g, T, I, down, NULL, out, H, 0);
}

/* The attention's output product, then the residual add and the FFN's norm:
 * x += o Woᵀ + b; xn = RMSNorm(x) */
static void wo_add_norm(kt__gpu *g, int32_t l, int32_t T, int32_t cols)
{
    const glayer *G = &g->L[l];
    kt__cuda_linear_add_norm(g->rt, g->o, T, cols, &G->wo, G->bo, g->out, g->x, g->xn,
                             G->ffn_norm, g->ctx->hp.rms_eps);
}

static kt_status attn_gqa(kt__gpu *g, int32_t l, int32_t T)
{
    const kt__hparams *hp = &g->ctx->hp;
    const glayer *G = &g->L[l];
    int32_t H = hp->n_embd, nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
    int32_t qdim = nh * hd, kvdim = nkv * hd;
    kt__cuda_rt *rt = g->rt;
    /* q, k, v: one launch on the own kernels (small T), else three products */
    const kt__cuda_mat *W[3] = {&G->wq, &G->wk, &G->wv};
    const float *B[3] = {G->bq, G->bk, G->bv};
    float *Y[3] = {g->q, g->k, g->v};
    const int32_t YS[3] = {qdim, kvdim, kvdim};
    if (hp->qk_norm != KT__QK_NORM_FULL) {
        /* per-head norms, rope and the cache rows: one launch, for one token
         * folded into the products' */
        bool head = hp->qk_norm == KT__QK_NORM_HEAD;
        kt__cuda_qk_post p = {g->q, g->k, g->v, T, nh, nkv, hd, qdim, kvdim,
                              head ? G->q_norm : NULL, head ? G->k_norm : NULL, hp->rms_eps,
                              hp->rope_attn_factor, hp->rope_dim, hp->rope_interleave,
                              hp->rope_dim >= 2 ? g->inv_freq : NULL, g->pos, G->k_cache,
                              G->v_cache};
        int post = kt__cuda_qkv_post(rt, g->xn, T, H, W, B, Y, YS, &p);
        mark(g, PH_QKV);
        if (post)
            kt__cuda_qk_post_run(rt, &p);
    } else {
        kt__cuda_linear_n(rt, g->xn, T, H, 3, W, B, Y, YS);
        mark(g, PH_QKV);
        kt__cuda_rmsnorm(rt, g->q, g->q, T, qdim, qdim, qdim, G->q_norm, hp->rms_eps);
        kt__cuda_rmsnorm(rt, g->k, g->k, T, kvdim, kvdim, kvdim, G->k_norm, hp->rms_eps);
        kt__cuda_rope(rt, g->q, T, nh, qdim, hd, 0, hp->rope_dim, hp->rope_interleave,
                      g->inv_freq, hp->rope_attn_factor, g->pos);
        kt__cuda_rope(rt, g->k, T, nkv, kvdim, hd, 0, hp->rope_dim, hp->rope_interleave,
                      g->inv_freq, hp->rope_attn_factor, g->pos);
        kt__cuda_store_rows(rt, g->k, T, kvdim, kvdim, G->k_cache, kvdim, g->pos);
        kt__cuda_store_rows(rt, g->v, T, kvdim, kvdim, G->v_cache, kvdim, g->pos);
    }
    mark(g, PH_QKPOST);
    kt__cuda_attn a;
    memset(&a, 0, sizeof a);
    a.q = g->q, a.T = T, a.n_head = nh, a.q_st = qdim, a.q_sh = hd;
    a.ka = G->k_cache, a.ka_dim = hd, a.ka_sp = kvdim, a.ka_sh = hd, a.group = nh / nkv;
    a.v = G->v_cache, a.v_dim = hd, a.v_sp = kvdim, a.v_sh = hd;
    a.o = g->o, a.o_st = qdim, a.o_sh = hd;
    a.window = hp->layer_sliding && hp->layer_sliding[l] ? hp->sliding_window : 0;
    a.scale = hp->attn_scale, a.sinks = G->sinks, a.pos0 = g->pos;
    a.work = g->attn_work, a.work_elems = g->attn_work_elems, a.splits = g->attn_splits;
    a.rows_final = 1;
    a.tc = g->ctx->precision == KT_PRECISION_FAST;
    if (kt__cuda_attention(rt, &a, g->ctx->n_ctx, g->err, sizeof g->err) < 0)
        return cuda_error(g, "attention");
    mark(g, PH_ATTN);
    wo_add_norm(g, l, T, qdim);
    mark(g, PH_WO);
    return KT_OK;
}

/* MLA: naive (k_nope and v of every cached position expanded through kv_b) or, for a
 * decode step with KT_GPU_F_MLA_ABSORB, absorbed (kv_b folded into q and o). */
static kt_status attn_mla(kt__gpu *g, int32_t l, int32_t T, int32_t P)
{
    const kt__hparams *hp = &g->ctx->hp;
    const glayer *G = &g->L[l];
    int32_t H = hp->n_embd, nh = hp->n_head, nope = hp->qk_nope, rd = hp->qk_rope;
    int32_t vd = hp->v_head, R = hp->kv_lora_rank, qk = nope + rd, row = R + rd;
    int32_t kvb_rows = nope + vd, ql = hp->q_lora_rank;
    kt__cuda_rt *rt = g->rt;
    if (ql > 0) {
        kt__cuda_linear(rt, g->xn, T, H, &G->wq_a, NULL, g->cq, ql, 0);
        kt__cuda_rmsnorm(rt, g->cq, g->cq, T, ql, ql, ql, G->q_a_norm, hp->rms_eps);
        kt__cuda_linear(rt, g->cq, T, ql, &G->wq_b, NULL, g->q, nh * qk, 0);
    } else {
        kt__cuda_linear(rt, g->xn, T, H, &G->wq, NULL, g->q, nh * qk, 0);
    }
    kt__cuda_linear(rt, g->xn, T, H, &G->wkv_a, NULL, g->kva, row, 0);
    kt__cuda_rmsnorm(rt, g->kva, g->kva, T, R, row, row, G->kv_a_norm, hp->rms_eps);
    kt__cuda_rope(rt, g->kva, T, 1, row, 0, R, hp->rope_dim, hp->rope_interleave, g->inv_freq,
                  hp->rope_attn_factor, g->pos);
    kt__cuda_rope(rt, g->q, T, nh, nh * qk, qk, nope, hp->rope_dim, hp->rope_interleave,
                  g->inv_freq, hp->rope_attn_factor, g->pos);
    kt__cuda_store_rows(rt, g->kva, T, row, row, G->k_cache, row, g->pos);
    kt__cuda_attn a;
    memset(&a, 0, sizeof a);
    if (g->absorb && T == 1) {
        /* q̃ = W_ukᵀ q_nope; s_j = scale · (q̃·c_j + q_rope·k_rope_j); õ = Σ p_j c_j; o = W_uv õ */
        kt__cuda_mla_absorb_q(rt, g->q, T, nh, nope, rd, &G->wkv_b, g->qa);
        a.q = g->qa, a.T = T, a.n_head = nh, a.q_st = nh * row, a.q_sh = row;
        a.ka = G->k_cache, a.ka_dim = R, a.ka_sp = row, a.ka_sh = 0, a.group = 1;
        a.kb = G->k_cache + R, a.kb_dim = rd, a.kb_sp = row, a.kb_sh = 0;
        a.v = G->k_cache, a.v_dim = R, a.v_sp = row, a.v_sh = 0;
        a.o = g->ot, a.o_st = nh * R, a.o_sh = R;
        a.scale = hp->attn_scale, a.pos0 = g->pos;
        a.work = g->attn_work, a.work_elems = g->attn_work_elems, a.splits = g->attn_splits;
        a.rows_final = 1;
        mark(g, PH_QKV);
        if (kt__cuda_attention(rt, &a, g->ctx->n_ctx, g->err, sizeof g->err) < 0)
            return cuda_error(g, "attention");
        mark(g, PH_ATTN);
        kt__cuda_mla_absorb_o(rt, g->ot, T, nh, nope, vd, &G->wkv_b, g->o);
        wo_add_norm(g, l, T, nh * vd);
        mark(g, PH_WO);
        return KT_OK;
    }
    /* kvb[P][nh][nope + v] = c_kv · W_kvbᵀ over every cached position */
    kt__cuda_linear(rt, G->k_cache, P, row, &G->wkv_b, NULL, g->kvb, nh * kvb_rows, 0);
    a.q = g->q, a.T = T, a.n_head = nh, a.q_st = nh * qk, a.q_sh = qk;
    a.ka = g->kvb, a.ka_dim = nope, a.ka_sp = nh * kvb_rows, a.ka_sh = kvb_rows, a.group = 1;
    a.kb = G->k_cache + R, a.kb_dim = rd, a.kb_sp = row, a.kb_sh = 0;
    a.v = g->kvb + nope, a.v_dim = vd, a.v_sp = nh * kvb_rows, a.v_sh = kvb_rows;
    a.o = g->o, a.o_st = nh * vd, a.o_sh = vd;
    a.scale = hp->attn_scale, a.pos0 = g->pos;
    a.work = g->attn_work, a.work_elems = g->attn_work_elems, a.splits = g->attn_splits;
    a.tc = g->ctx->precision == KT_PRECISION_FAST;
    mark(g, PH_QKV);
    if (kt__cuda_attention(rt, &a, g->ctx->n_ctx, g->err, sizeof g->err) < 0)
        return cuda_error(g, "attention");
    mark(g, PH_ATTN);
    wo_add_norm(g, l, T, nh * vd);
    mark(g, PH_WO);
    return KT_OK;
}

/* The router's ids and weights of a chunk of T tokens: behind its normed rows */
static int32_t *route_ids(const kt__gpu *g, int32_t T)
{
    return (int32_t *)(g->xn + (size_t)T * g->ctx->hp.n_embd);
}

static float *route_w(const kt__gpu *g, int32_t T)
{
    const kt__hparams *hp = &g->ctx->hp;
    return g->xn + (size_t)T * (hp->n_embd + hp->n_expert_used);
}

/* The GPU experts of a chunk of many tokens, grouped: the (token, expert) pairs
 * sorted by expert on the host (one sync per layer), each expert's rows gathered
 * and multiplied as one product per projection (cuBLAS from gemm_min_t rows),
 * the results weighted back into out in expert order per token. */
static kt_status experts_grouped(kt__gpu *g, int32_t l, int32_t T, const gmat *tab, int slot)
{
    const kt__hparams *hp = &g->ctx->hp;
    const glayer *G = &g->L[l];
    bool all = slot >= 0; /* layerwise: every expert is on the GPU for this chunk */
    int32_t H = hp->n_embd, I = hp->n_ff_exp, k = hp->n_expert_used, E = hp->n_expert;
    int32_t n = T * k;
    kt__cuda_rt *rt = g->rt;
    kt__cuda_copy_async(rt, g->gids_h, route_ids(g, T), sizeof(int32_t) * n);
    if (kt__cuda_sync(rt, g->err, sizeof g->err) < 0)
        return cuda_error(g, "experts");
    /* counting sort of the GPU pairs by expert: cnt[e], first row off[e] */
    int32_t *cnt = g->gcount, *off = g->gcount + E + 1;
    memset(cnt, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int32_t i = 0; i < n; i++) {
        int32_t e = g->gids_h[i];
        if (e >= 0 && e < E && (all ? tab[e].data != NULL : G->mask[e]))
            cnt[e]++;
    }
    int32_t P = 0;
    for (int32_t e = 0; e < E; e++) {
        off[e] = P;
        P += cnt[e];
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t e = g->gids_h[i];
        if (e >= 0 && e < E && (all ? tab[e].data != NULL : G->mask[e])) {
            g->gperm_h[off[e]] = i;
            g->gslot_h[i] = off[e]++;
        } else {
            g->gslot_h[i] = -1;
        }
    }
    if (all)
        kt__cuda_side_fence(rt, slot, KT__CUDA_MAIN_WAIT_COPIED);
    if (P == 0) {
        if (all)
            kt__cuda_side_fence(rt, slot, KT__CUDA_MAIN_FREED);
        return KT_OK;
    }
    kt__cuda_copy_async(rt, g->gperm, g->gperm_h, sizeof(int32_t) * P);
    kt__cuda_copy_async(rt, g->gslot, g->gslot_h, sizeof(int32_t) * n);
    kt__cuda_gather_rows(rt, g->xn, H, g->gperm, k, P, H, g->xg);
    const gmat *gate = tab, *up = tab + E, *down = tab + 2 * E;
    for (int32_t e = 0, r = 0; e < E; r += cnt[e], e++) {
        if (!cnt[e])
            continue;
        kt__cuda_linear(rt, g->xg + (size_t)r * H, cnt[e], H, &gate[e], NULL,
                        g->eh + (size_t)r * I, I, 0);
        kt__cuda_linear(rt, g->xg + (size_t)r * H, cnt[e], H, &up[e], NULL,
                        g->gu + (size_t)r * I, I, 0);
    }
    kt__cuda_act(rt, g->eh, g->gu, (size_t)P * I, hp->gptoss_act, hp->act_alpha,
                 hp->act_limit);
    for (int32_t e = 0, r = 0; e < E; r += cnt[e], e++)
        if (cnt[e])
            kt__cuda_linear(rt, g->eh + (size_t)r * I, cnt[e], I, &down[e], NULL,
                            g->gy + (size_t)r * H, H, 0);
    kt__cuda_combine(rt, g->out, T, H, k, g->gy, g->gslot, route_w(g, T));
    if (all)
        kt__cuda_side_fence(rt, slot, KT__CUDA_MAIN_FREED);
    return KT_OK;
}

/* The GPU experts of a chunk grouped on the device (kt__cuda_experts_grouped:
 * the pairs sorted there, three launches for all experts, no host sync), from
 * the layer's own tables or, layerwise, from the device tables tab [3][E];
 * false when that path does not apply and experts_grouped has to run them. */
static bool experts_grouped_dev(kt__gpu *g, int32_t l, int32_t T, const gmat *tab)
{
    const kt__hparams *hp = &g->ctx->hp;
    const glayer *G = &g->L[l];
    int32_t E = hp->n_expert;
    if (!g->group_dev || (!tab && (!G->grp_dev || !G->egate)))
        return false;
    kt__cuda_group_args a;
    memset(&a, 0, sizeof a);
    if (tab)
        a.gate = tab, a.up = tab + E, a.down = tab + 2 * (size_t)E;
    else
        a.gate = G->egate, a.up = G->eup, a.down = G->edown;
    a.x = g->xn, a.x_stride = hp->n_embd;
    a.ids = route_ids(g, T), a.w = route_w(g, T);
    a.T = T, a.H = hp->n_embd, a.I = hp->n_ff_exp, a.k = hp->n_expert_used, a.E = hp->n_expert;
    a.oai = hp->gptoss_act, a.alpha = hp->act_alpha, a.limit = hp->act_limit;
    a.route = g->groute, a.perm = g->gperm, a.slot = g->gslot;
    a.e_end = tab ? g->lw_cut : 0;
    a.h = g->eh, a.y = g->gy, a.out = g->out;
    return kt__cuda_experts_grouped(g->rt, &a) == 0;
}

/* CPU-resident expert e's part r (gate, up, down) as layerwise `slot` holds it */
static gmat lw_entry(const kt__gpu *g, int slot, int32_t place, int r)
{
    char *base = (char *)g->lw_buf[slot] + (size_t)place * g->lw_expert_bytes;
    gmat t = g->lw_proto[r];
    t.data = base + g->lw_off[2 * r];
    if (t.type == KT__CUDA_W_F8 || t.type == KT__CUDA_W_I4)
        t.scale = base + g->lw_off[2 * r + 1];
    return t;
}

/* One part of a CPU-resident expert to copy: slot offset, source, bytes */
typedef struct lw_seg {
    size_t off;
    const void *src;
    size_t bytes;
} lw_seg;

/* A staging piece's share of the MoE workers: the segments' bytes within slot
 * offsets [lo, hi), split evenly between the workers, copied from the model's
 * mapping into the pinned piece dst (which mirrors [lo, hi) of the slot). */
typedef struct lw_stage_job {
    const lw_seg *seg;
    size_t n_seg, lo, hi;
    char *dst;
    int n_workers;
} lw_stage_job;

static void stage_job(void *ctx, int tid)
{
    const lw_stage_job *j = ctx;
    size_t span = j->hi - j->lo;
    size_t a0 = j->lo + span * (size_t)tid / (size_t)j->n_workers;
    size_t a1 = j->lo + span * (size_t)(tid + 1) / (size_t)j->n_workers;
    for (size_t i = 0; i < j->n_seg; i++) {
        const lw_seg *sg = &j->seg[i];
        size_t s0 = KT_MAX(sg->off, a0), s1 = KT_MIN(sg->off + sg->bytes, a1);
        if (s0 < s1)
            memcpy(j->dst + (s0 - j->lo), (const char *)sg->src + (s0 - sg->off), s1 - s0);
    }
}

/* The segments of one layer (n, in slot order) through the pinned staging
 * pieces: the MoE workers copy a piece's experts from the model's mapping,
 * then the piece goes to the slot on the side stream while they fill the
 * next; a piece is refilled once its copy has read it. */
static kt_status lw_staged(kt__gpu *g, int slot, size_t n)
{
    kt__cuda_rt *rt = g->rt;
    struct kt_pool *pool = kt__moe_backend_pool(g->ctx->moe);
    size_t eb = g->lw_expert_bytes;
    char *base = g->lw_buf[slot];
    size_t si = 0;
    int32_t n_copied = g->lw_cut - g->n_gpu_experts;
    for (int32_t p0 = 0; p0 < n_copied; p0 += g->lw_piece_experts) {
        int32_t p1 = KT_MIN(p0 + g->lw_piece_experts, n_copied);
        size_t lo = (size_t)p0 * eb, hi = (size_t)p1 * eb;
        size_t s1 = si;
        while (s1 < n && g->lw_segs[s1].off < hi)
            s1++;
        int piece = (int)(g->lw_pieces++ % KT__CUDA_STAGES);
        char *stage = g->lw_stage + (size_t)piece * g->lw_piece_bytes;
        if (kt__cuda_side_stage(rt, piece, KT__CUDA_STAGE_WAIT) < 0)
            return kt__error(KT_ERR_IO, "GPU runtime: layerwise staging: a copy failed");
        lw_stage_job j = {g->lw_segs + si, s1 - si, lo, hi, stage, kt__pool_n_threads(pool)};
        kt__pool_run(pool, stage_job, &j);
        if (kt__cuda_side_copy(rt, base + lo, stage, hi - lo) < 0 ||
            kt__cuda_side_stage(rt, piece, KT__CUDA_STAGE_QUEUED) < 0)
            return kt__error(KT_ERR_IO, "GPU runtime: layerwise staging: a copy failed");
        si = s1;
    }
    return KT_OK;
}

/* Layerwise prefill: queue the copies of MoE layer l's CPU-resident experts
 * [n_gpu_experts, lw_cut) into `slot` on the side stream (after the main
 * stream freed it) and describe them in lw_tab[slot], next to the layer's
 * GPU-resident ones: through the pinned staging pieces (lw_stage), or straight
 * from the model's mapping (pageable: the driver stages). */
static kt_status lw_copy(kt__gpu *g, int32_t l, int slot)
{
    const kt__hparams *hp = &g->ctx->hp;
    int32_t E = hp->n_expert;
    kt__cuda_rt *rt = g->rt;
    gmat *tab = g->lw_tab[slot];
    double t0 = g->trace ? now_s() : 0;
    memcpy(tab, g->L[l].htab, sizeof(gmat) * 3 * (size_t)E);
    const kt_role roles[3] = {KT_ROLE_EXPERT_GATE, KT_ROLE_EXPERT_UP, KT_ROLE_EXPERT_DOWN};
    const char *base = g->lw_buf[slot];
    size_t n = 0;
    const int32_t *order = g->lw_order + (size_t)l * E;
    for (int32_t place = 0; place < g->lw_cut - g->n_gpu_experts; place++) {
        int32_t e = order[place];
        for (int r = 0; r < 3; r++) {
            kt_tensor_view v;
            memset(&v, 0, sizeof v);
            v.struct_size = sizeof v;
            kt_status st = kt_model_tensor(g->ctx->model, (uint32_t)l, roles[r], (uint32_t)e, &v);
            if (st < 0)
                return st;
            const gmat *p = &g->lw_proto[r];
            if ((int32_t)v.rows != p->rows || (int32_t)v.cols != p->cols ||
                (size_t)v.nbytes != g->lw_bytes[2 * r])
                return kt__error(KT_ERR_FORMAT, "GPU runtime: %s: shape or size differs from "
                                 "the other experts' (layerwise prefill)", v.name);
            gmat *t = &tab[(size_t)r * E + e];
            *t = lw_entry(g, slot, place, r);
            if (t->scale && !v.scale_data)
                return kt__error(KT_ERR_FORMAT, "GPU runtime: %s: no scales (layerwise "
                                 "prefill)", v.name);
            g->lw_segs[n++] = (lw_seg){(size_t)((const char *)t->data - base), v.data,
                                       g->lw_bytes[2 * r]};
            if (t->scale)
                g->lw_segs[n++] = (lw_seg){(size_t)((const char *)t->scale - base),
                                           v.scale_data, g->lw_bytes[2 * r + 1]};
        }
    }
    kt__cuda_side_fence(rt, slot, KT__CUDA_SIDE_WAIT_FREED);
    kt_status st = KT_OK;
    if (g->lw_stage) {
        st = lw_staged(g, slot, n);
    } else {
        for (size_t i = 0; i < n && st == KT_OK; i++)
            if (kt__cuda_side_copy(rt, (char *)g->lw_buf[slot] + g->lw_segs[i].off,
                                   g->lw_segs[i].src, g->lw_segs[i].bytes) < 0)
                st = kt__error(KT_ERR_IO, "GPU runtime: layerwise copy of layer %d failed", l);
    }
    kt__cuda_side_fence(rt, slot, KT__CUDA_SIDE_COPIED);
    if (g->trace) {
        g->tr_lw_queue += now_s() - t0;
        g->tr_lw_bytes += (double)(g->lw_cut - g->n_gpu_experts) * g->lw_expert_bytes;
    }
    return st;
}

/* One CPU-resident expert's parts as the slots hold them (from layer l, expert e):
 * for each of gate, up, down its data then its scales, 256-byte aligned. */
static kt_status lw_layout(kt__gpu *g, int32_t l, int32_t e)
{
    const kt_role roles[3] = {KT_ROLE_EXPERT_GATE, KT_ROLE_EXPERT_UP, KT_ROLE_EXPERT_DOWN};
    size_t off = 0;
    for (int r = 0; r < 3; r++) {
        kt_tensor_view v;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        kt_status st = kt_model_tensor(g->ctx->model, (uint32_t)l, roles[r], (uint32_t)e, &v);
        if (st < 0)
            return st;
        gmat *p = &g->lw_proto[r];
        memset(p, 0, sizeof *p);
        p->rows = (int32_t)v.rows, p->cols = (int32_t)v.cols;
        size_t scale = 0;
        if (v.storage == KT_STORAGE_FP8_BLOCK && v.type == KT_TYPE_F8_E4M3 && v.block_rows &&
            v.block_cols) {
            p->type = KT__CUDA_W_F8;
            p->block_rows = (int32_t)v.block_rows, p->block_cols = (int32_t)v.block_cols;
            p->scale_cols = (int32_t)((v.cols + v.block_cols - 1) / v.block_cols);
            p->scale_bf16 = v.scale_type == KT_TYPE_BF16;
            g->lw_f8_elems = KT_MAX(g->lw_f8_elems, (size_t)v.rows * v.cols);
            scale = (size_t)((v.rows + v.block_rows - 1) / v.block_rows) * p->scale_cols *
                    type_bytes((kt_type)v.scale_type);
        } else if (v.storage == KT_STORAGE_PLAIN && v.type == KT_TYPE_BF16) {
            p->type = KT__CUDA_W_BF16;
        } else if (int4_gpu_ok(&v)) {
            p->type = KT__CUDA_W_I4;
            p->block_rows = 1, p->block_cols = (int32_t)v.block_cols;
            p->scale_cols = (int32_t)(v.cols / v.block_cols);
            p->scale_bf16 = v.scale_type == KT_TYPE_BF16;
            g->lw_f8_elems = KT_MAX(g->lw_f8_elems, (size_t)v.rows * v.cols);
            scale = (size_t)v.rows * p->scale_cols * type_bytes((kt_type)v.scale_type);
        } else {
            return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime: %s: no GPU kernel for this "
                             "storage (layerwise prefill)", v.name);
        }
        g->lw_bytes[2 * r] = (size_t)v.nbytes;
        g->lw_bytes[2 * r + 1] = scale;
        g->lw_off[2 * r] = off;
        off += (g->lw_bytes[2 * r] + 255) & ~(size_t)255;
        g->lw_off[2 * r + 1] = off;
        off += (scale + 255) & ~(size_t)255;
    }
    g->lw_expert_bytes = off;
    return KT_OK;
}

/* MoE layer l's row of the device-grouped products' tables (h: room for one):
 * its GPU-resident experts, and its CPU-resident ones at their places in the
 * slot the layer uses (MoE layers alternate between the two). */
static kt_status lw_dtab_layer(kt__gpu *g, int32_t l, gmat *h)
{
    const kt__hparams *hp = &g->ctx->hp;
    int32_t E = hp->n_expert, slot = 0;
    for (int32_t i = 0; i < l; i++)
        slot ^= hp->layer_moe[i] != 0;
    size_t n = (size_t)3 * E;
    memcpy(h, g->L[l].htab, sizeof(gmat) * n);
    for (int32_t p = 0; p < E - g->n_gpu_experts; p++)
        for (int r = 0; r < 3; r++)
            h[(size_t)r * E + g->lw_order[(size_t)l * E + p]] = lw_entry(g, slot, p, r);
    if (kt__cuda_upload(g->rt, g->lw_dtab + (size_t)l * n, h, sizeof(gmat) * n, g->err,
                        sizeof g->err) < 0)
        return cuda_error(g, "layerwise tables");
    return KT_OK;
}

/* Layerwise prefill's setup once the slots exist: the device tables of the
 * device-grouped products (BF16 experts), the CPU-resident experts' pages
 * locked, and one layer's copies timed (the rate `auto` weighs the CPU's time
 * against). */
static kt_status lw_setup(kt__gpu *g)
{
    const kt__hparams *hp = &g->ctx->hp;
    int32_t E = hp->n_expert;
    size_t n = (size_t)3 * E;
    /* the CPU-resident experts' places: n_gpu_experts .. E - 1 in order */
    g->lw_order = kt__malloc_array((size_t)hp->n_layer * E, sizeof(int32_t));
    g->lw_place = kt__malloc_array((size_t)hp->n_layer * E, sizeof(int32_t));
    if (!g->lw_order || !g->lw_place)
        return kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory (layerwise tables)");
    for (int32_t l = 0; l < hp->n_layer; l++)
        for (int32_t e = 0; e < E; e++) {
            g->lw_order[(size_t)l * E + e] = e < E - g->n_gpu_experts ? g->n_gpu_experts + e : -1;
            g->lw_place[(size_t)l * E + e] = e < g->n_gpu_experts ? -1 : e - g->n_gpu_experts;
        }
    bool dev = g->group_dev;
    for (int r = 0; r < 3; r++)
        dev = dev && g->lw_proto[r].type == KT__CUDA_W_BF16 && g->lw_proto[r].cols % 8 == 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        dev = dev && (!hp->layer_moe[l] || g->L[l].grp_dev);
    if (dev) {
        gmat *h = kt__malloc_array(n, sizeof *h);
        g->lw_dtab = dalloc(g, sizeof(gmat) * n * (size_t)hp->n_layer);
        if (!h || !g->lw_dtab) {
            kt__free(h);
            return kt__error(KT_ERR_NOMEM, "GPU runtime: out of memory (layerwise tables)");
        }
        kt_status st = KT_OK;
        for (int32_t l = 0; l < hp->n_layer && st == KT_OK; l++)
            if (hp->layer_moe[l])
                st = lw_dtab_layer(g, l, h);
        kt__free(h);
        if (st < 0)
            return st;
    }
    int32_t N = E - g->n_gpu_experts;
    if (!(g->lw_segs = kt__malloc_array((size_t)6 * N + 1, sizeof *g->lw_segs)))
        return KT_ERR_NOMEM;
    const char *cm = getenv("KT_GPU_LW_COPY");
    struct kt_pool *pool = kt__moe_backend_pool(g->ctx->moe);
    kt_status st = KT_OK;
    if (!(cm && !strcmp(cm, "pageable")) && pool) {
        /* pieces of about 32 MB, whole experts */
        g->lw_piece_experts = (int32_t)KT_MAX((size_t)1, ((size_t)32 << 20) / g->lw_expert_bytes);
        g->lw_piece_experts = KT_MIN(g->lw_piece_experts, N);
        g->lw_piece_bytes = (size_t)g->lw_piece_experts * g->lw_expert_bytes;
        g->lw_stage = kt__cuda_host_alloc(KT__CUDA_STAGES * g->lw_piece_bytes);
        if (!g->lw_stage)
            kt__log(g->ctx->rt, KT_LOG_INFO, "GPU runtime: layerwise prefill: no pinned staging "
                    "(%zu bytes); the driver stages the copies", KT__CUDA_STAGES *
                    g->lw_piece_bytes);
    }
    /* timed the second time (the first one also maps the pages in) */
    g->lw_cut = E;
    double t0 = 0;
    for (int i = 0; i < 2; i++) {
        t0 = now_s();
        if ((st = lw_copy(g, g->moe_next[hp->n_layer], 0)) < 0)
            return st;
        kt__cuda_side_fence(g->rt, 0, KT__CUDA_MAIN_WAIT_COPIED);
        if (kt__cuda_sync(g->rt, g->err, sizeof g->err) < 0)
            return cuda_error(g, "layerwise copies");
    }
    double bytes = (double)(E - g->n_gpu_experts) * g->lw_expert_bytes, s = now_s() - t0;
    g->lw_gbs = s > 0 ? bytes / s / 1e9 : 0;
    g->tr_lw_queue = g->tr_lw_bytes = 0;
    kt__log(g->ctx->rt, g->trace ? KT_LOG_WARN : KT_LOG_INFO, "GPU runtime: layerwise "
            "prefill: a layer's %.2f GB of CPU-resident experts copied in %.2f ms (%.1f GB/s, "
            "%s), %s products", bytes / 1e9, 1e3 * s, g->lw_gbs,
            g->lw_stage ? "staged" : "pageable", g->lw_dtab ? "device-grouped" : "host-sorted");
    return KT_OK;
}

/* x += MoE(xn); xn = RMSNorm(x) with next_norm (the add and the norm folded into
 * the last launch before them where that applies) */
static kt_status moe(kt__gpu *g, int32_t l, int32_t T, const float *next_norm)
{
    kt_context *ctx = g->ctx;
    const kt__hparams *hp = &ctx->hp;
    const glayer *G = &g->L[l];
    int32_t H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    kt__cuda_rt *rt = g->rt;
    bool cpu = ctx->moe && g->n_gpu_experts < E && (!g->lw_on || g->lw_cut < E);
    int32_t kind = hp->router == KT__ROUTER_SOFTMAX_TOPK    ? KT__CUDA_ROUTER_SOFTMAX_TOPK
                   : hp->router == KT__ROUTER_SIGMOID_BIAS ? KT__CUDA_ROUTER_SIGMOID_BIAS
                                                            : KT__CUDA_ROUTER_TOPK_SOFTMAX;
    int32_t renorm = hp->norm_topk || hp->family == KT__FAM_MIXTRAL ||
                     hp->family == KT__FAM_MINIMAX_M2;
    /* with every expert on the GPU and no shared expert the expert kernels come
     * next and may select the top-k themselves */
    kt__cuda_router_desc r = {kind, E, k, hp->n_group, hp->topk_group, renorm, hp->routed_scale,
                              G->e_bias, !cpu && g->n_gpu_experts > 0 && !G->sh_gate.data};
    int32_t *ids = route_ids(g, T);
    float *w = route_w(g, T);
    if (kt__cuda_router_gemv(rt, &r, g->xn, &G->router, G->router_b, g->rlogit, T, ids, w)) {
        kt__cuda_linear(rt, g->xn, T, H, &G->router, G->router_b, g->rlogit, E, 0);
        kt__cuda_router(rt, &r, g->rlogit, T, ids, w);
    }
    mark(g, PH_ROUTER);
    if (cpu && g->flag_step) {
        /* rows, ids and weights written into pinned memory by one kernel, then
         * the step's number into the layer's go word: the feeder takes it */
        kt__cuda_host_signal(rt, g->xn_h, g->xn, (size_t)T * (H + 2 * k), &g->flags_h[l],
                             g->pos + 1);
        mark(g, PH_CPU_SEND);
    } else if (cpu) {
        /* CPU experts: rows, ids and weights (contiguous) to pinned memory in one
         * copy, started from the stream */
        kt__cuda_copy_async(rt, g->xn_h, g->xn, sizeof(float) * (size_t)T * (H + 2 * k));
        kt__cuda_host_fn(rt, submit_cpu, &g->cb[l]);
        mark(g, PH_CPU_SEND);
    }
    /* the per-pair kernels write out themselves when no shared expert did */
    bool pairs = !g->lw_on && g->n_gpu_experts > 0 && T < g->gemm_min_t;
    /* meanwhile: shared expert and the GPU experts */
    if (G->sh_gate.data) {
        if (G->sh_gate_inp.data) {
            ffn(g, g->xn, T, &G->sh_gate, &G->sh_up, &G->sh_down, g->tmp, NULL);
            kt__cuda_linear(rt, g->xn, T, H, &G->sh_gate_inp, NULL, g->gate1, 1, 0);
            kt__cuda_zero(rt, g->out, (size_t)T * H);
            kt__cuda_add(rt, g->out, g->tmp, T, H, g->gate1);
        } else {
            ffn(g, g->xn, T, &G->sh_gate, &G->sh_up, &G->sh_down, g->out, NULL);
        }
    } else if (!pairs) {
        kt__cuda_zero(rt, g->out, (size_t)T * H);
    }
    mark(g, PH_SHARED);
    if (g->lw_on) {
        /* layerwise: every expert on the GPU, the next MoE layer's copy queued behind */
        int slot = g->lw_i % 2;
        bool dev = false;
        if (g->lw_dtab) {
            kt__cuda_side_fence(rt, slot, KT__CUDA_MAIN_WAIT_COPIED);
            dev = experts_grouped_dev(g, l, T, g->lw_dtab + (size_t)l * 3 * E);
            if (dev)
                kt__cuda_side_fence(rt, slot, KT__CUDA_MAIN_FREED);
        }
        kt_status st = dev ? KT_OK : experts_grouped(g, l, T, g->lw_tab[slot], slot);
        if (st < 0)
            return st;
        g->lw_i++;
        int32_t next = g->moe_next[l];
        if (next >= 0 && (st = lw_copy(g, next, g->lw_i % 2)) < 0)
            return st;
    } else if (g->n_gpu_experts > 0 && T >= g->gemm_min_t) {
        kt_status st = experts_grouped_dev(g, l, T, NULL) ? KT_OK
                                                     : experts_grouped(g, l, T, G->htab, -1);
        if (st < 0)
            return st;
    }
    bool normed = false;
    if (pairs) {
        /* without CPU experts the products' last blocks add and norm */
        kt__cuda_experts_args a = {G->egate, G->eup, G->edown, g->xn, ids, w, g->eh,
                                   g->out, T, H, hp->n_ff_exp, k, hp->gptoss_act,
                                   hp->act_alpha, hp->act_limit, G->vec8,
                                   G->sh_gate.data == NULL, cpu ? NULL : g->x,
                                   cpu ? NULL : g->xn, next_norm, hp->rms_eps};
        normed = kt__cuda_experts(rt, &a) == 0 && !cpu;
    }
    mark(g, PH_EXPERTS);
    if (cpu) {
        if (g->flag_step)
            kt__cuda_host_await(rt, &g->flags_h[hp->n_layer + l], g->pos + 1,
                                &g->flags_h[2 * hp->n_layer]);
        else
            kt__cuda_host_fn(rt, wait_cpu, &g->cb[l]);
        const float *part = g->out_h; /* a few rows: read from pinned memory (mapped) */
        if (T >= g->gemm_min_t) {
            kt__cuda_copy_async(rt, g->tmp, g->out_h, sizeof(float) * T * H);
            part = g->tmp;
        }
        /* x += out + the CPU's partial; xn = RMSNorm(x) */
        kt__cuda_add_rmsnorm2(rt, g->x, g->out, part, g->xn, T, H, next_norm, hp->rms_eps);
        mark(g, PH_CPU_WAIT);
    } else if (!normed) {
        kt__cuda_add_rmsnorm(rt, g->x, g->out, g->xn, T, H, next_norm, hp->rms_eps);
        mark(g, PH_NORM);
    }
    return KT_OK;
}

/* The launches of one forward over T tokens (P = positions after it). */
static kt_status enqueue(kt__gpu *g, int32_t T, int32_t P, bool all_logits)
{
    kt_context *ctx = g->ctx;
    const kt__hparams *hp = &ctx->hp;
    int32_t H = hp->n_embd, V = hp->n_vocab;
    kt__cuda_rt *rt = g->rt;
    kt_status st;
    kt__cuda_copy_async(rt, g->tok, g->tok_h, sizeof(int32_t) * T);
    kt__cuda_copy_async(rt, g->pos, g->pos_h, 2 * sizeof(int32_t)); /* position, step */
    if (g->lw_on) {
        g->lw_i = 0;
        if ((st = lw_copy(g, g->moe_next[hp->n_layer], 0)) < 0)
            return st;
    }
    mark(g, PH_START);
    kt__cuda_embed(rt, &g->tok_embd, g->tok, T, g->x);
    mark(g, PH_EMBED);
    /* each residual add runs with the next norm: x += out; xn = RMSNorm(x) */
    kt__cuda_rmsnorm(rt, g->x, g->xn, T, H, H, H,
                     hp->n_layer > 0 ? g->L[0].attn_norm : g->out_norm, hp->rms_eps);
    mark(g, PH_NORM);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const glayer *G = &g->L[l];
        /* x += Attn(RMSNorm(x)) */
        /* (the attention's output product adds into x and norms it) */
        st = hp->mla ? attn_mla(g, l, T, P) : attn_gqa(g, l, T);
        if (st < 0)
            return st;
        /* x += FFN(RMSNorm(x)), and the next layer's norm */
        const float *next = l + 1 < hp->n_layer ? g->L[l + 1].attn_norm : g->out_norm;
        if (hp->layer_moe[l]) {
            if ((st = moe(g, l, T, next)) < 0)
                return st;
        } else {
            ffn(g, g->xn, T, &G->ffn_gate, &G->ffn_up, &G->ffn_down, g->out, next);
            mark(g, PH_FFN);
        }
    }
    int32_t rows = all_logits ? T : 1;
    kt__cuda_linear(rt, g->xn + (size_t)(T - rows) * H, rows, H, &g->lm_head, NULL, g->logits,
                    V, 0);
    if (rows == 1 && g->logits_h)
        kt__cuda_copy_async(rt, g->logits_h, g->logits, sizeof(float) * (size_t)V);
    mark(g, PH_LMHEAD);
    if (kt__cuda_check(rt, g->err, sizeof g->err) < 0)
        return cuda_error(g, "launch");
    return KT_OK;
}

/* Whether this chunk of T tokens runs layerwise, and which CPU-resident experts
 * it copies in: layerwise when the CPU would take longer over the chunk's
 * experts of a layer than copying them in (both measured), or from the explicit
 * threshold. With both rates measured and the device-grouped products, the
 * CPU keeps the share of the experts that balances its time against the
 * copies of the rest ([lw_cut, E): ids below lw_cut hidden from it), unless
 * KT_GPU_LW_SPLIT=0. */
static void lw_plan(kt__gpu *g, int32_t T)
{
    const kt__hparams *hp = &g->ctx->hp;
    int32_t E = hp->n_expert, N = E - g->n_gpu_experts;
    g->lw_on = false;
    g->lw_cut = E;
    if (!g->lw_buf[0] || T < 2)
        return;
    bool measured = g->cpu_pairs > 0 && g->up_s > 0;
    /* per CPU-resident expert of a layer: the CPU's time over this chunk's pairs,
     * and the copy (the rate timed at setup, else the weights' upload) */
    double cpu = measured ? (double)T * hp->n_expert_used / E * (g->cpu_s / g->cpu_pairs) : 0;
    double rate = g->lw_gbs > 0 ? 1e9 * g->lw_gbs : g->up_bytes / g->up_s;
    double copy = measured ? (double)g->lw_expert_bytes / rate : 0;
    if (g->lw_tokens > 0)
        g->lw_on = T >= g->lw_tokens;
    else if (measured)
        g->lw_on = cpu > copy;
    const char *sp = getenv("KT_GPU_LW_SPLIT");
    /* test hook: KT_GPU_LW_STREAM=n copies n of them, the CPU the rest */
    const char *fs = getenv("KT_GPU_LW_STREAM");
    /* (not with staged copies: the MoE workers fill the staging pieces) */
    bool split = g->lw_on && g->lw_dtab && !g->lw_stage && !g->lw_moved;
    if (split && fs && atoi(fs) > 0) {
        g->lw_cut = g->n_gpu_experts + KT_MIN(N, atoi(fs));
    } else if (split && measured && !(sp && !strcmp(sp, "0"))) {
        /* n streamed: n · copy = (N - n) · cpu */
        int32_t n = (int32_t)ceil((double)N * cpu / (cpu + copy));
        g->lw_cut = g->n_gpu_experts + KT_MIN(N, KT_MAX(n, 1));
    }
}

kt_status kt__gpu_forward(kt_context *ctx, const int32_t *tokens, int32_t T, float *logits,
                          bool all_logits)
{
    kt__gpu *g = ctx->gpu;
    if (T > g->Tm)
        return kt__error(KT_ERR_INVALID_ARG, "GPU runtime: %d tokens exceed the chunk %d", T,
                         g->Tm);
    /* expert moves whose copies landed go live between steps */
    kt_status mst = publish_moves(g, false);
    if (mst == KT_OK && g->rb)
        mst = rebalance_step(g);
    if (mst < 0)
        return mst;
    double t_start = g->trace ? now_s() : 0;
    g->tr_done = 0; /* gaps are counted within a forward */
    g->phase = T > 1;
    lw_plan(g, T);
    memcpy(g->tok_h, tokens, sizeof(int32_t) * T);
    *g->pos_h = ctx->n_past;
    *g->T_h = T;
    g->cb_status = 0;
    /* one token: the CPU experts by flags to the feeder (the graph captures the
     * flag kernels; each step's number goes to the device with the position) */
    g->flag_step = g->feeder && T == 1 && !g->lw_on;
    if (g->flag_step) {
        g->seq = g->seq + 1 ? g->seq + 1 : 1;
        g->pos_h[1] = (int32_t)g->seq;
    }
    kt_status st;
    /* decode: capture once, replay (the graph reads token and position from pinned memory) */
    if (T == 1 && g->use_graph && !g->graph_failed && !all_logits) {
        if (!g->graph_ready) {
            if (kt__cuda_capture_begin(g->rt, g->err, sizeof g->err) < 0) {
                g->graph_failed = true;
            } else {
                st = enqueue(g, 1, ctx->n_past + 1, false);
                int cap = kt__cuda_capture_end(g->rt, g->err, sizeof g->err);
                if (st < 0)
                    return st;
                if (cap < 0) {
                    kt__log(ctx->rt, KT_LOG_WARN, "GPU runtime: decode graph capture failed "
                            "(%s); decode runs eagerly", g->err);
                    g->graph_failed = true;
                } else {
                    g->graph_ready = true;
                }
            }
        }
        if (g->graph_ready) {
            if (g->flag_step && !kt__feeder_step(g->feeder, g->seq))
                cpu_cut(g);
            if (kt__cuda_graph_launch(g->rt, g->err, sizeof g->err) < 0) {
                if (g->flag_step)
                    kt__feeder_finish(g->feeder, true);
                return cuda_error(g, "graph");
            }
            goto finish;
        }
    }
    {
        /* KT_GPU_TRACE=2: a step queued whole before the device starts it */
        /* not on the first two steps: their kernels' first launches load code */
        g->held = g->prof && T < g->gemm_min_t && !g->lw_on && g->pr_steps[0] >= 2 &&
                  kt__cuda_hold(g->rt) == 0;
        g->marks = 0;
        if (g->flag_step && !kt__feeder_step(g->feeder, g->seq))
            cpu_cut(g);
        st = enqueue(g, T, ctx->n_past + T, all_logits);
        if (g->held)
            kt__cuda_release(g->rt);
        g->held = false;
        if (st < 0) {
            if (g->flag_step) {
                char err[64];
                kt__cuda_sync(g->rt, err, sizeof err); /* what was queued, done */
                kt__feeder_finish(g->feeder, true);
            }
            return st;
        }
    }
finish:
    /* Wait on the blocking-sync event first, then copy the logits: a copy into
     * the caller's pageable memory returns only when the stream has drained,
     * and the driver waits for that spinning (its default schedule with fewer
     * contexts than CPUs), so queued before the wait it kept this thread
     * spinning through the whole step, on a core the MoE workers need (in
     * kt-bench e2e pinned on worker 0's: every barrier then waited out its
     * time slices). With no CPU experts the thread polls instead: nothing of
     * ours needs that core, and a sleeping thread's wake-up costs tens of us. */
    bool cpu_experts = ctx->moe && g->n_gpu_experts < ctx->hp.n_expert;
    int waited = kt__cuda_wait(g->rt, !cpu_experts, g->err, sizeof g->err);
    if (g->flag_step) {
        uint32_t *fail = &g->flags_h[2 * ctx->hp.n_layer];
        bool gave_up = __atomic_load_n(fail, __ATOMIC_ACQUIRE) != 0;
        if (!kt__feeder_finish(g->feeder, waited < 0 || gave_up))
            cpu_cut(g);
        cpu_errors(g);
        if (gave_up) {
            *fail = 0;
            return kt__error(KT_ERR_IO, "GPU runtime: the CPU experts' feeder did not answer "
                             "within 60 s (set KT_GPU_HYBRID=hostfn to use host functions)");
        }
    }
    if (waited < 0)
        return cuda_error(g, "forward");
    if (logits && !all_logits && g->logits_h) {
        /* one row: already copied to pinned memory on the stream */
        memcpy(logits, g->logits_h, sizeof(float) * (size_t)ctx->hp.n_vocab);
    } else if (logits) {
        kt__cuda_copy_async(g->rt, logits, g->logits,
                            sizeof(float) * (size_t)(all_logits ? T : 1) * ctx->hp.n_vocab);
        if (kt__cuda_sync(g->rt, g->err, sizeof g->err) < 0)
            return cuda_error(g, "logits");
    }
    if (g->prof) {
        kt__cuda_prof_collect(g->rt, g->pr_ms[g->phase], PH_N);
        g->pr_steps[g->phase]++;
    }
    if (g->trace && g->lw_on) {
        g->tr_lw_calls++;
        g->tr_lw_tokens += T;
        g->tr_lw_streamed += g->lw_cut - g->n_gpu_experts;
        g->tr_lw_fwd += now_s() - t_start;
    }
    if (g->trace) {
        g->tr_fwd[g->phase] += now_s() - t_start;
        g->tr_calls[g->phase]++;
        g->tr_tokens[g->phase] += T;
    }
    if (g->cb_status)
        return kt__error(KT_ERR_IO, "GPU runtime: CPU experts: %s", g->cb_err);
    return KT_OK;
}

#endif /* KT_HAVE_CUDA */
