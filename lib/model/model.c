/*
 * The model handle: open (config + mapped weights + tensor index), the
 * description getters, tensor lookup and the memory estimate.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "io/gguf.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model_internal.h"

KT__DEFINE_OPTIONS_INIT(kt_model_open_options_init, kt_model_open_options,
                        KT_MODEL_OPEN_OPTIONS_INIT)

KT__DEFINE_OPTIONS_INIT(kt_estimate_options_init, kt_estimate_options, KT_ESTIMATE_OPTIONS_INIT)

void kt_model_free(kt_model *m)
{
    if (!m)
        return;
    kt__config_free(&m->cfg);
    if (m->st)
        kt__st_close(m->st);
    if (m->gguf)
        kt__gguf_close(m->gguf);
    for (uint32_t i = 0; i < m->n_gguf_more; i++)
        kt__gguf_close(m->gguf_more[i]);
    kt__free(m->gguf_more);
    kt__free(m->entries);
    kt__free(m->slot);
    kt__free(m->path);
    kt__free(m);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static kt_status progress(const kt_model_open_options *o, uint64_t done, uint64_t total,
                          const char *what)
{
    if (o->progress_fn && o->progress_fn(done, total, what, o->progress_user_data))
        return kt__error(KT_ERR_CANCELLED, "kt_model_open: cancelled during %s", what);
    return KT_OK;
}

/* Names (into buf) up to three subdirectories of dir that hold a config.json:
 * a fixture or download with variants (bf16/, fp8/) opened one level too high. */
static void model_subdirs(const char *dir, char *buf, size_t size)
{
    buf[0] = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) && found < 3) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s/config.json", dir, e->d_name);
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s/%s", found ? ", " : "", dir, e->d_name);
        found++;
    }
    closedir(d);
}

static kt_status open_config(kt_model *m, const char *config_path)
{
    cJSON *root = NULL;
    kt_status st = kt__json_parse_file(&root, config_path);
    if (st == KT_ERR_NOT_FOUND) {
        char subdirs[1024];
        model_subdirs(m->path, subdirs, sizeof subdirs);
        if (subdirs[0])
            return kt__error(KT_ERR_IO, "%s: no config.json here; models below it: %s",
                             m->path, subdirs);
        return kt__error(KT_ERR_IO, "%s: no config.json (a model directory needs config.json "
                         "beside its safetensors files)", m->path);
    }
    if (st < 0)
        return st;
    st = kt__config_from_json(&m->cfg, root, config_path, m->rt);
    cJSON_Delete(root);
    return st;
}

