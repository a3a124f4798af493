/*
 * GGUF v2/v3 reader and writer (see gguf.h for the layout).
 *
 * The reader distrusts every count and length: before anything is allocated
 * for n items it checks that the bytes left in the file could hold n of the
 * smallest possible encoding, so a hostile header cannot ask for more memory
 * than a small multiple of the file size. Arrays nest at most
 * KT_GGUF_MAX_ARRAY_DEPTH deep (bounded recursion).
 */
#define _GNU_SOURCE
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert_types.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

#define GGUF_MAGIC "GGUF"

/* ---- arena: metadata copies, freed at once ------------------------------------------ */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_chunk;

static void *arena_alloc(arena_chunk **arena, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    arena_chunk *c = *arena;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        c = kt__malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = *arena;
        c->used = 0;
        c->cap = cap;
        *arena = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    return p;
}

static void arena_free(arena_chunk *c)
{
    while (c) {
        arena_chunk *next = c->next;
        kt__free(c);
        c = next;
    }
}

/* ---- name hash (tensors, keys) ------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

typedef struct name_index {
    size_t *slots; /* item index + 1; 0 = empty */
    size_t n_slots;
} name_index;

typedef const char *(*name_of_fn)(const void *items, size_t i);

/* Builds the index over n names; a name that appears twice is an error naming the file
 * and what the names are ("tensor", "metadata key"). */
static kt_status index_build(name_index *ix, const void *items, size_t n, name_of_fn name_of,
                             const char *file, const char *what)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = kt__calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return KT_ERR_NOMEM;
    ix->n_slots = cap;
    for (size_t i = 0; i < n; i++) {
        const char *name = name_of(items, i);
        size_t j = (size_t)hash_str(name) & (cap - 1);
        while (ix->slots[j]) {
            if (strcmp(name_of(items, ix->slots[j] - 1), name) == 0)
                return kt__error(KT_ERR_FORMAT, "%s: %s '%s' appears twice", file, what, name);
            j = (j + 1) & (cap - 1);
        }
        ix->slots[j] = i + 1;
    }
    return KT_OK;
}

static size_t index_find(const name_index *ix, const void *items, name_of_fn name_of,
                         const char *name)
{
    if (!ix->n_slots)
        return SIZE_MAX;
    size_t mask = ix->n_slots - 1, j = (size_t)hash_str(name) & mask;
    while (ix->slots[j]) {
        if (strcmp(name_of(items, ix->slots[j] - 1), name) == 0)
            return ix->slots[j] - 1;
        j = (j + 1) & mask;
    }
    return SIZE_MAX;
}

static const char *kv_name(const void *items, size_t i)
{
    return ((const kt_gguf_kv *)items)[i].key;
}

static const char *tensor_name(const void *items, size_t i)
{
    return ((const kt_gguf_tensor *)items)[i].name;
}

/* ---- context ------------------------------------------------------------------------- */

struct kt_gguf {
    char *name;
    const unsigned char *base;
    size_t size;
    bool mapped;
    uint32_t version, alignment;
    uint64_t data_offset;
    kt_gguf_kv *kvs;
    size_t n_kv;
    kt_gguf_tensor *tensors;
    size_t n_tensors;
    name_index kv_index, tensor_index;
    arena_chunk *arena;
};

void kt__gguf_close(kt_gguf *g)
{
    if (!g)
        return;
    if (g->mapped && g->size)
        munmap((void *)g->base, g->size);
    arena_free(g->arena);
    kt__free(g->kv_index.slots);
    kt__free(g->tensor_index.slots);
    kt__free(g->kvs);
    kt__free(g->tensors);
    kt__free(g->name);
    kt__free(g);
}

const char *kt__gguf_type_name(kt_gguf_type t)
{
    static const char *names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < KT_ARRAY_LEN(names) ? names[t] : "?";
}

/* Bytes of one scalar of type t; 0 for STRING/ARRAY/unknown. */
static size_t scalar_size(kt_gguf_type t)
{
    switch (t) {
    case KT_GGUF_U8: case KT_GGUF_I8: case KT_GGUF_BOOL: return 1;
    case KT_GGUF_U16: case KT_GGUF_I16: return 2;
    case KT_GGUF_U32: case KT_GGUF_I32: case KT_GGUF_F32: return 4;
    case KT_GGUF_U64: case KT_GGUF_I64: case KT_GGUF_F64: return 8;
    default: return 0;
    }
}

static bool valid_type(uint32_t t)
{
    return t <= KT_GGUF_F64;
}

/* Smallest encoding of one value of type t in the file. */
static size_t min_encoded_size(kt_gguf_type t)
{
    if (t == KT_GGUF_STRING)
        return 8;
    if (t == KT_GGUF_ARRAY)
        return 12;
    return scalar_size(t);
}

/* ---- reader -------------------------------------------------------------------------- */

typedef struct reader {
    kt_gguf *g;
    size_t pos;
} reader;

static size_t left(const reader *r)
{
    return r->g->size - r->pos;
}

static kt_status truncated(const reader *r, const char *what)
{
    return kt__error(KT_ERR_FORMAT, "%s: truncated at byte %zu reading %s (file is %zu bytes)",
                     r->g->name, r->pos, what, r->g->size);
}

