/* kt-run doctor: the machine as libkt sees it, the kernel variant each
 * --kt-method would use here (or why a better one cannot run), and the
 * recommended thread settings. Public API only. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <kt/kt.h>

#include "commands.h"
#include "term.h"

/* ---- what the machine is ---------------------------------------------------------------- */

typedef struct numa_view {
    kt_hw_numa_node node;
    int32_t *cpus;   /* [n_cpus] */
    size_t n_cpus;
} numa_view;

typedef struct machine {
    kt_hw_info hw;
    numa_view *numa; /* [hw.numa_nodes] */
    kt_hw_gpu *gpus; /* [n_gpus] devices that answered */
    int32_t n_gpus;
    char gpu_errors[512];
} machine;

static void machine_free(machine *m)
{
    if (m->numa)
        for (int32_t i = 0; i < m->hw.numa_nodes; i++)
            free(m->numa[i].cpus);
    free(m->numa);
    free(m->gpus);
}

static int machine_read(machine *m)
{
    memset(m, 0, sizeof *m);
    kt_hw_info hw = KT_HW_INFO_INIT;
    if (kt_hw_query(&hw) < 0) {
        fprintf(stderr, "kt-run doctor: %s\n", kt_last_error());
        return -1;
    }
    m->hw = hw;
    m->numa = calloc((size_t)hw.numa_nodes, sizeof *m->numa);
    m->gpus = calloc((size_t)(hw.gpus > 0 ? hw.gpus : 1), sizeof *m->gpus);
    if (!m->numa || !m->gpus) {
        fprintf(stderr, "kt-run doctor: out of memory\n");
        return -1;
    }
    for (int32_t i = 0; i < hw.numa_nodes; i++) {
        numa_view *v = &m->numa[i];
        kt_hw_numa_node node = KT_HW_NUMA_NODE_INIT;
        size_t count = 0;
        if (kt_hw_numa_query(&node, i) < 0 || kt_hw_numa_cpus(NULL, 0, &count, i, 0) < 0) {
            fprintf(stderr, "kt-run doctor: NUMA node %d: %s\n", (int)i, kt_last_error());
            return -1;
        }
        v->node = node;
        v->cpus = calloc(count > 0 ? count : 1, sizeof *v->cpus);
        if (!v->cpus || kt_hw_numa_cpus(v->cpus, count, &v->n_cpus, i, 0) < 0) {
            fprintf(stderr, "kt-run doctor: NUMA node %d CPUs: %s\n", (int)i, kt_last_error());
            return -1;
        }
    }
    for (int32_t i = 0; i < hw.gpus; i++) {
        kt_hw_gpu g = KT_HW_GPU_INIT;
        if (kt_hw_gpu_query(&g, i) < 0) {
            size_t used = strlen(m->gpu_errors);
            snprintf(m->gpu_errors + used, sizeof m->gpu_errors - used, "%s%s",
                     used ? "; " : "", kt_last_error());
            continue;
        }
        m->gpus[m->n_gpus++] = g;
    }
    return 0;
}

/* ---- which kernels would run ----------------------------------------------------------- */

/* An ISA library (cpu/meson.build) is compiled with all of its -m flags, so the
 * dispatcher (lib/moe) runs it only when the CPU has every one of them: the
 * avx512 variant needs F/BW/VL/DQ/VNNI/BF16/VBMI, amx that plus AMX. The
 * per-method needs below (BF16 for BF16, VNNI for the integer methods) are
 * what each method's kernels use on top. */
#define ISA_AVX2_BASE (KT_ISA_AVX2 | KT_ISA_FMA | KT_ISA_F16C)
#define ISA_AVX512_BASE                                                                       \
    (ISA_AVX2_BASE | KT_ISA_AVX512F | KT_ISA_AVX512BW | KT_ISA_AVX512VL | KT_ISA_AVX512DQ |     \
     KT_ISA_AVX512VNNI | KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI)

/* One rung of a method's ladder: the ISA bits it needs beyond the rung's base
 * and the build feature that compiles that variant. */
typedef struct rung {
    const char *variant;
    uint64_t needs;
    uint64_t feature; /* KT_FEATURE_ISA_*; 0 for scalar (always built) */
} rung;

