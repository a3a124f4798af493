#!/usr/bin/env python3
"""Builds a small Kimi-style tiktoken tokenizer and its reference ids.

tiktoken.model: the byte-level vocabulary of ../models/kimi_k2_demo/tokenizer.json
written as Kimi ships its own ("<base64 bytes> <rank>" lines, ranks 0..n-1).
tokenizer_config.json: special tokens after the ranks, as Kimi-K2's
added_tokens_decoder names them (others stay <|reserved_token_N|>).
reference.json: ids from tiktoken itself (the library tokenization_kimi.py
runs), with Kimi's pat_str, for each text in CASES, cut first as
tokenization_kimi.py's encode() cuts long texts (kimi_encode below).

    pip install tiktoken && python3 make_reference.py
"""
import base64
import json
import os

import tiktoken

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, '..', 'models', 'kimi_k2_demo', 'tokenizer.json')

# tokenization_kimi.py (moonshotai/Kimi-K2-Instruct), TikTokenTokenizer.pat_str
PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

SPECIALS = {0: '[BOS]', 1: '[EOS]', 4: '<|im_end|>', 5: '<|im_user|>', 6: '<|im_assistant|>',
            8: '<|start_header_id|>', 9: '<|end_header_id|>', 12: '[EOT]',
            13: '<|im_system|>', 17: '<|im_middle|>'}
N_RESERVED = 256

CASES = [
    "Hello world! This is a test of the tokenizer.",
    "HelloWorld camelCase XMLHttpRequest iPhone McDonald's",
    "It's they're we've I'M you'll HE'D don't",
    "KTransformers 的异构推理思路是将热门专家保留在 GPU 上，将冷门专家卸载到 CPU 上。",
    "ひらがなとカタカナ、漢字まじり文。한국어 텍스트",
    "Numbers: 1234567890 3.14159 -42 1e-6 ١٢٣٤",
    "  leading spaces and\ttabs\n\n\nnewlines   trailing   ",
    "line one\r\nline two\r\n\r\n",
    "emoji 🤖🚀 and accents café naïve Ünïcödé e\u0301",
    "Ελληνικά ΚΕΦΑΛΑΙΑ Русский ТЕКСТ",
    "def forward(self, x):\n    return self.w2(F.silu(self.w1(x)) * self.w3(x))\n",
    "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>",
    "[BOS]text[EOS] and <|reserved_token_100|> literally",
    "",
    "a",
    "!!!???... --- ===",
    "热门。's 上，'S ひらがなー カタカナ・ー 〆々〇",
    " " * 26000 + "x",
    "a\u180e b\x85c\u2028d \u200b e\x1cf\u3000g \u180e\u180e h",
]


def split_runs(s, max_run):
    """tokenization_kimi.py: cut where a run of whitespace or non-whitespace
    passes max_run characters."""
    run, run_space, start = 0, (s[0].isspace() if s else False), 0
    for i, ch in enumerate(s):
        space = ch.isspace()
        if space != run_space:
            run, run_space = 1, space
        else:
            run += 1
            if run > max_run:
                yield s[start:i]
                start, run = i, 1
    yield s[start:]


def kimi_encode(enc, text):
    ids = []
    for i in range(0, len(text), 400_000):
        for sub in split_runs(text[i:i + 400_000], 25_000):
            ids.extend(enc.encode(sub, allowed_special='all'))
    return ids


def main():
    tj = json.load(open(SRC, encoding='utf-8'))
    # GPT-2 byte <-> char map
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    char_to_byte = {chr(c): b for b, c in zip(bs, cs)}
    added = {t['id'] for t in tj['added_tokens']}
    vocab = sorted((kv for kv in tj['model']['vocab'].items() if kv[1] not in added),
                   key=lambda kv: kv[1])
    ranks = {}
    for tok, _ in vocab:
        ranks[bytes(char_to_byte[c] for c in tok)] = len(ranks)
    base = len(ranks)
    with open(os.path.join(HERE, 'tiktoken.model'), 'w') as f:
        for b, r in ranks.items():
            f.write('%s %d\n' % (base64.b64encode(b).decode(), r))
    specials = {}
    for i in range(N_RESERVED):
        specials[SPECIALS.get(i, '<|reserved_token_%d|>' % (base + i))] = base + i
    cfg = {
        'added_tokens_decoder': {str(base + i): {'content': c, 'lstrip': False,
                                                 'normalized': False, 'rstrip': False,
                                                 'single_word': False, 'special': True}
                                 for i, c in SPECIALS.items()},
        'bos_token': '[BOS]',
        'eos_token': '[EOS]',
        'pad_token': None,
        'tokenizer_class': 'TikTokenTokenizer',
    }
    with open(os.path.join(HERE, 'tokenizer_config.json'), 'w') as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    enc = tiktoken.Encoding(name='kimi_test', pat_str=PAT_STR, mergeable_ranks=ranks,
                            special_tokens=specials)
    cases = [{'text': t, 'ids': kimi_encode(enc, t)} for t in CASES]
    for c in cases:
        assert enc.decode(c['ids']) == c['text']
    ref = {'tiktoken': tiktoken.__version__, 'pat_str': PAT_STR, 'cases': cases,
           'specials': {c: base + i for i, c in SPECIALS.items()} |
                       {'<|reserved_token_%d|>' % (base + 100): base + 100},
           'bos_id': base}
    with open(os.path.join(HERE, 'reference.json'), 'w') as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)


main()
