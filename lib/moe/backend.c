/*
 * The CPU MoE backend (kt/moe.h): task queue on the worker pool, token
 * grouping by expert, and the fused two-phase execution of one layer:
 *
 *   phase 0  every worker: activations of its tokens -> kernel format, once
 *            per token (x [T][H] -> xq [T][xrow]); worker 0: group the
 *            (token, expert) pairs by expert.                      barrier
 *   phase 1  items (expert, block of I rows) of the pool's I slice:
 *            h = act(gate x, up x) for every token of the expert, written
 *            in kernel format (hq [pairs][hrow]).                  barrier
 *   phase 2  items (block of H rows): for every active expert, down over the
 *            pool's I slice, scaled by the routing weight and summed per
 *            token; one pool writes out directly, several pools add their
 *            partials after one more barrier.
 *
 * Decode calls (dec_flow) skip the phase-1 barrier: phase 2 waits per expert
 * for that expert's h. KT_MOE_DECODE_FLOW=2 also skips the phase-0 one for a
 * few tokens: the first worker to arrive plans and quantizes them, the others
 * wait for its plan.
 *
 * Each expert's weights are streamed once per call for all tokens that
 * chose it. Nothing here allocates after kt_moe_backend_create().
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kt/hw.h"
#include "kt/moe.h"
#include "kt_config.h"
#include "kt_internal.h"
#if KT_HAVE_NUMA
#include <numa.h>
#endif
#include "core/threadpool.h"
#include "moe_internal.h"
#include "../../cpu/ref/ggml_quants.h"

#define RB1 64    /* I rows per phase-1 item (prefill)                    */
#define RB2 64    /* H rows per phase-2 item (prefill)                    */
#define RB_MAX 512 /* decode items: up to this many rows                  */
#define RB_TILES 256 /* prefill rows per item on the INT8 tiles (prefill_rows) */
#define MCH 256   /* tokens per kernel call (bounds the C tiles [MCH][64]) */
#define FLOW_T 4  /* dec_flow 2: chunks of at most this many tokens skip the phase-0 barrier */

typedef struct moe_layer {
    kt__wmat *gate, *up, *down;  /* [E]; gate[e].w == NULL: expert absent */
    float *gate_bias, *up_bias;  /* [E][I] or NULL */
    float *down_bias;            /* [E][H] or NULL */
    uint16_t *owned;             /* transposed / de-interleaved copies */
    /* [n_pools][E][3] what pool p reads of expert e: gate and up rows, down
     * columns [pool_i0[p], pool_i0[p + 1]) with local indices (a copy in the
     * pool's memory with several pools; the matrices in place with one) */
    kt__wmat *view;
    _Atomic(const uint8_t *) mask;
} moe_layer;

typedef struct moe_task {
    kt_moe_backend *moe;
    uint32_t layer;        /* the backend's slot */
    uint32_t asked;        /* the caller's layer index (the route observer's) */
    kt_moe_io io;
    double posted;         /* KT_MOE_PROFILE: when it was submitted (stamp_now) */
} moe_task;

struct kt_moe_backend {
    kt_runtime *rt;
    kt_moe_desc d;
    kt_moe_options o;
    int H, I, E, max_k, max_t;
    float alpha, limit;
    const kt__moe_kernels *kern;
    /* shared packing (AMX-INT8 sets): each expert's tokens packed once per call
     * for the gate / up items (pkx, K = H) and the down items (pkh, K = the
     * pool's I slice); [n_pools][pk_blocks] blocks of 16 tokens each */
    const kt__moe_packer *packer;
    uint8_t *pkx, *pkh;
    size_t pk_blocks, pkx_block, pkh_block;
    moe_layer *layers;
    uint32_t n_layers;
    int32_t *layer_map;            /* model layer -> slot (-1: dense); NULL: identity */
    uint32_t n_map;
    kt_pool *pool;
    int nth, n_pools;
    int pool_i0[65];               /* I slice of pool p: [pool_i0[p], pool_i0[p+1]) */

    moe_task tasks[KT_MOE_QUEUE_DEPTH];

    size_t xrow, hrow;             /* activation row bytes for H and the largest I slice */
    uint8_t *xq;                   /* [max_t][xrow]                     */
    uint8_t *hq;                   /* [n_pools][max_t * max_k][hrow]: h of the pool's slice */
    uint8_t *pool_mem[64];         /* per pool: its slices of every expert (several pools) */
    size_t pool_bytes[64];
    bool pool_numa;                /* pool_mem from numa_alloc_onnode (else aligned)    */
    bool int4_tiled;               /* pool_mem: RAWINT4 in 4-row tiles (int4_tiled)      */
    bool lf_repack;                /* pool_mem: LLAMAFILE Q4_0 also repacked (lf_slices)  */
    uint8_t *grid_mem[64];         /* per pool: the packer's grid data of its views (make_grids) */
    size_t grid_bytes[64];
    float *acc;                    /* [n_pools][max_t * H]: see acc_item */
    int32_t *cnt, *off, *cur;      /* [E], [E + 1], [E]                 */
    int32_t *active;               /* [E]                               */
    int32_t *pair_tok;             /* [max_t * max_k]                   */
    float *pair_w;                 /* [max_t * max_k]                   */
    uint8_t *scratch;              /* [nth][scratch_stride]             */
    size_t scratch_stride;
    size_t workspace_bytes;

    /* per-task state, written by worker 0 in phase 0 */
    int cur_t, n_active, max_cnt;
    int rb1[64], rb2[64];          /* rows per phase-1 / phase-2 item, per pool */
    int tail1[64], ntail1[64];     /* decode: the last ntail1 blocks of tail1 rows (item_rows) */
    int tail2[64], ntail2[64];     /* the same for phase 2's blocks of H */
    int pf_rb1, pf_rb2;            /* prefill rows per phase-1 / phase-2 item */
    int tile_rb;                   /* the wider: C tiles [MCH][tile_rb] */
    int dec_items, dec_grain;      /* decode: items per worker, rows a multiple of (item_rows) */
    int dec_grain2;                /* decode phase 2's rows a multiple of (KT_MOE_DECODE_GRAIN2) */
    bool dec_tail;                 /* decode: small items end each phase (item_rows) */
    /* decode without the phase barriers (decode_items: KT_MOE_DECODE_FLOW): 1 phase 2
     * waits for each expert's h instead of for all of phase 1; 2 also: in calls of at
     * most FLOW_T tokens the first worker to arrive plans, the others wait for its plan
     * only, not for every worker to arrive */
    int dec_flow;
    bool call_share;               /* kt_moe_forward runs the last worker's share (decode_items) */
    bool flow_call;                /* this chunk: phase 2 waits per expert (phase0) */
    int blocks1[64];               /* phase-1 items of each active expert, per pool */
    _Atomic int *done1;            /* [n_pools][E]: finished phase-1 items of active expert a */
    unsigned *plan_seen;           /* [nth][16]: chunks each worker has begun (own line) */
    bool pk_on;                    /* this chunk packs shared (prefill, packer) */
    bool silu16;                   /* the activation on AVX-512 (kt__moe_silu_mul_avx512) */
    bool silu8;                    /* else on AVX2 (kt__moe_silu_mul_avx2)                */
    kt__moe_prefetch_fn kpf;       /* the kernel set's hint for its next call, or NULL */
    /* KT_MOE_DECODE_READ=1 (for measuring): decode items read their weight bytes
     * with this plain loop instead of running the kernel (read_items); NULL: off */
    uint64_t (*dec_read)(const void *p, size_t n);
    /* one-token calls' kernel set and its hint (kt__moe_set_decode_precision),
     * or NULL: kern and kpf; chosen per call by kern_for / kpf_for */
    const kt__moe_kernels *kern1;
    kt__moe_prefetch_fn kpf1;
    _Alignas(64) _Atomic int item1[64];
    _Alignas(64) _Atomic int item2[64];
    _Alignas(64) _Atomic int itemx[64]; /* packing items (active experts) */
    _Alignas(64) _Atomic int itemh[64];
    _Alignas(64) _Atomic unsigned plan_seq; /* chunks planned so far */
    _Alignas(64) _Atomic uint64_t arrivals; /* dec_flow 2: tickets, nth a chunk (run_chunks) */
    _Alignas(64) _Atomic int prof_ended;    /* KT_MOE_PROFILE: workers done with the task */
    double prof_last_end;          /* KT_MOE_PROFILE: when the last task's last worker ended */
    double prof_ret, prof_rets;    /* KT_MOE_PROFILE: kt_moe_wait's returns after it, s / count */
    double prof_reth[6];           /* ... how many within 5 / 10 / 20 / 50 / 100 us / later */

    _Atomic int err_status;
    char err_msg[256];

    /* [nth][2]: when each worker started and finished its last task (seconds,
     * CLOCK_MONOTONIC); NULL unless kt__moe_stamp_enable() (KT_GPU_TRACE) */
    double *stamp;
    kt__moe_route_fn route_fn;     /* kt__moe_set_route_observer; NULL: none */
    void *route_arg;
    /* [nth][PROF_N] seconds per part of a call, + 1 call count; NULL unless
     * KT_MOE_PROFILE is set (printed when the backend is freed) */
    double *prof;

    void (*release)(void *);       /* frees `owned` after everything else (GGUF mapping) */
    void *owned;
};

static uint64_t isa_cap = ~UINT64_C(0);

void kt__moe_set_isa_cap(uint64_t cap)
{
    isa_cap = cap;
}

static const kt__moe_kernels *forced_kern;
static const kt__moe_packer *forced_packer;

void kt__moe_force_kernels(const kt__moe_kernels *kern, const kt__moe_packer *packer)
{
    forced_kern = kern;
    forced_packer = packer;
}

#define AVX512_NEED \
    (KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ | \
     KT_ISA_AVX512VNNI | KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI | KT_ISA_AVX2 | KT_ISA_FMA | \
     KT_ISA_F16C)
#define AVX2_NEED (KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C)

uint64_t kt__moe_epoch;

const kt__moe_kernels *kt__moe_pick_kernels(int method)
{
    uint64_t isa = kt_hw_isa() & isa_cap;
    (void)isa;
    /* AMXINT4 is kt-convert's group-32 INT4 in the RAWINT4 layout: same kernels */
    if (method == KT_METHOD_AMXINT4)
        method = KT_METHOD_RAWINT4;
    const kt__moe_kernels *k = NULL;
#if KT_HAVE_ISA_AMX
    /* AMX prefill (BF16 and INT8 tiles) on top of the AVX-512 set (tile permission is
     * part of the bits). */
    if ((isa & (AVX512_NEED | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16 | KT_ISA_AMX_INT8)) ==
        (AVX512_NEED | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16 | KT_ISA_AMX_INT8))
        k = kt__moe_kernels_amx(method);
#endif
#if KT_HAVE_ISA_AVX512
    if (!k && (isa & AVX512_NEED) == AVX512_NEED)
        k = kt__moe_kernels_avx512(method);
#endif
#if KT_HAVE_ISA_AVX2
    if (!k && (isa & AVX2_NEED) == AVX2_NEED)
        k = kt__moe_kernels_avx2(method);
#endif
    if (!k)
        k = kt__moe_kernels_ref(method);
    return k;
}

/* AMXINT4 with groups of 64 or 128 (cpu/moe_kernels.h): AMX-INT8 tiles
 * with the AVX-512 VNNI set below, that set alone, else scalar (F32
 * activations; also the precise choice). */
const kt__moe_kernels *kt__moe_pick_int4g(bool precise)
{
    uint64_t isa = kt_hw_isa() & isa_cap;
    (void)isa;
    const kt__moe_kernels *k = NULL;
    if (precise)
        return kt__moe_int4g_ref();
#if KT_HAVE_ISA_AMX
    if ((isa & (AVX512_NEED | KT_ISA_AMX_TILE | KT_ISA_AMX_INT8)) ==
        (AVX512_NEED | KT_ISA_AMX_TILE | KT_ISA_AMX_INT8))
        k = kt__moe_int4g_amx();
#endif
#if KT_HAVE_ISA_AVX512
    if (!k && (isa & AVX512_NEED) == AVX512_NEED)
        k = kt__moe_int4g_avx512();
#endif
    return k ? k : kt__moe_int4g_ref();
}

/* Kernel set for KT_MOE_PREC_BF16X2 / _F32: BF16X2 activations on AMX-BF16
 * tiles (hi and lo as two tile sets; the AVX-512 x2 kernels below the AMX
 * crossover) or AVX-512, the F32-activation AVX2 sets, else scalar with F32
 * activations. */
const kt__moe_kernels *kt__moe_pick_kernels_precise(int method)
{
    uint64_t isa = kt_hw_isa() & isa_cap;
    (void)isa;
    if (method == KT_METHOD_AMXINT4)
        method = KT_METHOD_RAWINT4;
    const kt__moe_kernels *k = NULL;
#if KT_HAVE_ISA_AMX
    if ((isa & (AVX512_NEED | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16)) ==
        (AVX512_NEED | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16))
        k = kt__moe_kernels_amx_x2(method);
#endif
#if KT_HAVE_ISA_AVX512
    if (!k && (isa & AVX512_NEED) == AVX512_NEED)
        k = kt__moe_kernels_avx512_x2(method);
#endif
#if KT_HAVE_ISA_AVX2
    /* their BF16, FP8 and INT8-weight kernels take F32 activations */
    if (!k && (isa & AVX2_NEED) == AVX2_NEED && method != KT_METHOD_RAWINT4)
        k = kt__moe_kernels_avx2(method);
#endif
    if (!k)
        k = kt__moe_kernels_ref_precise(method);
    return k;
}

/* ---------------------------------------------------------------------------
 * Creation
 */

kt_status kt_moe_options_init(kt_moe_options *opts, size_t struct_size)
{
    static const kt_moe_options def = KT_MOE_OPTIONS_INIT;
    return kt__options_init(opts, struct_size, &def, sizeof def, __func__);
}

static uint64_t expert_bytes(int method, uint64_t H, uint64_t I, uint64_t group)
{
    uint64_t n = 3 * H * I;
    switch (method) {
    case KT_METHOD_BF16:
        return 2 * n;
    case KT_METHOD_FP8:
        return n + 4 * (2 * ((I + 127) / 128) * ((H + 127) / 128) +
                        ((H + 127) / 128) * ((I + 127) / 128));
    case KT_METHOD_RAWINT4:
        return n / 2 + 2 * (n / 32);
    case KT_METHOD_AMXINT4: /* the same layout, written by kt-convert */
        return n / 2 + 2 * (n / (group ? group : 32));
    case KT_METHOD_AMXINT8:
        return n + 4 * (2 * I + H);
    default:
        return 0;
    }
}

static float bias_at(const void *b, int type, size_t i)
{
    if (type == KT_TYPE_F32)
        return ((const float *)b)[i];
    return kt__moe_bf16_f32(((const uint16_t *)b)[i]);
}

