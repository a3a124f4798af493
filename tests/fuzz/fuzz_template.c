/* libFuzzer harness: the Jinja engine (lib/text/jinja_*.c). The input is a
 * template, optionally followed by a NUL byte and a JSON render context;
 * without one a small conversation with tools is used. The template is
 * compiled and rendered under tight limits; any outcome but a crash, a leak
 * or a sanitizer report is fine.
 * Build: clang -fsanitize=fuzzer,address,undefined (meson -Dfuzz=enabled).
 * Seeds: tests/fuzz/corpus/template/ (the real chat templates and snippets). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kt/kt.h"
#include "text/jinja.h"

static const char default_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9 <b>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"r\","
    "  \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\":"
    "   {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 1.5}}}]},"
    " {\"role\": \"tool\", \"content\": \"21\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    "  \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t src_len = nul ? (size_t)(nul - data) : size;
    const char *ctx = default_ctx;
    size_t ctx_len = sizeof default_ctx - 1;
    if (nul) {
        ctx = (const char *)nul + 1;
        ctx_len = size - src_len - 1;
    }

    jtemplate t;
    memset(&t, 0, sizeof t);
    t.name = "fuzz";
    t.arena.limit = (size_t)64 << 20;
    jlex_opts lo = {true, true, false};
    jtoks toks;
    memset(&toks, 0, sizeof toks);
    if (kt__jinja_lex(&t.arena, t.name, src, src_len, &lo, &toks) < 0 ||
        kt__jinja_parse(&t, &toks) < 0) {
        kt__ja_free_all(&t.arena);
        return 0;
    }

    ja_arena a;
    memset(&a, 0, sizeof a);
    a.limit = (size_t)64 << 20;
    char err[128];
    jv vars;
    if (kt__jv_from_json(&a, ctx, ctx_len, &vars, err, sizeof err) && vars.type == JV_DICT) {
        jrender_limits lim = {(size_t)1 << 20, (size_t)64 << 20, 200000, 24};
        kt_buf out = KT_BUF_INIT;
        (void)kt__jinja_render(&t, &a, vars.u.d, 1795953600, &lim, &out);
        kt_buf_dispose(&out);
    }
    kt__ja_free_all(&a);
    kt__ja_free_all(&t.arena);
    return 0;
}
