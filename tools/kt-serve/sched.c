/* kt-serve's scheduler: one thread owns the model's contexts. Each step
 * decodes one token for every running request (all in one forward pass,
 * kt_context_eval_multi), then runs one prefill chunk
 * of each request still reading its prompt, so new prompts never stall the
 * streams already running for more than a chunk. Every request has its own
 * kt_context (KV cache), sampler and detokenizer: nothing is shared between
 * requests but the model's weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

typedef struct slot {
    kt_context *ctx;       /* kept across requests (reset before reuse) */
    job *j;                /* NULL: free                                 */
    kt_sampler *sampler;
    kt_detokenizer *detok;
    float *logits;         /* [n_vocab], the next token's               */
    size_t prefilled;      /* prompt tokens evaluated                    */
    size_t step_chunk;     /* prompt tokens in this step's shared pass   */
    int32_t *cached;       /* tokens in ctx's KV cache (prefix cache)    */
    size_t n_cached, cap_cached;
    kt_buf piece;
} slot;

struct sched {
    kt_runtime *rt;
    const kt_model *model;
    kt_context_options co;
    const kt_tokenizer *tok;
    serve_config cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    job *head, *tail; /* queue, under lock */
    int n_queued, n_running;
    uint64_t n_cancelled, n_done;
    bool stopping, started;
    slot *slots;      /* [max_running], scheduler thread only */
    int32_t n_vocab;
    /* one forward pass per step for every running request's next token and
     * as many prompt tokens as fit in n_batch (kt_context_eval_multi):
     * [max_running] each but step_tok [max_running + n_batch], logits
     * [max_running][n_vocab] */
    slot **step_slot;
    kt_context **step_ctx;
    int32_t *step_tok;
    size_t *step_n;
    float *step_logits;
    bool step_single; /* eval_multi unsupported (GPU contexts): one at a time */
};

double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

job *job_new(void)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->changed, NULL);
    atomic_init(&j->cancelled, false);
    atomic_init(&j->refs, 1);
    kt_sampler_options so = KT_SAMPLER_OPTIONS_INIT;
    j->sampling = so;
    return j;
}

void job_release(job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    free(j->prompt);
    for (size_t i = 0; i < j->n_stop; i++)
        free(j->stop[i]);
    free(j->text);
    free(j->error);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->changed);
    free(j);
}

static void slot_finish(sched *s, slot *sl, const char *finish, const char *error)
{
    job *j = sl->j;
    pthread_mutex_lock(&j->lock);
    if (sl->detok && !error) {
        sl->piece.size = 0;
        if (kt_detokenizer_flush(sl->detok, &sl->piece) == KT_OK && sl->piece.size) {
            /* the held-back bytes of a character cut by the stop */
            char *tmp = realloc(j->text, j->text_len + sl->piece.size + 1);
            if (tmp) {
                memcpy(tmp + j->text_len, sl->piece.ptr, sl->piece.size);
                j->text = tmp;
                j->text_len += sl->piece.size;
                j->text[j->text_len] = '\0';
            }
        }
    }
    j->state = JOB_DONE;
    j->finish = finish;
    if (error)
        j->error = strdup(error);
    j->t_end = serve_now();
    if (s->cfg.verbose) {
        double gen = j->t_end - j->t_first;
        fprintf(stderr, "kt-serve: request %llu: %zu prompt + %zu tokens, %s; queued %.0f ms, "
                "first token %.0f ms, %.1f tok/s\n", (unsigned long long)j->serial, j->n_prompt,
                j->n_generated, error ? error : finish, (j->t_start - j->t_submit) * 1e3,
                j->t_first > 0 ? (j->t_first - j->t_start) * 1e3 : 0.0,
                j->n_generated > 1 && gen > 0 ? (double)(j->n_generated - 1) / gen : 0.0);
    }
    pthread_cond_broadcast(&j->changed);
    pthread_mutex_unlock(&j->lock);
    kt_sampler_free(sl->sampler);
    kt_detokenizer_free(sl->detok);
    sl->sampler = NULL;
    sl->detok = NULL;
    sl->j = NULL;
    job_release(j);
    pthread_mutex_lock(&s->lock);
    s->n_running--;
    s->n_done++;
    if (finish && !strcmp(finish, "cancelled"))
        s->n_cancelled++;
    pthread_mutex_unlock(&s->lock);
}

