/* Internal interface of the MoE module (lib/moe). Not installed. */
#ifndef KT_MOE_INTERNAL_H
#define KT_MOE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "../../cpu/moe_kernels.h"

/* Kernel set for a method on this CPU: the best of avx512 / avx2 / scalar
 * that kt_hw_isa() (capped by kt__moe_set_isa_cap) allows. */
const kt__moe_kernels *kt__moe_pick_kernels(int method);

/* The same for KT_MOE_PREC_BF16X2 / _F32 (activations within ~1e-5 of F32). */
const kt__moe_kernels *kt__moe_pick_kernels_precise(int method);
/* AMXINT4 with groups of 64 or 128; precise: F32 activations. */
const kt__moe_kernels *kt__moe_pick_int4g(bool precise);

/* Test hook: caps the ISA bits backends created afterwards may use
 * (process-wide; ~0 = no cap). */
void kt__moe_set_isa_cap(uint64_t cap);

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

#endif /* KT_MOE_INTERNAL_H */
