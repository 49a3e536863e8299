/* selfpath.h - the checkout this binary runs from: the nearest folder above /proc/self/exe that holds a given
 * file (build/oomlab, build/checked/oomlab and build/bench/oomlab all find the repository's scripts/). */
#ifndef OOMLAB_SELFPATH_H
#define OOMLAB_SELFPATH_H

#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"

OOM_BEGIN_DECLS

/* The folder, up to four levels above this binary's, in which rel (a relative path) exists, into dir. false when
 * none has it (or /proc/self/exe cannot be read). */
bool selfpath_find_up(const char *rel, char *dir, size_t cap);

OOM_END_DECLS

#endif
