/* Hardware detection, checked against what the kernel itself reports
 * (/proc/cpuinfo flags, sched_getaffinity, /sys CPU topology and NUMA lists,
 * /proc/meminfo), plus the output-struct protocol and KT_ISA_MAX. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kt/hw.h"
#include "kt_internal.h"

#define AMX_BITS (KT_ISA_AMX_TILE | KT_ISA_AMX_INT8 | KT_ISA_AMX_BF16)
#define AVX512_BITS                                                                            \
    (KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ | KT_ISA_AVX512VNNI | \
     KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI | KT_ISA_AVX512FP16)

static kt_hw_info query(void)
{
    kt_hw_info hw = KT_HW_INFO_INIT;
    assert_int_equal(kt_hw_query(&hw), KT_OK);
    return hw;
}

/* Reads a small text file into buf; returns 0 on success. */
static int read_text(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

/* Parses a kernel cpulist ("0-3,8,10-11") into a CPU set. */
static void parse_cpulist(const char *text, cpu_set_t *set)
{
    CPU_ZERO(set);
    const char *p = text;
    while (*p && *p != '\n') {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p)
            break;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            p = end;
        }
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, set);
        if (*p == ',')
            p++;
    }
}

/* First use from many threads at once: detection runs once, all agree. */
enum { N_RACERS = 8 };
static pthread_barrier_t race_start;

static void *race_query(void *arg)
{
    kt_hw_info *out = arg;
    pthread_barrier_wait(&race_start);
    out->struct_size = sizeof *out;
    if (kt_hw_query(out) != KT_OK)
        out->physical_cores = -1;
    return NULL;
}

static void test_concurrent_first_use(void **state)
{
    (void)state;
    unsetenv("KT_ISA_MAX");
    pthread_t threads[N_RACERS];
    kt_hw_info results[N_RACERS];
    assert_int_equal(pthread_barrier_init(&race_start, NULL, N_RACERS), 0);
    for (int i = 0; i < N_RACERS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, race_query, &results[i]), 0);
    for (int i = 0; i < N_RACERS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&race_start);
    for (int i = 0; i < N_RACERS; i++) {
        assert_true(results[i].physical_cores >= 1);
        assert_int_equal(results[i].physical_cores, results[0].physical_cores);
        assert_true(results[i].isa == results[0].isa);
        assert_int_equal(results[i].gpus, results[0].gpus);
        assert_int_equal(results[i].amx_permission, results[0].amx_permission);
    }
}

static void test_sanity(void **state)
{
    (void)state;
    unsetenv("KT_ISA_MAX");
    kt_hw_info hw = query();
    assert_int_equal(hw.struct_size, sizeof hw);
    assert_true(hw.physical_cores >= 1);
    assert_true(hw.logical_cpus >= hw.physical_cores);
    assert_true(hw.numa_nodes >= 1);
    assert_true(hw.ram_total > 0);
    assert_true(hw.ram_available > 0);
    assert_int_equal(kt_hw_physical_cores(), hw.physical_cores);
    assert_true(hw.isa == kt_hw_isa());
    assert_true((hw.isa & ~hw.isa_cpuid) == 0); /* usable is a subset of reported */
    assert_string_equal(hw.isa_max, "");
    assert_true(hw.cpu_model[0] != '\0');
    assert_true(hw.amx_permission >= KT_HW_AMX_NOT_APPLICABLE &&
                hw.amx_permission <= KT_HW_AMX_REFUSED);
    if (hw.amx_permission != KT_HW_AMX_REFUSED)
        assert_int_equal(hw.amx_errno, 0);
}