/* Notes tokens now in the slot's KV cache; on failure the prefix cache
 * forgets the slot (it is then only ever reset). */
static void cache_note(slot *sl, const int32_t *toks, size_t n)
{
    if (sl->n_cached + n > sl->cap_cached) {
        size_t cap = (sl->cap_cached ? sl->cap_cached * 2 : 1024) + n;
        int32_t *t = realloc(sl->cached, cap * sizeof *t);
        if (!t) {
            sl->n_cached = 0;
            return;
        }
        sl->cached = t;
        sl->cap_cached = cap;
    }
    memcpy(sl->cached + sl->n_cached, toks, n * sizeof *toks);
    sl->n_cached += n;
}

/* Tokens a slot's cache shares with a prompt; one prompt token at least is
 * left to evaluate (its logits start the answer). */
static size_t common_prefix(const slot *sl, const job *j)
{
    size_t n = 0;
    while (n < sl->n_cached && n + 1 < j->n_prompt && sl->cached[n] == j->prompt[n])
        n++;
    return n;
}

static bool slot_start(sched *s, slot *sl, job *j)
{
    char err[256];
    sl->j = j;
    sl->prefilled = 0;
    /* every context shares slot 0's weights, MoE backend and workers */
    kt_context_options co = s->co;
    co.share = s->slots[0].ctx;
    if (!sl->ctx && kt_context_create(&sl->ctx, s->rt, s->model, &co) < 0) {
        snprintf(err, sizeof err, "context: %s", kt_last_error());
        sl->ctx = NULL;
        slot_finish(s, sl, NULL, err);
        return false;
    }
    size_t keep = s->cfg.prefix_cache ? common_prefix(sl, j) : 0;
    kt_context_truncate(sl->ctx, (int32_t)keep);
    sl->n_cached = keep;
    sl->prefilled = keep;
    j->n_cached = keep;
    if (kt_sampler_create(&sl->sampler, s->n_vocab, &j->sampling) < 0 ||
        kt_detokenizer_create(&sl->detok, s->tok, 0) < 0) {
        snprintf(err, sizeof err, "%s", kt_last_error());
        slot_finish(s, sl, NULL, err);
        return false;
    }
    for (size_t i = 0; i < j->n_prompt; i++)
        kt_sampler_accept(sl->sampler, j->prompt[i]);
    pthread_mutex_lock(&j->lock);
    j->state = JOB_RUNNING;
    j->t_start = serve_now();
    pthread_mutex_unlock(&j->lock);
    return true;
}

/* Appends a piece of text and ends the job at a stop string; true if stopped. */
static bool append_text(job *j, const char *p, size_t n)
{
    bool stopped = false;
    pthread_mutex_lock(&j->lock);
    size_t old = j->text_len;
    char *tmp = realloc(j->text, old + n + 1);
    if (tmp) {
        memcpy(tmp + old, p, n);
        j->text = tmp;
        j->text_len = old + n;
        tmp[j->text_len] = '\0';
        for (size_t k = 0; k < j->n_stop; k++) {
            size_t sl = strlen(j->stop[k]);
            size_t from = old >= sl ? old - sl + 1 : 0;
            char *hit = strstr(j->text + from, j->stop[k]);
            if (hit) {
                j->text_len = (size_t)(hit - j->text);
                j->text[j->text_len] = '\0';
                stopped = true;
            }
        }
    }
    pthread_cond_broadcast(&j->changed);
    pthread_mutex_unlock(&j->lock);
    return stopped;
}

