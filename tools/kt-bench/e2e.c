/* kt-bench e2e: whole-model prefill and decode tok/s of the hybrid GPU+CPU
 * runtime on synthetic checkpoints of real shape (random weights written to a
 * RAM-backed directory, /dev/shm by default, and removed afterwards), for a
 * list of GPU expert budgets, each run next to its roofline from this
 * machine's limits measured in the same run:
 *
 *   decode  1 / max(CPU expert bytes per token / stream read GB/s,
 *                   GPU bytes per token (dense weights, GPU experts, KV cache)
 *                   / HBM copy GB/s)
 *   prefill P / max(GPU FLOPs / cuBLAS BF16 TFLOP/s,
 *                   CPU expert FLOPs / oneDNN BF16 TFLOP/s,
 *                   CPU expert bytes (once per chunk) / stream read GB/s)
 *   layerwise prefill (every expert on the GPU, the CPU-resident ones streamed
 *                   over PCIe once per layer and chunk): P / max(all FLOPs / GPU
 *                   TFLOP/s, chunks x CPU-resident expert bytes / PCIe h2d GB/s)
 *
 * Expert bytes per token assume uniform routing (random weights route close
 * to uniformly). Public API only. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kt/kt.h>

#include "opt.h"

#define MAXD(a, b) ((a) > (b) ? (a) : (b))

/* ---- shapes --------------------------------------------------------------------- */

enum { FAM_QWEN3, FAM_DSV3 };
enum { EXP_BF16, EXP_FP8, EXP_INT4 };

typedef struct e2e_shape {
    const char *name;
    int family, experts; /* FAM_*, EXP_* */
    int H, NH, NKV, HD, E, K, I, V, layers, dense_layers, dense_I;
    int q_lora, kv_lora, nope, rope, vdim, n_group, topk_group;
} e2e_shape;

static const e2e_shape shapes[] = {
    /* Qwen3-30B-A3B at full depth */
    {"qwen3-30b-a3b", FAM_QWEN3, EXP_BF16, 2048, 32, 4, 128, 128, 8, 768, 151936, 48, 0, 0,
     0, 0, 0, 0, 0, 0, 0},
    /* DeepSeek-V3 / Kimi-K2 layers (MLA, 256 experts of 2048, FP8 128x128 blocks):
     * one dense layer and two MoE layers by default */
    {"deepseek-v3", FAM_DSV3, EXP_FP8, 7168, 128, 128, 192, 256, 8, 2048, 129280, 3, 1, 18432,
     1536, 512, 128, 64, 128, 8, 4},
    /* the same with compressed-tensors INT4 experts (Kimi-K2's format; CPU experts) */
    {"deepseek-v3-int4", FAM_DSV3, EXP_INT4, 7168, 128, 128, 192, 256, 8, 2048, 129280, 3, 1,
     18432, 1536, 512, 128, 64, 128, 8, 4},
    /* tiny versions for the smoke tests */
    {"tiny-qwen3", FAM_QWEN3, EXP_BF16, 256, 4, 2, 64, 16, 4, 128, 1024, 2, 0, 0, 0, 0, 0, 0,
     0, 0, 0},
    {"tiny-dsv3", FAM_DSV3, EXP_FP8, 256, 4, 4, 96, 16, 4, 128, 1024, 2, 1, 256, 128, 128, 64,
     32, 64, 4, 2},
    {"tiny-dsv3-int4", FAM_DSV3, EXP_INT4, 256, 4, 4, 96, 16, 4, 128, 1024, 2, 1, 256, 128, 128,
     64, 32, 64, 4, 2},
};

/* ---- synthetic checkpoint ---------------------------------------------------------- */

enum { D_BF16, D_F8, D_F32, D_I32 };
enum { F_RANDOM, F_ONES, F_ZERO, F_SCALE, F_SHAPE };

typedef struct syn_t {
    char name[112];
    int dtype, fill;
    uint64_t rows, cols; /* cols 0: 1-D */
    float value;         /* F_SCALE */
    int32_t shape[2];    /* F_SHAPE: the logical [rows, cols] it records */
    uint64_t off, bytes;
} syn_t;

typedef struct syn_list {
    syn_t *t;
    size_t n, cap;
} syn_list;

static bool add(syn_list *l, int dtype, int fill, uint64_t rows, uint64_t cols, float value,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static bool add(syn_list *l, int dtype, int fill, uint64_t rows, uint64_t cols, float value,
                const char *fmt, ...)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        syn_t *t = realloc(l->t, cap * sizeof *t);
        if (!t)
            return false;
        l->t = t, l->cap = cap;
    }
    syn_t *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    static const int size[] = {2, 1, 4, 4};
    t->dtype = dtype, t->fill = fill, t->rows = rows, t->cols = cols, t->value = value;
    t->bytes = rows * (cols ? cols : 1) * (uint64_t)size[dtype];
    return true;
}

/* a [rows][cols] projection in the model's storage: BF16, FP8 + scale_inv, or INT4 */
static bool add_proj(syn_list *l, int storage, uint64_t rows, uint64_t cols, const char *base)
{
    if (storage == EXP_FP8) {
        /* random e4m3 bytes have an RMS near 76: scale to about 0.02 */
        return add(l, D_F8, F_RANDOM, rows, cols, 0, "%s.weight", base) &&
               add(l, D_F32, F_SCALE, (rows + 127) / 128, (cols + 127) / 128, 2.5e-4f,
                   "%s.weight_scale_inv", base);
    }
    if (storage == EXP_INT4) {
        /* pack-quantized: 8 nibbles an int32, (q - 8) * scale, groups of 32 */
        return add(l, D_I32, F_RANDOM, rows, cols / 8, 0, "%s.weight_packed", base) &&
               add(l, D_BF16, F_SCALE, rows, cols / 32, 4.3e-3f, "%s.weight_scale", base) &&
               add(l, D_I32, F_SHAPE, 2, 0, 0, "%s.weight_shape", base) &&
               (l->t[l->n - 1].shape[0] = (int32_t)rows, l->t[l->n - 1].shape[1] = (int32_t)cols,
                true);
    }
    return add(l, D_BF16, F_RANDOM, rows, cols, 0, "%s.weight", base);
}

