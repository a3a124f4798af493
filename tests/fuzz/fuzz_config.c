/* libFuzzer harness: config.json parsing from memory (lib/model/config.c),
 * then what an opened config-only model derives from it: per-layer queries,
 * the quantization ignore list and the memory estimate.
 * Build: clang -fsanitize=fuzzer,address,undefined (meson -Dfuzz=enabled).
 * Seeds: tests/fuzz/corpus/config/ (every family, both config styles). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kt/kt.h"
#include "fuzz_runtime.h"
#include "model/model_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt__config cfg;
    const kt_runtime *rt = quiet_runtime();
    if (kt__config_parse(&cfg, (const char *)data, size, "fuzz/config.json", rt) < 0)
        return 0;

    /* a config-only model over the parsed config */
    kt_model m;
    memset(&m, 0, sizeof m);
    m.rt = (kt_runtime *)rt;
    m.path = (char *)"fuzz";
    m.flags = KT_MODEL_OPEN_F_CONFIG_ONLY;
    m.cfg = cfg;

    kt_arch_info a;
    a.struct_size = sizeof a;
    if (kt_model_arch(&m, &a) == KT_OK) {
        for (uint32_t l = 0; l <= a.n_layers; l++) { /* one past the end on purpose */
            kt_layer_info li = KT_LAYER_INFO_INIT;
            (void)kt_model_layer(&m, l, &li);
            (void)kt_model_layer_is_moe(&m, l);
            (void)kt_model_layer_sliding_window(&m, l);
        }
        kt_tensor_view v;
        v.struct_size = sizeof v;
        (void)kt_model_tensor(&m, 0, KT_ROLE_EXPERT_UP, 0, &v);
    }
    (void)kt__config_quant_ignored(&m.cfg, "model.layers.0.mlp.experts.0.up_proj");
    (void)kt__config_quant_ignored(&m.cfg, "lm_head");

    kt_estimate_options eo = KT_ESTIMATE_OPTIONS_INIT;
    kt_memory_estimate e;
    e.struct_size = sizeof e;
    (void)kt_model_estimate(&m, &eo, &e);
    eo.n_gpus = 2;
    eo.gpu_experts_per_layer = a.n_routed_experts / 2;
    eo.context_length = 1024;
    (void)kt_model_estimate(&m, &eo, &e);

    kt__config_free(&m.cfg);
    return 0;
}
