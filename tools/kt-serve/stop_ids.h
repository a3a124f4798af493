/* Extra end-of-turn ids of a model directory (see stop_ids.c). */
#ifndef KT_TOOLS_STOP_IDS_H
#define KT_TOOLS_STOP_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kt/kt.h>

#define STOP_IDS_MAX 16

typedef struct stop_ids {
    int32_t ids[STOP_IDS_MAX];
    size_t n;
} stop_ids;

/* generation_config.json's eos_token_id (one or a list; a missing or bad
 * file gives none) and the tokenizer's EOS token (tok may be NULL). */
void stop_ids_load(stop_ids *s, const char *model_dir, const kt_tokenizer *tok);
bool stop_ids_has(const stop_ids *s, int32_t id);

#endif
