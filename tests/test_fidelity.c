/* test_fidelity.c - details where oomlab must do what PyTorch 2.11 does (issue 7), against a recording.
 *
 * Suite "fidelity" (backend under test). PyTorch's side is tests/data/twins/fidelity.torch.json, recorded by
 * scripts/twins/fidelity.py with PyTorch 2.11.0+cu130 on an H100 80GB HBM3 (driver 580): the cap that
 * set_per_process_memory_fraction(budget / total) sets and the OOM it causes, the memory a CUDA context holds,
 * OOM messages, empty_cache() before CUDA is initialised, large_segment_size_mb off the 2 MiB granularity with
 * expandable segments, the ROCm spellings of two keys, and which environment variable PyTorch reads.
 * The numbers that depend on the machine's live state (free memory) are compared on sim, whose default
 * capacity models that H100 and its context.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/cachealloc.h"
#include "core/fileio.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "runtime/tensor.h"
#include "testutil.h"

#define TWIN "tests/data/twins/fidelity.torch.json"
#define H100_TOTAL ((size_t)85017493504ULL)

static cJSON *twin;
static char *twin_text;

static void load_twin(void)
{
    twin_text = fileio_read_all(TWIN, NULL);
    cr_assert_not_null(twin_text, "%s: %s", TWIN, oom_error_msg());
    twin = cJSON_Parse(twin_text);
    cr_assert_not_null(twin, "%s does not parse", TWIN);
}

static void free_twin(void)
{
    cJSON_Delete(twin);
    free(twin_text);
}

TestSuite(fidelity, .init = load_twin, .fini = free_twin);

/* twin["a"]["b"]... */
static const cJSON *at(const char *path)
{
    const cJSON *o = twin;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k; k = strtok(NULL, ".")) {
        o = cJSON_GetObjectItemCaseSensitive(o, k);
        cr_assert_not_null(o, "%s: no '%s' in %s", TWIN, k, path);
    }
    return o;
}

static size_t num_at(const char *path)
{
    const cJSON *v = at(path);
    cr_assert(cJSON_IsNumber(v), "%s: %s is not a number", TWIN, path);
    return (size_t)v->valuedouble;
}

static const char *str_at(const char *path)
{
    const cJSON *v = at(path);
    cr_assert(cJSON_IsString(v), "%s: %s is not a string", TWIN, path);
    return v->valuestring;
}

static bool on_sim(void) { return test_backend() == DEVICE_SIM; }

typedef struct env {
    device *dev;
    cachealloc *ca;
} env;

