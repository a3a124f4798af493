/* lib/model: config.json of every family (both styles), quantization_config,
 * the tensor index and typed views, the memory estimate, bad input. The
 * expectations are read from the fixtures' own config.json and safetensors
 * headers (written by transformers), not from libkt. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "io/convert_types.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "kt/kt.h"
#include "model/model_internal.h"
#include "test_files.h"

/* ---- helpers ------------------------------------------------------------------------- */

static const char *source_root(void)
{
    const char *d = getenv("KT_SOURCE_ROOT");
    return d ? d : ".";
}

static int make_tmp_root(void **state)
{
    (void)state;
    return tmp_root_create("kt_test_model");
}

static cJSON *load_json(const char *path)
{
    char *s = read_whole_file(path, NULL);
    assert_non_null(s);
    cJSON *j = cJSON_Parse(s);
    free(s);
    assert_non_null(j);
    return j;
}

static void fixture_path(char *buf, size_t n, const char *variant)
{
    snprintf(buf, n, "%s/fixtures/%s", test_data(), variant);
}

static kt_model *open_ok(const char *path)
{
    kt_model *m = NULL;
    kt_status st = kt_model_open(&m, NULL, path, NULL);
    if (st != KT_OK)
        fail_msg("open %s: %s: %s", path, kt_status_str(st), kt_last_error());
    assert_non_null(m);
    return m;
}

/* The fixture variant's model (its directory left in dir). */
static kt_model *open_fixture(char *dir, size_t n, const char *variant)
{
    fixture_path(dir, n, variant);
    return open_ok(dir);
}

static kt_arch_info arch_of(const kt_model *m)
{
    kt_arch_info a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    assert_int_equal(kt_model_arch(m, &a), KT_OK);
    return a;
}

/* Two numbers of a view at once (rows and cols, shape[0] and shape[1], ...); a macro, so that
 * a failure names the caller's line. */
#define assert_pair(a, b, want_a, want_b)                                                       \
    do {                                                                                       \
        assert_int_equal(a, want_a);                                                           \
        assert_int_equal(b, want_b);                                                           \
    } while (0)

static kt_tensor_view view_of(const kt_model *m, uint32_t layer, kt_role role, uint32_t e)
{
    kt_tensor_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    kt_status st = kt_model_tensor(m, layer, role, e, &v);
    if (st != KT_OK)
        fail_msg("tensor %s layer %u expert %u: %s", kt_role_name(role), layer, e,
                 kt_last_error());
    return v;
}

/* JSON number of key in obj (or in obj[sub] when sub != NULL); NAN if absent. */
static double num(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

static int boolean(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsTrue(it) ? 1 : 0;
}

static const char *str(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

#define ASSERT_FIELD(actual, cfg, key)                                                         \
    do {                                                                                       \
        double want_ = num(cfg, key);                                                          \
        if (isnan(want_))                                                                      \
            fail_msg("config has no %s", key);                                                 \
        if (fabs((double)(actual) - want_) > 1e-6 * fabs(want_))                               \
            fail_msg("%s: libkt %g, config.json %g", key, (double)(actual), want_);            \
    } while (0)

/* ---- every fixture: description == config.json, field by field ------------------------ */

static const char *const variants[] = {
    "deepseek_v3_tiny/bf16", "deepseek_v3_tiny/fp8", "deepseek_v3_tiny/int4",
    "qwen3_moe_tiny",        "mixtral_tiny",         "minimax_m2_tiny/bf16",
    "minimax_m2_tiny/fp8",   "gpt_oss_tiny",
};

static void check_common(const kt_arch_info *a, const cJSON *c)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    assert_string_equal(a->model_type, str(c, "model_type"));
    assert_string_equal(kt_arch_name((kt_arch)a->arch), str(c, "model_type"));
    ASSERT_FIELD(a->vocab_size, c, "vocab_size");
    ASSERT_FIELD(a->hidden_size, c, "hidden_size");
    ASSERT_FIELD(a->intermediate_size, c, "intermediate_size");
    ASSERT_FIELD(a->n_layers, c, "num_hidden_layers");
    ASSERT_FIELD(a->n_heads, c, "num_attention_heads");
    ASSERT_FIELD(a->n_kv_heads, c, "num_key_value_heads");
    ASSERT_FIELD(a->max_position_embeddings, c, "max_position_embeddings");
    ASSERT_FIELD(a->rms_norm_eps, c, "rms_norm_eps");
    ASSERT_FIELD(a->n_experts_per_tok, c, "num_experts_per_tok");
    ASSERT_FIELD(a->rope_theta, rp, "rope_theta");
    assert_int_equal(a->tie_word_embeddings, boolean(c, "tie_word_embeddings"));
    assert_int_equal(a->dtype, KT_TYPE_BF16);
    double bos = num(c, "bos_token_id"), eos = num(c, "eos_token_id");
    assert_int_equal(a->bos_token_id, isnan(bos) ? -1 : (int)bos);
    if (isnan(eos)) {
        assert_int_equal(a->n_eos_token_ids, 0);
    } else {
        assert_int_equal(a->n_eos_token_ids, 1);
        assert_int_equal(a->eos_token_ids[0], (int)eos);
    }
    double experts = num(c, "n_routed_experts");
    if (isnan(experts))
        experts = num(c, "num_local_experts");
    assert_int_equal(a->n_routed_experts, (uint32_t)experts);
    /* fields most families share, where the config has them */
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(c, "attention_bias");
    if (cJSON_IsBool(ab))
        assert_int_equal(a->attention_bias, boolean(c, "attention_bias"));
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c, "sliding_window");
    if (sw && cJSON_IsNull(sw))
        assert_int_equal(a->sliding_window, 0);
    if (!isnan(num(c, "partial_rotary_factor")))
        ASSERT_FIELD(a->partial_rotary_factor, c, "partial_rotary_factor");
    if (!isnan(num(c, "routed_scaling_factor")))
        ASSERT_FIELD(a->routed_scaling_factor, c, "routed_scaling_factor");
    else
        assert_true(a->routed_scaling_factor == 1.0f);
    if (!isnan(num(c, "n_shared_experts")))
        ASSERT_FIELD(a->n_shared_experts, c, "n_shared_experts");
    else
        assert_int_equal(a->n_shared_experts, 0);
    if (!isnan(num(c, "head_dim")) && a->attn_kind == KT_ATTN_GQA)
        ASSERT_FIELD(a->head_dim, c, "head_dim");
    assert_int_equal(a->pad_token_id, isnan(num(c, "pad_token_id")) ? -1
                                                                    : (int)num(c, "pad_token_id"));
    const char *rt = str(rp, "rope_type");
    if (!strcmp(rt, "yarn")) {
        assert_int_equal(a->rope_type, KT_ROPE_YARN);
        ASSERT_FIELD(a->rope_factor, rp, "factor");
        ASSERT_FIELD(a->rope_original_max_pos, rp, "original_max_position_embeddings");
        ASSERT_FIELD(a->yarn_beta_fast, rp, "beta_fast");
        ASSERT_FIELD(a->yarn_beta_slow, rp, "beta_slow");
    } else {
        assert_string_equal(rt, "default");
        assert_int_equal(a->rope_type, KT_ROPE_DEFAULT);
    }
}

static void check_family(const kt_model *m, const kt_arch_info *a, const cJSON *c)
{
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    switch ((kt_arch)a->arch) {
    case KT_ARCH_DEEPSEEK_V3:
        assert_int_equal(a->attn_kind, KT_ATTN_MLA);
        ASSERT_FIELD(a->q_lora_rank, c, "q_lora_rank");
        ASSERT_FIELD(a->kv_lora_rank, c, "kv_lora_rank");
        ASSERT_FIELD(a->qk_nope_head_dim, c, "qk_nope_head_dim");
        ASSERT_FIELD(a->qk_rope_head_dim, c, "qk_rope_head_dim");
        ASSERT_FIELD(a->v_head_dim, c, "v_head_dim");
        ASSERT_FIELD(a->head_dim, c, "qk_head_dim");
        ASSERT_FIELD(a->rotary_dim, c, "qk_rope_head_dim");
        ASSERT_FIELD(a->moe_intermediate_size, c, "moe_intermediate_size");
        ASSERT_FIELD(a->n_shared_experts, c, "n_shared_experts");
        assert_int_equal(a->shared_intermediate_size,
                         a->moe_intermediate_size * a->n_shared_experts);
        ASSERT_FIELD(a->n_group, c, "n_group");
        ASSERT_FIELD(a->topk_group, c, "topk_group");
        ASSERT_FIELD(a->routed_scaling_factor, c, "routed_scaling_factor");
        ASSERT_FIELD(a->first_k_dense_replace, c, "first_k_dense_replace");
        ASSERT_FIELD(a->n_nextn_layers, c, "num_nextn_predict_layers");
        ASSERT_FIELD(a->yarn_mscale, rp, "mscale");
        ASSERT_FIELD(a->yarn_mscale_all_dim, rp, "mscale_all_dim");
        assert_int_equal(a->rope_interleave, boolean(c, "rope_interleave"));
        assert_int_equal(a->norm_topk_prob, boolean(c, "norm_topk_prob"));
        assert_int_equal(a->score_func, KT_SCORE_SIGMOID);
        assert_int_equal(a->score_correction_bias, 1);
        {
            /* softmax scale = qk_head_dim^-1/2 * (0.1 ln(factor) mscale_all_dim + 1)^2 */
            double ms = 0.1 * num(rp, "mscale_all_dim") * log(num(rp, "factor")) + 1.0;
            double want = ms * ms / sqrt(num(c, "qk_head_dim"));
            assert_true(fabs(a->attn_scale - want) < 1e-6);
        }
        for (uint32_t l = 0; l < a->n_layers; l++)
            assert_int_equal(kt_model_layer_is_moe(m, l), l >= a->first_k_dense_replace);
        break;
    case KT_ARCH_QWEN3_MOE:
        assert_int_equal(a->attn_kind, KT_ATTN_GQA);
        ASSERT_FIELD(a->head_dim, c, "head_dim");
        ASSERT_FIELD(a->moe_intermediate_size, c, "moe_intermediate_size");
        ASSERT_FIELD(a->decoder_sparse_step, c, "decoder_sparse_step");
        assert_int_equal(a->norm_topk_prob, boolean(c, "norm_topk_prob"));
        assert_int_equal(a->qk_norm, KT_QK_NORM_PER_HEAD);
        assert_int_equal(a->score_func, KT_SCORE_SOFTMAX);
        assert_int_equal(a->rope_interleave, 0);
        assert_int_equal(a->rotary_dim, a->head_dim);
        assert_int_equal(a->n_moe_layers, a->n_layers);
        break;
    case KT_ARCH_MIXTRAL:
        assert_int_equal(a->head_dim, a->hidden_size / a->n_heads); /* head_dim: null */
        ASSERT_FIELD(a->moe_intermediate_size, c, "intermediate_size");
        assert_int_equal(a->norm_topk_prob, 1);
        assert_int_equal(a->qk_norm, KT_QK_NORM_NONE);
        assert_int_equal(a->sliding_window, 0);
        break;
    case KT_ARCH_MINIMAX_M2:
        ASSERT_FIELD(a->head_dim, c, "head_dim");
        ASSERT_FIELD(a->rotary_dim, c, "rotary_dim");
        ASSERT_FIELD(a->partial_rotary_factor, c, "partial_rotary_factor");
        ASSERT_FIELD(a->moe_intermediate_size, c, "intermediate_size");
        assert_int_equal(a->qk_norm, KT_QK_NORM_FULL); /* qk_norm_type per_layer */
        assert_int_equal(a->score_func, KT_SCORE_SIGMOID);
        assert_int_equal(a->score_correction_bias, boolean(c, "use_routing_bias"));
        assert_int_equal(a->n_shared_experts, 0);
        break;
    case KT_ARCH_GPT_OSS: {
        ASSERT_FIELD(a->head_dim, c, "head_dim");
        ASSERT_FIELD(a->sliding_window, c, "sliding_window");
        assert_int_equal(a->attention_bias, boolean(c, "attention_bias"));
        assert_int_equal(a->attention_out_bias, 1);
        assert_int_equal(a->attention_sinks, 1);
        assert_int_equal(a->router_bias, 1);
        assert_int_equal(a->expert_bias, 1);
        assert_int_equal(a->ffn_act, KT_ACT_SWIGLU_OAI);
        assert_true(fabsf(a->swiglu_limit - 7.0f) < 1e-6f);
        assert_true(fabsf(a->swiglu_alpha - 1.702f) < 1e-6f);
        assert_int_equal(a->yarn_truncate, boolean(rp, "truncate"));
        assert_true(fabs(a->yarn_attention_factor - (0.1 * log(num(rp, "factor")) + 1)) < 1e-6);
        const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
        for (uint32_t l = 0; l < a->n_layers; l++) {
            const char *t = cJSON_GetArrayItem(lt, (int)l)->valuestring;
            uint32_t want = strcmp(t, "sliding_attention") ? 0 : a->sliding_window;
            assert_int_equal(kt_model_layer_sliding_window(m, l), want);
        }
        break;
    }
    default:
        fail_msg("unexpected arch %d", a->arch);
    }
}

static void check_quant(const kt_arch_info *a, const cJSON *c)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(c, "quantization_config");
    if (!q) {
        assert_int_equal(a->quant_method, KT_QUANT_NONE);
        return;
    }
    if (!strcmp(str(q, "quant_method"), "fp8")) {
        const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
        assert_int_equal(a->quant_method, KT_QUANT_FP8_BLOCK);
        assert_int_equal(a->quant_block_rows, cJSON_GetArrayItem(bs, 0)->valueint);
        assert_int_equal(a->quant_block_cols, cJSON_GetArrayItem(bs, 1)->valueint);
        return;
    }
    assert_string_equal(str(q, "quant_method"), "compressed-tensors");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(q, "config_groups"),
                                         "group_0"),
        "weights");
    assert_int_equal(a->quant_method, KT_QUANT_INT4_PACKED);
    ASSERT_FIELD(a->quant_bits, w, "num_bits");
    ASSERT_FIELD(a->quant_group_size, w, "group_size");
    assert_int_equal(a->quant_symmetric, boolean(w, "symmetric"));
    const cJSON *ign = cJSON_GetObjectItemCaseSensitive(q, "ignore");
    assert_int_equal(a->n_quant_ignore, cJSON_GetArraySize(ign));
    for (uint32_t i = 0; i < a->n_quant_ignore; i++)
        assert_string_equal(a->quant_ignore[i], cJSON_GetArrayItem(ign, (int)i)->valuestring);
}