static kt_status read_raw(reader *r, void *out, size_t n, const char *what)
{
    if (left(r) < n)
        return truncated(r, what);
    memcpy(out, r->g->base + r->pos, n);
    r->pos += n;
    return KT_OK;
}

static kt_status read_u32(reader *r, uint32_t *v, const char *what)
{
    return read_raw(r, v, 4, what);
}

static kt_status read_u64(reader *r, uint64_t *v, const char *what)
{
    return read_raw(r, v, 8, what);
}

/* A GGUF string, copied NUL-terminated into the arena. */
static kt_status read_string(reader *r, kt_gguf_str *out, const char *what)
{
    uint64_t len = 0;
    kt_status s = read_u64(r, &len, what);
    if (s)
        return s;
    if (len > left(r))
        return kt__error(KT_ERR_FORMAT, "%s: %s of %llu bytes at byte %zu runs past the end of "
                         "the file", r->g->name, what, (unsigned long long)len, r->pos - 8);
    char *p = arena_alloc(&r->g->arena, (size_t)len + 1);
    if (!p)
        return KT_ERR_NOMEM;
    memcpy(p, r->g->base + r->pos, (size_t)len);
    p[len] = '\0';
    r->pos += (size_t)len;
    out->ptr = p;
    out->len = len;
    return KT_OK;
}

static kt_status read_value(reader *r, kt_gguf_type type, kt_gguf_value *out, int depth,
                            const char *key);

static kt_status read_scalar(reader *r, kt_gguf_type type, kt_gguf_value *out, const char *key)
{
    unsigned char b[8] = {0};
    size_t n = scalar_size(type);
    if (left(r) < n)
        return truncated(r, key);
    memcpy(b, r->g->base + r->pos, n);
    r->pos += n;
    out->type = type;
    switch (type) {
    case KT_GGUF_U8: out->v.u = b[0]; break;
    case KT_GGUF_I8: out->v.i = (int8_t)b[0]; break;
    case KT_GGUF_U16: { uint16_t x; memcpy(&x, b, 2); out->v.u = x; break; }
    case KT_GGUF_I16: { int16_t x; memcpy(&x, b, 2); out->v.i = x; break; }
    case KT_GGUF_U32: { uint32_t x; memcpy(&x, b, 4); out->v.u = x; break; }
    case KT_GGUF_I32: { int32_t x; memcpy(&x, b, 4); out->v.i = x; break; }
    case KT_GGUF_F32: { float x; memcpy(&x, b, 4); out->v.f = x; break; }
    case KT_GGUF_U64: { uint64_t x; memcpy(&x, b, 8); out->v.u = x; break; }
    case KT_GGUF_I64: { int64_t x; memcpy(&x, b, 8); out->v.i = x; break; }
    case KT_GGUF_F64: { double x; memcpy(&x, b, 8); out->v.f = x; break; }
    case KT_GGUF_BOOL:
        if (b[0] > 1)
            return kt__error(KT_ERR_FORMAT, "%s: key '%s': bool value %u is not 0 or 1",
                             r->g->name, key, b[0]);
        out->v.b = b[0] != 0;
        break;
    default:
        return kt__error(KT_ERR_INTERNAL, "read_scalar: type %d", (int)type);
    }
    return KT_OK;
}

static kt_status read_array(reader *r, kt_gguf_value *out, int depth, const char *key)
{
    uint32_t elem = 0;
    uint64_t n = 0;
    kt_status s = read_u32(r, &elem, key);
    if (!s)
        s = read_u64(r, &n, key);
    if (s)
        return s;
    if (!valid_type(elem))
        return kt__error(KT_ERR_FORMAT, "%s: key '%s': unknown array element type %u",
                         r->g->name, key, elem);
    if (elem == KT_GGUF_ARRAY && depth + 1 >= KT_GGUF_MAX_ARRAY_DEPTH)
        return kt__error(KT_ERR_FORMAT, "%s: key '%s': arrays nested deeper than %d",
                         r->g->name, key, KT_GGUF_MAX_ARRAY_DEPTH);
    size_t min = min_encoded_size((kt_gguf_type)elem);
    if (n > left(r) / min)
        return kt__error(KT_ERR_FORMAT, "%s: key '%s': array of %llu %s elements runs past the "
                         "end of the file", r->g->name, key, (unsigned long long)n,
                         kt__gguf_type_name((kt_gguf_type)elem));
    out->type = KT_GGUF_ARRAY;
    out->v.arr.elem = (kt_gguf_type)elem;
    out->v.arr.n = n;
    size_t count = (size_t)n;
    if (elem == KT_GGUF_STRING) {
        kt_gguf_str *strs = arena_alloc(&r->g->arena, count * sizeof *strs);
        if (!strs)
            return KT_ERR_NOMEM;
        for (size_t i = 0; i < count && !s; i++)
            s = read_string(r, &strs[i], key);
        out->v.arr.data = strs;
    } else if (elem == KT_GGUF_ARRAY) {
        kt_gguf_value *vals = arena_alloc(&r->g->arena, count * sizeof *vals);
        if (!vals)
            return KT_ERR_NOMEM;
        for (size_t i = 0; i < count && !s; i++)
            s = read_value(r, KT_GGUF_ARRAY, &vals[i], depth + 1, key);
        out->v.arr.data = vals;
    } else {
        size_t bytes = count * min;
        unsigned char *data = arena_alloc(&r->g->arena, bytes);
        if (!data)
            return KT_ERR_NOMEM;
        s = read_raw(r, data, bytes, key);
        if (!s && elem == KT_GGUF_BOOL)
            for (size_t i = 0; i < count; i++)
                if (data[i] > 1)
                    return kt__error(KT_ERR_FORMAT, "%s: key '%s': bool element %zu is %u, not "
                                     "0 or 1", r->g->name, key, i, data[i]);
        out->v.arr.data = data;
    }
    return s;
}

