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


/* ---------------------------------------------------------------------------
 * The GPU forward's runtime and kernels (cuda/ops.cu). One kt__cuda_rt is a
 * device and a stream; every launch below is asynchronous on that stream and
 * returns 0 (launch errors surface at kt__cuda_check / kt__cuda_sync). Device
 * pointers are plain void* / float*. Not thread-safe: one thread per runtime
 * (host functions run on CUDA's own thread).
 */
typedef struct kt__cuda_rt kt__cuda_rt;

int kt__cuda_rt_create(kt__cuda_rt **out, int32_t device, char *err, size_t err_size);
void kt__cuda_rt_free(kt__cuda_rt *rt);
int kt__cuda_mem_info(kt__cuda_rt *rt, uint64_t *free_bytes, uint64_t *total_bytes);
void *kt__cuda_alloc(kt__cuda_rt *rt, size_t bytes);   /* device memory; NULL on failure */
void kt__cuda_free(kt__cuda_rt *rt, void *p);
void *kt__cuda_host_alloc(size_t bytes);                /* pinned host memory            */
void kt__cuda_host_free(void *p);
/* synchronous host -> device copy */
int kt__cuda_upload(kt__cuda_rt *rt, void *dst, const void *src, size_t bytes, char *err,
                    size_t err_size);
/* stream-ordered copy in any direction (host side pinned) */
int kt__cuda_copy_async(kt__cuda_rt *rt, void *dst, const void *src, size_t bytes);
/* Layerwise prefill: copies on a side stream into two slots of device memory,
 * ordered against the main stream by events. kt__cuda_side_enable creates the
 * stream and events (once); kt__cuda_side_copy queues a host -> device copy
 * on the side stream; kt__cuda_side_fence(slot, what): the side stream waits
 * until the main stream freed the slot / marks the slot copied, or the main
 * stream waits for the slot's copy / marks the slot free again. */
enum { KT__CUDA_SIDE_WAIT_FREED = 0, KT__CUDA_SIDE_COPIED = 1, KT__CUDA_MAIN_WAIT_COPIED = 2,
       KT__CUDA_MAIN_FREED = 3 };
int kt__cuda_side_enable(kt__cuda_rt *rt, char *err, size_t err_size);
int kt__cuda_side_copy(kt__cuda_rt *rt, void *dst, const void *src, size_t bytes);
int kt__cuda_side_fence(kt__cuda_rt *rt, int slot, int what);
/* Pinned staging pieces for those copies: kt__cuda_side_stage(piece, QUEUED)
 * marks the piece's copy just queued on the side stream; (piece, WAIT) blocks
 * the calling thread until that copy has read the piece (so it may be refilled). */
#define KT__CUDA_STAGES 4
enum { KT__CUDA_STAGE_QUEUED = 0, KT__CUDA_STAGE_WAIT = 1 };
int kt__cuda_side_stage(kt__cuda_rt *rt, int piece, int what);
/* fn(arg) on CUDA's host thread once the stream reaches it (cudaLaunchHostFunc) */
int kt__cuda_host_fn(kt__cuda_rt *rt, void (*fn)(void *), void *arg);
/* The hybrid decode's flags (cuda/hybrid.cu, lib/gpu/feeder.h), in place of
 * host functions: host_signal copies `words` 4-byte words from device memory
 * src into mapped pinned dst_h, then (the copy visible to the host first)
 * writes *seq (device memory) into the mapped pinned word *flag_h; host_await
 * holds the stream until *flag_h == *seq, or sets *fail_h = 1 after 60 s. */
int kt__cuda_host_signal(kt__cuda_rt *rt, void *dst_h, const void *src, size_t words,
                         uint32_t *flag_h, const int32_t *seq);
int kt__cuda_host_await(kt__cuda_rt *rt, const uint32_t *flag_h, const int32_t *seq,
                        uint32_t *fail_h);
int kt__cuda_sync(kt__cuda_rt *rt, char *err, size_t err_size);
/* kt__cuda_sync, or with spin set a thread that polls the stream's end instead
 * of sleeping on the blocking-sync event (its wake-up costs tens of us a decode
 * step; for runs whose CPUs have no expert work to lose to a spinning thread) */
