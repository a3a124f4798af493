/*
 * Scalar emulation of the AMX tile intrinsics moe_amx.c uses, for testing its
 * packing and loops on CPUs without AMX. Never built into the library.
 * Honours the configured shape of each tile (rows, bytes per row), as the
 * hardware does: loads and stores move rows x colsb bytes; a product reads
 * K = colsb(A) / 4 dwords of each A row and as many rows of B.
 */
#ifndef KT_AMX_EMULATE_H
#define KT_AMX_EMULATE_H

#include <stdint.h>
#include <string.h>

#undef _tile_loadconfig
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbf16ps
#undef _tile_dpbssd

static _Thread_local uint8_t emu_tiles[8][16][64];
static _Thread_local uint8_t emu_rows[8];
static _Thread_local uint16_t emu_colsb[8];

/* The 64-byte tile configuration: palette at byte 0, colsb[16] at 16, rows[16] at 48. */
static inline void emu_loadconfig(const void *cfg)
{
    const uint8_t *c = cfg;
    for (int t = 0; t < 8; t++) {
        memcpy(&emu_colsb[t], c + 16 + 2 * t, 2);
        emu_rows[t] = c[48 + t];
    }
}
static inline void emu_zero(int t)
{
    memset(emu_tiles[t], 0, sizeof emu_tiles[t]);
}
static inline void emu_loadd(int t, const void *base, size_t stride)
{
    memset(emu_tiles[t], 0, sizeof emu_tiles[t]);
    for (int r = 0; r < emu_rows[t]; r++)
        memcpy(emu_tiles[t][r], (const uint8_t *)base + (size_t)r * stride, emu_colsb[t]);
}
static inline void emu_stored(int t, void *base, size_t stride)
{
    for (int r = 0; r < emu_rows[t]; r++)
        memcpy((uint8_t *)base + (size_t)r * stride, emu_tiles[t][r], emu_colsb[t]);
}
static inline float emu_bf16(const uint8_t *p)
{
    uint32_t u = (uint32_t)(p[0] | (p[1] << 8)) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* C[m][n] += sum_k A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1] */
static inline void emu_dpbf16ps(int c, int a, int b)
{
    for (int m = 0; m < emu_rows[a]; m++)
        for (int n = 0; n < emu_colsb[b] / 4; n++) {
            float acc;
            memcpy(&acc, &emu_tiles[c][m][4 * n], 4);
            for (int k = 0; k < emu_colsb[a] / 4; k++)
                for (int j = 0; j < 2; j++)
                    acc += emu_bf16(&emu_tiles[a][m][4 * k + 2 * j]) *
                           emu_bf16(&emu_tiles[b][k][4 * n + 2 * j]);
            memcpy(&emu_tiles[c][m][4 * n], &acc, 4);
        }
}
/* C[m][n] += sum_k sum_{j<4} A[m][4k+j] B[k][4n+j], int8 x int8 -> int32 */
static inline void emu_dpbssd(int c, int a, int b)
{
    for (int m = 0; m < emu_rows[a]; m++)
        for (int n = 0; n < emu_colsb[b] / 4; n++) {
            int32_t acc;
            memcpy(&acc, &emu_tiles[c][m][4 * n], 4);
            for (int k = 0; k < emu_colsb[a] / 4; k++)
                for (int j = 0; j < 4; j++)
                    acc += (int32_t)(int8_t)emu_tiles[a][m][4 * k + j] *
                           (int32_t)(int8_t)emu_tiles[b][k][4 * n + j];
            memcpy(&emu_tiles[c][m][4 * n], &acc, 4);
        }
}

#define _tile_loadconfig(cfg) emu_loadconfig(cfg)
#define _tile_zero(t) emu_zero(t)
#define _tile_loadd(t, base, stride) emu_loadd(t, base, (size_t)(stride))
#define _tile_stored(t, base, stride) emu_stored(t, base, (size_t)(stride))
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)
#define _tile_dpbssd(c, a, b) emu_dpbssd(c, a, b)

#endif
