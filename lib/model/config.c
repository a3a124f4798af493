/*
 * config.json of each supported family -> kt_arch_info.
 *
 * Two styles are read: as published on the hub (`rope_theta` + `rope_scaling`,
 * `num_experts`, `model_type: kimi_k2`, DeepSeek without `rope_interleave`) and
 * as written by transformers 5 (`rope_parameters`, `num_local_experts`,
 * explicit `rope_interleave`, `dtype`). Missing fields take the defaults of
 * the family's transformers configuration class. Every error names the file
 * and the field.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "io/json.h"
#include "model_internal.h"

typedef struct parser {
    const cJSON *root;  /* the text config (text_config when nested)         */
    const cJSON *top;   /* the file's top object (quantization_config there) */
    const cJSON *rope;  /* rope_parameters or rope_scaling, may be NULL       */
    const char *file;
} parser;

/* A field that is absent or JSON null counts as absent. */
static const cJSON *field(const cJSON *obj, const char *key)
{
    if (!obj)
        return NULL;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it))
        return NULL;
    return it;
}

static kt_status get_u32(const parser *p, const cJSON *obj, const char *key, uint32_t def,
                         uint32_t max, uint32_t *out)
{
    const cJSON *it = field(obj, key);
    if (!it) {
        *out = def;
        return KT_OK;
    }
    uint64_t v;
    if (cJSON_IsBool(it)) {
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': expected an integer, got a boolean",
                         p->file, key);
    }
    if (!kt__json_u64(it, &v))
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': expected a non-negative integer",
                         p->file, key);
    if (v > max)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': %llu is larger than %u", p->file, key,
                         (unsigned long long)v, max);
    *out = (uint32_t)v;
    return KT_OK;
}

static kt_status get_f64(const parser *p, const cJSON *obj, const char *key, double def,
                         double *out)
{
    const cJSON *it = field(obj, key);
    if (!it) {
        *out = def;
        return KT_OK;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': expected a number", p->file, key);
    *out = it->valuedouble;
    return KT_OK;
}

static kt_status get_f32(const parser *p, const cJSON *obj, const char *key, double def,
                         float *out)
{
    double v = def;
    kt_status st = get_f64(p, obj, key, def, &v);
    if (st < 0)
        return st;
    if (fabs(v) > 3.0e38)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': %g is out of range", p->file, key, v);
    *out = (float)v;
    return KT_OK;
}

/* Booleans; 0/1 numbers are accepted too (some exporters write them). */
static kt_status get_bool(const parser *p, const cJSON *obj, const char *key, bool def,
                          uint32_t *out)
{
    const cJSON *it = field(obj, key);
    if (!it) {
        *out = def ? 1u : 0u;
        return KT_OK;
    }
    if (cJSON_IsBool(it)) {
        *out = cJSON_IsTrue(it) ? 1u : 0u;
        return KT_OK;
    }
    uint64_t v;
    if (kt__json_u64(it, &v) && v <= 1) {
        *out = (uint32_t)v;
        return KT_OK;
    }
    return kt__error(KT_ERR_FORMAT, "%s: field '%s': expected true or false", p->file, key);
}

/* NULL when absent; error when present but not a string. */
static kt_status get_str(const parser *p, const cJSON *obj, const char *key, const char **out)
{
    const cJSON *it = field(obj, key);
    *out = NULL;
    if (!it)
        return KT_OK;
    if (!cJSON_IsString(it) || !it->valuestring)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': expected a string", p->file, key);
    *out = it->valuestring;
    return KT_OK;
}

/* Token id: integer, or null/absent (-1). Out-of-vocab ids are checked later. */
static kt_status get_token(const parser *p, const char *key, int32_t *out)
{
    const cJSON *it = field(p->root, key);
    *out = -1;
    if (!it)
        return KT_OK;
    if (cJSON_IsArray(it)) { /* some configs give a one-element list */
        if (cJSON_GetArraySize(it) == 0)
            return KT_OK;
        it = cJSON_GetArrayItem(it, 0);
    }
    int64_t v;
    if (!kt__json_i64(it, &v) || v < 0 || v > INT32_MAX)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': expected a token id", p->file, key);
    *out = (int32_t)v;
    return KT_OK;
}

static const struct {
    const char *model_type;
    kt_arch arch;
} families[] = {
    {"deepseek_v3", KT_ARCH_DEEPSEEK_V3}, {"kimi_k2", KT_ARCH_KIMI_K2},
    {"qwen3_moe", KT_ARCH_QWEN3_MOE},     {"qwen2_moe", KT_ARCH_QWEN2_MOE},
    {"mixtral", KT_ARCH_MIXTRAL},         {"minimax_m2", KT_ARCH_MINIMAX_M2},
    {"gpt_oss", KT_ARCH_GPT_OSS},         {"glm4_moe", KT_ARCH_GLM4_MOE},
};

const char *kt_arch_name(kt_arch arch)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(families); i++)
        if (families[i].arch == arch)
            return families[i].model_type;
    return NULL;
}

static bool is_deepseek_like(kt_arch a)
{
    return a == KT_ARCH_DEEPSEEK_V3 || a == KT_ARCH_KIMI_K2 || a == KT_ARCH_GLM4_MOE;
}

void kt__config_free(kt__config *cfg)
{
    if (!cfg)
        return;
    kt__free(cfg->model_type);
    kt__free(cfg->eos_ids);
    if (cfg->quant_ignore)
        for (uint32_t i = 0; i < cfg->info.n_quant_ignore; i++)
            kt__free(cfg->quant_ignore[i]);
    if (cfg->ignore_re)
        for (uint32_t i = 0; i < cfg->info.n_quant_ignore; i++)
            if (cfg->ignore_re[i])
                pcre2_code_free((pcre2_code *)cfg->ignore_re[i]);
    kt__free(cfg->quant_ignore);
    kt__free(cfg->ignore_re);
    kt__free(cfg->layer_moe);
    kt__free(cfg->layer_window);
    memset(cfg, 0, sizeof *cfg);
}

kt_status kt__config_alloc_layers(kt__config *cfg)
{
    uint32_t n = cfg->info.n_layers;
    if (n == 0 || n > KT__MAX_LAYERS)
        return kt__error(KT_ERR_FORMAT, "layer count %u out of range", n);
    kt__free(cfg->layer_moe);
    kt__free(cfg->layer_window);
    cfg->layer_moe = kt__calloc(n, 1);
    cfg->layer_window = kt__calloc(n, sizeof(uint32_t));
    if (!cfg->layer_moe || !cfg->layer_window)
        return KT_ERR_NOMEM;
    return KT_OK;
}

/* ---------------------------------------------------------------- rope --- */

