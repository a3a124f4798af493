/*
 * Internal safetensors reader/writer (lib/io). Not installed.
 *
 * File layout: u64 little-endian N, then N bytes of UTF-8 JSON header
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data region; offsets are relative to
 * the start of the data region. A set is one file or a sharded directory
 * (model.safetensors.index.json, "weight_map": {tensor: file}).
 *
 * Files are mmap'ed read-only; tensor data pointers point into the mapping and
 * live as long as the set. Every failure returns KT_ERR_IO / KT_ERR_FORMAT /
 * KT_ERR_NOT_FOUND with a message naming the file (and tensor).
 */
#ifndef KT_IO_SAFETENSORS_H
#define KT_IO_SAFETENSORS_H

#include <stdint.h>

#include "kt/types.h"
#include "kt_internal.h"

#define KT_MAX_DIMS 8

typedef struct kt_st_tensor {
    const char *name;            /* NUL-terminated; owned by the set      */
    kt_type type;
    uint32_t n_dims;
    uint64_t shape[KT_MAX_DIMS]; /* row-major, shape[0] outermost         */
    uint64_t n_elements;
    const void *data;            /* into the mmap; aligned as stored      */
    uint64_t nbytes;
    uint32_t file_index;         /* which shard                           */
} kt_st_tensor;

typedef struct kt_st_set kt_st_set;

/* Opens one .safetensors file. Caller owns *out; free with kt__st_close(). */
kt_status kt__st_open_file(kt_st_set **out, const char *path);
/* Opens a model directory: model.safetensors.index.json when present (every
 * shard listed is opened once; a missing shard, a file outside the directory or
 * a tensor missing from its shard is an error), else model.safetensors, else
 * every *.safetensors file in the directory. */
kt_status kt__st_open_dir(kt_st_set **out, const char *dir);
/* Parses one in-memory file (no copy; `data` must outlive the set). For fuzzing. */
kt_status kt__st_parse_memory(kt_st_set **out, const void *data, size_t size,
                              const char *name_for_errors);
void kt__st_close(kt_st_set *set);

size_t kt__st_count(const kt_st_set *set);
const kt_st_tensor *kt__st_at(const kt_st_set *set, size_t i);
/* NULL when absent (no error set). O(1) average. */
const kt_st_tensor *kt__st_find(const kt_st_set *set, const char *name);
/* Like kt__st_find but a missing tensor sets KT_ERR_NOT_FOUND naming it. */
kt_status kt__st_get(const kt_st_set *set, const char *name, const kt_st_tensor **out);
/* __metadata__ value of the first file; NULL if absent. */
const char *kt__st_metadata(const kt_st_set *set, const char *key);
/* Path of shard i. */
const char *kt__st_file_path(const kt_st_set *set, uint32_t file_index);
uint32_t kt__st_file_count(const kt_st_set *set);

/* Writer: declare every tensor, then begin (writes the header), then write
 * each tensor's bytes in declaration order (streaming; the whole model is never
 * held in memory), then finish. Data is aligned to 64 bytes via header padding
 * and per-tensor padding is never needed because sizes are exact. */
typedef struct kt_st_writer kt_st_writer;
kt_status kt__st_writer_create(kt_st_writer **out);
kt_status kt__st_writer_set_metadata(kt_st_writer *w, const char *key, const char *value);
kt_status kt__st_writer_declare(kt_st_writer *w, const char *name, kt_type type, uint32_t n_dims,
                                const uint64_t *shape);
kt_status kt__st_writer_begin(kt_st_writer *w, const char *path);
kt_status kt__st_writer_write(kt_st_writer *w, const char *name, const void *data, uint64_t nbytes);
kt_status kt__st_writer_finish(kt_st_writer *w);
void kt__st_writer_free(kt_st_writer *w); /* NULL ok; removes a half-written file */

#endif /* KT_IO_SAFETENSORS_H */