/* The counts agree with the kernel's own view of this process's CPUs. */
static void test_topology_matches_kernel(void **state)
{
    (void)state;
    kt_hw_info hw = query();
    cpu_set_t mask;
    assert_int_equal(sched_getaffinity(0, sizeof mask, &mask), 0);
    assert_int_equal(hw.logical_cpus, CPU_COUNT(&mask));

    /* Physical cores = distinct (package, core) pairs among allowed CPUs. */
    long pairs[CPU_SETSIZE][2];
    int n_pairs = 0, readable = 1;
    for (int c = 0; c < CPU_SETSIZE && readable; c++) {
        if (!CPU_ISSET(c, &mask))
            continue;
        char path[128], text[32];
        long pkg, core;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 c);
        if (read_text(path, text, sizeof text) != 0) {
            readable = 0;
            break;
        }
        pkg = strtol(text, NULL, 10);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        if (read_text(path, text, sizeof text) != 0) {
            readable = 0;
            break;
        }
        core = strtol(text, NULL, 10);
        int seen = 0;
        for (int i = 0; i < n_pairs && !seen; i++)
            seen = pairs[i][0] == pkg && pairs[i][1] == core;
        if (!seen) {
            pairs[n_pairs][0] = pkg;
            pairs[n_pairs][1] = core;
            n_pairs++;
        }
    }
    if (readable)
        assert_int_equal(hw.physical_cores, n_pairs);

    /* NUMA nodes: no more than the kernel's node directories (memory-less ones may be folded). */
    DIR *d = opendir("/sys/devices/system/node");
    if (d) {
        int nodes = 0;
        struct dirent *e;
        while ((e = readdir(d)))
            nodes += !strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9';
        closedir(d);
        if (nodes > 0)
            assert_true(hw.numa_nodes <= nodes);
    }

    /* RAM: MemTotal may grow under a balloon driver, so allow a margin. */
    char text[4096];
    assert_int_equal(read_text("/proc/meminfo", text, sizeof text), 0);
    const char *line = strstr(text, "MemTotal:");
    assert_non_null(line);
    uint64_t kib = strtoull(line + 9, NULL, 10);
    double ratio = (double)hw.ram_total / (double)(kib * 1024u);
    assert_true(ratio > 0.9 && ratio < 1.1);
    assert_true(hw.ram_available <= hw.ram_total + hw.ram_total / 10);
}

/* Each ISA bit against the kernel's /proc/cpuinfo flag of the same feature: the
 * kernel clears flags whose register state the OS does not enable. */
static void test_isa_matches_cpuinfo(void **state)
{
    (void)state;
    unsetenv("KT_ISA_MAX");
    static char buf[1 << 16];
    if (read_text("/proc/cpuinfo", buf, sizeof buf) != 0)
        skip();
    char *flags = strstr(buf, "\nflags");
    if (!flags)
        skip();
    char *eol = strchr(flags + 1, '\n');
    if (eol)
        *eol = '\0';
    char padded[8192];
    snprintf(padded, sizeof padded, "%s ", strchr(flags, ':') ? strchr(flags, ':') + 1 : "");

    static const struct {
        uint64_t bit;
        const char *flag;
    } map[] = {
        {KT_ISA_AVX2, "avx2"},
        {KT_ISA_FMA, "fma"},
        {KT_ISA_F16C, "f16c"},
        {KT_ISA_AVX512F, "avx512f"},
        {KT_ISA_AVX512BW, "avx512bw"},
        {KT_ISA_AVX512VL, "avx512vl"},
        {KT_ISA_AVX512DQ, "avx512dq"},
        {KT_ISA_AVX512VNNI, "avx512_vnni"},
        {KT_ISA_AVX512BF16, "avx512_bf16"},
        {KT_ISA_AVX512VBMI, "avx512vbmi"},
        {KT_ISA_AVX512FP16, "avx512_fp16"},
        {KT_ISA_AVXVNNI, "avx_vnni"},
        {KT_ISA_AMX_TILE, "amx_tile"},
        {KT_ISA_AMX_INT8, "amx_int8"},
        {KT_ISA_AMX_BF16, "amx_bf16"},
    };
    kt_hw_info hw = query();
    for (size_t i = 0; i < KT_ARRAY_LEN(map); i++) {
        char needle[40];
        snprintf(needle, sizeof needle, " %s ", map[i].flag);
        int in_kernel = strstr(padded, needle) != NULL;
        int usable = (hw.isa & map[i].bit) != 0;
        if (map[i].bit & AMX_BITS) {
            /* The kernel lists AMX even before this process asks for permission. */
            if (in_kernel)
                assert_true(hw.isa_cpuid & map[i].bit);
            assert_int_equal(usable, in_kernel && hw.amx_permission == KT_HW_AMX_GRANTED);
        } else {
            if (usable != in_kernel)
                fail_msg("ISA %s: libkt says %d, /proc/cpuinfo says %d", map[i].flag, usable,
                         in_kernel);
        }
    }
}

