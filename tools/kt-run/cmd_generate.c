/* kt-run [generate] --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [--temp T]
 *                  [--print-ids] [--logits-out FILE.npy]
 * One-shot generation (the default command): evaluates the prompt, optionally
 * writes its logits as a NumPy array, then samples up to N tokens (greedy at
 * --temp 0), stopping at the model's EOS ids or the context limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "commands.h"
#include "opt.h"
#include "run_engine.h"

static const char *const TOOL = "kt-run";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run [generate] --model DIR (--prompt TEXT | --prompt-ids IDS) [OPTIONS]\n"
            "\n"
            "Evaluates a prompt and generates a continuation (printed as text, or as ids\n"
            "with --print-ids).\n"
            "\n"
            "  -p, --prompt TEXT        prompt text, encoded with the model's tokenizer\n"
            "  --prompt-ids IDS         prompt as token ids, e.g. 1,2,3\n"
            "  -n, --n-predict N        tokens to generate (default 64; 0 with --logits-out)\n"
            "  --temp T                 sampling temperature; 0 (default): greedy\n"
            "  --top-k K, --top-p P     sampling filters (default off)\n"
            "  --seed S                 sampler seed (default 0)\n"
            "  --print-ids              print the generated ids on one line, comma-separated\n"
            "  --logits-out FILE.npy    write the prompt's logits, float32 [T][V], NumPy .npy\n"
            "%s",
            run_engine_help);
}

/* NumPy .npy v1.0: magic, version, u16 header length, a Python dict literal
 * padded with spaces to a 64-byte boundary and ended by '\n', then raw data. */
static bool write_npy_f32_2d(const char *path, const float *data, size_t rows, size_t cols)
{
    char dict[160];
    int n = snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", rows,
                     cols);
    size_t header = 10 + (size_t)n + 1;
    size_t pad = (64 - header % 64) % 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    uint16_t hlen = (uint16_t)(n + pad + 1);
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "%s: --logits-out: cannot create %s\n", TOOL, path);
        return false;
    }
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    /* little-endian float32 rows (x86-64 and aarch64 are little-endian) */
    ok = ok && fwrite(data, sizeof(float), rows * cols, f) == rows * cols;
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        fprintf(stderr, "%s: --logits-out: write to %s failed\n", TOOL, path);
    return ok;
}

