/*
 * Scalar emulation of the AMX tile intrinsics moe_amx.c uses, for testing its
 * packing and loops on CPUs without AMX. Never built into the library.
 * Tiles are 16 rows x 64 bytes, as moe_amx.c configures them.
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

static _Thread_local uint8_t emu_tiles[8][16][64];

static inline void emu_loadconfig(const void *cfg)
{
    (void)cfg;
}
static inline void emu_zero(int t)
{
    memset(emu_tiles[t], 0, sizeof emu_tiles[t]);
}
static inline void emu_loadd(int t, const void *base, size_t stride)
{
    for (int r = 0; r < 16; r++)
        memcpy(emu_tiles[t][r], (const uint8_t *)base + (size_t)r * stride, 64);
}
static inline void emu_stored(int t, void *base, size_t stride)
{
    for (int r = 0; r < 16; r++)
        memcpy((uint8_t *)base + (size_t)r * stride, emu_tiles[t][r], 64);
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
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float acc;
            memcpy(&acc, &emu_tiles[c][m][4 * n], 4);
            for (int k = 0; k < 16; k++)
                for (int j = 0; j < 2; j++)
                    acc += emu_bf16(&emu_tiles[a][m][4 * k + 2 * j]) *
                           emu_bf16(&emu_tiles[b][k][4 * n + 2 * j]);
            memcpy(&emu_tiles[c][m][4 * n], &acc, 4);
        }
}

#define _tile_loadconfig(cfg) emu_loadconfig(cfg)
#define _tile_zero(t) emu_zero(t)
#define _tile_loadd(t, base, stride) emu_loadd(t, base, (size_t)(stride))
#define _tile_stored(t, base, stride) emu_stored(t, base, (size_t)(stride))
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)

#endif
