/* Expert activation statistics: counts, decay, JSON save/load, .npy import. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kt/placement.h"
#include "kt_internal.h"
#include "placement_internal.h"

kt_status kt_expert_stats_create(kt_expert_stats **out, uint32_t n_layers, uint32_t n_experts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_expert_stats_create: out is NULL");
    *out = NULL;
    if (n_layers == 0 || n_experts == 0 || n_layers > 4096 || n_experts > 65536)
        return kt__error(KT_ERR_INVALID_ARG,
                         "expert stats: %u layers x %u experts is out of range", n_layers,
                         n_experts);
    kt_expert_stats *s = kt__calloc(1, sizeof *s);
    if (!s)
        return KT_ERR_NOMEM;
    s->n_layers = n_layers;
    s->n_experts = n_experts;
    s->counts = kt__calloc((size_t)n_layers * n_experts, sizeof(double));
    if (!s->counts) {
        kt__free(s);
        return KT_ERR_NOMEM;
    }
    *out = s;
    return KT_OK;
}

void kt_expert_stats_free(kt_expert_stats *s)
{
    if (!s)
        return;
    kt__free(s->counts);
    kt__free(s);
}

kt_status kt_expert_stats_record(kt_expert_stats *s, uint32_t layer, const int32_t *ids, size_t n)
{
    if (!s || (!ids && n))
        return kt__error(KT_ERR_INVALID_ARG, "kt_expert_stats_record: NULL argument");
    if (layer >= s->n_layers)
        return kt__error(KT_ERR_INVALID_ARG, "expert stats: layer %u >= %u", layer, s->n_layers);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < -1 || ids[i] >= (int32_t)s->n_experts)
            return kt__error(KT_ERR_INVALID_ARG, "expert stats: expert id %d outside 0..%u",
                             ids[i], s->n_experts - 1);
    double *row = s->counts + (size_t)layer * s->n_experts;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0)
            row[ids[i]] += 1.0;
    return KT_OK;
}

kt_status kt_expert_stats_add(kt_expert_stats *s, uint32_t layer, uint32_t expert, double count)
{
    if (!s || layer >= s->n_layers || expert >= s->n_experts || !isfinite(count))
        return kt__error(KT_ERR_INVALID_ARG, "kt_expert_stats_add: cell (%u, %u) out of range",
                         layer, expert);
    s->counts[(size_t)layer * s->n_experts + expert] += count;
    return KT_OK;
}

void kt_expert_stats_add_tokens(kt_expert_stats *s, uint64_t n)
{
    if (s)
        s->tokens += (double)n;
}

void kt_expert_stats_scale(kt_expert_stats *s, double factor)
{
    if (!s)
        return;
    size_t n = (size_t)s->n_layers * s->n_experts;
    for (size_t i = 0; i < n; i++)
        s->counts[i] *= factor;
    s->tokens *= factor;
}

double kt_expert_stats_count(const kt_expert_stats *s, uint32_t layer, uint32_t expert)
{
    if (!s || layer >= s->n_layers || expert >= s->n_experts)
        return 0.0;
    return s->counts[(size_t)layer * s->n_experts + expert];
}

uint32_t kt_expert_stats_n_layers(const kt_expert_stats *s)
{
    return s ? s->n_layers : 0;
}

uint32_t kt_expert_stats_n_experts(const kt_expert_stats *s)
{
    return s ? s->n_experts : 0;
}

uint64_t kt_expert_stats_tokens(const kt_expert_stats *s)
{
    return s ? (uint64_t)llround(s->tokens) : 0;
}

kt_status kt_expert_stats_save(const kt_expert_stats *s, const char *path)
{
    if (!s || !path)
        return kt__error(KT_ERR_INVALID_ARG, "kt_expert_stats_save: NULL argument");
    kt_buf b = KT_BUF_INIT;
    kt_status st = kt__buf_appendf(&b,
                                   "{\"format\": \"libkt.expert_stats\", \"version\": 1, "
                                   "\"n_layers\": %u, \"n_experts\": %u, \"tokens\": %.17g, "
                                   "\"counts\": [\n",
                                   s->n_layers, s->n_experts, s->tokens);
    for (uint32_t l = 0; st == KT_OK && l < s->n_layers; l++) {
        st = kt__buf_append(&b, "  [", 3);
        for (uint32_t e = 0; st == KT_OK && e < s->n_experts; e++)
            st = kt__buf_appendf(&b, "%s%.17g", e ? ", " : "",
                                 s->counts[(size_t)l * s->n_experts + e]);
        if (st == KT_OK)
            st = kt__buf_appendf(&b, "]%s\n", l + 1 < s->n_layers ? "," : "");
    }
    if (st == KT_OK)
        st = kt__buf_append(&b, "]}\n", 3);
    if (st < 0) {
        kt_buf_dispose(&b);
        return st;
    }
    st = kt__write_file_atomic(path, b.ptr, b.size);
    kt_buf_dispose(&b);
    return st;
}

kt_status kt__write_file_atomic(const char *path, const void *data, size_t size)
{
    size_t n = strlen(path) + 16;
    char *tmp = kt__malloc(n);
    if (!tmp)
        return KT_ERR_NOMEM;
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        kt_status st = kt__error(KT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        kt__free(tmp);
        return st;
    }
    bool ok = fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        kt_status st = kt__error(KT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        remove(tmp);
        kt__free(tmp);
        return st;
    }
    kt__free(tmp);
    return KT_OK;
}

/* Reads a whole small file (stats files are at most a few MB; cap at 1 GiB). */
static kt_status read_file(const char *path, char **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kt__error(KT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return kt__error(KT_ERR_IO, "%s: cannot seek", path);
    }
    long len = ftell(f);
    if (len < 0 || len > (1L << 30)) {
        fclose(f);
        return kt__error(KT_ERR_FORMAT, "%s: size %ld is not a statistics file", path, len);
    }
    rewind(f);
    char *buf = kt__malloc((size_t)len + 1);
    if (!buf) {
        fclose(f);
        return KT_ERR_NOMEM;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        kt__free(buf);
        fclose(f);
        return kt__error(KT_ERR_IO, "%s: short read", path);
    }
    fclose(f);
    buf[len] = '\0';
    *out = buf;
    *size = (size_t)len;
    return KT_OK;
}

