/*
 * kt_convert(): routed experts of a checkpoint -> libkt's CPU format
 * (docs/cpu-format.md). One layer at a time, experts in batches of one per
 * worker, so peak memory is a batch of quantized experts plus the row
 * buffers, never the model.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert_gguf.h"
#include "cpu_weights.h"
#include "io/convert_types.h"
#include "io/safetensors.h"
#include "kt/convert.h"
#include "kt/hw.h"
#include "kt/model.h"
#include "kt_internal.h"

KT__DEFINE_OPTIONS_INIT(kt_convert_options_init, kt_convert_options, KT_CONVERT_OPTIONS_INIT)

/* Row r of a source weight as F32: plain floats, or FP8 blocks times their scale. */
static kt_status view_row_f32(const kt_tensor_view *v, uint64_t r, float *out)
{
    uint64_t cols = v->cols;
    if (v->storage == KT_STORAGE_PLAIN) {
        uint32_t es = kt_type_block_bytes((kt_type)v->type);
        return kt__tensor_to_f32((const uint8_t *)v->data + r * cols * es, (kt_type)v->type, cols,
                                 out);
    }
    if (v->storage == KT_STORAGE_FP8_BLOCK) {
        const uint8_t *row = (const uint8_t *)v->data + r * cols;
        uint64_t sb = (cols + v->block_cols - 1) / v->block_cols;
        uint64_t srow = r / v->block_rows;
        for (uint64_t c = 0; c < cols; c++) {
            uint64_t si = srow * sb + c / v->block_cols;
            float s;
            if (v->scale_type == KT_TYPE_F32) {
                memcpy(&s, (const uint8_t *)v->scale_data + si * 4, 4);
            } else {
                uint16_t h;
                memcpy(&h, (const uint8_t *)v->scale_data + si * 2, 2);
                s = kt__bf16_to_f32(h);
            }
            out[c] = (v->type == KT_TYPE_F8_E5M2 ? kt__e5m2_to_f32(row[c])
                                                  : kt__e4m3_to_f32(row[c])) *
                     s;
        }
        return KT_OK;
    }
    return kt__error(KT_ERR_UNSUPPORTED,
                     "%s: stored as %s; kt-convert reads BF16, F16, F32 and FP8 checkpoints "
                     "(INT4 ones run as they are with --kt-method RAWINT4)",
                     v->name, kt_storage_name((kt_storage)v->storage));
}

kt_status kt__convert_row_f32(const kt_tensor_view *v, uint64_t r, float *out)
{
    return view_row_f32(v, r, out);
}

/* ---- quantizers (one output row at a time) ------------------------------ */

/* AMXINT8: scale = max|w| / 127, q = round(w / scale). Adds the squared error
 * and the squared weights to *err and *ref. */
static void quant_row_int8(const float *w, int n, int8_t *q, float *scale, double *err,
                           double *ref)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(w[i]));
    float s = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < n; i++) {
        int v = (int)nearbyintf(w[i] * inv);
        v = v > 127 ? 127 : (v < -127 ? -127 : v);
        q[i] = (int8_t)v;
        double d = (double)w[i] - (double)v * s;
        *err += d * d;
        *ref += (double)w[i] * w[i];
    }
    *scale = s;
}

/* Squared error of one INT4 group at scale s: q = clamp(round(w / s), -8, 7)
 * (the values, stored as q + 8, into vals when not NULL). */
static double group_error(const float *w, int G, float s, uint8_t *vals)
{
    double e = 0.0;
    for (int i = 0; i < G; i++) {
        int v = s > 0.0f ? (int)nearbyintf(w[i] / s) : 0;
        v = v > 7 ? 7 : (v < -8 ? -8 : v);
        if (vals)
            vals[i] = (uint8_t)(v + 8);
        double d = (double)w[i] - (double)v * s;
        e += d * d;
    }
    return e;
}

/* group_error for the scale searches: the same quantity by a reciprocal and
 * round-to-nearest-even through 1.5 * 2^23 (exact for |x| < 2^22; larger
 * values clamp either way), in a loop the compiler can vectorize instead of a
 * division and a nearbyintf call per weight. Ties may round the other way than
 * w / s would, so a search can pick another of two equal-error scales. */
