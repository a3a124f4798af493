/* Jinja engine: arenas, dynamic values, Python-compatible str/repr/compare,
 * json.dumps-compatible tojson and a JSON reader that keeps int vs float. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* ---------------------------------------------------------------- arena */

struct ja_block {
    ja_block *next;
    size_t used, cap;
    max_align_t data[];
};

void *kt__ja_alloc(ja_arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    ja_block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        if (b && b->cap * 2 > cap && b->cap < (size_t)16 << 20)
            cap = b->cap * 2 > size ? b->cap * 2 : size;
        if (a->limit && a->total + cap > a->limit) {
            if (a->total + size + sizeof(ja_block) > a->limit)
                return NULL;
            cap = size;
        }
        b = malloc(sizeof(ja_block) + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
        a->total += cap + sizeof(ja_block);
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

void kt__ja_free_all(ja_arena *a)
{
    ja_block *b = a->head;
    while (b) {
        ja_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ----------------------------------------------------------------- jbuf */

bool kt__jbuf_put(jbuf *b, const void *data, size_t n)
{
    if (n == 0)
        return true;
    if (b->limit && (n > b->limit || b->n > b->limit - n))
        return false;
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n + 1) {
            if (cap > SIZE_MAX / 4)
                return false;
            cap *= 2;
        }
        char *p = kt__ja_alloc(b->arena, cap);
        if (!p)
            return false;
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

bool kt__jbuf_puts(jbuf *b, const char *s)
{
    return kt__jbuf_put(b, s, strlen(s));
}

bool kt__jbuf_putc(jbuf *b, char c)
{
    return kt__jbuf_put(b, &c, 1);
}

bool kt__jbuf_put_utf8(jbuf *b, uint32_t cp)
{
    char s[4];
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = 0xFFFD;
    if (cp < 0x80) {
        s[0] = (char)cp;
        return kt__jbuf_put(b, s, 1);
    }
    if (cp < 0x800) {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        return kt__jbuf_put(b, s, 2);
    }
    if (cp < 0x10000) {
        s[0] = (char)(0xE0 | (cp >> 12));
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        return kt__jbuf_put(b, s, 3);
    }
    s[0] = (char)(0xF0 | (cp >> 18));
    s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    s[3] = (char)(0x80 | (cp & 0x3F));
    return kt__jbuf_put(b, s, 4);
}

/* ----------------------------------------------------------------- UTF-8 */

uint32_t kt__utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t k = *i;
    uint32_t c = u[k];
    if (c < 0x80) {
        *i = k + 1;
        return c;
    }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len == 0 || k + (size_t)len > n || c > 0xF4) {
        *i = k + 1;
        return 0xDC00 | c; /* a lone invalid byte (surrogateescape-style) */
    }
    uint32_t cp = c & (0x7F >> len);
    for (int j = 1; j < len; j++) {
        if ((u[k + j] & 0xC0) != 0x80) {
            *i = k + 1;
            return 0xDC00 | c;
        }
        cp = (cp << 6) | (u[k + j] & 0x3F);
    }
    *i = k + (size_t)len;
    return cp;
}

size_t kt__utf8_len(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
        } else {
            kt__utf8_next(s, n, &i);
        }
        count++;
    }
    return count;
}

bool kt__uni_isspace(uint32_t cp)
{
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F))
        return true;
    if (cp < 0x85)
        return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* ----------------------------------------------------------- containers */

void *kt__ja_resize(ja_arena *a, const void *items, size_t n, size_t cap, size_t elem)
{
    if (elem && cap > SIZE_MAX / elem)
        return NULL;
    void *p = kt__ja_alloc(a, cap * elem);
    if (p && n)
        memcpy(p, items, n * elem);
    return p;
}

jlist *kt__jlist_new(ja_arena *a, size_t cap)
{
    jlist *l = kt__ja_alloc(a, sizeof *l);
    if (!l)
        return NULL;
    if (cap) {
        l->items = kt__ja_alloc(a, cap * sizeof(jv));
        if (!l->items)
            return NULL;
        l->cap = cap;
    }
    return l;
}

