/*
 * Tokenizer tests: every encode case and chat prompt of the fixtures and the
 * demo models' prompts against transformers' ids (reference.json,
 * reference.safetensors), decoding, streaming decode of multi-byte text,
 * Kimi's tiktoken format against tiktoken's own output, and bad files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "kt/tokenizer.h"
#include "test_files.h"
#include "text/tokenizer_internal.h"

static cJSON *read_json(const char *path)
{
    char *s = read_whole_file(path, NULL);
    if (!s)
        return NULL;
    cJSON *j = cJSON_Parse(s);
    free(s);
    return j;
}

/* int32 tensor `name` of a safetensors file; returns the count, -1 if absent. */
static long safetensors_i32(const char *path, const char *name, int32_t *out, size_t cap)
{
    size_t size;
    char *d = read_whole_file(path, &size);
    if (!d || size < 8) {
        free(d);
        return -1;
    }
    uint64_t hl;
    memcpy(&hl, d, 8);
    long n = -1;
    if (hl <= size - 8) {
        char *hdr = malloc(hl + 1);
        memcpy(hdr, d + 8, hl);
        hdr[hl] = '\0';
        cJSON *h = cJSON_Parse(hdr);
        cJSON *t = cJSON_GetObjectItem(h, name);
        cJSON *offs = cJSON_GetObjectItem(t, "data_offsets");
        const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(t, "dtype"));
        if (offs && dt && !strcmp(dt, "I32")) {
            size_t a = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
            size_t b = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
            n = (long)((b - a) / 4);
            if ((size_t)n <= cap)
                memcpy(out, d + 8 + hl + a, b - a);
            else
                n = -1;
        }
        cJSON_Delete(h);
        free(hdr);
    }
    free(d);
    return n;
}

static void assert_ids(const cJSON *want, const int32_t *ids, size_t n, const char *what)
{
    size_t wn = (size_t)cJSON_GetArraySize(want);
    bool same = wn == n;
    for (size_t i = 0; same && i < n; i++)
        same = (int32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble == ids[i];
    if (!same) {
        fprintf(stderr, "ids differ for %s\n  got:  ", what);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%d ", ids[i]);
        fprintf(stderr, "\n  want: ");
        for (size_t i = 0; i < wn; i++)
            fprintf(stderr, "%d ", (int)cJSON_GetArrayItem(want, (int)i)->valuedouble);
        fprintf(stderr, "\n");
    }
    assert_true(same);
}

static int32_t *encode(const kt_tokenizer *tok, const char *text, size_t len, uint32_t flags,
                       size_t *n)
{
    /* two-call sizing */
    kt_status st = kt_tokenizer_encode(tok, text, len, flags, NULL, 0, n);
    if (st != KT_OK && st != KT_ERR_LIMIT)
        fprintf(stderr, "encode: %s\n", kt_last_error());
    assert_true(st == KT_OK || st == KT_ERR_LIMIT);
    int32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
    size_t n2 = 0;
    assert_int_equal(kt_tokenizer_encode(tok, text, len, flags, ids, *n, &n2), KT_OK);
    assert_int_equal(n2, *n);
    return ids;
}

/* Decodes ids one at a time through a kt_detokenizer; checks that each chunk
 * is whole UTF-8 and that the result equals `want`. */
static void check_stream(const kt_tokenizer *tok, const int32_t *ids, size_t n,
                         const char *want, size_t want_len)
{
    kt_detokenizer *d = NULL;
    assert_int_equal(kt_detokenizer_create(&d, tok, 0), KT_OK);
    kt_buf all = KT_BUF_INIT, chunk = KT_BUF_INIT;
    for (size_t i = 0; i <= n; i++) {
        chunk.size = 0;
        if (i < n)
            assert_int_equal(kt_detokenizer_feed(d, ids[i], &chunk), KT_OK);
        else
            assert_int_equal(kt_detokenizer_flush(d, &chunk), KT_OK);
        /* a chunk never ends inside a character and never starts with a continuation */
        for (size_t k = 0; k < chunk.size;) {
            unsigned char c = (unsigned char)chunk.ptr[k];
            size_t l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
            assert_true(l > 0);
            assert_true(k + l <= chunk.size);
            k += l;
        }
        if (chunk.size) {
            all.ptr = realloc(all.ptr, all.size + chunk.size + 1);
            memcpy(all.ptr + all.size, chunk.ptr, chunk.size);
            all.size += chunk.size;
        }
    }
    assert_int_equal(all.size, want_len);
    assert_memory_equal(all.ptr ? all.ptr : "", want, want_len);
    free(all.ptr);
    kt_buf_dispose(&chunk);
    kt_detokenizer_free(d);
}

static void check_decode(const kt_tokenizer *tok, const int32_t *ids, size_t n,
                         const char *want)
{
    kt_buf out = KT_BUF_INIT;
    assert_int_equal(kt_tokenizer_decode(tok, ids, n, 0, &out), KT_OK);
    if (strlen(want) != out.size || memcmp(out.ptr, want, out.size))
        fprintf(stderr, "decode differs:\n  got:  [%s]\n  want: [%s]\n", out.ptr, want);
    assert_int_equal(out.size, strlen(want));
    assert_memory_equal(out.ptr, want, out.size);
    kt_buf_dispose(&out);
    check_stream(tok, ids, n, want, strlen(want));
}

/* dir's reference.json (*ref) and its tokenizer, opened (the error printed if not). */
static kt_tokenizer *open_with_reference(const char *dir, const char *name, cJSON **ref)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    *ref = read_json(path);
    assert_non_null(*ref);
    kt_tokenizer *tok = NULL;
    kt_status st = kt_tokenizer_open(&tok, dir, NULL);
    if (st < 0)
        fprintf(stderr, "%s: %s\n", name, kt_last_error());
    assert_int_equal(st, KT_OK);
    return tok;
}

