/* Command tables of the multi-command tools (see subcmd.h). */
#include "subcmd.h"

#include <string.h>

#include <kt/kt.h>

void subcmd_usage(FILE *f, const subcmd_tool *tool)
{
    fprintf(f, "%s\nCommands:\n", tool->synopsis);
    for (size_t i = 0; i < tool->n_commands; i++)
        fprintf(f, "  %-*s %s\n", tool->name_width, tool->commands[i].name,
                tool->commands[i].summary);
    fprintf(f,
            "\n"
            "Options:\n"
            "  -h, --help     show this help (COMMAND --help for a command's options)\n"
            "  --version      print %s's and libkt's versions\n",
            tool->name);
}

int subcmd_common(const subcmd_tool *tool, int argc, char **argv)
{
    if (argc < 2) {
        subcmd_usage(stderr, tool);
        return 2;
    }
    const char *first = argv[1];
    if (!strcmp(first, "-h") || !strcmp(first, "--help") || !strcmp(first, "help")) {
        subcmd_usage(stdout, tool);
        return 0;
    }
    if (!strcmp(first, "--version") || !strcmp(first, "-V")) {
        printf("%s %s (libkt %s)\n", tool->name, KT_VERSION_STRING, kt_version());
        return 0;
    }
    return -1;
}

const subcmd *subcmd_find(const subcmd_tool *tool, const char *name)
{
    for (size_t i = 0; i < tool->n_commands; i++)
        if (!strcmp(name, tool->commands[i].name))
            return &tool->commands[i];
    return NULL;
}
