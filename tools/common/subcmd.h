/* Command tables of the multi-command tools (kt-run COMMAND, kt-bench COMMAND):
 * the usage text, --help, --version and the dispatch they share. */
#ifndef KT_TOOLS_SUBCMD_H
#define KT_TOOLS_SUBCMD_H

#include <stddef.h>
#include <stdio.h>

typedef struct subcmd {
    const char *name;
    int (*fn)(int argc, char **argv); /* argv[0] is the command name; returns the exit code */
    const char *summary;
} subcmd;

typedef struct subcmd_tool {
    const char *name;     /* "kt-run" */
    const char *synopsis; /* the usage text above the command list, newline-terminated */
    int name_width;       /* column width of the command names in the list */
    const subcmd *commands;
    size_t n_commands;
} subcmd_tool;

/* The synopsis, the command list and the common options. */
void subcmd_usage(FILE *f, const subcmd_tool *tool);

/* What every tool does with argv[1] first: none (usage on stderr, 2), -h / --help / help
 * (usage, 0), --version / -V (the tool's and libkt's versions, 0). Returns that exit code,
 * or -1 when argv[1] is none of these. */
int subcmd_common(const subcmd_tool *tool, int argc, char **argv);

/* The command named argv[1], or NULL. */
const subcmd *subcmd_find(const subcmd_tool *tool, const char *name);

#endif
