/* Internal interface of the MoE module (lib/moe). Not installed. */
#ifndef KT_MOE_INTERNAL_H
#define KT_MOE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "../../cpu/moe_kernels.h"
#include "kt/model.h"
#include "kt/moe.h"

/* Kernel set for a method on this CPU: the best of avx512 / avx2 / scalar
 * that kt_hw_isa() (capped by kt__moe_set_isa_cap) allows. */
const kt__moe_kernels *kt__moe_pick_kernels(int method);

/* The same for KT_MOE_PREC_BF16X2 / _F32 (activations within ~1e-5 of F32). */
const kt__moe_kernels *kt__moe_pick_kernels_precise(int method);
/* AMXINT4 with groups of 64 or 128; precise: F32 activations. */
const kt__moe_kernels *kt__moe_pick_int4g(bool precise);

/* NUMA pool slices (lib/moe/slices.c) of a matrix W of a method: bytes of a
 * copy of rows [r0, r1) x columns [c0, c1) (weights, then scales, each 64-byte
 * aligned; 0 for an absent matrix or an empty slice), and the copy itself into
 * dst, returned as a matrix of r1 - r0 rows and c1 - c0 columns. Bounds are
 * multiples of the method's blocks (FP8 128; INT4 the group; LLAMAFILE the
 * ggml block) or the matrix's ends. */
size_t kt__moe_slice_bytes(int method, const kt__wmat *W, int r0, int r1, int c0, int c1);
kt__wmat kt__moe_slice_copy(int method, const kt__wmat *W, int r0, int r1, int c0, int c1,
                            void *dst);

/* The bytes a decode kernel reads for rows [r0, r1) of W, all of its columns (a
 * pool's view), as at most two spans: the weights (rows, or the 4-row tiles of a
 * load-time repack), then the scales when stored apart. Returns how many.
 * KT_MOE_DECODE_READ reads them in place of the kernel (lib/moe/slices.c). */
typedef struct kt__moe_span {
    const uint8_t *p;
    size_t n;
} kt__moe_span;
int kt__moe_row_spans(int method, const kt__wmat *W, int r0, int r1, kt__moe_span out[2]);

/* Expert weights of a model handed over in place (lib/moe/from_model.c). */
/* The method a view's storage is read with directly; KT_METHOD_NONE if there is none. */
kt_method kt__moe_method_of_view(const kt_tensor_view *v);
/* kt_model_tensor() into a zeroed view. */
kt_status kt__moe_view(const kt_model *m, uint32_t l, kt_role role, uint32_t e,
                       kt_tensor_view *v);
/* MoE layer l's E routed experts: their views' data, scales and (fused: gpt-oss's gate_up
 * and down) biases into p[0..8][0..E) (gate, up, down, their scales, their biases) and lw
 * pointing at them, scales only for methods that have them. *method: KT_METHOD_NONE takes
 * the first expert's, every expert must match it; *inter: 0 takes the first expert's
 * intermediate size; every expert must have it and the given hidden size. */
kt_status kt__moe_layer_from_model(const kt_model *m, uint32_t l, uint32_t E, uint32_t hidden,
                                   bool fused, const void **p[9], kt_moe_layer_weights *lw,
                                   kt_method *method, uint32_t *inter);

/* Test hook: caps the ISA bits backends created afterwards may use
 * (process-wide; ~0 = no cap). */
void kt__moe_set_isa_cap(uint64_t cap);

/* Test hook: backends created afterwards use this kernel set (its activation
 * format must suit the method) and packer (NULL: no shared packing) instead of
 * their own picks; kern NULL ends it. Process-wide. */
void kt__moe_force_kernels(const kt__moe_kernels *kern, const kt__moe_packer *packer);

/* Makes the backend's layer arguments model layer numbers: map[l] is the
 * slot of model layer l (-1: dense). Copies map. */
typedef struct kt_moe_backend kt_moe_backend;
kt_status kt__moe_set_layer_map(kt_moe_backend *moe, const int32_t *map, uint32_t n);

/* The backend's worker pool, for a caller (the engine) that runs its own jobs
 * on the same workers between MoE calls instead of a second pool spinning on
 * the same cores. Borrowed: valid until kt_moe_backend_free(). Jobs must be
 * posted from the thread that submits the MoE work (one producer). */
struct kt_pool;
struct kt_pool *kt__moe_backend_pool(kt_moe_backend *moe);

/* Hands the backend something to free after it (a file mapping its weights
 * live in): kt_moe_backend_free() calls release(owned) last. */
void kt__moe_backend_own(kt_moe_backend *moe, void (*release)(void *), void *owned);

/* One-token calls (decode) on the kernel set of act_precision (kt_moe_precision)
 * instead of the creation's, e.g. BF16 activations for the GPU runtime's hybrid
 * decode while its prefill chunks stay F32-accurate. Waits for the pending
 * tasks first; call between calls from the submitting thread; the activation
 * workspaces and scratch grow when that set needs more. KT_OK also when that
 * set is the creation's; KT_ERR_UNSUPPORTED (nothing changed) for LLAMAFILE,
 * tiled RAWINT4 or forced kernels; KT_ERR_NOMEM. */
kt_status kt__moe_set_decode_precision(kt_moe_backend *moe, int32_t act_precision);

/* Task timing (KT_GPU_TRACE): from kt__moe_stamp_enable() on (it waits for
 * the pending tasks, then allocates), every worker stamps when it starts and
 * finishes a task. kt__moe_task_stamps() reads the last finished task's
 * earliest and latest worker start and latest end (CLOCK_MONOTONIC seconds);
 * call it after kt_moe_wait() from the waiting thread. False when disabled. */
kt_status kt__moe_stamp_enable(kt_moe_backend *moe);
bool kt__moe_task_stamps(const kt_moe_backend *moe, double *first_start, double *last_start,
                         double *last_end);

/* Route observer: fn(arg, layer, ids, n_tokens, top_k) for every task (layer
 * as the caller submitted it), on the worker that starts it, before any
 * expert runs (the ids are then final: a CUDA graph or a hand-over by flags
 * has written them), with int32 ids only (int64 ones are not passed on). The
 * GPU runtime feeds its rebalancer and the context's routing statistics from
 * it. Set between tasks (it waits for the pending ones); NULL fn removes it. */
typedef void (*kt__moe_route_fn)(void *arg, uint32_t layer, const int32_t *ids,
                                 int32_t n_tokens, int32_t top_k);
void kt__moe_set_route_observer(kt_moe_backend *moe, kt__moe_route_fn fn, void *arg);

#endif /* KT_MOE_INTERNAL_H */
