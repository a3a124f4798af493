/*
 * Engine internals (lib/engine): the architecture description the forward
 * pass reads, weight matrices, KV cache and scratch buffers. Not installed.
 *
 * Conventions: activations are F32 row-major [T][dim]; a matrix is stored as
 * the Linear layer stores it, [out][in], in F32 (precision f32) or BF16 (fast
 * mode); per-token vectors (norm weights, biases) are always F32.
 */
#ifndef KT_ENGINE_INTERNAL_H
#define KT_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "io/convert_types.h"
#include "kt/engine.h"
#include "kt/model.h"
#include "kt/moe.h"
#include "kt/types.h"
#include "kt_internal.h"

#define KT__MAX_EOS 8

typedef enum kt__family {
    KT__FAM_QWEN3_MOE = 0,
    KT__FAM_QWEN2_MOE,
    KT__FAM_MIXTRAL,
    KT__FAM_MINIMAX_M2,
    KT__FAM_GPT_OSS,
    KT__FAM_DEEPSEEK_V3, /* also kimi_k2 */
    KT__FAM_GLM4_MOE,
} kt__family;

typedef enum kt__router {
    KT__ROUTER_SOFTMAX_TOPK = 0, /* softmax over all, top-k, optional renormalise      */
    KT__ROUTER_SIGMOID_BIAS,     /* sigmoid, top-k of s + bias (groups), weights from s */
    KT__ROUTER_TOPK_SOFTMAX,     /* top-k of logits (+ router bias), softmax over k     */
} kt__router;

typedef enum kt__qk_norm {
    KT__QK_NORM_NONE = 0,
    KT__QK_NORM_HEAD,  /* RMSNorm over each head's head_dim (Qwen3, GLM)     */
    KT__QK_NORM_FULL,  /* RMSNorm over the whole q / k projection (MiniMax)  */
} kt__qk_norm;

/* Everything the forward pass needs to know about the architecture. */
typedef struct kt__hparams {
    kt__family family;
    int32_t n_layer, n_embd, n_vocab;
    int32_t n_head, n_head_kv, head_dim; /* GQA; for MLA n_head only           */
    int32_t max_pos;
    float rms_eps;

    /* MLA (deepseek_v3 / kimi_k2) */
    bool mla;
    int32_t q_lora_rank;                 /* 0: plain q_proj                      */
    int32_t kv_lora_rank, qk_nope, qk_rope, v_head;

    /* attention */
    kt__qk_norm qk_norm;
    bool attn_bias;                      /* q/k/v biases                        */
    bool o_bias;
    bool sinks;
    int32_t sliding_window;              /* 0: none                             */
    bool *layer_sliding;                 /* [n_layer]                           */
    float attn_scale;                    /* softmax scale                       */

    /* rope */
    int32_t rope_dim;                    /* rotated dims per head               */
    bool rope_interleave;                /* pairs (2i, 2i+1) instead of halves   */
    float *inv_freq;                     /* [rope_dim / 2]                      */
    float rope_attn_factor;              /* multiplies cos and sin (YaRN)        */

    /* feed-forward */
    bool *layer_moe;                     /* [n_layer]                           */
    int32_t n_ff;                        /* dense MLP intermediate              */
    int32_t n_expert, n_expert_used, n_ff_exp;
    int32_t n_ff_shared;                 /* 0: no shared expert                 */
    bool shared_gate;                    /* qwen2_moe: sigmoid(gate(x)) * shared */
    kt__router router;
    bool router_bias;                    /* gpt-oss linear router bias          */
    bool norm_topk;
    float routed_scale;
    int32_t n_group, topk_group;
    bool gptoss_act;                     /* clamped SwiGLU with expert biases   */
    float act_alpha, act_limit;

    int32_t n_eos;
    int32_t eos[KT__MAX_EOS];
} kt__hparams;


/* A weight matrix [rows = out][cols = in]. */
typedef struct kt__mat {
    int32_t rows, cols;
    kt_type type;     /* KT_TYPE_F32, KT_TYPE_BF16 or KT_TYPE_F8_E4M3 (block scaled) */
    void *data;       /* NULL when the layer has no such matrix                   */
    bool owned;       /* data was allocated here (else borrowed from the model)    */
    /* F8_E4M3 only: w = fp8 · scale[r / block_rows][c / block_cols] */
    const void *scale;
    kt_type scale_type;               /* F32 or BF16 */
    int32_t block_rows, block_cols, scale_cols;
    void *packed;     /* oneDNN copy owned by the context's kt__dense (dense.c), or NULL */
    int8_t pack_state;/* dense.c: 0 not for oneDNN, 1 pack on first prefill use, -1 failed */
} kt__mat;

typedef struct kt__expert {
    kt__mat gate, up, down;
    float *b_gate, *b_up, *b_down; /* gpt-oss biases, else NULL */
} kt__expert;

