/* Worker pool: pinned workers, lock-free job ring, spin-then-futex waits. */
#define _GNU_SOURCE
#include "threadpool.h"

#include <errno.h>
#include <hwloc.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spin iterations (pause) before sleeping on a futex: waiting for the next
 * job (about a millisecond: keeps decode wake-up latency low) and inside a job
 * (barriers, job hand-over: peers normally arrive within microseconds). Past
 * KT__SPIN_YIELD_AFTER iterations a spinner yields now and then, so a peer that
 * shares its core (an oversubscribed machine) gets to run. */
#define SPIN_IDLE 50000
#define SPIN_SYNC 4000

#define MAX_POOLS 64

typedef struct worker {
    kt_pool *pool;
    int tid;
    int pu;          /* hwloc logical index of the PU to pin to; -1: none */
    pthread_t thread;
    bool started;
} worker;

struct kt_pool {
    int n;
    int n_pools;
    int pool_first[MAX_POOLS + 1];
    int pool_node[MAX_POOLS];
    int *pool_of;
    worker *workers;
    hwloc_topology_t topo;
    bool have_topo;
    /* kt__pool_wait from a thread on a CPU a worker is pinned to (a caller that
     * shares a core with a worker): sleep at once instead of spinning, which
     * kept that worker off its core (wait_sleeps). worker_cpu[c]: a worker is
     * pinned to OS CPU c < n_cpu; wait_mode 0 spin first (KT_POOL_WAIT=spin),
     * 1 auto (the default), 2 always sleep at once (KT_POOL_WAIT=sleep). */
    bool *worker_cpu;
    int n_cpu;
    int wait_mode;
    /* kt__pool_call: the OS CPU of the last worker (whose share a calling thread
     * runs; -1: not pinned) and whether the workers cover every CPU the process
     * may use (kt__pool_covers) */
    int last_cpu;
    bool covers;

    struct {
        kt_pool_fn fn;
        void *ctx;
        /* job seq << 1, | 1 where the poster runs the last worker's share
         * (kt__pool_call); the last worker reads it to skip such jobs */
        _Atomic uint64_t tag;
    } ring[KT__POOL_RING];

    _Alignas(64) _Atomic uint64_t posted;
    _Atomic uint32_t post_gen;   /* futex word: bumped on post and stop */
    _Atomic uint32_t idle_sleepers;
    _Atomic int stop;
    /* the last worker, after a job whose share a caller ran, sleeps here: bumped
     * by the posts it has to run and on stop, not by kt__pool_call's */
    _Atomic uint32_t last_gen;
    _Atomic uint32_t last_sleepers;

    _Alignas(64) _Atomic uint64_t done;
    _Atomic uint32_t done_gen;   /* futex word: bumped when a job finishes */
    _Atomic uint32_t done_sleepers;
    _Atomic uint32_t finished;   /* workers done with the current job */

