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

/* Instruction-set bits of kt_hw_isa(). Values are ABI. */
#define KT_ISA_AVX2        (UINT64_C(1) << 0)
#define KT_ISA_FMA         (UINT64_C(1) << 1)
#define KT_ISA_F16C        (UINT64_C(1) << 2)
#define KT_ISA_AVX512F     (UINT64_C(1) << 3)
#define KT_ISA_AVX512BW    (UINT64_C(1) << 4)
#define KT_ISA_AVX512VL    (UINT64_C(1) << 5)
#define KT_ISA_AVX512DQ    (UINT64_C(1) << 6)
#define KT_ISA_AVX512VNNI  (UINT64_C(1) << 7)
#define KT_ISA_AVX512BF16  (UINT64_C(1) << 8)
#define KT_ISA_AVX512VBMI  (UINT64_C(1) << 9)
#define KT_ISA_AVX512FP16  (UINT64_C(1) << 10)
#define KT_ISA_AVXVNNI     (UINT64_C(1) << 11)
#define KT_ISA_AMX_TILE    (UINT64_C(1) << 12)
#define KT_ISA_AMX_INT8    (UINT64_C(1) << 13)
#define KT_ISA_AMX_BF16    (UINT64_C(1) << 14)

/* Instruction sets this process may use: reported by CPUID, enabled by the OS
 * (XCR0) and, for AMX, tile-data permission granted by the kernel
 * (arch_prctl ARCH_REQ_XCOMP_PERM, requested once on first call). The
 * environment variable KT_ISA_MAX=scalar|avx2|avx512 caps the result (for
 * testing lower kernel paths). Thread-safe; detection runs once. Since 0.1. */
KT_API uint64_t kt_hw_isa(void);

/* Physical CPU cores this process may run on (hwloc); 0 if unknown.
 * Thread-safe; detection runs once. Since 0.1. */
KT_API int32_t kt_hw_physical_cores(void);

#ifdef __cplusplus
}
#endif
#endif /* KT_HW_H */
