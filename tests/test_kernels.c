/* test_kernels.c - the kernels of kernels.h except gemm: CPU references and CUDA versions.
 *
 * Suite "kernels".
 *   Always (sim, no GPU needed): each k_*_ref against values worked out by hand and against an independent
 *   double-precision formula on random inputs; dtype.h's f16/bf16 conversions against known bit patterns and
 *   exhaustively; the RNG's stream (splitmix64's published outputs), bounds and moments; SGD and Adam against
 *   torch.optim's update formulas in double for several steps; bad arguments (refs and CUDA versions: the
 *   checks run before any CUDA call).
 *   cuda_* (OOMLAB_TEST_BACKEND=cuda; skipped on sim): every k_*_cuda against its k_*_ref on random inputs, at
 *   sizes that take the 16-byte and tail paths (n = 0, 1, 3, 1025, 2^20 + 7; m x n = 256x10, 64x256, 1x4096,
 *   3x1025, 8192x4096), in place and misaligned, with poisoned outputs and guard bytes around them;
 *   assert_nll_target_cuda: a bad target fails the device assertion. OOMLAB_TEST_SMALL=1 leaves out 8192x4096
 *   (for compute-sanitizer runs, which filter on kernels/cuda_*).
 *
 * Tolerances. Against double: |got - want| <= u * |want| + slack, u the unit roundoff of the stored type (2^-24
 * f32, 2^-11 f16, 2^-8 bf16) and slack a few f32 roundings of the operands' magnitude (stated per test). CUDA
 * against ref: bit-exact (NaN payloads aside) where both do the same correctly rounded operations (fill, cast,
 * mul, scale, relu, relu_backward, bias_rows, unscale_check, mse_loss_backward, nll_loss_backward,
 * rand_uniform, rand_int); else the norm-wise relative error ||cuda - ref|| / ||ref|| <= 1e-5 (f32) or 1e-2
 * (f16, bf16).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "krand.h"
#include "testutil.h"

#define COUNT(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))
#define PI 3.14159265358979323846

static const dtype float_types[3] = {DT_F32, DT_F16, DT_BF16};

/* ---- host helpers -------------------------------------------------------------------------------------------- */

/* xorshift64*: the tests' own generator, independent of the kernels' hash. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    cr_assert_not_null(p, "out of host memory (%zu bytes)", bytes);
    return p;
}

/* Element i of a float buffer of type dt, as double. */
static double ld(dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case DT_F32:
        return ((const float *)p)[i];
    case DT_F16:
        return f16_to_f32(((const uint16_t *)p)[i]);
    case DT_BF16:
        return bf16_to_f32(((const uint16_t *)p)[i]);
    default:
        return (double)((const int64_t *)p)[i];
    }
}

/* Store v (already a float) in element i. */
static void st(dtype dt, void *p, int64_t i, float v)
{
    if (dt == DT_F32)
        ((float *)p)[i] = v;
    else if (dt == DT_F16)
        ((uint16_t *)p)[i] = f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = f32_to_bf16(v);
}

/* A fresh buffer of n uniform values in [lo, hi), rounded to dt. */
static void *rand_buf(dtype dt, int64_t n, double lo, double hi, uint64_t seed)
{
    void *p = xmalloc((size_t)n * dtype_size(dt));
    uint64_t s = seed * 2 + 1;
    for (int64_t i = 0; i < n; i++)
        st(dt, p, i, (float)(lo + (hi - lo) * rng_unit(&s)));
    return p;
}

static void *dup_buf(const void *p, size_t bytes)
{
    void *q = xmalloc(bytes);
    memcpy(q, p, bytes);
    return q;
}

/* Unit roundoff of the stored type, and the absolute error of rounding to it near zero (f16 subnormals). */
static double uround(dtype dt) { return dt == DT_F32 ? 0x1p-24 : dt == DT_F16 ? 0x1p-11 : 0x1p-8; }
static double utiny(dtype dt) { return dt == DT_F16 ? 0x1p-25 : dt == DT_F32 ? 0x1p-150 : 0x1p-134; }

#define U32 0x1p-24 /* f32 unit roundoff: the slack of one f32 operation */

/* got[i] within u * |want[i]| + slack[i] + tiny of want[i], for every i; NaN only where want is NaN. */
static void expect_near(const char *what, dtype dt, const void *got, const double *want, const double *slack,
                        int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double g = ld(dt, got, i), w = want[i];
        if (isnan(w)) {
            cr_assert(isnan(g), "%s %s [%lld]: %.9g, expected NaN", what, dtype_str(dt), (long long)i, g);
            continue;
        }
        if (isinf(w)) {
            cr_assert_eq(g, w, "%s %s [%lld]: %.9g, expected %g", what, dtype_str(dt), (long long)i, g, w);
            continue;
        }
        double tol = uround(dt) * fabs(w) + slack[i] + utiny(dt);
        cr_assert(fabs(g - w) <= tol, "%s %s [%lld]: %.9g, expected %.9g (|error| %.3g > %.3g)", what,
                  dtype_str(dt), (long long)i, g, w, fabs(g - w), tol);
    }
}

/* ---- dtype.h conversions ------------------------------------------------------------------------------------- */

Test(kernels, f16_known_bits)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},  /* largest finite */
        {65519.99f, 0x7bff}, /* just below the rounding boundary */
        {65520.0f, 0x7c00},  /* the boundary rounds to even: inf */
        {1e10f, 0x7c00},
        {0x1p-14f, 0x0400},            /* smallest normal */
        {0x1p-24f, 0x0001},            /* smallest subnormal */
        {0x1p-25f, 0x0000},            /* half of it: tie to even, 0 */
        {0x1.8p-25f, 0x0001},          /* three quarters: up */
        {0x1.8p-24f, 0x0002},          /* 1.5 x 2^-24: tie to even, 2 */
        {0x1.4p-23f, 0x0002},          /* 2.5 x 2^-24: tie to even, 2 */
        {0x1p-14f - 0x1p-25f, 0x0400}, /* tie between the largest subnormal and the smallest normal: even */
        {1.0f + 0x1p-11f, 0x3c00},     /* tie between 1 and 1 + 2^-10: even (1) */
        {1.0f + 0x1.8p-10f, 0x3c02},   /* tie between 1 + 2^-10 and 1 + 2^-9: even */
        {1.0f + 0x1.02p-11f, 0x3c01},  /* just above the tie: up */
        {0.1f, 0x2e66},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
    };
    for (int64_t i = 0; i < COUNT(cases); i++)
        cr_assert_eq(f32_to_f16(cases[i].f), cases[i].h, "f32_to_f16(%a) = %#06x, expected %#06x",
                     (double)cases[i].f, f32_to_f16(cases[i].f), cases[i].h);
    uint16_t nan = f32_to_f16(NAN);
    cr_assert((nan & 0x7c00) == 0x7c00 && (nan & 0x03ff) != 0, "f32_to_f16(NaN) = %#06x is not a NaN", nan);
    cr_assert_eq(f16_to_f32(0x0001), 0x1p-24f);
    cr_assert_eq(f16_to_f32(0x7bff), 65504.0f);
    cr_assert_eq(f16_to_f32(0xfc00), -INFINITY);
    cr_assert(isnan(f16_to_f32(0x7e00)));
}

Test(kernels, bf16_known_bits)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3f80},
        {-2.0f, 0xc000},
        {1.0f + 0x1p-8f, 0x3f80},    /* tie: even */
        {1.0f + 0x1.8p-7f, 0x3f82},  /* tie: even (up) */
        {1.0f + 0x1.02p-8f, 0x3f81}, /* just above the tie */
        {0x1.fep127f, 0x7f7f},       /* largest finite bf16 */
        {0x1.ffp127f, 0x7f80},       /* tie above it: even, inf */
        {0x1p-133f, 0x0001},         /* smallest bf16 subnormal */
        {0x1p-149f, 0x0000},         /* smallest f32 subnormal rounds to 0 */
        {0.1f, 0x3dcd},
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
    };
    for (int64_t i = 0; i < COUNT(cases); i++)
        cr_assert_eq(f32_to_bf16(cases[i].f), cases[i].h, "f32_to_bf16(%a) = %#06x, expected %#06x",
                     (double)cases[i].f, f32_to_bf16(cases[i].f), cases[i].h);
    uint16_t nan = f32_to_bf16(NAN);
    cr_assert((nan & 0x7f80) == 0x7f80 && (nan & 0x007f) != 0, "f32_to_bf16(NaN) = %#06x is not a NaN", nan);
    uint16_t snan = f32_to_bf16(f32_from_bits(0x7f800001u)); /* a payload only in the low bits stays a NaN */
    cr_assert((snan & 0x7f80) == 0x7f80 && (snan & 0x007f) != 0, "signalling NaN became %#06x", snan);
}

/* Every 16-bit pattern: widening is exact (checked against sign x mantissa x 2^exp in double) and narrowing
 * gives the pattern back (NaNs stay NaN). */
Test(kernels, half_round_trip_all)
{
    for (uint32_t b = 0; b < 0x10000; b++) {
        uint16_t h = (uint16_t)b;
        int e = (h >> 10) & 0x1f, man = h & 0x3ff;
        double sign = (h & 0x8000) ? -1.0 : 1.0;
        float f = f16_to_f32(h);
        if (e == 0x1f) {
            cr_assert(man ? isnan(f) : isinf(f), "f16 %#06x -> %g", h, (double)f);
            if (man)
                cr_assert(isnan(f16_to_f32(f32_to_f16(f))));
            else
                cr_assert_eq(f32_to_f16(f), h);
            continue;
        }
        double want = e == 0 ? sign * man * 0x1p-24 : sign * (1024 + man) * ldexp(1.0, e - 25);
        cr_assert_eq((double)f, want, "f16 %#06x -> %a, expected %a", h, (double)f, want);
        cr_assert_eq(f32_to_f16(f), h, "f16 %#06x does not round-trip", h);
        uint16_t bh = (uint16_t)b;
        float bf = bf16_to_f32(bh);
        if (isnan(bf))
            cr_assert(isnan(bf16_to_f32(f32_to_bf16(bf))));
        else
            cr_assert_eq(f32_to_bf16(bf), bh, "bf16 %#06x does not round-trip", bh);
    }
}

/* Random f32 values: f32_to_f16 and f32_to_bf16 return the nearest value, ties to even (checked against the
 * neighbours in double). */
Test(kernels, half_rounding_is_nearest_even)
{
    uint64_t s = 12345;
    for (int k = 0; k < 1000000; k++) {
        float f = f32_from_bits((uint32_t)rng_next(&s));
        if (!isfinite(f))
            continue;
        for (int t = 0; t < 2; t++) {
            bool is_f16 = t == 0;
            double x = f, maxf = is_f16 ? 65504.0 : 0x1.fep127;
            double ulp_max = is_f16 ? 32.0 : 0x1p120; /* spacing at the top binade */
            uint16_t h = is_f16 ? f32_to_f16(f) : f32_to_bf16(f);
            double got = is_f16 ? f16_to_f32(h) : bf16_to_f32(h);
            if (fabs(x) >= maxf + ulp_max / 2) { /* at or beyond the midpoint to the next power: inf */
                cr_assert(isinf(got) && (got > 0) == (x > 0), "%a -> %#06x, expected inf", x, h);
                continue;
            }
            cr_assert(isfinite(got), "%a -> %#06x overflowed", x, h);
            /* neighbours one unit away in the encoding */
            uint16_t mag = h & 0x7fff, sgn = h & 0x8000;
            double up = is_f16 ? f16_to_f32((uint16_t)(sgn | (mag + 1))) : bf16_to_f32((uint16_t)(sgn | (mag + 1)));
            double dn =
                mag ? (is_f16 ? f16_to_f32((uint16_t)(sgn | (mag - 1))) : bf16_to_f32((uint16_t)(sgn | (mag - 1))))
                    : -got;
            double e = fabs(got - x);
            cr_assert(e <= fabs(up - x) && e <= fabs(dn - x), "%a -> %a is not nearest (%s)", x, got,
                      is_f16 ? "f16" : "bf16");
            if (e == fabs(up - x) || (mag && e == fabs(dn - x)))
                cr_assert((h & 1) == 0 || e == 0, "%a -> %#06x: a tie not rounded to even", x, h);
        }
    }
}

/* ---- elementwise: the ops, hand-computed values, double formulas --------------------------------------------- */

#ifdef OOM_HAVE_CUDA
#define KIMPL(cuda, name) ((cuda) ? k_##name##_cuda : k_##name##_ref)
#else
#define KIMPL(cuda, name) ((void)(cuda), k_##name##_ref)
#endif

#define ADD_ALPHA 0.75f
#define SCALE_S (-1.25f)

static oom_status call_add(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    return KIMPL(cuda, add)(dt, out, a, b, ADD_ALPHA, n);
}
static oom_status call_mul(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    return KIMPL(cuda, mul)(dt, out, a, b, n);
}
static oom_status call_scale(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    (void)b;
    return KIMPL(cuda, scale)(dt, out, a, SCALE_S, n);
}
static oom_status call_relu(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    (void)b;
    return KIMPL(cuda, relu)(dt, out, a, n);
}
static oom_status call_relu_bw(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    return KIMPL(cuda, relu_backward)(dt, out, a, b, n);
}
static oom_status call_tanh(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    (void)b;
    return KIMPL(cuda, tanh)(dt, out, a, n);
}
static oom_status call_tanh_bw(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    return KIMPL(cuda, tanh_backward)(dt, out, a, b, n);
}
/* dangling_tensors, inplace_ops */
#define ADD_S 0.75f
static oom_status call_sigmoid(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    (void)b;
    return KIMPL(cuda, sigmoid)(dt, out, a, n);
}
static oom_status call_sigmoid_bw(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    return KIMPL(cuda, sigmoid_backward)(dt, out, a, b, n);
}
static oom_status call_add_scalar(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n)
{
    (void)b;
    return KIMPL(cuda, add_scalar)(dt, out, a, ADD_S, n);
}

/* The double formulas; *mag is the size of the f32 intermediates (each f32 operation errs by U32 * mag). */
static double want_add(double a, double b, double *mag)
{
    *mag = 2 * (fabs(a) + fabs(ADD_ALPHA * b));
    return a + ADD_ALPHA * b;
}
static double want_mul(double a, double b, double *mag)
{
    *mag = 0; /* the exact product of two stored values fits in f32: one rounding, to the stored type */
    return a * b;
}
static double want_scale(double a, double b, double *mag)
{
    (void)b;
    *mag = 0;
    return SCALE_S * a;
}
static double want_relu(double a, double b, double *mag)
{
    (void)b;
    *mag = 0;
    return a > 0 ? a : 0;
}
static double want_relu_bw(double go, double y, double *mag)
{
    *mag = 0;
    return y > 0 ? go : 0;
}
static double want_tanh(double a, double b, double *mag)
{
    (void)b;
    *mag = 4 * fabs(tanh(a)); /* tanhf: within 2 ulps */
    return tanh(a);
}
static double want_tanh_bw(double go, double y, double *mag)
{
    *mag = 3 * fabs(go) * (1 + y * y);
    return go * (1 - y * y);
}
static double want_sigmoid(double a, double b, double *mag)
{
    (void)b;
    double y = 1 / (1 + exp(-a));
    *mag = 6 * y; /* expf within 2 ulps, then an add and a division */
    return y;
}
static double want_sigmoid_bw(double go, double y, double *mag)
{
    *mag = 3 * fabs(go) * (1 + fabs(y)) * (1 + fabs(y));
    return go * (1 - y) * y;
}
static double want_add_scalar(double a, double b, double *mag)
{
    (void)b;
    *mag = 2 * (fabs(a) + ADD_S);
    return a + ADD_S;
}

typedef struct ew_op {
    const char *name;
    int nin;       /* 1: a only; 2: a and b */
    bool exact;    /* cuda and ref agree bit for bit */
    double lo, hi; /* input range */
    oom_status (*call)(bool cuda, dtype dt, void *out, const void *a, const void *b, int64_t n);
    double (*want)(double a, double b, double *mag);
} ew_op;

static const ew_op ew_ops[] = {
    {"add", 2, false, -2, 2, call_add, want_add},
    {"mul", 2, true, -2, 2, call_mul, want_mul},
    {"scale", 1, true, -2, 2, call_scale, want_scale},
    {"relu", 1, true, -2, 2, call_relu, want_relu},
    {"relu_backward", 2, true, -2, 2, call_relu_bw, want_relu_bw},
    {"tanh", 1, false, -4, 4, call_tanh, want_tanh},
    {"tanh_backward", 2, false, -1, 1, call_tanh_bw, want_tanh_bw},
    {"sigmoid", 1, false, -8, 8, call_sigmoid, want_sigmoid},
    {"sigmoid_backward", 2, false, 0, 1, call_sigmoid_bw, want_sigmoid_bw},
    {"add_scalar", 1, true, -2, 2, call_add_scalar, want_add_scalar},
};

