/*
 * safetensors reader and writer (see safetensors.h for the layout).
 *
 * Every byte of a header is distrusted: the header length is checked against
 * the file, the JSON is UTF-8 checked and parsed within a size cap, each tensor's
 * dtype, shape and offsets are checked (sizes overflow-checked, byte range inside
 * the data region, matching dtype x shape), tensors of one file may not overlap
 * and names are unique in a set. A sharded set is checked against its index.
 *
 * Policies worth knowing:
 * - Index shard names must be relative, without "..", and must resolve (symlinks
 *   followed) inside the model directory, or, for a Hugging Face cache snapshot
 *   (.../models--org--name/snapshots/<rev>, whose files link to ../../blobs), inside
 *   the cached repository. One file named twice (e.g. "./a" and "a") is opened once.
 * - The set holds every tensor of every listed shard; each indexed tensor must be
 *   in the shard the index names, and a name in two shards is an error.
 * - Gaps between tensors and bytes after the last one are tolerated (the format
 *   forbids them, but they are harmless to a reader).
 * - Tensors are not aligned beyond what the file gives: read them with memcpy or
 *   kt__tensor_to_f32 (the writer aligns only the data region, to 64 bytes).
 */
#define _GNU_SOURCE /* realpath, O_CLOEXEC */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert_types.h"
#include "json.h"

#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_DATA_ALIGNMENT 64u

typedef struct st_file {
    char *path;                /* as opened (or name_for_errors)        */
    const unsigned char *base; /* whole file                            */
    size_t size;
    bool mapped;               /* base is our mmap                      */
    dev_t dev;                 /* identity, to spot one file named twice */
    ino_t ino;
} st_file;

struct kt_st_set {
    st_file *files;
    uint32_t n_files;
    kt_st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    size_t *slots; /* open-addressing name hash: tensor index + 1, 0 = empty */
    size_t n_slots;
    char **meta_keys, **meta_values; /* __metadata__ of the first file */
    size_t n_meta;
};

/* ---- name hash -------------------------------------------------------------------- */

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static kt_status slots_grow(kt_st_set *set)
{
    size_t n = set->n_slots ? set->n_slots * 2 : 64;
    size_t *slots = kt__calloc(n, sizeof *slots);
    if (!slots)
        return KT_ERR_NOMEM;
    for (size_t i = 0; i < set->n_tensors; i++) {
        size_t j = (size_t)hash_name(set->tensors[i].name) & (n - 1);
        while (slots[j])
            j = (j + 1) & (n - 1);
        slots[j] = i + 1;
    }
    kt__free(set->slots);
    set->slots = slots;
    set->n_slots = n;
    return KT_OK;
}

/* Slot holding `name`, or the empty slot where it would go. */
static size_t *slot_of(const kt_st_set *set, const char *name)
{
    size_t mask = set->n_slots - 1, j = (size_t)hash_name(name) & mask;
    while (set->slots[j] && strcmp(set->tensors[set->slots[j] - 1].name, name) != 0)
        j = (j + 1) & mask;
    return &set->slots[j];
}

/* ---- set lifetime ------------------------------------------------------------------ */

static kt_status set_new(kt_st_set **out)
{
    *out = kt__calloc(1, sizeof **out);
    return *out ? KT_OK : KT_ERR_NOMEM;
}

/* Frees metadata pairs made by kt__strpairs_set(). */
static void strpairs_free(char **keys, char **values, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        kt__free(keys[i]);
        kt__free(values[i]);
    }
    kt__free(keys);
    kt__free(values);
}

void kt__st_close(kt_st_set *set)
{
    if (!set)
        return;
    for (uint32_t i = 0; i < set->n_files; i++) {
        if (set->files[i].mapped && set->files[i].size)
            munmap((void *)set->files[i].base, set->files[i].size);
        kt__free(set->files[i].path);
    }
    for (size_t i = 0; i < set->n_tensors; i++)
        kt__free((char *)set->tensors[i].name);
    strpairs_free(set->meta_keys, set->meta_values, set->n_meta);
    kt__free(set->files);
    kt__free(set->tensors);
    kt__free(set->slots);
    kt__free(set);
}

static kt_status add_file(kt_st_set *set, const char *path, uint32_t *index)
{
    st_file *files = kt__realloc(set->files, (set->n_files + 1) * sizeof *files);
    if (!files)
        return KT_ERR_NOMEM;
    set->files = files;
    st_file *f = &files[set->n_files];
    memset(f, 0, sizeof *f);
    f->path = kt__strdup(path);
    if (!f->path)
        return KT_ERR_NOMEM;
    *index = set->n_files++;
    return KT_OK;
}

