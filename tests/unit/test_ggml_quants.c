/* ggml block types (cpu/ref/ggml_quants.c) against vectors produced by ggml
 * itself (tests/data/quant-vectors: quantized bytes, dequantized values, the
 * CPU backend's activation quantization and vec_dot results). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../cpu/ref/ggml_quants.h"
#include "io/safetensors.h"
#include "kt_internal.h"

#define ROWS 8
#define COLS 1024

static kt_st_set *vectors;

static const struct case_ {
    const char *name;   /* tensor prefix in the vectors file */
    kt_type type;
} cases[] = {
    {"f16", KT_TYPE_F16},   {"bf16", KT_TYPE_BF16}, {"q4_0", KT_TYPE_Q4_0},
    {"q4_1", KT_TYPE_Q4_1}, {"q5_0", KT_TYPE_Q5_0}, {"q5_1", KT_TYPE_Q5_1},
    {"q8_0", KT_TYPE_Q8_0}, {"q2_K", KT_TYPE_Q2_K}, {"q3_K", KT_TYPE_Q3_K},
    {"q4_K", KT_TYPE_Q4_K}, {"q5_K", KT_TYPE_Q5_K}, {"q6_K", KT_TYPE_Q6_K},
    {"iq4_nl", KT_TYPE_IQ4_NL}, {"iq4_xs", KT_TYPE_IQ4_XS},
};

static const kt_st_tensor *get(const char *type, const char *what)
{
    char name[64];
    if (what)
        snprintf(name, sizeof name, "%s.%s", type, what);
    else
        snprintf(name, sizeof name, "%s", type);
    const kt_st_tensor *t = kt__st_find(vectors, name);
    if (!t)
        fail_msg("vectors: tensor '%s' missing", name);
    return t;
}

static int setup(void **state)
{
    (void)state;
    const char *dir = getenv("KT_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/quant-vectors/ggml-blocks.safetensors",
             dir ? dir : "tests/data");
    if (kt__st_open_file(&vectors, path) < 0) {
        fprintf(stderr, "cannot open %s: %s\n", path, kt_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kt__st_close(vectors);
    return 0;
}

static void test_traits(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const kt_ggml_traits *t = kt__ggml_traits(cases[c].type);
        assert_non_null(t);
        assert_string_equal(t->name, cases[c].name);
        /* row bytes agree with the stored rows and with kt/types.h */
        assert_int_equal(kt__ggml_row_bytes(t->type, COLS), get(cases[c].name, "q")->shape[1]);
        assert_int_equal(t->block_size, kt_type_block_size(t->type));
        assert_int_equal(t->block_bytes, kt_type_block_bytes(t->type));
        /* the partner type named in the file's metadata */
        const kt_ggml_traits *p = kt__ggml_traits(t->vec_dot_type);
        assert_non_null(p);
        assert_non_null(p->from_float);
        assert_non_null(t->vec_dot);
        const char *meta = kt__st_metadata(vectors, "vec_dot_type");
        assert_non_null(meta);
        char want[64];
        snprintf(want, sizeof want, "\"%s\": \"%s\"", cases[c].name, p->name);
        if (!strstr(meta, want))
            fail_msg("%s: vec_dot type %s not in metadata %s", cases[c].name, p->name, meta);
    }
    assert_null(kt__ggml_traits(KT_TYPE_I32));
    assert_int_equal(kt__ggml_row_bytes(KT_TYPE_Q4_K, 100), 0);
}

/* Dequantized values equal ggml's to_float bit for bit. */
static void test_dequantize_exact(void **state)
{
    (void)state;
    float *y = malloc(COLS * sizeof *y);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const kt_ggml_traits *t = kt__ggml_traits(cases[c].type);
        const kt_st_tensor *q = get(cases[c].name, "q"), *deq = get(cases[c].name, "deq");
        size_t rb = (size_t)q->shape[1];
        for (int r = 0; r < ROWS; r++) {
            t->to_float((const uint8_t *)q->data + r * rb, y, COLS);
            const float *want = (const float *)deq->data + r * COLS;
            for (int j = 0; j < COLS; j++)
                if (memcmp(&y[j], &want[j], 4) != 0)
                    fail_msg("%s row %d col %d: dequantized %.9g, ggml %.9g", cases[c].name, r,
                             j, y[j], want[j]);
        }
    }
    free(y);
}

/* The activation quantized to the partner type equals ggml's CPU from_float. */
static void test_activation_quantize_exact(void **state)
{
    (void)state;
    const float *act = get("act", NULL)->data;
    uint8_t *buf = malloc(4 * COLS);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const kt_ggml_traits *t = kt__ggml_traits(cases[c].type);
        const kt_ggml_traits *p = kt__ggml_traits(t->vec_dot_type);
        const kt_st_tensor *aq = get(cases[c].name, "act_q");
        assert_int_equal(kt__ggml_row_bytes(p->type, COLS), aq->nbytes);
        p->from_float(act, buf, COLS);
        const uint8_t *want = aq->data;
        for (size_t i = 0; i < aq->nbytes; i++)
            if (buf[i] != want[i])
                fail_msg("%s: activation as %s differs at byte %zu: %u vs ggml %u",
                         cases[c].name, p->name, i, buf[i], want[i]);
    }
    free(buf);
}

