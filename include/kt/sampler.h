/*
 * kt/sampler.h - choosing the next token from logits: greedy, temperature,
 * top-k, top-p, min-p, repetition / presence / frequency penalties, seeded.
 *
 *     kt_sampler_options so = KT_SAMPLER_OPTIONS_INIT;
 *     so.temperature = 0.7f; so.top_p = 0.9f; so.seed = 42;
 *     kt_sampler *s = NULL;
 *     if (kt_sampler_create(&s, n_vocab, &so) < 0) ...;
 *     int32_t tok;
 *     kt_sampler_sample(s, logits, &tok);   // logits: [n_vocab] floats, not modified
 *     kt_sampler_accept(s, tok);            // history for the penalties
 *     kt_sampler_free(s);
 *
 * Order of operations: penalties on the raw logits; then, unless greedy,
 * temperature, top-k, top-p (nucleus), min-p (relative to the most likely
 * token), renormalisation and one draw from a 64-bit PRNG seeded by `seed`.
 * The same seed, options and logits give the same tokens on every machine.
 *
 * Thread contract: one thread at a time per sampler; samplers are independent.
 */
#ifndef KT_SAMPLER_H
#define KT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kt_sampler kt_sampler;

typedef struct kt_sampler_options {
    uint32_t struct_size;       /* sizeof(kt_sampler_options)                              */
    uint32_t flags;             /* reserved, must be 0                                     */
    float temperature;          /* <= 0: greedy (argmax after penalties); default 0        */
    int32_t top_k;              /* keep the k most likely; 0: off                           */
    float top_p;                /* keep the smallest set with mass >= top_p; 1: off         */
    float min_p;                /* drop tokens with p < min_p * p_max; 0: off               */
    float repetition_penalty;   /* CTRL-style: logit/r if > 0 else logit*r; 1: off          */
    float presence_penalty;     /* OpenAI-style: minus this once a token appeared; 0: off   */
    float frequency_penalty;    /* OpenAI-style: minus this per occurrence; 0: off          */
    int32_t penalty_last_n;     /* history window for penalties; -1: all; default 256      */
    uint64_t seed;              /* PRNG seed                                               */
} kt_sampler_options;

#define KT_SAMPLER_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_sampler_options), 0u, 0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 256, 0u }

/* Fills *opts with defaults for a struct of struct_size bytes. Since 0.1. */
KT_API kt_status kt_sampler_options_init(kt_sampler_options *opts, size_t struct_size);

/* Creates a sampler for a vocabulary of n_vocab tokens; opts may be NULL
 * (greedy). Validates ranges (temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1,
 * repetition_penalty > 0, top_k >= 0). Caller owns *out; free with
 * kt_sampler_free(). Allocates everything it needs here, nothing per sample.
 * Since 0.1. */
KT_API kt_status kt_sampler_create(kt_sampler **out, int32_t n_vocab,
                                   const kt_sampler_options *opts);
KT_API void kt_sampler_free(kt_sampler *sampler); /* NULL: no-op */

/* Picks a token from logits [n_vocab] (borrowed, not modified). Non-finite
 * logits are treated as -inf; if every logit is -inf, fails with
 * KT_ERR_INVALID_ARG. Since 0.1. */
KT_API kt_status kt_sampler_sample(kt_sampler *sampler, const float *logits, int32_t *out_token);

/* Appends a token (prompt or generated) to the penalty history. Since 0.1. */
KT_API kt_status kt_sampler_accept(kt_sampler *sampler, int32_t token);

/* Clears the history and re-seeds the PRNG with `seed`. Since 0.1. */
KT_API void kt_sampler_reset(kt_sampler *sampler, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* KT_SAMPLER_H */
