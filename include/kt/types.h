/*
 * kt/types.h - element and block types of tensors libkt reads and writes:
 * the safetensors dtypes and the ggml (GGUF) block types.
 *
 * A block type packs `kt_type_block_size()` elements into
 * `kt_type_block_bytes()` bytes; plain types have a block size of 1.
 */
#ifndef KT_TYPES_H
#define KT_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are ABI (append only). GGML block types keep ggml's own numbers + 100. */
typedef enum kt_type {
    KT_TYPE_INVALID = -1,
    KT_TYPE_F32 = 0,
    KT_TYPE_F16 = 1,
    KT_TYPE_BF16 = 2,
    KT_TYPE_F64 = 3,
    KT_TYPE_I8 = 4,
    KT_TYPE_I16 = 5,
    KT_TYPE_I32 = 6,
    KT_TYPE_I64 = 7,
    KT_TYPE_U8 = 8,
    KT_TYPE_BOOL = 9,
    KT_TYPE_F8_E4M3 = 10,
    KT_TYPE_F8_E5M2 = 11,
    KT_TYPE_U16 = 12,
    KT_TYPE_U32 = 13,
    KT_TYPE_U64 = 14,
    /* ggml block types: value = 100 + ggml_type */
    KT_TYPE_Q4_0 = 102,
    KT_TYPE_Q4_1 = 103,
    KT_TYPE_Q5_0 = 106,
    KT_TYPE_Q5_1 = 107,
    KT_TYPE_Q8_0 = 108,
    KT_TYPE_Q8_1 = 109,
    KT_TYPE_Q2_K = 110,
    KT_TYPE_Q3_K = 111,
    KT_TYPE_Q4_K = 112,
    KT_TYPE_Q5_K = 113,
    KT_TYPE_Q6_K = 114,
    KT_TYPE_Q8_K = 115,
    KT_TYPE_IQ4_NL = 120,
    KT_TYPE_IQ4_XS = 123
} kt_type;

/* "F32", "BF16", "F8_E4M3", "Q4_K", ... (safetensors / ggml spelling); NULL if unknown. Since 0.1. */
KT_API const char *kt_type_name(kt_type type);
/* Elements per block (1 for plain types, 32 or 256 for ggml blocks); 0 if unknown. Since 0.1. */
KT_API uint32_t kt_type_block_size(kt_type type);
/* Bytes per block; 0 if unknown. Since 0.1. */
KT_API uint32_t kt_type_block_bytes(kt_type type);

#ifdef __cplusplus
}
#endif
#endif /* KT_TYPES_H */
