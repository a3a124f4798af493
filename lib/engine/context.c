/* kt_context: creation (weights for the precision, KV cache), eval in
 * chunks, cache control, greedy generation. */
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "engine_internal.h"
#include "moe/moe_internal.h"
#include "kt/hw.h"

#define KT__DEFAULT_CTX_CAP 8192
#define KT__DEFAULT_BATCH 512

KT__DEFINE_OPTIONS_INIT(kt_context_options_init, kt_context_options, KT_CONTEXT_OPTIONS_INIT)

static kt_status alloc_cache(kt_context *ctx)
{
    const kt__hparams *hp = &ctx->hp;
    size_t esz = ctx->kv_type == KT_TYPE_F32 ? 4 : 2;
    if (hp->mla) {
        ctx->k_row = hp->kv_lora_rank + hp->qk_rope;
        ctx->v_row = 0;
    } else {
        ctx->k_row = ctx->v_row = hp->n_head_kv * hp->head_dim;
    }
    ctx->k_cache = kt__calloc((size_t)hp->n_layer, sizeof(void *));
    ctx->v_cache = kt__calloc((size_t)hp->n_layer, sizeof(void *));
    if (!ctx->k_cache || !ctx->v_cache)
        return KT_ERR_NOMEM;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        uint64_t kb, vb;
        if (!kt__mul_ok((uint64_t)ctx->n_ctx * ctx->k_row, esz, &kb) ||
            !kt__mul_ok((uint64_t)ctx->n_ctx * ctx->v_row, esz, &vb))
            return kt__error(KT_ERR_LIMIT, "kt_context_create: KV cache of %d positions "
                             "overflows", ctx->n_ctx);
        ctx->k_cache[l] = kt__malloc_aligned(kb ? kb : 64, 64);
        ctx->v_cache[l] = vb ? kt__malloc_aligned(vb, 64) : NULL;
        if (!ctx->k_cache[l] || (vb && !ctx->v_cache[l]))
            return kt__error(KT_ERR_NOMEM, "kt_context_create: no memory for a KV cache of %d "
                             "positions (reduce n_ctx)", ctx->n_ctx);
    }
    return KT_OK;
}

