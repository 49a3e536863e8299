/* main.c - the oomlab command line: parse it against the command table (cli/command.h, cli/commands.c) and call
 * the command's handler, each in cli/NAME.c. `oomlab help`, `oomlab help COMMAND` and `oomlab COMMAND --help`
 * print from the table (cli/help.c), and main() reads it to accept --flag=value wherever a --flag takes a value.
 *
 * Exit status: 0 success (run: every variant shows what it must; replay: the model agrees with PyTorch's
 * segment actions on every device, or a what-if replay), 1 a result that fails (run: an expectation does not
 * hold, or a variant crashed or timed out, which a closing line counts; replay under the recording's settings:
 * some device diverges; compare: a regression; faultsweep: a fault point was not clean), 2 bad input (one error
 * line on stderr, nothing written).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "results/runset.h"
#include "run/scenario.h"

/* The words after a command, as its parser reads them: --flag=value split into --flag and value where c says
 * --flag takes a value (a flag that takes none, given one, is bad input: *rc). Words that are values of the
 * option before them stay as they are; so do words c does not know (its parser names them). *help is set when
 * --help or -h is among the options. NULL with *rc set on bad input or when out of host memory. */
static char **split_flag_values(const cli_command *c, int argc, char **argv, int *outc, bool *help, int *rc)
{
    char **out = malloc(((size_t)argc * 2 + 1) * sizeof *out);
    if (!out) {
        *rc = cli_bad_arg("%s", "out of host memory");
        return NULL;
    }
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (c && cli_command_script_args(c) && (a[0] != '-' || strcmp(a, "--") == 0)) { /* the rest is the script's */
            while (i < argc)
                out[n++] = argv[i++];
            break;
        }
        const cli_option *o = c ? cli_option_find(c, a, eq ? (size_t)(eq - a) : strlen(a)) : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            *help = true;
        if (o && eq && !o->value) {
            free(out);
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            *rc = cli_bad_arg("%s takes no value", name);
            return NULL;
        }
        if (o && eq) { /* --flag=value */
            out[n++] = (char *)o->name;
            out[n++] = (char *)eq + 1;
            continue;
        }
        out[n++] = argv[i];
        if (o && o->value && i + 1 < argc) /* --flag value: the value is taken as it is */
            out[n++] = argv[++i];
    }
    out[n] = NULL;
    *outc = n;
    return out;
}


/* --max-input of a command other than replay (which keeps it in its options): taken out of args[0..*n) and set
 * as the bound of every input file this process reads (runset_set_max_input). The values of c's other options are
 * skipped, so a value that reads "--max-input" is left to its option. 0, or the exit status of a bad value. */
static int take_max_input(const cli_command *c, char **args, int *n)
{
    int w = 0;
    for (int i = 0; i < *n; i++) {
        const cli_option *o = c ? cli_option_find(c, args[i], strlen(args[i])) : NULL;
        if (o && strcmp(o->name, "--max-input") == 0) {
            size_t bytes = 0;
            if (i + 1 >= *n)
                return cli_bad_arg("%s needs a value", "--max-input");
            if (!cli_parse_max_input(args[++i], &bytes))
                return cli_bad_arg(CLI_MAX_INPUT_BAD, args[i]);
            runset_set_max_input(bytes);
            continue;
        }
        args[w++] = args[i];
        if (o && o->value && i + 1 < *n)
            args[w++] = args[++i];
    }
    *n = w;
    args[w] = NULL;
    return 0;
}

/* A command that does not exist: one line, and where the word is a scenario's name, the command that runs it. */
static int unknown_command(const char *cmd)
{
    if (!scenario_find(cmd))
        return cli_bad_arg("unknown command '%s' (oomlab help lists them)", cmd);
    /* a catalog name: short and ours, echoed whole */
    fprintf(stderr, "oomlab: unknown command '%s': it is a scenario; run it with oomlab run %s\n", cmd, cmd);
    return CLI_EXIT_BAD_INPUT;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return cli_bad_arg("%s", "missing COMMAND (oomlab help lists them)");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        cmd = "help";
    else if (strcmp(cmd, "--version") == 0)
        cmd = "version";
    /* the command's entry: bench's is its subcommand's ("bench alloc"), when one is named */
    const cli_command *c = cli_command_find(cmd, argc > 2 ? argv[2] : NULL);
    if (!c && !cli_command_is_group(cmd))
        return unknown_command(cmd);
    bool help = false;
    int rc = 0, n = 0;
    char **args = NULL;
    if (c && (c->flags & CLI_WORDS_ARE_COMMANDS)) { /* help's words; help --help is help's own help */
        args = argv + 2;
        n = argc - 2;
        for (int i = 0; i < n; i++)
            help = help || strcmp(args[i], "--help") == 0 || strcmp(args[i], "-h") == 0;
    } else if (!(args = split_flag_values(c, argc - 2, argv + 2, &n, &help, &rc))) {
        return rc;
    }
    if (help) { /* COMMAND --help: whatever else is on the line */
        if (c)
            cli_print_command_help(stdout, c);
        else
            cli_print_group_help(stdout, cmd);
    } else if (!c) { /* a group without one of its commands */
        rc = cli_group_missing(cmd);
    } else if ((c->flags & CLI_OWN_MAX_INPUT) || (rc = take_max_input(c, args, &n)) == 0) {
        bool sub = strchr(c->name, ' ') != NULL; /* "bench alloc": its words after the subcommand's name */
        rc = c->handler(sub ? n - 1 : n, sub ? args + 1 : args);
    }
    if (args != argv + 2)
        free(args);
    return rc;
}
