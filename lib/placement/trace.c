/* Routing traces: the routed ids of a run per step and layer, kept in memory
 * and saved to / loaded from a small binary file for replay. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kt/placement.h"
#include "kt_internal.h"
#include "placement_internal.h"

#define TRACE_MAGIC "KTROUTE1"
#define TRACE_HEADER_BYTES 32 /* magic 8, version, n_layers, n_experts, top_k, n_records 8 */

typedef struct trace_record {
    uint32_t layer, n_tokens;
    size_t offset; /* into ids, in values */
} trace_record;

struct kt_route_trace {
    uint32_t n_layers, n_experts, top_k;
    trace_record *records;
    size_t n_records, cap_records;
    int32_t *ids;
    size_t n_ids, cap_ids;
};

kt_status kt_route_trace_create(kt_route_trace **out, uint32_t n_layers, uint32_t n_experts,
                                uint32_t top_k)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_create: out is NULL");
    *out = NULL;
    if (!n_layers || !n_experts || !top_k || top_k > n_experts)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_create: need n_layers, n_experts "
                         "> 0 and 0 < top_k <= n_experts (got %u, %u, %u)", n_layers, n_experts,
                         top_k);
    kt_route_trace *t = kt__calloc(1, sizeof *t);
    if (!t)
        return KT_ERR_NOMEM;
    t->n_layers = n_layers;
    t->n_experts = n_experts;
    t->top_k = top_k;
    *out = t;
    return KT_OK;
}

void kt_route_trace_free(kt_route_trace *t)
{
    if (!t)
        return;
    kt__free(t->records);
    kt__free(t->ids);
    kt__free(t);
}

/* Grows *p (elements of `size`) to hold at least `need`; doubles. */
static kt_status grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return KT_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return KT_ERR_NOMEM;
        n *= 2;
    }
    size_t bytes;
    if (!kt__mul_ok(n, size, &bytes))
        return KT_ERR_NOMEM;
    void *q = kt__realloc(*p, bytes);
    if (!q)
        return KT_ERR_NOMEM;
    *p = q;
    *cap = n;
    return KT_OK;
}

kt_status kt_route_trace_record(kt_route_trace *t, uint32_t layer, const int32_t *ids,
                                uint32_t n_tokens)
{
    if (!t || (!ids && n_tokens))
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_record: NULL argument");
    if (layer >= t->n_layers)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_record: layer %u of %u", layer,
                         t->n_layers);
    size_t n = (size_t)n_tokens * t->top_k;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < -1 || ids[i] >= (int32_t)t->n_experts)
            return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_record: layer %u: expert id "
                             "%d outside 0..%u", layer, ids[i], t->n_experts - 1);
    if (grow((void **)&t->records, &t->cap_records, t->n_records + 1, sizeof *t->records) < 0 ||
        grow((void **)&t->ids, &t->cap_ids, t->n_ids + n, sizeof *t->ids) < 0)
        return kt__error(KT_ERR_NOMEM, "kt_route_trace_record: no memory for %zu records",
                         t->n_records + 1);
    trace_record *r = &t->records[t->n_records++];
    r->layer = layer;
    r->n_tokens = n_tokens;
    r->offset = t->n_ids;
    if (n)
        memcpy(t->ids + t->n_ids, ids, n * sizeof *ids);
    t->n_ids += n;
    return KT_OK;
}

uint32_t kt_route_trace_n_layers(const kt_route_trace *t) { return t ? t->n_layers : 0; }
uint32_t kt_route_trace_n_experts(const kt_route_trace *t) { return t ? t->n_experts : 0; }
uint32_t kt_route_trace_top_k(const kt_route_trace *t) { return t ? t->top_k : 0; }
size_t kt_route_trace_n_records(const kt_route_trace *t) { return t ? t->n_records : 0; }

kt_status kt_route_trace_get(const kt_route_trace *t, size_t index, uint32_t *layer,
                             uint32_t *n_tokens, const int32_t **ids)
{
    if (!t || index >= t->n_records)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_get: record %zu of %zu", index,
                         t ? t->n_records : 0);
    const trace_record *r = &t->records[index];
    if (layer)
        *layer = r->layer;
    if (n_tokens)
        *n_tokens = r->n_tokens;
    if (ids)
        *ids = t->ids + r->offset;
    return KT_OK;
}

kt_status kt_route_trace_to_stats(const kt_route_trace *t, size_t first, size_t last,
                                  kt_expert_stats *stats)
{
    if (!t || !stats)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_to_stats: NULL argument");
    if (stats->n_layers != t->n_layers || stats->n_experts != t->n_experts)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_to_stats: statistics are %ux%u, "
                         "the trace %ux%u", stats->n_layers, stats->n_experts, t->n_layers,
                         t->n_experts);
    if (last > t->n_records)
        last = t->n_records;
    int64_t prev = -1;
    for (size_t i = first; i < last; i++) {
        const trace_record *r = &t->records[i];
        /* a step's tokens are counted once, at its first record */
        if ((int64_t)r->layer <= prev || i == first)
            kt_expert_stats_add_tokens(stats, r->n_tokens);
        prev = r->layer;
        kt_status st = kt_expert_stats_record(stats, r->layer, t->ids + r->offset,
                                              (size_t)r->n_tokens * t->top_k);
        if (st < 0)
            return st;
    }
    return KT_OK;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

