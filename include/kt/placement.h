/*
 * kt/placement.h - which experts live on the GPU: budgets, strategies,
 * activation statistics and dynamic rebalancing.
 *
 * A placement is a [n_layers][n_experts] map of (layer, expert) -> device.
 * Layers that are not MoE layers hold no experts. The per-layer row returned
 * by kt_placement_gpu_mask() is exactly the skip mask the CPU MoE backend
 * takes (nonzero = GPU-resident, the CPU skips it).
 *
 *     kt_placement_options po = KT_PLACEMENT_OPTIONS_INIT;
 *     po.strategy = KT_PLACEMENT_FREQUENCY;  po.stats = stats;
 *     po.budget = KT_BUDGET_RATIO;           po.ratio = 0.25;
 *     kt_placement *p = NULL;
 *     kt_placement_create(&p, n_layers, n_experts, moe_layers, &po);
 *
 * Budgets (kt-kernel's meanings): experts per MoE layer (total = n x MoE
 * layers, then distributed by the strategy), a share of all routed experts
 * (total = floor(ratio x MoE layers x E)), or bytes of GPU memory divided by
 * the bytes of one expert.
 *
 * Strategies: uniform (total spread evenly, the first `total mod L` MoE layers
 * get one more; lowest expert ids), front-loading (fill layers in order),
 * random (seeded sample of cells), frequency (global top cells by recorded
 * counts), auto (frequency when statistics are given, else uniform).
 *
 * Statistics file (kt_expert_stats_save): JSON
 *   {"format": "libkt.expert_stats", "version": 1, "n_layers": L,
 *    "n_experts": E, "tokens": N, "counts": [[c00, c01, ...], ...]}
 * kt_expert_stats_load() also reads NumPy .npy arrays of shape
 * [buffer][layers][experts] or [layers][experts] (kt-kernel / SGLang dumps
 * exported with numpy.save), summed over the first axis.
 *
 * Thread contract: placements, stats, traces and rebalancers are used by one
 * thread at a time.
 */
#ifndef KT_PLACEMENT_H
#define KT_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- activation statistics ---------------------------------------------- */

typedef struct kt_expert_stats kt_expert_stats;

/* Zeroed counts for n_layers x n_experts. Caller owns *out; free with
 * kt_expert_stats_free(). Since 0.1. */
KT_API kt_status kt_expert_stats_create(kt_expert_stats **out, uint32_t n_layers,
                                        uint32_t n_experts);
KT_API void kt_expert_stats_free(kt_expert_stats *stats); /* NULL: no-op */

/* Counts the routed ids of one layer: ids[n] (-1 entries are skipped; any id
 * >= n_experts fails with KT_ERR_INVALID_ARG and changes nothing). Since 0.1. */
KT_API kt_status kt_expert_stats_record(kt_expert_stats *stats, uint32_t layer,
                                        const int32_t *ids, size_t n);
/* Adds `count` to one cell. Since 0.1. */
KT_API kt_status kt_expert_stats_add(kt_expert_stats *stats, uint32_t layer, uint32_t expert,
                                     double count);
/* Adds `n` to the token counter (tokens observed). Since 0.1. */
KT_API void kt_expert_stats_add_tokens(kt_expert_stats *stats, uint64_t n);
/* Multiplies every count by `factor` (exponential decay). Since 0.1. */
KT_API void kt_expert_stats_scale(kt_expert_stats *stats, double factor);
/* Cell count; 0 when out of range. Since 0.1. */
KT_API double kt_expert_stats_count(const kt_expert_stats *stats, uint32_t layer,
                                    uint32_t expert);
KT_API uint32_t kt_expert_stats_n_layers(const kt_expert_stats *stats);
KT_API uint32_t kt_expert_stats_n_experts(const kt_expert_stats *stats);
KT_API uint64_t kt_expert_stats_tokens(const kt_expert_stats *stats);

/* Writes the JSON file described above (atomically: temp file + rename). Since 0.1. */
KT_API kt_status kt_expert_stats_save(const kt_expert_stats *stats, const char *path);
/* Reads a JSON statistics file or a .npy array (by content, not extension).
 * KT_ERR_FORMAT names the file and the problem. Since 0.1. */
KT_API kt_status kt_expert_stats_load(kt_expert_stats **out, const char *path);

/* ---- placement ------------------------------------------------------------ */

typedef enum kt_placement_strategy {
    KT_PLACEMENT_AUTO = 0,
    KT_PLACEMENT_UNIFORM = 1,
    KT_PLACEMENT_FRONT_LOADING = 2,
    KT_PLACEMENT_RANDOM = 3,
    KT_PLACEMENT_FREQUENCY = 4
} kt_placement_strategy;

