/*
 * CPU MoE backend (kt/moe.h):
 *  - synthetic layers (BF16, FP8 with partial 128-blocks, RAWINT4) against a
 *    double-precision reference of the dequantized weights, on every ISA path
 *    this CPU has, over ragged T / k, skipped ids, masks, absent experts, both
 *    id widths, BF16 and F32 in/out, accumulate, several pools, submit/wait;
 *  - every fixture family and weight variant: moe_out from moe_in and the
 *    router outputs of transformers (plus the shared expert where the family
 *    has one), weights read from the fixture's own safetensors files.
 *
 * Everything runs at the default precision and with KT_MOE_PREC_BF16X2.
 * Tolerances (max |got - ref| / max |ref|): paths with F32 or BF16X2 activations 1e-4,
 * BF16 activations 1.5e-2, INT8 (Q8 per 32) activations 3e-2; BF16 output adds
 * 8e-3 (its rounding).
 */
#include <sched.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kt/hw.h"
#include "kt/model.h"
#include "kt/moe.h"
#include "kt_internal.h"
#include "core/threadpool.h"
#include "moe/moe_internal.h"
#include "moe_test_util.h"
#include "test_moe_common.h"
#include "../../cpu/ref/ggml_quants.h"

/* ---------------------------------------------------------------------------
 * Synthetic layers
 */

typedef struct syn_layer {
    int method, H, I, E;
    void **gate, **up, **down, **gs, **us, **ds;   /* [E] */
    float **fg, **fu, **fd;                        /* dequantized [E] */
} syn_layer;

static float syn_fp8_scale(void)
{
    return 0.01f + 0.02f * (tst_uniform() + 1.0f);
}

/* Normal E4M3 numbers, exponents 1..9: no NaN, no subnormals. */
static uint8_t syn_fp8_code(void)
{
    return (uint8_t)((tst_rand() & 0x80) | ((1 + tst_rand() % 9) << 3) | (tst_rand() & 7));
}

/* out x in matrix of the method with its scales; also its dequantized copy. */
static void make_matrix(int method, int rows, int cols, void **w, void **s, float **f)
{
    *f = malloc((size_t)rows * cols * sizeof(float));
    *s = NULL;
    if (method == KT_METHOD_BF16)
        *w = tst_bf16_values((size_t)rows * cols, 0.15f, *f);
    else if (method == KT_METHOD_FP8)
        tst_fp8_matrix(rows, cols, syn_fp8_scale, syn_fp8_code, w, s, *f);
    else
        tst_rawint4_matrix(rows, cols, 32, 0.01f, w, s, *f);
}

static void syn_make(syn_layer *L, int method, int H, int I, int E, int absent)
{
    L->method = method;
    L->H = H;
    L->I = I;
    L->E = E;
    void ***arrs[] = {&L->gate, &L->up, &L->down, &L->gs, &L->us, &L->ds};
    for (int a = 0; a < 6; a++)
        *arrs[a] = calloc((size_t)E, sizeof(void *));
    L->fg = calloc((size_t)E, sizeof(float *));
    L->fu = calloc((size_t)E, sizeof(float *));
    L->fd = calloc((size_t)E, sizeof(float *));
    for (int e = 0; e < E; e++) {
        if (e == absent)
            continue;
        make_matrix(method, I, H, &L->gate[e], &L->gs[e], &L->fg[e]);
        make_matrix(method, I, H, &L->up[e], &L->us[e], &L->fu[e]);
        make_matrix(method, H, I, &L->down[e], &L->ds[e], &L->fd[e]);
    }
}

static void syn_free(syn_layer *L)
{
    for (int e = 0; e < L->E; e++) {
        free(L->gate[e]);
        free(L->up[e]);
        free(L->down[e]);
        free(L->gs[e]);
        free(L->us[e]);
        free(L->ds[e]);
        free(L->fg[e]);
        free(L->fu[e]);
        free(L->fd[e]);
    }
    void *arrs[] = {L->gate, L->up, L->down, L->gs, L->us, L->ds, L->fg, L->fu, L->fd};
    for (size_t a = 0; a < sizeof arrs / sizeof arrs[0]; a++)
        free(arrs[a]);
}

static kt_moe_layer_weights syn_weights(const syn_layer *L)
{
    kt_moe_layer_weights w = KT_MOE_LAYER_WEIGHTS_INIT;
    w.gate = (const void *const *)L->gate;
    w.up = (const void *const *)L->up;
    w.down = (const void *const *)L->down;
    if (L->method != KT_METHOD_BF16) {
        w.gate_scale = (const void *const *)L->gs;
        w.up_scale = (const void *const *)L->us;
        w.down_scale = (const void *const *)L->ds;
    }
    return w;
}

static double silu_d(double g)
{
    return g / (1.0 + exp(-g));
}

/* y += w * down(silu(gate x) * up x), double precision. */
static void ffn_ref(const float *g, const float *u, const float *d, int H, int I, const float *x,
                    double w, double *y)
{
    double *h = malloc((size_t)I * sizeof(double));
    for (int i = 0; i < I; i++) {
        double a = 0, b = 0;
        for (int k = 0; k < H; k++) {
            a += (double)g[(size_t)i * H + k] * x[k];
            b += (double)u[(size_t)i * H + k] * x[k];
        }
        h[i] = silu_d(a) * b;
    }
    for (int o = 0; o < H; o++) {
        double s = 0;
        for (int i = 0; i < I; i++)
            s += (double)d[(size_t)o * I + i] * h[i];
        y[o] += w * s;
    }
    free(h);
}

typedef struct syn_case {
    int T, k;
    uint32_t flags;
    int skip_ids;   /* put -1 in some slots */
    int use_mask;
} syn_case;

static const syn_case syn_cases[] = {
    {1, 1, KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32, 0, 0},
    {2, 4, KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32 | KT_MOE_IO_IDS_I64, 1, 0},
    {3, 8, 0, 0, 1},
    {17, 16, KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32 | KT_MOE_IO_ACCUMULATE, 1, 1},
    {128, 8, KT_MOE_IO_OUT_F32, 1, 0},
    {257, 6, KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32, 1, 1},
};

/* Tolerance of a backend's output; backends made with KT_MOE_PREC_BF16X2 have
 * "bf16x2" or "f32" in their ISA name (or are scalar / AVX2 with F32
 * activations) and must be as close as F32 arithmetic. */
static double act_tol(const kt_moe_backend *moe)
{
    kt_moe_info info = KT_MOE_INFO_INIT;
    kt_moe_backend_info(moe, &info);
    if (strstr(info.isa, "bf16x2") || strstr(info.isa, "f32"))
        return 1e-4;
    if (strstr(info.isa, "scalar") && info.method != KT_METHOD_RAWINT4)
        return 1e-4;
    if (info.method == KT_METHOD_RAWINT4)
        return 3e-2;
    if (strstr(info.isa, "avx512") || strstr(info.isa, "amx"))
        return 1.5e-2; /* BF16 activations */
    return 1e-4; /* avx2: f32 activations */
}

