/*
 * GGUF models: llama.cpp's metadata keys (`<arch>.block_count`,
 * `<arch>.expert_count`, ...) -> kt_arch_info, and its tensor names
 * (`blk.N.ffn_up_exps.weight`, ...) -> the tensor index.
 *
 * GGUF dims are innermost first (ne[0] = input features); views give the
 * row-major shape (reversed ne). Routed experts are stacked [E][out][in]; each
 * expert's view is its slice (KT_TENSOR_F_STACKED). llama.cpp permutes the q/k
 * rows of `llama`-arch models (Mixtral) so that interleaved-pair RoPE applies,
 * hence rope_interleave = 1 for them.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "io/gguf.h"
#include "model_internal.h"

typedef struct gctx {
    kt_model *m;
    const kt_gguf *g;
    const char *arch; /* general.architecture */
    char key[160];
    size_t capacity;
    size_t n_used;
} gctx;

static const char *key(gctx *c, const char *suffix)
{
    snprintf(c->key, sizeof c->key, "%s.%s", c->arch, suffix);
    return c->key;
}

static kt_status get_u32(gctx *c, const char *suffix, uint32_t def, uint32_t max, uint32_t *out)
{
    const char *k = key(c, suffix);
    const kt_gguf_value *v = kt__gguf_find(c->g, k);
    if (!v) {
        *out = def;
        return KT_OK;
    }
    uint64_t x;
    if (v->type == KT_GGUF_ARRAY) { /* per-layer arrays: take the common value */
        if (v->v.arr.n == 0 || (v->v.arr.elem != KT_GGUF_U32 && v->v.arr.elem != KT_GGUF_I32))
            return kt__error(KT_ERR_FORMAT, "%s: key '%s': unexpected array", c->m->path, k);
        const uint32_t *a = v->v.arr.data;
        for (uint64_t i = 1; i < v->v.arr.n; i++)
            if (a[i] != a[0])
                return kt__error(KT_ERR_UNSUPPORTED, "%s: key '%s': per-layer values differ",
                                 c->m->path, k);
        x = a[0];
    } else {
        kt_status st = kt__gguf_get_uint(c->g, k, &x);
        if (st < 0)
            return st;
    }
    if (x > max)
        return kt__error(KT_ERR_FORMAT, "%s: key '%s': %llu is larger than %u", c->m->path, k,
                         (unsigned long long)x, max);
    *out = (uint32_t)x;
    return KT_OK;
}

static kt_status get_f64(gctx *c, const char *suffix, double def, double *out)
{
    const char *k = key(c, suffix);
    if (!kt__gguf_find(c->g, k)) {
        *out = def;
        return KT_OK;
    }
    return kt__gguf_get_float(c->g, k, out);
}

static kt_status get_bool(gctx *c, const char *suffix, bool def, uint32_t *out)
{
    const char *k = key(c, suffix);
    bool b = def;
    if (kt__gguf_find(c->g, k)) {
        kt_status st = kt__gguf_get_bool(c->g, k, &b);
        if (st < 0)
            return st;
    }
    *out = b ? 1u : 0u;
    return KT_OK;
}

/* A tensor by name in any shard. */
static const kt_gguf_tensor *find_any(const gctx *c, const char *name)
{
    const kt_gguf_tensor *t = kt__gguf_find_tensor(c->g, name);
    for (uint32_t i = 0; !t && i < c->m->n_gguf_more; i++)
        t = kt__gguf_find_tensor(c->m->gguf_more[i], name);
    return t;
}

static const kt_gguf_tensor *find(gctx *c, uint32_t layer, const char *base, const char *param)
{
    char name[160];
    if (layer == UINT32_MAX)
        snprintf(name, sizeof name, "%s.%s", base, param);
    else
        snprintf(name, sizeof name, "blk.%u.%s.%s", layer, base, param);
    return find_any(c, name);
}

/* ------------------------------------------------------------- config --- */

static const struct {
    const char *gguf_arch;
    kt_arch arch;
} gguf_archs[] = {
    {"deepseek2", KT_ARCH_DEEPSEEK_V3}, {"qwen3moe", KT_ARCH_QWEN3_MOE},
    {"qwen2moe", KT_ARCH_QWEN2_MOE},    {"llama", KT_ARCH_MIXTRAL},
    {"minimax-m2", KT_ARCH_MINIMAX_M2}, {"glm4moe", KT_ARCH_GLM4_MOE},
};

