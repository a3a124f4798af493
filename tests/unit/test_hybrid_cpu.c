/* The CPU side of the GPU runtime's hybrid step, testable without a GPU:
 * kt__pool_bind_spare (the host-function thread moved off the pinned workers'
 * cores, whatever mask it inherited) and the MoE backend's task stamps
 * (KT_GPU_TRACE's split of a layer's CPU time), with submit and wait called
 * from a thread that did not create the backend, as CUDA's thread does. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/threadpool.h"
#include "kt/kt.h"
#include "moe/moe_internal.h"

/* ---- kt__pool_bind_spare --------------------------------------------------- */

typedef struct where {
    kt_pool *pool;
    _Atomic int cpu[4];
} where;

static void record_cpu(void *arg, int tid)
{
    where *w = arg;
    atomic_store(&w->cpu[tid], sched_getcpu());
}

typedef struct bind_case {
    kt_pool *pool;
    int inherit_cpu;   /* the mask the thread starts with: this one CPU */
    int bound;         /* kt__pool_bind_spare's result */
    cpu_set_t after;
} bind_case;

static void *bind_thread(void *p)
{
    bind_case *b = p;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(b->inherit_cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    b->bound = kt__pool_bind_spare(b->pool);
    pthread_getaffinity_np(pthread_self(), sizeof b->after, &b->after);
    return NULL;
}

static void test_bind_spare(void **state)
{
    (void)state;
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
    int n_cpus = CPU_COUNT(&mine);
    kt_pool *pool = NULL;
    kt_pool_config pc = {1, 1, true};
    assert_int_equal(kt__pool_create(&pool, &pc), KT_OK);
    where w = {pool, {-1, -1, -1, -1}};
    kt__pool_run(pool, record_cpu, &w);
    int worker_cpu = atomic_load(&w.cpu[0]);
    assert_true(worker_cpu >= 0);

    /* a thread that inherited the worker's one CPU (kt-bench e2e's OpenMP
     * yardstick left its main thread, and so CUDA's threads, there) */
    bind_case b = {pool, worker_cpu, 0, {{0}}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bind_thread, &b), 0);
    pthread_join(th, NULL);
    if (b.bound < 0) {
        kt__pool_free(pool);
        skip(); /* no hwloc topology or binding refused: nothing to check */
    }
    assert_true(b.bound >= 1);
    assert_int_equal(CPU_COUNT(&b.after), b.bound);
    if (n_cpus > 1) {
        /* every CPU but the worker's */
        assert_false(CPU_ISSET(worker_cpu, &b.after));
    } else {
        assert_true(CPU_ISSET(worker_cpu, &b.after)); /* the whole (one-CPU) machine */
    }

    /* workers not pinned: the whole machine, never narrower than it */
    kt_pool *loose = NULL;
    kt_pool_config lc = {1, 1, false};
    assert_int_equal(kt__pool_create(&loose, &lc), KT_OK);
    bind_case c = {loose, worker_cpu, 0, {{0}}};
    assert_int_equal(pthread_create(&th, NULL, bind_thread, &c), 0);
    pthread_join(th, NULL);
    assert_true(c.bound >= 1);
    assert_true(CPU_ISSET(worker_cpu, &c.after));
    assert_true(c.bound >= b.bound);
    kt__pool_free(loose);
    kt__pool_free(pool);
}

/* ---- task stamps ------------------------------------------------------------- */

enum { H = 128, I = 128, E = 4, K = 2, T = 3 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct hostfn {
    kt_moe_backend *moe;
    const kt_moe_io *io;
    double t_submit, t_done;
    kt_status st;
} hostfn;

/* What the GPU runtime's two host functions do, from one foreign thread. */
static void *hostfn_thread(void *p)
{
    hostfn *h = p;
    h->t_submit = now_s();
    h->st = kt_moe_submit(h->moe, 0, h->io);
    if (h->st == KT_OK)
        h->st = kt_moe_wait(h->moe, 0);
    h->t_done = now_s();
    return NULL;
}

static void test_task_stamps(void **state)
{
    (void)state;
    uint16_t *w = calloc((size_t)E * 3 * H * I, sizeof(uint16_t));
    assert_non_null(w);
    for (size_t i = 0; i < (size_t)E * 3 * H * I; i++)
        w[i] = (uint16_t)(0x3c00 + (i * 7919 % 256)); /* BF16 about 0.008 .. 0.016 */
    const void *g[E], *u[E], *d[E];
    for (int e = 0; e < E; e++) {
        g[e] = w + (size_t)e * 3 * H * I;
        u[e] = w + ((size_t)e * 3 + 1) * H * I;
        d[e] = w + ((size_t)e * 3 + 2) * H * I;
    }
    kt_moe_desc desc = KT_MOE_DESC_INIT;
    desc.method = KT_METHOD_BF16;
    desc.hidden = H;
    desc.intermediate = I;
    desc.n_experts = E;
    desc.top_k = K;
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
    lw.gate = g;
    lw.up = u;
    lw.down = d;
    kt_moe_options mo = KT_MOE_OPTIONS_INIT;
    mo.n_threads = 2;
    mo.act_precision = KT_MOE_PREC_BF16X2;
    kt_moe_backend *moe = NULL;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &desc, &lw, 1, &mo), KT_OK);

    float x[T * H], out[T * H], rw[T * K];
    int32_t ids[T * K] = {0, 1, 2, 3, 1, 3};
    for (int i = 0; i < T * H; i++)
        x[i] = (float)((i % 17) - 8) / 8.0f;
    for (int i = 0; i < T * K; i++)
        rw[i] = 0.5f;
    int32_t n_tok = T;
    kt_moe_io io = KT_MOE_IO_INIT;
    io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
    io.n_tokens = &n_tok;
    io.top_k = K;
    io.x = x;
    io.ids = ids;
    io.w = rw;
    io.out = out;

    float ref[T * H];
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
    memcpy(ref, out, sizeof ref);
    double f = 0, l = 0, e = 0;
    assert_false(kt__moe_task_stamps(moe, &f, &l, &e)); /* off until enabled */
    assert_int_equal(kt__moe_stamp_enable(moe), KT_OK);
    assert_int_equal(kt__moe_stamp_enable(moe), KT_OK); /* twice is fine */
    for (int round = 0; round < 3; round++) {
        hostfn h = {moe, &io, 0, 0, KT_OK};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, hostfn_thread, &h), 0);
        pthread_join(th, NULL);
        assert_int_equal(h.st, KT_OK);
        assert_true(kt__moe_task_stamps(moe, &f, &l, &e));
        /* submit <= first start <= last start <= last end <= the waiter's return */
        assert_true(h.t_submit <= f);
        assert_true(f <= l);
        assert_true(l <= e);
        assert_true(e <= h.t_done);
        /* the stamps change nothing computed */
        assert_memory_equal(ref, out, sizeof ref);
        memset(out, 0, sizeof out);
    }
    kt_moe_backend_free(moe);
    free(w);
    assert_int_equal(kt__moe_stamp_enable(NULL), KT_ERR_INVALID_ARG);
    assert_false(kt__moe_task_stamps(NULL, &f, &l, &e));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bind_spare),
        cmocka_unit_test(test_task_stamps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
