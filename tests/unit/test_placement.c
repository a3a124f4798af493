/* Placement: budgets, strategies, statistics files, rebalancing, and the
 * demo models' real expert counts (frequency beats uniform). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt/placement.h"
#include "test_files.h"

static kt_placement *make(uint32_t L, uint32_t E, const uint8_t *moe, kt_placement_options o)
{
    kt_placement *p = NULL;
    assert_int_equal(kt_placement_create(&p, L, E, moe, &o), KT_OK);
    return p;
}

static void test_uniform_and_front_loading(void **state)
{
    (void)state;
    const uint8_t moe[5] = {0, 1, 1, 1, 1}; /* first layer dense, as DeepSeek */
    kt_placement_options o = KT_PLACEMENT_OPTIONS_INIT;
    o.strategy = KT_PLACEMENT_UNIFORM;
    o.budget = KT_BUDGET_PER_LAYER;
    o.per_layer = 3;
    kt_placement *p = make(5, 8, moe, o);
    assert_int_equal(kt_placement_gpu_count(p, 0), 0);
    for (uint32_t l = 1; l < 5; l++) {
        assert_int_equal(kt_placement_gpu_count(p, l), 3);
        assert_true(kt_placement_on_gpu(p, l, 0) && kt_placement_on_gpu(p, l, 2));
        assert_false(kt_placement_on_gpu(p, l, 3));
    }
    assert_int_equal(kt_placement_gpu_total(p), 12);
    kt_placement_free(p);

    /* Ratio 0.3 of 4 x 8 = 9.6 -> 9: 3, 2, 2, 2 (the first layer gets the extra one). */
    o.budget = KT_BUDGET_RATIO;
    o.ratio = 0.3;
    p = make(5, 8, moe, o);
    assert_int_equal(kt_placement_gpu_total(p), 9);
    assert_int_equal(kt_placement_gpu_count(p, 1), 3);
    assert_int_equal(kt_placement_gpu_count(p, 4), 2);
    kt_placement_free(p);

    o.strategy = KT_PLACEMENT_FRONT_LOADING;
    o.budget = KT_BUDGET_BYTES;
    o.bytes_per_expert = 1000;
    o.budget_bytes = 10500; /* 10 experts: layer 1 full (8), layer 2 gets 2 */
    p = make(5, 8, moe, o);
    assert_int_equal(kt_placement_gpu_count(p, 1), 8);
    assert_int_equal(kt_placement_gpu_count(p, 2), 2);
    assert_int_equal(kt_placement_gpu_count(p, 3), 0);
    kt_buf b = KT_BUF_INIT;
    assert_int_equal(kt_placement_describe(p, 0, &b), KT_OK);
    assert_non_null(strstr(b.ptr, "front-loading, 10 of 32"));
    assert_non_null(strstr(b.ptr, "  layer 1          8/8 on GPU  [0-7]\n"));
    assert_non_null(strstr(b.ptr, "  layer 2          2/8 on GPU  [0-1]\n"));
    assert_non_null(strstr(b.ptr, "  layer 0       dense\n"));
    assert_non_null(strstr(b.ptr, "  layers 3-4       0/8 on GPU\n")); /* runs collapse */
    kt_buf_dispose(&b);
    assert_int_equal(kt_placement_describe(p, 1, &b), KT_OK);
    assert_non_null(strstr(b.ptr, "{\"layer\": 2, \"moe\": true, \"gpu_experts\": [0, 1]}"));
    kt_buf_dispose(&b);
    assert_int_equal(kt_placement_set(p, 0, 1, 1), KT_ERR_INVALID_ARG); /* dense layer */
    kt_placement_free(p);

    o.budget = KT_BUDGET_PER_LAYER;
    o.per_layer = 9;
    assert_int_equal(kt_placement_create(&p, 5, 8, moe, &o), KT_ERR_INVALID_ARG);
    o.per_layer = 1;
    o.strategy = KT_PLACEMENT_FREQUENCY; /* no stats */
    assert_int_equal(kt_placement_create(&p, 5, 8, moe, &o), KT_ERR_INVALID_ARG);
    assert_null(p);
}

