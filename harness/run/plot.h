/* plot.h - a run's results as a picture: one panel per variant, allocated and reserved bytes at each step, the
 * budget as a line, and the step where the OOM happened marked. Drawn by gnuplot (pngcairo or svg), from the
 * results JSON that `oomlab run` writes (report.h), so every point is the allocator's own counter.
 */
#ifndef OOMLAB_PLOT_H
#define OOMLAB_PLOT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* Plot the results file json_path into png_path, a PNG (pngcairo) or an SVG by its extension, .png or .svg
 * (written atomically: gnuplot draws into a temporary file that is renamed when complete). OOM_EINVAL: not a
 * results file, or another extension (err says which); OOM_EIO: cannot read, cannot write (the output's folder
 * does not exist), gnuplot is not installed or it failed (err says which). */
oom_status plot_run(const char *json_path, const char *png_path, char *err, size_t errcap);

/* Write the inputs of a gnuplot drawing: the data file dat and the script gp, which draws with terminal into
 * out_tmp. false when they cannot be written. */
typedef bool (*plot_inputs_fn)(void *ctx, const char *dat, const char *gp, const char *terminal, const char *out_tmp);

/* Draw with gnuplot into out_path (.png: pngcairo, .svg: svg), atomically, from the inputs write makes in a
 * temporary folder; the errors of plot_run. For drawings that are not a run's results (`oomlab advise --plot`). */
oom_status plot_gnuplot(const char *out_path, plot_inputs_fn write, void *ctx, char *err, size_t errcap);

OOM_END_DECLS

#endif
