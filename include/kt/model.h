/*
 * kt/model.h - model files and their description.
 *
 * kt_model_open() takes a model directory (config.json + safetensors, one file
 * or a sharded set with model.safetensors.index.json), a .gguf file (or any
 * shard of a split set) or a bare config .json, maps the weights (nothing is
 * copied or converted) and gives an immutable handle with:
 *
 *   - the architecture description (kt_arch_info): every config.json field an
 *     engine needs, typed and resolved. Both config styles found in the wild
 *     parse to the same description: as published on the hub (`rope_theta` +
 *     `rope_scaling`, `num_experts`, `model_type: kimi_k2`, DeepSeek without
 *     `rope_interleave`) and as written by transformers 5 (`rope_parameters`,
 *     `num_local_experts`, explicit `rope_interleave`); GGUF metadata too.
 *   - per-layer facts (kt_layer_info): MoE or dense, sliding window.
 *   - the tensor index: every weight addressed by (layer, role, expert), with
 *     its storage (plain, FP8 block-scaled, INT4 packed, GGML blocks, MXFP4) and
 *     its scales, so no caller ever parses a tensor name (kt_tensor_view).
 * docs/models.md lists the names, keys and both config styles.
 *   - a memory estimate per device for a placement, before anything is loaded.
 *
 *     kt_model *m = NULL;
 *     if (kt_model_open(&m, rt, "models/kimi-k2-demo", NULL) < 0) {
 *         fprintf(stderr, "%s\n", kt_last_error());
 *         return 1;
 *     }
 *     kt_arch_info a;
 *     a.struct_size = sizeof a;
 *     kt_model_arch(m, &a);
 *     for (uint32_t l = 0; l < a.n_layers; l++) {
 *         if (!kt_model_layer_is_moe(m, l))
 *             continue;
 *         kt_tensor_view w;
 *         w.struct_size = sizeof w;
 *         kt_model_tensor(m, l, KT_ROLE_EXPERT_UP, 0, &w);  // [moe_inter][hidden]
 *     }
 *     kt_model_free(m);
 *
 * Thread contract: a kt_model is immutable after open and may be shared by any
 * number of threads. All borrowed pointers (strings, arrays, tensor data)
 * live until kt_model_free().
 */
#ifndef KT_MODEL_H
#define KT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An opened model. Immutable; thread-shareable (K26). */
typedef struct kt_model kt_model;

/* Model families. Values are ABI (append only). */
typedef enum kt_arch {
    KT_ARCH_UNKNOWN = 0,
    KT_ARCH_DEEPSEEK_V3 = 1, /* deepseek_v3 (also DeepSeek-R1, V3.1)                 */
    KT_ARCH_KIMI_K2 = 2,     /* kimi_k2: DeepSeek-V3 architecture, Moonshot config    */
    KT_ARCH_QWEN3_MOE = 3,
    KT_ARCH_QWEN2_MOE = 4,
    KT_ARCH_MIXTRAL = 5,
    KT_ARCH_MINIMAX_M2 = 6,
    KT_ARCH_GPT_OSS = 7,
    KT_ARCH_GLM4_MOE = 8
} kt_arch;

/* config.json's model_type spelling ("deepseek_v3"); NULL if unknown. Since 0.1. */
KT_API const char *kt_arch_name(kt_arch arch);

typedef enum kt_file_format {
    KT_FORMAT_SAFETENSORS = 1, /* a directory with config.json + *.safetensors */
    KT_FORMAT_GGUF = 2
} kt_file_format;

/* Attention kinds. */
typedef enum kt_attn_kind {
    KT_ATTN_GQA = 0, /* q/k/v/o projections; MHA, GQA and MQA              */
    KT_ATTN_MLA = 1  /* DeepSeek multi-head latent attention (q_a/q_b/kv_a/kv_b) */
} kt_attn_kind;

typedef enum kt_rope_type {
    KT_ROPE_NONE = 0,    /* no rotary embedding                                 */
    KT_ROPE_DEFAULT = 1, /* theta^(-2i/d)                                       */
    KT_ROPE_LINEAR = 2,  /* positions divided by rope_factor                    */
    KT_ROPE_YARN = 3     /* YaRN (rope_factor, original_max_pos, beta_*, mscale*) */
} kt_rope_type;

