/* safetensors reader/writer, type tables and scalar conversions (lib/io). */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/convert_types.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "kt/types.h"
#include "test_files.h"

/* ---- helpers ------------------------------------------------------------------------- */

static int make_tmp_root(void **state)
{
    (void)state;
    return tmp_root_create("kt_test_st");
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* A safetensors file from a header string and `data_len` bytes of data. */
static void write_st(const char *path, const char *header, size_t data_len)
{
    size_t n = strlen(header);
    unsigned char *buf = calloc(1, 8 + n + data_len + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + n + i] = (unsigned char)i;
    write_bytes(path, buf, 8 + n + data_len);
    free(buf);
}

static char *tmp_path(const char *name)
{
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", tmp_root, name);
    return p;
}

/* ---- type tables --------------------------------------------------------------------- */

static void test_type_tables(void **state)
{
    (void)state;
    struct { kt_type t; const char *name; uint32_t bs, bb; } rows[] = {
        {KT_TYPE_F32, "F32", 1, 4},         {KT_TYPE_F16, "F16", 1, 2},
        {KT_TYPE_BF16, "BF16", 1, 2},       {KT_TYPE_F64, "F64", 1, 8},
        {KT_TYPE_I8, "I8", 1, 1},           {KT_TYPE_I16, "I16", 1, 2},
        {KT_TYPE_I32, "I32", 1, 4},         {KT_TYPE_I64, "I64", 1, 8},
        {KT_TYPE_U8, "U8", 1, 1},           {KT_TYPE_BOOL, "BOOL", 1, 1},
        {KT_TYPE_F8_E4M3, "F8_E4M3", 1, 1}, {KT_TYPE_F8_E5M2, "F8_E5M2", 1, 1},
        {KT_TYPE_U16, "U16", 1, 2},         {KT_TYPE_U32, "U32", 1, 4},
        {KT_TYPE_U64, "U64", 1, 8},
        /* ggml block structs: Q4_0 = f16 d + 16 nibble bytes; Q4_K = 2 f16 + 12 scale
         * bytes + 128 nibble bytes; Q6_K = 128 ql + 64 qh + 16 scales + f16 d; ... */
        {KT_TYPE_Q4_0, "Q4_0", 32, 18},     {KT_TYPE_Q4_1, "Q4_1", 32, 20},
        {KT_TYPE_Q5_0, "Q5_0", 32, 22},     {KT_TYPE_Q5_1, "Q5_1", 32, 24},
        {KT_TYPE_Q8_0, "Q8_0", 32, 34},     {KT_TYPE_Q8_1, "Q8_1", 32, 36},
        {KT_TYPE_Q2_K, "Q2_K", 256, 84},    {KT_TYPE_Q3_K, "Q3_K", 256, 110},
        {KT_TYPE_Q4_K, "Q4_K", 256, 144},   {KT_TYPE_Q5_K, "Q5_K", 256, 176},
        {KT_TYPE_Q6_K, "Q6_K", 256, 210},   {KT_TYPE_Q8_K, "Q8_K", 256, 292},
        {KT_TYPE_IQ4_NL, "IQ4_NL", 32, 18}, {KT_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        assert_string_equal(kt_type_name(rows[i].t), rows[i].name);
        assert_int_equal(kt_type_block_size(rows[i].t), rows[i].bs);
        assert_int_equal(kt_type_block_bytes(rows[i].t), rows[i].bb);
        assert_int_equal(kt__type_from_name(rows[i].name), rows[i].t);
    }
    assert_null(kt_type_name(KT_TYPE_INVALID));
    assert_null(kt_type_name((kt_type)104)); /* retired ggml Q4_2 */
    assert_int_equal(kt_type_block_size((kt_type)55), 0);
    assert_int_equal(kt_type_block_bytes((kt_type)-7), 0);
    assert_int_equal(kt__type_from_ggml(30), KT_TYPE_BF16);
    assert_int_equal(kt__type_from_ggml(12), KT_TYPE_Q4_K);
    assert_int_equal(kt__type_from_ggml(16), KT_TYPE_INVALID); /* IQ2_XXS: no kt_type */
    assert_int_equal(kt__type_to_ggml(KT_TYPE_Q6_K), 14);
    assert_int_equal(kt__type_to_ggml(KT_TYPE_F8_E4M3), -1);
    uint64_t nb;
    assert_true(kt__type_nbytes(KT_TYPE_Q4_K, 512, &nb));
    assert_int_equal(nb, 288);
    assert_false(kt__type_nbytes(KT_TYPE_Q4_K, 100, &nb));
    assert_false(kt__type_nbytes(KT_TYPE_F64, UINT64_MAX / 4, &nb));
}

/* ---- scalar conversions -------------------------------------------------------------- */

/* Independent decoders: sign * 2^(e - bias) * (1 + m / 2^mbits), via ldexp. */
static double decode_minifloat(unsigned bits, int ebits, int mbits, int bias)
{
    int sign = (bits >> (ebits + mbits)) & 1;
    int e = (bits >> mbits) & ((1 << ebits) - 1);
    int m = bits & ((1 << mbits) - 1);
    double v = e == 0 ? ldexp(m, 1 - bias - mbits) : ldexp((1 << mbits) + m, e - bias - mbits);
    return sign ? -v : v;
}

static void test_f16_bf16(void **state)
{
    (void)state;
    assert_true(kt__f16_to_f32(0x3c00) == 1.0f);
    assert_true(kt__f16_to_f32(0xc000) == -2.0f);
    assert_true(kt__f16_to_f32(0x7bff) == 65504.0f);
    assert_true(kt__f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(kt__f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    assert_true(isinf(kt__f16_to_f32(0x7c00)) && kt__f16_to_f32(0xfc00) < 0);
    assert_true(isnan(kt__f16_to_f32(0x7e00)));
    assert_true(signbit(kt__f16_to_f32(0x8000)));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kt__f16_to_f32((uint16_t)h);
        unsigned e = (h >> 10) & 31;
        if (e == 31) {
            assert_true((h & 0x3ff) ? isnan(f) : isinf(f));
            continue;
        }
        assert_true((double)f == decode_minifloat(h, 5, 10, 15));
        assert_int_equal(kt__f32_to_f16(f), h); /* exact round trip */
    }
    /* Rounding to nearest even, overflow, underflow. */
    assert_int_equal(kt__f32_to_f16(1.0f + 0x1p-11f), 0x3c00);          /* tie -> even */
    assert_int_equal(kt__f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);      /* tie -> even */
    assert_int_equal(kt__f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(kt__f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(kt__f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(kt__f32_to_f16(0x1p-25f), 0x0000);                 /* tie -> 0 */
    assert_int_equal(kt__f32_to_f16(0x1p-25f * 1.5f), 0x0001);
    assert_int_equal(kt__f32_to_f16(3 * 0x1p-25f), 0x0002);             /* tie -> even */
    assert_int_equal(kt__f32_to_f16(-0x1p-14f), 0x8400);
    assert_int_equal(kt__f32_to_f16(NAN) & 0x7e00, 0x7e00);

    for (uint32_t h = 0; h < 65536; h++) {
        float f = kt__bf16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        assert_int_equal(kt__f32_to_bf16(f), h);
    }
    assert_true(kt__bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(kt__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);              /* tie -> even */
    assert_int_equal(kt__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_true(isnan(kt__bf16_to_f32(kt__f32_to_bf16(NAN))));
}

static void test_fp8(void **state)
{
    (void)state;
    for (unsigned b = 0; b < 256; b++) {
        float f = kt__e4m3_to_f32((uint8_t)b);
        if ((b & 0x7f) == 0x7f) { /* the only NaNs; e4m3fn has no infinities */
            assert_true(isnan(f));
            continue;
        }
        assert_true((double)f == decode_minifloat(b, 4, 3, 7));
        assert_int_equal(kt__f32_to_e4m3(f), b);
    }
    assert_true(kt__e4m3_to_f32(0x7e) == 448.0f);
    assert_true(kt__e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(kt__e4m3_to_f32(0x08) == 0x1p-6f);
    assert_int_equal(kt__f32_to_e4m3(1000.0f), 0x7e); /* saturates */
    assert_int_equal(kt__f32_to_e4m3(-INFINITY), 0xfe);
    assert_int_equal(kt__f32_to_e4m3(0x1p-10f), 0x00);
    assert_int_equal(kt__f32_to_e4m3(3 * 0x1p-10f), 0x02); /* tie -> even */
    for (unsigned b = 0; b < 256; b++) {
        float f = kt__e5m2_to_f32((uint8_t)b);
        unsigned e = (b >> 2) & 31;
        if (e == 31) {
            assert_true((b & 3) ? isnan(f) : isinf(f));
            continue;
        }
        assert_true((double)f == decode_minifloat(b, 5, 2, 15));
    }
    assert_true(kt__e5m2_to_f32(0x7b) == 57344.0f);
    assert_true(kt__e5m2_to_f32(0x01) == 0x1p-16f);
}

static void test_tensor_to_f32(void **state)
{
    (void)state;
    float out[4];
    const int8_t i8[3] = {-128, 0, 127};
    assert_int_equal(kt__tensor_to_f32(i8, KT_TYPE_I8, 3, out), KT_OK);
    assert_true(out[0] == -128.0f && out[2] == 127.0f);
    /* Unaligned source. */
    unsigned char raw[1 + 3 * 8];
    const int64_t i64[3] = {-5, 1ll << 40, 7};
    memcpy(raw + 1, i64, sizeof i64);
    assert_int_equal(kt__tensor_to_f32(raw + 1, KT_TYPE_I64, 3, out), KT_OK);
    assert_true(out[0] == -5.0f && out[1] == 0x1p40f && out[2] == 7.0f);
    const uint16_t bf[2] = {0x3f80, 0xc040};
    assert_int_equal(kt__tensor_to_f32(bf, KT_TYPE_BF16, 2, out), KT_OK);
    assert_true(out[0] == 1.0f && out[1] == -3.0f);
    const uint8_t e4[2] = {0x38, 0xb8}; /* 1.0, -1.0 */
    assert_int_equal(kt__tensor_to_f32(e4, KT_TYPE_F8_E4M3, 2, out), KT_OK);
    assert_true(out[0] == 1.0f && out[1] == -1.0f);
    const uint8_t bools[2] = {0, 1};
    assert_int_equal(kt__tensor_to_f32(bools, KT_TYPE_BOOL, 2, out), KT_OK);
    assert_true(out[0] == 0.0f && out[1] == 1.0f);
    const double f64[1] = {0.5};
    assert_int_equal(kt__tensor_to_f32(f64, KT_TYPE_F64, 1, out), KT_OK);
    assert_true(out[0] == 0.5f);
    const uint32_t u32[1] = {4000000000u};
    assert_int_equal(kt__tensor_to_f32(u32, KT_TYPE_U32, 1, out), KT_OK);
    assert_true(out[0] == 4e9f);
    assert_int_equal(kt__tensor_to_f32(raw, KT_TYPE_Q4_K, 256, out), KT_ERR_UNSUPPORTED);
    /* The 8-bit float tables agree with the scalar decoders on every byte. */
    uint8_t all[256];
    float f8[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    for (int k = 0; k < 2; k++) {
        kt_type t = k ? KT_TYPE_F8_E5M2 : KT_TYPE_F8_E4M3;
        assert_int_equal(kt__tensor_to_f32(all, t, 256, f8), KT_OK);
        for (int i = 0; i < 256; i++) {
            float want = k ? kt__e5m2_to_f32((uint8_t)i) : kt__e4m3_to_f32((uint8_t)i);
            assert_true(isnan(want) ? isnan(f8[i]) : f8[i] == want);
        }
    }
}

/* ---- writer / reader round trip ------------------------------------------------------ */

static void test_round_trip_all_dtypes(void **state)
{
    (void)state;
    const kt_type types[] = {KT_TYPE_BOOL, KT_TYPE_U8,   KT_TYPE_I8,       KT_TYPE_I16,
                             KT_TYPE_U16,  KT_TYPE_I32,  KT_TYPE_U32,      KT_TYPE_I64,
                             KT_TYPE_U64,  KT_TYPE_F16,  KT_TYPE_BF16,     KT_TYPE_F32,
                             KT_TYPE_F64,  KT_TYPE_F8_E4M3, KT_TYPE_F8_E5M2};
    const size_t n_types = sizeof types / sizeof types[0];
    const char *path = tmp_path("all.safetensors");
    kt_st_writer *w = NULL;
    assert_int_equal(kt__st_writer_create(&w), KT_OK);
    assert_int_equal(kt__st_writer_set_metadata(w, "format", "pt"), KT_OK);
    assert_int_equal(kt__st_writer_set_metadata(w, "quote\"d", "back\\slash\n"), KT_OK);
    char name[64];
    for (size_t i = 0; i < n_types; i++) {
        const uint64_t shape[3] = {2, 3, i + 1};
        snprintf(name, sizeof name, "t.%s", kt_type_name(types[i]));
        assert_int_equal(kt__st_writer_declare(w, name, types[i], 3, shape), KT_OK);
    }
    const uint64_t empty_shape[2] = {0, 5};
    assert_int_equal(kt__st_writer_declare(w, "empty", KT_TYPE_F32, 2, empty_shape), KT_OK);
    assert_int_equal(kt__st_writer_declare(w, "scalar", KT_TYPE_F32, 0, NULL), KT_OK);
    /* Misuse is refused. */
    assert_int_equal(kt__st_writer_declare(w, "empty", KT_TYPE_F32, 0, NULL), KT_ERR_INVALID_ARG);
    assert_int_equal(kt__st_writer_declare(w, "q", KT_TYPE_Q4_K, 0, NULL), KT_ERR_INVALID_ARG);
    assert_int_equal(kt__st_writer_write(w, "t.BOOL", "", 0), KT_ERR_INVALID_ARG);

    assert_int_equal(kt__st_writer_begin(w, path), KT_OK);
    assert_int_equal(kt__st_writer_declare(w, "late", KT_TYPE_F32, 0, NULL), KT_ERR_INVALID_ARG);
    unsigned char bytes[6 * 16 * 8];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(kt__st_writer_write(w, "t.U8", bytes, 1), KT_ERR_INVALID_ARG); /* order */
    for (size_t i = 0; i < n_types; i++) {
        snprintf(name, sizeof name, "t.%s", kt_type_name(types[i]));
        uint64_t nbytes = 6 * (i + 1) * kt_type_block_bytes(types[i]);
        /* Streamed in two pieces. */
        assert_int_equal(kt__st_writer_write(w, name, bytes, nbytes / 2), KT_OK);
        assert_int_equal(kt__st_writer_write(w, name, bytes + nbytes / 2, nbytes - nbytes / 2),
                         KT_OK);
    }
    assert_int_equal(kt__st_writer_finish(w), KT_ERR_INVALID_ARG); /* "scalar" unwritten */
    const float one = 1.5f;
    assert_int_equal(kt__st_writer_write(w, "scalar", &one, 4), KT_OK);
    assert_int_equal(kt__st_writer_finish(w), KT_OK);
    kt__st_writer_free(w);

    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_file(&set, path), KT_OK);
    assert_int_equal(kt__st_count(set), n_types + 2);
    assert_int_equal(kt__st_file_count(set), 1);
    assert_string_equal(kt__st_file_path(set, 0), path);
    assert_string_equal(kt__st_metadata(set, "format"), "pt");
    assert_string_equal(kt__st_metadata(set, "quote\"d"), "back\\slash\n");
    assert_null(kt__st_metadata(set, "nope"));
    const unsigned char *first = NULL;
    for (size_t i = 0; i < n_types; i++) {
        snprintf(name, sizeof name, "t.%s", kt_type_name(types[i]));
        const kt_st_tensor *t = kt__st_find(set, name);
        assert_non_null(t);
        assert_string_equal(t->name, name);
        assert_int_equal(t->type, types[i]);
        assert_int_equal(t->n_dims, 3);
        assert_int_equal(t->shape[0], 2);
        assert_int_equal(t->shape[2], i + 1);
        assert_int_equal(t->n_elements, 6 * (i + 1));
        assert_int_equal(t->nbytes, 6 * (i + 1) * kt_type_block_bytes(types[i]));
        assert_memory_equal(t->data, bytes, t->nbytes);
        if (i == 0)
            first = t->data;
    }
    /* The header is padded so that the data region is 64-byte aligned in the file. */
    FILE *f = fopen(path, "rb");
    unsigned char len[8];
    assert_int_equal(fread(len, 1, 8, f), 8);
    fclose(f);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | len[i];
    assert_int_equal((8 + header_len) % 64, 0);
    assert_int_equal((uintptr_t)first % 64, 0); /* mmap is page aligned */
    const kt_st_tensor *e = NULL;
    assert_int_equal(kt__st_get(set, "empty", &e), KT_OK);
    assert_int_equal(e->n_elements, 0);
    assert_int_equal(e->nbytes, 0);
    assert_int_equal(kt__st_get(set, "scalar", &e), KT_OK);
    assert_int_equal(e->n_dims, 0);
    float scalar; /* tensors after odd-sized ones are not 4-byte aligned: no holes allowed */
    memcpy(&scalar, e->data, 4);
    assert_true(scalar == 1.5f);
    assert_int_equal(kt__st_get(set, "missing.weight", &e), KT_ERR_NOT_FOUND);
    assert_non_null(strstr(kt_last_error(), "missing.weight"));
    kt__st_close(set);
}

static void test_writer_abandoned(void **state)
{
    (void)state;
    const char *path = tmp_path("abandoned.safetensors");
    kt_st_writer *w = NULL;
    const uint64_t shape[1] = {4};
    assert_int_equal(kt__st_writer_create(&w), KT_OK);
    assert_int_equal(kt__st_writer_declare(w, "a", KT_TYPE_F32, 1, shape), KT_OK);
    assert_int_equal(kt__st_writer_begin(w, path), KT_OK);
    kt__st_writer_free(w); /* never finished: no file, no temporary left behind */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(tmp, F_OK), -1);
    kt__st_writer_free(NULL);
}

/* Hand-written header, data region not aligned, padding spaces. */
static void test_parse_memory(void **state)
{
    (void)state;
    const char *hdr = "{\"b\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[3,7]},"
                      "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}   ";
    unsigned char buf[256];
    size_t n = strlen(hdr);
    memset(buf, 0, sizeof buf);
    buf[0] = (unsigned char)n;
    memcpy(buf + 8, hdr, n);
    for (int i = 0; i < 7; i++)
        buf[8 + n + i] = (unsigned char)(10 + i);
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_parse_memory(&set, buf, 8 + n + 7, "mem"), KT_OK);
    assert_int_equal(kt__st_count(set), 2);
    assert_string_equal(kt__st_at(set, 0)->name, "b"); /* header order kept */
    const kt_st_tensor *b = kt__st_find(set, "b");
    assert_ptr_equal(b->data, buf + 8 + n + 3);
    assert_int_equal(b->shape[0], 2);
    assert_null(kt__st_at(set, 2));
    kt__st_close(set);
}

/* A header within the size cap but with millions of values is refused before cJSON
 * allocates a node for each (a 8 MB header would otherwise cost ~300 MB). */
static void test_json_value_limit(void **state)
{
    (void)state;
    const char *head = "{\"__metadata__\":{\"a\":\"b\"},\"x\":[";
    size_t n_values = KT_JSON_MAX_NODES + 1, len = strlen(head) + 2 * n_values + 2;
    unsigned char *buf = malloc(8 + len);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)len >> (8 * i));
    char *p = (char *)buf + 8;
    memcpy(p, head, strlen(head));
    p += strlen(head);
    for (size_t i = 0; i < n_values; i++, p += 2)
        memcpy(p, i + 1 < n_values ? "0," : "0]", 2);
    memcpy(p, "} ", 2);
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_parse_memory(&set, buf, 8 + len, "many_values"), KT_ERR_FORMAT);
    assert_non_null(strstr(kt_last_error(), "value limit"));
    free(buf);
}

/* Many tensors: the hash table grows and every name is found. */
static void test_many_tensors(void **state)
{
    (void)state;
    const char *path = tmp_path("many.safetensors");
    kt_st_writer *w = NULL;
    assert_int_equal(kt__st_writer_create(&w), KT_OK);
    char name[64];
    const uint64_t shape[1] = {1};
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        assert_int_equal(kt__st_writer_declare(w, name, KT_TYPE_I32, 1, shape), KT_OK);
    }
    assert_int_equal(kt__st_writer_begin(w, path), KT_OK);
    for (int32_t i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        assert_int_equal(kt__st_writer_write(w, name, &i, 4), KT_OK);
    }
    assert_int_equal(kt__st_writer_finish(w), KT_OK);
    kt__st_writer_free(w);
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_file(&set, path), KT_OK);
    assert_int_equal(kt__st_count(set), 3000);
    for (int32_t i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        const kt_st_tensor *t = kt__st_find(set, name);
        assert_non_null(t);
        int32_t v;
        memcpy(&v, t->data, 4);
        assert_int_equal(v, i);
    }
    assert_null(kt__st_find(set, "model.layers.3000.weight"));
    kt__st_close(set);
}

/* ---- directories --------------------------------------------------------------------- */

static const char *T_A = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
static const char *T_B = "{\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}";

static char *make_dir(const char *name)
{
    char *d = tmp_path(name);
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

static void dir_file(const char *dir, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static kt_status open_dir_expect(const char *dir, kt_status want, const char *needle)
{
    kt_st_set *set = NULL;
    kt_status s = kt__st_open_dir(&set, dir);
    if (s != want)
        print_error("dir %s: got %s (%s), want %s\n", dir, kt_status_str(s), kt_last_error(),
                    kt_status_str(want));
    assert_int_equal(s, want);
    if (s == KT_OK) {
        assert_non_null(set);
        kt__st_close(set);
    } else {
        assert_null(set);
        if (needle && !strstr(kt_last_error(), needle))
            fail_msg("error '%s' does not mention '%s'", kt_last_error(), needle);
    }
    return s;
}

static void test_dir_variants(void **state)
{
    (void)state;
    char p[1400];
    /* A single model.safetensors. */
    char *d1 = make_dir("single");
    dir_file(d1, "model.safetensors", p, sizeof p);
    write_st(p, T_A, 8);
    open_dir_expect(d1, KT_OK, NULL);
    /* Unindexed *.safetensors, loaded in name order. */
    char *d2 = make_dir("loose");
    dir_file(d2, "x-2.safetensors", p, sizeof p);
    write_st(p, T_B, 4);
    dir_file(d2, "x-1.safetensors", p, sizeof p);
    write_st(p, T_A, 8);
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_dir(&set, d2), KT_OK);
    assert_int_equal(kt__st_file_count(set), 2);
    assert_non_null(strstr(kt__st_file_path(set, 0), "x-1"));
    assert_int_equal(kt__st_find(set, "b")->file_index, 1);
    kt__st_close(set);
    /* Unindexed, same tensor in two files. */
    dir_file(d2, "x-3.safetensors", p, sizeof p);
    write_st(p, T_A, 8);
    open_dir_expect(d2, KT_ERR_FORMAT, "'a'");
    /* Empty directory / no directory. */
    open_dir_expect(make_dir("empty"), KT_ERR_NOT_FOUND, "no .safetensors");
    open_dir_expect(tmp_path("does-not-exist"), KT_ERR_NOT_FOUND, "does-not-exist");
}

/* A sharded directory: two shards and an index (contents `index`). */
static char *make_sharded(const char *name, const char *index)
{
    char *d = make_dir(name);
    char p[1400];
    dir_file(d, "s1.safetensors", p, sizeof p);
    write_st(p, T_A, 8);
    dir_file(d, "s2.safetensors", p, sizeof p);
    write_st(p, T_B, 4);
    dir_file(d, "model.safetensors.index.json", p, sizeof p);
    write_text(p, index);
    return d;
}

static void test_index_checks(void **state)
{
    (void)state;
    open_dir_expect(make_sharded("ok", "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\","
                                       "\"b\":\"s2.safetensors\"}}"), KT_OK, NULL);
    /* Same shard under two spellings: opened once. */
    char *alias = make_sharded("alias", "{\"weight_map\":{\"a\":\"s1.safetensors\","
                                        "\"b\":\"s2.safetensors\",\"a\":\"./s1.safetensors\"}}");
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_dir(&set, alias), KT_OK);
    assert_int_equal(kt__st_file_count(set), 2);
    kt__st_close(set);
    open_dir_expect(make_sharded("missing_shard", "{\"weight_map\":{\"a\":\"s1.safetensors\","
                                 "\"b\":\"s3.safetensors\"}}"), KT_ERR_FORMAT, "s3.safetensors");
    open_dir_expect(make_sharded("missing_tensor", "{\"weight_map\":{\"a\":\"s1.safetensors\","
                                 "\"c\":\"s2.safetensors\"}}"), KT_ERR_FORMAT, "'c'");
    open_dir_expect(make_sharded("wrong_shard", "{\"weight_map\":{\"a\":\"s2.safetensors\","
                                 "\"b\":\"s2.safetensors\"}}"), KT_ERR_FORMAT, "'a'");
    open_dir_expect(make_sharded("two_files", "{\"weight_map\":{\"a\":\"s1.safetensors\","
                                 "\"b\":\"s2.safetensors\",\"a\":\"s2.safetensors\"}}"),
                    KT_ERR_FORMAT, "'a'");
    open_dir_expect(make_sharded("dotdot", "{\"weight_map\":{\"a\":\"../ok/s1.safetensors\"}}"),
                    KT_ERR_FORMAT, "..");
    char abs_index[900];
    snprintf(abs_index, sizeof abs_index, "{\"weight_map\":{\"a\":\"%s/ok/s1.safetensors\"}}",
             tmp_root);
    open_dir_expect(make_sharded("absolute", abs_index), KT_ERR_FORMAT, "absolute");
    open_dir_expect(make_sharded("no_map", "{\"metadata\":{}}"), KT_ERR_FORMAT, "weight_map");
    open_dir_expect(make_sharded("map_not_str", "{\"weight_map\":{\"a\":1}}"), KT_ERR_FORMAT,
                    "'a'");
    open_dir_expect(make_sharded("bad_json", "{\"weight_map\":{\"a\":"), KT_ERR_FORMAT,
                    "model.safetensors.index.json");
    /* A shard that is a symlink escaping the directory. */
    char *esc = make_sharded("escape", "{\"weight_map\":{\"a\":\"s1.safetensors\","
                                       "\"x\":\"link.safetensors\"}}");
    char link[1400], target[1400];
    dir_file(esc, "link.safetensors", link, sizeof link);
    snprintf(target, sizeof target, "%s/ok/s2.safetensors", tmp_root);
    assert_int_equal(symlink(target, link), 0);
    open_dir_expect(esc, KT_ERR_FORMAT, "outside");
    /* A FIFO named as a shard is refused at once, not waited on. */
    char *fifo_dir = make_sharded("fifo", "{\"weight_map\":{\"a\":\"s1.safetensors\","
                                          "\"x\":\"pipe.safetensors\"}}");
    char fifo[1400];
    dir_file(fifo_dir, "pipe.safetensors", fifo, sizeof fifo);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    open_dir_expect(fifo_dir, KT_ERR_IO, "not a regular file");
    /* Symlinks inside the directory are fine. */
    char *inside = make_sharded("inside", "{\"weight_map\":{\"a\":\"l1.safetensors\","
                                          "\"b\":\"s2.safetensors\"}}");
    dir_file(inside, "l1.safetensors", link, sizeof link);
    assert_int_equal(symlink("s1.safetensors", link), 0);
    open_dir_expect(inside, KT_OK, NULL);
    /* A Hugging Face cache snapshot: files link into ../../blobs. */
    char *repo = make_dir("models--org--name");
    char sub[800];
    snprintf(sub, sizeof sub, "%s/blobs", repo);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/blobs/abc123", repo);
    write_st(sub, T_A, 8);
    snprintf(sub, sizeof sub, "%s/snapshots", repo);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/snapshots/rev1", repo);
    assert_int_equal(mkdir(sub, 0755), 0);
    dir_file(sub, "model-1.safetensors", link, sizeof link);
    assert_int_equal(symlink("../../blobs/abc123", link), 0);
    char idx[900];
    dir_file(sub, "model.safetensors.index.json", idx, sizeof idx);
    write_text(idx, "{\"weight_map\":{\"a\":\"model-1.safetensors\"}}");
    open_dir_expect(sub, KT_OK, NULL);
}

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0, c;
    if (!f)
        return -1;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Failing and succeeding opens leave no mapping or descriptor behind. */
static void test_no_leaked_maps_or_fds(void **state)
{
    (void)state;
    char ok_dir[600], bad_dir[600];
    snprintf(ok_dir, sizeof ok_dir, "%s/ok", tmp_root);
    snprintf(bad_dir, sizeof bad_dir, "%s/hostile/dir_tensor_missing", test_data());
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_open_dir(&set, ok_dir), KT_OK); /* warm up lazy allocations */
    kt__st_close(set);
    int maps = count_lines("/proc/self/maps"), fds = count_fds();
    for (int i = 0; i < 50; i++) {
        assert_int_equal(kt__st_open_dir(&set, ok_dir), KT_OK);
        kt__st_close(set);
        assert_int_equal(kt__st_open_dir(&set, bad_dir), KT_ERR_FORMAT);
    }
    assert_int_equal(count_lines("/proc/self/maps"), maps);
    assert_int_equal(count_fds(), fds);
}

/* ---- real checkpoints ---------------------------------------------------------------- */

/* Checks one sharded fixture directory against its own index and files. */
static void check_fixture_dir(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    cJSON *index = NULL;
    assert_int_equal(kt__json_parse_file(&index, path), KT_OK);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    assert_true(cJSON_IsObject(map));

    kt_st_set *set = NULL;
    if (kt__st_open_dir(&set, dir) != KT_OK)
        fail_msg("%s: %s", dir, kt_last_error());
    assert_int_equal(kt__st_count(set), (size_t)cJSON_GetArraySize(map));
    uint64_t total = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        const kt_st_tensor *t = kt__st_find(set, e->string);
        if (!t)
            fail_msg("%s: tensor %s not found", dir, e->string);
        const char *file = kt__st_file_path(set, t->file_index);
        const char *base = strrchr(file, '/') + 1;
        assert_string_equal(base, e->valuestring);
        /* In range of its own file, dtype x shape = bytes. */
        struct stat st;
        assert_int_equal(stat(file, &st), 0);
        uint64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n *= t->shape[d];
        assert_int_equal(n, t->n_elements);
        assert_int_equal(t->nbytes, n * kt_type_block_bytes(t->type));
        assert_true(t->nbytes <= (uint64_t)st.st_size);
        assert_non_null(kt_type_name(t->type));
        total += t->nbytes;
    }
    /* The index's total_size is the sum of tensor bytes, as transformers writes it. */
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(index, "metadata");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(meta, "total_size");
    uint64_t want;
    if (kt__json_u64(ts, &want))
        assert_int_equal(total, want);

    /* config.json: the embedding is [vocab_size][hidden_size]. */
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *config = NULL;
    if (kt__json_parse_file(&config, path) == KT_OK) {
        uint64_t vocab, hidden;
        const kt_st_tensor *emb = kt__st_find(set, "model.embed_tokens.weight");
        if (emb && kt__json_u64(cJSON_GetObjectItemCaseSensitive(config, "vocab_size"), &vocab) &&
            kt__json_u64(cJSON_GetObjectItemCaseSensitive(config, "hidden_size"), &hidden)) {
            assert_int_equal(emb->n_dims, 2);
            assert_int_equal(emb->shape[0], vocab);
            assert_int_equal(emb->shape[1], hidden);
        }
        cJSON_Delete(config);
    }
    kt__st_close(set);
    cJSON_Delete(index);
}

