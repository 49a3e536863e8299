/* test_allocconf.c - the PYTORCH_CUDA_ALLOC_CONF parser against PyTorch 2.11's rules. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/allocconf.h"

#define MB ((size_t)1 << 20)
#define GB ((size_t)1 << 30)

/* Parse text that must be accepted. */
static alloc_conf ok(const char *text)
{
    alloc_conf c;
    char err[1024] = "sentinel";
    oom_status st = alloc_conf_parse(&c, text, err, sizeof err);
    cr_assert_eq(st, OOM_OK, "'%s' refused: %s", text ? text : "(null)", err);
    cr_assert_str_eq(err, "", "err not cleared on success");
    return c;
}

/* Parse text that must be refused with exactly msg, leaving a non-default config byte-for-byte untouched. */
static void bad(const char *text, const char *msg)
{
    alloc_conf c, before;
    char err[1024];
    cr_assert_eq(alloc_conf_parse(&c, "max_split_size_mb:64,expandable_segments:True,roundup_power2_divisions:2",
                                  err, sizeof err),
                 OOM_OK);
    memcpy(&before, &c, sizeof c);
    oom_status st = alloc_conf_parse(&c, text, err, sizeof err);
    cr_assert_eq(st, OOM_EINVAL, "'%s' accepted", text);
    cr_assert_str_eq(err, msg, "for '%s'", text);
    cr_assert_null(strchr(err, '\n'));
    cr_assert_eq(memcmp(&before, &c, sizeof c), 0, "config changed by the failed parse of '%s'", text);
}