typedef struct kt__layer {
    float *attn_norm, *ffn_norm;                 /* [H]                           */
    /* GQA */
    kt__mat wq, wk, wv, wo;
    float *bq, *bk, *bv, *bo;
    float *q_norm, *k_norm;                      /* [head_dim] or full width      */
    float *sinks;                                /* [n_head]                      */
    /* MLA */
    kt__mat wq_a, wq_b, wkv_a, wkv_b;
    float *q_a_norm, *kv_a_norm;
    /* dense MLP */
    kt__mat ffn_gate, ffn_up, ffn_down;
    /* MoE */
    kt__mat router;                              /* [E][H]                        */
    float *router_b;                             /* [E]                           */
    float *e_bias;                               /* [E] selection bias            */
    kt__expert *experts;                         /* [E]                           */
    kt__mat sh_gate, sh_up, sh_down, sh_gate_inp;
} kt__layer;

typedef struct kt__weights {
    kt__mat tok_embd;  /* [V][H] */
    float *out_norm;   /* [H] */
    kt__mat lm_head;   /* [V][H] */
    kt__layer *layers; /* [n_layer] */
} kt__weights;

/* Reads the architecture description of `model` into *hp (load.c). */
kt_status kt__hparams_from_model(kt__hparams *hp, const kt_model *model);
/* Reads every weight; matrices are stored as `mat_type` (F32 or BF16; BF16
 * weights are borrowed from the mapping when already BF16). */
kt_status kt__weights_load(kt__weights *w, const kt__hparams *hp, const kt_model *model,
                           kt_type mat_type, bool skip_experts);
void kt__weights_free(kt__weights *w, const kt__hparams *hp);
void kt__hparams_free(kt__hparams *hp);

/* ---- ops (ops.c) ---- */
/* y[T][rows] = x[T][cols] · Wᵀ (+ bias) */
void kt__linear(const float *x, int32_t T, const kt__mat *W, const float *bias, float *y);
/* row r of W widened to F32 [W->cols] */
void kt__mat_row_f32(const kt__mat *W, int32_t r, float *out);
/* rows r0 <= r < r1 of the same product */
void kt__linear_rows(const float *x, int32_t T, const kt__mat *W, const float *bias, float *y,
                     int32_t r0, int32_t r1);
/* the product split by rows over the context's workers (when it has any) */
typedef struct kt_context kt_context;
void kt__linear_par(kt_context *ctx, const float *x, int32_t T, const kt__mat *W,
                    const float *bias, float *y);
/* the same on the F32-activation kernels only (routers: near ties must break
 * as in the reference) */
void kt__linear_par_exact(kt_context *ctx, const float *x, int32_t T, const kt__mat *W,
                          const float *bias, float *y);

/* ---- dense products with hi + lo BF16 activations (dense.c) ---- */
typedef struct kt__dense kt__dense;
/* Fast precision on AVX-512 BF16: picks the x2 kernels and packs the dense
 * BF16 matrices for oneDNN (when built); otherwise leaves ctx->dense NULL. */
kt_status kt__dense_init(kt_context *ctx);
void kt__dense_free(kt_context *ctx);
/* y[T][rows] = x Wᵀ (+ bias) through oneDNN or the x2 kernels; false when
 * neither takes W (F32 weights, no AVX-512 BF16): use the F32 kernels. */
bool kt__dense_linear(kt_context *ctx, const float *x, int32_t T, const kt__mat *W,
                      const float *bias, float *y);
void kt__rmsnorm(float *x, int32_t n, const float *w, float eps);
void kt__rmsnorm_to(const float *x, float *y, int32_t n, const float *w, float eps);
void kt__softmax(float *x, int32_t n);
/* Σ a·b and y += s·x over n values (AVX-512 when available). */
float kt__dot(const float *a, const float *b, int32_t n);
void kt__axpy(float *y, float s, const float *x, int32_t n);
float kt__silu(float x);

/* ---- scratch memory (scratch.c) ---- */
typedef struct kt__scratch_block kt__scratch_block;
typedef struct kt__scratch {
    kt__scratch_block *head, *cur;
} kt__scratch;
/* n * size bytes, 64-byte aligned, valid until the next reset; NULL on NOMEM. */
void *kt__scratch_alloc(kt__scratch *a, size_t n, size_t size);
void kt__scratch_reset(kt__scratch *a);
/* Stack discipline inside a forward call: release frees what was allocated
 * after the mark (the memory stays with the scratch). */
typedef struct kt__scratch_mark {
    kt__scratch_block *block;
    size_t used;
} kt__scratch_mark;
kt__scratch_mark kt__scratch_get_mark(const kt__scratch *a);
void kt__scratch_release(kt__scratch *a, kt__scratch_mark m);
void kt__scratch_free(kt__scratch *a);

/* ---- the context ---- */
struct kt_context {
    const kt_model *model;
    kt_runtime *rt;
    kt__hparams hp;
    kt__weights w;
    kt_precision precision;
    int32_t n_ctx, n_batch, n_threads;
    int32_t n_past;
    int32_t mla_mode; /* 0 auto, 1 naive, 2 absorbed */

    /* KV cache: F32 (precision f32) or BF16, [n_layer] x [n_ctx][row] */
    kt_type kv_type;
    int32_t k_row, v_row;   /* values per position (all kv heads) */
    void **k_cache, **v_cache;

