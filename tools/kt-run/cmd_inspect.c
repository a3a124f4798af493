/* kt-run inspect: what a model directory or GGUF file holds, as libkt reads it:
 * the architecture description, per-layer kinds, a tensor summary (counts and
 * bytes per type, per role, per part) and a memory estimate. Public API only. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <kt/kt.h>

#include "commands.h"
#include "opt.h"
#include "term.h"

#define DEFAULT_MODEL "models/kimi-k2-demo"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run inspect [MODEL] [--json] [--tensors] [--gpus N] [--gpu-experts K]\n"
            "                      [--context N]\n"
            "\n"
            "Prints the architecture libkt reads from MODEL (a directory with config.json and\n"
            "safetensors files, a .gguf file, or a bare config .json), its tensors by type,\n"
            "role and part, and the memory each device would need.\n"
            "\n"
            "  MODEL             default: " DEFAULT_MODEL "\n"
            "  --json            machine-readable output\n"
            "  --tensors         also list every weight: layer, role, expert, storage, type,\n"
            "                    shape and the file tensor it views\n"
            "  --gpus N          estimate with N GPUs (default 0: CPU only)\n"
            "  --gpu-experts K   routed experts per MoE layer kept on the GPUs (default 0)\n"
            "  --context N       KV cache tokens for the estimate (default: 4096)\n");
}

/* ---- tensor summary ---------------------------------------------------------------------- */

enum part { PART_EMBED, PART_ATTN, PART_NORM, PART_ROUTER, PART_DENSE, PART_SHARED,
            PART_EXPERTS, PART_COUNT };
static const char *const part_names[PART_COUNT] = {
    "embeddings+head", "attention", "norms", "routers", "dense MLP", "shared experts",
    "routed experts"};

static enum part part_of(kt_role r)
{
    switch (r) {
    case KT_ROLE_EMBED:
    case KT_ROLE_LM_HEAD:
        return PART_EMBED;
    case KT_ROLE_ATTN_NORM:
    case KT_ROLE_FFN_NORM:
    case KT_ROLE_FINAL_NORM:
        return PART_NORM;
    case KT_ROLE_ROUTER:
    case KT_ROLE_ROUTER_BIAS:
    case KT_ROLE_SCORE_CORRECTION:
        return PART_ROUTER;
    case KT_ROLE_GATE_PROJ:
    case KT_ROLE_UP_PROJ:
    case KT_ROLE_DOWN_PROJ:
        return PART_DENSE;
    case KT_ROLE_SHARED_GATE:
    case KT_ROLE_SHARED_UP:
    case KT_ROLE_SHARED_DOWN:
    case KT_ROLE_SHARED_EXPERT_GATE:
        return PART_SHARED;
    case KT_ROLE_EXPERT_GATE:
    case KT_ROLE_EXPERT_UP:
    case KT_ROLE_EXPERT_DOWN:
    case KT_ROLE_EXPERT_GATE_UP:
    case KT_ROLE_EXPERT_GATE_UP_BIAS:
    case KT_ROLE_EXPERT_DOWN_BIAS:
        return PART_EXPERTS;
    default:
        return PART_ATTN;
    }
}

typedef struct tally {
    char name[48];
    uint64_t count, bytes;
} tally;

typedef struct summary {
    tally types[32];
    size_t n_types;
    tally roles[64];
    size_t n_roles;
    tally parts[PART_COUNT];
    uint64_t count, bytes;
} summary;

static void add(tally *t, size_t *n, size_t cap, const char *name, uint64_t bytes)
{
    size_t i;
    for (i = 0; i < *n; i++)
        if (!strcmp(t[i].name, name))
            break;
    if (i == *n) {
        if (*n == cap)
            return;
        snprintf(t[(*n)++].name, sizeof t->name, "%s", name);
    }
    t[i].count++;
    t[i].bytes += bytes;
}

/* Tensor i of the index into v; false when it cannot be read. */
static bool tensor_at(const kt_model *m, size_t i, kt_tensor_view *v)
{
    v->struct_size = sizeof *v;
    return kt_model_tensor_at(m, i, v) >= 0;
}