/* Every view points at the file tensor of the same name, with its dtype and shape. */
static void check_views_against_files(const kt_model *m, const char *dir)
{
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_dir(&set, dir), KT_OK);
    size_t n = kt_model_n_tensors(m);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        kt_tensor_view v;
        v.struct_size = sizeof v;
        assert_int_equal(kt_model_tensor_at(m, i, &v), KT_OK);
        const kt_st_tensor *t = kt__st_find(set, v.name);
        if (!t)
            fail_msg("view %zu names '%s', not in the files", i, v.name);
        assert_int_equal(v.type, t->type);
        if (v.flags & KT_TENSOR_F_STACKED) {
            assert_int_equal(v.n_dims, t->n_dims - 1);
            assert_int_equal(v.expert_stride * t->shape[0], t->nbytes);
            /* data is the expert's slice of the file tensor */
            assert_int_equal(v.nbytes, v.expert_stride);
            assert_memory_equal(v.data, (const uint8_t *)t->data + v.expert_stride * v.expert,
                                (size_t)KT_MIN(v.nbytes, 4096u));
        } else {
            assert_int_equal(v.n_dims, t->n_dims);
            for (uint32_t d = 0; d < t->n_dims; d++)
                assert_int_equal(v.shape[d], t->shape[d]);
            assert_int_equal(v.nbytes, t->nbytes);
            /* same bytes: compare contents, not the mapping address */
            assert_memory_equal(v.data, t->data, (size_t)KT_MIN(t->nbytes, 4096u));
        }
    }
    kt__st_close(set);
}

/* The model in dir against its config.json: the description, family and quantization it
 * implies, and every view against the files. Returns the model (the caller frees it) and
 * its description in *a. */
static kt_model *open_checked(const char *dir, kt_arch_info *a)
{
    char cfg_path[1200];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    cJSON *c = load_json(cfg_path);
    kt_model *m = open_ok(dir);
    *a = arch_of(m);
    check_common(a, c);
    check_family(m, a, c);
    check_quant(a, c);
    check_views_against_files(m, dir);
    cJSON_Delete(c);
    return m;
}

static void test_fixtures_match_configs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        char dir[512];
        fixture_path(dir, sizeof dir, variants[i]);
        kt_arch_info a;
        kt_model *m = open_checked(dir, &a);
        assert_int_equal(kt_model_format(m), KT_FORMAT_SAFETENSORS);
        assert_int_equal(kt_model_n_ignored_tensors(m), 0);
        kt_model_free(m);
    }
}

static void test_demo_models_open(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/kimi-k2-demo", source_root());
    kt_arch_info a;
    kt_model *m = open_checked(dir, &a);
    assert_int_equal(a.n_moe_layers, 3);
    kt_model_free(m);
}

/* ---- tensor views: shapes, storage, scales ------------------------------------------ */

static void test_views_deepseek(void **state)
{
    (void)state;
    char dir[512];
    kt_model *m = open_fixture(dir, sizeof dir, "deepseek_v3_tiny/bf16");
    kt_tensor_view v = view_of(m, 1, KT_ROLE_EXPERT_UP, 3);
    assert_string_equal(v.name, "model.layers.1.mlp.experts.3.up_proj.weight");
    assert_int_equal(v.storage, KT_STORAGE_PLAIN);
    assert_int_equal(v.type, KT_TYPE_BF16);
    assert_pair(v.rows, v.cols, 192, 128);
    assert_int_equal(v.layer, 1);
    assert_int_equal(v.expert, 3);
    v = view_of(m, 0, KT_ROLE_GATE_PROJ, 0); /* layer 0 is dense */
    assert_string_equal(v.name, "model.layers.0.mlp.gate_proj.weight");
    assert_int_equal(v.expert, UINT32_MAX);
    assert_int_equal(kt_model_has_tensor(m, 0, KT_ROLE_EXPERT_UP, 0), 0);
    kt_tensor_view w;
    w.struct_size = sizeof w;
    assert_int_equal(kt_model_tensor(m, 0, KT_ROLE_EXPERT_UP, 0, &w), KT_ERR_NOT_FOUND);
    assert_int_equal(kt_model_tensor(m, 1, KT_ROLE_EXPERT_UP, 8, &w), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_model_tensor(m, 3, KT_ROLE_ATTN_NORM, 0, &w), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_model_tensor(m, 1, (kt_role)999, 0, &w), KT_ERR_INVALID_ARG);
    w.struct_size = 8;
    assert_int_equal(kt_model_tensor(m, 1, KT_ROLE_ROUTER, 0, &w), KT_ERR_INVALID_ARG);
    v = view_of(m, 2, KT_ROLE_SCORE_CORRECTION, 0);
    assert_string_equal(v.name, "model.layers.2.mlp.gate.e_score_correction_bias");
    assert_int_equal(v.type, KT_TYPE_F32);
    v = view_of(m, 2, KT_ROLE_KV_A_PROJ, 0);
    assert_int_equal(v.rows, 48);
    v = view_of(m, 2, KT_ROLE_SHARED_DOWN, 0);
    assert_pair(v.rows, v.cols, 128, 192);
    v = view_of(m, 0, KT_ROLE_LM_HEAD, 0);
    assert_string_equal(v.name, "lm_head.weight");
    assert_int_equal(v.layer, UINT32_MAX);
    assert_int_equal(kt_model_has_tensor(m, 0, KT_ROLE_Q_PROJ, 0), 0); /* q_lora path */
    kt_model_free(m);

    m = open_fixture(dir, sizeof dir, "deepseek_v3_tiny/fp8");
    v = view_of(m, 1, KT_ROLE_EXPERT_DOWN, 7);
    assert_int_equal(v.storage, KT_STORAGE_FP8_BLOCK);
    assert_int_equal(v.type, KT_TYPE_F8_E4M3);
    assert_pair(v.rows, v.cols, 128, 192);
    assert_int_equal(v.scale_type, KT_TYPE_F32);
    assert_pair(v.scale_shape[0], v.scale_shape[1], 1, 2);
    assert_pair(v.block_rows, v.block_cols, 128, 128);
    assert_non_null(v.scale_data);
    v = view_of(m, 1, KT_ROLE_KV_A_PROJ, 0); /* kept BF16 in this checkpoint */
    assert_int_equal(v.storage, KT_STORAGE_PLAIN);
    assert_null(v.scale_data);
    kt_model_free(m);

    m = open_fixture(dir, sizeof dir, "deepseek_v3_tiny/int4");
    v = view_of(m, 2, KT_ROLE_EXPERT_DOWN, 5);
    assert_string_equal(v.name, "model.layers.2.mlp.experts.5.down_proj.weight_packed");
    assert_int_equal(v.storage, KT_STORAGE_INT4_PACKED);
    assert_int_equal(v.type, KT_TYPE_I32);
    assert_pair(v.shape[0], v.shape[1], 128, 24);
    assert_pair(v.rows, v.cols, 128, 192);
    assert_int_equal(v.scale_type, KT_TYPE_BF16);
    assert_pair(v.scale_shape[0], v.scale_shape[1], 128, 6);
    assert_int_equal(v.block_cols, 32);
    v = view_of(m, 2, KT_ROLE_SHARED_UP, 0); /* ignored by re:.*shared_experts.* */
    assert_int_equal(v.storage, KT_STORAGE_PLAIN);
    assert_true(kt__config_quant_ignored(&m->cfg, "model.layers.2.mlp.shared_experts.up_proj"));
    assert_true(kt__config_quant_ignored(&m->cfg, "lm_head"));
    assert_true(kt__config_quant_ignored(&m->cfg, "model.layers.0.mlp.gate_proj"));
    assert_false(kt__config_quant_ignored(&m->cfg, "model.layers.1.mlp.experts.0.up_proj"));
    assert_false(kt__config_quant_ignored(&m->cfg, "xlm_head"));
    kt_model_free(m);
}

static void test_views_other_families(void **state)
{
    (void)state;
    char dir[512];
    kt_model *m = open_fixture(dir, sizeof dir, "gpt_oss_tiny");
    kt_tensor_view v = view_of(m, 1, KT_ROLE_EXPERT_GATE_UP, 5);
    assert_string_equal(v.name, "model.layers.1.mlp.experts.gate_up_proj");
    assert_true(v.flags & KT_TENSOR_F_STACKED);
    assert_int_equal(v.layout, KT_LAYOUT_IN_OUT);
    assert_int_equal(v.n_dims, 2);
    assert_pair(v.shape[0], v.shape[1], 64, 192);
    assert_pair(v.rows, v.cols, 192, 64);
    assert_int_equal(v.nbytes, 64 * 192 * 2);
    assert_int_equal(v.expert_stride, 64 * 192 * 2);
    kt_tensor_view v0 = view_of(m, 1, KT_ROLE_EXPERT_GATE_UP, 0);
    assert_ptr_equal((const uint8_t *)v0.data + 5 * v0.expert_stride, v.data);
    v = view_of(m, 0, KT_ROLE_EXPERT_DOWN, 2);
    assert_pair(v.shape[0], v.shape[1], 96, 64);
    assert_pair(v.rows, v.cols, 64, 96);
    v = view_of(m, 0, KT_ROLE_EXPERT_GATE_UP_BIAS, 7);
    assert_int_equal(v.shape[0], 192);
    v = view_of(m, 0, KT_ROLE_SINKS, 0);
    assert_string_equal(v.name, "model.layers.0.self_attn.sinks");
    assert_int_equal(v.shape[0], 4);
    v = view_of(m, 0, KT_ROLE_ROUTER_BIAS, 0);
    assert_string_equal(v.name, "model.layers.0.mlp.router.bias");
    v = view_of(m, 0, KT_ROLE_O_BIAS, 0);
    assert_int_equal(v.shape[0], 64);
    kt_layer_info li = KT_LAYER_INFO_INIT;
    assert_int_equal(kt_model_layer(m, 0, &li), KT_OK);
    assert_int_equal(li.is_moe, 1);
    assert_int_equal(li.n_experts, 8);
    assert_int_equal(li.ffn_intermediate, 96);
    assert_int_equal(li.sliding_window, 8);
    assert_int_equal(kt_model_layer(m, 2, &li), KT_ERR_INVALID_ARG);
    kt_model_free(m);

    m = open_fixture(dir, sizeof dir, "mixtral_tiny");
    v = view_of(m, 1, KT_ROLE_EXPERT_GATE, 6);
    assert_string_equal(v.name, "model.layers.1.block_sparse_moe.experts.6.w1.weight");
    v = view_of(m, 1, KT_ROLE_EXPERT_UP, 6);
    assert_string_equal(v.name, "model.layers.1.block_sparse_moe.experts.6.w3.weight");
    v = view_of(m, 1, KT_ROLE_EXPERT_DOWN, 6);
    assert_string_equal(v.name, "model.layers.1.block_sparse_moe.experts.6.w2.weight");
    v = view_of(m, 1, KT_ROLE_ROUTER, 0);
    assert_string_equal(v.name, "model.layers.1.block_sparse_moe.gate.weight");
    assert_int_equal(kt_model_has_tensor(m, 1, KT_ROLE_SCORE_CORRECTION, 0), 0);
    kt_model_free(m);

    m = open_fixture(dir, sizeof dir, "minimax_m2_tiny/fp8");
    v = view_of(m, 0, KT_ROLE_Q_NORM, 0);
    assert_int_equal(v.shape[0], 128); /* full width: 4 heads x 32 */
    v = view_of(m, 0, KT_ROLE_K_NORM, 0);
    assert_int_equal(v.shape[0], 64);
    v = view_of(m, 0, KT_ROLE_SCORE_CORRECTION, 0);
    assert_string_equal(v.name, "model.layers.0.block_sparse_moe.e_score_correction_bias");
    v = view_of(m, 1, KT_ROLE_EXPERT_DOWN, 0);
    assert_int_equal(v.storage, KT_STORAGE_FP8_BLOCK);
    assert_pair(v.scale_shape[0], v.scale_shape[1], 1, 2);
    kt_model_free(m);

    m = open_fixture(dir, sizeof dir, "qwen3_moe_tiny");
    v = view_of(m, 1, KT_ROLE_Q_NORM, 0);
    assert_int_equal(v.shape[0], 32); /* per head */
    v = view_of(m, 1, KT_ROLE_O_PROJ, 0);
    assert_pair(v.rows, v.cols, 64, 128);
    /* iteration order: embedding first, lm_head last */
    kt_tensor_view first, last;
    first.struct_size = last.struct_size = sizeof first;
    assert_int_equal(kt_model_tensor_at(m, 0, &first), KT_OK);
    assert_int_equal(kt_model_tensor_at(m, kt_model_n_tensors(m) - 1, &last), KT_OK);
    assert_int_equal(first.role, KT_ROLE_EMBED);
    assert_int_equal(last.role, KT_ROLE_LM_HEAD);
    assert_int_equal(kt_model_tensor_at(m, kt_model_n_tensors(m), &last), KT_ERR_INVALID_ARG);
    /* 2 layers x (norms 2 + attn 4 + qk norm 2 + router 1 + 8 x 3 experts) + 3 globals */
    assert_int_equal(kt_model_n_tensors(m), 2 * (2 + 4 + 2 + 1 + 24) + 3);
    kt_model_free(m);
}

/* ---- hub-style configs parse to the same description ------------------------------- */

/* The fixture configs as the hub spells them: rope_theta + rope_scaling, num_experts,
 * no head_dim / rope_interleave / qk_head_dim for DeepSeek, rotary_dim for MiniMax. */
static const char hub_deepseek[] =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"aux_loss_alpha\":0.001,\"bos_token_id\":0,\"eos_token_id\":1,"
    "\"ep_size\":1,\"first_k_dense_replace\":1,\"hidden_act\":\"silu\",\"hidden_size\":128,"
    "\"initializer_range\":0.02,\"intermediate_size\":256,\"kv_lora_rank\":32,"
    "\"max_position_embeddings\":4096,\"model_type\":\"%s\",\"moe_intermediate_size\":192,"
    "\"moe_layer_freq\":1,\"n_group\":4,\"n_routed_experts\":8,\"n_shared_experts\":1,"
    "\"norm_topk_prob\":true,\"num_attention_heads\":4,\"num_experts_per_tok\":4,"
    "\"num_hidden_layers\":3,\"num_key_value_heads\":4,\"num_nextn_predict_layers\":1,"
    "\"pretraining_tp\":1,\"q_lora_rank\":64,\"qk_nope_head_dim\":32,\"qk_rope_head_dim\":16,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":{\"beta_fast\":1,\"beta_slow\":1,\"factor\":32,"
    "\"mscale\":1.0,\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":128,"
    "\"type\":\"yarn\"},\"rope_theta\":50000,\"routed_scaling_factor\":2.5,"
    "\"scoring_func\":\"sigmoid\",\"seq_aux\":true,\"tie_word_embeddings\":false,"
    "\"topk_group\":2,\"topk_method\":\"noaux_tc\",\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.33.1\",\"use_cache\":true,\"v_head_dim\":32,"
    "\"vocab_size\":512%s}";

static const char hub_int4_quant[] =
    ",\"quantization_config\":{\"config_groups\":{\"group_0\":{\"input_activations\":null,"
    "\"output_activations\":null,\"targets\":[\"Linear\"],\"weights\":{\"actorder\":null,"
    "\"block_structure\":null,\"dynamic\":false,\"group_size\":32,\"num_bits\":4,"
    "\"observer\":\"minmax\",\"observer_kwargs\":{},\"strategy\":\"group\",\"symmetric\":true,"
    "\"type\":\"int\"}}},\"format\":\"pack-quantized\",\"ignore\":[\"lm_head\","
    "\"re:.*self_attn.*\",\"re:.*shared_experts.*\","
    "\"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\"],"
    "\"kv_cache_scheme\":null,\"quant_method\":\"compressed-tensors\","
    "\"quantization_status\":\"compressed\"}";

static const char hub_qwen3[] =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"decoder_sparse_step\":1,\"head_dim\":32,"
    "\"hidden_act\":\"silu\",\"hidden_size\":64,\"initializer_range\":0.02,"
    "\"intermediate_size\":128,\"max_position_embeddings\":4096,\"max_window_layers\":2,"
    "\"mlp_only_layers\":[],\"model_type\":\"qwen3_moe\",\"moe_intermediate_size\":96,"
    "\"norm_topk_prob\":true,\"num_attention_heads\":4,\"num_experts\":8,"
    "\"num_experts_per_tok\":2,\"num_hidden_layers\":2,\"num_key_value_heads\":2,"
    "\"output_router_logits\":false,\"rms_norm_eps\":1e-06,\"rope_scaling\":null,"
    "\"rope_theta\":1000000.0,\"router_aux_loss_coef\":0.001,\"sliding_window\":null,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":512}";

