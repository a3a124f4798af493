/*
 * Private structures of the tokenizer (lib/text/tokenizer*.c). Never installed.
 *
 * Encoding runs the Hugging Face pipeline: added tokens split the text first
 * (longest match, before normalization for `normalized: false` tokens), the
 * rest is normalized, pre-tokenized into pieces and each piece is encoded by
 * the model (BPE with merge ranks, or tiktoken's rank merging), then the
 * post-processor adds bos/eos. Decoding maps ids to token strings and runs the
 * decoder chain over them.
 */
#ifndef KT_TOKENIZER_INTERNAL_H
#define KT_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "kt/tokenizer.h"
#include "kt_internal.h"

/* ---- byte arena and string-to-id hash map (growable arrays: kt__grow) ---- */

/* Bytes referenced by (offset, length); offsets stay valid when it grows. */
typedef struct kt__arena {
    char *data;
    size_t size, cap;
} kt__arena;

kt_status kt__arena_add(kt__arena *a, const void *s, size_t n, uint32_t *off);
void kt__arena_free(kt__arena *a);

typedef struct kt__strmap_entry {
    uint32_t off, len; /* key bytes in the owner's arena */
    int32_t value;
} kt__strmap_entry;

/* Open addressing over entries; `arena` is where the keys live. */
typedef struct kt__strmap {
    uint32_t *slots; /* [cap] entry index + 1, 0 = empty */
    size_t cap;
    kt__strmap_entry *entries;
    size_t n, entries_cap;
} kt__strmap;

/* Inserts key -> value; an existing key keeps its first value (returns KT_OK). */
kt_status kt__strmap_put(kt__strmap *m, const kt__arena *arena, uint32_t off, uint32_t len,
                         int32_t value);
/* Value of the key, or -1. */
int32_t kt__strmap_get(const kt__strmap *m, const kt__arena *arena, const char *key, size_t len);
void kt__strmap_free(kt__strmap *m);

/* ---- Unicode (tokenizer_unicode.c) -------------------------------------- */

/* Decodes one UTF-8 sequence at s[0..n) (n >= 1). Returns its length and sets
 * *cp; an invalid or truncated sequence gives length 1 and *cp = 0xFFFFFFFF. */
size_t kt__utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encodes cp (<= 0x10FFFF) into out[4]; returns the length. */
size_t kt__utf8_encode(uint32_t cp, char *out);
/* Length of the longest prefix of s that ends on a complete character
 * (a trailing incomplete but so far valid sequence is left out). */
size_t kt__utf8_complete_prefix(const char *s, size_t n);
/* Appends s with each maximal invalid subpart replaced by U+FFFD (as Rust's
 * String::from_utf8_lossy does). */
kt_status kt__utf8_append_lossy(kt_buf *out, const char *s, size_t n);

typedef enum kt__unorm { KT__NFC, KT__NFD, KT__NFKC, KT__NFKD } kt__unorm;
/* Appends the normalization form of s to out (invalid bytes pass through). */
kt_status kt__unicode_normalize(kt__unorm form, const char *s, size_t n, kt_buf *out);
/* Appends the full lowercase mapping of s (final sigma included). */
kt_status kt__unicode_lower(const char *s, size_t n, kt_buf *out);
/* Appends s without marks (Mn, Mc, Me), as tokenizers' StripAccents. */
kt_status kt__unicode_strip_marks(const char *s, size_t n, kt_buf *out);
/* A PCRE2 class of what tokenizers' Punctuation pre-tokenizer isolates. */
const char *kt__unicode_punct_class(void);
/* Rust's char::is_whitespace (Unicode White_Space). */
bool kt__unicode_is_space(uint32_t cp);
/* Word characters as regex \\w sees them (single_word added tokens). */
bool kt__unicode_is_word(uint32_t cp);

/* ---- pipeline steps ----------------------------------------------------- */