Test(kernels, elementwise_known_values)
{
    const float a[4] = {1.0f, -2.0f, 0.5f, -0.0f}, b[4] = {0.25f, 4.0f, -0.25f, 3.0f};
    float out[4];
    cr_assert_eq(k_add_ref(DT_F32, out, a, b, 2.0f, 4), OOM_OK);
    const float add_want[4] = {1.5f, 6.0f, 0.0f, 6.0f};
    cr_assert_arr_eq(out, add_want, sizeof out);
    cr_assert_eq(k_mul_ref(DT_F32, out, a, b, 4), OOM_OK);
    const float mul_want[4] = {0.25f, -8.0f, -0.125f, -0.0f};
    cr_assert_arr_eq(out, mul_want, sizeof out);
    cr_assert_eq(k_scale_ref(DT_F32, out, a, -4.0f, 4), OOM_OK);
    const float scale_want[4] = {-4.0f, 8.0f, -2.0f, 0.0f};
    cr_assert_arr_eq(out, scale_want, sizeof out);
    cr_assert_eq(k_tanh_backward_ref(DT_F32, out, b, a + 2, 2), OOM_OK); /* go (1 - y^2), y = 0.5, -0 */
    cr_assert_eq(out[0], 0.25f * 0.75f);
    cr_assert_eq(out[1], 4.0f);

    /* relu: NaN propagates, -0 and -inf become +0 (clamp_min) */
    const float r_in[6] = {3.0f, -3.0f, -0.0f, NAN, -INFINITY, INFINITY};
    float r[6];
    cr_assert_eq(k_relu_ref(DT_F32, r, r_in, 6), OOM_OK);
    cr_assert_eq(r[0], 3.0f);
    cr_assert_eq(f32_bits(r[1]), 0u);
    cr_assert_eq(f32_bits(r[2]), 0u, "relu(-0) must be +0");
    cr_assert(isnan(r[3]));
    cr_assert_eq(f32_bits(r[4]), 0u);
    cr_assert_eq(r[5], INFINITY);

    /* relu_backward is threshold_backward: y <= 0 gives 0, a NaN y passes the gradient */
    const float go[4] = {5.0f, 6.0f, 7.0f, 8.0f}, y[4] = {1.0f, 0.0f, -1.0f, NAN};
    cr_assert_eq(k_relu_backward_ref(DT_F32, out, go, y, 4), OOM_OK);
    const float rb_want[4] = {5.0f, 0.0f, 0.0f, 8.0f};
    cr_assert_arr_eq(out, rb_want, sizeof out);

    /* tanh: odd, saturates exactly */
    const float t_in[4] = {0.0f, 20.0f, -INFINITY, 0.5f};
    cr_assert_eq(k_tanh_ref(DT_F32, out, t_in, 4), OOM_OK);
    cr_assert_eq(out[0], 0.0f);
    cr_assert_eq(out[1], 1.0f);
    cr_assert_eq(out[2], -1.0f);
    cr_assert(fabs(out[3] - tanh(0.5)) <= 0x1p-24, "tanh(0.5) = %.9g", (double)out[3]);

    /* 16-bit types: the same exact values, in place */
    for (int t = 1; t < 3; t++) {
        dtype dt = float_types[t];
        uint16_t h[4], hb[4];
        for (int i = 0; i < 4; i++) {
            st(dt, h, i, a[i]);
            st(dt, hb, i, b[i]);
        }
        cr_assert_eq(k_add_ref(dt, h, h, hb, 2.0f, 4), OOM_OK);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(ld(dt, h, i), add_want[i], "%s add [%d] = %g", dtype_str(dt), i, ld(dt, h, i));
    }
}

/* dangling_tensors, inplace_ops: sigmoid saturates exactly, its backward is go (1 - y) y, add_scalar adds */
Test(kernels, sigmoid_and_add_scalar_known_values)
{
    const float in[5] = {0.0f, 200.0f, -200.0f, INFINITY, -INFINITY};
    float out[5];
    cr_assert_eq(k_sigmoid_ref(DT_F32, out, in, 5), OOM_OK);
    const float want[5] = {0.5f, 1.0f, 0.0f, 1.0f, 0.0f};
    cr_assert_arr_eq(out, want, sizeof out);
    const float go[3] = {2.0f, -4.0f, 8.0f}, y[3] = {0.5f, 0.25f, 1.0f};
    cr_assert_eq(k_sigmoid_backward_ref(DT_F32, out, go, y, 3), OOM_OK);
    const float bw_want[3] = {0.5f, -0.75f, 0.0f};
    cr_assert_arr_eq(out, bw_want, 3 * sizeof(float));
    const float a[3] = {1.0f, -2.5f, 0.0f};
    cr_assert_eq(k_add_scalar_ref(DT_F32, out, a, 1.0f, 3), OOM_OK);
    const float add_want[3] = {2.0f, -1.5f, 1.0f};
    cr_assert_arr_eq(out, add_want, 3 * sizeof(float));
    uint16_t h[2] = {0x3c00, 0xc000}; /* f16 1, -2: in place */
    cr_assert_eq(k_add_scalar_ref(DT_F16, h, h, 1.0f, 2), OOM_OK);
    cr_assert_eq(h[0], 0x4000); /* 2 */
    cr_assert_eq(h[1], 0xbc00); /* -1 */
}

Test(kernels, bias_rows_known_values)
{
    const float bias[3] = {1.5f, -2.0f, 0.25f};
    float out[2 * 3 + 1];
    out[6] = 99.0f; /* guard */
    cr_assert_eq(k_bias_rows_ref(DT_F32, out, bias, 2, 3), OOM_OK);
    const float want[7] = {1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f, 99.0f};
    cr_assert_arr_eq(out, want, sizeof want);
    uint16_t hbias[3] = {0x3c00, 0xc000, 0x7bff}, hout[6];
    cr_assert_eq(k_bias_rows_ref(DT_F16, hout, hbias, 2, 3), OOM_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(hout[i], hbias[i % 3]);
    cr_assert_eq(k_bias_rows_ref(DT_F32, out, bias, 0, 3), OOM_OK);
    cr_assert_eq(k_bias_rows_ref(DT_F32, NULL, NULL, 5, 0), OOM_OK);
}

/* Every op, every type, random inputs: the reference against its double formula, and in place (out == a) the
 * same bits as out of place. */
Test(kernels, elementwise_against_double)
{
    const int64_t n = 1000;
    for (int64_t k = 0; k < COUNT(ew_ops); k++) {
        const ew_op *op = &ew_ops[k];
        for (int t = 0; t < 3; t++) {
            dtype dt = float_types[t];
            size_t bytes = (size_t)n * dtype_size(dt);
            void *a = rand_buf(dt, n, op->lo, op->hi, 100 + (uint64_t)k);
            void *b = rand_buf(dt, n, op->lo, op->hi, 200 + (uint64_t)k);
            void *out = xmalloc(bytes);
            double *want = xmalloc((size_t)n * sizeof *want), *slack = xmalloc((size_t)n * sizeof *slack);
            for (int64_t i = 0; i < n; i++) {
                double mag;
                want[i] = op->want(ld(dt, a, i), ld(dt, b, i), &mag);
                slack[i] = U32 * mag;
            }
            cr_assert_eq(op->call(false, dt, out, a, b, n), OOM_OK, "%s %s", op->name, dtype_str(dt));
            expect_near(op->name, dt, out, want, slack, n);
            void *inplace = dup_buf(a, bytes);
            cr_assert_eq(op->call(false, dt, inplace, inplace, b, n), OOM_OK);
            cr_assert_arr_eq(inplace, out, bytes, "%s %s in place differs", op->name, dtype_str(dt));
            free(a), free(b), free(out), free(want), free(slack), free(inplace);
        }
    }
}

Test(kernels, fill_known_values)
{
    float f[5] = {7, 7, 7, 7, 7};
    cr_assert_eq(k_fill_ref(DT_F32, f, 4, -1.5f), OOM_OK);
    const float fw[5] = {-1.5f, -1.5f, -1.5f, -1.5f, 7};
    cr_assert_arr_eq(f, fw, sizeof f);
    uint16_t h[3] = {1, 1, 1};
    cr_assert_eq(k_fill_ref(DT_F16, h, 3, 65520.0f), OOM_OK);
    cr_assert(h[0] == 0x7c00 && h[2] == 0x7c00, "f16 fill of 65520: %#06x", h[0]);
    cr_assert_eq(k_fill_ref(DT_BF16, h, 2, 0.1f), OOM_OK);
    cr_assert(h[0] == 0x3dcd && h[1] == 0x3dcd && h[2] == 0x7c00);
    int64_t q[3] = {5, 5, 5};
    cr_assert_eq(k_fill_ref(DT_I64, q, 2, -3.75f), OOM_OK); /* truncation toward zero, as torch.full */
    cr_assert(q[0] == -3 && q[1] == -3 && q[2] == 5);
    cr_assert_eq(k_fill_ref(DT_F32, NULL, 0, 1.0f), OOM_OK);
    cr_assert_eq(k_fill_ref(DT_I64, q, 1, NAN), OOM_EINVAL);
    cr_assert_eq(k_fill_ref(DT_I64, q, 1, 0x1p63f), OOM_EINVAL);
}

Test(kernels, cast_known_values)
{
    const float f[6] = {1.0f, 65520.0f, 1.0f + 0x1p-11f, -0.0f, 0x1p-24f, 3.0f};
    uint16_t h[6], bh[6];
    cr_assert_eq(k_cast_ref(DT_F16, h, DT_F32, f, 6), OOM_OK);
    const uint16_t hw[6] = {0x3c00, 0x7c00, 0x3c00, 0x8000, 0x0001, 0x4200};
    cr_assert_arr_eq(h, hw, sizeof h);
    float back[6];
    cr_assert_eq(k_cast_ref(DT_F32, back, DT_F16, h, 6), OOM_OK);
    cr_assert(back[0] == 1.0f && isinf(back[1]) && back[4] == 0x1p-24f && back[5] == 3.0f);
    /* f16 -> bf16 -> f16: 1 + 2^-10 is not a bf16 (7 mantissa bits): rounds to 1; 2^-24 is */
    const uint16_t h2[3] = {0x3c01, 0x0001, 0x7bff};
    cr_assert_eq(k_cast_ref(DT_BF16, bh, DT_F16, h2, 3), OOM_OK);
    cr_assert_eq(bh[0], 0x3f80);
    cr_assert_eq(bh[1], f32_to_bf16(0x1p-24f));
    cr_assert_eq(bh[2], 0x4780); /* 65504 = 0x1.ffcp15 rounds up to 65536 in bf16 */
    /* bf16 <-> f16 in place (same size) */
    uint16_t ip[2] = {0x3f80, 0x4000}; /* bf16 1, 2 */
    cr_assert_eq(k_cast_ref(DT_F16, ip, DT_BF16, ip, 2), OOM_OK);
    cr_assert(ip[0] == 0x3c00 && ip[1] == 0x4000);
    /* i64 copies only to i64 */
    const int64_t q[3] = {INT64_MIN, -1, INT64_MAX};
    int64_t q2[3];
    cr_assert_eq(k_cast_ref(DT_I64, q2, DT_I64, q, 3), OOM_OK);
    cr_assert_arr_eq(q2, q, sizeof q);
    cr_assert_eq(k_cast_ref(DT_F32, back, DT_I64, q, 3), OOM_EINVAL);
    cr_assert_eq(k_cast_ref(DT_I64, q2, DT_F32, f, 3), OOM_EINVAL);
    float widen[4] = {0};
    cr_assert_eq(k_cast_ref(DT_F32, widen, DT_F16, widen, 2), OOM_EINVAL, "in-place widening must be refused");
}

/* inference_oom: copy, torch.cat's per-input copy: bytes as they are, every dtype (NaN payloads included). */
Test(kernels, copy_known_values)
{
    const uint32_t f[4] = {0x3f800000u, 0x7fc00001u, 0x80000000u, 0x00000001u};
    uint32_t got[5] = {0, 0, 0, 0, 0xdeadbeefu};
    cr_assert_eq(k_copy_ref(DT_F32, got, f, 4), OOM_OK);
    cr_assert_arr_eq(got, f, sizeof f);
    cr_assert_eq(got[4], 0xdeadbeefu, "nothing past n written");
    const int64_t q[2] = {INT64_MIN, 7};
    int64_t q2[2];
    cr_assert_eq(k_copy_ref(DT_I64, q2, q, 2), OOM_OK);
    cr_assert_arr_eq(q2, q, sizeof q);
    const uint16_t h[3] = {0x7e01, 0x3c00, 0xfbff};
    uint16_t h2[3];
    cr_assert_eq(k_copy_ref(DT_BF16, h2, h, 3), OOM_OK);
    cr_assert_arr_eq(h2, h, sizeof h);
    cr_assert_eq(k_copy_ref(DT_F16, NULL, NULL, 0), OOM_OK);
    cr_assert_eq(k_copy_ref(DT_F32, got, NULL, 1), OOM_EINVAL);
    cr_assert_eq(k_copy_ref(DT_F32, got, f, -1), OOM_EINVAL);
}

/* unscale_check: values multiplied; found_inf set by inf/NaN before or after (as stored), never cleared. */
Test(kernels, unscale_check_known_values)
{
    float a[4] = {2.0f, -4.0f, 8.0f, 0.0f}, inv = 0.5f, found = 0.0f;
    cr_assert_eq(k_unscale_check_ref(DT_F32, a, 4, &inv, &found), OOM_OK);
    const float aw[4] = {1.0f, -2.0f, 4.0f, 0.0f};
    cr_assert_arr_eq(a, aw, sizeof a);
    cr_assert_eq(found, 0.0f);
    float b[3] = {1.0f, INFINITY, NAN};
    cr_assert_eq(k_unscale_check_ref(DT_F32, b, 3, &inv, &found), OOM_OK);
    cr_assert_eq(found, 1.0f);
    cr_assert(b[0] == 0.5f && isinf(b[1]) && isnan(b[2]));
    float c[2] = {1.0f, 2.0f};
    cr_assert_eq(k_unscale_check_ref(DT_F32, c, 2, &inv, &found), OOM_OK);
    cr_assert_eq(found, 1.0f, "found_inf must never be cleared");
    /* f16: 40000 x 2 overflows the stored type */
    uint16_t h[2] = {f32_to_f16(40000.0f), f32_to_f16(1.0f)};
    float two = 2.0f, found16 = 0.0f;
    cr_assert_eq(k_unscale_check_ref(DT_F16, h, 2, &two, &found16), OOM_OK);
    cr_assert_eq(h[0], 0x7c00);
    cr_assert_eq(h[1], 0x4000);
    cr_assert_eq(found16, 1.0f);
    float big = 1e30f, found32 = 0.0f; /* the same in f32 */
    float d[1] = {1e10f};
    cr_assert_eq(k_unscale_check_ref(DT_F32, d, 1, &big, &found32), OOM_OK);
    cr_assert_eq(found32, 1.0f);
}

/* ---- reductions ---------------------------------------------------------------------------------------------- */

Test(kernels, sum_known_values)
{
    const float a[6] = {1, 2, 3, 4, 5, 6}; /* 3 x 2 */
    float out[3] = {-1, -1, -1};
    cr_assert_eq(k_sum_rows_ref(DT_F32, out, a, 3, 2), OOM_OK);
    cr_assert(out[0] == 9.0f && out[1] == 12.0f && out[2] == -1.0f, "sum_rows: %g %g %g", (double)out[0],
              (double)out[1], (double)out[2]);
    cr_assert_eq(k_sum_rows_ref(DT_F32, out, a, 2, 3), OOM_OK); /* 2 x 3 */
    cr_assert(out[0] == 5.0f && out[1] == 7.0f && out[2] == 9.0f);
    cr_assert_eq(k_sum_rows_ref(DT_F32, out, NULL, 0, 3), OOM_OK); /* an empty sum is 0 */
    cr_assert(out[0] == 0.0f && out[1] == 0.0f && out[2] == 0.0f);
    float s = -1;
    cr_assert_eq(k_sum_all_ref(DT_F32, &s, a, 6), OOM_OK);
    cr_assert_eq(s, 21.0f);
    cr_assert_eq(k_sum_all_ref(DT_F32, &s, NULL, 0), OOM_OK);
    cr_assert_eq(s, 0.0f);
    uint16_t h[3] = {f32_to_bf16(1.0f), f32_to_bf16(0x1p-8f), f32_to_bf16(0x1p-8f)}, hs;
    cr_assert_eq(k_sum_all_ref(DT_BF16, &hs, h, 3), OOM_OK); /* accumulated in f32: 1 + 2^-7, a bf16 */
    cr_assert_eq(hs, 0x3f81);
}

/* sum_squares adds onto the caller's sum, in double, in index order; nothing read for n = 0. */
Test(kernels, sum_squares_known_values)
{
    const float a[3] = {1, 2, 3};
    double acc = 10;
    cr_assert_eq(k_sum_squares_ref(DT_F32, a, 3, &acc), OOM_OK);
    cr_assert_eq(acc, 24.0);
    cr_assert_eq(k_sum_squares_ref(DT_F32, NULL, 0, &acc), OOM_OK);
    cr_assert_eq(acc, 24.0);
    const float tiny[2] = {0x1p-30f, 1.0f}; /* (2^-30)^2 = 2^-60 survives in double, not in f32 */
    acc = 0;
    cr_assert_eq(k_sum_squares_ref(DT_F32, tiny, 2, &acc), OOM_OK);
    cr_assert_eq(acc, 1.0 + 0x1p-60);
    uint16_t h[2] = {f32_to_f16(3.0f), f32_to_f16(-0.5f)};
    acc = 0;
    cr_assert_eq(k_sum_squares_ref(DT_F16, h, 2, &acc), OOM_OK);
    cr_assert_eq(acc, 9.25);
    cr_assert_neq(k_sum_squares_ref(DT_F32, a, 3, NULL), OOM_OK);
    cr_assert_neq(k_sum_squares_ref(DT_I64, a, 1, &acc), OOM_OK);
}

/* 2^24 + 1000 ones: an f32 running sum stops at 2^24; the reference's pairwise sum is exact. */
Test(kernels, sum_all_does_not_stall)
{
    const int64_t n = ((int64_t)1 << 24) + 1000;
    float *a = xmalloc((size_t)n * sizeof *a), s = 0;
    for (int64_t i = 0; i < n; i++)
        a[i] = 1.0f;
    cr_assert_eq(k_sum_all_ref(DT_F32, &s, a, n), OOM_OK);
    cr_assert_eq(s, 16778216.0f, "sum of 2^24 + 1000 ones = %.1f", (double)s);
    free(a);
}

Test(kernels, sums_against_double)
{
    static const int64_t shapes[][2] = {{1, 1}, {7, 3}, {300, 300}, {1000, 17}, {5, 700}};
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        for (int64_t k = 0; k < COUNT(shapes); k++) {
            int64_t m = shapes[k][0], n = shapes[k][1];
            void *a = rand_buf(dt, m * n, -1, 1, 7 + (uint64_t)k);
            void *out = xmalloc((size_t)n * dtype_size(dt)), *all = xmalloc(dtype_size(dt));
            double *want = xmalloc((size_t)n * sizeof *want), *slack = xmalloc((size_t)n * sizeof *slack);
            double total = 0, total_abs = 0;
            for (int64_t j = 0; j < n; j++) {
                double s = 0, sa = 0;
                for (int64_t i = 0; i < m; i++) {
                    s += ld(dt, a, i * n + j);
                    sa += fabs(ld(dt, a, i * n + j));
                }
                want[j] = s;
                slack[j] = (64 + m / 64) * U32 * sa; /* runs of 64 rows, then the runs: a worst-case bound */
                total += s;
                total_abs += sa;
            }
            cr_assert_eq(k_sum_rows_ref(dt, out, a, m, n), OOM_OK);
            expect_near("sum_rows", dt, out, want, slack, n);
            cr_assert_eq(k_sum_all_ref(dt, all, a, m * n), OOM_OK);
            double slack_all =
                (40 + 64) * U32 * total_abs; /* 32 terms per lane, the lanes, <= 64 pairwise levels */
            expect_near("sum_all", dt, all, &total, &slack_all, 1);
            free(a), free(out), free(all), free(want), free(slack);
        }
    }
}

