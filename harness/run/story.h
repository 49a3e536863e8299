/* story.h - each scenario's story, from its one home: the opening comment of scenarios/NAME.c (its cause, what
 * the user sees, the PyTorch code it mirrors, each fix and why it works, each myth and why it does not help;
 * CONTRIBUTING.md, "Adding a scenario"). scripts/gen_stories.sh compiles the comments into build/gen/stories.c
 * whenever a scenario file changes, so what `oomlab report` prints cannot drift from the source. */
#ifndef OOMLAB_STORY_H
#define OOMLAB_STORY_H

#include <stddef.h>

#include "core/compat.h"

OOM_BEGIN_DECLS

typedef struct scenario_story {
    const char *name;  /* the scenario, as scenarios/NAME.c */
    const char *const *lines; /* its opening comment line by line, " * " prefixes removed; NULL-terminated */
} scenario_story;

extern const scenario_story scenario_stories[];
extern const size_t scenario_nstories;

OOM_END_DECLS

#endif
