/* Runtime handle, options protocol, logging, version, methods and features. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "kt/hw.h"
#include "kt_internal.h"

kt_status kt__options_read(void *dst, size_t dst_size, const void *src, const char *what)
{
    if (!src)
        return KT_OK;
    uint32_t given;
    memcpy(&given, src, sizeof given);
    if (given < sizeof(uint32_t))
        return kt__error(KT_ERR_INVALID_ARG,
                         "%s: struct_size %u is too small (use the *_INIT macro)", what, given);
    if (given > dst_size) {
        /* A newer caller: accept only if every field this library does not know is zero. */
        const unsigned char *tail = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < given - dst_size; i++)
            if (tail[i] != 0)
                return kt__error(KT_ERR_VERSION,
                                 "%s: struct_size %u > %zu known by libkt %s and the unknown "
                                 "fields are set; upgrade libkt",
                                 what, given, dst_size, KT_VERSION_STRING);
        given = (uint32_t)dst_size;
    }
    memcpy(dst, src, given);
    memcpy(dst, &(uint32_t){(uint32_t)dst_size}, sizeof(uint32_t));
    return KT_OK;
}

kt_status kt__options_init(void *opts, size_t struct_size, const void *defaults,
                           size_t defaults_size, const char *fn)
{
    if (!opts)
        return kt__error(KT_ERR_INVALID_ARG, "%s: opts is NULL", fn);
    if (struct_size < sizeof(uint32_t))
        return kt__error(KT_ERR_INVALID_ARG, "%s: struct_size %zu too small", fn, struct_size);
    memset(opts, 0, struct_size);
    memcpy(opts, defaults, KT_MIN(struct_size, defaults_size));
    memcpy(opts, &(uint32_t){(uint32_t)struct_size}, sizeof(uint32_t));
    return KT_OK;
}

KT__DEFINE_OPTIONS_INIT(kt_runtime_options_init, kt_runtime_options, KT_RUNTIME_OPTIONS_INIT)

static int32_t default_threads(void)
{
    int32_t cores = kt_hw_physical_cores();
    if (cores > 0)
        return cores;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int32_t)n : 1;
}

kt_status kt_runtime_create(kt_runtime **out, const kt_runtime_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_runtime_create: out is NULL");
    *out = NULL;
    kt_runtime_options o = KT_RUNTIME_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_runtime_options");
    if (st < 0)
        return st;
    if (o.flags != 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_runtime_options: unknown flags 0x%x", o.flags);
    if (o.log_level < KT_LOG_NONE || o.log_level > KT_LOG_DEBUG)
        return kt__error(KT_ERR_INVALID_ARG, "kt_runtime_options: log_level %d out of range 0..4",
                         o.log_level);
    if (o.n_threads < 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_runtime_options: n_threads %d is negative",
                         o.n_threads);
    kt_runtime *rt = kt__calloc(1, sizeof *rt);
    if (!rt)
        return KT_ERR_NOMEM;
    rt->opts = o;
    rt->n_threads = o.n_threads ? o.n_threads : default_threads();
    *out = rt;
    return KT_OK;
}

void kt_runtime_free(kt_runtime *rt)
{
    kt__free(rt);
}

int32_t kt_runtime_n_threads(const kt_runtime *rt)
{
    return rt ? rt->n_threads : default_threads();
}

static const char *level_name(kt_log_level level)
{
    switch (level) {
    case KT_LOG_ERROR: return "error";
    case KT_LOG_WARN: return "warning";
    case KT_LOG_INFO: return "info";
    case KT_LOG_DEBUG: return "debug";
    default: return "log";
    }
}

void kt_runtime_log(const kt_runtime *rt, kt_log_level level, const char *message)
{
    int32_t max_level = rt ? rt->opts.log_level : KT_LOG_WARN;
    if (level == KT_LOG_NONE || (int32_t)level > max_level || !message)
        return;
    if (rt && rt->opts.log_fn) {
        rt->opts.log_fn(level, message, rt->opts.log_user_data);
        return;
    }
    fprintf(stderr, "libkt: %s: %s\n", level_name(level), message);
}

void kt__log(const kt_runtime *rt, kt_log_level level, const char *fmt, ...)
{
    int32_t max_level = rt ? rt->opts.log_level : KT_LOG_WARN;
    if ((int32_t)level > max_level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One line per message (K23): cut at the first newline. */
    char *nl = strchr(line, '\n');
    if (nl)
        *nl = '\0';
    kt_runtime_log(rt, level, line);
}

const char *kt_version(void)
{
    return KT_VERSION_STRING;
}

uint32_t kt_version_number(void)
{
    return KT_VERSION_NUMBER;
}

static const char *const method_names[] = {
    [KT_METHOD_NONE] = NULL,           [KT_METHOD_BF16] = "BF16",
    [KT_METHOD_FP8] = "FP8",           [KT_METHOD_RAWINT4] = "RAWINT4",
    [KT_METHOD_AMXINT8] = "AMXINT8",   [KT_METHOD_AMXINT4] = "AMXINT4",
    [KT_METHOD_LLAMAFILE] = "LLAMAFILE",
};

const char *kt_method_name(kt_method method)
{
    if ((unsigned)method >= KT_ARRAY_LEN(method_names))
        return NULL;
    return method_names[method];
}

kt_method kt_method_from_name(const char *name)
{
    if (!name)
        return KT_METHOD_NONE;
    for (unsigned i = 1; i < KT_ARRAY_LEN(method_names); i++)
        if (strcasecmp(name, method_names[i]) == 0)
            return (kt_method)i;
    return KT_METHOD_NONE;
}
