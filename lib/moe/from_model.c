/* kt_moe_backend_create_from_model(): the routed experts of an opened model,
 * handed to the backend in place, in the method their storage implies. */
#include <string.h>

#include "kt/model.h"
#include "kt/moe.h"
#include "kt_internal.h"
#include "moe_internal.h"

kt_method kt__moe_method_of_view(const kt_tensor_view *v)
{
    if (v->storage == KT_STORAGE_PLAIN && v->type == KT_TYPE_BF16)
        return KT_METHOD_BF16;
    if (v->storage == KT_STORAGE_FP8_BLOCK && v->type == KT_TYPE_F8_E4M3 &&
        v->scale_type == KT_TYPE_F32 && v->block_rows == 128 && v->block_cols == 128)
        return KT_METHOD_FP8;
    if (v->storage == KT_STORAGE_INT4_PACKED && v->scale_type == KT_TYPE_BF16 &&
        v->block_rows == 1 && v->block_cols == 32)
        return KT_METHOD_RAWINT4;
    return KT_METHOD_NONE;
}

kt_status kt__moe_view(const kt_model *m, uint32_t l, kt_role role, uint32_t e,
                       kt_tensor_view *v)
{
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    return kt_model_tensor(m, l, role, e, v);
}

/* Per MoE layer: 9 arrays of E pointers (gate up down, their scales, biases). */
enum { P_GATE, P_UP, P_DOWN, P_GS, P_US, P_DS, P_GB, P_UB, P_DB, P_N };

kt_status kt__moe_layer_from_model(const kt_model *m, uint32_t l, uint32_t E, uint32_t hidden,
                                   bool fused, const void **p[9], kt_moe_layer_weights *lw,
                                   kt_method *method, uint32_t *inter)
{
    kt_status st;
    *lw = (kt_moe_layer_weights)KT_MOE_LAYER_WEIGHTS_INIT;
    for (uint32_t e = 0; e < E; e++) {
        kt_tensor_view g, u, d;
        kt_role grole = fused ? KT_ROLE_EXPERT_GATE_UP : KT_ROLE_EXPERT_GATE;
        if ((st = kt__moe_view(m, l, grole, e, &g)) < 0 ||
            (!fused && (st = kt__moe_view(m, l, KT_ROLE_EXPERT_UP, e, &u)) < 0) ||
            (st = kt__moe_view(m, l, KT_ROLE_EXPERT_DOWN, e, &d)) < 0)
            return st;
        if (fused)
            u = g;
        kt_method mg = kt__moe_method_of_view(&g), mu = kt__moe_method_of_view(&u),
                  md = kt__moe_method_of_view(&d);
        if (mg == KT_METHOD_NONE || mg != mu || mg != md)
            return kt__error(KT_ERR_UNSUPPORTED,
                             "moe: %s: expert storage (%s %s, %s, %s) has no CPU MoE method",
                             g.name, kt_storage_name((kt_storage)g.storage),
                             kt_type_name((kt_type)g.type),
                             kt_storage_name((kt_storage)u.storage),
                             kt_storage_name((kt_storage)d.storage));
        if (*method == KT_METHOD_NONE)
            *method = mg;
        if (!*inter)
            *inter = (uint32_t)(fused ? g.rows / 2 : g.rows);
        if (mg != *method)
            return kt__error(KT_ERR_UNSUPPORTED, "moe: %s is %s but earlier experts are %s",
                             g.name, kt_method_name(mg), kt_method_name(*method));
        if ((fused ? g.rows / 2 : g.rows) != *inter || g.cols != hidden ||
            d.rows != hidden || d.cols != *inter)
            return kt__error(KT_ERR_FORMAT, "moe: %s: expert shape [%llu][%llu] does not match "
                             "hidden %u / intermediate %u", g.name,
                             (unsigned long long)g.rows, (unsigned long long)g.cols, hidden,
                             *inter);
        if (fused && (g.layout != KT_LAYOUT_IN_OUT || d.layout != KT_LAYOUT_IN_OUT))
            return kt__error(KT_ERR_UNSUPPORTED, "moe: %s: fused experts expected in [in][out] "
                             "layout", g.name);
        p[P_GATE][e] = g.data;
        p[P_UP][e] = fused ? NULL : u.data;
        p[P_DOWN][e] = d.data;
        p[P_GS][e] = g.scale_data;
        p[P_US][e] = fused ? NULL : u.scale_data;
        p[P_DS][e] = d.scale_data;
        kt_tensor_view b;
        if (fused && kt_model_has_tensor(m, l, KT_ROLE_EXPERT_GATE_UP_BIAS, e)) {
            if ((st = kt__moe_view(m, l, KT_ROLE_EXPERT_GATE_UP_BIAS, e, &b)) < 0)
                return st;
            p[P_GB][e] = b.data;
            lw->bias_type = b.type;
        }
        if (fused && kt_model_has_tensor(m, l, KT_ROLE_EXPERT_DOWN_BIAS, e)) {
            if ((st = kt__moe_view(m, l, KT_ROLE_EXPERT_DOWN_BIAS, e, &b)) < 0)
                return st;
            p[P_DB][e] = b.data;
            lw->bias_type = b.type;
        }
    }
    lw->flags = fused ? KT_MOE_W_GATE_UP_FUSED | KT_MOE_W_IN_MAJOR : 0;
    lw->gate = p[P_GATE];
    lw->up = p[P_UP];
    lw->down = p[P_DOWN];
    if (*method != KT_METHOD_BF16) {
        lw->gate_scale = p[P_GS];
        lw->up_scale = p[P_US];
        lw->down_scale = p[P_DS];
    }
    if (fused) {
        lw->gate_bias = p[P_GB];
        lw->down_bias = p[P_DB];
    }
    return KT_OK;
}

