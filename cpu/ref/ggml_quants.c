/* Scalar reference of the ggml block types (see ggml_quants.h for layouts). */
#include "ref/ggml_quants.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "kt/hw.h"
#include "kt_config.h"

/* Levels of the non-linear 4-bit grid (IQ4_NL, IQ4_XS). */
const int8_t kt__iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

/* Groups whose largest |x| is below this quantize to zero. */
#define GROUP_EPS 1e-15f

/* ---- element conversions --------------------------------------------------- */

static float f32_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

float kt__ggml_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f)
        return f32_of(sign | 0x7f800000u | (man << 13));
    if (exp)
        return f32_of(sign | ((exp + 112u) << 23) | (man << 13));
    /* subnormal: man * 2^-24, exact in f32 */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
}

uint16_t kt__ggml_f32_to_f16(float f)
{
    uint32_t x = bits_of(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)   /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x47800000u)  /* >= 65536 (or inf): infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        /* normal: round the 23-bit mantissa to 10 bits, nearest even; a carry
         * moves into the exponent (and 65520.. becomes infinity) */
        uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((r - (112u << 23)) >> 13));
    }
    /* subnormal (or zero): units of 2^-24, round to nearest even */
    float units = f32_of(ax) * 16777216.0f;
    return (uint16_t)(sign | (uint16_t)nearbyintf(units));
}

float kt__ggml_bf16_to_f32(uint16_t h)
{
    return f32_of((uint32_t)h << 16);
}

uint16_t kt__ggml_f32_to_bf16(float f)
{
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#define F16(h) kt__ggml_f16_to_f32(h)
#define TO_F16(f) kt__ggml_f32_to_f16(f)

/* Round to nearest, ties to even, for |v| < 2^22 (as ggml's nearest_int). */
static int round_even(float v)
{
    float t = v + 12582912.0f;   /* 1.5 * 2^23: the integer lands in the mantissa */
    return (int)(bits_of(t) & 0x007fffffu) - 0x00400000;
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- plain types --------------------------------------------------------------- */

static void f32_to_float(const void *vx, float *y, int64_t n)
{
    memcpy(y, vx, (size_t)n * sizeof *y);
}

static void f32_from_float(const float *x, void *vy, int64_t n)
{
    memcpy(vy, x, (size_t)n * sizeof *x);
}

static float f32_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return (float)s;
}

static void f16_to_float(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = F16(x[i]);
}

static void f16_from_float(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = TO_F16(x[i]);
}

static float f16_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(F16(x[i]) * F16(y[i]));
    return (float)s;
}

static void bf16_to_float(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = kt__ggml_bf16_to_f32(x[i]);
}

static void bf16_from_float(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = kt__ggml_f32_to_bf16(x[i]);
}

static float bf16_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(kt__ggml_bf16_to_f32(x[i]) * kt__ggml_bf16_to_f32(y[i]));
    return (float)s;
}

/* ---- 32-element blocks: dequantize -------------------------------------------- */

/* x[j] = d * (code - 8); low nibbles hold elements 0..15, high nibbles 16..31 */
static void q4_0_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q4_0 *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = F16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[i].qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* x = d * code + m */
static void q4_1_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q4_1 *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = F16(b[i].d), m = F16(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[i].qs[j] & 15) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 5-bit code = nibble | (bit j of qh) << 4; x = d * (code - 16) */
static void q5_0_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q5_0 *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = F16(b[i].d);
        uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (b[i].qs[j] & 15) | (int)(((qh >> j) & 1u) << 4);
            int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void q5_1_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q5_1 *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = F16(b[i].d), m = F16(b[i].m);
        uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (b[i].qs[j] & 15) | (int)(((qh >> j) & 1u) << 4);
            int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

static void q8_0_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q8_0 *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = F16(b[i].d);
        for (int j = 0; j < 32; j++)
            y[j] = (float)b[i].qs[j] * d;
    }
}

static void q8_1_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q8_1 *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = F16(b[i].d);
        for (int j = 0; j < 32; j++)
            y[j] = (float)b[i].qs[j] * d;
    }
}

static void iq4_nl_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_iq4_nl *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        float d = F16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)kt__iq4nl_values[b[i].qs[j] & 15];
            y[j + 16] = d * (float)kt__iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

/* ---- 32-element blocks: reference quantizers (ggml_quantize_chunk) ------------ */

