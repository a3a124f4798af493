/* kt-serve [--model DIR] [--host H] [--port P] ...: an OpenAI-compatible HTTP
 * server (chat completions, completions, models, health) over libkt. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kt/kt.h>

#include "opt.h"
#include "run_engine.h"
#include "serve.h"

static const char *const TOOL = "kt-serve";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-serve [--model DIR] [OPTIONS]\n"
            "\n"
            "Serves a model over OpenAI's HTTP API: POST /v1/chat/completions,\n"
            "POST /v1/completions (streaming with \"stream\": true), GET /v1/models,\n"
            "GET /health.\n"
            "\n"
            "  --host ADDR                  address to listen on (default 127.0.0.1)\n"
            "  --port, -p PORT              port (default 30000; 0: any free port)\n"
            "  --served-model-name NAME     model id in the API (default: the directory name)\n"
            "  --max-running-requests N     requests generating at once (default 16);\n"
            "                               more wait in a queue\n"
            "  --max-queued-requests N      queue length before 503 (default 1024)\n"
            "  --max-total-tokens N         context length of each request (prompt plus\n"
            "                               answer; same as --ctx-size)\n"
            "  --chunked-prefill-size N     prompt tokens evaluated between decode steps\n"
            "                               (default 256)\n"
            "  --enable-prefix-cache        a request reuses the KV cache of a finished one\n"
            "                               it shares a prefix with (multi-turn chats); its\n"
            "                               logits then differ in the last bits from a\n"
            "                               fresh evaluation's\n"
            "  --api-key KEY                require 'Authorization: Bearer KEY' (default:\n"
            "                               $KT_API_KEY when set, else no key)\n"
            "  --max-body-bytes N           largest request body (default 8 MiB)\n"
            "%s",
            run_engine_help);
}

static const char *dir_name(const char *path, char *buf, size_t size)
{
    snprintf(buf, size, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    const char *slash = strrchr(buf, '/');
    return slash ? slash + 1 : buf;
}

int main(int argc, char **argv)
{
    run_engine_opts eo;
    run_engine_opts_init(&eo);
    const char *host = "127.0.0.1", *name = NULL, *api_key = getenv("KT_API_KEY");
    int64_t port = 30000, max_running = 16, max_queued = 1024, max_body = 8 << 20;
    int64_t prefill_chunk = 256, max_total = 0;
    bool prefix_cache = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (opt_match(argc, argv, &i, "--port", true, &v, &bad) ||
            opt_match(argc, argv, &i, "-p", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--port", v, 0, 65535, &port))
                return 2;
            continue;
        }
        const char **text = opt_match(argc, argv, &i, "--host", true, &v, &bad) ? &host
                            : opt_match(argc, argv, &i, "--served-model-name", true, &v, &bad)
                                ? &name
                            : opt_match(argc, argv, &i, "--api-key", true, &v, &bad) ? &api_key
                                                                                     : NULL;
        if (text) {
            if (bad)
                return 2;
            *text = v;
            continue;
        }
        if (opt_i64(TOOL, argc, argv, &i, "--max-running-requests", 1, 256, &max_running, &bad) ||
            opt_i64(TOOL, argc, argv, &i, "--max-queued-requests", 1, 1 << 20, &max_queued,
                    &bad) ||
            opt_i64(TOOL, argc, argv, &i, "--max-total-tokens", 2, INT32_MAX, &max_total, &bad) ||
            opt_i64(TOOL, argc, argv, &i, "--chunked-prefill-size", 1, 1 << 20, &prefill_chunk,
                    &bad) ||
            opt_i64(TOOL, argc, argv, &i, "--max-body-bytes", 1024, INT32_MAX, &max_body, &bad)) {
            if (bad)
                return 2;
            continue;
        }
        if (!strcmp(argv[i], "--enable-prefix-cache")) {
            prefix_cache = true;
            continue;
        }
        int r = run_engine_opt(&eo, TOOL, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (argv[i][0] != '-' && !eo.model) {
            eo.model = argv[i];
            continue;
        }
        fprintf(stderr, "%s: unknown option '%s' (try --help)\n", TOOL, argv[i]);
        return 2;
    }
    if (max_total)
        eo.n_ctx = max_total;
    if (api_key && !*api_key)
        api_key = NULL;

    /* signals go to the thread that waits for them, not to the workers */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    run_engine e;
    if (!run_engine_open(&e, &eo, TOOL))
        return 1;
    /* run_engine_open's context only checks the options; the scheduler makes its own */
    kt_context_free(e.ctx);
    e.ctx = NULL;
    kt_tokenizer *tok = run_engine_tokenizer(&e, TOOL);
    if (!tok) {
        run_engine_close(&e);
        return 1;
    }
    char name_buf[512];
    server srv;
    memset(&srv, 0, sizeof srv);
    srv.cfg.model_name = name ? name : dir_name(e.path, name_buf, sizeof name_buf);
    srv.cfg.max_running = (int32_t)max_running;
    srv.cfg.max_queued = (int32_t)max_queued;
    srv.cfg.n_batch = (int32_t)prefill_chunk;
    srv.cfg.prefix_cache = prefix_cache;
    stop_ids_load(&srv.cfg.stops, e.path, tok);
    srv.api_key = api_key;
    srv.max_body = (size_t)max_body;
    srv.tok = tok;
    srv.verbose = eo.verbose;
    srv.cfg.verbose = eo.verbose;
    srv.created = (int64_t)time(NULL);
    atomic_init(&srv.serial, 1);
    kt_template *tpl = NULL;
    kt_status st = kt_template_create_from_tokenizer(&tpl, tok, NULL, NULL);
    if (st < 0 && st != KT_ERR_NOT_FOUND) {
        fprintf(stderr, "%s: chat template of %s: %s\n", TOOL, e.path, kt_last_error());
        run_engine_close(&e);
        return 1;
    }
    if (!tpl)
        fprintf(stderr, "%s: %s has no chat template: /v1/chat/completions is off\n", TOOL,
                e.path);
    srv.tpl = tpl;
    srv.format = kt_chat_format_detect(kt_tokenizer_chat_template(tok, NULL), &srv.chat_flags);

    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = (int32_t)eo.n_ctx;
    co.n_batch = (int32_t)eo.n_batch;
    co.precision = eo.precision;
    co.method = eo.method;
    co.n_threads = (int32_t)eo.n_threads;
    co.n_pools = (int32_t)eo.n_pools;
    co.weight_path = eo.weight_path;
    if (eo.kv_bf16)
        co.flags |= KT_CONTEXT_F_KV_BF16;
    if (eo.dense_workers)
        co.flags |= KT_CONTEXT_F_DENSE_WORKERS;
    if (eo.moe_bf16)
        co.flags |= KT_CONTEXT_F_MOE_BF16;
    int rc = 1;
    if (sched_start(&srv.sched, e.rt, e.model, &co, tok, &srv.cfg) < 0)
        goto done;
    srv.cfg.n_ctx = sched_n_ctx(srv.sched);
    int bound = http_start(&srv, host, (int)port);
    if (bound < 0)
        goto done;
    fprintf(stderr, "%s: serving %s (context %d, %d running at most, tool calls: %s) on "
            "http://%s:%d\n", TOOL, srv.cfg.model_name, srv.cfg.n_ctx, srv.cfg.max_running,
            kt_chat_format_name(srv.format), host, bound);
    printf("listening on port %d\n", bound);
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "%s: %s, shutting down\n", TOOL, sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_quiesce(&srv);
    sched_stop(srv.sched); /* wakes every waiting connection with an error */
    http_stop(&srv);
    rc = 0;
done:
    sched_free(srv.sched);
    kt_template_free(tpl);
    run_engine_close(&e);
    return rc;
}