static env mk(const char *conf, size_t budget)
{
    env e = {0};
    e.dev = test_device_open(0);
    cr_assert_not_null(e.dev);
    cachealloc_options o = {.budget_bytes = budget};
    alloc_conf_default(&o.conf);
    char err[256] = "";
    cr_assert_eq(alloc_conf_parse(&o.conf, conf, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_eq(cachealloc_new(e.dev, &o, &e.ca), OOM_OK);
    return e;
}

static void rm(env *e)
{
    cachealloc_delete(e->ca);
    device_close(e->dev);
}

static int64_t stat_of(const cachealloc *ca, const char *key)
{
    int64_t v = -1;
    cr_assert(memstats_get(cachealloc_stats(ca), key, &v), "no stat %s", key);
    return v;
}

/* PyTorch's part of an oomlab OOM message: everything before " [oomlab]". */
static void pytorch_part(const char *msg, char *out, size_t cap)
{
    const char *end = strstr(msg, " [oomlab]");
    size_t n = end ? (size_t)(end - msg) : strlen(msg);
    cr_assert_lt(n, cap);
    memcpy(out, msg, n);
    out[n] = '\0';
}

/* ---- 2. the budget is PyTorch's memory fraction ---------------------------------------------------------- */

Test(fidelity, recording_is_the_h100)
{
    cr_assert_str_eq(str_at("device.torch"), "2.11.0+cu130");
    cr_assert_str_eq(str_at("device.name"), "NVIDIA H100 80GB HBM3");
    cr_assert_eq(num_at("device.total_memory"), H100_TOTAL);
    cr_assert_eq(num_at("device.mem_get_info.total"), H100_TOTAL, "cudaMemGetInfo's total is totalGlobalMem");
    cr_assert_eq(DEVICE_SIM_DEFAULT_CAPACITY, H100_TOTAL);
}

Test(fidelity, budget_cap_is_pytorchs)
{
    /* set_per_process_memory_fraction((1 << 30) / total) on the H100 allows one byte less than 1 GiB */
    cr_assert_eq(num_at("capped.budget"), (size_t)1 << 30);
    cr_assert_eq(num_at("capped.allowed"), 1073741823);
    cr_assert_eq(cachealloc_budget_cap((size_t)1 << 30, H100_TOTAL), num_at("capped.allowed"));
    /* the recorded traces' budgets come back unchanged (the "allowed" of tests/data/pressure and oom_fraction) */
    cr_assert_eq(cachealloc_budget_cap(1416958225, H100_TOTAL), 1416958225);
    cr_assert_eq(cachealloc_budget_cap(1062718668, H100_TOTAL), 1062718668);
    /* a fraction of 1 sets no cap */
    cr_assert_eq(cachealloc_budget_cap(H100_TOTAL, H100_TOTAL), 0);
    cr_assert_eq(cachealloc_budget_cap(0, H100_TOTAL), 0);

    env e = mk("", (size_t)1 << 30);
    if (e.dev->total_bytes == H100_TOTAL)
        cr_assert_eq(cachealloc_budget(e.ca), num_at("capped.allowed"));
    else
        cr_assert_eq(cachealloc_budget(e.ca), cachealloc_budget_cap((size_t)1 << 30, e.dev->total_bytes));
    rm(&e);
}

Test(fidelity, one_gib_under_a_one_gib_budget_ooms_as_in_pytorch)
{
    cr_assert_str_eq(str_at("capped.outcome"), "oom");
    cr_assert_str_eq(str_at("capped.type"), "OutOfMemoryError");
    env e = mk("", (size_t)1 << 30);
    devptr p = 0;
    cr_assert_eq(cachealloc_malloc(e.ca, (size_t)1 << 30, &p), OOM_ENOMEM_DEVICE, "PyTorch refuses it");
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not_null(o);
    cr_assert_eq(o->allowed, cachealloc_budget(e.ca));
    cr_assert_eq(stat_of(e.ca, "num_ooms"), (int64_t)num_at("capped.stats_after.num_ooms"));
    cr_assert_eq(stat_of(e.ca, "num_device_alloc"), (int64_t)num_at("capped.stats_after.num_device_alloc"));
    cr_assert_eq(stat_of(e.ca, "num_sync_all_streams"), (int64_t)num_at("capped.stats_after.num_sync_all_streams"));
    if (on_sim()) { /* the whole of PyTorch's message, numbers included: the sim models the H100's context */
        char mine[1024];
        pytorch_part(o->message, mine, sizeof mine);
        cr_assert_str_eq(mine, str_at("capped.message"));
    }
    /* 1022 MiB fits under the cap */
    cr_assert_str_eq(str_at("capped.just_under_outcome"), "ok");
    cr_assert_eq(cachealloc_malloc(e.ca, ((size_t)1 << 30) - 2 * MiB, &p), OOM_OK);
    cr_assert_eq(cachealloc_free(e.ca, p), OOM_OK);
    rm(&e);
}

Test(fidelity, sim_total_is_the_devices_not_the_budget)
{
    if (!on_sim())
        cr_skip_test("sim only");
    rt *r = test_rt_open((size_t)1 << 30, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->dev->total_bytes, H100_TOTAL);
    cr_assert_eq(cachealloc_budget(r->ca), 1073741823);
    rt_close(r);
}

/* ---- 5. the context and the OOM message -------------------------------------------------------------------- */

Test(fidelity, sim_models_the_h100_context)
{
    /* the sim's constants are the recording's */
    cr_assert_eq(DEVICE_SIM_CONTEXT_BYTES, num_at("device.context.after_init.total_minus_free"));
    cr_assert_eq(DEVICE_SIM_CONTEXT_NVML_BYTES, num_at("device.context.after_init.nvml.self_used"));
    if (!on_sim())
        cr_skip_test("sim only");
    device *dev = test_device_open(0);
    size_t f = 0, t = 0;
    cr_assert_eq(device_mem_info(dev, &f, &t), OOM_OK);
    cr_assert_eq(t, H100_TOTAL);
    cr_assert_eq(t - f, DEVICE_SIM_CONTEXT_BYTES, "the context is not free");
    device_proc procs[4];
    size_t n = 0;
    cr_assert_eq(device_processes(dev, procs, 4, &n), OOM_OK);
    cr_assert_eq(n, 1);
    cr_assert(procs[0].self);
    cr_assert_eq(procs[0].used_bytes, DEVICE_SIM_CONTEXT_NVML_BYTES);
    devptr p = 0;
    cr_assert_eq(device_mem_alloc(dev, 20 * MiB, &p), OOM_OK);
    cr_assert_eq(device_processes(dev, procs, 4, &n), OOM_OK);
    cr_assert_eq(procs[0].used_bytes, DEVICE_SIM_CONTEXT_NVML_BYTES + 20 * MiB, "what it maps, plus the context");
    cr_assert_eq(device_mem_free(dev, p, 20 * MiB), OOM_OK);
    device_close(dev);

    /* a sim of another capacity models no context: no process line, all of it free */
    dev = test_device_open(GiB);
    cr_assert_eq(device_mem_info(dev, &f, &t), OOM_OK);
    cr_assert_eq(f, GiB);
    cr_assert_eq(device_processes(dev, procs, 4, &n), OOM_EUNSUPPORTED);
    device_close(dev);
}

Test(fidelity, plain_oom_message_is_pytorchs)
{
    /* 100 GiB on a fresh allocator, no cap */
    cr_assert_str_eq(str_at("device.oom_plain.outcome"), "oom");
    env e = mk("", 0);
    devptr p = 0;
    cr_assert_eq(cachealloc_malloc(e.ca, (size_t)100 << 30, &p), OOM_ENOMEM_DEVICE);
    const ca_oom_info *o = cachealloc_last_oom(e.ca);
    cr_assert_not_null(o);
    char mine[1024];
    pytorch_part(o->message, mine, sizeof mine);
    if (on_sim())
        cr_assert_str_eq(mine, str_at("device.oom_plain.message"));
    else /* the live numbers differ from run to run: the words around them must not */
        cr_assert_eq(strncmp(mine, str_at("device.oom_plain.message"), 79), 0, "%s", mine);
    rm(&e);
}

Test(fidelity, fragmentation_oom_message_is_pytorchs_word_for_word)
{
    /* the fragmentation twin's message, process line and free memory included */
    if (!on_sim())
        cr_skip_test("the free memory is the GPU's live state");
    char *text = fileio_read_all("tests/data/twins/fragmentation.torch.json", NULL);
    cr_assert_not_null(text);
    cJSON *frag = cJSON_Parse(text);
    cr_assert_not_null(frag);
    const cJSON *bug = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(frag, "variants"), 0);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(bug, "variant")->valuestring, "bug");
    run_options opt = {.backend = DEVICE_SIM, .variants = {"bug"}, .nvariants = 1};
    run_result res;
    char err[512] = "";
    cr_assert_eq(runner_run(scenario_find("fragmentation"), &opt, &res, err, sizeof err), OOM_OK, "%s", err);
    char mine[1024];
    pytorch_part(res.variants[0].oom.message, mine, sizeof mine);
    cr_assert_str_eq(mine, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(bug, "oom"), "message")
                               ->valuestring);
    run_result_free(&res);
    cJSON_Delete(frag);
    free(text);
}

