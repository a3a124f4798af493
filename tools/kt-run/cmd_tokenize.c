/* kt-run tokenize: text -> token ids as JSON (and back with --decode), with
 * the model's own tokenizer. Public API only. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kt/kt.h>

#include "commands.h"
#include "opt.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run tokenize MODEL TEXT [--add-special] [--no-parse-special] [--pieces]\n"
            "       kt-run tokenize MODEL --decode 1,2,3 [--skip-special]\n"
            "\n"
            "Prints the token ids of TEXT as a JSON array, as the model's Hugging Face\n"
            "tokenizer gives them (TEXT '-' reads stdin). With --decode, prints the text of\n"
            "the ids exactly, with no added newline.\n"
            "\n"
            "  MODEL               a model directory (tokenizer.json or tiktoken.model, plus\n"
            "                      tokenizer_config.json) or a tokenizer.json file\n"
            "  --add-special       add bos/eos as the tokenizer config says\n"
            "                      (add_special_tokens=True)\n"
            "  --no-parse-special  encode special-token strings in TEXT as plain text\n"
            "  --pieces            print [{\"id\": N, \"piece\": \"...\"}, ...] instead\n"
            "  --decode IDS        comma- or space-separated ids to decode\n"
            "  --skip-special      leave special tokens out of --decode's text\n");
}

static char *read_stdin(size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    *len = n;
    return buf;
}

/* Writes s as a JSON string; bytes that are not UTF-8 become U+FFFD. */
static void json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '\r') {
            fputs("\\r", f);
        } else if (c == '\t') {
            fputs("\\t", f);
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(f, "\\u%04x", c);
        } else if (c < 0x80) {
            fputc(c, f);
        } else {
            size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
            bool ok = len && c < 0xF5 && i + len <= n;
            for (size_t k = 1; ok && k < len; k++)
                ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
            if (ok) {
                fwrite(s + i, 1, len, f);
                i += len - 1;
            } else {
                fputs("\\ufffd", f);
            }
        }
    }
    fputc('"', f);
}

static int parse_ids(const char *text, int32_t **ids, size_t *n)
{
    size_t cap = 64;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids)
        return -1;
    const char *p = text;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '[' || *p == ']')
            p++;
        if (!*p)
            break;
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "kt-run tokenize: --decode: '%.20s' is not a token id\n", p);
            return -1;
        }
        if (*n == cap) {
            int32_t *nv = realloc(*ids, cap * 2 * sizeof *nv);
            if (!nv)
                return -1;
            *ids = nv;
            cap *= 2;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *decode = NULL;
    bool add_special = false, parse_special = true, pieces = false, skip_special = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool bad = false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (opt_match(argc, argv, &i, "--decode", true, &decode, &bad)) {
        } else if (opt_match(argc, argv, &i, "--add-special", false, &v, &bad)) {
            add_special = true;
        } else if (opt_match(argc, argv, &i, "--no-parse-special", false, &v, &bad)) {
            parse_special = false;
        } else if (opt_match(argc, argv, &i, "--skip-special", false, &v, &bad)) {
            skip_special = true;
        } else if (opt_match(argc, argv, &i, "--pieces", false, &v, &bad)) {
            pieces = true;
        } else if (argv[i][0] == '-' && strcmp(argv[i], "-")) {
            fprintf(stderr, "kt-run tokenize: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!model) {
            model = argv[i];
        } else if (!text) {
            text = argv[i];
        } else {
            fprintf(stderr, "kt-run tokenize: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!model || (!text && !decode) || (text && decode)) {
        usage(stderr);
        return 2;
    }

    kt_tokenizer *tok = NULL;
    if (kt_tokenizer_open(&tok, model, NULL) < 0) {
        fprintf(stderr, "kt-run tokenize: %s\n", kt_last_error());
        return 1;
    }
    int rc = 0;
    int32_t *ids = NULL;
    char *input = NULL;
    if (decode) {
        size_t n = 0;
        kt_buf out = KT_BUF_INIT;
        if (parse_ids(decode, &ids, &n) < 0) {
            rc = 2;
        } else if (kt_tokenizer_decode(tok, ids, n, skip_special ? KT_DECODE_SKIP_SPECIAL : 0,
                                       &out) < 0) {
            fprintf(stderr, "kt-run tokenize: %s\n", kt_last_error());
            rc = 1;
        } else {
            fwrite(out.ptr, 1, out.size, stdout);
        }
        kt_buf_dispose(&out);
    } else {
        size_t len = strlen(text);
        if (!strcmp(text, "-")) {
            input = read_stdin(&len);
            text = input;
        }
        uint32_t flags = (add_special ? KT_ENCODE_ADD_SPECIAL : 0) |
                         (parse_special ? KT_ENCODE_PARSE_SPECIAL : 0);
        size_t n = 0;
        kt_status st = text ? kt_tokenizer_encode(tok, text, len, flags, NULL, 0, &n)
                            : KT_ERR_NOMEM;
        if (st == KT_ERR_LIMIT) {
            ids = malloc((n ? n : 1) * sizeof *ids);
            st = ids ? kt_tokenizer_encode(tok, text, len, flags, ids, n, &n) : KT_ERR_NOMEM;
        }
        if (st < 0) {
            fprintf(stderr, "kt-run tokenize: %s\n", kt_last_error());
            rc = 1;
        } else {
            putchar('[');
            for (size_t i = 0; i < n; i++) {
                if (!pieces) {
                    printf(i ? ", %d" : "%d", ids[i]);
                    continue;
                }
                const char *piece = kt_tokenizer_token_text(tok, ids[i]);
                printf("%s{\"id\": %d, \"piece\": ", i ? ",\n " : "", ids[i]);
                json_string(stdout, piece ? piece : "", piece ? strlen(piece) : 0);
                putchar('}');
            }
            puts("]");
        }
    }
    free(ids);
    free(input);
    kt_tokenizer_free(tok);
    return rc;
}
