/* kt_cuda.h for a build without CUDA: no devices, and every call says why. */
#include <stdio.h>
#include <string.h>

#include "kt_cuda.h"

static const char not_built[] = "built without CUDA";

static int without_cuda(char *err, size_t err_size)
{
    if (err && err_size > 0)
        snprintf(err, err_size, "%s", not_built);
    return -1;
}

int kt__cuda_built(void)
{
    return 0;
}

int kt__cuda_device_count(int32_t *count, char *err, size_t err_size)
{
    *count = 0;
    without_cuda(err, err_size);
    return 0;
}

int kt__cuda_device_props(int32_t index, kt__cuda_props *out, char *err, size_t err_size)
{
    (void)index;
    memset(out, 0, sizeof *out);
    return without_cuda(err, err_size);
}

int kt__cuda_versions(int32_t *runtime, int32_t *driver)
{
    *runtime = 0;
    *driver = 0;
    return 0;
}

int kt__cuda_selftest(int32_t index, char *err, size_t err_size)
{
    (void)index;
    return without_cuda(err, err_size);
}
