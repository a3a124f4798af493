/* Engine against the fixtures' transformers outputs (tests/data/fixtures):
 * per-layer hidden states, logits and greedy ids, in f32 and fast precision,
 * prefill and one-token-at-a-time decode through the KV cache. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "engine/engine_internal.h"
#include "io/safetensors.h"
#include "kt/kt.h"

#include "fixture_ref.h"
#include "test_files.h"

/* Top-1 minus top-2 of a row. */
static float margin(const float *x, int32_t n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return a - b;
}

static uint32_t g_ctx_flags; /* extra kt_context_options flags for the next open_ctx */
static int32_t g_n_batch;    /* prefill chunk for the next open_ctx (0: default)      */
static int32_t g_n_threads = 1; /* threads for the next open_ctx                      */

static kt_context *open_ctx(const char *dir, kt_precision prec, kt_model **model)
{
    *model = NULL;
    if (kt_model_open(model, NULL, dir, NULL) < 0) {
        fail_msg("kt_model_open(%s): %s", dir, kt_last_error());
        return NULL;
    }
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = 256;
    co.precision = prec;
    co.n_threads = g_n_threads;
    co.flags = g_ctx_flags;
    co.n_batch = g_n_batch;
    kt_context *ctx = NULL;
    if (kt_context_create(&ctx, NULL, *model, &co) < 0)
        fail_msg("kt_context_create(%s): %s", dir, kt_last_error());
    return ctx;
}

static void close_ctx(kt_context *ctx, kt_model *model)
{
    kt_context_free(ctx);
    kt_model_free(model);
}

/* The fixture's directory, its reference loaded into r. */
static const char *load_fixture(ref_data *r, const char *name, const char *variant)
{
    const char *dir = fixture_path(name, variant);
    ref_load(r, dir);
    return dir;
}

/* "name/variant f32" (or fast) for the messages. */
static const char *run_label(const char *name, const char *variant, kt_precision prec)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "%s/%s %s", name, variant ? variant : "bf16",
             prec == KT_PRECISION_F32 ? "f32" : "fast");
    return buf;
}

/* Full-prompt forward (prefill): hidden states layer by layer, then logits. */
static void check_prefill(const char *name, const char *variant, kt_precision prec)
{
    ref_data r;
    const char *dir = load_fixture(&r, name, variant);
    kt_model *model;
    kt_context *ctx = open_ctx(dir, prec, &model);
    assert_int_equal(kt_context_n_vocab(ctx), r.V);
    assert_int_equal(kt_context_n_layer(ctx) + 1, r.L1);
    size_t TH = (size_t)r.T * r.H;
    float *hidden = calloc((size_t)r.L1 * TH, sizeof(float));
    float *logits = calloc((size_t)r.T * r.V, sizeof(float));
    ctx->capture_hidden = hidden;
    assert_int_equal(kt_context_eval(ctx, r.prompt, (size_t)r.T, logits, KT_EVAL_ALL_LOGITS),
                     KT_OK);
    ctx->capture_hidden = NULL;

    int bad_layer = -1;
    for (int32_t l = 0; l < r.L1; l++) {
        float d = max_abs_diff(hidden + l * TH, r.hidden + l * TH, TH);
        print_message("  %s: hidden[%d] max|diff| %.3g\n", run_label(name, variant, prec), l,
                      d);
        if (prec == KT_PRECISION_F32 && !(d <= 1e-3f) && bad_layer < 0)
            bad_layer = l;
    }
    float dl = max_abs_diff(logits, r.logits, (size_t)r.T * r.V);
    print_message("  %s: logits max|diff| %.3g\n", run_label(name, variant, prec), dl);
    if (prec == KT_PRECISION_F32) {
        if (bad_layer >= 0)
            fail_msg("%s: hidden states diverge first at layer output %d", name, bad_layer);
        assert_true(dl <= 1e-3f);
    } else {
        int32_t ok = 0, argmax_bad = 0;
        for (int32_t t = 0; t < r.T; t++) {
            const float *a = logits + (size_t)t * r.V, *b = r.logits + (size_t)t * r.V;
            if (max_abs_diff(a, b, (size_t)r.V) <= 5e-2f)
                ok++;
            if (margin(b, r.V) > 0.1f && kt_argmax(a, (size_t)r.V) != kt_argmax(b, (size_t)r.V)) {
                print_message("  %s fast: argmax differs at position %d (reference margin "
                              "%.3f)\n", name, t, margin(b, r.V));
                argmax_bad++;
            }
        }
        bool backend = ctx->moe != NULL;
        assert_int_equal(kt_context_expert_method(ctx) != KT_METHOD_NONE, backend);
        print_message("  %s fast%s: %d/%d positions within 5e-2, %d argmax misses\n", name,
                      !backend                  ? ""
                      : ctx->moe_shared_folded ? " (MoE backend, shared expert folded in)"
                                               : " (MoE backend)",
                      ok, r.T, argmax_bad);
        if (!(g_ctx_flags & KT_CONTEXT_F_MOE_BF16)) {
            /* F32 activations, or the backend's hi + lo BF16 ones: the issue's
             * criterion exactly, with and without the backend */
            assert_true(ok * 100 >= 99 * r.T);
            assert_int_equal(argmax_bad, 0);
        }
        /* KT_CONTEXT_F_MOE_BF16 (BF16 expert activations) is reported only: it
         * flips near-tied routers of these random models at single positions */
    }
    free(hidden), free(logits);
    close_ctx(ctx, model);
    ref_free(&r);
}

/* Token-by-token decode through the KV cache: every position's logits, then
 * greedy generation with the cache. */
