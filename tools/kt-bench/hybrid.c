/* kt-bench hybrid: the CPU MoE backend driven the way the GPU runtime drives
 * it, next to plain back-to-back calls, so that the CPU side of a hybrid step
 * can be studied without a GPU.
 *
 * The GPU runtime (lib/gpu/gpu.c) calls kt_moe_submit and kt_moe_wait from
 * CUDA's host-function thread (unpinned, not the thread that created the
 * backend), once per MoE layer, with F32 activations and outputs, an expert
 * mask that skips the GPU-resident experts, and idle gaps between layers while
 * the GPU runs attention and the dense parts; the weights are read in place
 * from the checkpoint's MAP_PRIVATE mapping. Each row here changes one of
 * those conditions:
 *
 *   forward   kt_moe_forward back to back from the creating thread (kt-bench
 *             moe's way)
 *   hostfn    submit + wait from a second thread, sleeping GAP us before each
 *             layer (the GPU's share of the step)
 *
 * over weights in anonymous memory with transparent huge pages (anon), in
 * anonymous 4 KB pages (anon4k), or in a file under --dir written first and
 * then mapped MAP_PRIVATE read-only as libkt's safetensors reader maps it
 * (file), with each activation precision. GB/s counts the distinct CPU-side
 * expert bytes a call reads over the time from submit to done (as
 * KT_GPU_TRACE counts it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>

#include "../common/opt.h"
#include "bench.h"

bool bench_parse_list(const char *flag, const char *text, int64_t lo, int64_t hi,
                      int64_t *vals, int *count, int max);

enum { MEM_ANON = 1, MEM_ANON4K = 2, MEM_FILE = 4 };
#define N_SETS 16 /* routing sets cycled per (T, layer) */

typedef struct hy_cfg {
    int64_t H, I, E, k;
    int64_t layers;
    int64_t tokens[8], gaps[8];
    int n_tokens, n_gaps;
    double mask;        /* fraction of each layer's experts skipped (the GPU's) */
    int method;         /* KT_METHOD_BF16 or KT_METHOD_FP8 */
    int precisions[3];
    int n_prec;
    int memory;         /* MEM_* bits */
    const char *dir;
    int threads;
    double min_time;
    int caller_cpu;     /* >= 0: the calling thread pinned there (an inherited mask) */
    int spinner_cpu;    /* >= 0: a thread spinning there through every call */
} hy_cfg;

/* One expert's pieces inside the arena, each 64-byte aligned. */
typedef struct hy_layout {
    size_t w_in, w_out;    /* gate / up bytes, down bytes */
    size_t s_in, s_out;    /* FP8 scale bytes (0 for BF16) */
    size_t expert;         /* stride of one expert */
} hy_layout;

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

static hy_layout layout_of(const hy_cfg *c)
{
    hy_layout L = {0};
    size_t esz = c->method == KT_METHOD_FP8 ? 1 : 2;
    L.w_in = al64((size_t)c->I * (size_t)c->H * esz);
    L.w_out = al64((size_t)c->H * (size_t)c->I * esz);
    if (c->method == KT_METHOD_FP8) {
        size_t bi = (size_t)(c->I + 127) / 128, bh = (size_t)(c->H + 127) / 128;
        L.s_in = al64(bi * bh * sizeof(float));
        L.s_out = al64(bh * bi * sizeof(float));
    }
    L.expert = 2 * L.w_in + L.w_out + 2 * L.s_in + L.s_out;
    return L;
}

/* Small random weights: BF16 of magnitude below 2^-4, FP8 E4M3 codes without
 * NaN (bit 6 clear), scales 2^-6. */
