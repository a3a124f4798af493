/* Guard-page stress of the LLAMAFILE AVX2 set (session 16, rev16; rev14's method): the
 * decode tiles (all stream orders, the woven ones included) and the prefill panels (with
 * and without the quantizer's per-block arrays) on weights (ggml rows and their load-time
 * repack) and activation rows that each end at a PROT_NONE page, so any load past a
 * row's, a repack's or an activation row's end faults. 12 block types, ragged rows and
 * inputs, row and input slices, 1-11, 17 and 64 tokens (the buffer's last rows, permuted);
 * outputs against the scalar set's vec_dots within 2e-5 x sum |w a| + 1e-6.
 *
 * Build (from the repository root, after `ninja -C BUILD`; add -fsanitize=address,undefined
 * for a sanitizer BUILD):
 *   B=BUILD; gcc -O1 -g -I. -Iinclude -Ilib/internal -I$B/include -I$B \
 *     scripts/lf_guard_stress.c -o lf_guard_stress -Wl,--allow-shlib-undefined \
 *     -Wl,--whole-archive -Wl,--start-group $B/lib/libkt_internal.a $B/cpu/libkt_cpu_*.a \
 *     -Wl,--no-whole-archive -lpthread -lm -ldl -lhwloc -lnuma -lcjson -lpcre2-8 -ldnnl \
 *     -lgomp -Wl,--end-group
 * Run:
 *   ./lf_guard_stress [ggml type names...]     (default: all 12; exit 1 on a mismatch)
 *   STRESS_STREAMS=N / STRESS_WEAVE=W: kt__lf_set_streams_avx2(N, W) (KT_LF_STREAMS /
 *   KT_LF_WEAVE); STRESS_WORST=1: weights and activations at +-1 (extreme codes); the
 *   kernels' own knobs (KT_LF_PANEL_EXT, KT_LF_PANEL_ORDER, KT_LF_PANEL_MIN, KT_LF_XMAX,
 *   KT_LF_AHEAD, KT_LF_NOHINT) from the environment as always.
 * xeon2 12-02: 2457 calls under each of 20 settings, ASan + UBSan and release: 0 failed
 * (docs/bench/xeon2-rev16-0115-review.txt). */
