/*
 * kt/template.h - chat templates: the model's own Jinja template rendered
 * exactly as Hugging Face transformers' apply_chat_template renders it.
 *
 * libkt carries its own Jinja engine (Jinja2 3.1 semantics in the sandboxed,
 * trim_blocks + lstrip_blocks environment transformers uses): statements
 * (if/elif/else, for with loop.* and else, set incl. block set and namespace
 * attributes, macro and call, filter blocks, break/continue, with, raw),
 * Python-style expressions, Undefined, str/list/dict methods, the usual
 * filters and tests, and transformers' additions: `tojson` (json.dumps with
 * ensure_ascii=False, indent, separators, sort_keys), `raise_exception()`
 * and `strftime_now()`. Unlike transformers' sandbox, list/dict mutating
 * methods (append, pop, update) are allowed.
 *
 * The render context is one JSON object; each key becomes a template
 * variable. Keys transformers always passes get its defaults when absent:
 * tools = none, documents = none, add_generation_prompt = false, and the
 * special tokens the template was created with (bos_token, eos_token, ...).
 *
 *     kt_template *t = NULL;
 *     if (kt_template_create(&t, src, strlen(src), "chat", NULL) < 0) {
 *         fprintf(stderr, "%s\n", kt_last_error());   // name:line:col: message
 *         return 1;
 *     }
 *     kt_buf text = KT_BUF_INIT;
 *     kt_status st = kt_template_render(t,
 *         "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}],"
 *         " \"add_generation_prompt\": true, \"bos_token\": \"<s>\"}", NULL, &text);
 *     if (st == KT_OK)
 *         fwrite(text.ptr, 1, text.size, stdout);
 *     kt_buf_dispose(&text);
 *     kt_template_free(t);
 *
 * Errors: a syntax error fails kt_template_create(), a runtime error
 * (raise_exception, an undefined value used, a type error) fails the render;
 * both return KT_ERR_FORMAT with "template NAME:LINE:COL: message" in
 * kt_last_error(). Hitting the output, memory or step limits gives
 * KT_ERR_LIMIT. Nothing the template or context does can crash the caller.
 *
 * Thread contract: a kt_template is immutable after creation; any number of
 * threads may render with it at once (each render has its own memory). A
 * render uses at most about 1 MiB of the calling thread's stack.
 */
#ifndef KT_TEMPLATE_H
#define KT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compiled template. Immutable; thread-shareable (K26). */
typedef struct kt_template kt_template;

/* kt_template_options.flags: depart from transformers' environment. */
#define KT_TEMPLATE_NO_TRIM_BLOCKS        (1u << 0) /* keep the newline after a block tag   */
#define KT_TEMPLATE_NO_LSTRIP_BLOCKS      (1u << 1) /* keep indentation before a block tag  */
#define KT_TEMPLATE_KEEP_TRAILING_NEWLINE (1u << 2) /* keep the source's final newline      */

typedef struct kt_template_options {
    uint32_t struct_size; /* sizeof(kt_template_options); set by the INIT macro */
    uint32_t flags;       /* KT_TEMPLATE_* bits; unknown bits are rejected      */
} kt_template_options;

#define KT_TEMPLATE_OPTIONS_INIT { (uint32_t)sizeof(kt_template_options), 0u }

/* Fills *opts with defaults; struct_size is the caller's sizeof(*opts).
 * Since 0.1. */
KT_API kt_status kt_template_options_init(kt_template_options *opts, size_t struct_size);

/* Compiles a Jinja template.
 * source/source_len: the template text (UTF-8; need not be NUL-terminated).
 * name: used in error messages (NULL: "template"); copied.
 * opts: NULL for transformers' settings.
 * Caller owns *out; free with kt_template_free(). On failure *out is NULL and
 * kt_last_error() says where the syntax error is (KT_ERR_FORMAT). Thread-safe.
 * Since 0.1. */
KT_API kt_status kt_template_create(kt_template **out, const char *source, size_t source_len,
                                    const char *name, const kt_template_options *opts);

/* Compiles the chat template of a tokenizer (kt_tokenizer_chat_template(tok,
 * name); name NULL: the default one) and records its special tokens
 * (bos_token, eos_token, pad_token, unk_token) as render defaults.
 * KT_ERR_NOT_FOUND when the model has no such template. Caller owns *out;
 * free with kt_template_free(). Since 0.1. */
