/*
 * Private interface of the Jinja engine behind kt/template.h.
 *
 * Pipeline: jinja_lex.c turns template text into tokens (Jinja's whitespace
 * rules: trim_blocks, lstrip_blocks, `-`/`+` markers), jinja_parse.c builds an
 * AST, jinja_eval.c walks it over dynamic values (jinja_value.c) with the
 * filters, tests, methods and globals of jinja_builtins.c.
 *
 * Memory: everything lives in arenas. A compiled template owns one arena (AST,
 * constants); every render uses its own arena, freed when the render ends, so a
 * compiled template is immutable and rendering is reentrant.
 *
 * Semantics follow Python Jinja2 3.1 as configured by Hugging Face
 * transformers' apply_chat_template (sandboxed env, trim_blocks, lstrip_blocks,
 * loopcontrols, tojson = json.dumps(ensure_ascii=False)).
 */
#ifndef KT_JINJA_H
#define KT_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kt_internal.h"

/* ---------------------------------------------------------------- arena */

typedef struct ja_block ja_block;
typedef struct ja_arena {
    ja_block *head;
    size_t total; /* bytes obtained from malloc */
    size_t limit; /* 0: unlimited */
} ja_arena;

/* Returns zeroed memory or NULL (allocation failed or limit reached). */
void *kt__ja_alloc(ja_arena *a, size_t size);
void kt__ja_free_all(ja_arena *a);
/* A copy of items[0..n) (elem bytes each) in a new arena array of cap elements: how arena
 * vectors grow (the old array stays in the arena). NULL on failure or if cap * elem overflows. */
void *kt__ja_resize(ja_arena *a, const void *items, size_t n, size_t cap, size_t elem);

/* --------------------------------------------------------------- values */

typedef enum jv_type {
    JV_UNDEF = 0, /* Jinja Undefined; s.p may hold the missing name for messages */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* list or tuple (jlist.tuple) */
    JV_DICT,  /* insertion-ordered dict */
    JV_NS,    /* namespace(): a dict with attribute assignment */
    JV_MACRO, /* template macro or caller */
    JV_FUNC,  /* builtin function or bound method */
    JV_LOOP   /* the `loop` object of a for loop */
} jv_type;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jmacro jmacro;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

typedef struct jv {
    uint8_t type;
    uint8_t hint; /* JV_UNDEF from a missing attribute: 1 + type of the object */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        jlist *l;
        jdict *d;
        jmacro *m;
        jfunc *fn;
        jloop *loop;
    } u;
} jv;

struct jlist {
    jv *items;
    size_t n, cap;
    bool tuple;
    bool group; /* groupby's (grouper, list): a tuple with .grouper/.list */
    bool lazy;  /* a Python generator/iterator (select, map, unique, ...): always
                 * true, no len(), not JSON, consumed by the first iteration */
    uint8_t view; /* dict.items()/keys()/values() view: JVIEW_*; not a sequence */
    const char *lazy_error; /* generator over a non-iterable: fails when consumed */
};

enum { JVIEW_NONE = 0, JVIEW_ITEMS, JVIEW_KEYS, JVIEW_VALUES };

struct jdict {
    jv *keys;
    jv *vals;
    size_t n, cap;
};