Test(fidelity, cuda_lists_processes_as_nvml_does)
{
    if (on_sim())
        cr_skip_test("cuda only");
    device *dev = test_device_open(0);
    device_proc procs[DEVICE_MAX_PROCS];
    size_t n = 0;
    oom_status st = device_processes(dev, procs, DEVICE_MAX_PROCS, &n);
    if (st == OOM_EUNSUPPORTED)
        cr_skip_test("no NVML here: PyTorch leaves the line out too");
    cr_assert_eq(st, OOM_OK);
    bool self = false;
    for (size_t i = 0; i < n && i < DEVICE_MAX_PROCS; i++)
        self = self || procs[i].self;
    cr_assert(self, "this process holds a context, NVML lists it");
    device_close(dev);
}

/* ---- 5. empty_cache() before CUDA is initialised --------------------------------------------------------- */

Test(fidelity, empty_cache_before_the_first_allocation_does_not_sync)
{
    cr_assert_eq(num_at("empty_cache_fresh.stats_after_first_alloc.num_sync_all_streams"), 0);
    cr_assert(!cJSON_IsTrue(at("empty_cache_fresh.initialized_at_empty_cache")));
    env e = mk("", 0);
    cachealloc_empty_cache(e.ca);
    devptr p = 0;
    cr_assert_eq(cachealloc_malloc(e.ca, 1024, &p), OOM_OK);
    cr_assert_eq(stat_of(e.ca, "num_sync_all_streams"), 0);
    cachealloc_empty_cache(e.ca); /* now CUDA is initialised */
    cr_assert_eq(stat_of(e.ca, "num_sync_all_streams"), 1);
    cr_assert_eq(cachealloc_free(e.ca, p), OOM_OK);
    rm(&e);
}

