/* kt-bench internals: machine description, a pinned thread team, timing, the
 * machine-limit yardsticks (stream bandwidth, oneDNN matmul) and JSON rows. */
#ifndef KT_BENCH_H
#define KT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kt/kt.h>

#define BENCH_TOOL "kt-bench"

/* ---- machine ------------------------------------------------------------ */

typedef struct bench_hw {
    char cpu_model[128];
    int32_t physical_cores;   /* hwloc, via kt_hw_physical_cores()               */
    int32_t online_cpus;      /* CPUs this process may run on                    */
    uint64_t isa;             /* kt_hw_isa() bits                                */
    char isa_text[160];       /* "avx2 fma avx512f ... "                         */
    const char *isa_path;     /* best kernel family the library may pick         */
    uint64_t l3_bytes;        /* last-level cache, 0 if unknown                   */
    uint64_t ram_available;   /* MemAvailable, bytes                             */
    uint64_t ram_total;
    double load1;             /* 1-minute load average at start                  */
} bench_hw;

void bench_hw_detect(bench_hw *hw);
/* The CPUs this process may use, as read at the first call (before kt-bench
 * pins anything); returns how many were written. */
int bench_allowed_cpus(int *cpus, int max);
void bench_hw_print(FILE *f, const bench_hw *hw, int threads);

/* Monotonic seconds. */
double bench_now(void);

/* Large zeroed page-aligned allocation (mmap + transparent huge pages hint);
 * NULL on failure. Free with bench_free_big(). */
void *bench_alloc_big(size_t bytes);
void bench_free_big(void *p, size_t bytes);

/* ---- pinned thread team ---------------------------------------------------- */

/* `n` workers pinned one per allowed CPU (the caller is worker 0); `fn` runs
 * on all of them and team_run returns when every worker has finished. */
typedef void (*team_fn)(int tid, int n, void *arg);
typedef struct bench_team bench_team;
bench_team *team_create(int n);
void team_run(bench_team *t, team_fn fn, void *arg);
void team_free(bench_team *t);
int team_size(const bench_team *t);
/* The CPU worker i is pinned to. */
int team_cpu(const bench_team *t, int i);
/* Every worker's clock at once (GHz of dependent integer multiplies, 3 cycles
 * each: lower when the host runs the cores slower or takes them away): the
 * slowest worker's and the median. */
void team_clock(bench_team *t, double *lo, double *median);

/* ---- where memory and threads are ----------------------------------------- */

/* The mappings (/proc/self/smaps) that overlap [p, p + n): how many, their
 * size, resident bytes and bytes in transparent huge pages; and over the whole
 * process, anonymous resident bytes and huge-page bytes. */
typedef struct bench_pages {
    int vmas;
    uint64_t vma_bytes, rss, huge;
    uint64_t all_rss, all_huge;
} bench_pages;
bool bench_mem_pages(const void *p, size_t n, bench_pages *out);
/* "THP enabled madvise, defrag madvise" (/sys/kernel/mm/transparent_hugepage). */
void bench_thp_mode(char *buf, size_t n);
/* This process's thread ids, ascending (/proc/self/task); how many (<= max). */
int bench_thread_ids(int *tids, int max);
/* Thread tid's allowed CPUs as the kernel lists them ("0-3,8"). */
bool bench_thread_cpus(int tid, char *buf, size_t n);

/* ---- stream bandwidth ------------------------------------------------------ */

typedef struct stream_result {
    double read_gbs;    /* sum over one buffer (loads only)                 */
    double copy_gbs;    /* b = a      (2 x bytes, STREAM convention)          */
    double triad_gbs;   /* a = b + s*c (3 x bytes)                            */
    uint64_t bytes;     /* buffer size used by the read test                 */
    const char *path;   /* "avx512", "avx2" or "scalar"                       */
} stream_result;

/* Multi-threaded stream over `bytes` (rounded), best of `reps`. Copy and
 * triad are skipped (0) when `read_only`. Returns false on allocation failure. */
bool stream_measure(bench_team *team, uint64_t bytes, int reps, bool read_only,
                    stream_result *out);

/* One read buffer for bandwidth samples taken between other work (so that a
 * ratio compares figures of the same moments on a busy machine). */
typedef struct stream_buf stream_buf;
stream_buf *stream_buf_create(bench_team *team, uint64_t bytes);
/* GB/s of one multi-threaded read pass over the buffer. */
double stream_buf_read(bench_team *team, stream_buf *sb);
/* GB/s of one multi-threaded read pass over bytes [off, off + bytes) of it (clamped
 * to the buffer; off past its end reads from 0): windows about a decode call long,
 * which a neighbour process leaves undisturbed as often as a call (kt-bench moe's
 * clean stream figure). */
