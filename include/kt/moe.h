/*
 * kt/moe.h - the CPU MoE backend. (Module being written; declarations land here.)
 */
#ifndef KT_MOE_H
#define KT_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* KT_MOE_H */