Test(fidelity, empty_cache_after_a_budget_syncs)
{
    /* set_per_process_memory_fraction initialises CUDA, so the budgeted runtime counts it from the start */
    cr_assert(cJSON_IsTrue(at("empty_cache_after_fraction.initialized_at_empty_cache")));
    size_t want = num_at("empty_cache_after_fraction.stats_after_first_alloc.num_sync_all_streams");
    cr_assert_eq(want, 1);
    env e = mk("", (size_t)1 << 30);
    cachealloc_empty_cache(e.ca);
    cr_assert_eq(stat_of(e.ca, "num_sync_all_streams"), (int64_t)want);
    rm(&e);
}

/* ---- 5. large_segment_size_mb off the granularity, with expandable segments -------------------------------- */

Test(fidelity, large_segment_off_granularity_is_a_driver_error_not_an_oom)
{
    const char *type = str_at("large_segment_21_expandable.type");
    cr_assert_str_eq(type, "builtins.RuntimeError", "PyTorch raised %s, a RuntimeError, not an OutOfMemoryError", type);
    const char *want = str_at("large_segment_21_expandable.message");
    env e = mk("expandable_segments:True,large_segment_size_mb:21", 0);
    devptr p = 0x5a5a;
    oom_status st = cachealloc_malloc(e.ca, 30 * MiB, &p);
    cr_assert_eq(st, OOM_ECUDA, "%s, not an OOM", oom_status_str(st));
    cr_assert_eq(p, 0x5a5a);
    /* PyTorch's text (its first line: a C++ build may append where it was thrown) */
    size_t n = strcspn(want, "\n");
    cr_assert_eq(strlen(oom_error_detail()), n, "'%s' vs '%.*s'", oom_error_detail(), (int)n, want);
    cr_assert_eq(strncmp(oom_error_detail(), want, n), 0, "'%s' vs '%.*s'", oom_error_detail(), (int)n, want);
    cr_assert_null(cachealloc_last_oom(e.ca), "no OOM is recorded");
    const cJSON *ps = at("large_segment_21_expandable.stats");
    static const char *const keys[] = {"num_ooms", "num_device_alloc", "num_sync_all_streams",
                                       "reserved_bytes.all.current", "allocated_bytes.all.current"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_assert_eq(stat_of(e.ca, keys[i]), (int64_t)cJSON_GetObjectItemCaseSensitive(ps, keys[i])->valuedouble,
                     "%s", keys[i]);
    cr_assert_eq(stat_of(e.ca, "num_alloc_retries"), 0);
    /* the small pool's 2 MiB pages still work, as in PyTorch */
    cr_assert_str_eq(str_at("large_segment_21_expandable.then_1MiB.outcome"), "ok");
    cr_assert_eq(cachealloc_malloc(e.ca, MiB, &p), OOM_OK);
    cr_assert_eq(cachealloc_free(e.ca, p), OOM_OK);
    rm(&e);

    /* through the runtime: the op fails with PyTorch's text, and no OOM is recorded */
    alloc_conf c;
    alloc_conf_default(&c);
    cr_assert_eq(alloc_conf_parse(&c, "expandable_segments:True,large_segment_size_mb:21", NULL, 0), OOM_OK);
    rt_options ro = {.backend = test_backend(), .conf = &c};
    rt *r = NULL;
    cr_assert_eq(rt_open(&ro, &r), OOM_OK);
    int64_t shape[1] = {30 * (int64_t)MiB / 4}; /* 30 MiB of float32 */
    cr_assert_null(tensor_empty(r, DT_F32, 1, shape));
    cr_assert_eq(rt_status(r), OOM_ECUDA);
    cr_assert_eq(strncmp(rt_message(r), want, n), 0, "%s", rt_message(r));
    cr_assert_eq(strlen(rt_message(r)), n);
    rt_clear(r);
    rt_close(r);
}

Test(fidelity, large_segment_on_the_granularity_or_without_expandable_is_fine)
{
    cr_assert_str_eq(str_at("large_segment_21_plain.outcome"), "ok");
    env e = mk("large_segment_size_mb:21", 0);
    devptr p = 0;
    cr_assert_eq(cachealloc_malloc(e.ca, 3 * MiB / 2, &p), OOM_OK);
    cr_assert_eq(stat_of(e.ca, "reserved_bytes.all.current"),
                 (int64_t)cJSON_GetObjectItemCaseSensitive(at("large_segment_21_plain.stats"),
                                                           "reserved_bytes.all.current")
                     ->valuedouble,
                 "a 21 MiB mid-band segment, as in PyTorch");
    cr_assert_eq(cachealloc_free(e.ca, p), OOM_OK);
    rm(&e);
    e = mk("expandable_segments:True,large_segment_size_mb:22", 0);
    cr_assert_eq(cachealloc_malloc(e.ca, 30 * MiB, &p), OOM_OK);
    cr_assert_eq(stat_of(e.ca, "reserved_bytes.all.current"), 44 * (int64_t)MiB);
    cr_assert_eq(cachealloc_free(e.ca, p), OOM_OK);
    rm(&e);
}

/* ---- 5. the ROCm spellings ---------------------------------------------------------------------------- */

Test(fidelity, hip_spellings_are_accepted_as_pytorch_accepts_them)
{
    cr_assert(cJSON_IsTrue(at("aliases_set_allocator_settings.release_lock_on_hipmalloc:True.accepted")));
    cr_assert(cJSON_IsTrue(at("aliases_set_allocator_settings.pinned_use_hip_host_register:True.accepted")));
    cr_assert_str_eq(str_at("aliases_env.outcome"), "ok");
    cr_assert(!cJSON_IsTrue(at("aliases_set_allocator_settings.bogus_key:1.accepted")));
    alloc_conf c;
    char err[512];
    cr_assert_eq(alloc_conf_parse(&c, "release_lock_on_hipmalloc:True,pinned_use_hip_host_register:False", err,
                                  sizeof err),
                 OOM_OK, "%s", err);
    cr_assert_eq(alloc_conf_parse(&c, "release_lock_on_hipmalloc:yes", err, sizeof err), OOM_EINVAL);
    cr_assert_str_eq(err, "release_lock_on_hipmalloc must be True or False (got 'yes')");
    cr_assert_eq(alloc_conf_parse(&c, "pinned_use_hip_host_register:1", err, sizeof err), OOM_EINVAL);
    cr_assert_str_eq(err, "pinned_use_hip_host_register must be True or False (got '1')");
    /* an unknown key in PyTorch's words (a ValueError), then the keys oomlab knows */
    cr_assert_eq(alloc_conf_parse(&c, "bogus_key:1", err, sizeof err), OOM_EINVAL);
    const char *pt = str_at("aliases_set_allocator_settings.bogus_key:1.message");
    cr_assert_str_eq(pt, "Unrecognized key 'bogus_key' in Accelerator allocator config.");
    cr_assert_eq(strncmp(err, pt, strlen(pt)), 0, "%s", err);
}

/* ---- 3. which variable PyTorch reads ------------------------------------------------------------------- */

/* Did the probe's 30 MiB land in an expandable segment? */
static bool probe_expandable(const char *probe)
{
    char path[128];
    snprintf(path, sizeof path, "%s.segments", probe);
    const cJSON *segs = at(path);
    cr_assert_eq(cJSON_GetArraySize(segs), 1, "%s", probe);
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(segs, 0), "is_expandable"));
}

