/* Terminal helpers shared by the kt-* tools. */
#ifndef KT_TOOLS_TERM_H
#define KT_TOOLS_TERM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* True when `f` is a terminal and NO_COLOR is unset. */
bool term_use_color(FILE *f);
/* Human byte count: "1.5 GiB". Writes into buf (>= 32 bytes) and returns it. */
const char *term_bytes(uint64_t bytes, char *buf, size_t size);

#endif
