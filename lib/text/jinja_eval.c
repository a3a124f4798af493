/* Jinja engine: the evaluator. Walks the AST with Python/Jinja2 semantics:
 * scopes (a for-loop iteration and a macro call are scopes, `if` is not),
 * Undefined that prints as "" but fails on use, Python arithmetic and
 * comparisons, attribute-then-item lookup. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja.h"

enum { EXEC_OK = 0, EXEC_BREAK = 1, EXEC_CONTINUE = 2 };

int kt__jr_fail(jrender *r, const jnode *at, const char *fmt, ...)
{
    if (r->failed)
        return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->failed = true;
    r->status = KT_ERR_FORMAT;
    if (at)
        kt__error(KT_ERR_FORMAT, "template %s:%u:%u: %s", r->t->name, at->line, at->col, msg);
    else
        kt__error(KT_ERR_FORMAT, "template %s: %s", r->t->name, msg);
    return -1;
}

int kt__jr_oom(jrender *r, const jnode *at)
{
    if (r->failed)
        return -1;
    kt__jr_fail(r, at, "render memory or output limit reached");
    r->status = KT_ERR_LIMIT;
    return -1;
}

int kt__jr_undefined(jrender *r, const jnode *at, jv u)
{
    if (u.u.s.p && u.hint) {
        jv obj;
        memset(&obj, 0, sizeof obj);
        obj.type = (uint8_t)(u.hint - 1);
        const char *what = obj.type == JV_NONE   ? "None"
                           : obj.type == JV_LIST ? "list" /* no object to ask tuple-ness */
                                                 : kt__jv_type_name(obj);
        return kt__jr_fail(r, at, "'%s object' has no attribute '%s'", what, u.u.s.p);
    }
    if (u.u.s.p)
        return kt__jr_fail(r, at, "'%s' is undefined", u.u.s.p);
    return kt__jr_fail(r, at, "value is undefined");
}

/* Undefined for a missing attribute; the error names the object's type, as
 * Jinja does ("'dict object' has no attribute 'x'"). */
static jv undef_attr(jrender *r, jv obj, const char *name)
{
    (void)r;
    jv u = kt__jv_undef_named(name);
    u.hint = (uint8_t)(obj.type + 1);
    return u;
}

jv kt__jv_undef_named(const char *name)
{
    jv v = jv_undef();
    v.u.s.p = name;
    return v;
}

jv kt__jv_strcopy(ja_arena *a, const char *p, size_t n)
{
    char *d = kt__ja_alloc(a, n + 1);
    if (!d) {
        jv u = jv_undef();
        u.type = 0xFF; /* marks failure; callers check */
        return u;
    }
    if (n)
        memcpy(d, p, n);
    return jv_str(d, n);
}

jv kt__jv_list(jlist *l)
{
    jv v;
    v.type = JV_LIST;
    v.u.l = l;
    return v;
}

jv kt__jv_dict(jdict *d)
{
    jv v;
    v.type = JV_DICT;
    v.u.d = d;
    return v;
}

jv kt__jv_func(jrender *r, int id, jv self)
{
    jfunc *f = kt__ja_alloc(r->a, sizeof *f);
    jv v = jv_undef();
    if (!f)
        return v;
    f->id = id;
    f->self = self;
    v.type = JV_FUNC;
    v.u.fn = f;
    return v;
}

bool kt__jargs_get(const jargs *args, size_t index, const char *name, jv *out)
{
    if (index < args->npos) {
        *out = args->pos[index];
        return true;
    }
    if (name)
        for (size_t i = 0; i < args->nkw; i++)
            if (!strcmp(args->kwn[i], name)) {
                *out = args->kwv[i];
                return true;
            }
    return false;
}

/* Stack the evaluator may use below kt__jinja_render's frame: deep macro
 * recursion over deeply nested statements fails cleanly instead of running
 * off the caller's stack (renders need about this much stack). */
#define JINJA_STACK_BUDGET ((uintptr_t)768 << 10)

