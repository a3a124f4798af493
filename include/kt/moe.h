/*
 * kt/moe.h - the CPU MoE backend: computes the CPU-resident experts of a
 * Mixture-of-Experts layer, for libkt's own engine and for engines that hold
 * the weights themselves (SGLang, vLLM, llama.cpp-style runtimes).
 *
 * Per MoE layer and call, with T tokens and top-k routing:
 *
 *     out[t] (+)= sum over j < k with ids[t][j] >= 0, not masked:
 *                 w[t][j] * FFN_{ids[t][j]}(x[t])
 *     FFN_e(x) = down_e( silu(gate_e x) * (up_e x) )            (KT_MOE_ACT_SILU)
 *
 * The weights are read in place (mmap'ed files or caller memory; nothing is
 * copied on a single NUMA node) in one of the methods of kt_method: BF16,
 * FP8 (E4M3 with 128x128 block scales) or RAWINT4 (compressed-tensors
 * pack-quantized INT4, group 32). One backend serves every MoE layer of a
 * model; its worker threads are created once and pinned one per physical core.
 *
 *     const void *gate[E], *up[E], *down[E];          // per expert, [I][H] and [H][I]
 *     kt_moe_desc d = KT_MOE_DESC_INIT;
 *     d.method = KT_METHOD_BF16;  d.hidden = H;  d.intermediate = I;
 *     d.n_experts = E;  d.top_k = k;
 *     kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
 *     lw.gate = gate;  lw.up = up;  lw.down = down;
 *     kt_moe_backend *moe = NULL;
 *     if (kt_moe_backend_create(&moe, NULL, &d, &lw, 1, NULL) < 0)
 *         fprintf(stderr, "%s\n", kt_last_error());
 *
 *     int32_t T = 3;                                   // read when the task runs
 *     kt_moe_io io = KT_MOE_IO_INIT;
 *     io.n_tokens = &T;  io.top_k = k;
 *     io.x = x_bf16;  io.ids = ids_i32;  io.w = weights;  io.out = out_bf16;
 *     kt_moe_forward(moe, 0, &io);                     // or kt_moe_submit + kt_moe_wait
 *     kt_moe_backend_free(moe);
 *
 * Thread contract: a kt_moe_backend is used by one thread at a time, except
 * that kt_moe_submit() and kt_moe_wait() may be called from different threads
 * (a CUDA host function submits, the engine thread waits). Tasks run in
 * submission order on the backend's own workers.
 */
#ifndef KT_MOE_H
#define KT_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/model.h"
#include "kt/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kt_moe_backend kt_moe_backend;

/* Expert FFN form. Values are ABI. */
typedef enum kt_moe_act {
    /* FFN(x) = down( silu(gate x) * (up x) )  (DeepSeek, Kimi, Qwen3, Mixtral, MiniMax) */
    KT_MOE_ACT_SILU = 0,
    /* gpt-oss clamped SwiGLU with biases:
     * g = min(gate x + bg, limit), u = clamp(up x + bu, -limit, limit),
     * FFN(x) = down( (u + 1) * g * sigmoid(alpha * g) ) + bd */
    KT_MOE_ACT_SWIGLU_OAI = 1
} kt_moe_act;

/* What every layer of the backend looks like. Required fields have no default. */
typedef struct kt_moe_desc {
    uint32_t struct_size;   /* sizeof(kt_moe_desc); set by the INIT macro               */
    uint32_t flags;         /* reserved, must be 0                                      */
    int32_t method;         /* kt_method: KT_METHOD_BF16, _FP8 or _RAWINT4               */
    int32_t act;            /* kt_moe_act; default KT_MOE_ACT_SILU                       */
    uint32_t hidden;        /* H, model width (required)                                 */
    uint32_t intermediate;  /* I, one expert's intermediate size (required)              */
    uint32_t n_experts;     /* E, routed experts per layer (required)                    */
    uint32_t top_k;         /* largest k a call may pass (required, 1..64)               */
    float swiglu_alpha;     /* KT_MOE_ACT_SWIGLU_OAI; 0: 1.702                           */
    float swiglu_limit;     /* KT_MOE_ACT_SWIGLU_OAI; 0: 7.0                             */
    /* KT_METHOD_AMXINT4: inputs per weight scale, 32 (0 means 32), 64 or 128; H and I
     * must be multiples of it. Other methods: 0. Since 0.1. */
    uint32_t group_size;
} kt_moe_desc;

#define KT_MOE_DESC_INIT \
    { (uint32_t)sizeof(kt_moe_desc), 0u, KT_METHOD_NONE, KT_MOE_ACT_SILU, 0u, 0u, 0u, 0u, \
      0.0f, 0.0f, 0u }