static float group_error_fast(const float *w, int G, float s)
{
    const float inv = 1.0f / s, magic = 0x1.8p23f;
    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* G is a multiple of 4 */
    for (int i = 0; i < G; i += 4)
        for (int j = 0; j < 4; j++) {
            float v = (w[i + j] * inv + magic) - magic;
            v = v < -8.0f ? -8.0f : (v > 7.0f ? 7.0f : v);
            float d = w[i + j] - v * s;
            e[j] += d * d;
        }
    return (e[0] + e[1]) + (e[2] + e[3]);
}

/* One group's free scale (format version 1): among the BF16 roundings of
 * amax / {6.5, 6.75, .., 8} the one with the smallest squared error; 0 for
 * a zero group. */
static float group_scale_free(const float *w, int G)
{
    float amax = 0.0f;
    for (int i = 0; i < G; i++)
        amax = fmaxf(amax, fabsf(w[i]));
    double best = INFINITY;
    float best_s = 0.0f;
    for (int c = 0; c <= 6 && amax > 0.0f; c++) {
        float s = kt__bf16_to_f32(kt__f32_to_bf16(amax / (6.5f + 0.25f * (float)c)));
        double e = s > 0.0f ? group_error_fast(w, G, s) : INFINITY;
        if (e < best) {
            best = e;
            best_s = s;
        }
    }
    return best_s;
}

/* Format version 2: the row's scales are s_g = e_g C / 16 with integers e_g in
 * 0..16, one of them 16, and C = M 2^p with an integer M <= 16 (so every s_g,
 * e_g M <= 256 times a power of two, is a BF16 number). The AMX-INT8 tiles run
 * such a row as int8 weights v e_g on the one row scale C / 16, exactly
 * (cpu/amx/moe_amx.c, "INT4 on one scale per row"). For each C near the
 * largest free group scale (M - 1 .. M + 2 on the 4-bit grid) every group
 * takes the e_g with the least squared error near its free scale, the group
 * with the largest free scale 16; the C with the least row error wins. */
static void row_scales_v2(const float *w, int ng, int G, const float *sfree, float *sc,
                          float *cand)
{
    int top = 0;
    for (int g = 1; g < ng; g++)
        if (sfree[g] > sfree[top])
            top = g;
    if (!(sfree[top] > 0.0f)) {
        for (int g = 0; g < ng; g++)
            sc[g] = 0.0f;
        return;
    }
    int p;
    frexpf(sfree[top], &p); /* sfree = m 2^p, m in [0.5, 1) */
    p -= 4;                 /* M = sfree / 2^p in [8, 16) */
    int m0 = (int)floorf(ldexpf(sfree[top], -p));
    double best = INFINITY;
    for (int m = m0 - 1; m <= m0 + 2; m++) {
        if (m < 1 || m > 16)
            continue;
        float C = ldexpf((float)m, p), S = C / 16.0f;
        double total = 0.0;
        for (int g = 0; g < ng && total < best; g++) {
            const float *wg = w + (size_t)g * G;
            if (g == top || !(sfree[g] > 0.0f)) {
                cand[g] = g == top ? C : 0.0f;
                total += g == top ? group_error_fast(wg, G, C) : group_error(wg, G, 0.0f, NULL);
                continue;
            }
            int e0 = (int)floorf(sfree[g] / S);
            double ge = INFINITY;
            for (int e = e0 - 1; e <= e0 + 2; e++) {
                if (e < 1 || e > 16)
                    continue;
                double err = group_error_fast(wg, G, (float)e * S);
                if (err < ge) {
                    ge = err;
                    cand[g] = (float)e * S;
                }
            }
            total += ge;
        }
        if (total < best) {
            best = total;
            memcpy(sc, cand, (size_t)ng * sizeof *sc);
        }
    }
}

