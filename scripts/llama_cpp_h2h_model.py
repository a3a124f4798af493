#!/usr/bin/env python3
"""Write a Qwen3-30B-A3B-shaped MoE GGUF with random BF16 weights for the
llama.cpp head-to-head (scripts/llama_cpp_h2h.sh).

The experts have the real shape (hidden 2048, moe_intermediate 768, 128
experts, top-8); everything else is made small so that the MoE layers
dominate llama.cpp's time as well: one attention head of 128 (q, k, v, o are
2048 x 128), a 1024-token byte-level BPE vocabulary (256 byte tokens, merges,
3 special tokens) that llama.cpp's "gpt2" tokenizer loads.

Needs numpy and llama.cpp's gguf-py (pass its directory with --gguf-py, or
have `gguf` importable). Tensors are generated and written one at a time, so
memory stays near one expert tensor (400 MB) whatever the layer count; 8
layers are 9.7 GB on disk and take 2-4 minutes on one core.

    llama_cpp_h2h_model.py OUT.gguf [--layers 8] [--gguf-py DIR]
    llama_cpp_h2h_model.py --truncate IN.gguf OUT.gguf --layers 4 [--gguf-py DIR]
    llama_cpp_h2h_model.py --summarize LOGDIR --layers 8 FILE.gguf... [--gguf-py DIR]

--truncate copies the first N layers of a (quantized) file written by this
script, so a 4-layer and an 8-layer file hold identical per-layer tensors and
their time difference is the cost of 4 layers.
"""
import argparse
import sys

import numpy as np

HIDDEN, MOE_I, EXPERTS, TOP_K = 2048, 768, 128, 8
HEADS, HEAD_DIM, VOCAB = 1, 128, 1024


def byte_tokens():
    """GPT-2's byte-to-unicode map: printable bytes stand for themselves,
    the rest are moved to code points from 256 up (so 0x20 is 'Ġ')."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


def vocabulary():
    """1024 tokens: 256 bytes, merges of space + letter and of a letter and
    a lower-case letter, then <|endoftext|>, <|im_start|>, <|im_end|>."""
    tokens = byte_tokens()
    lower = "etaoinshrdlcumwfgypbvkjxqz"
    upper = lower.upper()
    merges = []
    space = tokens[0x20]
    pairs = [(space, c) for c in lower + upper] + [(a, b) for a in lower + upper for b in lower]
    for a, b in pairs:
        if len(tokens) >= VOCAB - 3:
            break
        merges.append(f"{a} {b}")
        tokens.append(a + b)
    assert len(tokens) == VOCAB - 3
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * len(tokens) + [3] * len(specials)  # NORMAL, CONTROL
    return tokens + specials, types, merges


def random_bf16(rng, shape):
    """Random BF16 bit patterns of magnitude 2^-7 .. 2^-3, either sign: never
    NaN, Inf or subnormal, so every quantizer sees ordinary numbers."""
    r = rng.integers(0, 1 << 16, size=int(np.prod(shape)), dtype=np.uint16)
    exponent = ((r >> 7) & 3).astype(np.uint16) + np.uint16(120)
    return ((r & np.uint16(0x807F)) | (exponent << np.uint16(7))).reshape(shape)


def tensor_plan(layers):
    """(name, numpy shape outermost first, kind) in file order."""
    plan = [("token_embd.weight", (VOCAB, HIDDEN), "w")]
    q = HEADS * HEAD_DIM
    for l in range(layers):
        b = f"blk.{l}."
        plan += [
            (b + "attn_norm.weight", (HIDDEN,), "norm"),
            (b + "attn_q.weight", (q, HIDDEN), "w"),
            (b + "attn_k.weight", (q, HIDDEN), "w"),
            (b + "attn_v.weight", (q, HIDDEN), "w"),
            (b + "attn_output.weight", (HIDDEN, q), "w"),
            (b + "attn_q_norm.weight", (HEAD_DIM,), "norm"),
            (b + "attn_k_norm.weight", (HEAD_DIM,), "norm"),
            (b + "ffn_norm.weight", (HIDDEN,), "norm"),
            (b + "ffn_gate_inp.weight", (EXPERTS, HIDDEN), "router"),
            (b + "ffn_gate_exps.weight", (EXPERTS, MOE_I, HIDDEN), "w"),
            (b + "ffn_up_exps.weight", (EXPERTS, MOE_I, HIDDEN), "w"),
            (b + "ffn_down_exps.weight", (EXPERTS, HIDDEN, MOE_I), "w"),
        ]
    plan += [("output_norm.weight", (HIDDEN,), "norm"), ("output.weight", (VOCAB, HIDDEN), "w")]
    return plan


def add_metadata(w, gguf, layers):
    w.add_name(f"qwen3moe-h2h-{layers}L")
    w.add_context_length(4096)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(layers)
    w.add_feed_forward_length(6144)
    w.add_expert_feed_forward_length(MOE_I)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(TOP_K)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    tokens, types, merges = vocabulary()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(VOCAB - 3)
    w.add_eos_token_id(VOCAB - 1)
    w.add_add_bos_token(False)


def write_model(gguf, path, layers, seed):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "qwen3moe")
    add_metadata(w, gguf, layers)
    plan = tensor_plan(layers)
    for name, shape, kind in plan:
        n = int(np.prod(shape))
        if kind == "w":
            w.add_tensor_info(name, shape, np.dtype(np.uint16), n * 2,
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), n * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, kind in plan:
        if kind == "w":
            data = random_bf16(rng, shape)
        elif kind == "norm":
            data = np.ones(shape, dtype=np.float32)
        else:  # the router: small F32 logits around 0
            data = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
        w.write_tensor_data(data)
        print(f"  {name} {shape}", file=sys.stderr, flush=True)
    w.close()


def truncate_model(gguf, src, dst, layers):
    """Copy src's metadata and tensors, keeping blk.N for N < layers."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = layers if field.name == f"{arch}.block_count" else field.contents()
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, value, field.types[0], sub_type=sub)
    kept = [t for t in r.tensors
            if not (t.name.startswith("blk.") and int(t.name.split(".")[1]) >= layers)]
    for t in kept:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in kept:
        w.write_tensor_data(np.asarray(t.data))
    w.close()


