/* libFuzzer harness: a sharded safetensors directory's index. The input is
 * model.safetensors.index.json; the directory holds two fixed valid shards
 * (s1.safetensors: a, s2.safetensors: b) and a subdirectory, so shard names,
 * paths leaving the directory, aliases and tensor/shard mismatches are explored. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void put(const char *name, const void *bytes, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n)
        abort();
    fclose(f);
}

static void put_shard(const char *name, const char *header, size_t data_len)
{
    unsigned char buf[256] = {0};
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    put(name, buf, 8 + n + data_len);
}

static void cleanup(void)
{
    static const char *const names[] = {"s1.safetensors", "s2.safetensors", "sub/s3.safetensors",
                                        "model.safetensors.index.json", "sub", ""};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/kt_fuzz_st_index_XXXXXX");
    if (!mkdtemp(dir))
        abort();
    put_shard("s1.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
              8);
    put_shard("s2.safetensors", "{\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
              4);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(sub, 0755);
    put_shard("sub/s3.safetensors", "{\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
              1);
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    put("model.safetensors.index.json", data, size);
    kt_st_set *set = NULL;
    if (kt__st_open_dir(&set, dir) != KT_OK)
        return 0;
    for (size_t i = 0; i < kt__st_count(set); i++) {
        const kt_st_tensor *t = kt__st_at(set, i);
        if (kt__st_find(set, t->name) != t || t->file_index >= kt__st_file_count(set) ||
            strncmp(kt__st_file_path(set, t->file_index), dir, strlen(dir)) != 0)
            __builtin_trap();
    }
    kt__st_close(set);
    return 0;
}
