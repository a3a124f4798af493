/*
 * kt_convert() to GGUF (KT_METHOD_LLAMAFILE): the routed experts of a Hugging
 * Face checkpoint quantized with ggml's reference quantizers into one GGUF
 * file that `--kt-method LLAMAFILE --kt-weight-path FILE.gguf` reads in place.
 *
 * Per MoE layer N, three 3-D tensors as llama.cpp names and lays them out:
 *   blk.N.ffn_gate_exps.weight  ne {H, I, E}   (expert e's [I][H] rows)
 *   blk.N.ffn_up_exps.weight    ne {H, I, E}
 *   blk.N.ffn_down_exps.weight  ne {I, H, E}
 * Metadata: general.architecture = "kt-experts", kt-experts.{block_count,
 * embedding_length, expert_feed_forward_length, expert_count}, the source's
 * model_type and config checksum, and general.file_type-like kt.gguf_type.
 * The writer holds the quantized layers in memory until the file is written
 * (a Qwen3-30B-A3B layer in Q4_K is ~340 MB).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "convert_gguf.h"
#include "cpu_weights.h"
#include "io/convert_types.h"
#include "io/gguf.h"
#include "kt/hw.h"
#include "kt_internal.h"
#include "../../cpu/ref/ggml_quants.h"

static const kt_role proj_role[3] = {KT_ROLE_EXPERT_GATE, KT_ROLE_EXPERT_UP,
                                     KT_ROLE_EXPERT_DOWN};
static const char *const proj_tensor[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

typedef struct gguf_job {
    const kt_model *model;
    uint32_t layer, E, tid, nth;
    uint64_t H, I;
    kt_type type[3];   /* per projection (fallbacks where a K type does not fit) */
    uint8_t *out[3];   /* [E][rows][row bytes] per projection */
    double err, ref;
    kt_status status;
    char error[512];
} gguf_job;

/* Experts tid, tid + nth, ...: rows to F32, quantized, error measured by
 * dequantizing the row back. */
static void *quantize_experts(void *arg)
{
    gguf_job *j = arg;
    uint64_t mx = j->H > j->I ? j->H : j->I;
    float *row = kt__malloc_array((size_t)mx, sizeof(float));
    float *back = kt__malloc_array((size_t)mx, sizeof(float));
    j->status = KT_OK;
    if (!row || !back) {
        j->status = KT_ERR_NOMEM;
        snprintf(j->error, sizeof j->error, "out of memory");
    }
    for (uint32_t e = j->tid; e < j->E && j->status == KT_OK; e += j->nth) {
        for (int p = 0; p < 3 && j->status == KT_OK; p++) {
            uint64_t rows = p == 2 ? j->H : j->I, cols = p == 2 ? j->I : j->H;
            const kt_ggml_traits *tr = kt__ggml_traits(j->type[p]);
            size_t rb = kt__ggml_row_bytes(j->type[p], (int64_t)cols);
            kt_tensor_view v;
            memset(&v, 0, sizeof v);
            v.struct_size = sizeof v;
            kt_status st = kt_model_tensor(j->model, j->layer, proj_role[p], e, &v);
            if (st == KT_OK && (v.layout != KT_LAYOUT_OUT_IN || v.flags & KT_TENSOR_F_STACKED))
                st = kt__error(KT_ERR_UNSUPPORTED,
                               "%s: fused or transposed expert tensors (gpt-oss) are not "
                               "convertible yet",
                               v.name ? v.name : "expert");
            if (st == KT_OK && (v.rows != rows || v.cols != cols))
                st = kt__error(KT_ERR_FORMAT, "%s: shape %llux%llu, expected %llux%llu",
                               v.name, (unsigned long long)v.rows, (unsigned long long)v.cols,
                               (unsigned long long)rows, (unsigned long long)cols);
            uint8_t *dst = j->out[p] + (size_t)e * rows * rb;
            for (uint64_t r = 0; r < rows && st == KT_OK; r++) {
                st = kt__convert_row_f32(&v, r, row);
                if (st < 0)
                    break;
                tr->quantize(row, dst + r * rb, (int64_t)cols);
                tr->to_float(dst + r * rb, back, (int64_t)cols);
                for (uint64_t c = 0; c < cols; c++) {
                    double d = (double)row[c] - back[c];
                    j->err += d * d;
                    j->ref += (double)row[c] * row[c];
                }
            }
            if (st < 0) {
                j->status = st;
                snprintf(j->error, sizeof j->error, "layer %u expert %u %s: %s", j->layer, e,
                         proj_tensor[p], kt_last_error());
            }
        }
    }
    kt__free(row);
    kt__free(back);
    return NULL;
}

