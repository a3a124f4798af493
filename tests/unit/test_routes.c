/* Routing traces and activation statistics recorded by the engine: the demo
 * model's held-out text routed by libkt gives the expert counts transformers
 * recorded (reference.safetensors expert_counts_layerN); traces round-trip
 * through their file; bad trace files fail cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/safetensors.h"
#include "kt/kt.h"
#include "test_files.h"

static const char *source_root(void)
{
    const char *r = getenv("KT_SOURCE_ROOT");
    return r ? r : ".";
}

static void test_trace_api(void **state)
{
    (void)state;
    kt_route_trace *t = NULL;
    assert_int_equal(kt_route_trace_create(&t, 3, 8, 9), KT_ERR_INVALID_ARG); /* k > E */
    assert_int_equal(kt_route_trace_create(&t, 3, 8, 2), KT_OK);
    const int32_t a[] = {0, 1, 2, 3}, b[] = {7, -1, 5, 5}, bad[] = {8, 0};
    /* step 1: two tokens through layers 1 and 2; step 2: one token */
    assert_int_equal(kt_route_trace_record(t, 1, a, 2), KT_OK);
    assert_int_equal(kt_route_trace_record(t, 2, b, 2), KT_OK);
    assert_int_equal(kt_route_trace_record(t, 1, a, 1), KT_OK);
    assert_int_equal(kt_route_trace_record(t, 2, bad, 1), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_route_trace_record(t, 3, a, 1), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_route_trace_n_records(t), 3);

    char path[] = "/tmp/kt_trace_XXXXXX";
    tmp_file_create(path);
    assert_int_equal(kt_route_trace_save(t, path), KT_OK);
    kt_route_trace *u = NULL;
    assert_int_equal(kt_route_trace_load(&u, path), KT_OK);
    assert_int_equal(kt_route_trace_n_records(u), 3);
    uint32_t layer, n;
    const int32_t *ids;
    assert_int_equal(kt_route_trace_get(u, 1, &layer, &n, &ids), KT_OK);
    assert_int_equal(layer, 2);
    assert_int_equal(n, 2);
    assert_memory_equal(ids, b, sizeof b);
    kt_expert_stats *s = NULL;
    assert_int_equal(kt_expert_stats_create(&s, 3, 8), KT_OK);
    assert_int_equal(kt_route_trace_to_stats(u, 0, SIZE_MAX, s), KT_OK);
    assert_int_equal(kt_expert_stats_tokens(s), 3);          /* 2 + 1 tokens   */
    assert_true(kt_expert_stats_count(s, 1, 0) == 2.0);      /* a twice        */
    assert_true(kt_expert_stats_count(s, 2, 5) == 2.0);
    assert_true(kt_expert_stats_count(s, 2, 7) == 1.0);
    kt_expert_stats_free(s);
    kt_route_trace_free(u);

    /* truncated and foreign files */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), 40), 0);
    fclose(f);
    assert_int_equal(kt_route_trace_load(&u, path), KT_ERR_FORMAT);
    assert_non_null(strstr(kt_last_error(), "truncated"));
    assert_null(u);
    f = fopen(path, "wb");
    fputs("{\"format\": \"libkt.expert_stats\"}", f);
    fclose(f);
    assert_int_equal(kt_route_trace_load(&u, path), KT_ERR_FORMAT);
    assert_non_null(strstr(kt_last_error(), "not a routing trace"));
    unlink(path);
    assert_int_equal(kt_route_trace_load(&u, path), KT_ERR_IO);
    kt_route_trace_free(t);
}

