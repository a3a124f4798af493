/* Model registry: every entry's published config opens and describes the
 * model the research notes give (layers, experts, sizes); aliases resolve;
 * the GPU-expert rule is kt-kernel's formula. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kt/kt.h"

static kt_registry_entry find(const char *name)
{
    kt_registry_entry e;
    e.struct_size = sizeof e;
    assert_int_equal(kt_registry_find(name, &e), KT_OK);
    return e;
}

static void test_aliases(void **state)
{
    (void)state;
    static const char *const required[] = {
        "kimi-k2", "kimi-k2-thinking", "deepseek-v3", "deepseek-r1", "minimax-m2",
        "minimax-m2.1", "qwen3-30b-a3b", "qwen3-235b-a22b", "glm-4.5", "gpt-oss-20b",
        "gpt-oss-120b"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        assert_string_equal(find(required[i]).name, required[i]);
    assert_string_equal(find("m2.1").name, "minimax-m2.1");
    assert_string_equal(find("M2.1").hub_id, "MiniMaxAI/MiniMax-M2.1");
    assert_string_equal(find("moonshotai/Kimi-K2-Thinking").name, "kimi-k2-thinking");
    assert_string_equal(find("k2-thinking").method, "RAWINT4");
    assert_string_equal(find("r1").hub_id, "deepseek-ai/DeepSeek-R1-0528");
    kt_registry_entry e;
    e.struct_size = sizeof e;
    assert_int_equal(kt_registry_find("kimi-k3", &e), KT_ERR_NOT_FOUND);
    assert_non_null(strstr(kt_last_error(), "kimi-k2-thinking"));
    assert_int_equal(kt_registry_get(kt_registry_count(), &e), KT_ERR_INVALID_ARG);
}

/* kt-kernel: V = floor(TP x (GB - 16)); DeepSeek V/3, Kimi-K2-Thinking 2V/3, MiniMax V. */
static void test_gpu_rule(void **state)
{
    (void)state;
    const uint64_t gb = 1000000000ull;
    assert_int_equal(kt_registry_gpu_experts(&(kt_registry_entry){0}, 1, 80 * gb), 0);
    kt_registry_entry ds = find("deepseek-v3"), k2 = find("kimi-k2-thinking");
    kt_registry_entry m2 = find("m2"), q = find("qwen3-30b-a3b");
    assert_int_equal(kt_registry_gpu_experts(&ds, 1, 24 * gb), 2);   /* 8 / 3    */
    assert_int_equal(kt_registry_gpu_experts(&k2, 2, 48 * gb), 42);  /* 2x64x2/3 */
    assert_int_equal(kt_registry_gpu_experts(&m2, 4, 80 * gb), 256); /* 4 x 64   */
    assert_int_equal(kt_registry_gpu_experts(&k2, 1, 16 * gb), 0);   /* reserve  */
    assert_int_equal(kt_registry_gpu_experts(&q, 1, 80 * gb), 0);    /* no rule  */
}

/* Published configs open config-only with the shapes of landscape.md §3. */
static void test_configs(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        uint32_t layers, moe_layers, experts, top_k;
        double expert_mb; /* one routed expert as stored, MB (landscape §3.10) */
    } want[] = {
        {"kimi-k2-thinking", 61, 60, 384, 8, 24.8},
        {"kimi-k2", 61, 60, 384, 8, 44.0},
        {"deepseek-v3", 61, 58, 256, 8, 44.0},
        {"deepseek-r1", 61, 58, 256, 8, 44.0},
        {"minimax-m2", 62, 62, 256, 8, 14.2},
        {"minimax-m2.1", 62, 62, 256, 8, 14.2},
        {"qwen3-30b-a3b", 48, 48, 128, 8, 9.4},     /* BF16: 4.7 M params x 2 */
        {"qwen3-235b-a22b", 94, 94, 128, 8, 37.7},  /* BF16: 18.9 M x 2       */
        {"glm-4.5", 92, 89, 160, 8, 47.2},          /* BF16: 23.6 M x 2       */
        {"gpt-oss-20b", 24, 24, 32, 4, 13.2},
        {"gpt-oss-120b", 36, 36, 128, 4, 13.2},
    };
    assert_int_equal(kt_registry_count(), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        kt_registry_entry e = find(want[i].name);
        kt_model *m = NULL;
        if (kt_registry_open_config(&e, NULL, &m) != KT_OK)
            fail_msg("%s: %s", want[i].name, kt_last_error());
        kt_arch_info a;
        a.struct_size = sizeof a;
        assert_int_equal(kt_model_arch(m, &a), KT_OK);
        assert_int_equal(a.n_layers, want[i].layers);
        assert_int_equal(a.n_moe_layers, want[i].moe_layers);
        assert_int_equal(a.n_routed_experts, want[i].experts);
        assert_int_equal(a.n_experts_per_tok, want[i].top_k);
        kt_memory_estimate est;
        est.struct_size = sizeof est;
        assert_int_equal(kt_model_estimate(m, NULL, &est), KT_OK);
        double mb = (double)est.expert_bytes / 1e6;
        if (mb < want[i].expert_mb * 0.97 || mb > want[i].expert_mb * 1.03)
            fail_msg("%s: %.2f MB per expert, want %.1f", want[i].name, mb, want[i].expert_mb);
        kt_model_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_gpu_rule),
        cmocka_unit_test(test_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