typedef enum kt_placement_budget {
    KT_BUDGET_NONE = 0,        /* no GPU experts                           */
    KT_BUDGET_PER_LAYER = 1,   /* per_layer experts per MoE layer          */
    KT_BUDGET_RATIO = 2,       /* ratio of all routed experts              */
    KT_BUDGET_BYTES = 3        /* budget_bytes / bytes_per_expert experts  */
} kt_placement_budget;

typedef struct kt_placement_options {
    uint32_t struct_size;
    uint32_t flags;              /* reserved, must be 0                           */
    int32_t strategy;            /* kt_placement_strategy                         */
    int32_t budget;              /* kt_placement_budget                           */
    uint32_t per_layer;          /* KT_BUDGET_PER_LAYER                           */
    double ratio;                /* KT_BUDGET_RATIO, 0..1                         */
    uint64_t budget_bytes;       /* KT_BUDGET_BYTES                               */
    uint64_t bytes_per_expert;   /* KT_BUDGET_BYTES: gate+up+down of one expert  */
    uint64_t seed;               /* KT_PLACEMENT_RANDOM                           */
    const kt_expert_stats *stats; /* KT_PLACEMENT_FREQUENCY / AUTO; borrowed for the call */
} kt_placement_options;

#define KT_PLACEMENT_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_placement_options), 0u, KT_PLACEMENT_AUTO, KT_BUDGET_NONE, 0u, 0.0, \
      0u, 0u, 42u, NULL }

typedef struct kt_placement kt_placement;

/* Resolves a placement. moe_layers[n_layers] marks MoE layers (nonzero); NULL
 * means every layer. The statistics, if given, must have the same shape.
 * Caller owns *out; free with kt_placement_free(). Since 0.1. */
KT_API kt_status kt_placement_create(kt_placement **out, uint32_t n_layers, uint32_t n_experts,
                                     const uint8_t *moe_layers, const kt_placement_options *opts);
KT_API void kt_placement_free(kt_placement *placement); /* NULL: no-op */

KT_API uint32_t kt_placement_n_layers(const kt_placement *p);
KT_API uint32_t kt_placement_n_experts(const kt_placement *p);
/* Whether layer is a MoE layer. Since 0.1. */
KT_API int32_t kt_placement_is_moe_layer(const kt_placement *p, uint32_t layer);
/* 1 if (layer, expert) is on the GPU, 0 if on the CPU or out of range. Since 0.1. */
KT_API int32_t kt_placement_on_gpu(const kt_placement *p, uint32_t layer, uint32_t expert);
/* Row [n_experts] of layer (1 = GPU); borrowed, valid until the placement
 * changes or is freed; NULL when out of range. Since 0.1. */
KT_API const uint8_t *kt_placement_gpu_mask(const kt_placement *p, uint32_t layer);
/* GPU experts in one layer / in all layers. Since 0.1. */
KT_API uint32_t kt_placement_gpu_count(const kt_placement *p, uint32_t layer);
KT_API uint64_t kt_placement_gpu_total(const kt_placement *p);
/* Moves one expert (to_gpu 1: CPU -> GPU, 0: back). Since 0.1. */
KT_API kt_status kt_placement_set(kt_placement *p, uint32_t layer, uint32_t expert,
                                  int32_t to_gpu);
/* Share of recorded (token, expert) pairs the GPU would serve, 0..1. Since 0.1. */
KT_API double kt_placement_coverage(const kt_placement *p, const kt_expert_stats *stats);
/* Human-readable map (json = 0) or JSON (json = 1) appended to out. Since 0.1. */
KT_API kt_status kt_placement_describe(const kt_placement *p, int32_t json, kt_buf *out);
/* "uniform", "front-loading", "random", "frequency", "auto"; NULL if unknown. Since 0.1. */
KT_API const char *kt_placement_strategy_name(kt_placement_strategy strategy);
/* Parses a strategy name; -1 if unknown. Since 0.1. */
KT_API int32_t kt_placement_strategy_from_name(const char *name);

/* ---- routing traces --------------------------------------------------------- */

/* The routed expert ids of a run, per step and MoE layer, for replay (e.g.
 * `kt-bench placement`). A record is one layer's ids for the tokens of one
 * forward step, ids[n_tokens][top_k] (-1 = no expert); a record whose layer is
 * not above the previous record's layer starts a new step.
 *
 * File (kt_route_trace_save), little-endian:
 *   "KTROUTE1" (8 bytes), u32 version = 1, u32 n_layers, u32 n_experts,
 *   u32 top_k, u64 n_records; then per record: u32 layer, u32 n_tokens,
 *   i32 ids[n_tokens * top_k]. */
typedef struct kt_route_trace kt_route_trace;

/* An empty trace for a model of n_layers layers (dense ones included) with
 * n_experts routed experts, top_k per token. Caller owns *out; free with
 * kt_route_trace_free(). Since 0.1. */
KT_API kt_status kt_route_trace_create(kt_route_trace **out, uint32_t n_layers,
                                       uint32_t n_experts, uint32_t top_k);
