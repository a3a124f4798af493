/* Shared option parsing and setup of kt-run's engine commands. */
#include "run_engine.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "opt.h"

/* The model that ships with libkt. Looked for (first found wins) in
 * $KT_DEFAULT_MODEL, next to an installed executable (BIN/../share/libkt/
 * models/), in the configured datadir, in the source tree the tools were built
 * from, then under the current directory. */
#define DEFAULT_MODEL "models/kimi-k2-demo"
#define DEFAULT_MODEL_NAME "kimi-k2-demo"

const char run_engine_help[] =
    "  --model DIR              model directory (config.json + safetensors); default:\n"
    "                           the bundled " DEFAULT_MODEL_NAME " ($KT_DEFAULT_MODEL overrides)\n"
    "  -c, --ctx-size N         KV cache positions (default: the model's, at most 8192)\n"
    "  -b, --batch-size N       prefill chunk in tokens (default 512)\n"
    "  --precision f32|fast     f32: F32 activations, weights and KV cache (validation);\n"
    "                           fast (default): weights as stored, F32 activations\n"
    "  --moe-precision bf16x2|bf16  expert activations in fast mode: two BF16 halves\n"
    "                           (default; as accurate as F32) or one (faster prefill,\n"
    "                           ~1e-2 relative error per MoE layer)\n"
    "  --cache-type f32|bf16    KV cache element type (default f32; bf16 halves it)\n"
    "  --kt-method NAME         CPU expert method: BF16, FP8, RAWINT4, AMXINT8, AMXINT4,\n"
    "                           LLAMAFILE (default: the checkpoint's own)\n"
    "  --kt-weight-path DIR     libkt CPU expert weights written by kt-convert, or a\n"
    "                           FILE.gguf of routed experts (LLAMAFILE)\n"
    "  -t, --kt-cpuinfer N      CPU worker threads (default: physical cores)\n"
    "  --kt-threadpool-count N  thread pools, one per NUMA node (default: automatic)\n"
    "  --dense-workers          dense layers get their own workers next to the MoE ones\n"
    "  --device cuda|cpu|auto   where the model runs (default auto: cuda when a GPU is\n"
    "                           present, with the experts it cannot hold on the CPU)\n"
    "  --gpu-experts F          share 0..1 of each MoE layer's experts on the GPU, or\n"
    "                           'fill' for as many as --mem-fraction-static allows (default)\n"
    "  --mem-fraction-static F  share of the GPU's free memory to use (default 0.9)\n"
    "  --kt-gpu-prefill-token-threshold N|auto\n"
    "                           chunks of N+ tokens run every expert on the GPU, the\n"
    "                           CPU-resident ones copied in layer by layer; auto (the\n"
    "                           default): when the measured copy beats the measured CPU;\n"
    "                           0: off\n"
    "  --gpu-rebalance N        every N routed tokens, move the experts the run uses most\n"
    "                           onto the GPU and the least used off it (copied while\n"
    "                           decode goes on; needs experts on both sides; 8 is what\n"
    "                           kt-bench placement scores as 'dynamic'; default 0: the\n"
    "                           placement stays as loaded)\n"
    "  --gpu-mla-naive          MLA decode on the GPU expands k/v for every cached\n"
    "                           position (default: latent space, as a CUDA graph)\n"
    "  --gpu-no-cublas          every GPU product on libkt's own kernels (default:\n"
    "                           chunks of 16+ tokens on the tensor cores via cuBLAS)\n"
    "  --gpu-decode-bf16        decode steps run their CPU experts on BF16 activations\n"
    "                           (faster hybrid decode; prompts keep --moe-precision)\n"
    "  -v, --verbose            log at INFO level\n";

void run_engine_opts_init(run_engine_opts *o)
{
    memset(o, 0, sizeof *o);
    o->precision = KT_PRECISION_FAST;
    o->device = -1;
    o->gpu_experts = -1.0;
    o->layerwise_tokens = -1;
}

