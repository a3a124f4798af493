/* kt-run [generate] [MODEL_DIR | --model DIR] (-p TEXT | --prompt-ids 1,2,3) [-n N] [--chat]
 *                  [--system S] [--temp T] [--top-k K] [--top-p P] [--min-p P]
 *                  [--repeat-penalty R] [--presence-penalty P] [--seed S] [--print-ids]
 *                  [--print-prompt] [--logits-out FILE.npy]
 * One-shot generation (the default command): evaluates the prompt (raw, or the
 * model's own chat template with --chat), optionally writes its logits as a
 * NumPy array, then samples up to N tokens through kt_sampler (greedy at the
 * default --temp 0), streaming the text as it completes and stopping at the
 * model's EOS ids or the context limit. <think>...</think> blocks are shown
 * apart from the answer. A stats line goes to stderr at the end. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>

#include "commands.h"
#include "opt.h"
#include "run_engine.h"
#include "term.h"

static const char *const TOOL = "kt-run";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run [generate] [MODEL_DIR | --model DIR] (-p TEXT | --prompt-ids IDS)\n"
            "              [OPTIONS]\n"
            "\n"
            "Evaluates a prompt and streams a continuation. Without a model, the bundled\n"
            "demo model is used. Greedy by default (--temp 0): the same prompt always\n"
            "gives the same text.\n"
            "\n"
            "  -p, --prompt TEXT        prompt text, encoded with the model's tokenizer\n"
            "                           ('-' reads it from stdin; one final newline dropped)\n"
            "  --prompt-ids IDS         prompt as token ids, e.g. 1,2,3\n"
            "  --chat                   wrap the prompt as a user message in the model's own\n"
            "                           chat template (generation prompt added)\n"
            "  --system TEXT            a system message before it (implies --chat)\n"
            "  -n, --n-predict N        tokens to generate (default 64; 0 with --logits-out)\n"
            "  --temp T                 sampling temperature; 0 (default): greedy\n"
            "  --top-k K                keep the K most likely tokens (default 0: off)\n"
            "  --top-p P                nucleus sampling (default 1: off)\n"
            "  --min-p P                drop tokens below P x the most likely's (default 0)\n"
            "  --repeat-penalty R       CTRL-style penalty on recent tokens (default 1: off)\n"
            "  --presence-penalty P     OpenAI-style presence penalty (default 0: off)\n"
            "  --frequency-penalty P    OpenAI-style frequency penalty (default 0: off)\n"
            "  --seed S                 sampler seed (default: from the clock; the stats line\n"
            "                           names it when --temp > 0)\n"
            "  --print-ids              print the generated ids on one line, comma-separated\n"
            "  --print-prompt           print the exact prompt text (after --chat) and exit\n"
            "  --no-stats               no stats line on stderr\n"
            "  --logits-out FILE.npy    write the prompt's logits, float32 [T][V], NumPy .npy\n"
            "%s"
            "\n"
            "Output: the continuation on stdout (a newline added at the end). Reasoning in\n"
            "<think>...</think> is dimmed on a colour terminal; otherwise it goes to stderr\n"
            "between '[thinking]' and '[/thinking]' lines, so stdout holds only the answer.\n"
            "The stats line on stderr: prompt tokens, prefill tok/s, time to first token,\n"
            "decode tok/s. Ctrl-C stops the generation (exit status 130) and still prints it.\n",
            run_engine_help);
}

/* Ctrl-C stops the generation; the text so far and the stats line are printed. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Splits streamed text into answer and <think> reasoning. A tail that may be
 * the start of a marker is held back until the next piece decides it. */
typedef struct think_split {
    bool in_think;
    bool color;       /* reasoning dimmed on stdout (a colour terminal)  */
    bool opened;      /* a reasoning block has been announced            */
    char *hold;       /* text not yet written (malloc'ed)                */
    size_t size, cap;
} think_split;

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";

static void think_emit(think_split *ts, const char *p, size_t n)
{
    if (!n)
        return;
    if (!ts->in_think) {
        fwrite(p, 1, n, stdout);
        fflush(stdout);
        return;
    }
    if (!ts->opened) {
        ts->opened = true;
        if (ts->color)
            fputs("\033[2m", stdout);
        else
            fputs("[thinking]\n", stderr);
    }
    fwrite(p, 1, n, ts->color ? stdout : stderr);
    fflush(ts->color ? stdout : stderr);
}

static void think_switch(think_split *ts, bool to_think)
{
    if (!to_think && ts->opened) {
        if (ts->color)
            fputs("\033[0m", stdout);
        else
            fputs("\n[/thinking]\n", stderr);
    }
    ts->in_think = to_think;
    ts->opened = false;
}

