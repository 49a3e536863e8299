/* test_gemm.c - the GEMM kernels (kernels.h: gemm).
 *
 * Suite "gemm":
 *   ref_*   k_gemm_ref against a double-precision triple loop (always run): all four layouts, odd shapes, k = 0,
 *           beta = 0 over a NaN-filled C, leading dimensions past the minimum, f32 / f16 / bf16, and exact
 *           results on small-integer inputs (every sum is exact in f32, so the only rounding is the final one).
 *   cuda_*  k_gemm_cuda against k_gemm_ref, on the GPU: only with OOMLAB_TEST_BACKEND=cuda (skipped otherwise).
 *           Each test opens the device itself: no CUDA call happens before Criterion forks.
 * Inputs are fresh random numbers: the seed comes from the test name and the clock (OOMLAB_TEST_SEED=N fixes
 * it) and is printed, and named in every failure. Every case also checks that the padding of each leading
 * dimension is untouched (C's) or never read (A's and B's padding holds NaN, which would poison the result).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "testutil.h"

#define C_PAD_VALUE 96.0f /* C's padding columns must keep it (exact in every type, outside the data range) */

typedef struct gemm_case {
    dtype dt;
    bool ta, tb;
    int64_t m, n, k;
    int64_t pad; /* every leading dimension = its minimum + pad */
    float alpha, beta;
    bool integers; /* inputs are small integers: the result is exact before its final rounding */
} gemm_case;

/* A matrix in host memory: rows x ld elements of type dt, the first cols of each row in use. */
typedef struct hmat {
    dtype dt;
    int64_t rows, cols, ld;
    void *p;
} hmat;

