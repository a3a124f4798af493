/* Worker pool: every worker runs every job once, jobs run in order, barriers
 * separate phases, posting is bounded, pools partition the workers, a
 * waiter on a worker's CPU gets every job's end in each wait mode, and
 * kt__pool_call's caller runs the last share of its jobs between plain posts. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/threadpool.h"

typedef struct job_ctx {
    kt_pool *pool;
    int n;
    _Atomic int runs;
    int phase_a[64];
    int phase_b_ok[64];
    _Atomic int order_log[256];
    _Atomic int order_len;
    int id;
} job_ctx;

/* Phase A writes a slot per worker, barrier, phase B checks all slots. */
static void two_phase(void *arg, int tid)
{
    job_ctx *c = arg;
    atomic_fetch_add(&c->runs, 1);
    c->phase_a[tid] = c->id * 100 + tid;
    kt__pool_barrier(c->pool, tid);
    int ok = 1;
    for (int i = 0; i < c->n; i++)
        ok &= c->phase_a[i] == c->id * 100 + i;
    c->phase_b_ok[tid] = ok;
    kt__pool_barrier(c->pool, tid);
}

static void test_pool_runs_every_worker(void **state)
{
    (void)state;
    for (int n = 1; n <= 5; n++) {
        kt_pool_config cfg = {n, 0, n <= 2};
        kt_pool *pool = NULL;
        assert_int_equal(kt__pool_create(&pool, &cfg), KT_OK);
        assert_int_equal(kt__pool_n_threads(pool), n);
        job_ctx c;
        memset(&c, 0, sizeof c);
        c.pool = pool;
        c.n = n;
        for (int rep = 0; rep < 50; rep++) {
            c.id = rep + 1;
            kt__pool_run(pool, two_phase, &c);
            for (int i = 0; i < n; i++)
                assert_int_equal(c.phase_b_ok[i], 1);
        }
        assert_int_equal(atomic_load(&c.runs), 50 * n);
        kt__pool_free(pool);
    }
}

typedef struct seq_ctx {
    _Atomic int *log;
    _Atomic int *len;
    int value;
} seq_ctx;

static void log_job(void *arg, int tid)
{
    seq_ctx *s = arg;
    if (tid == 0) {
        int i = atomic_fetch_add(s->len, 1);
        atomic_store(&s->log[i], s->value);
    }
}

static _Atomic int gate_open;

/* Holds its worker until gate_open. */
static void gated_job(void *arg, int tid)
{
    (void)arg;
    (void)tid;
    while (!atomic_load(&gate_open))
        sched_yield();
}

static void test_pool_order_and_ring_limit(void **state)
{
    (void)state;
    kt_pool_config cfg = {3, 0, false};
    kt_pool *pool = NULL;
    assert_int_equal(kt__pool_create(&pool, &cfg), KT_OK);
    _Atomic int log[1000];
    _Atomic int len = 0;
    seq_ctx jobs[1000];
    int posted = 0;
    while (posted < 1000) {
        jobs[posted].log = log;
        jobs[posted].len = &len;
        jobs[posted].value = posted;
        if (kt__pool_post(pool, log_job, &jobs[posted])) {
            posted++;
        } else {
            /* the ring is full: exactly KT__POOL_RING pending */
            uint64_t pending = kt__pool_posted(pool) - kt__pool_done(pool);
            assert_true(pending <= KT__POOL_RING);
            kt__pool_wait(pool, kt__pool_done(pool) + 1);
        }
    }
    kt__pool_wait(pool, kt__pool_posted(pool));
    assert_int_equal(atomic_load(&len), 1000);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(atomic_load(&log[i]), i);
    kt__pool_free(pool);
}

static void test_pool_partition(void **state)
{
    (void)state;
    kt_pool_config cfg = {5, 2, false};
    kt_pool *pool = NULL;
    assert_int_equal(kt__pool_create(&pool, &cfg), KT_OK);
    assert_int_equal(kt__pool_n_pools(pool), 2);
    int total = 0;
    for (int p = 0; p < 2; p++) {
        assert_true(kt__pool_count(pool, p) >= 2);
        for (int t = kt__pool_first(pool, p); t < kt__pool_first(pool, p) + kt__pool_count(pool, p);
             t++)
            assert_int_equal(kt__pool_pool_of(pool, t), p);
        total += kt__pool_count(pool, p);
    }
    assert_int_equal(total, 5);
    kt__pool_free(pool);
    /* default threads: physical cores, at least one */
    kt_pool_config def = {0, 0, true};
    assert_int_equal(kt__pool_create(&pool, &def), KT_OK);
    assert_true(kt__pool_n_threads(pool) >= 1);
    assert_true(kt__pool_n_pools(pool) >= 1);
    kt__pool_free(pool);
    kt__pool_free(NULL);
}

static void record_cpu(void *arg, int tid)
{
    if (tid == 0)
        *(int *)arg = sched_getcpu();
}

/* KT_POOL_WAIT spin / sleep / auto (the default), the waiting thread moved
 * onto worker 0's CPU (auto's case for sleeping at once: a caller that shares
 * a worker's core, as kt-bench's on the Xeon): posts and waits 300 two-phase
 * jobs and checks each one ran fully on every worker before its wait returned. */