typedef struct method_rule {
    kt_method method;
    uint64_t feature; /* KT_FEATURE_METHOD_* */
    rung rungs[4];    /* best first; the last is scalar */
} method_rule;

/* The decode/prefill paths of DESIGN.md's method table, best first, as the MoE
 * dispatcher (lib/moe/backend.c) picks them: every AMX path prefills with
 * AMX-BF16 tiles (the integer methods widen int8/int4 weights to BF16), so it
 * needs AMX-TILE and AMX-BF16 with tile permission on top of the AVX-512 set. */
static const method_rule method_rules[] = {
    {KT_METHOD_BF16, KT_FEATURE_METHOD_BF16,
     {{"amx", ISA_AVX512_BASE | KT_ISA_AVX512BF16 | KT_ISA_AMX_TILE | KT_ISA_AMX_BF16,
       KT_FEATURE_ISA_AMX},
      {"avx512", ISA_AVX512_BASE | KT_ISA_AVX512BF16, KT_FEATURE_ISA_AVX512},
      {"avx2", ISA_AVX2_BASE, KT_FEATURE_ISA_AVX2},
      {"scalar", 0, 0}}},
    {KT_METHOD_FP8, KT_FEATURE_METHOD_FP8,
     {{"amx", ISA_AVX512_BASE | KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI | KT_ISA_AMX_TILE |
                  KT_ISA_AMX_BF16,
       KT_FEATURE_ISA_AMX},
      {"avx512", ISA_AVX512_BASE | KT_ISA_AVX512BF16 | KT_ISA_AVX512VBMI, KT_FEATURE_ISA_AVX512},
      {"avx2", ISA_AVX2_BASE, KT_FEATURE_ISA_AVX2},
      {"scalar", 0, 0}}},
    {KT_METHOD_RAWINT4, KT_FEATURE_METHOD_RAWINT4, /* prefill on AMX-INT8 tiles */
     {{"amx", ISA_AVX512_BASE | KT_ISA_AVX512VNNI | KT_ISA_AMX_TILE | KT_ISA_AMX_INT8,
       KT_FEATURE_ISA_AMX},
      {"avx512", ISA_AVX512_BASE | KT_ISA_AVX512VNNI, KT_FEATURE_ISA_AVX512},
      {"avx2", ISA_AVX2_BASE, KT_FEATURE_ISA_AVX2},
      {"scalar", 0, 0}}},
    {KT_METHOD_AMXINT8, KT_FEATURE_METHOD_AMXINT8, /* AMX-INT8 tiles; VNNI decode */
     {{"amx", ISA_AVX512_BASE | KT_ISA_AVX512VNNI | KT_ISA_AMX_TILE | KT_ISA_AMX_INT8,
       KT_FEATURE_ISA_AMX},
      {"avx512", ISA_AVX512_BASE | KT_ISA_AVX512VNNI, KT_FEATURE_ISA_AVX512},
      {"avx2", ISA_AVX2_BASE, KT_FEATURE_ISA_AVX2},
      {"scalar", 0, 0}}},
    {KT_METHOD_AMXINT4, KT_FEATURE_METHOD_AMXINT4, /* AMX-INT8 tiles; VNNI decode */
     {{"amx", ISA_AVX512_BASE | KT_ISA_AVX512VNNI | KT_ISA_AMX_TILE | KT_ISA_AMX_INT8,
       KT_FEATURE_ISA_AMX},
      {"avx512", ISA_AVX512_BASE | KT_ISA_AVX512VNNI, KT_FEATURE_ISA_AVX512},
      {"avx2", ISA_AVX2_BASE, KT_FEATURE_ISA_AVX2},
      {"scalar", 0, 0}}},
    {KT_METHOD_LLAMAFILE, KT_FEATURE_METHOD_LLAMAFILE,
     {{"avx512", ISA_AVX512_BASE, KT_FEATURE_ISA_AVX512},
      {"avx2", ISA_AVX2_BASE, KT_FEATURE_ISA_AVX2},
      {"scalar", 0, 0},
      {NULL, 0, 0}}},
};

typedef struct method_choice {
    const char *cpu_variant;   /* best variant this CPU (and OS, and KT_ISA_MAX) allows */
    const char *variant;       /* what this build would run; NULL: method not built */
    char why[320];             /* why no better variant (or why unavailable) */
} method_choice;

