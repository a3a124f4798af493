/* Jinja engine: filters, tests, str/list/dict methods and global functions,
 * with Jinja2 3.1 / Python 3 semantics and transformers' additions
 * (tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

#define OOM(r, at) kt__jr_oom(r, at)

static jv mkstr(jbuf *b)
{
    return jv_str(b->p ? b->p : "", b->n);
}

static jv mklist(jlist *l)
{
    return kt__jv_list(l);
}

/* *out = a new list holding a copy of items[0..n). */
static int list_copy(jrender *r, const jnode *at, const jv *items, size_t n, jv *out)
{
    jlist *l = kt__jlist_new(r->a, n);
    if (!l)
        return OOM(r, at);
    if (n)
        memcpy(l->items, items, n * sizeof(jv));
    l->n = n;
    *out = mklist(l);
    return 0;
}

static bool is_int_like(jv v)
{
    return v.type == JV_INT || v.type == JV_BOOL;
}

static int64_t as_int(jv v)
{
    if (v.type == JV_FLOAT) /* callers pass ints; never convert out of range */
        return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? (int64_t)v.u.f : 0;
    return v.type == JV_BOOL ? (int64_t)v.u.b : v.u.i;
}

static int need_int(jrender *r, const jnode *at, jv v, const char *what, int64_t *out)
{
    if (!is_int_like(v))
        return kt__jr_fail(r, at, "%s expects an integer, got '%s'", what, kt__jv_type_name(v));
    *out = as_int(v);
    return 0;
}

/* ------------------------------------------------------------ case maps */

static uint32_t cp_upper(uint32_t c)
{
    if (c < 0x80)
        return c >= 'a' && c <= 'z' ? c - 32 : c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7))
        return c - 32;
    if (c == 0xFF)
        return 0x178;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
        return c & ~1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
        return (c & 1) ? c : c - 1;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2)
        return c - 32;
    if (c == 0x3C2)
        return 0x3A3;
    if (c >= 0x430 && c <= 0x44F)
        return c - 32;
    if (c >= 0x450 && c <= 0x45F)
        return c - 80;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if (c < 0x80)
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7))
        return c + 32;
    if (c == 0x178)
        return 0xFF;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
        return c | 1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
        return (c & 1) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2)
        return c + 32;
    if (c >= 0x410 && c <= 0x42F)
        return c + 32;
    if (c >= 0x400 && c <= 0x40F)
        return c + 80;
    return c;
}

static bool cp_cased(uint32_t c)
{
    return cp_upper(c) != c || cp_lower(c) != c || c == 0xDF;
}

static bool cp_isalpha(uint32_t c)
{
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    return cp_cased(c) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) ||
           (c >= 0xAC00 && c <= 0xD7A3);
}

static bool cp_isdigit(uint32_t c)
{
    return c >= '0' && c <= '9';
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_SWAP, CASE_JTITLE };

static bool jtitle_sep(uint32_t c)
{
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || kt__uni_isspace(c);
}

static int change_case(jrender *r, const jnode *at, jv s, int mode, jv *out)
{
    jbuf b = {NULL, 0, 0, r->a, 0};
    bool prev_cased = false, first = true, prev_sep = true;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t c = kt__utf8_next(s.u.s.p, s.u.s.n, &i), o = c;
        switch (mode) {
        case CASE_UPPER: o = cp_upper(c); break;
        case CASE_LOWER:
            o = cp_lower(c);
            if (c == 0x3A3 && prev_cased) { /* final sigma at the end of a word */
                size_t j = i;
                if (j >= s.u.s.n || !cp_cased(kt__utf8_next(s.u.s.p, s.u.s.n, &j)))
                    o = 0x3C2;
            }
            prev_cased = cp_cased(c);
            break;
        case CASE_TITLE:
            o = prev_cased ? cp_lower(c) : cp_upper(c);
            prev_cased = cp_cased(c);
            break;
        case CASE_CAPITALIZE: o = first ? cp_upper(c) : cp_lower(c); break;
        case CASE_SWAP: o = cp_upper(c) != c ? cp_upper(c) : cp_lower(c); break;
        case CASE_JTITLE: {
            /* Jinja's title filter: split on [-\s({[<]+, then item[0].upper() + rest.lower(). */
            bool sep = jtitle_sep(c);
            o = sep ? c : prev_sep ? cp_upper(c) : cp_lower(c);
            prev_sep = sep;
            break;
        }
        }
        first = false;
        if (c == 0xDF && (mode == CASE_UPPER || (mode == CASE_TITLE && o == 0xDF))) {
            if (!kt__jbuf_puts(&b, mode == CASE_UPPER ? "SS" : "Ss"))
                return OOM(r, at);
            continue;
        }
        if (c >= 0xDC80 && c <= 0xDCFF) { /* invalid byte passes through */
            char byte = (char)(c & 0xFF);
            if (!kt__jbuf_put(&b, &byte, 1))
                return OOM(r, at);
            continue;
        }
        if (!kt__jbuf_put_utf8(&b, o))
            return OOM(r, at);
    }
    *out = mkstr(&b);
    return 0;
}

/* ------------------------------------------------------------- strings */

static bool in_chars(uint32_t c, jv chars)
{
    if (chars.type != JV_STR)
        return kt__uni_isspace(c);
    for (size_t i = 0; i < chars.u.s.n;)
        if (kt__utf8_next(chars.u.s.p, chars.u.s.n, &i) == c)
            return true;
    return false;
}

/* str.strip family: which = 1 left, 2 right, 3 both. chars: JV_STR or none. */
static jv str_strip(jv s, jv chars, int which)
{
    const char *p = s.u.s.p;
    size_t start = 0, end = s.u.s.n;
    if (which & 1) {
        while (start < end) {
            size_t j = start;
            uint32_t c = kt__utf8_next(p, end, &j);
            if (!in_chars(c, chars))
                break;
            start = j;
        }
    }
    if (which & 2) {
        while (end > start) {
            size_t b = end - 1;
            while (b > start && ((unsigned char)p[b] & 0xC0) == 0x80)
                b--;
            size_t j = b;
            uint32_t c = kt__utf8_next(p, end, &j);
            if (j != end || !in_chars(c, chars))
                break;
            end = b;
        }
    }
    return jv_str(p + start, end - start);
}

static const char *memfind(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0)
        return h;
    if (nn > hn)
        return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn))
            return h + i;
    return NULL;
}

static const char *memrfind(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn > hn)
        return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, n, nn))
            return h + i;
    return NULL;
}

/* Byte-level whitespace test that never matches inside a UTF-8 sequence. */
static bool ascii_space(char c)
{
    return (unsigned char)c < 0x80 && kt__uni_isspace((unsigned char)c);
}

static int str_split(jrender *r, const jnode *at, jv s, jv sep, int64_t maxsplit, bool right,
                     jv *out)
{
    jlist *l = kt__jlist_new(r->a, 0);
    if (!l)
        return OOM(r, at);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (sep.type == JV_STR) {
        if (sep.u.s.n == 0)
            return kt__jr_fail(r, at, "empty separator");
        if (!right) {
            size_t pos = 0;
            while (maxsplit < 0 || (int64_t)l->n < maxsplit) {
                const char *f = memfind(p + pos, n - pos, sep.u.s.p, sep.u.s.n);
                if (!f)
                    break;
                size_t k = (size_t)(f - p);
                if (!kt__jlist_push(r->a, l, jv_str(p + pos, k - pos)))
                    return OOM(r, at);
                pos = k + sep.u.s.n;
            }
            if (!kt__jlist_push(r->a, l, jv_str(p + pos, n - pos)))
                return OOM(r, at);
        } else {
            size_t end = n;
            jlist *rev = kt__jlist_new(r->a, 0);
            if (!rev)
                return OOM(r, at);
            while (maxsplit < 0 || (int64_t)rev->n < maxsplit) {
                const char *f = memrfind(p, end, sep.u.s.p, sep.u.s.n);
                if (!f)
                    break;
                size_t k = (size_t)(f - p);
                if (!kt__jlist_push(r->a, rev, jv_str(p + k + sep.u.s.n, end - k - sep.u.s.n)))
                    return OOM(r, at);
                end = k;
            }
            if (!kt__jlist_push(r->a, l, jv_str(p, end)))
                return OOM(r, at);
            for (size_t i = rev->n; i-- > 0;)
                if (!kt__jlist_push(r->a, l, rev->items[i]))
                    return OOM(r, at);
        }
        *out = mklist(l);
        return 0;
    }
    /* Whitespace split: runs of whitespace, no empty strings. */
    if (!right) {
        size_t i = 0;
        for (;;) {
            while (i < n) {
                size_t j = i;
                if (!kt__uni_isspace(kt__utf8_next(p, n, &j)))
                    break;
                i = j;
            }
            if (i >= n)
                break;
            size_t start = i;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                /* The unsplit rest keeps its trailing whitespace (Python). */
                if (!kt__jlist_push(r->a, l, jv_str(p + start, n - start)))
                    return OOM(r, at);
                break;
            }
            while (i < n) {
                size_t j = i;
                if (kt__uni_isspace(kt__utf8_next(p, n, &j)))
                    break;
                i = j;
            }
            if (!kt__jlist_push(r->a, l, jv_str(p + start, i - start)))
                return OOM(r, at);
        }
    } else {
        /* rsplit(None, maxsplit): words from the right; the unsplit rest
         * keeps its leading whitespace. */
        jlist *rev = kt__jlist_new(r->a, 0);
        if (!rev)
            return OOM(r, at);
        size_t end = n;
        for (;;) {
            while (end > 0 && ascii_space(p[end - 1]))
                end--;
            if (end == 0)
                break;
            if (maxsplit >= 0 && (int64_t)rev->n >= maxsplit) {
                if (!kt__jlist_push(r->a, rev, jv_str(p, end)))
                    return OOM(r, at);
                break;
            }
            size_t k = end;
            while (k > 0 && !ascii_space(p[k - 1]))
                k--;
            if (!kt__jlist_push(r->a, rev, jv_str(p + k, end - k)))
                return OOM(r, at);
            end = k;
        }
        for (size_t i = rev->n; i-- > 0;)
            if (!kt__jlist_push(r->a, l, rev->items[i]))
                return OOM(r, at);
    }
    *out = mklist(l);
    return 0;
}

static int str_replace(jrender *r, const jnode *at, jv s, jv old, jv new, int64_t count,
                       jv *out)
{
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (old.u.s.n == 0) {
        /* Python inserts `new` before every code point and at the end. */
        int64_t done = 0;
        size_t i = 0;
        for (;;) {
            if (count < 0 || done < count) {
                if (!kt__jbuf_put(&b, new.u.s.p, new.u.s.n))
                    return OOM(r, at);
                done++;
            }
            if (i >= n)
                break;
            size_t j = i;
            kt__utf8_next(p, n, &j);
            if (!kt__jbuf_put(&b, p + i, j - i))
                return OOM(r, at);
            i = j;
        }
        *out = mkstr(&b);
        return 0;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        const char *f = memfind(p + pos, n - pos, old.u.s.p, old.u.s.n);
        if (!f)
            break;
        size_t k = (size_t)(f - p);
        if (!kt__jbuf_put(&b, p + pos, k - pos) || !kt__jbuf_put(&b, new.u.s.p, new.u.s.n))
            return OOM(r, at);
        pos = k + old.u.s.n;
        done++;
    }
    if (done == 0) {
        *out = s;
        return 0;
    }
    if (!kt__jbuf_put(&b, p + pos, n - pos))
        return OOM(r, at);
    *out = mkstr(&b);
    return 0;
}

static size_t cp_index_of(const char *p, size_t byte_off)
{
    return kt__utf8_len(p, byte_off);
}

