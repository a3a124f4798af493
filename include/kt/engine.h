/*
 * kt/engine.h - the inference engine: a context runs a whole model (every
 * layer, attention with a KV cache, the MoE blocks) on the CPU and returns
 * logits; the evaluation side of kt-run (logits, greedy ids, perplexity) and
 * kt-chat stand on it.
 *
 *     kt_model *m = NULL;
 *     kt_model_open(&m, rt, "/models/Qwen3-30B-A3B", NULL);
 *     kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
 *     co.n_ctx = 4096;
 *     kt_context *ctx = NULL;
 *     if (kt_context_create(&ctx, rt, m, &co) < 0)
 *         fprintf(stderr, "%s\n", kt_last_error());
 *     float *logits = malloc(sizeof(float) * kt_context_n_vocab(ctx));
 *     kt_context_eval(ctx, prompt, n_prompt, logits, 0);   // prefill, last logits
 *     int32_t next = kt_argmax(logits, kt_context_n_vocab(ctx));
 *     kt_context_eval(ctx, &next, 1, logits, 0);           // one decode step
 *     kt_context_free(ctx);
 *     kt_model_free(m);
 *
 * Families: deepseek_v3 / kimi_k2 (MLA), qwen3_moe, qwen2_moe, mixtral,
 * minimax_m2, gpt_oss, glm4_moe, read from a Hugging Face directory
 * (config.json + safetensors; BF16, FP8 block-128 and compressed-tensors INT4
 * weights). Precision KT_PRECISION_F32 keeps every activation, weight and the
 * KV cache in F32 (the validation mode that matches transformers' FP32
 * outputs); KT_PRECISION_FAST keeps dense weights as stored (BF16 and FP8 read
 * in place) with F32 activations, runs the routed experts through the CPU MoE
 * backend (kt/moe.h, the checkpoint's method, activations split into two BF16
 * numbers unless KT_CONTEXT_F_MOE_BF16) and keeps an F32 KV cache unless
 * KT_CONTEXT_F_KV_BF16.
 *
 * Thread contract: a kt_context is used by one thread at a time.
 */
#ifndef KT_ENGINE_H
#define KT_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/model.h"
#include "kt/placement.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kt_context kt_context;

/* Numeric mode of a context. Values are ABI. */
typedef enum kt_precision {
    KT_PRECISION_FAST = 0, /* weights as stored (BF16/FP8), F32 accumulation (default) */
    KT_PRECISION_F32 = 1   /* F32 everywhere: validation against FP32 references     */
} kt_precision;

/* kt_context_options.flags */
/* KV cache in BF16 (half the memory) instead of F32; fast precision only.
 * Rounding keys to BF16 moves attention outputs by ~1e-3 relative, enough to
 * flip near-tied expert choices, so it is opt-in. */
#define KT_CONTEXT_F_KV_BF16 (1u << 0)
/* Fast precision: run the routed experts on the engine's own F32-activation
 * path (weights widened row by row) instead of the CPU MoE backend, whose
 * kernels take BF16 activations. Slower; for validating the backend. */
#define KT_CONTEXT_F_ENGINE_EXPERTS (1u << 1)
/* Give the dense layers and attention their own workers (one per physical
 * core, pinned) instead of the CPU MoE backend's (by default they run on the
 * backend's pool, or on the calling thread when it has one worker); without a
 * backend they always have them. Two pools then share the cores, alternating
 * (each spins briefly after its job); this may pay off on large idle machines
 * and costs on small or busy ones: measure with `kt-bench engine`. */
#define KT_CONTEXT_F_DENSE_WORKERS (1u << 2)
/* Fast precision: hand the routed experts to the CPU MoE backend with its
 * fastest activation format (KT_MOE_PREC_DEFAULT: BF16, or INT8 for RAWINT4
 * decode) instead of the default KT_MOE_PREC_BF16X2 (activations split into
 * two BF16 numbers, as accurate as F32). Faster prefill (about 1.5-2x in the
 * expert products), but ~1e-2 relative error per MoE layer, which flips
 * near-tied routers at single positions. Since 0.1. */
#define KT_CONTEXT_F_MOE_BF16 (1u << 3)

