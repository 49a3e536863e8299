/* fuzz_replay.c - libFuzzer harness of the snapshot reader: the input is the file `oomlab replay FILE` reads
 * (the JSON of torch.cuda.memory._snapshot(), replay.h), fed to replay_trace as the command feeds it.
 *
 * Each input is replayed twice, as a user would: under the settings it records, writing the model's snapshot as
 * a pickle (snapshot_json and snapshot_pickle), and as a what-if under other settings (expandable segments
 * flipped), writing the snapshot as JSON, with no kernel launch. The allocator's validator runs after every
 * operation (the build is OOM_DEBUG=2), so a replay that breaks an invariant aborts. Checked besides:
 *   - a failure returns OOM_EINVAL or OOM_EIO with one error line and writes no snapshot;
 *   - a success replays at least one device, each with its event count and a divergence index inside it, and
 *     leaves a snapshot file; the what-if run says it is one.
 * Seeds: tests/fuzz/corpus/replay (the traces of tests/data, cut short, merged with -merge=1;
 * tests/fuzz/README.md says how they were made).
 */
#include "fuzzutil.h"

#include <stdbool.h>
#include <stdint.h>

#include "trace/replay.h"
#include "core/status.h"

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* One replay of path with opt; the snapshot goes to snap. Returns whether it succeeded, with the recorded
 * settings' expandable_segments in *expandable. */
static bool replay_once(const char *path, replay_options *opt, const char *snap, bool want_whatif,
                        bool *expandable)
{
    replay_report rep;
    char err[400] = "";
    opt->snapshot_path = snap;
    oom_status st = replay_trace(path, opt, &rep, err, sizeof err);
    bool ok = st == OOM_OK;
    if (!ok) {
        if (st != OOM_EINVAL && st != OOM_EIO)
            fuzz_fail("replay_trace returned %s for bad input (%s)", oom_status_str(st), err);
        fuzz_check_error_line("replay_trace", err);
        if (exists(snap))
            fuzz_fail("a failed replay left a snapshot (%s)", err);
    } else {
        if (rep.ndevices == 0 || !rep.devices)
            fuzz_fail("replay_trace succeeded with no device replayed");
        for (size_t i = 0; i < rep.ndevices; i++) {
            const replay_result *r = &rep.devices[i];
            if (r->events == 0 || r->first_divergence >= (long)r->events + 1 ||
                r->first_oom_event >= (long)r->events || (r->model_ooms == 0) != (r->first_oom_event < 0))
                fuzz_fail("cuda:%d: %zu events, first divergence %ld, first OOM %ld of %zu", r->device, r->events,
                          r->first_divergence, r->first_oom_event, r->model_ooms);
            if (i > 0 && r->device <= rep.devices[i - 1].device)
                fuzz_fail("devices out of order: cuda:%d after cuda:%d", r->device, rep.devices[i - 1].device);
        }
        if (!exists(snap))
            fuzz_fail("the replay succeeded but wrote no snapshot");
        if (want_whatif != rep.whatif)
            fuzz_fail("whatif is %d for a replay %s --alloc-conf", rep.whatif, opt->alloc_conf ? "with" : "without");
        *expandable = rep.recorded.expandable_segments;
    }
    unlink(snap);
    replay_report_free(&rep);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], pickle[128], json[128];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    snprintf(pickle, sizeof pickle, "%s/snapshot.pickle", fuzz_scratch_dir());
    snprintf(json, sizeof json, "%s/snapshot.json", fuzz_scratch_dir());
    oom_error_clear();

    replay_options opt = {0}; /* oomlab replay FILE --snapshot S.pickle */
    bool expandable = false;
    if (replay_once(path, &opt, pickle, false, &expandable)) {
        /* oomlab replay FILE --alloc-conf <the other expandable_segments> --kernels none --snapshot S.json.
         * The recorded settings parsed, so the only difference is the one asked for: a what-if. */
        replay_options w = {.alloc_conf = expandable ? "expandable_segments:False" : "expandable_segments:True",
                            .kernels = REPLAY_KERNELS_NONE};
        if (!replay_once(path, &w, json, true, &expandable))
            fuzz_fail("the what-if replay failed where the recorded one succeeded");
    }
    close(fd);
    oom_error_clear();
    return 0;
}