static uint64_t test_seed(const char *name)
{
    const char *env = getenv("OOMLAB_TEST_SEED");
    if (env && *env)
        return strtoull(env, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a of the name, mixed with the clock */
    for (const char *s = name; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return oom_rng_hash(h, (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec);
}

static float get_f(dtype dt, const void *p, int64_t i)
{
    if (dt == DT_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

static void set_f(dtype dt, void *p, int64_t i, float v)
{
    if (dt == DT_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = dt == DT_F16 ? f32_to_f16(v) : f32_to_bf16(v);
}

static size_t hmat_bytes(const hmat *x)
{
    size_t b = (size_t)(x->rows * x->ld) * dtype_size(x->dt);
    return b ? b : 16; /* never 0: device_mem_alloc refuses it */
}

/* Valid elements: uniform in [-1, 1), or integers in [-4, 4]; padding: pad_value. */
static hmat hmat_new(dtype dt, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, bool integers,
                     float pad_value)
{
    hmat x = {dt, rows, cols, ld, NULL};
    x.p = malloc(hmat_bytes(&x));
    cr_assert_not_null(x.p);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) {
            int64_t i = r * ld + c;
            uint64_t h = oom_rng_hash(seed, (uint64_t)i);
            float v = integers ? (float)((int)(h % 9) - 4) : -1.0f + 2.0f * (float)(h >> 40) * 0x1p-24f;
            set_f(dt, x.p, i, c < cols ? v : pad_value);
        }
    return x;
}

static void hmat_fill(hmat *x, float v)
{
    for (int64_t r = 0; r < x->rows; r++)
        for (int64_t c = 0; c < x->cols; c++)
            set_f(x->dt, x->p, r * x->ld + c, v);
}

static hmat hmat_copy(const hmat *x)
{
    hmat y = *x;
    y.p = malloc(hmat_bytes(x));
    cr_assert_not_null(y.p);
    memcpy(y.p, x->p, hmat_bytes(x));
    return y;
}

/* The operands of a case: A, B and C (NaN where beta == 0: it must not be read). */
typedef struct gemm_data {
    hmat a, b, c;
} gemm_data;

static gemm_data gemm_data_new(const gemm_case *g, uint64_t seed)
{
    gemm_data d;
    int64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
    int64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
    d.a = hmat_new(g->dt, ar, ac, ac + g->pad, seed, g->integers, NAN);
    d.b = hmat_new(g->dt, br, bc, bc + g->pad, seed ^ 0xb, g->integers, NAN);
    d.c = hmat_new(g->dt, g->m, g->n, g->n + g->pad, seed ^ 0xc, g->integers, C_PAD_VALUE);
    if (g->beta == 0.0f)
        hmat_fill(&d.c, NAN);
    return d;
}

static void gemm_data_free(gemm_data *d)
{
    free(d->a.p);
    free(d->b.p);
    free(d->c.p);
}

static oom_status run_ref(const gemm_case *g, const gemm_data *d, hmat *c)
{
    return k_gemm_ref(g->dt, g->ta, g->tb, g->m, g->n, g->k, g->alpha, d->a.p, d->a.ld, d->b.p, d->b.ld, g->beta,
                      c->p, c->ld);
}

/* want[i * n + j] = alpha * sum_p op(A)[i][p] op(B)[p][j] + beta * C[i][j], in double from the stored values. */
static double *naive(const gemm_case *g, const gemm_data *d)
{
    double *w = malloc(sizeof(double) * (size_t)(g->m * g->n + 1));
    cr_assert_not_null(w);
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double s = 0;
            for (int64_t p = 0; p < g->k; p++) {
                double x = get_f(g->dt, d->a.p, g->ta ? p * d->a.ld + i : i * d->a.ld + p);
                double y = get_f(g->dt, d->b.p, g->tb ? j * d->b.ld + p : p * d->b.ld + j);
                s += x * y;
            }
            double v = (double)g->alpha * s;
            if (g->beta != 0.0f)
                v += (double)g->beta * get_f(g->dt, d->c.p, i * d->c.ld + j);
            w[i * g->n + j] = v;
        }
    return w;
}

/* The magnitude each result element is computed from: |alpha| sum |a b| + |beta| |c|. Rounding errors of a dot
 * product are bounded relative to it, not to the result, which cancellation can make as small as it likes (a 1x1x1
 * case with beta 0.5 once gave 4e-6 against the result). */
static double *naive_magnitude(const gemm_case *g, const gemm_data *d)
{
    double *w = malloc(sizeof(double) * (size_t)(g->m * g->n + 1));
    cr_assert_not_null(w);
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double s = 0;
            for (int64_t p = 0; p < g->k; p++)
                s += fabs((double)get_f(g->dt, d->a.p, g->ta ? p * d->a.ld + i : i * d->a.ld + p) *
                          get_f(g->dt, d->b.p, g->tb ? j * d->b.ld + p : p * d->b.ld + j));
            double v = fabs((double)g->alpha) * s;
            if (g->beta != 0.0f)
                v += fabs((double)g->beta * get_f(g->dt, d->c.p, i * d->c.ld + j));
            w[i * g->n + j] = v;
        }
    return w;
}

/* ||got - want|| / ||mag|| (Frobenius) over the m x n result, mag from naive_magnitude; INFINITY if any element is
 * not finite; the plain norm of the error when mag is 0. */
static double rel_err(const gemm_case *g, const hmat *got, const double *want, const double *mag)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            double x = get_f(g->dt, got->p, i * got->ld + j), y = want[i * g->n + j], m = mag[i * g->n + j];
            if (!isfinite(x))
                return INFINITY;
            num += (x - y) * (x - y);
            den += m * m;
        }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* v rounded to the type, as a store would. */
static float rounded(dtype dt, float v)
{
    uint32_t cell;
    set_f(dt, &cell, 0, v);
    return get_f(dt, &cell, 0);
}

/* Integer inputs: the first element (row-major index) that is not the exact result rounded once, or -1. */
static int64_t first_inexact(const gemm_case *g, const hmat *got, const double *want)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++)
            if (get_f(g->dt, got->p, i * got->ld + j) != rounded(g->dt, (float)want[i * g->n + j]))
                return i * g->n + j;
    return -1;
}

/* C's padding columns still hold C_PAD_VALUE. */
static bool padding_intact(const hmat *c)
{
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t j = c->cols; j < c->ld; j++)
            if (get_f(c->dt, c->p, r * c->ld + j) != C_PAD_VALUE)
                return false;
    return true;
}

static const char *layout_str(const gemm_case *g)
{
    static const char *const names[4] = {"NN", "NT", "TN", "TT"};
    return names[(g->ta ? 2 : 0) + (g->tb ? 1 : 0)];
}

#define CASE_FMT "%s %s %lldx%lldx%lld pad %lld alpha %g beta %g%s (seed %#llx)"
#define CASE_ARGS(g, seed)                                                                                         \
    dtype_str((g)->dt), layout_str(g), (long long)(g)->m, (long long)(g)->n, (long long)(g)->k,                    \
        (long long)(g)->pad, (double)(g)->alpha, (double)(g)->beta, (g)->integers ? " integers" : "",              \
        (unsigned long long)(seed)