/* Copies biases to F32 [E][n]; fused gate biases are de-interleaved. */
static kt_status load_biases(moe_layer *L, const kt_moe_layer_weights *lw, int E, int H, int I,
                             bool fused)
{
    if (lw->bias_type != KT_TYPE_BF16 && lw->bias_type != KT_TYPE_F32)
        return kt__error(KT_ERR_INVALID_ARG, "bias_type %d: expected KT_TYPE_BF16 or KT_TYPE_F32",
                         lw->bias_type);
    if (lw->gate_bias) {
        L->gate_bias = kt__calloc((size_t)E * I, sizeof(float));
        L->up_bias = kt__calloc((size_t)E * I, sizeof(float));
        if (!L->gate_bias || !L->up_bias)
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for biases");
        for (int e = 0; e < E; e++) {
            const void *gb = lw->gate_bias[e];
            const void *ub = fused ? NULL : (lw->up_bias ? lw->up_bias[e] : NULL);
            for (int i = 0; i < I; i++) {
                if (fused && gb) {
                    L->gate_bias[(size_t)e * I + i] = bias_at(gb, lw->bias_type, 2 * (size_t)i);
                    L->up_bias[(size_t)e * I + i] = bias_at(gb, lw->bias_type, 2 * (size_t)i + 1);
                } else {
                    if (gb)
                        L->gate_bias[(size_t)e * I + i] = bias_at(gb, lw->bias_type, i);
                    if (ub)
                        L->up_bias[(size_t)e * I + i] = bias_at(ub, lw->bias_type, i);
                }
            }
        }
    }
    if (lw->down_bias) {
        L->down_bias = kt__calloc((size_t)E * H, sizeof(float));
        if (!L->down_bias)
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for biases");
        for (int e = 0; e < E; e++)
            if (lw->down_bias[e])
                for (int h = 0; h < H; h++)
                    L->down_bias[(size_t)e * H + h] = bias_at(lw->down_bias[e], lw->bias_type, h);
    }
    return KT_OK;
}

/* BF16 layouts other than [out][in] per projection (gpt-oss): make
 * [out][in] copies of gate, up and down. */
static kt_status load_relayout(moe_layer *L, const kt_moe_layer_weights *lw, int E, int H, int I)
{
    bool fused = lw->flags & KT_MOE_W_GATE_UP_FUSED;
    bool in_major = lw->flags & KT_MOE_W_IN_MAJOR;
    size_t per = (size_t)3 * H * I;
    L->owned = kt__malloc_array((size_t)E, per * sizeof(uint16_t));
    if (!L->owned)
        return kt__error(KT_ERR_NOMEM, "moe: out of memory for re-laid-out weights");
    for (int e = 0; e < E; e++) {
        if (!lw->gate[e])
            continue;
        uint16_t *g = L->owned + (size_t)e * per, *u = g + (size_t)H * I, *dn = u + (size_t)H * I;
        const uint16_t *sg = lw->gate[e], *su = fused ? NULL : lw->up[e], *sd = lw->down[e];
        for (int i = 0; i < I; i++) {
            for (int h = 0; h < H; h++) {
                size_t gi, ui;
                if (fused && in_major) {         /* [H][2I] */
                    gi = (size_t)h * 2 * I + 2 * (size_t)i;
                    ui = gi + 1;
                } else if (fused) {              /* [2I][H] */
                    gi = (2 * (size_t)i) * H + h;
                    ui = gi + H;
                } else {                         /* [H][I] */
                    gi = ui = (size_t)h * I + i;
                }
                g[(size_t)i * H + h] = sg[gi];
                u[(size_t)i * H + h] = fused ? sg[ui] : su[ui];
            }
        }
        for (int h = 0; h < H; h++)
            for (int i = 0; i < I; i++)
                dn[(size_t)h * I + i] = in_major ? sd[(size_t)i * H + h] : sd[(size_t)h * I + i];
        L->gate[e].w = g;
        L->up[e].w = u;
        L->down[e].w = dn;
    }
    return KT_OK;
}

/* Decode item sizes (item_rows): about dec_items items per worker, rows a
 * multiple of dec_grain: 4 (8 with 8 or more workers, but LLAMAFILE) items of
 * multiples of 64 rows. Finer items were
 * measured for LLAMAFILE on the 16-core Xeon (Qwen3-30B-A3B shape, 32 rows x
 * 16 per worker against 64 x 4): the barrier waits fall (0.07-0.10 -> 0.04-0.07
 * ms a call) but the kernels' time grows by about as much (more calls, each
 * restarting its row prefetch), and T=1 / T=4 GB/s stayed within the runs'
 * +-8% (docs/bench/h200-xeon16-gguf-items-*.txt). KT_MOE_DECODE_ITEMS and
 * KT_MOE_DECODE_GRAIN (a multiple of 32; below 64 for LLAMAFILE only, whose
 * h pieces need whole Q8_0 blocks) override both, for measuring. */
static void decode_items(kt_moe_backend *moe)
{
    bool lf = moe->d.method == KT_METHOD_LLAMAFILE;
    /* 8 items a worker with 8 or more workers (not LLAMAFILE, measured apart
     * above): the cores' memory shares differ (on the 16-core Xeon a stream
     * pass's median thread read its slice 1.6x as fast as the slowest), and the
     * smaller last items cut the barrier waits there, DeepSeek-V3 T=1 FP8 0.40-0.47
     * -> 0.28-0.36 ms a call, RAWINT4 0.25-0.30 -> 0.12-0.18: 95-106 GB/s
     * against 88-98 (FP8), 106-119 against 87-99 (RAWINT4), BF16 level, in 4
     * of 4 alternating processes (12-01 00:58, docs/bench/h200-xeon16-cpu15-0057-*).
     * KT_MOE_DECODE_ITEMS=4 is the old split. */
    moe->dec_items = !lf && moe->nth >= 8 ? 8 : 4;
    /* LLAMAFILE on Intel CPUs with at most KT__FEW_CPUS online CPUs: 2 items a
     * worker. Qwen3-30B-A3B's phase 2 then takes 512-row blocks (221 KB of each
     * Q4_0 expert's down rows in one run, not 110 KB): the 2-core AMX Xeon VM,
     * kt-bench moe --gguf 4 layers, 2 threads, T=1, KT_MOE_DECODE_ITEMS=2 against
     * 4 alternating (session 20): Q4_K 0.89 / 0.87 / 0.89 of the stream between
     * the calls against 0.85 / 0.86 / 0.87, Q4_0 0.97 / 0.98 / 0.94 against 0.94
     * / 0.94 / 0.90 (docs/bench/xeon2-gdec-0741-items.txt). */
    if (lf && kt__few_core_intel())
        moe->dec_items = 2;
    moe->dec_grain = 64;
    /* The decode tail: each decode phase ends with a round of quarter items
     * (item_rows), so that workers finish together. On by default for LLAMAFILE
     * with 8 or more workers: the 16-core Xeon (11-30 10:24, 4 layers, T=1,
     * alternating twice) read Q8_0 89.8 / 92.6 GB/s against 77.8 / 78.4 without,
     * Q4_0 71.6 / 72.8 against 71.2 / 72.1; the 2-core VM (10:00, load 1.5-2.9),
     * where the barrier waits are 0.02-0.07 of 0.8 ms a call, read Q4_0 21.4-25.9
     * GB/s against 23.5-28.4 without, Q8_0 26.2-31.9 against 25.4-28.3.
     * KT_MOE_DECODE_TAIL=0 / 1 overrides (any method). */
    moe->dec_tail = lf && moe->nth >= 8;
    const char *t = getenv("KT_MOE_DECODE_TAIL");
    if (t && *t)
        moe->dec_tail = strcmp(t, "0") != 0;
    const char *e = getenv("KT_MOE_DECODE_ITEMS");
    if (e && atoi(e) >= 1 && atoi(e) <= 64)
        moe->dec_items = atoi(e);
    e = getenv("KT_MOE_DECODE_GRAIN");
    if (e && atoi(e) >= 32 && atoi(e) <= RB_MAX && atoi(e) % 32 == 0 && (lf || atoi(e) >= 64))
        moe->dec_grain = atoi(e);
    /* phase 2's items need no whole activation blocks (their rows are H's, the
     * kernels take any row range): KT_MOE_DECODE_GRAIN2 (16..512, a multiple of
     * 16) sizes them apart, for measuring finer last items */
    moe->dec_grain2 = moe->dec_grain;
    e = getenv("KT_MOE_DECODE_GRAIN2");
    if (e && atoi(e) >= 16 && atoi(e) <= RB_MAX && atoi(e) % 16 == 0)
        moe->dec_grain2 = atoi(e);
    /* Decode calls are short (a Qwen3-30B-A3B layer is 0.3-0.4 ms on the 16-core
     * Xeon), and their barriers took 10-20% of them: every worker waits at the end
     * of phase 1 for the slowest. With the flow, a worker out of phase-1 items
     * starts its phase-2 items and waits only where an expert's h is not complete
     * yet (done1; phase 1 hands out its items expert by expert, so the first
     * experts are long done); the sums keep their order, the outputs their bits.
     * The 16-core Xeon (12-01 03:53, Qwen3-30B-A3B shape, 16 layers, T=1, 3
     * alternating processes) read AMXINT8 102.8 / 97.9 / 108.0 GB/s against 92.9 /
     * 85.6 / 101.2 with the barriers, AMXINT4 86.7 / 85.1 / 87.8 against 82.0 / 77.2
     * / 81.5, BF16 118.8 / 122.9 / 119.8 against 110.4 / 109.8 / 118.9.
     * KT_MOE_DECODE_FLOW=0 keeps both barriers; 2 drops the phase-0 one too
     * (calls of at most FLOW_T tokens, run_chunks). */
    moe->dec_flow = 1;
    e = getenv("KT_MOE_DECODE_FLOW");
    if (e && *e >= '0' && *e <= '2' && !e[1])
        moe->dec_flow = *e - '0';
    /* kt_moe_forward's thread runs the last worker's share (kt__pool_call) on
     * Intel CPUs with at most KT__FEW_CPUS online CPUs, all of them the
     * workers': there it would sleep on a worker's CPU, and each call paid
     * that worker's start after the caller's futex sleep and the caller's
     * wake-up after the last worker (KT_MOE_PROFILE: 5-10 us in most calls,
     * 50-100 us in 1 of 10 to 2 of 3 by the run). The 2-core AMX VM, kt-bench
     * moe --gguf 4 layers, 2 threads, T=1 of the between-calls stream, 4
     * rounds alternating with the base (session 21): Q4_0 0.87-0.88 ->
     * 0.93-0.96, Q4_K 0.79-0.83 -> 0.81-0.88, Q8_0 0.93-0.97 -> 0.96-1.00
     * (docs/bench/xeon2-dsched-1207-ab.txt). KT_MOE_CALL_SHARE=0 / 1
     * overrides. */
    moe->call_share = kt__few_core_intel() && kt__pool_covers(moe->pool);
    e = getenv("KT_MOE_CALL_SHARE");
    if (e && *e)
        moe->call_share = strcmp(e, "0") != 0;
}

/* LLAMAFILE: each projection's block type is a ggml type whose block size
 * divides the projection's input width. */
static kt_status check_ggml_types(const kt_moe_layer_weights *lw, uint32_t li, int H, int I)
{
    const char *what[3] = {"gate", "up", "down"};
    int32_t types[3] = {lw->gate_type, lw->up_type, lw->down_type};
    int cols[3] = {H, H, I};
    for (int j = 0; j < 3; j++) {
        if (!kt__ggml_act_section(types[j]) || !kt__ggml_row_bytes((kt_type)types[j], cols[j]))
            return kt__error(KT_ERR_INVALID_ARG,
                             "layer %u: %s_type %d (%s) is not a LLAMAFILE block type that "
                             "divides a row of %d",
                             li, what[j], types[j],
                             kt_type_name((kt_type)types[j]) ? kt_type_name((kt_type)types[j])
                                                             : "unknown",
                             cols[j]);
    }
    return KT_OK;
}

/* LLAMAFILE: the kernel set with the activation sections every layer's
 * types need, at the ggml ISA level the CPU (and the test cap) allows. */
static const kt__moe_kernels *pick_llamafile(const kt_moe_backend *moe)
{
    unsigned mask = 0;
    for (uint32_t l = 0; l < moe->n_layers; l++)
        for (int e = 0; e < moe->E; e++)
            if (moe->layers[l].gate[e].w)
                mask |= kt__ggml_act_section(moe->layers[l].gate[e].type) |
                        kt__ggml_act_section(moe->layers[l].up[e].type) |
                        kt__ggml_act_section(moe->layers[l].down[e].type);
    uint64_t isa = kt_hw_isa() & isa_cap;
    uint64_t avx512 = KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ |
                      KT_ISA_AVX512VNNI | AVX2_NEED;
    int level = (isa & avx512) == avx512 ? 2 : (isa & AVX2_NEED) == AVX2_NEED ? 1 : 0;
    /* the AMX set (prefill on the INT8 tiles) where the tiles run; KT_LF_AMX=0: the
     * AVX-512 set (for A/B) */
    const uint64_t amx = AVX512_NEED | KT_ISA_AMX_TILE | KT_ISA_AMX_INT8;
    const char *e = getenv("KT_LF_AMX");
    const kt__moe_kernels *k = (isa & amx) == amx && !(e && !strcmp(e, "0"))
                                   ? kt__moe_llamafile_kernels(3, mask ? mask : KT__GGML_ACT_F32)
                                   : NULL;
    return k ? k : kt__moe_llamafile_kernels(level, mask ? mask : KT__GGML_ACT_F32);
}

/* LLAMAFILE reads its blocks in place, typically from a GGUF mapping: map
 * every expert's pages now (MADV_POPULATE_READ, no copy) so that decode does
 * not take the first-touch page faults, one per 64 KiB of weights: under CPU
 * contention they cut T=1 from ~14 GB/s to 0.3 GB/s on the 2-core VM. Skipped
 * when the weights exceed 3/4 of RAM (they could not all stay resident) and
 * where the kernel lacks the advice (before Linux 5.14): best effort. */
static void prefault_llamafile(const kt_moe_backend *moe)
{
#ifdef MADV_POPULATE_READ
    long page = sysconf(_SC_PAGESIZE), phys = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || phys <= 0)
        return;
    uint64_t total = 0;
    for (uint32_t l = 0; l < moe->n_layers; l++)
        for (int e = 0; e < moe->E; e++) {
            const kt__wmat *m[3] = {&moe->layers[l].gate[e], &moe->layers[l].up[e],
                                    &moe->layers[l].down[e]};
            for (int j = 0; j < 3; j++)
                if (m[j]->w)
                    total += (uint64_t)m[j]->rows *
                             kt__ggml_row_bytes((kt_type)m[j]->type, m[j]->cols);
        }
    if (total > (uint64_t)phys / 4 * 3 * (uint64_t)page)
        return;
    for (uint32_t l = 0; l < moe->n_layers; l++)
        for (int e = 0; e < moe->E; e++) {
            const kt__wmat *m[3] = {&moe->layers[l].gate[e], &moe->layers[l].up[e],
                                    &moe->layers[l].down[e]};
            for (int j = 0; j < 3; j++) {
                if (!m[j]->w)
                    continue;
                uintptr_t a = (uintptr_t)m[j]->w;
                uintptr_t b = a + (uintptr_t)m[j]->rows *
                                      kt__ggml_row_bytes((kt_type)m[j]->type, m[j]->cols);
                a &= ~(uintptr_t)(page - 1);
                (void)madvise((void *)a, b - a, MADV_POPULATE_READ);
            }
        }
#else
    (void)moe;
#endif
}

