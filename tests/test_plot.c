/* test_plot.c - the figures (plot.h), the layout at the OOM they draw (cachealloc_layout, the results JSON), and
 * the report page (report_html.h), on fragmentation: allocation only, so it runs in well under a second. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/cachealloc.h"
#include "trace/trace.h"
#include "core/fileio.h"
#include "analysis/advise.h"
#include "figures/plot.h"
#include "results/report.h"
#include "figures/report_html.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "testutil.h"

static char dir[TEST_TMPDIR_MAX], json[1100];

/* fragmentation run on sim, written to a fresh folder (json). */
static void run_fragmentation(void)
{
    test_tmpdir_make(dir, "plot");
    run_options o = {.backend = DEVICE_SIM};
    run_result r;
    char err[512];
    cr_assert_eq(runner_run(scenario_find("fragmentation"), &o, &r, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(report_write_in(&r, dir, json, sizeof json), OOM_OK, "%s", oom_error_detail());
    run_result_free(&r);
}

static char *slurp(const char *path)
{
    char *t = fileio_read_all(path, NULL);
    cr_assert_not_null(t, "cannot read %s", path);
    return t;
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = fileio_read_all(a, &na), *y = fileio_read_all(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

Test(plot, results_json_has_the_layout_at_the_oom, .init = run_fragmentation)
{
    char *text = slurp(json);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *bug = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 0);
    const cJSON *oom = cJSON_GetObjectItem(bug, "oom"), *segs = cJSON_GetObjectItem(oom, "segments"), *s;
    cr_assert_eq(cJSON_GetArraySize(segs), 50, "100 pairs in 20 MiB segments, two pairs each");
    double allocated = 0;
    cJSON_ArrayForEach(s, segs)
    {
        const cJSON *b;
        double sum = 0;
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(s, "blocks")), 5);
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(s, "blocks"))
        {
            sum += cJSON_GetArrayItem(b, 0)->valuedouble;
            if (strcmp(cJSON_GetArrayItem(b, 1)->valuestring, "allocated") == 0)
                allocated += cJSON_GetArrayItem(b, 0)->valuedouble;
        }
        cr_expect_eq(sum, cJSON_GetObjectItem(s, "size")->valuedouble, "the blocks tile the segment");
    }
    cr_expect_eq(allocated, cJSON_GetObjectItem(oom, "allocated")->valuedouble);
    const cJSON *caught = cJSON_GetObjectItem(bug, "ooms_caught");
    cr_assert_eq(cJSON_GetArraySize(caught), 1);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(caught, 0), "requested")->valuedouble, 100.0 * 1048576);
    const cJSON *fix = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 1);
    cr_expect_null(cJSON_GetObjectItem(fix, "ooms_caught"), "fix-expandable-segments has no OOM");
    /* a fix's layout at its peak, for the segment map's fix panel: one expandable range holding the request */
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(bug, "fix_layout")), "a bug has no fix layout");
    const cJSON *fl = cJSON_GetObjectItem(fix, "fix_layout");
    cr_assert(cJSON_IsObject(fl), "fix-expandable-segments has its layout at its peak");
    const cJSON *fsegs = cJSON_GetObjectItem(fl, "segments");
    cr_expect_eq(cJSON_GetArraySize(fsegs), 1);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(fsegs, 0), "expandable")));
    cr_expect_str_eq(cJSON_GetObjectItem(fl, "label")->valuestring, "holding the 100 MiB tensor");
    const cJSON *fs = cJSON_GetArrayItem(cJSON_GetObjectItem(fix, "samples"), (int)cJSON_GetObjectItem(fl, "step")->valuedouble);
    cr_expect_eq(cJSON_GetObjectItem(fl, "reserved")->valuedouble, cJSON_GetObjectItem(fix, "peak_reserved")->valuedouble,
                 "taken at the fix's peak reserved");
    cr_expect_eq(cJSON_GetObjectItem(fs, "reserved")->valuedouble, cJSON_GetObjectItem(fl, "reserved")->valuedouble);
    cJSON_Delete(j);
}

