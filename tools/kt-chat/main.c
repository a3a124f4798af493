/* kt-chat [MODEL_DIR] | kt-chat --host H -p PORT: an interactive chat with a
 * model in this process or behind any OpenAI-compatible server. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <editline/readline.h>

#include "chat.h"
#include "grow.h"
#include "opt.h"
#include "term.h"

static const char *const TOOL = "kt-chat";

volatile sig_atomic_t chat_interrupted = 0;

static void on_sigint(int sig)
{
    (void)sig;
    chat_interrupted = 1;
}

double chat_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool convo_add(convo *c, const char *role, const char *content, const char *reasoning)
{
    chat_msg *grown = tool_grow(c->m, c->n, &c->cap, sizeof *grown, 16);
    if (!grown)
        return false;
    c->m = grown;
    chat_msg *m = &c->m[c->n];
    m->role = strdup(role);
    m->content = strdup(content ? content : "");
    m->reasoning = reasoning ? strdup(reasoning) : NULL;
    c->n++;
    return m->role && m->content;
}

void convo_pop(convo *c)
{
    if (!c->n)
        return;
    chat_msg *m = &c->m[--c->n];
    free(m->role);
    free(m->content);
    free(m->reasoning);
}

void convo_free(convo *c)
{
    while (c->n)
        convo_pop(c);
    free(c->m);
    c->m = NULL;
    c->cap = 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-chat [MODEL_DIR] [OPTIONS]          chat with a model in this process\n"
            "       kt-chat --host H -p PORT [OPTIONS]     chat through an OpenAI-compatible "
            "server\n"
            "\n"
            "  --host H                 server address (remote mode)\n"
            "  -p, --port PORT          server port (default 30000)\n"
            "  --api-key KEY            bearer key for the server (default $OPENAI_API_KEY)\n"
            "  --model-name NAME        model id to ask the server for (default: its first)\n"
            "  -t, --temperature T      sampling temperature (default 0.6; 0: greedy)\n"
            "  --top-p P                nucleus sampling (default 1: off)\n"
            "  --seed S                 sampler seed (default: random)\n"
            "  --max-tokens N           longest answer (default 1024)\n"
            "  -s, --system TEXT        system prompt\n"
            "  --no-stream              print each answer when it is complete\n"
            "  --no-save-history        do not keep the input history on disk\n"
            "In-process mode also takes kt-run's engine options (threads: --kt-cpuinfer):\n"
            "%s"
            "\nCommands: type /help in the chat.\n",
            run_engine_help);
}

static const char help_text[] =
    "  /help            this list\n"
    "  /clear           forget the conversation (the system prompt stays)\n"
    "  /history         show the conversation\n"
    "  /retry           answer the last message again\n"
    "  /info            model, server and settings\n"
    "  /system [TEXT]   show or set the system prompt (no TEXT: show)\n"
    "  /save FILE       write the conversation as JSON (OpenAI messages)\n"
    "  /quit            leave (also Ctrl-D)\n"
    "Ctrl-C stops an answer; the chat goes on.\n";

typedef struct printer {
    bool color;
    bool in_reasoning;
    bool any;
} printer;

static void on_delta(void *user, bool reasoning, const char *text, size_t len)
{
    printer *pr = user;
    if (reasoning && !pr->in_reasoning) {
        fputs(pr->color ? "\033[2m" : "[thinking] ", stdout);
        pr->in_reasoning = true;
    } else if (!reasoning && pr->in_reasoning) {
        fputs(pr->color ? "\033[0m\n\n" : "\n[answer] ", stdout);
        pr->in_reasoning = false;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    pr->any = true;
}

static void set_system(convo *c, const char *text)
{
    if (c->n && !strcmp(c->m[0].role, "system")) {
        free(c->m[0].content);
        c->m[0].content = strdup(text);
        return;
    }
    convo_add(c, "system", text, NULL);
    /* keep it first */
    chat_msg sys = c->m[c->n - 1];
    memmove(c->m + 1, c->m, (c->n - 1) * sizeof *c->m);
    c->m[0] = sys;
}

static void show_history(const convo *c, bool color)
{
    for (size_t i = 0; i < c->n; i++) {
        printf("%s%s:%s ", color ? "\033[1m" : "", c->m[i].role, color ? "\033[0m" : "");
        if (c->m[i].reasoning && *c->m[i].reasoning)
            printf("%s(%s)%s ", color ? "\033[2m" : "", c->m[i].reasoning,
                   color ? "\033[0m" : "");
        printf("%s\n", c->m[i].content);
    }
    if (!c->n)
        printf("(empty)\n");
}

static bool save_convo(const convo *c, const char *path)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < c->n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", c->m[i].role);
        cJSON_AddStringToObject(m, "content", c->m[i].content);
        if (c->m[i].reasoning)
            cJSON_AddStringToObject(m, "reasoning_content", c->m[i].reasoning);
        cJSON_AddItemToArray(arr, m);
    }
    char *text = cJSON_Print(arr);
    cJSON_Delete(arr);
    FILE *f = text ? fopen(path, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f)
        ok = (fclose(f) == 0) && ok;
    cJSON_free(text);
    if (!ok)
        fprintf(stderr, "%s: /save: cannot write %s: %s\n", TOOL, path, strerror(errno));
    return ok;
}

