/* kt-bench placement: replays routing traces and reports, per placement
 * strategy and GPU budget, the share of routed (token, expert) pairs the GPU
 * would serve and the expert bytes the CPU would read per decoded token.
 *
 * The trace comes from a model run (--model DIR: the engine evaluates the
 * held-out ids of DIR/reference.safetensors, or --ids FILE, recording every
 * MoE layer's routed ids) or from a saved trace (--trace FILE). The first
 * --calib share of the tokens is calibration (statistics for `frequency`),
 * the rest is evaluated: static strategies are scored on it, and the dynamic
 * rebalancer replays it token by token (as decode would), moving experts
 * when its gain-vs-copy rule says so. No GPU is needed. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <kt/kt.h>

#include "opt.h"

#define TOOL "kt-bench placement"

/* ---- held-out ids from a safetensors file (tensor I32 [n]) -------------------- */

static int32_t *read_ids(const char *path, const char *tensor, size_t *n_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, TOOL ": %s: %s\n", path, strerror(errno));
        return NULL;
    }
    int32_t *ids = NULL;
    char *hdr = NULL;
    cJSON *root = NULL;
    unsigned char len8[8];
    if (fread(len8, 1, 8, f) != 8)
        goto bad;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len8[i];
    if (hlen == 0 || hlen > (64u << 20))
        goto bad;
    hdr = malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen)
        goto bad;
    hdr[hlen] = '\0';
    root = cJSON_Parse(hdr);
    cJSON *t = root ? cJSON_GetObjectItem(root, tensor) : NULL;
    cJSON *dt = t ? cJSON_GetObjectItem(t, "dtype") : NULL;
    cJSON *off = t ? cJSON_GetObjectItem(t, "data_offsets") : NULL;
    if (!t || !cJSON_IsString(dt) || strcmp(dt->valuestring, "I32") ||
        cJSON_GetArraySize(off) != 2) {
        fprintf(stderr, TOOL ": %s: no I32 tensor '%s'\n", path, tensor);
        goto fail;
    }
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, e = cJSON_GetArrayItem(off, 1)->valuedouble;
    size_t n = (size_t)(e - b) / 4;
    ids = malloc(n * 4 + 4);
    if (!ids || fseek(f, (long)(8 + hlen + (uint64_t)b), SEEK_SET) != 0 ||
        fread(ids, 4, n, f) != n)
        goto bad;
    *n_out = n;
    cJSON_Delete(root);
    free(hdr);
    fclose(f);
    return ids;
bad:
    fprintf(stderr, TOOL ": %s: not a readable safetensors file\n", path);
fail:
    cJSON_Delete(root);
    free(hdr);
    free(ids);
    fclose(f);
    return NULL;
}

/* ---- trace from a model run -------------------------------------------------- */

static kt_route_trace *run_model(const char *dir, const char *ids_path, const char *tensor,
                                 int batch, uint64_t *expert_bytes)
{
    char ref[4096];
    if (!ids_path) {
        snprintf(ref, sizeof ref, "%s/reference.safetensors", dir);
        ids_path = ref;
    }
    size_t n = 0;
    int32_t *ids = read_ids(ids_path, tensor, &n);
    if (!ids)
        return NULL;
    kt_model *m = NULL;
    kt_context *ctx = NULL;
    kt_route_trace *trace = NULL;
    if (kt_model_open(&m, NULL, dir, NULL) < 0)
        goto fail;
    kt_memory_estimate est;
    est.struct_size = sizeof est;
    if (kt_model_estimate(m, NULL, &est) < 0)
        goto fail;
    *expert_bytes = est.expert_bytes;
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = (int32_t)n;
    co.n_batch = batch;
    if (kt_context_create(&ctx, NULL, m, &co) < 0)
        goto fail;
    kt_arch_info a;
    a.struct_size = sizeof a;
    kt_model_arch(m, &a);
    if (kt_route_trace_create(&trace, a.n_layers, a.n_routed_experts, a.n_experts_per_tok) < 0 ||
        kt_context_set_route_trace(ctx, trace) < 0 || kt_context_eval(ctx, ids, n, NULL, 0) < 0)
        goto fail;
    fprintf(stderr, TOOL ": %s: %zu tokens routed (%u layers, %u experts, top %u)\n", dir, n,
            a.n_layers, a.n_routed_experts, a.n_experts_per_tok);
    kt_context_free(ctx);
    kt_model_free(m);
    free(ids);
    return trace;
fail:
    fprintf(stderr, TOOL ": %s: %s\n", dir, kt_last_error());
    kt_route_trace_free(trace);
    kt_context_free(ctx);
    kt_model_free(m);
    free(ids);
    return NULL;
}

