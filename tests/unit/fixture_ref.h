/*
 * Fixture references for the engine tests (test_engine.c, test_gpu.c): the
 * transformers outputs of a fixture (reference.safetensors) as plain arrays.
 * Include after <cmocka.h>.
 */
#ifndef KT_TEST_FIXTURE_REF_H
#define KT_TEST_FIXTURE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

typedef struct ref_data {
    kt_st_set *set;
    int32_t T, V, L1, H; /* L1 = n_layer + 1 */
    int32_t *prompt;
    float *logits;       /* [T][V]      */
    float *hidden;       /* [L1][T][H]  */
    int32_t *greedy;
    int32_t n_greedy;
} ref_data;

static char *fixture_path(const char *name, const char *variant)
{
    const char *root = getenv("KT_TEST_DATA");
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/fixtures/%s%s%s", root ? root : "tests/data", name,
             variant ? "/" : "", variant ? variant : "");
    return buf;
}

static float *tensor_f32(const kt_st_tensor *t)
{
    float *p = malloc(sizeof(float) * t->n_elements);
    assert_non_null(p);
    assert_int_equal(kt__tensor_to_f32(t->data, t->type, t->n_elements, p), KT_OK);
    return p;
}

static int32_t *tensor_i32(const kt_st_tensor *t)
{
    float *f = tensor_f32(t);
    int32_t *p = malloc(sizeof(int32_t) * (t->n_elements + 1));
    for (uint64_t i = 0; i < t->n_elements; i++)
        p[i] = (int32_t)f[i];
    free(f);
    return p;
}

/* The transformers reference of the fixture or model at dir. Every one ships in
 * the tree (meson setup unpacks their weights), so a missing one fails the test. */
static void ref_load(ref_data *r, const char *dir)
{
    memset(r, 0, sizeof *r);
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    if (kt__st_open_file(&r->set, path) < 0)
        fail_msg("%s (meson setup unpacks the fixtures' weights)", kt_last_error());
    const kt_st_tensor *p = kt__st_find(r->set, "prompt_ids");
    const kt_st_tensor *lg = kt__st_find(r->set, "logits");
    const kt_st_tensor *hs = kt__st_find(r->set, "hidden_states");
    const kt_st_tensor *g = kt__st_find(r->set, "greedy_ids");
    assert_non_null(p), assert_non_null(lg), assert_non_null(hs), assert_non_null(g);
    r->T = (int32_t)p->shape[0];
    r->V = (int32_t)lg->shape[1];
    r->L1 = (int32_t)hs->shape[0];
    r->H = (int32_t)hs->shape[2];
    r->prompt = tensor_i32(p);
    r->logits = tensor_f32(lg);
    r->hidden = tensor_f32(hs);
    r->greedy = tensor_i32(g);
    r->n_greedy = (int32_t)g->n_elements;
}

/* The trained demo model models/kimi-k2-demo under $KT_SOURCE_ROOT (dir gets its path) and
 * its transformers reference. */
static void demo_ref_load(ref_data *r, char *dir, size_t dir_size)
{
    const char *src = getenv("KT_SOURCE_ROOT");
    snprintf(dir, dir_size, "%s/models/kimi-k2-demo", src ? src : ".");
    ref_load(r, dir);
}

static void ref_free(ref_data *r)
{
    free(r->prompt), free(r->logits), free(r->hidden), free(r->greedy);
    kt__st_close(r->set);
}

static float max_abs_diff(const float *a, const float *b, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m))
            m = d; /* NaN propagates as a failure */
    }
    return m;
}

#endif /* KT_TEST_FIXTURE_REF_H */