KT_API void kt_route_trace_free(kt_route_trace *trace); /* NULL: no-op */
/* Appends one record (ids copied). Ids must be -1 or below n_experts, layer
 * below n_layers: else KT_ERR_INVALID_ARG and nothing changes. Since 0.1. */
KT_API kt_status kt_route_trace_record(kt_route_trace *trace, uint32_t layer,
                                       const int32_t *ids, uint32_t n_tokens);
/* Shape and number of records; 0 for NULL. Since 0.1. */
KT_API uint32_t kt_route_trace_n_layers(const kt_route_trace *trace);
KT_API uint32_t kt_route_trace_n_experts(const kt_route_trace *trace);
KT_API uint32_t kt_route_trace_top_k(const kt_route_trace *trace);
KT_API size_t kt_route_trace_n_records(const kt_route_trace *trace);
/* Record `index`: its layer, token count and ids (borrowed, valid until the
 * next record or free). KT_ERR_INVALID_ARG when out of range. Since 0.1. */
KT_API kt_status kt_route_trace_get(const kt_route_trace *trace, size_t index, uint32_t *layer,
                                    uint32_t *n_tokens, const int32_t **ids);
/* Adds every record to stats (same shape) and the tokens of every step.
 * Records [first, last) only; last = SIZE_MAX for all. Since 0.1. */
KT_API kt_status kt_route_trace_to_stats(const kt_route_trace *trace, size_t first, size_t last,
                                         kt_expert_stats *stats);
/* Writes the file described above (atomically). Since 0.1. */
KT_API kt_status kt_route_trace_save(const kt_route_trace *trace, const char *path);
/* Reads a trace file; KT_ERR_FORMAT names the file and the problem. Since 0.1. */
KT_API kt_status kt_route_trace_load(kt_route_trace **out, const char *path);

/* ---- dynamic rebalancing -------------------------------------------------- */

/* One expert move: `layer`'s expert `in` comes to the GPU, `out` leaves it. */
typedef struct kt_expert_move {
    uint32_t layer;
    uint32_t expert_in;
    uint32_t expert_out;
    uint32_t reserved;
    double gain;   /* expected GPU-served pairs gained over the horizon, minus the cost */
} kt_expert_move;

typedef struct kt_rebalancer_options {
    uint32_t struct_size;
    uint32_t flags;             /* reserved, must be 0                                 */
    double half_life_tokens;    /* EMA half-life of the counts, in tokens (default 2048) */
    double hysteresis;          /* an incoming expert's rate must beat the outgoing one's
                                   by this factor (default 1.25)                        */
    double horizon_tokens;      /* tokens the new placement is expected to serve (4096) */
    double move_cost_pairs;     /* cost of one move in (token, expert) pairs the CPU could
                                   have served meanwhile (default 64)                   */
    uint32_t max_moves;         /* per plan, all layers (default 16)                    */
    uint32_t reserved;
} kt_rebalancer_options;

#define KT_REBALANCER_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_rebalancer_options), 0u, 2048.0, 1.25, 4096.0, 64.0, 16u, 0u }

typedef struct kt_rebalancer kt_rebalancer;

/* Watches routing on top of `placement` (borrowed; must outlive the
 * rebalancer; plans are applied to it by kt_rebalancer_apply). Seeds the
 * history from `prior` when given. Since 0.1. */
KT_API kt_status kt_rebalancer_create(kt_rebalancer **out, kt_placement *placement,
                                      const kt_expert_stats *prior,
                                      const kt_rebalancer_options *opts);
KT_API void kt_rebalancer_free(kt_rebalancer *r); /* NULL: no-op */
/* Records one layer's routed ids of the current step (ids[n_ids], -1
 * skipped). Call for every MoE layer of a step, decode or prefill. Since 0.1. */
KT_API kt_status kt_rebalancer_observe(kt_rebalancer *r, uint32_t layer, const int32_t *ids,
                                       size_t n_ids);
/* Ends a step of n_tokens tokens: older observations decay by
 * 2^(-n_tokens / half_life_tokens). Since 0.1. */
KT_API void kt_rebalancer_advance(kt_rebalancer *r, uint64_t n_tokens);
/* Proposes moves whose expected gain beats their cost (best first), at most
 * `capacity`; *n_moves receives the count. Changes nothing. Since 0.1. */
KT_API kt_status kt_rebalancer_plan(kt_rebalancer *r, kt_expert_move *moves, size_t capacity,
                                    size_t *n_moves);
/* Applies moves to the placement (after the caller copied the weights). Since 0.1. */
KT_API kt_status kt_rebalancer_apply(kt_rebalancer *r, const kt_expert_move *moves,
                                     size_t n_moves);
/* The decayed statistics the rebalancer keeps; borrowed. Since 0.1. */
KT_API const kt_expert_stats *kt_rebalancer_stats(const kt_rebalancer *r);

#ifdef __cplusplus
}
#endif
#endif /* KT_PLACEMENT_H */