Test(plot, layout_shows_unmapped_expandable_space)
{
    device *dev = test_device_open(0);
    cr_assert_not_null(dev);
    cachealloc_options o = {.budget_bytes = 0};
    alloc_conf_default(&o.conf);
    o.conf.expandable_segments = true;
    cachealloc *ca;
    cr_assert_eq(cachealloc_new(dev, &o, &ca), OOM_OK);
    devptr p;
    cr_assert_eq(cachealloc_malloc(ca, 30u << 20, &p), OOM_OK);
    size_t n = 0;
    ca_snap_segment *segs = cachealloc_layout(ca, &n);
    cr_assert_eq(n, 1, "one range");
    size_t mapped = 0, unmapped = 0, sum = 0;
    for (size_t k = 0; k < segs[0].nblocks; k++) {
        sum += segs[0].blocks[k].size;
        if (segs[0].blocks[k].state == CA_SNAP_UNMAPPED)
            unmapped += segs[0].blocks[k].size;
        else
            mapped += segs[0].blocks[k].size;
    }
    cr_expect(segs[0].is_expandable);
    cr_expect_eq(segs[0].page_size, (size_t)20 << 20);
    cr_expect_eq(mapped, (size_t)40 << 20, "two 20 MiB pages mapped for 30 MiB");
    cr_expect_gt(unmapped, 0);
    cr_expect_eq(sum, segs[0].total_size, "the blocks tile the range");
    cachealloc_snapshot_free(segs, n);
    size_t m = 0;
    cr_expect_null(cachealloc_oom_layout(ca, &m), "no OOM: no layout kept");
    cachealloc_free(ca, p);
    cachealloc_delete(ca);
    device_close(dev);
}

