/* Jinja engine: the lexer. Follows Jinja2 3.1's rules: newlines normalised
 * to \n, one trailing newline dropped, `{%-`/`-%}` strip all whitespace,
 * trim_blocks eats the newline after a block or comment tag, lstrip_blocks
 * strips the indentation before a block or comment tag that starts a line,
 * and `}}`/`%}` only close a tag when brackets are balanced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

typedef struct lexer {
    ja_arena *a;
    const char *name;
    const char *s; /* normalised source */
    size_t n;
    size_t pos;
    jtoks *out;
    const jlex_opts *o;
    char stack[256]; /* expected closing brackets */
    size_t depth;
} lexer;

static void pos_of(const lexer *lx, size_t at, uint32_t *line, uint32_t *col)
{
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < at && i < lx->n; i++) {
        if (lx->s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)lx->s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static kt_status lex_fail(const lexer *lx, size_t at, const char *msg)
{
    uint32_t line, col;
    pos_of(lx, at, &line, &col);
    return kt__error(KT_ERR_FORMAT, "template %s:%u:%u: syntax error: %s", lx->name, line, col,
                     msg);
}

static bool push_tok(lexer *lx, jtok t)
{
    jtoks *ts = lx->out;
    if (ts->n == ts->cap) {
        size_t cap = ts->cap ? ts->cap * 2 : 256;
        jtok *nt = kt__ja_resize(lx->a, ts->t, ts->n, cap, sizeof(jtok));
        if (!nt)
            return false;
        ts->t = nt;
        ts->cap = cap;
    }
    ts->t[ts->n++] = t;
    return true;
}

/* Line/column are filled in one pass at the end (cheap, O(n)). */
static bool emit(lexer *lx, jtok_type type, size_t at, const char *p, size_t n)
{
    jtok t;
    memset(&t, 0, sizeof t);
    t.type = (uint8_t)type;
    t.line = (uint32_t)at; /* provisional: byte offset, converted later */
    t.p = p;
    t.n = n;
    return push_tok(lx, t);
}

/* Length of the Unicode whitespace character at s[i], 0 if none. */
static size_t space_at(const char *s, size_t n, size_t i)
{
    size_t j = i;
    uint32_t cp = kt__utf8_next(s, n, &j);
    return kt__uni_isspace(cp) ? j - i : 0;
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
    size_t k;
    while (i < n && (k = space_at(s, n, i)) > 0)
        i += k;
    return i;
}

/* Python str.rstrip() on s[start, end): returns the new end. */
static size_t rstrip_end(const char *s, size_t start, size_t end)
{
    while (end > start) {
        size_t b = end - 1;
        while (b > start && ((unsigned char)s[b] & 0xC0) == 0x80)
            b--;
        if (space_at(s, end, b) != end - b)
            break;
        end = b;
    }
    return end;
}

/* Applies the strip rules to text s[start, end) that precedes a tag whose
 * whitespace sign is `sign` ('-', '+' or 0); lstrip applies to block and
 * comment tags only. Returns the new end. */
static size_t strip_before_tag(const lexer *lx, size_t start, size_t end, char sign,
                               bool lstrip_kind, bool line_starting)
{
    if (sign == '-')
        return rstrip_end(lx->s, start, end);
    if (sign == '+' || !lstrip_kind || !lx->o->lstrip_blocks)
        return end;
    size_t l_pos = start;
    for (size_t i = end; i > start; i--) {
        if (lx->s[i - 1] == '\n') {
            l_pos = i;
            break;
        }
    }
    if (l_pos == start && !line_starting)
        return end;
    if (l_pos == end)
        return end;
    if (skip_space(lx->s, end, l_pos) == end)
        return l_pos;
    return end;
}

static bool is_ident_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static bool is_ident(unsigned char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Digits with single '_' separators: (\d+_)*\d+ ; returns the end or start. */
static size_t scan_digits(const char *s, size_t n, size_t i)
{
    size_t start = i;
    if (i >= n || !is_digit(s[i]))
        return start;
    while (i < n) {
        while (i < n && is_digit(s[i]))
            i++;
        if (i + 1 < n && s[i] == '_' && is_digit(s[i + 1]))
            i++;
        else
            break;
    }
    return i;
}

static size_t scan_float(const char *s, size_t n, size_t i)
{
    if (i > 0 && s[i - 1] == '.')
        return i;
    size_t j = scan_digits(s, n, i);
    if (j == i)
        return i;
    size_t frac = j;
    if (j < n && s[j] == '.') {
        size_t k = scan_digits(s, n, j + 1);
        if (k > j + 1)
            frac = k;
    }
    if (frac < n && (s[frac] == 'e' || s[frac] == 'E')) {
        size_t k = frac + 1;
        if (k < n && (s[k] == '+' || s[k] == '-'))
            k++;
        size_t e = scan_digits(s, n, k);
        if (e > k)
            return e;
    }
    return frac > j ? frac : i;
}

static bool number_text(lexer *lx, size_t start, size_t end, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = start; i < end; i++) {
        if (lx->s[i] == '_')
            continue;
        if (o + 1 >= cap)
            return false;
        buf[o++] = lx->s[i];
    }
    buf[o] = 0;
    return true;
}

/* Decodes a Python string literal body with unicode-escape rules. */
static kt_status decode_string(lexer *lx, size_t start, size_t end, jtok *t)
{
    jbuf b = {NULL, 0, 0, lx->a, 0};
    const char *s = lx->s;
    size_t run = start;
    for (size_t i = start; i < end;) {
        if (s[i] != '\\') {
            i++;
            continue;
        }
        if (!kt__jbuf_put(&b, s + run, i - start - (run - start)))
            return kt__error(KT_ERR_NOMEM, "template %s: out of memory", lx->name);
        size_t esc = i;
        i++;
        if (i >= end)
            return lex_fail(lx, esc, "bad escape at the end of a string");
        char c = s[i++];
        bool ok = true;
        uint32_t cp;
        int digits;
        switch (c) {
        case '\n': break; /* line continuation */
        case '\\': ok = kt__jbuf_putc(&b, '\\'); break;
        case '\'': ok = kt__jbuf_putc(&b, '\''); break;
        case '"': ok = kt__jbuf_putc(&b, '"'); break;
        case 'a': ok = kt__jbuf_putc(&b, '\a'); break;
        case 'b': ok = kt__jbuf_putc(&b, '\b'); break;
        case 'f': ok = kt__jbuf_putc(&b, '\f'); break;
        case 'n': ok = kt__jbuf_putc(&b, '\n'); break;
        case 'r': ok = kt__jbuf_putc(&b, '\r'); break;
        case 't': ok = kt__jbuf_putc(&b, '\t'); break;
        case 'v': ok = kt__jbuf_putc(&b, '\v'); break;
        case 'x':
        case 'u':
        case 'U':
            digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            cp = 0;
            for (int k = 0; k < digits; k++) {
                if (i >= end || kt__jhex_digit(s[i]) < 0)
                    return lex_fail(lx, esc, "truncated \\x, \\u or \\U escape in a string");
                cp = cp * 16 + (uint32_t)kt__jhex_digit(s[i++]);
            }
            ok = kt__jbuf_put_utf8(&b, cp);
            break;
        default:
            if (c >= '0' && c <= '7') {
                cp = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < end && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                ok = kt__jbuf_put_utf8(&b, cp);
            } else {
                /* Unknown escape: Python keeps the backslash. */
                ok = kt__jbuf_put(&b, s + esc, i - esc);
            }
        }
        if (!ok)
            return kt__error(KT_ERR_NOMEM, "template %s: out of memory", lx->name);
        run = i;
    }
    if (!kt__jbuf_put(&b, s + run, end - run))
        return kt__error(KT_ERR_NOMEM, "template %s: out of memory", lx->name);
    t->p = b.p ? b.p : "";
    t->n = b.n;
    return KT_OK;
}

static const char *const operators[] = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
    "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";",
};

