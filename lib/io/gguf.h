/*
 * Internal GGUF v2/v3 reader and writer (lib/io). Not installed.
 *
 * File layout (little-endian):
 *   u32 magic "GGUF" (bytes 47 47 55 46), u32 version (2 or 3),
 *   u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 value_type, value },
 *   n_tensors x { string name, u32 n_dims (<= 4), u64 ne[n_dims] (ne[0] innermost),
 *                 u32 ggml_type, u64 offset },
 *   padding to `general.alignment` (u32, power of two, default 32),
 *   data region: each tensor at `offset` (a multiple of the alignment) from its start.
 * A string is u64 length + bytes (no NUL). Value types: 0 U8, 1 I8, 2 U16, 3 I16,
 * 4 U32, 5 I32, 6 F32, 7 BOOL (one byte, 0/1), 8 STRING, 9 ARRAY (u32 element
 * type, u64 count, elements; arrays may nest), 10 U64, 11 I64, 12 F64.
 * A tensor's size is n_elements / block_size * block_bytes of its ggml type;
 * ne[0] must be a whole number of blocks.
 *
 * The parsed context copies metadata (keys, strings, arrays) into its own
 * memory, NUL-terminated; tensor data pointers point into the file mapping (or
 * the caller's buffer) and live as long as the context. Every failure returns
 * KT_ERR_IO / KT_ERR_FORMAT / KT_ERR_UNSUPPORTED / KT_ERR_NOT_FOUND with a
 * message naming the file (and key or tensor). A context is immutable after
 * parsing and may be read from several threads.
 */
#ifndef KT_IO_GGUF_H
#define KT_IO_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "kt/types.h"
#include "kt_internal.h"

#define KT_GGUF_MAX_DIMS 4
#define KT_GGUF_DEFAULT_ALIGNMENT 32u
#define KT_GGUF_MAX_ARRAY_DEPTH 8

typedef enum kt_gguf_type {
    KT_GGUF_U8 = 0,
    KT_GGUF_I8 = 1,
    KT_GGUF_U16 = 2,
    KT_GGUF_I16 = 3,
    KT_GGUF_U32 = 4,
    KT_GGUF_I32 = 5,
    KT_GGUF_F32 = 6,
    KT_GGUF_BOOL = 7,
    KT_GGUF_STRING = 8,
    KT_GGUF_ARRAY = 9,
    KT_GGUF_U64 = 10,
    KT_GGUF_I64 = 11,
    KT_GGUF_F64 = 12
} kt_gguf_type;

typedef struct kt_gguf_str {
    const char *ptr; /* NUL-terminated (may also contain NULs; len is the truth) */
    uint64_t len;
} kt_gguf_str;

/* One metadata value. Scalars are widened into u / i / f / b by their type;
 * arrays of scalars hold a packed native array of the element type (uint8_t for
 * BOOL), arrays of strings a kt_gguf_str[], arrays of arrays a kt_gguf_value[]. */
typedef struct kt_gguf_value {
    kt_gguf_type type;
    union {
        uint64_t u;  /* U8 U16 U32 U64 */
        int64_t i;   /* I8 I16 I32 I64 */
        double f;    /* F32 F64 */
        bool b;      /* BOOL */
        kt_gguf_str str;
        struct {
            kt_gguf_type elem;
            uint64_t n;
            const void *data;
        } arr;
    } v;
} kt_gguf_value;

typedef struct kt_gguf_kv {
    const char *key;
    kt_gguf_value value;
} kt_gguf_kv;

