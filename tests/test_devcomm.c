/* test_devcomm.c - the communicator (device/devcomm.h) and torch.distributed's collectives on tensors (training/dist.h)
 * on sim devices: the bytes each collective moves and where they land, the counters, NCCL's buffers (charged as measured) outside
 * the caching allocator (charged to the device, in PyTorch's OOM message), and the data_parallel scenario.
 * Suite "devcomm": always sim. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "alloc/cachealloc.h"
#include "device/devcomm.h"
#include "run/runner.h"
#include "training/dist.h"
#include "runtime/runtime.h"
#include "runtime/tensor.h"
#include "scntest.h"

#define MIB ((size_t)1 << 20)

static rt *open_rt(size_t budget)
{
    rt_options o = {.backend = DEVICE_SIM, .budget_bytes = budget, .seed = 1};
    rt *r = NULL;
    cr_assert_eq(rt_open(&o, &r), OOM_OK);
    return r;
}

static devcomm *open_comm(rt *const *rs, int n)
{
    device *devs[DEVCOMM_MAX_RANKS];
    for (int k = 0; k < n; k++)
        devs[k] = rs[k]->dev;
    devcomm *c = NULL;
    cr_assert_eq(devcomm_open(devs, n, &c), OOM_OK);
    return c;
}

static tensor *from(rt *r, int64_t n, const float *v) { return tensor_from_host(r, DT_F32, 1, &n, v); }

static void values(tensor *t, float *out) { cr_assert_eq(tensor_to_host(t, out), OOM_OK); }

/* sim charges NCCL's buffers as measured on 2 x H200 (NCCL 2.28.9): 866 MiB a rank, the same for more ranks */
Test(devcomm, nccl_buffers_charged_as_measured)
{
    cr_assert_eq(devcomm_model_bytes(1), 0);
    cr_assert_eq(devcomm_model_bytes(2), 866 * MIB);
    cr_assert_eq(devcomm_model_bytes(4), 866 * MIB);
}

/* The buffers are charged to each device outside the allocator: cudaMemGetInfo's free and NVML's line move by
 * them, the allocator's counters do not; closing gives them back. */
Test(devcomm, buffers_are_the_process_memory_not_pytorchs)
{
    rt *rs[2] = {open_rt(0), open_rt(0)};
    size_t free0, total;
    cr_assert_eq(device_mem_info(rs[0]->dev, &free0, &total), OOM_OK);
    device_proc p0[4];
    size_t np = 0;
    cr_assert_eq(device_processes(rs[0]->dev, p0, 4, &np), OOM_OK);
    devcomm *c = open_comm(rs, 2);
    cr_assert_eq(c->engine, DEVCOMM_STAGED);
    cr_assert(c->modelled);
    cr_assert_eq(c->external[0], 866 * MIB);
    cr_assert_eq(c->external[1], 866 * MIB);
    size_t free1;
    cr_assert_eq(device_mem_info(rs[0]->dev, &free1, &total), OOM_OK);
    cr_assert_eq(free0 - free1, 866 * MIB);
    device_proc p1[4];
    cr_assert_eq(device_processes(rs[0]->dev, p1, 4, &np), OOM_OK);
    cr_assert_eq(p1[0].used_bytes - p0[0].used_bytes, 866 * MIB);
    cr_assert_eq(cachealloc_stats(rs[0]->ca)->reserved_bytes[STAT_ALL].current, 0);
    devcomm_close(c);
    cr_assert_eq(device_mem_info(rs[0]->dev, &free1, &total), OOM_OK);
    cr_assert_eq(free1, free0);
    rt_close(rs[0]);
    rt_close(rs[1]);
}

