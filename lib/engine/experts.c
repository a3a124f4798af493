/* Routed experts of the fast path through the CPU MoE backend (kt/moe.h):
 * the expert weights are handed over in place (mmap'ed views of the model) in
 * the method their storage implies (BF16, FP8, RAWINT4), one backend for all
 * MoE layers. Precision f32 keeps the engine's own F32 expert path. */
#include <string.h>

#include "convert/cpu_weights.h"
#include "engine_internal.h"

/* The method a view's storage can be read with directly. */
static kt_method method_of_view(const kt_tensor_view *v)
{
    if (v->storage == KT_STORAGE_PLAIN && v->type == KT_TYPE_BF16)
        return KT_METHOD_BF16;
    if (v->storage == KT_STORAGE_FP8_BLOCK && v->type == KT_TYPE_F8_E4M3 &&
        v->scale_type == KT_TYPE_F32 && v->block_rows == 128 && v->block_cols == 128)
        return KT_METHOD_FP8;
    if (v->storage == KT_STORAGE_INT4_PACKED && v->scale_type == KT_TYPE_BF16 &&
        v->block_cols == 32)
        return KT_METHOD_RAWINT4;
    return KT_METHOD_NONE;
}

typedef struct layer_arrays {
    const void **p[9]; /* gate up down gate_s up_s down_s gate_b up_b down_b */
} layer_arrays;

static void arrays_free(layer_arrays *a)
{
    for (int i = 0; i < 9; i++)
        kt__free((void *)a->p[i]);
}

static kt_status view(const kt_model *m, uint32_t l, kt_role role, uint32_t e, kt_tensor_view *v)
{
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    return kt_model_tensor(m, l, role, e, v);
}

/* kt-convert output: every MoE layer's experts from the files in `dir`. */
static kt_status converted_init(kt_context *ctx, int32_t method, int32_t n_threads,
                                int32_t n_pools, const char *dir)
{
    const kt__hparams *hp = &ctx->hp;
    int32_t E = hp->n_expert, n_moe = 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        n_moe += hp->layer_moe[l];
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
        for (int i = 0; i < 6; i++)
            if (!(a->p[i] = kt__calloc((size_t)E, sizeof(void *)))) {
                st = KT_ERR_NOMEM;
                goto done;
            }
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
        kt_moe_desc d = KT_MOE_DESC_INIT;
        d.method = have;
        d.group_size = have == KT_METHOD_AMXINT4 ? kt__cpu_weights_group(cw) : 0;
        d.hidden = (uint32_t)hp->n_embd;
        d.intermediate = (uint32_t)hp->n_ff_exp;
        d.n_experts = (uint32_t)E;
        d.top_k = (uint32_t)hp->n_expert_used;
        kt_moe_options mo = KT_MOE_OPTIONS_INIT;
        mo.n_threads = n_threads;
        mo.n_pools = n_pools;
        mo.max_tokens = ctx->n_batch;
    mo.act_precision = ctx->moe_precision;
        st = kt_moe_backend_create(&ctx->moe, ctx->rt, &d, lws, (uint32_t)n_moe, &mo);
        if (st < 0)
            kt__error_prefix(st, "engine: CPU MoE backend (%s from %s)",
                             kt_method_name((kt_method)have), dir);
        ctx->moe_method = (kt_method)have;
        ctx->moe_shared_folded = false;
    }
