/* GPU runtime (kt/gpu.h) against the fixtures' transformers outputs: prefill
 * logits, token-by-token decode logits through the device KV cache (a CUDA
 * graph after the first step) and greedy ids, with 0%, 50% and 100% of the
 * routed experts on the GPU (the rest on the CPU MoE backend, overlapped);
 * the demo model's greedy text as the CPU engine's. Exits 77 without a GPU. */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/engine_internal.h"
#include "io/safetensors.h"
#include "kt/kt.h"

#include "fixture_ref.h"

static uint32_t g_gpu_flags;  /* kt_gpu_options.flags for the next open_gpu */
static int32_t g_lw_tokens;   /* kt_gpu_options.layerwise_tokens for the next open_gpu */
static int32_t g_n_ctx = 256; /* kt_context_options.n_ctx for the next open_gpu */
static int32_t g_move_slots;  /* kt_gpu_options.move_slots for the next open_gpu */

/* KT_TEST_SHORT=N, for compute-sanitizer passes: under racecheck every launch
 * costs milliseconds of device time, so a one-token step costs nearly what a
 * chunk does (the H200, 11-30 14:55, 8 processes sharing the device: 0.7 s a
 * forward of 17 tokens or one, an 81-token prompt and two steps 3.7 s) and the
 * token-by-token decode was most of a case. With N, decode runs its first and
 * last N positions one at a time and the positions between as one chunk on the
 * cache (their logits held to the same tolerances), greedy N + 1 ids, the steps
 * during expert moves N, no prefill before the decode variants (only their
 * decode is compared). The kernels a case launches stay the same: the
 * prompt's chunk, the decode graph's capture and replays, the split attention
 * over one 64-position tile and over two. Unset or 0: the full test. */
static int32_t short_steps(void)
{
    static int32_t n = -1;
    if (n < 0) {
        const char *e = getenv("KT_TEST_SHORT");
        n = e ? KT_MAX(atoi(e), 0) : 0;
    }
    return n;
}

/* greedy ids to generate for a reference of n_greedy */
static size_t greedy_count(int32_t n_greedy)
{
    return (size_t)(short_steps() ? KT_MIN(n_greedy, short_steps() + 1) : n_greedy);
}

/* decode steps to run while expert moves land, of a prompt of T */
static int32_t steps_while_moving(int32_t T)
{
    return short_steps() ? KT_MIN(short_steps(), T) : T;
}