Test(plot, timeline_draws_steps_gap_budget_and_the_oom, .init = run_fragmentation)
{
    char svg[1200];
    char err[512];
    snprintf(svg, sizeof svg, "%s/t.svg", dir);
    cr_assert_eq(plot_run(json, svg, err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(svg);
    cr_expect(strstr(t, "reserved but unallocated"), "the gap is named in the legend");
    cr_expect(strstr(t, ">unallocated<"), "... and inside the bug's panel (two lines: reserved but / unallocated)");
    cr_expect(strstr(t, "budget (1024.00 MiB)"));
    cr_expect(strstr(t, "OOM: 100.00 MiB asked"), "the OOM is labelled with the request's size");
    cr_expect(strstr(t, "bug: OOM"));
    cr_expect(strstr(t, "holding the 100 MiB tensor"), "the large request has its sample in the fixes");
    cr_expect_null(strstr(t, "/tmp/oomlab_plot"), "nothing of the temporary folder in the picture");
    free(t);
}

Test(plot, same_data_same_bytes, .init = run_fragmentation)
{
    const char *ext[] = {"png", "svg"};
    char err[512], a[1200], b[1200];
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/a.%s", dir, ext[i]);
        snprintf(b, sizeof b, "%s/b.%s", dir, ext[i]);
        cr_assert_eq(plot_run(json, a, err, sizeof err), OOM_OK, "%s", err);
        cr_assert_eq(plot_run(json, b, err, sizeof err), OOM_OK, "%s", err);
        cr_expect(same_bytes(a, b), "timeline .%s differs between two draws", ext[i]);
        cr_assert_eq(plot_segments(json, a, err, sizeof err), OOM_OK, "%s", err);
        cr_assert_eq(plot_segments(json, b, err, sizeof err), OOM_OK, "%s", err);
        cr_expect(same_bytes(a, b), "segment map .%s differs between two draws", ext[i]);
        cr_assert_eq(plot_peaks(json, a, err, sizeof err), OOM_OK, "%s", err);
        cr_assert_eq(plot_peaks(json, b, err, sizeof err), OOM_OK, "%s", err);
        cr_expect(same_bytes(a, b), "peaks .%s differs between two draws", ext[i]);
    }
}

Test(plot, peaks_and_segments_name_what_they_show, .init = run_fragmentation)
{
    char svg[1200], err[512];
    snprintf(svg, sizeof svg, "%s/p.svg", dir);
    cr_assert_eq(plot_peaks(json, svg, err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(svg);
    const char *names[] = {"bug", "fix-expandable-segments", "fix-long-lived-first", "myth-empty-cache",
                           "myth-max-split-size", "myth-gc-threshold"};
    for (int i = 0; i < 6; i++)
        cr_expect(strstr(t, names[i]), "the peaks chart has no bar for %s", names[i]);
    cr_expect(strstr(t, ">OOM: +100.00 MiB<"), "the failed request, on the bug's bar");
    free(t);
    cr_assert_eq(plot_segments(json, svg, err, sizeof err), OOM_OK, "%s", err);
    t = slurp(svg);
    /* one OOM panel (the bug's; the myths' layouts at their OOMs are the same, named, not drawn) beside the first
     * fix's layout at its peak */
    cr_expect(strstr(t, "bug: OOM with 50 segments"), "the bug's panel");
    cr_expect(strstr(t, "largest free block 6.00 MiB"));
    cr_expect(strstr(t, "the same at the OOM of myth-empty-cache, myth-max-split-size,"), "the myths named, wrapped");
    cr_expect(strstr(t, ">myth-gc-threshold<"), "the last myth on a line of its own");
    cr_expect_null(strstr(t, "myth-gc-threshold: OOM"), "no panel of its own for a myth with the bug's layout");
    cr_expect(strstr(t, "fix-expandable-segments: no OOM, 1 segment (expandable: a row per page)"), "the fix's panel");
    cr_expect(strstr(t, "at its peak, &apos;holding the 100 MiB tensor&apos;") ||
                  strstr(t, "at its peak, 'holding the 100 MiB tensor'"),
              "the fix's panel says when its layout was taken");
    cr_expect_null(strstr(t, "fix-long-lived-first:"), "one fix panel");
    free(t);
}

/* A results file's "fix_layout" is input like the rest: a malformed one is refused in one line, nothing drawn. */
Test(plot, a_malformed_fix_layout_is_refused, .init = run_fragmentation)
{
    char *text = slurp(json);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON *fix = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 1);
    cJSON *fl = cJSON_GetObjectItem(fix, "fix_layout");
    cr_assert(cJSON_IsObject(fl));
    cJSON *blocks = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(fl, "segments"), 0), "blocks");
    cJSON_ReplaceItemInArray(cJSON_GetArrayItem(blocks, 0), 1, cJSON_CreateString("leaked"));
    char *bad = cJSON_Print(j);
    char path[1200], out[1200], err[512] = "";
    snprintf(path, sizeof path, "%s/bad.json", dir);
    snprintf(out, sizeof out, "%s/bad.png", dir);
    cr_assert_eq(fileio_write_atomic(path, bad, strlen(bad)), OOM_OK);
    cr_expect_eq(plot_segments(path, out, err, sizeof err), OOM_EINVAL);
    cr_expect(strstr(err, "fix-expandable-segments") && strstr(err, "segment 0: a block is not"), "%s", err);
    cJSON_DeleteItemFromObject(fl, "label");
    free(bad);
    bad = cJSON_Print(j);
    cr_assert_eq(fileio_write_atomic(path, bad, strlen(bad)), OOM_OK);
    cr_expect_eq(plot_segments(path, out, err, sizeof err), OOM_EINVAL);
    cr_expect(strstr(err, "\"fix_layout\" needs \"step\", \"label\" and \"reserved\""), "%s", err);
    cr_expect_eq(access(out, F_OK), -1, "nothing drawn");
    free(bad);
    cJSON_Delete(j);
}

Test(plot, bad_output_and_input_are_refused, .init = run_fragmentation)
{
    char out[1200], err[512];
    snprintf(out, sizeof out, "%s/x.jpg", dir);
    cr_expect_eq(plot_run(json, out, err, sizeof err), OOM_EINVAL);
    cr_expect(strstr(err, "a plot is written as .png or .svg"), "%s", err);
    cr_expect_eq(plot_run(json, "/nonexistent/folder/x.png", err, sizeof err), OOM_EIO);
    cr_expect_eq(plot_peaks("tests/data/twins/fragmentation.torch.json", "/tmp/x.png", err, sizeof err), OOM_EINVAL);
    cr_expect_neq(access(out, F_OK), 0, "nothing written");
}

