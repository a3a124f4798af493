/* kt-convert: a checkpoint's routed experts -> libkt's CPU format (AMXINT8 / AMXINT4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>

#include "opt.h"

static const char *const TOOL = "kt-convert";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-convert --input MODEL_DIR --output OUT_DIR --method int8|int4\n"
            "       kt-convert --input MODEL_DIR --output FILE.gguf --method gguf:TYPE\n"
            "                  [--group-size G] [--threads N] [--resume] [--verify] [--quiet]\n"
            "\n"
            "Quantizes the routed experts of a Hugging Face checkpoint (BF16, F16, F32 or\n"
            "FP8 with 128x128 block scales, dequantized on the CPU) into libkt's CPU expert\n"
            "format: one safetensors file per MoE layer, read by mmap with no repacking and\n"
            "independent of the NUMA node count (docs/cpu-format.md). Everything else keeps\n"
            "being read from the checkpoint. Run it with:\n"
            "    kt-run --model MODEL_DIR --kt-method AMXINT4 --kt-weight-path OUT_DIR ...\n"
            "\n"
            "  --input DIR        the model directory (config.json + safetensors)\n"
            "  --output DIR       where the layer files go (created if missing)\n"
            "  --method M         int8 (AMXINT8: per-row INT8) or int4 (AMXINT4: INT4 with a\n"
            "                     scale per group of inputs, each e/16 of the row's largest\n"
            "                     for an integer e <= 16, chosen to minimise the error, so\n"
            "                     the AMX tiles run the row as INT8 exactly)\n"
            "                     gguf:TYPE (LLAMAFILE): one GGUF file of the routed experts in\n"
            "                     a ggml type (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K\n"
            "                     IQ4_NL IQ4_XS BF16 F16 F32), ggml's reference quantizers; run\n"
            "                     with --kt-method LLAMAFILE --kt-weight-path FILE.gguf\n"
            "  --group-size G     AMXINT4 inputs per scale: 32 (default), 64 or 128\n"
            "  --threads N        worker threads (default: physical cores)\n"
            "  --resume           keep layer files an earlier, interrupted run finished\n"
            "  --verify           read every written layer back and check its error\n"
            "  --quiet            no progress output\n"
            "\n"
            "Prints the relative RMS error of each layer's quantized experts\n"
            "(||w - w_q|| / ||w||); the same figures go to OUT_DIR/kt-convert.json.\n");
}

typedef struct progress {
    int tty, quiet;
    double t0;
    uint64_t last_done;
    double last_print;
} progress;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int on_progress(uint64_t done, uint64_t total, const char *what, void *user)
{
    progress *p = user;
    if (p->quiet)
        return 0;
    double t = now(), el = t - p->t0;
    if (p->tty && t - p->last_print < 0.1 && done < total)
        return 0;
    p->last_print = t;
    double rate = el > 0 ? (double)done / el : 0.0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0.0;
    if (p->tty) {
        int width = 30, fill = total ? (int)((double)done / total * width) : 0;
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r\033[K[%s] %llu/%llu experts  %.1f/s  ETA %dm%02ds  %s", bar,
                (unsigned long long)done, (unsigned long long)total, rate, (int)eta / 60,
                (int)eta % 60, what);
        if (done >= total)
            fputc('\n', stderr);
    }
    p->last_done = done;
    return 0;
}

static void on_layer(uint32_t layer, double rel_rms, uint64_t bytes, int32_t resumed, void *user)
{
    progress *p = user;
    if (p->tty && !p->quiet)
        fprintf(stderr, "\r\033[K");
    printf("layer %3u  rel_rms %.6f  %s\n", layer, rel_rms,
           resumed ? "(kept from an earlier run)" : "");
    (void)bytes;
    fflush(stdout);
}

/* "Q4_K" (any case) -> KT_TYPE_Q4_K; KT_TYPE_INVALID if not a GGUF expert type. */
static int32_t gguf_type_named(const char *name)
{
    static const kt_type types[] = {
        KT_TYPE_Q4_0, KT_TYPE_Q4_1, KT_TYPE_Q5_0, KT_TYPE_Q5_1, KT_TYPE_Q8_0,
        KT_TYPE_Q2_K, KT_TYPE_Q3_K, KT_TYPE_Q4_K, KT_TYPE_Q5_K, KT_TYPE_Q6_K,
        KT_TYPE_IQ4_NL, KT_TYPE_IQ4_XS, KT_TYPE_BF16, KT_TYPE_F16, KT_TYPE_F32,
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (kt_type_name(types[i]) && !strcasecmp(kt_type_name(types[i]), name))
            return types[i];
    return KT_TYPE_INVALID;
}

int main(int argc, char **argv)
{
    const char *input = NULL, *output = NULL, *method = NULL;
    int64_t group = 0, threads = 0;
    int resume = 0, verify = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("kt-convert %s (libkt %s)\n", KT_VERSION_STRING, kt_version());
            return 0;
        } else if (opt_match(argc, argv, &i, "--input", true, &v, &bad)) {
            input = v;
        } else if (opt_match(argc, argv, &i, "--output", true, &v, &bad)) {
            output = v;
        } else if (opt_match(argc, argv, &i, "--method", true, &v, &bad)) {
            method = v;
        } else if (opt_match(argc, argv, &i, "--group-size", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(TOOL, "--group-size", v, 1, 4096, &group))
                return 2;
        } else if (opt_match(argc, argv, &i, "--threads", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(TOOL, "--threads", v, 1, 4096, &threads))
                return 2;
        } else if (!strcmp(argv[i], "--resume")) {
            resume = 1;
        } else if (!strcmp(argv[i], "--verify")) {
            verify = 1;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = 1;
        } else {
            fprintf(stderr, "%s: unknown option '%s' (try --help)\n", TOOL, argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!input || !output || !method) {
        fprintf(stderr, "%s: --input, --output and --method are required (try --help)\n", TOOL);
        return 2;
    }
    kt_convert_options co = KT_CONVERT_OPTIONS_INIT;
    if (!strcasecmp(method, "int8") || !strcasecmp(method, "amxint8"))
        co.method = KT_METHOD_AMXINT8;
    else if (!strcasecmp(method, "int4") || !strcasecmp(method, "amxint4"))
        co.method = KT_METHOD_AMXINT4;
    else if (!strncasecmp(method, "gguf:", 5)) {
        co.method = KT_METHOD_LLAMAFILE;
        co.gguf_type = gguf_type_named(method + 5);
        if (co.gguf_type == KT_TYPE_INVALID) {
            fprintf(stderr, "%s: --method: '%s' is not a GGUF expert type (try --help)\n",
                    TOOL, method + 5);
            return 2;
        }
    } else {
        fprintf(stderr, "%s: --method: '%s' is not int8, int4 or gguf:TYPE\n", TOOL, method);
        return 2;
    }
    progress p = {isatty(2), quiet, now(), 0, 0.0};
    co.group_size = (uint32_t)group;
    co.n_threads = (int32_t)threads;
    co.flags = (resume ? KT_CONVERT_F_RESUME : 0) | (verify ? KT_CONVERT_F_VERIFY : 0);
    co.progress_fn = on_progress;
    co.progress_user_data = &p;
    co.layer_fn = on_layer;
    co.layer_user_data = &p;
    kt_convert_report rep = KT_CONVERT_REPORT_INIT;
    kt_status st = kt_convert(NULL, input, output, &co, &rep);
    if (st < 0) {
        if (p.tty && !quiet)
            fprintf(stderr, "\n");
        fprintf(stderr, "%s: %s: %s\n", TOOL, kt_status_str(st), kt_last_error());
        return 1;
    }
    char b[32], g[32] = "";
    snprintf(b, sizeof b, "%.1f MiB", (double)rep.bytes_written / (1024.0 * 1024.0));
    if (co.method == KT_METHOD_AMXINT4)
        snprintf(g, sizeof g, " (group %u)", co.group_size ? co.group_size : 32u);
    printf("%s: %u MoE layers x %u experts as %s%s in %s (%u kept, %s written, %.1f s); "
           "relative RMS error mean %.6f, worst %.6f%s\n",
           TOOL, rep.n_layers, rep.n_experts, kt_method_name((kt_method)co.method), g, output,
           rep.n_resumed, b, now() - p.t0, rep.mean_rel_rms, rep.max_rel_rms,
           verify ? "; verified" : "");
    return 0;
}
