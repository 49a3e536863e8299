/* plot.h - the figures oomlab draws from its results files, with gnuplot (gnuplot.h: PNG or SVG by the output's
 * extension, written atomically, byte-identical for the same data). Every point is one of the allocator's
 * counters as the results JSON (report.h, sweep.h) recorded it; nothing is computed for the picture but units.
 *
 *   timeline  (plot_run on a run file) one panel per variant: allocated and reserved at each sample, drawn as
 *             steps (a sample is an instant: the counter holds its value until the next sample shows another),
 *             the gap between them shaded and labelled "reserved but unallocated", the budget as a line, and
 *             each OOM caught as a red arrow standing on reserved at that moment, as tall as the segment the
 *             allocator tried to get, labelled with the request's size. Where a sample's "step_peak" (the most allocated
 *             since the previous sample, the allocator's window counter) is above both samples' allocated, a
 *             light orange bar from the earlier sample's allocated up to it, between the two: the peak inside a
 *             step. A variant with "host.allocated_bytes.current" metrics (pinned_memory) has them drawn as pinned
 *             host memory on a right axis of its own, with its budget (the run's parameter pinned_mib) and its pin OOM (an "oom" of
 *             kind "pinned host") as a cross on that budget. Sample labels name the x ticks when every
 *             variant has at most 8 samples; otherwise the ticks are sample numbers. One legend, above the
 *             panels, so it never covers data.
 *   peaks     (plot_peaks) one bar pair per variant, bug, fixes and myths side by side in the scenario's
 *             order: peak reserved (light, left) beside peak allocated (dark, right), coloured by kind (bug red,
 *             fix green, partial amber, myth grey), each labelled with its size (inside its top when it is tall
 *             enough: white on the dark bar, dark on the light one); the budget as a line; on a variant that ran
 *             out, the request that failed (the segment asked, else the request) stacked on reserved at the OOM
 *             in red, labelled "OOM: +SIZE".
 *   segments  (plot_segments) the allocator's layout at each variant's first OOM, as PyTorch's memory_viz
 *             draws its Allocator State History: one row per segment in address order, its blocks allocated,
 *             free (cached) or, in an expandable range, unmapped. An expandable range is drawn one page per
 *             row up to its last mapped page, then one row standing for the rest of its unmapped space.
 *   sweep     (plot_run on a sweep file, oomlab.sweep/1) per variant, peak allocated and reserved against the
 *             swept parameter (log2 axis), OOM runs marked, the budget, and the largest value that fits
 *             (bisection) and accelerate's find_executable_batch_size value as vertical lines.
 *   trend     (plot_trend) the nightly history (results/history.csv: utc_date,commit,backend,device,scale,
 *             scenario,variant,metric,value): one figure per scenario, backend and scale
 *             (DIR/SCENARIO-BACKEND-SCALE.png), one panel per metric, one line per variant, the runs in the
 *             file's order of (utc_date, commit) on the x axis. Metrics named *bytes*, peak_* or *allocated* /
 *             *reserved* are drawn in MiB (GiB from 10 GiB), others as recorded.
 *
 * Errors: OOM_EINVAL for an input that is not what the figure needs or an output that is not .png/.svg (err
 * says which); OOM_EIO when a file cannot be read or written or gnuplot fails or is missing (err says which).
 */
#ifndef OOMLAB_PLOT_H
#define OOMLAB_PLOT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* The timeline of a run file (oomlab.run/1), or the sweep figure of a sweep file (oomlab.sweep/1). */
oom_status plot_run(const char *json_path, const char *out_path, char *err, size_t errcap);
/* The peaks bar chart of a run file. */
oom_status plot_peaks(const char *json_path, const char *out_path, char *err, size_t errcap);
/* The segment map at the OOMs of a run file. OOM_EINVAL when no variant recorded a layout (none ran out). */
oom_status plot_segments(const char *json_path, const char *out_path, char *err, size_t errcap);
/* Whether a run file has a layout to draw (some variant ran out of memory); false when it cannot be read. */
int plot_has_segments(const char *json_path);
/* Every figure of a results file NAME.json beside it: NAME.png (the timeline, or a sweep file's figure),
 * NAME-peaks.png and, when some variant ran out of memory, NAME-segments.png; the paths written go to written
 * (one per line). Stops at the first that fails. */
oom_status plot_all(const char *json_path, char *written, size_t cap, char *err, size_t errcap);
/* The trend figures of a history CSV (read by history_read: a bad row is skipped with a warning) into the folder
 * out_dir, made (mkdir -p) only once the history is read, each .EXT (png or svg); the paths written go to written
 * (one per line, up to cap bytes). */
oom_status plot_trend(const char *csv_path, const char *out_dir, const char *ext, char *written, size_t cap,
                      char *err, size_t errcap);



OOM_END_DECLS

#endif