static void assert_default_values(const alloc_conf *c)
{
    cr_assert_eq(c->max_split_size, SIZE_MAX);
    cr_assert_eq(c->max_non_split_rounding, 20 * MB);
    for (int b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
        cr_assert_eq(c->roundup_divisions[b], 0, "bucket %d", b);
    cr_assert_eq(c->gc_threshold, 0.0);
    cr_assert_eq(c->expandable_segments, false);
    cr_assert_eq(c->large_segment_size, 20 * MB);
    cr_assert_eq(c->per_process_memory_fraction, 1.0);
    cr_assert_eq(c->fraction_set, false);
}

static void assert_buckets(const alloc_conf *c, const size_t want[ALLOC_CONF_ROUNDUP_BUCKETS])
{
    for (int b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
        cr_assert_eq(c->roundup_divisions[b], want[b], "bucket %d: %zu, want %zu", b, c->roundup_divisions[b],
                     want[b]);
}

/* ---- defaults ---- */

Test(allocconf, defaults)
{
    alloc_conf c;
    memset(&c, 0xab, sizeof c);
    alloc_conf_default(&c);
    assert_default_values(&c);
    cr_assert_str_eq(c.text, "");
}

Test(allocconf, null_empty_and_blank_text_give_defaults)
{
    alloc_conf c = ok(NULL);
    assert_default_values(&c);
    cr_assert_str_eq(c.text, "");
    c = ok("");
    assert_default_values(&c);
    c = ok(" \t ");
    assert_default_values(&c);
    cr_assert_str_eq(c.text, " \t ");
}

Test(allocconf, parse_starts_from_defaults_not_from_c)
{
    alloc_conf c = ok("max_split_size_mb:64,expandable_segments:True");
    cr_assert_eq(alloc_conf_parse(&c, "garbage_collection_threshold:0.5", NULL, 0), OOM_OK);
    cr_assert_eq(c.max_split_size, SIZE_MAX);
    cr_assert_eq(c.expandable_segments, false);
    cr_assert_eq(c.gc_threshold, 0.5);
}

/* ---- each key ---- */

Test(allocconf, max_split_size_mb)
{
    alloc_conf c = ok("max_split_size_mb:64");
    cr_assert_eq(c.max_split_size, 64 * MB);
    cr_assert_eq(c.max_non_split_rounding, 20 * MB);
    cr_assert_str_eq(c.text, "max_split_size_mb:64");
    cr_assert_eq(ok("max_split_size_mb:20").max_split_size, 20 * MB);
    cr_assert_eq(ok("max_split_size_mb:40960").max_split_size, 40960 * MB);
}

Test(allocconf, max_split_size_mb_clamps_like_pytorch)
{
    /* min(val, SIZE_MAX / kMB) * kMB */
    cr_assert_eq(ok("max_split_size_mb:18446744073709551615").max_split_size, (SIZE_MAX / MB) * MB);
    cr_assert_eq(ok("max_split_size_mb:17592186044415").max_split_size, (SIZE_MAX / MB) * MB);
    cr_assert_eq(ok("max_split_size_mb:17592186044416").max_split_size, (SIZE_MAX / MB) * MB);
    cr_assert_eq(ok("max_non_split_rounding_mb:100000000000000").max_non_split_rounding, (SIZE_MAX / MB) * MB);
}

Test(allocconf, max_non_split_rounding_mb)
{
    alloc_conf c = ok("max_non_split_rounding_mb:30");
    cr_assert_eq(c.max_non_split_rounding, 30 * MB);
    cr_assert_eq(c.max_split_size, SIZE_MAX);
    cr_assert_eq(ok("max_non_split_rounding_mb:20").max_non_split_rounding, 20 * MB);
}

Test(allocconf, garbage_collection_threshold)
{
    cr_assert_eq(ok("garbage_collection_threshold:0.6").gc_threshold, 0.6);
    cr_assert_eq(ok("garbage_collection_threshold:.5").gc_threshold, 0.5);
    cr_assert_eq(ok("garbage_collection_threshold:5e-1").gc_threshold, 0.5);
    cr_assert_eq(ok("garbage_collection_threshold:0.999").gc_threshold, 0.999);
}

Test(allocconf, expandable_segments)
{
    cr_assert_eq(ok("expandable_segments:True").expandable_segments, true);
    cr_assert_eq(ok("expandable_segments:False").expandable_segments, false);
}

Test(allocconf, large_segment_size_mb)
{
    alloc_conf c = ok("large_segment_size_mb:40");
    cr_assert_eq(c.large_segment_size, 40 * MB);
    /* 2.11 resets max_non_split_rounding to large_segment_size unless it is given */
    cr_assert_eq(c.max_non_split_rounding, 40 * MB);
    cr_assert_eq(c.max_split_size, SIZE_MAX);
    c = ok("large_segment_size_mb:11");
    cr_assert_eq(c.large_segment_size, 11 * MB);
    cr_assert_eq(c.max_non_split_rounding, 11 * MB);
}

Test(allocconf, large_segment_size_sets_the_minimum_of_the_split_keys)
{
    /* PyTorch's AllocatorConfig_test: large 15, split 20, non-split 40 */
    alloc_conf c = ok("large_segment_size_mb:15,max_split_size_mb:20,max_non_split_rounding_mb:40,"
                      "garbage_collection_threshold:0.8");
    cr_assert_eq(c.large_segment_size, 15 * MB);
    cr_assert_eq(c.max_split_size, 20 * MB);
    cr_assert_eq(c.max_non_split_rounding, 40 * MB);
    cr_assert_eq(c.gc_threshold, 0.8);
    c = ok("large_segment_size_mb:12,max_split_size_mb:12,max_non_split_rounding_mb:12");
    cr_assert_eq(c.max_split_size, 12 * MB);
    cr_assert_eq(c.max_non_split_rounding, 12 * MB);
    /* read first wherever it stands */
    c = ok("max_split_size_mb:30,large_segment_size_mb:25");
    cr_assert_eq(c.max_split_size, 30 * MB);
    cr_assert_eq(c.max_non_split_rounding, 25 * MB);
    c = ok("max_non_split_rounding_mb:30,large_segment_size_mb:24");
    cr_assert_eq(c.max_non_split_rounding, 30 * MB);
}

Test(allocconf, per_process_memory_fraction)
{
    alloc_conf c = ok("per_process_memory_fraction:0.5");
    cr_assert_eq(c.per_process_memory_fraction, 0.5);
    cr_assert_eq(c.fraction_set, true);
    c = ok("per_process_memory_fraction:0");
    cr_assert_eq(c.per_process_memory_fraction, 0.0);
    cr_assert_eq(c.fraction_set, true);
    c = ok("per_process_memory_fraction:1");
    cr_assert_eq(c.per_process_memory_fraction, 1.0);
    cr_assert_eq(c.fraction_set, true);
    cr_assert_eq(ok("expandable_segments:True").fraction_set, false);
}

Test(allocconf, accepted_keys_without_effect)
{
    alloc_conf c = ok("release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,"
                      "pinned_num_register_threads:128,pinned_use_background_threads:True,"
                      "graph_capture_record_stream_reuse:True,pinned_reserve_segment_size_mb:64,backend:native");
    assert_default_values(&c);
    c = ok("release_lock_on_cudamalloc:False,pinned_use_cuda_host_register:False,pinned_num_register_threads:1,"
           "pinned_use_background_threads:False,graph_capture_record_stream_reuse:False");
    assert_default_values(&c);
}

Test(allocconf, all_keys_together)
{
    alloc_conf c = ok("max_split_size_mb:64,max_non_split_rounding_mb:30,roundup_power2_divisions:4,"
                      "garbage_collection_threshold:0.6,expandable_segments:True,large_segment_size_mb:24,"
                      "per_process_memory_fraction:0.25");
    cr_assert_eq(c.max_split_size, 64 * MB);
    cr_assert_eq(c.max_non_split_rounding, 30 * MB);
    for (int b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
        cr_assert_eq(c.roundup_divisions[b], 4);
    cr_assert_eq(c.gc_threshold, 0.6);
    cr_assert_eq(c.expandable_segments, true);
    cr_assert_eq(c.large_segment_size, 24 * MB);
    cr_assert_eq(c.per_process_memory_fraction, 0.25);
    cr_assert_eq(c.fraction_set, true);
}

/* ---- syntax that PyTorch accepts ---- */

Test(allocconf, whitespace_is_dropped_everywhere)
{
    alloc_conf c = ok("  max_split_size_mb : 6 4 ,\texpandable_segments : Tr ue ,"
                      " roundup_power2_divisions : [ 256 : 1 , > : 8 ] ");
    cr_assert_eq(c.max_split_size, 64 * MB);
    cr_assert_eq(c.expandable_segments, true);
    cr_assert_eq(c.roundup_divisions[8], 1);
    cr_assert_eq(c.roundup_divisions[9], 8);
}

Test(allocconf, trailing_comma_is_accepted)
{
    cr_assert_eq(ok("expandable_segments:False,").expandable_segments, false);
    cr_assert_eq(ok("max_split_size_mb:40,").max_split_size, 40 * MB);
}

Test(allocconf, repeated_key_last_wins)
{
    alloc_conf c = ok("max_split_size_mb:40,max_split_size_mb:64,expandable_segments:True,expandable_segments:False");
    cr_assert_eq(c.max_split_size, 64 * MB);
    cr_assert_eq(c.expandable_segments, false);
}

Test(allocconf, text_is_copied_and_truncated)
{
    char text[700];
    memset(text, ' ', sizeof text);
    memcpy(text, "max_split_size_mb:64", 20);
    text[sizeof text - 1] = '\0';
    alloc_conf c = ok(text);
    cr_assert_eq(c.max_split_size, 64 * MB);
    cr_assert_eq(strlen(c.text), ALLOC_CONF_TEXT_MAX - 1);
    cr_assert_eq(strncmp(c.text, text, ALLOC_CONF_TEXT_MAX - 1), 0);
}

/* ---- roundup_power2_divisions ---- */

Test(allocconf, roundup_single_value_fills_every_bucket)
{
    const size_t four[ALLOC_CONF_ROUNDUP_BUCKETS] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    const size_t one[ALLOC_CONF_ROUNDUP_BUCKETS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    alloc_conf c = ok("roundup_power2_divisions:4");
    assert_buckets(&c, four);
    c = ok("roundup_power2_divisions:1");
    assert_buckets(&c, one);
    cr_assert_eq(ok("roundup_power2_divisions:64").roundup_divisions[15], 64);
}

Test(allocconf, roundup_list_matches_a_torch_2_11_snapshot)
{
    /* tests/data/roundup.trace.json, torch 2.11.0+cu130: allocator_settings.roundup_power2_divisions */
    const size_t want[ALLOC_CONF_ROUNDUP_BUCKETS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8};
    alloc_conf c = ok("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
    assert_buckets(&c, want);
    cr_assert_eq(c.max_split_size, SIZE_MAX);
}

Test(allocconf, roundup_list_first_entry_and_gt)
{
    const size_t a[ALLOC_CONF_ROUNDUP_BUCKETS] = {4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
    alloc_conf c = ok("roundup_power2_divisions:[1:4,>:8]");
    assert_buckets(&c, a);
    /* '>' starts after the last named bucket, not at it (2.11; the old parser overwrote it) */
    const size_t b[ALLOC_CONF_ROUNDUP_BUCKETS] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 16};
    c = ok("roundup_power2_divisions:[16384:2,>:16]");
    assert_buckets(&c, b);
    /* named buckets after the first do not fill the gap before them */
    const size_t d[ALLOC_CONF_ROUNDUP_BUCKETS] = {8, 8, 8, 8, 8, 8, 8, 8, 0, 0, 4, 0, 0, 0, 0, 0};
    c = ok("roundup_power2_divisions:[128:8,1024:4]");
    assert_buckets(&c, d);
}

Test(allocconf, roundup_list_pytorch_unit_test_cases)
{
    /* c10/test/core/AllocatorConfig_test.cpp */
    alloc_conf c = ok("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]");
    cr_assert_eq(alloc_conf_divisions(&c, 32 * MB), 8);
    cr_assert_eq(alloc_conf_divisions(&c, 64 * MB), 8);
    cr_assert_eq(alloc_conf_divisions(&c, 128 * MB), 2);
    cr_assert_eq(alloc_conf_divisions(&c, 256 * MB), 4);
    cr_assert_eq(alloc_conf_divisions(&c, 512 * MB), 2);
    cr_assert_eq(alloc_conf_divisions(&c, 1024 * MB), 4);
    cr_assert_eq(alloc_conf_divisions(&c, 2048 * MB), 1);
    cr_assert_eq(alloc_conf_divisions(&c, 4096 * MB), 1);
    cr_assert_eq(alloc_conf_divisions(&c, 8192 * MB), 1);
    c = ok("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
    cr_assert_eq(alloc_conf_divisions(&c, 64 * MB), 8);
    cr_assert_eq(alloc_conf_divisions(&c, 128 * MB), 8);
    cr_assert_eq(alloc_conf_divisions(&c, 256 * MB), 16);
    cr_assert_eq(alloc_conf_divisions(&c, 512 * MB), 1);
    cr_assert_eq(alloc_conf_divisions(&c, 1024 * MB), 0);
    cr_assert_eq(alloc_conf_divisions(&c, 2048 * MB), 8);
    cr_assert_eq(alloc_conf_divisions(&c, 4096 * MB), 2);
}

Test(allocconf, roundup_list_edge_forms)
{
    const size_t gt_first[ALLOC_CONF_ROUNDUP_BUCKETS] = {0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
    alloc_conf c = ok("roundup_power2_divisions:[>:8]");
    assert_buckets(&c, gt_first);
    /* '>' first (from bucket 1), then a first named entry fills below it */
    const size_t mixed[ALLOC_CONF_ROUNDUP_BUCKETS] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4};
    c = ok("roundup_power2_divisions:[>:4,256:2]");
    assert_buckets(&c, mixed);
    /* a boundary past 32 GiB clamps to bucket 15 */
    const size_t clamp[ALLOC_CONF_ROUNDUP_BUCKETS] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
    c = ok("roundup_power2_divisions:[65536:2]");
    assert_buckets(&c, clamp);
    /* 0 is allowed inside a list */
    const size_t zero[ALLOC_CONF_ROUNDUP_BUCKETS] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4};
    c = ok("roundup_power2_divisions:[256:0,>:4]");
    assert_buckets(&c, zero);
    /* empty list and a trailing ',' inside the list, as PyTorch accepts them */
    const size_t none[ALLOC_CONF_ROUNDUP_BUCKETS] = {0};
    c = ok("roundup_power2_divisions:[]");
    assert_buckets(&c, none);
    const size_t trail[ALLOC_CONF_ROUNDUP_BUCKETS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0};
    c = ok("roundup_power2_divisions:[256:1,]");
    assert_buckets(&c, trail);
    /* the list may be followed by more keys */
    c = ok("roundup_power2_divisions:[256:1,>:8],expandable_segments:True");
    cr_assert_eq(c.roundup_divisions[15], 8);
    cr_assert_eq(c.expandable_segments, true);
}

/* ---- bucket lookup ---- */

Test(allocconf, divisions_lookup_bucket_edges)
{
    alloc_conf c;
    alloc_conf_default(&c);
    for (int b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
        c.roundup_divisions[b] = (size_t)b + 100;
    cr_assert_eq(alloc_conf_divisions(&c, 0), 100);
    cr_assert_eq(alloc_conf_divisions(&c, 1), 100);
    cr_assert_eq(alloc_conf_divisions(&c, 512), 100);
    cr_assert_eq(alloc_conf_divisions(&c, MB - 1), 100);
    cr_assert_eq(alloc_conf_divisions(&c, MB), 100);
    cr_assert_eq(alloc_conf_divisions(&c, 2 * MB - 1), 100);
    cr_assert_eq(alloc_conf_divisions(&c, 2 * MB), 101);
    cr_assert_eq(alloc_conf_divisions(&c, 3 * MB), 101);
    cr_assert_eq(alloc_conf_divisions(&c, 4 * MB), 102);
    cr_assert_eq(alloc_conf_divisions(&c, 256 * MB), 108);
    cr_assert_eq(alloc_conf_divisions(&c, 512 * MB - 1), 108);
    cr_assert_eq(alloc_conf_divisions(&c, 32 * GB - 1), 114);
    cr_assert_eq(alloc_conf_divisions(&c, 32 * GB), 115);
    cr_assert_eq(alloc_conf_divisions(&c, 1024 * GB), 115);
    cr_assert_eq(alloc_conf_divisions(&c, SIZE_MAX), 115);
}

Test(allocconf, divisions_lookup_reference_rounding_examples)
{
    /* pytorch-allocator.md section 1, d = 4: 1200, 5000 and 1 200 000 all read bucket 0 */
    alloc_conf c = ok("roundup_power2_divisions:4");
    cr_assert_eq(alloc_conf_divisions(&c, 1200), 4);
    cr_assert_eq(alloc_conf_divisions(&c, 5000), 4);
    cr_assert_eq(alloc_conf_divisions(&c, 1200000), 4);
    c = ok("roundup_power2_divisions:[1:4,>:8]");
    cr_assert_eq(alloc_conf_divisions(&c, 1200000), 4);
    cr_assert_eq(alloc_conf_divisions(&c, 2 * MB), 8);
    c = ok("");
    cr_assert_eq(alloc_conf_divisions(&c, 1200000), 0);
}

/* ---- errors ---- */

Test(allocconf, error_unknown_key)
{
    /* PyTorch 2.11's words (tests/data/twins/fidelity.torch.json), then the keys oomlab knows */
    bad("foo:1",
        "Unrecognized key 'foo' in Accelerator allocator config. Known keys: max_split_size_mb, "
        "max_non_split_rounding_mb, roundup_power2_divisions, garbage_collection_threshold, expandable_segments, "
        "large_segment_size_mb, per_process_memory_fraction, release_lock_on_cudamalloc, release_lock_on_hipmalloc, "
        "pinned_use_cuda_host_register, pinned_use_hip_host_register, pinned_num_register_threads, "
        "pinned_use_background_threads, pinned_reserve_segment_size_mb, graph_capture_record_stream_reuse, "
        "backend");
    cr_assert_eq(alloc_conf_parse(&(alloc_conf){0}, "Expandable_segments:True", NULL, 0), OOM_EINVAL);
    char err[1024];
    alloc_conf c;
    cr_assert_eq(alloc_conf_parse(&c, "expandable_segments:True,throw_on_cudamalloc_oom:True", err, sizeof err),
                 OOM_EINVAL);
    cr_assert_eq(strncmp(err, "Unrecognized key 'throw_on_cudamalloc_oom' in Accelerator allocator config. ", 75), 0,
                 "%s", err);
    /* a space inside a key is dropped, so "max_split_size_mb 20" is one unknown token */
    cr_assert_eq(alloc_conf_parse(&c, "max_split_size_mb 20", err, sizeof err), OOM_EINVAL);
    cr_assert_eq(strncmp(err, "Unrecognized key 'max_split_size_mb20' in Accelerator allocator config. ", 71), 0,
                 "%s", err);
}

Test(allocconf, error_missing_colon)
{
    bad("max_split_size_mb", "expected ':' after 'max_split_size_mb'");
    bad("max_split_size_mb,20", "expected ':' after 'max_split_size_mb'");
    bad("expandable_segments=True",
        "Unrecognized key 'expandable_segments=True' in Accelerator allocator config. Known keys: max_split_size_mb, "
        "max_non_split_rounding_mb, roundup_power2_divisions, garbage_collection_threshold, expandable_segments, "
        "large_segment_size_mb, per_process_memory_fraction, release_lock_on_cudamalloc, "
        "release_lock_on_hipmalloc, pinned_use_cuda_host_register, pinned_use_hip_host_register, "
        "pinned_num_register_threads, pinned_use_background_threads, pinned_reserve_segment_size_mb, "
        "graph_capture_record_stream_reuse, backend");
    bad("garbage_collection_threshold[0.5]", "expected ':' after 'garbage_collection_threshold'");
}

Test(allocconf, error_missing_key)
{
    bad(",expandable_segments:True", "expected a key, got ','");
    bad("expandable_segments:True,,max_split_size_mb:40", "expected a key, got ','");
    bad(":20", "expected a key, got ':'");
    bad("]", "expected a key, got ']'");
    bad("[", "expected a key, got '['");
}

Test(allocconf, error_empty_value)
{
    bad("max_split_size_mb:", "max_split_size_mb must be an integer >= 20 (got '')");
    bad("max_split_size_mb:,expandable_segments:True", "max_split_size_mb must be an integer >= 20 (got '')");
    bad("expandable_segments:", "expandable_segments must be True or False (got '')");
    bad("garbage_collection_threshold: ", "garbage_collection_threshold must be in (0.0, 1.0) (got '')");
    bad("roundup_power2_divisions:", "roundup_power2_divisions must be a power of two or a list [MB:div,...,>:div] "
                                     "(got '')");
    bad("backend:", "backend must be native (got '')");
}

Test(allocconf, error_trailing_garbage)
{
    bad("max_split_size_mb:20:30", "unexpected ':' after the value of max_split_size_mb (expected ',')");
    bad("expandable_segments:True]", "unexpected ']' after the value of expandable_segments (expected ',')");
    bad("max_split_size_mb:20[", "unexpected '[' after the value of max_split_size_mb (expected ',')");
    bad("roundup_power2_divisions:[256:1]]",
        "unexpected ']' after the value of roundup_power2_divisions (expected ',')");
    bad("roundup_power2_divisions:[256:1]x", "unexpected 'x' after the value of roundup_power2_divisions "
                                             "(expected ',')");
    bad("max_split_size_mb::20", "unexpected ':' after the value of max_split_size_mb (expected ',')");
}

Test(allocconf, error_max_split_size_mb_values)
{
    bad("max_split_size_mb:abc", "max_split_size_mb must be an integer >= 20 (got 'abc')");
    bad("max_split_size_mb:20abc", "max_split_size_mb must be an integer >= 20 (got '20abc')");
    bad("max_split_size_mb:-20", "max_split_size_mb must be an integer >= 20 (got '-20')");
    bad("max_split_size_mb:+20", "max_split_size_mb must be an integer >= 20 (got '+20')");
    bad("max_split_size_mb:20.5", "max_split_size_mb must be an integer >= 20 (got '20.5')");
    bad("max_split_size_mb:19", "max_split_size_mb must be an integer >= 20 (got 19)");
    bad("max_split_size_mb:0", "max_split_size_mb must be an integer >= 20 (got 0)");
    bad("max_split_size_mb:18446744073709551616",
        "max_split_size_mb must be an integer >= 20 (got '18446744073709551616')");
    bad("max_split_size_mb:[20]", "max_split_size_mb must be an integer >= 20 (got '[')");
}

Test(allocconf, error_split_keys_below_large_segment_size)
{
    /* PyTorch's AllocatorConfig_test: "max_split_size_mb:20,large_segment_size_mb:25" throws */
    bad("max_split_size_mb:20,large_segment_size_mb:25", "max_split_size_mb must be an integer >= 25 (got 20)");
    bad("large_segment_size_mb:32,max_non_split_rounding_mb:30",
        "max_non_split_rounding_mb must be an integer >= 32 (got 30)");
    bad("max_non_split_rounding_mb:10", "max_non_split_rounding_mb must be an integer >= 20 (got 10)");
    bad("max_non_split_rounding_mb:x", "max_non_split_rounding_mb must be an integer >= 20 (got 'x')");
}

Test(allocconf, error_large_segment_size_mb)
{
    bad("large_segment_size_mb:10", "large_segment_size_mb must be an integer > 10 (got 10)");
    bad("large_segment_size_mb:0", "large_segment_size_mb must be an integer > 10 (got 0)");
    bad("large_segment_size_mb:-40", "large_segment_size_mb must be an integer > 10 (got '-40')");
    bad("large_segment_size_mb:40MB", "large_segment_size_mb must be an integer > 10 (got '40MB')");
    /* checked before the keys in front of it */
    bad("max_split_size_mb:abc,large_segment_size_mb:5", "large_segment_size_mb must be an integer > 10 (got 5)");
}

Test(allocconf, error_garbage_collection_threshold)
{
    bad("garbage_collection_threshold:1.5", "garbage_collection_threshold must be in (0.0, 1.0) (got 1.5)");
    bad("garbage_collection_threshold:1", "garbage_collection_threshold must be in (0.0, 1.0) (got 1)");
    bad("garbage_collection_threshold:1.0", "garbage_collection_threshold must be in (0.0, 1.0) (got 1.0)");
    bad("garbage_collection_threshold:0", "garbage_collection_threshold must be in (0.0, 1.0) (got 0)");
    bad("garbage_collection_threshold:-0.5", "garbage_collection_threshold must be in (0.0, 1.0) (got -0.5)");
    bad("garbage_collection_threshold:nan", "garbage_collection_threshold must be in (0.0, 1.0) (got nan)");
    bad("garbage_collection_threshold:abc", "garbage_collection_threshold must be in (0.0, 1.0) (got 'abc')");
    bad("garbage_collection_threshold:0.5x", "garbage_collection_threshold must be in (0.0, 1.0) (got '0.5x')");
    bad("garbage_collection_threshold:1e999", "garbage_collection_threshold must be in (0.0, 1.0) (got '1e999')");
}

Test(allocconf, error_booleans)
{
    bad("expandable_segments:true", "expandable_segments must be True or False (got 'true')");
    bad("expandable_segments:1", "expandable_segments must be True or False (got '1')");
    bad("expandable_segments:TRUE", "expandable_segments must be True or False (got 'TRUE')");
    bad("release_lock_on_cudamalloc:yes", "release_lock_on_cudamalloc must be True or False (got 'yes')");
    bad("pinned_use_cuda_host_register:false", "pinned_use_cuda_host_register must be True or False (got 'false')");
    bad("pinned_use_background_threads:0", "pinned_use_background_threads must be True or False (got '0')");
    bad("graph_capture_record_stream_reuse:on", "graph_capture_record_stream_reuse must be True or False (got 'on')");
}

Test(allocconf, error_per_process_memory_fraction)
{
    bad("per_process_memory_fraction:1.5", "per_process_memory_fraction must be in [0.0, 1.0] (got 1.5)");
    bad("per_process_memory_fraction:-0.1", "per_process_memory_fraction must be in [0.0, 1.0] (got -0.1)");
    bad("per_process_memory_fraction:half", "per_process_memory_fraction must be in [0.0, 1.0] (got 'half')");
}

Test(allocconf, error_pinned_keys)
{
    bad("pinned_num_register_threads:3", "pinned_num_register_threads must be a power of two <= 128 (got 3)");
    bad("pinned_num_register_threads:256", "pinned_num_register_threads must be a power of two <= 128 (got 256)");
    bad("pinned_num_register_threads:0", "pinned_num_register_threads must be a power of two <= 128 (got 0)");
    bad("pinned_num_register_threads:8x", "pinned_num_register_threads must be a power of two <= 128 (got '8x')");
    bad("pinned_reserve_segment_size_mb:0", "pinned_reserve_segment_size_mb must be an integer > 0 (got 0)");
}

Test(allocconf, error_backend)
{
    bad("backend:cudaMallocAsync", "backend:cudaMallocAsync is not supported: oomlab models the native backend only");
    bad("backend:Native", "backend must be native (got 'Native')");
}

Test(allocconf, error_roundup_single_value)
{
    bad("roundup_power2_divisions:3",
        "roundup_power2_divisions must be a power of two or a list [MB:div,...,>:div] (got 3)");
    /* 0 is refused in the single form (isPowerOf2_64(0) is false), allowed in a list */
    bad("roundup_power2_divisions:0",
        "roundup_power2_divisions must be a power of two or a list [MB:div,...,>:div] (got 0)");
    bad("roundup_power2_divisions:four",
        "roundup_power2_divisions must be a power of two or a list [MB:div,...,>:div] (got 'four')");
}

Test(allocconf, error_roundup_list)
{
    bad("roundup_power2_divisions:[256:3]", "roundup_power2_divisions: divisions must be 0 or a power of two (got 3)");
    bad("roundup_power2_divisions:[256:1,>:6]",
        "roundup_power2_divisions: divisions must be 0 or a power of two (got 6)");
    bad("roundup_power2_divisions:[256:x]",
        "roundup_power2_divisions: divisions must be 0 or a power of two (got 'x')");
    bad("roundup_power2_divisions:[256:]", "roundup_power2_divisions: divisions must be 0 or a power of two (got '')");
    bad("roundup_power2_divisions:[256:,>:8]",
        "roundup_power2_divisions: divisions must be 0 or a power of two (got '')");
    bad("roundup_power2_divisions:[300:4]",
        "roundup_power2_divisions: interval must be '>' or a power of two in MB (got 300)");
    bad("roundup_power2_divisions:[0:4]",
        "roundup_power2_divisions: interval must be '>' or a power of two in MB (got 0)");
    bad("roundup_power2_divisions:[256MB:4]",
        "roundup_power2_divisions: interval must be '>' or a power of two in MB (got '256MB')");
    bad("roundup_power2_divisions:[<:4]",
        "roundup_power2_divisions: interval must be '>' or a power of two in MB (got '<')");
    bad("roundup_power2_divisions:[256]", "roundup_power2_divisions: expected ':' after '256'");
    bad("roundup_power2_divisions:[256,512:2]", "roundup_power2_divisions: expected ':' after '256'");
    bad("roundup_power2_divisions:[256:1:2]", "roundup_power2_divisions: expected ',' or ']' (got ':')");
    /* whitespace is dropped, so "1 512" reads as 1512 */
    bad("roundup_power2_divisions:[256:1 512:2]",
        "roundup_power2_divisions: divisions must be 0 or a power of two (got 1512)");
    bad("roundup_power2_divisions:[,256:1]", "roundup_power2_divisions: expected MB or '>' (got ',')");
    bad("roundup_power2_divisions:[[256:1]", "roundup_power2_divisions: expected MB or '>' (got '[')");
}

Test(allocconf, error_unbalanced_brackets)
{
    bad("roundup_power2_divisions:[256:1,>:8", "roundup_power2_divisions: missing ']'");
    bad("roundup_power2_divisions:[", "roundup_power2_divisions: missing ']'");
    bad("max_split_size_mb:[20", "max_split_size_mb: missing ']'");
    bad("roundup_power2_divisions:256:1]", "unexpected ':' after the value of roundup_power2_divisions (expected ',')");
}

Test(allocconf, error_first_problem_is_reported_and_nothing_applied)
{
    alloc_conf c = ok("garbage_collection_threshold:0.5");
    char err[1024];
    cr_assert_eq(alloc_conf_parse(&c, "max_split_size_mb:64,expandable_segments:yes", err, sizeof err), OOM_EINVAL);
    cr_assert_str_eq(err, "expandable_segments must be True or False (got 'yes')");
    cr_assert_eq(c.max_split_size, SIZE_MAX, "a key before the error leaked into *c");
    cr_assert_eq(c.gc_threshold, 0.5);
    cr_assert_str_eq(c.text, "garbage_collection_threshold:0.5");
}

Test(allocconf, error_buffer_handling)
{
    alloc_conf c;
    alloc_conf_default(&c);
    cr_assert_eq(alloc_conf_parse(&c, "foo:1", NULL, 0), OOM_EINVAL);
    char small[10];
    memset(small, 'z', sizeof small);
    cr_assert_eq(alloc_conf_parse(&c, "expandable_segments:true", small, sizeof small), OOM_EINVAL);
    cr_assert_str_eq(small, "expandabl");
    char none[1] = {'z'};
    cr_assert_eq(alloc_conf_parse(&c, "expandable_segments:true", none, 0), OOM_EINVAL);
    cr_assert_eq(none[0], 'z');
    cr_assert_eq(alloc_conf_parse(NULL, "", small, sizeof small), OOM_EINVAL);
    /* a long token is echoed cut to 60 bytes, with its length */
    char text[200], want[300];
    memset(text, 'q', sizeof text);
    memcpy(text, "expandable_segments:", 20);
    text[sizeof text - 1] = '\0';
    snprintf(want, sizeof want, "expandable_segments must be True or False (got '%.60s\xE2\x80\xA6(179 bytes)')",
             text + 20);
    char err[1024];
    cr_assert_eq(alloc_conf_parse(&c, text, err, sizeof err), OOM_EINVAL);
    cr_assert_str_eq(err, want);
}

/* ---- alloc_conf_pick ---- */

static void clear_env(void)
{
    unsetenv("OOMLAB_ALLOC_CONF");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    unsetenv("PYTORCH_HIP_ALLOC_CONF");
    unsetenv("PYTORCH_ALLOC_CONF");
}

Test(allocconf, pick_cli_first)
{
    clear_env();
    setenv("OOMLAB_ALLOC_CONF", "max_split_size_mb:40", 1);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    const char *src = NULL;
    cr_assert_str_eq(alloc_conf_pick("expandable_segments:True", &src), "expandable_segments:True");
    cr_assert_str_eq(src, "--alloc-conf");
    cr_assert_str_eq(alloc_conf_pick("", &src), "");
    cr_assert_str_eq(src, "--alloc-conf");
}

Test(allocconf, pick_oomlab_env_over_pytorch_env)
{
    clear_env();
    setenv("OOMLAB_ALLOC_CONF", "max_split_size_mb:40", 1);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    const char *src = NULL;
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "max_split_size_mb:40");
    cr_assert_str_eq(src, "OOMLAB_ALLOC_CONF");
    setenv("OOMLAB_ALLOC_CONF", "", 1); /* set but empty still wins: the defaults */
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "");
    cr_assert_str_eq(src, "OOMLAB_ALLOC_CONF");
}

Test(allocconf, pick_pytorch_alloc_conf_after_the_cuda_one)
{
    /* PyTorch 2.11 reads PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, then PYTORCH_ALLOC_CONF
     * (tests/data/twins/fidelity.torch.json) */
    clear_env();
    setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True", 1);
    const char *src = NULL;
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "expandable_segments:True");
    cr_assert_str_eq(src, "PYTORCH_ALLOC_CONF");
    setenv("PYTORCH_HIP_ALLOC_CONF", "max_split_size_mb:32", 1);
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "max_split_size_mb:32");
    cr_assert_str_eq(src, "PYTORCH_HIP_ALLOC_CONF");
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "max_split_size_mb:64");
    cr_assert_str_eq(src, "PYTORCH_CUDA_ALLOC_CONF");
    setenv("OOMLAB_ALLOC_CONF", "", 1);
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "");
    cr_assert_str_eq(src, "OOMLAB_ALLOC_CONF");
}

