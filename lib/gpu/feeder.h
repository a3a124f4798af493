/* The hybrid decode's CPU side without CUDA host functions (no CUDA here).
 *
 * A decode step hands each MoE layer's rows to the host through mapped pinned
 * memory and then writes the step's number into that layer's `go` word
 * (kt__cuda_host_signal); the stream later polls the layer's `done` word until
 * it holds the same number (kt__cuda_host_await). A host function costs a
 * wake-up of CUDA's callback thread and a stream resume per call, two a layer;
 * the flags cost a PCIe write and a poll.
 *
 * The feeder serves the flags with jobs on the MoE workers' pool, no thread of
 * its own: per layer a gate (every worker spins until `go` holds the step),
 * the layer's CPU experts, and a last job whose first worker writes `done` and
 * queues a later layer's three jobs (kt__feeder_step queues the first few).
 * The workers start the experts the moment the flag lands, and every core may
 * be a worker. (A feeder thread on a CPU outside the workers' measured the
 * same on the H200, 2026-11-30 06:28, and needed that spare CPU.)
 *
 * One thread drives a feeder (kt__feeder_step / kt__feeder_finish alternate)
 * and posts nothing else to the pool meanwhile. Testable without a GPU: any
 * thread may play the stream's part by writing `go` and reading `done`. */
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
    struct kt_pool *pool;       /* the MoE workers' pool, where `submit` queues  */
    /* queues layer's CPU experts on the pool without waiting (on a worker, a
     * few layers ahead, or on the driving thread for the first ones); false
     * after an error (the caller keeps and reports it) */
    bool (*submit)(void *arg, int32_t layer);
    /* on a worker inside a job, after `done` was written (it must not wait for
     * the pool); t_open: when the gate opened */
    void (*served)(void *arg, int32_t layer, double t_open);
    void *arg;
} kt__feeder_config;

/* Makes a feeder (the config is copied; the arrays must outlive it): caller
 * owns, free with kt__feeder_free. KT_ERR_INVALID_ARG, KT_ERR_NOMEM. */
kt_status kt__feeder_start(kt__feeder **out, const kt__feeder_config *cfg);

/* A step numbered seq (nonzero, different from the step before) begins: the
 * first layers' jobs are queued, every configured layer is served once its
 * `go` holds seq. Call before the step's work reaches the stream, with the
 * pool idle. False when they could not be queued (the pool busy: every layer's
 * `done` is then written at once, so the stream does not wait). */
bool kt__feeder_step(kt__feeder *f, uint32_t seq);

/* After the stream finished the step (or failed): waits until the pool is
 * drained. With abort set (the stream failed or gave up) the gates stop
 * waiting for `go` words that will not come and the layers still queued run on
 * whatever their rows hold (their output is not used). Returns false when the
 * step was cut short: aborted before every layer was served, or a submit or a
 * queue failed. */
bool kt__feeder_finish(kt__feeder *f, bool abort);

/* NULL is a no-op. Only between steps. */
void kt__feeder_free(kt__feeder *f);

#endif /* KT_GPU_FEEDER_H */