/* Samples and streams the slot's next token; true when the request goes on
 * and *out (the token) must be evaluated in its context. */
static bool slot_next(sched *s, slot *sl, int32_t *out)
{
    job *j = sl->j;
    int32_t tok;
    if (kt_sampler_sample(sl->sampler, sl->logits, &tok) < 0) {
        slot_finish(s, sl, NULL, kt_last_error());
        return false;
    }
    kt_sampler_accept(sl->sampler, tok);
    pthread_mutex_lock(&j->lock);
    if (j->n_generated++ == 0)
        j->t_first = serve_now();
    pthread_mutex_unlock(&j->lock);
    if (kt_context_is_eos(sl->ctx, tok) || stop_ids_has(&s->cfg.stops, tok)) {
        slot_finish(s, sl, "stop", NULL);
        return false;
    }
    sl->piece.size = 0;
    if (kt_detokenizer_feed(sl->detok, tok, &sl->piece) < 0) {
        slot_finish(s, sl, NULL, kt_last_error());
        return false;
    }
    if (append_text(j, sl->piece.ptr ? sl->piece.ptr : "", sl->piece.size)) {
        slot_finish(s, sl, "stop", NULL);
        return false;
    }
    if (j->n_generated >= j->max_tokens || kt_context_n_past(sl->ctx) >= s->cfg.n_ctx) {
        slot_finish(s, sl, "length", NULL);
        return false;
    }
    *out = tok;
    return true;
}

static void slot_eval(sched *s, slot *sl, int32_t tok)
{
    if (kt_context_eval(sl->ctx, &tok, 1, sl->logits, 0) < 0)
        slot_finish(s, sl, NULL, kt_last_error());
    else
        cache_note(sl, &tok, 1);
}

/* One token for every request past its prompt (sampled per request) and the
 * next prompt chunks of requests still reading theirs, up to n_batch tokens
 * in all, evaluated in one forward pass (one weight read per step). Requests
 * whose prompt chunk did not fit keep step_chunk 0 and prefill on their own. */
static void decode_step(sched *s)
{
    int n = 0;
    size_t nt = 0, budget = (size_t)s->cfg.n_batch;
    for (int i = 0; i < s->cfg.max_running; i++) {
        slot *sl = &s->slots[i];
        sl->step_chunk = 0;
        if (sl->j && sl->prefilled == sl->j->n_prompt && slot_next(s, sl, &s->step_tok[nt])) {
            s->step_slot[n] = sl;
            s->step_ctx[n] = sl->ctx;
            s->step_n[n++] = 1;
            nt++;
            budget = budget > 0 ? budget - 1 : 0;
        }
    }
    int n_decode = n;
    for (int i = 0; i < s->cfg.max_running && budget > 0 && !s->step_single; i++) {
        slot *sl = &s->slots[i];
        if (!sl->j || sl->prefilled >= sl->j->n_prompt)
            continue;
        size_t c = sl->j->n_prompt - sl->prefilled;
        c = c < budget ? c : budget;
        memcpy(s->step_tok + nt, sl->j->prompt + sl->prefilled, sizeof(int32_t) * c);
        sl->step_chunk = c;
        s->step_slot[n] = sl;
        s->step_ctx[n] = sl->ctx;
        s->step_n[n++] = c;
        nt += c;
        budget -= c;
    }
    if (n > 1 && !s->step_single) {
        kt_status st = kt_context_eval_multi(s->step_ctx, (size_t)n, s->step_tok, s->step_n,
                                             s->step_logits);
        if (st == KT_OK) {
            size_t off = 0;
            for (int k = 0; k < n; k++) {
                slot *sl = s->step_slot[k];
                const float *lg = s->step_logits + (size_t)k * s->n_vocab;
                cache_note(sl, s->step_tok + off, s->step_n[k]);
                off += s->step_n[k];
                if (k < n_decode) {
                    memcpy(sl->logits, lg, sizeof(float) * (size_t)s->n_vocab);
                    continue;
                }
                sl->prefilled += s->step_n[k];
                if (sl->prefilled == sl->j->n_prompt) {
                    /* the prompt's last logits start the answer */
                    memcpy(sl->logits, lg, sizeof(float) * (size_t)s->n_vocab);
                    if (sl->j->max_tokens == 0)
                        slot_finish(s, sl, "length", NULL);
                }
            }
            return;
        }
        if (st == KT_ERR_UNSUPPORTED)
            s->step_single = true;
        /* else one at a time: the failing request ends with its own error */
    }
    for (int k = 0; k < n; k++)
        s->step_slot[k]->step_chunk = 0; /* prompts prefill on their own */
    for (int k = 0; k < n_decode; k++)
        slot_eval(s, s->step_slot[k], s->step_tok[k]);
}