int kt__cuda_wait(kt__cuda_rt *rt, int spin, char *err, size_t err_size);
int kt__cuda_check(kt__cuda_rt *rt, char *err, size_t err_size);
/* decode graph: capture the launches between begin and end, replay them */
int kt__cuda_capture_begin(kt__cuda_rt *rt, char *err, size_t err_size);
int kt__cuda_capture_end(kt__cuda_rt *rt, char *err, size_t err_size);
int kt__cuda_graph_launch(kt__cuda_rt *rt, char *err, size_t err_size);
void kt__cuda_graph_drop(kt__cuda_rt *rt);

/* A weight matrix in device memory, [rows = out][cols = in]. I4: int32 words
 * [rows][cols / 8], 8 nibbles each, lowest first, stored q + 8; w = q · scale
 * with block_rows 1 and block_cols the group (a multiple of 8). */
enum { KT__CUDA_W_F32 = 0, KT__CUDA_W_BF16 = 1, KT__CUDA_W_F8 = 2, KT__CUDA_W_I4 = 3 };
typedef struct kt__cuda_mat {
    const void *data;   /* NULL: absent (an expert not on this GPU)             */
    const void *scale;  /* F8, I4: [ceil(rows / block_rows)][scale_cols]        */
    int32_t rows, cols, type, scale_bf16;
    int32_t block_rows, block_cols, scale_cols, reserved;
} kt__cuda_mat;

/* Lets kt__cuda_linear hand products of min_tokens or more tokens (<= 0: 16)
 * to cuBLAS on the tensor cores: the activations split into BF16 hi and lo
 * halves in `staging` ([2][staging_elems] uint16), FP8 weights dequantized into
 * hi and lo halves in `wstaging` ([2][wstaging_elems]); F32 weights in F32.
 * Products larger than the staging stay on libkt's own kernels. */
int kt__cuda_gemm_enable(kt__cuda_rt *rt, void *staging, size_t staging_elems,
                         void *wstaging, size_t wstaging_elems, int32_t min_tokens, char *err,
                         size_t err_size);
/* y[t][r] (+)= Σ_c x[t][c] W[r][c] + bias[r], rows of x and y at the strides */
int kt__cuda_linear(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride,
                    const kt__cuda_mat *W, const float *bias, float *y, int32_t y_stride,
                    int accumulate);
int kt__cuda_embed(kt__cuda_rt *rt, const kt__cuda_mat *E, const int32_t *tokens, int32_t T,
                   float *x);
int kt__cuda_rmsnorm(kt__cuda_rt *rt, const float *x, float *y, int32_t rows, int32_t n,
                     int32_t x_stride, int32_t y_stride, const float *w, float eps);
/* rotates v[t][h] + offset (rope_dim values) at positions *pos0 + t */
int kt__cuda_rope(kt__cuda_rt *rt, float *v, int32_t T, int32_t n_head, int32_t t_stride,
                  int32_t h_stride, int32_t offset, int32_t rope_dim, int interleave,
                  const float *inv_freq, float factor, const int32_t *pos0);
/* cache[*pos0 + t][0..n) = src[t][0..n) */
int kt__cuda_store_rows(kt__cuda_rt *rt, const float *src, int32_t T, int32_t src_stride,
                        int32_t n, float *cache, int32_t row, const int32_t *pos0);

/* Attention over positions lo..*pos0+t; key = [ka | kb] (kb optional), strides
 * per position (sp) and per kv head (sh); kv head = head / group. */