static kt_status load_layer(kt_moe_backend *moe, moe_layer *L, const kt_moe_layer_weights *src,
                            uint32_t li)
{
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
    kt_status st = kt__options_read(&lw, sizeof lw, src, "kt_moe_layer_weights");
    if (st < 0)
        return st;
    int E = moe->E, H = moe->H, I = moe->I, method = moe->d.method;
    uint32_t known = KT_MOE_W_GATE_UP_FUSED | KT_MOE_W_IN_MAJOR;
    if (lw.flags & ~known)
        return kt__error(KT_ERR_INVALID_ARG, "layer %u: unknown flags 0x%x", li, lw.flags);
    bool fused = lw.flags & KT_MOE_W_GATE_UP_FUSED;
    bool relayout = lw.flags != 0;
    if (relayout && method != KT_METHOD_BF16)
        return kt__error(KT_ERR_UNSUPPORTED,
                         "layer %u: fused / in-major weight layouts need method BF16", li);
    if (!lw.gate || !lw.down || (!fused && !lw.up))
        return kt__error(KT_ERR_INVALID_ARG, "layer %u: gate, up and down arrays are required",
                         li);
    bool scaled = method == KT_METHOD_FP8 || method == KT_METHOD_RAWINT4 ||
                  method == KT_METHOD_AMXINT8 || method == KT_METHOD_AMXINT4;
    if (scaled && (!lw.gate_scale || !lw.up_scale || !lw.down_scale))
        return kt__error(KT_ERR_INVALID_ARG, "layer %u: method %s needs scale arrays", li,
                         kt_method_name((kt_method)method));
    L->gate = kt__calloc((size_t)E, sizeof *L->gate);
    L->up = kt__calloc((size_t)E, sizeof *L->up);
    L->down = kt__calloc((size_t)E, sizeof *L->down);
    if (!L->gate || !L->up || !L->down)
        return kt__error(KT_ERR_NOMEM, "moe: out of memory");
    for (int e = 0; e < E; e++) {
        if (!lw.gate[e])
            continue;
        if ((!fused && !lw.up[e]) || !lw.down[e])
            return kt__error(KT_ERR_INVALID_ARG,
                             "layer %u expert %d: gate is set but up or down is NULL", li, e);
        if (scaled && (!lw.gate_scale[e] || !lw.up_scale[e] || !lw.down_scale[e]))
            return kt__error(KT_ERR_INVALID_ARG, "layer %u expert %d: a scale pointer is NULL",
                             li, e);
        /* AMXINT4: inputs per scale (0: 32) */
        int g = method == KT_METHOD_AMXINT4 ? (int)moe->d.group_size : 0;
        L->gate[e] = (kt__wmat){lw.gate[e], scaled ? lw.gate_scale[e] : NULL, I, H, lw.gate_type,
                                g, NULL};
        L->up[e] = (kt__wmat){fused ? NULL : lw.up[e], scaled ? lw.up_scale[e] : NULL, I, H,
                                 lw.up_type, g, NULL};
        L->down[e] = (kt__wmat){lw.down[e], scaled ? lw.down_scale[e] : NULL, H, I, lw.down_type,
                                g, NULL};
    }
    if (method == KT_METHOD_LLAMAFILE && (st = check_ggml_types(&lw, li, H, I)) < 0)
        return st;
    if (relayout && (st = load_relayout(L, &lw, E, H, I)) < 0)
        return st;
    if (moe->d.act == KT_MOE_ACT_SWIGLU_OAI && (st = load_biases(L, &lw, E, H, I, fused)) < 0)
        return st;
    return KT_OK;
}

static void free_layers(kt_moe_backend *moe)
{
    if (!moe->layers)
        return;
    for (uint32_t l = 0; l < moe->n_layers; l++) {
        moe_layer *L = &moe->layers[l];
        kt__free(L->gate);
        kt__free(L->up);
        kt__free(L->down);
        kt__free(L->gate_bias);
        kt__free(L->up_bias);
        kt__free(L->down_bias);
        kt__free(L->owned);
        kt__free(L->view);
    }
    kt__free(moe->layers);
}

/* ---------------------------------------------------------------------------
 * NUMA pools: pool p owns rows / columns [pool_i0[p], pool_i0[p + 1]) of every
 * expert's I; with several pools each slice is copied into memory bound to
 * the pool's node (libnuma, when the machine has more than one node; aligned
 * memory otherwise), by the pool's own workers.
 */

static void pool_mem_free(kt_moe_backend *moe, int p)
{
#if KT_HAVE_NUMA
    if (moe->pool_numa) {
        numa_free(moe->pool_mem[p], moe->pool_bytes[p]);
        moe->pool_mem[p] = NULL;
        return;
    }
#endif
    kt__free_aligned(moe->pool_mem[p]);
    moe->pool_mem[p] = NULL;
}

static bool numa_multi(void)
{
#if KT_HAVE_NUMA
    return numa_available() >= 0 && numa_num_configured_nodes() > 1;
#else
    return false;
#endif
}

/* KT_MOE_INT4_TILED=1 (opt-in, for measuring; docs/moe.md): RAWINT4 experts
 * repacked at create time into 4-row tiles (KT__INT4_TILED), when the kernel
 * set reads them (the scalar, AVX2 and AVX-512 sets; not AMX, not BF16X2). */
static bool int4_tiled(const kt_moe_backend *moe)
{
    const char *e = getenv("KT_MOE_INT4_TILED");
    const kt__moe_kernels *k = moe->kern;
    return e && !strcmp(e, "1") && moe->d.method == KT_METHOD_RAWINT4 && k &&
           (k == kt__moe_kernels_ref(KT_METHOD_RAWINT4) ||
            k == kt__moe_kernels_avx2(KT_METHOD_RAWINT4) ||
            k == kt__moe_kernels_avx512(KT_METHOD_RAWINT4));
}

static size_t round64(size_t b)
{
    return (b + 63) & ~(size_t)63;
}

/* LLAMAFILE Q4_0 / Q4_K / Q8_0 experts repacked at create time for the AVX-512
 * and AVX2 decodes, Q5_K, Q6_K and IQ4_NL for the AVX2 one (KT__LF_Q40X / Q4KX / Q80X /
 * Q5KX / Q6KX / IQ4NLX: one stream of 4-row tiles, one scale product per 16 blocks of 32;
 * docs/moe.md). KT_LF_REPACK: 0 none, 1 (or unset, or empty) all, or a list of names
 * (q4_0,q8_0,q4_K,q5_K,q6_K,iq4_nl). Costs
 * those experts' size once more (Q4_K: +2.8 %): the rows stay (mapped) for the prefill
 * panels. */
/* KT_LF_REPACK when it asks for something; set but empty reads as unset (the
 * device scripts pass "default" so) */
static const char *lf_repack_asked(void)
{
    const char *e = getenv("KT_LF_REPACK");
    return e && *e ? e : NULL;
}

static bool lf_repack_type(const kt_moe_backend *moe, int type)
{
    const char *e = lf_repack_asked();
    const kt_ggml_traits *tr = kt__ggml_traits((kt_type)type); /* its ggml name: "q5_K" */
    if (e && strcmp(e, "1") && (!tr || !strstr(e, tr->name)))
        return false;
    return moe->d.method == KT_METHOD_LLAMAFILE && kt__lf_repacks(moe->kern, type);
}

/* The memory available now (bytes; 0: unknown), which bounds the copies made
 * at create (LLAMAFILE repacks, AMXINT4 grid factors). KT_LF_MEM_AVAILABLE
 * (bytes; tests) stands in for it. */
static uint64_t mem_available(void)
{
    const char *hook = getenv("KT_LF_MEM_AVAILABLE");
    kt_hw_info hw = KT_HW_INFO_INIT;
    return hook ? strtoull(hook, NULL, 10) : kt_hw_query(&hw) == KT_OK ? hw.ram_available : 0;
}

/* Whether the experts are repacked: by default only where the copies take at
 * most half of the memory available at create time (beyond that they would push
 * out the file's own pages, which the prefill still reads, or not fit: a
 * DeepSeek-V3 Q4_K file is ~380 GB); KT_LF_REPACK=1 or a list forces them. */
static bool lf_repack(const kt_moe_backend *moe)
{
    size_t need = 0;
    bool any = false;
    for (uint32_t l = 0; l < moe->n_layers; l++)
        for (int e2 = 0; e2 < moe->E; e2++) {
            const moe_layer *L = &moe->layers[l];
            const kt__wmat *m[3] = {&L->gate[e2], &L->up[e2], &L->down[e2]};
            if (!L->gate[e2].w) /* an expert not held here */
                continue;
            for (int j = 0; j < 3; j++)
                if (m[j]->w && lf_repack_type(moe, m[j]->type)) {
                    any = true;
                    need += round64(kt__lf_repack_bytes(m[j]->type, m[j]->rows, m[j]->cols));
                }
        }
    if (!any || lf_repack_asked())
        return any;
    uint64_t avail = mem_available();
    if (avail && need > avail / 2) {
        kt__log(moe->rt, KT_LOG_WARN,
                "moe: LLAMAFILE experts read as stored, not repacked for the decode: the "
                "copies would take %.1f GiB, more than half of the %.1f GiB available "
                "(KT_LF_REPACK=1 forces them)",
                (double)need / (1 << 30), (double)avail / (1 << 30));
        return false;
    }
    return true;
}

/* lf_repack: gate, up, down of expert e for pool p: the matrices (one pool) or
 * the pool's slice copies (more), each Q4_0 / Q4_K one followed by its repack.
 * Returns the bytes at dst; dst NULL: counts only, else makes them and their
 * views v[3]. */
static size_t lf_slices(const kt_moe_backend *moe, const moe_layer *L, int e, int p,
                        uint8_t *dst, kt__wmat *v)
{
    int m = moe->d.method, i0 = moe->pool_i0[p], i1 = moe->pool_i0[p + 1], H = moe->H;
    const kt__wmat *src[3] = {&L->gate[e], &L->up[e], &L->down[e]};
    const int r0[3] = {i0, i0, 0}, r1[3] = {i1, i1, H}, c0[3] = {0, 0, i0}, c1[3] = {H, H, i1};
    size_t o = 0;
    for (int j = 0; j < 3; j++) {
        kt__wmat w = *src[j];
        if (moe->n_pools > 1) {
            if (dst)
                w = kt__moe_slice_copy(m, src[j], r0[j], r1[j], c0[j], c1[j], dst + o);
            o += round64(kt__moe_slice_bytes(m, src[j], r0[j], r1[j], c0[j], c1[j]));
        }
        size_t rb = kt__lf_repack_bytes(src[j]->type, r1[j] - r0[j], c1[j] - c0[j]);
        if (rb && lf_repack_type(moe, src[j]->type)) {
            if (dst)
                w = kt__lf_repack(&w, dst + o);
            o += round64(rb);
        }
        if (v)
            v[j] = w;
    }
    return o;
}

/* The three slices of expert e of layer L for pool p: gate, up [r][H], down [H][r]. */
static size_t slice_bytes(const kt_moe_backend *moe, const moe_layer *L, int e, int p)
{
    int m = moe->d.method, i0 = moe->pool_i0[p], i1 = moe->pool_i0[p + 1];
    if (!L->gate[e].w)
        return 0;
    if (moe->lf_repack)
        return lf_slices(moe, L, e, p, NULL, NULL);
    if (moe->int4_tiled) /* gate, up and down repacked (the up of fused experts too) */
        return 2 * round64(kt__int4t_bytes(i1 - i0, moe->H)) +
               round64(kt__int4t_bytes(moe->H, i1 - i0));
    kt__wmat up = L->up[e].w ? L->up[e] : L->gate[e];
    return kt__moe_slice_bytes(m, &L->gate[e], i0, i1, 0, moe->H) +
           kt__moe_slice_bytes(m, &up, i0, i1, 0, moe->H) +
           kt__moe_slice_bytes(m, &L->down[e], 0, moe->H, i0, i1);
}

typedef struct slice_job {
    kt_moe_backend *moe;
    size_t *offsets;   /* [n_pools][n_layers * E]: where each expert's slices go */
} slice_job;

/* Worker tid of pool p copies every count-th expert of every layer. */
static void copy_slices(void *ctx, int tid)
{
    slice_job *job = ctx;
    kt_moe_backend *moe = job->moe;
    int p = kt__pool_pool_of(moe->pool, tid);
    int first = kt__pool_first(moe->pool, p), count = kt__pool_count(moe->pool, p);
    int E = moe->E, m = moe->d.method, i0 = moe->pool_i0[p], i1 = moe->pool_i0[p + 1];
    size_t n = (size_t)moe->n_layers * E;
    for (size_t i = (size_t)(tid - first); i < n; i += (size_t)count) {
        moe_layer *L = &moe->layers[i / (size_t)E];
        int e = (int)(i % (size_t)E);
        kt__wmat *v = L->view + ((size_t)p * E + e) * 3;
        if (!L->gate[e].w)
            continue;
        uint8_t *dst = moe->pool_mem[p] + job->offsets[(size_t)p * n + i];
        kt__wmat up = L->up[e].w ? L->up[e] : L->gate[e];
        if (moe->lf_repack) {
            lf_slices(moe, L, e, p, dst, v);
            continue;
        }
        if (moe->int4_tiled) {
            size_t gb = round64(kt__int4t_bytes(i1 - i0, moe->H));
            v[0] = kt__moe_int4_tile(&L->gate[e], i0, i1, 0, moe->H, dst);
            v[1] = kt__moe_int4_tile(&up, i0, i1, 0, moe->H, dst + gb);
            v[2] = kt__moe_int4_tile(&L->down[e], 0, moe->H, i0, i1, dst + 2 * gb);
            continue;
        }
        v[0] = kt__moe_slice_copy(m, &L->gate[e], i0, i1, 0, moe->H, dst);
        dst += kt__moe_slice_bytes(m, &L->gate[e], i0, i1, 0, moe->H);
        v[1] = kt__moe_slice_copy(m, &up, i0, i1, 0, moe->H, dst);
        dst += kt__moe_slice_bytes(m, &up, i0, i1, 0, moe->H);
        v[2] = kt__moe_slice_copy(m, &L->down[e], 0, moe->H, i0, i1, dst);
    }
}

/* Views of every layer for every pool: the matrices themselves (one pool)
 * or copies of the pool's slices in its node's memory. */
static kt_status make_pool_views(kt_moe_backend *moe)
{
    int E = moe->E, P = moe->n_pools;
    for (uint32_t l = 0; l < moe->n_layers; l++) {
        moe_layer *L = &moe->layers[l];
        L->view = kt__calloc((size_t)P * E * 3, sizeof(kt__wmat));
        if (!L->view)
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for pool views");
        for (int e = 0; e < E && P == 1; e++) {
            L->view[3 * e] = L->gate[e];
            L->view[3 * e + 1] = L->up[e];
            L->view[3 * e + 2] = L->down[e];
        }
    }
    moe->int4_tiled = int4_tiled(moe);
    moe->lf_repack = lf_repack(moe);
    if (P == 1 && !moe->int4_tiled && !moe->lf_repack)
        return KT_OK;
    size_t n = (size_t)moe->n_layers * E;
    size_t *offsets = kt__malloc_array((size_t)P * n, sizeof(size_t));
    if (!offsets)
        return kt__error(KT_ERR_NOMEM, "moe: out of memory for pool slices");
    moe->pool_numa = numa_multi();
    for (int p = 0; p < P; p++) {
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            offsets[(size_t)p * n + i] = total;
            total += slice_bytes(moe, &moe->layers[i / (size_t)E], (int)(i % (size_t)E), p);
        }
        moe->pool_bytes[p] = total ? total : 64;
        int node = kt__pool_node(moe->pool, p);
#if KT_HAVE_NUMA
        if (moe->pool_numa)
            moe->pool_mem[p] = numa_alloc_onnode(moe->pool_bytes[p], node >= 0 ? node : 0);
        else
#endif
            moe->pool_mem[p] = kt__malloc_aligned(moe->pool_bytes[p], (size_t)2 << 20);
        if (!moe->pool_mem[p]) {
            kt__free(offsets);
            return kt__error(KT_ERR_NOMEM,
                             "moe: out of memory for pool %d's expert slices (%zu MiB, node %d)",
                             p, moe->pool_bytes[p] >> 20, node);
        }
#ifdef MADV_HUGEPAGE
        /* written once, streamed at every call: 2 MiB pages (THP "madvise"), not one
         * fault per 4 KiB (a 648 MiB Q4_0 repack: 166k faults, 2.5 s of system time) */
        madvise(moe->pool_mem[p], moe->pool_bytes[p], MADV_HUGEPAGE);
#endif
    }
    slice_job job = {moe, offsets};
    kt__pool_run(moe->pool, copy_slices, &job);
    kt__free(offsets);
    return KT_OK;
}