/* Runs one case on a backend and checks it against the double reference. */
static void run_syn_case(kt_moe_backend *moe, const syn_layer *L, const syn_case *c,
                         uint8_t *mask, double *worst)
{
    int H = L->H, E = L->E, T = c->T, k = c->k;
    float *xf = malloc((size_t)T * H * sizeof(float));
    uint16_t *xb = malloc((size_t)T * H * 2);
    for (int i = 0; i < T * H; i++) {
        xb[i] = tst_to_bf16(tst_uniform());
        xf[i] = tst_bf16(xb[i]);
    }
    int32_t *ids32 = malloc((size_t)T * k * sizeof(int32_t));
    int64_t *ids64 = malloc((size_t)T * k * sizeof(int64_t));
    float *w = malloc((size_t)T * k * sizeof(float));
    for (int t = 0; t < T; t++) {
        /* k distinct experts per token */
        int start = (int)(tst_rand() % (uint32_t)E);
        for (int j = 0; j < k; j++) {
            int id = (start + j * 7) % E;
            for (int jj = 0; jj < j; jj++)
                if (ids32[t * k + jj] == id)
                    id = (id + 1) % E;
            if (c->skip_ids && tst_rand() % 5 == 0)
                id = -1;
            ids32[t * k + j] = id;
            ids64[t * k + j] = id;
            w[t * k + j] = 0.1f + 0.9f * (tst_uniform() + 1.0f) / 2.0f;
        }
    }
    memset(mask, 0, (size_t)E);
    if (c->use_mask) {
        mask[1] = 1;
        mask[E - 2] = 1;
    }
    double *ref = calloc((size_t)T * H, sizeof(double));
    float *init = malloc((size_t)T * H * sizeof(float));
    for (int i = 0; i < T * H; i++)
        init[i] = (c->flags & KT_MOE_IO_ACCUMULATE) ? tst_uniform() : 0.0f;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < H; i++)
            ref[(size_t)t * H + i] = init[(size_t)t * H + i];
        for (int j = 0; j < k; j++) {
            int id = ids32[t * k + j];
            if (id < 0 || !L->gate[id] || mask[id])
                continue;
            ffn_ref(L->fg[id], L->fu[id], L->fd[id], H, L->I, xf + (size_t)t * H,
                    w[t * k + j], ref + (size_t)t * H);
        }
    }
    void *out = malloc((size_t)T * H * sizeof(float));
    if (c->flags & KT_MOE_IO_OUT_F32)
        memcpy(out, init, (size_t)T * H * sizeof(float));
    else
        for (int i = 0; i < T * H; i++)
            ((uint16_t *)out)[i] = tst_to_bf16(init[i]);
    int32_t n_tokens = T;
    kt_moe_io io = KT_MOE_IO_INIT;
    io.flags = c->flags;
    io.n_tokens = &n_tokens;
    io.top_k = (uint32_t)k;
    io.x = (c->flags & KT_MOE_IO_X_F32) ? (const void *)xf : (const void *)xb;
    io.ids = (c->flags & KT_MOE_IO_IDS_I64) ? (const void *)ids64 : (const void *)ids32;
    io.w = w;
    io.out = out;
    kt_status st = kt_moe_forward(moe, 0, &io);
    if (st < 0)
        fail_msg("forward: %s", kt_last_error());
    double maxref = 0, maxerr = 0;
    for (int i = 0; i < T * H; i++) {
        double got = (c->flags & KT_MOE_IO_OUT_F32) ? ((float *)out)[i]
                                                    : tst_bf16(((uint16_t *)out)[i]);
        maxref = fmax(maxref, fabs(ref[i]));
        maxerr = fmax(maxerr, fabs(got - ref[i]));
    }
    double rel = maxerr / (maxref + 1e-12);
    double tol = act_tol(moe) + ((c->flags & KT_MOE_IO_OUT_F32) ? 0.0 : 8e-3);
    if (rel > *worst)
        *worst = rel;
    if (!(rel <= tol)) {
        kt_moe_info info = KT_MOE_INFO_INIT;
        kt_moe_backend_info(moe, &info);
        fail_msg("%s %s T=%d k=%d flags=0x%x: rel err %.3g > %.3g (max ref %.3g)",
                 kt_method_name((kt_method)L->method), info.isa, T, k, c->flags, rel, tol,
                 maxref);
    }
    free(xf);
    free(xb);
    free(ids32);
    free(ids64);
    free(w);
    free(ref);
    free(init);
    free(out);
}

static const uint64_t isa_levels[] = {
    ~UINT64_C(0),
    KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C,
    0,
};

/* 1 when isa is among seen[0 .. lv) (an ISA cap that chose the same kernels); records it as
 * seen[lv]. */
static int isa_seen_before(const char **seen, int lv, const char *isa)
{
    int dup = 0;
    for (int j = 0; j < lv; j++)
        dup |= seen[j] && !strcmp(seen[j], isa);
    seen[lv] = isa;
    return dup;
}

static void syn_method_prec(int method, int H, int I, int n_pools, int prec)
{
    const int E = 20;
    syn_layer L;
    syn_make(&L, method, H, I, E, 3);
    kt_moe_layer_weights lw = syn_weights(&L);
    uint8_t mask[20];
    const char *seen[3] = {NULL, NULL, NULL};
    for (int lv = 0; lv < 3; lv++) {
        kt__moe_set_isa_cap(isa_levels[lv]);
        kt_moe_desc d = tst_moe_desc(method, H, I, E, 16);
        kt_moe_options o = tst_moe_options(2, 100); /* T = 128 and 257 run in chunks */
        o.n_pools = n_pools;
        o.act_precision = prec;
        kt_moe_backend *moe = NULL;
        if (kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o) < 0)
            fail_msg("create: %s", kt_last_error());
        kt_moe_info info = KT_MOE_INFO_INIT;
        assert_int_equal(kt_moe_backend_info(moe, &info), KT_OK);
        assert_int_equal(info.n_pools, n_pools ? n_pools : info.n_pools);
        if (!isa_seen_before(seen, lv, info.isa)) {
            assert_int_equal(kt_moe_set_expert_mask(moe, 0, mask), KT_OK);
            double worst = 0;
            for (size_t c = 0; c < sizeof syn_cases / sizeof syn_cases[0]; c++)
                run_syn_case(moe, &L, &syn_cases[c], mask, &worst);
            printf("  %-8s %-14s pools %d: worst rel err %.3g\n",
                   kt_method_name((kt_method)method), info.isa, info.n_pools, worst);
        }
        kt_moe_backend_free(moe);
    }
    kt__moe_set_isa_cap(~UINT64_C(0));
    syn_free(&L);
}

static void syn_method(int method, int H, int I, int n_pools)
{
    syn_method_prec(method, H, I, n_pools, KT_MOE_PREC_DEFAULT);
    syn_method_prec(method, H, I, n_pools, KT_MOE_PREC_BF16X2);
}

static void test_syn_bf16(void **state)
{
    (void)state;
    syn_method(KT_METHOD_BF16, 200, 136, 1);
}

static void test_syn_fp8(void **state)
{
    (void)state;
    syn_method(KT_METHOD_FP8, 200, 136, 1);
}

static void test_syn_int4(void **state)
{
    (void)state;
    syn_method(KT_METHOD_RAWINT4, 160, 96, 1);
}

/* Two pools on one node: every expert's I split in two slices, partials summed. */
static void test_syn_pools(void **state)
{
    (void)state;
    syn_method(KT_METHOD_BF16, 96, 320, 2);
    syn_method(KT_METHOD_RAWINT4, 64, 256, 2);
}

/* One expert matrix [rows][cols] of every method the backend runs (random),
 * for the pool test: BF16 / FP8 / RAWINT4 as above, AMXINT4 (RAWINT4's layout),
 * AMXINT8 (int8, F32 scale per row), LLAMAFILE (ggml blocks of `type`). */