/* ---- per-token view of a trace ----------------------------------------------- */

typedef struct token_routes {
    uint32_t L, E, k;
    size_t n_tokens;
    int32_t *ids;       /* [n_tokens][L][k], -1 where a layer routed nothing */
    uint8_t *moe;       /* [L] layers seen in the trace                      */
} token_routes;

static bool unpack(const kt_route_trace *t, token_routes *r)
{
    r->L = kt_route_trace_n_layers(t);
    r->E = kt_route_trace_n_experts(t);
    r->k = kt_route_trace_top_k(t);
    size_t nrec = kt_route_trace_n_records(t), total = 0, step = 0;
    int64_t prev = -1;
    for (size_t i = 0; i < nrec; i++) { /* tokens = sum of each step's first record */
        uint32_t layer, nt;
        kt_route_trace_get(t, i, &layer, &nt, NULL);
        if ((int64_t)layer <= prev || i == 0)
            total += nt;
        prev = layer;
    }
    r->n_tokens = total;
    r->ids = malloc(total * r->L * r->k * sizeof(int32_t) + 4);
    r->moe = calloc(r->L, 1);
    if (!r->ids || !r->moe)
        return false;
    memset(r->ids, 0xff, total * r->L * r->k * sizeof(int32_t));
    size_t base = 0;
    prev = -1;
    for (size_t i = 0; i < nrec; i++) {
        uint32_t layer, nt;
        const int32_t *ids;
        kt_route_trace_get(t, i, &layer, &nt, &ids);
        if ((int64_t)layer <= prev && i > 0)
            base += step;
        step = nt;
        prev = layer;
        r->moe[layer] = 1;
        for (uint32_t j = 0; j < nt && base + j < total; j++)
            memcpy(r->ids + ((base + j) * r->L + layer) * r->k, ids + (size_t)j * r->k,
                   r->k * sizeof(int32_t));
    }
    return true;
}

static const int32_t *tok_layer(const token_routes *r, size_t t, uint32_t l)
{
    return r->ids + (t * r->L + l) * r->k;
}

static void add_stats(const token_routes *r, size_t t0, size_t t1, kt_expert_stats *s)
{
    for (size_t t = t0; t < t1; t++) {
        for (uint32_t l = 0; l < r->L; l++)
            if (r->moe[l])
                kt_expert_stats_record(s, l, tok_layer(r, t, l), r->k);
        kt_expert_stats_add_tokens(s, 1);
    }
}

/* ---- scoring ------------------------------------------------------------------ */

typedef struct score {
    double served;      /* share of pairs on the GPU            */
    double cpu_pairs;   /* per token                            */
    double moves;       /* expert copies per 1000 tokens (dynamic) */
} score;

/* Token t's routed pairs in layer l: all of them counted in *all, those on the GPU in *gpu. */
static void count_pairs(const token_routes *r, const kt_placement *p, size_t t, uint32_t l,
                        double *gpu, double *all)
{
    const int32_t *ids = tok_layer(r, t, l);
    for (uint32_t j = 0; j < r->k; j++)
        if (ids[j] >= 0) {
            (*all)++;
            *gpu += kt_placement_on_gpu(p, l, (uint32_t)ids[j]);
        }
}

/* Static placement over tokens [t0, t1). */
static score score_static(const token_routes *r, const kt_placement *p, size_t t0, size_t t1)
{
    double gpu = 0, all = 0;
    for (size_t t = t0; t < t1; t++)
        for (uint32_t l = 0; l < r->L; l++)
            if (r->moe[l])
                count_pairs(r, p, t, l, &gpu, &all);
    score s = {all > 0 ? gpu / all : 0, (all - gpu) / (double)(t1 - t0), 0};
    return s;
}

/* Dynamic: each token is served by the placement as it stands, then observed;
 * every `every` tokens the rebalancer may propose moves, applied at once. */
