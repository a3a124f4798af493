/*
 * AMXINT4 scales of libkt's CPU format: version 2 (every group scale an
 * integer multiple e/16 of the row's largest, e <= 16; lib/convert) against
 * version 1 (free scale per group), kt-kernel's per-row INT4 (scale amax / 7,
 * values -7..7) and version 1 as the AMX-INT8 tiles run it (rescaled to one
 * scale per row, cpu/amx/moe_amx.c). On the demo model and the fixtures
 * (routed experts of every MoE layer) and on synthetic 7168-input rows with
 * per-input spreads of scale:
 *   - the relative RMS error of the weights, ||w - w_q|| / ||w||;
 *   - the relative RMS error of the experts' outputs, down(silu(gate x) *
 *     (up x)) for Gaussian x, quantized against the source weights;
 *   - that version 2 rows are on the grid and that the tiles' rescale
 *     reproduces them exactly (so the tiles compute the file's weights).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "convert/convert_gguf.h"
#include "convert/cpu_weights.h"
#include "io/convert_types.h"
#include "kt/model.h"
#include "kt_internal.h"

enum { V_ROW, V1, V1_TILES, V2, N_VARIANTS };
static const char *const variant_name[N_VARIANTS] = {"per-row (kt-kernel)", "v1 free",
                                                     "v1 on tiles", "v2 grid"};

static uint64_t rng = 0x9E3779B97F4A7C15u;
static double uniform01(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static float gauss(void)
{
    double u = uniform01() + 1e-300, v = uniform01();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static float bf16f(uint16_t h)
{
    return kt__bf16_to_f32(h);
}

/* Row w (n inputs) quantized by variant `var` in groups of G, dequantized into out. */
static void quantize_row(const float *w, int n, int G, int var, float *out)
{
    if (var == V_ROW) {
        float amax = 0.0f;
        for (int i = 0; i < n; i++)
            amax = fmaxf(amax, fabsf(w[i]));
        float s = amax / 7.0f;
        for (int i = 0; i < n; i++) {
            float v = s > 0.0f ? nearbyintf(w[i] / s) : 0.0f;
            out[i] = fminf(7.0f, fmaxf(-7.0f, v)) * s;
        }
        return;
    }
    int ng = n / G;
    uint32_t *packed = malloc((size_t)n / 8 * sizeof *packed);
    uint16_t *sc = malloc((size_t)ng * sizeof *sc);
    float *work = malloc((size_t)3 * ng * sizeof *work);
    double err = 0, ref = 0;
    kt__int4_quant_row(w, n, G, var == V2 ? 2 : 1, packed, sc, work, &err, &ref);
    float m = 0.0f;
    for (int g = 0; g < ng; g++)
        m = fmaxf(m, fabsf(bf16f(sc[g])));
    /* the tiles: f = s_g * f32(16 / m), w' = min(rint(v f), 127), w = w' m / 16 */
    float inv16 = m > 0.0f ? 16.0f / m : 0.0f;
    for (int i = 0; i < n; i++) {
        int v = (int)((packed[i / 8] >> (4 * (i % 8))) & 15u) - 8;
        float s = bf16f(sc[i / G]);
        float exact = (float)v * s;
        float f = s * inv16;
        float tiles = fminf(nearbyintf((float)v * f), 127.0f) * (m / 16.0f);
        if (var == V2 && tiles != exact)
            fail_msg("v2 row: input %d: the tiles' weight %.9g, the file's %.9g", i, tiles,
                     exact);
        out[i] = var == V1_TILES ? tiles : exact;
    }
    if (var == V2 && !kt__int4_row_on_grid(sc, ng))
        fail_msg("v2 row of %d inputs in groups of %d: scales not on the grid", n, G);
    free(packed);
    free(sc);
    free(work);
}

typedef struct errs {
    double w_err[N_VARIANTS], w_ref;    /* squared weight errors, squared weights */
    double y_err[N_VARIANTS], y_ref;    /* squared output errors, squared outputs */
} errs;

/* rows x cols matrix quantized by every variant: dq[var] */
static void quantize_matrix(const float *w, int rows, int cols, int G, float *dq[N_VARIANTS],
                            errs *e)
{
    for (int var = 0; var < N_VARIANTS; var++)
        for (int r = 0; r < rows; r++) {
            const float *wr = w + (size_t)r * cols;
            float *o = dq[var] + (size_t)r * cols;
            quantize_row(wr, cols, G, var, o);
            for (int c = 0; c < cols; c++) {
                double d = (double)wr[c] - o[c];
                e->w_err[var] += d * d;
                if (var == 0)
                    e->w_ref += (double)wr[c] * wr[c];
            }
        }
}

static void matvec(const float *W, int rows, int cols, const float *x, float *y)
{
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)W[(size_t)r * cols + c] * x[c];
        y[r] = (float)s;
    }
}

