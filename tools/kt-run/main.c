/* kt-run: one-shot generation, evaluation and machine/model inspection. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <kt/kt.h>

#include "commands.h"
#include "subcmd.h"

static const subcmd commands[] = {
    {"doctor", cmd_doctor, "check this machine: CPU, ISA, NUMA, memory, GPUs, kernel choice"},
    {"generate", cmd_generate, "evaluate a prompt, write logits, generate (the default)"},
    {"perplexity", cmd_perplexity, "held-out perplexity over windows, like llama.cpp's"},
    {"inspect", cmd_inspect, "what a model holds: architecture, tensors by type and role, memory"},
    {"tokenize", cmd_tokenize, "text to token ids as JSON (--decode: ids to text)"},
    {"template", cmd_template, "render a chat template over messages, print the exact prompt"},
    {"plan", cmd_plan, "resolved plan of a run, without loading weights (= --dry-run)"},
};

static const subcmd_tool kt_run_tool = {
    "kt-run",
    "usage: kt-run [MODEL_DIR | --model DIR] -p PROMPT [OPTIONS]   generate\n"
    "       kt-run COMMAND [OPTIONS]\n"
    "\n"
    "Runs Mixture-of-Experts language models with libkt (experts split\n"
    "between GPU and CPU). Without a model, the bundled demo model is used:\n"
    "  kt-run -p \"The json module can be used to\"\n",
    12,
    commands,
    sizeof commands / sizeof commands[0],
};

int main(int argc, char **argv)
{
    int rc = subcmd_common(&kt_run_tool, argc, argv);
    if (rc >= 0)
        return rc;
    const char *first = argv[1];
    /* `kt-run --dry-run ALIAS|DIR ...` (also after `generate`): the plan, nothing loaded */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--dry-run"))
            return strcmp(first, "generate") ? cmd_plan(argc, argv)
                                             : cmd_plan(argc - 1, argv + 1);
    const subcmd *cmd = subcmd_find(&kt_run_tool, first);
    if (cmd)
        return cmd->fn(argc - 1, argv + 1);
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
