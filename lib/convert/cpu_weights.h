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

/* The format version kt_convert writes; readers take 1 and 2 (same tensors;
 * 2 puts AMXINT4's scales on a grid, see kt__int4_quant_row). */
#define KT__CPU_FORMAT_VERSION 2

/* AMXINT4 quantizer of one row of n inputs in groups of G (G divides n, G <=
 * 128): packed[n / 8] nibbles (value + 8, first input lowest) and scales[n /
 * G] BF16, w ~ value * scale. version 1: each group's scale free (the least
 * squared error among amax / {6.5 .. 8}); version 2: every scale e_g C / 16
 * with integers e_g in 0..16, one of them 16, C a BF16 number with a 4-bit
 * mantissa, so the row is int8 weights value * e_g on one row scale C / 16
 * (kt__int4_row_on_grid). work: 3 n / G floats. Adds the squared error and the
 * squared weights to *err and *ref. */
void kt__int4_quant_row(const float *w, int n, int G, int version, uint32_t *packed,
                        uint16_t *scales, float *work, double *err, double *ref);

/* 1 when the ng BF16 scales are version 2's grid: each s_g * 16 / max|s| an
 * integer (zero rows too). */
int kt__int4_row_on_grid(const uint16_t *scales, int ng);

/* Every kt-experts-layer-NNN.safetensors of dir; all must agree on method,
 * shapes and source. */
kt_status kt__cpu_weights_open(kt__cpu_weights **out, const char *dir);
/* Only layer `layer` (for the converter's verify pass). */
kt_status kt__cpu_weights_open_layer(kt__cpu_weights **out, const char *dir, uint32_t layer);
void kt__cpu_weights_close(kt__cpu_weights *cw);

int kt__cpu_weights_method(const kt__cpu_weights *cw);   /* KT_METHOD_AMXINT8 / AMXINT4 */
int kt__cpu_weights_version(const kt__cpu_weights *cw);  /* kt.version: 1 or 2 */
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

/* Whether the finished file at path is this conversion's layer (resume; an
 * AMXINT4 file of another format version is not). */
kt_status kt__cpu_weights_check(const char *path, int method, uint32_t group, uint32_t layer,
                                uint32_t n_experts, uint64_t hidden, uint64_t intermediate,
                                uint64_t source_checksum);

/* 64-bit hash, chained through h (start with 0xcbf29ce484222325). */
uint64_t kt__hash64(uint64_t h, const void *p, size_t n);

/* Checksum of a model's config.json (the kt.source_checksum of its conversions). */
uint64_t kt__cpu_weights_config_checksum(const char *model_dir);

#endif