static bool step(jrender *r, const jnode *at)
{
    if (++r->steps > r->lim.max_steps) {
        kt__jr_fail(r, at, "render step limit reached (infinite loop?)");
        r->status = KT_ERR_LIMIT;
        return false;
    }
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (r->stack_base > here && r->stack_base - here > JINJA_STACK_BUDGET) {
        kt__jr_fail(r, at, "template nesting too deep (stack budget exhausted)");
        r->status = KT_ERR_LIMIT;
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- scopes */

static jv *scope_lookup(jscope *s, const char *name, size_t n)
{
    for (; s; s = s->parent) {
        if (s->vars) {
            jv *v = kt__jdict_get_str(s->vars, name, n);
            if (v)
                return v;
        }
    }
    return NULL;
}

static int scope_set(jrender *r, const jnode *at, jscope *s, const char *name, jv v)
{
    if (!s->vars && !(s->vars = kt__jdict_new(r->a, 4)))
        return kt__jr_oom(r, at);
    if (!kt__jdict_set(r->a, s->vars, jv_str(name, strlen(name)), v))
        return kt__jr_oom(r, at);
    return 0;
}

static jscope *scope_new(jrender *r, jscope *parent)
{
    jscope *s = kt__ja_alloc(r->a, sizeof *s);
    if (s)
        s->parent = parent;
    return s;
}

/* ---------------------------------------------------------------- values */

int kt__jr_to_str(jrender *r, const jnode *at, jv v, jv *out)
{
    if (v.type == JV_STR) {
        *out = v;
        return 0;
    }
    jbuf b = {NULL, 0, 0, r->a, 0};
    if (!kt__jv_str(&b, v))
        return kt__jr_oom(r, at);
    *out = jv_str(b.p ? b.p : "", b.n);
    return 0;
}

int kt__jr_iter(jrender *r, const jnode *at, jv v, const jv **items, size_t *n)
{
    switch (v.type) {
    case JV_UNDEF:
        *items = NULL;
        *n = 0;
        return 0;
    case JV_LIST:
        if (v.u.l->lazy_error)
            return kt__jr_fail(r, at, "%s", v.u.l->lazy_error);
        *items = v.u.l->items;
        *n = v.u.l->n;
        if (v.u.l->lazy)
            v.u.l->n = 0; /* a generator is consumed by iterating it */
        return 0;
    case JV_DICT: {
        jv *keys = kt__ja_alloc(r->a, (v.u.d->n ? v.u.d->n : 1) * sizeof(jv));
        if (!keys)
            return kt__jr_oom(r, at);
        if (v.u.d->n)
            memcpy(keys, v.u.d->keys, v.u.d->n * sizeof(jv));
        *items = keys;
        *n = v.u.d->n;
        return 0;
    }
    case JV_STR: {
        size_t count = kt__utf8_len(v.u.s.p, v.u.s.n);
        jv *chars = kt__ja_alloc(r->a, (count ? count : 1) * sizeof(jv));
        if (!chars)
            return kt__jr_oom(r, at);
        size_t k = 0;
        for (size_t i = 0; i < v.u.s.n;) {
            size_t s0 = i;
            kt__utf8_next(v.u.s.p, v.u.s.n, &i);
            chars[k++] = jv_str(v.u.s.p + s0, i - s0);
        }
        *items = chars;
        *n = k;
        return 0;
    }
    default:
        return kt__jr_fail(r, at, "'%s' object is not iterable", kt__jv_type_name(v));
    }
}

/* Python index normalisation; returns false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out)
{
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return false;
    *out = (size_t)i;
    return true;
}

/* Byte offset of code point `cp_index` in s (s.n if past the end). */
static size_t utf8_offset(const char *s, size_t n, size_t cp_index)
{
    size_t i = 0;
    while (i < n && cp_index > 0) {
        kt__utf8_next(s, n, &i);
        cp_index--;
    }
    return i;
}

static bool loop_attr(jrender *r, const jloop *l, const char *name, jv *out)
{
    size_t i = l->index0, n = l->length;
    if (!strcmp(name, "index"))
        *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0"))
        *out = jv_int((int64_t)i);
    else if (!strcmp(name, "revindex"))
        *out = jv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0"))
        *out = jv_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first"))
        *out = jv_bool(i == 0);
    else if (!strcmp(name, "last"))
        *out = jv_bool(i + 1 == n);
    else if (!strcmp(name, "length"))
        *out = jv_int((int64_t)n);
    else if (!strcmp(name, "depth"))
        *out = jv_int((int64_t)l->depth0 + 1);
    else if (!strcmp(name, "depth0"))
        *out = jv_int((int64_t)l->depth0);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? l->items[i - 1] : kt__jv_undef_named("previtem");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? l->items[i + 1] : kt__jv_undef_named("nextitem");
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        jv self;
        self.type = JV_LOOP;
        self.u.loop = (jloop *)l;
        *out = kt__jv_func(r, name[0] == 'c' && name[1] == 'y' ? JF_LOOP_CYCLE : JF_LOOP_CHANGED,
                           self);
    } else
        return false;
    return true;
}

int kt__jr_getattr(jrender *r, const jnode *at, jv obj, const char *name, size_t n, jv *out)
{
    switch (obj.type) {
    case JV_UNDEF:
        return kt__jr_undefined(r, at, obj);
    case JV_DICT: {
        jv m = kt__jinja_method(r, obj, name, n);
        if (m.type == JV_FUNC) {
            *out = m;
            return 0;
        }
        jv *v = kt__jdict_get_str(obj.u.d, name, n);
        *out = v ? *v : undef_attr(r, obj, name);
        return 0;
    }
    case JV_NS: {
        jv *v = kt__jdict_get_str(obj.u.d, name, n);
        *out = v ? *v : undef_attr(r, obj, name);
        return 0;
    }
    case JV_LOOP:
        if (!loop_attr(r, obj.u.loop, name, out))
            *out = undef_attr(r, obj, name);
        return 0;
    case JV_STR:
    case JV_LIST: {
        if (obj.type == JV_LIST && obj.u.l->group && obj.u.l->n == 2 &&
            (!strcmp(name, "grouper") || !strcmp(name, "list"))) {
            *out = obj.u.l->items[name[0] == 'g' ? 0 : 1];
            return 0;
        }
        jv m = kt__jinja_method(r, obj, name, n);
        *out = m.type == JV_FUNC ? m : undef_attr(r, obj, name);
        return 0;
    }
    default:
        *out = undef_attr(r, obj, name);
        return 0;
    }
}

int kt__jr_getitem(jrender *r, const jnode *at, jv obj, jv key, jv *out)
{
    switch (obj.type) {
    case JV_UNDEF:
        return kt__jr_undefined(r, at, obj);
    case JV_DICT: {
        jv *v = kt__jdict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    case JV_LIST:
        if (key.type == JV_INT || key.type == JV_BOOL) {
            size_t i;
            int64_t k = key.type == JV_BOOL ? key.u.b : key.u.i;
            *out = norm_index(k, obj.u.l->n, &i) ? obj.u.l->items[i] : jv_undef();
            return 0;
        }
        break;
    case JV_STR:
        if (key.type == JV_INT || key.type == JV_BOOL) {
            int64_t k = key.type == JV_BOOL ? key.u.b : key.u.i;
            size_t len = kt__utf8_len(obj.u.s.p, obj.u.s.n), i;
            if (!norm_index(k, len, &i)) {
                *out = jv_undef();
                return 0;
            }
            size_t off = utf8_offset(obj.u.s.p, obj.u.s.n, i), end = off;
            kt__utf8_next(obj.u.s.p, obj.u.s.n, &end);
            *out = jv_str(obj.u.s.p + off, end - off);
            return 0;
        }
        break;
    default:
        break;
    }
    if (key.type == JV_STR) {
        /* Fall back to the attribute; names need NUL termination. */
        jv k = kt__jv_strcopy(r->a, key.u.s.p, key.u.s.n);
        if (k.type != JV_STR)
            return kt__jr_oom(r, at);
        return kt__jr_getattr(r, at, obj, k.u.s.p, k.u.s.n, out);
    }
    *out = jv_undef();
    return 0;
}

static int eval(jrender *r, jscope *s, const jnode *n, jv *out);

static bool slice_bound(jv v, int64_t *out)
{
    if (v.type == JV_INT) {
        *out = v.u.i;
        return true;
    }
    if (v.type == JV_BOOL) {
        *out = v.u.b;
        return true;
    }
    return false;
}

/* One slice bound as Python resolves it: missing -> dflt, negative counts from the end,
 * then clamped to [lo, hi]. */
static int64_t slice_clamp(bool has, int64_t v, int64_t len, int64_t dflt, int64_t lo, int64_t hi)
{
    if (!has)
        return dflt;
    if (v < 0)
        return v + len < lo ? lo : v + len;
    return v > hi ? hi : v;
}

/* Python slice indices (start, stop, step) over n items -> count and start. */
static void slice_indices(size_t n, bool has_start, int64_t start, bool has_stop, int64_t stop,
                          int64_t stepv, int64_t *o_start, int64_t *o_count)
{
    int64_t len = (int64_t)n;
    if (stepv > 0) {
        start = slice_clamp(has_start, start, len, 0, 0, len);
        stop = slice_clamp(has_stop, stop, len, len, 0, len);
        *o_count = stop > start ? (stop - start + stepv - 1) / stepv : 0;
    } else {
        start = slice_clamp(has_start, start, len, len - 1, -1, len - 1);
        stop = slice_clamp(has_stop, stop, len, -1, -1, len - 1);
        *o_count = start > stop ? (start - stop - stepv - 1) / -stepv : 0;
    }
    *o_start = start;
}

static int eval_slice(jrender *r, jscope *s, const jnode *n, jv *out)
{
    jv obj, b[3] = {jv_none(), jv_none(), jv_none()};
    if (eval(r, s, n->a, &obj) < 0)
        return -1;
    const jnode *parts[3] = {n->b, n->c, n->d};
    int64_t vals[3] = {0, 0, 1};
    bool has[3] = {false, false, false};
    for (int k = 0; k < 3; k++) {
        if (!parts[k])
            continue;
        if (eval(r, s, parts[k], &b[k]) < 0)
            return -1;
        if (b[k].type == JV_NONE || b[k].type == JV_UNDEF)
            continue;
        if (!slice_bound(b[k], &vals[k]))
            return kt__jr_fail(r, n, "slice indices must be integers or None");
        has[k] = true;
    }
    if (vals[2] == 0)
        return kt__jr_fail(r, n, "slice step cannot be zero");
    if (obj.type == JV_UNDEF)
        return kt__jr_undefined(r, n, obj);
    if (obj.type == JV_LIST) {
        int64_t start, count;
        slice_indices(obj.u.l->n, has[0], vals[0], has[1], vals[1], vals[2], &start, &count);
        jlist *l = kt__jlist_new(r->a, (size_t)count);
        if (!l)
            return kt__jr_oom(r, n);
        l->tuple = obj.u.l->tuple;
        for (int64_t k = 0; k < count; k++)
            l->items[l->n++] = obj.u.l->items[start + k * vals[2]];
        *out = kt__jv_list(l);
        return 0;
    }
    if (obj.type == JV_STR) {
        const char *p = obj.u.s.p;
        size_t len = kt__utf8_len(p, obj.u.s.n);
        int64_t start, count;
        slice_indices(len, has[0], vals[0], has[1], vals[1], vals[2], &start, &count);
        if (vals[2] == 1) {
            size_t b0 = utf8_offset(p, obj.u.s.n, (size_t)start);
            size_t b1 = b0 + utf8_offset(p + b0, obj.u.s.n - b0, (size_t)count);
            *out = jv_str(p + b0, b1 - b0);
            return 0;
        }
        /* General step: index the code points. */
        size_t *offs = kt__ja_alloc(r->a, (len + 1) * sizeof *offs);
        if (!offs)
            return kt__jr_oom(r, n);
        size_t k = 0;
        for (size_t i = 0; i < obj.u.s.n;) {
            offs[k++] = i;
            kt__utf8_next(p, obj.u.s.n, &i);
        }
        offs[k] = obj.u.s.n;
        jbuf bb = {NULL, 0, 0, r->a, 0};
        for (int64_t c = 0; c < count; c++) {
            size_t idx = (size_t)(start + c * vals[2]);
            if (!kt__jbuf_put(&bb, p + offs[idx], offs[idx + 1] - offs[idx]))
                return kt__jr_oom(r, n);
        }
        *out = jv_str(bb.p ? bb.p : "", bb.n);
        return 0;
    }
    return kt__jr_fail(r, n, "'%s' object is not subscriptable", kt__jv_type_name(obj));
}

/* ------------------------------------------------------------ arithmetic */

static const char *op_symbol(int op)
{
    switch (op) {
    case JOP_ADD: return "+";
    case JOP_SUB: return "-";
    case JOP_MUL: return "*";
    case JOP_DIV: return "/";
    case JOP_FLOORDIV: return "//";
    case JOP_MOD: return "%";
    case JOP_POW: return "**";
    default: return "?";
    }
}

static int bad_operands(jrender *r, const jnode *n, jv a, jv b)
{
    if (a.type == JV_UNDEF)
        return kt__jr_undefined(r, n, a);
    if (b.type == JV_UNDEF)
        return kt__jr_undefined(r, n, b);
    return kt__jr_fail(r, n, "unsupported operand type(s) for %s: '%s' and '%s'",
                       op_symbol(n->op), kt__jv_type_name(a), kt__jv_type_name(b));
}

static int repeat_seq(jrender *r, const jnode *n, jv seq, int64_t times, jv *out)
{
    bool empty = seq.type == JV_STR ? seq.u.s.n == 0 : seq.u.l->n == 0;
    if (times < 0 || empty) /* an empty sequence stays empty at once, however many times */
        times = 0;
    if (seq.type == JV_STR) {
        if (seq.u.s.n && (uint64_t)times > r->lim.max_output / seq.u.s.n)
            return kt__jr_oom(r, n);
        jbuf b = {NULL, 0, 0, r->a, 0};
        for (int64_t k = 0; k < times; k++)
            if (!kt__jbuf_put(&b, seq.u.s.p, seq.u.s.n))
                return kt__jr_oom(r, n);
        *out = jv_str(b.p ? b.p : "", b.n);
        return 0;
    }
    size_t cnt = seq.u.l->n;
    if (cnt && (uint64_t)times > (r->lim.max_memory / sizeof(jv)) / cnt)
        return kt__jr_oom(r, n);
    jlist *l = kt__jlist_new(r->a, cnt * (size_t)times);
    if (!l)
        return kt__jr_oom(r, n);
    l->tuple = seq.u.l->tuple;
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < cnt; i++)
            l->items[l->n++] = seq.u.l->items[i];
    *out = kt__jv_list(l);
    return 0;
}

static int binop(jrender *r, const jnode *n, jv a, jv b, jv *out)
{
    int op = n->op;
    if (jv_is_number(a) && jv_is_number(b)) {
        bool ints = a.type != JV_FLOAT && b.type != JV_FLOAT;
        int64_t x = jv_number_as_int(a), y = jv_number_as_int(b), z;
        double fx = jv_number_as_double(a), fy = jv_number_as_double(b);
        switch (op) {
        case JOP_ADD:
        case JOP_SUB:
        case JOP_MUL: {
            if (!ints) {
                *out = jv_float(op == JOP_ADD ? fx + fy : op == JOP_SUB ? fx - fy : fx * fy);
                return 0;
            }
            bool overflow = op == JOP_ADD   ? __builtin_add_overflow(x, y, &z)
                            : op == JOP_SUB ? __builtin_sub_overflow(x, y, &z)
                                            : __builtin_mul_overflow(x, y, &z);
            if (overflow)
                return kt__jr_fail(r, n, "integer overflow");
            *out = jv_int(z);
            return 0;
        }
        case JOP_DIV:
            if (fy == 0.0)
                return kt__jr_fail(r, n, "division by zero");
            *out = jv_float(fx / fy);
            return 0;
        case JOP_FLOORDIV:
            if (ints) {
                if (y == 0)
                    return kt__jr_fail(r, n, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1)
                    return kt__jr_fail(r, n, "integer overflow");
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0)))
                    q--;
                *out = jv_int(q);
            } else {
                if (fy == 0.0)
                    return kt__jr_fail(r, n, "float floor division by zero");
                *out = jv_float(floor(fx / fy));
            }
            return 0;
        case JOP_MOD:
            if (ints) {
                if (y == 0)
                    return kt__jr_fail(r, n, "integer division or modulo by zero");
                if (y == -1) {
                    *out = jv_int(0);
                    return 0;
                }
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0)))
                    m += y;
                *out = jv_int(m);
            } else {
                if (fy == 0.0)
                    return kt__jr_fail(r, n, "float modulo");
                double m = fmod(fx, fy);
                if (m != 0.0 && ((m < 0) != (fy < 0)))
                    m += fy;
                *out = jv_float(m);
            }
            return 0;
        case JOP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if (e & 1 && __builtin_mul_overflow(acc, base, &acc))
                        return kt__jr_fail(r, n, "integer overflow");
                    if (e > 1 && __builtin_mul_overflow(base, base, &base))
                        return kt__jr_fail(r, n, "integer overflow");
                }
                *out = jv_int(acc);
            } else {
                if (fx == 0.0 && fy < 0)
                    return kt__jr_fail(r, n, "0.0 cannot be raised to a negative power");
                *out = jv_float(pow(fx, fy));
            }
            return 0;
        default:
            break;
        }
    }
    if (op == JOP_ADD && a.type == JV_STR && b.type == JV_STR) {
        if (b.u.s.n == 0) {
            *out = a;
            return 0;
        }
        if (a.u.s.n == 0) {
            *out = b;
            return 0;
        }
        char *p = kt__ja_alloc(r->a, a.u.s.n + b.u.s.n + 1);
        if (!p)
            return kt__jr_oom(r, n);
        memcpy(p, a.u.s.p, a.u.s.n);
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
        *out = jv_str(p, a.u.s.n + b.u.s.n);
        return 0;
    }
    bool plain_a = a.type != JV_LIST || (!a.u.l->lazy && !a.u.l->view);
    bool plain_b = b.type != JV_LIST || (!b.u.l->lazy && !b.u.l->view);
    if (!plain_a || !plain_b) /* generators and dict views have no + or * */
        return bad_operands(r, n, a, b);
    if (op == JOP_ADD && a.type == JV_LIST && b.type == JV_LIST &&
        a.u.l->tuple == b.u.l->tuple) {
        jlist *l = kt__jlist_new(r->a, a.u.l->n + b.u.l->n);
        if (!l)
            return kt__jr_oom(r, n);
        l->tuple = a.u.l->tuple;
        for (size_t i = 0; i < a.u.l->n; i++)
            l->items[l->n++] = a.u.l->items[i];
        for (size_t i = 0; i < b.u.l->n; i++)
            l->items[l->n++] = b.u.l->items[i];
        *out = kt__jv_list(l);
        return 0;
    }
    if (op == JOP_MUL) {
        if ((a.type == JV_STR || a.type == JV_LIST) && (b.type == JV_INT || b.type == JV_BOOL))
            return repeat_seq(r, n, a, jv_number_as_int(b), out);
        if ((b.type == JV_STR || b.type == JV_LIST) && (a.type == JV_INT || a.type == JV_BOOL))
            return repeat_seq(r, n, b, jv_number_as_int(a), out);
    }
    if (op == JOP_MOD && a.type == JV_STR)
        return kt__jinja_percent_format(r, n, a, b, out);
    return bad_operands(r, n, a, b);
}

