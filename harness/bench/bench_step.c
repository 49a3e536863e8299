/* bench_step.c - `oomlab bench step`: milliseconds per training step of the canonical MLP at the CI scale
 * (width 256, depth 4, batch 64: zero_grad, forward, cross-entropy, backward, SGD with momentum), and per
 * forward pass under no_grad, on the chosen backend: the CPU references on sim, the CUDA kernels on cuda.
 * A benchmark, not a test: it prints figures and asserts nothing. The build's OOM_DEBUG level is printed: only
 * level 0 figures are worth publishing (`make bench` builds that way). */
#include <cJSON.h>
#include <stdlib.h>

#include "runtime/autograd.h"
#include "bench/bench.h"
#include "training/nn.h"
#include "runtime/ops.h"
#include "runtime/optim.h"
#include "results/export.h"
#include "run/runner.h"

#ifndef OOM_DEBUG
#define OOM_DEBUG 0
#endif

#define STEP_RUNS 21

oom_status bench_step(const bench_step_options *opt, FILE *out)
{
    const int64_t W = opt->width > 0 ? opt->width : 256, B = opt->batch > 0 ? opt->batch : 64;
    const int D = 4;
    rt_options ro = {.backend = opt->kind == DEVICE_AUTO ? DEVICE_AUTO : opt->kind, .seed = 1};
    rt *r = NULL;
    oom_status st = rt_open(&ro, &r);
    if (st != OOM_OK)
        return st;
    nn_mlp *m = nn_mlp_new(r, W, D, 10, DT_F32);
    tensor *params[2 * (D + 1)];
    size_t np = m ? nn_mlp_parameters(m, params, sizeof params / sizeof params[0]) : 0;
    optimizer *o = optim_sgd(r, params, np, 0.01, 0.9, 0.0, 0.0, false);
    tensor *x = tensor_randn(r, DT_F32, SHAPE(B, W), 0.0, 1.0);
    tensor *y = tensor_randint(r, SHAPE(B), 0, 10);
    double train[STEP_RUNS], eval[STEP_RUNS], train_cpu[STEP_RUNS], eval_cpu[STEP_RUNS], sampled[STEP_RUNS],
        sample_us[STEP_RUNS];
    /* the measurement's overhead: the same step with a sample of the counters after it, as scn_step takes one
     * (label, 11 counters, the series grown), alternated with the plain step so that drift hits both alike */
    scn_sample *series = NULL;
    size_t nseries = 0;
    for (int i = -3; i < STEP_RUNS && rt_ok(r); i++) { /* three warm-up steps */
        double t0 = (bench_now_ns() * 1e-6), c0 = bench_cpu_ns() * 1e-6;
        optim_zero_grad(o, true);
        tensor *logits = nn_mlp_forward(m, x);
        tensor *loss = op_cross_entropy(logits, y);
        autograd_backward(loss, NULL, false);
        optim_step(o);
        rt_sync(r);
        double t1 = (bench_now_ns() * 1e-6), c1 = bench_cpu_ns() * 1e-6;
        tensor_release(loss);
        tensor_release(logits);
        RT_NO_GRAD(r)
        {
            tensor *out2 = nn_mlp_forward(m, x);
            rt_sync(r);
            tensor_release(out2);
        }
        double t2 = (bench_now_ns() * 1e-6), c2 = bench_cpu_ns() * 1e-6;
        double t3 = bench_now_ns() * 1e-6;
        optim_zero_grad(o, true);
        tensor *l2 = nn_mlp_forward(m, x);
        tensor *loss2 = op_cross_entropy(l2, y);
        autograd_backward(loss2, NULL, false);
        optim_step(o);
        rt_sync(r);
        double ts = bench_now_ns() * 1e-6;
        scn_sample *grown = realloc(series, (nseries + 1) * sizeof *series);
        if (grown) {
            series = grown;
            snprintf(series[nseries].label, sizeof series[nseries].label, "step %d", i);
            runner_sample_of(cachealloc_stats(r->ca), &series[nseries++]);
        }
        double t4 = bench_now_ns() * 1e-6;
        tensor_release(loss2);
        tensor_release(l2);
        if (i >= 0) {
            sample_us[i] = (t4 - ts) * 1e3;
            sampled[i] = t4 - t3;
            train[i] = t1 - t0;
            eval[i] = t2 - t1;
            train_cpu[i] = c1 - c0;
            eval_cpu[i] = c2 - c1;
        }
    }
    st = rt_status(r);
    if (st == OOM_OK) {
        double tr = bench_median(train, STEP_RUNS), ev = bench_median(eval, STEP_RUNS);
        if (opt->json) {
            /* step/train/w256_b64 and step/forward/w256_b64: ms per call */
            cJSON *j = cJSON_CreateObject();
            cJSON *ctx = gbench_context("oomlab bench step", r->dev->ops->name, r->dev->name, OOM_DEBUG);
            cJSON_AddStringToObject(ctx, "oomlab_benchmark", "step");
            cJSON_AddStringToObject(ctx, "oomlab_kernels", r->k->name);
            cJSON_AddItemToObject(j, "context", ctx);
            cJSON *arr = cJSON_AddArrayToObject(j, "benchmarks");
            double trc = bench_median(train_cpu, STEP_RUNS), evc = bench_median(eval_cpu, STEP_RUNS);
            const char *what[2] = {"train", "forward"};
            double wall[2] = {tr, ev}, cpu[2] = {trc, evc};
            for (int w = 0; w < 2; w++) {
                char name[96];
                snprintf(name, sizeof name, "step/%s/w%lld_b%lld", what[w], (long long)W, (long long)B);
                /* on cuda the kernels run on the GPU: the host's CPU time is not the step's */
                cJSON *b = gbench_add(arr, name, wall[w], r->dev->kind == DEVICE_CUDA ? -1 : cpu[w], "ms");
                if (b) {
                    cJSON_AddNumberToObject(b, "width", (double)W);
                    cJSON_AddNumberToObject(b, "depth", D);
                    cJSON_AddNumberToObject(b, "batch", (double)B);
                }
            }
            bench_print_json(j, out);
        } else {
            fprintf(out, "oomlab bench step: MLP(width %lld, depth %d) batch %lld on %s (%s kernels), OOM_DEBUG=%d%s\n",
                    (long long)W, D, (long long)B, r->dev->ops->name, r->k->name, OOM_DEBUG,
                    OOM_DEBUG ? " (checked build: do not publish these figures; use make bench)" : "");
            fprintf(out, "ms per call, median of %d runs after 3 warm-ups\n", STEP_RUNS);
            fprintf(out, "  training step (zero_grad, forward, cross-entropy, backward, SGD)  %9.3f ms\n", tr);
            fprintf(out, "  forward under no_grad                                            %9.3f ms\n", ev);
            double sm = bench_median(sampled, STEP_RUNS);
            double su = bench_median(sample_us, STEP_RUNS);
            fprintf(out, "  training step and a sample of the counters (scn_step's)          %9.3f ms (%+.2f%%)\n",
                    sm, tr > 0 ? (sm - tr) / tr * 100.0 : 0.0);
            fprintf(out, "  the sample alone                                                 %9.3f us (%.3f%% of the step)\n",
                    su, tr > 0 ? su * 1e-3 / tr * 100.0 : 0.0);
        }
    }
    free(series);
    tensor_release(x);
    tensor_release(y);
    optim_free(o);
    nn_mlp_free(m);
    rt_close(r);
    return st;
}
