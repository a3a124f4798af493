/* Jinja engine: recursive-descent parser from tokens to the AST, with
 * Jinja2's grammar and operator precedence (filters and tests bind tighter
 * than arithmetic; `**` is left-associative as in Jinja). */
#include <stdio.h>
#include <string.h>

#include "jinja.h"

#define MAX_NESTING 200

typedef struct parser {
    jtemplate *t;
    const jtoks *toks;
    size_t i;
    int depth;
    int loop_depth; /* break/continue need an enclosing for */
    kt_status err;
} parser;

static const jtok *cur(const parser *p)
{
    return &p->toks->t[p->i];
}

static const jtok *peek(const parser *p, size_t k)
{
    size_t j = p->i + k;
    return j < p->toks->n ? &p->toks->t[j] : &p->toks->t[p->toks->n - 1];
}

static void advance(parser *p)
{
    if (p->i + 1 < p->toks->n)
        p->i++;
}

static const char *tok_desc(const jtok *t, char *buf, size_t cap)
{
    switch (t->type) {
    case JT_EOF: return "end of template";
    case JT_TEXT: return "template data";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "end of print statement '}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "end of statement block '%}'";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    case JT_STRING: return "string";
    default:
        snprintf(buf, cap, "'%.*s'", (int)KT_MIN(t->n, (size_t)40), t->p);
        return buf;
    }
}

static jnode *fail_at(parser *p, const jtok *t, const char *fmt, ...) KT_PRINTF(3, 4);
static jnode *fail_at(parser *p, const jtok *t, const char *fmt, ...)
{
    if (p->err < 0)
        return NULL;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->err = kt__error(KT_ERR_FORMAT, "template %s:%u:%u: syntax error: %s", p->t->name, t->line,
                       t->col, msg);
    return NULL;
}

static jnode *oom(parser *p)
{
    if (p->err >= 0)
        p->err = kt__error(KT_ERR_NOMEM, "template %s: out of memory while parsing", p->t->name);
    return NULL;
}

static bool is_op(const jtok *t, const char *op)
{
    return t->type == JT_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}