/* kt_moe_layer_weights.flags */
/* gpt-oss layout: gate[e] points at the fused gate_up matrix with gate and up
 * interleaved (gate row i = fused row 2i, up row i = fused row 2i+1, same for
 * the biases); up[e] and up_bias[e] are unused. */
#define KT_MOE_W_GATE_UP_FUSED (1u << 0)
/* Matrices stored [in][out] (gpt-oss's gate_up_proj [H][2I], down_proj [I][H])
 * instead of [out][in]. BF16 only. The backend keeps a transposed copy of such
 * layers (the only case where weights are copied). */
#define KT_MOE_W_IN_MAJOR (1u << 1)

/*
 * One MoE layer's weights, as arrays of E per-expert pointers (the arrays are
 * copied at create time; the weights they point to are borrowed and must stay
 * valid and unchanged until kt_moe_backend_free()). Matrices are row-major
 * [out][in] (nn.Linear), element type given by the method:
 *
 *   gate[e], up[e]   [I][H]    down[e]  [H][I]
 *   BF16:    BF16 elements; scales unused.
 *   FP8:     F8_E4M3 elements; *_scale[e] = weight_scale_inv, F32
 *            [ceil(out/128)][ceil(in/128)]; dequantized w = q * scale (edge
 *            blocks may be partial).
 *   RAWINT4: *[e] = weight_packed, int32 [out][in/8], 8 values per int32, the
 *            first in the lowest 4 bits, stored as value + 8 (value in -8..7);
 *            *_scale[e] = weight_scale, BF16 [out][in/32]; w = value * scale.
 *            H and I must be multiples of 32.
 *   AMXINT8: int8 elements; *_scale[e] F32 [out], w = q * scale (kt-convert
 *            --method int8).
 *   AMXINT4: the RAWINT4 layout with desc.group_size inputs per scale:
 *            *_scale[e] BF16 [out][in/group_size] (kt-convert --method int4).
 *
 * A NULL gate[e] marks expert e as absent from the CPU: it is always skipped.
 * Biases (KT_MOE_ACT_SWIGLU_OAI only; NULL arrays or entries: no bias) have
 * element type bias_type (KT_TYPE_BF16 or KT_TYPE_F32): gate_bias[e], up_bias[e]
 * [I] (fused: [2I] in gate_bias[e]), down_bias[e] [H].
 */
typedef struct kt_moe_layer_weights {
    uint32_t struct_size;            /* sizeof(kt_moe_layer_weights)                    */
    uint32_t flags;                  /* KT_MOE_W_*                                      */
    const void *const *gate;         /* [E]                                             */
    const void *const *up;           /* [E]                                             */
    const void *const *down;         /* [E]                                             */
    const void *const *gate_scale;   /* [E] or NULL (BF16)                              */
    const void *const *up_scale;     /* [E] or NULL                                     */
    const void *const *down_scale;   /* [E] or NULL                                     */
    const void *const *gate_bias;    /* [E] or NULL                                     */
    const void *const *up_bias;      /* [E] or NULL                                     */
    const void *const *down_bias;    /* [E] or NULL                                     */
    int32_t bias_type;               /* kt_type of the biases; default KT_TYPE_BF16     */
    /* KT_METHOD_LLAMAFILE: kt_type of each projection's ggml blocks (KT_TYPE_Q4_0,
     * _Q4_1, _Q5_0, _Q5_1, _Q8_0, _Q2_K.._Q6_K, _IQ4_NL, _IQ4_XS, _BF16, _F16, _F32);
     * gate[e] etc. point at the expert's [out] rows of blocks as a GGUF stores them
     * (a row is in / block_size blocks; in a multiple of the block size). Since 0.1. */
    int32_t gate_type, up_type, down_type;
} kt_moe_layer_weights;

#define KT_MOE_LAYER_WEIGHTS_INIT \
    { (uint32_t)sizeof(kt_moe_layer_weights), 0u, NULL, NULL, NULL, NULL, NULL, NULL, \
      NULL, NULL, NULL, KT_TYPE_BF16, KT_TYPE_INVALID, KT_TYPE_INVALID, KT_TYPE_INVALID }

/* kt_moe_options.act_precision: how activations (x, and the intermediate
 * silu(gate x) * up x) enter the expert kernels. Values are ABI. */
