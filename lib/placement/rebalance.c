/* Dynamic rebalancing: decayed counts with hysteresis, moves only when the
 * expected gain over a horizon beats the copy cost. The per-layer number of
 * GPU experts never changes (a move swaps one expert in and one out), so GPU
 * memory use is constant. Works for decode as well as prefill: it only needs
 * the routed ids of each step. */
#include <math.h>
#include <stdlib.h>

#include "kt/placement.h"
#include "kt_internal.h"
#include "placement_internal.h"

struct kt_rebalancer {
    kt_rebalancer_options opts;
    kt_placement *placement;   /* borrowed                               */
    kt_expert_stats *ema;      /* decayed counts and decayed token total */
    uint32_t *order;           /* [n_experts] scratch                    */
    uint32_t *order2;          /* [n_experts] scratch                    */
};

kt_status kt_rebalancer_create(kt_rebalancer **out, kt_placement *placement,
                               const kt_expert_stats *prior, const kt_rebalancer_options *opts)
{
    if (!out || !placement)
        return kt__error(KT_ERR_INVALID_ARG, "kt_rebalancer_create: NULL argument");
    *out = NULL;
    kt_rebalancer_options o = KT_REBALANCER_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_rebalancer_options");
    if (st < 0)
        return st;
    if (o.flags || !(o.half_life_tokens > 0) || !(o.hysteresis >= 1.0) ||
        !(o.horizon_tokens > 0) || !(o.move_cost_pairs >= 0))
        return kt__error(KT_ERR_INVALID_ARG,
                         "kt_rebalancer_options: need half_life > 0, hysteresis >= 1, "
                         "horizon > 0, move cost >= 0, flags 0");
    if (prior && (prior->n_layers != placement->n_layers ||
                  prior->n_experts != placement->n_experts))
        return kt__error(KT_ERR_INVALID_ARG, "rebalancer: prior statistics have another shape");
    kt_rebalancer *r = kt__calloc(1, sizeof *r);
    if (!r)
        return KT_ERR_NOMEM;
    r->opts = o;
    r->placement = placement;
    r->order = kt__malloc_array(placement->n_experts, sizeof(uint32_t));
    r->order2 = kt__malloc_array(placement->n_experts, sizeof(uint32_t));
    if (!r->order || !r->order2 ||
        (st = kt_expert_stats_create(&r->ema, placement->n_layers, placement->n_experts)) < 0) {
        kt_rebalancer_free(r);
        return st < 0 ? st : KT_ERR_NOMEM;
    }
    if (prior) {
        memcpy(r->ema->counts, prior->counts,
               sizeof(double) * placement->n_layers * placement->n_experts);
        r->ema->tokens = prior->tokens;
    }
    *out = r;
    return KT_OK;
}

void kt_rebalancer_free(kt_rebalancer *r)
{
    if (!r)
        return;
    kt_expert_stats_free(r->ema);
    kt__free(r->order);
    kt__free(r->order2);
    kt__free(r);
}

const kt_expert_stats *kt_rebalancer_stats(const kt_rebalancer *r)
{
    return r ? r->ema : NULL;
}

kt_status kt_rebalancer_observe(kt_rebalancer *r, uint32_t layer, const int32_t *ids, size_t n)
{
    if (!r)
        return kt__error(KT_ERR_INVALID_ARG, "kt_rebalancer_observe: NULL rebalancer");
    return kt_expert_stats_record(r->ema, layer, ids, n);
}

void kt_rebalancer_advance(kt_rebalancer *r, uint64_t n_tokens)
{
    if (!r || n_tokens == 0)
        return;
    /* The counts of this step are already in; decay everything including them
     * by the step's length (a step's own observations count at half weight at
     * most for long prefills — fine for a rate estimate). */
    double factor = exp2(-(double)n_tokens / r->opts.half_life_tokens);
    r->ema->tokens += (double)n_tokens;
    kt_expert_stats_scale(r->ema, factor);
}

/* Sort helpers over one layer's counts. */
static const double *sort_row;
static int cmp_desc(const void *a, const void *b)
{
    double x = sort_row[*(const uint32_t *)a], y = sort_row[*(const uint32_t *)b];
    if (x != y)
        return x > y ? -1 : 1;
    return (*(const uint32_t *)a > *(const uint32_t *)b) -
           (*(const uint32_t *)a < *(const uint32_t *)b);
}
static int cmp_asc(const void *a, const void *b)
{
    return -cmp_desc(a, b);
}

