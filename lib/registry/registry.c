/* Known models: defaults and the published configs (values of
 * research/landscape.md §3 and kt-kernel's registry, ktransformers.md §6.3). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kt/registry.h"
#include "kt_internal.h"

#define GB 1000000000ull

/* ---- published configs (only the fields libkt reads) ---- */

#define DSV3_COMMON                                                                            \
    "\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,"                  \
    "\"hidden_act\":\"silu\",\"hidden_size\":7168,\"intermediate_size\":18432,"                \
    "\"kv_lora_rank\":512,\"moe_intermediate_size\":2048,\"moe_layer_freq\":1,"                 \
    "\"n_shared_experts\":1,\"norm_topk_prob\":true,\"num_experts_per_tok\":8,"                \
    "\"num_hidden_layers\":61,\"pretraining_tp\":1,\"q_lora_rank\":1536,"                       \
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"rms_norm_eps\":1e-06,"                  \
    "\"scoring_func\":\"sigmoid\",\"tie_word_embeddings\":false,\"topk_method\":\"noaux_tc\","  \
    "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"v_head_dim\":128,"

#define FP8_QUANT                                                                              \
    "\"quantization_config\":{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\","              \
    "\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}"

#define INT4_QUANT                                                                             \
    "\"quantization_config\":{\"config_groups\":{\"group_0\":{\"input_activations\":null,"      \
    "\"output_activations\":null,\"targets\":[\"Linear\"],\"weights\":{\"actorder\":null,"      \
    "\"block_structure\":null,\"dynamic\":false,\"group_size\":32,\"num_bits\":4,"              \
    "\"observer\":\"minmax\",\"observer_kwargs\":{},\"strategy\":\"group\",\"symmetric\":true," \
    "\"type\":\"int\"}}},\"format\":\"pack-quantized\",\"ignore\":[\"lm_head\","                \
    "\"re:.*self_attn.*\",\"re:.*shared_experts.*\","                                          \
    "\"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\"],\"kv_cache_scheme\":null,"                 \
    "\"quant_method\":\"compressed-tensors\",\"quantization_status\":\"compressed\"}"

#define KIMI_K2(max_pos, factor, quant)                                                        \
    "{" DSV3_COMMON "\"bos_token_id\":163584,\"eos_token_id\":163585,"                         \
    "\"first_k_dense_replace\":1,\"max_position_embeddings\":" max_pos ","                     \
    "\"model_type\":\"kimi_k2\",\"n_group\":1,\"n_routed_experts\":384,"                        \
    "\"num_attention_heads\":64,\"num_key_value_heads\":64,\"num_nextn_predict_layers\":0,"     \
    "\"rope_scaling\":{\"beta_fast\":1.0,\"beta_slow\":1.0,\"factor\":" factor ","             \
    "\"mscale\":1.0,\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":4096,"          \
    "\"type\":\"yarn\"},\"rope_theta\":50000.0,\"routed_scaling_factor\":2.827,"                \
    "\"topk_group\":1,\"vocab_size\":163840," quant "}"

#define DEEPSEEK_V3                                                                            \
    "{" DSV3_COMMON "\"bos_token_id\":0,\"eos_token_id\":1,\"first_k_dense_replace\":3,"       \
    "\"max_position_embeddings\":163840,\"model_type\":\"deepseek_v3\",\"n_group\":8,"          \
    "\"n_routed_experts\":256,\"num_attention_heads\":128,\"num_key_value_heads\":128,"         \
    "\"num_nextn_predict_layers\":1,\"rope_scaling\":{\"beta_fast\":32,\"beta_slow\":1,"        \
    "\"factor\":40,\"mscale\":1.0,\"mscale_all_dim\":1.0,"                                      \
    "\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},\"rope_theta\":10000,"        \
    "\"routed_scaling_factor\":2.5,\"topk_group\":4,\"vocab_size\":129280," FP8_QUANT "}"