    kt__scratch scratch;    /* scratch memory of kt__forward            */
    kt__dense *dense;       /* fast dense products (dense.c), or NULL    */
    bool borrowed;          /* weights, backend, workers, dense state are another
                               context's (kt_context_options.share): not freed */
    kt_context *share_src;  /* that context (borrowed), or NULL                */
    int32_t n_sharers;      /* contexts borrowing this one's (no GPU then)     */
    /* workers for dense layers and attention: the MoE backend's own pool when
     * there is one (pool_borrowed; two spinning pools on the same cores slow
     * each other down), else the engine's; NULL: single-threaded */
    struct kt_pool *pool;
    bool pool_borrowed;     /* pool belongs to ctx->moe: not freed here */

    /* routed experts through the CPU MoE backend (fast path); NULL: own F32 path */
    kt_moe_backend *moe;
    int32_t *moe_index;     /* [n_layer] backend layer, -1 for dense layers */
    kt_method moe_method;
    int32_t moe_precision;  /* kt_moe_precision the backend is created with */
    struct kt__cpu_weights *cpu_weights; /* kt-convert files mapped for the backend, or NULL */
    struct kt_gguf *gguf_experts; /* LLAMAFILE: the GGUF mapped for the backend, or NULL */
    bool moe_shared_folded; /* the shared expert is the backend's expert E */

    /* routing observers (observe.c); borrowed, NULL when detached */
    kt_expert_stats *route_stats;
    kt_route_trace *route_trace;

    /* GPU runtime (lib/gpu, kt/gpu.h); NULL: the CPU forward */
    struct kt__gpu *gpu;

    /* test hooks: when set, eval writes [n_layer+1][T][H] hidden states here */
    float *capture_hidden;
    int32_t capture_total;  /* tokens of the current eval (set by kt_context_eval) */
    int32_t capture_off;    /* first token of the current chunk within it          */
};

/* experts.c: builds the MoE backend over the model's expert views in place. */
/* weight_path: libkt CPU expert files (kt-convert) instead of the model's own. */
kt_status kt__experts_init(kt_context *ctx, int32_t method, int32_t n_threads, int32_t n_pools,
                           const char *weight_path);
void kt__experts_free(kt_context *ctx);
/* MoE layers of the model (hp->layer_moe set). */
int32_t kt__experts_n_moe(const kt__hparams *hp);
/* A description of n_experts experts of `method` with the model's hidden and expert
 * intermediate sizes, top_k of them a token; the rest as KT_MOE_DESC_INIT. */
kt_moe_desc kt__experts_desc(const kt__hparams *hp, int32_t method, int32_t n_experts,
                             int32_t top_k);
/* ctx->moe over the n_moe layers lws (max_tokens and activation precision from the context);
 * sets ctx->moe_method, and ctx->moe_shared_folded to `folded` when it succeeds. An error
 * names the method and `from`, the experts' file (NULL: the model's own). */
kt_status kt__experts_backend_create(kt_context *ctx, const kt_moe_desc *d,
                                     const kt_moe_layer_weights *lws, int32_t n_moe,
                                     int32_t n_threads, int32_t n_pools, bool folded,
                                     const char *from);
/* experts_gguf.c: LLAMAFILE experts from a GGUF file (weight_path ending in .gguf). */
bool kt__experts_path_is_gguf(const char *path);
kt_status kt__experts_gguf_init(kt_context *ctx, int32_t method, int32_t n_threads,
                                int32_t n_pools, const char *path);
void kt__experts_gguf_free(kt_context *ctx);
/* out[T][H] = Σ_{j<k} w[t][j] · FFN_{ids[t][j]}(x[t]) for one MoE layer. */
kt_status kt__experts_forward(kt_context *ctx, int32_t layer, const float *x, int32_t T,
                              const int32_t *ids, const float *w, int32_t k, float *out);

/* observe.c: hands one MoE layer's routed ids [T][k] to the attached observers. */
kt_status kt__route_observe(kt_context *ctx, int32_t layer, const int32_t *ids, int32_t T);

/* Forward over tokens[T] at positions n_past..n_past+T-1; writes logits for
 * all positions ([T][V]) or only the last ([V]) into `logits` (may be NULL). */
kt_status kt__forward(kt_context *ctx, const int32_t *tokens, int32_t T, float *logits,
                      bool all_logits);
/* One pass over n contexts' tokens (n_tokens[i] each, concatenated), each at
 * its own n_past, on ctxs[0]'s weights, backend and workers; logits of each
 * context's last token, [n][V] (may be NULL). Does not advance n_past. */
kt_status kt__forward_multi(kt_context *const *ctxs, int32_t n, const int32_t *tokens,
                            const int32_t *n_tokens, float *logits);

/* lib/gpu: the forward on the context's GPU, and its teardown (NULL gpu: no-op). */
typedef struct kt__gpu kt__gpu;
kt_status kt__gpu_forward(kt_context *ctx, const int32_t *tokens, int32_t T, float *logits,
                          bool all_logits);
void kt__gpu_free(kt_context *ctx);

#endif /* KT_ENGINE_INTERNAL_H */
