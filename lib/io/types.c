/*
 * Element and block types (kt/types.h): names and sizes of the safetensors
 * dtypes and of every ggml block type, with ggml's numbering. Sizes are the
 * byte sizes of ggml's block structs (elements per block, bytes per block).
 */
#include "kt/types.h"

#include "convert_types.h"
#include "gguf.h"
#include "kt_internal.h"

typedef struct plain_type_info {
    kt_type type;
    const char *name;
    uint32_t bytes;
} plain_type_info;

static const plain_type_info plain_types[] = {
    {KT_TYPE_F32, "F32", 4},         {KT_TYPE_F16, "F16", 2},   {KT_TYPE_BF16, "BF16", 2},
    {KT_TYPE_F64, "F64", 8},         {KT_TYPE_I8, "I8", 1},     {KT_TYPE_I16, "I16", 2},
    {KT_TYPE_I32, "I32", 4},         {KT_TYPE_I64, "I64", 8},   {KT_TYPE_U8, "U8", 1},
    {KT_TYPE_BOOL, "BOOL", 1},       {KT_TYPE_F8_E4M3, "F8_E4M3", 1},
    {KT_TYPE_F8_E5M2, "F8_E5M2", 1}, {KT_TYPE_U16, "U16", 2},   {KT_TYPE_U32, "U32", 4},
    {KT_TYPE_U64, "U64", 8},
};

/* ggml's type table, indexed by ggml_type; empty slots are retired numbers. */
static const kt_ggml_type_info ggml_types[] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},       [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},       [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},    [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},   [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},    [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136},  [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},    [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},    [39] = {"MXFP4", 32, 17},
};

const kt_ggml_type_info *kt__ggml_type_info(uint32_t ggml_type)
{
    if (ggml_type >= KT_ARRAY_LEN(ggml_types) || !ggml_types[ggml_type].name)
        return NULL;
    return &ggml_types[ggml_type];
}

/* ggml block types that kt_type names (value = 100 + ggml_type). */
static bool is_ggml_block_type(kt_type type)
{
    switch (type) {
    case KT_TYPE_Q4_0: case KT_TYPE_Q4_1: case KT_TYPE_Q5_0: case KT_TYPE_Q5_1:
    case KT_TYPE_Q8_0: case KT_TYPE_Q8_1: case KT_TYPE_Q2_K: case KT_TYPE_Q3_K:
    case KT_TYPE_Q4_K: case KT_TYPE_Q5_K: case KT_TYPE_Q6_K: case KT_TYPE_Q8_K:
    case KT_TYPE_IQ4_NL: case KT_TYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

static const plain_type_info *plain_info(kt_type type)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(plain_types); i++)
        if (plain_types[i].type == type)
            return &plain_types[i];
    return NULL;
}

const char *kt_type_name(kt_type type)
{
    const plain_type_info *p = plain_info(type);
    if (p)
        return p->name;
    if (is_ggml_block_type(type))
        return kt__ggml_type_info((uint32_t)type - 100)->name;
    return NULL;
}

uint32_t kt_type_block_size(kt_type type)
{
    if (plain_info(type))
        return 1;
    if (is_ggml_block_type(type))
        return kt__ggml_type_info((uint32_t)type - 100)->block_size;
    return 0;
}

uint32_t kt_type_block_bytes(kt_type type)
{
    const plain_type_info *p = plain_info(type);
    if (p)
        return p->bytes;
    if (is_ggml_block_type(type))
        return kt__ggml_type_info((uint32_t)type - 100)->type_size;
    return 0;
}

kt_type kt__type_from_name(const char *name)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(plain_types); i++)
        if (strcmp(plain_types[i].name, name) == 0)
            return plain_types[i].type;
    for (uint32_t g = 0; g < KT_ARRAY_LEN(ggml_types); g++) {
        kt_type t = kt__type_from_ggml(g);
        if (t != KT_TYPE_INVALID && strcmp(ggml_types[g].name, name) == 0)
            return t;
    }
    return KT_TYPE_INVALID;
}

kt_type kt__type_from_ggml(uint32_t ggml_type)
{
    switch (ggml_type) {
    case 0: return KT_TYPE_F32;
    case 1: return KT_TYPE_F16;
    case 24: return KT_TYPE_I8;
    case 25: return KT_TYPE_I16;
    case 26: return KT_TYPE_I32;
    case 27: return KT_TYPE_I64;
    case 28: return KT_TYPE_F64;
    case 30: return KT_TYPE_BF16;
    default:
        if (ggml_type <= 100 && is_ggml_block_type((kt_type)(100 + ggml_type)))
            return (kt_type)(100 + ggml_type);
        return KT_TYPE_INVALID;
    }
}

int64_t kt__type_to_ggml(kt_type type)
{
    switch (type) {
    case KT_TYPE_F32: return 0;
    case KT_TYPE_F16: return 1;
    case KT_TYPE_I8: return 24;
    case KT_TYPE_I16: return 25;
    case KT_TYPE_I32: return 26;
    case KT_TYPE_I64: return 27;
    case KT_TYPE_F64: return 28;
    case KT_TYPE_BF16: return 30;
    default:
        return is_ggml_block_type(type) ? (int64_t)type - 100 : -1;
    }
}

bool kt__type_nbytes(kt_type type, uint64_t n_elements, uint64_t *out)
{
    uint32_t bs = kt_type_block_size(type), bb = kt_type_block_bytes(type);
    if (bs == 0 || n_elements % bs != 0)
        return false;
    return kt__mul_ok(n_elements / bs, bb, out);
}