static const char hub_mixtral[] =
    "{\"architectures\":[\"MixtralForCausalLM\"],\"attention_dropout\":0.0,"
    "\"bos_token_id\":1,\"eos_token_id\":2,\"hidden_act\":\"silu\",\"hidden_size\":64,"
    "\"initializer_range\":0.02,\"intermediate_size\":96,\"max_position_embeddings\":4096,"
    "\"model_type\":\"mixtral\",\"num_attention_heads\":4,\"num_experts_per_tok\":2,"
    "\"num_hidden_layers\":2,\"num_key_value_heads\":2,\"num_local_experts\":8,"
    "\"output_router_logits\":false,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
    "\"router_aux_loss_coef\":0.02,\"sliding_window\":null,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"vocab_size\":512}";

static const char hub_minimax[] =
    "{\"architectures\":[\"MiniMaxM2ForCausalLM\"],\"attn_type_list\":[1,1],"
    "\"bos_token_id\":200034,\"eos_token_id\":200020,\"head_dim\":32,\"hidden_act\":\"silu\","
    "\"hidden_size\":128,\"intermediate_size\":192,\"max_position_embeddings\":4096,"
    "\"model_type\":\"minimax_m2\",\"mtp_transformer_layers\":1,\"num_attention_heads\":4,"
    "\"num_experts_per_tok\":2,\"num_hidden_layers\":2,\"num_key_value_heads\":2,"
    "\"num_local_experts\":8,\"num_mtp_modules\":3,\"output_router_logits\":false,"
    "\"qk_norm_type\":\"per_layer\",\"rms_norm_eps\":1e-06,\"rope_theta\":5000000,"
    "\"rotary_dim\":16,\"router_aux_loss_coef\":0.001,\"router_jitter_noise\":0.0,"
    "\"scoring_func\":\"sigmoid\",\"shared_intermediate_size\":0,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"use_mtp\":true,\"use_qk_norm\":true,"
    "\"use_routing_bias\":true,\"vocab_size\":512,\"quantization_config\":{"
    "\"activation_scheme\":\"dynamic\",\"fmt\":\"float8_e4m3fn\",\"quant_method\":\"fp8\","
    "\"weight_block_size\":[128,128],\"modules_to_not_convert\":[\"gate\","
    "\"e_score_correction_bias\",\"lm_head\"]}}";

static const char hub_gpt_oss[] =
    "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,"
    "\"attention_dropout\":0.0,\"experts_per_token\":2,\"head_dim\":32,\"hidden_act\":\"silu\","
    "\"hidden_size\":64,\"initial_context_length\":4096,\"initializer_range\":0.02,"
    "\"intermediate_size\":96,\"layer_types\":[\"sliding_attention\",\"full_attention\"],"
    "\"max_position_embeddings\":4096,\"model_type\":\"gpt_oss\",\"num_attention_heads\":4,"
    "\"num_experts_per_tok\":2,\"num_hidden_layers\":2,\"num_key_value_heads\":2,"
    "\"num_local_experts\":8,\"output_router_logits\":false,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"
    "\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\",\"truncate\":false},"
    "\"rope_theta\":150000,\"router_aux_loss_coef\":0.9,\"sliding_window\":8,"
    "\"swiglu_limit\":7.0,\"tie_word_embeddings\":false,\"use_cache\":true,\"vocab_size\":512}";

/* Every scalar field of kt_arch_info. */
#define ARCH_FIELDS(X)                                                                         \
    X(dtype) X(vocab_size) X(hidden_size) X(intermediate_size) X(moe_intermediate_size)        \
    X(n_layers) X(max_position_embeddings) X(rms_norm_eps) X(tie_word_embeddings)              \
    X(attn_kind) X(n_heads) X(n_kv_heads) X(head_dim) X(q_lora_rank) X(kv_lora_rank)            \
    X(qk_nope_head_dim) X(qk_rope_head_dim) X(v_head_dim) X(qk_norm) X(attention_bias)          \
    X(attention_out_bias) X(attention_sinks) X(sliding_window) X(attn_scale) X(rope_type)       \
    X(rope_theta) X(rotary_dim) X(partial_rotary_factor) X(rope_interleave) X(rope_factor)      \
    X(rope_original_max_pos) X(yarn_beta_fast) X(yarn_beta_slow) X(yarn_mscale)                 \
    X(yarn_mscale_all_dim) X(yarn_attention_factor) X(yarn_truncate) X(n_routed_experts)        \
    X(n_experts_per_tok) X(n_shared_experts) X(shared_intermediate_size) X(shared_expert_gate)  \
    X(n_moe_layers) X(first_k_dense_replace) X(decoder_sparse_step) X(n_group) X(topk_group)    \
    X(routed_scaling_factor) X(norm_topk_prob) X(score_func) X(score_correction_bias)           \
    X(router_bias) X(ffn_act) X(swiglu_limit) X(swiglu_alpha) X(expert_bias) X(n_nextn_layers)  \
    X(bos_token_id) X(pad_token_id) X(n_eos_token_ids) X(quant_method) X(quant_block_rows)      \
    X(quant_block_cols) X(quant_bits) X(quant_group_size) X(quant_symmetric)

static void assert_same_description(const kt_model *x, const kt_model *y, const char *what)
{
    kt_arch_info a = arch_of(x), b = arch_of(y);
#define CMP(f)                                                                                 \
    if ((double)a.f != (double)b.f)                                                            \
        fail_msg("%s: field %s differs: %g vs %g", what, #f, (double)a.f, (double)b.f);
    ARCH_FIELDS(CMP)
#undef CMP
    for (uint32_t i = 0; i < a.n_eos_token_ids; i++)
        assert_int_equal(a.eos_token_ids[i], b.eos_token_ids[i]);
    for (uint32_t l = 0; l < a.n_layers; l++) {
        assert_int_equal(kt_model_layer_is_moe(x, l), kt_model_layer_is_moe(y, l));
        assert_int_equal(kt_model_layer_sliding_window(x, l),
                         kt_model_layer_sliding_window(y, l));
    }
}

static kt_model *open_json_text(const char *name, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s.json", tmp_root, name);
    write_text(path, text);
    return open_ok(path);
}

static void test_hub_style_configs(void **state)
{
    (void)state;
    static char buf[8192];
    struct {
        const char *fixture;
        const char *text;
    } cases[] = {
        {"qwen3_moe_tiny", hub_qwen3},
        {"mixtral_tiny", hub_mixtral},
        {"minimax_m2_tiny/fp8", hub_minimax},
        {"gpt_oss_tiny", hub_gpt_oss},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512];
        fixture_path(dir, sizeof dir, cases[i].fixture);
        kt_model *fx = open_ok(dir);
        kt_model *hub = open_json_text("hub", cases[i].text);
        assert_int_equal(kt_model_n_tensors(hub), 0); /* a bare config: description only */
        if (strstr(cases[i].fixture, "minimax")) { /* modules_to_not_convert: substrings */
            assert_true(
                kt__config_quant_ignored(&hub->cfg, "model.layers.1.block_sparse_moe.gate"));
            assert_true(kt__config_quant_ignored(&hub->cfg, "lm_head"));
            assert_false(kt__config_quant_ignored(&hub->cfg,
                                                  "model.layers.1.block_sparse_moe.experts.0.w1"));
        }
        assert_same_description(fx, hub, cases[i].fixture);
        kt_model_free(hub);
        kt_model_free(fx);
    }

    /* DeepSeek-V3 and Kimi-K2 (model_type kimi_k2): no head_dim, no rope_interleave */
    const char *dv[][2] = {{"deepseek_v3_tiny/bf16", ""}, {"deepseek_v3_tiny/int4",
                                                           hub_int4_quant}};
    for (size_t i = 0; i < 2; i++) {
        char dir[512];
        fixture_path(dir, sizeof dir, dv[i][0]);
        kt_model *fx = open_ok(dir);
        snprintf(buf, sizeof buf, hub_deepseek, "deepseek_v3", dv[i][1]);
        kt_model *hub = open_json_text("hub_ds", buf);
        assert_same_description(fx, hub, dv[i][0]);
        kt_arch_info a = arch_of(hub);
        assert_int_equal(a.rope_interleave, 1);
        assert_int_equal(a.arch, KT_ARCH_DEEPSEEK_V3);
        kt_model_free(hub);
        snprintf(buf, sizeof buf, hub_deepseek, "kimi_k2", dv[i][1]);
        hub = open_json_text("hub_kimi", buf);
        assert_same_description(fx, hub, "kimi_k2");
        a = arch_of(hub);
        assert_int_equal(a.arch, KT_ARCH_KIMI_K2);
        assert_string_equal(a.model_type, "kimi_k2");
        kt_model_free(hub);
        kt_model_free(fx);
    }

    /* multimodal wrapper: text_config nesting */
    snprintf(buf, sizeof buf, "{\"model_type\":\"kimi_k25\",\"text_config\":%s}", hub_qwen3);
    kt_model *nested = open_json_text("nested", buf);
    char dir[512];
    fixture_path(dir, sizeof dir, "qwen3_moe_tiny");
    kt_model *fx = open_ok(dir);
    assert_same_description(fx, nested, "text_config");
    kt_model_free(nested);
    kt_model_free(fx);
}

/* Kimi-K2-Thinking's config.json as published (values of research/landscape.md §3.1):
 * the full-size description and estimate from the config alone. */