/* $XDG_DATA_HOME/libkt/kt-chat_history (or ~/.local/share/...), directories made. */
static bool history_path(char *buf, size_t size)
{
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    char dir[900];
    if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/libkt", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.local/share/libkt", home);
    else
        return false;
    /* mkdir -p */
    for (char *p = dir + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0700);
            *p = '/';
        }
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return false;
    snprintf(buf, size, "%s/kt-chat_history", dir);
    return true;
}

/* libedit leaves the terminal cooked between lines and prints its prompt before it sets raw
 * mode. A Ctrl-D that reaches the cooked terminal (typed while an answer prints, or as the
 * prompt appears) becomes the kernel's end-of-file marker, which libedit then reads as a NUL
 * byte bound to quoted-insert: the next Ctrl-D went into the line and every later one only
 * beeped. So between lines the terminal is not canonical (keys stay the bytes typed, the
 * signal keys still work); the settings it came with are put back at the end. */
static struct termios tty_start;
static bool tty_start_saved;

static void tty_uncook(void)
{
    struct termios t;
    if (tcgetattr(STDIN_FILENO, &t) != 0)
        return;
    if (!tty_start_saved) {
        tty_start = t;
        tty_start_saved = true;
    }
    t.c_lflag &= ~(tcflag_t)ICANON;
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &t);
}

static void tty_restore(void)
{
    if (tty_start_saved)
        tcsetattr(STDIN_FILENO, TCSANOW, &tty_start);
}

/* One line of input: libedit on a terminal, plain reads otherwise. NULL at EOF;
 * "" with *interrupted set after Ctrl-C at the prompt. */
static char *read_input(bool tty, bool *interrupted)
{
    *interrupted = false;
    chat_interrupted = 0;
    if (tty) {
        char *line = readline("> ");
        tty_uncook();
        if (!line && chat_interrupted) {
            *interrupted = true;
            return strdup("");
        }
        return line;
    }
    fputs("> ", stdout);
    fflush(stdout);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n && line[n - 1] == '\n')
        line[n - 1] = '\0';
    return line;
}

static void answer(backend *b, convo *c, const gen_params *gp, bool color)
{
    printer pr = {.color = color};
    char *content = NULL, *reasoning = NULL;
    gen_stats st;
    chat_interrupted = 0;
    gen_result r = b->generate(b, c, gp, on_delta, &pr, &content, &reasoning, &st);
    if (pr.in_reasoning && color)
        fputs("\033[0m", stdout);
    if (pr.any)
        fputs("\n", stdout);
    if (r == GEN_ERROR) {
        free(content);
        free(reasoning);
        convo_pop(c); /* the question goes; the user may edit and resend */
        return;
    }
    if (r == GEN_INTERRUPTED)
        printf("%s[stopped]%s\n", color ? "\033[2m" : "", color ? "\033[0m" : "");
    convo_add(c, "assistant", content ? content : "", reasoning);
    double tpot = st.n_gen > 1 ? (st.total - st.ttft) / (double)(st.n_gen - 1) : 0.0;
    char prompt_part[48] = "";
    if (st.n_prompt >= 0)
        snprintf(prompt_part, sizeof prompt_part, "%lld prompt + ", (long long)st.n_prompt);
    printf("%s[TTFT %.0f ms, TPOT %.1f ms (%.1f tok/s), %s%lld tokens, %s]%s\n",
           color ? "\033[2m" : "", st.ttft * 1e3, tpot * 1e3, tpot > 0 ? 1.0 / tpot : 0.0,
           prompt_part, (long long)st.n_gen, st.finish[0] ? st.finish : "done",
           color ? "\033[0m" : "");
    fflush(stdout);
    free(content);
    free(reasoning);
}

