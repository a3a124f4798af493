/* kt-bench gemm: oneDNN matmul throughput, the machine's compute yardstick
 * (BF16 x BF16 -> F32, u8 x s8 -> s32, F32), and the per-expert oneDNN batch
 * that kt-bench moe compares prefill against. */
#define _GNU_SOURCE
#include "bench.h"

#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <kt_config.h>

#include "opt.h"

#if KT_HAVE_ONEDNN
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#endif

static char gemm_error[256];
/* Set when the last matmul failed because oneDNN has no implementation of its
 * types on this CPU (not a failure of the run). */
static bool no_impl;

const char *gemm_kind_name(gemm_kind kind)
{
    return kind == GEMM_BF16 ? "bf16" : kind == GEMM_INT8 ? "int8" : "f32";
}

static void set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gemm_error, sizeof gemm_error, fmt, ap);
    va_end(ap);
}

const char *gemm_last_error(void)
{
    return gemm_error[0] ? gemm_error : "no error";
}

bool gemm_no_impl(void)
{
    return no_impl;
}

#if KT_HAVE_ONEDNN

bool gemm_available(void)
{
    return true;
}

void gemm_set_threads(int n)
{
    static int allowed[CPU_SETSIZE];
    int n_allowed = bench_allowed_cpus(allowed, CPU_SETSIZE);
    omp_set_num_threads(n);
    /* Pin each of OpenMP's (persistent) threads like the kt-bench team. The
     * calling thread is OpenMP's thread 0: its mask is put back afterwards, or it
     * would stay on the first CPU (a MoE worker's) with every thread it starts
     * later (CUDA's host-function thread in kt-bench e2e). */
    cpu_set_t caller;
    bool restore = pthread_getaffinity_np(pthread_self(), sizeof caller, &caller) == 0;
#pragma omp parallel num_threads(n)
    {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(allowed[omp_get_thread_num() % n_allowed], &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
    if (restore)
        pthread_setaffinity_np(pthread_self(), sizeof caller, &caller);
}

static dnnl_engine_t engine;
static dnnl_stream_t stream;

static bool dnnl_ready(void)
{
    if (engine)
        return true;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        set_error("oneDNN: cannot create the CPU engine");
        engine = NULL;
        return false;
    }
    if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        set_error("oneDNN: cannot create a stream");
        dnnl_engine_destroy(engine);
        engine = NULL;
        return false;
    }
    return true;
}

/* Small F32 values (|x| in [2^-8, 2^-6)), random sign, as fill_bf16's. */
static void fill_f32(float *p, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(*seed >> 40);
        float v = (1.0f + (float)(r & 0xffffu) / 65536.0f) * (1.0f / 256.0f) *
                  (float)(1u << ((r >> 16) & 1u));
        p[i] = (r & 0x800000u) ? -v : v;
    }
}

/* Small BF16 values (|x| in [2^-8, 2^-6)), random sign: no NaN, no denormals. */
static void fill_bf16(uint16_t *p, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        uint16_t r = (uint16_t)(*seed >> 48);
        p[i] = (uint16_t)(0x3b80u + (r & 0xffu)) | (uint16_t)(r & 0x8000u);
    }
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(*seed >> 56);
    }
}

typedef struct matmul {
    dnnl_primitive_t prim;
    dnnl_primitive_desc_t pd;
    dnnl_memory_t src, wei, dst, scratch;
    const char *impl;
} matmul;

static void matmul_free(matmul *m)
{
    if (m->prim)
        dnnl_primitive_destroy(m->prim);
    if (m->pd)
        dnnl_primitive_desc_destroy(m->pd);
    if (m->src)
        dnnl_memory_destroy(m->src);
    if (m->wei)
        dnnl_memory_destroy(m->wei);
    if (m->dst)
        dnnl_memory_destroy(m->dst);
    if (m->scratch)
        dnnl_memory_destroy(m->scratch);
    memset(m, 0, sizeof *m);
}

/* dst[m][n] = src[m][k] x wei[k][n]; `wei_tag` is dnnl_ba for weights stored
 * [n][k] (the Hugging Face [out][in] layout) or dnnl_format_tag_any (packed).
 * `wei_handle` NULL: oneDNN allocates the weights. */