/* str.find/rfind/index/rindex/count over s[start:end] (code point bounds). */
static int str_search(jrender *r, const jnode *at, jv s, const jargs *args, int id, jv *out)
{
    jv sub, vs, ve;
    if (!kt__jargs_get(args, 0, NULL, &sub) || sub.type != JV_STR)
        return kt__jr_fail(r, at, "must be str");
    size_t len = kt__utf8_len(s.u.s.p, s.u.s.n);
    int64_t start = 0, end = (int64_t)len;
    if (kt__jargs_get(args, 1, NULL, &vs) && is_int_like(vs)) {
        start = as_int(vs);
        if (start < 0)
            start = start + (int64_t)len < 0 ? 0 : start + (int64_t)len;
    }
    if (kt__jargs_get(args, 2, NULL, &ve) && is_int_like(ve)) {
        end = as_int(ve);
        if (end < 0)
            end = end + (int64_t)len < 0 ? 0 : end + (int64_t)len;
    }
    if (end > (int64_t)len)
        end = (int64_t)len;
    const char *p = s.u.s.p;
    size_t b0 = 0, b1 = 0;
    if (start <= end) {
        size_t i = 0, k = 0;
        while (i < s.u.s.n && (int64_t)k < start) {
            kt__utf8_next(p, s.u.s.n, &i);
            k++;
        }
        b0 = i;
        while (i < s.u.s.n && (int64_t)k < end) {
            kt__utf8_next(p, s.u.s.n, &i);
            k++;
        }
        b1 = i;
    }
    if (id == JF_S_COUNT) {
        if (start > end) {
            *out = jv_int(0);
            return 0;
        }
        if (sub.u.s.n == 0) {
            *out = jv_int(end - start + 1);
            return 0;
        }
        int64_t c = 0;
        size_t pos = b0;
        const char *f;
        while ((f = memfind(p + pos, b1 - pos, sub.u.s.p, sub.u.s.n))) {
            c++;
            pos = (size_t)(f - p) + sub.u.s.n;
        }
        *out = jv_int(c);
        return 0;
    }
    const char *f = NULL;
    if (start <= end) {
        bool rev = id == JF_S_RFIND || id == JF_S_RINDEX;
        f = rev ? memrfind(p + b0, b1 - b0, sub.u.s.p, sub.u.s.n)
                : memfind(p + b0, b1 - b0, sub.u.s.p, sub.u.s.n);
    }
    if (!f) {
        if (id == JF_S_INDEX || id == JF_S_RINDEX)
            return kt__jr_fail(r, at, "substring not found");
        *out = jv_int(-1);
        return 0;
    }
    *out = jv_int((int64_t)cp_index_of(p, (size_t)(f - p)));
    return 0;
}

static bool affix_match(jv s, jv affix, bool end)
{
    if (affix.u.s.n > s.u.s.n)
        return false;
    const char *p = end ? s.u.s.p + s.u.s.n - affix.u.s.n : s.u.s.p;
    return affix.u.s.n == 0 || !memcmp(p, affix.u.s.p, affix.u.s.n);
}

static int str_affix(jrender *r, const jnode *at, jv s, const jargs *args, bool end, jv *out)
{
    jv a, vs;
    if (!kt__jargs_get(args, 0, NULL, &a))
        return kt__jr_fail(r, at, "%s() takes at least 1 argument",
                           end ? "endswith" : "startswith");
    if (kt__jargs_get(args, 1, NULL, &vs) && is_int_like(vs)) {
        int64_t st = as_int(vs);
        size_t len = kt__utf8_len(s.u.s.p, s.u.s.n);
        if (st < 0)
            st = st + (int64_t)len < 0 ? 0 : st + (int64_t)len;
        if ((size_t)st > len) {
            *out = jv_bool(false);
            return 0;
        }
        size_t off = 0;
        for (int64_t k = 0; k < st; k++)
            kt__utf8_next(s.u.s.p, s.u.s.n, &off);
        s = jv_str(s.u.s.p + off, s.u.s.n - off);
    }
    if (a.type == JV_STR) {
        *out = jv_bool(affix_match(s, a, end));
        return 0;
    }
    if (a.type == JV_LIST && a.u.l->tuple) {
        for (size_t i = 0; i < a.u.l->n; i++) {
            if (a.u.l->items[i].type != JV_STR)
                return kt__jr_fail(r, at, "tuple for %s must only contain str",
                                   end ? "endswith" : "startswith");
            if (affix_match(s, a.u.l->items[i], end)) {
                *out = jv_bool(true);
                return 0;
            }
        }
        *out = jv_bool(false);
        return 0;
    }
    return kt__jr_fail(r, at, "%s first arg must be str or a tuple of str, not %s",
                       end ? "endswith" : "startswith", kt__jv_type_name(a));
}

static int str_join(jrender *r, const jnode *at, jv sep, jv iterable, jv *out)
{
    const jv *items;
    size_t n;
    if (kt__jr_iter(r, at, iterable, &items, &n) < 0)
        return -1;
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    for (size_t i = 0; i < n; i++) {
        if (items[i].type != JV_STR)
            return kt__jr_fail(r, at, "sequence item %zu: expected str instance, %s found", i,
                               kt__jv_type_name(items[i]));
        if ((i && !kt__jbuf_put(&b, sep.u.s.p, sep.u.s.n)) ||
            !kt__jbuf_put(&b, items[i].u.s.p, items[i].u.s.n))
            return OOM(r, at);
    }
    *out = mkstr(&b);
    return 0;
}

static int str_pad(jrender *r, const jnode *at, jv s, const jargs *args, int how, jv *out)
{
    /* how: 0 center, 1 ljust, 2 rjust, 3 zfill */
    jv w, f;
    int64_t width = 0;
    if (!kt__jargs_get(args, 0, "width", &w) || need_int(r, at, w, "width", &width) < 0)
        return kt__jr_fail(r, at, "padding needs an integer width");
    const char *fill = how == 3 ? "0" : " ";
    size_t filln = 1;
    if (how != 3 && kt__jargs_get(args, 1, "fillchar", &f)) {
        if (f.type != JV_STR || kt__utf8_len(f.u.s.p, f.u.s.n) != 1)
            return kt__jr_fail(r, at, "the fill character must be exactly one character long");
        fill = f.u.s.p;
        filln = f.u.s.n;
    }
    int64_t len = (int64_t)kt__utf8_len(s.u.s.p, s.u.s.n);
    if (width <= len) {
        *out = s;
        return 0;
    }
    if (width - len > (int64_t)r->lim.max_output)
        return OOM(r, at);
    int64_t total = width - len, left;
    if (how == 0)
        left = total / 2 + ((total & width & 1) ? 1 : 0);
    else if (how == 1)
        left = 0;
    else
        left = total;
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    size_t body = 0;
    if (how == 3 && s.u.s.n && (s.u.s.p[0] == '+' || s.u.s.p[0] == '-')) {
        if (!kt__jbuf_put(&b, s.u.s.p, 1))
            return OOM(r, at);
        body = 1;
    }
    for (int64_t k = 0; k < left; k++)
        if (!kt__jbuf_put(&b, fill, filln))
            return OOM(r, at);
    if (!kt__jbuf_put(&b, s.u.s.p + body, s.u.s.n - body))
        return OOM(r, at);
    for (int64_t k = left; k < total; k++)
        if (!kt__jbuf_put(&b, fill, filln))
            return OOM(r, at);
    *out = mkstr(&b);
    return 0;
}

static int str_partition(jrender *r, const jnode *at, jv s, jv sep, bool right, jv *out)
{
    if (sep.type != JV_STR || sep.u.s.n == 0)
        return kt__jr_fail(r, at, "partition needs a non-empty string separator");
    jlist *l = kt__jlist_new(r->a, 3);
    if (!l)
        return OOM(r, at);
    l->tuple = true;
    const char *f = right ? memrfind(s.u.s.p, s.u.s.n, sep.u.s.p, sep.u.s.n)
                          : memfind(s.u.s.p, s.u.s.n, sep.u.s.p, sep.u.s.n);
    jv empty = jv_str("", 0);
    if (!f) {
        l->items[0] = right ? empty : s;
        l->items[1] = empty;
        l->items[2] = right ? s : empty;
    } else {
        size_t k = (size_t)(f - s.u.s.p);
        l->items[0] = jv_str(s.u.s.p, k);
        l->items[1] = sep;
        l->items[2] = jv_str(s.u.s.p + k + sep.u.s.n, s.u.s.n - k - sep.u.s.n);
    }
    l->n = 3;
    *out = mklist(l);
    return 0;
}

static int str_splitlines(jrender *r, const jnode *at, jv s, bool keepends, jv *out)
{
    jlist *l = kt__jlist_new(r->a, 0);
    if (!l)
        return OOM(r, at);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, start = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint32_t c = kt__utf8_next(p, n, &j);
        bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                   c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) {
            i = j;
            continue;
        }
        size_t end = j;
        if (c == '\r' && j < n && p[j] == '\n')
            end = j + 1;
        if (!kt__jlist_push(r->a, l, jv_str(p + start, (keepends ? end : i) - start)))
            return OOM(r, at);
        start = i = end;
    }
    if (start < n && !kt__jlist_push(r->a, l, jv_str(p + start, n - start)))
        return OOM(r, at);
    *out = mklist(l);
    return 0;
}

/* str.format: {} {0} {name} with {{ }} escapes; format specs are ignored
 * except for plain use. */
static int str_format(jrender *r, const jnode *at, jv fmt, const jargs *args, jv *out)
{
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n, auto_idx = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '{' && i + 1 < n && p[i + 1] == '{') {
            if (!kt__jbuf_putc(&b, '{'))
                return OOM(r, at);
            i++;
            continue;
        }
        if (c == '}' && i + 1 < n && p[i + 1] == '}') {
            if (!kt__jbuf_putc(&b, '}'))
                return OOM(r, at);
            i++;
            continue;
        }
        if (c != '{') {
            if (!kt__jbuf_putc(&b, c))
                return OOM(r, at);
            continue;
        }
        size_t close = i + 1;
        while (close < n && p[close] != '}')
            close++;
        if (close >= n)
            return kt__jr_fail(r, at, "single '{' encountered in format string");
        size_t fe = i + 1;
        while (fe < close && p[fe] != ':' && p[fe] != '!')
            fe++;
        jv v;
        if (fe == i + 1) {
            if (!kt__jargs_get(args, auto_idx++, NULL, &v))
                return kt__jr_fail(r, at, "format: not enough positional arguments");
        } else if (p[i + 1] >= '0' && p[i + 1] <= '9') {
            size_t idx = (size_t)strtoul(p + i + 1, NULL, 10);
            if (!kt__jargs_get(args, idx, NULL, &v))
                return kt__jr_fail(r, at, "format: replacement index out of range");
        } else {
            bool found = false;
            for (size_t k = 0; k < args->nkw; k++)
                if (strlen(args->kwn[k]) == fe - i - 1 &&
                    !memcmp(args->kwn[k], p + i + 1, fe - i - 1)) {
                    v = args->kwv[k];
                    found = true;
                }
            if (!found)
                return kt__jr_fail(r, at, "format: missing keyword argument '%.*s'",
                                   (int)(fe - i - 1), p + i + 1);
        }
        if (!kt__jv_str(&b, v))
            return OOM(r, at);
        i = close;
    }
    *out = mkstr(&b);
    return 0;
}

/* ------------------------------------------------------ printf-style % */

