/*
 * Encoding: added-token split, normalizers, pre-tokenizers, the BPE and
 * tiktoken models and the post-processor, each as Hugging Face tokenizers
 * (and tiktoken) define it, so that ids match transformers exactly.
 */
#include <stdlib.h>

#include "tokenizer_internal.h"

/* ---- regex -------------------------------------------------------------- */

/* Oniguruma (which tokenizers runs) and PCRE2 10.42 differ on two classes:
 * Oniguruma's Unicode \w also takes marks and letter numbers (PCRE2's:
 * letters, numbers, '_'), and its \s is White_Space, without the U+180E that
 * PCRE2 keeps. \w and \s are rewritten to Oniguruma's sets in and out of
 * classes, \W and \S outside classes. */
#define ONIG_WORD "\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}"
#define ONIG_SPACE "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                   "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* A \p{...} name that is a script (not a general category or special name). */
static bool is_script_name(const char *s, size_t n)
{
    static const char *const not_scripts[] = {
        "L", "L&", "LC", "Lc", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd",
        "Nl", "No", "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
        "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Cs", "Co", "Cn", "Any", "Xan", "Xps", "Xsp",
        "Xwd", "Xuc"};
    if (n == 0 || n > 40 || memchr(s, ':', n) || memchr(s, '=', n) || s[0] == '^')
        return false;
    for (size_t i = 0; i < KT_ARRAY_LEN(not_scripts); i++)
        if (strlen(not_scripts[i]) == n && !memcmp(s, not_scripts[i], n))
            return false;
    return true;
}

static kt_status rewrite_classes(const char *p, size_t n, kt_buf *out)
{
    kt_status st = KT_OK;
    int in_class = 0;
    for (size_t i = 0; i < n && st == KT_OK; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if ((e == 'p' || e == 'P') && i + 2 < n && p[i + 2] == '{') {
                const char *close = memchr(p + i + 3, '}', n - i - 3);
                if (close && is_script_name(p + i + 3, (size_t)(close - (p + i + 3)))) {
                    /* \p{Han}: Script, as Oniguruma and Rust read it (PCRE2 10.42
                     * reads Script_Extensions, which puts U+3002 in Han) */
                    st = kt__buf_appendf(out, "\\%c{sc:%.*s}", e, (int)(close - (p + i + 3)),
                                         p + i + 3);
                    i = (size_t)(close - p);
                    continue;
                }
            }
            if (e == 'w' || e == 's')
                st = kt__buf_appendf(out, in_class ? "%s" : "[%s]",
                                     e == 'w' ? ONIG_WORD : ONIG_SPACE);
            else if ((e == 'W' || e == 'S') && !in_class)
                st = kt__buf_appendf(out, "[^%s]", e == 'W' ? ONIG_WORD : ONIG_SPACE);
            else
                st = kt__buf_append(out, p + i, 2);
            i++;
            continue;
        }
        if (c == '[') {
            if (in_class == 0) {
                /* a leading ']' or '^]' is literal */
                st = kt__buf_append(out, p + i, 1);
                in_class = 1;
                if (i + 1 < n && p[i + 1] == '^') {
                    st = kt__buf_append(out, "^", 1);
                    i++;
                }
                if (st == KT_OK && i + 1 < n && p[i + 1] == ']') {
                    st = kt__buf_append(out, "]", 1);
                    i++;
                }
                continue;
            }
            if (i + 1 < n && p[i + 1] == ':')
                in_class++; /* [:alpha:] */
        } else if (c == ']' && in_class > 0) {
            in_class--;
        }
        st = kt__buf_append(out, &c, 1);
    }
    return st;
}

kt_status kt__tok_regex(pcre2_code **out, const char *pattern, size_t len, bool literal,
                        const char *file, const char *what)
{
    int err = 0;
    PCRE2_SIZE at = 0;
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    opts |= literal ? PCRE2_LITERAL : PCRE2_UCP; /* LITERAL refuses UCP */
    kt_buf rewritten = KT_BUF_INIT;
    if (!literal && memchr(pattern, '\\', len)) {
        if (rewrite_classes(pattern, len, &rewritten) < 0) {
            kt_buf_dispose(&rewritten);
            return kt__error(KT_ERR_NOMEM, "%s: %s: out of memory", file, what);
        }
        pattern = rewritten.ptr;
        len = rewritten.size;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &at, NULL);
    kt_buf_dispose(&rewritten);
    if (!re) {
        char msg[256];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        if (err == PCRE2_ERROR_NOMEMORY)
            return kt__error(KT_ERR_NOMEM, "%s: %s: out of memory compiling regex", file, what);
        return kt__error(KT_ERR_FORMAT, "%s: %s: bad regex at offset %zu: %s", file, what,
                         (size_t)at, msg);
    }
    uint32_t jit = 0;
    if (pcre2_config(PCRE2_CONFIG_JIT, &jit) >= 0 && jit)
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
    *out = re;
    return KT_OK;
}

/* Next match of re in s[0..n) at or after `from`; 1 found, 0 none, <0 error. */
static int regex_next(pcre2_code *re, pcre2_match_data *md, const char *s, size_t n,
                      size_t from, size_t *ms, size_t *me)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, 0, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return rc;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

static kt_status regex_error(int rc)
{
    char msg[128];
    pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
    return kt__error(rc == PCRE2_ERROR_NOMEMORY ? KT_ERR_NOMEM : KT_ERR_LIMIT,
                     "tokenizer regex failed on the input: %s", msg);
}

