/* Helpers for the MoE tests: a minimal safetensors reader (independent of
 * lib/io, so the tests check the backend against files read another way),
 * random numbers and element conversions. Header-only, static. Include after
 * <cmocka.h>. */
#ifndef KT_TEST_MOE_UTIL_H
#define KT_TEST_MOE_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "test_files.h"
#include "../../cpu/moe_kernels.h"

#define TST_UNUSED __attribute__((unused))

typedef struct tst_file {
    uint8_t *buf;
    size_t size;
    cJSON *hdr;
    const uint8_t *data;
} tst_file;

typedef struct tst_tensor {
    const char *dtype;
    int64_t shape[4];
    int n_dims;
    const void *data;
    size_t nbytes;
} tst_tensor;

TST_UNUSED static tst_file *tst_open(const char *path)
{
    size_t size;
    uint8_t *buf = (uint8_t *)read_whole_file(path, &size);
    if (!buf)
        return NULL;
    tst_file *t = calloc(1, sizeof *t);
    t->buf = buf;
    t->size = size;
    uint64_t n;
    memcpy(&n, t->buf, 8);
    t->hdr = cJSON_ParseWithLength((const char *)t->buf + 8, (size_t)n);
    t->data = t->buf + 8 + n;
    return t;
}

TST_UNUSED static void tst_close(tst_file *t)
{
    if (!t)
        return;
    cJSON_Delete(t->hdr);
    free(t->buf);
    free(t);
}

TST_UNUSED static int tst_find(const tst_file *t, const char *name, tst_tensor *out)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(t->hdr, name);
    if (!e)
        return 0;
    out->dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype")->valuestring;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    out->n_dims = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) out->shape[out->n_dims++] = (int64_t)d->valuedouble;
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    size_t b = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
    size_t en = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
    out->data = t->data + b;
    out->nbytes = en - b;
    return 1;
}

/* A model directory: its shards (model-*.safetensors). */
typedef struct tst_model {
    tst_file *shards[8];
    int n;
} tst_model;

TST_UNUSED static int tst_model_open(tst_model *m, const char *dir)
{
    memset(m, 0, sizeof *m);
    for (int total = 1; total <= 4 && m->n == 0; total++) {
        for (int i = 1; i <= total; i++) {
            char p[1200];
            snprintf(p, sizeof p, "%s/model-%05d-of-%05d.safetensors", dir, i, total);
            tst_file *f = tst_open(p);
            if (!f)
                break;
            m->shards[m->n++] = f;
        }
        if (m->n != total) {
            for (int i = 0; i < m->n; i++)
                tst_close(m->shards[i]);
            m->n = 0;
        }
    }
    if (m->n == 0) {
        char p[1200];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        tst_file *f = tst_open(p);
        if (f)
            m->shards[m->n++] = f;
    }
    return m->n;
}

TST_UNUSED static void tst_model_close(tst_model *m)
{
    for (int i = 0; i < m->n; i++)
        tst_close(m->shards[i]);
    m->n = 0;
}

TST_UNUSED static int tst_model_find(const tst_model *m, const char *name, tst_tensor *out)
{
    for (int i = 0; i < m->n; i++)
        if (tst_find(m->shards[i], name, out))
            return 1;
    return 0;
}

/* The fixture $KT_TEST_DATA/fixtures/<name> (dir gets its path): its model's shards in *m
 * and its reference.safetensors, returned. NULL (and nothing left open) when either cannot
 * be read. */
TST_UNUSED static tst_file *tst_fixture_open(const char *name, tst_model *m, char *dir,
                                             size_t dir_size)
{
    char path[1200];
    snprintf(dir, dir_size, "%s/fixtures/%s", getenv("KT_TEST_DATA"), name);
    if (!tst_model_open(m, dir))
        return NULL;
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    tst_file *ref = tst_open(path);
    if (!ref)
        tst_model_close(m);
    return ref;
}

