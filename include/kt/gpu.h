/*
 * kt/gpu.h - the GPU runtime: runs a context's forward pass on a CUDA device
 * (embeddings, attention with a KV cache in device memory, dense MLPs,
 * routers, shared experts and a share of the routed experts), with the other
 * routed experts on the CPU MoE backend, overlapped: the CPU experts are
 * started from a host function on the GPU's stream while the GPU experts run.
 * Single-token decode steps are captured once into a CUDA graph and replayed
 * (every family; MLA decodes in the latent space). Chunks of 16 or more
 * tokens (prefill) run their products on the tensor cores through cuBLAS and
 * their GPU experts grouped per expert.
 *
 *     kt_context *ctx = ...;                  // kt_context_create as usual
 *     kt_gpu_options g = KT_GPU_OPTIONS_INIT;
 *     g.expert_fraction = 0.5f;               // half of each layer's experts on the GPU
 *     if (kt_context_use_gpu(ctx, &g) < 0)
 *         fprintf(stderr, "%s\n", kt_last_error());
 *     kt_context_eval(ctx, ids, n, logits, 0); // now runs on the GPU
 *
 * Thread contract: as kt_context (one thread at a time).
 */
#ifndef KT_GPU_H
#define KT_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/engine.h"
#include "kt/placement.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kt_gpu_options.flags */
#define KT_GPU_F_NO_GRAPH (1u << 0) /* run decode steps eagerly, without a CUDA graph */
/* Accepted for compatibility; now the default (see KT_GPU_F_MLA_NAIVE):
 * MLA decode steps in the latent space (kv_b folded into the query and the
 * output, as the CPU engine decodes), replayed as a CUDA graph. */
#define KT_GPU_F_MLA_ABSORB (1u << 1)
/* Accepted for compatibility; now the default (see KT_GPU_F_NO_CUBLAS):
 * products of 16 or more tokens through cuBLAS. */
#define KT_GPU_F_CUBLAS (1u << 2)
/* MLA decode steps expand k_nope and v through kv_b for every cached position
 * (as transformers computes), eagerly, instead of the latent-space default.
 * Since 0.1. */
#define KT_GPU_F_MLA_NAIVE (1u << 3)
/* Every product on libkt's own F32-activation kernels instead of cuBLAS. By
 * default products of 16 or more tokens run on the tensor cores with the
 * activations split into two BF16 halves (hi + lo, so about F32's accuracy:
 * two GEMMs; FP8 weights dequantized into halves too: three). Since 0.1. */
#define KT_GPU_F_NO_CUBLAS (1u << 4)
/* Decode steps (one token) run their CPU-resident experts on the CPU MoE
 * backend's BF16 activations (its fastest format) instead of the context's
 * (by default two BF16 halves, about F32's accuracy); prompt chunks keep the
 * context's. Faster hybrid decode; the logits then move like
 * KT_CONTEXT_F_MOE_BF16's (near-tied experts of later layers may flip at single
 * positions). No effect with every expert on the GPU. The environment variable
 * KT_GPU_DECODE_ACT=bf16 / bf16x2 overrides it. Since 0.1. */
#define KT_GPU_F_DECODE_BF16 (1u << 5)

typedef struct kt_gpu_options {
    uint32_t struct_size;  /* sizeof(kt_gpu_options); set by the INIT macro               */
    uint32_t flags;        /* KT_GPU_F_*; unknown bits are rejected                        */
    int32_t device;        /* CUDA device index                                           */
    float expert_fraction; /* share (0..1) of each MoE layer's routed experts held on the
                              GPU (the lowest ids); < 0: as many as the budget allows     */
    float mem_fraction;    /* share of the device's free memory the run may use; 0: 0.9   */
    int32_t layerwise_tokens; /* layerwise prefill: chunks of at least this many tokens run
                              every routed expert on the GPU, the CPU-resident ones copied
                              in layer by layer on a second stream into two device slots
                              (overlapping the previous layer's work); -1: decided per
                              chunk from the measured host -> device copy rate and the
                              CPU experts' measured time per routed token (after one
                              hybrid chunk of 128+ tokens; the default); 0: off. On only
                              when the two slots fit the budget besides the GPU experts
                              (not with expert_fraction < 0, which fills it). Since 0.1. */
    uint64_t mem_limit;    /* bytes the run may use; 0: from mem_fraction                 */
    int32_t move_slots;    /* spare device slots, one expert each, that expert moves
                              (kt_context_gpu_move_experts) fill while steps run; 0: 16
                              (the rebalancer's default max_moves), fewer when the budget
                              is short (planned after the layerwise slots); < 0: none
                              (moves copy before they return). Only planned with experts
                              on both sides. Since 0.1.                                   */
    uint32_t reserved;     /* must be 0                                                    */
} kt_gpu_options;

#define KT_GPU_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_gpu_options), 0u, 0, 0.0f, 0.0f, -1, UINT64_C(0), 0, 0u }

/* Fills *opts with defaults for a struct of struct_size bytes. Since 0.1. */
KT_API kt_status kt_gpu_options_init(kt_gpu_options *opts, size_t struct_size);

/* Usable CUDA devices (0 without a driver, a device, or in a build without
 * CUDA). Since 0.1. */
KT_API int32_t kt_gpu_count(void);