/* ---------------------------------------------------------------------------
 * Data the packer's kernels derive from each matrix once (kt__moe_packer.
 * grid_bytes / grid_make: the AMX INT4 sets' row scales and grid factors,
 * which their tile loops otherwise work out from the BF16 scales in every
 * call), for AMXINT4 only (format version 2's grid; RAWINT4 checkpoints are
 * off it). Made by each pool's own workers for the pool's views, into memory
 * of their first touch. A DeepSeek-V3 expert at g 32: 1.47 MB (5.9% of its
 * weights and scales). Bounded as the LLAMAFILE repacks: only where they take
 * at most half of the memory available at create; KT_AMX_GRID=1 forces them,
 * KT_AMX_GRID=0 leaves them out (the packer's grid_bytes is then 0 and the
 * kernels work per call, as before).
 */

typedef struct grid_job {
    kt_moe_backend *moe;
    size_t *offsets; /* [n_pools][n_layers * E * 3]: where each view's data go */
} grid_job;

static void make_grid_items(void *ctx, int tid)
{
    grid_job *job = ctx;
    kt_moe_backend *moe = job->moe;
    int p = kt__pool_pool_of(moe->pool, tid);
    int first = kt__pool_first(moe->pool, p), count = kt__pool_count(moe->pool, p);
    size_t n = (size_t)moe->n_layers * moe->E;
    for (size_t i = (size_t)(tid - first); i < n; i += (size_t)count) {
        moe_layer *L = &moe->layers[i / (size_t)moe->E];
        kt__wmat *v = L->view + ((size_t)p * moe->E + i % (size_t)moe->E) * 3;
        for (int j = 0; j < 3; j++) {
            size_t o = job->offsets[((size_t)p * n + i) * 3 + j];
            if (v[j].w && o != SIZE_MAX) {
                moe->packer->grid_make(&v[j], moe->grid_mem[p] + o);
                v[j].grid = moe->grid_mem[p] + o;
            }
        }
    }
}

static kt_status make_grids(kt_moe_backend *moe)
{
    const char *env = getenv("KT_AMX_GRID");
    if (!moe->packer || !moe->packer->grid_bytes || moe->d.method != KT_METHOD_AMXINT4)
        return KT_OK;
    int E = moe->E, P = moe->n_pools;
    size_t n = (size_t)moe->n_layers * E, need = 0;
    size_t *offsets = kt__malloc_array((size_t)P * n * 3, sizeof(size_t));
    if (!offsets)
        return kt__error(KT_ERR_NOMEM, "moe: out of memory for the grid offsets");
    for (int p = 0; p < P; p++) {
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            const kt__wmat *v = moe->layers[i / (size_t)E].view + ((size_t)p * E + i % E) * 3;
            for (int j = 0; j < 3; j++) {
                size_t b = v[j].w ? moe->packer->grid_bytes(&v[j]) : 0;
                offsets[((size_t)p * n + i) * 3 + j] = b ? total : SIZE_MAX;
                total += round64(b);
            }
        }
        moe->grid_bytes[p] = total;
        need += total;
    }
    uint64_t avail = need ? mem_available() : 0;
    if (!need || (!(env && !strcmp(env, "1")) && avail && need > avail / 2)) {
        if (need)
            kt__log(moe->rt, KT_LOG_WARN,
                    "moe: AMXINT4 grid factors not made at create: they would take %.1f GiB, "
                    "more than half of the %.1f GiB available (KT_AMX_GRID=1 forces them)",
                    (double)need / (1 << 30), (double)avail / (1 << 30));
        kt__free(offsets);
        return KT_OK;
    }
    for (int p = 0; p < P; p++) {
        if (!moe->grid_bytes[p])
            continue;
        moe->grid_mem[p] = kt__malloc_aligned(moe->grid_bytes[p], (size_t)2 << 20);
        if (!moe->grid_mem[p]) {
            kt__free(offsets);
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for pool %d's grid factors "
                             "(%zu MiB)", p, moe->grid_bytes[p] >> 20);
        }
#ifdef MADV_HUGEPAGE
        madvise(moe->grid_mem[p], moe->grid_bytes[p], MADV_HUGEPAGE);
#endif
    }
    grid_job job = {moe, offsets};
    kt__pool_run(moe->pool, make_grid_items, &job);
    kt__free(offsets);
    kt__log(moe->rt, KT_LOG_INFO, "moe: AMXINT4 grid factors made at create: %.1f MiB",
            (double)need / (1 << 20));
    return KT_OK;
}

/* KT_MOE_PROFILE (for measuring): where each worker's time of a call goes.
 * Phase 1 and phase 2 are timed whole and their epilogues (activation and
 * quantization of h; the weighted sums into acc) apart; barrier: waiting for
 * the other workers (the imbalance), phase 3 included. Apart, the waits' parts:
 * start (from kt_moe_submit until the worker began the task: the pool's
 * wake-up), wait0 (after phase 0: the barrier or the planner's plan), waitx (the
 * flow's waits for an expert's h inside phase 2, out of phase 2's time), end
 * (from the worker's end of the task to the last worker's: what the call's
 * caller waits beyond this worker; prof_end). PROF_END_AT holds a worker's last
 * end time, not a sum. PROF_LATE counts the calls a worker started more than
 * PROF_LATE_US after the submit and PROF_LATE_S sums those starts: an average
 * start does not tell a few calls held for milliseconds (a thread that took
 * the worker's CPU) from a slow wake-up in every call. */
enum { PROF_PHASE0, PROF_PACKX, PROF_PHASE1, PROF_EPI1, PROF_PACKH, PROF_PHASE2, PROF_EPI2,
       PROF_WAIT, PROF_START, PROF_WAIT0, PROF_WAITX, PROF_END, PROF_END_AT, PROF_LATE,
       PROF_LATE_S, PROF_N };
#define PROF_LATE_US 50

static double stamp_now(void);

/* Adds the time since *t to part `part` of worker tid, and restarts *t. */
static inline void prof_lap(kt_moe_backend *moe, int tid, int part, double *t)
{
    if (!moe->prof)
        return;
    double now = stamp_now();
    moe->prof[(size_t)tid * PROF_N + part] += now - *t;
    *t = now;
}

/* The pool barrier between phases, its wait counted by the profile. */
static inline void barrier_lap(kt_moe_backend *moe, int tid, double *t)
{
    kt__pool_barrier(moe->pool, tid);
    prof_lap(moe, tid, PROF_WAIT, t);
}

