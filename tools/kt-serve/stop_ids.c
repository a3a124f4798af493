/* End-of-turn token ids beyond config.json's: generation_config.json's
 * eos_token_id (where Kimi-K2 names <|im_end|> and gpt-oss names <|call|>)
 * and the tokenizer's eos token, as transformers' generate() and vLLM stop
 * on them. Shared by kt-serve and kt-chat. */
#include "stop_ids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static void add_id(stop_ids *s, double v)
{
    if (v < 0 || v > INT32_MAX || s->n >= STOP_IDS_MAX)
        return;
    int32_t id = (int32_t)v;
    for (size_t i = 0; i < s->n; i++)
        if (s->ids[i] == id)
            return;
    s->ids[s->n++] = id;
}

static char *read_small_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

void stop_ids_load(stop_ids *s, const char *model_dir, const kt_tokenizer *tok)
{
    memset(s, 0, sizeof *s);
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    char *text = read_small_file(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (cJSON_IsNumber(eos)) {
        add_id(s, eos->valuedouble);
    } else if (cJSON_IsArray(eos)) {
        const cJSON *v = NULL;
        cJSON_ArrayForEach(v, eos)
            if (cJSON_IsNumber(v))
                add_id(s, v->valuedouble);
    }
    cJSON_Delete(root);
    free(text);
    if (tok) {
        int32_t id = kt_tokenizer_special_id(tok, KT_SPECIAL_EOS);
        if (id >= 0)
            add_id(s, id);
    }
}

bool stop_ids_has(const stop_ids *s, int32_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->ids[i] == id)
            return true;
    return false;
}