/* ---- spans: what a split produces --------------------------------------- */

typedef struct span {
    size_t s, e;
    bool match;
} span;

typedef struct spanvec {
    span *v;
    size_t n, cap;
} spanvec;

static kt_status span_push(spanvec *sv, size_t s, size_t e, bool match)
{
    span *v = kt__grow(sv->v, sv->n, &sv->cap, sizeof *v, 32);
    if (!v)
        return KT_ERR_NOMEM;
    sv->v = v;
    sv->v[sv->n++] = (span){s, e, match};
    return KT_OK;
}

/* Match spans of re over s, with the gaps between them (onig find_iter:
 * an empty match right after the previous match is skipped). */
static kt_status regex_spans(pcre2_code *re, pcre2_match_data *md, const char *s, size_t n,
                             spanvec *sv)
{
    sv->n = 0;
    size_t from = 0, prev = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (from <= n) {
        size_t ms, me;
        int rc = regex_next(re, md, s, n, from, &ms, &me);
        if (rc < 0)
            return regex_error(rc);
        if (rc == 0)
            break;
        if (ms == me && have_last && last_end == me) {
            if (from >= n)
                break;
            uint32_t cp;
            from += kt__utf8_decode(s + from, n - from, &cp);
            continue;
        }
        if (prev != ms && span_push(sv, prev, ms, false) < 0)
            return KT_ERR_NOMEM;
        if (span_push(sv, ms, me, true) < 0)
            return KT_ERR_NOMEM;
        prev = me;
        from = me;
        have_last = true;
        last_end = me;
    }
    if (prev != n && span_push(sv, prev, n, false) < 0)
        return KT_ERR_NOMEM;
    return KT_OK;
}

/* Applies a SplitDelimiterBehavior to spans in place (tokenizers' split()). */
static void apply_behavior(spanvec *sv, kt__split_behavior b, bool invert)
{
    if (invert)
        for (size_t i = 0; i < sv->n; i++)
            sv->v[i].match = !sv->v[i].match;
    size_t out = 0;
    bool prev_match = false;
    switch (b) {
    case KT__SPLIT_REMOVED:
        for (size_t i = 0; i < sv->n; i++)
            if (!sv->v[i].match)
                sv->v[out++] = sv->v[i];
        break;
    case KT__SPLIT_ISOLATED:
        out = sv->n;
        break;
    case KT__SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < sv->n; i++) {
            span x = sv->v[i];
            if (x.match && !prev_match && out > 0)
                sv->v[out - 1].e = x.e;
            else
                sv->v[out++] = x;
            prev_match = x.match;
        }
        break;
    case KT__SPLIT_MERGED_WITH_NEXT: {
        /* right to left: a match joins the span after it */
        size_t w = sv->n;
        for (size_t i = sv->n; i-- > 0;) {
            span x = sv->v[i];
            if (x.match && !prev_match && w < sv->n)
                sv->v[w].s = x.s;
            else
                sv->v[--w] = x;
            prev_match = x.match;
        }
        memmove(sv->v, sv->v + w, (sv->n - w) * sizeof *sv->v);
        out = sv->n - w;
        break;
    }
    case KT__SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sv->n; i++) {
            span x = sv->v[i];
            if (out > 0 && x.match == prev_match)
                sv->v[out - 1].e = x.e;
            else
                sv->v[out++] = x;
            prev_match = x.match;
        }
        break;
    }
    sv->n = out;
}

/* ---- piece lists -------------------------------------------------------- */

typedef struct plist {
    kt_buf text;
    kt__piece *v;
    size_t n, cap;
} plist;

static kt_status plist_add(plist *p, const char *s, size_t n, int32_t added_id, bool first)
{
    if (n == 0 && added_id < 0)
        return KT_OK; /* empty pieces are dropped */
    kt__piece *v = kt__grow(p->v, p->n, &p->cap, sizeof *v, 64);
    if (!v)
        return KT_ERR_NOMEM;
    p->v = v;
    kt__piece *pc = &p->v[p->n];
    pc->off = p->text.size;
    pc->len = n;
    pc->added_id = added_id;
    pc->first = first;
    kt_status st = kt__buf_append(&p->text, s, n);
    if (st < 0)
        return st;
    p->n++;
    return KT_OK;
}

static void plist_free(plist *p)
{
    kt_buf_dispose(&p->text);
    kt__free(p->v);
    memset(p, 0, sizeof *p);
}

static void plist_swap(plist *a, plist *b)
{
    plist t = *a;
    *a = *b;
    *b = t;
}

/* ---- added tokens ------------------------------------------------------- */

kt_status kt__tok_trie_add(kt__trie *t, const char *s, size_t n, int32_t added_index)
{
    if (t->n == 0) {
        t->nodes = kt__malloc(64 * sizeof *t->nodes);
        if (!t->nodes)
            return KT_ERR_NOMEM;
        t->cap = 64;
        t->nodes[0] = (kt__trie_node){-1, -1, -1, 0};
        t->n = 1;
    }
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = t->nodes[node].child;
        while (c >= 0 && t->nodes[c].byte != b)
            c = t->nodes[c].sibling;
        if (c < 0) {
            if (t->n == t->cap) {
                kt__trie_node *nn = kt__realloc(t->nodes, t->cap * 2 * sizeof *nn);
                if (!nn)
                    return KT_ERR_NOMEM;
                t->nodes = nn;
                t->cap *= 2;
            }
            c = (int32_t)t->n++;
            t->nodes[c] = (kt__trie_node){-1, t->nodes[node].child, -1, b};
            t->nodes[node].child = c;
        }
        node = c;
    }
    if (t->nodes[node].added < 0)
        t->nodes[node].added = added_index; /* first definition wins */
    return KT_OK;
}

