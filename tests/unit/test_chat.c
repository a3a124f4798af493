/* kt/chat.h: content / reasoning / tool calls from the output syntaxes of
 * Kimi-K2, DeepSeek, Qwen3, MiniMax-M2 and gpt-oss, as their model cards and
 * chat templates write them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "kt/chat.h"

static cJSON *parse(kt_chat_format f, uint32_t flags, const char *text, const char *tools)
{
    kt_buf out = KT_BUF_INIT;
    assert_int_equal(kt_chat_parse(text, strlen(text), f, flags, tools, &out), KT_OK);
    cJSON *j = cJSON_Parse(out.ptr);
    assert_non_null(j);
    kt_buf_dispose(&out);
    return j;
}

static const char *str(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* name and arguments (re-serialised, so spacing does not matter) of call i */
static void check_call(const cJSON *j, int i, const char *name, const char *args_json)
{
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(j, "tool_calls");
    assert_true(cJSON_IsArray(calls));
    const cJSON *call = cJSON_GetArrayItem(calls, i);
    assert_non_null(call);
    assert_string_equal(str(call, "type"), "function");
    assert_non_null(str(call, "id"));
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    assert_string_equal(str(fn, "name"), name);
    cJSON *got = cJSON_Parse(str(fn, "arguments"));
    cJSON *want = cJSON_Parse(args_json);
    assert_non_null(got);
    assert_non_null(want);
    assert_true(cJSON_Compare(got, want, 1));
    cJSON_Delete(got);
    cJSON_Delete(want);
}

static int n_calls(const cJSON *j)
{
    return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "tool_calls"));
}

static void test_detect(void **state)
{
    (void)state;
    uint32_t fl = 99;
    assert_int_equal(kt_chat_format_detect(NULL, &fl), KT_CHAT_FORMAT_PLAIN);
    assert_int_equal(fl, 0);
    assert_int_equal(kt_chat_format_detect("{{'<|tool_calls_section_begin|>'}}", NULL),
                     KT_CHAT_FORMAT_KIMI_K2);
    assert_int_equal(kt_chat_format_detect("{{'<｜tool▁calls▁begin｜>'}}", NULL),
                     KT_CHAT_FORMAT_DEEPSEEK);
    assert_int_equal(kt_chat_format_detect("<tool_call>\\n{{ tool_call | tojson }}", &fl),
                     KT_CHAT_FORMAT_QWEN3);
    assert_int_equal(kt_chat_format_detect("{{ '<think>\\n' }}<tool_call>", &fl),
                     KT_CHAT_FORMAT_QWEN3);
    assert_int_equal(fl, KT_CHAT_F_REASONING);
    assert_int_equal(kt_chat_format_detect("<minimax:tool_call>", NULL),
                     KT_CHAT_FORMAT_MINIMAX_M2);
    assert_int_equal(kt_chat_format_detect("<|start|>assistant<|channel|>final", NULL),
                     KT_CHAT_FORMAT_GPT_OSS);
    assert_string_equal(kt_chat_format_name(KT_CHAT_FORMAT_KIMI_K2), "kimi_k2");
    /* the demo model's template (DeepSeek-style turns, no tools) */
    assert_int_equal(kt_chat_format_detect("{{ bos_token }}{{ '<｜User｜>' + m }}", &fl),
                     KT_CHAT_FORMAT_PLAIN);
}

static void test_plain_and_think(void **state)
{
    (void)state;
    cJSON *j = parse(KT_CHAT_FORMAT_PLAIN, 0, "Hello <think>not special</think>", NULL);
    assert_string_equal(str(j, "content"), "Hello <think>not special</think>");
    assert_null(cJSON_GetObjectItem(j, "reasoning_content"));
    cJSON_Delete(j);
    /* Qwen3 / MiniMax-M2 style: the model opens the block itself */
    j = parse(KT_CHAT_FORMAT_QWEN3, KT_CHAT_F_REASONING,
              "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?", NULL);
    assert_string_equal(str(j, "reasoning_content"), "\nThe user greets me.\n");
    assert_string_equal(str(j, "content"), "\n\nHello! How can I help?");
    cJSON_Delete(j);
    /* DeepSeek-R1 / Kimi-K2-Thinking style: the prompt ended with <think> */
    j = parse(KT_CHAT_FORMAT_DEEPSEEK, KT_CHAT_F_IN_REASONING, "Let me think.</think>42", NULL);
    assert_string_equal(str(j, "reasoning_content"), "Let me think.");
    assert_string_equal(str(j, "content"), "42");
    cJSON_Delete(j);
    /* unknown flags are refused */
    kt_buf out = KT_BUF_INIT;
    assert_int_equal(kt_chat_parse("x", 1, KT_CHAT_FORMAT_PLAIN, 1u << 30, NULL, &out),
                     KT_ERR_INVALID_ARG);
    assert_int_equal(kt_chat_parse("x", 1, (kt_chat_format)77, 0, NULL, &out),
                     KT_ERR_INVALID_ARG);
    kt_buf_dispose(&out);
}