/* A flag's value that is one of two words (either case): *out = true for when_true. */
static bool two_way_choice(const char *tool, const char *flag, const char *v,
                           const char *when_true, const char *when_false, bool *out)
{
    if (!strcasecmp(v, when_true) || !strcasecmp(v, when_false)) {
        *out = !strcasecmp(v, when_true);
        return true;
    }
    fprintf(stderr, "%s: %s: '%s' is not %s or %s\n", tool, flag, v, when_false, when_true);
    return false;
}

int run_engine_opt(run_engine_opts *o, const char *tool, int argc, char **argv, int *i)
{
    const char *v = NULL;
    bool bad = false;
    if (opt_match(argc, argv, i, "--model", true, &v, &bad) ||
        opt_match(argc, argv, i, "-m", true, &v, &bad)) {
        if (bad)
            return -1;
        o->model = v;
        return 1;
    }
    if (opt_match(argc, argv, i, "--ctx-size", true, &v, &bad) ||
        opt_match(argc, argv, i, "-c", true, &v, &bad))
        return !bad && opt_parse_i64(tool, "--ctx-size", v, 1, INT32_MAX, &o->n_ctx) ? 1 : -1;
    if (opt_match(argc, argv, i, "--batch-size", true, &v, &bad) ||
        opt_match(argc, argv, i, "-b", true, &v, &bad))
        return !bad && opt_parse_i64(tool, "--batch-size", v, 1, 1 << 20, &o->n_batch) ? 1 : -1;
    if (opt_match(argc, argv, i, "--precision", true, &v, &bad)) {
        if (bad)
            return -1;
        if (!strcasecmp(v, "f32") || !strcasecmp(v, "fp32"))
            o->precision = KT_PRECISION_F32;
        else if (!strcasecmp(v, "fast"))
            o->precision = KT_PRECISION_FAST;
        else {
            fprintf(stderr, "%s: --precision: '%s' is not f32 or fast\n", tool, v);
            return -1;
        }
        return 1;
    }
    if (opt_match(argc, argv, i, "--kt-method", true, &v, &bad)) {
        if (bad)
            return -1;
        o->method = (int32_t)kt_method_from_name(v);
        if (o->method == KT_METHOD_NONE) {
            fprintf(stderr, "%s: --kt-method: unknown method '%s' (BF16, FP8, RAWINT4, "
                    "AMXINT8, AMXINT4, LLAMAFILE)\n", tool, v);
            return -1;
        }
        return 1;
    }
    if (opt_match(argc, argv, i, "--cache-type", true, &v, &bad)) {
        bad = bad || !two_way_choice(tool, "--cache-type", v, "bf16", "f32", &o->kv_bf16);
        return bad ? -1 : 1;
    }
    if (opt_match(argc, argv, i, "--moe-precision", true, &v, &bad)) {
        bad = bad || !two_way_choice(tool, "--moe-precision", v, "bf16", "bf16x2", &o->moe_bf16);
        return bad ? -1 : 1;
    }
    if (opt_match(argc, argv, i, "--kt-weight-path", true, &v, &bad)) {
        if (bad)
            return -1;
        o->weight_path = v;
        return 1;
    }
    if (opt_match(argc, argv, i, "--kt-cpuinfer", true, &v, &bad) ||
        opt_match(argc, argv, i, "--threads", true, &v, &bad) ||
        opt_match(argc, argv, i, "-t", true, &v, &bad))
        return !bad && opt_parse_i64(tool, "--kt-cpuinfer", v, 1, 4096, &o->n_threads) ? 1 : -1;
    if (opt_match(argc, argv, i, "--kt-threadpool-count", true, &v, &bad))
        return !bad && opt_parse_i64(tool, "--kt-threadpool-count", v, 1, 256, &o->n_pools)
                   ? 1
                   : -1;
    if (opt_match(argc, argv, i, "--device", true, &v, &bad)) {
        if (bad)
            return -1;
        if (!strcasecmp(v, "cpu"))
            o->device = 0;
        else if (!strcasecmp(v, "cuda") || !strcasecmp(v, "gpu"))
            o->device = 1;
        else if (!strcasecmp(v, "auto"))
            o->device = -1;
        else {
            fprintf(stderr, "%s: --device: '%s' is not cuda, cpu or auto\n", tool, v);
            return -1;
        }
        return 1;
    }
    if (opt_match(argc, argv, i, "--gpu-experts", true, &v, &bad)) {
        if (bad)
            return -1;
        if (!strcasecmp(v, "fill")) {
            o->gpu_experts = -1.0;
            return 1;
        }
        return opt_parse_f64(tool, "--gpu-experts", v, 0.0, 1.0, &o->gpu_experts) ? 1 : -1;
    }
    if (opt_match(argc, argv, i, "--mem-fraction-static", true, &v, &bad))
        return !bad && opt_parse_f64(tool, "--mem-fraction-static", v, 0.01, 1.0,
                                     &o->mem_fraction) ? 1 : -1;
    if (!strcmp(argv[*i], "--gpu-cublas")) {
        o->cublas = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--gpu-mla-absorb")) { /* the default now; kept for scripts */
        o->mla_absorb = true;
        return 1;
    }
    if (opt_match(argc, argv, i, "--kt-gpu-prefill-token-threshold", true, &v, &bad)) {
        if (bad)
            return -1;
        if (!strcmp(v, "auto")) {
            o->layerwise_tokens = -1;
            return 1;
        }
        int64_t n = 0;
        if (!opt_parse_i64(tool, "--kt-gpu-prefill-token-threshold", v, 0, INT32_MAX, &n))
            return -1;
        o->layerwise_tokens = (int32_t)n;
        return 1;
    }
    if (opt_match(argc, argv, i, "--gpu-rebalance", true, &v, &bad))
        return !bad && opt_parse_i64(tool, "--gpu-rebalance", v, 0, INT32_MAX, &o->rebalance)
                   ? 1 : -1;
    if (!strcmp(argv[*i], "--gpu-mla-naive")) {
        o->mla_naive = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--gpu-no-cublas")) {
        o->no_cublas = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--gpu-decode-bf16")) {
        o->decode_bf16 = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--dense-workers")) {
        o->dense_workers = true;
        return 1;
    }
    if (!strcmp(argv[*i], "-v") || !strcmp(argv[*i], "--verbose")) {
        o->verbose = true;
        return 1;
    }
    return 0;
}