/* Fixture `name`: the encode / decode cases transformers recorded in reference.json. */
static void test_fixture(void **state)
{
    const char *name = *state;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/fixtures/%s", test_data(), name);
    cJSON *ref;
    kt_tokenizer *tok = open_with_reference(dir, name, &ref);

    const cJSON *tk = cJSON_GetObjectItem(ref, "tokenizer"), *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(tk, "encode_cases")) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        size_t n;
        int32_t *ids = encode(tok, text, strlen(text), KT_ENCODE_PARSE_SPECIAL, &n);
        assert_ids(cJSON_GetObjectItem(c, "ids"), ids, n, text);
        check_decode(tok, ids, n, cJSON_GetObjectItem(c, "decoded")->valuestring);
        free(ids);
        n_cases++;
    }
    assert_true(n_cases >= 5);

    const cJSON *chat = cJSON_GetObjectItem(tk, "chat_case");
    const char *rendered = cJSON_GetObjectItem(chat, "rendered")->valuestring;
    size_t n;
    int32_t *ids = encode(tok, rendered, strlen(rendered), KT_ENCODE_PARSE_SPECIAL, &n);
    assert_ids(cJSON_GetObjectItem(chat, "ids"), ids, n, "chat_case");
    check_decode(tok, ids, n, rendered);
    free(ids);

    /* the model prompt, where the fixture's reference tensors are here */
    const char *prompt = cJSON_GetObjectItem(ref, "prompt")->valuestring;
    int32_t want[512];
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    long wn = safetensors_i32(path, "prompt_ids", want, 512);
    if (wn < 0) { /* families with variants keep it per variant */
        snprintf(path, sizeof path, "%s/bf16/reference.safetensors", dir);
        wn = safetensors_i32(path, "prompt_ids", want, 512);
    }
    if (wn >= 0) {
        ids = encode(tok, prompt, strlen(prompt), KT_ENCODE_PARSE_SPECIAL | KT_ENCODE_ADD_SPECIAL,
                     &n);
        assert_int_equal(n, (size_t)wn);
        assert_memory_equal(ids, want, n * sizeof *ids);
        free(ids);
    }
    assert_non_null(kt_tokenizer_chat_template(tok, NULL));
    kt_tokenizer_free(tok);
    cJSON_Delete(ref);
}