typedef enum kt__norm_kind {
    KT__NORM_NFC,
    KT__NORM_NFD,
    KT__NORM_NFKC,
    KT__NORM_NFKD,
    KT__NORM_LOWERCASE,
    KT__NORM_REPLACE, /* pattern (string or regex) -> content */
    KT__NORM_PREPEND,
    KT__NORM_STRIP,
    KT__NORM_STRIP_ACCENTS
} kt__norm_kind;

typedef struct kt__norm {
    kt__norm_kind kind;
    pcre2_code *re;      /* REPLACE: the pattern (a string pattern is compiled literal) */
    char *content;       /* REPLACE, PREPEND */
    size_t content_len;
    bool strip_left, strip_right; /* STRIP */
} kt__norm;

/* How a Split keeps its matches (tokenizers' SplitDelimiterBehavior). */
typedef enum kt__split_behavior {
    KT__SPLIT_REMOVED,
    KT__SPLIT_ISOLATED,
    KT__SPLIT_MERGED_WITH_PREVIOUS,
    KT__SPLIT_MERGED_WITH_NEXT,
    KT__SPLIT_CONTIGUOUS
} kt__split_behavior;

typedef enum kt__pretok_kind {
    KT__PRETOK_SPLIT,     /* regex split (also Digits, Whitespace, Punctuation, ...) */
    KT__PRETOK_BYTELEVEL, /* optional prefix space, GPT-2 regex, byte -> char map   */
    KT__PRETOK_METASPACE  /* spaces -> replacement char, optional prefix, split      */
} kt__pretok_kind;

typedef enum kt__prepend_scheme { KT__PREPEND_ALWAYS, KT__PREPEND_FIRST, KT__PREPEND_NEVER }
    kt__prepend_scheme;

typedef struct kt__pretok {
    kt__pretok_kind kind;
    pcre2_code *re;              /* SPLIT; BYTELEVEL with use_regex          */
    kt__split_behavior behavior; /* SPLIT                                     */
    bool invert;                 /* SPLIT                                     */
    bool remove_space_pieces;    /* SPLIT for Whitespace: drop pure-space gaps */
    bool add_prefix_space;       /* BYTELEVEL                                 */
    char replacement[8];         /* METASPACE: UTF-8 of the replacement char  */
    size_t replacement_len;
    kt__prepend_scheme prepend;  /* METASPACE                                 */
    bool split;                  /* METASPACE                                 */
} kt__pretok;

typedef enum kt__dec_kind {
    KT__DEC_BYTELEVEL,
    KT__DEC_BYTEFALLBACK,
    KT__DEC_FUSE,
    KT__DEC_METASPACE,
    KT__DEC_REPLACE,
    KT__DEC_STRIP
} kt__dec_kind;

typedef struct kt__dec {
    kt__dec_kind kind;
    char *pattern, *content; /* REPLACE (string pattern); STRIP content char */
    size_t pattern_len, content_len;
    pcre2_code *re;          /* REPLACE with a Regex pattern */
    uint32_t start, stop;    /* STRIP */
    char replacement[8];     /* METASPACE */
    size_t replacement_len;
    bool add_prefix_space;   /* METASPACE: strip the first token's leading space */
} kt__dec;

/* An added token (tokenizer.json added_tokens / added_tokens_decoder). */
typedef struct kt__added {
    uint32_t off, len;        /* content in the arena          */
    uint32_t norm_off, norm_len; /* normalized content (normalized tokens) */
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} kt__added;

/* Byte trie over added-token contents: [node] children as sibling lists. */
typedef struct kt__trie_node {
    int32_t child, sibling; /* node indices, -1 none */
    int32_t added;          /* index into added[], -1 none */
    uint8_t byte;
} kt__trie_node;

typedef struct kt__trie {
    kt__trie_node *nodes;
    size_t n, cap;
} kt__trie;

typedef struct kt__merge_slot {
    uint64_t key;  /* (left id << 32) | right id */
    uint32_t rank; /* UINT32_MAX: empty slot     */
    int32_t new_id;
} kt__merge_slot;

typedef struct kt__token {
    uint32_t off, len; /* decode string (added content or model vocab string) */
    uint32_t attrs;    /* KT_TOKEN_ATTR_*; bit 31: id exists                    */
} kt__token;
#define KT__TOKEN_EXISTS (1u << 31)