static void test_kimi(void **state)
{
    (void)state;
    const char *text =
        "I'll check the weather in both cities."
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        "<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|>"
        "<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
        "{\"city\": \"Shanghai\", \"unit\": \"celsius\"}<|tool_call_end|>"
        "<|tool_calls_section_end|>";
    cJSON *j = parse(KT_CHAT_FORMAT_KIMI_K2, 0, text, NULL);
    assert_string_equal(str(j, "content"), "I'll check the weather in both cities.");
    assert_int_equal(n_calls(j), 2);
    check_call(j, 0, "get_weather", "{\"city\": \"Beijing\"}");
    check_call(j, 1, "get_weather", "{\"city\":\"Shanghai\",\"unit\":\"celsius\"}");
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tool_calls"), 0);
    assert_string_equal(str(c0, "id"), "functions.get_weather:0"); /* Kimi's own ids */
    cJSON_Delete(j);
    /* only a call: content is null */
    j = parse(KT_CHAT_FORMAT_KIMI_K2, 0,
              "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
              "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
              NULL);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "content")));
    check_call(j, 0, "search", "{}");
    cJSON_Delete(j);
}

static void test_deepseek(void **state)
{
    (void)state;
    /* V3-0324 / R1 */
    const char *v3 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                     "```json\n{\"location\": \"Hangzhou\"}\n```<｜tool▁call▁end｜>"
                     "<｜tool▁calls▁end｜>";
    cJSON *j = parse(KT_CHAT_FORMAT_DEEPSEEK, 0, v3, NULL);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "content")));
    assert_int_equal(n_calls(j), 1);
    check_call(j, 0, "get_weather", "{\"location\": \"Hangzhou\"}");
    cJSON_Delete(j);
    /* V3.1 */
    const char *v31 = "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"
                      "{\"tz\": \"UTC\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>"
                      "{\"a\": 1, \"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    j = parse(KT_CHAT_FORMAT_DEEPSEEK, 0, v31, NULL);
    assert_string_equal(str(j, "content"), "Sure.");
    assert_int_equal(n_calls(j), 2);
    check_call(j, 0, "get_time", "{\"tz\": \"UTC\"}");
    check_call(j, 1, "add", "{\"a\": 1, \"b\": 2}");
    cJSON_Delete(j);
}

static void test_qwen3(void **state)
{
    (void)state;
    const char *text =
        "<think>\nI need the weather.\n</think>\n\n"
        "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": "
        "{\"location\": \"San Francisco, CA, USA\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_temperature_date\", \"arguments\": "
        "{\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>";
    cJSON *j = parse(KT_CHAT_FORMAT_QWEN3, KT_CHAT_F_REASONING, text, NULL);
    assert_string_equal(str(j, "reasoning_content"), "\nI need the weather.\n");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "content")));
    assert_int_equal(n_calls(j), 2);
    check_call(j, 0, "get_current_temperature", "{\"location\": \"San Francisco, CA, USA\"}");
    check_call(j, 1, "get_temperature_date",
               "{\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}");
    cJSON_Delete(j);
    /* Qwen3-Coder XML, typed by the request's schema */
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"write_file\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{"
                        "\"path\":{\"type\":\"string\"},\"mode\":{\"type\":\"integer\"},"
                        "\"text\":{\"type\":\"string\"}}}}}]";
    const char *coder = "<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.txt\n"
                        "</parameter>\n<parameter=mode>\n644\n</parameter>\n<parameter=text>\n"
                        "123\n</parameter>\n</function>\n</tool_call>";
    j = parse(KT_CHAT_FORMAT_QWEN3, 0, coder, tools);
    check_call(j, 0, "write_file", "{\"path\": \"/tmp/a.txt\", \"mode\": 644, \"text\": \"123\"}");
    cJSON_Delete(j);
    /* a broken call stays in content as written */
    j = parse(KT_CHAT_FORMAT_QWEN3, 0, "x<tool_call>{not json</tool_call>", NULL);
    assert_string_equal(str(j, "content"), "x<tool_call>{not json</tool_call>");
    assert_int_equal(n_calls(j), 0);
    cJSON_Delete(j);
}

