/* registry.c - the scenario catalog: one entry per scenarios/NAME.c, in the order `oomlab list` shows. */
#include <string.h>

#include "run/scenario.h"

extern const scenario scenario_fragmentation;
extern const scenario scenario_dangling_tensors;
extern const scenario scenario_inplace_ops;

const scenario *const scenario_catalog[] = {
    &scenario_fragmentation,
    &scenario_dangling_tensors,
    &scenario_inplace_ops,
};
const size_t scenario_catalog_size = sizeof scenario_catalog / sizeof scenario_catalog[0];

const scenario *scenario_find(const char *name)
{
    for (size_t i = 0; i < scenario_catalog_size; i++)
        if (strcmp(scenario_catalog[i]->name, name) == 0)
            return scenario_catalog[i];
    return NULL;
}

const scenario_variant *scenario_variant_find(const scenario *sc, const char *name)
{
    for (size_t i = 0; i < sc->nvariants; i++)
        if (strcmp(sc->variants[i].name, name) == 0)
            return &sc->variants[i];
    return NULL;
}
