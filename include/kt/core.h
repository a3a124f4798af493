/*
 * kt/core.h - status codes, errors, logging, progress, the runtime handle,
 * version and build features.
 *
 * Every fallible libkt call returns a kt_status: KT_OK (0) on success, a
 * negative code on failure. The human-readable reason is kept per thread and
 * read with kt_last_error() right after the failing call:
 *
 *     kt_runtime *rt = NULL;
 *     kt_status st = kt_runtime_create(&rt, NULL);
 *     if (st < 0)
 *         fprintf(stderr, "libkt: %s: %s\n", kt_status_str(st), kt_last_error());
 *
 * Option structs start with `uint32_t struct_size`; initialise them with their
 * *_INIT macro (or *_options_init()) so that a program built against older
 * headers keeps working with a newer library (docs/abi-policy.md).
 */
#ifndef KT_CORE_H
#define KT_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "kt/export.h"
#include "kt/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status values are ABI: append only, never renumber, never reuse. */
typedef enum kt_status {
    KT_OK = 0,
    KT_ERR_INTERNAL = -1,      /* a bug in libkt; details in kt_last_error()      */
    KT_ERR_NOMEM = -2,         /* host allocation failed                           */
    KT_ERR_INVALID_ARG = -3,   /* bad argument or option value                     */
    KT_ERR_IO = -4,            /* open/read/write/mmap failed                      */
    KT_ERR_FORMAT = -5,        /* malformed or truncated file, bad JSON            */
    KT_ERR_UNSUPPORTED = -6,   /* architecture, type, ISA or device not available  */
    KT_ERR_DEVICE = -7,        /* CUDA failure; the handle is now unusable         */
    KT_ERR_DEVICE_NOMEM = -8,  /* GPU memory exhausted                             */
    KT_ERR_CANCELLED = -9,     /* a progress/abort callback asked to stop          */
    KT_ERR_VERSION = -10,      /* options struct newer than this library           */
    KT_ERR_NOT_FOUND = -11,    /* a named file, tensor or key does not exist       */
    KT_ERR_LIMIT = -12         /* a size limit was hit (context, batch, buffer)    */
} kt_status;

/* Static English name of a status ("KT_ERR_FORMAT"); never NULL. Thread-safe. Since 0.1. */
KT_API const char *kt_status_str(kt_status status);

/* Message of the most recent failure on the calling thread. Meaningful only
 * right after a kt_ call returned < 0; "" if none. Borrowed; valid until the
 * next kt_ call on this thread. Since 0.1. */
KT_API const char *kt_last_error(void);

/* Clears the calling thread's last error. Since 0.1. */
KT_API void kt_clear_error(void);

typedef enum kt_log_level {
    KT_LOG_NONE = 0,
    KT_LOG_ERROR = 1,
    KT_LOG_WARN = 2,
    KT_LOG_INFO = 3,
    KT_LOG_DEBUG = 4
} kt_log_level;

/* Receives one log line (no trailing newline). May run on any library thread;
 * `message` is borrowed for the duration of the call. */
typedef void (*kt_log_fn)(kt_log_level level, const char *message, void *user_data);

/* Progress of a long operation: `done` of `total` units (total 0 = unknown),
 * `what` names the current step (borrowed). Return nonzero to cancel; the
 * operation then fails with KT_ERR_CANCELLED. */
typedef int (*kt_progress_fn)(uint64_t done, uint64_t total, const char *what,
                              void *user_data);

/* Runtime: owns logging configuration (and later the thread pool and devices).
 * Thread contract: thread-safe. */
typedef struct kt_runtime kt_runtime;

typedef struct kt_runtime_options {
    uint32_t struct_size;    /* sizeof(kt_runtime_options); set by the INIT macro */
    uint32_t flags;          /* reserved, must be 0                                */
    kt_log_fn log_fn;        /* NULL: lines go to stderr prefixed "libkt: "        */
    void *log_user_data;
    int32_t log_level;       /* kt_log_level; messages above it are dropped         */
    int32_t n_threads;       /* worker threads; 0: physical cores                   */
} kt_runtime_options;

#define KT_RUNTIME_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_runtime_options), 0u, NULL, NULL, KT_LOG_WARN, 0 }

/* Fills *opts with defaults; struct_size is the caller's sizeof(*opts).
 * For bindings that cannot use the macro. Since 0.1. */
KT_API kt_status kt_runtime_options_init(kt_runtime_options *opts, size_t struct_size);

/* Creates a runtime. opts may be NULL (defaults). Caller owns *out; free with
 * kt_runtime_free() after every handle made from it. On failure *out is NULL.
 * Since 0.1. */
KT_API kt_status kt_runtime_create(kt_runtime **out, const kt_runtime_options *opts);

