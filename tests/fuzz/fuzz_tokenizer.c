/* libFuzzer harness: the tokenizer (lib/text/tokenizer*.c).
 * The first input byte picks what the rest is:
 *   0-127   text encoded (parse_special on/off, add_special on/off) by a
 *           fixture tokenizer, its ids decoded at once and streamed, and the
 *           input bytes read as ids and decoded;
 *   128-223 a tokenizer.json parsed from memory, then a fixed text encoded
 *           and decoded with it;
 *   224-255 a tiktoken.model parsed from memory, the same.
 * The fixture tokenizers are opened from $KT_FUZZ_TOKENIZERS (default: the
 * source tree's tests/data): two fixtures, the synthetic pipelines of
 * tokenizer_synth/ and the Kimi tiktoken one.
 * Build: clang -fsanitize=fuzzer,address,undefined (meson -Dfuzz=enabled).
 * Seeds: tests/fuzz/corpus/tokenizer/. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt/kt.h"
#include "text/tokenizer_internal.h"

static kt_tokenizer *fixtures[8];
static size_t n_fixtures;

static void open_fixtures(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    const char *root = getenv("KT_FUZZ_TOKENIZERS");
    if (!root)
        root = KT_SOURCE_ROOT "/tests/data";
    static const char *const defaults[] = {
        "tests/data/fixtures/deepseek_v3_tiny",
        "tests/data/fixtures/qwen3_moe_tiny",
        "tests/data/tokenizer_synth/llama_like/tokenizer.json",
        "tests/data/tokenizer_synth/metaspace/tokenizer.json",
        "tests/data/tokenizer_synth/bytelevel_digits/tokenizer.json",
        "tests/data/tokenizer_synth/wordish/tokenizer.json",
        "tests/data/tokenizer_synth/whitespace_split/tokenizer.json",
        "tests/data/tiktoken_kimi",
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", root, defaults[i] + strlen("tests/data/"));
        kt_tokenizer *t = NULL;
        if (kt_tokenizer_open(&t, path, NULL) == KT_OK)
            fixtures[n_fixtures++] = t;
    }
}

/* Encodes, decodes at once and streamed; everything must succeed or fail cleanly. */
static void exercise(const kt_tokenizer *tok, const char *text, size_t len, uint32_t flags)
{
    size_t n = 0;
    kt_status st = kt_tokenizer_encode(tok, text, len, flags, NULL, 0, &n);
    if (st != KT_OK && st != KT_ERR_LIMIT)
        return;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return;
    if (kt_tokenizer_encode(tok, text, len, flags, ids, n, &n) == KT_OK) {
        kt_buf out = KT_BUF_INIT;
        (void)kt_tokenizer_decode(tok, ids, n, 0, &out);
        out.size = 0;
        (void)kt_tokenizer_decode(tok, ids, n, KT_DECODE_SKIP_SPECIAL, &out);
        kt_detokenizer *d = NULL;
        if (kt_detokenizer_create(&d, tok, 0) == KT_OK) {
            for (size_t i = 0; i < n; i++)
                (void)kt_detokenizer_feed(d, ids[i], &out);
            (void)kt_detokenizer_flush(d, &out);
            kt_detokenizer_free(d);
        }
        kt_buf_dispose(&out);
        char piece[64];
        size_t plen;
        for (size_t i = 0; i < n && i < 8; i++)
            (void)kt_tokenizer_token_to_piece(tok, ids[i], piece, sizeof piece, &plen);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    if (mode < 128) {
        open_fixtures();
        if (!n_fixtures)
            return 0;
        const kt_tokenizer *tok = fixtures[mode % n_fixtures];
        exercise(tok, rest, n, (uint32_t)(mode >> 4) & 3u);
        /* the input as ids, including out-of-range and negative ones */
        size_t n_ids = n / 4;
        if (n_ids) {
            int32_t *ids = malloc(n_ids * sizeof *ids);
            if (ids) {
                memcpy(ids, rest, n_ids * sizeof *ids);
                for (size_t i = 0; i < n_ids; i++)
                    if (mode & 8)
                        ids[i] = (int32_t)((uint32_t)ids[i] % 600u);
                kt_buf out = KT_BUF_INIT;
                (void)kt_tokenizer_decode(tok, ids, n_ids, 0, &out);
                kt_detokenizer *d = NULL;
                if (kt_detokenizer_create(&d, tok, KT_DECODE_SKIP_SPECIAL) == KT_OK) {
                    for (size_t i = 0; i < n_ids; i++)
                        (void)kt_detokenizer_feed(d, ids[i], &out);
                    (void)kt_detokenizer_flush(d, &out);
                    kt_detokenizer_free(d);
                }
                kt_buf_dispose(&out);
                free(ids);
            }
        }
        return 0;
    }
    kt_tokenizer *tok = NULL;
    if (kt__tokenizer_parse(&tok, rest, n, mode >= 224, "fuzz/tokenizer") == KT_OK) {
        static const char text[] = "Hello world! 12345 caf\xC3\xA9 \xE7\x83\xAD\xE9\x97\xA8 "
                                   "\xF0\x9F\xA4\x96 <s> [BOS] \t\n  x";
        exercise(tok, text, sizeof text - 1, KT_ENCODE_PARSE_SPECIAL | KT_ENCODE_ADD_SPECIAL);
        exercise(tok, rest, n < 256 ? n : 256, 0);
        kt_tokenizer_free(tok);
    }
    return 0;
}
