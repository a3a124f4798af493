/* Prefill attention on the tensor cores: the flash attention of k_attn_tile
 * (cuda/ops.cu) with Q Kᵀ and P V as BF16 products with F32 accumulation
 * (mma.sync m16n8k16), the softmax statistics and the output in F32
 * registers. The queries, keys and values arrive in F32 (the KV cache) and
 * are staged as BF16; with SPLIT (KT_GPU_ATTN_TILE=2, the default for fast
 * precision) each operand as hi + lo halves, x = hi + lo to 2^-16, and each
 * product as hi·hi + lo·hi + hi·lo (three products, near F32: BF16 alone put
 * a tiny fixture's logits 0.42 off); without (=3) one BF16 product. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "attn_mma.cuh"
#include "mma.cuh"

#define AM_ROWS 64    /* query rows a block: 4 warps of 16 */
#define AM_BK 64      /* positions a staged tile */
#define AM_THREADS 128
#define AM_VLD (AM_BK + 8) /* BF16 pitch of a transposed value row (banks skewed) */

/* four values at p (and their low halves at p + lo_off when SPLIT) */
template <bool SPLIT> __device__ __forceinline__ void st4(__nv_bfloat16 *p, int lo_off, float4 v)
{
    *(uint2 *)p = pack4(v);
    if (SPLIT)
        *(uint2 *)(p + lo_off) = pack4(lo4(v));
}

template <bool SPLIT> __device__ __forceinline__ void st1(__nv_bfloat16 *p, int lo_off, float v)
{
    p[0] = __float2bfloat16_rn(v);
    if (SPLIT)
        p[lo_off] = __float2bfloat16_rn(lo_part(v));
}

static size_t attn_mma_smem(int qd, int vd, bool split)
{
    return sizeof(__nv_bfloat16) * (split ? 2 : 1) *
           (2 * (size_t)AM_ROWS * (qd + 8) + (size_t)vd * AM_VLD);
}

/* A block: AM_ROWS query rows of one kv head, row r = token t0 + r / G (clamped
 * to the last), head kh·G + r % G; warp w owns rows 16w ..< 16w + 16. In an
 * m16n8 fragment lane (g = lane / 4, q = lane % 4) holds rows g and g + 8,
 * columns 2q and 2q + 1. Per tile of AM_BK positions:
 *   S = scale · Q Kᵀ              [16][AM_BK] a warp, QD / 16 steps of k
 *   causal / window mask; m' = max(m, max_j S), P = 2^(S log2e - m'),
 *   l' = l 2^(m - m') + Σ_j P, O = O 2^(m - m') + P V   ([16][VD] a warp)
 * P goes from the accumulators straight into the next product's A operand. */
