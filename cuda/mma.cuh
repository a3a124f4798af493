/* Warp-level BF16 tensor-core products (sm_80+) shared by the .cu files:
 * mma.sync m16n8k16 with F32 accumulation and the register packing of its
 * operands. In an m16n8 fragment lane (g = lane / 4, q = lane % 4) holds rows
 * g and g + 8, columns 2q and 2q + 1; A's registers are (row g, k 2q..),
 * (g + 8, 2q..), (g, 2q + 8..), (g + 8, 2q + 8..); B's (k 2q.., column g),
 * (k 2q + 8.., g). */
#ifndef KT_CUDA_MMA_CUH
#define KT_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* d[16 x 8] += a[16 x 16] · b[16 x 8]: a row-major, b col-major, both BF16 */
__device__ __forceinline__ void mma_bf16(float d[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/* two consecutive BF16 (shared memory) as one register, the lower index low */
__device__ __forceinline__ uint32_t ld2(const __nv_bfloat16 *p)
{
    return *(const uint32_t *)p;
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* x = hi + lo to 2^-16: hi = bf16(x), lo = bf16(x - hi) */
__device__ __forceinline__ float lo_part(float x)
{
    return x - __bfloat162float(__float2bfloat16_rn(x));
}

/* four values as four BF16 (8 bytes, for one store) */
__device__ __forceinline__ uint2 pack4(float4 v)
{
    return make_uint2(pack2(v.x, v.y), pack2(v.z, v.w));
}

/* the four values' low halves, before their own rounding to BF16 */
__device__ __forceinline__ float4 lo4(float4 v)
{
    return make_float4(lo_part(v.x), lo_part(v.y), lo_part(v.z), lo_part(v.w));
}

#endif /* KT_CUDA_MMA_CUH */