static void summarize(const kt_model *m, const kt_arch_info *a, summary *s)
{
    memset(s, 0, sizeof *s);
    for (int p = 0; p < PART_COUNT; p++)
        snprintf(s->parts[p].name, sizeof s->parts[p].name, "%s", part_names[p]);
    size_t n = kt_model_n_tensors(m);
    for (size_t i = 0; i < n; i++) {
        kt_tensor_view v;
        if (!tensor_at(m, i, &v))
            continue;
        if (v.role == KT_ROLE_LM_HEAD && a->tie_word_embeddings)
            continue; /* the embedding, counted once */
        uint64_t bytes = v.nbytes + v.scale_nbytes;
        const char *type = kt_type_name((kt_type)v.type);
        const char *role = kt_role_name((kt_role)v.role);
        static const char *const storage_tag[] = {"", "+scale (FP8 blocks)",
                                                  "+scale (INT4 packed)", " (GGML blocks)",
                                                  "+scale (MXFP4)"};
        /* label per type and storage: "F8_E4M3+scale (FP8 blocks)" */
        char label[48];
        snprintf(label, sizeof label, "%s%s", type ? type : "?",
                 v.storage > 0 && v.storage < 5 ? storage_tag[v.storage] : "");
        add(s->types, &s->n_types, 32, label, bytes);
        add(s->roles, &s->n_roles, 64, role ? role : "?", bytes);
        tally *p = &s->parts[part_of((kt_role)v.role)];
        p->count++;
        p->bytes += bytes;
        s->count++;
        s->bytes += bytes;
    }
}

/* ---- text ---------------------------------------------------------------------------------- */

static const char *rope_name(int32_t t)
{
    switch (t) {
    case KT_ROPE_DEFAULT: return "default";
    case KT_ROPE_LINEAR: return "linear";
    case KT_ROPE_YARN: return "yarn";
    default: return "none";
    }
}

static const char *qk_norm_name(int32_t q)
{
    return q == KT_QK_NORM_PER_HEAD ? "per-head" : q == KT_QK_NORM_FULL ? "full-width" : "none";
}

static const char *quant_name(int32_t q)
{
    switch (q) {
    case KT_QUANT_FP8_BLOCK: return "fp8";
    case KT_QUANT_INT4_PACKED: return "int4-pack-quantized";
    case KT_QUANT_GGUF: return "gguf";
    case KT_QUANT_MXFP4: return "mxfp4";
    default: return "none";
    }
}

/* "0: dense, 1-3: MoE" with sliding windows when present */
static void print_layers(const kt_model *m, const kt_arch_info *a)
{
    printf("%-11s", "layers");
    uint32_t start = 0;
    for (uint32_t l = 1; l <= a->n_layers; l++) {
        bool same = l < a->n_layers &&
                    kt_model_layer_is_moe(m, l) == kt_model_layer_is_moe(m, start) &&
                    kt_model_layer_sliding_window(m, l) == kt_model_layer_sliding_window(m, start);
        if (same)
            continue;
        uint32_t w = kt_model_layer_sliding_window(m, start);
        if (start == l - 1)
            printf("%s%u: ", start ? ", " : "", start);
        else
            printf("%s%u-%u: ", start ? ", " : "", start, l - 1);
        printf("%s", kt_model_layer_is_moe(m, start) ? "MoE" : "dense");
        if (w)
            printf(" (window %u)", w);
        start = l;
    }
    printf("\n");
}