/* Lexes the inside of a `{{ }}` or `{% %}` tag from lx->pos; stops after the
 * end marker. Returns whether the end consumed a trailing newline. */
static kt_status lex_tag(lexer *lx, bool is_block, bool *line_starting)
{
    const char *s = lx->s;
    size_t n = lx->n;
    size_t tag_start = lx->pos;
    lx->depth = 0;
    for (;;) {
        size_t i = lx->pos;
        if (i >= n)
            return lex_fail(lx, tag_start, is_block ? "missing end of block tag '%}'"
                                                    : "missing end of variable tag '}}'");
        /* End of tag (only with balanced brackets). */
        if (lx->depth == 0) {
            char close = is_block ? '%' : '}';
            size_t j = i;
            char sign = 0;
            if ((s[j] == '-' || (s[j] == '+' && is_block)) && j + 2 < n && s[j + 1] == close &&
                s[j + 2] == '}') {
                sign = s[j];
                j++;
            }
            if (j + 1 < n && s[j] == close && s[j + 1] == '}') {
                j += 2;
                size_t end_at = j;
                if (sign == '-')
                    j = skip_space(s, n, j);
                else if (sign == 0 && is_block && lx->o->trim_blocks && j < n && s[j] == '\n')
                    j++;
                if (!emit(lx, is_block ? JT_BLOCK_END : JT_VAR_END, i, NULL, 0))
                    return KT_ERR_NOMEM;
                *line_starting = j > end_at ? s[j - 1] == '\n' : false;
                lx->pos = j;
                return KT_OK;
            }
        }
        size_t sp = space_at(s, n, i);
        if (sp) {
            lx->pos = skip_space(s, n, i);
            continue;
        }
        char c = s[i];
        size_t f = scan_float(s, n, i);
        if (f > i) {
            char buf[128];
            if (!number_text(lx, i, f, buf, sizeof buf))
                return lex_fail(lx, i, "number literal too long");
            jtok t;
            memset(&t, 0, sizeof t);
            t.type = JT_FLOAT;
            t.line = (uint32_t)i;
            t.f = strtod(buf, NULL);
            if (!push_tok(lx, t))
                return KT_ERR_NOMEM;
            lx->pos = f;
            continue;
        }
        if (is_digit(c)) {
            int base = 10;
            size_t j = i;
            if (c == '0' && i + 1 < n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
                char k = (char)(s[i + 1] | 0x20);
                base = k == 'b' ? 2 : k == 'o' ? 8 : 16;
                j = i + 2;
                size_t d0 = j;
                while (j < n && (s[j] == '_' ||
                                 (kt__jhex_digit(s[j]) >= 0 && kt__jhex_digit(s[j]) < base)))
                    j++;
                if (j == d0) {
                    base = 10;
                    j = i + 1;
                }
            } else {
                j = scan_digits(s, n, i);
            }
            char buf[128];
            size_t from = base == 10 ? i : i + 2;
            if (!number_text(lx, from, j, buf, sizeof buf))
                return lex_fail(lx, i, "number literal too long");
            jtok t;
            memset(&t, 0, sizeof t);
            t.line = (uint32_t)i;
            char *endp;
            unsigned long long v = strtoull(buf, &endp, base);
            if (v > INT64_MAX) {
                t.type = JT_FLOAT;
                t.f = strtod(buf, NULL);
            } else {
                t.type = JT_INT;
                t.i = (int64_t)v;
            }
            if (!push_tok(lx, t))
                return KT_ERR_NOMEM;
            lx->pos = j;
            continue;
        }
        if (is_ident_start((unsigned char)c)) {
            size_t j = i;
            while (j < n && is_ident((unsigned char)s[j]) && !space_at(s, n, j))
                j++;
            if (!emit(lx, JT_NAME, i, s + i, j - i))
                return KT_ERR_NOMEM;
            lx->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n)
                    j++;
                j++;
            }
            if (j >= n)
                return lex_fail(lx, i, "unterminated string literal");
            jtok t;
            memset(&t, 0, sizeof t);
            t.type = JT_STRING;
            t.line = (uint32_t)i;
            kt_status st = decode_string(lx, i + 1, j, &t);
            if (st < 0)
                return st;
            if (!push_tok(lx, t))
                return KT_ERR_NOMEM;
            lx->pos = j + 1;
            continue;
        }
        size_t k;
        for (k = 0; k < KT_ARRAY_LEN(operators); k++) {
            size_t len = strlen(operators[k]);
            if (i + len <= n && !memcmp(s + i, operators[k], len))
                break;
        }
        if (k == KT_ARRAY_LEN(operators)) {
            char msg[64];
            snprintf(msg, sizeof msg, "unexpected character '%c'", c);
            return lex_fail(lx, i, msg);
        }
        const char *op = operators[k];
        if (op[1] == 0 && strchr("([{", op[0])) {
            if (lx->depth >= sizeof lx->stack)
                return lex_fail(lx, i, "brackets nested too deeply");
            lx->stack[lx->depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
        } else if (op[1] == 0 && strchr(")]}", op[0])) {
            if (lx->depth == 0) {
                char msg[32];
                snprintf(msg, sizeof msg, "unexpected '%c'", op[0]);
                return lex_fail(lx, i, msg);
            }
            if (lx->stack[lx->depth - 1] != op[0]) {
                char msg[48];
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", op[0],
                         lx->stack[lx->depth - 1]);
                return lex_fail(lx, i, msg);
            }
            lx->depth--;
        }
        if (!emit(lx, JT_OP, i, op, strlen(op)))
            return KT_ERR_NOMEM;
        lx->pos = i + strlen(op);
    }
}

