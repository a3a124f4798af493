/* kt-bench moe --gguf FILE: the LLAMAFILE backend on the routed experts of a
 * GGUF file (kt_moe_backend_create_from_gguf), decode as GB/s of expert
 * blocks read next to stream read bandwidth, prefill as TFLOP/s next to
 * oneDNN BF16 matmuls over the same shapes and routing. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <kt/kt.h>
#include <kt/moe.h>

#include "opt.h"

bool bench_parse_list(const char *flag, const char *text, int64_t lo, int64_t hi,
                      int64_t *vals, int *count, int max);
int bench_moe_gguf(int argc, char **argv);

/* T tokens, k distinct uniform experts each; counts[e] tokens per expert. */
static void route(uint64_t *s, int T, int k, int E, int32_t *ids, float *w, int32_t *counts)
{
    memset(counts, 0, (size_t)E * sizeof(int32_t));
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e;
            bool dup;
            do {
                e = (int)(bench_rng(s) % (uint64_t)E);
                dup = false;
                for (int q = 0; q < j; q++)
                    dup |= ids[t * k + q] == e;
            } while (dup);
            ids[t * k + j] = e;
            w[t * k + j] = 1.0f / (float)k;
            counts[e]++;
        }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorted in place; the upper one of an even count, as
 * this tool's plain figures); 0 for none. */
static double median_of(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench moe --gguf FILE [--tokens LIST] [--top-k K] [--threads N]\n"
            "                    [--min-time S] [--stream-size MIB] [--no-onednn]\n"
            "\n"
            "Runs the LLAMAFILE method on the routed experts of a GGUF file\n"
            "(blk.N.ffn_{gate,up,down}_exps, e.g. written by kt-convert --method gguf:Q4_0).\n"
            "Decode (T <= 16): GB/s of expert blocks read, next to stream read bandwidth;\n"
            "prefill: TFLOP/s (6 H I k T per call), next to oneDNN BF16 per-expert matmuls\n"
            "with the same routing. Layers are cycled so weights come from memory.\n"
            "Decode rows also print the clean figures (kt-bench moe --help): the median\n"
            "over the calls during which no thread of theirs waited for a CPU, against\n"
            "the clean short stream reads'.\n"
            "  --tokens LIST      T values (default 1,4,512)\n"
            "  --top-k K          experts per token (default 8)\n"
            "  --json FILE        write every row as JSON (file, T, GB/s, both stream\n"
            "                     figures, the clean figures as kt-bench moe's rows)\n");
}