/* PyTorch's OOM message counts NCCL's buffers in "this process has X memory in use", and only there. */
Test(devcomm, oom_message_counts_nccl_buffers_as_non_pytorch_memory)
{
    char without[RT_MESSAGE_MAX], with[RT_MESSAGE_MAX];
    for (int pass = 0; pass < 2; pass++) {
        rt *rs[2] = {open_rt(64 * MIB), open_rt(64 * MIB)};
        devcomm *c = pass ? open_comm(rs, 2) : NULL;
        tensor *a = tensor_empty(rs[0], DT_F32, SHAPE(8 << 20)); /* 32 MiB */
        cr_assert_not_null(a);
        tensor *b = tensor_empty(rs[0], DT_F32, SHAPE(16 << 20)); /* 64 MiB: over the budget */
        cr_assert_null(b);
        snprintf(pass ? with : without, RT_MESSAGE_MAX, "%s", rt_message(rs[0]));
        rt_clear(rs[0]);
        tensor_release(a);
        devcomm_close(c);
        rt_close(rs[0]);
        rt_close(rs[1]);
    }
    /* 518 MiB of CUDA context (NVML) + 32 MiB reserved, then + 866 MiB of NCCL buffers: 1416 MiB */
    cr_assert(strstr(without, "this process has 550.00 MiB memory in use"), "%s", without);
    cr_assert(strstr(with, "this process has 1.38 GiB memory in use"), "%s", with);
    cr_assert(strstr(with, "Of the allocated memory 32.00 MiB is allocated by PyTorch"), "%s", with);
}

/* all_reduce sums every rank's values into every rank's tensor, in place; bytes_moved counts each rank's input. */
Test(devcomm, all_reduce_sums_in_place)
{
    rt *rs[3] = {open_rt(0), open_rt(0), open_rt(0)};
    devcomm *c = open_comm(rs, 3);
    float v[3][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}, {100, 200, 300, 400}};
    tensor *t[3];
    for (int k = 0; k < 3; k++)
        t[k] = from(rs[k], 4, v[k]);
    uint32_t ver = t[1]->st->version;
    int64_t before = cachealloc_stats(rs[0]->ca)->allocated_bytes[STAT_ALL].current;
    cr_assert_eq(dist_all_reduce(c, t), OOM_OK);
    for (int k = 0; k < 3; k++) {
        float out[4];
        values(t[k], out);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(out[i], 111.0f * (float)(i + 1), "rank %d [%d] = %g", k, i, out[i]);
        cr_assert_eq(c->bytes_moved[k], 16);
    }
    cr_assert_eq(t[1]->st->version, ver + 1);
    cr_assert_eq(c->calls[COMM_ALL_REDUCE], 1);
    /* the collective allocates nothing from the caching allocator */
    cr_assert_eq(cachealloc_stats(rs[0]->ca)->allocated_bytes[STAT_ALL].current, before);
    for (int k = 0; k < 3; k++)
        tensor_release(t[k]);
    devcomm_close(c);
    for (int k = 0; k < 3; k++)
        rt_close(rs[k]);
}

/* reduce_scatter: rank k gets chunk k of the sum; all_gather: every rank gets every rank's chunk in rank order;
 * broadcast: root's values everywhere. */
Test(devcomm, reduce_scatter_all_gather_broadcast)
{
    rt *rs[2] = {open_rt(0), open_rt(0)};
    devcomm *c = open_comm(rs, 2);
    float in0[4] = {1, 2, 3, 4}, in1[4] = {5, 6, 7, 8};
    tensor *in[2] = {from(rs[0], 4, in0), from(rs[1], 4, in1)};
    tensor *half[2] = {tensor_zeros(rs[0], DT_F32, SHAPE(2)), tensor_zeros(rs[1], DT_F32, SHAPE(2))};
    cr_assert_eq(dist_reduce_scatter_tensor(c, half, in), OOM_OK);
    float o[4];
    values(half[0], o);
    cr_assert(o[0] == 6 && o[1] == 8, "%g %g", o[0], o[1]);
    values(half[1], o);
    cr_assert(o[0] == 10 && o[1] == 12, "%g %g", o[0], o[1]);
    cr_assert_eq(c->bytes_moved[0], 16);
    tensor *full[2] = {tensor_zeros(rs[0], DT_F32, SHAPE(4)), tensor_zeros(rs[1], DT_F32, SHAPE(4))};
    cr_assert_eq(dist_all_gather_into_tensor(c, full, half), OOM_OK);
    for (int k = 0; k < 2; k++) {
        values(full[k], o);
        cr_assert(o[0] == 6 && o[1] == 8 && o[2] == 10 && o[3] == 12, "rank %d: %g %g %g %g", k, o[0], o[1], o[2], o[3]);
    }
    cr_assert_eq(c->bytes_moved[1], 16 + 8);
    cr_assert_eq(dist_broadcast(c, in, 1), OOM_OK);
    values(in[0], o);
    cr_assert(o[0] == 5 && o[3] == 8);
    cr_assert_eq(c->bytes_moved[0], 24);     /* rank 0 sent nothing into the broadcast */
    cr_assert_eq(c->bytes_moved[1], 24 + 16);
    /* shapes that do not match: refused in one line, nothing moved */
    cr_assert_eq(dist_all_gather_into_tensor(c, half, half), OOM_EINVAL);
    cr_assert(strstr(rt_message(rs[0]), "all_gather: rank 0's tensors do not match"), "%s", rt_message(rs[0]));
    rt_clear(rs[0]);
    for (int k = 0; k < 2; k++) {
        tensor_release(in[k]);
        tensor_release(half[k]);
        tensor_release(full[k]);
    }
    devcomm_close(c);
    rt_close(rs[0]);
    rt_close(rs[1]);
}