typedef struct kt__cuda_attn {
    const float *q;
    int32_t T, n_head, q_st, q_sh;
    const float *ka;
    int32_t ka_dim, ka_sp, ka_sh, group;
    const float *kb;
    int32_t kb_dim, kb_sp, kb_sh;
    const float *v;
    int32_t v_dim, v_sp, v_sh;
    float *o;
    int32_t o_st, o_sh, window;
    float scale;
    const float *sinks;   /* [n_head] or NULL */
    const int32_t *pos0;  /* device */
    /* scratch for the split decode kernel (T <= KT__CUDA_ATTN_SPLIT_T):
     * [T][n_head][splits][v_dim + 2] floats; NULL or too small: one block per head */
    float *work;
    size_t work_elems;
    int32_t splits;       /* > 0: this many splits (tests), else from the device's size */
    /* 1: ka, kb and v are the KV cache, whose rows before *pos0 no kernel of this
     * step writes (the split kernel may read them before it waits); 0: scratch
     * rewritten each step (naive MLA's expansion) */
    int32_t rows_final;
    /* 1: a chunk may attend on the tensor cores with BF16 hi + lo operands
     * (precision fast; cuda/attn_mma.cu, KT_GPU_ATTN_TILE); 0: F32 only */
    int32_t tc;
} kt__cuda_attn;
/* Chunks of up to this many tokens attend through the split kernel: each block
 * serves up to 8 query heads of one kv head over 1/S of the positions (S up to
 * KT__CUDA_ATTN_SPLITS, from the device's multiprocessors; the split points
 * read from the device, so a captured graph replays at any position), and a
 * second kernel merges the partial softmaxes (KT_GPU_FUSE bit 4, opt-in: the
 * last split block of each head group does). */
#define KT__CUDA_ATTN_SPLIT_T 2
#define KT__CUDA_ATTN_SPLITS 64
int kt__cuda_attention(kt__cuda_rt *rt, const kt__cuda_attn *a, int32_t max_pos, char *err,
                       size_t err_size);
/* GQA after the q, k, v products, one launch: per head RMSNorm (q_norm, k_norm
 * over head_dim, or NULL), RoPE at *pos0 + t on q and k in place, and the k and
 * v rows stored in the caches at row *pos0 + t (cache rows of n_head_kv·head_dim). */
typedef struct kt__cuda_qk_post {
    float *q, *k;
    const float *v;
    int32_t T, n_head, n_head_kv, head_dim, q_stride, kv_stride;
    const float *q_norm, *k_norm;
    float eps, factor;
    int32_t rope_dim, interleave;
    const float *inv_freq;
    const int32_t *pos0;
    float *k_cache, *v_cache;
} kt__cuda_qk_post;
int kt__cuda_qk_post_run(kt__cuda_rt *rt, const kt__cuda_qk_post *a);
/* x += add; y = x / sqrt(mean(x²) + eps) · w, rows of n packed (one launch) */
int kt__cuda_add_rmsnorm(kt__cuda_rt *rt, float *x, const float *add, float *y, int32_t rows,
                         int32_t n, const float *w, float eps);
/* The same with x += add + add2 (add2 may be mapped pinned memory; where the
 * one launch does not apply, add2 is first added into add) */
int kt__cuda_add_rmsnorm2(kt__cuda_rt *rt, float *x, const float *add, const float *add2,
                          float *y, int32_t rows, int32_t n, const float *w, float eps);
/* y = in Wᵀ + bias (rows of W->rows), then x += y; xn = RMSNorm(x) · w: with
 * KT_GPU_FUSE bit 1 (opt-in) for one token in one launch (the product's last
 * block adds and norms), else kt__cuda_linear + kt__cuda_add_rmsnorm. */
int kt__cuda_linear_add_norm(kt__cuda_rt *rt, const float *in, int32_t T, int32_t in_stride,
                             const kt__cuda_mat *W, const float *bias, float *y, float *x,
                             float *xn, const float *w, float eps);
/* kt__cuda_linear_n over q, k, v, and with KT_GPU_FUSE bit 2 (opt-in) for one
 * token qp's post step folded into the same launch (its last block runs it, a
 * warp per head). Returns 0, or 1 when qp was not run (the default, more
 * tokens, a head too large): the caller then runs kt__cuda_qk_post_run. */
int kt__cuda_qkv_post(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride,
                      const kt__cuda_mat *const W[3], const float *const bias[3],
                      float *const y[3], const int32_t y_stride[3], const kt__cuda_qk_post *qp);
/* Up to three products of the same input in one launch when they run on the
 * own kernels (fewer than the cuBLAS threshold of tokens): y_i = x W_iᵀ + b_i. */
int kt__cuda_linear_n(kt__cuda_rt *rt, const float *x, int32_t T, int32_t x_stride, int32_t n,
                      const kt__cuda_mat *const W[], const float *const bias[], float *const y[],
                      const int32_t y_stride[]);