static void fill_arena(uint8_t *a, size_t bytes, const hy_cfg *c, const hy_layout *L)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    size_t n_exp = bytes / L->expert;
    for (size_t e = 0; e < n_exp; e++) {
        uint8_t *p = a + e * L->expert;
        size_t wbytes = 2 * L->w_in + L->w_out;
        if (c->method == KT_METHOD_FP8) {
            for (size_t i = 0; i + 8 <= wbytes; i += 8) {
                uint64_t r = bench_rng(&s) & 0xBFBFBFBFBFBFBFBFull;
                memcpy(p + i, &r, 8);
            }
            float *sc = (float *)(p + wbytes);
            for (size_t i = 0; i < (2 * L->s_in + L->s_out) / sizeof(float); i++)
                sc[i] = 1.0f / 64.0f;
        } else {
            for (size_t i = 0; i + 8 <= wbytes; i += 8) {
                uint64_t r = bench_rng(&s);
                /* four BF16: sign, exponent 0x38..0x3b << 7 (2^-15 .. 2^-4), mantissa */
                uint64_t v = 0;
                for (int j = 0; j < 4; j++) {
                    uint16_t h = (uint16_t)(r >> (16 * j));
                    uint16_t b = (uint16_t)((h & 0x8000) | ((0x70 + (h >> 7 & 0xb)) << 7) |
                                            (h & 0x7f));
                    v |= (uint64_t)b << (16 * j);
                }
                memcpy(p + i, &v, 8);
            }
        }
    }
}

typedef struct hy_arena {
    uint8_t *base;
    size_t bytes, map_bytes;
    int kind;
} hy_arena;