int kt__jinja_percent_format(jrender *r, const jnode *at, jv fmt, jv args, jv *out)
{
    const jv *items = &args;
    size_t nitems = 1, next = 0;
    jdict *mapping = NULL;
    if (args.type == JV_LIST && args.u.l->tuple) {
        items = args.u.l->items;
        nitems = args.u.l->n;
    } else if (args.type == JV_DICT) {
        mapping = args.u.d;
    }
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            size_t j = i;
            while (j < n && p[j] != '%')
                j++;
            if (!kt__jbuf_put(&b, p + i, j - i))
                return OOM(r, at);
            i = j - 1;
            continue;
        }
        i++;
        if (i >= n)
            return kt__jr_fail(r, at, "incomplete format");
        jv v;
        bool have = false;
        if (p[i] == '(') {
            size_t j = i + 1;
            while (j < n && p[j] != ')')
                j++;
            if (j >= n || !mapping)
                return kt__jr_fail(r, at, "format requires a mapping");
            jv *mv = kt__jdict_get_str(mapping, p + i + 1, j - i - 1);
            if (!mv)
                return kt__jr_fail(r, at, "format key '%.*s' missing", (int)(j - i - 1),
                                   p + i + 1);
            v = *mv;
            have = true;
            i = j + 1;
        }
        char spec[32];
        size_t sl = 0;
        spec[sl++] = '%';
        while (i < n && strchr("-+ #0", p[i]) && sl < 8)
            spec[sl++] = p[i++];
        while (i < n && p[i] >= '0' && p[i] <= '9' && sl < 16)
            spec[sl++] = p[i++];
        if (i < n && p[i] == '.') {
            spec[sl++] = p[i++];
            while (i < n && p[i] >= '0' && p[i] <= '9' && sl < 24)
                spec[sl++] = p[i++];
        }
        if (i >= n)
            return kt__jr_fail(r, at, "incomplete format");
        char conv = p[i];
        if (conv == '%') {
            if (!kt__jbuf_putc(&b, '%'))
                return OOM(r, at);
            continue;
        }
        if (!have) {
            if (mapping) {
                v = args;
            } else {
                if (next >= nitems)
                    return kt__jr_fail(r, at, "not enough arguments for format string");
                v = items[next++];
            }
        }
        char tmp[512];
        int len = 0;
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            jbuf sb = {NULL, 0, 0, r->a, r->lim.max_output};
            if (!(conv == 's' ? kt__jv_str(&sb, v) : kt__jv_repr(&sb, v)))
                return OOM(r, at);
            /* width/precision apply to code points; handle the common no-spec case. */
            if (sl == 1) {
                if (!kt__jbuf_put(&b, sb.p ? sb.p : "", sb.n))
                    return OOM(r, at);
                continue;
            }
            spec[sl++] = 's';
            spec[sl] = 0;
            char *big = kt__ja_alloc(r->a, sb.n + 600);
            if (!big)
                return OOM(r, at);
            len = snprintf(big, sb.n + 600, spec, sb.p ? sb.p : "");
            if (len < 0 || !kt__jbuf_put(&b, big, KT_MIN((size_t)len, sb.n + 599)))
                return OOM(r, at);
            continue;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o':
        case 'c':
            if (v.type == JV_FLOAT && conv != 'c') {
                if (!isfinite(v.u.f))
                    return kt__jr_fail(r, at, "cannot convert float %s to integer",
                                       isnan(v.u.f) ? "NaN" : "infinity");
                if (fabs(v.u.f) >= 9.2e18) {
                    if (conv != 'd' && conv != 'i' && conv != 'u')
                        return kt__jr_fail(r, at, "%%%c of a float beyond 64 bits", conv);
                    /* Python prints the float's exact integer value. */
                    len = snprintf(tmp, sizeof tmp, "%.0f", trunc(v.u.f));
                    if (len < 0 || !kt__jbuf_put(&b, tmp, KT_MIN((size_t)len, sizeof tmp - 1)))
                        return OOM(r, at);
                    continue;
                }
                v = jv_int((int64_t)v.u.f);
            }
            if (!is_int_like(v))
                return kt__jr_fail(r, at, "%%%c format: a number is required, not %s", conv,
                                   kt__jv_type_name(v));
            if (conv == 'c') {
                if (!kt__jbuf_put_utf8(&b, (uint32_t)as_int(v)))
                    return OOM(r, at);
                continue;
            }
            spec[sl++] = 'l';
            spec[sl++] = 'l';
            spec[sl++] = conv == 'i' || conv == 'u' ? 'd' : conv;
            spec[sl] = 0;
            len = snprintf(tmp, sizeof tmp, spec, (long long)as_int(v));
            break;
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
            if (v.type != JV_FLOAT && !is_int_like(v))
                return kt__jr_fail(r, at, "must be real number, not %s", kt__jv_type_name(v));
            double d = v.type == JV_FLOAT ? v.u.f : (double)as_int(v);
            spec[sl++] = conv;
            spec[sl] = 0;
            len = snprintf(tmp, sizeof tmp, spec, d);
            break;
        }
        default:
            return kt__jr_fail(r, at, "unsupported format character '%c'", conv);
        }
        if (len < 0)
            return kt__jr_fail(r, at, "bad format");
        if (!kt__jbuf_put(&b, tmp, KT_MIN((size_t)len, sizeof tmp - 1)))
            return OOM(r, at);
    }
    /* Python skips this check when args is a mapping or a list (PyMapping_Check). */
    bool lenient = mapping || (args.type == JV_LIST && !args.u.l->tuple);
    if (!lenient && next < nitems)
        return kt__jr_fail(r, at, "not all arguments converted during string formatting");
    *out = mkstr(&b);
    return 0;
}

/* ----------------------------------------------------------------- sort */

typedef struct sort_ctx {
    jrender *r;
    const jnode *at;
    bool case_sensitive, reverse, failed;
} sort_ctx;

static jv sort_key_fold(sort_ctx *c, jv v)
{
    if (c->case_sensitive || v.type != JV_STR)
        return v;
    jv out;
    if (change_case(c->r, c->at, v, CASE_LOWER, &out) < 0) {
        c->failed = true;
        return v;
    }
    return out;
}

static int sort_cmp(sort_ctx *c, jv a, jv b)
{
    bool ok;
    int r = kt__jv_compare(a, b, &ok);
    if (!ok && !c->failed) {
        c->failed = true;
        kt__jr_fail(c->r, c->at, "'<' not supported between instances of '%s' and '%s'",
                    kt__jv_type_name(a), kt__jv_type_name(b));
    }
    return c->reverse ? -r : r;
}

/* Stable merge sort of (keys, vals) pairs by key. */
static void merge_sort(sort_ctx *c, jv *keys, jv *vals, jv *tk, jv *tv, size_t n)
{
    if (n < 2 || c->failed)
        return;
    size_t mid = n / 2;
    merge_sort(c, keys, vals, tk, tv, mid);
    merge_sort(c, keys + mid, vals + mid, tk, tv, n - mid);
    size_t i = 0, j = mid, k = 0;
    while (i < mid && j < n) {
        if (sort_cmp(c, keys[j], keys[i]) < 0) {
            tk[k] = keys[j];
            tv[k++] = vals[j++];
        } else {
            tk[k] = keys[i];
            tv[k++] = vals[i++];
        }
    }
    while (i < mid) {
        tk[k] = keys[i];
        tv[k++] = vals[i++];
    }
    while (j < n) {
        tk[k] = keys[j];
        tv[k++] = vals[j++];
    }
    memcpy(keys, tk, n * sizeof(jv));
    memcpy(vals, tv, n * sizeof(jv));
}

/* Jinja's attribute getter: "a.b.0" walks getitem for each part. */
static int get_attr_path(jrender *r, const jnode *at, jv v, jv attr, jv *out)
{
    if (attr.type == JV_INT)
        return kt__jr_getitem(r, at, v, attr, out);
    if (attr.type != JV_STR)
        return kt__jr_fail(r, at, "attribute must be a string or an integer");
    const char *p = attr.u.s.p;
    size_t n = attr.u.s.n, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '.')
            continue;
        jv key = jv_str(p + start, i - start);
        bool digits = i > start;
        for (size_t k = start; k < i; k++)
            if (p[k] < '0' || p[k] > '9')
                digits = false;
        if (digits)
            key = jv_int(strtoll(p + start, NULL, 10));
        if (kt__jr_getitem(r, at, v, key, &v) < 0)
            return -1;
        start = i + 1;
    }
    *out = v;
    return 0;
}

/* The attribute path of an item; a missing one reads as *fallback when there is one (map,
 * groupby: default=). */
static int attr_or_default(jrender *r, const jnode *at, jv item, jv attribute, const jv *fallback,
                           jv *out)
{
    if (get_attr_path(r, at, item, attribute, out) < 0)
        return -1;
    if (out->type == JV_UNDEF && fallback)
        *out = *fallback;
    return 0;
}

/* Stable sort of items by key (sort, dictsort, groupby): the key is the item or, with
 * by_attribute, its attribute path (or *fallback where missing), folded as c says. The sorted
 * keys and items land in *keys_out and *vals_out (arena memory). */
static int sort_by_key(sort_ctx *c, const jv *items, size_t n, bool by_attribute, jv attribute,
                       const jv *fallback, jv **keys_out, jv **vals_out)
{
    jrender *r = c->r;
    size_t m = n ? n : 1;
    jv *keys = kt__ja_alloc(r->a, m * sizeof(jv)), *vals = kt__ja_alloc(r->a, m * sizeof(jv));
    jv *tk = kt__ja_alloc(r->a, m * sizeof(jv)), *tv = kt__ja_alloc(r->a, m * sizeof(jv));
    if (!keys || !vals || !tk || !tv)
        return OOM(r, c->at);
    for (size_t i = 0; i < n; i++) {
        jv k = items[i];
        if (by_attribute && attr_or_default(r, c->at, k, attribute, fallback, &k) < 0)
            return -1;
        keys[i] = sort_key_fold(c, k);
        vals[i] = items[i];
    }
    merge_sort(c, keys, vals, tk, tv, n);
    if (c->failed)
        return -1;
    *keys_out = keys;
    *vals_out = vals;
    return 0;
}

static int sorted_list(jrender *r, const jnode *at, jv value, bool reverse, bool case_sensitive,
                       jv attribute, jv *out)
{
    const jv *items;
    size_t n;
    if (kt__jr_iter(r, at, value, &items, &n) < 0)
        return -1;
    sort_ctx c = {r, at, case_sensitive, reverse, false};
    bool by_attribute = attribute.type != JV_NONE && attribute.type != JV_UNDEF;
    jv *keys, *vals;
    if (sort_by_key(&c, items, n, by_attribute, attribute, NULL, &keys, &vals) < 0)
        return -1;
    return list_copy(r, at, vals, n, out);
}

/* ------------------------------------------------------------------ tests */