kt_status kt_context_create(kt_context **out, kt_runtime *rt, const kt_model *model,
                            const kt_context_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_create: out is NULL");
    *out = NULL;
    if (!model)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_create: model is NULL");
    kt_context_options o = KT_CONTEXT_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_context_options");
    if (st < 0)
        return st;
    if (o.flags & ~(KT_CONTEXT_F_KV_BF16 | KT_CONTEXT_F_ENGINE_EXPERTS |
                    KT_CONTEXT_F_DENSE_WORKERS | KT_CONTEXT_F_MOE_BF16))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_options: unknown flags 0x%x", o.flags);
    if (o.precision != KT_PRECISION_FAST && o.precision != KT_PRECISION_F32)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_options: precision %d is neither "
                         "KT_PRECISION_FAST (0) nor KT_PRECISION_F32 (1)", o.precision);
    if (o.n_ctx < 0 || o.n_batch < 0 || o.n_threads < 0 || o.n_pools < 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_options: negative n_ctx %d, n_batch "
                         "%d, n_threads %d or n_pools %d", o.n_ctx, o.n_batch, o.n_threads,
                         o.n_pools);
    if (o.method != KT_METHOD_NONE && !kt_method_name((kt_method)o.method))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_options: unknown method %d", o.method);
    if (o.weight_path && o.precision == KT_PRECISION_F32)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_options: weight_path '%s' (kt-convert "
                         "output) runs on the CPU MoE backend; precision f32 runs the "
                         "checkpoint's own experts: drop one of the two", o.weight_path);
    if (o.weight_path && (o.flags & KT_CONTEXT_F_ENGINE_EXPERTS))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_options: weight_path needs the CPU MoE "
                         "backend (KT_CONTEXT_F_ENGINE_EXPERTS is set)");

    if (o.share && (o.share->model != model || o.share->gpu))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_options: the context to share is %s",
                         o.share->gpu ? "on a GPU" : "of another model");

    kt_context *ctx = kt__calloc(1, sizeof *ctx);
    if (!ctx)
        return KT_ERR_NOMEM;
    ctx->model = model;
    ctx->rt = rt;
    ctx->precision = o.share ? o.share->precision : (kt_precision)o.precision;
    st = kt__hparams_from_model(&ctx->hp, model);
    if (st < 0)
        goto fail;
    int32_t max_pos = ctx->hp.max_pos > 0 ? ctx->hp.max_pos : KT__DEFAULT_CTX_CAP;
    ctx->n_ctx = o.n_ctx ? o.n_ctx : KT_MIN(max_pos, KT__DEFAULT_CTX_CAP);
    if (o.n_ctx > max_pos)
        kt__log(rt, KT_LOG_WARN, "n_ctx %d exceeds the model's max_position_embeddings %d",
                o.n_ctx, max_pos);
    ctx->n_batch = o.n_batch ? o.n_batch : KT__DEFAULT_BATCH;
    /* Default: one worker per physical core but one, which the engine thread
     * keeps (it runs the dense layers and waits on the MoE workers). */
    if (o.n_threads) {
        ctx->n_threads = o.n_threads;
    } else {
        int32_t cores = rt ? kt_runtime_n_threads(rt) : kt_hw_physical_cores();
        ctx->n_threads = cores > 1 ? cores - 1 : 1;
    }
    /* BF16 keys perturb near-tied routers enough to flip experts, so F32 unless asked */
    ctx->kv_type = ctx->precision == KT_PRECISION_FAST && (o.flags & KT_CONTEXT_F_KV_BF16)
                       ? KT_TYPE_BF16
                       : KT_TYPE_F32;
    if (o.share) {
        /* everything but the KV cache and scratch is the other context's */
        kt_context *sh = (kt_context *)o.share; /* counts its sharers */
        sh->n_sharers++;
        ctx->share_src = sh;
        ctx->borrowed = true;
        ctx->n_threads = sh->n_threads;
        ctx->mla_mode = sh->mla_mode;
        ctx->w = sh->w;
        ctx->pool = sh->pool;
        ctx->pool_borrowed = true;
        ctx->moe = sh->moe;
        ctx->moe_index = sh->moe_index;
        ctx->moe_method = sh->moe_method;
        ctx->moe_precision = sh->moe_precision;
        ctx->moe_shared_folded = sh->moe_shared_folded;
        ctx->dense = sh->dense;
        st = alloc_cache(ctx);
        if (st < 0)
            goto fail;
        *out = ctx;
        return KT_OK;
    }
    /* BF16 expert activations flip near-tied routers (docs/engine.md): split
     * hi + lo unless asked for the faster format */
    ctx->moe_precision = (o.flags & KT_CONTEXT_F_MOE_BF16) ? KT_MOE_PREC_DEFAULT
                                                           : KT_MOE_PREC_BF16X2;
    if (ctx->precision == KT_PRECISION_FAST && !(o.flags & KT_CONTEXT_F_ENGINE_EXPERTS)) {
        st = kt__experts_init(ctx, o.method, ctx->n_threads, o.n_pools, o.weight_path);
        if (st == KT_ERR_UNSUPPORTED && o.method == KT_METHOD_NONE && !o.weight_path) {
            kt__log(rt, KT_LOG_WARN, "%s; routed experts run on the engine's own path",
                    kt_last_error());
            kt__experts_free(ctx);
        } else if (st < 0) {
            goto fail;
        }
    } else if (o.method != KT_METHOD_NONE) {
        kt__log(rt, KT_LOG_INFO, "precision f32: --kt-method %s ignored (experts run in F32)",
                kt_method_name((kt_method)o.method));
    }
    if (ctx->moe && !(o.flags & KT_CONTEXT_F_DENSE_WORKERS)) {
        /* dense layers and attention run on the MoE backend's workers: the
         * engine thread posts both kinds of job, so they never overlap */
        struct kt_pool *mp = kt__moe_backend_pool(ctx->moe);
        if (mp && kt__pool_n_threads(mp) > 1) {
            ctx->pool = mp;
            ctx->pool_borrowed = true;
        }
    } else {
        /* the engine's own workers run the dense layers and attention */
        int32_t nth = o.n_threads && !ctx->moe
                          ? o.n_threads
                          : (rt ? kt_runtime_n_threads(rt) : kt_hw_physical_cores());
        if (nth > 1) {
            kt_pool_config pc = {nth, o.n_pools, true};
            st = kt__pool_create(&ctx->pool, &pc);
            if (st < 0)
                goto fail;
        }
    }
    st = kt__weights_load(&ctx->w, &ctx->hp, model,
                          ctx->precision == KT_PRECISION_F32 ? KT_TYPE_F32 : KT_TYPE_BF16,
                          ctx->moe != NULL);
    if (st < 0)
        goto fail;
    st = kt__dense_init(ctx);
    if (st < 0)
        goto fail;
    st = alloc_cache(ctx);
    if (st < 0)
        goto fail;
    *out = ctx;
    return KT_OK;
