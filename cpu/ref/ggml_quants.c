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

/* F16 / BF16: one element conversion each way. */
typedef float (*half_to_f32_fn)(uint16_t h);
typedef uint16_t (*f32_to_half_fn)(float f);

static void half_to_float(const void *vx, float *y, int64_t n, half_to_f32_fn cv)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = cv(x[i]);
}

static void half_from_float(const float *x, void *vy, int64_t n, f32_to_half_fn cv)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = cv(x[i]);
}

/* sum x y, each product in f32, summed in f64 */
static float half_vec_dot(int64_t n, const void *vx, const void *vy, half_to_f32_fn cv)
{
    const uint16_t *x = vx, *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(cv(x[i]) * cv(y[i]));
    return (float)s;
}

static void f16_to_float(const void *vx, float *y, int64_t n)
{
    half_to_float(vx, y, n, kt__ggml_f16_to_f32);
}

static void f16_from_float(const float *x, void *vy, int64_t n)
{
    half_from_float(x, vy, n, kt__ggml_f32_to_f16);
}

static float f16_vec_dot(int64_t n, const void *vx, const void *vy)
{
    return half_vec_dot(n, vx, vy, kt__ggml_f16_to_f32);
}

static void bf16_to_float(const void *vx, float *y, int64_t n)
{
    half_to_float(vx, y, n, kt__ggml_bf16_to_f32);
}

static void bf16_from_float(const float *x, void *vy, int64_t n)
{
    half_from_float(x, vy, n, kt__ggml_f32_to_bf16);
}

static float bf16_vec_dot(int64_t n, const void *vx, const void *vy)
{
    return half_vec_dot(n, vx, vy, kt__ggml_bf16_to_f32);
}

/* ---- 32-element blocks: dequantize -------------------------------------------- */

static uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The 32 codes of a block's 16 nibble bytes: low nibbles are elements 0..15,
 * high nibbles 16..31; with qh (Q5_0 / Q5_1), bit j of qh is element j's bit 4. */
static void block_codes(const uint8_t *qs, const uint8_t *qh, int c[32])
{
    uint32_t h = qh ? load_u32(qh) : 0;
    for (int j = 0; j < 16; j++) {
        c[j] = (qs[j] & 15) | (int)(((h >> j) & 1u) << 4);
        c[j + 16] = (qs[j] >> 4) | (int)(((h >> (j + 16)) & 1u) << 4);
    }
}

/* y[j] = (code_j - off) * d */
static void codes_to_float(const int c[32], int off, float d, float *y)
{
    for (int j = 0; j < 32; j++)
        y[j] = (float)(c[j] - off) * d;
}

/* y[j] = code_j * d + m */
static void codes_to_float_m(const int c[32], float d, float m, float *y)
{
    for (int j = 0; j < 32; j++)
        y[j] = (float)c[j] * d + m;
}

/* x = d * (code - 8) */
static void q4_0_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q4_0 *b = vx;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        block_codes(b[i].qs, NULL, c);
        codes_to_float(c, 8, F16(b[i].d), y);
    }
}

/* x = d * code + m */
static void q4_1_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q4_1 *b = vx;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        block_codes(b[i].qs, NULL, c);
        codes_to_float_m(c, F16(b[i].d), F16(b[i].m), y);
    }
}

/* x = d * (code - 16) */
static void q5_0_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q5_0 *b = vx;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        block_codes(b[i].qs, b[i].qh, c);
        codes_to_float(c, 16, F16(b[i].d), y);
    }
}

static void q5_1_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q5_1 *b = vx;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        block_codes(b[i].qs, b[i].qh, c);
        codes_to_float_m(c, F16(b[i].d), F16(b[i].m), y);
    }
}

/* Q8_0 and Q8_1 blocks start with d, their codes `skip` bytes later. */
static void q8_to_float(const void *vx, size_t bytes, size_t skip, float *y, int64_t n)
{
    const uint8_t *b = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32, b += bytes) {
        uint16_t h;
        int8_t qs[32];
        memcpy(&h, b, 2);
        memcpy(qs, b + skip, 32);
        float d = F16(h);
        for (int j = 0; j < 32; j++)
            y[j] = (float)qs[j] * d;
    }
}

