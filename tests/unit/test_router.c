/*
 * Router helpers (kt_router_topk) against the fixtures' transformers outputs:
 * router logits are recomputed from the fixture's gate weights and moe_in,
 * then ids and weights must match router_out2 / router_out1 of every token
 * (as sets: transformers may return the k experts in any order). router_out0
 * is the router's linear output (its bias included for gpt-oss): it must
 * match the recomputed logits (the helper's scores for TOPK_SOFTMAX).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kt/moe.h"
#include "moe_test_util.h"

typedef struct router_case {
    const char *dir;
    const char *gate;       /* gate weight */
    const char *bias;       /* bias tensor or NULL */
    int kind;
    uint32_t flags, n_group, topk_group;
    float scaling;
} router_case;

static const router_case cases[] = {
    {"deepseek_v3_tiny/bf16", "model.layers.1.mlp.gate.weight",
     "model.layers.1.mlp.gate.e_score_correction_bias", KT_ROUTER_SIGMOID_GROUPED,
     KT_ROUTER_F_RENORM, 4, 2, 2.5f},
    {"qwen3_moe_tiny", "model.layers.1.mlp.gate.weight", NULL, KT_ROUTER_SOFTMAX_TOPK,
     KT_ROUTER_F_RENORM, 0, 0, 0.0f},
    {"mixtral_tiny", "model.layers.1.block_sparse_moe.gate.weight", NULL, KT_ROUTER_SOFTMAX_TOPK,
     KT_ROUTER_F_RENORM, 0, 0, 0.0f},
    {"minimax_m2_tiny/bf16", "model.layers.1.block_sparse_moe.gate.weight",
     "model.layers.1.block_sparse_moe.e_score_correction_bias", KT_ROUTER_SIGMOID_GROUPED,
     KT_ROUTER_F_RENORM, 0, 0, 0.0f},
    {"gpt_oss_tiny", "model.layers.1.mlp.router.weight", "model.layers.1.mlp.router.bias",
     KT_ROUTER_TOPK_SOFTMAX, 0, 0, 0, 0.0f},
};

static float to_f32(const tst_tensor *t, size_t i)
{
    if (!strcmp(t->dtype, "BF16"))
        return tst_bf16(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

static void run_case(const router_case *rc)
{
    char dir[1024];
    tst_model m;
    tst_file *ref = tst_fixture_open(rc->dir, &m, dir, sizeof dir);
    if (!ref)
        fail_msg("cannot open %s", dir);
    tst_tensor tin, t0, t1, t2, gw = {0}, gb = {0};
    assert_true(tst_find(ref, "moe_in", &tin));
    assert_true(tst_find(ref, "router_out0", &t0));
    assert_true(tst_find(ref, "router_out1", &t1));
    assert_true(tst_find(ref, "router_out2", &t2));
    assert_true(tst_model_find(&m, rc->gate, &gw));
    int T = (int)tin.shape[0], H = (int)tin.shape[1], E = (int)gw.shape[0], k = (int)t1.shape[1];
    float bias[64];
    if (rc->bias) {
        assert_true(tst_model_find(&m, rc->bias, &gb));
        for (int e = 0; e < E; e++)
            bias[e] = to_f32(&gb, (size_t)e);
    }
    float *logits = malloc((size_t)T * E * sizeof(float));
    const float *x = tin.data;
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            double acc = 0;
            for (int h = 0; h < H; h++)
                acc += (double)x[(size_t)t * H + h] * to_f32(&gw, (size_t)e * H + h);
            logits[(size_t)t * E + e] = (float)acc;
        }
    kt_router_params p = KT_ROUTER_PARAMS_INIT;
    p.kind = rc->kind;
    p.flags = rc->flags;
    p.n_experts = (uint32_t)E;
    p.top_k = (uint32_t)k;
    p.n_group = rc->n_group;
    p.topk_group = rc->topk_group;
    p.routed_scaling_factor = rc->scaling;
    p.bias = rc->bias ? bias : NULL;
    int32_t *ids = malloc((size_t)T * k * sizeof(int32_t));
    float *w = malloc((size_t)T * k * sizeof(float));
    float *scores = malloc((size_t)T * E * sizeof(float));
    assert_int_equal(kt_router_topk(&p, logits, (uint32_t)T, ids, w, scores), KT_OK);

    const int32_t *want_ids = t2.data;
    const float *want_w = t1.data, *out0 = t0.data;
    double werr = 0, serr = 0, lerr = 0;
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < k; j++) {
            int found = -1;
            for (int jj = 0; jj < k; jj++)
                if (ids[t * k + jj] == want_ids[t * k + j])
                    found = jj;
            if (found < 0)
                fail_msg("%s token %d: expert %d chosen by transformers, not by kt_router_topk",
                         rc->dir, t, want_ids[t * k + j]);
            werr = fmax(werr, fabs(w[t * k + found] - want_w[t * k + j]));
        }
        for (int e = 0; e < E; e++) {
            serr = fmax(serr, fabs(scores[(size_t)t * E + e] - out0[(size_t)t * E + e]));
            lerr = fmax(lerr, fabs(logits[(size_t)t * E + e] - out0[(size_t)t * E + e]));
        }
    }
    printf("  %-22s T=%d E=%d k=%d: ids equal, max|w diff| %.2g, router_out0 vs scores %.2g, "
           "vs logits %.2g\n",
           rc->dir, T, E, k, werr, serr, lerr);
    assert_true(werr < 1e-5);
    if (rc->kind == KT_ROUTER_TOPK_SOFTMAX)
        assert_true(serr < 1e-4);
    else
        assert_true(lerr < 1e-4);
    free(logits);
    free(ids);
    free(w);
    free(scores);
    tst_close(ref);
    tst_model_close(&m);
}

