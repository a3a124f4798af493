/*
 * File helpers shared by the unit tests (test_gguf, test_model, test_safetensors,
 * test_template, test_tokenizer; the MoE tests through moe_test_util.h). Include after
 * <cmocka.h>.
 */
#ifndef KT_TEST_FILES_H
#define KT_TEST_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* One case of tests/data/hostile/MANIFEST (made by make_hostile.py), a line
 * "kind name status needle". */
typedef struct hostile_case {
    char kind[16], name[256];
    char needle[256]; /* what the error message must hold ('+' read as ' '); "-": nothing */
    char want[48];    /* "KT_OK" or "KT_ERR_<status>" */
    char path[700];   /* the case's file */
} hostile_case;

/* The MANIFEST, open for hostile_next(); the test fails if it cannot be opened. */
static inline FILE *hostile_manifest(void)
{
    char path[700];
    snprintf(path, sizeof path, "%s/hostile/MANIFEST", test_data());
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    return f;
}

/* The manifest's next case into c (comment lines skipped); 0 at its end. */
static inline int hostile_next(FILE *f, hostile_case *c)
{
    char line[700], status[32];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || sscanf(line, "%15s %255s %31s %255s", c->kind, c->name, status,
                                     c->needle) != 4)
            continue;
        for (char *p = c->needle; *p; p++)
            if (*p == '+')
                *p = ' ';
        snprintf(c->want, sizeof c->want, strcmp(status, "OK") ? "KT_ERR_%s" : "KT_OK", status);
        snprintf(c->path, sizeof c->path, "%s/hostile/%s", test_data(), c->name);
        return 1;
    }
    return 0;
}

/* A copy of file [size] with 1 + iter % 3 of its bytes overwritten at places and with values
 * drawn from the LCG *rng; the caller frees it. */
static inline unsigned char *flipped_copy(const unsigned char *file, size_t size, int iter,
                                          uint32_t *rng)
{
    unsigned char *copy = malloc(size);
    memcpy(copy, file, size);
    for (int k = 0; k < 1 + iter % 3; k++) {
        *rng = *rng * 1664525u + 1013904223u;
        size_t at = (*rng >> 8) % size;
        *rng = *rng * 1664525u + 1013904223u;
        copy[at] = (unsigned char)(*rng >> 24);
    }
    return copy;
}

/* An empty file from the mkstemp() template path ("/tmp/name_XXXXXX", completed in place);
 * the test fails if it cannot be made. The caller removes it. */
static inline void tmp_file_create(char *path)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

/* Writes text to path; the test fails if it cannot. */
static inline void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* A fresh directory $TMPDIR/<prefix>_XXXXXX (TMPDIR unset: /tmp) for a test group's files
 * (cmocka group setup: 0 on success); remove_tmp_root() deletes it with everything in it
 * (group teardown). */
static char tmp_root[256];

static inline int tmp_root_create(const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/%s_XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
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