bool kt__jlist_push(ja_arena *a, jlist *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *items = kt__ja_resize(a, l->items, l->n, cap, sizeof(jv));
        if (!items)
            return false;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = v;
    return true;
}

jdict *kt__jdict_new(ja_arena *a, size_t cap)
{
    jdict *d = kt__ja_alloc(a, sizeof *d);
    if (!d)
        return NULL;
    if (cap) {
        d->keys = kt__ja_alloc(a, cap * sizeof(jv));
        d->vals = kt__ja_alloc(a, cap * sizeof(jv));
        if (!d->keys || !d->vals)
            return NULL;
        d->cap = cap;
    }
    return d;
}

/* Hash-compatible key equality: like ==, but 1 and "1" differ. */
static bool key_equal(jv a, jv b)
{
    if (a.type == JV_STR && b.type == JV_STR)
        return a.u.s.n == b.u.s.n && (a.u.s.n == 0 || !memcmp(a.u.s.p, b.u.s.p, a.u.s.n));
    if (a.type == JV_STR || b.type == JV_STR)
        return false;
    return kt__jv_equal(a, b);
}

jv *kt__jdict_get(const jdict *d, jv key)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_equal(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

jv *kt__jdict_get_str(const jdict *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->n; i++) {
        const jv *k = &d->keys[i];
        if (k->type == JV_STR && k->u.s.n == n && (n == 0 || !memcmp(k->u.s.p, key, n)))
            return &d->vals[i];
    }
    return NULL;
}

bool kt__jdict_set(ja_arena *a, jdict *d, jv key, jv val)
{
    jv *slot = kt__jdict_get(d, key);
    if (slot) {
        *slot = val;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *keys = kt__ja_resize(a, d->keys, d->n, cap, sizeof(jv));
        jv *vals = kt__ja_resize(a, d->vals, d->n, cap, sizeof(jv));
        if (!keys || !vals)
            return false;
        d->keys = keys;
        d->vals = vals;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return true;
}

bool kt__jdict_del(jdict *d, jv key)
{
    for (size_t i = 0; i < d->n; i++) {
        if (key_equal(d->keys[i], key)) {
            memmove(&d->keys[i], &d->keys[i + 1], (d->n - i - 1) * sizeof(jv));
            memmove(&d->vals[i], &d->vals[i + 1], (d->n - i - 1) * sizeof(jv));
            d->n--;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------ truth, equality */

bool kt__jv_truthy(jv v)
{
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.u.s.n != 0;
    case JV_LIST:
        return v.u.l->lazy || v.u.l->n != 0;
    case JV_DICT:
        return v.u.d->n != 0;
    default:
        return true;
    }
}

bool kt__jv_equal(jv a, jv b)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT)
            return jv_number_as_int(a) == jv_number_as_int(b);
        return jv_number_as_double(a) == jv_number_as_double(b);
    }
    if (a.type != b.type)
        return false;
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.u.s.n == b.u.s.n && (a.u.s.n == 0 || !memcmp(a.u.s.p, b.u.s.p, a.u.s.n));
    case JV_LIST:
        if (a.u.l->lazy || b.u.l->lazy || a.u.l->view != b.u.l->view)
            return a.u.l == b.u.l;
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!kt__jv_equal(a.u.l->items[i], b.u.l->items[i]))
                return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = kt__jdict_get(b.u.d, a.u.d->keys[i]);
            if (!o || !kt__jv_equal(a.u.d->vals[i], *o))
                return false;
        }
        return true;
    case JV_NS:
        return a.u.d == b.u.d;
    case JV_MACRO:
        return a.u.m == b.u.m;
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    case JV_LOOP:
        return a.u.loop == b.u.loop;
    default:
        return false;
    }
}

