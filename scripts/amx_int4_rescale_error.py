#!/usr/bin/env python3
"""Relative RMS error of AMXINT4 expert weights vs the BF16 originals: exact
(w = v s_g) and as the AMX-INT8 tiles compute them since the rescale (one scale
per row: S = max_g |s_g| / 16, w' = rint(v * f32(s_g * f32(16 / S16)))).
usage: amx_int4_rescale_error.py MODEL_DIR CONVERTED_DIR (kt-convert --method int4 output)
(cpu/amx/moe_amx.c, "INT4 on one scale per row"). Plain Python, no numpy: ~1 min a demo model."""
import json, struct, sys, os, glob, math

def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]

def bf16(h):
    return struct.unpack('<f', struct.pack('<I', h << 16))[0]

def header(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        return json.loads(f.read(n)), 8 + n

def read(path, hdr, base, name):
    t = hdr[name]
    a, b = t['data_offsets']
    with open(path, 'rb') as f:
        f.seek(base + a)
        return t, f.read(b - a)

model, conv = sys.argv[1], sys.argv[2]
idx = json.load(open(os.path.join(model, 'model.safetensors.index.json')))['weight_map']
tot = {}
for lf in sorted(glob.glob(os.path.join(conv, 'kt-experts-layer-*.safetensors'))):
    h, base = header(lf)
    meta = h['__metadata__']
    L, G = int(meta['kt.layer']), int(meta['kt.group_size'])
    ref = ex = rs = 0.0
    for name in h:
        if not name.endswith('.q'):
            continue
        _, e, p, _ = name.split('.')
        tq, q = read(lf, h, base, name)
        _, sc = read(lf, h, base, name[:-2] + '.scale')
        rows, words = tq['shape']
        cols = words * 8
        oname = 'model.layers.%d.mlp.experts.%s.%s_proj.weight' % (L, e, p)
        of = os.path.join(model, idx[oname])
        oh, ob = header(of)
        _, w = read(of, oh, ob, oname)
        wv = struct.unpack('<%dH' % (rows * cols), w)
        qv = struct.unpack('<%dI' % (rows * words), q)
        sv = struct.unpack('<%dH' % (rows * cols // G), sc)
        for r in range(rows):
            s = [bf16(x) for x in sv[r * (cols // G):(r + 1) * (cols // G)]]
            m = max(abs(x) for x in s)
            inv16 = f32(16.0 / m) if m > 0 else 0.0
            S = m / 16.0
            lut = []
            for sg in s:
                f = f32(sg * inv16)
                lut.append([max(-128, min(127, round(f32(v * f)))) for v in range(-8, 8)])
            for k in range(cols):
                v = ((qv[r * words + k // 8] >> (4 * (k % 8))) & 15) - 8
                g = k // G
                x = bf16(wv[r * cols + k])
                ref += x * x
                ex += (x - v * s[g]) ** 2
                rs += (x - lut[g][v + 8] * S) ** 2
    tot[L] = (math.sqrt(ex / ref), math.sqrt(rs / ref))
    print('layer %d g%d: exact %.5f  rescaled %.5f' % (L, G, *tot[L]), flush=True)
print('worst layer: exact %.5f rescaled %.5f' % (max(v[0] for v in tot.values()),
                                                 max(v[1] for v in tot.values())))
