/* Expert moves copied while steps run (no CUDA here).
 *
 * kt_context_gpu_move_experts hands a batch of copies (host weights into
 * spare device slots) to the mover's thread and returns; the forward that
 * starts after the last copy landed publishes the moves (device tables, CPU
 * masks) between two steps. The copy itself is a callback (lib/gpu/gpu.c:
 * through pinned staging on a stream of its own), so that decode never waits
 * for the bytes; tests drive the thread with memcpy. */
#ifndef KT_GPU_MOVER_H
#define KT_GPU_MOVER_H

#include <stdbool.h>
#include <stddef.h>

#include "kt/core.h"

typedef struct kt__mover_piece {
    void *dst;
    const void *src;
    size_t bytes;
} kt__mover_piece;

typedef struct kt__mover_ops {
    /* on the mover's thread: queue one copy (may return before it lands);
     * 0 on success, else a message in err */
    int (*copy)(void *arg, void *dst, const void *src, size_t bytes, char *err, size_t n);
    /* on the mover's thread: every queued copy has landed; 0 on success */
    int (*finish)(void *arg, char *err, size_t n);
    void *arg;
} kt__mover_ops;

typedef struct kt__mover kt__mover;

/* Starts the thread (idle until a batch comes). KT_ERR_NOMEM, KT_ERR_INTERNAL. */
kt_status kt__mover_create(kt__mover **out, const kt__mover_ops *ops);

/* Waits for a running batch, stops the thread. NULL is a no-op. */
void kt__mover_free(kt__mover *m);

/* Hands the thread a batch (the pieces are copied). KT_ERR_INVALID_ARG while
 * the previous batch has not been collected (kt__mover_poll / kt__mover_wait),
 * KT_ERR_NOMEM. */
kt_status kt__mover_start(kt__mover *m, const kt__mover_piece *pieces, size_t n);

/* Whether a batch was started and not yet collected. */
bool kt__mover_busy(const kt__mover *m);

/* Collects a finished batch: true with *st its outcome (KT_ERR_IO naming the
 * copy that failed), false while it still copies or when none was started. */
bool kt__mover_poll(kt__mover *m, kt_status *st);

/* Blocks until the started batch finished and collects it (KT_OK when none). */
kt_status kt__mover_wait(kt__mover *m);

#endif /* KT_GPU_MOVER_H */
