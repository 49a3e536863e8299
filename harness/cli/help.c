/* help.c - `oomlab help [COMMAND]`, `oomlab COMMAND --help`: usage and options printed from the command table. */
#include <stdio.h>
#include <string.h>

#include "cli/command.h"

#define HELP_WIDTH 116 /* usage lines wrap before this column */

/* "NAME ARGS [--opt VALUE] [--flag]..." after prefix, wrapped under its first argument. The lines break at the
 * same places whatever the prefix, so `oomlab help` shows the same usage lines as `oomlab help COMMAND`. */
static void print_synopsis(FILE *f, const char *prefix, const cli_command *c)
{
    const int width = HELP_WIDTH - (int)strlen("usage: oomlab ");
    fputs(prefix, f);
    /* its options come before SCRIPT: the words after are the script's */
    const bool script = cli_command_script_args(c);
    int col = fprintf(f, "%s%s%s", c->name, c->args[0] && !script ? " " : "", script ? "" : c->args);
    int indent = (int)strlen(prefix) + col + 1; /* under the first option */
    for (const cli_option *o = c->options; o <= c->options + CLI_MAX_OPTIONS; o++) {
        char item[96];
        bool last = o == c->options + CLI_MAX_OPTIONS || !o->name;
        if (last && !script)
            break;
        int n = last ? snprintf(item, sizeof item, "%s", c->args)
                     : snprintf(item, sizeof item, "[%s%s%s]%s", o->name, o->value ? " " : "",
                                o->value ? o->value : "", o->repeats ? "..." : "");
        if (col + 1 + n > width) {
            fprintf(f, "\n%*s%s", indent, "", item);
            col = indent - (int)strlen(prefix) + n;
        } else {
            col += fprintf(f, " %s", item);
        }
        if (last)
            break;
    }
    fputc('\n', f);
}

/* text, its lines after the first indented by indent columns. */
static void print_lines(FILE *f, const char *text, int indent)
{
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n')
            fprintf(f, "%*s", indent, "");
    }
    fputc('\n', f);
}

/* `oomlab help COMMAND` and `oomlab COMMAND --help`. */
void cli_print_command_help(FILE *f, const cli_command *c)
{
    print_synopsis(f, "usage: oomlab ", c);
    fputc('\n', f);
    print_lines(f, c->summary, 0);
    if (!c->options[0].name)
        return;
    int w = 0;
    for (const cli_option *o = c->options; o < c->options + CLI_MAX_OPTIONS && o->name; o++) {
        int n = (int)(strlen(o->name) + (o->value ? 1 + strlen(o->value) : 0));
        w = n > w ? n : w;
    }
    fprintf(f, "\noptions:\n");
    for (const cli_option *o = c->options; o < c->options + CLI_MAX_OPTIONS && o->name; o++) {
        char head[96];
        snprintf(head, sizeof head, "%s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
        fprintf(f, "  %-*s  ", w, head);
        print_lines(f, o->help, w + 4);
        if (o->repeats)
            fprintf(f, "  %-*s  (may be given more than once)\n", w, "");
    }
}

/* Every command of a group ("bench"), one after the other. */
void cli_print_group_help(FILE *f, const char *group)
{
    size_t n = strlen(group);
    bool first = true;
    for (size_t i = 0; i < cli_ncommands; i++) {
        if (strncmp(cli_commands[i].name, group, n) == 0 && cli_commands[i].name[n] == ' ') {
            if (!first)
                fputc('\n', f);
            cli_print_command_help(f, &cli_commands[i]);
            first = false;
        }
    }
}

/* `oomlab help`: every command, its usage and what it does. */
static void print_overview(FILE *f)
{
    fprintf(f, "usage: oomlab COMMAND [ARGS]   (oomlab help COMMAND, or oomlab COMMAND --help: its options)\n");
    for (size_t i = 0; i < cli_ncommands; i++) {
        const cli_command *c = &cli_commands[i];
        char head[64];
        int len = snprintf(head, sizeof head, "%s%s%s", c->name, c->args[0] ? " " : "", c->args);
        if (!c->options[0].name && len <= 26 && !strchr(c->summary, '\n')) { /* one line: usage, then what */
            fprintf(f, "  %-26s %s\n", head, c->summary);
            continue;
        }
        print_synopsis(f, "  ", c);
        fprintf(f, "      ");
        print_lines(f, c->summary, 6);
    }
    fprintf(f, "exit status: 0 success, 1 a result that fails (run: an expectation does not hold, or a variant crashed\n"
               "or timed out, said in a closing line; replay: the model diverges from PyTorch; compare: a regression;\n"
               "faultsweep: a fault point was not clean), 2 bad input (one error line on stderr, nothing written)\n");
}

/* `oomlab help [COMMAND]`: argc/argv after "help". */
int cli_help(int argc, char **argv)
{
    if (argc == 0)
        return print_overview(stdout), 0;
    const cli_command *c = cli_command_find(argv[0], argc == 2 ? argv[1] : NULL);
    if (argc == 1 && !c && cli_command_is_group(argv[0]))
        return cli_print_group_help(stdout, argv[0]), 0;
    if (argc > 2 || !c || (argc == 2 && !strchr(c->name, ' '))) {
        char what[256];
        snprintf(what, sizeof what, "%s%s%s", argv[0], argc > 1 ? " " : "", argc > 1 ? argv[1] : "");
        if (argc > 2 || (c && argc == 2))
            return cli_bad_arg("help: give one COMMAND (got '%s ...'; oomlab help lists them)", what);
        return cli_bad_arg("help: no command '%s' (oomlab help lists them)", what);
    }
    cli_print_command_help(stdout, c);
    return 0;
}