def weight_counts(gguf, path):
    """Per token of decode: bytes of the routed experts read (top-k of each
    layer's gate / up / down) and of everything else (token_embd: one row);
    multiply-adds per token: the experts', and the other matrices'."""
    r = gguf.GGUFReader(path)
    c = {"moe_bytes": 0, "other_bytes": 0, "moe_macs": 0, "other_macs": 0, "layers": 0}
    for t in r.tensors:
        ne = [int(x) for x in t.shape]
        if "_exps." in t.name:
            c["moe_bytes"] += int(t.n_bytes) // ne[2] * TOP_K
            c["moe_macs"] += ne[0] * ne[1] * TOP_K
            c["layers"] += t.name.startswith("blk.") and "gate_exps" in t.name
        elif t.name == "token_embd.weight":
            c["other_bytes"] += int(t.n_bytes) // ne[1]
        else:
            c["other_bytes"] += int(t.n_bytes)
            if len(ne) == 2:
                c["other_macs"] += ne[0] * ne[1]
    return c


def summarize(gguf, logdir, layers, files):
    """llama-bench's tok/s turned into kt-bench's units, per round, and the
    ratios libkt / llama.cpp."""
    import glob
    import json
    import os
    import re
    import statistics
    half = layers // 2
    print("llama-bench rates are the median of each test's reps (samples_ts)")
    print(f"per token: decode reads the {TOP_K} chosen experts of each layer; llama.cpp's time also "
          f"covers attention, norms, router, output (all-weights figure); 'per layer' is "
          f"({layers}L - {half}L) / {layers - half} layers of the two files")
    rows = []
    for path in files:
        typ = re.search(r"-([A-Za-z0-9_]+)\.gguf$", path).group(1)
        c = weight_counts(gguf, path)
        moe_layer_bytes = c["moe_bytes"] / c["layers"]
        moe_layer_flops = 2 * c["moe_macs"] / c["layers"]
        print(f"{typ}: {layers} layers, experts {c['moe_bytes'] / 1e6:.1f} MB/token "
              f"({moe_layer_bytes / 1e6:.2f} MB a layer), other weights {c['other_bytes'] / 1e6:.2f} MB/token; "
              f"{2 * c['moe_macs'] / 1e9:.3f} GFLOP/token in experts, {2 * c['other_macs'] / 1e9:.4f} other")
        for kt_log in sorted(glob.glob(os.path.join(logdir, f"r*-{typ}-kt.txt"))):
            rnd = re.search(r"/r(\d+)-", kt_log).group(1)
            txt = open(kt_log).read()
            m1 = re.search(r"T=1 +([\d.]+) GB/s.*?between the calls ([\d.]+) GB/s", txt)
            m512 = re.search(r"T=512 +([\d.]+) TFLOP/s", txt)
            lb = {}
            for nl in (layers, half):
                try:
                    for row in json.load(open(os.path.join(logdir, f"r{rnd}-{typ}-{nl}L.json"))):
                        # the median rep, not avg_ts: one stalled rep (session 15: 2.30
                        # against 84.77 tok/s) would pull the mean far down
                        ts = row.get("samples_ts") or [row["avg_ts"]]
                        lb[(nl, "pp" if row["n_prompt"] else "tg")] = statistics.median(ts)
                except (OSError, ValueError):
                    pass
            if not (m1 and m512 and (layers, "tg") in lb and (layers, "pp") in lb):
                print(f"  round {rnd}: incomplete logs")
                continue
            kt_dec, stream, kt_pf = float(m1.group(1)), float(m1.group(2)), float(m512.group(1))
            tg, pp = lb[(layers, "tg")], lb[(layers, "pp")]
            d_all = tg * (c["moe_bytes"] + c["other_bytes"]) / 1e9
            d_moe = tg * c["moe_bytes"] / 1e9
            p_all = pp * 2 * (c["moe_macs"] + c["other_macs"]) / 1e12
            p_moe = pp * 2 * c["moe_macs"] / 1e12
            d_lay = p_lay = float("nan")
            if (half, "tg") in lb and (half, "pp") in lb:
                dt = 1 / tg - 1 / lb[(half, "tg")]
                dp = 1 / pp - 1 / lb[(half, "pp")]
                if dt > 0:
                    d_lay = (layers - half) * moe_layer_bytes / dt / 1e9
                if dp > 0:
                    p_lay = (layers - half) * moe_layer_flops / dp / 1e12
            rows.append((typ, d_all, d_moe, d_lay, kt_dec, p_all, p_moe, p_lay, kt_pf))
            print(f"  round {rnd}: llama.cpp tg {tg:.2f} tok/s ({half}L {lb.get((half, 'tg'), 0):.2f}) = "
                  f"{d_all:.2f} GB/s all weights, {d_moe:.2f} experts only, {d_lay:.2f} per layer; "
                  f"libkt T=1 {kt_dec:.2f} GB/s ({kt_dec / stream:.2f} of stream {stream:.2f}) = "
                  f"{kt_dec / d_all:.2f}x / {kt_dec / d_moe:.2f}x / {kt_dec / d_lay:.2f}x")
            print(f"  round {rnd}: llama.cpp pp512 {pp:.2f} tok/s ({half}L {lb.get((half, 'pp'), 0):.2f}) = "
                  f"{p_all:.4f} TFLOP/s all matrices, {p_moe:.4f} experts only, {p_lay:.4f} per layer; "
                  f"libkt T=512 {kt_pf:.4f} TFLOP/s = "
                  f"{kt_pf / p_all:.2f}x / {kt_pf / p_moe:.2f}x / {kt_pf / p_lay:.2f}x")
    print("median over rounds, libkt / llama.cpp (all weights / experts only / per layer); bars 1.3x decode, 3x prefill")
    for typ in dict.fromkeys(r[0] for r in rows):
        sel = [r for r in rows if r[0] == typ]
        med = [statistics.median(r[i] for r in sel) for i in range(1, 9)]
        print(f"  {typ}: decode libkt {med[3]:.2f} GB/s vs llama.cpp {med[0]:.2f} / {med[1]:.2f} / {med[2]:.2f}: "
              f"{med[3] / med[0]:.2f}x / {med[3] / med[1]:.2f}x / {med[3] / med[2]:.2f}x; "
              f"prefill libkt {med[7]:.4f} TFLOP/s vs {med[4]:.4f} / {med[5]:.4f} / {med[6]:.4f}: "
              f"{med[7] / med[4]:.2f}x / {med[7] / med[5]:.2f}x / {med[7] / med[6]:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="OUT.gguf, or IN.gguf OUT.gguf with --truncate, "
                    "or the LAYERS files with --summarize")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--truncate", action="store_true")
    ap.add_argument("--summarize", metavar="LOGDIR", help="llama_cpp_h2h.sh's logs")
    ap.add_argument("--gguf-py", help="llama.cpp's gguf-py directory")
    a = ap.parse_args()
    if a.gguf_py:
        sys.path.insert(0, a.gguf_py)
    import gguf
    if a.summarize:
        summarize(gguf, a.summarize, a.layers, a.paths)
    elif a.truncate:
        if len(a.paths) != 2:
            ap.error("--truncate takes IN.gguf OUT.gguf")
        truncate_model(gguf, a.paths[0], a.paths[1], a.layers)
    else:
        if len(a.paths) != 1:
            ap.error("one OUT.gguf")
        write_model(gguf, a.paths[0], a.layers, a.seed)


if __name__ == "__main__":
    main()
