/* bench.h - the benchmarks behind `oomlab bench` (cli/bench.c takes their options): alloc, gemm, step, replay.
 *
 * alloc: the caching allocator's cost per malloc+free pair on a cache hit. */
#ifndef OOMLAB_BENCH_H
#define OOMLAB_BENCH_H

#include <stdbool.h>
#include <stdio.h>

#include "core/compat.h"
#include "device/device.h"
#include "core/dtype.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* The benchmarks' clocks: wall (CLOCK_MONOTONIC, ns) and the process's CPU time (CLOCK_PROCESS_CPUTIME_ID, ns,
 * Google Benchmark's cpu_time); the median of n figures (v is sorted in place). */
double bench_now_ns(void);
double bench_cpu_ns(void);
double bench_median(double *v, int n);
/* Print a benchmark's --json document j to out, then free it (a struct here: the .cu files see no cJSON.h). */
struct cJSON;
void bench_print_json(struct cJSON *j, FILE *out);

#define BENCH_RUNS 7        /* timed runs per cell by default */
#define BENCH_MAX_RUNS 1000 /* the most --runs takes */

typedef struct bench_options {
    device_kind kind; /* backend under the allocator; sim runs dry (accounting only) */
    long iters;       /* malloc+free pairs per cell; 0 = a default that takes well under a second */
    int runs;         /* timed runs per cell (the median and p90 are over them); 0 = 7 */
    uint64_t seed;    /* the mixed workload's seed; 0 = 1 */
    const char *workload_out; /* write the mixed workload there (text), or NULL */
    bool json;
} bench_options;

/* One operation of the mixed workload: malloc `bytes` into slot, or (bytes == 0) free slot. */
typedef struct bench_op {
    uint32_t slot;
    size_t bytes;
} bench_op;

/* The mixed workload of `bench alloc` for a seed: 4096 mallocs of 512 B to 64 MiB (70% at most 1 MiB), each
 * freed, up to 128 outstanding, every slot free at the end; *ops is malloc'ed. The same seed gives the same
 * sequence on every machine (integer arithmetic only). */
oom_status bench_workload_make(uint64_t seed, bench_op **ops, size_t *n);

/* --json (every benchmark): Google Benchmark's JSON (results/export.h's gbench_context and gbench_add): "context" with
 * oomlab_backend, oomlab_device, oomlab_debug_level and oomlab_benchmark, and one entry of "benchmarks" per figure
 * (real_time and, where the host's CPU does the work, cpu_time; the rest as user counters). */

/* Time cachealloc_malloc+cachealloc_free pairs for 1 KiB, 1 MiB, 20 MiB and 256 MiB with 1 and 64 allocations
 * outstanding and for the mixed workload (median and p90 of the runs), and on cuda also cudaMalloc/cudaFree and
 * cudaMallocAsync/cudaFreeAsync for the four sizes. Writes a table (or JSON) to out; the workload to
 * opt->workload_out first when set (OOM_EINVAL, its line printed, when it cannot be written). OOM_ENODEV when
 * cuda is asked for and absent. */
oom_status bench_alloc(const bench_options *opt, FILE *out);

/* cuda only (bench_cuda.cu): mean ns per cudaMalloc+cudaFree pair (async=false), or per
 * cudaMallocAsync+cudaFreeAsync pair on the device's default pool with its release threshold at the maximum
 * (async=true). `outstanding` allocations are made before they are freed, `pairs` pairs in all, after one
 * warm-up round. OOM_EUNSUPPORTED on sim or when the cuda backend is not built in. */
oom_status device_time_raw_pairs(device *dev, size_t bytes, int outstanding, long pairs, bool async, double *ns);

typedef struct bench_gemm_options {
    device_kind kind; /* cuda: oomlab's GEMM against cuBLAS; sim: the CPU reference only */
    bool json;
} bench_gemm_options;