/* y = down(silu(gate x) * (up x)) */
static void expert_out(const float *g, const float *u, const float *d, int H, int I,
                       const float *x, float *h, float *y)
{
    float *t = malloc((size_t)I * sizeof *t);
    matvec(g, I, H, x, h);
    matvec(u, I, H, x, t);
    for (int i = 0; i < I; i++)
        h[i] = h[i] / (1.0f + expf(-h[i])) * t[i];
    matvec(d, H, I, h, y);
    free(t);
}

/* One expert (gate, up: I x H; down: H x I; source floats) in groups of G:
 * weight errors, and output errors over T Gaussian tokens. */
static void expert_errors(float *const src[3], int H, int I, int G, int T, errs *e)
{
    float *dq[3][N_VARIANTS];
    for (int p = 0; p < 3; p++)
        for (int var = 0; var < N_VARIANTS; var++)
            dq[p][var] = malloc((size_t)H * I * sizeof(float));
    quantize_matrix(src[0], I, H, G, dq[0], e);
    quantize_matrix(src[1], I, H, G, dq[1], e);
    quantize_matrix(src[2], H, I, G, dq[2], e);
    float *x = malloc((size_t)H * sizeof *x), *h = malloc((size_t)I * sizeof *h);
    float *y = malloc((size_t)H * sizeof *y), *yq = malloc((size_t)H * sizeof *yq);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < H; i++)
            x[i] = gauss();
        expert_out(src[0], src[1], src[2], H, I, x, h, y);
        for (int i = 0; i < H; i++)
            e->y_ref += (double)y[i] * y[i];
        for (int var = 0; var < N_VARIANTS; var++) {
            expert_out(dq[0][var], dq[1][var], dq[2][var], H, I, x, h, yq);
            for (int i = 0; i < H; i++)
                e->y_err[var] += ((double)y[i] - yq[i]) * ((double)y[i] - yq[i]);
        }
    }
    for (int p = 0; p < 3; p++)
        for (int var = 0; var < N_VARIANTS; var++)
            free(dq[p][var]);
    free(x);
    free(h);
    free(y);
    free(yq);
}

/* Prints the four variants' errors and checks: v2 on the grid (in
 * quantize_row), v2's weight error within `v1_max` x v1's, v2's weight and
 * output errors under `row_max` x per-row INT4's (the outputs of a few tokens
 * are too noisy to hold against v1's). */
static void report(const char *what, int G, const errs *e, double v1_max, double row_max)
{
    double w[N_VARIANTS], y[N_VARIANTS];
    for (int var = 0; var < N_VARIANTS; var++) {
        w[var] = sqrt(e->w_err[var] / e->w_ref);
        y[var] = sqrt(e->y_err[var] / e->y_ref);
    }
    printf("  %-26s g%-3d weights", what, G);
    for (int var = 0; var < N_VARIANTS; var++)
        printf(" %s %.4f%s", variant_name[var], w[var], var + 1 < N_VARIANTS ? "," : "\n");
    printf("  %-26s      outputs", "");
    for (int var = 0; var < N_VARIANTS; var++)
        printf(" %s %.4f%s", variant_name[var], y[var], var + 1 < N_VARIANTS ? "," : "\n");
    if (!(w[V2] <= v1_max * w[V1]))
        fail_msg("%s g%d: v2 weight error %.4f above %.2f x v1's %.4f", what, G, w[V2], v1_max,
                 w[V1]);
    if (!(w[V2] < row_max * w[V_ROW] && y[V2] < row_max * y[V_ROW]))
        fail_msg("%s g%d: v2 error %.4f / %.4f not under %.2f x per-row INT4's %.4f / %.4f",
                 what, G, w[V2], y[V2], row_max, w[V_ROW], y[V_ROW]);
}

/* Every routed expert of every MoE layer of the model at rel (under
 * KT_TEST_DATA), groups of G (skipped where G does not divide H and I). */
