/* test_parity.c - the runtime's memory against PyTorch's on the MLP and RNN workloads of the parity twin.
 *
 * Suite "parity". PyTorch's side is tests/data/twins/mlp_parity.torch.json (scripts/twins/mlp_parity.py,
 * PyTorch 2.11.0+cu130 on an H100). oomlab's side is `oomlab parity` (harness/bench/parity.c): on sim it runs dry at
 * full scale; with OOMLAB_TEST_BACKEND=cuda it computes on the GPU. The one difference is cuBLAS's workspace,
 * which PyTorch allocates through its caching allocator and oomlab's kernels do not need: one 32 MiB workspace
 * per cuBLAS handle (the forward's thread, and the autograd engine's thread once backward has run) plus a 1 MiB
 * cuBLASLt workspace for addmm with bias; the twin's "workspace" workload measures both. Everything else is
 * equal to the byte: tests/data/twins/mlp_parity_noworkspace.torch.json is the twin run with
 * CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0, and oomlab's training figures equal it exactly.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "bench/parity.h"
#include "testutil.h"

static cJSON *twin, *twin_nows;

static cJSON *load_json(const char *path)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "%s", oom_error_msg());
    cJSON *o = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(o, "%s does not parse", path);
    return o;
}

static void load(void)
{
    twin = load_json("tests/data/twins/mlp_parity.torch.json");
    twin_nows = load_json("tests/data/twins/mlp_parity_noworkspace.torch.json");
}

static void unload(void)
{
    cJSON_Delete(twin);
    cJSON_Delete(twin_nows);
}

TestSuite(parity, .init = load, .fini = unload);

static const cJSON *find_workload(const cJSON *rec, const char *name)
{
    for (int i = 0; i < cJSON_GetArraySize(rec); i++) {
        const cJSON *w = cJSON_GetArrayItem(rec, i);
        if (strcmp(cJSON_GetObjectItemCaseSensitive(w, "workload")->valuestring, name) == 0)
            return w;
    }
    cr_assert_fail("no %s in the twin's recording", name);
    return NULL;
}

static const cJSON *torch_workload(const char *name) { return find_workload(twin, name); }

static int64_t num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "missing %s", key);
    return (int64_t)v->valuedouble;
}

static int64_t at(const cJSON *o, const char *key, int i)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsArray(a) && i < cJSON_GetArraySize(a), "missing %s[%d]", key, i);
    return (int64_t)cJSON_GetArrayItem(a, i)->valuedouble;
}

/* PyTorch's cuBLAS workspaces in a workload that ran `handles` cuBLAS handles */
static int64_t workspaces(int handles)
{
    const cJSON *w = torch_workload("workspace");
    return handles * num(w, "mm_workspace_bytes") + num(w, "addmm_extra_bytes");
}

static cJSON *ours(const char *name)
{
    cJSON *o = NULL;
    cr_assert_eq(parity_run(name, test_backend(), &o), OOM_OK, "%s", oom_error_msg());
    return o;
}

static void same_steps(const char *name, int handles)
{
    const cJSON *t = torch_workload(name);
    cJSON *o = ours(name);
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "allocated_per_step"));
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "allocated_per_step")), n);
    for (int i = 0; i < n; i++)
        cr_expect_eq(at(o, "allocated_per_step", i) + workspaces(handles), at(t, "allocated_per_step", i),
                     "%s step %d: oomlab %lld + workspaces, PyTorch %lld", name, i,
                     (long long)at(o, "allocated_per_step", i), (long long)at(t, "allocated_per_step", i));
    for (int i = 0; i + 1 < n; i++)
        cr_expect_eq(at(o, "bytes_per_step", i), at(t, "bytes_per_step", i), "%s: bytes added by step %d", name,
                     i + 1);
    cJSON_Delete(o);
}

Test(parity, eval_loop_keeps_one_graph_per_step_as_pytorch)
{
    same_steps("eval_leak", 1);
    const cJSON *t = torch_workload("eval_leak");
    cr_assert_eq(at(t, "bytes_per_step", 0), 20984320, "PyTorch's figure");
}

Test(parity, eval_item_and_no_grad_stay_flat_as_pytorch)
{
    same_steps("eval_item", 1);
    same_steps("eval_nograd", 1);
}

Test(parity, rnn_chain_grows_as_pytorch) { same_steps("rnn_chain", 2); }

Test(parity, training_steady_state_and_peak_equal_pytorch)
{
    const char *names[2] = {"train_sgd", "train_adam"};
    for (int k = 0; k < 2; k++) {
        const cJSON *t = torch_workload(names[k]);
        cJSON *o = ours(names[k]);
        cr_expect_eq(num(o, "params_bytes"), num(t, "params_bytes"), "%s parameters", names[k]);
        for (int i = 0; i < 3; i++) {
            cr_expect_eq(at(o, "allocated_per_step", i) + workspaces(2), at(t, "allocated_per_step", i),
                         "%s allocated after step %d", names[k], i + 1);
            /* Adam's peak is inside step(), with the foreach temporaries: PyTorch's default implementation */
            cr_expect_eq(at(o, "peak_per_step", i) + workspaces(2), at(t, "peak_per_step", i),
                         "%s peak after step %d", names[k], i + 1);
        }
        cJSON_Delete(o);
    }
}

/* With cuBLAS's workspaces off, PyTorch's training figures are oomlab's, every one. */
Test(parity, training_equals_pytorch_without_cublas_workspaces)
{
    const cJSON *ws = find_workload(twin_nows, "workspace");
    cr_assert_eq(num(ws, "mm_workspace_bytes"), 0, "the workspaces were off");
    cr_assert_eq(num(ws, "addmm_extra_bytes"), 0);
    const char *names[2] = {"train_sgd", "train_adam"};
    static const char *const keys[] = {"allocated_bytes.all.peak", "reserved_bytes.all.peak",
                                       "reserved_bytes.all.current", "num_device_alloc", "segment.all.current"};
    for (int k = 0; k < 2; k++) {
        const cJSON *t = find_workload(twin_nows, names[k]);
        cJSON *o = ours(names[k]);
        for (int i = 0; i < 3; i++) {
            cr_expect_eq(at(o, "allocated_per_step", i), at(t, "allocated_per_step", i), "%s step %d", names[k], i);
            cr_expect_eq(at(o, "peak_per_step", i), at(t, "peak_per_step", i), "%s peak %d", names[k], i);
        }
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(t, "stats"), *os = cJSON_GetObjectItemCaseSensitive(o, "stats");
        for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
            cr_expect_eq(num(os, keys[j]), num(ts, keys[j]), "%s %s", names[k], keys[j]);
        cJSON_Delete(o);
    }
}