/* Maps files[fi].path read-only. Missing files give `missing_status`. */
static kt_status map_file(kt_st_set *set, uint32_t fi, kt_status missing_status)
{
    st_file *f = &set->files[fi];
    /* Non-blocking: a FIFO planted as a shard must not hang us (it is then refused
     * as not a regular file). */
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return kt__error(e == ENOENT ? missing_status : KT_ERR_IO, "%s: cannot open: %s",
                         f->path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kt__error(KT_ERR_IO, "%s: not a regular file", f->path);
    }
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        close(fd);
        return kt__error(KT_ERR_FORMAT, "%s: file of %zu bytes is too short for a safetensors "
                         "header", f->path, f->size);
    }
    void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return kt__error(KT_ERR_IO, "%s: mmap failed: %s", f->path, strerror(e));
    f->base = p;
    f->mapped = true;
    return KT_OK;
}

/* ---- header parsing ---------------------------------------------------------------- */

static kt_type dtype_from_string(const char *s)
{
    static const struct { const char *name; kt_type type; } dtypes[] = {
        {"BOOL", KT_TYPE_BOOL}, {"U8", KT_TYPE_U8},     {"I8", KT_TYPE_I8},
        {"I16", KT_TYPE_I16},   {"U16", KT_TYPE_U16},   {"I32", KT_TYPE_I32},
        {"U32", KT_TYPE_U32},   {"I64", KT_TYPE_I64},   {"U64", KT_TYPE_U64},
        {"F16", KT_TYPE_F16},   {"BF16", KT_TYPE_BF16}, {"F32", KT_TYPE_F32},
        {"F64", KT_TYPE_F64},   {"F8_E4M3", KT_TYPE_F8_E4M3}, {"F8_E5M2", KT_TYPE_F8_E5M2},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(dtypes); i++)
        if (strcmp(dtypes[i].name, s) == 0)
            return dtypes[i].type;
    return KT_TYPE_INVALID;
}

static bool is_plain_type(kt_type t)
{
    return kt_type_block_size(t) == 1 && (int)t < 100;
}

static kt_status parse_metadata(kt_st_set *set, const cJSON *meta, const char *path,
                                bool keep)
{
    if (!cJSON_IsObject(meta))
        return kt__error(KT_ERR_FORMAT, "%s: __metadata__ is not an object", path);
    size_t n = 0;
    for (const cJSON *m = meta->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return kt__error(KT_ERR_FORMAT, "%s: __metadata__ value '%s' is not a string",
                             path, m->string);
        n++;
    }
    if (!keep || n == 0)
        return KT_OK;
    set->meta_keys = kt__calloc(n, sizeof(char *));
    set->meta_values = kt__calloc(n, sizeof(char *));
    if (!set->meta_keys || !set->meta_values)
        return KT_ERR_NOMEM;
    for (const cJSON *m = meta->child; m; m = m->next) {
        set->meta_keys[set->n_meta] = kt__strdup(m->string);
        set->meta_values[set->n_meta] = kt__strdup(m->valuestring);
        set->n_meta++;
        if (!set->meta_keys[set->n_meta - 1] || !set->meta_values[set->n_meta - 1])
            return KT_ERR_NOMEM;
    }
    return KT_OK;
}

/* Fills *t from one header entry; t->name is set by the caller. */
static kt_status parse_tensor_entry(kt_st_tensor *t, const cJSON *e, const char *path,
                                    const unsigned char *data, uint64_t data_size)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': entry is not an object", path, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dtype))
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': missing or non-string dtype", path,
                         name);
    t->type = dtype_from_string(dtype->valuestring);
    if (t->type == KT_TYPE_INVALID) {
        /* Valid safetensors dtypes that kt_type has no name for yet. */
        static const char *const newer[] = {"F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};
        for (size_t i = 0; i < KT_ARRAY_LEN(newer); i++)
            if (strcmp(dtype->valuestring, newer[i]) == 0)
                return kt__error(KT_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not "
                                 "supported", path, name, newer[i]);
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, name,
                         dtype->valuestring);
    }
    if (!cJSON_IsArray(shape))
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': missing or non-array shape", path,
                         name);
    int n_dims = cJSON_GetArraySize(shape);
    if (n_dims > KT_MAX_DIMS)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': %d dimensions (at most %d)", path,
                         name, n_dims, KT_MAX_DIMS);
    t->n_dims = (uint32_t)n_dims;
    t->n_elements = 1;
    uint32_t d = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, d++) {
        if (!kt__json_u64(dim, &t->shape[d]))
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': shape[%u] is not a non-negative "
                             "integer", path, name, d);
        if (!kt__mul_ok(t->n_elements, t->shape[d], &t->n_elements))
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': element count overflows", path,
                             name);
    }
    uint64_t begin, end, expect;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !kt__json_u64(offs->child, &begin) || !kt__json_u64(offs->child->next, &end))
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': data_offsets is not a pair of "
                         "non-negative integers", path, name);
    if (end < begin)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': data_offsets end %llu < begin %llu",
                         path, name, (unsigned long long)end, (unsigned long long)begin);
    if (end > data_size)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] past the "
                         "end of the data (%llu bytes)", path, name, (unsigned long long)begin,
                         (unsigned long long)end, (unsigned long long)data_size);
    if (!kt__type_nbytes(t->type, t->n_elements, &expect))
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': byte size of %s x %llu elements "
                         "overflows", path, name, kt_type_name(t->type),
                         (unsigned long long)t->n_elements);
    if (end - begin != expect)
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s': %llu bytes stored but %s x %llu "
                         "elements need %llu", path, name, (unsigned long long)(end - begin),
                         kt_type_name(t->type), (unsigned long long)t->n_elements,
                         (unsigned long long)expect);
    t->nbytes = expect;
    t->data = data + begin;
    return KT_OK;
}