int bench_moe_gguf(int argc, char **argv)
{
    const char *path = NULL;
    int64_t tokens[8] = {1, 4, 512};
    int n_tokens = 3;
    int64_t top_k = 8, threads = 0, stream_mib = 1024;
    const char *json_path = NULL;
    double min_time = 1.0;
    bool onednn = true;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--gguf", true, &v, &bad)) {
            path = v;
        } else if (opt_match(argc, argv, &i, "--tokens", true, &v, &bad)) {
            if (!bad && !bench_parse_list("--tokens", v, 1, 1 << 16, tokens, &n_tokens, 8))
                return 2;
        } else if (opt_match(argc, argv, &i, "--top-k", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--top-k", v, 1, 64, &top_k))
                return 2;
        } else if (opt_match(argc, argv, &i, "--threads", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--threads", v, 1, 4096, &threads))
                return 2;
        } else if (opt_match(argc, argv, &i, "--stream-size", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--stream-size", v, 1, 1 << 20, &stream_mib))
                return 2;
        } else if (opt_match(argc, argv, &i, "--min-time", true, &v, &bad)) {
            if (!bad)
                min_time = atof(v);
        } else if (opt_match(argc, argv, &i, "--json", true, &v, &bad)) {
            json_path = v;
        } else if (!strcmp(argv[i], "--no-onednn")) {
            onednn = false;
        } else {
            fprintf(stderr, "kt-bench moe --gguf: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!path) {
        fprintf(stderr, "kt-bench moe: --gguf FILE is required here\n");
        return 2;
    }
    int64_t t_max = 1;
    for (int i = 0; i < n_tokens; i++)
        t_max = tokens[i] > t_max ? tokens[i] : t_max;
    kt_moe_options o = KT_MOE_OPTIONS_INIT;
    o.n_threads = (int32_t)threads;
    o.max_tokens = (int32_t)t_max;
    kt_moe_backend *moe = NULL;
    static int ids_before[1024];
    int n_before = bench_thread_ids(ids_before, 1024);
    if (kt_moe_backend_create_from_gguf(&moe, NULL, path, (uint32_t)top_k, &o) < 0) {
        fprintf(stderr, "kt-bench moe: %s\n", kt_last_error());
        return 1;
    }
    kt_moe_info info = KT_MOE_INFO_INIT;
    kt_moe_backend_info(moe, &info);
    int H = (int)info.hidden, I = (int)info.intermediate, E = (int)info.n_experts;
    int k = (int)top_k;
    /* the file's layer numbers: probe which are MoE layers */
    int32_t layers[1024];
    int n_layers = 0;
    {
        int32_t zero = 0;
        kt_moe_io io = KT_MOE_IO_INIT;
        float dummy[1] = {0};
        int32_t id[1] = {-1};
        io.n_tokens = &zero;
        io.top_k = 1;
        io.x = dummy;
        io.ids = id;
        io.w = dummy;
        io.out = dummy;
        io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
        for (int l = 0; l < 1024 && n_layers < (int)info.n_layers; l++)
            if (kt_moe_forward(moe, (uint32_t)l, &io) == KT_OK)
                layers[n_layers++] = l;
    }
    printf("%s: %d MoE layers, H %d, I %d, E %d, k %d, %.2f MiB per expert, %s, %d threads\n",
           path, n_layers, H, I, E, k, (double)info.expert_bytes / 1048576.0, info.isa,
           info.n_threads);
    if (info.pool_bytes) /* Q4_0 repacked for decode (KT_LF_REPACK), pools' slices */
        printf("  expert copies beside the file: %.1f MiB (%s, %d pool%s)\n",
               (double)info.pool_bytes / 1048576.0, info.pool_memory, (int)info.n_pools,
               info.n_pools > 1 ? "s" : "");
    /* the backend's workers: the threads its creation started; the stream
     * team's: those team_create starts */
    clean_watch cw;
    clean_watch_init(&cw);
    bool watched = clean_watch_calls(&cw, ids_before, n_before);
    static int ids_pool[1024];
    int n_pool = bench_thread_ids(ids_pool, 1024);
    bench_team *team = team_create(info.n_threads);
    if (!watched || !clean_watch_stream(&cw, ids_pool, n_pool))
        printf("  no clean-call figures (plain ones only): %s\n", cw.why);
    /* The second decode yardstick, kt-bench moe --model's: single read passes over
     * 8x L3 (at least 256 MiB) taken between the calls every ~50 ms, their
     * median. The first (best of 5 passes over --stream-size before the calls)
     * stays for comparison with older runs; on a shared VM the best pass reads
     * 10-30% above the median one, so the two tools' ratios differ by as much. */
    stream_buf *sb = NULL;
    bench_hw hw;
    {
        bench_hw_detect(&hw);
        uint64_t l3 = hw.l3_bytes ? hw.l3_bytes : (32ull << 20);
        uint64_t sbytes = 8 * l3 < (256ull << 20) ? (256ull << 20) : 8 * l3;
        sb = team ? stream_buf_create(team, sbytes) : NULL;
    }
    double *bw = NULL;
    float *x = malloc((size_t)t_max * H * sizeof(float));
    float *out = malloc((size_t)t_max * H * sizeof(float));
    int32_t *ids = malloc((size_t)t_max * k * sizeof(int32_t));
    float *w = malloc((size_t)t_max * k * sizeof(float));
    int32_t *counts = malloc((size_t)E * sizeof(int32_t));
    double *samples = malloc(100000 * sizeof(double));
    bw = malloc(100000 * sizeof(double));
    /* the clean calls' GB/s, every stream window's and the clean windows' */
    double *clean = malloc(100000 * sizeof(double));
    double *win = malloc(100000 * sizeof(double)), *win_clean = malloc(100000 * sizeof(double));
    bench_json *json = json_path ? json_open(json_path, &hw, info.n_threads) : NULL;
    if (!x || !out || !ids || !w || !counts || !samples || !bw || !clean || !win || !win_clean ||
        (json_path && !json)) {
        fprintf(stderr, json_path && !json ? "kt-bench moe: cannot write '%s'\n"
                                           : "kt-bench moe: out of memory for the buffers\n",
                json_path);
        free(x); free(out); free(ids); free(w); free(counts); free(samples); free(bw);
        free(clean); free(win); free(win_clean);
        stream_buf_free(sb);
        team_free(team);
        kt_moe_backend_free(moe);
        return 1;
    }
    uint64_t seed = 12345;
    for (int64_t i = 0; i < t_max * H; i++)
        x[i] = (float)((int64_t)(bench_rng(&seed) % 2001) - 1000) * 1e-3f;
    /* oneDNN yardstick for prefill: random BF16 experts of the same shape */
    void *gm = NULL;
    uint16_t **bwt = NULL;
    if (onednn && gemm_available() && (bwt = calloc(3 * (size_t)E, sizeof *bwt))) {
        for (int p = 0; p < 3 * E; p++) {
            if (!(bwt[p] = malloc((size_t)H * I * 2))) {
                fprintf(stderr, "kt-bench moe: out of memory for oneDNN's weights\n");
                return 1;
            }
            for (size_t q = 0; q < (size_t)H * I; q++)
                bwt[p][q] = (uint16_t)(0x3c00 + (bench_rng(&seed) & 0xff));
        }
        gemm_set_threads(info.n_threads);
        gm = gemm_moe_create(GEMM_BF16, H, I, E, 1, (const void *const *)bwt,
                             (const void *const *)bwt + E, (const void *const *)bwt + 2 * E);
        if (gm && t_max > 16)
            gemm_moe_pack(gm, (int32_t)(t_max * k / E > 0 ? t_max * k / E : 1));
    }
    for (int ti = 0; ti < n_tokens; ti++) {
        int T = (int)tokens[ti];
        int32_t nt = T;
        kt_moe_io io = KT_MOE_IO_INIT;
        io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
        io.n_tokens = &nt;
        io.top_k = (uint32_t)k;
        io.x = x;
        io.ids = ids;
        io.w = w;
        io.out = out;
        double stream = 0;
        if (T <= 16) {
            stream_result sr;
            if (stream_measure(team, (uint64_t)stream_mib << 20, 5, true, &sr))
                stream = sr.read_gbs;
        }
        int n = 0, nbw = 0, n_clean = 0, n_win = 0, n_win_clean = 0;
        uint64_t win_at = 0;
        bool watch = T <= 16 && sb && clean_watch_on(&cw);
        double busy = 0, since_sample = 0;
        for (int call = 0; n < 100000; call++) {
            if (T <= 16 && sb && call >= n_layers && (nbw == 0 || since_sample >= 0.05) &&
                nbw < 100000) {
                bw[nbw++] = stream_buf_read(team, sb);
                since_sample = 0;
                if (watch && n_win + cw.windows <= 100000) { /* the clean stream's reads */
                    n_win_clean += clean_stream_windows(&cw, team, sb, &win_at, win + n_win,
                                                        win_clean + n_win_clean);
                    n_win += cw.windows;
                }
            }
            route(&seed, T, k, E, ids, w, counts);
            int distinct = 0;
            for (int e = 0; e < E; e++)
                distinct += counts[e] > 0;
            uint64_t w0 = watch ? clean_calls_wait(&cw) : 0;
            double t0 = bench_now();
            if (kt_moe_forward(moe, (uint32_t)layers[call % n_layers], &io) < 0) {
                fprintf(stderr, "kt-bench moe: %s\n", kt_last_error());
                return 1;
            }
            double dt = bench_now() - t0;
            double waited = watch ? (double)(clean_calls_wait(&cw) - w0) : 0;
            if (call < n_layers) /* warm-up: one pass over the layers */
                continue;
            busy += dt;
            since_sample += dt;
            samples[n++] = T <= 16 ? (double)distinct * (double)info.expert_bytes / dt * 1e-9
                                   : 6.0 * H * I * (double)k * T / dt * 1e-12;
            if (watch && waited <= cw.limit_ns)
                clean[n_clean++] = samples[n - 1];
            if (watch && cw.debug)
                fprintf(stderr, "clean-debug call %.3f GB/s waited %.1f us\n", samples[n - 1],
                        waited * 1e-3);
            if (busy >= min_time && n >= 3 && (T > 16 || !sb || nbw >= 5))
                break;
        }
        qsort(samples, (size_t)n, sizeof(double), cmp_double);
        double med = samples[n / 2];
        double between = median_of(bw, nbw), dnn = 0;
        double clean_med = median_of(clean, n_clean), win_clean_med = 0, win_med = 0;
        if (T <= 16) {
            printf("  T=%-5d %8.2f GB/s of expert blocks  (stream read %.2f GB/s: %.2f)", T, med,
                   stream, stream > 0 ? med / stream : 0.0);
            if (nbw)
                printf("  between the calls %.2f GB/s: %.2f (median of %d)", between,
                       med / between, nbw);
            printf("\n");
            if (watch) {
                win_clean_med = median_of(win_clean, n_win_clean);
                win_med = median_of(win, n_win);
                printf("         clean (run-queue wait <= %.0f us): %.2f GB/s (%d of %d calls)  "
                       "stream %.2f GB/s (%d of %d reads of %.0f MiB; all of them %.2f): %.2f\n",
                       cw.limit_ns * 1e-3, clean_med, n_clean, n, win_clean_med, n_win_clean,
                       n_win, (double)cw.window_bytes / 1048576.0, win_med,
                       n_clean && n_win_clean ? clean_med / win_clean_med : 0.0);
            }
        } else {
            if (gm) {
                double best = 1e30;
                for (int r = 0; r < 5; r++) {
                    route(&seed, T, k, E, ids, w, counts);
                    double dt = gemm_moe_run(gm, 0, counts);
                    if (dt > 0 && dt < best)
                        best = dt;
                }
                if (best < 1e30)   /* else no run: BF16 has no kernel on this CPU */
                    dnn = 6.0 * H * I * (double)k * T / best * 1e-12;
            }
            if (dnn > 0)
                printf("  T=%-5d %8.4f TFLOP/s  (oneDNN BF16 per-expert matmuls %.4f TFLOP/s: "
                       "%.2fx)\n", T, med, dnn, med / dnn);
            else
                printf("  T=%-5d %8.4f TFLOP/s  (no oneDNN BF16 yardstick: %s)\n", T, med,
                       !onednn ? "--no-onednn" : gemm_available() ? gemm_last_error()
                                                                   : "built without oneDNN");
        }
        if (json) {
            /* the clean members as kt-bench moe --model's rows (null: none) */
            char cj[448], cg[32] = "null", cs[32] = "null", cr[32] = "null";
            if (watch) {
                if (n_clean)
                    snprintf(cg, sizeof cg, "%.3f", clean_med);
                if (n_win_clean)
                    snprintf(cs, sizeof cs, "%.3f", win_clean_med);
                if (n_clean && n_win_clean)
                    snprintf(cr, sizeof cr, "%.4f", clean_med / win_clean_med);
                snprintf(cj, sizeof cj, "\"clean_gbs\":%s,\"clean_stream_gbs\":%s,"
                         "\"clean_ratio\":%s,\"clean_calls\":%d,\"clean_stream_samples\":%d,"
                         "\"stream_windows\":%d,\"stream_window_gbs\":%.3f,\"clean_wait_us\":%.0f",
                         cg, cs, cr, n_clean, n_win_clean, n_win, win_med, cw.limit_ns * 1e-3);
            } else {
                snprintf(cj, sizeof cj, "\"clean_gbs\":null,\"clean_stream_gbs\":null,"
                         "\"clean_ratio\":null,\"clean_calls\":null,"
                         "\"clean_stream_samples\":null,\"stream_windows\":null,"
                         "\"stream_window_gbs\":null,\"clean_wait_us\":null");
            }
            cJSON *name = cJSON_CreateString(path);
            char *quoted = name ? cJSON_PrintUnformatted(name) : NULL;
            json_row(json,
                     "\"bench\":\"moe\",\"method\":\"LLAMAFILE\",\"file\":%s,\"H\":%d,\"I\":%d,"
                     "\"E\":%d,\"k\":%d,\"layers\":%d,\"expert_bytes\":%llu,\"T\":%d,"
                     "\"phase\":\"%s\",\"gbs\":%.3f,\"stream_gbs\":%.3f,\"stream_best_gbs\":%.3f,"
                     "\"stream_samples\":%d,\"tflops\":%.5f,\"onednn_tflops\":%.5f,"
                     "\"calls\":%d,%s,\"threads\":%d,\"isa\":\"%s\"",
                     quoted ? quoted : "null", H, I, E, k, n_layers,
                     (unsigned long long)info.expert_bytes, T, T <= 16 ? "decode" : "prefill",
                     T <= 16 ? med : 0.0, between, stream, nbw, T <= 16 ? 0.0 : med, dnn, n, cj,
                     (int)info.n_threads, info.isa ? info.isa : "?");
            cJSON_free(quoted);
            cJSON_Delete(name);
        }
        fflush(stdout);
    }
    if (gm)
        gemm_moe_free(gm);
    if (bwt) {
        for (int p = 0; p < 3 * E; p++)
            free(bwt[p]);
        free(bwt);
    }
    int rc = 0;
    if (json && !json_close(json)) {
        fprintf(stderr, "kt-bench moe: error writing '%s'\n", json_path);
        rc = 1;
    }
    stream_buf_free(sb);
    clean_watch_free(&cw);
    free(bw);
    free(clean);
    free(win);
    free(win_clean);
    team_free(team);
    free(x); free(out); free(ids); free(w); free(counts); free(samples);
    kt_moe_backend_free(moe);
    return rc;
}
