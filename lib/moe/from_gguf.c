/* kt_moe_backend_create_from_gguf(): a LLAMAFILE backend over the routed
 * experts of a GGUF file, mapped and read in place. */
#include <stdio.h>
#include <string.h>

#include "io/gguf.h"
#include "kt/moe.h"
#include "kt_internal.h"
#include "moe_internal.h"

static const char *const proj[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

static void close_gguf(void *g)
{
    kt__gguf_close(g);
}

/* Layer number of "blk.N.ffn_gate_exps.weight", or -1. */
static long gate_layer(const char *name)
{
    long n = -1;
    int end = 0;
    if (sscanf(name, "blk.%ld.ffn_gate_exps.weight%n", &n, &end) == 1 && name[end] == '\0')
        return n;
    return -1;
}

kt_status kt_moe_backend_create_from_gguf(kt_moe_backend **out, kt_runtime *rt,
                                          const char *path, uint32_t top_k,
                                          const kt_moe_options *opts)
{
    if (!out || !path)
        return kt__error(KT_ERR_INVALID_ARG, "kt_moe_backend_create_from_gguf: out and path "
                         "are required");
    *out = NULL;
    kt_gguf *g = NULL;
    kt_status st = kt__gguf_open_file(&g, path);
    if (st < 0)
        return st;
    long max_layer = -1;
    uint32_t n_layers = 0;
    for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
        long l = gate_layer(kt__gguf_tensor_at(g, i)->name);
        if (l >= 0) {
            n_layers++;
            max_layer = l > max_layer ? l : max_layer;
        }
    }
    if (!n_layers || max_layer > 100000) {
        kt__gguf_close(g);
        return kt__error(KT_ERR_FORMAT, "%s: no routed-expert tensors "
                         "(blk.N.ffn_gate_exps.weight)", path);
    }
    int32_t *map = kt__malloc_array((size_t)max_layer + 1, sizeof(int32_t));
    kt_moe_layer_weights *lws = kt__calloc(n_layers, sizeof *lws);
    const void **ptrs = NULL;
    uint64_t H = 0, I = 0, E = 0;
    uint32_t k = 0;
    if (!map || !lws) {
        st = kt__error(KT_ERR_NOMEM, "moe: out of memory");
        goto done;
    }
    /* shapes from the first layer; every layer must match */
    for (long l = 0; l <= max_layer; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%ld.ffn_gate_exps.weight", l);
        const kt_gguf_tensor *t = kt__gguf_find_tensor(g, name);
        if (t && !E) {
            H = t->ne[0], I = t->ne[1], E = t->n_dims == 3 ? t->ne[2] : 0;
            if (!E || H > (1u << 20) || I > (1u << 20) || E > 65536) {
                st = kt__error(KT_ERR_FORMAT, "%s: %s: expected 3 dims {hidden, "
                               "intermediate, experts}", path, name);
                goto done;
            }
            ptrs = kt__calloc((size_t)n_layers * 3 * E, sizeof(void *));
            if (!ptrs) {
                st = kt__error(KT_ERR_NOMEM, "moe: out of memory");
                goto done;
            }
        }
    }
    for (long l = 0; l <= max_layer; l++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%ld.ffn_gate_exps.weight", l);
        map[l] = -1;
        if (!kt__gguf_find_tensor(g, name))
            continue;
        kt_moe_layer_weights *lw = &lws[k];
        *lw = (kt_moe_layer_weights)KT_MOE_LAYER_WEIGHTS_INIT;
        int32_t types[3];
        const void **pp = ptrs + (size_t)k * 3 * E;
        for (int p = 0; p < 3; p++) {
            snprintf(name, sizeof name, "blk.%ld.%s.weight", l, proj[p]);
            const kt_gguf_tensor *t = kt__gguf_find_tensor(g, name);
            uint64_t cols = p == 2 ? I : H, rows = p == 2 ? H : I;
            if (!t) {
                st = kt__error(KT_ERR_FORMAT, "%s: layer %ld has ffn_gate_exps but no %s",
                               path, l, name);
                goto done;
            }
            if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E) {
                st = kt__error(KT_ERR_FORMAT, "%s: %s has shape {%llu, %llu, %llu}, expected "
                               "{%llu, %llu, %llu} (as blk.%ld.ffn_gate_exps implies)", path,
                               name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                               (unsigned long long)t->ne[2], (unsigned long long)cols,
                               (unsigned long long)rows, (unsigned long long)E, l);
                goto done;
            }
            if (t->type == KT_TYPE_INVALID || kt_type_block_size(t->type) == 0) {
                st = kt__error(KT_ERR_UNSUPPORTED, "%s: %s has ggml type %u, which LLAMAFILE "
                               "does not run", path, name, t->ggml_type);
                goto done;
            }
            types[p] = t->type;
            size_t per = (size_t)(t->nbytes / E);
            for (uint64_t e = 0; e < E; e++)
                pp[(size_t)p * E + e] = (const uint8_t *)t->data + e * per;
        }
        lw->gate = pp, lw->up = pp + E, lw->down = pp + 2 * (size_t)E;
        lw->gate_type = types[0], lw->up_type = types[1], lw->down_type = types[2];
        map[l] = (int32_t)k++;
    }
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = KT_METHOD_LLAMAFILE;
    d.hidden = (uint32_t)H;
    d.intermediate = (uint32_t)I;
    d.n_experts = (uint32_t)E;
    d.top_k = top_k;
    kt_moe_backend *moe = NULL;
    st = kt_moe_backend_create(&moe, rt, &d, lws, k, opts);
    if (st < 0) {
        kt__error_prefix(st, "%s", path);
        goto done;
    }
    if ((st = kt__moe_set_layer_map(moe, map, (uint32_t)max_layer + 1)) < 0) {
        kt_moe_backend_free(moe);
        goto done;
    }
    kt__moe_backend_own(moe, close_gguf, g);
    g = NULL;
    *out = moe;
done:
    kt__free(map);
    kt__free(lws);
    kt__free(ptrs);
    kt__gguf_close(g);
    return st;
}