void kt__int4_quant_row(const float *w, int n, int G, int version, uint32_t *packed,
                        uint16_t *scales, float *work, double *err, double *ref)
{
    int ng = n / G;
    float *sfree = work, *sc = work + ng;
    for (int g = 0; g < ng; g++)
        sfree[g] = group_scale_free(w + (size_t)g * G, G);
    if (version >= 2)
        row_scales_v2(w, ng, G, sfree, sc, work + 2 * ng);
    else
        memcpy(sc, sfree, (size_t)ng * sizeof *sc);
    for (int g = 0; g < ng; g++) {
        uint8_t vals[128];
        const float *wg = w + (size_t)g * G;
        *err += group_error(wg, G, sc[g], vals);
        scales[g] = kt__f32_to_bf16(sc[g]); /* exact: sc[g] is a BF16 number */
        for (int wd = 0; wd < G / 8; wd++) {
            uint32_t word = 0;
            for (int i = 0; i < 8; i++)
                word |= (uint32_t)vals[wd * 8 + i] << (4 * i);
            packed[g * (G / 8) + wd] = word;
        }
        for (int i = 0; i < G; i++)
            *ref += (double)wg[i] * wg[i];
    }
}

int kt__int4_row_on_grid(const uint16_t *scales, int ng)
{
    float m = 0.0f;
    for (int g = 0; g < ng; g++)
        m = fmaxf(m, fabsf(kt__bf16_to_f32(scales[g])));
    for (int g = 0; g < ng && m > 0.0f; g++) {
        float e = fabsf(kt__bf16_to_f32(scales[g])) * 16.0f / m;
        if (e != nearbyintf(e))
            return 0;
    }
    return 1;
}

/* ---- one expert ------------------------------------------------------------ */

typedef struct expert_job {
    const kt_model *model;
    uint32_t layer, expert;
    int method;
    uint32_t group;    /* AMXINT4 inputs per scale                          */
    uint64_t H, I;
    void *q[3];        /* gate, up, down quantized                         */
    void *scale[3];
    double err, ref;   /* squared error and squared weights                */
    uint64_t hash;     /* of the source bytes                              */
    kt_status status;
    char error[512];
} expert_job;

static const kt_role proj_role[3] = {KT_ROLE_EXPERT_GATE, KT_ROLE_EXPERT_UP, KT_ROLE_EXPERT_DOWN};
static const char *const proj_name[3] = {"gate", "up", "down"};

/* row: 2 * cols floats (the row, then the INT4 quantizer's work space) */
static kt_status quantize_matrix(expert_job *j, int p, const kt_tensor_view *v, float *row)
{
    uint64_t rows = v->rows, cols = v->cols;
    float *work = row + cols;
    for (uint64_t r = 0; r < rows; r++) {
        kt_status st = view_row_f32(v, r, row);
        if (st < 0)
            return st;
        if (j->method == KT_METHOD_AMXINT8) {
            quant_row_int8(row, (int)cols, (int8_t *)j->q[p] + r * cols,
                           (float *)j->scale[p] + r, &j->err, &j->ref);
        } else {
            kt__int4_quant_row(row, (int)cols, (int)j->group, KT__CPU_FORMAT_VERSION,
                               (uint32_t *)j->q[p] + r * (cols / 8),
                               (uint16_t *)j->scale[p] + r * (cols / j->group), work, &j->err,
                               &j->ref);
        }
    }
    j->hash = kt__hash64(j->hash, v->data, v->nbytes);
    if (v->scale_data)
        j->hash = kt__hash64(j->hash, v->scale_data, v->scale_nbytes);
    return KT_OK;
}

static uint64_t q_bytes(int method, uint64_t rows, uint64_t cols)
{
    return method == KT_METHOD_AMXINT8 ? rows * cols : rows * cols / 2;
}

static uint64_t scale_bytes(int method, uint32_t group, uint64_t rows, uint64_t cols)
{
    return method == KT_METHOD_AMXINT8 ? rows * 4 : rows * (cols / group) * 2;
}