/* Check got against want: exact for integer inputs, else within tol; the padding intact. */
static void check_result(const gemm_case *g, const gemm_data *d, const hmat *got, const double *want, double tol,
                         uint64_t seed, const char *who)
{
    cr_assert(padding_intact(got), "%s wrote into C's padding: " CASE_FMT, who, CASE_ARGS(g, seed));
    if (g->integers) {
        int64_t bad = first_inexact(g, got, want);
        if (bad >= 0) {
            int64_t i = bad / g->n, j = bad % g->n;
            cr_assert_fail("%s: C[%lld][%lld] = %g, exactly %g expected: " CASE_FMT, who, (long long)i, (long long)j,
                           (double)get_f(g->dt, got->p, i * got->ld + j), want[bad], CASE_ARGS(g, seed));
        }
    } else {
        double *mag = naive_magnitude(g, d);
        double e = rel_err(g, got, want, mag);
        free(mag);
        cr_assert(e <= tol, "%s: relative error %.3g > %.1g: " CASE_FMT, who, e, tol, CASE_ARGS(g, seed));
    }
}

static double tol_vs_exact(dtype dt) { return dt == DT_F32 ? 1e-6 : 1e-2; }

/* k_gemm_ref on one case against the triple loop. */
static void ref_case(const gemm_case *g, uint64_t seed)
{
    gemm_data d = gemm_data_new(g, seed);
    hmat c = hmat_copy(&d.c);
    cr_assert_eq(run_ref(g, &d, &c), OOM_OK, "k_gemm_ref failed: " CASE_FMT, CASE_ARGS(g, seed));
    double *want = naive(g, &d);
    check_result(g, &d, &c, want, tol_vs_exact(g->dt), seed, "k_gemm_ref");
    free(want);
    free(c.p);
    gemm_data_free(&d);
}

/* Shapes every layout and type goes through: scalars, odd sizes on every edge, the CI scale, k == 0. */
static const int64_t odd_shapes[][3] = {
    {1, 1, 1}, {17, 33, 65}, {64, 256, 256}, {5, 7, 0}, {3, 300, 2}, {130, 9, 257}, {1, 129, 300}, {67, 1, 31},
};
#define N_ODD_SHAPES (sizeof odd_shapes / sizeof odd_shapes[0])

static void ref_sweep(dtype dt, const char *name)
{
    uint64_t seed = test_seed(name);
    cr_log_info("%s: seed %#llx", name, (unsigned long long)seed);
    int n_cases = 0;
    for (int lay = 0; lay < 4; lay++)
        for (size_t s = 0; s < N_ODD_SHAPES; s++)
            for (int v = 0; v < 3; v++) { /* beta 0 over NaN, minimal ld; beta 0.5, ld + 3; alpha -0.75, ld + 8 */
                gemm_case g = {dt, lay & 2, lay & 1, odd_shapes[s][0], odd_shapes[s][1], odd_shapes[s][2],
                               v == 0 ? 0 : v == 1 ? 3 : 8, v == 2 ? -0.75f : 1.0f, v == 0 ? 0.0f : 0.5f, false};
                ref_case(&g, seed + (uint64_t)n_cases++);
            }
}

Test(gemm, ref_f32_all_layouts_and_shapes) { ref_sweep(DT_F32, "ref_f32"); }
Test(gemm, ref_f16_all_layouts_and_shapes) { ref_sweep(DT_F16, "ref_f16"); }
Test(gemm, ref_bf16_all_layouts_and_shapes) { ref_sweep(DT_BF16, "ref_bf16"); }

/* Small integers: every partial sum is exact in f32, so C must equal the exact result rounded once. Shapes
 * cross the cache blocks (KC = 256, MC = 64, NC = 256) so the k-slices' accumulation is covered. */
Test(gemm, ref_exact_on_integers)
{
    uint64_t seed = test_seed("ref_exact");
    cr_log_info("ref_exact: seed %#llx", (unsigned long long)seed);
    static const int64_t shapes[][3] = {{17, 33, 65}, {70, 260, 600}, {1, 1, 1}};
    for (int dt = DT_F32; dt <= DT_BF16; dt++)
        for (int lay = 0; lay < 4; lay++)
            for (size_t s = 0; s < 3; s++) {
                gemm_case g = {(dtype)dt, lay & 2, lay & 1, shapes[s][0], shapes[s][1], shapes[s][2], 2, 2.0f,
                               s == 1 ? 0.5f : 0.0f, true};
                ref_case(&g, seed + (uint64_t)(dt * 16 + lay * 4 + (int)s));
            }
}