/* KT_TEST_TIMES=1: seconds of each case's phases (where sanitizer passes spend them) */
static double phase_now(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("KT_TEST_TIMES") != NULL;
    struct timespec ts = {0, 0};
    if (on)
        clock_gettime(CLOCK_MONOTONIC, &ts);
    return on ? (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec : -1.0;
}

static kt_context *open_gpu(const char *dir, kt_precision prec, float frac, kt_model **model)
{
    *model = NULL;
    if (kt_model_open(model, NULL, dir, NULL) < 0) {
        fail_msg("kt_model_open(%s): %s", dir, kt_last_error());
        return NULL;
    }
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = g_n_ctx;
    co.precision = prec;
    co.n_threads = 2;
    kt_context *ctx = NULL;
    if (kt_context_create(&ctx, NULL, *model, &co) < 0)
        fail_msg("kt_context_create(%s): %s", dir, kt_last_error());
    kt_gpu_options go = KT_GPU_OPTIONS_INIT;
    go.expert_fraction = frac;
    go.flags = g_gpu_flags;
    go.layerwise_tokens = g_lw_tokens;
    go.move_slots = g_move_slots;
    if (kt_context_use_gpu(ctx, &go) < 0)
        fail_msg("kt_context_use_gpu(%s): %s", dir, kt_last_error());
    assert_int_equal(kt_context_gpu(ctx), 0);
    return ctx;
}

/* prefill logits [T][V] (all positions; pre NULL: none), then decode logits
 * [T][V] token by token (KT_TEST_SHORT=N: positions [N, T - N) as one chunk) */
static void run_logits(kt_context *ctx, const ref_data *r, float *pre, float *dec)
{
    kt_context_reset(ctx);
    if (pre)
        assert_int_equal(kt_context_eval(ctx, r->prompt, (size_t)r->T, pre,
                                         KT_EVAL_ALL_LOGITS), KT_OK);
    kt_context_reset(ctx);
    int32_t head = short_steps() ? KT_MIN(short_steps(), r->T) : r->T;
    int32_t tail = KT_MAX(head, r->T - short_steps());
    for (int32_t t = 0; t < r->T;) {
        int32_t n = t == head && tail > head ? tail - head : 1;
        assert_int_equal(kt_context_eval(ctx, &r->prompt[t], (size_t)n, dec + (size_t)t * r->V,
                                         n > 1 ? KT_EVAL_ALL_LOGITS : 0), KT_OK);
        t += n;
    }
}

/* Positions whose logits are within tol of the reference. */
static int32_t rows_within(const float *a, const float *b, int32_t T, int32_t V, float tol)
{
    int32_t n = 0;
    for (int32_t t = 0; t < T; t++)
        n += max_abs_diff(a + (size_t)t * V, b + (size_t)t * V, (size_t)V) <= tol;
    return n;
}

/*
 * Everything on the GPU (F32 activations, weights exact in their stored types):
 * within 1e-3 of transformers in f32, 5e-2 in fast precision. With experts on
 * the CPU backend (BF16 activations) the logits follow the CPU engine's, which
 * on these random tiny models flips near-tied experts at a position or two
 * (tests/unit/test_engine.c shows the same): compared with the CPU engine
 * (5e-2) and with transformers position by position; greedy ids identical.
 */
static void check(const char *name, const char *variant, kt_precision prec, float frac)
{
    const char *dir = fixture_path(name, variant);
    ref_data r;
    ref_load(&r, dir);
    double t0 = phase_now();
    kt_model *model;
    kt_context *ctx = open_gpu(dir, prec, frac, &model);
    size_t TV = (size_t)r.T * r.V;
    float *pre = calloc(TV, sizeof(float)), *dec = calloc(TV, sizeof(float));
    double t1 = phase_now();
    run_logits(ctx, &r, pre, dec);
    double t2 = phase_now();
    float dp = max_abs_diff(pre, r.logits, TV), dd = max_abs_diff(dec, r.logits, TV);
    kt_context_reset(ctx);
    int32_t out[64];
    size_t n = 0, n_want = greedy_count(r.n_greedy);
    assert_int_equal(kt_context_greedy(ctx, r.prompt, (size_t)r.T, n_want, out, &n), KT_OK);
    double t3 = phase_now();
    int same = n == n_want;
    for (size_t i = 0; same && i < n_want; i++)
        same = out[i] == r.greedy[i];
    bool cpu = ctx->moe && kt_context_gpu_experts(ctx) < ctx->hp.n_expert;
    print_message("  %s/%s %s%s, %d/%d experts on the GPU: prefill max|diff| %.3g (%d/%d "
                  "positions within 5e-2), decode %.3g, greedy %s\n", name,
                  variant ? variant : "bf16", prec == KT_PRECISION_F32 ? "f32" : "fast",
                  g_gpu_flags & KT_GPU_F_MLA_NAIVE ? " (naive MLA decode)" :
                  g_gpu_flags & KT_GPU_F_NO_CUBLAS ? " (own kernels)" :
                  g_gpu_flags & KT_GPU_F_DECODE_BF16 ? " (BF16 decode experts)" :
                  g_lw_tokens ? " (layerwise prefill)" : "",
                  kt_context_gpu_experts(ctx), ctx->hp.n_expert, dp,
                  rows_within(pre, r.logits, r.T, r.V, 5e-2f), r.T, dd,
                  same ? "identical" : "DIFFERENT");
    assert_true(same);
    /* BF16 activations somewhere: the CPU backend's (cuBLAS products take the
     * activations as BF16 hi + lo halves: about F32's accuracy) */
    bool bf16_act = cpu;
    int32_t wp = rows_within(pre, r.logits, r.T, r.V, 5e-2f);
    int32_t wd = rows_within(dec, r.logits, r.T, r.V, 5e-2f);
    if (!bf16_act) {
        if (t0 >= 0)
            print_message("    times: setup %.2f s, prefill + decode %.2f, greedy %.2f\n",
                          t1 - t0, t2 - t1, t3 - t2);
        float tol = prec == KT_PRECISION_F32 ? 1e-3f : 5e-2f;
        assert_true(dp <= tol);
        assert_true(dd <= tol);
    } else {
        if (cpu) {
            /* the CPU engine with the same backend and weights, for the record */
            kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
            co.n_ctx = 256;
            co.precision = prec;
            co.n_threads = 2;
            kt_context *cctx = NULL;
            assert_int_equal(kt_context_create(&cctx, NULL, model, &co), KT_OK);
            float *cpre = calloc(TV, sizeof(float)), *cdec = calloc(TV, sizeof(float));
            run_logits(cctx, &r, cpre, cdec);
            print_message("    vs the CPU engine: prefill max|diff| %.3g, decode %.3g\n",
                          max_abs_diff(pre, cpre, TV), max_abs_diff(dec, cdec, TV));
            free(cpre), free(cdec);
            kt_context_free(cctx);
        }
        print_message("    vs transformers: %d/%d prefill and %d/%d decode positions within "
                      "5e-2\n", wp, r.T, wd, r.T);
        if (t0 >= 0)
            print_message("    times: setup %.2f s, prefill + decode %.2f, greedy %.2f, the CPU "
                          "engine %.2f\n", t1 - t0, t2 - t1, t3 - t2, phase_now() - t3);
        /* a near-tied expert may flip on either side (F32 or BF16 activations), so
         * each is held to transformers position by position */
        assert_true(wp >= r.T - 2);
        assert_true(wd >= r.T - 2);
    }
    free(pre), free(dec);
    kt_context_free(ctx);
    kt_model_free(model);
    ref_free(&r);
}

#define FIXTURE(fn, name, variant)                                                          \
    static void fn(void **s)                                                                \
    {                                                                                       \
        (void)s;                                                                            \
        check(name, variant, KT_PRECISION_F32, 1.0f);                                       \
        check(name, variant, KT_PRECISION_FAST, 0.0f);                                      \
        check(name, variant, KT_PRECISION_FAST, 0.5f);                                      \
        check(name, variant, KT_PRECISION_FAST, 1.0f);                                      \
    }
FIXTURE(test_qwen3_moe, "qwen3_moe_tiny", NULL)

/* MLA decode expanding k/v for every cached position (KT_GPU_F_MLA_NAIVE), eagerly */
static void test_deepseek_v3_naive(void **s)
{
    (void)s;
    g_gpu_flags = KT_GPU_F_MLA_NAIVE;
    check("deepseek_v3_tiny", "bf16", KT_PRECISION_F32, 1.0f);
    check("deepseek_v3_tiny", "bf16", KT_PRECISION_FAST, 1.0f);
    check("deepseek_v3_tiny", "fp8", KT_PRECISION_FAST, 0.5f);
    check("deepseek_v3_tiny", "int4", KT_PRECISION_FAST, 0.0f);
    g_gpu_flags = 0;
}
FIXTURE(test_deepseek_v3_bf16, "deepseek_v3_tiny", "bf16")
FIXTURE(test_deepseek_v3_fp8, "deepseek_v3_tiny", "fp8")
FIXTURE(test_deepseek_v3_int4, "deepseek_v3_tiny", "int4")
FIXTURE(test_mixtral, "mixtral_tiny", NULL)
FIXTURE(test_minimax_m2, "minimax_m2_tiny", "bf16")
FIXTURE(test_minimax_m2_fp8, "minimax_m2_tiny", "fp8")
/* gpt-oss: experts on the CPU backend only (fused [in][out] with biases) */
static void test_gpt_oss(void **s)
{
    (void)s;
    check("gpt_oss_tiny", NULL, KT_PRECISION_FAST, 0.0f);
    check("gpt_oss_tiny", NULL, KT_PRECISION_FAST, 1.0f);
}

/* Every product on libkt's own kernels (KT_GPU_F_NO_CUBLAS): the 8-token GEMV
 * tiles in prefill; with a huge grouping threshold also the per-pair expert
 * kernels that decode uses, over a whole prompt. The default runs (cuBLAS
 * with hi/lo activations, grouped experts from 16 tokens) are the FIXTURE tests. */
static void test_own_kernels(void **s)
{
    (void)s;
    g_gpu_flags = KT_GPU_F_NO_CUBLAS;
    check("qwen3_moe_tiny", NULL, KT_PRECISION_F32, 1.0f);
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 1.0f);
    check("deepseek_v3_tiny", "fp8", KT_PRECISION_FAST, 1.0f);
    setenv("KT_GPU_GEMM_MIN_TOKENS", "100000", 1);
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 1.0f);
    check("deepseek_v3_tiny", "fp8", KT_PRECISION_FAST, 0.5f);
    check("mixtral_tiny", NULL, KT_PRECISION_F32, 1.0f);
    unsetenv("KT_GPU_GEMM_MIN_TOKENS");
    g_gpu_flags = 0;
}

