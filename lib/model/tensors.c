/*
 * Tensor index: maps each family's safetensors names to (layer, role, expert),
 * resolves the storage (plain, FP8 block-scaled, compressed-tensors INT4) and
 * checks every shape against the config. The rest of libkt never sees a name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model_internal.h"

enum role_kind { ROLE_GLOBAL, ROLE_LAYER, ROLE_EXPERT };

static const struct role_desc {
    kt_role role;
    const char *name;
    uint8_t kind;
} role_table[] = {
    {KT_ROLE_EMBED, "EMBED", ROLE_GLOBAL},
    {KT_ROLE_FINAL_NORM, "FINAL_NORM", ROLE_GLOBAL},
    {KT_ROLE_LM_HEAD, "LM_HEAD", ROLE_GLOBAL},
    {KT_ROLE_ATTN_NORM, "ATTN_NORM", ROLE_LAYER},
    {KT_ROLE_Q_PROJ, "Q_PROJ", ROLE_LAYER},
    {KT_ROLE_K_PROJ, "K_PROJ", ROLE_LAYER},
    {KT_ROLE_V_PROJ, "V_PROJ", ROLE_LAYER},
    {KT_ROLE_O_PROJ, "O_PROJ", ROLE_LAYER},
    {KT_ROLE_Q_BIAS, "Q_BIAS", ROLE_LAYER},
    {KT_ROLE_K_BIAS, "K_BIAS", ROLE_LAYER},
    {KT_ROLE_V_BIAS, "V_BIAS", ROLE_LAYER},
    {KT_ROLE_O_BIAS, "O_BIAS", ROLE_LAYER},
    {KT_ROLE_Q_NORM, "Q_NORM", ROLE_LAYER},
    {KT_ROLE_K_NORM, "K_NORM", ROLE_LAYER},
    {KT_ROLE_SINKS, "SINKS", ROLE_LAYER},
    {KT_ROLE_Q_A_PROJ, "Q_A_PROJ", ROLE_LAYER},
    {KT_ROLE_Q_A_NORM, "Q_A_NORM", ROLE_LAYER},
    {KT_ROLE_Q_B_PROJ, "Q_B_PROJ", ROLE_LAYER},
    {KT_ROLE_KV_A_PROJ, "KV_A_PROJ", ROLE_LAYER},
    {KT_ROLE_KV_A_NORM, "KV_A_NORM", ROLE_LAYER},
    {KT_ROLE_KV_B_PROJ, "KV_B_PROJ", ROLE_LAYER},
    {KT_ROLE_K_B_PROJ, "K_B_PROJ", ROLE_LAYER},
    {KT_ROLE_V_B_PROJ, "V_B_PROJ", ROLE_LAYER},
    {KT_ROLE_FFN_NORM, "FFN_NORM", ROLE_LAYER},
    {KT_ROLE_GATE_PROJ, "GATE_PROJ", ROLE_LAYER},
    {KT_ROLE_UP_PROJ, "UP_PROJ", ROLE_LAYER},
    {KT_ROLE_DOWN_PROJ, "DOWN_PROJ", ROLE_LAYER},
    {KT_ROLE_ROUTER, "ROUTER", ROLE_LAYER},
    {KT_ROLE_ROUTER_BIAS, "ROUTER_BIAS", ROLE_LAYER},
    {KT_ROLE_SCORE_CORRECTION, "SCORE_CORRECTION", ROLE_LAYER},
    {KT_ROLE_EXPERT_GATE, "EXPERT_GATE", ROLE_EXPERT},
    {KT_ROLE_EXPERT_UP, "EXPERT_UP", ROLE_EXPERT},
    {KT_ROLE_EXPERT_DOWN, "EXPERT_DOWN", ROLE_EXPERT},
    {KT_ROLE_EXPERT_GATE_UP, "EXPERT_GATE_UP", ROLE_EXPERT},
    {KT_ROLE_EXPERT_GATE_UP_BIAS, "EXPERT_GATE_UP_BIAS", ROLE_EXPERT},
    {KT_ROLE_EXPERT_DOWN_BIAS, "EXPERT_DOWN_BIAS", ROLE_EXPERT},
    {KT_ROLE_SHARED_GATE, "SHARED_GATE", ROLE_LAYER},
    {KT_ROLE_SHARED_UP, "SHARED_UP", ROLE_LAYER},
    {KT_ROLE_SHARED_DOWN, "SHARED_DOWN", ROLE_LAYER},
    {KT_ROLE_SHARED_EXPERT_GATE, "SHARED_EXPERT_GATE", ROLE_LAYER},
};

int kt__role_slot(kt_role role)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(role_table); i++)
        if (role_table[i].role == role)
            return (int)i;
    return -1;
}

const char *kt_role_name(kt_role role)
{
    int s = kt__role_slot(role);
    return s < 0 ? NULL : role_table[s].name;
}

bool kt__role_is_expert(kt_role role)
{
    int s = kt__role_slot(role);
    return s >= 0 && role_table[s].kind == ROLE_EXPERT;
}

bool kt__role_is_global(kt_role role)
{
    int s = kt__role_slot(role);
    return s >= 0 && role_table[s].kind == ROLE_GLOBAL;
}

const char *kt_storage_name(kt_storage storage)
{
    switch (storage) {
    case KT_STORAGE_PLAIN: return "PLAIN";
    case KT_STORAGE_FP8_BLOCK: return "FP8_BLOCK";
    case KT_STORAGE_INT4_PACKED: return "INT4_PACKED";
    case KT_STORAGE_GGML_BLOCK: return "GGML_BLOCK";
    case KT_STORAGE_MXFP4: return "MXFP4";
    }
    return NULL;
}

/* ------------------------------------------------------ entry storage --- */