static void print_text(const kt_model *m, const kt_arch_info *a, const summary *s,
                       const kt_memory_estimate *e, const kt_estimate_options *eo)
{
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    printf("%-11s%s (%s)\n", "model", kt_model_path(m),
           kt_model_format(m) == KT_FORMAT_GGUF ? "gguf" : "safetensors");
    printf("%-11s%s (model_type %s), %s\n", "arch", kt_arch_name((kt_arch)a->arch),
           a->model_type, kt_type_name((kt_type)a->dtype));
    printf("%-11svocab %u, hidden %u, %u layers (%u MoE), max positions %u, rms eps %g%s\n",
           "sizes", a->vocab_size, a->hidden_size, a->n_layers, a->n_moe_layers,
           a->max_position_embeddings, (double)a->rms_norm_eps,
           a->tie_word_embeddings ? ", tied embeddings" : "");
    if (a->attn_kind == KT_ATTN_MLA)
        printf("%-11sMLA, %u heads, q_lora %u, kv_lora %u, qk %u+%u, v %u", "attention",
               a->n_heads, a->q_lora_rank, a->kv_lora_rank, a->qk_nope_head_dim,
               a->qk_rope_head_dim, a->v_head_dim);
    else
        printf("%-11s%u heads, %u kv heads, head dim %u, qk norm %s", "attention", a->n_heads,
               a->n_kv_heads, a->head_dim, qk_norm_name(a->qk_norm));
    printf("%s%s%s, scale %.6g\n", a->attention_bias ? ", qkv bias" : "",
           a->attention_out_bias ? ", o bias" : "", a->attention_sinks ? ", sinks" : "",
           (double)a->attn_scale);
    printf("%-11s%s, theta %g, rotary dim %u, %s", "rope", rope_name(a->rope_type), a->rope_theta,
           a->rotary_dim, a->rope_interleave ? "interleaved pairs" : "neox halves");
    if (a->rope_type == KT_ROPE_YARN)
        printf(", factor %g, original %u, beta %g/%g, mscale %g/%g, attention factor %.6g%s",
               (double)a->rope_factor, a->rope_original_max_pos, (double)a->yarn_beta_fast,
               (double)a->yarn_beta_slow, (double)a->yarn_mscale,
               (double)a->yarn_mscale_all_dim, (double)a->yarn_attention_factor,
               a->yarn_truncate ? "" : ", no truncation");
    else if (a->rope_type == KT_ROPE_LINEAR)
        printf(", factor %g", (double)a->rope_factor);
    printf("\n");
    printf("%-11s%u routed, top %u, width %u; router %s%s%s%s", "experts", a->n_routed_experts,
           a->n_experts_per_tok, a->moe_intermediate_size,
           a->score_func == KT_SCORE_SIGMOID ? "sigmoid" : "softmax",
           a->score_correction_bias ? " + correction bias" : "",
           a->router_bias ? " + bias" : "", a->norm_topk_prob ? ", renormalised" : "");
    if (a->n_group > 1)
        printf(", groups %u keep %u", a->n_group, a->topk_group);
    if (a->routed_scaling_factor != 1.0f)
        printf(", scaling %g", (double)a->routed_scaling_factor);
    if (a->ffn_act == KT_ACT_SWIGLU_OAI)
        printf(", clamped swiglu (limit %g, alpha %g)", (double)a->swiglu_limit,
               (double)a->swiglu_alpha);
    printf("\n");
    if (a->n_shared_experts)
        printf("%-11s%u, width %u%s\n", "shared", a->n_shared_experts,
               a->shared_intermediate_size, a->shared_expert_gate ? ", gated" : "");
    if (a->n_moe_layers < a->n_layers)
        printf("%-11sintermediate %u\n", "dense MLP", a->intermediate_size);
    print_layers(m, a);
    printf("%-11sbos %d, eos [", "tokens", a->bos_token_id);
    for (uint32_t i = 0; i < a->n_eos_token_ids; i++)
        printf("%s%d", i ? ", " : "", a->eos_token_ids[i]);
    printf("]\n");
    printf("%-11s%s", "quant", quant_name(a->quant_method));
    if (a->quant_method == KT_QUANT_FP8_BLOCK)
        printf(", blocks %ux%u", a->quant_block_rows, a->quant_block_cols);
    if (a->quant_method == KT_QUANT_INT4_PACKED)
        printf(", %u-bit, group %u, %s", a->quant_bits, a->quant_group_size,
               a->quant_symmetric ? "symmetric" : "asymmetric");
    if (a->n_quant_ignore) {
        printf(", not quantized:");
        for (uint32_t i = 0; i < a->n_quant_ignore; i++)
            printf(" %s", a->quant_ignore[i]);
    }
    printf("\n");

    if (s->count) {
        printf("\n%-11s%" PRIu64 " weights (%zu file tensors unused), %s\n", "tensors", s->count,
               kt_model_n_ignored_tensors(m), term_bytes(s->bytes, b1, sizeof b1));
        printf("  by part\n");
        for (int p = 0; p < PART_COUNT; p++)
            if (s->parts[p].count)
                printf("    %-28s %8" PRIu64 "  %12s  %5.1f%%\n", s->parts[p].name,
                       s->parts[p].count, term_bytes(s->parts[p].bytes, b1, sizeof b1),
                       100.0 * (double)s->parts[p].bytes / (double)s->bytes);
        printf("  by type\n");
        for (size_t i = 0; i < s->n_types; i++)
            printf("    %-28s %8" PRIu64 "  %12s\n", s->types[i].name, s->types[i].count,
                   term_bytes(s->types[i].bytes, b1, sizeof b1));
        printf("  by role\n");
        for (size_t i = 0; i < s->n_roles; i++)
            printf("    %-28s %8" PRIu64 "  %12s\n", s->roles[i].name, s->roles[i].count,
                   term_bytes(s->roles[i].bytes, b1, sizeof b1));
    } else {
        printf("\n%-11sconfig only (no weights read)\n", "tensors");
    }

    printf("\n%-11s%u GPU(s), %u routed experts per MoE layer on GPU, context %u\n", "estimate",
           eo->n_gpus, eo->gpu_experts_per_layer, eo->context_length);
    printf("  weights: dense %s, routed experts %s (%s each), KV cache %s (%s/token)\n",
           term_bytes(e->dense_weight_bytes, b1, sizeof b1),
           term_bytes(e->routed_expert_bytes, b2, sizeof b2),
           term_bytes(e->expert_bytes, b3, sizeof b3), term_bytes(e->kv_bytes, b4, sizeof b4),
           term_bytes(e->kv_bytes_per_token, b5, sizeof b5));
    printf("  host %s, pinned %s", term_bytes(e->host_bytes, b1, sizeof b1),
           term_bytes(e->pinned_bytes, b2, sizeof b2));
    for (uint32_t g = 0; g < e->n_gpus; g++)
        printf(", GPU %u %s", g, term_bytes(e->gpu_bytes[g], b1, sizeof b1));
    printf("\n");
}

