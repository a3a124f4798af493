/* kt-serve's HTTP side: OpenAI's /v1/chat/completions, /v1/completions and
 * /v1/models, plus /health, on libmicrohttpd (one thread per connection).
 * Requests are validated, rendered with the model's chat template and
 * tokenised here; generation happens on the scheduler thread (sched.c). */
#define _GNU_SOURCE /* POLLRDHUP */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "serve.h"

/* ---- errors ------------------------------------------------------------ */

typedef struct api_error {
    unsigned status;
    const char *type;  /* invalid_request_error, authentication_error, ... */
    const char *param; /* NULL: null                                       */
    const char *code;  /* NULL: null                                       */
    char message[512];
} api_error;

static void set_error(api_error *e, unsigned status, const char *type, const char *param,
                      const char *code, const char *fmt, va_list ap)
{
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

static bool fail(api_error *e, unsigned status, const char *type, const char *param,
                 const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(e, status, type, param, code, fmt, ap);
    va_end(ap);
    return false;
}

/* A 400 invalid_request_error about `param`. */
static bool bad_param(api_error *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(e, 400, "invalid_request_error", param, NULL, fmt, ap);
    va_end(ap);
    return false;
}

static char *error_json(const api_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type);
    if (e->param)
        cJSON_AddStringToObject(err, "param", e->param);
    else
        cJSON_AddNullToObject(err, "param");
    if (e->code)
        cJSON_AddStringToObject(err, "code", e->code);
    else
        cJSON_AddNullToObject(err, "code");
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* ---- responses --------------------------------------------------------- */

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *body,
                                 const char *type)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    /* cJSON allocates with malloc (the default hooks), so MHD may free() it */
    return send_text(c, status, text, "application/json");
}

static enum MHD_Result send_error(struct MHD_Connection *c, const api_error *e)
{
    return send_text(c, e->status, error_json(e), "application/json");
}

/* ---- request reading helpers ------------------------------------------- */

/* A number field: absent leaves *out; a wrong type or range fails. */
static bool get_number(const cJSON *req, const char *key, double lo, double hi, double *out,
                       api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsNumber(v))
        return bad_param(e, key, "'%s' must be a number", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return bad_param(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi,
                         v->valuedouble);
    *out = v->valuedouble;
    return true;
}

static bool get_int(const cJSON *req, const char *key, double lo, double hi, int64_t *out,
                    api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble)
        return bad_param(e, key, "'%s' must be an integer", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return bad_param(e, key, "'%s' must be between %.0f and %.0f, got %.0f", key, lo, hi,
                         v->valuedouble);
    *out = (int64_t)v->valuedouble;
    return true;
}

static bool get_bool(const cJSON *req, const char *key, bool *out, api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);
    if (!v || cJSON_IsNull(v))
        return true;
    if (!cJSON_IsBool(v))
        return bad_param(e, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return true;
}

/* A parsed request: the job to run and what the answer needs. */
typedef struct request {
    bool chat;
    bool stream, include_usage;
    job *j;
    char *tools_json;       /* the request's tools (for typing XML arguments) */
    uint32_t parse_flags;   /* kt_chat_parse flags                            */
    const char *model;      /* served name                                    */
    char id[48];
    int64_t created;
} request;

