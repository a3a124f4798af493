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
