/* list.c - `oomlab list`: the scenario catalog. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "run/scenario.h"

int cli_list(int argc, char **argv)
{
    (void)argv;
    if (argc != 0)
        return cli_bad_arg("%s", "list takes no arguments");
    for (size_t i = 0; i < scenario_catalog_size; i++) {
        const scenario *sc = scenario_catalog[i];
        printf("%-16s %s\n", sc->name, sc->title);
    }
    return 0;
}
