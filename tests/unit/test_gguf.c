/* GGUF reader/writer (lib/io/gguf.c). Reference files in tests/data/gguf were written
 * by llama.cpp's gguf-py (make_reference.py there); the values below are the ones
 * that script writes. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/convert_types.h"
#include "io/gguf.h"
#include "test_files.h"

/* The file in a heap block of exactly its size, so that ASan sees any overread. */
static unsigned char *read_file(const char *path, size_t *size)
{
    char *text = read_whole_file(path, size);
    if (!text)
        return NULL;
    unsigned char *exact = malloc(*size ? *size : 1);
    assert_non_null(exact);
    memcpy(exact, text, *size);
    free(text);
    return exact;
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)((i * 7 + 3) & 0xff);
}

static const kt_gguf_value *must_find(const kt_gguf *g, const char *key)
{
    const kt_gguf_value *v = kt__gguf_find(g, key);
    if (!v)
        fail_msg("key %s missing", key);
    return v;
}

/* ---- gguf-py reference files ------------------------------------------------------- */

static void check_reference(const kt_gguf *g, uint32_t alignment)
{
    assert_int_equal(kt__gguf_version(g), 3);
    assert_int_equal(kt__gguf_alignment(g), alignment);
    assert_int_equal(kt__gguf_kv_count(g), alignment == 32 ? 20 : 21);
    const char *s = NULL;
    assert_int_equal(kt__gguf_get_str(g, "general.architecture", &s), KT_OK);
    assert_string_equal(s, "llama");

    assert_int_equal(must_find(g, "t.u8")->type, KT_GGUF_U8);
    assert_int_equal(must_find(g, "t.u8")->v.u, 200);
    assert_int_equal(must_find(g, "t.i8")->v.i, -100);
    assert_int_equal(must_find(g, "t.u16")->v.u, 60000);
    assert_int_equal(must_find(g, "t.i16")->v.i, -30000);
    assert_int_equal(must_find(g, "t.u32")->v.u, 4000000000u);
    assert_int_equal(must_find(g, "t.i32")->v.i, -2000000000);
    assert_true(must_find(g, "t.f32")->v.f == 0.15625);
    assert_true(must_find(g, "t.u64")->v.u == (UINT64_C(1) << 63) + 5);
    assert_true(must_find(g, "t.i64")->v.i == -(INT64_C(1) << 62) - 7);
    assert_true(must_find(g, "t.f64")->v.f == -1.5e300);
    assert_int_equal(must_find(g, "t.f64")->type, KT_GGUF_F64);
    assert_true(must_find(g, "t.bool")->v.b);
    const kt_gguf_value *str = must_find(g, "t.str");
    assert_int_equal(str->type, KT_GGUF_STRING);
    assert_string_equal(str->v.str.ptr, "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93");
    assert_int_equal(str->v.str.len, 17);

    const kt_gguf_value *a = NULL;
    assert_int_equal(kt__gguf_get_array(g, "t.arr_i32", KT_GGUF_I32, &a), KT_OK);
    assert_int_equal(a->v.arr.n, 3);
    assert_int_equal(((const int32_t *)a->v.arr.data)[1], -2);
    assert_int_equal(kt__gguf_get_array(g, "t.arr_str", KT_GGUF_STRING, &a), KT_OK);
    const kt_gguf_str *strs = a->v.arr.data;
    assert_int_equal(a->v.arr.n, 3);
    assert_string_equal(strs[0].ptr, "a");
    assert_int_equal(strs[1].len, 0);
    assert_string_equal(strs[2].ptr, "\xc3\xbcn\xc3\xaf");
    assert_int_equal(kt__gguf_get_array(g, "t.arr_nested", KT_GGUF_ARRAY, &a), KT_OK);
    const kt_gguf_value *inner = a->v.arr.data;
    assert_int_equal(a->v.arr.n, 2);
    assert_int_equal(inner[0].v.arr.elem, KT_GGUF_STRING);
    assert_int_equal(inner[0].v.arr.n, 2);
    assert_string_equal(((const kt_gguf_str *)inner[0].v.arr.data)[1].ptr, "y");
    assert_string_equal(((const kt_gguf_str *)inner[1].v.arr.data)[0].ptr, "z");
    assert_int_equal(kt__gguf_get_array(g, "t.arr_f32", KT_GGUF_F32, &a), KT_OK);
    assert_true(((const float *)a->v.arr.data)[1] == -1.25f);
    assert_int_equal(kt__gguf_get_array(g, "t.arr_bool", KT_GGUF_BOOL, &a), KT_OK);
    assert_memory_equal(a->v.arr.data, "\x01\x00\x01", 3);
    assert_int_equal(kt__gguf_get_array(g, "t.arr_u64", KT_GGUF_U64, &a), KT_OK);
    assert_true(((const uint64_t *)a->v.arr.data)[1] == UINT64_C(1) << 40);
    assert_int_equal(kt__gguf_get_array(g, "t.arr_u8", KT_GGUF_U8, &a), KT_OK);
    assert_memory_equal(a->v.arr.data, "\x00\xff\x10", 3);

    assert_int_equal(kt__gguf_tensor_count(g), 7);
    const kt_gguf_tensor *t = kt__gguf_find_tensor(g, "f32");
    assert_non_null(t);
    assert_int_equal(t->type, KT_TYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 4);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->nbytes, 48);
    for (int i = 0; i < 12; i++)
        assert_true(((const float *)t->data)[i] == 0.5f * (float)i);
    t = kt__gguf_find_tensor(g, "f16");
    assert_int_equal(t->type, KT_TYPE_F16);
    for (int i = 0; i < 16; i++)
        assert_true(kt__f16_to_f32(((const uint16_t *)t->data)[i]) == (float)(i - 8));
    t = kt__gguf_find_tensor(g, "i32");
    assert_int_equal(t->type, KT_TYPE_I32);
    assert_int_equal(t->n_dims, 1);
    assert_int_equal(((const int32_t *)t->data)[4], 3);
    t = kt__gguf_find_tensor(g, "q8_0");
    assert_int_equal(t->type, KT_TYPE_Q8_0);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->nbytes, 4 * 34);
    for (size_t i = 0; i < t->nbytes; i++)
        assert_int_equal(((const uint8_t *)t->data)[i], pattern(i));
    t = kt__gguf_find_tensor(g, "q4_k");
    assert_int_equal(t->type, KT_TYPE_Q4_K);
    assert_int_equal(t->ne[0], 256);
    assert_int_equal(t->nbytes, 144);
    t = kt__gguf_find_tensor(g, "bf16");
    assert_int_equal(t->type, KT_TYPE_BF16);
    assert_int_equal(t->ne[0], 4);
    t = kt__gguf_find_tensor(g, "iq2_xxs"); /* a ggml type kt_type does not name */
    assert_int_equal(t->type, KT_TYPE_INVALID);
    assert_int_equal(t->ggml_type, 16);
    assert_int_equal(t->nbytes, 66);
    for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
        t = kt__gguf_tensor_at(g, i);
        assert_int_equal(t->offset % alignment, 0);
        assert_int_equal((kt__gguf_data_offset(g)) % alignment, 0);
    }
    assert_null(kt__gguf_find_tensor(g, "nope"));
    assert_null(kt__gguf_tensor_at(g, 7));
}