/* Longest suffix of text[0..n) that is a proper prefix of marker. */
static size_t marker_prefix_tail(const char *text, size_t n, const char *marker)
{
    size_t m = strlen(marker);
    for (size_t k = (n < m - 1 ? n : m - 1); k > 0; k--)
        if (!memcmp(text + n - k, marker, k))
            return k;
    return 0;
}

static bool think_feed(think_split *ts, const char *p, size_t n, bool final)
{
    if (ts->size + n > ts->cap) {
        size_t cap = (ts->size + n) * 2 + 64;
        char *b = realloc(ts->hold, cap);
        if (!b)
            return false;
        ts->hold = b, ts->cap = cap;
    }
    if (n)
        memcpy(ts->hold + ts->size, p, n);
    ts->size += n;
    char *text = ts->hold;
    size_t len = ts->size, at = 0;
    for (;;) {
        const char *marker = ts->in_think ? THINK_CLOSE : THINK_OPEN;
        size_t ml = strlen(marker);
        const char *hit = NULL;
        for (size_t i = at; i + ml <= len && !hit; i++)
            if (!memcmp(text + i, marker, ml))
                hit = text + i;
        if (!hit)
            break;
        think_emit(ts, text + at, (size_t)(hit - (text + at)));
        think_switch(ts, !ts->in_think);
        at = (size_t)(hit - text) + ml;
    }
    size_t keep = final ? 0 : marker_prefix_tail(text + at, len - at,
                                                 ts->in_think ? THINK_CLOSE : THINK_OPEN);
    think_emit(ts, text + at, len - at - keep);
    memmove(text, text + len - keep, keep);
    ts->size = keep;
    if (final && ts->in_think)
        think_switch(ts, false);
    return true;
}