static void test_random_seeded(void **state)
{
    (void)state;
    kt_placement_options o = KT_PLACEMENT_OPTIONS_INIT;
    o.strategy = KT_PLACEMENT_RANDOM;
    o.budget = KT_BUDGET_RATIO;
    o.ratio = 0.25;
    o.seed = 5;
    kt_placement *a = make(6, 16, NULL, o), *b = make(6, 16, NULL, o);
    assert_int_equal(kt_placement_gpu_total(a), 24);
    for (uint32_t l = 0; l < 6; l++)
        assert_memory_equal(kt_placement_gpu_mask(a, l), kt_placement_gpu_mask(b, l), 16);
    kt_placement_free(b);
    o.seed = 6;
    b = make(6, 16, NULL, o);
    int differ = 0;
    for (uint32_t l = 0; l < 6; l++)
        differ |= memcmp(kt_placement_gpu_mask(a, l), kt_placement_gpu_mask(b, l), 16) != 0;
    assert_true(differ);
    kt_placement_free(a);
    kt_placement_free(b);
}

static void test_frequency_and_stats_io(void **state)
{
    (void)state;
    kt_expert_stats *s = NULL;
    assert_int_equal(kt_expert_stats_create(&s, 2, 4), KT_OK);
    const int32_t ids0[] = {3, 3, 3, 1, -1, 1, 0};
    const int32_t ids1[] = {2, 2, 2, 2, 2};
    assert_int_equal(kt_expert_stats_record(s, 0, ids0, 7), KT_OK);
    assert_int_equal(kt_expert_stats_record(s, 1, ids1, 5), KT_OK);
    const int32_t bad[] = {4};
    assert_int_equal(kt_expert_stats_record(s, 0, bad, 1), KT_ERR_INVALID_ARG);
    kt_expert_stats_add_tokens(s, 6);

    kt_placement_options o = KT_PLACEMENT_OPTIONS_INIT; /* auto -> frequency */
    o.stats = s;
    o.budget = KT_BUDGET_PER_LAYER;
    o.per_layer = 1; /* total 2: global top cells are (1,2)=5 and (0,3)=3 */
    kt_placement *p = make(2, 4, NULL, o);
    assert_true(kt_placement_on_gpu(p, 1, 2));
    assert_true(kt_placement_on_gpu(p, 0, 3));
    assert_int_equal(kt_placement_gpu_total(p), 2);
    assert_true(fabs(kt_placement_coverage(p, s) - 8.0 / 11.0) < 1e-12);
    kt_placement_free(p);

    char path[] = "/tmp/kt_stats_XXXXXX";
    tmp_file_create(path);
    assert_int_equal(kt_expert_stats_save(s, path), KT_OK);
    kt_expert_stats *r = NULL;
    assert_int_equal(kt_expert_stats_load(&r, path), KT_OK);
    assert_int_equal(kt_expert_stats_n_layers(r), 2);
    assert_int_equal(kt_expert_stats_tokens(r), 6);
    assert_true(kt_expert_stats_count(r, 0, 3) == 3.0);
    assert_true(kt_expert_stats_count(r, 1, 2) == 5.0);
    kt_expert_stats_free(r);

    /* A kt-kernel style dump: float32 [buffer 2][layers 2][experts 4], summed over buffers. */
    FILE *f = fopen(path, "wb");
    char header[118];
    memset(header, ' ', sizeof header);
    int n = snprintf(header, sizeof header,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 4), }");
    header[n] = ' ';
    header[sizeof header - 1] = '\n';
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned char hl[2] = {(unsigned char)sizeof header, 0};
    fwrite(hl, 1, 2, f);
    fwrite(header, 1, sizeof header, f);
    float vals[16];
    for (int i = 0; i < 16; i++)
        vals[i] = (float)i;
    fwrite(vals, sizeof(float), 16, f);
    fclose(f);
    assert_int_equal(kt_expert_stats_load(&r, path), KT_OK);
    assert_true(kt_expert_stats_count(r, 0, 0) == 0.0 + 8.0);
    assert_true(kt_expert_stats_count(r, 1, 3) == 7.0 + 15.0);
    kt_expert_stats_free(r);

    /* Hostile inputs: clean errors naming the file. */
    const char *bad_docs[] = {
        "{", "[]", "{\"format\": \"other\"}",
        "{\"format\": \"libkt.expert_stats\", \"n_layers\": 2, \"n_experts\": 4, \"counts\": [[1]]}",
        "{\"format\": \"libkt.expert_stats\", \"n_layers\": 1, \"n_experts\": 2, \"counts\": [[1, -3]]}",
        "{\"format\": \"libkt.expert_stats\", \"n_layers\": 1e12, \"n_experts\": 2, \"counts\": []}",
        "\x93NUMPY\x01\x00\xff\xff",
        "\x93NUMPY\x09\x00",
    };
    for (size_t i = 0; i < sizeof bad_docs / sizeof bad_docs[0]; i++) {
        f = fopen(path, "wb");
        fwrite(bad_docs[i], 1, strlen(bad_docs[i]), f);
        fclose(f);
        r = (kt_expert_stats *)0x1;
        kt_status st = kt_expert_stats_load(&r, path);
        assert_true(st == KT_ERR_FORMAT || st == KT_ERR_UNSUPPORTED);
        assert_null(r);
        assert_non_null(strstr(kt_last_error(), path));
    }
    assert_int_equal(kt_expert_stats_load(&r, "/nonexistent/stats.json"), KT_ERR_IO);
    remove(path);
    kt_expert_stats_free(s);
}