static const char hub_kimi_k2_thinking[] =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"bos_token_id\":163584,\"eos_token_id\":163585,"
    "\"first_k_dense_replace\":1,\"hidden_act\":\"silu\",\"hidden_size\":7168,"
    "\"initializer_range\":0.02,\"intermediate_size\":18432,\"kv_lora_rank\":512,"
    "\"max_position_embeddings\":262144,\"model_type\":\"kimi_k2\","
    "\"moe_intermediate_size\":2048,\"moe_layer_freq\":1,\"n_group\":1,"
    "\"n_routed_experts\":384,\"n_shared_experts\":1,\"norm_topk_prob\":true,"
    "\"num_attention_heads\":64,\"num_experts_per_tok\":8,\"num_hidden_layers\":61,"
    "\"num_key_value_heads\":64,\"num_nextn_predict_layers\":0,\"pretraining_tp\":1,"
    "\"q_lora_rank\":1536,\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":{\"beta_fast\":1.0,\"beta_slow\":1.0,"
    "\"factor\":64.0,\"mscale\":1.0,\"mscale_all_dim\":1.0,"
    "\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},\"rope_theta\":50000.0,"
    "\"routed_scaling_factor\":2.827,\"scoring_func\":\"sigmoid\",\"tie_word_embeddings\":false,"
    "\"topk_group\":1,\"topk_method\":\"noaux_tc\",\"torch_dtype\":\"bfloat16\","
    "\"use_cache\":true,\"v_head_dim\":128,\"vocab_size\":163840%s}";

static void test_full_size_configs(void **state)
{
    (void)state;
    static char buf[8192];
    /* INT4 routed experts: packed I32 [out][in/8] + BF16 scales [out][in/32] */
    snprintf(buf, sizeof buf, hub_kimi_k2_thinking, hub_int4_quant);
    kt_model *m = open_json_text("k2_thinking", buf);
    kt_arch_info a = arch_of(m);
    assert_int_equal(a.arch, KT_ARCH_KIMI_K2);
    assert_int_equal(a.n_moe_layers, 60);
    assert_int_equal(a.head_dim, 192);
    assert_int_equal(a.rope_interleave, 1);
    /* m = 0.1 ln 64 + 1; scale = m^2 / sqrt(192) (landscape §3.9: m^2 = 2.0047) */
    assert_true(fabs(a.attn_scale * sqrt(192.0) - 2.0047) < 1e-4);
    kt_memory_estimate e;
    e.struct_size = sizeof e;
    kt_estimate_options o = KT_ESTIMATE_OPTIONS_INIT;
    o.context_length = 131072;
    assert_int_equal(kt_model_estimate(m, &o, &e), KT_OK);
    const uint64_t w = 2048ull * 7168; /* weights per projection */
    assert_int_equal(e.expert_bytes, 3 * (w / 2 + w / 32 * 2)); /* 24.8 MB (§3.10) */
    assert_int_equal(e.routed_expert_bytes, 60ull * 384 * e.expert_bytes);
    assert_int_equal(e.kv_bytes_per_token, 61ull * 576 * 2); /* 68.6 KiB (§3.9) */
    assert_int_equal(e.kv_bytes, e.kv_bytes_per_token * 131072);
    kt_model_free(m);

    /* the same model as FP8 blocks of 128x128 (DeepSeek-V3 / Kimi-K2-Instruct) */
    snprintf(buf, sizeof buf, hub_kimi_k2_thinking,
             ",\"quantization_config\":{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\","
             "\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}");
    m = open_json_text("k2_fp8", buf);
    assert_int_equal(kt_model_estimate(m, &o, &e), KT_OK);
    assert_int_equal(e.expert_bytes, 3 * (w + 16 * 56 * 4)); /* 44.0 MB (§3.10) */
    kt_model_free(m);
}

static void test_other_families_config_only(void **state)
{
    (void)state;
    /* GLM-4.5-Air as published (no fixture: config-only) */
    static const char glm[] =
        "{\"architectures\":[\"Glm4MoeForCausalLM\"],\"attention_bias\":true,"
        "\"attention_dropout\":0.0,\"pad_token_id\":151329,\"eos_token_id\":[151329,151336,"
        "151338],\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":4096,"
        "\"partial_rotary_factor\":0.5,\"initializer_range\":0.02,\"intermediate_size\":10944,"
        "\"max_position_embeddings\":131072,\"model_type\":\"glm4_moe\","
        "\"moe_intermediate_size\":1408,\"norm_topk_prob\":true,\"num_attention_heads\":96,"
        "\"n_group\":1,\"topk_group\":1,\"n_routed_experts\":128,\"n_shared_experts\":1,"
        "\"routed_scaling_factor\":1.0,\"num_experts_per_tok\":8,\"first_k_dense_replace\":1,"
        "\"num_hidden_layers\":46,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,"
        "\"rope_scaling\":null,\"rope_theta\":1000000,\"num_nextn_predict_layers\":1,"
        "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
        "\"use_qk_norm\":false,\"vocab_size\":151552}";
    kt_model *m = open_json_text("glm", glm);
    kt_arch_info a = arch_of(m);
    assert_int_equal(a.arch, KT_ARCH_GLM4_MOE);
    assert_int_equal(a.rotary_dim, 64);
    assert_int_equal(a.rope_interleave, 0);
    assert_int_equal(a.attention_bias, 1);
    assert_int_equal(a.attention_out_bias, 0);
    assert_int_equal(a.qk_norm, KT_QK_NORM_NONE);
    assert_int_equal(a.n_eos_token_ids, 3);
    assert_int_equal(a.eos_token_ids[2], 151338);
    assert_int_equal(a.pad_token_id, 151329);
    assert_int_equal(a.score_func, KT_SCORE_SIGMOID);
    assert_int_equal(a.score_correction_bias, 1);
    assert_int_equal(a.n_moe_layers, 45);
    assert_int_equal(a.shared_intermediate_size, 1408);
    assert_true(fabsf(a.rms_norm_eps - 1e-5f) < 1e-12f);
    assert_int_equal(kt_model_layer_is_moe(m, 0), 0);
    kt_tensor_view v;
    v.struct_size = sizeof v;
    assert_int_equal(kt_model_tensor(m, 1, KT_ROLE_ROUTER, 0, &v), KT_ERR_NOT_FOUND);
    /* estimate from the config alone: 128 experts x 3 x 1408 x 4096 BF16 per MoE layer */
    kt_memory_estimate e;
    e.struct_size = sizeof e;
    assert_int_equal(kt_model_estimate(m, NULL, &e), KT_OK);
    assert_int_equal(e.expert_bytes, 3ull * 1408 * 4096 * 2);
    assert_int_equal(e.routed_expert_bytes, 45ull * 128 * 3 * 1408 * 4096 * 2);
    kt_model_free(m);

    /* Qwen1.5-MoE style qwen2_moe: shared expert with its own width and a gate */
    static const char qwen2[] =
        "{\"model_type\":\"qwen2_moe\",\"hidden_size\":2048,\"intermediate_size\":5632,"
        "\"moe_intermediate_size\":1408,\"shared_expert_intermediate_size\":5632,"
        "\"num_attention_heads\":16,\"num_key_value_heads\":16,\"num_hidden_layers\":24,"
        "\"num_experts\":60,\"num_experts_per_tok\":4,\"norm_topk_prob\":false,"
        "\"decoder_sparse_step\":1,\"vocab_size\":151936,\"rope_theta\":1000000.0,"
        "\"max_position_embeddings\":8192,\"rms_norm_eps\":1e-06,\"mlp_only_layers\":[0,23],"
        "\"use_sliding_window\":false,\"sliding_window\":32768,\"tie_word_embeddings\":false,"
        "\"bos_token_id\":151643,\"eos_token_id\":151643}";
    m = open_json_text("qwen2", qwen2);
    a = arch_of(m);
    assert_int_equal(a.arch, KT_ARCH_QWEN2_MOE);
    assert_int_equal(a.n_shared_experts, 1);
    assert_int_equal(a.shared_intermediate_size, 5632);
    assert_int_equal(a.shared_expert_gate, 1);
    assert_int_equal(a.attention_bias, 1);
    assert_int_equal(a.norm_topk_prob, 0);
    assert_int_equal(a.sliding_window, 0);
    assert_int_equal(a.head_dim, 128);
    assert_int_equal(a.n_moe_layers, 22);
    assert_int_equal(kt_model_layer_is_moe(m, 0), 0);
    assert_int_equal(kt_model_layer_is_moe(m, 1), 1);
    assert_int_equal(kt_model_layer_is_moe(m, 23), 0);
    kt_model_free(m);
}

/* ---- estimate ------------------------------------------------------------------------- */

static void test_estimate(void **state)
{
    (void)state;
    const char *bf16[] = {"deepseek_v3_tiny/bf16", "qwen3_moe_tiny", "mixtral_tiny",
                          "gpt_oss_tiny", "minimax_m2_tiny/bf16"};
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++) {
        char dir[512], cfg[600];
        fixture_path(dir, sizeof dir, bf16[i]);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        kt_model *m = open_ok(dir);
        kt_arch_info a = arch_of(m);
        /* sums over the views, computed here */
        uint64_t dense = 0, experts = 0;
        for (size_t t = 0; t < kt_model_n_tensors(m); t++) {
            kt_tensor_view v;
            v.struct_size = sizeof v;
            assert_int_equal(kt_model_tensor_at(m, t, &v), KT_OK);
            uint64_t b = v.nbytes + v.scale_nbytes;
            if (v.expert != UINT32_MAX)
                experts += b;
            else
                dense += b;
        }
        kt_memory_estimate e;
        e.struct_size = sizeof e;
        kt_estimate_options o = KT_ESTIMATE_OPTIONS_INIT;
        o.context_length = 100;
        assert_int_equal(kt_model_estimate(m, &o, &e), KT_OK);
        assert_int_equal(e.dense_weight_bytes, dense);
        assert_int_equal(e.routed_expert_bytes, experts);
        assert_int_equal(e.expert_bytes, experts / a.n_moe_layers / a.n_routed_experts);
        assert_true(e.host_bytes > dense + experts);
        assert_int_equal(e.gpu_bytes[0], 0);
        /* KV: MLA latent + rope key, else K and V per kv head, BF16, window-capped */
        uint64_t kv = 0;
        for (uint32_t l = 0; l < a.n_layers; l++) {
            uint64_t per = a.attn_kind == KT_ATTN_MLA
                               ? 2ull * (a.kv_lora_rank + a.qk_rope_head_dim)
                               : 4ull * a.n_kv_heads * a.head_dim;
            uint32_t w = kt_model_layer_sliding_window(m, l);
            kv += per * (w && w < 100 ? w : 100);
        }
        assert_int_equal(e.kv_bytes, kv);

        o.n_gpus = 2;
        o.gpu_experts_per_layer = 3;
        assert_int_equal(kt_model_estimate(m, &o, &e), KT_OK);
        uint64_t gpu_experts = 3ull * a.n_moe_layers * e.expert_bytes;
        assert_int_equal(e.host_bytes, experts - gpu_experts);
        assert_int_equal(e.gpu_bytes[1], gpu_experts / 2);
        assert_true(e.gpu_bytes[0] > dense + e.kv_bytes + gpu_experts / 2);
        assert_true(e.pinned_bytes > 0);

        /* the config alone predicts the same weight bytes (BF16 checkpoints) */
        kt_model_open_options oo = KT_MODEL_OPEN_OPTIONS_INIT;
        oo.flags = KT_MODEL_OPEN_F_CONFIG_ONLY;
        kt_model *c = NULL;
        assert_int_equal(kt_model_open(&c, NULL, dir, &oo), KT_OK);
        kt_memory_estimate ec;
        ec.struct_size = sizeof ec;
        o.n_gpus = 0;
        o.gpu_experts_per_layer = 0;
        assert_int_equal(kt_model_estimate(c, &o, &ec), KT_OK);
        if (ec.dense_weight_bytes != dense || ec.routed_expert_bytes != experts)
            fail_msg("%s: config-only estimate %llu + %llu, files %llu + %llu", bf16[i],
                     (unsigned long long)ec.dense_weight_bytes,
                     (unsigned long long)ec.routed_expert_bytes, (unsigned long long)dense,
                     (unsigned long long)experts);
        kt_model_free(c);

        o.n_gpus = 1;
        o.gpu_experts_per_layer = a.n_routed_experts + 1;
        assert_int_equal(kt_model_estimate(m, &o, &e), KT_ERR_INVALID_ARG);
        o.n_gpus = KT_ESTIMATE_MAX_GPUS + 1;
        o.gpu_experts_per_layer = 0;
        assert_int_equal(kt_model_estimate(m, &o, &e), KT_ERR_INVALID_ARG);
        kt_model_free(m);
    }
}

/* ---- bad configs -------------------------------------------------------------------- */

/* The fixture's config with one field replaced by `value` (JSON text; NULL removes). */
static char *mutate(const char *fixture, const char *key, const char *value)
{
    char dir[512], cfg[600];
    fixture_path(dir, sizeof dir, fixture);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    cJSON *c = load_json(cfg);
    cJSON *target = c;
    char k[128];
    snprintf(k, sizeof k, "%s", key);
    char *dot = strchr(k, '.');
    if (dot) { /* one level of nesting: "rope_parameters.rope_type" */
        *dot = 0;
        target = cJSON_GetObjectItemCaseSensitive(c, k);
        assert_non_null(target);
        memmove(k, dot + 1, strlen(dot + 1) + 1);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(target, k);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        assert_non_null(v);
        cJSON_AddItemToObject(target, k, v);
    }
    char *s = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return s;
}

static void expect_bad(const char *text, kt_status want, const char *needle)
{
    kt__config cfg;
    kt_status st = kt__config_parse(&cfg, text, strlen(text), "x/config.json", NULL);
    if (st != want)
        fail_msg("expected %s, got %s (%s) for: %.300s", kt_status_str(want), kt_status_str(st),
                 kt_last_error(), text);
    const char *msg = kt_last_error();
    if (!strstr(msg, "x/config.json") || (needle && !strstr(msg, needle)))
        fail_msg("message '%s' should name the file and '%s'", msg, needle);
    kt__config_free(&cfg);
}

static void test_bad_configs(void **state)
{
    (void)state;
    static const struct {
        const char *fixture, *key, *value;
        kt_status want;
        const char *needle;
    } cases[] = {
        {"qwen3_moe_tiny", "model_type", "\"llama\"", KT_ERR_UNSUPPORTED, "llama"},
        {"qwen3_moe_tiny", "model_type", NULL, KT_ERR_FORMAT, "model_type"},
        {"qwen3_moe_tiny", "model_type", "7", KT_ERR_FORMAT, "model_type"},
        {"qwen3_moe_tiny", "num_experts_per_tok", "9", KT_ERR_FORMAT, "num_experts_per_tok"},
        {"qwen3_moe_tiny", "num_experts_per_tok", "0", KT_ERR_FORMAT, "num_experts_per_tok"},
        {"qwen3_moe_tiny", "num_hidden_layers", "0", KT_ERR_FORMAT, "num_hidden_layers"},
        {"qwen3_moe_tiny", "num_hidden_layers", "100000", KT_ERR_FORMAT, "num_hidden_layers"},
        {"qwen3_moe_tiny", "num_hidden_layers", NULL, KT_ERR_FORMAT, "num_hidden_layers"},
        {"qwen3_moe_tiny", "num_key_value_heads", "3", KT_ERR_FORMAT, "num_key_value_heads"},
        {"qwen3_moe_tiny", "vocab_size", "\"512\"", KT_ERR_FORMAT, "vocab_size"},
        {"qwen3_moe_tiny", "vocab_size", "-1", KT_ERR_FORMAT, "vocab_size"},
        {"qwen3_moe_tiny", "vocab_size", "1e30", KT_ERR_FORMAT, "vocab_size"},
        {"qwen3_moe_tiny", "vocab_size", "5.5", KT_ERR_FORMAT, "vocab_size"},
        {"qwen3_moe_tiny", "hidden_size", "true", KT_ERR_FORMAT, "hidden_size"},
        {"qwen3_moe_tiny", "num_local_experts", NULL, KT_ERR_FORMAT, "expert count"},
        {"qwen3_moe_tiny", "mlp_only_layers", "[5]", KT_ERR_FORMAT, "mlp_only_layers"},
        {"qwen3_moe_tiny", "mlp_only_layers", "{}", KT_ERR_FORMAT, "mlp_only_layers"},
        {"qwen3_moe_tiny", "decoder_sparse_step", "0", KT_ERR_FORMAT, "decoder_sparse_step"},
        {"qwen3_moe_tiny", "rms_norm_eps", "0", KT_ERR_FORMAT, "rms_norm_eps"},
        {"qwen3_moe_tiny", "head_dim", "0", KT_ERR_FORMAT, "head_dim"},
        {"qwen3_moe_tiny", "rope_parameters", "[]", KT_ERR_FORMAT, "rope_parameters"},
        {"qwen3_moe_tiny", "rope_parameters.rope_type", "\"longrope\"", KT_ERR_UNSUPPORTED,
         "longrope"},
        {"qwen3_moe_tiny", "rope_parameters.rope_theta", "-5", KT_ERR_FORMAT, "rope_theta"},
        {"qwen3_moe_tiny", "torch_dtype", "\"int8\"", KT_ERR_UNSUPPORTED, "int8"},
        {"qwen3_moe_tiny", "eos_token_id", "\"x\"", KT_ERR_FORMAT, "eos_token_id"},
        {"mixtral_tiny", "hidden_size", "65", KT_ERR_FORMAT, "hidden_size"},
        {"deepseek_v3_tiny/bf16", "n_group", "3", KT_ERR_FORMAT, "n_group"},
        {"deepseek_v3_tiny/bf16", "topk_group", "5", KT_ERR_FORMAT, "topk_group"},
        {"deepseek_v3_tiny/bf16", "topk_group", "1", KT_ERR_FORMAT, "num_experts_per_tok"},
        {"deepseek_v3_tiny/bf16", "qk_head_dim", "40", KT_ERR_FORMAT, "qk_head_dim"},
        {"deepseek_v3_tiny/bf16", "qk_rope_head_dim", "15", KT_ERR_FORMAT, "qk_rope_head_dim"},
        {"deepseek_v3_tiny/bf16", "kv_lora_rank", "0", KT_ERR_FORMAT, "kv_lora_rank"},
        {"deepseek_v3_tiny/bf16", "num_key_value_heads", "2", KT_ERR_FORMAT, "MLA"},
        {"deepseek_v3_tiny/bf16", "scoring_func", "\"tanh\"", KT_ERR_UNSUPPORTED, "tanh"},
        {"deepseek_v3_tiny/bf16", "routed_scaling_factor", "0", KT_ERR_FORMAT,
         "routed_scaling_factor"},
        {"deepseek_v3_tiny/bf16", "intermediate_size", "0", KT_ERR_FORMAT, "intermediate_size"},
        {"deepseek_v3_tiny/bf16", "moe_intermediate_size", NULL, KT_ERR_FORMAT,
         "moe_intermediate_size"},
        {"deepseek_v3_tiny/bf16", "rope_parameters.factor", "-2", KT_ERR_FORMAT, "factor"},
        {"deepseek_v3_tiny/bf16", "quantization_config", "{\"quant_method\":\"awq\"}",
         KT_ERR_UNSUPPORTED, "awq"},
        {"deepseek_v3_tiny/bf16", "quantization_config", "{\"quant_method\":\"bitsandbytes\"}",
         KT_ERR_UNSUPPORTED, "bitsandbytes"},
        {"deepseek_v3_tiny/bf16", "quantization_config", "{}", KT_ERR_FORMAT, "quant_method"},
        {"deepseek_v3_tiny/bf16", "quantization_config", "[1]", KT_ERR_FORMAT,
         "quantization_config"},
        {"deepseek_v3_tiny/fp8", "quantization_config.weight_block_size", NULL,
         KT_ERR_UNSUPPORTED, "weight_block_size"},
        {"deepseek_v3_tiny/fp8", "quantization_config.weight_block_size", "[128]", KT_ERR_FORMAT,
         "weight_block_size"},
        {"deepseek_v3_tiny/fp8", "quantization_config.weight_block_size", "[0, 128]",
         KT_ERR_FORMAT, "weight_block_size"},
        {"deepseek_v3_tiny/fp8", "quantization_config.fmt", "\"e5m2\"", KT_ERR_UNSUPPORTED,
         "e5m2"},
        {"deepseek_v3_tiny/int4", "quantization_config.ignore", "[\"re:(\"]", KT_ERR_FORMAT,
         "regex"},
        {"deepseek_v3_tiny/int4", "quantization_config.ignore", "[3]", KT_ERR_FORMAT, "ignore"},
        {"deepseek_v3_tiny/int4", "quantization_config.format", "\"int-quantized\"",
         KT_ERR_UNSUPPORTED, "int-quantized"},
        {"deepseek_v3_tiny/int4", "quantization_config.config_groups", "{}", KT_ERR_FORMAT,
         "config_groups"},
        {"deepseek_v3_tiny/int4", "quantization_config.config_groups",
         "{\"g\":{\"weights\":{\"num_bits\":4,\"group_size\":32,\"symmetric\":false}}}",
         KT_ERR_UNSUPPORTED, "asymmetric"},
        {"deepseek_v3_tiny/int4", "quantization_config.config_groups",
         "{\"g\":{\"weights\":{\"num_bits\":8,\"group_size\":32}}}", KT_ERR_UNSUPPORTED,
         "8-bit"},
        {"deepseek_v3_tiny/int4", "quantization_config.config_groups",
         "{\"g\":{\"weights\":{\"num_bits\":4,\"group_size\":30}}}", KT_ERR_FORMAT,
         "group_size"},
        {"gpt_oss_tiny", "layer_types", "[\"full_attention\"]", KT_ERR_FORMAT, "layer_types"},
        {"gpt_oss_tiny", "layer_types", "[\"full_attention\", \"chunked\"]", KT_ERR_UNSUPPORTED,
         "chunked"},
        {"gpt_oss_tiny", "sliding_window", NULL, KT_ERR_FORMAT, "sliding_window"},
        {"gpt_oss_tiny", "swiglu_limit", "-1", KT_ERR_FORMAT, "swiglu_limit"},
        {"minimax_m2_tiny/bf16", "rotary_dim", "15", KT_ERR_FORMAT, "rotary dim"},
        {"minimax_m2_tiny/bf16", "rotary_dim", "64", KT_ERR_FORMAT, "rotary dim"},
        {"minimax_m2_tiny/bf16", "qk_norm_type", "\"weird\"", KT_ERR_UNSUPPORTED, "weird"},
        {"minimax_m2_tiny/bf16", "attn_type_list", "[1, 0]", KT_ERR_UNSUPPORTED,
         "attn_type_list[1]"},
        {"minimax_m2_tiny/bf16", "attn_type_list", "1", KT_ERR_FORMAT, "attn_type_list"},
        {"minimax_m2_tiny/bf16", "rope_parameters.partial_rotary_factor", "1.5", KT_ERR_FORMAT,
         "partial_rotary_factor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = mutate(cases[i].fixture, cases[i].key, cases[i].value);
        expect_bad(text, cases[i].want, cases[i].needle);
        free(text);
    }
    expect_bad("{", KT_ERR_FORMAT, NULL);
    expect_bad("", KT_ERR_FORMAT, NULL);
    expect_bad("[]", KT_ERR_FORMAT, "object");
    expect_bad("{\"model_type\":\"qwen3_moe\"}", KT_ERR_FORMAT, "vocab_size");
    expect_bad("\xff\xfe{}", KT_ERR_FORMAT, NULL);
}

/* ---- bad model directories ----------------------------------------------------------- */

/* A model dir in tmp: the fixture's shards and index (symlinked), a given config. */
static void make_model_dir(const char *name, const char *fixture, const char *config_text)
{
    char dir[400], src[512], cmd[4096];
    snprintf(dir, sizeof dir, "%s/%.60s", tmp_root, name);
    fixture_path(src, sizeof src, fixture);
    /* copies, not links: the reader refuses shards that resolve outside the dir */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s'/*.safetensors "
             "'%s'/model.safetensors.index.json '%s'/", dir, dir, src, src, dir);
    assert_int_equal(system(cmd), 0);
    char cfg[420];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    write_text(cfg, config_text);
}

