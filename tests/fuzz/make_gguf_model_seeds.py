#!/usr/bin/env python3
"""Writes tiny GGUF models (llama.cpp metadata and tensor names) as seeds for
fuzz_gguf_model: corpus/gguf_model/{qwen3moe,deepseek2,llama}.gguf. Standard
library only. Usage: make_gguf_model_seeds.py [OUT_DIR]"""
import os
import struct
import sys

U32, F32, BOOL, STRING = 4, 6, 7, 8
GGML_F32 = 0


def s(x):
    b = x.encode()
    return struct.pack('<Q', len(b)) + b


def kv(key, typ, val):
    out = s(key) + struct.pack('<I', typ)
    if typ == U32:
        out += struct.pack('<I', val)
    elif typ == F32:
        out += struct.pack('<f', val)
    elif typ == BOOL:
        out += struct.pack('<B', 1 if val else 0)
    elif typ == STRING:
        out += s(val)
    return out


def gguf(meta, tensors):
    """meta: [(key, type, value)]; tensors: [(name, ne)] all F32, values i*0.01."""
    head = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(meta))
    head += b''.join(kv(*m) for m in meta)
    data = b''
    infos = b''
    for name, ne in tensors:
        n = 1
        for d in ne:
            n *= d
        infos += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', d) for d in ne)
        infos += struct.pack('<IQ', GGML_F32, len(data))
        blob = b''.join(struct.pack('<f', (i % 7) * 0.01) for i in range(n))
        data += blob + b'\0' * ((-len(blob)) % 32)
    out = head + infos
    out += b'\0' * ((-len(out)) % 32)
    return out + data


def common(arch, layers, experts, used, ff, mff, heads=2, kv_heads=1, hidden=8, key_len=4):
    return [('general.architecture', STRING, arch),
            (arch + '.block_count', U32, layers),
            (arch + '.embedding_length', U32, hidden),
            (arch + '.feed_forward_length', U32, ff),
            (arch + '.expert_feed_forward_length', U32, mff),
            (arch + '.context_length', U32, 64),
            (arch + '.attention.head_count', U32, heads),
            (arch + '.attention.head_count_kv', U32, kv_heads),
            (arch + '.attention.key_length', U32, key_len),
            (arch + '.attention.layer_norm_rms_epsilon', F32, 1e-6),
            (arch + '.rope.freq_base', F32, 10000.0),
            (arch + '.expert_count', U32, experts),
            (arch + '.expert_used_count', U32, used),
            ('tokenizer.ggml.bos_token_id', U32, 1),
            ('tokenizer.ggml.eos_token_id', U32, 2)]


def moe(l, H, MI, E):
    return [(f'blk.{l}.ffn_gate_inp.weight', [H, E]),
            (f'blk.{l}.ffn_gate_exps.weight', [H, MI, E]),
            (f'blk.{l}.ffn_up_exps.weight', [H, MI, E]),
            (f'blk.{l}.ffn_down_exps.weight', [MI, H, E])]


def gqa(l, H, nh, nkv, hd, qk_norm):
    t = [(f'blk.{l}.attn_norm.weight', [H]),
         (f'blk.{l}.attn_q.weight', [H, nh * hd]),
         (f'blk.{l}.attn_k.weight', [H, nkv * hd]),
         (f'blk.{l}.attn_v.weight', [H, nkv * hd]),
         (f'blk.{l}.attn_output.weight', [nh * hd, H]),
         (f'blk.{l}.ffn_norm.weight', [H])]
    if qk_norm:
        t += [(f'blk.{l}.attn_q_norm.weight', [hd]), (f'blk.{l}.attn_k_norm.weight', [hd])]
    return t


def globals_(H, V):
    return [('token_embd.weight', [H, V]), ('output_norm.weight', [H]), ('output.weight', [H, V])]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'corpus', 'gguf_model')
    os.makedirs(out, exist_ok=True)
    H, V = 8, 4
    # qwen3moe: GQA with per-head QK norm, 1 layer, 2 experts
    meta = common('qwen3moe', 1, 2, 1, 8, 4) + [('qwen3moe.rope.dimension_count', U32, 4),
                                                ('qwen3moe.expert_weights_norm', BOOL, True)]
    t = globals_(H, V) + gqa(0, H, 2, 1, 4, True) + moe(0, H, 4, 2)
    open(os.path.join(out, 'qwen3moe.gguf'), 'wb').write(gguf(meta, t))
    # llama with experts (Mixtral)
    meta = common('llama', 1, 2, 1, 8, 4) + [('llama.rope.dimension_count', U32, 4)]
    t = globals_(H, V) + gqa(0, H, 2, 1, 4, False) + moe(0, H, 4, 2)
    open(os.path.join(out, 'llama.gguf'), 'wb').write(gguf(meta, t))
    # deepseek2: MLA (q_lora 4, kv_lora 4, nope 4 + rope 2, v 4), dense layer 0, shared expert,
    # sigmoid router with exp_probs_b, YaRN
    a = 'deepseek2'
    meta = common(a, 2, 2, 1, 8, 4, heads=2, kv_heads=2, key_len=6) + [
        (a + '.attention.value_length', U32, 4),
        (a + '.attention.q_lora_rank', U32, 4),
        (a + '.attention.kv_lora_rank', U32, 4),
        (a + '.rope.dimension_count', U32, 2),
        (a + '.leading_dense_block_count', U32, 1),
        (a + '.expert_shared_count', U32, 1),
        (a + '.expert_weights_scale', F32, 2.5),
        (a + '.expert_weights_norm', BOOL, True),
        (a + '.expert_gating_func', U32, 2),
        (a + '.rope.scaling.type', STRING, 'yarn'),
        (a + '.rope.scaling.factor', F32, 4.0),
        (a + '.rope.scaling.original_context_length', U32, 16),
        (a + '.rope.scaling.yarn_log_multiplier', F32, 0.1)]
    t = globals_(H, V)
    for l in range(2):
        t += [(f'blk.{l}.attn_norm.weight', [H]),
              (f'blk.{l}.attn_q_a.weight', [H, 4]),
              (f'blk.{l}.attn_q_a_norm.weight', [4]),
              (f'blk.{l}.attn_q_b.weight', [4, 2 * 6]),
              (f'blk.{l}.attn_kv_a_mqa.weight', [H, 4 + 2]),
              (f'blk.{l}.attn_kv_a_norm.weight', [4]),
              (f'blk.{l}.attn_kv_b.weight', [4, 2 * (4 + 4)]),
              (f'blk.{l}.attn_output.weight', [2 * 4, H]),
              (f'blk.{l}.ffn_norm.weight', [H])]
    t += [('blk.0.ffn_gate.weight', [H, 8]), ('blk.0.ffn_up.weight', [H, 8]),
          ('blk.0.ffn_down.weight', [8, H])]
    t += moe(1, H, 4, 2) + [('blk.1.exp_probs_b.bias', [2]),
                            ('blk.1.ffn_gate_shexp.weight', [H, 4]),
                            ('blk.1.ffn_up_shexp.weight', [H, 4]),
                            ('blk.1.ffn_down_shexp.weight', [4, H])]
    open(os.path.join(out, 'deepseek2.gguf'), 'wb').write(gguf(meta, t))


if __name__ == '__main__':
    main()