static void prof_print(const kt_moe_backend *moe)
{
    double calls = moe->prof ? moe->prof[(size_t)moe->nth * PROF_N] : 0;
    if (calls <= 0)
        return;
    double ms[PROF_N] = {0};
    for (int t = 0; t < moe->nth; t++)
        for (int j = 0; j < PROF_N; j++)
            ms[j] += moe->prof[(size_t)t * PROF_N + j] * 1e3 / moe->nth / calls;
    kt__log(moe->rt, KT_LOG_WARN,
            "moe profile: %.0f calls, ms per call and worker: phase0 %.2f, pack x %.2f, "
            "gate/up gemm %.2f, activation %.2f, pack h %.2f, down gemm %.2f, sums %.2f, "
            "barriers %.2f", calls, ms[PROF_PHASE0], ms[PROF_PACKX],
            ms[PROF_PHASE1] - ms[PROF_EPI1], ms[PROF_EPI1], ms[PROF_PACKH],
            ms[PROF_PHASE2] - ms[PROF_EPI2] - ms[PROF_WAITX], ms[PROF_EPI2],
            ms[PROF_WAIT] + ms[PROF_WAIT0] + ms[PROF_WAITX]);
    kt__log(moe->rt, KT_LOG_WARN,
            "moe profile: waits, ms per call and worker: start %.3f, after phase 0 %.3f, "
            "after phase 1 %.3f, for an expert in phase 2 %.3f, end %.3f (flow %d); "
            "the waiter's return after the last worker %.3f (%.0f waits)",
            ms[PROF_START], ms[PROF_WAIT0], ms[PROF_WAIT], ms[PROF_WAITX], ms[PROF_END],
            moe->dec_flow, moe->prof_rets > 0 ? moe->prof_ret * 1e3 / moe->prof_rets : 0.0,
            moe->prof_rets);
    if (moe->prof_rets > 0)
        kt__log(moe->rt, KT_LOG_WARN, "moe profile: the waiter's returns within 5 / 10 / 20 / "
                "50 / 100 us / later: %.0f / %.0f / %.0f / %.0f / %.0f / %.0f", moe->prof_reth[0],
                moe->prof_reth[1], moe->prof_reth[2], moe->prof_reth[3], moe->prof_reth[4],
                moe->prof_reth[5]);
    /* per worker (the first 32): which one starts late, who waits for it */
    char line[32 * 24] = "";
    size_t used = 0;
    for (int t = 0; t < moe->nth && t < 32 && used < sizeof line; t++) {
        int n = snprintf(line + used, sizeof line - used, " %.1f/%.1f",
                         moe->prof[(size_t)t * PROF_N + PROF_START] * 1e6 / calls,
                         moe->prof[(size_t)t * PROF_N + PROF_WAIT0] * 1e6 / calls);
        used += n > 0 ? (size_t)n : 0;
    }
    kt__log(moe->rt, KT_LOG_WARN, "moe profile: workers' start / wait after phase 0, us:%s",
            line);
    line[0] = '\0';
    used = 0;
    for (int t = 0; t < moe->nth && t < 32 && used < sizeof line; t++) {
        const double *w = moe->prof + (size_t)t * PROF_N;
        int n = snprintf(line + used, sizeof line - used, " %.0f/%.0f/%.1f",
                         w[PROF_PHASE1] * 1e6 / calls,
                         (w[PROF_PHASE2] - w[PROF_WAITX]) * 1e6 / calls,
                         w[PROF_WAITX] * 1e6 / calls);
        used += n > 0 ? (size_t)n : 0;
    }
    kt__log(moe->rt, KT_LOG_WARN, "moe profile: workers' phase 1 / phase 2 / its waits for an "
            "expert, us:%s", line);
    line[0] = '\0';
    used = 0;
    for (int t = 0; t < moe->nth && t < 32 && used < sizeof line; t++) {
        const double *w = moe->prof + (size_t)t * PROF_N;
        int n = w[PROF_LATE] > 0 ? snprintf(line + used, sizeof line - used, " %.0f/%.2f",
                                            w[PROF_LATE], w[PROF_LATE_S] * 1e3 / w[PROF_LATE])
                                 : snprintf(line + used, sizeof line - used, " 0/-");
        used += n > 0 ? (size_t)n : 0;
    }
    kt__log(moe->rt, KT_LOG_WARN, "moe profile: workers' calls started over %d us after the "
            "submit / their mean start, ms (of %.0f calls):%s", PROF_LATE_US, calls, line);
    /* the spread over workers (imbalance), then the AMX loops' split */
    double lo[PROF_N], hi[PROF_N];
    for (int j = 0; j < PROF_N; j++) {
        lo[j] = 1e300;
        hi[j] = 0;
        for (int t = 0; t < moe->nth; t++) {
            const double *w = moe->prof + (size_t)t * PROF_N;
            double v = (j == PROF_PHASE2 ? w[j] - w[PROF_WAITX]
                        : j == PROF_WAIT ? w[j] + w[PROF_WAIT0] + w[PROF_WAITX]
                                         : w[j]) * 1e3 / calls;
            lo[j] = v < lo[j] ? v : lo[j];
            hi[j] = v > hi[j] ? v : hi[j];
        }
    }
    kt__log(moe->rt, KT_LOG_WARN,
            "moe profile: workers' min-max ms per call: phase 1 %.2f-%.2f, phase 2 %.2f-%.2f, "
            "barriers %.2f-%.2f", lo[PROF_PHASE1], hi[PROF_PHASE1], lo[PROF_PHASE2],
            hi[PROF_PHASE2], lo[PROF_WAIT], hi[PROF_WAIT]);
#if KT_HAVE_ISA_AMX
    /* compiled for AMX: an ASan build's prologue already uses AVX-512 stores
     * (SIGILL on the Zen 3 with KT_MOE_PROFILE=1) */
    const uint64_t amx_isa = AVX512_NEED | KT_ISA_AMX_TILE;
    char amx[2048], *save = NULL;
    if ((kt_hw_isa() & amx_isa) == amx_isa && kt__moe_amx_profile(amx, sizeof amx, calls))
        for (char *line = strtok_r(amx, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            kt__log(moe->rt, KT_LOG_WARN, "moe profile: %s", line);
#endif
}

void kt_moe_backend_free(kt_moe_backend *moe)
{
    if (!moe)
        return;
    kt__pool_free(moe->pool);
    free_layers(moe);
    kt__free(moe->layer_map);
    kt__free_aligned(moe->xq);
    kt__free_aligned(moe->hq);
    kt__free_aligned(moe->pkx);
    kt__free_aligned(moe->pkh);
    for (int p = 0; p < 64; p++) {
        if (moe->pool_mem[p])
            pool_mem_free(moe, p);
        kt__free_aligned(moe->grid_mem[p]);
    }
    kt__free_aligned(moe->acc);
    kt__free_aligned(moe->scratch);
    kt__free_aligned((void *)moe->done1);
    kt__free_aligned(moe->plan_seen);
    kt__free(moe->cnt);
    kt__free(moe->off);
    kt__free(moe->cur);
    kt__free(moe->active);
    kt__free(moe->pair_tok);
    kt__free(moe->pair_w);
    kt__free(moe->stamp);
    prof_print(moe);
    kt__free(moe->prof);
    if (moe->release)
        moe->release(moe->owned);
    kt__free(moe);
}

void kt__moe_backend_own(kt_moe_backend *moe, void (*release)(void *), void *owned)
{
    moe->release = release;
    moe->owned = owned;
}

static void *alloc_ws(kt_moe_backend *moe, size_t bytes)
{
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0)
        bytes = 64;
    void *p = kt__malloc_aligned(bytes, 64);
    if (p) {
        memset(p, 0, bytes); /* touch now: no page faults on the hot path */
        moe->workspace_bytes += bytes;
    }
    return p;
}

/* The kernel set of method d->method (not LLAMAFILE) at activation precision
 * prec (kt_moe_precision). */
static const kt__moe_kernels *pick_set(const kt_moe_desc *d, int32_t prec)
{
    bool precise = prec != KT_MOE_PREC_DEFAULT;
    const kt__moe_kernels *k =
        precise ? kt__moe_pick_kernels_precise(d->method) : kt__moe_pick_kernels(d->method);
    if (d->method == KT_METHOD_AMXINT4 && d->group_size > 32 &&
        !(k && k->act == KT__ACT_BF16X2)) /* the x2 sets take any group */
        k = kt__moe_pick_int4g(precise);
    return k;
}

static kt_status check_desc(const kt_moe_desc *d)
{
    if (d->flags)
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_desc.flags must be 0");
    if (d->method != KT_METHOD_BF16 && d->method != KT_METHOD_FP8 &&
        d->method != KT_METHOD_RAWINT4 && d->method != KT_METHOD_AMXINT8 &&
        d->method != KT_METHOD_AMXINT4 && d->method != KT_METHOD_LLAMAFILE)
        return kt__error(KT_ERR_UNSUPPORTED, "moe: method %d (%s) has no CPU MoE kernels yet",
                         d->method,
                         kt_method_name((kt_method)d->method) ? kt_method_name((kt_method)d->method)
                                                              : "unknown");
    if (d->act != KT_MOE_ACT_SILU && d->act != KT_MOE_ACT_SWIGLU_OAI)
        return kt__error(KT_ERR_INVALID_ARG, "moe: unknown activation %d", d->act);
    if (d->hidden == 0 || d->intermediate == 0 || d->n_experts == 0 || d->top_k == 0)
        return kt__error(KT_ERR_INVALID_ARG,
                         "moe: hidden, intermediate, n_experts and top_k must be > 0 "
                         "(got %u, %u, %u, %u)",
                         d->hidden, d->intermediate, d->n_experts, d->top_k);
    if (d->hidden > (1u << 20) || d->intermediate > (1u << 20) || d->n_experts > 65536 ||
        d->top_k > 64 || d->top_k > d->n_experts)
        return kt__error(KT_ERR_INVALID_ARG,
                         "moe: shape out of range (hidden %u, intermediate %u, experts %u, "
                         "top_k %u)",
                         d->hidden, d->intermediate, d->n_experts, d->top_k);
    if ((d->method == KT_METHOD_RAWINT4 || d->method == KT_METHOD_AMXINT4) &&
        (d->hidden % 32 || d->intermediate % 32))
        return kt__error(KT_ERR_INVALID_ARG,
                         "moe: RAWINT4 needs hidden and intermediate multiples of 32 "
                         "(got %u, %u)",
                         d->hidden, d->intermediate);
    uint32_t g = d->group_size;
    if (d->method != KT_METHOD_AMXINT4 && g != 0)
        return kt__error(KT_ERR_INVALID_ARG, "moe: group_size %u is for AMXINT4 only", g);
    if (d->method == KT_METHOD_AMXINT4 && g != 0 &&
        ((g != 32 && g != 64 && g != 128) || d->hidden % g || d->intermediate % g))
        return kt__error(KT_ERR_INVALID_ARG,
                         "moe: AMXINT4 group_size %u: expected 32, 64 or 128 dividing hidden "
                         "%u and intermediate %u",
                         g, d->hidden, d->intermediate);
    return KT_OK;
}

/* Activation rows' stride: bytes a multiple of 4 KiB get one more line, so
 * that the rows a kernel tile reads side by side (and the weight rows it
 * reads with them) do not all fall into one L1 set (BF16 prefill tiles, 32
 * tokens, rows of 2048: 197 -> 211 GFLOP/s per Zen 4 core). */
static size_t act_stride(size_t row_bytes)
{
    return row_bytes % 4096 ? row_bytes : row_bytes + 64;
}

/* The largest pool's I slice (at least 1). */
static int widest_slice(const kt_moe_backend *moe)
{
    int widest = 1;
    for (int p = 0; p < moe->n_pools; p++)
        if (moe->pool_i0[p + 1] - moe->pool_i0[p] > widest)
            widest = moe->pool_i0[p + 1] - moe->pool_i0[p];
    return widest;
}

/* Prefill rows per phase-1 (down false) or phase-2 item: `rows`, or for AMXINT8 and
 * AMXINT4 on the INT8 tiles (the AMX packer's sets) RB_TILES, in phase 2 only while
 * that leaves at least 4 items a worker. A kernel call streams the next 32-row
 * block's weights under the current block's tiles, but its first block starts cold
 * (INT4: its first chunk rescaled with the tiles idle), and a 64-row item is two
 * blocks: a T=512 Qwen3-30B-A3B call on 2 threads made ~3,600 calls a worker. 64 ->
 * 256 rows there (xeon2, 2 threads): AMXINT4 g32 T=512 1.12-1.13 -> 1.28-1.36 TFLOP/s,
 * AMXINT8 0.88-1.08 -> 0.98-1.15 (3 alternating pairs); the 16-core Xeon (phase 1
 * only) DeepSeek-V3 T=1024 AMXINT4 5.97-6.18 -> 6.41-7.34 (docs/performance.md). */
static int prefill_rows(const kt_moe_backend *moe, int rows, bool down)
{
    /* (and LLAMAFILE's AMX set: the same cold first block a call; Q4_0 T=2048 0.71 ->
     * 0.98 TFLOP/s with 256 rows against 64, xeon2) */
    bool lf_tiles = moe->d.method == KT_METHOD_LLAMAFILE && kt__lf_amx_set(moe->kern);
    if (!lf_tiles &&
        (!moe->packer || (moe->d.method != KT_METHOD_AMXINT8 && moe->d.method != KT_METHOD_AMXINT4)))
        return rows;
    int r = RB_TILES;
    if (down)
        while (r > rows && moe->H / r < 4 * moe->nth)
            r -= 64;
    return r > rows ? r : rows;
}

/* *ws (of old_bytes) replaced by a zeroed block of bytes; false: out of memory,
 * *ws kept. */
static bool regrow_ws(kt_moe_backend *moe, uint8_t **ws, size_t old_bytes, size_t bytes)
{
    uint8_t *p = alloc_ws(moe, bytes);
    if (!p)
        return false;
    moe->workspace_bytes -= (old_bytes + 63) & ~(size_t)63;
    kt__free_aligned(*ws);
    *ws = p;
    return true;
}

kt_status kt_moe_backend_create(kt_moe_backend **out, kt_runtime *rt, const kt_moe_desc *desc,
                                const kt_moe_layer_weights *layers, uint32_t n_layers,
                                const kt_moe_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_backend_create: out is NULL");
    *out = NULL;
    if (!desc || !layers || n_layers == 0)
        return kt__error(KT_ERR_INVALID_ARG,
                         "kt_moe_backend_create: desc and at least one layer are required");
    kt_moe_backend *moe = kt__calloc(1, sizeof *moe);
    if (!moe)
        return kt__error(KT_ERR_NOMEM, "moe: out of memory");
    kt_moe_desc d = KT_MOE_DESC_INIT;
    kt_moe_options o = KT_MOE_OPTIONS_INIT;
    kt_status st = kt__options_read(&d, sizeof d, desc, "kt_moe_desc");
    if (st >= 0)
        st = kt__options_read(&o, sizeof o, opts, "kt_moe_options");
    if (st >= 0)
        st = check_desc(&d);
    if (st >= 0 && (o.flags || o.n_threads < 0 || o.n_pools < 0 || o.max_tokens < 0 ||
                    o.max_tokens > (1 << 20)))
        st = kt__error(KT_ERR_INVALID_ARG,
                       "kt_moe_options: flags must be 0 and counts >= 0 (max_tokens <= 2^20)");
    if (st >= 0 &&
        (o.act_precision < KT_MOE_PREC_DEFAULT || o.act_precision > KT_MOE_PREC_F32))
        st = kt__error(KT_ERR_INVALID_ARG,
                       "kt_moe_options: act_precision %d is not a kt_moe_precision",
                       o.act_precision);
    if (st < 0) {
        kt__free(moe);
        return st;
    }
    moe->rt = rt;
    moe->d = d;
    moe->o = o;
    moe->H = (int)d.hidden;
    moe->I = (int)d.intermediate;
    moe->E = (int)d.n_experts;
    moe->max_k = (int)d.top_k;
    moe->max_t = o.max_tokens ? o.max_tokens : 512;
    moe->alpha = d.swiglu_alpha != 0.0f ? d.swiglu_alpha : 1.702f;
    moe->limit = d.swiglu_limit != 0.0f ? d.swiglu_limit : 7.0f;
    if (d.method == KT_METHOD_LLAMAFILE) /* picked again once the block types are known */
        moe->kern = kt__moe_llamafile_kernels(0, KT__GGML_ACT_F32);
    else
        moe->kern = pick_set(&d, o.act_precision);
    if (d.method == KT_METHOD_AMXINT4 && d.group_size == 32)
        moe->d.group_size = 0; /* the RAWINT4 kernels: one scale per 32 */
    if (forced_kern)
        moe->kern = forced_kern;
    atomic_init(&moe->err_status, 0);
    if (!moe->kern) {
        kt_moe_backend_free(moe);
        return kt__error(KT_ERR_UNSUPPORTED, "moe: no kernel for method %s",
                         kt_method_name((kt_method)d.method));
    }

    moe->n_layers = n_layers;
    moe->layers = kt__calloc(n_layers, sizeof *moe->layers);
    if (!moe->layers) {
        kt_moe_backend_free(moe);
        return kt__error(KT_ERR_NOMEM, "moe: out of memory");
    }
    for (uint32_t l = 0; l < n_layers; l++) {
        if ((st = load_layer(moe, &moe->layers[l], &layers[l], l)) < 0) {
            kt_moe_backend_free(moe);
            return kt__error_prefix(st, "kt_moe_backend_create");
        }
    }

    if (d.method == KT_METHOD_LLAMAFILE) {
        moe->kern = pick_llamafile(moe);
        prefault_llamafile(moe);
    }

    kt_pool_config pc = {o.n_threads, o.n_pools, o.pin_threads != 0};
    if ((st = kt__pool_create(&moe->pool, &pc)) < 0) {
        kt_moe_backend_free(moe);
        return st;
    }
    moe->nth = kt__pool_n_threads(moe->pool);
    moe->n_pools = kt__pool_n_pools(moe->pool);
    decode_items(moe);
    if (moe->n_pools > 64)
        moe->n_pools = 64;
    /* I slices per pool, aligned to the format's block (FP8 128, else 32) */
    int align = 128; /* FP8 scale blocks; AVX-512 RAWINT4 chunks of 64 */
    if (d.method == KT_METHOD_LLAMAFILE)
        align = 256; /* Q8_K activation blocks */
    for (int p = 0; p <= moe->n_pools; p++) {
        int64_t b = (int64_t)moe->I * p / moe->n_pools;
        b = p == moe->n_pools ? moe->I : (b / align) * align;
        moe->pool_i0[p] = (int)b;
    }

    if ((st = make_pool_views(moe)) < 0) {
        kt_moe_backend_free(moe);
        return st;
    }

    int H = moe->H, I = moe->I, E = moe->E, T = moe->max_t, K = moe->max_k;
    size_t pairs = (size_t)T * K;
    int widest = widest_slice(moe);
    moe->xrow = act_stride(kt__moe_act_row_bytes(moe->kern->act, H));
    moe->hrow = act_stride(kt__moe_act_row_bytes(moe->kern->act, widest));
#if KT_HAVE_ISA_AMX
    /* only where the AMX sets can run: the packer's first call initialises
     * them, which runs AVX-512 code (SIGILL on an AVX2-only CPU) */
    if ((kt_hw_isa() & isa_cap & (AVX512_NEED | KT_ISA_AMX_TILE)) ==
        (AVX512_NEED | KT_ISA_AMX_TILE))
        moe->packer = kt__moe_packer_amx(moe->kern);
#endif
    if (forced_kern)
        moe->packer = forced_packer;
    /* prefill items of RB1 / RB2 rows, or prefill_rows' for the INT8 tiles
     * (KT_MOE_PREFILL_ROWS / _ROWS2, multiples of 64 up to 512: for measuring);
     * tiles [MCH][tile_rb], or fewer tokens of wider items */
    const char *pr = getenv("KT_MOE_PREFILL_ROWS"), *pr2 = getenv("KT_MOE_PREFILL_ROWS2");
    moe->pf_rb1 = pr && atoi(pr) % 64 == 0 && atoi(pr) > 0 && atoi(pr) <= RB_MAX
                      ? atoi(pr)
                      : prefill_rows(moe, RB1, false);
    moe->pf_rb2 = pr2 && atoi(pr2) % 64 == 0 && atoi(pr2) > 0 && atoi(pr2) <= RB_MAX
                      ? atoi(pr2)
                      : prefill_rows(moe, RB2, true);
    moe->tile_rb = moe->pf_rb1 > moe->pf_rb2 ? moe->pf_rb1 : moe->pf_rb2;
    size_t rb = (size_t)moe->tile_rb;
    moe->scratch_stride = ((size_t)(((H > I ? H : I) + 15) & ~15) * 4 /* f32 row      */
                           + (size_t)3 * MCH * rb * 4         /* gate, up, down tiles */
                           + moe->kern->scratch_bytes + 255) & ~(size_t)63;
    moe->xq = alloc_ws(moe, (size_t)T * moe->xrow);
    moe->hq = alloc_ws(moe, (size_t)moe->n_pools * pairs * moe->hrow);
    moe->acc = alloc_ws(moe, (size_t)moe->n_pools * T * H * sizeof(float));
    moe->scratch = alloc_ws(moe, (size_t)moe->nth * moe->scratch_stride);
    moe->cnt = kt__calloc((size_t)E, sizeof(int32_t));
    moe->off = kt__calloc((size_t)E + 1, sizeof(int32_t));
    moe->cur = kt__calloc((size_t)E, sizeof(int32_t));
    moe->active = kt__calloc((size_t)E, sizeof(int32_t));
    moe->pair_tok = kt__calloc(pairs, sizeof(int32_t));
    moe->pair_w = kt__calloc(pairs, sizeof(float));
    moe->done1 = alloc_ws(moe, (size_t)moe->n_pools * E * sizeof *moe->done1);
    moe->plan_seen = alloc_ws(moe, (size_t)moe->nth * 16 * sizeof *moe->plan_seen);
    if (!moe->xq || !moe->hq || !moe->acc || !moe->scratch || !moe->cnt || !moe->off ||
        !moe->cur || !moe->active || !moe->pair_tok || !moe->pair_w || !moe->done1 ||
        !moe->plan_seen) {
        kt_moe_backend_free(moe);
        return kt__error(KT_ERR_NOMEM, "moe: out of memory for workspaces (max_tokens %d)", T);
    }
    if (moe->packer) {
        /* expert a of the active list, tokens from off[e]: blocks from
         * off[e] / 16 + a, so at most pairs / 16 + min(E, pairs) + 1 */
        moe->pk_blocks = pairs / 16 + (pairs < (size_t)E ? pairs : (size_t)E) + 1;
        moe->pkx_block = moe->packer->bytes(16, H);
        moe->pkh_block = moe->packer->bytes(16, widest);
        moe->pkx = alloc_ws(moe, (size_t)moe->n_pools * moe->pk_blocks * moe->pkx_block);
        moe->pkh = alloc_ws(moe, (size_t)moe->n_pools * moe->pk_blocks * moe->pkh_block);
        if (!moe->pkx || !moe->pkh) {
            kt_moe_backend_free(moe);
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for the packed activations "
                             "(max_tokens %d)", T);
        }
    }
    if ((st = make_grids(moe)) < 0) {
        kt_moe_backend_free(moe);
        return st;
    }
    if (getenv("KT_MOE_PROFILE"))
        moe->prof = kt__calloc((size_t)moe->nth * PROF_N + 1, sizeof(double));
#if KT_HAVE_ISA_AVX512
    moe->silu16 = (kt_hw_isa() & isa_cap & KT_ISA_AVX512F) != 0;
#endif
#if KT_HAVE_ISA_AVX2
    /* KT_MOE_SILU=scalar: expf per element where there is no AVX-512 (for A/B) */
    const char *silu = getenv("KT_MOE_SILU");
    moe->silu8 = !moe->silu16 && (kt_hw_isa() & isa_cap & AVX2_NEED) == AVX2_NEED &&
                 !(silu && !strcmp(silu, "scalar"));
#endif
    /* a set's hint is code of the set's own level (the AVX-512 LLAMAFILE sets', the
     * AVX2 one's for its decode tiles), picked for this CPU as the set was */
    moe->kpf = moe->kern->prefetch;
    const char *dr = getenv("KT_MOE_DECODE_READ");
    if (dr && !strcmp(dr, "1")) {
        moe->dec_read = kt__moe_read_sum;
#if KT_HAVE_ISA_AVX2
        if ((kt_hw_isa() & isa_cap & KT_ISA_AVX2) == KT_ISA_AVX2)
            moe->dec_read = kt__moe_read_sum_avx2;
#endif
#if KT_HAVE_ISA_AVX512
        if (moe->silu16)
            moe->dec_read = kt__moe_read_sum_avx512;
#endif
        kt__log(rt, KT_LOG_WARN, "moe: KT_MOE_DECODE_READ=1: decode calls read the weights, "
                "they do not compute (outputs are wrong)");
    }
    kt__log(rt, KT_LOG_INFO, "moe: %s %s, H %d I %d E %d k %d, %d threads, %d pools, %u layers",
            kt_method_name((kt_method)d.method), moe->kern->name, H, I, E, K, moe->nth,
            moe->n_pools, n_layers);
    *out = moe;
    return KT_OK;
}

