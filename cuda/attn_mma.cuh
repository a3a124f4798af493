/* Prefill attention on the tensor cores (cuda/attn_mma.cu), for
 * kt__cuda_attention in cuda/ops.cu: 1 when launched on stream s, 0 when the
 * shapes or strides are not ones it serves (head sizes q / v of 16 / 16,
 * 32 / 32, 48 / 32, 64 / 64, 128 / 128, 192 / 128; groups of up to 64 query
 * heads a kv head; 16-byte aligned rows). split: operands as BF16 hi + lo
 * halves (near F32), else BF16 alone. */
#ifndef KT_CUDA_ATTN_MMA_CUH
#define KT_CUDA_ATTN_MMA_CUH

#include <cuda_runtime.h>

#include "kt_cuda.h"

extern "C" int kt__cuda_attn_mma(cudaStream_t s, const kt__cuda_attn *a, int split);

#endif /* KT_CUDA_ATTN_MMA_CUH */
