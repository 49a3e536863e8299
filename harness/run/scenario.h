/* scenario.h - the scenario interface: one failure mode, its variants, and what each variant must show.
 *
 * A scenario (scenarios/NAME.c) reproduces one PyTorch OOM failure mode with the runtime (tensor.h, ops.h,
 * nn.h, optim.h) and lists its variants:
 *   bug     the failure as users meet it;
 *   fix-*   a fix that works, and says why;
 *   myth-*  popular advice that does not help, shown failing (or a seed article's false claim, shown false).
 * The runner (runner.h) gives each variant a fresh runtime under the scenario's budget and the variant's
 * allocator settings, and calls the scenario's run function, which:
 *   - does what the PyTorch code does, marking steps with scn_step (a sample of the allocator's counters);
 *   - catches a device OOM where PyTorch code would raise it, with scn_caught (the OOM is recorded, with the
 *     allocator's state at that moment, and the run goes on, as after `except torch.OutOfMemoryError`);
 *   - ends with scn_expect lines: what this variant must show, asserted on the measured counters.
 * Every number comes from the caching allocator's counters; a scenario computes no byte counts itself.
 */
#ifndef OOMLAB_SCENARIO_H
#define OOMLAB_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/cachealloc.h"
#include "core/compat.h"
#include "alloc/memstats.h"
#include "runtime/runtime.h"
#include "core/status.h"

OOM_BEGIN_DECLS

typedef enum variant_kind { VARIANT_BUG, VARIANT_FIX, VARIANT_MYTH } variant_kind;

const char *variant_kind_str(variant_kind k); /* "bug", "fix", "myth" */

/* A knob of the scenario, set with --set name=value. Values are integers in [min, max]. */
typedef struct scenario_param {
    const char *name;
    const char *help;
    int64_t def, min, max;
} scenario_param;

typedef struct scenario_variant {
    const char *name;       /* "bug", "fix-expandable-segments", "myth-empty-cache", ... */
    variant_kind kind;
    const char *summary;    /* one line: what the variant does */
    const char *alloc_conf; /* allocator settings it runs under, applied over the user's ("" = none) */
} scenario_variant;

typedef struct scn scn; /* a variant's run (runner.c) */

typedef struct scenario {
    const char *name;  /* the catalog key: `oomlab run NAME` */
    const char *title; /* one line */
    const char *story; /* a paragraph: cause, what the user sees, the fix, and why it works */
    size_t default_budget;
    const scenario_param *params;
    size_t nparams;
    const scenario_variant *variants;
    size_t nvariants;
    /* Run variant v in s's runtime. Returns OOM_OK, or a failure that is not a measured result (an autograd
     * error it did not expect, a host OOM): the runner reports the variant as an error. */
    oom_status (*run)(scn *s, const scenario_variant *v);
} scenario;

/* ---- for scenario code -------------------------------------------------------------------------------- */

/* The variant's runtime. */
rt *scn_rt(scn *s);
/* A parameter's value (the default unless --set changed it). */
int64_t scn_param(const scn *s, const char *name);
/* Sample the allocator's counters under a label ("step 3", "freed the short-lived tensors"). */
void scn_step(scn *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* `except torch.OutOfMemoryError`: if the runtime holds a device OOM, record it (the first one is the
 * variant's OOM), clear it and return true. Any other failure stays in the runtime and returns false. */
bool scn_caught(scn *s, const char *what);
/* Assert what the variant must show; the description says it in words, with the measured figures. */
void scn_expect(scn *s, bool holds, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The allocator's statistics now, and one of them by its memory_stats() name ("reserved_bytes.all.current"). */
const memstats *scn_stats(const scn *s);
int64_t scn_stat(const scn *s, const char *key);
/* The first OOM of the variant, or NULL. */
const struct scn_oom *scn_first_oom(const scn *s);

/* A recorded OOM: where it happened and the allocator's state at that moment. */
typedef struct scn_oom {
    int step;                  /* samples taken before it */
    char what[96];
    size_t requested;          /* bytes asked for */
    size_t alloc_size;         /* the segment the allocator tried to get */
    size_t allocated, reserved;
    size_t reserved_unallocated;
    size_t largest_free_block;
    char message[RT_MESSAGE_MAX]; /* PyTorch's text, then oomlab's two figures */
} scn_oom;

/* ---- the catalog (registry.c) --------------------------------------------------------------------------- */

extern const scenario *const scenario_catalog[];
extern const size_t scenario_catalog_size;
const scenario *scenario_find(const char *name);
const scenario_variant *scenario_variant_find(const scenario *sc, const char *name);

OOM_END_DECLS

#endif