static void pool_matrix(int method, int type, int rows, int cols, void **w, void **s)
{
    float *f = NULL;
    if (method == KT_METHOD_AMXINT8) {
        int8_t *q = malloc((size_t)rows * cols);
        float *sc = malloc((size_t)rows * sizeof(float));
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            q[i] = (int8_t)((int)(tst_rand() % 255u) - 127);
        for (int r = 0; r < rows; r++)
            sc[r] = 0.0005f * (1.5f + tst_uniform());
        *w = q;
        *s = sc;
    } else if (method == KT_METHOD_LLAMAFILE) {
        const kt_ggml_traits *tr = kt__ggml_traits((kt_type)type);
        size_t rb = kt__ggml_row_bytes((kt_type)type, cols);
        uint8_t *b = malloc((size_t)rows * rb);
        float *row = malloc((size_t)cols * sizeof(float));
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++)
                row[c] = 0.1f * tst_uniform();
            tr->quantize(row, b + (size_t)r * rb, cols);
        }
        free(row);
        *w = b;
        *s = NULL;
    } else {
        make_matrix(method == KT_METHOD_AMXINT4 ? KT_METHOD_RAWINT4 : method, rows, cols, w, s,
                    &f);
        free(f);
    }
}

/* E experts' gate / up / down of pool_matrix, and the layer weights that point at
 * them (with the scales where the method has them as arrays of their own). */
typedef struct {
    void *g[8], *u[8], *dn[8], *gs[8], *us[8], *ds[8];
} pool_experts;

static kt_moe_layer_weights pool_experts_make(pool_experts *p, int method, int type, int E,
                                              int H, int I)
{
    assert_true(E <= 8);
    for (int e = 0; e < E; e++) {
        pool_matrix(method, type, I, H, &p->g[e], &p->gs[e]);
        pool_matrix(method, type, I, H, &p->u[e], &p->us[e]);
        pool_matrix(method, type, H, I, &p->dn[e], &p->ds[e]);
    }
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
    lw.gate = (const void *const *)p->g;
    lw.up = (const void *const *)p->u;
    lw.down = (const void *const *)p->dn;
    if (method != KT_METHOD_BF16 && method != KT_METHOD_LLAMAFILE) {
        lw.gate_scale = (const void *const *)p->gs;
        lw.up_scale = (const void *const *)p->us;
        lw.down_scale = (const void *const *)p->ds;
    }
    return lw;
}

static void pool_experts_free(pool_experts *p, int E)
{
    for (int e = 0; e < E; e++) {
        free(p->g[e]);
        free(p->u[e]);
        free(p->dn[e]);
        free(p->gs[e]);
        free(p->us[e]);
        free(p->ds[e]);
    }
}

/* NUMA pools: with 2 and 3 pools every pool computes its slice of every
 * expert's I from its own copy and the partials are summed; the outputs
 * equal one pool's (which reads the weights in place) up to the order of the
 * sums, for every method. AMXINT8 and AMXINT4 with groups of 64 / 128
 * quantize each token's activations to int8 per call range (here per slice),
 * hence their looser bound. LLAMAFILE slices at 256 (Q8_K blocks), the others
 * at 128. */
static void test_pools_every_method(void **state)
{
    (void)state;
    static const struct {
        int method, type, group;
        const char *what;
    } cases[] = {
        {KT_METHOD_BF16, 0, 0, "BF16"},
        {KT_METHOD_FP8, 0, 0, "FP8"},
        {KT_METHOD_RAWINT4, 0, 0, "RAWINT4"},
        {KT_METHOD_AMXINT4, 0, 0, "AMXINT4"},
        {KT_METHOD_AMXINT4, 0, 128, "AMXINT4 g128"},
        {KT_METHOD_AMXINT8, 0, 0, "AMXINT8"},
        {KT_METHOD_LLAMAFILE, KT_TYPE_Q8_0, 0, "LLAMAFILE Q8_0"},
        {KT_METHOD_LLAMAFILE, KT_TYPE_Q4_K, 0, "LLAMAFILE Q4_K"},
    };
    const int H = 256, I = 768, E = 6, k = 3;
    const int T_list[] = {1, 3, 40};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int method = cases[c].method, type = cases[c].type;
        pool_experts px;
        kt_moe_layer_weights lw = pool_experts_make(&px, method, type, E, H, I);
        if (method == KT_METHOD_LLAMAFILE)
            lw.gate_type = lw.up_type = lw.down_type = type;
        kt_moe_desc d = tst_moe_desc(method, H, I, E, k);
        d.group_size = (uint32_t)cases[c].group; /* scales [rows][cols / group] */
        float *x = malloc((size_t)42 * H * sizeof(float)), w[40 * 3];
        int32_t ids[40 * 3];
        for (int i = 0; i < 42 * H; i++)
            x[i] = tst_uniform();
        for (int i = 0; i < 40 * k; i++) {
            ids[i] = (i / k * 5 + (i % k) * 2) % E;
            w[i] = 0.2f + 0.1f * (float)(i % 5);
        }
        float *out[4];
        double worst[4] = {0, 0, 0, 0};
        bool int8_act = false;
        for (int pools = 1; pools <= 3; pools++) {
            kt_moe_options o = tst_moe_options(3, 40);
            o.n_pools = pools;
            kt_moe_backend *moe = NULL;
            if (kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o) < 0)
                fail_msg("%s pools %d: create: %s", cases[c].what, pools, kt_last_error());
            kt_moe_info info = KT_MOE_INFO_INIT;
            assert_int_equal(kt_moe_backend_info(moe, &info), KT_OK);
            assert_int_equal(info.n_pools, pools);
            /* AMX machines: INT4 prefill on AMX-INT8 tiles, int8 activations */
            if (info.isa && strstr(info.isa, "amx-int8"))
                int8_act = true;
            /* one pool: in place, but for LLAMAFILE's decode repacks (AVX-512) */
            bool repacked = method == KT_METHOD_LLAMAFILE &&
                            info.pool_bytes >= (uint64_t)E * info.expert_bytes;
            if (pools == 1 && !repacked) {
                assert_string_equal(info.pool_memory, "in place");
                assert_true(info.pool_bytes == 0);
            } else {
                assert_true(!strcmp(info.pool_memory, "aligned") ||
                            !strcmp(info.pool_memory, "numa_alloc_onnode"));
                /* the slices add up to the experts' bytes (plus alignment) */
                assert_true(info.pool_bytes >= (uint64_t)E * info.expert_bytes);
            }
            out[pools] = calloc((size_t)3 * 40 * H, sizeof(float)); /* [T_list][40][H] */
            for (int ti = 0; ti < 3; ti++) {
                int32_t n_tokens = T_list[ti];
                kt_moe_io io = tst_moe_io_f32(&n_tokens, k, x + (size_t)ti * H, ids, w,
                                              out[pools] + (size_t)ti * 40 * H);
                if (kt_moe_forward(moe, 0, &io) < 0)
                    fail_msg("%s pools %d: forward: %s", cases[c].what, pools, kt_last_error());
                if (pools == 1)
                    continue;
                const float *a = io.out, *b = out[1] + (size_t)ti * 40 * H;
                double maxref = 0, maxerr = 0;
                for (int i = 0; i < n_tokens * H; i++) {
                    maxref = fmax(maxref, fabs(b[i]));
                    maxerr = fmax(maxerr, fabs(a[i] - b[i]));
                }
                worst[pools] = fmax(worst[pools], maxerr / maxref);
            }
            kt_moe_backend_free(moe);
        }
        /* int8 activations per token over the call's inputs (here: per slice) */
        double tol = method == KT_METHOD_AMXINT8 || cases[c].group > 32 || int8_act ? 5e-2
                                                                                     : 1e-5;
        printf("  %-15s pools 2: rel %.2g, pools 3: rel %.2g of one pool's output (tol %.0e)\n",
               cases[c].what, worst[2], worst[3], tol);
        if (!(worst[2] <= tol && worst[3] <= tol))
            fail_msg("%s: pools differ from one pool", cases[c].what);
        for (int pools = 1; pools <= 3; pools++)
            free(out[pools]);
        pool_experts_free(&px, E);
        free(x);
    }
}

