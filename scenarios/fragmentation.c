/* fragmentation.c - "CUDA out of memory" while hundreds of MiB are reserved but unallocated.
 *
 * Cause. The caching allocator serves requests between 1 and 10 MiB from 20 MiB segments and gives a segment
 * back to the device only when every block in it is free. Tensors with interleaved lifetimes share segments: a
 * 6 MiB tensor that dies young next to a 3 MiB tensor that lives on, two pairs per segment and a 2 MiB tail.
 * Once the short-lived tensors are freed, every segment still holds live 3 MiB blocks, so none can be released,
 * and the free space is cut into 6 MiB and 2 MiB holes that no large request fits.
 *
 * What the user sees. Under a 1 GiB budget, after 100 pairs: "CUDA out of memory. Tried to allocate 100.00
 * MiB. ... Of the allocated memory 300.00 MiB is allocated by PyTorch, and 700.00 MiB is reserved by PyTorch
 * but unallocated." The memory is there, in pieces.
 *
 * The PyTorch code it mirrors (scripts/twins/fragmentation.py runs it):
 *     torch.cuda.set_per_process_memory_fraction((1 << 30) / total)
 *     keep, drop = [], []
 *     for _ in range(100):
 *         drop.append(torch.empty(6 << 20, dtype=torch.uint8, device="cuda"))
 *         keep.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))
 *     del drop
 *     big = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")   # torch.OutOfMemoryError
 *
 * The fixes, and why they work.
 *   fix-expandable-segments  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one growing virtual range per
 *       pool, mapped in 20 MiB pages. The pairs pack back to back with no per-segment tails (900 MiB mapped, not
 *       1000), and the 100 MiB request maps five fresh pages right after the last block: 1000 MiB, in budget.
 *   fix-long-lived-first  allocate the tensors that live on first. They pack six to a segment, and the
 *       short-lived ones fill segments of their own, which become whole free segments when freed; the
 *       allocator's own OOM path releases them (it empties the cache and retries once) and the request fits.
 * The myths: each is advice that appears in answers to this error, and none touches the cause.
 *   myth-empty-cache     torch.cuda.empty_cache() releases whole free segments only: here there are none.
 *   myth-max-split-size  max_split_size_mb:128 stops the allocator from splitting blocks of 128 MiB or more;
 *       these segments are 20 MiB, so nothing changes.
 *   myth-gc-threshold    garbage_collection_threshold:0.6 frees cached blocks that are whole segments; every
 *       segment here is split, so it frees nothing.
 * PyTorch 2.11 on an H100 gives the same outcome for every variant (docs/parity.md).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/ops.h"
#include "run/scenario.h"
#include "runtime/tensor.h"

#define MIB ((int64_t)1 << 20)

static const scenario_param params[] = {
    /* name, help, full, min, max, ci (0: as full; allocation only, so CI runs it at full scale) */
    {"pairs", "how many (short-lived, long-lived) pairs are allocated", 100, 1, 4096, 0},
    {"short_mib", "size of a short-lived tensor, MiB", 6, 1, 1024, 0},
    {"long_mib", "size of a long-lived tensor, MiB", 3, 1, 1024, 0},
    {"request_mib", "the large request made after the short-lived tensors are freed, MiB", 100, 1, 65536, 0},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "interleave short- and long-lived tensors, free the short ones, ask for a large block", ""},
    {"fix-expandable-segments", VARIANT_FIX, "the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
     "expandable_segments:True"},
    {"fix-long-lived-first", VARIANT_FIX, "allocate every long-lived tensor before the short-lived ones", ""},
    {"myth-empty-cache", VARIANT_MYTH, "call torch.cuda.empty_cache() before the large request", ""},
    {"myth-max-split-size", VARIANT_MYTH, "the same with max_split_size_mb:128", "max_split_size_mb:128"},
    {"myth-gc-threshold", VARIANT_MYTH, "the same with garbage_collection_threshold:0.6",
     "garbage_collection_threshold:0.6"},
};

/* torch.empty(mib << 20, dtype=torch.uint8): the same request, as f32 elements. */
static tensor *empty_mib(rt *r, int64_t mib) { return tensor_empty(r, DT_F32, SHAPE(mib * MIB / 4)); }

