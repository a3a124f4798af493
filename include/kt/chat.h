/*
 * kt/chat.h - turning a chat model's raw output into the parts an
 * OpenAI-style API returns: the answer (`content`), the reasoning that came
 * before it (`reasoning_content`, from <think>...</think> blocks or gpt-oss's
 * analysis channel) and tool calls written in the model's own syntax:
 *
 *   Kimi-K2     <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
 *               <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>
 *   DeepSeek    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
 *               ```json {...} ```<｜tool▁call▁end｜>...  (V3/R1; V3.1: NAME<｜tool▁sep｜>{...})
 *   Qwen3       <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes), and
 *               Qwen3-Coder's <tool_call><function=NAME><parameter=K>V</parameter>...
 *   MiniMax-M2  <minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter>
 *               </invoke></minimax:tool_call>
 *   gpt-oss     harmony: <|channel|>analysis<|message|>...<|end|><|start|>assistant
 *               <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
 *
 *     kt_chat_format fmt = kt_chat_format_detect(template_source, &flags);
 *     kt_buf json = KT_BUF_INIT;
 *     kt_chat_parse(text, strlen(text), fmt, flags, tools_json, &json);
 *     // {"content": "...", "reasoning_content": "...", "tool_calls": [...]}
 *     kt_buf_dispose(&json);
 *
 * Text must be decoded without skipping special tokens (the markers are
 * special tokens in most vocabularies).
 *
 * Thread contract: every function is reentrant.
 */
#ifndef KT_CHAT_H
#define KT_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tool-call syntax of a model family. Values are ABI. */
typedef enum kt_chat_format {
    KT_CHAT_FORMAT_PLAIN = 0,      /* no tool-call syntax: everything is content      */
    KT_CHAT_FORMAT_KIMI_K2 = 1,
    KT_CHAT_FORMAT_DEEPSEEK = 2,   /* DeepSeek-V3 / R1 / V3.1                          */
    KT_CHAT_FORMAT_QWEN3 = 3,      /* Hermes JSON and Qwen3-Coder XML in <tool_call>  */
    KT_CHAT_FORMAT_MINIMAX_M2 = 4,
    KT_CHAT_FORMAT_GPT_OSS = 5     /* harmony channels                                 */
} kt_chat_format;

/* kt_chat_parse() flags */
/* Split <think>...</think> blocks out as reasoning_content. */
#define KT_CHAT_F_REASONING (1u << 0)
/* The output starts inside a think block (the prompt ended with "<think>"):
 * everything up to "</think>" is reasoning. Implies KT_CHAT_F_REASONING. */
#define KT_CHAT_F_IN_REASONING (1u << 1)
/* The text is the output so far of a generation still running: a tail that
 * may be the start of a marker is held back, an unfinished tool call is
 * reported as "tool_call_pending": true instead of being parsed. content and
 * reasoning_content of successive partial parses only ever grow, so a
 * streaming server sends the difference. */
#define KT_CHAT_F_PARTIAL (1u << 2)

/* Static name of a format ("kimi_k2", "deepseek", "qwen3", "minimax_m2",
 * "gpt_oss", "plain"); "unknown" for other values. Since 0.1. */
KT_API const char *kt_chat_format_name(kt_chat_format format);

/* Guesses the format from a chat template's source by the markers it writes
 * (NULL: plain). *flags (may be NULL) receives KT_CHAT_F_REASONING when the
 * template handles <think> blocks. Since 0.1. */
KT_API kt_chat_format kt_chat_format_detect(const char *template_source, uint32_t *flags);

/* Parses a model's output.
 * text, len: the decoded output (UTF-8, need not be NUL-terminated).
 * format, flags: as above; unknown flag bits are rejected.
 * tools_json: the request's OpenAI "tools" array (JSON text) or NULL; used to
 *   type parameter values of the XML formats (a "string" parameter stays a
 *   string; others are read as JSON when they parse).
 * out: receives (replacing its contents) a JSON object:
 *   "content": string or null (null when empty and there are tool calls),
 *   "reasoning_content": string (only when there was reasoning),
 *   "tool_calls": [{"id", "type": "function", "function": {"name",
 *   "arguments": JSON text}}] (only when there are calls),
 *   "tool_call_pending": true (partial parses inside an unfinished call).
 * A tool-call block that cannot be parsed is kept in content as written.
 * Returns KT_OK, KT_ERR_INVALID_ARG, KT_ERR_NOMEM. Since 0.1. */
KT_API kt_status kt_chat_parse(const char *text, size_t len, kt_chat_format format,
                               uint32_t flags, const char *tools_json, kt_buf *out);

#ifdef __cplusplus
}
#endif
#endif /* KT_CHAT_H */