/* Absorbed MLA (kv_b [n_head·(nope + v)][R]): qa[t][h] = [W_ukᵀ q_nope | q_rope]
 * ([R + rope] from q [t][h][nope + rope]), and o[t][h] = W_uv õ[t][h] ([v] from [R]). */
int kt__cuda_mla_absorb_q(kt__cuda_rt *rt, const float *q, int32_t T, int32_t n_head,
                          int32_t nope, int32_t rope, const kt__cuda_mat *kv_b, float *qa);
int kt__cuda_mla_absorb_o(kt__cuda_rt *rt, const float *ot, int32_t T, int32_t n_head,
                          int32_t nope, int32_t v_dim, const kt__cuda_mat *kv_b, float *o);
/* g = silu(g) · u, or gpt-oss's clamped form */
int kt__cuda_act(kt__cuda_rt *rt, float *g, const float *u, size_t n, int oai, float alpha,
                 float limit);
/* y[r] += s_r · x[r] over rows of n (s_r = sigmoid(row_gate[r]) or 1) */
int kt__cuda_add(kt__cuda_rt *rt, float *y, const float *x, int32_t rows, int32_t n,
                 const float *row_gate);
int kt__cuda_zero(kt__cuda_rt *rt, float *y, size_t n);

#define KT__CUDA_MAX_EXPERTS 512
enum { KT__CUDA_ROUTER_SOFTMAX_TOPK = 0, KT__CUDA_ROUTER_SIGMOID_BIAS = 1,
       KT__CUDA_ROUTER_TOPK_SOFTMAX = 2 };
typedef struct kt__cuda_router {
    int32_t kind, n_expert, k, n_group, topk_group, renorm;
    float scale;
    const float *e_bias; /* device [E] or NULL */
    /* 1: the next call is kt__cuda_experts on these ids with every expert on the
     * GPU, so the one-token selection may be left to its kernels (KT_GPU_GEMV
     * bit 4096); 0: the ids are selected here */
    int32_t experts_next;
} kt__cuda_router_desc;
int kt__cuda_router(kt__cuda_rt *rt, const kt__cuda_router_desc *r, const float *logits,
                    int32_t T, int32_t *ids, float *w);
/* One token: logits = W x + bias and the selection in one launch (the last block
 * to finish selects). Returns 0, or 1 when it does not apply (T != 1, a matrix
 * the one-token GEMV cannot read, a router the warp selection cannot take): then
 * kt__cuda_linear and kt__cuda_router. */
int kt__cuda_router_gemv(kt__cuda_rt *rt, const kt__cuda_router_desc *r, const float *x,
                         const kt__cuda_mat *W, const float *bias, float *logits, int32_t T,
                         int32_t *ids, float *w);

/* out[t] += Σ_j w[t][j] FFN_{ids[t][j]}(x[t]) over the experts whose gate
 * table entry (device array of kt__cuda_mat) has data */
typedef struct kt__cuda_experts_args {
    const kt__cuda_mat *gate, *up, *down; /* device [E] */
    const float *x;
    const int32_t *ids;
    const float *w;
    float *h;                             /* device [T][k][I] scratch */
    float *out;
    int32_t T, H, I, k, oai;
    float alpha, limit;
    int32_t vec8;                         /* every GPU expert readable 8 columns at a time */
    int32_t assign;                       /* out[t] = Σ ... instead of += (no zeroing launch) */
    /* optional, with KT_GPU_FUSE bit 1: then res[t] += out[t]; res_norm[t] =
     * RMSNorm(res[t]) · norm_w, folded into the products' last blocks (rows of H) */
    float *res, *res_norm;
    const float *norm_w;
    float eps;
} kt__cuda_experts_args;
/* Returns 0, or 1 when res was given and the residual add + norm could not be
 * folded (the caller then runs kt__cuda_add_rmsnorm). */
int kt__cuda_experts(kt__cuda_rt *rt, const kt__cuda_experts_args *a);

/* Grouped experts: dst[i][0..n) = src[idx[i] / div][0..n) for i < rows */
int kt__cuda_gather_rows(kt__cuda_rt *rt, const float *src, int32_t src_stride,
                         const int32_t *idx, int32_t div, int32_t rows, int32_t n, float *dst);
