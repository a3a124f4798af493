/* Options and setup shared by kt-run's engine commands (generate, perplexity):
 * model, context size, precision, CPU MoE method and threads. Public API only. */
#ifndef KT_RUN_ENGINE_H
#define KT_RUN_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kt/kt.h>

typedef struct run_engine_opts {
    const char *model;        /* --model DIR                                   */
    int64_t n_ctx;            /* --ctx-size / -c (0: model default)            */
    int64_t n_batch;          /* --batch-size / -b                             */
    int32_t precision;        /* --precision f32|fast                          */
    int32_t method;           /* --kt-method                                   */
    int64_t n_threads;        /* --kt-cpuinfer / -t                            */
    int64_t n_pools;          /* --kt-threadpool-count                         */
    const char *weight_path;  /* --kt-weight-path                              */
    bool kv_bf16;             /* --cache-type bf16                             */
    bool dense_workers;       /* --dense-workers                               */
    bool moe_bf16;            /* --moe-precision bf16                          */
    bool verbose;             /* -v                                            */
    int32_t device;           /* --device: -1 auto (cuda when present), 0 cpu, 1 cuda */
    double gpu_experts;       /* --gpu-experts F: share on the GPU (-1: fill)  */
    double mem_fraction;      /* --mem-fraction-static (0: 0.9)                */
    bool mla_absorb;          /* --gpu-mla-absorb (the default now)            */
    bool mla_naive;           /* --gpu-mla-naive                               */
    bool decode_bf16;         /* --gpu-decode-bf16                             */
    bool no_cublas;           /* --gpu-no-cublas                               */
    int32_t layerwise_tokens; /* --kt-gpu-prefill-token-threshold (-1 auto)    */
    int64_t rebalance;        /* --gpu-rebalance N (tokens between plans; 0 off) */
    bool cublas;              /* --gpu-cublas                                  */
} run_engine_opts;

/* Defaults. */
void run_engine_opts_init(run_engine_opts *o);

/* If argv[*i] is one of the shared options, consumes it (and its value) and
 * returns 1; returns -1 after printing an error for a bad value; 0 if the
 * option is not one of these. */
int run_engine_opt(run_engine_opts *o, const char *tool, int argc, char **argv, int *i);

/* Help text of the shared options. */
extern const char run_engine_help[];

/* Opens the runtime, model and context; prints "tool: what: reason" and
 * returns false on failure (everything opened so far is freed). */
typedef struct run_engine {
    kt_runtime *rt;
    kt_model *model;
    kt_context *ctx;
    const char *path;    /* the model directory used                      */
    kt_tokenizer *tok;   /* opened by run_engine_tokenizer(), else NULL   */
} run_engine;
bool run_engine_open(run_engine *e, const run_engine_opts *o, const char *tool);
/* The bundled default model's directory (see run_engine.c for where it is
 * looked for); prints an error and returns NULL when it is not found.
 * Points to static storage. */
const char *run_default_model(const char *tool);
void run_engine_close(run_engine *e);

/* The model's tokenizer (opened on first use); prints an error and returns
 * NULL when it cannot be opened. */
kt_tokenizer *run_engine_tokenizer(run_engine *e, const char *tool);
/* Encodes text (special-token strings become their ids, nothing is added)
 * into a malloc'ed array. */
bool run_encode(run_engine *e, const char *text, size_t len, int32_t **ids, size_t *n,
                const char *tool);

/* Parses "1,2,3" (commas and/or whitespace) into a malloc'ed array. */
bool run_parse_ids(const char *text, int32_t **ids, size_t *n, const char *tool,
                   const char *what);
/* Reads a whole file into a malloc'ed NUL-terminated buffer. */
char *run_read_file(const char *path, size_t *len, const char *tool);

#endif
