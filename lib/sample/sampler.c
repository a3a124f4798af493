/* Token sampling. All buffers are allocated at create time (no per-token allocation). */
#include <math.h>
#include <stdlib.h>

#include "kt/sampler.h"
#include "kt_internal.h"

struct kt_sampler {
    kt_sampler_options opts;
    int32_t n_vocab;
    float *work;         /* [n_vocab] penalised, then scaled logits                */
    int32_t *cand;       /* [n_vocab] candidate ids, sorted by descending logit     */
    float *prob;         /* [n_vocab] candidate probabilities                       */
    int32_t *history;    /* ring of the last `cap` accepted tokens                  */
    int32_t hist_cap, hist_len, hist_head;
    uint32_t *counts;    /* [n_vocab] occurrences inside the window                 */
    uint8_t *done;       /* [n_vocab] scratch marks, all zero between calls         */
    uint64_t rng[4];     /* xoshiro256** state                                      */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double next_unit(uint64_t s[4])
{
    return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

KT__DEFINE_OPTIONS_INIT(kt_sampler_options_init, kt_sampler_options, KT_SAMPLER_OPTIONS_INIT)

void kt_sampler_reset(kt_sampler *s, uint64_t seed)
{
    if (!s)
        return;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    s->hist_len = 0;
    s->hist_head = 0;
    memset(s->counts, 0, sizeof(uint32_t) * (size_t)s->n_vocab);
    s->opts.seed = seed;
}

kt_status kt_sampler_create(kt_sampler **out, int32_t n_vocab, const kt_sampler_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_sampler_create: out is NULL");
    *out = NULL;
    if (n_vocab <= 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_sampler_create: n_vocab %d must be > 0", n_vocab);
    kt_sampler_options o = KT_SAMPLER_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_sampler_options");
    if (st < 0)
        return st;
    if (o.flags)
        return kt__error(KT_ERR_INVALID_ARG, "kt_sampler_options: unknown flags 0x%x", o.flags);
    if (!(o.temperature >= 0.0f) || !isfinite(o.temperature))
        return kt__error(KT_ERR_INVALID_ARG, "sampler: temperature %g must be >= 0", o.temperature);
    if (!(o.top_p > 0.0f && o.top_p <= 1.0f))
        return kt__error(KT_ERR_INVALID_ARG, "sampler: top_p %g must be in (0, 1]", o.top_p);
    if (!(o.min_p >= 0.0f && o.min_p <= 1.0f))
        return kt__error(KT_ERR_INVALID_ARG, "sampler: min_p %g must be in [0, 1]", o.min_p);
    if (!(o.repetition_penalty > 0.0f) || !isfinite(o.repetition_penalty))
        return kt__error(KT_ERR_INVALID_ARG, "sampler: repetition_penalty %g must be > 0",
                         o.repetition_penalty);
    if (!isfinite(o.presence_penalty) || !isfinite(o.frequency_penalty))
        return kt__error(KT_ERR_INVALID_ARG, "sampler: penalties must be finite");
    if (o.top_k < 0)
        return kt__error(KT_ERR_INVALID_ARG, "sampler: top_k %d must be >= 0", o.top_k);
    if (o.penalty_last_n < -1)
        return kt__error(KT_ERR_INVALID_ARG, "sampler: penalty_last_n %d must be >= -1",
                         o.penalty_last_n);

    kt_sampler *s = kt__calloc(1, sizeof *s);
    if (!s)
        return KT_ERR_NOMEM;
    s->opts = o;
    s->n_vocab = n_vocab;
    /* Unbounded history (-1) is kept as a large ring; counts stay exact within it. */
    s->hist_cap = o.penalty_last_n < 0 ? (1 << 20) : KT_MAX(o.penalty_last_n, 1);
    s->work = kt__malloc_array((size_t)n_vocab, sizeof(float));
    s->prob = kt__malloc_array((size_t)n_vocab, sizeof(float));
    s->cand = kt__malloc_array((size_t)n_vocab, sizeof(int32_t));
    s->counts = kt__calloc((size_t)n_vocab, sizeof(uint32_t));
    s->done = kt__calloc((size_t)n_vocab, 1);
    s->history = kt__malloc_array((size_t)s->hist_cap, sizeof(int32_t));
    if (!s->work || !s->prob || !s->cand || !s->counts || !s->done || !s->history) {
        kt_sampler_free(s);
        return KT_ERR_NOMEM;
    }
    kt_sampler_reset(s, o.seed);
    *out = s;
    return KT_OK;
}

void kt_sampler_free(kt_sampler *s)
{
    if (!s)
        return;
    kt__free(s->work);
    kt__free(s->prob);
    kt__free(s->cand);
    kt__free(s->counts);
    kt__free(s->done);
    kt__free(s->history);
    kt__free(s);
}

kt_status kt_sampler_accept(kt_sampler *s, int32_t token)
{
    if (!s)
        return kt__error(KT_ERR_INVALID_ARG, "kt_sampler_accept: sampler is NULL");
    if (token < 0 || token >= s->n_vocab)
        return kt__error(KT_ERR_INVALID_ARG, "kt_sampler_accept: token %d outside vocab of %d",
                         token, s->n_vocab);
    if (s->opts.penalty_last_n == 0)
        return KT_OK;
    if (s->hist_len == s->hist_cap) {
        int32_t oldest = s->history[s->hist_head];
        s->counts[oldest]--;
        s->history[s->hist_head] = token;
        s->hist_head = (s->hist_head + 1) % s->hist_cap;
    } else {
        s->history[(s->hist_head + s->hist_len) % s->hist_cap] = token;
        s->hist_len++;
    }
    s->counts[token]++;
    return KT_OK;
}

/* Sorts cand[0..n) by work[] descending, ties by ascending id (deterministic).
 * qsort has no context argument, so a bottom-up merge sort of our own; prob[]
 * (same length, not yet in use) serves as scratch. */
static void sort_candidates(kt_sampler *s, int32_t n)
{
    int32_t *a = s->cand;
    const float *key = s->work;
    int32_t *tmp = (int32_t *)s->prob;
    for (int32_t width = 1; width < n; width *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * width) {
            int32_t mid = KT_MIN(lo + width, n), hi = KT_MIN(lo + 2 * width, n);
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int32_t x = a[i], y = a[j];
                bool take_x = key[x] > key[y] || (key[x] == key[y] && x < y);
                tmp[k++] = take_x ? a[i++] : a[j++];
            }
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, sizeof(int32_t) * (size_t)n);
    }
}

kt_status kt_sampler_sample(kt_sampler *s, const float *logits, int32_t *out_token)
{
    if (!s || !logits || !out_token)
        return kt__error(KT_ERR_INVALID_ARG, "kt_sampler_sample: NULL argument");
    const kt_sampler_options *o = &s->opts;
    const int32_t V = s->n_vocab;
    float *w = s->work;

    /* Penalties on the raw logits; only tokens seen in the window are touched. */
    for (int32_t v = 0; v < V; v++)
        w[v] = isfinite(logits[v]) ? logits[v] : -INFINITY;
    if (s->hist_len > 0 && (o->repetition_penalty != 1.0f || o->presence_penalty != 0.0f ||
                            o->frequency_penalty != 0.0f)) {
        /* Each distinct token of the window once: `done` marks the ones handled. */
        for (int32_t i = 0; i < s->hist_len; i++) {
            int32_t t = s->history[(s->hist_head + i) % s->hist_cap];
            if (s->done[t] || w[t] == -INFINITY)
                continue;
            s->done[t] = 1;
            float x = w[t];
            if (o->repetition_penalty != 1.0f)
                x = x > 0.0f ? x / o->repetition_penalty : x * o->repetition_penalty;
            w[t] = x - o->presence_penalty - o->frequency_penalty * (float)s->counts[t];
        }
        for (int32_t i = 0; i < s->hist_len; i++)
            s->done[s->history[(s->hist_head + i) % s->hist_cap]] = 0;
    }

    int32_t best = -1;
    float best_logit = -INFINITY;
    for (int32_t v = 0; v < V; v++)
        if (w[v] > best_logit) {
            best_logit = w[v];
            best = v;
        }
    if (best < 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_sampler_sample: every logit is -inf or NaN");
    if (o->temperature <= 0.0f || o->top_k == 1) {
        *out_token = best;
        return KT_OK;
    }

    /* Candidates: tokens within 40/T nats of the best contribute > e^-40 of the
     * best's probability; dropping the rest changes no sampled token in practice
     * and keeps the sort short on 150k-token vocabularies. */
    const float inv_t = 1.0f / o->temperature;
    const float floor_logit = best_logit - 40.0f * o->temperature;
    int32_t n = 0;
    for (int32_t v = 0; v < V; v++)
        if (w[v] >= floor_logit)
            s->cand[n++] = v;
    sort_candidates(s, n);
    if (o->top_k > 0 && n > o->top_k)
        n = o->top_k;

    /* Softmax over the candidates at temperature T (max-subtracted). */
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float p = expf((w[s->cand[i]] - best_logit) * inv_t);
        s->prob[i] = p;
        sum += p;
    }
    /* Nucleus: smallest prefix whose mass reaches top_p. */
    if (o->top_p < 1.0f) {
        double acc = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            acc += s->prob[i] / sum;
            if (acc >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    /* min-p: relative to the most likely token's probability (prob[0] = 1 before norm). */
    if (o->min_p > 0.0f) {
        int32_t keep = 1;
        while (keep < n && s->prob[keep] >= o->min_p * s->prob[0])
            keep++;
        n = keep;
    }
    double total = 0.0;
    for (int32_t i = 0; i < n; i++)
        total += s->prob[i];
    double r = next_unit(s->rng) * total;
    for (int32_t i = 0; i < n; i++) {
        r -= s->prob[i];
        if (r < 0.0) {
            *out_token = s->cand[i];
            return KT_OK;
        }
    }
    *out_token = s->cand[n - 1];
    return KT_OK;
}