static void test_reference_files(void **state)
{
    (void)state;
    char path[600];
    kt_gguf *g = NULL;
    snprintf(path, sizeof path, "%s/gguf/reference.gguf", test_data());
    if (kt__gguf_open_file(&g, path) != KT_OK)
        fail_msg("%s", kt_last_error());
    check_reference(g, 32);
    kt__gguf_close(g);
    snprintf(path, sizeof path, "%s/gguf/reference_align64.gguf", test_data());
    assert_int_equal(kt__gguf_open_file(&g, path), KT_OK);
    check_reference(g, 64);
    kt__gguf_close(g);
    /* The same bytes from memory. */
    size_t size;
    unsigned char *buf = read_file(path, &size);
    assert_non_null(buf);
    assert_int_equal(kt__gguf_parse_memory(&g, buf, size, "mem"), KT_OK);
    check_reference(g, 64);
    assert_string_equal(kt__gguf_name(g), "mem");
    kt__gguf_close(g);
    free(buf);
}

/* ---- writer round trip ------------------------------------------------------------- */

static bool value_equal(const kt_gguf_value *a, const kt_gguf_value *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case KT_GGUF_STRING:
        return a->v.str.len == b->v.str.len &&
               memcmp(a->v.str.ptr, b->v.str.ptr, (size_t)a->v.str.len) == 0;
    case KT_GGUF_BOOL: return a->v.b == b->v.b;
    case KT_GGUF_F32: case KT_GGUF_F64: return a->v.f == b->v.f;
    case KT_GGUF_I8: case KT_GGUF_I16: case KT_GGUF_I32: case KT_GGUF_I64:
        return a->v.i == b->v.i;
    case KT_GGUF_ARRAY: break;
    default: return a->v.u == b->v.u;
    }
    if (a->v.arr.elem != b->v.arr.elem || a->v.arr.n != b->v.arr.n)
        return false;
    for (uint64_t i = 0; i < a->v.arr.n; i++) {
        kt_gguf_value x, y;
        memset(&x, 0, sizeof x);
        memset(&y, 0, sizeof y);
        if (a->v.arr.elem == KT_GGUF_ARRAY) {
            if (!value_equal(&((const kt_gguf_value *)a->v.arr.data)[i],
                             &((const kt_gguf_value *)b->v.arr.data)[i]))
                return false;
        } else if (a->v.arr.elem == KT_GGUF_STRING) {
            x.type = y.type = KT_GGUF_STRING;
            x.v.str = ((const kt_gguf_str *)a->v.arr.data)[i];
            y.v.str = ((const kt_gguf_str *)b->v.arr.data)[i];
            if (!value_equal(&x, &y))
                return false;
        }
    }
    if (a->v.arr.elem != KT_GGUF_ARRAY && a->v.arr.elem != KT_GGUF_STRING) {
        size_t es = a->v.arr.elem == KT_GGUF_U8 || a->v.arr.elem == KT_GGUF_I8 ||
                    a->v.arr.elem == KT_GGUF_BOOL ? 1
                    : a->v.arr.elem == KT_GGUF_U16 || a->v.arr.elem == KT_GGUF_I16 ? 2
                    : a->v.arr.elem == KT_GGUF_U64 || a->v.arr.elem == KT_GGUF_I64 ||
                      a->v.arr.elem == KT_GGUF_F64 ? 8 : 4;
        return memcmp(a->v.arr.data, b->v.arr.data, (size_t)a->v.arr.n * es) == 0;
    }
    return true;
}