/* The signed value of largest magnitude (first one on ties) and its |.|. */
static float signed_absmax(const float *x, int n, float *amax_out)
{
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    *amax_out = amax;
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* d = max / -8 (the extreme maps to code 0), codes = trunc(x/d + 8.5) <= 15 */
static void q4_0_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q4_0 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax, max = signed_absmax(x, 32, &amax);
        float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        for (int j = 0; j < 16; j++) {
            int lo = (int8_t)(x[j] * id + 8.5f), hi = (int8_t)(x[j + 16] * id + 8.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            b[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* d = (max - min) / 15, m = min, codes = trunc((x - min)/d + 0.5) <= 15 */
static void q4_1_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q4_1 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        b[i].m = TO_F16(mn);
        for (int j = 0; j < 16; j++) {
            int lo = (int8_t)((x[j] - mn) * id + 0.5f);
            int hi = (int8_t)((x[j + 16] - mn) * id + 0.5f);
            lo = lo < 15 ? lo : 15;
            hi = hi < 15 ? hi : 15;
            b[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* d = max / -16, codes = trunc(x/d + 16.5) <= 31; bit 4 of each code in qh */
static void q5_0_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q5_0 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax, max = signed_absmax(x, 32, &amax);
        float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (int8_t)(x[j] * id + 16.5f), hi = (int8_t)(x[j + 16] * id + 16.5f);
            lo = lo < 31 ? lo : 31;
            hi = hi < 31 ? hi : 31;
            b[i].qs[j] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
            qh |= (uint32_t)((lo >> 4) & 1) << j;
            qh |= (uint32_t)((hi >> 4) & 1) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

/* d = (max - min) / 31, codes = trunc((x - min)/d + 0.5) */
static void q5_1_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q5_1 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        b[i].m = TO_F16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (uint8_t)((x[j] - mn) * id + 0.5f);
            int hi = (uint8_t)((x[j + 16] - mn) * id + 0.5f);
            b[i].qs[j] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
            qh |= (uint32_t)((lo >> 4) & 1) << j;
            qh |= (uint32_t)((hi >> 4) & 1) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

/* d = amax / 127, codes = roundf(x / d) (ties away from zero) */
static void q8_0_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q8_0 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        for (int j = 0; j < 32; j++)
            b[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* Q8_1: as Q8_0, plus s = d * sum(codes) */
static void q8_1_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q8_1 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            b[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += b[i].qs[j];
        }
        b[i].s = TO_F16((float)sum * d);
    }
}

/* Activation quantizers of ggml's x86 CPU backend (from_float): the inverse
 * scale is 127 / amax and codes round to nearest even. */
static void q8_0_from_float(const float *x, void *vy, int64_t n)
{
    kt_block_q8_0 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = TO_F16(amax / 127.0f);
        for (int j = 0; j < 32; j++)
            b[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
    }
}

static void q8_1_from_float(const float *x, void *vy, int64_t n)
{
    kt_block_q8_1 *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = TO_F16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            b[i].qs[j] = (int8_t)nearbyintf(x[j] * id);
            sum += b[i].qs[j];
        }
        b[i].s = TO_F16(d * (float)sum);
    }
}

/* ---- IQ4_NL / IQ4_XS quantizer (no importance matrix) ----------------------- */

/* Index of the grid level nearest to v (the lower one on a tie). */
static int iq4_nearest(float v)
{
    const int8_t *g = kt__iq4nl_values;
    if (v <= g[0])
        return 0;
    if (v >= g[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < g[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - g[hi - 1] < g[hi] - v ? hi - 1 : hi;
}

/* Best scale of one group of 32 for the grid, weights x^2: start at the scale
 * that maps the extreme to the grid's end, then try 2*7+1 nearby scales and
 * keep the weighted least-squares optimum with the best score. */
static float iq4_group_scale(const float *x)
{
    const int ntry = 7;
    float amax, max = signed_absmax(x, 32, &amax);
    if (amax < GROUP_EPS)
        return 0;
    const int8_t *g = kt__iq4nl_values;
    float d = -max / g[0], id = 1.0f / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        float q = g[iq4_nearest(id * x[j])], w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int t = -ntry; t <= ntry; t++) {
        id = ((float)t + g[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = g[iq4_nearest(id * x[j])], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void iq4_nl_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_iq4_nl *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float d = iq4_group_scale(x), id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        for (int j = 0; j < 16; j++)
            b[i].qs[j] = (uint8_t)(iq4_nearest(id * x[j]) | (iq4_nearest(id * x[j + 16]) << 4));
    }
}

/* IQ4_XS: group scales of 32 quantized to 6 bits (-32..31) of d = -max/32. */
static void iq4_xs_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_iq4_xs *b = vy;
    for (int64_t i = 0; i < n / KT_QK_K; i++, x += KT_QK_K) {
        float scales[8], amax_s = 0, max_s = 0;
        for (int ib = 0; ib < 8; ib++) {
            scales[ib] = iq4_group_scale(x + 32 * ib);
            if (fabsf(scales[ib]) > amax_s) {
                amax_s = fabsf(scales[ib]);
                max_s = scales[ib];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        float d = -max_s / 32.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = TO_F16(d);
        uint16_t sh = 0;
        for (int ib = 0; ib < 8; ib++) {
            int l = clampi(round_even(id * scales[ib]), -32, 31);
            float dl = d * (float)l, idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            const float *xb = x + 32 * ib;
            uint8_t *qs = b[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++)
                qs[j] = (uint8_t)(iq4_nearest(idl * xb[j]) | (iq4_nearest(idl * xb[j + 16]) << 4));
            l += 32;
            b[i].scales_l[ib / 2] |= (uint8_t)((l & 15) << (4 * (ib % 2)));
            sh |= (uint16_t)((l >> 4) << (2 * ib));
        }
        b[i].scales_h = sh;
    }
}

static void iq4_xs_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_iq4_xs *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) |
                     (((b[i].scales_h >> (2 * ib)) & 3) << 4);
            float dl = d * (float)(ls - 32);
            const uint8_t *qs = b[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)kt__iq4nl_values[qs[j] & 15];
                y[j + 16] = dl * (float)kt__iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* ---- K types: scale packing -------------------------------------------------- */

/* Q4_K / Q5_K: 8 (scale, min) pairs of 6 bits in 12 bytes. Pairs 0..3: low 6
 * bits of bytes 0..3 (scale) and 4..7 (min); pairs 4..7: nibbles of bytes
 * 8..11 plus the top 2 bits of bytes 0..3 (scale) and 4..7 (min). */
static void k4_scale_min(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void k4_pack_scale_min(uint8_t *s, int j, int sc, int m)
{
    if (j < 4) {
        s[j] = (uint8_t)sc;
        s[j + 4] = (uint8_t)m;
    } else {
        s[j + 4] = (uint8_t)((sc & 15) | ((m & 15) << 4));
        s[j - 4] |= (uint8_t)((sc >> 4) << 6);
        s[j] |= (uint8_t)((m >> 4) << 6);
    }
}

/* Q3_K: 16 scales of 6 bits: low nibbles in bytes 0..7 (j < 8: low half, else
 * high half of byte j - 8), top 2 bits in bytes 8..11 (byte 8 + j%4, bits 2*(j/4)). */
static int k3_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* ---- K types: dequantize ------------------------------------------------------- */

/* 16 groups of 16: x = d*(sc&15)*q - dmin*(sc>>4), q = 2 bits. Bytes qs[32*h + l]
 * hold elements 128h + l + 32s in bits 2s (s = 0..3). */
static void q2_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q2_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        for (int e = 0; e < KT_QK_K; e++) {
            int half = e / 128, s = (e % 128) / 32, l = e % 32;
            int g = e / 16, sc = b[i].scales[g];
            int q = (b[i].qs[32 * half + l] >> (2 * s)) & 3;
            float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
            y[e] = dl * (float)q - ml;
        }
        y += KT_QK_K;
    }
}

/* x = d*sc*(q - 4*(1 - hbit)); q's 2 low bits as in Q2_K, hbit in hmask[e % 32]
 * bit e / 32 */
static void q3_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q3_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d);
        for (int e = 0; e < KT_QK_K; e++) {
            int half = e / 128, s = (e % 128) / 32, l = e % 32;
            int q = (b[i].qs[32 * half + l] >> (2 * s)) & 3;
            int hbit = (b[i].hmask[l] >> (e / 32)) & 1;
            float dl = d * (float)k3_scale(b[i].scales, e / 16);
            y[e] = dl * (float)(q - (hbit ? 0 : 4));
        }
        y += KT_QK_K;
    }
}

/* 8 groups of 32: x = d*sc*q - dmin*m; qs[32*p + l]: element 64p + l (low
 * nibble), 64p + 32 + l (high nibble) */
static void q4_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q4_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        for (int g = 0; g < 8; g++) {
            int sc, m;
            k4_scale_min(g, b[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (g / 2);
            int shift = 4 * (g % 2);
            for (int l = 0; l < 32; l++)
                y[32 * g + l] = d1 * (float)((q[l] >> shift) & 15) - m1;
        }
        y += KT_QK_K;
    }
}

/* As Q4_K with a 5th bit: qh[l] bit g holds element 32g + l's bit 4 */
static void q5_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q5_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        for (int g = 0; g < 8; g++) {
            int sc, m;
            k4_scale_min(g, b[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (g / 2);
            int shift = 4 * (g % 2);
            for (int l = 0; l < 32; l++) {
                int code = ((q[l] >> shift) & 15) + (((b[i].qh[l] >> g) & 1) ? 16 : 0);
                y[32 * g + l] = d1 * (float)code - m1;
            }
        }
        y += KT_QK_K;
    }
}

/* 16 groups of 16: x = d*sc*(q - 32), q = 6 bits. In each half h (128
 * elements), element 32s + l has its low nibble in ql[64h + l + 32*(s&1)]
 * (high nibble when s >= 2) and its top 2 bits in qh[32h + l] bits 2s. */
static void q6_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q6_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d);
        for (int e = 0; e < KT_QK_K; e++) {
            int h = e / 128, s = (e % 128) / 32, l = e % 32;
            int lo = (b[i].ql[64 * h + l + 32 * (s & 1)] >> (4 * (s >> 1))) & 15;
            int hi = (b[i].qh[32 * h + l] >> (2 * s)) & 3;
            int q = (lo | (hi << 4)) - 32;
            y[e] = d * (float)b[i].scales[e / 16] * (float)q;
        }
        y += KT_QK_K;
    }
}