static int contains(jrender *r, const jnode *n, jv needle, jv hay, bool *out)
{
    switch (hay.type) {
    case JV_UNDEF:
        *out = false;
        return 0;
    case JV_STR:
        if (needle.type != JV_STR)
            return kt__jr_fail(r, n, "'in <string>' requires string as left operand, not %s",
                               kt__jv_type_name(needle));
        if (needle.u.s.n == 0) {
            *out = true;
            return 0;
        }
        *out = false;
        if (needle.u.s.n <= hay.u.s.n)
            for (size_t i = 0; i + needle.u.s.n <= hay.u.s.n; i++)
                if (hay.u.s.p[i] == needle.u.s.p[0] &&
                    !memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n)) {
                    *out = true;
                    break;
                }
        return 0;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (kt__jv_equal(hay.u.l->items[i], needle)) {
                *out = true;
                break;
            }
        return 0;
    case JV_DICT:
        if (needle.type == JV_DICT || needle.type == JV_NS ||
            (needle.type == JV_LIST && !needle.u.l->tuple))
            return kt__jr_fail(r, n, "unhashable type: '%s'", kt__jv_type_name(needle));
        *out = kt__jdict_get(hay.u.d, needle) != NULL;
        return 0;
    default:
        return kt__jr_fail(r, n, "argument of type '%s' is not iterable",
                           kt__jv_type_name(hay));
    }
}