static kt_status read_tokens(gctx *c, kt_arch_info *a)
{
    kt__config *cfg = &c->m->cfg;
    uint64_t v;
    a->bos_token_id = -1;
    a->pad_token_id = -1;
    if (kt__gguf_find(c->g, "tokenizer.ggml.bos_token_id") &&
        kt__gguf_get_uint(c->g, "tokenizer.ggml.bos_token_id", &v) == KT_OK && v <= INT32_MAX)
        a->bos_token_id = (int32_t)v;
    if (kt__gguf_find(c->g, "tokenizer.ggml.padding_token_id") &&
        kt__gguf_get_uint(c->g, "tokenizer.ggml.padding_token_id", &v) == KT_OK && v <= INT32_MAX)
        a->pad_token_id = (int32_t)v;
    static const char *const eos_keys[] = {"tokenizer.ggml.eos_token_id",
                                           "tokenizer.ggml.eot_token_id"};
    cfg->eos_ids = kt__calloc(2, sizeof(int32_t));
    if (!cfg->eos_ids)
        return KT_ERR_NOMEM;
    for (size_t i = 0; i < 2; i++) {
        if (!kt__gguf_find(c->g, eos_keys[i]) ||
            kt__gguf_get_uint(c->g, eos_keys[i], &v) != KT_OK || v > INT32_MAX)
            continue;
        if (a->n_eos_token_ids == 1 && cfg->eos_ids[0] == (int32_t)v)
            continue;
        cfg->eos_ids[a->n_eos_token_ids++] = (int32_t)v;
    }
    return KT_OK;
}

