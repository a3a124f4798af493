/* A runtime that logs nothing, for the fuzz harnesses (fuzz_config, fuzz_gguf_model):
 * the parsers' warnings about hostile input would drown libFuzzer's output. Created on
 * first use; NULL when that fails. */
#ifndef KT_FUZZ_RUNTIME_H
#define KT_FUZZ_RUNTIME_H

#include "kt/kt.h"

static kt_runtime *quiet_runtime(void)
{
    static kt_runtime *rt;
    if (!rt) {
        kt_runtime_options o = KT_RUNTIME_OPTIONS_INIT;
        o.log_level = KT_LOG_NONE;
        o.n_threads = 1;
        if (kt_runtime_create(&rt, &o) < 0)
            rt = NULL;
    }
    return rt;
}

#endif /* KT_FUZZ_RUNTIME_H */