/* Longest added token starting at s[0..n): its index and length, or -1. */
static int32_t trie_longest(const kt__trie *t, const char *s, size_t n, size_t *len)
{
    if (!t->n)
        return -1;
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = t->nodes[node].child;
        while (c >= 0 && t->nodes[c].byte != b)
            c = t->nodes[c].sibling;
        if (c < 0)
            break;
        node = c;
        if (t->nodes[node].added >= 0) {
            best = t->nodes[node].added;
            *len = i + 1;
        }
    }
    return best;
}

static bool ends_with_word(const char *s, size_t n)
{
    if (!n)
        return false;
    size_t i = n - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp;
    kt__utf8_decode(s + i, n - i, &cp);
    return kt__unicode_is_word(cp);
}

static bool starts_with_word(const char *s, size_t n)
{
    if (!n)
        return false;
    uint32_t cp;
    kt__utf8_decode(s, n, &cp);
    return kt__unicode_is_word(cp);
}

/* Splits s by the added tokens of trie t into `out` (tokenizers'
 * AddedVocabulary::find_matches: leftmost-longest; a skipped special token or
 * a failed single_word check does not let a shorter token match there). */
static kt_status split_added(const kt_tokenizer *tok, const kt__trie *t, bool parse_special,
                             const char *s, size_t n, bool first, plist *out)
{
    size_t start_off = 0; /* end of the last emitted match */
    size_t i = 0;
    kt_status st = KT_OK;
    while (i < n) {
        size_t len = 0;
        int32_t a = trie_longest(t, s + i, n - i, &len);
        if (a < 0) {
            i++;
            continue;
        }
        const kt__added *ad = &tok->added[a];
        size_t ms = i, me = i + len;
        i = me; /* matches do not overlap */
        if (ad->special && !parse_special)
            continue;
        if (ad->single_word && (ends_with_word(s, ms) || starts_with_word(s + me, n - me)))
            continue;
        if (ad->lstrip) {
            size_t k = ms;
            while (k > start_off) {
                size_t j = k - 1;
                while (j > start_off && ((uint8_t)s[j] & 0xC0) == 0x80)
                    j--;
                uint32_t cp;
                kt__utf8_decode(s + j, k - j, &cp);
                if (!kt__unicode_is_space(cp))
                    break;
                k = j;
            }
            ms = k;
        }
        if (ad->rstrip) {
            while (me < n) {
                uint32_t cp;
                size_t used = kt__utf8_decode(s + me, n - me, &cp);
                if (!kt__unicode_is_space(cp))
                    break;
                me += used;
            }
            i = me;
        }
        if (start_off < ms)
            st = plist_add(out, s + start_off, ms - start_off, -1, first && start_off == 0);
        if (st == KT_OK)
            st = plist_add(out, NULL, 0, ad->id, false);
        if (st < 0)
            return st;
        start_off = me;
    }
    if (start_off < n)
        st = plist_add(out, s + start_off, n - start_off, -1, first && start_off == 0);
    return st;
}

/* ---- normalizers -------------------------------------------------------- */

static kt_status regex_replace_all(pcre2_code *re, pcre2_match_data *md, const char *s,
                                   size_t n, const char *with, size_t with_len, kt_buf *out)
{
    spanvec sv = {0};
    kt_status st = regex_spans(re, md, s, n, &sv);
    for (size_t i = 0; i < sv.n && st == KT_OK; i++) {
        if (sv.v[i].match)
            st = kt__buf_append(out, with, with_len);
        else
            st = kt__buf_append(out, s + sv.v[i].s, sv.v[i].e - sv.v[i].s);
    }
    kt__free(sv.v);
    return st;
}