/* ---- log_softmax, nll, mse ----------------------------------------------------------------------------------- */

Test(kernels, log_softmax_known_values)
{
    const float a[10] = {0, 0, 0, 0, 1000, 1000, -INFINITY, 0, 1, 2};
    float out[10];
    cr_assert_eq(k_log_softmax_ref(DT_F32, out, a, 1, 4), OOM_OK); /* uniform row: -ln 4 */
    for (int j = 0; j < 4; j++)
        cr_assert(fabs(out[j] + log(4.0)) <= 0x1p-23, "[%d] = %.9g", j, (double)out[j]);
    cr_assert_eq(k_log_softmax_ref(DT_F32, out, a + 4, 2, 2), OOM_OK); /* no overflow; exp(-inf) = 0 */
    cr_assert(fabs(out[0] + log(2.0)) <= 0x1p-24 && fabs(out[1] + log(2.0)) <= 0x1p-24);
    cr_assert_eq(out[2], -INFINITY);
    cr_assert_eq(out[3], 0.0f);
    cr_assert_eq(k_log_softmax_ref(DT_F32, out, a + 7, 1, 3), OOM_OK); /* [0, 1, 2] */
    double lse = 2 + log(exp(-2.0) + exp(-1.0) + 1);
    for (int j = 0; j < 3; j++)
        cr_assert(fabs(out[j] - (j - lse)) <= 4 * 0x1p-24 * 3, "[%d] = %.9g, expected %.9g", j, (double)out[j],
                  j - lse);
    /* backward: y = log([0.25, 0.75]), go = [1, 0]: gi = go - softmax * sum(go) = [0.75, -0.75] */
    const float y[2] = {(float)log(0.25), (float)log(0.75)}, go[2] = {1, 0};
    float gi[2];
    cr_assert_eq(k_log_softmax_backward_ref(DT_F32, gi, go, y, 1, 2), OOM_OK);
    cr_assert(fabs(gi[0] - 0.75) <= 2e-7 && fabs(gi[1] + 0.75) <= 2e-7, "gi = %.9g %.9g", (double)gi[0],
              (double)gi[1]);
}

Test(kernels, log_softmax_against_double)
{
    static const int64_t shapes[][2] = {{3, 1}, {4, 10}, {2, 300}, {1, 1025}};
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        for (int64_t k = 0; k < COUNT(shapes); k++) {
            int64_t m = shapes[k][0], n = shapes[k][1], mn = m * n;
            void *a = rand_buf(dt, mn, -8, 8, 31 + (uint64_t)k), *go = rand_buf(dt, mn, -1, 1, 41 + (uint64_t)k);
            void *out = xmalloc((size_t)mn * dtype_size(dt)), *gi = xmalloc((size_t)mn * dtype_size(dt));
            double *want = xmalloc((size_t)mn * sizeof *want), *slack = xmalloc((size_t)mn * sizeof *slack);
            cr_assert_eq(k_log_softmax_ref(dt, out, a, m, n), OOM_OK);
            for (int64_t i = 0; i < m; i++) {
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < n; j++)
                    mx = fmax(mx, ld(dt, a, i * n + j));
                for (int64_t j = 0; j < n; j++)
                    s += exp(ld(dt, a, i * n + j) - mx);
                for (int64_t j = 0; j < n; j++) {
                    want[i * n + j] = ld(dt, a, i * n + j) - mx - log(s);
                    slack[i * n + j] = U32 * (4 * fabs(ld(dt, a, i * n + j) - mx) + 4 * log(s) + 64);
                }
            }
            expect_near("log_softmax", dt, out, want, slack, mn);
            /* backward on the stored y */
            cr_assert_eq(k_log_softmax_backward_ref(dt, gi, go, out, m, n), OOM_OK);
            for (int64_t i = 0; i < m; i++) {
                double s = 0, sa = 0;
                for (int64_t j = 0; j < n; j++) {
                    s += ld(dt, go, i * n + j);
                    sa += fabs(ld(dt, go, i * n + j));
                }
                for (int64_t j = 0; j < n; j++) {
                    double p = exp(ld(dt, out, i * n + j));
                    want[i * n + j] = ld(dt, go, i * n + j) - p * s;
                    slack[i * n + j] = U32 * (4 * fabs(ld(dt, go, i * n + j)) + p * (48 * sa + 4 * fabs(s)));
                }
            }
            expect_near("log_softmax_backward", dt, gi, want, slack, mn);
            free(a), free(go), free(out), free(gi), free(want), free(slack);
        }
    }
}

Test(kernels, nll_loss_known_values)
{
    const float logp[4] = {-1, -2, -3, -4}; /* 2 x 2 */
    const int64_t target[2] = {1, 0};
    float loss = 0, tw = 0;
    cr_assert_eq(k_nll_loss_ref(DT_F32, &loss, &tw, logp, target, 2, 2), OOM_OK);
    cr_assert_eq(loss, 2.5f);
    cr_assert_eq(tw, 2.0f);
    const float go = 1.0f;
    float gi[4] = {9, 9, 9, 9};
    cr_assert_eq(k_nll_loss_backward_ref(DT_F32, gi, &go, target, &tw, 2, 2), OOM_OK);
    const float gw[4] = {0, -0.5f, -0.5f, 0};
    cr_assert_arr_eq(gi, gw, sizeof gi);
    /* bf16: loss -(-2 - 3) / 2 and total_weight in the tensor's type */
    uint16_t hl[4], hloss, htw, hgo = f32_to_bf16(3.0f), hgi[4];
    for (int i = 0; i < 4; i++)
        hl[i] = f32_to_bf16(logp[i]);
    cr_assert_eq(k_nll_loss_ref(DT_BF16, &hloss, &htw, hl, target, 2, 2), OOM_OK);
    cr_assert(hloss == f32_to_bf16(2.5f) && htw == f32_to_bf16(2.0f));
    cr_assert_eq(k_nll_loss_backward_ref(DT_BF16, hgi, &hgo, target, &htw, 2, 2), OOM_OK);
    cr_assert(hgi[0] == 0 && hgi[1] == f32_to_bf16(-1.5f) && hgi[2] == f32_to_bf16(-1.5f) && hgi[3] == 0);
    /* an empty batch: mean of nothing, as PyTorch */
    cr_assert_eq(k_nll_loss_ref(DT_F32, &loss, &tw, NULL, NULL, 0, 2), OOM_OK);
    cr_assert(isnan(loss) && tw == 0.0f);
    /* a target out of range: EINVAL, nothing written */
    const int64_t bad[2] = {0, 2}, neg[2] = {-1, 0};
    loss = 7, tw = 7;
    cr_assert_eq(k_nll_loss_ref(DT_F32, &loss, &tw, logp, bad, 2, 2), OOM_EINVAL);
    cr_assert_eq(k_nll_loss_ref(DT_F32, &loss, &tw, logp, neg, 2, 2), OOM_EINVAL);
    cr_assert(loss == 7 && tw == 7);
    cr_assert_eq(k_nll_loss_backward_ref(DT_F32, gi, &go, bad, &tw, 2, 2), OOM_EINVAL);
    cr_assert_arr_eq(gi, gw, sizeof gi);
}

Test(kernels, nll_loss_against_double)
{
    const int64_t m = 300, n = 37;
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        void *logp = rand_buf(dt, m * n, -6, 0, 5);
        int64_t *target = xmalloc((size_t)m * sizeof *target);
        uint64_t s = 77;
        double sum = 0, sum_abs = 0;
        for (int64_t i = 0; i < m; i++) {
            target[i] = (int64_t)(rng_next(&s) % (uint64_t)n);
            sum += ld(dt, logp, i * n + target[i]);
            sum_abs += fabs(ld(dt, logp, i * n + target[i]));
        }
        _Alignas(8) unsigned char loss[8], tw[8];
        cr_assert_eq(k_nll_loss_ref(dt, loss, tw, logp, target, m, n), OOM_OK);
        double want = -sum / m, slack = (40 + 16) * U32 * sum_abs / m, want_tw = (double)m, zero = 0;
        expect_near("nll_loss", dt, loss, &want, &slack, 1);
        expect_near("nll_loss total_weight", dt, tw, &want_tw, &zero, 1);
        free(logp), free(target);
    }
}

Test(kernels, mse_loss_known_values)
{
    const float a[3] = {1, 2, 3}, b[3] = {1, 0, 0};
    float out = 0;
    cr_assert_eq(k_mse_loss_ref(DT_F32, &out, a, b, 3), OOM_OK);
    cr_assert_eq(out, 13.0f / 3.0f);
    const float go = 3.0f;
    float gi[3];
    cr_assert_eq(k_mse_loss_backward_ref(DT_F32, gi, &go, a, b, 3), OOM_OK); /* (2/3) (a - b) 3 */
    const float gw[3] = {0, 4, 6};
    cr_assert_arr_eq(gi, gw, sizeof gi);
    cr_assert_eq(k_mse_loss_ref(DT_F32, &out, NULL, NULL, 0), OOM_OK);
    cr_assert(isnan(out), "the mean of nothing is NaN");
}

Test(kernels, mse_loss_against_double)
{
    const int64_t n = 5000;
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        void *a = rand_buf(dt, n, -3, 3, 11), *b = rand_buf(dt, n, -3, 3, 12), *gi = xmalloc((size_t)n * 4);
        double sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = ld(dt, a, i) - ld(dt, b, i);
            sum += d * d;
        }
        _Alignas(8) unsigned char out[8], go[8];
        cr_assert_eq(k_mse_loss_ref(dt, out, a, b, n), OOM_OK);
        double want = sum / n, slack = (40 + 64 + 4) * U32 * want;
        expect_near("mse_loss", dt, out, &want, &slack, 1);
        st(dt, go, 0, 0.5f);
        cr_assert_eq(k_mse_loss_backward_ref(dt, gi, go, a, b, n), OOM_OK);
        double *w = xmalloc((size_t)n * sizeof *w), *sl = xmalloc((size_t)n * sizeof *sl);
        for (int64_t i = 0; i < n; i++) {
            w[i] = 2.0 / n * (ld(dt, a, i) - ld(dt, b, i)) * 0.5;
            sl[i] = 4 * U32 * fabs(w[i]);
        }
        expect_near("mse_loss_backward", dt, gi, w, sl, n);
        free(a), free(b), free(gi), free(w), free(sl);
    }
}

/* ---- optimizers ---------------------------------------------------------------------------------------------- */

/* Binary-exact steps of p = 1, g = 0.5, lr = 0.25, worked out by hand from torch.optim.SGD's code. */
Test(kernels, sgd_known_values)
{
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        _Alignas(8) unsigned char p[8], g[8], buf[8];
        st(dt, g, 0, 0.5f);
        /* momentum 0.5, dampening 0.5: buf = g on the first step, then 0.5 buf + 0.5 g */
        st(dt, p, 0, 1.0f);
        cr_assert_eq(k_sgd_step_ref(dt, p, g, buf, 1, 0.25f, 0.5f, 0.5f, 0.0f, false, true), OOM_OK);
        cr_assert(ld(dt, p, 0) == 0.875 && ld(dt, buf, 0) == 0.5, "%s: p %g buf %g", dtype_str(dt), ld(dt, p, 0),
                  ld(dt, buf, 0));
        cr_assert_eq(k_sgd_step_ref(dt, p, g, buf, 1, 0.25f, 0.5f, 0.5f, 0.0f, false, false), OOM_OK);
        cr_assert(ld(dt, p, 0) == 0.75 && ld(dt, buf, 0) == 0.5);
        /* nesterov, momentum 0.5: d = g + 0.5 buf */
        st(dt, p, 0, 1.0f);
        cr_assert_eq(k_sgd_step_ref(dt, p, g, buf, 1, 0.25f, 0.5f, 0.0f, 0.0f, true, true), OOM_OK);
        cr_assert(ld(dt, p, 0) == 0.8125 && ld(dt, buf, 0) == 0.5);
        cr_assert_eq(k_sgd_step_ref(dt, p, g, buf, 1, 0.25f, 0.5f, 0.0f, 0.0f, true, false), OOM_OK);
        cr_assert(ld(dt, p, 0) == 0.59375 && ld(dt, buf, 0) == 0.75, "%s: p %g buf %g", dtype_str(dt), ld(dt, p, 0),
                  ld(dt, buf, 0));
        /* weight decay 0.5, no momentum (buf may be NULL): d = g + 0.5 p = 1 */
        st(dt, p, 0, 1.0f);
        cr_assert_eq(k_sgd_step_ref(dt, p, g, NULL, 1, 0.25f, 0.0f, 0.0f, 0.5f, false, true), OOM_OK);
        cr_assert(ld(dt, p, 0) == 0.75);
    }
}

/* torch.optim.SGD's _single_tensor_sgd for one element, in double. */
static void sgd_double(double *p, double g, double *buf, bool first, double lr, double momentum, double dampening,
                       double weight_decay, bool nesterov)
{
    if (weight_decay != 0)
        g = g + weight_decay * *p;
    if (momentum != 0) {
        *buf = first ? g : *buf * momentum + (1 - dampening) * g;
        g = nesterov ? g + momentum * *buf : *buf;
    }
    *p = *p - lr * g;
}