/* Layerwise prefill (layerwise_tokens 16: the whole prompt): every expert of a
 * layer on the GPU, the CPU-resident ones copied in on the side stream through
 * two slots; decode stays hybrid. Held to transformers like the hybrid runs. */
static void test_layerwise(void **s)
{
    (void)s;
    g_lw_tokens = 16;
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 0.0f);
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 0.5f);
    check("deepseek_v3_tiny", "fp8", KT_PRECISION_FAST, 0.0f);
    check("deepseek_v3_tiny", "bf16", KT_PRECISION_FAST, 0.5f);
    check("mixtral_tiny", NULL, KT_PRECISION_FAST, 0.25f);
    /* INT4 experts: the packed words and group scales copied in */
    check("deepseek_v3_tiny", "int4", KT_PRECISION_FAST, 0.0f);
    /* split: two CPU-resident experts a layer copied in (straight from the
     * mapping: the staged copies need the MoE workers), the CPU the rest */
    setenv("KT_GPU_LW_STREAM", "2", 1);
    setenv("KT_GPU_LW_COPY", "pageable", 1);
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 0.0f);
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 0.5f);
    check("deepseek_v3_tiny", "bf16", KT_PRECISION_FAST, 0.25f);
    unsetenv("KT_GPU_LW_STREAM");
    unsetenv("KT_GPU_LW_COPY");
    g_lw_tokens = 0;
}

/* KT_GPU_F_DECODE_BF16: decode's CPU experts on the backend's BF16 activations
 * (prompt chunks keep BF16X2), held to transformers as the hybrid runs are (the
 * H200, 12:16, by KT_GPU_DECODE_ACT=bf16 over the fixture tests: 80/81 or 81/81
 * decode positions within 5e-2, greedy identical). INT4 at 50 %: the AMX sets'
 * one-token rows are wider than BF16X2's (the backend's workspaces grow). */
static void test_decode_bf16(void **s)
{
    (void)s;
    g_gpu_flags = KT_GPU_F_DECODE_BF16;
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 0.0f);
    check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 0.5f);
    check("deepseek_v3_tiny", "fp8", KT_PRECISION_FAST, 0.0f);
    check("deepseek_v3_tiny", "int4", KT_PRECISION_FAST, 0.5f);
    check("gpt_oss_tiny", NULL, KT_PRECISION_FAST, 0.0f);
    g_gpu_flags = 0;
}

/* Device limits measured through the public API (kt-bench e2e's yardsticks) */
static void test_limits(void **s)
{
    (void)s;
    kt_gpu_limits lim = KT_GPU_LIMITS_INIT;
    assert_int_equal(kt_gpu_measure_limits(0, &lim), KT_OK);
    print_message("  device 0: HBM copy %.0f GB/s, PCIe h2d %.1f GB/s, d2h %.1f GB/s, BF16 GEMM "
                  "%.0f TFLOP/s\n", lim.hbm_gbs, lim.h2d_gbs, lim.d2h_gbs, lim.bf16_tflops);
    assert_true(lim.hbm_gbs > 0 && lim.h2d_gbs > 0 && lim.d2h_gbs > 0 && lim.bf16_tflops > 0);
    assert_int_equal(kt_gpu_measure_limits(99, &lim), KT_ERR_UNSUPPORTED);
}

/* Greedy ids of a trained demo model in dir: gpu 0 the CPU engine, 1..3 the GPU
 * runtime with 0 %, 50 %, 100 % of the experts on the GPU, 4 half of them with
 * naive MLA decode (fast precision). */
static void demo_greedy(const char *dir, const ref_data *r, int gpu, int32_t *ids, size_t *n)
{
    static const float frac[5] = {0.0f, 0.0f, 0.5f, 1.0f, 0.5f};
    kt_model *model = NULL;
    assert_int_equal(kt_model_open(&model, NULL, dir, NULL), KT_OK);
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = 256;
    co.n_threads = 2;
    kt_context *ctx = NULL;
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_OK);
    if (gpu) {
        kt_gpu_options go = KT_GPU_OPTIONS_INIT;
        go.expert_fraction = frac[gpu];
        go.flags = gpu == 4 ? KT_GPU_F_MLA_NAIVE : 0;
        assert_int_equal(kt_context_use_gpu(ctx, &go), KT_OK);
    }
    assert_int_equal(kt_context_greedy(ctx, r->prompt, (size_t)r->T, greedy_count(r->n_greedy),
                                       ids, n), KT_OK);
    kt_context_free(ctx);
    kt_model_free(model);
}

/* The trained demo models (Kimi-K2 architecture, models/kimi-k2-demo; and
 * qwen3_moe, tests/data/models/qwen3_moe_demo when its weights are there: they
 * are not in the repository, scripts/device-hybrid.sh's demo stage carries
 * them): the GPU's greedy ids at 0 %, 50 % and 100 % of the experts on the GPU
 * (and naive MLA decode) are the CPU engine's, which are transformers'. */
static void test_demo_model(void **state)
{
    (void)state;
    char dirs[2][1024], probe[1100];
    const char *data = getenv("KT_TEST_DATA");
    snprintf(dirs[1], sizeof dirs[1], "%s/models/qwen3_moe_demo", data ? data : "tests/data");
    for (int m = 0; m < 2; m++) {
        ref_data r;
        if (m == 0) {
            demo_ref_load(&r, dirs[0], sizeof dirs[0]);
        } else {
            snprintf(probe, sizeof probe, "%.1000s/model-00001-of-00002.safetensors", dirs[1]);
            FILE *fp = fopen(probe, "rb");
            if (!fp) {
                print_message("  %s: no weights here, skipped\n", dirs[1]);
                continue;
            }
            fclose(fp);
            ref_load(&r, dirs[1]);
        }
        const char *name = m ? "qwen3-moe-demo" : "kimi-k2-demo";
        int32_t ids[5][64];
        size_t n[5] = {0, 0, 0, 0, 0};
        assert_true(r.n_greedy <= 64);
        for (int gpu = 0; gpu < (m ? 4 : 5); gpu++)
            demo_greedy(dirs[m], &r, gpu, ids[gpu], &n[gpu]);
        int ref = n[0] == greedy_count(r.n_greedy) &&
                  !memcmp(ids[0], r.greedy, sizeof(int32_t) * n[0]);
        print_message("  %s: CPU engine greedy %zu ids, %s transformers'\n", name, n[0],
                      ref ? "identical to" : "DIFFERENT from");
        assert_true(ref);
        for (int gpu = 1; gpu < (m ? 4 : 5); gpu++) {
            int same = n[gpu] == n[0] && !memcmp(ids[gpu], ids[0], sizeof(int32_t) * n[0]);
            print_message("  %s, %s: GPU greedy %s the CPU engine's\n", name,
                          gpu == 1 ? "0 % of the experts on the GPU" :
                          gpu == 2 ? "50 %" : gpu == 3 ? "100 %" : "50 %, naive MLA decode",
                          same ? "identical to" : "DIFFERENT from");
            assert_true(same);
        }
        ref_free(&r);
    }
}

