/* test_inputs.c - bad input is refused with one line that names the cause (issue 11, "Reliability"): the
 * roundup_power2_divisions dict of a snapshot's allocator_settings (checked as --alloc-conf's list is, its keys
 * naming buckets), sizes above 2^53 in a trace, JSON syntax errors by kind and position, and the unknown-key
 * list of an allocator-settings error in full. Each test is made from the reproducer. The command-line
 * bounds (--max-input, argument echoes) are in test_cli.c. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/allocconf.h"
#include "trace/replay.h"
#include "core/status.h"
#include "testutil.h"

static char tmpdir[TEST_TMPDIR_MAX];

static void setup(void) { test_tmpdir_make(tmpdir, "inputs"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(inputs, .init = setup, .fini = teardown);

/* tmpdir/snap.json holding text; its path. */
static const char *snapshot(const char *text)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/snap.json", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* One alloc event under the given allocator_settings. */
#define ONE_EVENT(settings)                                                                                    \
    "{\"device_traces\":[[{\"action\":\"alloc\",\"addr\":1,\"size\":512}]],\"allocator_settings\":" settings "}"

/* replay_trace must refuse the file with exactly want. */
static void refused(const char *text, const char *want)
{
    replay_options opt = {0};
    replay_report rep;
    char err[2048];
    oom_status st = replay_trace(snapshot(text), &opt, &rep, err, sizeof err);
    replay_report_free(&rep);
    cr_assert_eq(st, OOM_EINVAL, "accepted (%s): %s", oom_status_str(st), text);
    cr_assert_str_eq(err, want);
}

/* The reproducer: 2^64 as a JSON number was cast to size_t (undefined behaviour; gcc gave 0). */
Test(inputs, roundup_dict_value_above_size_max_is_refused)
{
    refused(ONE_EVENT("{\"roundup_power2_divisions\":{\"1\":18446744073709551616}}"),
            "allocator_settings: roundup_power2_divisions[\"1\"]: divisions must be 0 or a power of two (got "
            "'1.8446744073709552e+19')");
}

/* --alloc-conf refuses roundup_power2_divisions:[1:3]; the dict did not. */
Test(inputs, roundup_dict_checks_divisions_as_alloc_conf_does)
{
    char err[1024];
    alloc_conf c;
    cr_assert_eq(alloc_conf_parse(&c, "roundup_power2_divisions:[1:3]", err, sizeof err), OOM_EINVAL);
    cr_assert_str_eq(err, "roundup_power2_divisions: divisions must be 0 or a power of two (got 3)");
    refused(ONE_EVENT("{\"roundup_power2_divisions\":{\"1\":3}}"),
            "allocator_settings: roundup_power2_divisions[\"1\"]: divisions must be 0 or a power of two (got 3)");
    refused(ONE_EVENT("{\"roundup_power2_divisions\":{\"1\":-4}}"),
            "allocator_settings: roundup_power2_divisions[\"1\"]: divisions must be 0 or a power of two (got "
            "'-4')");
    refused(ONE_EVENT("{\"roundup_power2_divisions\":{\"1\":2.5}}"),
            "allocator_settings: roundup_power2_divisions[\"1\"]: divisions must be 0 or a power of two (got "
            "'2.5')");
    refused(ONE_EVENT("{\"roundup_power2_divisions\":{\"1\":\"4\"}}"),
            "allocator_settings: roundup_power2_divisions[\"1\"]: divisions must be 0 or a power of two (got "
            "'\"4\"')");
    refused(ONE_EVENT("{\"roundup_power2_divisions\":{\"3\":4}}"),
            "allocator_settings: roundup_power2_divisions[\"3\"]: interval must be a power of two in MB (got 3)");
    refused(ONE_EVENT("{\"roundup_power2_divisions\":{\">\":4}}"),
            "allocator_settings: roundup_power2_divisions[\">\"]: interval must be a power of two in MB (got '>')");
    refused(ONE_EVENT("{\"roundup_power2_divisions\":[4]}"),
            "allocator_settings: roundup_power2_divisions must be a dict {\"MB\": divisions, ...}");
}

/* The key names the bucket (its lower bound in MiB, as torch/csrc/cuda/Module.cpp writes it); entries used to be
 * applied by position, so {"1024": 4} landed in bucket 0. */
