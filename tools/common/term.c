#include "term.h"

#include <stdlib.h>
#include <unistd.h>

bool term_use_color(FILE *f)
{
    return isatty(fileno(f)) && getenv("NO_COLOR") == NULL;
}

const char *term_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}
