/* Shared state of the hw module (the .c files of lib/hw). Never installed. */
#ifndef KT_HW_INTERNAL_H
#define KT_HW_INTERNAL_H

#include <stdint.h>

#include "kt/hw.h"

/* One NUMA node as detected once (hwloc). */
typedef struct kt__hw_numa {
    int32_t os_index;
    int32_t n_cores;
    int32_t n_cpus;
    uint64_t memory_total;  /* bytes */
    int32_t *cpus;          /* [n_cpus] OS CPU numbers, ascending */
    int32_t *core_cpus;     /* [n_cores] first hardware thread of each core, ascending */
} kt__hw_numa;

/* Static facts, detected once per process and never freed (process lifetime). */
typedef struct kt__hw_state {
    uint64_t isa_cpuid;     /* KT_ISA_* from CPUID alone */
    uint64_t isa_usable;    /* after XCR0 and AMX permission, before KT_ISA_MAX */
    int32_t amx_permission; /* kt_hw_amx_permission */
    int32_t amx_errno;
    char cpu_vendor[16];
    char cpu_model[64];
    int32_t physical_cores;
    int32_t logical_cpus;
    int32_t n_numa;
    kt__hw_numa *numa;      /* [n_numa], ascending os_index */
} kt__hw_state;

/* Detection steps, each filling its part of *s (cpu.c, topology.c). */
void kt__hw_detect_cpu(kt__hw_state *s);
void kt__hw_detect_topology(kt__hw_state *s);

/* The detected state (runs detection once). Never NULL. */
const kt__hw_state *kt__hw_state_get(void);

/* GPU facts (gpu.c): device count and, when 0, why; detected once. */
int32_t kt__hw_gpu_count(const char **note);
/* CUDA runtime and driver versions (13000 = 13.0); 0 when absent. */
void kt__hw_cuda_versions(int32_t *runtime, int32_t *driver);
/* Fills a full-size kt_hw_gpu for device `index` (0 <= index < count): CUDA
 * properties plus PCIe link and NUMA node from sysfs. KT_ERR_DEVICE on failure. */
kt_status kt__hw_gpu_fill(kt_hw_gpu *g, int32_t index);

#endif