static void write_text(const char *path, const char *text)
{
    cr_assert_eq(fileio_write_atomic(path, text, strlen(text)), OOM_OK);
}

Test(plot, trend_one_figure_per_scenario_backend_and_scale)
{
    test_tmpdir_make(dir, "trend");
    char csv[128], written[1024], err[512], out[256];
    snprintf(csv, sizeof csv, "%s/history.csv", dir);
    write_text(csv, "utc_date,commit,backend,device,scale,scenario,variant,metric,value\n"
                    "2026-11-01,aaaaaaa1,sim,sim,ci,fragmentation,bug,peak_reserved,1048576000\n"
                    "2026-11-01,aaaaaaa1,sim,sim,ci,fragmentation,fix-expandable-segments,peak_reserved,1048576000\n"
                    "2026-11-02,bbbbbbb2,sim,sim,ci,fragmentation,bug,peak_reserved,1048576000\n"
                    "2026-11-02,bbbbbbb2,sim,sim,ci,fragmentation,bug,seconds,0.5\n"
                    "2026-11-02,bbbbbbb2,sim,\"NVIDIA H100, 80GB\",full,oversize_batch,bug,peak_allocated,1.2e9\n");
    cr_assert_eq(plot_trend(csv, dir, "svg", written, sizeof written, err, sizeof err), OOM_OK, "%s", err);
    snprintf(out, sizeof out, "%s/fragmentation-sim-ci.svg\n%s/oversize_batch-sim-full.svg\n", dir, dir);
    cr_expect_str_eq(written, out);
    snprintf(out, sizeof out, "%s/fragmentation-sim-ci.svg", dir);
    char *t = slurp(out);
    cr_expect(strstr(t, "peak_reserved") && strstr(t, "seconds"), "a panel per metric");
    cr_expect(strstr(t, "2026-11-02 bbbbbbb"), "runs labelled by date and commit");
    free(t);
    write_text(csv, "date,commit\n");
    cr_expect_eq(plot_trend(csv, dir, "png", written, sizeof written, err, sizeof err), OOM_EINVAL);
    cr_expect(strstr(err, "line 1 is not the header"), "%s", err);
    /* a bad row is skipped (history_read warns with its line): the figure is drawn from the others */
    write_text(csv, "utc_date,commit,backend,device,scale,scenario,variant,metric,value\n"
                    "2026-11-01,a,sim,sim,ci,fragmentation,bug,peak_reserved,lots\n"
                    "2026-11-02,b,sim,sim,ci,fragmentation,bug,peak_reserved,1048576\n");
    cr_expect_eq(plot_trend(csv, dir, "svg", written, sizeof written, err, sizeof err), OOM_OK, "%s", err);
    write_text(csv, "utc_date,commit,backend,device,scale,scenario,variant,metric,value\n"
                    "2026-11-01,a,sim,sim,ci,fragmentation,bug,peak_reserved,lots\n");
    cr_expect_eq(plot_trend(csv, dir, "png", written, sizeof written, err, sizeof err), OOM_EINVAL);
    cr_expect(strstr(err, "no rows under the header: nothing to plot"), "%s", err);
}

