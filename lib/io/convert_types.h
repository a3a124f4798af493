/*
 * Scalar conversions between the element types libkt reads (kt/types.h) and
 * float, plus kt_type helpers. Internal (lib/io); not installed.
 *
 * All conversions to float are exact (every F16, BF16, F8_E4M3 and F8_E5M2
 * value, subnormals included, is representable in f32); NaN stays NaN and
 * infinities stay infinite. Conversions from float round to nearest even.
 *
 * F8_E4M3 is the "fn" variant used by checkpoints (torch.float8_e4m3fn):
 * bias 7, no infinities, S.1111.111 is NaN, largest finite 448.
 * F8_E5M2 is IEEE-like: bias 15, infinities and NaNs (the top byte of an F16).
 */
#ifndef KT_IO_CONVERT_TYPES_H
#define KT_IO_CONVERT_TYPES_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kt/types.h"
#include "kt_internal.h"

static inline float kt__f32_from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t kt__f32_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* bf16 -> f32: the bf16 bits are the high half of the f32. */
static inline float kt__bf16_to_f32(uint16_t h)
{
    return kt__f32_from_bits((uint32_t)h << 16);
}

/* f32 -> bf16, round to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t kt__f32_to_bf16(float f)
{
    uint32_t x = kt__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* f16 -> f32, exact. */
static inline float kt__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN, payload kept */
        return kt__f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return kt__f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24 (exact in f32) */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
}

/* m >> shift rounded to nearest, ties to even (0 < shift < 32): the subnormal results below. */
static inline uint32_t kt__shr_round_even(uint32_t m, uint32_t shift)
{
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return q + (rem > half || (rem == half && (q & 1u)));
}

/* f32 -> f16, round to nearest even; overflow gives inf; NaN stays NaN. */
static inline uint16_t kt__f32_to_f16(float f)
{
    uint32_t x = kt__f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal half: rebias and round the low 13 bits */
        uint32_t r = ax - 0x38000000u;
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    if (ax <= 0x33000000u) /* <= 2^-25: rounds to (signed) zero */
        return sign;
    /* subnormal half: |f| / 2^-24 = m * 2^(e - 126), rounded to nearest even */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | kt__shr_round_even(m, 126u - e));
}

/* F8_E4M3 (fn) -> f32, exact. */
static inline float kt__e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t exp = (b >> 3) & 0xfu, man = b & 0x7u;
    if (exp == 0xf && man == 0x7)
        return kt__f32_from_bits(sign | 0x7fc00000u);
    if (exp != 0) /* rebias 7 -> 127 */
        return kt__f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
    float v = (float)man * 0x1p-9f; /* subnormal: man/8 * 2^-6 */
    return sign ? -v : v;
}

/* F8_E5M2 -> f32, exact: an E5M2 byte is the high byte of an F16. */
static inline float kt__e5m2_to_f32(uint8_t b)
{
    return kt__f16_to_f32((uint16_t)((uint16_t)b << 8));
}

/* f32 -> F8_E4M3 (fn), round to nearest even; magnitudes past 448 (inf too)
 * saturate to +-448, where torch's cast would give NaN (quantizers scale
 * values into range first); NaN gives NaN. */
static inline uint8_t kt__f32_to_e4m3(float f)
{
    uint32_t x = kt__f32_bits(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint8_t)(sign | 0x7fu);
    if (ax >= 0x43e00000u) /* >= 448 (incl. inf): saturate */
        return (uint8_t)(sign | 0x7eu);
    if (ax >= 0x3c800000u) { /* >= 2^-6: normal e4m3, round the low 20 bits */
        uint32_t r = ax - 0x3c000000u; /* rebias 127 -> 7 */
        uint32_t q = (r + 0x7ffffu + ((r >> 20) & 1u)) >> 20;
        return (uint8_t)(sign | (q > 0x7eu ? 0x7eu : q));
    }
    if (ax <= 0x3a800000u) /* <= 2^-10: zero */
        return sign;
    /* subnormal: |f| / 2^-9 = m * 2^(e - 127 - 23 + 9), rounded to nearest even */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    return (uint8_t)(sign | kt__shr_round_even(m, 141u - e));
}

/* Converts n elements of a plain type (F32 F16 BF16 F64 F8_* I8..I64 U8..U64
 * BOOL) at `data` (any alignment, little-endian as stored) to f32.
 * KT_ERR_UNSUPPORTED for block (ggml) types and unknown types. Thread-safe. */
kt_status kt__tensor_to_f32(const void *data, kt_type type, uint64_t n, float *out);

/* Type helpers. */
/* "BF16" / "Q4_K" -> kt_type; KT_TYPE_INVALID if unknown. */
kt_type kt__type_from_name(const char *name);
/* ggml_type number -> kt_type; KT_TYPE_INVALID when kt_type has no name for it. */
kt_type kt__type_from_ggml(uint32_t ggml_type);
/* kt_type -> ggml_type number; -1 when ggml has no such type (U8, BOOL, F8, ...). */
int64_t kt__type_to_ggml(kt_type type);
/* Bytes of n_elements of `type`; false when the type is unknown, n_elements is
 * not a whole number of blocks, or the size overflows. */
bool kt__type_nbytes(kt_type type, uint64_t n_elements, uint64_t *out);

#endif /* KT_IO_CONVERT_TYPES_H */