/* llama.cpp's choice for a row width the type's 256-blocks do not divide:
 * a 32-block type of about the same size. */
static kt_type fit_type(kt_type t, uint64_t cols)
{
    if (cols % kt__ggml_traits(t)->block_size == 0)
        return t;
    switch (t) {
    case KT_TYPE_Q2_K: case KT_TYPE_Q3_K: case KT_TYPE_IQ4_XS: return KT_TYPE_IQ4_NL;
    case KT_TYPE_Q4_K: return KT_TYPE_Q5_0;
    case KT_TYPE_Q5_K: return KT_TYPE_Q5_1;
    case KT_TYPE_Q6_K: return KT_TYPE_Q8_0;
    default: return t;
    }
}

static kt_status add_meta(kt_gguf_writer *w, const kt_arch_info *arch, uint32_t n_layers,
                          uint32_t E, const char *input_dir, kt_type type)
{
    kt_status st = kt__gguf_writer_add_str(w, "general.architecture", "kt-experts");
    if (st == KT_OK)
        st = kt__gguf_writer_add_u32(w, "general.alignment", 32);
    if (st == KT_OK)
        st = kt__gguf_writer_add_str(w, "kt-experts.source_model_type",
                                     arch->model_type ? arch->model_type : "");
    if (st == KT_OK)
        st = kt__gguf_writer_add_u32(w, "kt-experts.block_count", n_layers);
    if (st == KT_OK)
        st = kt__gguf_writer_add_u32(w, "kt-experts.embedding_length", arch->hidden_size);
    if (st == KT_OK)
        st = kt__gguf_writer_add_u32(w, "kt-experts.expert_feed_forward_length",
                                     arch->moe_intermediate_size);
    if (st == KT_OK)
        st = kt__gguf_writer_add_u32(w, "kt-experts.expert_count", E);
    if (st == KT_OK)
        st = kt__gguf_writer_add_u64(w, "kt-experts.source_checksum",
                                     kt__cpu_weights_config_checksum(input_dir));
    if (st == KT_OK)
        st = kt__gguf_writer_add_str(w, "kt-experts.type", kt_type_name(type));
    return st;
}