static kt_status push_tensor(kt_st_set *set, const kt_st_tensor *t, const char *path)
{
    if ((set->n_tensors + 1) * 2 > set->n_slots) {
        kt_status s = slots_grow(set);
        if (s)
            return s;
    }
    size_t *slot = slot_of(set, t->name);
    if (*slot) {
        const kt_st_tensor *old = &set->tensors[*slot - 1];
        if (old->file_index == t->file_index)
            return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' appears twice", path, t->name);
        return kt__error(KT_ERR_FORMAT, "%s: tensor '%s' also appears in %s", path, t->name,
                         set->files[old->file_index].path);
    }
    kt_st_tensor *tensors =
        kt__grow(set->tensors, set->n_tensors, &set->cap_tensors, sizeof *tensors, 64);
    if (!tensors)
        return KT_ERR_NOMEM;
    set->tensors = tensors;
    char *name = kt__strdup(t->name);
    if (!name)
        return KT_ERR_NOMEM;
    set->tensors[set->n_tensors] = *t;
    set->tensors[set->n_tensors].name = name;
    *slot = ++set->n_tensors;
    return KT_OK;
}

static int compare_by_offset(const void *a, const void *b)
{
    const kt_st_tensor *x = *(const kt_st_tensor *const *)a;
    const kt_st_tensor *y = *(const kt_st_tensor *const *)b;
    uintptr_t px = (uintptr_t)x->data, py = (uintptr_t)y->data;
    return px < py ? -1 : px > py;
}

/* Tensors [first, n_tensors) belong to one file: their byte ranges must not overlap. */
static kt_status check_overlap(kt_st_set *set, size_t first, const char *path)
{
    size_t n = set->n_tensors - first;
    if (n < 2)
        return KT_OK;
    const kt_st_tensor **order = kt__malloc_array(n, sizeof *order);
    if (!order)
        return KT_ERR_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (set->tensors[first + i].nbytes) /* empty tensors occupy no bytes */
            order[m++] = &set->tensors[first + i];
    qsort(order, m, sizeof *order, compare_by_offset);
    kt_status s = KT_OK;
    for (size_t i = 1; i < m; i++) {
        const kt_st_tensor *a = order[i - 1], *b = order[i];
        if ((const unsigned char *)a->data + a->nbytes > (const unsigned char *)b->data) {
            s = kt__error(KT_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path, a->name,
                          b->name);
            break;
        }
    }
    kt__free(order);
    return s;
}

