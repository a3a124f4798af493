/* Expert moves copied while steps run: one thread, one batch at a time (mover.h). */
#include "gpu/mover.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kt_internal.h"

struct kt__mover {
    kt__mover_ops ops;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;      /* a batch came, or stop */
    pthread_cond_t landed;    /* the batch finished */
    kt__mover_piece *pieces;  /* the batch, owned */
    size_t n, cap;
    bool started, finished, stop;
    kt_status status;
    char err[256];
};

/* Copies the batch outside the lock; the first failure ends it. */
static void run_batch(kt__mover *m)
{
    char err[200] = "";
    kt_status st = KT_OK;
    size_t i = 0;
    for (; i < m->n; i++)
        if (m->ops.copy(m->ops.arg, m->pieces[i].dst, m->pieces[i].src, m->pieces[i].bytes,
                        err, sizeof err) != 0)
            break;
    if (i < m->n)
        st = KT_ERR_IO;
    /* even after a failure: nothing may still be in flight when the slots are reused */
    char ferr[200] = "";
    if (m->ops.finish(m->ops.arg, ferr, sizeof ferr) != 0 && st == KT_OK) {
        st = KT_ERR_IO;
        memcpy(err, ferr, sizeof err);
    }
    pthread_mutex_lock(&m->lock);
    m->status = st;
    if (st != KT_OK)
        snprintf(m->err, sizeof m->err, "copy %zu of %zu: %s", i < m->n ? i + 1 : m->n, m->n,
                 err);
    m->finished = true;
    pthread_cond_broadcast(&m->landed);
    pthread_mutex_unlock(&m->lock);
}

static void *mover_main(void *arg)
{
    kt__mover *m = arg;
    pthread_mutex_lock(&m->lock);
    for (;;) {
        while (!m->stop && !(m->started && !m->finished))
            pthread_cond_wait(&m->wake, &m->lock);
        if (m->stop)
            break;
        pthread_mutex_unlock(&m->lock);
        run_batch(m);
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

kt_status kt__mover_create(kt__mover **out, const kt__mover_ops *ops)
{
    *out = NULL;
    if (!ops || !ops->copy || !ops->finish)
        return kt__error(KT_ERR_INVALID_ARG, "expert mover: copy and finish are required");
    kt__mover *m = kt__calloc(1, sizeof *m);
    if (!m)
        return kt__error(KT_ERR_NOMEM, "expert mover: out of memory");
    m->ops = *ops;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->wake, NULL);
    pthread_cond_init(&m->landed, NULL);
    int rc = pthread_create(&m->thread, NULL, mover_main, m);
    if (rc != 0) {
        pthread_cond_destroy(&m->landed);
        pthread_cond_destroy(&m->wake);
        pthread_mutex_destroy(&m->lock);
        kt__free(m);
        return kt__error(KT_ERR_INTERNAL, "expert mover: pthread_create failed: %s",
                         strerror(rc));
    }
    *out = m;
    return KT_OK;
}

void kt__mover_free(kt__mover *m)
{
    if (!m)
        return;
    kt__mover_wait(m);
    pthread_mutex_lock(&m->lock);
    m->stop = true;
    pthread_cond_broadcast(&m->wake);
    pthread_mutex_unlock(&m->lock);
    pthread_join(m->thread, NULL);
    pthread_cond_destroy(&m->landed);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->lock);
    kt__free(m->pieces);
    kt__free(m);
}

kt_status kt__mover_start(kt__mover *m, const kt__mover_piece *pieces, size_t n)
{
    if (m->started)
        return kt__error(KT_ERR_INVALID_ARG, "expert mover: a batch is still copying");
    if (n > m->cap) {
        kt__mover_piece *p = kt__realloc(m->pieces, n * sizeof *p);
        if (!p)
            return kt__error(KT_ERR_NOMEM, "expert mover: out of memory (%zu copies)", n);
        m->pieces = p;
        m->cap = n;
    }
    if (n)
        memcpy(m->pieces, pieces, n * sizeof *pieces);
    pthread_mutex_lock(&m->lock);
    m->n = n;
    m->started = true;
    m->finished = false;
    m->status = KT_OK;
    pthread_cond_broadcast(&m->wake);
    pthread_mutex_unlock(&m->lock);
    return KT_OK;
}

bool kt__mover_busy(const kt__mover *m)
{
    return m && m->started;
}

/* Under the lock, the batch finished: its outcome, and the mover free again. */
static kt_status collect(kt__mover *m)
{
    m->started = false;
    kt_status st = m->status;
    if (st != KT_OK)
        kt__error(st, "expert mover: %s", m->err);
    return st;
}

bool kt__mover_poll(kt__mover *m, kt_status *st)
{
    if (!m->started)
        return false;
    pthread_mutex_lock(&m->lock);
    bool done = m->finished;
    if (done)
        *st = collect(m);
    pthread_mutex_unlock(&m->lock);
    return done;
}

kt_status kt__mover_wait(kt__mover *m)
{
    if (!m->started)
        return KT_OK;
    pthread_mutex_lock(&m->lock);
    while (!m->finished)
        pthread_cond_wait(&m->landed, &m->lock);
    kt_status st = collect(m);
    pthread_mutex_unlock(&m->lock);
    return st;
}
