/* kt/chat.h: splitting a chat model's output into content, reasoning and
 * OpenAI tool calls, for the tool-call syntaxes of the supported families. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kt/chat.h"
#include "kt_internal.h"

/* Markers, as the models' vocabularies spell them. */
#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define KIMI_SECTION_BEGIN "<|tool_calls_section_begin|>"
#define KIMI_SECTION_BEGIN_ALT "<|tool_call_section_begin|>"
#define KIMI_SECTION_END "<|tool_calls_section_end|>"
#define KIMI_SECTION_END_ALT "<|tool_call_section_end|>"
#define KIMI_CALL_BEGIN "<|tool_call_begin|>"
#define KIMI_ARG_BEGIN "<|tool_call_argument_begin|>"
#define KIMI_CALL_END "<|tool_call_end|>"
#define DS_SECTION_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_SECTION_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"
#define QWEN_BEGIN "<tool_call>"
#define QWEN_END "</tool_call>"
#define MM_BEGIN "<minimax:tool_call>"
#define MM_END "</minimax:tool_call>"
#define OSS_START "<|start|>"
#define OSS_CHANNEL "<|channel|>"
#define OSS_MESSAGE "<|message|>"

typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct parser {
    uint32_t flags;
    kt_chat_format format;
    const cJSON *tools; /* request's tools array or NULL */
    kt_buf content, reasoning;
    bool has_reasoning, pending;
    cJSON *calls;
    int n_calls;
    kt_status st;
} parser;

static bool partial(const parser *ps)
{
    return (ps->flags & KT_CHAT_F_PARTIAL) != 0;
}

/* Offset of needle in s[0..n), or -1. */
static long find(span s, const char *needle)
{
    size_t nl = strlen(needle);
    if (nl == 0 || nl > s.n)
        return -1;
    for (size_t i = 0; i + nl <= s.n; i++)
        if (s.p[i] == needle[0] && !memcmp(s.p + i, needle, nl))
            return (long)i;
    return -1;
}

static span sub(span s, size_t from, size_t to)
{
    if (from > s.n)
        from = s.n;
    if (to > s.n)
        to = s.n;
    if (to < from)
        to = from;
    return (span){s.p + from, to - from};
}

static span trim(span s)
{
    while (s.n && (s.p[0] == ' ' || s.p[0] == '\n' || s.p[0] == '\r' || s.p[0] == '\t'))
        s.p++, s.n--;
    while (s.n && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\n' || s.p[s.n - 1] == '\r' ||
                   s.p[s.n - 1] == '\t'))
        s.n--;
    return s;
}

/* Moves *s past the first marker in it; false (s unchanged) when there is none. */
static bool skip_past(span *s, const char *marker)
{
    long at = find(*s, marker);
    if (at < 0)
        return false;
    *s = sub(*s, (size_t)at + strlen(marker), s->n);
    return true;
}

/* s without one pair of surrounding double quotes. */
static span unquote(span s)
{
    return s.n >= 2 && s.p[0] == '"' && s.p[s.n - 1] == '"' ? sub(s, 1, s.n - 1) : s;
}

static bool starts(span s, const char *prefix)
{
    size_t n = strlen(prefix);
    return s.n >= n && !memcmp(s.p, prefix, n);
}

static bool span_is(span s, const char *word)
{
    return s.n == strlen(word) && !memcmp(s.p, word, s.n);
}

/* Length of the longest tail of s that is a proper prefix of one of the
 * markers: text a streaming parser must not emit yet. */
static size_t held_tail(span s, const char *const *markers, size_t n_markers)
{
    size_t best = 0;
    for (size_t m = 0; m < n_markers; m++) {
        size_t ml = strlen(markers[m]);
        for (size_t k = ml - 1; k > best; k--)
            if (k <= s.n && !memcmp(s.p + s.n - k, markers[m], k)) {
                best = k;
                break;
            }
    }
    return best;
}

static void emit(parser *ps, kt_buf *dst, span s)
{
    if (ps->st == KT_OK && s.n)
        ps->st = kt__buf_append(dst, s.p, s.n);
    if (dst == &ps->reasoning)
        ps->has_reasoning = true;
}