/* submit/wait from the same thread, several layers in flight, queue limit, errors. */
static void test_async_and_errors(void **state)
{
    (void)state;
    const int H = 64, I = 64, E = 8, T = 4, k = 2;
    syn_layer L;
    syn_make(&L, KT_METHOD_BF16, H, I, E, -1);
    kt_moe_layer_weights lw[3];
    for (int l = 0; l < 3; l++)
        lw[l] = syn_weights(&L);
    kt_moe_desc d = tst_moe_desc(KT_METHOD_BF16, H, I, E, k);
    kt_moe_options o = tst_moe_options(2, T);
    kt_moe_backend *moe = NULL;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &d, lw, 3, &o), KT_OK);
    float x[T * H], w[T * k], out[3][T * H], one[T * H];
    int32_t ids[T * k];
    for (int i = 0; i < T * H; i++)
        x[i] = tst_uniform();
    for (int i = 0; i < T * k; i++) {
        ids[i] = (i * 3) % E;
        w[i] = 0.5f;
    }
    int32_t n_tokens = T;
    kt_moe_io io = tst_moe_io_f32(&n_tokens, k, x, ids, w, one);
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
    for (int l = 0; l < 3; l++) {
        io.out = out[l];
        assert_int_equal(kt_moe_submit(moe, (uint32_t)l, &io), KT_OK);
    }
    assert_int_equal(kt_moe_wait(moe, 0), KT_OK);
    for (int l = 0; l < 3; l++)
        assert_memory_equal(out[l], one, sizeof one);
    /* the queue holds KT_MOE_QUEUE_DEPTH tasks; more fail with KT_ERR_LIMIT or succeed
     * when workers drained some: never block, never crash */
    int limited = 0;
    for (int i = 0; i < 64; i++) {
        kt_status st = kt_moe_submit(moe, 0, &io);
        assert_true(st == KT_OK || st == KT_ERR_LIMIT);
        limited |= st == KT_ERR_LIMIT;
    }
    assert_int_equal(kt_moe_wait(moe, 0), KT_OK);
    (void)limited;
    /* errors at execution time come back from wait */
    n_tokens = -1;
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "n_tokens"));
    n_tokens = T;
    ids[3] = E + 5;
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "n_experts"));
    ids[3] = 1;
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
    /* T = 0 is a no-op that still succeeds */
    n_tokens = 0;
    assert_int_equal(kt_moe_forward(moe, 1, &io), KT_OK);
    /* argument errors at submit */
    assert_int_equal(kt_moe_forward(moe, 3, &io), KT_ERR_INVALID_ARG);
    io.top_k = k + 1;
    assert_int_equal(kt_moe_submit(moe, 0, &io), KT_ERR_INVALID_ARG);
    io.top_k = k;
    io.flags |= 1u << 20;
    assert_int_equal(kt_moe_submit(moe, 0, &io), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_moe_set_expert_mask(moe, 7, NULL), KT_ERR_INVALID_ARG);
    kt_moe_backend_free(moe);
    kt_moe_backend_free(NULL);

    /* bad descriptions */
    kt_moe_desc bad = d;
    bad.method = 99; /* no such method */
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &bad, lw, 1, &o), KT_ERR_UNSUPPORTED);
    assert_null(moe);
    bad.method = KT_METHOD_LLAMAFILE; /* no ggml block types given */
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &bad, lw, 1, &o), KT_ERR_INVALID_ARG);
    assert_null(moe);
    bad = d;
    bad.method = KT_METHOD_AMXINT8; /* no scales given */
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &bad, lw, 1, &o), KT_ERR_INVALID_ARG);
    assert_null(moe);
    bad = d;
    bad.top_k = E + 1;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &bad, lw, 1, &o), KT_ERR_INVALID_ARG);
    bad = d;
    bad.method = KT_METHOD_FP8; /* no scales given */
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &bad, lw, 1, &o), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "scale"));
    bad = d;
    bad.method = KT_METHOD_RAWINT4;
    bad.hidden = 48;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &bad, lw, 1, &o), KT_ERR_INVALID_ARG);
    kt_moe_options bad_o = o;
    bad_o.act_precision = 7;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &d, lw, 1, &bad_o), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "act_precision"));
    kt_moe_options oi;
    assert_int_equal(kt_moe_options_init(&oi, sizeof oi), KT_OK);
    assert_int_equal(oi.pin_threads, 1);
    syn_free(&L);
}


/* CUDA-graph replay contract: T, the ids / weights / activations and the
 * expert mask are read when the task runs, not when it is submitted. A job
 * that holds the workers keeps the submitted task queued while the values
 * change. */
typedef struct hold_ctx {
    _Atomic int release;
} hold_ctx;

static void hold_workers(void *arg, int tid)
{
    hold_ctx *h = arg;
    (void)tid;
    while (!atomic_load(&h->release))
        sched_yield();
}

static void test_read_at_execution(void **state)
{
    (void)state;
    const int H = 64, I = 64, E = 8, k = 2, T = 3;
    syn_layer L;
    syn_make(&L, KT_METHOD_BF16, H, I, E, -1);
    kt_moe_layer_weights lw = syn_weights(&L);
    kt_moe_desc d = tst_moe_desc(KT_METHOD_BF16, H, I, E, k);
    kt_moe_options o = tst_moe_options(2, 4);
    kt_moe_backend *moe = NULL;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o), KT_OK);
    float x[T * H], w[T * k], want[T * H], got[T * H];
    int32_t ids[T * k];
    uint8_t mask[8] = {0};
    for (int i = 0; i < T * H; i++)
        x[i] = tst_uniform();
    for (int i = 0; i < T * k; i++) {
        ids[i] = i % E;
        w[i] = 0.25f + 0.1f * (float)i;
    }
    /* reference: the final values, run directly */
    mask[2] = 1;
    assert_int_equal(kt_moe_set_expert_mask(moe, 0, mask), KT_OK);
    int32_t n_tokens = T;
    kt_moe_io io = tst_moe_io_f32(&n_tokens, k, x, ids, w, want);
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);

    /* submit with stale values while the workers are held, then change them */
    memset(mask, 0, sizeof mask);
    n_tokens = 1;
    float x_final[T * H];
    memcpy(x_final, x, sizeof x);
    for (int i = 0; i < T * H; i++)
        x[i] = 0.0f;
    hold_ctx hold;
    atomic_init(&hold.release, 0);
    assert_true(kt__pool_post(kt__moe_backend_pool(moe), hold_workers, &hold));
    io.out = got;
    assert_int_equal(kt_moe_submit(moe, 0, &io), KT_OK);
    memcpy(x, x_final, sizeof x);
    n_tokens = T;
    mask[2] = 1;
    atomic_store(&hold.release, 1);
    assert_int_equal(kt_moe_wait(moe, 0), KT_OK);
    assert_memory_equal(got, want, sizeof want);
    kt_moe_backend_free(moe);
    syn_free(&L);
}

/* ---------------------------------------------------------------------------
 * Fixtures
 */