static kt_status parse_rope(const parser *p, kt__config *cfg, double default_theta)
{
    kt_arch_info *a = &cfg->info;
    kt_status st;
    /* transformers 5 keeps everything in rope_parameters; the hub style has
     * rope_theta at the top and the scaling (or null) in rope_scaling. */
    const cJSON *rp = p->rope;
    double theta = 0.0;
    if ((st = get_f64(p, p->root, "rope_theta", default_theta, &theta)) < 0)
        return st;
    if (rp && field(rp, "rope_theta") && (st = get_f64(p, rp, "rope_theta", theta, &theta)) < 0)
        return st;
    if (!(theta > 0.0))
        return kt__error(KT_ERR_FORMAT, "%s: field 'rope_theta': %g must be > 0", p->file, theta);
    a->rope_theta = theta;

    const char *type = NULL;
    if (rp) {
        if ((st = get_str(p, rp, "rope_type", &type)) < 0)
            return st;
        if (!type && (st = get_str(p, rp, "type", &type)) < 0)
            return st;
    }
    a->rope_factor = 1.0f;
    a->yarn_truncate = 1;
    if (!type || !strcmp(type, "default")) {
        a->rope_type = KT_ROPE_DEFAULT;
        return KT_OK;
    }
    if (!strcmp(type, "linear")) {
        a->rope_type = KT_ROPE_LINEAR;
        if ((st = get_f32(p, rp, "factor", 1.0, &a->rope_factor)) < 0)
            return st;
    } else if (!strcmp(type, "yarn")) {
        a->rope_type = KT_ROPE_YARN;
        if ((st = get_f32(p, rp, "factor", 0.0, &a->rope_factor)) < 0 ||
            (st = get_u32(p, rp, "original_max_position_embeddings", 0, KT__MAX_DIM * 64u,
                          &a->rope_original_max_pos)) < 0 ||
            (st = get_f32(p, rp, "beta_fast", 32.0, &a->yarn_beta_fast)) < 0 ||
            (st = get_f32(p, rp, "beta_slow", 1.0, &a->yarn_beta_slow)) < 0 ||
            (st = get_f32(p, rp, "mscale", 0.0, &a->yarn_mscale)) < 0 ||
            (st = get_f32(p, rp, "mscale_all_dim", 0.0, &a->yarn_mscale_all_dim)) < 0 ||
            (st = get_f32(p, rp, "attention_factor", 0.0, &a->yarn_attention_factor)) < 0 ||
            (st = get_bool(p, rp, "truncate", true, &a->yarn_truncate)) < 0)
            return st;
        if (a->rope_original_max_pos == 0)
            a->rope_original_max_pos = a->max_position_embeddings;
        if (a->rope_factor == 0.0f && a->rope_original_max_pos > 0) /* HF: derive */
            a->rope_factor = (float)a->max_position_embeddings / (float)a->rope_original_max_pos;
        if (!(a->yarn_beta_fast > 0.0f) || !(a->yarn_beta_slow > 0.0f))
            return kt__error(KT_ERR_FORMAT, "%s: rope scaling: beta_fast/beta_slow must be > 0",
                             p->file);
    } else {
        return kt__error(KT_ERR_UNSUPPORTED, "%s: rope type '%s' is not supported "
                         "(supported: default, linear, yarn)", p->file, type);
    }
    if (!(a->rope_factor > 0.0f))
        return kt__error(KT_ERR_FORMAT, "%s: rope scaling: factor must be > 0", p->file);
    return KT_OK;
}

/* ------------------------------------------------------- quantization --- */

static kt_status add_ignore_list(const parser *p, kt__config *cfg, const cJSON *list,
                                 const char *key)
{
    if (!list)
        return KT_OK;
    if (!cJSON_IsArray(list))
        return kt__error(KT_ERR_FORMAT, "%s: quantization_config.%s: expected a list", p->file,
                         key);
    int n = cJSON_GetArraySize(list);
    if (n < 0 || (uint32_t)n > KT__MAX_IGNORE)
        return kt__error(KT_ERR_FORMAT, "%s: quantization_config.%s: too many entries",
                         p->file, key);
    if (n == 0)
        return KT_OK;
    cfg->quant_ignore = kt__calloc((size_t)n, sizeof(char *));
    cfg->ignore_re = kt__calloc((size_t)n, sizeof(void *));
    if (!cfg->quant_ignore || !cfg->ignore_re)
        return KT_ERR_NOMEM;
    uint32_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        if (!cJSON_IsString(it) || !it->valuestring)
            return kt__error(KT_ERR_FORMAT, "%s: quantization_config.%s[%u]: expected a string",
                             p->file, key, i);
        cfg->quant_ignore[i] = kt__strdup(it->valuestring);
        if (!cfg->quant_ignore[i])
            return KT_ERR_NOMEM;
        cfg->info.n_quant_ignore = i + 1;
        if (!strncmp(it->valuestring, "re:", 3)) {
            int err = 0;
            PCRE2_SIZE off = 0;
            const char *pat = it->valuestring + 3;
            pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                           PCRE2_ANCHORED | PCRE2_UTF, &err, &off, NULL);
            if (!re) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(err, msg, sizeof msg);
                return kt__error(KT_ERR_FORMAT,
                                 "%s: quantization_config.%s[%u]: bad regex '%s' at %zu: %s",
                                 p->file, key, i, pat, (size_t)off, (const char *)msg);
            }
            cfg->ignore_re[i] = re;
        }
        i++;
    }
    return KT_OK;
}

bool kt__config_quant_ignored(const kt__config *cfg, const char *name)
{
    for (uint32_t i = 0; i < cfg->info.n_quant_ignore; i++) {
        if (cfg->ignore_re && cfg->ignore_re[i]) {
            pcre2_code *re = (pcre2_code *)cfg->ignore_re[i];
            pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
            if (!md)
                continue;
            int rc = pcre2_match(re, (PCRE2_SPTR)name, strlen(name), 0, 0, md, NULL);
            pcre2_match_data_free(md);
            if (rc >= 0)
                return true;
        } else if (cfg->ignore_substring ? strstr(name, cfg->quant_ignore[i]) != NULL
                                         : !strcmp(cfg->quant_ignore[i], name)) {
            return true;
        }
    }
    return false;
}

/* scoring_func: sigmoid (the default) or softmax. */
static kt_status parse_score_func(const parser *p, const char *score, kt_arch_info *a)
{
    if (!score || !strcmp(score, "sigmoid"))
        a->score_func = KT_SCORE_SIGMOID;
    else if (!strcmp(score, "softmax"))
        a->score_func = KT_SCORE_SOFTMAX;
    else
        return kt__error(KT_ERR_UNSUPPORTED, "%s: scoring_func '%s' is not supported", p->file,
                         score);
    return KT_OK;
}

