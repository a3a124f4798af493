/* kt-chat's in-process backend: the model's chat template renders the
 * conversation, the KV cache keeps the longest prefix shared with the
 * previous turn, and kt_chat_parse splits reasoning, answer and tool calls
 * as the tokens come. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "chat.h"
#include "grow.h"
#include "stop_ids.h"

typedef struct local {
    backend base;
    run_engine e;
    kt_tokenizer *tok;
    kt_template *tpl;
    kt_chat_format format;
    uint32_t chat_flags;
    int32_t *cached;     /* tokens in the KV cache */
    size_t n_cached, cap_cached;
    float *logits;
    int32_t n_vocab;
    stop_ids stops;      /* generation_config.json / tokenizer EOS ids */
} local;

/* The conversation as the template's messages. */
static char *messages_json(const convo *c)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < c->n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", c->m[i].role);
        cJSON_AddStringToObject(m, "content", c->m[i].content ? c->m[i].content : "");
        if (c->m[i].reasoning)
            cJSON_AddStringToObject(m, "reasoning_content", c->m[i].reasoning);
        cJSON_AddItemToArray(arr, m);
    }
    char *s = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    return s;
}

static bool cache_push(local *l, int32_t tok)
{
    int32_t *t = tool_grow(l->cached, l->n_cached, &l->cap_cached, sizeof *t, 1024);
    if (!t)
        return false;
    l->cached = t;
    l->cached[l->n_cached++] = tok;
    return true;
}

/* Sends the part of the parsed output not sent yet. */
static void emit_deltas(const cJSON *parsed, size_t *sent_c, size_t *sent_r, delta_fn fn,
                        void *user)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(parsed, "reasoning_content");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(parsed, "content");
    if (cJSON_IsString(r) && strlen(r->valuestring) > *sent_r) {
        size_t n = strlen(r->valuestring);
        fn(user, true, r->valuestring + *sent_r, n - *sent_r);
        *sent_r = n;
    }
    if (cJSON_IsString(c) && strlen(c->valuestring) > *sent_c) {
        size_t n = strlen(c->valuestring);
        fn(user, false, c->valuestring + *sent_c, n - *sent_c);
        *sent_c = n;
    }
}

static cJSON *parse_text(local *l, const kt_buf *text, uint32_t flags)
{
    kt_buf out = KT_BUF_INIT;
    cJSON *j = NULL;
    if (kt_chat_parse(text->ptr ? text->ptr : "", text->size, l->format, flags, NULL, &out) ==
        KT_OK)
        j = cJSON_Parse(out.ptr);
    kt_buf_dispose(&out);
    return j;
}

