/* kt-chat's remote backend: a small HTTP/1.1 client over sockets for any
 * OpenAI-compatible server (chunked or sized bodies, server-sent events). */
#define _GNU_SOURCE /* strcasestr */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "chat.h"

typedef struct remote {
    backend base;
    char host[256];
    int port;
    char *api_key;
    char *model;
} remote;

/* One response being read: headers parsed, body de-chunked on the fly. */
typedef struct http_conn {
    int fd;
    char buf[16384];
    size_t off, len;       /* unread raw bytes in buf */
    int status;
    bool chunked;
    long long remaining;   /* sized body or current chunk; -1: until close */
    bool eof;
} http_conn;

static int fill(http_conn *h)
{
    if (h->off == h->len)
        h->off = h->len = 0;
    if (h->len == sizeof h->buf) {
        memmove(h->buf, h->buf + h->off, h->len - h->off);
        h->len -= h->off;
        h->off = 0;
    }
    for (;;) {
        ssize_t n = recv(h->fd, h->buf + h->len, sizeof h->buf - h->len, 0);
        if (n > 0) {
            h->len += (size_t)n;
            return 1;
        }
        if (n == 0)
            return 0;
        if (errno == EINTR && !chat_interrupted)
            continue;
        return -1;
    }
}

/* Reads one CRLF-terminated line of the raw stream into out (without CRLF). */
static int raw_line(http_conn *h, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        while (h->off < h->len) {
            char ch = h->buf[h->off++];
            if (ch == '\n') {
                if (n && out[n - 1] == '\r')
                    n--;
                out[n] = '\0';
                return 1;
            }
            if (n + 1 < cap)
                out[n++] = ch;
        }
        int r = fill(h);
        if (r <= 0)
            return r;
    }
}

/* Body bytes, de-chunked; 0 at the end of the body. */
static ssize_t body_read(http_conn *h, char *out, size_t cap)
{
    if (h->eof)
        return 0;
    if (h->chunked && h->remaining == 0) {
        char line[128];
        if (raw_line(h, line, sizeof line) <= 0)
            return -1;
        if (!line[0] && raw_line(h, line, sizeof line) <= 0) /* CRLF after a chunk */
            return -1;
        h->remaining = strtoll(line, NULL, 16);
        if (h->remaining == 0) {
            h->eof = true;
            return 0;
        }
    }
    if (!h->chunked && h->remaining == 0) {
        h->eof = true;
        return 0;
    }
    if (h->off == h->len) {
        int r = fill(h);
        if (r < 0)
            return -1;
        if (r == 0) {
            h->eof = true;
            return 0;
        }
    }
    size_t n = h->len - h->off;
    if (n > cap)
        n = cap;
    if (h->remaining >= 0 && (long long)n > h->remaining)
        n = (size_t)h->remaining;
    memcpy(out, h->buf + h->off, n);
    h->off += n;
    if (h->remaining > 0)
        h->remaining -= (long long)n;
    return (ssize_t)n;
}

static bool http_request(remote *r, const char *method, const char *path, const char *body,
                         http_conn *h)
{
    memset(h, 0, sizeof *h);
    h->fd = -1;
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(r->host, port, &hints, &res);
    if (gai != 0) {
        fprintf(stderr, "kt-chat: %s: %s\n", r->host, gai_strerror(gai));
        return false;
    }
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        h->fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (h->fd < 0)
            continue;
        if (connect(h->fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        close(h->fd);
        h->fd = -1;
    }
    freeaddrinfo(res);
    if (h->fd < 0) {
        fprintf(stderr, "kt-chat: cannot connect to %s:%d: %s\n", r->host, r->port,
                strerror(errno));
        return false;
    }
    size_t blen = body ? strlen(body) : 0;
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: kt-chat/%s\r\n"
                      "Accept: application/json, text/event-stream\r\nConnection: close\r\n"
                      "%s%s%s"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      method, path, r->host, r->port, kt_version(),
                      r->api_key ? "Authorization: Bearer " : "", r->api_key ? r->api_key : "",
                      r->api_key ? "\r\n" : "", blen);
    bool ok = hn > 0 && (size_t)hn < sizeof head &&
              send(h->fd, head, (size_t)hn, MSG_NOSIGNAL) == hn;
    for (size_t at = 0; ok && at < blen;) {
        ssize_t n = send(h->fd, body + at, blen - at, MSG_NOSIGNAL);
        if (n <= 0)
            ok = false;
        else
            at += (size_t)n;
    }
    char line[2048];
    ok = ok && raw_line(h, line, sizeof line) > 0 && sscanf(line, "HTTP/%*s %d", &h->status) == 1;
    h->remaining = -1;
    while (ok) {
        if (raw_line(h, line, sizeof line) <= 0) {
            ok = false;
            break;
        }
        if (!line[0])
            break;
        if (!strncasecmp(line, "Transfer-Encoding:", 18) && strcasestr(line, "chunked")) {
            h->chunked = true;
            h->remaining = 0;
        } else if (!strncasecmp(line, "Content-Length:", 15) && !h->chunked) {
            h->remaining = strtoll(line + 15, NULL, 10);
        }
    }
    if (!ok) {
        if (!chat_interrupted)
            fprintf(stderr, "kt-chat: %s:%d: no HTTP response\n", r->host, r->port);
        close(h->fd);
        h->fd = -1;
    }
    return ok;
}