static void q8_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q8_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++, y += KT_QK_K)
        for (int j = 0; j < KT_QK_K; j++)
            y[j] = b[i].d * (float)b[i].qs[j];
}

/* ---- K types: reference quantizers ---------------------------------------------- */

/* Codes 0..nmax with scale and offset (x ~ scale*L - min_out): start from the
 * min/max grid, then try nstep+1 scales around nmax/(max-min) and keep the
 * weighted least-squares (scale, min) of the lowest weighted error (squared,
 * or absolute with use_mad). The offset is never positive. Returns scale. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *min_out, uint8_t *Laux, float rmin, float rdelta, int nstep,
                           bool use_mad)
{
    float mn = x[0], mx = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn)
            mn = x[i];
        if (x[i] > mx)
            mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0)
        mn = 0;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *min_out = -mn;
        return 0;
    }
    float iscale = (float)nmax / (mx - mn), scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_even(iscale * (x[i] - mn)), 0, nmax);
        L[i] = (uint8_t)l;
        float diff = scale * (float)L[i] + mn - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    if (nstep < 1) {
        *min_out = -mn;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(round_even(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err += w[i] * diff;
            }
            if (err < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = err;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    *min_out = -mn;
    return scale;
}

/* Symmetric codes -nmax..nmax-1 (stored + nmax) with weights x^2 (rmse_type 1):
 * the extreme maps to -nmax, then 18 nearby scales are tried and the weighted
 * least-squares scale of the best score kept. Returns the scale. */