static bool read_sampling(server *srv, const cJSON *req, request *rq, api_error *e)
{
    job *j = rq->j;
    double temperature = 1.0, top_p = 1.0, min_p = 0.0, presence = 0.0, frequency = 0.0;
    double repetition = 1.0;
    int64_t top_k = 0, seed = -1, n = 1;
    int64_t max_tokens = -1;
    if (!get_number(req, "temperature", 0.0, 100.0, &temperature, e) ||
        !get_number(req, "top_p", 1e-9, 1.0, &top_p, e) ||
        !get_number(req, "min_p", 0.0, 1.0, &min_p, e) ||
        !get_number(req, "presence_penalty", -2.0, 2.0, &presence, e) ||
        !get_number(req, "frequency_penalty", -2.0, 2.0, &frequency, e) ||
        !get_number(req, "repetition_penalty", 1e-6, 100.0, &repetition, e) ||
        !get_int(req, "top_k", -1, 1e9, &top_k, e) ||
        !get_int(req, "seed", -9.2e18, 9.2e18, &seed, e) ||
        !get_int(req, "n", 1, 128, &n, e) ||
        !get_int(req, "max_tokens", 0, 1e9, &max_tokens, e) ||
        !get_int(req, "max_completion_tokens", 0, 1e9, &max_tokens, e) ||
        !get_bool(req, "stream", &rq->stream, e))
        return false;
    if (n != 1)
        return bad_param(e, "n", "only n = 1 is supported");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(req, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return bad_param(e, "stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &rq->include_usage, e))
            return false;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
    if (model && !cJSON_IsString(model) && !cJSON_IsNull(model))
        return bad_param(e, "model", "'model' must be a string");
    kt_sampler_options *sp = &j->sampling;
    sp->temperature = (float)temperature;
    sp->top_p = (float)top_p;
    sp->top_k = top_k < 0 ? 0 : (int32_t)top_k;
    sp->min_p = (float)min_p;
    sp->presence_penalty = (float)presence;
    sp->frequency_penalty = (float)frequency;
    sp->repetition_penalty = (float)repetition;
    if (seed >= 0) {
        sp->seed = (uint64_t)seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sp->seed = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ j->serial;
    }
    /* stop: a string or up to four */
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(req, "stop");
    if (cJSON_IsString(stop)) {
        if (*stop->valuestring)
            j->stop[j->n_stop++] = strdup(stop->valuestring);
    } else if (cJSON_IsArray(stop)) {
        if (cJSON_GetArraySize(stop) > SERVE_MAX_STOP)
            return bad_param(e, "stop", "at most %d stop sequences", SERVE_MAX_STOP);
        const cJSON *s = NULL;
        cJSON_ArrayForEach(s, stop)
        {
            if (!cJSON_IsString(s))
                return bad_param(e, "stop", "'stop' must be a string or a list of strings");
            if (*s->valuestring)
                j->stop[j->n_stop++] = strdup(s->valuestring);
        }
    } else if (stop && !cJSON_IsNull(stop)) {
        return bad_param(e, "stop", "'stop' must be a string or a list of strings");
    }
    int32_t n_ctx = srv->cfg.n_ctx;
    if (j->n_prompt >= (size_t)n_ctx)
        return fail(e, 400, "invalid_request_error", "messages", "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, your "
                    "prompt is %zu tokens long.", n_ctx, j->n_prompt);
    if (max_tokens >= 0 && j->n_prompt + (size_t)max_tokens > (size_t)n_ctx)
        return fail(e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, you "
                    "requested %zu tokens (%zu in the prompt, %" PRId64 " for the "
                    "completion).", n_ctx, j->n_prompt + (size_t)max_tokens, j->n_prompt,
                    max_tokens);
    j->max_tokens = max_tokens >= 0 ? (size_t)max_tokens : (size_t)n_ctx - j->n_prompt;
    return true;
}

static bool encode(server *srv, const char *text, uint32_t flags, job *j, const char *param,
                   api_error *e)
{
    size_t need = 0;
    kt_status st = kt_tokenizer_encode(srv->tok, text, strlen(text), flags, NULL, 0, &need);
    if (st < 0 && st != KT_ERR_LIMIT)
        return bad_param(e, param, "cannot tokenize: %s", kt_last_error());
    j->prompt = malloc(sizeof(int32_t) * (need + 1));
    if (!j->prompt)
        return fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (kt_tokenizer_encode(srv->tok, text, strlen(text), flags, j->prompt, need, &j->n_prompt) <
        0)
        return bad_param(e, param, "cannot tokenize: %s", kt_last_error());
    return true;
}

/* OpenAI content: a string, null, or a list of parts ({"type": "text", ...}). */
static bool flatten_content(cJSON *msg, size_t index, api_error *e)
{
    cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!content || cJSON_IsNull(content) || cJSON_IsString(content))
        return true;
    if (!cJSON_IsArray(content))
        return bad_param(e, "messages", "messages[%zu].content must be a string or a list of "
                         "content parts", index);
    size_t len = 0;
    const cJSON *part = NULL;
    cJSON_ArrayForEach(part, content)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text"))
            return bad_param(e, "messages", "messages[%zu]: only text content parts are "
                             "supported", index);
        if (!cJSON_IsString(text))
            return bad_param(e, "messages", "messages[%zu]: a text part needs a string 'text'",
                             index);
        len += strlen(text->valuestring);
    }
    char *joined = malloc(len + 1), *p = joined;
    if (!joined)
        return fail(e, 500, "server_error", NULL, NULL, "out of memory");
    cJSON_ArrayForEach(part, content)
    {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(p, t, n);
        p += n;
    }
    *p = '\0';
    cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateString(joined));
    free(joined);
    return true;
}