static void *run_expert(void *arg)
{
    expert_job *j = arg;
    j->status = KT_OK;
    j->err = j->ref = 0.0;
    j->hash = UINT64_C(0xcbf29ce484222325);
    float *row = kt__malloc_array((size_t)KT_MAX(j->H, j->I) * 2, sizeof(float));
    if (!row) {
        j->status = KT_ERR_NOMEM;
        snprintf(j->error, sizeof j->error, "out of memory");
        return NULL;
    }
    for (int p = 0; p < 3 && j->status == KT_OK; p++) {
        kt_tensor_view v;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        kt_status st = kt_model_tensor(j->model, j->layer, proj_role[p], j->expert, &v);
        if (st == KT_OK && (v.layout != KT_LAYOUT_OUT_IN || v.flags & KT_TENSOR_F_STACKED))
            st = kt__error(KT_ERR_UNSUPPORTED,
                           "%s: fused or transposed expert tensors (gpt-oss) are not "
                           "convertible yet",
                           v.name ? v.name : "expert");
        uint64_t rows = p == 2 ? j->H : j->I, cols = p == 2 ? j->I : j->H;
        if (st == KT_OK && (v.rows != rows || v.cols != cols))
            st = kt__error(KT_ERR_FORMAT, "%s: shape %llux%llu, expected %llux%llu", v.name,
                           (unsigned long long)v.rows, (unsigned long long)v.cols,
                           (unsigned long long)rows, (unsigned long long)cols);
        if (st == KT_OK) {
            j->q[p] = kt__malloc((size_t)q_bytes(j->method, rows, cols));
            j->scale[p] = kt__malloc((size_t)scale_bytes(j->method, j->group, rows, cols));
            st = (j->q[p] && j->scale[p]) ? quantize_matrix(j, p, &v, row) : KT_ERR_NOMEM;
        }
        if (st < 0) {
            j->status = st;
            snprintf(j->error, sizeof j->error, "layer %u expert %u %s: %s", j->layer,
                     j->expert, proj_name[p], kt_last_error());
        }
    }
    kt__free(row);
    return NULL;
}

static void free_job(expert_job *j)
{
    for (int p = 0; p < 3; p++) {
        kt__free(j->q[p]);
        kt__free(j->scale[p]);
        j->q[p] = j->scale[p] = NULL;
    }
}

/* ---- files ----------------------------------------------------------------- */

static kt_status make_dir(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return kt__error(KT_ERR_IO, "%s: exists and is not a directory", dir);
        return KT_OK;
    }
    if (mkdir(dir, 0777) != 0)
        return kt__error(KT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    return KT_OK;
}

/* kt-convert.json: what the conversion did, rewritten after every layer:
 * {"format": "libkt.cpu_experts", "version": 2, "method": ..., "group_size": ...,
 *  "source": ..., "source_checksum": ..., "layers": [{"layer": L, "rel_rms": e}, ...]} */
