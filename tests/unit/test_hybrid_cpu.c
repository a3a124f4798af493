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
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/threadpool.h"
#include "kt/kt.h"
#include "gpu/feeder.h"
#include "gpu/moves.h"
#include "moe/moe_internal.h"
#include "test_moe_common.h"

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
    /* the OS may narrow hwloc's allowed set further (offline CPUs), never widen it */
    assert_true(CPU_COUNT(&b.after) >= 1 && CPU_COUNT(&b.after) <= b.bound);
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

/* One BF16 layer (activations of precision prec, 2 threads) over n_experts experts whose
 * gate, up and down [H*I] lie one after another in w; w stays borrowed. */
static kt_moe_backend *bf16_backend_at(const uint16_t *w, int n_experts, int top_k, int32_t prec)
{
    const void *g[16], *u[16], *d[16];
    assert_true(n_experts <= 16);
    for (int e = 0; e < n_experts; e++) {
        g[e] = w + (size_t)e * 3 * H * I;
        u[e] = w + ((size_t)e * 3 + 1) * H * I;
        d[e] = w + ((size_t)e * 3 + 2) * H * I;
    }
    kt_moe_desc desc = tst_moe_desc(KT_METHOD_BF16, H, I, n_experts, top_k);
    kt_moe_layer_weights lw = KT_MOE_LAYER_WEIGHTS_INIT;
    lw.gate = g;
    lw.up = u;
    lw.down = d;
    kt_moe_options mo = KT_MOE_OPTIONS_INIT;
    mo.n_threads = 2;
    mo.act_precision = prec;
    kt_moe_backend *moe = NULL;
    assert_int_equal(kt_moe_backend_create(&moe, NULL, &desc, &lw, 1, &mo), KT_OK);
    return moe;
}

/* The same with BF16X2 activations (the engine's default) */
static kt_moe_backend *bf16_backend(const uint16_t *w, int n_experts, int top_k)
{
    return bf16_backend_at(w, n_experts, top_k, KT_MOE_PREC_BF16X2);
}

/* E experts' gate, up, down [H*I] one after another, BF16 about 0.008 .. 0.016;
 * free() them */
static uint16_t *test_weights(void)
{
    uint16_t *w = calloc((size_t)E * 3 * H * I, sizeof(uint16_t));
    assert_non_null(w);
    for (size_t i = 0; i < (size_t)E * 3 * H * I; i++)
        w[i] = (uint16_t)(0x3c00 + (i * 7919 % 256));
    return w;
}

