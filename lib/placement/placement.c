/* Expert placement: budgets, strategies, inspection, dynamic rebalancing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "kt/placement.h"
#include "kt_internal.h"
#include "placement_internal.h"

static const char *const strategy_names[] = {
    [KT_PLACEMENT_AUTO] = "auto",
    [KT_PLACEMENT_UNIFORM] = "uniform",
    [KT_PLACEMENT_FRONT_LOADING] = "front-loading",
    [KT_PLACEMENT_RANDOM] = "random",
    [KT_PLACEMENT_FREQUENCY] = "frequency",
};

const char *kt_placement_strategy_name(kt_placement_strategy s)
{
    if ((unsigned)s >= KT_ARRAY_LEN(strategy_names))
        return NULL;
    return strategy_names[s];
}

int32_t kt_placement_strategy_from_name(const char *name)
{
    if (!name)
        return -1;
    for (unsigned i = 0; i < KT_ARRAY_LEN(strategy_names); i++)
        if (!strcasecmp(name, strategy_names[i]))
            return (int32_t)i;
    if (!strcasecmp(name, "front_loading") || !strcasecmp(name, "frontloading"))
        return KT_PLACEMENT_FRONT_LOADING;
    return -1;
}

/* splitmix64: a small, well-mixed generator for the seeded random strategy. */
static uint64_t mix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

typedef struct {
    double count;
    uint32_t layer, expert;
} cell;

/* Descending count, then ascending (layer, expert): deterministic ties. */
static int cmp_cell_desc(const void *a, const void *b)
{
    const cell *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return (x->expert > y->expert) - (x->expert < y->expert);
}

static kt_status resolve_total(const kt_placement_options *o, uint32_t n_moe, uint32_t E,
                               uint64_t *total)
{
    uint64_t cap = (uint64_t)n_moe * E;
    switch (o->budget) {
    case KT_BUDGET_NONE:
        *total = 0;
        break;
    case KT_BUDGET_PER_LAYER:
        if (o->per_layer > E)
            return kt__error(KT_ERR_INVALID_ARG,
                             "placement: %u GPU experts per layer but layers have only %u",
                             o->per_layer, E);
        *total = (uint64_t)o->per_layer * n_moe;
        break;
    case KT_BUDGET_RATIO:
        if (!(o->ratio >= 0.0 && o->ratio <= 1.0))
            return kt__error(KT_ERR_INVALID_ARG, "placement: GPU expert ratio %g not in 0..1",
                             o->ratio);
        *total = (uint64_t)floor(o->ratio * (double)cap + 1e-9);
        break;
    case KT_BUDGET_BYTES:
        if (o->bytes_per_expert == 0)
            return kt__error(KT_ERR_INVALID_ARG,
                             "placement: a byte budget needs bytes_per_expert > 0");
        *total = o->budget_bytes / o->bytes_per_expert;
        break;
    default:
        return kt__error(KT_ERR_INVALID_ARG, "placement: unknown budget kind %d", o->budget);
    }
    if (*total > cap)
        *total = cap;
    return KT_OK;
}

