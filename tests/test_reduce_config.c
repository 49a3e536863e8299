/* test_reduce_config.c - ATen's reduction staging (runtime/reduce_config.h).
 *
 * Suite "reduce_config". The expected bytes are PyTorch 2.11's on an H100 (132 SMs, 2048 threads per SM, warp
 * 32): /work/wt/traces/ov_small.json, a memory-history trace of MLP(4096, 4) at batch 4096, shows in every
 * hidden Linear's backward, after the 16384-byte bias gradient, `alloc 134217728`, `alloc 128`, then
 * `free 128`, `free 134217728`. The other sizes follow from setReduceConfig by hand (worked in the comments).
 */
#include <criterion/criterion.h>

#include "runtime/amp.h"
#include "runtime/autograd.h"
#include "runtime/ops.h"
#include "runtime/reduce_config.h"
#include "runtime/tensor.h"
#include "testutil.h"

static aten_reduce_config rows(int64_t m, int64_t n, int scalar_size, uint64_t addr)
{
    aten_device_props p = ATEN_H100_PROPS;
    aten_reduce_config c;
    aten_reduce_config_compute(&p, ATEN_REDUCE_ROWS, m, n, 4, scalar_size, scalar_size == 2 ? 8 : 4, addr, &c);
    return c;
}

static aten_reduce_config all(int64_t numel, int input_vec_size)
{
    aten_device_props p = ATEN_H100_PROPS;
    aten_reduce_config c;
    aten_reduce_config_compute(&p, ATEN_REDUCE_ALL, numel, 1, 4, 4, input_vec_size, 0x7f0000000000ull, &c);
    return c;
}

/* [4096, 4096] f32 sum(0): output vec 4, block 32 x 4, 32 blocks of outputs, 4096 / 4 = 1024 values per thread
 * >= 256, target grid 132 * (2048 / 128) = 2112: ctas = max(min(66, 64), 4) = 64. Buffer 4 * 4096 * 64 * 32 * 4,
 * semaphores 4 * 32: the trace's 134217728 and 128. */
Test(reduce_config, bias_sum_at_batch_4096_matches_the_trace)
{
    aten_reduce_config c = rows(4096, 4096, 4, 0x7f0000000000ull);
    cr_assert_eq(c.output_vec_size, 4);
    cr_assert_eq(c.block_width, 32);
    cr_assert_eq(c.block_height, 4);
    cr_assert_eq(c.ctas_per_output, 64);
    cr_assert_eq(c.global_memory_size, 134217728);
    cr_assert_eq(c.semaphore_size, 128);
}

/* f16 (the fix-half-model variant): float accumulation, the same config and bytes. */
Test(reduce_config, half_bias_sum_accumulates_in_float)
{
    aten_reduce_config c = rows(4096, 4096, 2, 0x7f0000000000ull);
    cr_assert_eq(c.global_memory_size, 134217728);
    cr_assert_eq(c.semaphore_size, 128);
}

/* 2048 rows: 512 values per thread, ctas = min(66, 32) = 32; 1024 rows: 256, ctas 16; 512 rows: 128 < 256 and
 * 256 rows (unzeroed_grads' batch): 64, no global reduction. */
Test(reduce_config, bias_sum_by_batch)
{
    cr_assert_eq(rows(2048, 4096, 4, 0x7f0000000000ull).global_memory_size, 67108864);
    cr_assert_eq(rows(2048, 4096, 4, 0x7f0000000000ull).semaphore_size, 128);
    cr_assert_eq(rows(1024, 4096, 4, 0x7f0000000000ull).global_memory_size, 33554432);
    cr_assert_eq(rows(512, 4096, 4, 0x7f0000000000ull).global_memory_size, 0);
    cr_assert_eq(rows(256, 4096, 4, 0x7f0000000000ull).global_memory_size, 0);
    cr_assert_eq(rows(256, 4096, 4, 0x7f0000000000ull).semaphore_size, 0);
    cr_assert_eq(rows(0, 4096, 4, 0x7f0000000000ull).global_memory_size, 0);
}

/* An input address that is not a multiple of 4 elements halves the output vectorisation: 256 threads, block
 * 32 x 8, grid 4096 / 2 / 32 = 64, 4096 / 8 = 512 values per thread, target grid 132 * 8 = 1056:
 * ctas = max(min(17, 32), 2) = 17; buffer 4 * 4096 * 17 * 32 * 2, semaphores 4 * 64. */
Test(reduce_config, unaligned_input_vectorises_by_two)
{
    aten_reduce_config c = rows(4096, 4096, 4, 0x7f0000000000ull + 8);
    cr_assert_eq(c.output_vec_size, 2);
    cr_assert_eq(c.block_width, 32);
    cr_assert_eq(c.block_height, 8);
    cr_assert_eq(c.ctas_per_output, 17);
    cr_assert_eq(c.global_memory_size, 17825792);
    cr_assert_eq(c.semaphore_size, 256);
}

