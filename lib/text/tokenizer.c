/*
 * Loading tokenizers (tokenizer.json, Kimi's tiktoken.model,
 * tokenizer_config.json, chat templates) and the public kt_tokenizer API.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "tokenizer_internal.h"

/* Kimi's split pattern (tokenization_kimi.py pat_str). The original writes
 * the letter classes as intersections `[\p{Lu}...\p{M}&&[^\p{Han}]]`, which
 * PCRE2 10.42 lacks; each becomes a Han lookahead before the class. */
#define KIMI_NOT_HAN "(?!\\p{Han})"
static const char kimi_pattern[] =
    "[\\p{Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:" KIMI_NOT_HAN "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])*"
    "(?:" KIMI_NOT_HAN "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?(?:" KIMI_NOT_HAN "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])+"
    "(?:" KIMI_NOT_HAN "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Largest token id accepted (real vocabularies stay below 2^18); bounds the
 * by-id table a hostile file could make us allocate. */
#define KT_TOKEN_ID_MAX ((1 << 24) - 1)
/* tokenization_kimi.py reserves this many ids after the ranks for special tokens. */
#define KIMI_RESERVED_SPECIAL 256

/* GPT-2's split, used by the ByteLevel pre-tokenizer with use_regex. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- arena and string map ----------------------------------------------- */

kt_status kt__arena_add(kt__arena *a, const void *s, size_t n, uint32_t *off)
{
    if (a->size + n + 1 > UINT32_MAX)
        return kt__error(KT_ERR_LIMIT, "tokenizer strings exceed 4 GiB");
    if (a->size + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->size + n + 1)
            cap *= 2;
        char *d = kt__realloc(a->data, cap);
        if (!d)
            return KT_ERR_NOMEM;
        a->data = d;
        a->cap = cap;
    }
    *off = (uint32_t)a->size;
    if (n)
        memcpy(a->data + a->size, s, n);
    a->data[a->size + n] = '\0';
    a->size += n + 1;
    return KT_OK;
}

void kt__arena_free(kt__arena *a)
{
    kt__free(a->data);
    memset(a, 0, sizeof *a);
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static kt_status strmap_grow(kt__strmap *m, const kt__arena *arena)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint32_t *slots = kt__calloc(cap, sizeof *slots);
    if (!slots)
        return KT_ERR_NOMEM;
    for (size_t e = 0; e < m->n; e++) {
        const kt__strmap_entry *en = &m->entries[e];
        size_t i = hash_bytes(arena->data + en->off, en->len) & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)e + 1;
    }
    kt__free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return KT_OK;
}

kt_status kt__strmap_put(kt__strmap *m, const kt__arena *arena, uint32_t off, uint32_t len,
                         int32_t value)
{
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m, arena) < 0)
        return KT_ERR_NOMEM;
    const char *key = arena->data + off;
    size_t i = hash_bytes(key, len) & (m->cap - 1);
    while (m->slots[i]) {
        const kt__strmap_entry *en = &m->entries[m->slots[i] - 1];
        if (en->len == len && !memcmp(arena->data + en->off, key, len))
            return KT_OK;
        i = (i + 1) & (m->cap - 1);
    }
    kt__strmap_entry *e = kt__grow(m->entries, m->n, &m->entries_cap, sizeof *e, 1024);
    if (!e)
        return KT_ERR_NOMEM;
    m->entries = e;
    m->entries[m->n] = (kt__strmap_entry){off, len, value};
    m->slots[i] = (uint32_t)++m->n;
    return KT_OK;
}

int32_t kt__strmap_get(const kt__strmap *m, const kt__arena *arena, const char *key, size_t len)
{
    if (!m->cap)
        return -1;
    size_t i = hash_bytes(key, len) & (m->cap - 1);
    while (m->slots[i]) {
        const kt__strmap_entry *en = &m->entries[m->slots[i] - 1];
        if (en->len == len && !memcmp(arena->data + en->off, key, len))
            return en->value;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

void kt__strmap_free(kt__strmap *m)
{
    kt__free(m->slots);
    kt__free(m->entries);
    memset(m, 0, sizeof *m);
}

/* ---- files -------------------------------------------------------------- */

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Reads a whole file, NUL-terminated. */
static kt_status read_file(const char *path, char **data, size_t *size)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kt__error(errno == ENOENT ? KT_ERR_NOT_FOUND : KT_ERR_IO, "%s: cannot open: %s",
                         path, strerror(errno));
    kt_buf b = KT_BUF_INIT;
    kt_status st = KT_OK;
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && st == KT_OK) {
        if (b.size + got > ((size_t)1 << 31))
            st = kt__error(KT_ERR_LIMIT, "%s: larger than 2 GiB", path);
        else
            st = kt__buf_append(&b, chunk, got);
    }
    if (st == KT_OK && ferror(f))
        st = kt__error(KT_ERR_IO, "%s: read error", path);
    fclose(f);
    if (st == KT_OK)
        st = kt__buf_reserve(&b, 0);
    if (st < 0) {
        kt_buf_dispose(&b);
        return st;
    }
    b.ptr[b.size] = '\0';
    *data = b.ptr;
    *size = b.size;
    return KT_OK;
}

static kt_status parse_json(const char *path, const char *data, size_t size, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(data, size, &end, false);
    if (!*out) {
        size_t at = end && end >= data ? (size_t)(end - data) : 0;
        const char *err = cJSON_GetErrorPtr();
        if (err && err >= data && err <= data + size)
            at = (size_t)(err - data);
        return kt__error(KT_ERR_FORMAT, "%s: malformed JSON near byte %zu", path, at);
    }
    return KT_OK;
}

/* ---- loading helpers ---------------------------------------------------- */

typedef struct loader {
    kt_tokenizer *tok;
    const char *file; /* for messages */
    int32_t max_id;
} loader;

static const char *jstr(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *obj, const char *key, bool def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v);
    return def;
}

/* A JSON number that is an integer in [lo, hi]. */
static bool jint(const cJSON *v, double lo, double hi, int64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != (double)(int64_t)d)
        return false;
    *out = (int64_t)d;
    return true;
}

static kt_status grow_tokens(kt_tokenizer *tok, int32_t id)
{
    if ((size_t)id < tok->n_tokens)
        return KT_OK;
    size_t n = (size_t)id + 1, cap = tok->n_tokens ? tok->n_tokens : 256;
    while (cap < n)
        cap *= 2;
    kt__token *t = kt__realloc(tok->tokens, cap * sizeof *t);
    if (!t)
        return KT_ERR_NOMEM;
    memset(t + tok->n_tokens, 0, (cap - tok->n_tokens) * sizeof *t);
    tok->tokens = t;
    tok->n_tokens = cap; /* trimmed to max id + 1 at the end */
    return KT_OK;
}

/* Adds a model vocabulary entry. */
/* Room for token id, its text s[0..n) in the arena (at *off) and map[text] = id. */
static kt_status store_token_text(loader *L, kt__strmap *map, const char *s, size_t n,
                                  int32_t id, uint32_t *off)
{
    kt_tokenizer *tok = L->tok;
    kt_status st = grow_tokens(tok, id);
    if (st == KT_OK)
        st = kt__arena_add(&tok->arena, s, n, off);
    if (st == KT_OK)
        st = kt__strmap_put(map, &tok->arena, *off, (uint32_t)n, id);
    if (st == KT_OK && id > L->max_id)
        L->max_id = id;
    return st;
}