/* Parses files[fi] (already in memory) and adds its tensors to the set. */
static kt_status parse_file(kt_st_set *set, uint32_t fi)
{
    const st_file *f = &set->files[fi];
    const char *path = f->path;
    if (f->size < 8)
        return kt__error(KT_ERR_FORMAT, "%s: file of %zu bytes is too short for a safetensors "
                         "header", path, f->size);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = (header_len << 8) | f->base[i];
    if (header_len > f->size - 8)
        return kt__error(KT_ERR_FORMAT, "%s: header length %llu past the end of the file "
                         "(%zu bytes)", path, (unsigned long long)header_len, f->size);
    if (header_len > KT_JSON_MAX_BYTES)
        return kt__error(KT_ERR_FORMAT, "%s: header length %llu exceeds the %zu byte limit",
                         path, (unsigned long long)header_len, KT_JSON_MAX_BYTES);
    const char *header = (const char *)f->base + 8;
    if (header_len < 2 || header[0] != '{')
        return kt__error(KT_ERR_FORMAT, "%s: header does not start with '{'", path);
    cJSON *root = NULL;
    kt_status s = kt__json_parse(&root, header, (size_t)header_len, path);
    if (s)
        return s;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kt__error(KT_ERR_FORMAT, "%s: header is not a JSON object", path);
    }
    const unsigned char *data = f->base + 8 + header_len;
    uint64_t data_size = f->size - 8 - header_len;
    size_t first = set->n_tensors;
    bool seen_meta = false;
    for (const cJSON *e = root->child; e && !s; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta)
                s = kt__error(KT_ERR_FORMAT, "%s: __metadata__ appears twice", path);
            else
                s = parse_metadata(set, e, path, fi == 0);
            seen_meta = true;
            continue;
        }
        kt_st_tensor t;
        memset(&t, 0, sizeof t);
        t.name = e->string;
        t.file_index = fi;
        s = parse_tensor_entry(&t, e, path, data, data_size);
        if (!s)
            s = push_tensor(set, &t, path);
    }
    cJSON_Delete(root);
    if (!s)
        s = check_overlap(set, first, path);
    return s;
}

kt_status kt__st_parse_memory(kt_st_set **out, const void *data, size_t size,
                              const char *name_for_errors)
{
    if (!out || (!data && size))
        return kt__error(KT_ERR_INVALID_ARG, "st_parse_memory: NULL argument");
    *out = NULL;
    kt_st_set *set;
    uint32_t fi;
    kt_status s = set_new(&set);
    if (!s)
        s = add_file(set, name_for_errors ? name_for_errors : "<memory>", &fi);
    if (!s) {
        set->files[fi].base = data;
        set->files[fi].size = size;
        s = parse_file(set, fi);
    }
    if (s) {
        kt__st_close(set);
        return s;
    }
    *out = set;
    return KT_OK;
}

kt_status kt__st_open_file(kt_st_set **out, const char *path)
{
    if (!out || !path)
        return kt__error(KT_ERR_INVALID_ARG, "st_open_file: NULL argument");
    *out = NULL;
    kt_st_set *set;
    uint32_t fi;
    kt_status s = set_new(&set);
    if (!s)
        s = add_file(set, path, &fi);
    if (!s)
        s = map_file(set, fi, KT_ERR_NOT_FOUND);
    if (!s)
        s = parse_file(set, fi);
    if (s) {
        kt__st_close(set);
        return s;
    }
    *out = set;
    return KT_OK;
}

/* ---- directories ------------------------------------------------------------------- */

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A shard name from the index must be a relative path inside the directory. */
static kt_status check_shard_name(const char *index_path, const char *name)
{
    if (!name[0])
        return kt__error(KT_ERR_FORMAT, "%s: empty shard file name", index_path);
    if (name[0] == '/')
        return kt__error(KT_ERR_FORMAT, "%s: shard '%s' is an absolute path outside the model "
                         "directory", index_path, name);
    for (const char *p = name; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return kt__error(KT_ERR_FORMAT, "%s: shard '%s' uses '..' to leave the model "
                             "directory", index_path, name);
        p += len + (slash ? 1 : 0);
    }
    return KT_OK;
}

static bool has_prefix_dir(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || (n == 1 && dir[0] == '/'));
}

/* Where a shard may really live: the model directory, or for a Hugging Face
 * cache snapshot (<repo>/snapshots/<rev>, whose files are symlinks into
 * <repo>/blobs) the cached repository. */
static void allowed_root(const char *real_dir, char *root, size_t root_size)
{
    snprintf(root, root_size, "%s", real_dir);
    char *rev = strrchr(root, '/');
    if (!rev || rev == root)
        return;
    *rev = '\0';
    char *snap = strrchr(root, '/');
    if (snap && strcmp(snap, "/snapshots") == 0 && strstr(root, "/models--"))
        *snap = '\0';
    else
        snprintf(root, root_size, "%s", real_dir);
}

/* Resolves symlinks: a shard whose real path leaves the allowed root is refused. */
static kt_status check_shard_real_path(const char *index_path, const char *path,
                                       const char *root)
{
    char *real = realpath(path, NULL);
    if (!real)
        return KT_OK; /* a missing file is reported when it is opened */
    kt_status s = KT_OK;
    if (!has_prefix_dir(real, root))
        s = kt__error(KT_ERR_FORMAT, "%s: shard %s resolves to %s, outside the model directory",
                      index_path, path, real);
    free(real);
    return s;
}

