/*
 * kt/tokenizer.h - text to token ids and back, exactly as the model's own
 * Hugging Face tokenizer does it.
 *
 * kt_tokenizer_open() reads a model directory (tokenizer.json, or Kimi's
 * tiktoken.model, plus tokenizer_config.json and chat_template.jinja when
 * present) or one tokenizer.json file. Supported: byte-level BPE (merges as
 * "a b" strings or [a, b] pairs, ignore_merges, byte_fallback, unk), the
 * normalizers real models use (NFC, NFKC, NFD, NFKD, Lowercase, Replace,
 * Prepend, Strip, StripAccents, Sequence), pre-tokenizers (Split with a regex
 * run by PCRE2 with Unicode properties, ByteLevel, Digits, Metaspace,
 * Whitespace, WhitespaceSplit, Punctuation, Sequence), added and special
 * tokens (matched before splitting, longest first, lstrip/rstrip/single_word/
 * normalized), TemplateProcessing/ByteLevel post-processors and the decoders
 * ByteLevel, ByteFallback, Fuse, Metaspace, Replace, Strip and Sequence.
 *
 *     kt_tokenizer *tok = NULL;
 *     if (kt_tokenizer_open(&tok, "models/kimi-k2-demo", NULL) < 0) {
 *         fprintf(stderr, "%s\n", kt_last_error());
 *         return 1;
 *     }
 *     int32_t ids[256];
 *     size_t n = 0;
 *     kt_tokenizer_encode(tok, "Hello", 5, KT_ENCODE_PARSE_SPECIAL, ids, 256, &n);
 *
 *     kt_detokenizer *d = NULL;          // streaming: whole characters only
 *     kt_detokenizer_create(&d, tok, 0);
 *     kt_buf text = KT_BUF_INIT;
 *     for (size_t i = 0; i < n; i++) {
 *         text.size = 0;
 *         kt_detokenizer_feed(d, ids[i], &text);
 *         fwrite(text.ptr, 1, text.size, stdout);
 *     }
 *     text.size = 0;
 *     kt_detokenizer_flush(d, &text);
 *     fwrite(text.ptr, 1, text.size, stdout);
 *     kt_buf_dispose(&text);
 *     kt_detokenizer_free(d);
 *     kt_tokenizer_free(tok);
 *
 * Thread contract: a kt_tokenizer is immutable after open; any number of
 * threads may encode and decode with it at once. A kt_detokenizer is used by
 * one thread at a time. Borrowed strings live until kt_tokenizer_free().
 */
#ifndef KT_TOKENIZER_H
#define KT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded tokenizer. Immutable; thread-shareable (K26). */
typedef struct kt_tokenizer kt_tokenizer;

typedef struct kt_tokenizer_options {
    uint32_t struct_size;        /* sizeof(kt_tokenizer_options); set by the INIT macro */
    uint32_t flags;              /* reserved, must be 0                                 */
    const kt_runtime *runtime;   /* for warnings; NULL: stderr at KT_LOG_WARN           */
} kt_tokenizer_options;

#define KT_TOKENIZER_OPTIONS_INIT { (uint32_t)sizeof(kt_tokenizer_options), 0u, NULL }

/* Fills *opts with defaults; struct_size is the caller's sizeof(*opts).
 * Since 0.1. */
KT_API kt_status kt_tokenizer_options_init(kt_tokenizer_options *opts, size_t struct_size);

/* Opens a tokenizer.
 * path: a model directory holding tokenizer.json (or tiktoken.model) and
 *   optionally tokenizer_config.json and chat_template.jinja; or the path of
 *   a tokenizer.json file (its directory is searched for the others).
 * opts: NULL for defaults.
 * Returns KT_OK; KT_ERR_NOT_FOUND (no tokenizer file), KT_ERR_IO,
 * KT_ERR_FORMAT (malformed file, bad regex: the message names the file and
 * the problem), KT_ERR_UNSUPPORTED (a model/normalizer/pre-tokenizer type
 * libkt does not implement), KT_ERR_NOMEM. On failure *out is NULL.
 * Caller owns *out; free with kt_tokenizer_free(). Thread-safe. Since 0.1. */
