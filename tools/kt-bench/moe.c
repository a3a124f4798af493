/* kt-bench moe: the CPU MoE backend (kt/moe.h) on synthetic weights with the
 * shapes of real models, reported as ratios of this machine's own limits
 * measured in the same run: decode as GB/s of expert weights read next to
 * stream read bandwidth, prefill as TFLOP/s next to oneDNN BF16 matmuls over
 * the same per-expert shapes and routing, and the AMXINT8 / AMXINT4 rows also
 * next to oneDNN INT8 (u8 x s8 -> s32) matmuls over them. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include <kt/kt.h>
#include <kt/moe.h>

#include "grow.h"
#include "opt.h"

/* ---- models ------------------------------------------------------------- */

typedef struct model_shape {
    const char *name;
    int64_t h, inter;
    int32_t n_experts, top_k;
} model_shape;

static const model_shape models[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8},
    {"deepseek-v3", 7168, 2048, 256, 8},
    {"kimi-k2", 7168, 2048, 384, 8},
    {"minimax-m2", 3072, 1536, 256, 8},
};

bool bench_model_shape(const char *name, int64_t *h, int64_t *inter, int32_t *e, int32_t *k);
bool bench_model_shape(const char *name, int64_t *h, int64_t *inter, int32_t *e, int32_t *k)
{
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (!strcasecmp(name, models[i].name)) {
            *h = models[i].h;
            *inter = models[i].inter;
            *e = models[i].n_experts;
            *k = models[i].top_k;
            return true;
        }
    return false;
}

bool bench_parse_list(const char *flag, const char *text, int64_t lo, int64_t hi,
                      int64_t *vals, int *count, int max);
bool bench_parse_list(const char *flag, const char *text, int64_t lo, int64_t hi,
                      int64_t *vals, int *count, int max)
{
    char buf[256];
    if (!text || strlen(text) >= sizeof buf) {
        fprintf(stderr, "kt-bench: %s: expected a comma-separated list\n", flag);
        return false;
    }
    strcpy(buf, text);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == max) {
            fprintf(stderr, "kt-bench: %s: at most %d values\n", flag, max);
            return false;
        }
        if (!opt_parse_i64(BENCH_TOOL, flag, tok, lo, hi, &vals[n]))
            return false;
        n++;
    }
    if (n == 0) {
        fprintf(stderr, "kt-bench: %s: empty list\n", flag);
        return false;
    }
    *count = n;
    return true;
}

/* ---- synthetic weights ---------------------------------------------------- */

/* One expert's tensors inside a slot, in the byte layout of kt/moe.h. */
typedef struct expert_layout {
    size_t off[6];      /* gate, up, down, gate_scale, up_scale, down_scale */
    size_t size[6];
    size_t stride;      /* slot size, 4 KiB aligned                          */
    uint64_t bytes;     /* bytes a kernel reads: sum of size[]              */
} expert_layout;

static size_t align_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* --group-size: AMXINT4's inputs per scale (0: 32). */
static int amxint4_group;

static void layout_for(int method, int64_t h, int64_t inter, expert_layout *l)
{
    memset(l, 0, sizeof *l);
    size_t hi = (size_t)h * (size_t)inter;
    size_t bh = (size_t)((h + 127) / 128), bi = (size_t)((inter + 127) / 128);
    switch (method) {
    case KT_METHOD_BF16:
        l->size[0] = l->size[1] = l->size[2] = hi * 2;
        break;
    case KT_METHOD_FP8:   /* E4M3 + F32 weight_scale_inv per 128x128 block */
        l->size[0] = l->size[1] = l->size[2] = hi;
        l->size[3] = l->size[4] = l->size[5] = bi * bh * 4;
        break;
    case KT_METHOD_AMXINT8:   /* int8 [out][in] + F32 per output row */
        l->size[0] = l->size[1] = l->size[2] = hi;
        l->size[3] = l->size[4] = (size_t)inter * 4;
        l->size[5] = (size_t)h * 4;
        break;
    default:              /* RAWINT4, AMXINT4: int32 [out][in/8] + BF16 [out][in/G] */
        l->size[0] = l->size[1] = l->size[2] = hi / 2;
        l->size[3] = l->size[4] = l->size[5] =
            hi / (method == KT_METHOD_AMXINT4 && amxint4_group ? amxint4_group : 32) * 2;
        break;
    }
    size_t pos = 0;
    for (int i = 0; i < 6; i++) {
        l->off[i] = pos;
        pos = align_up(pos + l->size[i], 64);
        l->bytes += l->size[i];
    }
    l->stride = align_up(pos, 4096);
}

typedef struct weight_set {
    int method;
    expert_layout lay;
    uint8_t *base;          /* [n_slots][stride]                  */
    size_t map_bytes;
    int64_t n_slots;
    uint32_t n_layers;
    int32_t n_experts;
    /* [n_layers][E] pointers (layer l, expert e -> slot (l*E + e) % n_slots) */
    const void **ptr[6];
} weight_set;

static int64_t slot_of(const weight_set *ws, uint32_t layer, int32_t e)
{
    return ((int64_t)layer * ws->n_experts + e) % ws->n_slots;
}

typedef struct fill_job {
    weight_set *ws;
    uint64_t seed;
} fill_job;

static uint64_t next_rand(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Values are random but valid for the format (no NaN/Inf, no denormals), so
 * the kernels run their normal path. Magnitudes keep outputs finite. */
static void fill_region(int method, int which, uint8_t *p, size_t bytes, uint64_t *s)
{
    size_t words = bytes / 8;
    uint64_t *w = (uint64_t *)p;
    bool scale = which >= 3;
    for (size_t i = 0; i < words; i++) {
        uint64_t r = next_rand(s);
        bool int4 = method == KT_METHOD_RAWINT4 || method == KT_METHOD_AMXINT4;
        if (method == KT_METHOD_AMXINT8 && !scale) {
            /* int8 codes, never -128 (a symmetric quantizer's range) */
            uint64_t t = r ^ 0x8080808080808080ull;
            uint64_t zero = ~(((t & 0x7f7f7f7f7f7f7f7full) + 0x7f7f7f7f7f7f7f7full) | t |
                              0x7f7f7f7f7f7f7f7full);
            w[i] = r | (zero >> 7);
        } else if (method == KT_METHOD_AMXINT8)
            w[i] = 0x3c0000003c000000ull | (r & 0x0000ffff0000ffffull);   /* F32 ~2^-7 */
        else if (method == KT_METHOD_AMXINT4 && scale)
            /* BF16 2^-6 / 2^-7 / 2^-8 (1 : 2 : 1): every row's scales are e / 16 of its
             * largest, as kt-convert writes them (docs/cpu-format.md, version 2) */
            for (int l = 0; l < 4; l++)
                w[i] = (w[i] & ~(0xffffull << (16 * l))) |
                       ((uint64_t)(0x3c80u - 0x80u * (unsigned)__builtin_popcountll(
                                                         (r >> (16 * l)) & 3u))
                        << (16 * l));
        else if (method == KT_METHOD_BF16 || (int4 && scale))
            /* BF16 +-[2^-7, 2^-6): exponent 120, random mantissa and sign */
            w[i] = (r & (scale ? 0x007f007f007f007full : 0x807f807f807f807full)) |
                   0x3c003c003c003c00ull;
        else if (method == KT_METHOD_FP8 && !scale)
            w[i] = r & 0xbfbfbfbfbfbfbfbfull;   /* E4M3 with exponent < 8: never NaN */
        else if (method == KT_METHOD_FP8)
            w[i] = 0x3c0000003c000000ull | (r & 0x0000ffff0000ffffull);   /* F32 ~2^-7 */
        else
            w[i] = r;                           /* INT4 nibbles: any value is valid */
    }
    for (size_t i = words * 8; i < bytes; i++)
        p[i] = (uint8_t)(method == KT_METHOD_FP8 ? 0x38 : 0);
}

static void fill_worker(int tid, int nt, void *arg)
{
    fill_job *job = arg;
    weight_set *ws = job->ws;
    uint64_t s = job->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(tid + 1));
    for (int64_t slot = tid; slot < ws->n_slots; slot += nt) {
        uint8_t *base = ws->base + (size_t)slot * ws->lay.stride;
        for (int i = 0; i < 6; i++)
            if (ws->lay.size[i])
                fill_region(ws->method, i, base + ws->lay.off[i], ws->lay.size[i], &s);
    }
}