typedef struct kt_gguf_tensor {
    const char *name;
    kt_type type;        /* KT_TYPE_INVALID when kt_type has no name for ggml_type */
    uint32_t ggml_type;
    uint32_t n_dims;
    uint64_t ne[KT_GGUF_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
    uint64_t n_elements;
    uint64_t offset;     /* from the start of the data region */
    uint64_t nbytes;
    const void *data;
} kt_gguf_tensor;

typedef struct kt_gguf kt_gguf;

/* ggml's type table: name, elements per block, bytes per block. NULL for numbers
 * ggml does not (or no longer) define. */
typedef struct kt_ggml_type_info {
    const char *name;
    uint32_t block_size;
    uint32_t type_size;
} kt_ggml_type_info;
const kt_ggml_type_info *kt__ggml_type_info(uint32_t ggml_type);

/* Opens and mmaps a .gguf file. Caller owns *out; free with kt__gguf_close(). */
kt_status kt__gguf_open_file(kt_gguf **out, const char *path);
/* Parses an in-memory file (no copy of tensor data: `data` must outlive the
 * context). `name_for_errors` names it in messages. */
kt_status kt__gguf_parse_memory(kt_gguf **out, const void *data, size_t size,
                                const char *name_for_errors);
void kt__gguf_close(kt_gguf *g); /* NULL ok */

uint32_t kt__gguf_version(const kt_gguf *g);
uint32_t kt__gguf_alignment(const kt_gguf *g);
const char *kt__gguf_name(const kt_gguf *g); /* path or name_for_errors */
/* Offset of the data region from the start of the file. */
uint64_t kt__gguf_data_offset(const kt_gguf *g);

size_t kt__gguf_kv_count(const kt_gguf *g);
const kt_gguf_kv *kt__gguf_kv_at(const kt_gguf *g, size_t i);
/* NULL when absent (no error set). */
const kt_gguf_value *kt__gguf_find(const kt_gguf *g, const char *key);

/* Typed getters: KT_ERR_NOT_FOUND when the key is absent, KT_ERR_FORMAT when
 * its type does not fit (message names file and key); *out untouched on error.
 * get_uint accepts any integer type holding a non-negative value; get_int any
 * integer type that fits int64; get_float F32/F64 (and integers);
 * get_str STRING; get_array an ARRAY whose element type is `elem`. */
kt_status kt__gguf_get_uint(const kt_gguf *g, const char *key, uint64_t *out);
kt_status kt__gguf_get_int(const kt_gguf *g, const char *key, int64_t *out);
kt_status kt__gguf_get_float(const kt_gguf *g, const char *key, double *out);
kt_status kt__gguf_get_bool(const kt_gguf *g, const char *key, bool *out);
kt_status kt__gguf_get_str(const kt_gguf *g, const char *key, const char **out);
kt_status kt__gguf_get_array(const kt_gguf *g, const char *key, kt_gguf_type elem,
                             const kt_gguf_value **out);

size_t kt__gguf_tensor_count(const kt_gguf *g);
const kt_gguf_tensor *kt__gguf_tensor_at(const kt_gguf *g, size_t i);
/* NULL when absent (no error set). O(1) average. */
const kt_gguf_tensor *kt__gguf_find_tensor(const kt_gguf *g, const char *name);

/* Name of a value type ("u32", "string", "array"); "?" if unknown. */
const char *kt__gguf_type_name(kt_gguf_type t);

/* Writer. Add key/values (serialized at once; a key added twice is an error)
 * and tensors (data borrowed until write), then write a file or a buffer.
 * Tensors are laid out in the order added, each at a multiple of the alignment
 * (general.alignment if set as a U32 before writing, else 32). */
typedef struct kt_gguf_writer kt_gguf_writer;
kt_status kt__gguf_writer_create(kt_gguf_writer **out, uint32_t version /* 2 or 3 */);
void kt__gguf_writer_free(kt_gguf_writer *w); /* NULL ok */
/* Any value, arrays (nested ones too) included, as described by kt_gguf_value. */
kt_status kt__gguf_writer_add(kt_gguf_writer *w, const char *key, const kt_gguf_value *v);
kt_status kt__gguf_writer_add_u32(kt_gguf_writer *w, const char *key, uint32_t v);
kt_status kt__gguf_writer_add_u64(kt_gguf_writer *w, const char *key, uint64_t v);
kt_status kt__gguf_writer_add_i32(kt_gguf_writer *w, const char *key, int32_t v);
kt_status kt__gguf_writer_add_f32(kt_gguf_writer *w, const char *key, float v);
kt_status kt__gguf_writer_add_bool(kt_gguf_writer *w, const char *key, bool v);
kt_status kt__gguf_writer_add_str(kt_gguf_writer *w, const char *key, const char *v);
kt_status kt__gguf_writer_add_str_array(kt_gguf_writer *w, const char *key,
                                        const char *const *v, uint64_t n);
/* ggml_type as numbered by ggml (kt__type_to_ggml() for a kt_type). `data` holds
 * the tensor's exact byte size and is borrowed until the write. */
kt_status kt__gguf_writer_add_tensor(kt_gguf_writer *w, const char *name, uint32_t ggml_type,
                                     uint32_t n_dims, const uint64_t *ne, const void *data);
kt_status kt__gguf_writer_write_file(kt_gguf_writer *w, const char *path);
/* Appends the whole file to `buf`. */
kt_status kt__gguf_writer_write_buf(kt_gguf_writer *w, kt_buf *buf);

#endif /* KT_IO_GGUF_H */
