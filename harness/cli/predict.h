/* predict.h - the `oomlab predict` command: a user's PyTorch script captured on the CPU by scripts/oomlab_capture
 * (a child process, argv only, never a shell), then run/predict.h's analysis of the trace, or a --sweep of a
 * script parameter over fresh captures. */
#ifndef OOMLAB_CLI_PREDICT_H
#define OOMLAB_CLI_PREDICT_H

#include "core/compat.h"

OOM_BEGIN_DECLS

/* `oomlab predict [OPTIONS] SCRIPT [ARGS...]` with argv after the command name (options end at SCRIPT; the rest
 * is the script's). Exit status: 0 (a prediction, whether it fits or not), 1 (the capture failed for a reason that
 * is not the user's input, said in one line), 2 (bad input: one line, or the script's traceback then one line). */
int cli_predict(int argc, char **argv);

OOM_END_DECLS

#endif
