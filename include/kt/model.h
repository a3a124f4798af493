/*
 * kt/model.h - model files (safetensors, GGUF, config.json). (Module being written; declarations land here.)
 */
#ifndef KT_MODEL_H
#define KT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* KT_MODEL_H */