/* Finds the next "{{", "{%" or "{#" at or after i; n if none. */
static size_t find_tag(const char *s, size_t n, size_t i)
{
    while (i + 1 < n) {
        const char *p = memchr(s + i, '{', n - i - 1);
        if (!p)
            return n;
        size_t j = (size_t)(p - s);
        char c = s[j + 1];
        if (c == '{' || c == '%' || c == '#')
            return j;
        i = j + 1;
    }
    return n;
}

/* Matches `{%[-+]?\s*WORD\s*` at i; returns the index after it or 0. */
static size_t match_block_word(const char *s, size_t n, size_t i, const char *word, char *sign)
{
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%')
        return 0;
    size_t j = i + 2;
    *sign = 0;
    if (j < n && (s[j] == '-' || s[j] == '+'))
        *sign = s[j++];
    j = skip_space(s, n, j);
    size_t wl = strlen(word);
    if (j + wl > n || memcmp(s + j, word, wl))
        return 0;
    j += wl;
    if (j < n && is_ident((unsigned char)s[j]))
        return 0;
    return skip_space(s, n, j);
}

static kt_status lex_raw(lexer *lx, size_t body, bool *line_starting)
{
    const char *s = lx->s;
    size_t n = lx->n;
    for (size_t i = find_tag(s, n, body); i < n; i = find_tag(s, n, i + 1)) {
        char sign;
        size_t j = match_block_word(s, n, i, "endraw", &sign);
        if (!j)
            continue;
        size_t end;
        char esign = 0;
        if (j + 2 <= n && (s[j] == '-' || s[j] == '+') && j + 2 < n && s[j + 1] == '%' &&
            s[j + 2] == '}') {
            esign = s[j];
            end = j + 3;
        } else if (j + 1 < n && s[j] == '%' && s[j + 1] == '}') {
            end = j + 2;
        } else {
            continue;
        }
        size_t text_end = strip_before_tag(lx, body, i, sign, true, *line_starting);
        if (text_end > body && !emit(lx, JT_TEXT, body, s + body, text_end - body))
            return KT_ERR_NOMEM;
        size_t after = end;
        if (esign == '-')
            after = skip_space(s, n, end);
        else if (!esign && lx->o->trim_blocks && end < n && s[end] == '\n')
            after = end + 1;
        *line_starting = after > 0 && s[after - 1] == '\n';
        lx->pos = after;
        return KT_OK;
    }
    return lex_fail(lx, body, "missing end of raw directive");
}