Test(kernels, sgd_against_torch_formula)
{
    static const struct {
        float lr, momentum, dampening, weight_decay;
        bool nesterov;
    } cfg[] = {
        {0.1f, 0.9f, 0.0f, 0.0f, false},
        {0.05f, 0.9f, 0.0f, 1e-2f, true},
        {0.1f, 0.8f, 0.3f, 5e-4f, false},
        {0.2f, 0.0f, 0.0f, 0.1f, false},
    };
    const int64_t n = 64;
    for (int64_t c = 0; c < COUNT(cfg); c++) {
        float p[64], buf[64], g[64];
        double pd[64], bd[64];
        uint64_t s = 1000 + (uint64_t)c;
        for (int64_t i = 0; i < n; i++)
            pd[i] = p[i] = (float)(2 * rng_unit(&s) - 1);
        for (int step = 1; step <= 6; step++) {
            for (int64_t i = 0; i < n; i++)
                g[i] = (float)(2 * rng_unit(&s) - 1);
            cr_assert_eq(k_sgd_step_ref(DT_F32, p, g, buf, n, cfg[c].lr, cfg[c].momentum, cfg[c].dampening,
                                        cfg[c].weight_decay, cfg[c].nesterov, step == 1),
                         OOM_OK);
            for (int64_t i = 0; i < n; i++) {
                sgd_double(&pd[i], g[i], &bd[i], step == 1, cfg[c].lr, cfg[c].momentum, cfg[c].dampening,
                           cfg[c].weight_decay, cfg[c].nesterov);
                cr_assert(fabs(p[i] - pd[i]) <= 4e-6 * (1 + fabs(pd[i])),
                          "cfg %lld step %d [%lld]: p %.9g, torch %.9g", (long long)c, step, (long long)i,
                          (double)p[i], pd[i]);
                if (cfg[c].momentum != 0)
                    cr_assert(fabs(buf[i] - bd[i]) <= 4e-6 * (1 + fabs(bd[i])),
                              "cfg %lld step %d: buf %.9g, torch %.9g", (long long)c, step, (double)buf[i], bd[i]);
            }
        }
    }
}

/* Step 1 with binary-exact values: beta1 0.5, beta2 0.75, lr 0.125, eps 0, so bias corrections 0.5 and 0.25:
 * m = 0.25, v = 0.0625, denom = sqrt(v) / sqrt(0.25) = 0.5, p = 1 - (0.125 / 0.5) * (0.25 / 0.5) = 0.875. */
Test(kernels, adam_known_values)
{
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        _Alignas(8) unsigned char p[8], g[8], m[8], v[8];
        st(dt, p, 0, 1.0f), st(dt, g, 0, 0.5f), st(dt, m, 0, 0.0f), st(dt, v, 0, 0.0f);
        cr_assert_eq(k_adam_step_ref(dt, p, g, m, v, 1, 0.125f, 0.5f, 0.75f, 0.0f, 0.0f, 0.5f, 0.25f), OOM_OK);
        cr_assert(ld(dt, p, 0) == 0.875 && ld(dt, m, 0) == 0.25 && ld(dt, v, 0) == 0.0625, "%s: p %g m %g v %g",
                  dtype_str(dt), ld(dt, p, 0), ld(dt, m, 0), ld(dt, v, 0));
        /* weight decay 0.5: d = 0.5 + 0.5 x 1 = 1, m = 0.5, v = 0.25, denom = 1, p = 1 - 0.25 x 0.5 */
        st(dt, p, 0, 1.0f), st(dt, m, 0, 0.0f), st(dt, v, 0, 0.0f);
        cr_assert_eq(k_adam_step_ref(dt, p, g, m, v, 1, 0.125f, 0.5f, 0.75f, 0.0f, 0.5f, 0.5f, 0.25f), OOM_OK);
        cr_assert(ld(dt, p, 0) == 0.875 && ld(dt, m, 0) == 0.5 && ld(dt, v, 0) == 0.25);
    }
}

/* torch.optim.Adam's _single_tensor_adam for one element, in double (step counts from 1). */
static void adam_double(double *p, double g, double *m, double *v, int step, double lr, double beta1, double beta2,
                        double eps, double weight_decay)
{
    if (weight_decay != 0)
        g = g + weight_decay * *p;
    *m = *m + (1 - beta1) * (g - *m); /* exp_avg.lerp_(grad, 1 - beta1) */
    *v = *v * beta2 + (1 - beta2) * g * g;
    double bc1 = 1 - pow(beta1, step), bc2 = 1 - pow(beta2, step);
    double step_size = lr / bc1, denom = sqrt(*v) / sqrt(bc2) + eps;
    *p = *p - step_size * *m / denom;
}

Test(kernels, adam_against_torch_formula)
{
    static const struct {
        float lr, beta1, beta2, eps, weight_decay;
    } cfg[] = {
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f}, {1e-2f, 0.9f, 0.999f, 1e-8f, 1e-2f}, {0.1f, 0.5f, 0.9f, 1e-3f, 0.0f}};
    const int64_t n = 64;
    for (int64_t c = 0; c < COUNT(cfg); c++) {
        float p[64], g[64], m[64] = {0}, v[64] = {0};
        double pd[64], md[64] = {0}, vd[64] = {0};
        uint64_t s = 2000 + (uint64_t)c;
        for (int64_t i = 0; i < n; i++)
            pd[i] = p[i] = (float)(2 * rng_unit(&s) - 1);
        for (int step = 1; step <= 10; step++) {
            for (int64_t i = 0; i < n; i++)
                g[i] = (float)(2 * rng_unit(&s) - 1);
            /* the bias corrections as the runtime passes them: computed in double, rounded to f32 */
            float bc1 = (float)(1 - pow(cfg[c].beta1, step)), bc2 = (float)(1 - pow(cfg[c].beta2, step));
            cr_assert_eq(k_adam_step_ref(DT_F32, p, g, m, v, n, cfg[c].lr, cfg[c].beta1, cfg[c].beta2, cfg[c].eps,
                                         cfg[c].weight_decay, bc1, bc2),
                         OOM_OK);
            for (int64_t i = 0; i < n; i++) {
                adam_double(&pd[i], g[i], &md[i], &vd[i], step, cfg[c].lr, cfg[c].beta1, cfg[c].beta2, cfg[c].eps,
                            cfg[c].weight_decay);
                cr_assert(fabs(p[i] - pd[i]) <= 2e-6 * (1 + fabs(pd[i])),
                          "cfg %lld step %d [%lld]: p %.9g, torch %.9g", (long long)c, step, (long long)i,
                          (double)p[i], pd[i]);
                cr_assert(fabs(m[i] - md[i]) <= 1e-6 * (1 + fabs(md[i])), "cfg %lld step %d: m %.9g, torch %.9g",
                          (long long)c, step, (double)m[i], md[i]);
                cr_assert(fabs(v[i] - vd[i]) <= 1e-6 * vd[i] + 1e-12, "cfg %lld step %d: v %.9g, torch %.9g",
                          (long long)c, step, (double)v[i], vd[i]);
            }
        }
    }
}

/* PyTorch's default Adam (_multi_tensor_adam): the moments in place, a temporary denominator, then addcdiv;
 * weight decay first makes a temporary d = g + wd * p (_foreach_add). The same numbers as the formula. */
Test(kernels, adam_foreach_against_torch_formula)
{
    const int64_t n = 64;
    const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, wd = 1e-2f;
    float p[64], g[64], d[64], m[64] = {0}, v[64] = {0}, denom[64];
    double pd[64], md[64] = {0}, vd[64] = {0};
    uint64_t s = 4242;
    for (int64_t i = 0; i < n; i++)
        pd[i] = p[i] = (float)(2 * rng_unit(&s) - 1);
    for (int step = 1; step <= 10; step++) {
        for (int64_t i = 0; i < n; i++)
            g[i] = (float)(2 * rng_unit(&s) - 1);
        float bc1 = (float)(1 - pow(beta1, step)), bc2 = (float)(1 - pow(beta2, step));
        cr_assert_eq(k_add_ref(DT_F32, d, g, p, wd, n), OOM_OK);
        cr_assert_eq(k_adam_moments_ref(DT_F32, m, v, d, n, beta1, beta2), OOM_OK);
        cr_assert_eq(k_adam_denom_ref(DT_F32, denom, v, n, bc2, eps), OOM_OK);
        cr_assert_eq(k_addcdiv_ref(DT_F32, p, m, denom, (float)(-(double)lr / bc1), n), OOM_OK);
        for (int64_t i = 0; i < n; i++) {
            adam_double(&pd[i], g[i], &md[i], &vd[i], step, lr, beta1, beta2, eps, wd);
            cr_assert(fabs(p[i] - pd[i]) <= 2e-6 * (1 + fabs(pd[i])), "step %d [%lld]: p %.9g, torch %.9g", step,
                      (long long)i, (double)p[i], pd[i]);
            cr_assert(fabs(m[i] - md[i]) <= 1e-6 * (1 + fabs(md[i])), "step %d: m %.9g, torch %.9g", step,
                      (double)m[i], md[i]);
        }
    }
}

/* Binary-exact values: m = lerp(0, 0.5, 0.5) = 0.25, v = 0.75 x 0 + 0.25 x 0.25 = 0.0625, denom = 0.25 / sqrt(0.25)
 * + 0 = 0.5, p = 1 + (-0.25) x 0.25 / 0.5 = 0.875 (the adam_known_values step, in three passes). */
Test(kernels, adam_foreach_known_values)
{
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        _Alignas(8) unsigned char p[8], g[8], m[8], v[8], dn[8];
        st(dt, p, 0, 1.0f), st(dt, g, 0, 0.5f), st(dt, m, 0, 0.0f), st(dt, v, 0, 0.0f);
        cr_assert_eq(k_adam_moments_ref(dt, m, v, g, 1, 0.5f, 0.75f), OOM_OK);
        cr_assert_eq(k_adam_denom_ref(dt, dn, v, 1, 0.25f, 0.0f), OOM_OK);
        cr_assert_eq(k_addcdiv_ref(dt, p, m, dn, -0.25f, 1), OOM_OK);
        cr_assert(ld(dt, m, 0) == 0.25 && ld(dt, v, 0) == 0.0625 && ld(dt, dn, 0) == 0.5 && ld(dt, p, 0) == 0.875,
                  "%s: m %g v %g denom %g p %g", dtype_str(dt), ld(dt, m, 0), ld(dt, v, 0), ld(dt, dn, 0),
                  ld(dt, p, 0));
    }
}

/* ---- random numbers ------------------------------------------------------------------------------------------ */

/* oom_rng_hash(s, i) is splitmix64's (i + 1)-th output from state s: its published outputs for seed 0. krand.h's
 * copy (the one the kernels use) agrees with it. */
Test(kernels, rng_hash_known_values)
{
    cr_assert_eq(oom_rng_hash(0, 0), 0xe220a8397b1dcdafULL);
    cr_assert_eq(oom_rng_hash(0, 1), 0x6e789e6aa1b965f4ULL);
    cr_assert_eq(oom_rng_hash(0, 2), 0x06c45d188009454fULL);
    uint64_t s = 5;
    for (int k = 0; k < 100000; k++) {
        uint64_t seed = rng_next(&s), i = rng_next(&s) >> (k % 64);
        cr_assert_eq(krand_hash(seed, i), oom_rng_hash(seed, i));
    }
}

/* uniform: element i is lo + (hi - lo) * ((h >> 40) 2^-24) of h = oom_rng_hash(seed, i); on [-1, 1) every
 * value is exact in f32, so the comparison is exact. */
Test(kernels, rand_uniform_values)
{
    const int64_t n = 4096;
    float *a = xmalloc((size_t)n * sizeof *a), *b = xmalloc((size_t)n * sizeof *b);
    cr_assert_eq(k_rand_uniform_ref(DT_F32, a, n, 42, -1.0f, 1.0f), OOM_OK);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(oom_rng_hash(42, (uint64_t)i) >> 40) * 0x1p-24;
        cr_assert_eq((double)a[i], -1.0 + 2.0 * u, "[%lld] = %a", (long long)i, (double)a[i]);
    }
    cr_assert_eq(k_rand_uniform_ref(DT_F32, b, n, 42, -1.0f, 1.0f), OOM_OK);
    cr_assert_arr_eq(a, b, (size_t)n * sizeof *a, "the same seed must give the same values");
    cr_assert_eq(k_rand_uniform_ref(DT_F32, b, n, 43, -1.0f, 1.0f), OOM_OK);
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++)
        same += a[i] == b[i];
    cr_assert_leq(same, 2, "seeds 42 and 43 share %lld of %lld values", (long long)same, (long long)n);
    /* a prefix is the same stream: element i does not depend on n */
    cr_assert_eq(k_rand_uniform_ref(DT_F32, b, 10, 42, -1.0f, 1.0f), OOM_OK);
    cr_assert_arr_eq(a, b, 10 * sizeof *a);
    /* another range: two f32 roundings of the double value */
    cr_assert_eq(k_rand_uniform_ref(DT_F32, a, n, 7, 0.5f, 3.0f), OOM_OK);
    for (int64_t i = 0; i < n; i++) {
        double w = 0.5 + 2.5 * ((double)(oom_rng_hash(7, (uint64_t)i) >> 40) * 0x1p-24);
        cr_assert(fabs(a[i] - w) <= 0x1p-23 * 3 && a[i] < 3.0f, "[%lld] = %.9g, expected %.9g", (long long)i,
                  (double)a[i], w);
    }
    free(a), free(b);
}

/* 10^6 samples: every value in [lo, hi) exactly; the ends are reached; mean and variance of U(-1, 1) within five
 * standard errors. */