/* Demo model `name`: prompt -> prompt_ids, greedy_ids -> greedy_text. */
static void test_demo(void **state)
{
    const char *name = *state;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/models/%s", test_data(), name);
    cJSON *ref;
    kt_tokenizer *tok = open_with_reference(dir, name, &ref);
    const char *prompt = cJSON_GetObjectItem(ref, "prompt")->valuestring;
    int32_t want[4096];
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    long wn = safetensors_i32(path, "prompt_ids", want, 4096);
    assert_true(wn > 0);
    size_t n;
    int32_t *ids = encode(tok, prompt, strlen(prompt),
                          KT_ENCODE_PARSE_SPECIAL | KT_ENCODE_ADD_SPECIAL, &n);
    assert_int_equal(n, (size_t)wn);
    assert_memory_equal(ids, want, n * sizeof *ids);
    free(ids);

    const cJSON *g = cJSON_GetObjectItem(ref, "greedy_ids"), *x;
    int32_t gids[256];
    size_t gn = 0;
    cJSON_ArrayForEach(x, g) gids[gn++] = (int32_t)x->valuedouble;
    check_decode(tok, gids, gn, cJSON_GetObjectItem(ref, "greedy_text")->valuestring);

    /* held-out text decodes and re-encodes to the same ids (2049 tokens of prose) */
    static int32_t held[4096];
    long hn = safetensors_i32(path, "heldout_ids", held, 4096);
    assert_true(hn > 100);
    kt_buf text = KT_BUF_INIT;
    assert_int_equal(kt_tokenizer_decode(tok, held, (size_t)hn, 0, &text), KT_OK);
    check_stream(tok, held, (size_t)hn, text.ptr, text.size);
    /* transformers tokenized the whole held-out text: re-encoding these 2049
     * tokens' text gives them back (the last one may merge differently) */
    ids = encode(tok, text.ptr, text.size, KT_ENCODE_PARSE_SPECIAL, &n);
    assert_true(n >= (size_t)hn - 1);
    assert_memory_equal(ids, held, ((size_t)hn - 1) * sizeof *ids);
    free(ids);
    kt_buf_dispose(&text);
    kt_tokenizer_free(tok);
    cJSON_Delete(ref);
}

/* Metadata from tokenizer_config.json and the chat template file. */
static void test_specials_and_template(void **state)
{
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/fixtures/deepseek_v3_tiny", test_data());
    kt_tokenizer *tok = NULL;
    assert_int_equal(kt_tokenizer_open(&tok, dir, NULL), KT_OK);
    assert_int_equal(kt_tokenizer_vocab_size(tok), 500);
    assert_int_equal(kt_tokenizer_special_id(tok, KT_SPECIAL_BOS), 0);
    assert_int_equal(kt_tokenizer_special_id(tok, KT_SPECIAL_EOS), 1);
    assert_int_equal(kt_tokenizer_special_id(tok, KT_SPECIAL_PAD), 1);
    assert_int_equal(kt_tokenizer_special_id(tok, KT_SPECIAL_UNK), -1);
    assert_string_equal(kt_tokenizer_special_text(tok, KT_SPECIAL_BOS),
                        "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
    assert_null(kt_tokenizer_special_text(tok, KT_SPECIAL_UNK));
    assert_int_equal(kt_tokenizer_adds_bos(tok), 0);
    assert_int_equal(kt_tokenizer_token_attrs(tok, 1), KT_TOKEN_ATTR_ADDED | KT_TOKEN_ATTR_SPECIAL);
    assert_int_equal(kt_tokenizer_token_attrs(tok, 100), 0);
    int32_t id = 7;
    assert_int_equal(kt_tokenizer_token_id(tok, "</think>", 8, &id), KT_OK);
    assert_int_equal(id, 5);
    assert_int_equal(kt_tokenizer_token_id(tok, "no such token", 13, &id), KT_ERR_NOT_FOUND);
    assert_int_equal(id, -1);
    assert_string_equal(kt_tokenizer_token_text(tok, 5), "</think>");
    assert_null(kt_tokenizer_token_text(tok, 100000));
    assert_int_equal(kt_tokenizer_chat_template_count(tok), 1);
    assert_string_equal(kt_tokenizer_chat_template_name(tok, 0), "default");
    const char *tpl = kt_tokenizer_chat_template(tok, NULL);
    assert_non_null(tpl);
    assert_non_null(strstr(tpl, "add_generation_prompt"));
    assert_null(kt_tokenizer_chat_template(tok, "tool_use"));

    /* special tokens as plain text when not parsed; skipped on request */
    size_t n;
    int32_t *ids = encode(tok, "<think>", 7, 0, &n);
    assert_true(n > 1);
    free(ids);
    ids = encode(tok, "<think>hi</think>", 17, KT_ENCODE_PARSE_SPECIAL, &n);
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[n - 1], 5);
    kt_buf out = KT_BUF_INIT;
    assert_int_equal(kt_tokenizer_decode(tok, ids, n, KT_DECODE_SKIP_SPECIAL, &out), KT_OK);
    assert_string_equal(out.ptr, "hi");
    kt_buf_dispose(&out);
    free(ids);

    /* token pieces: a byte-level token holding part of a character */
    char piece[16];
    size_t len = 0;
    assert_int_equal(kt_tokenizer_token_to_piece(tok, 487, NULL, 0, &len), KT_ERR_LIMIT);
    assert_true(len > 0 && len < sizeof piece);
    assert_int_equal(kt_tokenizer_token_to_piece(tok, 487, piece, sizeof piece, &len), KT_OK);
    assert_int_equal(kt_tokenizer_token_to_piece(tok, -1, piece, sizeof piece, &len),
                     KT_ERR_NOT_FOUND);

    /* two-call sizing of encode */
    int32_t small[2];
    assert_int_equal(kt_tokenizer_encode(tok, "Hello world!", 12, 0, small, 2, &n), KT_ERR_LIMIT);
    assert_true(n > 2);
    assert_int_equal(kt_tokenizer_encode(tok, "x", 1, 1u << 7, small, 2, &n), KT_ERR_INVALID_ARG);
    kt_tokenizer_free(tok);
}

