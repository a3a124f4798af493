/* Private state of placement and statistics objects. */
#ifndef KT_PLACEMENT_INTERNAL_H
#define KT_PLACEMENT_INTERNAL_H

#include "kt/placement.h"
#include "kt_internal.h"

struct kt_expert_stats {
    uint32_t n_layers, n_experts;
    double tokens;    /* (decayed) tokens observed       */
    double *counts;   /* [n_layers][n_experts]           */
};

struct kt_placement {
    uint32_t n_layers, n_experts;
    uint8_t *moe;     /* [n_layers] 1 = MoE layer        */
    uint8_t *gpu;     /* [n_layers][n_experts] 1 = GPU   */
    int32_t strategy; /* as resolved (auto -> concrete)  */
};

/* Writes a file via a temporary name and rename. */
kt_status kt__write_file_atomic(const char *path, const void *data, size_t size);

#endif