kt_status kt_placement_create(kt_placement **out, uint32_t n_layers, uint32_t n_experts,
                              const uint8_t *moe_layers, const kt_placement_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_placement_create: out is NULL");
    *out = NULL;
    kt_placement_options o = KT_PLACEMENT_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_placement_options");
    if (st < 0)
        return st;
    if (o.flags)
        return kt__error(KT_ERR_INVALID_ARG, "kt_placement_options: unknown flags 0x%x", o.flags);
    if (n_layers == 0 || n_experts == 0 || n_layers > 4096 || n_experts > 65536)
        return kt__error(KT_ERR_INVALID_ARG, "placement: %u layers x %u experts out of range",
                         n_layers, n_experts);
    if (o.strategy < KT_PLACEMENT_AUTO || o.strategy > KT_PLACEMENT_FREQUENCY)
        return kt__error(KT_ERR_INVALID_ARG, "placement: unknown strategy %d", o.strategy);
    if (o.stats && (o.stats->n_layers != n_layers || o.stats->n_experts != n_experts))
        return kt__error(KT_ERR_INVALID_ARG,
                         "placement: statistics are %u layers x %u experts, the model has %u x %u",
                         o.stats->n_layers, o.stats->n_experts, n_layers, n_experts);
    if (o.strategy == KT_PLACEMENT_AUTO)
        o.strategy = o.stats ? KT_PLACEMENT_FREQUENCY : KT_PLACEMENT_UNIFORM;
    if (o.strategy == KT_PLACEMENT_FREQUENCY && !o.stats)
        return kt__error(KT_ERR_INVALID_ARG,
                         "placement: the frequency strategy needs activation statistics");

    kt_placement *p = kt__calloc(1, sizeof *p);
    if (!p)
        return KT_ERR_NOMEM;
    p->n_layers = n_layers;
    p->n_experts = n_experts;
    p->strategy = o.strategy;
    p->moe = kt__calloc(n_layers, 1);
    p->gpu = kt__calloc((size_t)n_layers * n_experts, 1);
    if (!p->moe || !p->gpu) {
        kt_placement_free(p);
        return KT_ERR_NOMEM;
    }
    uint32_t n_moe = 0;
    for (uint32_t l = 0; l < n_layers; l++) {
        p->moe[l] = moe_layers ? (moe_layers[l] != 0) : 1;
        n_moe += p->moe[l];
    }
    uint64_t total = 0;
    if ((st = resolve_total(&o, n_moe, n_experts, &total)) < 0) {
        kt_placement_free(p);
        return st;
    }
    const uint32_t E = n_experts;
    if (total == 0 || n_moe == 0) {
        *out = p;
        return KT_OK;
    }

    switch (o.strategy) {
    case KT_PLACEMENT_UNIFORM: {
        /* floor(total / L) per MoE layer, the first total mod L get one more; ids 0..n-1. */
        uint64_t base = total / n_moe, extra = total % n_moe;
        uint32_t i = 0;
        for (uint32_t l = 0; l < n_layers; l++) {
            if (!p->moe[l])
                continue;
            uint64_t n = base + (i++ < extra ? 1 : 0);
            memset(p->gpu + (size_t)l * E, 1, (size_t)KT_MIN(n, (uint64_t)E));
        }
        break;
    }
    case KT_PLACEMENT_FRONT_LOADING: {
        uint64_t left = total;
        for (uint32_t l = 0; l < n_layers && left; l++) {
            if (!p->moe[l])
                continue;
            uint64_t n = KT_MIN(left, (uint64_t)E);
            memset(p->gpu + (size_t)l * E, 1, (size_t)n);
            left -= n;
        }
        break;
    }
    case KT_PLACEMENT_RANDOM:
    case KT_PLACEMENT_FREQUENCY: {
        /* Random: a seeded Fisher-Yates shuffle of the MoE cells, first `total`.
         * Frequency: the global top-`total` cells by recorded count. */
        cell *cells = kt__malloc_array((size_t)n_moe * E, sizeof(cell));
        if (!cells) {
            kt_placement_free(p);
            return KT_ERR_NOMEM;
        }
        size_t n = 0;
        for (uint32_t l = 0; l < n_layers; l++)
            if (p->moe[l])
                for (uint32_t e = 0; e < E; e++)
                    cells[n++] = (cell){o.stats ? o.stats->counts[(size_t)l * E + e] : 0.0, l, e};
        if (o.strategy == KT_PLACEMENT_RANDOM) {
            uint64_t state = o.seed;
            for (size_t i = n - 1; i > 0; i--) {
                size_t j = (size_t)(mix64(&state) % (i + 1));
                cell t = cells[i];
                cells[i] = cells[j];
                cells[j] = t;
            }
        } else {
            qsort(cells, n, sizeof *cells, cmp_cell_desc);
        }
        for (uint64_t i = 0; i < total; i++)
            p->gpu[(size_t)cells[i].layer * E + cells[i].expert] = 1;
        kt__free(cells);
        break;
    }
    }
    *out = p;
    return KT_OK;
}

void kt_placement_free(kt_placement *p)
{
    if (!p)
        return;
    kt__free(p->moe);
    kt__free(p->gpu);
    kt__free(p);
}

uint32_t kt_placement_n_layers(const kt_placement *p)
{
    return p ? p->n_layers : 0;
}

uint32_t kt_placement_n_experts(const kt_placement *p)
{
    return p ? p->n_experts : 0;
}

int32_t kt_placement_is_moe_layer(const kt_placement *p, uint32_t layer)
{
    return p && layer < p->n_layers ? p->moe[layer] : 0;
}

int32_t kt_placement_on_gpu(const kt_placement *p, uint32_t layer, uint32_t expert)
{
    if (!p || layer >= p->n_layers || expert >= p->n_experts)
        return 0;
    return p->gpu[(size_t)layer * p->n_experts + expert];
}

const uint8_t *kt_placement_gpu_mask(const kt_placement *p, uint32_t layer)
{
    if (!p || layer >= p->n_layers)
        return NULL;
    return p->gpu + (size_t)layer * p->n_experts;
}

uint32_t kt_placement_gpu_count(const kt_placement *p, uint32_t layer)
{
    if (!p || layer >= p->n_layers)
        return 0;
    uint32_t n = 0;
    for (uint32_t e = 0; e < p->n_experts; e++)
        n += p->gpu[(size_t)layer * p->n_experts + e];
    return n;
}