Test(kernels, rand_uniform_statistics)
{
    const int64_t n = 1000000;
    float *a = xmalloc((size_t)n * sizeof *a);
    cr_assert_eq(k_rand_uniform_ref(DT_F32, a, n, 2024, -1.0f, 1.0f), OOM_OK);
    double sum = 0, sum2 = 0, lo = 1, hi = -1;
    for (int64_t i = 0; i < n; i++) {
        cr_assert(a[i] >= -1.0f && a[i] < 1.0f, "[%lld] = %a out of [-1, 1)", (long long)i, (double)a[i]);
        sum += a[i], sum2 += (double)a[i] * a[i];
        lo = fmin(lo, a[i]), hi = fmax(hi, a[i]);
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    cr_assert(fabs(mean) < 5 * sqrt(1.0 / 3 / n), "mean %g", mean);
    cr_assert(fabs(var - 1.0 / 3) < 5 * sqrt(4.0 / 45 / n), "variance %g", var); /* Var(U^2) = 4/45 */
    cr_assert(lo < -1 + 1e-4 && hi > 1 - 1e-4, "range [%g, %g]", lo, hi);
    free(a);
}

/* Rounded to bf16 (f16), u close to 1 gives 1 itself; the kernel stores the value below instead. Over 10^6
 * samples about 2000 (250) land there, so the maximum is exactly that value. */
Test(kernels, rand_uniform_half_upper_bound)
{
    const int64_t n = 1000000;
    uint16_t *h = xmalloc((size_t)n * sizeof *h);
    const uint16_t top[2] = {0x3bff, 0x3f7f}; /* the largest f16, bf16 below 1 */
    for (int t = 1; t < 3; t++) {
        dtype dt = float_types[t];
        cr_assert_eq(k_rand_uniform_ref(dt, h, n, 99, 0.0f, 1.0f), OOM_OK);
        uint16_t mx = 0;
        for (int64_t i = 0; i < n; i++) {
            cr_assert(ld(dt, h, i) >= 0 && ld(dt, h, i) < 1, "%s [%lld] = %g", dtype_str(dt), (long long)i,
                      ld(dt, h, i));
            mx = h[i] > mx ? h[i] : mx;
        }
        cr_assert_eq(mx, top[t - 1], "%s: the largest value is %#06x", dtype_str(dt), mx);
    }
    free(h);
}

/* In f32 on [1, 2), u = 1 - 2^-24 gives 1 + u = 2 - 2^-24, which rounds (to even) to 2: the element where that
 * happens gets 2 - 2^-23. */
Test(kernels, rand_uniform_f32_upper_bound)
{
    uint64_t i = 0;
    while ((oom_rng_hash(5, i) >> 40) != 0xffffffu) /* about 2^24 tries */
        i++;
    float *a = xmalloc((size_t)(i + 1) * sizeof *a);
    cr_assert_eq(k_rand_uniform_ref(DT_F32, a, (int64_t)i + 1, 5, 1.0f, 2.0f), OOM_OK);
    cr_assert_eq(f32_bits(a[i]), f32_bits(2.0f - 0x1p-23f), "[%llu] = %a", (unsigned long long)i, (double)a[i]);
    free(a);
}

/* normal: N(0, 1) moments over 10^6 samples; |z| <= sqrt(-2 ln 2^-24) (u1 >= 2^-24); element values against
 * Box-Muller in double (logf, cosf, sqrtf: within 4e-6 (1 + |z|)); N(3, 2) is 3 + 2 z of the same z. */
Test(kernels, rand_normal_values)
{
    const int64_t n = 1000000;
    float *z = xmalloc((size_t)n * sizeof *z), *y = xmalloc((size_t)n * sizeof *y);
    cr_assert_eq(k_rand_normal_ref(DT_F32, z, n, 77, 0.0f, 1.0f), OOM_OK);
    double sum = 0, sum2 = 0, inside = 0, zmax = sqrt(-2 * log(0x1p-24));
    for (int64_t i = 0; i < n; i++) {
        sum += z[i], sum2 += (double)z[i] * z[i], inside += fabs(z[i]) < 1;
        cr_assert(fabs(z[i]) <= zmax + 1e-5, "[%lld] = %g", (long long)i, (double)z[i]);
    }
    double mean = sum / n, var = sum2 / n - mean * mean;
    cr_assert(fabs(mean) < 5 / sqrt((double)n), "mean %g", mean);
    cr_assert(fabs(var - 1) < 5 * sqrt(2.0 / n), "variance %g", var);
    cr_assert(fabs(inside / n - 0.682689) < 5 * sqrt(0.2166 / n), "P(|z| < 1) = %g", inside / n);
    for (int64_t i = 0; i < 10000; i++) {
        uint64_t h = oom_rng_hash(77, (uint64_t)i);
        double u1 = (double)((h >> 40) + 1) * 0x1p-24, u2 = (double)((h >> 16) & 0xffffff) * 0x1p-24;
        double w = sqrt(-2 * log(u1)) * cos(2 * PI * u2);
        cr_assert(fabs(z[i] - w) <= 4e-6 * (1 + fabs(w)), "[%lld] = %.9g, Box-Muller %.9g", (long long)i,
                  (double)z[i], w);
    }
    cr_assert_eq(k_rand_normal_ref(DT_F32, y, n, 77, 3.0f, 2.0f), OOM_OK);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(y[i], 3.0f + 2.0f * z[i], "[%lld]", (long long)i);
    free(z), free(y);
}

Test(kernels, rand_int_values)
{
    const int64_t n = 100000, lo = -3, hi = 4;
    int64_t *a = xmalloc((size_t)n * sizeof *a), count[7] = {0};
    cr_assert_eq(k_rand_int_ref(a, n, 11, lo, hi), OOM_OK);
    for (int64_t i = 0; i < n; i++) {
        cr_assert(a[i] >= lo && a[i] < hi, "[%lld] = %lld", (long long)i, (long long)a[i]);
        cr_assert_eq(a[i], lo + (int64_t)(oom_rng_hash(11, (uint64_t)i) % 7));
        count[a[i] - lo]++;
    }
    double sd = sqrt(n * (1.0 / 7) * (6.0 / 7));
    for (int k = 0; k < 7; k++)
        cr_assert(fabs(count[k] - n / 7.0) < 5 * sd, "value %d drawn %lld times", k + (int)lo, (long long)count[k]);
    /* the whole int64 range: hi - lo overflows int64 but not the kernel */
    cr_assert_eq(k_rand_int_ref(a, 1000, 12, INT64_MIN, INT64_MAX), OOM_OK);
    int64_t neg = 0;
    for (int64_t i = 0; i < 1000; i++) {
        cr_assert_eq((uint64_t)a[i], (uint64_t)INT64_MIN + oom_rng_hash(12, (uint64_t)i) % UINT64_MAX);
        cr_assert_neq(a[i], INT64_MAX);
        neg += a[i] < 0;
    }
    cr_assert(neg > 400 && neg < 600, "%lld of 1000 negative", (long long)neg);
    free(a);
}

/* ---- bad arguments ------------------------------------------------------------------------------------------- */

static void expect_einval(oom_status st, const char *call)
{
    cr_assert_eq(st, OOM_EINVAL, "%s returned %s", call, oom_status_str(st));
    cr_assert(strstr(oom_error_msg(), "bad arguments") != NULL, "%s left no detail: '%s'", call, oom_error_msg());
    oom_error_clear();
}
#define EXPECT_EINVAL(call) expect_einval((call), #call)

/* The same checks in both versions; the CUDA versions make them before any CUDA call, so this runs anywhere. */
static void bad_arguments(bool cuda)
{
    float x[16] = {0}, one = 1.0f;
    int64_t t[4] = {0, 0, 0, 0};
    const dtype bogus = (dtype)99;
    EXPECT_EINVAL(KIMPL(cuda, fill)(DT_F32, x, -1, 0.0f));
    EXPECT_EINVAL(KIMPL(cuda, fill)(DT_F32, NULL, 1, 0.0f));
    EXPECT_EINVAL(KIMPL(cuda, fill)(bogus, x, 1, 0.0f));
    EXPECT_EINVAL(KIMPL(cuda, fill)(DT_I64, x, 1, NAN));
    EXPECT_EINVAL(KIMPL(cuda, cast)(DT_F32, x, DT_I64, x + 8, 1));
    EXPECT_EINVAL(KIMPL(cuda, cast)(DT_I64, x, DT_F32, x + 8, 1));
    EXPECT_EINVAL(KIMPL(cuda, cast)(DT_F32, x, DT_F16, NULL, 1));
    EXPECT_EINVAL(KIMPL(cuda, cast)(DT_F32, x, DT_BF16, x, 1)); /* widening in place */
    EXPECT_EINVAL(KIMPL(cuda, cast)(DT_F32, x, bogus, x + 8, 1));
    EXPECT_EINVAL(KIMPL(cuda, add)(DT_I64, x, x, x, 1.0f, 1));
    EXPECT_EINVAL(KIMPL(cuda, add)(DT_F32, x, x, NULL, 1.0f, 1));
    EXPECT_EINVAL(KIMPL(cuda, add)((dtype)-1, x, x, x, 1.0f, 1));
    EXPECT_EINVAL(KIMPL(cuda, mul)(DT_F16, x, x, x, -2));
    EXPECT_EINVAL(KIMPL(cuda, scale)(DT_BF16, NULL, x, 2.0f, 3));
    EXPECT_EINVAL(KIMPL(cuda, relu)(bogus, x, x, 1));
    EXPECT_EINVAL(KIMPL(cuda, relu_backward)(DT_F32, x, x, NULL, 1));
    EXPECT_EINVAL(KIMPL(cuda, tanh)(DT_F32, x, NULL, 1));
    EXPECT_EINVAL(KIMPL(cuda, tanh_backward)(DT_F32, NULL, x, x, 1));
    EXPECT_EINVAL(KIMPL(cuda, bias_rows)(DT_F32, x, x, -1, 2));
    EXPECT_EINVAL(KIMPL(cuda, bias_rows)(DT_F32, x, x, INT64_MAX, 2)); /* m * n overflows */
    EXPECT_EINVAL(KIMPL(cuda, bias_rows)(DT_F32, x, NULL, 2, 2));
    EXPECT_EINVAL(KIMPL(cuda, sum_rows)(DT_F32, x, x, 2, -1));
    EXPECT_EINVAL(KIMPL(cuda, sum_rows)(DT_F32, NULL, x, 2, 2));
    EXPECT_EINVAL(KIMPL(cuda, sum_all)(DT_F32, NULL, NULL, 0)); /* the output is written even for n = 0 */
    EXPECT_EINVAL(KIMPL(cuda, sum_all)(DT_I64, x, x, 1));
    EXPECT_EINVAL(KIMPL(cuda, sum_squares)(DT_F32, x, 1, NULL));
    EXPECT_EINVAL(KIMPL(cuda, log_softmax)(DT_F32, x, x, 2, -3));
    EXPECT_EINVAL(KIMPL(cuda, log_softmax)(DT_F32, x, NULL, 2, 3));
    EXPECT_EINVAL(KIMPL(cuda, log_softmax_backward)(DT_F32, x, x, NULL, 1, 1));
    EXPECT_EINVAL(KIMPL(cuda, nll_loss)(DT_F32, x, NULL, x, t, 1, 2));
    EXPECT_EINVAL(KIMPL(cuda, nll_loss)(DT_F32, x, x, x, t, -1, 2));
    EXPECT_EINVAL(KIMPL(cuda, nll_loss)(DT_F32, x, x, x, NULL, 1, 2));
    EXPECT_EINVAL(KIMPL(cuda, nll_loss_backward)(DT_F32, x, x, NULL, x, 1, 2));
    EXPECT_EINVAL(KIMPL(cuda, nll_loss_backward)(DT_I64, x, x, t, x, 1, 2));
    EXPECT_EINVAL(KIMPL(cuda, mse_loss)(DT_F32, NULL, NULL, NULL, 0));
    EXPECT_EINVAL(KIMPL(cuda, mse_loss_backward)(DT_F32, x, NULL, x, x, 1));
    EXPECT_EINVAL(KIMPL(cuda, sgd_step)(DT_F32, x, x, NULL, 1, 0.1f, 0.9f, 0, 0, false, true)); /* buf needed */
    EXPECT_EINVAL(KIMPL(cuda, sgd_step)(DT_F32, x, x, x, -1, 0.1f, 0.0f, 0, 0, false, true));
    EXPECT_EINVAL(KIMPL(cuda, adam_step)(DT_F32, x, x, x, x, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0, 0.0f, 0.5f));
    EXPECT_EINVAL(KIMPL(cuda, adam_step)(DT_F32, x, x, x, x, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0, 0.5f, -1.0f));
    EXPECT_EINVAL(KIMPL(cuda, adam_step)(DT_F32, x, x, x, x, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0, NAN, 0.5f));
    EXPECT_EINVAL(KIMPL(cuda, adam_step)(DT_F32, x, x, x, NULL, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0, 0.5f, 0.5f));
    EXPECT_EINVAL(KIMPL(cuda, adam_moments)(DT_I64, x, x, x, 1, 0.9f, 0.999f));
    EXPECT_EINVAL(KIMPL(cuda, adam_moments)(DT_F32, x, NULL, x, 1, 0.9f, 0.999f));
    EXPECT_EINVAL(KIMPL(cuda, adam_denom)(DT_F32, x, x, 1, 0.0f, 1e-8f));
    EXPECT_EINVAL(KIMPL(cuda, adam_denom)(DT_F32, x, x, -1, 0.5f, 1e-8f));
    EXPECT_EINVAL(KIMPL(cuda, addcdiv)(DT_F32, x, NULL, x, 1.0f, 1));
    EXPECT_EINVAL(KIMPL(cuda, addcdiv)(DT_I64, x, x, x, 1.0f, 1));
    EXPECT_EINVAL(KIMPL(cuda, rand_uniform)(DT_F32, x, 1, 0, 1.0f, 1.0f)); /* hi <= lo */
    EXPECT_EINVAL(KIMPL(cuda, rand_uniform)(DT_F32, x, 1, 0, 2.0f, 1.0f));
    EXPECT_EINVAL(KIMPL(cuda, rand_uniform)(DT_F32, x, 1, 0, -INFINITY, 1.0f));
    EXPECT_EINVAL(KIMPL(cuda, rand_uniform)(DT_F32, x, 1, 0, -3e38f, 3e38f)); /* hi - lo overflows */
    EXPECT_EINVAL(KIMPL(cuda, rand_uniform)(DT_I64, x, 1, 0, 0.0f, 1.0f));
    EXPECT_EINVAL(KIMPL(cuda, rand_normal)(DT_F32, x, 1, 0, 0.0f, -1.0f));
    EXPECT_EINVAL(KIMPL(cuda, rand_normal)(DT_F32, x, 1, 0, 0.0f, NAN));
    EXPECT_EINVAL(KIMPL(cuda, rand_normal)(DT_F16, NULL, 1, 0, 0.0f, 1.0f));
    EXPECT_EINVAL(KIMPL(cuda, rand_int)(t, 1, 0, 5, 5));
    EXPECT_EINVAL(KIMPL(cuda, rand_int)(t, -1, 0, 0, 5));
    EXPECT_EINVAL(KIMPL(cuda, rand_int)(NULL, 1, 0, 0, 5));
    EXPECT_EINVAL(KIMPL(cuda, unscale_check)(DT_F32, x, 1, NULL, x));
    EXPECT_EINVAL(KIMPL(cuda, unscale_check)(DT_I64, x, 1, &one, x));
    EXPECT_EINVAL(KIMPL(cuda, sigmoid)(DT_I64, x, x, 1));
    EXPECT_EINVAL(KIMPL(cuda, sigmoid)(DT_F32, x, NULL, 1));
    EXPECT_EINVAL(KIMPL(cuda, sigmoid_backward)(DT_F16, x, NULL, x, 1));
    EXPECT_EINVAL(KIMPL(cuda, sigmoid_backward)(DT_F32, x, x, x, -1));
    EXPECT_EINVAL(KIMPL(cuda, add_scalar)(DT_BF16, NULL, x, 1.0f, 2));
    EXPECT_EINVAL(KIMPL(cuda, add_scalar)(bogus, x, x, 1.0f, 1));
    /* size 0 with no buffers is fine for the elementwise kernels */
    cr_assert_eq(KIMPL(cuda, add)(DT_F32, NULL, NULL, NULL, 1.0f, 0), OOM_OK);
    cr_assert_eq(KIMPL(cuda, unscale_check)(DT_BF16, NULL, 0, NULL, NULL), OOM_OK);
    cr_assert_eq(KIMPL(cuda, rand_int)(NULL, 0, 0, 0, 1), OOM_OK);
}

Test(kernels, bad_arguments_ref)
{
    bad_arguments(false);
    int64_t t[2] = {0, 3};
    float x[8] = {0};
    EXPECT_EINVAL(k_nll_loss_ref(DT_F32, x, x + 1, x, t, 2, 3)); /* target 3 of 3 classes */
    EXPECT_EINVAL(k_nll_loss_backward_ref(DT_F32, x, x, t, x + 1, 2, 3));
    EXPECT_EINVAL(k_nll_loss_ref(DT_F32, x, x + 1, x, t, 1, 0)); /* no class at all */
}

Test(kernels, bad_arguments_cuda)
{
#ifdef OOM_HAVE_CUDA
    bad_arguments(true);
#else
    cr_skip_test("built without CUDA");
#endif
}

/* ---- CUDA versions against the references (OOMLAB_TEST_BACKEND=cuda) ----------------------------------------- */
#ifdef OOM_HAVE_CUDA /* a build without nvcc has no CUDA versions to compare */

#define GUARD 64    /* bytes after (and, misaligned, before) every output that must keep the poison */
#define POISON 0x7f /* f32/bf16 3.4e38, f16 NaN, i64 0x7f7f...: never a result of these tests */
#define NBUF 4

static const int64_t ew_sizes[] = {0, 1, 3, 1025, ((int64_t)1 << 20) + 7};

/* The device under test and NBUF device buffers of cap bytes plus guards. */
typedef struct gpu {
    device *dev;
    devptr buf[NBUF];
    size_t cap;
} gpu;

static bool small_only(void) { return getenv("OOMLAB_TEST_SMALL") != NULL; }

/* Skips the test unless the cuda backend is under test. */
static gpu gpu_open(size_t cap)
{
    if (test_backend() != DEVICE_CUDA)
        cr_skip_test("needs OOMLAB_TEST_BACKEND=cuda");
#ifndef OOM_HAVE_CUDA
    cr_skip_test("built without CUDA");
#endif
    gpu g = {.cap = cap};
    device_options o = {.kind = DEVICE_CUDA};
    cr_assert_eq(device_open(&o, &g.dev), OOM_OK, "cannot open the cuda backend: %s", oom_error_msg());
    for (int k = 0; k < NBUF; k++)
        cr_assert_eq(device_mem_alloc(g.dev, cap + 2 * GUARD, &g.buf[k]), OOM_OK);
    return g;
}

static void gpu_close(gpu *g)
{
    for (int k = 0; k < NBUF; k++)
        cr_assert_eq(device_mem_free(g->dev, g->buf[k], g->cap + 2 * GUARD), OOM_OK);
    device_close(g->dev);
}

/* Device address of byte `off` of buffer k (GUARD bytes in, so a guard precedes it too). */
static devptr at(const gpu *g, int k, size_t off) { return g->buf[k] + GUARD + off; }
static void *dp(devptr p) { return (void *)(uintptr_t)p; }

static void poison_all(gpu *g)
{
    for (int k = 0; k < NBUF; k++)
        cr_assert_eq(device_fill(g->dev, g->buf[k], POISON, g->cap + 2 * GUARD), OOM_OK);
}

static void up(gpu *g, devptr dst, const void *src, size_t bytes)
{
    if (bytes)
        cr_assert_eq(device_copy_htod(g->dev, dst, src, bytes), OOM_OK);
}

/* A synchronous copy back: it also reports a kernel that failed. */
static void down(gpu *g, void *dst, devptr src, size_t bytes)
{
    if (bytes)
        cr_assert_eq(device_copy_dtoh(g->dev, dst, src, bytes), OOM_OK, "copy back: %s", oom_error_msg());
}

/* The `bytes` before and after [p, p + len) still hold the poison. */
static void expect_guards(gpu *g, const char *what, devptr p, size_t len, size_t before)
{
    unsigned char tail[GUARD], head[GUARD];
    down(g, tail, p + len, GUARD);
    down(g, head, p - before, before);
    for (size_t i = 0; i < GUARD; i++)
        cr_assert_eq(tail[i], POISON, "%s: byte %zu after the output was written", what, i);
    for (size_t i = 0; i < before; i++)
        cr_assert_eq(head[i], POISON, "%s: byte %zu before the output was written", what, i);
}

/* Every element was written: none still has the poison's bits. */
static void expect_written(const char *what, const void *p, int64_t n, size_t es)
{
    unsigned char pat[8];
    memset(pat, POISON, sizeof pat);
    for (int64_t i = 0; i < n; i++)
        cr_assert_neq(memcmp((const char *)p + (size_t)i * es, pat, es), 0, "%s: element %lld not written", what,
                      (long long)i);
}

/* cuda against ref: bit for bit (any NaN matches any NaN: the payload the hardware gives a NaN result is not
 * the CPU's), or ||got - want|| / ||want|| <= 1e-5 (f32), 1e-2 (f16, bf16). */
static void expect_match(const char *what, dtype dt, const void *got, const void *want, int64_t n, bool exact)
{
    if (exact || dt == DT_I64) {
        size_t es = dtype_size(dt);
        for (int64_t i = 0; i < n; i++)
            if (dt == DT_I64 || !isnan(ld(dt, got, i)) || !isnan(ld(dt, want, i)))
                cr_assert_eq(memcmp((const char *)got + (size_t)i * es, (const char *)want + (size_t)i * es, es), 0,
                             "%s %s [%lld]: %.9g, ref %.9g (bits differ)", what, dtype_str(dt), (long long)i,
                             ld(dt, got, i), ld(dt, want, i));
        return;
    }
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        double gv = ld(dt, got, i), wv = ld(dt, want, i);
        if (isnan(wv) || isinf(wv)) {
            cr_assert(isnan(wv) ? isnan(gv) : gv == wv, "%s %s [%lld]: %g, ref %g", what, dtype_str(dt),
                      (long long)i, gv, wv);
            continue;
        }
        cr_assert(isfinite(gv), "%s %s [%lld]: %g, ref %g", what, dtype_str(dt), (long long)i, gv, wv);
        err += (gv - wv) * (gv - wv);
        norm += wv * wv;
    }
    double tol = dt == DT_F32 ? 1e-5 : 1e-2;
    double rel = norm > 0 ? sqrt(err / norm) : sqrt(err);
    cr_assert(rel <= tol, "%s %s n=%lld: relative error %.3g > %g", what, dtype_str(dt), (long long)n, rel, tol);
}