static int jtest(jrender *r, const jnode *at, const char *name, jv v, const jargs *args,
                 bool *out)
{
    jv a = jv_undef();
    bool has_a = kt__jargs_get(args, 0, NULL, &a);
    static const char *const unary[] = {
        "defined", "undefined", "none", "boolean", "false", "true", "integer", "float",
        "number", "string", "mapping", "iterable", "sequence", "callable", "escaped", "lower",
        "upper", "even", "odd", NULL};
    for (size_t i = 0; unary[i]; i++)
        if (!strcmp(name, unary[i]) && args->npos + args->nkw > 0)
            return kt__jr_fail(r, at, "test_%s() takes 1 positional argument but %zu were given",
                               name, args->npos + args->nkw + 1);
    if (!strcmp(name, "defined"))
        *out = v.type != JV_UNDEF;
    else if (!strcmp(name, "undefined"))
        *out = v.type == JV_UNDEF;
    else if (!strcmp(name, "none"))
        *out = v.type == JV_NONE;
    else if (!strcmp(name, "boolean"))
        *out = v.type == JV_BOOL;
    else if (!strcmp(name, "true"))
        *out = v.type == JV_BOOL && v.u.b;
    else if (!strcmp(name, "false"))
        *out = v.type == JV_BOOL && !v.u.b;
    else if (!strcmp(name, "integer"))
        *out = v.type == JV_INT;
    else if (!strcmp(name, "float"))
        *out = v.type == JV_FLOAT;
    else if (!strcmp(name, "number"))
        *out = v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL;
    else if (!strcmp(name, "string"))
        *out = v.type == JV_STR;
    else if (!strcmp(name, "mapping"))
        *out = v.type == JV_DICT;
    else if (!strcmp(name, "iterable"))
        *out = v.type == JV_STR || v.type == JV_LIST || v.type == JV_DICT || v.type == JV_UNDEF;
    else if (!strcmp(name, "sequence"))
        *out = v.type == JV_STR || (v.type == JV_LIST && !v.u.l->lazy && !v.u.l->view) ||
               v.type == JV_DICT || v.type == JV_UNDEF;
    else if (!strcmp(name, "callable"))
        *out = v.type == JV_MACRO || v.type == JV_FUNC || v.type == JV_LOOP;
    else if (!strcmp(name, "sameas")) {
        if (v.type != a.type)
            *out = false;
        else if (v.type == JV_NONE || v.type == JV_UNDEF)
            *out = true;
        else if (v.type == JV_BOOL)
            *out = v.u.b == a.u.b;
        else if (v.type == JV_INT)
            *out = v.u.i == a.u.i && v.u.i >= -5 && v.u.i <= 256;
        else if (v.type == JV_LIST || v.type == JV_DICT || v.type == JV_NS)
            *out = v.u.l == a.u.l;
        else
            *out = kt__jv_equal(v, a);
    } else if (!strcmp(name, "escaped"))
        *out = false;
    else if (!strcmp(name, "in")) {
        if (!has_a)
            return kt__jr_fail(r, at, "test 'in' needs an argument");
        if (a.type == JV_STR) {
            if (v.type != JV_STR)
                return kt__jr_fail(r, at, "'in <string>' requires string as left operand");
            *out = memfind(a.u.s.p, a.u.s.n, v.u.s.p, v.u.s.n) != NULL;
        } else if (a.type == JV_LIST) {
            *out = false;
            for (size_t i = 0; i < a.u.l->n; i++)
                if (kt__jv_equal(a.u.l->items[i], v))
                    *out = true;
        } else if (a.type == JV_DICT) {
            *out = kt__jdict_get(a.u.d, v) != NULL;
        } else if (a.type == JV_UNDEF) {
            *out = false;
        } else {
            return kt__jr_fail(r, at, "argument of type '%s' is not iterable",
                               kt__jv_type_name(a));
        }
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (v.type != JV_STR && kt__jr_to_str(r, at, v, &v) < 0) /* str(value).islower() */
            return -1;
        bool lower = name[0] == 'l', any_cased = false, ok = true;
        for (size_t i = 0; i < v.u.s.n;) {
            uint32_t c = kt__utf8_next(v.u.s.p, v.u.s.n, &i);
            if (!cp_cased(c))
                continue;
            any_cased = true;
            if (lower ? cp_lower(c) != c : cp_upper(c) != c)
                ok = false;
        }
        *out = ok && any_cased;
    } else if (!strcmp(name, "even") || !strcmp(name, "odd") || !strcmp(name, "divisibleby")) {
        /* value % k == 0 (odd: value % 2 == 1), floats included as in Python */
        bool div = name[0] == 'd';
        if (div && !has_a)
            return kt__jr_fail(r, at, "test 'divisibleby' needs a divisor");
        jv k = div ? a : jv_int(2);
        bool num_v = is_int_like(v) || v.type == JV_FLOAT;
        bool num_k = is_int_like(k) || k.type == JV_FLOAT;
        if (!num_v || !num_k)
            return kt__jr_fail(r, at, "test '%s' needs numbers", name);
        if (is_int_like(v) && is_int_like(k)) {
            if (as_int(k) == 0)
                return kt__jr_fail(r, at, "integer division or modulo by zero");
            int64_t m = as_int(k) == -1 ? 0 : as_int(v) % as_int(k);
            if (m != 0 && ((m < 0) != (as_int(k) < 0)))
                m += as_int(k);
            *out = name[0] == 'o' ? m == 1 : m == 0;
        } else {
            double x = v.type == JV_FLOAT ? v.u.f : (double)as_int(v);
            double y = k.type == JV_FLOAT ? k.u.f : (double)as_int(k);
            if (y == 0.0)
                return kt__jr_fail(r, at, "float modulo");
            double m = fmod(x, y);
            if (m != 0.0 && ((m < 0) != (y < 0)))
                m += y;
            *out = name[0] == 'o' ? m == 1.0 : m == 0.0;
        }
    } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) {
        *out = kt__jv_equal(v, a);
    } else if (!strcmp(name, "ne") || !strcmp(name, "!=")) {
        *out = !kt__jv_equal(v, a);
    } else if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<") ||
               !strcmp(name, "le") || !strcmp(name, "<=") || !strcmp(name, "gt") ||
               !strcmp(name, "greaterthan") || !strcmp(name, ">") || !strcmp(name, "ge") ||
               !strcmp(name, ">=")) {
        bool ok;
        int c = kt__jv_compare(v, a, &ok);
        if (!ok)
            return kt__jr_fail(r, at, "comparison not supported between '%s' and '%s'",
                               kt__jv_type_name(v), kt__jv_type_name(a));
        bool lt = name[0] == 'l' || name[0] == '<';
        bool eq = name[1] == 'e' || name[1] == '=';
        *out = lt ? (c < 0 || (eq && c == 0)) : (c > 0 || (eq && c == 0));
    } else if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        static const char *const known_f[] = {
            "abs", "attr", "batch", "capitalize", "center", "count", "d", "default",
            "dictsort", "e", "escape", "first", "float", "forceescape", "format", "groupby",
            "indent",
            "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
            "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
            "selectattr", "slice", "sort", "string", "sum", "title", "tojson", "trim",
            "truncate", "unique", "upper", "wordcount", NULL};
        static const char *const known_t[] = {
            "defined", "undefined", "none", "boolean", "true", "false", "integer", "float",
            "number", "string", "mapping", "iterable", "sequence", "callable", "sameas",
            "escaped", "in", "lower", "upper", "even", "odd", "divisibleby", "eq", "equalto",
            "ne", "lt", "lessthan", "le", "gt", "greaterthan", "ge", "filter", "test", NULL};
        const char *const *list = name[0] == 'f' ? known_f : known_t;
        *out = false;
        if (v.type == JV_STR)
            for (size_t i = 0; list[i]; i++)
                if (strlen(list[i]) == v.u.s.n && !memcmp(list[i], v.u.s.p, v.u.s.n))
                    *out = true;
    } else {
        return kt__jr_fail(r, at, "no test named '%s'", name);
    }
    return 0;
}

int kt__jinja_test(jrender *r, const jnode *at, const char *name, jv value, const jargs *args,
                   bool *out)
{
    return jtest(r, at, name, value, args, out);
}

/* --------------------------------------------------------------- filters */

static bool kw_bool(const jargs *args, size_t idx, const char *name, bool def)
{
    jv v;
    return kt__jargs_get(args, idx, name, &v) ? kt__jv_truthy(v) : def;
}

static int escape_html(jrender *r, const jnode *at, jv s, jv *out)
{
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    for (size_t i = 0; i < s.u.s.n; i++) {
        const char *e = NULL;
        switch (s.u.s.p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        }
        if (e ? !kt__jbuf_puts(&b, e) : !kt__jbuf_putc(&b, s.u.s.p[i]))
            return OOM(r, at);
    }
    *out = mkstr(&b);
    return 0;
}

static int do_tojson(jrender *r, const jnode *at, jv v, const jargs *args, jv *out)
{
    jv ea, ind, seps, sk;
    bool ensure_ascii = kt__jargs_get(args, 0, "ensure_ascii", &ea) && kt__jv_truthy(ea);
    const char *indent = NULL;
    char spaces[65];
    if (kt__jargs_get(args, 1, "indent", &ind) && ind.type != JV_NONE) {
        if (is_int_like(ind)) {
            int64_t k = as_int(ind);
            if (k < 0)
                k = 0;
            if (k > 64)
                k = 64;
            memset(spaces, ' ', (size_t)k);
            spaces[k] = 0;
            indent = spaces;
        } else if (ind.type == JV_STR) {
            jv c = kt__jv_strcopy(r->a, ind.u.s.p, ind.u.s.n);
            if (c.type != JV_STR)
                return OOM(r, at);
            indent = c.u.s.p;
        } else {
            return kt__jr_fail(r, at, "tojson: indent must be an integer or a string");
        }
    }
    const char *item_sep = NULL, *key_sep = NULL;
    if (kt__jargs_get(args, 2, "separators", &seps) && seps.type != JV_NONE) {
        if (seps.type != JV_LIST || seps.u.l->n != 2 || seps.u.l->items[0].type != JV_STR ||
            seps.u.l->items[1].type != JV_STR)
            return kt__jr_fail(r, at, "tojson: separators must be a pair of strings");
        jv a = kt__jv_strcopy(r->a, seps.u.l->items[0].u.s.p, seps.u.l->items[0].u.s.n);
        jv b = kt__jv_strcopy(r->a, seps.u.l->items[1].u.s.p, seps.u.l->items[1].u.s.n);
        if (a.type != JV_STR || b.type != JV_STR)
            return OOM(r, at);
        item_sep = a.u.s.p;
        key_sep = b.u.s.p;
    }
    bool sort_keys = kt__jargs_get(args, 3, "sort_keys", &sk) && kt__jv_truthy(sk);
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    const char *err = NULL;
    if (!kt__jv_tojson(&b, v, ensure_ascii, indent, item_sep, key_sep, sort_keys, &err))
        return err ? kt__jr_fail(r, at, "tojson: %s", err) : OOM(r, at);
    *out = mkstr(&b);
    return 0;
}

static int do_indent(jrender *r, const jnode *at, jv s, const jargs *args, jv *out)
{
    jv w;
    const char *ind = "    ";
    size_t indn = 4;
    char spaces[257];
    if (kt__jargs_get(args, 0, "width", &w)) {
        if (w.type == JV_STR) {
            ind = w.u.s.p;
            indn = w.u.s.n;
        } else if (is_int_like(w)) {
            int64_t k = as_int(w);
            k = k < 0 ? 0 : k > 256 ? 256 : k;
            memset(spaces, ' ', (size_t)k);
            ind = spaces;
            indn = (size_t)k;
        } else {
            return kt__jr_fail(r, at, "indent: width must be an integer or a string");
        }
    }
    bool first = kw_bool(args, 1, "first", false), blank = kw_bool(args, 2, "blank", false);
    /* s += "\n"; lines = s.splitlines() */
    jbuf tmp = {NULL, 0, 0, r->a, 0};
    if (!kt__jbuf_put(&tmp, s.u.s.p, s.u.s.n) || !kt__jbuf_putc(&tmp, '\n'))
        return OOM(r, at);
    jv lines;
    if (str_splitlines(r, at, mkstr(&tmp), false, &lines) < 0)
        return -1;
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    if (first && !kt__jbuf_put(&b, ind, indn))
        return OOM(r, at);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        jv line = lines.u.l->items[i];
        if (i) {
            if (!kt__jbuf_putc(&b, '\n'))
                return OOM(r, at);
            if ((blank || line.u.s.n) && !kt__jbuf_put(&b, ind, indn))
                return OOM(r, at);
        }
        if (!kt__jbuf_put(&b, line.u.s.p, line.u.s.n))
            return OOM(r, at);
    }
    *out = mkstr(&b);
    return 0;
}

/* Python round() with banker's rounding on the exact binary value. */
static double py_round(double x, int64_t nd)
{
    if (!isfinite(x))
        return x;
    if (nd > 300)
        return x;
    if (nd < -300)
        return 0.0 * x;
    char buf[512];
    snprintf(buf, sizeof buf, "%.*f", nd >= 0 ? (int)nd : 0, x);
    if (nd >= 0)
        return strtod(buf, NULL); /* printf rounds half to even on the exact value */
    double p = pow(10.0, (double)-nd);
    double y = x / p, fl = floor(y), diff = y - fl;
    double rr = diff > 0.5 ? fl + 1 : diff < 0.5 ? fl : (fmod(fl, 2.0) == 0 ? fl : fl + 1);
    return rr * p;
}

/* The items a generator filter (select, map, unique, batch, ...) reads. Jinja's generator
 * filters fail only when consumed: over a value that cannot be iterated they return a
 * generator that raises on first use. false: the filter is done and returns *rc (that
 * generator is in *out, or iterating failed). */
static bool generator_items(jrender *r, const jnode *at, jv v, bool falsy_empty, jv *out,
                            const jv **items, size_t *n, int *rc)
{
    if (v.type == JV_STR || v.type == JV_LIST || v.type == JV_DICT || v.type == JV_UNDEF) {
        *rc = kt__jr_iter(r, at, v, items, n);
        return *rc >= 0;
    }
    jlist *l = kt__jlist_new(r->a, 0);
    if (l && falsy_empty && !kt__jv_truthy(v)) { /* select/reject/map: `if seq:` */
        l->lazy = true;
        *out = mklist(l);
        *rc = 0;
        return false;
    }
    char msg[96];
    snprintf(msg, sizeof msg, "'%s' object is not iterable", kt__jv_type_name(v));
    jv m = kt__jv_strcopy(r->a, msg, strlen(msg));
    if (!l || m.type != JV_STR) {
        *rc = OOM(r, NULL);
        return false;
    }
    l->lazy = true;
    l->lazy_error = m.u.s.p;
    *out = mklist(l);
    *rc = 0;
    return false;
}

static int select_filter(jrender *r, const jnode *at, jv seq, const jargs *args, bool attr,
                         bool want, jv *out)
{
    const jv *items;
    size_t n;
    int rc;
    if (!generator_items(r, at, seq, true, out, &items, &n, &rc))
        return rc;
    size_t first_test = attr ? 1 : 0;
    jv attribute = jv_none(), testname = jv_none();
    if (attr && (!kt__jargs_get(args, 0, NULL, &attribute)))
        return kt__jr_fail(r, at, "selectattr/rejectattr need an attribute");
    bool has_test = kt__jargs_get(args, first_test, NULL, &testname);
    if (has_test && testname.type != JV_STR)
        return kt__jr_fail(r, at, "test name must be a string");
    jargs targs = *args;
    targs.pos = args->npos > first_test + 1 ? args->pos + first_test + 1 : NULL;
    targs.npos = args->npos > first_test + 1 ? args->npos - first_test - 1 : 0;
    char tname[64] = {0};
    if (has_test) {
        if (testname.u.s.n >= sizeof tname)
            return kt__jr_fail(r, at, "no test named '%.*s'", (int)testname.u.s.n,
                               testname.u.s.p);
        memcpy(tname, testname.u.s.p, testname.u.s.n);
    }
    jlist *l = kt__jlist_new(r->a, 0);
    if (!l)
        return OOM(r, at);
    for (size_t i = 0; i < n; i++) {
        jv v = items[i];
        if (attr && get_attr_path(r, at, v, attribute, &v) < 0)
            return -1;
        bool res;
        if (has_test) {
            if (jtest(r, at, tname, v, &targs, &res) < 0)
                return -1;
        } else {
            res = kt__jv_truthy(v);
        }
        if (res == want && !kt__jlist_push(r->a, l, items[i]))
            return OOM(r, at);
    }
    l->lazy = true; /* select_or_reject is a generator */
    *out = mklist(l);
    return 0;
}