static void model_errors(const char *rel, int G)
{
    const char *d = getenv("KT_TEST_DATA");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", d ? d : "tests/data", rel);
    kt__convert_source src;
    if (kt__convert_source_open(&src, NULL, dir) < 0)
        fail_msg("%s: %s", dir, kt_last_error());
    int H = (int)src.H, I = (int)src.I;
    if (H % G || I % G) {
        kt_model_free(src.model);
        return;
    }
    static const kt_role role[3] = {KT_ROLE_EXPERT_GATE, KT_ROLE_EXPERT_UP,
                                    KT_ROLE_EXPERT_DOWN};
    errs e;
    memset(&e, 0, sizeof e);
    float *w[3];
    for (int p = 0; p < 3; p++)
        w[p] = malloc((size_t)H * I * sizeof(float));
    for (uint32_t l = 0; l < src.L; l++) {
        if (!kt_model_layer_is_moe(src.model, l))
            continue;
        for (uint32_t x = 0; x < src.E; x++) {
            for (int p = 0; p < 3; p++) {
                kt_tensor_view v;
                memset(&v, 0, sizeof v);
                v.struct_size = sizeof v;
                if (kt_model_tensor(src.model, l, role[p], x, &v) < 0)
                    fail_msg("%s layer %u expert %u: %s", rel, l, x, kt_last_error());
                int cols = p == 2 ? I : H;
                for (uint64_t r = 0; r < v.rows; r++)
                    assert_int_equal(kt__convert_row_f32(&v, r, w[p] + r * cols), KT_OK);
            }
            expert_errors(w, H, I, G, 16, &e);
        }
    }
    for (int p = 0; p < 3; p++)
        free(w[p]);
    kt_model_free(src.model);
    report(rel, G, &e, 1.02, 1.0); /* rows of 64 .. 256 inputs: 1 .. 8 groups */
}

static void test_models(void **state)
{
    (void)state;
    static const int groups[3] = {32, 64, 128};
    for (int gi = 0; gi < 3; gi++) {
        model_errors("models/kimi_k2_demo", groups[gi]);
        model_errors("fixtures/deepseek_v3_tiny/bf16", groups[gi]);
        model_errors("fixtures/qwen3_moe_tiny", groups[gi]);
    }
}

/* DeepSeek-V3-wide rows (7168 inputs, 56 groups of 128): Gaussian weights
 * times a per-input spread exp(sigma z), standing in for the spread of input
 * channels' scales in trained layers (sigma 0.25 .. 1: at 1 the groups' scales
 * within a row differ up to about 10x). One expert with I = 128. */
static void test_wide_rows(void **state)
{
    (void)state;
    enum { H = 7168, I = 128 };
    static const float sigmas[3] = {0.25f, 0.5f, 1.0f};
    float *spread_h = malloc(H * sizeof(float)), *spread_i = malloc(I * sizeof(float));
    float *w[3];
    for (int p = 0; p < 3; p++)
        w[p] = malloc((size_t)H * I * sizeof(float));
    for (int si = 0; si < 3; si++) {
        for (int i = 0; i < H; i++)
            spread_h[i] = expf(sigmas[si] * gauss());
        for (int i = 0; i < I; i++)
            spread_i[i] = expf(sigmas[si] * gauss());
        for (int p = 0; p < 3; p++)
            for (size_t k = 0; k < (size_t)H * I; k++)
                w[p][k] = 0.02f * gauss() * (p == 2 ? spread_i[k % I] : spread_h[k % H]);
        for (int G = 32; G <= 128; G *= 2) {
            errs e;
            memset(&e, 0, sizeof e);
            expert_errors(w, H, I, G, 8, &e);
            char what[64];
            snprintf(what, sizeof what, "7168-wide, spread %.2f", sigmas[si]);
            /* the widest spread leaves groups 1 / 16 of the row's largest scale */
            report(what, G, &e, si == 2 ? 1.06 : 1.02, 0.7);
        }
    }
    for (int p = 0; p < 3; p++)
        free(w[p]);
    free(spread_h);
    free(spread_i);
}

/* The grid itself: zero rows and groups, one nonzero group, the largest
 * group's scale 16 / 16 of the row's, every s_g 16 / max an integer. */
static void test_grid_edges(void **state)
{
    (void)state;
    enum { N = 256, G = 32, NG = N / G };
    float w[N], work[3 * NG];
    uint32_t packed[N / 8];
    uint16_t sc[NG];
    double err = 0, ref = 0;
    memset(w, 0, sizeof w);
    kt__int4_quant_row(w, N, G, 2, packed, sc, work, &err, &ref);
    for (int g = 0; g < NG; g++)
        assert_int_equal(sc[g], 0);
    for (int i = 0; i < N / 8; i++)
        assert_int_equal(packed[i], 0x88888888u);
    assert_true(kt__int4_row_on_grid(sc, NG));
    w[40] = 3.0f; /* group 1 only */
    kt__int4_quant_row(w, N, G, 2, packed, sc, work, &err, &ref);
    assert_true(kt__int4_row_on_grid(sc, NG));
    assert_true(bf16f(sc[1]) > 0.0f);
    assert_int_equal(sc[0], 0);
    for (int i = 0; i < N; i++)
        w[i] = (float)(i % 7 - 3) * (1.0f + (float)(i / G) * 0.37f) * 1e-3f;
    kt__int4_quant_row(w, N, G, 2, packed, sc, work, &err, &ref);
    assert_true(kt__int4_row_on_grid(sc, NG));
    kt__int4_quant_row(w, N, G, 1, packed, sc, work, &err, &ref);
    assert_false(kt__int4_row_on_grid(sc, NG)); /* free scales are not, in general */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_edges),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_wide_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