static void test_isa_consistency(void **state)
{
    (void)state;
    unsetenv("KT_ISA_MAX");
    uint64_t sets[2] = {kt_hw_isa(), query().isa_cpuid};
    for (int i = 0; i < 2; i++) {
        uint64_t isa = sets[i];
        if (isa & AVX512_BITS)
            assert_true(isa & KT_ISA_AVX512F);
        if (isa & KT_ISA_AVX512F)
            assert_true((isa & (KT_ISA_AVX2 | KT_ISA_FMA)) == (KT_ISA_AVX2 | KT_ISA_FMA));
        if (isa & (KT_ISA_AMX_INT8 | KT_ISA_AMX_BF16))
            assert_true(isa & KT_ISA_AMX_TILE);
    }
    kt_hw_info hw = query();
    if (hw.amx_permission == KT_HW_AMX_NOT_APPLICABLE || hw.amx_permission == KT_HW_AMX_REFUSED)
        assert_true((hw.isa & AMX_BITS) == 0);
    if (hw.amx_permission == KT_HW_AMX_GRANTED)
        assert_true(hw.isa & KT_ISA_AMX_TILE);
    if (hw.isa_cpuid & KT_ISA_AMX_TILE)
        assert_int_not_equal(hw.amx_permission, KT_HW_AMX_NOT_APPLICABLE);

    /* Every bit has a name; non-bits have none. */
    for (int b = 0; b <= 14; b++)
        assert_non_null(kt_hw_isa_name(UINT64_C(1) << b));
    assert_null(kt_hw_isa_name(UINT64_C(1) << 40));
    assert_null(kt_hw_isa_name(KT_ISA_AVX2 | KT_ISA_FMA));
    assert_null(kt_hw_isa_name(0));
    assert_string_equal(kt_hw_isa_name(KT_ISA_AVX512BF16), "avx512bf16");
}

static void test_isa_cap(void **state)
{
    (void)state;
    unsetenv("KT_ISA_MAX");
    uint64_t full = kt_hw_isa();

    setenv("KT_ISA_MAX", "scalar", 1);
    assert_true(kt_hw_isa() == 0);
    kt_hw_info hw = query();
    assert_true(hw.isa == 0);
    assert_string_equal(hw.isa_max, "scalar");

    setenv("KT_ISA_MAX", "avx2", 1);
    uint64_t avx2 = kt_hw_isa();
    assert_true(avx2 == (full & (KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C | KT_ISA_AVXVNNI)));
    assert_true((avx2 & (AVX512_BITS | AMX_BITS)) == 0);

    setenv("KT_ISA_MAX", "AVX512", 1); /* case-insensitive */
    assert_true(kt_hw_isa() == (full & ~AMX_BITS));
    assert_string_equal(query().isa_max, "avx512");

    setenv("KT_ISA_MAX", "amx", 1);
    assert_true(kt_hw_isa() == full);

    setenv("KT_ISA_MAX", "sse9", 1); /* ignored, with one warning on stderr */
    assert_true(kt_hw_isa() == full);
    assert_string_equal(query().isa_max, "");

    unsetenv("KT_ISA_MAX");
    assert_true(kt_hw_isa() == full);
}

/* An older caller's smaller struct is filled only up to its size; a newer
 * caller's larger struct gets its unknown tail zeroed. */
typedef struct {
    kt_hw_info base;
    uint64_t future[4];
} bigger_info;