/* out[t] += Σ_j w[t][j] Y[slot[t][j]] over slot >= 0 (rows of H; slot, w [T][k]) */
int kt__cuda_combine(kt__cuda_rt *rt, float *out, int32_t T, int32_t H, int32_t k,
                     const float *Y, const int32_t *slot, const float *w);

/* Grouped experts on the device, for chunks: out[t] += Σ_j w[t][j] FFN_{ids[t][j]}(x[t])
 * over the experts whose gate table entry has data. The pairs are counted and
 * sorted by expert on the device (one block), then three launches multiply
 * every expert's rows at once (gate; up with the activation; down) on the BF16
 * tensor cores with the activations as hi + lo halves, and the rows are
 * weighted back per token in j order. No host sync, no per-expert launch.
 * Every GPU expert must be BF16 with 16-byte aligned rows (checked by the
 * caller); returns 1 and queues nothing when the device has no BF16 tensor
 * cores (compute capability < 8), E > KT__CUDA_MAX_EXPERTS, or H, I or the x
 * stride do not suit the vector loads. */
typedef struct kt__cuda_group_args {
    const kt__cuda_mat *gate, *up, *down; /* device tables [E] */
    const float *x;                       /* [T][x_stride] normed rows */
    const int32_t *ids;                   /* device [T][k] */
    const float *w;                       /* device [T][k] */
    int32_t x_stride, T, H, I, k, E, oai;
    float alpha, limit;
    int32_t *route;                       /* device scratch [2E + 2] */
    int32_t *perm, *slot;                 /* device scratch [T·k] */
    float *h;                             /* device scratch [T·k][I] */
    float *y;                             /* device scratch [T·k][H] */
    float *out;                           /* [T][H], added to */
    int32_t e_end;                        /* > 0: experts from e_end on skipped */
} kt__cuda_group_args;
int kt__cuda_experts_grouped(kt__cuda_rt *rt, const kt__cuda_group_args *a);

/* Phase timing (KT_GPU_TRACE=2): events recorded on the stream between phases;
 * kt__cuda_prof_mark(rt, p) ends phase p; kt__cuda_prof_collect waits for the
 * last event and adds each interval's milliseconds to ms[phase] (n_phase
 * entries), then starts over. kt__cuda_hold queues a host function that keeps
 * the stream waiting until kt__cuda_release, so that a step's launches are
 * all queued before the device runs them (the intervals are then the device's
 * time, not the host's launch rate); never hold across a host wait. */
int kt__cuda_prof_enable(kt__cuda_rt *rt, char *err, size_t err_size);
void kt__cuda_prof_mark(kt__cuda_rt *rt, int phase);
int kt__cuda_prof_collect(kt__cuda_rt *rt, double *ms, int n_phase);
int kt__cuda_hold(kt__cuda_rt *rt);
void kt__cuda_release(kt__cuda_rt *rt);

/* The device's limits, measured: HBM (device-to-device copy, bytes read +
 * written), pinned PCIe copies each way, BF16 tensor-core GEMM (8192^3). Takes
 * about a second and 4 GiB of device memory. */
typedef struct kt__cuda_yardsticks_out {
    double hbm_gbs, h2d_gbs, d2h_gbs, bf16_tflops;
} kt__cuda_yardsticks_out;
int kt__cuda_yardsticks(int32_t device, kt__cuda_yardsticks_out *out, char *err,
                        size_t err_size);

/* Expert moves copied while steps run (cuda/moves.cu, lib/gpu/mover.h): host
 * (pageable) -> two pinned staging halves of half_bytes -> device, on a stream
 * of its own; every call from the one thread that moves. kt__cuda_mover_copy
 * may return before the bytes land; kt__cuda_mover_finish waits for them.
 * After a failed create, *out (when set) still goes to kt__cuda_mover_free. */
typedef struct kt__cuda_mover kt__cuda_mover;
int kt__cuda_mover_create(kt__cuda_mover **out, int32_t device, size_t half_bytes, char *err,
                          size_t err_size);
void kt__cuda_mover_free(kt__cuda_mover *m);
int kt__cuda_mover_copy(kt__cuda_mover *m, void *dst, const void *src, size_t bytes, char *err,
                        size_t err_size);
int kt__cuda_mover_finish(kt__cuda_mover *m, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* KT_CUDA_H */