kt_status kt__moe_set_layer_map(kt_moe_backend *moe, const int32_t *map, uint32_t n)
{
    moe->layer_map = kt__malloc_array(n, sizeof(int32_t));
    if (!moe->layer_map)
        return kt__error(KT_ERR_NOMEM, "moe: out of memory");
    memcpy(moe->layer_map, map, (size_t)n * sizeof(int32_t));
    moe->n_map = n;
    return KT_OK;
}

struct kt_pool *kt__moe_backend_pool(kt_moe_backend *moe)
{
    return moe ? moe->pool : NULL;
}

/* Backend slot of a caller's layer index. */
static kt_status resolve_layer(const kt_moe_backend *moe, uint32_t layer, uint32_t *slot)
{
    if (moe->layer_map) {
        if (layer >= moe->n_map || moe->layer_map[layer] < 0)
            return kt__error(KT_ERR_INVALID_ARG, "moe: layer %u is not a MoE layer of the model",
                             layer);
        *slot = (uint32_t)moe->layer_map[layer];
        return KT_OK;
    }
    if (layer >= moe->n_layers)
        return kt__error(KT_ERR_INVALID_ARG, "moe: layer %u out of range (%u layers)", layer,
                         moe->n_layers);
    *slot = layer;
    return KT_OK;
}

kt_status kt_moe_set_expert_mask(kt_moe_backend *moe, uint32_t layer, const uint8_t *mask)
{
    uint32_t slot = 0;
    if (!moe)
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_set_expert_mask: backend is NULL");
    kt_status st = resolve_layer(moe, layer, &slot);
    if (st < 0)
        return st;
    atomic_store(&moe->layers[slot].mask, mask);
    return KT_OK;
}

kt_status kt_moe_backend_info(const kt_moe_backend *moe, kt_moe_info *info)
{
    if (!moe || !info || info->struct_size < sizeof(uint32_t))
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_backend_info: bad arguments");
    kt_moe_info i = KT_MOE_INFO_INIT;
    i.method = moe->d.method;
    i.n_threads = moe->nth;
    i.n_pools = moe->n_pools;
    i.max_tokens = moe->max_t;
    i.n_layers = moe->layer_map ? moe->n_map : moe->n_layers;
    i.hidden = (uint32_t)moe->H;
    i.intermediate = (uint32_t)moe->I;
    i.n_experts = (uint32_t)moe->E;
    i.top_k = (uint32_t)moe->max_k;
    i.isa = moe->kern->name;
    i.expert_bytes = expert_bytes(moe->d.method, (uint64_t)moe->H, (uint64_t)moe->I,
                                  moe->d.group_size);
    if (moe->d.method == KT_METHOD_LLAMAFILE) {
        const moe_layer *L0 = &moe->layers[0];
        for (int e = 0; e < moe->E; e++)
            if (L0->gate[e].w) {
                i.expert_bytes = (uint64_t)moe->I * (kt__ggml_row_bytes(L0->gate[e].type, moe->H) +
                                                     kt__ggml_row_bytes(L0->up[e].type, moe->H)) +
                                 (uint64_t)moe->H * kt__ggml_row_bytes(L0->down[e].type, moe->I);
                break;
            }
    }
    i.workspace_bytes = moe->workspace_bytes;
    for (int p = 0; p < moe->n_pools && moe->pool_mem[0]; p++) /* copies or repacks */
        i.pool_bytes += moe->pool_bytes[p];
    i.pool_memory = !moe->pool_mem[0] ? "in place" : moe->pool_numa ? "numa_alloc_onnode"
                                                                    : "aligned";
    size_t n = info->struct_size < sizeof i ? info->struct_size : sizeof i;
    uint32_t caller_size = info->struct_size;
    memcpy(info, &i, n);
    info->struct_size = caller_size;
    return KT_OK;
}

/* ---------------------------------------------------------------------------
 * Execution
 */

static void task_error(kt_moe_backend *moe, kt_status st, const char *msg)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&moe->err_status, &expected, (int)st))
        snprintf(moe->err_msg, sizeof moe->err_msg, "%s", msg);
}


/* Per-thread scratch: f32 row [max(H, I)] (rounded to 16), then the gate, up
 * and down tiles [MCH][64] each, then the kernel's own scratch. */
static float *tile_base(const kt_moe_backend *moe, uint8_t *scr)
{
    int n = moe->H > moe->I ? moe->H : moe->I;
    return (float *)scr + ((n + 15) & ~15);
}

static inline float silu(float g)
{
    return g / (1.0f + expf(-g));
}

/* Worker 0, phase 0: pairs grouped by expert (off[e] .. off[e + 1]). */
static void group_pairs(kt_moe_backend *moe, const moe_layer *L, const kt_moe_io *io, int T)
{
    int E = moe->E, k = (int)io->top_k;
    const uint8_t *mask = atomic_load(&L->mask);
    memset(moe->cnt, 0, (size_t)E * sizeof(int32_t));
    bool bad = false;
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < k; j++) {
            size_t idx = (size_t)t * k + j;
            int64_t id = (io->flags & KT_MOE_IO_IDS_I64) ? ((const int64_t *)io->ids)[idx]
                                                          : ((const int32_t *)io->ids)[idx];
            if (id < 0)
                continue;
            if (id >= E) {
                bad = true;
                continue;
            }
            if (!L->gate[id].w || (mask && mask[id]))
                continue;
            moe->cnt[id]++;
        }
    }
    if (bad) {
        char msg[128];
        snprintf(msg, sizeof msg, "moe: an expert id is >= n_experts (%d); skipped", E);
        task_error(moe, KT_ERR_INVALID_ARG, msg);
    }
    int n_active = 0, sum = 0;
    for (int e = 0; e < E; e++) {
        moe->off[e] = sum;
        moe->cur[e] = sum;
        sum += moe->cnt[e];
        if (moe->cnt[e])
            moe->active[n_active++] = e;
    }
    moe->off[E] = sum;
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < k; j++) {
            size_t idx = (size_t)t * k + j;
            int64_t id = (io->flags & KT_MOE_IO_IDS_I64) ? ((const int64_t *)io->ids)[idx]
                                                          : ((const int32_t *)io->ids)[idx];
            if (id < 0 || id >= E || !L->gate[id].w || (mask && mask[id]))
                continue;
            int p = moe->cur[id]++;
            moe->pair_tok[p] = t;
            moe->pair_w[p] = io->w[idx];
        }
    }
    moe->n_active = n_active;
    int max_cnt = 0;
    for (int a = 0; a < n_active; a++)
        if (moe->cnt[moe->active[a]] > max_cnt)
            max_cnt = moe->cnt[moe->active[a]];
    moe->max_cnt = max_cnt;
}

/* Rows of `len` in about `blocks` equal items, a multiple of grain, at least grain. */
static int rows_per_item(int len, int blocks, int grain)
{
    int r = (len + blocks - 1) / blocks;
    r = (r + grain - 1) / grain * grain;
    return r < grain ? grain : r;
}

/* Block b of [0, S): blocks of rb rows, the last n of `small` rows; its rows
 * [*r0, *r1). Returns the number of blocks. */
static int split_block(int S, int rb, int small, int n, int b, int *r0, int *r1)
{
    int big = S - small * n, nbig = (big + rb - 1) / rb;
    if (b < nbig) {
        *r0 = b * rb;
        *r1 = *r0 + rb < big ? *r0 + rb : big;
    } else {
        *r0 = big + (b - nbig) * small;
        *r1 = *r0 + small < S ? *r0 + small : S;
    }
    return nbig + n;
}

/* The decode tail (dec_tail): n blocks of a quarter of rb rows (a multiple of
 * grain g) end [0, S); none where they would not be smaller or leave no room. */
static void tail_plan(int rb, int S, int n, int g, int *small, int *count)
{
    int q = rb / 4 / g * g;
    *small = q < g ? g : q;
    *count = *small < rb && *small * n < S ? n : 0;
}

/* Item sizes of pool p for this call. Decode (every expert has at most 4
 * tokens: the kernels stream each row once) takes the largest items that
 * leave each worker about 4 of them to balance with: a contiguous block of
 * 256 rows reads at 0.9-1.0 of a read loop, 64 rows at 0.75-0.9 (the
 * prefetchers restart at every block). Prefill keeps 64 rows. */
static void item_rows(kt_moe_backend *moe, int p)
{
    int nth = kt__pool_count(moe->pool, p);
    int slice = moe->pool_i0[p + 1] - moe->pool_i0[p];
    moe->rb1[p] = moe->pf_rb1;
    moe->rb2[p] = moe->pf_rb2;
    moe->ntail1[p] = moe->ntail2[p] = 0;
    if (moe->max_cnt > 4 || moe->n_active == 0 || slice <= 0)
        return;
    int want = moe->dec_items * nth, grain = moe->dec_grain;
    /* phase 1: n_active x blocks items over the slice */
    int blocks = (slice + RB_MAX - 1) / RB_MAX;
    while (blocks * moe->n_active < want && blocks * grain < slice)
        blocks *= 2;
    moe->rb1[p] = rows_per_item(slice, blocks, grain);
    /* phase 2: blocks of H rows, each over every active expert */
    blocks = (moe->H + RB_MAX - 1) / RB_MAX;
    if (blocks < want)
        blocks = want;
    moe->rb2[p] = rows_per_item(moe->H, blocks, moe->dec_grain2);
    if (moe->dec_tail) { /* one round of quarter items last: a worker waits less for the rest */
        int n = (nth + moe->n_active - 1) / moe->n_active;
        int g = moe->d.method == KT_METHOD_LLAMAFILE ? 32 : 64; /* as decode_items */
        tail_plan(moe->rb1[p], slice, n, g, &moe->tail1[p], &moe->ntail1[p]);
        tail_plan(moe->rb2[p], moe->H, nth, g, &moe->tail2[p], &moe->ntail2[p]);
    }
}

/* Phase-1 item `it` of pool p (slice rows): active expert *a, rows [*r0, *r1) of
 * the slice; returns the number of items. With a tail, block-major (every
 * expert's small blocks last), else expert-major. */
static int item1_at(const kt_moe_backend *moe, int p, int slice, int it, int *a, int *r0, int *r1)
{
    int nt = moe->ntail1[p], na = moe->n_active;
    int blocks = split_block(slice, moe->rb1[p], moe->tail1[p], nt, 0, r0, r1);
    *a = 0;
    if (blocks <= 0 || na <= 0) /* an empty slice, no expert: no items */
        return 0;
    *a = nt ? it % na : it / blocks;
    split_block(slice, moe->rb1[p], moe->tail1[p], nt, nt ? it / na : it % blocks, r0, r1);
    return blocks * na;
}

/* The kernel set and hint of a call of T tokens: kern1 for one token when
 * set (every worker picks the same from T; the call's rows fit both sets) */
static const kt__moe_kernels *kern_for(const kt_moe_backend *moe, int T)
{
    return T == 1 && moe->kern1 ? moe->kern1 : moe->kern;
}

static kt__moe_prefetch_fn kpf_for(const kt_moe_backend *moe, int T)
{
    return T == 1 && moe->kern1 ? moe->kpf1 : moe->kpf;
}

/* Tokens [t0, t1) of x [T][H] -> f32 row -> kernel format (xq), once per token. */
static void quant_tokens(kt_moe_backend *moe, const kt_moe_io *io, int T, int t0, int t1,
                         float *xf)
{
    int H = moe->H;
    for (int t = t0; t < t1; t++) {
        if (io->flags & KT_MOE_IO_X_F32) {
            memcpy(xf, (const float *)io->x + (size_t)t * H, (size_t)H * sizeof(float));
        } else {
            const uint16_t *xb = (const uint16_t *)io->x + (size_t)t * H;
            for (int h = 0; h < H; h++)
                xf[h] = kt__moe_bf16_f32(xb[h]);
        }
        kern_for(moe, T)->quant(xf, 0, H, H, moe->xq + (size_t)t * moe->xrow);
    }
}

/* Phase 0 of a chunk of T (<= max_tokens) tokens: the planner (worker 0, or
 * with alone the first worker to arrive) groups the pairs; alone it also
 * quantizes every token (the others wait for its plan only, plan_wait). */
static void phase0(kt_moe_backend *moe, const moe_task *task, int T, int tid, float *xf,
                   bool alone, bool planner)
{
    const kt_moe_io *io = &task->io;
    if (planner) {
        kt__moe_new_epoch(); /* new activations: kernels drop packed copies */
        moe->cur_t = T;
        moe->n_active = 0;
        group_pairs(moe, &moe->layers[task->layer], io, T);
        for (int p = 0; p < moe->n_pools; p++) {
            atomic_store(&moe->item1[p], 0);
            atomic_store(&moe->item2[p], 0);
            atomic_store(&moe->itemx[p], 0);
            atomic_store(&moe->itemh[p], 0);
            item_rows(moe, p);
        }
        /* prefill (the items of 64 rows, see item_rows): pack shared */
        moe->pk_on = moe->packer && moe->max_cnt > 4 && moe->max_cnt >= moe->packer->min_m;
        moe->flow_call = moe->dec_flow >= 1 && moe->max_cnt <= 4 && !moe->pk_on;
        for (int p = 0; p < moe->n_pools && moe->flow_call; p++) {
            int r0, r1, a;
            int slice = moe->pool_i0[p + 1] - moe->pool_i0[p];
            int n = item1_at(moe, p, slice, 0, &a, &r0, &r1);
            moe->blocks1[p] = moe->n_active ? n / moe->n_active : 0;
            for (a = 0; a < moe->n_active; a++)
                atomic_store_explicit(&moe->done1[(size_t)p * moe->E + a], 0,
                                      memory_order_relaxed);
        }
    }
    if (T > 0) {
        int t0 = alone ? 0 : (int)((int64_t)T * tid / moe->nth);
        int t1 = alone ? (planner ? T : 0) : (int)((int64_t)T * (tid + 1) / moe->nth);
        quant_tokens(moe, io, T, t0, t1, xf);
    }
    if (planner) /* the plan (and with alone the tokens) for plan_wait */
        atomic_store_explicit(&moe->plan_seq, atomic_load(&moe->plan_seq) + 1,
                              memory_order_release);
}