static void test_rebalancer(void **state)
{
    (void)state;
    kt_placement_options o = KT_PLACEMENT_OPTIONS_INIT;
    o.strategy = KT_PLACEMENT_UNIFORM;
    o.budget = KT_BUDGET_PER_LAYER;
    o.per_layer = 2; /* experts 0, 1 on the GPU */
    kt_placement *p = make(1, 8, NULL, o);
    kt_rebalancer_options ro = KT_REBALANCER_OPTIONS_INIT;
    ro.half_life_tokens = 64;
    ro.move_cost_pairs = 16;
    kt_rebalancer *r = NULL;
    assert_int_equal(kt_rebalancer_create(&r, p, NULL, &ro), KT_OK);
    kt_expert_move moves[8];
    size_t n = 99;
    assert_int_equal(kt_rebalancer_plan(r, moves, 8, &n), KT_OK);
    assert_int_equal(n, 0); /* nothing observed: no moves */

    /* Decode steps where experts 6 and 7 are hot, 0 and 1 cold. */
    for (int step = 0; step < 200; step++) {
        int32_t ids[2] = {6, step % 3 ? 7 : 0};
        kt_rebalancer_observe(r, 0, ids, 2);
        kt_rebalancer_advance(r, 1);
    }
    assert_int_equal(kt_rebalancer_plan(r, moves, 8, &n), KT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(moves[0].expert_in, 6);
    assert_int_equal(moves[1].expert_in, 7);
    assert_int_equal(moves[0].expert_out, 1); /* the colder resident leaves first */
    assert_true(moves[0].gain > moves[1].gain);
    assert_int_equal(kt_rebalancer_apply(r, moves, n), KT_OK);
    assert_true(kt_placement_on_gpu(p, 0, 6) && kt_placement_on_gpu(p, 0, 7));
    assert_int_equal(kt_placement_gpu_count(p, 0), 2);
    /* Hysteresis: now balanced, no churn. */
    assert_int_equal(kt_rebalancer_plan(r, moves, 8, &n), KT_OK);
    assert_int_equal(n, 0);
    /* Re-applying a stale plan is refused. */
    kt_expert_move stale = {0, 6, 1, 0, 1.0};
    assert_int_equal(kt_rebalancer_apply(r, &stale, 1), KT_ERR_INVALID_ARG);
    kt_rebalancer_free(r);

    /* A high move cost blocks small gains. */
    kt_placement_free(p);
    p = make(1, 8, NULL, o);
    ro.move_cost_pairs = 1e9;
    assert_int_equal(kt_rebalancer_create(&r, p, NULL, &ro), KT_OK);
    for (int step = 0; step < 200; step++) {
        int32_t ids[1] = {5};
        kt_rebalancer_observe(r, 0, ids, 1);
        kt_rebalancer_advance(r, 1);
    }
    assert_int_equal(kt_rebalancer_plan(r, moves, 8, &n), KT_OK);
    assert_int_equal(n, 0);
    kt_rebalancer_free(r);
    kt_placement_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_and_front_loading),
        cmocka_unit_test(test_random_seeded),
        cmocka_unit_test(test_frequency_and_stats_io),
        cmocka_unit_test(test_rebalancer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
