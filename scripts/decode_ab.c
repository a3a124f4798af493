/*
 * decode_ab: one-token MoE decode calls of several backends alternated in one
 * process, block by block, beside stream read passes, each call kept as
 * "clean" only when no thread of the process waited for a CPU during it (the
 * run_delay of /proc/self/task/TID/schedstat did not grow). On the shared 2-core
 * VM other processes take the cores for milliseconds at a time; a ~1 ms decode
 * call that lost a core reads as half speed, and two methods run a minute apart
 * see different neighbours. Alternating blocks of calls puts every backend
 * under the same neighbours, and the clean calls are what the backend does on
 * its cores. A developer's tool (public API only); the official figures come from
 * `kt-bench moe`.
 *
 * Build (from the repository root, after `ninja -C BUILD`):
 *   B=BUILD; gcc -O2 -Iinclude -I$B/include scripts/decode_ab.c -o decode_ab \
 *     -L$B/lib -lkt -Wl,-rpath,$PWD/$B/lib -lpthread -lm
 * Run:
 *   ./decode_ab SPEC...
 *   SPEC: gguf:FILE (LLAMAFILE on the file's routed experts) or rawint4 (random
 *   RAWINT4 weights of the first GGUF's shape and layer count; Qwen3-30B-A3B's,
 *   2 layers, without one), each optionally followed by ",NAME=VALUE..." set in
 *   the environment while that backend is created (knobs read at create time:
 *   KT_MOE_DECODE_*, KT_LF_REPACK, ...; not the kernels' cached ones).
 *   AB_ROUNDS (default 20) rounds, each AB_CALLS (16) calls of every backend in
 *   turn, then as many stream passes (3 ms apart, so the idle pools sleep);
 *   AB_TOKENS (1) tokens a call, AB_K (8) experts a token, AB_CLEAN_US (150)
 *   the most run-queue wait a clean call may have, AB_DEBUG=1 each call's GB/s
 *   and wait on stderr.
 *   The stream pass: 2 (the first backend's workers) pinned threads read the
 *   next 16 MiB window of a 256 MiB buffer (AVX2 loads, no prefetch), about a
 *   call's length, so that it is as often undisturbed.
 * Prints per backend: GB/s of expert bytes (distinct experts x expert bytes /
 * call time), the median over all calls and over the clean ones, against the
 * clean stream passes' median, and the median over rounds of each round's
 * clean median against the first backend's. A backend with
 * KT_MOE_DECODE_READ=1 beside gives the pool's own read ceiling.
 *
 * e.g. ./decode_ab gguf:q3_Q4_0.gguf rawint4 gguf:q3_Q4_0.gguf,KT_MOE_DECODE_READ=1
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>
#include <kt/moe.h>
#include "bench_read_loop.h"

#define MAX_B 8
#define MAX_TASKS 64

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    uint64_t *s = &rng_state;
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* ---- run_delay of every thread of the process ---------------------------- */

static int task_fd[MAX_TASKS], n_task;

static void tasks_open(void)
{
    for (int i = 0; i < n_task; i++)
        close(task_fd[i]);
    n_task = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d)) && n_task < MAX_TASKS) {
        if (e->d_name[0] == '.')
            continue;
        char p[300];
        snprintf(p, sizeof p, "/proc/self/task/%s/schedstat", e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd >= 0)
            task_fd[n_task++] = fd;
    }
    if (d)
        closedir(d);
}

/* ns the process's threads waited on a run queue, summed */
static uint64_t run_delay(void)
{
    uint64_t sum = 0;
    for (int i = 0; i < n_task; i++) {
        char b[128];
        ssize_t n = pread(task_fd[i], b, sizeof b - 1, 0);
        if (n <= 0)
            continue;
        b[n] = 0;
        unsigned long long run, wait;
        if (sscanf(b, "%llu %llu", &run, &wait) == 2)
            sum += wait;
    }
    return sum;
}