kt_status kt__model_add_entry(kt_model *m, const kt_tensor_view *v, size_t *capacity)
{
    if (m->n_entries == *capacity) {
        size_t cap = *capacity ? *capacity * 2 : 256;
        kt__entry *e = kt__realloc(m->entries, cap * sizeof *e);
        if (!e)
            return KT_ERR_NOMEM;
        m->entries = e;
        *capacity = cap;
    }
    m->entries[m->n_entries++].view = *v;
    return KT_OK;
}

kt_status kt__model_finish_index(kt_model *m)
{
    const uint32_t n_layers = m->cfg.info.n_layers;
    KT_CHECK(KT_ARRAY_LEN(role_table) <= KT__N_ROLE_SLOTS);
    if (m->n_entries >= UINT32_MAX)
        return kt__error(KT_ERR_LIMIT, "%s: too many tensors", m->path);
    m->slot = kt__calloc((size_t)(n_layers + 1) * KT__N_ROLE_SLOTS, sizeof(uint32_t));
    if (!m->slot)
        return KT_ERR_NOMEM;
    for (size_t i = 0; i < m->n_entries; i++) {
        const kt_tensor_view *v = &m->entries[i].view;
        int s = kt__role_slot((kt_role)v->role);
        KT_CHECK(s >= 0);
        size_t row = role_table[s].kind == ROLE_GLOBAL ? 0 : (size_t)v->layer + 1;
        KT_CHECK(row <= n_layers);
        uint32_t *slot = &m->slot[row * KT__N_ROLE_SLOTS + (size_t)s];
        if (*slot == 0) /* first expert of a run */
            *slot = (uint32_t)i + 1;
    }
    return KT_OK;
}

/* -------------------------------------------------------------- names --- */

typedef struct indexer {
    kt_model *m;
    const kt_arch_info *a;
    const kt_st_set *st;
    char body[64];            /* "model." or a multimodal wrapper's prefix    */
    const char *lm_head_name;
    size_t capacity;
    const kt_st_tensor **used; /* file tensors consumed                        */
    size_t n_used, cap_used;
} indexer;

static kt_status mark_used(indexer *ix, const kt_st_tensor *t)
{
    const kt_st_tensor **u = kt__grow(ix->used, ix->n_used, &ix->cap_used, sizeof *u, 512);
    if (!u)
        return KT_ERR_NOMEM;
    ix->used = u;
    ix->used[ix->n_used++] = t;
    return KT_OK;
}

/* What a role is called in a family, and what shape it must have. */
typedef struct role_spec {
    char module[256];   /* "model.layers.3.self_attn.q_proj"                     */
    const char *param;  /* "weight", "bias", "sinks", "gate_up_proj", ...         */
    bool linear;        /* a 2-D weight that may be quantized                     */
    bool stacked;       /* [E][...] for all experts (gpt-oss)                     */
    kt_layout layout;
    uint64_t rows, cols; /* logical [out][in]; 1-D: cols = 1                     */
} role_spec;

static bool block_sparse(kt_arch a)
{
    return a == KT_ARCH_MIXTRAL || a == KT_ARCH_MINIMAX_M2;
}

