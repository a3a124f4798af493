/*
 * Decoding: ids -> token strings -> the decoder chain (tokenizers'
 * decode_chain per decoder, then joined), and the streaming detokenizer that
 * hands out complete UTF-8 characters only.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer_internal.h"

/* A list of strings held in one buffer. */
typedef struct strlist {
    kt_buf text;
    size_t *off, *len;
    size_t n, cap;
} strlist;

static kt_status sl_add(strlist *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        size_t *o = kt__realloc(l->off, cap * sizeof *o);
        if (!o)
            return KT_ERR_NOMEM;
        l->off = o;
        size_t *q = kt__realloc(l->len, cap * sizeof *q);
        if (!q)
            return KT_ERR_NOMEM;
        l->len = q;
        l->cap = cap;
    }
    l->off[l->n] = l->text.size;
    l->len[l->n] = n;
    kt_status st = kt__buf_append(&l->text, s, n);
    if (st == KT_OK)
        l->n++;
    return st;
}

/* Appends to the last string (which must be the most recent text). */
static kt_status sl_extend(strlist *l, const char *s, size_t n)
{
    kt_status st = kt__buf_append(&l->text, s, n);
    if (st == KT_OK)
        l->len[l->n - 1] += n;
    return st;
}

static void sl_reset(strlist *l)
{
    l->n = 0;
    l->text.size = 0;
}

static void sl_free(strlist *l)
{
    kt_buf_dispose(&l->text);
    kt__free(l->off);
    kt__free(l->len);
}

static void sl_swap(strlist *a, strlist *b)
{
    strlist t = *a;
    *a = *b;
    *b = t;
}

/* Byte of a ByteLevel character, or -1. */
static int byte_of_char(uint32_t cp)
{
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp < 256 || cp > 256 + 67)
        return -1;
    /* the moved bytes, in order: 0x00-0x20, 0x7F-0xA0, 0xAD */
    uint32_t k = cp - 256;
    if (k <= 0x20)
        return (int)k;
    if (k <= 0x20 + 34)
        return (int)(0x7F + (k - 0x21));
    if (k == 67)
        return 0xAD;
    return -1;
}

static bool parse_byte_token(const char *s, size_t n, uint8_t *b)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return false;
    unsigned v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else
            return false;
    }
    *b = (uint8_t)v;
    return true;
}

