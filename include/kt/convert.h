/*
 * kt/convert.h - converting a checkpoint's routed experts to libkt's CPU
 * weight format (what `kt-convert` does), and reading that format back.
 *
 *     kt_convert_options co = KT_CONVERT_OPTIONS_INIT;
 *     co.method = KT_METHOD_AMXINT4;          // or KT_METHOD_AMXINT8
 *     co.flags = KT_CONVERT_F_RESUME | KT_CONVERT_F_VERIFY;
 *     kt_convert_report rep = KT_CONVERT_REPORT_INIT;
 *     if (kt_convert(rt, "Kimi-K2-Instruct", "Kimi-K2-cpu-int4", &co, &rep) < 0)
 *         fprintf(stderr, "%s\n", kt_last_error());
 *
 * Input: a model directory that kt_model_open() reads, with BF16, F16, F32 or
 * FP8 (128x128 block) experts; FP8 is dequantized on the CPU. Only routed
 * experts are converted; everything else is read from the checkpoint itself.
 *
 * Output (docs/cpu-format.md has every byte): one safetensors file per MoE
 * layer, `kt-experts-layer-NNN.safetensors`, with metadata naming the format
 * (kt.format = "libkt.cpu_experts", kt.version = "2"; "1" still read), the method, the group
 * size and checksums of the source; tensors `experts.E.{gate,up,down}.q` and
 * `.scale` laid out as the kernels read them, so loading is an mmap. The
 * files do not depend on the NUMA node count (the backend slices at load).
 *
 * Methods:
 *   AMXINT8  q I8 [out][in], scale F32 [out]: w = q * scale (per output row,
 *            scale = max|w| / 127).
 *   AMXINT4  q I32 [out][in/8] (8 nibbles, first input in the lowest bits,
 *            stored as value + 8, value in -8..7), scale BF16 [out][in/G]:
 *            w = value * scale per group of G (32, 64, 128) inputs. Version 2
 *            puts each row's scales on a grid, e * max / 16 with integers e <=
 *            16, chosen to minimise the squared error, so the AMX tiles run the
 *            row as int8 on one scale exactly. The layout of compressed-tensors
 *            INT4.
 *
 * Thread contract: kt_convert() runs its own workers; the call blocks.
 */
#ifndef KT_CONVERT_H
#define KT_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KT_CONVERT_F_RESUME (1u << 0) /* keep finished layer files that match          */
#define KT_CONVERT_F_VERIFY (1u << 1) /* read each written layer back and check it     */

/* Called after each layer: its relative RMS error (||w - w_q|| / ||w|| over
 * the layer's routed experts), bytes written, and whether it was kept from an
 * earlier run (resumed, error then read back from the file). */
typedef void (*kt_convert_layer_fn)(uint32_t layer, double rel_rms, uint64_t bytes,
                                    int32_t resumed, void *user_data);

typedef struct kt_convert_options {
    uint32_t struct_size;            /* sizeof(kt_convert_options)                        */
    uint32_t flags;                  /* KT_CONVERT_F_*                                    */
    int32_t method;                  /* KT_METHOD_AMXINT8 or KT_METHOD_AMXINT4 (required)  */
    uint32_t group_size;             /* AMXINT4 inputs per scale: 32 (0), 64 or 128         */
    int32_t n_threads;               /* 0: physical cores                                 */
    int32_t reserved;
    kt_progress_fn progress_fn;      /* per expert; nonzero return cancels               */
    void *progress_user_data;
    kt_convert_layer_fn layer_fn;    /* may be NULL                                       */
    void *layer_user_data;
    /* KT_METHOD_LLAMAFILE: the ggml block type of every routed expert (KT_TYPE_Q4_K,
     * _Q8_0, ...); output_dir is then the path of ONE .gguf file with tensors
     * blk.N.ffn_{gate,up,down}_exps.weight (ne {in, out, E}, as llama.cpp names
     * them), read in place by --kt-method LLAMAFILE --kt-weight-path FILE. Since 0.1. */
    int32_t gguf_type;
} kt_convert_options;

#define KT_CONVERT_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_convert_options), 0u, KT_METHOD_NONE, 0u, 0, 0, NULL, NULL, NULL, NULL, \
      KT_TYPE_INVALID }

typedef struct kt_convert_report {
    uint32_t struct_size;            /* sizeof(kt_convert_report)                         */
    uint32_t n_layers;               /* MoE layers in the output                          */
    uint32_t n_resumed;              /* of them kept from an earlier run                  */
    uint32_t n_experts;              /* per layer                                         */
    uint64_t bytes_written;          /* new bytes this run                                */
    double max_rel_rms;              /* worst layer                                       */
    double mean_rel_rms;             /* over layers                                       */
} kt_convert_report;

#define KT_CONVERT_REPORT_INIT { (uint32_t)sizeof(kt_convert_report), 0u, 0u, 0u, 0u, 0.0, 0.0 }

/* Fills *opts with defaults for a struct of struct_size bytes. Since 0.1. */
KT_API kt_status kt_convert_options_init(kt_convert_options *opts, size_t struct_size);

/* Converts the routed experts of the model in input_dir into output_dir
 * (created if missing). rt may be NULL; report may be NULL. Failures name the
 * file and tensor; KT_ERR_CANCELLED when the progress callback asks. On
 * failure, finished layer files stay (resume with KT_CONVERT_F_RESUME) and no
 * half-written file is left. Since 0.1. */
KT_API kt_status kt_convert(kt_runtime *rt, const char *input_dir, const char *output_dir,
                            const kt_convert_options *opts, kt_convert_report *report);

#ifdef __cplusplus
}
#endif
#endif /* KT_CONVERT_H */
