/*
 * amx_tile_peak: what the AMX-INT8 tiles of this machine deliver, per core and
 * over all cores, for the tile loops of cpu/amx/moe_amx.c to be judged
 * against. A developer's tool (needs AMX; no libkt).
 *
 *   regs   4 _tile_dpbssd per step on operands already in the tile
 *          registers: the unit's own rate
 *   l1     the 2 x 2 block of the in-place AMXINT8 loop (W0 W1 X0 X1 loaded,
 *          4 products), all operands in one 4 KiB that stays in L1
 *   l2     the same with the weight tiles walking 256 KiB rows (L2) and the
 *          token tiles 32 KiB (L1)
 *   park   l1, plus the 4 int32 C tiles stored and loaded again every 4
 *          steps (the loop's K chunks)
 *   dec    l1, plus per step the vector work of AMXINT4's rescaled rows for
 *          one block of 32 tokens (tiles_i8_rows: 8 rows x 256 inputs of INT4
 *          decoded to int8 by table, a table per 128 inputs), to see whether
 *          the decode hides under the tile products (before them)
 *   dec2   dec with the decode after the step's products
 *   dec3   dec2 with format version 2's constant tables (a load of the
 *          table of an integer factor instead of building one per 128 inputs)
 *   dec4   dec3 with the nibbles 128 inputs a 64-byte load (PERM_EO128: low
 *          nibbles one step, high the next; 6 vector instructions per 128
 *          inputs instead of 8)
 *   dec4n  dec4 storing where no tile load reads modulo 4 KiB (lines 32-63 of
 *          a 4 KiB page; the W and X tiles read lines 0-31)
 *   dec4a  dec4 storing onto the lines the tiles read, modulo 4 KiB (4K
 *          aliasing: does a tile load wait for pending stores that match
 *          its address in bits 0-11?)
 *   wide   the 2 x 3 block of tiles_i8_rows for 33-48 tokens: 6 C tiles, one
 *          W and one X register, 7 loads per 6 products (each load waits for
 *          the product reading the register before), operands in L1
 * Each on 1 thread, then on every CPU at once (pinned), in GMAC/s (a
 * product: 16 x 16 x 64 multiply-adds).
 *
 * Build and run on the AMX machine:
 *   gcc -O2 -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vbmi -pthread \
 *       scripts/amx_tile_peak.c -o amx_tile_peak
 *   ./amx_tile_peak [threads]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define STEPS 200000

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* palette 1, tiles 0-7 of 16 rows x 64 bytes */
static void config(void)
{
    tilecfg c = {.palette = 1};
    for (int t = 0; t < 8; t++)
        c.rows[t] = 16, c.colsb[t] = 64;
    _tile_loadconfig(&c);
}

typedef struct {
    int cpu, test;
    double gmacs;
} job;

/* The tables of integer factors e = 0..16: (i % 16 - 8) e (dec3). */
static _Alignas(64) int8_t lut_int[17][64];

/* One step's INT4 rescale work (test dec): 8 rows x 4 x 64 inputs from the
 * nibbles at q (128 bytes a row) into d (256 bytes a row), a 16-entry table
 * per 128 inputs from the factors f, or (ints) the constant table of the
 * factor's integer. */
static void decode_step(const uint8_t *q, int8_t *d, const float *f, __m512i low, int ints)
{
    const __m512 v8 = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = 0; r < 8; r++) {
        __m512i lut = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            if (!(j & 1) && ints) {
                lut = _mm512_load_si512(lut_int[(int)f[2 * r + j / 2]]);
            } else if (!(j & 1)) {
                __m512i t = _mm512_cvtps_epi32(_mm512_mul_ps(v8, _mm512_set1_ps(f[2 * r + j / 2])));
                lut = _mm512_permutexvar_epi8(low, _mm512_min_epi32(t, _mm512_set1_epi32(127)));
            }
            __m512i b = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(q + r * 128 + j * 32)));
            b = _mm512_mask_srli_epi16(b, 0xffff0000u, b, 4);
            _mm512_storeu_si512(d + r * 256 + j * 64, _mm512_permutexvar_epi8(b, lut));
        }
    }
}

/* decode_step's work in PERM_EO128 order with constant tables (dec4): per
 * row and 128 inputs one 64-byte load, a shift, two vpermb, two stores. */
static void decode_step_pairs(const uint8_t *q, int8_t *d, const float *f)
{
    for (int r = 0; r < 8; r++)
        for (int j = 0; j < 4; j += 2) {
            __m512i lut = _mm512_load_si512(lut_int[(int)f[2 * r + j / 2]]);
            __m512i b = _mm512_loadu_si512(q + r * 128 + j * 32);
            __m512i h = _mm512_srli_epi16(b, 4);
            _mm512_storeu_si512(d + r * 256 + j * 64, _mm512_permutexvar_epi8(b, lut));
            _mm512_storeu_si512(d + r * 256 + j * 64 + 64, _mm512_permutexvar_epi8(h, lut));
        }
}

