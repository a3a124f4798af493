#!/usr/bin/env python3
"""Differential test of libkt's tokenizer against transformers (or tiktoken).

Encodes random texts (mixed scripts, odd whitespace, marks, emoji, the
tokenizer's own special tokens) with libkt through ctypes and with the
reference, with and without special tokens, decodes the ids both ways, and
decodes random id sequences (invalid UTF-8 included). Prints the first
mismatches and a count; exit status 1 if any.

    pip install transformers tiktoken
    scripts/tokenizer_diff.py build/lib/libkt.so MODEL_DIR [--seed N] [--n N]
    scripts/tokenizer_diff.py build/lib/libkt.so KIMI_DIR --tiktoken   (tiktoken.model dir)
"""
import argparse
import base64
import ctypes
import json
import os
import random
import sys

POOLS = ["abcXYZ", "HelloWorldABCdef", "   \t\n\r",
         "\x85\u180e\u200b\x1c\x1f\u2028\u2029\ufeff\x0b\x0c \u00a0\u2007\u202f\u3000",
         "0123456789", ".,;:!?'\"-()[]{}<>|/\\_", "éüñçÀÉ\u0301\u0308\u0903\u20dd",
         "热门专家在上。，", "ひらがなカタカナー", "한국어", "🤖🚀👨\u200d👩", "ΣσςΑβ", "Ⅻ½①ＡＢ",
         "'s 're 'LL 'S", "ʰǅ‿⁀€∑𝐀𝟘\u0345\ufe0f\U000e0001_~^`"]


class Buf(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("cap", ctypes.c_size_t)]


class Kt:
    def __init__(self, lib_path, model):
        self.lib = ctypes.CDLL(lib_path)
        self.lib.kt_last_error.restype = ctypes.c_char_p
        self.tok = ctypes.c_void_p()
        if self.lib.kt_tokenizer_open(ctypes.byref(self.tok), model.encode(), None) != 0:
            sys.exit("kt_tokenizer_open: %s" % self.lib.kt_last_error().decode())

    def encode(self, text, add_special):
        b = text.encode()
        cap = len(b) * 4 + 16
        arr = (ctypes.c_int32 * cap)()
        n = ctypes.c_size_t()
        flags = 2 | (1 if add_special else 0)
        st = self.lib.kt_tokenizer_encode(self.tok, b, ctypes.c_size_t(len(b)),
                                          ctypes.c_uint32(flags), arr, ctypes.c_size_t(cap),
                                          ctypes.byref(n))
        if st != 0:
            raise RuntimeError(self.lib.kt_last_error().decode())
        return list(arr[:n.value])

    def decode(self, ids, skip_special):
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        buf = Buf()
        st = self.lib.kt_tokenizer_decode(self.tok, arr, ctypes.c_size_t(len(ids)),
                                          ctypes.c_uint32(1 if skip_special else 0),
                                          ctypes.byref(buf))
        if st != 0:
            raise RuntimeError(self.lib.kt_last_error().decode())
        s = ctypes.string_at(buf.ptr, buf.size).decode() if buf.size else ""
        self.lib.kt_buf_dispose(ctypes.byref(buf))
        return s


def random_text(rng, specials):
    parts = []
    for _ in range(rng.randint(1, 12)):
        if specials and rng.random() < 0.08:
            parts.append(rng.choice(specials))
        else:
            pool = rng.choice(POOLS)
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
    return "".join(parts)


def tiktoken_reference(model):
    import tiktoken
    ranks = {}
    with open(os.path.join(model, "tiktoken.model")) as f:
        for line in f:
            if line.strip():
                b, r = line.split()
                ranks[base64.b64decode(b)] = int(r)
    cfg = json.load(open(os.path.join(model, "tokenizer_config.json")))
    named = {int(k): v["content"] for k, v in cfg.get("added_tokens_decoder", {}).items()}
    base = len(ranks)
    specials = {named.get(i, "<|reserved_token_%d|>" % i): i for i in range(base, base + 256)}
    pat = json.load(open(os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                      "tiktoken_kimi", "reference.json")))["pat_str"]
    enc = tiktoken.Encoding(name="kimi", pat_str=pat, mergeable_ranks=ranks,
                            special_tokens=specials)
    return enc, list(named.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libkt")
    ap.add_argument("model")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--tiktoken", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    kt = Kt(a.libkt, a.model)
    bad = 0

    def report(*what):
        nonlocal bad
        bad += 1
        if bad <= 5:
            print(*what)

    if a.tiktoken:
        enc, specials = tiktoken_reference(a.model)
        for _ in range(a.n):
            text = random_text(rng, specials)
            want = enc.encode(text, allowed_special="all")
            got = kt.encode(text, False)
            if got != want:
                report("ENC", repr(text), "\n got ", got, "\n want", want)
            if kt.decode(want, False) != text:
                report("DEC", repr(text))
    else:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(a.model)
        specials = list(hf.all_special_tokens) + list(hf.added_tokens_encoder.keys())
        for _ in range(a.n):
            text = random_text(rng, specials)
            for add in (False, True):
                want = hf.encode(text, add_special_tokens=add)
                got = kt.encode(text, add)
                if got != want:
                    report("ENC", repr(text), add, "\n got ", got, "\n want", want)
            for skip in (False, True):
                if kt.decode(want, skip) != hf.decode(want, skip_special_tokens=skip):
                    report("DEC", repr(text), skip)
        for _ in range(a.n // 4):
            ids = [rng.randrange(0, len(hf)) for _ in range(rng.randint(1, 10))]
            for skip in (False, True):
                g, w = kt.decode(ids, skip), hf.decode(ids, skip_special_tokens=skip)
                if g != w:
                    report("RANDDEC", ids, skip, repr(g), repr(w))
    print("%s: %d mismatches" % (a.model, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
