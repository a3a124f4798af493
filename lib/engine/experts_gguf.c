/* Routed experts from a GGUF file (--kt-method LLAMAFILE --kt-weight-path
 * FILE.gguf): the file is mapped and every expert's blocks are handed to the
 * CPU MoE backend in place. Everything else still comes from the model.
 *
 * Tensors of model layer N, as llama.cpp names them:
 *   blk.N.ffn_{gate,up}_exps.weight  ne {H, I, E}   blk.N.ffn_down_exps.weight  ne {I, H, E}
 * or one tensor per expert (older converters):
 *   blk.N.ffn_{gate,up}.X.weight     ne {H, I}      blk.N.ffn_down.X.weight     ne {I, H}
 * Shapes, expert counts and block types are checked; a mismatch names the file
 * and the tensor. */
#include <stdio.h>
#include <string.h>

#include "../../cpu/moe_kernels.h"
#include "../../cpu/ref/ggml_quants.h"
#include "engine_internal.h"
#include "io/gguf.h"

static const char *const proj3[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
static const char *const proj1[3] = {"ffn_gate", "ffn_up", "ffn_down"};

bool kt__experts_path_is_gguf(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n >= 5 && !strcmp(path + n - 5, ".gguf");
}

/* Checks one tensor's shape {cols, rows[, E]} and type; *type gets its kt_type. */
static kt_status check_tensor(const kt_gguf *g, const kt_gguf_tensor *t, uint64_t cols,
                              uint64_t rows, uint64_t E, int32_t *type)
{
    uint32_t dims = E ? 3 : 2;
    if (t->n_dims != dims || t->ne[0] != cols || t->ne[1] != rows || (E && t->ne[2] != E))
        return kt__error(KT_ERR_FORMAT,
                         "%s: tensor %s has shape {%llu, %llu, %llu}; this model needs "
                         "{%llu, %llu%s%llu} (in, out%s)",
                         kt__gguf_name(g), t->name, (unsigned long long)t->ne[0],
                         (unsigned long long)t->ne[1],
                         (unsigned long long)(t->n_dims > 2 ? t->ne[2] : 1),
                         (unsigned long long)cols, (unsigned long long)rows, E ? ", " : "",
                         (unsigned long long)E, E ? ", experts" : "");
    if (t->type == KT_TYPE_INVALID || !kt__ggml_act_section(t->type))
        return kt__error(KT_ERR_UNSUPPORTED,
                         "%s: tensor %s is ggml type %u (%s), which LLAMAFILE does not run "
                         "(Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K IQ4_NL IQ4_XS BF16 F16 F32)",
                         kt__gguf_name(g), t->name, t->ggml_type,
                         kt__ggml_type_info(t->ggml_type) ? kt__ggml_type_info(t->ggml_type)->name
                                                          : "unknown");
    *type = t->type;
    return KT_OK;
}

/* Expert pointers of projection p of model layer l into ptr[E]; *type its type. */
static kt_status layer_proj(const kt_gguf *g, int32_t l, int p, uint64_t H, uint64_t I,
                            uint64_t E, const void **ptr, int32_t *type)
{
    uint64_t cols = p == 2 ? I : H, rows = p == 2 ? H : I;
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, proj3[p]);
    const kt_gguf_tensor *t = kt__gguf_find_tensor(g, name);
    if (t) {
        kt_status st = check_tensor(g, t, cols, rows, E, type);
        if (st < 0)
            return st;
        size_t per = (size_t)rows * kt__ggml_row_bytes((kt_type)*type, (int64_t)cols);
        for (uint64_t e = 0; e < E; e++)
            ptr[e] = (const uint8_t *)t->data + e * per;
        return KT_OK;
    }
    for (uint64_t e = 0; e < E; e++) {
        snprintf(name, sizeof name, "blk.%d.%s.%llu.weight", l, proj1[p], (unsigned long long)e);
        t = kt__gguf_find_tensor(g, name);
        if (!t)
            return kt__error(KT_ERR_NOT_FOUND,
                             "%s: no tensor blk.%d.%s.weight (nor per-expert %s): the file "
                             "does not hold the routed experts of MoE layer %d",
                             kt__gguf_name(g), l, proj3[p], name, l);
        int32_t ty = -1; /* set by check_tensor on success */
        kt_status st = check_tensor(g, t, cols, rows, 0, &ty);
        if (st < 0)
            return st;
        if (e > 0 && ty != *type)
            return kt__error(KT_ERR_UNSUPPORTED, "%s: %s is %s, expert 0's is %s: one type "
                             "per projection and layer", kt__gguf_name(g), name,
                             kt_type_name((kt_type)ty), kt_type_name((kt_type)*type));
        *type = ty;
        ptr[e] = t->data;
    }
    return KT_OK;
}