static kt_status read_config(gctx *c)
{
    kt__config *cfg = &c->m->cfg;
    kt_arch_info *a = &cfg->info;
    const char *path = c->m->path;
    kt_status st;
    memset(cfg, 0, sizeof *cfg);
    a->struct_size = (uint32_t)sizeof *a;

    if ((st = kt__gguf_get_str(c->g, "general.architecture", &c->arch)) < 0)
        return st;
    for (size_t i = 0; i < KT_ARRAY_LEN(gguf_archs); i++)
        if (!strcmp(gguf_archs[i].gguf_arch, c->arch))
            a->arch = gguf_archs[i].arch;
    if (a->arch == KT_ARCH_UNKNOWN)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: GGUF architecture '%s' is not supported "
                         "(supported: deepseek2, qwen3moe, qwen2moe, llama (Mixtral), minimax-m2, "
                         "glm4moe)", path, c->arch);
    /* Kimi-K2 is deepseek2 in llama.cpp; its name tells */
    const char *name = NULL;
    if (a->arch == KT_ARCH_DEEPSEEK_V3 && kt__gguf_find(c->g, "general.basename") &&
        kt__gguf_get_str(c->g, "general.basename", &name) == KT_OK && strcasestr(name, "kimi"))
        a->arch = KT_ARCH_KIMI_K2;
    if (!(cfg->model_type = kt__strdup(kt_arch_name((kt_arch)a->arch))))
        return KT_ERR_NOMEM;

    const kt_gguf_tensor *embd = find_any(c, "token_embd.weight");
    if (!embd || embd->n_dims != 2)
        return kt__error(KT_ERR_FORMAT, "%s: missing tensor 'token_embd.weight'", path);
    uint32_t vocab_from_embd = (uint32_t)KT_MIN(embd->ne[1], (uint64_t)UINT32_MAX);
    double eps, theta;
    if ((st = get_u32(c, "vocab_size", vocab_from_embd, KT__MAX_VOCAB, &a->vocab_size)) < 0 ||
        (st = get_u32(c, "embedding_length", 0, KT__MAX_DIM, &a->hidden_size)) < 0 ||
        (st = get_u32(c, "block_count", 0, KT__MAX_LAYERS, &a->n_layers)) < 0 ||
        (st = get_u32(c, "context_length", 4096, UINT32_MAX, &a->max_position_embeddings)) < 0 ||
        (st = get_u32(c, "feed_forward_length", 0, KT__MAX_DIM, &a->intermediate_size)) < 0 ||
        (st = get_u32(c, "expert_feed_forward_length", 0, KT__MAX_DIM,
                      &a->moe_intermediate_size)) < 0 ||
        (st = get_u32(c, "attention.head_count", 0, KT__MAX_DIM, &a->n_heads)) < 0 ||
        (st = get_u32(c, "attention.head_count_kv", a->n_heads, KT__MAX_DIM, &a->n_kv_heads)) < 0 ||
        (st = get_f64(c, "attention.layer_norm_rms_epsilon", 1e-6, &eps)) < 0 ||
        (st = get_f64(c, "rope.freq_base", 10000.0, &theta)) < 0 ||
        (st = get_u32(c, "expert_count", 0, KT__MAX_EXPERTS, &a->n_routed_experts)) < 0 ||
        (st = get_u32(c, "expert_used_count", 0, KT__MAX_EXPERTS, &a->n_experts_per_tok)) < 0 ||
        (st = get_u32(c, "expert_shared_count", 0, 1024, &a->n_shared_experts)) < 0 ||
        (st = get_u32(c, "nextn_predict_layers", 0, KT__MAX_LAYERS, &a->n_nextn_layers)) < 0)
        return st;
    if (a->hidden_size == 0 || a->n_layers == 0 || a->n_heads == 0 || a->vocab_size == 0)
        return kt__error(KT_ERR_FORMAT, "%s: %s.embedding_length, block_count, "
                         "attention.head_count must be > 0", path, c->arch);
    if (a->n_routed_experts == 0 || a->n_experts_per_tok == 0 ||
        a->n_experts_per_tok > a->n_routed_experts)
        return kt__error(KT_ERR_FORMAT, "%s: %s.expert_count (%u) / expert_used_count (%u): not "
                         "a MoE model or inconsistent", path, c->arch, a->n_routed_experts,
                         a->n_experts_per_tok);
    if (!(eps > 0.0) || !(theta > 0.0))
        return kt__error(KT_ERR_FORMAT, "%s: rms epsilon and rope.freq_base must be > 0", path);
    a->rms_norm_eps = (float)eps;
    a->rope_theta = theta;
    /* compute type: the embedding's when it is a float type (else BF16) */
    a->dtype = embd->type == KT_TYPE_F32 || embd->type == KT_TYPE_F16 ? embd->type : KT_TYPE_BF16;
    a->quant_method = KT_QUANT_GGUF;
    a->tie_word_embeddings = find_any(c, "output.weight") ? 0 : 1;
    if ((st = read_tokens(c, a)) < 0)
        return st;

    const kt_arch arch = (kt_arch)a->arch;
    /* attention */
    uint32_t key_len, val_len, rope_dim;
    if ((st = get_u32(c, "attention.key_length", a->hidden_size / a->n_heads, KT__MAX_DIM,
                      &key_len)) < 0 ||
        (st = get_u32(c, "attention.value_length", key_len, KT__MAX_DIM, &val_len)) < 0)
        return st;
    if (arch == KT_ARCH_DEEPSEEK_V3 || arch == KT_ARCH_KIMI_K2) {
        a->attn_kind = KT_ATTN_MLA;
        /* newer conversions split attn_kv_b into attn_k_b / attn_v_b and then give
         * key/value_length as the latent sizes and the per-head ones in *_mla */
        if (!find(c, 0, "attn_kv_b", "weight") && find(c, 0, "attn_k_b", "weight")) {
            cfg->mla_split_kv_b = true;
            if ((st = get_u32(c, "attention.key_length_mla", key_len, KT__MAX_DIM,
                              &key_len)) < 0 ||
                (st = get_u32(c, "attention.value_length_mla", val_len, KT__MAX_DIM,
                              &val_len)) < 0)
                return st;
        }
        if ((st = get_u32(c, "attention.q_lora_rank", 0, KT__MAX_DIM, &a->q_lora_rank)) < 0 ||
            (st = get_u32(c, "attention.kv_lora_rank", 0, KT__MAX_DIM, &a->kv_lora_rank)) < 0 ||
            (st = get_u32(c, "rope.dimension_count", 64, KT__MAX_DIM, &rope_dim)) < 0)
            return st;
        if (a->kv_lora_rank == 0 || rope_dim == 0 || rope_dim >= key_len || rope_dim % 2)
            return kt__error(KT_ERR_FORMAT, "%s: inconsistent MLA dims (kv_lora_rank %u, rope %u, "
                             "key_length %u)", path, a->kv_lora_rank, rope_dim, key_len);
        a->qk_rope_head_dim = rope_dim;
        a->qk_nope_head_dim = key_len - rope_dim;
        a->head_dim = key_len;
        a->v_head_dim = val_len;
        a->rotary_dim = rope_dim;
        a->rope_interleave = 1;
        a->n_kv_heads = a->n_heads;
    } else {
        a->attn_kind = KT_ATTN_GQA;
        a->head_dim = key_len;
        a->v_head_dim = val_len;
        if (val_len != key_len)
            return kt__error(KT_ERR_UNSUPPORTED, "%s: key_length %u != value_length %u", path,
                             key_len, val_len);
        if ((st = get_u32(c, "rope.dimension_count", key_len, KT__MAX_DIM, &a->rotary_dim)) < 0)
            return st;
        a->rope_interleave = arch == KT_ARCH_MIXTRAL ? 1 : 0;
        a->attention_bias = find(c, 0, "attn_q", "bias") ? 1 : 0;
        a->attention_out_bias = find(c, 0, "attn_output", "bias") ? 1 : 0;
        const kt_gguf_tensor *qn = find(c, 0, "attn_q_norm", "weight");
        if (qn)
            a->qk_norm = qn->ne[0] == key_len ? KT_QK_NORM_PER_HEAD : KT_QK_NORM_FULL;
    }
    if (a->head_dim == 0 || a->rotary_dim == 0 || a->rotary_dim > a->head_dim ||
        a->rotary_dim % 2 || a->n_kv_heads == 0 || a->n_heads % a->n_kv_heads)
        return kt__error(KT_ERR_FORMAT, "%s: inconsistent attention dims (heads %u/%u, head %u, "
                         "rope %u)", path, a->n_heads, a->n_kv_heads, a->head_dim, a->rotary_dim);
    a->partial_rotary_factor = (float)a->rotary_dim / (float)a->head_dim;

    /* rope scaling */
    a->rope_type = KT_ROPE_DEFAULT;
    a->rope_factor = 1.0f;
    a->yarn_truncate = 1;
    const char *stype = NULL;
    if (kt__gguf_find(c->g, key(c, "rope.scaling.type")) &&
        (st = kt__gguf_get_str(c->g, key(c, "rope.scaling.type"), &stype)) < 0)
        return st;
    if (stype && strcmp(stype, "none")) {
        double factor, orig, logmul, bf, bs;
        if ((st = get_f64(c, "rope.scaling.factor", 1.0, &factor)) < 0 ||
            (st = get_f64(c, "rope.scaling.original_context_length", 0, &orig)) < 0 ||
            (st = get_f64(c, "rope.scaling.yarn_log_multiplier", 0, &logmul)) < 0 ||
            (st = get_f64(c, "rope.scaling.yarn_beta_fast", 32, &bf)) < 0 ||
            (st = get_f64(c, "rope.scaling.yarn_beta_slow", 1, &bs)) < 0)
            return st;
        if (!(factor > 0) || orig < 0 || orig > 4e9)
            return kt__error(KT_ERR_FORMAT, "%s: bad rope scaling factor/context", path);
        a->rope_factor = (float)factor;
        if (!strcmp(stype, "yarn")) {
            a->rope_type = KT_ROPE_YARN;
            a->rope_original_max_pos = (uint32_t)orig;
            a->yarn_beta_fast = (float)bf;
            a->yarn_beta_slow = (float)bs;
            /* llama.cpp stores 0.1 * mscale_all_dim (DeepSeek: mscale == mscale_all_dim) */
            a->yarn_mscale_all_dim = (float)(logmul / 0.1);
            a->yarn_mscale = a->yarn_mscale_all_dim;
        } else if (!strcmp(stype, "linear")) {
            a->rope_type = KT_ROPE_LINEAR;
        } else {
            return kt__error(KT_ERR_UNSUPPORTED, "%s: rope scaling '%s' is not supported", path,
                             stype);
        }
    }

    /* router */
    uint32_t gating = 0;
    if ((st = get_u32(c, "expert_gating_func", 0, 16, &gating)) < 0 ||
        (st = get_u32(c, "expert_group_count", 1, KT__MAX_EXPERTS, &a->n_group)) < 0 ||
        (st = get_u32(c, "expert_group_used_count", 1, KT__MAX_EXPERTS, &a->topk_group)) < 0 ||
        (st = get_u32(c, "leading_dense_block_count", 0, KT__MAX_LAYERS,
                      &a->first_k_dense_replace)) < 0)
        return st;
    /* without the key llama.cpp takes softmax for deepseek2 (V2/V2.5 files; V3 files
     * always carry 2 = sigmoid); GLM-4.5 and MiniMax-M2 are sigmoid by design */
    bool sigmoid_family = arch == KT_ARCH_GLM4_MOE || arch == KT_ARCH_MINIMAX_M2;
    a->score_func = gating == 2 || (gating == 0 && sigmoid_family) ? KT_SCORE_SIGMOID
                                                                   : KT_SCORE_SOFTMAX;
    double scale;
    if ((st = get_f64(c, "expert_weights_scale", 1.0, &scale)) < 0)
        return st;
    a->routed_scaling_factor = (float)(scale > 0 ? scale : 1.0);
    bool norm_default = arch != KT_ARCH_QWEN2_MOE;
    if ((st = get_bool(c, "expert_weights_norm", norm_default, &a->norm_topk_prob)) < 0)
        return st;
    if (arch == KT_ARCH_MIXTRAL)
        a->norm_topk_prob = 1;
    a->ffn_act = KT_ACT_SWIGLU;
    a->decoder_sparse_step = 1;
    if (a->n_group == 0 || a->n_routed_experts % a->n_group || a->topk_group == 0 ||
        a->topk_group > a->n_group)
        return kt__error(KT_ERR_FORMAT, "%s: expert groups %u/%u do not fit %u experts", path,
                         a->n_group, a->topk_group, a->n_routed_experts);

    /* per layer: MoE where the router is; shared expert width from its tensor */
    if ((st = kt__config_alloc_layers(cfg)) < 0)
        return st;
    for (uint32_t l = 0; l < a->n_layers; l++) {
        cfg->layer_moe[l] = find(c, l, "ffn_gate_inp", "weight") ? 1 : 0;
        if (cfg->layer_moe[l] && find(c, l, "exp_probs_b", "bias"))
            a->score_correction_bias = 1;
        const kt_gguf_tensor *sh = find(c, l, "ffn_gate_shexp", "weight");
        if (cfg->layer_moe[l] && sh && sh->n_dims == 2 && !a->shared_intermediate_size) {
            a->shared_intermediate_size = (uint32_t)KT_MIN(sh->ne[1], (uint64_t)KT__MAX_DIM);
            if (!a->n_shared_experts)
                a->n_shared_experts = 1;
        }
        if (cfg->layer_moe[l] && find(c, l, "ffn_gate_inp_shexp", "weight"))
            a->shared_expert_gate = 1;
    }
    if (a->moe_intermediate_size == 0) {
        for (uint32_t l = 0; l < a->n_layers && !a->moe_intermediate_size; l++) {
            const kt_gguf_tensor *t = find(c, l, "ffn_up_exps", "weight");
            if (t && t->n_dims == 3)
                a->moe_intermediate_size = (uint32_t)KT_MIN(t->ne[1], (uint64_t)KT__MAX_DIM);
        }
    }
    if (a->moe_intermediate_size == 0)
        return kt__error(KT_ERR_FORMAT, "%s: no expert width (%s.expert_feed_forward_length)",
                         path, c->arch);
    if (!a->n_shared_experts)
        a->shared_intermediate_size = 0;
    return kt__config_finish(cfg, path, c->m->rt);
}