static kt_status dec_step(const kt__dec *d, bool raw, const strlist *in, strlist *out)
{
    kt_status st = KT_OK;
    switch (d->kind) {
    case KT__DEC_BYTELEVEL: {
        /* every token's characters back to bytes (a token with a character
         * outside the map stays as its UTF-8), all joined into one string */
        kt_buf bytes = KT_BUF_INIT;
        for (size_t i = 0; i < in->n && st == KT_OK; i++) {
            const char *s = in->text.ptr + in->off[i];
            size_t n = in->len[i], mark = bytes.size;
            bool mapped = true;
            for (size_t j = 0; j < n && st == KT_OK;) {
                uint32_t cp;
                j += kt__utf8_decode(s + j, n - j, &cp);
                int b = byte_of_char(cp);
                if (b < 0) {
                    mapped = false;
                    break;
                }
                uint8_t c = (uint8_t)b;
                st = kt__buf_append(&bytes, &c, 1);
            }
            if (!mapped) {
                bytes.size = mark;
                st = kt__buf_append(&bytes, s, n);
            }
        }
        if (st == KT_OK) {
            st = sl_add(out, NULL, 0);
            if (st == KT_OK && raw)
                st = sl_extend(out, bytes.ptr, bytes.size);
            else if (st == KT_OK) {
                kt_buf fixed = KT_BUF_INIT;
                st = kt__utf8_append_lossy(&fixed, bytes.ptr ? bytes.ptr : "", bytes.size);
                if (st == KT_OK)
                    st = sl_extend(out, fixed.ptr, fixed.size);
                kt_buf_dispose(&fixed);
            }
        }
        kt_buf_dispose(&bytes);
        return st;
    }
    case KT__DEC_BYTEFALLBACK: {
        /* runs of <0xXX> tokens become the string of their bytes (each byte
         * U+FFFD when the run is not valid UTF-8) */
        kt_buf run = KT_BUF_INIT;
        for (size_t i = 0; i <= in->n && st == KT_OK; i++) {
            uint8_t b;
            bool is_byte = i < in->n &&
                           parse_byte_token(in->text.ptr + in->off[i], in->len[i], &b);
            if (is_byte) {
                st = kt__buf_append(&run, &b, 1);
                continue;
            }
            if (run.size) {
                bool valid = kt__utf8_complete_prefix(run.ptr, run.size) == run.size;
                for (size_t k = 0; valid && k < run.size;) {
                    uint32_t cp;
                    k += kt__utf8_decode(run.ptr + k, run.size - k, &cp);
                    valid = cp != 0xFFFFFFFFu;
                }
                if (valid || raw) {
                    st = sl_add(out, run.ptr, run.size);
                } else {
                    st = sl_add(out, NULL, 0);
                    for (size_t k = 0; k < run.size && st == KT_OK; k++)
                        st = sl_extend(out, "\xEF\xBF\xBD", 3);
                }
                run.size = 0;
            }
            if (i < in->n && st == KT_OK)
                st = sl_add(out, in->text.ptr + in->off[i], in->len[i]);
        }
        kt_buf_dispose(&run);
        return st;
    }
    case KT__DEC_FUSE:
        st = sl_add(out, NULL, 0);
        for (size_t i = 0; i < in->n && st == KT_OK; i++)
            st = sl_extend(out, in->text.ptr + in->off[i], in->len[i]);
        return st;
    case KT__DEC_METASPACE:
        /* the replacement char becomes a space; in the first token it is
         * dropped when a prefix was added on encoding */
        for (size_t i = 0; i < in->n && st == KT_OK; i++) {
            const char *s = in->text.ptr + in->off[i];
            size_t n = in->len[i];
            st = sl_add(out, NULL, 0);
            for (size_t j = 0; j < n && st == KT_OK;) {
                if (j + d->replacement_len <= n &&
                    !memcmp(s + j, d->replacement, d->replacement_len)) {
                    if (!(i == 0 && d->add_prefix_space))
                        st = sl_extend(out, " ", 1);
                    j += d->replacement_len;
                } else {
                    st = sl_extend(out, s + j, 1);
                    j++;
                }
            }
        }
        return st;
    case KT__DEC_REPLACE:
        for (size_t i = 0; i < in->n && st == KT_OK; i++) {
            const char *s = in->text.ptr + in->off[i];
            size_t n = in->len[i];
            st = sl_add(out, NULL, 0);
            if (d->re) {
                pcre2_match_data *md = pcre2_match_data_create(1, NULL);
                if (!md)
                    return KT_ERR_NOMEM;
                size_t from = 0;
                while (st == KT_OK && from <= n) {
                    int rc = pcre2_match(d->re, (PCRE2_SPTR)(s ? s : ""), n, from, 0, md, NULL);
                    if (rc < 0)
                        break;
                    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                    if (ov[1] == ov[0]) { /* an empty match: copy one byte and go on */
                        if (ov[0] >= n)
                            break;
                        st = sl_extend(out, s + from, ov[0] - from + 1);
                        from = ov[0] + 1;
                        continue;
                    }
                    st = sl_extend(out, s + from, ov[0] - from);
                    if (st == KT_OK)
                        st = sl_extend(out, d->content, d->content_len);
                    from = ov[1];
                }
                if (st == KT_OK && from < n)
                    st = sl_extend(out, s + from, n - from);
                pcre2_match_data_free(md);
            } else {
                size_t from = 0;
                for (size_t j = 0; j < n && st == KT_OK;) {
                    if (d->pattern_len && j + d->pattern_len <= n &&
                        !memcmp(s + j, d->pattern, d->pattern_len)) {
                        st = sl_extend(out, s + from, j - from);
                        if (st == KT_OK)
                            st = sl_extend(out, d->content, d->content_len);
                        j += d->pattern_len;
                        from = j;
                    } else {
                        j++;
                    }
                }
                if (st == KT_OK)
                    st = sl_extend(out, s + from, n - from);
            }
        }
        return st;
    case KT__DEC_STRIP:
        /* up to `start` leading and `stop` trailing copies of one character */
        for (size_t i = 0; i < in->n && st == KT_OK; i++) {
            const char *s = in->text.ptr + in->off[i];
            size_t n = in->len[i], lo = 0, hi = n, cl = d->content_len;
            for (uint32_t k = 0; k < d->start && cl && lo + cl <= hi; k++) {
                if (memcmp(s + lo, d->content, cl))
                    break;
                lo += cl;
            }
            for (uint32_t k = 0; k < d->stop && cl && hi >= lo + cl; k++) {
                if (memcmp(s + hi - cl, d->content, cl))
                    break;
                hi -= cl;
            }
            st = sl_add(out, s + lo, hi - lo);
        }
        return st;
    }
    return KT_OK;
}