static kt_status add_vocab(loader *L, const char *s, size_t n, int32_t id)
{
    kt_tokenizer *tok = L->tok;
    uint32_t off;
    kt_status st = store_token_text(L, &tok->vocab, s, n, id, &off);
    if (st < 0)
        return st;
    kt__token *t = &tok->tokens[id];
    if (!(t->attrs & KT__TOKEN_EXISTS)) {
        t->off = off;
        t->len = (uint32_t)n;
        t->attrs = KT__TOKEN_EXISTS;
    }
    return KT_OK;
}

/* Adds an added token (first definition of a content wins). */
static kt_status add_added(loader *L, const char *content, int32_t id, bool special,
                           bool lstrip, bool rstrip, bool single_word, bool normalized)
{
    kt_tokenizer *tok = L->tok;
    size_t n = strlen(content);
    if (n == 0)
        return kt__error(KT_ERR_FORMAT, "%s: added token %d has empty content", L->file, id);
    if (kt__strmap_get(&tok->added_map, &tok->arena, content, n) >= 0)
        return KT_OK;
    kt__added *a = kt__grow(tok->added, tok->n_added, &tok->added_cap, sizeof *a, 16);
    if (!a)
        return KT_ERR_NOMEM;
    tok->added = a;
    uint32_t off;
    kt_status st = store_token_text(L, &tok->added_map, content, n, id, &off);
    if (st < 0)
        return st;
    tok->added[tok->n_added++] = (kt__added){off, (uint32_t)n, 0, 0, id,
                                             special, lstrip, rstrip, single_word, normalized};
    kt__token *t = &tok->tokens[id];
    t->off = off; /* decoding uses the added content (tokenizers: added vocabulary first) */
    t->len = (uint32_t)n;
    t->attrs = KT__TOKEN_EXISTS | KT_TOKEN_ATTR_ADDED | (special ? KT_TOKEN_ATTR_SPECIAL : 0);
    return KT_OK;
}

static kt_status parse_added_tokens(loader *L, const cJSON *arr)
{
    if (!arr || cJSON_IsNull(arr))
        return KT_OK;
    if (!cJSON_IsArray(arr))
        return kt__error(KT_ERR_FORMAT, "%s: added_tokens is not an array", L->file);
    const cJSON *t;
    size_t i = 0;
    cJSON_ArrayForEach(t, arr) {
        int64_t id;
        const char *content = jstr(t, "content");
        const cJSON *jid = cJSON_GetObjectItemCaseSensitive(t, "id");
        if (!content || !jint(jid, 0, KT_TOKEN_ID_MAX, &id))
            return kt__error(KT_ERR_FORMAT, "%s: added_tokens[%zu] needs a string content "
                             "and an id in [0, 2^24)", L->file, i);
        bool special = jbool(t, "special", false);
        kt_status st = add_added(L, content, (int32_t)id, special, jbool(t, "lstrip", false),
                                 jbool(t, "rstrip", false), jbool(t, "single_word", false),
                                 jbool(t, "normalized", !special));
        if (st < 0)
            return st;
        i++;
    }
    return KT_OK;
}

/* {"String": s} or {"Regex": r} */
static kt_status parse_pattern(loader *L, const cJSON *p, const char *what, pcre2_code **re,
                               const char **literal)
{
    const char *s = jstr(p, "String");
    if (literal)
        *literal = s;
    if (s)
        return kt__tok_regex(re, s, strlen(s), true, L->file, what);
    s = jstr(p, "Regex");
    if (s)
        return kt__tok_regex(re, s, strlen(s), false, L->file, what);
    return kt__error(KT_ERR_FORMAT, "%s: %s: pattern must be {\"String\": ...} or "
                     "{\"Regex\": ...}", L->file, what);
}

static kt_status dup_string(const char *s, char **out, size_t *len)
{
    size_t n = strlen(s);
    *out = kt__malloc(n + 1);
    if (!*out)
        return KT_ERR_NOMEM;
    memcpy(*out, s, n + 1);
    if (len)
        *len = n;
    return KT_OK;
}

/* ---- pipeline components ------------------------------------------------ */

typedef kt_status (*component_parser)(loader *L, const cJSON *n, int depth);

/* The type of a normalizer / pre_tokenizer / decoder n; *type = NULL (KT_OK) when n is absent. */
static kt_status component_type(loader *L, const cJSON *n, int depth, const char *what,
                                const char **type)
{
    *type = NULL;
    if (!n || cJSON_IsNull(n))
        return KT_OK;
    *type = jstr(n, "type");
    if (!*type || depth > 16)
        return kt__error(KT_ERR_FORMAT, "%s: %s without a type (or nested too deep)", L->file,
                         what);
    return KT_OK;
}

/* A Sequence component: each member of its list_key array parsed in order by parse. */
static kt_status parse_sequence(loader *L, const cJSON *n, int depth, const char *list_key,
                                const char *missing_list_msg, component_parser parse)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, list_key), *x;
    if (!cJSON_IsArray(list))
        return kt__error(KT_ERR_FORMAT, "%s: %s", L->file, missing_list_msg);
    cJSON_ArrayForEach(x, list) {
        kt_status st = parse(L, x, depth + 1);
        if (st < 0)
            return st;
    }
    return KT_OK;
}

/* ---- normalizers -------------------------------------------------------- */

static kt_status push_norm(kt_tokenizer *tok, kt__norm n)
{
    kt__norm *v = kt__realloc(tok->norms, (tok->n_norms + 1) * sizeof *v);
    if (!v)
        return KT_ERR_NOMEM;
    tok->norms = v;
    v[tok->n_norms++] = n;
    return KT_OK;
}

