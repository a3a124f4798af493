#!/usr/bin/env python3
"""Writes reference.gguf and reference_align64.gguf with llama.cpp's own gguf-py
writer (pip package `gguf`), so that libkt's GGUF reader is tested against files
that libkt did not write. tests/unit/test_gguf.c asserts the values below.

Run: python3 make_reference.py OUT_DIR   (needs `pip install gguf`)
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf import GGUFWriter


def pattern(n, mul=7, add=3):
    return np.array([(i * mul + add) & 0xFF for i in range(n)], dtype=np.uint8)


def write(path, alignment=None):
    w = GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.15625)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62) - 7)
    w.add_float64("t.f64", -1.5e300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo w\u00f6rld \u2713")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "", "\u00fcn\u00ef"])
    w.add_array("t.arr_nested", [["x", "y"], ["z"]])
    w.add_array("t.arr_f32", [0.5, -1.25])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_key_value("t.arr_u64", [1, 2**40], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("t.arr_u8", b"\x00\xff\x10", V.ARRAY)
    # numpy shape (rows, cols) -> ggml ne = [cols, rows]
    w.add_tensor("f32", (np.arange(12, dtype=np.float32) * 0.5).reshape(3, 4))
    w.add_tensor("f16", (np.arange(16, dtype=np.float16) - 8).reshape(2, 8))
    w.add_tensor("i32", np.array([-1, 0, 1, 2, 3], dtype=np.int32))
    # block types as raw bytes: last dim in bytes, converted to elements by gguf-py
    w.add_tensor("q8_0", pattern(2 * 2 * 34).reshape(2, 68), raw_dtype=Q.Q8_0)
    w.add_tensor("q4_k", pattern(144).reshape(1, 144), raw_dtype=Q.Q4_K)
    w.add_tensor("bf16", pattern(8).reshape(1, 8), raw_dtype=Q.BF16)
    w.add_tensor("iq2_xxs", pattern(66).reshape(1, 66), raw_dtype=Q.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    write(f"{out}/reference.gguf")
    write(f"{out}/reference_align64.gguf", alignment=64)