static bool parse_chat(server *srv, cJSON *req, request *rq, api_error *e)
{
    if (!srv->tpl)
        return fail(e, 400, "invalid_request_error", NULL, NULL,
                    "the model has no chat template; use /v1/completions");
    cJSON *messages = cJSON_GetObjectItemCaseSensitive(req, "messages");
    if (!messages)
        return bad_param(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0)
        return bad_param(e, "messages", "'messages' must be a non-empty list");
    size_t i = 0;
    cJSON *msg = NULL;
    cJSON_ArrayForEach(msg, messages)
    {
        if (!cJSON_IsObject(msg))
            return bad_param(e, "messages", "messages[%zu] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsString(role))
            return bad_param(e, "messages", "messages[%zu].role must be a string", i);
        if (!flatten_content(msg, i, e))
            return false;
        i++;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return bad_param(e, "tools", "'tools' must be a list");
    const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(req, "chat_template_kwargs");
    if (kwargs && !cJSON_IsNull(kwargs) && !cJSON_IsObject(kwargs))
        return bad_param(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");

    cJSON *ctx = cJSON_IsObject(kwargs) ? cJSON_Duplicate(kwargs, 1) : cJSON_CreateObject();
    cJSON_AddItemToObject(ctx, "messages", cJSON_Duplicate(messages, 1));
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0) {
        cJSON_AddItemToObject(ctx, "tools", cJSON_Duplicate(tools, 1));
        rq->tools_json = cJSON_PrintUnformatted(tools);
    }
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", 1);
    char *ctx_json = cJSON_PrintUnformatted(ctx);
    cJSON_Delete(ctx);
    kt_template_render_options ro = KT_TEMPLATE_RENDER_OPTIONS_INIT;
    ro.flags = KT_TEMPLATE_RENDER_TOOL_ARGS_AS_OBJECTS;
    kt_buf prompt = KT_BUF_INIT;
    kt_status st = ctx_json ? kt_template_render(srv->tpl, ctx_json, &ro, &prompt) : KT_ERR_NOMEM;
    free(ctx_json);
    if (st < 0) {
        bad_param(e, "messages", "chat template: %s", kt_last_error());
        kt_buf_dispose(&prompt);
        return false;
    }
    /* a prompt that opens a think block: the output starts with reasoning */
    rq->parse_flags = srv->chat_flags;
    size_t n = prompt.size;
    while (n && (prompt.ptr[n - 1] == '\n' || prompt.ptr[n - 1] == ' '))
        n--;
    if (n >= 7 && !memcmp(prompt.ptr + n - 7, "<think>", 7))
        rq->parse_flags |= KT_CHAT_F_IN_REASONING;
    bool ok = encode(srv, prompt.ptr ? prompt.ptr : "", KT_ENCODE_PARSE_SPECIAL, rq->j,
                     "messages", e);
    kt_buf_dispose(&prompt);
    return ok;
}

static bool parse_completion(server *srv, cJSON *req, request *rq, api_error *e)
{
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    if (!prompt)
        return bad_param(e, "prompt", "'prompt' is required");
    if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1 &&
        cJSON_IsString(cJSON_GetArrayItem(prompt, 0)))
        prompt = cJSON_GetArrayItem(prompt, 0);
    if (cJSON_IsString(prompt))
        return encode(srv, prompt->valuestring, KT_ENCODE_PARSE_SPECIAL | KT_ENCODE_ADD_SPECIAL,
                      rq->j, "prompt", e);
    if (!cJSON_IsArray(prompt) || cJSON_GetArraySize(prompt) == 0)
        return bad_param(e, "prompt", "'prompt' must be a string, one string in a list, or a "
                         "list of token ids");
    size_t n = (size_t)cJSON_GetArraySize(prompt);
    job *j = rq->j;
    j->prompt = malloc(sizeof(int32_t) * n);
    if (!j->prompt)
        return fail(e, 500, "server_error", NULL, NULL, "out of memory");
    int32_t vocab = (int32_t)kt_tokenizer_vocab_size(srv->tok);
    const cJSON *id = NULL;
    cJSON_ArrayForEach(id, prompt)
    {
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= vocab ||
            id->valuedouble != (double)(int32_t)id->valuedouble)
            return bad_param(e, "prompt", "prompt[%zu] is not a token id below %d", j->n_prompt,
                             vocab);
        j->prompt[j->n_prompt++] = (int32_t)id->valuedouble;
    }
    return true;
}