    _Alignas(64) _Atomic uint32_t bar_count;
    _Atomic uint32_t bar_gen;    /* futex word */
    _Atomic uint32_t bar_sleepers;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* Sleeps on `gen` while it still equals `seen`, counting itself in `sleepers`
 * so that wakers skip the syscall when nobody sleeps. */
static void sleep_on(_Atomic uint32_t *gen, uint32_t seen, _Atomic uint32_t *sleepers)
{
    atomic_fetch_add(sleepers, 1);
    if (atomic_load(gen) == seen)
        futex_wait(gen, seen);
    atomic_fetch_sub(sleepers, 1);
}

static void bump_and_wake(_Atomic uint32_t *gen, _Atomic uint32_t *sleepers)
{
    atomic_fetch_add(gen, 1);
    if (atomic_load(sleepers) > 0)
        futex_wake_all(gen);
}

/* Waits until pool->done >= seq. */
static void wait_done(kt_pool *p, uint64_t seq, int spin)
{
    for (int i = 0;; i++) {
        uint32_t g = atomic_load(&p->done_gen);
        if (atomic_load_explicit(&p->done, memory_order_acquire) >= seq)
            return;
        if (i < spin)
            kt__spin_step(i);
        else
            sleep_on(&p->done_gen, g, &p->done_sleepers);
    }
}

void kt__pool_barrier(kt_pool *p, int tid)
{
    (void)tid;
    if (p->n == 1)
        return;
    uint32_t gen = atomic_load(&p->bar_gen);
    if (atomic_fetch_add(&p->bar_count, 1) == (uint32_t)p->n - 1) {
        atomic_store(&p->bar_count, 0);
        bump_and_wake(&p->bar_gen, &p->bar_sleepers);
        return;
    }
    for (int i = 0; atomic_load(&p->bar_gen) == gen; i++) {
        if (i < SPIN_SYNC)
            kt__spin_step(i);
        else
            sleep_on(&p->bar_gen, gen, &p->bar_sleepers);
    }
}

/* One share of job seq finished: the last one publishes the job done. */
static void finish_share(kt_pool *p, uint64_t seq)
{
    if (atomic_fetch_add(&p->finished, 1) == (uint32_t)p->n - 1) {
        atomic_store(&p->finished, 0);
        atomic_store_explicit(&p->done, seq + 1, memory_order_release);
        bump_and_wake(&p->done_gen, &p->done_sleepers);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    kt_pool *p = w->pool;
    if (w->pu >= 0 && p->have_topo) {
        hwloc_obj_t pu = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_PU, (unsigned)w->pu);
        if (pu)
            hwloc_set_cpubind(p->topo, pu->cpuset, HWLOC_CPUBIND_THREAD);
    }
    bool last = w->tid == p->n - 1;
    /* last worker: the previous job's share was a caller's (kt__pool_call); it
     * most likely runs the next one's too, on this CPU, so sleep, don't spin */
    bool napping = false;
    uint64_t next = 0;
    for (;;) {
        /* idle: wait for job `next` (or stop) */
        _Atomic uint32_t *gen = napping ? &p->last_gen : &p->post_gen;
        for (int i = 0;; i++) {
            uint32_t g = atomic_load(gen);
            if (atomic_load_explicit(&p->posted, memory_order_acquire) > next)
                break;
            if (atomic_load(&p->stop))
                return NULL;
            if (napping)
                sleep_on(gen, g, &p->last_sleepers);
            else if (i < SPIN_IDLE)
                kt__spin_step(i);
            else
                sleep_on(gen, g, &p->idle_sleepers);
        }
        unsigned slot = (unsigned)(next % KT__POOL_RING);
        if (last) {
            /* not this job's plain tag: its poster runs this share, or ran it
             * and the slot already holds a later job (this job could not have
             * finished without this share otherwise) */
            napping = atomic_load_explicit(&p->ring[slot].tag, memory_order_acquire) != next << 1;
            if (napping) {
                next++;
                continue;
            }
        }
        /* a job starts only after every worker finished the previous one */
        wait_done(p, next, SPIN_SYNC);
        p->ring[slot].fn(p->ring[slot].ctx, w->tid);
        finish_share(p, next);
        next++;
    }
}

/* Fills w[i].pu and the pool layout from the hwloc topology: cores ordered by
 * NUMA node, one worker per core. */
static int plan_placement(kt_pool *p, int n, int n_pools_req, bool pin, int *core_node)
{
    int n_cores = 0;
    if (p->have_topo)
        n_cores = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_CORE);
    typedef struct { int pu, node; } slot;
    slot *slots = NULL;
    int n_slots = 0;
    if (n_cores > 0) {
        slots = kt__calloc((size_t)n_cores, sizeof *slots);
        if (!slots)
            return -1;
        for (int c = 0; c < n_cores; c++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_CORE, (unsigned)c);
            hwloc_obj_t pu = core ? hwloc_get_obj_inside_cpuset_by_type(
                                        p->topo, core->cpuset, HWLOC_OBJ_PU, 0)
                                  : NULL;
            if (!pu)
                continue;
            int node = core->nodeset ? hwloc_bitmap_first(core->nodeset) : 0;
            slots[n_slots].pu = (int)pu->logical_index;
            slots[n_slots].node = node < 0 ? 0 : node;
            n_slots++;
        }
        /* stable sort by node (insertion sort: few cores) */
        for (int i = 1; i < n_slots; i++) {
            slot s = slots[i];
            int j = i - 1;
            while (j >= 0 && slots[j].node > s.node) {
                slots[j + 1] = slots[j];
                j--;
            }
            slots[j + 1] = s;
        }
    }
    for (int i = 0; i < n; i++) {
        bool have = pin && n_slots > 0 && i < n_slots;
        p->workers[i].pu = have ? slots[i].pu : -1;
        core_node[i] = n_slots > 0 ? slots[i % n_slots].node : 0;
    }
    /* pools: one per distinct node of the used cores unless a count is asked */
    int distinct = 1;
    for (int i = 1; i < n; i++)
        if (core_node[i] != core_node[i - 1])
            distinct++;
    int np = n_pools_req > 0 ? n_pools_req : distinct;
    if (np > n)
        np = n;
    if (np > MAX_POOLS)
        np = MAX_POOLS;
    p->n_pools = np;
    if (np == distinct && n_slots > 0) {
        int k = 0;
        p->pool_first[0] = 0;
        for (int i = 1; i < n; i++)
            if (core_node[i] != core_node[i - 1])
                p->pool_first[++k] = i;
    } else {
        for (int k = 0; k < np; k++)
            p->pool_first[k] = (int)((int64_t)n * k / np);
    }
    p->pool_first[np] = n;
    for (int k = 0; k < np; k++) {
        for (int i = p->pool_first[k]; i < p->pool_first[k + 1]; i++)
            p->pool_of[i] = k;
        int t = p->pool_first[k];
        p->pool_node[k] = (pin && n_slots > 0 && t < n_slots) ? core_node[t] : -1;
    }
    kt__free(slots);
    return 0;
}