double stream_buf_read_part(bench_team *team, stream_buf *sb, uint64_t off, uint64_t bytes);
/* Its size in bytes. */
uint64_t stream_buf_bytes(const stream_buf *sb);
/* The last pass's threads, each timed over its own slice: the thread count
 * times the slowest one's GB/s and times their median's (the pass waits for the
 * slowest of its fixed slices; the median's figure is what it would read with
 * every thread as fast as the median one). */
void stream_buf_threads(const bench_team *team, const stream_buf *sb, double *slowest,
                        double *median);
void stream_buf_free(stream_buf *sb);

/* ---- clean decode calls and stream reads (clean.c, runq.h) ------------------ */

/* On a shared machine a neighbour that takes a core for a few ms makes the
 * decode call or stream read it lands in slow for reasons that are neither the
 * kernel's nor the memory's. A call (a read) is clean when the threads doing it
 * waited on run queues for at most limit_ns in all (schedstat's run_delay; the
 * wake-ups of an undisturbed call take 20-90 us on the 2-core Zen 3 VM, a lost
 * core 0.5-5 ms). A pass over the whole stream buffer (10-40 ms there) is almost
 * never clean, so the clean stream figure comes from `windows` reads of
 * window_bytes (about a call long) after each pass. NULL queues: schedstat is
 * not readable here (why says why), plain figures only. */
typedef struct runq runq;
typedef struct clean_watch {
    runq *calls;           /* the backend's workers and the calling thread        */
    runq *stream;          /* the stream team (the calling thread is its worker 0) */
    double limit_ns;       /* KT_BENCH_CLEAN_US (default 150)                      */
    int windows;           /* KT_BENCH_CLEAN_WINDOWS (default 4)                   */
    uint64_t window_bytes; /* KT_BENCH_CLEAN_WINDOW_MIB (default 16)               */
    bool debug;            /* KT_BENCH_CLEAN_DEBUG=1: each wait on stderr          */
    char why[192];
} clean_watch;
/* The settings from the environment; nothing watched yet. */
void clean_watch_init(clean_watch *cw);
/* Watches the stream team's threads: those started since before[0..n_before)
 * (bench_thread_ids) and this one. False, cw->why saying why, when they cannot
 * be watched (schedstat unreadable). */
bool clean_watch_stream(clean_watch *cw, const int *before, int n_before);
/* The call's threads likewise (a backend's workers: those its creation started). */
bool clean_watch_calls(clean_watch *cw, const int *before, int n_before);
/* Both sets watched. */
bool clean_watch_on(const clean_watch *cw);
/* The call threads' run-queue wait so far, ns (a pread a thread: take it
 * outside the timed region). */
uint64_t clean_calls_wait(const clean_watch *cw);
/* cw->windows stream reads of window_bytes from *at on (advanced), each watched:
 * their GB/s into all[0..windows), the clean ones' into clean[]; how many clean. */
int clean_stream_windows(const clean_watch *cw, bench_team *team, stream_buf *sb, uint64_t *at,
                         double *all, double *clean);
void clean_watch_free(clean_watch *cw);

/* ---- oneDNN matmul yardstick ----------------------------------------------- */

typedef enum gemm_kind { GEMM_BF16 = 0, GEMM_INT8 = 1, GEMM_F32 = 2 } gemm_kind;
/* "bf16", "int8", "f32" */
const char *gemm_kind_name(gemm_kind kind);

/* True when this kt-bench was built with oneDNN. */
bool gemm_available(void);
/* Pin oneDNN's OpenMP threads like the team and set their number. */
void gemm_set_threads(int n);

/* C[M][N] = A[M][K] * B[K][N] with B pre-packed in oneDNN's preferred layout
 * (as an engine would at load time); best-of-`reps` ops/s (x 1e12). -1 on error. */
double gemm_measure(gemm_kind kind, int64_t m, int64_t n, int64_t k, int reps);
/* The compute yardstick of an engine's CPU side: gemm_measure of BF16, or of F32
 * where oneDNN has no BF16 matmul (oneDNN 2.6 needs AVX-512 for BF16); *kind
 * says which. -1 when neither runs. */
double gemm_measure_yardstick(int64_t m, int64_t n, int64_t k, int reps, gemm_kind *kind);