static kt_status write_summary(const char *dir, const char *input_dir, int method,
                               uint32_t group, uint64_t checksum, const uint32_t *layers,
                               const double *rel, uint32_t n)
{
    kt_buf b = KT_BUF_INIT;
    kt_status st = kt__buf_appendf(&b,
                                   "{\"format\": \"libkt.cpu_experts\", \"version\": %d, "
                                   "\"method\": \"%s\", \"group_size\": %u, "
                                   "\"source_checksum\": \"%016llx\", \"layers\": [",
                                   KT__CPU_FORMAT_VERSION, kt_method_name((kt_method)method),
                                   group,
                                   (unsigned long long)checksum);
    for (uint32_t i = 0; i < n && st == KT_OK; i++)
        st = kt__buf_appendf(&b, "%s\n  {\"layer\": %u, \"rel_rms\": %.9g}", i ? "," : "",
                             layers[i], rel[i]);
    if (st == KT_OK)
        st = kt__buf_appendf(&b, "\n]}\n");
    (void)input_dir;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/kt-convert.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = st == KT_OK ? fopen(tmp, "wb") : NULL;
    if (st == KT_OK && !f)
        st = kt__error(KT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (f) {
        bool ok = fwrite(b.ptr, 1, b.size, f) == b.size;
        ok = fclose(f) == 0 && ok;
        if (!ok || rename(tmp, path) != 0)
            st = kt__error(KT_ERR_IO, "%s: write failed", path);
    }
    kt_buf_dispose(&b);
    return st;
}

/* rel_rms of `layer` from an earlier kt-convert.json (resume); NaN if absent. */
static double earlier_error(const char *dir, uint32_t layer)
{
    char path[4096], key[64];
    snprintf(path, sizeof path, "%s/kt-convert.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NAN;
    char *buf = kt__malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!buf)
        return NAN;
    buf[n] = '\0';
    snprintf(key, sizeof key, "{\"layer\": %u, \"rel_rms\": ", layer);
    const char *at = strstr(buf, key);
    double v = at ? strtod(at + strlen(key), NULL) : NAN;
    kt__free(buf);
    return v;
}

typedef struct layer_meta {
    int method;
    uint32_t group, layer, n_experts;
    uint64_t H, I, source_checksum, layer_checksum;
    double rel_rms;
} layer_meta;

static kt_status write_layer(const char *path, const layer_meta *m, expert_job *jobs,
                             uint32_t n_jobs, uint32_t first_expert, kt_st_writer *w,
                             uint64_t *written)
{
    (void)path;
    kt_status st = KT_OK;
    for (uint32_t i = 0; i < n_jobs && st == KT_OK; i++) {
        char name[128];
        uint32_t e = first_expert + i;
        for (int p = 0; p < 3 && st == KT_OK; p++) {
            uint64_t rows = p == 2 ? m->H : m->I, cols = p == 2 ? m->I : m->H;
            snprintf(name, sizeof name, "experts.%u.%s.q", e, proj_name[p]);
            st = kt__st_writer_write(w, name, jobs[i].q[p], q_bytes(m->method, rows, cols));
            snprintf(name, sizeof name, "experts.%u.%s.scale", e, proj_name[p]);
            if (st == KT_OK)
                st = kt__st_writer_write(w, name, jobs[i].scale[p],
                                         scale_bytes(m->method, m->group, rows, cols));
            *written += q_bytes(m->method, rows, cols) +
                        scale_bytes(m->method, m->group, rows, cols);
        }
    }
    return st;
}

static kt_status declare_layer(kt_st_writer *w, const layer_meta *m)
{
    char name[128], val[64];
    kt_status st = KT_OK;
    struct {
        const char *k;
        char v[64];
    } md[] = {
        {"kt.format", "libkt.cpu_experts"}, {"kt.version", ""}, {"kt.method", ""},
        {"kt.group_size", ""}, {"kt.layer", ""}, {"kt.n_experts", ""}, {"kt.hidden", ""},
        {"kt.intermediate", ""}, {"kt.tile_layout", "row-major"}, {"kt.source_checksum", ""},
        {"kt.created_by", "libkt " KT_VERSION_STRING},
    };
    snprintf(md[1].v, sizeof md[1].v, "%d", KT__CPU_FORMAT_VERSION);
    snprintf(md[2].v, sizeof md[2].v, "%s", kt_method_name((kt_method)m->method));
    snprintf(md[3].v, sizeof md[3].v, "%u", m->group);
    snprintf(md[4].v, sizeof md[4].v, "%u", m->layer);
    snprintf(md[5].v, sizeof md[5].v, "%u", m->n_experts);
    snprintf(md[6].v, sizeof md[6].v, "%llu", (unsigned long long)m->H);
    snprintf(md[7].v, sizeof md[7].v, "%llu", (unsigned long long)m->I);
    snprintf(md[9].v, sizeof md[9].v, "%016llx", (unsigned long long)m->source_checksum);
    for (size_t i = 0; i < KT_ARRAY_LEN(md) && st == KT_OK; i++)
        st = kt__st_writer_set_metadata(w, md[i].k, md[i].v);
    (void)val;
    for (uint32_t e = 0; e < m->n_experts && st == KT_OK; e++)
        for (int p = 0; p < 3 && st == KT_OK; p++) {
            uint64_t rows = p == 2 ? m->H : m->I, cols = p == 2 ? m->I : m->H;
            uint64_t qs[2] = {rows, m->method == KT_METHOD_AMXINT8 ? cols : cols / 8};
            uint64_t ss[2] = {rows, cols / (m->group ? m->group : 32)};
            snprintf(name, sizeof name, "experts.%u.%s.q", e, proj_name[p]);
            st = kt__st_writer_declare(w, name,
                                       m->method == KT_METHOD_AMXINT8 ? KT_TYPE_I8 : KT_TYPE_I32,
                                       2, qs);
            snprintf(name, sizeof name, "experts.%u.%s.scale", e, proj_name[p]);
            if (st == KT_OK)
                st = m->method == KT_METHOD_AMXINT8
                         ? kt__st_writer_declare(w, name, KT_TYPE_F32, 1, qs)
                         : kt__st_writer_declare(w, name, KT_TYPE_BF16, 2, ss);
        }
    return st;
}

/* Relative RMS error of one layer as stored in `path` (the verify pass). */
static kt_status measure_file(const kt_model *model, const char *dir, uint32_t layer,
                              double *rel_rms)
{
    kt__cpu_weights *cw = NULL;
    kt_status st = kt__cpu_weights_open_layer(&cw, dir, layer);
    if (st < 0)
        return st;
    uint64_t H = kt__cpu_weights_hidden(cw), I = kt__cpu_weights_intermediate(cw);
    int method = kt__cpu_weights_method(cw);
    uint64_t G = kt__cpu_weights_group(cw);
    float *row = kt__malloc_array((size_t)KT_MAX(H, I), sizeof(float));
    double err = 0.0, ref = 0.0;
    if (!row) {
        kt__cpu_weights_close(cw);
        return KT_ERR_NOMEM;
    }
    for (uint32_t e = 0; e < kt__cpu_weights_n_experts(cw) && st == KT_OK; e++)
        for (int p = 0; p < 3 && st == KT_OK; p++) {
            kt_tensor_view v;
            memset(&v, 0, sizeof v);
            v.struct_size = sizeof v;
            const void *q, *scale;
            st = kt_model_tensor(model, layer, proj_role[p], e, &v);
            if (st == KT_OK)
                st = kt__cpu_weights_get(cw, layer, e, p, &q, &scale);
            uint64_t rows = p == 2 ? H : I, cols = p == 2 ? I : H;
            for (uint64_t r = 0; r < rows && st == KT_OK; r++) {
                st = view_row_f32(&v, r, row);
                if (st == KT_OK && method == KT_METHOD_AMXINT4 &&
                    kt__cpu_weights_version(cw) >= 2 &&
                    !kt__int4_row_on_grid((const uint16_t *)scale + r * (cols / G),
                                          (int)(cols / G)))
                    st = kt__error(KT_ERR_FORMAT,
                                   "%s/kt-experts-layer-%03u.safetensors: expert %u %s row %llu: "
                                   "scales not on version 2's grid",
                                   dir, layer, e, proj_name[p], (unsigned long long)r);
                for (uint64_t c = 0; c < cols && st == KT_OK; c++) {
                    double dq;
                    if (method == KT_METHOD_AMXINT8) {
                        dq = (double)((const int8_t *)q)[r * cols + c] *
                             ((const float *)scale)[r];
                    } else {
                        uint32_t word = ((const uint32_t *)q)[r * (cols / 8) + c / 8];
                        int val = (int)((word >> (4 * (c % 8))) & 15u) - 8;
                        dq = val * (double)kt__bf16_to_f32(
                                       ((const uint16_t *)scale)[r * (cols / G) + c / G]);
                    }
                    err += (row[c] - dq) * (row[c] - dq);
                    ref += (double)row[c] * row[c];
                }
            }
        }
    kt__free(row);
    kt__cpu_weights_close(cw);
    *rel_rms = ref > 0.0 ? sqrt(err / ref) : 0.0;
    return st;
}

kt_status kt__convert_source_open(kt__convert_source *src, kt_runtime *rt, const char *input_dir)
{
    memset(src, 0, sizeof *src);
    kt_status st = kt_model_open(&src->model, rt, input_dir, NULL);
    if (st < 0)
        return st;
    src->arch.struct_size = sizeof src->arch;
    if ((st = kt_model_arch(src->model, &src->arch)) < 0) {
        kt_model_free(src->model);
        return st;
    }
    src->L = kt_model_n_layers(src->model);
    src->E = kt_model_n_experts(src->model);
    src->H = src->arch.hidden_size;
    src->I = src->arch.moe_intermediate_size;
    if (src->E == 0 || src->I == 0) {
        kt_model_free(src->model);
        return kt__error(KT_ERR_UNSUPPORTED, "%s: not a MoE model (no routed experts)",
                         input_dir);
    }
    for (uint32_t l = 0; l < src->L; l++)
        src->n_moe += kt_model_layer_is_moe(src->model, l) ? 1 : 0;
    return KT_OK;
}

int kt__convert_threads(const kt_convert_options *o)
{
    if (o->n_threads < 0)
        return kt__error(KT_ERR_INVALID_ARG, "kt_convert: n_threads %d < 0", o->n_threads);
    return o->n_threads ? o->n_threads : KT_MAX(1, kt_hw_physical_cores());
}

kt_status kt_convert(kt_runtime *rt, const char *input_dir, const char *output_dir,
                     const kt_convert_options *opts, kt_convert_report *report)
{
    if (!input_dir || !output_dir)
        return kt__error(KT_ERR_INVALID_ARG, "kt_convert: input and output are required");
    kt_convert_options o = KT_CONVERT_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_convert_options");
    if (st < 0)
        return st;
    if (o.flags & ~(KT_CONVERT_F_RESUME | KT_CONVERT_F_VERIFY))
        return kt__error(KT_ERR_INVALID_ARG, "kt_convert_options: unknown flags 0x%x", o.flags);
    if (o.method == KT_METHOD_LLAMAFILE) /* GGUF of the routed experts (convert_gguf.c) */
        return kt__convert_gguf(rt, input_dir, output_dir, &o, report);
    if (o.method != KT_METHOD_AMXINT8 && o.method != KT_METHOD_AMXINT4)
        return kt__error(KT_ERR_INVALID_ARG,
                         "kt_convert: method must be AMXINT8, AMXINT4 or LLAMAFILE (got %s)",
                         kt_method_name((kt_method)o.method) ? kt_method_name((kt_method)o.method)
                                                             : "none");
    uint32_t group = o.method == KT_METHOD_AMXINT4 ? (o.group_size ? o.group_size : 32) : 0;
    if (o.method == KT_METHOD_AMXINT4 && group != 32 && group != 64 && group != 128)
        return kt__error(KT_ERR_UNSUPPORTED,
                         "kt_convert: AMXINT4 group size %u: expected 32, 64 or 128", group);
    int nth = kt__convert_threads(&o);
    if (nth < 0)
        return KT_ERR_INVALID_ARG;
    kt__convert_source src;
    if ((st = kt__convert_source_open(&src, rt, input_dir)) < 0)
        return st;
    kt_model *model = src.model;
    uint32_t L = src.L, E = src.E, n_moe = src.n_moe;
    uint64_t H = src.H, I = src.I;
    if (o.method == KT_METHOD_AMXINT4 && (H % group || I % group)) {
        kt_model_free(model);
        return kt__error(KT_ERR_UNSUPPORTED,
                         "%s: AMXINT4 group %u needs hidden (%llu) and expert intermediate "
                         "(%llu) multiples of %u",
                         input_dir, group, (unsigned long long)H, (unsigned long long)I, group);
    }
    if ((st = make_dir(output_dir)) < 0) {
        kt_model_free(model);
        return st;
    }
    uint64_t source_checksum = kt__cpu_weights_config_checksum(input_dir);

    expert_job *jobs = kt__calloc((size_t)nth, sizeof *jobs);
    pthread_t *tids = kt__calloc((size_t)nth, sizeof *tids);
    uint32_t *done_layers = kt__calloc((size_t)n_moe + 1, sizeof *done_layers);
    double *done_rel = kt__calloc((size_t)n_moe + 1, sizeof *done_rel);
    if (!jobs || !tids || !done_layers || !done_rel) {
        kt__free(jobs);
        kt__free(tids);
        kt__free(done_layers);
        kt__free(done_rel);
        kt_model_free(model);
        return KT_ERR_NOMEM;
    }
    kt_convert_report rep = KT_CONVERT_REPORT_INIT;
    rep.n_experts = E;
    double sum_rel = 0.0;
    uint64_t done = 0, total = (uint64_t)n_moe * E;
    for (uint32_t l = 0; l < L && st == KT_OK; l++) {
        if (!kt_model_layer_is_moe(model, l))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/kt-experts-layer-%03u.safetensors", output_dir, l);
        layer_meta m = {o.method, group, l, E, H, I, source_checksum, 0, 0.0};
        double rel = 0.0;
        int resumed = 0;
        uint64_t written = 0;
        if ((o.flags & KT_CONVERT_F_RESUME) && access(path, F_OK) == 0) {
            kt_status rs =
                kt__cpu_weights_check(path, o.method, group, l, E, H, I, source_checksum);
            if (rs == KT_OK) {
                resumed = 1;
                rel = earlier_error(output_dir, l);
                if (isnan(rel) && (rs = measure_file(model, output_dir, l, &rel)) < 0)
                    resumed = 0;
            }
            else
                kt__log(rt, KT_LOG_WARN, "%s: not reused (%s); converting the layer again",
                        path, kt_last_error());
        }
        if (!resumed) {
            kt_st_writer *w = NULL;
            double err = 0.0, ref = 0.0;
            uint64_t lhash = UINT64_C(0xcbf29ce484222325);
            st = kt__st_writer_create(&w);
            if (st == KT_OK)
                st = declare_layer(w, &m);
            /* the error is known only at the end: the header carries the file's
             * checksum of the source, and the report comes from the run */
            if (st == KT_OK)
                st = kt__st_writer_begin(w, path);
            for (uint32_t e0 = 0; e0 < E && st == KT_OK; e0 += (uint32_t)nth) {
                uint32_t nb = KT_MIN((uint32_t)nth, E - e0);
                for (uint32_t i = 0; i < nb; i++) {
                    jobs[i] = (expert_job){.model = model, .layer = l, .expert = e0 + i,
                                           .method = o.method, .group = group, .H = H,
                                           .I = I};
                    if (nb == 1 || pthread_create(&tids[i], NULL, run_expert, &jobs[i]) != 0) {
                        run_expert(&jobs[i]);
                        tids[i] = 0;
                    }
                }
                for (uint32_t i = 0; i < nb; i++)
                    if (tids[i])
                        pthread_join(tids[i], NULL);
                for (uint32_t i = 0; i < nb && st == KT_OK; i++)
                    if (jobs[i].status < 0)
                        st = kt__error(jobs[i].status, "%s: %s", input_dir, jobs[i].error);
                if (st == KT_OK)
                    st = write_layer(path, &m, jobs, nb, e0, w, &written);
                for (uint32_t i = 0; i < nb; i++) {
                    err += jobs[i].err;
                    ref += jobs[i].ref;
                    lhash = kt__hash64(lhash, &jobs[i].hash, sizeof jobs[i].hash);
                    free_job(&jobs[i]);
                }
                done += nb;
                if (st == KT_OK && o.progress_fn) {
                    char what[64];
                    snprintf(what, sizeof what, "layer %u", l);
                    if (o.progress_fn(done, total, what, o.progress_user_data))
                        st = kt__error(KT_ERR_CANCELLED, "kt_convert: cancelled at layer %u",
                                       l);
                }
            }
            if (st == KT_OK)
                st = kt__st_writer_finish(w);
            kt__st_writer_free(w); /* removes the half-written file on failure */
            rel = ref > 0.0 ? sqrt(err / ref) : 0.0;
            if (st == KT_OK && (o.flags & KT_CONVERT_F_VERIFY)) {
                double back = 0.0;
                st = measure_file(model, output_dir, l, &back);
                if (st == KT_OK && fabs(back - rel) > 1e-6 * KT_MAX(rel, 1e-6))
                    st = kt__error(KT_ERR_FORMAT,
                                   "%s: verify: the file gives relative error %.9g, the "
                                   "conversion %.9g",
                                   path, back, rel);
            }
            rep.bytes_written += written;
        } else {
            done += E;
            rep.n_resumed++;
            if (o.progress_fn && o.progress_fn(done, total, "resumed", o.progress_user_data))
                st = kt__error(KT_ERR_CANCELLED, "kt_convert: cancelled at layer %u", l);
        }
        if (st == KT_OK) {
            done_layers[rep.n_layers] = l;
            done_rel[rep.n_layers] = rel;
            st = write_summary(output_dir, input_dir, o.method, group, source_checksum,
                               done_layers, done_rel, rep.n_layers + 1);
            rep.n_layers++;
            sum_rel += rel;
            rep.max_rel_rms = KT_MAX(rep.max_rel_rms, rel);
            if (o.layer_fn)
                o.layer_fn(l, rel, written, resumed, o.layer_user_data);
        }
    }
    rep.mean_rel_rms = rep.n_layers ? sum_rel / rep.n_layers : 0.0;
    if (report) {
        uint32_t size = report->struct_size;
        if (size >= sizeof(uint32_t)) {
            rep.struct_size = (uint32_t)KT_MIN((size_t)size, sizeof rep);
            memcpy(report, &rep, KT_MIN((size_t)size, sizeof rep));
        }
    }
    kt__free(jobs);
    kt__free(tids);
    kt__free(done_layers);
    kt__free(done_rel);
    kt_model_free(model);
    return st;
}
