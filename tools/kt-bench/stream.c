/* kt-bench stream: the machine's memory bandwidth, measured by pinned threads
 * over buffers far larger than the last-level cache (the decode yardstick). */
#include "bench.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "opt.h"

/* Each thread owns one contiguous slice of every array; 4 KiB-aligned. */
typedef struct stream_job {
    float *a, *b, *c;
    size_t n;               /* floats per array                  */
    int op;                 /* 0 read, 1 copy, 2 triad, 3 init   */
    const char *path;
    double sink[256];       /* per-thread sums (keeps loads live) */
    double secs[256];       /* read: per-thread seconds of its own slice */
} stream_job;

static void slice(size_t n, int tid, int nt, size_t *lo, size_t *hi)
{
    /* 128-float (512-byte) granularity so vector loops need no tail per slice. */
    size_t chunks = n / 128;
    *lo = chunks * (size_t)tid / (size_t)nt * 128;
    *hi = chunks * (size_t)(tid + 1) / (size_t)nt * 128;
}

/* s0..s7 += the 8 vectors of w floats at a + i: loads only; 8 independent accumulators
 * hide the add latency. One body for every vector width (add, load: its intrinsics). */
#define ADD_8_VECTORS(add, load, w)                                                    \
    do {                                                                               \
        s0 = add(s0, load(a + i));                                                     \
        s1 = add(s1, load(a + i + (w)));                                               \
        s2 = add(s2, load(a + i + 2 * (w)));                                           \
        s3 = add(s3, load(a + i + 3 * (w)));                                           \
        s4 = add(s4, load(a + i + 4 * (w)));                                           \
        s5 = add(s5, load(a + i + 5 * (w)));                                           \
        s6 = add(s6, load(a + i + 6 * (w)));                                           \
        s7 = add(s7, load(a + i + 7 * (w)));                                           \
    } while (0)

/* ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) */
#define SUM_8_VECTORS(add) add(add(add(s0, s1), add(s2, s3)), add(add(s4, s5), add(s6, s7)))

/* sum += a[i] */
__attribute__((target("avx512f"))) static double read_avx512(const float *a, size_t n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    __m512 s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (size_t i = 0; i < n; i += 128)
        ADD_8_VECTORS(_mm512_add_ps, _mm512_load_ps, 16);
    return _mm512_reduce_add_ps(SUM_8_VECTORS(_mm512_add_ps));
}

