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

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Uniform in [-1, 1) with occasional outliers (x 8). */
static float rng_float(void)
{
    float v = (float)(rng() % 2000001) / 1000000.0f - 1.0f;
    return rng() % 97 == 0 ? v * 8.0f : v;
}

/* Random bytes for every field of n/bs blocks, then sane f16 scales: the
 * kernels must agree on any codes, not only on those a quantizer writes. */
static void random_blocks(kt_type type, uint8_t *buf, int64_t n)
{
    const kt_ggml_traits *t = kt__ggml_traits(type);
    size_t bytes = kt__ggml_row_bytes(type, n);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)rng();
    for (int64_t b = 0; b < n / t->block_size; b++) {
        uint8_t *blk = buf + b * t->block_bytes;
        uint16_t d = kt__ggml_f32_to_f16(0.001f + (float)(rng() % 1000) * 1e-5f);
        uint16_t dmin = kt__ggml_f32_to_f16((float)(rng() % 1000) * 1e-5f);
        switch (type) {
        case KT_TYPE_Q4_0:
        case KT_TYPE_Q5_0:
        case KT_TYPE_Q8_0:
        case KT_TYPE_IQ4_NL:
        case KT_TYPE_IQ4_XS:
            memcpy(blk, &d, 2);
            break;
        case KT_TYPE_Q4_1:   /* d, m */
        case KT_TYPE_Q5_1:
        case KT_TYPE_Q4_K:   /* d, dmin */
        case KT_TYPE_Q5_K:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
            break;
        case KT_TYPE_Q2_K:
            memcpy(blk + offsetof(kt_block_q2_K, d), &d, 2);
            memcpy(blk + offsetof(kt_block_q2_K, dmin), &dmin, 2);
            break;
        case KT_TYPE_Q3_K:
            memcpy(blk + offsetof(kt_block_q3_K, d), &d, 2);
            break;
        case KT_TYPE_Q6_K:
            memcpy(blk + offsetof(kt_block_q6_K, d), &d, 2);
            break;
        default:
            break;
        }
    }
}

/* Every SIMD vec_dot against the scalar reference: ggml's rows, random
 * blocks (all code values, negative Q6_K scales, -128 weights in Q8_0), and
 * 1, 3 (odd) and 32 blocks, at every ISA level this CPU runs. */
static void test_simd_vs_scalar(void **state)
{
    (void)state;
    static const kt_type simd_types[] = {KT_TYPE_Q4_0, KT_TYPE_Q4_1, KT_TYPE_Q5_0, KT_TYPE_Q5_1,
                                         KT_TYPE_Q8_0, KT_TYPE_Q2_K, KT_TYPE_Q3_K, KT_TYPE_Q4_K,
                                         KT_TYPE_Q5_K, KT_TYPE_Q6_K, KT_TYPE_IQ4_NL,
                                         KT_TYPE_IQ4_XS};
    static float act[8 * COLS], w[8 * COLS], a[8 * COLS];
    static uint8_t wq[8 * 4 * COLS], aq[8 * 4 * COLS];
    kt_ggml_isa best = kt__ggml_isa_best();
    int checked = 0;
    for (size_t c = 0; c < sizeof simd_types / sizeof simd_types[0]; c++) {
        kt_type type = simd_types[c];
        const kt_ggml_traits *t = kt__ggml_traits(type);
        const kt_ggml_traits *p = kt__ggml_traits(t->vec_dot_type);
        for (int isa = KT_GGML_AVX2; isa <= (int)best; isa++) {
            kt_ggml_vec_dot_fn fn = kt__ggml_vec_dot_for(type, (kt_ggml_isa)isa);
            assert_non_null(fn);
            if (fn == t->vec_dot)
                continue;   /* no variant at this level in this build */
            int64_t sizes[] = {t->block_size, 3 * (int64_t)t->block_size, COLS, 8 * COLS};
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
                for (int trial = 0; trial < 3; trial++) {
                    int64_t n = sizes[si];
                    if (trial == 0 && n == COLS) {
                        /* ggml's own rows and activation */
                        const kt_st_tensor *q = get(t->name, "q");
                        memcpy(wq, q->data, kt__ggml_row_bytes(type, COLS));
                        memcpy(aq, get(t->name, "act_q")->data, get(t->name, "act_q")->nbytes);
                    } else {
                        random_blocks(type, wq, n);
                        for (int64_t j = 0; j < n; j++)
                            act[j] = rng_float();
                        p->from_float(act, aq, n);
                    }
                    t->to_float(wq, w, n);
                    p->to_float(aq, a, n);
                    double mag = 0;
                    for (int64_t j = 0; j < n; j++)
                        mag += fabs((double)w[j] * a[j]);
                    float ref = t->vec_dot(n, wq, aq), got = fn(n, wq, aq);
                    if (fabs((double)got - ref) > 1e-5 * mag + 1e-30)
                        fail_msg("%s isa %d n %lld trial %d: simd %.9g, scalar %.9g (scale %.3g)",
                                 t->name, isa, (long long)n, trial, got, ref, mag);
                    checked++;
                }
        }
    }
    print_message("simd vs scalar: %d comparisons, best ISA level %d\n", checked, (int)best);
    if (best >= KT_GGML_AVX2)
        assert_true(checked > 0);
    else
        skip();
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
        cmocka_unit_test(test_simd_vs_scalar),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