static bool is_name(const jtok *t, const char *name)
{
    return t->type == JT_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static jnode *new_node(parser *p, jn_kind kind, const jtok *at)
{
    jnode *n = kt__ja_alloc(&p->t->arena, sizeof *n);
    if (!n)
        return oom(p);
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static char *dup_str(parser *p, const char *s, size_t n)
{
    char *d = kt__ja_alloc(&p->t->arena, n + 1);
    if (!d) {
        oom(p);
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* Growable node vector in the template arena. */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
    const char **names;
} nvec;

static bool nvec_push(parser *p, nvec *vec, jnode *node, const char *name)
{
    if (vec->n == vec->cap) {
        size_t cap = vec->cap ? vec->cap * 2 : 4;
        jnode **v = kt__ja_resize(&p->t->arena, vec->v, vec->n, cap, sizeof *v);
        const char **names = kt__ja_resize(&p->t->arena, vec->names, vec->n, cap, sizeof *names);
        if (!v || !names) {
            oom(p);
            return false;
        }
        vec->v = v;
        vec->names = names;
        vec->cap = cap;
    }
    vec->v[vec->n] = node;
    vec->names[vec->n] = name;
    vec->n++;
    return true;
}

/* A node whose children are the vector's items (tuple, list, concatenation, comparison). */
static jnode *list_node(parser *p, jn_kind kind, const jtok *at, const nvec *items)
{
    jnode *n = new_node(p, kind, at);
    if (n) {
        n->list = items->v;
        n->n = items->n;
    }
    return n;
}

static bool expect_op(parser *p, const char *op)
{
    if (!is_op(cur(p), op)) {
        char buf[64];
        fail_at(p, cur(p), "expected '%s', got %s", op, tok_desc(cur(p), buf, sizeof buf));
        return false;
    }
    advance(p);
    return true;
}

static bool expect_type(parser *p, jtok_type type, const char *what)
{
    if (cur(p)->type != type) {
        char buf[64];
        fail_at(p, cur(p), "expected %s, got %s", what, tok_desc(cur(p), buf, sizeof buf));
        return false;
    }
    advance(p);
    return true;
}

static jnode *parse_expression(parser *p, bool with_condexpr);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_or(parser *p);

typedef struct end_rules {
    const char *names[3];
} end_rules;

static bool tuple_end(const parser *p, const end_rules *extra)
{
    const jtok *t = cur(p);
    if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || is_op(t, ")") || t->type == JT_EOF)
        return true;
    if (extra)
        for (int k = 0; k < 3 && extra->names[k]; k++)
            if (is_name(t, extra->names[k]))
                return true;
    return false;
}

static jnode *parse_primary(parser *p);

/* parse_tuple of Jinja: `a`, `a, b`, `(a, b)`. simplified: primaries only. */
static jnode *parse_tuple(parser *p, bool simplified, bool with_condexpr,
                          const end_rules *extra, bool explicit_parens)
{
    const jtok *start = cur(p);
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(p, ","))
            return NULL;
        if (tuple_end(p, extra))
            break;
        jnode *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (!e || !nvec_push(p, &items, e, NULL))
            return NULL;
        if (is_op(cur(p), ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n)
            return items.v[0];
        if (!explicit_parens) {
            char buf[64];
            return fail_at(p, cur(p), "expected an expression, got %s",
                           tok_desc(cur(p), buf, sizeof buf));
        }
    }
    return list_node(p, JN_TUPLE, start, &items);
}

static jnode *parse_primary(parser *p)
{
    const jtok *t = cur(p);
    jnode *n;
    if (++p->depth > MAX_NESTING)
        return fail_at(p, t, "expression nested too deeply");
    switch (t->type) {
    case JT_NAME:
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            n = new_node(p, JN_CONST, t);
            if (n)
                n->value = jv_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = new_node(p, JN_CONST, t);
            if (n)
                n->value = jv_none();
        } else {
            n = new_node(p, JN_NAME, t);
            if (n && !(n->name = dup_str(p, t->p, t->n)))
                n = NULL;
        }
        advance(p);
        break;
    case JT_STRING: {
        n = new_node(p, JN_CONST, t);
        if (!n)
            break;
        /* Adjacent string literals concatenate. */
        if (peek(p, 1)->type == JT_STRING) {
            jbuf b = {NULL, 0, 0, &p->t->arena, 0};
            while (cur(p)->type == JT_STRING) {
                if (!kt__jbuf_put(&b, cur(p)->p, cur(p)->n)) {
                    n = oom(p);
                    break;
                }
                advance(p);
            }
            if (n)
                n->value = jv_str(b.p ? b.p : "", b.n);
        } else {
            n->value = jv_str(t->p, t->n);
            advance(p);
        }
        break;
    }
    case JT_INT:
        n = new_node(p, JN_CONST, t);
        if (n)
            n->value = jv_int(t->i);
        advance(p);
        break;
    case JT_FLOAT:
        n = new_node(p, JN_CONST, t);
        if (n)
            n->value = jv_float(t->f);
        advance(p);
        break;
    case JT_OP:
        if (is_op(t, "(")) {
            advance(p);
            n = parse_tuple(p, false, true, NULL, true);
            if (n && !expect_op(p, ")"))
                n = NULL;
        } else if (is_op(t, "[")) {
            advance(p);
            nvec items = {0};
            n = new_node(p, JN_LIST, t);
            while (n && !is_op(cur(p), "]")) {
                if (items.n && !expect_op(p, ",")) {
                    n = NULL;
                    break;
                }
                if (is_op(cur(p), "]"))
                    break;
                jnode *e = parse_expression(p, true);
                if (!e || !nvec_push(p, &items, e, NULL))
                    n = NULL;
            }
            if (n && expect_op(p, "]")) {
                n->list = items.v;
                n->n = items.n;
            } else {
                n = NULL;
            }
        } else if (is_op(t, "{")) {
            advance(p);
            nvec keys = {0}, vals = {0};
            n = new_node(p, JN_DICT, t);
            while (n && !is_op(cur(p), "}")) {
                if (keys.n && !expect_op(p, ",")) {
                    n = NULL;
                    break;
                }
                if (is_op(cur(p), "}"))
                    break;
                jnode *k = parse_expression(p, true);
                if (!k || !expect_op(p, ":")) {
                    n = NULL;
                    break;
                }
                jnode *v = parse_expression(p, true);
                if (!v || !nvec_push(p, &keys, k, NULL) || !nvec_push(p, &vals, v, NULL))
                    n = NULL;
            }
            if (n && expect_op(p, "}")) {
                n->list = keys.v;
                n->n = keys.n;
                n->list2 = vals.v;
                n->n2 = vals.n;
            } else {
                n = NULL;
            }
        } else {
            char buf[64];
            n = fail_at(p, t, "unexpected %s", tok_desc(t, buf, sizeof buf));
        }
        break;
    default: {
        char buf[64];
        n = fail_at(p, t, "unexpected %s", tok_desc(t, buf, sizeof buf));
    }
    }
    p->depth--;
    return n;
}

/* Call arguments after '(' : positional and name=value (kwargs). */
static bool parse_call_args(parser *p, nvec *args, nvec *kwargs)
{
    if (!expect_op(p, "("))
        return false;
    while (!is_op(cur(p), ")")) {
        if (args->n + kwargs->n && !expect_op(p, ","))
            return false;
        if (is_op(cur(p), ")"))
            break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) {
            fail_at(p, cur(p), "*args and **kwargs in calls are not supported");
            return false;
        }
        if (cur(p)->type == JT_NAME && is_op(peek(p, 1), "=")) {
            const char *name = dup_str(p, cur(p)->p, cur(p)->n);
            if (!name)
                return false;
            advance(p);
            advance(p);
            jnode *v = parse_expression(p, true);
            if (!v || !nvec_push(p, kwargs, v, name))
                return false;
        } else {
            if (kwargs->n) {
                fail_at(p, cur(p), "positional argument follows keyword argument");
                return false;
            }
            jnode *v = parse_expression(p, true);
            if (!v || !nvec_push(p, args, v, NULL))
                return false;
        }
    }
    return expect_op(p, ")");
}

