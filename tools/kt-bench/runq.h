/* kt-bench: how long a set of threads waited on run queues (schedstat's
 * run_delay), read cheaply between timed calls, to tell the calls and stream
 * samples no other process (nor another of ours) took a CPU from. */
#ifndef KT_BENCH_RUNQ_H
#define KT_BENCH_RUNQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RUNQ_MAX_THREADS 512
/* A call or sample is clean when its threads waited at most this long in all:
 * undisturbed decode calls on the 2-core Zen 3 VM wait 20-90 us (wake-ups),
 * calls that lost a core to another process 0.5-5 ms (scripts/decode_ab.c's
 * AB_CLEAN_US). KT_BENCH_CLEAN_US=N sets it. */
#define RUNQ_CLEAN_US_DEFAULT 150.0

/* One line of /proc/.../schedstat. */
typedef struct runq_sample {
    uint64_t run_ns;  /* on a CPU */
    uint64_t wait_ns; /* runnable, waiting for a CPU (run_delay) */
    uint64_t slices;  /* times it got a CPU */
} runq_sample;

/* "RUN WAIT SLICES" with an optional newline; false (out untouched) on anything
 * else: a truncated line, a sign, a non-digit, a value past 2^64 - 1, a fourth
 * field. n: bytes of text (a NUL before them ends it). */
bool runq_parse_schedstat(const char *text, size_t n, runq_sample *out);

typedef struct runq runq;
/* Opens the schedstat files of threads tids[0..n) once (threads that no longer
 * exist are skipped; at most RUNQ_MAX_THREADS). NULL when the figure is not
 * available here, *why saying why: no schedstat file (a kernel without
 * CONFIG_SCHED_INFO), one that does not parse, or "0 0 0" (schedstats off). */
runq *runq_open(const int *tids, int n, char *why, size_t why_size);
/* The threads' run-queue waits summed, ns: a pread of each file (a few us in
 * all); take it outside the timed region. A thread that exited adds nothing
 * more. Non-decreasing. */
uint64_t runq_wait_ns(runq *q);
int runq_threads(const runq *q);
void runq_free(runq *q);

/* The ids in now[0..n_now) that are not in before[0..n_before) (the threads a
 * call started), into out (at most max); how many. */
int runq_new_ids(const int *now, int n_now, const int *before, int n_before, int *out, int max);

/* The calling thread's id (gettid). */
int runq_self_tid(void);

/* KT_BENCH_CLEAN_US, else RUNQ_CLEAN_US_DEFAULT. */
double runq_clean_limit_us(void);

#endif