static void test_output_protocol(void **state)
{
    (void)state;
    unsigned char raw[sizeof(kt_hw_info) + 64];
    memset(raw, 0xAB, sizeof raw);
    uint32_t small = (uint32_t)offsetof(kt_hw_info, ram_total);
    memcpy(raw, &small, sizeof small);
    assert_int_equal(kt_hw_query((kt_hw_info *)(void *)raw), KT_OK);
    uint32_t tag;
    memcpy(&tag, raw, sizeof tag);
    assert_int_equal(tag, small);
    for (size_t i = small; i < sizeof raw; i++)
        assert_int_equal(raw[i], 0xAB);
    kt_hw_info *prefix = (kt_hw_info *)(void *)raw;
    assert_true(prefix->isa == kt_hw_isa());

    bigger_info big;
    memset(&big, 0xCD, sizeof big);
    big.base.struct_size = sizeof big;
    assert_int_equal(kt_hw_query(&big.base), KT_OK);
    assert_int_equal(big.base.struct_size, sizeof big);
    for (int i = 0; i < 4; i++)
        assert_true(big.future[i] == 0);
    assert_true(big.base.physical_cores >= 1);

    kt_hw_info tiny = KT_HW_INFO_INIT;
    tiny.struct_size = 4;
    assert_int_equal(kt_hw_query(&tiny), KT_ERR_INVALID_ARG);
    assert_non_null(strstr(kt_last_error(), "struct_size"));
    assert_int_equal(kt_hw_query(NULL), KT_ERR_INVALID_ARG);
    kt_hw_numa_node node = KT_HW_NUMA_NODE_INIT;
    node.struct_size = 0;
    assert_int_equal(kt_hw_numa_query(&node, 0), KT_ERR_INVALID_ARG);
    kt_hw_gpu gpu = KT_HW_GPU_INIT;
    gpu.struct_size = 3;
    assert_int_equal(kt_hw_gpu_query(&gpu, 0), KT_ERR_INVALID_ARG);
}

static void test_numa_nodes(void **state)
{
    (void)state;
    kt_hw_info hw = query();
    cpu_set_t mask;
    assert_int_equal(sched_getaffinity(0, sizeof mask, &mask), 0);
    int32_t cores = 0, cpus = 0, previous_os = -1;
    uint64_t memory = 0;
    cpu_set_t seen;
    CPU_ZERO(&seen);
    for (int32_t i = 0; i < hw.numa_nodes; i++) {
        kt_hw_numa_node n = KT_HW_NUMA_NODE_INIT;
        assert_int_equal(kt_hw_numa_query(&n, i), KT_OK);
        assert_true(n.os_index > previous_os);
        previous_os = n.os_index;
        assert_true(n.logical_cpus >= n.physical_cores);
        cores += n.physical_cores;
        cpus += n.logical_cpus;
        memory += n.memory_total;

        /* Two-call sizing, then the full list. */
        size_t count = 99;
        assert_int_equal(kt_hw_numa_cpus(NULL, 0, &count, i, 0), KT_OK);
        assert_int_equal(count, (size_t)n.logical_cpus);
        int32_t *list = calloc(count + 1, sizeof *list);
        assert_non_null(list);
        size_t got = 0;
        assert_int_equal(kt_hw_numa_cpus(list, count + 1, &got, i, 0), KT_OK);
        assert_int_equal(got, count);
        for (size_t c = 0; c < count; c++) {
            assert_true(CPU_ISSET(list[c], &mask));
            assert_false(CPU_ISSET(list[c], &seen)); /* nodes do not overlap */
            CPU_SET(list[c], &seen);
            if (c > 0)
                assert_true(list[c] > list[c - 1]);
        }
        /* The kernel's own list for the node, restricted to our affinity. */
        char path[96], text[4096];
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", (int)n.os_index);
        if (hw.numa_nodes > 1 && read_text(path, text, sizeof text) == 0) {
            cpu_set_t kernel;
            parse_cpulist(text, &kernel);
            CPU_AND(&kernel, &kernel, &mask);
            assert_int_equal(CPU_COUNT(&kernel), (int)count);
            for (size_t c = 0; c < count; c++)
                assert_true(CPU_ISSET(list[c], &kernel));
        }

        /* One per core: a subset of the node's CPUs, one per physical core. */
        size_t per_core = 0;
        assert_int_equal(kt_hw_numa_cpus(list, count, &per_core, i, KT_HW_CPUS_ONE_PER_CORE),
                         KT_OK);
        assert_int_equal(per_core, (size_t)n.physical_cores);

        /* Too small a buffer: partial data and KT_ERR_LIMIT. */
        if (count > 1) {
            int32_t one = -1;
            size_t total = 0;
            assert_int_equal(kt_hw_numa_cpus(&one, 1, &total, i, 0), KT_ERR_LIMIT);
            assert_int_equal(total, count);
            assert_true(one >= 0);
        }
        free(list);
    }
    assert_int_equal(cores, hw.physical_cores);
    assert_int_equal(cpus, hw.logical_cpus);
    assert_true(memory > 0);

    size_t count = 0;
    kt_hw_numa_node n = KT_HW_NUMA_NODE_INIT;
    assert_int_equal(kt_hw_numa_query(&n, hw.numa_nodes), KT_ERR_NOT_FOUND);
    assert_int_equal(kt_hw_numa_query(&n, -1), KT_ERR_NOT_FOUND);
    assert_int_equal(kt_hw_numa_cpus(NULL, 0, &count, hw.numa_nodes, 0), KT_ERR_NOT_FOUND);
    assert_int_equal(kt_hw_numa_cpus(NULL, 0, &count, 0, 0x80), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_hw_numa_cpus(NULL, 4, &count, 0, 0), KT_ERR_INVALID_ARG);
    assert_int_equal(kt_hw_numa_cpus(NULL, 0, NULL, 0, 0), KT_ERR_INVALID_ARG);
}

