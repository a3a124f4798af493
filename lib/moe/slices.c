/*
 * Slices of expert matrices for NUMA pools: pool p of the backend owns rows
 * [i0, i1) of every expert's gate and up ([I][H]) and columns [i0, i1) of its
 * down ([H][I]); with several pools each slice is copied into memory of the
 * pool's node. Every method's weights and scales are row-major 2-D arrays, so
 * a slice is a rectangle of bytes of each:
 *
 *   method      weight bytes of columns [c0, c1)   scales [srows][scols] x elem
 *   BF16        [2 c0, 2 c1)                        -
 *   FP8         [c0, c1)                            F32 per 128 x 128 block
 *   RAWINT4     [c0 / 2, c1 / 2)                    BF16 [rows][cols / group]
 *   AMXINT8     [c0, c1)                            F32 [rows] (one per row)
 *   LLAMAFILE   blocks [c0 / bs, c1 / bs)           - (inside the blocks)
 *
 * Slice bounds are multiples of 128 (256 for LLAMAFILE) except at I, so block
 * and group boundaries stay where the kernels expect them.
 */
#include <string.h>

#include "kt_internal.h"
#include "moe_internal.h"
#include "../../cpu/ref/ggml_quants.h"

/* Bytes of row-major weight columns [0, c) of a matrix of the method. */
static size_t col_bytes(int method, const kt__wmat *W, int c)
{
    switch (method) {
    case KT_METHOD_BF16:
        return (size_t)c * 2;
    case KT_METHOD_RAWINT4:
    case KT_METHOD_AMXINT4:
        return (size_t)c / 2;
    case KT_METHOD_LLAMAFILE:
        return kt__ggml_row_bytes((kt_type)W->type, c);
    default: /* FP8, AMXINT8 */
        return (size_t)c;
    }
}

typedef struct scale_shape {
    int srows, scols, elem;   /* [srows][scols] elements of elem bytes; srows 0: none */
    int r0, r1, c0, c1;       /* the rectangle a slice keeps                          */
} scale_shape;

/* The scale rectangle of rows [r0, r1) x columns [c0, c1) of W. */
static scale_shape scale_slice(int method, const kt__wmat *W, int r0, int r1, int c0, int c1)
{
    scale_shape s = {0, 0, 0, 0, 0, 0, 0};
    switch (method) {
    case KT_METHOD_FP8:
        s = (scale_shape){(W->rows + 127) / 128, (W->cols + 127) / 128, 4,
                          r0 / 128, (r1 + 127) / 128, c0 / 128, (c1 + 127) / 128};
        break;
    case KT_METHOD_RAWINT4:
    case KT_METHOD_AMXINT4: {
        int g = W->group > 0 ? W->group : 32;
        s = (scale_shape){W->rows, W->cols / g, 2, r0, r1, c0 / g, c1 / g};
        break;
    }
    case KT_METHOD_AMXINT8:
        s = (scale_shape){W->rows, 1, 4, r0, r1, 0, 1};
        break;
    default:
        break;
    }
    return s;
}

static size_t round64(size_t b)
{
    return (b + 63) & ~(size_t)63;
}

size_t kt__moe_slice_bytes(int method, const kt__wmat *W, int r0, int r1, int c0, int c1)
{
    if (!W->w || r1 <= r0 || c1 <= c0)
        return 0;
    size_t b = round64((size_t)(r1 - r0) * (col_bytes(method, W, c1) - col_bytes(method, W, c0)));
    scale_shape s = scale_slice(method, W, r0, r1, c0, c1);
    if (s.srows)
        b += round64((size_t)(s.r1 - s.r0) * (size_t)(s.c1 - s.c0) * (size_t)s.elem);
    return b;
}

/* dst [r1 - r0][b1 - b0] = bytes [b0, b1) of rows [r0, r1) of src (rows of
 * row_bytes). */
static void copy_rect(uint8_t *dst, const uint8_t *src, size_t row_bytes, int r0, int r1,
                      size_t b0, size_t b1)
{
    if (b0 == 0 && b1 == row_bytes) {
        memcpy(dst, src + (size_t)r0 * row_bytes, (size_t)(r1 - r0) * row_bytes);
        return;
    }
    for (int r = r0; r < r1; r++)
        memcpy(dst + (size_t)(r - r0) * (b1 - b0), src + (size_t)r * row_bytes + b0, b1 - b0);
}

kt__wmat kt__moe_slice_copy(int method, const kt__wmat *W, int r0, int r1, int c0, int c1,
                            void *dst)
{
    kt__wmat out = *W;
    out.rows = r1 - r0;
    out.cols = c1 - c0;
    if (!W->w || r1 <= r0 || c1 <= c0) {
        out.w = NULL;
        out.scale = NULL;
        return out;
    }
    uint8_t *d = dst;
    size_t b0 = col_bytes(method, W, c0), b1 = col_bytes(method, W, c1);
    copy_rect(d, W->w, col_bytes(method, W, W->cols), r0, r1, b0, b1);
    out.w = d;
    d += round64((size_t)(r1 - r0) * (b1 - b0));
    scale_shape s = scale_slice(method, W, r0, r1, c0, c1);
    if (s.srows) {
        copy_rect(d, W->scale, (size_t)s.scols * s.elem, s.r0, s.r1, (size_t)s.c0 * s.elem,
                  (size_t)s.c1 * s.elem);
        out.scale = d;
    }
    return out;
}

/* Bytes of a 4-row tile of a LLAMAFILE load-time repack; 0: rows as stored. */
static size_t tile4_bytes(const kt__wmat *W)
{
    switch (W->type) {
    case KT__LF_Q40X:
    case KT__LF_Q80X:
    case KT__LF_Q4KX:
    case KT__LF_Q5KX:
    case KT__LF_Q6KX:
    case KT__LF_IQ4NLX:
        return kt__lf_x_tile_bytes(W->type, W->cols);
    default:
        return 0;
    }
}

int kt__moe_row_spans(int method, const kt__wmat *W, int r0, int r1, kt__moe_span out[2])
{
    if (!W->w || r1 <= r0)
        return 0;
    const uint8_t *w = W->w;
    size_t tile = method == KT_METHOD_LLAMAFILE ? tile4_bytes(W)
                  : (method == KT_METHOD_RAWINT4 || method == KT_METHOD_AMXINT4) &&
                          W->type == KT__INT4_TILED
                      ? kt__int4t_tile_bytes(W->cols)
                      : 0;
    if (tile) { /* the scales inside the tiles */
        out[0] = (kt__moe_span){w + (size_t)(r0 / 4) * tile, (size_t)((r1 + 3) / 4 - r0 / 4) * tile};
        return 1;
    }
    size_t row = col_bytes(method, W, W->cols);
    out[0] = (kt__moe_span){w + (size_t)r0 * row, (size_t)(r1 - r0) * row};
    scale_shape s = scale_slice(method, W, r0, r1, 0, W->cols);
    if (!s.srows || !W->scale)
        return 1;
    size_t srow = (size_t)s.scols * (size_t)s.elem;
    out[1] = (kt__moe_span){(const uint8_t *)W->scale + (size_t)s.r0 * srow,
                            (size_t)(s.r1 - s.r0) * srow};
    return 2;
}