/* One line per indexed weight. */
static void print_tensors(const kt_model *m)
{
    printf("\n%-6s %-20s %-6s %-12s %-8s %-20s %s\n", "layer", "role", "expert", "storage",
           "type", "shape", "tensor");
    size_t n = kt_model_n_tensors(m);
    for (size_t i = 0; i < n; i++) {
        kt_tensor_view v;
        if (!tensor_at(m, i, &v))
            continue;
        char layer[16] = "-", expert[16] = "-", shape[64] = "";
        if (v.layer != UINT32_MAX)
            snprintf(layer, sizeof layer, "%u", v.layer);
        if (v.expert != UINT32_MAX)
            snprintf(expert, sizeof expert, "%u", v.expert);
        size_t off = 0;
        for (uint32_t d = 0; d < v.n_dims && off < sizeof shape; d++)
            off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%" PRIu64, d ? "x" : "",
                                    v.shape[d]);
        const char *storage = kt_storage_name((kt_storage)v.storage);
        const char *type = kt_type_name((kt_type)v.type);
        printf("%-6s %-20s %-6s %-12s %-8s %-20s %s\n", layer, kt_role_name((kt_role)v.role),
               expert, storage ? storage : "?", type ? type : "?", shape, v.name);
    }
}

static cJSON *tensors_json(const kt_model *m)
{
    cJSON *arr = cJSON_CreateArray();
    size_t n = kt_model_n_tensors(m);
    for (size_t i = 0; i < n; i++) {
        kt_tensor_view v;
        if (!tensor_at(m, i, &v))
            continue;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", v.name);
        cJSON_AddStringToObject(t, "role", kt_role_name((kt_role)v.role));
        if (v.layer != UINT32_MAX)
            cJSON_AddNumberToObject(t, "layer", v.layer);
        if (v.expert != UINT32_MAX)
            cJSON_AddNumberToObject(t, "expert", v.expert);
        const char *storage = kt_storage_name((kt_storage)v.storage);
        const char *type = kt_type_name((kt_type)v.type);
        cJSON_AddStringToObject(t, "storage", storage ? storage : "?");
        cJSON_AddStringToObject(t, "type", type ? type : "?");
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (uint32_t d = 0; d < v.n_dims; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)v.shape[d]));
        cJSON_AddNumberToObject(t, "rows", (double)v.rows);
        cJSON_AddNumberToObject(t, "cols", (double)v.cols);
        cJSON_AddNumberToObject(t, "bytes", (double)(v.nbytes + v.scale_nbytes));
        cJSON_AddItemToArray(arr, t);
    }
    return arr;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

