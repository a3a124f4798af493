/*
 * File helpers shared by the unit tests (test_gguf, test_model, test_safetensors,
 * test_template, test_tokenizer). Include after <cmocka.h>.
 */
#ifndef KT_TEST_FILES_H
#define KT_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The test data root: $KT_TEST_DATA, else tests/data. */
static inline const char *test_data(void)
{
    const char *d = getenv("KT_TEST_DATA");
    return d ? d : "tests/data";
}

/* The whole file with a NUL after it; *size (when size is not NULL) its length. NULL when it
 * cannot be read. The caller frees it. */
static inline char *read_whole_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = '\0';
        if (size)
            *size = (size_t)n;
    }
    return p;
}

/* Writes text to path; the test fails if it cannot. */
static inline void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* A fresh directory /tmp/<prefix>_XXXXXX for a test group's files (cmocka group setup:
 * 0 on success); remove_tmp_root() deletes it with everything in it (group teardown). */
static char tmp_root[256];

static inline int tmp_root_create(const char *prefix)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/%s_XXXXXX", prefix);
    return mkdtemp(tmp_root) ? 0 : -1;
}

static inline int remove_tmp_root(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
