/* Hardware detection (placeholder core count; the hw module grows here). */
#include <hwloc.h>
#include <pthread.h>

#include "kt/hw.h"
#include "kt_internal.h"

static pthread_once_t cores_once = PTHREAD_ONCE_INIT;
static int32_t physical_cores;

static void detect_cores(void)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return;
    if (hwloc_topology_load(topo) == 0) {
        int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        physical_cores = n > 0 ? n : 0;
    }
    hwloc_topology_destroy(topo);
}

int32_t kt_hw_physical_cores(void)
{
    pthread_once(&cores_once, detect_cores);
    return physical_cores;
}

/* Placeholder until the hw module lands: compiler-provided CPUID + XCR0 checks, no AMX. */
uint64_t kt_hw_isa(void)
{
    uint64_t f = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        f |= KT_ISA_AVX2;
    if (__builtin_cpu_supports("fma"))
        f |= KT_ISA_FMA;
    if (__builtin_cpu_supports("avx512f"))
        f |= KT_ISA_AVX512F;
    if (__builtin_cpu_supports("avx512bw"))
        f |= KT_ISA_AVX512BW;
    if (__builtin_cpu_supports("avx512vl"))
        f |= KT_ISA_AVX512VL;
    if (__builtin_cpu_supports("avx512dq"))
        f |= KT_ISA_AVX512DQ;
    if (__builtin_cpu_supports("avx512vnni"))
        f |= KT_ISA_AVX512VNNI;
    if (__builtin_cpu_supports("avx512bf16"))
        f |= KT_ISA_AVX512BF16;
    if (__builtin_cpu_supports("avx512vbmi"))
        f |= KT_ISA_AVX512VBMI;
    return f;
}
