/* From a kt_model to what the forward pass reads: the architecture
 * description (kt__hparams) and the weights as F32 or BF16 [out][in]
 * matrices, dequantized from FP8 block-128 / INT4 packed where needed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

/* ------------------------------------------------------------------ rope --- */

/* HF _compute_yarn_parameters: blend of interpolated and extrapolated
 * frequencies over a linear ramp between the correction dims. */
static double yarn_correction_dim(double rot, int dim, double base, double orig_max)
{
    return (dim * log(orig_max / (rot * 2.0 * M_PI))) / (2.0 * log(base));
}

static void rope_frequencies(kt__hparams *hp, const kt_arch_info *a)
{
    int dim = hp->rope_dim;
    double base = a->rope_theta > 0 ? a->rope_theta : 10000.0;
    hp->rope_attn_factor = 1.0f;
    for (int i = 0; i < dim / 2; i++) {
        /* f_i = base^(-2i/d), computed like torch in f32 */
        float pos_freq = powf((float)base, (float)(2 * i) / (float)dim);
        hp->inv_freq[i] = 1.0f / pos_freq;
    }
    if (a->rope_type == KT_ROPE_LINEAR && a->rope_factor > 0) {
        for (int i = 0; i < dim / 2; i++)
            hp->inv_freq[i] /= a->rope_factor;
    } else if (a->rope_type == KT_ROPE_YARN) {
        double factor = a->rope_factor > 0 ? a->rope_factor : 1.0;
        double orig = a->rope_original_max_pos ? a->rope_original_max_pos
                                               : a->max_position_embeddings;
        double beta_fast = a->yarn_beta_fast > 0 ? a->yarn_beta_fast : 32.0;
        double beta_slow = a->yarn_beta_slow > 0 ? a->yarn_beta_slow : 1.0;
        double low = yarn_correction_dim(beta_fast, dim, base, orig);
        double high = yarn_correction_dim(beta_slow, dim, base, orig);
        if (a->yarn_truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0)
            low = 0;
        if (high > dim - 1)
            high = dim - 1;
        if (low == high)
            high += 0.001;
        for (int i = 0; i < dim / 2; i++) {
            float pos_freq = powf((float)base, (float)(2 * i) / (float)dim);
            float extra = 1.0f / pos_freq;
            float inter = 1.0f / ((float)factor * pos_freq);
            float ramp = (float)(((double)i - low) / (high - low));
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float extra_factor = 1.0f - ramp;
            hp->inv_freq[i] = inter * (1.0f - extra_factor) + extra * extra_factor;
        }
        hp->rope_attn_factor = a->yarn_attention_factor > 0 ? a->yarn_attention_factor : 1.0f;
    }
}

static kt__family family_of(int32_t arch)
{
    switch (arch) {
    case KT_ARCH_DEEPSEEK_V3:
    case KT_ARCH_KIMI_K2: return KT__FAM_DEEPSEEK_V3;
    case KT_ARCH_QWEN3_MOE: return KT__FAM_QWEN3_MOE;
    case KT_ARCH_QWEN2_MOE: return KT__FAM_QWEN2_MOE;
    case KT_ARCH_MIXTRAL: return KT__FAM_MIXTRAL;
    case KT_ARCH_MINIMAX_M2: return KT__FAM_MINIMAX_M2;
    case KT_ARCH_GPT_OSS: return KT__FAM_GPT_OSS;
    case KT_ARCH_GLM4_MOE: return KT__FAM_GLM4_MOE;
    default: return (kt__family)-1;
    }
}