static int filter_impl(jrender *r, const jnode *at, const char *name, jv v, const jargs *args,
                       jv *out);

static int map_filter(jrender *r, const jnode *at, jv seq, const jargs *args, jv *out)
{
    const jv *items;
    size_t n;
    int rc;
    if (!generator_items(r, at, seq, true, out, &items, &n, &rc))
        return rc;
    jv attribute, def = jv_undef(), fname;
    bool by_attr = kt__jargs_get(args, SIZE_MAX, "attribute", &attribute);
    bool has_def = kt__jargs_get(args, SIZE_MAX, "default", &def);
    jlist *l = kt__jlist_new(r->a, n);
    if (!l)
        return OOM(r, at);
    if (by_attr) {
        for (size_t i = 0; i < n; i++) {
            jv v;
            if (attr_or_default(r, at, items[i], attribute, has_def ? &def : NULL, &v) < 0)
                return -1;
            l->items[l->n++] = v;
        }
        l->lazy = true;
        *out = mklist(l);
        return 0;
    }
    if (!kt__jargs_get(args, 0, NULL, &fname) || fname.type != JV_STR)
        return kt__jr_fail(r, at, "map needs a filter name or attribute=");
    jv fn = kt__jv_strcopy(r->a, fname.u.s.p, fname.u.s.n);
    if (fn.type != JV_STR)
        return OOM(r, at);
    jargs fargs = *args;
    fargs.pos = args->npos > 1 ? args->pos + 1 : NULL;
    fargs.npos = args->npos > 1 ? args->npos - 1 : 0;
    for (size_t i = 0; i < n; i++)
        if (filter_impl(r, at, fn.u.s.p, items[i], &fargs, &l->items[l->n++]) < 0)
            return -1;
    l->lazy = true;
    *out = mklist(l);
    return 0;
}

static int minmax(jrender *r, const jnode *at, jv seq, const jargs *args, bool want_max, jv *out)
{
    jv attribute = jv_none();
    kt__jargs_get(args, 1, "attribute", &attribute);
    /* min: first of the stable ascending sort; max: first of the stable
     * descending sort (Python's max keeps the first maximal item). */
    jv sorted;
    if (sorted_list(r, at, seq, want_max, kw_bool(args, 0, "case_sensitive", false), attribute,
                    &sorted) < 0)
        return -1;
    *out = sorted.u.l->n ? sorted.u.l->items[0] : jv_undef();
    return 0;
}