/* Emits s, holding back a tail that may start one of the markers when the
 * output is still growing. */
static void emit_held(parser *ps, kt_buf *dst, span s, const char *const *markers, size_t nm)
{
    if (partial(ps))
        s.n -= held_tail(s, markers, nm);
    emit(ps, dst, s);
}

static char *span_dup(span s)
{
    char *d = kt__malloc(s.n + 1);
    if (d) {
        memcpy(d, s.p, s.n);
        d[s.n] = '\0';
    }
    return d;
}

/* JSON type the request's schema gives parameter `key` of tool `name`, or NULL. */
static const char *param_type(const parser *ps, const char *name, const char *key)
{
    const cJSON *tool = NULL;
    cJSON_ArrayForEach(tool, ps->tools)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, name))
            continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        const cJSON *prop = cJSON_GetObjectItemCaseSensitive(props, key);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(prop, "type");
        if (cJSON_IsString(type))
            return type->valuestring;
        if (cJSON_IsArray(type) && cJSON_IsString(cJSON_GetArrayItem(type, 0)))
            return cJSON_GetArrayItem(type, 0)->valuestring;
        return NULL;
    }
    return NULL;
}

/* Appends {"id", "type", "function": {"name", "arguments"}}; false on a bad call. */
static bool add_call(parser *ps, span name, span args, span id)
{
    name = trim(name);
    args = trim(args);
    if (name.n == 0 || ps->st != KT_OK)
        return false;
    char *nm = span_dup(name), *ar = args.n ? span_dup(args) : kt__strdup("{}");
    char idbuf[32];
    char *id_text = id.n ? span_dup(trim(id)) : NULL;
    if (!id.n)
        snprintf(idbuf, sizeof idbuf, "call_%d", ps->n_calls);
    cJSON *call = cJSON_CreateObject();
    cJSON *fn = cJSON_CreateObject();
    bool ok = nm && ar && (id_text || !id.n) && call && fn &&
              cJSON_AddStringToObject(call, "id", id_text ? id_text : idbuf) &&
              cJSON_AddStringToObject(call, "type", "function") &&
              cJSON_AddStringToObject(fn, "name", nm) &&
              cJSON_AddStringToObject(fn, "arguments", ar);
    if (ok) {
        cJSON_AddItemToObject(call, "function", fn);
        fn = NULL;
        cJSON_AddItemToArray(ps->calls, call);
        call = NULL;
        ps->n_calls++;
    } else {
        ps->st = kt__error(KT_ERR_NOMEM, "kt_chat_parse: out of memory");
    }
    cJSON_Delete(fn);
    cJSON_Delete(call);
    kt__free(nm);
    kt__free(ar);
    kt__free(id_text);
    return ok;
}

/* A call whose arguments come as XML parameters: the value becomes a JSON
 * string when the schema says string (or when it does not parse as JSON). */
static bool add_xml_call(parser *ps, span name, cJSON *args)
{
    char *text = cJSON_PrintUnformatted(args);
    if (!text) {
        ps->st = kt__error(KT_ERR_NOMEM, "kt_chat_parse: out of memory");
        return false;
    }
    bool ok = add_call(ps, name, (span){text, strlen(text)}, (span){NULL, 0});
    cJSON_free(text);
    return ok;
}

static bool add_param(parser *ps, cJSON *args, const char *fn_name, span key, span value)
{
    char *k = span_dup(trim(key));
    /* the formats put the value on its own lines: drop one newline each side */
    if (value.n && value.p[0] == '\n')
        value.p++, value.n--;
    if (value.n && value.p[value.n - 1] == '\n')
        value.n--;
    char *v = span_dup(value);
    bool ok = false;
    if (k && v) {
        const char *type = param_type(ps, fn_name, k);
        cJSON *item = NULL;
        if (!type || strcmp(type, "string"))
            item = cJSON_Parse(v);
        if (!item)
            item = cJSON_CreateString(v);
        ok = item && cJSON_AddItemToObject(args, k, item);
    }
    if (!ok)
        ps->st = kt__error(KT_ERR_NOMEM, "kt_chat_parse: out of memory");
    kt__free(k);
    kt__free(v);
    return ok;
}

