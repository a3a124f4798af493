/*
 * kt/tokenizer.h - tokenizers. (Module being written; declarations land here.)
 */
#ifndef KT_TOKENIZER_H
#define KT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* KT_TOKENIZER_H */
