/*
 * JSON helpers over cJSON for the files libkt reads (safetensors headers and
 * indexes, config.json): bounded reads, UTF-8 validation, exact integers.
 * Internal (lib/io); not installed. Errors name the file.
 */
#ifndef KT_IO_JSON_H
#define KT_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "kt_internal.h"

/* Largest JSON document libkt parses (a safetensors header or a config file). */
#define KT_JSON_MAX_BYTES ((size_t)100 << 20)
/* Most values in one document (~64 bytes each in cJSON; a safetensors header
 * has about 8 per tensor, so this allows ~500k tensors in one file). */
#define KT_JSON_MAX_NODES ((size_t)4 << 20)

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF). On failure *bad_at (may be NULL) gets the offset. */
bool kt__utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Parses n bytes of JSON (not necessarily NUL-terminated): UTF-8 checked, at
 * most KT_JSON_MAX_BYTES and KT_JSON_MAX_NODES values, only whitespace after the
 * value. `what` names the source in messages. Caller owns *out (cJSON_Delete).
 * KT_ERR_FORMAT on bad input. */
kt_status kt__json_parse(cJSON **out, const char *text, size_t n, const char *what);
/* Reads and parses a whole file (KT_ERR_NOT_FOUND when it does not exist,
 * KT_ERR_IO when it cannot be read, KT_ERR_FORMAT when it is not JSON). */
kt_status kt__json_parse_file(cJSON **out, const char *path);

/* Exact non-negative integer of a JSON number: false unless `item` is a number
 * holding an integer in [0, 2^53] (larger values are not exact in a double). */
bool kt__json_u64(const cJSON *item, uint64_t *out);
/* Exact integer in [-2^53, 2^53]. */
bool kt__json_i64(const cJSON *item, int64_t *out);

#endif /* KT_IO_JSON_H */
