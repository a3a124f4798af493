/* Host allocation wrappers: every failure becomes KT_ERR_NOMEM with a message. */
#include <stdio.h>
#include <stdlib.h>

#include "kt_internal.h"

void *kt__malloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        kt__error(KT_ERR_NOMEM, "out of memory allocating %zu bytes", size);
    return p;
}

void *kt__calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        kt__error(KT_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *kt__malloc_array(size_t n, size_t size)
{
    uint64_t total;
    if (!kt__mul_ok(n, size, &total) || total > SIZE_MAX) {
        kt__error(KT_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    return kt__malloc((size_t)total);
}

void *kt__realloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q)
        kt__error(KT_ERR_NOMEM, "out of memory reallocating to %zu bytes", size);
    return q;
}

void kt__free(void *p)
{
    free(p);
}

char *kt__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = kt__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void *kt__grow(void *items, size_t n, size_t *cap, size_t elem, size_t first_cap)
{
    if (n < *cap)
        return items;
    size_t new_cap = *cap ? *cap * 2 : first_cap;
    if (new_cap > SIZE_MAX / elem)
        return NULL;
    void *grown = kt__realloc(items, new_cap * elem);
    if (grown)
        *cap = new_cap;
    return grown;
}

char *kt__path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = kt__malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

void *kt__malloc_aligned(size_t size, size_t alignment)
{
    void *p = NULL;
    if (alignment < sizeof(void *))
        alignment = sizeof(void *);
    size = (size + alignment - 1) / alignment * alignment;
    if (posix_memalign(&p, alignment, size ? size : alignment) != 0) {
        kt__error(KT_ERR_NOMEM, "out of memory allocating %zu aligned bytes", size);
        return NULL;
    }
    return p;
}

void kt__free_aligned(void *p)
{
    free(p);
}

kt_status kt__strpairs_set(char ***keys, char ***values, size_t *n, const char *key,
                           const char *value)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*keys)[i], key) == 0) {
            char *v = kt__strdup(value);
            if (!v)
                return KT_ERR_NOMEM;
            kt__free((*values)[i]);
            (*values)[i] = v;
            return KT_OK;
        }
    }
    char **k = kt__realloc(*keys, (*n + 1) * sizeof *k);
    if (!k)
        return KT_ERR_NOMEM;
    *keys = k;
    char **v = kt__realloc(*values, (*n + 1) * sizeof *v);
    if (!v)
        return KT_ERR_NOMEM;
    *values = v;
    k[*n] = kt__strdup(key);
    v[*n] = kt__strdup(value);
    if (!k[*n] || !v[*n]) {
        kt__free(k[*n]);
        kt__free(v[*n]);
        return KT_ERR_NOMEM;
    }
    (*n)++;
    return KT_OK;
}

void kt_buf_dispose(kt_buf *buf)
{
    if (!buf)
        return;
    free(buf->ptr);
    buf->ptr = NULL;
    buf->size = 0;
    buf->capacity = 0;
}

kt_status kt__buf_reserve(kt_buf *buf, size_t extra)
{
    size_t need = buf->size + extra + 1; /* room for the NUL */
    if (need <= buf->capacity)
        return KT_OK;
    size_t cap = buf->capacity ? buf->capacity : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return kt__error(KT_ERR_NOMEM, "buffer of %zu bytes too large", need);
        cap *= 2;
    }
    char *p = kt__realloc(buf->ptr, cap);
    if (!p)
        return KT_ERR_NOMEM;
    buf->ptr = p;
    buf->capacity = cap;
    return KT_OK;
}

kt_status kt__buf_append(kt_buf *buf, const void *data, size_t n)
{
    kt_status st = kt__buf_reserve(buf, n);
    if (st < 0)
        return st;
    if (n)
        memcpy(buf->ptr + buf->size, data, n);
    buf->size += n;
    buf->ptr[buf->size] = '\0';
    return KT_OK;
}

kt_status kt__buf_appendf(kt_buf *buf, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        return kt__error(KT_ERR_INTERNAL, "bad format string");
    }
    kt_status st = kt__buf_reserve(buf, (size_t)n);
    if (st < 0) {
        va_end(ap2);
        return st;
    }
    vsnprintf(buf->ptr + buf->size, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    buf->size += (size_t)n;
    return KT_OK;
}