template <int QD, int VD, bool SPLIT>
__global__ void __launch_bounds__(AM_THREADS) k_attn_mma(kt__cuda_attn a, int32_t G, int32_t BT)
{
    constexpr int QLD = QD + 8, NS = AM_BK / 8, NO = VD / 8;
    /* the low halves (SPLIT) this far after each high half */
    constexpr int QLO = AM_ROWS * QLD, KLO = AM_BK * QLD, VLO = VD * AM_VLD;
    extern __shared__ __align__(16) unsigned char am_smem[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)am_smem;     /* [AM_ROWS][QLD] (+ lo) */
    __nv_bfloat16 *Ks = Qs + (SPLIT ? 2 : 1) * QLO;    /* [AM_BK][QLD] (+ lo) */
    __nv_bfloat16 *Vt = Ks + (SPLIT ? 2 : 1) * KLO;    /* [VD][AM_VLD] by dimension (+ lo) */
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
    const int32_t kh = blockIdx.y, t0 = blockIdx.x * BT, pos0 = *a.pos0;
    const int32_t t_last = min(t0 + BT, a.T) - 1;
    const float *ka = a.ka + (size_t)kh * a.ka_sh;
    const float *kb = a.kb ? a.kb + (size_t)kh * a.kb_sh : ka;
    const float *vb = a.v + (size_t)kh * a.v_sh;
    /* [AM_ROWS][QD] queries */
    for (int i = tid; i < AM_ROWS * QD / 4; i += AM_THREADS) {
        int r = i / (QD / 4), d = 4 * (i % (QD / 4));
        int32_t t = min(t0 + r / G, t_last), h = kh * G + r % G;
        float4 v = __ldg((const float4 *)(a.q + (size_t)t * a.q_st + (size_t)h * a.q_sh + d));
        st4<SPLIT>(Qs + r * QLD + d, QLO, v);
    }
    /* this lane's two rows (g, g + 8 of the warp's): visible positions lo ..= hi */
    int32_t lo[2], hi[2];
    for (int i = 0; i < 2; i++) {
        int32_t r = warp * 16 + g + 8 * i, t = min(t0 + r / G, t_last), p = pos0 + t;
        hi[i] = p;
        lo[i] = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    }
    const int32_t pf = pos0 + t0;
    const int32_t p_begin = a.window > 0 && pf - a.window + 1 > 0 ? pf - a.window + 1 : 0;
    const int32_t p_end = pos0 + t_last;
    const float sl2 = a.scale * 1.4426950408889634f; /* scores in powers of two */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const __nv_bfloat16 *qa = Qs + (warp * 16 + g) * QLD + 2 * q, *qb = qa + 8 * QLD;
    for (int32_t tp = p_begin; tp <= p_end; tp += AM_BK) {
        const int32_t nt = min(AM_BK, p_end - tp + 1);
        __syncthreads(); /* the last tile's readers are done (and the queries stored) */
        /* [AM_BK][QD] keys, [VD][AM_BK] values; rows past the end repeat the last */
        for (int i = tid; i < AM_BK * QD / 4; i += AM_THREADS) {
            int j = i / (QD / 4), d = 4 * (i % (QD / 4));
            int32_t p = tp + min(j, nt - 1);
            const float *src = d < a.ka_dim ? ka + (size_t)p * a.ka_sp + d
                                            : kb + (size_t)p * a.kb_sp + (d - a.ka_dim);
            st4<SPLIT>(Ks + j * QLD + d, KLO, __ldg((const float4 *)src));
        }
        for (int i = tid; i < AM_BK * VD / 4; i += AM_THREADS) {
            int j = i / (VD / 4), d = 4 * (i % (VD / 4));
            int32_t p = tp + min(j, nt - 1);
            float4 v = __ldg((const float4 *)(vb + (size_t)p * a.v_sp + d));
            st1<SPLIT>(Vt + (d + 0) * AM_VLD + j, VLO, v.x);
            st1<SPLIT>(Vt + (d + 1) * AM_VLD + j, VLO, v.y);
            st1<SPLIT>(Vt + (d + 2) * AM_VLD + j, VLO, v.z);
            st1<SPLIT>(Vt + (d + 3) * AM_VLD + j, VLO, v.w);
        }
        __syncthreads();
        /* S[16][AM_BK] = Q Kᵀ */
        float s[NS][4];
#pragma unroll
        for (int n = 0; n < NS; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < QD; k += 16) {
            uint32_t a0 = ld2(qa + k), a1 = ld2(qb + k), a2 = ld2(qa + k + 8),
                     a3 = ld2(qb + k + 8), l0 = 0, l1 = 0, l2 = 0, l3 = 0;
            if (SPLIT)
                l0 = ld2(qa + QLO + k), l1 = ld2(qb + QLO + k), l2 = ld2(qa + QLO + k + 8),
                l3 = ld2(qb + QLO + k + 8);
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const __nv_bfloat16 *kr = Ks + (n * 8 + g) * QLD + k + 2 * q;
                uint32_t b0 = ld2(kr), b1 = ld2(kr + 8);
                mma_bf16(s[n], a0, a1, a2, a3, b0, b1);
                if (SPLIT) {
                    mma_bf16(s[n], l0, l1, l2, l3, b0, b1);
                    mma_bf16(s[n], a0, a1, a2, a3, ld2(kr + KLO), ld2(kr + KLO + 8));
                }
            }
        }
        /* mask, running max and sum per row (a row's 4 lanes reduce by shuffles) */
        float corr[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int32_t jj = n * 8 + 2 * q + e, p = tp + jj;
                    bool on = jj < nt && p <= hi[i] && p >= lo[i];
                    float v = on ? s[n][2 * i + e] * sl2 : -INFINITY;
                    s[n][2 * i + e] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float m_new = fmaxf(m[i], mx), ref = m_new == -INFINITY ? 0.0f : m_new;
            float rs = 0.0f;
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    rs += (s[n][2 * i + e] = exp2f(s[n][2 * i + e] - ref));
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            rs += __shfl_xor_sync(0xffffffffu, rs, 2);
            corr[i] = exp2f(m[i] - ref);
            l[i] = l[i] * corr[i] + rs;
            m[i] = m_new;
        }
#pragma unroll
        for (int n = 0; n < NO; n++) {
            o[n][0] *= corr[0], o[n][1] *= corr[0];
            o[n][2] *= corr[1], o[n][3] *= corr[1];
        }
        /* O[16][VD] += P[16][AM_BK] V: positions 16 at a time, P from S's registers */
#pragma unroll
        for (int c = 0; c < AM_BK / 16; c++) {
            const float *s0 = s[2 * c], *s1 = s[2 * c + 1];
            uint32_t a0 = pack2(s0[0], s0[1]), a1 = pack2(s0[2], s0[3]);
            uint32_t a2 = pack2(s1[0], s1[1]), a3 = pack2(s1[2], s1[3]);
            uint32_t l0 = 0, l1 = 0, l2 = 0, l3 = 0;
            if (SPLIT) {
                l0 = pack2(lo_part(s0[0]), lo_part(s0[1]));
                l1 = pack2(lo_part(s0[2]), lo_part(s0[3]));
                l2 = pack2(lo_part(s1[0]), lo_part(s1[1]));
                l3 = pack2(lo_part(s1[2]), lo_part(s1[3]));
            }
#pragma unroll
            for (int n = 0; n < NO; n++) {
                const __nv_bfloat16 *vr = Vt + (n * 8 + g) * AM_VLD + 16 * c + 2 * q;
                uint32_t b0 = ld2(vr), b1 = ld2(vr + 8);
                mma_bf16(o[n], a0, a1, a2, a3, b0, b1);
                if (SPLIT) {
                    mma_bf16(o[n], l0, l1, l2, l3, b0, b1);
                    mma_bf16(o[n], a0, a1, a2, a3, ld2(vr + VLO), ld2(vr + VLO + 8));
                }
            }
        }
    }
    /* o = O / l (with a sink: both scaled to M = max(m_log2, sink log2e), l + 2^(..)) */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int32_t r = warp * 16 + g + 8 * i, t = t0 + r / G, h = kh * G + r % G;
        if (r / G >= BT || t > t_last)
            continue;
        float sc = 1.0f, den = l[i];
        if (a.sinks) {
            float sk = a.sinks[h] * 1.4426950408889634f, M = fmaxf(m[i], sk);
            sc = exp2f(m[i] - M);
            den = l[i] * sc + exp2f(sk - M);
        }
        float f = sc / den;
        float *out = a.o + (size_t)t * a.o_st + (size_t)h * a.o_sh + 2 * q;