static char *read_body(http_conn *h)
{
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    for (;;) {
        if (!out)
            return NULL;
        if (n + 2048 > cap) {
            char *t = realloc(out, cap *= 2);
            if (!t) {
                free(out);
                return NULL;
            }
            out = t;
        }
        ssize_t got = body_read(h, out + n, cap - n - 1);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    out[n] = '\0';
    return out;
}

static void print_http_error(int status, const char *body)
{
    cJSON *j = cJSON_Parse(body);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
    fprintf(stderr, "kt-chat: server answered %d: %s\n", status,
            cJSON_IsString(msg) ? msg->valuestring : body);
    cJSON_Delete(j);
}

/* Appends s to a malloc'ed string. */
static void str_add(char **dst, size_t *len, const char *s, size_t n)
{
    char *t = realloc(*dst, *len + n + 1);
    if (!t)
        return;
    memcpy(t + *len, s, n);
    *len += n;
    t[*len] = '\0';
    *dst = t;
}

typedef struct answer {
    char *content, *reasoning;
    size_t n_content, n_reasoning;
    int64_t n_deltas;
    bool first_seen;
} answer;

static void take_message(answer *a, const cJSON *m, gen_stats *st, double t0, delta_fn fn,
                         void *user)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    if (!cJSON_IsString(r))
        r = cJSON_GetObjectItemCaseSensitive(m, "reasoning"); /* vLLM's name */
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    bool any = (cJSON_IsString(r) && *r->valuestring) || (cJSON_IsString(c) && *c->valuestring);
    if (any && !a->first_seen) {
        a->first_seen = true;
        st->ttft = chat_now() - t0;
    }
    if (any)
        a->n_deltas++;
    if (cJSON_IsString(r) && *r->valuestring) {
        str_add(&a->reasoning, &a->n_reasoning, r->valuestring, strlen(r->valuestring));
        fn(user, true, r->valuestring, strlen(r->valuestring));
    }
    if (cJSON_IsString(c) && *c->valuestring) {
        str_add(&a->content, &a->n_content, c->valuestring, strlen(c->valuestring));
        fn(user, false, c->valuestring, strlen(c->valuestring));
    }
    if (calls) {
        char *cs = cJSON_Print(calls);
        if (cs) {
            fn(user, false, "\n[tool calls] ", 14);
            fn(user, false, cs, strlen(cs));
        }
        cJSON_free(cs);
    }
}

static void take_usage(const cJSON *root, gen_stats *st)
{
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    if (cJSON_IsNumber(p))
        st->n_prompt = (int64_t)p->valuedouble;
    if (cJSON_IsNumber(c))
        st->n_gen = (int64_t)c->valuedouble;
}

static void take_finish(const cJSON *choice, gen_stats *st)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    if (cJSON_IsString(f))
        snprintf(st->finish, sizeof st->finish, "%s", f->valuestring);
}