/* The OS index of the CPU worker i is pinned to; -1: not pinned. */
static int worker_os_cpu(const kt_pool *p, int i)
{
    if (!p->have_topo || p->workers[i].pu < 0)
        return -1;
    hwloc_obj_t pu = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_PU, (unsigned)p->workers[i].pu);
    return pu ? (int)pu->os_index : -1;
}

/* Whether the workers are pinned to every CPU the process may use. */
static bool covers_allowed(const kt_pool *p)
{
    if (!p->have_topo)
        return false;
    hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(p->topo);
    hwloc_bitmap_t set = allowed ? hwloc_bitmap_dup(allowed) : NULL;
    if (!set)
        return false;
    for (int i = 0; i < p->n; i++) {
        hwloc_obj_t pu = p->workers[i].pu < 0 ? NULL
                         : hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_PU, (unsigned)p->workers[i].pu);
        if (pu)
            hwloc_bitmap_andnot(set, set, pu->cpuset);
    }
    bool all = hwloc_bitmap_iszero(set);
    hwloc_bitmap_free(set);
    return all;
}

kt_status kt__pool_create(kt_pool **out, const kt_pool_config *cfg)
{
    KT_CHECK(out != NULL && cfg != NULL);
    *out = NULL;
    kt_pool *p = kt__calloc(1, sizeof *p);
    if (!p)
        return kt__error(KT_ERR_NOMEM, "thread pool: out of memory");
    if (hwloc_topology_init(&p->topo) == 0) {
        if (hwloc_topology_load(p->topo) == 0)
            p->have_topo = true;
        else
            hwloc_topology_destroy(p->topo);
    }
    int n = cfg->n_threads;
    if (n <= 0) {
        n = p->have_topo ? hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_CORE) : 0;
        if (n <= 0) {
            long c = sysconf(_SC_NPROCESSORS_ONLN);
            n = c > 0 ? (int)c : 1;
        }
    }
    if (n > 4096) {
        kt__pool_free(p);
        return kt__error(KT_ERR_INVALID_ARG, "thread pool: %d threads is too many", n);
    }
    p->n = n;
    p->workers = kt__calloc((size_t)n, sizeof *p->workers);
    p->pool_of = kt__calloc((size_t)n, sizeof *p->pool_of);
    int *core_node = kt__calloc((size_t)n, sizeof *core_node);
    if (!p->workers || !p->pool_of || !core_node ||
        plan_placement(p, n, cfg->n_pools, cfg->pin, core_node) < 0) {
        kt__free(core_node);
        kt__pool_free(p);
        return kt__error(KT_ERR_NOMEM, "thread pool: out of memory");
    }
    kt__free(core_node);
    const char *wm = getenv("KT_POOL_WAIT");
    p->wait_mode = wm && !strcmp(wm, "spin") ? 0 : wm && !strcmp(wm, "sleep") ? 2 : 1;
    for (int i = 0; i < n; i++)
        if (worker_os_cpu(p, i) + 1 > p->n_cpu)
            p->n_cpu = worker_os_cpu(p, i) + 1;
    if (p->n_cpu > 0 && !(p->worker_cpu = kt__calloc((size_t)p->n_cpu, sizeof(bool)))) {
        kt__pool_free(p);
        return kt__error(KT_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 0; i < n; i++)
        if (worker_os_cpu(p, i) >= 0)
            p->worker_cpu[worker_os_cpu(p, i)] = true;
    p->last_cpu = worker_os_cpu(p, n - 1);
    p->covers = covers_allowed(p);
    for (int i = 0; i < n; i++) {
        worker *w = &p->workers[i];
        w->pool = p;
        w->tid = i;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            kt__pool_free(p);
            return kt__error(KT_ERR_INTERNAL, "thread pool: pthread_create failed: %s",
                             strerror(rc));
        }
        w->started = true;
    }
    *out = p;
    return KT_OK;
}