static char *dup_field(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

static gen_result local_generate(backend *b, const convo *c, const gen_params *p,
                                 delta_fn on_delta, void *user, char **content, char **reasoning,
                                 gen_stats *st)
{
    local *l = (local *)b;
    double t0 = chat_now();
    memset(st, 0, sizeof *st);
    *content = *reasoning = NULL;
    char *msgs = messages_json(c);
    kt_buf prompt = KT_BUF_INIT;
    if (!msgs || kt_template_render_chat(l->tpl, msgs, NULL, 1, NULL, NULL, &prompt) < 0) {
        fprintf(stderr, "kt-chat: chat template: %s\n", kt_last_error());
        free(msgs);
        kt_buf_dispose(&prompt);
        return GEN_ERROR;
    }
    free(msgs);
    uint32_t flags = l->chat_flags;
    size_t pl = prompt.size;
    while (pl && (prompt.ptr[pl - 1] == '\n' || prompt.ptr[pl - 1] == ' '))
        pl--;
    if (pl >= 7 && !memcmp(prompt.ptr + pl - 7, "<think>", 7))
        flags |= KT_CHAT_F_IN_REASONING;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    bool ok = run_encode(&l->e, prompt.ptr, prompt.size, &ids, &n_ids, "kt-chat");
    kt_buf_dispose(&prompt);
    if (!ok)
        return GEN_ERROR;
    int32_t n_ctx = kt_context_n_ctx(l->e.ctx);
    if (n_ids == 0) {
        fprintf(stderr, "kt-chat: the chat template rendered an empty prompt\n");
        free(ids);
        return GEN_ERROR;
    }
    if (n_ids + 1 >= (size_t)n_ctx) {
        fprintf(stderr, "kt-chat: the conversation (%zu tokens) fills the context of %d: "
                "/clear it or raise --ctx-size\n", n_ids, n_ctx);
        free(ids);
        return GEN_ERROR;
    }
    /* reuse the cached prefix; at least the last prompt token is evaluated */
    size_t keep = 0;
    while (keep < l->n_cached && keep < n_ids && l->cached[keep] == ids[keep])
        keep++;
    if (keep == n_ids)
        keep--;
    kt_context_truncate(l->e.ctx, (int32_t)keep);
    l->n_cached = keep;
    st->n_prompt = (int64_t)n_ids;

    kt_sampler_options so = KT_SAMPLER_OPTIONS_INIT;
    so.temperature = (float)p->temperature;
    so.top_p = (float)p->top_p;
    so.seed = p->seed >= 0 ? (uint64_t)p->seed : (uint64_t)time(NULL) ^ (uint64_t)clock();
    kt_sampler *sampler = NULL;
    kt_detokenizer *detok = NULL;
    kt_buf text = KT_BUF_INIT, piece = KT_BUF_INIT;
    gen_result res = GEN_ERROR;
    size_t sent_c = 0, sent_r = 0;
    if (kt_sampler_create(&sampler, l->n_vocab, &so) < 0 ||
        kt_detokenizer_create(&detok, l->tok, 0) < 0) {
        fprintf(stderr, "kt-chat: %s\n", kt_last_error());
        goto done;
    }
    for (size_t i = 0; i < n_ids; i++)
        kt_sampler_accept(sampler, ids[i]);
    /* prefill in pieces so that Ctrl-C is noticed during a long prompt */
    for (size_t at = keep; at < n_ids;) {
        size_t n = n_ids - at > 256 ? 256 : n_ids - at;
        if (kt_context_eval(l->e.ctx, ids + at, n, at + n == n_ids ? l->logits : NULL, 0) < 0) {
            fprintf(stderr, "kt-chat: prompt: %s\n", kt_last_error());
            kt_context_truncate(l->e.ctx, (int32_t)l->n_cached);
            goto done;
        }
        for (size_t i = 0; i < n; i++)
            cache_push(l, ids[at + i]);
        at += n;
        if (chat_interrupted) {
            res = GEN_INTERRUPTED;
            goto done;
        }
    }
    int64_t limit = p->max_tokens > 0 ? p->max_tokens : INT32_MAX;
    snprintf(st->finish, sizeof st->finish, "length");
    for (;;) {
        if (chat_interrupted) {
            snprintf(st->finish, sizeof st->finish, "interrupted");
            break;
        }
        int32_t tok;
        if (kt_sampler_sample(sampler, l->logits, &tok) < 0) {
            fprintf(stderr, "kt-chat: sampling: %s\n", kt_last_error());
            goto done;
        }
        kt_sampler_accept(sampler, tok);
        if (st->n_gen++ == 0)
            st->ttft = chat_now() - t0;
        if (kt_context_is_eos(l->e.ctx, tok) || stop_ids_has(&l->stops, tok)) {
            snprintf(st->finish, sizeof st->finish, "stop");
            break;
        }
        piece.size = 0;
        kt_detokenizer_feed(detok, tok, &piece);
        if (piece.size) {
            size_t old = text.size;
            char *grown = realloc(text.ptr, old + piece.size + 1);
            if (!grown)
                goto done;
            memcpy(grown + old, piece.ptr, piece.size);
            grown[old + piece.size] = '\0';
            text.ptr = grown;
            text.size = old + piece.size;
            if (p->stream) {
                cJSON *parsed = parse_text(l, &text, flags | KT_CHAT_F_PARTIAL);
                if (parsed)
                    emit_deltas(parsed, &sent_c, &sent_r, on_delta, user);
                cJSON_Delete(parsed);
            }
        }
        if (st->n_gen >= limit || kt_context_n_past(l->e.ctx) + 1 >= n_ctx)
            break;
        if (kt_context_eval(l->e.ctx, &tok, 1, l->logits, 0) < 0) {
            fprintf(stderr, "kt-chat: decode: %s\n", kt_last_error());
            goto done;
        }
        cache_push(l, tok);
    }
    piece.size = 0;
    kt_detokenizer_flush(detok, &piece);
    if (piece.size) {
        char *grown = realloc(text.ptr, text.size + piece.size + 1);
        if (grown) {
            memcpy(grown + text.size, piece.ptr, piece.size);
            text.ptr = grown;
            text.size += piece.size;
            grown[text.size] = '\0';
        }
    }
    {
        cJSON *parsed = parse_text(l, &text, flags);
        if (parsed) {
            /* the rest of a stream, or the whole answer without streaming */
            emit_deltas(parsed, &sent_c, &sent_r, on_delta, user);
            *content = dup_field(parsed, "content");
            *reasoning = dup_field(parsed, "reasoning_content");
            const cJSON *calls = cJSON_GetObjectItemCaseSensitive(parsed, "tool_calls");
            if (calls) {
                char *cs = cJSON_Print(calls);
                if (cs) {
                    on_delta(user, false, "\n[tool calls] ", 14);
                    on_delta(user, false, cs, strlen(cs));
                }
                cJSON_free(cs);
            }
        }
        cJSON_Delete(parsed);
    }
    res = chat_interrupted ? GEN_INTERRUPTED : GEN_OK;
done:
    st->total = chat_now() - t0;
    /* text.ptr came from realloc here (never from the library) */
    free(text.ptr);
    kt_buf_dispose(&piece);
    kt_detokenizer_free(detok);
    kt_sampler_free(sampler);
    free(ids);
    return res;
}

static void local_close(backend *b)
{
    local *l = (local *)b;
    kt_template_free(l->tpl);
    run_engine_close(&l->e);
    free(l->cached);
    free(l->logits);
    free(l);
}

backend *local_open(const run_engine_opts *eo)
{
    local *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    if (!run_engine_open(&l->e, eo, "kt-chat")) {
        free(l);
        return NULL;
    }
    l->tok = run_engine_tokenizer(&l->e, "kt-chat");
    if (!l->tok) {
        local_close(&l->base);
        return NULL;
    }
    if (kt_template_create_from_tokenizer(&l->tpl, l->tok, NULL, NULL) < 0) {
        fprintf(stderr, "kt-chat: chat template of %s: %s\n", l->e.path, kt_last_error());
        local_close(&l->base);
        return NULL;
    }
    l->format = kt_chat_format_detect(kt_tokenizer_chat_template(l->tok, NULL), &l->chat_flags);
    l->n_vocab = kt_context_n_vocab(l->e.ctx);
    stop_ids_load(&l->stops, l->e.path, l->tok);
    l->logits = malloc(sizeof(float) * (size_t)l->n_vocab);
    if (!l->logits) {
        local_close(&l->base);
        return NULL;
    }
    l->base.generate = local_generate;
    l->base.close = local_close;
    snprintf(l->base.info, sizeof l->base.info,
             "model: %s (in-process, libkt %s)\ncontext: %d tokens, tool calls: %s%s",
             l->e.path, kt_version(), kt_context_n_ctx(l->e.ctx),
             kt_chat_format_name(l->format),
             (l->chat_flags & KT_CHAT_F_REASONING) ? ", reasoning" : "");
    return &l->base;
}