/* A float as its shortest faithful decimal (1e-06, not 9.99999997e-07). */
static double f7(float x)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)x);
    return strtod(buf, NULL);
}

static cJSON *tallies_json(const tally *t, size_t n)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < n; i++) {
        if (!t[i].count)
            continue;
        cJSON *x = cJSON_AddObjectToObject(o, t[i].name);
        cJSON_AddNumberToObject(x, "count", (double)t[i].count);
        cJSON_AddNumberToObject(x, "bytes", (double)t[i].bytes);
    }
    return o;
}

static char *to_json(const kt_model *m, const kt_arch_info *a, const summary *s,
                     const kt_memory_estimate *e, const kt_estimate_options *eo, bool tensors)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "path", kt_model_path(m));
    cJSON_AddStringToObject(root, "format",
                            kt_model_format(m) == KT_FORMAT_GGUF ? "gguf" : "safetensors");
    cJSON *j = cJSON_AddObjectToObject(root, "arch");
#define NUM(k, v) cJSON_AddNumberToObject(j, k, (double)(v))
#define BOOL(k, v) cJSON_AddBoolToObject(j, k, (v) != 0)
    cJSON_AddStringToObject(j, "arch", kt_arch_name((kt_arch)a->arch));
    cJSON_AddStringToObject(j, "model_type", a->model_type);
    cJSON_AddStringToObject(j, "dtype", kt_type_name((kt_type)a->dtype));
    NUM("vocab_size", a->vocab_size);
    NUM("hidden_size", a->hidden_size);
    NUM("intermediate_size", a->intermediate_size);
    NUM("moe_intermediate_size", a->moe_intermediate_size);
    NUM("n_layers", a->n_layers);
    NUM("n_moe_layers", a->n_moe_layers);
    NUM("max_position_embeddings", a->max_position_embeddings);
    NUM("rms_norm_eps", f7(a->rms_norm_eps));
    BOOL("tie_word_embeddings", a->tie_word_embeddings);
    cJSON_AddStringToObject(j, "attention", a->attn_kind == KT_ATTN_MLA ? "mla" : "gqa");
    NUM("n_heads", a->n_heads);
    NUM("n_kv_heads", a->n_kv_heads);
    NUM("head_dim", a->head_dim);
    NUM("q_lora_rank", a->q_lora_rank);
    NUM("kv_lora_rank", a->kv_lora_rank);
    NUM("qk_nope_head_dim", a->qk_nope_head_dim);
    NUM("qk_rope_head_dim", a->qk_rope_head_dim);
    NUM("v_head_dim", a->v_head_dim);
    cJSON_AddStringToObject(j, "qk_norm", qk_norm_name(a->qk_norm));
    BOOL("attention_bias", a->attention_bias);
    BOOL("attention_out_bias", a->attention_out_bias);
    BOOL("attention_sinks", a->attention_sinks);
    NUM("sliding_window", a->sliding_window);
    NUM("attn_scale", f7(a->attn_scale));
    cJSON_AddStringToObject(j, "rope_type", rope_name(a->rope_type));
    NUM("rope_theta", a->rope_theta);
    NUM("rotary_dim", a->rotary_dim);
    NUM("partial_rotary_factor", f7(a->partial_rotary_factor));
    BOOL("rope_interleave", a->rope_interleave);
    NUM("rope_factor", f7(a->rope_factor));
    NUM("rope_original_max_pos", a->rope_original_max_pos);
    NUM("yarn_beta_fast", f7(a->yarn_beta_fast));
    NUM("yarn_beta_slow", f7(a->yarn_beta_slow));
    NUM("yarn_mscale", f7(a->yarn_mscale));
    NUM("yarn_mscale_all_dim", f7(a->yarn_mscale_all_dim));
    NUM("yarn_attention_factor", f7(a->yarn_attention_factor));
    BOOL("yarn_truncate", a->yarn_truncate);
    NUM("n_routed_experts", a->n_routed_experts);
    NUM("n_experts_per_tok", a->n_experts_per_tok);
    NUM("n_shared_experts", a->n_shared_experts);
    NUM("shared_intermediate_size", a->shared_intermediate_size);
    BOOL("shared_expert_gate", a->shared_expert_gate);
    NUM("first_k_dense_replace", a->first_k_dense_replace);
    NUM("decoder_sparse_step", a->decoder_sparse_step);
    NUM("n_group", a->n_group);
    NUM("topk_group", a->topk_group);
    NUM("routed_scaling_factor", f7(a->routed_scaling_factor));
    BOOL("norm_topk_prob", a->norm_topk_prob);
    cJSON_AddStringToObject(j, "score_func", a->score_func == KT_SCORE_SIGMOID ? "sigmoid"
                                                                                : "softmax");
    BOOL("score_correction_bias", a->score_correction_bias);
    BOOL("router_bias", a->router_bias);
    cJSON_AddStringToObject(j, "ffn_act", a->ffn_act == KT_ACT_SWIGLU_OAI ? "swiglu_oai"
                                                                            : "swiglu");
    NUM("swiglu_limit", f7(a->swiglu_limit));
    NUM("swiglu_alpha", f7(a->swiglu_alpha));
    BOOL("expert_bias", a->expert_bias);
    NUM("n_nextn_layers", a->n_nextn_layers);
    NUM("bos_token_id", a->bos_token_id);
    NUM("pad_token_id", a->pad_token_id);
    cJSON *eos = cJSON_AddArrayToObject(j, "eos_token_ids");
    for (uint32_t i = 0; i < a->n_eos_token_ids; i++)
        cJSON_AddItemToArray(eos, cJSON_CreateNumber(a->eos_token_ids[i]));
    cJSON_AddStringToObject(j, "quant_method", quant_name(a->quant_method));
    NUM("quant_block_rows", a->quant_block_rows);
    NUM("quant_block_cols", a->quant_block_cols);
    NUM("quant_bits", a->quant_bits);
    NUM("quant_group_size", a->quant_group_size);
    BOOL("quant_symmetric", a->quant_symmetric);
    cJSON *ign = cJSON_AddArrayToObject(j, "quant_ignore");
    for (uint32_t i = 0; i < a->n_quant_ignore; i++)
        cJSON_AddItemToArray(ign, cJSON_CreateString(a->quant_ignore[i]));
