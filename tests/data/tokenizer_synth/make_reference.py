#!/usr/bin/env python3
"""Small tokenizers that exercise the tokenizer.json pieces the fixtures do
not (Metaspace, byte fallback, the normalizers, Digits, Whitespace,
Punctuation, added-token flags, TemplateProcessing, the other decoders), each
trained with Hugging Face `tokenizers` on CORPUS, and reference.json holding
what `tokenizers` itself returns for CASES: ids with and without special
tokens, and the decoded text with and without skip_special_tokens.

    pip install tokenizers && python3 make_reference.py
"""
import json
import os

import tokenizers
from tokenizers import Tokenizer, AddedToken, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))

CORPUS = [
    "The quick brown fox jumps over the lazy dog. Mixture of experts routes each token.",
    "KTransformers keeps hot experts on the GPU and cold experts on the CPU.",
    "Numbers like 12345 and 3.14159 appear in code: x = y * 2 + 10; print(x)",
    "Ünïcödé çafé naïve résumé Straße ÀÉÎÕÜ ﬁne ½ ① ＡＢＣ",
    "热门专家在 GPU 上，冷门专家在 CPU 上。ひらがな カタカナ 한국어",
    "def forward(self, x):\n    return self.w2(F.silu(self.w1(x)))\n",
    "Hello hello HELLO world World WORLD, it's they're we've",
] * 20

CASES = [
    "Hello world! This is a test.",
    "  leading spaces and\ttabs\n\nnewlines   trailing  ",
    "Numbers: 1234567890 3.14159 -42",
    "Ünïcödé çafé naïve ﬁne ½ ① ＡＢＣ Straße",
    "emoji 🤖🚀 unknown ☃ chars",
    "热门专家 GPU 上。ひらがな",
    "<s>hello</s> <mask> text <mask>x [SW] a[SW]b [SW]",
    "it's they're WE'VE",
    "a [SW]\u00bd [SW]\u00e9 [SW]\u200d x [SW]_ \u00bd[SW] \u216b[SW] [SW]\u0301 [SW]",
    "a\u0903b a\u20ddb \U000e0001\u20dd\u02b0\u20ac \u01c5\u2040~ \u203f_",
    "a\u180e b\x85c\u2028d \u200b e\x1cf\u3000g \u180e\u180e h",
    "a [sw]\u00bd [sw]\u00e9 <mask>\u200d[sw] x\u2460[sw]\u2460 [sw]",
    "",
    " ",
]

SPECIALS = ["<unk>", "<s>", "</s>"]


def train(tok, vocab_size, **kw):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  show_progress=False, **kw)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def llama_like():
    """SentencePiece-style BPE: ▁ for spaces, byte fallback, TemplateProcessing."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    train(tok, 360)
    # byte tokens for the fallback, after the trained ones
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    j["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(j))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    return tok


def metaspace():
    """Metaspace pre-tokenizer, NFKC + lowercase, bos and eos, added-token flags."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    train(tok, 400)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", 1), ("</s>", 2)])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
    tok.add_tokens([AddedToken("[sw]", single_word=True, normalized=True)])
    return tok


def bytelevel_digits():
    """GPT-2 ByteLevel with its regex and a prefix space, digits split one by one."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.Strip(left=True, right=False),
                                           normalizers.Replace(tokenizers.Regex(r"\t"), "    ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    train(tok, 420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("[SW]", single_word=True)])
    return tok


def wordish():
    """Whitespace/Punctuation splits, NFD + accent stripping, ## subwords, no decoder."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=False)])
    train(tok, 380, continuing_subword_prefix="##")
    return tok


def whitespace_split():
    """Whitespace pre-tokenizer, Split with MergedWithPrevious and invert, NFKD."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKD()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(),
        pre_tokenizers.Split(tokenizers.Regex(r"[aeiou]"), behavior="merged_with_previous"),
        pre_tokenizers.Split(tokenizers.Regex(r"[A-Z]+"), behavior="merged_with_next",
                             invert=True)])
    train(tok, 300)
    tok.decoder = decoders.Sequence([decoders.Replace(tokenizers.Regex("a+"), "A"),
                                     decoders.Fuse()])
    return tok


def main():
    makers = [llama_like, metaspace, bytelevel_digits, wordish, whitespace_split]
    ref = {"tokenizers": tokenizers.__version__, "tokenizers_cases": []}
    for make in makers:
        tok = make()
        name = make.__name__
        os.makedirs(os.path.join(HERE, name), exist_ok=True)
        tok.save(os.path.join(HERE, name, "tokenizer.json"))
        cases = []
        for text in CASES:
            plain = tok.encode(text, add_special_tokens=False).ids
            special = tok.encode(text, add_special_tokens=True).ids
            cases.append({
                "text": text,
                "ids": plain,
                "ids_special": special,
                "decoded": tok.decode(plain, skip_special_tokens=False),
                "decoded_skip": tok.decode(special, skip_special_tokens=True),
            })
        ref["tokenizers_cases"].append({"name": name, "doc": make.__doc__, "cases": cases})
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)


main()