static void test_minimax(void **state)
{
    (void)state;
    const char *text = "<think>\nUser wants to search.\n</think>\n\n"
                       "<minimax:tool_call>\n<invoke name=\"search_web\">\n"
                       "<parameter name=\"query_tag\">[\"technology\", \"events\"]</parameter>\n"
                       "<parameter name=\"query_list\">[\"\\\"OpenAI\\\" \\\"latest\\\"\"]"
                       "</parameter>\n<parameter name=\"limit\">5</parameter>\n"
                       "<parameter name=\"note\">42</parameter>\n</invoke>\n"
                       "</minimax:tool_call>";
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"search_web\","
                        "\"parameters\":{\"properties\":{\"note\":{\"type\":\"string\"}}}}}]";
    cJSON *j = parse(KT_CHAT_FORMAT_MINIMAX_M2, KT_CHAT_F_REASONING, text, tools);
    assert_string_equal(str(j, "reasoning_content"), "\nUser wants to search.\n");
    assert_int_equal(n_calls(j), 1);
    check_call(j, 0, "search_web",
               "{\"query_tag\": [\"technology\", \"events\"], "
               "\"query_list\": [\"\\\"OpenAI\\\" \\\"latest\\\"\"], \"limit\": 5, "
               "\"note\": \"42\"}");
    cJSON_Delete(j);
}

static void test_gpt_oss(void **state)
{
    (void)state;
    const char *answer = "<|channel|>analysis<|message|>User asks a simple question.<|end|>"
                         "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>";
    cJSON *j = parse(KT_CHAT_FORMAT_GPT_OSS, 0, answer, NULL);
    assert_string_equal(str(j, "reasoning_content"), "User asks a simple question.");
    assert_string_equal(str(j, "content"), "2 + 2 = 4.");
    cJSON_Delete(j);
    const char *call = "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>"
                       "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                       "<|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>";
    j = parse(KT_CHAT_FORMAT_GPT_OSS, 0, call, NULL);
    assert_string_equal(str(j, "reasoning_content"), "Need to use function get_weather.");
    check_call(j, 0, "get_weather", "{\"location\":\"San Francisco\"}");
    cJSON_Delete(j);
    /* recipient in the role part of the header */
    j = parse(KT_CHAT_FORMAT_GPT_OSS, 0,
              "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>"
              "{\"q\": 1}<|call|>", NULL);
    check_call(j, 0, "lookup", "{\"q\": 1}");
    cJSON_Delete(j);
}

/* Streaming: every prefix parsed with KT_CHAT_F_PARTIAL gives content and
 * reasoning that are prefixes of the final ones, and markers never leak. */
static void check_stream(kt_chat_format f, uint32_t flags, const char *text)
{
    cJSON *final = parse(f, flags, text, NULL);
    const char *fc = str(final, "content");
    const char *fr = str(final, "reasoning_content");
    size_t n = strlen(text);
    for (size_t i = 0; i <= n; i++) {
        kt_buf out = KT_BUF_INIT;
        assert_int_equal(kt_chat_parse(text, i, f, flags | KT_CHAT_F_PARTIAL, NULL, &out),
                         KT_OK);
        cJSON *j = cJSON_Parse(out.ptr);
        assert_non_null(j);
        const char *c = str(j, "content"), *r = str(j, "reasoning_content");
        if (c && *c) {
            assert_non_null(fc);
            assert_memory_equal(c, fc, strlen(c));
        }
        if (r && *r) {
            assert_non_null(fr);
            assert_true(strlen(r) <= strlen(fr));
            assert_memory_equal(r, fr, strlen(r));
        }
        cJSON_Delete(j);
        kt_buf_dispose(&out);
    }
    cJSON_Delete(final);
}