static bool is_model_dir(const char *dir)
{
    char cfg[4200];
    struct stat sb;
    if (snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= (int)sizeof cfg)
        return false;
    return stat(cfg, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *run_default_model(const char *tool)
{
    static char found[4096];
    const char *env = getenv("KT_DEFAULT_MODEL");
    if (env && *env) {
        if (is_model_dir(env))
            return env;
        fprintf(stderr, "%s: KT_DEFAULT_MODEL=%s is not a model directory (no config.json)\n",
                tool, env);
        return NULL;
    }
    const char *candidates[4] = {NULL, NULL, NULL, DEFAULT_MODEL};
    /* an installed kt-run: PREFIX/bin/kt-run -> PREFIX/share/libkt/models/ (relocatable) */
    char exe[4096], rel[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (snprintf(rel, sizeof rel, "%s/../share/libkt/models/%s", exe,
                         DEFAULT_MODEL_NAME) < (int)sizeof rel)
                candidates[0] = rel;
        }
    }
#ifdef KT_RUN_DATADIR
    candidates[1] = KT_RUN_DATADIR "/models/" DEFAULT_MODEL_NAME;
#endif
#ifdef KT_RUN_SOURCE_ROOT
    candidates[2] = KT_RUN_SOURCE_ROOT "/" DEFAULT_MODEL;
#endif
    for (size_t i = 0; i < 4; i++) {
        if (candidates[i] && is_model_dir(candidates[i])) {
            snprintf(found, sizeof found, "%s", candidates[i]);
            return found;
        }
    }
    fprintf(stderr, "%s: no --model given and the bundled %s was not found (looked in "
            "$KT_DEFAULT_MODEL, %s, %s, %s, ./%s)\n", tool, DEFAULT_MODEL_NAME,
            candidates[0] ? candidates[0] : "BIN/../share/libkt/models",
            candidates[1] ? candidates[1] : "DATADIR/libkt/models",
            candidates[2] ? candidates[2] : "SOURCE/models", DEFAULT_MODEL);
    return NULL;
}

bool run_engine_open(run_engine *e, const run_engine_opts *o, const char *tool)
{
    memset(e, 0, sizeof *e);
    const char *path = o->model ? o->model : run_default_model(tool);
    if (!path)
        return false;
    e->path = path;
    kt_runtime_options ro = KT_RUNTIME_OPTIONS_INIT;
    ro.log_level = o->verbose ? KT_LOG_INFO : KT_LOG_WARN;
    ro.n_threads = (int32_t)o->n_threads;
    if (kt_runtime_create(&e->rt, &ro) < 0) {
        fprintf(stderr, "%s: runtime: %s\n", tool, kt_last_error());
        return false;
    }
    if (kt_model_open(&e->model, e->rt, path, NULL) < 0) {
        fprintf(stderr, "%s: %s: %s\n", tool, path, kt_last_error());
        run_engine_close(e);
        return false;
    }
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = (int32_t)o->n_ctx;
    co.n_batch = (int32_t)o->n_batch;
    co.precision = o->precision;
    co.method = o->method;
    co.n_threads = (int32_t)o->n_threads;
    co.n_pools = (int32_t)o->n_pools;
    co.weight_path = o->weight_path;
    if (o->kv_bf16)
        co.flags |= KT_CONTEXT_F_KV_BF16;
    if (o->dense_workers)
        co.flags |= KT_CONTEXT_F_DENSE_WORKERS;
    if (o->moe_bf16)
        co.flags |= KT_CONTEXT_F_MOE_BF16;
    if (kt_context_create(&e->ctx, e->rt, e->model, &co) < 0) {
        fprintf(stderr, "%s: %s: %s\n", tool, path, kt_last_error());
        run_engine_close(e);
        return false;
    }
    if (o->device == 1 || (o->device < 0 && kt_gpu_count() > 0)) {
        kt_gpu_options go = KT_GPU_OPTIONS_INIT;
        go.expert_fraction = (float)o->gpu_experts;
        go.mem_fraction = (float)o->mem_fraction;
        if (o->mla_absorb)
            go.flags |= KT_GPU_F_MLA_ABSORB;
        if (o->cublas)
            go.flags |= KT_GPU_F_CUBLAS;
        if (o->mla_naive)
            go.flags |= KT_GPU_F_MLA_NAIVE;
        go.layerwise_tokens = o->layerwise_tokens;
        if (o->no_cublas)
            go.flags |= KT_GPU_F_NO_CUBLAS;
        if (o->decode_bf16)
            go.flags |= KT_GPU_F_DECODE_BF16;
        if (kt_context_use_gpu(e->ctx, &go) < 0) {
            fprintf(stderr, "%s: %s: %s%s\n", tool, path, kt_last_error(),
                    o->device < 0 ? " (--device cpu runs without the GPU)" : "");
            run_engine_close(e);
            return false;
        }
        /* the settings `kt-bench placement` scores as `dynamic` (docs/placement.md) */
        kt_rebalancer_options ro = KT_REBALANCER_OPTIONS_INIT;
        ro.half_life_tokens = 256;
        ro.horizon_tokens = 1024;
        if (o->rebalance && kt_context_gpu_rebalance(e->ctx, (uint32_t)o->rebalance, &ro) < 0) {
            fprintf(stderr, "%s: %s: --gpu-rebalance: %s\n", tool, path, kt_last_error());
            run_engine_close(e);
            return false;
        }
        if (o->verbose)
            fprintf(stderr, "%s: %s: GPU %d, %d experts per layer on it, %.2f GiB\n", tool,
                    path, kt_context_gpu(e->ctx), kt_context_gpu_experts(e->ctx),
                    (double)kt_context_gpu_bytes(e->ctx) / (1024.0 * 1024.0 * 1024.0));
    }
    if (o->verbose) {
        int32_t m = kt_context_expert_method(e->ctx);
        fprintf(stderr, "%s: %s: precision %s, experts %s%s, %d threads, n_ctx %d\n", tool, path,
                kt_context_precision(e->ctx) == KT_PRECISION_F32 ? "f32" : "fast",
                m ? kt_method_name((kt_method)m) : "engine path (F32 activations)",
                m ? " on the CPU MoE backend" : "", kt_context_n_threads(e->ctx),
                kt_context_n_ctx(e->ctx));
    }
    return true;
}

kt_tokenizer *run_engine_tokenizer(run_engine *e, const char *tool)
{
    if (e->tok)
        return e->tok;
    kt_tokenizer_options to = KT_TOKENIZER_OPTIONS_INIT;
    to.runtime = e->rt;
    if (kt_tokenizer_open(&e->tok, e->path, &to) < 0) {
        fprintf(stderr, "%s: tokenizer of %s: %s\n", tool, e->path, kt_last_error());
        e->tok = NULL;
    }
    return e->tok;
}

bool run_encode(run_engine *e, const char *text, size_t len, int32_t **ids, size_t *n,
                const char *tool)
{
    kt_tokenizer *tok = run_engine_tokenizer(e, tool);
    if (!tok)
        return false;
    size_t need = 0;
    kt_status st = kt_tokenizer_encode(tok, text, len, KT_ENCODE_PARSE_SPECIAL, NULL, 0, &need);
    if (st < 0 && st != KT_ERR_LIMIT) {
        fprintf(stderr, "%s: encoding: %s\n", tool, kt_last_error());
        return false;
    }
    *ids = malloc(sizeof(int32_t) * (need + 1));
    if (!*ids) {
        fprintf(stderr, "%s: out of memory\n", tool);
        return false;
    }
    st = kt_tokenizer_encode(tok, text, len, KT_ENCODE_PARSE_SPECIAL, *ids, need, n);
    if (st < 0) {
        fprintf(stderr, "%s: encoding: %s\n", tool, kt_last_error());
        free(*ids);
        *ids = NULL;
        return false;
    }
    return true;
}

void run_engine_close(run_engine *e)
{
    uint64_t batches = 0, experts = 0;
    kt_context_gpu_moved(e->ctx, &batches, &experts);
    if (batches)
        fprintf(stderr, "%s: %" PRIu64 " experts moved between the CPU and the GPU in %" PRIu64
                " batches (--gpu-rebalance)\n", e->path ? e->path : "model", experts, batches);
    kt_tokenizer_free(e->tok);
    kt_context_free(e->ctx);
    kt_model_free(e->model);
    kt_runtime_free(e->rt);
    memset(e, 0, sizeof *e);
}

bool run_parse_ids(const char *text, int32_t **ids, size_t *n, const char *tool,
                   const char *what)
{
    size_t cap = 64, cnt = 0;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) {
        fprintf(stderr, "%s: out of memory\n", tool);
        return false;
    }
    const char *p = text;
    for (;;) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        char *end = NULL;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',' &&
                                                   !isspace((unsigned char)*end))) {
            fprintf(stderr, "%s: %s: '%.20s' is not a token id\n", tool, what, p);
            free(a);
            return false;
        }
        if (cnt == cap) {
            int32_t *b = realloc(a, (cap *= 2) * sizeof *a);
            if (!b) {
                free(a);
                fprintf(stderr, "%s: out of memory\n", tool);
                return false;
            }
            a = b;
        }
        a[cnt++] = (int32_t)v;
        p = end;
    }
    *ids = a;
    *n = cnt;
    return true;
}

char *run_read_file(const char *path, size_t *len, const char *tool)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s: cannot open\n", tool, path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        char *b = realloc(buf, (cap *= 2) + 1);
        if (!b) {
            free(buf);
            buf = NULL;
        }
        buf = b;
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        fprintf(stderr, "%s: %s: read failed\n", tool, path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