#define _GNU_SOURCE
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu/moe_kernels.h"
#include "cpu/ref/ggml_quants.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* n bytes ending exactly at a PROT_NONE page */
static void *gmalloc(size_t n, size_t *mapped, void **base)
{
    size_t pg = 4096, r = (n + pg - 1) / pg * pg;
    if (!r)
        r = pg;
    uint8_t *p = mmap(NULL, r + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    mprotect(p + r, pg, PROT_NONE);
    *mapped = r + pg;
    *base = p;
    return p + r - n;
}

/* M activation rows at stride `stride` (each ending at a guard page): returns A */
static uint8_t *grows(int M, size_t rowb, size_t *stride, size_t *mapped, void **base)
{
    size_t pg = 4096, s = (rowb + pg - 1) / pg * pg + pg;
    uint8_t *p = mmap(NULL, s * M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    for (int m = 0; m < M; m++)
        mprotect(p + (size_t)m * s + s - pg, pg, PROT_NONE);
    *stride = s;
    *mapped = s * M;
    *base = p;
    return p + (s - pg - rowb);
}

static const kt_type all[] = {KT_TYPE_Q4_0, KT_TYPE_Q8_0, KT_TYPE_Q4_K, KT_TYPE_Q6_K,
                              KT_TYPE_Q5_K, KT_TYPE_IQ4_NL, KT_TYPE_IQ4_XS, KT_TYPE_Q3_K,
                              KT_TYPE_Q2_K, KT_TYPE_Q5_0, KT_TYPE_Q4_1, KT_TYPE_Q5_1};

static int fails, runs;

/* one shape: N x K weights of type, rows [n0, n1), inputs [k0, K), tokens Ms */
static void shape(kt_type type, int N, int K, int n0, int n1, int k0, const int *Ms, int nM,
                  bool worst, bool repack)
{
    const kt_ggml_traits *tr = kt__ggml_traits(type);
    if (repack && !kt__lf_repack_bytes(type, N, K))
        return;
    size_t rb = kt__ggml_row_bytes(type, K), qm, rm = 0, am0, am1;
    void *qb, *rbase = NULL, *ab0, *ab1;
    uint8_t *q = gmalloc(rb * N, &qm, &qb);
    float *deq = malloc((size_t)N * K * sizeof(float)), *src = malloc((size_t)K * sizeof(float));
    for (int r = 0; r < N; r++) {
        for (int c = 0; c < K; c++)
            src[c] = worst ? ((c * 7 + r) % 3 == 0 ? -1.0f : (c % 5 == 0 ? 1.0f : -0.999f))
                           : frand() * 0.5f;
        tr->quantize(src, q + (size_t)r * rb, K);
        tr->to_float(q + (size_t)r * rb, deq + (size_t)r * K, K);
    }
    kt__wmat W = {.w = q, .rows = N, .cols = K, .type = type};
    size_t rpb = repack ? kt__lf_repack_bytes(type, N, K) : 0;
    kt__wmat X = W;
    if (rpb) {
        void *rp = gmalloc(rpb, &rm, &rbase);
        X = kt__lf_repack(&W, rp);
    }
    unsigned sec = kt__ggml_act_section(type);
    /* the set's mask as the backend makes it: the type's sections and Q8_0 */
    unsigned mask = sec | KT__GGML_ACT_Q80;
    const kt__moe_kernels *ref = kt__moe_llamafile_kernels(0, mask);
    const kt__moe_kernels *vec = kt__moe_llamafile_kernels(1, mask);
    int MMAX = 0;
    for (int i = 0; i < nM; i++)
        MMAX = Ms[i] > MMAX ? Ms[i] : MMAX;
    size_t rb0 = kt__moe_act_row_bytes(ref->act, K), rb1 = kt__moe_act_row_bytes(vec->act, K);
    size_t s0, s1;
    uint8_t *A0 = grows(MMAX, rb0, &s0, &am0, &ab0), *A1 = grows(MMAX, rb1, &s1, &am1, &ab1);
    float *xr = malloc((size_t)MMAX * K * sizeof(float));
    const kt_ggml_traits *pt = kt__ggml_traits(tr->vec_dot_type);
    void *pbuf = malloc(kt__ggml_row_bytes(tr->vec_dot_type, K));
    for (int m = 0; m < MMAX; m++) {
        for (int k = 0; k < K; k++)
            src[k] = worst ? (m % 2 ? 1.0f : -1.0f) * ((k % 3) ? 1.0f : 0.999f)
                           : frand() * (1.0f + (float)(m % 7));
        ref->quant(src, 0, K, K, A0 + (size_t)m * s0);
        for (int k = 0; k < K; k += 64) /* in pieces, as phase 1 does */
            vec->quant(src, k, k + 64 < K ? k + 64 : K, K, A1 + (size_t)m * s1);
        pt->from_float(src, pbuf, K);
        pt->to_float(pbuf, xr + (size_t)m * K, K);
    }
    void *scratch = malloc(vec->scratch_bytes ? vec->scratch_bytes : 64);
    float *C0 = malloc((size_t)MMAX * N * sizeof(float)), *C1 = malloc((size_t)MMAX * N * sizeof(float));
    int32_t *rows = malloc((size_t)MMAX * sizeof(int32_t));
    for (int m = 0; m < MMAX; m++)
        rows[m] = (m * 5 + 3) % MMAX; /* an order of the rows not theirs */
    for (int i = 0; i < nM; i++) {
        int M = Ms[i];
        /* rows of M tokens out of MMAX: pick the last ones too */
        for (int m = 0; m < M; m++)
            rows[m] = MMAX - 1 - (m * 3) % MMAX;
        memset(C1, 0xff, (size_t)MMAX * N * sizeof(float));
        ref->gemm(&W, n0, n1, k0, K, A0, s0, rows, M, C0, N, NULL);
        if (vec->prefetch)
            vec->prefetch(&X, n0, n1, M);
        vec->gemm(&X, n0, n1, k0, K, A1, s1, rows, M, C1, N, scratch);
        runs++;
        int bad = 0;
        for (int m = 0; m < M && bad < 3; m++)
            for (int n = n0; n < n1; n++) {
                double mag = 0;
                for (int k = k0; k < K; k++)
                    mag += fabs((double)deq[(size_t)n * K + k] * xr[(size_t)rows[m] * K + k]);
                double got = C1[(size_t)m * N + n - n0], want = C0[(size_t)m * N + n - n0];
                if (!(fabs(got - want) <= 2e-5 * mag + 1e-6)) {
                    if (bad++ < 3)
                        fprintf(stderr, "FAIL %s N %d K %d n0 %d n1 %d k0 %d M %d m %d n %d: got %g want %g (mag %g)%s\n",
                                tr->name, N, K, n0, n1, k0, M, m, n, got, want, mag,
                                repack ? " repack" : "");
                }
            }
        if (bad)
            fails++;
    }
    free(C0), free(C1), free(rows), free(scratch), free(xr), free(pbuf), free(deq), free(src);
    munmap(ab0, am0), munmap(ab1, am1), munmap(qb, qm);
    if (rbase)
        munmap(rbase, rm);
}

int main(int argc, char **argv)
{
    bool worst = getenv("STRESS_WORST") && atoi(getenv("STRESS_WORST"));
    int streams = getenv("STRESS_STREAMS") ? atoi(getenv("STRESS_STREAMS")) : -1;
    int weave = getenv("STRESS_WEAVE") ? atoi(getenv("STRESS_WEAVE")) : -1;
    if (streams >= 0 || weave >= 0)
        kt__lf_set_streams_avx2(streams >= 0 ? streams : 0, weave >= 0 ? weave : 1);
    static const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 17, 64};
    const int nM = sizeof Ms / sizeof *Ms;
    for (size_t ti = 0; ti < sizeof all / sizeof *all; ti++) {
        kt_type t = all[ti];
        if (argc > 1) {
            bool want = false;
            for (int a = 1; a < argc; a++)
                want |= !strcmp(argv[a], kt__ggml_traits(t)->name);
            if (!want)
                continue;
        }
        bool kq = kt__ggml_traits(t)->block_size == 256;
        /* (N, K, n0, n1, k0) */
        static const int s32[][5] = {{1, 32, 0, 1, 0},      {5, 64, 0, 5, 0},
                                     {7, 96, 0, 7, 0},      {9, 160, 1, 9, 0},
                                     {13, 416, 0, 13, 0},   {16, 544, 0, 16, 0},
                                     {37, 1472, 3, 35, 0},  {37, 1280, 5, 37, 256},
                                     {64, 2048, 0, 64, 0},  {21, 736, 0, 21, 512},
                                     {17, 2080, 4, 17, 0},  {40, 1536, 0, 40, 1024}};
        static const int s256[][5] = {{1, 256, 0, 1, 0},     {5, 512, 0, 5, 0},
                                      {13, 768, 0, 13, 0},   {37, 1280, 3, 35, 0},
                                      {37, 1280, 5, 37, 256}, {64, 2048, 0, 64, 0},
                                      {9, 2304, 1, 9, 0},    {21, 2560, 0, 21, 512},
                                      {17, 768, 4, 17, 256}};
        int ns = kq ? (int)(sizeof s256 / sizeof *s256) : (int)(sizeof s32 / sizeof *s32);
        for (int si = 0; si < ns; si++) {
            const int *s = kq ? s256[si] : s32[si];
            for (int rp = 0; rp <= 1; rp++)
                shape(t, s[0], s[1], s[2], s[3], s[4], Ms, nM, worst, rp);
        }
    }
    printf("stress: %d runs, %d failed\n", runs, fails);
    return fails != 0;
}