/* reference.safetensors' greedy_ids (I32) equal reference.json's. */
static void check_reference_ids(const char *family_dir, const char *variant_dir,
                                const char *variant)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/reference.json", family_dir);
    cJSON *ref = NULL;
    if (kt__json_parse_file(&ref, path) != KT_OK)
        return;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ref, "variants"), variant);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(v, "greedy_ids");
    snprintf(path, sizeof path, "%s/reference.safetensors", variant_dir);
    kt_st_set *set = NULL;
    if (cJSON_IsArray(ids) && kt__st_open_file(&set, path) == KT_OK) {
        const kt_st_tensor *t = kt__st_find(set, "greedy_ids");
        assert_non_null(t);
        assert_int_equal(t->type, KT_TYPE_I32);
        assert_int_equal(t->n_elements, (uint64_t)cJSON_GetArraySize(ids));
        float *f = calloc(t->n_elements + 1, sizeof *f);
        assert_int_equal(kt__tensor_to_f32(t->data, t->type, t->n_elements, f), KT_OK);
        size_t i = 0;
        for (const cJSON *id = ids->child; id; id = id->next, i++)
            assert_true(f[i] == (float)id->valuedouble);
        free(f);
        kt__st_close(set);
    }
    cJSON_Delete(ref);
}

/* Every checkpoint directory under root: root/<name>/ and root/<name>/<variant>/. */
static int scan_checkpoints(const char *root)
{
    DIR *d = opendir(root);
    if (!d)
        return 0;
    int checked = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char fam[1024], idx[1300];
        snprintf(fam, sizeof fam, "%s/%s", root, de->d_name);
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", fam);
        if (access(idx, F_OK) == 0) {
            check_fixture_dir(fam);
            check_reference_ids(fam, fam, "bf16");
            checked++;
        }
        static const char *variants[] = {"bf16", "fp8", "int4"};
        for (size_t v = 0; v < 3; v++) {
            char var[1200];
            snprintf(var, sizeof var, "%s/%s", fam, variants[v]);
            snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", var);
            if (access(idx, F_OK) == 0) {
                check_fixture_dir(var);
                check_reference_ids(fam, var, variants[v]);
                checked++;
            }
        }
    }
    closedir(d);
    return checked;
}