kt_status kt__hparams_from_model(kt__hparams *hp, const kt_model *model)
{
    memset(hp, 0, sizeof *hp);
    kt_arch_info a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    kt_status st = kt_model_arch(model, &a);
    if (st < 0)
        return st;
    if ((int)family_of(a.arch) < 0)
        return kt__error(KT_ERR_UNSUPPORTED, "engine: model_type '%s' is not supported",
                         a.model_type ? a.model_type : "?");
    hp->family = family_of(a.arch);
    hp->n_layer = (int32_t)a.n_layers;
    hp->n_embd = (int32_t)a.hidden_size;
    hp->n_vocab = (int32_t)a.vocab_size;
    hp->n_head = (int32_t)a.n_heads;
    hp->n_head_kv = (int32_t)(a.n_kv_heads ? a.n_kv_heads : a.n_heads);
    hp->head_dim = (int32_t)a.head_dim;
    hp->max_pos = (int32_t)a.max_position_embeddings;
    hp->rms_eps = a.rms_norm_eps > 0 ? a.rms_norm_eps : 1e-6f;
    if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_vocab <= 0 || hp->n_head <= 0)
        return kt__error(KT_ERR_FORMAT, "engine: %s: config has a zero size (layers %d, "
                         "hidden %d, vocab %d, heads %d)", kt_model_path(model),
                         hp->n_layer, hp->n_embd, hp->n_vocab, hp->n_head);

    hp->mla = a.attn_kind == KT_ATTN_MLA;
    if (hp->mla) {
        hp->q_lora_rank = (int32_t)a.q_lora_rank;
        hp->kv_lora_rank = (int32_t)a.kv_lora_rank;
        hp->qk_nope = (int32_t)a.qk_nope_head_dim;
        hp->qk_rope = (int32_t)a.qk_rope_head_dim;
        hp->v_head = (int32_t)a.v_head_dim;
        hp->head_dim = hp->qk_nope + hp->qk_rope;
        hp->n_head_kv = hp->n_head;
    } else if (hp->head_dim <= 0 || hp->n_head % hp->n_head_kv != 0) {
        return kt__error(KT_ERR_FORMAT, "engine: %s: head_dim %d / %d heads / %d kv heads "
                         "do not form GQA", kt_model_path(model), hp->head_dim, hp->n_head,
                         hp->n_head_kv);
    }
    hp->qk_norm = a.qk_norm == KT_QK_NORM_PER_HEAD ? KT__QK_NORM_HEAD
                  : a.qk_norm == KT_QK_NORM_FULL   ? KT__QK_NORM_FULL
                                                   : KT__QK_NORM_NONE;
    hp->attn_bias = a.attention_bias != 0;
    hp->o_bias = a.attention_out_bias != 0;
    hp->sinks = a.attention_sinks != 0;
    hp->sliding_window = (int32_t)a.sliding_window;
    hp->attn_scale = a.attn_scale > 0 ? a.attn_scale : 1.0f / sqrtf((float)hp->head_dim);

    hp->rope_dim = (int32_t)a.rotary_dim;
    if (hp->rope_dim <= 0)
        hp->rope_dim = hp->mla ? hp->qk_rope : hp->head_dim;
    if (hp->rope_dim % 2 || hp->rope_dim > hp->head_dim)
        return kt__error(KT_ERR_FORMAT, "engine: %s: rotary dim %d does not fit head dim %d",
                         kt_model_path(model), hp->rope_dim, hp->head_dim);
    hp->rope_interleave = a.rope_interleave != 0;
    hp->inv_freq = kt__calloc((size_t)hp->rope_dim / 2 + 1, sizeof(float));
    hp->layer_sliding = kt__calloc((size_t)hp->n_layer, sizeof(bool));
    hp->layer_moe = kt__calloc((size_t)hp->n_layer, sizeof(bool));
    if (!hp->inv_freq || !hp->layer_sliding || !hp->layer_moe)
        return KT_ERR_NOMEM;
    if (a.rope_type != KT_ROPE_NONE)
        rope_frequencies(hp, &a);

    for (int32_t l = 0; l < hp->n_layer; l++) {
        kt_layer_info li = KT_LAYER_INFO_INIT;
        st = kt_model_layer(model, (uint32_t)l, &li);
        if (st < 0)
            return st;
        hp->layer_moe[l] = li.is_moe != 0;
        hp->layer_sliding[l] = li.sliding_window != 0;
        if (li.sliding_window)
            hp->sliding_window = (int32_t)li.sliding_window;
    }

    hp->n_ff = (int32_t)a.intermediate_size;
    hp->n_expert = (int32_t)a.n_routed_experts;
    hp->n_expert_used = (int32_t)a.n_experts_per_tok;
    hp->n_ff_exp = (int32_t)a.moe_intermediate_size;
    hp->n_ff_shared = a.n_shared_experts ? (int32_t)a.shared_intermediate_size : 0;
    hp->shared_gate = a.shared_expert_gate != 0;
    if (hp->n_expert > 0 && (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert))
        return kt__error(KT_ERR_FORMAT, "engine: %s: num_experts_per_tok %d with %d experts",
                         kt_model_path(model), hp->n_expert_used, hp->n_expert);
    if (hp->family == KT__FAM_GPT_OSS)
        hp->router = KT__ROUTER_TOPK_SOFTMAX;
    else if (a.score_func == KT_SCORE_SIGMOID)
        hp->router = KT__ROUTER_SIGMOID_BIAS;
    else
        hp->router = KT__ROUTER_SOFTMAX_TOPK;
    hp->router_bias = a.router_bias != 0;
    hp->norm_topk = a.norm_topk_prob != 0;
    hp->routed_scale = a.routed_scaling_factor > 0 ? a.routed_scaling_factor : 1.0f;
    hp->n_group = a.n_group > 0 ? (int32_t)a.n_group : 1;
    hp->topk_group = a.topk_group > 0 ? (int32_t)a.topk_group : hp->n_group;
    if (hp->n_group > 64)
        return kt__error(KT_ERR_UNSUPPORTED, "engine: %s: n_group %d > 64 is not supported",
                         kt_model_path(model), hp->n_group);
    if (hp->n_expert > 0 && (hp->n_expert % hp->n_group || hp->topk_group > hp->n_group))
        return kt__error(KT_ERR_FORMAT, "engine: %s: n_group %d / topk_group %d do not divide "
                         "%d experts", kt_model_path(model), hp->n_group, hp->topk_group,
                         hp->n_expert);
    hp->gptoss_act = a.ffn_act == KT_ACT_SWIGLU_OAI;
    hp->act_alpha = a.swiglu_alpha > 0 ? a.swiglu_alpha : 1.702f;
    hp->act_limit = a.swiglu_limit > 0 ? a.swiglu_limit : 7.0f;

    for (uint32_t i = 0; i < a.n_eos_token_ids && hp->n_eos < KT__MAX_EOS; i++) {
        int32_t id = a.eos_token_ids[i];
        if (id < 0 || id >= hp->n_vocab) {
            /* kt_model_open() already warned */
            kt__log(NULL, KT_LOG_INFO, "%s: eos_token_id %d is outside the vocabulary (%d); "
                    "generation will not stop on it", kt_model_path(model), id, hp->n_vocab);
            continue;
        }
        hp->eos[hp->n_eos++] = id;
    }
    return KT_OK;
}