static void q8_0_to_float(const void *vx, float *y, int64_t n)
{
    q8_to_float(vx, sizeof(kt_block_q8_0), offsetof(kt_block_q8_0, qs), y, n);
}

static void q8_1_to_float(const void *vx, float *y, int64_t n)
{
    q8_to_float(vx, sizeof(kt_block_q8_1), offsetof(kt_block_q8_1, qs), y, n);
}

static void iq4_nl_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_iq4_nl *b = vx;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        block_codes(b[i].qs, NULL, c);
        float d = F16(b[i].d);
        for (int j = 0; j < 32; j++)
            y[j] = d * (float)kt__iq4nl_values[c[j]];
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

/* Codes of 32 inputs: trunc((x - base) * id + bias), at most cap. */
static void trunc_codes(const float *x, float base, float id, float bias, int cap, int c[32])
{
    for (int j = 0; j < 32; j++) {
        int v = (int8_t)((x[j] - base) * id + bias);
        c[j] = v < cap ? v : cap;
    }
}

/* 4-bit codes into qs (elements j and 16 + j in byte j); with qh, bit 4 of
 * element j into bit j of qh. */
static void pack_codes(const int c[32], uint8_t *qs, uint8_t *qh)
{
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((c[j] & 15) | ((c[j + 16] & 15) << 4));
        h |= (uint32_t)((c[j] >> 4) & 1) << j;
        h |= (uint32_t)((c[j + 16] >> 4) & 1) << (j + 16);
    }
    if (qh)
        memcpy(qh, &h, 4);
}

/* Symmetric blocks: d = max / -half (the extreme maps to code 0), codes =
 * trunc(x/d + half + 0.5) <= 2 half - 1; returns d. */
static float sym_block(const float *x, int half, int c[32])
{
    float amax, max = signed_absmax(x, 32, &amax);
    float d = max / -(float)half, id = d != 0.0f ? 1.0f / d : 0.0f;
    trunc_codes(x, 0.0f, id, (float)half + 0.5f, 2 * half - 1, c);
    return d;
}

/* Blocks with a minimum: d = (max - min) / nmax, m = min, codes =
 * trunc((x - min)/d + 0.5) <= cap; returns d. */
static float min_block(const float *x, int nmax, int cap, float *m, int c[32])
{
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    float d = (mx - mn) / (float)nmax, id = d != 0.0f ? 1.0f / d : 0.0f;
    trunc_codes(x, mn, id, 0.5f, cap, c);
    *m = mn;
    return d;
}

static void q4_0_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q4_0 *b = vy;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        b[i].d = TO_F16(sym_block(x, 8, c));
        pack_codes(c, b[i].qs, NULL);
    }
}

static void q4_1_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q4_1 *b = vy;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float m;
        b[i].d = TO_F16(min_block(x, 15, 15, &m, c));
        b[i].m = TO_F16(m);
        pack_codes(c, b[i].qs, NULL);
    }
}

static void q5_0_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q5_0 *b = vy;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        b[i].d = TO_F16(sym_block(x, 16, c));
        pack_codes(c, b[i].qs, b[i].qh);
    }
}

/* (ggml caps no Q5_1 code: (x - min)/d + 0.5 stays below 32) */
static void q5_1_quantize(const float *x, void *vy, int64_t n)
{
    kt_block_q5_1 *b = vy;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float m;
        b[i].d = TO_F16(min_block(x, 31, 127, &m, c));
        b[i].m = TO_F16(m);
        pack_codes(c, b[i].qs, b[i].qh);
    }
}

/* Q8_0 / Q8_1 blocks (d at byte 0, Q8_1's s at 2, codes `skip` bytes in): d =
 * amax / 127. The reference quantizer (ggml_cpu 0): inverse scale 1 / d,
 * codes roundf (ties away from zero); ggml's x86 CPU backend (from_float,
 * ggml_cpu 1): 127 / amax, codes nearest even. Q8_1: s = d * sum codes. */
