/* Dynamic expert moves, the host-side bookkeeping (no CUDA): which routed
 * experts of one MoE layer sit in which GPU slot, and the CPU backend's skip
 * mask, double-buffered so that a batch of moves is published as one pointer
 * store between steps. lib/gpu/gpu.c copies the weights and the device tables;
 * this part is testable on any machine (tests/unit/test_hybrid_cpu.c). */
#ifndef KT_GPU_MOVES_H
#define KT_GPU_MOVES_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/placement.h"

typedef struct kt__moves_layer {
    int32_t E, n_slots;
    int32_t *slot_of;    /* [E]: the expert's GPU slot, -1 on the CPU      */
    int32_t *expert_at;  /* [n_slots]: the slot's expert                   */
    uint8_t *mask[2];    /* [E + 1] each: 1 = on the GPU (the CPU skips it);
                            [E] (a folded shared expert) is always 1      */
    int live;            /* mask[live] is the published one                */
} kt__moves_layer;

/* Experts 0 .. n_slots - 1 in slots 0 .. n_slots - 1 (the runtime's initial
 * placement), mask[live] set to match. KT_ERR_INVALID_ARG for a bad count,
 * KT_ERR_NOMEM. Free with kt__moves_free (also after a failed init). */
kt_status kt__moves_init(kt__moves_layer *m, int32_t E, int32_t n_slots);
void kt__moves_free(kt__moves_layer *m);

/* The published mask ([E + 1]). */
const uint8_t *kt__moves_mask(const kt__moves_layer *m);

/* Checks a batch of moves of this layer (their layer fields are not read):
 * each expert_in on the CPU, each expert_out on the GPU, both below E, no
 * expert in two moves. slots[i] receives the slot move i fills (expert_out's).
 * Changes nothing; KT_ERR_INVALID_ARG names the first bad move. */
kt_status kt__moves_check(const kt__moves_layer *m, const kt_expert_move *moves, size_t n,
                          int32_t *slots);

/* Applies a checked batch: the spare mask becomes the published one with the
 * moves applied, the slot tables follow, and the spare turns live. Returns
 * the new mask for the CPU backend (kt_moe_set_expert_mask). Only between
 * steps: the previous mask becomes the next commit's spare, so no task may
 * still read it. */
const uint8_t *kt__moves_commit(kt__moves_layer *m, const kt_expert_move *moves, size_t n,
                                const int32_t *slots);

#endif /* KT_GPU_MOVES_H */