void kt__hparams_free(kt__hparams *hp)
{
    kt__free(hp->inv_freq);
    kt__free(hp->layer_sliding);
    kt__free(hp->layer_moe);
    hp->inv_freq = NULL;
    hp->layer_sliding = hp->layer_moe = NULL;
}

/* --------------------------------------------------------------- weights --- */

static float scale_at(const kt_tensor_view *v, uint64_t i)
{
    if (v->scale_type == KT_TYPE_BF16)
        return kt__bf16_to_f32(((const uint16_t *)v->scale_data)[i]);
    return ((const float *)v->scale_data)[i];
}

/* Dequantizes a view into logical [rows][cols] F32 (out-major). */
static kt_status view_to_f32(const kt_tensor_view *v, float *dst)
{
    uint64_t rows = v->rows, cols = v->cols, n = rows * cols;
    switch (v->storage) {
    case KT_STORAGE_PLAIN: {
        kt_status st = kt__tensor_to_f32(v->data, (kt_type)v->type, n, dst);
        if (st < 0)
            return kt__error_prefix(st, "%s", v->name);
        if (v->layout == KT_LAYOUT_IN_OUT && rows > 1 && cols > 1) {
            float *tmp = kt__malloc_array(n, sizeof(float));
            if (!tmp)
                return KT_ERR_NOMEM;
            memcpy(tmp, dst, n * sizeof(float));
            /* stored [cols][rows] */
            for (uint64_t c = 0; c < cols; c++)
                for (uint64_t r = 0; r < rows; r++)
                    dst[r * cols + c] = tmp[c * rows + r];
            kt__free(tmp);
        }
        return KT_OK;
    }
    case KT_STORAGE_FP8_BLOCK: {
        if (v->type != KT_TYPE_F8_E4M3 || !v->scale_data || !v->block_rows || !v->block_cols)
            return kt__error(KT_ERR_UNSUPPORTED, "%s: FP8 storage without E4M3 data or scales",
                             v->name);
        const uint8_t *q = v->data;
        uint64_t scols = v->scale_n_dims == 2 ? v->scale_shape[1] : 1;
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < cols; c++)
                dst[r * cols + c] = kt__e4m3_to_f32(q[r * cols + c]) *
                                    scale_at(v, (r / v->block_rows) * scols + c / v->block_cols);
        return KT_OK;
    }
    case KT_STORAGE_INT4_PACKED: {
        uint32_t g = v->block_cols;
        if (!g || cols % 8 || cols % g || !v->scale_data)
            return kt__error(KT_ERR_FORMAT, "%s: INT4 packing with cols %llu, group %u",
                             v->name, (unsigned long long)cols, g);
        const uint8_t *p = v->data;
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < cols; c++) {
                uint32_t word;
                memcpy(&word, p + 4 * (r * (cols / 8) + c / 8), 4);
                int q = (int)((word >> (4 * (c % 8))) & 0xf) - 8;
                dst[r * cols + c] = (float)q * scale_at(v, r * (cols / g) + c / g);
            }
        return KT_OK;
    }
    default:
        return kt__error(KT_ERR_UNSUPPORTED, "%s: storage %s is not supported by the engine",
                         v->name, kt_storage_name((kt_storage)v->storage));
    }
}

