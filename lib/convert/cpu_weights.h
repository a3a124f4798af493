/*
 * Reading libkt's CPU expert format (written by kt_convert; docs/cpu-format.md):
 * one safetensors file per MoE layer, mmap'ed, tensors handed to the MoE
 * backend in place. Internal.
 */
#ifndef KT_CONVERT_CPU_WEIGHTS_H
#define KT_CONVERT_CPU_WEIGHTS_H

#include <stdint.h>

#include "kt_internal.h"

typedef struct kt__cpu_weights kt__cpu_weights;

/* Every kt-experts-layer-NNN.safetensors of dir; all must agree on method,
 * shapes and source. */
kt_status kt__cpu_weights_open(kt__cpu_weights **out, const char *dir);
/* Only layer `layer` (for the converter's verify pass). */
kt_status kt__cpu_weights_open_layer(kt__cpu_weights **out, const char *dir, uint32_t layer);
void kt__cpu_weights_close(kt__cpu_weights *cw);

int kt__cpu_weights_method(const kt__cpu_weights *cw);   /* KT_METHOD_AMXINT8 / AMXINT4 */
uint32_t kt__cpu_weights_group(const kt__cpu_weights *cw);
uint32_t kt__cpu_weights_n_experts(const kt__cpu_weights *cw);
uint64_t kt__cpu_weights_hidden(const kt__cpu_weights *cw);
uint64_t kt__cpu_weights_intermediate(const kt__cpu_weights *cw);
uint64_t kt__cpu_weights_source_checksum(const kt__cpu_weights *cw);
/* 1 when the directory holds layer `layer`. */
int kt__cpu_weights_has_layer(const kt__cpu_weights *cw, uint32_t layer);
/* Weights of (layer, expert, proj 0 gate / 1 up / 2 down): q and scale as
 * the kernels read them. KT_ERR_NOT_FOUND / KT_ERR_FORMAT name the file. */
kt_status kt__cpu_weights_get(const kt__cpu_weights *cw, uint32_t layer, uint32_t expert,
                              int proj, const void **q, const void **scale);

/* Whether the finished file at path is this conversion's layer (resume). */
kt_status kt__cpu_weights_check(const char *path, int method, uint32_t group, uint32_t layer,
                                uint32_t n_experts, uint64_t hidden, uint64_t intermediate,
                                uint64_t source_checksum);

/* 64-bit hash, chained through h (start with 0xcbf29ce484222325). */
uint64_t kt__hash64(uint64_t h, const void *p, size_t n);

/* Checksum of a model's config.json (the kt.source_checksum of its conversions). */
uint64_t kt__cpu_weights_config_checksum(const char *model_dir);

#endif