static kt_status parse_fp8(const parser *p, kt__config *cfg, const cJSON *q)
{
    kt_arch_info *a = &cfg->info;
    kt_status st;
    const char *fmt = NULL;
    if ((st = get_str(p, q, "fmt", &fmt)) < 0)
        return st;
    if (fmt && strcmp(fmt, "e4m3") && strcmp(fmt, "float8_e4m3fn"))
        return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config.fmt '%s' is not supported "
                         "(only e4m3)", p->file, fmt);
    const char *act = NULL;
    if ((st = get_str(p, q, "activation_scheme", &act)) < 0)
        return st;
    if (act && strcmp(act, "dynamic"))
        return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config.activation_scheme '%s' "
                         "is not supported (only dynamic)", p->file, act);
    const cJSON *bs = field(q, "weight_block_size");
    if (!bs)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config: fp8 without "
                         "weight_block_size (per-tensor FP8) is not supported", p->file);
    uint64_t bh, bw;
    if (!cJSON_IsArray(bs) || cJSON_GetArraySize(bs) != 2 ||
        !kt__json_u64(cJSON_GetArrayItem(bs, 0), &bh) ||
        !kt__json_u64(cJSON_GetArrayItem(bs, 1), &bw) || bh == 0 || bw == 0 ||
        bh > 65536 || bw > 65536)
        return kt__error(KT_ERR_FORMAT, "%s: quantization_config.weight_block_size: expected "
                         "two positive integers", p->file);
    a->quant_method = KT_QUANT_FP8_BLOCK;
    a->quant_bits = 8;
    a->quant_block_rows = (uint32_t)bh;
    a->quant_block_cols = (uint32_t)bw;
    cfg->ignore_substring = true;
    if ((st = add_ignore_list(p, cfg, field(q, "modules_to_not_convert"),
                              "modules_to_not_convert")) < 0)
        return st;
    if (a->n_quant_ignore == 0)
        return add_ignore_list(p, cfg, field(q, "ignored_layers"), "ignored_layers");
    return KT_OK;
}

static kt_status parse_compressed_tensors(const parser *p, kt__config *cfg, const cJSON *q)
{
    kt_arch_info *a = &cfg->info;
    kt_status st;
    const char *format = NULL;
    if ((st = get_str(p, q, "format", &format)) < 0)
        return st;
    const cJSON *groups = field(q, "config_groups");
    if (!groups || !cJSON_IsObject(groups) || !groups->child)
        return kt__error(KT_ERR_FORMAT, "%s: quantization_config.config_groups: expected a "
                         "non-empty object", p->file);
    uint32_t group_size = 0, bits = 0, symmetric = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, groups) {
        const char *gname = g->string ? g->string : "?";
        if (!cJSON_IsObject(g))
            return kt__error(KT_ERR_FORMAT, "%s: quantization_config.config_groups.%s: "
                             "expected an object", p->file, gname);
        const char *gformat = NULL;
        if ((st = get_str(p, g, "format", &gformat)) < 0)
            return st;
        const char *fmt = gformat ? gformat : format;
        if (!fmt || strcmp(fmt, "pack-quantized"))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config: compressed-tensors "
                             "format '%s' is not supported (only pack-quantized)", p->file,
                             fmt ? fmt : "(none)");
        if (field(g, "input_activations"))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config.config_groups.%s: "
                             "quantized input activations are not supported", p->file, gname);
        const cJSON *w = field(g, "weights");
        if (!w || !cJSON_IsObject(w))
            return kt__error(KT_ERR_FORMAT, "%s: quantization_config.config_groups.%s.weights: "
                             "expected an object", p->file, gname);
        uint32_t nb, gs, sym;
        const char *type = NULL, *strategy = NULL;
        if ((st = get_u32(p, w, "num_bits", 0, 64, &nb)) < 0 ||
            (st = get_u32(p, w, "group_size", 0, KT__MAX_DIM, &gs)) < 0 ||
            (st = get_bool(p, w, "symmetric", true, &sym)) < 0 ||
            (st = get_str(p, w, "type", &type)) < 0 ||
            (st = get_str(p, w, "strategy", &strategy)) < 0)
            return st;
        if (nb != 4 || (type && strcmp(type, "int")))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config.config_groups.%s: "
                             "%u-bit %s weights are not supported (only 4-bit int)", p->file,
                             gname, nb, type ? type : "int");
        if (strategy && strcmp(strategy, "group"))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config.config_groups.%s: "
                             "strategy '%s' is not supported (only group)", p->file, gname,
                             strategy);
        if (gs == 0 || gs % 8)
            return kt__error(KT_ERR_FORMAT, "%s: quantization_config.config_groups.%s.weights."
                             "group_size: %u is not a positive multiple of 8", p->file, gname,
                             gs);
        if (!sym)
            return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config.config_groups.%s: "
                             "asymmetric INT4 (zero points) is not supported", p->file, gname);
        if (group_size && (group_size != gs || bits != nb || symmetric != sym))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config: config groups with "
                             "different schemes are not supported", p->file);
        group_size = gs;
        bits = nb;
        symmetric = sym;
    }
    a->quant_method = KT_QUANT_INT4_PACKED;
    a->quant_bits = bits;
    a->quant_group_size = group_size;
    a->quant_symmetric = symmetric;
    a->quant_block_rows = 1;
    a->quant_block_cols = group_size;
    return add_ignore_list(p, cfg, field(q, "ignore"), "ignore");
}

static kt_status parse_quant(const parser *p, kt__config *cfg)
{
    const cJSON *q = field(p->root, "quantization_config");
    if (!q)
        q = field(p->top, "quantization_config");
    if (!q) {
        cfg->info.quant_method = KT_QUANT_NONE;
        return KT_OK;
    }
    if (!cJSON_IsObject(q))
        return kt__error(KT_ERR_FORMAT, "%s: quantization_config: expected an object", p->file);
    const char *method = NULL;
    kt_status st = get_str(p, q, "quant_method", &method);
    if (st < 0)
        return st;
    if (!method)
        return kt__error(KT_ERR_FORMAT, "%s: quantization_config: missing quant_method",
                         p->file);
    if (!strcmp(method, "fp8"))
        return parse_fp8(p, cfg, q);
    if (!strcmp(method, "compressed-tensors"))
        return parse_compressed_tensors(p, cfg, q);
    if (!strcmp(method, "mxfp4")) { /* gpt-oss: experts as *_blocks + *_scales */
        cfg->info.quant_method = KT_QUANT_MXFP4;
        cfg->info.quant_bits = 4;
        cfg->info.quant_block_rows = 1;
        cfg->info.quant_block_cols = 32;
        cfg->info.quant_group_size = 32;
        cfg->info.quant_symmetric = 1;
        cfg->ignore_substring = true;
        return add_ignore_list(p, cfg, field(q, "modules_to_not_convert"),
                               "modules_to_not_convert");
    }
    return kt__error(KT_ERR_UNSUPPORTED, "%s: quantization_config.quant_method '%s' is not "
                     "supported (supported: fp8 with weight_block_size, compressed-tensors "
                     "pack-quantized int4, mxfp4)", p->file, method);
}