typedef struct loader {
    const kt_model *model;
    const kt__hparams *hp;
    kt_type mat_type;
    bool skip_experts; /* routed experts are read by the MoE backend */
} loader;

/* The view of (layer, role, expert) into v; *found false when the model has no such tensor,
 * which is an error (KT_ERR_NOT_FOUND) when it is required. */
static kt_status get_view(const loader *ld, int32_t layer, kt_role role, int32_t expert,
                          bool required, kt_tensor_view *v, bool *found)
{
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    uint32_t lu = layer < 0 ? UINT32_MAX : (uint32_t)layer;
    uint32_t eu = expert < 0 ? 0 : (uint32_t)expert;
    if (!kt_model_has_tensor(ld->model, lu == UINT32_MAX ? 0 : lu, role, eu)) {
        *found = false;
        if (required)
            return kt__error(KT_ERR_NOT_FOUND, "engine: layer %d: no %s tensor", layer,
                             kt_role_name(role));
        return KT_OK;
    }
    *found = true;
    return kt_model_tensor(ld->model, lu == UINT32_MAX ? 0 : lu, role, eu, v);
}

/* 1-D vector as owned F32 [n]; NULL (and OK) when absent and not required. */
static kt_status load_vec(const loader *ld, int32_t layer, kt_role role, int32_t expert,
                          int64_t n, bool required, float **out)
{
    *out = NULL;
    kt_tensor_view v;
    bool found;
    kt_status st = get_view(ld, layer, role, expert, required, &v, &found);
    if (st < 0 || !found)
        return st;
    if ((int64_t)(v.rows * v.cols) != n)
        return kt__error(KT_ERR_FORMAT, "%s: %llu values, expected %lld", v.name,
                         (unsigned long long)(v.rows * v.cols), (long long)n);
    float *p = kt__malloc_array((size_t)n, sizeof(float));
    if (!p)
        return KT_ERR_NOMEM;
    st = view_to_f32(&v, p);
    if (st < 0) {
        kt__free(p);
        return st;
    }
    *out = p;
    return KT_OK;
}