/* Non-integer f32 data: C is bit for bit each element's sums in the micro-kernel's order (within a k-slice of 256
 * from p = 0 up, then the slices added in order), whichever clone of the micro-kernel the CPU picked (the AVX2 one
 * on x86-64 with GCC): a clone that reordered or fused the arithmetic would change low bits. */
Test(gemm, ref_f32_sums_in_its_documented_order)
{
    enum { M = 37, N = 29, K = 600, KC = 256 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *c = malloc(sizeof(float) * M * N);
    cr_assert(a && b && c);
    uint32_t x = 12345;
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    cr_assert_eq(k_gemm_ref(DT_F32, false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N), OOM_OK);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p0 = 0; p0 < K; p0 += KC) {
                float t = 0.0f;
                for (int p = p0; p < p0 + KC && p < K; p++)
                    t += a[i * K + p] * b[p * N + j];
                acc = p0 == 0 ? t : acc + t;
            }
            cr_assert(memcmp(&acc, &c[i * N + j], sizeof acc) == 0, "C[%d][%d] %a, in order %a", i, j, c[i * N + j],
                      acc);
        }
    free(a);
    free(b);
    free(c);
}

/* alpha == 0 and k == 0: C = beta * C exactly; A and B are not read (they hold NaN here). */
Test(gemm, ref_alpha_zero_and_k_zero_scale_c)
{
    uint64_t seed = test_seed("ref_scale");
    for (int dt = DT_F32; dt <= DT_BF16; dt++)
        for (int kz = 0; kz < 2; kz++) {
            gemm_case g = {(dtype)dt, false, true, 9, 11, kz ? 0 : 13, 1, kz ? 1.0f : 0.0f, -0.5f, true};
            gemm_data d = gemm_data_new(&g, seed);
            hmat_fill(&d.a, NAN);
            hmat_fill(&d.b, NAN);
            hmat c = hmat_copy(&d.c);
            cr_assert_eq(run_ref(&g, &d, &c), OOM_OK);
            for (int64_t i = 0; i < g.m; i++)
                for (int64_t j = 0; j < g.n; j++) {
                    float was = get_f(g.dt, d.c.p, i * d.c.ld + j), now = get_f(g.dt, c.p, i * c.ld + j);
                    cr_assert_eq(now, -0.5f * was, "%s k=%lld: C[%lld][%lld] = %g, expected %g",
                                 dtype_str(g.dt), (long long)g.k, (long long)i, (long long)j, now, -0.5 * was);
                }
            cr_assert(padding_intact(&c));
            /* beta == 0 as well: zeros, whatever C held */
            hmat_fill(&c, NAN);
            g.beta = 0;
            cr_assert_eq(run_ref(&g, &d, &c), OOM_OK);
            for (int64_t i = 0; i < g.m; i++)
                for (int64_t j = 0; j < g.n; j++)
                    cr_assert_eq(get_f(g.dt, c.p, i * c.ld + j), 0.0f);
            free(c.p);
            gemm_data_free(&d);
        }
}

