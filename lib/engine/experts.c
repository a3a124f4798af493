/* Routed experts of the fast path through the CPU MoE backend (kt/moe.h):
 * the expert weights are handed over in place (mmap'ed views of the model) in
 * the method their storage implies (BF16, FP8, RAWINT4), one backend for all
 * MoE layers. Precision f32 keeps the engine's own F32 expert path. */

#include "convert/cpu_weights.h"
#include "engine_internal.h"
#include "moe/moe_internal.h"

typedef struct layer_arrays {
    const void **p[9]; /* gate up down gate_s up_s down_s gate_b up_b down_b */
} layer_arrays;

/* The first n_arrays arrays of a, of n NULL pointers each. */
static kt_status arrays_alloc(layer_arrays *a, int n_arrays, int32_t n)
{
    for (int i = 0; i < n_arrays; i++)
        if (!(a->p[i] = kt__calloc((size_t)n, sizeof(void *))))
            return KT_ERR_NOMEM;
    return KT_OK;
}

/* arr [n_moe] (NULL: nothing) with every array it holds. */
static void layers_free(layer_arrays *arr, int32_t n_moe)
{
    for (int32_t i = 0; arr && i < n_moe; i++)
        for (int p = 0; p < 9; p++)
            kt__free((void *)arr[i].p[p]);
    kt__free(arr);
}

int32_t kt__experts_n_moe(const kt__hparams *hp)
{
    int32_t n = 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        n += hp->layer_moe[l];
    return n;
}

kt_moe_desc kt__experts_desc(const kt__hparams *hp, int32_t method, int32_t n_experts,
                             int32_t top_k)
{
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = method;
    d.hidden = (uint32_t)hp->n_embd;
    d.intermediate = (uint32_t)hp->n_ff_exp;
    d.n_experts = (uint32_t)n_experts;
    d.top_k = (uint32_t)top_k;
    return d;
}

kt_status kt__experts_backend_create(kt_context *ctx, const kt_moe_desc *d,
                                     const kt_moe_layer_weights *lws, int32_t n_moe,
                                     int32_t n_threads, int32_t n_pools, bool folded,
                                     const char *from)
{
    kt_moe_options mo = KT_MOE_OPTIONS_INIT;
    mo.n_threads = n_threads;
    mo.n_pools = n_pools;
    mo.max_tokens = ctx->n_batch;
    mo.act_precision = ctx->moe_precision; /* LLAMAFILE: ignored */
    kt_status st = kt_moe_backend_create(&ctx->moe, ctx->rt, d, lws, (uint32_t)n_moe, &mo);
    if (st < 0)
        kt__error_prefix(st, "engine: CPU MoE backend (%s%s%s)",
                         kt_method_name((kt_method)d->method), from ? " from " : "",
                         from ? from : "");
    ctx->moe_method = (kt_method)d->method;
    ctx->moe_shared_folded = folded && st == KT_OK;
    return st;
}