enum layout { SEPARATE, IN_PLACE, MISALIGNED };
static const char *const layout_name[] = {"separate", "in place", "misaligned"};

/* One elementwise op, one type, one size, one layout: buffers 1 and 2 hold a and b, the output is buffer 0
 * (or a). MISALIGNED shifts every pointer by one element (the scalar path). */
static void cuda_ew_case(gpu *g, const ew_op *op, dtype dt, int64_t n, enum layout lay, uint64_t seed)
{
    size_t es = dtype_size(dt), bytes = (size_t)n * es, off = lay == MISALIGNED ? es : 0;
    char what[96];
    snprintf(what, sizeof what, "%s %s n=%lld %s", op->name, dtype_str(dt), (long long)n, layout_name[lay]);
    void *a = rand_buf(dt, n, op->lo, op->hi, seed), *b = rand_buf(dt, n, op->lo, op->hi, seed + 1);
    void *want = xmalloc(bytes), *got = xmalloc(bytes);
    poison_all(g);
    up(g, at(g, 1, off), a, bytes);
    up(g, at(g, 2, off), b, bytes);
    devptr out = lay == IN_PLACE ? at(g, 1, off) : at(g, 0, off);
    cr_assert_eq(op->call(true, dt, dp(out), dp(at(g, 1, off)), dp(at(g, 2, off)), n), OOM_OK, "%s: %s", what,
                 oom_error_msg());
    down(g, got, out, bytes);
    cr_assert_eq(op->call(false, dt, want, a, b, n), OOM_OK);
    if (lay != IN_PLACE)
        expect_written(what, got, n, es);
    expect_match(what, dt, got, want, n, op->exact);
    expect_guards(g, what, out, bytes, off);
    free(a), free(b), free(want), free(got);
}

Test(kernels, cuda_elementwise)
{
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 4);
    for (int64_t k = 0; k < COUNT(ew_ops); k++)
        for (int t = 0; t < 3; t++)
            for (int64_t s = 0; s < COUNT(ew_sizes); s++)
                for (int lay = 0; lay < 3; lay++)
                    cuda_ew_case(&g, &ew_ops[k], float_types[t], ew_sizes[s], (enum layout)lay,
                                 (uint64_t)(k * 1000 + t * 100 + s * 10 + lay));
    gpu_close(&g);
}

/* unscale_check on the device: a bit-exact against the ref; found_inf (a device scalar) set by an inf in the
 * vector body, a NaN in the tail, an f16 overflow; left alone (not cleared) otherwise. */
Test(kernels, cuda_unscale_check)
{
    const int64_t n = 1025;
    gpu g = gpu_open((size_t)n * 4);
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        size_t bytes = (size_t)n * dtype_size(dt);
        for (int c = 0; c < 4; c++) { /* 0: finite; 1: inf at 7; 2: NaN at n - 1; 3: found already 1 */
            void *a = rand_buf(dt, n, -100, 100, 50 + (uint64_t)c), *got = xmalloc(bytes);
            if (c == 1)
                st(dt, a, 7, INFINITY);
            if (c == 2)
                st(dt, a, n - 1, NAN);
            float inv = 0.25f, found0 = c == 3 ? 1.0f : 0.0f, found = found0, dfound = -1;
            poison_all(&g);
            up(&g, at(&g, 0, 0), a, bytes);
            up(&g, at(&g, 1, 0), &inv, sizeof inv);
            up(&g, at(&g, 2, 0), &found0, sizeof found0);
            cr_assert_eq(k_unscale_check_cuda(dt, dp(at(&g, 0, 0)), n, dp(at(&g, 1, 0)), dp(at(&g, 2, 0))), OOM_OK);
            down(&g, got, at(&g, 0, 0), bytes);
            down(&g, &dfound, at(&g, 2, 0), sizeof dfound);
            cr_assert_eq(k_unscale_check_ref(dt, a, n, &inv, &found), OOM_OK);
            expect_match("unscale_check", dt, got, a, n, true);
            cr_assert_eq(dfound, found, "%s case %d: found_inf %g, ref %g", dtype_str(dt), c, (double)dfound,
                         (double)found);
            cr_assert_eq(found, c == 0 ? 0.0f : 1.0f);
            free(a), free(got);
        }
    }
    /* f16: 40000 x 2 overflows when stored */
    uint16_t h = f32_to_f16(40000.0f), hg;
    float two = 2.0f, zero = 0.0f, dfound = -1;
    up(&g, at(&g, 0, 0), &h, 2);
    up(&g, at(&g, 1, 0), &two, 4);
    up(&g, at(&g, 2, 0), &zero, 4);
    cr_assert_eq(k_unscale_check_cuda(DT_F16, dp(at(&g, 0, 0)), 1, dp(at(&g, 1, 0)), dp(at(&g, 2, 0))), OOM_OK);
    down(&g, &hg, at(&g, 0, 0), 2);
    down(&g, &dfound, at(&g, 2, 0), 4);
    cr_assert(hg == 0x7c00 && dfound == 1.0f, "f16 overflow: %#06x, found_inf %g", hg, (double)dfound);
    gpu_close(&g);
}

Test(kernels, cuda_fill)
{
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 8);
    const dtype types[4] = {DT_F32, DT_F16, DT_BF16, DT_I64};
    for (int t = 0; t < 4; t++)
        for (int64_t s = 0; s < COUNT(ew_sizes); s++)
            for (int mis = 0; mis < 2; mis++) {
                dtype dt = types[t];
                int64_t n = ew_sizes[s];
                size_t es = dtype_size(dt), bytes = (size_t)n * es, off = mis ? es : 0;
                void *got = xmalloc(bytes), *want = xmalloc(bytes);
                poison_all(&g);
                cr_assert_eq(k_fill_cuda(dt, dp(at(&g, 0, off)), n, -2.5f), OOM_OK, "%s", oom_error_msg());
                cr_assert_eq(k_fill_ref(dt, want, n, -2.5f), OOM_OK);
                down(&g, got, at(&g, 0, off), bytes);
                expect_match("fill", dt, got, want, n, true);
                expect_guards(&g, "fill", at(&g, 0, off), bytes, off);
                free(got), free(want);
            }
    gpu_close(&g);
}

Test(kernels, cuda_cast)
{
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 8);
    const dtype types[3] = {DT_F32, DT_F16, DT_BF16};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++) {
            dtype dst_dt = d < 3 ? types[d] : DT_I64, src_dt = s < 3 ? types[s] : DT_I64;
            if ((d == 3) != (s == 3))
                continue; /* i64 only to i64 */
            for (int64_t k = 0; k < COUNT(ew_sizes); k++) {
                int64_t n = ew_sizes[k];
                size_t sb = (size_t)n * dtype_size(src_dt), db = (size_t)n * dtype_size(dst_dt);
                void *src = xmalloc(sb + 8), *got = xmalloc(db), *want = xmalloc(db);
                if (src_dt == DT_I64) {
                    uint64_t r = 9;
                    for (int64_t i = 0; i < n; i++)
                        ((int64_t *)src)[i] = (int64_t)rng_next(&r);
                } else {
                    free(src);
                    src = rand_buf(src_dt, n, -70000, 70000, 60 + (uint64_t)k); /* f16 overflows at 65520 */
                }
                char what[64];
                snprintf(what, sizeof what, "cast %s -> %s", dtype_str(src_dt), dtype_str(dst_dt));
                poison_all(&g);
                up(&g, at(&g, 1, 0), src, sb);
                cr_assert_eq(k_cast_cuda(dst_dt, dp(at(&g, 0, 0)), src_dt, dp(at(&g, 1, 0)), n), OOM_OK, "%s: %s",
                             what, oom_error_msg());
                down(&g, got, at(&g, 0, 0), db);
                cr_assert_eq(k_cast_ref(dst_dt, want, src_dt, src, n), OOM_OK);
                expect_written(what, got, n, dtype_size(dst_dt));
                expect_match(what, dst_dt, got, want, n, true);
                expect_guards(&g, what, at(&g, 0, 0), db, 0);
                if (dtype_size(dst_dt) == dtype_size(src_dt)) { /* in place */
                    cr_assert_eq(k_cast_cuda(dst_dt, dp(at(&g, 1, 0)), src_dt, dp(at(&g, 1, 0)), n), OOM_OK);
                    down(&g, got, at(&g, 1, 0), db);
                    expect_match(what, dst_dt, got, want, n, true);
                }
                free(src), free(got), free(want);
            }
        }
    gpu_close(&g);
}

static const int64_t row_shapes[][2] = {{256, 10}, {64, 256}, {1, 4096}, {3, 1025}, {0, 5}, {5, 0}, {8192, 4096}};

/* The shapes of row_shapes this run takes (OOMLAB_TEST_SMALL drops the last, 8192 x 4096). */
static int64_t row_shape_count(void) { return COUNT(row_shapes) - (small_only() ? 1 : 0); }

static size_t row_cap(void) { return (size_t)8192 * 4096 * 4; }

Test(kernels, cuda_bias_rows)
{
    gpu g = gpu_open(row_cap() + 16);
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < row_shape_count(); k++)
            for (int mis = 0; mis < 2; mis++) {
                dtype dt = float_types[t];
                int64_t m = row_shapes[k][0], n = row_shapes[k][1];
                size_t es = dtype_size(dt), bytes = (size_t)(m * n) * es, off = mis ? es : 0;
                void *bias = rand_buf(dt, n, -5, 5, 70 + (uint64_t)k), *got = xmalloc(bytes),
                     *want = xmalloc(bytes);
                poison_all(&g);
                up(&g, at(&g, 1, off), bias, (size_t)n * es);
                cr_assert_eq(k_bias_rows_cuda(dt, dp(at(&g, 0, off)), dp(at(&g, 1, off)), m, n), OOM_OK);
                down(&g, got, at(&g, 0, off), bytes);
                cr_assert_eq(k_bias_rows_ref(dt, want, bias, m, n), OOM_OK);
                expect_written("bias_rows", got, m * n, es);
                expect_match("bias_rows", dt, got, want, m * n, true);
                expect_guards(&g, "bias_rows", at(&g, 0, off), bytes, off);
                free(bias), free(got), free(want);
            }
    gpu_close(&g);
}

Test(kernels, cuda_sum_rows)
{
    gpu g = gpu_open(row_cap());
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < row_shape_count(); k++) {
            dtype dt = float_types[t];
            int64_t m = row_shapes[k][0], n = row_shapes[k][1];
            size_t es = dtype_size(dt);
            void *a = rand_buf(dt, m * n, -1, 1, 80 + (uint64_t)k), *got = xmalloc((size_t)n * es),
                 *want = xmalloc((size_t)n * es);
            poison_all(&g);
            up(&g, at(&g, 1, 0), a, (size_t)(m * n) * es);
            cr_assert_eq(k_sum_rows_cuda(dt, dp(at(&g, 0, 0)), dp(at(&g, 1, 0)), m, n), OOM_OK);
            down(&g, got, at(&g, 0, 0), (size_t)n * es);
            cr_assert_eq(k_sum_rows_ref(dt, want, a, m, n), OOM_OK);
            expect_written("sum_rows", got, n, es);
            expect_match("sum_rows", dt, got, want, n, false);
            expect_guards(&g, "sum_rows", at(&g, 0, 0), (size_t)n * es, 0);
            free(a), free(got), free(want);
        }
    gpu_close(&g);
}

/* sum_squares on the device against the reference (both in double; the device adds in another order), over the
 * elementwise sizes, aligned and not, onto a sum the caller holds. */
Test(kernels, cuda_sum_squares)
{
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 4);
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < COUNT(ew_sizes); k++)
            for (int mis = 0; mis < 2; mis++) {
                dtype dt = float_types[t];
                int64_t n = ew_sizes[k];
                size_t es = dtype_size(dt), off = mis ? es : 0;
                void *a = rand_buf(dt, n, -1, 1, 70 + (uint64_t)k);
                poison_all(&g);
                up(&g, at(&g, 1, off), a, (size_t)n * es);
                double got = 0.5, want = 0.5;
                cr_assert_eq(k_sum_squares_cuda(dt, dp(at(&g, 1, off)), n, &got), OOM_OK, "%s", oom_error_msg());
                cr_assert_eq(k_sum_squares_ref(dt, a, n, &want), OOM_OK);
                cr_assert(fabs(got - want) <= 1e-12 * want, "sum_squares %s n %lld: %.17g, ref %.17g", dtype_str(dt),
                          (long long)n, got, want);
                free(a);
            }
    gpu_close(&g);
}

/* sum_all (several blocks from 16,384 elements on) and mse_loss (one block) and mse_loss_backward, over the
 * elementwise sizes, aligned and not. */
Test(kernels, cuda_sum_all_and_mse)
{
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 4);
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < COUNT(ew_sizes); k++)
            for (int mis = 0; mis < 2; mis++) {
                dtype dt = float_types[t];
                int64_t n = ew_sizes[k];
                size_t es = dtype_size(dt), bytes = (size_t)n * es, off = mis ? es : 0;
                void *a = rand_buf(dt, n, -1, 1, 90 + (uint64_t)k), *b = rand_buf(dt, n, -1, 1, 95 + (uint64_t)k);
                void *got = xmalloc(bytes + 8), *want = xmalloc(bytes + 8), *go = rand_buf(dt, 1, 0.5, 2, k);
                poison_all(&g);
                up(&g, at(&g, 1, off), a, bytes);
                up(&g, at(&g, 2, off), b, bytes);
                up(&g, at(&g, 3, 0), go, es);
                /* the scalars: sum_all's at byte 16 of buffer 3, mse_loss's at byte 32; go at byte 0 */
                cr_assert_eq(k_sum_all_cuda(dt, dp(at(&g, 3, 16)), dp(at(&g, 1, off)), n), OOM_OK);
                down(&g, got, at(&g, 3, 16), es);
                cr_assert_eq(k_sum_all_ref(dt, want, a, n), OOM_OK);
                expect_match("sum_all", dt, got, want, 1, false);
                cr_assert_eq(k_mse_loss_cuda(dt, dp(at(&g, 3, 32)), dp(at(&g, 1, off)), dp(at(&g, 2, off)), n),
                             OOM_OK);
                down(&g, got, at(&g, 3, 32), es);
                cr_assert_eq(k_mse_loss_ref(dt, want, a, b, n), OOM_OK);
                expect_match("mse_loss", dt, got, want, 1, false); /* n = 0: NaN on both */
                expect_guards(&g, "sum_all and mse_loss", at(&g, 3, 16), 16 + es, 16 - es);
                cr_assert_eq(k_mse_loss_backward_cuda(dt, dp(at(&g, 0, off)), dp(at(&g, 3, 0)), dp(at(&g, 1, off)),
                                                      dp(at(&g, 2, off)), n),
                             OOM_OK);
                down(&g, got, at(&g, 0, off), bytes);
                cr_assert_eq(k_mse_loss_backward_ref(dt, want, go, a, b, n), OOM_OK);
                expect_written("mse_loss_backward", got, n, es);
                expect_match("mse_loss_backward", dt, got, want, n, true);
                expect_guards(&g, "mse_loss_backward", at(&g, 0, off), bytes, off);
                free(a), free(b), free(got), free(want), free(go);
            }
    gpu_close(&g);
}

