/* fuzz_allocconf.c - libFuzzer harness of the allocator config parser: the input is the settings text of
 * --alloc-conf / PYTORCH_CUDA_ALLOC_CONF, given to alloc_conf_parse as a C string (bytes after a NUL are cut,
 * as the environment cuts them).
 *
 * Checked, from allocconf.h's contract:
 *   - a failure is OOM_EINVAL with one non-empty error line, and leaves the config untouched;
 *   - a success gives a config inside the documented ranges (max_split_size and max_non_split_rounding at
 *     least large_segment_size, which exceeds 10 MiB; divisions 0 or a power of two; 0 <= gc < 1;
 *     0 <= fraction <= 1; register threads a power of two <= 128) and the text copied, truncated;
 *   - parsing is deterministic, and alloc_conf_format, alloc_conf_divisions and hostalloc_options_from_conf
 *     read every config it accepts.
 * Seeds: tests/fuzz/corpus/allocconf (the settings the suites and traces use, merged with -merge=1).
 */
#include "fuzzutil.h"

#include <stdbool.h>
#include <stdint.h>

#include "alloc/allocconf.h"
#include "alloc/hostalloc.h"
#include "core/status.h"

#define MIB ((size_t)1 << 20)

static bool pow2(size_t v) { return v && !(v & (v - 1)); }

/* Field by field: struct copies need not copy padding. */
static bool conf_equal(const alloc_conf *a, const alloc_conf *b)
{
    return a->max_split_size == b->max_split_size && a->max_non_split_rounding == b->max_non_split_rounding &&
           memcmp(a->roundup_divisions, b->roundup_divisions, sizeof a->roundup_divisions) == 0 &&
           a->gc_threshold == b->gc_threshold && a->expandable_segments == b->expandable_segments &&
           a->large_segment_size == b->large_segment_size &&
           a->per_process_memory_fraction == b->per_process_memory_fraction && a->fraction_set == b->fraction_set &&
           a->pinned_use_host_register == b->pinned_use_host_register &&
           a->pinned_num_register_threads == b->pinned_num_register_threads &&
           a->pinned_reserve_segment_size == b->pinned_reserve_segment_size && strcmp(a->text, b->text) == 0;
}

static void check_ranges(const alloc_conf *c, const char *text)
{
    if (c->large_segment_size <= 10 * MIB || c->large_segment_size % MIB)
        fuzz_fail("large_segment_size %zu", c->large_segment_size);
    if (c->max_split_size != SIZE_MAX && (c->max_split_size < c->large_segment_size || c->max_split_size % MIB))
        fuzz_fail("max_split_size %zu with large_segment_size %zu", c->max_split_size, c->large_segment_size);
    if (c->max_non_split_rounding < c->large_segment_size || c->max_non_split_rounding % MIB)
        fuzz_fail("max_non_split_rounding %zu with large_segment_size %zu", c->max_non_split_rounding,
                  c->large_segment_size);
    for (size_t b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
        if (c->roundup_divisions[b] && !pow2(c->roundup_divisions[b]))
            fuzz_fail("roundup_divisions[%zu] = %zu", b, c->roundup_divisions[b]);
    if (!(c->gc_threshold >= 0.0 && c->gc_threshold < 1.0))
        fuzz_fail("gc_threshold %g", c->gc_threshold);
    if (!(c->per_process_memory_fraction >= 0.0 && c->per_process_memory_fraction <= 1.0))
        fuzz_fail("per_process_memory_fraction %g", c->per_process_memory_fraction);
    if (!c->fraction_set && c->per_process_memory_fraction != 1.0)
        fuzz_fail("per_process_memory_fraction %g but not set", c->per_process_memory_fraction);
    if (!pow2(c->pinned_num_register_threads) || c->pinned_num_register_threads > 128)
        fuzz_fail("pinned_num_register_threads %zu", c->pinned_num_register_threads);
    if (c->pinned_reserve_segment_size % MIB)
        fuzz_fail("pinned_reserve_segment_size %zu", c->pinned_reserve_segment_size);
    if (strncmp(c->text, text, sizeof c->text - 1) != 0 || strlen(c->text) >= sizeof c->text)
        fuzz_fail("text not copied: '%s'", c->text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    oom_error_clear();

    alloc_conf c, before, again;
    alloc_conf_default(&c);
    memset(c.text, 'x', sizeof c.text - 1); /* a marker: a failed parse must leave c as it was */
    c.text[sizeof c.text - 1] = '\0';
    before = c;
    char err[300];
    oom_status st = alloc_conf_parse(&c, text, err, sizeof err);
    if (st != OOM_OK) {
        if (st != OOM_EINVAL)
            fuzz_fail("alloc_conf_parse returned %s (%s)", oom_status_str(st), err);
        fuzz_check_error_line("alloc_conf_parse", err);
        if (!conf_equal(&c, &before))
            fuzz_fail("a failed parse changed the config (%s)", err);
    } else {
        if (err[0])
            fuzz_fail("a successful parse left an error: %s", err);
        check_ranges(&c, text);
        alloc_conf_default(&again);
        if (alloc_conf_parse(&again, text, err, sizeof err) != OOM_OK || !conf_equal(&c, &again))
            fuzz_fail("parsing the same text twice differs");
        char buf[ALLOC_CONF_TEXT_MAX];
        alloc_conf_format(&c, buf, sizeof buf);
        if (strlen(buf) >= sizeof buf)
            fuzz_fail("alloc_conf_format overran");
        for (unsigned lg = 0; lg < 64; lg++) {
            size_t d = alloc_conf_divisions(&c, (size_t)1 << lg);
            if (d && !pow2(d))
                fuzz_fail("alloc_conf_divisions(2^%u) = %zu", lg, d);
        }
        hostalloc_options ho;
        hostalloc_options_from_conf(&c, &ho);
    }
    free(text);
    oom_error_clear();
    return 0;
}