#define MINIMAX_M2                                                                             \
    "{\"architectures\":[\"MiniMaxM2ForCausalLM\"],\"attn_type_list\":[" ATTN62 "],"            \
    "\"bos_token_id\":200034,\"eos_token_id\":200020,\"head_dim\":128,\"hidden_act\":\"silu\"," \
    "\"hidden_size\":3072,\"intermediate_size\":1536,\"max_position_embeddings\":196608,"      \
    "\"model_type\":\"minimax_m2\",\"mtp_transformer_layers\":1,\"num_attention_heads\":48,"    \
    "\"num_experts_per_tok\":8,\"num_hidden_layers\":62,\"num_key_value_heads\":8,"             \
    "\"num_local_experts\":256,\"num_mtp_modules\":3,\"qk_norm_type\":\"per_layer\","           \
    "\"rms_norm_eps\":1e-06,\"rope_theta\":5000000,\"rotary_dim\":64,"                          \
    "\"scoring_func\":\"sigmoid\",\"shared_intermediate_size\":0,"                               \
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"use_mtp\":true,"              \
    "\"use_qk_norm\":true,\"use_routing_bias\":true,\"vocab_size\":200064,"                     \
    "\"quantization_config\":{\"activation_scheme\":\"dynamic\",\"fmt\":\"float8_e4m3fn\","     \
    "\"quant_method\":\"fp8\",\"weight_block_size\":[128,128],"                                 \
    "\"modules_to_not_convert\":[\"gate\",\"e_score_correction_bias\",\"lm_head\"]}}"
#define ATTN10 "1,1,1,1,1,1,1,1,1,1"
#define ATTN62 ATTN10 "," ATTN10 "," ATTN10 "," ATTN10 "," ATTN10 "," ATTN10 ",1,1"

#define QWEN3_MOE(hidden, layers, heads, moe_inter)                                           \
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"attention_bias\":false,"                  \
    "\"decoder_sparse_step\":1,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":"      \
    hidden ",\"intermediate_size\":6144,\"max_position_embeddings\":40960,"                    \
    "\"mlp_only_layers\":[],\"model_type\":\"qwen3_moe\",\"moe_intermediate_size\":"           \
    moe_inter ",\"norm_topk_prob\":true,\"num_attention_heads\":" heads ","                   \
    "\"num_experts\":128,\"num_experts_per_tok\":8,\"num_hidden_layers\":" layers ","          \
    "\"num_key_value_heads\":4,\"rms_norm_eps\":1e-06,\"rope_scaling\":null,"                  \
    "\"rope_theta\":1000000.0,\"sliding_window\":null,\"tie_word_embeddings\":false,"          \
    "\"torch_dtype\":\"bfloat16\",\"use_sliding_window\":false,\"vocab_size\":151936,"         \
    "\"bos_token_id\":151643,\"eos_token_id\":151645}"

#define GLM45                                                                                  \
    "{\"architectures\":[\"Glm4MoeForCausalLM\"],\"attention_bias\":true,"                     \
    "\"eos_token_id\":[151329,151336,151338],\"first_k_dense_replace\":3,\"head_dim\":128,"    \
    "\"hidden_act\":\"silu\",\"hidden_size\":5120,\"intermediate_size\":12288,"                \
    "\"max_position_embeddings\":131072,\"model_type\":\"glm4_moe\","                           \
    "\"moe_intermediate_size\":1536,\"n_group\":1,\"n_routed_experts\":160,"                    \
    "\"n_shared_experts\":1,\"norm_topk_prob\":true,\"num_attention_heads\":96,"               \
    "\"num_experts_per_tok\":8,\"num_hidden_layers\":92,\"num_key_value_heads\":8,"             \
    "\"num_nextn_predict_layers\":1,\"pad_token_id\":151329,\"partial_rotary_factor\":0.5,"     \
    "\"rms_norm_eps\":1e-05,\"rope_scaling\":null,\"rope_theta\":1000000,"                      \
    "\"routed_scaling_factor\":2.5,\"tie_word_embeddings\":false,\"topk_group\":1,"            \
    "\"torch_dtype\":\"bfloat16\",\"use_qk_norm\":true,\"vocab_size\":151552}"

#define GPT_OSS(layers, experts, layer_types)                                                 \
    "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,"                     \
    "\"eos_token_id\":200002,\"experts_per_token\":4,\"head_dim\":64,\"hidden_act\":\"silu\","  \
    "\"hidden_size\":2880,\"initial_context_length\":4096,\"intermediate_size\":2880,"          \
    "\"layer_types\":[" layer_types "],\"max_position_embeddings\":131072,"                    \
    "\"model_type\":\"gpt_oss\",\"num_attention_heads\":64,\"num_experts_per_tok\":4,"          \
    "\"num_hidden_layers\":" layers ",\"num_key_value_heads\":8,\"num_local_experts\":"        \
    experts ",\"pad_token_id\":199999,\"rms_norm_eps\":1e-05,\"rope_scaling\":{"               \
    "\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"                                     \
    "\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\",\"truncate\":false},"     \
    "\"rope_theta\":150000,\"sliding_window\":128,\"swiglu_limit\":7.0,"                        \
    "\"tie_word_embeddings\":false,\"vocab_size\":201088,\"quantization_config\":{"            \
    "\"modules_to_not_convert\":[\"model.layers.*.self_attn\",\"model.layers.*.mlp.router\","   \
    "\"model.embed_tokens\",\"lm_head\"],\"quant_method\":\"mxfp4\"}}"
