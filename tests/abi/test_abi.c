/* ABI pins: the size of every public struct (struct_sizes.h), the struct_size
 * tag at offset 0 of tagged structs, and that no public struct is missing from
 * the list (the headers in include/kt/ are scanned). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <kt/kt.h>

typedef struct pinned {
    const char *name;
    size_t actual;
    size_t expected;
    size_t tag_offset; /* offsetof(struct_size), or SIZE_MAX when untagged */
    size_t tag_size;
} pinned;

#define KT_ABI_TAGGED(type, size)                                                             \
    {#type, sizeof(type), (size), offsetof(type, struct_size),                                \
     sizeof(((type *)0)->struct_size)},
#define KT_ABI_PLAIN(type, size) {#type, sizeof(type), (size), SIZE_MAX, 0},

static const pinned pins[] = {
#include "struct_sizes.h"
};

static const pinned *find_pin(const char *name)
{
    for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++)
        if (!strcmp(pins[i].name, name))
            return &pins[i];
    return NULL;
}

static void test_struct_sizes(void **state)
{
    (void)state;
#if !(defined(__x86_64__) && defined(__LP64__))
    skip(); /* the numbers are for x86-64 LP64 */
#endif
    int bad = 0;
    for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
        const pinned *p = &pins[i];
        if (p->actual != p->expected) {
            print_error("%s: sizeof is %zu, pinned %zu (an ABI change: append fields only, "
                        "then update tests/abi/struct_sizes.h)\n",
                        p->name, p->actual, p->expected);
            bad++;
        }
        if (p->tag_offset != SIZE_MAX && (p->tag_offset != 0 || p->tag_size != 4)) {
            print_error("%s: struct_size must be the first member, uint32_t\n", p->name);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* Struct names defined in one header: `typedef struct [tag] {` ... `} kt_x;`
 * and `struct kt_x {` at the start of a line. */
static int check_header(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        print_error("cannot open %s\n", path);
        return 1;
    }
    char line[512];
    int in_struct = 0, missing = 0;
    while (fgets(line, sizeof line, f)) {
        char name[128] = "";
        if (!strncmp(line, "typedef struct", 14) && strchr(line, '{')) {
            in_struct = 1;
            continue;
        }
        if (!strncmp(line, "struct kt_", 10) && strchr(line, '{')) {
            sscanf(line, "struct %127[a-z0-9_]", name);
        } else if (in_struct && line[0] == '}') {
            in_struct = 0;
            sscanf(line, "} %127[a-z0-9_]", name);
        }
        if (name[0] && !find_pin(name)) {
            print_error("%s: public struct %s is not pinned in tests/abi/struct_sizes.h\n", path,
                        name);
            missing++;
        }
    }
    fclose(f);
    return missing;
}

static void test_every_struct_pinned(void **state)
{
    (void)state;
    const char *root = getenv("KT_SOURCE_ROOT");
    if (!root)
        skip();
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/include/kt", root);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int missing = 0, headers = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 3 || strcmp(e->d_name + n - 2, ".h") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        missing += check_header(path);
        headers++;
    }
    closedir(d);
    assert_true(headers > 3);
    assert_int_equal(missing, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_sizes),
        cmocka_unit_test(test_every_struct_pinned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