/* ------------------------------------------------------------ tensors --- */

typedef struct gname {
    const char *base;
    const char *param;
} gname;

static gname gguf_name(kt_role role)
{
    switch (role) {
    case KT_ROLE_EMBED: return (gname){"token_embd", "weight"};
    case KT_ROLE_FINAL_NORM: return (gname){"output_norm", "weight"};
    case KT_ROLE_LM_HEAD: return (gname){"output", "weight"};
    case KT_ROLE_ATTN_NORM: return (gname){"attn_norm", "weight"};
    case KT_ROLE_Q_PROJ: return (gname){"attn_q", "weight"};
    case KT_ROLE_K_PROJ: return (gname){"attn_k", "weight"};
    case KT_ROLE_V_PROJ: return (gname){"attn_v", "weight"};
    case KT_ROLE_O_PROJ: return (gname){"attn_output", "weight"};
    case KT_ROLE_Q_BIAS: return (gname){"attn_q", "bias"};
    case KT_ROLE_K_BIAS: return (gname){"attn_k", "bias"};
    case KT_ROLE_V_BIAS: return (gname){"attn_v", "bias"};
    case KT_ROLE_O_BIAS: return (gname){"attn_output", "bias"};
    case KT_ROLE_Q_NORM: return (gname){"attn_q_norm", "weight"};
    case KT_ROLE_K_NORM: return (gname){"attn_k_norm", "weight"};
    case KT_ROLE_SINKS: return (gname){"attn_sinks", "weight"};
    case KT_ROLE_Q_A_PROJ: return (gname){"attn_q_a", "weight"};
    case KT_ROLE_Q_A_NORM: return (gname){"attn_q_a_norm", "weight"};
    case KT_ROLE_Q_B_PROJ: return (gname){"attn_q_b", "weight"};
    case KT_ROLE_KV_A_PROJ: return (gname){"attn_kv_a_mqa", "weight"};
    case KT_ROLE_KV_A_NORM: return (gname){"attn_kv_a_norm", "weight"};
    case KT_ROLE_KV_B_PROJ: return (gname){"attn_kv_b", "weight"};
    case KT_ROLE_K_B_PROJ: return (gname){"attn_k_b", "weight"};
    case KT_ROLE_V_B_PROJ: return (gname){"attn_v_b", "weight"};
    case KT_ROLE_FFN_NORM: return (gname){"ffn_norm", "weight"};
    case KT_ROLE_GATE_PROJ: return (gname){"ffn_gate", "weight"};
    case KT_ROLE_UP_PROJ: return (gname){"ffn_up", "weight"};
    case KT_ROLE_DOWN_PROJ: return (gname){"ffn_down", "weight"};
    case KT_ROLE_ROUTER: return (gname){"ffn_gate_inp", "weight"};
    case KT_ROLE_ROUTER_BIAS: return (gname){"ffn_gate_inp", "bias"};
    case KT_ROLE_SCORE_CORRECTION: return (gname){"exp_probs_b", "bias"};
    case KT_ROLE_EXPERT_GATE: return (gname){"ffn_gate_exps", "weight"};
    case KT_ROLE_EXPERT_UP: return (gname){"ffn_up_exps", "weight"};
    case KT_ROLE_EXPERT_DOWN: return (gname){"ffn_down_exps", "weight"};
    case KT_ROLE_SHARED_GATE: return (gname){"ffn_gate_shexp", "weight"};
    case KT_ROLE_SHARED_UP: return (gname){"ffn_up_shexp", "weight"};
    case KT_ROLE_SHARED_DOWN: return (gname){"ffn_down_shexp", "weight"};
    case KT_ROLE_SHARED_EXPERT_GATE: return (gname){"ffn_gate_inp_shexp", "weight"};
    default: return (gname){NULL, NULL};
    }
}