/* A device without room for NCCL's buffers: the communicator is refused, nothing stays charged. */
Test(devcomm, no_room_for_the_buffers)
{
    device_options o = {.kind = DEVICE_SIM, .sim_capacity_bytes = 30 * MIB};
    device *d[2];
    cr_assert_eq(device_open(&o, &d[0]), OOM_OK);
    cr_assert_eq(device_open(&o, &d[1]), OOM_OK);
    devptr p;
    cr_assert_eq(device_mem_alloc(d[1], 16 * MIB, &p), OOM_OK); /* 14 MiB left on device 1 */
    devcomm *c = NULL;
    cr_assert_eq(devcomm_open(d, 2, &c), OOM_ENOMEM_DEVICE);
    cr_assert_null(c);
    size_t f, t;
    cr_assert_eq(device_mem_info(d[0], &f, &t), OOM_OK);
    cr_assert_eq(f, 30 * MIB);
    cr_assert_eq(device_mem_free(d[1], p, 16 * MIB), OOM_OK);
    device_close(d[0]);
    device_close(d[1]);
}

/* ---- data_parallel ------------------------------------------------------------------------------------------- */

static void run_dp(const char *variant, run_result *res, bool dry)
{
    run_options o = {.backend = DEVICE_SIM, .dry_run = dry, .scale = dry ? SCALE_FULL : SCALE_CI, .no_fork = true};
    if (variant)
        o.variants[o.nvariants++] = variant;
    scn_test_run("data_parallel", &o, res);
}

/* Full scale (a dry run): the bug and both myths run out in step 2's backward on every rank, the first
 * iteration's bucket still held beside the rebuilt ones; the fixes fit. Each rank holds the whole model and a
 * bucket copy of every gradient. */
Test(devcomm, data_parallel_full_scale_outcomes)
{
    run_result res;
    run_dp(NULL, &res, true);
    cr_assert(res.passed);
    const char *oom[] = {"bug", "myth-smaller-buckets", "myth-ddp-shards"};
    for (int i = 0; i < 3; i++) {
        const variant_result *vr = scn_test_variant(&res, oom[i]);
        cr_assert_eq(vr->outcome, OUTCOME_OOM, "%s", oom[i]);
        cr_assert_str_eq(vr->oom.what, "step 2: backward", "%s", oom[i]);
        cr_assert_eq(vr->ndevices, 1);
        cr_assert_eq(vr->devices[0].stats.num_ooms, 1, "%s: rank 1 runs out too", oom[i]);
    }
    const variant_result *bug = scn_test_variant(&res, "bug");
    const scn_sample *m = scn_test_sample(bug, "model and optimizer"), *b = scn_test_sample(bug, "DDP(model): buckets");
    /* MLP(4096, 4): 4 x (64 MiB + 16 KiB) + 160 KiB + 40 B = 268,664,872 B; the 40 B bias takes a 512 B block */
    cr_assert_eq(m->allocated, 268665344);
    /* one flat bucket of every gradient (268,664,872 B, rounded to 512 B once) */
    cr_assert_eq(b->allocated - m->allocated, 268665344);
    cr_assert_eq(bug->devices[0].samples[1].allocated, b->allocated); /* rank 1 the same */
    cr_assert_eq(bug->oom.requested, 64 * MIB);
    /* step 2's forward: one bucket more than step 1's (the first iteration's, held by its all-reduce) */
    cr_assert_eq(scn_test_sample(bug, "step 2: forward")->allocated - scn_test_sample(bug, "step 1: forward")->allocated,
                 268665344);
    /* 1.06 GiB reserved + 866 MiB of NCCL's buffers + the context, as the cuda run on 2 x H200 says */
    cr_assert(strstr(bug->oom.message, "this process has 2.43 GiB memory in use"), "%s", bug->oom.message);
    cr_assert_eq(scn_test_variant(&res, "fix-bucket-view")->outcome, OUTCOME_OK);
    cr_assert_eq(scn_test_variant(&res, "fix-smaller-batch")->outcome, OUTCOME_OK);
    run_result_free(&res);
}