/* The argument checks shared by both implementations; C is left alone on every refusal. */
static void check_bad_arguments(oom_status (*gemm)(dtype, bool, bool, int64_t, int64_t, int64_t, float, const void *,
                                                   int64_t, const void *, int64_t, float, void *, int64_t),
                                void *a, void *b, void *c)
{
    /* a well-formed call would be m = 4, n = 5, k = 6 with minimal leading dimensions */
    cr_assert_eq(gemm(DT_I64, false, false, 4, 5, 6, 1, a, 6, b, 5, 0, c, 5), OOM_EINVAL);
    cr_assert_eq(gemm(DT_COUNT, false, false, 4, 5, 6, 1, a, 6, b, 5, 0, c, 5), OOM_EINVAL);
    cr_assert_eq(gemm(DT_F32, false, false, -1, 5, 6, 1, a, 6, b, 5, 0, c, 5), OOM_EINVAL);
    cr_assert_eq(gemm(DT_F32, false, false, 4, -5, 6, 1, a, 6, b, 5, 0, c, 5), OOM_EINVAL);
    cr_assert_eq(gemm(DT_F32, false, false, 4, 5, -6, 1, a, 6, b, 5, 0, c, 5), OOM_EINVAL);
    cr_assert_eq(gemm(DT_F32, false, false, 4, 5, 6, 1, a, 5, b, 5, 0, c, 5), OOM_EINVAL); /* lda < k */
    cr_assert_eq(gemm(DT_F32, true, false, 4, 5, 6, 1, a, 3, b, 5, 0, c, 5), OOM_EINVAL);  /* lda < m */
    cr_assert_eq(gemm(DT_F32, false, false, 4, 5, 6, 1, a, 6, b, 4, 0, c, 5), OOM_EINVAL); /* ldb < n */
    cr_assert_eq(gemm(DT_F32, false, true, 4, 5, 6, 1, a, 6, b, 5, 0, c, 5), OOM_EINVAL);  /* ldb < k */
    cr_assert_eq(gemm(DT_F32, false, false, 4, 5, 6, 1, a, 6, b, 5, 0, c, 4), OOM_EINVAL); /* ldc < n */
    cr_assert_eq(gemm(DT_BF16, false, false, 4, 5, 6, 1, NULL, 6, b, 5, 0, c, 5), OOM_EINVAL);
    cr_assert_eq(gemm(DT_F16, false, false, 4, 5, 6, 1, a, 6, NULL, 5, 0, c, 5), OOM_EINVAL);
    cr_assert_eq(gemm(DT_F32, false, false, 4, 5, 6, 1, a, 6, b, 5, 0, NULL, 5), OOM_EINVAL);
    /* sizes of 0 are valid and do nothing: NULL is fine where nothing is read or written */
    cr_assert_eq(gemm(DT_F32, false, false, 0, 5, 6, 1, NULL, 6, b, 5, 0, NULL, 5), OOM_OK);
    cr_assert_eq(gemm(DT_F32, false, false, 4, 0, 6, 1, a, 6, NULL, 0, 0, NULL, 0), OOM_OK);
    cr_assert_eq(gemm(DT_F32, false, false, 0, 0, 0, 1, NULL, 0, NULL, 0, 0, NULL, 0), OOM_OK);
}

Test(gemm, ref_bad_arguments_are_einval)
{
    float a[4 * 6] = {0}, b[6 * 5] = {0}, c[4 * 5];
    for (int i = 0; i < 20; i++)
        c[i] = (float)i;
    check_bad_arguments(k_gemm_ref, a, b, c);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(c[i], (float)i, "C changed by a refused or empty call");
    /* k == 0 with NULL A and B: C = beta * C */
    cr_assert_eq(k_gemm_ref(DT_F32, false, false, 4, 5, 0, 1, NULL, 0, NULL, 5, 2.0f, c, 5), OOM_OK);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(c[i], 2.0f * (float)i);
}

/* ---- k_gemm_cuda ------------------------------------------------------------------------------------- */

#ifdef OOM_HAVE_CUDA

Test(gemm, cuda_bad_arguments_are_einval)
{
    /* validation happens before any CUDA call, so this runs on every backend; the pointers are never read */
    float a[4 * 6] = {0}, b[6 * 5] = {0}, c[4 * 5] = {0};
    check_bad_arguments(k_gemm_cuda, a, b, c);
}

static device *open_cuda(void)
{
    if (test_backend() != DEVICE_CUDA)
        cr_skip_test("k_gemm_cuda runs with OOMLAB_TEST_BACKEND=cuda");
    device_options o = {.kind = DEVICE_CUDA};
    device *dev = NULL;
    cr_assert_eq(device_open(&o, &dev), OOM_OK, "cannot open the cuda backend");
    return dev;
}

/* A host matrix on the device, `shift` elements past an allocation's start (shift 1: misaligned). */
typedef struct dmat {
    devptr base, p;
    size_t bytes;
} dmat;

static dmat dmat_put(device *dev, const hmat *x, int shift)
{
    dmat d;
    size_t off = (size_t)shift * dtype_size(x->dt);
    d.bytes = hmat_bytes(x) + off;
    cr_assert_eq(device_mem_alloc(dev, d.bytes, &d.base), OOM_OK);
    d.p = d.base + off;
    cr_assert_eq(device_copy_htod(dev, d.p, x->p, hmat_bytes(x)), OOM_OK);
    return d;
}

/* k_gemm_cuda on one case against k_gemm_ref (or the exact result for integer inputs). C is poisoned (NaN)
 * when beta == 0, so an element left unwritten fails the comparison. */