kt_status kt__jinja_lex(ja_arena *a, const char *name, const char *src, size_t len,
                        const jlex_opts *opts, jtoks *toks)
{
    /* Normalise \r\n and \r to \n; drop one trailing newline. */
    char *s = kt__ja_alloc(a, len + 1);
    if (!s)
        return kt__error(KT_ERR_NOMEM, "template %s: out of memory", name);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (!opts->keep_trailing_newline && n > 0 && s[n - 1] == '\n')
        n--;
    s[n] = 0;

    lexer lx;
    memset(&lx, 0, sizeof lx);
    lx.a = a;
    lx.name = name;
    lx.s = s;
    lx.n = n;
    lx.out = toks;
    lx.o = opts;
    bool line_starting = true;
    while (lx.pos < n) {
        size_t start = lx.pos;
        size_t j = find_tag(s, n, start);
        if (j >= n) {
            if (!emit(&lx, JT_TEXT, start, s + start, n - start))
                return KT_ERR_NOMEM;
            break;
        }
        char kind = s[j + 1];
        char sign = j + 2 < n && (s[j + 2] == '-' || s[j + 2] == '+') ? s[j + 2] : 0;
        /* {% raw %} ... {% endraw %} */
        char rsign;
        size_t rw = kind == '%' ? match_block_word(s, n, j, "raw", &rsign) : 0;
        if (rw) {
            size_t body = 0;
            if (rw + 2 < n && s[rw] == '-' && s[rw + 1] == '%' && s[rw + 2] == '}')
                body = skip_space(s, n, rw + 3);
            else if (rw + 1 < n && s[rw] == '%' && s[rw + 1] == '}')
                body = rw + 2;
            if (body) {
                size_t end = strip_before_tag(&lx, start, j, rsign, true, line_starting);
                if (end > start && !emit(&lx, JT_TEXT, start, s + start, end - start))
                    return KT_ERR_NOMEM;
                line_starting = s[body - 1] == '\n';
                kt_status st = lex_raw(&lx, body, &line_starting);
                if (st < 0)
                    return st == KT_ERR_NOMEM
                               ? kt__error(KT_ERR_NOMEM, "template %s: out of memory", name)
                               : st;
                continue;
            }
        }
        size_t end = strip_before_tag(&lx, start, j, sign, kind != '{', line_starting);
        if (end > start && !emit(&lx, JT_TEXT, start, s + start, end - start))
            return kt__error(KT_ERR_NOMEM, "template %s: out of memory", name);
        size_t body = j + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            /* Comment: (.*?)(\+#}|\-#}\s*|#}\n?) */
            size_t k = body;
            for (;;) {
                const char *p = k < n ? memchr(s + k, '#', n - k) : NULL;
                if (!p || (size_t)(p - s) + 1 >= n)
                    return lex_fail(&lx, j, "missing end of comment tag");
                k = (size_t)(p - s);
                if (s[k + 1] == '}')
                    break;
                k++;
            }
            size_t after = k + 2;
            if (k > body && s[k - 1] == '-')
                after = skip_space(s, n, after);
            else if (!(k > body && s[k - 1] == '+') && opts->trim_blocks && after < n &&
                     s[after] == '\n')
                after++;
            line_starting = s[after - 1] == '\n';
            lx.pos = after;
            continue;
        }
        if (!emit(&lx, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, j, NULL, 0))
            return kt__error(KT_ERR_NOMEM, "template %s: out of memory", name);
        lx.pos = body;
        kt_status st = lex_tag(&lx, kind == '%', &line_starting);
        if (st < 0)
            return st == KT_ERR_NOMEM ? kt__error(KT_ERR_NOMEM, "template %s: out of memory", name)
                                      : st;
    }
    jtok eof;
    memset(&eof, 0, sizeof eof);
    eof.type = JT_EOF;
    eof.line = (uint32_t)n;
    if (!push_tok(&lx, eof))
        return kt__error(KT_ERR_NOMEM, "template %s: out of memory", name);
    /* Convert provisional byte offsets to line/column in one pass. */
    uint32_t line = 1, col = 1;
    size_t at = 0;
    for (size_t t = 0; t < toks->n; t++) {
        size_t target = toks->t[t].line;
        if (target < at) { /* offsets are monotonic; be safe anyway */
            at = 0;
            line = 1;
            col = 1;
        }
        for (; at < target && at < n; at++) {
            if (s[at] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)s[at] & 0xC0) != 0x80) {
                col++;
            }
        }
        toks->t[t].line = line;
        toks->t[t].col = col;
    }
    return KT_OK;
}