/* <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|> */
static int parse_kimi_calls(parser *ps, span body)
{
    int n = 0;
    for (;;) {
        if (!skip_past(&body, KIMI_CALL_BEGIN))
            break;
        long a = find(body, KIMI_ARG_BEGIN), e = find(body, KIMI_CALL_END);
        if (a < 0 || e < 0 || e < a)
            break;
        span id = trim(sub(body, 0, (size_t)a));
        span name = id;
        if (starts(name, "functions."))
            name = sub(name, 10, name.n);
        for (size_t i = name.n; i-- > 0;)
            if (name.p[i] == ':') {
                name.n = i;
                break;
            }
        if (add_call(ps, name, sub(body, (size_t)a + strlen(KIMI_ARG_BEGIN), (size_t)e), id))
            n++;
        body = sub(body, (size_t)e + strlen(KIMI_CALL_END), body.n);
    }
    return n;
}

/* <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜> (V3, R1)
 * <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜> (V3.1) */
static int parse_deepseek_calls(parser *ps, span body)
{
    int n = 0;
    for (;;) {
        if (!skip_past(&body, DS_CALL_BEGIN))
            break;
        long e = find(body, DS_CALL_END);
        if (e < 0)
            break;
        span call = sub(body, 0, (size_t)e);
        body = sub(body, (size_t)e + strlen(DS_CALL_END), body.n);
        long s = find(call, DS_SEP);
        if (s < 0)
            continue;
        span head = trim(sub(call, 0, (size_t)s));
        span rest = sub(call, (size_t)s + strlen(DS_SEP), call.n);
        span name = head, args = rest;
        if (span_is(head, "function")) {
            long nl = find(rest, "\n");
            name = nl < 0 ? rest : sub(rest, 0, (size_t)nl);
            args = nl < 0 ? (span){NULL, 0} : sub(rest, (size_t)nl + 1, rest.n);
            args = trim(args);
            if (starts(args, "```json"))
                args = sub(args, 7, args.n);
            else if (starts(args, "```"))
                args = sub(args, 3, args.n);
            args = trim(args);
            if (args.n >= 3 && !memcmp(args.p + args.n - 3, "```", 3))
                args.n -= 3;
        }
        if (add_call(ps, name, args, (span){NULL, 0}))
            n++;
    }
    return n;
}

/* <invoke name="NAME"><parameter name="K">V</parameter>...</invoke> (MiniMax-M2), or
 * <function=NAME><parameter=K>V</parameter>...</function> (Qwen3-Coder). */
static int parse_xml_calls(parser *ps, span body, bool minimax)
{
    const char *open = minimax ? "<invoke name=" : "<function=";
    const char *close = minimax ? "</invoke>" : "</function>";
    const char *popen = minimax ? "<parameter name=" : "<parameter=";
    int n = 0;
    for (;;) {
        if (!skip_past(&body, open))
            break;
        long gt = find(body, ">"), e = find(body, close);
        if (gt < 0 || e < 0 || e < gt)
            break;
        span name = unquote(trim(sub(body, 0, (size_t)gt)));
        span inner = sub(body, (size_t)gt + 1, (size_t)e);
        body = sub(body, (size_t)e + strlen(close), body.n);
        char *fn_name = span_dup(name);
        cJSON *args = cJSON_CreateObject();
        if (!fn_name || !args) {
            kt__free(fn_name);
            cJSON_Delete(args);
            ps->st = kt__error(KT_ERR_NOMEM, "kt_chat_parse: out of memory");
            return n;
        }
        for (;;) {
            if (!skip_past(&inner, popen))
                break;
            long pg = find(inner, ">"), pe = find(inner, "</parameter>");
            if (pg < 0 || pe < 0 || pe < pg)
                break;
            span key = unquote(trim(sub(inner, 0, (size_t)pg)));
            if (!add_param(ps, args, fn_name, key, sub(inner, (size_t)pg + 1, (size_t)pe)))
                break;
            inner = sub(inner, (size_t)pe + strlen("</parameter>"), inner.n);
        }
        if (ps->st == KT_OK && add_xml_call(ps, name, args))
            n++;
        cJSON_Delete(args);
        kt__free(fn_name);
    }
    return n;
}

