/*
 * kt-convert's library call and libkt's CPU format: conversion of the fixture
 * and demo checkpoints (BF16 and FP8 sources) to AMXINT8 / AMXINT4, resume,
 * verify, bad input, and the round trip convert -> load -> forward: the
 * engine's logits with converted experts against the same model's BF16 ones.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt/kt.h"
#include "convert/cpu_weights.h"
#include "kt/convert.h"
#include "kt/engine.h"

static char data_dir[2048];
static char tmp_root[] = "/tmp/kt_convert_XXXXXX";

static void path_of(char *out, size_t n, const char *rel)
{
    snprintf(out, n, "%s/%s", data_dir, rel);
}

static int setup(void **state)
{
    (void)state;
    const char *d = getenv("KT_TEST_DATA");
    snprintf(data_dir, sizeof data_dir, "%s", d ? d : "tests/data");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct layer_log {
    int calls, resumed;
    double worst;
} layer_log;

static void on_layer(uint32_t layer, double rel, uint64_t bytes, int32_t resumed, void *user)
{
    (void)layer;
    (void)bytes;
    layer_log *l = user;
    l->calls++;
    l->resumed += resumed;
    if (rel > l->worst)
        l->worst = rel;
}

static kt_status convert_g(const char *src_rel, const char *out_name, int method,
                           uint32_t group, uint32_t flags, kt_convert_report *rep,
                           layer_log *log)
{
    char src[4096], out[4096];
    path_of(src, sizeof src, src_rel);
    snprintf(out, sizeof out, "%s/%s", tmp_root, out_name);
    kt_convert_options co = KT_CONVERT_OPTIONS_INIT;
    co.method = method;
    co.group_size = group;
    co.flags = flags;
    co.n_threads = 2;
    co.layer_fn = on_layer;
    co.layer_user_data = log;
    return kt_convert(NULL, src, out, &co, rep);
}

static kt_status convert(const char *src_rel, const char *out_name, int method, uint32_t flags,
                         kt_convert_report *rep, layer_log *log)
{
    return convert_g(src_rel, out_name, method, 0, flags, rep, log);
}

static void test_convert_fixtures(void **state)
{
    (void)state;
    struct {
        const char *src;
        int method;
        double max_rel; /* bound on the layers' relative RMS error */
        uint32_t group;
    } cases[] = {
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT8, 0.01, 0},
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT4, 0.11, 0},
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT4, 0.12, 64},
        {"fixtures/deepseek_v3_tiny/fp8", KT_METHOD_AMXINT8, 0.01, 0},
        {"fixtures/qwen3_moe_tiny", KT_METHOD_AMXINT4, 0.11, 0},
        {"fixtures/mixtral_tiny", KT_METHOD_AMXINT8, 0.01, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "case%zu", i);
        kt_convert_report rep = KT_CONVERT_REPORT_INIT;
        layer_log log = {0};
        kt_status st = convert_g(cases[i].src, name, cases[i].method, cases[i].group,
                                 KT_CONVERT_F_VERIFY, &rep, &log);
        if (st < 0)
            fail_msg("%s: %s", cases[i].src, kt_last_error());
        assert_true(rep.n_layers > 0);
        assert_int_equal(log.calls, (int)rep.n_layers);
        assert_true(rep.max_rel_rms > 0.0 && rep.max_rel_rms < cases[i].max_rel);
        printf("  %-32s %-7s g%-3u %u layers, relative RMS error mean %.5f, worst %.5f\n",
               cases[i].src, kt_method_name((kt_method)cases[i].method),
               cases[i].method == KT_METHOD_AMXINT4 ? (cases[i].group ? cases[i].group : 32) : 0,
               rep.n_layers, rep.mean_rel_rms, rep.max_rel_rms);
    }
}

