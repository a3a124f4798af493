/* kt_convert() with KT_METHOD_LLAMAFILE: the routed experts of a checkpoint as
 * a GGUF file (lib/convert/convert_gguf.c). Internal. */
#ifndef KT_CONVERT_GGUF_H
#define KT_CONVERT_GGUF_H

#include "kt/convert.h"
#include "kt/model.h"

/* Row r of an expert weight view as F32 (plain floats or FP8 blocks), from convert.c. */
kt_status kt__convert_row_f32(const kt_tensor_view *v, uint64_t r, float *out);

/* The checkpoint a conversion reads: the model, its description, its L layers of which
 * n_moe are MoE layers of E routed experts, hidden size H and expert intermediate size I. */
typedef struct kt__convert_source {
    kt_model *model;
    kt_arch_info arch;
    uint32_t L, E, n_moe;
    uint64_t H, I;
} kt__convert_source;

/* Opens input_dir for a conversion; KT_ERR_UNSUPPORTED (and nothing left open) when it has
 * no routed experts. Free src->model with kt_model_free(). From convert.c. */
kt_status kt__convert_source_open(kt__convert_source *src, kt_runtime *rt, const char *input_dir);

/* The worker threads of a conversion: o->n_threads, 0 for the physical cores; -1 with the
 * error set when negative. From convert.c. */
int kt__convert_threads(const kt_convert_options *o);

/* Writes output_path (a .gguf file) with tensors blk.N.ffn_{gate,up,down}_exps.weight
 * ([E][I][H], [E][I][H], [E][H][I] as ggml ne = {in, out, E}) in o->gguf_type for
 * every MoE layer N of the model in input_dir. */
kt_status kt__convert_gguf(kt_runtime *rt, const char *input_dir, const char *output_path,
                           const kt_convert_options *o, kt_convert_report *report);

#endif /* KT_CONVERT_GGUF_H */