static inline jv jv_undef(void)
{
    jv v;
    v.type = JV_UNDEF;
    v.hint = 0;
    v.u.s.p = NULL;
    v.u.s.n = 0;
    return v;
}
static inline jv jv_none(void) { jv v; v.type = JV_NONE; v.u.i = 0; return v; }
static inline jv jv_bool(bool b) { jv v; v.type = JV_BOOL; v.u.i = 0; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v; v.type = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v; v.type = JV_FLOAT; v.u.f = f; return v; }
static inline jv jv_str(const char *p, size_t n)
{
    jv v;
    v.type = JV_STR;
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

/* Numbers as Python sees them: bool, int and float mix in arithmetic and comparison. */
static inline bool jv_is_number(jv v)
{
    return v.type == JV_BOOL || v.type == JV_INT || v.type == JV_FLOAT;
}
static inline double jv_number_as_double(jv v)
{
    return v.type == JV_FLOAT ? v.u.f : v.type == JV_BOOL ? (double)v.u.b : (double)v.u.i;
}
/* An int or bool (not a float) as int64. */
static inline int64_t jv_number_as_int(jv v)
{
    return v.type == JV_BOOL ? (int64_t)v.u.b : v.u.i;
}

/* Growable byte buffer whose storage lives in an arena. */
typedef struct jbuf {
    char *p;
    size_t n, cap;
    ja_arena *arena;
    size_t limit; /* 0: none; else appends past it fail */
} jbuf;

bool kt__jbuf_put(jbuf *b, const void *data, size_t n);
bool kt__jbuf_puts(jbuf *b, const char *s);
bool kt__jbuf_putc(jbuf *b, char c);
/* Appends the UTF-8 encoding of code point cp (invalid ones become U+FFFD). */
bool kt__jbuf_put_utf8(jbuf *b, uint32_t cp);

jlist *kt__jlist_new(ja_arena *a, size_t cap);
bool kt__jlist_push(ja_arena *a, jlist *l, jv v);
jdict *kt__jdict_new(ja_arena *a, size_t cap);
/* Sets key to val (replacing an equal key in place, else appending). */
bool kt__jdict_set(ja_arena *a, jdict *d, jv key, jv val);
/* Pointer to the value stored under key, or NULL. */
jv *kt__jdict_get(const jdict *d, jv key);
jv *kt__jdict_get_str(const jdict *d, const char *key, size_t n);
bool kt__jdict_del(jdict *d, jv key);

bool kt__jv_truthy(jv v);
/* Python ==: 1 == 1.0 == True, deep for lists and dicts. */
bool kt__jv_equal(jv a, jv b);
/* Python <-style ordering; returns false (and sets *ok=false) on mismatched types. */
int kt__jv_compare(jv a, jv b, bool *ok);
const char *kt__jv_type_name(jv v);

/* str(v) and repr(v) appended to b. */
bool kt__jv_str(jbuf *b, jv v);
bool kt__jv_repr(jbuf *b, jv v);
/* Python float repr ("1.0", "1e+16", "0.1"). */
bool kt__jv_float_repr(jbuf *b, double f);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent: NULL for
 * none, else the indent string. item_sep/key_sep NULL: Python's defaults.
 * Returns false with *err set on a value JSON cannot hold. */
bool kt__jv_tojson(jbuf *b, jv v, bool ensure_ascii, const char *indent, const char *item_sep,
                   const char *key_sep, bool sort_keys, const char **err);

/* Parses JSON text into values allocated in `a`. Returns false with a message
 * in err (size errlen) on malformed input. */
bool kt__jv_from_json(ja_arena *a, const char *text, size_t len, jv *out, char *err,
                      size_t errlen);

/* UTF-8 helpers: decode one code point at s[*i] (advancing *i; invalid bytes
 * decode as themselves, one at a time), count code points, test Python
 * str.isspace(). */
uint32_t kt__utf8_next(const char *s, size_t n, size_t *i);
size_t kt__utf8_len(const char *s, size_t n);
bool kt__uni_isspace(uint32_t cp);
/* The value of a hexadecimal digit (either case), or -1 (JSON and template escapes). */
int kt__jhex_digit(char c);

/* ------------------------------------------------------------------ AST */

typedef enum jn_kind {
    /* statements */
    JN_TEXT = 1,
    JN_OUTPUT,
    JN_IF,
    JN_FOR,
    JN_SET,
    JN_SET_BLOCK,
    JN_MACRO,
    JN_CALL_BLOCK,
    JN_FILTER_BLOCK,
    JN_BREAK,
    JN_CONTINUE,
    JN_WITH,
    JN_DO,
    JN_SCOPE, /* plain body (generation blocks) */
    /* expressions */
    JN_CONST,
    JN_NAME,
    JN_GETATTR,
    JN_GETITEM,
    JN_SLICE,
    JN_CALL,
    JN_FILTER,
    JN_TEST,
    JN_BINOP,
    JN_UNARY,
    JN_COMPARE,
    JN_AND,
    JN_OR,
    JN_NOT,
    JN_CONDEXPR,
    JN_LIST,
    JN_TUPLE,
    JN_DICT,
    JN_CONCAT
} jn_kind;

typedef enum jn_op {
    JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
    JOP_NEG, JOP_POS,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN
} jn_op;

/* JN_MACRO op bits: the body reads varargs / kwargs. */
#define JMACRO_VARARGS 1u
#define JMACRO_KWARGS 2u

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;
    uint8_t op;   /* jn_op for BINOP/UNARY */
    bool flag;    /* TEST: negated; FOR: recursive; TUPLE target etc. */
    uint32_t line, col;
    const char *name; /* NAME/GETATTR/FILTER/TEST/MACRO name, NUL-terminated */
    jv value;         /* CONST, TEXT */
    jnode *a, *b, *c, *d;
    jnode **list; /* statements / elements / positional args / compare operands */
    size_t n;
    jnode **list2; /* else body / kwarg values / dict values / macro defaults */
    size_t n2;
    const char **names; /* kwarg or parameter names, parallel to list2 */
    uint8_t *ops;       /* COMPARE: operator per operand */
};