#define SF "\"sliding_attention\",\"full_attention\""
#define SF4 SF "," SF "," SF "," SF
#define SF12 SF4 "," SF4 "," SF4

/* name, display, hub, aliases, served, method, config, ctx, running, chunk, threshold,
 * max_tp, rule num/den, download GB */
typedef struct entry_row {
    const char *name, *display, *hub, *aliases, *served, *method, *config;
    uint32_t ctx, running, chunk, threshold, max_tp, num, den;
    uint64_t download_gb;
} entry_row;

static const entry_row rows[] = {
    {"kimi-k2-thinking", "Kimi-K2-Thinking", "moonshotai/Kimi-K2-Thinking",
     "kimi-thinking,k2-thinking,kimi,k2t", "Kimi-K2-Thinking", "RAWINT4",
     KIMI_K2("262144", "64.0", INT4_QUANT), 100000, 16, 4096, 400, 0, 2, 3, 594},
    {"kimi-k2", "Kimi-K2-Instruct-0905", "moonshotai/Kimi-K2-Instruct-0905",
     "kimi-k2-instruct,kimi-k2-0905,k2", "Kimi-K2-Instruct-0905", "FP8",
     KIMI_K2("262144", "64.0", FP8_QUANT), 100000, 16, 4096, 4096, 0, 1, 3, 1029},
    {"deepseek-v3", "DeepSeek-V3-0324", "deepseek-ai/DeepSeek-V3-0324",
     "deepseek-v3-0324,dsv3,deepseek3,v3-0324", "DeepSeek-V3-0324", "FP8", DEEPSEEK_V3, 100000,
     16, 4096, 4096, 0, 1, 3, 689},
    {"deepseek-r1", "DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1-0528",
     "deepseek-r1-0528,dsr1,r1,r1-0528", "DeepSeek-R1-0528", "FP8", DEEPSEEK_V3, 100000, 16,
     4096, 4096, 0, 1, 3, 689},
    {"minimax-m2", "MiniMax-M2", "MiniMaxAI/MiniMax-M2", "m2", "MiniMax-M2", "FP8", MINIMAX_M2,
     100000, 16, 4096, 4096, 4, 1, 1, 230},
    {"minimax-m2.1", "MiniMax-M2.1", "MiniMaxAI/MiniMax-M2.1", "m2.1", "MiniMax-M2.1", "FP8",
     MINIMAX_M2, 100000, 16, 4096, 4096, 4, 1, 1, 230},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", "qwen3-30b,qwen3-moe-30b",
     "Qwen3-30B-A3B", "BF16", QWEN3_MOE("2048", "48", "32", "768"), 40960, 16, 8192, 4096, 0, 0,
     0, 61},
    {"qwen3-235b-a22b", "Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B", "qwen3-235b,qwen3-moe-235b",
     "Qwen3-235B-A22B", "BF16", QWEN3_MOE("4096", "94", "64", "1536"), 40960, 16, 8192, 4096, 0,
     0, 0, 470},
    {"glm-4.5", "GLM-4.5", "zai-org/GLM-4.5", "glm4.5,glm-45", "GLM-4.5", "BF16", GLM45, 100000,
     16, 8192, 4096, 0, 0, 0, 717},
    {"gpt-oss-20b", "gpt-oss-20b", "openai/gpt-oss-20b", "gptoss-20b,oss-20b", "gpt-oss-20b",
     "MXFP4", GPT_OSS("24", "32", SF12), 131072, 16, 8192, 4096, 0, 0, 0, 14},
    {"gpt-oss-120b", "gpt-oss-120b", "openai/gpt-oss-120b", "gptoss-120b,oss-120b",
     "gpt-oss-120b", "MXFP4", GPT_OSS("36", "128", SF12 "," SF4 "," SF "," SF), 131072, 16,
     8192, 4096, 0, 0, 0, 65},
};