/* Index of the shard already opened as the same file, or UINT32_MAX. */
static uint32_t same_file(const kt_st_set *set, uint32_t fi)
{
    for (uint32_t i = 0; i < fi; i++)
        if (set->files[i].dev == set->files[fi].dev && set->files[i].ino == set->files[fi].ino)
            return i;
    return UINT32_MAX;
}

typedef struct shard_ref {
    const char *name;  /* from the index JSON */
    uint32_t file;     /* index into set->files */
} shard_ref;

/* Shard names of an index, hashed: a hostile index may name very many. */
typedef struct shard_refs {
    shard_ref *refs;
    size_t n, n_slots;
    size_t *slots; /* ref index + 1; 0 = empty */
} shard_refs;

static size_t *ref_slot(const shard_refs *r, const char *name)
{
    size_t mask = r->n_slots - 1, j = (size_t)hash_name(name) & mask;
    while (r->slots[j] && strcmp(r->refs[r->slots[j] - 1].name, name) != 0)
        j = (j + 1) & mask;
    return &r->slots[j];
}

/* File of a shard name from the index, UINT32_MAX if not seen yet. */
static uint32_t ref_of(const shard_refs *r, const char *name)
{
    size_t *slot = ref_slot(r, name);
    return *slot ? r->refs[*slot - 1].file : UINT32_MAX;
}

static kt_status open_indexed(kt_st_set *set, const char *dir, const char *index_path)
{
    cJSON *root = NULL;
    shard_refs refs = {NULL, 0, 0, NULL};
    kt_status s = kt__json_parse_file(&root, index_path);
    if (s)
        return s;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(map)) {
        s = kt__error(KT_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
        goto done;
    }
    char *real_dir = realpath(dir, NULL);
    if (!real_dir) {
        s = kt__error(KT_ERR_IO, "%s: cannot resolve: %s", dir, strerror(errno));
        goto done;
    }
    char root_dir[PATH_MAX];
    if (strlen(real_dir) >= sizeof root_dir) {
        s = kt__error(KT_ERR_IO, "%s: path too long", dir);
        free(real_dir);
        goto done;
    }
    allowed_root(real_dir, root_dir, sizeof root_dir);
    free(real_dir);

    /* Open every distinct shard once, in order of first mention. */
    size_t n_entries = (size_t)cJSON_GetArraySize(map);
    refs.n_slots = 16;
    while (refs.n_slots < 2 * n_entries)
        refs.n_slots *= 2;
    refs.refs = kt__calloc(n_entries ? n_entries : 1, sizeof *refs.refs);
    refs.slots = kt__calloc(refs.n_slots, sizeof *refs.slots);
    if (!refs.refs || !refs.slots) {
        s = KT_ERR_NOMEM;
        goto done;
    }
    for (const cJSON *e = map->child; e && !s; e = e->next) {
        if (!cJSON_IsString(e)) {
            s = kt__error(KT_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name",
                          index_path, e->string);
            break;
        }
        size_t *slot = ref_slot(&refs, e->valuestring);
        if (*slot)
            continue;
        s = check_shard_name(index_path, e->valuestring);
        if (s)
            break;
        char *path = kt__path_join(dir, e->valuestring);
        if (!path) {
            s = KT_ERR_NOMEM;
            break;
        }
        s = check_shard_real_path(index_path, path, root_dir);
        uint32_t fi = 0;
        if (!s)
            s = add_file(set, path, &fi);
        kt__free(path);
        if (s)
            break;
        if (!file_exists(set->files[fi].path)) {
            s = kt__error(KT_ERR_FORMAT, "%s: shard %s listed in the index does not exist",
                          index_path, set->files[fi].path);
            break;
        }
        s = map_file(set, fi, KT_ERR_FORMAT);
        if (s)
            break;
        uint32_t alias = same_file(set, fi);
        if (alias != UINT32_MAX) { /* one file under two spellings: keep the first */
            munmap((void *)set->files[fi].base, set->files[fi].size);
            kt__free(set->files[fi].path);
            set->n_files--;
            fi = alias;
        } else {
            s = parse_file(set, fi);
        }
        refs.refs[refs.n].name = e->valuestring;
        refs.refs[refs.n].file = fi;
        *slot = ++refs.n;
    }
    /* Every indexed tensor must be in the shard the index names. A tensor listed twice
     * (duplicate JSON keys) naming two files fails here too: it lives in only one. */
    for (const cJSON *e = map->child; e && !s; e = e->next) {
        uint32_t fi = ref_of(&refs, e->valuestring);
        const kt_st_tensor *t = kt__st_find(set, e->string);
        if (!t)
            s = kt__error(KT_ERR_FORMAT, "%s: tensor '%s' is missing from shard %s", index_path,
                          e->string, set->files[fi].path);
        else if (t->file_index != fi)
            s = kt__error(KT_ERR_FORMAT, "%s: tensor '%s' is mapped to %s but stored in %s",
                          index_path, e->string, set->files[fi].path,
                          set->files[t->file_index].path);
    }
done:
    kt__free(refs.refs);
    kt__free(refs.slots);
    cJSON_Delete(root);
    return s;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Every *.safetensors file in the directory, in name order. */
static kt_status open_all_in_dir(kt_st_set *set, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return kt__error(errno == ENOENT ? KT_ERR_NOT_FOUND : KT_ERR_IO, "%s: cannot open "
                         "directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    kt_status s = KT_OK;
    struct dirent *de;
    while (!s && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || !ends_with(de->d_name, ".safetensors"))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **grown = kt__realloc(names, cap * sizeof *names);
            if (!grown) {
                s = KT_ERR_NOMEM;
                break;
            }
            names = grown;
        }
        names[n] = kt__strdup(de->d_name);
        if (!names[n])
            s = KT_ERR_NOMEM;
        else
            n++;
    }
    closedir(d);
    if (!s && n == 0)
        s = kt__error(KT_ERR_NOT_FOUND, "%s: no .safetensors files", dir);
    if (!s)
        qsort(names, n, sizeof *names, compare_strings);
    for (size_t i = 0; i < n && !s; i++) {
        char *path = kt__path_join(dir, names[i]);
        uint32_t fi;
        s = path ? add_file(set, path, &fi) : KT_ERR_NOMEM;
        kt__free(path);
        if (!s)
            s = map_file(set, fi, KT_ERR_NOT_FOUND);
        if (!s)
            s = parse_file(set, fi);
    }
    for (size_t i = 0; i < n; i++)
        kt__free(names[i]);
    kt__free(names);
    return s;
}