/* Router scoring of the logits W_g h. */
typedef enum kt_score_func {
    KT_SCORE_SOFTMAX = 0, /* softmax over all experts (with norm_topk_prob: over the top-k) */
    KT_SCORE_SIGMOID = 1  /* independent sigmoid per expert                                 */
} kt_score_func;

typedef enum kt_qk_norm {
    KT_QK_NORM_NONE = 0,
    KT_QK_NORM_PER_HEAD = 1, /* RMSNorm(head_dim) on each head of q and k (Qwen3, GLM)  */
    KT_QK_NORM_FULL = 2      /* RMSNorm over the whole q / k projection (MiniMax-M2)    */
} kt_qk_norm;

/* Expert / MLP activation. */
typedef enum kt_ffn_act {
    KT_ACT_SWIGLU = 0,    /* down(silu(gate x) * up x)                                   */
    KT_ACT_SWIGLU_OAI = 1 /* gpt-oss: g = min(g, limit), u = clamp(u, -limit, limit),
                             down((u + 1) * g * sigmoid(alpha * g))                      */
} kt_ffn_act;

/* The checkpoint's quantization_config (the method of the model as a whole;
 * each tensor says its own storage in kt_tensor_view). */
typedef enum kt_quant_method {
    KT_QUANT_NONE = 0,
    KT_QUANT_FP8_BLOCK = 1,   /* quant_method fp8, weight_block_size [bh, bw], weight_scale_inv */
    KT_QUANT_INT4_PACKED = 2, /* compressed-tensors pack-quantized int4 (Kimi-K2-Thinking)      */
    KT_QUANT_GGUF = 3,        /* GGUF file: per-tensor ggml block types                        */
    KT_QUANT_MXFP4 = 4        /* quant_method mxfp4 (gpt-oss): routed experts in MXFP4         */
} kt_quant_method;

/* Limits of fixed-size arrays in public structs. */
#define KT_TENSOR_MAX_DIMS 8
#define KT_ESTIMATE_MAX_GPUS 16

/* ---------------------------------------------------------------- open --- */

/* Only parse config.json (or the GGUF metadata): kt_model_arch() and the
 * per-layer queries work, tensor queries fail with KT_ERR_NOT_FOUND and
 * kt_model_estimate() uses sizes computed from the config. */
#define KT_MODEL_OPEN_F_CONFIG_ONLY (1u << 0)

typedef struct kt_model_open_options {
    uint32_t struct_size;           /* sizeof(kt_model_open_options); set by the INIT macro */
    uint32_t flags;                 /* KT_MODEL_OPEN_F_*; unknown bits are rejected         */
    kt_progress_fn progress_fn;     /* may be NULL; called per phase of the open         */
    void *progress_user_data;
} kt_model_open_options;

#define KT_MODEL_OPEN_OPTIONS_INIT { (uint32_t)sizeof(kt_model_open_options), 0u, NULL, NULL }

/* Fills *opts with defaults; struct_size is the caller's sizeof(*opts). Since 0.1. */
KT_API kt_status kt_model_open_options_init(kt_model_open_options *opts, size_t struct_size);

/* Opens a model directory (config.json + safetensors; a shard or the index file
 * inside it opens the directory), a .gguf file, or a bare
 * config .json file (description only, as with KT_MODEL_OPEN_F_CONFIG_ONLY).
 * rt may be NULL (warnings go to stderr); if given it must outlive the model.
 * opts may be NULL (defaults). Validates the config (consistency of every
 * field above) and the tensor index (every tensor the architecture needs is
 * present with the shape the config implies; tensors of layers >=
 * n_layers, e.g. DeepSeek's MTP layer, are ignored).
 * Returns KT_OK; KT_ERR_IO (missing path/file), KT_ERR_FORMAT (bad JSON, bad
 * file, inconsistent config, wrong shape, missing tensor: the message names
 * the file, the field or tensor and the problem), KT_ERR_UNSUPPORTED (unknown
 * model_type or quantization method), KT_ERR_CANCELLED, KT_ERR_NOMEM.
 * Caller owns *out; free with kt_model_free(). On failure *out is NULL.
 * Thread-safe. Since 0.1. */
KT_API kt_status kt_model_open(kt_model **out, kt_runtime *rt, const char *path,
                               const kt_model_open_options *opts);

/* Frees a model and unmaps its files; NULL is a no-op. Every borrowed pointer
 * obtained from it becomes invalid. Since 0.1. */
KT_API void kt_model_free(kt_model *model);

