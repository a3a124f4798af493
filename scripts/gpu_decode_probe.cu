/* Decode MoE kernels of cuda/ops.cu timed alone on the GPU, against reads of the
 * same bytes (what the access pattern allows), for Qwen3-30B-A3B's shapes
 * (H 2048, I 768, 128 experts, top 8, BF16): 4 layers of 128 experts in
 * separate allocations (as lib/gpu uploads them), each timed call on another
 * layer and 8 other random experts, so L2 (60 MB) holds nothing of it.
 *   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Icuda \
 *        scripts/gpu_decode_probe.cu cuda/attn_mma.cu -lcublas -o gpu_decode_probe &&
 *   ./gpu_decode_probe
 * Each row: microseconds a call (the median of 7 replays of a CUDA graph of 64
 * calls), and the bytes over that time. `./gpu_decode_probe wide` adds
 * Qwen3-235B-A22B's (4096 x 1536) and DeepSeek-V3's (7168 x 2048) expert shapes
 * (KT_GPU_GEMV bit 2048). Not part of the build: a probe for the device runs
 * (docs/performance.md, "GPU decode"). */
#include "../cuda/ops.cu"

#include <algorithm>
#include <vector>

#define PH 2048
#define PI 768
#define PE 128
#define PK 8
#define PL 4
#define CALLS 64

#define PCK(x)                                                                                 \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                           \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* the down_p pattern: warp per output row c, lanes over the (expert, chunk) pairs */
__global__ void k_read_rowwise(const kt__cuda_mat *down, const int32_t *ids, int32_t H,
                               int32_t I, unsigned *sink)
{
    const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t c = blockIdx.x * 8 + warp, chunks = I / 8, total = PK * chunks;
    uint32_t x = 0;
    for (int32_t q = lane; q < total; q += 32 * 24) {
        uint4 r[24];
#pragma unroll
        for (int u = 0; u < 24; u++) {
            int32_t qq = min(q + 32 * u, total - 1), j = qq / chunks, i = 8 * (qq % chunks);
            const kt__cuda_mat &D = down[ids[j]];
            r[u] = __ldg((const uint4 *)((const uint16_t *)D.data + (size_t)c * I + i));
        }
#pragma unroll
        for (int u = 0; u < 24; u++)
            x ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
    }
    if (x == 0x9e3779b9u)
        *sink = x;
}

/* contiguous: warp per (expert, 8 rows) */
__global__ void k_read_expert(const kt__cuda_mat *down, const int32_t *ids, int32_t H, int32_t I,
                              unsigned *sink)
{
    const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = blockIdx.x * 8;
    const kt__cuda_mat &D = down[ids[warp]];
    const uint4 *p = (const uint4 *)D.data;
    const int32_t n16 = I / 8;
    uint4 r[8][3];
#pragma unroll
    for (int a = 0; a < 8; a++)
#pragma unroll
        for (int m = 0; m < 3; m++)
            r[a][m] = __ldg(p + (size_t)(r0 + a) * n16 + min(lane + 32 * m, n16 - 1));
    uint32_t x = 0;
#pragma unroll
    for (int a = 0; a < 8; a++)
#pragma unroll
        for (int m = 0; m < 3; m++)
            x ^= r[a][m].x ^ r[a][m].y ^ r[a][m].z ^ r[a][m].w;
    if (x == 0x9e3779b9u)
        *sink = x;
}

/* one flat buffer, 16 loads a thread in flight, grid-stride */
__global__ void k_read_flat(const uint4 *p, size_t n16, unsigned *sink)
{
    uint32_t x = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x * 16;
    for (size_t i0 = (size_t)blockIdx.x * blockDim.x * 16 + threadIdx.x; i0 < n16; i0 += stride) {
        uint4 r[16];
#pragma unroll
        for (int u = 0; u < 16; u++)
            r[u] = __ldg(p + min(i0 + (size_t)u * blockDim.x, n16 - 1));
#pragma unroll
        for (int u = 0; u < 16; u++)
            x ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
    }
    if (x == 0x9e3779b9u)
        *sink = x;
}

struct probe {
    kt__cuda_rt *rt;
    kt__cuda_mat *gate[PL], *up[PL], *down[PL]; /* device tables */
    int32_t *ids;                               /* [CALLS][PK] */
    float *w, *x, *h, *out, *res, *xn, *nw;
    unsigned *sink;
    uint16_t *flat;
    cudaStream_t s;
};

static void fill(probe &P, void *p, size_t n, uint32_t seed)
{
    k_fill_bf16<<<(unsigned)((n + 255) / 256), 256, 0, P.s>>>((uint16_t *)p, n, seed);
}