void kt__pool_free(kt_pool *p)
{
    if (!p)
        return;
    if (p->workers) {
        /* finish what was posted, then stop */
        wait_done(p, atomic_load(&p->posted), SPIN_SYNC);
        atomic_store(&p->stop, 1);
        bump_and_wake(&p->post_gen, &p->idle_sleepers);
        futex_wake_all(&p->post_gen);
        bump_and_wake(&p->last_gen, &p->last_sleepers);
        futex_wake_all(&p->last_gen);
        for (int i = 0; i < p->n; i++)
            if (p->workers[i].started)
                pthread_join(p->workers[i].thread, NULL);
    }
    kt__free(p->workers);
    kt__free(p->pool_of);
    kt__free(p->worker_cpu);
    if (p->have_topo)
        hwloc_topology_destroy(p->topo);
    kt__free(p);
}

int kt__pool_bind_spare(kt_pool *p)
{
    if (!p || !p->have_topo)
        return -1;
    hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(p->topo);
    hwloc_bitmap_t set = allowed ? hwloc_bitmap_dup(allowed) : NULL;
    if (!set)
        return -1;
    for (int i = 0; i < p->n; i++) {
        if (p->workers[i].pu < 0)
            continue;
        hwloc_obj_t pu = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_PU, (unsigned)p->workers[i].pu);
        if (pu)
            hwloc_bitmap_andnot(set, set, pu->cpuset);
    }
    if (hwloc_bitmap_iszero(set))
        hwloc_bitmap_copy(set, allowed);
    int n = hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_THREAD) == 0 ? hwloc_bitmap_weight(set)
                                                                        : -1;
    hwloc_bitmap_free(set);
    return n;
}

int kt__pool_n_threads(const kt_pool *p) { return p->n; }
int kt__pool_n_pools(const kt_pool *p) { return p->n_pools; }
int kt__pool_pool_of(const kt_pool *p, int tid) { return p->pool_of[tid]; }
int kt__pool_first(const kt_pool *p, int k) { return p->pool_first[k]; }
int kt__pool_count(const kt_pool *p, int k) { return p->pool_first[k + 1] - p->pool_first[k]; }
int kt__pool_node(const kt_pool *p, int k) { return p->pool_node[k]; }

/* Queues job fn; caller: the poster runs the last worker's share. */
static bool post(kt_pool *p, kt_pool_fn fn, void *ctx, bool caller)
{
    uint64_t posted = atomic_load(&p->posted);
    if (posted - atomic_load(&p->done) >= KT__POOL_RING)
        return false;
    unsigned slot = (unsigned)(posted % KT__POOL_RING);
    p->ring[slot].fn = fn;
    p->ring[slot].ctx = ctx;
    atomic_store_explicit(&p->ring[slot].tag, posted << 1 | (caller ? 1 : 0),
                          memory_order_release);
    atomic_store_explicit(&p->posted, posted + 1, memory_order_release);
    bump_and_wake(&p->post_gen, &p->idle_sleepers);
    if (!caller)
        bump_and_wake(&p->last_gen, &p->last_sleepers);
    return true;
}