/* ---- answers ----------------------------------------------------------- */

/* Bytes at the end of text[0..len) that may begin a stop string: not sent
 * while the generation runs. */
static size_t stop_holdback(const job *j, const char *text, size_t len)
{
    size_t best = 0;
    for (size_t k = 0; k < j->n_stop; k++) {
        size_t sl = strlen(j->stop[k]);
        for (size_t h = sl - 1; h > best; h--)
            if (h <= len && !memcmp(text + len - h, j->stop[k], h)) {
                best = h;
                break;
            }
    }
    return best;
}

static cJSON *usage_json(const job *j)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_prompt + j->n_generated));
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"),
                            "cached_tokens", (double)j->n_cached);
    return u;
}

static cJSON *response_head(const request *rq, const char *object)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", rq->id);
    cJSON_AddStringToObject(r, "object", object);
    cJSON_AddNumberToObject(r, "created", (double)rq->created);
    cJSON_AddStringToObject(r, "model", rq->model);
    return r;
}

/* The parsed output (kt_chat_parse's JSON) of text[0..len). */
static cJSON *parse_output(server *srv, const request *rq, const char *text, size_t len,
                           bool partial)
{
    kt_buf out = KT_BUF_INIT;
    uint32_t flags = rq->parse_flags | (partial ? KT_CHAT_F_PARTIAL : 0);
    cJSON *r = NULL;
    if (kt_chat_parse(text, len, srv->format, flags, rq->tools_json, &out) == KT_OK)
        r = cJSON_Parse(out.ptr);
    kt_buf_dispose(&out);
    return r;
}

/* Gives tool calls ids unique to this response (Kimi's own ids are kept). */
static void name_tool_calls(const request *rq, cJSON *calls)
{
    int i = 0;
    cJSON *call = NULL;
    cJSON_ArrayForEach(call, calls)
    {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
        if (cJSON_IsString(id) && !strncmp(id->valuestring, "functions.", 10))
            continue;
        char buf[96];
        snprintf(buf, sizeof buf, "call_%s_%d", rq->id + strcspn(rq->id, "-") + 1, i++);
        cJSON_ReplaceItemInObjectCaseSensitive(call, "id", cJSON_CreateString(buf));
    }
}

static cJSON *final_response(server *srv, request *rq)
{
    job *j = rq->j;
    if (!rq->chat) {
        cJSON *r = response_head(rq, "text_completion");
        cJSON *choice = cJSON_CreateObject();
        cJSON_AddNumberToObject(choice, "index", 0);
        cJSON_AddStringToObject(choice, "text", j->text ? j->text : "");
        cJSON_AddNullToObject(choice, "logprobs");
        cJSON_AddStringToObject(choice, "finish_reason", j->finish);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "choices"), choice);
        cJSON_AddItemToObject(r, "usage", usage_json(j));
        return r;
    }
    cJSON *parsed = parse_output(srv, rq, j->text ? j->text : "", j->text_len, false);
    if (!parsed)
        return NULL;
    cJSON *r = response_head(rq, "chat.completion");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(choice, "index", 0);
    cJSON *msg = cJSON_AddObjectToObject(choice, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON *content = cJSON_DetachItemFromObjectCaseSensitive(parsed, "content");
    cJSON_AddItemToObject(msg, "content", content ? content : cJSON_CreateNull());
    cJSON *reasoning = cJSON_DetachItemFromObjectCaseSensitive(parsed, "reasoning_content");
    if (reasoning)
        cJSON_AddItemToObject(msg, "reasoning_content", reasoning);
    cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(parsed, "tool_calls");
    if (calls) {
        name_tool_calls(rq, calls);
        cJSON_AddItemToObject(msg, "tool_calls", calls);
    }
    cJSON_AddNullToObject(choice, "logprobs");
    cJSON_AddStringToObject(choice, "finish_reason",
                            calls && !strcmp(j->finish, "stop") ? "tool_calls" : j->finish);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "choices"), choice);
    cJSON_AddItemToObject(r, "usage", usage_json(j));
    cJSON_Delete(parsed);
    return r;
}

/* ---- streaming ---------------------------------------------------------- */