kt_status kt__st_open_dir(kt_st_set **out, const char *dir)
{
    if (!out || !dir)
        return kt__error(KT_ERR_INVALID_ARG, "st_open_dir: NULL argument");
    *out = NULL;
    kt_st_set *set;
    kt_status s = set_new(&set);
    if (s)
        return s;
    char *index_path = kt__path_join(dir, ST_INDEX_NAME);
    char *single_path = kt__path_join(dir, "model.safetensors");
    if (!index_path || !single_path) {
        s = KT_ERR_NOMEM;
    } else if (file_exists(index_path)) {
        s = open_indexed(set, dir, index_path);
    } else if (file_exists(single_path)) {
        uint32_t fi;
        s = add_file(set, single_path, &fi);
        if (!s)
            s = map_file(set, fi, KT_ERR_NOT_FOUND);
        if (!s)
            s = parse_file(set, fi);
    } else {
        s = open_all_in_dir(set, dir);
    }
    kt__free(index_path);
    kt__free(single_path);
    if (s) {
        kt__st_close(set);
        return s;
    }
    *out = set;
    return KT_OK;
}

/* ---- queries ----------------------------------------------------------------------- */

size_t kt__st_count(const kt_st_set *set)
{
    return set ? set->n_tensors : 0;
}

const kt_st_tensor *kt__st_at(const kt_st_set *set, size_t i)
{
    return set && i < set->n_tensors ? &set->tensors[i] : NULL;
}

const kt_st_tensor *kt__st_find(const kt_st_set *set, const char *name)
{
    if (!set || !name || !set->n_slots)
        return NULL;
    size_t *slot = slot_of(set, name);
    return *slot ? &set->tensors[*slot - 1] : NULL;
}

kt_status kt__st_get(const kt_st_set *set, const char *name, const kt_st_tensor **out)
{
    const kt_st_tensor *t = kt__st_find(set, name);
    if (!t)
        return kt__error(KT_ERR_NOT_FOUND, "%s: no tensor '%s'",
                         set && set->n_files ? set->files[0].path : "safetensors",
                         name ? name : "(null)");
    *out = t;
    return KT_OK;
}

const char *kt__st_metadata(const kt_st_set *set, const char *key)
{
    if (!set || !key)
        return NULL;
    for (size_t i = 0; i < set->n_meta; i++)
        if (strcmp(set->meta_keys[i], key) == 0)
            return set->meta_values[i];
    return NULL;
}

const char *kt__st_file_path(const kt_st_set *set, uint32_t file_index)
{
    return set && file_index < set->n_files ? set->files[file_index].path : NULL;
}

uint32_t kt__st_file_count(const kt_st_set *set)
{
    return set ? set->n_files : 0;
}

/* ---- writer ------------------------------------------------------------------------ */

typedef struct st_decl {
    char *name;
    kt_type type;
    uint32_t n_dims;
    uint64_t shape[KT_MAX_DIMS];
    uint64_t nbytes;
} st_decl;

