/* test_predict_parity.c - `oomlab predict` against PyTorch on an H100 (issue 17's proof).
 *
 * For every script of tests/data/predict/scripts at its recorded arguments (scripts/twins/predict_record.py's
 * CASES), the real capture (scripts/oomlab_capture in build/venv, torch on the CPU, no GPU) predicts the script
 * and the prediction is checked against the committed recording NAME.torch.json: peak allocated and peak
 * reserved bytes (the recording's memory_stats()) and the minimum budget in MiB under the defaults and
 * expandable_segments:True (advise's table of the prediction vs the budget PyTorch's bisection found).
 * Every expectation is exact: where the prediction is not PyTorch's, the difference is pinned here, with its
 * reason (docs/parity.md, "Predicting without a GPU"), so that it fails when the difference changes either way.
 * The binary is $OOMLAB_BIN (make test: build/checked/oomlab), else build/oomlab; tests run from the repository
 * root. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "testutil.h"

#define DATA "tests/data/predict"
#define MIB 1048576LL

static char tmpdir[TEST_TMPDIR_MAX];

static void setup(void) { test_tmpdir_make(tmpdir, "predict_parity"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(predict_parity, .init = setup, .fini = teardown, .timeout = 600);

/* One case: the script, its arguments (CASES), and the prediction's known difference from the recording
 * (predicted minus recorded; 0 where exact). */
typedef struct parity_case {
    const char *name;
    const char *script;
    const char *args;
    long long d_allocated; /* bytes */
    long long d_reserved;  /* bytes */
    int d_min_defaults;    /* MiB */
    int d_min_expandable;  /* MiB */
    const char *unmodelled; /* the one "not_modelled" entry the prediction reports (NULL: none) */
    int unmodelled_ops;     /* and its count of ops */
} parity_case;

static cJSON *read_json(const char *path)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *o = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(o, "%s is not JSON", path);
    return o;
}

static const cJSON *get(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert_not_null(v, "no '%s'", key);
    return v;
}

static long long num(const cJSON *o, const char *key) { return (long long)get(o, key)->valuedouble; }

/* advise's minimum budget (MiB) for one setting of the prediction's table. */
static int min_budget(const cJSON *advise, const char *setting)
{
    const cJSON *row;
    cJSON_ArrayForEach(row, get(advise, "settings"))
    {
        if (strcmp(get(row, "alloc_conf")->valuestring, setting) == 0)
            return (int)num(row, "min_budget_mib");
    }
    cr_assert_fail("advise has no row '%s'", setting);
    return -1;
}

static void check(const parity_case *c)
{
    if (access("build/venv/bin/python", X_OK) != 0)
        cr_skip_test("build/venv is not installed (make test installs it: scripts/predict_venv.sh)");
    const char *b = getenv("OOMLAB_BIN");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF '%s' predict --json "
             DATA "/scripts/%s %s >'%s' 2>'%s'",
             b && b[0] ? b : "build/oomlab", c->script, c->args, test_path(tmpdir, "out.json"),
             test_path(tmpdir, "err"));
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: exit %d", cmd, WEXITSTATUS(st));

    cJSON *pred = read_json(test_path(tmpdir, "out.json"));
    char path[256];
    snprintf(path, sizeof path, DATA "/%s.torch.json", c->name);
    cJSON *rec = read_json(path);
    cr_assert_eq(num(get(pred, "gpu"), "total_memory"), num(rec, "total_memory"), "the recording's GPU is predict's");

    const cJSON *mins = get(rec, "min_budget_mib");
    const cJSON *adv = get(pred, "advise");
    cr_expect_eq(num(pred, "peak_allocated"), num(rec, "peak_allocated") + c->d_allocated,
                 "%s: peak allocated %lld, recorded %lld, pinned difference %lld", c->name,
                 num(pred, "peak_allocated"), num(rec, "peak_allocated"), c->d_allocated);
    cr_expect_eq(num(pred, "peak_reserved"), num(rec, "peak_reserved") + c->d_reserved,
                 "%s: peak reserved %lld, recorded %lld, pinned difference %lld", c->name, num(pred, "peak_reserved"),
                 num(rec, "peak_reserved"), c->d_reserved);
    cr_expect_eq(min_budget(adv, ""), (int)num(mins, "defaults") + c->d_min_defaults,
                 "%s: minimum budget (defaults) %d MiB, bisected %lld, pinned difference %d", c->name,
                 min_budget(adv, ""), num(mins, "defaults"), c->d_min_defaults);
    cr_expect_eq(min_budget(adv, "expandable_segments:True"),
                 (int)num(mins, "expandable_segments:True") + c->d_min_expandable,
                 "%s: minimum budget (expandable_segments:True) %d MiB, bisected %lld, pinned difference %d", c->name,
                 min_budget(adv, "expandable_segments:True"), num(mins, "expandable_segments:True"),
                 c->d_min_expandable);
    /* what the capture leaves out is said, never silent */
    const cJSON *nm = get(pred, "not_modelled");
    cr_expect_eq(cJSON_GetArraySize(nm), c->unmodelled ? 1 : 0, "%s: %d not_modelled entries", c->name,
                 cJSON_GetArraySize(nm));
    if (c->unmodelled && cJSON_GetArraySize(nm) == 1) {
        cr_expect_str_eq(get(cJSON_GetArrayItem(nm, 0), "what")->valuestring, c->unmodelled);
        cr_expect_eq(num(cJSON_GetArrayItem(nm, 0), "ops"), c->unmodelled_ops);
    }
    cJSON_Delete(pred);
    cJSON_Delete(rec);
}