typedef enum kt_moe_precision {
    /* Each kernel's fastest format: BF16 on AVX-512 and AMX (RAWINT4 decode:
     * INT8 per 32 inputs), F32 on the AVX2 and scalar BF16 / FP8 kernels.
     * Relative error of a layer's output about 1e-2 (BF16) to 3e-2 (INT8). */
    KT_MOE_PREC_DEFAULT = 0,
    /* Each activation split into two BF16 numbers, x = hi + lo (about 16
     * significant bits), two dot products per weight, FP8 / INT4 scales applied
     * in F32 to exact partial sums: about 1e-5 relative, like F32 arithmetic.
     * About half the compute speed of the default; decode stays memory-bound.
     * AMX is not used (prefill runs on AVX-512); F32 activations on AVX2 and
     * scalar kernels. LLAMAFILE ignores it (llama.cpp's activation formats). */
    KT_MOE_PREC_BF16X2 = 1,
    /* F32-accurate activations: the same kernels as KT_MOE_PREC_BF16X2. */
    KT_MOE_PREC_F32 = 2
} kt_moe_precision;

/* Execution options; NULL means all defaults. */
typedef struct kt_moe_options {
    uint32_t struct_size;  /* sizeof(kt_moe_options)                                   */
    uint32_t flags;        /* reserved, must be 0                                      */
    int32_t n_threads;     /* worker threads; 0: physical cores (kt_hw_physical_cores) */
    int32_t n_pools;       /* NUMA pools; 0: NUMA nodes the workers run on             */
    int32_t max_tokens;    /* tokens computed at once; workspaces are sized for it; a
                              call with more runs in chunks of max_tokens; 0: 512     */
    int32_t pin_threads;   /* 1: pin workers one per physical core (default), 0: no    */
    int32_t act_precision; /* kt_moe_precision; 0: KT_MOE_PREC_DEFAULT. Since 0.1.     */
} kt_moe_options;

#define KT_MOE_OPTIONS_INIT { (uint32_t)sizeof(kt_moe_options), 0u, 0, 0, 0, 1, 0 }

/* Fills *opts with defaults; struct_size is the caller's sizeof(*opts). Since 0.1. */
KT_API kt_status kt_moe_options_init(kt_moe_options *opts, size_t struct_size);

/*
 * Creates a backend for n_layers MoE layers of one shape (desc) with
 * caller-held weights (layers[0..n_layers-1]; layer indices in later calls
 * are positions in this array). rt may be NULL (log to stderr); opts may be
 * NULL. Starts the worker threads and allocates every workspace, so later
 * calls allocate nothing. Fails with KT_ERR_INVALID_ARG (a bad shape or
 * pointer, named in the message), KT_ERR_UNSUPPORTED (method not built or act
 * not supported by the method), KT_ERR_NOMEM. Caller owns *out; free with
 * kt_moe_backend_free() (before rt). On failure *out is NULL. Since 0.1.
 */
KT_API kt_status kt_moe_backend_create(kt_moe_backend **out, kt_runtime *rt,
                                       const kt_moe_desc *desc,
                                       const kt_moe_layer_weights *layers, uint32_t n_layers,
                                       const kt_moe_options *opts);

/*
 * Creates a backend for every MoE layer of an opened model, reading the
 * routed experts in place (mmap'ed; nothing is copied except gpt-oss's
 * [in][out] experts) in the method their storage implies: BF16 weights ->
 * KT_METHOD_BF16, FP8 E4M3 with 128x128 F32 scales -> KT_METHOD_FP8,
 * compressed-tensors INT4 with group 32 -> KT_METHOD_RAWINT4. Layer indices
 * in later calls are the model's layer numbers; dense layers are rejected by
 * kt_moe_forward(). max_tokens etc. come from opts (NULL: defaults). Fails
 * with KT_ERR_UNSUPPORTED when the experts' storage has no method (named in
 * the message) or the model has no MoE layer. The model must outlive the
 * backend. Caller owns *out; free with kt_moe_backend_free(). Since 0.1.
 */
KT_API kt_status kt_moe_backend_create_from_model(kt_moe_backend **out, kt_runtime *rt,
                                                  const kt_model *model,
                                                  const kt_moe_options *opts);

/*
 * Creates a LLAMAFILE backend for the routed experts of a GGUF file, read in
 * place (mmap'ed; the mapping lives until kt_moe_backend_free()): every layer
 * N with tensors blk.N.ffn_{gate,up,down}_exps.weight (ggml ne {H, I, E} and
 * {I, H, E}; kt-convert --method gguf:TYPE and llama.cpp write them). H, I
 * and E come from the tensors and must agree across layers; layer indices in
 * later calls are the file's N (others are rejected by kt_moe_forward()).
 * top_k is the largest k a call may pass. Fails with KT_ERR_IO (file),
 * KT_ERR_FORMAT (no expert tensors, inconsistent shapes: named in the message),
 * KT_ERR_UNSUPPORTED (a block type LLAMAFILE does not run). Caller owns *out.
 * Since 0.1.
 */