/* Converts logical F32 [rows][cols] into a matrix of the loader's type; takes `f`. */
static kt_status mat_from_f32(const loader *ld, float *f, int32_t rows, int32_t cols,
                              kt__mat *m)
{
    m->rows = rows;
    m->cols = cols;
    m->owned = true;
    if (ld->mat_type == KT_TYPE_F32) {
        m->type = KT_TYPE_F32;
        m->data = f;
        return KT_OK;
    }
    size_t n = (size_t)rows * cols;
    /* fast mode keeps weights exact: BF16 only when every value is a BF16
     * number (F32 checkpoints saved from BF16), else F32 (F16 needs 11 bits) */
    for (size_t i = 0; i < n; i++)
        if (kt__bf16_to_f32(kt__f32_to_bf16(f[i])) != f[i] && f[i] == f[i]) {
            m->type = KT_TYPE_F32;
            m->data = f;
            return KT_OK;
        }
    uint16_t *b = kt__malloc_array(n, sizeof(uint16_t));
    if (!b) {
        kt__free(f);
        return KT_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        b[i] = kt__f32_to_bf16(f[i]);
    kt__free(f);
    m->type = KT_TYPE_BF16;
    m->data = b;
    return KT_OK;
}

static kt_status load_mat(const loader *ld, int32_t layer, kt_role role, int32_t expert,
                          int64_t rows, int64_t cols, bool required, kt__mat *m)
{
    memset(m, 0, sizeof *m);
    kt_tensor_view v;
    bool found;
    kt_status st = get_view(ld, layer, role, expert, required, &v, &found);
    if (st < 0 || !found)
        return st;
    if ((int64_t)v.rows != rows || (int64_t)v.cols != cols)
        return kt__error(KT_ERR_FORMAT, "%s: shape [%llu][%llu], expected [%lld][%lld]", v.name,
                         (unsigned long long)v.rows, (unsigned long long)v.cols,
                         (long long)rows, (long long)cols);
    if (ld->mat_type == KT_TYPE_BF16 && v.storage == KT_STORAGE_PLAIN &&
        v.type == KT_TYPE_BF16 && v.layout == KT_LAYOUT_OUT_IN) {
        /* fast mode: use the mapped BF16 weights in place */
        m->rows = (int32_t)rows;
        m->cols = (int32_t)cols;
        m->type = KT_TYPE_BF16;
        m->data = (void *)v.data;
        m->owned = false;
        return KT_OK;
    }
    if (ld->mat_type == KT_TYPE_BF16 && v.storage == KT_STORAGE_FP8_BLOCK &&
        v.type == KT_TYPE_F8_E4M3 && v.layout == KT_LAYOUT_OUT_IN && v.scale_data &&
        v.block_rows && v.block_cols && v.scale_n_dims == 2 &&
        (v.scale_type == KT_TYPE_F32 || v.scale_type == KT_TYPE_BF16)) {
        /* fast mode: FP8 read in place, dequantized row by row (BF16 would round) */
        m->rows = (int32_t)rows;
        m->cols = (int32_t)cols;
        m->type = KT_TYPE_F8_E4M3;
        m->data = (void *)v.data;
        m->owned = false;
        m->scale = v.scale_data;
        m->scale_type = (kt_type)v.scale_type;
        m->block_rows = (int32_t)v.block_rows;
        m->block_cols = (int32_t)v.block_cols;
        m->scale_cols = (int32_t)v.scale_shape[1];
        return KT_OK;
    }
    float *f = kt__malloc_array((size_t)(rows * cols), sizeof(float));
    if (!f)
        return KT_ERR_NOMEM;
    st = view_to_f32(&v, f);
    if (st < 0) {
        kt__free(f);
        return st;
    }
    if (v.storage == KT_STORAGE_INT4_PACKED) {
        /* int4 · BF16 scale needs up to 11 mantissa bits: BF16 would round it */
        loader exact = *ld;
        exact.mat_type = KT_TYPE_F32;
        return mat_from_f32(&exact, f, (int32_t)rows, (int32_t)cols, m);
    }
    return mat_from_f32(ld, f, (int32_t)rows, (int32_t)cols, m);
}

static void mat_free(kt__mat *m)
{
    if (m->owned)
        kt__free(m->data);
    memset(m, 0, sizeof *m);
}

/* gpt-oss: fused [2I][H] logical matrix with gate rows at 2i, up rows at 2i+1. */
static kt_status load_fused_expert(const loader *ld, int32_t layer, int32_t e, kt__expert *x)
{
    const kt__hparams *hp = ld->hp;
    int32_t I = hp->n_ff_exp, H = hp->n_embd;
    kt_tensor_view v;
    bool found;
    kt_status st = get_view(ld, layer, KT_ROLE_EXPERT_GATE_UP, e, false, &v, &found);
    if (st < 0)
        return st;
    if (!found)
        return kt__error(KT_ERR_NOT_FOUND, "engine: layer %d expert %d: no gate/up weights",
                         layer, e);
    if ((int64_t)v.rows != 2 * (int64_t)I || (int64_t)v.cols != H)
        return kt__error(KT_ERR_FORMAT, "%s: logical shape [%llu][%llu], expected [%d][%d]",
                         v.name, (unsigned long long)v.rows, (unsigned long long)v.cols, 2 * I,
                         H);
    float *f = kt__malloc_array((size_t)2 * I * H, sizeof(float));
    float *g = kt__malloc_array((size_t)I * H, sizeof(float));
    float *u = kt__malloc_array((size_t)I * H, sizeof(float));
    if (!f || !g || !u) {
        kt__free(f), kt__free(g), kt__free(u);
        return KT_ERR_NOMEM;
    }
    st = view_to_f32(&v, f);
    if (st < 0) {
        kt__free(f), kt__free(g), kt__free(u);
        return st;
    }
    for (int32_t i = 0; i < I; i++) {
        memcpy(g + (size_t)i * H, f + (size_t)(2 * i) * H, sizeof(float) * H);
        memcpy(u + (size_t)i * H, f + (size_t)(2 * i + 1) * H, sizeof(float) * H);
    }
    kt__free(f);
    st = mat_from_f32(ld, g, I, H, &x->gate);
    if (st < 0) {
        kt__free(u);
        return st;
    }
    st = mat_from_f32(ld, u, I, H, &x->up);
    if (st < 0)
        return st;
    float *b = NULL;
    st = load_vec(ld, layer, KT_ROLE_EXPERT_GATE_UP_BIAS, e, 2 * (int64_t)I, false, &b);
    if (st < 0)
        return st;
    if (b) {
        x->b_gate = kt__malloc_array((size_t)I, sizeof(float));
        x->b_up = kt__malloc_array((size_t)I, sizeof(float));
        if (!x->b_gate || !x->b_up) {
            kt__free(b);
            return KT_ERR_NOMEM;
        }
        for (int32_t i = 0; i < I; i++) {
            x->b_gate[i] = b[2 * i];
            x->b_up[i] = b[2 * i + 1];
        }
        kt__free(b);
    }
    return KT_OK;
}

static kt_status load_layer(const loader *ld, int32_t l, kt__layer *L)
{
    const kt__hparams *hp = ld->hp;
    int32_t H = hp->n_embd, nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
    kt_status st;
#define TRY(x)            \
    do {                  \
        st = (x);         \
        if (st < 0)       \
            return st;    \
    } while (0)
    TRY(load_vec(ld, l, KT_ROLE_ATTN_NORM, -1, H, true, &L->attn_norm));
    TRY(load_vec(ld, l, KT_ROLE_FFN_NORM, -1, H, true, &L->ffn_norm));
    if (hp->mla) {
        int32_t qk = hp->qk_nope + hp->qk_rope;
        if (hp->q_lora_rank > 0) {
            TRY(load_mat(ld, l, KT_ROLE_Q_A_PROJ, -1, hp->q_lora_rank, H, true, &L->wq_a));
            TRY(load_vec(ld, l, KT_ROLE_Q_A_NORM, -1, hp->q_lora_rank, true, &L->q_a_norm));
            TRY(load_mat(ld, l, KT_ROLE_Q_B_PROJ, -1, (int64_t)nh * qk, hp->q_lora_rank, true,
                         &L->wq_b));
        } else {
            TRY(load_mat(ld, l, KT_ROLE_Q_PROJ, -1, (int64_t)nh * qk, H, true, &L->wq));
        }
        TRY(load_mat(ld, l, KT_ROLE_KV_A_PROJ, -1, hp->kv_lora_rank + hp->qk_rope, H, true,
                     &L->wkv_a));
        TRY(load_vec(ld, l, KT_ROLE_KV_A_NORM, -1, hp->kv_lora_rank, true, &L->kv_a_norm));
        /* kv_b as stored in fast mode: absorbed decode widens its rows per head,
         * which reads a quarter (FP8) or half (BF16) of the bytes of F32 */
        TRY(load_mat(ld, l, KT_ROLE_KV_B_PROJ, -1, (int64_t)nh * (hp->qk_nope + hp->v_head),
                     hp->kv_lora_rank, true, &L->wkv_b));
        TRY(load_mat(ld, l, KT_ROLE_O_PROJ, -1, H, (int64_t)nh * hp->v_head, true, &L->wo));
    } else {
        TRY(load_mat(ld, l, KT_ROLE_Q_PROJ, -1, (int64_t)nh * hd, H, true, &L->wq));
        TRY(load_mat(ld, l, KT_ROLE_K_PROJ, -1, (int64_t)nkv * hd, H, true, &L->wk));
        TRY(load_mat(ld, l, KT_ROLE_V_PROJ, -1, (int64_t)nkv * hd, H, true, &L->wv));
        TRY(load_mat(ld, l, KT_ROLE_O_PROJ, -1, H, (int64_t)nh * hd, true, &L->wo));
        TRY(load_vec(ld, l, KT_ROLE_Q_BIAS, -1, (int64_t)nh * hd, hp->attn_bias, &L->bq));
        TRY(load_vec(ld, l, KT_ROLE_K_BIAS, -1, (int64_t)nkv * hd, hp->attn_bias, &L->bk));
        TRY(load_vec(ld, l, KT_ROLE_V_BIAS, -1, (int64_t)nkv * hd, hp->attn_bias, &L->bv));
        TRY(load_vec(ld, l, KT_ROLE_O_BIAS, -1, H, hp->o_bias, &L->bo));
        if (hp->qk_norm != KT__QK_NORM_NONE) {
            bool full = hp->qk_norm == KT__QK_NORM_FULL;
            TRY(load_vec(ld, l, KT_ROLE_Q_NORM, -1, full ? (int64_t)nh * hd : hd, true,
                         &L->q_norm));
            TRY(load_vec(ld, l, KT_ROLE_K_NORM, -1, full ? (int64_t)nkv * hd : hd, true,
                         &L->k_norm));
        }
        if (hp->sinks)
            TRY(load_vec(ld, l, KT_ROLE_SINKS, -1, nh, true, &L->sinks));
    }

    if (!hp->layer_moe[l]) {
        int32_t F = hp->n_ff;
        TRY(load_mat(ld, l, KT_ROLE_GATE_PROJ, -1, F, H, true, &L->ffn_gate));
        TRY(load_mat(ld, l, KT_ROLE_UP_PROJ, -1, F, H, true, &L->ffn_up));
        TRY(load_mat(ld, l, KT_ROLE_DOWN_PROJ, -1, H, F, true, &L->ffn_down));
        return KT_OK;
    }
    int32_t E = hp->n_expert, I = hp->n_ff_exp;
    TRY(load_mat(ld, l, KT_ROLE_ROUTER, -1, E, H, true, &L->router));
    TRY(load_vec(ld, l, KT_ROLE_ROUTER_BIAS, -1, E, hp->router_bias, &L->router_b));
    TRY(load_vec(ld, l, KT_ROLE_SCORE_CORRECTION, -1, E, false, &L->e_bias));
    L->experts = kt__calloc((size_t)E, sizeof(kt__expert));
    if (!L->experts)
        return KT_ERR_NOMEM;
    for (int32_t e = 0; e < E && !ld->skip_experts; e++) {
        kt__expert *x = &L->experts[e];
        if (kt_model_has_tensor(ld->model, (uint32_t)l, KT_ROLE_EXPERT_GATE_UP, (uint32_t)e)) {
            TRY(load_fused_expert(ld, l, e, x));
        } else {
            TRY(load_mat(ld, l, KT_ROLE_EXPERT_GATE, e, I, H, true, &x->gate));
            TRY(load_mat(ld, l, KT_ROLE_EXPERT_UP, e, I, H, true, &x->up));
        }
        TRY(load_mat(ld, l, KT_ROLE_EXPERT_DOWN, e, H, I, true, &x->down));
        TRY(load_vec(ld, l, KT_ROLE_EXPERT_DOWN_BIAS, e, H, false, &x->b_down));
    }
    if (hp->n_ff_shared > 0) {
        int32_t S = hp->n_ff_shared;
        TRY(load_mat(ld, l, KT_ROLE_SHARED_GATE, -1, S, H, true, &L->sh_gate));
        TRY(load_mat(ld, l, KT_ROLE_SHARED_UP, -1, S, H, true, &L->sh_up));
        TRY(load_mat(ld, l, KT_ROLE_SHARED_DOWN, -1, H, S, true, &L->sh_down));
        if (hp->shared_gate)
            TRY(load_mat(ld, l, KT_ROLE_SHARED_EXPERT_GATE, -1, 1, H, true, &L->sh_gate_inp));
    }
#undef TRY
    return KT_OK;
}

kt_status kt__weights_load(kt__weights *w, const kt__hparams *hp, const kt_model *model,
                           kt_type mat_type, bool skip_experts)
{
    memset(w, 0, sizeof *w);
    loader ld = {model, hp, mat_type, skip_experts};
    int32_t V = hp->n_vocab, H = hp->n_embd;
    kt_status st = load_mat(&ld, -1, KT_ROLE_EMBED, -1, V, H, true, &w->tok_embd);
    if (st < 0)
        return st;
    st = load_vec(&ld, -1, KT_ROLE_FINAL_NORM, -1, H, true, &w->out_norm);
    if (st < 0)
        return st;
    st = load_mat(&ld, -1, KT_ROLE_LM_HEAD, -1, V, H, true, &w->lm_head);
    if (st < 0)
        return st;
    w->layers = kt__calloc((size_t)hp->n_layer, sizeof(kt__layer));
    if (!w->layers)
        return KT_ERR_NOMEM;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        st = load_layer(&ld, l, &w->layers[l]);
        if (st < 0)
            return st;
    }
    return KT_OK;
}