static kt_status parse_normalizer(loader *L, const cJSON *n, int depth)
{
    const char *type;
    kt_status st = component_type(L, n, depth, "normalizer", &type);
    if (!type)
        return st;
    kt__norm nm = {0};
    if (!strcmp(type, "Sequence")) {
        return parse_sequence(L, n, depth, "normalizers",
                              "normalizer Sequence without a normalizers array", parse_normalizer);
    } else if (!strcmp(type, "NFC")) {
        nm.kind = KT__NORM_NFC;
    } else if (!strcmp(type, "NFD")) {
        nm.kind = KT__NORM_NFD;
    } else if (!strcmp(type, "NFKC")) {
        nm.kind = KT__NORM_NFKC;
    } else if (!strcmp(type, "NFKD")) {
        nm.kind = KT__NORM_NFKD;
    } else if (!strcmp(type, "Lowercase")) {
        nm.kind = KT__NORM_LOWERCASE;
    } else if (!strcmp(type, "StripAccents")) {
        nm.kind = KT__NORM_STRIP_ACCENTS;
    } else if (!strcmp(type, "Strip")) {
        nm.kind = KT__NORM_STRIP;
        nm.strip_left = jbool(n, "strip_left", true);
        nm.strip_right = jbool(n, "strip_right", true);
    } else if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p)
            return kt__error(KT_ERR_FORMAT, "%s: normalizer Prepend without a prepend string",
                             L->file);
        nm.kind = KT__NORM_PREPEND;
        if (dup_string(p, &nm.content, &nm.content_len) < 0)
            return KT_ERR_NOMEM;
    } else if (!strcmp(type, "Replace")) {
        const char *c = jstr(n, "content");
        if (!c)
            return kt__error(KT_ERR_FORMAT, "%s: normalizer Replace without content", L->file);
        nm.kind = KT__NORM_REPLACE;
        st = parse_pattern(L, cJSON_GetObjectItemCaseSensitive(n, "pattern"),
                           "normalizer Replace", &nm.re, NULL);
        if (st < 0)
            return st;
        if (dup_string(c, &nm.content, &nm.content_len) < 0) {
            pcre2_code_free(nm.re);
            return KT_ERR_NOMEM;
        }
    } else {
        return kt__error(KT_ERR_UNSUPPORTED, "%s: normalizer type '%s' is not supported",
                         L->file, type);
    }
    st = push_norm(L->tok, nm);
    if (st < 0) {
        kt__free(nm.content);
        pcre2_code_free(nm.re);
    }
    return st;
}

/* ---- pre-tokenizers ----------------------------------------------------- */

static kt_status push_pretok(kt_tokenizer *tok, kt__pretok p)
{
    kt__pretok *v = kt__realloc(tok->pretoks, (tok->n_pretoks + 1) * sizeof *v);
    if (!v) {
        pcre2_code_free(p.re);
        return KT_ERR_NOMEM;
    }
    tok->pretoks = v;
    v[tok->n_pretoks++] = p;
    return KT_OK;
}

static kt_status parse_behavior(loader *L, const cJSON *n, kt__split_behavior def,
                                kt__split_behavior *out)
{
    const char *b = jstr(n, "behavior");
    static const struct { const char *name; kt__split_behavior b; } names[] = {
        {"Removed", KT__SPLIT_REMOVED},
        {"Isolated", KT__SPLIT_ISOLATED},
        {"MergedWithPrevious", KT__SPLIT_MERGED_WITH_PREVIOUS},
        {"MergedWithNext", KT__SPLIT_MERGED_WITH_NEXT},
        {"Contiguous", KT__SPLIT_CONTIGUOUS},
    };
    *out = def;
    if (!b)
        return KT_OK;
    for (size_t i = 0; i < KT_ARRAY_LEN(names); i++)
        if (!strcmp(b, names[i].name)) {
            *out = names[i].b;
            return KT_OK;
        }
    return kt__error(KT_ERR_FORMAT, "%s: pre_tokenizer: unknown split behavior '%s'", L->file, b);
}

/* A regex split step built in. */
static kt_status push_split(loader *L, const char *pattern, kt__split_behavior b, bool invert,
                            const char *what)
{
    kt__pretok p = {0};
    p.kind = KT__PRETOK_SPLIT;
    p.behavior = b;
    p.invert = invert;
    kt_status st = kt__tok_regex(&p.re, pattern, strlen(pattern), false, L->file, what);
    if (st < 0)
        return st;
    return push_pretok(L->tok, p);
}

static kt_status parse_replacement(loader *L, const cJSON *n, const char *what, char *out,
                                   size_t *len)
{
    const char *r = jstr(n, "replacement");
    if (!r)
        r = "\xE2\x96\x81"; /* U+2581 */
    uint32_t cp;
    size_t k = strlen(r);
    if (k == 0 || k > 4 || kt__utf8_decode(r, k, &cp) != k)
        return kt__error(KT_ERR_FORMAT, "%s: %s: replacement must be one character", L->file,
                         what);
    memcpy(out, r, k);
    *len = k;
    return KT_OK;
}

static kt__prepend_scheme parse_prepend_scheme(const cJSON *n)
{
    const char *s = jstr(n, "prepend_scheme");
    if (s)
        return !strcmp(s, "first") ? KT__PREPEND_FIRST
               : !strcmp(s, "never") ? KT__PREPEND_NEVER : KT__PREPEND_ALWAYS;
    return jbool(n, "add_prefix_space", true) ? KT__PREPEND_ALWAYS : KT__PREPEND_NEVER;
}

static kt_status parse_pretok(loader *L, const cJSON *n, int depth)
{
    const char *type;
    kt_status st = component_type(L, n, depth, "pre_tokenizer", &type);
    if (!type)
        return st;
    if (!strcmp(type, "Sequence"))
        return parse_sequence(L, n, depth, "pretokenizers",
                              "pre_tokenizer Sequence without a pretokenizers array",
                              parse_pretok);
    if (!strcmp(type, "Split")) {
        kt__pretok p = {0};
        p.kind = KT__PRETOK_SPLIT;
        p.invert = jbool(n, "invert", false);
        st = parse_behavior(L, n, KT__SPLIT_ISOLATED, &p.behavior);
        if (st == KT_OK)
            st = parse_pattern(L, cJSON_GetObjectItemCaseSensitive(n, "pattern"),
                               "pre_tokenizer Split", &p.re, NULL);
        return st < 0 ? st : push_pretok(L->tok, p);
    }
    if (!strcmp(type, "ByteLevel")) {
        kt__pretok p = {0};
        p.kind = KT__PRETOK_BYTELEVEL;
        p.add_prefix_space = jbool(n, "add_prefix_space", true);
        if (jbool(n, "use_regex", true)) {
            st = kt__tok_regex(&p.re, gpt2_pattern, strlen(gpt2_pattern), false, L->file,
                               "ByteLevel regex");
            if (st < 0)
                return st;
        }
        return push_pretok(L->tok, p);
    }
    if (!strcmp(type, "Metaspace")) {
        kt__pretok p = {0};
        p.kind = KT__PRETOK_METASPACE;
        st = parse_replacement(L, n, "pre_tokenizer Metaspace", p.replacement,
                               &p.replacement_len);
        if (st < 0)
            return st;
        p.prepend = parse_prepend_scheme(n);
        p.split = jbool(n, "split", true);
        return push_pretok(L->tok, p);
    }
    if (!strcmp(type, "Digits"))
        return push_split(L, "\\p{N}",
                          jbool(n, "individual_digits", false) ? KT__SPLIT_ISOLATED
                                                               : KT__SPLIT_CONTIGUOUS,
                          false, "Digits");
    if (!strcmp(type, "Whitespace"))
        return push_split(L, "\\w+|[^\\w\\s]+", KT__SPLIT_REMOVED, true, "Whitespace");
    if (!strcmp(type, "WhitespaceSplit"))
        return push_split(L, "\\s", KT__SPLIT_REMOVED, false, "WhitespaceSplit");
    if (!strcmp(type, "Punctuation") || !strcmp(type, "BertPreTokenizer")) {
        kt__split_behavior b = KT__SPLIT_ISOLATED;
        if (!strcmp(type, "BertPreTokenizer")) {
            st = push_split(L, "\\s", KT__SPLIT_REMOVED, false, "BertPreTokenizer");
        } else {
            st = parse_behavior(L, n, KT__SPLIT_ISOLATED, &b);
        }
        if (st < 0)
            return st;
        return push_split(L, kt__unicode_punct_class(), b, false, "Punctuation");
    }
    return kt__error(KT_ERR_UNSUPPORTED, "%s: pre_tokenizer type '%s' is not supported", L->file,
                     type);
}