struct kt_st_writer {
    st_decl *decls;
    size_t n_decls, cap_decls;
    char **meta_keys, **meta_values;
    size_t n_meta;
    char *path, *tmp_path;
    FILE *fp;
    size_t current;       /* tensor being written          */
    uint64_t current_done; /* bytes of it written so far   */
    bool finished;
};

kt_status kt__st_writer_create(kt_st_writer **out)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_create: out is NULL");
    *out = kt__calloc(1, sizeof **out);
    return *out ? KT_OK : KT_ERR_NOMEM;
}

void kt__st_writer_free(kt_st_writer *w)
{
    if (!w)
        return;
    if (w->fp)
        fclose(w->fp);
    if (w->tmp_path && !w->finished)
        unlink(w->tmp_path);
    for (size_t i = 0; i < w->n_decls; i++)
        kt__free(w->decls[i].name);
    strpairs_free(w->meta_keys, w->meta_values, w->n_meta);
    kt__free(w->decls);
    kt__free(w->path);
    kt__free(w->tmp_path);
    kt__free(w);
}

kt_status kt__st_writer_set_metadata(kt_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_set_metadata: NULL argument");
    if (w->path)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_set_metadata: header already written");
    return kt__strpairs_set(&w->meta_keys, &w->meta_values, &w->n_meta, key, value);
}

kt_status kt__st_writer_declare(kt_st_writer *w, const char *name, kt_type type, uint32_t n_dims,
                                const uint64_t *shape)
{
    if (!w || !name || (n_dims && !shape))
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: NULL argument");
    if (w->path)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: '%s' declared after begin",
                         name);
    if (!is_plain_type(type))
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: '%s': type %s cannot be stored "
                         "in safetensors", name, kt_type_name(type) ? kt_type_name(type) : "?");
    if (n_dims > KT_MAX_DIMS)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: '%s': %u dims (max %d)", name,
                         n_dims, KT_MAX_DIMS);
    if (!name[0] || strcmp(name, "__metadata__") == 0 || !kt__utf8_valid(name, strlen(name), NULL))
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: invalid tensor name '%s'", name);
    for (size_t i = 0; i < w->n_decls; i++)
        if (strcmp(w->decls[i].name, name) == 0)
            return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: '%s' declared twice", name);
    uint64_t n = 1, nbytes;
    for (uint32_t d = 0; d < n_dims; d++)
        if (!kt__mul_ok(n, shape[d], &n))
            return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: '%s': size overflows", name);
    if (!kt__type_nbytes(type, n, &nbytes) || nbytes > (UINT64_C(1) << 53))
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_declare: '%s': size overflows", name);
    st_decl *decls = kt__grow(w->decls, w->n_decls, &w->cap_decls, sizeof *decls, 32);
    if (!decls)
        return KT_ERR_NOMEM;
    w->decls = decls;
    st_decl *d = &w->decls[w->n_decls];
    memset(d, 0, sizeof *d);
    d->name = kt__strdup(name);
    if (!d->name)
        return KT_ERR_NOMEM;
    d->type = type;
    d->n_dims = n_dims;
    for (uint32_t i = 0; i < n_dims; i++)
        d->shape[i] = shape[i];
    d->nbytes = nbytes;
    w->n_decls++;
    return KT_OK;
}

static kt_status append_json_string(kt_buf *b, const char *s)
{
    kt_status st = kt__buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p && !st; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            st = kt__buf_append(b, esc, 2);
        } else if (*p < 0x20) {
            st = kt__buf_appendf(b, "\\u%04x", *p);
        } else {
            st = kt__buf_append(b, p, 1);
        }
    }
    return st ? st : kt__buf_append(b, "\"", 1);
}

static kt_status build_header(const kt_st_writer *w, kt_buf *b)
{
    kt_status s = kt__buf_append(b, "{", 1);
    if (!s && w->n_meta) {
        s = kt__buf_appendf(b, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta && !s; i++) {
            s = i ? kt__buf_append(b, ",", 1) : KT_OK;
            if (!s)
                s = append_json_string(b, w->meta_keys[i]);
            if (!s)
                s = kt__buf_append(b, ":", 1);
            if (!s)
                s = append_json_string(b, w->meta_values[i]);
        }
        if (!s)
            s = kt__buf_append(b, "}", 1);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_decls && !s; i++) {
        const st_decl *d = &w->decls[i];
        s = (i || w->n_meta) ? kt__buf_append(b, ",", 1) : KT_OK;
        if (!s)
            s = append_json_string(b, d->name);
        if (!s)
            s = kt__buf_appendf(b, ":{\"dtype\":\"%s\",\"shape\":[", kt_type_name(d->type));
        for (uint32_t k = 0; k < d->n_dims && !s; k++)
            s = kt__buf_appendf(b, "%s%llu", k ? "," : "", (unsigned long long)d->shape[k]);
        if (!s)
            s = kt__buf_appendf(b, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)offset,
                                (unsigned long long)(offset + d->nbytes));
        offset += d->nbytes;
    }
    if (!s)
        s = kt__buf_append(b, "}", 1);
    /* Pad with spaces (allowed by the format) so the data region starts aligned. */
    while (!s && (8 + b->size) % ST_DATA_ALIGNMENT)
        s = kt__buf_append(b, " ", 1);
    return s;
}

