/* command.h - the command table and what the commands share. Each command of `oomlab` has one entry in
 * cli_commands (cli/commands.c): its name, its handler, its usage and help, and its options. main.c parses a
 * command line against the table and calls the handler; `oomlab help` prints from it (cli/help.c). A new command
 * is one entry and one file cli/NAME.c holding its handler; a new option goes into its entry and its parser.
 *
 * A handler gets the words after the command's name (after the subcommand's, for "bench alloc"), --flag=value
 * already split where the table says --flag takes a value, and returns the exit status: 0 success, 1 a result
 * that fails, 2 bad input (one error line on stderr, nothing written).
 */
#ifndef OOMLAB_CLI_COMMAND_H
#define OOMLAB_CLI_COMMAND_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/compat.h"
#include "core/status.h"
#include "device/device.h"
#include "run/runner.h"
#include "run/scenario.h"

OOM_BEGIN_DECLS

#define CLI_EXIT_BAD_INPUT 2

/* An option of a command: its name, the value it takes (NULL: a flag that takes none) and what it does. */
typedef struct cli_option {
    const char *name;  /* "--budget", "-o" */
    const char *value; /* "SIZE"; NULL for a flag */
    const char *help;  /* lines separated by '\n' */
    bool repeats;      /* may be given more than once */
} cli_option;

#define CLI_MAX_OPTIONS 16

/* How main.c hands a command its words. */
enum {
    CLI_OWN_MAX_INPUT = 1,      /* the handler reads --max-input itself (replay: into its options) */
    CLI_WORDS_ARE_COMMANDS = 2, /* its words are command names, passed on as they are (help) */
};

typedef int (*cli_handler)(int argc, char **argv);

/* A command: `oomlab NAME ARGS [OPTIONS]`, its handler, what it does, and its options (up to the first with no
 * name). */
typedef struct cli_command {
    const char *name;    /* "run", "bench alloc" */
    cli_handler handler; /* the command's work: cli/NAME.c */
    unsigned flags;      /* CLI_OWN_MAX_INPUT, CLI_WORDS_ARE_COMMANDS */
    const char *args;    /* the positional arguments, "" for none */
    const char *summary; /* what it does, lines separated by '\n' */
    cli_option options[CLI_MAX_OPTIONS];
} cli_command;

extern const cli_command cli_commands[];
extern const size_t cli_ncommands;

/* The command named name (and sub, for "bench alloc"); NULL if none. */
const cli_command *cli_command_find(const char *name, const char *sub);
/* True when name is a group of commands ("bench": "bench alloc", ...). */
bool cli_command_is_group(const char *name);
/* The option of c named by name[0..len); NULL if c has none. */
const cli_option *cli_option_find(const cli_command *c, const char *name, size_t len);
/* A command whose arguments start with SCRIPT (predict) runs another program: the words from its first
 * positional one on are that program's, passed on as they are (--help among them included). */
bool cli_command_script_args(const cli_command *c);
/* A group named without one of its commands ("oomlab bench", "oomlab bench nope"): its one error line, exit 2. */
int cli_group_missing(const char *group);

/* `oomlab help COMMAND` and `oomlab COMMAND --help` (cli/help.c). */
void cli_print_command_help(FILE *f, const cli_command *c);
/* Every command of a group ("bench"), one after the other. */
void cli_print_group_help(FILE *f, const char *group);

/* One error line "oomlab: ...", exit status 2. An argument the format quotes ('%s') is the user's: it is cut to a
 * readable length (echo_cut); an unquoted one is a message oomlab made and is printed whole. */
int cli_bad_arg(const char *fmt, const char *arg);
/* One error line "oomlab: ..." from a printf format (the line made one whatever its arguments hold), exit 2. */
int cli_bad_input(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#define CLI_MAX_INPUT_BAD                                                                                          \
    "--max-input: '%s' is not a size of at least 1 byte (bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
/* A --max-input value: a size of at least one byte. */
bool cli_parse_max_input(const char *s, size_t *out);
/* The value of --backend at argv[*i] (advancing *i): 0, or the exit status of a bad one (its line printed). */
int cli_take_backend(int argc, char **argv, int *i, device_kind *kind);
/* The integer value of the option at argv[*i] (advancing *i), in [lo, hi]: 0, or the exit status of a bad one. */
int cli_take_count(int argc, char **argv, int *i, long lo, long hi, const char *what, long *out);
/* The catalog's scenario named name; NULL, with the error line listing the catalog printed, if none. */
const scenario *cli_find_scenario(const char *name);
/* Print a cJSON object and free it. */
void cli_print_json(cJSON *o);

/* run's option parsers, which faultsweep shares (cli/run.c). */
/* --set NAME=VALUE with an integer VALUE, its name copied into name[cap]. */
bool cli_parse_set(const char *arg, run_set *out, char *name, size_t cap);
/* --variant V[,V]: added to o's variants; 0, or the exit status of a bad list. */
int cli_take_variants(char *arg, run_options *o);
/* --timeout SECONDS: 0, or the exit status of a bad value. */
int cli_take_timeout(const char *arg, double *out);

/* The options every benchmark takes, --json and --backend, at argv[*i]: true when it was one of them (*rc: 0, or
 * the exit status of a bad value, its line printed) (cli/bench.c). */
bool cli_bench_common_option(int argc, char **argv, int *i, bool *json, device_kind *kind, int *rc);
/* A benchmark's exit status: 0, 1 when it failed, 2 when the backend asked for is not there. */
int cli_bench_exit(oom_status st);

/* The handlers, each in cli/NAME.c (the four "bench ..." commands: cli/bench.c). */
int cli_list(int argc, char **argv);
int cli_describe(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_faultsweep(int argc, char **argv);
int cli_plot(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_parity(int argc, char **argv);
/* predict: options end at SCRIPT, the rest is the script's; exit 0 (a prediction, whether it fits or not), 1 (the
 * capture failed for a reason that is not the user's input, said in one line), 2 (bad input: one line, or the
 * script's traceback then one line). */
int cli_predict(int argc, char **argv);
int cli_replay(int argc, char **argv);
int cli_advise(int argc, char **argv);
int cli_bench_alloc(int argc, char **argv);
int cli_bench_gemm(int argc, char **argv);
int cli_bench_kernels(int argc, char **argv);
int cli_bench_step(int argc, char **argv);
int cli_bench_replay(int argc, char **argv);
/* compare: exit 1 on a regression. */
int cli_compare(int argc, char **argv);
int cli_baseline(int argc, char **argv);
int cli_history(int argc, char **argv);
int cli_export(int argc, char **argv);
int cli_version(int argc, char **argv);
int cli_help(int argc, char **argv);

OOM_END_DECLS

#endif