static int compare(jrender *r, const jnode *n, int op, jv a, jv b, bool *out)
{
    switch (op) {
    case JOP_EQ:
        *out = kt__jv_equal(a, b);
        return 0;
    case JOP_NE:
        *out = !kt__jv_equal(a, b);
        return 0;
    case JOP_IN:
    case JOP_NOTIN:
        if (contains(r, n, a, b, out) < 0)
            return -1;
        if (op == JOP_NOTIN)
            *out = !*out;
        return 0;
    default: {
        if (a.type == JV_UNDEF)
            return kt__jr_undefined(r, n, a);
        if (b.type == JV_UNDEF)
            return kt__jr_undefined(r, n, b);
        bool ok;
        int c = kt__jv_compare(a, b, &ok);
        if (!ok) {
            const char *sym = op == JOP_LT ? "<" : op == JOP_LE ? "<=" : op == JOP_GT ? ">" : ">=";
            return kt__jr_fail(r, n, "'%s' not supported between instances of '%s' and '%s'",
                               sym, kt__jv_type_name(a), kt__jv_type_name(b));
        }
        if (isnan(jv_number_as_double(a)) && jv_is_number(a) && jv_is_number(b))
            c = 2;
        if (jv_is_number(b) && isnan(jv_number_as_double(b)) && jv_is_number(a))
            c = 2;
        *out = op == JOP_LT ? c == -1 : op == JOP_LE ? (c == -1 || c == 0)
             : op == JOP_GT ? c == 1 : (c == 1 || c == 0);
        return 0;
    }
    }
}