Test(inputs, roundup_dict_keys_name_their_buckets)
{
    replay_options opt = {0};
    replay_report rep;
    char err[2048];
    const char *path = snapshot(ONE_EVENT("{\"roundup_power2_divisions\":{\"1024\":4,\"65536\":2}}"));
    cr_assert_eq(replay_trace(path, &opt, &rep, err, sizeof err), OOM_OK, "%s", err);
    for (size_t b = 0; b < ALLOC_CONF_ROUNDUP_BUCKETS; b++)
        cr_expect_eq(rep.recorded.roundup_divisions[b], b == 10 ? 4u : b == 15 ? 2u : 0u, "bucket %zu: %zu", b,
                     rep.recorded.roundup_divisions[b]);
    replay_report_free(&rep);
    /* PyTorch's whole dict of tests/data/roundup.trace.json means its settings string */
    path = snapshot(ONE_EVENT("{\"roundup_power2_divisions\":{\"1\":1,\"2\":1,\"4\":1,\"8\":1,\"16\":1,\"32\":1,"
                              "\"64\":1,\"128\":1,\"256\":1,\"512\":2,\"1024\":4,\"2048\":8,\"4096\":8,\"8192\":8,"
                              "\"16384\":8,\"32768\":8}}"));
    cr_assert_eq(replay_trace(path, &opt, &rep, err, sizeof err), OOM_OK, "%s", err);
    alloc_conf want;
    cr_assert_eq(alloc_conf_parse(&want, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", NULL, 0), OOM_OK);
    cr_assert_arr_eq(rep.recorded.roundup_divisions, want.roundup_divisions, sizeof want.roundup_divisions);
    replay_report_free(&rep);
}

/* A size above 2^53 is not read exactly from JSON: it gets its own message, not "missing or invalid". */
Test(inputs, trace_size_above_2_53_is_named)
{
    refused("{\"device_traces\":[[{\"action\":\"alloc\",\"addr\":1,\"size\":18014398509481984}]]}",
            "cuda:0 event 0 (alloc): 'size' 18014398509481984 is above 2^53 (9007199254740992), where a JSON number "
            "is not read exactly");
    refused("{\"device_traces\":[[{\"action\":\"alloc\",\"addr\":1,\"size\":512},{\"action\":\"free_requested\","
            "\"size\":512}]]}",
            "cuda:0 event 1 (free_requested): 'addr' is missing");
    refused("{\"device_traces\":[[{\"action\":\"alloc\",\"addr\":1,\"size\":-512}]]}",
            "cuda:0 event 0 (alloc): 'size' -512 is negative");
}

/* JSON syntax errors say where (byte, line, column) and which kind. */
Test(inputs, json_syntax_errors_name_kind_and_position)
{
    char text[4200], want[300];
    size_t n = 0;
    for (int i = 0; i < 2000; i++)
        text[n++] = '[';
    for (int i = 0; i < 2000; i++)
        text[n++] = ']';
    text[n] = '\0';
    const char *path = snapshot(text);
    snprintf(want, sizeof want, "%s: JSON nested deeper than 1000 levels at byte 1000 (line 1, column 1001)", path);
    refused(text, want);
    snprintf(want, sizeof want,
             "%s: NaN is not JSON, at byte 28 (line 2, column 6) (Python's json.dump writes it for a float nan or "
             "inf)",
             path);
    refused("{\"device_traces\":[[]],\n\"x\": NaN}", want);
    snprintf(want, sizeof want, "%s is truncated: the JSON ends at byte 19 (line 1) before it is complete", path);
    refused("{\"device_traces\":[[", want);
    snprintf(want, sizeof want, "%s: not valid JSON at byte 17 (line 1, column 18)", path);
    refused("{\"device_traces\":x}", want);
}

/* An allocator-settings error lists every known key: the list used to be cut at 200 bytes. */
Test(inputs, unknown_key_list_is_whole)
{
    replay_options opt = {.alloc_conf = "foo:1"};
    replay_report rep;
    char err[2048];
    oom_status st = replay_trace(snapshot(ONE_EVENT("{}")), &opt, &rep, err, sizeof err);
    replay_report_free(&rep);
    cr_assert_eq(st, OOM_EINVAL);
    cr_assert_str_eq(err, "--alloc-conf: Unrecognized key 'foo' in Accelerator allocator config. Known keys: "
                          "max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, "
                          "garbage_collection_threshold, expandable_segments, large_segment_size_mb, "
                          "per_process_memory_fraction, release_lock_on_cudamalloc, release_lock_on_hipmalloc, "
                          "pinned_use_cuda_host_register, pinned_use_hip_host_register, "
                          "pinned_num_register_threads, pinned_use_background_threads, "
                          "pinned_reserve_segment_size_mb, graph_capture_record_stream_reuse, backend");
    refused(ONE_EVENT("{\"PYTORCH_CUDA_ALLOC_CONF\":\"bar:1\"}"),
            "allocator_settings: Unrecognized key 'bar' in Accelerator allocator config. Known keys: "
            "max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, "
            "garbage_collection_threshold, expandable_segments, large_segment_size_mb, "
            "per_process_memory_fraction, release_lock_on_cudamalloc, release_lock_on_hipmalloc, "
            "pinned_use_cuda_host_register, pinned_use_hip_host_register, "
            "pinned_num_register_threads, pinned_use_background_threads, "
            "pinned_reserve_segment_size_mb, graph_capture_record_stream_reuse, backend");
}