int kt__jv_compare(jv a, jv b, bool *ok)
{
    *ok = true;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.type != JV_FLOAT && b.type != JV_FLOAT) {
            int64_t x = jv_number_as_int(a), y = jv_number_as_int(b);
            return x < y ? -1 : x > y;
        }
        double x = jv_number_as_double(a), y = jv_number_as_double(b);
        return x < y ? -1 : x > y;
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        size_t n = KT_MIN(a.u.s.n, b.u.s.n);
        int c = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        if (c)
            return c < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.type == JV_LIST && b.type == JV_LIST && !a.u.l->lazy && !b.u.l->lazy &&
        !a.u.l->view && !b.u.l->view) {
        size_t n = KT_MIN(a.u.l->n, b.u.l->n);
        for (size_t i = 0; i < n; i++) {
            if (kt__jv_equal(a.u.l->items[i], b.u.l->items[i]))
                continue;
            return kt__jv_compare(a.u.l->items[i], b.u.l->items[i], ok);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    *ok = false;
    return 0;
}

const char *kt__jv_type_name(jv v)
{
    switch (v.type) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        if (v.u.l->lazy)
            return "generator";
        if (v.u.l->view)
            return v.u.l->view == JVIEW_ITEMS ? "dict_items"
                 : v.u.l->view == JVIEW_KEYS  ? "dict_keys" : "dict_values";
        return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

/* ------------------------------------------------------------ str/repr */

bool kt__jv_float_repr(jbuf *b, double f)
{
    if (isnan(f))
        return kt__jbuf_puts(b, "nan");
    if (isinf(f))
        return kt__jbuf_puts(b, f < 0 ? "-inf" : "inf");
    /* Shortest digits that round-trip, as Python's repr. */
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    char digits[24];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp10 - 1; i++)
            out[o++] = '0';
        for (size_t i = 0; i < nd; i++)
            out[o++] = digits[i];
    } else {
        for (int i = 0; i <= exp10; i++)
            out[o++] = (size_t)i < nd ? digits[i] : '0';
        out[o++] = '.';
        if ((size_t)exp10 + 1 < nd) {
            for (size_t i = (size_t)exp10 + 1; i < nd; i++)
                out[o++] = digits[i];
        } else {
            out[o++] = '0';
        }
    }
    return kt__jbuf_put(b, out, o);
}

static bool put_int(jbuf *b, int64_t i)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)i);
    return kt__jbuf_put(b, tmp, (size_t)n);
}

/* Python's repr of a str: quote choice and escapes. */
static bool repr_str(jbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!kt__jbuf_putc(b, q))
        return false;
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = kt__utf8_next(s, n, &i);
        char esc[16];
        const char *e = NULL;
        if (cp == (uint32_t)q || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            esc[2] = 0;
            e = esc;
        } else if (cp == '\n') {
            e = "\\n";
        } else if (cp == '\r') {
            e = "\\r";
        } else if (cp == '\t') {
            e = "\\t";
        } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
            snprintf(esc, sizeof esc, "\\x%02x", cp);
            e = esc;
        } else if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
                   (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
                   (cp >= 0xDC80 && cp <= 0xDCFF)) {
            snprintf(esc, sizeof esc, "\\u%04x", cp);
            e = esc;
        }
        if (e) {
            if (!kt__jbuf_puts(b, e))
                return false;
        } else if (!kt__jbuf_put(b, s + start, i - start)) {
            return false;
        }
    }
    return kt__jbuf_putc(b, q);
}

static bool repr_depth(jbuf *b, jv v, int depth);

static bool str_depth(jbuf *b, jv v, int depth)
{
    switch (v.type) {
    case JV_UNDEF:
        return true;
    case JV_NONE:
        return kt__jbuf_puts(b, "None");
    case JV_BOOL:
        return kt__jbuf_puts(b, v.u.b ? "True" : "False");
    case JV_INT:
        return put_int(b, v.u.i);
    case JV_FLOAT:
        return kt__jv_float_repr(b, v.u.f);
    case JV_STR:
        return kt__jbuf_put(b, v.u.s.p, v.u.s.n);
    default:
        return repr_depth(b, v, depth);
    }
}