/* <tool_call>{"name": ..., "arguments": {...}}</tool_call> or Qwen3-Coder XML inside. */
static int parse_qwen_call(parser *ps, span body)
{
    body = trim(body);
    if (starts(body, "<function="))
        return parse_xml_calls(ps, body, false);
    char *text = span_dup(body);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    kt__free(text);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args)
        args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    int n = 0;
    if (cJSON_IsString(name)) {
        char *a = NULL;
        if (cJSON_IsString(args))
            a = kt__strdup(args->valuestring);
        else if (args)
            a = cJSON_PrintUnformatted(args);
        span as = a ? (span){a, strlen(a)} : (span){NULL, 0};
        n = add_call(ps, (span){name->valuestring, strlen(name->valuestring)}, as,
                     (span){NULL, 0});
        if (cJSON_IsString(args))
            kt__free(a);
        else
            cJSON_free(a);
    }
    cJSON_Delete(j);
    return n;
}

static int parse_section(parser *ps, span body)
{
    switch (ps->format) {
    case KT_CHAT_FORMAT_KIMI_K2: return parse_kimi_calls(ps, body);
    case KT_CHAT_FORMAT_DEEPSEEK: return parse_deepseek_calls(ps, body);
    case KT_CHAT_FORMAT_QWEN3: return parse_qwen_call(ps, body);
    case KT_CHAT_FORMAT_MINIMAX_M2: return parse_xml_calls(ps, body, true);
    default: return 0;
    }
}

/* Start and end markers of a tool-call block, per format (begin[i] pairs end[i]). */
static size_t section_markers(kt_chat_format f, const char **begin, const char **end)
{
    switch (f) {
    case KT_CHAT_FORMAT_KIMI_K2:
        begin[0] = KIMI_SECTION_BEGIN, end[0] = KIMI_SECTION_END;
        begin[1] = KIMI_SECTION_BEGIN_ALT, end[1] = KIMI_SECTION_END_ALT;
        return 2;
    case KT_CHAT_FORMAT_DEEPSEEK: begin[0] = DS_SECTION_BEGIN, end[0] = DS_SECTION_END; return 1;
    case KT_CHAT_FORMAT_QWEN3: begin[0] = QWEN_BEGIN, end[0] = QWEN_END; return 1;
    case KT_CHAT_FORMAT_MINIMAX_M2: begin[0] = MM_BEGIN, end[0] = MM_END; return 1;
    default: return 0;
    }
}

/* Content, <think> blocks and tool-call blocks in the order they come. */
static void parse_tagged(parser *ps, span text)
{
    const char *begin[3], *end[3], *markers[4];
    size_t n_sections = section_markers(ps->format, begin, end), nm = 0;
    bool think = (ps->flags & (KT_CHAT_F_REASONING | KT_CHAT_F_IN_REASONING)) != 0;
    for (size_t i = 0; i < n_sections; i++)
        markers[nm++] = begin[i];
    if (think)
        markers[nm++] = THINK_OPEN;
    static const char *const close_marker[] = {THINK_CLOSE};
    bool in_reasoning = (ps->flags & KT_CHAT_F_IN_REASONING) != 0;
    size_t pos = 0;
    while (pos < text.n && ps->st == KT_OK) {
        span rest = sub(text, pos, text.n);
        if (in_reasoning) {
            long e = find(rest, THINK_CLOSE);
            if (e < 0) {
                emit_held(ps, &ps->reasoning, rest, close_marker, 1);
                return;
            }
            emit(ps, &ps->reasoning, sub(rest, 0, (size_t)e));
            pos += (size_t)e + strlen(THINK_CLOSE);
            in_reasoning = false;
            continue;
        }
        long first = -1;
        size_t which = 0;
        for (size_t i = 0; i < nm; i++) {
            long at = find(rest, markers[i]);
            if (at >= 0 && (first < 0 || at < first))
                first = at, which = i;
        }
        if (first < 0) {
            emit_held(ps, &ps->content, rest, markers, nm);
            return;
        }
        emit(ps, &ps->content, sub(rest, 0, (size_t)first));
        span after = sub(rest, (size_t)first + strlen(markers[which]), rest.n);
        if (which == n_sections) { /* <think> */
            in_reasoning = true;
            pos = (size_t)(after.p - text.p);
            continue;
        }
        long e = find(after, end[which]);
        if (e < 0 && partial(ps)) {
            ps->pending = true;
            return;
        }
        span body = e < 0 ? after : sub(after, 0, (size_t)e);
        size_t stop = e < 0 ? text.n : (size_t)(body.p - text.p) + body.n + strlen(end[which]);
        if (parse_section(ps, body) == 0) /* keep what could not be read as written */
            emit(ps, &ps->content, sub(text, pos + (size_t)first, stop));
        pos = stop;
    }
}