static kt_status add_view(gctx *c, uint32_t layer, kt_role role, uint32_t expert)
{
    const kt_arch_info *a = &c->m->cfg.info;
    const char *path = c->m->path;
    gname nm = gguf_name(role);
    if (!nm.base)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: role %s has no GGUF tensor", path,
                         kt_role_name(role));
    bool global = kt__role_is_global(role), expert_role = kt__role_is_expert(role);
    const kt_gguf_tensor *t = find(c, global ? UINT32_MAX : layer, nm.base, nm.param);
    if (!t && role == KT_ROLE_FFN_NORM) /* GLM-4.5 spells it post_attention_norm */
        t = find(c, layer, "post_attention_norm", "weight");
    char full[160];
    if (global)
        snprintf(full, sizeof full, "%s.%s", nm.base, nm.param);
    else
        snprintf(full, sizeof full, "blk.%u.%s.%s", layer, nm.base, nm.param);
    if (!t)
        return kt__error(KT_ERR_FORMAT, "%s: missing tensor '%s'", path, full);
    if (t->type == KT_TYPE_INVALID)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: tensor '%s': ggml type %u is not supported",
                         path, t->name, t->ggml_type);

    uint64_t rows, cols;
    kt__role_expected_shape(c->m, layer, role, &rows, &cols);
    /* ne innermost first: a weight is {cols, rows}, a vector {rows}; experts add E */
    uint64_t want[3];
    uint32_t nd = 0;
    bool vector = cols == 1 && role != KT_ROLE_EMBED;
    if (role == KT_ROLE_K_B_PROJ || role == KT_ROLE_V_B_PROJ) { /* per-head stack */
        want[nd++] = cols;
        want[nd++] = rows / a->n_heads;
        want[nd++] = a->n_heads;
    } else {
        if (!vector)
            want[nd++] = cols;
        want[nd++] = rows;
        if (expert_role)
            want[nd++] = a->n_routed_experts;
    }
    bool ok = t->n_dims == nd;
    for (uint32_t d = 0; ok && d < nd; d++)
        ok = t->ne[d] == want[d];
    if (!ok) {
        char got[96];
        size_t off = 0;
        for (uint32_t d = 0; d < t->n_dims && off < sizeof got; d++)
            off += (size_t)snprintf(got + off, sizeof got - off, "%s%llu", d ? ", " : "",
                                    (unsigned long long)t->ne[d]);
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' has ne [%s], the metadata implies "
                         "[%llu%s%llu%s] (innermost first)", path, t->name, got,
                         (unsigned long long)want[0], nd > 1 ? ", " : "",
                         nd > 1 ? (unsigned long long)want[1] : 0ull,
                         nd > 2 ? ", ..." : "");
    }

    kt_tensor_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = (uint32_t)sizeof v;
    v.name = t->name;
    v.role = role;
    v.layer = global ? UINT32_MAX : layer;
    v.expert = expert_role ? expert : UINT32_MAX;
    v.type = t->type;
    v.storage = kt_type_block_size(t->type) > 1 ? KT_STORAGE_GGML_BLOCK : KT_STORAGE_PLAIN;
    v.layout = KT_LAYOUT_OUT_IN;
    v.rows = rows;
    v.cols = cols;
    uint32_t nd_view = expert_role ? t->n_dims - 1 : t->n_dims;
    v.n_dims = nd_view;
    for (uint32_t d = 0; d < nd_view; d++)
        v.shape[d] = t->ne[nd_view - 1 - d];
    if (v.storage == KT_STORAGE_GGML_BLOCK) {
        v.block_rows = 1;
        v.block_cols = kt_type_block_size(t->type);
    }
    if (expert_role) {
        uint64_t stride = t->nbytes / a->n_routed_experts;
        v.flags = KT_TENSOR_F_STACKED;
        v.expert_stride = stride;
        v.nbytes = stride;
        v.data = (const uint8_t *)t->data + stride * expert;
    } else {
        v.nbytes = t->nbytes;
        v.data = t->data;
    }
    if (!expert_role || expert == 0)
        c->n_used++;
    return kt__model_add_entry(c->m, &v, &c->capacity);
}