static void expect_open_fails(const char *name, kt_status want, const char *needle)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    kt_model *m = (kt_model *)0x1;
    kt_status st = kt_model_open(&m, NULL, dir, NULL);
    assert_null(m);
    if (st != want || !strstr(kt_last_error(), needle))
        fail_msg("%s: want %s with '%s', got %s: %s", name, kt_status_str(want), needle,
                 kt_status_str(st), kt_last_error());
}

static void test_bad_models(void **state)
{
    (void)state;
    /* shapes the config does not imply */
    char *t = mutate("qwen3_moe_tiny", "moe_intermediate_size", "95");
    make_model_dir("shape", "qwen3_moe_tiny", t);
    free(t);
    expect_open_fails("shape", KT_ERR_FORMAT, "model.layers.0.mlp.experts.0.gate_proj.weight");
    /* a role the config promises that the files lack */
    t = mutate("qwen3_moe_tiny", "attention_bias", "true");
    make_model_dir("bias", "qwen3_moe_tiny", t);
    free(t);
    expect_open_fails("bias", KT_ERR_FORMAT,
                      "missing tensor 'model.layers.0.self_attn.q_proj.bias'");
    /* more experts than stored */
    t = mutate("mixtral_tiny", "num_local_experts", "16");
    make_model_dir("experts", "mixtral_tiny", t);
    free(t);
    expect_open_fails("experts", KT_ERR_FORMAT, "block_sparse_moe.gate.weight' has shape");
    /* FP8 weights without an fp8 quantization_config */
    t = mutate("minimax_m2_tiny/fp8", "quantization_config", NULL);
    make_model_dir("fp8", "minimax_m2_tiny/fp8", t);
    free(t);
    expect_open_fails("fp8", KT_ERR_FORMAT, "F8_E4M3");
    /* packed INT4 with a block size that does not fit the scales */
    t = mutate("deepseek_v3_tiny/fp8", "quantization_config.weight_block_size", "[64, 64]");
    make_model_dir("block", "deepseek_v3_tiny/fp8", t);
    free(t);
    expect_open_fails("block", KT_ERR_FORMAT, "weight_scale_inv");
    /* INT4 tensors but the config says fp8 */
    t = mutate("deepseek_v3_tiny/int4", "quantization_config",
               "{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}");
    make_model_dir("int4", "deepseek_v3_tiny/int4", t);
    free(t);
    expect_open_fails("int4", KT_ERR_FORMAT, "pack-quantized");
    /* one more layer than stored */
    t = mutate("gpt_oss_tiny", "num_hidden_layers", "3");
    char *t2 = NULL;
    {
        cJSON *c = cJSON_Parse(t);
        cJSON_DeleteItemFromObjectCaseSensitive(c, "layer_types");
        t2 = cJSON_PrintUnformatted(c);
        cJSON_Delete(c);
    }
    make_model_dir("layers", "gpt_oss_tiny", t2);
    free(t);
    free(t2);
    expect_open_fails("layers", KT_ERR_FORMAT, "model.layers.2.");
    /* fewer layers than stored: the rest is ignored like an MTP layer */
    t = mutate("deepseek_v3_tiny/bf16", "num_hidden_layers", "2");
    make_model_dir("mtp", "deepseek_v3_tiny/bf16", t);
    free(t);
    {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/mtp", tmp_root);
        kt_model *m = open_ok(dir);
        assert_int_equal(kt_model_n_layers(m), 2);
        assert_true(kt_model_n_ignored_tensors(m) > 0);
        kt_model_free(m);
    }
    /* tied embeddings: the lm_head view is the embedding */
    t = mutate("mixtral_tiny", "tie_word_embeddings", "true");
    make_model_dir("tied", "mixtral_tiny", t);
    free(t);
    {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tied", tmp_root);
        kt_model *m = open_ok(dir);
        kt_tensor_view h = view_of(m, 0, KT_ROLE_LM_HEAD, 0), e = view_of(m, 0, KT_ROLE_EMBED, 0);
        assert_ptr_equal(h.data, e.data);
        assert_string_equal(h.name, "model.embed_tokens.weight");
        kt_model_free(m);
    }
    /* malformed config.json in a model dir */
    make_model_dir("badjson", "mixtral_tiny", "{\"model_type\": ");
    expect_open_fails("badjson", KT_ERR_FORMAT, "config.json");
    /* no config.json */
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/empty'", tmp_root);
        assert_int_equal(system(cmd), 0);
        expect_open_fails("empty", KT_ERR_IO, "config.json");
    }
    /* missing shard */
    {
        char src[512], cmd[1200];
        fixture_path(src, sizeof src, "mixtral_tiny");
        t = read_whole_file(strcat(strcpy(cmd, src), "/config.json"), NULL);
        make_model_dir("shard", "mixtral_tiny", t);
        free(t);
        snprintf(cmd, sizeof cmd, "rm '%s/shard/model-00002-of-00002.safetensors'", tmp_root);
        assert_int_equal(system(cmd), 0);
        expect_open_fails("shard", KT_ERR_FORMAT, "model-00002-of-00002.safetensors");
    }
    /* a shard or the index given instead of the directory: the directory is opened */
    {
        char file[600];
        fixture_path(file, sizeof file, "mixtral_tiny/model-00001-of-00002.safetensors");
        kt_model *v = open_ok(file);
        assert_int_equal(kt_model_n_layers(v), 2);
        assert_int_equal(kt_model_n_ignored_tensors(v), 0);
        kt_model_free(v);
        fixture_path(file, sizeof file, "mixtral_tiny/model.safetensors.index.json");
        v = open_ok(file);
        kt_model_free(v);
    }
    /* a directory of variants: the error points at them */
    {
        char dir[512];
        fixture_path(dir, sizeof dir, "deepseek_v3_tiny");
        kt_model *v = NULL;
        assert_int_equal(kt_model_open(&v, NULL, dir, NULL), KT_ERR_IO);
        if (!strstr(kt_last_error(), "models below it") || !strstr(kt_last_error(), "/fp8"))
            fail_msg("message: %s", kt_last_error());
    }
    /* bad arguments and paths */
    kt_model *m = NULL;
    assert_int_equal(kt_model_open(NULL, NULL, "x", NULL), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_model_open(&m, NULL, NULL, NULL), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_model_open(&m, NULL, "/nonexistent/model", NULL), KT_ERR_IO);
    assert_non_null(strstr(kt_last_error(), "/nonexistent/model"));
    assert_int_equal(kt_model_open(&m, NULL, "/dev/null", NULL), KT_ERR_FORMAT);
    kt_model_open_options o = KT_MODEL_OPEN_OPTIONS_INIT;
    o.flags = 0x80;
    char dir[512];
    fixture_path(dir, sizeof dir, "mixtral_tiny");
    assert_int_equal(kt_model_open(&m, NULL, dir, &o), KT_ERR_INVALID_ARG);
    assert_null(m);
    kt_model_free(NULL);
}

/* ---- GGUF: a fixture converted with llama.cpp's names and keys reads back the same ---- */

/* HF suffix (after "model.layers.N.") -> llama.cpp tensor base name */
static const char *const hf_to_gguf[][2] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"block_sparse_moe.e_score_correction_bias", "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
};

/* expert projection name -> stacked base */
static const char *expert_base(const char *proj)
{
    if (!strcmp(proj, "gate_proj.weight") || !strcmp(proj, "w1.weight"))
        return "ffn_gate_exps.weight";
    if (!strcmp(proj, "up_proj.weight") || !strcmp(proj, "w3.weight"))
        return "ffn_up_exps.weight";
    if (!strcmp(proj, "down_proj.weight") || !strcmp(proj, "w2.weight"))
        return "ffn_down_exps.weight";
    return NULL;
}

static void add_tensor(kt_gguf_writer *w, const char *name, const kt_st_tensor *t,
                       const void *data, uint64_t experts)
{
    uint64_t ne[4] = {1, 1, 1, 1};
    uint32_t nd = t->n_dims;
    for (uint32_t d = 0; d < nd; d++)
        ne[d] = t->shape[nd - 1 - d];
    if (experts)
        ne[nd++] = experts;
    int64_t gt = kt__type_to_ggml(t->type);
    assert_true(gt >= 0);
    assert_int_equal(kt__gguf_writer_add_tensor(w, name, (uint32_t)gt, nd, ne, data), KT_OK);
}

/* Writes `out` from a safetensors fixture the way convert_hf_to_gguf.py lays it out. */
/* One u32 key of the converted file replaced (or left out with UINT32_MAX): hostile
 * metadata for the error tests. */
static const char *g_override_key;
static uint32_t g_override_value;

static void put_u32(kt_gguf_writer *w, const char *key, uint32_t v)
{
    if (g_override_key && !strcmp(key, g_override_key)) {
        if (g_override_value == UINT32_MAX)
            return;
        v = g_override_value;
    }
    assert_int_equal(kt__gguf_writer_add_u32(w, key, v), KT_OK);
}