/* BF16 <-> f32 as the kernels convert (cpu/moe_kernels.h): widening; round to nearest even. */
TST_UNUSED static float tst_bf16(uint16_t h)
{
    return kt__moe_bf16_f32(h);
}

TST_UNUSED static uint16_t tst_to_bf16(float f)
{
    return kt__moe_f32_bf16(f);
}

TST_UNUSED static float tst_e4m3(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7)
        return NAN;
    float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
    return s ? -v : v;
}

static uint64_t tst_rng = 88172645463325252ull;
TST_UNUSED static uint32_t tst_rand(void)
{
    tst_rng ^= tst_rng << 13;
    tst_rng ^= tst_rng >> 7;
    tst_rng ^= tst_rng << 17;
    return (uint32_t)(tst_rng >> 16);
}
/* uniform in [-1, 1) */
TST_UNUSED static float tst_uniform(void)
{
    return (float)(tst_rand() & 0xffffff) / 8388608.0f - 1.0f;
}

/* n random BF16 weights amp * uniform; f[n] gets them as floats. */
TST_UNUSED static uint16_t *tst_bf16_values(size_t n, float amp, float *f)
{
    uint16_t *b = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        b[i] = tst_to_bf16(tst_uniform() * amp);
        f[i] = tst_bf16(b[i]);
    }
    return b;
}

/* Random FP8 E4M3 weights [rows][cols] with an F32 scale per 128 x 128 block
 * ([ceil(rows/128)][ceil(cols/128)]): the scales drawn first by scale(), then the
 * codes row by row by code(); f[rows][cols] gets the dequantized matrix. */
TST_UNUSED static void tst_fp8_matrix(int rows, int cols, float (*scale)(void),
                                      uint8_t (*code)(void), void **w, void **s, float *f)
{
    int rb = (rows + 127) / 128, cb = (cols + 127) / 128;
    float *sc = malloc((size_t)rb * cb * sizeof(float));
    for (int i = 0; i < rb * cb; i++)
        sc[i] = scale();
    uint8_t *q = malloc((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            uint8_t b = code();
            q[(size_t)r * cols + c] = b;
            f[(size_t)r * cols + c] = tst_e4m3(b) * sc[(r / 128) * cb + c / 128];
        }
    *w = q;
    *s = sc;
}

/* Random RAWINT4 weights [rows][cols]: eight 4-bit codes a word (value code - 8), a BF16
 * scale per `group` inputs drawn as base + base * (uniform + 1); f[rows][cols] (when not
 * NULL) gets the dequantized matrix. */
/* f [rows][cols] = the packed nibbles p (value - 8) times their BF16 scales sc
 * (one per group inputs). */
TST_UNUSED static void tst_rawint4_dequant(int rows, int cols, int group, const uint32_t *p,
                                           const uint16_t *sc, float *f)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            uint32_t word = p[(size_t)r * (cols / 8) + c / 8];
            int v = (int)((word >> (4 * (c % 8))) & 15u) - 8;
            f[(size_t)r * cols + c] =
                (float)v * tst_bf16(sc[(size_t)r * (cols / group) + c / group]);
        }
}

TST_UNUSED static void tst_rawint4_matrix(int rows, int cols, int group, float base, void **w,
                                          void **s, float *f)
{
    size_t n = (size_t)rows * cols;
    uint32_t *p = malloc(n / 2);
    uint16_t *sc = malloc(n / (size_t)group * 2);
    for (size_t i = 0; i < n / 8; i++)
        p[i] = tst_rand() ^ (tst_rand() << 16);
    for (size_t i = 0; i < n / (size_t)group; i++)
        sc[i] = tst_to_bf16(base + base * (tst_uniform() + 1.0f));
    if (f)
        tst_rawint4_dequant(rows, cols, group, p, sc, f);
    *w = p;
    *s = sc;
}

#endif /* KT_TEST_MOE_UTIL_H */
