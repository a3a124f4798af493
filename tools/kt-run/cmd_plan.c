/* kt-run --dry-run (also `kt-run plan`): resolves what a run would use —
 * model, method, threads, pools, tensor parallel size, GPU experts and their
 * placement, memory per device — without loading any weight, and fails early
 * when the machine cannot hold it. Resolution order: command-line flags, then
 * the model registry's defaults, then hardware detection. Public API only. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <kt/kt.h>

#include "commands.h"
#include "opt.h"

#define TOOL "kt-run --dry-run"
#define GB 1e9

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run --dry-run ALIAS|MODEL_DIR [OPTIONS]   (or: kt-run plan ...)\n"
            "\n"
            "Prints the resolved plan of a run without loading weights: model, method,\n"
            "threads, pools, tensor parallel size, GPU experts per layer and their placement,\n"
            "memory per device, where the weights are expected. Values come from the flags,\n"
            "else the model registry, else this machine (each line says which).\n"
            "\n"
            "  ALIAS|MODEL_DIR             registry name (kt-run plan --list) or directory\n"
            "  --json                      machine-readable plan\n"
            "  --list                      list the registry\n"
            "  --models-dir DIR            where aliases' weights live: DIR/<name> (default\n"
            "                              $KT_MODELS_DIR, else ~/models)\n"
            "  --kt-method M               CPU expert method (BF16, FP8, RAWINT4, AMXINT4, ...)\n"
            "  --kt-cpuinfer N             CPU MoE worker threads\n"
            "  --kt-threadpool-count N     thread pools (NUMA nodes)\n"
            "  --tp, --tensor-parallel-size N   GPUs\n"
            "  --kt-num-gpu-experts N      GPU experts per MoE layer\n"
            "  --kt-gpu-experts-ratio R    share of all routed experts on the GPUs (0..1)\n"
            "  --kt-gpu-budget BYTES       GPU bytes for experts (K/M/G/T suffix, decimal)\n"
            "  --kt-expert-placement-strategy S   uniform, front-loading, random, frequency,\n"
            "                              auto\n"
            "  --kt-expert-stats FILE      activation statistics (JSON or .npy) for frequency\n"
            "  --max-total-tokens N        KV cache tokens\n"
            "  --chunked-prefill-size N    prefill chunk, tokens\n"
            "Planning for another machine (instead of detecting this one):\n"
            "  --hw-ram BYTES --hw-cores N --hw-numa N --hw-gpus N --hw-vram BYTES (per GPU)\n");
}

static bool parse_bytes(const char *flag, const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    double mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1e3; end++; break;
    case 'M': case 'm': mul = 1e6; end++; break;
    case 'G': case 'g': mul = 1e9; end++; break;
    case 'T': case 't': mul = 1e12; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (end == text || *end || errno || !(v >= 0) || v * mul > 1.8e19) {
        fprintf(stderr, TOOL ": %s: '%s' is not a byte count (e.g. 80G)\n", flag, text);
        return false;
    }
    *out = (uint64_t)(v * mul);
    return true;
}

/* One resolved value and where it came from. */
typedef struct item {
    const char *key;
    char value[4160]; /* room for a path of PATH_MAX bytes */
    const char *source; /* flag, registry, model, hardware, assumed, default */
    char note[4224];  /* and for a command naming one */
} item;

typedef struct plan {
    item items[16 + KT_ESTIMATE_MAX_GPUS];
    int n;
    char errors[1024]; /* printed after the plan */
} plan;

static void plan_error(plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void plan_error(plan *p, const char *fmt, ...)
{
    size_t used = strlen(p->errors);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errors + used, sizeof p->errors - used, fmt, ap);
    va_end(ap);
}

static item *add(plan *p, const char *key, const char *source, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static item *add(plan *p, const char *key, const char *source, const char *fmt, ...)
{
    const int cap = (int)(sizeof p->items / sizeof p->items[0]);
    item *it = &p->items[p->n < cap ? p->n++ : cap - 1];
    memset(it, 0, sizeof *it);
    it->key = key;
    it->source = source;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->value, sizeof it->value, fmt, ap);
    va_end(ap);
    return it;
}

