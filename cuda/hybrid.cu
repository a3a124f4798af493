/*
 * The hybrid decode's hand-over to the CPU experts without host functions
 * (lib/gpu/feeder.h): the stream writes a layer's rows into mapped pinned
 * memory and then the step's number into the layer's `go` word; the feeder's
 * gate jobs on the MoE workers see it, run the CPU experts and write the
 * number into `done`, which the stream polls. Both kernels read the step's number from
 * device memory, so a captured decode graph replays with each step's own.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kt_cuda.h"

/* ops.cu: the runtime's stream */
extern "C" void *kt__cuda_stream_handle(kt__cuda_rt *rt);

#define SIGNAL_THREADS 256
/* the stream gives up on the CPU after this long (a feeder that died): the
 * step then ends with the fail word set, instead of a device that never idles */
#define AWAIT_TIMEOUT_NS 60000000000ull

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t global_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* dst[0..n) = src[0..n) (16 bytes a thread a step when vec), then, once every
 * thread's stores are visible to the host, *flag = *seq */
__global__ void __launch_bounds__(SIGNAL_THREADS)
    k_host_signal(const uint32_t *src, uint32_t *dst, int32_t n, int vec, const int32_t *seq,
                  uint32_t *flag)
{
    int32_t n4 = vec ? n / 4 : 0;
    for (int32_t i = threadIdx.x; i < n4; i += blockDim.x)
        ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
    for (int32_t i = 4 * n4 + threadIdx.x; i < n; i += blockDim.x)
        dst[i] = src[i];
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0)
        st_release_sys(flag, (uint32_t)*seq);
}

/* one thread polls *flag until it holds *seq (or the timeout: *fail = 1) */
__global__ void k_host_await(const uint32_t *flag, const int32_t *seq, uint32_t *fail)
{
    uint32_t want = (uint32_t)*seq;
    uint64_t t0 = global_ns();
    while (ld_acquire_sys(flag) != want) {
        if (global_ns() - t0 > AWAIT_TIMEOUT_NS) {
            st_release_sys(fail, 1);
            return;
        }
    }
}

extern "C" int kt__cuda_host_signal(kt__cuda_rt *rt, void *dst_h, const void *src, size_t words,
                                    uint32_t *flag_h, const int32_t *seq)
{
    cudaStream_t s = (cudaStream_t)kt__cuda_stream_handle(rt);
    int vec = ((uintptr_t)dst_h & 15) == 0 && ((uintptr_t)src & 15) == 0;
    k_host_signal<<<1, SIGNAL_THREADS, 0, s>>>((const uint32_t *)src, (uint32_t *)dst_h,
                                                (int32_t)words, vec, seq, flag_h);
    return 0;
}

extern "C" int kt__cuda_host_await(kt__cuda_rt *rt, const uint32_t *flag_h, const int32_t *seq,
                                   uint32_t *fail_h)
{
    cudaStream_t s = (cudaStream_t)kt__cuda_stream_handle(rt);
    k_host_await<<<1, 1, 0, s>>>(flag_h, seq, fail_h);
    return 0;
}
