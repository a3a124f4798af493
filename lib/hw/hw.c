/* kt/hw.h: one-time detection, the KT_ISA_MAX cap, and the size-tagged queries. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "hw_internal.h"
#include "kt_internal.h"

#if KT_HAVE_NUMA
#include <numa.h>
#endif

static pthread_once_t state_once = PTHREAD_ONCE_INIT;
static kt__hw_state state;

static void detect_state(void)
{
    kt__hw_detect_cpu(&state);
    kt__hw_detect_topology(&state);
    if (state.physical_cores < 1)
        state.physical_cores = 1;
    if (state.logical_cpus < state.physical_cores)
        state.logical_cpus = state.physical_cores;
}

const kt__hw_state *kt__hw_state_get(void)
{
    pthread_once(&state_once, detect_state);
    return &state;
}

/* ---- KT_ISA_MAX ------------------------------------------------------------------------ */

#define ISA_AVX2_LEVEL (KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C | KT_ISA_AVXVNNI)
#define ISA_AMX_BITS (KT_ISA_AMX_TILE | KT_ISA_AMX_INT8 | KT_ISA_AMX_BF16)

static const struct {
    const char *name;
    uint64_t keep;
} isa_levels[] = {
    {"scalar", 0},
    {"avx2", ISA_AVX2_LEVEL},
    {"avx512", ~ISA_AMX_BITS},
    {"amx", ~UINT64_C(0)},
};

static atomic_int warned_bad_cap;

/* Bits KT_ISA_MAX lets through; *name gets the level applied ("" for none). */
static uint64_t isa_cap(const char **name)
{
    *name = "";
    const char *env = getenv("KT_ISA_MAX");
    if (!env || !*env)
        return ~UINT64_C(0);
    for (size_t i = 0; i < KT_ARRAY_LEN(isa_levels); i++) {
        if (!strcasecmp(env, isa_levels[i].name)) {
            *name = isa_levels[i].name;
            return isa_levels[i].keep;
        }
    }
    if (atomic_exchange(&warned_bad_cap, 1) == 0)
        kt__log(NULL, KT_LOG_WARN, "KT_ISA_MAX=%s ignored: expected scalar, avx2, avx512 or amx",
                env);
    return ~UINT64_C(0);
}

uint64_t kt_hw_isa(void)
{
    const char *name;
    return kt__hw_state_get()->isa_usable & isa_cap(&name);
}

int32_t kt_hw_physical_cores(void)
{
    return kt__hw_state_get()->physical_cores;
}

const char *kt_hw_isa_name(uint64_t isa_bit)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {
        {KT_ISA_AVX2, "avx2"},
        {KT_ISA_FMA, "fma"},
        {KT_ISA_F16C, "f16c"},
        {KT_ISA_AVX512F, "avx512f"},
        {KT_ISA_AVX512BW, "avx512bw"},
        {KT_ISA_AVX512VL, "avx512vl"},
        {KT_ISA_AVX512DQ, "avx512dq"},
        {KT_ISA_AVX512VNNI, "avx512vnni"},
        {KT_ISA_AVX512BF16, "avx512bf16"},
        {KT_ISA_AVX512VBMI, "avx512vbmi"},
        {KT_ISA_AVX512FP16, "avx512fp16"},
        {KT_ISA_AVXVNNI, "avxvnni"},
        {KT_ISA_AMX_TILE, "amx-tile"},
        {KT_ISA_AMX_INT8, "amx-int8"},
        {KT_ISA_AMX_BF16, "amx-bf16"},
    };
    for (size_t i = 0; i < KT_ARRAY_LEN(names); i++)
        if (names[i].bit == isa_bit)
            return names[i].name;
    return NULL;
}

/* ---- output structs -------------------------------------------------------------------- */

/* Checks the caller's struct_size of an output struct (at least the tag and
 * one more 32-bit field) and returns it in *given. */
static kt_status output_size(const void *out, size_t *given, const char *what)
{
    if (!out)
        return kt__error(KT_ERR_INVALID_ARG, "%s: out is NULL", what);
    uint32_t size;
    memcpy(&size, out, sizeof size);
    if (size < 2 * sizeof(uint32_t))
        return kt__error(KT_ERR_INVALID_ARG, "%s: struct_size %u is too small (use the *_INIT "
                         "macro)", what, size);
    *given = size;
    return KT_OK;
}

/* Copies the prefix of `full` that the caller's struct holds; zeroes a caller
 * tail this library does not know; keeps the caller's struct_size. */
static void output_write(void *out, size_t given, const void *full, size_t full_size)
{
    uint32_t tag = (uint32_t)given;
    memcpy(out, full, KT_MIN(given, full_size));
    if (given > full_size)
        memset((unsigned char *)out + full_size, 0, given - full_size);
    memcpy(out, &tag, sizeof tag);
}

/* Copies a NUL-terminated string, truncating to fit. */
static void copy_text(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* MemTotal and MemAvailable in bytes; zeros if /proc/meminfo is unreadable. */
static void read_meminfo(uint64_t *total, uint64_t *available)
{
    *total = *available = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return;
    char line[256];
    unsigned long long kib;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
            *total = (uint64_t)kib * 1024u;
        else if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            *available = (uint64_t)kib * 1024u;
    }
    fclose(f);
}