static bool matmul_init_md(matmul *mm, gemm_kind kind, int64_t m, int64_t n, int64_t k,
                           dnnl_format_tag_t wei_tag, const dnnl_memory_desc_t *wei_md,
                           void *wei_handle);

static bool matmul_init(matmul *mm, gemm_kind kind, int64_t m, int64_t n, int64_t k,
                        dnnl_format_tag_t wei_tag, void *wei_handle)
{
    return matmul_init_md(mm, kind, m, n, k, wei_tag, NULL, wei_handle);
}

/* As matmul_init, with the weights in the given (e.g. blocked) layout when
 * wei_md is not NULL. */
static bool matmul_init_md(matmul *mm, gemm_kind kind, int64_t m, int64_t n, int64_t k,
                           dnnl_format_tag_t wei_tag, const dnnl_memory_desc_t *wei_md,
                           void *wei_handle)
{
    memset(mm, 0, sizeof *mm);
    dnnl_data_type_t st = kind == GEMM_BF16 ? dnnl_bf16 : kind == GEMM_INT8 ? dnnl_u8 : dnnl_f32;
    dnnl_data_type_t wt = kind == GEMM_BF16 ? dnnl_bf16 : kind == GEMM_INT8 ? dnnl_s8 : dnnl_f32;
    dnnl_data_type_t dt = kind == GEMM_INT8 ? dnnl_s32 : dnnl_f32;
    dnnl_dims_t sd = {m, k}, wd = {k, n}, dd = {m, n};
    dnnl_memory_desc_t smd, wmd, dmd;
    dnnl_matmul_desc_t desc;
    if (dnnl_memory_desc_init_by_tag(&smd, 2, sd, st, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&wmd, 2, wd, wt, wei_tag) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dt, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&desc, &smd, wei_md ? wei_md : &wmd, NULL, &dmd) !=
            dnnl_success) {
        set_error("oneDNN: bad matmul shape %lldx%lldx%lld", (long long)m, (long long)n,
                  (long long)k);
        return false;
    }
    /* A scratchpad of our own, allocated once: this oneDNN build
     * (DNNL_ENABLE_CONCURRENT_EXEC) would otherwise allocate one per execution. */
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) !=
            dnnl_success) {
        set_error("oneDNN: cannot create primitive attributes");
        if (attr)
            dnnl_primitive_attr_destroy(attr);
        return false;
    }
    dnnl_status_t pst = dnnl_primitive_desc_create(&mm->pd, &desc, attr, engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (pst != dnnl_success) {
        set_error("oneDNN: no %s matmul implementation for %lldx%lldx%lld on this CPU",
                  gemm_kind_name(kind), (long long)m, (long long)n, (long long)k);
        no_impl = true;
        mm->pd = NULL;
        return false;
    }
    const char *impl = NULL;
    dnnl_primitive_desc_query(mm->pd, dnnl_query_impl_info_str, 0, &impl);
    mm->impl = impl ? impl : "?";
    const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(mm->pd, dnnl_query_weights_md,
                                                               0);
    if (dnnl_primitive_create(&mm->prim, mm->pd) != dnnl_success ||
        dnnl_memory_create(&mm->src, &smd, engine, DNNL_MEMORY_ALLOCATE) != dnnl_success ||
        dnnl_memory_create(&mm->wei, w, engine,
                           wei_handle ? wei_handle : DNNL_MEMORY_ALLOCATE) != dnnl_success ||
        dnnl_memory_create(&mm->dst, &dmd, engine, DNNL_MEMORY_ALLOCATE) != dnnl_success ||
        dnnl_memory_create(&mm->scratch,
                           dnnl_primitive_desc_query_md(mm->pd, dnnl_query_scratchpad_md, 0),
                           engine, DNNL_MEMORY_ALLOCATE) != dnnl_success) {
        set_error("oneDNN: cannot create the matmul primitive or its buffers");
        matmul_free(mm);
        return false;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)(m * 131 + n * 7 + k);
    void *p = NULL;
    dnnl_memory_get_data_handle(mm->src, &p);
    if (kind == GEMM_BF16)
        fill_bf16(p, (size_t)(m * k), &seed);
    else if (kind == GEMM_F32)
        fill_f32(p, (size_t)(m * k), &seed);
    else
        fill_bytes(p, (size_t)(m * k), &seed);
    if (!wei_handle) {
        dnnl_memory_get_data_handle(mm->wei, &p);
        size_t bytes = dnnl_memory_desc_get_size(w);
        if (kind == GEMM_BF16)
            fill_bf16(p, bytes / 2, &seed);
        else if (kind == GEMM_F32)
            fill_f32(p, bytes / 4, &seed);
        else
            fill_bytes(p, bytes, &seed);
    }
    return true;
}