void kt__weights_free(kt__weights *w, const kt__hparams *hp)
{
    if (w->layers) {
        for (int32_t l = 0; l < hp->n_layer; l++) {
            kt__layer *L = &w->layers[l];
            float *vecs[] = {L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->bo, L->q_norm,
                             L->k_norm, L->sinks, L->q_a_norm, L->kv_a_norm,
                             L->router_b, L->e_bias};
            for (size_t i = 0; i < KT_ARRAY_LEN(vecs); i++)
                kt__free(vecs[i]);
            kt__mat *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wq_a, &L->wq_b, &L->wkv_a,
                               &L->wkv_b, &L->ffn_gate, &L->ffn_up, &L->ffn_down, &L->router,
                               &L->sh_gate, &L->sh_up, &L->sh_down, &L->sh_gate_inp};
            for (size_t i = 0; i < KT_ARRAY_LEN(mats); i++)
                mat_free(mats[i]);
            if (L->experts) {
                for (int32_t e = 0; e < hp->n_expert; e++) {
                    kt__expert *x = &L->experts[e];
                    mat_free(&x->gate), mat_free(&x->up), mat_free(&x->down);
                    kt__free(x->b_gate), kt__free(x->b_up), kt__free(x->b_down);
                }
                kt__free(L->experts);
            }
        }
        kt__free(w->layers);
    }
    mat_free(&w->tok_embd);
    kt__free(w->out_norm);
    mat_free(&w->lm_head);
    memset(w, 0, sizeof *w);
}
