#!/usr/bin/env python3
"""A Hugging Face checkpoint shaped like Qwen3-30B-A3B (hidden 2048, 128 experts of
768, top-8, 32/4 heads of 128) with a few layers of random BF16 weights, for
benchmarks: `kt-convert --method gguf:Q4_0` turns its experts into the GGUF that
`kt-bench moe --gguf` runs. Standard library only.

    random_qwen3_moe.py OUT_DIR [--layers N] [--vocab V]
"""
import argparse
import json
import os
import struct

H, I, E, K, HEADS, KV, HD = 2048, 768, 128, 8, 32, 4, 128


def rand_bf16(n):
    """n BF16 values of magnitude 2^-7..2^-5, random sign and mantissa."""
    b = bytearray(os.urandom(2 * n))
    table = bytes(((x & 0x80) | 0x3C) for x in range(256))
    b[1::2] = bytes(b[1::2]).translate(table)
    return bytes(b)


def ones_bf16(n):
    return b"\x80\x3f" * n


def write_st(path, tensors):
    """tensors: list of (name, shape, bytes) in BF16."""
    header, off = {}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, data in tensors:
            f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1024)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    wmap = {}
    files = []
    top = [("model.embed_tokens.weight", [a.vocab, H], rand_bf16(a.vocab * H)),
           ("lm_head.weight", [a.vocab, H], rand_bf16(a.vocab * H)),
           ("model.norm.weight", [H], ones_bf16(H))]
    files.append(("model-top.safetensors", top))
    for l in range(a.layers):
        p = f"model.layers.{l}."
        t = [(p + "input_layernorm.weight", [H], ones_bf16(H)),
             (p + "post_attention_layernorm.weight", [H], ones_bf16(H)),
             (p + "self_attn.q_norm.weight", [HD], ones_bf16(HD)),
             (p + "self_attn.k_norm.weight", [HD], ones_bf16(HD)),
             (p + "self_attn.q_proj.weight", [HEADS * HD, H], rand_bf16(HEADS * HD * H)),
             (p + "self_attn.k_proj.weight", [KV * HD, H], rand_bf16(KV * HD * H)),
             (p + "self_attn.v_proj.weight", [KV * HD, H], rand_bf16(KV * HD * H)),
             (p + "self_attn.o_proj.weight", [H, HEADS * HD], rand_bf16(HEADS * HD * H)),
             (p + "mlp.gate.weight", [E, H], rand_bf16(E * H))]
        for e in range(E):
            q = p + f"mlp.experts.{e}."
            t += [(q + "gate_proj.weight", [I, H], rand_bf16(I * H)),
                  (q + "up_proj.weight", [I, H], rand_bf16(I * H)),
                  (q + "down_proj.weight", [H, I], rand_bf16(I * H))]
        files.append((f"model-layer-{l:03d}.safetensors", t))
    for fname, t in files:
        write_st(os.path.join(a.out, fname), t)
        for name, _, _ in t:
            wmap[name] = fname
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f)
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
           "hidden_size": H, "intermediate_size": 6144, "moe_intermediate_size": I,
           "num_hidden_layers": a.layers, "num_attention_heads": HEADS,
           "num_key_value_heads": KV, "head_dim": HD, "num_experts": E,
           "num_experts_per_tok": K, "norm_topk_prob": True, "decoder_sparse_step": 1,
           "mlp_only_layers": [], "vocab_size": a.vocab, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "max_position_embeddings": 4096,
           "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
           "torch_dtype": "bfloat16"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