static void cuda_case(device *dev, const gemm_case *g, uint64_t seed, int shift)
{
    gemm_data d = gemm_data_new(g, seed);
    dmat da = dmat_put(dev, &d.a, shift), db = dmat_put(dev, &d.b, shift), dc = dmat_put(dev, &d.c, shift);
    oom_status st = k_gemm_cuda(g->dt, g->ta, g->tb, g->m, g->n, g->k, g->alpha, (const void *)(uintptr_t)da.p,
                                d.a.ld, (const void *)(uintptr_t)db.p, d.b.ld, g->beta, (void *)(uintptr_t)dc.p,
                                d.c.ld);
    cr_assert_eq(st, OOM_OK, "k_gemm_cuda: %s (%s): " CASE_FMT, oom_status_str(st), oom_error_msg(),
                 CASE_ARGS(g, seed));
    hmat got = hmat_copy(&d.c);
    /* synchronous: waits for the kernel, and fails if it faulted */
    cr_assert_eq(device_copy_dtoh(dev, got.p, dc.p, hmat_bytes(&got)), OOM_OK, "after k_gemm_cuda: " CASE_FMT,
                 CASE_ARGS(g, seed));
    if (g->integers) {
        double *want = naive(g, &d);
        check_result(g, &d, &got, want, 0, seed, "k_gemm_cuda");
        free(want);
    } else {
        hmat ref = hmat_copy(&d.c);
        cr_assert_eq(run_ref(g, &d, &ref), OOM_OK);
        /* the reference as the expectation, in double */
        double *want = malloc(sizeof(double) * (size_t)(g->m * g->n + 1));
        cr_assert_not_null(want);
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++)
                want[i * g->n + j] = get_f(g->dt, ref.p, i * ref.ld + j);
        check_result(g, &d, &got, want, g->dt == DT_F32 ? 1e-5 : 1e-2, seed, "k_gemm_cuda vs k_gemm_ref");
        free(want);
        free(ref.p);
    }
    free(got.p);
    cr_assert_eq(device_mem_free(dev, da.base, da.bytes), OOM_OK);
    cr_assert_eq(device_mem_free(dev, db.base, db.bytes), OOM_OK);
    cr_assert_eq(device_mem_free(dev, dc.base, dc.bytes), OOM_OK);
    gemm_data_free(&d);
}

/* Edge tiles everywhere (odd shapes, ld > minimal, misaligned bases) and whole tiles (the fast paths). */
static void cuda_sweep(dtype dt, const char *name)
{
    device *dev = open_cuda();
    uint64_t seed = test_seed(name);
    fprintf(stderr, "%s: seed %#llx\n", name, (unsigned long long)seed);
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {17, 33, 65}, {64, 256, 256}, {5, 7, 0}, {129, 130, 17}, {128, 128, 16},
        {256, 512, 128}, {200, 384, 40}, {64, 128, 48}, {1, 129, 300}, {67, 1, 31},
    };
    int n_cases = 0;
    for (int lay = 0; lay < 4; lay++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int v = 0; v < 4; v++) {
                /* v: 0 beta 0 over NaN, minimal ld; 1 beta 0.5, ld + 8 (stays aligned); 2 alpha -0.75, ld + 3;
                 * 3 minimal ld, bases misaligned by one element */
                gemm_case g = {dt, lay & 2, lay & 1, shapes[s][0], shapes[s][1], shapes[s][2],
                               v == 1 ? 8 : v == 2 ? 3 : 0, v == 2 ? -0.75f : 1.0f, v == 0 || v == 3 ? 0.0f : 0.5f,
                               false};
                cuda_case(dev, &g, seed + (uint64_t)n_cases++, v == 3 ? 1 : 0);
            }
    device_close(dev);
}

Test(gemm, cuda_f32_vs_ref_all_layouts, .timeout = 120) { cuda_sweep(DT_F32, "cuda_f32"); }
Test(gemm, cuda_f16_vs_ref_all_layouts, .timeout = 120) { cuda_sweep(DT_F16, "cuda_f16"); }
Test(gemm, cuda_bf16_vs_ref_all_layouts, .timeout = 120) { cuda_sweep(DT_BF16, "cuda_bf16"); }

/* The half types' paths, each over the whole sweep: on a Hopper GPU the wgmma/TMA kernel with each of its three
 * tiles wherever TMA can describe the operands (every edge shape, every layout), and the mma.sync kernel
 * everywhere (the path every other GPU takes). Elsewhere all of them run the mma.sync kernel. */