/* Exact on every figure. */
Test(predict_parity, mlp_sgd) { check(&(parity_case){"mlp_sgd", "mlp_sgd.py", "", 0, 0, 0, 0, NULL, 0}); }
Test(predict_parity, mlp_adam) { check(&(parity_case){"mlp_adam", "mlp_adam.py", "", 0, 0, 0, 0, NULL, 0}); }
Test(predict_parity, gru_tbptt) { check(&(parity_case){"gru_tbptt", "gru_tbptt.py", "", 0, 0, 0, 0, NULL, 0}); }
Test(predict_parity, grad_accum) { check(&(parity_case){"grad_accum", "grad_accum.py", "", 0, 0, 0, 0, NULL, 0}); }
Test(predict_parity, inference_nograd)
{
    check(&(parity_case){"inference_nograd", "inference_nograd.py", "", 0, 0, 0, 0, NULL, 0});
}
Test(predict_parity, finetune_frozen)
{
    check(&(parity_case){"finetune_frozen", "finetune_frozen.py", "", 0, 0, 0, 0, NULL, 0});
}
/* Exact since autocast's casts are made last argument first, as GCC evaluates WrapFunction_'s pack expansion
 * (cuda_model/autocast.py cast_args); before, expandable_segments:True came out 760 MiB, 6 below PyTorch. */
Test(predict_parity, autocast_bf16)
{
    check(&(parity_case){"autocast_bf16", "autocast_bf16.py", "", 0, 0, 0, 0, NULL, 0});
}

/* The predicted trace has the recording's events (action and size, in order), so need and the uncapped peak
 * reserved are exact; a prediction has no addresses, and with segments placed by the sim's model of the driver
 * another free block of the same size is picked once, so blocks split differently: peak allocated 4 MiB above
 * PyTorch and the defaults' minimum budget 12 MiB above, as `oomlab advise` gives on the recorded trace itself
 * (tests/data/predict/known_differences.json). The trace lacks the sort-based embedding backward's temporaries
 * (> 3072 indices, at lengths 512, 256 and 384: 14 allocations per step of 8 to 18,454,528 bytes, freed within
 * the op, below the peak): not modelled, and reported as such (one op per step). */
Test(predict_parity, transformer_encoder)
{
    check(&(parity_case){"transformer_encoder", "transformer_encoder.py", "", 4 * MIB, 0, 12, 0,
                         "embedding backward's sort path (> 3072 indices)", 3});
}

/* The predicted trace is the recording's event for event (action and size); the sim's placement of segments
 * (no addresses in a prediction) splits one block differently: peak allocated 4 MiB below PyTorch, everything
 * else exact. */
Test(predict_parity, gpt) { check(&(parity_case){"gpt", "gpt.py", "", -4 * MIB, 0, 0, 0, NULL, 0}); }

/* cuDNN convolution workspaces are not modelled (cuDNN's heuristics choose them per GPU, library version and
 * shape: aten/src/ATen/native/cudnn/Conv_v8.cpp), so the prediction is LOW, and says so: "not_modelled" names
 * the 120 convolution ops (20 convolutions, forward and backward, 3 steps). The predicted trace is the
 * recording's but for its 168 workspaces (9,633,808 to 134,522,000 bytes each), freed within their
 * convolutions: peak allocated 11,513,856 bytes below PyTorch, peak reserved 270,532,608 below, the minimum
 * budgets 2 MiB (defaults) and 22 MiB (expandable_segments) below. */
Test(predict_parity, resnet18)
{
    check(&(parity_case){"resnet18", "resnet18.py", "", -11513856, -270532608, -2, -22, "cuDNN convolution workspaces",
                         120});
}

/* Llama 3.2 1B's shape, built on meta (tests/data/predict/scripts/llama.py --size 1b --batch 1 --seq 512): exact.
 * (The 7B shape is timed, not tested: PyTorch did not record it, an H100 cannot train it.) */
Test(predict_parity, llama1b)
{
    check(&(parity_case){"llama1b", "llama.py", "--size 1b --batch 1 --seq 512", 0, 0, 0, 0, NULL, 0});
}