static float fit_scale_sym(int n, int nmax, const float *x, uint8_t *L)
{
    float amax, max = signed_absmax(x, n, &amax);
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (uint8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(nmax + clampi(round_even(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's group fit: symmetric codes -nmax..nmax-1, then up to 5 rounds of
 * coordinate descent on the weighted (x^2) least-squares score. Codes come
 * back offset by nmax. */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L)
{
    float amax, max = signed_absmax(x, n, &amax);
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = -(float)nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int round = 0; round < 5; round++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int nl = clampi(round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return sumlx / suml2;
}

/* Pack 2-bit codes L[256] as Q2_K/Q3_K's qs[64]. */
static void pack_2bit(uint8_t *qs, const uint8_t *L)
{
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *c = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(c[0] | (c[32] << 2) | (c[64] << 4) | (c[96] << 6));
        }
}

static void q2_K_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q2_K *b = vy;
    uint8_t L[KT_QK_K], Laux[16];
    float w[16], mins[16], scales[16];
    for (int64_t i = 0; i < n / KT_QK_K; i++, x += KT_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int g = 0; g < 16; g++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(x[16 * g + l]);
            scales[g] = fit_scale_min(16, 3, x + 16 * g, w, L + 16 * g, &mins[g], Laux, -0.5f,
                                      0.1f, 15, true);
            if (scales[g] > max_scale)
                max_scale = scales[g];
            if (mins[g] > max_min)
                max_min = mins[g];
        }
        memset(&b[i], 0, sizeof b[i]);
        if (max_scale > 0) {
            float is = 15.0f / max_scale;
            for (int g = 0; g < 16; g++)
                b[i].scales[g] = (uint8_t)round_even(is * scales[g]);
            b[i].d = TO_F16(max_scale / 15.0f);
        }
        if (max_min > 0) {
            float is = 15.0f / max_min;
            for (int g = 0; g < 16; g++)
                b[i].scales[g] |= (uint8_t)(round_even(is * mins[g]) << 4);
            b[i].dmin = TO_F16(max_min / 15.0f);
        }
        /* final codes against the stored (rounded) scales */
        for (int g = 0; g < 16; g++) {
            float d = F16(b[i].d) * (float)(b[i].scales[g] & 15);
            if (d == 0.0f)
                continue;
            float dm = F16(b[i].dmin) * (float)(b[i].scales[g] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * g + l] = (uint8_t)clampi(round_even((x[16 * g + l] + dm) / d), 0, 3);
        }
        pack_2bit(b[i].qs, L);
    }
}

static void q3_K_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q3_K *b = vy;
    int8_t L[KT_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / KT_QK_K; i++, x += KT_QK_K) {
        float max_scale = 0, amax = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_scale_q3(16, 4, x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > amax) {
                amax = fabsf(scales[g]);
                max_scale = scales[g];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        if (max_scale != 0.0f) {
            float iscale = -32.0f / max_scale;
            for (int g = 0; g < 16; g++) {
                int l = clampi(round_even(iscale * scales[g]), -32, 31) + 32;
                if (g < 8)
                    b[i].scales[g] = (uint8_t)(l & 15);
                else
                    b[i].scales[g - 8] |= (uint8_t)((l & 15) << 4);
                b[i].scales[8 + g % 4] |= (uint8_t)((l >> 4) << (2 * (g / 4)));
            }
            b[i].d = TO_F16(1 / iscale);
        }
        for (int g = 0; g < 16; g++) {
            float d = F16(b[i].d) * (float)k3_scale(b[i].scales, g);
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * g + l] = (int8_t)(clampi(round_even(x[16 * g + l] / d), -4, 3) + 4);
        }
        /* bit 2 of each code goes to hmask[e % 32] bit e / 32 */
        uint8_t low[KT_QK_K];
        for (int e = 0; e < KT_QK_K; e++) {
            int c = L[e];
            if (c > 3) {
                b[i].hmask[e % 32] |= (uint8_t)(1u << (e / 32));
                c -= 4;
            }
            low[e] = (uint8_t)c;
        }
        pack_2bit(b[i].qs, low);
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): 8 groups of 32 fitted with
 * weights av|x| + |x|, scales and mins quantized to 6 bits of d and dmin. */
static void k45_codes(const float *x, int nmax, float rmin, int nstep, uint8_t *scales12,
                      uint16_t *d_out, uint16_t *dmin_out, uint8_t *L)
{
    uint8_t Laux[32];
    float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int g = 0; g < 8; g++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * g + l] * x[32 * g + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(x[32 * g + l]);
        scales[g] = fit_scale_min(32, nmax, x + 32 * g, w, L + 32 * g, &mins[g], Laux, rmin,
                                  0.1f, nstep, false);
        if (scales[g] > max_scale)
            max_scale = scales[g];
        if (mins[g] > max_min)
            max_min = mins[g];
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    memset(scales12, 0, 12);
    for (int g = 0; g < 8; g++) {
        int ls = round_even(inv_scale * scales[g]), lm = round_even(inv_min * mins[g]);
        k4_pack_scale_min(scales12, g, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    *d_out = TO_F16(max_scale / 63.0f);
    *dmin_out = TO_F16(max_min / 63.0f);
    for (int g = 0; g < 8; g++) {
        int sc, m;
        k4_scale_min(g, scales12, &sc, &m);
        float d = F16(*d_out) * (float)sc;
        if (d == 0.0f)
            continue;
        float dm = F16(*dmin_out) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * g + l] = (uint8_t)clampi(round_even((x[32 * g + l] + dm) / d), 0, nmax);
    }
}

static void q4_K_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q4_K *b = vy;
    uint8_t L[KT_QK_K];
    for (int64_t i = 0; i < n / KT_QK_K; i++, x += KT_QK_K) {
        k45_codes(x, 15, -1.0f, 20, b[i].scales, &b[i].d, &b[i].dmin, L);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * p + l] = (uint8_t)(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
    }
}

static void q5_K_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q5_K *b = vy;
    uint8_t L[KT_QK_K];
    for (int64_t i = 0; i < n / KT_QK_K; i++, x += KT_QK_K) {
        k45_codes(x, 31, -0.5f, 15, b[i].scales, &b[i].d, &b[i].dmin, L);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                int c0 = L[64 * p + l], c1 = L[64 * p + 32 + l];
                b[i].qh[l] |= (uint8_t)(((c0 >> 4) << (2 * p)) | ((c1 >> 4) << (2 * p + 1)));
                b[i].qs[32 * p + l] = (uint8_t)((c0 & 15) | ((c1 & 15) << 4));
            }
    }
}