static void test_fixtures(void **state)
{
    (void)state;
    char root[600];
    snprintf(root, sizeof root, "%s/fixtures", test_data());
    int checked = scan_checkpoints(root);
    print_message("checked %d checkpoints in %s\n", checked, root);
    assert_true(checked >= 1);
    /* The shared fixtures and the trained demo models, where the checkout has them
     * beside it (as CI does); too big to copy into the repository. */
    const char *src = getenv("KT_SOURCE_ROOT");
    static const char *shared[] = {"fixtures", "models"};
    for (size_t i = 0; src && i < 2; i++) {
        snprintf(root, sizeof root, "%s/../shared/%s", src, shared[i]);
        int n = scan_checkpoints(root);
        if (n)
            print_message("checked %d checkpoints in %s\n", n, root);
    }
}

/* Spot check of real data: qwen3_moe_tiny's final norm is BF16 [64]. */
static void test_fixture_values(void **state)
{
    (void)state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3_moe_tiny", test_data());
    kt_st_set *set = NULL;
    if (access(dir, F_OK) != 0)
        skip();
    assert_int_equal(kt__st_open_dir(&set, dir), KT_OK);
    assert_int_equal(kt__st_file_count(set), 2);
    const kt_st_tensor *t = NULL;
    assert_int_equal(kt__st_get(set, "model.norm.weight", &t), KT_OK);
    assert_int_equal(t->type, KT_TYPE_BF16);
    assert_int_equal(t->n_dims, 1);
    assert_int_equal(t->shape[0], 64);
    float f[64];
    assert_int_equal(kt__tensor_to_f32(t->data, t->type, 64, f), KT_OK);
    for (int i = 0; i < 64; i++)
        assert_true(isfinite(f[i]));
    assert_int_equal(kt__st_get(set, "model.layers.1.mlp.experts.7.down_proj.weight", &t), KT_OK);
    assert_int_equal(t->shape[0], 64);
    assert_int_equal(t->shape[1], 96);

    /* transformers' first hidden state is the embedding of each prompt token: the
     * BF16 rows we read must equal its F32 values exactly. */
    char ref_path[700];
    snprintf(ref_path, sizeof ref_path, "%s/reference.safetensors", dir);
    kt_st_set *ref = NULL;
    assert_int_equal(kt__st_open_file(&ref, ref_path), KT_OK);
    const kt_st_tensor *ids = NULL, *hidden = NULL, *emb = NULL;
    assert_int_equal(kt__st_get(ref, "prompt_ids", &ids), KT_OK);
    assert_int_equal(kt__st_get(ref, "hidden_states", &hidden), KT_OK);
    assert_int_equal(kt__st_get(set, "model.embed_tokens.weight", &emb), KT_OK);
    assert_int_equal(ids->type, KT_TYPE_I32);
    assert_int_equal(hidden->type, KT_TYPE_F32);
    assert_int_equal(hidden->n_dims, 3);
    uint64_t n_tok = ids->n_elements, hid = emb->shape[1];
    assert_int_equal(hidden->shape[1], n_tok);
    assert_int_equal(hidden->shape[2], hid);
    float *row = malloc(hid * sizeof *row), *want = malloc(hid * sizeof *want);
    for (uint64_t i = 0; i < n_tok; i++) {
        int32_t id;
        memcpy(&id, (const unsigned char *)ids->data + 4 * i, 4);
        assert_true(id >= 0 && (uint64_t)id < emb->shape[0]);
        const unsigned char *emb_row = (const unsigned char *)emb->data + 2 * hid * (uint64_t)id;
        assert_int_equal(kt__tensor_to_f32(emb_row, KT_TYPE_BF16, hid, row), KT_OK);
        assert_int_equal(kt__tensor_to_f32((const unsigned char *)hidden->data + 4 * hid * i,
                                           KT_TYPE_F32, hid, want), KT_OK);
        assert_memory_equal(row, want, hid * sizeof *row);
    }
    free(row);
    free(want);
    kt__st_close(ref);
    kt__st_close(set);
}


