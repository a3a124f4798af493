/*
 * kt/hw.h - hardware detection: CPU model and instruction sets, cores, NUMA
 * nodes, memory and GPUs, as this process may use them.
 *
 * libkt picks kernels and defaults from these facts; tools print them
 * (`kt-run doctor`). Instruction sets count only when the CPU reports them
 * (CPUID), the OS saves their register state (XCR0) and, for AMX, the kernel
 * granted this process tile-data permission. The static facts are detected once
 * per process, on first use; free-memory figures are read at each call.
 *
 *     kt_hw_info hw = KT_HW_INFO_INIT;
 *     if (kt_hw_query(&hw) < 0)
 *         return 1;
 *     printf("%s: %d cores, %d NUMA nodes\n", hw.cpu_model, hw.physical_cores,
 *            hw.numa_nodes);
 *     if (hw.isa & KT_ISA_AVX512BF16)
 *         puts("AVX-512 BF16 kernels can run");
 *     for (int32_t i = 0; i < hw.gpus; i++) {
 *         kt_hw_gpu g = KT_HW_GPU_INIT;
 *         if (kt_hw_gpu_query(&g, i) == KT_OK)
 *             printf("GPU %d: %s\n", i, g.name);
 *     }
 *
 * Output structs (kt_hw_info, kt_hw_numa_node, kt_hw_gpu) start with
 * `uint32_t struct_size` like option structs: the caller sets it (the *_INIT
 * macros do) and libkt fills the fields it shares with the caller's version of
 * the struct; a caller struct larger than libkt's gets its unknown tail zeroed.
 *
 * Thread contract: every function here is thread-safe.
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
 * environment variable KT_ISA_MAX=scalar|avx2|avx512|amx caps the result (for
 * testing lower kernel paths; "amx" means no cap); it is read at every call,
 * so set it before the kernels are chosen. Unknown KT_ISA_MAX values are ignored with a warning.
 * Thread-safe; detection runs once. Since 0.1. */
KT_API uint64_t kt_hw_isa(void);

/* Short lower-case name of one KT_ISA_* bit ("avx512bf16", "amx-int8"); NULL
 * if `isa_bit` is not exactly one known bit. Thread-safe. Since 0.1. */
KT_API const char *kt_hw_isa_name(uint64_t isa_bit);

/* Physical CPU cores this process may run on (hwloc; the online CPU count if
 * hwloc fails); always >= 1. Thread-safe; detection runs once. Since 0.1. */
KT_API int32_t kt_hw_physical_cores(void);

/* Outcome of the AMX tile-data permission request. Values are ABI. */
typedef enum kt_hw_amx_permission {
    KT_HW_AMX_NOT_APPLICABLE = 0, /* CPU or OS has no AMX tile state: nothing to ask for */
    KT_HW_AMX_GRANTED = 1,        /* the kernel granted XTILEDATA to this process        */
    KT_HW_AMX_REFUSED = 2         /* asked and refused (old kernel, seccomp, sigaltstack
                                     too small); amx_errno says why                       */
} kt_hw_amx_permission;

/* The machine as this process sees it (kt_hw_query()). */
typedef struct kt_hw_info {
    uint32_t struct_size;      /* sizeof(kt_hw_info); set by KT_HW_INFO_INIT              */
    int32_t amx_permission;    /* kt_hw_amx_permission                                    */
    uint64_t isa;              /* KT_ISA_* usable now: same as kt_hw_isa()                */
    uint64_t isa_cpuid;        /* KT_ISA_* the CPU reports, before OS state, AMX
                                  permission and KT_ISA_MAX                               */
    uint64_t ram_total;        /* bytes of RAM (MemTotal)                                 */
    uint64_t ram_available;    /* bytes available now (MemAvailable), read at each call    */
    int32_t physical_cores;    /* cores this process may run on (>= 1)                    */
    int32_t logical_cpus;      /* hardware threads this process may run on (>= cores)      */
    int32_t numa_nodes;        /* NUMA nodes (>= 1); see kt_hw_numa_query()               */
    int32_t gpus;              /* CUDA devices libkt can use; 0 without CUDA or devices    */
    int32_t amx_errno;         /* errno of a refused AMX request, else 0                  */
    int32_t cuda_runtime;      /* CUDA runtime version built in (13000 = 13.0); 0 none     */
    int32_t cuda_driver;       /* CUDA version the driver supports; 0 no driver           */
    char cpu_vendor[16];       /* "GenuineIntel", "AuthenticAMD"; "" if unknown           */
    char cpu_model[64];        /* brand string, e.g. "AMD EPYC 9654 96-Core Processor"    */
    char isa_max[16];          /* KT_ISA_MAX as applied ("avx2"), "" when no cap          */
    char gpu_note[160];        /* when gpus == 0, why ("built without CUDA", "cudaGetDevice-
                                  Count: no CUDA-capable device is detected"); else ""    */
} kt_hw_info;

#define KT_HW_INFO_INIT { (uint32_t)sizeof(kt_hw_info), 0, 0u, 0u, 0u, 0u, 0, 0, 0, 0, 0, 0, 0, \
                          "", "", "", "" }