/* Path the model was opened from (borrowed; valid until kt_model_free()). Since 0.1. */
KT_API const char *kt_model_path(const kt_model *model);
/* KT_FORMAT_SAFETENSORS or KT_FORMAT_GGUF. Since 0.1. */
KT_API kt_file_format kt_model_format(const kt_model *model);

/* ------------------------------------------------------- description --- */

/* The architecture description. Caller-allocated and size-tagged: set
 * struct_size = sizeof(kt_arch_info) and call kt_model_arch(). Dimensions that do
 * not apply to the family are 0 (e.g. MLA ranks for GQA models). Flags are 0/1. */
typedef struct kt_arch_info {
    uint32_t struct_size;            /* sizeof(kt_arch_info)                            */
    int32_t arch;                    /* kt_arch                                         */
    const char *model_type;          /* config's model_type (borrowed)                  */
    int32_t dtype;                   /* kt_type of torch_dtype (BF16 usually)           */

    /* sizes */
    uint32_t vocab_size;
    uint32_t hidden_size;
    uint32_t intermediate_size;      /* config's intermediate_size: the dense MLP width
                                        (Mixtral-style configs: also the expert width)  */
    uint32_t moe_intermediate_size;  /* one routed expert                               */
    uint32_t n_layers;               /* num_hidden_layers (MTP layers excluded)         */
    uint32_t max_position_embeddings;
    float rms_norm_eps;
    uint32_t tie_word_embeddings;

    /* attention */
    int32_t attn_kind;               /* kt_attn_kind                                    */
    uint32_t n_heads;
    uint32_t n_kv_heads;             /* == n_heads for MLA                              */
    uint32_t head_dim;               /* q/k/v head dim (GQA); qk_nope + qk_rope for MLA */
    uint32_t q_lora_rank;            /* MLA; 0: q_proj directly                         */
    uint32_t kv_lora_rank;           /* MLA                                             */
    uint32_t qk_nope_head_dim;       /* MLA                                             */
    uint32_t qk_rope_head_dim;       /* MLA                                             */
    uint32_t v_head_dim;             /* MLA; == head_dim for GQA                        */
    int32_t qk_norm;                 /* kt_qk_norm                                      */
    uint32_t attention_bias;         /* q/k/v projections have biases                   */
    uint32_t attention_out_bias;     /* o_proj has a bias (gpt-oss)                     */
    uint32_t attention_sinks;        /* learned per-head sink logits (gpt-oss)          */
    uint32_t sliding_window;         /* window of the layers that use one; 0: none      */
    float attn_scale;                /* softmax scale: 1/sqrt(qk head dim), times
                                        mscale^2 for DeepSeek YaRN (mscale_all_dim)     */

    /* rotary embedding */
    int32_t rope_type;               /* kt_rope_type                                    */
    double rope_theta;
    uint32_t rotary_dim;             /* rotated dims per head (qk_rope_head_dim for MLA,
                                        head_dim * partial_rotary_factor otherwise)     */
    float partial_rotary_factor;     /* rotary_dim / head_dim (1.0 unless partial)      */
    uint32_t rope_interleave;        /* 1: pairs (2i, 2i+1); 0: NeoX halves (i, i+d/2)  */
    float rope_factor;               /* YaRN/linear factor; 1.0 otherwise               */
    uint32_t rope_original_max_pos;  /* YaRN original_max_position_embeddings           */
    float yarn_beta_fast;
    float yarn_beta_slow;
    float yarn_mscale;               /* DeepSeek style; 0 when absent                   */
    float yarn_mscale_all_dim;       /* DeepSeek style; 0 when absent                   */
    float yarn_attention_factor;     /* cos/sin multiplier (HF "attention_factor")      */
    uint32_t yarn_truncate;          /* 1: floor/ceil the correction range (default)    */

    /* MoE */
    uint32_t n_routed_experts;       /* 0 for a dense model                             */
    uint32_t n_experts_per_tok;      /* top-k                                           */
    uint32_t n_shared_experts;       /* DeepSeek/GLM shared experts; 1 for qwen2_moe    */
    uint32_t shared_intermediate_size; /* intermediate of the shared expert(s), fused:
                                        moe_intermediate * n_shared (DeepSeek) or
                                        shared_expert_intermediate_size (qwen2_moe)     */
    uint32_t shared_expert_gate;     /* sigmoid scalar gate on the shared expert        */
    uint32_t n_moe_layers;           /* layers whose MLP is routed (kt_model_layer_is_moe) */
    uint32_t first_k_dense_replace;  /* as configured (resolved per layer)              */
    uint32_t decoder_sparse_step;    /* as configured (resolved per layer); 1 default   */
    uint32_t n_group;                /* expert groups (DeepSeek); 1: no group limit     */
    uint32_t topk_group;             /* groups kept                                     */
    float routed_scaling_factor;     /* 1.0 unless configured                           */
    uint32_t norm_topk_prob;         /* renormalise the top-k weights                   */
    int32_t score_func;              /* kt_score_func                                   */
    uint32_t score_correction_bias;  /* e_score_correction_bias (selection only)        */
    uint32_t router_bias;            /* router linear has a bias (gpt-oss)              */
    int32_t ffn_act;                 /* kt_ffn_act (experts and dense MLPs)             */
    float swiglu_limit;              /* KT_ACT_SWIGLU_OAI clamp (7.0); 0 otherwise      */
    float swiglu_alpha;              /* KT_ACT_SWIGLU_OAI alpha (1.702); 0 otherwise    */
    uint32_t expert_bias;            /* experts have gate_up / down biases (gpt-oss)    */
    uint32_t n_nextn_layers;         /* MTP layers in the checkpoint (ignored)          */

    /* tokens */
    int32_t bos_token_id;            /* -1: none                                        */
    int32_t pad_token_id;            /* -1: none                                        */
    const int32_t *eos_token_ids;    /* borrowed array (config may list several)        */
    uint32_t n_eos_token_ids;

    /* quantization_config */
    int32_t quant_method;            /* kt_quant_method                                 */
    uint32_t quant_block_rows;       /* FP8: weight_block_size[0] (128)                 */
    uint32_t quant_block_cols;       /* FP8: weight_block_size[1] (128)                 */
    uint32_t quant_bits;             /* INT4: 4; FP8: 8                                 */
    uint32_t quant_group_size;       /* INT4: elements per scale along the input (32)   */
    uint32_t quant_symmetric;        /* INT4: symmetric (no zero points)                */
    const char *const *quant_ignore; /* borrowed; `ignore` / modules_to_not_convert    */
    uint32_t n_quant_ignore;
} kt_arch_info;