/* ---- decoders ----------------------------------------------------------- */

static kt_status push_dec(kt_tokenizer *tok, kt__dec d)
{
    kt__dec *v = kt__realloc(tok->decs, (tok->n_decs + 1) * sizeof *v);
    if (!v) {
        kt__free(d.pattern);
        kt__free(d.content);
        pcre2_code_free(d.re);
        return KT_ERR_NOMEM;
    }
    tok->decs = v;
    v[tok->n_decs++] = d;
    return KT_OK;
}

static kt_status parse_decoder(loader *L, const cJSON *n, int depth)
{
    const char *type;
    kt_status st = component_type(L, n, depth, "decoder", &type);
    if (!type)
        return st;
    kt__dec d = {0};
    if (!strcmp(type, "Sequence")) {
        return parse_sequence(L, n, depth, "decoders",
                              "decoder Sequence without a decoders array", parse_decoder);
    } else if (!strcmp(type, "ByteLevel")) {
        d.kind = KT__DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d.kind = KT__DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d.kind = KT__DEC_FUSE;
    } else if (!strcmp(type, "Metaspace")) {
        d.kind = KT__DEC_METASPACE;
        st = parse_replacement(L, n, "decoder Metaspace", d.replacement, &d.replacement_len);
        d.add_prefix_space = parse_prepend_scheme(n) != KT__PREPEND_NEVER;
    } else if (!strcmp(type, "Replace")) {
        d.kind = KT__DEC_REPLACE;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char *c = jstr(n, "content");
        const char *lit = jstr(p, "String");
        if (!c)
            return kt__error(KT_ERR_FORMAT, "%s: decoder Replace without content", L->file);
        if (lit) {
            st = dup_string(lit, &d.pattern, &d.pattern_len);
        } else {
            st = parse_pattern(L, p, "decoder Replace", &d.re, NULL);
        }
        if (st == KT_OK)
            st = dup_string(c, &d.content, &d.content_len);
    } else if (!strcmp(type, "Strip")) {
        d.kind = KT__DEC_STRIP;
        const char *c = jstr(n, "content");
        int64_t a = 0, b = 0;
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(n, "start");
        const cJSON *je = cJSON_GetObjectItemCaseSensitive(n, "stop");
        if (!c || (js && !jint(js, 0, 1 << 20, &a)) || (je && !jint(je, 0, 1 << 20, &b)))
            return kt__error(KT_ERR_FORMAT, "%s: decoder Strip needs content, start, stop",
                             L->file);
        d.start = (uint32_t)a;
        d.stop = (uint32_t)b;
        st = dup_string(c, &d.content, &d.content_len);
    } else {
        return kt__error(KT_ERR_UNSUPPORTED, "%s: decoder type '%s' is not supported", L->file,
                         type);
    }
    if (st < 0) {
        kt__free(d.pattern);
        kt__free(d.content);
        pcre2_code_free(d.re);
        return st;
    }
    return push_dec(L->tok, d);
}

/* ---- post-processor ----------------------------------------------------- */

static kt_status post_push(kt_tokenizer *tok, int32_t id)
{
    kt__post_item *v = kt__realloc(tok->post, (tok->n_post + 1) * sizeof *v);
    if (!v)
        return KT_ERR_NOMEM;
    tok->post = v;
    v[tok->n_post++].id = id;
    return KT_OK;
}

static kt_status parse_post(loader *L, const cJSON *n, int depth)
{
    kt_tokenizer *tok = L->tok;
    if (!n || cJSON_IsNull(n))
        return KT_OK;
    const char *type = jstr(n, "type");
    if (!type || depth > 8)
        return kt__error(KT_ERR_FORMAT, "%s: post_processor without a type", L->file);
    if (!strcmp(type, "Sequence"))
        return parse_sequence(L, n, depth, "processors",
                              "post_processor Sequence without processors", parse_post);
    if (!strcmp(type, "ByteLevel"))
        return KT_OK; /* only offsets; no tokens added */
    if (tok->has_post)
        return KT_OK; /* the first template wins */
    if (!strcmp(type, "TemplateProcessing")) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(n, "single"), *item;
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(n, "special_tokens");
        if (!cJSON_IsArray(single))
            return kt__error(KT_ERR_FORMAT, "%s: TemplateProcessing without a single template",
                             L->file);
        tok->has_post = true;
        cJSON_ArrayForEach(item, single) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
            if (cJSON_GetObjectItemCaseSensitive(item, "Sequence")) {
                kt_status st = post_push(tok, -1);
                if (st < 0)
                    return st;
                continue;
            }
            const char *name = jstr(sp, "id");
            const cJSON *def = name ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids"), *x;
            if (!cJSON_IsArray(ids))
                return kt__error(KT_ERR_FORMAT, "%s: TemplateProcessing: special token '%s' "
                                 "has no ids", L->file, name ? name : "?");
            cJSON_ArrayForEach(x, ids) {
                int64_t id;
                if (!jint(x, 0, KT_TOKEN_ID_MAX, &id))
                    return kt__error(KT_ERR_FORMAT, "%s: TemplateProcessing: bad id for '%s'",
                                     L->file, name);
                kt_status st = post_push(tok, (int32_t)id);
                if (st < 0)
                    return st;
            }
        }
        return KT_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(n, "cls");
        const cJSON *sep = cJSON_GetObjectItemCaseSensitive(n, "sep");
        int64_t c, s;
        if (!jint(cJSON_GetArrayItem(cls, 1), 0, KT_TOKEN_ID_MAX, &c) ||
            !jint(cJSON_GetArrayItem(sep, 1), 0, KT_TOKEN_ID_MAX, &s))
            return kt__error(KT_ERR_FORMAT, "%s: %s needs cls and sep [token, id] pairs",
                             L->file, type);
        tok->has_post = true;
        kt_status st = post_push(tok, (int32_t)c);
        if (st == KT_OK)
            st = post_push(tok, -1);
        if (st == KT_OK)
            st = post_push(tok, (int32_t)s);
        return st;
    }
    return kt__error(KT_ERR_UNSUPPORTED, "%s: post_processor type '%s' is not supported",
                     L->file, type);
}

/* ---- the BPE model ------------------------------------------------------ */

static kt_status merges_put(kt_tokenizer *tok, int32_t a, int32_t b, uint32_t rank,
                            int32_t new_id)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t mask = tok->merges_cap - 1;
    for (size_t i = (size_t)(h >> 20) & mask;; i = (i + 1) & mask) {
        kt__merge_slot *s = &tok->merges[i];
        if (s->rank == UINT32_MAX || s->key == key) {
            if (s->rank == UINT32_MAX)
                tok->n_merges++;
            /* a repeated pair takes its later rank, as tokenizers' map does */
            *s = (kt__merge_slot){key, rank, new_id};
            return KT_OK;
        }
    }
}