kt_status kt__experts_gguf_init(kt_context *ctx, int32_t method, int32_t n_threads,
                                int32_t n_pools, const char *path)
{
    const kt__hparams *hp = &ctx->hp;
    if (method != KT_METHOD_NONE && method != KT_METHOD_LLAMAFILE)
        return kt__error(KT_ERR_INVALID_ARG, "engine: %s is a GGUF file: its experts run with "
                         "--kt-method LLAMAFILE, not %s", path,
                         kt_method_name((kt_method)method));
    if (hp->family == KT__FAM_GPT_OSS)
        return kt__error(KT_ERR_UNSUPPORTED, "engine: GGUF experts for gpt-oss (biases, "
                         "clamped SwiGLU) are not wired up yet");
    int32_t E = hp->n_expert, n_moe = kt__experts_n_moe(hp);
    if (!n_moe || E <= 0)
        return kt__error(KT_ERR_UNSUPPORTED, "engine: --kt-weight-path %s: the model has no "
                         "routed experts", path);
    kt_gguf *g = NULL;
    kt_status st = kt__gguf_open_file(&g, path);
    if (st < 0)
        return st;
    ctx->gguf_experts = g;
    ctx->moe_index = kt__malloc_array((size_t)hp->n_layer, sizeof(int32_t));
    kt_moe_layer_weights *lws = kt__calloc((size_t)n_moe, sizeof *lws);
    const void **ptrs = kt__calloc((size_t)n_moe * 3 * E, sizeof(void *));
    if (!ctx->moe_index || !lws || !ptrs) {
        st = kt__error(KT_ERR_NOMEM, "engine: out of memory");
        goto done;
    }
    uint64_t H = (uint64_t)hp->n_embd, I = (uint64_t)hp->n_ff_exp;
    int32_t k = 0;
    for (int32_t l = 0; l < hp->n_layer && st == KT_OK; l++) {
        ctx->moe_index[l] = hp->layer_moe[l] ? k : -1;
        if (!hp->layer_moe[l])
            continue;
        kt_moe_layer_weights *lw = &lws[k];
        *lw = (kt_moe_layer_weights)KT_MOE_LAYER_WEIGHTS_INIT;
        const void **pp = ptrs + (size_t)k * 3 * E;
        int32_t types[3];
        for (int p = 0; p < 3 && st == KT_OK; p++)
            st = layer_proj(g, l, p, H, I, (uint64_t)E, pp + (size_t)p * E, &types[p]);
        lw->gate = pp, lw->up = pp + E, lw->down = pp + 2 * (size_t)E;
        lw->gate_type = types[0], lw->up_type = types[1], lw->down_type = types[2];
        k++;
    }
    if (st == KT_OK) {
        kt_moe_desc d = kt__experts_desc(hp, KT_METHOD_LLAMAFILE, E, hp->n_expert_used);
        st = kt__experts_backend_create(ctx, &d, lws, n_moe, n_threads, n_pools, false, path);
    }
done:
    kt__free(ptrs);
    kt__free(lws);
    return st;
}

void kt__experts_gguf_free(kt_context *ctx)
{
    kt__gguf_close(ctx->gguf_experts);
    ctx->gguf_experts = NULL;
}