static void check_decode(const char *name, const char *variant, kt_precision prec)
{
    ref_data r;
    const char *dir = load_fixture(&r, name, variant);
    kt_model *model;
    kt_context *ctx = open_ctx(dir, prec, &model);
    float *logits = calloc((size_t)r.V, sizeof(float));
    float worst = 0.0f;
    int32_t ok = 0, argmax_bad = 0;
    for (int32_t t = 0; t < r.T; t++) {
        assert_int_equal(kt_context_eval(ctx, &r.prompt[t], 1, logits, 0), KT_OK);
        const float *b = r.logits + (size_t)t * r.V;
        float d = max_abs_diff(logits, b, (size_t)r.V);
        worst = d > worst ? d : worst;
        ok += d <= 5e-2f;
        argmax_bad += margin(b, r.V) > 0.1f &&
                      kt_argmax(logits, (size_t)r.V) != kt_argmax(b, (size_t)r.V);
    }
    print_message("  %s: decode logits max|diff| %.3g, %d/%d positions within 5e-2, "
                  "%d argmax misses\n", run_label(name, variant, prec), worst, ok, r.T,
                  argmax_bad);
    /* F32 activations everywhere (f32, or fast with the engine's experts): the
     * weights are exact in their stored types, so the bound is the f32 one */
    if (prec == KT_PRECISION_F32 || (g_ctx_flags & KT_CONTEXT_F_ENGINE_EXPERTS))
        assert_true(worst <= 1e-3f);
    /* fast through the backend (hi + lo BF16 expert activations), F32 KV cache:
     * the criterion, decode as well as prefill */
    if (prec == KT_PRECISION_FAST &&
        !(g_ctx_flags & (KT_CONTEXT_F_MOE_BF16 | KT_CONTEXT_F_KV_BF16))) {
        assert_true(ok * 100 >= 99 * r.T);
        assert_int_equal(argmax_bad, 0);
    }

    kt_context_reset(ctx);
    int32_t out[64];
    size_t n = 0;
    assert_int_equal(kt_context_greedy(ctx, r.prompt, (size_t)r.T, (size_t)r.n_greedy, out, &n),
                     KT_OK);
    print_message("  %s greedy:", name);
    for (size_t i = 0; i < n; i++)
        print_message(" %d", out[i]);
    print_message(" (reference");
    for (int32_t i = 0; i < r.n_greedy; i++)
        print_message(" %d", r.greedy[i]);
    print_message(")\n");
    /* greedy ids must match in every mode: the fixtures' greedy margins are
     * well above the fast modes' logit error */
    assert_int_equal((int)n, r.n_greedy);
    for (int32_t i = 0; i < r.n_greedy; i++)
        assert_int_equal(out[i], r.greedy[i]);
    free(logits);
    close_ctx(ctx, model);
    ref_free(&r);
}

/* Fast mode with a BF16 KV cache: greedy ids as the reference, logits reported. */
static void check_kv_bf16(const char *name, const char *variant)
{
    g_ctx_flags = KT_CONTEXT_F_KV_BF16;
    check_decode(name, variant, KT_PRECISION_FAST);
    g_ctx_flags = 0;
}

/* Fast prefill and decode with extra context flags: KT_CONTEXT_F_MOE_BF16 (the backend's
 * BF16 expert activations: greedy ids as the reference, logits reported) or
 * KT_CONTEXT_F_ENGINE_EXPERTS (the engine's F32-activation experts instead of the backend;
 * decode: absorbed MLA on stored kv_b). */
static void check_fast_flags(const char *name, const char *variant, uint32_t flags)
{
    g_ctx_flags = flags;
    check_prefill(name, variant, KT_PRECISION_FAST);
    check_decode(name, variant, KT_PRECISION_FAST);
    g_ctx_flags = 0;
}

/* Prefill in chunks of 7 tokens: the same outputs as one pass. */
static void check_chunked(const char *name, const char *variant)
{
    g_n_batch = 7;
    check_prefill(name, variant, KT_PRECISION_F32);
    g_n_batch = 0;
}

/* f32 with the engine's own workers (3 threads) splitting the dense layers,
 * and fast with KT_CONTEXT_F_DENSE_WORKERS. */
static void check_threads(const char *name, const char *variant)
{
    g_n_threads = 3;
    check_prefill(name, variant, KT_PRECISION_F32);
    check_decode(name, variant, KT_PRECISION_F32);
    g_n_threads = 1;
    /* fast with dense workers next to the MoE backend's */
    g_ctx_flags = KT_CONTEXT_F_DENSE_WORKERS;
    check_prefill(name, variant, KT_PRECISION_FAST);
    g_ctx_flags = 0;
}

/* One cmocka test function fn running call. */
#define ONE_TEST(fn, call)                                                                 \
    static void fn(void **s)                                                               \
    {                                                                                      \
        (void)s;                                                                           \
        call;                                                                              \
    }

