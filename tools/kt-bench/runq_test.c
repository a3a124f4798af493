/* runq.c: schedstat lines parse as three unsigned numbers or not at all (a
 * truncated, signed, overflowing or hostile line must not crash nor half-fill),
 * the thread-set difference, and the queue over this process's own threads. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runq.h"

static bool parse(const char *text, runq_sample *s)
{
    return runq_parse_schedstat(text, strlen(text), s);
}

static void test_parses_kernel_lines(void **state)
{
    (void)state;
    runq_sample s;
    assert_true(parse("66431083 19174714 132\n", &s));
    assert_true(s.run_ns == 66431083u && s.wait_ns == 19174714u && s.slices == 132u);
    assert_true(parse("0 0 1", &s)); /* no newline */
    assert_true(s.run_ns == 0 && s.wait_ns == 0 && s.slices == 1);
    assert_true(parse("18446744073709551615 18446744073709551615 1\n", &s));
    assert_true(s.run_ns == UINT64_MAX && s.wait_ns == UINT64_MAX);
    /* the text ends at n bytes, or at a NUL before them */
    const char two[] = "1 2 3\n9 9 9\n";
    assert_true(runq_parse_schedstat(two, 6, &s) && s.slices == 3);
    const char nul[] = "7 8 9\0garbage";
    assert_true(runq_parse_schedstat(nul, sizeof nul, &s) && s.wait_ns == 8);
}

static void test_rejects_hostile_lines(void **state)
{
    (void)state;
    static const char *bad[] = {
        "", "\n", "1", "1 2", "1 2 ", "1 2\n", " 1 2 3", "1  2 3", "1 2 3 4", "1 2 3x",
        "-1 2 3", "1 -2 3", "+1 2 3", "1 2 -3", "0x10 2 3", "1\t2\t3", "a b c",
        "18446744073709551616 0 0",                       /* 2^64 */
        "1 99999999999999999999999999999999999999999 3", /* far past 2^64 */
        "1 2 3\r\n", "1 2 3 \n", "1 2 \n", "1 \n 3", "\xff\xfe\xfd",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        runq_sample s = {11, 22, 33};
        assert_false(parse(bad[i], &s));
        /* a rejected line leaves the sample as it was */
        assert_true(s.run_ns == 11 && s.wait_ns == 22 && s.slices == 33);
    }
    runq_sample s;
    assert_false(runq_parse_schedstat(NULL, 5, &s));
    assert_false(runq_parse_schedstat("1 2 3", 5, NULL));
    /* every prefix of a good line short of its third number is rejected, read
     * from a buffer exactly that long (no terminator beyond it: ASan's check) */
    const char *good = "123456 7890 42\n";
    for (size_t n = 0; n <= strlen(good); n++) {
        char *buf = malloc(n ? n : 1);
        memcpy(buf, good, n);
        bool ok = runq_parse_schedstat(buf, n, &s);
        assert_true(ok == (n >= 13)); /* "123456 7890 4" onwards has three numbers */
        free(buf);
    }
    /* random bytes: any answer, no crash, no read past n */
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(i % 40);
        char *buf = malloc(n ? n : 1);
        for (size_t j = 0; j < n; j++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            /* mostly digits and spaces, so that some lines get far */
            buf[j] = (char)(r % 4 ? "0123456789 \n-"[r % 13] : (int)(r >> 8));
        }
        (void)runq_parse_schedstat(buf, n, &s);
        free(buf);
    }
}

static void test_new_ids(void **state)
{
    (void)state;
    int before[] = {10, 11, 12}, now[] = {10, 11, 12, 15, 20}, out[8];
    assert_int_equal(runq_new_ids(now, 5, before, 3, out, 8), 2);
    assert_int_equal(out[0], 15);
    assert_int_equal(out[1], 20);
    assert_int_equal(runq_new_ids(now, 5, before, 3, out, 1), 1); /* capped */
    assert_int_equal(runq_new_ids(before, 3, now, 5, out, 8), 0);
    assert_int_equal(runq_new_ids(now, 5, NULL, 0, out, 8), 5);
}

static void test_queue_over_own_thread(void **state)
{
    (void)state;
    char why[192];
    /* a thread id that cannot exist: skipped, and with nothing else, no queue */
    int none[] = {-5};
    assert_null(runq_open(none, 1, why, sizeof why));
    assert_true(why[0] != '\0');
    int self[] = {runq_self_tid(), -5};
    runq *q = runq_open(self, 2, why, sizeof why);
    if (!q) /* a kernel without schedstats: the tool prints plain figures */
        skip();
    assert_int_equal(runq_threads(q), 1);
    uint64_t a = runq_wait_ns(q);
    for (int i = 0; i < 200; i++)
        usleep(100); /* each wake-up may wait a little on the run queue */
    uint64_t b = runq_wait_ns(q);
    assert_true(b >= a);
    runq_free(q);
    runq_free(NULL);
}

static void test_limit_from_env(void **state)
{
    (void)state;
    unsetenv("KT_BENCH_CLEAN_US");
    assert_true(runq_clean_limit_us() == RUNQ_CLEAN_US_DEFAULT);
    setenv("KT_BENCH_CLEAN_US", "40", 1);
    assert_true(runq_clean_limit_us() == 40.0);
    static const char *bad[] = {"", "x", "-3", "12us", "1e99"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("KT_BENCH_CLEAN_US", bad[i], 1);
        assert_true(runq_clean_limit_us() == RUNQ_CLEAN_US_DEFAULT);
    }
    unsetenv("KT_BENCH_CLEAN_US");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parses_kernel_lines),
        cmocka_unit_test(test_rejects_hostile_lines),
        cmocka_unit_test(test_new_ids),
        cmocka_unit_test(test_queue_over_own_thread),
        cmocka_unit_test(test_limit_from_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