int cmd_generate(int argc, char **argv)
{
    run_engine_opts eo;
    run_engine_opts_init(&eo);
    const char *prompt_ids = NULL, *prompt_text = NULL, *logits_out = NULL;
    int64_t n_predict = -1, top_k = 0, seed = 0;
    double temp = 0.0, top_p = 1.0;
    bool print_ids = false;
    /* argv[0] is "generate" or, for the default command, the first option */
    int first = (argc > 0 && !strcmp(argv[0], "generate")) ? 1 : 0;
    for (int i = first; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        int r = run_engine_opt(&eo, TOOL, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--prompt-ids", true, &v, &bad)) {
            prompt_ids = v;
        } else if (opt_match(argc, argv, &i, "--prompt", true, &v, &bad) ||
                   opt_match(argc, argv, &i, "-p", true, &v, &bad)) {
            prompt_text = v;
        } else if (opt_match(argc, argv, &i, "--logits-out", true, &v, &bad)) {
            logits_out = v;
        } else if (opt_match(argc, argv, &i, "--n-predict", true, &v, &bad) ||
                   opt_match(argc, argv, &i, "-n", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(TOOL, "-n", v, 0, INT32_MAX, &n_predict))
                return 2;
        } else if (opt_match(argc, argv, &i, "--temp", true, &v, &bad)) {
            if (!bad && !opt_parse_f64(TOOL, "--temp", v, 0.0, 100.0, &temp))
                return 2;
        } else if (opt_match(argc, argv, &i, "--top-k", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(TOOL, "--top-k", v, 0, INT32_MAX, &top_k))
                return 2;
        } else if (opt_match(argc, argv, &i, "--top-p", true, &v, &bad)) {
            if (!bad && !opt_parse_f64(TOOL, "--top-p", v, 1e-6, 1.0, &top_p))
                return 2;
        } else if (opt_match(argc, argv, &i, "--seed", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(TOOL, "--seed", v, 0, INT64_MAX, &seed))
                return 2;
        } else if (!strcmp(argv[i], "--print-ids")) {
            print_ids = true;
        } else if (argv[i][0] != '-' && !eo.model && i == 0) {
            eo.model = argv[i]; /* `kt-run DIR ...` */
        } else {
            fprintf(stderr, "%s: unknown option '%s' (try kt-run generate --help)\n", TOOL,
                    argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!!prompt_ids == !!prompt_text) {
        fprintf(stderr, "%s: give exactly one of --prompt and --prompt-ids\n", TOOL);
        return 2;
    }
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    if (prompt_ids && !run_parse_ids(prompt_ids, &prompt, &n_prompt, TOOL, "--prompt-ids"))
        return 2;
    if (n_predict < 0)
        n_predict = logits_out ? 0 : 64;

    run_engine e;
    if (!run_engine_open(&e, &eo, TOOL)) {
        free(prompt);
        return 1;
    }
    int rc = 1;
    kt_sampler *sampler = NULL;
    kt_detokenizer *detok = NULL;
    kt_buf piece = KT_BUF_INIT;
    float *logits = NULL;
    int32_t *gen = NULL;
    if (prompt_text && !run_encode(&e, prompt_text, strlen(prompt_text), &prompt, &n_prompt, TOOL))
        goto done;
    if (n_prompt == 0) {
        fprintf(stderr, "%s: empty prompt\n", TOOL);
        goto done;
    }
    if (!print_ids && n_predict > 0) {
        kt_tokenizer *tok = run_engine_tokenizer(&e, TOOL);
        if (!tok || kt_detokenizer_create(&detok, tok, 0) < 0) {
            fprintf(stderr, "%s: no tokenizer: printing ids\n", TOOL);
            print_ids = true;
        }
    }
    size_t V = (size_t)kt_context_n_vocab(e.ctx);
    size_t rows = logits_out ? n_prompt : 1;
    logits = malloc(sizeof(float) * V * rows);
    gen = malloc(sizeof(int32_t) * ((size_t)n_predict + 1));
    if (!logits || !gen) {
        fprintf(stderr, "%s: out of memory for %zu x %zu logits\n", TOOL, rows, V);
        goto done;
    }
    if (kt_context_eval(e.ctx, prompt, n_prompt, logits, logits_out ? KT_EVAL_ALL_LOGITS : 0) <
        0) {
        kt_status est = kt_context_n_ctx(e.ctx) < (int32_t)n_prompt ? KT_ERR_LIMIT : KT_OK;
        fprintf(stderr, "%s: prompt of %zu tokens: %s%s\n", TOOL, n_prompt, kt_last_error(),
                est == KT_ERR_LIMIT ? "; raise --ctx-size" : "");
        goto done;
    }
    if (logits_out && !write_npy_f32_2d(logits_out, logits, n_prompt, V))
        goto done;
    const float *last = logits + (rows - 1) * V;

    kt_sampler_options so = KT_SAMPLER_OPTIONS_INIT;
    so.temperature = (float)temp;
    so.top_k = (int32_t)top_k;
    so.top_p = (float)top_p;
    so.seed = (uint64_t)seed;
    if (kt_sampler_create(&sampler, (int32_t)V, &so) < 0) {
        fprintf(stderr, "%s: sampler: %s\n", TOOL, kt_last_error());
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++)
        kt_sampler_accept(sampler, prompt[i]);

    size_t n_gen = 0;
    bool hit_limit = false;
    while (n_gen < (size_t)n_predict) {
        int32_t tok;
        if (kt_sampler_sample(sampler, last, &tok) < 0) {
            fprintf(stderr, "%s: sampling: %s\n", TOOL, kt_last_error());
            goto done;
        }
        kt_sampler_accept(sampler, tok);
        gen[n_gen++] = tok;
        if (detok) {
            /* stream the text as it completes (EOS tokens are not printed) */
            piece.size = 0;
            if (!kt_context_is_eos(e.ctx, tok) &&
                kt_detokenizer_feed(detok, tok, &piece) == KT_OK && piece.size) {
                fwrite(piece.ptr, 1, piece.size, stdout);
                fflush(stdout);
            }
        }
        if (kt_context_is_eos(e.ctx, tok) || n_gen == (size_t)n_predict)
            break;
        if (kt_context_n_past(e.ctx) >= kt_context_n_ctx(e.ctx)) {
            hit_limit = true;
            break;
        }
        if (kt_context_eval(e.ctx, &tok, 1, logits, 0) < 0) {
            fprintf(stderr, "%s: decode: %s\n", TOOL, kt_last_error());
            goto done;
        }
        last = logits;
    }
    if (n_predict > 0 && print_ids) {
        for (size_t i = 0; i < n_gen; i++)
            printf("%s%d", i ? "," : "", gen[i]);
        printf("\n");
    } else if (detok) {
        piece.size = 0;
        if (kt_detokenizer_flush(detok, &piece) == KT_OK && piece.size)
            fwrite(piece.ptr, 1, piece.size, stdout);
        printf("\n");
    }
    if (hit_limit)
        fprintf(stderr, "%s: stopped at the context limit of %d tokens (raise --ctx-size)\n",
                TOOL, kt_context_n_ctx(e.ctx));
    rc = 0;
done:
    kt_buf_dispose(&piece);
    kt_detokenizer_free(detok);
    kt_sampler_free(sampler);
    free(logits), free(gen), free(prompt);
    run_engine_close(&e);
    return rc;
}