static void test_fixture_routers(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
}

/* Hand-made cases: ties pick the lower index; groups; renorm; scaling; errors. */
static void test_router_rules(void **state)
{
    (void)state;
    float l[8] = {1, 3, 3, 0, -1, 2, 3, 0};
    int32_t ids[4];
    float w[4];
    kt_router_params p = KT_ROUTER_PARAMS_INIT;
    p.kind = KT_ROUTER_SOFTMAX_TOPK;
    p.n_experts = 8;
    p.top_k = 3;
    assert_int_equal(kt_router_topk(&p, l, 1, ids, w, NULL), KT_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 6);
    p.flags = KT_ROUTER_F_RENORM;
    assert_int_equal(kt_router_topk(&p, l, 1, ids, w, NULL), KT_OK);
    assert_float_equal(w[0] + w[1] + w[2], 1.0f, 1e-6);
    assert_float_equal(w[0], 1.0f / 3.0f, 1e-6);

    /* groups of 2: scores (sigmoid keeps order) group sums: g0 {1,3}, g1 {3,0},
     * g2 {-1,2}, g3 {3,0}; keep 2 groups: g0 (4) and g1 (3, before g3 by index) */
    p.kind = KT_ROUTER_SIGMOID_GROUPED;
    p.n_group = 4;
    p.topk_group = 2;
    p.top_k = 3;
    p.routed_scaling_factor = 2.0f;
    assert_int_equal(kt_router_topk(&p, l, 1, ids, w, NULL), KT_OK);
    int has6 = 0;
    for (int j = 0; j < 3; j++)
        has6 |= ids[j] == 6 || ids[j] == 5;
    assert_false(has6);
    assert_float_equal(w[0] + w[1] + w[2], 2.0f, 1e-5);

    /* gpt-oss: bias added before top-k, softmax over the k */
    float b[8] = {0, 0, 0, 0, 10, 0, 0, 0};
    p = (kt_router_params)KT_ROUTER_PARAMS_INIT;
    p.kind = KT_ROUTER_TOPK_SOFTMAX;
    p.n_experts = 8;
    p.top_k = 2;
    p.bias = b;
    assert_int_equal(kt_router_topk(&p, l, 1, ids, w, NULL), KT_OK);
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[1], 1);
    assert_float_equal(w[0], 1.0f / (1.0f + expf(3.0f - 9.0f)), 1e-6);

    /* errors */
    p.top_k = 9;
    assert_int_equal(kt_router_topk(&p, l, 1, ids, w, NULL), KT_ERR_INVALID_ARG);
    p.top_k = 2;
    p.kind = 77;
    assert_int_equal(kt_router_topk(&p, l, 1, ids, w, NULL), KT_ERR_INVALID_ARG);
    p.kind = KT_ROUTER_SIGMOID_GROUPED;
    p.n_group = 3; /* 8 % 3 != 0 */
    p.topk_group = 1;
    assert_int_equal(kt_router_topk(&p, l, 1, ids, w, NULL), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_router_topk(NULL, l, 1, ids, w, NULL), KT_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_rules),
        cmocka_unit_test(test_fixture_routers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
