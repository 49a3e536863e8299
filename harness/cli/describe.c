/* describe.c - `oomlab describe SCENARIO`: a scenario's story, variants and parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "alloc/memstats.h"
#include "run/scenario.h"

int cli_describe(int argc, char **argv)
{
    if (argc != 1)
        return cli_bad_arg("%s", "describe: give one SCENARIO");
    const scenario *sc = cli_find_scenario(argv[0]);
    if (!sc)
        return CLI_EXIT_BAD_INPUT;
    char budget[32], cibudget[32];
    printf("%s: %s\n\n%s\n\nbudget: %s at full scale, %s at ci scale (--budget)\n\nvariants:\n", sc->name, sc->title,
           sc->story, memstats_format_size(sc->default_budget, budget, sizeof budget),
           memstats_format_size(sc->ci_budget ? sc->ci_budget : sc->default_budget, cibudget, sizeof cibudget));
    for (size_t i = 0; i < sc->nvariants; i++) {
        const scenario_variant *v = &sc->variants[i];
        printf("  %-26s %s%s%s%s\n", v->name, v->summary, v->alloc_conf[0] ? " [" : "", v->alloc_conf,
               v->alloc_conf[0] ? "]" : "");
    }
    printf("\nparameters (--set name=value; --scale full is the default on cuda and in a dry run, ci on sim):\n");
    printf("  %-12s %7s %7s  %s\n", "name", "full", "ci", "meaning (range)");
    for (size_t i = 0; i < sc->nparams; i++) {
        const scenario_param *p = &sc->params[i];
        printf("  %-12s %7lld %7lld  %s (%lld to %lld)\n", p->name, (long long)p->def,
               (long long)scenario_param_default(p, SCALE_CI), p->help, (long long)p->min, (long long)p->max);
    }
    return 0;
}