static gen_result remote_generate(backend *b, const convo *c, const gen_params *p,
                                  delta_fn on_delta, void *user, char **content,
                                  char **reasoning, gen_stats *st)
{
    remote *r = (remote *)b;
    double t0 = chat_now();
    memset(st, 0, sizeof *st);
    st->n_prompt = st->n_gen = -1;
    *content = *reasoning = NULL;
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", r->model);
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    for (size_t i = 0; i < c->n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", c->m[i].role);
        cJSON_AddStringToObject(m, "content", c->m[i].content ? c->m[i].content : "");
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON_AddNumberToObject(req, "temperature", p->temperature);
    if (p->top_p < 1.0)
        cJSON_AddNumberToObject(req, "top_p", p->top_p);
    if (p->max_tokens > 0)
        cJSON_AddNumberToObject(req, "max_tokens", (double)p->max_tokens);
    if (p->seed >= 0)
        cJSON_AddNumberToObject(req, "seed", (double)p->seed);
    cJSON_AddBoolToObject(req, "stream", p->stream);
    if (p->stream)
        cJSON_AddTrueToObject(cJSON_AddObjectToObject(req, "stream_options"), "include_usage");
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    http_conn h;
    bool ok = body && http_request(r, "POST", "/v1/chat/completions", body, &h);
    free(body);
    if (!ok)
        return chat_interrupted ? GEN_INTERRUPTED : GEN_ERROR;
    answer a = {0};
    gen_result res = GEN_OK;
    if (h.status != 200) {
        char *eb = read_body(&h);
        print_http_error(h.status, eb ? eb : "");
        free(eb);
        res = GEN_ERROR;
    } else if (!p->stream) {
        char *rb = read_body(&h);
        cJSON *root = rb ? cJSON_Parse(rb) : NULL;
        const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0);
        if (!choice) {
            fprintf(stderr, "kt-chat: unexpected answer: %.200s\n", rb ? rb : "");
            res = chat_interrupted ? GEN_INTERRUPTED : GEN_ERROR;
        } else {
            take_message(&a, cJSON_GetObjectItem(choice, "message"), st, t0, on_delta, user);
            take_finish(choice, st);
            take_usage(root, st);
        }
        cJSON_Delete(root);
        free(rb);
    } else {
        /* server-sent events: "data: {...}" lines, events end at a blank line */
        char *line = NULL;
        size_t n_line = 0;
        char chunk[4096];
        bool done = false;
        while (!done) {
            ssize_t got = body_read(&h, chunk, sizeof chunk);
            if (got <= 0) {
                if (chat_interrupted)
                    res = GEN_INTERRUPTED;
                break;
            }
            for (ssize_t i = 0; i < got && !done; i++) {
                if (chunk[i] != '\n') {
                    str_add(&line, &n_line, chunk + i, 1);
                    continue;
                }
                if (n_line && line[n_line - 1] == '\r')
                    line[--n_line] = '\0';
                if (n_line > 5 && !strncmp(line, "data:", 5)) {
                    const char *data = line + 5 + (line[5] == ' ');
                    if (!strcmp(data, "[DONE]")) {
                        done = true;
                    } else {
                        cJSON *ev = cJSON_Parse(data);
                        const cJSON *err = cJSON_GetObjectItemCaseSensitive(ev, "error");
                        if (err) {
                            char *es = cJSON_PrintUnformatted(ev);
                            print_http_error(200, es ? es : "");
                            cJSON_free(es);
                            res = GEN_ERROR;
                        }
                        const cJSON *choice =
                            cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0);
                        if (choice) {
                            take_message(&a, cJSON_GetObjectItem(choice, "delta"), st, t0,
                                         on_delta, user);
                            take_finish(choice, st);
                        }
                        take_usage(ev, st);
                        cJSON_Delete(ev);
                    }
                }
                n_line = 0;
                if (line)
                    line[0] = '\0';
            }
            if (chat_interrupted) {
                res = GEN_INTERRUPTED;
                break;
            }
        }
        free(line);
    }
    close(h.fd); /* an interrupted stream: the server sees the disconnect and stops */
    if (st->n_gen < 0)
        st->n_gen = a.n_deltas;
    if (res == GEN_INTERRUPTED)
        snprintf(st->finish, sizeof st->finish, "interrupted");
    st->total = chat_now() - t0;
    *content = a.content;
    *reasoning = a.reasoning;
    return res;
}

static void remote_close(backend *b)
{
    remote *r = (remote *)b;
    free(r->api_key);
    free(r->model);
    free(r);
}

backend *remote_open(const char *host, int port, const char *api_key, const char *model)
{
    remote *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    snprintf(r->host, sizeof r->host, "%s", host);
    r->port = port;
    r->api_key = api_key ? strdup(api_key) : NULL;
    r->base.generate = remote_generate;
    r->base.close = remote_close;
    /* the model list tells whether the server is there, and its model's id */
    http_conn h;
    if (!http_request(r, "GET", "/v1/models", NULL, &h)) {
        remote_close(&r->base);
        return NULL;
    }
    char *body = read_body(&h);
    close(h.fd);
    if (h.status != 200) {
        print_http_error(h.status, body ? body : "");
        free(body);
        remote_close(&r->base);
        return NULL;
    }
    cJSON *root = body ? cJSON_Parse(body) : NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItem(root, "data"), 0), "id");
    r->model = strdup(model ? model : cJSON_IsString(id) ? id->valuestring : "default");
    cJSON_Delete(root);
    free(body);
    snprintf(r->base.info, sizeof r->base.info, "model: %s\nserver: http://%s:%d (%s)",
             r->model, r->host, r->port, api_key ? "with an API key" : "no API key");
    return &r->base;
}