/* Moves a context's evaluation to a GPU: plans the device memory (weights,
 * KV cache of n_ctx positions, workspaces, the GPU experts) against the
 * budget and uploads. Fails before allocating with KT_ERR_NOMEM when the
 * plan does not fit (the message names the flag to change), KT_ERR_UNSUPPORTED
 * for a build without CUDA, no device, or a family the GPU path does not run.
 * The context's cached positions are forgotten (n_past = 0). On failure the
 * context keeps running on the CPU. opts may be NULL (defaults). Since 0.1. */
KT_API kt_status kt_context_use_gpu(kt_context *ctx, const kt_gpu_options *opts);

/* CUDA device the context runs on, or -1 (CPU). Since 0.1. */
KT_API int32_t kt_context_gpu(const kt_context *ctx);

/* Routed experts per MoE layer held on the GPU (0 on the CPU). Since 0.1. */
KT_API int32_t kt_context_gpu_experts(const kt_context *ctx);

/* Device bytes the context's GPU plan uses (0 on the CPU). Since 0.1. */
KT_API uint64_t kt_context_gpu_bytes(const kt_context *ctx);

/*
 * Moves routed experts between the CPU and the GPU (same thread contract as
 * kt_context_eval). Each move brings moves[i].layer's expert_in (on the CPU)
 * to the GPU and sends expert_out (on the GPU) back to the CPU; the number of
 * GPU experts per layer stays as planned. The whole batch is checked first
 * (KT_ERR_INVALID_ARG naming the move: a layer without routed experts, an
 * expert already where it should go, an expert in two moves; nothing changes).
 *
 * With enough spare slots (kt_gpu_options.move_slots) the call returns at
 * once: a thread of the runtime copies the incoming weights into the spare
 * slots through pinned staging on a stream of its own while steps go on with
 * the old placement, and the first kt_context_eval that starts after the
 * last byte landed switches the device tables and the CPU backend's masks of
 * every moved layer (a few microseconds; decode never waits for the copy).
 * The outgoing experts' memory becomes the spare slots. A call while a batch
 * is still copying first waits for it (kt_context_gpu_move_wait). Without
 * enough spares the weights are copied into expert_out's memory before the
 * call returns, and the switch happens then.
 *
 * With layerwise prefill on, an outgoing expert takes the incoming one's
 * place in the copy slots. KT_ERR_UNSUPPORTED without CUDA; KT_ERR_IO on a
 * device error during the copies,
 * after which the GPU runtime must be set up again (kt_context_use_gpu).
 * kt_placement's rebalancer proposes such moves (kt_rebalancer_plan). Since 0.1.
 */
KT_API kt_status kt_context_gpu_move_experts(kt_context *ctx, const kt_expert_move *moves,
                                             size_t n_moves);

/* Waits until the moves of the last kt_context_gpu_move_experts have landed
 * and switches to them now (KT_OK at once when none are pending). Returns the
 * copy's failure (KT_ERR_IO: the moves were dropped, the old placement stays).
 * Since 0.1. */
KT_API kt_status kt_context_gpu_move_wait(kt_context *ctx);

/* Lets the context move experts by itself. Every routed id the CPU MoE
 * backend sees (each hybrid step hands it all of a layer's ids) feeds a
 * kt_rebalancer (opts; NULL: KT_REBALANCER_OPTIONS_INIT) kept over the GPU's
 * current placement; the first kt_context_eval after every_tokens more routed
 * tokens asks it for moves (at most the spare slots) and starts them as
 * kt_context_gpu_move_experts does (copied while the next steps run). 0 turns
 * it off. KT_ERR_UNSUPPORTED without spare slots: routed experts on one side
 * only, kt_gpu_options.move_slots < 0 or no room in the budget. The same observer makes kt_context_set_expert_stats and
 * kt_context_set_route_trace see the steps whose CPU experts run on the
 * backend (with every expert on the GPU the routes stay on the device).
 * Since 0.1. */
KT_API kt_status kt_context_gpu_rebalance(kt_context *ctx, uint32_t every_tokens,
                                          const kt_rebalancer_options *opts);

/* Expert moves published so far: batches and experts (either may be NULL;
 * zeros without a GPU). Since 0.1. */
KT_API void kt_context_gpu_moved(const kt_context *ctx, uint64_t *batches, uint64_t *experts);

/* A device's limits, measured (the yardsticks of kt-bench e2e and of the
 * layerwise-prefill threshold). */
typedef struct kt_gpu_limits {
    uint32_t struct_size;  /* sizeof(kt_gpu_limits)                                     */
    uint32_t reserved;
    double hbm_gbs;        /* device memory: 2 GiB device-to-device copy, read + written */
    double h2d_gbs;        /* PCIe host -> device, 1 GiB from pinned memory              */
    double d2h_gbs;        /* PCIe device -> host, 1 GiB into pinned memory              */
    double bf16_tflops;    /* cuBLAS BF16 GEMM 8192 x 8192 x 8192, random operands       */
} kt_gpu_limits;

#define KT_GPU_LIMITS_INIT { (uint32_t)sizeof(kt_gpu_limits), 0u, 0.0, 0.0, 0.0, 0.0 }

/* Measures device `device`'s limits into *out (best of a few repetitions;
 * about a second; needs 4 GiB of free device memory and 1 GiB of pinned host
 * memory while it runs). KT_ERR_UNSUPPORTED without CUDA or the device,
 * KT_ERR_IO when a CUDA call fails (message names it). Thread-safe. Since 0.1. */
KT_API kt_status kt_gpu_measure_limits(int32_t device, kt_gpu_limits *out);

#ifdef __cplusplus
}
#endif
#endif /* KT_GPU_H */