static score score_dynamic(const token_routes *r, kt_placement *p, const kt_expert_stats *prior,
                           const kt_rebalancer_options *ro, size_t t0, size_t t1, int every)
{
    score s = {0, 0, 0};
    kt_rebalancer *rb = NULL;
    if (kt_rebalancer_create(&rb, p, prior, ro) < 0) {
        fprintf(stderr, TOOL ": %s\n", kt_last_error());
        return s;
    }
    kt_expert_move moves[64];
    double gpu = 0, all = 0, n_moves = 0;
    for (size_t t = t0; t < t1; t++) {
        for (uint32_t l = 0; l < r->L; l++) {
            if (!r->moe[l])
                continue;
            count_pairs(r, p, t, l, &gpu, &all);
            kt_rebalancer_observe(rb, l, tok_layer(r, t, l), r->k);
        }
        kt_rebalancer_advance(rb, 1);
        if ((t - t0 + 1) % (size_t)every == 0) {
            size_t nm = 0;
            if (kt_rebalancer_plan(rb, moves, sizeof moves / sizeof moves[0], &nm) == KT_OK &&
                nm) {
                kt_rebalancer_apply(rb, moves, nm);
                n_moves += (double)nm;
            }
        }
    }
    kt_rebalancer_free(rb);
    s.served = all > 0 ? gpu / all : 0;
    s.cpu_pairs = (all - gpu) / (double)(t1 - t0);
    s.moves = n_moves * 1000.0 / (double)(t1 - t0);
    return s;
}

/* ---- from statistics files only ---------------------------------------------------- */

/* Scores static strategies against recorded counts (no trace: no dynamic
 * replay); frequency comes from a separate calibration file when given. */
static int stats_only(const char *eval_path, const char *calib_path, const double *budgets,
                      int n_budgets, uint64_t expert_bytes, uint64_t seed)
{
    kt_expert_stats *ev = NULL, *cal = NULL;
    int rc = 1;
    uint8_t *moe = NULL;
    if (kt_expert_stats_load(&ev, eval_path) < 0 ||
        (calib_path && kt_expert_stats_load(&cal, calib_path) < 0)) {
        fprintf(stderr, TOOL ": %s\n", kt_last_error());
        goto done;
    }
    const uint32_t L = kt_expert_stats_n_layers(ev), E = kt_expert_stats_n_experts(ev);
    if (cal && (kt_expert_stats_n_layers(cal) != L || kt_expert_stats_n_experts(cal) != E)) {
        fprintf(stderr, TOOL ": %s and %s have different shapes\n", eval_path, calib_path);
        goto done;
    }
    moe = calloc(L, 1);
    if (!moe)
        goto done;
    double pairs = 0;
    uint32_t n_moe = 0;
    for (uint32_t l = 0; l < L; l++) {
        double row = 0;
        for (uint32_t e = 0; e < E; e++)
            row += kt_expert_stats_count(ev, l, e);
        moe[l] = row > 0; /* layers that routed anything */
        n_moe += moe[l];
        pairs += row;
    }
    uint64_t tokens = kt_expert_stats_tokens(ev);
    if (!n_moe || !tokens) {
        fprintf(stderr, TOOL ": %s: no tokens or no counts\n", eval_path);
        goto done;
    }
    double per_token = pairs / (double)tokens;
    printf("placement from statistics: %s, %llu tokens, %u MoE layers x %u experts, %.2f routed "
           "pairs per token\n\n| budget | uniform | front-loading | random |%s oracle |\n"
           "|---|---|---|---|%s---|\n",
           eval_path, (unsigned long long)tokens, n_moe, E, per_token,
           cal ? " frequency |" : "", cal ? "---|" : "");
    for (int b = 0; b < n_budgets; b++) {
        printf("| %g%% |", budgets[b] * 100);
        static const int32_t strategies[] = {KT_PLACEMENT_UNIFORM, KT_PLACEMENT_FRONT_LOADING,
                                             KT_PLACEMENT_RANDOM, KT_PLACEMENT_FREQUENCY,
                                             KT_PLACEMENT_FREQUENCY};
        for (int s = 0; s < 5; s++) {
            if (s == 3 && !cal)
                continue;
            kt_placement_options po = KT_PLACEMENT_OPTIONS_INIT;
            po.budget = KT_BUDGET_RATIO;
            po.ratio = budgets[b];
            po.seed = seed;
            po.strategy = strategies[s];
            po.stats = s == 3 ? cal : ev;
            kt_placement *p = NULL;
            if (kt_placement_create(&p, L, E, moe, &po) < 0) {
                fprintf(stderr, TOOL ": %s\n", kt_last_error());
                goto done;
            }
            double cov = kt_placement_coverage(p, ev);
            kt_placement_free(p);
            printf(" %.1f%% (%.2f) |", cov * 100,
                   (1 - cov) * per_token * (double)expert_bytes / 1e6);
        }
        printf("\n");
    }
    printf("\nCPU MB read per token in brackets (%.3f MB per expert)%s\n",
           (double)expert_bytes / 1e6, cal ? "; frequency from the calibration file" : "");
    rc = 0;
done:
    free(moe);
    kt_expert_stats_free(ev);
    kt_expert_stats_free(cal);
    return rc;
}

