/* libFuzzer harness: one safetensors file from memory (header, offsets, sizes). */
#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kt_st_set *set = NULL;
    if (kt__st_parse_memory(&set, data, size, "fuzz") != KT_OK)
        return 0;
    /* Everything a caller may touch: names, lookups, metadata, every data byte's range. */
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < kt__st_count(set); i++) {
        const kt_st_tensor *t = kt__st_at(set, i);
        if (kt__st_find(set, t->name) != t)
            __builtin_trap();
        const uint8_t *p = t->data;
        if (p < data || p + t->nbytes > data + size)
            __builtin_trap();
        if (t->nbytes)
            sink ^= p[0] ^ p[t->nbytes - 1];
    }
    (void)kt__st_metadata(set, "format");
    (void)sink;
    kt__st_close(set);
    return 0;
}
