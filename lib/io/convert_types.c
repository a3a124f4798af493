/* Plain-typed tensor -> f32 (see convert_types.h). */
#include "convert_types.h"

#define LOAD_LOOP(ctype, expr)                                                          \
    do {                                                                                \
        const unsigned char *p = data;                                                  \
        for (uint64_t i = 0; i < n; i++) {                                              \
            ctype v;                                                                    \
            memcpy(&v, p + i * sizeof v, sizeof v);                                     \
            out[i] = (expr);                                                            \
        }                                                                               \
    } while (0)

/* 8-bit floats through a 256-entry table built for the call. */
static void f8_row_to_f32(const unsigned char *p, uint64_t n, float *out, bool e4m3)
{
    float table[256];
    for (unsigned b = 0; b < 256; b++)
        table[b] = e4m3 ? kt__e4m3_to_f32((uint8_t)b) : kt__e5m2_to_f32((uint8_t)b);
    for (uint64_t i = 0; i < n; i++)
        out[i] = table[p[i]];
}

kt_status kt__tensor_to_f32(const void *data, kt_type type, uint64_t n, float *out)
{
    if (n && (!data || !out))
        return kt__error(KT_ERR_INVALID_ARG, "tensor_to_f32: NULL buffer");
    switch (type) {
    case KT_TYPE_F32: if (n) memcpy(out, data, n * sizeof(float)); break;
    case KT_TYPE_F16: LOAD_LOOP(uint16_t, kt__f16_to_f32(v)); break;
    case KT_TYPE_BF16: LOAD_LOOP(uint16_t, kt__bf16_to_f32(v)); break;
    case KT_TYPE_F64: LOAD_LOOP(double, (float)v); break;
    case KT_TYPE_F8_E4M3: f8_row_to_f32(data, n, out, true); break;
    case KT_TYPE_F8_E5M2: f8_row_to_f32(data, n, out, false); break;
    case KT_TYPE_I8: LOAD_LOOP(int8_t, (float)v); break;
    case KT_TYPE_I16: LOAD_LOOP(int16_t, (float)v); break;
    case KT_TYPE_I32: LOAD_LOOP(int32_t, (float)v); break;
    case KT_TYPE_I64: LOAD_LOOP(int64_t, (float)v); break;
    case KT_TYPE_U8: LOAD_LOOP(uint8_t, (float)v); break;
    case KT_TYPE_U16: LOAD_LOOP(uint16_t, (float)v); break;
    case KT_TYPE_U32: LOAD_LOOP(uint32_t, (float)v); break;
    case KT_TYPE_U64: LOAD_LOOP(uint64_t, (float)v); break;
    case KT_TYPE_BOOL: LOAD_LOOP(uint8_t, v ? 1.0f : 0.0f); break;
    default: {
        const char *name = kt_type_name(type);
        return kt__error(KT_ERR_UNSUPPORTED, "tensor_to_f32: type %s is not a plain type",
                         name ? name : "unknown");
    }
    }
    return KT_OK;
}