/* Names of the bits of `missing` ("avx512bf16, amx-bf16"). */
static void isa_list(uint64_t bits, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int b = 0; b < 64 && used < size; b++) {
        uint64_t bit = UINT64_C(1) << b;
        const char *name = (bits & bit) ? kt_hw_isa_name(bit) : NULL;
        if (name)
            used += (size_t)snprintf(out + used, size - used, "%s%s", used ? " " : "", name);
    }
}

static void appendf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* Walks the ladder: the first rung the CPU allows is cpu_variant; the first
 * that is also compiled is variant. `why` explains the rungs above cpu_variant
 * and, if the build lacks it, that too. */
static method_choice choose_method(const method_rule *r, uint64_t isa, uint64_t features)
{
    method_choice c = {NULL, NULL, ""};
    char blocked[64] = "";   /* "amx, avx512" */
    uint64_t lacking = 0;    /* what the CPU lacks for those */
    for (size_t i = 0; i < 4 && r->rungs[i].variant; i++) {
        const rung *g = &r->rungs[i];
        uint64_t missing = g->needs & ~isa;
        if (missing) {
            appendf(blocked, sizeof blocked, "%s%s", blocked[0] ? ", " : "", g->variant);
            lacking |= missing;
            continue;
        }
        if (!c.cpu_variant)
            c.cpu_variant = g->variant;
        if (g->feature && !(features & g->feature))
            continue;
        c.variant = g->variant;
        break;
    }
    if (lacking) {
        char names[200];
        isa_list(lacking, names, sizeof names);
        appendf(c.why, sizeof c.why, "no %s: CPU lacks %s", blocked, names);
    }
    if (!(features & r->feature)) {
        c.variant = NULL;
        appendf(c.why, sizeof c.why, "%smethod not in this build", c.why[0] ? "; " : "");
    } else if (c.variant != c.cpu_variant) {
        appendf(c.why, sizeof c.why, "%s%s kernels not in this build", c.why[0] ? "; " : "",
                c.cpu_variant);
    }
    return c;
}

static const char *amx_text(int32_t permission)
{
    switch (permission) {
    case KT_HW_AMX_GRANTED:
        return "granted";
    case KT_HW_AMX_REFUSED:
        return "refused";
    default:
        return "not applicable";
    }
}

/* Worker threads: one per physical core, less one core per GPU feeding thread. */
static int32_t recommended_cpuinfer(const machine *m)
{
    int32_t n = m->hw.physical_cores - m->hw.gpus;
    return n >= 1 ? n : 1;
}

/* One thread pool per NUMA node that has cores (memory-only nodes get none). */
static int32_t recommended_pools(const machine *m)
{
    int32_t n = 0;
    for (int32_t i = 0; i < m->hw.numa_nodes; i++)
        n += m->numa[i].node.physical_cores > 0;
    return n >= 1 ? n : 1;
}

/* "0-63,128-191" */
static void cpu_ranges(const int32_t *cpus, size_t n, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && used < size;) {
        size_t j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
            j++;
        if (j == i)
            used += (size_t)snprintf(out + used, size - used, "%s%d", used ? "," : "", cpus[i]);
        else
            used += (size_t)snprintf(out + used, size - used, "%s%d-%d", used ? "," : "",
                                     cpus[i], cpus[j]);
        i = j + 1;
    }
}

static void cuda_version_text(int32_t v, char *out, size_t size)
{
    if (v <= 0)
        snprintf(out, size, "none");
    else
        snprintf(out, size, "%d.%d", (int)(v / 1000), (int)(v % 1000 / 10));
}

/* ---- text report ---------------------------------------------------------------------- */

