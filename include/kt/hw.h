/*
 * kt/hw.h - hardware detection. (Module being written; declarations land here.)
 */
#ifndef KT_HW_H
#define KT_HW_H

#include <stddef.h>
#include <stdint.h>

#include "kt/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Physical CPU cores this process may run on (hwloc); 0 if unknown.
 * Thread-safe; detection runs once. Since 0.1. */
KT_API int32_t kt_hw_physical_cores(void);

#ifdef __cplusplus
}
#endif
#endif /* KT_HW_H */