/* Fills *out. Set out->struct_size = sizeof(*out) first (the same protocol for
 * every caller-allocated output struct of this header: a larger struct from
 * newer headers gets its unknown tail zeroed; later versions will fill the
 * prefix an older caller knows). Returns KT_ERR_INVALID_ARG for NULL or a
 * struct_size below the 0.1 size. Thread-safe. Since 0.1. */
KT_API kt_status kt_model_arch(const kt_model *model, kt_arch_info *out);

/* Per-layer facts. */
typedef struct kt_layer_info {
    uint32_t struct_size;            /* sizeof(kt_layer_info)                           */
    uint32_t is_moe;                 /* routed experts (else a dense MLP)               */
    uint32_t n_experts;              /* routed experts in this layer; 0 if dense        */
    uint32_t ffn_intermediate;       /* moe_intermediate (MoE) or intermediate (dense)  */
    uint32_t sliding_window;         /* window of this layer; 0: full attention         */
} kt_layer_info;

#define KT_LAYER_INFO_INIT { (uint32_t)sizeof(kt_layer_info), 0u, 0u, 0u, 0u }

/* Fills *out for `layer`; KT_ERR_INVALID_ARG if layer >= n_layers. Since 0.1. */
KT_API kt_status kt_model_layer(const kt_model *model, uint32_t layer, kt_layer_info *out);
/* 1 if `layer` has routed experts, 0 if dense or out of range. Since 0.1. */
KT_API int32_t kt_model_layer_is_moe(const kt_model *model, uint32_t layer);
/* Sliding window of `layer`, 0 for full attention or out of range. Since 0.1. */
KT_API uint32_t kt_model_layer_sliding_window(const kt_model *model, uint32_t layer);
/* num_hidden_layers. Since 0.1. */
KT_API uint32_t kt_model_n_layers(const kt_model *model);
/* Routed experts per MoE layer; 0 if dense. Since 0.1. */
KT_API uint32_t kt_model_n_experts(const kt_model *model);

/* ------------------------------------------------------------ tensors --- */