static void print_text(const machine *m)
{
    const kt_hw_info *hw = &m->hw;
    char a[64], b[64], list[512];

    printf("libkt %s (kt-run %s)\n\n", kt_version(), KT_VERSION_STRING);
    printf("CPU        %s (%s)\n", hw->cpu_model[0] ? hw->cpu_model : "unknown",
           hw->cpu_vendor[0] ? hw->cpu_vendor : "unknown vendor");
    printf("cores      %d physical, %d logical CPUs\n", (int)hw->physical_cores,
           (int)hw->logical_cpus);
    isa_list(hw->isa, list, sizeof list);
    printf("ISA        %s\n", list[0] ? list : "(none: scalar only)");
    if (hw->isa_max[0])
        printf("           capped by KT_ISA_MAX=%s\n", hw->isa_max);
    uint64_t hidden = hw->isa_cpuid & ~hw->isa;
    if (hidden) {
        isa_list(hidden, list, sizeof list);
        printf("           CPU also reports, not usable here: %s\n", list);
    }
    if (hw->amx_permission == KT_HW_AMX_REFUSED)
        printf("AMX        tile data permission refused: %s\n", strerror(hw->amx_errno));
    else if (hw->amx_permission == KT_HW_AMX_GRANTED)
        printf("AMX        tile data permission granted\n");
    else
        printf("AMX        not applicable (no AMX on this CPU or OS)\n");
    printf("memory     %s available of %s\n", term_bytes(hw->ram_available, a, sizeof a),
           term_bytes(hw->ram_total, b, sizeof b));
    printf("NUMA       %d node%s\n", (int)hw->numa_nodes, hw->numa_nodes == 1 ? "" : "s");
    for (int32_t i = 0; i < hw->numa_nodes; i++) {
        const numa_view *v = &m->numa[i];
        cpu_ranges(v->cpus, v->n_cpus, list, sizeof list);
        printf("  node %-4d %d core%s, CPUs %s; %s memory, %s free\n", (int)v->node.os_index,
               (int)v->node.physical_cores, v->node.physical_cores == 1 ? "" : "s",
               list[0] ? list : "none",
               term_bytes(v->node.memory_total, a, sizeof a),
               term_bytes(v->node.memory_free, b, sizeof b));
    }
    printf("GPUs       %d", (int)hw->gpus);
    if (hw->gpus == 0)
        printf(" (%s)", hw->gpu_note);
    printf("\n");
    for (int32_t i = 0; i < m->n_gpus; i++) {
        const kt_hw_gpu *g = &m->gpus[i];
        printf("  GPU %-5d %s, sm_%d%d, %d SMs, %s memory, %s free\n", (int)g->index, g->name,
               (int)g->cc_major, (int)g->cc_minor, (int)g->multiprocessors,
               term_bytes(g->memory_total, a, sizeof a), term_bytes(g->memory_free, b, sizeof b));
        printf("            PCIe %s", g->pci_bus_id);
        if (g->pcie_max_gen > 0)
            printf(", gen%d x%d", (int)g->pcie_max_gen, (int)g->pcie_max_width);
        if (g->pcie_gen > 0 && (g->pcie_gen != g->pcie_max_gen || g->pcie_width !=
                                                                       g->pcie_max_width))
            printf(" (link now gen%d x%d)", (int)g->pcie_gen, (int)g->pcie_width);
        if (g->pcie_max_gen <= 0 && g->pcie_gen <= 0)
            printf(", link speed unknown");
        if (g->numa_node >= 0)
            printf(", NUMA node %d", (int)g->numa_node);
        printf("\n");
    }
    if (m->gpu_errors[0])
        printf("  error    %s\n", m->gpu_errors);
    cuda_version_text(hw->cuda_runtime, a, sizeof a);
    cuda_version_text(hw->cuda_driver, b, sizeof b);
    printf("CUDA       runtime %s, driver %s\n", a, b);

    uint64_t features = kt_features();
    printf("\nKernels per --kt-method: variant this build runs here, best the CPU allows\n");
    for (size_t i = 0; i < sizeof method_rules / sizeof method_rules[0]; i++) {
        method_choice c = choose_method(&method_rules[i], hw->isa, features);
        printf("  %-10s %-10s CPU: %-7s %s\n", kt_method_name(method_rules[i].method),
               c.variant ? c.variant : "not built", c.cpu_variant ? c.cpu_variant : "scalar",
               c.why);
    }

    printf("\nRecommended\n");
    printf("  --kt-cpuinfer %-5d        physical cores (%d) minus one per GPU (%d), at least 1\n",
           (int)recommended_cpuinfer(m), (int)hw->physical_cores, (int)hw->gpus);
    printf("  --kt-threadpool-count %-5d NUMA nodes with cores\n", (int)recommended_pools(m));
    /* what lib/moe does with several pools (kt_moe_info.pool_memory) */
    printf("  %s\n", hw->numa_nodes > 1
                         ? "(each pool gets its slice of every expert copied into its node's "
                           "memory: numa_alloc_onnode)"
                         : "(one NUMA node: one pool reads the weights in place; more pools "
                           "copy their slices into ordinary aligned memory)");

    printf("\nBuild      ");
    int first = 1;
    for (int bit = 0; bit < 64; bit++) {
        const char *name = (features >> bit) & 1 ? kt_feature_name(UINT64_C(1) << bit) : NULL;
        if (name) {
            printf("%s%s", first ? "" : " ", name);
            first = 0;
        }
    }
    printf("\n");
}