typedef struct stream {
    server *srv;
    request rq;
    int phase;             /* 0: nothing sent, 1: streaming, 2: all queued */
    size_t sent_content, sent_reasoning, sent_text;
    char *out;             /* SSE bytes ready to go */
    size_t out_len, out_off, out_cap;
    size_t seen_len, seen_generated;
} stream;

static void out_append(stream *s, const char *p, size_t n)
{
    if (s->out_len + n + 1 > s->out_cap) {
        size_t cap = (s->out_cap ? s->out_cap * 2 : 4096) + n;
        char *tmp = realloc(s->out, cap);
        if (!tmp)
            return;
        s->out = tmp;
        s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, p, n);
    s->out_len += n;
}

static void out_event(stream *s, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!text)
        return;
    out_append(s, "data: ", 6);
    out_append(s, text, strlen(text));
    out_append(s, "\n\n", 2);
    cJSON_free(text);
}

/* A chunk with one choice holding `delta` (chat) or `text` (completion). */
static cJSON *chunk(stream *s, cJSON *delta, const char *text, const char *finish)
{
    cJSON *r = response_head(&s->rq, s->rq.chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(choice, "index", 0);
    if (s->rq.chat)
        cJSON_AddItemToObject(choice, "delta", delta ? delta : cJSON_CreateObject());
    else
        cJSON_AddStringToObject(choice, "text", text ? text : "");
    cJSON_AddNullToObject(choice, "logprobs");
    if (finish)
        cJSON_AddStringToObject(choice, "finish_reason", finish);
    else
        cJSON_AddNullToObject(choice, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "choices"), choice);
    return r;
}

static void delta_string(stream *s, const char *key, const char *now, size_t *sent)
{
    size_t n = now ? strlen(now) : 0;
    if (n <= *sent)
        return;
    cJSON *delta = cJSON_CreateObject();
    char *piece = strndup(now + *sent, n - *sent);
    cJSON_AddStringToObject(delta, key, piece ? piece : "");
    free(piece);
    *sent = n;
    out_event(s, chunk(s, delta, NULL, NULL));
}

/* Turns the job's state into SSE events (called with the job locked). */
static void stream_produce(stream *s, job *j, bool done)
{
    const char *text = j->text ? j->text : "";
    size_t len = j->text_len;
    if (!done)
        len -= stop_holdback(j, text, len);
    if (s->phase == 0 && s->rq.chat) {
        cJSON *delta = cJSON_CreateObject();
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        out_event(s, chunk(s, delta, NULL, NULL));
    }
    s->phase = 1;
    if (done && j->error) {
        api_error e;
        fail(&e, 500, "server_error", NULL, NULL, "generation failed: %s", j->error);
        char *ej = error_json(&e);
        if (ej) {
            out_append(s, "data: ", 6);
            out_append(s, ej, strlen(ej));
            out_append(s, "\n\n", 2);
            free(ej);
        }
    } else if (s->rq.chat) {
        cJSON *parsed = parse_output(s->srv, &s->rq, text, len, !done);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(parsed, "content");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(parsed, "reasoning_content");
        /* the parse of a longer text only extends what was sent */
        delta_string(s, "reasoning_content", cJSON_IsString(r) ? r->valuestring : NULL,
                     &s->sent_reasoning);
        delta_string(s, "content", cJSON_IsString(c) ? c->valuestring : NULL, &s->sent_content);
        if (done) {
            cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(parsed, "tool_calls");
            bool had_calls = calls != NULL;
            if (calls) {
                name_tool_calls(&s->rq, calls);
                int i = 0;
                cJSON *call = NULL;
                cJSON_ArrayForEach(call, calls)
                    cJSON_AddNumberToObject(call, "index", i++);
                cJSON *delta = cJSON_CreateObject();
                cJSON_AddItemToObject(delta, "tool_calls", calls);
                out_event(s, chunk(s, delta, NULL, NULL));
            }
            const char *finish =
                had_calls && !strcmp(j->finish, "stop") ? "tool_calls" : j->finish;
            out_event(s, chunk(s, cJSON_CreateObject(), NULL, finish));
        }
        cJSON_Delete(parsed);
    } else {
        if (len > s->sent_text) {
            char *piece = strndup(text + s->sent_text, len - s->sent_text);
            out_event(s, chunk(s, NULL, piece ? piece : "", NULL));
            free(piece);
            s->sent_text = len;
        }
        if (done)
            out_event(s, chunk(s, NULL, "", j->finish));
    }
    if (done) {
        if (s->rq.include_usage && !j->error) {
            cJSON *r = response_head(&s->rq, s->rq.chat ? "chat.completion.chunk"
                                                         : "text_completion");
            cJSON_AddArrayToObject(r, "choices");
            cJSON_AddItemToObject(r, "usage", usage_json(j));
            out_event(s, r);
        }
        out_append(s, "data: [DONE]\n\n", 14);
        s->phase = 2;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *s = cls;
    job *j = s->rq.j;
    while (s->out_off == s->out_len) {
        s->out_off = s->out_len = 0;
        if (s->phase == 2)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->lock);
        while (j->state != JOB_DONE && j->text_len == s->seen_len &&
               j->n_generated == s->seen_generated && s->phase != 0)
            pthread_cond_wait(&j->changed, &j->lock);
        s->seen_len = j->text_len;
        s->seen_generated = j->n_generated;
        stream_produce(s, j, j->state == JOB_DONE);
        pthread_mutex_unlock(&j->lock);
    }
    size_t n = s->out_len - s->out_off;
    if (n > max)
        n = max;
    memcpy(buf, s->out + s->out_off, n);
    s->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream *s = cls;
    atomic_store(&s->rq.j->cancelled, true); /* no-op when it finished */
    job_release(s->rq.j);
    free(s->rq.tools_json);
    free(s->out);
    free(s);
}

