/*
 * kt/kt.h - umbrella header of libkt, the embeddable library for running
 * Mixture-of-Experts language models split between GPU and CPU.
 *
 * Include this, or only the module headers you need:
 *   kt/core.h       status, errors, logging, runtime, version, features
 *   kt/types.h      tensor element and block types
 *   kt/hw.h         CPU, ISA, NUMA, memory and GPU detection
 *   kt/model.h      model files (safetensors, GGUF, config.json) and descriptions
 *   kt/moe.h        the CPU MoE backend (what engines link against)
 *   kt/tokenizer.h  tokenizers
 *   kt/template.h   chat templates
 *   kt/engine.h     the inference engine (contexts, eval, KV cache)
 *   kt/sampler.h    next-token sampling
 *   kt/placement.h  which experts live on the GPU; activation statistics
 *   kt/registry.h   known models: hub ids, aliases, defaults, published configs
 *   kt/convert.h    checkpoints to libkt's CPU expert format (kt-convert)
 *
 * Link with `pkg-config --cflags --libs libkt`.
 */
#ifndef KT_KT_H
#define KT_KT_H

#include "kt/core.h"
#include "kt/types.h"
#include "kt/hw.h"
#include "kt/model.h"
#include "kt/moe.h"
#include "kt/tokenizer.h"
#include "kt/template.h"
#include "kt/engine.h"
#include "kt/sampler.h"
#include "kt/placement.h"
#include "kt/registry.h"
#include "kt/convert.h"
#include "kt/chat.h"
#include "kt/gpu.h"

#endif /* KT_KT_H */