uint64_t kt_placement_gpu_total(const kt_placement *p)
{
    uint64_t n = 0;
    for (uint32_t l = 0; p && l < p->n_layers; l++)
        n += kt_placement_gpu_count(p, l);
    return n;
}

kt_status kt_placement_set(kt_placement *p, uint32_t layer, uint32_t expert, int32_t to_gpu)
{
    if (!p || layer >= p->n_layers || expert >= p->n_experts)
        return kt__error(KT_ERR_INVALID_ARG, "kt_placement_set: cell (%u, %u) out of range",
                         layer, expert);
    if (!p->moe[layer])
        return kt__error(KT_ERR_INVALID_ARG, "kt_placement_set: layer %u is not a MoE layer",
                         layer);
    p->gpu[(size_t)layer * p->n_experts + expert] = to_gpu ? 1 : 0;
    return KT_OK;
}

double kt_placement_coverage(const kt_placement *p, const kt_expert_stats *s)
{
    if (!p || !s || s->n_layers != p->n_layers || s->n_experts != p->n_experts)
        return 0.0;
    double gpu = 0.0, all = 0.0;
    for (size_t i = 0; i < (size_t)p->n_layers * p->n_experts; i++) {
        if (!p->moe[i / p->n_experts])
            continue;
        all += s->counts[i];
        if (p->gpu[i])
            gpu += s->counts[i];
    }
    return all > 0.0 ? gpu / all : 0.0;
}

kt_status kt_placement_describe(const kt_placement *p, int32_t json, kt_buf *out)
{
    if (!p || !out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_placement_describe: NULL argument");
    kt_status st;
    const uint32_t E = p->n_experts;
    if (json) {
        st = kt__buf_appendf(out, "{\"strategy\": \"%s\", \"n_layers\": %u, \"n_experts\": %u, "
                                  "\"gpu_total\": %llu, \"layers\": [",
                             kt_placement_strategy_name(p->strategy), p->n_layers, E,
                             (unsigned long long)kt_placement_gpu_total(p));
        for (uint32_t l = 0; st == KT_OK && l < p->n_layers; l++) {
            st = kt__buf_appendf(out, "%s{\"layer\": %u, \"moe\": %s, \"gpu_experts\": [",
                                 l ? ", " : "", l, p->moe[l] ? "true" : "false");
            int first = 1;
            for (uint32_t e = 0; st == KT_OK && e < E; e++)
                if (p->gpu[(size_t)l * E + e]) {
                    st = kt__buf_appendf(out, "%s%u", first ? "" : ", ", e);
                    first = 0;
                }
            if (st == KT_OK)
                st = kt__buf_append(out, "]}", 2);
        }
        return st == KT_OK ? kt__buf_append(out, "]}", 2) : st;
    }
    uint64_t n_moe = 0;
    for (uint32_t l = 0; l < p->n_layers; l++)
        n_moe += p->moe[l];
    st = kt__buf_appendf(out, "placement: %s, %llu of %llu routed experts on the GPU\n",
                         kt_placement_strategy_name(p->strategy),
                         (unsigned long long)kt_placement_gpu_total(p),
                         (unsigned long long)(n_moe * E));
    /* One line per run of layers with the same map; GPU experts as compressed
     * id ranges ("0-5,9,12-16"). */
    for (uint32_t l = 0, next; st == KT_OK && l < p->n_layers; l = next) {
        next = l + 1;
        while (next < p->n_layers && p->moe[next] == p->moe[l] &&
               !memcmp(p->gpu + (size_t)next * E, p->gpu + (size_t)l * E, E))
            next++;
        char name[32];
        if (next - l > 1)
            snprintf(name, sizeof name, "layers %u-%u", l, next - 1);
        else
            snprintf(name, sizeof name, "layer %u", l);
        if (!p->moe[l]) {
            st = kt__buf_appendf(out, "  %-13s dense\n", name);
            continue;
        }
        st = kt__buf_appendf(out, "  %-13s %4u/%u on GPU", name, kt_placement_gpu_count(p, l),
                             E);
        const uint8_t *row = p->gpu + (size_t)l * E;
        int first = 1;
        for (uint32_t e = 0; st == KT_OK && e < E;) {
            if (!row[e]) {
                e++;
                continue;
            }
            uint32_t end = e;
            while (end + 1 < E && row[end + 1])
                end++;
            if (end == e)
                st = kt__buf_appendf(out, "%s%u", first ? "  [" : ",", e);
            else
                st = kt__buf_appendf(out, "%s%u-%u", first ? "  [" : ",", e, end);
            first = 0;
            e = end + 1;
        }
        if (st == KT_OK)
            st = kt__buf_append(out, first ? "\n" : "]\n", first ? 1 : 2);
    }
    return st;
}