static bool tensors_of(const e2e_shape *s, int layers, syn_list *l)
{
    char b[112];
    bool ok = add(l, D_BF16, F_RANDOM, s->V, s->H, 0, "model.embed_tokens.weight") &&
              add(l, D_BF16, F_ONES, s->H, 0, 0, "model.norm.weight") &&
              add(l, D_BF16, F_RANDOM, s->V, s->H, 0, "lm_head.weight");
    /* FP8 checkpoints hold the attention and dense projections in FP8 too */
    int dense = s->experts == EXP_FP8 ? EXP_FP8 : EXP_BF16;
    for (int L = 0; ok && L < layers; L++) {
        const char *p = "model.layers";
        ok = add(l, D_BF16, F_ONES, s->H, 0, 0, "%s.%d.input_layernorm.weight", p, L) &&
             add(l, D_BF16, F_ONES, s->H, 0, 0, "%s.%d.post_attention_layernorm.weight", p, L);
        if (s->family == FAM_QWEN3) {
            const char *n[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
            uint64_t r[4] = {(uint64_t)s->NH * s->HD, (uint64_t)s->NKV * s->HD,
                             (uint64_t)s->NKV * s->HD, (uint64_t)s->H};
            uint64_t c[4] = {(uint64_t)s->H, (uint64_t)s->H, (uint64_t)s->H,
                             (uint64_t)s->NH * s->HD};
            for (int i = 0; ok && i < 4; i++)
                ok = add(l, D_BF16, F_RANDOM, r[i], c[i], 0, "%s.%d.self_attn.%s.weight", p, L,
                         n[i]);
            ok = ok &&
                 add(l, D_BF16, F_ONES, s->HD, 0, 0, "%s.%d.self_attn.q_norm.weight", p, L) &&
                 add(l, D_BF16, F_ONES, s->HD, 0, 0, "%s.%d.self_attn.k_norm.weight", p, L);
        } else {
            uint64_t qk = (uint64_t)s->nope + s->rope;
            const char *a = "self_attn";
            snprintf(b, sizeof b, "%s.%d.%s.q_a_proj", p, L, a);
            ok = add_proj(l, dense, s->q_lora, s->H, b);
            snprintf(b, sizeof b, "%s.%d.%s.q_b_proj", p, L, a);
            ok = ok && add_proj(l, dense, (uint64_t)s->NH * qk, s->q_lora, b);
            snprintf(b, sizeof b, "%s.%d.%s.kv_a_proj_with_mqa", p, L, a);
            ok = ok && add_proj(l, dense, (uint64_t)s->kv_lora + s->rope, s->H, b);
            snprintf(b, sizeof b, "%s.%d.%s.kv_b_proj", p, L, a);
            ok = ok && add_proj(l, dense, (uint64_t)s->NH * (s->nope + s->vdim), s->kv_lora, b);
            snprintf(b, sizeof b, "%s.%d.%s.o_proj", p, L, a);
            ok = ok && add_proj(l, dense, s->H, (uint64_t)s->NH * s->vdim, b);
            ok = ok &&
                 add(l, D_BF16, F_ONES, s->q_lora, 0, 0, "%s.%d.%s.q_a_layernorm.weight", p, L,
                     a) &&
                 add(l, D_BF16, F_ONES, s->kv_lora, 0, 0, "%s.%d.%s.kv_a_layernorm.weight", p, L,
                     a);
        }
        if (!ok)
            break;
        if (L < s->dense_layers) {
            const char *n[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int i = 0; ok && i < 3; i++) {
                snprintf(b, sizeof b, "%s.%d.mlp.%s", p, L, n[i]);
                ok = add_proj(l, dense, i < 2 ? s->dense_I : s->H, i < 2 ? s->H : s->dense_I, b);
            }
            continue;
        }
        ok = add(l, D_BF16, F_RANDOM, s->E, s->H, 0, "%s.%d.mlp.gate.weight", p, L);
        if (s->family == FAM_DSV3) {
            ok = ok && add(l, D_F32, F_ZERO, s->E, 0, 0, "%s.%d.mlp.gate.e_score_correction_bias",
                           p, L);
            const char *n[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int i = 0; ok && i < 3; i++) {
                snprintf(b, sizeof b, "%s.%d.mlp.shared_experts.%s", p, L, n[i]);
                ok = add_proj(l, dense, i < 2 ? s->I : s->H, i < 2 ? s->H : s->I, b);
            }
        }
        for (int e = 0; ok && e < s->E; e++) {
            const char *n[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int i = 0; ok && i < 3; i++) {
                snprintf(b, sizeof b, "%s.%d.mlp.experts.%d.%s", p, L, e, n[i]);
                ok = add_proj(l, s->experts, i < 2 ? s->I : s->H, i < 2 ? s->H : s->I, b);
            }
        }
    }
    return ok;
}

static bool write_config(const e2e_shape *s, int layers, const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%.1000s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    if (s->family == FAM_QWEN3) {
        bench_write_qwen3_config(f, &(bench_qwen3_config){
                                        s->H, s->NH, s->NKV, s->HD, layers, s->E, s->K, s->I,
                                        s->V, s->V > 151645 ? 151645 : s->V - 1});
    } else {
        fprintf(f,
                "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\",\n"
                " \"hidden_size\": %d, \"intermediate_size\": %d, \"moe_intermediate_size\": %d,\n"
                " \"num_hidden_layers\": %d, \"num_attention_heads\": %d,\n"
                " \"num_key_value_heads\": %d, \"n_routed_experts\": %d, \"n_shared_experts\": 1,\n"
                " \"num_experts_per_tok\": %d, \"n_group\": %d, \"topk_group\": %d,\n"
                " \"first_k_dense_replace\": %d, \"q_lora_rank\": %d, \"kv_lora_rank\": %d,\n"
                " \"qk_nope_head_dim\": %d, \"qk_rope_head_dim\": %d, \"v_head_dim\": %d,\n"
                " \"vocab_size\": %d, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000,\n"
                " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"beta_fast\": 32,\n"
                "   \"beta_slow\": 1, \"mscale\": 1.0, \"mscale_all_dim\": 1.0,\n"
                "   \"original_max_position_embeddings\": 4096},\n"
                " \"routed_scaling_factor\": 2.5, \"norm_topk_prob\": true,\n"
                " \"scoring_func\": \"sigmoid\", \"topk_method\": \"noaux_tc\",\n"
                " \"max_position_embeddings\": 163840, \"tie_word_embeddings\": false,\n"
                " \"num_nextn_predict_layers\": 0, \"bos_token_id\": 0, \"eos_token_id\": 1,\n"
                " \"torch_dtype\": \"bfloat16\"",
                s->H, s->dense_I, s->I, layers, s->NH, s->NKV, s->E, s->K, s->n_group,
                s->topk_group, s->dense_layers, s->q_lora, s->kv_lora, s->nope, s->rope, s->vdim,
                s->V);
        if (s->experts == EXP_FP8)
            fprintf(f, ",\n \"quantization_config\": {\"activation_scheme\": \"dynamic\", "
                       "\"fmt\": \"e4m3\", \"quant_method\": \"fp8\", "
                       "\"weight_block_size\": [128, 128]}");
        else if (s->experts == EXP_INT4)
            fprintf(f, ",\n \"quantization_config\": {\"config_groups\": {\"group_0\": {"
                       "\"input_activations\": null, \"output_activations\": null, "
                       "\"targets\": [\"Linear\"], \"weights\": {\"actorder\": null, "
                       "\"block_structure\": null, \"dynamic\": false, \"group_size\": 32, "
                       "\"num_bits\": 4, \"observer\": \"minmax\", \"observer_kwargs\": {}, "
                       "\"strategy\": \"group\", \"symmetric\": true, \"type\": \"int\"}}},\n"
                       "  \"format\": \"pack-quantized\", \"ignore\": [\"lm_head\", "
                       "\"re:.*self_attn.*\", \"re:.*shared_experts.*\", "
                       "\"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\"], "
                       "\"kv_cache_scheme\": null, \"quant_method\": \"compressed-tensors\", "
                       "\"quantization_status\": \"compressed\"}");
        fprintf(f, "}\n");
    }
    return fclose(f) == 0;
}

static uint16_t bf16_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* work items: 8 MiB pieces of tensors, filled by a team of threads into their
 * own buffers and written with pwrite (page faults on a shared mapping of
 * tmpfs are several times slower) */
typedef struct fill_job {
    const syn_list *l;
    int fd;
    uint64_t base;       /* file offset of the data section */
    atomic_int failed;
    size_t *piece_t;     /* tensor of each piece */
    uint64_t *piece_off; /* byte offset inside it */
    size_t n_pieces;
    atomic_size_t next;
} fill_job;

#define PIECE ((uint64_t)8 << 20)

static void fill_piece(const syn_t *t, unsigned char *dst, uint64_t off, uint64_t len,
                       uint64_t seed)
{
    uint64_t s = seed | 1;
    switch (t->dtype) {
    case D_BF16: {
        uint16_t *p = (uint16_t *)dst;
        uint16_t c = t->fill == F_ONES ? 0x3f80 : t->fill == F_SCALE ? bf16_of(t->value) : 0;
        for (uint64_t i = 0; i < len / 2; i++) {
            if (t->fill == F_RANDOM) {
                /* uniform +-0.02 */
                float v = ((float)(bench_rng(&s) >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
                p[i] = bf16_of(v);
            } else {
                p[i] = c;
            }
        }
        break;
    }
    case D_F8:
        for (uint64_t i = 0; i < len; i += 8) {
            uint64_t r = bench_rng(&s);
            for (uint64_t j = 0; j < 8 && i + j < len; j++) {
                unsigned char b = (unsigned char)(r >> (8 * j));
                dst[i + j] = (b & 0x7f) == 0x7f ? (unsigned char)(b ^ 1) : b; /* no NaN */
            }
        }
        break;
    case D_F32: {
        float v = t->fill == F_SCALE ? t->value : t->fill == F_ONES ? 1.0f : 0.0f;
        for (uint64_t i = 0; i < len / 4; i++)
            memcpy(dst + 4 * i, &v, 4);
        break;
    }
    default: /* I32 */
        if (t->fill == F_SHAPE) {
            memcpy(dst, (const unsigned char *)t->shape + off, len);
        } else {
            for (uint64_t i = 0; i + 8 <= len; i += 8) {
                uint64_t r = bench_rng(&s);
                memcpy(dst + i, &r, 8);
            }
        }
    }
}

static void *fill_worker(void *arg)
{
    fill_job *j = arg;
    unsigned char *buf = malloc(PIECE);
    if (!buf) {
        atomic_store(&j->failed, 1);
        return NULL;
    }
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_pieces || atomic_load(&j->failed))
            break;
        const syn_t *t = &j->l->t[j->piece_t[i]];
        uint64_t off = j->piece_off[i], len = t->bytes - off < PIECE ? t->bytes - off : PIECE;
        fill_piece(t, buf, off, len,
                   0x9e3779b97f4a7c15ull * (i + 1) ^ (uint64_t)j->piece_t[i] << 20);
        uint64_t done = 0;
        while (done < len) {
            ssize_t w = pwrite(j->fd, buf + done, (size_t)(len - done),
                               (off_t)(j->base + t->off + off + done));
            if (w <= 0) {
                atomic_store(&j->failed, 1);
                break;
            }
            done += (uint64_t)w;
        }
    }
    free(buf);
    return NULL;
}

/* DIR/config.json and DIR/model.safetensors; the data filled by `threads` threads. */
static bool write_checkpoint(const e2e_shape *s, int layers, const char *dir, int threads,
                             uint64_t *total)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kt-bench e2e: cannot create %s: %s\n", dir, strerror(errno));
        return false;
    }
    if (!write_config(s, layers, dir))
        return false;
    syn_list l = {0};
    bool ok = tensors_of(s, layers, &l);
    char *hdr = NULL;
    size_t hl = 0, hcap = l.n * 200 + 64;
    ok = ok && (hdr = malloc(hcap)) != NULL;
    uint64_t off = 0;
    static const char *dt[] = {"BF16", "F8_E4M3", "F32", "I32"};
    if (ok) {
        hl += (size_t)snprintf(hdr, hcap, "{\"__metadata__\":{\"format\":\"pt\"}");
        for (size_t i = 0; i < l.n; i++) {
            syn_t *t = &l.t[i];
            t->off = off;
            char shape[64];
            if (t->cols)
                snprintf(shape, sizeof shape, "[%llu,%llu]", (unsigned long long)t->rows,
                         (unsigned long long)t->cols);
            else
                snprintf(shape, sizeof shape, "[%llu]", (unsigned long long)t->rows);
            hl += (size_t)snprintf(hdr + hl, hcap - hl,
                                   ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,"
                                   "\"data_offsets\":[%llu,%llu]}",
                                   t->name, dt[t->dtype], shape, (unsigned long long)off,
                                   (unsigned long long)(off + t->bytes));
            off += t->bytes;
        }
        hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
        while ((8 + hl) % 64)
            hdr[hl++] = ' ';
    }
    char path[1024];
    snprintf(path, sizeof path, "%.1000s/model.safetensors", dir);
    int fd = ok ? open(path, O_RDWR | O_CREAT | O_TRUNC, 0644) : -1;
    uint64_t size = 8 + hl + off;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    if (ok && (fd < 0 || ftruncate(fd, (off_t)size) != 0 || pwrite(fd, le, 8, 0) != 8 ||
               pwrite(fd, hdr, hl, 8) != (ssize_t)hl)) {
        fprintf(stderr, "kt-bench e2e: cannot write %s (%.1f GB): %s\n", path, size / 1e9,
                strerror(errno));
        ok = false;
    }
    fill_job job;
    memset(&job, 0, sizeof job);
    if (ok) {
        size_t np = 0;
        for (size_t i = 0; i < l.n; i++)
            np += (size_t)((l.t[i].bytes + PIECE - 1) / PIECE);
        job.piece_t = malloc(np * sizeof *job.piece_t);
        job.piece_off = malloc(np * sizeof *job.piece_off);
        ok = job.piece_t && job.piece_off;
        for (size_t i = 0, k = 0; ok && i < l.n; i++)
            for (uint64_t o = 0; o < l.t[i].bytes; o += PIECE, k++)
                job.piece_t[k] = i, job.piece_off[k] = o;
        job.l = &l, job.fd = fd, job.base = 8 + hl, job.n_pieces = np;
        atomic_init(&job.next, 0);
        atomic_init(&job.failed, 0);
    }
    if (ok) {
        pthread_t th[256];
        int n = threads < 1 ? 1 : threads > 256 ? 256 : threads, started = 0;
        for (; started < n - 1; started++)
            if (pthread_create(&th[started], NULL, fill_worker, &job) != 0)
                break;
        fill_worker(&job);
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        if (atomic_load(&job.failed)) {
            fprintf(stderr, "kt-bench e2e: writing %s failed: %s\n", path, strerror(errno));
            ok = false;
        }
    }
    if (fd >= 0)
        close(fd);
    free(job.piece_t);
    free(job.piece_off);
    free(hdr);
    free(l.t);
    *total = size;
    return ok;
}