static void slot_prefill(sched *s, slot *sl)
{
    job *j = sl->j;
    size_t n = j->n_prompt - sl->prefilled;
    if (n > (size_t)s->cfg.n_batch)
        n = (size_t)s->cfg.n_batch;
    bool last = sl->prefilled + n == j->n_prompt;
    if (kt_context_eval(sl->ctx, j->prompt + sl->prefilled, n, last ? sl->logits : NULL, 0) <
        0) {
        slot_finish(s, sl, NULL, kt_last_error());
        return;
    }
    cache_note(sl, j->prompt + sl->prefilled, n);
    sl->prefilled += n;
    if (last && j->max_tokens == 0)
        slot_finish(s, sl, "length", NULL);
}

static void *sched_main(void *arg)
{
    sched *s = arg;
    const int cap = s->cfg.max_running;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        int active = 0;
        for (int i = 0; i < cap; i++)
            active += s->slots[i].j != NULL;
        while (!s->stopping && !s->head && active == 0)
            pthread_cond_wait(&s->wake, &s->lock);
        if (s->stopping) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        /* admit queued requests into free slots */
        job *admitted[256];
        slot *where[256];
        int n_admit = 0;
        while (s->head && n_admit < 256) {
            job *j = s->head;
            /* a free slot; with the prefix cache, the one sharing most of the prompt */
            int best = -1;
            size_t best_len = 0;
            for (int i = 0; i < cap; i++) {
                if (s->slots[i].j)
                    continue;
                size_t len = s->cfg.prefix_cache ? common_prefix(&s->slots[i], j) : 0;
                if (best < 0 || len > best_len)
                    best = i, best_len = len;
            }
            if (best < 0)
                break;
            s->head = j->next;
            if (!s->head)
                s->tail = NULL;
            s->n_queued--;
            s->n_running++;
            s->slots[best].j = j; /* reserve */
            admitted[n_admit] = j;
            where[n_admit++] = &s->slots[best];
        }
        pthread_mutex_unlock(&s->lock);
        for (int k = 0; k < n_admit; k++)
            slot_start(s, where[k], admitted[k]);

        /* requests whose client left end here, before any more work */
        for (int i = 0; i < cap; i++) {
            slot *sl = &s->slots[i];
            if (sl->j && atomic_load(&sl->j->cancelled))
                slot_finish(s, sl, "cancelled", NULL);
        }
        /* one pass: a token for every request past its prompt, prompt chunks */
        decode_step(s);
        /* then a prefill chunk for each request still reading its prompt
         * that did not fit in the step's pass */
        for (int i = 0; i < cap; i++) {
            slot *sl = &s->slots[i];
            if (sl->j && sl->prefilled < sl->j->n_prompt && !sl->step_chunk)
                slot_prefill(s, sl);
            sl->step_chunk = 0;
        }
    }
    return NULL;
}