/* products per pass of test `test`, run STEPS times */
static long run_test(int test, uint8_t *w, uint8_t *x, int32_t *c)
{
    static _Thread_local float f[16] = {1.5f, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static _Thread_local _Alignas(64) int8_t dec[2][8 * 256];
    uint8_t idx[64]; /* byte 0 of dword i % 16 into byte i */
    for (int i = 0; i < 64; i++)
        idx[i] = (uint8_t)(4 * (i % 16));
    const __m512i low = _mm512_loadu_si512(idx);
    long products = 0;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, w, 64);
    _tile_loadd(5, w + 1024, 64);
    _tile_loadd(6, x, 64);
    _tile_loadd(7, x + 1024, 64);
    for (long s = 0; s < STEPS; s++) {
        if (test == 7) { /* W0 x X0 X1 X2, then W1 x X2 X1 X0 */
            _tile_loadd(6, w, 64);
            _tile_loadd(7, x, 64);
            _tile_dpbssd(0, 6, 7);
            _tile_loadd(7, x + 1024, 64);
            _tile_dpbssd(1, 6, 7);
            _tile_loadd(7, x + 2048, 64);
            _tile_dpbssd(4, 6, 7);
            _tile_loadd(6, w + 1024, 64);
            _tile_dpbssd(5, 6, 7);
            _tile_loadd(7, x + 1024, 64);
            _tile_dpbssd(3, 6, 7);
            _tile_loadd(7, x, 64);
            _tile_dpbssd(2, 6, 7);
            products += 6;
            continue;
        }
        if (test == 4)
            decode_step(x + (size_t)(s % 16) * 1024, dec[s & 1], f, low, 0);
        if (test == 1 || test >= 3) { /* l1, park, dec, dec2 */
            _tile_loadd(4, w, 64);
            _tile_loadd(6, x, 64);
            _tile_loadd(5, w + 1024, 64);
            _tile_loadd(7, x + 1024, 64);
        } else if (test == 2) { /* l2: rows 4 KiB apart, 64 steps of 64 bytes */
            size_t k = (size_t)(s % 64) * 64;
            _tile_loadd(4, w + k, 4096);
            _tile_loadd(6, x + (size_t)(s % 32) * 1024, 64);
            _tile_loadd(5, w + 65536 + k, 4096);
            _tile_loadd(7, x + (size_t)((s + 7) % 32) * 1024, 64);
        }
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
        products += 4;
        if (test == 8)
            decode_step_pairs(x + (size_t)(s % 16) * 1024, dec[s & 1], f);
        else if (test >= 9) /* w: 256 KiB, 4 KiB aligned; pages 2-5 unread here */
            decode_step_pairs(x + (size_t)(s % 16) * 1024,
                              (int8_t *)w + 8192 + (s & 1) * 8192 + (test == 9) * 2048, f);
        else if (test >= 5)
            decode_step(x + (size_t)(s % 16) * 1024, dec[s & 1], f, low, test == 6);
        if (test == 3 && s % 4 == 3) {
            _tile_stored(0, c, 64);
            _tile_stored(1, c + 256, 64);
            _tile_stored(2, c + 512, 64);
            _tile_stored(3, c + 768, 64);
            _tile_loadd(0, c, 64);
            _tile_loadd(1, c + 256, 64);
            _tile_loadd(2, c + 512, 64);
            _tile_loadd(3, c + 768, 64);
        }
    }
    _tile_stored(0, c, 64);
    c[1] += dec[0][7] + dec[1][9]; /* the decoded rows are used */
    return products;
}

static void *worker(void *arg)
{
    job *j = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    uint8_t *w = aligned_alloc(4096, 256 << 10), *x = aligned_alloc(4096, 32 << 10);
    int32_t *c = aligned_alloc(64, 4096);
    for (int i = 0; i < 256 << 10; i++)
        w[i] = (uint8_t)(i * 7 + 3);
    for (int i = 0; i < 32 << 10; i++)
        x[i] = (uint8_t)(i * 5 + 1);
    config();
    run_test(j->test, w, x, c); /* warm up */
    double t0 = now();
    long p = run_test(j->test, w, x, c);
    j->gmacs = (double)p * 16 * 16 * 64 / (now() - t0) * 1e-9;
    _tile_release();
    free(w);
    free(x);
    free(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        perror("arch_prctl(ARCH_REQ_XCOMP_PERM)");
        return 1;
    }
    int n = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1 || n > 256)
        n = 1;
    for (int e = 0; e <= 16; e++)
        for (int i = 0; i < 64; i++)
            lut_int[e][i] = (int8_t)((i % 16 - 8) * e);
    static const char *names[] = {"regs", "l1", "l2", "park", "dec", "dec2", "dec3", "wide", "dec4", "dec4n", "dec4a"};
    for (int test = 0; test < 11; test++) {
        job one = {0, test, 0};
        worker(&one);
        job *all = calloc((size_t)n, sizeof(job));
        pthread_t *th = calloc((size_t)n, sizeof(pthread_t));
        for (int i = 0; i < n; i++) {
            all[i] = (job){i, test, 0};
            pthread_create(&th[i], NULL, worker, &all[i]);
        }
        double sum = 0, lo = 1e30;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            sum += all[i].gmacs;
            lo = all[i].gmacs < lo ? all[i].gmacs : lo;
        }
        printf("%-5s 1 thread %7.1f GMAC/s (%5.2f TOP/s); %d threads %8.1f GMAC/s "
               "(%6.2f TOP/s, slowest thread %.1f)\n",
               names[test], one.gmacs, 2e-3 * one.gmacs, n, sum, 2e-3 * sum, lo);
        free(all);
        free(th);
    }
    return 0;
}