static void fixture_to_gguf(const char *fixture, const char *arch, const char *out,
                            bool split_kv_b)
{
    char dir[512];
    kt_model *m = open_fixture(dir, sizeof dir, fixture);
    kt_arch_info a = arch_of(m);
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_dir(&set, dir), KT_OK);
    kt_gguf_writer *w = NULL;
    assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    assert_int_equal(kt__gguf_writer_add_str(w, "general.architecture", arch), KT_OK);
    put_u32(w, KEY("block_count"), a.n_layers);
    put_u32(w, KEY("context_length"), a.max_position_embeddings);
    put_u32(w, KEY("embedding_length"), a.hidden_size);
    put_u32(w, KEY("feed_forward_length"), a.intermediate_size);
    put_u32(w, KEY("expert_feed_forward_length"), a.moe_intermediate_size);
    put_u32(w, KEY("attention.head_count"), a.n_heads);
    put_u32(w, KEY("attention.head_count_kv"), a.n_kv_heads);
    if (split_kv_b) { /* llama.cpp's MLA layout: latent sizes, per-head ones in *_mla */
        put_u32(w, KEY("attention.key_length"),
                                a.kv_lora_rank + a.qk_rope_head_dim);
        put_u32(w, KEY("attention.value_length"), a.kv_lora_rank);
        put_u32(w, KEY("attention.key_length_mla"), a.head_dim);
        put_u32(w, KEY("attention.value_length_mla"), a.v_head_dim);
    } else {
        put_u32(w, KEY("attention.key_length"), a.head_dim);
        put_u32(w, KEY("attention.value_length"), a.v_head_dim);
    }
    kt__gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), a.rms_norm_eps);
    kt__gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)a.rope_theta);
    put_u32(w, KEY("rope.dimension_count"), a.rotary_dim);
    put_u32(w, KEY("expert_count"), a.n_routed_experts);
    put_u32(w, KEY("expert_used_count"), a.n_experts_per_tok);
    put_u32(w, KEY("vocab_size"), a.vocab_size);
    kt__gguf_writer_add_bool(w, KEY("expert_weights_norm"), a.norm_topk_prob != 0);
    put_u32(w, KEY("expert_gating_func"),
                            a.score_func == KT_SCORE_SIGMOID ? 2 : 1);
    if (a.n_shared_experts)
        put_u32(w, KEY("expert_shared_count"), a.n_shared_experts);
    if (a.attn_kind == KT_ATTN_MLA) {
        put_u32(w, KEY("leading_dense_block_count"), a.first_k_dense_replace);
        kt__gguf_writer_add_f32(w, KEY("expert_weights_scale"), a.routed_scaling_factor);
        put_u32(w, KEY("expert_group_count"), a.n_group);
        put_u32(w, KEY("expert_group_used_count"), a.topk_group);
        put_u32(w, KEY("attention.q_lora_rank"), a.q_lora_rank);
        put_u32(w, KEY("attention.kv_lora_rank"), a.kv_lora_rank);
        put_u32(w, KEY("nextn_predict_layers"), a.n_nextn_layers);
    }
    if (a.rope_type == KT_ROPE_YARN) {
        kt__gguf_writer_add_str(w, KEY("rope.scaling.type"), "yarn");
        kt__gguf_writer_add_f32(w, KEY("rope.scaling.factor"), a.rope_factor);
        put_u32(w, KEY("rope.scaling.original_context_length"),
                                a.rope_original_max_pos);
        kt__gguf_writer_add_f32(w, KEY("rope.scaling.yarn_log_multiplier"),
                                0.1f * a.yarn_mscale_all_dim);
        kt__gguf_writer_add_f32(w, KEY("rope.scaling.yarn_beta_fast"), a.yarn_beta_fast);
        kt__gguf_writer_add_f32(w, KEY("rope.scaling.yarn_beta_slow"), a.yarn_beta_slow);
    }
#undef KEY
    if (a.bos_token_id >= 0)
        kt__gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)a.bos_token_id);
    if (a.n_eos_token_ids)
        kt__gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)a.eos_token_ids[0]);

    /* tensors; experts stacked into [E][out][in] buffers kept until the write */
    void *stacks[64];
    size_t n_stacks = 0;
    for (size_t i = 0; i < kt__st_count(set); i++) {
        const kt_st_tensor *t = kt__st_at(set, i);
        char name[200];
        unsigned layer, e;
        int off = 0;
        if (!strcmp(t->name, "model.embed_tokens.weight")) {
            add_tensor(w, "token_embd.weight", t, t->data, 0);
        } else if (!strcmp(t->name, "model.norm.weight")) {
            add_tensor(w, "output_norm.weight", t, t->data, 0);
        } else if (!strcmp(t->name, "lm_head.weight")) {
            add_tensor(w, "output.weight", t, t->data, 0);
        } else if (sscanf(t->name, "model.layers.%u.%n", &layer, &off) == 1 && off > 0) {
            const char *rest = t->name + off;
            int off2 = 0;
            if ((sscanf(rest, "mlp.experts.%u.%n", &e, &off2) == 1 ||
                 sscanf(rest, "block_sparse_moe.experts.%u.%n", &e, &off2) == 1) && off2 > 0) {
                if (e != 0)
                    continue; /* stacked when expert 0 is seen */
                const char *proj = rest + off2;
                const char *base = expert_base(proj);
                assert_non_null(base);
                uint8_t *buf = malloc(t->nbytes * a.n_routed_experts);
                assert_non_null(buf);
                for (uint32_t x = 0; x < a.n_routed_experts; x++) {
                    char en[200];
                    int prefix = (int)(strstr(t->name, "experts.") - t->name) + 8;
                    snprintf(en, sizeof en, "%.*s%u.%s", prefix, t->name, x, proj);
                    const kt_st_tensor *et = kt__st_find(set, en);
                    if (!et)
                        fail_msg("no %s", en);
                    memcpy(buf + x * t->nbytes, et->data, t->nbytes);
                }
                assert_true(n_stacks < 64);
                stacks[n_stacks++] = buf;
                snprintf(name, sizeof name, "blk.%u.%s", layer, base);
                add_tensor(w, name, t, buf, a.n_routed_experts);
                continue;
            }
            if (split_kv_b && !strcmp(rest, "self_attn.kv_b_proj.weight")) {
                /* kv_b [nh*(nope+v)][lora] -> k_b [nh][lora][nope], v_b [nh][v][lora] */
                const uint32_t nh = a.n_heads, nope = a.qk_nope_head_dim, v = a.v_head_dim,
                               lora = a.kv_lora_rank;
                const uint16_t *src = t->data;
                uint16_t *kb = malloc((size_t)nh * lora * nope * 2);
                uint16_t *vb = malloc((size_t)nh * v * lora * 2);
                assert_true(kb && vb && n_stacks + 2 <= 64);
                for (uint32_t h = 0; h < nh; h++) {
                    const uint16_t *hs = src + (size_t)h * (nope + v) * lora;
                    for (uint32_t r = 0; r < nope; r++)
                        for (uint32_t c = 0; c < lora; c++)
                            kb[((size_t)h * lora + c) * nope + r] = hs[(size_t)r * lora + c];
                    memcpy(vb + (size_t)h * v * lora, hs + (size_t)nope * lora,
                           (size_t)v * lora * 2);
                }
                stacks[n_stacks++] = kb;
                stacks[n_stacks++] = vb;
                uint64_t ne_k[3] = {nope, lora, nh}, ne_v[3] = {lora, v, nh};
                snprintf(name, sizeof name, "blk.%u.attn_k_b.weight", layer);
                assert_int_equal(kt__gguf_writer_add_tensor(w, name, 30, 3, ne_k, kb), KT_OK);
                snprintf(name, sizeof name, "blk.%u.attn_v_b.weight", layer);
                assert_int_equal(kt__gguf_writer_add_tensor(w, name, 30, 3, ne_v, vb), KT_OK);
                continue;
            }
            const char *to = NULL;
            for (size_t j = 0; j < sizeof hf_to_gguf / sizeof hf_to_gguf[0]; j++)
                if (!strcmp(rest, hf_to_gguf[j][0]))
                    to = hf_to_gguf[j][1];
            if (!to)
                fail_msg("no GGUF name for %s", t->name);
            snprintf(name, sizeof name, "blk.%u.%s", layer, to);
            add_tensor(w, name, t, t->data, 0);
        } else {
            fail_msg("unexpected tensor %s", t->name);
        }
    }
    assert_int_equal(kt__gguf_writer_write_file(w, out), KT_OK);
    kt__gguf_writer_free(w);
    for (size_t i = 0; i < n_stacks; i++)
        free(stacks[i]);
    kt__st_close(set);
    kt_model_free(m);
}

