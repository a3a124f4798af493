/* kt/template.h: compile once, render many times (each render in its own
 * arena, so a compiled template is immutable and rendering is reentrant). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "kt/template.h"

#define MAX_DEFAULTS 16
#define DEFAULT_MAX_OUTPUT ((uint64_t)16 << 20)

struct kt_template {
    jtemplate jt;
    struct {
        char *key;
        char *value;
    } defaults[MAX_DEFAULTS];
    size_t n_defaults;
};

KT__DEFINE_OPTIONS_INIT(kt_template_options_init, kt_template_options, KT_TEMPLATE_OPTIONS_INIT)

KT__DEFINE_OPTIONS_INIT(kt_template_render_options_init, kt_template_render_options,
                        KT_TEMPLATE_RENDER_OPTIONS_INIT)

kt_status kt_template_create(kt_template **out, const char *source, size_t source_len,
                             const char *name, const kt_template_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_create: out is NULL");
    *out = NULL;
    if (!source && source_len)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_create: source is NULL");
    kt_template_options o = KT_TEMPLATE_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_template_options");
    if (st < 0)
        return st;
    const uint32_t known = KT_TEMPLATE_NO_TRIM_BLOCKS | KT_TEMPLATE_NO_LSTRIP_BLOCKS |
                           KT_TEMPLATE_KEEP_TRAILING_NEWLINE;
    if (o.flags & ~known)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_create: unknown flags 0x%x",
                         o.flags & ~known);
    kt_template *t = kt__calloc(1, sizeof *t);
    if (!t)
        return KT_ERR_NOMEM;
    if (!name)
        name = "template";
    size_t nl = strlen(name);
    char *nm = kt__ja_alloc(&t->jt.arena, nl + 1);
    if (!nm) {
        kt_template_free(t);
        return kt__error(KT_ERR_NOMEM, "template %s: out of memory", name);
    }
    memcpy(nm, name, nl + 1);
    t->jt.name = nm;
    jlex_opts lo = {!(o.flags & KT_TEMPLATE_NO_TRIM_BLOCKS),
                    !(o.flags & KT_TEMPLATE_NO_LSTRIP_BLOCKS),
                    (o.flags & KT_TEMPLATE_KEEP_TRAILING_NEWLINE) != 0};
    jtoks toks = {0};
    /* Tokens share the template arena: the AST points into their text. */
    st = kt__jinja_lex(&t->jt.arena, nm, source ? source : "", source_len, &lo, &toks);
    if (st >= 0)
        st = kt__jinja_parse(&t->jt, &toks);
    if (st < 0) {
        kt_template_free(t);
        return st;
    }
    *out = t;
    return KT_OK;
}

void kt_template_free(kt_template *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_defaults; i++) {
        kt__free(t->defaults[i].key);
        kt__free(t->defaults[i].value);
    }
    kt__ja_free_all(&t->jt.arena);
    kt__free(t);
}

const char *kt_template_name(const kt_template *t)
{
    return t ? t->jt.name : "";
}

kt_status kt_template_set_default(kt_template *t, const char *key, const char *value)
{
    if (!t || !key)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_set_default: t or key is NULL");
    for (size_t i = 0; i < t->n_defaults; i++) {
        if (strcmp(t->defaults[i].key, key))
            continue;
        kt__free(t->defaults[i].value);
        if (!value) {
            kt__free(t->defaults[i].key);
            t->defaults[i] = t->defaults[--t->n_defaults];
            return KT_OK;
        }
        if (!(t->defaults[i].value = kt__strdup(value)))
            return KT_ERR_NOMEM;
        return KT_OK;
    }
    if (!value)
        return KT_OK;
    if (t->n_defaults == MAX_DEFAULTS)
        return kt__error(KT_ERR_LIMIT, "template %s: more than %d default variables",
                         t->jt.name, MAX_DEFAULTS);
    char *k = kt__strdup(key), *v = kt__strdup(value);
    if (!k || !v) {
        kt__free(k);
        kt__free(v);
        return KT_ERR_NOMEM;
    }
    t->defaults[t->n_defaults].key = k;
    t->defaults[t->n_defaults].value = v;
    t->n_defaults++;
    return KT_OK;
}

