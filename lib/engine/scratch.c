/* Scratch memory of the forward pass: a list of blocks handed out by bumping
 * a pointer and recycled as a whole at the start of every forward call. The
 * blocks are kept, so once the largest chunk has run (warm-up) the forward
 * pass allocates nothing. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

struct kt__scratch_block {
    struct kt__scratch_block *next;
    size_t size, used;
    unsigned char *data; /* 64-byte aligned */
};

void *kt__scratch_alloc(kt__scratch *a, size_t n, size_t size)
{
    uint64_t bytes;
    if (!kt__mul_ok(n, size, &bytes) || bytes > SIZE_MAX / 2) {
        kt__error(KT_ERR_NOMEM, "engine: scratch request of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    size_t need = ((size_t)bytes + 63) & ~(size_t)63;
    if (!need)
        need = 64;
    for (kt__scratch_block *b = a->cur; b; b = b->next) {
        if (b->size - b->used >= need) {
            void *p = b->data + b->used;
            b->used += need;
            a->cur = b;
            return p;
        }
    }
    /* a new block, at least twice the last one, appended to the list */
    size_t last = 0;
    kt__scratch_block *tail = a->head;
    while (tail && tail->next)
        tail = tail->next;
    if (tail)
        last = tail->size;
    size_t sz = KT_MAX(need, KT_MAX((size_t)1 << 20, 2 * last));
    kt__scratch_block *b = kt__calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->data = kt__malloc_aligned(sz, 64);
    if (!b->data) {
        kt__free(b);
        return NULL;
    }
    b->size = sz;
    b->used = need;
    if (tail)
        tail->next = b;
    else
        a->head = b;
    a->cur = b;
    return b->data;
}

kt__scratch_mark kt__scratch_get_mark(const kt__scratch *a)
{
    kt__scratch_mark m = {a->cur, a->cur ? a->cur->used : 0};
    return m;
}

void kt__scratch_release(kt__scratch *a, kt__scratch_mark m)
{
    if (!m.block) {
        kt__scratch_reset(a);
        return;
    }
    m.block->used = m.used;
    for (kt__scratch_block *b = m.block->next; b; b = b->next)
        b->used = 0;
    a->cur = m.block;
}

void kt__scratch_reset(kt__scratch *a)
{
    for (kt__scratch_block *b = a->head; b; b = b->next)
        b->used = 0;
    a->cur = a->head;
}

void kt__scratch_free(kt__scratch *a)
{
    kt__scratch_block *b = a->head;
    while (b) {
        kt__scratch_block *n = b->next;
        kt__free_aligned(b->data);
        kt__free(b);
        b = n;
    }
    a->head = a->cur = NULL;
}
