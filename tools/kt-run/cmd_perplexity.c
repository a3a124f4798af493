/* kt-run perplexity --model DIR (--ids-file F | --text-file F) [--ctx 256]
 * Held-out perplexity over windows of --ctx tokens, like llama.cpp's
 * perplexity tool: each window is evaluated from an empty cache and the second
 * half of its predictions is scored. --score all scores every prediction of
 * windows of ctx+1 tokens stepped by ctx (the way the demo models' reference
 * figure was computed). Prints one line per window; the last line is
 * `ppl = X`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "commands.h"
#include "opt.h"
#include "run_engine.h"

static const char *const TOOL = "kt-run perplexity";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run perplexity --model DIR (--ids-file F | --text-file F) [OPTIONS]\n"
            "\n"
            "  --ids-file F             token ids (comma / whitespace separated)\n"
            "  --text-file F            UTF-8 text, encoded with the model's tokenizer\n"
            "  --ctx N                  window length in tokens (default 256)\n"
            "  --score half|all         half (default, llama.cpp): windows of N tokens, the\n"
            "                           second half of the predictions scored; all: windows of\n"
            "                           N+1 tokens stepped by N, every prediction scored\n"
            "  --chunks K               score at most K windows\n"
            "%s",
            run_engine_help);
}

/* -log softmax(logits)[target] in double */
static double nll(const float *logits, size_t V, int32_t target)
{
    double mx = logits[0];
    for (size_t i = 1; i < V; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (size_t i = 0; i < V; i++)
        sum += exp((double)logits[i] - mx);
    return log(sum) + mx - (double)logits[target];
}

int cmd_perplexity(int argc, char **argv)
{
    run_engine_opts eo;
    run_engine_opts_init(&eo);
    const char *ids_file = NULL, *text_file = NULL;
    int64_t n_ctx = 256, max_chunks = -1;
    bool score_all = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (opt_i64(TOOL, argc, argv, &i, "--ctx", 4, INT32_MAX, &n_ctx, &bad)) {
            if (bad)
                return 2;
            continue;
        }
        int r = run_engine_opt(&eo, TOOL, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--ids-file", true, &v, &bad)) {
            ids_file = v;
        } else if (opt_match(argc, argv, &i, "--text-file", true, &v, &bad)) {
            text_file = v;
        } else if (opt_i64(TOOL, argc, argv, &i, "--chunks", 1, INT32_MAX, &max_chunks, &bad)) {
            /* a bad value ends the loop below */
        } else if (opt_match(argc, argv, &i, "--score", true, &v, &bad)) {
            if (!bad && !strcmp(v, "all"))
                score_all = true;
            else if (!bad && !strcmp(v, "half"))
                score_all = false;
            else if (!bad) {
                fprintf(stderr, "%s: --score: '%s' is not half or all\n", TOOL, v);
                return 2;
            }
        } else {
            fprintf(stderr, "%s: unknown option '%s' (try --help)\n", TOOL, argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!!ids_file == !!text_file) {
        fprintf(stderr, "%s: give exactly one of --ids-file and --text-file\n", TOOL);
        return 2;
    }
    /* the context must hold one window */
    if (!eo.n_ctx || eo.n_ctx < n_ctx)
        eo.n_ctx = n_ctx;

    run_engine e;
    if (!run_engine_open(&e, &eo, TOOL))
        return 1;
    int rc = 1;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    float *logits = NULL;
    char *text = NULL;
    size_t len = 0;
    if (ids_file) {
        text = run_read_file(ids_file, &len, TOOL);
        if (!text || !run_parse_ids(text, &ids, &n_ids, TOOL, ids_file))
            goto done;
    } else {
        text = run_read_file(text_file, &len, TOOL);
        if (!text)
            goto done;
        if (!run_encode(&e, text, len, &ids, &n_ids, TOOL))
            goto done;
    }
    size_t V = (size_t)kt_context_n_vocab(e.ctx);
    size_t W = (size_t)n_ctx;
    /* windows: half: [s, s+W) for s = 0, W, 2W...; all: [s, s+W+1), fed W, s += W */
    size_t n_windows = score_all ? (n_ids > W ? (n_ids - 1) / W : 0) : n_ids / W;
    if (max_chunks > 0 && n_windows > (size_t)max_chunks)
        n_windows = (size_t)max_chunks;
    if (n_windows == 0) {
        fprintf(stderr, "%s: %zu tokens are fewer than one window of %zu (lower --ctx)\n", TOOL,
                n_ids, W + (score_all ? 1 : 0));
        goto done;
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= V) {
            fprintf(stderr, "%s: token id %d at index %zu is outside the vocabulary (%zu)\n",
                    TOOL, ids[i], i, V);
            goto done;
        }
    logits = malloc(sizeof(float) * W * V);
    if (!logits) {
        fprintf(stderr, "%s: out of memory for %zu x %zu logits\n", TOOL, W, V);
        goto done;
    }
    fprintf(stderr, "%s: %zu tokens, %zu windows of %zu, scoring %s\n", TOOL, n_ids, n_windows,
            W, score_all ? "every prediction" : "the second half");
    double total = 0.0;
    size_t scored = 0;
    for (size_t c = 0; c < n_windows; c++) {
        size_t s = c * W;
        kt_context_reset(e.ctx);
        if (kt_context_eval(e.ctx, ids + s, W, logits, KT_EVAL_ALL_LOGITS) < 0) {
            fprintf(stderr, "%s: window %zu: %s\n", TOOL, c + 1, kt_last_error());
            goto done;
        }
        /* position j predicts token s+j+1 */
        size_t first = score_all ? 0 : W / 2;
        size_t last = score_all ? W : W - 1;
        for (size_t j = first; j < last; j++) {
            total += nll(logits + j * V, V, ids[s + j + 1]);
            scored++;
        }
        printf("[%zu] %.4f\n", c + 1, exp(total / (double)scored));
        fflush(stdout);
    }
    printf("tokens scored = %zu\n", scored);
    printf("ppl = %.4f\n", exp(total / (double)scored));
    rc = 0;
done:
    free(ids), free(logits), free(text);
    run_engine_close(&e);
    return rc;
}