static int filter_impl(jrender *r, const jnode *at, const char *name, jv v, const jargs *args,
                       jv *out)
{
    jv a0 = jv_undef(), a1 = jv_undef();
    bool has0 = kt__jargs_get(args, 0, NULL, &a0);
    bool has1 = kt__jargs_get(args, 1, NULL, &a1);
    (void)has1;

    if (!strcmp(name, "tojson"))
        return do_tojson(r, at, v, args, out);
    if (!strcmp(name, "safe") || !strcmp(name, "string"))
        return kt__jr_to_str(r, at, v, out);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        switch (v.type) {
        case JV_STR:
            *out = jv_int((int64_t)kt__utf8_len(v.u.s.p, v.u.s.n));
            return 0;
        case JV_LIST:
            if (v.u.l->lazy)
                return kt__jr_fail(r, at, "object of type 'generator' has no len()");
            *out = jv_int((int64_t)v.u.l->n);
            return 0;
        case JV_DICT:
            *out = jv_int((int64_t)v.u.d->n);
            return 0;
        case JV_UNDEF:
            *out = jv_int(0);
            return 0;
        default:
            return kt__jr_fail(r, at, "object of type '%s' has no len()", kt__jv_type_name(v));
        }
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv def = jv_str("", 0);
        kt__jargs_get(args, 0, "default_value", &def);
        bool boolean = kw_bool(args, 1, "boolean", false);
        *out = (v.type == JV_UNDEF || (boolean && !kt__jv_truthy(v))) ? def : v;
        return 0;
    }
    if (!strcmp(name, "trim")) {
        jv s;
        if (kt__jr_to_str(r, at, v, &s) < 0)
            return -1;
        jv chars = jv_none();
        if (kt__jargs_get(args, 0, "chars", &chars) && chars.type != JV_STR &&
            chars.type != JV_NONE)
            return kt__jr_fail(r, at, "trim: chars must be a string");
        *out = str_strip(s, chars, 3);
        return 0;
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") ||
        !strcmp(name, "title")) {
        jv s;
        if (kt__jr_to_str(r, at, v, &s) < 0)
            return -1;
        int mode = name[0] == 'u' ? CASE_UPPER : name[0] == 'l' ? CASE_LOWER
                 : name[0] == 'c' ? CASE_CAPITALIZE : CASE_JTITLE;
        return change_case(r, at, s, mode, out);
    }
    if (!strcmp(name, "replace")) {
        jv s, cnt;
        if (kt__jr_to_str(r, at, v, &s) < 0)
            return -1;
        jv old, new;
        if (!kt__jargs_get(args, 0, "old", &old) || !kt__jargs_get(args, 1, "new", &new))
            return kt__jr_fail(r, at, "replace needs old and new");
        if (kt__jr_to_str(r, at, old, &old) < 0 || kt__jr_to_str(r, at, new, &new) < 0)
            return -1;
        int64_t count = -1;
        if (kt__jargs_get(args, 2, "count", &cnt) && cnt.type != JV_NONE &&
            need_int(r, at, cnt, "replace count", &count) < 0)
            return -1;
        return str_replace(r, at, s, old, new, count, out);
    }
    if (!strcmp(name, "join")) {
        const jv *items;
        size_t n;
        if (kt__jr_iter(r, at, v, &items, &n) < 0)
            return -1;
        jv sep = jv_str("", 0), attribute = jv_none();
        kt__jargs_get(args, 0, "d", &sep);
        bool by_attr = kt__jargs_get(args, 1, "attribute", &attribute) &&
                       attribute.type != JV_NONE;
        if (kt__jr_to_str(r, at, sep, &sep) < 0)
            return -1;
        jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
        for (size_t i = 0; i < n; i++) {
            jv it = items[i];
            if (by_attr && get_attr_path(r, at, it, attribute, &it) < 0)
                return -1;
            if ((i && !kt__jbuf_put(&b, sep.u.s.p, sep.u.s.n)) || !kt__jv_str(&b, it))
                return OOM(r, at);
        }
        *out = mkstr(&b);
        return 0;
    }
    if (!strcmp(name, "items")) {
        /* A generator: empty for Undefined, failing on use for a non-mapping. */
        if (v.type != JV_DICT) {
            jlist *l = kt__jlist_new(r->a, 0);
            if (!l)
                return OOM(r, at);
            l->lazy = true;
            if (v.type != JV_UNDEF)
                l->lazy_error = "Can only get item pairs from a mapping.";
            *out = mklist(l);
            return 0;
        }
        jv m = kt__jinja_method(r, v, "items", 5);
        jargs none = {0};
        if (kt__jinja_call_builtin(r, at, m.u.fn, &none, out) < 0)
            return -1;
        out->u.l->lazy = true; /* do_items is a generator */
        return 0;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        const jv *items;
        size_t n;
        if (name[0] == 'l' && v.type == JV_LIST && v.u.l->lazy)
            return kt__jr_fail(r, at, "'generator' object is not reversible");
        if (kt__jr_iter(r, at, v, &items, &n) < 0)
            return -1;
        *out = n ? items[name[0] == 'f' ? 0 : n - 1] : jv_undef();
        return 0;
    }
    if (!strcmp(name, "list")) {
        const jv *items;
        size_t n;
        if (kt__jr_iter(r, at, v, &items, &n) < 0)
            return -1;
        return list_copy(r, at, items, n, out);
    }
    if (!strcmp(name, "reverse")) {
        if (v.type == JV_STR) {
            jbuf b = {NULL, 0, 0, r->a, 0};
            size_t end = v.u.s.n;
            while (end > 0) {
                size_t st = end - 1;
                while (st > 0 && ((unsigned char)v.u.s.p[st] & 0xC0) == 0x80)
                    st--;
                if (!kt__jbuf_put(&b, v.u.s.p + st, end - st))
                    return OOM(r, at);
                end = st;
            }
            *out = mkstr(&b);
            return 0;
        }
        const jv *items;
        size_t n;
        if (kt__jr_iter(r, at, v, &items, &n) < 0)
            return -1;
        bool was_lazy = v.type == JV_LIST && v.u.l->lazy;
        jlist *l = kt__jlist_new(r->a, n);
        if (!l)
            return OOM(r, at);
        for (size_t i = 0; i < n; i++)
            l->items[l->n++] = items[n - 1 - i];
        l->lazy = !was_lazy; /* reversed() iterator; a generator gives a list */
        *out = mklist(l);
        return 0;
    }
    if (!strcmp(name, "sort")) {
        jv attribute = jv_none();
        kt__jargs_get(args, 2, "attribute", &attribute);
        return sorted_list(r, at, v, kw_bool(args, 0, "reverse", false),
                           kw_bool(args, 1, "case_sensitive", false), attribute, out);
    }
    if (!strcmp(name, "dictsort")) {
        if (v.type != JV_DICT)
            return kt__jr_fail(r, at, "dictsort needs a mapping");
        jv by = jv_str("key", 3);
        kt__jargs_get(args, 1, "by", &by);
        bool by_value = by.type == JV_STR && by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5);
        jv m = kt__jinja_method(r, v, "items", 5), pairs;
        jargs none = {0};
        if (kt__jinja_call_builtin(r, at, m.u.fn, &none, &pairs) < 0)
            return -1;
        return sorted_list(r, at, pairs, kw_bool(args, 2, "reverse", false),
                           kw_bool(args, 0, "case_sensitive", false), jv_int(by_value ? 1 : 0),
                           out);
    }
    if (!strcmp(name, "unique")) {
        const jv *items;
        size_t n;
        int rc;
        if (!generator_items(r, at, v, false, out, &items, &n, &rc))
            return rc;
        bool cs = kw_bool(args, 0, "case_sensitive", false);
        jv attribute = jv_none();
        kt__jargs_get(args, 1, "attribute", &attribute);
        jlist *l = kt__jlist_new(r->a, 0), *seen = kt__jlist_new(r->a, 0);
        if (!l || !seen)
            return OOM(r, at);
        sort_ctx c = {r, at, cs, false, false};
        for (size_t i = 0; i < n; i++) {
            jv key = items[i];
            if (attribute.type != JV_NONE && get_attr_path(r, at, key, attribute, &key) < 0)
                return -1;
            key = sort_key_fold(&c, key);
            bool dup = false;
            for (size_t k = 0; k < seen->n && !dup; k++)
                dup = kt__jv_equal(seen->items[k], key);
            if (!dup && (!kt__jlist_push(r->a, seen, key) || !kt__jlist_push(r->a, l, items[i])))
                return OOM(r, at);
        }
        l->lazy = true;
        *out = mklist(l);
        return 0;
    }
    if (!strcmp(name, "groupby")) {
        jv attribute, def = jv_none();
        if (!kt__jargs_get(args, 0, "attribute", &attribute))
            return kt__jr_fail(r, at, "groupby needs an attribute");
        bool has_def = kt__jargs_get(args, 1, "default", &def);
        bool cs = kw_bool(args, 2, "case_sensitive", false);
        const jv *items;
        size_t n;
        if (kt__jr_iter(r, at, v, &items, &n) < 0)
            return -1;
        sort_ctx c = {r, at, cs, false, false};
        jv *keys, *vals;
        if (sort_by_key(&c, items, n, true, attribute, has_def ? &def : NULL, &keys, &vals) < 0)
            return -1;
        jlist *groups = kt__jlist_new(r->a, 0);
        if (!groups)
            return OOM(r, at);
        jlist *cur = NULL;
        for (size_t i = 0; i < n; i++) {
            jv item = vals[i];
            if (!cur || !kt__jv_equal(keys[i], keys[i - 1])) {
                /* The grouper is the first item's real (unfolded) key. */
                jv key;
                if (get_attr_path(r, at, item, attribute, &key) < 0)
                    return -1;
                if (key.type == JV_UNDEF && has_def)
                    key = def;
                jlist *pair = kt__jlist_new(r->a, 2);
                if (!pair || !(cur = kt__jlist_new(r->a, 0)))
                    return OOM(r, at);
                pair->tuple = pair->group = true;
                pair->items[0] = key;
                pair->items[1] = mklist(cur);
                pair->n = 2;
                if (!kt__jlist_push(r->a, groups, mklist(pair)))
                    return OOM(r, at);
            }
            if (!kt__jlist_push(r->a, cur, item))
                return OOM(r, at);
        }
        *out = mklist(groups);
        return 0;
    }
    if (!strcmp(name, "min") || !strcmp(name, "max"))
        return minmax(r, at, v, args, name[1] == 'a', out);
    if (!strcmp(name, "sum")) {
        const jv *items;
        size_t n;
        if (kt__jr_iter(r, at, v, &items, &n) < 0)
            return -1;
        jv attribute = jv_none(), acc = jv_int(0);
        kt__jargs_get(args, 0, "attribute", &attribute);
        kt__jargs_get(args, 1, "start", &acc);
        for (size_t i = 0; i < n; i++) {
            jv it = items[i];
            if (attribute.type != JV_NONE && get_attr_path(r, at, it, attribute, &it) < 0)
                return -1;
            bool isnum = (it.type == JV_INT || it.type == JV_FLOAT || it.type == JV_BOOL) &&
                         (acc.type == JV_INT || acc.type == JV_FLOAT || acc.type == JV_BOOL);
            if (!isnum)
                return kt__jr_fail(r, at, "sum: unsupported operand types '%s' and '%s'",
                                   kt__jv_type_name(acc), kt__jv_type_name(it));
            if (acc.type == JV_FLOAT || it.type == JV_FLOAT)
                acc = jv_float((acc.type == JV_FLOAT ? acc.u.f : (double)as_int(acc)) +
                               (it.type == JV_FLOAT ? it.u.f : (double)as_int(it)));
            else if (__builtin_add_overflow(as_int(acc), as_int(it), &acc.u.i))
                return kt__jr_fail(r, at, "integer overflow");
            else
                acc.type = JV_INT;
        }
        *out = acc;
        return 0;
    }
    if (!strcmp(name, "abs")) {
        if (v.type == JV_FLOAT)
            *out = jv_float(fabs(v.u.f));
        else if (is_int_like(v) && as_int(v) != INT64_MIN)
            *out = jv_int(as_int(v) < 0 ? -as_int(v) : as_int(v));
        else
            return kt__jr_fail(r, at, "bad operand type for abs(): '%s'", kt__jv_type_name(v));
        return 0;
    }
    if ((!strcmp(name, "int") || !strcmp(name, "float")) && v.type == JV_UNDEF)
        return kt__jr_undefined(r, at, v); /* int(Undefined) raises in Jinja */
    if (!strcmp(name, "int")) {
        jv def = jv_int(0), base = jv_int(10);
        kt__jargs_get(args, 0, "default", &def);
        kt__jargs_get(args, 1, "base", &base);
        if (v.type == JV_INT || v.type == JV_BOOL) {
            *out = jv_int(as_int(v));
        } else if (v.type == JV_FLOAT) {
            *out = isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? jv_int((int64_t)v.u.f) : def;
        } else if (v.type == JV_STR) {
            char tmp[64];
            jv s = str_strip(v, jv_none(), 3);
            size_t k = 0;
            for (size_t i = 0; i < s.u.s.n && k + 1 < sizeof tmp; i++)
                if (s.u.s.p[i] != '_')
                    tmp[k++] = s.u.s.p[i];
            tmp[k] = 0;
            char *end;
            int b = is_int_like(base) ? (int)as_int(base) : 10;
            if (b < 0 || b == 1 || b > 36)
                b = 10;
            long long iv = k ? strtoll(tmp, &end, b) : 0;
            if (k && *end == 0 && k < sizeof tmp - 1) {
                *out = jv_int(iv);
            } else {
                double d = k ? strtod(tmp, &end) : 0;
                *out = k && *end == 0 && isfinite(d) && fabs(d) < 9.2e18 ? jv_int((int64_t)d)
                                                                          : def;
            }
        } else {
            *out = def;
        }
        return 0;
    }
    if (!strcmp(name, "float")) {
        jv def = jv_float(0.0);
        kt__jargs_get(args, 0, "default", &def);
        if (v.type == JV_FLOAT)
            *out = v;
        else if (is_int_like(v))
            *out = jv_float((double)as_int(v));
        else if (v.type == JV_STR) {
            char tmp[128];
            jv s = str_strip(v, jv_none(), 3);
            size_t k = KT_MIN(s.u.s.n, sizeof tmp - 1);
            memcpy(tmp, s.u.s.p, k);
            tmp[k] = 0;
            char *end;
            double d = strtod(tmp, &end);
            *out = k && *end == 0 ? jv_float(d) : def;
        } else
            *out = def;
        return 0;
    }
    if (!strcmp(name, "round")) {
        jv prec = jv_int(0), method = jv_str("common", 6);
        kt__jargs_get(args, 0, "precision", &prec);
        kt__jargs_get(args, 1, "method", &method);
        if (!is_int_like(prec))
            return kt__jr_fail(r, at, "round: precision must be an integer");
        if (method.type != JV_STR)
            return kt__jr_fail(r, at, "round: method must be common, ceil or floor");
        bool common = method.u.s.n == 6 && !memcmp(method.u.s.p, "common", 6);
        bool ceil_m = method.u.s.n == 4 && !memcmp(method.u.s.p, "ceil", 4);
        bool floor_m = method.u.s.n == 5 && !memcmp(method.u.s.p, "floor", 5);
        if (!common && !ceil_m && !floor_m)
            return kt__jr_fail(r, at, "method must be common, ceil or floor");
        if (is_int_like(v) && common) {
            /* round(int, n) stays an int; n < 0 rounds half to even to 10^-n. */
            int64_t x = as_int(v), nd = as_int(prec);
            if (nd < 0) {
                int64_t m = 1;
                for (int64_t k = 0; k < -nd && m <= INT64_MAX / 10; k++)
                    m *= 10;
                int64_t q = x / m, rem = x % m;
                if (rem < 0) {
                    rem += m;
                    q--;
                }
                if (rem * 2 > m || (rem * 2 == m && (q & 1)))
                    q++;
                if (__builtin_mul_overflow(q, m, &x))
                    return kt__jr_fail(r, at, "integer overflow");
            }
            *out = jv_int(x);
            return 0;
        }
        if (v.type != JV_FLOAT && !is_int_like(v))
            return kt__jr_fail(r, at, "round: a number is required");
        double d = v.type == JV_FLOAT ? v.u.f : (double)as_int(v);
        double p = pow(10.0, (double)as_int(prec));
        if (common)
            *out = jv_float(py_round(d, as_int(prec)));
        else
            *out = jv_float((ceil_m ? ceil(d * p) : floor(d * p)) / p);
        return 0;
    }
    if (!strcmp(name, "indent")) {
        if (v.type != JV_STR) /* Jinja appends "\n" to the value: str only */
            return kt__jr_fail(r, at, "indent expects a string, got '%s'", kt__jv_type_name(v));
        return do_indent(r, at, v, args, out);
    }
    if (!strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape")) {
        jv s;
        if (kt__jr_to_str(r, at, v, &s) < 0)
            return -1;
        return escape_html(r, at, s, out);
    }
    if (!strcmp(name, "map"))
        return map_filter(r, at, v, args, out);
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_filter(r, at, v, args, false, name[0] == 's', out);
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_filter(r, at, v, args, true, name[0] == 's', out);
    if (!strcmp(name, "attr")) {
        if (!has0 || a0.type != JV_STR)
            return kt__jr_fail(r, at, "attr needs a name");
        /* Python getattr only: dict keys are not attributes. */
        jv nm = kt__jv_strcopy(r->a, a0.u.s.p, a0.u.s.n);
        if (nm.type != JV_STR)
            return OOM(r, at);
        if (v.type == JV_DICT || v.type == JV_STR || v.type == JV_LIST) {
            jv m = kt__jinja_method(r, v, nm.u.s.p, nm.u.s.n);
            *out = m.type == JV_FUNC ? m : kt__jv_undef_named(nm.u.s.p);
            return 0;
        }
        return kt__jr_getattr(r, at, v, nm.u.s.p, nm.u.s.n, out);
    }
    if (!strcmp(name, "format")) {
        jv s;
        if (kt__jr_to_str(r, at, v, &s) < 0)
            return -1;
        if (args->nkw) {
            jdict *d = kt__jdict_new(r->a, args->nkw);
            if (!d)
                return OOM(r, at);
            for (size_t i = 0; i < args->nkw; i++)
                if (!kt__jdict_set(r->a, d, jv_str(args->kwn[i], strlen(args->kwn[i])),
                                   args->kwv[i]))
                    return OOM(r, at);
            return kt__jinja_percent_format(r, at, s, kt__jv_dict(d), out);
        }
        jlist *t = kt__jlist_new(r->a, args->npos);
        if (!t)
            return OOM(r, at);
        t->tuple = true;
        for (size_t i = 0; i < args->npos; i++)
            t->items[t->n++] = args->pos[i];
        return kt__jinja_percent_format(r, at, s, mklist(t), out);
    }
    if (!strcmp(name, "center")) {
        jv s;
        if (kt__jr_to_str(r, at, v, &s) < 0)
            return -1;
        jv w = has0 ? a0 : jv_int(80);
        jargs pa = {&w, 1, NULL, NULL, 0};
        return str_pad(r, at, s, &pa, 0, out);
    }
    if (!strcmp(name, "wordcount")) {
        jv s;
        if (kt__jr_to_str(r, at, v, &s) < 0)
            return -1;
        int64_t count = 0;
        bool in_word = false;
        for (size_t i = 0; i < s.u.s.n;) {
            uint32_t c = kt__utf8_next(s.u.s.p, s.u.s.n, &i);
            bool w = cp_isalpha(c) || cp_isdigit(c) || c == '_';
            if (w && !in_word)
                count++;
            in_word = w;
        }
        *out = jv_int(count);
        return 0;
    }
    if (!strcmp(name, "truncate")) {
        jv s = v;
        jv lenv = jv_int(255), endv = jv_str("...", 3), lw = jv_int(5);
        kt__jargs_get(args, 0, "length", &lenv);
        bool killwords = kw_bool(args, 1, "killwords", false);
        kt__jargs_get(args, 2, "end", &endv);
        kt__jargs_get(args, 3, "leeway", &lw);
        if (!is_int_like(lenv) || !is_int_like(lw) || endv.type != JV_STR)
            return kt__jr_fail(r, at, "truncate: bad arguments");
        int64_t length = as_int(lenv), leeway = as_int(lw);
        if (s.type != JV_STR) {
            /* Jinja does not stringify: a short sequence (or Undefined) passes. */
            int64_t n = s.type == JV_UNDEF ? 0 : s.type == JV_LIST && !s.u.l->lazy
                      ? (int64_t)s.u.l->n : s.type == JV_DICT ? (int64_t)s.u.d->n : -1;
            if (n < 0 || n > length + leeway)
                return kt__jr_fail(r, at, "truncate expects a string, got '%s'",
                                   kt__jv_type_name(s));
            *out = s;
            return 0;
        }
        int64_t slen = (int64_t)kt__utf8_len(s.u.s.p, s.u.s.n);
        int64_t elen = (int64_t)kt__utf8_len(endv.u.s.p, endv.u.s.n);
        if (length < elen)
            return kt__jr_fail(r, at, "expected length >= %lld", (long long)elen);
        if (slen <= length + leeway) {
            *out = s;
            return 0;
        }
        size_t cut = 0;
        for (int64_t k = 0; k < length - elen; k++)
            kt__utf8_next(s.u.s.p, s.u.s.n, &cut);
        jv head = jv_str(s.u.s.p, cut);
        if (!killwords) {
            const char *sp = memrfind(head.u.s.p, head.u.s.n, " ", 1);
            if (sp)
                head.u.s.n = (size_t)(sp - head.u.s.p);
        }
        jbuf b = {NULL, 0, 0, r->a, 0};
        if (!kt__jbuf_put(&b, head.u.s.p, head.u.s.n) ||
            !kt__jbuf_put(&b, endv.u.s.p, endv.u.s.n))
            return OOM(r, at);
        *out = mkstr(&b);
        return 0;
    }
    if (!strcmp(name, "batch") || !strcmp(name, "slice")) {
        const jv *items;
        size_t n;
        int rc;
        if (!generator_items(r, at, v, false, out, &items, &n, &rc))
            return rc;
        int64_t k;
        if (!has0 || need_int(r, at, a0, name, &k) < 0)
            return kt__jr_fail(r, at, "%s needs a count", name);
        if (k <= 0 && name[0] == 's')
            return kt__jr_fail(r, at, "slice count must be positive");
        if (k <= 0) /* Jinja's batch never fills a row: one row of everything */
            k = n ? (int64_t)n : 1;
        jv fill;
        bool has_fill = kt__jargs_get(args, 1, "fill_with", &fill) && fill.type != JV_NONE;
        jlist *outl = kt__jlist_new(r->a, 0);
        if (!outl)
            return OOM(r, at);
        if (name[0] == 'b') {
            for (size_t i = 0; i < n; i += (size_t)k) {
                jlist *row = kt__jlist_new(r->a, (size_t)k);
                if (!row)
                    return OOM(r, at);
                for (size_t j = i; j < i + (size_t)k && j < n; j++)
                    row->items[row->n++] = items[j];
                while (has_fill && row->n < (size_t)k)
                    row->items[row->n++] = fill;
                if (!kt__jlist_push(r->a, outl, mklist(row)))
                    return OOM(r, at);
            }
        } else {
            size_t per = n / (size_t)k, extra = n % (size_t)k, off = 0;
            for (size_t s = 0; s < (size_t)k; s++) {
                size_t cnt = per + (s < extra ? 1 : 0);
                jlist *row = kt__jlist_new(r->a, cnt + 1);
                if (!row)
                    return OOM(r, at);
                for (size_t j = 0; j < cnt; j++)
                    row->items[row->n++] = items[off + j];
                off += cnt;
                if (has_fill && s >= extra)
                    row->items[row->n++] = fill;
                if (!kt__jlist_push(r->a, outl, mklist(row)))
                    return OOM(r, at);
            }
        }
        outl->lazy = true;
        *out = mklist(outl);
        return 0;
    }
    return kt__jr_fail(r, at, "no filter named '%s'", name);
}