static void q6_K_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q6_K *b = vy;
    uint8_t L[KT_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / KT_QK_K; i++, x += KT_QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_scale_sym(16, 32, x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > max_abs) {
                max_abs = fabsf(scales[g]);
                max_scale = scales[g];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        if (max_abs < GROUP_EPS)
            continue;
        float iscale = -128.0f / max_scale;
        b[i].d = TO_F16(1 / iscale);
        for (int g = 0; g < 16; g++) {
            int s = round_even(iscale * scales[g]);
            b[i].scales[g] = (int8_t)(s < 127 ? s : 127);
        }
        for (int g = 0; g < 16; g++) {
            float d = F16(b[i].d) * (float)b[i].scales[g];
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * g + l] = (uint8_t)(clampi(round_even(x[16 * g + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *c = L + 128 * h + l;
                b[i].ql[64 * h + l] = (uint8_t)((c[0] & 15) | ((c[64] & 15) << 4));
                b[i].ql[64 * h + 32 + l] = (uint8_t)((c[32] & 15) | ((c[96] & 15) << 4));
                b[i].qh[32 * h + l] = (uint8_t)((c[0] >> 4) | ((c[32] >> 4) << 2) |
                                                ((c[64] >> 4) << 4) | ((c[96] >> 4) << 6));
            }
    }
}

/* Q8_K (activations of the K types): iscale = -127/max (max the signed
 * extreme), codes rounded to nearest even, capped at 127; d = 1/iscale;
 * bsums = sums of 16 codes. */
static void q8_K_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q8_K *b = vy;
    for (int64_t i = 0; i < n / KT_QK_K; i++, x += KT_QK_K) {
        float amax, max = signed_absmax(x, KT_QK_K, &amax);
        memset(&b[i], 0, sizeof b[i]);
        if (amax == 0.0f)
            continue;
        float iscale = -127.0f / max;
        for (int j = 0; j < KT_QK_K; j++) {
            int v = round_even(iscale * x[j]);
            b[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += b[i].qs[16 * g + l];
            b[i].bsums[g] = (int16_t)s;
        }
        b[i].d = 1 / iscale;
    }
}

/* ---- dot products ------------------------------------------------------------------ */

/* sum_b d_x d_y sum_j (code_j - 8) q8_j */
static float q4_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += ((x[i].qs[j] & 15) - 8) * y[i].qs[j] +
                    ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        s += (double)sumi * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

/* sum_b d_x d_y sum_j code_j q8_j + m_x s_y */
static float q4_1_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_1 *x = vx;
    const kt_block_q8_1 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += (x[i].qs[j] & 15) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        s += (double)sumi * (double)(F16(x[i].d) * F16(y[i].d)) +
             (double)(F16(x[i].m) * F16(y[i].s));
    }
    return (float)s;
}

static float q5_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh = load_u32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int lo = ((x[i].qs[j] & 15) | (int)(((qh >> j) & 1u) << 4)) - 16;
            int hi = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
            sumi += lo * y[i].qs[j] + hi * y[i].qs[j + 16];
        }
        s += (double)sumi * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

