/* test_tensor.c - tensors: storage from the caching allocator, views, versions, values, dry runs.
 *
 * Suite "tensor" (backend under test). Byte expectations follow PyTorch's rules: a tensor of n bytes takes a
 * block of n rounded up to 512; a 0-dim float takes 512; views take nothing.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "testutil.h"

static rt *open_rt(void)
{
    rt *r = test_rt_open(0, NULL);
    cr_assert_not_null(r);
    return r;
}

static void close_rt(rt *r)
{
    cr_assert_eq(r->live_tensors, 0, "%zu tensors leaked", r->live_tensors);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 0);
    rt_close(r);
}

Test(tensor, storage_comes_from_the_caching_allocator)
{
    rt *r = open_rt();
    tensor *a = tensor_empty(r, DT_F32, SHAPE(256, 4096));
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 4194304);
    cr_assert_eq(test_stat(r, "requested_bytes.all.current"), 4194304);
    tensor *s = tensor_empty(r, DT_F32, SCALAR);
    cr_assert_eq(tensor_numel(s), 1);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 4194304 + 512, "a 0-dim float takes 512 bytes");
    tensor *h = tensor_empty(r, DT_BF16, SHAPE(3, 5));
    cr_assert_eq(tensor_nbytes(h), 30);
    cr_assert_eq(test_stat(r, "requested_bytes.all.current"), 4194304 + 4 + 30);
    tensor *z = tensor_empty(r, DT_F32, SHAPE(0, 7));
    cr_assert_eq(z->st->ptr, 0, "allocate(0) is a null pointer");
    cr_assert_eq(test_stat(r, "allocation.all.current"), 3, "and touches no stat");
    tensor_release(a);
    cr_assert_eq(test_stat(r, "allocated_bytes.all.current"), 1024);
    cr_assert_eq(test_stat(r, "reserved_bytes.all.current"), 20971520 + 2097152, "freed blocks stay cached");
    tensor_release(s);
    tensor_release(h);
    tensor_release(z);
    close_rt(r);
}

Test(tensor, views_share_storage_and_version)
{
    rt *r = open_rt();
    tensor *a = tensor_zeros(r, DT_F32, SHAPE(8, 4));
    tensor *rows = op_narrow(a, 2, 3), *t = op_t(a), *v = op_view(a, SHAPE(32));
    cr_assert_eq(test_stat(r, "allocation.all.current"), 1, "views allocate nothing");
    cr_assert_eq(rows->st, a->st);
    cr_assert_eq(rows->offset, 2 * 4 * 4);
    cr_assert(t->transposed && t->shape[0] == 4 && t->shape[1] == 8);
    tensor *one = tensor_full(r, DT_F32, SHAPE(3, 4), 1.0);
    RT_NO_GRAD(r) { op_add_(rows, one, 1.0); }
    cr_assert_eq(a->st->version, 1, "an in-place op on a view bumps the shared counter");
    if (r->computes) {
        float h[32];
        cr_assert_eq(tensor_to_host(a, h), OOM_OK);
        for (int i = 0; i < 32; i++)
            cr_assert_float_eq(h[i], (i >= 8 && i < 20) ? 1.0f : 0.0f, 0, "element %d", i);
    }
    tensor_release(a); /* the views keep the storage */
    cr_assert_eq(test_stat(r, "allocation.all.current"), 2);
    tensor_release(rows);
    tensor_release(t);
    tensor_release(v);
    tensor_release(one);
    close_rt(r);
}