kt_status kt__st_writer_begin(kt_st_writer *w, const char *path)
{
    if (!w || !path)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_begin: NULL argument");
    if (w->path)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_begin: already begun (%s)", w->path);
    kt_buf header = KT_BUF_INIT;
    kt_status s = build_header(w, &header);
    if (s) {
        kt_buf_dispose(&header);
        return s;
    }
    w->path = kt__strdup(path);
    w->tmp_path = kt__malloc(strlen(path) + 5);
    if (!w->path || !w->tmp_path) {
        kt_buf_dispose(&header);
        return KT_ERR_NOMEM;
    }
    sprintf(w->tmp_path, "%s.tmp", path);
    w->fp = fopen(w->tmp_path, "wb");
    if (!w->fp) {
        s = kt__error(KT_ERR_IO, "%s: cannot create: %s", w->tmp_path, strerror(errno));
        kt__free(w->tmp_path);
        w->tmp_path = NULL; /* nothing to remove */
        kt_buf_dispose(&header);
        return s;
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)header.size >> (8 * i));
    if (fwrite(len, 1, 8, w->fp) != 8 || fwrite(header.ptr, 1, header.size, w->fp) != header.size)
        s = kt__error(KT_ERR_IO, "%s: write failed: %s", w->tmp_path, strerror(errno));
    kt_buf_dispose(&header);
    w->current = 0;
    w->current_done = 0;
    return s;
}

kt_status kt__st_writer_write(kt_st_writer *w, const char *name, const void *data, uint64_t nbytes)
{
    if (!w || !name || (!data && nbytes))
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_write: NULL argument");
    if (!w->fp)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_write: '%s' written before begin", name);
    /* Skip past completed tensors (an empty one needs no write call). */
    while (w->current < w->n_decls && w->current_done == w->decls[w->current].nbytes &&
           strcmp(w->decls[w->current].name, name) != 0) {
        w->current++;
        w->current_done = 0;
    }
    if (w->current >= w->n_decls || strcmp(w->decls[w->current].name, name) != 0)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_write: '%s' is not the next declared "
                         "tensor%s%s", name, w->current < w->n_decls ? "; expected " : "",
                         w->current < w->n_decls ? w->decls[w->current].name : "");
    const st_decl *d = &w->decls[w->current];
    if (nbytes > d->nbytes - w->current_done)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_write: '%s': %llu bytes exceed its "
                         "declared %llu", name, (unsigned long long)(w->current_done + nbytes),
                         (unsigned long long)d->nbytes);
    if (nbytes && fwrite(data, 1, (size_t)nbytes, w->fp) != nbytes)
        return kt__error(KT_ERR_IO, "%s: write failed: %s", w->tmp_path, strerror(errno));
    w->current_done += nbytes;
    return KT_OK;
}

kt_status kt__st_writer_finish(kt_st_writer *w)
{
    if (!w || !w->fp)
        return kt__error(KT_ERR_INVALID_ARG, "st_writer_finish: not begun");
    for (size_t i = w->current; i < w->n_decls; i++) {
        uint64_t done = i == w->current ? w->current_done : 0;
        if (done != w->decls[i].nbytes)
            return kt__error(KT_ERR_INVALID_ARG, "st_writer_finish: tensor '%s' has %llu of %llu "
                             "bytes written", w->decls[i].name, (unsigned long long)done,
                             (unsigned long long)w->decls[i].nbytes);
    }
    int bad = fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0;
    bad |= fclose(w->fp) != 0;
    w->fp = NULL;
    if (bad)
        return kt__error(KT_ERR_IO, "%s: write failed: %s", w->tmp_path, strerror(errno));
    if (rename(w->tmp_path, w->path) != 0)
        return kt__error(KT_ERR_IO, "%s: cannot rename to %s: %s", w->tmp_path, w->path,
                         strerror(errno));
    w->finished = true;
    return KT_OK;
}
