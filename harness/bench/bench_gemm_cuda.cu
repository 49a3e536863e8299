/* bench_gemm_cuda.cu - the GPU part of `oomlab bench gemm`: k_gemm_cuda against cuBLAS, same run, same buffers.
 *
 * cuBLAS is loaded at run time (dlopen), never linked: $OOMLAB_CUBLAS, then libcublas.so.13 / libcublas.so on
 * the loader's path, $CUDA_HOME/lib64, /usr/local/cuda/lib64, and the nvidia-cublas Python wheels. Its math mode
 * is CUBLAS_DEFAULT_MATH and NVIDIA_TF32_OVERRIDE=0 is set before it loads, so SGEMM runs in plain FP32 (no TF32)
 * and the f16/bf16 reference is cublasGemmEx with CUBLAS_COMPUTE_32F. Row-major C = op(A) op(B) is the
 * column-major C^T = op(B)^T op(A)^T, so cuBLAS gets (B, A) and (n, m).
 *
 * Per shape: operands filled on the device with uniform values in [-1, 1) (the kernels.h counter hash), two
 * warm-up calls, then 15 timed calls each bracketed by CUDA events on the default stream; the median gives
 * TFLOP/s = 2mnk / t. Ours and cuBLAS's results are compared once (relative Frobenius error). The bench's own
 * buffers come from cudaMalloc: it is not a scenario, and nothing here goes through the caching allocator.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "kernels.h"

namespace {

constexpr int WARMUP = 2;
constexpr int TIMED = 15;

/* The C entry point cublasGemmEx (C++ also sees an inline overload taking a cudaDataType compute type). */
using gemm_ex_fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void *, const void *, cudaDataType, int, const void *, cudaDataType, int,
                                      const void *, void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

/* The cuBLAS entry points the bench uses, typed from cublas_v2.h. */
struct cublas_api {
    void *lib = nullptr;
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetMathMode) set_math_mode = nullptr;
    decltype(&cublasSgemm_v2) sgemm = nullptr;
    gemm_ex_fn gemm_ex = nullptr;
    cublasHandle_t handle = nullptr;
};

bool cublas_bind(cublas_api *api, void *lib)
{
    api->lib = lib;
    api->create = reinterpret_cast<decltype(api->create)>(dlsym(lib, "cublasCreate_v2"));
    api->destroy = reinterpret_cast<decltype(api->destroy)>(dlsym(lib, "cublasDestroy_v2"));
    api->set_math_mode = reinterpret_cast<decltype(api->set_math_mode)>(dlsym(lib, "cublasSetMathMode"));
    api->sgemm = reinterpret_cast<decltype(api->sgemm)>(dlsym(lib, "cublasSgemm_v2"));
    api->gemm_ex = reinterpret_cast<decltype(api->gemm_ex)>(dlsym(lib, "cublasGemmEx"));
    return api->create && api->destroy && api->set_math_mode && api->sgemm && api->gemm_ex;
}