static void weight_set_free(weight_set *ws)
{
    bench_free_big(ws->base, ws->map_bytes);
    for (int i = 0; i < 6; i++)
        free(ws->ptr[i]);
    memset(ws, 0, sizeof *ws);
}

static bool weight_set_alloc(weight_set *ws, bench_team *team, int method, const model_shape *m,
                             uint32_t n_layers, int64_t n_slots, uint64_t seed)
{
    memset(ws, 0, sizeof *ws);
    ws->method = method;
    layout_for(method, m->h, m->inter, &ws->lay);
    ws->n_slots = n_slots;
    ws->n_layers = n_layers;
    ws->n_experts = m->n_experts;
    ws->map_bytes = (size_t)n_slots * ws->lay.stride;
    ws->base = bench_alloc_big(ws->map_bytes);
#ifdef MADV_DONTDUMP
    /* a flag the stream buffer lacks: the weights stay one mapping of their own
     * (not merged with a neighbour), so smaps tells their pages apart */
    if (ws->base)
        madvise(ws->base, ws->map_bytes, MADV_DONTDUMP);
#endif
    size_t n_ptr = (size_t)n_layers * (size_t)m->n_experts;
    for (int i = 0; i < 6; i++)
        ws->ptr[i] = calloc(n_ptr, sizeof(void *));
    if (!ws->base || !ws->ptr[0] || !ws->ptr[5]) {
        weight_set_free(ws);
        return false;
    }
    for (uint32_t l = 0; l < n_layers; l++)
        for (int32_t e = 0; e < m->n_experts; e++) {
            uint8_t *slot = ws->base + (size_t)slot_of(ws, l, e) * ws->lay.stride;
            for (int i = 0; i < 6; i++)
                ws->ptr[i][(size_t)l * m->n_experts + e] = ws->lay.size[i] ? slot + ws->lay.off[i]
                                                                          : NULL;
        }
    fill_job job = {ws, seed};
    team_run(team, fill_worker, &job);
    return true;
}

/* ---- routing ---------------------------------------------------------------- */

/* ids [T][k]: for each token k distinct experts, uniform over E; counts[E]
 * tokens per expert; returns the number of distinct weight slots touched. */
static int64_t route(uint64_t *s, int32_t t, int32_t k, int32_t n_experts, int32_t *ids,
                     float *w, int32_t *counts, const weight_set *ws, uint32_t layer,
                     uint8_t *slot_seen)
{
    memset(counts, 0, (size_t)n_experts * sizeof *counts);
    for (int32_t i = 0; i < t; i++)
        for (int32_t j = 0; j < k; j++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)(next_rand(s) % (uint64_t)n_experts);
                dup = false;
                for (int32_t q = 0; q < j; q++)
                    dup |= ids[i * k + q] == e;
            } while (dup);
            ids[i * k + j] = e;
            w[i * k + j] = 1.0f / (float)k;
            counts[e]++;
        }
    int64_t distinct = 0;
    if (!ws)
        return 0;
    memset(slot_seen, 0, (size_t)ws->n_slots);
    for (int32_t e = 0; e < n_experts; e++)
        if (counts[e]) {
            int64_t slot = slot_of(ws, layer, e);
            if (!slot_seen[slot]) {
                slot_seen[slot] = 1;
                distinct++;
            }
        }
    return distinct;
}

/* ---- where the weights and the threads are ------------------------------------ */

#define MAX_TIDS 1024

/* cpus[0..n) as "0-3,8,(0-15)": runs of consecutive CPUs joined, a worker
 * allowed more than one CPU in brackets. */
static void cpu_list(char cpus[][64], int n, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at + 1 < cap;) {
        char *end = NULL;
        long c = strtol(cpus[i], &end, 10);
        if (!end || *end || end == cpus[i]) { /* not one CPU */
            at += (size_t)snprintf(buf + at, cap - at, "%s(%s)", i ? "," : "", cpus[i]);
            i++;
            continue;
        }
        int j = i + 1;
        while (j < n && strtol(cpus[j], &end, 10) == c + (j - i) && end && !*end)
            j++;
        if (j - i > 1)
            at += (size_t)snprintf(buf + at, cap - at, "%s%ld-%ld", i ? "," : "", c, c + (j - i) - 1);
        else
            at += (size_t)snprintf(buf + at, cap - at, "%s%ld", i ? "," : "", c);
        i = j;
    }
}

/* The backend's workers (threads that appeared while it was created, before[]
 * being the ones before) and the stream team, by CPU in worker order. */
static void print_threads(bench_team *team, const int *before, int n_before)
{
    static int now[MAX_TIDS];
    static char cpus[MAX_TIDS][64];
    int n = bench_thread_ids(now, MAX_TIDS), k = 0;
    for (int i = 0; i < n; i++) {
        bool old = false;
        for (int j = 0; j < n_before && !old; j++)
            old = now[i] == before[j];
        if (!old && !bench_thread_cpus(now[i], cpus[k++], sizeof cpus[0]))
            snprintf(cpus[k - 1], sizeof cpus[0], "?");
    }
    char pool[1024], mine[1024];
    cpu_list(cpus, k, pool, sizeof pool);
    int m = team_size(team) < MAX_TIDS ? team_size(team) : MAX_TIDS;
    for (int i = 0; i < m; i++)
        snprintf(cpus[i], sizeof cpus[0], "%d", team_cpu(team, i));
    cpu_list(cpus, m, mine, sizeof mine);
    printf("  threads: %d backend workers on CPUs %s; stream team on %s\n", k, pool, mine);
}

/* The share of the weights (one pool reads them in place) in huge pages. */
static void print_pages(const weight_set *ws)
{
    bench_pages pg;
    char thp[96];
    bench_thp_mode(thp, sizeof thp);
    if (!bench_mem_pages(ws->base, ws->map_bytes, &pg)) {
        printf("  pages: /proc/self/smaps unreadable; %s\n", thp);
        return;
    }
    const double gib = 1073741824.0;
    printf("  pages: weights %.2f GiB resident (%d mapping, %.2f GiB), %.2f GiB = %.1f%% in "
           "huge pages; process %.2f GiB anonymous, %.1f%% huge; %s\n",
           (double)pg.rss / gib, pg.vmas, (double)pg.vma_bytes / gib, (double)pg.huge / gib,
           pg.rss ? 100.0 * (double)pg.huge / (double)pg.rss : 0.0, (double)pg.all_rss / gib,
           pg.all_rss ? 100.0 * (double)pg.all_huge / (double)pg.all_rss : 0.0, thp);
}

/* ---- the run ------------------------------------------------------------------ */

#define MAX_TOKEN_COUNTS 8
#define N_METHODS 5

typedef struct run_cfg {
    const model_shape *model;
    model_shape custom;    /* --shape */
    int methods[N_METHODS];
    int n_methods;
    int64_t tokens[MAX_TOKEN_COUNTS];
    int n_tokens;
    int64_t layers;        /* 0: auto */
    int threads;
    int pools;           /* --pools: backend thread pools (0: NUMA nodes) */
    int precision;       /* --precision: kt_moe_precision                 */
    double min_time;       /* seconds of timed calls per row */
    double mem_fraction;   /* of available RAM for weights  */
    int64_t stream_mib;
    uint64_t seed;
    bool onednn;
    bool onednn_packed;    /* oneDNN on weights reordered to its layout */
    bool onednn_bf16, onednn_int8;   /* --onednn-types: the yardsticks to run */
    int32_t onednn_pack_m;           /* rows oneDNN's packed layout is chosen for */
} run_cfg;