typedef struct fixture {
    const char *dir;           /* under $KT_TEST_DATA/fixtures        */
    int method;
    const char *expert_fmt;    /* printf(layer expert %d, proj %s)    */
    const char *names[3];      /* gate, up, down                      */
    const char *shared_fmt;    /* shared expert, proj %s; NULL: none  */
    int oai;                   /* gpt-oss fused experts               */
} fixture;

static const fixture fixtures[] = {
    {"deepseek_v3_tiny/bf16", KT_METHOD_BF16, "model.layers.1.mlp.experts.%d.%s_proj",
     {"gate", "up", "down"}, "model.layers.1.mlp.shared_experts.%s_proj", 0},
    {"deepseek_v3_tiny/fp8", KT_METHOD_FP8, "model.layers.1.mlp.experts.%d.%s_proj",
     {"gate", "up", "down"}, "model.layers.1.mlp.shared_experts.%s_proj", 0},
    {"deepseek_v3_tiny/int4", KT_METHOD_RAWINT4, "model.layers.1.mlp.experts.%d.%s_proj",
     {"gate", "up", "down"}, "model.layers.1.mlp.shared_experts.%s_proj", 0},
    {"qwen3_moe_tiny", KT_METHOD_BF16, "model.layers.1.mlp.experts.%d.%s_proj",
     {"gate", "up", "down"}, NULL, 0},
    {"mixtral_tiny", KT_METHOD_BF16, "model.layers.1.block_sparse_moe.experts.%d.%s",
     {"w1", "w3", "w2"}, NULL, 0},
    {"minimax_m2_tiny/bf16", KT_METHOD_BF16, "model.layers.1.block_sparse_moe.experts.%d.%s",
     {"w1", "w3", "w2"}, NULL, 0},
    {"minimax_m2_tiny/fp8", KT_METHOD_FP8, "model.layers.1.block_sparse_moe.experts.%d.%s",
     {"w1", "w3", "w2"}, NULL, 0},
    {"gpt_oss_tiny", KT_METHOD_BF16, "model.layers.1.mlp.experts", {NULL, NULL, NULL}, NULL, 1},
};

static const tst_tensor *need(const tst_model *m, const char *name, tst_tensor *t)
{
    if (!tst_model_find(m, name, t))
        fail_msg("fixture tensor %s missing", name);
    return t;
}

/* A BF16 or FP8 (+ weight_scale_inv) or INT4-packed matrix, dequantized. */
static float *dequant_named(const tst_model *m, const char *base, int *rows, int *cols)
{
    char name[256];
    tst_tensor t, s;
    snprintf(name, sizeof name, "%s.weight", base);
    if (tst_model_find(m, name, &t)) {
        *rows = (int)t.shape[0];
        *cols = (int)t.shape[1];
        size_t n = (size_t)*rows * *cols;
        float *f = malloc(n * sizeof(float));
        if (!strcmp(t.dtype, "BF16")) {
            for (size_t i = 0; i < n; i++)
                f[i] = tst_bf16(((const uint16_t *)t.data)[i]);
        } else {
            snprintf(name, sizeof name, "%s.weight_scale_inv", base);
            need(m, name, &s);
            int cb = (int)s.shape[1];
            for (int r = 0; r < *rows; r++)
                for (int c = 0; c < *cols; c++)
                    f[(size_t)r * *cols + c] =
                        tst_e4m3(((const uint8_t *)t.data)[(size_t)r * *cols + c]) *
                        ((const float *)s.data)[(r / 128) * cb + c / 128];
        }
        return f;
    }
    fail_msg("%s: no weight", base);
    return NULL;
}

/* max |out + shared - want| / max |want| over n values; the two maxima in *maxerr and
 * *maxref when those are not NULL. */
static double fixture_err(const float *out, const double *shared, const float *want, int n,
                          double *maxerr, double *maxref)
{
    double ref = 0, err = 0;
    for (int i = 0; i < n; i++) {
        ref = fmax(ref, fabs(want[i]));
        err = fmax(err, fabs(out[i] + shared[i] - want[i]));
    }
    if (maxerr)
        *maxerr = err;
    if (maxref)
        *maxref = ref;
    return err / ref;
}