/* Load cuBLAS and make a handle; false (api untouched) when none can be had. info: the file loaded. */
bool cublas_load(cublas_api *api, char *info, size_t info_len)
{
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1); /* read when cuBLAS loads: no TF32 anywhere */
    std::vector<std::string> tries;
    if (const char *env = getenv("OOMLAB_CUBLAS"))
        tries.push_back(env);
    tries.push_back("libcublas.so.13");
    tries.push_back("libcublas.so");
    if (const char *home = getenv("CUDA_HOME"))
        tries.push_back(std::string(home) + "/lib64/libcublas.so.13");
    tries.push_back("/usr/local/cuda/lib64/libcublas.so.13");
    static const char *const wheels[] = {
        "/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas.so.13",
        "/usr/local/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
        "/usr/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas.so.13",
        "/opt/conda/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
        "/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib/libcublas.so.*",
        "/usr/local/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.*",
        "/usr/lib/python3*/dist-packages/nvidia/cublas/lib/libcublas.so.*",
        "/opt/conda/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.*",
    };
    for (const char *pattern : wheels) {
        glob_t g;
        if (glob(pattern, 0, nullptr, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++)
                tries.push_back(g.gl_pathv[i]);
        globfree(&g);
    }
    for (const std::string &path : tries) {
        void *lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            continue;
        cublas_api got;
        if (cublas_bind(&got, lib) && got.create(&got.handle) == CUBLAS_STATUS_SUCCESS) {
            if (got.set_math_mode(got.handle, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS) {
                *api = got;
                snprintf(info, info_len, "%s, CUBLAS_DEFAULT_MATH, TF32 off", path.c_str());
                return true;
            }
            got.destroy(got.handle);
        }
        dlclose(lib);
    }
    snprintf(info, info_len, "cuBLAS not found");
    return false;
}

void cublas_unload(cublas_api *api)
{
    if (api->handle)
        api->destroy(api->handle);
    if (api->lib)
        dlclose(api->lib);
    *api = cublas_api();
}

/* kernels.h's random stream on the device: x[i] uniform in [-1, 1) from oom_rng_hash(seed, i). */
__device__ uint64_t rng_hash(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

template <typename T> __device__ T from_float(float v);
template <> __device__ float from_float<float>(float v) { return v; }
template <> __device__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T> __global__ void fill_uniform(T *x, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = from_float<T>(-1.0f + 2.0f * (float)(rng_hash(seed, i) >> 40) * 0x1p-24f);
}

void fill(dtype dt, void *x, size_t n, uint64_t seed)
{
    if (dt == DT_F32)
        fill_uniform<<<1024, 256>>>(static_cast<float *>(x), n, seed);
    else if (dt == DT_F16)
        fill_uniform<<<1024, 256>>>(static_cast<__half *>(x), n, seed);
    else
        fill_uniform<<<1024, 256>>>(static_cast<__nv_bfloat16 *>(x), n, seed);
}

cudaDataType cuda_type(dtype dt) { return dt == DT_F32 ? CUDA_R_32F : dt == DT_F16 ? CUDA_R_16F : CUDA_R_16BF; }

/* Median seconds per call of f over TIMED calls after WARMUP; negative when a call fails. */
template <typename F> double time_calls(F f)
{
    for (int i = 0; i < WARMUP; i++)
        if (!f())
            return -1;
    cudaEvent_t ev[TIMED + 1];
    for (int i = 0; i <= TIMED; i++)
        cudaEventCreate(&ev[i]);
    bool ok = true;
    cudaEventRecord(ev[0]);
    for (int i = 0; i < TIMED && ok; i++) {
        ok = f();
        cudaEventRecord(ev[i + 1]);
    }
    double t = -1;
    if (ok && cudaEventSynchronize(ev[TIMED]) == cudaSuccess) {
        std::vector<double> s(TIMED);
        for (int i = 0; i < TIMED; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
            s[i] = ms * 1e-3;
        }
        std::sort(s.begin(), s.end());
        t = s[TIMED / 2];
    }
    for (int i = 0; i <= TIMED; i++)
        cudaEventDestroy(ev[i]);
    return t;
}

/* Host copy of an m x n device result as f32. */
bool fetch(dtype dt, const void *d, size_t n, std::vector<float> *out)
{
    out->resize(n);
    if (dt == DT_F32)
        return cudaMemcpy(out->data(), d, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    std::vector<uint16_t> h(n);
    if (cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
        return false;
    for (size_t i = 0; i < n; i++)
        (*out)[i] = dt == DT_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
    return true;
}

struct gpu_shape {
    dtype dt;
    bool ta, tb;
    long m, n, k;
};

/* One row: buffers, fill, time ours and cuBLAS's, compare. */
oom_status run_shape(const gpu_shape &s, cublas_api *cublas, bench_gemm_row *row)
{
    *row = bench_gemm_row{s.dt, s.ta, s.tb, s.m, s.n, s.k, -1, -1, -1, "", -1};
    const size_t es = dtype_size(s.dt);
    const size_t na = (size_t)s.m * s.k, nb = (size_t)s.k * s.n, nc = (size_t)s.m * s.n;
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
    void *a = nullptr, *b = nullptr, *c = nullptr, *r = nullptr;
    oom_status st = OOM_OK;
    if (cudaMalloc(&a, na * es) != cudaSuccess || cudaMalloc(&b, nb * es) != cudaSuccess ||
        cudaMalloc(&c, nc * es) != cudaSuccess || cudaMalloc(&r, nc * es) != cudaSuccess) {
        (void)cudaGetLastError();
        st = OOM_ENOMEM_DEVICE;
    } else {
        fill(s.dt, a, na, 11);
        fill(s.dt, b, nb, 12);
        fill(s.dt, c, nc, 13); /* beta = 0: never read, but no zeros anywhere */
        fill(s.dt, r, nc, 14);
        const double fl = 2.0 * (double)s.m * (double)s.n * (double)s.k;
        snprintf(row->kernel, sizeof row->kernel, "%s", k_gemm_cuda_kernel(s.dt, s.m, s.n, s.k, a, lda, b, ldb));
        auto run_ours = [&] {
            return k_gemm_cuda(s.dt, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc) == OOM_OK;
        };
        double t = -1;
        if (strncmp(row->kernel, "wgmma", 5) == 0) { /* the portable path first, so C ends with the Hopper path's */
            gemm_hopper_mode was = k_gemm_cuda_hopper(GEMM_HOPPER_OFF);
            t = time_calls(run_ours);
            k_gemm_cuda_hopper(was);
            row->portable_tflops = t > 0 ? fl / t * 1e-12 : -1;
        }
        t = time_calls(run_ours);
        row->ours_tflops = t > 0 ? fl / t * 1e-12 : -1;
        if (cublas->handle) {
            const float one = 1.0f, zero = 0.0f;
            const cublasOperation_t opa = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
            t = time_calls([&] {
                if (s.dt == DT_F32)
                    return cublas->sgemm(cublas->handle, opb, opa, (int)s.n, (int)s.m, (int)s.k, &one,
                                         static_cast<const float *>(b), (int)ldb, static_cast<const float *>(a),
                                         (int)lda, &zero, static_cast<float *>(r), (int)ldc) == CUBLAS_STATUS_SUCCESS;
                return cublas->gemm_ex(cublas->handle, opb, opa, (int)s.n, (int)s.m, (int)s.k, &one, b,
                                       cuda_type(s.dt), (int)ldb, a, cuda_type(s.dt), (int)lda, &zero, r,
                                       cuda_type(s.dt), (int)ldc, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
            });
            row->cublas_tflops = t > 0 ? fl / t * 1e-12 : -1;
        }
        std::vector<float> ours, theirs;
        if (cudaDeviceSynchronize() != cudaSuccess) {
            st = OOM_ECUDA;
            OOM_ERROR(OOM_ECUDA, "bench gemm: %s", cudaGetErrorName(cudaGetLastError()));
        } else if (row->ours_tflops > 0 && row->cublas_tflops > 0 && fetch(s.dt, c, nc, &ours) &&
                   fetch(s.dt, r, nc, &theirs)) {
            double num = 0, den = 0;
            for (size_t i = 0; i < nc; i++) {
                double d = (double)ours[i] - theirs[i];
                num += d * d;
                den += (double)theirs[i] * theirs[i];
            }
            row->rel_err = den > 0 ? sqrt(num / den) : sqrt(num);
        }
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(r);
    return st;
}

} // namespace

extern "C" oom_status bench_gemm_gpu(bench_gemm_row *rows, int max_rows, int *n_rows, char *cublas_info,
                                     size_t info_len)
{
    static const gpu_shape shapes[] = {
        {DT_F32, false, true, 8192, 4096, 4096}, /* the scenarios' forward layout (x W^T) */
        {DT_F32, false, true, 4096, 4096, 4096},
        {DT_F32, false, true, 256, 4096, 4096},
        {DT_F32, false, false, 256, 4096, 4096}, /* backward: dX = g W */
        {DT_F32, true, false, 4096, 4096, 256},  /* backward: dW = g^T x */
        {DT_F16, false, true, 8192, 4096, 4096},
        {DT_BF16, false, true, 8192, 4096, 4096},
        {DT_F16, false, true, 4096, 4096, 4096},
        {DT_F16, false, true, 256, 4096, 4096},
        {DT_F16, false, false, 256, 4096, 4096},
        {DT_F16, true, false, 4096, 4096, 256},
        {DT_F16, false, false, 8192, 4096, 4096}, /* backward: dX = g W */
        {DT_F16, true, false, 4096, 4096, 8192},  /* backward: dW = g^T x */
        {DT_F16, true, true, 4096, 4096, 4096},
        {DT_BF16, false, false, 8192, 4096, 4096},
    };
    *n_rows = 0;
    cublas_api cublas;
    cublas_load(&cublas, cublas_info, info_len);
    oom_status st = OOM_OK;
    for (const gpu_shape &s : shapes) {
        if (*n_rows >= max_rows)
            break;
        st = run_shape(s, &cublas, &rows[*n_rows]);
        if (st == OOM_ECUDA) /* a sticky error: nothing after it would mean anything */
            break;
        (*n_rows)++;
    }
    cublas_unload(&cublas);
    return st == OOM_ENOMEM_DEVICE ? OOM_OK : st; /* a shape that does not fit is a row of -1s */
}