/* ------------------------------------------------------------- layers --- */

static kt_status parse_layer_types(const parser *p, kt__config *cfg, bool *found)
{
    const cJSON *lt = field(p->root, "layer_types");
    *found = false;
    if (!lt)
        return KT_OK;
    if (!cJSON_IsArray(lt))
        return kt__error(KT_ERR_FORMAT, "%s: field 'layer_types': expected a list", p->file);
    int n = cJSON_GetArraySize(lt);
    if (n != (int)cfg->info.n_layers)
        return kt__error(KT_ERR_FORMAT, "%s: field 'layer_types' has %d entries, "
                         "num_hidden_layers is %u", p->file, n, cfg->info.n_layers);
    uint32_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, lt) {
        if (!cJSON_IsString(it) || !it->valuestring)
            return kt__error(KT_ERR_FORMAT, "%s: field 'layer_types'[%u]: expected a string",
                             p->file, i);
        if (!strcmp(it->valuestring, "sliding_attention")) {
            if (cfg->info.sliding_window == 0)
                return kt__error(KT_ERR_FORMAT, "%s: layer_types[%u] is sliding_attention but "
                                 "sliding_window is not set", p->file, i);
            cfg->layer_window[i] = cfg->info.sliding_window;
        } else if (!strcmp(it->valuestring, "full_attention")) {
            cfg->layer_window[i] = 0;
        } else {
            return kt__error(KT_ERR_UNSUPPORTED, "%s: layer_types[%u]: attention type '%s' is "
                             "not supported", p->file, i, it->valuestring);
        }
        i++;
    }
    *found = true;
    return KT_OK;
}

static kt_status resolve_moe_layers(const parser *p, kt__config *cfg, uint32_t moe_layer_freq)
{
    kt_arch_info *a = &cfg->info;
    const uint32_t n = a->n_layers;
    for (uint32_t l = 0; l < n; l++) {
        bool moe = a->n_routed_experts > 0;
        if (is_deepseek_like(a->arch))
            moe = moe && l >= a->first_k_dense_replace && l % moe_layer_freq == 0;
        else if (a->arch == KT_ARCH_QWEN3_MOE || a->arch == KT_ARCH_QWEN2_MOE)
            moe = moe && (l + 1) % a->decoder_sparse_step == 0;
        cfg->layer_moe[l] = moe ? 1 : 0;
    }
    const cJSON *mlp_only = field(p->root, "mlp_only_layers");
    if (mlp_only && (a->arch == KT_ARCH_QWEN3_MOE || a->arch == KT_ARCH_QWEN2_MOE)) {
        if (!cJSON_IsArray(mlp_only))
            return kt__error(KT_ERR_FORMAT, "%s: field 'mlp_only_layers': expected a list",
                             p->file);
        uint32_t i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, mlp_only) {
            uint64_t l;
            if (!kt__json_u64(it, &l) || l >= n)
                return kt__error(KT_ERR_FORMAT, "%s: field 'mlp_only_layers'[%u]: expected a "
                                 "layer index below num_hidden_layers (%u)", p->file, i, n);
            cfg->layer_moe[l] = 0;
            i++;
        }
    }
    return KT_OK;
}

/* ---------------------------------------------------------- the parse --- */

static kt_status parse_dtype(const parser *p, kt_arch_info *a)
{
    const char *s = NULL;
    kt_status st = get_str(p, p->root, "torch_dtype", &s);
    if (st < 0)
        return st;
    if (!s && (st = get_str(p, p->root, "dtype", &s)) < 0)
        return st;
    if (!s || !strcmp(s, "bfloat16"))
        a->dtype = KT_TYPE_BF16;
    else if (!strcmp(s, "float16"))
        a->dtype = KT_TYPE_F16;
    else if (!strcmp(s, "float32"))
        a->dtype = KT_TYPE_F32;
    else
        return kt__error(KT_ERR_UNSUPPORTED, "%s: torch_dtype '%s' is not supported", p->file,
                         s);
    return KT_OK;
}

static kt_status parse_eos(const parser *p, kt__config *cfg)
{
    const cJSON *it = field(p->root, "eos_token_id");
    cfg->info.n_eos_token_ids = 0;
    if (!it)
        return KT_OK;
    int n = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : 1;
    if (n < 0 || (uint32_t)n > KT__MAX_EOS)
        return kt__error(KT_ERR_FORMAT, "%s: field 'eos_token_id': too many ids", p->file);
    if (n == 0)
        return KT_OK;
    cfg->eos_ids = kt__calloc((size_t)n, sizeof(int32_t));
    if (!cfg->eos_ids)
        return KT_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_IsArray(it) ? cJSON_GetArrayItem(it, i) : it;
        int64_t v;
        if (!kt__json_i64(e, &v) || v < 0 || v > INT32_MAX)
            return kt__error(KT_ERR_FORMAT, "%s: field 'eos_token_id': expected token ids",
                             p->file);
        cfg->eos_ids[i] = (int32_t)v;
    }
    cfg->info.n_eos_token_ids = (uint32_t)n;
    return KT_OK;
}