kt_status kt_moe_backend_create_from_model(kt_moe_backend **out, kt_runtime *rt,
                                           const kt_model *model, const kt_moe_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_backend_create_from_model: out is NULL");
    *out = NULL;
    if (!model)
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_backend_create_from_model: model is NULL");
    kt_arch_info a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    kt_status st = kt_model_arch(model, &a);
    if (st < 0)
        return st;
    uint32_t L = a.n_layers, E = a.n_routed_experts, n_moe = 0;
    for (uint32_t l = 0; l < L; l++)
        n_moe += kt_model_layer_is_moe(model, l) ? 1 : 0;
    if (n_moe == 0 || E == 0)
        return kt__error(KT_ERR_UNSUPPORTED, "moe: model %s has no MoE layer",
                         kt_model_path(model));
    bool fused = a.ffn_act == KT_ACT_SWIGLU_OAI;
    int32_t *map = kt__malloc_array(L, sizeof(int32_t));
    kt_moe_layer_weights *lws = kt__calloc(n_moe, sizeof *lws);
    const void **arrays = kt__calloc((size_t)n_moe * P_N * E, sizeof(void *));
    if (!map || !lws || !arrays) {
        st = kt__error(KT_ERR_NOMEM, "moe: out of memory");
        goto done;
    }
    kt_method method = KT_METHOD_NONE;
    uint32_t slot = 0, inter = 0;
    for (uint32_t l = 0; l < L; l++) {
        map[l] = -1;
        if (!kt_model_layer_is_moe(model, l))
            continue;
        map[l] = (int32_t)slot;
        const void **p[P_N];
        for (int i = 0; i < P_N; i++)
            p[i] = arrays + ((size_t)slot * P_N + i) * E;
        if ((st = kt__moe_layer_from_model(model, l, E, a.hidden_size, fused, p, &lws[slot],
                                           &method, &inter)) < 0)
            goto done;
        slot++;
    }
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = method;
    d.act = fused ? KT_MOE_ACT_SWIGLU_OAI : KT_MOE_ACT_SILU;
    d.hidden = a.hidden_size;
    d.intermediate = inter;
    d.n_experts = E;
    d.top_k = a.n_experts_per_tok;
    d.swiglu_alpha = a.swiglu_alpha;
    d.swiglu_limit = a.swiglu_limit;
    kt_moe_backend *moe = NULL;
    if ((st = kt_moe_backend_create(&moe, rt, &d, lws, n_moe, opts)) < 0) {
        kt__error_prefix(st, "moe: %s", kt_model_path(model));
        goto done;
    }
    if ((st = kt__moe_set_layer_map(moe, map, L)) < 0) {
        kt_moe_backend_free(moe);
        goto done;
    }
    *out = moe;
done:
    kt__free(map);
    kt__free(lws);
    kt__free((void *)arrays);
    return st;
}