static void set_args(jnode *n, const nvec *args, const nvec *kwargs)
{
    n->list = args->v;
    n->n = args->n;
    n->list2 = kwargs->v;
    n->n2 = kwargs->n;
    n->names = kwargs->names;
}

static jnode *parse_call(parser *p, jnode *callee)
{
    jnode *n = new_node(p, JN_CALL, cur(p));
    if (!n)
        return NULL;
    nvec args = {0}, kwargs = {0};
    if (!parse_call_args(p, &args, &kwargs))
        return NULL;
    n->a = callee;
    n->line = callee->line; /* errors point at the callee, not at '(' */
    n->col = callee->col;
    set_args(n, &args, &kwargs);
    return n;
}

/* name or dotted.name after '|' or 'is'. */
static const char *parse_dotted_name(parser *p)
{
    if (cur(p)->type != JT_NAME) {
        char buf[64];
        fail_at(p, cur(p), "expected a name, got %s", tok_desc(cur(p), buf, sizeof buf));
        return NULL;
    }
    jbuf b = {NULL, 0, 0, &p->t->arena, 0};
    if (!kt__jbuf_put(&b, cur(p)->p, cur(p)->n))
        return oom(p), NULL;
    advance(p);
    while (is_op(cur(p), ".") && peek(p, 1)->type == JT_NAME) {
        advance(p);
        if (!kt__jbuf_putc(&b, '.') || !kt__jbuf_put(&b, cur(p)->p, cur(p)->n))
            return oom(p), NULL;
        advance(p);
    }
    return b.p;
}

