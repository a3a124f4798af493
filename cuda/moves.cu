/* Expert moves copied while steps run (lib/gpu/mover.h): host weights, which
 * are pageable (the model's mapping), go through two pinned staging halves
 * into device memory on a stream of the mover's own, so the copy engine works
 * beside the decode stream and the host thread fills one half while the other
 * crosses PCIe. Used from one thread, the mover's. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.cuh"
#include "kt_cuda.h"

struct kt__cuda_mover {
    int device;
    cudaStream_t stream;
    cudaEvent_t drained[2];   /* staging half i may be refilled */
    unsigned char *stage[2];  /* pinned, `half` bytes each */
    size_t half;
    int next;
};

extern "C" int kt__cuda_mover_create(kt__cuda_mover **out, int32_t device, size_t half_bytes,
                                     char *err, size_t err_size)
{
    *out = NULL;
    kt__cuda_mover *m = (kt__cuda_mover *)calloc(1, sizeof *m);
    if (!m) {
        set_err(err, err_size, "out of host memory");
        return -1;
    }
    *out = m;  /* freed by kt__cuda_mover_free, also half made */
    m->device = device;
    m->half = half_bytes;
    CK(cudaSetDevice(device), "cudaSetDevice (expert moves)");
    CK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking),
       "cudaStreamCreate (expert moves)");
    for (int i = 0; i < 2; i++) {
        CK(cudaEventCreateWithFlags(&m->drained[i], cudaEventDisableTiming),
           "cudaEventCreate (expert moves)");
        CK(cudaMallocHost((void **)&m->stage[i], half_bytes), "cudaMallocHost (expert moves)");
    }
    return 0;
}

extern "C" void kt__cuda_mover_free(kt__cuda_mover *m)
{
    if (!m)
        return;
    cudaSetDevice(m->device);
    if (m->stream) {
        cudaStreamSynchronize(m->stream);
        cudaStreamDestroy(m->stream);
    }
    for (int i = 0; i < 2; i++) {
        if (m->drained[i])
            cudaEventDestroy(m->drained[i]);
        if (m->stage[i])
            cudaFreeHost(m->stage[i]);
    }
    free(m);
}

extern "C" int kt__cuda_mover_copy(kt__cuda_mover *m, void *dst, const void *src, size_t bytes,
                                   char *err, size_t err_size)
{
    CK(cudaSetDevice(m->device), "cudaSetDevice (expert moves)");
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = (unsigned char *)dst;
    while (bytes) {
        size_t c = bytes < m->half ? bytes : m->half;
        int h = m->next;
        m->next ^= 1;
        /* the half's previous copy must have left it (an event never recorded is complete) */
        CK(cudaEventSynchronize(m->drained[h]), "cudaEventSynchronize (expert moves)");
        memcpy(m->stage[h], s, c);
        CK(cudaMemcpyAsync(d, m->stage[h], c, cudaMemcpyHostToDevice, m->stream),
           "cudaMemcpyAsync (expert moves)");
        CK(cudaEventRecord(m->drained[h], m->stream), "cudaEventRecord (expert moves)");
        s += c, d += c, bytes -= c;
    }
    return 0;
}

extern "C" int kt__cuda_mover_finish(kt__cuda_mover *m, char *err, size_t err_size)
{
    CK(cudaSetDevice(m->device), "cudaSetDevice (expert moves)");
    CK(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize (expert moves)");
    return 0;
}