/* Waits after phase 0 until every worker is there (barrier), or alone until
 * the planner has published this chunk's plan; counts the chunks either way. */
static void plan_wait(kt_moe_backend *moe, int tid, bool alone, double *t)
{
    unsigned want = ++moe->plan_seen[(size_t)tid * 16];
    if (!alone) {
        kt__pool_barrier(moe->pool, tid);
    } else {
        for (int i = 0; (int)(atomic_load_explicit(&moe->plan_seq, memory_order_acquire) -
                              want) < 0; i++)
            kt__spin_step(i);
    }
    prof_lap(moe, tid, PROF_WAIT0, t);
}

/* Phase 2 (flow_call): waits until active expert a's phase-1 items of pool p
 * have all written their h; the wait is profiled as waitx. */
static void wait_expert(kt_moe_backend *moe, int p, int a, int tid)
{
    _Atomic int *c = &moe->done1[(size_t)p * moe->E + a];
    int need = moe->blocks1[p];
    if (atomic_load_explicit(c, memory_order_acquire) >= need)
        return;
    double t = moe->prof ? stamp_now() : 0.0;
    for (int i = 0; atomic_load_explicit(c, memory_order_acquire) < need; i++)
        kt__spin_step(i);
    prof_lap(moe, tid, PROF_WAITX, &t);
}

/* The packed tokens of expert a (of the active list; first pair base) in
 * pool p: x for the gate / up items, else h for the down items. */
static uint8_t *pk_region(const kt_moe_backend *moe, int p, int a, int base, bool down)
{
    size_t blk = down ? moe->pkh_block : moe->pkx_block;
    return (down ? moe->pkh : moe->pkx) +
           ((size_t)p * moe->pk_blocks + (size_t)base / 16 + (size_t)a) * blk;
}

/* Phases 0b / 1b (pk_on): each active expert's tokens packed once, by one
 * worker of each pool, for every item of the next phase to read (instead of
 * every worker packing them again for its items): x rows (K = H) before
 * phase 1, h rows of the pool's slice before phase 2. */
static void pack_phase(kt_moe_backend *moe, int tid, bool down)
{
    int p = kt__pool_pool_of(moe->pool, tid);
    int slice = moe->pool_i0[p + 1] - moe->pool_i0[p];
    size_t pairs = (size_t)moe->max_t * moe->max_k;
    const uint8_t *hq = moe->hq + (size_t)p * pairs * moe->hrow;
    _Atomic int *next = down ? &moe->itemh[p] : &moe->itemx[p];
    if (down && slice <= 0)
        return;
    for (;;) {
        int a = atomic_fetch_add(next, 1);
        if (a >= moe->n_active)
            break;
        int e = moe->active[a];
        int base = moe->off[e], cnt = moe->off[e + 1] - base;
        if (cnt < moe->packer->min_m)
            continue;
        uint8_t *P = pk_region(moe, p, a, base, down);
        if (down)
            moe->packer->pack(hq + (size_t)base * moe->hrow, moe->hrow, NULL, cnt, slice, P);
        else
            moe->packer->pack(moe->xq, moe->xrow, moe->pair_tok + base, cnt, moe->H, P);
    }
}

/* KT_MOE_DECODE_READ: whether this call's items read instead of computing
 * (decode: no expert has more than 4 tokens, as item_rows); then rows [n0, n1)
 * of W are read by moe->dec_read, the sum kept in *sink so no load is dropped. */
static bool read_items(const kt_moe_backend *moe)
{
    return moe->dec_read && moe->max_cnt <= 4 && !moe->pk_on;
}

static void read_rows(const kt_moe_backend *moe, const kt__wmat *W, int n0, int n1,
                      volatile uint64_t *sink)
{
    kt__moe_span sp[2];
    int n = kt__moe_row_spans(moe->d.method, W, n0, n1, sp);
    for (int i = 0; i < n; i++)
        *sink += moe->dec_read(sp[i].p, sp[i].n);
}

/* Phase 1: h = act(gate x, up x) for items (active expert, RB1 rows of the
 * pool's I slice). */
static void phase1(kt_moe_backend *moe, const moe_task *task, int tid, uint8_t *scr)
{
    const moe_layer *L = &moe->layers[task->layer];
    int p = kt__pool_pool_of(moe->pool, tid);
    int i0 = moe->pool_i0[p], i1 = moe->pool_i0[p + 1];
    int rb = moe->rb1[p], mch = MCH * moe->tile_rb / rb;       /* C tiles [mch][rb] */
    int a_it, r0, r1, a_nx, q0, q1; /* this / the next item: active expert, slice rows */
    int n_items = item1_at(moe, p, i1 - i0, 0, &a_it, &r0, &r1);
    float *hf = (float *)scr;                                  /* [I]        */
    float *cg = tile_base(moe, scr);                           /* [mch][rb]  */
    float *cu = cg + (size_t)MCH * moe->tile_rb;               /* [mch][rb]  */
    void *kscr = cg + (size_t)3 * MCH * moe->tile_rb;
    int I = moe->I;
    bool oai = moe->d.act == KT_MOE_ACT_SWIGLU_OAI;
    size_t pairs = (size_t)moe->max_t * moe->max_k;
    uint8_t *hq = moe->hq + (size_t)p * pairs * moe->hrow;    /* this pool's h slices */
    const kt__moe_kernels *kern = kern_for(moe, moe->cur_t);
    kt__moe_prefetch_fn kpf = kpf_for(moe, moe->cur_t);
    bool reading = read_items(moe);
    volatile uint64_t sink = 0;
    if (reading)
        kpf = NULL;
    /* packed prefill takes its next item one ahead, to start that item's gate
     * rows into L2 while this one computes (and the up rows before the gate) */
    int next = atomic_fetch_add(&moe->item1[p], 1);
    for (;;) {
        int it = next;
        if (it >= n_items)
            break;
        next = atomic_fetch_add(&moe->item1[p], 1);
        item1_at(moe, p, i1 - i0, it, &a_it, &r0, &r1);
        if (next < n_items)
            item1_at(moe, p, i1 - i0, next, &a_nx, &q0, &q1);
        if (moe->pk_on) {
            const kt__wmat *vi = L->view + ((size_t)p * moe->E + moe->active[a_it]) * 3;
            moe->packer->prefetch(&vi[1], r0, r1);
            if (next < n_items) {
                const kt__wmat *vn = L->view + ((size_t)p * moe->E + moe->active[a_nx]) * 3;
                moe->packer->prefetch(&vn[0], q0, q1);
            }
        }
        int e = moe->active[a_it];
        int n0 = i0 + r0, n1 = i0 + r1;
        int nb = n1 - n0;
        int base = moe->off[e], cnt = moe->off[e + 1] - base;
        const float *gb = L->gate_bias ? L->gate_bias + (size_t)e * I : NULL;
        const float *ub = L->up_bias ? L->up_bias + (size_t)e * I : NULL;
        const kt__wmat *v = L->view + ((size_t)p * moe->E + e) * 3; /* rows from i0 */
        if (kpf && !moe->pk_on) { /* this item's up rows, the next item's gate rows */
            kpf(&v[1], n0 - i0, n1 - i0, cnt);
            if (next < n_items) {
                int en = moe->active[a_nx];
                kpf(&L->view[((size_t)p * moe->E + en) * 3], q0, q1,
                         moe->off[en + 1] - moe->off[en]);
            }
        }
        for (int mc = 0; mc < cnt; mc += mch) {
            int M = cnt - mc < mch ? cnt - mc : mch;
            const int32_t *rows = moe->pair_tok + base + mc;
            if (reading) {
                read_rows(moe, &v[0], n0 - i0, n1 - i0, &sink);
                read_rows(moe, &v[1], n0 - i0, n1 - i0, &sink);
            } else if (moe->pk_on && cnt >= moe->packer->min_m && mch % 16 == 0) {
                const uint8_t *P = pk_region(moe, p, a_it, base, false);
                moe->packer->gemm(&v[0], n0 - i0, n1 - i0, P, cnt, mc, M, cg, rb, kscr);
                moe->packer->gemm(&v[1], n0 - i0, n1 - i0, P, cnt, mc, M, cu, rb, kscr);
            } else {
                kern->gemm(&v[0], n0 - i0, n1 - i0, 0, moe->H, moe->xq, moe->xrow, rows, M,
                           cg, rb, kscr);
                kern->gemm(&v[1], n0 - i0, n1 - i0, 0, moe->H, moe->xq, moe->xrow, rows, M,
                           cu, rb, kscr);
            }
            double te = moe->prof ? stamp_now() : 0.0;
            for (int m = 0; m < M; m++) {
                const float *g = cg + (size_t)m * rb, *u = cu + (size_t)m * rb;
                if (!oai) {
                    /* h = silu(g) * u */
#if KT_HAVE_ISA_AVX512
                    if (moe->silu16)
                        kt__moe_silu_mul_avx512(g, u, hf + n0, nb);
                    else
#endif
#if KT_HAVE_ISA_AVX2
                    if (moe->silu8)
                        kt__moe_silu_mul_avx2(g, u, hf + n0, nb);
                    else
#endif
                        for (int n = 0; n < nb; n++)
                            hf[n0 + n] = silu(g[n]) * u[n];
                } else {
                    /* g' = min(g + bg, L), u' = clamp(u + bu, -L, L),
                     * h = (u' + 1) * g' * sigmoid(alpha g') */
                    for (int n = 0; n < nb; n++) {
                        float gv = g[n] + (gb ? gb[n0 + n] : 0.0f);
                        float uv = u[n] + (ub ? ub[n0 + n] : 0.0f);
                        gv = fminf(gv, moe->limit);
                        uv = fmaxf(fminf(uv, moe->limit), -moe->limit);
                        hf[n0 + n] = (uv + 1.0f) * gv / (1.0f + expf(-moe->alpha * gv));
                    }
                }
                /* h of the slice, indices from i0 */
                kern->quant(hf + i0, n0 - i0, n1 - i0, i1 - i0,
                            hq + (size_t)(base + mc + m) * moe->hrow);
            }
            prof_lap(moe, tid, PROF_EPI1, &te);
        }
        if (moe->flow_call) /* this item's h is written: for wait_expert */
            atomic_fetch_add_explicit(&moe->done1[(size_t)p * moe->E + a_it], 1,
                                      memory_order_release);
    }
}

static void write_out(const kt_moe_io *io, int H, int t, int n0, int n1, const float *src)
{
    bool accum = io->flags & KT_MOE_IO_ACCUMULATE;
    if (io->flags & KT_MOE_IO_OUT_F32) {
        float *o = (float *)io->out + (size_t)t * H;
        for (int n = n0; n < n1; n++)
            o[n] = accum ? o[n] + src[n] : src[n];
    } else {
        uint16_t *o = (uint16_t *)io->out + (size_t)t * H;
        for (int n = n0; n < n1; n++)
            o[n] = kt__moe_f32_bf16(accum ? kt__moe_bf16_f32(o[n]) + src[n] : src[n]);
    }
}

/* Pool p's sums of phase-2 item [n0, n1): [T][n1 - n0], the items one after
 * the other, so that the weighted sums of an item stay in a few pages (in
 * [T][H] rows, each token's 64 sums were a page and a cache set of their
 * own: 38 of 378 ms per call, DeepSeek-V3 T=4096 on the Xeon). */
static float *acc_item(const kt_moe_backend *moe, int p, int n0)
{
    return moe->acc + (size_t)p * moe->max_t * moe->H + (size_t)n0 * moe->cur_t;
}

/* Phase 2: out rows [n0, n1) = sum over active experts and their tokens of
 * w * down_e h over the pool's I slice. */
static void phase2(kt_moe_backend *moe, const moe_task *task, int tid, uint8_t *scr)
{
    const moe_layer *L = &moe->layers[task->layer];
    int p = kt__pool_pool_of(moe->pool, tid);
    int k0 = moe->pool_i0[p], k1 = moe->pool_i0[p + 1];
    int H = moe->H, T = moe->cur_t;
    int rb = moe->rb2[p], mch = MCH * moe->tile_rb / rb, n0, n1;
    int n_items = split_block(H, rb, moe->tail2[p], moe->ntail2[p], 0, &n0, &n1);
    float *cd = tile_base(moe, scr) + (size_t)2 * MCH * moe->tile_rb; /* [mch][rb] */
    void *kscr = tile_base(moe, scr) + (size_t)3 * MCH * moe->tile_rb;
    bool single = moe->n_pools == 1;
    size_t pairs = (size_t)moe->max_t * moe->max_k;
    const uint8_t *hq = moe->hq + (size_t)p * pairs * moe->hrow;
    const kt__moe_kernels *kern = kern_for(moe, T);
    kt__moe_prefetch_fn kpf = kpf_for(moe, T);
    bool reading = read_items(moe);
    volatile uint64_t sink = 0;
    if (reading)
        kpf = NULL;
    for (;;) {
        int it = atomic_fetch_add(&moe->item2[p], 1);
        if (it >= n_items)
            break;
        split_block(H, rb, moe->tail2[p], moe->ntail2[p], it, &n0, &n1);
        int nb = n1 - n0;
        float *acc = acc_item(moe, p, n0);
        memset(acc, 0, (size_t)T * nb * sizeof(float));
        if (k1 > k0) {
            for (int a = 0; a < moe->n_active; a++) {
                int e = moe->active[a];
                int base = moe->off[e], cnt = moe->off[e + 1] - base;
                const float *db = (L->down_bias && p == 0) ? L->down_bias + (size_t)e * H : NULL;
                if (moe->flow_call)
                    wait_expert(moe, p, a, tid);
                for (int mc = 0; mc < cnt; mc += mch) {
                    int M = cnt - mc < mch ? cnt - mc : mch;
                    /* the pool's down columns [k0, k1) as [0, k1 - k0) */
                    const kt__wmat *v = L->view + ((size_t)p * moe->E + e) * 3;
                    if (reading) {
                        read_rows(moe, &v[2], n0, n1, &sink);
                    } else if (moe->pk_on && cnt >= moe->packer->min_m && mch % 16 == 0 &&
                               v[2].cols == k1 - k0) {
                        if (mc == 0 && a + 1 < moe->n_active) /* the next expert's rows */
                            moe->packer->prefetch(
                                &L->view[((size_t)p * moe->E + moe->active[a + 1]) * 3 + 2], n0,
                                n1);
                        moe->packer->gemm(&v[2], n0, n1, pk_region(moe, p, a, base, true), cnt,
                                          mc, M, cd, rb, kscr);
                    } else {
                        if (kpf && mc == 0 && a + 1 < moe->n_active) {
                            int en = moe->active[a + 1]; /* the next expert's rows */
                            kpf(&L->view[((size_t)p * moe->E + en) * 3 + 2], n0, n1,
                                moe->off[en + 1] - moe->off[en]);
                        }
                        kern->gemm(&v[2], n0, n1, 0, k1 - k0,
                                   hq + (size_t)(base + mc) * moe->hrow, moe->hrow, NULL, M, cd,
                                   rb, kscr);
                    }
                    /* acc[t] += w * (down h + bias) */
                    double te = moe->prof ? stamp_now() : 0.0;
                    for (int m = 0; m < M; m++) {
                        float w = moe->pair_w[base + mc + m];
                        float *ar = acc + (size_t)moe->pair_tok[base + mc + m] * nb;
                        const float *c = cd + (size_t)m * rb;
                        if (db)
                            for (int n = 0; n < nb; n++)
                                ar[n] += w * (c[n] + db[n0 + n]);
                        else
                            for (int n = 0; n < nb; n++)
                                ar[n] += w * c[n];
                    }
                    prof_lap(moe, tid, PROF_EPI2, &te);
                }
            }
        }
        double te = moe->prof ? stamp_now() : 0.0;
        if (single)
            for (int t = 0; t < T; t++)
                write_out(&task->io, H, t, n0, n1, acc + (size_t)t * nb - n0);
        prof_lap(moe, tid, PROF_EPI2, &te);
    }
}