Test(kernels, cuda_log_softmax)
{
    gpu g = gpu_open(row_cap());
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < row_shape_count(); k++) {
            dtype dt = float_types[t];
            int64_t m = row_shapes[k][0], n = row_shapes[k][1], mn = m * n;
            size_t es = dtype_size(dt), bytes = (size_t)mn * es;
            char what[64];
            snprintf(what, sizeof what, "log_softmax %lldx%lld", (long long)m, (long long)n);
            void *a = rand_buf(dt, mn, -10, 10, 100 + (uint64_t)k),
                 *go = rand_buf(dt, mn, -1, 1, 110 + (uint64_t)k);
            void *y = xmalloc(bytes), *got = xmalloc(bytes), *want = xmalloc(bytes);
            poison_all(&g);
            up(&g, at(&g, 1, 0), a, bytes);
            up(&g, at(&g, 2, 0), go, bytes);
            cr_assert_eq(k_log_softmax_cuda(dt, dp(at(&g, 0, 0)), dp(at(&g, 1, 0)), m, n), OOM_OK);
            down(&g, got, at(&g, 0, 0), bytes);
            cr_assert_eq(k_log_softmax_ref(dt, y, a, m, n), OOM_OK);
            expect_written(what, got, mn, es);
            expect_match(what, dt, got, y, mn, false);
            expect_guards(&g, what, at(&g, 0, 0), bytes, 0);
            /* in place */
            cr_assert_eq(k_log_softmax_cuda(dt, dp(at(&g, 1, 0)), dp(at(&g, 1, 0)), m, n), OOM_OK);
            down(&g, got, at(&g, 1, 0), bytes);
            expect_match(what, dt, got, y, mn, false);
            /* backward on the reference's y */
            up(&g, at(&g, 1, 0), y, bytes);
            cr_assert_eq(
                k_log_softmax_backward_cuda(dt, dp(at(&g, 3, 0)), dp(at(&g, 2, 0)), dp(at(&g, 1, 0)), m, n),
                OOM_OK);
            down(&g, got, at(&g, 3, 0), bytes);
            cr_assert_eq(k_log_softmax_backward_ref(dt, want, go, y, m, n), OOM_OK);
            expect_written(what, got, mn, es);
            expect_match("log_softmax_backward", dt, got, want, mn, false);
            expect_guards(&g, "log_softmax_backward", at(&g, 3, 0), bytes, 0);
            free(a), free(go), free(y), free(got), free(want);
        }
    gpu_close(&g);
}

Test(kernels, cuda_nll_loss)
{
    gpu g = gpu_open(row_cap());
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < row_shape_count(); k++) {
            dtype dt = float_types[t];
            int64_t m = row_shapes[k][0], n = row_shapes[k][1], mn = m * n;
            if (n == 0)
                continue; /* no class for a target */
            size_t es = dtype_size(dt), bytes = (size_t)mn * es;
            void *logp = rand_buf(dt, mn, -9, 0, 120 + (uint64_t)k),
                 *go = rand_buf(dt, 1, 0.5, 2, 130 + (uint64_t)k);
            int64_t *target = xmalloc((size_t)m * sizeof *target + 8);
            uint64_t r = 140 + (uint64_t)k;
            for (int64_t i = 0; i < m; i++)
                target[i] = (int64_t)(rng_next(&r) % (uint64_t)n);
            _Alignas(8) unsigned char dl[8], dtw[8], rl[8], rtw[8];
            void *got = xmalloc(bytes), *want = xmalloc(bytes);
            poison_all(&g);
            up(&g, at(&g, 1, 0), logp, bytes);
            up(&g, at(&g, 2, 0), target, (size_t)m * sizeof *target);
            up(&g, at(&g, 3, 0), go, es);
            /* loss and total_weight: two scalars in buffer 0, 16 bytes apart */
            cr_assert_eq(
                k_nll_loss_cuda(dt, dp(at(&g, 0, 0)), dp(at(&g, 0, 16)), dp(at(&g, 1, 0)), dp(at(&g, 2, 0)), m, n),
                OOM_OK);
            down(&g, dl, at(&g, 0, 0), es);
            down(&g, dtw, at(&g, 0, 16), es);
            cr_assert_eq(k_nll_loss_ref(dt, rl, rtw, logp, target, m, n), OOM_OK);
            expect_match("nll_loss", dt, dl, rl, 1, false);
            expect_match("nll_loss total_weight", dt, dtw, rtw, 1, true);
            /* backward with the device's total_weight */
            cr_assert_eq(k_nll_loss_backward_cuda(dt, dp(at(&g, 1, 0)), dp(at(&g, 3, 0)), dp(at(&g, 2, 0)),
                                                  dp(at(&g, 0, 16)), m, n),
                         OOM_OK);
            down(&g, got, at(&g, 1, 0), bytes);
            cr_assert_eq(k_nll_loss_backward_ref(dt, want, go, target, rtw, m, n), OOM_OK);
            expect_written("nll_loss_backward", got, mn, es);
            expect_match("nll_loss_backward", dt, got, want, mn, true);
            expect_guards(&g, "nll_loss_backward", at(&g, 1, 0), bytes, 0);
            free(logp), free(go), free(target), free(got), free(want);
        }
    gpu_close(&g);
}

/* A target outside [0, n) fails the kernel's device assertion: the next synchronising call reports OOM_ECUDA.
 * (Not named cuda_*: compute-sanitizer runs filter on that prefix and would count the assertion.) */
Test(kernels, assert_nll_target_cuda)
{
    gpu g = gpu_open(4096);
    const float logp[4] = {-1, -2, -3, -4};
    const int64_t target[2] = {0, 2};
    up(&g, at(&g, 1, 0), logp, sizeof logp);
    up(&g, at(&g, 2, 0), target, sizeof target);
    cr_assert_eq(
        k_nll_loss_cuda(DT_F32, dp(at(&g, 0, 0)), dp(at(&g, 0, 16)), dp(at(&g, 1, 0)), dp(at(&g, 2, 0)), 2, 2),
        OOM_OK, "the launch itself succeeds");
    float loss;
    cr_assert_eq(device_copy_dtoh(g.dev, &loss, at(&g, 0, 0), sizeof loss), OOM_ECUDA);
    cr_assert(strstr(oom_error_msg(), "Assert") != NULL, "error record: %s", oom_error_msg());
    device_close(g.dev); /* the context is unusable after a device assertion: no frees */
}

/* SGD (momentum, nesterov, weight decay, plain) and Adam for three steps each, on device and host side by
 * side; every state tensor compared after every step. */
Test(kernels, cuda_optimizers)
{
    static const struct {
        float lr, momentum, dampening, weight_decay;
        bool nesterov;
    } sgd[] = {{0.1f, 0.9f, 0.0f, 0.0f, false},
               {0.05f, 0.9f, 0.0f, 1e-2f, true},
               {0.1f, 0.8f, 0.3f, 5e-4f, false},
               {0.2f, 0.0f, 0.0f, 0.1f, false}};
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 4);
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < COUNT(ew_sizes); k++)
            for (int mis = 0; mis < 2; mis++) {
                dtype dt = float_types[t];
                int64_t n = ew_sizes[k];
                size_t es = dtype_size(dt), bytes = (size_t)n * es, off = mis ? es : 0;
                void *got = xmalloc(bytes);
                for (int64_t c = 0; c < COUNT(sgd) + 1; c++) { /* the last round is Adam */
                    bool adam = c == COUNT(sgd);
                    void *p = rand_buf(dt, n, -1, 1, 150 + (uint64_t)c), *s1 = rand_buf(dt, n, 0, 0, 0);
                    void *s2 = rand_buf(dt, n, 0, 0, 0); /* buf / m, v: zeros */
                    poison_all(&g);
                    up(&g, at(&g, 0, off), p, bytes);
                    up(&g, at(&g, 2, off), s1, bytes);
                    up(&g, at(&g, 3, off), s2, bytes);
                    for (int step = 1; step <= 3; step++) {
                        void *grad = rand_buf(dt, n, -1, 1, 160 + (uint64_t)(c * 10 + step));
                        up(&g, at(&g, 1, off), grad, bytes);
                        void *dp0 = dp(at(&g, 0, off)), *dp1 = dp(at(&g, 1, off)), *dp2 = dp(at(&g, 2, off)),
                             *dp3 = dp(at(&g, 3, off));
                        if (adam) {
                            float bc1 = (float)(1 - pow(0.9, step)), bc2 = (float)(1 - pow(0.999, step));
                            cr_assert_eq(k_adam_step_cuda(dt, dp0, dp1, dp2, dp3, n, 1e-2f, 0.9f, 0.999f, 1e-8f,
                                                          1e-2f, bc1, bc2),
                                         OOM_OK);
                            cr_assert_eq(k_adam_step_ref(dt, p, grad, s1, s2, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 1e-2f,
                                                         bc1, bc2),
                                         OOM_OK);
                        } else {
                            cr_assert_eq(k_sgd_step_cuda(dt, dp0, dp1, sgd[c].momentum != 0 ? dp2 : NULL, n,
                                                         sgd[c].lr, sgd[c].momentum, sgd[c].dampening,
                                                         sgd[c].weight_decay, sgd[c].nesterov, step == 1),
                                         OOM_OK);
                            cr_assert_eq(k_sgd_step_ref(dt, p, grad, sgd[c].momentum != 0 ? s1 : NULL, n, sgd[c].lr,
                                                        sgd[c].momentum, sgd[c].dampening, sgd[c].weight_decay,
                                                        sgd[c].nesterov, step == 1),
                                         OOM_OK);
                        }
                        char what[80];
                        snprintf(what, sizeof what, "%s %lld step %d n=%lld%s", adam ? "adam" : "sgd", (long long)c,
                                 step, (long long)n, mis ? " misaligned" : "");
                        down(&g, got, at(&g, 0, off), bytes);
                        expect_match(what, dt, got, p, n, false);
                        if (adam || sgd[c].momentum != 0) {
                            down(&g, got, at(&g, 2, off), bytes);
                            expect_match(what, dt, got, s1, n, false);
                        }
                        if (adam) {
                            down(&g, got, at(&g, 3, off), bytes);
                            expect_match(what, dt, got, s2, n, false);
                        }
                        expect_guards(&g, what, at(&g, 0, off), bytes, off);
                        free(grad);
                    }
                    free(p), free(s1), free(s2);
                }
                free(got);
            }
    gpu_close(&g);
}

Test(kernels, cuda_adam_foreach)
{
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 4);
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < COUNT(ew_sizes); k++)
            for (int mis = 0; mis < 2; mis++) {
                dtype dt = float_types[t];
                int64_t n = ew_sizes[k];
                size_t es = dtype_size(dt), bytes = (size_t)n * es, off = mis ? es : 0;
                void *m = rand_buf(dt, n, -1, 1, 700), *v = rand_buf(dt, n, 0, 1, 701), *gr = rand_buf(dt, n, -1, 1, 702);
                void *p = rand_buf(dt, n, -1, 1, 703), *dn = xmalloc(bytes + 1), *got = xmalloc(bytes + 1);
                poison_all(&g);
                up(&g, at(&g, 0, off), m, bytes);
                up(&g, at(&g, 1, off), v, bytes);
                up(&g, at(&g, 2, off), gr, bytes);
                char what[80];
                snprintf(what, sizeof what, "adam foreach n=%lld%s", (long long)n, mis ? " misaligned" : "");
                /* buffers: 0 m, 1 v, 2 g then p, 3 denom */
                cr_assert_eq(k_adam_moments_cuda(dt, dp(at(&g, 0, off)), dp(at(&g, 1, off)), dp(at(&g, 2, off)), n,
                                                 0.9f, 0.999f),
                             OOM_OK);
                cr_assert_eq(k_adam_moments_ref(dt, m, v, gr, n, 0.9f, 0.999f), OOM_OK);
                cr_assert_eq(k_adam_denom_cuda(dt, dp(at(&g, 3, off)), dp(at(&g, 1, off)), n, 0.271f, 1e-8f), OOM_OK);
                cr_assert_eq(k_adam_denom_ref(dt, dn, v, n, 0.271f, 1e-8f), OOM_OK);
                up(&g, at(&g, 2, off), p, bytes);
                cr_assert_eq(k_addcdiv_cuda(dt, dp(at(&g, 2, off)), dp(at(&g, 0, off)), dp(at(&g, 3, off)), -1e-2f, n),
                             OOM_OK);
                cr_assert_eq(k_addcdiv_ref(dt, p, m, dn, -1e-2f, n), OOM_OK);
                down(&g, got, at(&g, 0, off), bytes);
                expect_match(what, dt, got, m, n, false);
                down(&g, got, at(&g, 1, off), bytes);
                expect_match(what, dt, got, v, n, false);
                down(&g, got, at(&g, 3, off), bytes);
                expect_written(what, got, n, es);
                expect_match(what, dt, got, dn, n, false);
                expect_guards(&g, what, at(&g, 3, off), bytes, off);
                down(&g, got, at(&g, 2, off), bytes);
                expect_match(what, dt, got, p, n, false);
                expect_guards(&g, what, at(&g, 2, off), bytes, off);
                free(m), free(v), free(gr), free(p), free(dn), free(got);
            }
    gpu_close(&g);
}

Test(kernels, cuda_random)
{
    gpu g = gpu_open((size_t)(ew_sizes[COUNT(ew_sizes) - 1] + 1) * 8);
    static const float ranges[][2] = {{-1.0f, 1.0f}, {0.5f, 3.0f}, {0.0f, 1.0f}, {1.0f, 2.0f}};
    for (int t = 0; t < 3; t++)
        for (int64_t k = 0; k < COUNT(ew_sizes); k++) {
            dtype dt = float_types[t];
            int64_t n = ew_sizes[k];
            size_t es = dtype_size(dt), bytes = (size_t)n * es;
            void *got = xmalloc(bytes), *want = xmalloc(bytes);
            for (int r = 0; r < COUNT(ranges); r++) {
                poison_all(&g);
                uint64_t seed = 1000 + (uint64_t)(k * 10 + r);
                cr_assert_eq(k_rand_uniform_cuda(dt, dp(at(&g, 0, 0)), n, seed, ranges[r][0], ranges[r][1]),
                             OOM_OK);
                down(&g, got, at(&g, 0, 0), bytes);
                cr_assert_eq(k_rand_uniform_ref(dt, want, n, seed, ranges[r][0], ranges[r][1]), OOM_OK);
                expect_written("rand_uniform", got, n, es);
                expect_match("rand_uniform", dt, got, want, n, true);
                expect_guards(&g, "rand_uniform", at(&g, 0, 0), bytes, 0);
            }
            /* normal: logf, cosf, sqrtf on the device are within a few ulps of libm's: per element,
             * |cuda - ref| <= 1e-6 (|mean| + 6 std) (|z| <= 5.77), plus one ulp of a 16-bit type (a rounding
             * that flips) */
            const float mean = 0.5f, sd = 3.0f;
            poison_all(&g);
            cr_assert_eq(k_rand_normal_cuda(dt, dp(at(&g, 0, 0)), n, 7, mean, sd), OOM_OK);
            down(&g, got, at(&g, 0, 0), bytes);
            cr_assert_eq(k_rand_normal_ref(dt, want, n, 7, mean, sd), OOM_OK);
            expect_written("rand_normal", got, n, es);
            for (int64_t i = 0; i < n; i++) {
                double gv = ld(dt, got, i), wv = ld(dt, want, i);
                double tol =
                    1e-6 * (fabs(mean) + 6 * sd) + (dt == DT_F32 ? 0 : 2 * uround(dt) * fabs(wv) + utiny(dt));
                cr_assert(fabs(gv - wv) <= tol, "rand_normal %s [%lld]: %.9g, ref %.9g", dtype_str(dt),
                          (long long)i, gv, wv);
            }
            expect_guards(&g, "rand_normal", at(&g, 0, 0), bytes, 0);
            free(got), free(want);
        }
    for (int64_t k = 0; k < COUNT(ew_sizes); k++) { /* rand_int: bit-exact, including a range past INT64_MAX */
        int64_t n = ew_sizes[k];
        size_t bytes = (size_t)n * 8;
        int64_t *got = xmalloc(bytes), *want = xmalloc(bytes);
        for (int r = 0; r < 2; r++) {
            int64_t lo = r ? INT64_MIN : -3, hi = r ? INT64_MAX : 1000;
            poison_all(&g);
            cr_assert_eq(k_rand_int_cuda(dp(at(&g, 0, 0)), n, 31, lo, hi), OOM_OK);
            down(&g, got, at(&g, 0, 0), bytes);
            cr_assert_eq(k_rand_int_ref(want, n, 31, lo, hi), OOM_OK);
            expect_match("rand_int", DT_I64, got, want, n, true);
            expect_guards(&g, "rand_int", at(&g, 0, 0), bytes, 0);
        }
        free(got), free(want);
    }
    gpu_close(&g);
}

#endif /* OOM_HAVE_CUDA */

/* ---- the retained_graph scenario: pow_scalar and the fused GRU cell ------------------------------------------ */