kt_status kt_model_open(kt_model **out, kt_runtime *rt, const char *path,
                        const kt_model_open_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_open: path is NULL or empty");
    kt_model_open_options o = KT_MODEL_OPEN_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_model_open_options");
    if (st < 0)
        return st;
    if (o.flags & ~KT_MODEL_OPEN_F_CONFIG_ONLY)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_open_options: unknown flags 0x%x",
                         o.flags & ~KT_MODEL_OPEN_F_CONFIG_ONLY);

    struct stat sb;
    if (stat(path, &sb) != 0)
        return kt__error(KT_ERR_IO, "%s: %s", path, strerror(errno));

    /* a shard or the index of a model directory: open the directory */
    if (S_ISREG(sb.st_mode) &&
        (ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json"))) {
        const char *slash = strrchr(path, '/');
        char *dir = slash ? kt__malloc((size_t)(slash - path) + 2) : kt__strdup(".");
        if (!dir)
            return KT_ERR_NOMEM;
        if (slash) {
            memcpy(dir, path, (size_t)(slash - path));
            dir[slash - path] = 0;
            if (!dir[0]) { /* "/model.safetensors" */
                dir[0] = '/';
                dir[1] = 0;
            }
        }
        st = kt_model_open(out, rt, dir, opts);
        kt__free(dir);
        return st;
    }

    kt_model *m = kt__calloc(1, sizeof *m);
    if (!m)
        return KT_ERR_NOMEM;
    m->rt = rt;
    m->flags = o.flags;
    m->format = KT_FORMAT_SAFETENSORS;
    if (!(m->path = kt__strdup(path))) {
        kt__free(m);
        return KT_ERR_NOMEM;
    }

    if ((st = progress(&o, 0, 3, "config")) < 0)
        goto fail;
    if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + sizeof "/config.json";
        char *cfg_path = kt__malloc(n);
        if (!cfg_path) {
            st = KT_ERR_NOMEM;
            goto fail;
        }
        snprintf(cfg_path, n, "%s/config.json", path);
        st = open_config(m, cfg_path);
        kt__free(cfg_path);
        if (st < 0)
            goto fail;
        if (!(m->flags & KT_MODEL_OPEN_F_CONFIG_ONLY)) {
            if ((st = progress(&o, 1, 3, "safetensors")) < 0)
                goto fail;
            if ((st = kt__st_open_dir(&m->st, path)) < 0)
                goto fail;
            if ((st = progress(&o, 2, 3, "tensor index")) < 0)
                goto fail;
            if ((st = kt__model_index_safetensors(m)) < 0)
                goto fail;
        }
    } else if (S_ISREG(sb.st_mode) && ends_with(path, ".json")) {
        /* a bare config file: description only */
        m->flags |= KT_MODEL_OPEN_F_CONFIG_ONLY;
        if ((st = open_config(m, path)) < 0)
            goto fail;
    } else if (S_ISREG(sb.st_mode) && ends_with(path, ".gguf")) {
        m->format = KT_FORMAT_GGUF;
        if ((st = kt__model_open_gguf(m)) < 0)
            goto fail;
    } else {
        st = kt__error(KT_ERR_FORMAT, "%s: not a model directory (config.json + safetensors), "
                       "a .gguf file or a config .json file", path);
        goto fail;
    }
    if ((st = progress(&o, 3, 3, "done")) < 0)
        goto fail;
    *out = m;
    return KT_OK;
fail:
    kt_model_free(m);
    return st;
}

const char *kt_model_path(const kt_model *m)
{
    return m ? m->path : NULL;
}

kt_file_format kt_model_format(const kt_model *m)
{
    return m ? m->format : KT_FORMAT_SAFETENSORS;
}

/* Copies `src` (the library's struct of `size` bytes) into the caller's
 * struct whose struct_size says how much it holds. */
static kt_status fill_out(void *out, const void *src, size_t size, const char *what)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "%s: out is NULL", what);
    uint32_t given;
    memcpy(&given, out, sizeof given);
    if (given < size)
        return kt__error(KT_ERR_INVALID_ARG, "%s: struct_size %u is smaller than %zu (set it to "
                         "sizeof the struct)", what, given, size);
    memset((char *)out + size, 0, given - size); /* newer caller: unknown tail zero */
    memcpy(out, src, size);
    memcpy(out, &given, sizeof given);
    return KT_OK;
}

kt_status kt_model_arch(const kt_model *m, kt_arch_info *out)
{
    if (!m)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_arch: model is NULL");
    return fill_out(out, &m->cfg.info, sizeof m->cfg.info, "kt_model_arch");
}

kt_status kt_model_layer(const kt_model *m, uint32_t layer, kt_layer_info *out)
{
    if (!m)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_layer: model is NULL");
    const kt_arch_info *a = &m->cfg.info;
    if (layer >= a->n_layers)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_layer: layer %u >= %u layers", layer,
                         a->n_layers);
    kt_layer_info li = KT_LAYER_INFO_INIT;
    li.is_moe = m->cfg.layer_moe[layer];
    li.n_experts = li.is_moe ? a->n_routed_experts : 0;
    li.ffn_intermediate = li.is_moe ? a->moe_intermediate_size : a->intermediate_size;
    li.sliding_window = m->cfg.layer_window[layer];
    return fill_out(out, &li, sizeof li, "kt_model_layer");
}

int32_t kt_model_layer_is_moe(const kt_model *m, uint32_t layer)
{
    return m && layer < m->cfg.info.n_layers ? m->cfg.layer_moe[layer] : 0;
}

uint32_t kt_model_layer_sliding_window(const kt_model *m, uint32_t layer)
{
    return m && layer < m->cfg.info.n_layers ? m->cfg.layer_window[layer] : 0;
}

uint32_t kt_model_n_layers(const kt_model *m)
{
    return m ? m->cfg.info.n_layers : 0;
}

