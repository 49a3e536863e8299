/* scntest.h - what the scenario suites share: run a scenario, find a variant or a sample, give --set values. */
#ifndef OOMLAB_SCNTEST_H
#define OOMLAB_SCNTEST_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/runner.h"
#include "run/scenario.h"

/* runner_run on the catalog's scenario name; the test fails on bad options. */
static inline void scn_test_run(const char *name, run_options *o, run_result *res)
{
    char err[512] = "";
    const scenario *sc = scenario_find(name);
    cr_assert_not_null(sc, "no scenario %s", name);
    cr_assert_eq(runner_run(sc, o, res, err, sizeof err), OOM_OK, "%s", err);
}

static inline const variant_result *scn_test_variant(const run_result *res, const char *name)
{
    for (size_t i = 0; i < res->nvariants; i++)
        if (strcmp(res->variants[i].v->name, name) == 0)
            return &res->variants[i];
    cr_assert_fail("no variant %s in the run", name);
    return NULL;
}

static inline const scn_sample *scn_test_sample(const variant_result *vr, const char *label)
{
    for (size_t i = 0; i < vr->nsamples; i++)
        if (strcmp(vr->samples[i].label, label) == 0)
            return &vr->samples[i];
    cr_assert_fail("%s: no sample '%s'", vr->v->name, label);
    return NULL;
}

/* Every variant ends without an error and with its scenario's own expectations holding: the mechanism shows what it
 * must at these parameters. The kind's verdict is apart (variant_result.kind_holds): at --set values or budgets far
 * from the scenario's, a fix may run out of memory, which the table shows as ✗ and run_result.passed reports. */
static inline bool scn_test_expected(const run_result *res)
{
    bool ok = true;
    for (size_t i = 0; i < res->nvariants; i++)
        ok = ok && res->variants[i].expected;
    return ok;
}

/* --set values written "name=value,name=value" appended to o (the names live until the next call). */
static inline void scn_test_sets(run_options *o, const char *sets)
{
    static char names[RUN_MAX_SETS][32];
    char buf[256];
    snprintf(buf, sizeof buf, "%s", sets);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        cr_assert_not_null(eq, "'%s' is not name=value", tok);
        cr_assert_lt(o->nsets, RUN_MAX_SETS);
        *eq = '\0';
        snprintf(names[o->nsets], sizeof names[0], "%s", tok);
        o->sets[o->nsets].name = names[o->nsets];
        o->sets[o->nsets++].value = atoll(eq + 1);
    }
}

#endif