typedef struct row {
    int method;
    int64_t t;
    double gbs, tflops;             /* medians of the per-call rates     */
    double gbs_mean, tflops_mean;   /* total work / total time           */
    double stream_gbs, onednn_tflops;
    double stream_thr_gbs, stream_slow_gbs; /* its threads: median, slowest (x threads) */
    double onednn_int8_tops;        /* AMXINT8 / AMXINT4 prefill rows only */
    int64_t calls;
    char isa[48];
    uint32_t layers;
    int64_t slots;
    uint64_t expert_bytes;
    int32_t threads;      /* the backend's worker threads (kt_moe_backend_info) */
    int32_t stream_samples;
    /* decode rows, where schedstat is readable (clean_known): the medians over
     * the clean calls / stream samples alone, and how many were clean */
    bool clean_known;
    double clean_gbs, clean_stream_gbs;
    int64_t clean_calls;
    int32_t clean_stream_samples;
    double window_gbs; /* the stream windows' median, clean or not */
    int32_t windows;
} row;

/* Layer and slot counts for one method: total >= 8 x L3, <= mem cap. */
static bool plan_memory(const run_cfg *c, const bench_hw *hw, const expert_layout *lay,
                        uint32_t *n_layers, int64_t *n_slots, char *note, size_t note_size)
{
    const model_shape *m = c->model;
    uint64_t l3 = hw->l3_bytes ? hw->l3_bytes : (32ull << 20);
    uint64_t target = 8 * l3;
    uint64_t cap = (uint64_t)((double)hw->ram_available * c->mem_fraction);
    uint64_t layer_bytes = (uint64_t)lay->stride * (uint64_t)m->n_experts;
    uint64_t want = c->layers;
    if (!want) {
        want = (target + layer_bytes - 1) / layer_bytes;
        if (want < 2)
            want = 2;
        if (want > 64)
            want = 64;
    }
    int64_t need = (int64_t)want * m->n_experts;
    int64_t fit = (int64_t)(cap / lay->stride);
    int64_t slots = need < fit ? need : fit;
    int64_t min_slots = (int64_t)((target + lay->stride - 1) / lay->stride);
    int64_t max_k_t = (int64_t)m->top_k * 4;   /* decode T = 4 touches up to 4k experts */
    if (min_slots < max_k_t)
        min_slots = max_k_t;
    if (slots < min_slots && c->layers && slots == need) {
        /* The caller chose the layer count: run, but say what it means. */
        snprintf(note, note_size,
                 "only %.1f MiB of weights (< 8x L3): calls may hit the cache",
                 (double)slots * (double)lay->stride / 1048576.0);
        *n_layers = (uint32_t)want;
        *n_slots = slots;
        return true;
    }
    if (slots < min_slots) {
        snprintf(note, note_size,
                 "not enough memory: %lld expert buffers of %.1f MiB fit in %.1f GiB "
                 "(%.0f%% of available RAM); need %lld (8x L3) - lower the load or raise "
                 "--mem-fraction", (long long)fit, (double)lay->stride / 1048576.0,
                 (double)cap / 1073741824.0, c->mem_fraction * 100.0, (long long)min_slots);
        return false;
    }
    if (!c->layers && slots < need && slots >= m->n_experts) {
        /* Whole layers fit: use as many as fit rather than aliasing. */
        want = (uint64_t)(slots / m->n_experts);
        if (want < 1)
            want = 1;
        need = (int64_t)want * m->n_experts;
        slots = need;
    }
    *n_layers = (uint32_t)want;
    *n_slots = slots;
    note[0] = '\0';
    if (slots < need)
        snprintf(note, note_size,
                 "memory cap: %u layers x %d experts share %lld distinct weight buffers "
                 "(%.1f GiB); bytes are counted per distinct buffer read",
                 (unsigned)want, m->n_experts, (long long)slots,
                 (double)slots * (double)lay->stride / 1073741824.0);
    return true;
}

static const char *method_name(int method)
{
    const char *n = kt_method_name((kt_method)method);
    return n ? n : "?";
}

typedef struct io_bufs {
    uint16_t *x, *out;      /* [Tmax][H] BF16 */
    int32_t *ids;           /* [Tmax][k]      */
    float *w;               /* [Tmax][k]      */
    int32_t *counts;        /* [E]            */
    uint8_t *slot_seen;     /* [n_slots max]  */
} io_bufs;

static bool out_finite(const uint16_t *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if ((out[i] & 0x7f80u) == 0x7f80u)
            return false;
    return true;
}

/* Per-call rates; the median is robust to a call that lost its core to a
 * neighbour process (common on shared machines). */
typedef struct rates {
    double *v;
    size_t n, cap;
} rates;