/* a checkpoint of an earlier --keep run that opens as a model (the weights are
 * random anyway: pages a killed writer left unwritten read as zeros) */
static bool checkpoint_present(const char *dir, uint64_t *total)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%.1000s/config.json", dir);
    if (stat(path, &st) != 0)
        return false;
    snprintf(path, sizeof path, "%.1000s/model.safetensors", dir);
    kt_model *m = NULL;
    if (stat(path, &st) != 0 || kt_model_open(&m, NULL, dir, NULL) < 0)
        return false;
    kt_model_free(m);
    *total = (uint64_t)st.st_size;
    return true;
}

static void remove_checkpoint(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%.1000s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%.1000s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- what a token costs --------------------------------------------------------------- */

typedef struct e2e_cost {
    double dense_bytes;  /* non-expert weights one decoded token reads (one embedding row) */
    double dense_flops;  /* 2 x non-expert parameters (embedding excluded)                 */
    double expert_bytes; /* one routed expert's three matrices, scales included             */
    double expert_flops; /* 2 x one expert's parameters                                     */
    double kv_bytes;     /* KV cache bytes per position, all layers (F32 on the GPU)        */
    double attn_dims;    /* n_heads x (qk + v) head dims x layers: attention FLOPs / 2 / pair */
    int n_moe, E, k;
} e2e_cost;

static bool cost_of(const kt_model *m, e2e_cost *c)
{
    memset(c, 0, sizeof *c);
    kt_arch_info a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    if (kt_model_arch(m, &a) < 0)
        return false;
    double exp_b = 0, exp_p = 0;
    size_t n = kt_model_n_tensors(m);
    for (size_t i = 0; i < n; i++) {
        kt_tensor_view v;
        memset(&v, 0, sizeof v);
        v.struct_size = sizeof v;
        if (kt_model_tensor_at(m, i, &v) < 0)
            return false;
        double bytes = (double)v.nbytes + (double)v.scale_nbytes;
        double params = (double)v.rows * (double)(v.cols ? v.cols : 1);
        if (v.role == KT_ROLE_EMBED) {
            c->dense_bytes += bytes / (double)(v.rows ? v.rows : 1);
        } else if (v.expert != UINT32_MAX) {
            exp_b += bytes;
            exp_p += params;
        } else {
            c->dense_bytes += bytes;
            c->dense_flops += 2.0 * params;
        }
    }
    uint32_t L = kt_model_n_layers(m);
    for (uint32_t l = 0; l < L; l++)
        c->n_moe += kt_model_layer_is_moe(m, l) > 0;
    c->E = (int)a.n_routed_experts;
    c->k = (int)a.n_experts_per_tok;
    if (c->n_moe && c->E) {
        c->expert_bytes = exp_b / ((double)c->n_moe * c->E);
        c->expert_flops = 2.0 * exp_p / ((double)c->n_moe * c->E);
    }
    bool mla = a.kv_lora_rank > 0;
    c->kv_bytes = 4.0 * L *
                  (mla ? (double)a.kv_lora_rank + a.qk_rope_head_dim
                       : 2.0 * a.n_kv_heads * a.head_dim);
    double qk = mla ? (double)a.qk_nope_head_dim + a.qk_rope_head_dim : a.head_dim;
    double vd = mla ? (double)a.v_head_dim : a.head_dim;
    c->attn_dims = (double)a.n_heads * (qk + vd) * L;
    return true;
}

/* ---- one model, every budget ------------------------------------------------------------ */

typedef struct e2e_opts {
    int64_t budgets[8], prompts[4];
    int n_budgets, n_prompts;
    int64_t gen, batch, threads;
    int64_t warmup;    /* tokens of the warm-up prefill (16: short; up to the longest prompt) */
    int32_t lw_tokens; /* kt_gpu_options.layerwise_tokens */
    bool cpu_only, cpu_row;
    bool moe_bf16;     /* CPU experts on BF16 activations (AMX) instead of BF16X2 */
    bool keep;         /* checkpoints kept (and reused) under a name without the pid */
    double stream_gbs, cpu_tflops, t_start, time_limit;
    kt_gpu_limits gpu;
    bool have_gpu;
    bench_json *json;
} e2e_opts;

/* one row: the measured figures next to the rooflines of a run with share f of
 * the experts on the GPU (gpu false: the CPU engine alone) */
static void report(const char *name, const e2e_cost *c, const e2e_opts *o, bool gpu, double f,
                   int gpu_experts, int64_t P, double t_pre, double t_dec)
{
    double pairs = (double)c->n_moe * c->k;
    double ctx_len = (double)P + o->gen / 2.0;
    double cpu_b = pairs * (1.0 - f) * c->expert_bytes;
    double gpu_b = c->dense_bytes + pairs * f * c->expert_bytes + c->kv_bytes * ctx_len;
    double hbm = o->gpu.hbm_gbs * 1e9, stream = o->stream_gbs * 1e9;
    double dec_t = gpu ? MAXD(cpu_b / stream, gpu_b / hbm) : (cpu_b + gpu_b) / stream;
    double dec_roof = dec_t > 0 ? 1.0 / dec_t : 0;
    double attn = (double)P * (P + 1) / 2.0 * 2.0 * c->attn_dims;
    double all_f = (double)P * (c->dense_flops + pairs * c->expert_flops) + attn;
    double gpu_f = (double)P * (c->dense_flops + pairs * f * c->expert_flops) + attn;
    double cpu_f = (double)P * pairs * (1.0 - f) * c->expert_flops;
    double chunks = (double)((P + o->batch - 1) / o->batch);
    double cpu_res = (double)c->n_moe * c->E * (1.0 - f) * c->expert_bytes;
    double gt = o->gpu.bf16_tflops * 1e12, ct = o->cpu_tflops * 1e12;
    double pre_t;
    if (gpu)
        pre_t = MAXD(gpu_f / gt, MAXD(ct > 0 ? cpu_f / ct : 0, chunks * cpu_res / stream));
    else
        pre_t = ct > 0 ? all_f / ct : 0;
    double pre_roof = pre_t > 0 ? P / pre_t : 0;
    /* layerwise: each chunk copies every CPU-resident expert in once */
    double lw_t = gpu ? MAXD(all_f / gt, chunks * cpu_res / (o->gpu.h2d_gbs * 1e9)) : 0;
    double lw_roof = lw_t > 0 ? P / lw_t : 0;
    double pre_tps = P / t_pre, dec_tps = o->gen / t_dec;
    char share[16];
    if (gpu)
        snprintf(share, sizeof share, "%4.0f%%%s", 100.0 * f, o->lw_tokens ? "L" : " ");
    else
        snprintf(share, sizeof share, "%6s", "cpu");
    printf("%-18s %6s %6lld %12.1f %10.1f %10.1f %12.2f %10.1f %8.3f %8.3f\n", name, share,
           (long long)P, pre_tps, pre_roof, lw_roof, dec_tps, dec_roof, cpu_b / 1e9,
           gpu ? gpu_b / 1e9 : 0.0);
    fflush(stdout);
    if (o->json)
        json_row(o->json,
                 "\"bench\":\"e2e\",\"model\":\"%s\",\"device\":\"%s\","
                 "\"gpu_expert_share\":%.4f,\"gpu_experts\":%d,\"prompt\":%lld,"
                 "\"prefill_tps\":%.3f,\"prefill_roofline_tps\":%.3f,"
                 "\"layerwise_roofline_tps\":%.3f,\"gen\":%lld,\"decode_tps\":%.3f,"
                 "\"decode_roofline_tps\":%.3f,\"cpu_bytes_per_token\":%.0f,"
                 "\"gpu_bytes_per_token\":%.0f,\"batch\":%lld,\"layerwise_tokens\":%d,"
                 "\"moe_act\":\"%s\"",
                 name, gpu ? "cuda" : "cpu", f, gpu_experts, (long long)P, pre_tps, pre_roof,
                 lw_roof, (long long)o->gen, dec_tps, dec_roof, cpu_b, gpu ? gpu_b : 0.0,
                 (long long)o->batch, (int)o->lw_tokens, o->moe_bf16 ? "bf16" : "bf16x2");
}

static bool out_of_time(const e2e_opts *o, const char *what)
{
    if (o->time_limit <= 0 || bench_now() - o->t_start < o->time_limit)
        return false;
    printf("# --time-limit %.0f s reached: %s skipped\n", o->time_limit, what);
    fflush(stdout);
    return true;
}

static kt_context *open_context(kt_model *m, int64_t n_ctx, const e2e_opts *o)
{
    kt_context_options co = KT_CONTEXT_OPTIONS_INIT;
    co.n_ctx = (int32_t)n_ctx;
    co.n_batch = (int32_t)o->batch;
    co.n_threads = (int32_t)o->threads;
    if (o->moe_bf16)
        co.flags |= KT_CONTEXT_F_MOE_BF16;
    kt_context *ctx = NULL;
    if (kt_context_create(&ctx, NULL, m, &co) < 0)
        return NULL;
    return ctx;
}

static int bench_one(const char *name, const char *dir, const e2e_opts *o)
{
    kt_model *m = NULL;
    if (kt_model_open(&m, NULL, dir, NULL) < 0) {
        fprintf(stderr, "kt-bench e2e: %s: %s\n", dir, kt_last_error());
        return 1;
    }
    e2e_cost c;
    if (!cost_of(m, &c)) {
        fprintf(stderr, "kt-bench e2e: %s: %s\n", dir, kt_last_error());
        kt_model_free(m);
        return 1;
    }
    int64_t pmax = 0, pmin = INT64_MAX;
    for (int i = 0; i < o->n_prompts; i++) {
        pmax = o->prompts[i] > pmax ? o->prompts[i] : pmax;
        pmin = o->prompts[i] < pmin ? o->prompts[i] : pmin;
    }
    int32_t V = (int32_t)0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)pmax);
    float *logits = NULL;
    printf("# %s: %d MoE layers of %d experts (top-%d), %.1f MB an expert, dense %.2f GB a "
           "token, KV %.0f KB a position; CPU experts on %s activations\n", name, c.n_moe,
           c.E, c.k, c.expert_bytes / 1e6, c.dense_bytes / 1e9, c.kv_bytes / 1e3,
           o->moe_bf16 ? "BF16 (--moe-bf16)" : "BF16X2");
    printf("%-18s %6s %6s %12s %10s %10s %12s %10s %8s %8s\n", "model", "GPU-ex", "prompt",
           "prefill t/s", "roofline", "layerwise", "decode t/s", "roofline", "CPU GB/t",
           "GPU GB/t");
    fflush(stdout);
    int rc = 0;
    bool gpu = !o->cpu_only && o->have_gpu;
    kt_context *ctx = open_context(m, pmax + o->gen + 8, o);
    if (!ctx) {
        fprintf(stderr, "kt-bench e2e: %s: %s\n", dir, kt_last_error());
        free(ids);
        free(logits);
        kt_model_free(m);
        return 1;
    }
    V = kt_context_n_vocab(ctx);
    logits = realloc(logits, sizeof(float) * (size_t)V);
    if (ids)
        bench_random_ids(ids, (size_t)pmax, V);
    for (int b = 0; b < o->n_budgets && ids && logits; b++) {
        double frac = (double)o->budgets[b] / 100.0;
        if (!gpu && o->budgets[b] > 0)
            continue;
        char what[64];
        snprintf(what, sizeof what, "budget %lld%%", (long long)o->budgets[b]);
        if (out_of_time(o, what))
            break;
        if (gpu) {
            kt_gpu_options go = KT_GPU_OPTIONS_INIT;
            go.expert_fraction = (float)frac;
            go.layerwise_tokens = o->lw_tokens;
            double t0 = bench_now();
            if (kt_context_use_gpu(ctx, &go) < 0) {
                printf("%-18s %5lld%% GPU runtime: %s\n", name, (long long)o->budgets[b],
                       kt_last_error());
                rc = 1;
                continue;
            }
            printf("# %lld%%: %d of %d experts a layer on the GPU, %.1f GiB planned, set up in "
                   "%.1f s\n", (long long)o->budgets[b], kt_context_gpu_experts(ctx), c.E,
                   kt_context_gpu_bytes(ctx) / 1073741824.0, bench_now() - t0);
            fflush(stdout);
        }
        int ge = gpu ? kt_context_gpu_experts(ctx) : 0;
        double f = c.E ? (double)ge / c.E : 0.0;
        if (gpu && o->budgets[b] > 0 && ge == 0) {
            printf("# %lld%%: no expert on the GPU (this storage has no GPU kernel): skipped\n",
                   (long long)o->budgets[b]);
            continue;
        }
        /* warm-up: a prefill of --warmup tokens (a long one takes the first-use cost
         * of the large products out of the measurement), then a short prefill and
         * two decode steps (graph capture) */
        kt_context_reset(ctx);
        int64_t wu = o->warmup < pmax ? o->warmup : pmax;
        bool warm = wu <= 16 || kt_context_eval(ctx, ids, (size_t)wu, logits, 0) >= 0;
        kt_context_reset(ctx);
        if (!warm || kt_context_eval(ctx, ids, 16, logits, 0) < 0 ||
            kt_context_eval(ctx, ids + 16, 1, logits, 0) < 0 ||
            kt_context_eval(ctx, ids + 17, 1, logits, 0) < 0) {
            fprintf(stderr, "kt-bench e2e: %s: %s\n", name, kt_last_error());
            rc = 1;
            break;
        }
        for (int p = 0; p < o->n_prompts; p++) {
            snprintf(what, sizeof what, "prompt %lld at %lld%%", (long long)o->prompts[p],
                     (long long)o->budgets[b]);
            if (out_of_time(o, what))
                break;
            double tp = 0, td = 0;
            if (!bench_prefill_decode(ctx, ids, o->prompts[p], o->gen, logits, &tp, &td)) {
                fprintf(stderr, "kt-bench e2e: %s: prompt %lld: %s\n", name,
                        (long long)o->prompts[p], kt_last_error());
                rc = 1;
                break;
            }
            report(name, &c, o, gpu, f, ge, o->prompts[p], tp, td);
        }
    }
    kt_context_free(ctx);
    /* the CPU engine alone, for reference: the shortest prompt only, after the GPU
     * runs (the time limit skips it first) */
    if (gpu && o->cpu_row && !out_of_time(o, "the CPU-only row")) {
        kt_context *cctx = open_context(m, pmin + o->gen + 8, o);
        double tp = 0, td = 0;
        if (!cctx || !(logits = realloc(logits, sizeof(float) * kt_context_n_vocab(cctx)))) {
            fprintf(stderr, "kt-bench e2e: %s: %s\n", dir, kt_last_error());
            rc = 1;
        } else {
            V = kt_context_n_vocab(cctx);
            if (ids)
                bench_random_ids(ids, (size_t)pmax, V);
            if (kt_context_eval(cctx, ids, 16, logits, 0) < 0 ||
                !bench_prefill_decode(cctx, ids, pmin, o->gen, logits, &tp, &td)) {
                fprintf(stderr, "kt-bench e2e: %s: CPU engine: %s\n", name, kt_last_error());
                rc = 1;
            } else {
                report(name, &c, o, false, 0.0, 0, pmin, tp, td);
            }
        }
        kt_context_free(cctx);
    }
    free(ids);
    free(logits);
    kt_model_free(m);
    return rc;
}