/* Streaming never splits a character: emoji, CJK and accents, each byte its
 * own token in these tiny vocabularies. */
static void test_stream_multibyte(void **state)
{
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3_moe_tiny", test_data());
    kt_tokenizer *tok = NULL;
    assert_int_equal(kt_tokenizer_open(&tok, dir, NULL), KT_OK);
    static const char *const texts[] = {
        "\xF0\x9F\xA4\x96\xF0\x9F\x9A\x80 emoji \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
        "\xE7\x83\xAD\xE9\x97\xA8\xE4\xB8\x93\xE5\xAE\xB6 CJK \xE3\x81\x8B\xE3\x81\xAA",
        "caf\xC3\xA9 na\xC3\xAFve \xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 "
        "\xD0\x9F\xD1\x80\xD0\xB8",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        size_t n;
        int32_t *ids = encode(tok, texts[i], strlen(texts[i]), 0, &n);
        assert_true(n > 3);
        check_decode(tok, ids, n, texts[i]);
        free(ids);
    }
    /* an incomplete character at the end of the stream becomes U+FFFD on flush */
    size_t n;
    int32_t *ids = encode(tok, "\xF0\x9F\xA4\x96", 4, 0, &n);
    assert_true(n >= 2);
    kt_detokenizer *d = NULL;
    assert_int_equal(kt_detokenizer_create(&d, tok, 0), KT_OK);
    kt_buf out = KT_BUF_INIT;
    assert_int_equal(kt_detokenizer_feed(d, ids[0], &out), KT_OK);
    assert_int_equal(out.size, 0);
    assert_int_equal(kt_detokenizer_flush(d, &out), KT_OK);
    assert_string_equal(out.ptr, "\xEF\xBF\xBD");
    kt_buf_dispose(&out);
    kt_detokenizer_free(d);
    free(ids);
    kt_tokenizer_free(tok);
}

/* Kimi's tiktoken.model: ids as tiktoken (the library tokenization_kimi.py
 * runs) gives them, with Kimi's split pattern; see make_reference.py. */