static void test_streaming_prefixes(void **state)
{
    (void)state;
    check_stream(KT_CHAT_FORMAT_QWEN3, KT_CHAT_F_REASONING,
                 "<think>\nhmm\n</think>\n\nOK then.<tool_call>\n{\"name\": \"f\", "
                 "\"arguments\": {}}\n</tool_call>");
    check_stream(KT_CHAT_FORMAT_KIMI_K2, KT_CHAT_F_IN_REASONING,
                 "plan</think>Calling.<|tool_calls_section_begin|><|tool_call_begin|>"
                 "functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
                 "<|tool_calls_section_end|>");
    check_stream(KT_CHAT_FORMAT_GPT_OSS, 0,
                 "<|channel|>analysis<|message|>think<|end|><|start|>assistant"
                 "<|channel|>final<|message|>Done.<|return|>");
    /* inside an unfinished call: pending, nothing of it in content */
    const char *part = "Calling.<minimax:tool_call>\n<invoke name=\"f\">";
    kt_buf out = KT_BUF_INIT;
    assert_int_equal(kt_chat_parse(part, strlen(part), KT_CHAT_FORMAT_MINIMAX_M2,
                                   KT_CHAT_F_PARTIAL, NULL, &out), KT_OK);
    cJSON *j = cJSON_Parse(out.ptr);
    assert_string_equal(str(j, "content"), "Calling.");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "tool_call_pending")));
    cJSON_Delete(j);
    /* a tail that may start a marker is held back */
    assert_int_equal(kt_chat_parse("Hi <tool_", 9, KT_CHAT_FORMAT_QWEN3, KT_CHAT_F_PARTIAL, NULL,
                                   &out), KT_OK);
    j = cJSON_Parse(out.ptr);
    assert_string_equal(str(j, "content"), "Hi ");
    cJSON_Delete(j);
    kt_buf_dispose(&out);
}

/* Random texts made of marker pieces, every format and flag combination:
 * always KT_OK and a JSON object (run under ASan in CI). */
static void test_random_pieces(void **state)
{
    (void)state;
    static const char *const pieces[] = {
        "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
        "functions.f:0", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
        "<|tool_calls_section_end|>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
        "function", "<｜tool▁sep｜>", "```json", "```", "<｜tool▁call▁end｜>",
        "<tool_call>", "</tool_call>", "<function=f>", "<parameter=a>", "</parameter>",
        "</function>", "<minimax:tool_call>", "<invoke name=\"g\">", "<parameter name=\"k\">",
        "</invoke>", "</minimax:tool_call>", "<|start|>", "assistant", "<|channel|>",
        "analysis", "final", "commentary to=functions.h", "<|constrain|>json", "<|message|>",
        "<|end|>", "<|call|>", "<|return|>", "{\"a\": 1}", "{\"name\": \"f\"}", "\n",
        " text ", "<", "|", ">", "\"", "\xff", "<|tool_c", "</thi",
    };
    const size_t n_pieces = sizeof pieces / sizeof pieces[0];
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char text[1024];
    kt_buf out = KT_BUF_INIT;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        int n = 1 + (int)(rng % 12);
        for (int k = 0; k < n; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const char *p = pieces[(rng >> 33) % n_pieces];
            size_t pl = strlen(p);
            if (len + pl < sizeof text) {
                memcpy(text + len, p, pl);
                len += pl;
            }
        }
        for (int f = 0; f <= KT_CHAT_FORMAT_GPT_OSS; f++)
            for (uint32_t flags = 0; flags < 8; flags++) {
                assert_int_equal(kt_chat_parse(text, len, (kt_chat_format)f, flags,
                                               "[{\"function\": {\"name\": \"f\"}}]", &out),
                                 KT_OK);
                cJSON *j = cJSON_Parse(out.ptr);
                assert_true(cJSON_IsObject(j));
                cJSON_Delete(j);
            }
    }
    kt_buf_dispose(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),       cmocka_unit_test(test_plain_and_think),
        cmocka_unit_test(test_kimi),         cmocka_unit_test(test_deepseek),
        cmocka_unit_test(test_qwen3),        cmocka_unit_test(test_minimax),
        cmocka_unit_test(test_gpt_oss),      cmocka_unit_test(test_streaming_prefixes),
        cmocka_unit_test(test_random_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