/* Phase 3 (several pools): out = sum of the pools' partials, split by token. */
static void phase3(kt_moe_backend *moe, const moe_task *task, int tid, float *row)
{
    int H = moe->H, T = moe->cur_t;
    int t0 = (int)((int64_t)T * tid / moe->nth), t1 = (int)((int64_t)T * (tid + 1) / moe->nth);
    for (int t = t0; t < t1; t++) {
        for (int p = 0; p < moe->n_pools; p++)
            for (int b = 0, n0, n1; b < split_block(H, moe->rb2[p], moe->tail2[p],
                                                    moe->ntail2[p], b, &n0, &n1); b++) {
                int nb = n1 - n0;
                const float *src = acc_item(moe, p, n0) + (size_t)t * nb;
                if (p == 0)
                    memcpy(row + n0, src, (size_t)nb * sizeof(float));
                else
                    for (int n = 0; n < nb; n++)
                        row[n0 + n] += src[n];
            }
        write_out(&task->io, H, t, 0, H, row);
    }
}

/* The call's tensors advanced by t0 tokens. */
static void offset_io(const kt_moe_backend *moe, kt_moe_io *io, int64_t t0)
{
    int64_t k = io->top_k, H = moe->H;
    size_t xs = (io->flags & KT_MOE_IO_X_F32) ? 4 : 2;
    size_t os = (io->flags & KT_MOE_IO_OUT_F32) ? 4 : 2;
    size_t is = (io->flags & KT_MOE_IO_IDS_I64) ? 8 : 4;
    io->x = (const char *)io->x + (size_t)(t0 * H) * xs;
    io->ids = (const char *)io->ids + (size_t)(t0 * k) * is;
    io->w += t0 * k;
    io->out = (char *)io->out + (size_t)(t0 * H) * os;
}

/* One task: T read now (every worker reads the same value), computed in
 * chunks of max_tokens, each with two barriers (three with several pools)
 * and one more between chunks (the next grouping overwrites this one's). */
static double stamp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_chunks(moe_task *task, int tid);

/* KT_MOE_PROFILE: the task's last worker to end adds to every worker's end
 * part how long before it that worker ended (the next task starts after all). */
static void prof_end(kt_moe_backend *moe, int tid)
{
    double now = stamp_now();
    moe->prof[(size_t)tid * PROF_N + PROF_END_AT] = now;
    if (atomic_fetch_add(&moe->prof_ended, 1) != moe->nth - 1)
        return;
    atomic_store(&moe->prof_ended, 0);
    moe->prof_last_end = now;
    for (int t = 0; t < moe->nth; t++) {
        double *w = moe->prof + (size_t)t * PROF_N;
        w[PROF_END] += now - w[PROF_END_AT];
    }
}

static void run_task(void *ctx, int tid)
{
    moe_task *task = ctx;
    kt_moe_backend *moe = task->moe;
    if (!moe->stamp) {
        run_chunks(task, tid);
        return;
    }
    moe->stamp[2 * tid] = stamp_now();
    run_chunks(task, tid);
    moe->stamp[2 * tid + 1] = stamp_now();
}

static void run_chunks(moe_task *task, int tid)
{
    kt_moe_backend *moe = task->moe;
    uint8_t *scr = moe->scratch + (size_t)tid * moe->scratch_stride;
    int32_t T = *task->io.n_tokens;
    if (T < 0) {
        if (tid == 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "moe: n_tokens is %d", (int)T);
            task_error(moe, KT_ERR_INVALID_ARG, msg);
        }
        return;
    }
    if (tid == 0 && moe->route_fn && !(task->io.flags & KT_MOE_IO_IDS_I64))
        moe->route_fn(moe->route_arg, task->asked, task->io.ids, T, (int32_t)task->io.top_k);
    for (int32_t t0 = 0; t0 == 0 || t0 < T; t0 += moe->max_t) {
        moe_task chunk = *task;
        int n = T - t0 < moe->max_t ? T - t0 : moe->max_t;
        if (t0 > 0) {
            kt__pool_barrier(moe->pool, tid);
            offset_io(moe, &chunk.io, t0);
        }
        double t = moe->prof ? stamp_now() : 0.0;
        if (moe->prof && t0 == 0) {
            double *w = moe->prof + (size_t)tid * PROF_N;
            w[PROF_START] += t - task->posted;
            if (t - task->posted > PROF_LATE_US * 1e-6) {
                w[PROF_LATE] += 1;
                w[PROF_LATE_S] += t - task->posted;
            }
        }
        /* a few tokens: the first worker to arrive quantizes them beside its
         * grouping (a few us), and nobody waits for the last one to arrive
         * (each worker takes one ticket a chunk: a chunk's nth tickets are
         * all taken before the next chunk's, behind a barrier or the pool's
         * job order) */
        bool alone = moe->dec_flow >= 2 && n <= FLOW_T;
        bool planner = alone ? atomic_fetch_add(&moe->arrivals, 1) % (uint64_t)moe->nth == 0
                             : tid == 0;
        phase0(moe, &chunk, n, tid, (float *)scr, alone, planner);
        prof_lap(moe, tid, PROF_PHASE0, &t);
        plan_wait(moe, tid, alone, &t);
        if (moe->pk_on) {
            pack_phase(moe, tid, false);
            prof_lap(moe, tid, PROF_PACKX, &t);
            barrier_lap(moe, tid, &t);
        }
        phase1(moe, &chunk, tid, scr);
        prof_lap(moe, tid, PROF_PHASE1, &t);
        if (!moe->flow_call) /* else phase 2 waits per expert (wait_expert) */
            barrier_lap(moe, tid, &t);
        if (moe->pk_on) {
            pack_phase(moe, tid, true);
            prof_lap(moe, tid, PROF_PACKH, &t);
            barrier_lap(moe, tid, &t);
        }
        phase2(moe, &chunk, tid, scr);
        prof_lap(moe, tid, PROF_PHASE2, &t);
        if (moe->n_pools > 1) {
            kt__pool_barrier(moe->pool, tid);
            phase3(moe, &chunk, tid, (float *)scr);
            prof_lap(moe, tid, PROF_WAIT, &t);
        }
    }
    if (moe->prof && tid == 0)
        moe->prof[(size_t)moe->nth * PROF_N] += 1;
    if (moe->prof)
        prof_end(moe, tid);
}

static kt_status check_io(const kt_moe_backend *moe, uint32_t layer, const kt_moe_io *io,
                          uint32_t *slot)
{
    if (!moe || !io)
        return kt__error(KT_ERR_INVALID_ARG, "moe: backend and io are required");
    if (io->struct_size < sizeof(kt_moe_io))
        return kt__error(KT_ERR_VERSION, "moe: kt_moe_io.struct_size %u is too small",
                         io->struct_size);
    kt_status st = resolve_layer(moe, layer, slot);
    if (st < 0)
        return st;
    uint32_t known = KT_MOE_IO_X_F32 | KT_MOE_IO_IDS_I64 | KT_MOE_IO_OUT_F32 |
                     KT_MOE_IO_ACCUMULATE;
    if (io->flags & ~known)
        return kt__error(KT_ERR_INVALID_ARG, "moe: unknown kt_moe_io flags 0x%x", io->flags);
    if (io->top_k == 0 || io->top_k > (uint32_t)moe->max_k)
        return kt__error(KT_ERR_INVALID_ARG, "moe: top_k %u outside 1..%d", io->top_k,
                         moe->max_k);
    if (!io->n_tokens || !io->x || !io->ids || !io->w || !io->out)
        return kt__error(KT_ERR_INVALID_ARG, "moe: n_tokens, x, ids, w and out are required");
    return KT_OK;
}

/* Queues a task (kt_moe_submit), or with call runs it with the calling
 * thread as the last worker and returns when it is done (kt__pool_call). */
static kt_status post_task(kt_moe_backend *moe, uint32_t layer, const kt_moe_io *io, bool call)
{
    uint32_t slot = 0;
    kt_status st = check_io(moe, layer, io, &slot);
    if (st < 0)
        return st;
    uint64_t seq = kt__pool_posted(moe->pool);
    if (seq - kt__pool_done(moe->pool) >= KT_MOE_QUEUE_DEPTH)
        return kt__error(KT_ERR_LIMIT, "moe: %d tasks already pending", KT_MOE_QUEUE_DEPTH);
    moe_task *task = &moe->tasks[seq % KT_MOE_QUEUE_DEPTH];
    task->moe = moe;
    task->layer = slot;
    task->asked = layer;
    task->io = *io;
    task->posted = moe->prof ? stamp_now() : 0.0;
    if (!(call ? kt__pool_call(moe->pool, run_task, task)
               : kt__pool_post(moe->pool, run_task, task)))
        return kt__error(KT_ERR_LIMIT, "moe: %d tasks already pending", KT_MOE_QUEUE_DEPTH);
    return KT_OK;
}

kt_status kt_moe_submit(kt_moe_backend *moe, uint32_t layer, const kt_moe_io *io)
{
    return post_task(moe, layer, io, false);
}

kt_status kt_moe_wait(kt_moe_backend *moe, uint32_t max_pending)
{
    if (!moe)
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_wait: backend is NULL");
    uint64_t posted = kt__pool_posted(moe->pool);
    if (posted > max_pending) {
        bool waits = moe->prof && kt__pool_done(moe->pool) < posted - max_pending;
        kt__pool_wait(moe->pool, posted - max_pending);
        if (waits && max_pending == 0) { /* the caller's wake-up after the last worker */
            double r = stamp_now() - moe->prof_last_end;
            moe->prof_ret += r;
            moe->prof_rets += 1;
            moe->prof_reth[r < 5e-6 ? 0 : r < 10e-6 ? 1 : r < 20e-6 ? 2 : r < 50e-6 ? 3
                           : r < 100e-6 ? 4 : 5] += 1;
        }
    }
    int st = atomic_load(&moe->err_status);
    if (st != 0) {
        kt_status s = kt__error((kt_status)st, "%s", moe->err_msg);
        atomic_store(&moe->err_status, 0);
        return s;
    }
    return KT_OK;
}

kt_status kt__moe_stamp_enable(kt_moe_backend *moe)
{
    if (!moe)
        return kt__error(KT_ERR_INVALID_ARG, "kt__moe_stamp_enable: backend is NULL");
    kt_moe_wait(moe, 0); /* no task reads the pointer while it changes */
    if (!moe->stamp && !(moe->stamp = kt__calloc((size_t)moe->nth * 2, sizeof(double))))
        return kt__error(KT_ERR_NOMEM, "moe: out of memory for task stamps");
    return KT_OK;
}

void kt__moe_set_route_observer(kt_moe_backend *moe, kt__moe_route_fn fn, void *arg)
{
    kt_moe_wait(moe, 0); /* no task reads the pointers while they change */
    moe->route_fn = fn;
    moe->route_arg = arg;
}

kt_status kt__moe_set_decode_precision(kt_moe_backend *moe, int32_t act_precision)
{
    if (!moe || act_precision < KT_MOE_PREC_DEFAULT || act_precision > KT_MOE_PREC_F32)
        return kt__error(KT_ERR_INVALID_ARG, "kt__moe_set_decode_precision: no backend, or "
                         "act_precision %d is not a kt_moe_precision", (int)act_precision);
    kt_moe_wait(moe, 0); /* no task reads the set while it changes */
    moe->kern1 = NULL;
    moe->kpf1 = NULL;
    if (moe->d.method == KT_METHOD_LLAMAFILE || forced_kern || moe->int4_tiled)
        return kt__error(KT_ERR_UNSUPPORTED, "moe: %s experts%s keep one kernel set",
                         kt_method_name((kt_method)moe->d.method),
                         moe->int4_tiled ? " in 4-row tiles" : "");
    const kt__moe_kernels *k = pick_set(&moe->d, act_precision);
    if (!k || k == moe->kern)
        return KT_OK;
    /* wider rows or more scratch than the creation's set: the workspaces grow
     * (both sets then use the wider row strides) */
    size_t xrow = act_stride(kt__moe_act_row_bytes(k->act, moe->H));
    size_t hrow = act_stride(kt__moe_act_row_bytes(k->act, widest_slice(moe)));
    size_t tq = (size_t)moe->max_t, pq = (size_t)moe->n_pools * moe->max_t * moe->max_k;
    if (xrow > moe->xrow) {
        if (!regrow_ws(moe, &moe->xq, tq * moe->xrow, tq * xrow))
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for %s's rows", k->name);
        moe->xrow = xrow;
    }
    if (hrow > moe->hrow) {
        if (!regrow_ws(moe, &moe->hq, pq * moe->hrow, pq * hrow))
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for %s's rows", k->name);
        moe->hrow = hrow;
    }
    if (k->scratch_bytes > moe->kern->scratch_bytes) {
        size_t stride = moe->scratch_stride + ((k->scratch_bytes - moe->kern->scratch_bytes +
                                                63) & ~(size_t)63);
        if (!regrow_ws(moe, &moe->scratch, (size_t)moe->nth * moe->scratch_stride,
                       (size_t)moe->nth * stride))
            return kt__error(KT_ERR_NOMEM, "moe: out of memory for %s's scratch", k->name);
        moe->scratch_stride = stride;
    }
    moe->kern1 = k;
    moe->kpf1 = k->prefetch;
    kt__log(moe->rt, KT_LOG_INFO, "moe: one-token calls on %s (the rest on %s)", k->name,
            moe->kern->name);
    return KT_OK;
}

bool kt__moe_task_stamps(const kt_moe_backend *moe, double *first_start, double *last_start,
                         double *last_end)
{
    if (!moe || !moe->stamp)
        return false;
    double f = moe->stamp[0], l = moe->stamp[0], e = moe->stamp[1];
    for (int t = 1; t < moe->nth; t++) {
        f = moe->stamp[2 * t] < f ? moe->stamp[2 * t] : f;
        l = moe->stamp[2 * t] > l ? moe->stamp[2 * t] : l;
        e = moe->stamp[2 * t + 1] > e ? moe->stamp[2 * t + 1] : e;
    }
    *first_start = f;
    *last_start = l;
    *last_end = e;
    return true;
}

kt_status kt_moe_forward(kt_moe_backend *moe, uint32_t layer, const kt_moe_io *io)
{
    bool call = moe && moe->call_share;
    kt_status st = post_task(moe, layer, io, call);
    if (st == KT_ERR_LIMIT) {
        kt_moe_wait(moe, 0);
        st = post_task(moe, layer, io, call);
    }
    if (st < 0)
        return st;
    return kt_moe_wait(moe, 0);
}