kt_status kt_template_create_from_tokenizer(kt_template **out, const kt_tokenizer *tok,
                                            const char *name, const kt_template_options *opts)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_create_from_tokenizer: out is NULL");
    *out = NULL;
    if (!tok)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_create_from_tokenizer: tok is NULL");
    const char *src = kt_tokenizer_chat_template(tok, name);
    if (!src)
        return kt__error(KT_ERR_NOT_FOUND, "the model has no chat template%s%s",
                         name ? " named " : "", name ? name : "");
    kt_template *t = NULL;
    kt_status st = kt_template_create(&t, src, strlen(src), name ? name : "chat_template", opts);
    if (st < 0)
        return st;
    static const struct {
        const char *key;
        kt_special_token which;
    } specials[] = {{"bos_token", KT_SPECIAL_BOS},
                    {"eos_token", KT_SPECIAL_EOS},
                    {"pad_token", KT_SPECIAL_PAD},
                    {"unk_token", KT_SPECIAL_UNK}};
    for (size_t i = 0; i < KT_ARRAY_LEN(specials); i++) {
        const char *v = kt_tokenizer_special_text(tok, specials[i].which);
        if (v && (st = kt_template_set_default(t, specials[i].key, v)) < 0) {
            kt_template_free(t);
            return st;
        }
    }
    *out = t;
    return KT_OK;
}

/* Adds key=val unless the context already has key. */
static bool add_default(ja_arena *a, jdict *vars, const char *key, jv val)
{
    if (kt__jdict_get_str(vars, key, strlen(key)))
        return true;
    return kt__jdict_set(a, vars, jv_str(key, strlen(key)), val);
}

static kt_status parse_json_arg(const kt_template *t, ja_arena *a, const char *what,
                                const char *json, jv *out)
{
    char err[160];
    if (!kt__jv_from_json(a, json, strlen(json), out, err, sizeof err))
        return kt__error(KT_ERR_FORMAT, "template %s: render %s: %s", t->jt.name, what, err);
    return KT_OK;
}

/* An argument that must be a JSON object (the render context, extra variables) as a dict;
 * noun names it in the error. */
static kt_status parse_json_object(const kt_template *t, ja_arena *a, const char *what,
                                   const char *noun, const char *json, jdict **out)
{
    jv v;
    kt_status st = parse_json_arg(t, a, what, json, &v);
    if (st < 0)
        return st;
    if (v.type != JV_DICT)
        return kt__error(KT_ERR_FORMAT, "template %s: %s must be a JSON object", t->jt.name,
                         noun);
    *out = v.u.d;
    return KT_OK;
}

/* messages[*].tool_calls[*].function.arguments: JSON-object text -> object. */
static kt_status tool_args_to_objects(const kt_template *t, ja_arena *a, jdict *vars)
{
    jv *msgs = kt__jdict_get_str(vars, "messages", 8);
    if (!msgs || msgs->type != JV_LIST)
        return KT_OK;
    for (size_t i = 0; i < msgs->u.l->n; i++) {
        jv m = msgs->u.l->items[i];
        jv *calls = m.type == JV_DICT ? kt__jdict_get_str(m.u.d, "tool_calls", 10) : NULL;
        if (!calls || calls->type != JV_LIST)
            continue;
        for (size_t k = 0; k < calls->u.l->n; k++) {
            jv c = calls->u.l->items[k];
            jv *fn = c.type == JV_DICT ? kt__jdict_get_str(c.u.d, "function", 8) : NULL;
            jv *args = fn && fn->type == JV_DICT ? kt__jdict_get_str(fn->u.d, "arguments", 9)
                                                  : NULL;
            if (!args || args->type != JV_STR)
                continue;
            jv obj;
            char err[8];
            if (kt__jv_from_json(a, args->u.s.p, args->u.s.n, &obj, err, sizeof err) &&
                obj.type == JV_DICT)
                *args = obj;
            else if (a->limit && a->total >= a->limit)
                return kt__error(KT_ERR_LIMIT, "template %s: out of memory", t->jt.name);
        }
    }
    return KT_OK;
}

