/* Reader of libkt's CPU expert format (docs/cpu-format.md). */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_weights.h"
#include "io/safetensors.h"
#include "kt_internal.h"

#define MAX_LAYERS 4096

struct kt__cpu_weights {
    int method, version;
    uint32_t group, n_experts;
    uint64_t hidden, intermediate, source_checksum;
    uint32_t n_sets;           /* layers slots: [0, n_sets)  */
    kt_st_set **sets;          /* [n_sets], NULL = no file   */
};

typedef struct file_meta {
    int method, version;
    uint32_t group, layer, n_experts;
    uint64_t hidden, intermediate, source_checksum;
} file_meta;

static kt_status meta_u64(const kt_st_set *set, const char *path, const char *key, uint64_t *out,
                          int hex)
{
    const char *v = kt__st_metadata(set, key);
    char *end = NULL;
    if (!v || !*v)
        return kt__error(KT_ERR_FORMAT, "%s: metadata %s is missing", path, key);
    unsigned long long x = strtoull(v, &end, hex ? 16 : 10);
    if (*end)
        return kt__error(KT_ERR_FORMAT, "%s: metadata %s = '%s' is not a number", path, key, v);
    *out = x;
    return KT_OK;
}

static kt_status read_meta(const kt_st_set *set, const char *path, file_meta *m)
{
    const char *fmt = kt__st_metadata(set, "kt.format");
    const char *ver = kt__st_metadata(set, "kt.version");
    if (!fmt || strcmp(fmt, "libkt.cpu_experts") != 0)
        return kt__error(KT_ERR_FORMAT, "%s: not a libkt CPU expert file (kt.format is %s)", path,
                         fmt ? fmt : "missing");
    if (!ver || (strcmp(ver, "1") != 0 && strcmp(ver, "2") != 0))
        return kt__error(KT_ERR_UNSUPPORTED,
                         "%s: libkt CPU format version %s; this libkt reads versions 1 and 2",
                         path, ver ? ver : "missing");
    m->version = ver[0] - '0';
    const char *method = kt__st_metadata(set, "kt.method");
    m->method = kt_method_from_name(method);
    if (m->method != KT_METHOD_AMXINT8 && m->method != KT_METHOD_AMXINT4)
        return kt__error(KT_ERR_FORMAT, "%s: kt.method '%s' is not AMXINT8 or AMXINT4", path,
                         method ? method : "missing");
    uint64_t g = 0, l = 0, e = 0;
    kt_status st;
    if ((st = meta_u64(set, path, "kt.group_size", &g, 0)) < 0 ||
        (st = meta_u64(set, path, "kt.layer", &l, 0)) < 0 ||
        (st = meta_u64(set, path, "kt.n_experts", &e, 0)) < 0 ||
        (st = meta_u64(set, path, "kt.hidden", &m->hidden, 0)) < 0 ||
        (st = meta_u64(set, path, "kt.intermediate", &m->intermediate, 0)) < 0 ||
        (st = meta_u64(set, path, "kt.source_checksum", &m->source_checksum, 1)) < 0)
        return st;
    if (l >= MAX_LAYERS || e == 0 || e > 65536 || m->hidden == 0 || m->intermediate == 0 ||
        m->hidden > (1u << 20) || m->intermediate > (1u << 20) ||
        (m->method == KT_METHOD_AMXINT4 && g != 32 && g != 64 && g != 128) ||
        (m->method == KT_METHOD_AMXINT4 && (m->hidden % g || m->intermediate % g)))
        return kt__error(KT_ERR_FORMAT,
                         "%s: metadata out of range (layer %" PRIu64 ", experts %" PRIu64
                         ", group %" PRIu64 ")",
                         path, l, e, g);
    m->group = (uint32_t)g;
    m->layer = (uint32_t)l;
    m->n_experts = (uint32_t)e;
    return KT_OK;
}

static const char *const proj_name[3] = {"gate", "up", "down"};

