/* Tiny option helpers shared by the kt-* tools (public libkt API only). */
#ifndef KT_TOOLS_OPT_H
#define KT_TOOLS_OPT_H

#include <stdbool.h>
#include <stdint.h>

/* Matches "--name", "--name=value" or "--name value". On a match returns true
 * and sets *value (NULL for a flag without "=" when needs_value is false).
 * Advances *i past a separate value. Prints an error and sets *bad when a
 * required value is missing. */
bool opt_match(int argc, char **argv, int *i, const char *name, bool needs_value,
               const char **value, bool *bad);

/* Strict number parsing with range checks; print "tool: --flag: ..." on error. */
bool opt_parse_i64(const char *tool, const char *flag, const char *text, int64_t lo, int64_t hi,
                   int64_t *out);
bool opt_parse_f64(const char *tool, const char *flag, const char *text, double lo, double hi,
                   double *out);

/* opt_match and opt_parse_i64 / opt_parse_f64 in one: true when argv[*i] is the option name
 * (its value taken); *bad set, the error printed, when the value is missing or wrong. */
bool opt_i64(const char *tool, int argc, char **argv, int *i, const char *name, int64_t lo,
             int64_t hi, int64_t *out, bool *bad);
bool opt_f64(const char *tool, int argc, char **argv, int *i, const char *name, double lo,
             double hi, double *out, bool *bad);

#endif
