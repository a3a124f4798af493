#!/usr/bin/env python3
"""with_config/: the llama_like tokenizer.json plus a tokenizer_config.json in
the shapes found on the hub (bos_token as an AddedToken object, eos as a
string, add_bos_token that transformers 5 does not act on, an extra special
token only in added_tokens_decoder, a list of named chat templates), and
config_reference.json with what transformers (AutoTokenizer) makes of it.

    pip install transformers==5.17.0 && python3 make_config_reference.py
"""
import json
import os
import shutil

import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DIR = os.path.join(HERE, "with_config")

CONFIG = {
    "tokenizer_class": "TokenizersBackend",
    "add_bos_token": False,
    "add_eos_token": True,
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False,
                  "normalized": False, "rstrip": False, "single_word": False},
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": None,
    "added_tokens_decoder": {
        "0": {"content": "<unk>", "lstrip": False, "normalized": False, "rstrip": False,
              "single_word": False, "special": True},
        "1": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
              "single_word": False, "special": True},
        "2": {"content": "</s>", "lstrip": False, "normalized": False, "rstrip": False,
              "single_word": False, "special": True},
    },
    "chat_template": [
        {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"},
        {"name": "tool_use", "template": "{{ bos_token }}[TOOLS]{% for m in messages %}{{ m['content'] }}{% endfor %}"},
    ],
}

CASES = ["Hello world!", "<s>Hello</s> <mask> x", "  spaced  out  ", "café ☃ 🤖", ""]


def main():
    os.makedirs(DIR, exist_ok=True)
    shutil.copy(os.path.join(HERE, "llama_like", "tokenizer.json"), DIR)
    with open(os.path.join(DIR, "tokenizer_config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    tok = AutoTokenizer.from_pretrained(DIR)
    cases = []
    for text in CASES:
        plain = tok.encode(text, add_special_tokens=False)
        special = tok.encode(text, add_special_tokens=True)
        cases.append({"text": text, "ids": plain, "ids_special": special,
                      "decoded": tok.decode(plain),
                      "decoded_skip": tok.decode(special, skip_special_tokens=True)})
    ref = {
        "transformers": transformers.__version__,
        "class": type(tok).__name__,
        "bos": [tok.bos_token, tok.bos_token_id],
        "eos": [tok.eos_token, tok.eos_token_id],
        "unk": [tok.unk_token, tok.unk_token_id],
        "pad": [tok.pad_token, tok.pad_token_id],
        "templates": sorted(tok.chat_template.keys()) if isinstance(tok.chat_template, dict)
        else ["default"],
        "cases": cases,
    }
    with open(os.path.join(HERE, "config_reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)


main()