static kt_status parse_bpe(loader *L, const cJSON *model)
{
    kt_tokenizer *tok = L->tok;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *v;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges"), *m;
    if (!cJSON_IsObject(vocab))
        return kt__error(KT_ERR_FORMAT, "%s: model.vocab is not an object", L->file);
    if (merges && !cJSON_IsArray(merges) && !cJSON_IsNull(merges))
        return kt__error(KT_ERR_FORMAT, "%s: model.merges is not an array", L->file);
    cJSON_ArrayForEach(v, vocab) {
        int64_t id;
        if (!jint(v, 0, KT_TOKEN_ID_MAX, &id))
            return kt__error(KT_ERR_FORMAT, "%s: model.vocab[\"%.40s\"] is not an id in "
                             "[0, 2^24)", L->file, v->string);
        kt_status st = add_vocab(L, v->string, strlen(v->string), (int32_t)id);
        if (st < 0)
            return st;
    }
    const char *unk = jstr(model, "unk_token");
    tok->unk_id = unk ? kt__strmap_get(&tok->vocab, &tok->arena, unk, strlen(unk)) : -1;
    tok->byte_fallback = jbool(model, "byte_fallback", false);
    tok->fuse_unk = jbool(model, "fuse_unk", false);
    tok->ignore_merges = jbool(model, "ignore_merges", false);
    const char *pre = jstr(model, "continuing_subword_prefix");
    const char *suf = jstr(model, "end_of_word_suffix");
    if ((pre && *pre && dup_string(pre, &tok->cont_prefix, NULL) < 0) ||
        (suf && *suf && dup_string(suf, &tok->eow_suffix, NULL) < 0))
        return KT_ERR_NOMEM;

    size_t n = (size_t)cJSON_GetArraySize(merges);
    size_t cap = 16;
    while (cap < n * 2)
        cap *= 2;
    tok->merges = kt__malloc_array(cap, sizeof *tok->merges);
    if (!tok->merges)
        return KT_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++)
        tok->merges[i].rank = UINT32_MAX;
    tok->merges_cap = cap;
    kt_buf joined = KT_BUF_INIT;
    size_t pre_len = tok->cont_prefix ? strlen(tok->cont_prefix) : 0;
    uint32_t rank = 0;
    kt_status st = KT_OK;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = kt__error(KT_ERR_FORMAT, "%s: merges[%u] \"%.60s\" is not two tokens "
                               "separated by one space", L->file, rank, m->valuestring);
                break;
            }
            a = m->valuestring;
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring;
            b = cJSON_GetArrayItem(m, 1)->valuestring;
            alen = strlen(a);
            blen = strlen(b);
        } else {
            st = kt__error(KT_ERR_FORMAT, "%s: merges[%u] is neither \"a b\" nor [a, b]",
                           L->file, rank);
            break;
        }
        int32_t ia = kt__strmap_get(&tok->vocab, &tok->arena, a, alen);
        int32_t ib = kt__strmap_get(&tok->vocab, &tok->arena, b, blen);
        /* the merged token drops the second part's continuing prefix */
        size_t skip = pre_len && blen >= pre_len && !memcmp(b, tok->cont_prefix, pre_len)
                          ? pre_len : 0;
        joined.size = 0;
        st = kt__buf_append(&joined, a, alen);
        if (st == KT_OK)
            st = kt__buf_append(&joined, b + skip, blen - skip);
        if (st < 0)
            break;
        int32_t ij = kt__strmap_get(&tok->vocab, &tok->arena, joined.ptr, joined.size);
        if (ia < 0 || ib < 0 || ij < 0) {
            st = kt__error(KT_ERR_FORMAT, "%s: merges[%u]: token \"%.60s\" is not in the "
                           "vocabulary", L->file, rank,
                           ia < 0 ? a : ib < 0 ? b : joined.ptr);
            break;
        }
        st = merges_put(tok, ia, ib, rank, ij);
        if (st < 0)
            break;
        rank++;
    }
    kt_buf_dispose(&joined);
    return st;
}

/* ---- tiktoken.model ----------------------------------------------------- */

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decodes standard base64 (with optional padding); false on bad input. */
static bool b64_decode(const char *s, size_t n, kt_buf *out)
{
    while (n && s[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return false;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(s[i]);
        if (v < 0)
            return false;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            uint8_t byte = (uint8_t)(acc >> bits);
            if (kt__buf_append(out, &byte, 1) < 0)
                return false;
        }
    }
    return true;
}

static kt_status parse_tiktoken(loader *L, const char *data, size_t size)
{
    kt_tokenizer *tok = L->tok;
    kt_buf bytes = KT_BUF_INIT;
    kt_status st = KT_OK;
    size_t line_no = 0;
    for (size_t i = 0; i < size && st == KT_OK;) {
        size_t e = i;
        while (e < size && data[e] != '\n')
            e++;
        line_no++;
        size_t end = e;
        while (end > i && (data[end - 1] == '\r' || data[end - 1] == ' '))
            end--;
        if (end > i) {
            const char *sp = memchr(data + i, ' ', end - i);
            long long rank = -1;
            if (sp && sp + 1 < data + end) { /* decimal digits up to the line end */
                rank = 0;
                for (const char *q = sp + 1; q < data + end && rank >= 0; q++)
                    rank = *q >= '0' && *q <= '9' && rank < INT32_MAX ? rank * 10 + (*q - '0')
                                                                      : -1;
            }
            bytes.size = 0;
            if (!sp || rank < 0 || rank > KT_TOKEN_ID_MAX ||
                !b64_decode(data + i, (size_t)(sp - (data + i)), &bytes) || bytes.size == 0) {
                st = kt__error(KT_ERR_FORMAT, "%s: line %zu is not \"<base64 token> <rank>\"",
                               L->file, line_no);
                break;
            }
            st = add_vocab(L, bytes.ptr, bytes.size, (int32_t)rank);
        }
        i = e + 1;
    }
    kt_buf_dispose(&bytes);
    if (st == KT_OK && L->max_id < 0)
        st = kt__error(KT_ERR_FORMAT, "%s: no tokens", L->file);
    if (st < 0)
        return st;
    tok->model = KT__MODEL_TIKTOKEN;
    tok->unk_id = -1;
    tok->dec_raw = true;
    kt__pretok p = {0};
    p.kind = KT__PRETOK_SPLIT;
    p.behavior = KT__SPLIT_ISOLATED;
    st = kt__tok_regex(&p.re, kimi_pattern, strlen(kimi_pattern), false, L->file,
                       "Kimi split pattern");
    if (st < 0)
        return st;
    return push_pretok(tok, p);
}

/* ---- tokenizer_config.json ---------------------------------------------- */

static kt_status add_template(kt_tokenizer *tok, const char *name, const char *src)
{
    return kt__strpairs_set(&tok->template_names, &tok->template_sources, &tok->n_templates,
                            name, src);
}

/* bos_token etc.: a string, {"content": ...} or null. */
static const char *special_content(const cJSON *v)
{
    if (cJSON_IsString(v))
        return v->valuestring;
    return jstr(v, "content");
}

