/* kt-run: one-shot generation, evaluation and machine/model inspection. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <kt/kt.h>

#include "commands.h"

static const struct {
    const char *name;
    kt_run_cmd_fn fn;
    const char *summary;
} commands[] = {
    {"doctor", cmd_doctor, "check this machine: CPU, ISA, NUMA, memory, GPUs, kernel choice"},
    {"generate", cmd_generate, "evaluate a prompt, write logits, generate (the default)"},
    {"perplexity", cmd_perplexity, "held-out perplexity over windows, like llama.cpp's"},
    {"inspect", cmd_inspect, "what a model holds: architecture, tensors by type and role, memory"},
    {"tokenize", cmd_tokenize, "text to token ids as JSON (--decode: ids to text)"},
    {"template", cmd_template, "render a chat template over messages, print the exact prompt"},
    {"plan", cmd_plan, "resolved plan of a run, without loading weights (= --dry-run)"},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kt-run [MODEL_DIR | --model DIR] -p PROMPT [OPTIONS]   generate\n"
            "       kt-run COMMAND [OPTIONS]\n"
            "\n"
            "Runs Mixture-of-Experts language models with libkt (experts split\n"
            "between GPU and CPU). Without a model, the bundled demo model is used:\n"
            "  kt-run -p \"The json module can be used to\"\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n"
            "Options:\n"
            "  -h, --help     show this help (COMMAND --help for a command's options)\n"
            "  --version      print kt-run's and libkt's versions\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *first = argv[1];
    if (!strcmp(first, "-h") || !strcmp(first, "--help") || !strcmp(first, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(first, "--version") || !strcmp(first, "-V")) {
        printf("kt-run %s (libkt %s)\n", KT_VERSION_STRING, kt_version());
        return 0;
    }
    /* `kt-run --dry-run ALIAS|DIR ...` (also after `generate`): the plan, nothing loaded */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--dry-run"))
            return strcmp(first, "generate") ? cmd_plan(argc, argv)
                                             : cmd_plan(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(first, commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    /* no subcommand: `kt-run --model DIR ...` or `kt-run DIR ...` generates */
    struct stat sb;
    if (first[0] == '-' || (stat(first, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return cmd_generate(argc - 1, argv + 1);
    if (strchr(first, '/') || !strcmp(first, ".") || !strcmp(first, ".."))
        fprintf(stderr, "kt-run: %s: no such model directory\n", first);
    else
        fprintf(stderr, "kt-run: unknown command or option '%s' (try kt-run --help)\n",
                first);
    return 2;
}