static bool arena_make(hy_arena *A, int kind, const hy_cfg *c, const hy_layout *L)
{
    memset(A, 0, sizeof *A);
    A->kind = kind;
    A->bytes = (size_t)c->layers * (size_t)c->E * L->expert;
    if (kind != MEM_FILE) {
        void *p = mmap(NULL, A->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "kt-bench hybrid: %zu MiB: %s\n", A->bytes >> 20, strerror(errno));
            return false;
        }
        madvise(p, A->bytes, kind == MEM_ANON ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        A->base = p;
        A->map_bytes = A->bytes;
        fill_arena(A->base, A->bytes, c, L);
        return true;
    }
    char path[1100];
    snprintf(path, sizeof path, "%.1000s/kt-hybrid-%d.bin", c->dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        fprintf(stderr, "kt-bench hybrid: %s: %s\n", path, strerror(errno));
        return false;
    }
    bool ok = ftruncate(fd, (off_t)A->bytes) == 0;
    void *w = ok ? mmap(NULL, A->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (w != MAP_FAILED) {
        fill_arena(w, A->bytes, c, L);
        munmap(w, A->bytes);
        /* read as libkt's safetensors reader maps a checkpoint */
        void *r = mmap(NULL, A->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (r != MAP_FAILED) {
            A->base = r;
            A->map_bytes = A->bytes;
        }
    }
    int err = errno;
    close(fd);
    unlink(path); /* the pages stay until munmap */
    if (!A->base) {
        fprintf(stderr, "kt-bench hybrid: %s (%zu MiB): %s\n", path, A->bytes >> 20,
                strerror(err));
        return false;
    }
    return true;
}

static void arena_free(hy_arena *A)
{
    if (A->base)
        munmap(A->base, A->map_bytes);
    A->base = NULL;
}

static const char *mem_name(int kind)
{
    return kind == MEM_ANON ? "anon" : kind == MEM_ANON4K ? "anon4k" : "file";
}

static const char *prec_name(int p)
{
    return p == KT_MOE_PREC_BF16X2 ? "bf16x2" : p == KT_MOE_PREC_F32 ? "f32" : "default";
}

/* Per-layer pointer tables into the arena. */
typedef struct hy_tables {
    const void **ptr; /* [layers][6][E] */
    kt_moe_layer_weights *lw;
} hy_tables;

static bool tables_make(hy_tables *t, const hy_arena *A, const hy_cfg *c, const hy_layout *L)
{
    size_t E = (size_t)c->E;
    t->ptr = calloc((size_t)c->layers * 6 * E, sizeof *t->ptr);
    t->lw = calloc((size_t)c->layers, sizeof *t->lw);
    if (!t->ptr || !t->lw)
        return false;
    bool fp8 = c->method == KT_METHOD_FP8;
    for (int64_t l = 0; l < c->layers; l++) {
        const void **p = t->ptr + (size_t)l * 6 * E;
        for (size_t e = 0; e < E; e++) {
            const uint8_t *x = A->base + ((size_t)l * E + e) * L->expert;
            p[e] = x;
            p[E + e] = x + L->w_in;
            p[2 * E + e] = x + 2 * L->w_in;
            const uint8_t *s = x + 2 * L->w_in + L->w_out;
            p[3 * E + e] = s;
            p[4 * E + e] = s + L->s_in;
            p[5 * E + e] = s + 2 * L->s_in;
        }
        kt_moe_layer_weights w = KT_MOE_LAYER_WEIGHTS_INIT;
        w.gate = p;
        w.up = p + E;
        w.down = p + 2 * E;
        if (fp8) {
            w.gate_scale = p + 3 * E;
            w.up_scale = p + 4 * E;
            w.down_scale = p + 5 * E;
        }
        t->lw[l] = w;
    }
    return true;
}

static void tables_free(hy_tables *t)
{
    free(t->ptr);
    free(t->lw);
}

/* Inputs of one token count: x and out F32 (as the GPU runtime passes them),
 * N_SETS routing sets per layer, the CPU bytes each set reads. */
typedef struct hy_inputs {
    int32_t T;
    float *x, *out, *w;
    int32_t *ids;     /* [layers][N_SETS][T][k] */
    double *bytes;    /* [layers][N_SETS] */
} hy_inputs;

static bool inputs_make(hy_inputs *in, const hy_cfg *c, int32_t T, size_t expert_bytes,
                        int n_gpu)
{
    size_t H = (size_t)c->H, k = (size_t)c->k, L = (size_t)c->layers;
    in->T = T;
    in->x = malloc(sizeof(float) * (size_t)T * H);
    in->out = malloc(sizeof(float) * (size_t)T * H);
    in->w = malloc(sizeof(float) * (size_t)T * k);
    in->ids = malloc(sizeof(int32_t) * L * N_SETS * (size_t)T * k);
    in->bytes = calloc(L * N_SETS, sizeof(double));
    uint8_t *seen = calloc((size_t)c->E, 1);
    if (!in->x || !in->out || !in->w || !in->ids || !in->bytes || !seen) {
        free(seen);
        return false;
    }
    uint64_t s = 12345 + (uint64_t)T;
    for (size_t i = 0; i < (size_t)T * H; i++)
        in->x[i] = (float)((double)(bench_rng(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    for (size_t i = 0; i < (size_t)T * k; i++)
        in->w[i] = 1.0f / (float)k;
    for (size_t set = 0; set < L * N_SETS; set++) {
        int32_t *ids = in->ids + set * (size_t)T * k;
        memset(seen, 0, (size_t)c->E);
        int distinct = 0;
        for (int32_t t = 0; t < T; t++)
            for (size_t j = 0; j < k; j++) {
                int32_t e;
                bool dup;
                do { /* k distinct experts per token */
                    e = (int32_t)(bench_rng(&s) % (uint64_t)c->E);
                    dup = false;
                    for (size_t q = 0; q < j; q++)
                        dup |= ids[(size_t)t * k + q] == e;
                } while (dup);
                ids[(size_t)t * k + j] = e;
                if (e >= n_gpu && !seen[e]) {
                    seen[e] = 1;
                    distinct++;
                }
            }
        in->bytes[set] = (double)distinct * (double)expert_bytes;
    }
    free(seen);
    return true;
}

static void inputs_free(hy_inputs *in)
{
    free(in->x);
    free(in->out);
    free(in->w);
    free(in->ids);
    free(in->bytes);
}

typedef struct hy_run {
    kt_moe_backend *moe;
    const hy_cfg *c;
    const hy_inputs *in;
    int64_t gap_us;      /* < 0: kt_moe_forward from the calling thread */
    double seconds;      /* submit to done, summed */
    double bytes;
    int64_t calls;
    int status;
} hy_run;

static void sleep_us(int64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Steps over every layer until min_time of CPU time is summed (at least 3
 * steps; the first step is a warm-up and not counted). */
static void *run_steps(void *p)
{
    hy_run *r = p;
    const hy_cfg *c = r->c;
    const hy_inputs *in = r->in;
    int32_t T = in->T;
    size_t k = (size_t)c->k;
    kt_moe_io io = KT_MOE_IO_INIT;
    io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
    io.n_tokens = &T;
    io.top_k = (uint32_t)k;
    io.x = in->x;
    io.w = in->w;
    io.out = in->out;
    double t_start = bench_now();
    for (int64_t step = 0;; step++) {
        int set = (int)(step % N_SETS);
        for (int64_t l = 0; l < c->layers; l++) {
            size_t si = (size_t)l * N_SETS + (size_t)set;
            io.ids = in->ids + si * (size_t)T * k;
            if (r->gap_us > 0)
                sleep_us(r->gap_us);
            double t0 = bench_now();
            kt_status st;
            if (r->gap_us < 0) {
                st = kt_moe_forward(r->moe, (uint32_t)l, &io);
            } else {
                st = kt_moe_submit(r->moe, (uint32_t)l, &io);
                if (st >= 0)
                    st = kt_moe_wait(r->moe, 0);
            }
            double t1 = bench_now();
            if (st < 0) {
                fprintf(stderr, "kt-bench hybrid: %s\n", kt_last_error());
                r->status = -1;
                return NULL;
            }
            if (step > 0) {
                r->seconds += t1 - t0;
                r->bytes += in->bytes[si];
                r->calls++;
            }
        }
        if (step >= 3 && (r->seconds >= c->min_time || bench_now() - t_start > 20 * c->min_time))
            break;
    }
    return NULL;
}

/* Every row's calls come from a thread started for it (CUDA's host-function
 * thread is not the one that created the backend), pinned to --caller-cpu if
 * given: a thread inherits its creator's CPU mask, so a process whose main
 * thread was pinned (kt-bench's OpenMP yardstick pinned it to the first CPU)
 * starts CUDA's threads on that one CPU. */
/* A thread that never yields, pinned to one CPU: what a host thread waiting in
 * the CUDA driver's default spin schedule is to the core it runs on. */
typedef struct hy_spinner {
    int cpu;
    _Atomic int stop;
    pthread_t th;
} hy_spinner;

static void *spin_main(void *p)
{
    hy_spinner *s = p;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(s->cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed))
        ;
    return NULL;
}

static bool measure(hy_run *r)
{
    hy_spinner sp = {r->c->spinner_cpu, 0, 0};
    bool spinning = sp.cpu >= 0 && pthread_create(&sp.th, NULL, spin_main, &sp) == 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (r->c->caller_cpu >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(r->c->caller_cpu, &one);
        pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    }
    pthread_t th;
    int rc = pthread_create(&th, &attr, run_steps, r);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        fprintf(stderr, "kt-bench hybrid: pthread_create failed: %s\n", strerror(rc));
        if (spinning) {
            atomic_store(&sp.stop, 1);
            pthread_join(sp.th, NULL);
        }
        return false;
    }
    pthread_join(th, NULL);
    if (spinning) {
        atomic_store(&sp.stop, 1);
        pthread_join(sp.th, NULL);
    }
    return r->status == 0 && r->calls > 0;
}

static int run_memory(const hy_cfg *c, int kind, const hy_layout *L, double stream_gbs,
                      bench_json *json)
{
    double t0 = bench_now();
    hy_arena A;
    if (!arena_make(&A, kind, c, L))
        return 1;
    hy_tables tab = {0};
    int rc = 0;
    if (!tables_make(&tab, &A, c, L)) {
        fprintf(stderr, "kt-bench hybrid: out of memory\n");
        arena_free(&A);
        return 1;
    }
    printf("# %s: %.2f GiB of weights in %.1f s\n", mem_name(kind),
           (double)A.bytes / 1073741824.0, bench_now() - t0);
    int n_gpu = (int)(c->mask * (double)c->E + 0.5);
    uint8_t *mask = calloc((size_t)c->E, 1);
    for (int e = 0; e < n_gpu && mask; e++)
        mask[e] = 1; /* the GPU runtime keeps the first experts */
    size_t ebytes = 2 * (L->w_in + L->s_in) + L->w_out + L->s_out;
    int64_t max_t = 1;
    for (int i = 0; i < c->n_tokens; i++)
        max_t = c->tokens[i] > max_t ? c->tokens[i] : max_t;
    for (int pi = 0; pi < c->n_prec && mask && rc == 0; pi++) {
        kt_moe_desc d = KT_MOE_DESC_INIT;
        d.method = c->method;
        d.hidden = (uint32_t)c->H;
        d.intermediate = (uint32_t)c->I;
        d.n_experts = (uint32_t)c->E;
        d.top_k = (uint32_t)c->k;
        kt_moe_options mo = KT_MOE_OPTIONS_INIT;
        mo.n_threads = c->threads;
        mo.max_tokens = (int32_t)(max_t < 512 ? max_t : 512);
        mo.act_precision = c->precisions[pi];
        kt_moe_backend *moe = NULL;
        if (kt_moe_backend_create(&moe, NULL, &d, tab.lw, (uint32_t)c->layers, &mo) < 0) {
            fprintf(stderr, "kt-bench hybrid: %s\n", kt_last_error());
            rc = 1;
            break;
        }
        for (int64_t l = 0; l < c->layers; l++)
            kt_moe_set_expert_mask(moe, (uint32_t)l, mask);
        kt_moe_info info = KT_MOE_INFO_INIT;
        kt_moe_backend_info(moe, &info);
        for (int ti = 0; ti < c->n_tokens && rc == 0; ti++) {
            hy_inputs in = {0};
            if (!inputs_make(&in, c, (int32_t)c->tokens[ti], ebytes, n_gpu)) {
                fprintf(stderr, "kt-bench hybrid: out of memory\n");
                inputs_free(&in);
                rc = 1;
                break;
            }
            double base = 0;
            for (int gi = -1; gi < c->n_gaps; gi++) {
                hy_run r = {moe, c, &in, gi < 0 ? -1 : c->gaps[gi], 0, 0, 0, 0};
                if (!measure(&r)) {
                    rc = 1;
                    break;
                }
                double gbs = r.bytes / r.seconds / 1e9;
                double ms = r.seconds / (double)r.calls * 1e3;
                if (gi < 0)
                    base = gbs;
                char mode[32];
                if (gi < 0)
                    snprintf(mode, sizeof mode, "forward");
                else
                    snprintf(mode, sizeof mode, "hostfn gap %lld", (long long)c->gaps[gi]);
                printf("%-7s %-8s %-22s %5d %-18s %9.2f %9.3f %7.2f %7.2f\n", mem_name(kind),
                       prec_name(c->precisions[pi]), info.isa ? info.isa : "?",
                       (int)c->tokens[ti], mode, gbs, ms, base > 0 ? gbs / base : 0.0,
                       stream_gbs > 0 ? gbs / stream_gbs : 0.0);
                fflush(stdout);
                json_row(json,
                         "\"bench\":\"hybrid\",\"memory\":\"%s\",\"precision\":\"%s\","
                         "\"isa\":\"%s\",\"T\":%d,\"gap_us\":%lld,\"gbs\":%.3f,"
                         "\"ms_per_layer\":%.4f,\"stream_gbs\":%.2f",
                         mem_name(kind), prec_name(c->precisions[pi]),
                         info.isa ? info.isa : "?", (int)c->tokens[ti],
                         (long long)(gi < 0 ? -1 : c->gaps[gi]), gbs, ms, stream_gbs);
            }
            inputs_free(&in);
        }
        kt_moe_backend_free(moe);
    }
    free(mask);
    tables_free(&tab);
    arena_free(&A);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench hybrid [OPTIONS]\n"
            "\n"
            "The CPU MoE backend driven as the GPU runtime drives it (submit + wait from a\n"
            "second thread with idle gaps, F32 activations, an expert mask, weights in a\n"
            "mapped file) next to back-to-back kt_moe_forward calls. GB/s: distinct CPU\n"
            "expert bytes of a call over its submit-to-done time.\n"
            "\n"
            "  --shape H,I,E,k      (default 2048,768,128,8: Qwen3-30B-A3B)\n"
            "  --method bf16|fp8    (default bf16)\n"
            "  --layers N           MoE layers in the backend (default 2)\n"
            "  --tokens LIST        tokens a call (default 1,128)\n"
            "  --gaps LIST          idle microseconds before each layer's submit (default\n"
            "                       0,100,1000)\n"
            "  --mask F             fraction of experts skipped as GPU-resident (default 0.5)\n"
            "  --precision LIST     default,bf16x2,f32 (default: default,bf16x2)\n"
            "  --memory LIST        anon,anon4k,file (default: anon,file)\n"
            "  --dir DIR            where the file is written (default /dev/shm)\n"
            "  --threads N          backend workers (default: physical cores - 1, as the\n"
            "                       engine)\n"
            "  --min-time S         seconds of calls a row (default 1)\n"
            "  --caller-cpu N       pin the calling thread to CPU N (default: unpinned)\n"
            "  --spinner N          a thread spinning on CPU N through the calls (a host\n"
            "                       thread in the CUDA driver's spin wait)\n"
            "  --stream-size MiB    stream yardstick buffer (default 1024; 0: skip)\n"
            "  --json FILE          rows as JSON\n");
}

static bool parse_names(const char *flag, const char *v, const char *const *names,
                        const int *vals, int n_names, int *out, int *count, int max)
{
    char buf[128];
    if (strlen(v) >= sizeof buf)
        return false;
    strcpy(buf, v);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int j = 0;
        while (j < n_names && strcmp(tok, names[j]) != 0)
            j++;
        if (j == n_names || n == max) {
            fprintf(stderr, "kt-bench hybrid: %s: '%s' is not one of", flag, tok);
            for (int q = 0; q < n_names; q++)
                fprintf(stderr, " %s", names[q]);
            fprintf(stderr, "\n");
            return false;
        }
        out[n++] = vals[j];
    }
    *count = n;
    return n > 0;
}

int cmd_hybrid(int argc, char **argv)
{
    hy_cfg c = {2048, 768, 128, 8, 2, {1, 128}, {0, 100, 1000}, 2, 3, 0.5, KT_METHOD_BF16,
                {KT_MOE_PREC_DEFAULT, KT_MOE_PREC_BF16X2}, 2, MEM_ANON | MEM_FILE, "/dev/shm",
                0, 1.0, -1, -1};
    int64_t stream_mib = 1024, threads = c.threads;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--shape", true, &v, &bad)) {
            int64_t d[4];
            int n = 0;
            if (bad || !bench_parse_list("--shape", v, 1, 1 << 20, d, &n, 4) || n != 4 ||
                d[3] > d[2] || d[3] > 64 || d[0] % 64 || d[1] % 64) {
                fprintf(stderr, "kt-bench hybrid: --shape H,I,E,k (H, I multiples of 64, "
                                "k <= E, k <= 64)\n");
                return 2;
            }
            c.H = d[0], c.I = d[1], c.E = d[2], c.k = d[3];
        } else if (opt_match(argc, argv, &i, "--method", true, &v, &bad)) {
            static const char *const nm[] = {"bf16", "fp8"};
            static const int vl[] = {KT_METHOD_BF16, KT_METHOD_FP8};
            int n = 0;
            if (bad || !parse_names("--method", v, nm, vl, 2, &c.method, &n, 1))
                return 2;
        } else if (opt_match(argc, argv, &i, "--layers", true, &v, &bad)) {
            if (bad || !opt_parse_i64(BENCH_TOOL, "--layers", v, 1, 256, &c.layers))
                return 2;
        } else if (opt_match(argc, argv, &i, "--tokens", true, &v, &bad)) {
            if (bad || !bench_parse_list("--tokens", v, 1, 8192, c.tokens, &c.n_tokens, 8))
                return 2;
        } else if (opt_match(argc, argv, &i, "--gaps", true, &v, &bad)) {
            if (bad || !bench_parse_list("--gaps", v, 0, 1000000, c.gaps, &c.n_gaps, 8))
                return 2;
        } else if (opt_match(argc, argv, &i, "--mask", true, &v, &bad)) {
            if (bad || !opt_parse_f64(BENCH_TOOL, "--mask", v, 0.0, 0.99, &c.mask))
                return 2;
        } else if (opt_match(argc, argv, &i, "--precision", true, &v, &bad)) {
            static const char *const nm[] = {"default", "bf16x2", "f32"};
            static const int vl[] = {KT_MOE_PREC_DEFAULT, KT_MOE_PREC_BF16X2, KT_MOE_PREC_F32};
            if (bad || !parse_names("--precision", v, nm, vl, 3, c.precisions, &c.n_prec, 3))
                return 2;
        } else if (opt_match(argc, argv, &i, "--memory", true, &v, &bad)) {
            static const char *const nm[] = {"anon", "anon4k", "file"};
            static const int vl[] = {MEM_ANON, MEM_ANON4K, MEM_FILE};
            int m[3], n = 0;
            if (bad || !parse_names("--memory", v, nm, vl, 3, m, &n, 3))
                return 2;
            c.memory = 0;
            for (int j = 0; j < n; j++)
                c.memory |= m[j];
        } else if (opt_match(argc, argv, &i, "--dir", true, &v, &bad)) {
            if (bad)
                return 2;
            c.dir = v;
        } else if (bench_common_opt(argc, argv, &i, &threads, &json_path, &bad)) {
            if (bad)
                return 2;
        } else if (opt_match(argc, argv, &i, "--min-time", true, &v, &bad)) {
            if (bad || !opt_parse_f64(BENCH_TOOL, "--min-time", v, 0.001, 600, &c.min_time))
                return 2;
        } else if (opt_match(argc, argv, &i, "--caller-cpu", true, &v, &bad)) {
            int64_t n = 0;
            if (bad || !opt_parse_i64(BENCH_TOOL, "--caller-cpu", v, 0, CPU_SETSIZE - 1, &n))
                return 2;
            c.caller_cpu = (int)n;
        } else if (opt_match(argc, argv, &i, "--spinner", true, &v, &bad)) {
            int64_t n = 0;
            if (bad || !opt_parse_i64(BENCH_TOOL, "--spinner", v, 0, CPU_SETSIZE - 1, &n))
                return 2;
            c.spinner_cpu = (int)n;
        } else if (opt_i64(BENCH_TOOL, argc, argv, &i, "--stream-size", 0, 1 << 20, &stream_mib,
                           &bad)) {
            if (bad)
                return 2;
        } else {
            if (!bad)
                fprintf(stderr, "kt-bench hybrid: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    c.threads = (int)threads;
    bench_hw hw;
    bench_hw_detect(&hw);
    if (c.threads == 0)
        c.threads = hw.physical_cores > 1 ? hw.physical_cores - 1 : 1;
    bench_hw_print(stdout, &hw, c.threads);
    hy_layout L = layout_of(&c);
    double stream_gbs = 0;
    if (stream_mib > 0) {
        bench_team *team = team_create(c.threads);
        stream_result sr;
        if (team && stream_measure(team, (uint64_t)stream_mib << 20, 3, true, &sr))
            stream_gbs = sr.read_gbs;
        team_free(team);
    }
    printf("# hybrid: H %lld I %lld E %lld k %lld, %s, %lld layers, %.1f MB an expert, %d of "
           "%lld experts masked (GPU), %d workers; stream read %.1f GB/s (%d threads)\n",
           (long long)c.H, (long long)c.I, (long long)c.E, (long long)c.k,
           c.method == KT_METHOD_FP8 ? "FP8" : "BF16", (long long)c.layers,
           (double)L.expert / 1e6, (int)(c.mask * (double)c.E + 0.5), (long long)c.E,
           c.threads, stream_gbs, c.threads);
    if (c.caller_cpu >= 0)
        printf("# the calling thread pinned to CPU %d\n", c.caller_cpu);
    if (c.spinner_cpu >= 0)
        printf("# a thread spinning on CPU %d through the calls\n", c.spinner_cpu);
    printf("%-7s %-8s %-22s %5s %-18s %9s %9s %7s %7s\n", "memory", "act", "kernels", "T",
           "caller", "GB/s", "ms/layer", "x fwd", "x strm");
    fflush(stdout);
    bench_json *json = json_path ? json_open(json_path, &hw, c.threads) : NULL;
    int rc = 0;
    static const int kinds[] = {MEM_ANON, MEM_ANON4K, MEM_FILE};
    for (int i = 0; i < 3 && rc == 0; i++)
        if (c.memory & kinds[i])
            rc = run_memory(&c, kinds[i], &L, stream_gbs, json);
    if (json && !json_close(json))
        rc = 1;
    return rc;
}