static void test_resume_and_bad_input(void **state)
{
    (void)state;
    kt_convert_report rep = KT_CONVERT_REPORT_INIT;
    layer_log log = {0};
    assert_int_equal(convert("fixtures/deepseek_v3_tiny/bf16", "resume", KT_METHOD_AMXINT8, 0,
                             &rep, &log),
                     KT_OK);
    double first = rep.mean_rel_rms;
    /* drop one layer file: a resumed run keeps the other and redoes this one */
    char path[4200];
    snprintf(path, sizeof path, "%s/resume/kt-experts-layer-002.safetensors", tmp_root);
    assert_int_equal(unlink(path), 0);
    log = (layer_log){0};
    assert_int_equal(convert("fixtures/deepseek_v3_tiny/bf16", "resume", KT_METHOD_AMXINT8,
                             KT_CONVERT_F_RESUME, &rep, &log),
                     KT_OK);
    assert_int_equal(rep.n_resumed, 1);
    assert_int_equal(log.resumed, 1);
    assert_true(fabs(rep.mean_rel_rms - first) < 1e-9);
    /* another method into the same place is not "resumed" */
    assert_int_equal(convert("fixtures/deepseek_v3_tiny/bf16", "resume", KT_METHOD_AMXINT4,
                             KT_CONVERT_F_RESUME, &rep, &log),
                     KT_OK);
    assert_int_equal(rep.n_resumed, 0);

    /* a truncated layer file is not trusted either */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), 100), 0);
    fclose(f);
    assert_int_equal(convert("fixtures/deepseek_v3_tiny/bf16", "resume", KT_METHOD_AMXINT4,
                             KT_CONVERT_F_RESUME, &rep, &log),
                     KT_OK);
    assert_int_equal(rep.n_resumed, 1);

    assert_int_equal(convert("fixtures/deepseek_v3_tiny/int4", "x1", KT_METHOD_AMXINT8, 0, NULL,
                             &log),
                     KT_ERR_UNSUPPORTED);
    assert_non_null(strstr(kt_last_error(), "weight_packed"));
    assert_int_equal(convert("no/such/model", "x2", KT_METHOD_AMXINT8, 0, NULL, &log),
                     KT_ERR_IO);
    assert_int_equal(convert("fixtures/deepseek_v3_tiny/bf16", "x3", KT_METHOD_BF16, 0, NULL,
                             &log),
                     KT_ERR_INVALID_ARG);
    kt_convert_options co = KT_CONVERT_OPTIONS_INIT;
    co.method = KT_METHOD_AMXINT4;
    co.group_size = 48; /* not a group size the kernels take */
    char src[4096];
    path_of(src, sizeof src, "fixtures/deepseek_v3_tiny/bf16");
    assert_int_equal(kt_convert(NULL, src, tmp_root, &co, NULL), KT_ERR_UNSUPPORTED);
    co.group_size = 128; /* does not divide the intermediate size 192 */
    assert_int_equal(kt_convert(NULL, src, tmp_root, &co, NULL), KT_ERR_UNSUPPORTED);
    assert_non_null(strstr(kt_last_error(), "192"));
    /* output path that is a file */
    snprintf(path, sizeof path, "%s/plainfile", tmp_root);
    f = fopen(path, "w");
    fclose(f);
    co.group_size = 0;
    assert_int_equal(kt_convert(NULL, src, path, &co, NULL), KT_ERR_IO);
}

/* Rewrites the kt.version value of a layer file in place (one digit). */
static void set_version(const char *dir, int layer, char digit)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/kt-experts-layer-%03d.safetensors", dir, layer);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    char head[4096];
    size_t n = fread(head, 1, sizeof head - 1, f);
    head[n] = '\0';
    const char *key = "\"kt.version\":\"";
    char *at = strstr(head + 8, key);
    assert_non_null(at);
    assert_int_equal(fseek(f, (long)(at - head + strlen(key)), SEEK_SET), 0);
    assert_int_equal(fputc(digit, f), digit);
    fclose(f);
}

/* Format versions: files say 2 (AMXINT4 scales on the grid, checked by
 * --verify); version 1 files still load, an AMXINT4 --resume converts them
 * again, and other versions are refused naming the file. */
static void test_format_versions(void **state)
{
    (void)state;
    kt_convert_report rep = KT_CONVERT_REPORT_INIT;
    layer_log log = {0};
    assert_int_equal(convert("fixtures/qwen3_moe_tiny", "ver", KT_METHOD_AMXINT4,
                             KT_CONVERT_F_VERIFY, &rep, &log),
                     KT_OK);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ver", tmp_root);
    kt__cpu_weights *cw = NULL;
    assert_int_equal(kt__cpu_weights_open(&cw, dir), KT_OK);
    assert_int_equal(kt__cpu_weights_version(cw), 2);
    kt__cpu_weights_close(cw);
    set_version(dir, 0, '1');
    set_version(dir, 1, '1');
    assert_int_equal(kt__cpu_weights_open(&cw, dir), KT_OK);
    assert_int_equal(kt__cpu_weights_version(cw), 1);
    kt__cpu_weights_close(cw);
    assert_int_equal(convert("fixtures/qwen3_moe_tiny", "ver", KT_METHOD_AMXINT4,
                             KT_CONVERT_F_RESUME, &rep, &log),
                     KT_OK);
    assert_int_equal(rep.n_resumed, 0);
    set_version(dir, 1, '3');
    assert_int_equal(kt__cpu_weights_open(&cw, dir), KT_ERR_UNSUPPORTED);
    assert_non_null(strstr(kt_last_error(), "kt-experts-layer-001"));
    assert_non_null(strstr(kt_last_error(), "version 3"));
}