int kt__jinja_filter(jrender *r, const jnode *at, const char *name, jv value, const jargs *args,
                     jv *out)
{
    return filter_impl(r, at, name, value, args, out);
}

/* --------------------------------------------------------------- methods */

typedef struct method_entry {
    const char *name;
    int id;
} method_entry;

static const method_entry str_methods[] = {
    {"strip", JF_S_STRIP}, {"lstrip", JF_S_LSTRIP}, {"rstrip", JF_S_RSTRIP},
    {"split", JF_S_SPLIT}, {"rsplit", JF_S_RSPLIT}, {"splitlines", JF_S_SPLITLINES},
    {"startswith", JF_S_STARTSWITH}, {"endswith", JF_S_ENDSWITH}, {"replace", JF_S_REPLACE},
    {"upper", JF_S_UPPER}, {"lower", JF_S_LOWER}, {"title", JF_S_TITLE},
    {"capitalize", JF_S_CAPITALIZE}, {"swapcase", JF_S_SWAPCASE}, {"find", JF_S_FIND},
    {"rfind", JF_S_RFIND}, {"index", JF_S_INDEX}, {"rindex", JF_S_RINDEX},
    {"count", JF_S_COUNT}, {"join", JF_S_JOIN}, {"format", JF_S_FORMAT},
    {"isdigit", JF_S_ISDIGIT}, {"isalpha", JF_S_ISALPHA}, {"isalnum", JF_S_ISALNUM},
    {"isspace", JF_S_ISSPACE}, {"isupper", JF_S_ISUPPER}, {"islower", JF_S_ISLOWER},
    {"isnumeric", JF_S_ISNUMERIC}, {"isdecimal", JF_S_ISDECIMAL}, {"zfill", JF_S_ZFILL},
    {"center", JF_S_CENTER}, {"ljust", JF_S_LJUST}, {"rjust", JF_S_RJUST},
    {"partition", JF_S_PARTITION}, {"rpartition", JF_S_RPARTITION},
    {"removeprefix", JF_S_REMOVEPREFIX}, {"removesuffix", JF_S_REMOVESUFFIX},
    {"casefold", JF_S_CASEFOLD}, {NULL, 0}};

static const method_entry list_methods[] = {
    {"append", JF_L_APPEND}, {"pop", JF_L_POP}, {"index", JF_L_INDEX}, {"count", JF_L_COUNT},
    {"insert", JF_L_INSERT}, {"extend", JF_L_EXTEND}, {"remove", JF_L_REMOVE},
    {"reverse", JF_L_REVERSE}, {"sort", JF_L_SORT}, {"copy", JF_L_COPY}, {"clear", JF_L_CLEAR},
    {NULL, 0}};

static const method_entry tuple_methods[] = {
    {"index", JF_L_INDEX}, {"count", JF_L_COUNT}, {NULL, 0}};

static const method_entry dict_methods[] = {
    {"items", JF_D_ITEMS}, {"keys", JF_D_KEYS}, {"values", JF_D_VALUES}, {"get", JF_D_GET},
    {"pop", JF_D_POP}, {"update", JF_D_UPDATE}, {"copy", JF_D_COPY},
    {"setdefault", JF_D_SETDEFAULT}, {"clear", JF_D_CLEAR}, {NULL, 0}};

jv kt__jinja_method(jrender *r, jv self, const char *name, size_t n)
{
    const method_entry *table = NULL;
    if (self.type == JV_STR)
        table = str_methods;
    else if (self.type == JV_LIST && !self.u.l->lazy && !self.u.l->view)
        table = self.u.l->tuple ? tuple_methods : list_methods;
    else if (self.type == JV_DICT)
        table = dict_methods;
    if (table)
        for (size_t i = 0; table[i].name; i++)
            if (strlen(table[i].name) == n && !memcmp(table[i].name, name, n))
                return kt__jv_func(r, table[i].id, self);
    return jv_undef();
}

jv kt__jinja_global(jrender *r, const char *name)
{
    static const method_entry globals[] = {
        {"range", JF_RANGE}, {"namespace", JF_NAMESPACE}, {"dict", JF_DICT},
        {"raise_exception", JF_RAISE}, {"strftime_now", JF_STRFTIME_NOW}, {NULL, 0}};
    for (size_t i = 0; globals[i].name; i++)
        if (!strcmp(globals[i].name, name))
            return kt__jv_func(r, globals[i].id, jv_undef());
    return jv_undef();
}

static int str_predicate(jv s, int id)
{
    if (s.u.s.n == 0)
        return false;
    bool any_cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t c = kt__utf8_next(s.u.s.p, s.u.s.n, &i);
        switch (id) {
        case JF_S_ISDIGIT:
        case JF_S_ISNUMERIC:
        case JF_S_ISDECIMAL:
            if (!cp_isdigit(c))
                return false;
            break;
        case JF_S_ISALPHA:
            if (!cp_isalpha(c))
                return false;
            break;
        case JF_S_ISALNUM:
            if (!cp_isalpha(c) && !cp_isdigit(c))
                return false;
            break;
        case JF_S_ISSPACE:
            if (!kt__uni_isspace(c))
                return false;
            break;
        case JF_S_ISUPPER:
            if (cp_cased(c)) {
                any_cased = true;
                if (cp_upper(c) != c)
                    return false;
            }
            break;
        case JF_S_ISLOWER:
            if (cp_cased(c)) {
                any_cased = true;
                if (cp_lower(c) != c)
                    return false;
            }
            break;
        }
    }
    return id == JF_S_ISUPPER || id == JF_S_ISLOWER ? any_cased : true;
}

static int call_str_method(jrender *r, const jnode *at, int id, jv s, const jargs *args,
                           jv *out)
{
    jv a0 = jv_none(), a1 = jv_none();
    bool has0 = kt__jargs_get(args, 0, NULL, &a0);
    switch (id) {
    case JF_S_STRIP:
    case JF_S_LSTRIP:
    case JF_S_RSTRIP:
        if (has0 && a0.type != JV_STR && a0.type != JV_NONE)
            return kt__jr_fail(r, at, "strip arg must be None or str");
        *out = str_strip(s, a0, id == JF_S_STRIP ? 3 : id == JF_S_LSTRIP ? 1 : 2);
        return 0;
    case JF_S_SPLIT:
    case JF_S_RSPLIT: {
        jv sep = jv_none(), ms = jv_int(-1);
        kt__jargs_get(args, 0, "sep", &sep);
        kt__jargs_get(args, 1, "maxsplit", &ms);
        if (sep.type != JV_STR && sep.type != JV_NONE)
            return kt__jr_fail(r, at, "must be str or None, not %s", kt__jv_type_name(sep));
        int64_t maxsplit = -1;
        if (need_int(r, at, ms, "maxsplit", &maxsplit) < 0)
            return -1;
        return str_split(r, at, s, sep, maxsplit, id == JF_S_RSPLIT, out);
    }
    case JF_S_SPLITLINES:
        return str_splitlines(r, at, s, kw_bool(args, 0, "keepends", false), out);
    case JF_S_STARTSWITH:
    case JF_S_ENDSWITH:
        return str_affix(r, at, s, args, id == JF_S_ENDSWITH, out);
    case JF_S_REPLACE: {
        jv old, new, cnt = jv_int(-1);
        if (!kt__jargs_get(args, 0, NULL, &old) || !kt__jargs_get(args, 1, NULL, &new) ||
            old.type != JV_STR || new.type != JV_STR)
            return kt__jr_fail(r, at, "replace() needs two string arguments");
        kt__jargs_get(args, 2, "count", &cnt);
        int64_t count = -1;
        if (need_int(r, at, cnt, "count", &count) < 0)
            return -1;
        return str_replace(r, at, s, old, new, count, out);
    }
    case JF_S_UPPER: return change_case(r, at, s, CASE_UPPER, out);
    case JF_S_LOWER:
    case JF_S_CASEFOLD: return change_case(r, at, s, CASE_LOWER, out);
    case JF_S_TITLE: return change_case(r, at, s, CASE_TITLE, out);
    case JF_S_CAPITALIZE: return change_case(r, at, s, CASE_CAPITALIZE, out);
    case JF_S_SWAPCASE: return change_case(r, at, s, CASE_SWAP, out);
    case JF_S_FIND:
    case JF_S_RFIND:
    case JF_S_INDEX:
    case JF_S_RINDEX:
    case JF_S_COUNT:
        return str_search(r, at, s, args, id, out);
    case JF_S_JOIN:
        if (!has0)
            return kt__jr_fail(r, at, "join() takes exactly one argument");
        return str_join(r, at, s, a0, out);
    case JF_S_FORMAT:
        return str_format(r, at, s, args, out);
    case JF_S_ISDIGIT:
    case JF_S_ISALPHA:
    case JF_S_ISALNUM:
    case JF_S_ISSPACE:
    case JF_S_ISUPPER:
    case JF_S_ISLOWER:
    case JF_S_ISNUMERIC:
    case JF_S_ISDECIMAL:
        *out = jv_bool(str_predicate(s, id));
        return 0;
    case JF_S_ZFILL: return str_pad(r, at, s, args, 3, out);
    case JF_S_CENTER: return str_pad(r, at, s, args, 0, out);
    case JF_S_LJUST: return str_pad(r, at, s, args, 1, out);
    case JF_S_RJUST: return str_pad(r, at, s, args, 2, out);
    case JF_S_PARTITION:
    case JF_S_RPARTITION:
        return str_partition(r, at, s, a0, id == JF_S_RPARTITION, out);
    case JF_S_REMOVEPREFIX:
    case JF_S_REMOVESUFFIX:
        if (a0.type != JV_STR)
            return kt__jr_fail(r, at, "argument must be str");
        if (affix_match(s, a0, id == JF_S_REMOVESUFFIX))
            *out = id == JF_S_REMOVEPREFIX ? jv_str(s.u.s.p + a0.u.s.n, s.u.s.n - a0.u.s.n)
                                           : jv_str(s.u.s.p, s.u.s.n - a0.u.s.n);
        else
            *out = s;
        (void)a1;
        return 0;
    default:
        return kt__jr_fail(r, at, "internal: unknown str method %d", id);
    }
}