static kt__cuda_mat bf16_mat(probe &P, int32_t rows, int32_t cols, uint32_t seed)
{
    kt__cuda_mat m;
    memset(&m, 0, sizeof m);
    size_t n = (size_t)rows * cols;
    void *d;
    PCK(cudaMalloc(&d, (2 * n + 255) & ~(size_t)255));
    fill(P, d, n, seed);
    m.data = d;
    m.rows = rows, m.cols = cols, m.type = KT__CUDA_W_BF16;
    return m;
}

/* median microseconds a call of fn(call) over a graph of CALLS calls */
template <typename F> static double time_calls(probe &P, F fn)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    PCK(cudaStreamBeginCapture(P.s, cudaStreamCaptureModeGlobal));
    for (int c = 0; c < CALLS; c++)
        fn(c);
    PCK(cudaStreamEndCapture(P.s, &g));
    PCK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    PCK(cudaEventCreate(&a));
    PCK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < 8; r++) {
        PCK(cudaEventRecord(a, P.s));
        PCK(cudaGraphLaunch(ge, P.s));
        PCK(cudaEventRecord(b, P.s));
        PCK(cudaEventSynchronize(b));
        float t;
        PCK(cudaEventElapsedTime(&t, a, b));
        if (r > 0)
            ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 1000.0 * ms[ms.size() / 2] / CALLS;
}

static void row(const char *name, double us, double mb)
{
    printf("%-44s %8.2f us  %7.1f MB  %6.0f GB/s\n", name, us, mb, mb * 1e-3 / (us * 1e-6));
}

static kt__cuda_experts_args args(probe &P, int c)
{
    kt__cuda_experts_args a;
    memset(&a, 0, sizeof a);
    int l = c % PL;
    a.gate = P.gate[l], a.up = P.up[l], a.down = P.down[l];
    a.x = P.x, a.ids = P.ids + c * PK, a.w = P.w, a.h = P.h, a.out = P.out;
    a.T = 1, a.H = PH, a.I = PI, a.k = PK, a.oai = 0, a.alpha = 0, a.limit = 0;
    a.vec8 = 1, a.assign = 1;
    a.res = P.res, a.res_norm = P.xn, a.norm_w = P.nw, a.eps = 1e-6f;
    return a;
}

/* CALLS sets of PK distinct experts of E */
static std::vector<int32_t> random_ids(int E, uint32_t rng)
{
    std::vector<int32_t> id(CALLS * PK);
    for (int c = 0; c < CALLS; c++)
        for (int j = 0; j < PK; j++) {
            bool dup;
            do {
                rng = rng * 1664525u + 1013904223u;
                id[c * PK + j] = (int32_t)(rng >> 8) % E;
                dup = false;
                for (int i = 0; i < j; i++)
                    dup |= id[c * PK + i] == id[c * PK + j];
            } while (dup);
        }
    return id;
}

static const float probe_w[PK] = {0.3f, 0.2f, 0.15f, 0.1f, 0.1f, 0.07f, 0.05f, 0.03f};

/* Σ_j probe_w[j] down_j · h_j in double on the host, down_j's data at dev[j]
 * (BF16 [H][I]), h [PK][I] */
static std::vector<double> down_ref(const void *const dev[PK], const std::vector<float> &h,
                                    int32_t H, int32_t I)
{
    std::vector<double> ref(H, 0.0);
    std::vector<uint16_t> wd((size_t)H * I);
    for (int j = 0; j < PK; j++) {
        PCK(cudaMemcpy(wd.data(), dev[j], 2 * wd.size(), cudaMemcpyDeviceToHost));
        for (int c = 0; c < H; c++) {
            double d = 0;
            for (int i = 0; i < I; i++) {
                uint32_t b = (uint32_t)wd[(size_t)c * I + i] << 16;
                float f;
                memcpy(&f, &b, 4);
                d += (double)f * h[(size_t)j * I + i];
            }
            ref[c] += probe_w[j] * d;
        }
    }
    return ref;
}

/* Wider experts (GEMV_DOWNW_WIDE: k_expert_down_w at 4 or 3 rows a warp): 16
 * experts of H x I in separate allocations, 8 random ones a call (their down
 * matrices alone are 2-4 L2s); the down product against a double sum, then up +
 * down a call with 863 (k_expert_down_p or k_expert_down8) and 863 + 2048 */