static void test_gguf_models(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"qwen3_moe_tiny", "qwen3moe"},
        {"mixtral_tiny", "llama"},
        {"deepseek_v3_tiny/bf16", "deepseek2"},
        {"minimax_m2_tiny/bf16", "minimax-m2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512], path[400];
        fixture_path(dir, sizeof dir, cases[i][0]);
        snprintf(path, sizeof path, "%s/model-%zu.gguf", tmp_root, i);
        fixture_to_gguf(cases[i][0], cases[i][1], path, false);
        kt_model *st = open_ok(dir);
        kt_model *gg = open_ok(path);
        assert_int_equal(kt_model_format(gg), KT_FORMAT_GGUF);
        kt_arch_info x = arch_of(st), y = arch_of(gg);
        assert_int_equal(y.quant_method, KT_QUANT_GGUF);
        if (!strcmp(cases[i][1], "llama")) {
            /* llama.cpp permutes q/k of llama-arch models for interleaved RoPE */
            assert_int_equal(y.rope_interleave, 1);
            y.rope_interleave = x.rope_interleave;
        }
        y.quant_method = x.quant_method;
#define CMP(f)                                                                                 \
    if ((double)x.f != (double)y.f)                                                            \
        fail_msg("%s: field %s: safetensors %g, gguf %g", cases[i][0], #f, (double)x.f,        \
                 (double)y.f);
        ARCH_FIELDS(CMP)
#undef CMP
        for (uint32_t l = 0; l < x.n_layers; l++)
            assert_int_equal(kt_model_layer_is_moe(st, l), kt_model_layer_is_moe(gg, l));
        /* every weight: same logical shape and the same bytes */
        assert_int_equal(kt_model_n_tensors(st), kt_model_n_tensors(gg));
        for (size_t t = 0; t < kt_model_n_tensors(st); t++) {
            kt_tensor_view a, b;
            a.struct_size = b.struct_size = sizeof a;
            assert_int_equal(kt_model_tensor_at(st, t, &a), KT_OK);
            b = view_of(gg, a.layer == UINT32_MAX ? 0 : a.layer, (kt_role)a.role,
                        a.expert == UINT32_MAX ? 0 : a.expert);
            if (a.rows != b.rows || a.cols != b.cols || a.nbytes != b.nbytes ||
                a.n_dims != b.n_dims || memcmp(a.shape, b.shape, sizeof a.shape) ||
                memcmp(a.data, b.data, (size_t)a.nbytes))
                fail_msg("%s: %s differs from %s", cases[i][0], a.name, b.name);
            assert_int_equal(b.storage, KT_STORAGE_PLAIN);
            assert_int_equal(b.type, a.type);
            if (kt__role_is_expert((kt_role)a.role))
                assert_true(b.flags & KT_TENSOR_F_STACKED);
        }
        kt_model_free(gg);
        kt_model_free(st);
    }

    /* DeepSeek with the kv_b projection split the way newer llama.cpp conversions do */
    {
        char dir[512], path[400];
        fixture_path(dir, sizeof dir, "deepseek_v3_tiny/bf16");
        snprintf(path, sizeof path, "%s/mla-split.gguf", tmp_root);
        fixture_to_gguf("deepseek_v3_tiny/bf16", "deepseek2", path, true);
        kt_model *st = open_ok(dir);
        kt_model *gg = open_ok(path);
        kt_arch_info x = arch_of(st), y = arch_of(gg);
        y.quant_method = x.quant_method;
#define CMP(f)                                                                                 \
    if ((double)x.f != (double)y.f)                                                            \
        fail_msg("split kv_b: field %s: safetensors %g, gguf %g", #f, (double)x.f, (double)y.f);
        ARCH_FIELDS(CMP)
#undef CMP
        assert_int_equal(kt_model_has_tensor(gg, 1, KT_ROLE_KV_B_PROJ, 0), 0);
        kt_tensor_view kvb = view_of(st, 1, KT_ROLE_KV_B_PROJ, 0);
        kt_tensor_view kb = view_of(gg, 1, KT_ROLE_K_B_PROJ, 0);
        kt_tensor_view vb = view_of(gg, 1, KT_ROLE_V_B_PROJ, 0);
        const uint32_t nh = x.n_heads, nope = x.qk_nope_head_dim, v = x.v_head_dim,
                       lora = x.kv_lora_rank;
        assert_int_equal(kb.n_dims, 3);
        assert_pair(kb.shape[0], kb.shape[1], nh, lora);
        assert_int_equal(kb.shape[2], nope);
        assert_int_equal(vb.shape[1], v);
        const uint16_t *W = kvb.data, *K = kb.data, *V = vb.data;
        for (uint32_t h = 0; h < nh; h++)
            for (uint32_t c = 0; c < lora; c++) {
                for (uint32_t r = 0; r < nope; r++)
                    assert_int_equal(K[((size_t)h * lora + c) * nope + r],
                                     W[((size_t)h * (nope + v) + r) * lora + c]);
                for (uint32_t r = 0; r < v; r++)
                    assert_int_equal(V[((size_t)h * v + r) * lora + c],
                                     W[((size_t)h * (nope + v) + nope + r) * lora + c]);
            }
        kt_model_free(gg);
        kt_model_free(st);
    }

    /* a split set as llama.cpp's gguf-split writes it: all metadata in the first shard,
     * split.no / split.count / split.tensors.count in each, tensors spread over 3 files */
    {
        char one[400], prefix[400], shard[500];
        snprintf(one, sizeof one, "%s/model-0.gguf", tmp_root); /* qwen3moe, written above */
        snprintf(prefix, sizeof prefix, "%s/qwen3-split", tmp_root);
        kt_gguf *g = NULL;
        assert_int_equal(kt__gguf_open_file(&g, one), KT_OK);
        const size_t nt = kt__gguf_tensor_count(g);
        for (uint16_t k = 0; k < 3; k++) {
            kt_gguf_writer *w = NULL;
            assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
            if (k == 0)
                for (size_t i = 0; i < kt__gguf_kv_count(g); i++) {
                    const kt_gguf_kv *kv = kt__gguf_kv_at(g, i);
                    if (strcmp(kv->key, "general.alignment"))
                        assert_int_equal(kt__gguf_writer_add(w, kv->key, &kv->value), KT_OK);
                }
            kt_gguf_value v;
            memset(&v, 0, sizeof v);
            v.type = KT_GGUF_U16;
            v.v.u = k;
            assert_int_equal(kt__gguf_writer_add(w, "split.no", &v), KT_OK);
            v.v.u = 3;
            assert_int_equal(kt__gguf_writer_add(w, "split.count", &v), KT_OK);
            assert_int_equal(kt__gguf_writer_add_i32(w, "split.tensors.count", (int32_t)nt),
                             KT_OK);
            for (size_t i = k; i < nt; i += 3) {
                const kt_gguf_tensor *t = kt__gguf_tensor_at(g, i);
                assert_int_equal(kt__gguf_writer_add_tensor(w, t->name, t->ggml_type, t->n_dims,
                                                            t->ne, t->data),
                                 KT_OK);
            }
            snprintf(shard, sizeof shard, "%s-%05u-of-00003.gguf", prefix, k + 1u);
            assert_int_equal(kt__gguf_writer_write_file(w, shard), KT_OK);
            kt__gguf_writer_free(w);
        }
        kt_model *whole = open_ok(one);
        snprintf(shard, sizeof shard, "%s-00002-of-00003.gguf", prefix); /* any shard opens */
        kt_model *split = open_ok(shard);
        assert_int_equal(kt_model_n_tensors(split), kt_model_n_tensors(whole));
        assert_int_equal(kt_model_n_ignored_tensors(split), 0);
        for (size_t i = 0; i < kt_model_n_tensors(whole); i++) {
            kt_tensor_view x, y;
            x.struct_size = y.struct_size = sizeof x;
            assert_int_equal(kt_model_tensor_at(whole, i, &x), KT_OK);
            assert_int_equal(kt_model_tensor_at(split, i, &y), KT_OK);
            assert_string_equal(x.name, y.name);
            assert_int_equal(x.nbytes, y.nbytes);
            assert_memory_equal(x.data, y.data, (size_t)x.nbytes);
        }
        kt_model_free(split);
        kt_model_free(whole);
        kt__gguf_close(g);
        /* a missing shard, and a shard whose name does not say it is one */
        snprintf(shard, sizeof shard, "%s-00003-of-00003.gguf", prefix);
        char moved[520];
        snprintf(moved, sizeof moved, "%s/renamed.gguf", tmp_root);
        assert_int_equal(rename(shard, moved), 0);
        kt_model *x = (kt_model *)0x1;
        snprintf(shard, sizeof shard, "%s-00001-of-00003.gguf", prefix);
        assert_int_equal(kt_model_open(&x, NULL, shard, NULL), KT_ERR_IO);
        assert_null(x);
        assert_non_null(strstr(kt_last_error(), "shard 3 of 3 is missing"));
        assert_int_equal(kt_model_open(&x, NULL, moved, NULL), KT_ERR_FORMAT);
        assert_non_null(strstr(kt_last_error(), "-NNNNN-of-NNNNN.gguf"));
    }

    /* hostile metadata: clean errors naming the key or the tensor */
    static const struct {
        const char *key;
        uint32_t value;
        const char *needle;
    } bad[] = {
        {"qwen3moe.attention.head_count", 0, "head_count"},
        {"qwen3moe.attention.head_count_kv", 3, "heads 4/3"},
        {"qwen3moe.expert_used_count", 9, "expert_used_count"},
        {"qwen3moe.expert_count", UINT32_MAX, "expert_count"},
        {"qwen3moe.block_count", 3, "blk.2.attn_norm.weight"},
        {"qwen3moe.block_count", 100000, "block_count"},
        {"qwen3moe.embedding_length", 65, "token_embd.weight"},
        {"qwen3moe.vocab_size", 100, "token_embd.weight"},
        {"qwen3moe.rope.dimension_count", 33, "rope 33"},
        {"qwen3moe.expert_feed_forward_length", 95, "ffn_gate_exps.weight"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[400];
        snprintf(path, sizeof path, "%s/hostile-%zu.gguf", tmp_root, i);
        g_override_key = bad[i].key;
        g_override_value = bad[i].value;
        fixture_to_gguf("qwen3_moe_tiny", "qwen3moe", path, false);
        g_override_key = NULL;
        kt_model *h = (kt_model *)0x1;
        kt_status hs = kt_model_open(&h, NULL, path, NULL);
        assert_null(h);
        if (hs != KT_ERR_FORMAT || !strstr(kt_last_error(), bad[i].needle))
            fail_msg("%s = %u: got %s: %s", bad[i].key, bad[i].value, kt_status_str(hs),
                     kt_last_error());
    }

    /* an unsupported architecture and a missing tensor: clean errors naming them */
    kt_gguf_writer *w = NULL;
    char path[400];
    snprintf(path, sizeof path, "%s/bad.gguf", tmp_root);
    assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
    kt__gguf_writer_add_str(w, "general.architecture", "mamba");
    assert_int_equal(kt__gguf_writer_write_file(w, path), KT_OK);
    kt__gguf_writer_free(w);
    kt_model *m = NULL;
    assert_int_equal(kt_model_open(&m, NULL, path, NULL), KT_ERR_UNSUPPORTED);
    assert_non_null(strstr(kt_last_error(), "mamba"));

    assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
    kt__gguf_writer_add_str(w, "general.architecture", "qwen3moe");
    kt__gguf_writer_add_u32(w, "qwen3moe.block_count", 1);
    kt__gguf_writer_add_u32(w, "qwen3moe.embedding_length", 64);
    kt__gguf_writer_add_u32(w, "qwen3moe.attention.head_count", 4);
    kt__gguf_writer_add_u32(w, "qwen3moe.expert_count", 8);
    kt__gguf_writer_add_u32(w, "qwen3moe.expert_used_count", 2);
    kt__gguf_writer_add_u32(w, "qwen3moe.expert_feed_forward_length", 32);
    kt__gguf_writer_add_u32(w, "qwen3moe.feed_forward_length", 32);
    static uint16_t embd[64 * 16];
    uint64_t ne[2] = {64, 16};
    kt__gguf_writer_add_tensor(w, "token_embd.weight", 30, 2, ne, embd);
    assert_int_equal(kt__gguf_writer_write_file(w, path), KT_OK);
    kt__gguf_writer_free(w);
    assert_int_equal(kt_model_open(&m, NULL, path, NULL), KT_ERR_FORMAT);
    if (!strstr(kt_last_error(), "blk.0.attn_norm.weight"))
        fail_msg("message: %s", kt_last_error());
    assert_null(m);
}

/* The fuzz seeds, written by tests/fuzz/make_gguf_model_seeds.py (an independent,
 * Python-only GGUF writer with llama.cpp's names), read as the script describes them. */
static void test_gguf_python_seeds(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/gguf_model/deepseek2.gguf", source_root());
    kt_model *m = open_ok(path);
    kt_arch_info a = arch_of(m);
    assert_int_equal(a.arch, KT_ARCH_DEEPSEEK_V3);
    assert_int_equal(a.dtype, KT_TYPE_F32);
    assert_int_equal(a.attn_kind, KT_ATTN_MLA);
    assert_int_equal(a.n_layers, 2);
    assert_int_equal(a.n_moe_layers, 1);
    assert_int_equal(a.q_lora_rank, 4);
    assert_int_equal(a.kv_lora_rank, 4);
    assert_int_equal(a.qk_nope_head_dim, 4);
    assert_int_equal(a.qk_rope_head_dim, 2);
    assert_int_equal(a.v_head_dim, 4);
    assert_int_equal(a.n_shared_experts, 1);
    assert_int_equal(a.shared_intermediate_size, 4);
    assert_int_equal(a.score_func, KT_SCORE_SIGMOID);
    assert_int_equal(a.score_correction_bias, 1);
    assert_int_equal(a.rope_type, KT_ROPE_YARN);
    assert_int_equal(a.rope_original_max_pos, 16);
    assert_true(fabsf(a.yarn_mscale_all_dim - 1.0f) < 1e-6f);
    double ms = 0.1 * log(4.0) + 1.0;
    assert_true(fabs(a.attn_scale - ms * ms / sqrt(6.0)) < 1e-6);
    assert_true(fabsf(a.routed_scaling_factor - 2.5f) < 1e-6f);
    assert_int_equal(kt_model_layer_is_moe(m, 0), 0);
    assert_int_equal(a.bos_token_id, 1);
    assert_int_equal(a.eos_token_ids[0], 2);
    /* values are (i % 7) * 0.01 in each tensor; expert 1 of down starts at 4 * 8 */
    kt_tensor_view v = view_of(m, 1, KT_ROLE_EXPERT_DOWN, 1);
    assert_pair(v.rows, v.cols, 8, 4);
    const float *f = v.data;
    for (int i = 0; i < 32; i++)
        assert_true(fabsf(f[i] - (float)((32 + i) % 7) * 0.01f) < 1e-7f);
    kt_model_free(m);

    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/gguf_model/qwen3moe.gguf", source_root());
    m = open_ok(path);
    a = arch_of(m);
    assert_int_equal(a.arch, KT_ARCH_QWEN3_MOE);
    assert_int_equal(a.qk_norm, KT_QK_NORM_PER_HEAD);
    assert_int_equal(a.n_kv_heads, 1);
    assert_int_equal(a.head_dim, 4);
    assert_int_equal(a.rope_interleave, 0);
    kt_model_free(m);

    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/gguf_model/llama.gguf", source_root());
    m = open_ok(path);
    a = arch_of(m);
    assert_int_equal(a.arch, KT_ARCH_MIXTRAL);
    assert_int_equal(a.rope_interleave, 1);
    assert_int_equal(a.norm_topk_prob, 1);
    kt_model_free(m);
}

/* gpt-oss as published: routed experts as MXFP4 *_blocks / *_scales (U8), output-major.
 * The fixture's other tensors are kept; the expert bytes are a counting pattern. */
static void test_gpt_oss_mxfp4(void **state)
{
    (void)state;
    char src[512], dir[600], path[700];
    fixture_path(src, sizeof src, "gpt_oss_tiny");
    snprintf(dir, sizeof dir, "%s/gpt-oss-mxfp4", tmp_root);
    mkdir(dir, 0755);
    char *t = mutate("gpt_oss_tiny", "quantization_config",
                     "{\"quant_method\":\"mxfp4\",\"modules_to_not_convert\":["
                     "\"model.layers.*.self_attn\",\"model.layers.*.mlp.router\","
                     "\"model.embed_tokens\",\"lm_head\"]}");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, t);
    free(t);
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_dir(&set, src), KT_OK);
    kt_st_writer *w = NULL;
    assert_int_equal(kt__st_writer_create(&w), KT_OK);
    const uint64_t E = 8, H = 64, I = 96;
    static uint8_t blocks[2][8 * 192 * 2 * 16], scales[2][8 * 192 * 2];
    for (size_t i = 0; i < sizeof blocks[0]; i++)
        blocks[0][i] = blocks[1][i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof scales[0]; i++)
        scales[0][i] = scales[1][i] = (uint8_t)(120 + i % 13);
    /* declare: every fixture tensor but the BF16 expert weights, then the MXFP4 ones */
    for (size_t i = 0; i < kt__st_count(set); i++) {
        const kt_st_tensor *x = kt__st_at(set, i);
        if (strstr(x->name, "experts.gate_up_proj") && !strstr(x->name, "bias"))
            continue;
        if (strstr(x->name, "experts.down_proj") && !strstr(x->name, "bias"))
            continue;
        assert_int_equal(kt__st_writer_declare(w, x->name, x->type, x->n_dims, x->shape), KT_OK);
    }
    for (int l = 0; l < 2; l++) {
        char n[128];
        uint64_t gb[4] = {E, 2 * I, H / 32, 16}, gs[3] = {E, 2 * I, H / 32};
        uint64_t db[4] = {E, H, I / 32, 16}, ds[3] = {E, H, I / 32};
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
        assert_int_equal(kt__st_writer_declare(w, n, KT_TYPE_U8, 4, gb), KT_OK);
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj_scales", l);
        assert_int_equal(kt__st_writer_declare(w, n, KT_TYPE_U8, 3, gs), KT_OK);
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj_blocks", l);
        assert_int_equal(kt__st_writer_declare(w, n, KT_TYPE_U8, 4, db), KT_OK);
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj_scales", l);
        assert_int_equal(kt__st_writer_declare(w, n, KT_TYPE_U8, 3, ds), KT_OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(kt__st_writer_begin(w, path), KT_OK);
    for (size_t i = 0; i < kt__st_count(set); i++) {
        const kt_st_tensor *x = kt__st_at(set, i);
        if ((strstr(x->name, "experts.gate_up_proj") || strstr(x->name, "experts.down_proj")) &&
            !strstr(x->name, "bias"))
            continue;
        assert_int_equal(kt__st_writer_write(w, x->name, x->data, x->nbytes), KT_OK);
    }
    for (int l = 0; l < 2; l++) {
        char n[128];
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
        assert_int_equal(kt__st_writer_write(w, n, blocks[0], E * 2 * I * 2 * 16), KT_OK);
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj_scales", l);
        assert_int_equal(kt__st_writer_write(w, n, scales[0], E * 2 * I * 2), KT_OK);
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj_blocks", l);
        assert_int_equal(kt__st_writer_write(w, n, blocks[1], E * H * 3 * 16), KT_OK);
        snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj_scales", l);
        assert_int_equal(kt__st_writer_write(w, n, scales[1], E * H * 3), KT_OK);
    }
    assert_int_equal(kt__st_writer_finish(w), KT_OK);
    kt__st_writer_free(w);
    kt__st_close(set);

    kt_model *m = open_ok(dir);
    kt_arch_info a = arch_of(m);
    assert_int_equal(a.quant_method, KT_QUANT_MXFP4);
    assert_int_equal(a.quant_block_cols, 32);
    assert_int_equal(a.n_quant_ignore, 4);
    kt_tensor_view v = view_of(m, 1, KT_ROLE_EXPERT_GATE_UP, 3);
    assert_string_equal(v.name, "model.layers.1.mlp.experts.gate_up_proj_blocks");
    assert_int_equal(v.storage, KT_STORAGE_MXFP4);
    assert_int_equal(v.layout, KT_LAYOUT_OUT_IN);
    assert_int_equal(v.type, KT_TYPE_U8);
    assert_pair(v.rows, v.cols, 2 * I, H);
    assert_int_equal(v.n_dims, 3);
    assert_pair(v.shape[0], v.shape[1], 2 * I, 2);
    assert_int_equal(v.shape[2], 16);
    assert_int_equal(v.nbytes, 2 * I * 2 * 16);
    assert_pair(v.scale_shape[0], v.scale_shape[1], 2 * I, 2);
    assert_int_equal(v.scale_nbytes, 2 * I * 2);
    /* expert 3's bytes: offset 3 * 192 * 2 * 16 of the pattern */
    const uint8_t *b = v.data, *sc = v.scale_data;
    for (size_t i = 0; i < 64; i++) {
        assert_int_equal(b[i], (uint8_t)((3 * 192 * 2 * 16 + i) * 7));
        assert_int_equal(sc[i], (uint8_t)(120 + (3 * 192 * 2 + i) % 13));
    }
    v = view_of(m, 0, KT_ROLE_EXPERT_DOWN, 7);
    assert_pair(v.rows, v.cols, H, I);
    assert_int_equal(v.shape[1], 3);
    v = view_of(m, 0, KT_ROLE_EXPERT_DOWN_BIAS, 7); /* biases stay BF16 */
    assert_int_equal(v.storage, KT_STORAGE_PLAIN);
    assert_int_equal(kt_model_n_ignored_tensors(m), 0);
    /* the estimate counts 4.25 bits per expert weight */
    kt_memory_estimate e;
    e.struct_size = sizeof e;
    assert_int_equal(kt_model_estimate(m, NULL, &e), KT_OK);
    uint64_t bias = (2 * I + H) * 2;
    assert_int_equal(e.expert_bytes, 3 * H * I / 2 + 3 * H * I / 32 + bias);
    kt_model_free(m);
    snprintf(path, sizeof path, "%s/config.json", dir); /* config only: the same bytes */
    m = open_ok(path);
    kt_memory_estimate ec;
    ec.struct_size = sizeof ec;
    assert_int_equal(kt_model_estimate(m, NULL, &ec), KT_OK);
    assert_int_equal(ec.expert_bytes, e.expert_bytes);
    assert_int_equal(ec.routed_expert_bytes, e.routed_expert_bytes);
    kt_model_free(m);
}

/* A model dir from a config and a list of (name, dims) with BF16 zeros (F32 for names
 * ending in e_score_correction_bias), the way the families' checkpoints name them. */
typedef struct synth_tensor {
    char name[128];
    uint32_t n_dims;
    uint64_t shape[3];
} synth_tensor;

static void synth_add(synth_tensor *t, size_t *n, const char *name, uint64_t a, uint64_t b)
{
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].n_dims = b ? 2 : 1;
    t[*n].shape[0] = a;
    t[*n].shape[1] = b;
    (*n)++;
}

