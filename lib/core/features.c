/* kt_features(): what this build contains. */
#include "kt_internal.h"

/* Defined by the MoE module: KT_FEATURE_METHOD_* bits whose kernels are compiled. */
uint64_t kt__methods_compiled(void);

uint64_t kt_features(void)
{
    uint64_t f = KT_FEATURE_HWLOC | KT_FEATURE_FORMAT_SAFETENSORS | KT_FEATURE_FORMAT_GGUF;
#if KT_HAVE_CUDA
    f |= KT_FEATURE_CUDA;
#endif
#if KT_HAVE_ONEDNN
    f |= KT_FEATURE_ONEDNN;
#endif
#if KT_HAVE_NUMA
    f |= KT_FEATURE_NUMA;
#endif
#if KT_HAVE_ISA_AVX2
    f |= KT_FEATURE_ISA_AVX2;
#endif
#if KT_HAVE_ISA_AVX512
    f |= KT_FEATURE_ISA_AVX512;
#endif
#if KT_HAVE_ISA_AMX
    f |= KT_FEATURE_ISA_AMX;
#endif
    f |= kt__methods_compiled();
    return f;
}

static const struct {
    uint64_t bit;
    const char *name;
} feature_names[] = {
    {KT_FEATURE_CUDA, "cuda"},
    {KT_FEATURE_ONEDNN, "onednn"},
    {KT_FEATURE_NUMA, "numa"},
    {KT_FEATURE_HWLOC, "hwloc"},
    {KT_FEATURE_ISA_AVX2, "avx2"},
    {KT_FEATURE_ISA_AVX512, "avx512"},
    {KT_FEATURE_ISA_AMX, "amx"},
    {KT_FEATURE_METHOD_BF16, "method:BF16"},
    {KT_FEATURE_METHOD_FP8, "method:FP8"},
    {KT_FEATURE_METHOD_RAWINT4, "method:RAWINT4"},
    {KT_FEATURE_METHOD_AMXINT8, "method:AMXINT8"},
    {KT_FEATURE_METHOD_AMXINT4, "method:AMXINT4"},
    {KT_FEATURE_METHOD_LLAMAFILE, "method:LLAMAFILE"},
    {KT_FEATURE_FORMAT_SAFETENSORS, "format:safetensors"},
    {KT_FEATURE_FORMAT_GGUF, "format:gguf"},
};

const char *kt_feature_name(uint64_t feature)
{
    for (size_t i = 0; i < KT_ARRAY_LEN(feature_names); i++)
        if (feature_names[i].bit == feature)
            return feature_names[i].name;
    return NULL;
}
