/* Routing observers: activation statistics and routing traces recorded from
 * the routed ids of every MoE layer while a context runs. */
#include "engine_internal.h"

/* The first MoE layer counts a step's tokens (once per forward). */
static int32_t first_moe_layer(const kt__hparams *hp)
{
    for (int32_t l = 0; l < hp->n_layer; l++)
        if (hp->layer_moe[l])
            return l;
    return -1;
}

kt_status kt_context_set_expert_stats(kt_context *ctx, kt_expert_stats *stats)
{
    if (!ctx)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_set_expert_stats: ctx is NULL");
    if (stats && (kt_expert_stats_n_layers(stats) != (uint32_t)ctx->hp.n_layer ||
                  kt_expert_stats_n_experts(stats) != (uint32_t)ctx->hp.n_expert))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_set_expert_stats: statistics are "
                         "%u layers x %u experts, the model has %d x %d",
                         kt_expert_stats_n_layers(stats), kt_expert_stats_n_experts(stats),
                         ctx->hp.n_layer, ctx->hp.n_expert);
    ctx->route_stats = stats;
    return KT_OK;
}

kt_status kt_context_set_route_trace(kt_context *ctx, kt_route_trace *trace)
{
    if (!ctx)
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_set_route_trace: ctx is NULL");
    if (trace && (kt_route_trace_n_layers(trace) != (uint32_t)ctx->hp.n_layer ||
                  kt_route_trace_n_experts(trace) != (uint32_t)ctx->hp.n_expert ||
                  kt_route_trace_top_k(trace) != (uint32_t)ctx->hp.n_expert_used))
        return kt__error(KT_ERR_INVALID_ARG, "kt_context_set_route_trace: trace is %u layers "
                         "x %u experts, top %u; the model has %d x %d, top %d",
                         kt_route_trace_n_layers(trace), kt_route_trace_n_experts(trace),
                         kt_route_trace_top_k(trace), ctx->hp.n_layer, ctx->hp.n_expert,
                         ctx->hp.n_expert_used);
    ctx->route_trace = trace;
    return KT_OK;
}

kt_status kt__route_observe(kt_context *ctx, int32_t layer, const int32_t *ids, int32_t T)
{
    size_t n = (size_t)T * (size_t)ctx->hp.n_expert_used;
    if (ctx->route_stats) {
        if (layer == first_moe_layer(&ctx->hp))
            kt_expert_stats_add_tokens(ctx->route_stats, (uint64_t)T);
        kt_status st = kt_expert_stats_record(ctx->route_stats, (uint32_t)layer, ids, n);
        if (st < 0)
            return st;
    }
    if (ctx->route_trace)
        return kt_route_trace_record(ctx->route_trace, (uint32_t)layer, ids, (uint32_t)T);
    return KT_OK;
}
