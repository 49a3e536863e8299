/* advise.h - the `oomlab advise` command: options, the snapshot (JSON, or a pickle converted with
 * scripts/snapshot2json.py), and run/advise.h's report as text, JSON or a plot. */
#ifndef OOMLAB_CLI_ADVISE_H
#define OOMLAB_CLI_ADVISE_H

#include "core/compat.h"

OOM_BEGIN_DECLS

/* `oomlab advise FILE [options]` with argv after the command name. Exit status: 0 (advice given), 2 (bad input:
 * one line on stderr, nothing written). */
int cli_advise(int argc, char **argv);

OOM_END_DECLS

#endif
