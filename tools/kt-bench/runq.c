/* Run-queue wait of a set of threads, from /proc/self/task/TID/schedstat
 * ("<ns on a CPU> <ns runnable but waiting for one> <timeslices>"). kt-bench
 * reads it before and after each decode call and each stream sample: a call
 * during which a thread of its own waited for a CPU (another process, or one of
 * ours, had it) was slow for a reason that is not the kernel's. Standalone (no
 * libkt), so that its test links it alone. */
#define _GNU_SOURCE
#include "runq.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One unsigned decimal field at *p (digits only: strtoull would take "-1" and
 * wrap it); false on no digit or a value past 2^64 - 1. */
static bool parse_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (s >= end || *s < '0' || *s > '9')
        return false;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *p = s;
    *out = v;
    return true;
}

bool runq_parse_schedstat(const char *text, size_t n, runq_sample *out)
{
    if (!text || !out)
        return false;
    /* the text may hold a NUL before n (a short read into a zeroed buffer) */
    const char *end = memchr(text, '\0', n);
    end = end ? end : text + n;
    const char *p = text;
    uint64_t f[3];
    for (int i = 0; i < 3; i++) {
        if (i && (p >= end || *p++ != ' '))
            return false;
        if (!parse_u64(&p, end, &f[i]))
            return false;
    }
    /* the line ends here (a fourth field or trailing text: not the format we know) */
    if (p < end && *p != '\n')
        return false;
    out->run_ns = f[0];
    out->wait_ns = f[1];
    out->slices = f[2];
    return true;
}

struct runq {
    int n;
    int fd[RUNQ_MAX_THREADS];
    uint64_t last[RUNQ_MAX_THREADS]; /* each thread's wait at the last read */
};

/* One thread's schedstat; false when the read or the parse fails (the thread
 * exited: ESRCH). */
static bool read_one(int fd, runq_sample *s)
{
    char buf[128];
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    if (got <= 0)
        return false;
    buf[got] = '\0';
    return runq_parse_schedstat(buf, (size_t)got, s);
}

runq *runq_open(const int *tids, int n, char *why, size_t why_size)
{
    if (why_size)
        why[0] = '\0';
    runq *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(why, why_size, "out of memory");
        return NULL;
    }
    bool any_counted = false;
    for (int i = 0; i < n && q->n < RUNQ_MAX_THREADS; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tids[i]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        runq_sample s;
        if (fd < 0) {
            char dir[48];
            snprintf(dir, sizeof dir, "/proc/self/task/%d", tids[i]);
            if (!access(dir, F_OK)) {
                /* the thread is there but not the file: no CONFIG_SCHED_INFO */
                snprintf(why, why_size, "%s is missing (a kernel without schedstat)", path);
                runq_free(q);
                return NULL;
            }
            continue; /* the thread has exited */
        }
        if (!read_one(fd, &s)) {
            close(fd);
            snprintf(why, why_size, "%s does not read as 3 numbers", path);
            runq_free(q);
            return NULL;
        }
        /* a thread that has run has run_ns and slices above 0 unless the kernel
         * keeps no schedstats (it then writes "0 0 0") */
        any_counted |= s.run_ns > 0 || s.slices > 0;
        q->fd[q->n] = fd;
        q->last[q->n] = s.wait_ns;
        q->n++;
    }
    if (!q->n) {
        snprintf(why, why_size, "no thread's schedstat could be opened");
        runq_free(q);
        return NULL;
    }
    if (!any_counted) {
        snprintf(why, why_size, "schedstat reads \"0 0 0\" (the kernel keeps no schedstats)");
        runq_free(q);
        return NULL;
    }
    return q;
}

uint64_t runq_wait_ns(runq *q)
{
    uint64_t sum = 0;
    for (int i = 0; i < q->n; i++) {
        runq_sample s;
        /* a thread that exited or a line that no longer parses keeps its last
         * figure: it adds no wait from then on */
        if (read_one(q->fd[i], &s) && s.wait_ns >= q->last[i])
            q->last[i] = s.wait_ns;
        sum += q->last[i];
    }
    return sum;
}

int runq_threads(const runq *q)
{
    return q ? q->n : 0;
}

void runq_free(runq *q)
{
    if (!q)
        return;
    for (int i = 0; i < q->n; i++)
        close(q->fd[i]);
    free(q);
}

int runq_new_ids(const int *now, int n_now, const int *before, int n_before, int *out, int max)
{
    int k = 0;
    for (int i = 0; i < n_now && k < max; i++) {
        bool old = false;
        for (int j = 0; j < n_before && !old; j++)
            old = now[i] == before[j];
        if (!old)
            out[k++] = now[i];
    }
    return k;
}

int runq_self_tid(void)
{
    return (int)gettid();
}

double runq_clean_limit_us(void)
{
    const char *v = getenv("KT_BENCH_CLEAN_US");
    char *end = NULL;
    double us = v ? strtod(v, &end) : -1;
    return v && end != v && *end == '\0' && us >= 0 && us <= 1e9 ? us : RUNQ_CLEAN_US_DEFAULT;
}