/* A batch of per-expert matmuls over cold weights, the yardstick for MoE
 * prefill: for each expert e with counts[e] > 0 tokens, gate/up [m][H]x[H][I]
 * and down [m][I]x[I][H] on weights stored [out][in] (the same layout the MoE
 * backend reads): `kind` GEMM_BF16, BF16 weights and activations, F32 out;
 * GEMM_INT8, s8 weights, u8 activations, s32 out (AMXINT8's codes without
 * their scales). Weights of `n_sets` independent copies of the E experts are
 * cycled so each call reads them from memory. */
typedef struct gemm_moe gemm_moe;
gemm_moe *gemm_moe_create(gemm_kind kind, int64_t h, int64_t inter, int32_t n_experts,
                          int n_sets, const void *const *gate, const void *const *up,
                          const void *const *down);
/* Reorders every expert's weights once into the layout oneDNN prefers for
 * m_hint rows (as an engine would at load time; needs as much memory again)
 * and runs on those copies from then on. False on failure (gemm_last_error). */
bool gemm_moe_pack(gemm_moe *g, int32_t m_hint);
/* oneDNN's implementation names of every primitive run so far, distinct ones
 * joined by " + " ("brg:avx512_core_bf16", "brg:avx512_core_amx" for INT8 on
 * AMX tiles, "brg:avx512_core_amx + gemm:jit" when m picked two). */
const char *gemm_moe_impl(const gemm_moe *g);
/* Seconds for one layer pass with the given per-expert token counts; -1 on error. */
double gemm_moe_run(gemm_moe *g, int set, const int32_t *counts);
void gemm_moe_free(gemm_moe *g);
const char *gemm_last_error(void);
/* True when the last failure since gemm_moe_create was oneDNN having no matmul
 * for the types on this CPU: a fact about the machine, not a failed run. */
bool gemm_no_impl(void);

/* ---- JSON rows --------------------------------------------------------------- */

typedef struct bench_json bench_json;
bench_json *json_open(const char *path, const bench_hw *hw, int threads);
/* Appends one row object; `fmt` (printf) produces its members, e.g.
 * "\"method\":\"%s\",\"T\":%d". */
void json_row(bench_json *j, const char *fmt, ...);
bool json_close(bench_json *j);

/* ---- whole models (models.c): engine, e2e ----------------------------------- */

/* xorshift64: the benches' random numbers (fixed seeds: the same every run). */
static inline uint64_t bench_rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* n token ids uniform in [0, V), the same every run. */
void bench_random_ids(int32_t *ids, size_t n, int32_t V);

/* Shapes of a synthetic Qwen3-MoE checkpoint (the rest as Qwen3-30B-A3B's config). */
typedef struct bench_qwen3_config {
    int hidden, heads, kv_heads, head_dim, layers, experts, top_k, expert_ffn, vocab, eos;
} bench_qwen3_config;

/* Writes its config.json text to f. */
void bench_write_qwen3_config(FILE *f, const bench_qwen3_config *c);

/* kt_model_arch / kt_model_tensor_at into a zeroed struct of the caller's size; false on
 * an error (kt_last_error()). */
bool bench_model_arch(const kt_model *m, kt_arch_info *a);
bool bench_model_tensor(const kt_model *m, size_t i, kt_tensor_view *v);

/* A fresh prefill of the P tokens ids (context reset first), then `gen` greedy decode
 * steps; their seconds in *t_pre and *t_dec. logits: [vocab]. False on an engine error
 * (kt_last_error()). */
bool bench_prefill_decode(kt_context *ctx, const int32_t *ids, int64_t P, int64_t gen,
                          float *logits, double *t_pre, double *t_dec);

/* ---- subcommands ---------------------------------------------------------- */

int cmd_stream(int argc, char **argv);
int cmd_gemm(int argc, char **argv);
int cmd_moe(int argc, char **argv);
int cmd_engine(int argc, char **argv);
int cmd_placement(int argc, char **argv);
int cmd_e2e(int argc, char **argv);
int cmd_hybrid(int argc, char **argv);

/* Common flags: --threads N (0 = physical cores). */
int bench_default_threads(const bench_hw *hw);
/* A command's start: hw detected, the thread count (threads, or 0 for
 * bench_default_threads) printed with it to stdout and returned. */
int bench_hw_start(bench_hw *hw, int64_t threads);

/* --threads N (0..4096) and --json FILE, which most commands take: true when argv[*i] is
 * one of them (taken, its value stored); *bad set when the value is missing or wrong. */
bool bench_common_opt(int argc, char **argv, int *i, int64_t *threads, const char **json_path,
                      bool *bad);

#endif