static kt_status read_value(reader *r, kt_gguf_type type, kt_gguf_value *out, int depth,
                            const char *key)
{
    if (type == KT_GGUF_STRING) {
        out->type = type;
        return read_string(r, &out->v.str, key);
    }
    if (type == KT_GGUF_ARRAY)
        return read_array(r, out, depth, key);
    return read_scalar(r, type, out, key);
}

static kt_status read_kvs(reader *r, uint64_t n_kv)
{
    kt_gguf *g = r->g;
    if (n_kv > left(r) / 12) /* key length + value type at least */
        return kt__error(KT_ERR_FORMAT, "%s: %llu metadata entries cannot fit in the file",
                         g->name, (unsigned long long)n_kv);
    g->kvs = kt__calloc((size_t)n_kv ? (size_t)n_kv : 1, sizeof *g->kvs);
    if (!g->kvs)
        return KT_ERR_NOMEM;
    for (size_t i = 0; i < (size_t)n_kv; i++) {
        kt_gguf_str key;
        uint32_t type = 0;
        kt_status s = read_string(r, &key, "metadata key");
        if (!s)
            s = read_u32(r, &type, key.ptr);
        if (s)
            return s;
        if (key.len == 0 || strlen(key.ptr) != key.len)
            return kt__error(KT_ERR_FORMAT, "%s: metadata key %zu is empty or holds a NUL",
                             g->name, i);
        if (!valid_type(type))
            return kt__error(KT_ERR_FORMAT, "%s: key '%s': unknown value type %u", g->name,
                             key.ptr, type);
        g->kvs[i].key = key.ptr;
        s = read_value(r, (kt_gguf_type)type, &g->kvs[i].value, 0, key.ptr);
        if (s)
            return s;
        g->n_kv = i + 1;
    }
    kt_status s = index_build(&g->kv_index, g->kvs, g->n_kv, kv_name, g->name, "metadata key");
    if (s)
        return s;
    const kt_gguf_value *align = kt__gguf_find(g, "general.alignment");
    g->alignment = KT_GGUF_DEFAULT_ALIGNMENT;
    if (align) {
        if (align->type != KT_GGUF_U32 || align->v.u == 0 || (align->v.u & (align->v.u - 1)))
            return kt__error(KT_ERR_FORMAT, "%s: general.alignment must be a u32 power of two",
                             g->name);
        g->alignment = (uint32_t)align->v.u;
    }
    return KT_OK;
}

static kt_status read_tensor_info(reader *r, kt_gguf_tensor *t, size_t i)
{
    kt_gguf *g = r->g;
    kt_gguf_str name;
    kt_status s = read_string(r, &name, "tensor name");
    if (!s)
        s = read_u32(r, &t->n_dims, name.ptr);
    if (s)
        return s;
    t->name = name.ptr;
    if (name.len == 0 || strlen(name.ptr) != name.len)
        return kt__error(KT_ERR_FORMAT, "%s: tensor %zu has an empty name or one holding a NUL",
                         g->name, i);
    if (t->n_dims > KT_GGUF_MAX_DIMS)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': %u dimensions (at most %d)", g->name,
                         t->name, t->n_dims, KT_GGUF_MAX_DIMS);
    t->n_elements = 1;
    for (uint32_t d = 0; d < KT_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        s = read_u64(r, &t->ne[d], t->name);
        if (s)
            return s;
        if (t->ne[d] > (uint64_t)INT64_MAX || !kt__mul_ok(t->n_elements, t->ne[d],
                                                          &t->n_elements) ||
            t->n_elements > (uint64_t)INT64_MAX)
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': element count overflows",
                             g->name, t->name);
    }
    s = read_u32(r, &t->ggml_type, t->name);
    if (!s)
        s = read_u64(r, &t->offset, t->name);
    if (s)
        return s;
    const kt_ggml_type_info *info = kt__ggml_type_info(t->ggml_type);
    if (!info)
        return kt__error(t->ggml_type < 64 ? KT_ERR_UNSUPPORTED : KT_ERR_FORMAT,
                         "%s: tensor '%s': unknown ggml type %u", g->name, t->name,
                         t->ggml_type);
    t->type = kt__type_from_ggml(t->ggml_type);
    if (t->ne[0] % info->block_size)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': row of %llu elements is not a whole "
                         "number of %s blocks of %u", g->name, t->name,
                         (unsigned long long)t->ne[0], info->name, info->block_size);
    if (!kt__mul_ok(t->n_elements / info->block_size, info->type_size, &t->nbytes))
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': byte size overflows", g->name,
                         t->name);
    return KT_OK;
}