typedef struct kt_context_options {
    uint32_t struct_size;    /* sizeof(kt_context_options); set by the INIT macro        */
    uint32_t flags;          /* KT_CONTEXT_F_*; unknown bits are rejected                */
    int32_t n_ctx;           /* KV cache positions; 0: the model's max_position_embeddings,
                                capped at 8192                                             */
    int32_t n_batch;         /* prefill chunk (tokens per forward); 0: 512                */
    int32_t precision;       /* kt_precision                                             */
    int32_t method;          /* kt_method of the routed experts; 0: as the weights are    */
    int32_t n_threads;       /* CPU MoE worker threads; 0: the runtime's threads minus one
                                (the calling thread runs the dense layers)               */
    int32_t n_pools;         /* thread pools (one per NUMA node); 0: automatic            */
    const char *weight_path; /* libkt CPU expert weights (kt-convert output); NULL: none.
                                Copied at create time.                                    */
    /* Another context of the same model whose weights, MoE backend, workers and
     * packed dense copies this one borrows instead of building its own (its own:
     * only the KV cache and scratch). precision, flags but KT_CONTEXT_F_KV_BF16,
     * method, n_threads, n_pools and weight_path are then taken from it. It must
     * outlive this context, and the contexts sharing it are used by one thread at
     * a time between them (a server's scheduler thread). NULL: none. Since 0.1. */
    const kt_context *share;
} kt_context_options;

#define KT_CONTEXT_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_context_options), 0u, 0, 0, KT_PRECISION_FAST, 0, 0, 0, NULL, NULL }

/* Fills *opts with defaults for a struct of struct_size bytes. Since 0.1. */
KT_API kt_status kt_context_options_init(kt_context_options *opts, size_t struct_size);

/* Creates a context for an opened model: prepares the weights for the
 * precision (F32 copies, or the BF16 mapping itself), the routed-expert path
 * and a KV cache of opts->n_ctx positions. rt may be NULL (default logging).
 * opts may be NULL (defaults). Fails with KT_ERR_UNSUPPORTED for a family or
 * weight storage the engine cannot run, KT_ERR_INVALID_ARG for bad options,
 * KT_ERR_NOMEM. Caller owns *out; free with kt_context_free(); *out is NULL on
 * failure. `model` and `rt` are borrowed and must outlive the context.
 * Since 0.1. */
KT_API kt_status kt_context_create(kt_context **out, kt_runtime *rt, const kt_model *model,
                                   const kt_context_options *opts);

/* Frees a context; NULL is a no-op. Since 0.1. */
KT_API void kt_context_free(kt_context *ctx);

/* kt_context_eval() flags. */
#define KT_EVAL_ALL_LOGITS (1u << 0) /* logits for every token, not only the last */

/* Runs tokens[0..n_tokens) at positions n_past.., appends them to the KV
 * cache (prefill in chunks of n_batch) and writes logits: [n_vocab] for the
 * last token, or [n_tokens][n_vocab] with KT_EVAL_ALL_LOGITS. `logits` may be
 * NULL (only the cache is filled). A token outside the vocabulary is
 * KT_ERR_INVALID_ARG; n_past + n_tokens > n_ctx is KT_ERR_LIMIT. On failure
 * the cache is rolled back to its state before the call. Since 0.1. */
KT_API kt_status kt_context_eval(kt_context *ctx, const int32_t *tokens, size_t n_tokens,
                                 float *logits, uint32_t flags);

/* Evaluates several contexts in one forward pass, for servers that run many
 * sequences at once: context i takes n_tokens[i] >= 1 tokens (the spans are
 * concatenated in `tokens`) at its own n_past and appends them to its own KV
 * cache. The dense layers, the routers and the routed experts run once over
 * all the tokens (one weight read per step for every running sequence);
 * attention runs per context over its own cache. Writes the logits of each
 * context's last token to logits[i * n_vocab ...] ([n_ctxs][n_vocab]; may be
 * NULL). The contexts must be distinct, of the same model and precision,
 * without a GPU runtime; the pass runs on ctxs[0]'s weights, MoE backend and
 * workers (its expert statistics and route trace, if attached, see every
 * token), so the others may be created with n_threads 1. Results equal
 * separate kt_context_eval() calls up to summation order (identical in f32
 * precision). One call is one pass: there is no n_batch chunking. A token
 * outside the vocabulary, a duplicate or mismatched context is
 * KT_ERR_INVALID_ARG (naming the index); a context that would pass its n_ctx
 * is KT_ERR_LIMIT. On failure no context's n_past moves. Since 0.1. */