/* "548.5 GB", or "12.3 MB" below 1 GB (decimal units). */
static const char *human(uint64_t bytes, char *buf, size_t size)
{
    if ((double)bytes >= GB)
        snprintf(buf, size, "%.1f GB", (double)bytes / GB);
    else
        snprintf(buf, size, "%.1f MB", (double)bytes / 1e6);
    return buf;
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool has_config(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Registry entry whose display name or canonical name is the directory's last part. */
static bool registry_for_dir(const char *dir, kt_registry_entry *e)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    const char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    e->struct_size = sizeof *e;
    for (size_t i = 0; i < kt_registry_count(); i++) {
        kt_registry_get(i, e);
        if (!strcasecmp(base, e->display_name) || !strcasecmp(base, e->name))
            return true;
    }
    return false;
}

static const char *method_of_model(const kt_arch_info *a)
{
    switch (a->quant_method) {
    case KT_QUANT_FP8_BLOCK: return "FP8";
    case KT_QUANT_INT4_PACKED: return "RAWINT4";
    case KT_QUANT_MXFP4: return "MXFP4";
    case KT_QUANT_GGUF: return "LLAMAFILE";
    default: return "BF16";
    }
}

static int list_registry(void)
{
    printf("%-18s %-36s %-8s %-9s %s\n", "name", "hub id", "method", "download", "aliases");
    kt_registry_entry e;
    e.struct_size = sizeof e;
    for (size_t i = 0; i < kt_registry_count(); i++) {
        kt_registry_get(i, &e);
        printf("%-18s %-36s %-8s %6.0f GB %s\n", e.name, e.hub_id, e.method,
               (double)e.download_bytes / GB, e.aliases);
    }
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    const char *target = NULL, *models_dir = NULL, *method_flag = NULL, *strategy_flag = NULL;
    const char *stats_path = NULL;
    bool json = false;
    int64_t threads = -1, pools = -1, tp = -1, per_layer = -1, max_tokens = -1, chunk = -1;
    int64_t hw_cores = -1, hw_numa = -1, hw_gpus = -1;
    double ratio = -1;
    uint64_t budget_bytes = 0, hw_ram = 0, hw_vram = 0;
    bool have_budget = false, have_ram = false, have_vram = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--dry-run"))
            continue;
        if (!strcmp(argv[i], "--list"))
            return list_registry();
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (opt_match(argc, argv, &i, "--model", true, &target, &bad) ||
                   opt_match(argc, argv, &i, "--models-dir", true, &models_dir, &bad) ||
                   opt_match(argc, argv, &i, "--kt-method", true, &method_flag, &bad) ||
                   opt_match(argc, argv, &i, "--kt-expert-placement-strategy", true,
                             &strategy_flag, &bad) ||
                   opt_match(argc, argv, &i, "--kt-expert-stats", true, &stats_path, &bad)) {
            if (bad)
                return 2;
        } else if (opt_match(argc, argv, &i, "--kt-cpuinfer", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--kt-cpuinfer", v, 1, 4096, &threads))
                return 2;
        } else if (opt_match(argc, argv, &i, "--kt-threadpool-count", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--kt-threadpool-count", v, 1, 64, &pools))
                return 2;
        } else if (opt_match(argc, argv, &i, "--tp", true, &v, &bad) ||
                   opt_match(argc, argv, &i, "--tensor-parallel-size", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--tp", v, 0, KT_ESTIMATE_MAX_GPUS, &tp))
                return 2;
        } else if (opt_match(argc, argv, &i, "--kt-num-gpu-experts", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--kt-num-gpu-experts", v, 0, 1 << 20, &per_layer))
                return 2;
        } else if (opt_match(argc, argv, &i, "--kt-gpu-experts-ratio", true, &v, &bad)) {
            if (bad || !opt_parse_f64(TOOL, "--kt-gpu-experts-ratio", v, 0, 1, &ratio))
                return 2;
        } else if (opt_match(argc, argv, &i, "--kt-gpu-budget", true, &v, &bad)) {
            if (bad || !parse_bytes("--kt-gpu-budget", v, &budget_bytes))
                return 2;
            have_budget = true;
        } else if (opt_match(argc, argv, &i, "--max-total-tokens", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--max-total-tokens", v, 1, 1 << 30, &max_tokens))
                return 2;
        } else if (opt_match(argc, argv, &i, "--chunked-prefill-size", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--chunked-prefill-size", v, 1, 1 << 24, &chunk))
                return 2;
        } else if (opt_match(argc, argv, &i, "--hw-ram", true, &v, &bad)) {
            if (bad || !parse_bytes("--hw-ram", v, &hw_ram))
                return 2;
            have_ram = true;
        } else if (opt_match(argc, argv, &i, "--hw-vram", true, &v, &bad)) {
            if (bad || !parse_bytes("--hw-vram", v, &hw_vram))
                return 2;
            have_vram = true;
        } else if (opt_match(argc, argv, &i, "--hw-cores", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--hw-cores", v, 1, 4096, &hw_cores))
                return 2;
        } else if (opt_match(argc, argv, &i, "--hw-numa", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--hw-numa", v, 1, 64, &hw_numa))
                return 2;
        } else if (opt_match(argc, argv, &i, "--hw-gpus", true, &v, &bad)) {
            if (bad || !opt_parse_i64(TOOL, "--hw-gpus", v, 0, KT_ESTIMATE_MAX_GPUS, &hw_gpus))
                return 2;
        } else if (argv[i][0] != '-' && !target) {
            target = argv[i];
        } else {
            fprintf(stderr, TOOL ": unknown option '%s' (try kt-run plan --help)\n", argv[i]);
            return 2;
        }
    }
    if (!target) {
        fprintf(stderr, TOOL ": give a registry name or a model directory (kt-run plan --list "
                        "lists the registry)\n");
        return 2;
    }
    if ((per_layer >= 0) + (ratio >= 0) + have_budget > 1) {
        fprintf(stderr, TOOL ": give at most one of --kt-num-gpu-experts, "
                        "--kt-gpu-experts-ratio and --kt-gpu-budget\n");
        return 2;
    }
    int32_t strategy = KT_PLACEMENT_AUTO;
    if (strategy_flag && (strategy = kt_placement_strategy_from_name(strategy_flag)) < 0) {
        fprintf(stderr, TOOL ": --kt-expert-placement-strategy: unknown '%s' (uniform, "
                        "front-loading, random, frequency, auto)\n", strategy_flag);
        return 2;
    }

    /* ---- hardware: detected unless assumed ---- */
    kt_hw_info hw = KT_HW_INFO_INIT;
    kt_hw_query(&hw);
    const char *hw_src = "hardware";
    if (have_ram || hw_cores > 0 || hw_numa > 0 || hw_gpus >= 0 || have_vram)
        hw_src = "assumed";
    uint64_t ram = have_ram ? hw_ram : hw.ram_total;
    int64_t cores = hw_cores > 0 ? hw_cores : hw.physical_cores;
    int64_t numa = hw_numa > 0 ? hw_numa : hw.numa_nodes;
    int64_t gpus = hw_gpus >= 0 ? hw_gpus : hw.gpus;
    uint64_t vram_total[KT_ESTIMATE_MAX_GPUS] = {0}, vram_free[KT_ESTIMATE_MAX_GPUS] = {0};
    for (int64_t g = 0; g < gpus && g < KT_ESTIMATE_MAX_GPUS; g++) {
        if (have_vram || hw_gpus >= 0) {
            vram_total[g] = vram_free[g] = hw_vram;
        } else {
            kt_hw_gpu d = KT_HW_GPU_INIT;
            if (kt_hw_gpu_query(&d, (int32_t)g) == KT_OK) {
                vram_total[g] = d.memory_total;
                vram_free[g] = d.memory_free;
            }
        }
    }

    /* ---- the model: a directory, or a registry entry (its weights or its config) ---- */
    plan P = {.n = 0};
    kt_registry_entry reg;
    reg.struct_size = sizeof reg;
    bool have_reg = false;
    kt_model *model = NULL;
    char weights_dir[8192] = "";
    bool weights_present = false;
    if (is_dir(target) || strchr(target, '/')) {
        have_reg = registry_for_dir(target, &reg);
        snprintf(weights_dir, sizeof weights_dir, "%s", target);
        /* maps the files and checks every tensor the config implies (no weight is read) */
        if (kt_model_open(&model, NULL, target, NULL) < 0) {
            fprintf(stderr, TOOL ": %s\n", kt_last_error());
            return 1;
        }
        weights_present = true;
    } else {
        if (kt_registry_find(target, &reg) < 0) {
            fprintf(stderr, TOOL ": %s\n", kt_last_error());
            return 1;
        }
        have_reg = true;
        if (!models_dir)
            models_dir = getenv("KT_MODELS_DIR");
        char home_models[4096];
        if (!models_dir) {
            const char *home = getenv("HOME");
            snprintf(home_models, sizeof home_models, "%s/models", home ? home : ".");
            models_dir = home_models;
        }
        snprintf(weights_dir, sizeof weights_dir, "%s/%s", models_dir, reg.display_name);
        weights_present = has_config(weights_dir);
        kt_status st = weights_present ? kt_model_open(&model, NULL, weights_dir, NULL)
                                       : kt_registry_open_config(&reg, NULL, &model);
        if (st < 0) {
            fprintf(stderr, TOOL ": %s\n", kt_last_error());
            return 1;
        }
    }
    kt_arch_info a;
    a.struct_size = sizeof a;
    kt_model_arch(model, &a);
    kt_memory_estimate e0;
    e0.struct_size = sizeof e0;

    if (have_reg)
        add(&P, "model", "registry", "%s (%s, %s)", reg.name, reg.display_name, reg.hub_id);
    else
        add(&P, "model", "flag", "%s", target);
    add(&P, "architecture", "model", "%s: %u layers (%u MoE), %u routed experts, top %u",
        a.model_type, a.n_layers, a.n_moe_layers, a.n_routed_experts, a.n_experts_per_tok);
    item *w = add(&P, "weights", weights_present ? "model" : "registry", "%s%s", weights_dir,
                  weights_present ? "" : " (missing)");
    if (!weights_present) {
        /* a long directory would cut the command short: name it instead */
        int n = snprintf(w->note, sizeof w->note, "hf download %s --local-dir %s", reg.hub_id,
                         weights_dir);
        if (n < 0 || (size_t)n >= sizeof w->note)
            snprintf(w->note, sizeof w->note, "hf download %s --local-dir <the path above>",
                     reg.hub_id);
    }
    else if (kt_model_n_tensors(model) == 0)
        snprintf(w->note, sizeof w->note, "a bare config: no weights checked");
    else
        snprintf(w->note, sizeof w->note, "complete: %zu tensors, every one the config implies",
                 kt_model_n_tensors(model));

    /* method: flag > registry > the checkpoint's storage */
    const char *method = method_flag ? method_flag : have_reg ? reg.method : method_of_model(&a);
    if (method_flag && kt_method_from_name(method_flag) == KT_METHOD_NONE) {
        fprintf(stderr, TOOL ": --kt-method: unknown method '%s'\n", method_flag);
        kt_model_free(model);
        return 2;
    }
    add(&P, "method", method_flag ? "flag" : have_reg ? "registry" : "model", "%s", method);

    /* threads and pools: flag > hardware (one core stays with the engine thread) */
    int64_t n_threads = threads > 0 ? threads : (cores > 1 ? cores - 1 : 1);
    item *it = add(&P, "threads", threads > 0 ? "flag" : hw_src, "%" PRId64, n_threads);
    if (threads <= 0)
        snprintf(it->note, sizeof it->note, "%" PRId64 " physical cores, one runs the engine",
                 cores);
    int64_t n_pools = pools > 0 ? pools : numa;
    add(&P, "pools", pools > 0 ? "flag" : hw_src, "%" PRId64, n_pools);

    /* tensor parallel: flag > GPUs (capped by the registry's limit) */
    int64_t n_tp = tp >= 0 ? tp : gpus;
    const char *tp_src = tp >= 0 ? "flag" : hw_src;
    if (tp < 0 && have_reg && reg.max_tp && n_tp > reg.max_tp) {
        n_tp = reg.max_tp;
        tp_src = "registry";
    }
    int rc = 0;
    if (n_tp > gpus) {
        plan_error(&P, TOOL ": tensor parallel size %" PRId64 " needs %" PRId64 " GPUs, this "
                   "machine has %" PRId64 "\n", n_tp, n_tp, gpus);
        rc = 1;
    }
    add(&P, "tensor_parallel", tp_src, "%" PRId64, n_tp);

    /* context and prefill chunk: flag > registry > model / 512 */
    int64_t ctx_tokens = max_tokens > 0 ? max_tokens
                         : have_reg     ? reg.context_length
                                        : (a.max_position_embeddings < 8192
                                               ? a.max_position_embeddings : 8192);
    add(&P, "max_total_tokens", max_tokens > 0 ? "flag" : have_reg ? "registry" : "default",
        "%" PRId64, ctx_tokens);
    int64_t chunk_tokens = chunk > 0 ? chunk : have_reg ? reg.chunked_prefill : 512;
    add(&P, "chunked_prefill", chunk > 0 ? "flag" : have_reg ? "registry" : "default",
        "%" PRId64, chunk_tokens);

    /* fixed GPU memory (dense weights, KV cache, activations) with no experts */
    kt_estimate_options eo = KT_ESTIMATE_OPTIONS_INIT;
    eo.n_gpus = (uint32_t)n_tp;
    eo.context_length = (uint32_t)ctx_tokens;
    eo.batch_tokens = (uint32_t)chunk_tokens;
    if (kt_model_estimate(model, &eo, &e0) < 0) {
        fprintf(stderr, TOOL ": %s\n", kt_last_error());
        kt_model_free(model);
        return 1;
    }
    uint64_t fixed = 0, vram_sum = 0;
    for (int64_t g = 0; g < n_tp; g++) {
        fixed += e0.gpu_bytes[g];
        vram_sum += vram_free[g];
    }
    uint64_t free_budget = vram_sum > fixed ? vram_sum - fixed : 0;

    /* GPU experts: flag (per layer, ratio, bytes) > registry rule > free VRAM */
    kt_placement_options po = KT_PLACEMENT_OPTIONS_INIT;
    const char *gpu_src;
    char gpu_note[160] = "";
    const uint64_t all_experts = (uint64_t)a.n_moe_layers * a.n_routed_experts;
    if (n_tp == 0) {
        po.budget = KT_BUDGET_NONE;
        gpu_src = tp >= 0 ? "flag" : hw_src;
        snprintf(gpu_note, sizeof gpu_note, "no GPU: every expert on the CPU");
    } else if (per_layer >= 0) {
        po.budget = KT_BUDGET_PER_LAYER, po.per_layer = (uint32_t)per_layer;
        gpu_src = "flag";
    } else if (ratio >= 0) {
        po.budget = KT_BUDGET_RATIO, po.ratio = ratio;
        gpu_src = "flag";
    } else if (have_budget) {
        po.budget = KT_BUDGET_BYTES, po.budget_bytes = budget_bytes;
        po.bytes_per_expert = e0.expert_bytes;
        gpu_src = "flag";
    } else if (have_reg && reg.gpu_rule_den) {
        uint32_t n = kt_registry_gpu_experts(&reg, (uint32_t)n_tp, vram_total[0]);
        uint64_t fits = e0.expert_bytes && a.n_moe_layers
                            ? free_budget / e0.expert_bytes / a.n_moe_layers
                            : 0;
        snprintf(gpu_note, sizeof gpu_note, "rule %u/%u x floor(TP x (GB per GPU - 16))",
                 reg.gpu_rule_num, reg.gpu_rule_den);
        if (n > fits) {
            n = (uint32_t)fits;
            snprintf(gpu_note, sizeof gpu_note, "rule %u/%u, capped by free GPU memory",
                     reg.gpu_rule_num, reg.gpu_rule_den);
        }
        po.budget = KT_BUDGET_PER_LAYER, po.per_layer = n < a.n_routed_experts
                                                           ? n : a.n_routed_experts;
        gpu_src = "registry";
    } else {
        po.budget = KT_BUDGET_BYTES, po.budget_bytes = free_budget;
        po.bytes_per_expert = e0.expert_bytes;
        gpu_src = hw_src;
        snprintf(gpu_note, sizeof gpu_note, "free GPU memory minus dense weights, KV cache "
                                            "and activations");
    }
    if (po.budget == KT_BUDGET_PER_LAYER && po.per_layer > a.n_routed_experts) {
        fprintf(stderr, TOOL ": --kt-num-gpu-experts %u: the model has %u experts per layer\n",
                po.per_layer, a.n_routed_experts);
        kt_model_free(model);
        return 2;
    }

    /* strategy: flag > frequency when statistics are given > uniform */
    kt_expert_stats *stats = NULL;
    if (stats_path) {
        if (kt_expert_stats_load(&stats, stats_path) < 0) {
            fprintf(stderr, TOOL ": %s\n", kt_last_error());
            kt_model_free(model);
            return 1;
        }
        po.stats = stats;
    }
    po.strategy = strategy;
    uint8_t *moe = calloc(a.n_layers ? a.n_layers : 1, 1);
    for (uint32_t l = 0; moe && l < a.n_layers; l++)
        moe[l] = (uint8_t)(kt_model_layer_is_moe(model, l) ? 1 : 0);
    kt_placement *pl = NULL;
    if (!moe || kt_placement_create(&pl, a.n_layers, a.n_routed_experts, moe, &po) < 0) {
        fprintf(stderr, TOOL ": placement: %s\n", kt_last_error());
        free(moe);
        kt_expert_stats_free(stats);
        kt_model_free(model);
        return 1;
    }
    uint64_t gpu_total = kt_placement_gpu_total(pl);
    uint32_t max_row = 0;
    for (uint32_t l = 0; l < a.n_layers; l++)
        if (kt_placement_gpu_count(pl, l) > max_row)
            max_row = kt_placement_gpu_count(pl, l);
    it = add(&P, "gpu_experts", gpu_src, "%" PRIu64 " of %" PRIu64 " (%.1f%%), up to %u per "
             "layer", gpu_total, all_experts,
             all_experts ? 100.0 * (double)gpu_total / (double)all_experts : 0.0, max_row);
    snprintf(it->note, sizeof it->note, "%s", gpu_note);
    int32_t resolved = strategy != KT_PLACEMENT_AUTO ? strategy
                       : stats                        ? KT_PLACEMENT_FREQUENCY
                                                      : KT_PLACEMENT_UNIFORM;
    add(&P, "placement_strategy", strategy_flag ? "flag" : "default", "%s%s",
        kt_placement_strategy_name((kt_placement_strategy)resolved),
        strategy == KT_PLACEMENT_AUTO ? (stats ? " (auto: statistics given)" : " (auto)") : "");

    /* memory with the placement: experts on the GPUs split evenly */
    kt_memory_estimate est;
    est.struct_size = sizeof est;
    eo.gpu_experts_per_layer = a.n_moe_layers
                                   ? (uint32_t)((gpu_total + a.n_moe_layers - 1) / a.n_moe_layers)
                                   : 0;
    if (eo.gpu_experts_per_layer > a.n_routed_experts)
        eo.gpu_experts_per_layer = a.n_routed_experts;
    kt_model_estimate(model, &eo, &est);
    /* host: the estimate counts gpu_experts_per_layer in every layer; correct to the total */
    uint64_t host = est.host_bytes + ((uint64_t)eo.gpu_experts_per_layer * a.n_moe_layers -
                                      gpu_total) * est.expert_bytes;
    char hb[32];
    it = add(&P, "host_memory", "model", "%s", human(host, hb, sizeof hb));
    snprintf(it->note, sizeof it->note, "this machine: %.1f GB (%s)", (double)ram / GB, hw_src);
    if (host > ram) {
        plan_error(&P, TOOL ": needs %.0f GB of RAM, this machine has %.0f GB\n",
                   (double)host / GB, (double)ram / GB);
        rc = 1;
    }
    add(&P, "pinned_memory", "model", "%s", human(est.pinned_bytes, hb, sizeof hb));
    char gkeys[KT_ESTIMATE_MAX_GPUS][32];
    for (int64_t g = 0; g < n_tp; g++) {
        snprintf(gkeys[g], sizeof gkeys[g], "gpu%" PRId64 "_memory", g);
        it = add(&P, gkeys[g], "model", "%s", human(est.gpu_bytes[g], hb, sizeof hb));
        snprintf(it->note, sizeof it->note, "free: %.1f GB (%s)", (double)vram_free[g] / GB,
                 hw_src);
        if (est.gpu_bytes[g] > vram_free[g]) {
            plan_error(&P, TOOL ": GPU %" PRId64 " needs %.1f GB, it has %.1f GB free\n", g,
                       (double)est.gpu_bytes[g] / GB, (double)vram_free[g] / GB);
            rc = 1;
        }
    }

    /* the kt-run command that runs this plan (the GPU runtime takes a per-layer share
     * and keeps the lowest expert ids: other strategies' maps are not applied yet) */
    char gpu_arg[48];
    if (n_tp == 0)
        snprintf(gpu_arg, sizeof gpu_arg, "--device cpu");
    else
        snprintf(gpu_arg, sizeof gpu_arg, "--gpu-experts %.4g",
                 a.n_routed_experts ? (double)max_row / a.n_routed_experts : 0.0);
    it = add(&P, "command", "plan", "kt-run --model %s --kt-method %s --kt-cpuinfer %" PRId64
             " --kt-threadpool-count %" PRId64 " -c %" PRId64 " -b %" PRId64 " %s",
             weights_dir, method, n_threads, n_pools, ctx_tokens, chunk_tokens, gpu_arg);
    if (n_tp > 0 && resolved != KT_PLACEMENT_UNIFORM)
        snprintf(it->note, sizeof it->note, "the GPU runtime keeps the lowest ids per layer; "
                 "this %s map needs it to take a placement", kt_placement_strategy_name(
                     (kt_placement_strategy)resolved));

    kt_buf desc = KT_BUF_INIT;
    kt_placement_describe(pl, json ? 1 : 0, &desc);
    if (json) {
        cJSON *root = cJSON_CreateObject(), *src = cJSON_CreateObject();
        for (int i = 0; i < P.n; i++) {
            cJSON_AddStringToObject(root, P.items[i].key, P.items[i].value);
            cJSON_AddStringToObject(src, P.items[i].key, P.items[i].source);
            if (P.items[i].note[0]) {
                char k[64];
                snprintf(k, sizeof k, "%s_note", P.items[i].key);
                cJSON_AddStringToObject(root, k, P.items[i].note);
            }
        }
        cJSON_AddItemToObject(root, "sources", src);
        cJSON_AddNumberToObject(root, "host_bytes", (double)host);
        cJSON_AddNumberToObject(root, "pinned_bytes", (double)est.pinned_bytes);
        cJSON *gb = cJSON_AddArrayToObject(root, "gpu_bytes");
        for (int64_t g = 0; g < n_tp; g++)
            cJSON_AddItemToArray(gb, cJSON_CreateNumber((double)est.gpu_bytes[g]));
        cJSON_AddNumberToObject(root, "expert_bytes", (double)est.expert_bytes);
        cJSON_AddNumberToObject(root, "dense_weight_bytes", (double)est.dense_weight_bytes);
        cJSON_AddNumberToObject(root, "kv_bytes", (double)est.kv_bytes);
        cJSON_AddBoolToObject(root, "fits", rc == 0);
        cJSON_AddItemToObject(root, "placement", cJSON_Parse(desc.ptr ? desc.ptr : "null"));
        char *text = cJSON_Print(root);
        printf("%s\n", text ? text : "{}");
        free(text);
        cJSON_Delete(root);
    } else {
        printf("kt-run dry run (nothing loaded); sources: flag > registry > hardware\n\n");
        for (int i = 0; i < P.n; i++) {
            printf("  %-19s %-44s [%s]\n", P.items[i].key, P.items[i].value, P.items[i].source);
            if (P.items[i].note[0])
                printf("  %-19s   %s\n", "", P.items[i].note);
        }
        if (gpu_total)
            printf("\n%s", desc.ptr ? desc.ptr : "");
    }
    fflush(stdout);
    fputs(P.errors, stderr);
    kt_buf_dispose(&desc);
    kt_placement_free(pl);
    free(moe);
    kt_expert_stats_free(stats);
    kt_model_free(model);
    return rc;
}