/* ---- the command ----------------------------------------------------------------- */

enum { S_UNIFORM, S_FRONT, S_RANDOM, S_FREQ, S_FILE, S_DYN, S_FREQ_DYN, S_ORACLE, N_STRAT };
static const char *const strat_names[N_STRAT] = {
    "uniform", "front-loading", "random", "frequency", "frequency(file)", "dynamic",
    "frequency+dynamic", "oracle"};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench placement (--model DIR | --trace FILE | --stats FILE) [OPTIONS]\n"
            "\n"
            "Replays routing traces: per strategy and GPU budget, the share of routed\n"
            "(token, expert) pairs the GPU serves and the expert bytes the CPU reads per token.\n"
            "\n"
            "  --model DIR        run the engine over DIR's held-out ids to record a trace\n"
            "  --ids FILE         safetensors file with them (default DIR/reference.safetensors)\n"
            "  --ids-tensor NAME  I32 tensor holding them (default heldout_ids)\n"
            "  --trace FILE       replay a saved trace (kt_route_trace_save format)\n"
            "  --trace-out FILE   save the recorded trace\n"
            "  --stats FILE       also score `frequency` from this statistics file (JSON/.npy);\n"
            "                     alone: score static strategies against its counts\n"
            "  --calib-stats FILE with --stats alone: `frequency` from these counts\n"
            "  --stats-out FILE   save the calibration part's statistics (JSON)\n"
            "  --calib X          share of tokens used for calibration (default 0.5)\n"
            "  --budgets LIST     GPU shares of routed experts in percent (default 10,...,90)\n"
            "  --expert-bytes N   bytes of one expert (default: from --model)\n"
            "  --every N          dynamic: plan every N tokens (default 8)\n"
            "  --seed N           random strategy seed (default 42)\n"
            "  --json FILE        also write the table as JSON\n");
}

