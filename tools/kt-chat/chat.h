/* kt-chat: an interactive chat, in-process (local.c) or against any
 * OpenAI-compatible server (remote.c). Public libkt API only. */
#ifndef KT_CHAT_TOOL_H
#define KT_CHAT_TOOL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kt/kt.h>

#include "run_engine.h"

/* Set by SIGINT: the running generation stops, the chat goes on. */
extern volatile sig_atomic_t chat_interrupted;

typedef struct chat_msg {
    char *role;
    char *content;
    char *reasoning; /* NULL: none */
} chat_msg;

typedef struct convo {
    chat_msg *m;
    size_t n, cap;
} convo;

bool convo_add(convo *c, const char *role, const char *content, const char *reasoning);
void convo_pop(convo *c);
void convo_free(convo *c);

typedef struct gen_params {
    double temperature;
    double top_p;
    int64_t max_tokens;
    int64_t seed;      /* < 0: random */
    bool stream;
} gen_params;

typedef struct gen_stats {
    double ttft;       /* seconds to the first token */
    double total;      /* seconds for the whole answer */
    int64_t n_prompt, n_gen;
    char finish[32];
} gen_stats;

/* Receives text as it comes: reasoning or answer. */
typedef void (*delta_fn)(void *user, bool reasoning, const char *text, size_t len);

typedef enum gen_result { GEN_OK = 0, GEN_INTERRUPTED = 1, GEN_ERROR = -1 } gen_result;

typedef struct backend backend;
struct backend {
    /* Answers the conversation; *content / *reasoning receive malloc'ed text
     * (also the part produced before an interruption). */
    gen_result (*generate)(backend *b, const convo *c, const gen_params *p, delta_fn on_delta,
                           void *user, char **content, char **reasoning, gen_stats *st);
    void (*close)(backend *b);
    char info[1024];   /* for /info */
};

backend *local_open(const run_engine_opts *eo);
backend *remote_open(const char *host, int port, const char *api_key, const char *model);

/* Monotonic seconds. */
double chat_now(void);

#endif