kt_status kt__tok_normalize(const kt_tokenizer *tok, const char *s, size_t n, kt_buf *out)
{
    kt_buf a = KT_BUF_INIT, b = KT_BUF_INIT;
    kt_status st = kt__buf_append(&a, s, n);
    pcre2_match_data *md = NULL;
    for (size_t k = 0; k < tok->n_norms && st == KT_OK; k++) {
        const kt__norm *nm = &tok->norms[k];
        b.size = 0;
        switch (nm->kind) {
        case KT__NORM_NFC:
            st = kt__unicode_normalize(KT__NFC, a.ptr, a.size, &b);
            break;
        case KT__NORM_NFD:
            st = kt__unicode_normalize(KT__NFD, a.ptr, a.size, &b);
            break;
        case KT__NORM_NFKC:
            st = kt__unicode_normalize(KT__NFKC, a.ptr, a.size, &b);
            break;
        case KT__NORM_NFKD:
            st = kt__unicode_normalize(KT__NFKD, a.ptr, a.size, &b);
            break;
        case KT__NORM_LOWERCASE:
            st = kt__unicode_lower(a.ptr, a.size, &b);
            break;
        case KT__NORM_STRIP_ACCENTS:
            st = kt__unicode_strip_marks(a.ptr, a.size, &b);
            break;
        case KT__NORM_PREPEND:
            /* tokenizers' Prepend leaves an empty string empty */
            if (a.size)
                st = kt__buf_append(&b, nm->content, nm->content_len);
            if (st == KT_OK)
                st = kt__buf_append(&b, a.ptr, a.size);
            break;
        case KT__NORM_STRIP: {
            size_t lo = 0, hi = a.size;
            while (nm->strip_left && lo < hi) {
                uint32_t cp;
                size_t used = kt__utf8_decode(a.ptr + lo, hi - lo, &cp);
                if (!kt__unicode_is_space(cp))
                    break;
                lo += used;
            }
            while (nm->strip_right && hi > lo) {
                size_t j = hi - 1;
                while (j > lo && ((uint8_t)a.ptr[j] & 0xC0) == 0x80)
                    j--;
                uint32_t cp;
                kt__utf8_decode(a.ptr + j, hi - j, &cp);
                if (!kt__unicode_is_space(cp))
                    break;
                hi = j;
            }
            st = kt__buf_append(&b, a.ptr + lo, hi - lo);
            break;
        }
        case KT__NORM_REPLACE:
            if (!md && !(md = pcre2_match_data_create(1, NULL))) {
                st = KT_ERR_NOMEM;
                break;
            }
            st = regex_replace_all(nm->re, md, a.ptr ? a.ptr : "", a.size, nm->content,
                                   nm->content_len, &b);
            break;
        }
        kt_buf t = a;
        a = b;
        b = t;
    }
    if (st == KT_OK)
        st = kt__buf_append(out, a.ptr, a.size);
    if (md)
        pcre2_match_data_free(md);
    kt_buf_dispose(&a);
    kt_buf_dispose(&b);
    return st;
}

/* ---- pre-tokenizers ----------------------------------------------------- */

void kt__tok_bytelevel_init(kt_tokenizer *tok)
{
    /* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
     * others move in order to U+0100 onwards. */
    uint32_t moved = 0;
    for (uint32_t b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = printable ? b : 256 + moved++;
        tok->byte_char_len[b] = (uint8_t)kt__utf8_encode(cp, tok->byte_chars[b]);
    }
}

static kt_status pretok_step(const kt_tokenizer *tok, const kt__pretok *pt,
                             pcre2_match_data *md, spanvec *sv, const plist *in, plist *out)
{
    kt_status st = KT_OK;
    kt_buf tmp = KT_BUF_INIT, mapped = KT_BUF_INIT;
    for (size_t i = 0; i < in->n && st == KT_OK; i++) {
        const kt__piece *pc = &in->v[i];
        if (pc->added_id >= 0) {
            st = plist_add(out, NULL, 0, pc->added_id, false);
            continue;
        }
        const char *s = in->text.ptr + pc->off;
        size_t n = pc->len;
        switch (pt->kind) {
        case KT__PRETOK_SPLIT:
            st = regex_spans(pt->re, md, s, n, sv);
            if (st < 0)
                break;
            apply_behavior(sv, pt->behavior, pt->invert);
            for (size_t k = 0; k < sv->n && st == KT_OK; k++)
                st = plist_add(out, s + sv->v[k].s, sv->v[k].e - sv->v[k].s, -1,
                               pc->first && sv->v[k].s == 0);
            break;
        case KT__PRETOK_BYTELEVEL: {
            tmp.size = 0;
            if (pt->add_prefix_space && (n == 0 || s[0] != ' '))
                st = kt__buf_append(&tmp, " ", 1);
            if (st == KT_OK)
                st = kt__buf_append(&tmp, s, n);
            if (st < 0)
                break;
            sv->n = 0;
            if (pt->re)
                st = regex_spans(pt->re, md, tmp.ptr, tmp.size, sv);
            else
                st = span_push(sv, 0, tmp.size, false);
            for (size_t k = 0; k < sv->n && st == KT_OK; k++) {
                /* map each byte to its printable character */
                mapped.size = 0;
                st = kt__buf_reserve(&mapped, 2 * (sv->v[k].e - sv->v[k].s));
                for (size_t j = sv->v[k].s; j < sv->v[k].e && st == KT_OK; j++) {
                    uint8_t c = (uint8_t)tmp.ptr[j]; /* at most 2 bytes each: reserved */
                    memcpy(mapped.ptr + mapped.size, tok->byte_chars[c], tok->byte_char_len[c]);
                    mapped.size += tok->byte_char_len[c];
                }
                if (st == KT_OK)
                    st = plist_add(out, mapped.ptr, mapped.size, -1, pc->first && sv->v[k].s == 0);
            }
            break;
        }
        case KT__PRETOK_METASPACE: {
            tmp.size = 0;
            bool starts = n >= pt->replacement_len && !memcmp(s, pt->replacement,
                                                              pt->replacement_len);
            if (!starts && n > 0 && s[0] == ' ')
                starts = true; /* the space becomes the replacement below */
            if (!starts && (pt->prepend == KT__PREPEND_ALWAYS ||
                            (pt->prepend == KT__PREPEND_FIRST && pc->first)))
                st = kt__buf_append(&tmp, pt->replacement, pt->replacement_len);
            for (size_t j = 0; j < n && st == KT_OK; j++)
                st = s[j] == ' ' ? kt__buf_append(&tmp, pt->replacement, pt->replacement_len)
                                 : kt__buf_append(&tmp, s + j, 1);
            if (st < 0)
                break;
            if (!pt->split) {
                st = plist_add(out, tmp.ptr, tmp.size, -1, pc->first);
                break;
            }
            /* split before each replacement char (MergedWithNext) */
            size_t start = 0;
            for (size_t j = 0; j + pt->replacement_len <= tmp.size && st == KT_OK;) {
                if (j > start && !memcmp(tmp.ptr + j, pt->replacement, pt->replacement_len)) {
                    st = plist_add(out, tmp.ptr + start, j - start, -1,
                                   pc->first && start == 0);
                    start = j;
                }
                j += j == start ? pt->replacement_len : 1;
            }
            if (st == KT_OK)
                st = plist_add(out, tmp.ptr + start, tmp.size - start, -1,
                               pc->first && start == 0);
            break;
        }
        }
    }
    kt_buf_dispose(&tmp);
    kt_buf_dispose(&mapped);
    return st;
}