static bool rates_add(rates *r, double x)
{
    double *v = tool_grow(r->v, r->n, &r->cap, sizeof *v, 256);
    if (!v)
        return false;
    r->v = v;
    r->v[r->n++] = x;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double rates_median(rates *r)
{
    if (!r->n)
        return 0;
    qsort(r->v, r->n, sizeof *r->v, cmp_double);
    return r->n % 2 ? r->v[r->n / 2] : 0.5 * (r->v[r->n / 2 - 1] + r->v[r->n / 2]);
}

/* Runs the backend for one T: warm-up, then calls cycling the layers until
 * min_time seconds of timed calls (>= 3 calls, >= one pass over the layers). */
static bool time_backend(kt_moe_backend *moe, const run_cfg *c, const weight_set *ws,
                         io_bufs *io, int64_t t, row *r, bench_team *team, stream_buf *sb,
                         const clean_watch *cw)
{
    const model_shape *m = c->model;
    uint64_t s = c->seed ^ (uint64_t)t * 0x2545f4914f6cdd1dull;
    int32_t tt = (int32_t)t;
    kt_moe_io a = KT_MOE_IO_INIT;
    a.n_tokens = &tt;
    a.top_k = (uint32_t)m->top_k;
    a.x = io->x;
    a.ids = io->ids;
    a.w = io->w;
    a.out = io->out;
    int warm = t <= 16 ? (int)ws->n_layers : 1;
    double busy = 0, flops = 0, bytes = 0;
    int64_t calls = 0;
    rates gbs = {0}, tfl = {0}, bw = {0}, bw_med = {0}, bw_slow = {0};
    rates gbs_clean = {0}, bw_clean = {0}, bw_win = {0};
    uint64_t win_at = 0; /* the next window's offset */
    /* decode rows only: a prefill call (ms to s) is almost never clean */
    bool watch = sb && clean_watch_on(cw);
    double since_sample = 0;
    for (int64_t call = 0;; call++) {
        /* Decode: stream read samples taken between the calls, every ~50 ms,
         * so that both figures see the same neighbours. */
        if (sb && call >= warm && (bw.n == 0 || since_sample >= 0.05)) {
            double slow, med;
            if (!rates_add(&bw, stream_buf_read(team, sb)))
                break;
            if (watch) { /* the clean stream figure's short reads (bench.h) */
                double all[64], clean[64];
                int n_clean = clean_stream_windows(cw, team, sb, &win_at, all, clean);
                for (int i = 0; i < cw->windows; i++)
                    if (!rates_add(&bw_win, all[i]) ||
                        (i < n_clean && !rates_add(&bw_clean, clean[i])))
                        break;
            }
            stream_buf_threads(team, sb, &slow, &med);
            if (!rates_add(&bw_med, med) || !rates_add(&bw_slow, slow))
                break;
            since_sample = 0;
        }
        uint32_t layer = (uint32_t)(call % ws->n_layers);
        int64_t distinct = route(&s, tt, m->top_k, m->n_experts, io->ids, io->w, io->counts,
                                 ws, layer, io->slot_seen);
        uint64_t w0 = watch ? clean_calls_wait(cw) : 0;
        double t0 = bench_now();
        kt_status st = kt_moe_forward(moe, layer, &a);
        double dt = bench_now() - t0;
        double waited = watch ? (double)(clean_calls_wait(cw) - w0) : 0;
        if (st < 0) {
            fprintf(stderr, "kt-bench moe: kt_moe_forward(%s, T=%lld) failed: %s\n",
                    method_name(ws->method), (long long)t, kt_last_error());
            return false;
        }
        if (call < warm)
            continue;
        double call_bytes = (double)distinct * (double)ws->lay.bytes;
        double call_flops = 2.0 * 3.0 * (double)m->h * (double)m->inter * (double)m->top_k *
                            (double)t;
        busy += dt;
        since_sample += dt;
        bytes += call_bytes;
        flops += call_flops;
        calls++;
        if (!rates_add(&gbs, call_bytes / dt * 1e-9) || !rates_add(&tfl, call_flops / dt * 1e-12))
            break;
        if (watch && waited <= cw->limit_ns && !rates_add(&gbs_clean, call_bytes / dt * 1e-9))
            break;
        if (watch && cw->debug)
            fprintf(stderr, "clean-debug call %.3f GB/s waited %.1f us\n", call_bytes / dt * 1e-9,
                    waited * 1e-3);
        if (busy >= c->min_time && calls >= 3 && calls >= (t <= 16 ? ws->n_layers : 1) &&
            (!sb || bw.n >= 5))
            break;
    }
    r->stream_gbs = rates_median(&bw);
    r->stream_thr_gbs = rates_median(&bw_med);
    r->stream_slow_gbs = rates_median(&bw_slow);
    r->stream_samples = (int32_t)bw.n;
    r->clean_known = watch;
    r->clean_stream_gbs = rates_median(&bw_clean);
    r->clean_stream_samples = (int32_t)bw_clean.n;
    r->window_gbs = rates_median(&bw_win);
    r->windows = (int32_t)bw_win.n;
    free(bw_win.v);
    r->clean_gbs = rates_median(&gbs_clean);
    r->clean_calls = (int64_t)gbs_clean.n;
    free(bw_clean.v);
    free(gbs_clean.v);
    free(bw.v);
    free(bw_med.v);
    free(bw_slow.v);
    if (!out_finite(io->out, t * m->h))
        fprintf(stderr, "kt-bench moe: warning: %s T=%lld produced NaN/Inf outputs\n",
                method_name(ws->method), (long long)t);
    r->gbs_mean = bytes / busy * 1e-9;
    r->tflops_mean = flops / busy * 1e-12;
    r->gbs = rates_median(&gbs);
    r->tflops = rates_median(&tfl);
    r->calls = calls;
    free(gbs.v);
    free(tfl.v);
    return true;
}

/* oneDNN (BF16 or INT8) over the same shapes and routing sequence (same seed
 * per T); its ops per second (x 1e12) in *tflops. */
static bool time_onednn(const run_cfg *c, gemm_moe *g, const weight_set *ws, io_bufs *io,
                        int64_t t, double *tflops)
{
    const model_shape *m = c->model;
    uint64_t s = c->seed ^ (uint64_t)t * 0x2545f4914f6cdd1dull;
    int warm = t <= 16 ? (int)ws->n_layers : 1;
    double busy = 0;
    int64_t calls = 0;
    rates tfl = {0};
    for (int64_t call = 0;; call++) {
        uint32_t layer = (uint32_t)(call % ws->n_layers);
        route(&s, (int32_t)t, m->top_k, m->n_experts, io->ids, io->w, io->counts, ws, layer,
              io->slot_seen);
        double dt = gemm_moe_run(g, (int)layer, io->counts);
        if (dt < 0) {
            free(tfl.v);
            return false;
        }
        if (call < warm)
            continue;
        busy += dt;
        calls++;
        if (!rates_add(&tfl, 6.0 * (double)m->h * (double)m->inter * (double)m->top_k *
                                 (double)t / dt * 1e-12))
            break;
        if (busy >= c->min_time && calls >= 3 && calls >= (t <= 16 ? ws->n_layers : 1))
            break;
    }
    *tflops = rates_median(&tfl);
    free(tfl.v);
    return true;
}

/* "; clean 0.91 x (12.1 of 13.3 GB/s; calls 412/1000, stream 15/80)" for a
 * decode row, "" where there is no clean figure. */
static void clean_text(const row *x, char *buf, size_t n)
{
    buf[0] = '\0';
    if (!x->clean_known)
        return;
    if (x->clean_calls && x->clean_stream_samples)
        snprintf(buf, n, "; clean %.2f x (%.1f of %.1f GB/s; calls %lld/%lld, stream %d/%d)",
                 x->clean_gbs / x->clean_stream_gbs, x->clean_gbs, x->clean_stream_gbs,
                 (long long)x->clean_calls, (long long)x->calls, x->clean_stream_samples,
                 x->windows);
    else
        snprintf(buf, n, "; clean: no ratio (calls %lld/%lld, stream %d/%d)",
                 (long long)x->clean_calls, (long long)x->calls, x->clean_stream_samples,
                 x->windows);
}

/* The clean figures' JSON members (null where there are none). */
static void clean_json(const row *x, double limit_us, char *buf, size_t n)
{
    if (!x->clean_known) {
        snprintf(buf, n, "\"clean_gbs\":null,\"clean_stream_gbs\":null,\"clean_ratio\":null,"
                         "\"clean_calls\":null,\"clean_stream_samples\":null,"
                         "\"stream_windows\":null,\"stream_window_gbs\":null,"
                         "\"clean_wait_us\":null");
        return;
    }
    char gbs[32] = "null", st[32] = "null", ratio[32] = "null";
    if (x->clean_calls)
        snprintf(gbs, sizeof gbs, "%.3f", x->clean_gbs);
    if (x->clean_stream_samples)
        snprintf(st, sizeof st, "%.3f", x->clean_stream_gbs);
    if (x->clean_calls && x->clean_stream_samples)
        snprintf(ratio, sizeof ratio, "%.4f", x->clean_gbs / x->clean_stream_gbs);
    snprintf(buf, n, "\"clean_gbs\":%s,\"clean_stream_gbs\":%s,\"clean_ratio\":%s,"
                     "\"clean_calls\":%lld,\"clean_stream_samples\":%d,\"stream_windows\":%d,"
                     "\"stream_window_gbs\":%.3f,\"clean_wait_us\":%.0f",
             gbs, st, ratio, (long long)x->clean_calls, x->clean_stream_samples, x->windows,
             x->window_gbs, limit_us);
}

static bool run_method(const run_cfg *c, const bench_hw *hw, bench_team *team, stream_buf *sb,
                       io_bufs *io, int method, row *rows, int *n_rows, clean_watch *cw)
{
    const model_shape *m = c->model;
    expert_layout lay;
    layout_for(method, m->h, m->inter, &lay);
    uint32_t n_layers;
    int64_t n_slots;
    char note[256];
    if (!plan_memory(c, hw, &lay, &n_layers, &n_slots, note, sizeof note)) {
        fprintf(stderr, "kt-bench moe: %s: %s\n", method_name(method), note);
        return false;
    }
    weight_set ws;
    double t0 = bench_now();
    if (!weight_set_alloc(&ws, team, method, m, n_layers, n_slots, c->seed + (uint64_t)method)) {
        fprintf(stderr, "kt-bench moe: %s: cannot allocate %.1f GiB of weights\n",
                method_name(method), (double)n_slots * (double)lay.stride / 1073741824.0);
        return false;
    }
    printf("%s: %u layers, %.2f MiB per expert, %.2f GiB of weights (%.0fx L3), filled in "
           "%.1f s\n", method_name(method), n_layers, (double)lay.bytes / 1048576.0,
           (double)n_slots * (double)lay.bytes / 1073741824.0,
           (double)n_slots * (double)lay.bytes / (double)(hw->l3_bytes ? hw->l3_bytes : 1),
           bench_now() - t0);
    if (note[0])
        printf("  note: %s\n", note);
    fflush(stdout);

    kt_moe_layer_weights *lw = calloc(n_layers, sizeof *lw);
    if (!lw) {
        weight_set_free(&ws);
        return false;
    }
    for (uint32_t l = 0; l < n_layers; l++) {
        kt_moe_layer_weights one = KT_MOE_LAYER_WEIGHTS_INIT;
        size_t at = (size_t)l * (size_t)m->n_experts;
        one.gate = ws.ptr[0] + at;
        one.up = ws.ptr[1] + at;
        one.down = ws.ptr[2] + at;
        if (method != KT_METHOD_BF16) {
            one.gate_scale = ws.ptr[3] + at;
            one.up_scale = ws.ptr[4] + at;
            one.down_scale = ws.ptr[5] + at;
        }
        lw[l] = one;
    }
    int64_t t_max = 1;
    for (int i = 0; i < c->n_tokens; i++)
        if (c->tokens[i] > t_max)
            t_max = c->tokens[i];
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = method;
    d.hidden = (uint32_t)m->h;
    d.intermediate = (uint32_t)m->inter;
    d.n_experts = (uint32_t)m->n_experts;
    d.top_k = (uint32_t)m->top_k;
    d.group_size = method == KT_METHOD_AMXINT4 ? (uint32_t)amxint4_group : 0u;
    kt_moe_options o = KT_MOE_OPTIONS_INIT;
    o.n_threads = c->threads;
    o.n_pools = c->pools;
    o.act_precision = c->precision;
    o.max_tokens = (int32_t)t_max;
    kt_moe_backend *moe = NULL;
    static int tids[MAX_TIDS];
    int n_tids = bench_thread_ids(tids, MAX_TIDS);
    kt_status st = kt_moe_backend_create(&moe, NULL, &d, lw, n_layers, &o);
    free(lw);   /* the backend copies the pointer arrays */
    if (st < 0) {
        fprintf(stderr, "kt-bench moe: %s: kt_moe_backend_create failed: %s (%s)\n",
                method_name(method), kt_status_str(st), kt_last_error());
        weight_set_free(&ws);
        return false;
    }
    /* the backend's workers are the threads its creation started */
    if (cw->stream && !clean_watch_calls(cw, tids, n_tids))
        printf("  note: no clean-call figures: %s\n", cw->why);
    kt_moe_info info = KT_MOE_INFO_INIT;
    const char *isa = "?";
    int32_t threads = c->threads;
    if (kt_moe_backend_info(moe, &info) >= 0) {
        isa = info.isa ? info.isa : "?";
        threads = info.n_threads;
        if (info.n_pools > 1 && info.pool_memory)
            printf("  %d pools: expert slices copied per pool (%s, %.1f MiB)\n",
                   (int)info.n_pools, info.pool_memory, (double)info.pool_bytes / 1048576.0);
        if (info.expert_bytes && info.expert_bytes != lay.bytes)
            fprintf(stderr, "kt-bench moe: note: backend reports %llu bytes per expert, "
                            "kt-bench counts %llu\n", (unsigned long long)info.expert_bytes,
                    (unsigned long long)lay.bytes);
    }
    bool ok = true;
    double clk_lo[2], clk[2];
    team_clock(team, &clk_lo[0], &clk[0]);
    for (int i = 0; i < c->n_tokens && ok; i++) {
        int64_t t = c->tokens[i];
        row *r = &rows[(*n_rows)];
        memset(r, 0, sizeof *r);
        r->method = method;
        r->t = t;
        snprintf(r->isa, sizeof r->isa, "%s", isa);
        r->layers = n_layers;
        r->slots = n_slots;
        r->expert_bytes = lay.bytes;
        r->threads = threads;
        ok = time_backend(moe, c, &ws, io, t, r, team, t <= 16 ? sb : NULL, cw);
        if (ok) {
            printf("  T=%-5lld %8.2f GB/s  %8.4f TFLOP/s  (median of %lld calls; mean %.2f GB/s)",
                   (long long)t, r->gbs, r->tflops, (long long)r->calls, r->gbs_mean);
            if (r->stream_samples)
                printf("  stream %.2f GB/s (median of %d reads between the calls; its "
                       "threads on their own x %d: median %.1f, slowest %.1f)",
                       r->stream_gbs, r->stream_samples, team_size(team), r->stream_thr_gbs,
                       r->stream_slow_gbs);
            printf("\n");
            if (r->clean_known)
                printf("         clean (run-queue wait <= %.0f us): %.2f GB/s (%lld of %lld "
                       "calls)  stream %.2f GB/s (%d of %d reads of %.0f MiB; all of them %.2f): %.2f\n",
                       cw->limit_ns * 1e-3, r->clean_gbs, (long long)r->clean_calls,
                       (long long)r->calls, r->clean_stream_gbs, r->clean_stream_samples,
                       r->windows, (double)cw->window_bytes / 1048576.0, r->window_gbs,
                       r->clean_calls && r->clean_stream_samples
                           ? r->clean_gbs / r->clean_stream_gbs : 0.0);
            fflush(stdout);
            (*n_rows)++;
        }
    }
    team_clock(team, &clk_lo[1], &clk[1]);
    print_pages(&ws);
    print_threads(team, tids, n_tids);
    printf("  clock: %.2f / %.2f GHz (median / slowest of the team, dependent multiplies) before the "
           "rows, %.2f / %.2f after\n", clk[0], clk_lo[0], clk[1], clk_lo[1]);
    fflush(stdout);
    kt_moe_backend_free(moe);
    weight_set_free(&ws);
    return ok;
}

static bool is_amx_int(int method)
{
    return method == KT_METHOD_AMXINT8 || method == KT_METHOD_AMXINT4;
}

/* Does the yardstick of `kind` serve row r? BF16 every prefill row (the BF16
 * figure is printed for the AMX rows too), INT8 the AMXINT8 / AMXINT4 ones. */
static bool yardstick_serves(gemm_kind kind, const row *r)
{
    return r->t > 16 && (kind == GEMM_BF16 || is_amx_int(r->method));
}

/* One oneDNN yardstick: the per-expert batch of `kind` (BF16 weights, or s8
 * weights with u8 activations and s32 out) on its own weight set, sized and
 * cycled like the backend's, timed for every prefill T some row needs; the
 * figures land in those rows. Where it did not run *why says why (for the
 * summary lines); false when that is a failure, not oneDNN lacking the types
 * on this CPU. */
static bool run_onednn(const run_cfg *c, const bench_hw *hw, bench_team *team, io_bufs *io,
                       gemm_kind kind, row *rows, int n_rows, char *why, size_t why_size,
                       char *impl, size_t impl_size)
{
    const model_shape *m = c->model;
    const char *type = kind == GEMM_INT8 ? "INT8" : "BF16";
    bool wanted[MAX_TOKEN_COUNTS] = {false}, any = false;
    for (int i = 0; i < c->n_tokens; i++)
        for (int r = 0; r < n_rows; r++)
            if (rows[r].t == c->tokens[i] && yardstick_serves(kind, &rows[r]))
                wanted[i] = any = true;
    if (!any)
        return true;
    /* The INT8 set has AMXINT8's bytes: int8 [out][in] codes (the per-row
     * scales beside them are not read: oneDNN's s32 sums stop before them). */
    int method = kind == GEMM_INT8 ? KT_METHOD_AMXINT8 : KT_METHOD_BF16;
    expert_layout lay;
    layout_for(method, m->h, m->inter, &lay);
    uint32_t n_layers;
    int64_t n_slots;
    char note[256];
    weight_set ws;
    run_cfg plan = *c;
    if (c->onednn_packed)
        plan.mem_fraction /= 2;   /* the packed copy needs as much again */
    double t0 = bench_now();
    if (!plan_memory(&plan, hw, &lay, &n_layers, &n_slots, note, sizeof note) ||
        !weight_set_alloc(&ws, team, method, m, n_layers, n_slots,
                          c->seed + (kind == GEMM_INT8 ? 98 : 99))) {
        snprintf(why, why_size, "cannot allocate its %s weights", type);
        fprintf(stderr, "kt-bench moe: oneDNN %s: %s\n", type, why);
        return false;
    }
    gemm_set_threads(c->threads);
    gemm_moe *g = gemm_moe_create(kind, m->h, m->inter, m->n_experts, (int)ws.n_layers,
                                  (const void *const *)ws.ptr[0],
                                  (const void *const *)ws.ptr[1],
                                  (const void *const *)ws.ptr[2]);
    if (!g || (c->onednn_packed && !gemm_moe_pack(g, c->onednn_pack_m))) {
        snprintf(why, why_size, "%s", gemm_last_error());
        fprintf(stderr, "kt-bench moe: oneDNN %s: %s\n", type, why);
        gemm_moe_free(g);
        weight_set_free(&ws);
        return gemm_no_impl();
    }
    char packed[48] = "plain";
    if (c->onednn_packed)
        snprintf(packed, sizeof packed, "packed for m %d", (int)c->onednn_pack_m);
    printf("oneDNN %s matmul per expert (%s, %d threads, weights %s, %u layers, %.2f GiB, "
           "ready in %.1f s), same shapes and routing:\n", type,
           kind == GEMM_INT8 ? "u8 x s8 -> s32" : "bf16 x bf16 -> f32", c->threads, packed,
           ws.n_layers, (double)n_slots * (double)lay.bytes / 1073741824.0, bench_now() - t0);
    if (note[0])
        printf("  note: %s\n", note);
    bool ok = true;
    for (int i = 0; i < c->n_tokens; i++) {
        if (!wanted[i])
            continue;
        double tf;
        if (!time_onednn(c, g, &ws, io, c->tokens[i], &tf)) {
            snprintf(why, why_size, "%s", gemm_last_error());
            fprintf(stderr, "kt-bench moe: oneDNN %s: %s\n", type, why);
            ok = gemm_no_impl();
            break;
        }
        printf("  T=%-5lld %8.4f %s  [%s]\n", (long long)c->tokens[i], tf,
               kind == GEMM_INT8 ? "TOP/s  " : "TFLOP/s", gemm_moe_impl(g));
        fflush(stdout);
        for (int r = 0; r < n_rows; r++)
            if (rows[r].t == c->tokens[i] && yardstick_serves(kind, &rows[r])) {
                if (kind == GEMM_INT8)
                    rows[r].onednn_int8_tops = tf;
                else
                    rows[r].onednn_tflops = tf;
            }
    }
    /* every implementation the timed m's got (the summary rows name them: with
     * ONEDNN_MAX_CPU_ISA set, the proof that the cap held) */
    snprintf(impl, impl_size, "%s", gemm_moe_impl(g));
    printf("  implementations: %s\n", impl);
    gemm_moe_free(g);
    weight_set_free(&ws);
    return ok;
}

/* ---- kt-bench moe ---------------------------------------------------------- */

static void moe_usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench moe [--model NAME] [--method LIST|all] [--tokens LIST]\n"
            "                    [--layers N] [--threads N] [--json FILE] [options]\n"
            "\n"
            "Benchmarks libkt's CPU MoE backend on synthetic random weights shaped like\n"
            "a real model, against this machine's own limits measured in the same run:\n"
            "  decode (T <= 16): effective GB/s of expert weights read (bytes of the\n"
            "    distinct experts each call touches, scales included, over its time),\n"
            "    next to the stream read bandwidth sampled between the calls; beside\n"
            "    them the clean figures: the median over the calls during which the\n"
            "    backend's workers and the caller waited on run queues <= 150 us in all\n"
            "    (/proc/self/task/TID/schedstat), against the median of the clean\n"
            "    16 MiB stream reads taken after each sample (a whole-buffer pass is\n"
            "    rarely undisturbed), and how many calls / reads were clean. They show\n"
            "    the kernels on their cores when neighbours take CPUs; the plain\n"
            "    figures stay the headline (what an engine gets on this machine).\n"
            "    KT_BENCH_CLEAN_US / _WINDOWS / _WINDOW_MIB set 150 / 4 / 16;\n"
            "    KT_BENCH_CLEAN_DEBUG=1 prints every wait to stderr;\n"
            "  prefill: TFLOP/s (2*3*H*I*k*T per call) next to oneDNN BF16 matmuls over\n"
            "    the same per-expert shapes, routing and thread count; AMXINT8 and\n"
            "    AMXINT4 also next to oneDNN INT8 matmuls (u8 activations x s8 weights\n"
            "    -> s32, TOP/s on the same count) over the same work: 'x oneDNN INT8'.\n"
            "    Each yardstick streams its own weights, cycled over layers like the\n"
            "    backend's, and runs after the backend's rows for the prefill T only.\n"
            "Routing is uniform random, k distinct experts per token. The weights span\n"
            "at least 8x the L3 cache and calls cycle through the layers, so every call\n"
            "reads cold weights. The last lines state the ratios.\n"
            "\n"
            "  --model NAME       qwen3-30b-a3b (H 2048, I 768, E 128, k 8; default),\n"
            "                     deepseek-v3 (H 7168, I 2048, E 256, k 8), kimi-k2 (E 384),\n"
            "                     minimax-m2 (H 3072, I 1536, E 256, k 8)\n"
            "  --shape H,I,E,k    any other shape (H and I multiples of 32)\n"
            "  --method LIST      BF16, FP8, RAWINT4, AMXINT8, AMXINT4 (libkt's converted\n"
            "                     formats), comma-separated, or all (= BF16,FP8,RAWINT4;\n"
            "                     the default)\n"
            "  --tokens LIST      T values (default 1,4,512,2048)\n"
            "  --layers N         layers of weights (default: auto, >= 8x L3 within\n"
            "                     --mem-fraction of available RAM; fewer bytes than\n"
            "                     8x L3 are allowed here, with a warning)\n"
            "  --threads N        backend and oneDNN threads (default: physical cores)\n"
            "  --precision P      default, or bf16x2: activations as hi + lo BF16 pairs\n"
            "                     (kt_moe_options.act_precision, F32-like accuracy)\n"
            "  --pools N          backend thread pools, each with its own copy of its\n"
            "                     slice of every expert (default: NUMA nodes)\n"
            "  --min-time S       seconds of timed calls per row (default 1.0)\n"
            "  --mem-fraction F   share of available RAM for weights (default 0.4)\n"
            "  --stream-size MIB  stream read buffer, read every ~50 ms of decode calls\n"
            "                     (default: 8x L3, at least 256)\n"
            "  --onednn-weights W packed (default): oneDNN runs on a copy of the weights\n"
            "                     reordered once into its preferred layout, as an engine\n"
            "                     would at load time; plain: on the [out][in] BF16 or\n"
            "                     int8 matrices as stored\n"
            "  --onednn-pack-m M  the rows oneDNN's packed layout is chosen for (default 32)\n"
            "  --onednn-types L   the yardsticks to run: bf16, int8 or bf16,int8 (default;\n"
            "                     INT8 runs only for AMXINT8 / AMXINT4 rows, BF16 for all)\n"
            "  --no-onednn        skip the oneDNN comparison\n"
            "  --group-size G     AMXINT4 inputs per scale: 32 (default), 64, 128\n"
            "  --gguf FILE        LLAMAFILE on a GGUF's routed experts instead of synthetic\n"
            "                     weights (kt-bench moe --gguf FILE --help)\n"
            "  --seed N           routing and weight seed (default 1)\n"
            "  --json FILE        write every row as JSON (method, shape, T, GB/s, stream\n"
            "                     GB/s, TFLOP/s, oneDNN BF16 TFLOP/s onednn_tflops, oneDNN\n"
            "                     INT8 TOP/s onednn_int8_tops (0: not run), the oneDNN\n"
            "                     implementations onednn_bf16_impl / onednn_int8_impl,\n"
            "                     the clean figures clean_gbs, clean_stream_gbs,\n"
            "                     clean_ratio, clean_calls, clean_stream_samples,\n"
            "                     stream_windows, stream_window_gbs, clean_wait_us\n"
            "                     (null on prefill rows and without schedstat),\n"
            "                     threads, ISA)\n");
}