uint32_t kt_model_n_experts(const kt_model *m)
{
    return m ? m->cfg.info.n_routed_experts : 0;
}

/* ------------------------------------------------------------ tensors --- */

static const kt__entry *find_entry(const kt_model *m, uint32_t layer, kt_role role,
                                   uint32_t expert)
{
    if (!m->slot)
        return NULL;
    int s = kt__role_slot(role);
    if (s < 0)
        return NULL;
    size_t row = kt__role_is_global(role) ? 0 : (size_t)layer + 1;
    uint32_t first = m->slot[row * KT__N_ROLE_SLOTS + (size_t)s];
    if (!first)
        return NULL;
    size_t i = (size_t)first - 1 + (kt__role_is_expert(role) ? expert : 0);
    if (i >= m->n_entries)
        return NULL;
    const kt__entry *e = &m->entries[i];
    if (e->view.role != (int32_t)role)
        return NULL;
    return e;
}

static kt_status check_lookup(const kt_model *m, uint32_t layer, kt_role role, uint32_t expert)
{
    if (!m)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_tensor: model is NULL");
    if (kt__role_slot(role) < 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_tensor: unknown role %d", (int)role);
    if (!kt__role_is_global(role) && layer >= m->cfg.info.n_layers)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_tensor: layer %u >= %u layers", layer,
                         m->cfg.info.n_layers);
    if (kt__role_is_expert(role) && expert >= m->cfg.info.n_routed_experts)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_tensor: expert %u >= %u experts", expert,
                         m->cfg.info.n_routed_experts);
    return KT_OK;
}

kt_status kt_model_tensor(const kt_model *m, uint32_t layer, kt_role role, uint32_t expert,
                          kt_tensor_view *out)
{
    kt_status st = check_lookup(m, layer, role, expert);
    if (st < 0)
        return st;
    const kt__entry *e = find_entry(m, layer, role, expert);
    if (!e) {
        if (m->flags & KT_MODEL_OPEN_F_CONFIG_ONLY)
            return kt__error(KT_ERR_NOT_FOUND, "%s: opened config-only; no tensors", m->path);
        return kt__error(KT_ERR_NOT_FOUND, "%s: no %s tensor in layer %u (%s)", m->path,
                         kt_role_name(role), layer, kt_arch_name((kt_arch)m->cfg.info.arch));
    }
    return fill_out(out, &e->view, sizeof e->view, "kt_model_tensor");
}

int32_t kt_model_has_tensor(const kt_model *m, uint32_t layer, kt_role role, uint32_t expert)
{
    if (!m || kt__role_slot(role) < 0)
        return 0;
    if (!kt__role_is_global(role) && layer >= m->cfg.info.n_layers)
        return 0;
    if (kt__role_is_expert(role) && expert >= m->cfg.info.n_routed_experts)
        return 0;
    return find_entry(m, layer, role, expert) ? 1 : 0;
}

size_t kt_model_n_tensors(const kt_model *m)
{
    return m ? m->n_entries : 0;
}

kt_status kt_model_tensor_at(const kt_model *m, size_t i, kt_tensor_view *out)
{
    if (!m || i >= m->n_entries)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_tensor_at: index %zu out of range (%zu)",
                         i, m ? m->n_entries : (size_t)0);
    return fill_out(out, &m->entries[i].view, sizeof m->entries[i].view, "kt_model_tensor_at");
}

size_t kt_model_n_ignored_tensors(const kt_model *m)
{
    return m ? m->n_ignored : 0;
}

/* ----------------------------------------------------------- estimate --- */