/* ------------------------------------------------------------------ calls */

typedef struct argvals {
    jv *pos;
    jv *kwv;
    jargs args;
} argvals;

/* *out = the values of the count expressions (NULL when there are none). */
static int eval_each(jrender *r, jscope *s, const jnode *at, jnode *const *exprs, size_t count,
                     jv **out)
{
    *out = NULL;
    if (!count)
        return 0;
    jv *v = kt__ja_alloc(r->a, count * sizeof(jv));
    if (!v)
        return kt__jr_oom(r, at);
    for (size_t i = 0; i < count; i++)
        if (eval(r, s, exprs[i], &v[i]) < 0)
            return -1;
    *out = v;
    return 0;
}

static int eval_args(jrender *r, jscope *s, const jnode *n, argvals *av)
{
    memset(av, 0, sizeof *av);
    if (eval_each(r, s, n, n->list, n->n, &av->pos) < 0 ||
        eval_each(r, s, n, n->list2, n->n2, &av->kwv) < 0)
        return -1;
    av->args.pos = av->pos;
    av->args.npos = n->n;
    av->args.kwn = n->names;
    av->args.kwv = av->kwv;
    av->args.nkw = n->n2;
    return 0;
}

static int exec_body(jrender *r, jscope *s, jnode *const *list, size_t n);

/* Runs `body` with output captured into a new string. */
static int capture(jrender *r, jscope *s, jnode *const *list, size_t n, jv *out, int *flow)
{
    jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
    jbuf *saved = r->out;
    r->out = &b;
    int rc = exec_body(r, s, list, n);
    r->out = saved;
    if (rc < 0)
        return -1;
    if (flow)
        *flow = rc;
    *out = jv_str(b.p ? b.p : "", b.n);
    return 0;
}

static int call_macro(jrender *r, const jnode *at, const jmacro *m, const jargs *args, jv caller,
                      jv *out)
{
    const jnode *def = m->def;
    if (++r->depth > r->lim.max_depth) {
        r->depth--;
        kt__jr_fail(r, at, "macro recursion too deep");
        r->status = KT_ERR_LIMIT;
        return -1;
    }
    jscope *s = scope_new(r, m->closure);
    if (!s)
        return kt__jr_oom(r, at);
    size_t np = def->n2;
    for (size_t i = 0; i < np; i++) {
        jv v;
        const char *pname = def->names[i];
        if (!kt__jargs_get(args, i, pname, &v)) {
            if (def->list2[i]) {
                if (eval(r, s, def->list2[i], &v) < 0)
                    return -1;
            } else {
                v = kt__jv_undef_named(pname);
            }
        }
        if (scope_set(r, at, s, pname, v) < 0)
            return -1;
    }
    /* Extra arguments: varargs / kwargs as Jinja provides them. */
    jlist *varargs = kt__jlist_new(r->a, 0);
    jdict *kwargs = kt__jdict_new(r->a, 0);
    if (!varargs || !kwargs)
        return kt__jr_oom(r, at);
    varargs->tuple = true;
    bool is_macro = def->kind == JN_MACRO;
    if (is_macro && args->npos > np && !(def->op & JMACRO_VARARGS)) {
        r->depth--;
        return kt__jr_fail(r, at, "macro '%s' takes not more than %zu argument(s)", def->name,
                           np);
    }
    for (size_t i = np; i < args->npos; i++)
        if (!kt__jlist_push(r->a, varargs, args->pos[i]))
            return kt__jr_oom(r, at);
    for (size_t k = 0; k < args->nkw; k++) {
        bool known = false;
        for (size_t i = 0; i < np; i++)
            if (!strcmp(def->names[i], args->kwn[k]))
                known = true;
        if (known || !strcmp(args->kwn[k], "caller"))
            continue;
        if (is_macro && !(def->op & JMACRO_KWARGS)) {
            r->depth--;
            return kt__jr_fail(r, at, "macro '%s' takes no keyword argument '%s'", def->name,
                               args->kwn[k]);
        }
        if (!kt__jdict_set(r->a, kwargs, jv_str(args->kwn[k], strlen(args->kwn[k])),
                           args->kwv[k]))
            return kt__jr_oom(r, at);
    }
    if (scope_set(r, at, s, "varargs", kt__jv_list(varargs)) < 0 ||
        scope_set(r, at, s, "kwargs", kt__jv_dict(kwargs)) < 0)
        return -1;
    if (caller.type == JV_MACRO && scope_set(r, at, s, "caller", caller) < 0)
        return -1;
    int rc = capture(r, s, def->list, def->n, out, NULL);
    r->depth--;
    return rc;
}