KT_API kt_status kt_tokenizer_open(kt_tokenizer **out, const char *path,
                                   const kt_tokenizer_options *opts);

/* Frees a tokenizer; NULL is a no-op. Free every kt_detokenizer made from it
 * first. Since 0.1. */
KT_API void kt_tokenizer_free(kt_tokenizer *tok);

/* kt_tokenizer_encode() flags. */
#define KT_ENCODE_ADD_SPECIAL   (1u << 0) /* add bos/eos as tokenizer.json's post-processor
                                             says (transformers' add_special_tokens=True; like
                                             transformers 5, add_bos_token is not consulted) */
#define KT_ENCODE_PARSE_SPECIAL (1u << 1) /* special-token strings in the text ("<|im_end|>")
                                             become their ids (transformers' default); without
                                             it they are encoded as plain text                */

/* Encodes UTF-8 text into token ids.
 * text, text_len: the text (need not be NUL-terminated; invalid UTF-8 is
 *   encoded as the bytes it holds where the vocabulary allows).
 * flags: KT_ENCODE_* bits; unknown bits are rejected.
 * ids, capacity: caller's array (may be NULL when capacity is 0).
 * n_ids: receives the number of ids of the encoding, also when it does not fit.
 * Returns KT_OK; KT_ERR_LIMIT if capacity < *n_ids (ids then holds the first
 * `capacity` ids: call again with a larger array); KT_ERR_INVALID_ARG;
 * KT_ERR_LIMIT also when the regex engine hits its match limit.
 * Thread-safe. Since 0.1. */
KT_API kt_status kt_tokenizer_encode(const kt_tokenizer *tok, const char *text, size_t text_len,
                                     uint32_t flags, int32_t *ids, size_t capacity,
                                     size_t *n_ids);

/* kt_tokenizer_decode() / kt_detokenizer_create() flags. */
#define KT_DECODE_SKIP_SPECIAL (1u << 0) /* leave out special tokens (skip_special_tokens) */

/* Decodes ids into UTF-8 text, as transformers' decode() does, and appends
 * it to *out (NUL-terminated). Unknown ids are skipped. Bytes that are not
 * valid UTF-8 become U+FFFD (one per maximal invalid sequence, as Python's
 * errors="replace").
 * Returns KT_OK, KT_ERR_INVALID_ARG, KT_ERR_NOMEM (out keeps what it had).
 * Thread-safe. Since 0.1. */
KT_API kt_status kt_tokenizer_decode(const kt_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                     uint32_t flags, kt_buf *out);

/* The bytes one token stands for when decoded on its own (a byte-level
 * token may hold part of a UTF-8 character; no U+FFFD substitution).
 * buf, capacity: caller's buffer (NULL/0 to query); *len receives the size
 * needed, without a terminator; a NUL is written after the bytes when room
 * allows. Returns KT_OK; KT_ERR_LIMIT if capacity < *len; KT_ERR_NOT_FOUND
 * for an id outside the vocabulary. Thread-safe. Since 0.1. */
KT_API kt_status kt_tokenizer_token_to_piece(const kt_tokenizer *tok, int32_t id, char *buf,
                                             size_t capacity, size_t *len);

/* The vocabulary string of a token as stored in the tokenizer file
 * ("Ġworld", "<|im_end|>"); NULL for an unknown id. Borrowed; valid until
 * kt_tokenizer_free(). Thread-safe. Since 0.1. */
KT_API const char *kt_tokenizer_token_text(const kt_tokenizer *tok, int32_t id);

/* The id of a vocabulary string (added tokens first, then the model's
 * vocabulary; the string is matched exactly, not encoded).
 * Returns KT_OK or KT_ERR_NOT_FOUND (*id = -1). Thread-safe. Since 0.1. */
KT_API kt_status kt_tokenizer_token_id(const kt_tokenizer *tok, const char *text, size_t len,
                                       int32_t *id);

/* kt_tokenizer_token_attrs() bits. */
#define KT_TOKEN_ATTR_ADDED   (1u << 0) /* an added token (tokenizer.json added_tokens)  */
#define KT_TOKEN_ATTR_SPECIAL (1u << 1) /* a special token (skipped by SKIP_SPECIAL)     */

/* KT_TOKEN_ATTR_* bits of a token; 0 for a plain or unknown id. Thread-safe.
 * Since 0.1. */
KT_API uint32_t kt_tokenizer_token_attrs(const kt_tokenizer *tok, int32_t id);

/* Number of token ids: one more than the largest id of the vocabulary and
 * the added tokens (the embedding table of the model may be larger).
 * Thread-safe. Since 0.1. */
KT_API size_t kt_tokenizer_vocab_size(const kt_tokenizer *tok);

/* Special token roles from tokenizer_config.json. Values are ABI. */
typedef enum kt_special_token {
    KT_SPECIAL_BOS = 0,
    KT_SPECIAL_EOS = 1,
    KT_SPECIAL_PAD = 2,
    KT_SPECIAL_UNK = 3
} kt_special_token;

/* Id of a special token role; -1 when the config names none or names a
 * string that is not in the vocabulary. Thread-safe. Since 0.1. */
KT_API int32_t kt_tokenizer_special_id(const kt_tokenizer *tok, kt_special_token which);

/* Text of a special token role as tokenizer_config.json gives it
 * ("<|im_end|>"); NULL when none. Borrowed; valid until kt_tokenizer_free().
 * Thread-safe. Since 0.1. */
KT_API const char *kt_tokenizer_special_text(const kt_tokenizer *tok, kt_special_token which);

/* Nonzero when encoding with KT_ENCODE_ADD_SPECIAL puts the BOS token first
 * (so a chat template that writes bos_token itself should be encoded without
 * it). Thread-safe. Since 0.1. */
KT_API int32_t kt_tokenizer_adds_bos(const kt_tokenizer *tok);

/* The model's chat template source (Jinja), for kt/template.h.
 * name: NULL or "default" for the default one, else a named template of a
 *   tokenizer_config.json "chat_template" list ("tool_use", ...).
 * Sources, later ones winning: tokenizer_config.json "chat_template" (a
 * string or a list of {name, template}), then chat_template.jinja.
 * Returns NULL when there is none by that name. Borrowed; valid until
 * kt_tokenizer_free(). Thread-safe. Since 0.1. */
KT_API const char *kt_tokenizer_chat_template(const kt_tokenizer *tok, const char *name);

/* Number of chat templates and the name of the i-th ("default" for the
 * unnamed one); NULL if i is out of range. Borrowed. Thread-safe. Since 0.1. */
KT_API size_t kt_tokenizer_chat_template_count(const kt_tokenizer *tok);
KT_API const char *kt_tokenizer_chat_template_name(const kt_tokenizer *tok, size_t i);

/* Streaming detokenizer: ids go in one at a time; out comes text made only
 * of complete UTF-8 characters, the same text kt_tokenizer_decode() gives for
 * all ids together. Used by one thread at a time. */
typedef struct kt_detokenizer kt_detokenizer;

/* Creates a detokenizer for tok with KT_DECODE_* flags. Caller owns *out;
 * free with kt_detokenizer_free() before kt_tokenizer_free(tok).
 * Returns KT_OK, KT_ERR_INVALID_ARG, KT_ERR_NOMEM. Since 0.1. */
KT_API kt_status kt_detokenizer_create(kt_detokenizer **out, const kt_tokenizer *tok,
                                       uint32_t flags);

/* Feeds one id and appends the text it completes to *out (possibly nothing:
 * a character split over several tokens waits for its last byte).
 * Returns KT_OK, KT_ERR_NOMEM (state unchanged). Since 0.1. */
KT_API kt_status kt_detokenizer_feed(kt_detokenizer *d, int32_t id, kt_buf *out);

/* Appends whatever is still held back (an incomplete character becomes
 * U+FFFD) and resets the detokenizer for a new stream. Since 0.1. */
KT_API kt_status kt_detokenizer_flush(kt_detokenizer *d, kt_buf *out);

/* Frees a detokenizer; NULL is a no-op. Since 0.1. */
KT_API void kt_detokenizer_free(kt_detokenizer *d);

#ifdef __cplusplus
}
#endif
#endif /* KT_TOKENIZER_H */