Test(allocconf, pick_pytorch_env_then_default)
{
    clear_env();
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    const char *src = NULL;
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "max_split_size_mb:64");
    cr_assert_str_eq(src, "PYTORCH_CUDA_ALLOC_CONF");
    cr_assert_str_eq(alloc_conf_pick(NULL, NULL), "max_split_size_mb:64");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    cr_assert_str_eq(alloc_conf_pick(NULL, &src), "");
    cr_assert_str_eq(src, "default");
    alloc_conf c = ok(alloc_conf_pick(NULL, NULL));
    assert_default_values(&c);
}

/* ---- alloc_conf_format ---- */

Test(allocconf, format_defaults)
{
    alloc_conf c;
    alloc_conf_default(&c);
    char buf[512];
    cr_assert_eq(alloc_conf_format(&c, buf, sizeof buf), buf);
    cr_assert_str_eq(buf, "max_split_size_mb:unlimited,max_non_split_rounding_mb:20,roundup_power2_divisions:0,"
                          "garbage_collection_threshold:0,expandable_segments:False,large_segment_size_mb:20,"
                          "per_process_memory_fraction:1");
}

Test(allocconf, format_is_canonical_and_parses_back)
{
    const char *text = "max_split_size_mb:64,max_non_split_rounding_mb:30,"
                       "roundup_power2_divisions:[256:1,512:2,1024:4,>:8],garbage_collection_threshold:0.6,"
                       "expandable_segments:True,large_segment_size_mb:24,per_process_memory_fraction:0.5";
    alloc_conf c = ok(text);
    char buf[512];
    cr_assert_str_eq(alloc_conf_format(&c, buf, sizeof buf), text);
    alloc_conf back = ok(buf);
    cr_assert_eq(back.max_split_size, c.max_split_size);
    cr_assert_eq(back.max_non_split_rounding, c.max_non_split_rounding);
    cr_assert_eq(memcmp(back.roundup_divisions, c.roundup_divisions, sizeof c.roundup_divisions), 0);
    cr_assert_eq(back.gc_threshold, c.gc_threshold);
    cr_assert_eq(back.expandable_segments, c.expandable_segments);
    cr_assert_eq(back.large_segment_size, c.large_segment_size);
    cr_assert_eq(back.per_process_memory_fraction, c.per_process_memory_fraction);
    cr_assert_eq(back.fraction_set, c.fraction_set);
    /* spaces and key order do not matter to the canonical form */
    c = ok(" per_process_memory_fraction : 0.5 , expandable_segments:True, large_segment_size_mb:24,"
           "garbage_collection_threshold:0.6,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],"
           "max_non_split_rounding_mb:30,max_split_size_mb:64");
    cr_assert_str_eq(alloc_conf_format(&c, buf, sizeof buf), text);
}