KT_API kt_status kt_moe_backend_create_from_gguf(kt_moe_backend **out, kt_runtime *rt,
                                                 const char *path, uint32_t top_k,
                                                 const kt_moe_options *opts);

/* Waits for pending tasks, stops the workers and frees the backend; NULL is a
 * no-op. Since 0.1. */
KT_API void kt_moe_backend_free(kt_moe_backend *moe);

/*
 * Sets the expert mask of one layer: a borrowed pointer to uint8 [E], read
 * when each task of that layer runs (so a CUDA graph replays with the current
 * contents); nonzero = skip the expert (it is resident on a GPU). NULL: every
 * expert with weights runs on the CPU. The memory must stay valid while tasks
 * of the layer may run. Since 0.1.
 */
KT_API kt_status kt_moe_set_expert_mask(kt_moe_backend *moe, uint32_t layer,
                                        const uint8_t *mask);

/* kt_moe_io.flags */
#define KT_MOE_IO_X_F32 (1u << 0)      /* x is F32 (default BF16)                 */
#define KT_MOE_IO_IDS_I64 (1u << 1)    /* ids are int64 (default int32)           */
#define KT_MOE_IO_OUT_F32 (1u << 2)    /* out is F32 (default BF16)               */
#define KT_MOE_IO_ACCUMULATE (1u << 3) /* out += result (default: out = result)   */

/*
 * One call's arguments. All buffers are caller-owned and are read (out
 * written) when the task runs, not when it is submitted; for CUDA use them
 * from pinned memory. Row-major, tightly packed.
 */
typedef struct kt_moe_io {
    uint32_t struct_size;     /* sizeof(kt_moe_io)                                       */
    uint32_t flags;           /* KT_MOE_IO_*                                             */
    const int32_t *n_tokens;  /* -> T >= 0, read at execution time (any T: chunked)      */
    uint32_t top_k;           /* k: columns of ids and w; 1 <= k <= desc.top_k           */
    const void *x;            /* [T][H] BF16 or F32                                      */
    const void *ids;          /* [T][k] int32 or int64 expert ids; -1 (any < 0) = skip   */
    const float *w;           /* [T][k] routing weights, applied as given                */
    void *out;                /* [T][H] BF16 or F32                                      */
} kt_moe_io;

#define KT_MOE_IO_INIT { (uint32_t)sizeof(kt_moe_io), 0u, NULL, 0u, NULL, NULL, NULL, NULL }

/*
 * Computes one layer for the T tokens of io and returns when out is written.
 * Waits for earlier submitted tasks first. Returns KT_ERR_INVALID_ARG for a
 * bad layer, k, T < 0 or an expert id >= E (out is then unspecified; ids >= E
 * are skipped).
 * Since 0.1.
 */
KT_API kt_status kt_moe_forward(kt_moe_backend *moe, uint32_t layer, const kt_moe_io *io);

/* Tasks that may be pending at once; a further kt_moe_submit() fails. */
#define KT_MOE_QUEUE_DEPTH 16

/*
 * Queues one layer's computation and returns at once. Copies *io (the
 * pointers, not the data). Allocates nothing, takes no lock and never blocks,
 * so it may be called from a CUDA host function (cudaLaunchHostFunc).
 * Returns KT_ERR_LIMIT when KT_MOE_QUEUE_DEPTH tasks are pending,
 * KT_ERR_INVALID_ARG for a bad layer or io (checked now); problems found at
 * execution time (T, ids) are reported by kt_moe_wait(). Since 0.1.
 */
KT_API kt_status kt_moe_submit(kt_moe_backend *moe, uint32_t layer, const kt_moe_io *io);

/*
 * Blocks until at most max_pending submitted tasks are unfinished (0: all
 * done). Returns the first error of the tasks finished since the previous
 * kt_moe_wait() (message in kt_last_error() of the waiting thread), else
 * KT_OK. Since 0.1.
 */
KT_API kt_status kt_moe_wait(kt_moe_backend *moe, uint32_t max_pending);

