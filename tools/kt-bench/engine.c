/* kt-bench engine: end-to-end CPU prefill and decode tok/s of whole models
 * (kt/engine.h), each next to a roofline from this machine's limits measured
 * in the same run:
 *   decode  <= stream read GB/s / bytes one token reads (dense weights, one
 *              embedding row, top-k experts of every MoE layer),
 *   prefill <= oneDNN BF16 TFLOP/s / 2 x active parameters per token (lm_head
 *              once per prompt: only the last token's logits are computed).
 * Models: directories (--model DIR, repeatable) or a synthetic
 * Qwen3-30B-A3B-shaped model with random BF16 weights and fewer layers
 * (--synthetic qwen3-30b-a3b). */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kt/kt.h>

#include "opt.h"

/* ---- synthetic checkpoint --------------------------------------------------- */

typedef struct syn_tensor {
    char name[96];
    uint64_t rows, cols; /* cols 0: 1-D [rows] */
    int norm;            /* 1: all ones (RMSNorm weights) */
} syn_tensor;

/* Qwen3-30B-A3B: H 2048, 32 heads / 4 kv x 128, 128 experts top-8 of 768,
 * vocab 151936; `layers` MoE layers. Writes DIR/config.json and
 * DIR/model.safetensors (BF16, values uniform in +-0.02). */