static bool repr_depth(jbuf *b, jv v, int depth)
{
    if (depth > 200)
        return kt__jbuf_puts(b, "...");
    switch (v.type) {
    case JV_UNDEF:
        return kt__jbuf_puts(b, "Undefined");
    case JV_STR:
        return repr_str(b, v.u.s.p, v.u.s.n);
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->lazy)
            return kt__jbuf_puts(b, "<generator object>");
        if (l->view) {
            static const char *const names[] = {"", "dict_items(", "dict_keys(", "dict_values("};
            if (!kt__jbuf_puts(b, names[l->view % 4]))
                return false;
        }
        if (!kt__jbuf_putc(b, l->tuple ? '(' : '['))
            return false;
        for (size_t i = 0; i < l->n; i++) {
            if (i && !kt__jbuf_puts(b, ", "))
                return false;
            if (!repr_depth(b, l->items[i], depth + 1))
                return false;
        }
        if (l->tuple && l->n == 1 && !kt__jbuf_putc(b, ','))
            return false;
        if (!kt__jbuf_putc(b, l->tuple ? ')' : ']'))
            return false;
        return l->view ? kt__jbuf_putc(b, ')') : true;
    }
    case JV_DICT:
    case JV_NS: {
        const jdict *d = v.u.d;
        if (v.type == JV_NS && !kt__jbuf_puts(b, "<Namespace "))
            return false;
        if (!kt__jbuf_putc(b, '{'))
            return false;
        for (size_t i = 0; i < d->n; i++) {
            if (i && !kt__jbuf_puts(b, ", "))
                return false;
            if (!repr_depth(b, d->keys[i], depth + 1) || !kt__jbuf_puts(b, ": ") ||
                !repr_depth(b, d->vals[i], depth + 1))
                return false;
        }
        if (!kt__jbuf_putc(b, '}'))
            return false;
        return v.type == JV_NS ? kt__jbuf_putc(b, '>') : true;
    }
    case JV_MACRO:
        return kt__jbuf_puts(b, "<Macro>");
    case JV_FUNC:
        return kt__jbuf_puts(b, "<built-in function>");
    case JV_LOOP:
        return kt__jbuf_puts(b, "<LoopContext>");
    default:
        return str_depth(b, v, depth);
    }
}

bool kt__jv_str(jbuf *b, jv v)
{
    return str_depth(b, v, 0);
}

bool kt__jv_repr(jbuf *b, jv v)
{
    return repr_depth(b, v, 0);
}

/* --------------------------------------------------------------- tojson */

static bool json_str(jbuf *b, const char *s, size_t n, bool ensure_ascii)
{
    if (!kt__jbuf_putc(b, '"'))
        return false;
    size_t run = 0; /* start of the pending unescaped run */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char esc[16];
        size_t start = i;
        if (c < 0x80) {
            i++;
            if (c == '"')
                e = "\\\"";
            else if (c == '\\')
                e = "\\\\";
            else if (c == '\n')
                e = "\\n";
            else if (c == '\r')
                e = "\\r";
            else if (c == '\t')
                e = "\\t";
            else if (c == '\b')
                e = "\\b";
            else if (c == '\f')
                e = "\\f";
            else if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                e = esc;
            }
        } else {
            uint32_t cp = kt__utf8_next(s, n, &i);
            if (ensure_ascii) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                             0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
                e = esc;
            }
        }
        if (e) {
            if (!kt__jbuf_put(b, s + run, start - run) || !kt__jbuf_puts(b, e))
                return false;
            run = i;
        }
    }
    if (!kt__jbuf_put(b, s + run, n - run))
        return false;
    return kt__jbuf_putc(b, '"');
}

typedef struct json_fmt {
    bool ensure_ascii, sort_keys;
    const char *indent, *item_sep, *key_sep;
    const char **err;
} json_fmt;

static bool json_newline(jbuf *b, const json_fmt *f, int level)
{
    if (!kt__jbuf_putc(b, '\n'))
        return false;
    for (int i = 0; i < level; i++)
        if (!kt__jbuf_puts(b, f->indent))
            return false;
    return true;
}

static bool json_key(jbuf *b, jv k, const json_fmt *f)
{
    switch (k.type) {
    case JV_STR:
        return json_str(b, k.u.s.p, k.u.s.n, f->ensure_ascii);
    case JV_NONE:
        return kt__jbuf_puts(b, "\"null\"");
    case JV_BOOL:
        return kt__jbuf_puts(b, k.u.b ? "\"true\"" : "\"false\"");
    case JV_INT:
    case JV_FLOAT:
        return kt__jbuf_putc(b, '"') && kt__jv_str(b, k) && kt__jbuf_putc(b, '"');
    default:
        *f->err = "keys must be str, int, float, bool or None";
        return false;
    }
}