kt_status kt_model_estimate(const kt_model *m, const kt_estimate_options *opts,
                            kt_memory_estimate *out)
{
    if (!m)
        return kt__error(KT_ERR_INVALID_ARG, "kt_model_estimate: model is NULL");
    kt_estimate_options o = KT_ESTIMATE_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_estimate_options");
    if (st < 0)
        return st;
    const kt_arch_info *a = &m->cfg.info;
    if (o.flags)
        return kt__error(KT_ERR_INVALID_ARG, "kt_estimate_options: unknown flags 0x%x", o.flags);
    if (o.n_gpus > KT_ESTIMATE_MAX_GPUS)
        return kt__error(KT_ERR_INVALID_ARG, "kt_estimate_options: n_gpus %u > %u", o.n_gpus,
                         KT_ESTIMATE_MAX_GPUS);
    if (o.gpu_experts_per_layer > a->n_routed_experts)
        return kt__error(KT_ERR_INVALID_ARG, "kt_estimate_options: gpu_experts_per_layer %u > "
                         "%u experts", o.gpu_experts_per_layer, a->n_routed_experts);
    if (o.gpu_experts_per_layer && !o.n_gpus)
        return kt__error(KT_ERR_INVALID_ARG, "kt_estimate_options: gpu_experts_per_layer "
                         "without n_gpus");

    uint64_t *layer_bytes = kt__calloc(a->n_layers, sizeof *layer_bytes);
    if (!layer_bytes)
        return KT_ERR_NOMEM;
    kt_memory_estimate e;
    memset(&e, 0, sizeof e);
    e.struct_size = (uint32_t)sizeof e;
    e.n_gpus = o.n_gpus;
    if ((st = kt__model_sizes(m, &e.dense_weight_bytes, layer_bytes)) < 0) {
        kt__free(layer_bytes);
        return st;
    }

    const uint64_t ctx = o.context_length ? o.context_length : a->max_position_embeddings;
    const uint64_t batch = o.batch_tokens ? o.batch_tokens : 512;
    /* KV cache, BF16: MLA keeps the latent + rope key; GQA keeps K and V per kv head */
    uint64_t kv_layer = a->attn_kind == KT_ATTN_MLA
                            ? 2ull * (a->kv_lora_rank + a->qk_rope_head_dim)
                            : 2ull * 2 * a->n_kv_heads * a->head_dim;
    uint64_t gpu_experts_total = 0, max_cpu_layer = 0;
    for (uint32_t l = 0; l < a->n_layers; l++) {
        uint32_t win = m->cfg.layer_window[l];
        uint64_t tokens = win && win < ctx ? win : ctx;
        e.kv_bytes_per_token += kv_layer;
        e.kv_bytes += kv_layer * tokens;
        e.routed_expert_bytes += layer_bytes[l];
        if (!m->cfg.layer_moe[l] || !a->n_routed_experts)
            continue;
        uint64_t one = layer_bytes[l] / a->n_routed_experts;
        if (one > e.expert_bytes)
            e.expert_bytes = one;
        gpu_experts_total += one * o.gpu_experts_per_layer;
        uint64_t cpu = one * (a->n_routed_experts - o.gpu_experts_per_layer);
        if (cpu > max_cpu_layer)
            max_cpu_layer = cpu;
    }
    kt__free(layer_bytes);

    /* activations of a prefill chunk: residual, normed input, q/k/v, FFN
     * intermediate (gate+up), logits; F32 */
    uint64_t wide = KT_MAX((uint64_t)a->n_heads * a->head_dim * 3,
                           2ull * KT_MAX(a->intermediate_size, a->moe_intermediate_size) *
                               KT_MAX(1u, a->n_experts_per_tok));
    uint64_t act = batch * 4 * (2ull * a->hidden_size + wide + a->vocab_size);
    uint64_t cpu_experts = e.routed_expert_bytes - gpu_experts_total;

    if (o.n_gpus == 0) {
        e.host_bytes = e.dense_weight_bytes + e.routed_expert_bytes + e.kv_bytes + act;
    } else {
        e.host_bytes = cpu_experts;
        /* per-layer MoE I/O (x BF16, ids, weights, out F32) and the layerwise
         * prefill double buffer of one layer's CPU experts */
        uint64_t io = batch * (2ull * a->hidden_size + 8ull * a->n_experts_per_tok +
                               4ull * a->hidden_size);
        e.pinned_bytes = io + 2 * max_cpu_layer;
        e.gpu_bytes[0] = e.dense_weight_bytes + e.kv_bytes + act + 2 * max_cpu_layer;
        for (uint32_t g = 0; g < o.n_gpus; g++)
            e.gpu_bytes[g] += gpu_experts_total / o.n_gpus +
                              (g < gpu_experts_total % o.n_gpus ? 1 : 0);
    }
    return fill_out(out, &e, sizeof e, "kt_model_estimate");
}