static void cuda_sweep_mode(dtype dt, const char *name, gemm_hopper_mode mode)
{
    gemm_hopper_mode was = k_gemm_cuda_hopper(mode);
    cuda_sweep(dt, name);
    k_gemm_cuda_hopper(was);
}
Test(gemm, cuda_f16_hopper_128x256, .timeout = 120) { cuda_sweep_mode(DT_F16, "cuda_f16_n256", GEMM_HOPPER_N256); }
Test(gemm, cuda_bf16_hopper_128x256, .timeout = 120)
{
    cuda_sweep_mode(DT_BF16, "cuda_bf16_n256", GEMM_HOPPER_N256);
}
Test(gemm, cuda_f16_hopper_128x128, .timeout = 120) { cuda_sweep_mode(DT_F16, "cuda_f16_n128", GEMM_HOPPER_N128); }
Test(gemm, cuda_bf16_hopper_128x64, .timeout = 120) { cuda_sweep_mode(DT_BF16, "cuda_bf16_n64", GEMM_HOPPER_N64); }
Test(gemm, cuda_f16_mma_sync_path, .timeout = 120) { cuda_sweep_mode(DT_F16, "cuda_f16_mma", GEMM_HOPPER_OFF); }
Test(gemm, cuda_bf16_mma_sync_path, .timeout = 120) { cuda_sweep_mode(DT_BF16, "cuda_bf16_mma", GEMM_HOPPER_OFF); }

/* Which kernel runs: on an H100 or H200 (132 SMs) the half types take wgmma where TMA can describe the operands,
 * with the widest tile that fills the SMs, and mma.sync otherwise; f32 is always FFMA. */
Test(gemm, cuda_kernel_choice)
{
    device *dev = open_cuda();
    bool hopper = strstr(dev->name, "H100") || strstr(dev->name, "H200");
    const void *al = (const void *)(uintptr_t)0x10000, *mis = (const void *)(uintptr_t)0x10002;
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F32, 8192, 4096, 4096, al, 4096, al, 4096), "ffma");
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 8192, 4096, 4096, al, 4096, al, 4096),
                     hopper ? "wgmma 128x256" : "mma.sync", "%s", dev->name);
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_BF16, 8192, 4096, 4096, al, 4096, al, 4096),
                     hopper ? "wgmma 128x256" : "mma.sync");
    /* 2 x 16 tiles of 128 x 256, 2 x 32 of 128 x 128: too few for 132 SMs */
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 256, 4096, 4096, al, 4096, al, 4096),
                     hopper ? "wgmma 128x64" : "mma.sync");
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 640, 4096, 4096, al, 4096, al, 4096),
                     hopper ? "wgmma 128x128" : "mma.sync"); /* 5 x 16 of 128 x 256, 5 x 32 of 128 x 128 */
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 8192, 4096, 4096, mis, 4096, al, 4096), "mma.sync");
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 8192, 4096, 4096, al, 4100, al, 4096), "mma.sync");
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 8192, 4096, 0, al, 4096, al, 4096), "mma.sync");
    gemm_hopper_mode was = k_gemm_cuda_hopper(GEMM_HOPPER_N256);
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 128, 256, 64, al, 64, al, 256), hopper ? "wgmma 128x256" : "mma.sync");
    k_gemm_cuda_hopper(GEMM_HOPPER_OFF);
    cr_assert_str_eq(k_gemm_cuda_kernel(DT_F16, 8192, 4096, 4096, al, 4096, al, 4096), "mma.sync");
    k_gemm_cuda_hopper(was);
    device_close(dev);
}

/* Exact results on small integers, every type and layout, edge and whole tiles. */
Test(gemm, cuda_exact_on_integers, .timeout = 120)
{
    device *dev = open_cuda();
    uint64_t seed = test_seed("cuda_exact");
    fprintf(stderr, "cuda_exact: seed %#llx\n", (unsigned long long)seed);
    static const int64_t shapes[][3] = {{17, 33, 65}, {128, 256, 64}, {70, 260, 600}};
    for (int dt = DT_F32; dt <= DT_BF16; dt++)
        for (int lay = 0; lay < 4; lay++)
            for (size_t s = 0; s < 3; s++) {
                gemm_case g = {(dtype)dt, lay & 2, lay & 1, shapes[s][0], shapes[s][1], shapes[s][2], 0, 2.0f,
                               s == 1 ? 0.5f : 0.0f, true};
                cuda_case(dev, &g, seed + (uint64_t)(dt * 16 + lay * 4 + (int)s), 0);
            }
    device_close(dev);
}