typedef enum kt__model_kind { KT__MODEL_BPE, KT__MODEL_TIKTOKEN } kt__model_kind;

/* One item of the post-processor's single-sequence template. */
typedef struct kt__post_item {
    int32_t id; /* a special token id, or -1 for the sequence itself */
} kt__post_item;

struct kt_tokenizer {
    const kt_runtime *rt;
    kt__model_kind model;
    kt__arena arena;           /* every string of the tokenizer       */
    kt__token *tokens;         /* [n_tokens] by id                    */
    size_t n_tokens;
    kt__strmap vocab;          /* model vocabulary string -> id       */
    kt__strmap added_map;      /* added content -> id                 */
    kt__added *added;          /* [n_added]                           */
    size_t n_added, added_cap;
    kt__trie trie_raw, trie_norm; /* added tokens matched before / after normalization */

    /* BPE */
    kt__merge_slot *merges;    /* [merges_cap] open addressing        */
    size_t merges_cap, n_merges;
    int32_t unk_id;            /* -1 none                             */
    bool byte_fallback, fuse_unk, ignore_merges;
    char *cont_prefix, *eow_suffix; /* continuing_subword_prefix, end_of_word_suffix */
    int32_t byte_ids[256];     /* byte_fallback "<0xXX>" ids, -1 missing */
    int32_t char_ids[256];     /* ids of single-byte strings (fast path), -1 missing */

    kt__norm *norms;
    size_t n_norms;
    kt__pretok *pretoks;
    size_t n_pretoks;
    kt__dec *decs;
    size_t n_decs;
    bool dec_raw;              /* no decoder: tiktoken bytes, joined as they are */

    kt__post_item *post;       /* [n_post] template with the sequence once */
    size_t n_post;
    bool has_post;

    int32_t special_ids[4];
    char *special_text[4];
    bool clean_up_spaces;

    char **template_names, **template_sources;
    size_t n_templates;

    /* ByteLevel: [256] UTF-8 of each byte's char; reverse map cp -> byte */
    char byte_chars[256][3];
    uint8_t byte_char_len[256];
};

/* Pieces of text being pre-tokenized: byte ranges of a work buffer. */
typedef struct kt__piece {
    size_t off, len;
    int32_t added_id; /* >= 0: an added token already matched */
    bool first;       /* starts at offset 0 of the original text (Metaspace "first") */
} kt__piece;

/* tokenizer.c: a tokenizer from a tokenizer.json (or tiktoken.model) held in
 * memory, without tokenizer_config.json (for the fuzzer); `name` is used in
 * messages. */
/* tokenizer_gguf.c: from a GGUF file's tokenizer.ggml.* metadata (byte-level BPE). */
kt_status kt__tokenizer_from_gguf(kt_tokenizer **out, const char *path);

kt_status kt__tokenizer_parse(kt_tokenizer **out, const char *data, size_t size, bool tiktoken,
                              const char *name);

/* tokenizer_encode.c */
kt_status kt__tok_encode(const kt_tokenizer *tok, const char *text, size_t len, uint32_t flags,
                         int32_t **ids, size_t *n, size_t *cap);
kt_status kt__tok_normalize(const kt_tokenizer *tok, const char *s, size_t n, kt_buf *out);
kt_status kt__tok_trie_add(kt__trie *t, const char *s, size_t n, int32_t added_index);
void kt__tok_bytelevel_init(kt_tokenizer *tok);

/* tokenizer_decode.c */
/* Appends the decoded bytes of ids (raw: no U+FFFD substitution at the end
 * when `raw`). */
kt_status kt__tok_decode(const kt_tokenizer *tok, const int32_t *ids, size_t n, uint32_t flags,
                         bool raw, kt_buf *out);

/* regex helper: compiles with UTF + UCP (and JIT when available). */
kt_status kt__tok_regex(pcre2_code **out, const char *pattern, size_t len, bool literal,
                        const char *file, const char *what);

#endif
