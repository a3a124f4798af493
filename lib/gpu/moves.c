/* Dynamic expert moves: slot tables and double-buffered CPU masks (moves.h). */
#include "moves.h"

#include <string.h>

#include "kt_internal.h"

kt_status kt__moves_init(kt__moves_layer *m, int32_t E, int32_t n_slots)
{
    memset(m, 0, sizeof *m);
    if (E <= 0 || n_slots < 0 || n_slots > E)
        return kt__error(KT_ERR_INVALID_ARG, "expert moves: %d slots for %d experts", n_slots,
                         E);
    m->E = E;
    m->n_slots = n_slots;
    m->slot_of = kt__malloc_array((size_t)E, sizeof(int32_t));
    m->expert_at = kt__malloc_array((size_t)(n_slots ? n_slots : 1), sizeof(int32_t));
    m->mask[0] = kt__calloc((size_t)E + 1, 1);
    m->mask[1] = kt__calloc((size_t)E + 1, 1);
    if (!m->slot_of || !m->expert_at || !m->mask[0] || !m->mask[1])
        return kt__error(KT_ERR_NOMEM, "expert moves: out of memory");
    for (int32_t e = 0; e < E; e++) {
        m->slot_of[e] = e < n_slots ? e : -1;
        m->mask[0][e] = m->mask[1][e] = e < n_slots;
    }
    for (int32_t s = 0; s < n_slots; s++)
        m->expert_at[s] = s;
    m->mask[0][E] = m->mask[1][E] = 1;
    m->live = 0;
    return KT_OK;
}

void kt__moves_free(kt__moves_layer *m)
{
    if (!m)
        return;
    kt__free(m->slot_of);
    kt__free(m->expert_at);
    kt__free(m->mask[0]);
    kt__free(m->mask[1]);
    memset(m, 0, sizeof *m);
}

const uint8_t *kt__moves_mask(const kt__moves_layer *m)
{
    return m->mask[m->live];
}

kt_status kt__moves_check(const kt__moves_layer *m, const kt_expert_move *moves, size_t n,
                          int32_t *slots)
{
    if (n && (!moves || !slots))
        return kt__error(KT_ERR_INVALID_ARG, "expert moves: moves and slots are required");
    for (size_t i = 0; i < n; i++) {
        uint32_t in = moves[i].expert_in, out = moves[i].expert_out;
        if (in >= (uint32_t)m->E || out >= (uint32_t)m->E)
            return kt__error(KT_ERR_INVALID_ARG, "expert moves: move %zu (%u -> GPU, %u -> "
                             "CPU): an expert id is not below %d", i, in, out, m->E);
        if (m->slot_of[in] >= 0)
            return kt__error(KT_ERR_INVALID_ARG, "expert moves: move %zu: expert %u is on the "
                             "GPU already", i, in);
        if (m->slot_of[out] < 0)
            return kt__error(KT_ERR_INVALID_ARG, "expert moves: move %zu: expert %u is not on "
                             "the GPU", i, out);
        for (size_t j = 0; j < i; j++)
            if (moves[j].expert_in == in || moves[j].expert_out == out)
                return kt__error(KT_ERR_INVALID_ARG, "expert moves: moves %zu and %zu move the "
                                 "same expert", j, i);
        slots[i] = m->slot_of[out];
    }
    return KT_OK;
}

const uint8_t *kt__moves_commit(kt__moves_layer *m, const kt_expert_move *moves, size_t n,
                                const int32_t *slots)
{
    int spare = 1 - m->live;
    /* the whole new mask before anyone can see it */
    memcpy(m->mask[spare], m->mask[m->live], (size_t)m->E + 1);
    for (size_t i = 0; i < n; i++) {
        int32_t in = (int32_t)moves[i].expert_in, out = (int32_t)moves[i].expert_out;
        m->mask[spare][out] = 0;
        m->mask[spare][in] = 1;
        m->slot_of[out] = -1;
        m->slot_of[in] = slots[i];
        m->expert_at[slots[i]] = in;
    }
    m->live = spare;
    return m->mask[spare];
}