kt_status kt_hw_query(kt_hw_info *out)
{
    size_t given = 0;
    kt_status st = output_size(out, &given, "kt_hw_query");
    if (st < 0)
        return st;
    const kt__hw_state *s = kt__hw_state_get();
    kt_hw_info info = KT_HW_INFO_INIT;
    const char *cap_name;
    info.isa = s->isa_usable & isa_cap(&cap_name);
    info.isa_cpuid = s->isa_cpuid;
    info.amx_permission = s->amx_permission;
    info.amx_errno = s->amx_errno;
    read_meminfo(&info.ram_total, &info.ram_available);
    info.physical_cores = s->physical_cores;
    info.logical_cpus = s->logical_cpus;
    info.numa_nodes = s->n_numa > 0 ? s->n_numa : 1;
    const char *note;
    info.gpus = kt__hw_gpu_count(&note);
    kt__hw_cuda_versions(&info.cuda_runtime, &info.cuda_driver);
    copy_text(info.cpu_vendor, sizeof info.cpu_vendor, s->cpu_vendor);
    copy_text(info.cpu_model, sizeof info.cpu_model, s->cpu_model);
    copy_text(info.isa_max, sizeof info.isa_max, cap_name);
    copy_text(info.gpu_note, sizeof info.gpu_note, note);
    output_write(out, given, &info, sizeof info);
    return KT_OK;
}

static kt_status numa_node_at(int32_t index, const kt__hw_numa **node, const char *what)
{
    const kt__hw_state *s = kt__hw_state_get();
    if (index < 0 || index >= s->n_numa)
        return kt__error(KT_ERR_NOT_FOUND, "%s: NUMA node index %d out of range (%d nodes)",
                         what, (int)index, (int)s->n_numa);
    *node = &s->numa[index];
    return KT_OK;
}

kt_status kt_hw_numa_query(kt_hw_numa_node *out, int32_t index)
{
    size_t given = 0;
    kt_status st = output_size(out, &given, "kt_hw_numa_query");
    const kt__hw_numa *n = NULL;
    if (st < 0 || (st = numa_node_at(index, &n, "kt_hw_numa_query")) < 0)
        return st;
    kt_hw_numa_node info = KT_HW_NUMA_NODE_INIT;
    info.os_index = n->os_index;
    info.physical_cores = n->n_cores;
    info.logical_cpus = n->n_cpus;
    info.memory_total = n->memory_total;
#if KT_HAVE_NUMA
    if (numa_available() >= 0) {
        long long free_bytes = 0;
        if (numa_node_size64(n->os_index, &free_bytes) > 0 && free_bytes > 0)
            info.memory_free = (uint64_t)free_bytes;
    }
#endif
    if (kt__hw_state_get()->n_numa == 1) {
        /* One node holds all memory. Its sysfs figures lag behind memory
         * hot-plugged into a VM (seen: 5 GiB of 126), so take the machine's. */
        uint64_t total, available;
        read_meminfo(&total, &available);
        if (total > info.memory_total)
            info.memory_total = total;
        if (available > info.memory_free)
            info.memory_free = available;
    }
    output_write(out, given, &info, sizeof info);
    return KT_OK;
}

kt_status kt_hw_numa_cpus(int32_t *cpus, size_t capacity, size_t *count, int32_t index,
                          uint32_t flags)
{
    if (!count)
        return kt__error(KT_ERR_INVALID_ARG, "kt_hw_numa_cpus: count is NULL");
    *count = 0;
    if (flags & ~KT_HW_CPUS_ONE_PER_CORE)
        return kt__error(KT_ERR_INVALID_ARG, "kt_hw_numa_cpus: unknown flags 0x%x",
                         flags & ~KT_HW_CPUS_ONE_PER_CORE);
    if (capacity > 0 && !cpus)
        return kt__error(KT_ERR_INVALID_ARG, "kt_hw_numa_cpus: cpus is NULL, capacity %zu",
                         capacity);
    const kt__hw_numa *n = NULL;
    kt_status st = numa_node_at(index, &n, "kt_hw_numa_cpus");
    if (st < 0)
        return st;
    const int32_t *list = (flags & KT_HW_CPUS_ONE_PER_CORE) ? n->core_cpus : n->cpus;
    size_t total = (size_t)((flags & KT_HW_CPUS_ONE_PER_CORE) ? n->n_cores : n->n_cpus);
    if (capacity > 0 && total > 0)
        memcpy(cpus, list, KT_MIN(capacity, total) * sizeof *list);
    *count = total;
    if (capacity < total && capacity > 0)
        return kt__error(KT_ERR_LIMIT, "kt_hw_numa_cpus: node %d has %zu CPUs, capacity %zu",
                         (int)index, total, capacity);
    return KT_OK;
}

kt_status kt_hw_gpu_query(kt_hw_gpu *out, int32_t index)
{
    size_t given = 0;
    kt_status st = output_size(out, &given, "kt_hw_gpu_query");
    if (st < 0)
        return st;
    const char *note;
    int32_t n = kt__hw_gpu_count(&note);
    if (index < 0 || index >= n)
        return kt__error(KT_ERR_NOT_FOUND, "kt_hw_gpu_query: GPU %d out of range (%d GPUs%s%s)",
                         (int)index, (int)n, note[0] ? ": " : "", note);
    kt_hw_gpu info = KT_HW_GPU_INIT;
    if ((st = kt__hw_gpu_fill(&info, index)) < 0)
        return st;
    output_write(out, given, &info, sizeof info);
    return KT_OK;
}