static void test_tiktoken_kimi(void **state)
{
    (void)state;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tiktoken_kimi", test_data());
    snprintf(path, sizeof path, "%s/reference.json", dir);
    cJSON *ref = read_json(path);
    if (!ref)
        skip();
    kt_tokenizer *tok = NULL;
    kt_status st = kt_tokenizer_open(&tok, dir, NULL);
    if (st < 0)
        fprintf(stderr, "%s\n", kt_last_error());
    assert_int_equal(st, KT_OK);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases")) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        size_t n;
        int32_t *ids = encode(tok, text, strlen(text), KT_ENCODE_PARSE_SPECIAL, &n);
        assert_ids(cJSON_GetObjectItem(c, "ids"), ids, n, text);
        check_decode(tok, ids, n, text);
        free(ids);
    }
    const cJSON *sp = cJSON_GetObjectItem(ref, "specials");
    cJSON_ArrayForEach(c, sp) {
        int32_t id = -1;
        assert_int_equal(kt_tokenizer_token_id(tok, c->string, strlen(c->string), &id), KT_OK);
        assert_int_equal(id, (int32_t)c->valuedouble);
        assert_true(kt_tokenizer_token_attrs(tok, id) & KT_TOKEN_ATTR_SPECIAL);
    }
    assert_int_equal(kt_tokenizer_special_id(tok, KT_SPECIAL_BOS),
                     (int32_t)cJSON_GetObjectItem(ref, "bos_id")->valuedouble);
    kt_tokenizer_free(tok);
    cJSON_Delete(ref);
}

/* Small tokenizers trained with Hugging Face tokenizers for the pipeline
 * pieces the fixtures lack (tokenizer_synth/make_reference.py): ids with and
 * without special tokens, decoded text with and without skip_special. */
static void test_synthetic_pipelines(void **state)
{
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer_synth/reference.json", test_data());
    cJSON *ref = read_json(path);
    assert_non_null(ref);
    const cJSON *t;
    int n_tok = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(ref, "tokenizers_cases")) {
        const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
        snprintf(path, sizeof path, "%s/tokenizer_synth/%s/tokenizer.json", test_data(), name);
        kt_tokenizer *tok = NULL;
        kt_status st = kt_tokenizer_open(&tok, path, NULL);
        if (st < 0)
            fprintf(stderr, "%s: %s\n", name, kt_last_error());
        assert_int_equal(st, KT_OK);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(t, "cases")) {
            const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
            char what[256];
            snprintf(what, sizeof what, "%s: \"%s\"", name, text);
            size_t n;
            int32_t *ids = encode(tok, text, strlen(text), KT_ENCODE_PARSE_SPECIAL, &n);
            assert_ids(cJSON_GetObjectItem(c, "ids"), ids, n, what);
            kt_buf out = KT_BUF_INIT;
            assert_int_equal(kt_tokenizer_decode(tok, ids, n, 0, &out), KT_OK);
            const char *want = cJSON_GetObjectItem(c, "decoded")->valuestring;
            if (strcmp(out.ptr, want))
                fprintf(stderr, "%s: decoded [%s], want [%s]\n", what, out.ptr, want);
            assert_string_equal(out.ptr, want);
            kt_buf_dispose(&out);
            check_stream(tok, ids, n, want, strlen(want));
            free(ids);
            ids = encode(tok, text, strlen(text),
                         KT_ENCODE_PARSE_SPECIAL | KT_ENCODE_ADD_SPECIAL, &n);
            assert_ids(cJSON_GetObjectItem(c, "ids_special"), ids, n, what);
            assert_int_equal(kt_tokenizer_decode(tok, ids, n, KT_DECODE_SKIP_SPECIAL, &out),
                             KT_OK);
            want = cJSON_GetObjectItem(c, "decoded_skip")->valuestring;
            if (strcmp(out.ptr, want))
                fprintf(stderr, "%s: decoded (skip) [%s], want [%s]\n", what, out.ptr, want);
            assert_string_equal(out.ptr, want);
            kt_buf_dispose(&out);
            free(ids);
        }
        kt_tokenizer_free(tok);
        n_tok++;
    }
    assert_int_equal(n_tok, 5);
    cJSON_Delete(ref);
}

/* NFC/NFD/NFKC/NFKD and lowercase against Python's unicodedata on strings
 * built from the hard cases (tokenizer_synth/make_normalization.py). */