/* split.no / split.count of a shard (llama.cpp's gguf-split); 0/1 when absent. */
static kt_status split_info(const kt_gguf *g, uint64_t *no, uint64_t *count)
{
    *no = 0;
    *count = 1;
    kt_status st = KT_OK;
    if (kt__gguf_find(g, "split.no"))
        st = kt__gguf_get_uint(g, "split.no", no);
    if (st == KT_OK && kt__gguf_find(g, "split.count"))
        st = kt__gguf_get_uint(g, "split.count", count);
    return st;
}

/* Opens m->path, or every shard of the split set it belongs to
 * (PREFIX-00001-of-00003.gguf ...): metadata from the first, tensors from all. */
static kt_status open_shards(kt_model *m)
{
    const char *path = m->path;
    size_t n = strlen(path);
    unsigned no = 0, count = 0;
    int used = 0;
    /* "-%05u-of-%05u.gguf" is 20 characters */
    bool named = n > 20 && sscanf(path + n - 20, "-%5u-of-%5u.gguf%n", &no, &count, &used) == 2 &&
                 used == 20 && no >= 1 && no <= count && count <= 99999;
    if (!named) {
        kt_status st = kt__gguf_open_file(&m->gguf, path);
        uint64_t sno, scount;
        if (st == KT_OK && (st = split_info(m->gguf, &sno, &scount)) == KT_OK && scount > 1)
            return kt__error(KT_ERR_FORMAT, "%s: shard %llu of a split GGUF of %llu, but the file "
                             "name does not end in -NNNNN-of-NNNNN.gguf", path,
                             (unsigned long long)sno + 1, (unsigned long long)scount);
        return st;
    }
    char *shard = kt__malloc(n + 1);
    if (!shard)
        return KT_ERR_NOMEM;
    kt_status st = KT_OK;
    if (count > 1 && !(m->gguf_more = kt__calloc(count - 1, sizeof *m->gguf_more)))
        st = KT_ERR_NOMEM;
    for (unsigned i = 1; st == KT_OK && i <= count; i++) {
        snprintf(shard, n + 1, "%.*s-%05u-of-%05u.gguf", (int)(n - 20), path, i, count);
        kt_gguf *g = NULL;
        st = kt__gguf_open_file(&g, shard);
        if (st == KT_ERR_NOT_FOUND)
            st = kt__error(KT_ERR_IO, "%s: shard %u of %u is missing", shard, i, count);
        if (st < 0)
            break;
        if (i == 1)
            m->gguf = g;
        else
            m->gguf_more[m->n_gguf_more++] = g;
        uint64_t sno, scount;
        if ((st = split_info(g, &sno, &scount)) < 0)
            break;
        if ((count > 1 || scount > 1) && (sno + 1 != i || scount != count))
            st = kt__error(KT_ERR_FORMAT, "%s: split.no %llu / split.count %llu do not match "
                           "the file name (shard %u of %u)", shard, (unsigned long long)sno,
                           (unsigned long long)scount, i, count);
    }
    kt__free(shard);
    return st;
}