static int cmp_keys(const void *x, const void *y)
{
    const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
    bool ok;
    return kt__jv_compare(*a, *b, &ok);
}

static bool json_val(jbuf *b, jv v, const json_fmt *f, int level)
{
    if (level > 500) {
        *f->err = "nesting too deep";
        return false;
    }
    switch (v.type) {
    case JV_NONE:
        return kt__jbuf_puts(b, "null");
    case JV_BOOL:
        return kt__jbuf_puts(b, v.u.b ? "true" : "false");
    case JV_INT:
        return kt__jv_str(b, v);
    case JV_FLOAT:
        if (isnan(v.u.f))
            return kt__jbuf_puts(b, "NaN");
        if (isinf(v.u.f))
            return kt__jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        return kt__jv_float_repr(b, v.u.f);
    case JV_STR:
        return json_str(b, v.u.s.p, v.u.s.n, f->ensure_ascii);
    case JV_LIST: {
        const jlist *l = v.u.l;
        if (l->lazy || l->view) {
            *f->err = l->lazy ? "Object of type generator is not JSON serializable"
                              : "Object of type dict view is not JSON serializable";
            return false;
        }
        if (l->n == 0)
            return kt__jbuf_puts(b, "[]");
        if (!kt__jbuf_putc(b, '['))
            return false;
        for (size_t i = 0; i < l->n; i++) {
            if (i && !kt__jbuf_puts(b, f->item_sep))
                return false;
            if (f->indent && !json_newline(b, f, level + 1))
                return false;
            if (!json_val(b, l->items[i], f, level + 1))
                return false;
        }
        if (f->indent && !json_newline(b, f, level))
            return false;
        return kt__jbuf_putc(b, ']');
    }
    case JV_DICT: {
        const jdict *d = v.u.d;
        if (d->n == 0)
            return kt__jbuf_puts(b, "{}");
        if (!kt__jbuf_putc(b, '{'))
            return false;
        size_t *order = NULL;
        if (f->sort_keys && d->n > 1) {
            /* Sort pointers to the keys, then map back to indices. */
            const jv **ptrs = kt__ja_alloc(b->arena, d->n * sizeof *ptrs);
            order = kt__ja_alloc(b->arena, d->n * sizeof *order);
            if (!ptrs || !order)
                return false;
            for (size_t i = 0; i < d->n; i++) {
                ptrs[i] = &d->keys[i];
                if (d->keys[i].type != d->keys[0].type) {
                    *f->err = "'<' not supported between keys of different types";
                    return false;
                }
            }
            qsort(ptrs, d->n, sizeof *ptrs, cmp_keys);
            for (size_t i = 0; i < d->n; i++)
                order[i] = (size_t)(ptrs[i] - d->keys);
        }
        for (size_t k = 0; k < d->n; k++) {
            size_t i = order ? order[k] : k;
            if (k && !kt__jbuf_puts(b, f->item_sep))
                return false;
            if (f->indent && !json_newline(b, f, level + 1))
                return false;
            if (!json_key(b, d->keys[i], f) || !kt__jbuf_puts(b, f->key_sep) ||
                !json_val(b, d->vals[i], f, level + 1))
                return false;
        }
        if (f->indent && !json_newline(b, f, level))
            return false;
        return kt__jbuf_putc(b, '}');
    }
    default:
        *f->err = v.type == JV_UNDEF ? "Object of type Undefined is not JSON serializable"
                                     : "object is not JSON serializable";
        return false;
    }
}

bool kt__jv_tojson(jbuf *b, jv v, bool ensure_ascii, const char *indent, const char *item_sep,
                   const char *key_sep, bool sort_keys, const char **err)
{
    static const char *none_err = NULL;
    json_fmt f = {ensure_ascii, sort_keys, indent, item_sep, key_sep, err ? err : &none_err};
    if (!f.item_sep)
        f.item_sep = indent ? "," : ", ";
    if (!f.key_sep)
        f.key_sep = ": ";
    *f.err = NULL;
    return json_val(b, v, &f, 0);
}

/* ------------------------------------------------------------ JSON read */