/* Copies every key and tensor of g through the writer. */
static kt_gguf_writer *copy_through_writer(const kt_gguf *g, uint32_t version)
{
    kt_gguf_writer *w = NULL;
    assert_int_equal(kt__gguf_writer_create(&w, version), KT_OK);
    for (size_t i = 0; i < kt__gguf_kv_count(g); i++) {
        const kt_gguf_kv *kv = kt__gguf_kv_at(g, i);
        assert_int_equal(kt__gguf_writer_add(w, kv->key, &kv->value), KT_OK);
    }
    for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
        const kt_gguf_tensor *t = kt__gguf_tensor_at(g, i);
        assert_int_equal(kt__gguf_writer_add_tensor(w, t->name, t->ggml_type, t->n_dims, t->ne,
                                                    t->data), KT_OK);
    }
    return w;
}

static void assert_same_contents(const kt_gguf *a, const kt_gguf *b)
{
    assert_int_equal(kt__gguf_kv_count(a), kt__gguf_kv_count(b));
    for (size_t i = 0; i < kt__gguf_kv_count(a); i++) {
        const kt_gguf_kv *x = kt__gguf_kv_at(a, i), *y = kt__gguf_kv_at(b, i);
        assert_string_equal(x->key, y->key);
        if (!value_equal(&x->value, &y->value))
            fail_msg("key %s differs", x->key);
    }
    assert_int_equal(kt__gguf_tensor_count(a), kt__gguf_tensor_count(b));
    for (size_t i = 0; i < kt__gguf_tensor_count(a); i++) {
        const kt_gguf_tensor *x = kt__gguf_tensor_at(a, i), *y = kt__gguf_tensor_at(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->ggml_type, y->ggml_type);
        assert_int_equal(x->n_dims, y->n_dims);
        assert_memory_equal(x->ne, y->ne, sizeof x->ne);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, (size_t)x->nbytes);
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    static const char *names[] = {"reference.gguf", "reference_align64.gguf"};
    for (int f = 0; f < 2; f++) {
        char path[600];
        snprintf(path, sizeof path, "%s/gguf/%s", test_data(), names[f]);
        size_t size;
        unsigned char *orig = read_file(path, &size);
        assert_non_null(orig);
        kt_gguf *g = NULL;
        assert_int_equal(kt__gguf_parse_memory(&g, orig, size, path), KT_OK);
        /* v3: our writer lays the file out exactly as gguf-py did. */
        kt_gguf_writer *w = copy_through_writer(g, 3);
        kt_buf buf = KT_BUF_INIT;
        assert_int_equal(kt__gguf_writer_write_buf(w, &buf), KT_OK);
        assert_int_equal(buf.size, size);
        assert_memory_equal(buf.ptr, orig, size);
        kt_gguf *back = NULL;
        assert_int_equal(kt__gguf_parse_memory(&back, buf.ptr, buf.size, "v3"), KT_OK);
        assert_same_contents(g, back);
        kt__gguf_close(back);
        kt_buf_dispose(&buf);
        kt__gguf_writer_free(w);
        /* v2, through a file. */
        w = copy_through_writer(g, 2);
        char out[] = "/tmp/kt_test_gguf_XXXXXX";
        tmp_file_create(out);
        assert_int_equal(kt__gguf_writer_write_file(w, out), KT_OK);
        assert_int_equal(kt__gguf_open_file(&back, out), KT_OK);
        assert_int_equal(kt__gguf_version(back), 2);
        assert_same_contents(g, back);
        kt__gguf_close(back);
        unlink(out);
        kt__gguf_writer_free(w);
        kt__gguf_close(g);
        free(orig);
    }
}