kt_status kt__model_open_gguf(kt_model *m)
{
    kt_status st = m->gguf ? KT_OK : open_shards(m);
    if (st < 0)
        return st;
    gctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.g = m->gguf;
    if ((st = read_config(&c)) < 0)
        return st;
    if (m->flags & KT_MODEL_OPEN_F_CONFIG_ONLY)
        return KT_OK;
    const kt_arch_info *a = &m->cfg.info;
    kt_role roles[64];
    if ((st = add_view(&c, 0, KT_ROLE_EMBED, 0)) < 0)
        return st;
    for (uint32_t l = 0; l < a->n_layers; l++) {
        size_t n = kt__layer_roles(&m->cfg, l, roles);
        for (size_t r = 0; r < n; r++) {
            uint32_t ne = kt__role_is_expert(roles[r]) ? a->n_routed_experts : 1;
            for (uint32_t e = 0; e < ne; e++)
                if ((st = add_view(&c, l, roles[r], e)) < 0)
                    return st;
        }
    }
    if ((st = add_view(&c, 0, KT_ROLE_FINAL_NORM, 0)) < 0)
        return st;
    if (a->tie_word_embeddings) {
        kt_tensor_view v = m->entries[0].view;
        v.role = KT_ROLE_LM_HEAD;
        st = kt__model_add_entry(m, &v, &c.capacity);
    } else {
        st = add_view(&c, 0, KT_ROLE_LM_HEAD, 0);
    }
    if (st < 0)
        return st;
    size_t total = kt__gguf_tensor_count(m->gguf);
    for (uint32_t i = 0; i < m->n_gguf_more; i++)
        total += kt__gguf_tensor_count(m->gguf_more[i]);
    m->n_ignored = total > c.n_used ? total - c.n_used : 0;
    return kt__model_finish_index(m);
}