Test(fidelity, environment_precedence_is_pytorchs)
{
    /* PyTorch reads PYTORCH_CUDA_ALLOC_CONF before PYTORCH_ALLOC_CONF, PYTORCH_ALLOC_CONF alone, and, on a CUDA
     * build too, PYTORCH_HIP_ALLOC_CONF; OOMLAB_ALLOC_CONF is oomlab's own, more specific, and comes first */
    cr_assert(probe_expandable("env_cuda_over_alloc"));
    cr_assert(probe_expandable("env_alloc_only"));
    cr_assert(probe_expandable("env_hip_only"));
    static const char *const vars[] = {ALLOC_CONF_ENV_VARS};
    cr_assert_eq(sizeof vars / sizeof vars[0], 4);
    cr_assert_str_eq(vars[0], "OOMLAB_ALLOC_CONF");
    cr_assert_str_eq(vars[1], "PYTORCH_CUDA_ALLOC_CONF");
    cr_assert_str_eq(vars[2], "PYTORCH_HIP_ALLOC_CONF");
    cr_assert_str_eq(vars[3], "PYTORCH_ALLOC_CONF");
}

Test(fidelity, the_runner_never_reads_the_environment)
{
    /* the test binary gives the same result whatever is exported: the runner takes settings only from options */
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
    setenv("PYTORCH_ALLOC_CONF", "bogus:1", 1);
    setenv("PYTORCH_HIP_ALLOC_CONF", "bogus:1", 1);
    setenv("OOMLAB_ALLOC_CONF", "max_split_size_mb:bogus", 1);
    run_options opt = {.backend = test_backend(), .variants = {"bug"}, .nvariants = 1};
    run_result res;
    char err[512] = "";
    cr_assert_eq(runner_run(scenario_find("fragmentation"), &opt, &res, err, sizeof err), OOM_OK, "%s", err);
    cr_assert_str_eq(res.conf_source, "default");
    cr_assert_str_eq(res.conf_user, "");
    cr_assert_not_null(strstr(res.variants[0].alloc_conf, "expandable_segments:False"), "%s",
                       res.variants[0].alloc_conf);
    cr_assert_eq(res.variants[0].outcome, OUTCOME_OOM);
    run_result_free(&res);
}