static void q8_quantize(const float *x, void *vy, int64_t n, size_t bytes, size_t skip,
                        bool ggml_cpu)
{
    uint8_t *b = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32, b += bytes) {
        float amax;
        signed_absmax(x, 32, &amax);
        float d = amax / 127.0f;
        float id = ggml_cpu ? (amax != 0.0f ? 127.0f / amax : 0.0f) : d != 0.0f ? 1.0f / d : 0.0f;
        int8_t qs[32];
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            qs[j] = (int8_t)(ggml_cpu ? nearbyintf(x[j] * id) : roundf(x[j] * id));
            sum += qs[j];
        }
        uint16_t hd = TO_F16(d);
        memcpy(b, &hd, 2);
        memcpy(b + skip, qs, 32);
        if (bytes == sizeof(kt_block_q8_1)) {
            uint16_t hs = TO_F16(d * (float)sum);
            memcpy(b + offsetof(kt_block_q8_1, s), &hs, 2);
        }
    }
}

static void q8_0_quantize(const float *x, void *vy, int64_t n)
{
    q8_quantize(x, vy, n, sizeof(kt_block_q8_0), offsetof(kt_block_q8_0, qs), false);
}

static void q8_1_quantize(const float *x, void *vy, int64_t n)
{
    q8_quantize(x, vy, n, sizeof(kt_block_q8_1), offsetof(kt_block_q8_1, qs), false);
}

static void q8_0_from_float(const float *x, void *vy, int64_t n)
{
    q8_quantize(x, vy, n, sizeof(kt_block_q8_0), offsetof(kt_block_q8_0, qs), true);
}

static void q8_1_from_float(const float *x, void *vy, int64_t n)
{
    q8_quantize(x, vy, n, sizeof(kt_block_q8_1), offsetof(kt_block_q8_1, qs), true);
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
        float scales[8], amax_s;
        for (int ib = 0; ib < 8; ib++)
            scales[ib] = iq4_group_scale(x + 32 * ib);
        float max_s = signed_absmax(scales, 8, &amax_s);
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
void kt__ggml_k4_scale_min(int j, const uint8_t *s, int *sc, int *m)
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

/* Q2_K / Q3_K: the 2 low bits of element e's code; byte qs[32 h + l] holds
 * elements 128 h + l + 32 s in bits 2 s (s = 0..3). */
static int q2_code(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* Q3_K: element e's code minus 4: its bit 2 (hmask[e % 32] bit e / 32) is
 * set when the value is not negative. */
static int q3_value(const kt_block_q3_K *b, int e)
{
    return q2_code(b->qs, e) - (((b->hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
}

/* Q6_K: element e's code minus 32. In each half h (128 elements), element
 * 32s + l has its low nibble in ql[64h + l + 32*(s&1)] (high nibble when
 * s >= 2) and its top 2 bits in qh[32h + l] bits 2s. */
static int q6_value(const kt_block_q6_K *b, int e)
{
    int h = e / 128, s = (e % 128) / 32, l = e % 32;
    int lo = (b->ql[64 * h + l + 32 * (s & 1)] >> (4 * (s >> 1))) & 15;
    int hi = (b->qh[32 * h + l] >> (2 * s)) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Q4_K / Q5_K: element 32 g + l's code; qs[32 p + l] holds elements 64 p + l
 * (low nibble) and 64 p + 32 + l (high); Q5_K (qh): bit g of qh[l] is bit 4. */
static int k45_code(const uint8_t *qs, const uint8_t *qh, int g, int l)
{
    int c = (qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 15;
    return qh && ((qh[l] >> g) & 1) ? c + 16 : c;
}

/* 16 groups of 16: x = d*(sc&15)*q - dmin*(sc>>4), q = 2 bits */
static void q2_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q2_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d), dmin = F16(b[i].dmin);
        for (int e = 0; e < KT_QK_K; e++) {
            int sc = b[i].scales[e / 16];
            float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
            y[e] = dl * (float)q2_code(b[i].qs, e) - ml;
        }
        y += KT_QK_K;
    }
}

/* x = d*sc*(q - 4*(1 - hbit)) */
static void q3_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q3_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d);
        for (int e = 0; e < KT_QK_K; e++) {
            float dl = d * (float)k3_scale(b[i].scales, e / 16);
            y[e] = dl * (float)q3_value(&b[i], e);
        }
        y += KT_QK_K;
    }
}

/* 8 groups of 32: x = d*sc*q - dmin*m (Q4_K; Q5_K with qh) */
static void k45_to_float(uint16_t hd, uint16_t hdmin, const uint8_t *scales, const uint8_t *qs,
                         const uint8_t *qh, float *y)
{
    float d = F16(hd), dmin = F16(hdmin);
    for (int g = 0; g < 8; g++) {
        int sc, m;
        kt__ggml_k4_scale_min(g, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            y[32 * g + l] = d1 * (float)k45_code(qs, qh, g, l) - m1;
    }
}

static void q4_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q4_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++, y += KT_QK_K)
        k45_to_float(b[i].d, b[i].dmin, b[i].scales, b[i].qs, NULL, y);
}