__attribute__((target("avx2"))) static double read_avx2(const float *a, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    __m256 s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (size_t i = 0; i < n; i += 64)
        ADD_8_VECTORS(_mm256_add_ps, _mm256_load_ps, 8);
    s0 = SUM_8_VECTORS(_mm256_add_ps);
    float t[8];
    _mm256_storeu_ps(t, s0);
    return (double)t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

static double read_scalar(const float *a, size_t n)
{
    float s[8] = {0};
    for (size_t i = 0; i < n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += a[i + j];
    return (double)s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* b[i] = a[i] */
__attribute__((target("avx512f"))) static void copy_avx512(float *b, const float *a, size_t n)
{
    for (size_t i = 0; i < n; i += 64) {
        _mm512_store_ps(b + i, _mm512_load_ps(a + i));
        _mm512_store_ps(b + i + 16, _mm512_load_ps(a + i + 16));
        _mm512_store_ps(b + i + 32, _mm512_load_ps(a + i + 32));
        _mm512_store_ps(b + i + 48, _mm512_load_ps(a + i + 48));
    }
}

/* a[i] = b[i] + s * c[i] */
__attribute__((target("avx512f"))) static void triad_avx512(float *a, const float *b,
                                                            const float *c, float s, size_t n)
{
    __m512 vs = _mm512_set1_ps(s);
    for (size_t i = 0; i < n; i += 32) {
        _mm512_store_ps(a + i, _mm512_fmadd_ps(vs, _mm512_load_ps(c + i),
                                               _mm512_load_ps(b + i)));
        _mm512_store_ps(a + i + 16, _mm512_fmadd_ps(vs, _mm512_load_ps(c + i + 16),
                                                    _mm512_load_ps(b + i + 16)));
    }
}

static void copy_plain(float *b, const float *a, size_t n)
{
    memcpy(b, a, n * sizeof *a);
}

static void triad_plain(float *a, const float *b, const float *c, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

static void stream_worker(int tid, int nt, void *arg)
{
    stream_job *job = arg;
    size_t lo, hi;
    bool avx512 = !strcmp(job->path, "avx512");
    bool avx2 = !strcmp(job->path, "avx2");
    switch (job->op) {
    case 0: { /* read: all three arrays are one contiguous buffer */
        slice(job->n * 3, tid, nt, &lo, &hi);
        double t0 = bench_now();
        job->sink[tid % 256] += avx512 ? read_avx512(job->a + lo, hi - lo)
                                : avx2 ? read_avx2(job->a + lo, hi - lo)
                                       : read_scalar(job->a + lo, hi - lo);
        job->secs[tid % 256] = bench_now() - t0;
        break;
    }
    case 1:
        slice(job->n, tid, nt, &lo, &hi);
        if (avx512)
            copy_avx512(job->b + lo, job->a + lo, hi - lo);
        else
            copy_plain(job->b + lo, job->a + lo, hi - lo);
        break;
    case 2:
        slice(job->n, tid, nt, &lo, &hi);
        if (avx512)
            triad_avx512(job->a + lo, job->b + lo, job->c + lo, 0.5f, hi - lo);
        else
            triad_plain(job->a + lo, job->b + lo, job->c + lo, 0.5f, hi - lo);
        break;
    default:   /* first touch by the thread that reads it (NUMA locality) */
        slice(job->n * 3, tid, nt, &lo, &hi);
        for (size_t i = lo; i < hi; i++)
            job->a[i] = (float)(i & 1023) * (1.0f / 1024.0f);
        break;
    }
}

static double time_op(bench_team *team, stream_job *job, int op, int reps)
{
    double best = 1e30;
    job->op = op;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        team_run(team, stream_worker, job);
        double dt = bench_now() - t0;
        if (dt < best)
            best = dt;
    }
    return best;
}

bool stream_measure(bench_team *team, uint64_t bytes, int reps, bool read_only,
                    stream_result *out)
{
    memset(out, 0, sizeof *out);
    uint64_t isa = kt_hw_isa();
    const char *path = (isa & KT_ISA_AVX512F) ? "avx512" : (isa & KT_ISA_AVX2) ? "avx2"
                                                                              : "scalar";
    /* Three equal arrays, each a multiple of 64 floats x threads. */
    size_t unit = 128 * sizeof(float) * (size_t)team_size(team);
    size_t per = (size_t)(bytes / 3) / unit * unit;
    if (per == 0)
        per = unit;
    size_t total = per * 3;
    stream_job *job = calloc(1, sizeof *job);
    float *buf = bench_alloc_big(total);
    if (!job || !buf) {
        free(job);
        bench_free_big(buf, total);
        return false;
    }
    job->a = buf;
    job->b = buf + per / sizeof(float);
    job->c = buf + 2 * (per / sizeof(float));
    job->n = per / sizeof(float);
    job->path = path;
    time_op(team, job, 3, 1);
    time_op(team, job, 0, 1);   /* warm the TLB and the page tables */
    double t = time_op(team, job, 0, reps);
    out->read_gbs = (double)total / t * 1e-9;
    if (!read_only) {
        t = time_op(team, job, 1, reps);
        out->copy_gbs = 2.0 * (double)per / t * 1e-9;
        t = time_op(team, job, 2, reps);
        out->triad_gbs = 3.0 * (double)per / t * 1e-9;
    }
    out->bytes = total;
    out->path = path;
    bench_free_big(buf, total);
    free(job);
    return true;
}

/* ---- a reusable read buffer (samples interleaved with other work) --------- */

struct stream_buf {
    stream_job *job;
    stream_job *part; /* stream_buf_read_part's: a window of buf */
    float *buf;
    size_t bytes;
};

stream_buf *stream_buf_create(bench_team *team, uint64_t bytes)
{
    uint64_t isa = kt_hw_isa();
    size_t unit = 3 * 128 * sizeof(float) * (size_t)team_size(team);
    size_t total = (size_t)bytes / unit * unit;
    if (total == 0)
        total = unit;
    stream_buf *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->job = calloc(1, sizeof *sb->job);
    sb->part = calloc(1, sizeof *sb->part);
    sb->buf = bench_alloc_big(total);
    if (!sb->job || !sb->part || !sb->buf) {
        stream_buf_free(sb);
        return NULL;
    }
    sb->bytes = total;
    sb->job->a = sb->buf;
    sb->job->n = total / sizeof(float) / 3;
    sb->job->path = (isa & KT_ISA_AVX512F) ? "avx512" : (isa & KT_ISA_AVX2) ? "avx2" : "scalar";
    time_op(team, sb->job, 3, 1);   /* first touch by the readers */
    time_op(team, sb->job, 0, 1);
    return sb;
}

double stream_buf_read(bench_team *team, stream_buf *sb)
{
    double t = time_op(team, sb->job, 0, 1);
    return (double)sb->bytes / t * 1e-9;
}

double stream_buf_read_part(bench_team *team, stream_buf *sb, uint64_t off, uint64_t bytes)
{
    if (off >= sb->bytes)
        off = 0;
    off -= off % 4096; /* the read loops' aligned loads */
    if (bytes > sb->bytes - off)
        bytes = sb->bytes - off;
    stream_job *part = sb->part;
    part->path = sb->job->path;
    part->a = sb->buf + off / sizeof(float);
    part->n = (size_t)(bytes / sizeof(float) / 3); /* the read op covers 3 n floats */
    /* what the threads read: whole 128-float chunks (slice()) */
    double read = (double)(part->n * 3 / 128 * 128 * sizeof(float));
    if (read <= 0)
        return 0;
    double t = time_op(team, part, 0, 1);
    return read / t * 1e-9;
}

uint64_t stream_buf_bytes(const stream_buf *sb)
{
    return sb->bytes;
}

static int cmp_secs(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void stream_buf_threads(const bench_team *team, const stream_buf *sb, double *slowest,
                        double *median)
{
    int n = team_size(team) < 256 ? team_size(team) : 256;
    double s[256];
    memcpy(s, sb->job->secs, (size_t)n * sizeof s[0]);
    qsort(s, (size_t)n, sizeof s[0], cmp_secs);
    double per = (double)sb->bytes / team_size(team); /* one slice, about */
    *slowest = s[n - 1] > 0 ? n * per / s[n - 1] * 1e-9 : 0;
    *median = s[n / 2] > 0 ? n * per / s[n / 2] * 1e-9 : 0;
}

void stream_buf_free(stream_buf *sb)
{
    if (!sb)
        return;
    bench_free_big(sb->buf, sb->bytes);
    free(sb->job);
    free(sb->part);
    free(sb);
}

/* ---- kt-bench stream ------------------------------------------------------ */

static void stream_usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench stream [--size MIB] [--reps N] [--threads N] [--json FILE]\n"
            "\n"
            "Measures this machine's memory bandwidth with pinned threads, one per\n"
            "core: read (sum of a buffer; loads only), copy (b = a; 2 x bytes) and\n"
            "triad (a = b + s*c; 3 x bytes), best of N repetitions. This is the\n"
            "yardstick kt-bench moe compares decode against.\n"
            "\n"
            "  --size MIB     bytes read per pass (default 1536; keep >> L3)\n"
            "  --reps N       repetitions, best one reported (default 5)\n"
            "  --threads N    worker threads (default: physical cores)\n"
            "  --json FILE    also write the result as JSON\n");
}

int cmd_stream(int argc, char **argv)
{
    int64_t size_mib = 1536, reps = 5, threads = 0;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            stream_usage(stdout);
            return 0;
        } else if (opt_i64(BENCH_TOOL, argc, argv, &i, "--size", 16, 1 << 20, &size_mib, &bad) ||
                   opt_i64(BENCH_TOOL, argc, argv, &i, "--reps", 1, 1000, &reps, &bad) ||
                   bench_common_opt(argc, argv, &i, &threads, &json_path, &bad)) {
            if (bad)
                return 2;
        } else {
            fprintf(stderr, "kt-bench stream: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    bench_hw hw;
    int nt = bench_hw_start(&hw, threads);
    uint64_t bytes = (uint64_t)size_mib << 20;
    if (hw.l3_bytes && bytes < 4 * hw.l3_bytes)
        fprintf(stderr, "kt-bench stream: warning: %lld MiB is less than 4x the L3 cache; "
                        "the result includes cache hits\n", (long long)size_mib);
    bench_team *team = team_create(nt);
    if (!team) {
        fprintf(stderr, "kt-bench stream: cannot start %d threads\n", nt);
        return 1;
    }
    stream_result r;
    bool ok = stream_measure(team, bytes, (int)reps, false, &r);
    team_free(team);
    if (!ok) {
        fprintf(stderr, "kt-bench stream: cannot allocate %lld MiB\n", (long long)size_mib);
        return 1;
    }
    printf("stream (%s, %d threads, %.0f MiB, best of %d):\n", r.path, nt,
           (double)r.bytes / 1048576.0, (int)reps);
    printf("  read   %8.2f GB/s\n  copy   %8.2f GB/s\n  triad  %8.2f GB/s\n", r.read_gbs,
           r.copy_gbs, r.triad_gbs);
    if (json_path) {
        bench_json *j = json_open(json_path, &hw, nt);
        if (!j) {
            fprintf(stderr, "kt-bench stream: cannot write '%s'\n", json_path);
            return 1;
        }
        json_row(j, "\"bench\":\"stream\",\"path\":\"%s\",\"bytes\":%llu,\"threads\":%d,"
                    "\"read_gbs\":%.3f,\"copy_gbs\":%.3f,\"triad_gbs\":%.3f",
                 r.path, (unsigned long long)r.bytes, nt, r.read_gbs, r.copy_gbs, r.triad_gbs);
        if (!json_close(j)) {
            fprintf(stderr, "kt-bench stream: error writing '%s'\n", json_path);
            return 1;
        }
    }
    return 0;
}