static bool parse_methods(const char *text, run_cfg *c)
{
    if (!strcasecmp(text, "all")) {
        c->methods[0] = KT_METHOD_BF16;
        c->methods[1] = KT_METHOD_FP8;
        c->methods[2] = KT_METHOD_RAWINT4;
        c->n_methods = 3;
        return true;
    }
    char buf[128];
    if (strlen(text) >= sizeof buf)
        return false;
    strcpy(buf, text);
    c->n_methods = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        kt_method mm = kt_method_from_name(tok);
        if (mm != KT_METHOD_BF16 && mm != KT_METHOD_FP8 && mm != KT_METHOD_RAWINT4 &&
            mm != KT_METHOD_AMXINT8 && mm != KT_METHOD_AMXINT4) {
            fprintf(stderr, "kt-bench moe: --method: '%s' is not one of BF16, FP8, RAWINT4, "
                            "AMXINT8, AMXINT4, all\n", tok);
            return false;
        }
        if (c->n_methods == N_METHODS)
            return false;
        c->methods[c->n_methods++] = mm;
    }
    return c->n_methods > 0;
}

/* --onednn-types: bf16, int8 or both, comma-separated. */
static bool parse_onednn_types(const char *text, run_cfg *c)
{
    char buf[64];
    if (strlen(text) >= sizeof buf) {
        fprintf(stderr, "kt-bench moe: --onednn-types: expected bf16, int8 or bf16,int8\n");
        return false;
    }
    strcpy(buf, text);
    c->onednn_bf16 = c->onednn_int8 = false;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strcasecmp(tok, "bf16")) {
            c->onednn_bf16 = true;
        } else if (!strcasecmp(tok, "int8")) {
            c->onednn_int8 = true;
        } else {
            fprintf(stderr, "kt-bench moe: --onednn-types: '%s' is not bf16 or int8\n", tok);
            return false;
        }
    }
    if (!c->onednn_bf16 && !c->onednn_int8) {
        fprintf(stderr, "kt-bench moe: --onednn-types: empty list (--no-onednn runs none)\n");
        return false;
    }
    return true;
}

