/* kt-bench: proves libkt's speed as a ratio of this machine's own limits
 * (stream bandwidth, oneDNN matmul), measured in the same run. */
#include <stdio.h>

#include "bench.h"
#include "subcmd.h"

static const subcmd commands[] = {
    {"stream", cmd_stream, "memory bandwidth: read, copy, triad (GB/s)"},
    {"gemm", cmd_gemm, "oneDNN matmul: BF16 TFLOP/s and INT8 TOP/s for MoE shapes"},
    {"moe", cmd_moe, "CPU MoE backend: decode GB/s vs stream, prefill TFLOP/s vs oneDNN"},
    {"engine", cmd_engine, "whole models: prefill and decode tok/s vs rooflines"},
    {"placement", cmd_placement, "expert placement: GPU-served share of routed pairs"},
    {"e2e", cmd_e2e, "GPU+CPU hybrid runtime: prefill and decode tok/s vs rooflines"},
    {"hybrid", cmd_hybrid, "CPU MoE backend driven as the GPU runtime drives it"},
};

static const subcmd_tool kt_bench_tool = {
    "kt-bench",
    "usage: kt-bench COMMAND [OPTIONS]\n"
    "\n"
    "Benchmarks libkt against the limits of this machine, measured in the same\n"
    "run, and reports ratios (decode GB/s / stream GB/s, prefill TFLOP/s / oneDNN\n"
    "TFLOP/s), so that results on busy or different machines stay comparable.\n",
    8,
    commands,
    sizeof commands / sizeof commands[0],
};

int main(int argc, char **argv)
{
    int rc = subcmd_common(&kt_bench_tool, argc, argv);
    if (rc >= 0)
        return rc;
    const subcmd *cmd = subcmd_find(&kt_bench_tool, argv[1]);
    if (cmd)
        return cmd->fn(argc - 1, argv + 1);
    fprintf(stderr, "kt-bench: unknown command or option '%s' (try kt-bench --help)\n", argv[1]);
    return 2;
}