static kt_status parse_attention(const parser *p, kt__config *cfg)
{
    kt_arch_info *a = &cfg->info;
    const cJSON *r = p->root;
    kt_status st;
    const kt_arch arch = (kt_arch)a->arch;
    if ((st = get_u32(p, r, "num_key_value_heads", a->n_heads, KT__MAX_DIM, &a->n_kv_heads)) < 0)
        return st;
    if (arch == KT_ARCH_DEEPSEEK_V3 || arch == KT_ARCH_KIMI_K2) {
        a->attn_kind = KT_ATTN_MLA;
        if ((st = get_u32(p, r, "q_lora_rank", 0, KT__MAX_DIM, &a->q_lora_rank)) < 0 ||
            (st = get_u32(p, r, "kv_lora_rank", 512, KT__MAX_DIM, &a->kv_lora_rank)) < 0 ||
            (st = get_u32(p, r, "qk_nope_head_dim", 128, KT__MAX_DIM, &a->qk_nope_head_dim)) < 0 ||
            (st = get_u32(p, r, "qk_rope_head_dim", 64, KT__MAX_DIM, &a->qk_rope_head_dim)) < 0 ||
            (st = get_u32(p, r, "v_head_dim", 128, KT__MAX_DIM, &a->v_head_dim)) < 0)
            return st;
        if (a->kv_lora_rank == 0 || a->qk_rope_head_dim == 0 || a->v_head_dim == 0)
            return kt__error(KT_ERR_FORMAT, "%s: MLA dims kv_lora_rank, qk_rope_head_dim and "
                             "v_head_dim must be > 0", p->file);
        if (a->qk_rope_head_dim % 2)
            return kt__error(KT_ERR_FORMAT, "%s: field 'qk_rope_head_dim': %u is odd", p->file,
                             a->qk_rope_head_dim);
        a->head_dim = a->qk_nope_head_dim + a->qk_rope_head_dim;
        uint32_t qk_head_dim;
        if ((st = get_u32(p, r, "qk_head_dim", a->head_dim, KT__MAX_DIM, &qk_head_dim)) < 0)
            return st;
        if (qk_head_dim != a->head_dim)
            return kt__error(KT_ERR_FORMAT, "%s: field 'qk_head_dim' (%u) != qk_nope_head_dim + "
                             "qk_rope_head_dim (%u)", p->file, qk_head_dim, a->head_dim);
        if (a->n_kv_heads != a->n_heads) /* MLA: every head has its own k/v */
            return kt__error(KT_ERR_FORMAT, "%s: MLA needs num_key_value_heads (%u) == "
                             "num_attention_heads (%u)", p->file, a->n_kv_heads, a->n_heads);
        a->rotary_dim = a->qk_rope_head_dim;
        if ((st = get_bool(p, r, "attention_bias", false, &a->attention_bias)) < 0)
            return st;
        if (a->attention_bias)
            return kt__error(KT_ERR_UNSUPPORTED, "%s: attention_bias with MLA is not supported",
                             p->file);
        return KT_OK;
    }

    a->attn_kind = KT_ATTN_GQA;
    uint32_t def_head_dim = a->n_heads ? a->hidden_size / a->n_heads : 0;
    if ((st = get_u32(p, r, "head_dim", def_head_dim, KT__MAX_DIM, &a->head_dim)) < 0)
        return st;
    if (!field(r, "head_dim") && a->hidden_size % a->n_heads)
        return kt__error(KT_ERR_FORMAT, "%s: hidden_size %u is not divisible by "
                         "num_attention_heads %u (and head_dim is not given)", p->file,
                         a->hidden_size, a->n_heads);
    if (a->head_dim == 0)
        return kt__error(KT_ERR_FORMAT, "%s: field 'head_dim' must be > 0", p->file);
    a->v_head_dim = a->head_dim;

    /* biases */
    switch (arch) {
    case KT_ARCH_QWEN2_MOE:
        if ((st = get_bool(p, r, "qkv_bias", true, &a->attention_bias)) < 0)
            return st;
        break;
    case KT_ARCH_GPT_OSS:
        if ((st = get_bool(p, r, "attention_bias", true, &a->attention_bias)) < 0)
            return st;
        a->attention_out_bias = a->attention_bias;
        a->attention_sinks = 1;
        break;
    case KT_ARCH_MIXTRAL:
    case KT_ARCH_MINIMAX_M2:
        break;
    default:
        if ((st = get_bool(p, r, "attention_bias", false, &a->attention_bias)) < 0)
            return st;
    }

    /* QK norm */
    uint32_t use_qk_norm;
    switch (arch) {
    case KT_ARCH_QWEN3_MOE:
        a->qk_norm = KT_QK_NORM_PER_HEAD;
        break;
    case KT_ARCH_GLM4_MOE:
        if ((st = get_bool(p, r, "use_qk_norm", false, &use_qk_norm)) < 0)
            return st;
        a->qk_norm = use_qk_norm ? KT_QK_NORM_PER_HEAD : KT_QK_NORM_NONE;
        break;
    case KT_ARCH_MINIMAX_M2: {
        /* attn_type_list: 1 = softmax attention; 0 (lightning attention, MiniMax-01) */
        const cJSON *types = field(r, "attn_type_list");
        if (types) {
            const cJSON *t;
            uint32_t i = 0;
            if (!cJSON_IsArray(types))
                return kt__error(KT_ERR_FORMAT, "%s: field 'attn_type_list': expected a list",
                                 p->file);
            cJSON_ArrayForEach(t, types) {
                uint64_t v;
                if (!kt__json_u64(t, &v) || v != 1)
                    return kt__error(KT_ERR_UNSUPPORTED, "%s: attn_type_list[%u]: only softmax "
                                     "attention (1) is supported", p->file, i);
                i++;
            }
        }
        if ((st = get_bool(p, r, "use_qk_norm", true, &use_qk_norm)) < 0)
            return st;
        const char *kind = NULL;
        if ((st = get_str(p, r, "qk_norm_type", &kind)) < 0)
            return st;
        if (!use_qk_norm)
            a->qk_norm = KT_QK_NORM_NONE;
        else if (!kind || !strcmp(kind, "per_layer"))
            a->qk_norm = KT_QK_NORM_FULL;
        else if (!strcmp(kind, "per_head"))
            a->qk_norm = KT_QK_NORM_PER_HEAD;
        else
            return kt__error(KT_ERR_UNSUPPORTED, "%s: qk_norm_type '%s' is not supported",
                             p->file, kind);
        break;
    }
    default:
        a->qk_norm = KT_QK_NORM_NONE;
    }

    /* partial rotary: rotary_dim (MiniMax hub) wins over partial_rotary_factor */
    double prf = arch == KT_ARCH_GLM4_MOE ? 0.5 : 1.0;
    if ((st = get_f64(p, r, "partial_rotary_factor", prf, &prf)) < 0)
        return st;
    if (p->rope && field(p->rope, "partial_rotary_factor") &&
        (st = get_f64(p, p->rope, "partial_rotary_factor", prf, &prf)) < 0)
        return st;
    if (!(prf > 0.0 && prf <= 1.0))
        return kt__error(KT_ERR_FORMAT, "%s: field 'partial_rotary_factor': %g not in (0, 1]",
                         p->file, prf);
    uint32_t rotary_dim = (uint32_t)((double)a->head_dim * prf);
    if ((st = get_u32(p, r, "rotary_dim", rotary_dim, KT__MAX_DIM, &a->rotary_dim)) < 0)
        return st;
    if (a->rotary_dim == 0 || a->rotary_dim > a->head_dim || a->rotary_dim % 2)
        return kt__error(KT_ERR_FORMAT, "%s: rotary dim %u must be even and in (0, head_dim %u]",
                         p->file, a->rotary_dim, a->head_dim);
    a->partial_rotary_factor = (float)a->rotary_dim / (float)a->head_dim;

    /* sliding window */
    uint32_t use_sw = 1;
    if (arch == KT_ARCH_QWEN3_MOE || arch == KT_ARCH_QWEN2_MOE)
        if ((st = get_bool(p, r, "use_sliding_window", false, &use_sw)) < 0)
            return st;
    if ((st = get_u32(p, r, "sliding_window", 0, UINT32_MAX, &a->sliding_window)) < 0)
        return st;
    if (!use_sw)
        a->sliding_window = 0;
    bool have_types;
    if ((st = parse_layer_types(p, cfg, &have_types)) < 0)
        return st;
    if (!have_types && a->sliding_window) {
        uint32_t from = 0;
        if (arch == KT_ARCH_QWEN3_MOE || arch == KT_ARCH_QWEN2_MOE)
            if ((st = get_u32(p, r, "max_window_layers", 0, UINT32_MAX, &from)) < 0)
                return st;
        for (uint32_t l = 0; l < a->n_layers; l++) {
            bool sw = l >= from;
            if (arch == KT_ARCH_GPT_OSS) /* transformers default: even layers slide */
                sw = (l + 1) % 2 != 0;
            cfg->layer_window[l] = sw ? a->sliding_window : 0;
        }
    }
    return KT_OK;
}