/* Reads all of stdin; drops one final newline (as `echo` adds). */
static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, (cap *= 2) + 1);
            if (!b)
                free(buf);
            buf = b;
        }
    }
    if (!buf || ferror(stdin)) {
        free(buf);
        fprintf(stderr, "%s: -p -: cannot read stdin\n", TOOL);
        return NULL;
    }
    if (n && buf[n - 1] == '\n')
        n--;
    if (n && buf[n - 1] == '\r')
        n--;
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The model's chat template over [system,] user; the prompt text in *out. */
static bool render_chat(kt_tokenizer *tok, const char *system, const char *user, kt_buf *out,
                        bool *opens_think)
{
    kt_template *tpl = NULL;
    if (kt_template_create_from_tokenizer(&tpl, tok, NULL, NULL) < 0) {
        fprintf(stderr, "%s: --chat: %s\n", TOOL, kt_last_error());
        return false;
    }
    kt_chat_message msgs[2];
    size_t n = 0;
    if (system)
        msgs[n++] = (kt_chat_message){"system", system, NULL};
    msgs[n++] = (kt_chat_message){"user", user, NULL};
    kt_status st = kt_template_render_messages(tpl, msgs, n, 1, NULL, NULL, out);
    kt_template_free(tpl);
    if (st < 0) {
        fprintf(stderr, "%s: --chat: chat template: %s\n", TOOL, kt_last_error());
        return false;
    }
    /* a generation prompt that opens a reasoning block: the output starts in it */
    size_t pl = out->size;
    while (pl && (out->ptr[pl - 1] == '\n' || out->ptr[pl - 1] == ' '))
        pl--;
    *opens_think = pl >= 7 && !memcmp(out->ptr + pl - 7, THINK_OPEN, 7);
    return true;
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
    const char *prompt_ids = NULL, *prompt_text = NULL, *logits_out = NULL, *system = NULL;
    int64_t n_predict = -1, top_k = 0, seed = -1;
    double temp = 0.0, top_p = 1.0, min_p = 0.0, repeat_penalty = 1.0, presence = 0.0,
           frequency = 0.0;
    bool print_ids = false, print_prompt = false, chat = false, stats = true;
    /* argv[0] is "generate" or, for the default command, the first argument */
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
        } else if (opt_match(argc, argv, &i, "--system", true, &v, &bad)) {
            system = v;
            chat = true;
        } else if (!strcmp(argv[i], "--chat")) {
            chat = true;
        } else if (opt_match(argc, argv, &i, "--logits-out", true, &v, &bad)) {
            logits_out = v;
        } else if (opt_i64(TOOL, argc, argv, &i, "--n-predict", 0, INT32_MAX, &n_predict, &bad) ||
                   opt_i64(TOOL, argc, argv, &i, "-n", 0, INT32_MAX, &n_predict, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--temp", 0.0, 100.0, &temp, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--temperature", 0.0, 100.0, &temp, &bad) ||
                   opt_i64(TOOL, argc, argv, &i, "--top-k", 0, INT32_MAX, &top_k, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--top-p", 1e-6, 1.0, &top_p, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--min-p", 0.0, 1.0, &min_p, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--repeat-penalty", 1e-3, 100.0,
                           &repeat_penalty, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--presence-penalty", -10.0, 10.0, &presence,
                           &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--frequency-penalty", -10.0, 10.0, &frequency,
                           &bad) ||
                   opt_i64(TOOL, argc, argv, &i, "--seed", 0, INT64_MAX, &seed, &bad)) {
            /* a number taken; a bad one ends the loop below */
        } else if (!strcmp(argv[i], "--print-ids")) {
            print_ids = true;
        } else if (!strcmp(argv[i], "--print-prompt")) {
            print_prompt = true;
        } else if (!strcmp(argv[i], "--no-stats")) {
            stats = false;
        } else if (argv[i][0] != '-' && !eo.model && i == first) {
            eo.model = argv[i]; /* `kt-run DIR ...` */
        } else {
            if (argv[i][0] == '-')
                fprintf(stderr, "%s: unknown option '%s' (try kt-run generate --help)\n", TOOL,
                        argv[i]);
            else
                fprintf(stderr, "%s: unexpected argument '%s': the model directory comes "
                        "first, the prompt after -p (try kt-run generate --help)\n", TOOL,
                        argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!!prompt_ids == !!prompt_text) {
        fprintf(stderr, "%s: give exactly one of -p/--prompt and --prompt-ids\n", TOOL);
        return 2;
    }
    if (chat && prompt_ids) {
        fprintf(stderr, "%s: --chat/--system need a text prompt (-p), not --prompt-ids\n",
                TOOL);
        return 2;
    }
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    if (prompt_ids && !run_parse_ids(prompt_ids, &prompt, &n_prompt, TOOL, "--prompt-ids"))
        return 2;
    if (n_predict < 0)
        n_predict = logits_out ? 0 : 64;
    if (seed < 0)
        seed = (int64_t)(((uint64_t)time(NULL) * 2654435761u) ^ (uint64_t)getpid()) &
               INT64_MAX;

    int rc = 1;
    char *stdin_text = NULL;
    size_t text_len = prompt_text ? strlen(prompt_text) : 0;
    if (prompt_text && !strcmp(prompt_text, "-")) {
        stdin_text = read_stdin(&text_len);
        if (!stdin_text) {
            free(prompt);
            return 1;
        }
        prompt_text = stdin_text;
    }

    run_engine e;
    memset(&e, 0, sizeof e);
    kt_sampler *sampler = NULL;
    kt_detokenizer *detok = NULL;
    kt_buf piece = KT_BUF_INIT, rendered = KT_BUF_INIT;
    think_split ts = {.color = term_use_color(stdout)};
    float *logits = NULL;
    int32_t *gen = NULL;
    bool opens_think = false, sig_set = false;
    struct sigaction old_sa;

    if (print_prompt) {
        /* the tokenizer alone: no weights are loaded */
        e.path = eo.model ? eo.model : run_default_model(TOOL);
        if (!e.path || (prompt_text && !run_engine_tokenizer(&e, TOOL)))
            goto done;
        if (chat && !render_chat(e.tok, system, prompt_text, &rendered, &opens_think))
            goto done;
        if (chat)
            fwrite(rendered.ptr, 1, rendered.size, stdout);
        else if (prompt_text)
            fwrite(prompt_text, 1, text_len, stdout);
        else
            for (size_t i = 0; i < n_prompt; i++)
                printf("%s%d", i ? "," : "", prompt[i]);
        rc = 0;
        goto done;
    }

    if (!run_engine_open(&e, &eo, TOOL))
        goto done;
    if (chat) {
        kt_tokenizer *tok = run_engine_tokenizer(&e, TOOL);
        if (!tok || !render_chat(tok, system, prompt_text, &rendered, &opens_think))
            goto done;
        prompt_text = rendered.ptr;
        text_len = rendered.size;
    }
    if (prompt_text && !run_encode(&e, prompt_text, text_len, &prompt, &n_prompt, TOOL))
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
    ts.in_think = opens_think;
    size_t V = (size_t)kt_context_n_vocab(e.ctx);
    size_t rows = logits_out ? n_prompt : 1;
    logits = malloc(sizeof(float) * V * rows);
    gen = malloc(sizeof(int32_t) * ((size_t)n_predict + 1));
    if (!logits || !gen) {
        fprintf(stderr, "%s: out of memory for %zu x %zu logits\n", TOOL, rows, V);
        goto done;
    }
    kt_sampler_options so = KT_SAMPLER_OPTIONS_INIT;
    so.temperature = (float)temp;
    so.top_k = (int32_t)top_k;
    so.top_p = (float)top_p;
    so.min_p = (float)min_p;
    so.repetition_penalty = (float)repeat_penalty;
    so.presence_penalty = (float)presence;
    so.frequency_penalty = (float)frequency;
    so.seed = (uint64_t)seed;
    if (kt_sampler_create(&sampler, (int32_t)V, &so) < 0) {
        fprintf(stderr, "%s: sampler: %s\n", TOOL, kt_last_error());
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++)
        kt_sampler_accept(sampler, prompt[i]);

    double t_start = now_s();
    if (kt_context_eval(e.ctx, prompt, n_prompt, logits, logits_out ? KT_EVAL_ALL_LOGITS : 0) <
        0) {
        bool too_long = kt_context_n_ctx(e.ctx) < (int32_t)n_prompt;
        fprintf(stderr, "%s: prompt of %zu tokens: %s%s\n", TOOL, n_prompt, kt_last_error(),
                too_long ? "; raise --ctx-size" : "");
        goto done;
    }
    double t_prefill = now_s();
    if (logits_out && !write_npy_f32_2d(logits_out, logits, n_prompt, V))
        goto done;
    const float *last = logits + (rows - 1) * V;

    size_t n_gen = 0;
    bool hit_limit = false;
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sig_set = sigaction(SIGINT, &sa, &old_sa) == 0;
    double t_first = t_prefill, t_end = t_prefill;
    while (n_gen < (size_t)n_predict) {
        int32_t tok;
        if (kt_sampler_sample(sampler, last, &tok) < 0) {
            fprintf(stderr, "%s: sampling: %s\n", TOOL, kt_last_error());
            goto done;
        }
        kt_sampler_accept(sampler, tok);
        gen[n_gen++] = tok;
        if (n_gen == 1)
            t_first = now_s();
        if (detok) {
            /* stream the text as it completes (EOS tokens are not printed) */
            piece.size = 0;
            if (!kt_context_is_eos(e.ctx, tok) &&
                kt_detokenizer_feed(detok, tok, &piece) == KT_OK && piece.size &&
                !think_feed(&ts, piece.ptr, piece.size, false)) {
                fprintf(stderr, "%s: out of memory\n", TOOL);
                goto done;
            }
        }
        if (kt_context_is_eos(e.ctx, tok) || n_gen == (size_t)n_predict || interrupted)
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
    t_end = now_s();
    if (n_predict > 0 && print_ids) {
        for (size_t i = 0; i < n_gen; i++)
            printf("%s%d", i ? "," : "", gen[i]);
        printf("\n");
    } else if (detok) {
        piece.size = 0;
        if (kt_detokenizer_flush(detok, &piece) == KT_OK)
            think_feed(&ts, piece.ptr, piece.size, true);
        printf("\n");
    }
    fflush(stdout);
    if (hit_limit)
        fprintf(stderr, "%s: stopped at the context limit of %d tokens (raise --ctx-size)\n",
                TOOL, kt_context_n_ctx(e.ctx));
    if (stats) {
        /* decode: the evaluations after the first token, one token each */
        double pre = t_prefill - t_start, dec = t_end - t_first;
        fprintf(stderr, "%s: prompt %zu token%s, prefill %.1f tok/s, first token %.3f s", TOOL,
                n_prompt, n_prompt == 1 ? "" : "s", pre > 0 ? (double)n_prompt / pre : 0.0,
                t_first - t_start);
        if (n_gen > 1)
            fprintf(stderr, ", decode %.1f tok/s (%zu tokens)",
                    dec > 0 ? (double)(n_gen - 1) / dec : 0.0, n_gen);
        else
            fprintf(stderr, ", %zu token%s generated", n_gen, n_gen == 1 ? "" : "s");
        if (temp > 0)
            fprintf(stderr, ", seed %lld", (long long)seed);
        fputs(interrupted ? " (interrupted)\n" : "\n", stderr);
    }
    rc = interrupted ? 130 : 0; /* as a shell reports a job ended by SIGINT */
done:
    if (ts.color && ts.in_think && ts.opened)
        fputs("\033[0m", stdout); /* an error inside a dimmed block: undim the terminal */
    if (sig_set)
        sigaction(SIGINT, &old_sa, NULL);
    free(ts.hold);
    kt_buf_dispose(&piece);
    kt_buf_dispose(&rendered);
    kt_detokenizer_free(detok);
    kt_sampler_free(sampler);
    free(logits), free(gen), free(prompt), free(stdin_text);
    if (e.ctx || e.rt)
        run_engine_close(&e);
    else
        kt_tokenizer_free(e.tok);
    return rc;
}
