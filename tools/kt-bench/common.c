/* kt-bench: machine description, pinned thread team, big allocations, JSON. */
#define _GNU_SOURCE
#include "bench.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <kt/kt.h>

#include "opt.h"

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- machine ------------------------------------------------------------ */

/* Last-level cache from sysfs (glibc's sysconf misreports it on some AMD VMs). */
static uint64_t read_l3_bytes(void)
{
    for (int idx = 3; idx >= 2; idx--) {
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        unsigned long long n = 0;
        char unit = 0;
        int got = fscanf(f, "%llu%c", &n, &unit);
        fclose(f);
        if (got >= 1)   /* "32768K" */
            return n * (unit == 'K' ? 1024ull : unit == 'M' ? 1048576ull : 1ull);
    }
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? (uint64_t)v : 0;
}

static const struct {
    uint64_t bit;
    const char *name;
} isa_names[] = {
    {KT_ISA_AVX2, "avx2"},           {KT_ISA_FMA, "fma"},
    {KT_ISA_F16C, "f16c"},           {KT_ISA_AVX512F, "avx512f"},
    {KT_ISA_AVX512BW, "bw"},         {KT_ISA_AVX512VL, "vl"},
    {KT_ISA_AVX512DQ, "dq"},         {KT_ISA_AVX512VNNI, "vnni"},
    {KT_ISA_AVX512BF16, "bf16"},     {KT_ISA_AVX512VBMI, "vbmi"},
    {KT_ISA_AVX512FP16, "fp16"},     {KT_ISA_AVXVNNI, "avxvnni"},
    {KT_ISA_AMX_TILE, "amx-tile"},   {KT_ISA_AMX_INT8, "amx-int8"},
    {KT_ISA_AMX_BF16, "amx-bf16"},
};

/* The CPUs the process may use, read once before any thread is pinned. */
static cpu_set_t process_cpus;
static int process_cpus_ready;

static const cpu_set_t *allowed_cpus(void)
{
    if (!process_cpus_ready) {
        CPU_ZERO(&process_cpus);
        if (sched_getaffinity(0, sizeof process_cpus, &process_cpus) != 0 ||
            CPU_COUNT(&process_cpus) == 0)
            CPU_SET(0, &process_cpus);
        process_cpus_ready = 1;
    }
    return &process_cpus;
}

int bench_allowed_cpus(int *cpus, int max)
{
    const cpu_set_t *set = allowed_cpus();
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, set))
            cpus[n++] = c;
    return n;
}

void bench_hw_detect(bench_hw *hw)
{
    memset(hw, 0, sizeof *hw);
    kt_hw_info info = KT_HW_INFO_INIT;
    kt_hw_query(&info);
    snprintf(hw->cpu_model, sizeof hw->cpu_model, "%s",
             info.cpu_model[0] ? info.cpu_model : "unknown CPU");
    hw->physical_cores = kt_hw_physical_cores();
    hw->online_cpus = CPU_COUNT(allowed_cpus());
    hw->isa = kt_hw_isa();
    size_t pos = 0;
    hw->isa_text[0] = '\0';
    for (size_t i = 0; i < sizeof isa_names / sizeof isa_names[0]; i++)
        if (hw->isa & isa_names[i].bit) {
            int n = snprintf(hw->isa_text + pos, sizeof hw->isa_text - pos, "%s%s",
                             pos ? " " : "", isa_names[i].name);
            if (n < 0 || (size_t)n >= sizeof hw->isa_text - pos)
                break;
            pos += (size_t)n;
        }
    if (!pos)
        snprintf(hw->isa_text, sizeof hw->isa_text, "none beyond x86-64");
    uint64_t amx = KT_ISA_AMX_TILE | KT_ISA_AMX_BF16 | KT_ISA_AMX_INT8;
    uint64_t avx512 = KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL;
    uint64_t avx2 = KT_ISA_AVX2 | KT_ISA_FMA;
    if ((hw->isa & amx) == amx)
        hw->isa_path = "amx";
    else if ((hw->isa & avx512) == avx512)
        hw->isa_path = "avx512";
    else if ((hw->isa & avx2) == avx2)
        hw->isa_path = "avx2";
    else
        hw->isa_path = "scalar";
    hw->l3_bytes = read_l3_bytes();
    hw->ram_available = info.ram_available;
    hw->ram_total = info.ram_total;
    double load[1] = {0};
    if (getloadavg(load, 1) == 1)
        hw->load1 = load[0];
}

