/* Sampler: greedy, determinism by seed, top-k/top-p/min-p support, penalties, distribution. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kt/sampler.h"

static kt_sampler *make(int32_t V, kt_sampler_options o)
{
    kt_sampler *s = NULL;
    assert_int_equal(kt_sampler_create(&s, V, &o), KT_OK);
    return s;
}

static void test_greedy(void **state)
{
    (void)state;
    float logits[5] = {0.1f, 2.0f, NAN, 1.9f, -3.0f};
    kt_sampler *s = NULL;
    assert_int_equal(kt_sampler_create(&s, 5, NULL), KT_OK);
    int32_t t = -1;
    assert_int_equal(kt_sampler_sample(s, logits, &t), KT_OK);
    assert_int_equal(t, 1);
    float all_bad[5] = {-INFINITY, NAN, -INFINITY, NAN, -INFINITY};
    assert_int_equal(kt_sampler_sample(s, all_bad, &t), KT_ERR_INVALID_ARG);
    kt_sampler_free(s);
}

static void test_bad_options(void **state)
{
    (void)state;
    kt_sampler *s = NULL;
    kt_sampler_options o = KT_SAMPLER_OPTIONS_INIT;
    o.top_p = 0.0f;
    assert_int_equal(kt_sampler_create(&s, 10, &o), KT_ERR_INVALID_ARG);
    o = (kt_sampler_options)KT_SAMPLER_OPTIONS_INIT;
    o.temperature = -1.0f;
    assert_int_equal(kt_sampler_create(&s, 10, &o), KT_ERR_INVALID_ARG);
    o = (kt_sampler_options)KT_SAMPLER_OPTIONS_INIT;
    o.repetition_penalty = 0.0f;
    assert_int_equal(kt_sampler_create(&s, 10, &o), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_sampler_create(&s, 0, NULL), KT_ERR_INVALID_ARG);
    assert_null(s);
    kt_sampler_free(NULL);
}

static void test_seed_determinism_and_restrictions(void **state)
{
    (void)state;
    enum { V = 1000 };
    static float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = sinf((float)i * 0.37f) * 3.0f;
    kt_sampler_options o = KT_SAMPLER_OPTIONS_INIT;
    o.temperature = 1.0f;
    o.seed = 1234;
    kt_sampler *a = make(V, o), *b = make(V, o);
    int32_t seq_a[64], seq_b[64];
    for (int i = 0; i < 64; i++) {
        assert_int_equal(kt_sampler_sample(a, logits, &seq_a[i]), KT_OK);
        assert_int_equal(kt_sampler_sample(b, logits, &seq_b[i]), KT_OK);
    }
    assert_memory_equal(seq_a, seq_b, sizeof seq_a);
    kt_sampler_reset(a, 1234);
    int32_t t;
    kt_sampler_sample(a, logits, &t);
    assert_int_equal(t, seq_a[0]);
    kt_sampler_free(a);
    kt_sampler_free(b);

    /* top-k 3: only the three largest logits are ever drawn. */
    float top3 = -INFINITY;
    int32_t order[V];
    for (int i = 0; i < V; i++)
        order[i] = i;
    for (int i = 0; i < 3; i++) /* partial selection sort */
        for (int j = i + 1; j < V; j++)
            if (logits[order[j]] > logits[order[i]]) {
                int32_t x = order[i];
                order[i] = order[j];
                order[j] = x;
            }
    top3 = logits[order[2]];
    o.top_k = 3;
    kt_sampler *k = make(V, o);
    for (int i = 0; i < 500; i++) {
        kt_sampler_sample(k, logits, &t);
        assert_true(logits[t] >= top3);
    }
    kt_sampler_free(k);
}

static void test_distribution(void **state)
{
    (void)state;
    /* p = softmax(log([0.5, 0.3, 0.2])) at T = 1: frequencies within 3 sigma. */
    float logits[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    kt_sampler_options o = KT_SAMPLER_OPTIONS_INIT;
    o.temperature = 1.0f;
    o.seed = 7;
    kt_sampler *s = make(3, o);
    int counts[3] = {0};
    const int N = 20000;
    for (int i = 0; i < N; i++) {
        int32_t t;
        kt_sampler_sample(s, logits, &t);
        counts[t]++;
    }
    const double p[3] = {0.5, 0.3, 0.2};
    for (int i = 0; i < 3; i++) {
        double sigma = sqrt(N * p[i] * (1 - p[i]));
        assert_true(fabs(counts[i] - N * p[i]) < 4 * sigma);
    }
    kt_sampler_free(s);

    /* top_p 0.6: the nucleus is {0, 1} (0.5 < 0.6 <= 0.8). min_p 0.5: {0, 1} (0.3 >= 0.25). */
    o.top_p = 0.6f;
    s = make(3, o);
    for (int i = 0; i < 2000; i++) {
        int32_t t;
        kt_sampler_sample(s, logits, &t);
        assert_true(t == 0 || t == 1);
    }
    kt_sampler_free(s);
    o.top_p = 1.0f;
    o.min_p = 0.5f;
    s = make(3, o);
    int seen1 = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t t;
        kt_sampler_sample(s, logits, &t);
        assert_true(t == 0 || t == 1);
        seen1 |= t == 1;
    }
    assert_true(seen1);
    kt_sampler_free(s);
}

static void test_penalties(void **state)
{
    (void)state;
    float logits[4] = {2.0f, 1.9f, -1.0f, 0.0f};
    kt_sampler_options o = KT_SAMPLER_OPTIONS_INIT;
    o.repetition_penalty = 1.2f; /* 2.0 -> 1.667 < 1.9 */
    kt_sampler *s = make(4, o);
    int32_t t;
    kt_sampler_accept(s, 0);
    kt_sampler_accept(s, 0);
    kt_sampler_sample(s, logits, &t);
    assert_int_equal(t, 1);
    assert_int_equal(kt_sampler_accept(s, 9), KT_ERR_INVALID_ARG);
    kt_sampler_free(s);

    o = (kt_sampler_options)KT_SAMPLER_OPTIONS_INIT;
    o.frequency_penalty = 0.06f; /* one occurrence: 1.94 > 1.9; two: 1.88 < 1.9 */
    o.penalty_last_n = 2;
    s = make(4, o);
    kt_sampler_accept(s, 0);
    kt_sampler_sample(s, logits, &t);
    assert_int_equal(t, 0);
    kt_sampler_accept(s, 0);
    kt_sampler_sample(s, logits, &t);
    assert_int_equal(t, 1);
    kt_sampler_accept(s, 3); /* window of 2 now holds {0, 3}: one 0 */
    kt_sampler_sample(s, logits, &t);
    assert_int_equal(t, 0);
    kt_sampler_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_seed_determinism_and_restrictions),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_penalties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