static jnode *parse_subscript(parser *p, jnode *obj)
{
    const jtok *t = cur(p);
    if (is_op(t, ".")) {
        advance(p);
        const jtok *a = cur(p);
        if (a->type == JT_NAME) {
            jnode *n = new_node(p, JN_GETATTR, a);
            if (!n || !(n->name = dup_str(p, a->p, a->n)))
                return NULL;
            n->a = obj;
            advance(p);
            return n;
        }
        if (a->type == JT_INT) {
            jnode *n = new_node(p, JN_GETITEM, a);
            jnode *k = new_node(p, JN_CONST, a);
            if (!n || !k)
                return NULL;
            k->value = jv_int(a->i);
            n->a = obj;
            n->b = k;
            advance(p);
            return n;
        }
        char buf[64];
        return fail_at(p, a, "expected a name after '.', got %s", tok_desc(a, buf, sizeof buf));
    }
    /* '[' subscript or slice ']' */
    advance(p);
    jnode *parts[3] = {NULL, NULL, NULL};
    bool is_slice = false;
    if (!is_op(cur(p), ":")) {
        parts[0] = parse_expression(p, true);
        if (!parts[0])
            return NULL;
        if (is_op(cur(p), ",")) { /* x[a, b]: a tuple key, as Jinja */
            nvec items = {0};
            if (!nvec_push(p, &items, parts[0], NULL))
                return NULL;
            while (is_op(cur(p), ",")) {
                advance(p);
                if (is_op(cur(p), "]"))
                    break;
                jnode *e = parse_expression(p, true);
                if (!e || !nvec_push(p, &items, e, NULL))
                    return NULL;
            }
            if (!(parts[0] = list_node(p, JN_TUPLE, t, &items)))
                return NULL;
        }
    }
    if (is_op(cur(p), ":")) {
        is_slice = true;
        advance(p);
        if (!is_op(cur(p), "]") && !is_op(cur(p), ":")) {
            parts[1] = parse_expression(p, true);
            if (!parts[1])
                return NULL;
        }
        if (is_op(cur(p), ":")) {
            advance(p);
            if (!is_op(cur(p), "]")) {
                parts[2] = parse_expression(p, true);
                if (!parts[2])
                    return NULL;
            }
        }
    }
    if (!expect_op(p, "]"))
        return NULL;
    jnode *n = new_node(p, is_slice ? JN_SLICE : JN_GETITEM, t);
    if (!n)
        return NULL;
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static jnode *parse_postfix(parser *p, jnode *node)
{
    while (node) {
        const jtok *t = cur(p);
        if (is_op(t, ".") || is_op(t, "["))
            node = parse_subscript(p, node);
        else if (is_op(t, "("))
            node = parse_call(p, node);
        else
            break;
    }
    return node;
}

static jnode *parse_filter(parser *p, jnode *operand)
{
    /* at the name after '|' */
    const jtok *t = cur(p);
    jnode *n = new_node(p, JN_FILTER, t);
    if (!n || !(n->name = parse_dotted_name(p)))
        return NULL;
    n->a = operand;
    if (is_op(cur(p), "(")) {
        nvec args = {0}, kwargs = {0};
        if (!parse_call_args(p, &args, &kwargs))
            return NULL;
        set_args(n, &args, &kwargs);
    }
    return n;
}

static jnode *parse_test(parser *p, jnode *operand)
{
    /* at the token after 'is' */
    bool negated = false;
    if (is_name(cur(p), "not")) {
        negated = true;
        advance(p);
    }
    const jtok *t = cur(p);
    jnode *n = new_node(p, JN_TEST, t);
    if (!n || !(n->name = parse_dotted_name(p)))
        return NULL;
    n->a = operand;
    n->flag = negated;
    const jtok *c = cur(p);
    if (is_op(c, "(")) {
        nvec args = {0}, kwargs = {0};
        if (!parse_call_args(p, &args, &kwargs))
            return NULL;
        set_args(n, &args, &kwargs);
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT ||
                c->type == JT_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return fail_at(p, c, "you cannot chain multiple tests with 'is'");
        jnode *arg = parse_postfix(p, parse_primary(p));
        if (!arg)
            return NULL;
        n->list = kt__ja_alloc(&p->t->arena, sizeof(jnode *));
        if (!n->list)
            return oom(p);
        n->list[0] = arg;
        n->n = 1;
    }
    return n;
}

static jnode *parse_filter_expr(parser *p, jnode *node)
{
    while (node) {
        const jtok *t = cur(p);
        if (is_op(t, "|")) {
            advance(p);
            node = parse_filter(p, node);
        } else if (is_name(t, "is")) {
            advance(p);
            node = parse_test(p, node);
        } else if (is_op(t, "(")) {
            node = parse_call(p, node);
        } else {
            break;
        }
    }
    return node;
}

static jnode *parse_unary(parser *p, bool with_filter)
{
    const jtok *t = cur(p);
    jnode *node;
    if (++p->depth > MAX_NESTING)
        return fail_at(p, t, "expression nested too deeply");
    if (is_op(t, "-") || is_op(t, "+")) {
        advance(p);
        node = new_node(p, JN_UNARY, t);
        if (node) {
            node->op = is_op(t, "-") ? JOP_NEG : JOP_POS;
            node->a = parse_unary(p, false);
            if (!node->a)
                node = NULL;
        }
    } else {
        node = parse_primary(p);
    }
    node = parse_postfix(p, node);
    if (with_filter)
        node = parse_filter_expr(p, node);
    p->depth--;
    return node;
}

/* A node of two operands; NULL when either failed to parse (the error is already set). */
static jnode *pair_node(parser *p, jn_kind kind, const jtok *t, jnode *a, jnode *b)
{
    if (!a || !b)
        return NULL;
    jnode *n = new_node(p, kind, t);
    if (!n)
        return NULL;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *binop(parser *p, const jtok *t, jn_op op, jnode *a, jnode *b)
{
    jnode *n = pair_node(p, JN_BINOP, t, a, b);
    if (n)
        n->op = (uint8_t)op;
    return n;
}

typedef struct op_spelling {
    const char *text;
    jn_op op;
} op_spelling;

/* Which operator of the table the token spells, if any. */
static bool match_op(const jtok *t, const op_spelling *table, size_t n, jn_op *op)
{
    for (size_t k = 0; k < n; k++) {
        if (is_op(t, table[k].text)) {
            *op = table[k].op;
            return true;
        }
    }
    return false;
}

/* One left-associative precedence level: operand (op operand)*. */
static jnode *parse_binary_level(parser *p, jnode *(*operand)(parser *),
                                 const op_spelling *ops, size_t n_ops)
{
    jnode *left = operand(p);
    jn_op op;
    while (left && match_op(cur(p), ops, n_ops, &op)) {
        const jtok *t = cur(p);
        advance(p);
        left = binop(p, t, op, left, operand(p));
    }
    return left;
}

static jnode *parse_pow(parser *p)
{
    jnode *left = parse_unary(p, true);
    while (left && is_op(cur(p), "**")) {
        const jtok *t = cur(p);
        advance(p);
        left = binop(p, t, JOP_POW, left, parse_unary(p, true));
    }
    return left;
}

static jnode *parse_math2(parser *p)
{
    static const op_spelling ops[] = {
        {"*", JOP_MUL}, {"/", JOP_DIV}, {"//", JOP_FLOORDIV}, {"%", JOP_MOD}};
    return parse_binary_level(p, parse_pow, ops, KT_ARRAY_LEN(ops));
}

static jnode *parse_concat(parser *p)
{
    const jtok *t = cur(p);
    jnode *first = parse_math2(p);
    if (!first || !is_op(cur(p), "~"))
        return first;
    nvec items = {0};
    if (!nvec_push(p, &items, first, NULL))
        return NULL;
    while (is_op(cur(p), "~")) {
        advance(p);
        jnode *e = parse_math2(p);
        if (!e || !nvec_push(p, &items, e, NULL))
            return NULL;
    }
    return list_node(p, JN_CONCAT, t, &items);
}

static jnode *parse_math1(parser *p)
{
    static const op_spelling ops[] = {{"+", JOP_ADD}, {"-", JOP_SUB}};
    return parse_binary_level(p, parse_concat, ops, KT_ARRAY_LEN(ops));
}

static jnode *parse_compare(parser *p)
{
    const jtok *start = cur(p);
    jnode *first = parse_math1(p);
    if (!first)
        return NULL;
    nvec operands = {0};
    uint8_t ops[64];
    static const op_spelling compare_ops[] = {{"==", JOP_EQ}, {"!=", JOP_NE}, {"<", JOP_LT},
                                              {"<=", JOP_LE}, {">", JOP_GT}, {">=", JOP_GE}};
    for (;;) {
        const jtok *t = cur(p);
        jn_op op;
        if (is_name(t, "in")) {
            op = JOP_IN;
        } else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
            op = JOP_NOTIN;
            advance(p);
        } else if (!match_op(t, compare_ops, KT_ARRAY_LEN(compare_ops), &op)) {
            break;
        }
        advance(p);
        if (operands.n >= KT_ARRAY_LEN(ops))
            return fail_at(p, t, "too many chained comparisons");
        ops[operands.n] = (uint8_t)op;
        jnode *e = parse_math1(p);
        if (!e || !nvec_push(p, &operands, e, NULL))
            return NULL;
    }
    if (!operands.n)
        return first;
    jnode *n = list_node(p, JN_COMPARE, start, &operands);
    if (!n)
        return NULL;
    n->a = first;
    n->ops = kt__ja_alloc(&p->t->arena, operands.n);
    if (!n->ops)
        return oom(p);
    memcpy(n->ops, ops, operands.n);
    return n;
}

static jnode *parse_not(parser *p)
{
    const jtok *t = cur(p);
    if (is_name(t, "not")) {
        if (++p->depth > MAX_NESTING)
            return fail_at(p, t, "expression nested too deeply");
        advance(p);
        jnode *n = new_node(p, JN_NOT, t);
        if (n && !(n->a = parse_not(p)))
            n = NULL;
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

/* `a and b and c` / `a or b`: left-associative chains of one keyword. */
static jnode *parse_logical(parser *p, const char *word, jn_kind kind,
                            jnode *(*operand)(parser *))
{
    jnode *left = operand(p);
    while (left && is_name(cur(p), word)) {
        const jtok *t = cur(p);
        advance(p);
        left = pair_node(p, kind, t, left, operand(p));
    }
    return left;
}

static jnode *parse_and(parser *p)
{
    return parse_logical(p, "and", JN_AND, parse_not);
}

static jnode *parse_or(parser *p)
{
    return parse_logical(p, "or", JN_OR, parse_and);
}

static jnode *parse_expression(parser *p, bool with_condexpr)
{
    if (++p->depth > MAX_NESTING)
        return fail_at(p, cur(p), "expression nested too deeply");
    jnode *expr = parse_or(p);
    while (with_condexpr && expr && is_name(cur(p), "if")) {
        const jtok *t = cur(p);
        advance(p);
        jnode *cond = parse_or(p);
        if (!cond) {
            expr = NULL;
            break;
        }
        jnode *alt = NULL;
        if (is_name(cur(p), "else")) {
            advance(p);
            alt = parse_expression(p, true);
            if (!alt) {
                expr = NULL;
                break;
            }
        }
        jnode *n = new_node(p, JN_CONDEXPR, t);
        if (!n) {
            expr = NULL;
            break;
        }
        n->a = cond;
        n->b = expr;
        n->c = alt;
        expr = n;
    }
    p->depth--;
    return expr;
}

/* ------------------------------------------------------------ statements */

static bool parse_body(parser *p, const char *const *ends, nvec *body);

static bool expect_block_end(parser *p)
{
    return expect_type(p, JT_BLOCK_END, "end of statement block '%}'");
}

/* Consumes `{% name` already positioned at name; checks it is `want`. */
static bool expect_end_tag(parser *p, const char *want)
{
    if (!is_name(cur(p), want)) {
        fail_at(p, cur(p), "expected '%s'", want);
        return false;
    }
    advance(p);
    return expect_block_end(p);
}

static jnode *parse_assign_target(parser *p, bool with_namespace, const end_rules *extra)
{
    const jtok *t = cur(p);
    if (with_namespace && t->type == JT_NAME && is_op(peek(p, 1), ".") &&
        peek(p, 2)->type == JT_NAME) {
        jnode *obj = new_node(p, JN_NAME, t);
        if (!obj || !(obj->name = dup_str(p, t->p, t->n)))
            return NULL;
        advance(p);
        advance(p);
        jnode *n = new_node(p, JN_GETATTR, cur(p));
        if (!n || !(n->name = dup_str(p, cur(p)->p, cur(p)->n)))
            return NULL;
        n->a = obj;
        advance(p);
        return n;
    }
    jnode *target = parse_tuple(p, true, true, extra, false);
    if (!target)
        return NULL;
    if (target->kind == JN_NAME)
        return target;
    if (target->kind == JN_TUPLE) {
        for (size_t i = 0; i < target->n; i++)
            if (target->list[i]->kind != JN_NAME && target->list[i]->kind != JN_TUPLE)
                return fail_at(p, t, "can't assign to this expression");
        return target;
    }
    return fail_at(p, t, "can't assign to this expression");
}

/* Macro/call-block parameter list: (a, b=default). */
static bool parse_signature(parser *p, jnode *n)
{
    nvec params = {0};
    if (!expect_op(p, "("))
        return false;
    while (!is_op(cur(p), ")")) {
        if (params.n && !expect_op(p, ","))
            return false;
        if (cur(p)->type != JT_NAME) {
            fail_at(p, cur(p), "expected a parameter name");
            return false;
        }
        const char *name = dup_str(p, cur(p)->p, cur(p)->n);
        if (!name)
            return false;
        advance(p);
        jnode *def = NULL;
        if (is_op(cur(p), "=")) {
            advance(p);
            def = parse_expression(p, true);
            if (!def)
                return false;
        }
        if (!nvec_push(p, &params, def, name))
            return false;
    }
    if (!expect_op(p, ")"))
        return false;
    n->list2 = params.v;
    n->names = params.names;
    n->n2 = params.n;
    return true;
}

static bool parse_node_body(parser *p, jnode *n, const char *const *ends)
{
    nvec body = {0};
    if (!parse_body(p, ends, &body))
        return false;
    n->list = body.v;
    n->n = body.n;
    return true;
}

/* Macro and call-block bodies are no loop body: break / continue there need a for of their own. */
static bool parse_node_body_outside_loop(parser *p, jnode *n, const char *const *ends)
{
    int saved = p->loop_depth;
    p->loop_depth = 0;
    bool ok = parse_node_body(p, n, ends);
    p->loop_depth = saved;
    return ok;
}

static jnode *parse_if(parser *p, const jtok *t)
{
    jnode *n = new_node(p, JN_IF, t);
    /* As Jinja: no inline `x if c else y` in an if test without parentheses. */
    if (!n || !(n->a = parse_tuple(p, false, false, NULL, false)) || !expect_block_end(p))
        return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!parse_node_body(p, n, ends))
        return NULL;
    const jtok *e = cur(p);
    if (is_name(e, "elif")) {
        advance(p);
        jnode *sub = parse_if(p, e);
        if (!sub)
            return NULL;
        n->list2 = kt__ja_alloc(&p->t->arena, sizeof(jnode *));
        if (!n->list2)
            return oom(p);
        n->list2[0] = sub;
        n->n2 = 1;
        return n; /* the nested if consumed endif */
    }
    if (is_name(e, "else")) {
        advance(p);
        if (!expect_block_end(p))
            return NULL;
        static const char *const ends2[] = {"endif", NULL};
        nvec body = {0};
        if (!parse_body(p, ends2, &body))
            return NULL;
        n->list2 = body.v;
        n->n2 = body.n;
    }
    return expect_end_tag(p, "endif") ? n : NULL;
}

static jnode *parse_for(parser *p, const jtok *t)
{
    jnode *n = new_node(p, JN_FOR, t);
    if (!n)
        return NULL;
    end_rules in_rule = {{"in", NULL, NULL}};
    if (!(n->a = parse_assign_target(p, false, &in_rule)))
        return NULL;
    if (!is_name(cur(p), "in"))
        return fail_at(p, cur(p), "expected 'in' in for loop");
    advance(p);
    end_rules rec_rule = {{"recursive", NULL, NULL}};
    if (!(n->b = parse_tuple(p, false, false, &rec_rule, false)))
        return NULL;
    if (is_name(cur(p), "if")) {
        advance(p);
        if (!(n->c = parse_expression(p, true)))
            return NULL;
    }
    if (is_name(cur(p), "recursive")) {
        advance(p);
        n->flag = true;
    }
    if (!expect_block_end(p))
        return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    p->loop_depth++;
    bool ok = parse_node_body(p, n, ends);
    p->loop_depth--;
    if (!ok)
        return NULL;
    if (is_name(cur(p), "else")) {
        advance(p);
        if (!expect_block_end(p))
            return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        nvec body = {0};
        int saved = p->loop_depth;
        p->loop_depth = 0; /* break in for-else is not inside the loop */
        ok = parse_body(p, ends2, &body);
        p->loop_depth = saved;
        if (!ok)
            return NULL;
        n->list2 = body.v;
        n->n2 = body.n;
    }
    return expect_end_tag(p, "endfor") ? n : NULL;
}

/* Filter chain of a filter block / block set: name(args) | name2 ... */
static jnode *parse_filter_chain(parser *p, jnode *operand)
{
    jnode *node = parse_filter(p, operand);
    while (node && is_op(cur(p), "|")) {
        advance(p);
        node = parse_filter(p, node);
    }
    return node;
}

static jnode *parse_set(parser *p, const jtok *t)
{
    jnode *target = parse_assign_target(p, true, NULL);
    if (!target)
        return NULL;
    if (is_op(cur(p), "=")) {
        advance(p);
        jnode *n = new_node(p, JN_SET, t);
        if (!n || !(n->b = parse_tuple(p, false, true, NULL, false)) || !expect_block_end(p))
            return NULL;
        n->a = target;
        return n;
    }
    jnode *n = new_node(p, JN_SET_BLOCK, t);
    if (!n)
        return NULL;
    n->a = target;
    if (is_op(cur(p), "|")) {
        advance(p);
        if (!(n->c = parse_filter_chain(p, NULL)))
            return NULL;
    }
    if (!expect_block_end(p))
        return NULL;
    static const char *const ends[] = {"endset", NULL};
    if (!parse_node_body(p, n, ends))
        return NULL;
    return expect_end_tag(p, "endset") ? n : NULL;
}

/* Does the subtree read the name `name`? (Jinja lets a macro take extra
 * positional/keyword arguments only when its body uses varargs/kwargs.) */
static bool uses_name(const jnode *n, const char *name, int depth)
{
    if (!n || depth > 4 * MAX_NESTING)
        return false;
    if (n->kind == JN_NAME && !strcmp(n->name, name))
        return true;
    if (uses_name(n->a, name, depth + 1) || uses_name(n->b, name, depth + 1) ||
        uses_name(n->c, name, depth + 1) || uses_name(n->d, name, depth + 1))
        return true;
    for (size_t i = 0; i < n->n; i++)
        if (uses_name(n->list[i], name, depth + 1))
            return true;
    for (size_t i = 0; i < n->n2; i++)
        if (uses_name(n->list2[i], name, depth + 1))
            return true;
    return false;
}

static jnode *parse_macro(parser *p, const jtok *t)
{
    jnode *n = new_node(p, JN_MACRO, t);
    if (!n)
        return NULL;
    if (cur(p)->type != JT_NAME)
        return fail_at(p, cur(p), "expected a macro name");
    if (!(n->name = dup_str(p, cur(p)->p, cur(p)->n)))
        return NULL;
    advance(p);
    if (!parse_signature(p, n) || !expect_block_end(p))
        return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    if (!parse_node_body_outside_loop(p, n, ends))
        return NULL;
    jnode body = {0};
    body.list = n->list;
    body.n = n->n;
    n->op = (uint8_t)((uses_name(&body, "varargs", 0) ? JMACRO_VARARGS : 0) |
                      (uses_name(&body, "kwargs", 0) ? JMACRO_KWARGS : 0));
    return expect_end_tag(p, "endmacro") ? n : NULL;
}

static jnode *parse_call_block(parser *p, const jtok *t)
{
    jnode *n = new_node(p, JN_CALL_BLOCK, t);
    if (!n)
        return NULL;
    if (is_op(cur(p), "(")) {
        if (!parse_signature(p, n))
            return NULL;
    }
    jnode *call = parse_expression(p, true);
    if (!call)
        return NULL;
    if (call->kind != JN_CALL)
        return fail_at(p, t, "expected a call expression in call block");
    n->a = call;
    if (!expect_block_end(p))
        return NULL;
    static const char *const ends[] = {"endcall", NULL};
    if (!parse_node_body_outside_loop(p, n, ends))
        return NULL;
    return expect_end_tag(p, "endcall") ? n : NULL;
}

static jnode *parse_statement(parser *p)
{
    const jtok *t = cur(p); /* the keyword */
    if (t->type != JT_NAME)
        return fail_at(p, t, "tag name expected");
    if (++p->depth > MAX_NESTING)
        return fail_at(p, t, "statements nested too deeply");
    jnode *n = NULL;
    advance(p);
    if (is_name(t, "if")) {
        n = parse_if(p, t);
    } else if (is_name(t, "for")) {
        n = parse_for(p, t);
    } else if (is_name(t, "set")) {
        n = parse_set(p, t);
    } else if (is_name(t, "macro")) {
        n = parse_macro(p, t);
    } else if (is_name(t, "call")) {
        n = parse_call_block(p, t);
    } else if (is_name(t, "filter")) {
        n = new_node(p, JN_FILTER_BLOCK, t);
        static const char *const ends[] = {"endfilter", NULL};
        if (n && (!(n->a = parse_filter_chain(p, NULL)) || !expect_block_end(p) ||
                  !parse_node_body(p, n, ends) || !expect_end_tag(p, "endfilter")))
            n = NULL;
    } else if (is_name(t, "with")) {
        n = new_node(p, JN_WITH, t);
        nvec vals = {0};
        while (n && !is_op(cur(p), "%") && cur(p)->type != JT_BLOCK_END) {
            if (vals.n && !expect_op(p, ",")) {
                n = NULL;
                break;
            }
            if (cur(p)->type != JT_NAME) {
                n = fail_at(p, cur(p), "expected a name in with");
                break;
            }
            const char *name = dup_str(p, cur(p)->p, cur(p)->n);
            advance(p);
            jnode *v = name && expect_op(p, "=") ? parse_expression(p, true) : NULL;
            if (!v || !nvec_push(p, &vals, v, name))
                n = NULL;
        }
        static const char *const ends[] = {"endwith", NULL};
        if (n) {
            n->list2 = vals.v;
            n->n2 = vals.n;
            n->names = vals.names;
            if (!expect_block_end(p) || !parse_node_body(p, n, ends) ||
                !expect_end_tag(p, "endwith"))
                n = NULL;
        }
    } else if (is_name(t, "generation")) {
        /* transformers' AssistantTracker marks assistant text; output unchanged. */
        n = new_node(p, JN_SCOPE, t);
        static const char *const ends[] = {"endgeneration", NULL};
        if (n && (!expect_block_end(p) || !parse_node_body(p, n, ends) ||
                  !expect_end_tag(p, "endgeneration")))
            n = NULL;
    } else if (is_name(t, "do")) {
        n = new_node(p, JN_DO, t);
        if (n && (!(n->a = parse_tuple(p, false, true, NULL, false)) || !expect_block_end(p)))
            n = NULL;
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (p->loop_depth == 0)
            n = fail_at(p, t, "'%.*s' outside of a loop", (int)t->n, t->p);
        else if ((n = new_node(p, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, t)) &&
                 !expect_block_end(p))
            n = NULL;
    } else {
        n = fail_at(p, t, "unknown or unsupported tag '%.*s'", (int)KT_MIN(t->n, (size_t)40),
                    t->p);
    }
    p->depth--;
    return n;
}

/* Parses statements until `{% <one of ends>` (left at the end name) or EOF. */
static bool parse_body(parser *p, const char *const *ends, nvec *body)
{
    for (;;) {
        const jtok *t = cur(p);
        if (t->type == JT_EOF) {
            if (ends) {
                char want[96] = "";
                for (size_t e = 0; ends[e]; e++)
                    snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'",
                             e ? " or " : "", ends[e]);
                fail_at(p, t, "unexpected end of template, expected %s", want);
                return false;
            }
            return true;
        }
        if (t->type == JT_TEXT) {
            jnode *n = new_node(p, JN_TEXT, t);
            if (!n)
                return false;
            n->value = jv_str(t->p, t->n);
            advance(p);
            if (!nvec_push(p, body, n, NULL))
                return false;
            continue;
        }
        if (t->type == JT_VAR_BEGIN) {
            advance(p);
            jnode *n = new_node(p, JN_OUTPUT, t);
            if (!n || !(n->a = parse_tuple(p, false, true, NULL, false)))
                return false;
            if (!expect_type(p, JT_VAR_END, "end of print statement '}}'"))
                return false;
            if (!nvec_push(p, body, n, NULL))
                return false;
            continue;
        }
        if (t->type == JT_BLOCK_BEGIN) {
            advance(p);
            const jtok *k = cur(p);
            if (ends) {
                for (size_t e = 0; ends[e]; e++)
                    if (is_name(k, ends[e]))
                        return true;
            }
            if (k->type == JT_NAME &&
                (is_name(k, "endif") || is_name(k, "endfor") || is_name(k, "endmacro") ||
                 is_name(k, "endset") || is_name(k, "elif") || is_name(k, "else") ||
                 is_name(k, "endcall") || is_name(k, "endfilter") || is_name(k, "endwith") ||
                 is_name(k, "endgeneration"))) {
                if (ends)
                    fail_at(p, k, "unexpected '%.*s', expected '%s'", (int)k->n, k->p, ends[0]);
                else
                    fail_at(p, k, "unexpected '%.*s'", (int)k->n, k->p);
                return false;
            }
            jnode *n = parse_statement(p);
            if (!n || !nvec_push(p, body, n, NULL))
                return false;
            continue;
        }
        char buf[64];
        fail_at(p, t, "unexpected %s", tok_desc(t, buf, sizeof buf));
        return false;
    }
}

kt_status kt__jinja_parse(jtemplate *t, const jtoks *toks)
{
    parser p;
    memset(&p, 0, sizeof p);
    p.t = t;
    p.toks = toks;
    jnode *root = kt__ja_alloc(&t->arena, sizeof *root);
    if (!root)
        return kt__error(KT_ERR_NOMEM, "template %s: out of memory", t->name);
    root->kind = JN_SCOPE;
    root->line = 1;
    root->col = 1;
    nvec body = {0};
    if (!parse_body(&p, NULL, &body))
        return p.err < 0 ? p.err : kt__error(KT_ERR_FORMAT, "template %s: parse error", t->name);
    if (p.err < 0)
        return p.err;
    root->list = body.v;
    root->n = body.n;
    t->root = root;
    return KT_OK;
}
