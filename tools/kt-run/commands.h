/* kt-run subcommands: each lives in its own cmd_<name>.c and is listed in
 * main.c's table. argv[0] is the subcommand name. Return the process exit code. */
#ifndef KT_RUN_COMMANDS_H
#define KT_RUN_COMMANDS_H

typedef int (*kt_run_cmd_fn)(int argc, char **argv);

int cmd_doctor(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_plan(int argc, char **argv);

#endif