int bench_moe_gguf(int argc, char **argv); /* moe_gguf.c */

int cmd_moe(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--gguf") || !strncmp(argv[i], "--gguf=", 7))
            return bench_moe_gguf(argc, argv); /* LLAMAFILE on a GGUF file */
    run_cfg c;
    memset(&c, 0, sizeof c);
    c.model = &models[0];
    parse_methods("all", &c);
    c.tokens[0] = 1;
    c.tokens[1] = 4;
    c.tokens[2] = 512;
    c.tokens[3] = 2048;
    c.n_tokens = 4;
    c.min_time = 1.0;
    c.mem_fraction = 0.4;
    c.stream_mib = 0;   /* auto: 8x L3, at least 256 MiB */
    c.seed = 1;
    c.onednn = true;
    c.onednn_packed = true;
    c.onednn_bf16 = c.onednn_int8 = true;
    c.onednn_pack_m = 32;   /* a typical prefill m (T 1024, k 8, E 256) */
    int64_t threads = 0, seed = 1;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            moe_usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--model", true, &v, &bad)) {
            if (bad)
                return 2;
            c.model = NULL;
            for (size_t q = 0; q < sizeof models / sizeof models[0]; q++)
                if (!strcasecmp(v, models[q].name))
                    c.model = &models[q];
            if (!c.model) {
                fprintf(stderr, "kt-bench moe: --model: unknown model '%s' (qwen3-30b-a3b, "
                                "deepseek-v3, kimi-k2, minimax-m2)\n", v);
                return 2;
            }
        } else if (opt_match(argc, argv, &i, "--shape", true, &v, &bad)) {
            int64_t dims[4];
            int nd = 0;
            if (bad || !bench_parse_list("--shape", v, 1, 1 << 20, dims, &nd, 4))
                return 2;
            if (nd != 4 || dims[0] % 32 || dims[1] % 32 || dims[3] > dims[2] || dims[3] > 64) {
                fprintf(stderr, "kt-bench moe: --shape: expected H,I,E,k with H and I "
                                "multiples of 32 and k <= min(E, 64)\n");
                return 2;
            }
            c.custom.name = "custom";
            c.custom.h = dims[0];
            c.custom.inter = dims[1];
            c.custom.n_experts = (int32_t)dims[2];
            c.custom.top_k = (int32_t)dims[3];
            c.model = &c.custom;
        } else if (opt_match(argc, argv, &i, "--method", true, &v, &bad)) {
            if (bad || !parse_methods(v, &c))
                return 2;
        } else if (opt_match(argc, argv, &i, "--tokens", true, &v, &bad)) {
            if (bad || !bench_parse_list("--tokens", v, 1, 65536, c.tokens, &c.n_tokens,
                                         MAX_TOKEN_COUNTS))
                return 2;
        } else if (opt_match(argc, argv, &i, "--layers", true, &v, &bad)) {
            if (bad || !opt_parse_i64(BENCH_TOOL, "--layers", v, 1, 4096, &c.layers))
                return 2;
        } else if (bench_common_opt(argc, argv, &i, &threads, &json_path, &bad)) {
            if (bad)
                return 2;
        } else if (opt_match(argc, argv, &i, "--precision", true, &v, &bad)) {
            if (bad || (strcmp(v, "default") && strcmp(v, "bf16x2"))) {
                fprintf(stderr, "kt-bench moe: --precision: expected default or bf16x2\n");
                return 2;
            }
            c.precision = strcmp(v, "bf16x2") ? KT_MOE_PREC_DEFAULT : KT_MOE_PREC_BF16X2;
        } else if (opt_match(argc, argv, &i, "--pools", true, &v, &bad)) {
            int64_t pools = 0;
            if (bad || !opt_parse_i64(BENCH_TOOL, "--pools", v, 0, 64, &pools))
                return 2;
            c.pools = (int)pools;
        } else if (opt_match(argc, argv, &i, "--min-time", true, &v, &bad)) {
            if (bad || !opt_parse_f64(BENCH_TOOL, "--min-time", v, 0.01, 600, &c.min_time))
                return 2;
        } else if (opt_match(argc, argv, &i, "--mem-fraction", true, &v, &bad)) {
            if (bad || !opt_parse_f64(BENCH_TOOL, "--mem-fraction", v, 0.01, 0.95,
                                      &c.mem_fraction))
                return 2;
        } else if (opt_match(argc, argv, &i, "--stream-size", true, &v, &bad)) {
            if (bad || !opt_parse_i64(BENCH_TOOL, "--stream-size", v, 16, 1 << 20,
                                      &c.stream_mib))
                return 2;
        } else if (opt_i64(BENCH_TOOL, argc, argv, &i, "--seed", 0, INT64_MAX, &seed, &bad)) {
            if (bad)
                return 2;
            c.seed = (uint64_t)seed;
        } else if (opt_match(argc, argv, &i, "--onednn-weights", true, &v, &bad)) {
            if (bad)
                return 2;
            if (!strcmp(v, "packed") || !strcmp(v, "plain")) {
                c.onednn_packed = !strcmp(v, "packed");
            } else {
                fprintf(stderr, "kt-bench moe: --onednn-weights: '%s' is not packed or plain\n",
                        v);
                return 2;
            }
        } else if (opt_match(argc, argv, &i, "--no-onednn", false, &v, &bad)) {
            c.onednn = false;
        } else if (opt_match(argc, argv, &i, "--onednn-pack-m", true, &v, &bad)) {
            int64_t pm = 0;
            if (bad || !opt_parse_i64(BENCH_TOOL, "--onednn-pack-m", v, 1, 65536, &pm))
                return 2;
            c.onednn_pack_m = (int32_t)pm;
        } else if (opt_match(argc, argv, &i, "--onednn-types", true, &v, &bad)) {
            if (bad || !parse_onednn_types(v, &c))
                return 2;
        } else if (opt_match(argc, argv, &i, "--group-size", true, &v, &bad)) {
            if (bad)
                return 2;
            amxint4_group = atoi(v);
            if (amxint4_group != 32 && amxint4_group != 64 && amxint4_group != 128) {
                fprintf(stderr, "kt-bench moe: --group-size: '%s' is not 32, 64 or 128\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "kt-bench moe: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    /* why a yardstick did not run, for the summary lines */
    char why_bf16[256] = "not in --onednn-types", why_int8[256] = "not in --onednn-types";
    if (!c.onednn) {
        snprintf(why_bf16, sizeof why_bf16, "--no-onednn");
        snprintf(why_int8, sizeof why_int8, "--no-onednn");
    } else if (!gemm_available()) {
        fprintf(stderr, "kt-bench moe: built without oneDNN; prefill ratios are skipped\n");
        snprintf(why_bf16, sizeof why_bf16, "built without oneDNN");
        snprintf(why_int8, sizeof why_int8, "built without oneDNN");
        c.onednn = false;
    }
    c.onednn_bf16 &= c.onednn;
    c.onednn_int8 &= c.onednn;
    /* oneDNN's BF16 matmuls need AVX-512 (2.6 has no AVX2 implementation); its
     * u8 x s8 ones run on AVX2 too */
    const uint64_t avx512_core = KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL |
                                 KT_ISA_AVX512DQ;
    if (c.onednn_bf16 && (kt_hw_isa() & avx512_core) != avx512_core) {
        fprintf(stderr, "kt-bench moe: this CPU has no AVX-512, so oneDNN has no BF16 matmul "
                        "here; the BF16 ratios are skipped\n");
        snprintf(why_bf16, sizeof why_bf16, "oneDNN 2.6 has no BF16 matmul without AVX-512");
        c.onednn_bf16 = false;
    }
    bench_hw hw;
    c.threads = bench_hw_start(&hw, threads);
    const model_shape *m = c.model;
    printf("# model %s: H %lld, I %lld, E %d, k %d; methods", m->name, (long long)m->h,
           (long long)m->inter, m->n_experts, m->top_k);
    for (int i = 0; i < c.n_methods; i++)
        printf(" %s", method_name(c.methods[i]));
    printf("; T");
    for (int i = 0; i < c.n_tokens; i++)
        printf("%s%lld", i ? "," : " ", (long long)c.tokens[i]);
    printf("\n");
    fflush(stdout);

    bench_json *json = NULL;
    if (json_path && !(json = json_open(json_path, &hw, c.threads))) {
        fprintf(stderr, "kt-bench moe: cannot write '%s'\n", json_path);
        return 1;
    }
    /* the stream team's threads: the ones team_create starts, and this one */
    static int ids_before[MAX_TIDS];
    int n_before = bench_thread_ids(ids_before, MAX_TIDS);
    bench_team *team = team_create(c.threads);
    clean_watch cw;
    clean_watch_init(&cw);
    if (!clean_watch_stream(&cw, ids_before, n_before))
        printf("# no clean-call figures (plain ones only): %s\n", cw.why);
    int64_t t_max = 1;
    for (int i = 0; i < c.n_tokens; i++)
        if (c.tokens[i] > t_max)
            t_max = c.tokens[i];
    io_bufs io;
    memset(&io, 0, sizeof io);
    io.x = malloc((size_t)(t_max * m->h) * 2);
    io.out = malloc((size_t)(t_max * m->h) * 2);
    io.ids = malloc((size_t)(t_max * m->top_k) * sizeof *io.ids);
    io.w = malloc((size_t)(t_max * m->top_k) * sizeof *io.w);
    io.counts = malloc((size_t)m->n_experts * sizeof *io.counts);
    uint64_t l3 = hw.l3_bytes ? hw.l3_bytes : (32ull << 20);
    size_t max_slots = (size_t)((double)hw.ram_available * c.mem_fraction / 4096.0) + 1;
    (void)l3;
    io.slot_seen = malloc(max_slots);
    row *rows = calloc((size_t)(N_METHODS * MAX_TOKEN_COUNTS), sizeof *rows);
    if (!team || !io.x || !io.out || !io.ids || !io.w || !io.counts || !io.slot_seen || !rows) {
        fprintf(stderr, "kt-bench moe: out of memory\n");
        return 1;
    }
    uint64_t s = c.seed * 0x9e3779b97f4a7c15ull + 7;
    for (int64_t i = 0; i < t_max * m->h; i++)   /* BF16 +-[0.5, 1) */
        io.x[i] = (uint16_t)(0x3f00u | (next_rand(&s) & 0x807fu));

    if (!c.stream_mib) {
        uint64_t l3 = hw.l3_bytes ? hw.l3_bytes : (32ull << 20);
        c.stream_mib = (int64_t)((8 * l3) >> 20);
        if (c.stream_mib < 256)
            c.stream_mib = 256;
    }
    /* The decode yardstick: read samples interleaved with the backend's calls. */
    stream_buf *sb = stream_buf_create(team, (uint64_t)c.stream_mib << 20);
    if (!sb) {
        fprintf(stderr, "kt-bench moe: cannot allocate the %lld MiB stream buffer\n",
                (long long)c.stream_mib);
        return 1;
    }
    int n_rows = 0, rc = 0;
    for (int i = 0; i < c.n_methods; i++)
        if (!run_method(&c, &hw, team, sb, &io, c.methods[i], rows, &n_rows, &cw))
            rc = 1;

    /* The oneDNN yardsticks, each on its own weights, after the backend's rows
     * (so they never share the cores). */
    char impl_bf16[256] = "", impl_int8[256] = "";
    if (c.onednn_bf16 && !run_onednn(&c, &hw, team, &io, GEMM_BF16, rows, n_rows, why_bf16,
                                     sizeof why_bf16, impl_bf16, sizeof impl_bf16))
        rc = 1;
    if (c.onednn_int8 && !run_onednn(&c, &hw, team, &io, GEMM_INT8, rows, n_rows, why_int8,
                                     sizeof why_int8, impl_int8, sizeof impl_int8))
        rc = 1;

    printf("\nsummary (%s, %d threads, load average now ", m->name, c.threads);
    double load[1] = {0};
    getloadavg(load, 1);
    printf("%.2f):\n", load[0]);
    for (int r = 0; r < n_rows; r++) {
        row *x = &rows[r];
        char clean[160], clean_js[448];
        clean_text(x, clean, sizeof clean);
        clean_json(x, cw.limit_ns * 1e-3, clean_js, sizeof clean_js);
        if (x->t <= 16)
            printf("decode T=%lld %s: %.1f GB/s = %.2f x stream (%.1f GB/s) [%s]%s\n",
                   (long long)x->t, method_name(x->method), x->gbs,
                   x->stream_gbs > 0 ? x->gbs / x->stream_gbs : 0.0, x->stream_gbs, x->isa,
                   clean);
        else {
            /* AMXINT8 / AMXINT4 first against oneDNN INT8 (#5's 1.2x), then BF16 */
            printf("prefill T=%lld %s: %.3f TFLOP/s", (long long)x->t, method_name(x->method),
                   x->tflops);
            if (is_amx_int(x->method)) {
                if (x->onednn_int8_tops > 0)
                    printf(" = %.2f x oneDNN INT8 (%.3f TOP/s, %s);",
                           x->tflops / x->onednn_int8_tops, x->onednn_int8_tops, impl_int8);
                else
                    printf(" (no oneDNN INT8: %s);", why_int8);
            }
            if (x->onednn_tflops > 0)
                printf(" %s%.2f x oneDNN BF16 (%.3f TFLOP/s, %s)",
                       is_amx_int(x->method) ? "" : "= ", x->tflops / x->onednn_tflops,
                       x->onednn_tflops, impl_bf16);
            else
                printf(" (no oneDNN BF16: %s)", why_bf16);
            printf(" [%s]\n", x->isa);
        }
        json_row(json,
                 "\"bench\":\"moe\",\"method\":\"%s\",\"model\":\"%s\",\"H\":%lld,\"I\":%lld,"
                 "\"E\":%d,\"k\":%d,\"layers\":%u,\"weight_buffers\":%lld,"
                 "\"expert_bytes\":%llu,\"T\":%lld,\"phase\":\"%s\",\"gbs\":%.3f,"
                 "\"gbs_mean\":%.3f,\"stream_gbs\":%.3f,\"tflops\":%.5f,\"tflops_mean\":%.5f,"
                 "\"onednn_tflops\":%.5f,\"onednn_int8_tops\":%.5f,"
                 "\"onednn_bf16_impl\":\"%s\",\"onednn_int8_impl\":\"%s\",\"stream_samples\":%d,"
                 "\"calls\":%lld,%s,"
                 "\"threads\":%d,\"isa\":\"%s\"",
                 method_name(x->method), m->name, (long long)m->h, (long long)m->inter,
                 m->n_experts, m->top_k, x->layers, (long long)x->slots,
                 (unsigned long long)x->expert_bytes, (long long)x->t,
                 x->t <= 16 ? "decode" : "prefill", x->gbs, x->gbs_mean, x->stream_gbs,
                 x->tflops, x->tflops_mean, x->onednn_tflops, x->onednn_int8_tops,
                 x->onednn_tflops > 0 ? impl_bf16 : "", x->onednn_int8_tops > 0 ? impl_int8 : "",
                 x->stream_samples,
                 (long long)x->calls, clean_js, x->threads,
                 x->isa);
    }
    if (json && !json_close(json)) {
        fprintf(stderr, "kt-bench moe: error writing '%s'\n", json_path);
        rc = 1;
    }
    stream_buf_free(sb);
    clean_watch_free(&cw);
    team_free(team);
    free(io.x);
    free(io.out);
    free(io.ids);
    free(io.w);
    free(io.counts);
    free(io.slot_seen);
    free(rows);
    return rc;
}