int main(int argc, char **argv)
{
    run_engine_opts eo;
    run_engine_opts_init(&eo);
    const char *host = NULL, *system_prompt = NULL, *model_name = NULL;
    const char *api_key = getenv("OPENAI_API_KEY");
    int64_t port = 30000, max_tokens = 1024, seed = -1;
    double temperature = 0.6, top_p = 1.0;
    bool stream = true, save_history = true;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--host", true, &v, &bad)) {
            host = v;
        } else if (opt_match(argc, argv, &i, "--api-key", true, &v, &bad)) {
            api_key = v;
        } else if (opt_match(argc, argv, &i, "--model-name", true, &v, &bad)) {
            model_name = v;
        } else if (opt_i64(TOOL, argc, argv, &i, "--port", 1, 65535, &port, &bad) ||
                   opt_i64(TOOL, argc, argv, &i, "-p", 1, 65535, &port, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--temperature", 0.0, 100.0, &temperature,
                           &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "-t", 0.0, 100.0, &temperature, &bad) ||
                   opt_f64(TOOL, argc, argv, &i, "--top-p", 1e-6, 1.0, &top_p, &bad) ||
                   opt_i64(TOOL, argc, argv, &i, "--seed", 0, INT64_MAX, &seed, &bad) ||
                   opt_i64(TOOL, argc, argv, &i, "--max-tokens", 1, INT32_MAX, &max_tokens,
                           &bad)) {
            /* a number taken; a bad one ends the loop below */
        } else if (opt_match(argc, argv, &i, "--system", true, &v, &bad) ||
                   opt_match(argc, argv, &i, "-s", true, &v, &bad)) {
            system_prompt = v;
        } else if (!strcmp(argv[i], "--no-stream")) {
            stream = false;
        } else if (!strcmp(argv[i], "--no-save-history")) {
            save_history = false;
        } else {
            int r = run_engine_opt(&eo, TOOL, argc, argv, &i);
            if (r < 0)
                return 2;
            if (r == 0) {
                if (argv[i][0] != '-' && !eo.model) {
                    eo.model = argv[i];
                } else {
                    fprintf(stderr, "%s: unknown option '%s' (try --help)\n", TOOL, argv[i]);
                    return 2;
                }
            }
        }
        if (bad)
            return 2;
    }

    /* Ctrl-C interrupts reads and generation instead of ending the process */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    bool tty = isatty(STDIN_FILENO), color = term_use_color(stdout);
    if (tty)
        tty_uncook(); /* a Ctrl-D typed while the model loads is kept as well */
    backend *b = host ? remote_open(host, (int)port, api_key, model_name) : local_open(&eo);
    if (!b) {
        if (tty)
            tty_restore();
        return 1;
    }
    char hist[1024];
    bool have_hist = tty && save_history && history_path(hist, sizeof hist);
    if (tty) {
        using_history();
        if (have_hist)
            read_history(hist);
    }
    convo c = {0};
    if (system_prompt)
        set_system(&c, system_prompt);
    gen_params gp = {.temperature = temperature, .top_p = top_p, .max_tokens = max_tokens,
                     .seed = seed, .stream = stream};
    printf("%s\nType a message, /help for commands, Ctrl-D to leave.\n", b->info);
    fflush(stdout);
    for (;;) {
        bool interrupted;
        char *line = read_input(tty, &interrupted);
        if (!line)
            break;
        if (interrupted || !*line) {
            if (interrupted)
                printf("\n");
            free(line);
            continue;
        }
        if (tty) {
            add_history(line);
            if (have_hist)
                write_history(hist);
        }
        if (line[0] == '/') {
            char *arg = strchr(line, ' ');
            if (arg)
                *arg++ = '\0';
            while (arg && *arg == ' ')
                arg++;
            const char *cmd = line + 1;
            if (!strcmp(cmd, "quit") || !strcmp(cmd, "exit") || !strcmp(cmd, "q")) {
                free(line);
                break;
            } else if (!strcmp(cmd, "help")) {
                fputs(help_text, stdout);
            } else if (!strcmp(cmd, "clear")) {
                while (c.n && strcmp(c.m[c.n - 1].role, "system"))
                    convo_pop(&c);
                while (c.n > 1)
                    convo_pop(&c);
                printf("(conversation cleared)\n");
            } else if (!strcmp(cmd, "history")) {
                show_history(&c, color);
            } else if (!strcmp(cmd, "retry")) {
                if (c.n && !strcmp(c.m[c.n - 1].role, "assistant"))
                    convo_pop(&c);
                if (c.n && !strcmp(c.m[c.n - 1].role, "user"))
                    answer(b, &c, &gp, color);
                else
                    printf("(nothing to retry)\n");
            } else if (!strcmp(cmd, "info")) {
                printf("%s\ntemperature %.2f, top_p %.2f, max tokens %lld, %s, %zu messages\n",
                       b->info, gp.temperature, gp.top_p, (long long)gp.max_tokens,
                       gp.stream ? "streaming" : "not streaming", c.n);
            } else if (!strcmp(cmd, "system")) {
                if (arg && *arg) {
                    set_system(&c, arg);
                    printf("(system prompt set)\n");
                } else {
                    printf("%s\n", c.n && !strcmp(c.m[0].role, "system") ? c.m[0].content
                                                                         : "(no system prompt)");
                }
            } else if (!strcmp(cmd, "save")) {
                if (!arg || !*arg)
                    printf("usage: /save FILE\n");
                else if (save_convo(&c, arg))
                    printf("(saved %zu messages to %s)\n", c.n, arg);
            } else {
                printf("unknown command /%s (try /help)\n", cmd);
            }
            free(line);
            fflush(stdout);
            continue;
        }
        convo_add(&c, "user", line, NULL);
        free(line);
        answer(b, &c, &gp, color);
    }
    if (tty)
        tty_restore();
    printf("\n");
    convo_free(&c);
    b->close(b);
    return 0;
}