static bool write_synthetic(const char *dir, int layers)
{
    const int H = 2048, NH = 32, NKV = 4, HD = 128, E = 128, K = 8, I = 768, V = 151936;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kt-bench engine: cannot create %s\n", dir);
        return false;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bench_qwen3_config qc = {H, NH, NKV, HD, layers, E, K, I, V, 151645};
    bench_write_qwen3_config(f, &qc);
    fclose(f);

    size_t cap = 16 + (size_t)layers * (9 + 3 * (size_t)E), n = 0;
    syn_tensor *t = calloc(cap, sizeof *t);
    if (!t)
        return false;
#define ADD(r, c, nrm, ...)                                                \
    do {                                                                   \
        snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__);                \
        t[n].rows = (r), t[n].cols = (c), t[n].norm = (nrm);               \
        n++;                                                               \
    } while (0)
    ADD(V, H, 0, "model.embed_tokens.weight");
    ADD(H, 0, 1, "model.norm.weight");
    ADD(V, H, 0, "lm_head.weight");
    for (int l = 0; l < layers; l++) {
        ADD(H, 0, 1, "model.layers.%d.input_layernorm.weight", l);
        ADD(H, 0, 1, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(NH * HD, H, 0, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(NKV * HD, H, 0, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(NKV * HD, H, 0, "model.layers.%d.self_attn.v_proj.weight", l);
        ADD(H, NH * HD, 0, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(HD, 0, 1, "model.layers.%d.self_attn.q_norm.weight", l);
        ADD(HD, 0, 1, "model.layers.%d.self_attn.k_norm.weight", l);
        ADD(E, H, 0, "model.layers.%d.mlp.gate.weight", l);
        for (int e = 0; e < E; e++) {
            ADD(I, H, 0, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
            ADD(I, H, 0, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
            ADD(H, I, 0, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
        }
    }
#undef ADD
    /* header: {"name": {"dtype": "BF16", "shape": [...], "data_offsets": [a, b]}, ...} */
    size_t hcap = n * 160 + 64, hl = 0;
    char *hdr = malloc(hcap);
    if (!hdr) {
        free(t);
        return false;
    }
    uint64_t off = 0;
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{");
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = t[i].rows * (t[i].cols ? t[i].cols : 1) * 2;
        if (t[i].cols)
            hl += (size_t)snprintf(hdr + hl, hcap - hl,
                                   "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%llu,%llu],"
                                   "\"data_offsets\":[%llu,%llu]}",
                                   i ? "," : "", t[i].name, (unsigned long long)t[i].rows,
                                   (unsigned long long)t[i].cols, (unsigned long long)off,
                                   (unsigned long long)(off + bytes));
        else
            hl += (size_t)snprintf(hdr + hl, hcap - hl,
                                   "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%llu],"
                                   "\"data_offsets\":[%llu,%llu]}",
                                   i ? "," : "", t[i].name, (unsigned long long)t[i].rows,
                                   (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    while ((8 + hl) % 64)
        hdr[hl++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    bool ok = f != NULL;
    uint64_t hlen = hl;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hlen >> (8 * i));
    ok = ok && fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, hl, f) == hl;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    enum { CHUNK = 1 << 20 };
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    ok = ok && buf;
    for (size_t i = 0; ok && i < n; i++) {
        uint64_t left = t[i].rows * (t[i].cols ? t[i].cols : 1);
        while (ok && left) {
            size_t m = left < CHUNK ? (size_t)left : CHUNK;
            for (size_t j = 0; j < m; j++) {
                if (t[i].norm) {
                    buf[j] = 0x3f80; /* 1.0 */
                } else {
                    /* uniform +-0.02: bf16 bits of a float built from random mantissa */
                    float v = ((float)(bench_rng(&seed) >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    buf[j] = (uint16_t)(u >> 16);
                }
            }
            ok = fwrite(buf, 2, m, f) == m;
            left -= m;
        }
    }
    free(buf);
    free(hdr);
    free(t);
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        fprintf(stderr, "kt-bench engine: writing %s failed\n", path);
    return ok;
}

/* ---- what one token costs ----------------------------------------------------- */

typedef struct model_cost {
    double decode_bytes; /* bytes read per decoded token                          */
    double flops;        /* 2 x active parameters but lm_head's, per prompt token */
    double head_flops;   /* 2 x lm_head's parameters: once per prompt (last token) */
} model_cost;

static bool model_cost_of(const kt_model *m, model_cost *c)
{
    kt_arch_info a;
    if (!bench_model_arch(m, &a))
        return false;
    double dense_b = 0, dense_p = 0, exp_b = 0, exp_p = 0, head_p = 0;
    size_t n = kt_model_n_tensors(m);
    for (size_t i = 0; i < n; i++) {
        kt_tensor_view v;
        if (!bench_model_tensor(m, i, &v))
            return false;
        double bytes = (double)v.nbytes + (double)v.scale_nbytes;
        double params = (double)v.rows * (double)v.cols;
        if (v.role == KT_ROLE_EMBED) {
            dense_b += bytes / (double)(v.rows ? v.rows : 1); /* one row per token */
        } else if (v.role == KT_ROLE_LM_HEAD) {
            dense_b += bytes;
            head_p += params;
        } else if (v.expert != UINT32_MAX) {
            exp_b += bytes;
            exp_p += params;
        } else {
            dense_b += bytes;
            dense_p += params;
        }
    }
    double share = a.n_routed_experts ? (double)a.n_experts_per_tok / a.n_routed_experts : 0;
    c->decode_bytes = dense_b + exp_b * share;
    c->flops = 2.0 * (dense_p + exp_p * share);
    c->head_flops = 2.0 * head_p;
    return true;
}

/* ---- one model ---------------------------------------------------------------- */

/* Aggregate decode tok/s of `seqs` sequences (contexts sharing ctx's weights)
 * decoded together, one kt_context_eval_multi pass per step; 0 on failure. */
static double bench_multi(kt_model *m, kt_context *ctx, const kt_context_options *base,
                          const int32_t *ids, int prompt, int gen, int seqs)
{
    kt_context **c = calloc((size_t)seqs, sizeof *c);
    int32_t *tok = calloc((size_t)seqs, sizeof *tok);
    size_t *one = calloc((size_t)seqs, sizeof *one);
    int32_t V = kt_context_n_vocab(ctx);
    float *lg = malloc(sizeof(float) * (size_t)seqs * (size_t)V);
    double tps = 0;
    kt_context_options co = *base;
    co.share = ctx;
    bool ok = c && tok && one && lg;
    for (int i = 0; ok && i < seqs; i++) {
        ok = kt_context_create(&c[i], NULL, m, &co) == KT_OK &&
             kt_context_eval(c[i], ids, (size_t)prompt, lg + (size_t)i * V, 0) == KT_OK;
        one[i] = 1;
    }
    double t0 = bench_now();
    for (int step = 0; ok && step < gen; step++) {
        for (int i = 0; i < seqs; i++)
            tok[i] = kt_argmax(lg + (size_t)i * V, (size_t)V);
        ok = kt_context_eval_multi(c, (size_t)seqs, tok, one, lg) == KT_OK;
    }
    if (ok)
        tps = (double)seqs * gen / (bench_now() - t0);
    else
        fprintf(stderr, "kt-bench engine: --seqs: %s\n", kt_last_error());
    for (int i = 0; c && i < seqs; i++)
        kt_context_free(c[i]);
    free(c), free(tok), free(one), free(lg);
    return tps;
}

static int bench_model(const char *dir, int prompt, int gen, int seqs, int precision,
                       uint32_t flags, double stream_gbs, double gemm_tflops, bench_json *json)
{
    kt_model *m = NULL;
    if (kt_model_open(&m, NULL, dir, NULL) < 0) {
        fprintf(stderr, "kt-bench engine: %s: %s\n", dir, kt_last_error());
        return 1;
    }
    model_cost cost;
    if (!model_cost_of(m, &cost)) {
        fprintf(stderr, "kt-bench engine: %s: %s\n", dir, kt_last_error());
        kt_model_free(m);
        return 1;
    }
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = prompt + gen + 1;
    co.precision = precision;
    co.flags = flags;
    kt_context *ctx = NULL;
    if (kt_context_create(&ctx, NULL, m, &co) < 0) {
        fprintf(stderr, "kt-bench engine: %s: %s\n", dir, kt_last_error());
        kt_model_free(m);
        return 1;
    }
    int32_t V = kt_context_n_vocab(ctx);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)prompt);
    float *logits = malloc(sizeof(float) * (size_t)V);
    bench_random_ids(ids, (size_t)prompt, V);
    /* warm-up: the whole prompt once (first touch of the mapping and of the
     * scratch and workspaces a prompt this long needs), then measure */
    int rc = 1;
    if (kt_context_eval(ctx, ids, (size_t)prompt, logits, 0) < 0)
        goto fail;
    double t_pre, t_dec;
    if (!bench_prefill_decode(ctx, ids, prompt, gen, logits, &t_pre, &t_dec))
        goto fail;
    double pre_tps = prompt / t_pre, dec_tps = gen / t_dec;
    double dec_roof = stream_gbs * 1e9 / cost.decode_bytes;
    /* prefill computes lm_head for the last token only */
    double pre_roof = gemm_tflops > 0 ? gemm_tflops * 1e12 * prompt /
                                            (cost.flops * prompt + cost.head_flops)
                                      : 0;
    printf("engine %-28s %s%s%s: prefill %5d tok %9.1f tok/s", dir,
           precision == KT_PRECISION_F32 ? "f32 " : "fast",
           (flags & KT_CONTEXT_F_DENSE_WORKERS) ? "+dw" : "",
           (flags & KT_CONTEXT_F_MOE_BF16) ? "+moe-bf16" : "", prompt, pre_tps);
    if (pre_roof > 0)
        printf(" (oneDNN roofline %.0f, %4.1f%%)", pre_roof, 100.0 * pre_tps / pre_roof);
    printf(" | decode %9.2f tok/s (stream roofline %.1f, %4.1f%%; %.1f MB/token)\n", dec_tps,
           dec_roof, 100.0 * dec_tps / dec_roof, cost.decode_bytes / 1e6);
    double multi_tps = 0;
    if (seqs > 1) {
        /* the weights are read once per step for all sequences */
        multi_tps = bench_multi(m, ctx, &co, ids, prompt, gen, seqs);
        if (multi_tps <= 0)
            goto fail;
        printf("engine %-28s %d sequences decoded together: %9.2f tok/s aggregate (%.2fx one "
               "sequence)\n", dir, seqs, multi_tps, multi_tps / dec_tps);
    }
    if (json)
        json_row(json,
                 "\"bench\":\"engine\",\"model\":\"%s\",\"precision\":\"%s\",\"moe_act\":\"%s\","
                 "\"prompt\":%d,"
                 "\"prefill_tps\":%.3f,\"prefill_roofline_tps\":%.3f,\"gen\":%d,"
                 "\"decode_tps\":%.3f,\"decode_roofline_tps\":%.3f,\"decode_bytes\":%.0f,"
                 "\"seqs\":%d,\"multi_decode_tps\":%.3f",
                 dir, precision == KT_PRECISION_F32 ? "f32" : "fast",
                 (flags & KT_CONTEXT_F_MOE_BF16) ? "bf16" : "bf16x2", prompt, pre_tps, pre_roof,
                 gen, dec_tps, dec_roof, cost.decode_bytes, seqs, multi_tps);
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "kt-bench engine: %s: %s\n", dir, kt_last_error());
    free(ids);
    free(logits);
    kt_context_free(ctx);
    kt_model_free(m);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench engine (--model DIR ... | --synthetic qwen3-30b-a3b) [OPTIONS]\n"
            "\n"
            "End-to-end CPU prefill and decode tok/s of whole models next to rooflines\n"
            "measured in the same run (stream read bandwidth, oneDNN BF16 matmul).\n"
            "\n"
            "  --model DIR          a model directory (repeatable)\n"
            "  --synthetic NAME     qwen3-30b-a3b: random BF16 weights, --layers layers,\n"
            "                       written to --synthetic-dir (default /tmp/kt-bench-qwen3;\n"
            "                       reused when it already holds a model)\n"
            "  --layers N           layers of the synthetic model (default 2)\n"
            "  --prompt N           prefill tokens (default 256)\n"
            "  --gen N              decoded tokens (default 32)\n"
            "  --seqs N             also decode N sequences together (kt_context_eval_multi)\n"
            "                       and print their aggregate tok/s (default 1: off)\n"
            "  --precision f32|fast (default fast)\n"
            "  --dense-workers      dense layers get their own workers next to the MoE ones\n"
            "  --moe-bf16           experts with BF16 activations instead of hi + lo BF16\n"
            "  --threads N          threads of the yardsticks (default: physical cores)\n"
            "  --stream-size MIB    stream buffer (default 1024)\n"
            "  --json FILE          append result rows as JSON\n");
}

int cmd_engine(int argc, char **argv)
{
    const char *models[16];
    int n_models = 0;
    const char *synthetic = NULL, *syn_dir = "/tmp/kt-bench-qwen3", *json_path = NULL;
    int64_t layers = 2, prompt = 256, gen = 32, threads = 0, stream_mib = 1024, seqs = 1;
    int precision = KT_PRECISION_FAST;
    uint32_t flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--model", true, &v, &bad)) {
            if (!bad && n_models < 16)
                models[n_models++] = v;
        } else if (opt_match(argc, argv, &i, "--synthetic", true, &v, &bad)) {
            synthetic = v;
        } else if (opt_match(argc, argv, &i, "--synthetic-dir", true, &v, &bad)) {
            syn_dir = v;
        } else if (opt_match(argc, argv, &i, "--layers", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--layers", v, 1, 94, &layers))
                return 2;
        } else if (opt_match(argc, argv, &i, "--prompt", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--prompt", v, 1, 1 << 16, &prompt))
                return 2;
        } else if (opt_match(argc, argv, &i, "--gen", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--gen", v, 1, 1 << 16, &gen))
                return 2;
        } else if (opt_match(argc, argv, &i, "--seqs", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--seqs", v, 1, 256, &seqs))
                return 2;
        } else if (bench_common_opt(argc, argv, &i, &threads, &json_path, &bad)) {
            if (bad)
                return 2;
        } else if (opt_match(argc, argv, &i, "--stream-size", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--stream-size", v, 16, 1 << 20, &stream_mib))
                return 2;
        } else if (!strcmp(argv[i], "--dense-workers")) {
            flags |= KT_CONTEXT_F_DENSE_WORKERS;
        } else if (!strcmp(argv[i], "--moe-bf16")) {
            flags |= KT_CONTEXT_F_MOE_BF16;
        } else if (opt_match(argc, argv, &i, "--precision", true, &v, &bad)) {
            if (!bad && !strcasecmp(v, "f32"))
                precision = KT_PRECISION_F32;
            else if (!bad && !strcasecmp(v, "fast"))
                precision = KT_PRECISION_FAST;
            else if (!bad) {
                fprintf(stderr, "kt-bench engine: --precision: '%s' is not f32 or fast\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "kt-bench engine: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (synthetic && strcasecmp(synthetic, "qwen3-30b-a3b")) {
        fprintf(stderr, "kt-bench engine: --synthetic: only qwen3-30b-a3b is known\n");
        return 2;
    }
    if (!n_models && !synthetic) {
        fprintf(stderr, "kt-bench engine: give --model DIR or --synthetic qwen3-30b-a3b\n");
        return 2;
    }
    bench_hw hw;
    int nth = bench_hw_start(&hw, threads);
    bench_team *team = team_create(nth);
    stream_result sr;
    double stream_gbs = 0;
    if (team && stream_measure(team, (uint64_t)stream_mib << 20, 5, true, &sr))
        stream_gbs = sr.read_gbs;
    team_free(team);
    double tflops = 0;
    gemm_kind kind = GEMM_BF16;
    if (gemm_available()) {
        gemm_set_threads(nth);
        tflops = gemm_measure_yardstick(prompt, 2048, 2048, 3, &kind);
    }
    printf("# yardsticks: stream read %.1f GB/s, oneDNN %s [%lld x 2048 x 2048] %.3f TFLOP/s\n",
           stream_gbs, gemm_kind_name(kind), (long long)prompt, tflops > 0 ? tflops : 0.0);
    fflush(stdout);
    bench_json *json = json_path ? json_open(json_path, &hw, nth) : NULL;
    int rc = 0;
    if (synthetic) {
        char cfg[1100];
        snprintf(cfg, sizeof cfg, "%s/model.safetensors", syn_dir);
        struct stat sb;
        if (stat(cfg, &sb) != 0) {
            printf("# writing a %lld-layer Qwen3-30B-A3B-shaped model to %s\n", (long long)layers,
                   syn_dir);
            fflush(stdout);
            if (!write_synthetic(syn_dir, (int)layers))
                return 1;
        }
        rc |= bench_model(syn_dir, (int)prompt, (int)gen, (int)seqs, precision, flags, stream_gbs,
                          tflops, json);
    }
    for (int i = 0; i < n_models; i++)
        rc |= bench_model(models[i], (int)prompt, (int)gen, (int)seqs, precision, flags,
                          stream_gbs, tflops, json);
    if (json && !json_close(json))
        rc = 1;
    return rc;
}