static int run_for(jrender *r, jscope *s, const jnode *n, jv iterable, uint32_t depth0);

int kt__jr_call(jrender *r, const jnode *at, jv callee, const jargs *args, jv caller, jv *out)
{
    if (!step(r, at))
        return -1;
    switch (callee.type) {
    case JV_MACRO:
        return call_macro(r, at, callee.u.m, args, caller, out);
    case JV_FUNC:
        return kt__jinja_call_builtin(r, at, callee.u.fn, args, out);
    case JV_LOOP: {
        const jloop *l = callee.u.loop;
        if (!l->for_node->flag)
            return kt__jr_fail(r, at, "loop() needs a recursive for loop");
        if (args->npos != 1)
            return kt__jr_fail(r, at, "loop() takes exactly one argument");
        if (++r->depth > r->lim.max_depth) {
            r->depth--;
            return kt__jr_fail(r, at, "loop recursion too deep");
        }
        jbuf b = {NULL, 0, 0, r->a, r->lim.max_output};
        jbuf *saved = r->out;
        r->out = &b;
        int rc = run_for(r, l->scope, l->for_node, args->pos[0], l->depth0 + 1);
        r->out = saved;
        r->depth--;
        if (rc < 0)
            return -1;
        *out = jv_str(b.p ? b.p : "", b.n);
        return 0;
    }
    case JV_UNDEF:
        return kt__jr_undefined(r, at, callee);
    default:
        return kt__jr_fail(r, at, "'%s' object is not callable", kt__jv_type_name(callee));
    }
}

/* ----------------------------------------------------------- expressions */

static jv name_value(jrender *r, jscope *s, const jnode *n)
{
    size_t len = strlen(n->name);
    jv *v = scope_lookup(s, n->name, len);
    if (v)
        return *v;
    jv g = kt__jinja_global(r, n->name);
    if (g.type == JV_FUNC)
        return g;
    return kt__jv_undef_named(n->name);
}

static int eval_filter(jrender *r, jscope *s, const jnode *n, jv operand, jv *out)
{
    argvals av;
    if (eval_args(r, s, n, &av) < 0)
        return -1;
    return kt__jinja_filter(r, n, n->name, operand, &av.args, out);
}

/* Applies a filter chain whose innermost operand slot is NULL. */
static int apply_chain(jrender *r, jscope *s, const jnode *chain, jv operand, jv *out)
{
    if (!chain) {
        *out = operand;
        return 0;
    }
    jv inner;
    if (chain->a) {
        if (apply_chain(r, s, chain->a, operand, &inner) < 0)
            return -1;
    } else {
        inner = operand;
    }
    return eval_filter(r, s, chain, inner, out);
}