static kt_status parse_moe(const parser *p, kt__config *cfg, uint32_t *moe_layer_freq)
{
    kt_arch_info *a = &cfg->info;
    const cJSON *r = p->root;
    const kt_arch arch = (kt_arch)a->arch;
    kt_status st;

    /* routed expert count: the key differs by family and by config style */
    static const char *const expert_keys[] = {"n_routed_experts", "num_local_experts",
                                              "num_experts"};
    const char *ekey = NULL;
    for (size_t i = 0; i < KT_ARRAY_LEN(expert_keys) && !ekey; i++)
        if (field(r, expert_keys[i]))
            ekey = expert_keys[i];
    if (!ekey)
        return kt__error(KT_ERR_FORMAT, "%s: missing the routed expert count (n_routed_experts, "
                         "num_local_experts or num_experts)", p->file);
    if ((st = get_u32(p, r, ekey, 0, KT__MAX_EXPERTS, &a->n_routed_experts)) < 0)
        return st;
    const char *kkey = field(r, "num_experts_per_tok") ? "num_experts_per_tok"
                                                        : "experts_per_token";
    if ((st = get_u32(p, r, kkey, 0, KT__MAX_EXPERTS, &a->n_experts_per_tok)) < 0)
        return st;
    if (a->n_routed_experts == 0)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s' must be > 0", p->file, ekey);
    if (a->n_experts_per_tok == 0)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s' is missing or 0", p->file, kkey);
    if (a->n_experts_per_tok > a->n_routed_experts)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s' (%u) is larger than %s (%u)", p->file,
                         kkey, a->n_experts_per_tok, ekey, a->n_routed_experts);

    /* sizes: Mixtral-style configs give the expert width as intermediate_size */
    bool moe_is_intermediate = arch == KT_ARCH_MIXTRAL || arch == KT_ARCH_MINIMAX_M2 ||
                               arch == KT_ARCH_GPT_OSS;
    if (moe_is_intermediate) {
        a->moe_intermediate_size = a->intermediate_size;
    } else {
        if ((st = get_u32(p, r, "moe_intermediate_size", 0, KT__MAX_DIM,
                          &a->moe_intermediate_size)) < 0)
            return st;
    }
    if (a->moe_intermediate_size == 0)
        return kt__error(KT_ERR_FORMAT, "%s: field '%s' is missing or 0", p->file,
                         moe_is_intermediate ? "intermediate_size" : "moe_intermediate_size");

    a->n_group = 1;
    a->topk_group = 1;
    a->routed_scaling_factor = 1.0f;
    a->score_func = KT_SCORE_SOFTMAX;
    a->ffn_act = KT_ACT_SWIGLU;
    a->decoder_sparse_step = 1;
    *moe_layer_freq = 1;

    switch (arch) {
    case KT_ARCH_DEEPSEEK_V3:
    case KT_ARCH_KIMI_K2:
    case KT_ARCH_GLM4_MOE: {
        const char *score = NULL, *topk_method = NULL;
        if ((st = get_u32(p, r, "n_shared_experts", 1, 1024, &a->n_shared_experts)) < 0 ||
            (st = get_u32(p, r, "first_k_dense_replace", arch == KT_ARCH_GLM4_MOE ? 1 : 3,
                          KT__MAX_LAYERS, &a->first_k_dense_replace)) < 0 ||
            (st = get_u32(p, r, "moe_layer_freq", 1, KT__MAX_LAYERS, moe_layer_freq)) < 0 ||
            (st = get_u32(p, r, "n_group", 1, KT__MAX_EXPERTS, &a->n_group)) < 0 ||
            (st = get_u32(p, r, "topk_group", 1, KT__MAX_EXPERTS, &a->topk_group)) < 0 ||
            (st = get_f32(p, r, "routed_scaling_factor", 1.0, &a->routed_scaling_factor)) < 0 ||
            (st = get_bool(p, r, "norm_topk_prob", true, &a->norm_topk_prob)) < 0 ||
            (st = get_str(p, r, "scoring_func", &score)) < 0 ||
            (st = get_str(p, r, "topk_method", &topk_method)) < 0)
            return st;
        if (*moe_layer_freq == 0)
            return kt__error(KT_ERR_FORMAT, "%s: field 'moe_layer_freq' must be > 0", p->file);
        if ((st = parse_score_func(p, score, a)) < 0)
            return st;
        if (!topk_method || !strcmp(topk_method, "noaux_tc"))
            a->score_correction_bias = 1;
        else if (strcmp(topk_method, "greedy") && strcmp(topk_method, "group_limited_greedy"))
            return kt__error(KT_ERR_UNSUPPORTED, "%s: topk_method '%s' is not supported",
                             p->file, topk_method);
        a->shared_intermediate_size = a->moe_intermediate_size * a->n_shared_experts;
        break;
    }
    case KT_ARCH_QWEN3_MOE:
    case KT_ARCH_QWEN2_MOE:
        if ((st = get_bool(p, r, "norm_topk_prob", false, &a->norm_topk_prob)) < 0 ||
            (st = get_u32(p, r, "decoder_sparse_step", 1, KT__MAX_LAYERS,
                          &a->decoder_sparse_step)) < 0)
            return st;
        if (a->decoder_sparse_step == 0)
            return kt__error(KT_ERR_FORMAT, "%s: field 'decoder_sparse_step' must be > 0",
                             p->file);
        if (arch == KT_ARCH_QWEN2_MOE) {
            if ((st = get_u32(p, r, "shared_expert_intermediate_size", 0, KT__MAX_DIM,
                              &a->shared_intermediate_size)) < 0)
                return st;
            a->n_shared_experts = a->shared_intermediate_size ? 1 : 0;
            a->shared_expert_gate = a->n_shared_experts;
        }
        break;
    case KT_ARCH_MIXTRAL:
        a->norm_topk_prob = 1;
        break;
    case KT_ARCH_MINIMAX_M2: {
        const char *score = NULL;
        uint32_t shared = 0;
        if ((st = get_str(p, r, "scoring_func", &score)) < 0 ||
            (st = get_bool(p, r, "use_routing_bias", true, &a->score_correction_bias)) < 0 ||
            (st = get_u32(p, r, "shared_intermediate_size", 0, KT__MAX_DIM, &shared)) < 0)
            return st;
        if ((st = parse_score_func(p, score, a)) < 0)
            return st;
        if (shared)
            return kt__error(KT_ERR_UNSUPPORTED, "%s: shared_intermediate_size %u: MiniMax "
                             "shared experts are not supported", p->file, shared);
        a->norm_topk_prob = 1;
        break;
    }
    case KT_ARCH_GPT_OSS:
        a->norm_topk_prob = 1; /* softmax over the top-k logits */
        a->router_bias = 1;
        a->expert_bias = 1;
        a->ffn_act = KT_ACT_SWIGLU_OAI;
        a->swiglu_alpha = 1.702f;
        if ((st = get_f32(p, r, "swiglu_limit", 7.0, &a->swiglu_limit)) < 0)
            return st;
        if (!(a->swiglu_limit > 0.0f))
            return kt__error(KT_ERR_FORMAT, "%s: field 'swiglu_limit' must be > 0", p->file);
        break;
    default:
        break;
    }

    if (a->n_group == 0 || a->n_routed_experts % a->n_group)
        return kt__error(KT_ERR_FORMAT, "%s: field 'n_group' (%u) does not divide the %u routed "
                         "experts", p->file, a->n_group, a->n_routed_experts);
    if (a->topk_group == 0 || a->topk_group > a->n_group)
        return kt__error(KT_ERR_FORMAT, "%s: field 'topk_group' (%u) must be in 1..n_group (%u)",
                         p->file, a->topk_group, a->n_group);
    if ((uint64_t)a->topk_group * (a->n_routed_experts / a->n_group) < a->n_experts_per_tok)
        return kt__error(KT_ERR_FORMAT, "%s: num_experts_per_tok (%u) is more than the experts "
                         "of topk_group (%u) groups of %u", p->file, a->n_experts_per_tok,
                         a->topk_group, a->n_routed_experts / a->n_group);
    if (!(a->routed_scaling_factor > 0.0f))
        return kt__error(KT_ERR_FORMAT, "%s: field 'routed_scaling_factor' must be > 0",
                         p->file);
    return KT_OK;
}