/* transformers' clean_up_tokenization: no space before punctuation and
 * English contractions. */
static kt_status clean_up_spaces(kt_buf *b, size_t from)
{
    static const char *const pats[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's",
                                       " 've", " 're"};
    static const char *const reps[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t p = 0; p < KT_ARRAY_LEN(pats); p++) {
        size_t pl = strlen(pats[p]), rl = strlen(reps[p]), w = from;
        for (size_t r = from; r < b->size;) {
            if (r + pl <= b->size && !memcmp(b->ptr + r, pats[p], pl)) {
                memmove(b->ptr + w, reps[p], rl);
                w += rl;
                r += pl;
            } else {
                b->ptr[w++] = b->ptr[r++];
            }
        }
        b->size = w;
        if (b->ptr)
            b->ptr[w] = '\0';
    }
    return KT_OK;
}

kt_status kt__tok_decode(const kt_tokenizer *tok, const int32_t *ids, size_t n, uint32_t flags,
                         bool raw, kt_buf *out)
{
    bool skip_special = flags & KT_DECODE_SKIP_SPECIAL;
    strlist a = {0}, b = {0};
    kt_status st = KT_OK;
    for (size_t i = 0; i < n && st == KT_OK; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= tok->n_tokens || !(tok->tokens[id].attrs & KT__TOKEN_EXISTS))
            continue;
        const kt__token *t = &tok->tokens[id];
        if (skip_special && (t->attrs & KT_TOKEN_ATTR_SPECIAL))
            continue;
        st = sl_add(&a, tok->arena.data + t->off, t->len);
    }
    size_t start = out->size;
    if (tok->dec_raw || !tok->n_decs) {
        /* tiktoken: bytes as they are; tokenizers without a decoder join with spaces */
        kt_buf joined = KT_BUF_INIT;
        for (size_t i = 0; i < a.n && st == KT_OK; i++) {
            if (i && !tok->dec_raw)
                st = kt__buf_append(&joined, " ", 1);
            if (st == KT_OK)
                st = kt__buf_append(&joined, a.text.ptr + a.off[i], a.len[i]);
        }
        if (st == KT_OK && raw)
            st = kt__buf_append(out, joined.ptr, joined.size);
        else if (st == KT_OK)
            st = kt__utf8_append_lossy(out, joined.ptr ? joined.ptr : "", joined.size);
        kt_buf_dispose(&joined);
    } else {
        for (size_t k = 0; k < tok->n_decs && st == KT_OK; k++) {
            sl_reset(&b);
            st = dec_step(&tok->decs[k], raw, &a, &b);
            sl_swap(&a, &b);
        }
        for (size_t i = 0; i < a.n && st == KT_OK; i++) {
            if (raw)
                st = kt__buf_append(out, a.text.ptr + a.off[i], a.len[i]);
            else
                st = kt__utf8_append_lossy(out, a.text.ptr + a.off[i], a.len[i]);
        }
    }
    if (st == KT_OK && out->size == start)
        st = kt__buf_reserve(out, 0); /* a NUL-terminated buffer even when empty */
    if (st == KT_OK && out->ptr)
        out->ptr[out->size] = '\0';
    if (st == KT_OK && tok->clean_up_spaces && !raw)
        st = clean_up_spaces(out, start);
    sl_free(&a);
    sl_free(&b);
    if (st == KT_ERR_NOMEM)
        return kt__error(KT_ERR_NOMEM, "out of memory decoding %zu ids", n);
    return st;
}