fail:
    kt_context_free(ctx);
    return st;
}

void kt_context_free(kt_context *ctx)
{
    if (!ctx)
        return;
    kt__gpu_free(ctx);
    if (ctx->borrowed) { /* kt_context_options.share: only the cache is ours */
        memset(&ctx->w, 0, sizeof ctx->w);
        ctx->moe = NULL;
        ctx->moe_index = NULL;
        ctx->dense = NULL;
        ctx->pool = NULL;
        ctx->share_src->n_sharers--;
    }
    if (!ctx->pool_borrowed)
        kt__pool_free(ctx->pool);
    ctx->pool = NULL;
    kt__experts_free(ctx);
    kt__dense_free(ctx); /* before the weights: it points into them */
    kt__scratch_free(&ctx->scratch);
    kt__weights_free(&ctx->w, &ctx->hp);
    if (ctx->k_cache)
        for (int32_t l = 0; l < ctx->hp.n_layer; l++)
            kt__free_aligned(ctx->k_cache[l]);
    if (ctx->v_cache)
        for (int32_t l = 0; l < ctx->hp.n_layer; l++)
            kt__free_aligned(ctx->v_cache[l]);
    kt__free(ctx->k_cache);
    kt__free(ctx->v_cache);
    kt__hparams_free(&ctx->hp);
    kt__free(ctx);
}

kt_status kt_context_eval(kt_context *ctx, const int32_t *tokens, size_t n_tokens,
                          float *logits, uint32_t flags)
{
    if (!ctx || (!tokens && n_tokens))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval: NULL context or tokens");
    if (flags & ~KT_EVAL_ALL_LOGITS)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval: unknown flags 0x%x", flags);
    if (n_tokens == 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval: no tokens");
    if (n_tokens > (size_t)(ctx->n_ctx - ctx->n_past))
        return kt__error(KT_ERR_LIMIT, "context limit: %d cached + %zu new tokens exceed n_ctx "
                         "%d (create the context with a larger n_ctx)", ctx->n_past, n_tokens,
                         ctx->n_ctx);
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= ctx->hp.n_vocab)
            return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval: token %d at index %zu is "
                             "outside the vocabulary (0..%d)", tokens[i], i,
                             ctx->hp.n_vocab - 1);
    int32_t start = ctx->n_past;
    bool all = (flags & KT_EVAL_ALL_LOGITS) != 0;
    int32_t V = ctx->hp.n_vocab;
    for (size_t done = 0; done < n_tokens;) {
        int32_t T = (int32_t)KT_MIN((size_t)ctx->n_batch, n_tokens - done);
        bool last = done + (size_t)T == n_tokens;
        float *lg = NULL;
        if (logits && all)
            lg = logits + done * (size_t)V;
        else if (logits && last)
            lg = logits;
        ctx->capture_total = (int32_t)n_tokens;
        ctx->capture_off = (int32_t)done;
        kt_status st = kt__forward(ctx, tokens + done, T, lg, all);
        if (st < 0) {
            ctx->n_past = start;
            return st;
        }
        ctx->n_past += T;
        done += (size_t)T;
    }
    return KT_OK;
}