typedef struct jreader {
    ja_arena *a;
    const char *s;
    size_t n, i;
    char *err;
    size_t errlen;
    int depth;
} jreader;

static bool jr_fail(jreader *r, const char *msg)
{
    size_t line = 1, col = 1;
    for (size_t k = 0; k < r->i && k < r->n; k++) {
        if (r->s[k] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    snprintf(r->err, r->errlen, "JSON line %zu column %zu: %s", line, col, msg);
    return false;
}

static void jr_ws(jreader *r)
{
    while (r->i < r->n &&
           (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

int kt__jhex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool jr_hex4(jreader *r, uint32_t *out)
{
    if (r->n - r->i < 4)
        return jr_fail(r, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int h = kt__jhex_digit(r->s[r->i + (size_t)k]);
        if (h < 0)
            return jr_fail(r, "bad \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    r->i += 4;
    *out = v;
    return true;
}

static bool jr_string(jreader *r, jv *out)
{
    r->i++; /* opening quote */
    size_t start = r->i;
    /* Fast path: no escapes - point into a copy of the run. */
    jbuf b = {NULL, 0, 0, r->a, 0};
    while (r->i < r->n) {
        char c = r->s[r->i];
        if (c == '"') {
            if (!kt__jbuf_put(&b, r->s + start, r->i - start))
                return jr_fail(r, "out of memory");
            r->i++;
            *out = jv_str(b.p ? b.p : "", b.n);
            return true;
        }
        if (c == '\\') {
            if (!kt__jbuf_put(&b, r->s + start, r->i - start))
                return jr_fail(r, "out of memory");
            r->i++;
            if (r->i >= r->n)
                return jr_fail(r, "unterminated string");
            char e = r->s[r->i++];
            bool ok = true;
            switch (e) {
            case '"': ok = kt__jbuf_putc(&b, '"'); break;
            case '\\': ok = kt__jbuf_putc(&b, '\\'); break;
            case '/': ok = kt__jbuf_putc(&b, '/'); break;
            case 'b': ok = kt__jbuf_putc(&b, '\b'); break;
            case 'f': ok = kt__jbuf_putc(&b, '\f'); break;
            case 'n': ok = kt__jbuf_putc(&b, '\n'); break;
            case 'r': ok = kt__jbuf_putc(&b, '\r'); break;
            case 't': ok = kt__jbuf_putc(&b, '\t'); break;
            case 'u': {
                uint32_t cp;
                if (!jr_hex4(r, &cp))
                    return false;
                if (cp >= 0xD800 && cp <= 0xDBFF && r->n - r->i >= 6 && r->s[r->i] == '\\' &&
                    r->s[r->i + 1] == 'u') {
                    size_t save = r->i;
                    r->i += 2;
                    uint32_t lo;
                    if (!jr_hex4(r, &lo))
                        return false;
                    if (lo >= 0xDC00 && lo <= 0xDFFF)
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    else
                        r->i = save;
                }
                ok = kt__jbuf_put_utf8(&b, cp);
                break;
            }
            default:
                r->i--;
                return jr_fail(r, "bad escape in string");
            }
            if (!ok)
                return jr_fail(r, "out of memory");
            start = r->i;
            continue;
        }
        r->i++;
    }
    return jr_fail(r, "unterminated string");
}

static bool jr_value(jreader *r, jv *out);

static bool jr_number(jreader *r, jv *out)
{
    size_t start = r->i;
    bool is_float = false;
    if (r->s[r->i] == '-')
        r->i++;
    if (r->n - r->i >= 8 && !memcmp(r->s + r->i, "Infinity", 8)) {
        r->i += 8;
        *out = jv_float(r->s[start] == '-' ? -INFINITY : INFINITY);
        return true;
    }
    if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9')
        return jr_fail(r, "bad number");
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
        r->i++;
    if (r->i < r->n && r->s[r->i] == '.') {
        is_float = true;
        r->i++;
        if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9')
            return jr_fail(r, "bad number");
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
            r->i++;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        is_float = true;
        r->i++;
        if (r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '-'))
            r->i++;
        if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9')
            return jr_fail(r, "bad number");
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
            r->i++;
    }
    char tmp[64];
    size_t len = r->i - start;
    char *num = len < sizeof tmp ? tmp : kt__ja_alloc(r->a, len + 1);
    if (!num)
        return jr_fail(r, "out of memory");
    memcpy(num, r->s + start, len);
    num[len] = 0;
    if (!is_float) {
        errno = 0;
        long long v = strtoll(num, NULL, 10);
        if (errno != ERANGE) {
            *out = jv_int(v);
            return true;
        }
    }
    *out = jv_float(strtod(num, NULL));
    return true;
}

static bool jr_lit(jreader *r, const char *word, jv v, jv *out)
{
    size_t n = strlen(word);
    if (r->n - r->i < n || memcmp(r->s + r->i, word, n))
        return jr_fail(r, "unexpected character");
    r->i += n;
    *out = v;
    return true;
}

/* Skips white space, then consumes c if it comes next. */
static bool jr_eat(jreader *r, char c)
{
    jr_ws(r);
    if (r->i < r->n && r->s[r->i] == c) {
        r->i++;
        return true;
    }
    return false;
}

/* After an object or array member: a ',' (*more) or the closing bracket, else an error. */
static bool jr_after_member(jreader *r, char close, bool *more)
{
    if (jr_eat(r, ',')) {
        *more = true;
        return true;
    }
    if (jr_eat(r, close)) {
        *more = false;
        return true;
    }
    return jr_fail(r, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

static bool jr_value(jreader *r, jv *out)
{
    jr_ws(r);
    if (r->i >= r->n)
        return jr_fail(r, "unexpected end of input");
    if (++r->depth > 512)
        return jr_fail(r, "nesting too deep");
    char c = r->s[r->i];
    bool ok;
    if (c == '{') {
        r->i++;
        jdict *d = kt__jdict_new(r->a, 0);
        if (!d)
            return jr_fail(r, "out of memory");
        bool more = !jr_eat(r, '}');
        while (more) {
            jr_ws(r);
            if (r->i >= r->n || r->s[r->i] != '"')
                return jr_fail(r, "expected a string key");
            jv k, v;
            if (!jr_string(r, &k))
                return false;
            if (!jr_eat(r, ':'))
                return jr_fail(r, "expected ':'");
            if (!jr_value(r, &v))
                return false;
            if (!kt__jdict_set(r->a, d, k, v))
                return jr_fail(r, "out of memory");
            if (!jr_after_member(r, '}', &more))
                return false;
        }
        out->type = JV_DICT;
        out->u.d = d;
        ok = true;
    } else if (c == '[') {
        r->i++;
        jlist *l = kt__jlist_new(r->a, 0);
        if (!l)
            return jr_fail(r, "out of memory");
        bool more = !jr_eat(r, ']');
        while (more) {
            jv v;
            if (!jr_value(r, &v))
                return false;
            if (!kt__jlist_push(r->a, l, v))
                return jr_fail(r, "out of memory");
            if (!jr_after_member(r, ']', &more))
                return false;
        }
        out->type = JV_LIST;
        out->u.l = l;
        ok = true;
    } else if (c == '"') {
        ok = jr_string(r, out);
    } else if (c == 't') {
        ok = jr_lit(r, "true", jv_bool(true), out);
    } else if (c == 'f') {
        ok = jr_lit(r, "false", jv_bool(false), out);
    } else if (c == 'n') {
        ok = jr_lit(r, "null", jv_none(), out);
    } else if (c == 'N') {
        ok = jr_lit(r, "NaN", jv_float(NAN), out);
    } else if (c == 'I') {
        ok = jr_lit(r, "Infinity", jv_float(INFINITY), out);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        ok = jr_number(r, out);
    } else {
        ok = jr_fail(r, "unexpected character");
    }
    r->depth--;
    return ok;
}

bool kt__jv_from_json(ja_arena *a, const char *text, size_t len, jv *out, char *err,
                      size_t errlen)
{
    jreader r = {a, text, len, 0, err, errlen, 0};
    if (!jr_value(&r, out))
        return false;
    jr_ws(&r);
    if (r.i != r.n)
        return jr_fail(&r, "extra data after the value");
    return true;
}