KT_API kt_status kt_context_eval_multi(kt_context *const *ctxs, size_t n_ctxs,
                                       const int32_t *tokens, const size_t *n_tokens,
                                       float *logits);

/* Forgets every cached position (n_past = 0). Since 0.1. */
KT_API void kt_context_reset(kt_context *ctx);
/* Keeps the first n_keep positions (n_keep >= n_past is a no-op). Since 0.1. */
KT_API void kt_context_truncate(kt_context *ctx, int32_t n_keep);

/* Getters; never fail. Since 0.1. */
KT_API int32_t kt_context_n_past(const kt_context *ctx);
KT_API int32_t kt_context_n_ctx(const kt_context *ctx);
KT_API int32_t kt_context_n_vocab(const kt_context *ctx);
KT_API int32_t kt_context_n_embd(const kt_context *ctx);
KT_API int32_t kt_context_n_layer(const kt_context *ctx);
/* Effective precision (kt_precision). */
KT_API int32_t kt_context_precision(const kt_context *ctx);
/* kt_method the routed experts run with on the CPU MoE backend, or
 * KT_METHOD_NONE when they run on the engine's own path (f32 precision,
 * KT_CONTEXT_F_ENGINE_EXPERTS, or storage the backend cannot read). */
KT_API int32_t kt_context_expert_method(const kt_context *ctx);
/* Worker threads of the MoE backend (or of the engine's dense workers when
 * there is no backend); 1 when everything runs on the calling thread. */
KT_API int32_t kt_context_n_threads(const kt_context *ctx);

/* End-of-sequence ids from config.json (eos_token_id, one or a list; ids
 * outside the vocabulary are dropped with a warning). Writes up to `cap` ids
 * and returns how many there are. Since 0.1. */
KT_API size_t kt_context_eos(const kt_context *ctx, int32_t *ids, size_t cap);
/* 1 if `token` is one of the EOS ids, else 0. Since 0.1. */
KT_API int kt_context_is_eos(const kt_context *ctx, int32_t token);

/* Activation statistics: while attached, every evaluated token's routed
 * experts are counted into `stats` (kt_expert_stats_record per MoE layer, and
 * the tokens once per forward step). Its shape must be kt_context_n_layer() x
 * the model's routed experts, else KT_ERR_INVALID_ARG. NULL detaches. `stats`
 * is borrowed and must outlive the attachment. Since 0.1. */
KT_API kt_status kt_context_set_expert_stats(kt_context *ctx, kt_expert_stats *stats);
/* Routing trace: while attached, every MoE layer of every forward step
 * appends its routed ids (ids[T][top_k], before shared experts) to `trace`,
 * which must have the context's layers, routed experts and top_k. NULL
 * detaches. Borrowed. Since 0.1. */
KT_API kt_status kt_context_set_route_trace(kt_context *ctx, kt_route_trace *trace);

/* Index of the largest of x[0..n) (the lowest index on ties); -1 if n is 0.
 * Since 0.1. */
KT_API int32_t kt_argmax(const float *x, size_t n);

/* Greedy generation: evaluates prompt[0..n_prompt) after the cached
 * positions, then writes up to n_predict argmax tokens to out_ids, stopping
 * after an EOS id (which is written). Every generated token but the last is
 * evaluated, so the cache ends holding the prompt and out_ids[0..*n_out-1).
 * *n_out receives how many were written. A prompt that would pass n_ctx is
 * KT_ERR_LIMIT; generation stops quietly at n_ctx. Since 0.1. */
KT_API kt_status kt_context_greedy(kt_context *ctx, const int32_t *prompt, size_t n_prompt,
                                   size_t n_predict, int32_t *out_ids, size_t *n_out);

#ifdef __cplusplus
}
#endif
#endif /* KT_ENGINE_H */