kt_status kt_context_eval_multi(kt_context *const *ctxs, size_t n_ctxs, const int32_t *tokens,
                                const size_t *n_tokens, float *logits)
{
    if (!ctxs || !n_ctxs || !tokens || !n_tokens)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval_multi: NULL argument or no "
                         "contexts");
    if (n_ctxs > (size_t)INT32_MAX)
        return kt__error(KT_ERR_LIMIT, "kt_context_eval_multi: %zu contexts", n_ctxs);
    const kt_context *c0 = ctxs[0];
    size_t total = 0;
    for (size_t i = 0; i < n_ctxs; i++) {
        const kt_context *c = ctxs[i];
        if (!c)
            return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval_multi: context %zu is NULL",
                             i);
        if (c->model != c0->model || c->precision != c0->precision)
            return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval_multi: context %zu is of "
                             "another model or precision than context 0", i);
        if (c->gpu && n_ctxs > 1)
            return kt__error(KT_ERR_UNSUPPORTED, "kt_context_eval_multi: context %zu runs on "
                             "a GPU; evaluate it on its own", i);
        for (size_t j = 0; j < i; j++)
            if (ctxs[j] == c)
                return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval_multi: contexts %zu and "
                                 "%zu are the same", j, i);
        if (n_tokens[i] == 0)
            return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval_multi: no tokens for "
                             "context %zu", i);
        if (n_tokens[i] > (size_t)(c->n_ctx - c->n_past))
            return kt__error(KT_ERR_LIMIT, "context limit: context %zu has %d cached + %zu new "
                             "tokens, more than its n_ctx %d", i, c->n_past, n_tokens[i],
                             c->n_ctx);
        for (size_t k = 0; k < n_tokens[i]; k++) {
            int32_t tok = tokens[total + k];
            if (tok < 0 || tok >= c0->hp.n_vocab)
                return kt__error(KT_ERR_INVALID_ARG, "kt_context_eval_multi: token %d (context "
                                 "%zu, index %zu) is outside the vocabulary (0..%d)", tok, i, k,
                                 c0->hp.n_vocab - 1);
        }
        total += n_tokens[i];
        if (total > (size_t)INT32_MAX / 2)
            return kt__error(KT_ERR_LIMIT, "kt_context_eval_multi: too many tokens in one pass");
    }
    if (n_ctxs == 1)
        return kt_context_eval(ctxs[0], tokens, n_tokens[0], logits, 0);
    int32_t *nt = kt__malloc_array(n_ctxs, sizeof(int32_t));
    if (!nt)
        return KT_ERR_NOMEM;
    for (size_t i = 0; i < n_ctxs; i++)
        nt[i] = (int32_t)n_tokens[i];
    kt_status st = kt__forward_multi(ctxs, (int32_t)n_ctxs, tokens, nt, logits);
    kt__free(nt);
    if (st < 0)
        return st;
    for (size_t i = 0; i < n_ctxs; i++)
        ctxs[i]->n_past += (int32_t)n_tokens[i];
    return KT_OK;
}

void kt_context_reset(kt_context *ctx)
{
    if (ctx)
        ctx->n_past = 0;
}

void kt_context_truncate(kt_context *ctx, int32_t n_keep)
{
    if (ctx && n_keep >= 0 && n_keep < ctx->n_past)
        ctx->n_past = n_keep;
}

int32_t kt_context_n_past(const kt_context *ctx) { return ctx ? ctx->n_past : 0; }
int32_t kt_context_n_ctx(const kt_context *ctx) { return ctx ? ctx->n_ctx : 0; }
int32_t kt_context_n_vocab(const kt_context *ctx) { return ctx ? ctx->hp.n_vocab : 0; }
int32_t kt_context_n_embd(const kt_context *ctx) { return ctx ? ctx->hp.n_embd : 0; }
int32_t kt_context_n_layer(const kt_context *ctx) { return ctx ? ctx->hp.n_layer : 0; }
int32_t kt_context_precision(const kt_context *ctx) { return ctx ? (int32_t)ctx->precision : 0; }