#undef NUM
#undef BOOL
    cJSON *layers = cJSON_AddArrayToObject(root, "layers");
    for (uint32_t l = 0; l < a->n_layers; l++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddBoolToObject(x, "moe", kt_model_layer_is_moe(m, l) != 0);
        cJSON_AddNumberToObject(x, "sliding_window", kt_model_layer_sliding_window(m, l));
        cJSON_AddItemToArray(layers, x);
    }
    cJSON *t = cJSON_AddObjectToObject(root, "tensors");
    cJSON_AddNumberToObject(t, "count", (double)s->count);
    cJSON_AddNumberToObject(t, "bytes", (double)s->bytes);
    cJSON_AddNumberToObject(t, "unused_file_tensors", (double)kt_model_n_ignored_tensors(m));
    cJSON_AddItemToObject(t, "by_part", tallies_json(s->parts, PART_COUNT));
    cJSON_AddItemToObject(t, "by_type", tallies_json(s->types, s->n_types));
    cJSON_AddItemToObject(t, "by_role", tallies_json(s->roles, s->n_roles));
    if (tensors)
        cJSON_AddItemToObject(t, "list", tensors_json(m));
    cJSON *x = cJSON_AddObjectToObject(root, "estimate");
    cJSON_AddNumberToObject(x, "n_gpus", eo->n_gpus);
    cJSON_AddNumberToObject(x, "gpu_experts_per_layer", eo->gpu_experts_per_layer);
    cJSON_AddNumberToObject(x, "context_length", eo->context_length);
    cJSON_AddNumberToObject(x, "host_bytes", (double)e->host_bytes);
    cJSON_AddNumberToObject(x, "pinned_bytes", (double)e->pinned_bytes);
    cJSON *g = cJSON_AddArrayToObject(x, "gpu_bytes");
    for (uint32_t i = 0; i < e->n_gpus; i++)
        cJSON_AddItemToArray(g, cJSON_CreateNumber((double)e->gpu_bytes[i]));
    cJSON_AddNumberToObject(x, "dense_weight_bytes", (double)e->dense_weight_bytes);
    cJSON_AddNumberToObject(x, "routed_expert_bytes", (double)e->routed_expert_bytes);
    cJSON_AddNumberToObject(x, "expert_bytes", (double)e->expert_bytes);
    cJSON_AddNumberToObject(x, "kv_bytes_per_token", (double)e->kv_bytes_per_token);
    cJSON_AddNumberToObject(x, "kv_bytes", (double)e->kv_bytes);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