/* The tensors every family has: embedding, final norm, lm_head. */
static void synth_add_globals(synth_tensor *t, size_t *n, uint64_t V, uint64_t H)
{
    synth_add(t, n, "model.embed_tokens.weight", V, H);
    synth_add(t, n, "model.norm.weight", H, 0);
    synth_add(t, n, "lm_head.weight", V, H);
}

/* Layer l's norms and biased attention: q [q_rows][H], k and v [kv_rows][H], o [H][q_rows]. */
static void synth_add_attention(synth_tensor *t, size_t *n, int l, uint64_t q_rows,
                                uint64_t kv_rows, uint64_t H)
{
    static const char *const parts[] = {
        "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
        "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.q_proj.bias",
        "self_attn.k_proj.bias", "self_attn.v_proj.bias", "self_attn.o_proj.weight"};
    const uint64_t rows[] = {H, H, q_rows, kv_rows, kv_rows, q_rows, kv_rows, kv_rows, H};
    const uint64_t cols[] = {0, 0, H, H, H, 0, 0, 0, q_rows};
    char nm[128];
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        snprintf(nm, sizeof nm, "model.layers.%d.%s", l, parts[k]);
        synth_add(t, n, nm, rows[k], cols[k]);
    }
}

/* Layer l's E routed experts under their Hugging Face names: gate and up [MI][H], down
 * [H][MI]. */
static void synth_add_experts(synth_tensor *t, size_t *n, int l, int E, uint64_t MI, uint64_t H)
{
    static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
    char nm[128];
    for (int e = 0; e < E; e++) {
        for (int k = 0; k < 3; k++) {
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, proj[k]);
            synth_add(t, n, nm, k == 2 ? H : MI, k == 2 ? MI : H);
        }
    }
}

static void synth_model(const char *dir, const char *config, const synth_tensor *t, size_t n)
{
    char path[700];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, config);
    kt_st_writer *w = NULL;
    assert_int_equal(kt__st_writer_create(&w), KT_OK);
    static uint8_t zeros[1 << 16];
    for (size_t i = 0; i < n; i++) {
        kt_type ty = strstr(t[i].name, "e_score_correction_bias") ? KT_TYPE_F32 : KT_TYPE_BF16;
        assert_int_equal(kt__st_writer_declare(w, t[i].name, ty, t[i].n_dims, t[i].shape),
                         KT_OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(kt__st_writer_begin(w, path), KT_OK);
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = strstr(t[i].name, "e_score_correction_bias") ? 4 : 2;
        for (uint32_t d = 0; d < t[i].n_dims; d++)
            bytes *= t[i].shape[d];
        assert_true(bytes <= sizeof zeros);
        assert_int_equal(kt__st_writer_write(w, t[i].name, zeros, bytes), KT_OK);
    }
    assert_int_equal(kt__st_writer_finish(w), KT_OK);
    kt__st_writer_free(w);
}

/* GLM-4.5 and Qwen1.5-MoE (qwen2_moe) have no fixture: tiny synthetic checkpoints with
 * their published tensor names open, and the roles land where they should. */
static void test_glm_qwen2_synthetic(void **state)
{
    (void)state;
    static synth_tensor t[256];
    size_t n = 0;
    char nm[128], dir[600];
    const uint64_t H = 32, nh = 4, nkv = 2, hd = 16, I = 64, MI = 16, E = 4, V = 16;
    /* glm4_moe: 2 layers, layer 0 dense, q/k/v bias, per-head QK norm, shared expert, MTP 2 */
    synth_add_globals(t, &n, V, H);
    for (int l = 0; l < 3; l++) { /* layer 2 is the MTP layer: ignored */
#define L(f, a, b) (snprintf(nm, sizeof nm, "model.layers.%d." f, l), synth_add(t, &n, nm, a, b))
        synth_add_attention(t, &n, l, nh * hd, nkv * hd, H);
        L("self_attn.q_norm.weight", hd, 0);
        L("self_attn.k_norm.weight", hd, 0);
        if (l == 0) {
            L("mlp.gate_proj.weight", I, H);
            L("mlp.up_proj.weight", I, H);
            L("mlp.down_proj.weight", H, I);
            continue;
        }
        L("mlp.gate.weight", E, H);
        L("mlp.gate.e_score_correction_bias", E, 0);
        L("mlp.shared_experts.gate_proj.weight", MI, H);
        L("mlp.shared_experts.up_proj.weight", MI, H);
        L("mlp.shared_experts.down_proj.weight", H, MI);
        synth_add_experts(t, &n, l, (int)E, MI, H);
#undef L
    }
    snprintf(dir, sizeof dir, "%s/glm", tmp_root);
    synth_model(dir,
                "{\"model_type\":\"glm4_moe\",\"hidden_size\":32,\"intermediate_size\":64,"
                "\"moe_intermediate_size\":16,\"num_attention_heads\":4,"
                "\"num_key_value_heads\":2,\"head_dim\":16,\"partial_rotary_factor\":0.5,"
                "\"num_hidden_layers\":2,\"n_routed_experts\":4,\"n_shared_experts\":1,"
                "\"num_experts_per_tok\":2,\"first_k_dense_replace\":1,\"n_group\":1,"
                "\"topk_group\":1,\"vocab_size\":16,\"attention_bias\":true,"
                "\"use_qk_norm\":true,\"num_nextn_predict_layers\":1,\"rope_theta\":1000000}",
                t, n);
    kt_model *m = open_ok(dir);
    kt_arch_info a = arch_of(m);
    assert_int_equal(a.arch, KT_ARCH_GLM4_MOE);
    assert_int_equal(a.rotary_dim, 8);
    assert_int_equal(a.qk_norm, KT_QK_NORM_PER_HEAD);
    assert_int_equal(kt_model_n_ignored_tensors(m), 11 + 5 + 3 * E); /* the MTP layer */
    kt_tensor_view v = view_of(m, 1, KT_ROLE_K_BIAS, 0);
    assert_string_equal(v.name, "model.layers.1.self_attn.k_proj.bias");
    v = view_of(m, 1, KT_ROLE_SCORE_CORRECTION, 0);
    assert_int_equal(v.type, KT_TYPE_F32);
    v = view_of(m, 1, KT_ROLE_SHARED_DOWN, 0);
    assert_string_equal(v.name, "model.layers.1.mlp.shared_experts.down_proj.weight");
    assert_int_equal(kt_model_has_tensor(m, 1, KT_ROLE_O_BIAS, 0), 0);
    kt_model_free(m);

    /* qwen2_moe: shared expert (singular) with its own width and a [1][H] gate */
    n = 0;
    synth_add_globals(t, &n, V, H);
    for (int l = 0; l < 1; l++) {
#define L(f, a, b) (snprintf(nm, sizeof nm, "model.layers.%d." f, l), synth_add(t, &n, nm, a, b))
        synth_add_attention(t, &n, l, nh * 8, nkv * 8, H);
        L("mlp.gate.weight", E, H);
        L("mlp.shared_expert.gate_proj.weight", 48, H);
        L("mlp.shared_expert.up_proj.weight", 48, H);
        L("mlp.shared_expert.down_proj.weight", H, 48);
        L("mlp.shared_expert_gate.weight", 1, H);
        synth_add_experts(t, &n, l, (int)E, MI, H);
#undef L
    }
    snprintf(dir, sizeof dir, "%s/qwen2", tmp_root);
    synth_model(dir,
                "{\"model_type\":\"qwen2_moe\",\"hidden_size\":32,\"intermediate_size\":64,"
                "\"moe_intermediate_size\":16,\"shared_expert_intermediate_size\":48,"
                "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_hidden_layers\":1,"
                "\"num_experts\":4,\"num_experts_per_tok\":2,\"vocab_size\":16,"
                "\"rope_theta\":1000000.0}",
                t, n);
    m = open_ok(dir);
    a = arch_of(m);
    assert_int_equal(a.head_dim, 8); /* hidden / heads */
    assert_int_equal(a.shared_intermediate_size, 48);
    v = view_of(m, 0, KT_ROLE_SHARED_EXPERT_GATE, 0);
    assert_string_equal(v.name, "model.layers.0.mlp.shared_expert_gate.weight");
    assert_pair(v.rows, v.cols, 1, H);
    v = view_of(m, 0, KT_ROLE_SHARED_UP, 0);
    assert_int_equal(v.rows, 48);
    v = view_of(m, 0, KT_ROLE_V_BIAS, 0);
    assert_int_equal(v.rows, nkv * 8);
    assert_int_equal(kt_model_n_ignored_tensors(m), 0);
    kt_model_free(m);
}

static int cancel_at_tensors(uint64_t done, uint64_t total, const char *what, void *ud)
{
    (void)done;
    (void)total;
    (*(int *)ud)++;
    return !strcmp(what, "safetensors");
}

static void test_open_options(void **state)
{
    (void)state;
    char dir[512];
    fixture_path(dir, sizeof dir, "mixtral_tiny");
    int calls = 0;
    kt_model_open_options o;
    assert_int_equal(kt_model_open_options_init(&o, sizeof o), KT_OK);
    o.progress_fn = cancel_at_tensors;
    o.progress_user_data = &calls;
    kt_model *m = NULL;
    assert_int_equal(kt_model_open(&m, NULL, dir, &o), KT_ERR_CANCELLED);
    assert_null(m);
    assert_int_equal(calls, 2);
    /* a newer caller's larger struct with a zero tail is accepted */
    struct {
        kt_model_open_options o;
        uint64_t future;
    } big;
    memset(&big, 0, sizeof big);
    big.o.struct_size = sizeof big;
    assert_int_equal(kt_model_open(&m, NULL, dir, &big.o), KT_OK);
    /* an out struct from a newer caller: tail zeroed, prefix filled */
    struct {
        kt_arch_info a;
        uint64_t future;
    } bigger;
    memset(&bigger, 0xff, sizeof bigger);
    bigger.a.struct_size = sizeof bigger;
    assert_int_equal(kt_model_arch(m, &bigger.a), KT_OK);
    assert_int_equal(bigger.a.struct_size, sizeof bigger);
    assert_int_equal(bigger.future, 0);
    assert_int_equal(bigger.a.hidden_size, 64);
    kt_arch_info small;
    small.struct_size = 16;
    assert_int_equal(kt_model_arch(m, &small), KT_ERR_INVALID_ARG);
    kt_model_free(m);
}

static void collect_log(kt_log_level level, const char *message, void *ud)
{
    char *buf = ud;
    if (level == KT_LOG_WARN && strlen(buf) + strlen(message) + 2 < 4096) {
        strcat(buf, message);
        strcat(buf, "\n");
    }
}

/* MiniMax's config names bos/eos ids past the fixture's vocabulary: a warning
 * through the runtime's logger, not a failure. */
static void test_out_of_vocab_ids_warn(void **state)
{
    (void)state;
    static char log[4096];
    log[0] = 0;
    kt_runtime_options ro = KT_RUNTIME_OPTIONS_INIT;
    ro.log_fn = collect_log;
    ro.log_user_data = log;
    kt_runtime *rt = NULL;
    assert_int_equal(kt_runtime_create(&rt, &ro), KT_OK);
    char dir[512];
    fixture_path(dir, sizeof dir, "minimax_m2_tiny/bf16");
    kt_model *m = NULL;
    assert_int_equal(kt_model_open(&m, rt, dir, NULL), KT_OK);
    assert_non_null(strstr(log, "bos_token_id 200034 is outside the vocabulary (512)"));
    assert_non_null(strstr(log, "eos_token_id 200020 is outside the vocabulary (512)"));
    kt_arch_info a = arch_of(m);
    assert_int_equal(a.bos_token_id, 200034);
    assert_int_equal(a.eos_token_ids[0], 200020);
    kt_model_free(m);
    kt_runtime_free(rt);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(kt_arch_name(KT_ARCH_KIMI_K2), "kimi_k2");
    assert_string_equal(kt_arch_name(KT_ARCH_GLM4_MOE), "glm4_moe");
    assert_null(kt_arch_name(KT_ARCH_UNKNOWN));
    assert_string_equal(kt_role_name(KT_ROLE_EXPERT_GATE_UP), "EXPERT_GATE_UP");
    assert_null(kt_role_name((kt_role)9999));
    assert_string_equal(kt_storage_name(KT_STORAGE_INT4_PACKED), "INT4_PACKED");
    assert_null(kt_storage_name((kt_storage)77));
}

/* The trained demo models in ../shared/models (KT_SHARED_MODELS): the Qwen3-MoE one is
 * too big to ship in the repo, so this runs only where the directory exists. */
static const char *shared_models(void)
{
    const char *d = getenv("KT_SHARED_MODELS");
    return d && *d ? d : "/work/shared/models";
}

static void test_shared_models(void **state)
{
    (void)state;
    static const char *const names[] = {"qwen3_moe_demo", "kimi_k2_demo"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%s", shared_models(), names[i]);
        kt_arch_info a;
        kt_model *m = open_checked(dir, &a);
        assert_int_equal(kt_model_n_ignored_tensors(m), 0);
        kt_model_free(m);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--shared-models")) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/qwen3_moe_demo", shared_models());
        struct stat sb;
        if (stat(dir, &sb) != 0)
            return 77; /* skipped: no shared models here */
        const struct CMUnitTest shared[] = {cmocka_unit_test(test_shared_models)};
        return cmocka_run_group_tests(shared, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_fixtures_match_configs),
        cmocka_unit_test(test_demo_models_open),
        cmocka_unit_test(test_views_deepseek),
        cmocka_unit_test(test_views_other_families),
        cmocka_unit_test(test_hub_style_configs),
        cmocka_unit_test(test_other_families_config_only),
        cmocka_unit_test(test_full_size_configs),
        cmocka_unit_test(test_estimate),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_bad_models),
        cmocka_unit_test(test_open_options),
        cmocka_unit_test(test_gguf_models),
        cmocka_unit_test(test_out_of_vocab_ids_warn),
        cmocka_unit_test(test_gguf_python_seeds),
        cmocka_unit_test(test_gpt_oss_mxfp4),
        cmocka_unit_test(test_glm_qwen2_synthetic),
    };
    return cmocka_run_group_tests(tests, make_tmp_root, remove_tmp_root);
}
