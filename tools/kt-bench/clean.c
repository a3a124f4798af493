/* kt-bench's clean decode figures: which calls and stream reads no thread of
 * theirs waited on a run queue during (runq.h), and the short stream windows
 * the clean stream figure comes from. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include "runq.h"

#define MAX_IDS 1024

static int env_int(const char *name, int lo, int hi, int def)
{
    const char *v = getenv(name);
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : 0;
    return v && end != v && *end == '\0' && n >= lo && n <= hi ? (int)n : def;
}

/* The threads started since before[] (bench_thread_ids) and this one. */
static runq *open_since(const int *before, int n_before, char *why, size_t why_size)
{
    static int now[MAX_IDS], ids[MAX_IDS + 1];
    int n_now = bench_thread_ids(now, MAX_IDS);
    int k = runq_new_ids(now, n_now, before, n_before, ids, MAX_IDS);
    ids[k++] = runq_self_tid();
    return runq_open(ids, k, why, why_size);
}

void clean_watch_init(clean_watch *cw)
{
    memset(cw, 0, sizeof *cw);
    cw->limit_ns = runq_clean_limit_us() * 1e3;
    cw->windows = env_int("KT_BENCH_CLEAN_WINDOWS", 1, 64, 4);
    cw->window_bytes = (uint64_t)env_int("KT_BENCH_CLEAN_WINDOW_MIB", 1, 4096, 16) << 20;
    cw->debug = env_int("KT_BENCH_CLEAN_DEBUG", 0, 1, 0);
}

bool clean_watch_stream(clean_watch *cw, const int *before, int n_before)
{
    runq_free(cw->stream);
    cw->stream = open_since(before, n_before, cw->why, sizeof cw->why);
    return cw->stream != NULL;
}

bool clean_watch_calls(clean_watch *cw, const int *before, int n_before)
{
    runq_free(cw->calls);
    cw->calls = open_since(before, n_before, cw->why, sizeof cw->why);
    return cw->calls != NULL;
}

bool clean_watch_on(const clean_watch *cw)
{
    return cw->calls && cw->stream;
}

uint64_t clean_calls_wait(const clean_watch *cw)
{
    return runq_wait_ns(cw->calls);
}

int clean_stream_windows(const clean_watch *cw, bench_team *team, stream_buf *sb, uint64_t *at,
                         double *all, double *clean)
{
    /* the first half of the first thread's slice: the pass over the whole
     * buffer read it first, and the L3 holds the slices' ends */
    uint64_t region = stream_buf_bytes(sb) / (2 * (uint64_t)team_size(team));
    int n_clean = 0;
    for (int i = 0; i < cw->windows; i++) {
        if (*at + cw->window_bytes > region)
            *at = 0;
        uint64_t w0 = runq_wait_ns(cw->stream);
        double g = stream_buf_read_part(team, sb, *at, cw->window_bytes);
        double waited = (double)(runq_wait_ns(cw->stream) - w0);
        *at += cw->window_bytes;
        all[i] = g;
        if (waited <= cw->limit_ns)
            clean[n_clean++] = g;
        if (cw->debug)
            fprintf(stderr, "clean-debug window %.3f GB/s waited %.1f us\n", g, waited * 1e-3);
    }
    return n_clean;
}

void clean_watch_free(clean_watch *cw)
{
    runq_free(cw->calls);
    runq_free(cw->stream);
    cw->calls = cw->stream = NULL;
}
