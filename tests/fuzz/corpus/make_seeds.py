#!/usr/bin/env python3
"""Writes the small seed files of corpus/safetensors (standard library only):
a few tensors cut from a real transformers-written fixture shard (its header
layout kept), and one file with every dtype and __metadata__.
Run: python3 make_seeds.py FIXTURE_SHARD  (e.g. tests/data/fixtures/qwen3_moe_tiny/
model-00001-of-00002.safetensors). GGUF seeds are tests/data/gguf and hostile files."""
import json
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))


def write(name, header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(os.path.join(here, "safetensors", name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def from_fixture(path, count=4):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data_start = 8 + n
    small = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][1] - header[k]["data_offsets"][0])
    out, data = {"__metadata__": header.get("__metadata__", {})}, b""
    for k in small[:count]:
        b, e = header[k]["data_offsets"]
        out[k] = dict(header[k], data_offsets=[len(data), len(data) + e - b])
        data += raw[data_start + b:data_start + e]
    write("fixture_cut.safetensors", out, data)


def all_dtypes():
    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8,
             "U64": 8, "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
    header, data = {"__metadata__": {"format": "pt", "note": "seed"}}, b""
    for i, (dt, size) in enumerate(sizes.items()):
        shape = [2, i % 3 + 1]
        nbytes = 2 * (i % 3 + 1) * size
        header[f"model.layers.{i}.{dt.lower()}.weight"] = {
            "dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + nbytes]}
        data += bytes((j * 37 + i) & 0xFF for j in range(nbytes))
    header["empty"] = {"dtype": "F32", "shape": [0, 4], "data_offsets": [len(data), len(data)]}
    header["scalar"] = {"dtype": "F32", "shape": [], "data_offsets": [len(data), len(data) + 4]}
    data += struct.pack("<f", 1.5)
    write("all_dtypes.safetensors", header, data)


if __name__ == "__main__":
    all_dtypes()
    if len(sys.argv) > 1:
        from_fixture(sys.argv[1])