/* Harmony: [<|start|>assistant]<|channel|>C [to=functions.NAME] [<|constrain|>json]
 * <|message|>BODY(<|end|>|<|call|>|<|return|>). */
static void parse_harmony(parser *ps, span text)
{
    static const char *const body_end[] = {"<|end|>", "<|call|>", "<|return|>", OSS_START};
    size_t pos = 0;
    while (pos < text.n && ps->st == KT_OK) {
        span rest = sub(text, pos, text.n);
        if (starts(rest, OSS_START)) {
            pos += strlen(OSS_START);
            continue;
        }
        long m = find(rest, OSS_MESSAGE);
        if (m < 0) {
            /* no header: plain text (a model that ignored the format), unless it
             * may still become a header */
            if (!partial(ps) || (pos == 0 && find(rest, OSS_CHANNEL) < 0 && rest.p[0] != '<'))
                emit(ps, &ps->content, rest);
            return;
        }
        span header = sub(rest, 0, (size_t)m);
        span body = sub(rest, (size_t)m + strlen(OSS_MESSAGE), rest.n);
        long e = -1;
        size_t which = 0;
        for (size_t i = 0; i < 4; i++) {
            long at = find(body, body_end[i]);
            if (at >= 0 && (e < 0 || at < e))
                e = at, which = i;
        }
        bool complete = e >= 0;
        span msg = complete ? sub(body, 0, (size_t)e) : body;
        span channel = {NULL, 0}, recipient = {NULL, 0};
        long c = find(header, OSS_CHANNEL);
        if (c >= 0) {
            channel = sub(header, (size_t)c + strlen(OSS_CHANNEL), header.n);
            size_t k = 0;
            while (k < channel.n && channel.p[k] != ' ' && channel.p[k] != '<')
                k++;
            channel.n = k;
        }
        long t = find(header, "to=");
        if (t >= 0) {
            recipient = sub(header, (size_t)t + 3, header.n);
            size_t k = 0;
            while (k < recipient.n && recipient.p[k] != ' ' && recipient.p[k] != '<')
                k++;
            recipient.n = k;
        }
        if (starts(recipient, "functions.")) {
            if (!complete && partial(ps)) {
                ps->pending = true;
                return;
            }
            add_call(ps, sub(recipient, 10, recipient.n), msg, (span){NULL, 0});
        } else {
            kt_buf *dst = span_is(channel, "analysis") ? &ps->reasoning : &ps->content;
            if (complete)
                emit(ps, dst, msg);
            else
                emit_held(ps, dst, msg, body_end, 4);
        }
        if (!complete)
            return;
        /* <|start|> is left for the loop to skip */
        pos = (size_t)(msg.p - text.p) + msg.n + (which == 3 ? 0 : strlen(body_end[which]));
    }
}

const char *kt_chat_format_name(kt_chat_format format)
{
    switch (format) {
    case KT_CHAT_FORMAT_PLAIN: return "plain";
    case KT_CHAT_FORMAT_KIMI_K2: return "kimi_k2";
    case KT_CHAT_FORMAT_DEEPSEEK: return "deepseek";
    case KT_CHAT_FORMAT_QWEN3: return "qwen3";
    case KT_CHAT_FORMAT_MINIMAX_M2: return "minimax_m2";
    case KT_CHAT_FORMAT_GPT_OSS: return "gpt_oss";
    }
    return "unknown";
}