int sched_start(sched **out, kt_runtime *rt, const kt_model *model,
                const kt_context_options *co, const kt_tokenizer *tok, const serve_config *cfg)
{
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->rt = rt;
    s->model = model;
    s->co = *co;
    s->tok = tok;
    s->cfg = *cfg;
    s->slots = calloc((size_t)cfg->max_running, sizeof *s->slots);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    if (!s->slots) {
        sched_free(s);
        return -1;
    }
    /* the first context now: a model the engine cannot run fails at startup */
    if (kt_context_create(&s->slots[0].ctx, rt, model, co) < 0) {
        fprintf(stderr, "kt-serve: %s\n", kt_last_error());
        s->slots[0].ctx = NULL;
        sched_free(s);
        return -1;
    }
    s->n_vocab = kt_context_n_vocab(s->slots[0].ctx);
    s->cfg.n_ctx = kt_context_n_ctx(s->slots[0].ctx);
    for (int i = 0; i < cfg->max_running; i++) {
        s->slots[i].logits = malloc(sizeof(float) * (size_t)s->n_vocab);
        if (!s->slots[i].logits) {
            sched_free(s);
            return -1;
        }
    }
    size_t cap = (size_t)cfg->max_running;
    s->step_slot = calloc(cap, sizeof *s->step_slot);
    s->step_ctx = calloc(cap, sizeof *s->step_ctx);
    s->step_tok = calloc(cap + (size_t)cfg->n_batch, sizeof *s->step_tok);
    s->step_n = calloc(cap, sizeof *s->step_n);
    s->step_logits = malloc(sizeof(float) * cap * (size_t)s->n_vocab);
    if (!s->step_slot || !s->step_ctx || !s->step_tok || !s->step_n || !s->step_logits) {
        sched_free(s);
        return -1;
    }
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        fprintf(stderr, "kt-serve: cannot start the scheduler thread\n");
        sched_free(s);
        return -1;
    }
    s->started = true;
    *out = s;
    return 0;
}

bool sched_submit(sched *s, job *j)
{
    pthread_mutex_lock(&s->lock);
    if (s->n_queued >= s->cfg.max_queued || s->stopping) {
        pthread_mutex_unlock(&s->lock);
        return false;
    }
    atomic_fetch_add(&j->refs, 1);
    j->next = NULL;
    j->t_submit = serve_now();
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->n_queued++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return true;
}

int32_t sched_n_ctx(const sched *s)
{
    return s->cfg.n_ctx;
}

void sched_counts(sched *s, int *running, int *queued, uint64_t *done, uint64_t *cancelled)
{
    pthread_mutex_lock(&s->lock);
    *running = s->n_running;
    *queued = s->n_queued;
    *done = s->n_done;
    *cancelled = s->n_cancelled;
    pthread_mutex_unlock(&s->lock);
}

void sched_stop(sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_signal(&s->wake);
    job *queued = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    if (s->started) {
        pthread_join(s->thread, NULL);
        s->started = false;
    }
    for (job *j = queued; j;) {
        job *next = j->next;
        pthread_mutex_lock(&j->lock);
        j->state = JOB_DONE;
        j->error = strdup("server shutting down");
        pthread_cond_broadcast(&j->changed);
        pthread_mutex_unlock(&j->lock);
        job_release(j);
        j = next;
    }
    for (int i = 0; s->slots && i < s->cfg.max_running; i++)
        if (s->slots[i].j)
            slot_finish(s, &s->slots[i], NULL, "server shutting down");
}

void sched_free(sched *s)
{
    if (!s)
        return;
    sched_stop(s);
    /* slot 0's context last: the others borrow from it */
    for (int i = s->cfg.max_running - 1; s->slots && i >= 0; i--) {
        slot *sl = &s->slots[i];
        kt_context_free(sl->ctx);
        free(sl->logits);
        free(sl->cached);
        kt_buf_dispose(&sl->piece);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    free(s->slots);
    free(s->step_slot), free(s->step_ctx), free(s->step_tok), free(s->step_n);
    free(s->step_logits);
    free(s);
}