static kt_status render_vars(const kt_template *t, ja_arena *a, jdict *vars,
                             const kt_template_render_options *opts, kt_buf *out)
{
    kt_template_render_options o = KT_TEMPLATE_RENDER_OPTIONS_INIT;
    kt_status st = kt__options_read(&o, sizeof o, opts, "kt_template_render_options");
    if (st < 0)
        return st;
    if (o.flags & ~KT_TEMPLATE_RENDER_TOOL_ARGS_AS_OBJECTS)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_render: unknown flags 0x%x",
                         o.flags & ~KT_TEMPLATE_RENDER_TOOL_ARGS_AS_OBJECTS);
    if ((o.flags & KT_TEMPLATE_RENDER_TOOL_ARGS_AS_OBJECTS) &&
        (st = tool_args_to_objects(t, a, vars)) < 0)
        return st;
    if (!add_default(a, vars, "tools", jv_none()) ||
        !add_default(a, vars, "documents", jv_none()) ||
        !add_default(a, vars, "add_generation_prompt", jv_bool(false)))
        return kt__error(KT_ERR_NOMEM, "template %s: out of memory", t->jt.name);
    for (size_t i = 0; i < t->n_defaults; i++) {
        const char *v = t->defaults[i].value;
        if (!add_default(a, vars, t->defaults[i].key, jv_str(v, strlen(v))))
            return kt__error(KT_ERR_NOMEM, "template %s: out of memory", t->jt.name);
    }
    jrender_limits lim;
    uint64_t max_out = o.max_output_bytes ? o.max_output_bytes : DEFAULT_MAX_OUTPUT;
    if (max_out > SIZE_MAX / 8)
        max_out = SIZE_MAX / 8;
    lim.max_output = (size_t)max_out;
    lim.max_memory = (size_t)(max_out * 4 + ((uint64_t)128 << 20));
    lim.max_steps = 50u * 1000 * 1000;
    lim.max_depth = 48;
    a->limit = lim.max_memory;
    return kt__jinja_render(&t->jt, a, vars, o.now, &lim, out);
}

static void buf_clear(kt_buf *out)
{
    out->size = 0;
    if (out->ptr)
        out->ptr[0] = 0;
}

/* The last step of every render entry point: renders vars unless an earlier step failed
 * (st < 0), leaves out empty on any failure, and frees the arena. */
static kt_status render_and_release(const kt_template *t, ja_arena *a, kt_status st, jdict *vars,
                                    const kt_template_render_options *opts, kt_buf *out)
{
    if (st >= 0)
        st = render_vars(t, a, vars, opts, out);
    if (st < 0)
        buf_clear(out);
    kt__ja_free_all(a);
    return st;
}

kt_status kt_template_render(const kt_template *t, const char *context_json,
                             const kt_template_render_options *opts, kt_buf *out)
{
    if (!t || !out)
        return kt__error(KT_ERR_INVALID_ARG, "kt_template_render: t or out is NULL");
    buf_clear(out);
    ja_arena a = {0};
    jdict *vars = NULL;
    kt_status st = KT_OK;
    if (context_json && *context_json)
        st = parse_json_object(t, &a, "context", "the render context", context_json, &vars);
    else if (!(vars = kt__jdict_new(&a, 8)))
        st = kt__error(KT_ERR_NOMEM, "template %s: out of memory", t->jt.name);
    return render_and_release(t, &a, st, vars, opts, out);
}

