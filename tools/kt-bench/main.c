/* kt-bench: proves libkt's speed as a ratio of this machine's own limits
 * (stream bandwidth, oneDNN matmul), measured in the same run. */
#include <stdio.h>
#include <string.h>

#include <kt/kt.h>

#include "bench.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"stream", cmd_stream, "memory bandwidth: read, copy, triad (GB/s)"},
    {"gemm", cmd_gemm, "oneDNN matmul: BF16 TFLOP/s and INT8 TOP/s for MoE shapes"},
    {"moe", cmd_moe, "CPU MoE backend: decode GB/s vs stream, prefill TFLOP/s vs oneDNN"},
    {"engine", cmd_engine, "whole models: prefill and decode tok/s vs rooflines"},
    {"placement", cmd_placement, "expert placement: GPU-served share of routed pairs"},
    {"e2e", cmd_e2e, "GPU+CPU hybrid runtime: prefill and decode tok/s vs rooflines"},
    {"hybrid", cmd_hybrid, "CPU MoE backend driven as the GPU runtime drives it"},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench COMMAND [OPTIONS]\n"
            "\n"
            "Benchmarks libkt against the limits of this machine, measured in the same\n"
            "run, and reports ratios (decode GB/s / stream GB/s, prefill TFLOP/s / oneDNN\n"
            "TFLOP/s), so that results on busy or different machines stay comparable.\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n"
            "Options:\n"
            "  -h, --help     show this help (COMMAND --help for a command's options)\n"
            "  --version      print kt-bench's and libkt's versions\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *first = argv[1];
    if (!strcmp(first, "-h") || !strcmp(first, "--help") || !strcmp(first, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(first, "--version") || !strcmp(first, "-V")) {
        printf("kt-bench %s (libkt %s)\n", KT_VERSION_STRING, kt_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(first, commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kt-bench: unknown command or option '%s' (try kt-bench --help)\n", first);
    return 2;
}