bool bench_common_opt(int argc, char **argv, int *i, int64_t *threads, const char **json_path,
                      bool *bad)
{
    const char *v = NULL;
    if (opt_match(argc, argv, i, "--threads", true, &v, bad)) {
        if (!*bad && !opt_parse_i64(BENCH_TOOL, "--threads", v, 0, 4096, threads))
            *bad = true;
        return true;
    }
    if (opt_match(argc, argv, i, "--json", true, &v, bad)) {
        if (!*bad)
            *json_path = v;
        return true;
    }
    return false;
}

int bench_default_threads(const bench_hw *hw)
{
    int n = hw->physical_cores > 0 ? hw->physical_cores : hw->online_cpus;
    return n < hw->online_cpus ? n : hw->online_cpus;
}

int bench_hw_start(bench_hw *hw, int64_t threads)
{
    bench_hw_detect(hw);
    int n = threads ? (int)threads : bench_default_threads(hw);
    bench_hw_print(stdout, hw, n);
    return n;
}

void bench_hw_print(FILE *f, const bench_hw *hw, int threads)
{
    fprintf(f, "# CPU: %s, %d physical cores, %d CPUs allowed, %d threads\n", hw->cpu_model,
            hw->physical_cores, hw->online_cpus, threads);
    fprintf(f, "# ISA: %s -> kernel path %s\n", hw->isa_text, hw->isa_path);
    fprintf(f, "# L3 %.1f MiB, RAM %.1f GiB available of %.1f GiB, load average %.2f, libkt %s\n",
            (double)hw->l3_bytes / 1048576.0, (double)hw->ram_available / 1073741824.0,
            (double)hw->ram_total / 1073741824.0, hw->load1, kt_version());
}

/* ---- big allocations ---------------------------------------------------- */

