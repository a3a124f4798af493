/* GPUs through cuda/kt_cuda.h; PCIe link and NUMA node of each from sysfs
 * (NVML is not used: the PCI bus id from the CUDA runtime names the device). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hw_internal.h"
#include "kt_cuda.h"
#include "kt_internal.h"

static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static int32_t gpu_count;
static char gpu_note[160];
static int32_t cuda_runtime, cuda_driver;

static void detect_gpus(void)
{
    int32_t n = 0;
    kt__cuda_versions(&cuda_runtime, &cuda_driver);
    if (kt__cuda_device_count(&n, gpu_note, sizeof gpu_note) != 0 || n < 0)
        n = 0;
    gpu_count = n;
    if (n > 0) {
        gpu_note[0] = '\0';
    } else if (!gpu_note[0]) {
        snprintf(gpu_note, sizeof gpu_note, "no CUDA device");
    } else if (kt__cuda_built() && cuda_driver == 0) {
        /* The runtime reports a missing driver as "driver version insufficient". */
        char cause[sizeof gpu_note];
        memcpy(cause, gpu_note, sizeof cause);
        /* Keep "cudaGetDeviceCount: cudaErrorX", drop the misleading description. */
        size_t len = strcspn(cause, "(");
        while (len > 0 && cause[len - 1] == ' ')
            len--;
        cause[len] = '\0';
        snprintf(gpu_note, sizeof gpu_note, "no NVIDIA driver (%.*s)",
                 (int)(sizeof gpu_note - 24), cause);
    }
}

int32_t kt__hw_gpu_count(const char **note)
{
    pthread_once(&gpu_once, detect_gpus);
    if (note)
        *note = gpu_note;
    return gpu_count;
}

void kt__hw_cuda_versions(int32_t *runtime, int32_t *driver)
{
    pthread_once(&gpu_once, detect_gpus);
    *runtime = cuda_runtime;
    *driver = cuda_driver;
}

/* First line of /sys/bus/pci/devices/<bus_id>/<name>, or "" if unreadable. */
static void read_pci_attr(const char *bus_id, const char *name, char *out, size_t size)
{
    char path[160];
    out[0] = '\0';
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/%s", bus_id, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(out, (int)size, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* "16.0 GT/s PCIe" -> 4. Each generation doubles the transfer rate from gen 3's 8 GT/s. */
static int32_t pcie_gen_from_speed(const char *text)
{
    double gts = strtod(text, NULL);
    static const struct {
        double gts;
        int32_t gen;
    } gens[] = {{2.5, 1}, {5.0, 2}, {8.0, 3}, {16.0, 4}, {32.0, 5}, {64.0, 6}, {128.0, 7}};
    for (size_t i = 0; i < KT_ARRAY_LEN(gens); i++)
        if (gts > gens[i].gts * 0.9 && gts < gens[i].gts * 1.1)
            return gens[i].gen;
    return 0;
}

static int32_t read_pci_int(const char *bus_id, const char *name, int32_t unknown)
{
    char text[64];
    read_pci_attr(bus_id, name, text, sizeof text);
    if (!text[0])
        return unknown;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    return end != text ? (int32_t)v : unknown;
}

/* Fills a full-size kt_hw_gpu for device `index` (checked by the caller). */
kt_status kt__hw_gpu_fill(kt_hw_gpu *g, int32_t index)
{
    kt__cuda_props p;
    char err[256] = "";
    if (kt__cuda_device_props(index, &p, err, sizeof err) != 0)
        return kt__error(KT_ERR_DEVICE, "GPU %d: %s", (int)index, err);
    g->index = index;
    g->memory_total = p.memory_total;
    g->memory_free = p.memory_free;
    g->cc_major = p.cc_major;
    g->cc_minor = p.cc_minor;
    g->multiprocessors = p.multiprocessors;
    snprintf(g->name, sizeof g->name, "%s", p.name);

    /* Normalise to sysfs's "dddd:bb:dd.f" whatever width the runtime gave the domain. */
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(p.pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) == 4)
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    else
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", p.pci_bus_id);

    char text[64];
    read_pci_attr(g->pci_bus_id, "current_link_speed", text, sizeof text);
    g->pcie_gen = pcie_gen_from_speed(text);
    read_pci_attr(g->pci_bus_id, "max_link_speed", text, sizeof text);
    g->pcie_max_gen = pcie_gen_from_speed(text);
    g->pcie_width = read_pci_int(g->pci_bus_id, "current_link_width", 0);
    g->pcie_max_width = read_pci_int(g->pci_bus_id, "max_link_width", 0);
    g->numa_node = read_pci_int(g->pci_bus_id, "numa_node", -1);
    return KT_OK;
}
