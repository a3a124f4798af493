/* Core rules: status strings, last error, option-struct protocol, logging, version. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kt_internal.h"

static void test_status_strings(void **state)
{
    (void)state;
    assert_string_equal(kt_status_str(KT_OK), "KT_OK");
    assert_string_equal(kt_status_str(KT_ERR_FORMAT), "KT_ERR_FORMAT");
    assert_string_equal(kt_status_str(KT_ERR_LIMIT), "KT_ERR_LIMIT");
    assert_string_equal(kt_status_str((kt_status)-999), "KT_ERR_UNKNOWN");
    /* Codes are ABI: pinned values. */
    assert_int_equal(KT_ERR_INTERNAL, -1);
    assert_int_equal(KT_ERR_FORMAT, -5);
    assert_int_equal(KT_ERR_VERSION, -10);
}

static void test_last_error(void **state)
{
    (void)state;
    kt_clear_error();
    assert_string_equal(kt_last_error(), "");
    assert_int_equal(kt__error(KT_ERR_IO, "cannot open %s", "x.bin"), KT_ERR_IO);
    assert_string_equal(kt_last_error(), "cannot open x.bin");
    kt__error_prefix(KT_ERR_IO, "model %s", "dir");
    assert_string_equal(kt_last_error(), "model dir: cannot open x.bin");
    kt_runtime *rt = NULL;
    assert_int_equal(kt_runtime_create(NULL, NULL), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "out is NULL"));
    (void)rt;
}

/* A "newer" caller struct: the known prefix plus one field this library lacks. */
typedef struct {
    kt_runtime_options base;
    uint64_t future_field;
} bigger_options;

static void test_options_protocol(void **state)
{
    (void)state;
    kt_runtime *rt = NULL;
    kt_runtime_options o = KT_RUNTIME_OPTIONS_INIT;
    o.n_threads = 3;
    assert_int_equal(kt_runtime_create(&rt, &o), KT_OK);
    assert_int_equal(kt_runtime_n_threads(rt), 3);
    kt_runtime_free(rt);

    bigger_options b;
    memset(&b, 0, sizeof b);
    kt_runtime_options_init(&b.base, sizeof b);
    assert_int_equal(b.base.struct_size, sizeof b);
    assert_int_equal(b.base.log_level, KT_LOG_WARN);
    assert_int_equal(kt_runtime_create(&rt, &b.base), KT_OK); /* zero tail: accepted */
    kt_runtime_free(rt);
    b.future_field = 7;
    rt = (kt_runtime *)0x1;
    assert_int_equal(kt_runtime_create(&rt, &b.base), KT_ERR_VERSION);
    assert_null(rt);
    assert_non_null(strstr(kt_last_error(), "upgrade libkt"));

    /* An older caller that knows only struct_size and flags: defaults for the rest. */
    kt_runtime_options small = KT_RUNTIME_OPTIONS_INIT;
    small.struct_size = offsetof(kt_runtime_options, log_fn);
    small.n_threads = 99; /* beyond the declared size: must be ignored */
    assert_int_equal(kt_runtime_create(&rt, &small), KT_OK);
    assert_int_not_equal(kt_runtime_n_threads(rt), 99);
    kt_runtime_free(rt);

    kt_runtime_options bad = KT_RUNTIME_OPTIONS_INIT;
    bad.struct_size = 2;
    assert_int_equal(kt_runtime_create(&rt, &bad), KT_ERR_INVALID_ARG);
    bad = (kt_runtime_options)KT_RUNTIME_OPTIONS_INIT;
    bad.flags = 0x80;
    assert_int_equal(kt_runtime_create(&rt, &bad), KT_ERR_INVALID_ARG);
    bad = (kt_runtime_options)KT_RUNTIME_OPTIONS_INIT;
    bad.n_threads = -1;
    assert_int_equal(kt_runtime_create(&rt, &bad), KT_ERR_INVALID_ARG);
    kt_runtime_free(NULL);
}

struct log_capture {
    int calls;
    kt_log_level last_level;
    char last[256];
};

static void capture_log(kt_log_level level, const char *message, void *user_data)
{
    struct log_capture *c = user_data;
    c->calls++;
    c->last_level = level;
    snprintf(c->last, sizeof c->last, "%s", message);
}

static void test_logging(void **state)
{
    (void)state;
    struct log_capture cap = {0};
    kt_runtime_options o = KT_RUNTIME_OPTIONS_INIT;
    o.log_fn = capture_log;
    o.log_user_data = &cap;
    o.log_level = KT_LOG_INFO;
    kt_runtime *rt = NULL;
    assert_int_equal(kt_runtime_create(&rt, &o), KT_OK);
    kt__log(rt, KT_LOG_DEBUG, "dropped %d", 1);
    assert_int_equal(cap.calls, 0);
    kt__log(rt, KT_LOG_INFO, "kept %d\nsecond line", 2);
    assert_int_equal(cap.calls, 1);
    assert_int_equal(cap.last_level, KT_LOG_INFO);
    assert_string_equal(cap.last, "kept 2");
    kt_runtime_log(rt, KT_LOG_ERROR, "public");
    assert_string_equal(cap.last, "public");
    kt_runtime_free(rt);
}

static void test_version_features(void **state)
{
    (void)state;
    assert_string_equal(kt_version(), KT_VERSION_STRING);
    assert_int_equal(kt_version_number(), KT_VERSION_NUMBER);
    assert_true(KT_VERSION_CHECK(0, 0, 1));
    assert_false(KT_VERSION_CHECK(99, 0, 0));
    uint64_t f = kt_features();
    assert_true(f & KT_FEATURE_HWLOC);
    for (int bit = 0; bit < 64; bit++)
        if (f & (UINT64_C(1) << bit))
            assert_non_null(kt_feature_name(UINT64_C(1) << bit));
    assert_null(kt_feature_name(3));
#if KT_HAVE_CUDA
    assert_true(f & KT_FEATURE_CUDA);
#else
    assert_false(f & KT_FEATURE_CUDA);
#endif
    assert_string_equal(kt_method_name(KT_METHOD_AMXINT4), "AMXINT4");
    assert_int_equal(kt_method_from_name("rawint4"), KT_METHOD_RAWINT4);
    assert_int_equal(kt_method_from_name("nope"), KT_METHOD_NONE);
    assert_null(kt_method_name((kt_method)77));
}

static void test_buf(void **state)
{
    (void)state;
    kt_buf b = KT_BUF_INIT;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(kt__buf_appendf(&b, "%d,", i), KT_OK);
    assert_int_equal(strlen(b.ptr), b.size);
    assert_memory_equal(b.ptr, "0,1,2,", 6);
    kt_buf_dispose(&b);
    assert_null(b.ptr);
    kt_buf_dispose(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings), cmocka_unit_test(test_last_error),
        cmocka_unit_test(test_options_protocol), cmocka_unit_test(test_logging),
        cmocka_unit_test(test_version_features), cmocka_unit_test(test_buf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