static void test_task_stamps(void **state)
{
    (void)state;
    uint16_t *w = test_weights();
    kt_moe_backend *moe = bf16_backend(w, E, K);

    float x[T * H], out[T * H], rw[T * K];
    int32_t ids[T * K] = {0, 1, 2, 3, 1, 3};
    for (int i = 0; i < T * H; i++)
        x[i] = (float)((i % 17) - 8) / 8.0f;
    for (int i = 0; i < T * K; i++)
        rw[i] = 0.5f;
    int32_t n_tok = T;
    kt_moe_io io = tst_moe_io_f32(&n_tok, K, x, ids, rw, out);

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

/* ---- one-token calls on another kernel set (KT_GPU_DECODE_ACT=bf16) ------------- */

/* out = the backend's forward of n tokens of x (ids, rw: K a token) */
static void forward_n(kt_moe_backend *moe, int32_t n, const float *x, const int32_t *ids,
                      const float *rw, float *out)
{
    kt_moe_io io = tst_moe_io_f32(&n, K, x, ids, rw, out);
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
}

/* kt__moe_set_decode_precision: a BF16X2 backend's one-token calls give what a
 * BF16-activation backend of the same weights gives, bit for bit, its calls of
 * more tokens stay its own, and setting BF16X2 back restores its one-token
 * results; bad arguments change nothing; a BF16 backend taking BF16X2 for one
 * token (wider rows: its workspaces grow) gives the BF16X2 backend's. */
static void test_decode_precision(void **state)
{
    (void)state;
    uint16_t *w = test_weights();
    kt_moe_backend *x2 = bf16_backend(w, E, K);
    kt_moe_backend *b16 = bf16_backend_at(w, E, K, KT_MOE_PREC_DEFAULT);
    /* activations BF16 cannot hold exactly, so that the two formats differ */
    float x[T * H], rw[T * K], one_x2[H], one_b16[H], three_x2[T * H], out[T * H];
    int32_t ids[T * K] = {0, 1, 2, 3, 1, 3};
    for (int i = 0; i < T * H; i++)
        x[i] = sinf(0.37f * (float)i) * 1.01f;
    for (int i = 0; i < T * K; i++)
        rw[i] = 0.5f;
    forward_n(x2, 1, x, ids, rw, one_x2);
    forward_n(x2, T, x, ids, rw, three_x2);
    forward_n(b16, 1, x, ids, rw, one_b16);
    float diff = 0.0f;
    for (int i = 0; i < H; i++)
        diff = fmaxf(diff, fabsf(one_x2[i] - one_b16[i]));
    print_message("  one token: BF16X2 vs BF16 activations max|diff| %.3g\n", diff);

    assert_int_equal(kt__moe_set_decode_precision(x2, KT_MOE_PREC_DEFAULT), KT_OK);
    forward_n(x2, 1, x, ids, rw, out);
    assert_memory_equal(out, one_b16, sizeof one_b16);
    forward_n(x2, T, x, ids, rw, out);
    assert_memory_equal(out, three_x2, sizeof three_x2);

    assert_int_equal(kt__moe_set_decode_precision(x2, 7), KT_ERR_INVALID_ARG);
    assert_int_equal(kt__moe_set_decode_precision(NULL, KT_MOE_PREC_DEFAULT),
                     KT_ERR_INVALID_ARG);
    assert_int_equal(kt__moe_set_decode_precision(x2, KT_MOE_PREC_BF16X2), KT_OK);
    forward_n(x2, 1, x, ids, rw, out);
    assert_memory_equal(out, one_x2, sizeof one_x2);
    /* the creation's own precision: nothing to change */
    assert_int_equal(kt__moe_set_decode_precision(b16, KT_MOE_PREC_DEFAULT), KT_OK);
    forward_n(b16, 1, x, ids, rw, out);
    assert_memory_equal(out, one_b16, sizeof one_b16);
    /* the other way round: BF16X2's rows are wider than the BF16 backend's
     * workspaces were made for, so they grow; its calls of more tokens keep
     * their results on the wider rows */
    float three_b16[T * H];
    forward_n(b16, T, x, ids, rw, three_b16);
    assert_int_equal(kt__moe_set_decode_precision(b16, KT_MOE_PREC_BF16X2), KT_OK);
    forward_n(b16, 1, x, ids, rw, out);
    assert_memory_equal(out, one_x2, sizeof one_x2);
    forward_n(b16, T, x, ids, rw, out);
    assert_memory_equal(out, three_b16, sizeof three_b16);
    kt_moe_backend_free(x2);
    kt_moe_backend_free(b16);
    free(w);
}

/* ---- the decode's feeder: flags instead of host functions ------------------------ */

enum { FL = 6 }; /* layers a step (more than the window queued ahead), all on the one layer */

typedef struct feed_case {
    kt_moe_backend *moe;
    float x[FL][H], out[FL][H], ref[FL][H], rw[K];
    int32_t ids[K], n_tok;
    _Atomic int served;
    bool fail_at_4;   /* the submit of the fifth layer fails */
} feed_case;

/* The runtime's submit: the layer's experts queued, no wait (on a worker
 * inside a job, or on the driving thread for the first layers). */
static bool feed_submit(void *arg, int32_t layer)
{
    feed_case *c = arg;
    if (c->fail_at_4 && layer == 4)
        return false;
    kt_moe_io io = tst_moe_io_f32(&c->n_tok, K, c->x[layer], c->ids, c->rw, c->out[layer]);
    return kt_moe_submit(c->moe, 0, &io) == KT_OK;
}

static void feed_served(void *arg, int32_t layer, double t_open)
{
    feed_case *c = arg;
    (void)layer;
    assert_true(t_open > 0);
    atomic_fetch_add(&c->served, 1);
}

static void spin_until(volatile uint32_t *word, uint32_t want)
{
    while (__atomic_load_n((uint32_t *)word, __ATOMIC_ACQUIRE) != want)
        sched_yield();
}

/* The stream's part of one step, played by this thread: each layer's rows (a
 * different input each layer and step, written before the step: the pool is
 * busy with the step's jobs from then on), its go word, then its done word;
 * the answer equals the backend's own forward of those rows (checked for the
 * first `checked` layers). Layers from `layers` on are never handed over (a
 * step the stream gave up). */
static void feed_step(feed_case *c, kt__feeder *f, uint32_t *go, uint32_t *done, uint32_t seq,
                      int32_t layers, int32_t checked)
{
    for (int32_t l = 0; l < FL; l++) {
        for (int i = 0; i < H; i++)
            c->x[l][i] = (float)((int)((i + 5 * l + 3 * seq) % 19) - 9) / 9.0f;
        kt_moe_io io = tst_moe_io_f32(&c->n_tok, K, c->x[l], c->ids, c->rw, c->ref[l]);
        assert_int_equal(kt_moe_forward(c->moe, 0, &io), KT_OK);
        memset(c->out[l], 0, sizeof c->out[l]);
    }
    assert_true(kt__feeder_step(f, seq));
    for (int32_t l = 0; l < layers; l++) {
        __atomic_store_n(&go[l], seq, __ATOMIC_RELEASE);
        spin_until(&done[l], seq);
        if (l < checked)
            assert_memory_equal(c->out[l], c->ref[l], sizeof c->ref[l]);
    }
}

static void test_feeder(void **state)
{
    (void)state;
    uint16_t *w = test_weights();
    feed_case *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->moe = bf16_backend(w, E, K);
    c->n_tok = 1;
    c->ids[0] = 1, c->ids[1] = 3, c->rw[0] = 0.75f, c->rw[1] = 0.25f;
    uint32_t go[FL] = {0}, done[FL] = {0};
    int32_t layers[FL] = {0, 1, 2, 3, 4, 5};
    kt__feeder_config fc = {layers, FL, go, done, kt__moe_backend_pool(c->moe), feed_submit,
                            feed_served, c};
    kt__feeder *f = NULL;
    assert_int_equal(kt__feeder_start(&f, &fc), KT_OK);
    /* back-to-back steps (the workers spinning), then after a pause (asleep) */
    uint32_t seq = 1;
    for (; seq <= 4; seq++) {
        feed_step(c, f, go, done, seq, FL, FL);
        assert_true(kt__feeder_finish(f, false));
    }
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    feed_step(c, f, go, done, seq, FL, FL);
    assert_true(kt__feeder_finish(f, false));
    assert_int_equal(atomic_load(&c->served), 5 * FL);
    /* a step the stream gave up after two layers: the gates stop waiting, the
     * queued layers run unread; the next step's number never matches the
     * stale words */
    seq++;
    feed_step(c, f, go, done, seq, 2, 2);
    assert_false(kt__feeder_finish(f, true));
    assert_int_equal(atomic_load(&c->served), 5 * FL + 2);
    seq++;
    feed_step(c, f, go, done, seq, FL, FL);
    assert_true(kt__feeder_finish(f, false));
    assert_int_equal(atomic_load(&c->served), 6 * FL + 2);
    /* a layer that cannot be queued (the fifth, by a done job): it and the
     * layers after it are released at once, so the stream never waits; the
     * step reports the cut */
    c->fail_at_4 = true;
    seq++;
    feed_step(c, f, go, done, seq, FL, 4);
    assert_false(kt__feeder_finish(f, false));
    c->fail_at_4 = false;
    seq++;
    feed_step(c, f, go, done, seq, FL, FL);
    assert_true(kt__feeder_finish(f, false));
    kt__feeder_free(f);
    kt__feeder_free(NULL);
    fc.submit = NULL;
    assert_int_equal(kt__feeder_start(&f, &fc), KT_ERR_INVALID_ARG);
    kt_moe_backend_free(c->moe);
    free(c);
    free(w);
}

/* ---- dynamic expert moves: bookkeeping ------------------------------------------ */

static void check_consistent(const kt__moves_layer *m)
{
    const uint8_t *mask = kt__moves_mask(m);
    int on = 0;
    for (int32_t e = 0; e < m->E; e++) {
        assert_int_equal(mask[e], m->slot_of[e] >= 0);
        if (m->slot_of[e] >= 0) {
            on++;
            assert_int_equal(m->expert_at[m->slot_of[e]], e);
        }
    }
    assert_int_equal(on, m->n_slots);
    assert_int_equal(mask[m->E], 1);
}

static void test_moves_bookkeeping(void **state)
{
    (void)state;
    kt__moves_layer m;
    assert_int_equal(kt__moves_init(&m, 8, 9), KT_ERR_INVALID_ARG);
    kt__moves_free(&m);
    assert_int_equal(kt__moves_init(&m, 8, 4), KT_OK);
    check_consistent(&m);
    const uint8_t *before = kt__moves_mask(&m);
    uint8_t snap[9];
    memcpy(snap, before, sizeof snap);
    int32_t slots[4];
    /* bad batches change nothing */
    kt_expert_move bad[][2] = {
        {{0, 1, 5, 0, 0}, {0, 6, 2, 0, 0}},  /* 1 is on the GPU already */
        {{0, 5, 6, 0, 0}, {0, 7, 2, 0, 0}},  /* 6 is not on the GPU */
        {{0, 5, 8, 0, 0}, {0, 7, 2, 0, 0}},  /* 8 >= E */
        {{0, 5, 1, 0, 0}, {0, 5, 2, 0, 0}},  /* 5 twice */
        {{0, 5, 1, 0, 0}, {0, 6, 1, 0, 0}},  /* 1 twice */
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        assert_int_equal(kt__moves_check(&m, bad[b], 2, slots), KT_ERR_INVALID_ARG);
        assert_ptr_equal(kt__moves_mask(&m), before);
        assert_memory_equal(kt__moves_mask(&m), snap, sizeof snap);
    }
    /* a good batch: checked, then published as one new mask */
    kt_expert_move good[2] = {{0, 5, 1, 0, 0}, {0, 7, 3, 0, 0}};
    assert_int_equal(kt__moves_check(&m, good, 2, slots), KT_OK);
    assert_int_equal(slots[0], 1);
    assert_int_equal(slots[1], 3);
    assert_memory_equal(kt__moves_mask(&m), snap, sizeof snap); /* nothing yet */
    const uint8_t *after = kt__moves_commit(&m, good, 2, slots);
    assert_ptr_not_equal(after, before);
    assert_ptr_equal(kt__moves_mask(&m), after);
    const uint8_t want[9] = {1, 0, 1, 0, 0, 1, 0, 1, 1};
    assert_memory_equal(after, want, sizeof want);
    /* a task still holding the old pointer reads the whole old mask */
    assert_memory_equal(before, snap, sizeof snap);
    check_consistent(&m);
    assert_int_equal(m.slot_of[5], 1);
    assert_int_equal(m.slot_of[7], 3);
    assert_int_equal(m.slot_of[1], -1);
    /* random batches keep every invariant */
    uint64_t s = 99;
    for (int it = 0; it < 500; it++) {
        kt_expert_move mv[3];
        size_t n = 0;
        for (int j = 0; j < 3; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t in = (uint32_t)(s >> 33) % 8, out = (uint32_t)(s >> 45) % 8;
            mv[n++] = (kt_expert_move){0, in, out, 0, 0};
        }
        const uint8_t *live = kt__moves_mask(&m);
        memcpy(snap, live, sizeof snap);
        if (kt__moves_check(&m, mv, n, slots) == KT_OK) {
            const uint8_t *next = kt__moves_commit(&m, mv, n, slots);
            assert_ptr_not_equal(next, live);
            for (size_t j = 0; j < n; j++) {
                assert_int_equal(next[mv[j].expert_in], 1);
                assert_int_equal(next[mv[j].expert_out], 0);
            }
        } else {
            assert_ptr_equal(kt__moves_mask(&m), live);
            assert_memory_equal(live, snap, sizeof snap);
        }
        check_consistent(&m);
    }
    kt__moves_free(&m);
}

/* The CPU backend under a committed mask computes exactly the experts the
 * mask leaves it: its part plus the complement's part is the whole layer. */
static void test_moves_mask_backend(void **state)
{
    (void)state;
    enum { ME = 8, MK = 4, MT = 5 };
    uint16_t *w = calloc((size_t)ME * 3 * H * I, sizeof(uint16_t));
    assert_non_null(w);
    uint64_t s = 7;
    for (size_t i = 0; i < (size_t)ME * 3 * H * I; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (uint16_t)(((s >> 40) & 0x8000) | (0x3c00 + ((s >> 33) & 0xff)));
    }
    kt_moe_backend *moe = bf16_backend(w, ME, MK);
    float x[MT * H], full[MT * H], part[MT * H], rest[MT * H], rw[MT * MK];
    int32_t ids[MT * MK];
    for (int i = 0; i < MT * H; i++)
        x[i] = (float)((i * 37 % 23) - 11) / 11.0f;
    for (int t = 0; t < MT; t++)
        for (int j = 0; j < MK; j++) {
            ids[t * MK + j] = (t + 3 * j) % ME;
            rw[t * MK + j] = 0.1f * (float)(j + 1);
        }
    int32_t n_tok = MT;
    kt_moe_io io = tst_moe_io_f32(&n_tok, MK, x, ids, rw, full);
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);

    kt__moves_layer m;
    assert_int_equal(kt__moves_init(&m, ME, 3), KT_OK);
    kt_expert_move mv[2] = {{0, 6, 0, 0, 0}, {0, 4, 2, 0, 0}};
    int32_t slots[2];
    assert_int_equal(kt__moves_check(&m, mv, 2, slots), KT_OK);
    const uint8_t *mask = kt__moves_commit(&m, mv, 2, slots); /* GPU: 1, 4, 6 */
    assert_int_equal(kt_moe_set_expert_mask(moe, 0, mask), KT_OK);
    io.out = part;
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
    uint8_t comp[ME + 1];
    for (int e = 0; e < ME; e++)
        comp[e] = !mask[e];
    comp[ME] = 1;
    assert_int_equal(kt_moe_set_expert_mask(moe, 0, comp), KT_OK);
    io.out = rest;
    assert_int_equal(kt_moe_forward(moe, 0, &io), KT_OK);
    float amax = 0;
    for (int i = 0; i < MT * H; i++)
        amax = fabsf(full[i]) > amax ? fabsf(full[i]) : amax;
    assert_true(amax > 0);
    for (int i = 0; i < MT * H; i++)
        assert_true(fabsf(part[i] + rest[i] - full[i]) <= 1e-5f * amax);
    /* and the part differs from the whole (the mask did skip experts) */
    float diff = 0;
    for (int i = 0; i < MT * H; i++)
        diff = fmaxf(diff, fabsf(part[i] - full[i]));
    assert_true(diff > 1e-3f * amax);
    kt_moe_set_expert_mask(moe, 0, NULL);
    kt_moe_backend_free(moe);
    kt__moves_free(&m);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bind_spare),
        cmocka_unit_test(test_task_stamps),
        cmocka_unit_test(test_decode_precision),
        cmocka_unit_test(test_feeder),
        cmocka_unit_test(test_moves_bookkeeping),
        cmocka_unit_test(test_moves_mask_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