/* ---- JSON report ---------------------------------------------------------------------- */

static cJSON *isa_array(uint64_t bits)
{
    cJSON *arr = cJSON_CreateArray();
    for (int b = 0; b < 64 && arr; b++) {
        const char *name = (bits >> b) & 1 ? kt_hw_isa_name(UINT64_C(1) << b) : NULL;
        if (name)
            cJSON_AddItemToArray(arr, cJSON_CreateString(name));
    }
    return arr;
}

static cJSON *build_json(const machine *m)
{
    const kt_hw_info *hw = &m->hw;
    cJSON *root = cJSON_CreateObject();
    cJSON *lib = cJSON_AddObjectToObject(root, "libkt");
    cJSON_AddStringToObject(lib, "version", kt_version());
    cJSON *features = cJSON_AddArrayToObject(lib, "features");
    uint64_t f = kt_features();
    for (int bit = 0; bit < 64; bit++) {
        const char *name = (f >> bit) & 1 ? kt_feature_name(UINT64_C(1) << bit) : NULL;
        if (name)
            cJSON_AddItemToArray(features, cJSON_CreateString(name));
    }

    cJSON *cpu = cJSON_AddObjectToObject(root, "cpu");
    cJSON_AddStringToObject(cpu, "vendor", hw->cpu_vendor);
    cJSON_AddStringToObject(cpu, "model", hw->cpu_model);
    cJSON_AddNumberToObject(cpu, "physical_cores", hw->physical_cores);
    cJSON_AddNumberToObject(cpu, "logical_cpus", hw->logical_cpus);
    cJSON_AddItemToObject(cpu, "isa", isa_array(hw->isa));
    cJSON_AddItemToObject(cpu, "isa_cpuid", isa_array(hw->isa_cpuid));
    if (hw->isa_max[0])
        cJSON_AddStringToObject(cpu, "isa_max", hw->isa_max);
    else
        cJSON_AddNullToObject(cpu, "isa_max");
    cJSON_AddStringToObject(cpu, "amx_permission", amx_text(hw->amx_permission));
    if (hw->amx_permission == KT_HW_AMX_REFUSED)
        cJSON_AddStringToObject(cpu, "amx_error", strerror(hw->amx_errno));

    cJSON *mem = cJSON_AddObjectToObject(root, "memory");
    cJSON_AddNumberToObject(mem, "total_bytes", (double)hw->ram_total);
    cJSON_AddNumberToObject(mem, "available_bytes", (double)hw->ram_available);

    cJSON *numa = cJSON_AddArrayToObject(root, "numa_nodes");
    for (int32_t i = 0; i < hw->numa_nodes; i++) {
        const numa_view *v = &m->numa[i];
        cJSON *n = cJSON_CreateObject();
        cJSON_AddNumberToObject(n, "os_index", v->node.os_index);
        cJSON_AddNumberToObject(n, "physical_cores", v->node.physical_cores);
        cJSON_AddNumberToObject(n, "logical_cpus", v->node.logical_cpus);
        cJSON *cpus = cJSON_AddArrayToObject(n, "cpus");
        for (size_t c = 0; c < v->n_cpus; c++)
            cJSON_AddItemToArray(cpus, cJSON_CreateNumber(v->cpus[c]));
        cJSON_AddNumberToObject(n, "memory_total_bytes", (double)v->node.memory_total);
        cJSON_AddNumberToObject(n, "memory_free_bytes", (double)v->node.memory_free);
        cJSON_AddItemToArray(numa, n);
    }

    cJSON *gpus = cJSON_AddArrayToObject(root, "gpus");
    for (int32_t i = 0; i < m->n_gpus; i++) {
        const kt_hw_gpu *g = &m->gpus[i];
        cJSON *o = cJSON_CreateObject();
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", (int)g->cc_major, (int)g->cc_minor);
        cJSON_AddNumberToObject(o, "index", g->index);
        cJSON_AddStringToObject(o, "name", g->name);
        cJSON_AddStringToObject(o, "compute_capability", cc);
        cJSON_AddNumberToObject(o, "multiprocessors", g->multiprocessors);
        cJSON_AddNumberToObject(o, "memory_total_bytes", (double)g->memory_total);
        cJSON_AddNumberToObject(o, "memory_free_bytes", (double)g->memory_free);
        cJSON_AddStringToObject(o, "pci_bus_id", g->pci_bus_id);
        cJSON_AddNumberToObject(o, "pcie_gen", g->pcie_gen);
        cJSON_AddNumberToObject(o, "pcie_width", g->pcie_width);
        cJSON_AddNumberToObject(o, "pcie_max_gen", g->pcie_max_gen);
        cJSON_AddNumberToObject(o, "pcie_max_width", g->pcie_max_width);
        cJSON_AddNumberToObject(o, "numa_node", g->numa_node);
        cJSON_AddItemToArray(gpus, o);
    }
    if (hw->gpus == 0)
        cJSON_AddStringToObject(root, "gpu_note", hw->gpu_note);
    if (m->gpu_errors[0])
        cJSON_AddStringToObject(root, "gpu_errors", m->gpu_errors);
    cJSON *cuda = cJSON_AddObjectToObject(root, "cuda");
    cJSON_AddNumberToObject(cuda, "runtime_version", hw->cuda_runtime);
    cJSON_AddNumberToObject(cuda, "driver_version", hw->cuda_driver);

    cJSON *methods = cJSON_AddObjectToObject(root, "methods");
    for (size_t i = 0; i < sizeof method_rules / sizeof method_rules[0]; i++) {
        method_choice c = choose_method(&method_rules[i], hw->isa, f);
        cJSON *o = cJSON_AddObjectToObject(methods, kt_method_name(method_rules[i].method));
        if (c.variant)
            cJSON_AddStringToObject(o, "variant", c.variant);
        else
            cJSON_AddNullToObject(o, "variant");
        cJSON_AddStringToObject(o, "cpu_variant", c.cpu_variant ? c.cpu_variant : "scalar");
        cJSON_AddStringToObject(o, "why", c.why);
    }

    cJSON *rec = cJSON_AddObjectToObject(root, "recommended");
    cJSON_AddNumberToObject(rec, "kt_cpuinfer", recommended_cpuinfer(m));
    cJSON_AddNumberToObject(rec, "kt_threadpool_count", recommended_pools(m));
    return root;
}