static void test_unicode_normalization(void **state)
{
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer_synth/normalization.json", test_data());
    cJSON *ref = read_json(path);
    assert_non_null(ref);
    static const char *const keys[] = {"nfc", "nfd", "nfkc", "nfkd"};
    static const kt__unorm forms[] = {KT__NFC, KT__NFD, KT__NFKC, KT__NFKD};
    const cJSON *c;
    int bad = 0, n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases")) {
        const char *s = cJSON_GetObjectItem(c, "s")->valuestring;
        for (int k = 0; k < 5; k++) {
            kt_buf out = KT_BUF_INIT;
            const char *want;
            if (k < 4) {
                assert_int_equal(kt__unicode_normalize(forms[k], s, strlen(s), &out), KT_OK);
                want = cJSON_GetObjectItem(c, keys[k])->valuestring;
            } else {
                assert_int_equal(kt__unicode_lower(s, strlen(s), &out), KT_OK);
                want = cJSON_GetObjectItem(c, "lower")->valuestring;
            }
            if (out.size != strlen(want) || memcmp(out.ptr, want, out.size)) {
                if (bad++ < 10) {
                    fprintf(stderr, "%s of [%s]: got [%.*s] want [%s]\n",
                            k < 4 ? keys[k] : "lower", s, (int)out.size, out.ptr, want);
                }
            }
            kt_buf_dispose(&out);
            n++;
        }
    }
    assert_true(n >= 3000);
    /* characters newer than tokenizers' Unicode data, as tokenizers normalizes them */
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "hf_cases")) {
        const char *s = cJSON_GetObjectItem(c, "s")->valuestring;
        for (int k = 0; k < 5; k++) {
            kt_buf out = KT_BUF_INIT, tmp = KT_BUF_INIT;
            const char *want;
            if (k < 4) {
                assert_int_equal(kt__unicode_normalize(forms[k], s, strlen(s), &out), KT_OK);
                want = cJSON_GetObjectItem(c, keys[k])->valuestring;
            } else {
                assert_int_equal(kt__unicode_normalize(KT__NFD, s, strlen(s), &tmp), KT_OK);
                assert_int_equal(kt__unicode_strip_marks(tmp.ptr, tmp.size, &out), KT_OK);
                want = cJSON_GetObjectItem(c, "strip")->valuestring;
            }
            if (out.size != strlen(want) || memcmp(out.ptr ? out.ptr : "", want, out.size)) {
                if (bad++ < 10)
                    fprintf(stderr, "hf %s of [%s]: got [%.*s] want [%s]\n",
                            k < 4 ? keys[k] : "strip", s, (int)out.size, out.ptr, want);
            }
            kt_buf_dispose(&out);
            kt_buf_dispose(&tmp);
            n++;
        }
    }
    assert_int_equal(bad, 0);
    cJSON_Delete(ref);
}

/* tokenizer_config.json shapes (AddedToken objects, add_bos_token that
 * transformers 5 ignores, named template lists) against AutoTokenizer
 * (tokenizer_synth/make_config_reference.py). */
static void test_config_shapes(void **state)
{
    (void)state;
    char path[1200], dir[1024];
    snprintf(path, sizeof path, "%s/tokenizer_synth/config_reference.json", test_data());
    snprintf(dir, sizeof dir, "%s/tokenizer_synth/with_config", test_data());
    cJSON *ref = read_json(path);
    assert_non_null(ref);
    kt_tokenizer *tok = NULL;
    assert_int_equal(kt_tokenizer_open(&tok, dir, NULL), KT_OK);
    static const char *const roles[] = {"bos", "eos", "pad", "unk"};
    static const kt_special_token which[] = {KT_SPECIAL_BOS, KT_SPECIAL_EOS, KT_SPECIAL_PAD,
                                             KT_SPECIAL_UNK};
    for (int k = 0; k < 4; k++) {
        const cJSON *r = cJSON_GetObjectItem(ref, roles[k]);
        const cJSON *text = cJSON_GetArrayItem(r, 0), *id = cJSON_GetArrayItem(r, 1);
        if (cJSON_IsNull(text)) {
            assert_null(kt_tokenizer_special_text(tok, which[k]));
            assert_int_equal(kt_tokenizer_special_id(tok, which[k]), -1);
        } else {
            assert_string_equal(kt_tokenizer_special_text(tok, which[k]), text->valuestring);
            assert_int_equal(kt_tokenizer_special_id(tok, which[k]), (int)id->valuedouble);
        }
    }
    const cJSON *names = cJSON_GetObjectItem(ref, "templates"), *c;
    assert_int_equal(kt_tokenizer_chat_template_count(tok), cJSON_GetArraySize(names));
    cJSON_ArrayForEach(c, names) assert_non_null(kt_tokenizer_chat_template(tok, c->valuestring));
    assert_non_null(strstr(kt_tokenizer_chat_template(tok, "tool_use"), "[TOOLS]"));
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases")) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        size_t n;
        int32_t *ids = encode(tok, text, strlen(text), KT_ENCODE_PARSE_SPECIAL, &n);
        assert_ids(cJSON_GetObjectItem(c, "ids"), ids, n, text);
        kt_buf out = KT_BUF_INIT;
        assert_int_equal(kt_tokenizer_decode(tok, ids, n, 0, &out), KT_OK);
        assert_string_equal(out.ptr, cJSON_GetObjectItem(c, "decoded")->valuestring);
        kt_buf_dispose(&out);
        free(ids);
        ids = encode(tok, text, strlen(text), KT_ENCODE_PARSE_SPECIAL | KT_ENCODE_ADD_SPECIAL, &n);
        assert_ids(cJSON_GetObjectItem(c, "ids_special"), ids, n, text);
        assert_int_equal(kt_tokenizer_decode(tok, ids, n, KT_DECODE_SKIP_SPECIAL, &out), KT_OK);
        assert_string_equal(out.ptr, cJSON_GetObjectItem(c, "decoded_skip")->valuestring);
        kt_buf_dispose(&out);
        free(ids);
    }
    assert_int_equal(kt_tokenizer_adds_bos(tok), 1);
    kt_tokenizer_free(tok);
    cJSON_Delete(ref);
}