static kt_status parse_config(loader *L, const cJSON *cfg, bool tiktoken)
{
    kt_tokenizer *tok = L->tok;
    kt_status st = KT_OK;
    int32_t n_ranks = L->max_id + 1; /* tiktoken: special ids start after the ranks */
    if (!cJSON_IsObject(cfg))
        return kt__error(KT_ERR_FORMAT, "%s: not a JSON object", L->file);

    /* added_tokens_decoder: {"163584": {"content": "[BOS]", "special": true, ...}} */
    const cJSON *atd = cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder"), *t;
    cJSON_ArrayForEach(t, atd) {
        char *end = NULL;
        errno = 0;
        long long id = strtoll(t->string ? t->string : "", &end, 10);
        const char *content = jstr(t, "content");
        if (!t->string || !*t->string || *end || errno || id < 0 || id > KT_TOKEN_ID_MAX ||
            !content)
            return kt__error(KT_ERR_FORMAT, "%s: added_tokens_decoder[\"%.20s\"] needs an "
                             "integer key and a content string", L->file,
                             t->string ? t->string : "");
        if ((size_t)id < tok->n_tokens && (tok->tokens[id].attrs & KT_TOKEN_ATTR_ADDED))
            continue; /* tokenizer.json already has it */
        bool special = jbool(t, "special", false);
        st = add_added(L, content, (int32_t)id, special, jbool(t, "lstrip", false),
                       jbool(t, "rstrip", false), jbool(t, "single_word", false),
                       jbool(t, "normalized", !special));
        if (st < 0)
            return st;
    }
    if (tiktoken) {
        /* ids after the ranks that the config does not name are reserved
         * special tokens (tokenization_kimi.py) */
        int32_t base = n_ranks;
        for (int32_t id = base; id < base + KIMI_RESERVED_SPECIAL && st == KT_OK; id++) {
            if ((size_t)id < tok->n_tokens && (tok->tokens[id].attrs & KT__TOKEN_EXISTS))
                continue;
            char name[40];
            snprintf(name, sizeof name, "<|reserved_token_%d|>", id);
            st = add_added(L, name, id, true, false, false, false, false);
        }
        if (st < 0)
            return st;
    }

    static const char *const keys[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    for (int k = 0; k < 4; k++) {
        const char *s = special_content(cJSON_GetObjectItemCaseSensitive(cfg, keys[k]));
        if (!s)
            continue;
        tok->special_text[k] = kt__strdup(s);
        if (!tok->special_text[k])
            return KT_ERR_NOMEM;
    }

    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        st = add_template(tok, "default", ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, ct) {
            const char *name = jstr(x, "name"), *src = jstr(x, "template");
            if (!name || !src)
                return kt__error(KT_ERR_FORMAT, "%s: chat_template list entries need name "
                                 "and template strings", L->file);
            st = add_template(tok, name, src);
            if (st < 0)
                return st;
        }
    } else if (ct && !cJSON_IsNull(ct)) {
        return kt__error(KT_ERR_FORMAT, "%s: chat_template is neither a string nor a list",
                         L->file);
    }
    if (st < 0)
        return st;

    /* transformers 5 ignores clean_up_tokenization_spaces for BPE tokenizers
     * unless told twice; and it adds bos/eos only as tokenizer.json's
     * post-processor says (add_bos_token/add_eos_token do not change it). */
    tok->clean_up_spaces =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "clean_up_tokenization_spaces")) &&
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
            cfg, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"));
    return st;
}

/* ---- open --------------------------------------------------------------- */

static kt_status load_json_file(const char *path, cJSON **out)
{
    char *data = NULL;
    size_t size = 0;
    kt_status st = read_file(path, &data, &size);
    if (st < 0)
        return st;
    st = parse_json(path, data, size, out);
    kt__free(data);
    return st;
}

static kt_status parse_tokenizer_json(loader *L, const char *path, cJSON *root);

static kt_status load_tokenizer_json(loader *L, const char *path)
{
    cJSON *root = NULL;
    kt_status st = load_json_file(path, &root);
    if (st < 0)
        return st;
    st = parse_tokenizer_json(L, path, root);
    cJSON_Delete(root);
    return st;
}

static kt_status parse_tokenizer_json(loader *L, const char *path, cJSON *root)
{
    kt_status st = KT_OK;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *type = jstr(model, "type");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(model)) {
        st = kt__error(KT_ERR_FORMAT, "%s: no \"model\" object", path);
    } else if (type && strcmp(type, "BPE")) {
        st = kt__error(KT_ERR_UNSUPPORTED, "%s: model type '%s' is not supported (only BPE)",
                       path, type);
    } else if (!type && !cJSON_GetObjectItemCaseSensitive(model, "merges")) {
        st = kt__error(KT_ERR_UNSUPPORTED, "%s: model without a type is not BPE", path);
    }
    if (st == KT_OK)
        st = parse_bpe(L, model);
    if (st == KT_OK)
        st = parse_added_tokens(L, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    if (st == KT_OK)
        st = parse_normalizer(L, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), 0);
    if (st == KT_OK)
        st = parse_pretok(L, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), 0);
    if (st == KT_OK)
        st = parse_decoder(L, cJSON_GetObjectItemCaseSensitive(root, "decoder"), 0);
    if (st == KT_OK)
        st = parse_post(L, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), 0);
    if (st == KT_ERR_NOMEM)
        return kt__error(KT_ERR_NOMEM, "%s: out of memory", path);
    return st;
}

/* Tables derived after everything is loaded: tries, single-byte ids, byte
 * fallback ids, special ids. */