/* What a weight is for. Global roles ignore `layer`; expert roles take
 * `expert` in [0, n_routed_experts); others ignore it. Values are ABI. */
typedef enum kt_role {
    KT_ROLE_EMBED = 0,              /* [vocab][hidden]                              */
    KT_ROLE_FINAL_NORM = 1,         /* [hidden]                                     */
    KT_ROLE_LM_HEAD = 2,            /* [vocab][hidden]; the embedding when tied     */

    KT_ROLE_ATTN_NORM = 10,         /* input_layernorm [hidden]                     */
    KT_ROLE_Q_PROJ = 11,            /* [n_heads*head_dim][hidden] (MLA: no q_lora)  */
    KT_ROLE_K_PROJ = 12,            /* [n_kv_heads*head_dim][hidden]                */
    KT_ROLE_V_PROJ = 13,            /* [n_kv_heads*head_dim][hidden]                */
    KT_ROLE_O_PROJ = 14,            /* [hidden][n_heads*v_head_dim]                 */
    KT_ROLE_Q_BIAS = 15,
    KT_ROLE_K_BIAS = 16,
    KT_ROLE_V_BIAS = 17,
    KT_ROLE_O_BIAS = 18,
    KT_ROLE_Q_NORM = 19,            /* [head_dim] per head, [n_heads*head_dim] full */
    KT_ROLE_K_NORM = 20,
    KT_ROLE_SINKS = 21,             /* [n_heads] (gpt-oss)                          */
    KT_ROLE_Q_A_PROJ = 22,          /* MLA [q_lora][hidden]                         */
    KT_ROLE_Q_A_NORM = 23,          /* MLA [q_lora]                                 */
    KT_ROLE_Q_B_PROJ = 24,          /* MLA [n_heads*(nope+rope)][q_lora]            */
    KT_ROLE_KV_A_PROJ = 25,         /* MLA kv_a_proj_with_mqa [kv_lora+rope][hidden] */
    KT_ROLE_KV_A_NORM = 26,         /* MLA [kv_lora]                                */
    KT_ROLE_KV_B_PROJ = 27,         /* MLA [n_heads*(nope+v)][kv_lora]              */
    KT_ROLE_K_B_PROJ = 28,          /* MLA split kv_b, key part, per head transposed:
                                       [n_heads][kv_lora][nope] (GGUF attn_k_b)     */
    KT_ROLE_V_B_PROJ = 29,          /* MLA split kv_b, value part [n_heads][v][kv_lora]
                                       (GGUF attn_v_b); a model has either KV_B_PROJ
                                       or K_B_PROJ + V_B_PROJ                        */

    KT_ROLE_FFN_NORM = 40,          /* post_attention_layernorm [hidden]            */
    KT_ROLE_GATE_PROJ = 41,         /* dense MLP [intermediate][hidden]             */
    KT_ROLE_UP_PROJ = 42,
    KT_ROLE_DOWN_PROJ = 43,         /* [hidden][intermediate]                       */
    KT_ROLE_ROUTER = 44,            /* [n_experts][hidden]                          */
    KT_ROLE_ROUTER_BIAS = 45,       /* [n_experts] linear bias (gpt-oss)            */
    KT_ROLE_SCORE_CORRECTION = 46,  /* [n_experts] e_score_correction_bias, F32     */
    KT_ROLE_EXPERT_GATE = 47,       /* [moe_inter][hidden], per expert              */
    KT_ROLE_EXPERT_UP = 48,
    KT_ROLE_EXPERT_DOWN = 49,       /* [hidden][moe_inter]                          */
    KT_ROLE_EXPERT_GATE_UP = 50,    /* fused gpt-oss [hidden][2*moe_inter] (IN_OUT
                                       layout, columns interleaved gate, up, ...)   */
    KT_ROLE_EXPERT_GATE_UP_BIAS = 51, /* [2*moe_inter] interleaved                  */
    KT_ROLE_EXPERT_DOWN_BIAS = 52,  /* [hidden]                                     */
    KT_ROLE_SHARED_GATE = 53,       /* shared expert(s) [shared_inter][hidden]      */
    KT_ROLE_SHARED_UP = 54,
    KT_ROLE_SHARED_DOWN = 55,       /* [hidden][shared_inter]                       */
    KT_ROLE_SHARED_EXPERT_GATE = 56 /* qwen2_moe [1][hidden]                        */
} kt_role;