Test(tensor, host_round_trip_item_and_dtypes)
{
    rt *r = open_rt();
    if (!r->computes) {
        rt_close(r);
        return;
    }
    float v[6] = {1.5f, -2.0f, 3.25f, 0.0f, 65504.0f, -1e-3f};
    tensor *a = tensor_from_host(r, DT_F32, SHAPE(2, 3), v);
    float back[6];
    cr_assert_eq(tensor_to_host(a, back), OOM_OK);
    cr_assert_arr_eq(back, v, sizeof v);
    tensor *b;
    RT_NO_GRAD(r) { b = op_to(a, DT_BF16); }
    uint16_t hb[6];
    cr_assert_eq(tensor_to_host(b, hb), OOM_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(hb[i], f32_to_bf16(v[i]), "bf16 element %d", i);
    tensor *s = tensor_full(r, DT_F32, SCALAR, 2.5);
    cr_assert_float_eq(tensor_item(s), 2.5, 0);
    cr_assert(isnan(tensor_item(a)));
    cr_assert_eq(rt_status(r), OOM_EINVAL, "item() of 6 elements");
    cr_assert_str_eq(rt_message(r), "a Tensor with 6 elements cannot be converted to Scalar (shape [2, 3])");
    rt_clear(r);
    tensor *i = tensor_randint(r, SHAPE(1000), 3, 7);
    int64_t iv[1000];
    cr_assert_eq(tensor_to_host(i, iv), OOM_OK);
    for (int k = 0; k < 1000; k++)
        cr_assert(iv[k] >= 3 && iv[k] < 7, "randint element %d = %lld", k, (long long)iv[k]);
    tensor *ts[] = {a, b, s, i};
    for (int k = 0; k < 4; k++)
        tensor_release(ts[k]);
    close_rt(r);
}

Test(tensor, random_tensors_are_deterministic_per_seed)
{
    float x[2][64];
    for (int k = 0; k < 2; k++) {
        rt *r = open_rt();
        if (!r->computes) {
            rt_close(r);
            return;
        }
        tensor *skip = tensor_randn(r, DT_F32, SHAPE(5), 0.0, 1.0); /* the first draw */
        tensor *t = tensor_randn(r, DT_F32, SHAPE(64), 0.0, 1.0);
        cr_assert_eq(tensor_to_host(t, x[k]), OOM_OK);
        tensor_release(skip);
        tensor_release(t);
        close_rt(r);
    }
    cr_assert_arr_eq(x[0], x[1], sizeof x[0], "same seed, same draws");
    double mean = 0;
    for (int i = 0; i < 64; i++)
        mean += x[0][i] / 64.0;
    cr_assert(fabs(mean) < 0.5, "randn mean %f", mean);
}

Test(tensor, dry_run_accounts_the_same_bytes_without_values)
{
    int64_t figures[2][3];
    for (int dry = 0; dry < 2; dry++) {
        rt_options o = {.backend = DEVICE_SIM, .dry_run = dry == 1};
        rt *r = NULL;
        cr_assert_eq(rt_open(&o, &r), OOM_OK);
        cr_assert_eq(r->computes, dry == 0);
        tensor *a = tensor_randn(r, DT_F32, SHAPE(300, 700), 0.0, 1.0);
        tensor *b = op_relu(a);
        tensor *at = op_t(a);
        tensor *c = op_mm(b, at);
        cr_assert_not_null(c, "%s", rt_message(r));
        figures[dry][0] = test_stat(r, "allocated_bytes.all.current");
        figures[dry][1] = test_stat(r, "reserved_bytes.all.current");
        figures[dry][2] = test_stat(r, "num_device_alloc");
        if (dry) {
            cr_assert_null(tensor_data(a), "a dry run keeps no values");
            tensor *s = op_sum(c);
            cr_assert(isnan(tensor_item(s)));
            tensor_release(s);
        }
        tensor *ts[] = {a, b, at, c};
        for (int k = 0; k < 4; k++)
            tensor_release(ts[k]);
        cr_assert_eq(r->live_tensors, 0);
        rt_close(r);
    }
    cr_assert_arr_eq(figures[0], figures[1], sizeof figures[0]);
}

Test(tensor, bad_shapes_are_errors_not_crashes)
{
    rt *r = open_rt();
    cr_assert_null(tensor_empty(r, DT_F32, SHAPE(2, -1)));
    cr_assert_str_eq(rt_message(r), "Trying to create tensor with negative dimension -1");
    rt_clear(r);
    tensor *a = tensor_zeros(r, DT_F32, SHAPE(2, 3)), *b = tensor_zeros(r, DT_F32, SHAPE(4, 5));
    cr_assert_null(op_mm(a, b));
    cr_assert_str_eq(rt_message(r), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
    cr_assert_null(op_relu(a), "ops after a failure return NULL until the error is cleared");
    rt_clear(r);
    tensor_release(a);
    tensor_release(b);
    close_rt(r);
}

/* On sim, host memory that runs out under a segment (here: a limited address space) is an error that names what
 * failed, with or without expandable segments: not a CUDA OOM, and the runtime goes on once it is cleared. */
Test(tensor, sim_out_of_host_memory_is_an_error_not_an_oom, .disabled = UNDER_ASAN)
{
    static const char *const confs[] = {"", "expandable_segments:True"};
    static const char *const want[] = {
        "allocation of 1073741824 bytes failed: sim: cannot back a 1073741824-byte segment with host memory "
        "(mmap: Cannot allocate memory)",
        /* the range an expandable segment reserves: 1 1/8 of the H100 that sim models, in 20 MiB pages (4561) */
        "allocation of 1073741824 bytes failed: sim: cannot back a 95651102720-byte address reservation with host "
        "memory (mmap: Cannot allocate memory)"};
    for (int i = 0; i < 2; i++) {
        alloc_conf c;
        alloc_conf_default(&c);
        char err[256];
        cr_assert_eq(alloc_conf_parse(&c, confs[i], err, sizeof err), OOM_OK);
        rt_options o = {.backend = DEVICE_SIM, .budget_bytes = 8 * GiB, .conf = &c, .seed = 1};
        rt *r = NULL;
        cr_assert_eq(rt_open(&o, &r), OOM_OK);
        struct rlimit old;
        cr_assert(test_limit_address_space(256 * MiB, &old), "cannot limit the address space");
        tensor *t = tensor_empty(r, DT_F32, SHAPE(256 * 1024 * 1024));
        cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);
        cr_assert_null(t);
        cr_assert_eq(rt_status(r), OOM_ENOMEM_HOST, "[%s] %s: %s", confs[i], oom_status_str(rt_status(r)),
                     rt_message(r));
        cr_assert_str_eq(rt_message(r), want[i], "[%s] %s", confs[i], rt_message(r));
        cr_assert_eq(test_stat(r, "num_ooms"), 0, "[%s] counted as an OOM", confs[i]);
        cr_assert_eq(test_stat(r, "reserved_bytes.all.current"), 0);
        rt_clear(r);
        t = tensor_empty(r, DT_F32, SHAPE(256 * 1024 * 1024));
        cr_assert_not_null(t, "[%s] %s", confs[i], rt_message(r));
        tensor_release(t);
        close_rt(r);
    }
}