/* Relative L2 distance of the prompt logits with converted experts from the
 * BF16 checkpoint's own (fast mode, same MoE backend). */
static double logits_error(const char *model_rel, const char *weights, uint32_t flags,
                           int *same_argmax)
{
    char dir[4096];
    path_of(dir, sizeof dir, model_rel);
    kt_model *m = NULL;
    assert_int_equal(kt_model_open(&m, NULL, dir, NULL), KT_OK);
    const int32_t prompt[] = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79};
    const int T = (int)(sizeof prompt / sizeof prompt[0]);
    float *ref = NULL, *got = NULL;
    int V = 0;
    for (int pass = 0; pass < 2; pass++) {
        kt_context_options o = KT_CONTEXT_OPTIONS_INIT;
        o.n_ctx = 64;
        o.n_threads = 1;
        o.flags = flags;
        o.weight_path = pass ? weights : NULL;
        kt_context *ctx = NULL;
        kt_status st = kt_context_create(&ctx, NULL, m, &o);
        if (st < 0)
            fail_msg("%s (%s): %s", model_rel, pass ? weights : "bf16", kt_last_error());
        V = kt_context_n_vocab(ctx);
        float *l = malloc((size_t)T * V * sizeof(float));
        assert_int_equal(kt_context_eval(ctx, prompt, (size_t)T, l, KT_EVAL_ALL_LOGITS), KT_OK);
        if (pass)
            got = l;
        else
            ref = l;
        kt_context_free(ctx);
    }
    double num = 0, den = 0;
    *same_argmax = 0;
    for (int t = 0; t < T; t++) {
        int a = 0, b = 0;
        for (int v = 0; v < V; v++) {
            double d = got[t * V + v] - ref[t * V + v];
            num += d * d;
            den += (double)ref[t * V + v] * ref[t * V + v];
            if (ref[t * V + v] > ref[t * V + a])
                a = v;
            if (got[t * V + v] > got[t * V + b])
                b = v;
        }
        *same_argmax += a == b;
    }
    free(ref);
    free(got);
    kt_model_free(m);
    return sqrt(num / den);
}

static void test_round_trip(void **state)
{
    (void)state;
    const struct {
        const char *model;
        int method;
        double max_err;
        uint32_t group, flags;
    } cases[] = {
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT8, 0.02, 0, 0},
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT4, 0.2, 0, 0},
        {"fixtures/qwen3_moe_tiny", KT_METHOD_AMXINT8, 0.02, 0, 0},
        {"fixtures/qwen3_moe_tiny", KT_METHOD_AMXINT4, 0.2, 0, 0},
        /* fast MoE precision: the int8-activation kernels (VNNI here, AMX tiles
         * on AMX machines) against the BF16 checkpoint in the same mode */
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT8, 0.03, 0, KT_CONTEXT_F_MOE_BF16},
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT4, 0.25, 64, 0},
        {"fixtures/deepseek_v3_tiny/bf16", KT_METHOD_AMXINT4, 0.25, 64, KT_CONTEXT_F_MOE_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64], out[4200];
        snprintf(name, sizeof name, "rt%zu", i);
        snprintf(out, sizeof out, "%s/%s", tmp_root, name);
        layer_log log = {0};
        assert_int_equal(convert_g(cases[i].model, name, cases[i].method, cases[i].group, 0,
                                   NULL, &log),
                         KT_OK);
        int same = 0;
        double err = logits_error(cases[i].model, out, cases[i].flags, &same);
        printf("  %-32s %-7s g%-3u %-4s logits relative error %.4f, argmax equal at %d/16 "
               "positions\n",
               cases[i].model, kt_method_name((kt_method)cases[i].method),
               cases[i].method == KT_METHOD_AMXINT4 ? (cases[i].group ? cases[i].group : 32) : 0,
               cases[i].flags ? "fast" : "", err, same);
        assert_true(err < cases[i].max_err);
    }
    /* converted from another model: refused with a message naming the directory */
    char dir[4096], other[4200];
    path_of(dir, sizeof dir, "fixtures/mixtral_tiny");
    snprintf(other, sizeof other, "%s/rt0", tmp_root);
    kt_model *m = NULL;
    assert_int_equal(kt_model_open(&m, NULL, dir, NULL), KT_OK);
    kt_context_options o = KT_CONTEXT_OPTIONS_INIT;
    o.weight_path = other;
    kt_context *ctx = NULL;
    assert_true(kt_context_create(&ctx, NULL, m, &o) < 0);
    assert_non_null(strstr(kt_last_error(), "rt0"));
    kt_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert_fixtures),
        cmocka_unit_test(test_resume_and_bad_input),
        cmocka_unit_test(test_format_versions),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