/* ZeroRedundancyOptimizer(SGD) in place of SGD: rank 0 steps 3 of the 10 parameters (the greedy partition by numel:
 * two 4096 x 4096 weights and the classifier's), and SGD keeps no state to share, so every counter of every sample of
 * both ranks is the bug's, its OOM in step 2's backward included. */
Test(devcomm, data_parallel_zero_redundancy_optimizer_changes_nothing_here)
{
    run_result res;
    run_options o = {.backend = DEVICE_SIM, .dry_run = true, .scale = SCALE_FULL, .no_fork = true};
    o.variants[o.nvariants++] = "bug";
    o.variants[o.nvariants++] = "myth-zero-redundancy-optimizer";
    scn_test_run("data_parallel", &o, &res);
    const variant_result *bug = scn_test_variant(&res, "bug"), *z = scn_test_variant(&res, "myth-zero-redundancy-optimizer");
    cr_assert(z->reproduced);
    cr_assert_eq(z->outcome, OUTCOME_OOM);
    cr_assert_str_eq(z->oom.what, "step 2: backward");
    cr_assert_eq(z->nsamples, bug->nsamples);
    cr_assert_eq(z->ndevices, 1);
    for (size_t i = 0; i < z->nsamples; i++) {
        const scn_sample *a = &bug->samples[i], *b = &z->samples[i];
        const scn_sample *a1 = &bug->devices[0].samples[i], *b1 = &z->devices[0].samples[i];
        cr_assert_str_eq(a->label, b->label);
        cr_assert(a->allocated == b->allocated && a->reserved == b->reserved && a->allocated_peak == b->allocated_peak &&
                      a->segments == b->segments && a->device_allocs == b->device_allocs,
                  "%s", a->label);
        cr_assert(a1->allocated == b1->allocated && a1->reserved == b1->reserved, "rank 1: %s", a->label);
    }
    bool said = false;
    for (size_t e = 0; e < z->nexpect; e++)
        said = said || (z->expect[e].holds && strstr(z->expect[e].text, "gives rank 0 3 of the 10 parameters") &&
                        strstr(z->expect[e].text, "adds 0 bytes"));
    cr_assert(said, "no passing expectation of the partition and the empty state");
    run_result_free(&res);
}

/* gradient_as_bucket_view: after backward every .grad is a view into a bucket (no second copy): allocated after
 * backward is the parameters and the buckets, the bug's parameters, buckets and gradients. */
Test(devcomm, data_parallel_bucket_view_drops_the_second_copy)
{
    run_result res;
    run_options o = {.backend = DEVICE_SIM, .dry_run = true, .scale = SCALE_FULL, .no_fork = true, .budget = (size_t)4 << 30};
    o.variants[o.nvariants++] = "bug";
    o.variants[o.nvariants++] = "fix-bucket-view";
    scn_test_run("data_parallel", &o, &res);
    const scn_sample *bug = scn_test_sample(scn_test_variant(&res, "bug"), "step 1: backward");
    const scn_sample *fix = scn_test_sample(scn_test_variant(&res, "fix-bucket-view"), "step 1: backward");
    const scn_sample *m = scn_test_sample(scn_test_variant(&res, "bug"), "model and optimizer");
    /* the difference is every .grad (the parameters' bytes, as allocated) */
    cr_assert_eq(bug->allocated - fix->allocated, m->allocated, "bug %lld, fix %lld", (long long)bug->allocated,
                 (long long)fix->allocated);
    cr_assert_eq(fix->allocated, 570902016);
    run_result_free(&res);
}

/* At ci scale the values are computed: every rank ends the fixes' steps with the same parameters (the all-reduce
 * averaged the gradients), and the run passes. */
Test(devcomm, data_parallel_ci_passes)
{
    run_result res;
    run_dp(NULL, &res, false);
    cr_assert(scn_test_expected(&res));
    cr_assert(res.passed);
    run_result_free(&res);
}