/* kt-convert output: every MoE layer's experts from the files in `dir`. */
static kt_status converted_init(kt_context *ctx, int32_t method, int32_t n_threads,
                                int32_t n_pools, const char *dir)
{
    const kt__hparams *hp = &ctx->hp;
    int32_t E = hp->n_expert, n_moe = kt__experts_n_moe(hp);
    kt__cpu_weights *cw = NULL;
    kt_status st = kt__cpu_weights_open(&cw, dir);
    if (st < 0)
        return st;
    ctx->cpu_weights = cw;
    int have = kt__cpu_weights_method(cw);
    if (method != KT_METHOD_NONE && method != have)
        return kt__error(KT_ERR_INVALID_ARG, "engine: --kt-method %s but %s holds %s weights",
                         kt_method_name((kt_method)method), dir, kt_method_name((kt_method)have));
    if (kt__cpu_weights_n_experts(cw) != (uint32_t)E ||
        kt__cpu_weights_hidden(cw) != (uint64_t)hp->n_embd ||
        kt__cpu_weights_intermediate(cw) != (uint64_t)hp->n_ff_exp)
        return kt__error(KT_ERR_FORMAT, "engine: %s was converted from another model (%u experts "
                         "of %llux%llu; this model has %d of %dx%d)", dir,
                         kt__cpu_weights_n_experts(cw),
                         (unsigned long long)kt__cpu_weights_hidden(cw),
                         (unsigned long long)kt__cpu_weights_intermediate(cw), E, hp->n_embd,
                         hp->n_ff_exp);
    if (kt__cpu_weights_source_checksum(cw) != kt__cpu_weights_config_checksum(kt_model_path(ctx->model)))
        kt__log(ctx->rt, KT_LOG_WARN, "%s: converted from a config.json that differs from "
                "this model's; make sure they belong together", dir);
    ctx->moe_index = kt__malloc_array((size_t)hp->n_layer, sizeof(int32_t));
    kt_moe_layer_weights *lws = kt__calloc((size_t)n_moe, sizeof *lws);
    layer_arrays *arr = kt__calloc((size_t)n_moe, sizeof *arr);
    if (!ctx->moe_index || !lws || !arr) {
        st = KT_ERR_NOMEM;
        goto done;
    }
    int32_t k = 0;
    for (int32_t l = 0; l < hp->n_layer && st == KT_OK; l++) {
        ctx->moe_index[l] = hp->layer_moe[l] ? k : -1;
        if (!hp->layer_moe[l])
            continue;
        if (!kt__cpu_weights_has_layer(cw, (uint32_t)l)) {
            st = kt__error(KT_ERR_NOT_FOUND, "engine: %s has no file for MoE layer %d "
                           "(an interrupted kt-convert? run it again with --resume)", dir, l);
            break;
        }
        layer_arrays *a = &arr[k];
        if ((st = arrays_alloc(a, 6, E)) < 0)
            goto done;
        for (int32_t e = 0; e < E && st == KT_OK; e++)
            for (int p = 0; p < 3 && st == KT_OK; p++)
                st = kt__cpu_weights_get(cw, (uint32_t)l, (uint32_t)e, p, &a->p[p][e],
                                         &a->p[3 + p][e]);
        kt_moe_layer_weights *lw = &lws[k];
        *lw = (kt_moe_layer_weights)KT_MOE_LAYER_WEIGHTS_INIT;
        lw->gate = a->p[0], lw->up = a->p[1], lw->down = a->p[2];
        lw->gate_scale = a->p[3], lw->up_scale = a->p[4], lw->down_scale = a->p[5];
        k++;
    }
    if (st == KT_OK) {
        kt_moe_desc d = kt__experts_desc(hp, have, E, hp->n_expert_used);
        d.group_size = have == KT_METHOD_AMXINT4 ? kt__cpu_weights_group(cw) : 0;
        st = kt__experts_backend_create(ctx, &d, lws, n_moe, n_threads, n_pools, false, dir);
    }
done:
    layers_free(arr, n_moe);
    kt__free(lws);
    return st;
}