kt_chat_format kt_chat_format_detect(const char *src, uint32_t *flags)
{
    if (flags)
        *flags = 0;
    if (!src)
        return KT_CHAT_FORMAT_PLAIN;
    if (flags && (strstr(src, THINK_OPEN) || strstr(src, THINK_CLOSE)))
        *flags |= KT_CHAT_F_REASONING;
    if (strstr(src, KIMI_SECTION_BEGIN) || strstr(src, KIMI_CALL_BEGIN))
        return KT_CHAT_FORMAT_KIMI_K2;
    if (strstr(src, DS_SECTION_BEGIN) || strstr(src, DS_CALL_BEGIN))
        return KT_CHAT_FORMAT_DEEPSEEK;
    if (strstr(src, MM_BEGIN))
        return KT_CHAT_FORMAT_MINIMAX_M2;
    if (strstr(src, OSS_CHANNEL))
        return KT_CHAT_FORMAT_GPT_OSS;
    if (strstr(src, QWEN_BEGIN))
        return KT_CHAT_FORMAT_QWEN3;
    return KT_CHAT_FORMAT_PLAIN;
}

static cJSON *buf_string(const kt_buf *b)
{
    return cJSON_CreateString(b->ptr ? b->ptr : "");
}

kt_status kt_chat_parse(const char *text, size_t len, kt_chat_format format, uint32_t flags,
                        const char *tools_json, kt_buf *out)
{
    if (!out || (!text && len))
        return kt__error(KT_ERR_INVALID_ARG, "kt_chat_parse: text or out is NULL");
    if (flags & ~(uint32_t)(KT_CHAT_F_REASONING | KT_CHAT_F_IN_REASONING | KT_CHAT_F_PARTIAL))
        return kt__error(KT_ERR_INVALID_ARG, "kt_chat_parse: unknown flags 0x%x", flags);
    if ((unsigned)format > KT_CHAT_FORMAT_GPT_OSS)
        return kt__error(KT_ERR_INVALID_ARG, "kt_chat_parse: unknown format %d", (int)format);
    parser ps = {.flags = flags, .format = format, .st = KT_OK};
    cJSON *tools = tools_json ? cJSON_Parse(tools_json) : NULL;
    ps.tools = cJSON_IsArray(tools) ? tools : NULL;
    ps.calls = cJSON_CreateArray();
    cJSON *obj = cJSON_CreateObject();
    if (!ps.calls || !obj)
        ps.st = kt__error(KT_ERR_NOMEM, "kt_chat_parse: out of memory");
    span s = {text ? text : "", len};
    if (ps.st == KT_OK) {
        if (format == KT_CHAT_FORMAT_GPT_OSS)
            parse_harmony(&ps, s);
        else
            parse_tagged(&ps, s);
    }
    char *json = NULL;
    if (ps.st == KT_OK) {
        bool null_content = ps.n_calls > 0 && trim((span){ps.content.ptr, ps.content.size}).n == 0;
        cJSON *content = null_content ? cJSON_CreateNull() : buf_string(&ps.content);
        cJSON_AddItemToObject(obj, "content", content);
        if (ps.has_reasoning)
            cJSON_AddItemToObject(obj, "reasoning_content", buf_string(&ps.reasoning));
        if (ps.n_calls > 0) {
            cJSON_AddItemToObject(obj, "tool_calls", ps.calls);
            ps.calls = NULL;
        }
        if (ps.pending)
            cJSON_AddTrueToObject(obj, "tool_call_pending");
        json = cJSON_PrintUnformatted(obj);
        if (!json)
            ps.st = kt__error(KT_ERR_NOMEM, "kt_chat_parse: out of memory");
    }
    if (ps.st == KT_OK) {
        out->size = 0;
        ps.st = kt__buf_append(out, json, strlen(json));
    }
    cJSON_free(json);
    cJSON_Delete(obj);
    cJSON_Delete(ps.calls);
    cJSON_Delete(tools);
    kt_buf_dispose(&ps.content);
    kt_buf_dispose(&ps.reasoning);
    return ps.st;
}