static void fixture_run(const fixture *fx)
{
    char dir[1024];
    tst_model m;
    tst_file *ref = tst_fixture_open(fx->dir, &m, dir, sizeof dir);
    if (!ref)
        fail_msg("cannot open fixture %s", dir);
    tst_tensor tin, tout, tw, tid;
    assert_true(tst_find(ref, "moe_in", &tin));
    assert_true(tst_find(ref, "moe_out", &tout));
    assert_true(tst_find(ref, "router_out1", &tw));
    assert_true(tst_find(ref, "router_out2", &tid));
    int T = (int)tin.shape[0], H = (int)tin.shape[1], k = (int)tw.shape[1];
    const float *x = tin.data, *want = tout.data;

    /* expert pointers straight into the file */
    int E = 0, I = 0;
    const void *gate[64], *up[64], *down[64], *gs[64], *us[64], *ds[64], *gb[64], *db[64];
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
    char name[256];
    tst_tensor t;
    if (fx->oai) {
        need(&m, "model.layers.1.mlp.experts.gate_up_proj", &t);
        E = (int)t.shape[0];
        I = (int)t.shape[2] / 2;
        for (int e = 0; e < E; e++)
            gate[e] = (const uint8_t *)t.data + (size_t)e * H * 2 * I * 2;
        need(&m, "model.layers.1.mlp.experts.down_proj", &t);
        for (int e = 0; e < E; e++)
            down[e] = (const uint8_t *)t.data + (size_t)e * I * H * 2;
        need(&m, "model.layers.1.mlp.experts.gate_up_proj_bias", &t);
        for (int e = 0; e < E; e++)
            gb[e] = (const uint8_t *)t.data + (size_t)e * 2 * I * 2;
        need(&m, "model.layers.1.mlp.experts.down_proj_bias", &t);
        for (int e = 0; e < E; e++)
            db[e] = (const uint8_t *)t.data + (size_t)e * H * 2;
        lw.flags = KT_MOE_W_GATE_UP_FUSED | KT_MOE_W_IN_MAJOR;
        lw.gate_bias = gb;
        lw.down_bias = db;
        lw.bias_type = KT_TYPE_BF16;
    } else {
        const char *wname = fx->method == KT_METHOD_RAWINT4 ? "weight_packed" : "weight";
        const char *sname = fx->method == KT_METHOD_RAWINT4 ? "weight_scale" : "weight_scale_inv";
        const void **arr[3] = {gate, up, down}, **sarr[3] = {gs, us, ds};
        for (E = 0; E < 64; E++) {
            char base[200];
            snprintf(base, sizeof base, fx->expert_fmt, E, fx->names[0]);
            snprintf(name, sizeof name, "%s.%s", base, wname);
            if (!tst_model_find(&m, name, &t))
                break;
            for (int p = 0; p < 3; p++) {
                snprintf(base, sizeof base, fx->expert_fmt, E, fx->names[p]);
                snprintf(name, sizeof name, "%s.%s", base, wname);
                need(&m, name, &t);
                arr[p][E] = t.data;
                if (p == 0)
                    I = (int)t.shape[0];
                if (fx->method != KT_METHOD_BF16) {
                    snprintf(name, sizeof name, "%s.%s", base, sname);
                    need(&m, name, &t);
                    sarr[p][E] = t.data;
                }
            }
        }
        lw.up = up;
        lw.gate_scale = fx->method != KT_METHOD_BF16 ? gs : NULL;
        lw.up_scale = fx->method != KT_METHOD_BF16 ? us : NULL;
        lw.down_scale = fx->method != KT_METHOD_BF16 ? ds : NULL;
    }
    lw.gate = gate;
    lw.down = down;
    assert_true(E > 0 && I > 0);

    /* shared expert (scalar, double) */
    double *shared = calloc((size_t)T * H, sizeof(double));
    if (fx->shared_fmt) {
        char base[200];
        float *sm[3];
        int r, c, Is = 0;
        for (int p = 0; p < 3; p++) {
            snprintf(base, sizeof base, fx->shared_fmt, fx->names[p]);
            sm[p] = dequant_named(&m, base, &r, &c);
            if (p == 0)
                Is = r;
        }
        for (int tt = 0; tt < T; tt++)
            ffn_ref(sm[0], sm[1], sm[2], H, Is, x + (size_t)tt * H, 1.0,
                    shared + (size_t)tt * H);
        for (int p = 0; p < 3; p++)
            free(sm[p]);
    }

    float *out = malloc((size_t)T * H * sizeof(float));
    int32_t n_tokens = T;
    kt_moe_io io = tst_moe_io_f32(&n_tokens, k, x, tid.data, tw.data, out);
    kt_moe_desc d = tst_moe_desc(fx->method, H, I, E, k);
    d.act = fx->oai ? KT_MOE_ACT_SWIGLU_OAI : KT_MOE_ACT_SILU;
    const char *seen[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    /* every ISA level, default precision then KT_MOE_PREC_BF16X2 */
    for (int lv = 0; lv < 6; lv++) {
        kt__moe_set_isa_cap(isa_levels[lv % 3]);
        kt_moe_options o = tst_moe_options(2, T);
        o.act_precision = lv < 3 ? KT_MOE_PREC_DEFAULT : KT_MOE_PREC_BF16X2;
        kt_moe_backend *moe = NULL;
        if (kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o) < 0)
            fail_msg("%s: create: %s", fx->dir, kt_last_error());
        kt_moe_info info = KT_MOE_INFO_INIT;
        kt_moe_backend_info(moe, &info);
        if (isa_seen_before(seen, lv, info.isa)) {
            kt_moe_backend_free(moe);
            continue;
        }
        if (kt_moe_forward(moe, 0, &io) < 0)
            fail_msg("%s: forward: %s", fx->dir, kt_last_error());
        double maxref, maxerr;
        double rel = fixture_err(out, shared, want, T * H, &maxerr, &maxref);
        double tol = act_tol(moe);
        printf("  %-22s %-14s max|diff| %.3g (max|ref| %.3g, rel %.3g, tol %.3g)\n", fx->dir,
               info.isa, maxerr, maxref, rel, tol);
        if (!(rel <= tol))
            fail_msg("%s %s: rel err %.3g > %.3g", fx->dir, info.isa, rel, tol);
        kt_moe_backend_free(moe);
    }
    kt__moe_set_isa_cap(~UINT64_C(0));

    /* 2 and 3 NUMA pools (slices copied per pool, partials summed) */
    for (int pools = 2; pools <= 3; pools++) {
        kt_moe_options o = tst_moe_options(3, T);
        o.n_pools = pools;
        kt_moe_backend *moe = NULL;
        if (kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o) < 0)
            fail_msg("%s: create (%d pools): %s", fx->dir, pools, kt_last_error());
        if (kt_moe_forward(moe, 0, &io) < 0)
            fail_msg("%s: forward (%d pools): %s", fx->dir, pools, kt_last_error());
        double rel = fixture_err(out, shared, want, T * H, NULL, NULL);
        kt_moe_info info = KT_MOE_INFO_INIT;
        kt_moe_backend_info(moe, &info);
        printf("  %-22s %-14s %d pools (%s): rel %.3g\n", fx->dir, info.isa, pools,
               info.pool_memory, rel);
        if (!(rel <= act_tol(moe)))
            fail_msg("%s %d pools: rel err %.3g", fx->dir, pools, rel);
        kt_moe_backend_free(moe);
    }

    /* the same through kt_model_open + kt_moe_backend_create_from_model */
    kt_model *model = NULL;
    if (kt_model_open(&model, NULL, dir, NULL) < 0)
        fail_msg("%s: kt_model_open: %s", fx->dir, kt_last_error());
    kt_moe_options o = tst_moe_options(2, T);
    kt_moe_backend *moe = NULL;
    if (kt_moe_backend_create_from_model(&moe, NULL, model, &o) < 0)
        fail_msg("%s: create_from_model: %s", fx->dir, kt_last_error());
    kt_moe_info info = KT_MOE_INFO_INIT;
    assert_int_equal(kt_moe_backend_info(moe, &info), KT_OK);
    assert_int_equal(info.method, fx->method);
    assert_int_equal(info.hidden, (uint32_t)H);
    assert_int_equal(info.intermediate, (uint32_t)I);
    if (kt_moe_forward(moe, 1, &io) < 0) /* model layer 1 */
        fail_msg("%s: forward: %s", fx->dir, kt_last_error());
    double rel = fixture_err(out, shared, want, T * H, NULL, NULL);
    printf("  %-22s %-14s from kt_model: rel %.3g\n", fx->dir, info.isa, rel);
    assert_true(rel <= act_tol(moe));
    /* layer 0 of DeepSeek is dense: not a MoE layer of the backend */
    if (fx->shared_fmt)
        assert_int_equal(kt_moe_forward(moe, 0, &io), KT_ERR_INVALID_ARG);
    kt_moe_backend_free(moe);
    kt_model_free(model);

    free(out);
    free(shared);
    tst_close(ref);
    tst_model_close(&m);
}

static void test_fixtures(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        fixture_run(&fixtures[i]);
}

/* KT_MOE_DECODE_READ reads kt__moe_row_spans' bytes in place of a decode
 * kernel. For every layout the decode reads (BF16, FP8 with a partial scale
 * block, RAWINT4, AMXINT4 g128, AMXINT8, RAWINT4 in 4-row tiles, LLAMAFILE Q8_0
 * rows and, where there is AVX2, the Q4_0 repack's tiles): the spans of rows
 * [r0, r1) lie inside the matrix, are as long as those rows' bytes, and hold
 * everything the one-token kernel reads: with every other byte of a copy
 * (weights and scales) set to 0xff, the kernel's outputs for those rows stay
 * bit for bit the same. */
typedef struct span_case {
    int method, type, group;
    bool tiled, repack;
    const char *what;
} span_case;

/* dst = 0xff bytes but where a span of src's spans falls in [src, src + n). */
static void keep_spans(uint8_t *dst, const uint8_t *src, size_t n, const kt__moe_span *sp,
                       int ns)
{
    memset(dst, 0xff, n);
    for (int i = 0; i < ns; i++)
        if (sp[i].p >= src && sp[i].p < src + n) {
            assert_true(sp[i].p + sp[i].n <= src + n);
            memcpy(dst + (sp[i].p - src), sp[i].p, sp[i].n);
        }
}