/* Every expert tensor present with the type and shape the method says. */
static kt_status check_tensors(const kt_st_set *set, const char *path, const file_meta *m)
{
    for (uint32_t e = 0; e < m->n_experts; e++)
        for (int p = 0; p < 3; p++) {
            uint64_t rows = p == 2 ? m->hidden : m->intermediate;
            uint64_t cols = p == 2 ? m->intermediate : m->hidden;
            char name[96];
            const kt_st_tensor *q, *s;
            snprintf(name, sizeof name, "experts.%u.%s.q", e, proj_name[p]);
            kt_status st = kt__st_get(set, name, &q);
            if (st < 0)
                return kt__error_prefix(st, "%s", path);
            snprintf(name, sizeof name, "experts.%u.%s.scale", e, proj_name[p]);
            if ((st = kt__st_get(set, name, &s)) < 0)
                return kt__error_prefix(st, "%s", path);
            bool ok;
            if (m->method == KT_METHOD_AMXINT8)
                ok = q->type == KT_TYPE_I8 && q->n_dims == 2 && q->shape[0] == rows &&
                     q->shape[1] == cols && s->type == KT_TYPE_F32 && s->n_dims == 1 &&
                     s->shape[0] == rows;
            else
                ok = q->type == KT_TYPE_I32 && q->n_dims == 2 && q->shape[0] == rows &&
                     q->shape[1] == cols / 8 && s->type == KT_TYPE_BF16 && s->n_dims == 2 &&
                     s->shape[0] == rows && s->shape[1] == cols / m->group;
            if (!ok)
                return kt__error(KT_ERR_FORMAT,
                                 "%s: expert %u %s: q or scale has the wrong type or shape for "
                                 "%s",
                                 path, e, proj_name[p], kt_method_name((kt_method)m->method));
        }
    return KT_OK;
}

static kt_status open_file(const char *path, kt_st_set **set, file_meta *m)
{
    kt_status st = kt__st_open_file(set, path);
    if (st < 0)
        return st;
    if ((st = read_meta(*set, path, m)) < 0 || (st = check_tensors(*set, path, m)) < 0) {
        kt__st_close(*set);
        *set = NULL;
    }
    return st;
}

kt_status kt__cpu_weights_check(const char *path, int method, uint32_t group, uint32_t layer,
                                uint32_t n_experts, uint64_t hidden, uint64_t intermediate,
                                uint64_t source_checksum)
{
    kt_st_set *set = NULL;
    file_meta m;
    kt_status st = open_file(path, &set, &m);
    if (st < 0)
        return st;
    kt__st_close(set);
    if (m.method != method || m.group != group || m.layer != layer || m.n_experts != n_experts ||
        (method == KT_METHOD_AMXINT4 && m.version != KT__CPU_FORMAT_VERSION) ||
        m.hidden != hidden || m.intermediate != intermediate ||
        m.source_checksum != source_checksum)
        return kt__error(KT_ERR_FORMAT,
                         "%s: made by another conversion (method, group size, layer, shape, "
                         "source config or AMXINT4 format version differ)",
                         path);
    return KT_OK;
}

static kt_status add_file(kt__cpu_weights *cw, const char *path)
{
    kt_st_set *set = NULL;
    file_meta m;
    kt_status st = open_file(path, &set, &m);
    if (st < 0)
        return st;
    if (cw->n_experts == 0) {
        cw->method = m.method;
        cw->version = m.version;
        cw->group = m.group;
        cw->n_experts = m.n_experts;
        cw->hidden = m.hidden;
        cw->intermediate = m.intermediate;
        cw->source_checksum = m.source_checksum;
    } else if (m.method != cw->method || m.group != cw->group || m.n_experts != cw->n_experts ||
               (m.method == KT_METHOD_AMXINT4 && m.version != cw->version) ||
               m.hidden != cw->hidden || m.intermediate != cw->intermediate ||
               m.source_checksum != cw->source_checksum) {
        kt__st_close(set);
        return kt__error(KT_ERR_FORMAT,
                         "%s: does not match the other layer files (method, format version, "
                         "shape or source)",
                         path);
    }
    if (m.layer >= cw->n_sets) {
        uint32_t n = m.layer + 1;
        kt_st_set **grown = kt__realloc(cw->sets, n * sizeof *grown);
        if (!grown) {
            kt__st_close(set);
            return KT_ERR_NOMEM;
        }
        memset(grown + cw->n_sets, 0, (n - cw->n_sets) * sizeof *grown);
        cw->sets = grown;
        cw->n_sets = n;
    }
    if (cw->sets[m.layer]) {
        kt__st_close(set);
        return kt__error(KT_ERR_FORMAT, "%s: a second file for layer %u", path, m.layer);
    }
    cw->sets[m.layer] = set;
    return KT_OK;
}

