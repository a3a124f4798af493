/*
 * kt/registry.h - known models: hub id, aliases, CPU method, served name,
 * context and batch defaults, the GPU-expert rule, and the published
 * config.json (so a plan can be made before anything is downloaded).
 *
 *     kt_registry_entry e;
 *     e.struct_size = sizeof e;
 *     if (kt_registry_find("m2.1", &e) == KT_OK)
 *         printf("%s: hf download %s\n", e.name, e.hub_id);
 *
 * Resolution order used by the tools (kt-run --dry-run): command-line flags,
 * then these registry defaults, then what hardware detection (kt/hw.h) gives.
 *
 * GPU-expert rule (kt-kernel's, experts per MoE layer): with TP GPUs of G GB
 * each, V = floor(TP x (G - 16)) (16 GB reserved per GPU; 0 when a GPU has
 * less), experts = floor(V x num / den) where num/den is 1/3 for DeepSeek
 * V3/R1 (FP8), 2/3 for Kimi-K2 (INT4), 1/1 for MiniMax (FP8, ~1 byte/param).
 * Entries without a rule (den = 0) get their GPU experts from the byte
 * budget.
 *
 * Thread contract: the registry is immutable; every function is thread-safe.
 */
#ifndef KT_REGISTRY_H
#define KT_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"
#include "kt/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One known model. Strings are static (never freed); caller-allocated,
 * size-tagged: set struct_size = sizeof(kt_registry_entry). */
typedef struct kt_registry_entry {
    uint32_t struct_size;
    uint32_t gpu_rule_num;          /* GPU-expert rule numerator (see above)        */
    const char *name;               /* canonical alias: "kimi-k2-thinking"          */
    const char *display_name;       /* "Kimi-K2-Thinking"                           */
    const char *hub_id;             /* "moonshotai/Kimi-K2-Thinking"                */
    const char *aliases;            /* comma-separated: "kimi-thinking,k2-thinking" */
    const char *served_name;        /* model id a server reports                    */
    const char *method;             /* CPU expert method: "RAWINT4", "FP8", "BF16",
                                       "MXFP4" (kt_method_from_name may not know it) */
    const char *config_json;        /* the published config.json (the fields libkt
                                       reads), for config-only planning             */
    uint32_t context_length;        /* default --max-total-tokens                   */
    uint32_t max_running_requests;  /* default concurrent requests                  */
    uint32_t chunked_prefill;       /* default prefill chunk, tokens                */
    uint32_t gpu_prefill_threshold; /* prompt tokens from which prefill runs on GPU */
    uint32_t max_tp;                /* largest tensor parallel size; 0: no limit    */
    uint32_t gpu_rule_den;          /* GPU-expert rule denominator; 0: no rule      */
    uint64_t download_bytes;        /* approximate size of the hub checkpoint       */
} kt_registry_entry;

/* Number of entries. Since 0.1. */
KT_API size_t kt_registry_count(void);
/* Entry `index` (< kt_registry_count()). KT_ERR_INVALID_ARG when out of range
 * or struct_size is too small. Since 0.1. */
KT_API kt_status kt_registry_get(size_t index, kt_registry_entry *out);
/* Finds an entry by canonical name, display name, hub id or alias
 * (case-insensitive, exact). KT_ERR_NOT_FOUND (message lists the known names)
 * when nothing matches. Since 0.1. */
KT_API kt_status kt_registry_find(const char *name, kt_registry_entry *out);
/* The rule's GPU experts per MoE layer for tp GPUs of vram_bytes each; 0
 * when the entry has no rule or a GPU has 16 GB or less. Since 0.1. */
KT_API uint32_t kt_registry_gpu_experts(const kt_registry_entry *entry, uint32_t tp,
                                        uint64_t vram_bytes);
/* Opens the entry's published config (description only, no weights: as
 * KT_MODEL_OPEN_F_CONFIG_ONLY) for estimates and plans. Caller owns *out;
 * free with kt_model_free(). Since 0.1. */
KT_API kt_status kt_registry_open_config(const kt_registry_entry *entry, kt_runtime *rt,
                                         kt_model **out);

#ifdef __cplusplus
}
#endif
#endif /* KT_REGISTRY_H */