static float q5_1_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_1 *x = vx;
    const kt_block_q8_1 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh = load_u32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (x[i].qs[j] & 15) | (int)(((qh >> j) & 1u) << 4);
            int hi = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            sumi += lo * y[i].qs[j] + hi * y[i].qs[j + 16];
        }
        s += (double)sumi * (double)(F16(x[i].d) * F16(y[i].d)) +
             (double)(F16(x[i].m) * F16(y[i].s));
    }
    return (float)s;
}

static float q8_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q8_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        s += (double)sumi * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

static float iq4_nl_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_iq4_nl *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += kt__iq4nl_values[x[i].qs[j] & 15] * y[i].qs[j] +
                    kt__iq4nl_values[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        s += (double)sumi * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

/* sum_b d_y (d_x sum_g sc_g dot_g - dmin_x sum_g m_g bsum_g) */
static float q2_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q2_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int64_t isum = 0, msum = 0;
        for (int g = 0; g < 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * g + l, half = e / 128, sh = (e % 128) / 32;
                dot += ((x[i].qs[32 * half + e % 32] >> (2 * sh)) & 3) * y[i].qs[e];
            }
            isum += (int64_t)(x[i].scales[g] & 15) * dot;
            msum += (int64_t)(x[i].scales[g] >> 4) * y[i].bsums[g];
        }
        s += (double)y[i].d * ((double)F16(x[i].d) * (double)isum -
                               (double)F16(x[i].dmin) * (double)msum);
    }
    return (float)s;
}

static float q3_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q3_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int64_t isum = 0;
        for (int g = 0; g < 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * g + l, half = e / 128, sh = (e % 128) / 32;
                int q = (x[i].qs[32 * half + e % 32] >> (2 * sh)) & 3;
                int hbit = (x[i].hmask[e % 32] >> (e / 32)) & 1;
                dot += (q - (hbit ? 0 : 4)) * y[i].qs[e];
            }
            isum += (int64_t)k3_scale(x[i].scales, g) * dot;
        }
        s += (double)y[i].d * (double)F16(x[i].d) * (double)isum;
    }
    return (float)s;
}

static float q4_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int64_t isum = 0, msum = 0;
        for (int g = 0; g < 8; g++) {
            int sc, m, dot = 0;
            k4_scale_min(g, x[i].scales, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (g / 2);
            for (int l = 0; l < 32; l++)
                dot += ((q[l] >> (4 * (g % 2))) & 15) * y[i].qs[32 * g + l];
            isum += (int64_t)sc * dot;
            msum += (int64_t)m * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
        }
        s += (double)y[i].d * ((double)F16(x[i].d) * (double)isum -
                               (double)F16(x[i].dmin) * (double)msum);
    }
    return (float)s;
}

