/* kt-serve: an OpenAI-compatible HTTP server over libkt's public API.
 *
 * Threads: libmicrohttpd runs one thread per connection (request parsing,
 * prompt rendering and tokenising, streaming the answer); one scheduler
 * thread owns the model and every kt_context. They meet in `job`s: the HTTP
 * side fills a job's input and queues it, the scheduler appends generated
 * text under the job's lock and signals its condition variable. */
#ifndef KT_SERVE_H
#define KT_SERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kt/kt.h>

#include "stop_ids.h"

#define SERVE_MAX_STOP 4

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
    /* input: written by the HTTP thread before the job is queued, then read-only */
    uint64_t serial;
    int32_t *prompt;
    size_t n_prompt;
    size_t max_tokens;
    kt_sampler_options sampling;
    char *stop[SERVE_MAX_STOP];
    size_t n_stop;

    /* output: under `lock` */
    pthread_mutex_t lock;
    pthread_cond_t changed;
    job_state state;
    char *text;             /* raw generated text (special tokens included),
                               NUL-terminated; malloc'ed                       */
    size_t text_len;
    size_t n_generated;     /* sampled tokens, EOS included                   */
    size_t n_cached;        /* prompt tokens found in the prefix cache        */
    const char *finish;     /* "stop" / "length" once done; NULL before       */
    char *error;            /* generation failure, once done                  */

    double t_submit, t_start, t_first, t_end; /* monotonic seconds, for the log */

    atomic_bool cancelled;  /* the client went away                           */
    atomic_int refs;        /* HTTP side + scheduler                          */
    struct job *next;       /* scheduler queue                                */
} job;

job *job_new(void);
void job_release(job *j);

typedef struct serve_config {
    const char *model_name;
    int32_t n_ctx;
    int32_t max_running;
    int32_t max_queued;
    int32_t n_batch;        /* prefill chunk between decode steps */
    bool prefix_cache;      /* reuse a finished request's KV prefix */
    bool verbose;           /* a log line per finished request    */
    stop_ids stops;         /* end-of-turn ids besides config.json's */
} serve_config;

/* Monotonic seconds. */
double serve_now(void);

typedef struct sched sched;

/* The scheduler owns contexts made with `co` for `model`; contexts are
 * created on demand up to max_running and reused. */
int sched_start(sched **out, kt_runtime *rt, const kt_model *model,
                const kt_context_options *co, const kt_tokenizer *tok, const serve_config *cfg);
/* Queues a job (takes a reference); false when the queue is full or the
 * scheduler is stopping. */
bool sched_submit(sched *s, job *j);
/* Stops the thread and ends every job with an error (waiters wake up). */
void sched_stop(sched *s);
void sched_free(sched *s);
/* KV positions of every context (the model's context length as served). */
int32_t sched_n_ctx(const sched *s);
/* Counters for /health: requests generating, waiting, finished, and of
 * those cancelled because the client left. */
void sched_counts(sched *s, int *running, int *queued, uint64_t *done, uint64_t *cancelled);


/* The HTTP side (http.c). */
typedef struct server {
    serve_config cfg;
    const char *api_key;      /* NULL: no authentication             */
    size_t max_body;          /* request bodies above it: 413        */
    const kt_tokenizer *tok;
    const kt_template *tpl;   /* NULL: the model has no chat template */
    kt_chat_format format;    /* tool-call syntax of the model        */
    uint32_t chat_flags;      /* KT_CHAT_F_REASONING when it thinks   */
    sched *sched;
    int64_t created;          /* start time, for /v1/models           */
    atomic_uint_fast64_t serial;
    void *daemon;             /* struct MHD_Daemon                    */
    bool verbose;
} server;

/* Listens on host:port (port 0: any free port); returns the port or -1. */
int http_start(server *srv, const char *host, int port);
/* Stops accepting connections (the ones open keep going). */
void http_quiesce(server *srv);
void http_stop(server *srv);

#endif