/* Every value type, built with the writer's own API, several tensor types. */
static void test_writer_all_types(void **state)
{
    (void)state;
    kt_gguf_writer *w = NULL;
    assert_int_equal(kt__gguf_writer_create(&w, 3), KT_OK);
    assert_int_equal(kt__gguf_writer_add_u32(w, "general.alignment", 128), KT_OK);
    kt_gguf_value v;
    const kt_gguf_type scalars[] = {KT_GGUF_U8,  KT_GGUF_I8,  KT_GGUF_U16, KT_GGUF_I16,
                                    KT_GGUF_U32, KT_GGUF_I32, KT_GGUF_F32, KT_GGUF_BOOL,
                                    KT_GGUF_U64, KT_GGUF_I64, KT_GGUF_F64};
    char key[64];
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        memset(&v, 0, sizeof v);
        v.type = scalars[i];
        if (v.type == KT_GGUF_F32 || v.type == KT_GGUF_F64)
            v.v.f = -3.5;
        else if (v.type == KT_GGUF_BOOL)
            v.v.b = true;
        else if (v.type == KT_GGUF_I8 || v.type == KT_GGUF_I16 || v.type == KT_GGUF_I32 ||
                 v.type == KT_GGUF_I64)
            v.v.i = -7;
        else
            v.v.u = 250;
        snprintf(key, sizeof key, "s.%s", kt__gguf_type_name(scalars[i]));
        assert_int_equal(kt__gguf_writer_add(w, key, &v), KT_OK);
        /* And an array of the same type. */
        uint64_t raw[4] = {0x0101010101010101ull, 0, 0x0101010101010101ull, 0};
        kt_gguf_value arr = {.type = KT_GGUF_ARRAY, .v.arr = {scalars[i], 3, raw}};
        snprintf(key, sizeof key, "a.%s", kt__gguf_type_name(scalars[i]));
        assert_int_equal(kt__gguf_writer_add(w, key, &arr), KT_OK);
    }
    assert_int_equal(kt__gguf_writer_add_str(w, "s.string", "text"), KT_OK);
    const char *words[] = {"alpha", "", "gamma"};
    assert_int_equal(kt__gguf_writer_add_str_array(w, "a.string", words, 3), KT_OK);
    /* [[["p"], []], [["q", "r"]]]: three levels. */
    kt_gguf_str p[] = {{"p", 1}}, qr[] = {{"q", 1}, {"r", 1}};
    kt_gguf_value l3a[] = {{.type = KT_GGUF_ARRAY, .v.arr = {KT_GGUF_STRING, 1, p}},
                           {.type = KT_GGUF_ARRAY, .v.arr = {KT_GGUF_STRING, 0, NULL}}};
    kt_gguf_value l3b[] = {{.type = KT_GGUF_ARRAY, .v.arr = {KT_GGUF_STRING, 2, qr}}};
    kt_gguf_value l2[] = {{.type = KT_GGUF_ARRAY, .v.arr = {KT_GGUF_ARRAY, 2, l3a}},
                          {.type = KT_GGUF_ARRAY, .v.arr = {KT_GGUF_ARRAY, 1, l3b}}};
    kt_gguf_value nested = {.type = KT_GGUF_ARRAY, .v.arr = {KT_GGUF_ARRAY, 2, l2}};
    assert_int_equal(kt__gguf_writer_add(w, "a.nested", &nested), KT_OK);
    assert_int_equal(kt__gguf_writer_add_bool(w, "s.flag", false), KT_OK);
    assert_int_equal(kt__gguf_writer_add_i32(w, "s.neg", -1), KT_OK);
    assert_int_equal(kt__gguf_writer_add_u64(w, "s.big", UINT64_MAX), KT_OK);
    assert_int_equal(kt__gguf_writer_add_f32(w, "s.half", 0.5f), KT_OK);

    /* Tensors of several ggml types, data = byte pattern. */
    static const struct { const char *name; kt_type type; uint64_t ne0, ne1; } ts[] = {
        {"w.f32", KT_TYPE_F32, 3, 2},     {"w.f16", KT_TYPE_F16, 5, 1},
        {"w.bf16", KT_TYPE_BF16, 8, 3},   {"w.q4_0", KT_TYPE_Q4_0, 64, 2},
        {"w.q8_0", KT_TYPE_Q8_0, 32, 3},  {"w.q4_k", KT_TYPE_Q4_K, 256, 2},
        {"w.q6_k", KT_TYPE_Q6_K, 512, 1}, {"w.iq4_nl", KT_TYPE_IQ4_NL, 32, 1},
        {"w.iq4_xs", KT_TYPE_IQ4_XS, 256, 1}, {"w.q2_k", KT_TYPE_Q2_K, 256, 1},
        {"w.i8", KT_TYPE_I8, 7, 1},       {"w.empty", KT_TYPE_F32, 0, 4},
    };
    unsigned char data[4096];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = pattern(i);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        uint64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        assert_int_equal(kt__gguf_writer_add_tensor(w, ts[i].name,
                                                    (uint32_t)kt__type_to_ggml(ts[i].type), 2,
                                                    ne, data), KT_OK);
    }
    /* Misuse. */
    assert_int_equal(kt__gguf_writer_add_u32(w, "s.neg", 1), KT_ERR_INVALID_ARG);
    assert_int_equal(kt__gguf_writer_add_u32(w, "general.alignment", 64), KT_ERR_INVALID_ARG);
    uint64_t bad_ne[1] = {31};
    assert_int_equal(kt__gguf_writer_add_tensor(w, "x", 8, 1, bad_ne, data), KT_ERR_INVALID_ARG);
    assert_int_equal(kt__gguf_writer_add_tensor(w, "x", 4, 1, bad_ne, data), KT_ERR_INVALID_ARG);
    assert_int_equal(kt__gguf_writer_add_tensor(w, "w.f32", 0, 1, bad_ne, data),
                     KT_ERR_INVALID_ARG);

    kt_buf buf = KT_BUF_INIT;
    assert_int_equal(kt__gguf_writer_write_buf(w, &buf), KT_OK);
    kt__gguf_writer_free(w);
    /* Header bytes per the format: magic, version, counts. */
    assert_memory_equal(buf.ptr, "GGUF\x03\x00\x00\x00", 8);
    uint64_t n_tensors, n_kv;
    memcpy(&n_tensors, buf.ptr + 8, 8);
    memcpy(&n_kv, buf.ptr + 16, 8);
    assert_int_equal(n_tensors, 12);
    assert_int_equal(n_kv, 1 + 22 + 2 + 1 + 4);

    kt_gguf *g = NULL;
    if (kt__gguf_parse_memory(&g, buf.ptr, buf.size, "all") != KT_OK)
        fail_msg("%s", kt_last_error());
    assert_int_equal(kt__gguf_alignment(g), 128);
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        snprintf(key, sizeof key, "s.%s", kt__gguf_type_name(scalars[i]));
        const kt_gguf_value *x = must_find(g, key);
        assert_int_equal(x->type, scalars[i]);
        snprintf(key, sizeof key, "a.%s", kt__gguf_type_name(scalars[i]));
        const kt_gguf_value *a = NULL;
        assert_int_equal(kt__gguf_get_array(g, key, scalars[i], &a), KT_OK);
        assert_int_equal(a->v.arr.n, 3);
    }
    double f;
    int64_t i64;
    uint64_t u64;
    bool b;
    assert_int_equal(kt__gguf_get_float(g, "s.f32", &f), KT_OK);
    assert_true(f == -3.5);
    assert_int_equal(kt__gguf_get_int(g, "s.i16", &i64), KT_OK);
    assert_int_equal(i64, -7);
    assert_int_equal(kt__gguf_get_uint(g, "s.u16", &u64), KT_OK);
    assert_int_equal(u64, 250);
    assert_int_equal(kt__gguf_get_uint(g, "s.big", &u64), KT_OK);
    assert_true(u64 == UINT64_MAX);
    assert_int_equal(kt__gguf_get_bool(g, "s.bool", &b), KT_OK);
    assert_true(b);
    /* Type checks and missing keys name the key. */
    assert_int_equal(kt__gguf_get_uint(g, "s.neg", &u64), KT_ERR_FORMAT);
    assert_non_null(strstr(kt_last_error(), "s.neg"));
    assert_int_equal(kt__gguf_get_int(g, "s.big", &i64), KT_ERR_FORMAT);
    assert_int_equal(kt__gguf_get_str(g, "s.u8", &(const char *){NULL}), KT_ERR_FORMAT);
    assert_int_equal(kt__gguf_get_bool(g, "s.u8", &b), KT_ERR_FORMAT);
    assert_int_equal(kt__gguf_get_float(g, "s.string", &f), KT_ERR_FORMAT);
    const kt_gguf_value *a = NULL;
    assert_int_equal(kt__gguf_get_array(g, "a.string", KT_GGUF_U8, &a), KT_ERR_FORMAT);
    assert_non_null(strstr(kt_last_error(), "array of string"));
    assert_int_equal(kt__gguf_get_uint(g, "no.such.key", &u64), KT_ERR_NOT_FOUND);
    assert_non_null(strstr(kt_last_error(), "no.such.key"));
    /* Nested array, three levels. */
    assert_int_equal(kt__gguf_get_array(g, "a.nested", KT_GGUF_ARRAY, &a), KT_OK);
    const kt_gguf_value *lvl2 = a->v.arr.data;
    const kt_gguf_value *lvl3 = lvl2[1].v.arr.data;
    assert_string_equal(((const kt_gguf_str *)lvl3[0].v.arr.data)[1].ptr, "r");
    assert_int_equal(((const kt_gguf_value *)lvl2[0].v.arr.data)[1].v.arr.n, 0);
    /* Tensors. */
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        const kt_gguf_tensor *t = kt__gguf_find_tensor(g, ts[i].name);
        assert_non_null(t);
        assert_int_equal(t->type, ts[i].type);
        uint64_t nbytes;
        assert_true(kt__type_nbytes(ts[i].type, ts[i].ne0 * ts[i].ne1, &nbytes));
        assert_int_equal(t->nbytes, nbytes);
        assert_int_equal(t->offset % 128, 0);
        assert_memory_equal(t->data, data, (size_t)nbytes);
    }
    kt__gguf_close(g);
    kt_buf_dispose(&buf);
}