#pragma unroll
        for (int n = 0; n < NO; n++)
            *(float2 *)(out + n * 8) = make_float2(o[n][2 * i] * f, o[n][2 * i + 1] * f);
    }
}

static bool al16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

template <int QD, int VD, bool SPLIT> static int launch(cudaStream_t s, const kt__cuda_attn *a)
{
    static int allowed = -1; /* the dynamic shared memory above 48 KB asked once */
    size_t smem = attn_mma_smem(QD, VD, SPLIT);
    if (allowed < 0)
        allowed = cudaFuncSetAttribute(k_attn_mma<QD, VD, SPLIT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem) == cudaSuccess;
    if (!allowed) {
        cudaGetLastError();
        return 0;
    }
    int32_t G = a->group, BT = AM_ROWS / G;
    dim3 grid((unsigned)((a->T + BT - 1) / BT), (unsigned)(a->n_head / G));
    k_attn_mma<QD, VD, SPLIT><<<grid, AM_THREADS, smem, s>>>(*a, G, BT);
    return 1;
}

template <bool SPLIT> static int launch_shape(cudaStream_t s, const kt__cuda_attn *a)
{
    int32_t qd = a->ka_dim + a->kb_dim, vd = a->v_dim;
    if (qd == 16 && vd == 16)
        return launch<16, 16, SPLIT>(s, a);
    if (qd == 32 && vd == 32)
        return launch<32, 32, SPLIT>(s, a);
    if (qd == 48 && vd == 32)
        return launch<48, 32, SPLIT>(s, a);
    if (qd == 64 && vd == 64)
        return launch<64, 64, SPLIT>(s, a);
    if (qd == 128 && vd == 128)
        return launch<128, 128, SPLIT>(s, a);
    if (qd == 192 && vd == 128)
        return launch<192, 128, SPLIT>(s, a);
    return 0;
}

extern "C" int kt__cuda_attn_mma(cudaStream_t s, const kt__cuda_attn *a, int split)
{
    int32_t G = a->group;
    if (G < 1 || G > AM_ROWS || a->n_head % G || a->ka_dim % 4 || a->T <= 0)
        return 0;
    if (!al16(a->q) || a->q_st % 4 || a->q_sh % 4 || !al16(a->ka) || a->ka_sp % 4 ||
        a->ka_sh % 4 || !al16(a->v) || a->v_sp % 4 || a->v_sh % 4 ||
        (a->kb_dim && (!a->kb || !al16(a->kb) || a->kb_sp % 4 || a->kb_sh % 4)) ||
        ((uintptr_t)a->o & 7) || a->o_st % 2 || a->o_sh % 2)
        return 0;
    return split ? launch_shape<true>(s, a) : launch_shape<false>(s, a);
}