/* `oomlab bench gemm`: TFLOP/s of k_gemm_cuda against cuBLAS SGEMM (TF32 off; cuBLAS is loaded with dlopen,
 * never linked) for the scenario shapes (8192x4096x4096, 4096^3, 256x4096x4096, and the NN/TN layouts of
 * Linear's backward), f16/bf16 tensor-core GEMM against cublasGemmEx, and ms per call of k_gemm_ref at the CI
 * scale (batch 64, width 256). Each figure: median of timed repetitions after a warm-up, CUDA events. Writes a
 * table (or JSON) to out. OOM_ENODEV when cuda is asked for and absent. Implemented in bench_gemm.c (CPU part)
 * and bench_gemm_cuda.cu. */
oom_status bench_gemm(const bench_gemm_options *opt, FILE *out);

/* One GPU figure of `bench gemm`: C[m x n] = op(A) op(B), layout "NT" = A as is, B transposed, and so on. */
typedef struct bench_gemm_row {
    dtype dt;
    bool ta, tb;
    long m, n, k;
    double ours_tflops;   /* k_gemm_cuda; < 0: it failed */
    double cublas_tflops; /* < 0: cuBLAS absent or failed */
    double rel_err;       /* ||ours - cuBLAS|| / ||cuBLAS|| (Frobenius), < 0: not compared */
    char kernel[16];      /* the kernel k_gemm_cuda ran (k_gemm_cuda_kernel): "ffma", "wgmma 128x256", ... */
    double portable_tflops; /* where that is a wgmma one: the mma.sync path on the same operands; else < 0 */
} bench_gemm_row;

/* cuda only (bench_gemm_cuda.cu): the GPU rows of `bench gemm`, at most max_rows into rows (*n_rows set), and
 * which cuBLAS was loaded ("cuBLAS not found" when none) into cublas_info. The device must be open.
 * OOM_EUNSUPPORTED when the cuda backend is not built in; OOM_ENOMEM_DEVICE when the buffers do not fit. */
oom_status bench_gemm_gpu(bench_gemm_row *rows, int max_rows, int *n_rows, char *cublas_info, size_t info_len);

typedef struct bench_kernels_options {
    device_kind kind;
    int64_t elements; /* per tensor; 0: 64 Mi on cuda, 4 Mi on sim */
    bool json;
} bench_kernels_options;

/* `oomlab bench kernels` (bench_kernels.c): ms per call and GB/s of the memory-bound kernels on float32 tensors,
 * on cuda beside the device's theoretical bandwidth. OOM_ENODEV when cuda is asked for and absent; a device
 * allocation or kernel failure is returned after the table says where it stopped. */
oom_status bench_kernels(const bench_kernels_options *opt, FILE *out);

/* cuda only (bench_cuda.cu): the current device's theoretical memory bandwidth in GB/s (memory clock x bus width
 * x 2, as the driver reports them) and how it was computed into how; OOM_EUNSUPPORTED without the cuda backend. */
oom_status bench_device_bandwidth(double *gbps, char *how, size_t how_len);

typedef struct bench_step_options {
    device_kind kind; /* sim: the CPU references; cuda: the CUDA kernels */
    int64_t width, batch; /* 0: the CI scale, 256 and 64 */
    bool json;
} bench_step_options;

/* `oomlab bench step`: ms per training step and per no_grad forward of MLP(width, depth 4) at batch; median of
 * 21 after 3 warm-ups (bench_step.c). OOM_ENODEV when cuda is asked for and absent. */
oom_status bench_step(const bench_step_options *opt, FILE *out);

typedef struct bench_replay_options {
    size_t events; /* trace entries to generate (at least) */
    uint64_t seed; /* the workload's seed */
    bool json;
} bench_replay_options;

/* `oomlab bench replay` (bench_replay.c): a seeded trace in a temporary file; trace_load's time, rate and peak
 * RSS growth, replay_loaded's rate fast and as a check, advise_run's time on it. */
oom_status bench_replay(const bench_replay_options *opt, FILE *out);

OOM_END_DECLS

#endif
