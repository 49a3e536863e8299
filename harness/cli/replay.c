/* replay.c - `oomlab replay FILE`: a PyTorch memory snapshot through the allocator model (trace/replay.h);
 * its JSON is schema oomlab.replay/2 (/1 had no per-device "devices": a change of shape bumps the version). */
#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "alloc/allocconf.h"
#include "alloc/memstats.h"
#include "trace/replay.h"
#include "core/echo.h"
#include "core/units.h"

#define REPLAY_SCHEMA "oomlab.replay/2"

/* The allocator-config variables a replay does not read (the recording's own settings apply): design.md's
 * precedence for `run`, and PyTorch's newer name. */
static const char *const replay_env_vars[] = {"OOMLAB_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
                                             "PYTORCH_ALLOC_CONF"};
#define REPLAY_NENV (sizeof replay_env_vars / sizeof replay_env_vars[0])

static const char *const budget_source_json[] = {"none", "--budget", "file"};

/* One device's replay as a JSON object. */
static cJSON *replay_device_json(const replay_result *res)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "device", res->device);
    cJSON_AddNumberToObject(d, "events", (double)res->events);
    cJSON_AddBoolToObject(d, "prediction", res->prediction);
    if (res->first_divergence >= 0)
        cJSON_AddNumberToObject(d, "first_divergence", (double)res->first_divergence);
    else
        cJSON_AddNullToObject(d, "first_divergence");
    cJSON_AddStringToObject(d, "divergence", res->divergence);
    cJSON_AddNumberToObject(d, "model_ooms", (double)res->model_ooms);
    if (res->first_oom_event >= 0)
        cJSON_AddNumberToObject(d, "first_oom_event", (double)res->first_oom_event);
    else
        cJSON_AddNullToObject(d, "first_oom_event");
    cJSON_AddStringToObject(d, "oom_message", res->oom_message);
    if (res->budget_bytes)
        cJSON_AddNumberToObject(d, "cap", (double)res->budget_bytes);
    else
        cJSON_AddNullToObject(d, "cap");
    if (res->kernel_event >= 0)
        cJSON_AddNumberToObject(d, "kernel_event", (double)res->kernel_event);
    else
        cJSON_AddNullToObject(d, "kernel_event");
    cJSON *m = cJSON_AddObjectToObject(d, "memory_stats");
    for (size_t i = 0; m && i < MEMSTATS_NKEYS; i++) {
        const char *key;
        int64_t v;
        memstats_key(&res->stats, i, &key, &v);
        cJSON_AddNumberToObject(m, key, (double)v);
    }
    return d;
}

static void replay_print_device(const replay_result *res, bool whatif)
{
    printf("cuda:%d: %zu events\n", res->device, res->events);
    if (res->prediction && res->first_divergence >= 0)
        printf("  trace: %s\n", res->divergence);
    else if (res->prediction)
        printf("  segment actions: none recorded (a prediction: the model's own)\n");
    else if (res->first_divergence < 0)
        printf("  segment actions: agree with PyTorch's\n");
    else if (whatif)
        printf("  segment actions: first differ from the recording at %s\n", res->divergence);
    else
        printf("  segment actions: diverge at %s\n", res->divergence);
    if (res->model_ooms)
        printf("  OOMs: %zu, the first at event %ld:\n    %s\n", res->model_ooms, res->first_oom_event,
               res->oom_message);
    static const char *const keys[] = {
        "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
        "reserved_bytes.all.peak",     "segment.all.current",      "num_device_alloc",
        "num_device_free",             "num_alloc_retries",        "num_ooms",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int64_t v = 0;
        memstats_get(&res->stats, keys[i], &v);
        printf("    %-28s %lld\n", keys[i], (long long)v);
    }
}

/* A trace event index: decimal digits only. */
static bool parse_event(const char *s, size_t *out)
{
    if (!*s || strlen(s) > 15 || strspn(s, "0123456789") != strlen(s))
        return false;
    *out = (size_t)strtoull(s, NULL, 10);
    return true;
}

