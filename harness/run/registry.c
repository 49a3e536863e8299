/* registry.c - the scenario catalog: one entry per scenarios/NAME.c, in the order `oomlab list` shows. */
#include <string.h>

#include "run/scenario.h"

extern const scenario scenario_dangling_tensors;
extern const scenario scenario_retained_graph;
extern const scenario scenario_unzeroed_grads;
extern const scenario scenario_oversize_batch;
extern const scenario scenario_inplace_ops;
extern const scenario scenario_inference_oom;
extern const scenario scenario_pinned_memory;
extern const scenario scenario_model_too_large;
extern const scenario scenario_data_parallel;
extern const scenario scenario_sharded_training;
extern const scenario scenario_fragmentation;

/* The order of the failure modes in README's catalog: the training loop's, then the allocator's. */
const scenario *const scenario_catalog[] = {
    &scenario_dangling_tensors, &scenario_retained_graph, &scenario_unzeroed_grads,
    &scenario_oversize_batch,   &scenario_inplace_ops,    &scenario_fragmentation,
    &scenario_inference_oom,    &scenario_model_too_large,
    &scenario_data_parallel, &scenario_sharded_training, &scenario_pinned_memory,
};
const size_t scenario_catalog_size = sizeof scenario_catalog / sizeof scenario_catalog[0];

/* Scenarios registered outside the catalog (scenario_register): test fixtures. */
static const scenario *registered[SCENARIO_MAX_REGISTERED];
static size_t nregistered;

bool scenario_register(const scenario *sc)
{
    if (nregistered == SCENARIO_MAX_REGISTERED)
        return false;
    registered[nregistered++] = sc;
    return true;
}

const scenario *scenario_find(const char *name)
{
    for (size_t i = 0; i < scenario_catalog_size; i++)
        if (strcmp(scenario_catalog[i]->name, name) == 0)
            return scenario_catalog[i];
    for (size_t i = 0; i < nregistered; i++)
        if (strcmp(registered[i]->name, name) == 0)
            return registered[i];
    return NULL;
}

const scenario_variant *scenario_variant_find(const scenario *sc, const char *name)
{
    for (size_t i = 0; i < sc->nvariants; i++)
        if (strcmp(sc->variants[i].name, name) == 0)
            return &sc->variants[i];
    return NULL;
}

bool scenario_name_ok(const char *name)
{
    if (!name || !(name[0] >= 'a' && name[0] <= 'z'))
        return false;
    size_t n = 0;
    for (const char *c = name; *c; c++, n++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
            return false;
    return n <= SCENARIO_NAME_MAX;
}