/* Two moves in every MoE layer: CPU experts E - 1 and E - 1 - k in, GPU experts
 * 0 and k out. Returns the count (at most cap). */
static size_t two_moves_a_layer(const kt_context *ctx, int32_t k, kt_expert_move *mv, size_t cap)
{
    int32_t E = ctx->hp.n_expert;
    size_t n = 0;
    for (int32_t l = 0; l < ctx->hp.n_layer && n + 2 <= cap; l++)
        if (ctx->hp.layer_moe[l]) {
            mv[n++] = (kt_expert_move){(uint32_t)l, (uint32_t)(E - 1), 0, 0, 0};
            mv[n++] = (kt_expert_move){(uint32_t)l, (uint32_t)(E - 1 - k), (uint32_t)k, 0, 0};
        }
    return n;
}

/* The moves that undo mv (in and out swapped), in place. */
static void reverse_moves(kt_expert_move *mv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t t = mv[i].expert_in;
        mv[i].expert_in = mv[i].expert_out;
        mv[i].expert_out = t;
    }
}

/* Dynamic expert moves (kt_context_gpu_move_experts): with half the experts
 * on the GPU, swapping experts between the GPU and the CPU between steps
 * keeps the logits (the CPU backend's BF16X2 activations are F32-accurate),
 * the greedy ids and the GPU expert count; bad batches change nothing. */