int cmd_placement(int argc, char **argv)
{
    const char *model = NULL, *ids_path = NULL, *tensor = "heldout_ids", *trace_path = NULL;
    const char *trace_out = NULL, *stats_path = NULL, *stats_out = NULL, *json_path = NULL;
    const char *calib_stats = NULL;
    const char *budgets_text = "10,20,30,40,50,60,70,80,90";
    double calib = 0.5;
    int64_t every = 8, seed = 42, expert_bytes_arg = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--model", true, &model, &bad) ||
                   opt_match(argc, argv, &i, "--ids", true, &ids_path, &bad) ||
                   opt_match(argc, argv, &i, "--ids-tensor", true, &tensor, &bad) ||
                   opt_match(argc, argv, &i, "--trace", true, &trace_path, &bad) ||
                   opt_match(argc, argv, &i, "--trace-out", true, &trace_out, &bad) ||
                   opt_match(argc, argv, &i, "--stats", true, &stats_path, &bad) ||
                   opt_match(argc, argv, &i, "--stats-out", true, &stats_out, &bad) ||
                   opt_match(argc, argv, &i, "--calib-stats", true, &calib_stats, &bad) ||
                   opt_match(argc, argv, &i, "--json", true, &json_path, &bad) ||
                   opt_match(argc, argv, &i, "--budgets", true, &budgets_text, &bad)) {
            if (bad)
                return 2;
        } else if (opt_match(argc, argv, &i, "--calib", true, &v, &bad)) {
            if (bad || !opt_parse_f64(TOOL, "--calib", v, 0.01, 0.99, &calib))
                return 2;
        } else if (opt_match(argc, argv, &i, "--every", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--every", v, 1, 1 << 20, &every))
                return 2;
        } else if (opt_match(argc, argv, &i, "--seed", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--seed", v, 0, INT64_MAX, &seed))
                return 2;
        } else if (opt_match(argc, argv, &i, "--expert-bytes", true, &v, &bad)) {
            if (bad ||
                !opt_parse_i64(TOOL, "--expert-bytes", v, 1, INT64_MAX, &expert_bytes_arg))
                return 2;
        } else {
            fprintf(stderr, TOOL ": unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    if ((model && trace_path) || (!model && !trace_path && !stats_path)) {
        fprintf(stderr, TOOL ": give one of --model DIR, --trace FILE or --stats FILE\n");
        return 2;
    }
    double budgets[64];
    int n_budgets = 0;
    for (const char *p = budgets_text; *p && n_budgets < 64;) {
        char *end;
        double b = strtod(p, &end);
        if (end == p || !(b > 0 && b < 100) || (*end && *end != ',')) {
            fprintf(stderr, TOOL ": --budgets: '%s' is not a list of percents in (0, 100)\n",
                    budgets_text);
            return 2;
        }
        budgets[n_budgets++] = b / 100.0;
        p = *end ? end + 1 : end;
    }

    uint64_t expert_bytes = (uint64_t)expert_bytes_arg;
    if (!model && !trace_path)
        return stats_only(stats_path, calib_stats, budgets, n_budgets,
                          expert_bytes ? expert_bytes : 1000000, (uint64_t)seed);
    kt_route_trace *trace = NULL;
    if (trace_path) {
        if (kt_route_trace_load(&trace, trace_path) < 0) {
            fprintf(stderr, TOOL ": %s\n", kt_last_error());
            return 1;
        }
    } else {
        uint64_t eb = 0;
        trace = run_model(model, ids_path, tensor, 512, &eb);
        if (!trace)
            return 1;
        if (!expert_bytes)
            expert_bytes = eb;
    }
    int rc = 1;
    token_routes r = {0};
    kt_expert_stats *cal = NULL, *eval_stats = NULL, *file_stats = NULL;
    cJSON *json = NULL;
    if (trace_out && kt_route_trace_save(trace, trace_out) < 0) {
        fprintf(stderr, TOOL ": %s\n", kt_last_error());
        goto done;
    }
    if (!unpack(trace, &r) || r.n_tokens < 4) {
        fprintf(stderr, TOOL ": the trace holds %zu tokens; need at least 4\n", r.n_tokens);
        goto done;
    }
    size_t n_cal = (size_t)((double)r.n_tokens * calib);
    if (n_cal < 1)
        n_cal = 1;
    if (kt_expert_stats_create(&cal, r.L, r.E) < 0 ||
        kt_expert_stats_create(&eval_stats, r.L, r.E) < 0)
        goto done;
    add_stats(&r, 0, n_cal, cal);
    add_stats(&r, n_cal, r.n_tokens, eval_stats);
    if (stats_out && kt_expert_stats_save(cal, stats_out) < 0) {
        fprintf(stderr, TOOL ": %s\n", kt_last_error());
        goto done;
    }
    if (stats_path) {
        if (kt_expert_stats_load(&file_stats, stats_path) < 0) {
            fprintf(stderr, TOOL ": %s\n", kt_last_error());
            goto done;
        }
        if (kt_expert_stats_n_layers(file_stats) != r.L ||
            kt_expert_stats_n_experts(file_stats) != r.E) {
            fprintf(stderr, TOOL ": %s: %u x %u statistics, the trace is %u x %u\n", stats_path,
                    kt_expert_stats_n_layers(file_stats), kt_expert_stats_n_experts(file_stats),
                    r.L, r.E);
            goto done;
        }
    }
    uint32_t n_moe = 0;
    for (uint32_t l = 0; l < r.L; l++)
        n_moe += r.moe[l];
    printf("placement replay: %zu tokens (%zu calibration, %zu evaluated), %u MoE layers x %u "
           "experts, top %u, %.3f MB per expert\n",
           r.n_tokens, n_cal, r.n_tokens - n_cal, n_moe, r.E, r.k, (double)expert_bytes / 1e6);
    printf("GPU-served share of routed (token, expert) pairs, evaluated part; "
           "CPU MB read per token in brackets\n\n");
    printf("| budget |");
    for (int s = 0; s < N_STRAT; s++)
        if (s != S_FILE || file_stats)
            printf(" %s |", strat_names[s]);
    printf("\n|---|");
    for (int s = 0; s < N_STRAT; s++)
        if (s != S_FILE || file_stats)
            printf("---|");
    printf("\n");
    json = cJSON_CreateObject();
    cJSON_AddNumberToObject(json, "tokens", (double)r.n_tokens);
    cJSON_AddNumberToObject(json, "calibration_tokens", (double)n_cal);
    cJSON_AddNumberToObject(json, "expert_bytes", (double)expert_bytes);
    cJSON *rows = cJSON_AddArrayToObject(json, "rows");
    kt_rebalancer_options ro = KT_REBALANCER_OPTIONS_INIT;
    ro.half_life_tokens = 256;
    ro.horizon_tokens = 1024;
    for (int b = 0; b < n_budgets; b++) {
        printf("| %g%% |", budgets[b] * 100);
        for (int s = 0; s < N_STRAT; s++) {
            if (s == S_FILE && !file_stats)
                continue;
            kt_placement_options po = KT_PLACEMENT_OPTIONS_INIT;
            po.budget = KT_BUDGET_RATIO;
            po.ratio = budgets[b];
            po.seed = (uint64_t)seed;
            const kt_expert_stats *prior = NULL;
            switch (s) {
            case S_UNIFORM: case S_DYN: po.strategy = KT_PLACEMENT_UNIFORM; break;
            case S_FRONT: po.strategy = KT_PLACEMENT_FRONT_LOADING; break;
            case S_RANDOM: po.strategy = KT_PLACEMENT_RANDOM; break;
            case S_FREQ: case S_FREQ_DYN:
                po.strategy = KT_PLACEMENT_FREQUENCY, po.stats = cal, prior = cal;
                break;
            case S_FILE: po.strategy = KT_PLACEMENT_FREQUENCY, po.stats = file_stats; break;
            case S_ORACLE: po.strategy = KT_PLACEMENT_FREQUENCY, po.stats = eval_stats; break;
            }
            kt_placement *p = NULL;
            if (kt_placement_create(&p, r.L, r.E, r.moe, &po) < 0) {
                fprintf(stderr, TOOL ": %s\n", kt_last_error());
                goto done;
            }
            score sc = s == S_DYN || s == S_FREQ_DYN
                           ? score_dynamic(&r, p, prior, &ro, n_cal, r.n_tokens, (int)every)
                           : score_static(&r, p, n_cal, r.n_tokens);
            kt_placement_free(p);
            double mb = sc.cpu_pairs * (double)expert_bytes / 1e6;
            printf(" %.1f%% (%.2f) |", sc.served * 100, mb);
            cJSON *row = cJSON_CreateObject();
            cJSON_AddNumberToObject(row, "budget", budgets[b]);
            cJSON_AddStringToObject(row, "strategy", strat_names[s]);
            cJSON_AddNumberToObject(row, "gpu_served", sc.served);
            cJSON_AddNumberToObject(row, "cpu_bytes_per_token",
                                    sc.cpu_pairs * (double)expert_bytes);
            cJSON_AddNumberToObject(row, "moves_per_1000_tokens", sc.moves);
            cJSON_AddItemToArray(rows, row);
        }
        printf("\n");
    }
    printf("\nfrequency: counts of the calibration part; oracle: counts of the evaluated part "
           "itself (upper bound of a static placement); dynamic: starts uniform, rebalances "
           "every %lld tokens (half-life %.0f tokens, hysteresis %.2f, move cost %.0f pairs)\n\n",
           (long long)every, ro.half_life_tokens, ro.hysteresis, ro.move_cost_pairs);
    if (json_path) {
        char *text = cJSON_Print(json);
        FILE *f = text ? fopen(json_path, "w") : NULL;
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, TOOL ": cannot write %s\n", json_path);
            free(text);
            goto done;
        }
        free(text);
    }
    rc = 0;
done:
    cJSON_Delete(json);
    kt_expert_stats_free(cal);
    kt_expert_stats_free(eval_stats);
    kt_expert_stats_free(file_stats);
    free(r.ids);
    free(r.moe);
    kt_route_trace_free(trace);
    return rc;
}
