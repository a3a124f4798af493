/*
 * kt/moe.h set-ups shared by the MoE tests (test_moe, test_moe_kernels, test_hybrid_cpu,
 * test_llamafile): a descriptor of the shapes, unpinned options, an F32 io.
 * Header-only, static inline.
 */
#ifndef KT_TEST_MOE_COMMON_H
#define KT_TEST_MOE_COMMON_H

#include <stdint.h>

#include "kt/moe.h"

/* A descriptor of the method and shapes; act, group size and the rest as KT_MOE_DESC_INIT. */
static inline kt_moe_desc tst_moe_desc(int method, int hidden, int intermediate, int n_experts,
                                       int top_k)
{
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = method;
    d.hidden = (uint32_t)hidden;
    d.intermediate = (uint32_t)intermediate;
    d.n_experts = (uint32_t)n_experts;
    d.top_k = (uint32_t)top_k;
    return d;
}

/* n_threads workers, not pinned (the tests share the machine), max_tokens at once; the rest
 * as KT_MOE_OPTIONS_INIT. */
static inline kt_moe_options tst_moe_options(int n_threads, int max_tokens)
{
    kt_moe_options o = KT_MOE_OPTIONS_INIT;
    o.n_threads = n_threads;
    o.max_tokens = max_tokens;
    o.pin_threads = 0;
    return o;
}

/* F32 activations x [T][H] in, F32 out [T][H]; int32 ids and weights [T][top_k]; T read from
 * *n_tokens when the task runs. */
static inline kt_moe_io tst_moe_io_f32(const int32_t *n_tokens, int top_k, const float *x,
                                       const int32_t *ids, const float *w, float *out)
{
    kt_moe_io io = KT_MOE_IO_INIT;
    io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
    io.n_tokens = n_tokens;
    io.top_k = (uint32_t)top_k;
    io.x = x;
    io.ids = ids;
    io.w = w;
    io.out = out;
    return io;
}

#endif /* KT_TEST_MOE_COMMON_H */