/* ---- hostile corpus (tests/data/hostile, made by make_hostile.py) ---------------------- */

/* Runs every MANIFEST case of the given kinds through `open`; returns the count. */
static int run_manifest(const char *const *kinds, size_t n_kinds,
                        kt_status (*open_fn)(const char *kind, const char *path))
{
    FILE *f = hostile_manifest();
    int n = 0;
    hostile_case c;
    while (hostile_next(f, &c)) {
        bool mine = false;
        for (size_t k = 0; k < n_kinds; k++)
            mine |= strcmp(c.kind, kinds[k]) == 0;
        if (!mine)
            continue;
        kt_clear_error();
        kt_status s = open_fn(c.kind, c.path);
        if (strcmp(kt_status_str(s), c.want) != 0)
            fail_msg("%s: got %s (%s), want %s", c.name, kt_status_str(s), kt_last_error(),
                     c.want);
        if (s != KT_OK) {
            const char *msg = kt_last_error();
            if (!strstr(msg, c.name))
                fail_msg("%s: message does not name the file: %s", c.name, msg);
            if (strcmp(c.needle, "-") != 0 && !strstr(msg, c.needle))
                fail_msg("%s: message lacks '%s': %s", c.name, c.needle, msg);
            if (getenv("KT_TEST_VERBOSE"))
                print_message("%-40s %s\n", c.name, msg);
        }
        n++;
    }
    fclose(f);
    return n;
}