void *bench_alloc_big(size_t bytes)
{
    if (bytes == 0)
        return NULL;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

void bench_free_big(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* ---- pinned thread team ------------------------------------------------- */

struct bench_team {
    int n;
    pthread_t *threads;
    int *cpus;
    team_fn fn;
    void *arg;
    atomic_uint generation;   /* bumped by team_run to start a round   */
    atomic_int remaining;     /* workers still running the round        */
    atomic_bool quit;
    long spin;                /* pauses before a waiting thread sleeps  */
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

typedef struct team_worker {
    bench_team *team;
    int tid;
} team_worker;

static void pin_to(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Pauses a team thread spins after a round before it sleeps: enough for the
 * next of back-to-back rounds (stream's repetitions), short against the gap
 * before the next read sample between kt-bench moe's calls. The team shares its
 * CPUs with the backend's workers there: the 200,000 pauses of sessions 5-13
 * (4-8 ms on the Zen 3 VM) kept worker 1 from the first calls after each
 * sample, about 10% of every decode call on average (session 14).
 * KT_BENCH_TEAM_SPIN=N sets the count (200000: the old spin). */
static long team_spin(void)
{
    const char *v = getenv("KT_BENCH_TEAM_SPIN");
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : -1;
    return v && end != v && *end == '\0' && n >= 0 ? n : 2000;
}

static void *team_main(void *p)
{
    team_worker *w = p;
    bench_team *t = w->team;
    int tid = w->tid;
    free(w);
    pin_to(t->cpus[tid]);
    unsigned seen = 0;
    for (;;) {
        /* Spin briefly, then sleep until the next round. */
        unsigned gen;
        long spins = 0;
        while ((gen = atomic_load(&t->generation)) == seen && !atomic_load(&t->quit)) {
            if (++spins < t->spin) {
                cpu_relax(); /* leaves the core's issue slots to a sibling thread */
                continue;
            }
            pthread_mutex_lock(&t->lock);
            if (atomic_load(&t->generation) == seen && !atomic_load(&t->quit))
                pthread_cond_wait(&t->wake, &t->lock);
            pthread_mutex_unlock(&t->lock);
            spins = 0;
        }
        if (atomic_load(&t->quit))
            return NULL;
        seen = gen;
        t->fn(tid, t->n, t->arg);
        atomic_fetch_sub(&t->remaining, 1);
    }
}

bench_team *team_create(int n)
{
    if (n < 1)
        n = 1;
    bench_team *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n = n;
    t->spin = team_spin();
    t->threads = calloc((size_t)n, sizeof *t->threads);
    t->cpus = calloc((size_t)n, sizeof *t->cpus);
    if (!t->threads || !t->cpus) {
        free(t->threads);
        free(t->cpus);
        free(t);
        return NULL;
    }
    static int allowed[CPU_SETSIZE];
    int n_allowed = bench_allowed_cpus(allowed, CPU_SETSIZE);
    for (int i = 0; i < n; i++)
        t->cpus[i] = allowed[i % n_allowed];
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->wake, NULL);
    for (int i = 1; i < n; i++) {
        team_worker *w = malloc(sizeof *w);
        if (w) {
            w->team = t;
            w->tid = i;
        }
        if (!w || pthread_create(&t->threads[i], NULL, team_main, w) != 0) {
            free(w);
            t->n = i;   /* run with the workers that started */
            break;
        }
    }
    return t;
}

int team_size(const bench_team *t)
{
    return t->n;
}

void team_run(bench_team *t, team_fn fn, void *arg)
{
    t->fn = fn;
    t->arg = arg;
    atomic_store(&t->remaining, t->n - 1);
    pthread_mutex_lock(&t->lock);
    atomic_fetch_add(&t->generation, 1);
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->lock);
    /* The caller is worker 0 for the round only: pinned, then released so that
     * libkt's and oneDNN's own threads see the whole machine. */
    pin_to(t->cpus[0]);
    fn(0, t->n, arg);
    while (atomic_load(&t->remaining) > 0)
        ;
    pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), allowed_cpus());
}

void team_free(bench_team *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    atomic_store(&t->quit, true);
    pthread_cond_broadcast(&t->wake);
    pthread_mutex_unlock(&t->lock);
    for (int i = 1; i < t->n; i++)
        pthread_join(t->threads[i], NULL);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->wake);
    free(t->threads);
    free(t->cpus);
    free(t);
}

int team_cpu(const bench_team *t, int i)
{
    return t->cpus[i];
}

/* Each worker's clock: 8 dependent multiplies an iteration, 3 cycles each on
 * every x86 core of the last decade (dependent adds are no clock: Golden Cove
 * folds immediate adds at rename and ran them at "6-8 GHz" on the Xeon). */
typedef struct clock_job {
    double ghz[CPU_SETSIZE];
} clock_job;

static void clock_worker(int tid, int n, void *arg)
{
    (void)n;
    clock_job *job = arg;
    const long iters = 1000000;
    uint64_t x = 3, one = 1;
    double t0 = bench_now();
    for (long i = 0; i < iters; i++)
        __asm__ volatile("imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0\n\t"
                         "imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0"
                         : "+r"(x)
                         : "r"(one));
    double dt = bench_now() - t0;
    if (tid < CPU_SETSIZE)
        job->ghz[tid] = dt > 0 ? 24.0 * (double)iters / dt * 1e-9 : 0;
}