/* "EXPERT_UP", ...; NULL if unknown. Since 0.1. */
KT_API const char *kt_role_name(kt_role role);

/* How a tensor's bytes encode its values. */
typedef enum kt_storage {
    KT_STORAGE_PLAIN = 0,       /* `type` elements, row-major `shape`                       */
    KT_STORAGE_FP8_BLOCK = 1,   /* F8_E4M3 [rows][cols]; scale [ceil(rows/bh)][ceil(cols/bw)]
                                   F32/BF16, value = fp8 * scale (weight_scale_inv)           */
    KT_STORAGE_INT4_PACKED = 2, /* I32 [rows][cols/8], 8 nibbles per word, lowest first,
                                   stored q+8; scale BF16 [rows][cols/group], value = q*scale */
    KT_STORAGE_GGML_BLOCK = 3,  /* ggml block type (kt_type_block_size/bytes) along cols     */
    KT_STORAGE_MXFP4 = 4        /* U8 [rows][cols/32][16]: 32 FP4 E2M1 per block, low nibble
                                   first; scale U8 E8M0 [rows][cols/32], value = fp4 *
                                   2^(scale - 127)                                          */
} kt_storage;

/* "PLAIN", "FP8_BLOCK", ...; NULL if unknown. Since 0.1. */
KT_API const char *kt_storage_name(kt_storage storage);

typedef enum kt_layout {
    KT_LAYOUT_OUT_IN = 0, /* nn.Linear: [rows = out][cols = in] (almost everything)      */
    KT_LAYOUT_IN_OUT = 1  /* transposed: [in][out] (gpt-oss fused expert tensors)         */
} kt_layout;

/* A tensor is stored stacked for all experts ([E][...]); the view is expert
 * `expert`'s slice and `expert_stride` gives the distance between slices. */
#define KT_TENSOR_F_STACKED (1u << 0)

/* A typed, borrowed view of one weight (and its scales). Caller-allocated,
 * size-tagged (set struct_size = sizeof(kt_tensor_view)). Pointers live until kt_model_free(). */
typedef struct kt_tensor_view {
    uint32_t struct_size;            /* sizeof(kt_tensor_view)                          */
    uint32_t flags;                  /* KT_TENSOR_F_*                                   */
    const char *name;                /* tensor name in the file (borrowed)              */
    int32_t role;                    /* kt_role                                         */
    uint32_t layer;                  /* UINT32_MAX for global tensors                   */
    uint32_t expert;                 /* UINT32_MAX for non-expert tensors               */
    int32_t storage;                 /* kt_storage                                      */
    int32_t type;                    /* kt_type of `data` elements / blocks             */
    int32_t layout;                  /* kt_layout of a 2-D weight                       */
    uint32_t n_dims;                 /* of `shape` (as stored, without expert dim)      */
    uint64_t shape[KT_TENSOR_MAX_DIMS]; /* as stored, row-major: shape[0] outermost (GGUF's
                                        ne reversed)                                    */
    const void *data;                /* mmap'ed bytes (borrowed)                        */
    uint64_t nbytes;
    uint64_t expert_stride;          /* bytes between experts when STACKED; else 0      */
    /* Logical (dequantized) matrix: rows = out features, cols = in features,
     * whatever the storage; 1-D tensors: rows = length, cols = 1. */
    uint64_t rows;
    uint64_t cols;
    /* Scales of FP8_BLOCK / INT4_PACKED / MXFP4; NULL otherwise (GGML blocks carry
     * their own). */
    const void *scale_data;          /* borrowed                                         */
    int32_t scale_type;              /* kt_type: F32 or BF16 (MXFP4: U8, E8M0)           */
    uint32_t scale_n_dims;
    uint64_t scale_shape[2];
    uint64_t scale_nbytes;
    uint32_t block_rows;             /* rows per scale (FP8: 128; INT4, MXFP4, GGML: 1)  */
    uint32_t block_cols;             /* cols per scale (FP8: 128; INT4: group size;
                                        MXFP4: 32; GGML: elements per block)            */
} kt_tensor_view;

/* Looks up a weight by (layer, role, expert) and fills *out. `layer` is
 * ignored for global roles, `expert` for non-expert roles.
 * Returns KT_OK; KT_ERR_NOT_FOUND if the model has no such tensor (a role the
 * family lacks, a dense layer's expert, KT_MODEL_OPEN_F_CONFIG_ONLY);
 * KT_ERR_INVALID_ARG for a layer/expert out of range or a bad struct_size.
 * Thread-safe. Since 0.1. */