/* A GGUF assembled byte by byte from the format description, not by our writer. */
static void test_hand_assembled(void **state)
{
    (void)state;
    unsigned char f[256];
    size_t n = 0;
#define PUT(p, len) (memcpy(f + n, (p), (len)), n += (len))
#define PUT32(x) do { uint32_t v_ = (x); PUT(&v_, 4); } while (0)
#define PUT64(x) do { uint64_t v_ = (x); PUT(&v_, 8); } while (0)
    PUT("GGUF", 4);
    PUT32(2);        /* version 2 */
    PUT64(1);        /* one tensor */
    PUT64(1);        /* one key */
    PUT64(4);
    PUT("k.ab", 4);  /* key */
    PUT32(4);        /* u32 */
    PUT32(77);
    PUT64(1);
    PUT("t", 1);     /* tensor "t" */
    PUT32(1);        /* n_dims */
    PUT64(2);        /* ne[0] */
    PUT32(0);        /* F32 */
    PUT64(0);        /* offset */
    while (n % 32)
        f[n++] = 0;
    size_t data_at = n; /* 77 bytes of header and infos, padded to 96 */
    assert_int_equal(data_at, 96);
    float vals[2] = {1.5f, -2.0f};
    PUT(vals, 8);
    kt_gguf *g = NULL;
    assert_int_equal(kt__gguf_parse_memory(&g, f, n, "hand"), KT_OK);
    assert_int_equal(kt__gguf_version(g), 2);
    uint64_t u;
    assert_int_equal(kt__gguf_get_uint(g, "k.ab", &u), KT_OK);
    assert_int_equal(u, 77);
    const kt_gguf_tensor *t = kt__gguf_find_tensor(g, "t");
    assert_non_null(t);
    assert_ptr_equal(t->data, f + data_at);
    assert_true(((const float *)t->data)[1] == -2.0f);
    kt__gguf_close(g);
    /* Cut anywhere: a clean error, never a crash. */
    for (size_t cut = 0; cut < n; cut++) {
        kt_status s = kt__gguf_parse_memory(&g, f, cut, "cut");
        assert_int_equal(s, KT_ERR_FORMAT);
        assert_null(g);
        assert_non_null(strstr(kt_last_error(), "cut"));
    }
#undef PUT
#undef PUT32
#undef PUT64
}


