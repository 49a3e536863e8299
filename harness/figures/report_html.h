/* report_html.h - `oomlab report`: one static page that explains the catalog with its own measurements.
 *
 * OUT/index.html, readable offline and without JavaScript (one inline style sheet, no scripts, no external
 * resource), and OUT/img/ with the figures of plot.h. One section per scenario, in the catalog's order:
 *   - its story, from its one home, the opening comment of scenarios/NAME.c (story.h): the cause, what the user
 *     sees, the PyTorch code it mirrors, each fix and why it works, each myth and why it does not help; after
 *     each variant's paragraph, what this run measured for it;
 *   - its figures: the timeline, the peaks, the segment map at the OOMs (when a variant ran out), the sweep
 *     (when a sweep file of the scenario is given);
 *   - the table of measured numbers, and beside them PyTorch's from its twin's recording
 *     (TWINS/NAME.torch.json, twinlib's shape: tests/twin.c) when the recording exists and was made at the same
 *     parameters and budget; otherwise a line says why there are none;
 *   - each variant's expectations and OOM message, in a <details> element (open without JavaScript).
 * The page and its images are written into a temporary folder beside OUT (OUT.tmp.XXXXXX/report, made by mkdtemp:
 * never one planted there) that replaces OUT only once complete; an OUT that exists and is not a folder (a link,
 * a file) is refused. Every string of an input on the page goes through one HTML escaping.
 */
#ifndef OOMLAB_REPORT_HTML_H
#define OOMLAB_REPORT_HTML_H

#include <stddef.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* inputs: results files (SCENARIO.json, oomlab.run/1; SCENARIO.sweep.json, oomlab.sweep/1) or folders of them
 * (a catalog run's STAMP-BACKEND folder). twins_dir: where the PyTorch recordings are (NULL: none). OOM_EINVAL:
 * an input that is not a results file (runset_read_file: what compare refuses), no run among them, two runs of
 * one scenario, or an OUT that is not a folder (err says which); OOM_EIO:
 * a file cannot be read or written, or a plot fails. */
/* What a story's variant item claims of its outcome: CLAIM_OOM ("still OOMs", "It OOMs", "OOMs in step"),
 * CLAIM_FITS ("it fits"), else CLAIM_NONE. The page marks an item whose claim its measured row contradicts. */
typedef enum story_claim { CLAIM_NONE, CLAIM_OOM, CLAIM_FITS } story_claim;
story_claim report_story_claim(const char *text);

oom_status report_html(const char *const *inputs, size_t n, const char *twins_dir, const char *out_dir, char *err,
                       size_t errcap);

OOM_END_DECLS

#endif