kt_status kt__convert_gguf(kt_runtime *rt, const char *input_dir, const char *output_path,
                           const kt_convert_options *o, kt_convert_report *report)
{
    kt_type type = (kt_type)o->gguf_type;
    const kt_ggml_traits *tr = kt__ggml_traits(type);
    if (!tr || !tr->quantize || !tr->vec_dot)
        return kt__error(KT_ERR_INVALID_ARG,
                         "kt_convert: gguf_type %d (%s) is not a GGUF expert type (Q4_0, Q4_1, "
                         "Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, BF16, F16, F32)",
                         o->gguf_type, kt_type_name(type) ? kt_type_name(type) : "unknown");
    if (o->flags & KT_CONVERT_F_RESUME)
        return kt__error(KT_ERR_UNSUPPORTED, "kt_convert: --resume is for libkt's layer files; "
                                             "a GGUF is written whole");
    int nth = kt__convert_threads(o);
    if (nth < 0)
        return KT_ERR_INVALID_ARG;
    kt__convert_source src;
    kt_status st = kt__convert_source_open(&src, rt, input_dir);
    if (st < 0)
        return st;
    kt_model *model = src.model;
    const kt_arch_info *arch = &src.arch;
    uint32_t L = src.L, E = src.E, n_moe = src.n_moe;
    uint64_t H = src.H, I = src.I;
    kt_type ptype[3] = {fit_type(type, H), fit_type(type, H), fit_type(type, I)};
    if (H % 32 || I % 32 || (tr->block_size > 1 && H % kt__ggml_traits(ptype[0])->block_size)) {
        kt_model_free(model);
        return kt__error(KT_ERR_UNSUPPORTED,
                         "%s: %s needs hidden (%llu) and expert intermediate (%llu) multiples "
                         "of 32",
                         input_dir, tr->name, (unsigned long long)H, (unsigned long long)I);
    }
    for (int p = 0; p < 3; p++)
        if (ptype[p] != type)
            kt__log(rt, KT_LOG_INFO, "kt_convert: %s rows of %llu are not whole %s blocks: "
                    "%s instead (as llama.cpp does)", proj_tensor[p],
                    (unsigned long long)(p == 2 ? I : H), tr->name,
                    kt_type_name(ptype[p]));
    uint8_t **bufs = kt__calloc((size_t)n_moe * 3 + 1, sizeof *bufs);
    gguf_job *jobs = kt__calloc((size_t)nth, sizeof *jobs);
    pthread_t *tids = kt__calloc((size_t)nth, sizeof *tids);
    kt_gguf_writer *w = NULL;
    if (!bufs || !jobs || !tids)
        st = kt__error(KT_ERR_NOMEM, "kt_convert: out of memory");
    if (st == KT_OK)
        st = kt__gguf_writer_create(&w, 3);
    if (st == KT_OK)
        st = add_meta(w, arch, L, E, input_dir, type);
    kt_convert_report rep = KT_CONVERT_REPORT_INIT;
    rep.n_experts = E;
    double sum_rel = 0;
    uint64_t done = 0, total = (uint64_t)n_moe * E;
    uint32_t mi = 0;
    for (uint32_t l = 0; l < L && st == KT_OK; l++) {
        if (!kt_model_layer_is_moe(model, l))
            continue;
        size_t sizes[3];
        for (int p = 0; p < 3 && st == KT_OK; p++) {
            uint64_t rows = p == 2 ? H : I, cols = p == 2 ? I : H;
            sizes[p] = (size_t)E * rows * kt__ggml_row_bytes(ptype[p], (int64_t)cols);
            bufs[mi * 3 + p] = kt__malloc(sizes[p]);
            if (!bufs[mi * 3 + p])
                st = kt__error(KT_ERR_NOMEM, "kt_convert: out of memory for layer %u (%zu "
                                             "bytes)", l, sizes[p]);
        }
        for (int t = 0; t < nth && st == KT_OK; t++) {
            jobs[t] = (gguf_job){.model = model, .layer = l, .E = E, .tid = (uint32_t)t,
                                 .nth = (uint32_t)nth, .H = H, .I = I,
                                 .type = {ptype[0], ptype[1], ptype[2]},
                                 .out = {bufs[mi * 3], bufs[mi * 3 + 1], bufs[mi * 3 + 2]}};
            if (nth == 1 || pthread_create(&tids[t], NULL, quantize_experts, &jobs[t]) != 0) {
                quantize_experts(&jobs[t]);
                tids[t] = 0;
            }
        }
        double err = 0, ref = 0;
        for (int t = 0; t < nth && st == KT_OK; t++) {
            if (tids[t])
                pthread_join(tids[t], NULL);
            err += jobs[t].err;
            ref += jobs[t].ref;
        }
        for (int t = 0; t < nth && st == KT_OK; t++)
            if (jobs[t].status < 0)
                st = kt__error(jobs[t].status, "%s: %s", input_dir, jobs[t].error);
        for (int p = 0; p < 3 && st == KT_OK; p++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, proj_tensor[p]);
            uint64_t ne[3] = {p == 2 ? I : H, p == 2 ? H : I, E};
            st = kt__gguf_writer_add_tensor(w, name, (uint32_t)kt__type_to_ggml(ptype[p]), 3, ne,
                                            bufs[mi * 3 + p]);
        }
        mi++;
        if (st < 0)
            break;
        double rel = ref > 0 ? sqrt(err / ref) : 0.0;
        rep.n_layers++;
        rep.bytes_written += sizes[0] + sizes[1] + sizes[2];
        sum_rel += rel;
        rep.max_rel_rms = KT_MAX(rep.max_rel_rms, rel);
        done += E;
        if (o->progress_fn) {
            char what[64];
            snprintf(what, sizeof what, "layer %u", l);
            if (o->progress_fn(done, total, what, o->progress_user_data))
                st = kt__error(KT_ERR_CANCELLED, "kt_convert: cancelled at layer %u", l);
        }
        if (o->layer_fn)
            o->layer_fn(l, rel, sizes[0] + sizes[1] + sizes[2], 0, o->layer_user_data);
    }
    if (st == KT_OK)
        st = kt__gguf_writer_write_file(w, output_path);
    rep.mean_rel_rms = rep.n_layers ? sum_rel / rep.n_layers : 0.0;
    if (st == KT_OK && report && report->struct_size >= sizeof(uint32_t)) {
        uint32_t size = report->struct_size;
        rep.struct_size = (uint32_t)KT_MIN((size_t)size, sizeof rep);
        memcpy(report, &rep, KT_MIN((size_t)size, sizeof rep));
    }
    kt__gguf_writer_free(w);
    for (uint32_t i = 0; bufs && i < n_moe * 3; i++)
        kt__free(bufs[i]);
    kt__free(bufs);
    kt__free(jobs);
    kt__free(tids);
    kt_model_free(model);
    return st;
}