bool kt__pool_post(kt_pool *p, kt_pool_fn fn, void *ctx)
{
    return post(p, fn, ctx, false);
}

bool kt__pool_covers(const kt_pool *p) { return p->covers; }

uint64_t kt__pool_posted(const kt_pool *p) { return atomic_load(&((kt_pool *)p)->posted); }
uint64_t kt__pool_done(const kt_pool *p) { return atomic_load(&((kt_pool *)p)->done); }

/* Whether kt__pool_wait should sleep at once: the caller's CPU runs a pinned
 * worker, which the spin (up to KT__SPIN_YIELD_AFTER pauses before its first
 * yield, tens of us) would keep from starting the job just posted. On the
 * 16-core Xeon, kt-bench's thread on worker 0's CPU, Qwen3-30B-A3B decode
 * T=1 (12-01 04:02): worker 0 started 14-27 us after the submit with the spin,
 * 3-5 us sleeping, the others mostly 1-3 us; the workers' wait after phase 0
 * fell from 21-30 to 5-8 us a call, and AMXINT4 read 87.4 / 95.2 / 99.2 / 93.6
 * GB/s against 88.5 / 86.6 / 86.8 / 84.0 (AMXINT8 ahead in 3 of 4 rounds, BF16
 * in 4 of 4; docs/performance.md, session 13). */
static bool wait_sleeps(const kt_pool *p)
{
    if (p->wait_mode != 1)
        return p->wait_mode == 2;
    int cpu = sched_getcpu();
    return cpu >= 0 && cpu < p->n_cpu && p->worker_cpu[cpu];
}

void kt__pool_wait(kt_pool *p, uint64_t seq)
{
    wait_done(p, seq, wait_sleeps(p) ? 0 : SPIN_SYNC);
}

/* Whether the calling thread may run on the last worker's CPU; if so and it
 * runs on another worker's now, it moves there: bound to that CPU alone, then
 * to its own CPUs again (it stays, nothing pulls it back). Otherwise it would
 * share that worker's CPU until the scheduler's balancing moved it (up to
 * milliseconds: after kt-bench's stream reads, which pin it for a while). */
static bool may_run_last(const kt_pool *p)
{
    if (p->n < 2 || p->last_cpu < 0 || p->last_cpu >= CPU_SETSIZE)
        return false;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || !CPU_ISSET(p->last_cpu, &set))
        return false;
    int cpu = sched_getcpu();
    if (cpu != p->last_cpu && cpu >= 0 && cpu < p->n_cpu && p->worker_cpu[cpu]) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(p->last_cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0)
            sched_setaffinity(0, sizeof set, &set);
    }
    return true;
}

bool kt__pool_call(kt_pool *p, kt_pool_fn fn, void *ctx)
{
    if (!may_run_last(p)) {
        if (!post(p, fn, ctx, false))
            return false;
        kt__pool_wait(p, kt__pool_posted(p));
        return true;
    }
    uint64_t seq = atomic_load(&p->posted);
    if (!post(p, fn, ctx, true))
        return false;
    /* the last share: after every worker finished the previous job, as theirs */
    wait_done(p, seq, wait_sleeps(p) ? 0 : SPIN_SYNC);
    fn(ctx, p->n - 1);
    finish_share(p, seq);
    /* the rest: spin on the last worker's CPU (its worker sleeps), sleep on
     * another worker's */
    int cpu = sched_getcpu();
    bool on_worker = cpu >= 0 && cpu < p->n_cpu && p->worker_cpu[cpu] && cpu != p->last_cpu;
    wait_done(p, seq + 1, on_worker && p->wait_mode != 0 ? 0 : SPIN_SYNC);
    return true;
}

void kt__pool_run(kt_pool *p, kt_pool_fn fn, void *ctx)
{
    while (!kt__pool_post(p, fn, ctx))
        kt__pool_wait(p, kt__pool_done(p) + 1);
    kt__pool_wait(p, kt__pool_posted(p));
}