static void test_expert_moves(void **state)
{
    (void)state;
    const char *dir = fixture_path("qwen3_moe_tiny", NULL);
    ref_data r;
    ref_load(&r, dir);
    kt_model *model;
    kt_context *ctx = open_gpu(dir, KT_PRECISION_FAST, 0.5f, &model);
    int32_t E = ctx->hp.n_expert, n_gpu = kt_context_gpu_experts(ctx);
    assert_true(n_gpu > 0 && n_gpu < E);
    size_t TV = (size_t)r.T * r.V;
    float *pre0 = calloc(TV, sizeof(float)), *dec0 = calloc(TV, sizeof(float));
    float *pre = calloc(TV, sizeof(float)), *dec = calloc(TV, sizeof(float));
    run_logits(ctx, &r, pre0, dec0);
    /* every MoE layer: the last two experts (CPU) in, the first two (GPU) out */
    kt_expert_move mv[128];
    size_t n = two_moves_a_layer(ctx, 1, mv, 128);
    assert_true(n > 0);
    /* bad batches: nothing moves */
    kt_expert_move bad = {mv[0].layer, 0, 1, 0, 0}; /* expert 0 is on the GPU already */
    assert_int_equal(kt_context_gpu_move_experts(ctx, &bad, 1), KT_ERR_INVALID_ARG);
    bad = (kt_expert_move){(uint32_t)ctx->hp.n_layer, (uint32_t)(E - 1), 0, 0, 0};
    assert_int_equal(kt_context_gpu_move_experts(ctx, &bad, 1), KT_ERR_INVALID_ARG);
    kt_expert_move twice[2] = {mv[0], mv[0]};
    assert_int_equal(kt_context_gpu_move_experts(ctx, twice, 2), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_context_gpu_move_experts(ctx, mv, n), KT_OK);
    assert_int_equal(kt_context_gpu_move_wait(ctx), KT_OK);
    assert_int_equal(kt_context_gpu_experts(ctx), n_gpu);
    run_logits(ctx, &r, pre, dec);
    float dp = max_abs_diff(pre, pre0, TV), dd = max_abs_diff(dec, dec0, TV);
    reverse_moves(mv, n); /* and back again */
    assert_int_equal(kt_context_gpu_move_experts(ctx, mv, n), KT_OK);
    assert_int_equal(kt_context_gpu_move_wait(ctx), KT_OK);
    float *pre2 = calloc(TV, sizeof(float)), *dec2 = calloc(TV, sizeof(float));
    run_logits(ctx, &r, pre2, dec2);
    float bp = max_abs_diff(pre2, pre0, TV), bd = max_abs_diff(dec2, dec0, TV);
    print_message("  qwen3_moe_tiny fast, %d/%d experts on the GPU, %zu moves: logits moved "
                  "by %.3g (prefill) and %.3g (decode); moved back: %.3g, %.3g\n", n_gpu, E,
                  n, dp, dd, bp, bd);
    /* a near-tied router may flip at a position after the experts changed sides */
    assert_true(rows_within(pre, pre0, r.T, r.V, 1e-2f) >= r.T - 2);
    assert_true(rows_within(dec, dec0, r.T, r.V, 1e-2f) >= r.T - 2);
    assert_true(bp <= 1e-4f && bd <= 1e-4f);
    assert_true(rows_within(pre, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
    assert_true(rows_within(dec, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
    free(pre0), free(dec0), free(pre), free(dec), free(pre2), free(dec2);
    kt_context_free(ctx);
    kt_model_free(model);
    ref_free(&r);
}

/* Decode far past one tile of the split attention kernel (64 positions): 300
 * cached positions of a fixed pseudo-random prompt, then 6 greedy steps and a
 * 2-token chunk, all experts on the GPU in f32 against the CPU engine in f32,
 * with the device's split count and with `splits` forced (1: every tile of a
 * step folded by the online softmax in one block). */
static void long_decode(const char *name, const char *variant, const char *splits)
{
    const char *dir = fixture_path(name, variant);
    ref_data r;
    ref_load(&r, dir);
    enum { P = 300, STEPS = 6 };
    if (splits)
        setenv("KT_GPU_ATTN_SPLITS", splits, 1);
    g_n_ctx = 512;
    kt_model *model;
    kt_context *gctx = open_gpu(dir, KT_PRECISION_F32, 1.0f, &model);
    g_n_ctx = 256;
    unsetenv("KT_GPU_ATTN_SPLITS");
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = 512;
    co.precision = KT_PRECISION_F32;
    co.n_threads = 2;
    kt_context *cctx = NULL;
    assert_int_equal(kt_context_create(&cctx, NULL, model, &co), KT_OK);
    int32_t V = kt_context_n_vocab(cctx);
    int32_t *prompt = malloc(sizeof(int32_t) * P);
    float *gl = calloc((size_t)V, sizeof(float)), *cl = calloc((size_t)V, sizeof(float));
    for (int32_t i = 0; i < P; i++)
        prompt[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    assert_int_equal(kt_context_eval(gctx, prompt, P, gl, 0), KT_OK);
    assert_int_equal(kt_context_eval(cctx, prompt, P, cl, 0), KT_OK);
    float worst = max_abs_diff(gl, cl, (size_t)V);
    int same = 1;
    for (int step = 0; step <= STEPS; step++) {
        int32_t tok[2] = {kt_argmax(cl, (size_t)V), 5};
        same &= kt_argmax(gl, (size_t)V) == tok[0];
        /* the last step: a chunk of two tokens (the split kernel takes T <= 2) */
        size_t n = step < STEPS ? 1 : 2;
        assert_int_equal(kt_context_eval(gctx, tok, n, gl, 0), KT_OK);
        assert_int_equal(kt_context_eval(cctx, tok, n, cl, 0), KT_OK);
        float d = max_abs_diff(gl, cl, (size_t)V);
        worst = d > worst ? d : worst;
    }
    same &= kt_argmax(gl, (size_t)V) == kt_argmax(cl, (size_t)V);
    print_message("  %s/%s f32, %d cached positions, splits %s: logits max|diff| %.3g from the "
                  "CPU engine over %d steps, greedy %s\n", name, variant ? variant : "bf16",
                  P + STEPS + 2, splits ? splits : "auto", worst, STEPS + 1,
                  same ? "identical" : "DIFFERENT");
    assert_true(worst <= 1e-3f);
    assert_true(same);
    free(prompt), free(gl), free(cl);
    kt_context_free(gctx);
    kt_context_free(cctx);
    kt_model_free(model);
    ref_free(&r);
}

static void test_long_decode(void **state)
{
    (void)state;
    long_decode("qwen3_moe_tiny", NULL, NULL);
    long_decode("qwen3_moe_tiny", NULL, "1");
    long_decode("qwen3_moe_tiny", NULL, "3");
    long_decode("deepseek_v3_tiny", "bf16", NULL);
    long_decode("deepseek_v3_tiny", "bf16", "1");
    long_decode("mixtral_tiny", NULL, "2");
}

/* Prefill logits of `T` tokens (the fixture's prompt repeated) with the chunk's
 * experts grouped on the device, and with the host-sorted per-expert path
 * (KT_GPU_GROUPED=0): the same products, so the same logits to F32 rounding.
 * 480 tokens put about 120 rows on each of 8 experts (two 64-row tiles each). */
static void grouped_pair(const char *name, const char *variant, float frac)
{
    const char *dir = fixture_path(name, variant);
    ref_data r;
    ref_load(&r, dir);
    const int32_t T = 480;
    int32_t *ids = calloc((size_t)T, sizeof(int32_t));
    for (int32_t t = 0; t < T; t++)
        ids[t] = r.prompt[t % r.T];
    size_t TV = (size_t)T * r.V;
    float *dev = calloc(TV, sizeof(float)), *host = calloc(TV, sizeof(float));
    g_n_ctx = 512;
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            setenv("KT_GPU_GROUPED", "0", 1);
        kt_model *model;
        kt_context *ctx = open_gpu(dir, KT_PRECISION_FAST, frac, &model);
        assert_int_equal(kt_context_eval(ctx, ids, (size_t)T, pass ? host : dev,
                                         KT_EVAL_ALL_LOGITS), KT_OK);
        kt_context_free(ctx);
        kt_model_free(model);
    }
    unsetenv("KT_GPU_GROUPED");
    g_n_ctx = 256;
    float d = max_abs_diff(dev, host, TV), mag = 0.0f;
    for (size_t i = 0; i < TV; i++)
        mag = fmaxf(mag, fabsf(host[i]));
    float tol = 1e-4f * fmaxf(1.0f, mag);
    int32_t within = rows_within(dev, host, T, r.V, tol);
    print_message("  %s/%s fast, %.0f%% of the experts on the GPU, %d tokens: device-grouped "
                  "vs host-sorted experts max|diff| %.3g (logits up to %.3g), %d/%d positions "
                  "within %.2g\n", name, variant ? variant : "bf16", 100.0 * frac, T, d, mag,
                  within, T, tol);
    /* a router near-tie may flip on rounding: a position or two, not more */
    assert_true(within >= T - 2);
    free(dev), free(host), free(ids);
    ref_free(&r);
}

static void test_grouped_device(void **state)
{
    (void)state;
    grouped_pair("qwen3_moe_tiny", NULL, 1.0f);
    grouped_pair("qwen3_moe_tiny", NULL, 0.5f);
    grouped_pair("mixtral_tiny", NULL, 1.0f);
    grouped_pair("deepseek_v3_tiny", "bf16", 1.0f);
}

/* Decode logits with the runtime's variable env at each of vals[1..n) against
 * vals[0] (the decode folds, KT_GPU_FUSE=1: the residual add + norm in the
 * product before it; 7: also q/k post in the q/k/v product and the split
 * attention's merge in its last split block, against 0, every step as
 * separate launches; the decode kernels that stream before they wait,
 * KT_GPU_GEMV, against 0, the earlier kernels): the same arithmetic but for
 * the order of a few sums, so the same logits to F32 rounding and the same
 * greedy ids. */
static void variants_check(const char *name, const char *variant, kt_precision prec, float frac,
                           const char *env, const char *const vals[], int n)
{
    const char *dir = fixture_path(name, variant);
    ref_data r;
    ref_load(&r, dir);
    size_t TV = (size_t)r.T * r.V;
    float *pre = calloc(TV, sizeof(float));
    float *dec[4];
    assert_true(n >= 2 && n <= 4);
    for (int pass = 0; pass < n; pass++) {
        dec[pass] = calloc(TV, sizeof(float));
        setenv(env, vals[pass], 1);
        double t0 = phase_now();
        kt_model *model;
        kt_context *ctx = open_gpu(dir, prec, frac, &model);
        unsetenv(env);
        double t1 = phase_now();
        /* the decode's logits are compared; KT_TEST_SHORT: its chunk runs the
         * prompt's kernels, so no prefill before it */
        run_logits(ctx, &r, short_steps() ? NULL : pre, dec[pass]);
        if (t0 >= 0)
            print_message("    %s=%s times: setup %.2f s, logits %.2f\n", env,
                          vals[pass], t1 - t0, phase_now() - t1);
        kt_context_free(ctx);
        kt_model_free(model);
    }
    float mag = 0.0f;
    for (size_t i = 0; i < TV; i++)
        mag = fmaxf(mag, fabsf(dec[0][i]));
    for (int pass = 1; pass < n; pass++) {
        float d = max_abs_diff(dec[pass], dec[0], TV);
        int32_t same = 0;
        for (int32_t t = 0; t < r.T; t++)
            same += kt_argmax(dec[pass] + (size_t)t * r.V, (size_t)r.V) ==
                    kt_argmax(dec[0] + (size_t)t * r.V, (size_t)r.V);
        print_message("  %s/%s %s, %.0f%% of the experts on the GPU: decode with %s=%s vs %s "
                      "max|diff| %.3g (logits up to %.3g), argmax equal at %d/%d\n", name,
                      variant ? variant : "bf16", prec == KT_PRECISION_F32 ? "f32" : "fast",
                      100.0 * frac, env, vals[pass], vals[0], d, mag, same, r.T);
        /* with CPU experts a rounding of the normed row to the backend's
         * activations may differ between the two */
        assert_true(d <= (frac < 1.0f ? 1e-3f : 1e-5f) * fmaxf(1.0f, mag));
        assert_int_equal(same, r.T);
    }
    for (int pass = 0; pass < n; pass++)
        free(dec[pass]);
    free(pre);
    ref_free(&r);
}

static void fused_check(const char *name, const char *variant, kt_precision prec, float frac)
{
    static const char *const fuse[3] = {"0", "1", "7"}; /* separate, add + norm, all */
    variants_check(name, variant, prec, frac, "KT_GPU_FUSE", fuse, 3);
}

static void test_fused_decode(void **state)
{
    (void)state;
    fused_check("qwen3_moe_tiny", NULL, KT_PRECISION_F32, 1.0f);
    fused_check("qwen3_moe_tiny", NULL, KT_PRECISION_F32, 0.5f);
    fused_check("deepseek_v3_tiny", "bf16", KT_PRECISION_F32, 1.0f);
    fused_check("deepseek_v3_tiny", "fp8", KT_PRECISION_F32, 0.5f);
    fused_check("gpt_oss_tiny", NULL, KT_PRECISION_FAST, 1.0f);
    fused_check("mixtral_tiny", NULL, KT_PRECISION_F32, 1.0f);
}

/* The decode kernels that stream before they wait (KT_GPU_GEMV, default 31)
 * against the earlier ones (0), and the expert kernels alone (6: the
 * one-wave up product and the down product that reads its weights before the
 * wait), in fast precision so that BF16 weights reach the BF16 paths; FP8 and
 * INT4 experts take the new kernels' other branches */
static void gemv_check(const char *name, const char *variant, float frac)
{
    static const char *const gemv[3] = {"0", "31", "6"};
    variants_check(name, variant, KT_PRECISION_FAST, frac, "KT_GPU_GEMV", gemv, 3);
}

static void test_gemv_decode(void **state)
{
    (void)state;
    gemv_check("qwen3_moe_tiny", NULL, 1.0f);
    gemv_check("qwen3_moe_tiny", NULL, 0.5f);
    gemv_check("deepseek_v3_tiny", "bf16", 1.0f);
    gemv_check("deepseek_v3_tiny", "fp8", 0.5f);
    gemv_check("deepseek_v3_tiny", "int4", 1.0f);
    gemv_check("gpt_oss_tiny", NULL, 1.0f);
    gemv_check("mixtral_tiny", NULL, 1.0f);
}

/* KT_GPU_GEMV at gemv[1..n) against gemv[0] on six fixture runs: GQA with q / k
 * norms (qwen3_moe, all experts on the GPU and half), sinks and sliding windows
 * (gpt_oss), plain GQA (mixtral), MLA with FP8 and INT4 experts (deepseek_v3) */
static void gemv_variants(const char *const gemv[], int n)
{
    variants_check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 1.0f, "KT_GPU_GEMV", gemv, n);
    variants_check("qwen3_moe_tiny", NULL, KT_PRECISION_FAST, 0.5f, "KT_GPU_GEMV", gemv, n);
    variants_check("gpt_oss_tiny", NULL, KT_PRECISION_FAST, 1.0f, "KT_GPU_GEMV", gemv, n);
    variants_check("mixtral_tiny", NULL, KT_PRECISION_FAST, 1.0f, "KT_GPU_GEMV", gemv, n);
    variants_check("deepseek_v3_tiny", "fp8", KT_PRECISION_FAST, 1.0f, "KT_GPU_GEMV", gemv, n);
    variants_check("deepseek_v3_tiny", "int4", KT_PRECISION_FAST, 0.5f, "KT_GPU_GEMV", gemv, n);
}

/* KT_GPU_GEMV bits 32 (the up kernel prefetches the chosen experts' down
 * matrices into L2 and streams its own rows evict-first), 64 (the split
 * attention runs the q / k norm, RoPE and cache rows itself), 128 (the up
 * kernel one block a multiprocessor) and 256 (the residual added by the
 * products, its norm by the next product's blocks) against 31 (the kernels
 * before them): hints, a grid size and the same arithmetic in other kernels,
 * so the same logits. GQA with q / k norms (qwen3_moe), sinks and sliding windows
 * (gpt_oss), plain GQA (mixtral), MLA (deepseek_v3: bit 64 does not apply),
 * FP8 and INT4 experts (other down matrix sizes), CPU experts (no prefetch). */
static void test_l2_qk_decode(void **state)
{
    (void)state;
    static const char *const gemv[4] = {"31", "511", "95", "287"};
    gemv_variants(gemv, 4);
}

/* KT_GPU_GEMV bit 512 (the expert-down product of one token with a warp per
 * (expert, 8 output rows), the experts' sums weighted in shared memory; 863 the
 * default, 991 with bit 128 too) and bit 1024 (q / k / v two rows a warp,
 * 1887) against 351 (the kernels before them): the same products, the
 * experts' summed in another order, so the logits to F32 rounding and the same
 * greedy ids. BF16 experts (qwen3_moe at 100 and 50 %: packed GPU experts fewer
 * than k), FP8 and INT4 experts (the kernel's warp-per-row branch); top-2 each,
 * so 6 of the 8 warps idle. Qwen3's shapes (I = 768: 3 chunks a lane) are
 * checked against a double sum by scripts/gpu_decode_probe.cu. */
static void test_downw_decode(void **state)
{
    (void)state;
    static const char *const gemv[4] = {"351", "863", "991", "1887"};
    gemv_variants(gemv, 4);
}

/* A budget too small fails before loading, naming the flag to change. */
static void test_budget(void **state)
{
    (void)state;
    const char *dir = fixture_path("qwen3_moe_tiny", NULL);
    kt_model *model = NULL;
    assert_int_equal(kt_model_open(&model, NULL, dir, NULL), KT_OK);
    kt_context *ctx = NULL;
    assert_int_equal(kt_context_create(&ctx, NULL, model, NULL), KT_OK);
    kt_gpu_options go = KT_GPU_OPTIONS_INIT;
    go.mem_limit = 4096;
    assert_int_equal(kt_context_use_gpu(ctx, &go), KT_ERR_NOMEM);
    assert_non_null(strstr(kt_last_error(), "--mem-fraction-static"));
    assert_int_equal(kt_context_gpu(ctx), -1);
    go.mem_limit = 0;
    go.flags = 1u << 30;
    assert_int_equal(kt_context_use_gpu(ctx, &go), KT_ERR_INVALID_ARG);
    kt_context_free(ctx);
    kt_model_free(model);
}

/* Expert moves copied while steps run (kt_gpu_options.move_slots): a context
 * whose moves go through spare slots (decode steps running while the copies
 * land) ends with the same placement as one whose moves copy before they
 * return (move_slots < 0) and as one with too few spares (1 slot: the blocking
 * path): logits bit-identical after kt_context_gpu_move_wait, and identical to
 * the start after moving back; a second batch while one copies waits for it. */
static void test_expert_moves_async(void **state)
{
    (void)state;
    const char *dir = fixture_path("qwen3_moe_tiny", NULL);
    ref_data r;
    ref_load(&r, dir);
    enum { N_CTX = 3 };
    static const int32_t slots[N_CTX] = {-1, 0, 1};
    kt_model *model[N_CTX];
    kt_context *ctx[N_CTX];
    for (int c = 0; c < N_CTX; c++) {
        g_move_slots = slots[c];
        ctx[c] = open_gpu(dir, KT_PRECISION_FAST, 0.5f, &model[c]);
    }
    g_move_slots = 0;
    size_t TV = (size_t)r.T * r.V;
    float *pre[N_CTX], *dec[N_CTX], *pre0 = calloc(TV, sizeof(float)),
          *dec0 = calloc(TV, sizeof(float)), *step = calloc((size_t)r.V, sizeof(float));
    for (int c = 0; c < N_CTX; c++) {
        pre[c] = calloc(TV, sizeof(float));
        dec[c] = calloc(TV, sizeof(float));
    }
    run_logits(ctx[0], &r, pre0, dec0);
    kt_expert_move mv[128];
    size_t n = two_moves_a_layer(ctx[0], 2, mv, 128);
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < N_CTX; c++) {
            kt_context_reset(ctx[c]);
            assert_int_equal(kt_context_gpu_move_experts(ctx[c], mv, n), KT_OK);
            /* steps go on while the copies land (either placement is a valid one) */
            for (int32_t t = 0; t < steps_while_moving(r.T); t++)
                assert_int_equal(kt_context_eval(ctx[c], &r.prompt[t], 1, step, 0), KT_OK);
            if (c == 1 && pass == 0) {
                /* a second batch first waits for the first: moving the same experts back
                 * and forth again is valid only once the first has landed */
                kt_expert_move back[128], again[128];
                for (size_t i = 0; i < n; i++) {
                    back[i] = mv[i], again[i] = mv[i];
                    back[i].expert_in = mv[i].expert_out, back[i].expert_out = mv[i].expert_in;
                }
                assert_int_equal(kt_context_gpu_move_experts(ctx[c], back, n), KT_OK);
                assert_int_equal(kt_context_gpu_move_experts(ctx[c], again, n), KT_OK);
            }
            assert_int_equal(kt_context_gpu_move_wait(ctx[c]), KT_OK);
            assert_int_equal(kt_context_gpu_move_wait(ctx[c]), KT_OK); /* none pending */
            run_logits(ctx[c], &r, pre[c], dec[c]);
        }
        float d1 = max_abs_diff(pre[1], pre[0], TV), d2 = max_abs_diff(pre[2], pre[0], TV);
        float e1 = max_abs_diff(dec[1], dec[0], TV), e2 = max_abs_diff(dec[2], dec[0], TV);
        float back = max_abs_diff(dec[1], dec0, TV);
        print_message("  pass %d, %zu moves: spare slots vs blocking: %.3g / %.3g (prefill / "
                      "decode), one slot vs blocking %.3g / %.3g; against the start %.3g\n",
                      pass, n, d1, e1, d2, e2, back);
        assert_true(d1 == 0 && e1 == 0 && d2 == 0 && e2 == 0);
        if (pass == 1)
            assert_true(back <= 1e-4f && max_abs_diff(pre[1], pre0, TV) <= 1e-4f);
        reverse_moves(mv, n); /* the second pass moves them back */
    }
    for (int c = 0; c < N_CTX; c++) {
        free(pre[c]), free(dec[c]);
        kt_context_free(ctx[c]);
        kt_model_free(model[c]);
    }
    free(pre0), free(dec0), free(step);
    ref_free(&r);
}

/* kt_context_gpu_rebalance: with half the experts on the GPU, the context
 * observes the routes its CPU backend sees (the expert statistics attached to
 * it count every token and pair of every MoE layer, as on the CPU), moves the
 * experts the run uses by itself, and the logits stay with transformers'. */
static void test_gpu_rebalance(void **state)
{
    (void)state;
    const char *dir = fixture_path("qwen3_moe_tiny", NULL);
    ref_data r;
    ref_load(&r, dir);
    kt_model *model;
    kt_context *ctx = open_gpu(dir, KT_PRECISION_FAST, 0.5f, &model);
    const kt__hparams *hp = &ctx->hp;
    kt_expert_stats *stats = NULL;
    assert_int_equal(kt_expert_stats_create(&stats, (uint32_t)hp->n_layer,
                                            (uint32_t)hp->n_expert), KT_OK);
    assert_int_equal(kt_context_set_expert_stats(ctx, stats), KT_OK);
    kt_rebalancer_options ro = KT_REBALANCER_OPTIONS_INIT;
    ro.hysteresis = 1.0, ro.move_cost_pairs = 0.1, ro.half_life_tokens = 64;
    assert_int_equal(kt_context_gpu_rebalance(ctx, 2, &ro), KT_OK);
    size_t TV = (size_t)r.T * r.V;
    float *pre = calloc(TV, sizeof(float)), *dec = calloc(TV, sizeof(float));
    uint64_t batches = 0, experts = 0;
    for (int round = 0; round < 3; round++) {
        run_logits(ctx, &r, pre, dec);
        assert_true(rows_within(pre, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
        assert_true(rows_within(dec, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
    }
    assert_int_equal(kt_context_gpu_move_wait(ctx), KT_OK);
    kt_context_gpu_moved(ctx, &batches, &experts);
    /* every token of the three rounds (prefill T, then T steps) and its k pairs */
    uint64_t tokens = kt_expert_stats_tokens(stats);
    double pairs = 0;
    for (int32_t l = 0; l < hp->n_layer; l++)
        for (int32_t e = 0; e < hp->n_expert; e++)
            pairs += kt_expert_stats_count(stats, (uint32_t)l, (uint32_t)e);
    print_message("  qwen3_moe_tiny fast, 50%%: %" PRIu64 " experts moved in %" PRIu64
                  " batches; statistics: %" PRIu64 " tokens, %.0f pairs\n", experts, batches,
                  tokens, pairs);
    assert_true(batches > 0 && experts > 0);
    assert_int_equal(tokens, (uint64_t)6 * r.T);
    assert_true(pairs == (double)tokens * hp->n_expert_used * hp->n_layer);
    /* after the moves: still transformers' logits */
    run_logits(ctx, &r, pre, dec);
    assert_true(rows_within(pre, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
    assert_true(rows_within(dec, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
    assert_int_equal(kt_context_gpu_rebalance(ctx, 0, NULL), KT_OK); /* off */
    assert_int_equal(kt_context_set_expert_stats(ctx, NULL), KT_OK);
    kt_expert_stats_free(stats);
    free(pre), free(dec);
    kt_context_free(ctx);
    kt_model_free(model);
    ref_free(&r);
}

/* Expert moves with layerwise prefill on: an outgoing expert takes the
 * incoming one's place in the slots, so a layerwise prefill (every expert on
 * the GPU, the CPU-resident ones copied in) gives the same logits before and
 * after the moves; decode steps (hybrid) stay with transformers'; moving back
 * gives the start's logits. */
static void test_expert_moves_layerwise(void **state)
{
    (void)state;
    const char *dir = fixture_path("qwen3_moe_tiny", NULL);
    ref_data r;
    ref_load(&r, dir);
    kt_model *model;
    g_lw_tokens = 16;
    kt_context *ctx = open_gpu(dir, KT_PRECISION_FAST, 0.5f, &model);
    g_lw_tokens = 0;
    size_t TV = (size_t)r.T * r.V;
    float *pre0 = calloc(TV, sizeof(float)), *dec0 = calloc(TV, sizeof(float));
    float *pre = calloc(TV, sizeof(float)), *dec = calloc(TV, sizeof(float));
    assert_true(r.T >= 16); /* the prompt runs layerwise */
    run_logits(ctx, &r, pre0, dec0);
    kt_expert_move mv[128];
    size_t n = two_moves_a_layer(ctx, 3, mv, 128);
    assert_int_equal(kt_context_gpu_move_experts(ctx, mv, n), KT_OK);
    assert_int_equal(kt_context_gpu_move_wait(ctx), KT_OK);
    run_logits(ctx, &r, pre, dec);
    float dp = max_abs_diff(pre, pre0, TV), dd = max_abs_diff(dec, dec0, TV);
    reverse_moves(mv, n);
    assert_int_equal(kt_context_gpu_move_experts(ctx, mv, n), KT_OK);
    assert_int_equal(kt_context_gpu_move_wait(ctx), KT_OK);
    float *pre2 = calloc(TV, sizeof(float)), *dec2 = calloc(TV, sizeof(float));
    run_logits(ctx, &r, pre2, dec2);
    float bp = max_abs_diff(pre2, pre0, TV), bd = max_abs_diff(dec2, dec0, TV);
    print_message("  qwen3_moe_tiny fast, 50%%, layerwise prefill, %zu moves: prefill logits "
                  "moved by %.3g, decode by %.3g; moved back: %.3g, %.3g\n", n, dp, dd, bp, bd);
    assert_true(dp <= 1e-5f);
    assert_true(rows_within(dec, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
    assert_true(rows_within(pre, r.logits, r.T, r.V, 5e-2f) >= r.T - 2);
    assert_true(bp <= 1e-5f && bd <= 1e-4f);
    free(pre0), free(dec0), free(pre), free(dec), free(pre2), free(dec2);
    kt_context_free(ctx);
    kt_model_free(model);
    ref_free(&r);
}

/* KT_GPU_GEMV bits 4096 (4959 = 863 + 4096: the one-token router launch
 * computes the logits only, the expert-up and expert-down kernels each select
 * the top-k from them) and 8192 (9055: the router's last block selects by
 * ranks, a thread an expert in shared memory; 13151 both, the default since
 * session 8) against 863 (the last block selecting by k rounds of a warp
 * arg-max): the same selection rule and the same weight arithmetic, so the
 * same logits. Softmax then top-k renormed (qwen3_moe), top-k then softmax
 * (gpt_oss, mixtral); the other paths launch the selection first: CPU experts
 * (qwen3_moe 50 %, int4 50 %: the hand-over to the CPU needs the ids) and
 * DeepSeek's group limits (deepseek_v3 fp8). */
static void test_router_decode(void **state)
{
    (void)state;
    static const char *const gemv[4] = {"863", "4959", "9055", "13151"};
    gemv_variants(gemv, 4);
}

int main(void)
{
    if (kt_gpu_count() < 1) {
        fprintf(stderr, "no CUDA device (or a build without CUDA): skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_qwen3_moe),
        cmocka_unit_test(test_deepseek_v3_bf16),
        cmocka_unit_test(test_deepseek_v3_fp8),
        cmocka_unit_test(test_deepseek_v3_int4),
        cmocka_unit_test(test_mixtral),
        cmocka_unit_test(test_minimax_m2),
        cmocka_unit_test(test_minimax_m2_fp8),
        cmocka_unit_test(test_gpt_oss),
        cmocka_unit_test(test_deepseek_v3_naive),
        cmocka_unit_test(test_own_kernels),
        cmocka_unit_test(test_layerwise),
        cmocka_unit_test(test_decode_bf16),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_demo_model),
        cmocka_unit_test(test_expert_moves),
        cmocka_unit_test(test_long_decode),
        cmocka_unit_test(test_grouped_device),
        cmocka_unit_test(test_fused_decode),
        cmocka_unit_test(test_gemv_decode),
        cmocka_unit_test(test_l2_qk_decode),
        cmocka_unit_test(test_downw_decode),
        cmocka_unit_test(test_expert_moves_async),
        cmocka_unit_test(test_gpu_rebalance),
        cmocka_unit_test(test_expert_moves_layerwise),
        cmocka_unit_test(test_router_decode),
    };
    /* KT_TEST_FILTER=test_qwen3*: a subset (compute-sanitizer runs are slow) */
    const char *filter = getenv("KT_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
