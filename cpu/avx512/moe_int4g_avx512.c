/*
 * AVX-512 VNNI kernel for AMXINT4 with groups of 64 or 128 inputs
 * (kt-convert --group-size): packed nibbles (stored v + 8) times INT8
 * activations quantized per token (q8_token.h), one BF16 scale per group:
 *
 *   C[m][n] = d_m sum_g s[n][g] (sum_{k in g} q_m[k] (v[n][k] + 8) - 8 S_m[g]),
 *   S_m[g] = sum_{k in g} q_m[k].
 *
 * vpdpbusd takes the nibbles as stored (the unsigned operand) against the
 * signed activations. 32 packed bytes (64 inputs) give their low nibbles (the
 * even inputs) and high nibbles (the odd ones) as one vector with two
 * instructions; the cached activations are in that even/odd order. Each
 * group's int32 dot products start from -8 S_m[g] in lane 0 and are folded
 * into F32 accumulators with the group's scale, lane-wise; the lanes are summed
 * once at the end. Decode streams each weight row once for up to 4 tokens.
 */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "moe_kernels.h"
#include "q8_token.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* 32 packed bytes -> the 64 nibbles: low (even inputs), then high (odd). */
ALWAYS_INLINE __m512i nibbles64(const uint8_t *p)
{
    __m256i b = _mm256_loadu_si256((const __m256i *)p);
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(b), _mm256_srli_epi16(b, 4), 1);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}

/* out[m * 4 + r] = sum over groups of the call (GS 64-input steps each) for
 * 4 rows and MR (1..4) tokens; w[r] at the call's first input, s[r] the
 * row's scales from the call's first group, q[m] / S[m] the token's cached
 * bytes and per-64 sums. */
ALWAYS_INLINE void tile_int4g(const uint8_t *const *w, const uint16_t *const *s,
                              const uint8_t *const *q, const int32_t *const *S, const int MR,
                              const int GS, int n_groups, size_t pf, float *out)
{
    __m512 acc[4][4];
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            acc[m][r] = _mm512_setzero_ps();
    /* hot loop: one group (GS x 64 inputs), 4 rows, MR tokens */
    for (int g = 0; g < n_groups; g++) {
        __m512i x[4][2], cz[4];
        #pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            int32_t sum = 0;
            #pragma GCC unroll 2
            for (int st = 0; st < GS; st++) {
                x[m][st] = _mm512_load_si512(q[m] + (size_t)(g * GS + st) * 64);
                sum += S[m][g * GS + st];
            }
            cz[m] = _mm512_maskz_set1_epi32(1, -8 * sum);
        }
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const uint8_t *wr = w[r] + (size_t)g * GS * 32;
            _mm_prefetch((const char *)wr + pf, _MM_HINT_T1);
            if (GS == 2)
                _mm_prefetch((const char *)wr + pf + 64, _MM_HINT_T1);
            __m512i wv[2];
            #pragma GCC unroll 2
            for (int st = 0; st < GS; st++)
                wv[st] = nibbles64(wr + st * 32);
            __m512 sc = _mm512_set1_ps(kt__moe_bf16_f32(s[r][g]));
            #pragma GCC unroll 4
            for (int m = 0; m < MR; m++) {
                __m512i d = _mm512_dpbusd_epi32(cz[m], wv[0], x[m][0]);
                if (GS == 2)
                    d = _mm512_dpbusd_epi32(d, wv[1], x[m][1]);
                acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sc, acc[m][r]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
        #pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            out[m * 4 + r] = _mm512_reduce_add_ps(acc[m][r]);
}

#define TILE(MR, GS) tile_int4g(wr, sr, qm, Sm, MR, GS, n_groups, pf, t)

static void gemm_int4g(const kt__wmat *W, int n0, int n1, int k0, int k1, const void *A,
                       size_t a_stride, const int32_t *rows, int M, float *C, int ldc,
                       void *scratch)
{
    q8t_cache *cache = scratch;
    int K = W->cols, G = W->group, kn = k1 - k0;
    /* G is 64 or 128 and divides k0, k1 and K (the backend checks the shapes) */
    int GS = G / 64, n_groups = kn / G;
    if (kn <= 0) {
        for (int m = 0; m < M; m++)
            memset(C + (size_t)m * ldc, 0, (size_t)(n1 - n0) * sizeof(float));
        return;
    }
    int batch = (int)(Q8T_BYTES / (size_t)kn);
    batch = batch < Q8T_TOK ? batch : Q8T_TOK;
    size_t rb = (size_t)K / 2, sb = (size_t)K / (size_t)G;
    size_t pf = 4 * rb + 1024; /* the same place in the next 4 rows + 1 KiB */
    for (int mb = 0; mb < M; mb += batch) {
        int mn = M - mb < batch ? M - mb : batch;
        q8t_batch(cache, A, a_stride, rows, mb, mn, k0, k1, kn, Q8T_S8_EO);
        float *Cb = C + (size_t)mb * ldc;
        for (int n = n0; n < n1; n += 4) {
            int nr = n1 - n < 4 ? n1 - n : 4;
            const uint8_t *wr[4];
            const uint16_t *sr[4];
            for (int r = 0; r < 4; r++) {
                int row = n + (r < nr ? r : nr - 1);
                wr[r] = (const uint8_t *)W->w + (size_t)row * rb + (size_t)k0 / 2;
                sr[r] = (const uint16_t *)W->scale + (size_t)row * sb + (size_t)(k0 / G);
            }
            for (int m = 0; m < mn; m += 4) {
                int mr = mn - m < 4 ? mn - m : 4;
                const uint8_t *qm[4];
                const int32_t *Sm[4];
                for (int i = 0; i < 4; i++) {
                    int mi = m + (i < mr ? i : mr - 1);
                    qm[i] = cache->q + (size_t)mi * kn;
                    Sm[i] = cache->bsum + (size_t)mi * (kn / 64);
                }
                float t[16];
                if (GS == 1) {
                    switch (mr) {
                    case 1: TILE(1, 1); break;
                    case 2: TILE(2, 1); break;
                    case 3: TILE(3, 1); break;
                    default: TILE(4, 1); break;
                    }
                } else {
                    switch (mr) {
                    case 1: TILE(1, 2); break;
                    case 2: TILE(2, 2); break;
                    case 3: TILE(3, 2); break;
                    default: TILE(4, 2); break;
                    }
                }
                for (int i = 0; i < mr; i++)
                    for (int r = 0; r < nr; r++)
                        Cb[(size_t)(m + i) * ldc + (n + r - n0)] = t[i * 4 + r] * cache->d[m + i];
            }
        }
    }
}

static const kt__moe_kernels avx512_int4g = {"avx512-vnni4g", KT__ACT_BF16, kt__moe_quant_bf16,
                                             gemm_int4g, sizeof(q8t_cache), NULL};

const kt__moe_kernels *kt__moe_int4g_avx512(void)
{
    return &avx512_int4g;
}