kt_status kt_template_render_chat(const kt_template *t, const char *messages_json,
                                  const char *tools_json, int32_t add_generation_prompt,
                                  const char *extra_json,
                                  const kt_template_render_options *opts, kt_buf *out)
{
    if (!t || !out || !messages_json)
        return kt__error(KT_ERR_INVALID_ARG,
                         "kt_template_render_chat: t, messages_json or out is NULL");
    buf_clear(out);
    ja_arena a = {0};
    jdict *vars = kt__jdict_new(&a, 8);
    kt_status st = vars ? KT_OK : kt__error(KT_ERR_NOMEM, "out of memory");
    jv v;
    if (st >= 0 && extra_json && *extra_json)
        st = parse_json_object(t, &a, "extra variables", "extra variables", extra_json, &vars);
    if (st >= 0)
        st = parse_json_arg(t, &a, "messages", messages_json, &v);
    if (st >= 0 && !kt__jdict_set(&a, vars, jv_str("messages", 8), v))
        st = kt__error(KT_ERR_NOMEM, "out of memory");
    if (st >= 0 && tools_json && *tools_json) {
        st = parse_json_arg(t, &a, "tools", tools_json, &v);
        if (st >= 0 && !kt__jdict_set(&a, vars, jv_str("tools", 5), v))
            st = kt__error(KT_ERR_NOMEM, "out of memory");
    }
    if (st >= 0 && !kt__jdict_set(&a, vars, jv_str("add_generation_prompt", 21),
                                  jv_bool(add_generation_prompt != 0)))
        st = kt__error(KT_ERR_NOMEM, "out of memory");
    return render_and_release(t, &a, st, vars, opts, out);
}

kt_status kt_template_render_messages(const kt_template *t, const kt_chat_message *messages,
                                      size_t n_messages, int32_t add_generation_prompt,
                                      const char *extra_json,
                                      const kt_template_render_options *opts, kt_buf *out)
{
    if (!t || !out || (!messages && n_messages))
        return kt__error(KT_ERR_INVALID_ARG,
                         "kt_template_render_messages: t, messages or out is NULL");
    buf_clear(out);
    ja_arena a = {0};
    jdict *vars = NULL;
    jlist *msgs = kt__jlist_new(&a, n_messages);
    kt_status st = msgs ? KT_OK : kt__error(KT_ERR_NOMEM, "out of memory");
    if (st >= 0 && extra_json && *extra_json)
        st = parse_json_object(t, &a, "extra variables", "extra variables", extra_json, &vars);
    if (st >= 0 && !vars && !(vars = kt__jdict_new(&a, 4)))
        st = kt__error(KT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st >= 0 && i < n_messages; i++) {
        const kt_chat_message *m = &messages[i];
        if (!m->role) {
            st = kt__error(KT_ERR_INVALID_ARG, "kt_template_render_messages: message %zu has "
                                               "no role", i);
            break;
        }
        jdict *d = kt__jdict_new(&a, 3);
        bool ok = d && kt__jdict_set(&a, d, jv_str("role", 4), jv_str(m->role, strlen(m->role)));
        ok = ok && kt__jdict_set(&a, d, jv_str("content", 7),
                                 m->content ? jv_str(m->content, strlen(m->content)) : jv_none());
        if (ok && m->reasoning_content)
            ok = kt__jdict_set(&a, d, jv_str("reasoning_content", 17),
                               jv_str(m->reasoning_content, strlen(m->reasoning_content)));
        if (!ok)
            st = kt__error(KT_ERR_NOMEM, "out of memory");
        else
            msgs->items[msgs->n++] = kt__jv_dict(d);
    }
    if (st >= 0 && (!kt__jdict_set(&a, vars, jv_str("messages", 8), kt__jv_list(msgs)) ||
                    !kt__jdict_set(&a, vars, jv_str("add_generation_prompt", 21),
                                   jv_bool(add_generation_prompt != 0))))
        st = kt__error(KT_ERR_NOMEM, "out of memory");
    return render_and_release(t, &a, st, vars, opts, out);
}