#define FIXTURE_TESTS(fn, name, variant)                                                   \
    ONE_TEST(fn##_kv_bf16, check_kv_bf16(name, variant))                                   \
    ONE_TEST(fn##_own_experts, check_fast_flags(name, variant, KT_CONTEXT_F_ENGINE_EXPERTS)) \
    ONE_TEST(fn##_moe_bf16, check_fast_flags(name, variant, KT_CONTEXT_F_MOE_BF16))          \
    ONE_TEST(fn##_chunked, check_chunked(name, variant))                                   \
    ONE_TEST(fn##_threads, check_threads(name, variant))                                   \
    ONE_TEST(fn##_prefill_f32, check_prefill(name, variant, KT_PRECISION_F32))             \
    ONE_TEST(fn##_decode_f32, check_decode(name, variant, KT_PRECISION_F32))               \
    ONE_TEST(fn##_prefill_fast, check_prefill(name, variant, KT_PRECISION_FAST))           \
    ONE_TEST(fn##_decode_fast, check_decode(name, variant, KT_PRECISION_FAST))

FIXTURE_TESTS(qwen3, "qwen3_moe_tiny", NULL)
FIXTURE_TESTS(mixtral, "mixtral_tiny", NULL)
FIXTURE_TESTS(gptoss, "gpt_oss_tiny", NULL)
FIXTURE_TESTS(minimax, "minimax_m2_tiny", "bf16")
FIXTURE_TESTS(minimax_fp8, "minimax_m2_tiny", "fp8")
FIXTURE_TESTS(dsv3, "deepseek_v3_tiny", "bf16")
FIXTURE_TESTS(dsv3_fp8, "deepseek_v3_tiny", "fp8")
FIXTURE_TESTS(dsv3_int4, "deepseek_v3_tiny", "int4")

#define ENTRIES(fn)                                                                     \
    cmocka_unit_test(fn##_prefill_f32), cmocka_unit_test(fn##_decode_f32),              \
        cmocka_unit_test(fn##_prefill_fast), cmocka_unit_test(fn##_decode_fast),           \
        cmocka_unit_test(fn##_kv_bf16), cmocka_unit_test(fn##_own_experts),                \
        cmocka_unit_test(fn##_moe_bf16),                                                   \
        cmocka_unit_test(fn##_chunked), cmocka_unit_test(fn##_threads)

static const int32_t *toks_dummy(void)
{
    static const int32_t t[1] = {1};
    return t;
}

static void test_bad_input(void **state)
{
    (void)state;
    const char *dir = fixture_path("qwen3_moe_tiny", NULL);
    kt_model *model = NULL;
    if (kt_model_open(&model, NULL, dir, NULL) < 0) {
        fail_msg("%s: %s", dir, kt_last_error());
        return;
    }
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = 8;
    co.precision = 7;
    kt_context *ctx = NULL;
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_ERR_INVALID_ARG);
    assert_null(ctx);
    co.precision = KT_PRECISION_F32;
    co.flags = 1u << 30;
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_ERR_INVALID_ARG);
    co.flags = 0;
    co.n_ctx = -1;
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_ERR_INVALID_ARG);
    co.n_ctx = 8;
    co.method = 99;
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_ERR_INVALID_ARG);
    co.method = 0;
    co.weight_path = "/nonexistent"; /* converted experts run on the backend, not in f32 */
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_ERR_INVALID_ARG);
    co.precision = KT_PRECISION_FAST; /* kt-convert output that is not there */
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_ERR_IO);
    assert_non_null(strstr(kt_last_error(), "/nonexistent"));
    co.precision = KT_PRECISION_F32;
    co.weight_path = NULL;
    assert_int_equal(kt_context_create(&ctx, NULL, NULL, &co), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_context_create(NULL, NULL, model, &co), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_context_create(&ctx, NULL, model, &co), KT_OK);
    assert_int_equal(kt_context_expert_method(ctx), KT_METHOD_NONE); /* f32: own path */
    assert_true(kt_context_n_threads(ctx) >= 1);
    assert_int_equal(kt_context_n_ctx(ctx), 8);
    assert_int_equal(kt_context_eval(ctx, NULL, 1, NULL, 0), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_context_eval(ctx, toks_dummy(), 0, NULL, 0), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_context_eval(ctx, toks_dummy(), 1, NULL, 1u << 7), KT_ERR_INVALID_ARG);
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    assert_int_equal(kt_context_eval(ctx, toks, 9, NULL, 0), KT_ERR_LIMIT);
    assert_non_null(strstr(kt_last_error(), "context"));
    assert_int_equal(kt_context_n_past(ctx), 0);
    int32_t bad = kt_context_n_vocab(ctx);
    assert_int_equal(kt_context_eval(ctx, &bad, 1, NULL, 0), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_context_eval(ctx, toks, 8, NULL, 0), KT_OK);
    assert_int_equal(kt_context_n_past(ctx), 8);
    kt_context_truncate(ctx, 3);
    assert_int_equal(kt_context_n_past(ctx), 3);
    assert_int_equal(kt_argmax(NULL, 0), -1);
    /* kt_argmax is the plain first-maximum scan: ties, NaNs, ragged lengths */
    static float v[2100];
    uint32_t seed = 12345;
    for (size_t n = 1; n <= 2100; n += 37) {
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            v[i] = (float)(seed >> 24) / 16.0f; /* few distinct values: many ties */
            if ((seed & 0xff) == 7)
                v[i] = NAN;
        }
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (v[i] > v[best])
                best = i;
        assert_int_equal(kt_argmax(v, n), (int32_t)best);
    }
    close_ctx(ctx, model);
}

/* ------------------------------------------------------- demo model --- */

/* Perplexity over windows of W+1 held-out ids stepped by W, every prediction
 * scored (the demo models' reference method). */
static double window_ppl(kt_context *ctx, const int32_t *ids, size_t n, int32_t W)
{
    int32_t V = kt_context_n_vocab(ctx);
    float *lg = malloc(sizeof(float) * (size_t)W * V);
    double nll = 0;
    size_t cnt = 0;
    for (size_t s = 0; s + (size_t)W + 1 <= n; s += (size_t)W) {
        kt_context_reset(ctx);
        assert_int_equal(kt_context_eval(ctx, ids + s, (size_t)W, lg, KT_EVAL_ALL_LOGITS), KT_OK);
        for (int32_t j = 0; j < W; j++) {
            const float *row = lg + (size_t)j * V;
            double mx = row[0], sum = 0;
            for (int32_t i = 1; i < V; i++)
                mx = row[i] > mx ? row[i] : mx;
            for (int32_t i = 0; i < V; i++)
                sum += exp(row[i] - mx);
            nll += log(sum) + mx - row[ids[s + (size_t)j + 1]];
            cnt++;
        }
    }
    free(lg);
    return exp(nll / (double)cnt);
}

/* The trained Kimi-K2-architecture demo model shipped in models/: prompt
 * logits and the 48-token greedy continuation of transformers, in both
 * precisions; held-out perplexity reported. */
static void test_demo_model(void **state)
{
    (void)state;
    char dir[1024];
    ref_data r;
    demo_ref_load(&r, dir, sizeof dir);
    const kt_st_tensor *ht = kt__st_find(r.set, "heldout_ids");
    assert_non_null(ht);
    int32_t *held = tensor_i32(ht);
    double ppl[2];
    for (int mode = 0; mode < 2; mode++) {
        kt_precision prec = mode == 0 ? KT_PRECISION_F32 : KT_PRECISION_FAST;
        kt_model *model;
        kt_context *ctx = open_ctx(dir, prec, &model);
        float *lg = malloc(sizeof(float) * (size_t)r.T * r.V);
        assert_int_equal(kt_context_eval(ctx, r.prompt, (size_t)r.T, lg, KT_EVAL_ALL_LOGITS),
                         KT_OK);
        float d = max_abs_diff(lg, r.logits, (size_t)r.T * r.V);
        kt_context_reset(ctx);
        int32_t out[64];
        size_t n = 0;
        assert_int_equal(kt_context_greedy(ctx, r.prompt, (size_t)r.T, (size_t)r.n_greedy, out,
                                           &n), KT_OK);
        ppl[mode] = window_ppl(ctx, held, ht->n_elements, 256);
        print_message("  kimi-k2-demo %s: prompt logits max|diff| %.3g, greedy %zu/%d ids, "
                      "held-out ppl (first %llu ids, windows of 256) %.4f\n",
                      mode ? "fast" : "f32", d, n, r.n_greedy,
                      (unsigned long long)ht->n_elements, ppl[mode]);
        if (prec == KT_PRECISION_F32)
            assert_true(d <= 1e-3f);
        assert_int_equal((int)n, r.n_greedy);
        for (int32_t i = 0; i < r.n_greedy; i++)
            assert_int_equal(out[i], r.greedy[i]);
        free(lg);
        close_ctx(ctx, model);
    }
    assert_true(fabs(ppl[1] - ppl[0]) <= 0.01 * ppl[0]);
    free(held);
    ref_free(&r);
}

/* -------------------------------------------- families without fixtures --- */

/* qwen2_moe and glm4_moe have no transformers fixture here: build tiny random
 * checkpoints and check what holds for any correct engine: the model loads,
 * logits are finite, token-by-token decode through the KV cache and chunked
 * prefill reproduce the one-pass prefill, and the fast path stays close. */
typedef struct syn_w {
    char name[128];
    uint64_t shape[2];
    uint32_t nd;
    int kind; /* 0 random, 1 ones */
} syn_w;

static int syn_add(syn_w *w, int n, int kind, uint64_t a, uint64_t b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w[n].name, sizeof w[n].name, fmt, ap);
    va_end(ap);
    w[n].shape[0] = a;
    w[n].shape[1] = b;
    w[n].nd = b ? 2 : 1;
    w[n].kind = kind;
    return n + 1;
}

/* Embedding, lm_head and final norm. */
static int syn_add_globals(syn_w *w, int n, int V, int H)
{
    n = syn_add(w, n, 0, V, H, "model.embed_tokens.weight");
    n = syn_add(w, n, 0, V, H, "lm_head.weight");
    return syn_add(w, n, 1, H, 0, "model.norm.weight");
}

/* Layer l's two norms and its attention with q / k / v biases. */
static int syn_add_biased_attention(syn_w *w, int n, int l, int H, int q_rows, int kv_rows)
{
    n = syn_add(w, n, 1, H, 0, "model.layers.%d.input_layernorm.weight", l);
    n = syn_add(w, n, 1, H, 0, "model.layers.%d.post_attention_layernorm.weight", l);
    n = syn_add(w, n, 0, q_rows, H, "model.layers.%d.self_attn.q_proj.weight", l);
    n = syn_add(w, n, 0, q_rows, 0, "model.layers.%d.self_attn.q_proj.bias", l);
    n = syn_add(w, n, 0, kv_rows, H, "model.layers.%d.self_attn.k_proj.weight", l);
    n = syn_add(w, n, 0, kv_rows, 0, "model.layers.%d.self_attn.k_proj.bias", l);
    n = syn_add(w, n, 0, kv_rows, H, "model.layers.%d.self_attn.v_proj.weight", l);
    n = syn_add(w, n, 0, kv_rows, 0, "model.layers.%d.self_attn.v_proj.bias", l);
    return syn_add(w, n, 0, H, q_rows, "model.layers.%d.self_attn.o_proj.weight", l);
}

/* Gated MLPs of layer l (gate, up [I][H], down [H][I]) under model.layers.<l>.mlp.<block>:
 * n_experts of them as <block>.<e>, or one unnumbered (shared experts) when n_experts is 0. */
static int syn_add_mlp(syn_w *w, int n, int l, const char *block, int n_experts, int I, int H)
{
    static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
    char module[96];
    for (int e = 0; e < (n_experts ? n_experts : 1); e++) {
        if (n_experts)
            snprintf(module, sizeof module, "%s.%d", block, e);
        else
            snprintf(module, sizeof module, "%s", block);
        for (int k = 0; k < 3; k++)
            n = syn_add(w, n, 0, k == 2 ? H : I, k == 2 ? I : H, "model.layers.%d.mlp.%s.%s.weight",
                        l, module, proj[k]);
    }
    return n;
}

static void syn_write(const char *dir, const char *config, syn_w *w, int n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(config, f);
    fclose(f);
    kt_st_writer *wr = NULL;
    assert_int_equal(kt__st_writer_create(&wr), KT_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(kt__st_writer_declare(wr, w[i].name, KT_TYPE_BF16, w[i].nd, w[i].shape),
                         KT_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(kt__st_writer_begin(wr, path), KT_OK);
    uint64_t seed = 88172645463325252ull;
    for (int i = 0; i < n; i++) {
        uint64_t cnt = w[i].shape[0] * (w[i].nd == 2 ? w[i].shape[1] : 1);
        uint16_t *b = malloc(cnt * 2);
        for (uint64_t j = 0; j < cnt; j++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            float v = w[i].kind ? 1.0f : ((float)(seed >> 40) / 16777216.0f - 0.5f) * 0.3f;
            b[j] = kt__f32_to_bf16(v);
        }
        assert_int_equal(kt__st_writer_write(wr, w[i].name, b, cnt * 2), KT_OK);
        free(b);
    }
    assert_int_equal(kt__st_writer_finish(wr), KT_OK);
    kt__st_writer_free(wr);
}

static void check_consistency(const char *dir)
{
    enum { T = 23 };
    int32_t toks[T];
    for (int i = 0; i < T; i++)
        toks[i] = (i * 37 + 11) % 96;
    kt_model *model;
    kt_context *ctx = open_ctx(dir, KT_PRECISION_F32, &model);
    int32_t V = kt_context_n_vocab(ctx);
    float *full = malloc(sizeof(float) * T * V), *one = malloc(sizeof(float) * V);
    assert_int_equal(kt_context_eval(ctx, toks, T, full, KT_EVAL_ALL_LOGITS), KT_OK);
    for (size_t i = 0; i < (size_t)T * V; i++)
        assert_true(isfinite(full[i]));
    float spread = 0.0f;
    for (size_t i = 0; i < (size_t)T * V; i++)
        spread = fabsf(full[i]) > spread ? fabsf(full[i]) : spread;
    kt_context_reset(ctx);
    float worst = 0.0f;
    for (int t = 0; t < T; t++) {
        assert_int_equal(kt_context_eval(ctx, &toks[t], 1, one, 0), KT_OK);
        float d = max_abs_diff(one, full + (size_t)t * V, (size_t)V);
        worst = d > worst ? d : worst;
    }
    close_ctx(ctx, model);
    g_n_batch = 5;
    ctx = open_ctx(dir, KT_PRECISION_FAST, &model);
    g_n_batch = 0;
    float *fast = malloc(sizeof(float) * T * V);
    assert_int_equal(kt_context_eval(ctx, toks, T, fast, KT_EVAL_ALL_LOGITS), KT_OK);
    float dfast = max_abs_diff(fast, full, (size_t)T * V);
    print_message("  %s: |logits| up to %.3g; decode vs prefill max|diff| %.3g; fast (chunks of 5,"
                  " MoE backend) vs f32 %.3g\n", dir, spread, worst, dfast);
    assert_true(spread > 1e-3f);
    assert_true(worst <= 1e-4f * (1.0f + spread));
    assert_true(dfast <= 5e-2f * (1.0f + spread));
    free(full), free(one), free(fast);
    close_ctx(ctx, model);
}

/* <tmp_root>/<name>: the test group's scratch directory, removed at the end. */
static char *scratch_path(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmp_root, name);
    return buf;
}

static char *syn_dir(const char *name)
{
    char *dir = scratch_path(name);
    mkdir(dir, 0755);
    return dir;
}

static void test_qwen2_moe_consistency(void **state)
{
    (void)state;
    const char *dir = syn_dir("qwen2_moe");
    const int H = 64, L = 2, E = 8, I = 32, S = 48, V = 96, NH = 4, NKV = 2, HD = 16;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"qwen2_moe\", \"hidden_size\": %d, \"num_hidden_layers\": %d,"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"vocab_size\": %d,"
             " \"num_experts\": %d, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": %d,"
             " \"shared_expert_intermediate_size\": %d, \"intermediate_size\": 128,"
             " \"norm_topk_prob\": false, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0,"
             " \"max_position_embeddings\": 256, \"tie_word_embeddings\": false}",
             H, L, NH, NKV, V, E, I, S);
    syn_w *w = calloc(512, sizeof *w);
    int n = 0;
    n = syn_add_globals(w, n, V, H);
    for (int l = 0; l < L; l++) {
        n = syn_add_biased_attention(w, n, l, H, NH * HD, NKV * HD);
        n = syn_add(w, n, 0, E, H, "model.layers.%d.mlp.gate.weight", l);
        n = syn_add_mlp(w, n, l, "experts", E, I, H);
        n = syn_add_mlp(w, n, l, "shared_expert", 0, S, H);
        n = syn_add(w, n, 0, 1, H, "model.layers.%d.mlp.shared_expert_gate.weight", l);
    }
    syn_write(dir, cfg, w, n);
    free(w);
    check_consistency(dir);
}

static void test_glm4_moe_consistency(void **state)
{
    (void)state;
    const char *dir = syn_dir("glm4_moe");
    const int H = 64, L = 3, E = 8, I = 32, F = 96, V = 96, NH = 4, NKV = 2, HD = 32;
    char cfg[1200];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"glm4_moe\", \"hidden_size\": %d, \"num_hidden_layers\": %d,"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,"
             " \"vocab_size\": %d, \"n_routed_experts\": %d, \"num_experts_per_tok\": 2,"
             " \"moe_intermediate_size\": %d, \"intermediate_size\": %d,"
             " \"n_shared_experts\": 1, \"first_k_dense_replace\": 1, \"n_group\": 1,"
             " \"topk_group\": 1, \"routed_scaling_factor\": 2.5, \"norm_topk_prob\": true,"
             " \"partial_rotary_factor\": 0.5, \"attention_bias\": true, \"use_qk_norm\": true,"
             " \"rms_norm_eps\": 1e-5, \"rope_theta\": 1000000.0,"
             " \"max_position_embeddings\": 256, \"tie_word_embeddings\": false}",
             H, L, NH, NKV, HD, V, E, I, F);
    syn_w *w = calloc(512, sizeof *w);
    int n = 0;
    n = syn_add_globals(w, n, V, H);
    for (int l = 0; l < L; l++) {
        n = syn_add_biased_attention(w, n, l, H, NH * HD, NKV * HD);
        n = syn_add(w, n, 1, HD, 0, "model.layers.%d.self_attn.q_norm.weight", l);
        n = syn_add(w, n, 1, HD, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        if (l == 0) {
            n = syn_add(w, n, 0, F, H, "model.layers.%d.mlp.gate_proj.weight", l);
            n = syn_add(w, n, 0, F, H, "model.layers.%d.mlp.up_proj.weight", l);
            n = syn_add(w, n, 0, H, F, "model.layers.%d.mlp.down_proj.weight", l);
            continue;
        }
        n = syn_add(w, n, 0, E, H, "model.layers.%d.mlp.gate.weight", l);
        n = syn_add(w, n, 0, E, 0, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
        n = syn_add_mlp(w, n, l, "experts", E, I, H);
        n = syn_add_mlp(w, n, l, "shared_experts", 0, I, H);
    }
    syn_write(dir, cfg, w, n);
    free(w);
    check_consistency(dir);
}

/* ------------------------------------------------------------ kt-run --- */

static const char *kt_run_path(void)
{
    static char buf[1024];
    const char *b = getenv("KT_BUILD_ROOT");
    snprintf(buf, sizeof buf, "%s/tools/kt-run/kt-run", b ? b : "build");
    FILE *f = fopen(buf, "rb");
    if (!f)
        return NULL;
    fclose(f);
    return buf;
}

static char *ids_csv(const int32_t *ids, int32_t n)
{
    char *s = malloc((size_t)n * 12 + 1);
    size_t o = 0;
    for (int32_t i = 0; i < n; i++)
        o += (size_t)sprintf(s + o, "%s%d", i ? "," : "", ids[i]);
    s[o] = 0;
    return s;
}

static char *run_capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char out[65536];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    assert_int_equal(pclose(p), 0);
    return out;
}

/* `kt-run --model F --prompt-ids P -n N --temp 0 --print-ids` and --logits-out */
static void test_cli_generate(void **state)
{
    (void)state;
    const char *exe = kt_run_path();
    if (!exe) {
        skip();
        return;
    }
    ref_data r;
    const char *dir = load_fixture(&r, "deepseek_v3_tiny", "bf16");
    char *p = ids_csv(r.prompt, r.T);
    char *cmd = malloc(strlen(p) + 2048);
    sprintf(cmd, "'%s' --model '%s' --prompt-ids %s -n %d --temp 0 --print-ids --precision f32",
            exe, dir, p, r.n_greedy + 5);
    char *out = run_capture(cmd);
    char *want = ids_csv(r.greedy, r.n_greedy);
    print_message("  kt-run greedy: %s", out);
    assert_int_equal(strncmp(out, want, strlen(want)), 0);
    assert_true(out[strlen(want)] == '\n'); /* stopped at EOS */
    free(want);

    const char *npy = scratch_path("logits.npy");
    sprintf(cmd, "'%s' --model '%s' --prompt-ids %s --logits-out '%s' --precision f32", exe, dir, p,
            npy);
    run_capture(cmd);
    FILE *f = fopen(npy, "rb");
    assert_non_null(f);
    unsigned char hdr[10];
    assert_int_equal(fread(hdr, 1, 10, f), 10);
    assert_memory_equal(hdr, "\x93NUMPY\x01\x00", 8);
    size_t hl = hdr[8] | (size_t)hdr[9] << 8;
    assert_int_equal((10 + hl) % 64, 0);
    char dict[512] = {0};
    assert_int_equal(fread(dict, 1, hl, f), hl);
    char shape[64];
    snprintf(shape, sizeof shape, "'shape': (%d, %d)", r.T, r.V);
    assert_non_null(strstr(dict, "'descr': '<f4'"));
    assert_non_null(strstr(dict, shape));
    float *lg = malloc(sizeof(float) * (size_t)r.T * r.V);
    assert_int_equal(fread(lg, sizeof(float), (size_t)r.T * r.V, f), (size_t)r.T * r.V);
    fclose(f);
    remove(npy);
    float d = max_abs_diff(lg, r.logits, (size_t)r.T * r.V);
    print_message("  kt-run --logits-out max|diff| %.3g\n", d);
    assert_true(d <= 1e-3f);
    free(lg), free(cmd), free(p);
    ref_free(&r);
}

/* One window covering the prompt: the perplexity must equal the one computed
 * from the reference logits. */
static void test_cli_perplexity(void **state)
{
    (void)state;
    const char *exe = kt_run_path();
    if (!exe) {
        skip();
        return;
    }
    ref_data r;
    const char *dir = load_fixture(&r, "qwen3_moe_tiny", NULL);
    const char *idf = scratch_path("ids.txt");
    FILE *f = fopen(idf, "w");
    char *p = ids_csv(r.prompt, r.T);
    fprintf(f, "%s\n", p);
    fclose(f);
    double nll = 0;
    for (int32_t t = 0; t + 1 < r.T; t++) {
        const float *row = r.logits + (size_t)t * r.V;
        double mx = row[0], sum = 0;
        for (int32_t i = 1; i < r.V; i++)
            mx = row[i] > mx ? row[i] : mx;
        for (int32_t i = 0; i < r.V; i++)
            sum += exp(row[i] - mx);
        nll += log(sum) + mx - row[r.prompt[t + 1]];
    }
    double want = exp(nll / (r.T - 1));
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' perplexity --model '%s' --ids-file '%s' --ctx %d --score all --precision f32 "
             "2>/dev/null",
             exe, dir, idf, r.T - 1);
    char *out = run_capture(cmd);
    remove(idf);
    char *last = strstr(out, "ppl = ");
    assert_non_null(last);
    double got = atof(last + 6);
    print_message("  kt-run perplexity %.4f, from the reference logits %.4f\n", got, want);
    assert_true(fabs(got - want) <= 1e-3 * want);
    free(p);
    ref_free(&r);
}

/* kt_context_eval_multi: three contexts in one pass (a mixed step of prompts
 * of 20, 35 and 5 tokens, then four decode steps) give each context's logits
 * as separate kt_context_eval() calls do. */
static void check_multi(const char *name, const char *variant, kt_precision prec)
{
    ref_data r;
    const char *dir = load_fixture(&r, name, variant);
    if (r.T < 48) {
        skip();
        return;
    }
    enum { NC = 3, STEPS = 4 };
    const int32_t off[NC] = {0, 5, 30}, len[NC] = {20, 35, 5};
    kt_model *model = NULL;
    kt_context *one[NC], *many[NC];
    assert_int_equal(kt_model_open(&model, NULL, dir, NULL), KT_OK);
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = 64;
    co.precision = prec;
    co.n_threads = 1;
    for (int i = 0; i < NC; i++) {
        assert_int_equal(kt_context_create(&one[i], NULL, model, &co), KT_OK);
        assert_int_equal(kt_context_create(&many[i], NULL, model, &co), KT_OK);
    }
    int32_t V = r.V;
    float *ref = malloc(sizeof(float) * NC * V), *got = malloc(sizeof(float) * NC * V);
    int32_t toks[64];
    size_t nt[NC];
    float worst = 0.0f;
    for (int step = 0; step <= STEPS; step++) {
        size_t n = 0;
        for (int i = 0; i < NC; i++) {
            /* step 0: the prompts; then one token each (the next prompt ids) */
            int32_t start = step == 0 ? off[i] : off[i] + len[i] + step - 1;
            nt[i] = step == 0 ? (size_t)len[i] : 1;
            memcpy(toks + n, r.prompt + start, sizeof(int32_t) * nt[i]);
            assert_int_equal(kt_context_eval(one[i], toks + n, nt[i], ref + (size_t)i * V, 0),
                             KT_OK);
            n += nt[i];
        }
        assert_int_equal(kt_context_eval_multi(many, NC, toks, nt, got), KT_OK);
        for (int i = 0; i < NC; i++)
            assert_int_equal(kt_context_n_past(many[i]), kt_context_n_past(one[i]));
        float d = max_abs_diff(got, ref, (size_t)NC * V);
        worst = d > worst ? d : worst;
    }
    print_message("  %s: eval_multi (3 contexts, a mixed step then %d decode steps) vs "
                  "separate evals: max|diff| %.3g\n", run_label(name, variant, prec), STEPS,
                  worst);
    /* f32: the same kernels row by row; fast: oneDNN vs x2 kernels by token count */
    assert_true(worst <= (prec == KT_PRECISION_F32 ? 1e-5f : 2e-3f));

    /* bad input: nothing moves */
    int32_t p0 = kt_context_n_past(many[0]);
    kt_context *dup[2] = {many[0], many[0]};
    size_t one_each[2] = {1, 1};
    assert_int_equal(kt_context_eval_multi(dup, 2, toks, one_each, got), KT_ERR_INVALID_ARG);
    kt_context *two[2] = {many[0], many[1]};
    size_t zero[2] = {1, 0};
    assert_int_equal(kt_context_eval_multi(two, 2, toks, zero, got), KT_ERR_INVALID_ARG);
    int32_t bad[2] = {1, V};
    assert_int_equal(kt_context_eval_multi(two, 2, bad, one_each, got), KT_ERR_INVALID_ARG);
    size_t big[2] = {1, 64};
    int32_t many_toks[65] = {0};
    assert_int_equal(kt_context_eval_multi(two, 2, many_toks, big, got), KT_ERR_LIMIT);
    assert_non_null(strstr(kt_last_error(), "context 1"));
    assert_int_equal(kt_context_n_past(many[0]), p0);
    assert_int_equal(kt_context_eval_multi(NULL, 2, toks, one_each, got), KT_ERR_INVALID_ARG);

    for (int i = 0; i < NC; i++)
        kt_context_free(one[i]), kt_context_free(many[i]);
    free(ref), free(got);
    kt_model_free(model);
    ref_free(&r);
}

/* kt_context_options.share: a context on another's weights, backend and
 * workers gives the same logits with its own cache; eval_multi over both. */
static void test_share(void **state)
{
    (void)state;
    ref_data r;
    const char *dir = load_fixture(&r, "deepseek_v3_tiny", "fp8");
    kt_model *model = NULL, *other = NULL;
    assert_int_equal(kt_model_open(&model, NULL, dir, NULL), KT_OK);
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = 128;
    co.n_threads = 2;
    kt_context *a = NULL, *b = NULL;
    assert_int_equal(kt_context_create(&a, NULL, model, &co), KT_OK);
    co.share = a;
    co.n_ctx = 96;
    assert_int_equal(kt_context_create(&b, NULL, model, &co), KT_OK);
    assert_int_equal(kt_context_n_ctx(b), 96);
    assert_int_equal(kt_context_expert_method(b), kt_context_expert_method(a));
    assert_int_equal(kt_context_n_threads(b), kt_context_n_threads(a));
    int32_t V = r.V;
    float *la = malloc(sizeof(float) * 2 * V), *lb = malloc(sizeof(float) * V);
    assert_int_equal(kt_context_eval(a, r.prompt, 40, la, 0), KT_OK);
    assert_int_equal(kt_context_eval(b, r.prompt, 40, lb, 0), KT_OK);
    assert_true(max_abs_diff(la, lb, (size_t)V) == 0.0f);
    assert_int_equal(kt_context_n_past(a), 40);
    assert_int_equal(kt_context_n_past(b), 40);
    /* both in one pass: the same next token, the same logits */
    kt_context *both[2] = {b, a};
    int32_t next[2] = {r.prompt[40], r.prompt[40]};
    size_t one_each[2] = {1, 1};
    assert_int_equal(kt_context_eval_multi(both, 2, next, one_each, la), KT_OK);
    assert_true(max_abs_diff(la, la + V, (size_t)V) == 0.0f);
    /* a context of another model cannot be shared */
    assert_int_equal(kt_model_open(&other, NULL, fixture_path("qwen3_moe_tiny", NULL), NULL),
                     KT_OK);
    kt_context *c = NULL;
    assert_int_equal(kt_context_create(&c, NULL, other, &co), KT_ERR_INVALID_ARG);
    assert_null(c);
    kt_model_free(other);
    kt_context_free(b); /* the borrower first */
    kt_context_free(a);
    free(la), free(lb);
    kt_model_free(model);
    ref_free(&r);
}

/* Fast prefill of every length from 1 to the fixture's 81 tokens: oneDNN
 * products (>= 8 tokens, in chunks of 64) for many shapes, more than its
 * primitive cache holds, and the x2 kernels below; each prompt's last logits
 * as the reference's. */
static void test_prefill_lengths(void **state)
{
    (void)state;
    ref_data r;
    const char *dir = load_fixture(&r, "qwen3_moe_tiny", NULL);
    if (r.T < 66) {
        skip();
        return;
    }
    kt_model *model;
    g_n_threads = 2;
    kt_context *ctx = open_ctx(dir, KT_PRECISION_FAST, &model);
    g_n_threads = 1;
    float *lg = malloc(sizeof(float) * r.V);
    float worst = 0.0f;
    for (int32_t T = 1; T <= r.T; T++) {
        kt_context_reset(ctx);
        assert_int_equal(kt_context_eval(ctx, r.prompt, (size_t)T, lg, 0), KT_OK);
        float d = max_abs_diff(lg, r.logits + (size_t)(T - 1) * r.V, (size_t)r.V);
        worst = d > worst ? d : worst;
    }
    print_message("  qwen3_moe_tiny fast: prompts of 1..%d tokens, last logits max|diff| %.3g\n",
                  r.T, worst);
    assert_true(worst <= 1e-3f);
    free(lg);
    close_ctx(ctx, model);
    ref_free(&r);
}

static void test_multi_gqa(void **state)
{
    (void)state;
    check_multi("qwen3_moe_tiny", NULL, KT_PRECISION_F32);
    check_multi("qwen3_moe_tiny", NULL, KT_PRECISION_FAST);
    check_multi("gpt_oss_tiny", NULL, KT_PRECISION_FAST); /* sinks, sliding window */
}

static void test_multi_mla(void **state)
{
    (void)state;
    check_multi("deepseek_v3_tiny", "bf16", KT_PRECISION_F32);
    check_multi("deepseek_v3_tiny", "fp8", KT_PRECISION_FAST);
}

static int make_tmp_root(void **state)
{
    (void)state;
    return tmp_root_create("kt_test_engine");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_multi_gqa),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_prefill_lengths),
        cmocka_unit_test(test_multi_mla),
        cmocka_unit_test(test_cli_generate),
        cmocka_unit_test(test_cli_perplexity),
        cmocka_unit_test(test_demo_model),
        cmocka_unit_test(test_qwen2_moe_consistency),
        cmocka_unit_test(test_glm4_moe_consistency),
        ENTRIES(qwen3),
        ENTRIES(mixtral),
        ENTRIES(gptoss),
        ENTRIES(minimax),
        ENTRIES(minimax_fp8),
        ENTRIES(dsv3),
        ENTRIES(dsv3_fp8),
        ENTRIES(dsv3_int4),
    };
    return cmocka_run_group_tests(tests, make_tmp_root, remove_tmp_root);
}