Test(kernels, pow_scalar_known_values)
{
    const float a[4] = {3.0f, -2.0f, 0.5f, 4.0f};
    float out[4];
    const struct {
        float e;
        float want[4];
    } cases[] = {
        {2.0f, {9.0f, 4.0f, 0.25f, 16.0f}},  {1.0f, {3.0f, -2.0f, 0.5f, 4.0f}},    {0.0f, {1.0f, 1.0f, 1.0f, 1.0f}},
        {3.0f, {27.0f, -8.0f, 0.125f, 64.0f}}, {-1.0f, {1.0f / 3.0f, -0.5f, 2.0f, 0.25f}},
        {-2.0f, {1.0f / 9.0f, 0.25f, 4.0f, 0.0625f}},
    };
    for (int64_t c = 0; c < COUNT(cases); c++) {
        cr_assert_eq(k_pow_scalar_ref(DT_F32, out, a, cases[c].e, 4), OOM_OK);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(out[i], cases[c].want[i], "pow(%g, %g) = %.9g", (double)a[i], (double)cases[c].e,
                         (double)out[i]);
    }
    cr_assert_eq(k_pow_scalar_ref(DT_F32, out, a + 3, 0.5f, 1), OOM_OK);
    cr_assert_eq(out[0], 2.0f);
    cr_assert_eq(k_pow_scalar_ref(DT_F32, out, a + 3, -0.5f, 1), OOM_OK);
    cr_assert_eq(out[0], 0.5f);
    cr_assert_eq(k_pow_scalar_ref(DT_F32, out, a + 3, 2.5f, 1), OOM_OK);
    cr_assert_eq(out[0], 32.0f);
    cr_assert(isnan((k_pow_scalar_ref(DT_F32, out, a + 1, 0.5f, 1), out[0])), "sqrt(-2) is NaN");
    uint16_t h[2] = {f32_to_bf16(3.0f), f32_to_bf16(-2.0f)};
    cr_assert_eq(k_pow_scalar_ref(DT_BF16, h, h, 2.0f, 2), OOM_OK); /* in place */
    cr_assert_eq(bf16_to_f32(h[0]), 9.0f);
    cr_assert_eq(bf16_to_f32(h[1]), 4.0f);
}

/* The fused GRU cell of kgru.h in double, from the stored operands (biases NULL: none). */
static void gru_double(dtype dt, const void *ig, const void *hg, const void *hx, const void *b1, const void *b2,
                       int64_t batch, int64_t h, double *hy, double *ws)
{
    for (int64_t b = 0; b < batch; b++)
        for (int64_t j = 0; j < h; j++) {
            int64_t g = b * 3 * h + j, w = b * 5 * h + j;
            double bias[6] = {0};
            for (int k = 0; b1 && k < 3; k++) {
                bias[k] = ld(dt, b1, j + k * h);
                bias[3 + k] = ld(dt, b2, j + k * h);
            }
            double r = 1 / (1 + exp(-(ld(dt, ig, g) + ld(dt, hg, g) + bias[0] + bias[3])));
            double z = 1 / (1 + exp(-(ld(dt, ig, g + h) + ld(dt, hg, g + h) + bias[1] + bias[4])));
            double hn = ld(dt, hg, g + 2 * h) + bias[5];
            double n = tanh(ld(dt, ig, g + 2 * h) + bias[2] + r * hn);
            double x = ld(dt, hx, b * h + j);
            hy[b * h + j] = n + z * (x - n);
            ws[w] = r, ws[w + h] = z, ws[w + 2 * h] = n, ws[w + 3 * h] = x, ws[w + 4 * h] = hn;
        }
}

/* Forward against double on random operands, every type, with and without biases; then backward against its
 * double formula evaluated on the stored workspace. Slack: a few f32 operations on values of magnitude <= 8. */
Test(kernels, gru_cell_against_double)
{
    const int64_t batch = 7, h = 9;
    for (int t = 0; t < 3; t++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            dtype dt = float_types[t];
            size_t es = dtype_size(dt);
            void *ig = rand_buf(dt, batch * 3 * h, -2, 2, 1), *hg = rand_buf(dt, batch * 3 * h, -2, 2, 2);
            void *hx = rand_buf(dt, batch * h, -1, 1, 3), *go = rand_buf(dt, batch * h, -1, 1, 4);
            void *b1 = with_bias ? rand_buf(dt, 3 * h, -1, 1, 5) : NULL;
            void *b2 = with_bias ? rand_buf(dt, 3 * h, -1, 1, 6) : NULL;
            void *hy = xmalloc((size_t)(batch * h) * es), *ws = xmalloc((size_t)(batch * 5 * h) * es);
            double *want_hy = xmalloc((size_t)(batch * h) * sizeof(double));
            double *want_ws = xmalloc((size_t)(batch * 5 * h) * sizeof(double));
            double *slack = xmalloc((size_t)(batch * 5 * h) * sizeof(double));
            for (int64_t i = 0; i < batch * 5 * h; i++)
                slack[i] = 64 * U32;
            cr_assert_eq(k_gru_cell_ref(dt, hy, ws, ig, hg, hx, b1, b2, batch, h), OOM_OK);
            gru_double(dt, ig, hg, hx, b1, b2, batch, h, want_hy, want_ws);
            char what[64];
            snprintf(what, sizeof what, "gru_cell hy (bias %d)", with_bias);
            expect_near(what, dt, hy, want_hy, slack, batch * h);
            snprintf(what, sizeof what, "gru_cell workspace (bias %d)", with_bias);
            expect_near(what, dt, ws, want_ws, slack, batch * 5 * h);
            for (int64_t i = 0; i < batch * h; i++) /* hx is copied bit for bit */
                cr_assert_eq(memcmp((char *)ws + (size_t)((i / h) * 5 * h + 3 * h + i % h) * es, (char *)hx + i * es,
                                    es), 0);

            void *gi = xmalloc((size_t)(batch * 3 * h) * es), *gh = xmalloc((size_t)(batch * 3 * h) * es);
            void *ghx = xmalloc((size_t)(batch * h) * es);
            double *w_gi = xmalloc((size_t)(batch * 3 * h) * sizeof(double));
            double *w_gh = xmalloc((size_t)(batch * 3 * h) * sizeof(double));
            double *w_ghx = xmalloc((size_t)(batch * h) * sizeof(double));
            cr_assert_eq(k_gru_cell_backward_ref(dt, gi, gh, ghx, go, ws, batch, h), OOM_OK);
            for (int64_t b = 0; b < batch; b++)
                for (int64_t j = 0; j < h; j++) {
                    int64_t w = b * 5 * h + j, g = b * 3 * h + j;
                    double r = ld(dt, ws, w), z = ld(dt, ws, w + h), n = ld(dt, ws, w + 2 * h);
                    double x = ld(dt, ws, w + 3 * h), hn = ld(dt, ws, w + 4 * h), o = ld(dt, go, b * h + j);
                    double gz = o * (x - n) * (1 - z) * z, gn = o * (1 - z) * (1 - n * n);
                    double gr = gn * hn * (1 - r) * r;
                    w_gi[g] = gr, w_gi[g + h] = gz, w_gi[g + 2 * h] = gn;
                    w_gh[g] = gr, w_gh[g + h] = gz, w_gh[g + 2 * h] = gn * r;
                    w_ghx[b * h + j] = o * z;
                }
            expect_near("gru_cell_backward grad_igates", dt, gi, w_gi, slack, batch * 3 * h);
            expect_near("gru_cell_backward grad_hgates", dt, gh, w_gh, slack, batch * 3 * h);
            expect_near("gru_cell_backward grad_hx", dt, ghx, w_ghx, slack, batch * h);
            free(ig), free(hg), free(hx), free(go), free(b1), free(b2), free(hy), free(ws);
            free(want_hy), free(want_ws), free(slack), free(gi), free(gh), free(ghx), free(w_gi), free(w_gh);
            free(w_ghx);
        }
}

Test(kernels, gru_cell_bad_arguments)
{
    float x[64] = {0};
    EXPECT_EINVAL(k_gru_cell_ref(DT_F32, x, x, x, x, x, x, NULL, 1, 1)); /* one bias */
    EXPECT_EINVAL(k_gru_cell_ref(DT_I64, x, x, x, x, x, NULL, NULL, 1, 1));
    EXPECT_EINVAL(k_gru_cell_ref(DT_F32, NULL, x, x, x, x, NULL, NULL, 1, 1));
    EXPECT_EINVAL(k_gru_cell_backward_ref(DT_F32, x, x, x, x, NULL, 1, 1));
    EXPECT_EINVAL(k_gru_cell_backward_ref(DT_F32, x, x, x, x, x, 1, INT64_MAX / 4));
    EXPECT_EINVAL(k_pow_scalar_ref(DT_I64, x, x, 2.0f, 1));
    cr_assert_eq(k_gru_cell_ref(DT_F32, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 5), OOM_OK, "empty is valid");
#ifdef OOM_HAVE_CUDA
    EXPECT_EINVAL(k_gru_cell_cuda(DT_F32, x, x, x, x, x, x, NULL, 1, 1));
    EXPECT_EINVAL(k_gru_cell_backward_cuda(DT_F32, x, x, x, x, NULL, 1, 1));
    EXPECT_EINVAL(k_pow_scalar_cuda(DT_I64, x, x, 2.0f, 1));
#endif
}

#ifdef OOM_HAVE_CUDA
/* pow_scalar (exact for the special-cased exponents), gru_cell and gru_cell_backward against the references. */
Test(kernels, cuda_pow_and_gru_cell)
{
    const int64_t shapes[][2] = {{1, 1}, {3, 5}, {64, 1024}, {7, 1025}};
    gpu g = gpu_open((size_t)64 * 1024 * 5 * 4 * 2);
    for (int t = 0; t < 3; t++) {
        dtype dt = float_types[t];
        size_t es = dtype_size(dt);
        const float exps[] = {2.0f, 3.0f, 0.5f, 2.5f};
        for (int k = 0; k < 4; k++) {
            int64_t n = 1025;
            void *a = rand_buf(dt, n, 0.1, 3, 90 + (uint64_t)k), *got = xmalloc((size_t)n * es),
                 *want = xmalloc((size_t)n * es);
            poison_all(&g);
            up(&g, at(&g, 1, 0), a, (size_t)n * es);
            cr_assert_eq(k_pow_scalar_cuda(dt, dp(at(&g, 0, 0)), dp(at(&g, 1, 0)), exps[k], n), OOM_OK);
            down(&g, got, at(&g, 0, 0), (size_t)n * es);
            cr_assert_eq(k_pow_scalar_ref(dt, want, a, exps[k], n), OOM_OK);
            expect_match("pow_scalar", dt, got, want, n, exps[k] == 2.0f || exps[k] == 3.0f);
            free(a), free(got), free(want);
        }
        for (int64_t s = 0; s < COUNT(shapes); s++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                int64_t batch = shapes[s][0], h = shapes[s][1], n3 = batch * 3 * h, n1 = batch * h;
                void *ig = rand_buf(dt, n3, -2, 2, 11), *hg = rand_buf(dt, n3, -2, 2, 12);
                void *hx = rand_buf(dt, n1, -1, 1, 13), *go = rand_buf(dt, n1, -1, 1, 14);
                void *b = rand_buf(dt, 6 * h, -1, 1, 15);
                void *hy = xmalloc((size_t)n1 * es), *ws = xmalloc((size_t)(5 * n1) * es);
                void *d_hy = xmalloc((size_t)n1 * es), *d_ws = xmalloc((size_t)(5 * n1) * es);
                poison_all(&g);
                /* buffer 1: igates, hgates, hx; buffer 2: biases; buffer 0: hy then the workspace */
                up(&g, at(&g, 1, 0), ig, (size_t)n3 * es);
                up(&g, at(&g, 1, (size_t)n3 * es), hg, (size_t)n3 * es);
                up(&g, at(&g, 1, (size_t)(2 * n3) * es), hx, (size_t)n1 * es);
                up(&g, at(&g, 2, 0), b, (size_t)(6 * h) * es);
                devptr bih = with_bias ? at(&g, 2, 0) : 0, bhh = with_bias ? at(&g, 2, (size_t)(3 * h) * es) : 0;
                cr_assert_eq(k_gru_cell_cuda(dt, dp(at(&g, 0, 0)), dp(at(&g, 0, (size_t)n1 * es)), dp(at(&g, 1, 0)),
                                             dp(at(&g, 1, (size_t)n3 * es)), dp(at(&g, 1, (size_t)(2 * n3) * es)),
                                             dp(bih), dp(bhh), batch, h),
                             OOM_OK, "%s", oom_error_msg());
                down(&g, d_hy, at(&g, 0, 0), (size_t)n1 * es);
                down(&g, d_ws, at(&g, 0, (size_t)n1 * es), (size_t)(5 * n1) * es);
                cr_assert_eq(k_gru_cell_ref(dt, hy, ws, ig, hg, hx, with_bias ? b : NULL,
                                            with_bias ? (char *)b + (size_t)(3 * h) * es : NULL, batch, h),
                             OOM_OK);
                expect_written("gru_cell", d_ws, 5 * n1, es);
                expect_match("gru_cell hy", dt, d_hy, hy, n1, false);
                expect_match("gru_cell workspace", dt, d_ws, ws, 5 * n1, false);
                expect_guards(&g, "gru_cell", at(&g, 0, 0), (size_t)(6 * n1) * es, 0);

                /* backward from the reference's workspace: buffer 1 holds it and go; buffer 0 the three outputs */
                void *gi = xmalloc((size_t)n3 * es), *gh = xmalloc((size_t)n3 * es), *ghx = xmalloc((size_t)n1 * es);
                void *d_g = xmalloc((size_t)(2 * n3 + n1) * es);
                poison_all(&g);
                up(&g, at(&g, 1, 0), ws, (size_t)(5 * n1) * es);
                up(&g, at(&g, 1, (size_t)(5 * n1) * es), go, (size_t)n1 * es);
                cr_assert_eq(k_gru_cell_backward_cuda(dt, dp(at(&g, 0, 0)), dp(at(&g, 0, (size_t)n3 * es)),
                                                      dp(at(&g, 0, (size_t)(2 * n3) * es)),
                                                      dp(at(&g, 1, (size_t)(5 * n1) * es)), dp(at(&g, 1, 0)), batch,
                                                      h),
                             OOM_OK, "%s", oom_error_msg());
                down(&g, d_g, at(&g, 0, 0), (size_t)(2 * n3 + n1) * es);
                cr_assert_eq(k_gru_cell_backward_ref(dt, gi, gh, ghx, go, ws, batch, h), OOM_OK);
                expect_written("gru_cell_backward", d_g, 2 * n3 + n1, es);
                expect_match("gru_cell_backward grad_igates", dt, d_g, gi, n3, false);
                expect_match("gru_cell_backward grad_hgates", dt, (char *)d_g + (size_t)n3 * es, gh, n3, false);
                expect_match("gru_cell_backward grad_hx", dt, (char *)d_g + (size_t)(2 * n3) * es, ghx, n1, false);
                expect_guards(&g, "gru_cell_backward", at(&g, 0, 0), (size_t)(2 * n3 + n1) * es, 0);
                free(ig), free(hg), free(hx), free(go), free(b), free(hy), free(ws), free(d_hy), free(d_ws);
                free(gi), free(gh), free(ghx), free(d_g);
            }
    }
    gpu_close(&g);
}

/* inference_oom: copy on the device equals the reference byte for byte, at an offset into the output as cat writes,
 * and touches nothing outside its n elements. */
Test(kernels, cuda_copy)
{
    gpu g = gpu_open((size_t)1 << 22);
    static const dtype dts[] = {DT_F32, DT_F16, DT_BF16, DT_I64};
    static const int64_t ns[] = {0, 1, 1000, 65537};
    for (size_t d = 0; d < COUNT(dts); d++)
        for (size_t k = 0; k < COUNT(ns); k++) {
            size_t es = dtype_size(dts[d]), bytes = (size_t)ns[k] * es, off = 3 * es;
            unsigned char *src = xmalloc(bytes + 1), *got = xmalloc(bytes + 1), *want = xmalloc(bytes + 1);
            uint64_t r = 77 + k;
            for (size_t i = 0; i < bytes; i++)
                src[i] = (unsigned char)rng_next(&r);
            poison_all(&g);
            up(&g, at(&g, 1, 0), src, bytes);
            cr_assert_eq(k_copy_cuda(dts[d], dp(at(&g, 0, off)), dp(at(&g, 1, 0)), ns[k]), OOM_OK, "%s",
                         oom_error_msg());
            down(&g, got, at(&g, 0, off), bytes);
            cr_assert_eq(k_copy_ref(dts[d], want, src, ns[k]), OOM_OK);
            cr_assert(bytes == 0 || memcmp(got, want, bytes) == 0, "copy %s n=%lld", dtype_str(dts[d]),
                      (long long)ns[k]);
            expect_guards(&g, "copy", at(&g, 0, off), bytes, off);
            free(src), free(got), free(want);
        }
    cr_assert_eq(k_copy_cuda(DT_F32, dp(at(&g, 0, 0)), NULL, 1), OOM_EINVAL);
    gpu_close(&g);
}
#endif /* OOM_HAVE_CUDA */