static void q5_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q5_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++, y += KT_QK_K)
        k45_to_float(b[i].d, b[i].dmin, b[i].scales, b[i].qs, b[i].qh, y);
}

/* 16 groups of 16: x = d*sc*(q - 32), q = 6 bits */
static void q6_K_to_float(const void *vx, float *y, int64_t n)
{
    const kt_block_q6_K *b = vx;
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        float d = F16(b[i].d);
        for (int e = 0; e < KT_QK_K; e++)
            y[e] = d * (float)b[i].scales[e / 16] * (float)q6_value(&b[i], e);
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

/* Symmetric codes l = round(iscale x) in -nmax..nmax-1 of n <= 16 inputs and
 * their weighted (w = x^2) sums: sum w x l, sum w l^2. */
static void sym_codes(int n, int nmax, const float *x, float iscale, int *l, float *sumlx,
                      float *suml2)
{
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        l[i] = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        float w = x[i] * x[i];
        slx += w * x[i] * (float)l[i];
        sl2 += w * (float)l[i] * (float)l[i];
    }
    *sumlx = slx;
    *suml2 = sl2;
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
    int l[16];
    float sumlx, suml2;
    sym_codes(n, nmax, x, -(float)nmax / max, l, &sumlx, &suml2);
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)(l[i] + nmax);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        sym_codes(n, nmax, x, -((float)nmax + 0.1f * (float)is) / max, l, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (uint8_t)(l[i] + nmax);
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
    int l[16];
    float sumlx, suml2;
    sym_codes(n, nmax, x, -(float)nmax / max, l, &sumlx, &suml2);
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)l[i];
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
        for (int g = 0; g < 16; g++)
            scales[g] = fit_scale_q3(16, 4, x + 16 * g, L + 16 * g);
        float amax, max_scale = signed_absmax(scales, 16, &amax);
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
        kt__ggml_k4_scale_min(g, scales12, &sc, &m);
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
        for (int g = 0; g < 16; g++)
            scales[g] = fit_scale_sym(16, 32, x + 16 * g, L + 16 * g);
        float max_abs, max_scale = signed_absmax(scales, 16, &max_abs);
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

/* sum_j (code_j - off) q8_j of one block of 32 */
static int codes_dot(const int c[32], int off, const int8_t *q8)
{
    int sumi = 0;
    for (int j = 0; j < 32; j++)
        sumi += (c[j] - off) * q8[j];
    return sumi;
}

/* sum_b d_x d_y sum_j (code_j - 8) q8_j */
static float q4_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++) {
        block_codes(x[i].qs, NULL, c);
        s += (double)codes_dot(c, 8, y[i].qs) * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

/* sum_b d_x d_y sum_j code_j q8_j + m_x s_y; qh: Q5_1's 5th bits */
static double codes_m_dot(const uint8_t *qs, const uint8_t *qh, uint16_t d, uint16_t m,
                          const kt_block_q8_1 *y)
{
    int c[32];
    block_codes(qs, qh, c);
    return (double)codes_dot(c, 0, y->qs) * (double)(F16(d) * F16(y->d)) +
           (double)(F16(m) * F16(y->s));
}

static float q4_1_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_1 *x = vx;
    const kt_block_q8_1 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++)
        s += codes_m_dot(x[i].qs, NULL, x[i].d, x[i].m, &y[i]);
    return (float)s;
}

static float q5_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++) {
        block_codes(x[i].qs, x[i].qh, c);
        s += (double)codes_dot(c, 16, y[i].qs) * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

static float q5_1_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_1 *x = vx;
    const kt_block_q8_1 *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / 32; i++)
        s += codes_m_dot(x[i].qs, x[i].qh, x[i].d, x[i].m, &y[i]);
    return (float)s;
}

static float q8_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q8_0 *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 32; j++)
            c[j] = x[i].qs[j];
        s += (double)codes_dot(c, 0, y[i].qs) * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