/* Frees a runtime; NULL is a no-op. Since 0.1. */
KT_API void kt_runtime_free(kt_runtime *rt);

/* Sends one formatted line through the runtime's logger (rt may be NULL: the
 * default stderr logger at KT_LOG_WARN). For tools that want one log stream.
 * Since 0.1. */
KT_API void kt_runtime_log(const kt_runtime *rt, kt_log_level level, const char *message);

/* Effective number of worker threads of the runtime (never 0). Since 0.1. */
KT_API int32_t kt_runtime_n_threads(const kt_runtime *rt);

/* Library version as "MAJOR.MINOR.PATCH" (static). Compare with
 * KT_VERSION_STRING to detect header/library skew. Since 0.1. */
KT_API const char *kt_version(void);
/* KT_VERSION_NUMBER of the library that is running. Since 0.1. */
KT_API uint32_t kt_version_number(void);

/* A library-allocated byte buffer handed to the caller (K8): text output,
 * serialized data. `ptr` is NUL-terminated when it holds text (the NUL is not
 * counted in `size`). Release with kt_buf_dispose(); never with free(). */
typedef struct kt_buf {
    char *ptr;
    size_t size;
    size_t capacity; /* internal; do not touch */
} kt_buf;
#define KT_BUF_INIT { NULL, 0u, 0u }

/* Frees the buffer's memory and resets it to KT_BUF_INIT; NULL is a no-op. Since 0.1. */
KT_API void kt_buf_dispose(kt_buf *buf);

/* CPU MoE weight methods (--kt-method). Values are ABI. */
typedef enum kt_method {
    KT_METHOD_NONE = 0,
    KT_METHOD_BF16 = 1,       /* Hugging Face BF16 weights as stored            */
    KT_METHOD_FP8 = 2,        /* FP8 E4M3 with 128x128 block scales             */
    KT_METHOD_RAWINT4 = 3,    /* compressed-tensors pack-quantized INT4, g32    */
    KT_METHOD_AMXINT8 = 4,    /* libkt INT8, per output row                     */
    KT_METHOD_AMXINT4 = 5,    /* libkt INT4, group-wise                         */
    KT_METHOD_LLAMAFILE = 6   /* GGUF block types                               */
} kt_method;

/* "BF16", "FP8", ...; NULL for an unknown value. Since 0.1. */
KT_API const char *kt_method_name(kt_method method);
/* Case-insensitive parse of a method name; KT_METHOD_NONE if unknown. Since 0.1. */
KT_API kt_method kt_method_from_name(const char *name);

/* Build features, one bit each (kt_features()). Values are ABI. */
#define KT_FEATURE_CUDA          (UINT64_C(1) << 0)   /* CUDA runtime compiled in   */
#define KT_FEATURE_ONEDNN        (UINT64_C(1) << 1)   /* oneDNN linked              */
#define KT_FEATURE_NUMA          (UINT64_C(1) << 2)   /* libnuma binding            */
#define KT_FEATURE_HWLOC         (UINT64_C(1) << 3)   /* hwloc topology             */
#define KT_FEATURE_ISA_AVX2      (UINT64_C(1) << 8)   /* AVX2+FMA kernels compiled  */
#define KT_FEATURE_ISA_AVX512    (UINT64_C(1) << 9)   /* AVX-512 kernels compiled   */
#define KT_FEATURE_ISA_AMX       (UINT64_C(1) << 10)  /* AMX kernels compiled       */
#define KT_FEATURE_METHOD_BF16     (UINT64_C(1) << 16)
#define KT_FEATURE_METHOD_FP8      (UINT64_C(1) << 17)
#define KT_FEATURE_METHOD_RAWINT4  (UINT64_C(1) << 18)
#define KT_FEATURE_METHOD_AMXINT8  (UINT64_C(1) << 19)
#define KT_FEATURE_METHOD_AMXINT4  (UINT64_C(1) << 20)
#define KT_FEATURE_METHOD_LLAMAFILE (UINT64_C(1) << 21)
#define KT_FEATURE_FORMAT_SAFETENSORS (UINT64_C(1) << 32)
#define KT_FEATURE_FORMAT_GGUF        (UINT64_C(1) << 33)

/* What this build of the library contains (compiled in, not what the CPU
 * can run: see kt/hw.h). Since 0.1. */
KT_API uint64_t kt_features(void);
/* Short name of one feature bit ("cuda", "avx512", "method:bf16"); NULL if
 * `feature` is not exactly one known bit. Since 0.1. */
KT_API const char *kt_feature_name(uint64_t feature);

#ifdef __cplusplus
}
#endif
#endif /* KT_CORE_H */