kt_status kt__cpu_weights_open(kt__cpu_weights **out, const char *dir)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return kt__error(KT_ERR_IO, "%s: cannot open the CPU weight directory", dir);
    kt__cpu_weights *cw = kt__calloc(1, sizeof *cw);
    kt_status st = cw ? KT_OK : KT_ERR_NOMEM;
    struct dirent *ent;
    while (st == KT_OK && (ent = readdir(d)) != NULL) {
        size_t n = strlen(ent->d_name);
        if (strncmp(ent->d_name, "kt-experts-layer-", 17) != 0 || n < 12 ||
            strcmp(ent->d_name + n - 12, ".safetensors") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        st = add_file(cw, path);
    }
    closedir(d);
    if (st == KT_OK && cw->n_experts == 0)
        st = kt__error(KT_ERR_NOT_FOUND,
                       "%s: no kt-experts-layer-*.safetensors files (made by kt-convert)", dir);
    if (st < 0) {
        kt__cpu_weights_close(cw);
        return st;
    }
    *out = cw;
    return KT_OK;
}

kt_status kt__cpu_weights_open_layer(kt__cpu_weights **out, const char *dir, uint32_t layer)
{
    *out = NULL;
    kt__cpu_weights *cw = kt__calloc(1, sizeof *cw);
    if (!cw)
        return KT_ERR_NOMEM;
    char path[4096];
    snprintf(path, sizeof path, "%s/kt-experts-layer-%03u.safetensors", dir, layer);
    kt_status st = add_file(cw, path);
    if (st < 0) {
        kt__cpu_weights_close(cw);
        return st;
    }
    *out = cw;
    return KT_OK;
}

void kt__cpu_weights_close(kt__cpu_weights *cw)
{
    if (!cw)
        return;
    for (uint32_t i = 0; i < cw->n_sets; i++)
        kt__st_close(cw->sets[i]);
    kt__free(cw->sets);
    kt__free(cw);
}

int kt__cpu_weights_method(const kt__cpu_weights *cw)
{
    return cw->method;
}
int kt__cpu_weights_version(const kt__cpu_weights *cw)
{
    return cw->version;
}
uint32_t kt__cpu_weights_group(const kt__cpu_weights *cw)
{
    return cw->group;
}
uint32_t kt__cpu_weights_n_experts(const kt__cpu_weights *cw)
{
    return cw->n_experts;
}
uint64_t kt__cpu_weights_hidden(const kt__cpu_weights *cw)
{
    return cw->hidden;
}
uint64_t kt__cpu_weights_intermediate(const kt__cpu_weights *cw)
{
    return cw->intermediate;
}
uint64_t kt__cpu_weights_source_checksum(const kt__cpu_weights *cw)
{
    return cw->source_checksum;
}

int kt__cpu_weights_has_layer(const kt__cpu_weights *cw, uint32_t layer)
{
    return layer < cw->n_sets && cw->sets[layer] != NULL;
}

kt_status kt__cpu_weights_get(const kt__cpu_weights *cw, uint32_t layer, uint32_t expert,
                              int proj, const void **q, const void **scale)
{
    if (!kt__cpu_weights_has_layer(cw, layer))
        return kt__error(KT_ERR_NOT_FOUND, "CPU weights: no file for layer %u", layer);
    if (expert >= cw->n_experts || proj < 0 || proj > 2)
        return kt__error(KT_ERR_INVALID_ARG, "CPU weights: expert %u / part %d out of range",
                         expert, proj);
    char name[96];
    const kt_st_tensor *t;
    snprintf(name, sizeof name, "experts.%u.%s.q", expert, proj_name[proj]);
    kt_status st = kt__st_get(cw->sets[layer], name, &t);
    if (st < 0)
        return st;
    *q = t->data;
    snprintf(name, sizeof name, "experts.%u.%s.scale", expert, proj_name[proj]);
    if ((st = kt__st_get(cw->sets[layer], name, &t)) < 0)
        return st;
    *scale = t->data;
    return KT_OK;
}

/* 64-bit multiply-xorshift hash over 8-byte words (fast enough to run over
 * every source byte a conversion reads). */
uint64_t kt__hash64(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * UINT64_C(0x9E3779B97F4A7C15);
        h ^= h >> 29;
        b += 8;
        n -= 8;
    }
    while (n--) {
        h = (h ^ *b++) * UINT64_C(0x100000001B3);
        h ^= h >> 31;
    }
    return h;
}

uint64_t kt__cpu_weights_config_checksum(const char *model_dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    FILE *f = fopen(path, "rb");
    if (!f)
        return h;
    char *buf = kt__malloc(1 << 24);
    size_t n = buf ? fread(buf, 1, 1 << 24, f) : 0;
    fclose(f);
    h = kt__hash64(h, buf, n);
    kt__free(buf);
    return h;
}