static bool matmul_exec(matmul *mm)
{
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mm->src},
                               {DNNL_ARG_WEIGHTS, mm->wei},
                               {DNNL_ARG_DST, mm->dst},
                               {DNNL_ARG_SCRATCHPAD, mm->scratch}};
    if (dnnl_primitive_execute(mm->prim, stream, 4, args) != dnnl_success)
        return false;
    return dnnl_stream_wait(stream) == dnnl_success;
}

static double measure_tag(gemm_kind kind, int64_t m, int64_t n, int64_t k, int reps,
                          dnnl_format_tag_t tag, const char **impl)
{
    if (!dnnl_ready())
        return -1;
    matmul mm;
    if (!matmul_init(&mm, kind, m, n, k, tag, NULL))
        return -1;
    if (impl)
        *impl = mm.impl;
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = bench_now();
        if (!matmul_exec(&mm)) {
            set_error("oneDNN: matmul execution failed");
            matmul_free(&mm);
            return -1;
        }
        double dt = bench_now() - t0;
        if (r > 0 && dt < best)   /* r == 0 is the warm-up */
            best = dt;
    }
    matmul_free(&mm);
    return 2.0 * (double)m * (double)n * (double)k / best * 1e-12;
}

double gemm_measure(gemm_kind kind, int64_t m, int64_t n, int64_t k, int reps)
{
    return measure_tag(kind, m, n, k, reps, dnnl_format_tag_any, NULL);
}

double gemm_measure_yardstick(int64_t m, int64_t n, int64_t k, int reps, gemm_kind *kind)
{
    *kind = GEMM_BF16;
    no_impl = false;
    double t = gemm_measure(GEMM_BF16, m, n, k, reps);
    if (t < 0 && no_impl) {
        *kind = GEMM_F32;
        t = gemm_measure(GEMM_F32, m, n, k, reps);
    }
    return t;
}

/* ---- the per-expert batch (MoE prefill yardstick) ------------------------- */

struct gemm_moe {
    gemm_kind kind;   /* GEMM_BF16: BF16 weights; GEMM_INT8: s8 weights, u8 src, s32 dst */
    int64_t h, inter;
    int32_t n_experts;
    int n_sets;
    const void *const *w_gate, *const *w_up, *const *w_down;   /* [n_sets * E] */
    /* packed: every weight reordered once into oneDNN's preferred layout */
    bool packed;
    dnnl_memory_desc_t md_gate_up, md_down;
    void **p_gate, **p_up, **p_down;   /* [n_sets * E], oneDNN-allocated copies */
    dnnl_memory_t *p_mem;              /* [3 * n_sets * E] owners of those copies  */
    /* every distinct implementation the primitives got, ' + ' between them:
     * oneDNN picks per m (and per matmul), so the first one alone cannot show
     * that a cap such as ONEDNN_MAX_CPU_ISA held for all of them */
    char impls[256];
    int32_t max_m;
    matmul *gate_up;   /* [max_m + 1]: [m][H] x [H][I], created on first use */
    matmul *down;      /* [max_m + 1]: [m][I] x [I][H]                       */
};

