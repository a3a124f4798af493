/* kt-bench: helpers of the whole-model benches (engine, e2e): random prompts, a synthetic
 * Qwen3-MoE config, the model's description, a timed prefill and decode. */
#include "bench.h"

#include <string.h>

void bench_random_ids(int32_t *ids, size_t n, int32_t V)
{
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)(bench_rng(&s) % (uint64_t)V);
}

void bench_write_qwen3_config(FILE *f, const bench_qwen3_config *c)
{
    fprintf(f,
            "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\",\n"
            " \"hidden_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d,\n"
            " \"head_dim\": %d, \"num_hidden_layers\": %d, \"num_experts\": %d,\n"
            " \"num_experts_per_tok\": %d, \"moe_intermediate_size\": %d,\n"
            " \"intermediate_size\": 6144, \"vocab_size\": %d, \"rms_norm_eps\": 1e-06,\n"
            " \"rope_theta\": 1000000.0, \"max_position_embeddings\": 40960,\n"
            " \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [],\n"
            " \"tie_word_embeddings\": false, \"eos_token_id\": %d,\n"
            " \"torch_dtype\": \"bfloat16\"}\n",
            c->hidden, c->heads, c->kv_heads, c->head_dim, c->layers, c->experts, c->top_k,
            c->expert_ffn, c->vocab, c->eos);
}

bool bench_model_arch(const kt_model *m, kt_arch_info *a)
{
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
    return kt_model_arch(m, a) >= 0;
}

bool bench_model_tensor(const kt_model *m, size_t i, kt_tensor_view *v)
{
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    return kt_model_tensor_at(m, i, v) >= 0;
}

bool bench_prefill_decode(kt_context *ctx, const int32_t *ids, int64_t P, int64_t gen,
                          float *logits, double *t_pre, double *t_dec)
{
    int32_t V = kt_context_n_vocab(ctx);
    kt_context_reset(ctx);
    double t0 = bench_now();
    if (kt_context_eval(ctx, ids, (size_t)P, logits, 0) < 0)
        return false;
    *t_pre = bench_now() - t0;
    t0 = bench_now();
    for (int64_t g = 0; g < gen; g++) {
        int32_t tok = kt_argmax(logits, (size_t)V);
        if (kt_context_eval(ctx, &tok, 1, logits, 0) < 0)
            return false;
    }
    *t_dec = bench_now() - t0;
    return true;
}