/* ---- command ------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench e2e [OPTIONS]\n"
            "\n"
            "Whole-model prefill and decode tok/s of the GPU runtime with the routed\n"
            "experts split between GPU and CPU, on synthetic checkpoints of real shape\n"
            "(random weights), each next to its roofline: CPU expert bytes / stream GB/s,\n"
            "GPU bytes / HBM GB/s, FLOPs / cuBLAS and oneDNN BF16 rates, and for layerwise\n"
            "prefill the CPU-resident expert bytes / PCIe GB/s, all measured in this run.\n"
            "\n"
            "  --model NAME       repeatable; qwen3-30b-a3b (48 layers, BF16), deepseek-v3\n"
            "                     (MLA, 256 experts, FP8 blocks; 1 dense + 2 MoE layers),\n"
            "                     deepseek-v3-int4 (INT4 experts), tiny-qwen3, tiny-dsv3,\n"
            "                     tiny-dsv3-int4 (default: qwen3-30b-a3b, deepseek-v3)\n"
            "  --layers N         layers of every model (default: the model's)\n"
            "  --budgets LIST     GPU expert shares in percent (default 0,25,50,100)\n"
            "  --prompts LIST     prefill lengths (default 2048,8192)\n"
            "  --gen N            decoded tokens after each prefill (default 32)\n"
            "  --batch N          prefill chunk (default 2048)\n"
            "  --warmup N         tokens of the warm-up prefill before each budget's\n"
            "                     rows (default 16; at most the longest prompt)\n"
            "  --layerwise N|auto|off  layerwise prefill for chunks of N+ tokens, or when\n"
            "                     the measured copy beats the measured CPU (auto, the\n"
            "                     default, as in kt-run), or never (rows marked L)\n"
            "  --dir DIR          where checkpoints are written, then removed\n"
            "                     (default /dev/shm; needs the model's size free)\n"
            "  --keep             keep the checkpoints (DIR/kt-e2e-NAME-LAYERS) and reuse\n"
            "                     one found there (several runs in one session)\n"
            "  --device cpu       the CPU engine only (budget 0)\n"
            "  --no-cpu-row       skip the CPU-engine-alone reference row (shortest prompt)\n"
            "  --moe-bf16         CPU experts on BF16 activations (AMX tiles where there\n"
            "                     are), as kt-bench moe measures them; default BF16X2\n"
            "                     (hi + lo, F32-accurate, AVX-512 only)\n"
            "  --time-limit S     start no measurement after S seconds (rows so far stand)\n"
            "  --threads N        CPU threads (default: physical cores)\n"
            "  --stream-size MIB  stream buffer (default 2048)\n"
            "  --json FILE        write the result rows as JSON\n");
}

static bool parse_list(const char *flag, const char *v, int64_t *out, int cap, int *n,
                       int64_t lo, int64_t hi)
{
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n == cap) {
            fprintf(stderr, "kt-bench e2e: %s: at most %d values\n", flag, cap);
            return false;
        }
        if (!opt_parse_i64(BENCH_TOOL, flag, tok, lo, hi, &out[(*n)++]))
            return false;
    }
    if (!*n)
        fprintf(stderr, "kt-bench e2e: %s: empty list\n", flag);
    return *n > 0;
}

int cmd_e2e(int argc, char **argv)
{
    const e2e_shape *models[8];
    int n_models = 0;
    const char *dir = "/dev/shm", *json_path = NULL;
    int64_t layers = 0, stream_mib = 2048;
    e2e_opts o;
    memset(&o, 0, sizeof o);
    o.gen = 32, o.batch = 2048, o.cpu_row = true, o.warmup = 16;
    o.lw_tokens = -1; /* auto, the library's and kt-run's default */
    o.t_start = bench_now();
    int64_t defb[] = {0, 25, 50, 100}, defp[] = {2048, 8192};
    memcpy(o.budgets, defb, sizeof defb), o.n_budgets = 4;
    memcpy(o.prompts, defp, sizeof defp), o.n_prompts = 2;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--model", true, &v, &bad)) {
            if (bad)
                return 2;
            const e2e_shape *s = NULL;
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
                if (!strcasecmp(v, shapes[k].name))
                    s = &shapes[k];
            if (!s || n_models == 8) {
                fprintf(stderr, "kt-bench e2e: --model: unknown model '%s' (try --help)\n", v);
                return 2;
            }
            models[n_models++] = s;
        } else if (opt_match(argc, argv, &i, "--layers", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--layers", v, 1, 128, &layers))
                return 2;
        } else if (opt_match(argc, argv, &i, "--budgets", true, &v, &bad)) {
            if (!bad && !parse_list("--budgets", v, o.budgets, 8, &o.n_budgets, 0, 100))
                return 2;
        } else if (opt_match(argc, argv, &i, "--prompts", true, &v, &bad)) {
            if (!bad && !parse_list("--prompts", v, o.prompts, 4, &o.n_prompts, 32, 1 << 16))
                return 2;
        } else if (opt_match(argc, argv, &i, "--gen", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--gen", v, 1, 1 << 16, &o.gen))
                return 2;
        } else if (opt_match(argc, argv, &i, "--warmup", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--warmup", v, 1, 1 << 20, &o.warmup))
                return 2;
        } else if (opt_match(argc, argv, &i, "--batch", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--batch", v, 1, 1 << 16, &o.batch))
                return 2;
        } else if (opt_match(argc, argv, &i, "--dir", true, &v, &bad)) {
            dir = v;
        } else if (opt_match(argc, argv, &i, "--device", true, &v, &bad)) {
            if (!bad && strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "kt-bench e2e: --device: '%s' is not cpu or cuda\n", v);
                return 2;
            }
            o.cpu_only = !bad && !strcmp(v, "cpu");
        } else if (opt_match(argc, argv, &i, "--threads", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--threads", v, 0, 4096, &o.threads))
                return 2;
        } else if (opt_match(argc, argv, &i, "--stream-size", true, &v, &bad)) {
            if (!bad && !opt_parse_i64(BENCH_TOOL, "--stream-size", v, 16, 1 << 20, &stream_mib))
                return 2;
        } else if (opt_match(argc, argv, &i, "--json", true, &v, &bad)) {
            json_path = v;
        } else if (opt_match(argc, argv, &i, "--layerwise", true, &v, &bad)) {
            int64_t n = -1;
            if (!bad && !strcmp(v, "off"))
                n = 0;
            else if (!bad && strcmp(v, "auto") &&
                     !opt_parse_i64(BENCH_TOOL, "--layerwise", v, 1, 1 << 20, &n))
                return 2;
            o.lw_tokens = (int32_t)n;
        } else if (!strcmp(argv[i], "--no-cpu-row")) {
            o.cpu_row = false;
        } else if (!strcmp(argv[i], "--keep")) {
            o.keep = true;
        } else if (!strcmp(argv[i], "--moe-bf16")) {
            o.moe_bf16 = true;
        } else if (opt_match(argc, argv, &i, "--time-limit", true, &v, &bad)) {
            if (!bad && !opt_parse_f64(BENCH_TOOL, "--time-limit", v, 1, 1e6, &o.time_limit))
                return 2;
        } else {
            fprintf(stderr, "kt-bench e2e: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!n_models) {
        models[n_models++] = &shapes[0];
        models[n_models++] = &shapes[1];
    }
    bench_hw hw;
    bench_hw_detect(&hw);
    int nth = o.threads ? (int)o.threads : bench_default_threads(&hw);
    bench_hw_print(stdout, &hw, nth);
    bench_team *team = team_create(nth);
    stream_result sr;
    if (team && stream_measure(team, (uint64_t)stream_mib << 20, 5, true, &sr))
        o.stream_gbs = sr.read_gbs;
    team_free(team);
    gemm_kind cpu_kind = GEMM_BF16;
    if (gemm_available()) {
        gemm_set_threads(nth);
        /* an expert-shaped product: 256 tokens x [768 x 2048] */
        o.cpu_tflops = gemm_measure_yardstick(256, 768, 2048, 3, &cpu_kind);
        if (o.cpu_tflops < 0)
            o.cpu_tflops = 0;
    }
    o.have_gpu = !o.cpu_only && kt_gpu_count() > 0;
    if (o.have_gpu) {
        o.gpu = (kt_gpu_limits)KT_GPU_LIMITS_INIT;
        if (kt_gpu_measure_limits(0, &o.gpu) < 0) {
            fprintf(stderr, "kt-bench e2e: %s\n", kt_last_error());
            return 1;
        }
    }
    printf("# yardsticks: stream read %.1f GB/s, oneDNN %s [256 x 768 x 2048] %.2f TFLOP/s",
           o.stream_gbs, gemm_kind_name(cpu_kind), o.cpu_tflops);
    if (o.have_gpu)
        printf("; GPU 0: HBM copy %.0f GB/s, PCIe h2d %.1f GB/s, d2h %.1f GB/s, cuBLAS BF16 "
               "%.0f TFLOP/s", o.gpu.hbm_gbs, o.gpu.h2d_gbs, o.gpu.d2h_gbs, o.gpu.bf16_tflops);
    else
        printf("; no GPU: CPU engine only");
    printf("\n");
    fflush(stdout);
    o.json = json_path ? json_open(json_path, &hw, nth) : NULL;
    int rc = 0;
    for (int i = 0; i < n_models; i++) {
        const e2e_shape *s = models[i];
        int L = layers ? (int)layers : s->layers;
        if (s->family == FAM_DSV3 && L <= s->dense_layers) {
            fprintf(stderr, "kt-bench e2e: %s: --layers %d leaves no MoE layer\n", s->name, L);
            rc = 1;
            continue;
        }
        if (out_of_time(&o, s->name))
            break;
        char path[1024];
        if (o.keep)
            snprintf(path, sizeof path, "%.900s/kt-e2e-%s-%d", dir, s->name, L);
        else
            snprintf(path, sizeof path, "%.900s/kt-e2e-%s-%d", dir, s->name, (int)getpid());
        double t0 = bench_now();
        uint64_t bytes = 0;
        bool ok = o.keep && checkpoint_present(path, &bytes);
        if (ok) {
            printf("# %s: %d layers, %.2f GB checkpoint kept in %s\n", s->name, L,
                   bytes / 1e9, path);
        } else {
            ok = write_checkpoint(s, L, path, nth, &bytes);
            printf("# %s: %d layers, %.2f GB checkpoint written to %s in %.1f s\n", s->name,
                   L, bytes / 1e9, path, bench_now() - t0);
        }
        fflush(stdout);
        if (ok)
            rc |= bench_one(s->name, path, &o);
        else
            rc = 1;
        if (!o.keep || !ok)
            remove_checkpoint(path);
    }
    if (o.json && !json_close(o.json))
        rc = 1;
    return rc;
}