int cli_replay(int argc, char **argv)
{
    const char *file = NULL;
    replay_options opt = {0};
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--alloc-conf") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--alloc-conf");
            opt.alloc_conf = argv[i];
        } else if (strcmp(argv[i], "--budget") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--budget");
            if (units_parse_size(argv[i], &opt.budget_bytes) != OOM_OK)
                return cli_bad_arg("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, "
                                 "MB, GB, TB)",
                                 argv[i]);
        } else if (strcmp(argv[i], "--device-memory") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--device-memory");
            if (units_parse_size(argv[i], &opt.device_total) != OOM_OK || opt.device_total < ((size_t)1 << 20))
                return cli_bad_arg("--device-memory: '%s' is not a size of 1 MiB or more (bytes, or a number with "
                                   "KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                                   argv[i]);
        } else if (strcmp(argv[i], "--device") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--device");
            const char *s = strncmp(argv[i], "cuda:", 5) == 0 ? argv[i] + 5 : argv[i];
            char *end = NULL;
            errno = 0;
            long v = strtol(s, &end, 10);
            if (!isdigit((unsigned char)s[0]) || !end || *end || errno || v > 65535)
                return cli_bad_arg("--device: '%s' is not a device index (0, 1, ... or cuda:N)", argv[i]);
            opt.one_device = true;
            opt.device = (int)v;
        } else if (strcmp(argv[i], "--addresses") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--addresses");
            if (strcmp(argv[i], "model") == 0)
                opt.model_addresses = true;
            else if (strcmp(argv[i], "recorded") != 0)
                return cli_bad_arg("--addresses: '%s' is not recorded or model", argv[i]);
        } else if (strcmp(argv[i], "--kernels") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--kernels");
            if (strcmp(argv[i], "none") == 0)
                opt.kernels = REPLAY_KERNELS_NONE;
            else if (strcmp(argv[i], "first") == 0)
                opt.kernels = REPLAY_KERNELS_FIRST_ALLOC;
            else if (parse_event(argv[i], &opt.kernel_at))
                opt.kernels = REPLAY_KERNELS_AT;
            else
                return cli_bad_arg("--kernels: '%s' is not first, none or an event number", argv[i]);
        } else if (strcmp(argv[i], "--snapshot") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--snapshot");
            if (!argv[i][0])
                return cli_bad_arg("%s needs a file name", "--snapshot");
            if (fileio_check_target(argv[i]) != OOM_OK) /* before the replay, not after it */
                return cli_bad_arg("replay: --snapshot: %s", oom_error_detail());
            opt.snapshot_path = argv[i];
        } else if (strcmp(argv[i], "--max-input") == 0) {
            if (++i >= argc)
                return cli_bad_arg("%s needs a value", "--max-input");
            if (!cli_parse_max_input(argv[i], &opt.max_input))
                return cli_bad_arg(CLI_MAX_INPUT_BAD, argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_bad_arg("replay: unknown option '%s'", argv[i]);
        } else if (!file) {
            file = argv[i];
        } else {
            return cli_bad_arg("replay: unexpected argument '%s'", argv[i]);
        }
    }
    if (!file)
        return cli_bad_arg("%s", "replay: missing FILE (a snapshot JSON)");
    /* The recording's allocator_settings apply unless --alloc-conf is given: an exported config never overrides
     * a recording, and the output says so. */
    const char *ignored[REPLAY_NENV];
    for (size_t i = 0; i < REPLAY_NENV; i++) {
        const char *v = getenv(replay_env_vars[i]);
        ignored[i] = v && v[0] ? v : NULL;
    }
    replay_report rep;
    char err[REPLAY_ERR_MAX];
    oom_status st = replay_trace(file, &opt, &rep, err, sizeof err);
    if (st != OOM_OK) {
        replay_report_free(&rep);
        return cli_bad_arg("replay: %s", err);
    }
    bool diverged = false;
    for (size_t i = 0; i < rep.ndevices; i++)
        diverged |= rep.devices[i].first_divergence >= 0;
    char conftext[ALLOC_CONF_TEXT_MAX], rectext[ALLOC_CONF_TEXT_MAX];
    alloc_conf_format(&rep.conf, conftext, sizeof conftext);
    alloc_conf_format(&rep.recorded, rectext, sizeof rectext);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schema", REPLAY_SCHEMA);
        cJSON_AddStringToObject(o, "file", file);
        cJSON_AddStringToObject(o, "mode", rep.prediction ? "prediction" : rep.whatif ? "whatif" : "check");
        cJSON_AddStringToObject(o, "alloc_conf", conftext);
        cJSON_AddStringToObject(o, "alloc_conf_source", opt.alloc_conf ? "--alloc-conf" : "trace");
        if (rep.recorded_error[0])
            cJSON_AddNullToObject(o, "recorded_alloc_conf");
        else
            cJSON_AddStringToObject(o, "recorded_alloc_conf", rectext);
        if (rep.budget_bytes)
            cJSON_AddNumberToObject(o, "budget", (double)rep.budget_bytes);
        else
            cJSON_AddNullToObject(o, "budget");
        cJSON_AddStringToObject(o, "budget_source", budget_source_json[rep.budget_source]);
        cJSON *ign = cJSON_AddArrayToObject(o, "ignored_environment");
        for (size_t i = 0; ign && i < REPLAY_NENV; i++) {
            if (!ignored[i])
                continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", replay_env_vars[i]);
            cJSON_AddStringToObject(e, "value", ignored[i]);
            cJSON_AddItemToArray(ign, e);
        }
        if (rep.whatif || rep.prediction)
            cJSON_AddNullToObject(o, "agree");
        else
            cJSON_AddBoolToObject(o, "agree", !diverged);
        cJSON *devs = cJSON_AddArrayToObject(o, "devices");
        for (size_t i = 0; devs && i < rep.ndevices; i++)
            cJSON_AddItemToArray(devs, replay_device_json(&rep.devices[i]));
        cli_print_json(o);
    } else {
        printf("replay: %s\n", file);
        if (rep.prediction)
            printf("mode: prediction (the trace has no segment events, so nothing to check against: the model "
                   "places every segment, the trace's addresses only pair frees with allocs)\n");
        else if (rep.whatif)
            printf("mode: what-if simulation (--alloc-conf is not the recording's config): differences from the "
                   "recording are information, not failures\n");
        else
            printf("mode: check against the recording\n");
        printf("config: %s (%s)\n", conftext,
               !opt.alloc_conf ? "from the trace" : rep.whatif ? "--alloc-conf" : "--alloc-conf, the recording's own");
        if (rep.recorded_error[0])
            printf("recorded config: unreadable (%s)\n", rep.recorded_error);
        else if (rep.whatif)
            printf("recorded config: %s (the trace's allocator_settings)\n", rectext);
        for (size_t i = 0; i < REPLAY_NENV; i++)
            if (ignored[i])
                printf("ignored: %s=%s (a replay uses the recording's allocator_settings; --alloc-conf for a "
                       "what-if)\n",
                       replay_env_vars[i], ignored[i]);
        if (rep.budget_source == REPLAY_BUDGET_OPTION)
            printf("budget: %zu bytes (--budget)\n", rep.budget_bytes);
        else if (rep.budget_source == REPLAY_BUDGET_FILE)
            printf("budget: %zu bytes (the file's \"budget\")\n", rep.budget_bytes);
        else if (rep.ndevices && rep.devices[0].budget_bytes)
            printf("budget: %zu bytes (per_process_memory_fraction in the config)\n", rep.devices[0].budget_bytes);
        else
            printf("budget: none (a recording made under set_per_process_memory_fraction needs --budget)\n");
        printf("addresses: %s; ", rep.whatif || opt.model_addresses || rep.prediction
                                      ? "the sim's model of the driver"
                                      : "PyTorch's where free, else the sim's model of the driver");
        long kev = rep.ndevices ? rep.devices[0].kernel_event : -1;
        if (opt.kernels == REPLAY_KERNELS_FIRST_ALLOC && kev >= 0)
            printf("the first kernel launched after the first allocation, before event %ld (--kernels first, the "
                   "default)\n",
                   kev);
        else if (kev >= 0)
            printf("the first kernel launched before event %ld (--kernels)\n", kev);
        else
            printf("no kernel launched (--kernels)\n");
        for (size_t i = 0; i < rep.ndevices; i++)
            replay_print_device(&rep.devices[i], rep.whatif);
    }
    replay_report_free(&rep);
    return !rep.whatif && !rep.prediction && diverged ? 1 : 0;
}