static void span_check(const span_case *c)
{
    const int rows = 320, cols = 256, H = cols;
    int m = c->method;
    void *w = NULL, *sc = NULL;
    pool_matrix(m, c->type, rows, cols, &w, &sc);
    kt__wmat W = {w, m == KT_METHOD_BF16 || m == KT_METHOD_LLAMAFILE ? NULL : sc, rows, cols,
                  c->type, c->group, NULL};
    size_t row_bytes = m == KT_METHOD_BF16      ? 2 * (size_t)cols
                       : m == KT_METHOD_LLAMAFILE ? kt__ggml_row_bytes((kt_type)c->type, cols)
                       : m == KT_METHOD_RAWINT4 || m == KT_METHOD_AMXINT4 ? (size_t)cols / 2
                                                                          : (size_t)cols;
    size_t wb = (size_t)rows * row_bytes, sb = 0;
    if (m == KT_METHOD_FP8)
        sb = (size_t)((rows + 127) / 128) * ((cols + 127) / 128) * 4;
    else if (m == KT_METHOD_RAWINT4 || m == KT_METHOD_AMXINT4)
        sb = (size_t)rows * (cols / (c->group ? c->group : 32)) * 2;
    else if (m == KT_METHOD_AMXINT8)
        sb = (size_t)rows * 4;
    const kt__moe_kernels *k = m == KT_METHOD_LLAMAFILE
                                   ? kt__moe_llamafile_kernels(c->repack ? 1 : 0,
                                                               kt__ggml_act_section(c->type))
                               : c->group > 32 ? kt__moe_int4g_ref()
                                               : kt__moe_kernels_ref(m);
    uint8_t *lay = NULL; /* a load-time layout of w: its bytes are the weights then */
    if (c->tiled) {
        lay = malloc(kt__int4t_bytes(rows, cols));
        W = kt__moe_int4_tile(&W, 0, rows, 0, cols, lay);
        wb = kt__int4t_bytes(rows, cols);
        sb = 0;
    } else if (c->repack) {
        lay = malloc(kt__lf_repack_bytes(c->type, rows, cols));
        W = kt__lf_repack(&W, lay);
        wb = kt__lf_repack_bytes(c->type, rows, cols);
    }
    kt__moe_span all[2];
    int na = kt__moe_row_spans(m, &W, 0, rows, all);
    assert_true(na >= 1 && all[0].p == (const uint8_t *)W.w && all[0].n == wb);
    if (sb && !c->repack)
        assert_true(na == 2 && all[1].p == (const uint8_t *)W.scale && all[1].n == sb);
    else
        assert_int_equal(na, 1);

    float *x = malloc((size_t)H * sizeof(float));
    for (int i = 0; i < H; i++)
        x[i] = tst_uniform();
    size_t ab = kt__moe_act_row_bytes(k->act, H);
    uint8_t *act = calloc(1, ab), *scr = calloc(1, k->scratch_bytes + 64);
    k->quant(x, 0, H, H, act);
    static const int ranges[][2] = {{64, 192}, {128, 320}, {0, 64}};
    for (int r = 0; r < 3; r++) {
        int r0 = ranges[r][0], r1 = ranges[r][1];
        kt__moe_span sp[2];
        int ns = kt__moe_row_spans(m, &W, r0, r1, sp);
        size_t want = c->tiled || c->repack ? wb / (rows / 4) * (size_t)((r1 - r0) / 4)
                                            : (size_t)(r1 - r0) * row_bytes;
        assert_true(ns >= 1 && sp[0].n == want);
        uint8_t *w2 = malloc(wb), *s2 = NULL;
        keep_spans(w2, W.w, wb, sp, ns);
        kt__wmat W2 = W;
        W2.w = w2;
        if (c->tiled) {
            W2.scale = w2;
        } else if (c->repack) { /* the Q4_0 rows behind the repack: the prefill's */
            s2 = malloc((size_t)rows * row_bytes);
            memset(s2, 0xff, (size_t)rows * row_bytes);
            W2.scale = s2;
        } else if (sb) {
            s2 = malloc(sb);
            keep_spans(s2, W.scale, sb, sp, ns);
            W2.scale = s2;
        }
        float *c1 = calloc((size_t)rows, sizeof(float)), *c2 = calloc((size_t)rows, sizeof(float));
        k->gemm(&W, r0, r1, 0, H, act, ab, NULL, 1, c1, rows, scr);
        k->gemm(&W2, r0, r1, 0, H, act, ab, NULL, 1, c2, rows, scr);
        if (memcmp(c1, c2, (size_t)(r1 - r0) * sizeof(float)))
            fail_msg("%s rows [%d, %d): the kernel read bytes outside the spans", c->what, r0,
                     r1);
        free(c1);
        free(c2);
        free(w2);
        free(s2);
    }
    printf("  %-18s spans of rows [64, 192), [128, 320), [0, 64): the kernel's bytes\n", c->what);
    free(x);
    free(act);
    free(scr);
    free(lay);
    free(w);
    free(sc);
}

static void test_decode_read_spans(void **state)
{
    (void)state;
    static const span_case cases[] = {
        {KT_METHOD_BF16, 0, 0, false, false, "BF16"},
        {KT_METHOD_FP8, 0, 0, false, false, "FP8"},
        {KT_METHOD_RAWINT4, 0, 0, false, false, "RAWINT4"},
        {KT_METHOD_AMXINT4, 0, 128, false, false, "AMXINT4 g128"},
        {KT_METHOD_AMXINT8, 0, 0, false, false, "AMXINT8"},
        {KT_METHOD_RAWINT4, 0, 0, true, false, "RAWINT4 tiled"},
        {KT_METHOD_LLAMAFILE, KT_TYPE_Q8_0, 0, false, false, "LLAMAFILE Q8_0"},
        {KT_METHOD_LLAMAFILE, KT_TYPE_Q4_0, 0, false, true, "LLAMAFILE Q4_0 repack"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].repack && !(kt_hw_isa() & KT_ISA_AVX2))
            continue; /* the repacks' decode is AVX2 / AVX-512 code */
        span_check(&cases[i]);
    }
}

/* The backend with KT_MOE_DECODE_READ=1: one-token calls run (their outputs are
 * not the layer's, by design) for every method, and calls with more than 4 tokens
 * an expert (prefill) are computed as without it, bit for bit. */
static void test_decode_read_backend(void **state)
{
    (void)state;
    static const int methods[] = {KT_METHOD_BF16, KT_METHOD_FP8, KT_METHOD_RAWINT4,
                                  KT_METHOD_AMXINT8};
    const int H = 256, I = 512, E = 4, k = 2, T = 12;
    for (size_t c = 0; c < sizeof methods / sizeof methods[0]; c++) {
        int method = methods[c];
        pool_experts px;
        kt_moe_layer_weights lw = pool_experts_make(&px, method, 0, E, H, I);
        kt_moe_desc d = tst_moe_desc(method, H, I, E, k);
        float *x = malloc((size_t)T * H * sizeof(float)), w[12 * 2];
        float *out[2] = {calloc((size_t)T * H, sizeof(float)), calloc((size_t)T * H, sizeof(float))};
        int32_t ids[12 * 2];
        for (int i = 0; i < T * H; i++)
            x[i] = tst_uniform();
        for (int i = 0; i < T * k; i++) {
            ids[i] = (i / k + i % k) % E; /* 6 tokens an expert: prefill */
            w[i] = 0.5f;
        }
        for (int on = 0; on < 2; on++) {
            if (on)
                setenv("KT_MOE_DECODE_READ", "1", 1);
            kt_moe_backend *moe = NULL;
            kt_moe_options o = tst_moe_options(2, T);
            kt_status st = kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o);
            unsetenv("KT_MOE_DECODE_READ");
            if (st < 0)
                fail_msg("method %d: create: %s", method, kt_last_error());
            int32_t one = 1, all = T;
            kt_moe_io io1 = tst_moe_io_f32(&one, k, x, ids, w, out[on]);
            assert_int_equal(kt_moe_forward(moe, 0, &io1), KT_OK);
            kt_moe_io io = tst_moe_io_f32(&all, k, x, ids, w, out[on]);
            assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
            kt_moe_backend_free(moe);
        }
        if (memcmp(out[0], out[1], (size_t)T * H * sizeof(float)))
            fail_msg("method %d: KT_MOE_DECODE_READ changed a prefill call", method);
        pool_experts_free(&px, E);
        free(x);
        free(out[0]);
        free(out[1]);
    }
}

