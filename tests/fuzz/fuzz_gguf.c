/* libFuzzer harness: one GGUF file from memory. A file that parses is also written
 * back through the writer and parsed again: both must agree (differential check). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_value(const kt_gguf_value *v, volatile uint64_t *sink)
{
    if (v->type == KT_GGUF_STRING) {
        if (v->v.str.len)
            *sink ^= (uint8_t)v->v.str.ptr[v->v.str.len - 1];
    } else if (v->type == KT_GGUF_ARRAY && v->v.arr.elem == KT_GGUF_ARRAY) {
        const kt_gguf_value *vals = v->v.arr.data;
        for (uint64_t i = 0; i < v->v.arr.n; i++)
            touch_value(&vals[i], sink);
    } else if (v->type == KT_GGUF_ARRAY && v->v.arr.elem == KT_GGUF_STRING) {
        const kt_gguf_str *strs = v->v.arr.data;
        for (uint64_t i = 0; i < v->v.arr.n; i++)
            *sink ^= strs[i].len ? (uint8_t)strs[i].ptr[strs[i].len - 1] : 0;
    } else {
        *sink ^= v->v.u;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_gguf *g = NULL;
    if (kt__gguf_parse_memory(&g, data, size, "fuzz") != KT_OK)
        return 0;
    volatile uint64_t sink = 0;
    uint64_t u;
    int64_t i64;
    double f;
    const char *s;
    bool b;
    for (size_t i = 0; i < kt__gguf_kv_count(g); i++) {
        const kt_gguf_kv *kv = kt__gguf_kv_at(g, i);
        if (kt__gguf_find(g, kv->key) != &kv->value)
            __builtin_trap();
        touch_value(&kv->value, &sink);
        (void)kt__gguf_get_uint(g, kv->key, &u);
        (void)kt__gguf_get_int(g, kv->key, &i64);
        (void)kt__gguf_get_float(g, kv->key, &f);
        (void)kt__gguf_get_str(g, kv->key, &s);
        (void)kt__gguf_get_bool(g, kv->key, &b);
    }
    for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
        const kt_gguf_tensor *t = kt__gguf_tensor_at(g, i);
        const uint8_t *p = t->data;
        if (kt__gguf_find_tensor(g, t->name) != t || p < data || p + t->nbytes > data + size)
            __builtin_trap();
        if (t->nbytes)
            sink ^= p[0] ^ p[t->nbytes - 1];
    }

    /* Round trip through the writer. A legal general.alignment of up to 2^31 makes
     * the writer pad to it in memory: past 64 KiB that only measures the fuzzer's
     * memory limit, not the code. */
    if (kt__gguf_alignment(g) > 65536) {
        kt__gguf_close(g);
        return 0;
    }
    kt_gguf_writer *w = NULL;
    kt_buf buf = KT_BUF_INIT;
    if (kt__gguf_writer_create(&w, kt__gguf_version(g)) != KT_OK)
        __builtin_trap();
    for (size_t i = 0; i < kt__gguf_kv_count(g); i++) {
        const kt_gguf_kv *kv = kt__gguf_kv_at(g, i);
        if (kt__gguf_writer_add(w, kv->key, &kv->value) != KT_OK)
            __builtin_trap();
    }
    for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
        const kt_gguf_tensor *t = kt__gguf_tensor_at(g, i);
        if (kt__gguf_writer_add_tensor(w, t->name, t->ggml_type, t->n_dims, t->ne, t->data))
            __builtin_trap();
    }
    kt_gguf *back = NULL;
    if (kt__gguf_writer_write_buf(w, &buf) != KT_OK ||
        kt__gguf_parse_memory(&back, buf.ptr, buf.size, "rewritten") != KT_OK ||
        kt__gguf_kv_count(back) != kt__gguf_kv_count(g) ||
        kt__gguf_tensor_count(back) != kt__gguf_tensor_count(g))
        __builtin_trap();
    for (size_t i = 0; i < kt__gguf_tensor_count(g); i++) {
        const kt_gguf_tensor *x = kt__gguf_tensor_at(g, i), *y = kt__gguf_tensor_at(back, i);
        if (strcmp(x->name, y->name) || x->nbytes != y->nbytes ||
            memcmp(x->data, y->data, (size_t)x->nbytes))
            __builtin_trap();
    }
    kt__gguf_close(back);
    kt_buf_dispose(&buf);
    kt__gguf_writer_free(w);
    kt__gguf_close(g);
    return 0;
}