Test(plot, report_has_every_section_image_story_and_twin, .init = run_fragmentation)
{
    char out[256], err[1024], page[300];
    snprintf(out, sizeof out, "%s/report", dir);
    const char *inputs[] = {dir};
    cr_assert_eq(report_html(inputs, 1, "tests/data/twins", out, err, sizeof err), OOM_OK, "%s", err);
    snprintf(page, sizeof page, "%s/index.html", out);
    char *t = slurp(page);
    cr_expect(strstr(t, "<section id=\"fragmentation\">"));
    cr_expect(strstr(t, "Cause. The caching allocator serves requests"), "the story, from the opening comment");
    cr_expect(strstr(t, "<b class=\"kind-myth\">myth-empty-cache</b> torch.cuda.empty_cache() releases"));
    cr_expect(strstr(t, "measured: OOM in the large request (100.00 MiB asked, 700.00 MiB reserved but "
                        "unallocated, largest free block 6.00 MiB)"),
              "each myth against its measurement");
    cr_expect(strstr(t, "PyTorch: peak reserved"), "the twin's numbers beside ours");
    cr_expect_null(strstr(t, "class=\"diff\""), "oomlab equals PyTorch on fragmentation");
    cr_expect_null(strstr(t, "<script"), "no JavaScript");
    /* every image the page names exists */
    int imgs = 0;
    for (const char *p = t; (p = strstr(p, "<img src=\"")); imgs++) {
        p += 10;
        char path[600];
        snprintf(path, sizeof path, "%s/%.*s", out, (int)strcspn(p, "\""), p);
        cr_expect_eq(access(path, R_OK), 0, "%s is missing", path);
    }
    cr_expect_eq(imgs, 3, "timeline, peaks, segments");
    free(t);
    const char *none[] = {"tests/data/twins/fragmentation.torch.json"};
    cr_expect_eq(report_html(none, 1, NULL, out, err, sizeof err), OOM_EINVAL);
    cr_expect_eq(access(page, R_OK), 0, "a refused report leaves the last one in place");
}

/* make report names the run folder and, when the sweep landed in that same folder (both runs in one second), its
 * sweep file too: one file named twice is one input, not "a second run"; a different file of the same scenario is
 * still refused. */
Test(plot, report_takes_a_file_named_twice_once, .init = run_fragmentation)
{
    char out[256], err[1024], copy[300];
    snprintf(out, sizeof out, "%s/report", dir);
    const char *twice[] = {dir, json};
    cr_assert_eq(report_html(twice, 2, NULL, out, err, sizeof err), OOM_OK, "%s", err);
    snprintf(copy, sizeof copy, "%s/copy.json", out);
    char *t = slurp(json);
    FILE *f = fopen(copy, "w");
    cr_assert_not_null(f);
    fputs(t, f);
    fclose(f);
    free(t);
    const char *two[] = {json, copy};
    cr_expect_eq(report_html(two, 2, NULL, out, err, sizeof err), OOM_EINVAL);
    cr_expect(strstr(err, "a second run of fragmentation"), "%s", err);
}

