/* Cores, hardware threads and NUMA nodes this process may use (hwloc). */
#define _GNU_SOURCE
#include <hwloc.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "hw_internal.h"
#include "kt_internal.h"

static int compare_numa(const void *a, const void *b)
{
    const kt__hw_numa *x = a, *y = b;
    return (x->os_index > y->os_index) - (x->os_index < y->os_index);
}

static int compare_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Without hwloc's view: one node holding the CPUs of our affinity mask, each
 * counted as a core. */
static void fallback_topology(kt__hw_state *s)
{
    cpu_set_t mask;
    int32_t cpus = 0;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
        cpus = (int32_t)CPU_COUNT(&mask);
    } else {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        CPU_ZERO(&mask);
        for (long c = 0; c < n && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, &mask);
        cpus = (int32_t)CPU_COUNT(&mask);
    }
    if (cpus < 1) {
        cpus = 1;
        CPU_SET(0, &mask);
    }
    s->physical_cores = cpus;
    s->logical_cpus = cpus;
    s->n_numa = 0;
    s->numa = calloc(1, sizeof *s->numa);
    if (!s->numa)
        return;
    kt__hw_numa *node = &s->numa[0];
    node->cpus = calloc((size_t)cpus, sizeof *node->cpus);
    node->core_cpus = calloc((size_t)cpus, sizeof *node->core_cpus);
    if (!node->cpus || !node->core_cpus) {
        free(node->cpus);
        free(node->core_cpus);
        free(s->numa);
        s->numa = NULL;
        return;
    }
    for (int c = 0; c < CPU_SETSIZE && node->n_cpus < cpus; c++) {
        if (!CPU_ISSET(c, &mask))
            continue;
        node->cpus[node->n_cpus++] = c;
        node->core_cpus[node->n_cores++] = c;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    node->memory_total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    s->n_numa = 1;
}

/* Fills node->cpus and node->core_cpus from the allowed CPUs of the node. */
static int fill_node(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, hwloc_obj_t obj,
                     kt__hw_numa *node)
{
    node->os_index = (int32_t)obj->os_index;
    node->memory_total = obj->attr ? obj->attr->numanode.local_memory : 0;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return -1;
    if (obj->cpuset)
        hwloc_bitmap_and(set, obj->cpuset, allowed);
    int weight = hwloc_bitmap_weight(set);
    int n_all_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    node->cpus = calloc((size_t)(weight > 0 ? weight : 1), sizeof *node->cpus);
    node->core_cpus = calloc((size_t)(n_all_cores > 0 ? n_all_cores : 1),
                             sizeof *node->core_cpus);
    if (!node->cpus || !node->core_cpus) {
        free(node->cpus);
        free(node->core_cpus);
        *node = (kt__hw_numa){0};
        hwloc_bitmap_free(set);
        return -1;
    }
    unsigned id;
    hwloc_bitmap_foreach_begin(id, set) {
        node->cpus[node->n_cpus++] = (int32_t)id;
    }
    hwloc_bitmap_foreach_end();
    /* A core belongs to the node that holds its first allowed hardware thread. */
    for (int i = 0; i < n_all_cores; i++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
        if (!core || !core->cpuset)
            continue;
        hwloc_bitmap_t mine = hwloc_bitmap_alloc();
        if (!mine)
            break;
        hwloc_bitmap_and(mine, core->cpuset, allowed);
        int first = hwloc_bitmap_first(mine);
        hwloc_bitmap_free(mine);
        if (first >= 0 && hwloc_bitmap_isset(set, (unsigned)first))
            node->core_cpus[node->n_cores++] = first;
    }
    qsort(node->core_cpus, (size_t)node->n_cores, sizeof *node->core_cpus, compare_i32);
    hwloc_bitmap_free(set);
    return 0;
}

void kt__hw_detect_topology(kt__hw_state *s)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        fallback_topology(s);
        return;
    }
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        fallback_topology(s);
        return;
    }
    /* CPUs this process may use: the cgroup's allowed set within its affinity
     * mask (taskset, numactl --cpunodebind), so pools never pin outside it. */
    hwloc_bitmap_t allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (!allowed || !bound) {
        hwloc_bitmap_free(allowed);
        hwloc_bitmap_free(bound);
        hwloc_topology_destroy(topo);
        fallback_topology(s);
        return;
    }
    if (hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS) == 0 &&
        hwloc_bitmap_intersects(allowed, bound))
        hwloc_bitmap_and(allowed, allowed, bound);
    hwloc_bitmap_free(bound);
    int n_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    int n_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int n_pus = hwloc_bitmap_weight(allowed);
    if (n_nodes <= 0 || n_cores <= 0 || n_pus <= 0) {
        hwloc_bitmap_free(allowed);
        hwloc_topology_destroy(topo);
        fallback_topology(s);
        return;
    }
    s->numa = calloc((size_t)n_nodes, sizeof *s->numa);
    if (!s->numa) {
        hwloc_bitmap_free(allowed);
        hwloc_topology_destroy(topo);
        fallback_topology(s);
        return;
    }
    int32_t cores = 0;
    for (int i = 0; i < n_nodes; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        if (!obj || fill_node(topo, allowed, obj, &s->numa[s->n_numa]) != 0)
            continue;
        cores += s->numa[s->n_numa].n_cores;
        s->n_numa++;
    }
    qsort(s->numa, (size_t)s->n_numa, sizeof *s->numa, compare_numa);
    s->physical_cores = cores > 0 ? cores : n_cores;
    s->logical_cpus = n_pus;
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(topo);
    if (s->n_numa == 0) {
        free(s->numa);
        s->numa = NULL;
        fallback_topology(s);
    }
}