static float iq4_nl_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_iq4_nl *x = vx;
    const kt_block_q8_0 *y = vy;
    double s = 0;
    int c[32];
    for (int64_t i = 0; i < n / 32; i++) {
        block_codes(x[i].qs, NULL, c);
        for (int j = 0; j < 32; j++)
            c[j] = kt__iq4nl_values[c[j]];
        s += (double)codes_dot(c, 0, y[i].qs) * (double)(F16(x[i].d) * F16(y[i].d));
    }
    return (float)s;
}

/* sum_g sc_g sum_{e in group g} v_e q8_e over 16 groups of 16 */
static int64_t groups16_dot(const int v[KT_QK_K], const int sc[16], const int8_t *q8)
{
    int64_t isum = 0;
    for (int g = 0; g < 16; g++) {
        int dot = 0;
        for (int e = 16 * g; e < 16 * g + 16; e++)
            dot += v[e] * q8[e];
        isum += (int64_t)sc[g] * dot;
    }
    return isum;
}

/* sum_b d_y (d_x sum_g sc_g dot_g - dmin_x sum_g m_g bsum_g) */
static float q2_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q2_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    int v[KT_QK_K], sc[16];
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        int64_t msum = 0;
        for (int e = 0; e < KT_QK_K; e++)
            v[e] = q2_code(x[i].qs, e);
        for (int g = 0; g < 16; g++) {
            sc[g] = x[i].scales[g] & 15;
            msum += (int64_t)(x[i].scales[g] >> 4) * y[i].bsums[g];
        }
        int64_t isum = groups16_dot(v, sc, y[i].qs);
        s += (double)y[i].d * ((double)F16(x[i].d) * (double)isum -
                               (double)F16(x[i].dmin) * (double)msum);
    }
    return (float)s;
}

/* sum_b d_y d_x sum_g sc_g sum (q - 4 (1 - hbit)) q8 */
static float q3_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q3_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    int v[KT_QK_K], sc[16];
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        for (int e = 0; e < KT_QK_K; e++)
            v[e] = q3_value(&x[i], e);
        for (int g = 0; g < 16; g++)
            sc[g] = k3_scale(x[i].scales, g);
        s += (double)y[i].d * (double)F16(x[i].d) * (double)groups16_dot(v, sc, y[i].qs);
    }
    return (float)s;
}

/* One Q4_K / Q5_K (qh) block against a Q8_K block:
 * d_y (d_x sum_g sc_g dot_g - dmin_x sum_g m_g bsum_g) */
static double k45_dot(uint16_t d, uint16_t dmin, const uint8_t *scales, const uint8_t *qs,
                      const uint8_t *qh, const kt_block_q8_K *y)
{
    int64_t isum = 0, msum = 0;
    for (int g = 0; g < 8; g++) {
        int sc, m, dot = 0;
        kt__ggml_k4_scale_min(g, scales, &sc, &m);
        for (int l = 0; l < 32; l++)
            dot += k45_code(qs, qh, g, l) * y->qs[32 * g + l];
        isum += (int64_t)sc * dot;
        msum += (int64_t)m * (y->bsums[2 * g] + y->bsums[2 * g + 1]);
    }
    return (double)y->d * ((double)F16(d) * (double)isum - (double)F16(dmin) * (double)msum);
}

static float q4_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q4_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++)
        s += k45_dot(x[i].d, x[i].dmin, x[i].scales, x[i].qs, NULL, &y[i]);
    return (float)s;
}

static float q5_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q5_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    for (int64_t i = 0; i < n / KT_QK_K; i++)
        s += k45_dot(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, &y[i]);
    return (float)s;
}

/* sum_b d_y d_x sum_g sc_g sum (q - 32) q8 */
static float q6_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const kt_block_q6_K *x = vx;
    const kt_block_q8_K *y = vy;
    double s = 0;
    int v[KT_QK_K], sc[16];
    for (int64_t i = 0; i < n / KT_QK_K; i++) {
        for (int e = 0; e < KT_QK_K; e++)
            v[e] = q6_value(&x[i], e);
        for (int g = 0; g < 16; g++)
            sc[g] = x[i].scales[g];
        s += (double)y[i].d * (double)F16(x[i].d) * (double)groups16_dot(v, sc, y[i].qs);
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