Test(allocconf, format_roundup_forms)
{
    char buf[512];
    alloc_conf c = ok("roundup_power2_divisions:4");
    cr_assert_not_null(strstr(alloc_conf_format(&c, buf, sizeof buf), ",roundup_power2_divisions:4,"), "%s", buf);
    c = ok("roundup_power2_divisions:[1:4,>:8]");
    cr_assert_not_null(strstr(alloc_conf_format(&c, buf, sizeof buf), ",roundup_power2_divisions:[1:4,>:8],"), "%s",
                       buf);
    /* a middle run longer than one bucket is named bucket by bucket */
    c = ok("roundup_power2_divisions:[2:1,4:2,8:2,16:2,>:1]");
    cr_assert_not_null(
        strstr(alloc_conf_format(&c, buf, sizeof buf), ",roundup_power2_divisions:[2:1,4:2,8:2,16:2,>:1],"), "%s",
        buf);
    char item[128];
    const char *from = strstr(buf, "roundup_power2_divisions:");
    snprintf(item, sizeof item, "%.*s", (int)(strchr(from, ']') + 1 - from), from);
    alloc_conf back = ok(item);
    cr_assert_eq(memcmp(back.roundup_divisions, c.roundup_divisions, sizeof c.roundup_divisions), 0);
    /* only the last bucket differs */
    c = ok("roundup_power2_divisions:[16384:2,>:16]");
    cr_assert_not_null(strstr(alloc_conf_format(&c, buf, sizeof buf), ",roundup_power2_divisions:[16384:2,>:16],"),
                       "%s", buf);
}

Test(allocconf, format_truncates_safely)
{
    alloc_conf c;
    alloc_conf_default(&c);
    char buf[16];
    memset(buf, 'z', sizeof buf);
    alloc_conf_format(&c, buf, sizeof buf);
    cr_assert_str_eq(buf, "max_split_size_");
    char one[1] = {'z'};
    alloc_conf_format(&c, one, sizeof one);
    cr_assert_eq(one[0], '\0');
    char untouched[1] = {'z'};
    cr_assert_eq(alloc_conf_format(&c, untouched, 0), untouched);
    cr_assert_eq(untouched[0], 'z');
}