/* Fills *out with the machine's description. The caller sets out->struct_size
 * (KT_HW_INFO_INIT does). Static facts are detected once per process; the first
 * call may take tens of milliseconds (hwloc) and, in a CUDA build, initialises
 * the CUDA driver to count devices (so a process that forks should call it
 * after forking).
 * Returns KT_OK, or KT_ERR_INVALID_ARG for a NULL or too-small struct.
 * Thread-safe. Since 0.1. */
KT_API kt_status kt_hw_query(kt_hw_info *out);

/* One NUMA node (kt_hw_numa_query()). */
typedef struct kt_hw_numa_node {
    uint32_t struct_size;      /* sizeof(kt_hw_numa_node); set by KT_HW_NUMA_NODE_INIT     */
    int32_t os_index;          /* the kernel's node number (numactl -N, mbind)             */
    int32_t physical_cores;    /* cores whose hardware threads lie on this node (may be 0:
                                  a memory-only node)                                      */
    int32_t logical_cpus;      /* hardware threads on this node                            */
    uint64_t memory_total;     /* bytes of node-local memory (one node: all RAM)            */
    uint64_t memory_free;      /* bytes free now (libnuma; one node: MemAvailable), read at
                                  each call; 0 unknown                                     */
} kt_hw_numa_node;

#define KT_HW_NUMA_NODE_INIT { (uint32_t)sizeof(kt_hw_numa_node), 0, 0, 0, 0u, 0u }

/* Describes NUMA node `index` (0 <= index < kt_hw_info.numa_nodes, in
 * os_index order). Returns KT_OK, KT_ERR_INVALID_ARG for a NULL or too-small
 * struct, KT_ERR_NOT_FOUND for an index out of range. Thread-safe. Since 0.1. */
KT_API kt_status kt_hw_numa_query(kt_hw_numa_node *out, int32_t index);

/* kt_hw_numa_cpus() flag: only the first hardware thread of each physical
 * core (where a pool pins one worker per core). */
#define KT_HW_CPUS_ONE_PER_CORE (1u << 0)

/* The OS CPU numbers (sched_setaffinity) of NUMA node `index`, ascending:
 * every hardware thread, or with KT_HW_CPUS_ONE_PER_CORE one per core.
 * Writes at most `capacity` numbers to `cpus` (may be NULL when capacity is 0)
 * and the full count to *count, so a first call with capacity 0 sizes the
 * array. Returns KT_OK, KT_ERR_INVALID_ARG (count NULL, unknown flag bits),
 * KT_ERR_NOT_FOUND (index out of range) or KT_ERR_LIMIT when capacity is too
 * small (the first `capacity` numbers and *count are still written).
 * Thread-safe. Since 0.1. */
KT_API kt_status kt_hw_numa_cpus(int32_t *cpus, size_t capacity, size_t *count, int32_t index,
                                 uint32_t flags);

/* One CUDA device (kt_hw_gpu_query()). */
typedef struct kt_hw_gpu {
    uint32_t struct_size;      /* sizeof(kt_hw_gpu); set by KT_HW_GPU_INIT                 */
    int32_t index;             /* CUDA device ordinal                                      */
    uint64_t memory_total;     /* bytes of device memory                                   */
    uint64_t memory_free;      /* bytes free now (creates the device's primary CUDA
                                  context on first query)                                  */
    int32_t cc_major;          /* compute capability, e.g. 9.0 for Hopper                  */
    int32_t cc_minor;
    int32_t multiprocessors;
    int32_t numa_node;         /* host NUMA node of the PCI slot; -1 unknown               */
    int32_t pcie_gen;          /* PCIe link now: generation 1..6 and lanes; 0 unknown. An */
    int32_t pcie_width;        /*   idle GPU may train down, so see also the maximum       */
    int32_t pcie_max_gen;      /* the link's maximum generation and width; 0 unknown       */
    int32_t pcie_max_width;
    char name[96];             /* "NVIDIA H200"                                            */
    char pci_bus_id[32];       /* "0000:3b:00.0" (lower case, as in /sys/bus/pci)          */
} kt_hw_gpu;

#define KT_HW_GPU_INIT { (uint32_t)sizeof(kt_hw_gpu), 0, 0u, 0u, 0, 0, 0, 0, 0, 0, 0, 0, "", "" }

/* Describes CUDA device `index` (0 <= index < kt_hw_info.gpus). The PCIe
 * figures come from /sys/bus/pci/devices/<pci_bus_id>/. Returns KT_OK,
 * KT_ERR_INVALID_ARG for a NULL or too-small struct, KT_ERR_NOT_FOUND for an
 * index out of range (always, in a build without CUDA), KT_ERR_DEVICE when the
 * CUDA runtime fails (message names the call). Thread-safe. Since 0.1. */
KT_API kt_status kt_hw_gpu_query(kt_hw_gpu *out, int32_t index);

#ifdef __cplusplus
}
#endif
#endif /* KT_HW_H */