#define N_ROWS (sizeof rows / sizeof rows[0])

size_t kt_registry_count(void)
{
    return N_ROWS;
}

kt_status kt_registry_get(size_t index, kt_registry_entry *out)
{
    if (!out || out->struct_size < sizeof(kt_registry_entry))
        return kt__error(KT_ERR_INVALID_ARG, "kt_registry_get: out is NULL or its struct_size "
                         "is too small");
    if (index >= N_ROWS)
        return kt__error(KT_ERR_INVALID_ARG, "kt_registry_get: index %zu of %zu", index,
                         (size_t)N_ROWS);
    const entry_row *r = &rows[index];
    kt_registry_entry e;
    memset(&e, 0, sizeof e);
    e.struct_size = out->struct_size < sizeof e ? out->struct_size : (uint32_t)sizeof e;
    e.name = r->name;
    e.display_name = r->display;
    e.hub_id = r->hub;
    e.aliases = r->aliases;
    e.served_name = r->served;
    e.method = r->method;
    e.config_json = r->config;
    e.context_length = r->ctx;
    e.max_running_requests = r->running;
    e.chunked_prefill = r->chunk;
    e.gpu_prefill_threshold = r->threshold;
    e.max_tp = r->max_tp;
    e.gpu_rule_num = r->num;
    e.gpu_rule_den = r->den;
    e.download_bytes = r->download_gb * GB;
    memcpy(out, &e, sizeof e);
    return KT_OK;
}

/* Whether `name` is one of the comma-separated words of `list`. */
static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncasecmp(p, name, n))
            return 1;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

kt_status kt_registry_find(const char *name, kt_registry_entry *out)
{
    if (!name || !out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_registry_find: NULL argument");
    /* canonical names and hub ids first, so that an alias shared by two
     * generations ("k2") can never shadow another entry's own name */
    for (size_t i = 0; i < N_ROWS; i++)
        if (!strcasecmp(rows[i].name, name) || !strcasecmp(rows[i].display, name) ||
            !strcasecmp(rows[i].hub, name))
            return kt_registry_get(i, out);
    for (size_t i = 0; i < N_ROWS; i++)
        if (in_list(rows[i].aliases, name))
            return kt_registry_get(i, out);
    kt_buf b = KT_BUF_INIT;
    for (size_t i = 0; i < N_ROWS; i++)
        kt__buf_appendf(&b, "%s%s", i ? ", " : "", rows[i].name);
    kt_status st = kt__error(KT_ERR_NOT_FOUND, "unknown model '%s' (known: %s; or give a model "
                             "directory)", name, b.ptr ? b.ptr : "");
    kt_buf_dispose(&b);
    return st;
}

uint32_t kt_registry_gpu_experts(const kt_registry_entry *e, uint32_t tp, uint64_t vram_bytes)
{
    if (!e || !e->gpu_rule_den || !tp)
        return 0;
    const uint64_t reserve = 16ull * GB;
    if (vram_bytes <= reserve)
        return 0;
    uint64_t v = (uint64_t)tp * (vram_bytes - reserve) / GB; /* floor(TP x (G - 16)) */
    return (uint32_t)(v * e->gpu_rule_num / e->gpu_rule_den);
}

kt_status kt_registry_open_config(const kt_registry_entry *e, kt_runtime *rt, kt_model **out)
{
    if (!e || !out || !e->config_json)
        return kt__error(KT_ERR_INVALID_ARG, "kt_registry_open_config: NULL argument");
    *out = NULL;
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/kt-registry-XXXXXX.json", dir && *dir ? dir : "/tmp");
    int fd = mkstemps(path, 5);
    if (fd < 0)
        return kt__error(KT_ERR_IO, "%s: cannot create a temporary config", path);
    size_t n = strlen(e->config_json);
    ssize_t w = write(fd, e->config_json, n);
    close(fd);
    if (w != (ssize_t)n) {
        unlink(path);
        return kt__error(KT_ERR_IO, "%s: cannot write the temporary config", path);
    }
    kt_model_open_options o = KT_MODEL_OPEN_OPTIONS_INIT;
    o.flags = KT_MODEL_OPEN_F_CONFIG_ONLY;
    kt_status st = kt_model_open(out, rt, path, &o);
    unlink(path);
    if (st < 0)
        return kt__error(st, "registry entry %s: published config: %s", e->name,
                         kt_last_error());
    return KT_OK;
}