/* Fills the name and expected shape of (layer, role, expert). */
static void describe(const indexer *ix, uint32_t layer, kt_role role, uint32_t expert,
                     role_spec *s)
{
    const kt_arch_info *a = ix->a;
    const kt_arch arch = (kt_arch)a->arch;
    const uint64_t H = a->hidden_size, nh = a->n_heads, nkv = a->n_kv_heads, hd = a->head_dim;
    const uint64_t I = a->intermediate_size, MI = a->moe_intermediate_size;
    const uint64_t SI = a->shared_intermediate_size, E = a->n_routed_experts;
    const char *moe = block_sparse(arch) ? "block_sparse_moe" : "mlp";
    char L[96];
    snprintf(L, sizeof L, "%slayers.%u", ix->body, layer);
    memset(s, 0, sizeof *s);
    s->param = "weight";
    s->layout = KT_LAYOUT_OUT_IN;
    s->cols = 1;
#define NAME(...) snprintf(s->module, sizeof s->module, __VA_ARGS__)
#define LIN(r, c) (s->linear = true, s->rows = (r), s->cols = (c))
    switch (role) {
    case KT_ROLE_EMBED:
        NAME("%sembed_tokens", ix->body);
        s->rows = a->vocab_size;
        s->cols = H;
        break;
    case KT_ROLE_FINAL_NORM: NAME("%snorm", ix->body); s->rows = H; break;
    case KT_ROLE_LM_HEAD:
        snprintf(s->module, sizeof s->module, "%.*s", (int)(strlen(ix->lm_head_name) - 7),
                 ix->lm_head_name);
        LIN(a->vocab_size, H);
        break;
    case KT_ROLE_ATTN_NORM: NAME("%s.input_layernorm", L); s->rows = H; break;
    case KT_ROLE_FFN_NORM: NAME("%s.post_attention_layernorm", L); s->rows = H; break;
    case KT_ROLE_Q_PROJ:
        NAME("%s.self_attn.q_proj", L);
        LIN(nh * hd, H);
        break;
    case KT_ROLE_K_PROJ: NAME("%s.self_attn.k_proj", L); LIN(nkv * hd, H); break;
    case KT_ROLE_V_PROJ: NAME("%s.self_attn.v_proj", L); LIN(nkv * a->v_head_dim, H); break;
    case KT_ROLE_O_PROJ: NAME("%s.self_attn.o_proj", L); LIN(H, nh * a->v_head_dim); break;
    case KT_ROLE_Q_BIAS:
        NAME("%s.self_attn.q_proj", L);
        s->param = "bias";
        s->rows = nh * hd;
        break;
    case KT_ROLE_K_BIAS:
    case KT_ROLE_V_BIAS:
        NAME("%s.self_attn.%s", L, role == KT_ROLE_K_BIAS ? "k_proj" : "v_proj");
        s->param = "bias";
        s->rows = nkv * hd;
        break;
    case KT_ROLE_O_BIAS: NAME("%s.self_attn.o_proj", L); s->param = "bias"; s->rows = H; break;
    case KT_ROLE_Q_NORM:
        NAME("%s.self_attn.q_norm", L);
        s->rows = a->qk_norm == KT_QK_NORM_FULL ? nh * hd : hd;
        break;
    case KT_ROLE_K_NORM:
        NAME("%s.self_attn.k_norm", L);
        s->rows = a->qk_norm == KT_QK_NORM_FULL ? nkv * hd : hd;
        break;
    case KT_ROLE_SINKS: NAME("%s.self_attn", L); s->param = "sinks"; s->rows = nh; break;
    case KT_ROLE_Q_A_PROJ: NAME("%s.self_attn.q_a_proj", L); LIN(a->q_lora_rank, H); break;
    case KT_ROLE_Q_A_NORM: NAME("%s.self_attn.q_a_layernorm", L); s->rows = a->q_lora_rank; break;
    case KT_ROLE_Q_B_PROJ:
        NAME("%s.self_attn.q_b_proj", L);
        LIN(nh * hd, a->q_lora_rank);
        break;
    case KT_ROLE_KV_A_PROJ:
        NAME("%s.self_attn.kv_a_proj_with_mqa", L);
        LIN((uint64_t)a->kv_lora_rank + a->qk_rope_head_dim, H);
        break;
    case KT_ROLE_KV_A_NORM:
        NAME("%s.self_attn.kv_a_layernorm", L);
        s->rows = a->kv_lora_rank;
        break;
    case KT_ROLE_KV_B_PROJ:
        NAME("%s.self_attn.kv_b_proj", L);
        LIN(nh * ((uint64_t)a->qk_nope_head_dim + a->v_head_dim), a->kv_lora_rank);
        break;
    case KT_ROLE_K_B_PROJ: /* [nh][kv_lora][nope]: nh stacked [kv_lora][nope] matrices */
        NAME("%s.self_attn.k_b_proj", L);
        LIN(nh * a->kv_lora_rank, a->qk_nope_head_dim);
        break;
    case KT_ROLE_V_B_PROJ: /* [nh][v][kv_lora] */
        NAME("%s.self_attn.v_b_proj", L);
        LIN(nh * a->v_head_dim, a->kv_lora_rank);
        break;
    case KT_ROLE_GATE_PROJ: NAME("%s.mlp.gate_proj", L); LIN(I, H); break;
    case KT_ROLE_UP_PROJ: NAME("%s.mlp.up_proj", L); LIN(I, H); break;
    case KT_ROLE_DOWN_PROJ: NAME("%s.mlp.down_proj", L); LIN(H, I); break;
    case KT_ROLE_ROUTER:
        if (arch == KT_ARCH_GPT_OSS)
            NAME("%s.mlp.router", L);
        else
            NAME("%s.%s.gate", L, moe);
        s->rows = E;
        s->cols = H;
        break;
    case KT_ROLE_ROUTER_BIAS: NAME("%s.mlp.router", L); s->param = "bias"; s->rows = E; break;
    case KT_ROLE_SCORE_CORRECTION:
        if (arch == KT_ARCH_MINIMAX_M2)
            NAME("%s.block_sparse_moe", L);
        else
            NAME("%s.mlp.gate", L);
        s->param = "e_score_correction_bias";
        s->rows = E;
        break;
    case KT_ROLE_EXPERT_GATE:
    case KT_ROLE_EXPERT_UP:
    case KT_ROLE_EXPERT_DOWN: {
        static const char *const hf[] = {"gate_proj", "up_proj", "down_proj"};
        static const char *const w[] = {"w1", "w3", "w2"};
        int k = role == KT_ROLE_EXPERT_GATE ? 0 : role == KT_ROLE_EXPERT_UP ? 1 : 2;
        if (arch == KT_ARCH_GPT_OSS) { /* only down is separate: [E][I][H] */
            NAME("%s.mlp.experts", L);
            s->param = "down_proj";
            s->stacked = true;
            s->layout = KT_LAYOUT_IN_OUT;
            LIN(H, MI);
            break;
        }
        NAME("%s.%s.experts.%u.%s", L, moe, expert, block_sparse(arch) ? w[k] : hf[k]);
        if (k == 2)
            LIN(H, MI);
        else
            LIN(MI, H);
        break;
    }
    case KT_ROLE_EXPERT_GATE_UP:
        NAME("%s.mlp.experts", L);
        s->param = "gate_up_proj";
        s->stacked = true;
        s->layout = KT_LAYOUT_IN_OUT;
        LIN(2 * MI, H);
        break;
    case KT_ROLE_EXPERT_GATE_UP_BIAS:
        NAME("%s.mlp.experts", L);
        s->param = "gate_up_proj_bias";
        s->stacked = true;
        s->rows = 2 * MI;
        break;
    case KT_ROLE_EXPERT_DOWN_BIAS:
        NAME("%s.mlp.experts", L);
        s->param = "down_proj_bias";
        s->stacked = true;
        s->rows = H;
        break;
    case KT_ROLE_SHARED_GATE:
    case KT_ROLE_SHARED_UP:
    case KT_ROLE_SHARED_DOWN: {
        const char *blk = arch == KT_ARCH_QWEN2_MOE ? "shared_expert" : "shared_experts";
        const char *nm = role == KT_ROLE_SHARED_GATE ? "gate_proj"
                         : role == KT_ROLE_SHARED_UP ? "up_proj" : "down_proj";
        NAME("%s.mlp.%s.%s", L, blk, nm);
        if (role == KT_ROLE_SHARED_DOWN)
            LIN(H, SI);
        else
            LIN(SI, H);
        break;
    }
    case KT_ROLE_SHARED_EXPERT_GATE:
        NAME("%s.mlp.shared_expert_gate", L);
        s->rows = 1;
        s->cols = H;
        break;
    }
#undef NAME
#undef LIN
}