static int compare_offsets(const void *a, const void *b)
{
    const kt_gguf_tensor *x = *(const kt_gguf_tensor *const *)a;
    const kt_gguf_tensor *y = *(const kt_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static kt_status check_overlaps(kt_gguf *g)
{
    if (g->n_tensors < 2)
        return KT_OK;
    const kt_gguf_tensor **order = kt__malloc_array(g->n_tensors, sizeof *order);
    if (!order)
        return KT_ERR_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].nbytes)
            order[m++] = &g->tensors[i];
    qsort(order, m, sizeof *order, compare_offsets);
    kt_status s = KT_OK;
    for (size_t i = 1; i < m && !s; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            s = kt__error(KT_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", g->name,
                          order[i - 1]->name, order[i]->name);
    kt__free(order);
    return s;
}

static kt_status read_tensors(reader *r, uint64_t n_tensors)
{
    kt_gguf *g = r->g;
    if (n_tensors > left(r) / 24) /* name length, n_dims, type, offset at least */
        return kt__error(KT_ERR_FORMAT, "%s: %llu tensor infos cannot fit in the file", g->name,
                         (unsigned long long)n_tensors);
    g->tensors = kt__calloc((size_t)n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors)
        return KT_ERR_NOMEM;
    for (size_t i = 0; i < (size_t)n_tensors; i++) {
        kt_status s = read_tensor_info(r, &g->tensors[i], i);
        if (s)
            return s;
        g->n_tensors = i + 1;
    }
    kt_status s = index_build(&g->tensor_index, g->tensors, g->n_tensors, tensor_name, g->name,
                              "tensor");
    if (s)
        return s;
    /* The data region starts at the next multiple of the alignment. */
    uint64_t pad = (g->alignment - r->pos % g->alignment) % g->alignment;
    g->data_offset = (uint64_t)r->pos + pad;
    if (g->n_tensors == 0)
        return KT_OK;
    if (g->data_offset > g->size)
        return kt__error(KT_ERR_FORMAT, "%s: data region at byte %llu is past the end of the "
                         "file (%zu bytes)", g->name, (unsigned long long)g->data_offset,
                         g->size);
    uint64_t data_size = g->size - g->data_offset;
    for (size_t i = 0; i < g->n_tensors; i++) {
        kt_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of "
                             "the alignment %u", g->name, t->name,
                             (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': bytes [%llu, +%llu) past the end "
                             "of the data region (%llu bytes)", g->name, t->name,
                             (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                             (unsigned long long)data_size);
        t->data = g->base + g->data_offset + t->offset;
    }
    return check_overlaps(g);
}

static kt_status parse(kt_gguf *g)
{
    reader r = {g, 0};
    char magic[4];
    uint32_t version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    if (g->size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0)
        return kt__error(KT_ERR_FORMAT, "%s: not a GGUF file (bad magic)", g->name);
    kt_status s = read_raw(&r, magic, 4, "magic");
    if (!s)
        s = read_u32(&r, &version, "version");
    if (s)
        return s;
    if (version == 1)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported", g->name);
    if (version == 0x02000000u || version == 0x03000000u)
        return kt__error(KT_ERR_UNSUPPORTED, "%s: big-endian GGUF is not supported", g->name);
    if (version != 2 && version != 3)
        return kt__error(KT_ERR_FORMAT, "%s: unknown GGUF version %u", g->name, version);
    g->version = version;
    s = read_u64(&r, &n_tensors, "tensor count");
    if (!s)
        s = read_u64(&r, &n_kv, "metadata count");
    if (!s)
        s = read_kvs(&r, n_kv);
    if (!s)
        s = read_tensors(&r, n_tensors);
    return s;
}

static kt_status gguf_new(kt_gguf **out, const char *name)
{
    *out = kt__calloc(1, sizeof **out);
    if (!*out)
        return KT_ERR_NOMEM;
    (*out)->name = kt__strdup(name);
    if (!(*out)->name) {
        kt__free(*out);
        *out = NULL;
        return KT_ERR_NOMEM;
    }
    return KT_OK;
}

kt_status kt__gguf_parse_memory(kt_gguf **out, const void *data, size_t size,
                                const char *name_for_errors)
{
    if (!out || (!data && size))
        return kt__error(KT_ERR_INVALID_ARG, "gguf_parse_memory: NULL argument");
    *out = NULL;
    kt_gguf *g;
    kt_status s = gguf_new(&g, name_for_errors ? name_for_errors : "<memory>");
    if (s)
        return s;
    g->base = data;
    g->size = size;
    s = parse(g);
    if (s) {
        kt__gguf_close(g);
        return s;
    }
    *out = g;
    return KT_OK;
}

kt_status kt__gguf_open_file(kt_gguf **out, const char *path)
{
    if (!out || !path)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_open_file: NULL argument");
    *out = NULL;
    kt_gguf *g;
    kt_status s = gguf_new(&g, path);
    if (s)
        return s;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) {
        int e = errno;
        s = kt__error(e == ENOENT ? KT_ERR_NOT_FOUND : KT_ERR_IO, "%s: cannot open: %s", path,
                      strerror(e));
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s = kt__error(KT_ERR_IO, "%s: not a regular file", path);
    } else if (st.st_size < 24) {
        s = kt__error(KT_ERR_FORMAT, "%s: file of %lld bytes is too short for a GGUF header",
                      path, (long long)st.st_size);
    } else {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            s = kt__error(KT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        } else {
            g->base = p;
            g->size = (size_t)st.st_size;
            g->mapped = true;
            s = parse(g);
        }
    }
    if (fd >= 0)
        close(fd);
    if (s) {
        kt__gguf_close(g);
        return s;
    }
    *out = g;
    return KT_OK;
}

/* ---- queries ------------------------------------------------------------------------- */

uint32_t kt__gguf_version(const kt_gguf *g) { return g->version; }
uint32_t kt__gguf_alignment(const kt_gguf *g) { return g->alignment; }
const char *kt__gguf_name(const kt_gguf *g) { return g->name; }
uint64_t kt__gguf_data_offset(const kt_gguf *g) { return g->data_offset; }
size_t kt__gguf_kv_count(const kt_gguf *g) { return g->n_kv; }
size_t kt__gguf_tensor_count(const kt_gguf *g) { return g->n_tensors; }

const kt_gguf_kv *kt__gguf_kv_at(const kt_gguf *g, size_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const kt_gguf_tensor *kt__gguf_tensor_at(const kt_gguf *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const kt_gguf_value *kt__gguf_find(const kt_gguf *g, const char *key)
{
    size_t i = index_find(&g->kv_index, g->kvs, kv_name, key);
    return i == SIZE_MAX ? NULL : &g->kvs[i].value;
}

const kt_gguf_tensor *kt__gguf_find_tensor(const kt_gguf *g, const char *name)
{
    size_t i = index_find(&g->tensor_index, g->tensors, tensor_name, name);
    return i == SIZE_MAX ? NULL : &g->tensors[i];
}

/* The value of key, or NULL with the last error set (KT_ERR_NOT_FOUND). */
static const kt_gguf_value *value_of(const kt_gguf *g, const char *key)
{
    const kt_gguf_value *v = kt__gguf_find(g, key);
    if (!v)
        kt__error(KT_ERR_NOT_FOUND, "%s: no metadata key '%s'", g->name, key);
    return v;
}

static kt_status wrong_type(const kt_gguf *g, const char *key, const kt_gguf_value *v,
                            const char *want)
{
    return kt__error(KT_ERR_FORMAT, "%s: key '%s' is %s, expected %s", g->name, key,
                     kt__gguf_type_name(v->type), want);
}

static bool is_unsigned(kt_gguf_type t)
{
    return t == KT_GGUF_U8 || t == KT_GGUF_U16 || t == KT_GGUF_U32 || t == KT_GGUF_U64;
}

static bool is_signed(kt_gguf_type t)
{
    return t == KT_GGUF_I8 || t == KT_GGUF_I16 || t == KT_GGUF_I32 || t == KT_GGUF_I64;
}

kt_status kt__gguf_get_uint(const kt_gguf *g, const char *key, uint64_t *out)
{
    const kt_gguf_value *v = value_of(g, key);
    if (!v)
        return KT_ERR_NOT_FOUND;
    if (is_unsigned(v->type))
        *out = v->v.u;
    else if (is_signed(v->type) && v->v.i >= 0)
        *out = (uint64_t)v->v.i;
    else
        return wrong_type(g, key, v, "a non-negative integer");
    return KT_OK;
}

kt_status kt__gguf_get_int(const kt_gguf *g, const char *key, int64_t *out)
{
    const kt_gguf_value *v = value_of(g, key);
    if (!v)
        return KT_ERR_NOT_FOUND;
    if (is_signed(v->type))
        *out = v->v.i;
    else if (is_unsigned(v->type) && v->v.u <= (uint64_t)INT64_MAX)
        *out = (int64_t)v->v.u;
    else
        return wrong_type(g, key, v, "an integer");
    return KT_OK;
}

kt_status kt__gguf_get_float(const kt_gguf *g, const char *key, double *out)
{
    const kt_gguf_value *v = value_of(g, key);
    if (!v)
        return KT_ERR_NOT_FOUND;
    if (v->type == KT_GGUF_F32 || v->type == KT_GGUF_F64)
        *out = v->v.f;
    else if (is_unsigned(v->type))
        *out = (double)v->v.u;
    else if (is_signed(v->type))
        *out = (double)v->v.i;
    else
        return wrong_type(g, key, v, "a number");
    return KT_OK;
}

kt_status kt__gguf_get_bool(const kt_gguf *g, const char *key, bool *out)
{
    const kt_gguf_value *v = value_of(g, key);
    if (!v)
        return KT_ERR_NOT_FOUND;
    if (v->type != KT_GGUF_BOOL)
        return wrong_type(g, key, v, "bool");
    *out = v->v.b;
    return KT_OK;
}

kt_status kt__gguf_get_str(const kt_gguf *g, const char *key, const char **out)
{
    const kt_gguf_value *v = value_of(g, key);
    if (!v)
        return KT_ERR_NOT_FOUND;
    if (v->type != KT_GGUF_STRING)
        return wrong_type(g, key, v, "string");
    *out = v->v.str.ptr;
    return KT_OK;
}

kt_status kt__gguf_get_array(const kt_gguf *g, const char *key, kt_gguf_type elem,
                             const kt_gguf_value **out)
{
    const kt_gguf_value *v = value_of(g, key);
    if (!v)
        return KT_ERR_NOT_FOUND;
    if (v->type != KT_GGUF_ARRAY || v->v.arr.elem != elem)
        return kt__error(KT_ERR_FORMAT, "%s: key '%s' is %s%s%s, expected array of %s", g->name,
                         key, kt__gguf_type_name(v->type), v->type == KT_GGUF_ARRAY ? " of " : "",
                         v->type == KT_GGUF_ARRAY ? kt__gguf_type_name(v->v.arr.elem) : "",
                         kt__gguf_type_name(elem));
    *out = v;
    return KT_OK;
}

/* ---- writer -------------------------------------------------------------------------- */

typedef struct wtensor {
    char *name;
    uint32_t ggml_type, n_dims;
    uint64_t ne[KT_GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
    const void *data;
} wtensor;

struct kt_gguf_writer {
    uint32_t version, alignment;
    kt_buf kv;      /* serialized key/values */
    char **keys;
    size_t n_kv;
    wtensor *tensors;
    size_t n_tensors;
};

kt_status kt__gguf_writer_create(kt_gguf_writer **out, uint32_t version)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_create: out is NULL");
    *out = NULL;
    if (version != 2 && version != 3)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_create: version %u (2 or 3)", version);
    kt_gguf_writer *w = kt__calloc(1, sizeof *w);
    if (!w)
        return KT_ERR_NOMEM;
    w->version = version;
    w->alignment = KT_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return KT_OK;
}

void kt__gguf_writer_free(kt_gguf_writer *w)
{
    if (!w)
        return;
    kt_buf_dispose(&w->kv);
    for (size_t i = 0; i < w->n_kv; i++)
        kt__free(w->keys[i]);
    kt__free(w->keys);
    for (size_t i = 0; i < w->n_tensors; i++)
        kt__free(w->tensors[i].name);
    kt__free(w->tensors);
    kt__free(w);
}

static kt_status put_u32(kt_buf *b, uint32_t v) { return kt__buf_append(b, &v, 4); }
static kt_status put_u64(kt_buf *b, uint64_t v) { return kt__buf_append(b, &v, 8); }

static kt_status put_str(kt_buf *b, const char *s, uint64_t len)
{
    kt_status st = put_u64(b, len);
    return st ? st : kt__buf_append(b, s, (size_t)len);
}

/* Serializes a value's payload (no type tag). */
static kt_status put_value(kt_buf *b, const kt_gguf_value *v, int depth, const char *key)
{
    if (!valid_type(v->type))
        return kt__error(KT_ERR_INVALID_ARG, "gguf writer: key '%s': bad value type %d", key,
                         (int)v->type);
    switch (v->type) {
    case KT_GGUF_STRING:
        if (!v->v.str.ptr && v->v.str.len)
            return kt__error(KT_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key);
        return put_str(b, v->v.str.ptr, v->v.str.len);
    case KT_GGUF_BOOL: {
        uint8_t x = v->v.b ? 1 : 0;
        return kt__buf_append(b, &x, 1);
    }
    case KT_GGUF_F32: {
        float x = (float)v->v.f;
        return kt__buf_append(b, &x, 4);
    }
    case KT_GGUF_F64: return kt__buf_append(b, &v->v.f, 8);
    case KT_GGUF_ARRAY: break;
    default: /* integers: the low bytes of the widened value (little-endian) */
        return kt__buf_append(b, is_signed(v->type) ? (const void *)&v->v.i
                                                    : (const void *)&v->v.u,
                              scalar_size(v->type));
    }
    kt_gguf_type elem = v->v.arr.elem;
    uint64_t n = v->v.arr.n;
    if (!valid_type(elem) || (n && !v->v.arr.data))
        return kt__error(KT_ERR_INVALID_ARG, "gguf writer: key '%s': bad array", key);
    if (elem == KT_GGUF_ARRAY && depth + 1 >= KT_GGUF_MAX_ARRAY_DEPTH)
        return kt__error(KT_ERR_INVALID_ARG, "gguf writer: key '%s': arrays nested too deep",
                         key);
    kt_status s = put_u32(b, (uint32_t)elem);
    if (!s)
        s = put_u64(b, n);
    if (elem == KT_GGUF_STRING) {
        const kt_gguf_str *strs = v->v.arr.data;
        for (uint64_t i = 0; i < n && !s; i++)
            s = put_str(b, strs[i].ptr, strs[i].len);
    } else if (elem == KT_GGUF_ARRAY) {
        const kt_gguf_value *vals = v->v.arr.data;
        for (uint64_t i = 0; i < n && !s; i++) {
            if (vals[i].type != KT_GGUF_ARRAY)
                return kt__error(KT_ERR_INVALID_ARG, "gguf writer: key '%s': element %llu of "
                                 "an array of arrays is not an array", key,
                                 (unsigned long long)i);
            s = put_value(b, &vals[i], depth + 1, key);
        }
    } else {
        uint64_t bytes;
        if (!kt__mul_ok(n, scalar_size(elem), &bytes) || bytes > SIZE_MAX)
            return kt__error(KT_ERR_INVALID_ARG, "gguf writer: key '%s': array too large", key);
        if (!s && elem == KT_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (((const uint8_t *)v->v.arr.data)[i] > 1)
                    return kt__error(KT_ERR_INVALID_ARG, "gguf writer: key '%s': bool element "
                                     "is not 0 or 1", key);
        if (!s)
            s = kt__buf_append(b, v->v.arr.data, (size_t)bytes);
    }
    return s;
}

kt_status kt__gguf_writer_add(kt_gguf_writer *w, const char *key, const kt_gguf_value *v)
{
    if (!w || !key || !v || !key[0])
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add: NULL argument or empty key");
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0)
            return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add: key '%s' added twice", key);
    if (strcmp(key, "general.alignment") == 0) {
        if (v->type != KT_GGUF_U32 || v->v.u == 0 || v->v.u > UINT32_MAX ||
            (v->v.u & (v->v.u - 1)))
            return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add: general.alignment must be a "
                             "u32 power of two");
        if (w->n_tensors)
            return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add: set general.alignment "
                             "before adding tensors");
    }
    char **keys = kt__realloc(w->keys, (w->n_kv + 1) * sizeof *keys);
    if (!keys)
        return KT_ERR_NOMEM;
    w->keys = keys;
    size_t mark = w->kv.size;
    kt_status s = put_str(&w->kv, key, strlen(key));
    if (!s)
        s = put_u32(&w->kv, (uint32_t)v->type);
    if (!s)
        s = put_value(&w->kv, v, 0, key);
    if (!s && !(keys[w->n_kv] = kt__strdup(key)))
        s = KT_ERR_NOMEM;
    if (s) {
        w->kv.size = mark; /* drop the partial entry */
        return s;
    }
    w->n_kv++;
    if (strcmp(key, "general.alignment") == 0)
        w->alignment = (uint32_t)v->v.u;
    return KT_OK;
}

/* kt__gguf_writer_add_<name>(w, key, x): one scalar value of GGUF type `gtype`. */
#define GGUF_WRITER_ADD_SCALAR(name, ctype, gtype, member)                                     \
    kt_status kt__gguf_writer_add_##name(kt_gguf_writer *w, const char *key, ctype x)          \
    {                                                                                          \
        kt_gguf_value v = {.type = gtype, .v.member = x};                                      \
        return kt__gguf_writer_add(w, key, &v);                                                \
    }

GGUF_WRITER_ADD_SCALAR(u32, uint32_t, KT_GGUF_U32, u)
GGUF_WRITER_ADD_SCALAR(u64, uint64_t, KT_GGUF_U64, u)
GGUF_WRITER_ADD_SCALAR(i32, int32_t, KT_GGUF_I32, i)
GGUF_WRITER_ADD_SCALAR(f32, float, KT_GGUF_F32, f)
GGUF_WRITER_ADD_SCALAR(bool, bool, KT_GGUF_BOOL, b)

kt_status kt__gguf_writer_add_str(kt_gguf_writer *w, const char *key, const char *x)
{
    if (!x)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_str: '%s': NULL string",
                         key ? key : "?");
    kt_gguf_value v = {.type = KT_GGUF_STRING, .v.str = {x, strlen(x)}};
    return kt__gguf_writer_add(w, key, &v);
}