/* The effective configuration (K25). Strings are static. */
typedef struct kt_moe_info {
    uint32_t struct_size;     /* sizeof(kt_moe_info); set by the caller                  */
    int32_t method;           /* kt_method                                               */
    int32_t n_threads;        /* worker threads running                                  */
    int32_t n_pools;          /* NUMA pools (each owns a slice of every expert's I)      */
    int32_t max_tokens;       /* T limit per call                                        */
    uint32_t n_layers;
    uint32_t hidden, intermediate, n_experts, top_k;
    const char *isa;          /* kernel path: "avx512-bf16", "avx2", "scalar", ...       */
    uint64_t expert_bytes;    /* bytes one expert's weights and scales occupy            */
    uint64_t workspace_bytes; /* host memory of the workspaces                            */
    /* Several pools: each holds a copy of its slice of every expert, in memory
     * of its NUMA node; LLAMAFILE Q4_0 experts (AVX-512) also a repacked copy
     * for decode, with one pool too (KT_LF_REPACK=0: none). Since 0.1. */
    uint64_t pool_bytes;      /* bytes of those copies, all pools (0: one pool, in place) */
    const char *pool_memory;  /* "in place" (one pool), "numa_alloc_onnode" (libnuma, more
                                 than one node), "aligned" (one node: ordinary memory)   */
} kt_moe_info;

#define KT_MOE_INFO_INIT \
    { (uint32_t)sizeof(kt_moe_info), 0, 0, 0, 0, 0u, 0u, 0u, 0u, 0u, NULL, 0u, 0u, 0u, NULL }

/* Fills *info (up to info->struct_size bytes). Since 0.1. */
KT_API kt_status kt_moe_backend_info(const kt_moe_backend *moe, kt_moe_info *info);

/* ---------------------------------------------------------------------------
 * Router helpers: logits [T][E] (FP32, the router's linear output) to top-k
 * expert ids and routing weights, exactly as each family's reference does.
 * Ties pick the lower expert index.
 */

/* Router kinds. Values are ABI. */
typedef enum kt_router_kind {
    /* p = softmax(logits); top-k of p; weights p[top] (renormalised to sum 1
     * with KT_ROUTER_F_RENORM): Qwen3-MoE, Mixtral (renorm), Qwen2-MoE (none). */
    KT_ROUTER_SOFTMAX_TOPK = 1,
    /* s = sigmoid(logits); selection on s + bias (e_score_correction_bias):
     * groups of E/n_group scored by the sum of their top-2, keep the best
     * topk_group groups, top-k inside them; weights s[top] (renormalised with
     * KT_ROUTER_F_RENORM, +1e-20 in the denominator) times
     * routed_scaling_factor: DeepSeek-V3, Kimi-K2, GLM-4.5 (n_group 1 = no
     * group step); MiniMax-M2 (n_group 1, renorm, scaling 1). */
    KT_ROUTER_SIGMOID_GROUPED = 2,
    /* l = logits + bias; top-k of l; weights softmax(l[top]): gpt-oss. */
    KT_ROUTER_TOPK_SOFTMAX = 3
} kt_router_kind;

#define KT_ROUTER_F_RENORM (1u << 0)

typedef struct kt_router_params {
    uint32_t struct_size;         /* sizeof(kt_router_params)                         */
    int32_t kind;                 /* kt_router_kind                                   */
    uint32_t flags;               /* KT_ROUTER_F_*                                    */
    uint32_t n_experts;           /* E                                                */
    uint32_t top_k;               /* k <= E                                           */
    uint32_t n_group;             /* SIGMOID_GROUPED; 0 or 1: no grouping             */
    uint32_t topk_group;          /* SIGMOID_GROUPED: groups kept                     */
    float routed_scaling_factor;  /* SIGMOID_GROUPED; 0: 1.0                          */
    const float *bias;            /* [E] or NULL: correction bias (SIGMOID_GROUPED) or
                                     router bias added to the logits (TOPK_SOFTMAX)   */
} kt_router_params;

#define KT_ROUTER_PARAMS_INIT \
    { (uint32_t)sizeof(kt_router_params), 0, 0u, 0u, 0u, 0u, 0u, 0.0f, NULL }

/*
 * Routes n_tokens tokens: logits [T][E] -> ids [T][k] (int32), weights [T][k]
 * (in selection order: best first) and, if scores is not NULL, scores [T][E]
 * (softmax probabilities, sigmoid scores, or for TOPK_SOFTMAX the biased
 * logits). Allocates nothing. Thread-safe. Since 0.1.
 */
KT_API kt_status kt_router_topk(const kt_router_params *params, const float *logits,
                                uint32_t n_tokens, int32_t *ids, float *weights,
                                float *scores);

#ifdef __cplusplus
}
#endif
#endif /* KT_MOE_H */