int32_t kt_context_expert_method(const kt_context *ctx)
{
    return ctx && ctx->moe ? (int32_t)ctx->moe_method : KT_METHOD_NONE;
}

int32_t kt_context_n_threads(const kt_context *ctx)
{
    if (!ctx)
        return 0;
    if (ctx->moe) {
        kt_moe_info mi = KT_MOE_INFO_INIT;
        if (kt_moe_backend_info(ctx->moe, &mi) == KT_OK)
            return mi.n_threads;
    }
    return ctx->pool ? kt__pool_n_threads(ctx->pool) : 1;
}

size_t kt_context_eos(const kt_context *ctx, int32_t *ids, size_t cap)
{
    if (!ctx)
        return 0;
    for (size_t i = 0; i < (size_t)ctx->hp.n_eos && i < cap && ids; i++)
        ids[i] = ctx->hp.eos[i];
    return (size_t)ctx->hp.n_eos;
}

int kt_context_is_eos(const kt_context *ctx, int32_t token)
{
    if (!ctx)
        return 0;
    for (int32_t i = 0; i < ctx->hp.n_eos; i++)
        if (ctx->hp.eos[i] == token)
            return 1;
    return 0;
}

/* Block maxima over 8 independent lanes (the compiler makes them vector max
 * instructions: 5x the plain scan, which cost ~0.15 ms a token over a 152k
 * vocabulary next to a 1.5 ms GPU decode step), then the first index of the
 * winning block's maximum: the index the plain scan returns (NaN never wins). */
int32_t kt_argmax(const float *x, size_t n)
{
    enum { BLOCK = 512, LANES = 8 };
    if (!x || !n)
        return -1;
    size_t best_block = 0;
    float best = x[0];
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t end = b + BLOCK < n ? b + BLOCK : n, i = b;
        float lane[LANES];
        for (int j = 0; j < LANES; j++)
            lane[j] = x[b];
        for (; i + LANES <= end; i += LANES)
            for (int j = 0; j < LANES; j++)
                lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
        float m = lane[0];
        for (int j = 1; j < LANES; j++)
            m = lane[j] > m ? lane[j] : m;
        for (; i < end; i++)
            m = x[i] > m ? x[i] : m;
        if (m > best) {
            best = m;
            best_block = b;
        }
    }
    size_t end = best_block + BLOCK < n ? best_block + BLOCK : n;
    for (size_t i = best_block; i < end; i++)
        if (x[i] == best)
            return (int32_t)i;
    return (int32_t)best_block;
}

kt_status kt_context_greedy(kt_context *ctx, const int32_t *prompt, size_t n_prompt,
                            size_t n_predict, int32_t *out_ids, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!ctx || !n_out || (n_predict && !out_ids) || (!prompt && n_prompt))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_greedy: NULL argument");
    float *logits = kt__malloc_array((size_t)ctx->hp.n_vocab, sizeof(float));
    if (!logits)
        return KT_ERR_NOMEM;
    kt_status st = KT_OK;
    if (n_prompt) {
        st = kt_context_eval(ctx, prompt, n_prompt, logits, 0);
        if (st < 0)
            goto done;
    } else if (n_predict) {
        st = kt__error(KT_ERR_INVALID_ARG, "kt_context_greedy: empty prompt");
        goto done;
    }
    for (size_t i = 0; i < n_predict; i++) {
        int32_t tok = kt_argmax(logits, (size_t)ctx->hp.n_vocab);
        out_ids[i] = tok;
        *n_out = i + 1;
        if (kt_context_is_eos(ctx, tok) || i + 1 == n_predict || ctx->n_past >= ctx->n_ctx)
            break;
        st = kt_context_eval(ctx, &tok, 1, logits, 0);
        if (st < 0)
            goto done;
    }
done:
    kt__free(logits);
    return st;
}