/* ---- connections --------------------------------------------------------- */

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_big;
} conn;

/* True when the peer closed its end (for non-streaming waits). */
static bool peer_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR))
        return true;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static bool authorized(server *srv, struct MHD_Connection *c)
{
    if (!srv->api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    /* compare every byte: no early exit that times the key */
    size_t a = strlen(h), b = strlen(srv->api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < a && i < b; i++)
        diff |= (unsigned)(h[i] ^ srv->api_key[i]);
    return diff == 0;
}

static enum MHD_Result handle_generate(server *srv, struct MHD_Connection *c, conn *cn,
                                       bool chat)
{
    api_error e = {0};
    request rq = {.chat = chat, .model = srv->cfg.model_name};
    rq.created = (int64_t)time(NULL);
    cJSON *req = cJSON_ParseWithLength(cn->body ? cn->body : "", cn->len);
    if (!req) {
        fail(&e, 400, "invalid_request_error", NULL, NULL,
             "the body is not valid JSON (near byte %zu)",
             cn->body && cJSON_GetErrorPtr() ? (size_t)(cJSON_GetErrorPtr() - cn->body) : 0);
        return send_error(c, &e);
    }
    if (!cJSON_IsObject(req)) {
        cJSON_Delete(req);
        fail(&e, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object");
        return send_error(c, &e);
    }
    rq.j = job_new();
    if (!rq.j) {
        cJSON_Delete(req);
        fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        return send_error(c, &e);
    }
    rq.j->serial = atomic_fetch_add(&srv->serial, 1);
    snprintf(rq.id, sizeof rq.id, "%s-%016" PRIx64, chat ? "chatcmpl" : "cmpl",
             (uint64_t)(rq.j->serial * 0x9E3779B97F4A7C15ull ^ (uint64_t)rq.created));
    bool ok = chat ? parse_chat(srv, req, &rq, &e) : parse_completion(srv, req, &rq, &e);
    ok = ok && read_sampling(srv, req, &rq, &e);
    cJSON_Delete(req);
    if (ok && !sched_submit(srv->sched, rq.j))
        ok = fail(&e, 503, "server_error", NULL, "server_busy",
                  "too many queued requests; retry later");
    if (!ok) {
        job_release(rq.j);
        free(rq.tools_json);
        return send_error(c, &e);
    }
    if (srv->verbose)
        fprintf(stderr, "kt-serve: %s %zu prompt tokens, max %zu, %s\n", rq.id,
                rq.j->n_prompt, rq.j->max_tokens, rq.stream ? "stream" : "whole");
    if (rq.stream) {
        stream *s = calloc(1, sizeof *s);
        if (!s) {
            atomic_store(&rq.j->cancelled, true);
            job_release(rq.j);
            free(rq.tools_json);
            return MHD_NO;
        }
        s->srv = srv;
        s->rq = rq;
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s,
                                              stream_free);
        if (!r) {
            stream_free(s);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    /* whole answer: wait, watching for the client leaving */
    job *j = rq.j;
    pthread_mutex_lock(&j->lock);
    while (j->state != JOB_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->changed, &j->lock, &ts);
        if (j->state != JOB_DONE && peer_gone(c))
            atomic_store(&j->cancelled, true);
    }
    pthread_mutex_unlock(&j->lock);
    enum MHD_Result ret;
    if (j->error) {
        fail(&e, 500, "server_error", NULL, NULL, "generation failed: %s", j->error);
        ret = send_error(c, &e);
    } else if (atomic_load(&j->cancelled)) {
        ret = MHD_NO;
    } else {
        cJSON *r = final_response(srv, &rq);
        ret = r ? send_json(c, 200, r) : MHD_NO;
    }
    job_release(j);
    free(rq.tools_json);
    return ret;
}

static enum MHD_Result handle_models(server *srv, struct MHD_Connection *c)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", srv->cfg.model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)srv->created);
    cJSON_AddStringToObject(m, "owned_by", "libkt");
    cJSON_AddNumberToObject(m, "max_model_len", srv->cfg.n_ctx);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "data"), m);
    return send_json(c, 200, root);
}