done:
    if (arr)
        for (int32_t i = 0; i < n_moe; i++)
            arrays_free(&arr[i]);
    kt__free(arr);
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
    int32_t E = hp->n_expert, n_moe = 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        n_moe += hp->layer_moe[l];
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
        if (view(m, (uint32_t)l, KT_ROLE_EXPERT_GATE, 0, &e0) < 0) {
            fold = false;
            break;
        }
        kt_role roles[3] = {KT_ROLE_SHARED_GATE, KT_ROLE_SHARED_UP, KT_ROLE_SHARED_DOWN};
        for (int i = 0; i < 3 && fold; i++)
            fold = view(m, (uint32_t)l, roles[i], 0, &sv) == KT_OK &&
                   method_of_view(&sv) == method_of_view(&e0) &&
                   method_of_view(&e0) != KT_METHOD_NONE;
    }
    kt_clear_error();
    int32_t Eb = E + (fold ? 1 : 0); /* experts the backend sees */
    int32_t k = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        ctx->moe_index[l] = hp->layer_moe[l] ? k : -1;
        if (!hp->layer_moe[l])
            continue;
        layer_arrays *a = &arr[k];
        for (int i = 0; i < 9; i++)
            if (!(a->p[i] = kt__calloc((size_t)Eb, sizeof(void *)))) {
                st = KT_ERR_NOMEM;
                goto done;
            }
        kt_moe_layer_weights *lw = &lws[k];
        *lw = (kt_moe_layer_weights)KT_MOE_LAYER_WEIGHTS_INIT;
        for (int32_t e = 0; e < E; e++) {
            kt_tensor_view g, u, d;
            kt_role groles = fused ? KT_ROLE_EXPERT_GATE_UP : KT_ROLE_EXPERT_GATE;
            if ((st = view(m, (uint32_t)l, groles, (uint32_t)e, &g)) < 0 ||
                (!fused && (st = view(m, (uint32_t)l, KT_ROLE_EXPERT_UP, (uint32_t)e, &u)) < 0) ||
                (st = view(m, (uint32_t)l, KT_ROLE_EXPERT_DOWN, (uint32_t)e, &d)) < 0)
                goto done;
            if (fused)
                u = g;
            kt_method mg = method_of_view(&g), mu = method_of_view(&u), md = method_of_view(&d);
            if (mg == KT_METHOD_NONE || mg != mu || mg != md) {
                st = kt__error(KT_ERR_UNSUPPORTED, "engine: %s: expert storage (%s, %s, %s) has "
                               "no CPU MoE method", g.name,
                               kt_storage_name((kt_storage)g.storage),
                               kt_storage_name((kt_storage)u.storage),
                               kt_storage_name((kt_storage)d.storage));
                goto done;
            }
            if (have == KT_METHOD_NONE)
                have = mg;
            if (mg != have) {
                st = kt__error(KT_ERR_UNSUPPORTED, "engine: %s is %s but other experts are %s",
                               g.name, kt_method_name(mg), kt_method_name(have));
                goto done;
            }
            if (fused && (g.layout != KT_LAYOUT_IN_OUT || d.layout != KT_LAYOUT_IN_OUT)) {
                st = kt__error(KT_ERR_UNSUPPORTED, "engine: %s: fused experts expected in "
                               "[in][out] layout", g.name);
                goto done;
            }
            a->p[0][e] = g.data;
            a->p[1][e] = fused ? NULL : u.data;
            a->p[2][e] = d.data;
            a->p[3][e] = g.scale_data;
            a->p[4][e] = fused ? NULL : u.scale_data;
            a->p[5][e] = d.scale_data;
            if (hp->gptoss_act) {
                kt_tensor_view b;
                if (kt_model_has_tensor(m, (uint32_t)l, KT_ROLE_EXPERT_GATE_UP_BIAS, (uint32_t)e)) {
                    if ((st = view(m, (uint32_t)l, KT_ROLE_EXPERT_GATE_UP_BIAS, (uint32_t)e,
                                   &b)) < 0)
                        goto done;
                    a->p[6][e] = b.data;
                    lw->bias_type = b.type;
                }
                if (kt_model_has_tensor(m, (uint32_t)l, KT_ROLE_EXPERT_DOWN_BIAS, (uint32_t)e)) {
                    if ((st = view(m, (uint32_t)l, KT_ROLE_EXPERT_DOWN_BIAS, (uint32_t)e, &b)) < 0)
                        goto done;
                    a->p[8][e] = b.data;
                    lw->bias_type = b.type;
                }
            }
        }
        if (fold) {
            kt_tensor_view g, u, d;
            if ((st = view(m, (uint32_t)l, KT_ROLE_SHARED_GATE, 0, &g)) < 0 ||
                (st = view(m, (uint32_t)l, KT_ROLE_SHARED_UP, 0, &u)) < 0 ||
                (st = view(m, (uint32_t)l, KT_ROLE_SHARED_DOWN, 0, &d)) < 0)
                goto done;
            a->p[0][E] = g.data, a->p[1][E] = u.data, a->p[2][E] = d.data;
            a->p[3][E] = g.scale_data, a->p[4][E] = u.scale_data, a->p[5][E] = d.scale_data;
        }
        lw->flags = fused ? KT_MOE_W_GATE_UP_FUSED | KT_MOE_W_IN_MAJOR : 0;
        lw->gate = a->p[0];
        lw->up = a->p[1];
        lw->down = a->p[2];
        if (have != KT_METHOD_BF16) {
            lw->gate_scale = a->p[3];
            lw->up_scale = a->p[4];
            lw->down_scale = a->p[5];
        }
        if (hp->gptoss_act) {
            lw->gate_bias = a->p[6];
            lw->down_bias = a->p[8];
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
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = have;
    d.act = hp->gptoss_act ? KT_MOE_ACT_SWIGLU_OAI : KT_MOE_ACT_SILU;
    d.hidden = (uint32_t)hp->n_embd;
    d.intermediate = (uint32_t)hp->n_ff_exp;
    d.n_experts = (uint32_t)Eb;
    d.top_k = (uint32_t)(hp->n_expert_used + (fold ? 1 : 0));
    d.swiglu_alpha = hp->act_alpha;
    d.swiglu_limit = hp->act_limit;
    kt_moe_options mo = KT_MOE_OPTIONS_INIT;
    mo.n_threads = n_threads;
    mo.n_pools = n_pools;
    mo.max_tokens = ctx->n_batch;
    mo.act_precision = ctx->moe_precision;
    st = kt_moe_backend_create(&ctx->moe, ctx->rt, &d, lws, (uint32_t)n_moe, &mo);
    if (st < 0)
        kt__error_prefix(st, "engine: CPU MoE backend (%s)", kt_method_name(have));
    ctx->moe_method = have;
    ctx->moe_shared_folded = fold && st == KT_OK;
done:
    if (arr)
        for (int32_t i = 0; i < n_moe; i++)
            arrays_free(&arr[i]);
    kt__free(arr);
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