static void test_pool_wait_on_worker_cpu(void **state)
{
    (void)state;
    static const char *modes[] = {"spin", "sleep", NULL};
    cpu_set_t before;
    assert_int_equal(sched_getaffinity(0, sizeof before, &before), 0);
    for (int m = 0; m < 3; m++) {
        if (modes[m])
            setenv("KT_POOL_WAIT", modes[m], 1);
        kt_pool_config cfg = {2, 0, true};
        kt_pool *pool = NULL;
        assert_int_equal(kt__pool_create(&pool, &cfg), KT_OK);
        unsetenv("KT_POOL_WAIT");
        int cpu = -1;
        kt__pool_run(pool, record_cpu, &cpu);
        cpu_set_t one;
        CPU_ZERO(&one);
        if (cpu >= 0 && cpu < CPU_SETSIZE) /* unpinned (no topology): any CPU will do */
            CPU_SET(cpu, &one);
        bool moved = cpu >= 0 && sched_setaffinity(0, sizeof one, &one) == 0;
        job_ctx c;
        memset(&c, 0, sizeof c);
        c.pool = pool;
        c.n = 2;
        for (int rep = 0; rep < 300; rep++) {
            c.id = rep + 1;
            c.phase_b_ok[0] = c.phase_b_ok[1] = 0;
            assert_true(kt__pool_post(pool, two_phase, &c));
            kt__pool_wait(pool, kt__pool_posted(pool));
            assert_int_equal(atomic_load(&c.runs), 2 * (rep + 1));
            assert_true(c.phase_b_ok[0] && c.phase_b_ok[1]);
        }
        assert_int_equal(sched_setaffinity(0, sizeof before, &before), 0);
        printf("  KT_POOL_WAIT=%s: 300 jobs, the waiter %s worker 0's CPU %d\n",
               modes[m] ? modes[m] : "(auto)", moved ? "on" : "not moved to", cpu);
        kt__pool_free(pool);
    }
}

/* Two-phase job that also records which thread ran the last share. */
typedef struct call_ctx {
    job_ctx c;
    pthread_t last_by;
} call_ctx;

static void two_phase_last(void *arg, int tid)
{
    call_ctx *cc = arg;
    if (tid == cc->c.n - 1)
        cc->last_by = pthread_self();
    two_phase(&cc->c, tid);
}

/* kt__pool_call between plain posts, 1-4 pinned workers: every share runs
 * once, barriers hold, the caller runs the last share where it may run on that
 * worker's CPU (else a worker does); also with the caller on worker 0's CPU
 * alone (a plain post and wait) and on a full ring (false, nothing queued). */
static void test_pool_call(void **state)
{
    (void)state;
    cpu_set_t before;
    assert_int_equal(sched_getaffinity(0, sizeof before, &before), 0);
    for (int n = 1; n <= 4; n++) {
        kt_pool_config cfg = {n, 0, true};
        kt_pool *pool = NULL;
        assert_int_equal(kt__pool_create(&pool, &cfg), KT_OK);
        int cpu0 = -1, by_caller = 0;
        kt__pool_run(pool, record_cpu, &cpu0);
        for (int pinned = 0; pinned < 2; pinned++) {
            cpu_set_t one;
            CPU_ZERO(&one);
            if (cpu0 >= 0 && cpu0 < CPU_SETSIZE)
                CPU_SET(cpu0, &one);
            if (pinned && (cpu0 < 0 || sched_setaffinity(0, sizeof one, &one) != 0))
                continue;
            static call_ctx cc[4];
            memset(cc, 0, sizeof cc);
            int plain_runs = 0;
            for (int rep = 0; rep < 200; rep++) {
                /* 0-2 plain jobs queued ahead of the call (ids of their own) */
                for (int q = 0; q < rep % 3; q++) {
                    call_ctx *pc = &cc[1 + q];
                    pc->c.pool = pool;
                    pc->c.n = n;
                    pc->c.id = 1000 + rep;
                    assert_true(kt__pool_post(pool, two_phase_last, pc));
                    plain_runs++;
                }
                cc[0].c.pool = pool;
                cc[0].c.n = n;
                cc[0].c.id = rep + 1;
                for (int i = 0; i < n; i++)
                    cc[0].c.phase_b_ok[i] = 0;
                assert_true(kt__pool_call(pool, two_phase_last, &cc[0]));
                assert_int_equal(atomic_load(&cc[0].c.runs), n * (rep + 1));
                for (int i = 0; i < n; i++)
                    assert_int_equal(cc[0].c.phase_b_ok[i], 1);
                /* the call returns after its job, so after the ones before it */
                assert_true(kt__pool_done(pool) == kt__pool_posted(pool));
                bool mine = pthread_equal(cc[0].last_by, pthread_self()) != 0;
                if (pinned && n > 1)
                    assert_false(mine);
                if (!pinned)
                    by_caller += mine;
            }
            assert_int_equal(atomic_load(&cc[1].c.runs) + atomic_load(&cc[2].c.runs),
                             n * plain_runs);
            assert_int_equal(sched_setaffinity(0, sizeof before, &before), 0);
        }
        /* a full ring (the first job holds every worker): the call queues nothing */
        atomic_store(&gate_open, 0);
        for (int q = 0; q < KT__POOL_RING; q++)
            assert_true(kt__pool_post(pool, gated_job, NULL));
        uint64_t posted = kt__pool_posted(pool);
        assert_false(kt__pool_call(pool, gated_job, NULL));
        assert_true(kt__pool_posted(pool) == posted);
        atomic_store(&gate_open, 1);
        kt__pool_wait(pool, kt__pool_posted(pool));
        printf("  kt__pool_call: %d workers, 200 calls among plain posts (the caller free: it ran "
               "%d last shares; on worker 0's CPU %d alone: none)\n", n, by_caller, cpu0);
        kt__pool_free(pool);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_worker),
        cmocka_unit_test(test_pool_order_and_ring_limit),
        cmocka_unit_test(test_pool_partition),
        cmocka_unit_test(test_pool_wait_on_worker_cpu),
        cmocka_unit_test(test_pool_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