static kt_status parse_root(parser *p, kt__config *cfg, const kt_runtime *rt)
{
    kt_arch_info *a = &cfg->info;
    kt_status st;
    if (!cJSON_IsObject(p->top))
        return kt__error(KT_ERR_FORMAT, "%s: expected a JSON object", p->file);
    p->root = p->top;
    /* multimodal wrappers (e.g. Kimi-K2.5) nest the language model's config */
    const cJSON *text = field(p->top, "text_config");
    if (text && cJSON_IsObject(text) && !field(p->top, "num_hidden_layers"))
        p->root = text;

    const char *model_type = NULL;
    if ((st = get_str(p, p->root, "model_type", &model_type)) < 0)
        return st;
    if (!model_type)
        return kt__error(KT_ERR_FORMAT, "%s: missing field 'model_type'", p->file);
    for (size_t i = 0; i < KT_ARRAY_LEN(families); i++)
        if (!strcmp(families[i].model_type, model_type))
            a->arch = families[i].arch;
    if (a->arch == KT_ARCH_UNKNOWN)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported (supported: "
                         "deepseek_v3, kimi_k2, qwen3_moe, qwen2_moe, mixtral, minimax_m2, "
                         "gpt_oss, glm4_moe)", p->file, model_type);
    if (!(cfg->model_type = kt__strdup(model_type)))
        return KT_ERR_NOMEM;
    a->model_type = cfg->model_type;

    p->rope = field(p->root, "rope_parameters");
    if (!p->rope)
        p->rope = field(p->root, "rope_scaling");
    if (p->rope && !cJSON_IsObject(p->rope))
        return kt__error(KT_ERR_FORMAT, "%s: field '%s': expected an object", p->file,
                         field(p->root, "rope_parameters") ? "rope_parameters" : "rope_scaling");

    static const char *const required[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                           "num_attention_heads"};
    for (size_t i = 0; i < KT_ARRAY_LEN(required); i++)
        if (!field(p->root, required[i]))
            return kt__error(KT_ERR_FORMAT, "%s: missing field '%s'", p->file, required[i]);
    const cJSON *r = p->root;
    if ((st = get_u32(p, r, "vocab_size", 0, KT__MAX_VOCAB, &a->vocab_size)) < 0 ||
        (st = get_u32(p, r, "hidden_size", 0, KT__MAX_DIM, &a->hidden_size)) < 0 ||
        (st = get_u32(p, r, "num_hidden_layers", 0, KT__MAX_LAYERS, &a->n_layers)) < 0 ||
        (st = get_u32(p, r, "num_attention_heads", 0, KT__MAX_DIM, &a->n_heads)) < 0 ||
        (st = get_u32(p, r, "intermediate_size", 0, KT__MAX_DIM, &a->intermediate_size)) < 0 ||
        (st = get_u32(p, r, "max_position_embeddings", 4096, UINT32_MAX,
                      &a->max_position_embeddings)) < 0 ||
        (st = get_f32(p, r, "rms_norm_eps", 1e-6, &a->rms_norm_eps)) < 0 ||
        (st = get_bool(p, r, "tie_word_embeddings", false, &a->tie_word_embeddings)) < 0 ||
        (st = get_u32(p, r, "num_nextn_predict_layers", 0, KT__MAX_LAYERS,
                      &a->n_nextn_layers)) < 0 ||
        (st = get_token(p, "bos_token_id", &a->bos_token_id)) < 0 ||
        (st = get_token(p, "pad_token_id", &a->pad_token_id)) < 0 ||
        (st = parse_eos(p, cfg)) < 0 || (st = parse_dtype(p, a)) < 0)
        return st;
    static const struct {
        const char *key;
        size_t off;
    } positive[] = {
        {"vocab_size", offsetof(kt_arch_info, vocab_size)},
        {"hidden_size", offsetof(kt_arch_info, hidden_size)},
        {"num_hidden_layers", offsetof(kt_arch_info, n_layers)},
        {"num_attention_heads", offsetof(kt_arch_info, n_heads)},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(positive); i++) {
        uint32_t v;
        memcpy(&v, (const char *)a + positive[i].off, sizeof v);
        if (v == 0)
            return kt__error(KT_ERR_FORMAT, "%s: field '%s' must be > 0", p->file,
                             positive[i].key);
    }
    if (!(a->rms_norm_eps > 0.0f))
        return kt__error(KT_ERR_FORMAT, "%s: field 'rms_norm_eps' must be > 0", p->file);
    if (a->max_position_embeddings == 0)
        return kt__error(KT_ERR_FORMAT, "%s: field 'max_position_embeddings' must be > 0",
                         p->file);
    if ((st = kt__config_alloc_layers(cfg)) < 0)
        return st;

    if ((st = parse_attention(p, cfg)) < 0)
        return st;
    if (a->n_kv_heads == 0 || a->n_heads % a->n_kv_heads)
        return kt__error(KT_ERR_FORMAT, "%s: num_attention_heads (%u) is not a multiple of "
                         "num_key_value_heads (%u)", p->file, a->n_heads, a->n_kv_heads);

    double def_theta = 10000.0;
    if (a->arch == KT_ARCH_MIXTRAL)
        def_theta = 1e6;
    else if (a->arch == KT_ARCH_GPT_OSS)
        def_theta = 150000.0;
    else if (a->arch == KT_ARCH_MINIMAX_M2)
        def_theta = 5e6;
    if ((st = parse_rope(p, cfg, def_theta)) < 0)
        return st;
    uint32_t interleave_default = a->attn_kind == KT_ATTN_MLA ? 1u : 0u;
    if ((st = get_bool(p, r, "rope_interleave", interleave_default != 0,
                       &a->rope_interleave)) < 0)
        return st;

    uint32_t moe_layer_freq = 1;
    if ((st = parse_moe(p, cfg, &moe_layer_freq)) < 0)
        return st;
    if ((st = resolve_moe_layers(p, cfg, moe_layer_freq)) < 0)
        return st;
    if ((st = parse_quant(p, cfg)) < 0)
        return st;
    return kt__config_finish(cfg, p->file, rt);
}

