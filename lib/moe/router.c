/*
 * Router helpers (kt/moe.h): logits -> top-k ids and weights, per family, as
 * the transformers reference computes them (landscape.md §3.8). Selection
 * picks the larger score and, on equal scores, the lower expert index.
 */
#include <math.h>
#include <string.h>

#include "kt/moe.h"
#include "kt_internal.h"

#define MAX_EXPERTS 4096
#define MAX_GROUPS 256

/* Index of the largest v[i] with !taken[i]; ties: lowest i. -1 if none. */
static int argmax_free(const float *v, const uint8_t *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (taken[i])
            continue;
        if (best < 0 || v[i] > v[best] || (isnan(v[best]) && !isnan(v[i])))
            best = i;
    }
    return best;
}

/* ids[0..k) = indices of the k largest v (descending, lower index first on ties). */
static void top_k(const float *v, int n, int k, int32_t *ids, uint8_t *taken)
{
    memset(taken, 0, (size_t)n);
    for (int j = 0; j < k; j++) {
        int i = argmax_free(v, taken, n);
        taken[i] = 1;
        ids[j] = i;
    }
}

static kt_status check_params(const kt_router_params *p)
{
    if (p->struct_size < sizeof(uint32_t))
        return kt__error(KT_ERR_INVALID_ARG, "kt_router_topk: params.struct_size not set");
    if (p->kind != KT_ROUTER_SOFTMAX_TOPK && p->kind != KT_ROUTER_SIGMOID_GROUPED &&
        p->kind != KT_ROUTER_TOPK_SOFTMAX)
        return kt__error(KT_ERR_INVALID_ARG, "kt_router_topk: unknown router kind %d", p->kind);
    if (p->flags & ~KT_ROUTER_F_RENORM)
        return kt__error(KT_ERR_INVALID_ARG, "kt_router_topk: unknown flags 0x%x", p->flags);
    if (p->n_experts == 0 || p->n_experts > MAX_EXPERTS || p->top_k == 0 ||
        p->top_k > p->n_experts)
        return kt__error(KT_ERR_INVALID_ARG,
                         "kt_router_topk: need 1 <= top_k (%u) <= n_experts (%u) <= %d",
                         p->top_k, p->n_experts, MAX_EXPERTS);
    if (p->kind == KT_ROUTER_SIGMOID_GROUPED && p->n_group > 1) {
        uint32_t per = p->n_experts / p->n_group;
        if (p->n_group > MAX_GROUPS || p->n_experts % p->n_group || per < 2 ||
            p->topk_group == 0 || p->topk_group > p->n_group || p->top_k > p->topk_group * per)
            return kt__error(KT_ERR_INVALID_ARG,
                             "kt_router_topk: bad grouping (n_experts %u, n_group %u, "
                             "topk_group %u, top_k %u)",
                             p->n_experts, p->n_group, p->topk_group, p->top_k);
    }
    return KT_OK;
}

kt_status kt_router_topk(const kt_router_params *params, const float *logits, uint32_t n_tokens,
                         int32_t *ids, float *weights, float *scores)
{
    if (!params || (n_tokens && (!logits || !ids || !weights)))
        return kt__error(KT_ERR_INVALID_ARG, "kt_router_topk: params, logits, ids and weights "
                                             "are required");
    kt_router_params p = KT_ROUTER_PARAMS_INIT;
    kt_status st = kt__options_read(&p, sizeof p, params, "kt_router_params");
    if (st < 0 || (st = check_params(&p)) < 0)
        return st;
    int E = (int)p.n_experts, k = (int)p.top_k;
    bool renorm = p.flags & KT_ROUTER_F_RENORM;
    float s[MAX_EXPERTS], sel[MAX_EXPERTS];
    uint8_t taken[MAX_EXPERTS];
    for (uint32_t t = 0; t < n_tokens; t++) {
        const float *l = logits + (size_t)t * E;
        int32_t *id = ids + (size_t)t * k;
        float *w = weights + (size_t)t * k;
        if (p.kind == KT_ROUTER_SOFTMAX_TOPK) {
            /* p = softmax(l); top-k of p; w = p[top] (/ sum) */
            float mx = -INFINITY, sum = 0.0f;
            for (int e = 0; e < E; e++)
                mx = fmaxf(mx, l[e]);
            for (int e = 0; e < E; e++) {
                s[e] = expf(l[e] - mx);
                sum += s[e];
            }
            for (int e = 0; e < E; e++)
                s[e] /= sum;
            top_k(s, E, k, id, taken);
            float tot = 0.0f;
            for (int j = 0; j < k; j++) {
                w[j] = s[id[j]];
                tot += w[j];
            }
            if (renorm)
                for (int j = 0; j < k; j++)
                    w[j] /= tot;
        } else if (p.kind == KT_ROUTER_SIGMOID_GROUPED) {
            /* s = sigmoid(l); choose on s + bias within the best groups; w = s[top] */
            for (int e = 0; e < E; e++) {
                s[e] = 1.0f / (1.0f + expf(-l[e]));
                sel[e] = s[e] + (p.bias ? p.bias[e] : 0.0f);
            }
            if (p.n_group > 1) {
                int G = (int)p.n_group, per = E / G;
                float gscore[MAX_GROUPS];
                int32_t gid[MAX_GROUPS];
                for (int g = 0; g < G; g++) {
                    /* group score = sum of its two largest biased scores */
                    int32_t two[2];
                    top_k(sel + g * per, per, 2, two, taken);
                    gscore[g] = sel[g * per + two[0]] + sel[g * per + two[1]];
                }
                top_k(gscore, G, (int)p.topk_group, gid, taken);
                uint8_t keep[MAX_GROUPS];
                memset(keep, 0, (size_t)G);
                for (uint32_t j = 0; j < p.topk_group; j++)
                    keep[gid[j]] = 1;
                /* experts of dropped groups score 0.0, as transformers masks them */
                for (int e = 0; e < E; e++)
                    if (!keep[e / per])
                        sel[e] = 0.0f;
            }
            top_k(sel, E, k, id, taken);
            float tot = 0.0f;
            for (int j = 0; j < k; j++) {
                w[j] = s[id[j]];
                tot += w[j];
            }
            float scale = p.routed_scaling_factor != 0.0f ? p.routed_scaling_factor : 1.0f;
            for (int j = 0; j < k; j++)
                w[j] = (renorm ? w[j] / (tot + 1e-20f) : w[j]) * scale;
        } else {
            /* l' = l + b; top-k of l'; w = softmax(l'[top]) */
            for (int e = 0; e < E; e++)
                s[e] = l[e] + (p.bias ? p.bias[e] : 0.0f);
            top_k(s, E, k, id, taken);
            float mx = s[id[0]], tot = 0.0f;
            for (int j = 0; j < k; j++) {
                w[j] = expf(s[id[j]] - mx);
                tot += w[j];
            }
            for (int j = 0; j < k; j++)
                w[j] /= tot;
        }
        if (scores)
            memcpy(scores + (size_t)t * E, s, (size_t)E * sizeof(float));
    }
    return KT_OK;
}