kt_status kt__gguf_writer_add_str_array(kt_gguf_writer *w, const char *key,
                                        const char *const *x, uint64_t n)
{
    if (n && !x)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_str_array: NULL array");
    kt_gguf_str *strs = kt__malloc_array(n ? (size_t)n : 1, sizeof *strs);
    if (!strs)
        return KT_ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        strs[i].ptr = x[i] ? x[i] : "";
        strs[i].len = strlen(strs[i].ptr);
    }
    kt_gguf_value v = {.type = KT_GGUF_ARRAY, .v.arr = {KT_GGUF_STRING, n, strs}};
    kt_status s = kt__gguf_writer_add(w, key, &v);
    kt__free(strs);
    return s;
}

kt_status kt__gguf_writer_add_tensor(kt_gguf_writer *w, const char *name, uint32_t ggml_type,
                                     uint32_t n_dims, const uint64_t *ne, const void *data)
{
    if (!w || !name || !name[0] || (n_dims && !ne))
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_tensor: NULL argument");
    const kt_ggml_type_info *info = kt__ggml_type_info(ggml_type);
    if (!info)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_tensor: '%s': unknown ggml type "
                         "%u", name, ggml_type);
    if (n_dims > KT_GGUF_MAX_DIMS)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_tensor: '%s': %u dims", name,
                         n_dims);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_tensor: '%s' added twice",
                             name);
    wtensor t;
    memset(&t, 0, sizeof t);
    t.ggml_type = ggml_type;
    t.n_dims = n_dims;
    uint64_t n = 1;
    for (uint32_t d = 0; d < KT_GGUF_MAX_DIMS; d++)
        t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        t.ne[d] = ne[d];
        if (!kt__mul_ok(n, ne[d], &n))
            return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_tensor: '%s': size overflows",
                             name);
    }
    if (t.ne[0] % info->block_size || !kt__mul_ok(n / info->block_size, info->type_size,
                                                  &t.nbytes))
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_tensor: '%s': %llu elements per "
                         "row is not a whole number of %s blocks", name,
                         (unsigned long long)t.ne[0], info->name);
    if (t.nbytes && !data)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_add_tensor: '%s': NULL data", name);
    t.data = data;
    if (w->n_tensors) {
        const wtensor *prev = &w->tensors[w->n_tensors - 1];
        uint64_t end = prev->offset + prev->nbytes;
        t.offset = (end + w->alignment - 1) / w->alignment * w->alignment;
    }
    wtensor *tensors = kt__realloc(w->tensors, (w->n_tensors + 1) * sizeof *tensors);
    if (!tensors)
        return KT_ERR_NOMEM;
    w->tensors = tensors;
    t.name = kt__strdup(name);
    if (!t.name)
        return KT_ERR_NOMEM;
    w->tensors[w->n_tensors++] = t;
    return KT_OK;
}