/* ---- command ------------------------------------------------------------------------------- */

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false, tensors = false, bad = false;
    kt_estimate_options eo = KT_ESTIMATE_OPTIONS_INIT;
    eo.context_length = 4096;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int64_t n;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--json", false, &v, &bad)) {
            json = true;
        } else if (opt_match(argc, argv, &i, "--tensors", false, &v, &bad)) {
            tensors = true;
        } else if (opt_match(argc, argv, &i, "--gpus", true, &v, &bad)) {
            if (bad || !opt_parse_i64("kt-run inspect", "--gpus", v, 0, KT_ESTIMATE_MAX_GPUS, &n))
                return 2;
            eo.n_gpus = (uint32_t)n;
        } else if (opt_match(argc, argv, &i, "--gpu-experts", true, &v, &bad)) {
            if (bad || !opt_parse_i64("kt-run inspect", "--gpu-experts", v, 0, 1 << 20, &n))
                return 2;
            eo.gpu_experts_per_layer = (uint32_t)n;
        } else if (opt_match(argc, argv, &i, "--context", true, &v, &bad)) {
            if (bad || !opt_parse_i64("kt-run inspect", "--context", v, 1, UINT32_MAX, &n))
                return 2;
            eo.context_length = (uint32_t)n;
        } else if (bad) {
            return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "kt-run inspect: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "kt-run inspect: more than one MODEL ('%s', '%s')\n", path, argv[i]);
            return 2;
        }
    }
    if (!path)
        path = DEFAULT_MODEL;

    kt_model *m = NULL;
    kt_status st = kt_model_open(&m, NULL, path, NULL);
    if (st < 0) {
        fprintf(stderr, "kt-run inspect: cannot open '%s': %s\n", path, kt_last_error());
        return 1;
    }
    kt_arch_info a;
    a.struct_size = sizeof a;
    kt_memory_estimate e;
    e.struct_size = sizeof e;
    if (kt_model_arch(m, &a) < 0 || kt_model_estimate(m, &eo, &e) < 0) {
        fprintf(stderr, "kt-run inspect: %s\n", kt_last_error());
        kt_model_free(m);
        return 1;
    }
    summary *s = malloc(sizeof *s);
    if (!s) {
        kt_model_free(m);
        return 1;
    }
    summarize(m, &a, s);
    int rc = 0;
    if (json) {
        char *text = to_json(m, &a, s, &e, &eo, tensors);
        if (text) {
            printf("%s\n", text);
            free(text);
        } else {
            rc = 1;
        }
    } else {
        print_text(m, &a, s, &e, &eo);
        if (tensors)
            print_tensors(m);
    }
    free(s);
    kt_model_free(m);
    return rc;
}