static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

kt_status kt__config_finish(kt__config *cfg, const char *file, const kt_runtime *rt)
{
    kt_arch_info *a = &cfg->info;
    a->struct_size = (uint32_t)sizeof(kt_arch_info);
    a->model_type = cfg->model_type;
    a->eos_token_ids = cfg->eos_ids;
    a->quant_ignore = (const char *const *)cfg->quant_ignore;

    /* dense layers need a dense width */
    a->n_moe_layers = 0;
    for (uint32_t l = 0; l < a->n_layers; l++)
        a->n_moe_layers += cfg->layer_moe[l];
    if (a->n_moe_layers < a->n_layers && a->intermediate_size == 0)
        return kt__error(KT_ERR_FORMAT, "%s: %u dense layers but intermediate_size is 0", file,
                         a->n_layers - a->n_moe_layers);
    if (a->n_moe_layers == 0)
        kt__log(rt, KT_LOG_WARN, "%s: no layer has routed experts (first_k_dense_replace %u, "
                "%u layers)", file, a->first_k_dense_replace, a->n_layers);

    /* rotated share of a q/k head (MLA: the rope part of nope + rope) */
    if (a->head_dim && a->rotary_dim)
        a->partial_rotary_factor = (float)a->rotary_dim / (float)a->head_dim;

    /* softmax scale; DeepSeek YaRN folds mscale(factor, mscale_all_dim)^2 in */
    uint32_t qk_dim = a->attn_kind == KT_ATTN_MLA ? a->qk_nope_head_dim + a->qk_rope_head_dim
                                                  : a->head_dim;
    double scale = 1.0 / sqrt((double)qk_dim);
    if (a->attn_kind == KT_ATTN_MLA && a->rope_type == KT_ROPE_YARN &&
        a->yarn_mscale_all_dim != 0.0f) {
        double m = yarn_mscale(a->rope_factor, a->yarn_mscale_all_dim);
        scale *= m * m;
    }
    a->attn_scale = (float)scale;
    if (a->rope_type == KT_ROPE_YARN && a->yarn_attention_factor == 0.0f) {
        double f;
        if (a->yarn_mscale != 0.0f && a->yarn_mscale_all_dim != 0.0f)
            f = yarn_mscale(a->rope_factor, a->yarn_mscale) /
                yarn_mscale(a->rope_factor, a->yarn_mscale_all_dim);
        else
            f = yarn_mscale(a->rope_factor, 1.0);
        a->yarn_attention_factor = (float)f;
    }
    if (a->rope_type != KT_ROPE_YARN)
        a->yarn_attention_factor = a->rope_type == KT_ROPE_NONE ? 0.0f : 1.0f;

    /* ids outside the vocabulary: configs in the wild have them (tokenizer
     * specials past vocab_size); warn, the tokenizer decides */
    if (a->bos_token_id >= 0 && (uint32_t)a->bos_token_id >= a->vocab_size)
        kt__log(rt, KT_LOG_WARN, "%s: bos_token_id %d is outside the vocabulary (%u)", file,
                a->bos_token_id, a->vocab_size);
    for (uint32_t i = 0; i < a->n_eos_token_ids; i++)
        if ((uint32_t)a->eos_token_ids[i] >= a->vocab_size)
            kt__log(rt, KT_LOG_WARN, "%s: eos_token_id %d is outside the vocabulary (%u)", file,
                    a->eos_token_ids[i], a->vocab_size);
    return KT_OK;
}

kt_status kt__config_from_json(kt__config *cfg, const cJSON *root, const char *file,
                               const kt_runtime *rt)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->info.struct_size = (uint32_t)sizeof(kt_arch_info);
    parser p = {root, root, NULL, file};
    kt_status st = parse_root(&p, cfg, rt);
    if (st < 0)
        kt__config_free(cfg);
    return st;
}

kt_status kt__config_parse(kt__config *cfg, const char *json, size_t len, const char *file,
                           const kt_runtime *rt)
{
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = NULL;
    kt_status st = kt__json_parse(&root, json, len, file);
    if (st < 0)
        return st;
    st = kt__config_from_json(cfg, root, file, rt);
    cJSON_Delete(root);
    return st;
}