KT_API kt_status kt_template_create_from_tokenizer(kt_template **out, const kt_tokenizer *tok,
                                                   const char *name,
                                                   const kt_template_options *opts);

/* Frees a template; NULL is a no-op. Since 0.1. */
KT_API void kt_template_free(kt_template *t);

/* The name given at creation. Borrowed; valid until kt_template_free().
 * Since 0.1. */
KT_API const char *kt_template_name(const kt_template *t);

/* Sets a default variable (a special token such as "bos_token") that every
 * render sees unless its context gives the same key; value NULL removes it.
 * Not thread-safe: call before sharing the template. Since 0.1. */
KT_API kt_status kt_template_set_default(kt_template *t, const char *key, const char *value);

/* kt_template_render_options.flags */
/* OpenAI-style messages carry tool_calls[].function.arguments as JSON text;
 * with this flag a string that parses as a JSON object is handed to the
 * template as that object (what servers do: templates such as MiniMax-M2's
 * and GLM-4.6's iterate arguments.items()). */
#define KT_TEMPLATE_RENDER_TOOL_ARGS_AS_OBJECTS (1u << 0)

typedef struct kt_template_render_options {
    uint32_t struct_size;      /* sizeof(kt_template_render_options)                 */
    uint32_t flags;            /* KT_TEMPLATE_RENDER_* bits; unknown bits rejected   */
    int64_t now;               /* Unix time for strftime_now(); 0: the current time  */
    uint64_t max_output_bytes; /* 0: 16 MiB; larger output fails with KT_ERR_LIMIT   */
} kt_template_render_options;

#define KT_TEMPLATE_RENDER_OPTIONS_INIT \
    { (uint32_t)sizeof(kt_template_render_options), 0u, 0, 0u }

/* Fills *opts with defaults; struct_size is the caller's sizeof(*opts).
 * Since 0.1. */
KT_API kt_status kt_template_render_options_init(kt_template_render_options *opts,
                                                 size_t struct_size);

/* Renders the template.
 * context_json: a NUL-terminated JSON object whose keys become variables
 *   ("messages", "tools", "add_generation_prompt", "bos_token", and any
 *   extra kwargs such as "enable_thinking"); NULL means {}.
 * opts: NULL for defaults.
 * out: receives the text (replacing its contents; NUL-terminated); release
 *   with kt_buf_dispose(). On failure out->size is 0.
 * Returns KT_OK, KT_ERR_FORMAT (bad JSON, template error), KT_ERR_LIMIT or
 * KT_ERR_NOMEM. Reentrant: many threads may render one template. Since 0.1. */
KT_API kt_status kt_template_render(const kt_template *t, const char *context_json,
                                    const kt_template_render_options *opts, kt_buf *out);

/* Convenience over kt_template_render for chat: messages_json is a JSON
 * array of messages, tools_json a JSON array of tools or NULL (none),
 * add_generation_prompt nonzero to end with the assistant's turn opening,
 * extra_json a JSON object of extra variables ("enable_thinking", ...) or
 * NULL. Output, errors and thread-safety as kt_template_render(). Since 0.1. */
KT_API kt_status kt_template_render_chat(const kt_template *t, const char *messages_json,
                                         const char *tools_json, int32_t add_generation_prompt,
                                         const char *extra_json,
                                         const kt_template_render_options *opts, kt_buf *out);

/* One plain chat message for kt_template_render_messages(). Strings are
 * UTF-8, NUL-terminated and borrowed for the call. */
typedef struct kt_chat_message {
    const char *role;              /* "system", "user", "assistant", "tool", ... */
    const char *content;           /* NULL: content is none                       */
    const char *reasoning_content; /* NULL: no reasoning_content key              */
} kt_chat_message;

/* Renders a conversation given as C strings (no JSON to build or escape):
 * messages[i] become {"role", "content"[, "reasoning_content"]} dicts.
 * extra_json: a JSON object of extra variables or NULL. Output, errors and
 * thread-safety as kt_template_render(). Since 0.1. */
KT_API kt_status kt_template_render_messages(const kt_template *t,
                                             const kt_chat_message *messages, size_t n_messages,
                                             int32_t add_generation_prompt,
                                             const char *extra_json,
                                             const kt_template_render_options *opts,
                                             kt_buf *out);

#ifdef __cplusplus
}
#endif
#endif /* KT_TEMPLATE_H */