kt_status kt__experts_init(kt_context *ctx, int32_t method, int32_t n_threads, int32_t n_pools,
                           const char *weight_path)
{
    if (weight_path && (method == KT_METHOD_LLAMAFILE || kt__experts_path_is_gguf(weight_path)))
        return kt__experts_gguf_init(ctx, method, n_threads, n_pools, weight_path);
    if (method == KT_METHOD_LLAMAFILE)
        return kt__error(KT_ERR_INVALID_ARG, "engine: --kt-method LLAMAFILE reads the experts "
                         "from a GGUF file: pass --kt-weight-path FILE.gguf");
    if (weight_path)
        return converted_init(ctx, method, n_threads, n_pools, weight_path);
    const kt__hparams *hp = &ctx->hp;
    const kt_model *m = ctx->model;
    int32_t E = hp->n_expert, n_moe = kt__experts_n_moe(hp);
    if (!n_moe || E <= 0)
        return KT_OK;
    ctx->moe_index = kt__malloc_array((size_t)hp->n_layer, sizeof(int32_t));
    kt_moe_layer_weights *lws = kt__calloc((size_t)n_moe, sizeof *lws);
    layer_arrays *arr = kt__calloc((size_t)n_moe, sizeof *arr);
    kt_status st = KT_OK;
    if (!ctx->moe_index || !lws || !arr) {
        st = KT_ERR_NOMEM;
        goto done;
    }
    bool fused = hp->family == KT__FAM_GPT_OSS;
    kt_method have = KT_METHOD_NONE;
    /* A shared expert of a routed expert's shape and storage (DeepSeek, Kimi
     * with FP8/BF16 checkpoints, GLM) runs as expert E of the backend with
     * weight 1 for every token, so it uses the backend's workers too. */
    bool fold = hp->n_ff_shared > 0 && hp->n_ff_shared == hp->n_ff_exp && !hp->shared_gate &&
                !fused;
    for (int32_t l = 0; fold && l < hp->n_layer; l++) {
        if (!hp->layer_moe[l])
            continue;
        kt_tensor_view e0, sv;
        if (kt__moe_view(m, (uint32_t)l, KT_ROLE_EXPERT_GATE, 0, &e0) < 0) {
            fold = false;
            break;
        }
        kt_role roles[3] = {KT_ROLE_SHARED_GATE, KT_ROLE_SHARED_UP, KT_ROLE_SHARED_DOWN};
        for (int i = 0; i < 3 && fold; i++)
            fold = kt__moe_view(m, (uint32_t)l, roles[i], 0, &sv) == KT_OK &&
                   kt__moe_method_of_view(&sv) == kt__moe_method_of_view(&e0) &&
                   kt__moe_method_of_view(&e0) != KT_METHOD_NONE;
    }
    kt_clear_error();
    int32_t Eb = E + (fold ? 1 : 0); /* experts the backend sees */
    int32_t k = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        ctx->moe_index[l] = hp->layer_moe[l] ? k : -1;
        if (!hp->layer_moe[l])
            continue;
        layer_arrays *a = &arr[k];
        if ((st = arrays_alloc(a, 9, Eb)) < 0)
            goto done;
        uint32_t inter = (uint32_t)hp->n_ff_exp;
        if ((st = kt__moe_layer_from_model(m, (uint32_t)l, (uint32_t)E, (uint32_t)hp->n_embd,
                                           fused, a->p, &lws[k], &have, &inter)) < 0)
            goto done;
        if (fold) {
            kt_tensor_view g, u, d;
            if ((st = kt__moe_view(m, (uint32_t)l, KT_ROLE_SHARED_GATE, 0, &g)) < 0 ||
                (st = kt__moe_view(m, (uint32_t)l, KT_ROLE_SHARED_UP, 0, &u)) < 0 ||
                (st = kt__moe_view(m, (uint32_t)l, KT_ROLE_SHARED_DOWN, 0, &d)) < 0)
                goto done;
            a->p[0][E] = g.data, a->p[1][E] = u.data, a->p[2][E] = d.data;
            a->p[3][E] = g.scale_data, a->p[4][E] = u.scale_data, a->p[5][E] = d.scale_data;
        }
        k++;
    }
    if (method != KT_METHOD_NONE && method != (int32_t)have) {
        st = kt__error(KT_ERR_UNSUPPORTED, "engine: --kt-method %s asks for %s experts but the "
                       "checkpoint's experts are %s (convert them with kt-convert)",
                       kt_method_name((kt_method)method), kt_method_name((kt_method)method),
                       kt_method_name(have));
        goto done;
    }
    kt_moe_desc d = kt__experts_desc(hp, have, Eb, hp->n_expert_used + (fold ? 1 : 0));
    d.act = hp->gptoss_act ? KT_MOE_ACT_SWIGLU_OAI : KT_MOE_ACT_SILU;
    d.swiglu_alpha = hp->act_alpha;
    d.swiglu_limit = hp->act_limit;
    st = kt__experts_backend_create(ctx, &d, lws, n_moe, n_threads, n_pools, fold, NULL);
done:
    layers_free(arr, n_moe);
    kt__free(lws);
    return st;
}

void kt__experts_free(kt_context *ctx)
{
    kt_moe_backend_free(ctx->moe);
    ctx->moe = NULL;
    kt__cpu_weights_close(ctx->cpu_weights); /* after the backend: it reads the mappings */
    ctx->cpu_weights = NULL;
    kt__experts_gguf_free(ctx);
    kt__free(ctx->moe_index);
    ctx->moe_index = NULL;
}

kt_status kt__experts_forward(kt_context *ctx, int32_t layer, const float *x, int32_t T,
                              const int32_t *ids, const float *w, int32_t k, float *out)
{
    kt_moe_io io = KT_MOE_IO_INIT;
    io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
    io.n_tokens = &T;
    io.top_k = (uint32_t)k;
    io.x = x;
    io.ids = ids;
    io.w = w;
    io.out = out;
    return kt_moe_forward(ctx->moe, (uint32_t)ctx->moe_index[layer], &io);
}