/* Run a scenario on sim at ci scale into the test's fresh folder (json). */
static void run_scenario(const char *name)
{
    test_tmpdir_make(dir, "plot");
    run_options o = {.backend = DEVICE_SIM};
    run_result r;
    char err[512];
    cr_assert_eq(runner_run(scenario_find(name), &o, &r, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(report_write_in(&r, dir, json, sizeof json), OOM_OK, "%s", oom_error_detail());
    run_result_free(&r);
}

static int count_of(const char *t, const char *s)
{
    int n = 0;
    for (const char *p = t; (p = strstr(p, s)); p += strlen(s))
        n++;
    return n;
}

/* The allocator's window counter: the most allocated since the last take, then the window starts at current. */
Test(plot, the_window_peak_is_the_most_allocated_between_two_takes)
{
    device *dev = test_device_open(0);
    cachealloc_options o = {0};
    alloc_conf_default(&o.conf);
    cachealloc *ca = NULL;
    cr_assert_eq(cachealloc_new(dev, &o, &ca), OOM_OK);
    devptr a = 0, b = 0;
    cr_assert_eq(cachealloc_malloc(ca, 4 << 20, &a), OOM_OK);
    cr_assert_eq(cachealloc_malloc(ca, 8 << 20, &b), OOM_OK);
    cr_assert_eq(cachealloc_free(ca, b), OOM_OK);
    cr_expect_eq(cachealloc_take_window_peak(ca), 12 << 20, "a and b were alive together");
    cr_expect_eq(cachealloc_take_window_peak(ca), 4 << 20, "since the last take only a was");
    cachealloc_reset_peak(ca);
    cr_assert_eq(cachealloc_malloc(ca, 2 << 20, &b), OOM_OK);
    cr_assert_eq(cachealloc_free(ca, b), OOM_OK);
    cr_expect_eq(cachealloc_take_window_peak(ca), 6 << 20, "2 MiB more than the 4 MiB of a");
    cr_assert_eq(cachealloc_free(ca, a), OOM_OK);
    cachealloc_delete(ca);
    device_close(dev);
}

/* inplace_ops: bug and fix-inplace hold one x at every sample; only the peak between samples tells them apart
 * (x = x + y holds the old and the new x together). */
Test(plot, the_timeline_draws_the_peak_between_samples)
{
    run_scenario("inplace_ops");
    char *text = slurp(json);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *vs = cJSON_GetObjectItem(j, "variants");
    const cJSON *bug = cJSON_GetArrayItem(vs, 0), *fix = cJSON_GetArrayItem(vs, 1);
    cr_assert_str_eq(cJSON_GetObjectItem(fix, "name")->valuestring, "fix-inplace");
    const cJSON *sb = cJSON_GetArrayItem(cJSON_GetObjectItem(bug, "samples"), 2),
                *sf = cJSON_GetArrayItem(cJSON_GetObjectItem(fix, "samples"), 2);
    cr_expect_eq(cJSON_GetObjectItem(sb, "allocated")->valuedouble, 16.0 * 1048576);
    cr_expect_eq(cJSON_GetObjectItem(sb, "step_peak")->valuedouble, 32.0 * 1048576, "old and new x together");
    cr_expect_eq(cJSON_GetObjectItem(sf, "allocated")->valuedouble, 16.0 * 1048576);
    cr_expect_eq(cJSON_GetObjectItem(sf, "step_peak")->valuedouble, 16.0 * 1048576, "add_ makes nothing");
    cJSON_Delete(j);
    char svg[1200], err[512];
    snprintf(svg, sizeof svg, "%s/t.svg", dir);
    cr_assert_eq(plot_run(json, svg, err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(svg);
    cr_expect_eq(count_of(t, "allocated peak between samples"), 1, "named once, in the legend");
    cr_expect_eq(count_of(t, "fill = 'rgb(253, 174, 107)' points"), 10 + 0 + 2 + 2 + 10 + 1,
                 "one bar per hidden peak: bug 10 ops, fix-inplace none, bug-inplace-on-saved and fix-clone the "
                 "forward's 0.16 MiB and the backward's, myth-same-layout 10; and the legend's");
    cr_expect_null(strstr(t, "pinned host memory"), "no host series where there is none");
    free(t);
}

/* pinned_memory: what runs out is pinned host memory: drawn per sample with its budget and the pin OOM. */
Test(plot, the_timeline_draws_pinned_host_memory_and_the_pin_oom)
{
    run_scenario("pinned_memory");
    char svg[1200], err[512];
    snprintf(svg, sizeof svg, "%s/t.svg", dir);
    cr_assert_eq(plot_run(json, svg, err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(svg);
    cr_expect_eq(count_of(t, "pinned host memory (right axis)"), 1);
    cr_expect_eq(count_of(t, "pinned budget (62.00 MiB)"), 1);
    cr_expect_eq(count_of(t, "pin OOM: cudaHostAlloc refused"), 1, "only the bug ran out of pinned memory");
    cr_expect(strstr(t, "pinned MiB"), "the right axis is named");
    free(t);
}

/* The peaks chart: both bars labelled, and the failed request on the bar of a variant that ran out. */
Test(plot, the_peaks_chart_labels_both_bars_and_stacks_the_failed_request)
{
    run_scenario("fragmentation");
    char svg[1200], err[512];
    snprintf(svg, sizeof svg, "%s/p.svg", dir);
    cr_assert_eq(plot_peaks(json, svg, err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(svg);
    cr_expect_eq(count_of(t, ">1000.00 MiB<"), 6, "every reserved bar labelled");
    cr_expect_eq(count_of(t, ">900.00 MiB<"), 6, "every allocated bar labelled");
    cr_expect_eq(count_of(t, ">OOM: +100.00 MiB<"), 4, "bug and the three myths asked 100 MiB and failed");
    free(t);
}

/* The README's gallery is what make gallery draws, byte for byte (scripts/gallery.sh --check draws it afresh in a
 * scratch folder with $OOMLAB_BIN and compares). */
Test(plot, the_committed_gallery_is_what_make_gallery_draws)
{
    const char *b = getenv("OOMLAB_BIN");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "bash scripts/gallery.sh --check '%s' docs/img/gallery >/dev/null", b && b[0] ? b : "build/oomlab");
    cr_expect_eq(system(cmd), 0, "docs/img/gallery differs from what make gallery draws: run make gallery");
}

/* The whole catalog at full scale, a dry run on sim, into the test's fresh folder. */
static void run_catalog_dry(void)
{
    test_tmpdir_make(dir, "plot");
    for (size_t k = 0; k < scenario_catalog_size; k++) {
        run_options o = {.backend = DEVICE_SIM, .dry_run = true};
        run_result r;
        char err[512];
        cr_assert_eq(runner_run(scenario_catalog[k], &o, &r, err, sizeof err), OOM_OK, "%s", err);
        cr_assert_eq(report_write_in(&r, dir, json, sizeof json), OOM_OK, "%s", oom_error_detail());
        run_result_free(&r);
    }
}

Test(plot, a_story_item_claims_what_it_says)
{
    cr_expect_eq(report_story_claim("forward and loss under autocast. It still OOMs in step 2's backward"), CLAIM_OOM,
                 "the bf16 story that contradicted its measured row");
    cr_expect_eq(report_story_claim("(peak 1028 MiB allocated: it fits, the allocator releasing cached segments)"),
                 CLAIM_FITS);
    cr_expect_eq(report_story_claim("model.half(): half of everything"), CLAIM_NONE);
}

/* The page of the whole catalog: a contents list in one column, each section's table and timeline first and the
 * rest folded, no story contradicting its measured row, and pinned_memory's twin compared on what it recorded. */
Test(plot, the_report_reads_one_screen_per_scenario_and_never_contradicts_itself, .init = run_catalog_dry)
{
    char out[256], err[1024], page[300];
    snprintf(out, sizeof out, "%s/report", dir);
    const char *inputs[] = {dir};
    cr_assert_eq(report_html(inputs, 1, "tests/data/twins", out, err, sizeof err), OOM_OK, "%s", err);
    snprintf(page, sizeof page, "%s/index.html", out);
    char *t = slurp(page);
    cr_expect_null(strstr(t, "columns:3"), "the contents list is one column: its long titles collided");
    cr_expect_eq(count_of(t, "<details><summary>The story:"), (int)scenario_catalog_size, "every story folded");
    cr_expect_eq(count_of(t, "<details><summary>More figures: the peaks"), (int)scenario_catalog_size);
    const char *sec = strstr(t, "<section id=\"oversize_batch\">");
    cr_assert_not_null(sec);
    const char *table = strstr(sec, "<table>"), *story = strstr(sec, "<details><summary>The story:");
    cr_expect(table && story && table < story, "the measured table comes before the folded story");
    cr_expect_eq(count_of(t, "contradiction"), 0, "a story says what its row does not");
    const char *pin = strstr(t, "<section id=\"pinned_memory\">");
    cr_assert_not_null(pin);
    cr_expect(strstr(pin, "<td class=\"\">ok (recorded without the pinned budget*)</td>"),
              "the twin's bug: its recorded outcome with a note, not a red mismatch");
    cr_expect(strstr(pin, "<th>PyTorch: peak pinned host</th>"));
    cr_expect(strstr(pin, "<td>480.00 MiB</td>"), "oomlab's bug held fifteen 32 MiB pinned blocks");
    cr_expect(strstr(pin, "<td class=\"same\">480.00 MiB</td>"), "... as PyTorch's twin did");
    free(t);
}

/* Trends from zero: a count that stays 0 has the axis 0..1 (no negative ticks), oom_requested is bytes (MiB), not
 * raw numbers in scientific notation. */
Test(plot, trend_axes_start_at_zero_and_bytes_are_mib)
{
    test_tmpdir_make(dir, "trend");
    char csv[128], written[1024], err[512], out[256];
    snprintf(csv, sizeof csv, "%s/history.csv", dir);
    write_text(csv, "utc_date,commit,backend,device,scale,scenario,variant,metric,value\n"
                    "2026-11-01,a,sim,sim,ci,fragmentation,bug,expectations_failed,0\n"
                    "2026-11-02,b,sim,sim,ci,fragmentation,bug,expectations_failed,0\n"
                    "2026-11-01,a,sim,sim,ci,fragmentation,bug,oom_requested,104857600\n"
                    "2026-11-02,b,sim,sim,ci,fragmentation,bug,oom_requested,104857600\n");
    cr_assert_eq(plot_trend(csv, dir, "svg", written, sizeof written, err, sizeof err), OOM_OK, "%s", err);
    snprintf(out, sizeof out, "%s/fragmentation-sim-ci.svg", dir);
    char *t = slurp(out);
    cr_expect_null(strstr(t, ">-"), "no negative tick");
    cr_expect_null(strstr(t, "e+0"), "no scientific notation");
    cr_expect(strstr(t, ">MiB<"), "oom_requested in MiB");
    cr_expect(strstr(t, ">100<"), "100 MiB asked, a tick at 100");
    free(t);
}

/* dangling_tensors at full scale: myth-keep-loss and myth-keep-output have 724 samples (forward, backward and
 * optimizer step of 240 steps), drawn a value per step, not a solid band; the fixes' step labels drawn whole. */
Test(plot, long_series_are_drawn_per_step_and_labels_whole)
{
    test_tmpdir_make(dir, "plot");
    run_options o = {.backend = DEVICE_SIM, .dry_run = true};
    run_result r;
    char err[512], svg[1200];
    cr_assert_eq(runner_run(scenario_find("dangling_tensors"), &o, &r, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(report_write_in(&r, dir, json, sizeof json), OOM_OK, "%s", oom_error_detail());
    run_result_free(&r);
    snprintf(svg, sizeof svg, "%s/t.svg", dir);
    cr_assert_eq(plot_run(json, svg, err, sizeof err), OOM_OK, "%s", err);
    char *t = slurp(svg);
    cr_expect_eq(count_of(t, "sample (each training step at its largest)"), 2, "the two myths of 724 samples");
    cr_expect(strstr(t, ">4096 MiB request again: served, then freed<"), "a step label whole, not cut");
    cr_expect_null(strstr(t, "...<"), "no label cut");
    free(t);
}

/* advise's figure in the house style: every setting's bar labelled with its minimum budget. */
Test(plot, advise_labels_every_bar)
{
    test_tmpdir_make(dir, "plot");
    trace_file tf;
    char err[600] = "", svg[1200];
    cr_assert_eq(trace_load("tests/data/addr_transformer.trace.json", &tf, err, sizeof err), OOM_OK, "%s", err);
    advise_options opt = {.series = true};
    advise_result res;
    cr_assert_eq(advise_run(&tf, "addr_transformer", &opt, &res, err, sizeof err), OOM_OK, "%s", err);
    snprintf(svg, sizeof svg, "%s/a.svg", dir);
    oom_status st = advise_plot(&res, svg, err, sizeof err);
    size_t nrows = res.nrows;
    advise_result_free(&res);
    trace_free(&tf);
    cr_assert_eq(st, OOM_OK, "%s", err);
    char *t = slurp(svg);
    cr_expect_eq(nrows, 9);
    cr_expect(strstr(t, ">2128 MiB<"), "the defaults' bar");
    cr_expect(strstr(t, ">1878 MiB<"), "max_split_size_mb:32's bar, the best");
    cr_expect(strstr(t, ">2264 MiB<"), "garbage_collection_threshold:0.6's bar");
    free(t);
}
