/* Error text for the .cu files behind kt_cuda.h: set_err formats into the
 * caller's buffer, fail names the failed call and CUDA's error, and CK(call,
 * what) returns fail's -1 from a function that has `char *err, size_t
 * err_size`. */
#ifndef KT_CUDA_CHECK_CUH
#define KT_CUDA_CHECK_CUH

#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdio.h>

static inline void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

static inline int fail(char *err, size_t err_size, const char *what, cudaError_t e)
{
    set_err(err, err_size, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
}

#define CK(call, what)                                                                       \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            return fail(err, err_size, what, e_);                                            \
    } while (0)

#endif /* KT_CUDA_CHECK_CUH */