/* ---- stream: one read pass over a buffer by n pinned threads ------------- */

typedef struct stream {
    float *buf;
    size_t n;            /* floats */
    size_t win, at;      /* a pass reads floats [at, at + win), the next window next */
    int nth;
    pthread_t th[16];
    pthread_barrier_t go, end;
    volatile int stop;
    volatile float sink;
} stream;

typedef struct stream_arg {
    stream *s;
    int t;
} stream_arg;

static void *stream_main(void *p)
{
    stream_arg *a = p;
    stream *s = a->s;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a->t, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    size_t per = s->win / (size_t)s->nth;
    for (size_t w = 0; w < s->n; w += s->win) /* first touch by the reader */
        for (size_t i = 0; i < per; i++)
            s->buf[w + per * (size_t)a->t + i] = (float)(i & 7);
    for (;;) {
        pthread_barrier_wait(&s->go);
        if (s->stop)
            break;
        s->sink += read_loop(s->buf + s->at + per * (size_t)a->t, per);
        pthread_barrier_wait(&s->end);
    }
    return NULL;
}

static double stream_pass(stream *s)
{
    double t0 = now();
    pthread_barrier_wait(&s->go);
    pthread_barrier_wait(&s->end);
    double dt = now() - t0;
    s->at = (s->at + s->win) % s->n;
    return (double)s->win * 4 / dt * 1e-9;
}

/* ---- backends ------------------------------------------------------------- */

typedef struct bk {
    const char *spec;
    kt_moe_backend *moe;
    int layers[64], n_layers;
    uint64_t expert_bytes;
    double *all, *clean;  /* GB/s per call */
    int n_all, n_clean;
    double *round_med;    /* each round's clean median (0: none) */
} bk;

static void set_knobs(char *list, int set)
{
    for (char *kv = strtok(list, ","); kv; kv = strtok(NULL, ",")) {
        char *eq = strchr(kv, '=');
        if (!eq)
            continue;
        *eq = 0;
        if (set)
            setenv(kv, eq + 1, 1);
        else
            unsetenv(kv);
        *eq = '=';
    }
}

static void probe_layers(bk *b, int want)
{
    int32_t zero = 0, id[1] = {-1};
    float dummy[1] = {0};
    kt_moe_io io = KT_MOE_IO_INIT;
    io.n_tokens = &zero;
    io.top_k = 1;
    io.x = dummy;
    io.ids = id;
    io.w = dummy;
    io.out = dummy;
    io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
    b->n_layers = 0;
    for (int l = 0; l < 1024 && b->n_layers < want && b->n_layers < 64; l++)
        if (kt_moe_forward(b->moe, (uint32_t)l, &io) == KT_OK)
            b->layers[b->n_layers++] = l;
}