static oom_status run(scn *s, const scenario_variant *v)
{
    rt *r = scn_rt(s);
    int64_t pairs = scn_param(s, "pairs"), short_mib = scn_param(s, "short_mib");
    int64_t long_mib = scn_param(s, "long_mib"), request_mib = scn_param(s, "request_mib");
    bool long_first = strcmp(v->name, "fix-long-lived-first") == 0;
    tensor **keep = calloc((size_t)pairs, sizeof *keep), **drop = calloc((size_t)pairs, sizeof *drop);
    if (!keep || !drop) {
        free(keep);
        free(drop);
        return OOM_ENOMEM_HOST;
    }

    scn_step(s, "start");
    int64_t made = 0; /* pairs allocated before an OOM (all of them when none) */
    if (long_first) {
        for (int64_t i = 0; i < pairs && rt_ok(r); i++)
            keep[i] = empty_mib(r, long_mib);
        for (int64_t i = 0; i < pairs && rt_ok(r); i++, made++)
            drop[i] = empty_mib(r, short_mib);
    } else {
        for (int64_t i = 0; i < pairs && rt_ok(r); i++, made++) {
            drop[i] = empty_mib(r, short_mib);
            keep[i] = empty_mib(r, long_mib);
        }
    }
    bool pairs_fit = !scn_caught(s, "allocating the pairs");
    int64_t allocated = 0; /* whole pairs: after an OOM every later allocation fell through */
    while (allocated < pairs && keep[allocated] && drop[allocated])
        allocated++;
    if (allocated == pairs)
        scn_step(s, "%lld pairs allocated", (long long)pairs);
    else /* the OOM caught above, or an error that ends the variant (the host's memory on sim) */
        scn_step(s, "%s after %lld of %lld pairs", pairs_fit ? "error" : "OOM", (long long)allocated,
                 (long long)pairs);

    for (int64_t i = 0; i < pairs; i++) /* del drop */
        tensor_release(drop[i]);
    scn_step(s, "short-lived tensors freed");
    int64_t reserved_before = scn_stat(s, "reserved_bytes.all.current");
    int64_t unallocated_before = reserved_before - scn_stat(s, "allocated_bytes.all.current");

    if (strcmp(v->name, "myth-empty-cache") == 0) {
        rt_empty_cache(r);
        scn_step(s, "torch.cuda.empty_cache()");
    }
    int64_t released_by_empty_cache = reserved_before - scn_stat(s, "reserved_bytes.all.current");

    bool request_ok = false;
    /* how the request was served, from the counters around it: segments released on the allocator's OOM path
     * (its retry), a new segment, or a cached block */
    int64_t retries0 = scn_stat(s, "num_alloc_retries"), frees0 = scn_stat(s, "num_device_free");
    int64_t freed0 = scn_stat(s, "reserved_bytes.all.freed"), got0 = scn_stat(s, "reserved_bytes.all.allocated");
    int64_t retries = 0, frees = 0, freed = 0, got = 0;
    if (pairs_fit) {
        tensor *big = empty_mib(r, request_mib); /* big = torch.empty(...); del big */
        request_ok = !scn_caught(s, "the large request");
        retries = scn_stat(s, "num_alloc_retries") - retries0;
        frees = scn_stat(s, "num_device_free") - frees0;
        freed = scn_stat(s, "reserved_bytes.all.freed") - freed0;
        got = scn_stat(s, "reserved_bytes.all.allocated") - got0;
        if (request_ok)
            scn_step(s, "holding the %lld MiB tensor", (long long)request_mib);
        tensor_release(big);
        scn_step(s, "%lld MiB request %s", (long long)request_mib, request_ok ? "served, then freed" : "failed");
    }
    for (int64_t i = 0; i < pairs; i++)
        tensor_release(keep[i]);
    free(keep);
    free(drop);
    scn_step(s, "everything released");
    if (!rt_ok(r))
        return rt_status(r);

    /* ---- what each variant must show, at these parameters ---- */
    char req[32], unalloc[32], largest[32], cap[32];
    memstats_format_size((uint64_t)(request_mib * MIB), req, sizeof req);
    memstats_format_size(scn_budget(s), cap, sizeof cap);
    const scn_oom *oom = scn_first_oom(s);
    if (!pairs_fit) {
        /* the pattern itself does not fit: nothing about fragmentation can be shown; the OOM must be genuine */
        scn_not_reproduced(s, "%lld pairs of %lld + %lld MiB do not fit in %s (OOM at pair %lld)", (long long)pairs,
                           (long long)short_mib, (long long)long_mib, cap, (long long)made);
        scn_expect(s, oom && oom->reserved + oom->alloc_size > scn_budget(s),
                   "the OOM while allocating the pairs is the budget's: reserved + the new segment exceed %s", cap);
        return OOM_OK;
    }
    scn_expect(s, true, "the %lld pairs fit in the budget", (long long)pairs);
    if (oom) {
        memstats_format_size(oom->reserved_unallocated, unalloc, sizeof unalloc);
        memstats_format_size(oom->largest_free_block, largest, sizeof largest);
        /* every OOM: no cached block fits, and a new segment would exceed the budget */
        scn_expect(s, oom->largest_free_block < oom->requested && oom->reserved + oom->alloc_size > scn_budget(s),
                   "no cached block fits the %s request (the largest free block is %s) and a new segment would "
                   "exceed %s",
                   req, largest, cap);
    }
    /* fragmentation: the budget holds the request's bytes (reserved but unallocated, plus what is not reserved),
     * yet it fails */
    bool fragmented = oom && oom->reserved_unallocated + (scn_budget(s) - oom->reserved) >= oom->alloc_size;
    if (v->kind == VARIANT_FIX) {
        if (request_ok) {
            scn_expect(s, true, "the %s request succeeds", req);
            if (strcmp(v->name, "fix-expandable-segments") == 0)
                scn_expect(s, scn_stat(s, "segment.all.peak") == 0,
                           "pages are mapped into one growing range, no segments (%lld retries)",
                           (long long)scn_stat(s, "num_alloc_retries"));
            else if (scn_stat(s, "num_alloc_retries") > 0)
                scn_note(s, "the allocator released %lld whole free segments on its retry path",
                         (long long)scn_stat(s, "num_device_free"));
        } else if (strcmp(v->name, "fix-expandable-segments") == 0 && fragmented) {
            scn_not_reproduced(s, "expandable segments remove the per-segment tails, but the freed short-lived "
                                  "blocks stay holes in the range: %s is unallocated, the largest hole %s",
                               unalloc, largest);
        } else {
            scn_not_reproduced(s, "the request does not fit even unfragmented: %s allocated, %s more asked, %s allowed",
                               unalloc, req, cap);
            scn_expect(s, !fragmented, "%s fails only because the budget is too small (%s reserved but unallocated)",
                       v->name, unalloc);
        }
    } else if (!oom) {
        char b1[32], b2[32], b3[32];
        memstats_format_size((uint64_t)reserved_before, b1, sizeof b1);
        memstats_format_size((uint64_t)freed, b2, sizeof b2);
        memstats_format_size((uint64_t)got, b3, sizeof b3);
        if (retries > 0)
            scn_not_reproduced(s, "the %s request fit after the allocator's OOM path released %lld whole free "
                                  "segment(s) (%s of the %s reserved) and retried: at these sizes not every segment "
                                  "holds a live block",
                               req, (long long)frees, b2, b1);
        else if (got > 0)
            scn_not_reproduced(s, "the %s request fit in a new %s segment: the budget had room for it beside the %s "
                                  "reserved",
                               req, b3, b1);
        else
            scn_not_reproduced(s, "the %s request was served from a cached free block: the holes are large enough "
                                  "at these sizes",
                               req);
    } else if (!fragmented) {
        scn_not_reproduced(s, "the %s request exceeds what the budget holds even without fragmentation", req);
    } else {
        scn_expect(s, true, "the %s request fails with CUDA out of memory", req);
        scn_expect(s, oom->reserved_unallocated >= (size_t)(request_mib * MIB) ||
                          oom->reserved_unallocated + (scn_budget(s) - oom->reserved) >= oom->alloc_size,
                   "although %s is reserved but unallocated (%s before the request)", unalloc,
                   memstats_format_size((uint64_t)unallocated_before, cap, sizeof cap));
        if (strcmp(v->name, "myth-empty-cache") == 0) {
            char rel[32];
            memstats_format_size((uint64_t)released_by_empty_cache, rel, sizeof rel);
            scn_expect(s, released_by_empty_cache == 0,
                       "empty_cache() released %s: every segment still holds a live block", rel);
        }
    }
    return OOM_OK;
}

const scenario scenario_fragmentation = {
    .name = "fragmentation",
    .title = "OOM with memory reserved but unallocated: interleaved lifetimes fragment the cached segments",
    .story = "Short-lived 6 MiB tensors and long-lived 3 MiB tensors share the allocator's 20 MiB segments. Once "
             "the short-lived ones are freed, no segment is wholly free, so none can be returned, and the free "
             "space is cut into holes too small for a 100 MiB request: it fails although 700 MiB is reserved but "
             "unallocated. expandable_segments:True fixes it (pages mapped after the last block, no per-segment "
             "tails), and so does allocating the long-lived tensors first (the short-lived ones then free whole "
             "segments). empty_cache(), max_split_size_mb and garbage_collection_threshold do not help.",
    .default_budget = (size_t)1 << 30,
    .ci_budget = 0, /* allocation only: the same budget at both scales */
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
