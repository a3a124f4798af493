/* The hybrid decode's CPU side without CUDA host functions (no CUDA here).
 *
 * A decode step hands each MoE layer's rows to the host through mapped pinned
 * memory and then writes the step's number into that layer's `go` word
 * (kt__cuda_host_signal); the stream later polls the layer's `done` word until
 * it holds the same number (kt__cuda_host_await). A host function costs a
 * wake-up of CUDA's callback thread and a stream resume per call, two a layer;
 * the flags cost a PCIe write and a poll. Two ways to serve the flags:
 *
 * - thread: a feeder thread bound to a CPU outside the MoE workers' spins on
 *   `go` for each layer of the step in turn, submits the layer's CPU experts,
 *   spins until the workers are done and writes `done`. Between steps it spins
 *   for a while (a decode-mode window), then sleeps until the next step. Needs
 *   a CPU no worker is pinned to.
 * - gated: no thread; per layer three jobs on the workers' pool: a gate (every
 *   worker spins until `go`), the CPU experts, and a last job whose first
 *   worker writes `done` and queues a later layer's three jobs (the first
 *   few layers' are queued by kt__feeder_step). The workers start the experts
 *   the moment the flag lands, and every core may be a worker.
 *
 * One thread drives a feeder (kt__feeder_step / kt__feeder_finish alternate).
 * Testable without a GPU: any thread may play the stream's part by writing
 * `go` and reading `done`. */
#ifndef KT_GPU_FEEDER_H
#define KT_GPU_FEEDER_H

#include <stdbool.h>
#include <stdint.h>

#include "kt/core.h"

struct kt_pool;
typedef struct kt__feeder kt__feeder;

typedef struct kt__feeder_config {
    const int32_t *layers;      /* the layers served each step, in stream order */
    int32_t n_layers;
    volatile uint32_t *go;      /* [layer]: written by the stream, read here     */
    volatile uint32_t *done;    /* [layer]: written here, polled by the stream   */
    struct kt_pool *pool;       /* the MoE workers' pool (the jobs of `submit`) */
    bool gated;                 /* gate jobs on the workers instead of a thread */
    bool bind_spare;            /* thread: bind to the CPUs outside the workers'
                                   (refused when there are none); off in tests */
    /* queues layer's CPU experts on the pool without waiting (thread mode: on
     * the feeder's thread once `go` holds the step; gated: on a worker, a few
     * layers ahead); false after an error (the caller keeps and reports it) */
    bool (*submit)(void *arg, int32_t layer);
    /* after `done` was written (thread: the feeder's thread; gated: a worker,
     * inside a job: it must not wait for the pool); t_open: when the feeder
     * saw `go` */
    void (*served)(void *arg, int32_t layer, double t_open);
    void *arg;
    double idle_spin_s;         /* thread: spin this long after a step, then sleep */
} kt__feeder_config;

/* Starts the feeder (the config is copied; the arrays must outlive it).
 * Thread mode: KT_ERR_UNSUPPORTED with bind_spare when no CPU is left outside
 * the workers' (a spinning feeder would take a worker's core). KT_ERR_INVALID_ARG,
 * KT_ERR_NOMEM, KT_ERR_IO otherwise.
 * Free with kt__feeder_free. */
kt_status kt__feeder_start(kt__feeder **out, const kt__feeder_config *cfg);

/* A step numbered seq (nonzero, different from the step before) begins: every
 * configured layer is served once its `go` holds seq. Call before the step's
 * work reaches the stream. Gated: false when the first layers' jobs could not
 * be queued (the pool busy with other jobs: nothing was queued). */
bool kt__feeder_step(kt__feeder *f, uint32_t seq);

/* After the stream finished the step (or failed): waits until the feeder is
 * idle again (gated: the pool drained). With abort set (the stream failed or
 * gave up) the feeder stops waiting for `go` words that will not come; gated,
 * the layers still queued then run on whatever their rows hold (their output
 * is not used). Returns false when the step was cut short: aborted before every
 * layer was served, or a submit failed. */
bool kt__feeder_finish(kt__feeder *f, bool abort);

/* Stops and joins the thread; NULL is a no-op. */
void kt__feeder_free(kt__feeder *f);

/* Spins (no sleep) until `pool` has finished every job posted to it. */
void kt__feeder_wait_pool(struct kt_pool *pool);

#endif /* KT_GPU_FEEDER_H */
