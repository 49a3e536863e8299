/* parity.c - the workloads of scripts/twins/mlp_parity.py, written with the runtime. See parity.h. */
#include "bench/parity.h"

#include <string.h>
#include <stdio.h>
#include <stdlib.h>


#include "runtime/autograd.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "runtime/runtime.h"
#include "runtime/tensor.h"

#define WIDTH 4096
#define DEPTH 4
#define BATCH 256
#define CLASSES 10

const char *const parity_workloads[] = {"eval_leak", "eval_item", "eval_nograd", "train_sgd", "train_adam",
                                        "rnn_chain"};
const size_t parity_nworkloads = sizeof parity_workloads / sizeof parity_workloads[0];

static int64_t allocated(rt *r)
{
    int64_t v = 0;
    memstats_get(cachealloc_stats(r->ca), "allocated_bytes.all.current", &v);
    return v;
}

static int64_t stat_of(rt *r, const char *key)
{
    int64_t v = 0;
    memstats_get(cachealloc_stats(r->ca), key, &v);
    return v;
}

static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static void add_steps(cJSON *o, const int64_t *per_step, int n)
{
    int64_t deltas[16];
    for (int i = 1; i < n; i++)
        deltas[i - 1] = per_step[i] - per_step[i - 1];
    cJSON_AddItemToObject(o, "allocated_per_step", int_array(per_step, n));
    cJSON_AddItemToObject(o, "bytes_per_step", int_array(deltas, n - 1));
}

/* for _ in range(6): x, y = batch; out = model(x); loss = F.cross_entropy(out, y); total = total + loss  (or
 * total += loss.item(), or the forward under no_grad) */
static void eval_loop(rt *r, const char *name, cJSON *o)
{
    nn_mlp *model = nn_mlp_new(r, WIDTH, DEPTH, CLASSES, DT_F32);
    cJSON_AddNumberToObject(o, "params_bytes", (double)allocated(r));
    bool leak = strcmp(name, "eval_leak") == 0, nograd = strcmp(name, "eval_nograd") == 0;
    tensor *total = leak ? tensor_zeros(r, DT_F32, SCALAR) : NULL;
    double total_f = 0.0;
    tensor *x = NULL, *y = NULL, *out = NULL, *loss = NULL;
    int64_t per_step[6];
    for (int step = 0; step < 6; step++) {
        tensor_assign(&x, tensor_randn(r, DT_F32, SHAPE(BATCH, WIDTH), 0.0, 1.0));
        tensor_assign(&y, tensor_randint(r, SHAPE(BATCH), 0, CLASSES));
        if (nograd) {
            RT_NO_GRAD(r)
            {
                tensor_assign(&out, nn_mlp_forward(model, x));
                tensor_assign(&loss, op_cross_entropy(out, y));
            }
            total_f += tensor_item(loss);
        } else {
            tensor_assign(&out, nn_mlp_forward(model, x));
            tensor_assign(&loss, op_cross_entropy(out, y));
            if (leak)
                tensor_assign(&total, op_add(total, loss, 1.0));
            else
                total_f += tensor_item(loss);
        }
        rt_sync(r);
        per_step[step] = allocated(r);
    }
    (void)total_f;
    add_steps(o, per_step, 6);
    tensor *ts[] = {x, y, out, loss, total};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        tensor_release(ts[i]);
    nn_mlp_free(model);
}

/* def step(): x, y = batch; opt.zero_grad(set_to_none=True); loss = F.cross_entropy(model(x), y);
 * loss.backward(); opt.step()  -- three times */