/* Roles a layer of this model has, in enum order. */
static size_t layer_roles(const kt__config *cfg, uint32_t layer, kt_role *out)
{
    const kt_arch_info *a = &cfg->info;
    size_t n = 0;
    out[n++] = KT_ROLE_ATTN_NORM;
    if (a->attn_kind == KT_ATTN_MLA) {
        if (a->q_lora_rank == 0)
            out[n++] = KT_ROLE_Q_PROJ;
        out[n++] = KT_ROLE_O_PROJ;
        if (a->q_lora_rank) {
            out[n++] = KT_ROLE_Q_A_PROJ;
            out[n++] = KT_ROLE_Q_A_NORM;
            out[n++] = KT_ROLE_Q_B_PROJ;
        }
        out[n++] = KT_ROLE_KV_A_PROJ;
        out[n++] = KT_ROLE_KV_A_NORM;
        if (cfg->mla_split_kv_b) {
            out[n++] = KT_ROLE_K_B_PROJ;
            out[n++] = KT_ROLE_V_B_PROJ;
        } else {
            out[n++] = KT_ROLE_KV_B_PROJ;
        }
    } else {
        out[n++] = KT_ROLE_Q_PROJ;
        out[n++] = KT_ROLE_K_PROJ;
        out[n++] = KT_ROLE_V_PROJ;
        out[n++] = KT_ROLE_O_PROJ;
        if (a->attention_bias) {
            out[n++] = KT_ROLE_Q_BIAS;
            out[n++] = KT_ROLE_K_BIAS;
            out[n++] = KT_ROLE_V_BIAS;
        }
        if (a->attention_out_bias)
            out[n++] = KT_ROLE_O_BIAS;
        if (a->qk_norm != KT_QK_NORM_NONE) {
            out[n++] = KT_ROLE_Q_NORM;
            out[n++] = KT_ROLE_K_NORM;
        }
        if (a->attention_sinks)
            out[n++] = KT_ROLE_SINKS;
    }
    out[n++] = KT_ROLE_FFN_NORM;
    if (!cfg->layer_moe[layer]) {
        out[n++] = KT_ROLE_GATE_PROJ;
        out[n++] = KT_ROLE_UP_PROJ;
        out[n++] = KT_ROLE_DOWN_PROJ;
        return n;
    }
    out[n++] = KT_ROLE_ROUTER;
    if (a->router_bias)
        out[n++] = KT_ROLE_ROUTER_BIAS;
    if (a->score_correction_bias)
        out[n++] = KT_ROLE_SCORE_CORRECTION;
    if (a->arch == KT_ARCH_GPT_OSS) {
        out[n++] = KT_ROLE_EXPERT_DOWN;
        out[n++] = KT_ROLE_EXPERT_GATE_UP;
        out[n++] = KT_ROLE_EXPERT_GATE_UP_BIAS;
        out[n++] = KT_ROLE_EXPERT_DOWN_BIAS;
    } else {
        out[n++] = KT_ROLE_EXPERT_GATE;
        out[n++] = KT_ROLE_EXPERT_UP;
        out[n++] = KT_ROLE_EXPERT_DOWN;
    }
    if (a->n_shared_experts) {
        out[n++] = KT_ROLE_SHARED_GATE;
        out[n++] = KT_ROLE_SHARED_UP;
        out[n++] = KT_ROLE_SHARED_DOWN;
    }
    if (a->shared_expert_gate)
        out[n++] = KT_ROLE_SHARED_EXPERT_GATE;
    return n;
}

/* ----------------------------------------------------------- resolve --- */

static const char *shape_str(const uint64_t *shape, uint32_t n, char *buf, size_t size)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, size - off, "[");
    for (uint32_t i = 0; i < n && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%llu", i ? ", " : "",
                                (unsigned long long)shape[i]);
    if (off < size)
        snprintf(buf + off, size - off, "]");
    return buf;
}

static kt_status bad_shape(const indexer *ix, const kt_st_tensor *t, const uint64_t *want,
                           uint32_t n_want)
{
    char got[128], exp[128];
    return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' has shape %s, the config implies %s",
                     ix->m->path, t->name, shape_str(t->shape, t->n_dims, got, sizeof got),
                     shape_str(want, n_want, exp, sizeof exp));
}

