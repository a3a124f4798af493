#!/usr/bin/env python3
"""normalization.json: random strings over the characters where Unicode
normalization is hard (combining marks in every order, Hangul syllables and
jamo, composition exclusions, singletons, compatibility characters, final
sigma) with their NFC, NFD, NFKC, NFKD and lowercase forms from Python's
unicodedata / str.lower(); and "hf_cases": strings with characters added
after Unicode 9 (which Hugging Face tokenizers' normalization data lacks),
normalized by tokenizers itself (pip install tokenizers). Deterministic."""
import json
import os
import random
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(1234)

POOLS = [
    "aeiouAEIOUcCnNsSzZyYwW ",                    # bases that compose
    "\u0300\u0301\u0302\u0303\u0308\u030a\u030c\u0323\u0327\u0328\u031b\u0345\u0306",
    "\u05b0\u05b7\u05bc\u0591\u0f71\u0f72\u0f74\u0f80",  # Hebrew points, Tibetan (reordering)
    "\u1100\u1101\u1161\u1175\u11a8\u11c2\uac00\uac01\ud7a3",  # jamo and syllables
    "\u0915\u093c\u0929\u0958\u09a1\u09bc\u0b47\u0b3e\u0b56",  # nukta, exclusions, two-part vowels
    "\u212b\u2126\u0340\u0344\u0f73\uf900\u2fb00\u1e9b",       # singletons, non-starter decompositions
    "\ufb01\u00bd\u2460\uff21\u3300\u00b5\u2163\u00a0\u1e9e\u01c4\u2088",  # compatibility
    "\u03a3\u03c3\u039f\u0391\u0130\u0049\u1e9e\u00c0\u01c5\u0130",          # case mapping
    "\u00e9\u00c5\u1e69\u1ec7\u01d5\u0390\u1f82",                            # precomposed
    "\U0001d15e\U0001d160\U0001f600\u4e2d\u6587",                            # astral, CJK
]


def sample():
    n = rng.randint(1, 12)
    return "".join(rng.choice(rng.choice(POOLS)) for _ in range(n))


cases = []
for _ in range(600):
    s = sample()
    cases.append({"s": s, "nfc": unicodedata.normalize("NFC", s),
                  "nfd": unicodedata.normalize("NFD", s),
                  "nfkc": unicodedata.normalize("NFKC", s),
                  "nfkd": unicodedata.normalize("NFKD", s),
                  "lower": s.lower()})
from tokenizers import normalizers as hf  # noqa: E402

NEW = "\u0898\u08cd\u09fe\u1ac1\u1df6\U00010d24\U0001e130\ua7f2\ua7f3\U00011a5b\u0345\u0301\u0316"
hf_forms = {"nfc": hf.NFC(), "nfd": hf.NFD(), "nfkc": hf.NFKC(), "nfkd": hf.NFKD(),
            "strip": hf.Sequence([hf.NFD(), hf.StripAccents()])}
hf_cases = []
for _ in range(200):
    s = "".join(rng.choice("aeoAE" if rng.random() < 0.4 else NEW) for _ in range(rng.randint(1, 6)))
    hf_cases.append({"s": s} | {k: n.normalize_str(s) for k, n in hf_forms.items()})
with open(os.path.join(HERE, "normalization.json"), "w") as f:
    json.dump({"unicode": unicodedata.unidata_version, "cases": cases, "hf_cases": hf_cases}, f,
              ensure_ascii=False, indent=0)