static kt_status load_json(kt_expert_stats **out, const char *path, const char *text)
{
    cJSON *root = cJSON_Parse(text);
    if (!root)
        return kt__error(KT_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", path,
                         (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
    kt_status st = KT_OK;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(root, "n_layers");
    const cJSON *ne = cJSON_GetObjectItemCaseSensitive(root, "n_experts");
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(root, "counts");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "libkt.expert_stats") != 0) {
        st = kt__error(KT_ERR_FORMAT, "%s: \"format\" is not \"libkt.expert_stats\"", path);
        goto done;
    }
    if (!cJSON_IsNumber(nl) || !cJSON_IsNumber(ne) || !cJSON_IsArray(counts) ||
        nl->valuedouble < 1 || ne->valuedouble < 1 || nl->valuedouble > 4096 ||
        ne->valuedouble > 65536) {
        st = kt__error(KT_ERR_FORMAT, "%s: needs n_layers, n_experts (in range) and counts", path);
        goto done;
    }
    uint32_t L = (uint32_t)nl->valuedouble, E = (uint32_t)ne->valuedouble;
    if (cJSON_GetArraySize(counts) != (int)L) {
        st = kt__error(KT_ERR_FORMAT, "%s: counts has %d rows, n_layers is %u", path,
                       cJSON_GetArraySize(counts), L);
        goto done;
    }
    kt_expert_stats *s = NULL;
    if ((st = kt_expert_stats_create(&s, L, E)) < 0)
        goto done;
    uint32_t l = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, counts)
    {
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != (int)E) {
            st = kt__error(KT_ERR_FORMAT, "%s: counts[%u] is not an array of %u numbers", path, l,
                           E);
            kt_expert_stats_free(s);
            goto done;
        }
        uint32_t e = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, row)
        {
            if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble) || c->valuedouble < 0) {
                st = kt__error(KT_ERR_FORMAT, "%s: counts[%u][%u] is not a count >= 0", path, l,
                               e);
                kt_expert_stats_free(s);
                goto done;
            }
            s->counts[(size_t)l * E + e++] = c->valuedouble;
        }
        l++;
    }
    if (cJSON_IsNumber(tokens) && tokens->valuedouble >= 0)
        s->tokens = tokens->valuedouble;
    *out = s;
done:
    cJSON_Delete(root);
    return st;
}

