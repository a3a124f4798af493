/* CUDA device discovery and a launch self-test, behind kt_cuda.h's C ABI. */
#include <cuda_runtime.h>

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.cuh"
#include "kt_cuda.h"

/* "cudaSetDevice(1): cudaErrorInvalidDevice (invalid device ordinal)" */
static int cuda_fail(char *err, size_t err_size, const char *call, int index, cudaError_t e)
{
    set_err(err, err_size, "%s(%d): %s (%s)", call, index, cudaGetErrorName(e),
            cudaGetErrorString(e));
    return -1;
}

extern "C" int kt__cuda_built(void)
{
    return 1;
}

extern "C" int kt__cuda_device_count(int32_t *count, char *err, size_t err_size)
{
    set_err(err, err_size, "%s", "");
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* No driver, no device, driver too old: report zero devices with the reason. */
        set_err(err, err_size, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
                cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        return 0;
    }
    if (n == 0)
        set_err(err, err_size, "%s", "cudaGetDeviceCount: 0 devices");
    *count = n;
    return 0;
}

extern "C" int kt__cuda_device_props(int32_t index, kt__cuda_props *out, char *err,
                                     size_t err_size)
{
    memset(out, 0, sizeof *out);
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess)
        return cuda_fail(err, err_size, "cudaGetDeviceProperties", index, e);
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->memory_total = prop.totalGlobalMem;

    int v = 0;
    if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, index)) != cudaSuccess)
        return cuda_fail(err, err_size, "cudaDeviceGetAttribute", index, e);
    out->cc_major = v;
    if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMinor, index)) != cudaSuccess)
        return cuda_fail(err, err_size, "cudaDeviceGetAttribute", index, e);
    out->cc_minor = v;
    if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, index)) != cudaSuccess)
        return cuda_fail(err, err_size, "cudaDeviceGetAttribute", index, e);
    out->multiprocessors = v;

    if ((e = cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, index)) !=
        cudaSuccess)
        return cuda_fail(err, err_size, "cudaDeviceGetPCIBusId", index, e);
    /* sysfs spells the bus id in lower case. */
    for (char *p = out->pci_bus_id; *p; p++)
        *p = (char)tolower((unsigned char)*p);

    /* Free memory needs the device's primary context; keep the caller's device. */
    int previous = 0;
    if ((e = cudaGetDevice(&previous)) != cudaSuccess)
        return cuda_fail(err, err_size, "cudaGetDevice", index, e);
    if ((e = cudaSetDevice(index)) != cudaSuccess)
        return cuda_fail(err, err_size, "cudaSetDevice", index, e);
    size_t free_bytes = 0, total_bytes = 0;
    e = cudaMemGetInfo(&free_bytes, &total_bytes);
    cudaSetDevice(previous);
    if (e != cudaSuccess)
        return cuda_fail(err, err_size, "cudaMemGetInfo", index, e);
    out->memory_free = free_bytes;
    return 0;
}

extern "C" int kt__cuda_versions(int32_t *runtime, int32_t *driver)
{
    int r = 0, d = 0;
    if (cudaRuntimeGetVersion(&r) != cudaSuccess)
        r = 0;
    if (cudaDriverGetVersion(&d) != cudaSuccess)
        d = 0;
    *runtime = r;
    *driver = d;
    return 0;
}

/* y = a * x + y, one thread per element. */
__global__ static void saxpy_kernel(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" int kt__cuda_selftest(int32_t index, char *err, size_t err_size)
{
    enum { N = 4099 };   /* not a multiple of the block size: exercises the tail guard */
    const size_t bytes = N * sizeof(float);
    float *hx = (float *)malloc(bytes), *hy = (float *)malloc(bytes);
    float *dx = NULL, *dy = NULL;
    int previous = 0, rc = -1;
    cudaError_t e;
    if (!hx || !hy) {
        set_err(err, err_size, "selftest: out of host memory");
        free(hx);
        free(hy);
        return -1;
    }
    if ((e = cudaGetDevice(&previous)) != cudaSuccess ||
        (e = cudaSetDevice(index)) != cudaSuccess) {
        free(hx);
        free(hy);
        return cuda_fail(err, err_size, "cudaSetDevice", index, e);
    }
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i;
        hy[i] = 1.0f;
    }
    if ((e = cudaMalloc((void **)&dx, bytes)) != cudaSuccess ||
        (e = cudaMalloc((void **)&dy, bytes)) != cudaSuccess) {
        cuda_fail(err, err_size, "cudaMalloc", index, e);
        goto done;
    }
    if ((e = cudaMemcpy(dx, hx, bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(dy, hy, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        cuda_fail(err, err_size, "cudaMemcpy", index, e);
        goto done;
    }
    saxpy_kernel<<<(N + 255) / 256, 256>>>(N, 2.0f, dx, dy);
    if ((e = cudaGetLastError()) != cudaSuccess) {
        cuda_fail(err, err_size, "saxpy_kernel launch", index, e);
        goto done;
    }
    if ((e = cudaMemcpy(hy, dy, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) {
        cuda_fail(err, err_size, "cudaMemcpy", index, e);
        goto done;
    }
    rc = 0;
    for (int i = 0; i < N; i++) {
        float want = 2.0f * (float)i + 1.0f; /* exact in FP32 for i < 2^22 */
        if (hy[i] != want) {
            set_err(err, err_size, "selftest on device %d: y[%d] = %g, expected %g", index, i,
                    (double)hy[i], (double)want);
            rc = -1;
            break;
        }
    }
done:
    cudaFree(dx);
    cudaFree(dy);
    cudaSetDevice(previous);
    free(hx);
    free(hy);
    return rc;
}
