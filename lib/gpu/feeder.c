/* The hybrid decode's feeder (lib/gpu/feeder.h): a thread, or gate jobs. */
#define _GNU_SOURCE
#include "gpu/feeder.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "core/threadpool.h"
#include "kt/moe.h"
#include "kt_internal.h"

/* gated: layers queued ahead, three jobs each (gate, experts, done), within
 * the pool's ring of KT__POOL_RING jobs (a done job queues the layer this many
 * after its own while it still counts as pending itself) */
#define GATE_WINDOW 4
_Static_assert(3 * GATE_WINDOW + 1 <= KT__POOL_RING && 3 * GATE_WINDOW + 1 <= KT_MOE_QUEUE_DEPTH,
               "a done job and the layers queued ahead fit the pool's ring");

typedef struct layer_job {
    struct kt__feeder *f;
    int32_t i;                /* index into cfg.layers */
} layer_job;

struct kt__feeder {
    kt__feeder_config cfg;
    /* thread mode */
    pthread_t thread;
    bool threaded;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint32_t req;     /* the step asked for (its number) */
    _Atomic uint32_t ack;     /* the last step served or given up */
    _Atomic int stop;
    _Atomic int sleeping;
    _Atomic int ready;        /* 1: bound and running; -1: no spare CPU, exited */
    /* both */
    _Atomic int abort;        /* stop waiting for this step's go words */
    _Atomic int cut;          /* this step was cut short */
    /* gated */
    uint32_t seq;             /* the step being served */
    _Atomic int32_t served;   /* its layers whose done word was written */
    layer_job *jobs;          /* [n_layers] */
    double *t_open;           /* [n_layers]: when the gate opened */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Spins until *word == seq; false when the step is aborted first. Yields now
 * and then, so that a machine shared with other work still moves. */
static bool await_word(kt__feeder *f, volatile uint32_t *word, uint32_t seq)
{
    for (unsigned i = 1;; i++) {
        if (__atomic_load_n((uint32_t *)word, __ATOMIC_ACQUIRE) == seq)
            return true;
        if (i % 256 == 0 && (atomic_load(&f->abort) || atomic_load(&f->stop)))
            return false;
        if (i % 16384 == 0)
            sched_yield();
        else
            kt__cpu_relax();
    }
}

static void put_done(kt__feeder *f, int32_t i, uint32_t seq)
{
    __atomic_store_n((uint32_t *)&f->cfg.done[f->cfg.layers[i]], seq, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- thread --- */

/* The next step's number, or 0 when stopping: spins for the idle window
 * (steps of a decode follow each other within microseconds), then sleeps. */
static uint32_t next_step(kt__feeder *f, uint32_t last)
{
    double t0 = now_s();
    for (unsigned i = 1;; i++) {
        uint32_t r = atomic_load(&f->req);
        if (r != last)
            return r;
        if (atomic_load(&f->stop))
            return 0;
        if (i % 1024 || now_s() - t0 < f->cfg.idle_spin_s) {
            kt__cpu_relax();
            continue;
        }
        pthread_mutex_lock(&f->mu);
        atomic_store(&f->sleeping, 1); /* then req is read: kt__feeder_step's order reversed */
        while (atomic_load(&f->req) == last && !atomic_load(&f->stop))
            pthread_cond_wait(&f->cv, &f->mu);
        atomic_store(&f->sleeping, 0);
        pthread_mutex_unlock(&f->mu);
        t0 = now_s();
    }
}

static void *feeder_main(void *arg)
{
    kt__feeder *f = arg;
    if (f->cfg.bind_spare && (kt__pool_spare_cpus(f->cfg.pool) <= 0 ||
                              kt__pool_bind_spare(f->cfg.pool) <= 0)) {
        atomic_store(&f->ready, -1);
        return NULL;
    }
    atomic_store(&f->ready, 1);
    uint32_t last = 0, seq;
    while ((seq = next_step(f, last)) != 0) {
        int cut = 0;
        for (int32_t i = 0; i < f->cfg.n_layers; i++) {
            int32_t l = f->cfg.layers[i];
            if (!await_word(f, &f->cfg.go[l], seq)) {
                cut = 1;
                break;
            }
            double t_open = now_s();
            if (!f->cfg.submit(f->cfg.arg, l))
                cut = 1;
            else
                kt__feeder_wait_pool(f->cfg.pool);
            put_done(f, i, seq);
            if (f->cfg.served)
                f->cfg.served(f->cfg.arg, l, t_open);
        }
        atomic_store(&f->cut, cut);
        atomic_store(&f->ack, seq);
        last = seq;
    }
    return NULL;
}

/* ----------------------------------------------------------------- gated --- */

static bool queue_layer(kt__feeder *f, int32_t i);

/* After a failed queue: every later layer released at once (the stream goes
 * on and the step reports the error), nothing more queued. */
static void release_from(kt__feeder *f, int32_t i)
{
    atomic_store(&f->cut, 1);
    for (; i < f->cfg.n_layers; i++)
        put_done(f, i, f->seq);
}

/* every worker: wait until the stream handed this layer over */
static void gate_job(void *ctx, int tid)
{
    layer_job *j = ctx;
    kt__feeder *f = j->f;
    if (await_word(f, &f->cfg.go[f->cfg.layers[j->i]], f->seq) && tid == 0)
        f->t_open[j->i] = now_s();
}

/* the first worker, after the experts: done, then a later layer queued */
static void done_job(void *ctx, int tid)
{
    layer_job *j = ctx;
    kt__feeder *f = j->f;
    if (tid != 0 || atomic_load(&f->abort))
        return;
    int32_t l = f->cfg.layers[j->i];
    put_done(f, j->i, f->seq);
    atomic_fetch_add(&f->served, 1);
    if (f->cfg.served)
        f->cfg.served(f->cfg.arg, l, f->t_open[j->i]);
    int32_t next = j->i + GATE_WINDOW;
    if (next < f->cfg.n_layers && !atomic_load(&f->cut) && !queue_layer(f, next))
        release_from(f, next);
}

static bool queue_layer(kt__feeder *f, int32_t i)
{
    layer_job *j = &f->jobs[i];
    return kt__pool_post(f->cfg.pool, gate_job, j) &&
           f->cfg.submit(f->cfg.arg, f->cfg.layers[i]) &&
           kt__pool_post(f->cfg.pool, done_job, j);
}

/* ------------------------------------------------------------------- API --- */

kt_status kt__feeder_start(kt__feeder **out, const kt__feeder_config *cfg)
{
    *out = NULL;
    if (!cfg || !cfg->submit || !cfg->go || !cfg->done || !cfg->pool || cfg->n_layers < 0 ||
        (cfg->n_layers > 0 && !cfg->layers))
        return kt__error(KT_ERR_INVALID_ARG, "GPU runtime feeder: incomplete configuration");
    kt__feeder *f = kt__calloc(1, sizeof *f);
    if (!f)
        return KT_ERR_NOMEM;
    f->cfg = *cfg;
    if (cfg->gated) {
        f->jobs = kt__calloc((size_t)cfg->n_layers + 1, sizeof *f->jobs);
        f->t_open = kt__calloc((size_t)cfg->n_layers + 1, sizeof *f->t_open);
        if (!f->jobs || !f->t_open) {
            kt__feeder_free(f);
            return KT_ERR_NOMEM;
        }
        for (int32_t i = 0; i < cfg->n_layers; i++)
            f->jobs[i] = (layer_job){f, i};
        *out = f;
        return KT_OK;
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, feeder_main, f) != 0) {
        kt__feeder_free(f);
        return kt__error(KT_ERR_IO, "GPU runtime feeder: cannot start a thread");
    }
    f->threaded = true;
    while (!atomic_load(&f->ready))
        sched_yield();
    if (atomic_load(&f->ready) < 0) {
        kt__feeder_free(f);
        return kt__error(KT_ERR_UNSUPPORTED, "GPU runtime feeder: no CPU outside the MoE "
                         "workers' to spin on");
    }
    *out = f;
    return KT_OK;
}

bool kt__feeder_step(kt__feeder *f, uint32_t seq)
{
    if (!f->cfg.gated) {
        atomic_store(&f->req, seq);
        if (atomic_load(&f->sleeping)) {
            pthread_mutex_lock(&f->mu);
            pthread_cond_signal(&f->cv);
            pthread_mutex_unlock(&f->mu);
        }
        return true;
    }
    f->seq = seq;
    atomic_store(&f->cut, 0);
    atomic_store(&f->served, 0);
    for (int32_t i = 0; i < f->cfg.n_layers && i < GATE_WINDOW; i++)
        if (!queue_layer(f, i)) {
            release_from(f, i);
            return false;
        }
    return true;
}

bool kt__feeder_finish(kt__feeder *f, bool abort)
{
    if (abort)
        atomic_store(&f->abort, 1);
    if (f->cfg.gated) {
        /* done jobs queue more while they run: drained once nothing new came */
        for (;;) {
            uint64_t posted = kt__pool_posted(f->cfg.pool);
            kt__pool_wait(f->cfg.pool, posted);
            if (kt__pool_posted(f->cfg.pool) == posted)
                break;
        }
        if (atomic_load(&f->served) < f->cfg.n_layers)
            atomic_store(&f->cut, 1);
    } else {
        /* normally done already: the stream waited for the last layer's done word */
        uint32_t want = atomic_load(&f->req);
        for (unsigned i = 1; atomic_load(&f->ack) != want; i++) {
            if (i % 1024 == 0)
                sched_yield();
            else
                kt__cpu_relax();
        }
    }
    atomic_store(&f->abort, 0);
    return !atomic_load(&f->cut);
}

void kt__feeder_free(kt__feeder *f)
{
    if (!f)
        return;
    if (f->threaded) {
        pthread_mutex_lock(&f->mu);
        atomic_store(&f->stop, 1);
        pthread_cond_signal(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
    }
    if (!f->cfg.gated) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
    }
    kt__free(f->jobs);
    kt__free(f->t_open);
    kt__free(f);
}

void kt__feeder_wait_pool(struct kt_pool *pool)
{
    while (kt__pool_done(pool) < kt__pool_posted(pool))
        kt__cpu_relax();
}