kt_status kt_route_trace_save(const kt_route_trace *t, const char *path)
{
    if (!t || !path)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_save: NULL argument");
    size_t bytes = TRACE_HEADER_BYTES + t->n_records * 8 + t->n_ids * 4;
    unsigned char *buf = kt__malloc(bytes);
    if (!buf)
        return kt__error(KT_ERR_NOMEM, "kt_route_trace_save: no memory for %zu bytes", bytes);
    memcpy(buf, TRACE_MAGIC, 8);
    put_u32(buf + 8, 1);
    put_u32(buf + 12, t->n_layers);
    put_u32(buf + 16, t->n_experts);
    put_u32(buf + 20, t->top_k);
    put_u32(buf + 24, (uint32_t)t->n_records);
    put_u32(buf + 28, (uint32_t)((uint64_t)t->n_records >> 32));
    unsigned char *p = buf + TRACE_HEADER_BYTES;
    for (size_t i = 0; i < t->n_records; i++) {
        const trace_record *r = &t->records[i];
        put_u32(p, r->layer);
        put_u32(p + 4, r->n_tokens);
        p += 8;
        for (size_t j = 0; j < (size_t)r->n_tokens * t->top_k; j++, p += 4)
            put_u32(p, (uint32_t)t->ids[r->offset + j]);
    }
    kt_status st = kt__write_file_atomic(path, buf, bytes);
    kt__free(buf);
    return st;
}

kt_status kt_route_trace_load(kt_route_trace **out, const char *path)
{
    if (!out || !path)
        return kt__error(KT_ERR_INVALID_ARG, "kt_route_trace_load: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kt__error(KT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char h[TRACE_HEADER_BYTES];
    kt_status st = KT_OK;
    kt_route_trace *t = NULL;
    int32_t *ids = NULL;
    size_t cap = 0;
    if (fread(h, 1, sizeof h, f) != sizeof h || memcmp(h, TRACE_MAGIC, 8) != 0) {
        st = kt__error(KT_ERR_FORMAT, "%s: not a routing trace (no \"%s\" header)", path,
                       TRACE_MAGIC);
        goto done;
    }
    if (get_u32(h + 8) != 1) {
        st = kt__error(KT_ERR_FORMAT, "%s: trace version %u (this libkt reads 1)", path,
                       get_u32(h + 8));
        goto done;
    }
    uint64_t n_records = (uint64_t)get_u32(h + 24) | (uint64_t)get_u32(h + 28) << 32;
    st = kt_route_trace_create(&t, get_u32(h + 12), get_u32(h + 16), get_u32(h + 20));
    if (st < 0) {
        st = kt__error(KT_ERR_FORMAT, "%s: bad header: %s", path, kt_last_error());
        goto done;
    }
    for (uint64_t i = 0; i < n_records; i++) {
        unsigned char rh[8];
        if (fread(rh, 1, 8, f) != 8) {
            st = kt__error(KT_ERR_FORMAT, "%s: truncated at record %llu of %llu", path,
                           (unsigned long long)i, (unsigned long long)n_records);
            goto done;
        }
        uint32_t layer = get_u32(rh), n_tokens = get_u32(rh + 4);
        size_t n = (size_t)n_tokens * t->top_k;
        if (n_tokens > (1u << 26) ||
            grow((void **)&ids, &cap, n ? n : 1, sizeof *ids) < 0) {
            st = kt__error(KT_ERR_FORMAT, "%s: record %llu has %u tokens", path,
                           (unsigned long long)i, n_tokens);
            goto done;
        }
        if (fread(ids, 4, n, f) != n) {
            st = kt__error(KT_ERR_FORMAT, "%s: truncated in record %llu", path,
                           (unsigned long long)i);
            goto done;
        }
        for (size_t j = 0; j < n; j++)
            ids[j] = (int32_t)get_u32((const unsigned char *)&ids[j]);
        st = kt_route_trace_record(t, layer, ids, n_tokens);
        if (st < 0) {
            st = kt__error(KT_ERR_FORMAT, "%s: record %llu: %s", path, (unsigned long long)i,
                           kt_last_error());
            goto done;
        }
    }
    if (fgetc(f) != EOF) {
        st = kt__error(KT_ERR_FORMAT, "%s: bytes after the last of %llu records", path,
                       (unsigned long long)n_records);
        goto done;
    }
done:
    fclose(f);
    kt__free(ids);
    if (st < 0) {
        kt_route_trace_free(t);
        return st;
    }
    *out = t;
    return KT_OK;
}