static kt_status finish(loader *L)
{
    kt_tokenizer *tok = L->tok;
    tok->n_tokens = L->max_id >= 0 ? (size_t)L->max_id + 1 : 0;
    kt_buf norm = KT_BUF_INIT;
    kt_status st = KT_OK;
    for (size_t i = 0; i < tok->n_added && st == KT_OK; i++) {
        kt__added *a = &tok->added[i];
        const char *s = tok->arena.data + a->off;
        if (!a->normalized) {
            st = kt__tok_trie_add(&tok->trie_raw, s, a->len, (int32_t)i);
            continue;
        }
        /* normalized tokens are matched in normalized text, by their normalized form */
        norm.size = 0;
        st = kt__tok_normalize(tok, s, a->len, &norm);
        if (st == KT_OK && norm.size)
            st = kt__tok_trie_add(&tok->trie_norm, norm.ptr, norm.size, (int32_t)i);
    }
    kt_buf_dispose(&norm);
    if (st < 0)
        return st;
    for (int b = 0; b < 256; b++) {
        char c = (char)b, name[8];
        tok->char_ids[b] = kt__strmap_get(&tok->vocab, &tok->arena, &c, 1);
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->byte_ids[b] = kt__strmap_get(&tok->vocab, &tok->arena, name, 6);
    }
    static const char *const roles[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    for (int k = 0; k < 4; k++) {
        tok->special_ids[k] = -1;
        if (tok->special_text[k] &&
            kt_tokenizer_token_id(tok, tok->special_text[k], strlen(tok->special_text[k]),
                                  &tok->special_ids[k]) < 0)
            kt__log(tok->rt, KT_LOG_WARN, "%s: %s \"%.80s\" is not in the vocabulary",
                    L->file, roles[k], tok->special_text[k]);
    }
    kt_clear_error();
    if (tok->has_post) {
        for (size_t i = 0; i < tok->n_post; i++)
            if (tok->post[i].id >= 0 && (size_t)tok->post[i].id >= tok->n_tokens)
                return kt__error(KT_ERR_FORMAT, "%s: post-processor token id %d is not in the "
                                 "vocabulary", L->file, tok->post[i].id);
    }
    return KT_OK;
}

KT__DEFINE_OPTIONS_INIT(kt_tokenizer_options_init, kt_tokenizer_options, KT_TOKENIZER_OPTIONS_INIT)

static kt_status open_impl(kt_tokenizer *tok, const char *path)
{
    loader L = {tok, path, -1};
    char *dir = NULL, *tok_json = NULL, *tiktoken = NULL, *cfg_path = NULL, *jinja = NULL;
    char *ct_json = NULL;
    kt_status st = KT_OK;
    bool use_tiktoken = false;

    if (is_dir(path)) {
        dir = kt__strdup(path);
        tok_json = kt__path_join(path, "tokenizer.json");
        tiktoken = kt__path_join(path, "tiktoken.model");
        if (!dir || !tok_json || !tiktoken) {
            st = KT_ERR_NOMEM;
            goto done;
        }
        if (!is_file(tok_json)) {
            if (!is_file(tiktoken)) {
                st = kt__error(KT_ERR_NOT_FOUND, "%s: no tokenizer.json or tiktoken.model in "
                               "this directory", path);
                goto done;
            }
            use_tiktoken = true;
        }
    } else {
        if (!is_file(path)) {
            st = kt__error(KT_ERR_NOT_FOUND, "%s: no such tokenizer file or model directory",
                           path);
            goto done;
        }
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) : 1;
        dir = kt__malloc(dl + 1);
        if (!dir) {
            st = KT_ERR_NOMEM;
            goto done;
        }
        memcpy(dir, slash ? path : ".", dl);
        dir[dl] = '\0';
        size_t pl = strlen(path);
        use_tiktoken = pl >= 6 && !strcmp(path + pl - 6, ".model");
        if (use_tiktoken)
            tiktoken = kt__strdup(path);
        else
            tok_json = kt__strdup(path);
        if (!(use_tiktoken ? tiktoken : tok_json)) {
            st = KT_ERR_NOMEM;
            goto done;
        }
    }
    cfg_path = kt__path_join(dir, "tokenizer_config.json");
    jinja = kt__path_join(dir, "chat_template.jinja");
    ct_json = kt__path_join(dir, "chat_template.json");
    if (!cfg_path || !jinja || !ct_json) {
        st = KT_ERR_NOMEM;
        goto done;
    }
    kt__tok_bytelevel_init(tok);

    if (use_tiktoken) {
        char *data = NULL;
        size_t size = 0;
        L.file = tiktoken;
        st = read_file(tiktoken, &data, &size);
        if (st == KT_OK)
            st = parse_tiktoken(&L, data, size);
        kt__free(data);
    } else {
        L.file = tok_json;
        st = load_tokenizer_json(&L, tok_json);
    }
    if (st < 0)
        goto done;

    if (is_file(cfg_path)) {
        cJSON *cfg = NULL;
        L.file = cfg_path;
        st = load_json_file(cfg_path, &cfg);
        if (st == KT_OK)
            st = parse_config(&L, cfg, use_tiktoken);
        cJSON_Delete(cfg);
        if (st < 0)
            goto done;
    } else if (use_tiktoken) {
        st = kt__error(KT_ERR_NOT_FOUND, "%s: tiktoken.model needs tokenizer_config.json for "
                       "its special tokens", cfg_path);
        goto done;
    }
    if (is_file(ct_json)) {
        cJSON *cj = NULL;
        st = load_json_file(ct_json, &cj);
        const char *src = st == KT_OK ? jstr(cj, "chat_template") : NULL;
        if (src)
            st = add_template(tok, "default", src);
        cJSON_Delete(cj);
        if (st < 0)
            goto done;
    }
    if (is_file(jinja)) {
        char *data = NULL;
        size_t size = 0;
        st = read_file(jinja, &data, &size);
        if (st == KT_OK)
            st = add_template(tok, "default", data);
        kt__free(data);
        if (st < 0)
            goto done;
    }
    L.file = use_tiktoken ? tiktoken : tok_json;
    st = finish(&L);

done:
    if (st == KT_ERR_NOMEM && !kt_last_error()[0])
        kt__error(KT_ERR_NOMEM, "%s: out of memory loading the tokenizer", path);
    kt__free(dir);
    kt__free(tok_json);
    kt__free(tiktoken);
    kt__free(cfg_path);
    kt__free(jinja);
    kt__free(ct_json);
    return st;
}

