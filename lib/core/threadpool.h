/*
 * Internal worker pool (lib/core). Not installed.
 *
 * Workers are created once, pinned one per physical core (hwloc) and grouped
 * into pools (one per NUMA node by default; the pool of a worker decides which
 * slice of the weights it touches). A job is a function every worker runs
 * once, fn(ctx, tid); jobs run strictly in posting order, and a job starts on
 * any worker only after every worker finished the previous one, so jobs may
 * share workspaces. Inside a job, kt__pool_barrier() synchronises all workers.
 *
 * Posting never blocks and never allocates (ring of KT__POOL_RING jobs), so it
 * may run in a CUDA host function. Idle workers spin briefly, then sleep on a
 * futex. One producer thread at a time may post; any thread may wait.
 */
#ifndef KT_CORE_THREADPOOL_H
#define KT_CORE_THREADPOOL_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include "kt_internal.h"

#define KT__POOL_RING 16

typedef struct kt_pool kt_pool;
typedef void (*kt_pool_fn)(void *ctx, int tid);

typedef struct kt_pool_config {
    int n_threads;   /* 0: physical cores                                 */
    int n_pools;     /* 0: NUMA nodes of the cores used; may exceed them  */
    bool pin;        /* pin worker i to one PU of its core                */
} kt_pool_config;

/* Starts the workers. Caller owns *out; free with kt__pool_free(). */
kt_status kt__pool_create(kt_pool **out, const kt_pool_config *cfg);
/* Waits for posted jobs, stops and joins the workers; NULL is a no-op. */
void kt__pool_free(kt_pool *pool);

int kt__pool_n_threads(const kt_pool *pool);
int kt__pool_n_pools(const kt_pool *pool);
/* Pool of worker tid; workers of a pool have consecutive tids. */
int kt__pool_pool_of(const kt_pool *pool, int tid);
/* First tid and number of workers of pool p. */
int kt__pool_first(const kt_pool *pool, int p);
int kt__pool_count(const kt_pool *pool, int p);
/* NUMA node (OS index) of pool p; -1 when unknown or not pinned. */
int kt__pool_node(const kt_pool *pool, int p);

/* Queues fn(ctx, tid) on every worker. Returns false when KT__POOL_RING jobs
 * are pending (nothing queued). Lock-free, no allocation. */
bool kt__pool_post(kt_pool *pool, kt_pool_fn fn, void *ctx);
/* Jobs posted so far / finished so far (monotonic counters). */
uint64_t kt__pool_posted(const kt_pool *pool);
uint64_t kt__pool_done(const kt_pool *pool);
/* Blocks until kt__pool_done() >= seq (spin, then sleep; sleep at once where
 * the calling thread is on a CPU a worker is pinned to: KT_POOL_WAIT=auto, the
 * default; spin / sleep force either). */
void kt__pool_wait(kt_pool *pool, uint64_t seq);
/* Posts fn and runs the last worker's share (tid n - 1) on the calling thread,
 * then waits for the job: no wake-up at either end, where the caller would
 * otherwise sleep on a worker's CPU. That worker skips the job and, until a
 * plain post, sleeps instead of spinning, leaving its CPU to the caller. Where
 * the caller may not run on that worker's CPU, a plain post and wait. Returns
 * false when KT__POOL_RING jobs are pending (nothing queued). One thread at a
 * time, the posting thread; not from a worker. */
bool kt__pool_call(kt_pool *pool, kt_pool_fn fn, void *ctx);
/* Whether the workers are pinned to every CPU the process may use (a thread
 * that waits for them then shares a CPU with one). */
bool kt__pool_covers(const kt_pool *pool);
/* Posts and waits; for callers that are not in a hurry. */
void kt__pool_run(kt_pool *pool, kt_pool_fn fn, void *ctx);

/* Binds the calling thread (not a worker) to the CPUs the process may use
 * minus those the workers are pinned to, or to all of them when the workers
 * cover every one: a thread that submits and waits (CUDA's host-function
 * thread) then never takes a pinned worker's core, whatever CPU mask it
 * inherited from the thread that created it. Returns the number of CPUs it
 * is bound to, -1 when it could not bind (no topology, or the OS refused). */
int kt__pool_bind_spare(kt_pool *pool);

/* One step of a spin-wait (pause on x86: leaves the core's sibling thread and
 * the memory system alone while the waited-for line does not change). */
static inline void kt__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Step i of a spin-wait loop: a pause, and past KT__SPIN_YIELD_AFTER steps a
 * yield every 256, so a peer that shares the core (an oversubscribed machine)
 * gets to run. */
#define KT__SPIN_YIELD_AFTER 1024
static inline void kt__spin_step(int i)
{
    if (i >= KT__SPIN_YIELD_AFTER && (i & 255) == 0)
        sched_yield();
    else
        kt__cpu_relax();
}

/* Barrier of all workers; call only from inside a job, from every worker. */
void kt__pool_barrier(kt_pool *pool, int tid);

#endif /* KT_CORE_THREADPOOL_H */