/* vec_dot(row, ggml's act_q) equals ggml's vec_dot up to float summation
 * order: within 1e-5 of sum |w_i a_i| (the scale of the rounding errors). */
static void test_vec_dot(void **state)
{
    (void)state;
    float *w = malloc(COLS * sizeof *w), *a = malloc(COLS * sizeof *a);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const kt_ggml_traits *t = kt__ggml_traits(cases[c].type);
        const kt_ggml_traits *p = kt__ggml_traits(t->vec_dot_type);
        const kt_st_tensor *q = get(cases[c].name, "q"), *aq = get(cases[c].name, "act_q");
        const float *dot = get(cases[c].name, "dot")->data;
        size_t rb = (size_t)q->shape[1];
        p->to_float(aq->data, a, COLS);
        for (int r = 0; r < ROWS; r++) {
            const uint8_t *row = (const uint8_t *)q->data + r * rb;
            t->to_float(row, w, COLS);
            double mag = 0, ref = 0;
            for (int j = 0; j < COLS; j++) {
                mag += fabs((double)w[j] * a[j]);
                ref += (double)w[j] * a[j];
            }
            float got = t->vec_dot(COLS, row, aq->data);
            double err = fabs((double)got - dot[r]);
            if (err > 1e-5 * mag)
                fail_msg("%s row %d: vec_dot %.9g, ggml %.9g (|diff| %.3g, scale %.3g)",
                         cases[c].name, r, got, dot[r], err, mag);
            /* and it is the dot product of the dequantized rows (but for Q8_1's
             * block sum s, which ggml stores rounded to f16) */
            if (t->vec_dot_type != KT_TYPE_Q8_1 && fabs(ref - got) > 1e-5 * mag)
                fail_msg("%s row %d: vec_dot %.9g, dequantized dot %.9g", cases[c].name, r,
                         got, ref);
        }
    }
    free(w);
    free(a);
}

static double rms_error(const kt_ggml_traits *t, const void *blocks, const float *src)
{
    float y[COLS];
    t->to_float(blocks, y, COLS);
    double e = 0;
    for (int j = 0; j < COLS; j++)
        e += ((double)y[j] - src[j]) * ((double)y[j] - src[j]);
    return sqrt(e / COLS);
}

/* The reference quantizers write ggml's bytes (ggml_quantize_chunk without an
 * importance matrix), iterative K-quant and IQ4 searches included. */
static void test_quantize(void **state)
{
    (void)state;
    const float *src = get("src", NULL)->data;
    uint8_t *buf = malloc(4 * COLS);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const kt_ggml_traits *t = kt__ggml_traits(cases[c].type);
        const kt_st_tensor *q = get(cases[c].name, "q");
        size_t rb = (size_t)q->shape[1];
        for (int r = 0; r < ROWS; r++) {
            const uint8_t *want = (const uint8_t *)q->data + r * rb;
            t->quantize(src + r * COLS, buf, COLS);
            size_t diff = 0;
            for (size_t i = 0; i < rb; i++)
                diff += buf[i] != want[i];
            if (diff)
                fail_msg("%s row %d: %zu of %zu bytes differ from ggml (rms error %.6g vs %.6g)",
                         cases[c].name, r, diff, rb, rms_error(t, buf, src + r * COLS),
                         rms_error(t, want, src + r * COLS));
        }
    }
    free(buf);
}

/* Rows ggml's data never exercise: all zeros (zero scales, no division by
 * zero), a constant row, one outlier, tiny values. Results stay finite and a
 * zero row stays exactly zero; the partner activation of a zero row too. */
static void test_degenerate_rows(void **state)
{
    (void)state;
    static float x[COLS], y[COLS];
    static uint8_t buf[4 * COLS], act[4 * COLS];
    kt_type all[] = {KT_TYPE_F32, KT_TYPE_Q8_1, KT_TYPE_Q8_K};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] + 3; c++) {
        kt_type type = c < sizeof cases / sizeof cases[0] ? cases[c].type
                                                          : all[c - sizeof cases / sizeof cases[0]];
        const kt_ggml_traits *t = kt__ggml_traits(type);
        assert_non_null(t);
        for (int kind = 0; kind < 4; kind++) {
            for (int j = 0; j < COLS; j++) {
                float outlier = j == 77 ? 1e4f : 0.01f, tiny = 1e-30f * (float)(j % 7 - 3);
                x[j] = kind == 0 ? 0.0f : kind == 1 ? 0.75f : kind == 2 ? outlier : tiny;
            }
            t->quantize(x, buf, COLS);
            t->to_float(buf, y, COLS);
            for (int j = 0; j < COLS; j++) {
                if (!isfinite(y[j]))
                    fail_msg("%s kind %d col %d: %g", t->name, kind, j, y[j]);
                if (kind == 0 && y[j] != 0.0f)
                    fail_msg("%s: zero row dequantizes to %g at %d", t->name, y[j], j);
            }
            if (t->vec_dot) {
                const kt_ggml_traits *p = kt__ggml_traits(t->vec_dot_type);
                p->from_float(x, act, COLS);
                float d = t->vec_dot(COLS, buf, act);
                assert_true(isfinite(d));
                if (kind == 0)
                    assert_true(d == 0.0f);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_dequantize_exact),
        cmocka_unit_test(test_activation_quantize_exact),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_degenerate_rows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
