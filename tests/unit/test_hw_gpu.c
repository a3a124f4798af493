/* CUDA devices (suite "cuda"): each device libkt reports runs a kernel from this
 * build's sm_XX code and gets the right answer. Exits 77 (skipped) without a
 * CUDA build or device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kt/hw.h"
#include "kt_cuda.h"
#include "kt_internal.h"

static void test_selftest_every_device(void **state)
{
    (void)state;
    kt_hw_info hw = KT_HW_INFO_INIT;
    assert_int_equal(kt_hw_query(&hw), KT_OK);
    for (int32_t i = 0; i < hw.gpus; i++) {
        kt_hw_gpu g = KT_HW_GPU_INIT;
        assert_int_equal(kt_hw_gpu_query(&g, i), KT_OK);
        char err[256] = "";
        int rc = kt__cuda_selftest(i, err, sizeof err);
        if (rc != 0)
            fail_msg("GPU %d (%s, sm_%d%d): %s", (int)i, g.name, (int)g.cc_major,
                     (int)g.cc_minor, err);
        printf("GPU %d: %s sm_%d%d, %d SMs, PCIe %s gen%d x%d (max gen%d x%d): selftest ok\n",
               (int)i, g.name, (int)g.cc_major, (int)g.cc_minor, (int)g.multiprocessors,
               g.pci_bus_id, (int)g.pcie_gen, (int)g.pcie_width, (int)g.pcie_max_gen,
               (int)g.pcie_max_width);
    }
    char err[256] = "";
    assert_int_not_equal(kt__cuda_selftest(hw.gpus, err, sizeof err), 0); /* no such device */
    assert_true(err[0] != '\0');
}

int main(void)
{
    kt_hw_info hw = KT_HW_INFO_INIT;
    if (kt_hw_query(&hw) != KT_OK || hw.gpus == 0) {
        printf("skipped: no CUDA device (%s)\n", hw.gpu_note);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selftest_every_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