/* NumPy .npy v1/v2/v3: magic, version, header length, a Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (B, L, E), }, data. */
static kt_status load_npy(kt_expert_stats **out, const char *path, const unsigned char *p,
                          size_t size)
{
    if (size < 10)
        return kt__error(KT_ERR_FORMAT, "%s: truncated .npy header", path);
    unsigned major = p[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = (size_t)p[8] | ((size_t)p[9] << 8);
        hoff = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return kt__error(KT_ERR_FORMAT, "%s: truncated .npy header", path);
        hlen = (size_t)p[8] | ((size_t)p[9] << 8) | ((size_t)p[10] << 16) | ((size_t)p[11] << 24);
        hoff = 12;
    } else {
        return kt__error(KT_ERR_FORMAT, "%s: unknown .npy version %u", path, major);
    }
    if (hlen > size - hoff || hlen > 65536)
        return kt__error(KT_ERR_FORMAT, "%s: .npy header length %zu past the end", path, hlen);
    char header[65537];
    memcpy(header, p + hoff, hlen);
    header[hlen] = '\0';
    const char *d = strstr(header, "'descr'");
    const char *fo = strstr(header, "'fortran_order'");
    const char *sh = strstr(header, "'shape'");
    if (!d || !fo || !sh)
        return kt__error(KT_ERR_FORMAT, "%s: .npy header lacks descr/fortran_order/shape", path);
    char descr[8] = {0};
    d = strchr(d + 7, '\'');
    if (!d || sscanf(d + 1, "%7[^']", descr) != 1)
        return kt__error(KT_ERR_FORMAT, "%s: bad .npy descr", path);
    if (strstr(fo, "True") && strstr(fo, "True") < sh)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: Fortran-ordered .npy arrays are not supported",
                         path);
    const char *lp = strchr(sh, '(');
    uint64_t dims[4];
    int nd = 0;
    if (!lp)
        return kt__error(KT_ERR_FORMAT, "%s: bad .npy shape", path);
    for (const char *q = lp + 1; *q && *q != ')';) {
        while (*q == ' ' || *q == ',')
            q++;
        if (*q == ')')
            break;
        char *end;
        unsigned long long v = strtoull(q, &end, 10);
        if (end == q || nd == 4)
            return kt__error(KT_ERR_FORMAT, "%s: bad .npy shape", path);
        dims[nd++] = v;
        q = end;
    }
    if (nd != 2 && nd != 3)
        return kt__error(KT_ERR_FORMAT,
                         "%s: .npy counts must be [layers][experts] or [buffer][layers][experts], "
                         "got %d dims",
                         path, nd);
    uint64_t B = nd == 3 ? dims[0] : 1, L = dims[nd - 2], E = dims[nd - 1];
    size_t esize;
    int kind; /* 0 float, 1 signed, 2 unsigned */
    if (!strcmp(descr, "<f4"))
        esize = 4, kind = 0;
    else if (!strcmp(descr, "<f8"))
        esize = 8, kind = 0;
    else if (!strcmp(descr, "<i4"))
        esize = 4, kind = 1;
    else if (!strcmp(descr, "<i8"))
        esize = 8, kind = 1;
    else if (!strcmp(descr, "<u4"))
        esize = 4, kind = 2;
    else if (!strcmp(descr, "<u8"))
        esize = 8, kind = 2;
    else
        return kt__error(KT_ERR_UNSUPPORTED, "%s: .npy dtype '%s' is not a count type", path,
                         descr);
    uint64_t n, bytes;
    if (L == 0 || E == 0 || L > 4096 || E > 65536 || !kt__mul_ok(B, L * E, &n) ||
        !kt__mul_ok(n, esize, &bytes) || bytes > size - hoff - hlen)
        return kt__error(KT_ERR_FORMAT, "%s: .npy shape does not match the file size", path);
    kt_expert_stats *s = NULL;
    kt_status st = kt_expert_stats_create(&s, (uint32_t)L, (uint32_t)E);
    if (st < 0)
        return st;
    const unsigned char *data = p + hoff + hlen;
    for (uint64_t i = 0; i < n; i++) {
        double v;
        if (kind == 0 && esize == 4) {
            float f;
            memcpy(&f, data + i * 4, 4);
            v = f;
        } else if (kind == 0) {
            memcpy(&v, data + i * 8, 8);
        } else if (kind == 1 && esize == 4) {
            int32_t x;
            memcpy(&x, data + i * 4, 4);
            v = x;
        } else if (kind == 1) {
            int64_t x;
            memcpy(&x, data + i * 8, 8);
            v = (double)x;
        } else if (esize == 4) {
            uint32_t x;
            memcpy(&x, data + i * 4, 4);
            v = x;
        } else {
            uint64_t x;
            memcpy(&x, data + i * 8, 8);
            v = (double)x;
        }
        if (!isfinite(v) || v < 0) {
            kt_expert_stats_free(s);
            return kt__error(KT_ERR_FORMAT, "%s: element %llu is not a count >= 0", path,
                             (unsigned long long)i);
        }
        s->counts[i % (L * E)] += v;
    }
    *out = s;
    return KT_OK;
}

kt_status kt_expert_stats_load(kt_expert_stats **out, const char *path)
{
    if (!out || !path)
        return kt__error(KT_ERR_INVALID_ARG, "kt_expert_stats_load: NULL argument");
    *out = NULL;
    char *buf = NULL;
    size_t size = 0;
    kt_status st = read_file(path, &buf, &size);
    if (st < 0)
        return st;
    if (size >= 6 && memcmp(buf, "\x93NUMPY", 6) == 0)
        st = load_npy(out, path, (const unsigned char *)buf, size);
    else
        st = load_json(out, path, buf);
    kt__free(buf);
    return st;
}
