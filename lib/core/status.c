/* Status names and the thread-local last-error message (K19, K20). */
#include <stdio.h>

#include "kt_internal.h"

#define KT_ERROR_CAPACITY 2048

static _Thread_local char last_error[KT_ERROR_CAPACITY];

const char *kt_status_str(kt_status status)
{
    switch (status) {
    case KT_OK: return "KT_OK";
    case KT_ERR_INTERNAL: return "KT_ERR_INTERNAL";
    case KT_ERR_NOMEM: return "KT_ERR_NOMEM";
    case KT_ERR_INVALID_ARG: return "KT_ERR_INVALID_ARG";
    case KT_ERR_IO: return "KT_ERR_IO";
    case KT_ERR_FORMAT: return "KT_ERR_FORMAT";
    case KT_ERR_UNSUPPORTED: return "KT_ERR_UNSUPPORTED";
    case KT_ERR_DEVICE: return "KT_ERR_DEVICE";
    case KT_ERR_DEVICE_NOMEM: return "KT_ERR_DEVICE_NOMEM";
    case KT_ERR_CANCELLED: return "KT_ERR_CANCELLED";
    case KT_ERR_VERSION: return "KT_ERR_VERSION";
    case KT_ERR_NOT_FOUND: return "KT_ERR_NOT_FOUND";
    case KT_ERR_LIMIT: return "KT_ERR_LIMIT";
    }
    return "KT_ERR_UNKNOWN";
}

const char *kt_last_error(void)
{
    return last_error;
}

void kt_clear_error(void)
{
    last_error[0] = '\0';
}

kt_status kt__verror(kt_status status, const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return status;
}

kt_status kt__error(kt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kt__verror(status, fmt, ap);
    va_end(ap);
    return status;
}

kt_status kt__error_prefix(kt_status status, const char *fmt, ...)
{
    char prefix[512];
    char old[KT_ERROR_CAPACITY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t n = strlen(prefix);
    if (n + 2 >= sizeof last_error)
        n = sizeof last_error - 3;
    memcpy(last_error, prefix, n);
    memcpy(last_error + n, ": ", 2);
    size_t room = sizeof last_error - n - 3;
    size_t m = strnlen(old, room);
    memcpy(last_error + n + 2, old, m);
    last_error[n + 2 + m] = '\0';
    return status;
}