static bool shape_is(const kt_st_tensor *t, const uint64_t *want, uint32_t n)
{
    if (t->n_dims != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (t->shape[i] != want[i])
            return false;
    return true;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

static bool is_float_type(kt_type t)
{
    return t == KT_TYPE_F32 || t == KT_TYPE_F16 || t == KT_TYPE_BF16;
}

/* The scales of a block-quantized view (FP8 blocks, INT4 groups): file tensor sc of
 * shape[2], one scale per block_rows x block_cols block of the weight. */
static void view_scales(kt_tensor_view *v, const kt_st_tensor *sc, const uint64_t shape[2],
                        uint32_t block_rows, uint32_t block_cols)
{
    v->scale_data = sc->data;
    v->scale_type = sc->type;
    v->scale_n_dims = 2;
    v->scale_shape[0] = shape[0];
    v->scale_shape[1] = shape[1];
    v->scale_nbytes = sc->nbytes;
    v->block_rows = block_rows;
    v->block_cols = block_cols;
}

/* Fills the data part of a view from file tensor t, for expert `e` of a stacked
 * tensor when s->stacked. */
static void view_from(kt_tensor_view *v, const kt_st_tensor *t, const role_spec *s,
                      uint32_t e, uint64_t n_experts)
{
    v->type = t->type;
    v->name = t->name;
    if (s->stacked) {
        uint64_t stride = t->nbytes / n_experts;
        v->flags |= KT_TENSOR_F_STACKED;
        v->expert_stride = stride;
        v->data = (const uint8_t *)t->data + stride * e;
        v->nbytes = stride;
        v->n_dims = t->n_dims - 1;
        for (uint32_t i = 1; i < t->n_dims; i++)
            v->shape[i - 1] = t->shape[i];
    } else {
        v->data = t->data;
        v->nbytes = t->nbytes;
        v->n_dims = t->n_dims;
        for (uint32_t i = 0; i < t->n_dims && i < KT_TENSOR_MAX_DIMS; i++)
            v->shape[i] = t->shape[i];
    }
}

/* gpt-oss MXFP4 experts: blocks U8 [E][out][in/32][16], scales U8 [E][out][in/32]. */
static kt_status resolve_mxfp4(indexer *ix, kt_tensor_view *v, const role_spec *s,
                               const kt_st_tensor *bl, const kt_st_tensor *sc,
                               const char *bname, const char *sname, uint32_t expert)
{
    const uint64_t E = ix->a->n_routed_experts;
    if (!bl || !sc)
        return kt__error(KT_ERR_FORMAT, "%s: missing tensor '%s'", ix->m->path,
                         bl ? sname : bname);
    if (ix->a->quant_method != KT_QUANT_MXFP4)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' is MXFP4 but the config has no mxfp4 "
                         "quantization_config", ix->m->path, bname);
    if (s->cols % 32)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': %llu input features are not a "
                         "multiple of 32", ix->m->path, bname, (unsigned long long)s->cols);
    uint64_t bwant[4] = {E, s->rows, s->cols / 32, 16}, swant[3] = {E, s->rows, s->cols / 32};
    if (!shape_is(bl, bwant, 4))
        return bad_shape(ix, bl, bwant, 4);
    if (!shape_is(sc, swant, 3))
        return bad_shape(ix, sc, swant, 3);
    if (bl->type != KT_TYPE_U8 || sc->type != KT_TYPE_U8)
        return kt__error(KT_ERR_FORMAT, "%s: MXFP4 tensors '%s' / '%s' must be U8", ix->m->path,
                         bname, sname);
    kt_status st;
    role_spec plain = *s;
    view_from(v, bl, &plain, expert, E); /* expert slice, shape [out][in/32][16] */
    v->storage = KT_STORAGE_MXFP4;
    v->layout = KT_LAYOUT_OUT_IN; /* blocks are output-major, unlike the BF16 tensors */
    uint64_t sstride = sc->nbytes / E;
    v->scale_data = (const uint8_t *)sc->data + sstride * expert;
    v->scale_type = KT_TYPE_U8;
    v->scale_n_dims = 2;
    v->scale_shape[0] = swant[1];
    v->scale_shape[1] = swant[2];
    v->scale_nbytes = sstride;
    v->block_rows = 1;
    v->block_cols = 32;
    if (expert == 0 && ((st = mark_used(ix, bl)) < 0 || (st = mark_used(ix, sc)) < 0))
        return st;
    return kt__model_add_entry(ix->m, v, &ix->capacity);
}