/* ---- streaming ---------------------------------------------------------- */

struct kt_detokenizer {
    const kt_tokenizer *tok;
    uint32_t flags;
    int32_t *ids; /* [n] the window: ids whose text is not final yet, plus one before */
    size_t n, cap;
    size_t emitted; /* bytes of decode(window) already handed out */
    kt_buf scratch;
};

kt_status kt_detokenizer_create(kt_detokenizer **out, const kt_tokenizer *tok, uint32_t flags)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_detokenizer_create: out is NULL");
    *out = NULL;
    if (!tok)
        return kt__error(KT_ERR_INVALID_ARG, "kt_detokenizer_create: tok is NULL");
    if (flags & ~KT_DECODE_SKIP_SPECIAL)
        return kt__error(KT_ERR_INVALID_ARG, "kt_detokenizer_create: unknown flags 0x%x",
                         flags & ~KT_DECODE_SKIP_SPECIAL);
    kt_detokenizer *d = kt__calloc(1, sizeof *d);
    if (!d)
        return KT_ERR_NOMEM;
    d->tok = tok;
    d->flags = flags;
    *out = d;
    return KT_OK;
}

void kt_detokenizer_free(kt_detokenizer *d)
{
    if (!d)
        return;
    kt__free(d->ids);
    kt_buf_dispose(&d->scratch);
    kt__free(d);
}

kt_status kt_detokenizer_feed(kt_detokenizer *d, int32_t id, kt_buf *out)
{
    if (!d || !out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_detokenizer_feed: NULL argument");
    int32_t *v = kt__grow(d->ids, d->n, &d->cap, sizeof *v, 8);
    if (!v)
        return KT_ERR_NOMEM;
    d->ids = v;
    d->ids[d->n++] = id;
    d->scratch.size = 0;
    kt_status st = kt__tok_decode(d->tok, d->ids, d->n, d->flags, true, &d->scratch);
    if (st < 0) {
        d->n--;
        return st;
    }
    const char *s = d->scratch.ptr;
    size_t size = d->scratch.size;
    if (d->emitted > size) /* not a prefix any more (should not happen): resync */
        d->emitted = size;
    size_t done = d->emitted + kt__utf8_complete_prefix(s + d->emitted, size - d->emitted);
    size_t out_mark = out->size;
    st = kt__utf8_append_lossy(out, s + d->emitted, done - d->emitted);
    if (st < 0) {
        out->size = out_mark;
        d->n--;
        return st;
    }
    d->emitted = done;
    if (done == size && d->n > 1) {
        /* nothing pending: keep only this id as context for the next one */
        d->ids[0] = id;
        d->n = 1;
        d->scratch.size = 0;
        st = kt__tok_decode(d->tok, d->ids, 1, d->flags, true, &d->scratch);
        if (st < 0)
            return st;
        d->emitted = d->scratch.size;
    }
    return KT_OK;
}

kt_status kt_detokenizer_flush(kt_detokenizer *d, kt_buf *out)
{
    if (!d || !out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_detokenizer_flush: NULL argument");
    kt_status st = KT_OK;
    if (d->n) {
        d->scratch.size = 0;
        st = kt__tok_decode(d->tok, d->ids, d->n, d->flags, true, &d->scratch);
        if (st == KT_OK && d->scratch.size > d->emitted)
            st = kt__utf8_append_lossy(out, d->scratch.ptr + d->emitted,
                                       d->scratch.size - d->emitted);
    }
    if (st == KT_OK)
        st = kt__buf_reserve(out, 0);
    d->n = 0;
    d->emitted = 0;
    return st;
}