typedef struct jtemplate {
    ja_arena arena;
    jnode *root; /* JN_SCOPE */
    const char *name;
} jtemplate;

typedef struct jlex_opts {
    bool trim_blocks, lstrip_blocks, keep_trailing_newline;
} jlex_opts;

/* Token stream (jinja_lex.c). */
typedef enum jtok_type {
    JT_EOF = 0,
    JT_TEXT,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP
} jtok_type;

typedef struct jtok {
    uint8_t type;
    uint32_t line, col;
    const char *p; /* TEXT/NAME/STRING (decoded)/OP text */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct jtoks {
    jtok *t;
    size_t n, cap;
} jtoks;

/* Lexes src into toks (storage in arena). On failure returns KT_ERR_FORMAT
 * with the error set ("name:line:col: message"). */
kt_status kt__jinja_lex(ja_arena *a, const char *name, const char *src, size_t len,
                        const jlex_opts *opts, jtoks *toks);
/* Parses tokens into t->root. */
kt_status kt__jinja_parse(jtemplate *t, const jtoks *toks);

/* ----------------------------------------------------------- rendering */

typedef struct jrender_limits {
    size_t max_output;   /* bytes of rendered text */
    size_t max_memory;   /* bytes of the render arena */
    uint64_t max_steps;  /* evaluation steps (loop iterations, calls, nodes) */
    uint32_t max_depth;  /* macro/recursion depth */
} jrender_limits;

/* Renders with `vars` (a dict of globals, may be NULL; its values must live
 * in `arena`, which the caller owns and frees after use). `now` feeds
 * strftime_now(). Output appended to out as text. */
kt_status kt__jinja_render(const jtemplate *t, ja_arena *arena, jdict *vars, int64_t now,
                           const jrender_limits *lim, kt_buf *out);

/* ------------------------------------- shared by jinja_eval/jinja_builtins */

typedef struct jscope {
    struct jscope *parent;
    jdict *vars; /* allocated on first assignment */
} jscope;

struct jmacro {
    const jnode *def; /* JN_MACRO, or JN_CALL_BLOCK for `caller` */
    jscope *closure;
};

/* Builtin callables: globals and bound methods. */
typedef enum jfunc_id {
    JF_RANGE = 1, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME_NOW,
    JF_LOOP_CYCLE, JF_LOOP_CHANGED,
    /* str methods */
    JF_S_STRIP, JF_S_LSTRIP, JF_S_RSTRIP, JF_S_SPLIT, JF_S_RSPLIT, JF_S_SPLITLINES,
    JF_S_STARTSWITH, JF_S_ENDSWITH, JF_S_REPLACE, JF_S_UPPER, JF_S_LOWER, JF_S_TITLE,
    JF_S_CAPITALIZE, JF_S_SWAPCASE, JF_S_FIND, JF_S_RFIND, JF_S_INDEX, JF_S_RINDEX, JF_S_COUNT,
    JF_S_JOIN, JF_S_FORMAT, JF_S_ISDIGIT, JF_S_ISALPHA, JF_S_ISALNUM, JF_S_ISSPACE,
    JF_S_ISUPPER, JF_S_ISLOWER, JF_S_ISNUMERIC, JF_S_ISDECIMAL, JF_S_ZFILL, JF_S_CENTER,
    JF_S_LJUST, JF_S_RJUST, JF_S_PARTITION, JF_S_RPARTITION, JF_S_REMOVEPREFIX,
    JF_S_REMOVESUFFIX, JF_S_CASEFOLD, JF_S_EXPANDTABS, JF_S_ISTITLE,
    /* list methods */
    JF_L_APPEND, JF_L_POP, JF_L_INDEX, JF_L_COUNT, JF_L_INSERT, JF_L_EXTEND, JF_L_REMOVE,
    JF_L_REVERSE, JF_L_SORT, JF_L_COPY, JF_L_CLEAR,
    /* dict methods */
    JF_D_ITEMS, JF_D_KEYS, JF_D_VALUES, JF_D_GET, JF_D_POP, JF_D_UPDATE, JF_D_COPY,
    JF_D_SETDEFAULT, JF_D_CLEAR
} jfunc_id;

struct jfunc {
    int id;
    jv self;
};

struct jloop {
    const jv *items;
    size_t length, index0;
    uint32_t depth0;
    const jnode *for_node; /* for loop(...) recursion */
    jscope *scope;         /* scope the for statement runs in */
    jv last_changed;
    bool has_changed;
};

typedef struct jargs {
    const jv *pos;
    size_t npos;
    const char *const *kwn;
    const jv *kwv;
    size_t nkw;
} jargs;

typedef struct jrender {
    const jtemplate *t;
    ja_arena *a;
    jbuf *out;
    jscope *root;
    int64_t now;
    jrender_limits lim;
    uint64_t steps;
    uint32_t depth;
    uintptr_t stack_base; /* frame address at render start, for the stack guard */
    bool failed;
    kt_status status;
} jrender;

/* Records the first render error ("template NAME:LINE:COL: msg") and returns -1. */
int kt__jr_fail(jrender *r, const jnode *at, const char *fmt, ...) KT_PRINTF(3, 4);
int kt__jr_oom(jrender *r, const jnode *at);
/* Error for using an undefined value. */
int kt__jr_undefined(jrender *r, const jnode *at, jv u);

jv kt__jv_undef_named(const char *name);
jv kt__jv_strcopy(ja_arena *a, const char *p, size_t n);
jv kt__jv_list(jlist *l);
jv kt__jv_dict(jdict *d);
jv kt__jv_func(jrender *r, int id, jv self);

/* Positional-or-keyword argument lookup; returns whether present. */
bool kt__jargs_get(const jargs *args, size_t index, const char *name, jv *out);

/* Materialises an iterable (list, tuple, dict keys, str characters,
 * undefined = empty) as (items, n). */
int kt__jr_iter(jrender *r, const jnode *at, jv v, const jv **items, size_t *n);
/* Calls a macro, builtin, or loop object. */
int kt__jr_call(jrender *r, const jnode *at, jv callee, const jargs *args, jv caller, jv *out);
/* obj.name (Jinja getattr: attribute, then item). */
int kt__jr_getattr(jrender *r, const jnode *at, jv obj, const char *name, size_t n, jv *out);
/* obj[key] (Jinja getitem: item, then attribute). */
int kt__jr_getitem(jrender *r, const jnode *at, jv obj, jv key, jv *out);
/* str(v) as a string value in the render arena. */
int kt__jr_to_str(jrender *r, const jnode *at, jv v, jv *out);

/* jinja_builtins.c */
int kt__jinja_filter(jrender *r, const jnode *at, const char *name, jv value, const jargs *args,
                     jv *out);
int kt__jinja_test(jrender *r, const jnode *at, const char *name, jv value, const jargs *args,
                   bool *out);
int kt__jinja_call_builtin(jrender *r, const jnode *at, const jfunc *fn, const jargs *args,
                           jv *out);
/* Bound method `name` of self, or JV_UNDEF type if self has no such method. */
jv kt__jinja_method(jrender *r, jv self, const char *name, size_t n);
/* Global function `name` (range, namespace, dict, raise_exception,
 * strftime_now), or JV_UNDEF. */
jv kt__jinja_global(jrender *r, const char *name);
/* Python `fmt % args`. */
int kt__jinja_percent_format(jrender *r, const jnode *at, jv fmt, jv args, jv *out);

#endif /* KT_JINJA_H */