/* One tokenizer, several threads encoding and decoding at once (K26). */
typedef struct thread_job {
    const kt_tokenizer *tok;
    const char *text;
    size_t len;
    const int32_t *want;
    size_t n_want;
    int ok;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->ok = 1;
    int32_t *ids = malloc((j->len + 16) * sizeof *ids);
    for (int rep = 0; rep < 8 && j->ok; rep++) {
        size_t n = 0;
        if (kt_tokenizer_encode(j->tok, j->text, j->len, KT_ENCODE_PARSE_SPECIAL, ids, j->len + 16,
                                &n) != KT_OK || n != j->n_want ||
            memcmp(ids, j->want, n * sizeof *ids))
            j->ok = 0;
        kt_buf out = KT_BUF_INIT;
        if (kt_tokenizer_decode(j->tok, ids, n, 0, &out) != KT_OK || out.size != j->len ||
            memcmp(out.ptr, j->text, j->len))
            j->ok = 0;
        kt_buf_dispose(&out);
    }
    free(ids);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/models/kimi_k2_demo", test_data());
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    kt_tokenizer *tok = NULL;
    assert_int_equal(kt_tokenizer_open(&tok, dir, NULL), KT_OK);
    static int32_t held[4096];
    long hn = safetensors_i32(path, "heldout_ids", held, 4096);
    assert_true(hn > 100);
    kt_buf text = KT_BUF_INIT;
    assert_int_equal(kt_tokenizer_decode(tok, held, (size_t)hn - 1, 0, &text), KT_OK);
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){tok, text.ptr, text.size, held, (size_t)hn - 1, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].ok);
    }
    kt_buf_dispose(&text);
    kt_tokenizer_free(tok);
}

/* ---- bad files ---------------------------------------------------------- */

static char tmpdir[256];

static void write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Opening a tokenizer.json with `body` fails with `want`, and the message
 * names the file and contains `needle`. */
static void expect_bad(const char *body, kt_status want, const char *needle)
{
    write_file("tokenizer.json", body);
    kt_tokenizer *tok = (kt_tokenizer *)1;
    kt_status st = kt_tokenizer_open(&tok, tmpdir, NULL);
    if (st != want || !strstr(kt_last_error(), "tokenizer.json") ||
        !strstr(kt_last_error(), needle))
        fprintf(stderr, "got %s: %s (want %s, '%s')\n", kt_status_str(st), kt_last_error(),
                kt_status_str(want), needle);
    assert_int_equal(st, want);
    assert_null(tok);
    assert_non_null(strstr(kt_last_error(), "tokenizer.json"));
    assert_non_null(strstr(kt_last_error(), needle));
}