kt_status kt_tokenizer_open(kt_tokenizer **out, const char *path,
                            const kt_tokenizer_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_open: out is NULL");
    *out = NULL;
    if (!path)
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_open: path is NULL");
    kt_tokenizer_options o = KT_TOKENIZER_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_tokenizer_options");
    if (st < 0)
        return st;
    if (o.flags)
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_options.flags must be 0");
    size_t plen = strlen(path);
    if (plen > 5 && !strcmp(path + plen - 5, ".gguf")) /* tokenizer.ggml.* metadata */
        return kt__tokenizer_from_gguf(out, path);
    kt_tokenizer *tok = kt__calloc(1, sizeof *tok);
    if (!tok)
        return KT_ERR_NOMEM;
    tok->rt = o.runtime;
    tok->unk_id = -1;
    kt_clear_error();
    st = open_impl(tok, path);
    if (st < 0) {
        kt_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return KT_OK;
}

kt_status kt__tokenizer_parse(kt_tokenizer **out, const char *data, size_t size, bool tiktoken,
                              const char *name)
{
    *out = NULL;
    kt_tokenizer *tok = kt__calloc(1, sizeof *tok);
    if (!tok)
        return KT_ERR_NOMEM;
    tok->unk_id = -1;
    kt__tok_bytelevel_init(tok);
    loader L = {tok, name, -1};
    kt_status st;
    if (tiktoken) {
        st = parse_tiktoken(&L, data, size);
        cJSON *cfg = st == KT_OK ? cJSON_CreateObject() : NULL;
        if (st == KT_OK)
            st = cfg ? parse_config(&L, cfg, true) : KT_ERR_NOMEM;
        cJSON_Delete(cfg);
    } else {
        cJSON *root = NULL;
        st = parse_json(name, data, size, &root);
        if (st == KT_OK)
            st = parse_tokenizer_json(&L, name, root);
        cJSON_Delete(root);
    }
    if (st == KT_OK)
        st = finish(&L);
    if (st < 0) {
        kt_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return KT_OK;
}

void kt_tokenizer_free(kt_tokenizer *tok)
{
    if (!tok)
        return;
    for (size_t i = 0; i < tok->n_norms; i++) {
        pcre2_code_free(tok->norms[i].re);
        kt__free(tok->norms[i].content);
    }
    for (size_t i = 0; i < tok->n_pretoks; i++)
        pcre2_code_free(tok->pretoks[i].re);
    for (size_t i = 0; i < tok->n_decs; i++) {
        pcre2_code_free(tok->decs[i].re);
        kt__free(tok->decs[i].pattern);
        kt__free(tok->decs[i].content);
    }
    for (size_t i = 0; i < tok->n_templates; i++) {
        kt__free(tok->template_names[i]);
        kt__free(tok->template_sources[i]);
    }
    for (int k = 0; k < 4; k++)
        kt__free(tok->special_text[k]);
    kt__free(tok->template_names);
    kt__free(tok->template_sources);
    kt__free(tok->norms);
    kt__free(tok->pretoks);
    kt__free(tok->decs);
    kt__free(tok->post);
    kt__free(tok->merges);
    kt__free(tok->cont_prefix);
    kt__free(tok->eow_suffix);
    kt__free(tok->added);
    kt__free(tok->tokens);
    kt__free(tok->trie_raw.nodes);
    kt__free(tok->trie_norm.nodes);
    kt__strmap_free(&tok->vocab);
    kt__strmap_free(&tok->added_map);
    kt__arena_free(&tok->arena);
    kt__free(tok);
}

/* ---- queries ------------------------------------------------------------ */

kt_status kt_tokenizer_encode(const kt_tokenizer *tok, const char *text, size_t text_len,
                              uint32_t flags, int32_t *ids, size_t capacity, size_t *n_ids)
{
    if (n_ids)
        *n_ids = 0;
    if (!tok || !n_ids || (!text && text_len) || (!ids && capacity))
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_encode: NULL argument");
    uint32_t known = KT_ENCODE_ADD_SPECIAL | KT_ENCODE_PARSE_SPECIAL;
    if (flags & ~known)
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_encode: unknown flags 0x%x",
                         flags & ~known);
    int32_t *v = NULL;
    size_t n = 0, cap = 0;
    kt_status st = kt__tok_encode(tok, text ? text : "", text_len, flags, &v, &n, &cap);
    if (st == KT_OK) {
        *n_ids = n;
        if (ids && capacity)
            memcpy(ids, v, KT_MIN(n, capacity) * sizeof *v);
        if (n > capacity)
            st = kt__error(KT_ERR_LIMIT, "kt_tokenizer_encode: %zu ids do not fit in %zu", n,
                           capacity);
    }
    kt__free(v);
    return st;
}

kt_status kt_tokenizer_decode(const kt_tokenizer *tok, const int32_t *ids, size_t n_ids,
                              uint32_t flags, kt_buf *out)
{
    if (!tok || !out || (!ids && n_ids))
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_decode: NULL argument");
    if (flags & ~KT_DECODE_SKIP_SPECIAL)
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_decode: unknown flags 0x%x",
                         flags & ~KT_DECODE_SKIP_SPECIAL);
    size_t mark = out->size;
    kt_status st = kt__tok_decode(tok, ids, n_ids, flags, false, out);
    if (st < 0) {
        out->size = mark;
        if (out->ptr)
            out->ptr[mark] = '\0';
    }
    return st;
}

kt_status kt_tokenizer_token_to_piece(const kt_tokenizer *tok, int32_t id, char *buf,
                                      size_t capacity, size_t *len)
{
    if (len)
        *len = 0;
    if (!tok || !len || (!buf && capacity))
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_token_to_piece: NULL argument");
    if (id < 0 || (size_t)id >= tok->n_tokens || !(tok->tokens[id].attrs & KT__TOKEN_EXISTS))
        return kt__error(KT_ERR_NOT_FOUND, "token id %d is not in the vocabulary", id);
    kt_buf b = KT_BUF_INIT;
    kt_status st = kt__tok_decode(tok, &id, 1, 0, true, &b);
    if (st == KT_OK) {
        *len = b.size;
        if (capacity)
            memcpy(buf, b.ptr, KT_MIN(b.size, capacity));
        if (b.size < capacity)
            buf[b.size] = '\0';
        if (b.size > capacity)
            st = kt__error(KT_ERR_LIMIT, "token %d needs %zu bytes, buffer has %zu", id, b.size,
                           capacity);
    }
    kt_buf_dispose(&b);
    return st;
}

const char *kt_tokenizer_token_text(const kt_tokenizer *tok, int32_t id)
{
    if (!tok || id < 0 || (size_t)id >= tok->n_tokens ||
        !(tok->tokens[id].attrs & KT__TOKEN_EXISTS))
        return NULL;
    return tok->arena.data + tok->tokens[id].off;
}

kt_status kt_tokenizer_token_id(const kt_tokenizer *tok, const char *text, size_t len,
                                int32_t *id)
{
    if (id)
        *id = -1;
    if (!tok || !id || (!text && len))
        return kt__error(KT_ERR_INVALID_ARG, "kt_tokenizer_token_id: NULL argument");
    int32_t v = kt__strmap_get(&tok->added_map, &tok->arena, text ? text : "", len);
    if (v < 0)
        v = kt__strmap_get(&tok->vocab, &tok->arena, text ? text : "", len);
    if (v < 0)
        return kt__error(KT_ERR_NOT_FOUND, "\"%.*s\" is not a token", (int)KT_MIN(len, 80),
                         text);
    *id = v;
    return KT_OK;
}

uint32_t kt_tokenizer_token_attrs(const kt_tokenizer *tok, int32_t id)
{
    if (!tok || id < 0 || (size_t)id >= tok->n_tokens)
        return 0;
    return tok->tokens[id].attrs & (KT_TOKEN_ATTR_ADDED | KT_TOKEN_ATTR_SPECIAL);
}

size_t kt_tokenizer_vocab_size(const kt_tokenizer *tok)
{
    return tok ? tok->n_tokens : 0;
}

int32_t kt_tokenizer_special_id(const kt_tokenizer *tok, kt_special_token which)
{
    if (!tok || (int)which < 0 || (int)which > 3)
        return -1;
    return tok->special_ids[which];
}

const char *kt_tokenizer_special_text(const kt_tokenizer *tok, kt_special_token which)
{
    if (!tok || (int)which < 0 || (int)which > 3)
        return NULL;
    return tok->special_text[which];
}

int32_t kt_tokenizer_adds_bos(const kt_tokenizer *tok)
{
    if (!tok || !tok->has_post || !tok->n_post || tok->post[0].id < 0)
        return 0;
    return tok->special_ids[KT_SPECIAL_BOS] >= 0 &&
           tok->post[0].id == tok->special_ids[KT_SPECIAL_BOS];
}

const char *kt_tokenizer_chat_template(const kt_tokenizer *tok, const char *name)
{
    if (!tok)
        return NULL;
    if (!name)
        name = "default";
    for (size_t i = 0; i < tok->n_templates; i++)
        if (!strcmp(tok->template_names[i], name))
            return tok->template_sources[i];
    return NULL;
}

size_t kt_tokenizer_chat_template_count(const kt_tokenizer *tok)
{
    return tok ? tok->n_templates : 0;
}

const char *kt_tokenizer_chat_template_name(const kt_tokenizer *tok, size_t i)
{
    if (!tok || i >= tok->n_templates)
        return NULL;
    return tok->template_names[i];
}