/* Looks up one (layer, role, expert) and appends its entry. */
static kt_status resolve(indexer *ix, uint32_t layer, kt_role role, uint32_t expert)
{
    const kt_arch_info *a = ix->a;
    role_spec s;
    describe(ix, layer, role, expert, &s);
    char name[320];
    kt_tensor_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = (uint32_t)sizeof v;
    v.role = role;
    v.layer = kt__role_is_global(role) ? UINT32_MAX : layer;
    v.expert = kt__role_is_expert(role) ? expert : UINT32_MAX;
    v.layout = s.layout;
    v.rows = s.rows;
    v.cols = s.cols;
    v.storage = KT_STORAGE_PLAIN;
    const uint64_t E = a->n_routed_experts;

    snprintf(name, sizeof name, "%s.%s", s.module, s.param);
    const kt_st_tensor *t = kt__st_find(ix->st, name);
    kt_status st;

    if (s.stacked && !t && s.linear) { /* MXFP4 experts: *_blocks + *_scales */
        char bname[320], sname[320];
        snprintf(bname, sizeof bname, "%s.%s_blocks", s.module, s.param);
        snprintf(sname, sizeof sname, "%s.%s_scales", s.module, s.param);
        const kt_st_tensor *bl = kt__st_find(ix->st, bname), *sc = kt__st_find(ix->st, sname);
        if (bl || sc)
            return resolve_mxfp4(ix, &v, &s, bl, sc, bname, sname, expert);
    }
    if (s.stacked) {
        if (!t)
            return kt__error(KT_ERR_FORMAT, "%s: missing tensor '%s'", ix->m->path, name);
        /* [E][in][out] (IN_OUT weights) or [E][n] (biases) */
        uint64_t want[3] = {E, 0, 0};
        uint32_t nd;
        if (s.linear) {
            want[1] = s.cols;
            want[2] = s.rows;
            nd = 3;
        } else {
            want[1] = s.rows;
            nd = 2;
        }
        if (!shape_is(t, want, nd))
            return bad_shape(ix, t, want, nd);
        if (!is_float_type(t->type))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: tensor '%s': type %s is not supported "
                             "here", ix->m->path, name, kt_type_name(t->type));
        view_from(&v, t, &s, expert, E);
        if (expert == 0 && (st = mark_used(ix, t)) < 0)
            return st;
        return kt__model_add_entry(ix->m, &v, &ix->capacity);
    }

    if (!s.linear || (t && t->type != KT_TYPE_F8_E4M3)) {
        if (!t)
            return kt__error(KT_ERR_FORMAT, "%s: missing tensor '%s'", ix->m->path, name);
        uint64_t want[2] = {s.rows, s.cols};
        uint32_t nd = s.cols == 1 && !s.linear && role != KT_ROLE_EMBED ? 1 : 2;
        if (!shape_is(t, want, nd))
            return bad_shape(ix, t, want, nd);
        if (!is_float_type(t->type))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: tensor '%s': type %s is not supported "
                             "for %s", ix->m->path, name, kt_type_name(t->type),
                             kt_role_name(role));
        view_from(&v, t, &s, 0, 1);
        if ((st = mark_used(ix, t)) < 0)
            return st;
        return kt__model_add_entry(ix->m, &v, &ix->capacity);
    }

    uint64_t want[2] = {s.rows, s.cols};
    if (t) { /* FP8 E4M3 with block scales */
        if (!shape_is(t, want, 2))
            return bad_shape(ix, t, want, 2);
        if (a->quant_method != KT_QUANT_FP8_BLOCK)
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' is F8_E4M3 but the config has no "
                             "fp8 quantization_config", ix->m->path, name);
        char sname[320];
        snprintf(sname, sizeof sname, "%s.weight_scale_inv", s.module);
        const kt_st_tensor *sc = kt__st_find(ix->st, sname);
        if (!sc)
            return kt__error(KT_ERR_FORMAT, "%s: missing tensor '%s' (scales of FP8 '%s')",
                             ix->m->path, sname, name);
        uint64_t bh = a->quant_block_rows, bw = a->quant_block_cols;
        uint64_t swant[2] = {ceil_div(s.rows, bh), ceil_div(s.cols, bw)};
        if (!shape_is(sc, swant, 2))
            return bad_shape(ix, sc, swant, 2);
        if (sc->type != KT_TYPE_F32 && sc->type != KT_TYPE_BF16)
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': scales must be F32 or BF16, not %s",
                             ix->m->path, sname, kt_type_name(sc->type));
        view_from(&v, t, &s, 0, 1);
        v.storage = KT_STORAGE_FP8_BLOCK;
        view_scales(&v, sc, swant, (uint32_t)bh, (uint32_t)bw);
        if ((st = mark_used(ix, t)) < 0 || (st = mark_used(ix, sc)) < 0)
            return st;
        return kt__model_add_entry(ix->m, &v, &ix->capacity);
    }

    /* compressed-tensors pack-quantized INT4 */
    char pname[320], sname[320], shname[320];
    snprintf(pname, sizeof pname, "%s.weight_packed", s.module);
    const kt_st_tensor *pk = kt__st_find(ix->st, pname);
    if (!pk)
        return kt__error(KT_ERR_FORMAT, "%s: missing tensor '%s'", ix->m->path, name);
    if (a->quant_method != KT_QUANT_INT4_PACKED)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' is pack-quantized but the config has no "
                         "compressed-tensors quantization_config", ix->m->path, pname);
    snprintf(sname, sizeof sname, "%s.weight_scale", s.module);
    snprintf(shname, sizeof shname, "%s.weight_shape", s.module);
    const kt_st_tensor *sc = kt__st_find(ix->st, sname);
    const kt_st_tensor *sh = kt__st_find(ix->st, shname);
    if (!sc)
        return kt__error(KT_ERR_FORMAT, "%s: missing tensor '%s' (scales of INT4 '%s')",
                         ix->m->path, sname, pname);
    if (pk->type != KT_TYPE_I32)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' must be I32, not %s", ix->m->path, pname,
                         kt_type_name(pk->type));
    if (sh) { /* weight_shape [2] = {out, in} as stored by compressed-tensors */
        uint64_t dims[2] = {0, 0};
        if (sh->n_dims != 1 || sh->shape[0] != 2 ||
            (sh->type != KT_TYPE_I32 && sh->type != KT_TYPE_I64))
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' must be an I32/I64 [2]", ix->m->path,
                             shname);
        for (int i = 0; i < 2; i++) {
            if (sh->type == KT_TYPE_I32) {
                int32_t d;
                memcpy(&d, (const uint8_t *)sh->data + 4 * i, 4);
                dims[i] = d < 0 ? UINT64_MAX : (uint64_t)d;
            } else {
                int64_t d;
                memcpy(&d, (const uint8_t *)sh->data + 8 * i, 8);
                dims[i] = d < 0 ? UINT64_MAX : (uint64_t)d;
            }
        }
        if (dims[0] != s.rows || dims[1] != s.cols)
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' says [%llu, %llu], the config "
                             "implies [%llu, %llu]", ix->m->path, shname,
                             (unsigned long long)dims[0], (unsigned long long)dims[1],
                             (unsigned long long)s.rows, (unsigned long long)s.cols);
    }
    uint64_t g = a->quant_group_size;
    uint64_t pwant[2] = {s.rows, ceil_div(s.cols, 8)};
    uint64_t swant[2] = {s.rows, ceil_div(s.cols, g)};
    if (!shape_is(pk, pwant, 2))
        return bad_shape(ix, pk, pwant, 2);
    if (!shape_is(sc, swant, 2))
        return bad_shape(ix, sc, swant, 2);
    if (!is_float_type(sc->type))
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': scales must be BF16/F16/F32, not %s",
                         ix->m->path, sname, kt_type_name(sc->type));
    if (kt__config_quant_ignored(&ix->m->cfg, s.module))
        kt__log(ix->m->rt, KT_LOG_WARN, "%s: '%s' is packed but matches the quantization "
                "ignore list", ix->m->path, s.module);
    view_from(&v, pk, &s, 0, 1);
    v.storage = KT_STORAGE_INT4_PACKED;
    view_scales(&v, sc, swant, 1, (uint32_t)g);
    if ((st = mark_used(ix, pk)) < 0 || (st = mark_used(ix, sc)) < 0 ||
        (sh && (st = mark_used(ix, sh)) < 0))
        return st;
    return kt__model_add_entry(ix->m, &v, &ix->capacity);
}

