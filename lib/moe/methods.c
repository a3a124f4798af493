/* Which CPU MoE methods this build has kernels for (feeds kt_features()). */
#include "kt_internal.h"

uint64_t kt__methods_compiled(void);

uint64_t kt__methods_compiled(void)
{
    /* cpu/ref always has every method (AMXINT4 runs on the RAWINT4 kernels);
     * SIMD and AMX sets add speed only. */
    return KT_FEATURE_METHOD_BF16 | KT_FEATURE_METHOD_FP8 | KT_FEATURE_METHOD_RAWINT4 |
           KT_FEATURE_METHOD_AMXINT8 | KT_FEATURE_METHOD_AMXINT4 | KT_FEATURE_METHOD_LLAMAFILE;
}