/* ---- hostile corpus (tests/data/hostile, made by make_hostile.py) ---------------------- */

static void test_hostile_corpus(void **state)
{
    (void)state;
    FILE *f = hostile_manifest();
    int n = 0;
    hostile_case c;
    while (hostile_next(f, &c)) {
        if (strcmp(c.kind, "gguf") != 0 && strcmp(c.kind, "okgguf") != 0)
            continue;
        /* From the file (mmap) and from an exact-size heap copy (ASan sees overreads). */
        for (int from_memory = 0; from_memory < 2; from_memory++) {
            kt_gguf *g = (kt_gguf *)(uintptr_t)1;
            kt_status s;
            unsigned char *buf = NULL;
            if (from_memory) {
                size_t size;
                buf = read_file(c.path, &size);
                assert_non_null(buf);
                s = kt__gguf_parse_memory(&g, buf, size, c.path);
            } else {
                s = kt__gguf_open_file(&g, c.path);
            }
            if (strcmp(kt_status_str(s), c.want) != 0)
                fail_msg("%s: got %s (%s), want %s", c.name, kt_status_str(s),
                         kt_last_error(), c.want);
            if (s == KT_OK) {
                kt__gguf_close(g);
            } else {
                const char *msg = kt_last_error();
                assert_null(g);
                if (!strstr(msg, c.name))
                    fail_msg("%s: message does not name the file: %s", c.name, msg);
                /* A short file fails the size check before the magic when mapped. */
                if (strcmp(c.needle, "-") != 0 && !strstr(msg, c.needle) &&
                    !(from_memory == 0 && strstr(msg, "too short")))
                    fail_msg("%s: message lacks '%s': %s", c.name, c.needle, msg);
                if (getenv("KT_TEST_VERBOSE") && from_memory)
                    print_message("%-36s %s\n", c.name, msg);
            }
            free(buf);
        }
        n++;
    }
    fclose(f);
    print_message("%d GGUF corpus cases ran clean\n", n);
    assert_true(n >= 30);
}

/* Single-byte corruptions of a valid file: accepted or refused, never a crash. */
static void test_flips(void **state)
{
    (void)state;
    char path[700];
    snprintf(path, sizeof path, "%s/gguf/reference.gguf", test_data());
    size_t size;
    unsigned char *file = read_file(path, &size);
    assert_non_null(file);
    uint32_t rng = 777;
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        unsigned char *copy = flipped_copy(file, size, iter, &rng);
        kt_gguf *g = NULL;
        if (kt__gguf_parse_memory(&g, copy, size, "flip") == KT_OK) {
            accepted++;
            for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
                const kt_gguf_tensor *t = kt__gguf_tensor_at(g, i);
                assert_true((const unsigned char *)t->data + t->nbytes <= copy + size);
            }
            kt__gguf_close(g);
        } else {
            assert_non_null(strstr(kt_last_error(), "flip"));
        }
        free(copy);
    }
    free(file);
    print_message("%d of 20000 corrupted copies still parsed (data in range)\n", accepted);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_files),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_writer_all_types),
        cmocka_unit_test(test_hand_assembled),
        cmocka_unit_test(test_hostile_corpus),
        cmocka_unit_test(test_flips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