static int cmp_ptr(const void *x, const void *y)
{
    uintptr_t a = (uintptr_t) * (const void *const *)x, b = (uintptr_t) * (const void *const *)y;
    return a < b ? -1 : a > b;
}

/* Counts file tensors nobody uses; warns about those inside the model's own
 * layers (a config/file mismatch would otherwise be silently ignored). */
static kt_status count_ignored(indexer *ix)
{
    qsort(ix->used, ix->n_used, sizeof *ix->used, cmp_ptr);
    size_t n = kt__st_count(ix->st), warned = 0;
    size_t body_len = strlen(ix->body);
    ix->m->n_ignored = 0;
    for (size_t i = 0; i < n; i++) {
        const kt_st_tensor *t = kt__st_at(ix->st, i);
        if (bsearch(&t, ix->used, ix->n_used, sizeof *ix->used, cmp_ptr))
            continue;
        ix->m->n_ignored++;
        unsigned layer;
        if (!strncmp(t->name, ix->body, body_len) &&
            sscanf(t->name + body_len, "layers.%u.", &layer) == 1 &&
            layer >= ix->a->n_layers)
            continue; /* MTP / next-n layers: expected */
        if (!strcmp(t->name, ix->lm_head_name) && ix->a->tie_word_embeddings)
            continue;
        if (warned++ < 8)
            kt__log(ix->m->rt, KT_LOG_WARN, "%s: tensor '%s' is not used by the %s architecture",
                    ix->m->path, t->name, kt_arch_name((kt_arch)ix->a->arch));
    }
    return KT_OK;
}

kt_status kt__model_index_safetensors(kt_model *m)
{
    indexer ix;
    memset(&ix, 0, sizeof ix);
    ix.m = m;
    ix.a = &m->cfg.info;
    ix.st = m->st;
    static const char *const bodies[] = {"model.", "language_model.model.",
                                         "model.language_model."};
    static const char *const heads[] = {"lm_head.weight", "language_model.lm_head.weight",
                                        "lm_head.weight"};
    size_t b;
    for (b = 0; b < KT_ARRAY_LEN(bodies); b++) {
        char nm[96];
        snprintf(nm, sizeof nm, "%sembed_tokens.weight", bodies[b]);
        if (kt__st_find(m->st, nm))
            break;
    }
    if (b == KT_ARRAY_LEN(bodies))
        return kt__error(KT_ERR_FORMAT, "%s: missing tensor 'model.embed_tokens.weight'",
                         m->path);
    snprintf(ix.body, sizeof ix.body, "%s", bodies[b]);
    ix.lm_head_name = heads[b];

    kt_status st = KT_OK;
    kt_role roles[64];
    if ((st = resolve(&ix, 0, KT_ROLE_EMBED, 0)) < 0)
        goto out;
    for (uint32_t l = 0; l < ix.a->n_layers; l++) {
        size_t n = layer_roles(&m->cfg, l, roles);
        for (size_t r = 0; r < n; r++) {
            uint32_t ne = kt__role_is_expert(roles[r]) ? ix.a->n_routed_experts : 1;
            for (uint32_t e = 0; e < ne; e++)
                if ((st = resolve(&ix, l, roles[r], e)) < 0)
                    goto out;
        }
    }
    if ((st = resolve(&ix, 0, KT_ROLE_FINAL_NORM, 0)) < 0)
        goto out;
    if (ix.a->tie_word_embeddings) {
        kt_tensor_view v = m->entries[0].view; /* EMBED */
        v.role = KT_ROLE_LM_HEAD;
        st = kt__model_add_entry(m, &v, &ix.capacity);
    } else {
        st = resolve(&ix, 0, KT_ROLE_LM_HEAD, 0);
    }
    if (st < 0)
        goto out;
    if ((st = count_ignored(&ix)) < 0)
        goto out;
    st = kt__model_finish_index(m);
out:
    kt__free(ix.used);
    return st;
}