static int eval(jrender *r, jscope *s, const jnode *n, jv *out)
{
    if (!step(r, n))
        return -1;
    switch (n->kind) {
    case JN_CONST:
        *out = n->value;
        return 0;
    case JN_NAME:
        *out = name_value(r, s, n);
        return 0;
    case JN_GETATTR: {
        jv obj;
        if (eval(r, s, n->a, &obj) < 0)
            return -1;
        return kt__jr_getattr(r, n, obj, n->name, strlen(n->name), out);
    }
    case JN_GETITEM: {
        jv obj, key;
        if (eval(r, s, n->a, &obj) < 0 || eval(r, s, n->b, &key) < 0)
            return -1;
        return kt__jr_getitem(r, n, obj, key, out);
    }
    case JN_SLICE:
        return eval_slice(r, s, n, out);
    case JN_CALL: {
        jv callee;
        if (eval(r, s, n->a, &callee) < 0)
            return -1;
        argvals av;
        if (eval_args(r, s, n, &av) < 0)
            return -1;
        return kt__jr_call(r, n, callee, &av.args, jv_undef(), out);
    }
    case JN_FILTER: {
        jv operand;
        if (eval(r, s, n->a, &operand) < 0)
            return -1;
        return eval_filter(r, s, n, operand, out);
    }
    case JN_TEST: {
        jv operand;
        if (eval(r, s, n->a, &operand) < 0)
            return -1;
        argvals av;
        if (eval_args(r, s, n, &av) < 0)
            return -1;
        bool res;
        if (kt__jinja_test(r, n, n->name, operand, &av.args, &res) < 0)
            return -1;
        *out = jv_bool(n->flag ? !res : res);
        return 0;
    }
    case JN_BINOP: {
        jv a, b;
        if (eval(r, s, n->a, &a) < 0 || eval(r, s, n->b, &b) < 0)
            return -1;
        return binop(r, n, a, b, out);
    }
    case JN_UNARY: {
        jv a;
        if (eval(r, s, n->a, &a) < 0)
            return -1;
        if (a.type == JV_INT || a.type == JV_BOOL) {
            int64_t v = jv_number_as_int(a);
            if (n->op == JOP_NEG && v == INT64_MIN)
                return kt__jr_fail(r, n, "integer overflow");
            *out = jv_int(n->op == JOP_NEG ? -v : v);
            return 0;
        }
        if (a.type == JV_FLOAT) {
            *out = jv_float(n->op == JOP_NEG ? -a.u.f : a.u.f);
            return 0;
        }
        if (a.type == JV_UNDEF)
            return kt__jr_undefined(r, n, a);
        return kt__jr_fail(r, n, "bad operand type for unary %s: '%s'",
                           n->op == JOP_NEG ? "-" : "+", kt__jv_type_name(a));
    }
    case JN_COMPARE: {
        jv left;
        if (eval(r, s, n->a, &left) < 0)
            return -1;
        bool res = true;
        for (size_t i = 0; i < n->n && res; i++) {
            jv right;
            if (eval(r, s, n->list[i], &right) < 0)
                return -1;
            if (compare(r, n, n->ops[i], left, right, &res) < 0)
                return -1;
            left = right;
        }
        *out = jv_bool(res);
        return 0;
    }
    case JN_AND:
        if (eval(r, s, n->a, out) < 0)
            return -1;
        if (!kt__jv_truthy(*out))
            return 0;
        return eval(r, s, n->b, out);
    case JN_OR:
        if (eval(r, s, n->a, out) < 0)
            return -1;
        if (kt__jv_truthy(*out))
            return 0;
        return eval(r, s, n->b, out);
    case JN_NOT: {
        jv a;
        if (eval(r, s, n->a, &a) < 0)
            return -1;
        *out = jv_bool(!kt__jv_truthy(a));
        return 0;
    }
    case JN_CONDEXPR: {
        jv c;
        if (eval(r, s, n->a, &c) < 0)
            return -1;
        if (kt__jv_truthy(c))
            return eval(r, s, n->b, out);
        if (n->c)
            return eval(r, s, n->c, out);
        *out = jv_undef();
        return 0;
    }
    case JN_LIST:
    case JN_TUPLE: {
        jlist *l = kt__jlist_new(r->a, n->n);
        if (!l)
            return kt__jr_oom(r, n);
        l->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->n; i++)
            if (eval(r, s, n->list[i], &l->items[l->n++]) < 0)
                return -1;
        *out = kt__jv_list(l);
        return 0;
    }
    case JN_DICT: {
        jdict *d = kt__jdict_new(r->a, n->n);
        if (!d)
            return kt__jr_oom(r, n);
        for (size_t i = 0; i < n->n; i++) {
            jv k, v;
            if (eval(r, s, n->list[i], &k) < 0 || eval(r, s, n->list2[i], &v) < 0)
                return -1;
            if (k.type == JV_LIST && !k.u.l->tuple)
                return kt__jr_fail(r, n, "unhashable type: 'list'");
            if (k.type == JV_DICT || k.type == JV_UNDEF)
                return kt__jr_fail(r, n, "unhashable type: '%s'", kt__jv_type_name(k));
            if (!kt__jdict_set(r->a, d, k, v))
                return kt__jr_oom(r, n);
        }
        *out = kt__jv_dict(d);
        return 0;
    }
    case JN_CONCAT: {
        jbuf b = {NULL, 0, 0, r->a, 0};
        for (size_t i = 0; i < n->n; i++) {
            jv v;
            if (eval(r, s, n->list[i], &v) < 0)
                return -1;
            if (!kt__jv_str(&b, v))
                return kt__jr_oom(r, n);
        }
        *out = jv_str(b.p ? b.p : "", b.n);
        return 0;
    }
    default:
        return kt__jr_fail(r, n, "internal: unexpected node kind %d in expression", n->kind);
    }
}

/* ------------------------------------------------------------ statements */

static int assign(jrender *r, jscope *s, const jnode *target, jv v)
{
    if (target->kind == JN_NAME)
        return scope_set(r, target, s, target->name, v);
    if (target->kind == JN_TUPLE) {
        const jv *items;
        size_t cnt;
        if (v.type == JV_DICT || v.type == JV_STR || v.type == JV_LIST) {
            if (kt__jr_iter(r, target, v, &items, &cnt) < 0)
                return -1;
        } else {
            return kt__jr_fail(r, target, "cannot unpack non-iterable %s object",
                               kt__jv_type_name(v));
        }
        if (cnt != target->n)
            return kt__jr_fail(r, target, "cannot unpack %zu values into %zu names", cnt,
                               target->n);
        for (size_t i = 0; i < cnt; i++)
            if (assign(r, s, target->list[i], items[i]) < 0)
                return -1;
        return 0;
    }
    if (target->kind == JN_GETATTR) {
        jv obj;
        if (eval(r, s, target->a, &obj) < 0)
            return -1;
        if (obj.type != JV_NS)
            return kt__jr_fail(r, target, "can only assign attributes of a namespace object");
        if (!kt__jdict_set(r->a, obj.u.d, jv_str(target->name, strlen(target->name)), v))
            return kt__jr_oom(r, target);
        return 0;
    }
    return kt__jr_fail(r, target, "can't assign to this target");
}

static int write_value(jrender *r, const jnode *at, jv v)
{
    if (v.type == JV_STR) {
        if (!kt__jbuf_put(r->out, v.u.s.p, v.u.s.n))
            return kt__jr_oom(r, at);
        return 0;
    }
    if (!kt__jv_str(r->out, v))
        return kt__jr_oom(r, at);
    return 0;
}