static enum MHD_Result handle_health(server *srv, struct MHD_Connection *c)
{
    int running = 0, queued = 0;
    uint64_t done = 0, cancelled = 0;
    sched_counts(srv->sched, &running, &queued, &done, &cancelled);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", "ok");
    cJSON_AddStringToObject(root, "model", srv->cfg.model_name);
    cJSON_AddNumberToObject(root, "running", running);
    cJSON_AddNumberToObject(root, "queued", queued);
    cJSON_AddNumberToObject(root, "finished", (double)done);
    cJSON_AddNumberToObject(root, "cancelled", (double)cancelled);
    return send_json(c, 200, root);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *srv = cls;
    conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn)
            return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_big) {
            if (cn->len + *upload_size > srv->max_body) {
                cn->too_big = true;
            } else {
                if (cn->len + *upload_size + 1 > cn->cap) {
                    size_t cap = (cn->cap ? cn->cap * 2 : 65536) + *upload_size;
                    char *tmp = realloc(cn->body, cap);
                    if (!tmp)
                        return MHD_NO;
                    cn->body = tmp;
                    cn->cap = cap;
                }
                memcpy(cn->body + cn->len, upload_data, *upload_size);
                cn->len += *upload_size;
                cn->body[cn->len] = '\0';
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    api_error e;
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) {
        if (!get)
            goto bad_method;
        return handle_health(srv, c);
    }
    if (!authorized(srv, c)) {
        fail(&e, 401, "authentication_error", NULL, "invalid_api_key",
             "missing or wrong API key (send 'Authorization: Bearer KEY')");
        return send_error(c, &e);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get)
            goto bad_method;
        return handle_models(srv, c);
    }
    bool chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions")) {
        if (!post)
            goto bad_method;
        if (cn->too_big) {
            fail(&e, 413, "invalid_request_error", NULL, "request_too_large",
                 "the request body is larger than %zu bytes", srv->max_body);
            return send_error(c, &e);
        }
        return handle_generate(srv, c, cn, chat);
    }
    fail(&e, 404, "invalid_request_error", NULL, "not_found", "no such endpoint: %s %s", method,
         url);
    return send_error(c, &e);
bad_method:
    fail(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
         "%s is not allowed on %s", method, url);
    return send_error(c, &e);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    conn *cn = *con_cls;
    if (cn) {
        free(cn->body);
        free(cn);
        *con_cls = NULL;
    }
}

int http_start(server *srv, const char *host, int port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else if (!strcmp(host, "localhost")) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
        fprintf(stderr, "kt-serve: --host: '%s' is not an IPv4 or IPv6 address\n", host);
        return -1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, &on_request, srv, MHD_OPTION_SOCK_ADDR, &ss,
        MHD_OPTION_NOTIFY_COMPLETED, &on_completed, srv, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)1024, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)3600, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "kt-serve: cannot listen on %s:%d: %s\n", host, port,
                errno ? strerror(errno) : "libmicrohttpd failed");
        return -1;
    }
    srv->daemon = d;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : port;
}

void http_quiesce(server *srv)
{
    if (srv->daemon)
        MHD_quiesce_daemon(srv->daemon);
}

void http_stop(server *srv)
{
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
}