/* Header, key/values, tensor infos and padding up to the data region. */
static kt_status build_meta(const kt_gguf_writer *w, kt_buf *b)
{
    kt_status s = kt__buf_append(b, GGUF_MAGIC, 4);
    if (!s)
        s = put_u32(b, w->version);
    if (!s)
        s = put_u64(b, w->n_tensors);
    if (!s)
        s = put_u64(b, w->n_kv);
    if (!s && w->kv.size)
        s = kt__buf_append(b, w->kv.ptr, w->kv.size);
    for (size_t i = 0; i < w->n_tensors && !s; i++) {
        const wtensor *t = &w->tensors[i];
        s = put_str(b, t->name, strlen(t->name));
        if (!s)
            s = put_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && !s; d++)
            s = put_u64(b, t->ne[d]);
        if (!s)
            s = put_u32(b, t->ggml_type);
        if (!s)
            s = put_u64(b, t->offset);
    }
    static const unsigned char zeros[64];
    while (!s && b->size % w->alignment)
        s = kt__buf_append(b, zeros, KT_MIN(sizeof zeros, w->alignment - b->size % w->alignment));
    return s;
}

typedef kt_status (*sink_fn)(void *ctx, const void *data, size_t n);

static kt_status write_all(const kt_gguf_writer *w, sink_fn sink, void *ctx)
{
    kt_buf meta = KT_BUF_INIT;
    kt_status s = build_meta(w, &meta);
    if (!s)
        s = sink(ctx, meta.ptr, meta.size);
    kt_buf_dispose(&meta);
    static const unsigned char zeros[256];
    uint64_t pos = 0; /* within the data region */
    for (size_t i = 0; i < w->n_tensors && !s; i++) {
        const wtensor *t = &w->tensors[i];
        while (!s && pos < t->offset) {
            size_t n = (size_t)KT_MIN((uint64_t)sizeof zeros, t->offset - pos);
            s = sink(ctx, zeros, n);
            pos += n;
        }
        if (!s && t->nbytes)
            s = sink(ctx, t->data, (size_t)t->nbytes);
        pos += t->nbytes;
    }
    /* Like ggml and gguf-py, the last tensor is padded to the alignment too. */
    while (!s && pos % w->alignment) {
        size_t n = (size_t)KT_MIN((uint64_t)sizeof zeros, w->alignment - pos % w->alignment);
        s = sink(ctx, zeros, n);
        pos += n;
    }
    return s;
}

static kt_status sink_buf(void *ctx, const void *data, size_t n)
{
    return kt__buf_append(ctx, data, n);
}

typedef struct file_sink {
    FILE *fp;
    const char *path;
} file_sink;

static kt_status sink_file(void *ctx, const void *data, size_t n)
{
    file_sink *f = ctx;
    if (fwrite(data, 1, n, f->fp) != n)
        return kt__error(KT_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
    return KT_OK;
}

kt_status kt__gguf_writer_write_buf(kt_gguf_writer *w, kt_buf *buf)
{
    if (!w || !buf)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_write_buf: NULL argument");
    return write_all(w, sink_buf, buf);
}

kt_status kt__gguf_writer_write_file(kt_gguf_writer *w, const char *path)
{
    if (!w || !path)
        return kt__error(KT_ERR_INVALID_ARG, "gguf_writer_write_file: NULL argument");
    file_sink f = {fopen(path, "wb"), path};
    if (!f.fp)
        return kt__error(KT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    kt_status s = write_all(w, sink_file, &f);
    if (fclose(f.fp) != 0 && !s)
        s = kt__error(KT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (s)
        unlink(path);
    return s;
}