gemm_moe *gemm_moe_create(gemm_kind kind, int64_t h, int64_t inter, int32_t n_experts,
                          int n_sets, const void *const *gate, const void *const *up,
                          const void *const *down)
{
    if (kind == GEMM_F32) {
        set_error("the per-expert batch runs BF16 or INT8 weights, not F32");
        return NULL;
    }
    no_impl = false;
    if (!dnnl_ready())
        return NULL;
    gemm_moe *g = calloc(1, sizeof *g);
    if (!g) {
        set_error("out of memory");
        return NULL;
    }
    g->kind = kind;
    g->h = h;
    g->inter = inter;
    g->n_experts = n_experts;
    g->n_sets = n_sets;
    g->w_gate = gate;
    g->w_up = up;
    g->w_down = down;
    return g;
}

/* The layout oneDNN prefers for [K][N] weights of `kind` at m rows. */
static bool preferred_md(gemm_kind kind, int64_t m, int64_t n, int64_t k,
                         dnnl_memory_desc_t *out)
{
    matmul probe;
    if (!matmul_init_md(&probe, kind, m, n, k, dnnl_format_tag_any, NULL, NULL))
        return false;
    *out = *dnnl_primitive_desc_query_md(probe.pd, dnnl_query_weights_md, 0);
    matmul_free(&probe);
    return true;
}

/* dst (layout md) = src ([n][k] plain BF16 or s8) through a oneDNN reorder. */
static bool reorder_into(gemm_kind kind, const void *src, int64_t n, int64_t k,
                         const dnnl_memory_desc_t *md, dnnl_memory_t *dst)
{
    dnnl_dims_t wd = {k, n};
    dnnl_memory_desc_t plain;
    dnnl_memory_t from = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_data_type_t wt = kind == GEMM_INT8 ? dnnl_s8 : dnnl_bf16;
    bool ok = dnnl_memory_desc_init_by_tag(&plain, 2, wd, wt, dnnl_ba) == dnnl_success &&
              dnnl_memory_create(&from, &plain, engine, (void *)src) == dnnl_success &&
              dnnl_memory_create(dst, md, engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
              dnnl_reorder_primitive_desc_create(&pd, &plain, engine, md, engine, NULL) ==
                  dnnl_success &&
              dnnl_primitive_create(&prim, pd) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, *dst}};
        ok = dnnl_primitive_execute(prim, stream, 2, args) == dnnl_success &&
             dnnl_stream_wait(stream) == dnnl_success;
    }
    if (prim)
        dnnl_primitive_destroy(prim);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (from)
        dnnl_memory_destroy(from);
    if (!ok)
        set_error("oneDNN: cannot reorder weights into the packed layout");
    return ok;
}

bool gemm_moe_pack(gemm_moe *g, int32_t m_hint)
{
    size_t total = (size_t)g->n_sets * (size_t)g->n_experts;
    if (!preferred_md(g->kind, m_hint, g->inter, g->h, &g->md_gate_up) ||
        !preferred_md(g->kind, m_hint, g->h, g->inter, &g->md_down))
        return false;
    g->p_gate = calloc(total, sizeof *g->p_gate);
    g->p_up = calloc(total, sizeof *g->p_up);
    g->p_down = calloc(total, sizeof *g->p_down);
    g->p_mem = calloc(3 * total, sizeof *g->p_mem);
    if (!g->p_gate || !g->p_up || !g->p_down || !g->p_mem) {
        set_error("out of memory");
        return false;
    }
    /* Aliased slots (the same pointer for several experts) are packed once. */
    for (size_t i = 0; i < total; i++) {
        size_t same = i;
        for (size_t j = 0; j < i && same == i; j++)
            if (g->w_gate[j] == g->w_gate[i])
                same = j;
        if (same != i) {
            g->p_gate[i] = g->p_gate[same];
            g->p_up[i] = g->p_up[same];
            g->p_down[i] = g->p_down[same];
            continue;
        }
        dnnl_memory_t *mem = g->p_mem + 3 * i;
        if (!reorder_into(g->kind, g->w_gate[i], g->inter, g->h, &g->md_gate_up, &mem[0]) ||
            !reorder_into(g->kind, g->w_up[i], g->inter, g->h, &g->md_gate_up, &mem[1]) ||
            !reorder_into(g->kind, g->w_down[i], g->h, g->inter, &g->md_down, &mem[2]))
            return false;
        dnnl_memory_get_data_handle(mem[0], &g->p_gate[i]);
        dnnl_memory_get_data_handle(mem[1], &g->p_up[i]);
        dnnl_memory_get_data_handle(mem[2], &g->p_down[i]);
    }
    g->packed = true;
    return true;
}