static int cmp_move(const void *a, const void *b)
{
    const kt_expert_move *x = a, *y = b;
    if (x->gain != y->gain)
        return x->gain > y->gain ? -1 : 1;
    return (x->layer > y->layer) - (x->layer < y->layer);
}

kt_status kt_rebalancer_plan(kt_rebalancer *r, kt_expert_move *moves, size_t capacity,
                             size_t *n_moves)
{
    if (!r || !n_moves || (!moves && capacity))
        return kt__error(KT_ERR_INVALID_ARG, "kt_rebalancer_plan: NULL argument");
    *n_moves = 0;
    const kt_placement *p = r->placement;
    const uint32_t E = p->n_experts;
    const double tokens = r->ema->tokens;
    if (tokens <= 0.0)
        return KT_OK;
    size_t limit = KT_MIN(capacity, (size_t)r->opts.max_moves), n = 0;
    for (uint32_t l = 0; l < p->n_layers; l++) {
        if (!p->moe[l])
            continue;
        const double *row = r->ema->counts + (size_t)l * E;
        const uint8_t *gpu = p->gpu + (size_t)l * E;
        uint32_t n_in = 0, n_out = 0;
        for (uint32_t e = 0; e < E; e++) {
            if (gpu[e])
                r->order2[n_out++] = e;  /* GPU residents: candidates to leave */
            else
                r->order[n_in++] = e;    /* CPU experts: candidates to come in */
        }
        if (!n_in || !n_out)
            continue;
        /* Not thread-safe by design: a rebalancer is used by one thread at a time. */
        sort_row = row;
        qsort(r->order, n_in, sizeof(uint32_t), cmp_desc);
        qsort(r->order2, n_out, sizeof(uint32_t), cmp_asc);
        /* Pair the hottest CPU expert with the coldest GPU one while it pays. */
        for (uint32_t i = 0; i < n_in && i < n_out; i++) {
            double rate_in = row[r->order[i]] / tokens, rate_out = row[r->order2[i]] / tokens;
            if (rate_in <= rate_out * r->opts.hysteresis || rate_in <= 0.0)
                break;
            double gain = (rate_in - rate_out) * r->opts.horizon_tokens - r->opts.move_cost_pairs;
            if (gain <= 0.0)
                break;
            if (n < capacity) {
                moves[n] = (kt_expert_move){l, r->order[i], r->order2[i], 0, gain};
                n++;
            } else {
                /* Keep the best `capacity` moves overall: replace the worst if better. */
                size_t worst = 0;
                for (size_t j = 1; j < n; j++)
                    if (moves[j].gain < moves[worst].gain)
                        worst = j;
                if (n && gain > moves[worst].gain)
                    moves[worst] = (kt_expert_move){l, r->order[i], r->order2[i], 0, gain};
            }
        }
    }
    qsort(moves, n, sizeof *moves, cmp_move);
    *n_moves = KT_MIN(n, limit);
    return KT_OK;
}

kt_status kt_rebalancer_apply(kt_rebalancer *r, const kt_expert_move *moves, size_t n_moves)
{
    if (!r || (!moves && n_moves))
        return kt__error(KT_ERR_INVALID_ARG, "kt_rebalancer_apply: NULL argument");
    kt_placement *p = r->placement;
    for (size_t i = 0; i < n_moves; i++) {
        const kt_expert_move *m = &moves[i];
        if (!kt_placement_is_moe_layer(p, m->layer) || m->expert_in >= p->n_experts ||
            m->expert_out >= p->n_experts || kt_placement_on_gpu(p, m->layer, m->expert_in) ||
            !kt_placement_on_gpu(p, m->layer, m->expert_out))
            return kt__error(KT_ERR_INVALID_ARG,
                             "rebalancer: move %zu (layer %u, in %u, out %u) does not match the "
                             "placement; nothing applied after move %zu",
                             i, m->layer, m->expert_in, m->expert_out, i);
        p->gpu[(size_t)m->layer * p->n_experts + m->expert_in] = 1;
        p->gpu[(size_t)m->layer * p->n_experts + m->expert_out] = 0;
    }
    return KT_OK;
}
