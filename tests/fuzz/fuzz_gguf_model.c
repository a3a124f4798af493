/* libFuzzer harness: a GGUF file from memory mapped to a model (lib/model/
 * gguf_model.c): llama.cpp metadata -> kt_arch_info, tensor names -> views, then
 * every view read end to end and the estimate. Seeds: tiny models of each GGUF
 * architecture (corpus/gguf_model/, made by make_gguf_model_seeds.py). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/gguf.h"
#include "kt/kt.h"
#include "fuzz_runtime.h"
#include "model/model_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_gguf *g = NULL;
    if (kt__gguf_parse_memory(&g, data, size, "fuzz.gguf") < 0)
        return 0;
    kt_model *m = kt__calloc(1, sizeof *m);
    if (!m) {
        kt__gguf_close(g);
        return 0;
    }
    m->rt = quiet_runtime();
    m->path = kt__strdup("fuzz.gguf");
    m->format = KT_FORMAT_GGUF;
    m->gguf = g; /* owned by the model from here */
    if (m->path && kt__model_open_gguf(m) == KT_OK) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < kt_model_n_tensors(m); i++) {
            kt_tensor_view v;
            v.struct_size = sizeof v;
            if (kt_model_tensor_at(m, i, &v) == KT_OK && v.nbytes)
                sink ^= ((const uint8_t *)v.data)[0] ^ ((const uint8_t *)v.data)[v.nbytes - 1];
        }
        kt_estimate_options eo = KT_ESTIMATE_OPTIONS_INIT;
        eo.n_gpus = 1;
        eo.gpu_experts_per_layer = 1;
        eo.context_length = 64;
        kt_memory_estimate e;
        e.struct_size = sizeof e;
        (void)kt_model_estimate(m, &eo, &e);
        (void)sink;
    }
    kt_model_free(m);
    return 0;
}