static float q5_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int64_t isum = 0, msum = 0;
        for (int g = 0; g < 8; g++) {
            int sc, m, dot = 0;
            k4_scale_min(g, x[i].scales, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (g / 2);
            for (int l = 0; l < 32; l++) {
                int c = ((q[l] >> (4 * (g % 2))) & 15) | (((x[i].qh[l] >> g) & 1) << 4);
                dot += c * y[i].qs[32 * g + l];
            }
            isum += (int64_t)sc * dot;
            msum += (int64_t)m * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
        }
        s += (double)y[i].d * ((double)F16(x[i].d) * (double)isum -
                               (double)F16(x[i].dmin) * (double)msum);
    }
    return (float)s;
}

static float q6_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q6_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int64_t isum = 0;
        for (int g = 0; g < 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * g + l, h = e / 128, sq = (e % 128) / 32, c = e % 32;
                int lo = (x[i].ql[64 * h + c + 32 * (sq & 1)] >> (4 * (sq >> 1))) & 15;
                int hi = (x[i].qh[32 * h + c] >> (2 * sq)) & 3;
                dot += ((lo | (hi << 4)) - 32) * y[i].qs[e];
            }
            isum += (int64_t)x[i].scales[g] * dot;
        }
        s += (double)y[i].d * (double)F16(x[i].d) * (double)isum;
    }
    return (float)s;
}

static float iq4_xs_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_iq4_xs *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int64_t isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) |
                     (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            const uint8_t *qs = x[i].qs + 16 * ib;
            const int8_t *q8 = y[i].qs + 32 * ib;
            int dot = 0;
            for (int j = 0; j < 16; j++)
                dot += kt__iq4nl_values[qs[j] & 15] * q8[j] +
                       kt__iq4nl_values[qs[j] >> 4] * q8[j + 16];
            isum += (int64_t)(ls - 32) * dot;
        }
        s += (double)y[i].d * (double)F16(x[i].d) * (double)isum;
    }
    return (float)s;
}

/* ---- traits ------------------------------------------------------------------------- */

static const kt_ggml_traits traits[] = {
    {KT_TYPE_F32, "f32", 1, 4, KT_TYPE_F32, f32_to_float, f32_from_float, f32_from_float,
     f32_vec_dot},
    {KT_TYPE_F16, "f16", 1, 2, KT_TYPE_F16, f16_to_float, f16_from_float, f16_from_float,
     f16_vec_dot},
    {KT_TYPE_BF16, "bf16", 1, 2, KT_TYPE_BF16, bf16_to_float, bf16_from_float, bf16_from_float,
     bf16_vec_dot},
    {KT_TYPE_Q4_0, "q4_0", 32, sizeof(kt_block_q4_0), KT_TYPE_Q8_0, q4_0_to_float,
     q4_0_quantize, NULL, q4_0_vec_dot},
    {KT_TYPE_Q4_1, "q4_1", 32, sizeof(kt_block_q4_1), KT_TYPE_Q8_1, q4_1_to_float,
     q4_1_quantize, NULL, q4_1_vec_dot},
    {KT_TYPE_Q5_0, "q5_0", 32, sizeof(kt_block_q5_0), KT_TYPE_Q8_0, q5_0_to_float,
     q5_0_quantize, NULL, q5_0_vec_dot},
    {KT_TYPE_Q5_1, "q5_1", 32, sizeof(kt_block_q5_1), KT_TYPE_Q8_1, q5_1_to_float,
     q5_1_quantize, NULL, q5_1_vec_dot},
    {KT_TYPE_Q8_0, "q8_0", 32, sizeof(kt_block_q8_0), KT_TYPE_Q8_0, q8_0_to_float,
     q8_0_quantize, q8_0_from_float, q8_0_vec_dot},
    {KT_TYPE_Q8_1, "q8_1", 32, sizeof(kt_block_q8_1), KT_TYPE_Q8_1, q8_1_to_float,
     q8_1_quantize, q8_1_from_float, NULL},
    {KT_TYPE_Q2_K, "q2_K", KT_QK_K, sizeof(kt_block_q2_K), KT_TYPE_Q8_K, q2_K_to_float,
     q2_K_quantize, NULL, q2_K_vec_dot},
    {KT_TYPE_Q3_K, "q3_K", KT_QK_K, sizeof(kt_block_q3_K), KT_TYPE_Q8_K, q3_K_to_float,
     q3_K_quantize, NULL, q3_K_vec_dot},
    {KT_TYPE_Q4_K, "q4_K", KT_QK_K, sizeof(kt_block_q4_K), KT_TYPE_Q8_K, q4_K_to_float,
     q4_K_quantize, NULL, q4_K_vec_dot},
    {KT_TYPE_Q5_K, "q5_K", KT_QK_K, sizeof(kt_block_q5_K), KT_TYPE_Q8_K, q5_K_to_float,
     q5_K_quantize, NULL, q5_K_vec_dot},
    {KT_TYPE_Q6_K, "q6_K", KT_QK_K, sizeof(kt_block_q6_K), KT_TYPE_Q8_K, q6_K_to_float,
     q6_K_quantize, NULL, q6_K_vec_dot},
    {KT_TYPE_Q8_K, "q8_K", KT_QK_K, sizeof(kt_block_q8_K), KT_TYPE_Q8_K, q8_K_to_float,
     q8_K_quantize, q8_K_quantize, NULL},
    {KT_TYPE_IQ4_NL, "iq4_nl", 32, sizeof(kt_block_iq4_nl), KT_TYPE_Q8_0, iq4_nl_to_float,
     iq4_nl_quantize, NULL, iq4_nl_vec_dot},
    {KT_TYPE_IQ4_XS, "iq4_xs", KT_QK_K, sizeof(kt_block_iq4_xs), KT_TYPE_Q8_K,
     iq4_xs_to_float, iq4_xs_quantize, NULL, iq4_xs_vec_dot},
};

