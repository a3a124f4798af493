/* Prints libkt's version, build features and the machine as libkt sees it: the
 * smallest program that links libkt. Public API only. Build out of tree with:
 *     cc info.c $(pkg-config --cflags --libs libkt) */
#include <stdio.h>

#include <kt/kt.h>

int main(void)
{
    kt_runtime *rt = NULL;
    kt_status st = kt_runtime_create(&rt, NULL);
    if (st < 0) {
        fprintf(stderr, "libkt: %s: %s\n", kt_status_str(st), kt_last_error());
        return 1;
    }
    printf("libkt %s (headers %s), %d worker threads\n", kt_version(), KT_VERSION_STRING,
           kt_runtime_n_threads(rt));
    uint64_t f = kt_features();
    printf("features:");
    for (int bit = 0; bit < 64; bit++)
        if (f & (UINT64_C(1) << bit))
            printf(" %s", kt_feature_name(UINT64_C(1) << bit));
    printf("\n");

    kt_hw_info hw = KT_HW_INFO_INIT;
    if (kt_hw_query(&hw) < 0) {
        fprintf(stderr, "libkt: %s\n", kt_last_error());
        kt_runtime_free(rt);
        return 1;
    }
    printf("cpu: %s, %d cores, %d NUMA node(s), %d GPU(s)\n", hw.cpu_model,
           (int)hw.physical_cores, (int)hw.numa_nodes, (int)hw.gpus);
    printf("isa:");
    for (int bit = 0; bit < 64; bit++)
        if (hw.isa & (UINT64_C(1) << bit))
            printf(" %s", kt_hw_isa_name(UINT64_C(1) << bit));
    printf("\n");
    kt_runtime_free(rt);
    return 0;
}