static void test_gpus(void **state)
{
    (void)state;
    kt_hw_info hw = query();
    assert_true(hw.gpus >= 0);
    kt_hw_gpu g = KT_HW_GPU_INIT;
    if (!(kt_features() & KT_FEATURE_CUDA)) {
        assert_int_equal(hw.gpus, 0);
        assert_string_equal(hw.gpu_note, "built without CUDA");
        assert_int_equal(hw.cuda_runtime, 0);
    } else {
        assert_true(hw.cuda_runtime >= 12000);
    }
    if (hw.gpus == 0) {
        assert_true(hw.gpu_note[0] != '\0'); /* the reason */
        assert_int_equal(kt_hw_gpu_query(&g, 0), KT_ERR_NOT_FOUND);
        assert_non_null(strstr(kt_last_error(), hw.gpu_note));
        return;
    }
    assert_string_equal(hw.gpu_note, "");
    for (int32_t i = 0; i < hw.gpus; i++) {
        kt_hw_gpu d = KT_HW_GPU_INIT;
        assert_int_equal(kt_hw_gpu_query(&d, i), KT_OK);
        assert_int_equal(d.index, i);
        assert_true(d.name[0] != '\0');
        assert_true(d.cc_major >= 5);
        assert_true(d.multiprocessors > 0);
        assert_true(d.memory_total > 0 && d.memory_free <= d.memory_total);
        unsigned dom, bus, dev, fn;
        assert_int_equal(sscanf(d.pci_bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn), 4);
        assert_true(d.pcie_gen >= 0 && d.pcie_gen <= 7);
        assert_true(d.pcie_max_gen >= d.pcie_gen || d.pcie_max_gen == 0);
    }
    assert_int_equal(kt_hw_gpu_query(&g, hw.gpus), KT_ERR_NOT_FOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_first_use), /* must run first */
        cmocka_unit_test(test_sanity),
        cmocka_unit_test(test_topology_matches_kernel),
        cmocka_unit_test(test_isa_matches_cpuinfo),
        cmocka_unit_test(test_isa_consistency),
        cmocka_unit_test(test_isa_cap),
        cmocka_unit_test(test_output_protocol),
        cmocka_unit_test(test_numa_nodes),
        cmocka_unit_test(test_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
