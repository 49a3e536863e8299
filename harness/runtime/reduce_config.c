/* reduce_config.c - ATen's ReduceConfig and the staging gpu_reduce_kernel allocates. See reduce_config.h.
 *
 * Transcribed from PyTorch 2.11's aten/src/ATen/native/cuda/Reduce.cuh: ReduceConfig (set_block_dimension,
 * split_input, split_output, grid, values_per_thread, global_memory_size, semaphore_size), get_output_vec_size
 * and setReduceConfig, for a contiguous input whose TensorIterator has one reduced dimension after coalescing
 * (the reduced dimension first, as TensorIterator orders a reduction's dimensions). */
#include "runtime/reduce_config.h"

#include <string.h>

#include "runtime/tensor.h"

enum { MAX_NUM_THREADS = 512, /* mnt_wrapper<T>: 256 only for complex<double> */
       MIN_VALUES_PER_THREAD = 16, MAX_VALUES_PER_THREAD = 256 };

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* floor to a power of two, at least 1 */
static int last_pow2(int64_t n)
{
    int64_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return (int)p;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int64_t lmax(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t lmin(int64_t a, int64_t b) { return a < b ? a : b; }

static void set_block_dimension(aten_reduce_config *c, int warp, int64_t dim0, int64_t dim1)
{
    const int max_num_threads = MAX_NUM_THREADS / c->output_vec_size;
    int dim0_pow2 = dim0 < max_num_threads ? last_pow2(dim0) : max_num_threads;
    int dim1_pow2 = dim1 < max_num_threads ? last_pow2(dim1) : max_num_threads;
    c->block_width = imin(dim0_pow2, warp);
    c->block_height = imin(dim1_pow2, max_num_threads / c->block_width);
    c->block_width = imin(dim0_pow2, max_num_threads / c->block_height);
    c->num_threads = c->block_width * c->block_height;
}

static int split_input(aten_reduce_config *c, int parallelism)
{
    int step = c->step_input;
    c->step_input *= parallelism;
    return step;
}

static int split_output(aten_reduce_config *c, int parallelism)
{
    int step = c->step_output;
    c->step_output *= parallelism;
    return step;
}

static int64_t grid_x(const aten_reduce_config *c) { return div_up(c->num_outputs / c->output_vec_size, c->step_output); }
static int64_t values_per_thread(const aten_reduce_config *c) { return div_up(c->num_inputs, c->step_input); }

/* get_output_vec_size: 4, halved until it divides the input's address (in elements), the output dimension's
 * size and the input's other strides (here the row stride, n). */
static int output_vec_size(uint64_t in_addr, int scalar_size, int64_t n)
{
    int v = 4;
    const uint64_t vals[2] = {in_addr / (uint64_t)scalar_size, (uint64_t)n};
    for (int i = 0; i < 2; i++)
        while (vals[i] % (uint64_t)v != 0)
            v /= 2;
    return v;
}

void aten_reduce_config_compute(const aten_device_props *p, aten_reduce_kind kind, int64_t m, int64_t n,
                                int arg_size, int scalar_size, int input_vec_size, uint64_t in_addr,
                                aten_reduce_config *out)
{
    aten_reduce_config *c = out;
    memset(c, 0, sizeof *c);
    if (m <= 0 || n <= 0)
        return;
    if (kind == ATEN_REDUCE_ROWS && n == 1) /* [m, 1] coalesces to one reduced dimension */
        kind = ATEN_REDUCE_ALL;
    c->element_size_bytes = arg_size;
    c->num_outputs = kind == ATEN_REDUCE_ALL ? 1 : n;
    c->num_inputs = kind == ATEN_REDUCE_ALL ? m * n : m;
    c->step_input = c->step_output = c->ctas_per_output = 1;
    c->output_vec_size = 1;

    /* ALL: the iterator's one dimension is reduced, reduction_on_fastest_striding_dimension. ROWS: the reduced
     * dimension (stride n) comes first and is not the fastest: block.x maps the outputs. */
    const bool fastest = kind == ATEN_REDUCE_ALL;
    int64_t dim0 = fastest ? c->num_inputs : c->num_outputs;
    int64_t dim1 = fastest ? c->num_outputs : c->num_inputs;
    if (c->num_inputs * c->num_outputs == 1) /* a single element: TensorIterator has no dimension */
        dim0 = dim1 = 1;
    else if (fastest) {
        if (dim0 >= 128) { /* vectorize along input */
            c->vectorize_input = true;
            dim0 /= input_vec_size;
        }
    } else { /* vectorize along output */
        c->output_vec_size = output_vec_size(in_addr, scalar_size, n);
        dim0 /= c->output_vec_size;
    }

    set_block_dimension(c, p->warp_size, dim0, dim1);
    if (fastest)
        c->input_mult[0] = split_input(c, c->block_width);
    else
        c->output_mult[0] = split_output(c, c->block_width);

    const int warp_split_threshold = imin(c->block_height * 16, MAX_VALUES_PER_THREAD);
    if (values_per_thread(c) >= warp_split_threshold)
        c->input_mult[1] = split_input(c, c->block_height);
    else
        c->output_mult[1] = split_output(c, c->block_height);

    const int blocks_per_sm = p->max_threads_per_sm / c->num_threads;
    const int64_t target_grid_size = (int64_t)p->sm_count * blocks_per_sm;
    const int64_t grid = grid_x(c);
    if (c->input_mult[1] != 0 && values_per_thread(c) >= MAX_VALUES_PER_THREAD && grid <= target_grid_size) {
        int64_t ctas1 = div_up(target_grid_size, grid);
        int64_t ctas2 = div_up(values_per_thread(c), MIN_VALUES_PER_THREAD);
        int64_t ctas3 = div_up(values_per_thread(c), MAX_VALUES_PER_THREAD);
        c->ctas_per_output = (int)lmax(lmin(ctas1, ctas2), ctas3);
        if (c->ctas_per_output > 1)
            c->input_mult[2] = split_input(c, c->ctas_per_output);
    }

    if (c->input_mult[2] != 0) { /* should_global_reduce */
        int64_t size = (int64_t)c->element_size_bytes * c->num_outputs * c->ctas_per_output;
        if (c->input_mult[0] == 0) /* !should_block_x_reduce */
            size *= (int64_t)c->block_width * c->output_vec_size;
        c->global_memory_size = size;
        c->semaphore_size = (int64_t)sizeof(int) * grid_x(c);
    }
}

aten_device_props aten_device_props_of(const rt *r)
{
    const device *d = r->dev;
    if (d->sm_count > 0 && d->max_threads_per_sm > 0 && d->warp_size > 0) /* sim sets an H100's */
        return (aten_device_props){d->sm_count, d->max_threads_per_sm, d->warp_size};
    return ATEN_H100_PROPS;
}

static tensor *staging_bytes(rt *r, int64_t bytes)
{
    /* bytes are a multiple of 4 (sizeof(int), sizeof(arg_t)): float elements hold them exactly */
    return tensor_empty(r, DT_F32, SHAPE(bytes / 4));
}

bool reduce_staging_begin(rt *r, aten_reduce_op op, aten_reduce_kind kind, const tensor *in, int64_t m,
                          int64_t n, reduce_staging *s)
{
    s->buffer = s->semaphores = NULL;
    const int scalar = (int)dtype_size(in->dt);
    const int input_vec = (op == ATEN_OP_SUM && scalar == 2) ? 8 : 4;
    aten_device_props p = aten_device_props_of(r);
    aten_reduce_config c;
    aten_reduce_config_compute(&p, kind, m, n, 4 /* float accumulation for f32, f16, bf16 */, scalar, input_vec,
                               (uint64_t)(in->st->ptr + in->offset), &c);
    if (c.global_memory_size == 0)
        return true;
    s->buffer = staging_bytes(r, c.global_memory_size);
    s->semaphores = s->buffer ? staging_bytes(r, c.semaphore_size) : NULL;
    if (!s->semaphores) {
        reduce_staging_end(s);
        return false;
    }
    return true;
}

void reduce_staging_end(reduce_staging *s)
{
    tensor_release(s->semaphores); /* ~DataPtr in reverse order: semaphores, then the buffer */
    tensor_release(s->buffer);
    s->semaphores = s->buffer = NULL;
}