/* random RAWINT4 experts: int32 [out][in/8] nibbles, BF16 scales per 32 */
static int make_rawint4(bk *b, int H, int I, int E, int k, int L)
{
    size_t q[3] = {(size_t)I * H / 2, (size_t)I * H / 2, (size_t)H * I / 2};
    /* scales: one BF16 per 32 inputs, out * in / 16 bytes = q / 8 */
    size_t sc[3] = {q[0] / 8, q[1] / 8, q[2] / 8};
    size_t per = 0;
    for (int j = 0; j < 3; j++)
        per += q[j] + sc[j];
    size_t stride = (per + 4095) / 4096 * 4096, total = stride * (size_t)E * L;
    uint8_t *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return -1;
    madvise(base, total, MADV_HUGEPAGE);
    const void **ptr = calloc((size_t)6 * E * L, sizeof(void *));
    kt_moe_layer_weights *lw = calloc((size_t)L, sizeof *lw);
    if (!ptr || !lw)
        return -1;
    for (int l = 0; l < L; l++) {
        for (int e = 0; e < E; e++) {
            uint8_t *s = base + stride * ((size_t)l * E + e), *p = s;
            for (int j = 0; j < 3; j++) {
                ptr[((size_t)l * 6 + j) * E + e] = p;
                uint64_t *w = (uint64_t *)p;
                for (size_t i = 0; i < q[j] / 8; i++)
                    w[i] = rng();
                p += q[j];
            }
            for (int j = 0; j < 3; j++) {
                ptr[((size_t)l * 6 + 3 + j) * E + e] = p;
                uint16_t *h = (uint16_t *)p;
                for (size_t i = 0; i < sc[j] / 2; i++) /* BF16 +-[2^-7, 2^-6), positive */
                    h[i] = (uint16_t)(0x3c00u | (rng() & 0x7fu));
                p += sc[j];
            }
        }
        kt_moe_layer_weights one = KT_MOE_LAYER_WEIGHTS_INIT;
        one.gate = ptr + (size_t)l * 6 * E;
        one.up = one.gate + E;
        one.down = one.gate + 2 * (size_t)E;
        one.gate_scale = one.gate + 3 * (size_t)E;
        one.up_scale = one.gate + 4 * (size_t)E;
        one.down_scale = one.gate + 5 * (size_t)E;
        lw[l] = one;
    }
    kt_moe_desc d = KT_MOE_DESC_INIT;
    d.method = KT_METHOD_RAWINT4;
    d.hidden = (uint32_t)H;
    d.intermediate = (uint32_t)I;
    d.n_experts = (uint32_t)E;
    d.top_k = (uint32_t)k;
    kt_moe_options o = KT_MOE_OPTIONS_INIT;
    o.max_tokens = 16;
    if (kt_moe_backend_create(&b->moe, NULL, &d, lw, (uint32_t)L, &o) < 0)
        return -1;
    free(lw); /* the backend keeps the pointers' targets, not the tables */
    b->n_layers = L;
    for (int l = 0; l < L; l++)
        b->layers[l] = l;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    if (n <= 0)
        return 0;
    double *c = malloc((size_t)n * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

static int env_int(const char *name, int def)
{
    const char *e = getenv(name);
    return e && atoi(e) > 0 ? atoi(e) : def;
}

int main(int argc, char **argv)
{
    int rounds = env_int("AB_ROUNDS", 20), calls = env_int("AB_CALLS", 16);
    int T = env_int("AB_TOKENS", 1), k = env_int("AB_K", 8), dbg = env_int("AB_DEBUG", 0);
    /* a call is clean when its threads waited on run queues at most AB_CLEAN_US
     * in all (undisturbed calls wait 20-90 us on this VM: the wake-ups; calls that lost a core to another process 0.5-5 ms) */
    double clean_ns = 1e3 * env_int("AB_CLEAN_US", 150);
    int nb = argc - 1 < MAX_B ? argc - 1 : MAX_B;
    if (nb < 1) {
        fprintf(stderr, "usage: decode_ab gguf:FILE[,KNOB=V...] | rawint4[,KNOB=V...] ...\n");
        return 2;
    }
    static bk b[MAX_B];
    int H = 2048, I = 768, E = 128, L = 2;
    /* GGUF backends first: the RAWINT4 one takes their shape */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nb; i++) {
            char *spec = strdup(argv[i + 1]);
            char *knobs = strchr(spec, ',');
            if (knobs)
                *knobs++ = 0;
            bool gguf = !strncmp(spec, "gguf:", 5);
            if (gguf != (pass == 0))
                continue;
            b[i].spec = argv[i + 1];
            char *kcopy = knobs ? strdup(knobs) : NULL;
            if (kcopy)
                set_knobs(kcopy, 1);
            int rc;
            if (gguf) {
                kt_moe_options o = KT_MOE_OPTIONS_INIT;
                o.max_tokens = 16;
                rc = kt_moe_backend_create_from_gguf(&b[i].moe, NULL, spec + 5, (uint32_t)k, &o);
                if (rc >= 0) {
                    kt_moe_info info = KT_MOE_INFO_INIT;
                    kt_moe_backend_info(b[i].moe, &info);
                    H = (int)info.hidden, I = (int)info.intermediate, E = (int)info.n_experts;
                    probe_layers(&b[i], (int)info.n_layers);
                    L = b[i].n_layers;
                }
            } else if (!strcmp(spec, "rawint4")) {
                rc = make_rawint4(&b[i], H, I, E, k, L);
            } else {
                fprintf(stderr, "decode_ab: unknown spec '%s'\n", spec);
                return 2;
            }
            if (kcopy) {
                free(kcopy);
                kcopy = strdup(knobs);
                set_knobs(kcopy, 0);
                free(kcopy);
            }
            if (rc < 0) {
                fprintf(stderr, "decode_ab: %s: %s\n", argv[i + 1], kt_last_error());
                return 1;
            }
            kt_moe_info info = KT_MOE_INFO_INIT;
            kt_moe_backend_info(b[i].moe, &info);
            b[i].expert_bytes = info.expert_bytes;
            printf("%d: %s: %s, %d layers, %.2f MiB an expert, %d threads\n", i, argv[i + 1],
                   info.isa, b[i].n_layers, (double)info.expert_bytes / 1048576.0,
                   info.n_threads);
            free(spec);
        }
    int nth = 2;
    {
        kt_moe_info info = KT_MOE_INFO_INIT;
        kt_moe_backend_info(b[0].moe, &info);
        nth = info.n_threads > 0 && info.n_threads <= 16 ? info.n_threads : 2;
    }
    stream s = {0};
    s.nth = nth;
    /* 256 MiB (8x a 32 MiB L3) read 16 MiB a pass, window after window: passes
     * about as long as a decode call, so that as many of them run undisturbed */
    s.n = (size_t)256 << 20 >> 2;
    s.win = (size_t)16 << 20 >> 2;
    s.buf = mmap(NULL, s.n * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s.buf == MAP_FAILED)
        return 1;
    madvise(s.buf, s.n * 4, MADV_HUGEPAGE);
    pthread_barrier_init(&s.go, NULL, (unsigned)nth + 1);
    pthread_barrier_init(&s.end, NULL, (unsigned)nth + 1);
    static stream_arg sa[16];
    for (int t = 0; t < nth; t++) {
        sa[t] = (stream_arg){&s, t};
        pthread_create(&s.th[t], NULL, stream_main, &sa[t]);
    }
    tasks_open(); /* every thread exists now */

    float *x = malloc((size_t)T * H * sizeof(float)), *out = malloc((size_t)T * H * sizeof(float));
    float *w = malloc((size_t)T * k * sizeof(float));
    int32_t *ids = malloc((size_t)T * k * sizeof(int32_t));
    char *seen = calloc((size_t)E, 1);
    for (int i = 0; i < T * H; i++)
        x[i] = (float)((int)(rng() % 2001) - 1000) * 1e-3f;
    int32_t nt = T;
    kt_moe_io io = KT_MOE_IO_INIT;
    io.flags = KT_MOE_IO_X_F32 | KT_MOE_IO_OUT_F32;
    io.n_tokens = &nt;
    io.top_k = (uint32_t)k;
    io.x = x;
    io.ids = ids;
    io.w = w;
    io.out = out;
    for (int i = 0; i < nb; i++) {
        b[i].all = malloc((size_t)rounds * calls * sizeof(double));
        b[i].clean = malloc((size_t)rounds * calls * sizeof(double));
        b[i].round_med = calloc((size_t)rounds, sizeof(double));
    }
    double *st_all = malloc((size_t)rounds * calls * sizeof(double)),
           *st_clean = malloc((size_t)rounds * calls * sizeof(double));
    int n_st = 0, n_stc = 0;
    for (int i = 0; i < nb; i++) /* warm-up: every layer once */
        for (int l = 0; l < b[i].n_layers; l++) {
            for (int j = 0; j < T * k; j++)
                ids[j] = (int32_t)(j % E), w[j] = 1.0f / (float)k;
            kt_moe_forward(b[i].moe, (uint32_t)b[i].layers[l], &io);
        }
    uint64_t call_no = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nb; i++) {
            usleep(3000);
            double *rc = malloc((size_t)calls * sizeof(double));
            int n_rc = 0;
            for (int c = 0; c < calls; c++, call_no++) {
                memset(seen, 0, (size_t)E);
                int distinct = 0;
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < k; j++) {
                        int e, dup;
                        do {
                            e = (int)(rng() % (uint64_t)E);
                            dup = 0;
                            for (int q = 0; q < j; q++)
                                dup |= ids[t * k + q] == e;
                        } while (dup);
                        ids[t * k + j] = e;
                        w[t * k + j] = 1.0f / (float)k;
                        distinct += !seen[e];
                        seen[e] = 1;
                    }
                int layer = b[i].layers[call_no % (uint64_t)b[i].n_layers];
                uint64_t d0 = run_delay();
                double t0 = now();
                if (kt_moe_forward(b[i].moe, (uint32_t)layer, &io) < 0) {
                    fprintf(stderr, "decode_ab: %s\n", kt_last_error());
                    return 1;
                }
                double dt = now() - t0;
                uint64_t d1 = run_delay();
                double gbs = (double)distinct * (double)b[i].expert_bytes / dt * 1e-9;
                b[i].all[b[i].n_all++] = gbs;
                if (dbg)
                    fprintf(stderr, "%d %.3f %.1f\n", i, gbs, (double)(d1 - d0) * 1e-3);
                if ((double)(d1 - d0) <= clean_ns) {
                    b[i].clean[b[i].n_clean++] = gbs;
                    rc[n_rc++] = gbs;
                }
            }
            b[i].round_med[r] = median(rc, n_rc);
            free(rc);
        }
        usleep(3000);
        for (int c = 0; c < calls; c++) {
            uint64_t d0 = run_delay();
            double g = stream_pass(&s);
            uint64_t d1 = run_delay();
            if (dbg)
                fprintf(stderr, "stream %.3f %.1f\n", g, (double)(d1 - d0) * 1e-3);
            st_all[n_st++] = g;
            if ((double)(d1 - d0) <= clean_ns)
                st_clean[n_stc++] = g;
        }
    }
    double sc = median(st_clean, n_stc);
    printf("stream read (%d threads, 16 MiB windows of 256 MiB): median %.2f GB/s of %d "
           "passes, clean %.2f of %d\n", nth, median(st_all, n_st), n_st, sc, n_stc);
    for (int i = 0; i < nb; i++) {
        double *ratio = malloc((size_t)rounds * sizeof(double));
        int n_ratio = 0;
        for (int r = 0; r < rounds; r++)
            if (b[i].round_med[r] > 0 && b[0].round_med[r] > 0)
                ratio[n_ratio++] = b[i].round_med[r] / b[0].round_med[r];
        double mc = median(b[i].clean, b[i].n_clean);
        printf("%d: %-40s all %6.2f GB/s (%d)  clean %6.2f GB/s (%d) = %.2f x clean stream"
               "  vs 0: %.3f (median of %d rounds)\n",
               i, b[i].spec, median(b[i].all, b[i].n_all), b[i].n_all, mc, b[i].n_clean,
               sc > 0 ? mc / sc : 0.0, median(ratio, n_ratio), n_ratio);
        free(ratio);
    }
    s.stop = 1;
    pthread_barrier_wait(&s.go);
    for (int t = 0; t < nth; t++)
        pthread_join(s.th[t], NULL);
    for (int i = 0; i < nb; i++)
        kt_moe_backend_free(b[i].moe);
    return 0;
}
