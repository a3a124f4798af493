/*
 * A tokenizer from a GGUF file's metadata (tokenizer.ggml.*), so a GGUF-only
 * model can be tokenized: the byte-level BPE of `tokenizer.ggml.model` =
 * "gpt2" (tokens, merges, token_type, pre) is rewritten as the tokenizer.json
 * it stands for and parsed by the ordinary loader. `pre` names the
 * pre-tokenizer as llama.cpp does; the known ones map to the split regexes of
 * their Hugging Face tokenizers. SentencePiece ("llama") vocabularies are not
 * supported yet.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/gguf.h"
#include "kt/tokenizer.h"
#include "kt_internal.h"
#include "tokenizer_internal.h"

kt_status kt__tokenizer_from_gguf(kt_tokenizer **out, const char *path);

/* GGUF token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte. */
#define TT_CONTROL 3
#define TT_USER 4

/* Split regexes of the pre-tokenizers a GGUF's `pre` names. */
static const struct pre_entry {
    const char *name;
    const char *regex[3]; /* applied in order, each Isolated */
    bool nfc;
} pres[] = {
    {"gpt2", {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
     false},
    {"qwen2",
     {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
      "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     true},
    {"llama-bpe",
     {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
      "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false},
    {"kimi-k2",
     {"\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     true},
};

static const struct pre_entry *find_pre(const char *name)
{
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++)
        if (!strcmp(pres[i].name, name))
            return &pres[i];
    if (!strcmp(name, "llama3") || !strcmp(name, "default"))
        return find_pre(!strcmp(name, "default") ? "gpt2" : "llama-bpe");
    return NULL;
}

static cJSON *byte_level(bool as_decoder)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddBoolToObject(b, "add_prefix_space", as_decoder);
    cJSON_AddBoolToObject(b, "trim_offsets", true);
    cJSON_AddBoolToObject(b, "use_regex", as_decoder);
    return b;
}

/* *text = the tokenizer.json the metadata describes (cJSON_free it). */
static kt_status gguf_to_json(const kt_gguf *g, const char *path, char **text)
{
    kt_status st;
    const char *model = NULL, *pre_name = "default";
    if ((st = kt__gguf_get_str(g, "tokenizer.ggml.model", &model)) < 0)
        return st;
    if (strcmp(model, "gpt2")) {
        return kt__error(KT_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%s': only byte-level "
                         "BPE ('gpt2') vocabularies are supported", path, model);
    }
    if (kt__gguf_find(g, "tokenizer.ggml.pre") &&
        (st = kt__gguf_get_str(g, "tokenizer.ggml.pre", &pre_name)) < 0)
        return st;
    const struct pre_entry *pre = find_pre(pre_name);
    if (!pre) {
        return kt__error(KT_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not one libkt "
                         "knows (gpt2, qwen2, llama-bpe, kimi-k2)", path, pre_name);
    }
    const kt_gguf_value *toks = NULL, *merges = NULL, *types = NULL;
    if ((st = kt__gguf_get_array(g, "tokenizer.ggml.tokens", KT_GGUF_STRING, &toks)) < 0 ||
        (st = kt__gguf_get_array(g, "tokenizer.ggml.merges", KT_GGUF_STRING, &merges)) < 0)
        return st;
    if (kt__gguf_find(g, "tokenizer.ggml.token_type") &&
        (st = kt__gguf_get_array(g, "tokenizer.ggml.token_type", KT_GGUF_I32, &types)) < 0)
        return st;
    if (types && types->v.arr.n != toks->v.arr.n) {
        return kt__error(KT_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries, "
                         "tokens %llu", path, (unsigned long long)types->v.arr.n,
                         (unsigned long long)toks->v.arr.n);
    }
    const kt_gguf_str *tv = toks->v.arr.data, *mv = merges->v.arr.data;
    const int32_t *tt = types ? types->v.arr.data : NULL;

    cJSON *root = cJSON_CreateObject();
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    if (pre->nfc) {
        cJSON *n = cJSON_AddObjectToObject(root, "normalizer");
        cJSON_AddStringToObject(n, "type", "NFC");
    }
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "Sequence");
    cJSON *seq = cJSON_AddArrayToObject(pt, "pretokenizers");
    for (int i = 0; i < 3 && pre->regex[i]; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "type", "Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(s, "pattern"), "Regex", pre->regex[i]);
        cJSON_AddStringToObject(s, "behavior", "Isolated");
        cJSON_AddBoolToObject(s, "invert", false);
        cJSON_AddItemToArray(seq, s);
    }
    cJSON_AddItemToArray(seq, byte_level(false));
    cJSON_AddItemToObject(root, "decoder", byte_level(true));
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddBoolToObject(m, "byte_fallback", false);
    cJSON *vocab = cJSON_AddObjectToObject(m, "vocab");
    cJSON *ml = cJSON_AddArrayToObject(m, "merges");
    for (uint64_t i = 0; i < toks->v.arr.n; i++) {
        int32_t type = tt ? tt[i] : 1;
        if (type == TT_CONTROL || type == TT_USER) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", tv[i].ptr);
            cJSON_AddBoolToObject(a, "single_word", false);
            cJSON_AddBoolToObject(a, "lstrip", false);
            cJSON_AddBoolToObject(a, "rstrip", false);
            cJSON_AddBoolToObject(a, "normalized", type == TT_USER);
            cJSON_AddBoolToObject(a, "special", type == TT_CONTROL);
            cJSON_AddItemToArray(added, a);
        } else {
            cJSON_AddNumberToObject(vocab, tv[i].ptr, (double)i);
        }
    }
    for (uint64_t i = 0; i < merges->v.arr.n; i++) {
        const char *s = mv[i].ptr, *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1]) {
            cJSON_Delete(root);
            return kt__error(KT_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] '%s' is not 'a b'",
                             path, (unsigned long long)i, s);
        }
        cJSON *pair = cJSON_CreateArray();
        char left[512];
        size_t ln = (size_t)(sp - s) < sizeof left - 1 ? (size_t)(sp - s) : sizeof left - 1;
        memcpy(left, s, ln);
        left[ln] = '\0';
        cJSON_AddItemToArray(pair, cJSON_CreateString(left));
        cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
        cJSON_AddItemToArray(ml, pair);
    }
    *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!*text)
        return kt__error(KT_ERR_NOMEM, "%s: out of memory for the tokenizer", path);
    return KT_OK;
}

kt_status kt__tokenizer_from_gguf(kt_tokenizer **out, const char *path)
{
    kt_gguf *g = NULL;
    kt_status st = kt__gguf_open_file(&g, path);
    if (st < 0)
        return st;
    char *json = NULL;
    if ((st = gguf_to_json(g, path, &json)) < 0) {
        kt__gguf_close(g);
        return st;
    }
    st = kt__tokenizer_parse(out, json, strlen(json), false, path);
    cJSON_free(json);
    kt__gguf_close(g);
    return st;
}
