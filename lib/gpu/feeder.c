/* The hybrid decode's feeder (lib/gpu/feeder.h): gate jobs on the MoE pool. */
#define _GNU_SOURCE
#include "gpu/feeder.h"

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "core/threadpool.h"
#include "kt/moe.h"
#include "kt_internal.h"

/* layers queued ahead, three jobs each (gate, experts, done), within the
 * pool's ring of KT__POOL_RING jobs (a done job queues the layer this many
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
    uint32_t seq;             /* the step being served */
    _Atomic int abort;        /* stop waiting for this step's go words */
    _Atomic int cut;          /* this step was cut short */
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
        if (i % 256 == 0 && atomic_load(&f->abort))
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

bool kt__feeder_step(kt__feeder *f, uint32_t seq)
{
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
    /* done jobs queue more while they run: drained once nothing new came */
    for (;;) {
        uint64_t posted = kt__pool_posted(f->cfg.pool);
        kt__pool_wait(f->cfg.pool, posted);
        if (kt__pool_posted(f->cfg.pool) == posted)
            break;
    }
    if (atomic_load(&f->served) < f->cfg.n_layers)
        atomic_store(&f->cut, 1);
    atomic_store(&f->abort, 0);
    return !atomic_load(&f->cut);
}

void kt__feeder_free(kt__feeder *f)
{
    if (!f)
        return;
    kt__free(f->jobs);
    kt__free(f->t_open);
    kt__free(f);
}