/* ---- command -------------------------------------------------------------------------- */

static void doctor_usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run doctor [--json]\n"
            "\n"
            "Prints this machine as libkt detects it: CPU, usable instruction sets\n"
            "(CPUID, OS state, AMX permission, KT_ISA_MAX), cores, NUMA nodes, memory and\n"
            "GPUs; which kernel variant each --kt-method would use here, or why not; and\n"
            "the recommended --kt-cpuinfer and --kt-threadpool-count.\n"
            "\n"
            "Options:\n"
            "  --json        one JSON object on stdout instead of text\n"
            "  -h, --help    show this help\n");
}

int cmd_doctor(int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            doctor_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--json")) {
            json = true;
            continue;
        }
        fprintf(stderr, "kt-run doctor: unknown option '%s' (try kt-run doctor --help)\n",
                argv[i]);
        return 2;
    }

    machine m;
    if (machine_read(&m) != 0) {
        machine_free(&m);
        return 1;
    }
    int rc = 0;
    if (json) {
        cJSON *root = build_json(&m);
        char *text = root ? cJSON_Print(root) : NULL;
        if (text) {
            printf("%s\n", text);
            cJSON_free(text);
        } else {
            fprintf(stderr, "kt-run doctor: out of memory building JSON\n");
            rc = 1;
        }
        cJSON_Delete(root);
    } else {
        print_text(&m);
    }
    machine_free(&m);
    return rc;
}