#define MODEL_OK "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, " \
                 "\"merges\": [\"a b\"]}"

static void test_bad_files(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kt_tok_test_%d", (int)getpid());
    mkdir(tmpdir, 0700);
    kt_tokenizer *tok = NULL;
    assert_int_equal(kt_tokenizer_open(&tok, tmpdir, NULL), KT_ERR_NOT_FOUND);

    /* a minimal valid one first */
    write_file("tokenizer.json", "{" MODEL_OK "}");
    assert_int_equal(kt_tokenizer_open(&tok, tmpdir, NULL), KT_OK);
    size_t n;
    int32_t *ids = encode(tok, "abab", 4, 0, &n);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 2);
    free(ids);
    kt_tokenizer_free(tok);

    expect_bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {", KT_ERR_FORMAT, "malformed JSON");
    expect_bad("[1, 2]", KT_ERR_FORMAT, "model");
    expect_bad("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", KT_ERR_UNSUPPORTED,
               "Unigram");
    expect_bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}}",
               KT_ERR_FORMAT, "vocab");
    expect_bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, \"merges\": []}}",
               KT_ERR_FORMAT, "2^24");
    expect_bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a c\"]}}",
               KT_ERR_FORMAT, "not in the vocabulary");
    expect_bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"abc\"]}}",
               KT_ERR_FORMAT, "merges[0]");
    expect_bad("{" MODEL_OK ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
               "{\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}}",
               KT_ERR_FORMAT, "bad regex");
    expect_bad("{" MODEL_OK ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
               "{\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}}",
               KT_ERR_FORMAT, "Sideways");
    expect_bad("{" MODEL_OK ", \"normalizer\": {\"type\": \"Precompiled\"}}", KT_ERR_UNSUPPORTED,
               "Precompiled");
    expect_bad("{" MODEL_OK ", \"decoder\": {\"type\": \"WordPiece\"}}", KT_ERR_UNSUPPORTED,
               "WordPiece");
    expect_bad("{" MODEL_OK ", \"added_tokens\": [{\"id\": \"x\"}]}", KT_ERR_FORMAT,
               "added_tokens[0]");

    /* a bad tokenizer_config.json is named too */
    write_file("tokenizer.json", "{" MODEL_OK "}");
    write_file("tokenizer_config.json", "{\"chat_template\": 5}");
    assert_int_equal(kt_tokenizer_open(&tok, tmpdir, NULL), KT_ERR_FORMAT);
    assert_non_null(strstr(kt_last_error(), "tokenizer_config.json"));

    /* tiktoken: a bad line */
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpdir);
    unlink(path);
    write_file("tokenizer_config.json", "{}");
    write_file("tiktoken.model", "YQ== 0\nYg== 1\n!!notbase64 2\n");
    assert_int_equal(kt_tokenizer_open(&tok, tmpdir, NULL), KT_ERR_FORMAT);
    assert_non_null(strstr(kt_last_error(), "line 3"));

    const char *names[] = {"tiktoken.model", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
}

/* One test function over several data sets, each listed under its own test name. */
#define DATA_TEST(name, fn, data) {name, fn, NULL, NULL, (void *)(data)}

int main(void)
{
    const struct CMUnitTest tests[] = {
        DATA_TEST("test_fixture_deepseek_v3", test_fixture, "deepseek_v3_tiny"),
        DATA_TEST("test_fixture_qwen3_moe", test_fixture, "qwen3_moe_tiny"),
        DATA_TEST("test_fixture_mixtral", test_fixture, "mixtral_tiny"),
        DATA_TEST("test_fixture_minimax_m2", test_fixture, "minimax_m2_tiny"),
        DATA_TEST("test_fixture_gpt_oss", test_fixture, "gpt_oss_tiny"),
        DATA_TEST("test_demo_kimi_k2", test_demo, "kimi_k2_demo"),
        DATA_TEST("test_demo_qwen3_moe", test_demo, "qwen3_moe_demo"),
        cmocka_unit_test(test_specials_and_template),
        cmocka_unit_test(test_stream_multibyte),
        cmocka_unit_test(test_tiktoken_kimi),
        cmocka_unit_test(test_synthetic_pipelines),
        cmocka_unit_test(test_unicode_normalization),
        cmocka_unit_test(test_config_shapes),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