static int run_for(jrender *r, jscope *s, const jnode *n, jv iterable, uint32_t depth0)
{
    const jv *items;
    size_t cnt;
    if (kt__jr_iter(r, n->b, iterable, &items, &cnt) < 0)
        return -1;
    if (n->c) {
        /* `for x in xs if cond`: filter first (loop.length counts what is kept). */
        jv *kept = kt__ja_alloc(r->a, (cnt ? cnt : 1) * sizeof(jv));
        if (!kept)
            return kt__jr_oom(r, n);
        size_t k = 0;
        jscope *fs = scope_new(r, s);
        if (!fs)
            return kt__jr_oom(r, n);
        for (size_t i = 0; i < cnt; i++) {
            if (fs->vars)
                fs->vars->n = 0;
            if (assign(r, fs, n->a, items[i]) < 0)
                return -1;
            jv c;
            if (eval(r, fs, n->c, &c) < 0)
                return -1;
            if (kt__jv_truthy(c))
                kept[k++] = items[i];
        }
        items = kept;
        cnt = k;
    }
    if (cnt == 0) {
        if (!n->n2)
            return 0;
        jscope *es = scope_new(r, s);
        if (!es)
            return kt__jr_oom(r, n);
        int rc = exec_body(r, es, n->list2, n->n2);
        return rc < 0 ? -1 : 0;
    }
    jloop *l = kt__ja_alloc(r->a, sizeof *l);
    if (!l)
        return kt__jr_oom(r, n);
    l->items = items;
    l->length = cnt;
    l->depth0 = depth0;
    l->for_node = n;
    l->scope = s;
    jv loopv;
    loopv.type = JV_LOOP;
    loopv.u.loop = l;
    /* One scope reused by every iteration, emptied in between: names set in
     * an iteration never outlive it (Jinja), and long loops stay small. */
    jscope *it = scope_new(r, s);
    if (!it)
        return kt__jr_oom(r, n);
    for (size_t i = 0; i < cnt; i++) {
        if (!step(r, n))
            return -1;
        l->index0 = i;
        if (it->vars)
            it->vars->n = 0;
        if (assign(r, it, n->a, items[i]) < 0 || scope_set(r, n, it, "loop", loopv) < 0)
            return -1;
        int rc = exec_body(r, it, n->list, n->n);
        if (rc < 0)
            return -1;
        if (rc == EXEC_BREAK)
            break;
    }
    return 0;
}

/* A macro value for the definition n (a macro, or a call block's caller) closing over s. */
static int macro_value(jrender *r, jscope *s, const jnode *n, jv *out)
{
    jmacro *m = kt__ja_alloc(r->a, sizeof *m);
    if (!m)
        return kt__jr_oom(r, n);
    m->def = n;
    m->closure = s;
    out->type = JV_MACRO;
    out->u.m = m;
    return 0;
}

static int exec_stmt(jrender *r, jscope *s, const jnode *n)
{
    if (!step(r, n))
        return -1;
    switch (n->kind) {
    case JN_TEXT:
        if (!kt__jbuf_put(r->out, n->value.u.s.p, n->value.u.s.n))
            return kt__jr_oom(r, n);
        return 0;
    case JN_OUTPUT: {
        jv v;
        if (eval(r, s, n->a, &v) < 0)
            return -1;
        return write_value(r, n, v);
    }
    case JN_IF: {
        jv c;
        if (eval(r, s, n->a, &c) < 0)
            return -1;
        if (kt__jv_truthy(c))
            return exec_body(r, s, n->list, n->n);
        return exec_body(r, s, n->list2, n->n2);
    }
    case JN_FOR: {
        jv it;
        if (eval(r, s, n->b, &it) < 0)
            return -1;
        return run_for(r, s, n, it, 0);
    }
    case JN_SET: {
        jv v;
        if (eval(r, s, n->b, &v) < 0)
            return -1;
        return assign(r, s, n->a, v);
    }
    case JN_SET_BLOCK: {
        jv body, v;
        jscope *bs = scope_new(r, s);
        if (!bs)
            return kt__jr_oom(r, n);
        if (capture(r, bs, n->list, n->n, &body, NULL) < 0)
            return -1;
        if (apply_chain(r, s, n->c, body, &v) < 0)
            return -1;
        return assign(r, s, n->a, v);
    }
    case JN_MACRO: {
        jv v;
        if (macro_value(r, s, n, &v) < 0)
            return -1;
        return scope_set(r, n, s, n->name, v);
    }
    case JN_CALL_BLOCK: {
        jv caller;
        if (macro_value(r, s, n, &caller) < 0)
            return -1;
        const jnode *call = n->a;
        jv callee, res;
        if (eval(r, s, call->a, &callee) < 0)
            return -1;
        argvals av;
        if (eval_args(r, s, call, &av) < 0)
            return -1;
        if (kt__jr_call(r, call, callee, &av.args, caller, &res) < 0)
            return -1;
        return write_value(r, n, res);
    }
    case JN_FILTER_BLOCK: {
        jv body, v;
        jscope *bs = scope_new(r, s);
        if (!bs)
            return kt__jr_oom(r, n);
        int flow = 0;
        if (capture(r, bs, n->list, n->n, &body, &flow) < 0)
            return -1;
        if (apply_chain(r, s, n->a, body, &v) < 0)
            return -1;
        if (write_value(r, n, v) < 0)
            return -1;
        return flow;
    }
    case JN_WITH: {
        jscope *ws = scope_new(r, s);
        if (!ws)
            return kt__jr_oom(r, n);
        for (size_t i = 0; i < n->n2; i++) {
            jv v;
            if (eval(r, s, n->list2[i], &v) < 0 || scope_set(r, n, ws, n->names[i], v) < 0)
                return -1;
        }
        return exec_body(r, ws, n->list, n->n);
    }
    case JN_DO: {
        jv v;
        return eval(r, s, n->a, &v) < 0 ? -1 : 0;
    }
    case JN_SCOPE:
        return exec_body(r, s, n->list, n->n);
    case JN_BREAK:
        return EXEC_BREAK;
    case JN_CONTINUE:
        return EXEC_CONTINUE;
    default:
        return kt__jr_fail(r, n, "internal: unexpected node kind %d in statement", n->kind);
    }
}

static int exec_body(jrender *r, jscope *s, jnode *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = exec_stmt(r, s, list[i]);
        if (rc != EXEC_OK)
            return rc;
    }
    return EXEC_OK;
}

kt_status kt__jinja_render(const jtemplate *t, ja_arena *arena, jdict *vars, int64_t now,
                           const jrender_limits *lim, kt_buf *out)
{
    jrender r;
    memset(&r, 0, sizeof r);
    r.t = t;
    r.a = arena;
    r.now = now;
    r.lim = *lim;
    jbuf b = {NULL, 0, 0, arena, lim->max_output};
    r.out = &b;
    jscope root = {NULL, vars};
    r.root = &root;
    r.stack_base = (uintptr_t)__builtin_frame_address(0);
    int rc = exec_body(&r, &root, t->root->list, t->root->n);
    if (rc < 0 || r.failed)
        return r.status < 0 ? r.status : KT_ERR_FORMAT;
    kt_status st = kt__buf_append(out, b.p ? b.p : "", b.n);
    return st;
}