const char *gemm_moe_impl(const gemm_moe *g)
{
    return g->impls[0] ? g->impls : "?";
}

/* Adds name to g->impls unless it is there already ("..." once it is full). */
static void note_impl(gemm_moe *g, const char *name)
{
    size_t used = strlen(g->impls), n = strlen(name);
    for (const char *p = g->impls; (p = strstr(p, name)) != NULL; p += n)
        if ((p == g->impls || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
            return;
    if (used + n + 8 >= sizeof g->impls) {
        if (!strstr(g->impls, " + ..."))
            snprintf(g->impls + used, sizeof g->impls - used, " + ...");
        return;
    }
    snprintf(g->impls + used, sizeof g->impls - used, "%s%s", used ? " + " : "", name);
}

static bool ensure_m(gemm_moe *g, int32_t m)
{
    if (m > g->max_m) {
        size_t old = g->gate_up ? (size_t)g->max_m + 1 : 0;   /* entries initialised */
        int32_t cap = m < 64 ? 64 : m;
        matmul *gu = realloc(g->gate_up, (size_t)(cap + 1) * sizeof *gu);
        if (!gu)
            return false;
        g->gate_up = gu;
        matmul *dn = realloc(g->down, (size_t)(cap + 1) * sizeof *dn);
        if (!dn)
            return false;
        g->down = dn;
        memset(g->gate_up + old, 0, ((size_t)cap + 1 - old) * sizeof *gu);
        memset(g->down + old, 0, ((size_t)cap + 1 - old) * sizeof *dn);
        g->max_m = cap;
    }
    if (g->gate_up[m].prim)
        return true;
    /* The weight handle is swapped per expert at run time; start with expert 0. */
    if (!matmul_init_md(&g->gate_up[m], g->kind, m, g->inter, g->h, dnnl_ba,
                        g->packed ? &g->md_gate_up : NULL,
                        g->packed ? g->p_gate[0] : (void *)g->w_gate[0]))
        return false;
    if (!matmul_init_md(&g->down[m], g->kind, m, g->h, g->inter, dnnl_ba,
                        g->packed ? &g->md_down : NULL,
                        g->packed ? g->p_down[0] : (void *)g->w_down[0])) {
        matmul_free(&g->gate_up[m]);
        return false;
    }
    note_impl(g, g->gate_up[m].impl);
    note_impl(g, g->down[m].impl);
    /* First executions allocate scratchpads and touch buffers: keep them untimed. */
    return matmul_exec(&g->gate_up[m]) && matmul_exec(&g->down[m]);
}

static bool run_with(matmul *mm, const void *weights)
{
    if (dnnl_memory_set_data_handle(mm->wei, (void *)weights) != dnnl_success)
        return false;
    return matmul_exec(mm);
}

double gemm_moe_run(gemm_moe *g, int set, const int32_t *counts)
{
    for (int32_t e = 0; e < g->n_experts; e++)
        if (counts[e] > 0 && !ensure_m(g, counts[e])) {
            if (!gemm_error[0])
                set_error("out of memory");
            return -1;
        }
    size_t base = (size_t)set * (size_t)g->n_experts;
    double t0 = bench_now();
    for (int32_t e = 0; e < g->n_experts; e++) {
        int32_t m = counts[e];
        if (m <= 0)
            continue;
        /* gate and up share the [m][H] x [H][I] primitive; down is [m][I] x [I][H].
         * (The activation between them is negligible next to the matmuls.) */
        const void *wg = g->packed ? g->p_gate[base + e] : g->w_gate[base + e];
        const void *wu = g->packed ? g->p_up[base + e] : g->w_up[base + e];
        const void *wd = g->packed ? g->p_down[base + e] : g->w_down[base + e];
        if (!run_with(&g->gate_up[m], wg) || !run_with(&g->gate_up[m], wu) ||
            !run_with(&g->down[m], wd)) {
            set_error("oneDNN: matmul execution failed");
            return -1;
        }
    }
    return bench_now() - t0;
}

void gemm_moe_free(gemm_moe *g)
{
    if (!g)
        return;
    for (int32_t m = 0; m <= g->max_m && g->gate_up; m++) {
        matmul_free(&g->gate_up[m]);
        matmul_free(&g->down[m]);
    }
    free(g->gate_up);
    free(g->down);
    if (g->p_mem)
        for (size_t i = 0; i < 3 * (size_t)g->n_sets * (size_t)g->n_experts; i++)
            if (g->p_mem[i])
                dnnl_memory_destroy(g->p_mem[i]);
    free(g->p_mem);
    free(g->p_gate);
    free(g->p_up);
    free(g->p_down);
    free(g);
}

#else /* !KT_HAVE_ONEDNN */

bool gemm_available(void)
{
    return false;
}
void gemm_set_threads(int n)
{
    (void)n;
}
double gemm_measure(gemm_kind kind, int64_t m, int64_t n, int64_t k, int reps)
{
    set_error("kt-bench was built without oneDNN");
    return -1;
}
double gemm_measure_yardstick(int64_t m, int64_t n, int64_t k, int reps, gemm_kind *kind)
{
    *kind = GEMM_BF16;
    set_error("kt-bench was built without oneDNN");
    return -1;
}
gemm_moe *gemm_moe_create(gemm_kind kind, int64_t h, int64_t inter, int32_t n_experts,
                          int n_sets, const void *const *gate, const void *const *up,
                          const void *const *down)
{
    set_error("kt-bench was built without oneDNN");
    return NULL;
}
double gemm_moe_run(gemm_moe *g, int set, const int32_t *counts)
{
    return -1;
}
void gemm_moe_free(gemm_moe *g)
{
    (void)g;
}
bool gemm_moe_pack(gemm_moe *g, int32_t m_hint)
{
    return false;
}
const char *gemm_moe_impl(const gemm_moe *g)
{
    return "none";
}
static double measure_tag(gemm_kind kind, int64_t m, int64_t n, int64_t k, int reps, int tag,
                          const char **impl)
{
    set_error("kt-bench was built without oneDNN");
    return -1;
}
#define dnnl_format_tag_any 0
#define dnnl_ba 1
#endif

/* ---- kt-bench gemm -------------------------------------------------------- */

static void gemm_usage(FILE *f)
{
    fprintf(f,
            "usage: kt-bench gemm [--m LIST] [--n N] [--k K] [--model NAME] [--reps N]\n"
            "                     [--threads N] [--json FILE]\n"
            "\n"
            "oneDNN matmul throughput on this machine, the compute yardstick of\n"
            "kt-bench moe: C[M][N] = A[M][K] x B[K][N] for BF16 x BF16 -> F32 (TFLOP/s),\n"
            "u8 x s8 -> s32 (TOP/s) and F32 x F32 -> F32, with B packed by oneDNN\n"
            "(\"packed\") and B in the Hugging Face [out][in] layout as stored (\"plain\").\n"
            "Best of N repetitions. A type oneDNN has no kernel for on this CPU (BF16\n"
            "without AVX-512) prints '-' and its reason; the run fails only when nothing ran.\n"
            "\n"
            "  --model NAME   MoE shapes: N = I, K = H (gate/up) of qwen3-30b-a3b (default),\n"
            "                 deepseek-v3, kimi-k2, minimax-m2\n"
            "  --m LIST       rows (tokens per expert), comma-separated (default 1,32,128,512)\n"
            "  --n N, --k K   override the model's shape\n"
            "  --reps N       repetitions (default 5)\n"
            "  --threads N    oneDNN threads (default: physical cores)\n"
            "  --json FILE    also write every row as JSON\n");
}

/* Model shapes shared with kt-bench moe (moe.c). */
bool bench_model_shape(const char *name, int64_t *h, int64_t *inter, int32_t *e, int32_t *k);
bool bench_parse_list(const char *flag, const char *text, int64_t lo, int64_t hi,
                      int64_t *vals, int *count, int max);

int cmd_gemm(int argc, char **argv)
{
    int64_t ms[16] = {1, 32, 128, 512};
    int n_ms = 4;
    int64_t n_over = 0, k_over = 0, reps = 5, threads = 0;
    const char *model = "qwen3-30b-a3b", *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            gemm_usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--m", true, &v, &bad)) {
            if (bad || !bench_parse_list("--m", v, 1, 1 << 20, ms, &n_ms, 16))
                return 2;
        } else if (opt_match(argc, argv, &i, "--model", true, &v, &bad)) {
            if (bad)
                return 2;
            model = v;
        } else if (opt_i64(BENCH_TOOL, argc, argv, &i, "--n", 1, 1 << 20, &n_over, &bad) ||
                   opt_i64(BENCH_TOOL, argc, argv, &i, "--k", 1, 1 << 20, &k_over, &bad) ||
                   opt_i64(BENCH_TOOL, argc, argv, &i, "--reps", 1, 1000, &reps, &bad) ||
                   bench_common_opt(argc, argv, &i, &threads, &json_path, &bad)) {
            if (bad)
                return 2;
        } else {
            fprintf(stderr, "kt-bench gemm: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    int64_t h, inter;
    int32_t e, k;
    if (!bench_model_shape(model, &h, &inter, &e, &k)) {
        fprintf(stderr, "kt-bench gemm: unknown model '%s' (qwen3-30b-a3b, deepseek-v3, "
                        "kimi-k2, minimax-m2)\n", model);
        return 2;
    }
    int64_t n = n_over ? n_over : inter, kk = k_over ? k_over : h;
    if (!gemm_available()) {
        fprintf(stderr, "kt-bench gemm: this kt-bench was built without oneDNN\n");
        return 1;
    }
    bench_hw hw;
    int nt = bench_hw_start(&hw, threads);
    gemm_set_threads(nt);
    bench_json *j = NULL;
    if (json_path && !(j = json_open(json_path, &hw, nt))) {
        fprintf(stderr, "kt-bench gemm: cannot write '%s'\n", json_path);
        return 1;
    }
    printf("oneDNN matmul, N %lld, K %lld, %d threads, best of %d\n", (long long)n,
           (long long)kk, nt, (int)reps);
    printf("%6s  %-6s  %-6s  %10s  %s\n", "M", "type", "B", "T(FL)OP/s", "implementation");
    int rc = 0, measured = 0;
    for (int i = 0; i < n_ms; i++)
        for (int kind = GEMM_BF16; kind <= GEMM_F32; kind++)
            for (int packed = 1; packed >= 0; packed--) {
                const char *impl = "?";
                no_impl = false;
                double tops = measure_tag((gemm_kind)kind, ms[i], n, kk, (int)reps,
                                          packed ? dnnl_format_tag_any : dnnl_ba, &impl);
                const char *type = gemm_kind_name((gemm_kind)kind);
                if (tops < 0) {
                    printf("%6lld  %-6s  %-6s  %10s  %s\n", (long long)ms[i], type,
                           packed ? "packed" : "plain", "-", gemm_last_error());
                    /* a type this CPU has no kernel for (BF16 without AVX-512) is a
                     * fact about the machine; any other failure fails the run */
                    if (!no_impl)
                        rc = 1;
                    continue;
                }
                measured++;
                printf("%6lld  %-6s  %-6s  %10.3f  %s\n", (long long)ms[i], type,
                       packed ? "packed" : "plain", tops, impl);
                json_row(j, "\"bench\":\"gemm\",\"type\":\"%s\",\"weights\":\"%s\",\"M\":%lld,"
                            "\"N\":%lld,\"K\":%lld,\"threads\":%d,\"tops\":%.4f,\"impl\":\"%s\"",
                         type, packed ? "packed" : "plain", (long long)ms[i], (long long)n,
                         (long long)kk, nt, tops, impl);
            }
    if (!measured) {
        fprintf(stderr, "kt-bench gemm: no matmul ran on this machine\n");
        rc = 1;
    }
    if (j && !json_close(j)) {
        fprintf(stderr, "kt-bench gemm: error writing '%s'\n", json_path);
        return 1;
    }
    return rc;
}