/* ------------------------------------------------------------- sizes --- */

static uint64_t type_bytes(kt_type t, uint64_t n)
{
    uint32_t bs = kt_type_block_size(t), bb = kt_type_block_bytes(t);
    if (!bs || !bb)
        return n * 2;
    return ceil_div(n, bs) * bb;
}

/* Bytes of one weight as the checkpoint's quantization would store it. */
static uint64_t config_role_bytes(const indexer *ix, const role_spec *s, kt_role role)
{
    const kt_arch_info *a = ix->a;
    /* e_score_correction_bias is kept in F32 by every checkpoint seen */
    const kt_type dt = role == KT_ROLE_SCORE_CORRECTION ? KT_TYPE_F32 : (kt_type)a->dtype;
    uint64_t n = s->rows * s->cols;
    bool ignored = kt__config_quant_ignored(&ix->m->cfg, s->module);
    bool router_or_embed = role == KT_ROLE_ROUTER || role == KT_ROLE_EMBED ||
                           role == KT_ROLE_LM_HEAD;
    if (a->quant_method == KT_QUANT_MXFP4 && s->stacked && s->linear)
        return n / 2 + n / 32; /* per expert: nibbles + one E8M0 scale per 32 */
    if (s->linear && !ignored && !router_or_embed && !s->stacked) {
        if (a->quant_method == KT_QUANT_FP8_BLOCK)
            return n + 4 * ceil_div(s->rows, a->quant_block_rows) *
                           ceil_div(s->cols, a->quant_block_cols);
        if (a->quant_method == KT_QUANT_INT4_PACKED)
            return s->rows * ceil_div(s->cols, 8) * 4 +
                   s->rows * ceil_div(s->cols, a->quant_group_size) * 2;
    }
    return type_bytes(dt, n);
}

kt_status kt__model_sizes(const kt_model *m, uint64_t *dense_bytes, uint64_t *layer_expert_bytes)
{
    const kt_arch_info *a = &m->cfg.info;
    *dense_bytes = 0;
    memset(layer_expert_bytes, 0, (size_t)a->n_layers * sizeof *layer_expert_bytes);
    if (m->n_entries) {
        for (size_t i = 0; i < m->n_entries; i++) {
            const kt_tensor_view *v = &m->entries[i].view;
            uint64_t b = v->nbytes + v->scale_nbytes;
            if (v->role == KT_ROLE_LM_HEAD && a->tie_word_embeddings)
                continue;
            if (kt__role_is_expert((kt_role)v->role))
                layer_expert_bytes[v->layer] += b;
            else
                *dense_bytes += b;
        }
        return KT_OK;
    }
    /* config only: what the checkpoint would hold */
    indexer ix;
    memset(&ix, 0, sizeof ix);
    ix.m = (kt_model *)m;
    ix.a = a;
    snprintf(ix.body, sizeof ix.body, "model.");
    ix.lm_head_name = "lm_head.weight";
    role_spec s;
    kt_role roles[64];
    describe(&ix, 0, KT_ROLE_EMBED, 0, &s);
    *dense_bytes += config_role_bytes(&ix, &s, KT_ROLE_EMBED);
    describe(&ix, 0, KT_ROLE_FINAL_NORM, 0, &s);
    *dense_bytes += config_role_bytes(&ix, &s, KT_ROLE_FINAL_NORM);
    if (!a->tie_word_embeddings) {
        describe(&ix, 0, KT_ROLE_LM_HEAD, 0, &s);
        *dense_bytes += config_role_bytes(&ix, &s, KT_ROLE_LM_HEAD);
    }
    for (uint32_t l = 0; l < a->n_layers; l++) {
        size_t n = layer_roles(&m->cfg, l, roles);
        for (size_t r = 0; r < n; r++) {
            if (!kt__role_is_expert(roles[r])) {
                describe(&ix, l, roles[r], 0, &s);
                *dense_bytes += config_role_bytes(&ix, &s, roles[r]);
                continue;
            }
            /* experts are alike: size one, count all */
            describe(&ix, l, roles[r], 0, &s);
            layer_expert_bytes[l] += config_role_bytes(&ix, &s, roles[r]) * a->n_routed_experts;
        }
    }
    return KT_OK;
}

void kt__role_expected_shape(const kt_model *m, uint32_t layer, kt_role role, uint64_t *rows,
                             uint64_t *cols)
{
    indexer ix;
    memset(&ix, 0, sizeof ix);
    ix.m = (kt_model *)m;
    ix.a = &m->cfg.info;
    ix.lm_head_name = "lm_head.weight";
    role_spec s;
    describe(&ix, layer, role, 0, &s);
    *rows = s.rows;
    *cols = s.cols;
}

size_t kt__layer_roles(const kt__config *cfg, uint32_t layer, kt_role *out)
{
    return layer_roles(cfg, layer, out);
}