/* Full reductions: 512 threads in x, one output. h.pow(2).mean() of [64, 1024] (retained_graph): 65536 / 512 =
 * 128 values per thread < 256, none. 4096 * 4096 elements: 32768 per thread, target grid 132 * 4 = 528,
 * ctas = max(min(528, 2048), 128) = 528: 4 * 528 bytes (block.x reduces, no * block.x), semaphores 4. */
Test(reduce_config, full_reductions)
{
    cr_assert_eq(all(64 * 1024, 4).global_memory_size, 0);
    cr_assert_eq(all(4096 * 4, 4).global_memory_size, 0);
    aten_reduce_config c = all(4096 * 4096, 4);
    cr_assert_eq(c.block_width, 512);
    cr_assert_eq(c.ctas_per_output, 528);
    cr_assert_eq(c.global_memory_size, 2112);
    cr_assert_eq(c.semaphore_size, 4);
    cr_assert_eq(all(512 * 255, 4).global_memory_size, 0, "255 values per thread");
    cr_assert_eq(all(512 * 256, 4).global_memory_size, 4 * 16, "256 values per thread: 16 ctas");
}

/* The allocator sees it: a Linear's backward at [4096, 4096] (dry run) allocates, after the bias gradient, the
 * buffer then the semaphores, and frees the semaphores first, as the trace shows. */
Test(reduce_config, addmm_backward_stages_in_pytorch_order)
{
    alloc_conf conf;
    alloc_conf_default(&conf);
    rt_options o = {.backend = DEVICE_SIM, .dry_run = true, .conf = &conf, .seed = 1};
    rt *r = NULL;
    cr_assert_eq(rt_open(&o, &r), OOM_OK);
    tensor *bias = tensor_empty(r, DT_F32, SHAPE(4096));
    tensor *x = tensor_empty(r, DT_F32, SHAPE(4096, 4096));
    tensor *w = tensor_empty(r, DT_F32, SHAPE(4096, 4096));
    tensor_set_requires_grad(bias, true);
    tensor *y = op_addmm(bias, x, w);
    tensor *l = op_sum(y); /* 16M elements: the full sum stages 2112 and 4 bytes */
    cr_assert(rt_ok(r), "%s", rt_message(r));
    cachealloc_record_history(r->ca, true);
    cr_assert_eq(autograd_backward(l, NULL, false), OOM_OK, "%s", rt_message(r));
    size_t n = 0;
    const ca_trace_entry *t = cachealloc_trace(r->ca, &n);
    size_t i = 0;
    while (i < n && !(t[i].action == CA_ALLOC && t[i].size == 16384))
        i++;
    cr_assert_lt(i, n, "the bias gradient is allocated");
    static const struct { ca_action a; size_t size; } want[] = {
        {CA_ALLOC, 134217728}, {CA_ALLOC, 128}, {CA_FREE_REQUESTED, 128}, {CA_FREE_COMPLETED, 128},
        {CA_FREE_REQUESTED, 134217728}, {CA_FREE_COMPLETED, 134217728}};
    size_t k = 0;
    for (size_t j = i + 1; j < n && k < sizeof want / sizeof want[0]; j++) {
        if (t[j].action == CA_SEGMENT_ALLOC)
            continue;
        cr_assert_eq(t[j].action, want[k].a, "event %zu after the bias gradient: %s", k, ca_action_str(t[j].action));
        cr_assert_eq(t[j].size, want[k].size, "event %zu after the bias gradient", k);
        k++;
    }
    cr_assert_eq(k, sizeof want / sizeof want[0]);
    tensor_release(l);
    tensor_release(y);
    tensor_release(bias);
    tensor_release(x);
    tensor_release(w);
    cr_assert_eq(r->live_tensors, 0);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 0);
    rt_close(r);
}

/* Under autocast, cross_entropy is on no list: log_softmax(self, 1, self.scalar_type()) runs in bfloat16 and
 * keeps its bf16 result, and nll_loss (f32 list) keeps the f32 cast of it: bf16 logits, int64 target, bf16
 * log-probabilities, their f32 cast, the loss and total_weight, one 512-byte block each (the oversize_batch twin's
 * forward: 163840 bytes more than a log_softmax cast to f32 first, [8192, 10] in bf16). */
Test(amp_cross_entropy, log_softmax_runs_in_the_logits_dtype)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r);
    tensor *logits = tensor_randn(r, DT_BF16, SHAPE(8, 10), 0.0, 1.0);
    tensor_set_requires_grad(logits, true);
    tensor *y = tensor_randint(r, SHAPE(8), 0, 10);
    amp_autocast_enter(r, DT_BF16);
    tensor *loss = op_cross_entropy(logits, y);
    amp_autocast_exit(r);
    cr_assert(rt_ok(r), "%s", rt_message(r));
    cr_assert_eq(loss->dt, DT_F32);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 6 * 512);
    cr_assert_eq(autograd_backward(loss, NULL, false), OOM_OK, "%s", rt_message(r));
    cr_assert_eq(logits->grad->dt, DT_BF16);
    tensor_release(loss);
    tensor_release(y);
    tensor_release(logits);
    cr_assert_eq(r->live_tensors, 0);
    rt_close(r);
}
