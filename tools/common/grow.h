/* A growable array for the kt-* tools (plain realloc; the library has its own kt__grow). */
#ifndef KT_TOOLS_GROW_H
#define KT_TOOLS_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Room for one more element in a realloc'ed array of n elements (elem bytes each) and
 * capacity *cap, which doubles from first_cap when full. Returns the array, moved or not, or
 * NULL when out of memory (the old array and *cap then unchanged). */
static inline void *tool_grow(void *items, size_t n, size_t *cap, size_t elem, size_t first_cap)
{
    if (n < *cap)
        return items;
    size_t new_cap = *cap ? *cap * 2 : first_cap;
    if (new_cap > SIZE_MAX / elem)
        return NULL;
    void *grown = realloc(items, new_cap * elem);
    if (grown)
        *cap = new_cap;
    return grown;
}

#endif
