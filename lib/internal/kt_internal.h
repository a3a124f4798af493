/*
 * Private helpers shared by libkt's translation units. Never installed.
 * Names use the kt__ prefix (K1): shared across files, never exported.
 */
#ifndef KT_INTERNAL_H
#define KT_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kt/core.h"
#include "kt_config.h"

#if defined(__GNUC__)
#define KT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define KT_LIKELY(x) __builtin_expect(!!(x), 1)
#define KT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define KT_PRINTF(a, b)
#define KT_LIKELY(x) (x)
#define KT_UNLIKELY(x) (x)
#endif

#define KT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define KT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Records a failure for kt_last_error() and returns `status`, so that error
 * paths read `return kt__error(KT_ERR_FORMAT, "%s: header length %llu past end", ...)`. */
kt_status kt__error(kt_status status, const char *fmt, ...) KT_PRINTF(2, 3);
kt_status kt__verror(kt_status status, const char *fmt, va_list ap);
/* Prefixes the current thread's last error with "prefix: " (adds context
 * such as a file name on the way up) and returns `status`. */
kt_status kt__error_prefix(kt_status status, const char *fmt, ...) KT_PRINTF(2, 3);

/* Internal invariant check: logs and fails with KT_ERR_INTERNAL instead of
 * aborting (K21). Use as `KT_CHECK(cond);` in a function returning kt_status. */
#define KT_CHECK(cond)                                                                  \
    do {                                                                                \
        if (KT_UNLIKELY(!(cond)))                                                       \
            return kt__error(KT_ERR_INTERNAL, "internal check failed: %s (%s:%d)",      \
                             #cond, __FILE__, __LINE__);                                \
    } while (0)

/* Logging through a runtime (NULL: stderr at WARN). */
void kt__log(const kt_runtime *rt, kt_log_level level, const char *fmt, ...) KT_PRINTF(3, 4);

/* Allocation helpers: on failure they set KT_ERR_NOMEM's message and return NULL.
 * kt__malloc_array checks n * size for overflow. */
void *kt__malloc(size_t size);
void *kt__calloc(size_t n, size_t size);
void *kt__malloc_array(size_t n, size_t size);
void *kt__realloc(void *p, size_t size);
void kt__free(void *p);
char *kt__strdup(const char *s);
/* Room for one more element in a kt__realloc'ed array of n elements (elem bytes each) and
 * capacity *cap, which doubles from first_cap when full. Returns the array, moved or not, or
 * NULL when out of memory (the old array and *cap then unchanged). */
void *kt__grow(void *items, size_t n, size_t *cap, size_t elem, size_t first_cap);
/* "dir/name", allocated (kt__free); NULL when out of memory. */
char *kt__path_join(const char *dir, const char *name);
/* 64-byte aligned allocation for kernels; free with kt__free_aligned. */
void *kt__malloc_aligned(size_t size, size_t alignment);
void kt__free_aligned(void *p);

/* Safe arithmetic: return false on overflow. */
static inline bool kt__mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool kt__add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Option struct prefix protocol (K11). `dst` already holds defaults and has
 * size dst_size; `src` (may be NULL) starts with uint32_t struct_size. Copies
 * the prefix the caller knows; a larger caller struct is accepted only when its
 * unknown tail is zero (else KT_ERR_VERSION). `what` names the struct in errors. */
kt_status kt__options_read(void *dst, size_t dst_size, const void *src, const char *what);

/* The body of every public *_options_init (K11): zero the caller's struct_size
 * bytes, copy the prefix of `defaults` it has room for, stamp struct_size.
 * `fn` names the public function in errors. */
kt_status kt__options_init(void *opts, size_t struct_size, const void *defaults,
                           size_t defaults_size, const char *fn);

/* Defines the public `kt_status fn(type *opts, size_t struct_size)` filling opts with the
 * defaults `init` (the struct's *_INIT) through kt__options_init. */
#define KT__DEFINE_OPTIONS_INIT(fn, type, init)                                             \
    kt_status fn(type *opts, size_t struct_size)                                           \
    {                                                                                      \
        static const type def = init;                                                      \
        return kt__options_init(opts, struct_size, &def, sizeof def, __func__);            \
    }

/* Sets key -> value in a pair of parallel string arrays [*n] (replacing an
 * existing key's value); both strings are copied. On failure nothing changes
 * but the arrays' capacity. */
kt_status kt__strpairs_set(char ***keys, char ***values, size_t *n, const char *key,
                           const char *value);

/* kt_buf helpers (K8). */
kt_status kt__buf_reserve(kt_buf *buf, size_t extra);
kt_status kt__buf_append(kt_buf *buf, const void *data, size_t n);
kt_status kt__buf_appendf(kt_buf *buf, const char *fmt, ...) KT_PRINTF(2, 3);

/* Runtime internals visible to other modules. */
struct kt_runtime {
    kt_runtime_options opts;
    int32_t n_threads; /* effective */
};

#endif /* KT_INTERNAL_H */