static int cmp_ghz(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void team_clock(bench_team *t, double *lo, double *median)
{
    static clock_job job;
    int n = t->n < CPU_SETSIZE ? t->n : CPU_SETSIZE;
    team_run(t, clock_worker, &job);
    qsort(job.ghz, (size_t)n, sizeof job.ghz[0], cmp_ghz);
    *lo = job.ghz[0];
    *median = job.ghz[n / 2];
}

/* ---- where memory and threads are (/proc, /sys) -------------------------------- */

bool bench_mem_pages(const void *p, size_t n, bench_pages *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return false;
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    bool in = false, anon = false;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b, kb;
        char name[256] = "";
        if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %255s", &a, &b, name) >= 2) {
            in = a < hi && b > lo;
            anon = name[0] == '\0' || name[0] == '[';   /* no file: anonymous */
            if (in) {
                out->vmas++;
                out->vma_bytes += b - a;
            }
        } else if (sscanf(line, "Rss: %llu kB", &kb) == 1) {
            if (in)
                out->rss += kb << 10;
            if (anon)
                out->all_rss += kb << 10;
        } else if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) {
            if (in)
                out->huge += kb << 10;
            out->all_huge += kb << 10;
        }
    }
    fclose(f);
    return true;
}

/* The bracketed word of a /sys/kernel/mm/transparent_hugepage file; "?". */
static void thp_word(const char *file, char *buf, size_t n)
{
    char path[128], line[256];
    snprintf(path, sizeof path, "/sys/kernel/mm/transparent_hugepage/%s", file);
    snprintf(buf, n, "?");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(line, sizeof line, f)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b)
            snprintf(buf, n, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(f);
}

void bench_thp_mode(char *buf, size_t n)
{
    char en[32], df[32];
    thp_word("enabled", en, sizeof en);
    thp_word("defrag", df, sizeof df);
    snprintf(buf, n, "THP enabled %s, defrag %s", en, df);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

int bench_thread_ids(int *tids, int max)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < max;)
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
            tids[n++] = atoi(e->d_name);
    closedir(d);
    qsort(tids, (size_t)n, sizeof *tids, cmp_int);
    return n;
}

bool bench_thread_cpus(int tid, char *buf, size_t n)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = false;
    while (!ok && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            char *v = line + 18;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(buf, n, "%s", v);
            ok = true;
        }
    fclose(f);
    return ok;
}

/* ---- JSON rows ---------------------------------------------------------------- */

struct bench_json {
    FILE *f;
    int rows;
};

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

bench_json *json_open(const char *path, const bench_hw *hw, int threads)
{
    bench_json *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->f = fopen(path, "w");
    if (!j->f) {
        free(j);
        return NULL;
    }
    fprintf(j->f, "{\n  \"tool\": \"kt-bench\",\n  \"libkt\": ");
    json_string(j->f, kt_version());
    fprintf(j->f, ",\n  \"cpu\": ");
    json_string(j->f, hw->cpu_model);
    fprintf(j->f, ",\n  \"physical_cores\": %d,\n  \"threads\": %d,\n  \"isa\": ",
            hw->physical_cores, threads);
    json_string(j->f, hw->isa_text);
    fprintf(j->f, ",\n  \"isa_path\": ");
    json_string(j->f, hw->isa_path);
    fprintf(j->f, ",\n  \"l3_bytes\": %llu,\n  \"load_average\": %.2f,\n  \"rows\": [",
            (unsigned long long)hw->l3_bytes, hw->load1);
    return j;
}

void json_row(bench_json *j, const char *fmt, ...)
{
    if (!j)
        return;
    fprintf(j->f, "%s\n    {", j->rows ? "," : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(j->f, fmt, ap);
    va_end(ap);
    fputc('}', j->f);
    j->rows++;
}

bool json_close(bench_json *j)
{
    if (!j)
        return true;
    fprintf(j->f, "\n  ]\n}\n");
    bool ok = !ferror(j->f);
    if (fclose(j->f) != 0)
        ok = false;
    free(j);
    return ok;
}