static kt_status open_st_case(const char *kind, const char *path)
{
    kt_st_set *set = (kt_st_set *)(uintptr_t)1;
    kt_status s = strcmp(kind, "dir") == 0 ? kt__st_open_dir(&set, path)
                                           : kt__st_open_file(&set, path);
    if (s == KT_OK)
        kt__st_close(set);
    else if (set)
        fail_msg("%s: *out not NULL after failure", path);
    return s;
}

static void test_hostile_corpus(void **state)
{
    (void)state;
    static const char *const kinds[] = {"st", "dir", "ok"};
    int n = run_manifest(kinds, 3, open_st_case);
    print_message("%d safetensors corpus cases ran clean\n", n);
    assert_true(n >= 30);
}

/* Every prefix of a valid file, and many single-byte corruptions of it: each is
 * either accepted or refused with an error naming it; never a crash (run under
 * ASan/UBSan to make that a real check). */
static void test_truncations_and_flips(void **state)
{
    (void)state;
    char path[700];
    snprintf(path, sizeof path, "%s/hostile/valid.safetensors", test_data());
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char file[4096];
    size_t size = fread(file, 1, sizeof file, f);
    fclose(f);
    kt_st_set *set = NULL;
    assert_int_equal(kt__st_parse_memory(&set, file, size, "valid"), KT_OK);
    assert_int_equal(kt__st_count(set), 2);
    kt__st_close(set);
    for (size_t cut = 0; cut < size; cut++) {
        /* A private copy of exactly `cut` bytes, so ASan sees any overread. */
        unsigned char *copy = malloc(cut ? cut : 1);
        memcpy(copy, file, cut);
        assert_int_equal(kt__st_parse_memory(&set, copy, cut, "cut"), KT_ERR_FORMAT);
        assert_null(set);
        assert_non_null(strstr(kt_last_error(), "cut"));
        free(copy);
    }
    uint32_t rng = 12345;
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        unsigned char *copy = flipped_copy(file, size, iter, &rng);
        kt_status s = kt__st_parse_memory(&set, copy, size, "flip");
        if (s == KT_OK) {
            accepted++;
            for (size_t i = 0; i < kt__st_count(set); i++) {
                const kt_st_tensor *t = kt__st_at(set, i);
                assert_true((const unsigned char *)t->data >= copy);
                assert_true((const unsigned char *)t->data + t->nbytes <= copy + size);
            }
            kt__st_close(set);
        } else {
            assert_non_null(strstr(kt_last_error(), "flip"));
        }
        free(copy);
    }
    print_message("%d of 20000 corrupted copies still parsed (data in range)\n", accepted);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_tables),
        cmocka_unit_test(test_f16_bf16),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_tensor_to_f32),
        cmocka_unit_test(test_round_trip_all_dtypes),
        cmocka_unit_test(test_writer_abandoned),
        cmocka_unit_test(test_parse_memory),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_json_value_limit),
        cmocka_unit_test(test_dir_variants),
        cmocka_unit_test(test_index_checks),
        cmocka_unit_test(test_no_leaked_maps_or_fds),
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_fixture_values),
        cmocka_unit_test(test_hostile_corpus),
        cmocka_unit_test(test_truncations_and_flips),
    };
    return cmocka_run_group_tests(tests, make_tmp_root, remove_tmp_root);
}