static void train_loop(rt *r, bool adam, cJSON *o)
{
    nn_mlp *model = nn_mlp_new(r, WIDTH, DEPTH, CLASSES, DT_F32);
    cJSON_AddNumberToObject(o, "params_bytes", (double)allocated(r));
    tensor *params[2 * (DEPTH + 1)];
    size_t np = model ? nn_mlp_parameters(model, params, sizeof params / sizeof params[0]) : 0;
    optimizer *opt = adam ? optim_adam(r, params, np, 1e-3, 0.9, 0.999, 1e-8, 0.0)
                          : optim_sgd(r, params, np, 0.01, 0.9, 0.0, 0.0, false);
    int64_t per_step[3], peaks[3];
    for (int step = 0; step < 3; step++) {
        tensor *x = tensor_randn(r, DT_F32, SHAPE(BATCH, WIDTH), 0.0, 1.0);
        tensor *y = tensor_randint(r, SHAPE(BATCH), 0, CLASSES);
        optim_zero_grad(opt, true);
        tensor *out = nn_mlp_forward(model, x);
        tensor *loss = op_cross_entropy(out, y);
        tensor_release(out); /* model(x) is a temporary: gone when cross_entropy returns */
        autograd_backward(loss, NULL, false);
        optim_step(opt);
        tensor_release(loss);
        tensor_release(y);
        tensor_release(x);
        rt_sync(r);
        per_step[step] = allocated(r);
        peaks[step] = stat_of(r, "allocated_bytes.all.peak");
    }
    cJSON_AddItemToObject(o, "allocated_per_step", int_array(per_step, 3));
    cJSON_AddItemToObject(o, "peak_per_step", int_array(peaks, 3));
    cJSON_AddNumberToObject(o, "steady_allocated", (double)per_step[2]);
    cJSON *st = cJSON_AddObjectToObject(o, "stats");
    static const char *const keys[] = {"allocated_bytes.all.peak", "reserved_bytes.all.peak",
                                       "reserved_bytes.all.current", "num_device_alloc", "segment.all.current"};
    for (size_t i = 0; st && i < sizeof keys / sizeof keys[0]; i++)
        cJSON_AddNumberToObject(st, keys[i], (double)stat_of(r, keys[i]));
    optim_free(opt);
    nn_mlp_free(model);
}

/* cell = RNNCell(256, 512); h = None; for _ in range(6): h = cell(x, h); h.sum().backward(retain_graph=True) */
static void rnn_chain(rt *r, cJSON *o)
{
    nn_rnn_cell cell;
    if (nn_rnn_cell_init(&cell, r, 256, 512) != OOM_OK)
        return;
    tensor *h = NULL;
    int64_t per_step[6];
    for (int step = 0; step < 6; step++) {
        tensor *x = tensor_randn(r, DT_F32, SHAPE(64, 256), 0.0, 1.0);
        tensor_assign(&h, nn_rnn_cell_forward(&cell, x, h));
        tensor *s = op_sum(h);
        autograd_backward(s, NULL, true);
        tensor_release(s);
        tensor_release(x);
        rt_sync(r);
        per_step[step] = allocated(r);
    }
    add_steps(o, per_step, 6);
    tensor_release(h);
    nn_rnn_cell_free(&cell);
}

oom_status parity_run(const char *workload, device_kind backend, cJSON **out)
{
    size_t w = 0;
    while (w < parity_nworkloads && strcmp(parity_workloads[w], workload) != 0)
        w++;
    if (w == parity_nworkloads) {
        OOM_ERROR(OOM_EINVAL, "unknown workload '%s'", workload);
        return OOM_EINVAL;
    }
    bool cuda = backend == DEVICE_CUDA ||
                (backend == DEVICE_AUTO && device_cuda_built() && device_cuda_visible());
    rt_options ro = {.backend = cuda ? DEVICE_CUDA : DEVICE_SIM, .dry_run = !cuda};
    rt *r = NULL;
    oom_status st = rt_open(&ro, &r);
    if (st != OOM_OK)
        return st;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schema", PARITY_SCHEMA);
    cJSON_AddStringToObject(o, "workload", workload);
    cJSON_AddStringToObject(o, "backend", r->dev->ops->name);
    cJSON_AddStringToObject(o, "device", r->dev->name);
    cJSON_AddBoolToObject(o, "dry_run", !r->computes);
    if (strncmp(workload, "eval_", 5) == 0)
        eval_loop(r, workload, o);
    else if (strcmp(workload, "train_sgd") == 0 || strcmp(workload, "train_adam") == 0)
        train_loop(r, strcmp(workload, "train_adam") == 0, o);
    else
        rnn_chain(r, o);
    st = rt_status(r);
    if (st != OOM_OK) {
        OOM_ERROR(st, "%s: %s", workload, rt_message(r));
        cJSON_Delete(o);
        o = NULL;
    }
    rt_close(r);
    *out = o;
    return st;
}
