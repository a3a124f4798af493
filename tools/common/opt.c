#include "opt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool opt_match(int argc, char **argv, int *i, const char *name, bool needs_value,
               const char **value, bool *bad)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return false;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return true;
    }
    if (arg[n] != '\0')
        return false;
    *value = NULL;
    if (needs_value) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", name);
            *bad = true;
            return true;
        }
        *i += 1;
        *value = argv[*i];
    }
    return true;
}

bool opt_parse_i64(const char *tool, const char *flag, const char *text, int64_t lo, int64_t hi,
                   int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text ? text : "", &end, 10);
    if (!text || !*text || *end || errno) {
        fprintf(stderr, "%s: %s: '%s' is not an integer\n", tool, flag, text ? text : "");
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "%s: %s: %lld is out of range %lld..%lld\n", tool, flag, v,
                (long long)lo, (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool opt_parse_f64(const char *tool, const char *flag, const char *text, double lo, double hi,
                   double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text ? text : "", &end);
    if (!text || !*text || *end || errno || isnan(v)) {
        fprintf(stderr, "%s: %s: '%s' is not a number\n", tool, flag, text ? text : "");
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "%s: %s: %g is out of range %g..%g\n", tool, flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool opt_i64(const char *tool, int argc, char **argv, int *i, const char *name, int64_t lo,
             int64_t hi, int64_t *out, bool *bad)
{
    const char *v = NULL;
    if (!opt_match(argc, argv, i, name, true, &v, bad))
        return false;
    if (!*bad && !opt_parse_i64(tool, name, v, lo, hi, out))
        *bad = true;
    return true;
}

bool opt_f64(const char *tool, int argc, char **argv, int *i, const char *name, double lo,
             double hi, double *out, bool *bad)
{
    const char *v = NULL;
    if (!opt_match(argc, argv, i, name, true, &v, bad))
        return false;
    if (!*bad && !opt_parse_f64(tool, name, v, lo, hi, out))
        *bad = true;
    return true;
}