/* The engine's counts over the held-out windows against transformers' counts. */
static void test_engine_records(void **state)
{
    (void)state;
    char dir[4096], ref[4200];
    snprintf(dir, sizeof dir, "%s/models/kimi-k2-demo", source_root());
    snprintf(ref, sizeof ref, "%s/reference.safetensors", dir);
    kt_st_set *st = NULL;
    if (kt__st_open_file(&st, ref) != KT_OK)
        skip();
    const kt_st_tensor *held = kt__st_find(st, "heldout_ids");
    assert_non_null(held);
    kt_model *m = NULL;
    assert_int_equal(kt_model_open(&m, NULL, dir, NULL), KT_OK);
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.precision = KT_PRECISION_F32; /* transformers' FP32 routing */
    co.n_ctx = (int32_t)held->n_elements;
    kt_context *ctx = NULL;
    assert_int_equal(kt_context_create(&ctx, NULL, m, &co), KT_OK);
    const uint32_t L = (uint32_t)kt_context_n_layer(ctx), E = kt_model_n_experts(m);
    kt_expert_stats *s = NULL, *wrong = NULL;
    kt_route_trace *t = NULL, *wrong_t = NULL;
    assert_int_equal(kt_expert_stats_create(&s, L, E), KT_OK);
    assert_int_equal(kt_expert_stats_create(&wrong, L, E + 1), KT_OK);
    assert_int_equal(kt_context_set_expert_stats(ctx, wrong), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_route_trace_create(&wrong_t, L, E, 1), KT_OK);
    assert_int_equal(kt_context_set_route_trace(ctx, wrong_t), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_route_trace_create(&t, L, E, 4), KT_OK);
    assert_int_equal(kt_context_set_expert_stats(ctx, s), KT_OK);
    assert_int_equal(kt_context_set_route_trace(ctx, t), KT_OK);
    /* transformers counted independent windows of 256 tokens over the whole
     * held-out text; heldout_ids holds its first 2049 tokens = its first 8
     * windows, so libkt's counts over those windows are a part of its counts */
    const int32_t *heldout = held->data;
    const size_t W = 256, n_win = (held->n_elements - 1) / W, n_tok = n_win * W;
    for (size_t w = 0; w < n_win; w++) {
        kt_context_reset(ctx);
        assert_int_equal(kt_context_eval(ctx, heldout + w * W, W, NULL, 0), KT_OK);
    }
    assert_int_equal(kt_expert_stats_tokens(s), n_tok);

    double excess = 0, ours = 0;
    for (uint32_t l = 0; l < L; l++) {
        char name[64];
        snprintf(name, sizeof name, "expert_counts_layer%u", l);
        const kt_st_tensor *c = kt__st_find(st, name);
        if (!c) { /* dense layer: nothing recorded */
            for (uint32_t e = 0; e < E; e++)
                assert_true(kt_expert_stats_count(s, l, e) == 0.0);
            continue;
        }
        assert_int_equal(c->n_elements, E);
        for (uint32_t e = 0; e < E; e++) {
            double want = (double)((const int64_t *)c->data)[e];
            double got = kt_expert_stats_count(s, l, e);
            ours += got;
            excess += got > want ? got - want : 0;
        }
    }
    assert_true(ours == (double)n_tok * 4 * 3); /* top-4 in 3 MoE layers */
    /* the reference ran the FP32 weights before their BF16 rounding, so a few
     * near-tied choices may flip; an expert chosen more often here than over
     * the whole text would be a routing bug */
    printf("# %.0f of %.0f routed pairs exceed transformers' whole-text counts\n", excess, ours);
    if (excess / ours > 0.002)
        fail_msg("%.0f of %.0f pairs exceed the reference counts", excess, ours);

    /* the trace holds the same pairs */
    kt_expert_stats *from_trace = NULL;
    assert_int_equal(kt_expert_stats_create(&from_trace, L, E), KT_OK);
    assert_int_equal(kt_route_trace_to_stats(t, 0, SIZE_MAX, from_trace), KT_OK);
    assert_int_equal(kt_expert_stats_tokens(from_trace), n_tok);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t e = 0; e < E; e++)
            assert_true(kt_expert_stats_count(from_trace, l, e) == kt_expert_stats_count(s, l, e));

    /* replay: calibration = the first half of the windows, evaluated = the rest;
     * at a quarter of the experts on the GPU, frequency (calibration counts) and
     * dynamic rebalancing (starting uniform) serve far more pairs than uniform */
    const size_t n_rec = kt_route_trace_n_records(t), half = n_rec / 2; /* 3 per window */
    kt_expert_stats *cal = NULL, *eval = NULL;
    assert_int_equal(kt_expert_stats_create(&cal, L, E), KT_OK);
    assert_int_equal(kt_expert_stats_create(&eval, L, E), KT_OK);
    assert_int_equal(kt_route_trace_to_stats(t, 0, half, cal), KT_OK);
    assert_int_equal(kt_route_trace_to_stats(t, half, SIZE_MAX, eval), KT_OK);
    uint8_t moe[8];
    for (uint32_t l = 0; l < L; l++)
        moe[l] = (uint8_t)kt_model_layer_is_moe(m, l);
    kt_placement_options po = KT_PLACEMENT_OPTIONS_INIT;
    po.budget = KT_BUDGET_RATIO;
    po.ratio = 0.25;
    po.strategy = KT_PLACEMENT_UNIFORM;
    kt_placement *uni = NULL, *freq = NULL, *dyn = NULL;
    assert_int_equal(kt_placement_create(&uni, L, E, moe, &po), KT_OK);
    assert_int_equal(kt_placement_create(&dyn, L, E, moe, &po), KT_OK);
    po.strategy = KT_PLACEMENT_FREQUENCY;
    po.stats = cal;
    assert_int_equal(kt_placement_create(&freq, L, E, moe, &po), KT_OK);
    double cov_uni = kt_placement_coverage(uni, eval), cov_freq = kt_placement_coverage(freq, eval);
    /* dynamic: token by token, served by the placement as it stands */
    kt_rebalancer *rb = NULL;
    assert_int_equal(kt_rebalancer_create(&rb, dyn, NULL, NULL), KT_OK);
    double served = 0, pairs = 0;
    kt_expert_move moves[16];
    for (size_t r0 = half; r0 < n_rec; r0 += 3) {
        for (uint32_t tok = 0; tok < W; tok++) {
            for (size_t r = r0; r < r0 + 3; r++) {
                uint32_t layer, n;
                const int32_t *ids;
                assert_int_equal(kt_route_trace_get(t, r, &layer, &n, &ids), KT_OK);
                for (int j = 0; j < 4; j++)
                    served += kt_placement_on_gpu(dyn, layer, (uint32_t)ids[tok * 4 + j]);
                pairs += 4;
                kt_rebalancer_observe(rb, layer, ids + tok * 4, 4);
            }
            kt_rebalancer_advance(rb, 1);
            size_t nm = 0;
            if (tok % 8 == 7 && kt_rebalancer_plan(rb, moves, 16, &nm) == KT_OK && nm)
                assert_int_equal(kt_rebalancer_apply(rb, moves, nm), KT_OK);
        }
    }
    double cov_dyn = served / pairs;
    printf("# 25%% of experts on the GPU: uniform %.3f, frequency %.3f, dynamic %.3f\n",
           cov_uni, cov_freq, cov_dyn);
    assert_true(cov_freq > cov_uni + 0.3);
    assert_true(cov_dyn > cov_uni + 0.3);
    kt_rebalancer_free(rb);
    kt_placement_free(uni);
    kt_placement_free(freq);
    kt_placement_free(dyn);
    kt_expert_stats_free(cal);
    kt_expert_stats_free(eval);

    /* detached: nothing more recorded */
    assert_int_equal(kt_context_set_expert_stats(ctx, NULL), KT_OK);
    assert_int_equal(kt_context_set_route_trace(ctx, NULL), KT_OK);
    kt_context_reset(ctx);
    assert_int_equal(kt_context_eval(ctx, heldout, 8, NULL, 0), KT_OK);
    assert_int_equal(kt_expert_stats_tokens(s), n_tok);

    kt_expert_stats_free(from_trace);
    kt_expert_stats_free(wrong);
    kt_expert_stats_free(s);
    kt_route_trace_free(wrong_t);
    kt_route_trace_free(t);
    kt_context_free(ctx);
    kt_model_free(m);
    kt__st_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_api),
        cmocka_unit_test(test_engine_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
