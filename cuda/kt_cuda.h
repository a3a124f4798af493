/*
 * kt_cuda.h - libkt's CUDA runtime behind a plain C ABI (K31).
 *
 * lib/ talks to the GPU only through these functions; no CUDA type crosses
 * this header, so lib/ compiles with the C compiler alone. The definitions live
 * in the cuda/ .cu files (compiled by nvcc) or, in a build without CUDA, in
 * cuda/kt_cuda_stub.c, which answers "built without CUDA". Never installed;
 * the kt__ prefix keeps the symbols out of libkt.so's exports (hidden
 * visibility, checked by tests/abi).
 *
 * Conventions: functions return 0 on success and a negative value on failure,
 * after writing a one-line reason (CUDA call and error name) to `err`
 * (err_size bytes, always NUL-terminated when err_size > 0). They never abort.
 * All are thread-safe unless noted.
 */
#ifndef KT_CUDA_H
#define KT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build contains the CUDA runtime (nvcc-compiled), else 0. */
int kt__cuda_built(void);

/* Number of usable CUDA devices in *count. Without a driver or device this is
 * not an error: *count = 0 and `err` says why (returns 0). A negative return
 * means the runtime itself failed. */
int kt__cuda_device_count(int32_t *count, char *err, size_t err_size);

/* Static and current facts of one device, as read from the CUDA runtime. */
typedef struct kt__cuda_props {
    char name[96];
    char pci_bus_id[32];     /* "0000:3b:00.0", lower case */
    uint64_t memory_total;   /* bytes */
    uint64_t memory_free;    /* bytes, now (cudaMemGetInfo) */
    int32_t cc_major;
    int32_t cc_minor;
    int32_t multiprocessors;
    int32_t reserved;
} kt__cuda_props;

/* Fills *out for device `index`. Restores the calling thread's current device. */
int kt__cuda_device_props(int32_t index, kt__cuda_props *out, char *err, size_t err_size);

/* CUDA runtime and driver versions (1000 * major + 10 * minor); 0 if unknown. */
int kt__cuda_versions(int32_t *runtime, int32_t *driver);

/* Runs a tiny kernel on device `index` (y[i] = a * x[i] + y[i] over n = 4099
 * elements, checked on the host): proves the sm_XX code in this build loads
 * and runs on the device. 0 if the result matches. */
int kt__cuda_selftest(int32_t index, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* KT_CUDA_H */
