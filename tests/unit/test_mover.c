/* The expert mover's thread (lib/gpu/mover.h) driven by memcpy, without a GPU:
 * batches land whole, one at a time, a failure names its copy, and the
 * thread's own finish step runs after every batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gpu/mover.h"
#include "kt/kt.h"

typedef struct fake_device {
    _Atomic int copies, finishes;
    int fail_at;            /* copy number (1-based) that fails; 0: none */
    _Atomic int hold;       /* copies wait while set: the batch stays in flight */
} fake_device;

static int fake_copy(void *arg, void *dst, const void *src, size_t bytes, char *err, size_t n)
{
    fake_device *d = arg;
    while (atomic_load(&d->hold)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    int c = atomic_fetch_add(&d->copies, 1) + 1;
    if (c == d->fail_at) {
        snprintf(err, n, "fake device refused copy %d", c);
        return -1;
    }
    memcpy(dst, src, bytes);
    return 0;
}

static int fake_finish(void *arg, char *err, size_t n)
{
    (void)err, (void)n;
    atomic_fetch_add(&((fake_device *)arg)->finishes, 1);
    return 0;
}

static void test_batches_land(void **state)
{
    (void)state;
    fake_device dev = {0};
    kt__mover_ops ops = {fake_copy, fake_finish, &dev};
    kt__mover *m = NULL;
    assert_int_equal(kt__mover_create(&m, &ops), KT_OK);
    assert_false(kt__mover_busy(m));
    kt_status st = KT_OK;
    assert_false(kt__mover_poll(m, &st)); /* nothing started */
    assert_int_equal(kt__mover_wait(m), KT_OK);

    enum { N = 64, BYTES = 4096 };
    uint8_t *src = malloc(N * BYTES), *dst = calloc(N, BYTES);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < (size_t)N * BYTES; i++)
        src[i] = (uint8_t)(i * 131 + 7);
    kt__mover_piece p[N];
    for (int round = 0; round < 20; round++) {
        memset(dst, 0, (size_t)N * BYTES);
        atomic_store(&dev.hold, 1);
        for (int i = 0; i < N; i++) /* reversed order: pieces are independent */
            p[i] = (kt__mover_piece){dst + (size_t)(N - 1 - i) * BYTES,
                                     src + (size_t)(N - 1 - i) * BYTES, BYTES};
        assert_int_equal(kt__mover_start(m, p, N), KT_OK);
        memset(p, 0, sizeof p); /* the mover copied the list */
        assert_true(kt__mover_busy(m));
        assert_false(kt__mover_poll(m, &st)); /* held: still copying */
        /* a second batch before the first is collected is refused */
        assert_int_equal(kt__mover_start(m, p, 1), KT_ERR_INVALID_ARG);
        atomic_store(&dev.hold, 0);
        if (round % 2) {
            while (!kt__mover_poll(m, &st))
                ;
            assert_int_equal(st, KT_OK);
        } else {
            assert_int_equal(kt__mover_wait(m), KT_OK);
        }
        assert_false(kt__mover_busy(m));
        assert_memory_equal(dst, src, (size_t)N * BYTES);
    }
    assert_int_equal(atomic_load(&dev.copies), 20 * N);
    assert_int_equal(atomic_load(&dev.finishes), 20);

    /* a failing copy ends its batch, names the copy, and the mover goes on */
    dev.fail_at = atomic_load(&dev.copies) + 3;
    for (int i = 0; i < N; i++)
        p[i] = (kt__mover_piece){dst + (size_t)i * BYTES, src + (size_t)i * BYTES, BYTES};
    assert_int_equal(kt__mover_start(m, p, N), KT_OK);
    assert_int_equal(kt__mover_wait(m), KT_ERR_IO);
    assert_non_null(strstr(kt_last_error(), "copy 3 of 64"));
    assert_non_null(strstr(kt_last_error(), "fake device refused"));
    assert_int_equal(atomic_load(&dev.finishes), 21); /* finished even so */
    dev.fail_at = 0;
    assert_int_equal(kt__mover_start(m, p, 0), KT_OK); /* an empty batch lands too */
    assert_int_equal(kt__mover_wait(m), KT_OK);

    /* freed with a batch in flight: it lands first */
    memset(dst, 0, (size_t)N * BYTES);
    assert_int_equal(kt__mover_start(m, p, N), KT_OK);
    kt__mover_free(m);
    assert_memory_equal(dst, src, (size_t)N * BYTES);
    free(src);
    free(dst);
}

static void test_bad_ops(void **state)
{
    (void)state;
    kt__mover *m = (kt__mover *)1;
    kt__mover_ops ops = {NULL, fake_finish, NULL};
    assert_int_equal(kt__mover_create(&m, &ops), KT_ERR_INVALID_ARG);
    assert_null(m);
    kt__mover_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_land),
        cmocka_unit_test(test_bad_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
