#!/usr/bin/env python3
"""Generates the hostile-file corpus of tests/data/hostile (standard library only).

Each case is a malformed safetensors file, sharded directory or GGUF file.
MANIFEST lists `kind name status needle`: opening `name` must fail with
KT_ERR_<status> and a message that names the file and contains `needle`
(kind: st = one safetensors file, dir = model directory, gguf = GGUF file,
ok = a valid file the cases refer to). Run: python3 make_hostile.py [OUT_DIR]
"""
import json
import os
import shutil
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
manifest = []


def put(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def case(kind, name, status, needle):
    manifest.append(f"{kind} {name} {status} {needle.replace(' ', '+')}")


# ---- safetensors -------------------------------------------------------------------

def st_bytes(header, data=b"", pad=True):
    h = header if isinstance(header, bytes) else header.encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_json(entries, data):
    return st_bytes(json.dumps(entries, separators=(",", ":")), data)


def tensor(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


VALID = st_json({"__metadata__": {"format": "pt"},
                 "a": tensor("F32", [2, 2], 0, 16),
                 "b": tensor("BF16", [4], 16, 24)}, bytes(range(24)))


def st_case(name, data, status, needle):
    put(name, data)
    case("st", name, status, needle)


def st_simple(name, entry, data_len, status, needle):
    st_case(name, st_json({"x": entry}, bytes(data_len)), status, needle)


def safetensors_cases():
    put("valid.safetensors", VALID)
    case("ok", "valid.safetensors", "OK", "-")
    st_case("st_empty.safetensors", b"", "FORMAT", "too short")
    st_case("st_5_bytes.safetensors", b"\x10\x00\x00\x00\x00", "FORMAT", "too short")
    hdr_len = struct.unpack("<Q", VALID[:8])[0]
    for cut in (8, 9, 20, 8 + hdr_len // 2, 8 + hdr_len - 1):
        st_case(f"st_trunc_{cut}.safetensors", VALID[:cut], "FORMAT", "past the end")
    st_case("st_trunc_data.safetensors", VALID[:-3], "FORMAT", "past the end")
    st_case("st_header_len_huge.safetensors",
            struct.pack("<Q", 1 << 63) + VALID[8:], "FORMAT", "header length")
    st_case("st_header_len_past_end.safetensors",
            struct.pack("<Q", len(VALID) - 7) + VALID[8:], "FORMAT", "header length")
    st_case("st_header_array.safetensors", st_bytes("[1,2,3]"), "FORMAT", "'{'")
    st_case("st_bad_json.safetensors", st_bytes('{"a":{"dtype":'), "FORMAT", "malformed JSON")
    st_case("st_trailing_garbage.safetensors", st_bytes('{} xyz'), "FORMAT", "trailing")
    st_case("st_non_utf8.safetensors",
            st_bytes(b'{"\xff\xfe":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
            "FORMAT", "UTF-8")
    st_case("st_overlong_utf8.safetensors", st_bytes(b'{"\xc0\xaf":1}'), "FORMAT", "UTF-8")
    st_case("st_nul_in_header.safetensors", st_bytes(b'{"a\x00":1}'), "FORMAT", "control")
    st_case("st_deep_nesting.safetensors",
            st_bytes('{"__metadata__":' + "[" * 5000 + "]" * 5000 + "}"), "FORMAT", "JSON")
    st_simple("st_bad_dtype.safetensors", tensor("F12", [1], 0, 4), 4, "FORMAT", "dtype")
    st_simple("st_dtype_f8_e8m0.safetensors", tensor("F8_E8M0", [1], 0, 1), 1, "UNSUPPORTED",
              "F8_E8M0")
    st_simple("st_dtype_number.safetensors", tensor(5, [1], 0, 4), 4, "FORMAT", "dtype")
    st_simple("st_no_dtype.safetensors", {"shape": [1], "data_offsets": [0, 4]}, 4,
              "FORMAT", "dtype")
    st_simple("st_shape_negative.safetensors", tensor("F32", [-1], 0, 4), 4, "FORMAT", "shape")
    st_simple("st_shape_float.safetensors", tensor("F32", [1.5], 0, 4), 4, "FORMAT", "shape")
    st_simple("st_shape_string.safetensors", tensor("F32", "4", 0, 4), 4, "FORMAT", "shape")
    st_simple("st_shape_1e30.safetensors", tensor("F32", [1e30], 0, 4), 4, "FORMAT", "shape")
    st_simple("st_too_many_dims.safetensors", tensor("U8", [1] * 9, 0, 1), 1, "FORMAT",
              "dimensions")
    st_simple("st_offsets_reversed.safetensors", tensor("U8", [4], 8, 4), 8, "FORMAT",
              "end")
    st_simple("st_offsets_out_of_range.safetensors", tensor("U8", [1000], 0, 1000), 16,
              "FORMAT", "past the end")
    st_simple("st_offsets_three.safetensors", {"dtype": "U8", "shape": [4],
              "data_offsets": [0, 4, 8]}, 8, "FORMAT", "data_offsets")
    st_simple("st_offsets_negative.safetensors", tensor("U8", [4], -4, 0), 8, "FORMAT",
              "data_offsets")
    st_simple("st_size_mismatch.safetensors", tensor("F32", [3], 0, 8), 8, "FORMAT", "need")
    st_simple("st_dims_overflow.safetensors",
              tensor("F32", [1 << 40, 1 << 40, 1 << 40], 0, 4), 4, "FORMAT", "overflows")
    st_simple("st_bytes_overflow.safetensors", tensor("F64", [1 << 31, 1 << 31, 2], 0, 8),
              8, "FORMAT", "overflows")
    st_simple("st_entry_not_object.safetensors", 5, 0, "FORMAT", "not an object")
    st_case("st_overlap.safetensors",
            st_json({"a": tensor("U8", [8], 0, 8), "b": tensor("U8", [8], 4, 12)}, bytes(12)),
            "FORMAT", "overlap")
    st_case("st_duplicate_name.safetensors",
            st_bytes('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                     '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\0\0"),
            "FORMAT", "twice")
    st_case("st_metadata_not_string.safetensors",
            st_json({"__metadata__": {"k": 1}}, b""), "FORMAT", "__metadata__")
    st_case("st_metadata_not_object.safetensors",
            st_json({"__metadata__": [1]}, b""), "FORMAT", "__metadata__")


# ---- sharded directories -----------------------------------------------------------

SHARD1 = st_json({"a": tensor("F32", [2], 0, 8)}, bytes(8))
SHARD2 = st_json({"b": tensor("F16", [2], 0, 4)}, bytes(4))


def dir_case(name, weight_map, status, needle, shards=True, index_text=None, shard2=SHARD2):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    if shards:
        with open(os.path.join(d, "s1.safetensors"), "wb") as f:
            f.write(SHARD1)
        with open(os.path.join(d, "s2.safetensors"), "wb") as f:
            f.write(shard2)
    text = index_text if index_text is not None else \
        json.dumps({"metadata": {"total_size": 12}, "weight_map": weight_map})
    with open(os.path.join(d, "model.safetensors.index.json"), "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    case("dir", name, status, needle)


def dir_cases():
    ok = {"a": "s1.safetensors", "b": "s2.safetensors"}
    dir_case("dir_missing_shard", {"a": "s1.safetensors", "b": "s9.safetensors"},
             "FORMAT", "s9.safetensors")
    dir_case("dir_tensor_missing", {"a": "s1.safetensors", "zz": "s2.safetensors"},
             "FORMAT", "'zz'")
    dir_case("dir_wrong_shard", {"a": "s2.safetensors", "b": "s2.safetensors"},
             "FORMAT", "'a'")
    dir_case("dir_one_tensor_two_files", None, "FORMAT", "'a'",
             index_text='{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors",'
                        '"a":"s2.safetensors"}}')
    dir_case("dir_same_tensor_two_shards", ok, "FORMAT", "also appears",
             shard2=st_json({"a": tensor("F32", [2], 0, 8), "b": tensor("F16", [2], 8, 12)},
                            bytes(12)))
    dir_case("dir_dotdot", {"a": "../valid.safetensors"}, "FORMAT", "..")
    dir_case("dir_dotdot_inner", {"a": "sub/../../valid.safetensors"}, "FORMAT", "..")
    dir_case("dir_absolute", {"a": "/etc/passwd"}, "FORMAT", "absolute")
    dir_case("dir_empty_name", {"a": ""}, "FORMAT", "empty")
    dir_case("dir_index_bad_json", None, "FORMAT", "malformed", index_text='{"weight_map":{')
    dir_case("dir_index_not_utf8", None, "FORMAT", "UTF-8",
             index_text=b'{"weight_map":{"\xff":"s1.safetensors"}}')
    dir_case("dir_no_weight_map", None, "FORMAT", "weight_map", index_text='{"metadata":{}}')
    dir_case("dir_index_array", None, "FORMAT", "weight_map", index_text='[1]')
    dir_case("dir_map_value_number", None, "FORMAT", "'a'",
             index_text='{"weight_map":{"a":7}}')
    dir_case("dir_corrupt_shard", ok, "FORMAT", "s2.safetensors",
             shard2=SHARD2[:len(SHARD2) - 2])
    # A shard that is a symlink leaving the directory (to the valid file beside it).
    dir_case("dir_symlink_escape", {"a": "s1.safetensors", "c": "link.safetensors"}, "FORMAT",
             "outside")
    os.symlink("../valid.safetensors", os.path.join(OUT, "dir_symlink_escape",
                                                     "link.safetensors"))


# ---- GGUF --------------------------------------------------------------------------

def gstr(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def tinfo(name, ne, gtype, offset):
    return gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne) \
        + struct.pack("<II", gtype, 0)[:4] + struct.pack("<Q", offset)


def gguf(kvs=(), tensors=(), data=b"", version=3, alignment=32, n_tensors=None, n_kv=None,
         magic=b"GGUF"):
    head = magic + struct.pack("<I", version)
    head += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                        len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    body += b"\0" * ((alignment - len(body) % alignment) % alignment)
    return body + data


U32, STRING, ARRAY, BOOL = 4, 8, 9, 7
GVALID = gguf([kv("general.architecture", STRING, gstr("llama")),
               kv("x.count", U32, struct.pack("<I", 3))],
              [tinfo("w", [4, 2], 0, 0), tinfo("q", [32], 8, 32)],
              bytes(32) + bytes(34))


def g_case(name, data, status, needle):
    put(name, data)
    case("gguf", name, status, needle)


def gguf_cases():
    put("valid.gguf", GVALID)
    case("okgguf", "valid.gguf", "OK", "-")
    g_case("gguf_empty.gguf", b"", "FORMAT", "magic")
    g_case("gguf_bad_magic.gguf", b"GGML" + GVALID[4:], "FORMAT", "magic")
    for cut in (4, 10, 24, 40, 60, 90, 120, len(GVALID) - 40, len(GVALID) - 1):
        g_case(f"gguf_trunc_{cut}.gguf", GVALID[:cut], "FORMAT", "-")
    g_case("gguf_version_1.gguf", gguf(version=1), "UNSUPPORTED", "version")
    g_case("gguf_version_99.gguf", gguf(version=99), "FORMAT", "version")
    g_case("gguf_big_endian.gguf", gguf(version=3 << 24), "UNSUPPORTED", "big-endian")
    g_case("gguf_n_tensors_huge.gguf", gguf(n_tensors=1 << 60), "FORMAT", "cannot fit")
    g_case("gguf_n_kv_huge.gguf", gguf(n_kv=(1 << 64) - 1), "FORMAT", "cannot fit")
    g_case("gguf_key_len_huge.gguf",
           gguf([struct.pack("<Q", 1 << 62) + b"abc" + bytes(16)], n_kv=1), "FORMAT",
           "past the end")
    g_case("gguf_string_len_huge.gguf",
           gguf([kv("s", STRING, struct.pack("<Q", (1 << 64) - 1) + b"xx")]), "FORMAT",
           "past the end")
    g_case("gguf_bad_value_type.gguf", gguf([kv("k", 13, bytes(8))]), "FORMAT", "value type")
    g_case("gguf_empty_key.gguf", gguf([kv("", U32, bytes(4))]), "FORMAT", "empty")
    g_case("gguf_nul_in_key.gguf", gguf([kv("a\0b", U32, bytes(4))]), "FORMAT", "NUL")
    g_case("gguf_bool_2.gguf", gguf([kv("b", BOOL, b"\x02")]), "FORMAT", "bool")
    g_case("gguf_array_count_huge.gguf",
           gguf([kv("a", ARRAY, struct.pack("<IQ", U32, 1 << 61) + bytes(8))]), "FORMAT",
           "runs past")
    g_case("gguf_array_strings_huge.gguf",
           gguf([kv("a", ARRAY, struct.pack("<IQ", STRING, 1 << 40) + bytes(64))]), "FORMAT",
           "runs past")
    g_case("gguf_array_bad_elem.gguf",
           gguf([kv("a", ARRAY, struct.pack("<IQ", 42, 1) + bytes(8))]), "FORMAT",
           "element type")
    nested = struct.pack("<IQ", U32, 0)
    for _ in range(12):
        nested = struct.pack("<IQ", ARRAY, 1) + nested
    g_case("gguf_array_nested_deep.gguf", gguf([kv("a", ARRAY, nested)]), "FORMAT", "nested")
    g_case("gguf_duplicate_key.gguf",
           gguf([kv("k", U32, bytes(4)), kv("k", U32, bytes(4))]), "FORMAT", "twice")
    g_case("gguf_alignment_33.gguf",
           gguf([kv("general.alignment", U32, struct.pack("<I", 33))], alignment=33), "FORMAT",
           "alignment")
    g_case("gguf_alignment_0.gguf",
           gguf([kv("general.alignment", U32, struct.pack("<I", 0))]), "FORMAT", "alignment")
    g_case("gguf_alignment_string.gguf",
           gguf([kv("general.alignment", STRING, gstr("32"))]), "FORMAT", "alignment")
    g_case("gguf_n_dims_5.gguf", gguf([], [tinfo("t", [1, 1, 1, 1, 1], 0, 0)], bytes(32)),
           "FORMAT", "dimensions")
    g_case("gguf_ne_overflow.gguf",
           gguf([], [tinfo("t", [1 << 32, 1 << 32, 1 << 32], 0, 0)], bytes(32)), "FORMAT",
           "overflows")
    g_case("gguf_ne_negative.gguf", gguf([], [tinfo("t", [(1 << 64) - 4], 0, 0)], bytes(32)),
           "FORMAT", "overflows")
    g_case("gguf_bytes_overflow.gguf",
           gguf([], [tinfo("t", [1 << 31, 1 << 31], 28, 0)], bytes(32)), "FORMAT",
           "overflows")
    g_case("gguf_unknown_ggml_type.gguf", gguf([], [tinfo("t", [4], 200, 0)], bytes(32)),
           "FORMAT", "ggml type")
    g_case("gguf_retired_ggml_type.gguf", gguf([], [tinfo("t", [32], 4, 0)], bytes(32)),
           "UNSUPPORTED", "ggml type")
    g_case("gguf_partial_block.gguf", gguf([], [tinfo("t", [33], 2, 0)], bytes(64)),
           "FORMAT", "blocks")
    g_case("gguf_offset_unaligned.gguf", gguf([], [tinfo("t", [4], 0, 4)], bytes(64)),
           "FORMAT", "alignment")
    g_case("gguf_offset_out_of_range.gguf", gguf([], [tinfo("t", [4], 0, 1 << 40)], bytes(32)),
           "FORMAT", "past the end")
    g_case("gguf_offset_wraps.gguf",
           gguf([], [tinfo("t", [8], 0, (1 << 64) - 32)], bytes(32)), "FORMAT", "past the end")
    g_case("gguf_overlap.gguf",
           gguf([], [tinfo("a", [16], 0, 0), tinfo("b", [16], 0, 32)], bytes(96)), "FORMAT",
           "overlap")
    g_case("gguf_duplicate_tensor.gguf",
           gguf([], [tinfo("a", [4], 0, 0), tinfo("a", [4], 0, 32)], bytes(64)), "FORMAT",
           "twice")
    g_case("gguf_empty_tensor_name.gguf", gguf([], [tinfo("", [4], 0, 0)], bytes(32)),
           "FORMAT", "empty")
    g_case("gguf_no_data_region.gguf", gguf([], [tinfo("t", [4], 0, 0)])[:-1], "FORMAT",
           "data region")


if __name__ == "__main__":
    safetensors_cases()
    dir_cases()
    gguf_cases()
    with open(os.path.join(OUT, "MANIFEST"), "w") as f:
        f.write("# kind name status needle (see make_hostile.py)\n")
        f.write("\n".join(manifest) + "\n")
    print(f"{sum(1 for m in manifest if not m.startswith('ok'))} hostile cases")