const kt_ggml_traits *kt__ggml_traits(kt_type type)
{
    for (size_t i = 0; i < sizeof traits / sizeof traits[0]; i++)
        if (traits[i].type == type)
            return &traits[i];
    return NULL;
}

/* ---- dispatch ------------------------------------------------------------------------ */

kt_ggml_vec_dot_fn kt__ggml_vec_dot_for(kt_type type, kt_ggml_isa isa)
{
#if KT_HAVE_ISA_AVX512
    if (isa >= KT_GGML_AVX512)
        switch (type) {
        case KT_TYPE_Q4_0: return kt__ggml_vec_dot_q4_0_avx512;
        case KT_TYPE_Q8_0: return kt__ggml_vec_dot_q8_0_avx512;
        case KT_TYPE_Q4_K: return kt__ggml_vec_dot_q4_K_avx512;
        case KT_TYPE_Q6_K: return kt__ggml_vec_dot_q6_K_avx512;
        default: break;
        }
#endif
#if KT_HAVE_ISA_AVX2
    if (isa >= KT_GGML_AVX2)
        switch (type) {
        case KT_TYPE_Q4_0: return kt__ggml_vec_dot_q4_0_avx2;
        case KT_TYPE_Q8_0: return kt__ggml_vec_dot_q8_0_avx2;
        case KT_TYPE_Q4_K: return kt__ggml_vec_dot_q4_K_avx2;
        case KT_TYPE_Q6_K: return kt__ggml_vec_dot_q6_K_avx2;
        case KT_TYPE_Q4_1: return kt__ggml_vec_dot_q4_1_avx2;
        case KT_TYPE_Q5_0: return kt__ggml_vec_dot_q5_0_avx2;
        case KT_TYPE_Q5_1: return kt__ggml_vec_dot_q5_1_avx2;
        case KT_TYPE_IQ4_NL: return kt__ggml_vec_dot_iq4_nl_avx2;
        case KT_TYPE_IQ4_XS: return kt__ggml_vec_dot_iq4_xs_avx2;
        case KT_TYPE_Q5_K: return kt__ggml_vec_dot_q5_K_avx2;
        case KT_TYPE_Q2_K: return kt__ggml_vec_dot_q2_K_avx2;
        case KT_TYPE_Q3_K: return kt__ggml_vec_dot_q3_K_avx2;
        default: break;
        }
#endif
    (void)isa;
    const kt_ggml_traits *t = kt__ggml_traits(type);
    return t ? t->vec_dot : NULL;
}

kt_ggml_isa kt__ggml_isa_best(void)
{
    uint64_t isa = kt_hw_isa();
    uint64_t avx512 = KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ |
                      KT_ISA_AVX512VNNI;
    uint64_t avx2 = KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C; /* the f16 scales: vcvtph2ps */
    if ((isa & avx512) == avx512 && (isa & avx2) == avx2)
        return KT_GGML_AVX512;
    if ((isa & avx2) == avx2)
        return KT_GGML_AVX2;
    return KT_GGML_SCALAR;
}

kt_ggml_vec_dot_fn kt__ggml_vec_dot_best(kt_type type)
{
    return kt__ggml_vec_dot_for(type, kt__ggml_isa_best());
}

size_t kt__ggml_row_bytes(kt_type type, int64_t n)
{
    const kt_ggml_traits *t = kt__ggml_traits(type);
    if (!t || n < 0 || n % t->block_size)
        return 0;
    return (size_t)(n / t->block_size) * t->block_bytes;
}

_Static_assert(sizeof(kt_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(kt_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(kt_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(kt_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(kt_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(kt_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(kt_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(kt_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(kt_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(kt_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(kt_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(kt_block_q8_K) == 292, "q8_K block");
_Static_assert(sizeof(kt_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(kt_block_iq4_xs) == 136, "iq4_xs block");
