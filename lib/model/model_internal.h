/*
 * Internals of lib/model: the parsed configuration and the model handle.
 * Not installed.
 */
#ifndef KT_MODEL_INTERNAL_H
#define KT_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kt/model.h"
#include "kt_internal.h"

struct kt_st_set;
struct kt_gguf;
struct cJSON;

/* Largest values a config may declare; beyond them a config is rejected
 * before anything is sized from it (no unbounded allocation on hostile input). */
#define KT__MAX_LAYERS 4096u
#define KT__MAX_EXPERTS 65536u
#define KT__MAX_DIM (1u << 24)
#define KT__MAX_VOCAB (1u << 26)
#define KT__MAX_EOS 64u
#define KT__MAX_IGNORE 4096u

/* A parsed config.json (or GGUF metadata): the public description plus the
 * storage its borrowed pointers point into and the per-layer facts. */
typedef struct kt__config {
    kt_arch_info info;          /* pointers below are borrowed into this struct  */
    char *model_type;
    int32_t *eos_ids;           /* [n_eos_token_ids]                              */
    char **quant_ignore;        /* [n_quant_ignore]                               */
    void **ignore_re;           /* [n_quant_ignore] pcre2_code* (NULL: exact name) */
    uint8_t *layer_moe;         /* [n_layers]                                     */
    uint32_t *layer_window;     /* [n_layers] sliding window, 0: full             */
    bool ignore_substring;      /* fp8 modules_to_not_convert match as substrings */
    bool mla_split_kv_b;        /* GGUF: attn_k_b + attn_v_b instead of attn_kv_b */
} kt__config;

/* Parses a config from JSON text. `file` names it in messages ("path/config.json").
 * rt (may be NULL) receives warnings (e.g. bos/eos out of vocab). On failure
 * *cfg is left empty (kt__config_free is still safe). */
kt_status kt__config_parse(kt__config *cfg, const char *json, size_t len, const char *file,
                           const kt_runtime *rt);
/* Same from an already parsed JSON object. */
kt_status kt__config_from_json(kt__config *cfg, const struct cJSON *root, const char *file,
                               const kt_runtime *rt);
void kt__config_free(kt__config *cfg);

/* Allocates the per-layer arrays and the ignore list storage after the fields
 * are known; used by the GGUF path that fills kt_arch_info itself. */
kt_status kt__config_alloc_layers(kt__config *cfg);
/* Derived fields (attn_scale, rotary dims, yarn attention factor, n_moe_layers)
 * and the consistency checks shared by both config sources. */
kt_status kt__config_finish(kt__config *cfg, const char *file, const kt_runtime *rt);

/* True when module `name` (e.g. "model.layers.3.mlp.experts.0.up_proj") is in
 * the quantization ignore list: compressed-tensors `re:` patterns match from the
 * start and other entries exactly; fp8 `modules_to_not_convert` entries match as
 * substrings (as transformers applies them). */
bool kt__config_quant_ignored(const kt__config *cfg, const char *name);

/* One indexed weight. */
typedef struct kt__entry {
    kt_tensor_view view;        /* struct_size = sizeof(kt_tensor_view)           */
} kt__entry;

/* Compact role numbering for lookup tables. */
#define KT__N_ROLE_SLOTS 64

struct kt_model {
    kt_runtime *rt;
    char *path;
    kt_file_format format;
    uint32_t flags;
    kt__config cfg;
    struct kt_st_set *st;       /* safetensors set, or NULL                       */
    struct kt_gguf *gguf;       /* GGUF file (first shard of a split set), or NULL */
    struct kt_gguf **gguf_more; /* [n_gguf_more] further shards of a split set     */
    uint32_t n_gguf_more;
    kt__entry *entries;         /* [n_entries] ordered by layer, role, expert      */
    size_t n_entries;
    size_t n_ignored;
    /* lookup: slot[(layer + 1) * KT__N_ROLE_SLOTS + role_slot] = first entry + 1
     * (0: absent); row 0 holds global roles. Expert entries are contiguous. */
    uint32_t *slot;
};

/* Role table (lib/model/tensors.c). */
int kt__role_slot(kt_role role);          /* -1 if not a role                      */
bool kt__role_is_expert(kt_role role);
bool kt__role_is_global(kt_role role);

/* Builds the tensor index of a safetensors model (tensors.c). */
kt_status kt__model_index_safetensors(kt_model *m);
/* Builds the config and tensor index of a GGUF model (gguf_model.c): of m->gguf
 * when already parsed (the fuzz harness parses from memory), else of m->path. */
kt_status kt__model_open_gguf(kt_model *m);

/* Bytes of dense weights and, per layer, of all its routed experts (scales
 * included): from the index, or computed from the config when config-only. */
kt_status kt__model_sizes(const kt_model *m, uint64_t *dense_bytes, uint64_t *layer_expert_bytes);

/* Logical [rows][cols] the config implies for (layer, role) (cols 1 for vectors). */
void kt__role_expected_shape(const kt_model *m, uint32_t layer, kt_role role, uint64_t *rows,
                             uint64_t *cols);
/* Roles a layer has, in enum order (out holds at least 64). */
size_t kt__layer_roles(const kt__config *cfg, uint32_t layer, kt_role *out);

/* Appends an entry (grows m->entries). */
kt_status kt__model_add_entry(kt_model *m, const kt_tensor_view *v, size_t *capacity);
/* Sorts entries and builds the lookup table. */
kt_status kt__model_finish_index(kt_model *m);

#endif /* KT_MODEL_INTERNAL_H */