static int call_list_method(jrender *r, const jnode *at, int id, jlist *l, const jargs *args,
                            jv *out)
{
    jv a0 = jv_none(), a1 = jv_none();
    bool has0 = kt__jargs_get(args, 0, NULL, &a0);
    bool has1 = kt__jargs_get(args, 1, NULL, &a1);
    *out = jv_none();
    switch (id) {
    case JF_L_APPEND:
        if (!has0)
            return kt__jr_fail(r, at, "append() takes exactly one argument");
        return kt__jlist_push(r->a, l, a0) ? 0 : OOM(r, at);
    case JF_L_POP: {
        if (l->n == 0)
            return kt__jr_fail(r, at, "pop from empty list");
        int64_t i = -1;
        if (has0 && need_int(r, at, a0, "pop index", &i) < 0)
            return -1;
        if (i < 0)
            i += (int64_t)l->n;
        if (i < 0 || (uint64_t)i >= l->n)
            return kt__jr_fail(r, at, "pop index out of range");
        *out = l->items[i];
        memmove(&l->items[i], &l->items[i + 1], (l->n - (size_t)i - 1) * sizeof(jv));
        l->n--;
        return 0;
    }
    case JF_L_INDEX:
        for (size_t i = 0; i < l->n; i++)
            if (kt__jv_equal(l->items[i], a0)) {
                *out = jv_int((int64_t)i);
                return 0;
            }
        return kt__jr_fail(r, at, "value is not in list");
    case JF_L_COUNT: {
        int64_t c = 0;
        for (size_t i = 0; i < l->n; i++)
            c += kt__jv_equal(l->items[i], a0);
        *out = jv_int(c);
        return 0;
    }
    case JF_L_INSERT: {
        int64_t i = 0;
        if (!has1 || need_int(r, at, a0, "insert index", &i) < 0)
            return kt__jr_fail(r, at, "insert() needs an index and a value");
        if (i < 0)
            i = i + (int64_t)l->n < 0 ? 0 : i + (int64_t)l->n;
        if ((uint64_t)i > l->n)
            i = (int64_t)l->n;
        if (!kt__jlist_push(r->a, l, jv_none()))
            return OOM(r, at);
        memmove(&l->items[i + 1], &l->items[i], (l->n - 1 - (size_t)i) * sizeof(jv));
        l->items[i] = a1;
        return 0;
    }
    case JF_L_EXTEND: {
        const jv *items;
        size_t n;
        if (kt__jr_iter(r, at, a0, &items, &n) < 0)
            return -1;
        jv *copy = kt__ja_alloc(r->a, (n ? n : 1) * sizeof(jv));
        if (!copy)
            return OOM(r, at);
        if (n)
            memcpy(copy, items, n * sizeof(jv));
        for (size_t i = 0; i < n; i++)
            if (!kt__jlist_push(r->a, l, copy[i]))
                return OOM(r, at);
        return 0;
    }
    case JF_L_REMOVE:
        for (size_t i = 0; i < l->n; i++)
            if (kt__jv_equal(l->items[i], a0)) {
                memmove(&l->items[i], &l->items[i + 1], (l->n - i - 1) * sizeof(jv));
                l->n--;
                return 0;
            }
        return kt__jr_fail(r, at, "list.remove(x): x not in list");
    case JF_L_REVERSE:
        for (size_t i = 0; i < l->n / 2; i++) {
            jv t = l->items[i];
            l->items[i] = l->items[l->n - 1 - i];
            l->items[l->n - 1 - i] = t;
        }
        return 0;
    case JF_L_SORT: {
        jv sorted;
        jv lv = mklist(l);
        if (sorted_list(r, at, lv, kw_bool(args, SIZE_MAX, "reverse", false), true, jv_none(),
                        &sorted) < 0)
            return -1;
        if (l->n)
            memcpy(l->items, sorted.u.l->items, l->n * sizeof(jv));
        return 0;
    }
    case JF_L_COPY:
        return list_copy(r, at, l->items, l->n, out);
    case JF_L_CLEAR:
        l->n = 0;
        return 0;
    default:
        return kt__jr_fail(r, at, "internal: unknown list method %d", id);
    }
}

/* d[k] = from[k] for every key of from, in from's order. */
static int dict_merge(jrender *r, const jnode *at, jdict *d, const jdict *from)
{
    for (size_t i = 0; i < from->n; i++)
        if (!kt__jdict_set(r->a, d, from->keys[i], from->vals[i]))
            return OOM(r, at);
    return 0;
}

/* d[name] = value for every keyword argument (dict.update(), dict(), namespace()). */
static int dict_set_keywords(jrender *r, const jnode *at, jdict *d, const jargs *args)
{
    for (size_t i = 0; i < args->nkw; i++)
        if (!kt__jdict_set(r->a, d, jv_str(args->kwn[i], strlen(args->kwn[i])), args->kwv[i]))
            return OOM(r, at);
    return 0;
}

static int call_dict_method(jrender *r, const jnode *at, int id, jdict *d, const jargs *args,
                            jv *out)
{
    jv a0 = jv_none(), a1 = jv_none();
    bool has0 = kt__jargs_get(args, 0, NULL, &a0);
    bool has1 = kt__jargs_get(args, 1, NULL, &a1);
    *out = jv_none();
    switch (id) {
    case JF_D_ITEMS:
    case JF_D_KEYS:
    case JF_D_VALUES: {
        jlist *l = kt__jlist_new(r->a, d->n);
        if (!l)
            return OOM(r, at);
        l->view = id == JF_D_ITEMS ? JVIEW_ITEMS : id == JF_D_KEYS ? JVIEW_KEYS : JVIEW_VALUES;
        for (size_t i = 0; i < d->n; i++) {
            if (id == JF_D_ITEMS) {
                jlist *pair = kt__jlist_new(r->a, 2);
                if (!pair)
                    return OOM(r, at);
                pair->tuple = true;
                pair->items[0] = d->keys[i];
                pair->items[1] = d->vals[i];
                pair->n = 2;
                l->items[l->n++] = mklist(pair);
            } else {
                l->items[l->n++] = id == JF_D_KEYS ? d->keys[i] : d->vals[i];
            }
        }
        *out = mklist(l);
        return 0;
    }
    case JF_D_GET: {
        if (!has0)
            return kt__jr_fail(r, at, "get expected at least 1 argument");
        jv *v = kt__jdict_get(d, a0);
        *out = v ? *v : (has1 ? a1 : jv_none());
        return 0;
    }
    case JF_D_POP: {
        jv *v = has0 ? kt__jdict_get(d, a0) : NULL;
        if (!v) {
            if (has1) {
                *out = a1;
                return 0;
            }
            return kt__jr_fail(r, at, "pop: key not found");
        }
        *out = *v;
        kt__jdict_del(d, a0);
        return 0;
    }
    case JF_D_UPDATE:
        if (has0) {
            if (a0.type != JV_DICT)
                return kt__jr_fail(r, at, "update() needs a mapping");
            if (dict_merge(r, at, d, a0.u.d) < 0)
                return -1;
        }
        return dict_set_keywords(r, at, d, args);
    case JF_D_COPY: {
        jdict *c = kt__jdict_new(r->a, d->n);
        if (!c)
            return OOM(r, at);
        if (dict_merge(r, at, c, d) < 0)
            return -1;
        *out = kt__jv_dict(c);
        return 0;
    }
    case JF_D_SETDEFAULT: {
        jv *v = kt__jdict_get(d, a0);
        if (v) {
            *out = *v;
            return 0;
        }
        if (!kt__jdict_set(r->a, d, a0, a1))
            return OOM(r, at);
        *out = a1;
        return 0;
    }
    case JF_D_CLEAR:
        d->n = 0;
        return 0;
    default:
        return kt__jr_fail(r, at, "internal: unknown dict method %d", id);
    }
}

static int do_strftime(jrender *r, const jnode *at, const jargs *args, jv *out)
{
    jv f;
    if (!kt__jargs_get(args, 0, "format", &f) || f.type != JV_STR)
        return kt__jr_fail(r, at, "strftime_now needs a format string");
    time_t t = (time_t)(r->now ? r->now : (int64_t)time(NULL));
    struct tm tm;
    if (!localtime_r(&t, &tm))
        return kt__jr_fail(r, at, "strftime_now: bad time");
    jv fz = kt__jv_strcopy(r->a, f.u.s.p, f.u.s.n);
    if (fz.type != JV_STR)
        return OOM(r, at);
    if (f.u.s.n == 0) {
        *out = jv_str("", 0);
        return 0;
    }
    size_t cap = f.u.s.n * 16 + 64;
    char *buf = kt__ja_alloc(r->a, cap);
    if (!buf)
        return OOM(r, at);
    size_t n = strftime(buf, cap, fz.u.s.p, &tm);
    *out = jv_str(buf, n);
    return 0;
}

int kt__jinja_call_builtin(jrender *r, const jnode *at, const jfunc *fn, const jargs *args,
                           jv *out)
{
    int id = fn->id;
    jv self = fn->self;
    if (id >= JF_S_STRIP && id <= JF_S_ISTITLE)
        return call_str_method(r, at, id, self, args, out);
    if (id >= JF_L_APPEND && id <= JF_L_CLEAR)
        return call_list_method(r, at, id, self.u.l, args, out);
    if (id >= JF_D_ITEMS && id <= JF_D_CLEAR)
        return call_dict_method(r, at, id, self.u.d, args, out);
    switch (id) {
    case JF_RANGE: {
        int64_t a[3] = {0, 0, 1};
        if (args->npos < 1 || args->npos > 3 || args->nkw)
            return kt__jr_fail(r, at, "range expected 1 to 3 integer arguments");
        for (size_t i = 0; i < args->npos; i++)
            if (need_int(r, at, args->pos[i], "range", &a[i + (args->npos == 1 ? 1 : 0)]) < 0)
                return -1;
        if (args->npos == 1)
            a[0] = 0;
        if (a[2] == 0)
            return kt__jr_fail(r, at, "range() arg 3 must not be zero");
        int64_t count = a[2] > 0 ? (a[1] > a[0] ? (a[1] - a[0] + a[2] - 1) / a[2] : 0)
                                 : (a[0] > a[1] ? (a[0] - a[1] - a[2] - 1) / -a[2] : 0);
        if (count > 100000) /* the sandbox's MAX_RANGE */
            return kt__jr_fail(r, at, "range too big (%lld items, at most 100000)",
                               (long long)count);
        jlist *l = kt__jlist_new(r->a, (size_t)count);
        if (!l)
            return OOM(r, at);
        for (int64_t k = 0; k < count; k++)
            l->items[l->n++] = jv_int(a[0] + k * a[2]);
        *out = mklist(l);
        return 0;
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        jdict *d = kt__jdict_new(r->a, args->nkw);
        if (!d)
            return OOM(r, at);
        for (size_t i = 0; i < args->npos; i++) {
            jv p = args->pos[i];
            if (p.type != JV_DICT && p.type != JV_NS)
                return kt__jr_fail(r, at, "%s() positional argument must be a mapping",
                                   id == JF_DICT ? "dict" : "namespace");
            if (dict_merge(r, at, d, p.u.d) < 0)
                return -1;
        }
        if (dict_set_keywords(r, at, d, args) < 0)
            return -1;
        out->type = id == JF_DICT ? JV_DICT : JV_NS;
        out->u.d = d;
        return 0;
    }
    case JF_RAISE: {
        jv msg = jv_str("", 0);
        kt__jargs_get(args, 0, "message", &msg);
        jv s;
        if (kt__jr_to_str(r, at, msg, &s) < 0)
            return -1;
        return kt__jr_fail(r, at, "raise_exception: %.*s", (int)KT_MIN(s.u.s.n, (size_t)400),
                           s.u.s.p);
    }
    case JF_STRFTIME_NOW:
        return do_strftime(r, at, args, out);
    case JF_LOOP_CYCLE: {
        if (args->npos == 0)
            return kt__jr_fail(r, at, "no items for cycling given");
        *out = args->pos[self.u.loop->index0 % args->npos];
        return 0;
    }
    case JF_LOOP_CHANGED: {
        jloop *l = self.u.loop;
        jlist *vals = kt__jlist_new(r->a, args->npos);
        if (!vals)
            return OOM(r, at);
        for (size_t i = 0; i < args->npos; i++)
            vals->items[vals->n++] = args->pos[i];
        jv cur = mklist(vals);
        bool changed = !l->has_changed || !kt__jv_equal(l->last_changed, cur);
        l->last_changed = cur;
        l->has_changed = true;
        *out = jv_bool(changed);
        return 0;
    }
    default:
        return kt__jr_fail(r, at, "internal: unknown builtin %d", id);
    }
}