static void wide_probe(probe &P, int32_t H, int32_t I)
{
    const int E = 16;
    std::vector<kt__cuda_mat> hg(E), hu(E), hd(E);
    for (int e = 0; e < E; e++) {
        hg[e] = bf16_mat(P, I, H, 5000 + 3 * e);
        hu[e] = bf16_mat(P, I, H, 5001 + 3 * e);
        hd[e] = bf16_mat(P, H, I, 5002 + 3 * e);
    }
    kt__cuda_mat *tg, *tu, *td;
    size_t tb = sizeof(kt__cuda_mat) * E;
    PCK(cudaMalloc(&tg, tb));
    PCK(cudaMalloc(&tu, tb));
    PCK(cudaMalloc(&td, tb));
    PCK(cudaMemcpy(tg, hg.data(), tb, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(tu, hu.data(), tb, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(td, hd.data(), tb, cudaMemcpyHostToDevice));
    const std::vector<int32_t> hid = random_ids(E, 777);
    int32_t *ids;
    float *x, *h, *out, *res, *xn, *nw;
    PCK(cudaMalloc(&ids, sizeof(int32_t) * CALLS * PK));
    PCK(cudaMemcpy(ids, hid.data(), sizeof(int32_t) * CALLS * PK, cudaMemcpyHostToDevice));
    std::vector<float> hx(H), hn(H, 1.0f);
    for (int i = 0; i < H; i++)
        hx[i] = 0.01f * (float)((i * 37) % 101 - 50);
    PCK(cudaMalloc(&x, 4 * (size_t)H));
    PCK(cudaMalloc(&res, 4 * (size_t)H));
    PCK(cudaMalloc(&xn, 4 * (size_t)H));
    PCK(cudaMalloc(&nw, 4 * (size_t)H));
    PCK(cudaMalloc(&out, 4 * (size_t)H));
    PCK(cudaMalloc(&h, 4 * (size_t)PK * I));
    PCK(cudaMemcpy(x, hx.data(), 4 * (size_t)H, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(res, hx.data(), 4 * (size_t)H, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(nw, hn.data(), 4 * (size_t)H, cudaMemcpyHostToDevice));
    auto wargs = [&](int c) {
        kt__cuda_experts_args a;
        memset(&a, 0, sizeof a);
        a.gate = tg, a.up = tu, a.down = td, a.x = x, a.ids = ids + c * PK, a.w = P.w;
        a.h = h, a.out = out, a.T = 1, a.H = H, a.I = I, a.k = PK, a.vec8 = 1, a.assign = 1;
        a.res = res, a.res_norm = xn, a.norm_w = nw, a.eps = 1e-6f;
        return a;
    };
    const int modes[2] = {351 | GEMV_DOWNW, 351 | GEMV_DOWNW | GEMV_DOWNW_WIDE};
    std::vector<float> o(H), hh((size_t)PK * I);
    const void *dev[PK];
    for (int j = 0; j < PK; j++)
        dev[j] = hd[hid[j]].data;
    for (int mode : modes) {
        P.rt->gemv = mode;
        kt__cuda_experts_args a = wargs(0);
        kt__cuda_experts(P.rt, &a);
        flush_pending(P.rt);
        PCK(cudaMemcpyAsync(o.data(), out, 4 * (size_t)H, cudaMemcpyDeviceToHost, P.s));
        PCK(cudaMemcpyAsync(hh.data(), h, 4 * hh.size(), cudaMemcpyDeviceToHost, P.s));
        PCK(cudaStreamSynchronize(P.s));
        const std::vector<double> ref = down_ref(dev, hh, H, I);
        double err = 0, mag = 0;
        for (int c = 0; c < H; c++) {
            mag = std::max(mag, fabs(ref[c]));
            err = std::max(err, fabs(o[c] - ref[c]));
        }
        printf("# H %d, I %d, gemv %d: down product vs double max|err| %.3g (|out| up to %.3g)\n",
               H, I, mode, err, mag);
    }
    const double mb = 3.0 * PK * I * H * 2 / 1e6;
    for (int rep = 0; rep < 2; rep++)
        for (int mode : modes) {
            P.rt->gemv = mode;
            char name[64];
            snprintf(name, sizeof name, "H %d I %d up+down, gemv %d", H, I, mode);
            row(name, time_calls(P, [&](int c) {
                    kt__cuda_experts_args a = wargs(c);
                    kt__cuda_experts(P.rt, &a);
                    flush_pending(P.rt);
                }), mb);
        }
    for (int e = 0; e < E; e++) {
        cudaFree((void *)hg[e].data);
        cudaFree((void *)hu[e].data);
        cudaFree((void *)hd[e].data);
    }
    cudaFree(tg), cudaFree(tu), cudaFree(td), cudaFree(ids), cudaFree(x), cudaFree(res);
    cudaFree(xn), cudaFree(nw), cudaFree(out), cudaFree(h);
}

/* The router (128 x 2048 BF16, softmax, top 8 renormed; another of 4 layers'
 * copies a call) followed by the expert products it chose, as a decode layer
 * runs them: GEMV_ROUTE_UP (the top-k in the expert kernels) and
 * GEMV_ROUTE_RANK (the router's last block selecting by ranks) against the
 * last block's k warp rounds; the chosen ids and the down product of one call
 * compared */
static void route_probe(probe &P, double mb)
{
    kt__cuda_mat wr[PL];
    for (int l = 0; l < PL; l++)
        wr[l] = bf16_mat(P, PE, PH, 700 + l);
    float *lg, *rw;
    int32_t *rid;
    PCK(cudaMalloc(&lg, 4 * PE));
    PCK(cudaMalloc(&rw, 4 * PK));
    PCK(cudaMalloc(&rid, 4 * PK));
    kt__cuda_router_desc r = {KT__CUDA_ROUTER_SOFTMAX_TOPK, PE, PK, 0, 0, 1, 1.0f, NULL, 1};
    auto call = [&](int c) {
        kt__cuda_router_gemv(P.rt, &r, P.x, &wr[c % PL], NULL, lg, 1, rid, rw);
        kt__cuda_experts_args a = args(P, c);
        a.ids = rid, a.w = rw;
        kt__cuda_experts(P.rt, &a);
        flush_pending(P.rt);
    };
    const int s7 = GEMV_DEFAULT & ~(GEMV_ROUTE_UP | GEMV_ROUTE_RANK); /* 863 */
    const int modes[3] = {s7, s7 | GEMV_ROUTE_UP, s7 | GEMV_ROUTE_RANK};
    std::vector<float> o[3];
    std::vector<int32_t> id[3];
    for (int m = 0; m < 3; m++) {
        P.rt->pdl = 1;
        P.rt->gemv = modes[m];
        call(1);
        o[m].resize(PH), id[m].resize(PK);
        PCK(cudaMemcpyAsync(o[m].data(), P.out, 4 * PH, cudaMemcpyDeviceToHost, P.s));
        PCK(cudaMemcpyAsync(id[m].data(), rid, 4 * PK, cudaMemcpyDeviceToHost, P.s));
        PCK(cudaStreamSynchronize(P.s));
    }
    for (int m = 1; m < 3; m++) {
        double d = 0;
        for (int c = 0; c < PH; c++)
            d = std::max(d, (double)fabsf(o[0][c] - o[m][c]));
        printf("# router + experts, gemv %d vs %d: ids %s, down product max|diff| %.3g\n",
               modes[m], modes[0], id[0] == id[m] ? "equal" : "DIFFER", d);
    }
    for (int rep = 0; rep < 2; rep++)
        for (int mode : modes) {
            P.rt->gemv = mode;
            char name[64];
            snprintf(name, sizeof name, "router + up + down, gemv %d", mode);
            row(name, time_calls(P, call), mb + PE * PH * 2 / 1e6);
        }
    for (int l = 0; l < PL; l++)
        cudaFree((void *)wr[l].data);
    cudaFree(lg), cudaFree(rw), cudaFree(rid);
}

/* One decode layer's attention part for Qwen3's shapes after 2048 positions
 * (32 query heads, 4 kv heads of 128, F32 KV cache of 2560 rows, another of
 * the 4 layers' weights and caches a call): q / k / v with the pending norm,
 * the split attention with the q / k norm, RoPE and cache rows in it, merge,
 * the output product adding into the residual (its norm left pending), as
 * lib/gpu queues them. Rows: the whole part, the part without the attention
 * call (what the attention adds), the attention alone. */
static void attn_probe(probe &P, const kt__cuda_mat *wq, const kt__cuda_mat *wk,
                       const kt__cuda_mat *wv, const kt__cuda_mat *wo)
{
    const int32_t NH = 32, NKV = 4, HD = 128, QD = NH * HD, KVD = NKV * HD, CTX = 2560;
    float *q, *k, *v, *o, *qn, *kn, *freq, *work, *kc[PL], *vc[PL];
    int32_t *pos;
    const size_t work_n = as_po_off(1, NH, KT__CUDA_ATTN_SPLITS) +
                          (size_t)NH * KT__CUDA_ATTN_SPLITS * HD;
    PCK(cudaMalloc(&q, 4 * QD));
    PCK(cudaMalloc(&k, 4 * KVD));
    PCK(cudaMalloc(&v, 4 * KVD));
    PCK(cudaMalloc(&o, 4 * QD));
    PCK(cudaMalloc(&qn, 4 * HD));
    PCK(cudaMalloc(&kn, 4 * HD));
    PCK(cudaMalloc(&freq, 4 * HD / 2));
    PCK(cudaMalloc(&work, 4 * work_n));
    PCK(cudaMalloc(&pos, 4 * 2));
    for (int l = 0; l < PL; l++) {
        PCK(cudaMalloc(&kc[l], 4 * (size_t)CTX * KVD));
        PCK(cudaMalloc(&vc[l], 4 * (size_t)CTX * KVD));
        PCK(cudaMemset(kc[l], 0, 4 * (size_t)CTX * KVD));
        PCK(cudaMemset(vc[l], 0, 4 * (size_t)CTX * KVD));
    }
    std::vector<float> ones(HD, 1.0f), fr(HD / 2);
    for (int i = 0; i < HD / 2; i++)
        fr[i] = powf(1e6f, -2.0f * i / HD);
    const int32_t hp[2] = {2048, 1};
    PCK(cudaMemcpy(qn, ones.data(), 4 * HD, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(kn, ones.data(), 4 * HD, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(freq, fr.data(), 4 * HD / 2, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(pos, hp, sizeof hp, cudaMemcpyHostToDevice));
    bool attend = true, qkv_o = true;
    int32_t splits = 0; /* 0: the device's count (64 on 132 multiprocessors) */
    auto call = [&](int c) {
        const int l = c % PL;
        if (qkv_o) {
            const kt__cuda_mat *W[3] = {&wq[l], &wk[l], &wv[l]};
            const float *b[3] = {NULL, NULL, NULL};
            float *y[3] = {q, k, v};
            const int32_t ys[3] = {QD, KVD, KVD};
            kt__cuda_qk_post p = {q, k, v, 1, NH, NKV, HD, QD, KVD, qn, kn, 1e-6f, 1.0f, HD, 0,
                                  freq, pos, kc[l], vc[l]};
            if (kt__cuda_qkv_post(P.rt, P.xn, 1, PH, W, b, y, ys, &p))
                kt__cuda_qk_post_run(P.rt, &p);
        }
        if (attend) {
            kt__cuda_attn a;
            memset(&a, 0, sizeof a);
            a.q = q, a.T = 1, a.n_head = NH, a.q_st = QD, a.q_sh = HD;
            a.ka = kc[l], a.ka_dim = HD, a.ka_sp = KVD, a.ka_sh = HD, a.group = NH / NKV;
            a.v = vc[l], a.v_dim = HD, a.v_sp = KVD, a.v_sh = HD;
            a.o = o, a.o_st = QD, a.o_sh = HD, a.scale = 1.0f / sqrtf((float)HD), a.pos0 = pos;
            a.work = work, a.work_elems = work_n, a.rows_final = 1, a.splits = splits;
            char err[128];
            kt__cuda_attention(P.rt, &a, CTX, err, sizeof err);
        }
        if (qkv_o)
            kt__cuda_linear_add_norm(P.rt, o, 1, QD, &wo[l], NULL, P.out, P.res, P.xn, P.nw,
                                     1e-6f);
    };
    auto timed = [&](const char *what, int gemv) {
        P.rt->gemv = gemv;
        char name[80];
        snprintf(name, sizeof name, "%s, gemv %d", what, gemv);
        row(name, time_calls(P, [&](int c) {
                call(c);
                if (c == CALLS - 1)
                    flush_pending(P.rt);
            }), (attend ? 2049.0 * KVD * 4 * 2 : 0.0) / 1e6 +
                    (qkv_o ? ((double)(QD + 2 * KVD) * PH + (double)PH * QD) * 2 / 1e6 : 0.0));
    };
    P.rt->pdl = 1;
    for (int rep = 0; rep < 2; rep++) {
        attend = true, qkv_o = true;
        timed("q/k/v + attention + output", GEMV_DEFAULT);
        attend = false;
        timed("q/k/v + output (no attention)", GEMV_DEFAULT);
        attend = true, qkv_o = false;
        timed("attention alone (split + merge)", GEMV_DEFAULT);
        attend = true, qkv_o = true;
    }
    /* which part of the attention's chain costs (not yet run on a device) */
    for (int32_t sp : {32, 16}) {
        splits = sp;
        char what[64];
        snprintf(what, sizeof what, "q/k/v + attention + output, %d splits", sp);
        timed(what, GEMV_DEFAULT);
    }
    splits = 0;
    timed("... no early tile, no L2 prefetch", GEMV_DEFAULT & ~(GEMV_ATTN | GEMV_ATTN_EARLY));
    timed("... q / k post as a launch of its own", GEMV_DEFAULT & ~GEMV_QK_ATTN);
    P.rt->fuse |= FUSE_ATTN_MERGE;
    timed("... merge in the last split blocks", GEMV_DEFAULT);
    P.rt->fuse &= ~FUSE_ATTN_MERGE;
    qkv_o = false;
    P.rt->skip = SKIP_MERGE;
    timed("split attention alone", GEMV_DEFAULT);
    P.rt->skip = SKIP_SPLIT;
    timed("merge alone", GEMV_DEFAULT);
    P.rt->skip = 0;
    P.rt->gemv = 351;
    PCK(cudaDeviceSynchronize());
    for (int l = 0; l < PL; l++)
        cudaFree(kc[l]), cudaFree(vc[l]);
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(qn), cudaFree(kn);
    cudaFree(freq), cudaFree(work), cudaFree(pos);
}

int main(int argc, char **argv)
{
    probe P;
    char err[256];
    if (kt__cuda_rt_create(&P.rt, 0, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    P.s = P.rt->stream;
    std::vector<kt__cuda_mat> hg(PE), hu(PE), hd(PE);
    for (int l = 0; l < PL; l++) {
        for (int e = 0; e < PE; e++) {
            hg[e] = bf16_mat(P, PI, PH, 3 * (l * PE + e) + 1);
            hu[e] = bf16_mat(P, PI, PH, 3 * (l * PE + e) + 2);
            hd[e] = bf16_mat(P, PH, PI, 3 * (l * PE + e) + 3);
        }
        size_t tb = sizeof(kt__cuda_mat) * PE;
        PCK(cudaMalloc(&P.gate[l], tb));
        PCK(cudaMalloc(&P.up[l], tb));
        PCK(cudaMalloc(&P.down[l], tb));
        PCK(cudaMemcpy(P.gate[l], hg.data(), tb, cudaMemcpyHostToDevice));
        PCK(cudaMemcpy(P.up[l], hu.data(), tb, cudaMemcpyHostToDevice));
        PCK(cudaMemcpy(P.down[l], hd.data(), tb, cudaMemcpyHostToDevice));
    }
    const std::vector<int32_t> hid = random_ids(PE, 12345);
    PCK(cudaMalloc(&P.ids, sizeof(int32_t) * CALLS * PK));
    PCK(cudaMemcpy(P.ids, hid.data(), sizeof(int32_t) * CALLS * PK, cudaMemcpyHostToDevice));
    std::vector<float> hx(PH, 0.0f), hn(PH, 1.0f);
    for (int i = 0; i < PH; i++)
        hx[i] = 0.01f * (float)((i * 37) % 101 - 50);
    PCK(cudaMalloc(&P.w, sizeof probe_w));
    PCK(cudaMemcpy(P.w, probe_w, sizeof probe_w, cudaMemcpyHostToDevice));
    PCK(cudaMalloc(&P.x, 4 * PH));
    PCK(cudaMalloc(&P.nw, 4 * PH));
    PCK(cudaMalloc(&P.xn, 4 * PH));
    PCK(cudaMalloc(&P.res, 4 * PH));
    PCK(cudaMalloc(&P.out, 4 * PH));
    PCK(cudaMalloc(&P.h, 4 * PK * PI));
    PCK(cudaMalloc(&P.sink, 4));
    PCK(cudaMemcpy(P.x, hx.data(), 4 * PH, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(P.nw, hn.data(), 4 * PH, cudaMemcpyHostToDevice));
    PCK(cudaMemcpy(P.res, hx.data(), 4 * PH, cudaMemcpyHostToDevice));
    const size_t flat_n = (size_t)PL * 75 * 1024 * 1024 / 2;
    PCK(cudaMalloc(&P.flat, 2 * flat_n));
    fill(P, P.flat, flat_n, 7);
    PCK(cudaStreamSynchronize(P.s));
    const double up_mb = 2.0 * PK * PI * PH * 2 / 1e6, down_mb = 1.0 * PK * PI * PH * 2 / 1e6;
    printf("# H %d, I %d, %d of %d experts, %d layers of separate allocations; %d SMs\n", PH, PI,
           PK, PE, PL, P.rt->sms);

    /* correctness: call 0's down product by both kernels against a double
     * sum on the host over the device's h */
    {
        kt__cuda_experts_args a = args(P, 0);
        P.rt->gemv = 351; /* k_expert_down_p */
        kt__cuda_experts(P.rt, &a);
        flush_pending(P.rt);
        std::vector<float> o1(PH), o2(PH), hh(PK * PI);
        PCK(cudaMemcpyAsync(o1.data(), P.out, 4 * PH, cudaMemcpyDeviceToHost, P.s));
        k_expert_down_w<DOWNW_ROWS, 3><<<PH / DOWNW_ROWS, DOWN8_THREADS, 0, P.s>>>(
            a.down, a.ids, a.w, PK, a.h, PH, a.out, 1, (float *)NULL, route_in{});
        PCK(cudaMemcpyAsync(o2.data(), P.out, 4 * PH, cudaMemcpyDeviceToHost, P.s));
        PCK(cudaMemcpyAsync(hh.data(), P.h, 4 * PK * PI, cudaMemcpyDeviceToHost, P.s));
        PCK(cudaStreamSynchronize(P.s));
        double e1 = 0, e2 = 0, mag = 0;
        const void *dev[PK];
        for (int j = 0; j < PK; j++) {
            kt__cuda_mat m;
            PCK(cudaMemcpy(&m, P.down[0] + hid[j], sizeof m, cudaMemcpyDeviceToHost));
            dev[j] = m.data;
        }
        const std::vector<double> ref = down_ref(dev, hh, PH, PI);
        for (int c = 0; c < PH; c++) {
            mag = std::max(mag, fabs(ref[c]));
            e1 = std::max(e1, fabs(o1[c] - ref[c]));
            e2 = std::max(e2, fabs(o2[c] - ref[c]));
        }
        printf("# down product vs double: down_p max|err| %.3g, down_w %.3g (|out| up to %.3g)\n",
               e1, e2, mag);
    }

    /* reads alone: the floor each pattern allows */
    const unsigned fb = 132 * 4;
    for (double mb : {down_mb, up_mb, up_mb + down_mb}) {
        size_t n16 = (size_t)(mb * 1e6 / 16);
        double us = time_calls(P, [&](int c) {
            const uint4 *p = (const uint4 *)P.flat + (size_t)(c % PL) * (75u << 20) / 16;
            k_read_flat<<<fb, 256, 0, P.s>>>(p, n16, P.sink);
        });
        char name[64];
        snprintf(name, sizeof name, "read flat %.0f MB", mb);
        row(name, us, mb);
    }
    row("read down, warp per row (down_p pattern)", time_calls(P, [&](int c) {
            k_read_rowwise<<<PH / 8, 256, 0, P.s>>>(P.down[c % PL], P.ids + c * PK, PH, PI,
                                                    P.sink);
        }), down_mb);
    row("read down, warp per (expert, 8 rows)", time_calls(P, [&](int c) {
            k_read_expert<<<PH / 8, 256, 0, P.s>>>(P.down[c % PL], P.ids + c * PK, PH, PI,
                                                   P.sink);
        }), down_mb);

    /* the library's expert products, up + down a call, by KT_GPU_GEMV mode */
    const int modes[] = {351, 351 | GEMV_DOWNW, 351 | GEMV_DOWNW | GEMV_UP1, 0};
    for (int pdl = 1; pdl >= 0; pdl--) {
        P.rt->pdl = pdl;
        for (int mode : modes) {
            P.rt->gemv = mode;
            char name[64];
            snprintf(name, sizeof name, "experts up+down, gemv %d, pdl %d", mode, pdl);
            row(name, time_calls(P, [&](int c) {
                    kt__cuda_experts_args a = args(P, c);
                    kt__cuda_experts(P.rt, &a);
                    flush_pending(P.rt);
                }), up_mb + down_mb);
        }
    }
    route_probe(P, up_mb + down_mb);
    /* the attention's products of one token: q / k / v in one launch (5120 x
     * 2048), the output (2048 x 4096), each on another of 4 layers' copies */
    {
        P.rt->pdl = 1;
        P.rt->gemv = 351;
        kt__cuda_mat wq[PL], wk[PL], wv[PL], wo[PL];
        for (int l = 0; l < PL; l++) {
            wq[l] = bf16_mat(P, 4096, PH, 900 + l);
            wk[l] = bf16_mat(P, 512, PH, 910 + l);
            wv[l] = bf16_mat(P, 512, PH, 920 + l);
            wo[l] = bf16_mat(P, PH, 4096, 930 + l);
        }
        float *xa, *yq, *yk, *yv, *yo;
        PCK(cudaMalloc(&xa, 4 * 4096));
        PCK(cudaMalloc(&yq, 4 * 4096));
        PCK(cudaMalloc(&yk, 4 * 512));
        PCK(cudaMalloc(&yv, 4 * 512));
        PCK(cudaMalloc(&yo, 4 * PH));
        PCK(cudaMemcpy(xa, P.h, 4 * 4096, cudaMemcpyDeviceToDevice));
        PCK(cudaStreamSynchronize(P.s));
        for (int mode : {351, 351 | GEMV_QKV2}) {
            P.rt->gemv = mode;
            char name[64];
            snprintf(name, sizeof name, "q/k/v one launch (21 MB), gemv %d", mode);
            row(name, time_calls(P, [&](int c) {
                    const kt__cuda_mat *W[3] = {&wq[c % PL], &wk[c % PL], &wv[c % PL]};
                    const float *b[3] = {NULL, NULL, NULL};
                    float *y[3] = {yq, yk, yv};
                    const int32_t ys[3] = {4096, 512, 512};
                    kt__cuda_linear_n(P.rt, P.x, 1, PH, 3, W, b, y, ys);
                }), 5120.0 * PH * 2 / 1e6);
        }
        /* the two kernels' q rows against each other */
        std::vector<float> q1(4096), q2(4096);
        for (int mode : {351, 351 | GEMV_QKV2}) {
            P.rt->gemv = mode;
            const kt__cuda_mat *W[3] = {&wq[0], &wk[0], &wv[0]};
            const float *b[3] = {NULL, NULL, NULL};
            float *y[3] = {yq, yk, yv};
            const int32_t ys[3] = {4096, 512, 512};
            kt__cuda_linear_n(P.rt, P.x, 1, PH, 3, W, b, y, ys);
            PCK(cudaMemcpyAsync(mode == 351 ? q1.data() : q2.data(), yq, 4 * 4096,
                                cudaMemcpyDeviceToHost, P.s));
            PCK(cudaStreamSynchronize(P.s));
        }
        double dq = 0;
        for (int i = 0; i < 4096; i++)
            dq = std::max(dq, (double)fabsf(q1[i] - q2[i]));
        printf("# q rows, two rows a warp vs one: max|diff| %.3g\n", dq);
        P.rt->gemv = 351;
        row("output product (16.8 MB), pdl 1", time_calls(P, [&](int c) {
                kt__cuda_linear(P.rt, xa, 1, 4096, &wo[c % PL], NULL, yo, PH, 0);
            }), 2048.0 * 4096 * 2 / 1e6);
        attn_probe(P, wq, wk, wv, wo);
    }

    /* each product alone (no PDL overlap between calls) */
    P.rt->pdl = 0;
    size_t xs = 4 * PH, hs = 4 * PK * PI;
    int upb = upp_blocks(P.rt, xs);
    row("up alone (k_expert_up_p)", time_calls(P, [&](int c) {
            kt__cuda_experts_args a = args(P, c);
            k_expert_up_p<<<upb * P.rt->sms, UPP_THREADS, xs, P.s>>>(
                a.gate, a.up, a.down, a.x, PH, (int32_t *)a.ids, PK, PI, a.h, 0, 0.0f, 0.0f, 0,
                route_in{}, (float *)NULL);
        }), up_mb);
    norm_tail nt;
    memset(&nt, 0, sizeof nt);
    row("down alone (k_expert_down_p)", time_calls(P, [&](int c) {
            kt__cuda_experts_args a = args(P, c);
            k_expert_down_p<<<PH / 8, DOWN8_THREADS, hs, P.s>>>(a.down, a.ids, a.w, PK, PI,
                                                                 a.h, PH, a.out, 1, nt, a.res);
        }), down_mb);
    row("down alone (k_expert_down_w)", time_calls(P, [&](int c) {
            kt__cuda_experts_args a = args(P, c);
            k_expert_down_w<DOWNW_ROWS, 3><<<PH / DOWNW_ROWS, DOWN8_THREADS, 0, P.s>>>(
                a.down, a.ids, a.w, PK, a.h, PH, a.out, 1, a.res, route_in{});
        }), down_mb);
    PCK(cudaDeviceSynchronize());
    printf("# upp_blocks %d a multiprocessor\n", upb);
    /* "wide": Qwen3-235B-A22B's and DeepSeek-V3's expert shapes too */
    if (argc > 1 && !strcmp(argv[1], "wide")) {
        P.rt->pdl = 1;
        wide_probe(P, 4096, 1536);
        wide_probe(P, 7168, 2048);
        PCK(cudaDeviceSynchronize());
    }
    return 0;
}