/* The decode flow (KT_MOE_DECODE_FLOW, lib/moe/backend.c): without the phase-1
 * barrier (1; phase 2 waits for each expert's h) and also without the phase-0
 * one (2; worker 0 quantizes the tokens and publishes the plan), decode calls
 * (T 1..4) give the outputs of the two-barrier schedule (0) bit for bit, with
 * and without the decode tail, on 1..3 workers in one and two pools; a call of
 * more than 4 tokens an expert (T 9: prefill, the flow off) too. Each call runs
 * several times: a phase-2 item that read an expert's h before its phase-1
 * items wrote it would show as a difference in some of them. Phase-2 items of
 * 32 rows (KT_MOE_DECODE_GRAIN2=32, with flow 2) split the same sums at other
 * rows: within 1e-5 of the largest output (a kernel may take another path for
 * a row range's remainder). */
static void test_decode_flow(void **state)
{
    (void)state;
    static const struct {
        int method, type, group;
        const char *what;
    } cases[] = {
        {KT_METHOD_BF16, 0, 0, "BF16"},
        {KT_METHOD_FP8, 0, 0, "FP8"},
        {KT_METHOD_RAWINT4, 0, 0, "RAWINT4"},
        {KT_METHOD_AMXINT4, 0, 128, "AMXINT4 g128"},
        {KT_METHOD_AMXINT8, 0, 0, "AMXINT8"},
        {KT_METHOD_LLAMAFILE, KT_TYPE_Q8_0, 0, "LLAMAFILE Q8_0"},
    };
    enum { H = 256, I = 512, E = 8, K = 4, TMAX = 9, REPS = 4 };
    static const int T_list[] = {1, 2, 3, 4, 9};
    const int nT = (int)(sizeof T_list / sizeof T_list[0]);
    float *x = malloc((size_t)TMAX * H * sizeof(float)), w[TMAX * K];
    int32_t ids[TMAX * K];
    for (int i = 0; i < TMAX * H; i++)
        x[i] = tst_uniform();
    for (int i = 0; i < TMAX * K; i++) {
        int t = i / K, j = i % K;
        ids[i] = t < 4 ? (t + 2 * j) % E : j; /* T 9: experts 0..3 get 9 tokens each */
        w[i] = 0.1f + 0.05f * (float)(i % 7);
    }
    size_t per = (size_t)TMAX * H; /* one call's outputs */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pool_experts px;
        kt_moe_layer_weights lw = pool_experts_make(&px, cases[c].method, cases[c].type, E, H, I);
        if (cases[c].method == KT_METHOD_LLAMAFILE)
            lw.gate_type = lw.up_type = lw.down_type = cases[c].type;
        kt_moe_desc d = tst_moe_desc(cases[c].method, H, I, E, K);
        d.group_size = (uint32_t)cases[c].group;
        int compared = 0;
        double worst_g2 = 0;
        for (int threads = 1; threads <= 3; threads++)
            for (int pools = 1; pools <= (threads > 1 ? 2 : 1); pools++)
                for (int tail = 0; tail <= 1; tail++) {
                    float *out[4]; /* flows 0, 1, 2; 2 with GRAIN2 32 */
                    for (int flow = 0; flow <= 3; flow++) {
                        char fv[2] = {(char)('0' + (flow < 3 ? flow : 2)), 0};
                        setenv("KT_MOE_DECODE_FLOW", fv, 1);
                        setenv("KT_MOE_DECODE_TAIL", tail ? "1" : "0", 1);
                        if (flow == 3)
                            setenv("KT_MOE_DECODE_GRAIN2", "32", 1);
                        kt_moe_options o = tst_moe_options(threads, TMAX);
                        o.n_pools = pools;
                        kt_moe_backend *moe = NULL;
                        kt_status st = kt_moe_backend_create(&moe, NULL, &d, &lw, 1, &o);
                        unsetenv("KT_MOE_DECODE_FLOW");
                        unsetenv("KT_MOE_DECODE_TAIL");
                        unsetenv("KT_MOE_DECODE_GRAIN2");
                        if (st < 0)
                            fail_msg("%s: create: %s", cases[c].what, kt_last_error());
                        out[flow] = calloc((size_t)nT * REPS * per, sizeof(float));
                        for (int ti = 0; ti < nT; ti++)
                            for (int r = 0; r < REPS; r++) {
                                int32_t n_tokens = T_list[ti];
                                float *o1 = out[flow] + ((size_t)ti * REPS + r) * per;
                                kt_moe_io io = tst_moe_io_f32(&n_tokens, K, x, ids, w, o1);
                                if (kt_moe_forward(moe, 0, &io) < 0)
                                    fail_msg("%s: forward: %s", cases[c].what, kt_last_error());
                            }
                        kt_moe_backend_free(moe);
                    }
                    for (int flow = 1; flow <= 3; flow++)
                        for (int ti = 0; ti < nT; ti++)
                            for (int r = 0; r < REPS; r++) {
                                size_t at = ((size_t)ti * REPS + r) * per;
                                /* every repetition against the barriers' first */
                                const float *a = out[flow] + at;
                                const float *b = out[0] + (size_t)ti * REPS * per;
                                size_t n = (size_t)T_list[ti] * H;
                                double maxref = 0, maxerr = 0;
                                for (size_t i = 0; i < n; i++) {
                                    maxref = fmax(maxref, fabs(b[i]));
                                    maxerr = fmax(maxerr, fabs(a[i] - b[i]));
                                }
                                if (flow < 3 ? memcmp(a, b, n * sizeof(float)) != 0
                                             : !(maxerr <= 1e-5 * maxref))
                                    fail_msg("%s: %d workers, %d pools, tail %d, T %d, call "
                                             "%d: %s differs from the barriers (%.3g of %.3g)",
                                             cases[c].what, threads, pools, tail, T_list[ti], r,
                                             flow == 1 ? "flow 1" : flow == 2 ? "flow 2"
                                                                              : "GRAIN2 32",
                                             maxerr, maxref);
                                worst_g2 = flow == 3 ? fmax(worst_g2, maxerr / maxref) : worst_g2;
                                compared += flow < 3;
                            }
                    for (int flow = 0; flow <= 3; flow++)
                        free(out[flow]);
                }
        printf("  %-15s flows 1 and 2 equal the barriers in %d calls (1-3 workers, 1-2 pools, "
               "tail 0 / 1, T 1-4 and 9); GRAIN2 32: rel %.2g\n", cases[c].what, compared,
               worst_g2);
        pool_experts_free(&px, E);
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_and_errors),
        cmocka_unit_test(test_read_at_execution),
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_syn_bf16),
        cmocka_unit_test(test_syn_fp8),
        cmocka_unit_test(test_syn_int4),
        cmocka_unit_test(test_syn_pools),
        cmocka_unit_test(test_pools_every_method),
        cmocka_unit_test(test_decode_read_spans),
        cmocka_unit_test(test_decode_read_backend),
        cmocka_unit_test(test_decode_flow),
    };
    /* KT_TEST_FILTER=test_decode_read_spans: a subset (sanitizer builds are slow) */
    const char *filter = getenv("KT_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