KT_API kt_status kt_model_tensor(const kt_model *model, uint32_t layer, kt_role role,
                                 uint32_t expert, kt_tensor_view *out);
/* 1 if kt_model_tensor() would succeed, else 0. Since 0.1. */
KT_API int32_t kt_model_has_tensor(const kt_model *model, uint32_t layer, kt_role role,
                                   uint32_t expert);

/* Number of indexed weights (one per (layer, role, expert); a stacked tensor
 * counts once per expert; a tied LM_HEAD is an entry that views the embedding).
 * Scale companions are not counted separately. Since 0.1. */
KT_API size_t kt_model_n_tensors(const kt_model *model);
/* Fills *out with indexed weight i (0 <= i < kt_model_n_tensors()): the
 * embedding first, then layer by layer (roles in the order the forward pass
 * uses them, experts ascending), then the final norm and the LM head.
 * KT_ERR_INVALID_ARG if out of range. Thread-safe. Since 0.1. */
KT_API kt_status kt_model_tensor_at(const kt_model *model, size_t i, kt_tensor_view *out);
/* File tensors not mapped to any role (MTP layers, unknown extras); they are
 * ignored. Since 0.1. */
KT_API size_t kt_model_n_ignored_tensors(const kt_model *model);

/* ----------------------------------------------------------- estimate --- */

/* Placement to estimate: the first `gpu_experts_per_layer` routed experts of
 * every MoE layer on the GPUs (split evenly), the rest on the CPU. */
typedef struct kt_estimate_options {
    uint32_t struct_size;            /* sizeof(kt_estimate_options)                    */
    uint32_t flags;                  /* reserved, must be 0                            */
    uint32_t n_gpus;                 /* 0: CPU only (everything on the host)           */
    uint32_t gpu_experts_per_layer;  /* routed experts per MoE layer kept on GPUs      */
    uint32_t context_length;         /* tokens of KV cache; 0: max_position_embeddings  */
    uint32_t batch_tokens;           /* prefill chunk for activation buffers; 0: 512    */
} kt_estimate_options;

#define KT_ESTIMATE_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_estimate_options), 0u, 0u, 0u, 0u, 0u }

/* Fills *opts with defaults; struct_size is the caller's sizeof(*opts). Since 0.1. */
KT_API kt_status kt_estimate_options_init(kt_estimate_options *opts, size_t struct_size);

/* Bytes per device. Weights are counted as stored (quantized sizes).
 * Caller-allocated, size-tagged (set struct_size = sizeof(kt_memory_estimate)). */
typedef struct kt_memory_estimate {
    uint32_t struct_size;            /* sizeof(kt_memory_estimate)                     */
    uint32_t n_gpus;
    uint64_t host_bytes;             /* CPU-resident weights (mapped pages) + buffers  */
    uint64_t pinned_bytes;           /* pinned staging: per-layer MoE I/O buffers and
                                        the double buffer of layerwise prefill          */
    uint64_t gpu_bytes[KT_ESTIMATE_MAX_GPUS]; /* weights + KV cache + activations       */
    /* breakdown */
    uint64_t dense_weight_bytes;     /* embeddings, attention, norms, dense MLPs, shared
                                        experts, routers, lm_head                       */
    uint64_t routed_expert_bytes;    /* all routed experts                             */
    uint64_t expert_bytes;           /* one routed expert (gate + up + down + scales)   */
    uint64_t kv_bytes_per_token;     /* all layers, BF16                                */
    uint64_t kv_bytes;               /* context_length tokens (sliding-window layers
                                        capped at their window)                         */
} kt_memory_estimate;

/* Estimates memory per device for a placement before anything is loaded
 * (open only maps the files). opts may be NULL (CPU only). With n_gpus > 0
 * dense weights and the KV cache live on GPU 0 and GPU experts are split
 * evenly; with 0 everything is host memory. Returns KT_ERR_INVALID_ARG for
 * n_gpus > KT_ESTIMATE_MAX_GPUS or gpu_experts_per_layer > n_routed_experts.
 * Thread-safe. Since 0.1. */
KT_API kt_status kt_model_estimate(const kt_model *model, const kt_estimate_options *opts,
                                   kt_memory_estimate *out);

#ifdef __cplusplus
}
#endif
#endif /* KT_MODEL_H */
