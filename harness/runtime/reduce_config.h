/* reduce_config.h - the global-memory staging that ATen's CUDA reduction kernel takes from the caching allocator.
 *
 * PyTorch's sum, mean and friends on CUDA run gpu_reduce_kernel (aten/src/ATen/native/cuda/Reduce.cuh). Its
 * launch configuration comes from setReduceConfig(iter), which looks at the reduction's shape and strides, the
 * accumulator and element types, output vectorisation and the device (SM count, threads per SM, warp size).
 * When the config splits each output's inputs across several thread blocks (should_global_reduce()), the
 * kernel needs a staging buffer of global_memory_size() bytes and semaphore_size() bytes of block counters; it
 * takes both from the caching allocator for the duration of the launch (buffer first, then the semaphores; the
 * semaphores are freed first, C++ destroying the two DataPtrs in reverse order). On an H100 a bias gradient
 * grad.sum(0) of a [4096, 4096] f32 gradient stages 134217728 bytes and 128 bytes of semaphores: a 128 MiB
 * allocation in the middle of every Linear backward at that batch.
 *
 * aten_reduce_config computes the config (a transcription of setReduceConfig for the two layouts oomlab's
 * kernels reduce), and reduce_staging_begin/end allocate and free what PyTorch allocates around the launch. The
 * kernels themselves need no staging; only the allocator sees it.
 */
#ifndef OOMLAB_REDUCE_CONFIG_H
#define OOMLAB_REDUCE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/dtype.h"
#include "runtime/runtime.h"

OOM_BEGIN_DECLS

struct tensor;

/* The device properties setReduceConfig reads (cudaDeviceProp). */
typedef struct aten_device_props {
    int sm_count;           /* multiProcessorCount */
    int max_threads_per_sm; /* maxThreadsPerMultiProcessor */
    int warp_size;          /* warpSize */
} aten_device_props;

/* An H100 80GB HBM3 (SXM): 132 SMs, 2048 threads per SM, warp 32: what sim models. */
#define ATEN_H100_PROPS ((aten_device_props){132, 2048, 32})

/* The reduction as TensorIterator sees it once it has coalesced a contiguous operand:
 *   ATEN_REDUCE_ALL   every element of n into one output (sum(), mean());
 *   ATEN_REDUCE_ROWS  dim 0 of a row-major [m, n] into n outputs (sum(0), sum_to of a bias gradient). */
typedef enum aten_reduce_kind { ATEN_REDUCE_ALL, ATEN_REDUCE_ROWS } aten_reduce_kind;

/* What setReduceConfig decides, and the two sizes gpu_reduce_kernel allocates. */
typedef struct aten_reduce_config {
    int element_size_bytes; /* sizeof(arg_t), the accumulator */
    int64_t num_inputs, num_outputs;
    int step_input, step_output, ctas_per_output;
    int input_mult[3], output_mult[2];
    int block_width, block_height, num_threads;
    bool vectorize_input;
    int output_vec_size;
    int64_t global_memory_size; /* 0 unless should_global_reduce */
    int64_t semaphore_size;     /* 0 unless should_global_reduce */
} aten_reduce_config;

/* The inputs of setReduceConfig<arg_t, scalar_t, vt0 = 4, input_vec_size>:
 *   m, n          the shape: ATEN_REDUCE_ROWS reduces [m, n] over m; ATEN_REDUCE_ALL reduces m * n elements
 *   arg_size      sizeof(arg_t): 4 for f32, f16 and bf16 (they accumulate in float)
 *   scalar_size   sizeof(scalar_t), the input element
 *   input_vec_size the kernel's template argument: 4 (vt0), except 8 for sum of a 16-bit type
 *   in_addr       the input's device address (get_output_vec_size reads its alignment)
 * m == 0 or n == 0: nothing is launched, the config is all zero. */
void aten_reduce_config_compute(const aten_device_props *p, aten_reduce_kind kind, int64_t m, int64_t n,
                                int arg_size, int scalar_size, int input_vec_size, uint64_t in_addr,
                                aten_reduce_config *out);

/* The device properties of the rt's device: ATEN_H100_PROPS on sim, the GPU's on cuda. */
aten_device_props aten_device_props_of(const rt *r);

/* The staging of one reduction, held between begin and end. */
typedef struct reduce_staging {
    struct tensor *buffer, *semaphores; /* NULL when the reduction does not global-reduce */
} reduce_staging;

/* Which PyTorch op runs the reduction: the sum kernel vectorises 16-bit inputs by 8, mean's by 4. */
typedef enum aten_reduce_op { ATEN_OP_SUM, ATEN_OP_MEAN } aten_reduce_op;

/* Allocate what gpu_reduce_kernel allocates before launching a reduction of `in` (contiguous, dtype dt,
 * reduced as kind over [m, n]): the buffer, then the semaphores. false: an allocation failed, the failure is
 * recorded in the rt and nothing is held. */
bool reduce_staging_begin(rt *r, aten_reduce_op op, aten_reduce_kind kind, const struct tensor *in, int64_t m,
                          int64_t n, reduce_staging *s);
/* Free it after the launch, semaphores first. */
void reduce_staging_end(reduce_staging *s);

OOM_END_DECLS

#endif