/* ---- models ------------------------------------------------------------- */

typedef struct idvec {
    int32_t *v;
    size_t n, cap;
} idvec;

static kt_status id_push(idvec *iv, int32_t id)
{
    int32_t *v = kt__grow(iv->v, iv->n, &iv->cap, sizeof *v, 64);
    if (!v)
        return KT_ERR_NOMEM;
    iv->v = v;
    iv->v[iv->n++] = id;
    return KT_OK;
}

static const kt__merge_slot *merge_find(const kt_tokenizer *tok, int32_t a, int32_t b)
{
    if (!tok->merges_cap)
        return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t mask = tok->merges_cap - 1;
    for (size_t i = (size_t)(h >> 20) & mask;; i = (i + 1) & mask) {
        const kt__merge_slot *s = &tok->merges[i];
        if (s->rank == UINT32_MAX)
            return NULL;
        if (s->key == key)
            return s;
    }
}

typedef struct bpe_sym {
    int32_t id;
    int32_t prev, next; /* -1 none */
    uint32_t len;       /* 0: merged away */
} bpe_sym;

typedef struct bpe_merge {
    uint32_t rank;
    int32_t pos, new_id;
} bpe_merge;

static bool merge_less(bpe_merge a, bpe_merge b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

typedef struct bpe_work {
    bpe_sym *syms;
    size_t n_syms, cap_syms;
    bpe_merge *heap;
    size_t n_heap, cap_heap;
} bpe_work;

static kt_status heap_push(bpe_work *w, bpe_merge m)
{
    bpe_merge *h = kt__grow(w->heap, w->n_heap, &w->cap_heap, sizeof *h, 64);
    if (!h)
        return KT_ERR_NOMEM;
    w->heap = h;
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(m, w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = m;
    return KT_OK;
}

static bpe_merge heap_pop(bpe_work *w)
{
    bpe_merge top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && merge_less(w->heap[c + 1], w->heap[c]))
            c++;
        if (!merge_less(w->heap[c], last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

/* Symbol pos takes in its right neighbour, which is left empty and unlinked. */
static void sym_absorb_next(bpe_work *w, int32_t pos)
{
    bpe_sym *a = &w->syms[pos], *b = &w->syms[a->next];
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (a->next >= 0)
        w->syms[a->next].prev = pos;
}

static kt_status sym_push(bpe_work *w, int32_t id, uint32_t len)
{
    bpe_sym *s = kt__grow(w->syms, w->n_syms, &w->cap_syms, sizeof *s, 64);
    if (!s)
        return KT_ERR_NOMEM;
    w->syms = s;
    int32_t i = (int32_t)w->n_syms++;
    w->syms[i] = (bpe_sym){id, i - 1, -1, len};
    if (i > 0)
        w->syms[i - 1].next = i;
    return KT_OK;
}

static int32_t vocab_lookup(const kt_tokenizer *tok, const char *s, size_t n)
{
    if (n == 1)
        return tok->char_ids[(uint8_t)s[0]];
    return kt__strmap_get(&tok->vocab, &tok->arena, s, n);
}

/* Initial symbols of a BPE word: one per character (with the continuing
 * prefix / end-of-word suffix), byte fallback or unk for unknown ones. */
static kt_status bpe_symbols(const kt_tokenizer *tok, const char *s, size_t n, bpe_work *w)
{
    w->n_syms = 0;
    kt_buf tmp = KT_BUF_INIT;
    kt_status st = KT_OK;
    bool prev_unk = false;
    size_t pre_len = tok->cont_prefix ? strlen(tok->cont_prefix) : 0;
    size_t suf_len = tok->eow_suffix ? strlen(tok->eow_suffix) : 0;
    for (size_t i = 0; i < n && st == KT_OK;) {
        uint32_t cp;
        size_t used = kt__utf8_decode(s + i, n - i, &cp);
        int32_t id;
        if (!pre_len && !suf_len) {
            id = vocab_lookup(tok, s + i, used);
        } else {
            tmp.size = 0;
            if (i > 0)
                st = kt__buf_append(&tmp, tok->cont_prefix, pre_len);
            if (st == KT_OK)
                st = kt__buf_append(&tmp, s + i, used);
            if (st == KT_OK && i + used == n)
                st = kt__buf_append(&tmp, tok->eow_suffix, suf_len);
            if (st < 0)
                break;
            id = vocab_lookup(tok, tmp.ptr, tmp.size);
        }
        if (id >= 0) {
            st = sym_push(w, id, (uint32_t)used);
            prev_unk = false;
        } else if (tok->byte_fallback) {
            bool all = true;
            for (size_t j = 0; j < used; j++)
                all = all && tok->byte_ids[(uint8_t)s[i + j]] >= 0;
            if (all) {
                for (size_t j = 0; j < used && st == KT_OK; j++)
                    st = sym_push(w, tok->byte_ids[(uint8_t)s[i + j]], 1);
                prev_unk = false;
            } else if (tok->unk_id >= 0) {
                st = sym_push(w, tok->unk_id, (uint32_t)used);
                prev_unk = true;
            }
        } else if (tok->unk_id >= 0) {
            if (tok->fuse_unk && prev_unk) {
                w->syms[w->n_syms - 1].len += (uint32_t)used;
            } else {
                st = sym_push(w, tok->unk_id, (uint32_t)used);
            }
            prev_unk = true;
        }
        i += used;
    }
    kt_buf_dispose(&tmp);
    return st;
}

/* BPE over one piece: merges by rank, lowest first, leftmost on ties
 * (tokenizers' Word::merge_all with its binary heap). */
static kt_status bpe_encode(const kt_tokenizer *tok, const char *s, size_t n, bpe_work *w,
                            idvec *out)
{
    if (tok->ignore_merges) {
        int32_t id = kt__strmap_get(&tok->vocab, &tok->arena, s, n);
        if (id >= 0)
            return id_push(out, id);
    }
    kt_status st = bpe_symbols(tok, s, n, w);
    if (st < 0)
        return st;
    w->n_heap = 0;
    for (size_t i = 0; i + 1 < w->n_syms && st == KT_OK; i++) {
        const kt__merge_slot *m = merge_find(tok, w->syms[i].id, w->syms[i + 1].id);
        if (m)
            st = heap_push(w, (bpe_merge){m->rank, (int32_t)i, m->new_id});
    }
    while (w->n_heap && st == KT_OK) {
        bpe_merge top = heap_pop(w);
        bpe_sym *a = &w->syms[top.pos];
        if (!a->len || a->next < 0)
            continue;
        bpe_sym *b = &w->syms[a->next];
        const kt__merge_slot *m = merge_find(tok, a->id, b->id);
        if (!m || m->new_id != top.new_id)
            continue; /* stale entry */
        a->id = top.new_id;
        sym_absorb_next(w, top.pos);
        if (a->prev >= 0) {
            const kt__merge_slot *pm = merge_find(tok, w->syms[a->prev].id, a->id);
            if (pm)
                st = heap_push(w, (bpe_merge){pm->rank, a->prev, pm->new_id});
        }
        if (st == KT_OK && a->next >= 0) {
            const kt__merge_slot *nm = merge_find(tok, a->id, w->syms[a->next].id);
            if (nm)
                st = heap_push(w, (bpe_merge){nm->rank, top.pos, nm->new_id});
        }
    }
    for (int32_t i = w->n_syms ? 0 : -1; i >= 0 && st == KT_OK; i = w->syms[i].next)
        st = id_push(out, w->syms[i].id);
    return st;
}

/* tiktoken's byte-pair merge: the piece whole if it is a token, else merge
 * the adjacent pair whose concatenation has the lowest rank, leftmost first.
 * A heap of candidate pairs (stale ones skipped) keeps long pieces
 * O(n log n). syms[i] is the part starting at byte i (id: its start). */
#define TIKTOKEN_SHORT 48

static int32_t rank_of(const kt_tokenizer *tok, const char *s, size_t n)
{
    return kt__strmap_get(&tok->vocab, &tok->arena, s, n);
}

static kt_status tiktoken_push_pair(const kt_tokenizer *tok, const char *s, bpe_work *w,
                                    int32_t left)
{
    const bpe_sym *a = &w->syms[left];
    if (a->next < 0)
        return KT_OK;
    int32_t r = rank_of(tok, s + a->id, a->len + w->syms[a->next].len);
    if (r < 0)
        return KT_OK;
    return heap_push(w, (bpe_merge){(uint32_t)r, left, r});
}

/* The same merge for short pieces: a scan for the lowest rank beats the heap. */
static kt_status tiktoken_encode_short(const kt_tokenizer *tok, const char *s, size_t n,
                                       idvec *out)
{
    /* [n + 1] part boundaries; rank[i]: rank of parts i and i+1 joined, INT32_MAX none */
    uint32_t start[TIKTOKEN_SHORT + 1];
    int32_t rank[TIKTOKEN_SHORT + 1];
    size_t np = n + 1;
    for (size_t i = 0; i < np; i++)
        start[i] = (uint32_t)i;
    for (size_t i = 0; i + 2 < np; i++) {
        int32_t r = rank_of(tok, s + i, 2);
        rank[i] = r >= 0 ? r : INT32_MAX;
    }
    while (np > 2) {
        int32_t best = INT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 2 < np; i++)
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        if (best == INT32_MAX)
            break;
        memmove(start + bi + 1, start + bi + 2, (np - bi - 2) * sizeof *start);
        memmove(rank + bi + 1, rank + bi + 2, (np - bi - 2) * sizeof *rank);
        np--;
        for (size_t i = bi ? bi - 1 : 0; i <= bi; i++) {
            int32_t r = i + 2 < np ? rank_of(tok, s + start[i], start[i + 2] - start[i]) : -1;
            rank[i] = r >= 0 ? r : INT32_MAX;
        }
    }
    kt_status st = KT_OK;
    for (size_t i = 0; i + 1 < np && st == KT_OK; i++) {
        int32_t id = rank_of(tok, s + start[i], start[i + 1] - start[i]);
        if (id < 0) /* a byte with no rank: the file lacks single-byte tokens */
            return kt__error(KT_ERR_FORMAT, "tiktoken vocabulary has no token for byte 0x%02X",
                             (uint8_t)s[start[i]]);
        st = id_push(out, id);
    }
    return st;
}

static kt_status tiktoken_encode(const kt_tokenizer *tok, const char *s, size_t n,
                                 bpe_work *w, idvec *out)
{
    int32_t whole = rank_of(tok, s, n);
    if (whole >= 0)
        return id_push(out, whole);
    if (n <= TIKTOKEN_SHORT)
        return tiktoken_encode_short(tok, s, n, out);
    w->n_syms = 0;
    w->n_heap = 0;
    kt_status st = KT_OK;
    for (size_t i = 0; i < n && st == KT_OK; i++)
        st = sym_push(w, (int32_t)i, 1);
    for (size_t i = 0; i + 1 < n && st == KT_OK; i++)
        st = tiktoken_push_pair(tok, s, w, (int32_t)i);
    while (w->n_heap && st == KT_OK) {
        bpe_merge top = heap_pop(w);
        bpe_sym *a = &w->syms[top.pos];
        if (!a->len || a->next < 0)
            continue;
        bpe_sym *b = &w->syms[a->next];
        if (rank_of(tok, s + a->id, a->len + b->len) != top.new_id)
            continue; /* stale: a neighbour has changed */
        sym_absorb_next(w, top.pos);
        if (a->prev >= 0)
            st = tiktoken_push_pair(tok, s, w, a->prev);
        if (st == KT_OK)
            st = tiktoken_push_pair(tok, s, w, top.pos);
    }
    for (int32_t i = n ? 0 : -1; i >= 0 && st == KT_OK; i = w->syms[i].next) {
        int32_t id = rank_of(tok, s + w->syms[i].id, w->syms[i].len);
        if (id < 0) /* a byte with no rank: the file lacks single-byte tokens */
            return kt__error(KT_ERR_FORMAT, "tiktoken vocabulary has no token for byte 0x%02X",
                             (uint8_t)s[w->syms[i].id]);
        st = id_push(out, id);
    }
    return st;
}

/* ---- per-call word cache ------------------------------------------------ */

#define WCACHE_SLOTS 16384 /* power of two; filled to half at most */
#define WCACHE_MAX_PIECE 128

typedef struct wcache_slot {
    uint64_t hash;
    uint32_t key_off, key_len; /* key_len 0: empty (pieces are never empty) */
    uint32_t ids_off, n_ids;
} wcache_slot;

typedef struct wcache {
    wcache_slot *slots; /* [WCACHE_SLOTS] or NULL: no caching */
    size_t n;
    kt_buf keys;
    idvec ids;
} wcache;

static uint64_t piece_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h | 1;
}

/* The slot holding the piece, or the empty slot where it would go. */
static wcache_slot *wcache_find(wcache *c, const char *s, size_t n)
{
    uint64_t h = piece_hash(s, n);
    for (size_t i = (size_t)h & (WCACHE_SLOTS - 1);; i = (i + 1) & (WCACHE_SLOTS - 1)) {
        wcache_slot *sl = &c->slots[i];
        if (!sl->key_len) {
            sl->hash = h;
            return sl;
        }
        if (sl->hash == h && sl->key_len == n && !memcmp(c->keys.ptr + sl->key_off, s, n))
            return sl;
    }
}

/* Fills an empty slot (a failed allocation only means no caching). */
static void wcache_put(wcache *c, wcache_slot *sl, const char *s, size_t n, const int32_t *ids,
                       size_t n_ids)
{
    if (c->n * 2 >= WCACHE_SLOTS || c->keys.size + n > UINT32_MAX ||
        c->ids.n + n_ids > UINT32_MAX)
        return;
    size_t key_off = c->keys.size, ids_off = c->ids.n;
    if (kt__buf_append(&c->keys, s, n) < 0)
        return;
    for (size_t k = 0; k < n_ids; k++)
        if (id_push(&c->ids, ids[k]) < 0) {
            c->ids.n = ids_off;
            return;
        }
    sl->key_off = (uint32_t)key_off;
    sl->key_len = (uint32_t)n;
    sl->ids_off = (uint32_t)ids_off;
    sl->n_ids = (uint32_t)n_ids;
    c->n++;
}

static void wcache_free(wcache *c)
{
    kt__free(c->slots);
    kt_buf_dispose(&c->keys);
    kt__free(c->ids.v);
}

/* ---- the pipeline ------------------------------------------------------- */

/* Python's str.isspace(). */
static bool py_isspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
           cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Where tokenization_kimi.py's encode() cuts the text before tiktoken sees
 * it: every 400000 characters from the start, and inside each such window
 * wherever a run of whitespace or of non-whitespace passes 25000 characters.
 * Appends the byte offsets of the cuts to `cuts`. */
#define KIMI_MAX_ENCODE_CHARS 400000
#define KIMI_MAX_RUN_CHARS 25000
static kt_status kimi_cuts(const char *s, size_t n, idvec *cuts)
{
    if (n <= KIMI_MAX_RUN_CHARS)
        return KT_OK; /* too short for either rule */
    size_t chars = 0, run = 0;
    bool run_space = false;
    kt_status st = KT_OK;
    for (size_t i = 0; i < n && st == KT_OK;) {
        uint32_t cp;
        size_t used = kt__utf8_decode(s + i, n - i, &cp);
        bool sp = py_isspace(cp);
        if (chars % KIMI_MAX_ENCODE_CHARS == 0) { /* a new window: fresh state */
            if (chars)
                st = id_push(cuts, (int32_t)i);
            run_space = sp;
            run = 1;
        } else if (sp != run_space) {
            run_space = sp;
            run = 1;
        } else if (++run > KIMI_MAX_RUN_CHARS) {
            st = id_push(cuts, (int32_t)i);
            run = 1;
        }
        chars++;
        i += used;
    }
    return st;
}

kt_status kt__tok_encode(const kt_tokenizer *tok, const char *text, size_t len, uint32_t flags,
                         int32_t **ids, size_t *n, size_t *cap)
{
    bool parse_special = flags & KT_ENCODE_PARSE_SPECIAL;
    plist a = {0}, b = {0};
    idvec out = {*ids, 0, *cap};
    bpe_work w = {0};
    spanvec sv = {0};
    kt_buf norm = KT_BUF_INIT;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    kt_status st = md ? KT_OK : KT_ERR_NOMEM;

    /* 1. added tokens that match the raw text (tiktoken: chunk by chunk, as
     * tokenization_kimi.py feeds tiktoken) */
    if (st == KT_OK && tok->model == KT__MODEL_TIKTOKEN && len > KIMI_MAX_RUN_CHARS) {
        idvec cuts = {0};
        st = len < INT32_MAX ? kimi_cuts(text, len, &cuts)
                             : kt__error(KT_ERR_LIMIT, "tiktoken input over 2 GiB");
        size_t at = 0;
        for (size_t k = 0; k <= cuts.n && st == KT_OK; k++) {
            size_t end = k < cuts.n ? (size_t)cuts.v[k] : len;
            st = split_added(tok, &tok->trie_raw, parse_special, text + at, end - at, at == 0,
                             &a);
            at = end;
        }
        kt__free(cuts.v);
    } else if (st == KT_OK) {
        st = split_added(tok, &tok->trie_raw, parse_special, text, len, true, &a);
    }
    /* 2. normalize the rest, then match the normalized added tokens */
    for (size_t i = 0; i < a.n && st == KT_OK; i++) {
        const kt__piece *pc = &a.v[i];
        if (pc->added_id >= 0) {
            st = plist_add(&b, NULL, 0, pc->added_id, false);
            continue;
        }
        norm.size = 0;
        st = kt__tok_normalize(tok, a.text.ptr + pc->off, pc->len, &norm);
        if (st == KT_OK)
            st = split_added(tok, &tok->trie_norm, parse_special, norm.ptr ? norm.ptr : "",
                             norm.size, pc->first, &b);
    }
    plist_swap(&a, &b);
    /* 3. pre-tokenizers */
    for (size_t k = 0; k < tok->n_pretoks && st == KT_OK; k++) {
        b.n = 0;
        b.text.size = 0;
        st = pretok_step(tok, &tok->pretoks[k], md, &sv, &a, &b);
        plist_swap(&a, &b);
    }
    /* 4. the model, piece by piece */
    bool add_special = flags & KT_ENCODE_ADD_SPECIAL;
    size_t n_before = 0;
    if (add_special && tok->has_post) {
        for (; n_before < tok->n_post && tok->post[n_before].id >= 0 && st == KT_OK; n_before++)
            st = id_push(&out, tok->post[n_before].id);
    }
    wcache cache = {0};
    if (a.n > 64) /* long texts repeat their words: remember each piece's ids */
        cache.slots = kt__calloc(WCACHE_SLOTS, sizeof *cache.slots);
    for (size_t i = 0; i < a.n && st == KT_OK; i++) {
        const kt__piece *pc = &a.v[i];
        const char *piece = a.text.ptr + pc->off;
        if (pc->added_id >= 0) {
            st = id_push(&out, pc->added_id);
            continue;
        }
        wcache_slot *slot = NULL;
        if (cache.slots && pc->len <= WCACHE_MAX_PIECE) {
            slot = wcache_find(&cache, piece, pc->len);
            if (slot->key_len) {
                for (uint32_t k = 0; k < slot->n_ids && st == KT_OK; k++)
                    st = id_push(&out, cache.ids.v[slot->ids_off + k]);
                continue;
            }
        }
        size_t before = out.n;
        if (tok->model == KT__MODEL_TIKTOKEN)
            st = tiktoken_encode(tok, piece, pc->len, &w, &out);
        else
            st = bpe_encode(tok, piece, pc->len, &w, &out);
        if (slot && st == KT_OK)
            wcache_put(&cache, slot, piece, pc->len, out.v + before, out.n - before);
    }
    wcache_free(&cache);
    if (add_special && tok->has_post) {
        for (size_t k = n_before + 1; k < tok->n_post && st == KT_OK; k++)
            st = id_push(&out, tok->post[k].id);
    }

    *ids = out.v;
    *n = out.n;
    *cap = out.cap;
    if (md)
        pcre2_match_data_free(md);
    plist_free(&a);
    plist_free(&b);
    kt__free(w.syms);
    kt__free(w.heap);
    kt__free(sv.v);
    kt_buf_dispose(&norm);
    if (st == KT_ERR_NOMEM)
        return kt__error(KT_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    return st;
}