/* The sizes the runtime uses: a batch-256 Linear of width 4096 (forward NT, backward NN and TN) and 1024^3, and two
 * the Hopper path takes by default. */
Test(gemm, cuda_large_vs_ref, .timeout = 300)
{
    device *dev = open_cuda();
    uint64_t seed = test_seed("cuda_large");
    fprintf(stderr, "cuda_large: seed %#llx\n", (unsigned long long)seed);
    const gemm_case cases[] = {
        {DT_F32, false, true, 256, 4096, 4096, 0, 1.0f, 0.0f, false},
        {DT_F32, false, false, 256, 4096, 4096, 0, 1.0f, 0.0f, false},
        {DT_F32, true, false, 4096, 4096, 256, 0, 1.0f, 1.0f, false},
        {DT_F32, false, false, 1024, 1024, 1024, 0, 1.0f, 0.0f, false},
        {DT_F32, false, true, 1024, 1024, 1024, 0, 1.0f, 0.5f, false},
        {DT_F32, true, false, 1024, 1024, 1024, 0, 1.0f, 0.0f, false},
        {DT_F32, true, true, 1024, 1024, 1024, 0, 1.0f, 0.0f, false},
        {DT_F32, false, true, 1000, 1000, 1000, 0, 1.0f, 0.0f, false},
        {DT_F16, false, true, 256, 4096, 4096, 0, 1.0f, 0.0f, false},
        {DT_BF16, false, true, 256, 4096, 4096, 0, 1.0f, 0.0f, false},
        {DT_F16, true, false, 1024, 1024, 1024, 0, 1.0f, 0.5f, false},
        {DT_BF16, false, false, 1024, 1024, 1024, 0, 1.0f, 0.0f, false},
        /* 9 x 16 tiles of 128 x 256: the Hopper path by default on an H100 or H200; k = 264 ends mid-slice */
        {DT_F16, false, true, 1152, 4096, 264, 0, 1.0f, 0.0f, false},
        {DT_BF16, true, false, 1152, 4096, 256, 0, 1.0f, 0.5f, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cuda_case(dev, &cases[i], seed + i, 0);
    device_close(dev);
}

/* alpha == 0 and k == 0 scale C (A and B hold NaN and must not be read); m == 0 or n == 0 launch nothing. */
Test(gemm, cuda_alpha_zero_and_k_zero_scale_c)
{
    device *dev = open_cuda();
    uint64_t seed = test_seed("cuda_scale");
    for (int dt = DT_F32; dt <= DT_BF16; dt++)
        for (int kz = 0; kz < 2; kz++) {
            gemm_case g = {(dtype)dt, true, false, 9, 11, kz ? 0 : 13, 1, kz ? 1.0f : 0.0f, -0.5f, true};
            gemm_data d = gemm_data_new(&g, seed);
            hmat_fill(&d.a, NAN);
            hmat_fill(&d.b, NAN);
            dmat da = dmat_put(dev, &d.a, 0), db = dmat_put(dev, &d.b, 0), dc = dmat_put(dev, &d.c, 0);
            cr_assert_eq(k_gemm_cuda(g.dt, g.ta, g.tb, g.m, g.n, g.k, g.alpha, (const void *)(uintptr_t)da.p, d.a.ld,
                                     (const void *)(uintptr_t)db.p, d.b.ld, g.beta, (void *)(uintptr_t)dc.p, d.c.ld),
                         OOM_OK);
            hmat got = hmat_copy(&d.c);
            cr_assert_eq(device_copy_dtoh(dev, got.p, dc.p, hmat_bytes(&got)), OOM_OK);
            for (int64_t i = 0; i < g.m; i++)
                for (int64_t j = 0; j < g.n; j++)
                    cr_assert_eq(get_f(g.dt, got.p, i * got.ld + j), -0.5f * get_f(g.dt, d.c.p, i * d.c.ld + j));
            cr_assert(padding_intact(&got));
            cr_assert_eq(device_mem_free(dev, da.base, da.bytes), OOM_OK);
            cr_assert_eq(device_mem_free(dev, db.base, db.bytes), OOM_OK);
            cr_assert_eq(device_mem_free(dev, dc.base, dc.bytes), OOM_OK);
            free(got.p);
            gemm_data_free(&d);
        }
    device_close(dev);
}

#else

Test(gemm, cuda_not_built) { cr_skip_test("the cuda backend is not built in"); }

#endif
