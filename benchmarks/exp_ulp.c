/* Accuracy sweep of the vector exp of the softmax kernels: Sleef's expf_u10 /
 * exp_u10 as torch computes them (csrc/kernels/simd/simd_exp_sleef.h).
 *
 * float32: every float x in [-104, 89] (about 2.2e9 values; below -104 the
 * result is 0, above 88.72 it overflows to inf, which is also checked) against
 * double exp, in ulps of the float result (the denormal spacing below 2^-126).
 * float64: a dense sweep, every step-th double (bit pattern) in [-746, 710]
 * (default step: about 10^8 values), against long double expl.  Both also
 * check NaN -> NaN, -inf -> 0, +inf -> inf.
 *
 *   cc -O2 -Icsrc/kernels benchmarks/exp_ulp.c csrc/kernels/softmax/softmax_avx2.c \
 *      csrc/kernels/softmax/softmax_avx512.c -lm -o /tmp/exp_ulp
 *   /tmp/exp_ulp [avx2|avx512] [f32|f64] [step]
 *
 * A float32 step > 1 samples every step-th float instead of all. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "softmax/softmax_internal.h"

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* the float ulp at |y|: spacing of floats in the binade of y (2^-149 for denormals) */
static double ulp_at(double y)
{
    y = fabs(y);
    if (y < 0x1p-126)
        return 0x1p-149;
    int e;
    frexp(y, &e);               /* y = m 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 24);
}

typedef void (*exp_fn)(float *, const float *, int64_t);

#define CHUNK 4096

typedef void (*exp_fn64)(double *, const double *, int64_t);

static double from_bits64(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }
static uint64_t to_bits64(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }

static long double ulp_at64(long double y)
{
    y = fabsl(y);
    if (y < 0x1p-1022L)
        return 0x1p-1074L;
    int e;
    frexpl(y, &e);
    return ldexpl(1.0L, e - 53);
}

static int sweep_f64(const char *isa, exp_fn64 f, uint64_t step)
{
    static double in[CHUNK], out[CHUNK];
    double worst = 0, worst_x = 0, sum_ulp = 0;
    uint64_t count = 0, wrong_special = 0, over_half = 0;
    const uint64_t ranges[2][2] = {
        {0x8000000000000000ull, to_bits64(-746.0)},
        {0x0000000000000000ull, to_bits64(710.0)},
    };
    for (int rg = 0; rg < 2; rg++) {
        if (step == 0)   /* default: about 5e7 values per range */
            step = (ranges[rg][1] - ranges[rg][0]) / 50000000u | 1u;
        for (uint64_t u = ranges[rg][0]; u <= ranges[rg][1];) {
            int k = 0;
            for (; k < CHUNK && u <= ranges[rg][1]; k++, u += step)
                in[k] = from_bits64(u);
            f(out, in, k);
            for (int i = 0; i < k; i++) {
                const long double e = expl((long double)in[i]);
                double err;
                if (isinf(out[i]) || e > 0x1.fffffffffffffp1023L) {
                    const int should_inf = (double)e == INFINITY;
                    err = (isinf(out[i]) == should_inf) ? 0 : 1e9;
                } else {
                    err = (double)(fabsl((long double)out[i] - e) / ulp_at64(e));
                }
                if (err > worst) {
                    worst = err;
                    worst_x = in[i];
                }
                if (err > 0.5)
                    over_half++;
                sum_ulp += err;
                count++;
            }
        }
        if (rg == 0)
            step = 0;
    }
    const double sp_in[8] = {NAN, -NAN, -INFINITY, INFINITY, -1e300, 1e300, -0.0, 0.0};
    const double sp_want[8] = {NAN, NAN, 0.0, INFINITY, 0.0, INFINITY, 1.0, 1.0};
    double sp_out[8];
    f(sp_out, sp_in, 8);
    for (int i = 0; i < 8; i++) {
        const int ok = isnan(sp_want[i]) ? isnan(sp_out[i]) : sp_out[i] == sp_want[i];
        if (!ok) {
            fprintf(stderr, "exp(%g) = %g, want %g\n", sp_in[i], sp_out[i], sp_want[i]);
            wrong_special++;
        }
    }
    printf("%s f64: %llu doubles in [-746, 710] (strided): max error %.3f ulp at x = %.17g, "
           "mean %.4f ulp, %.3f%% not correctly rounded; special values %s\n",
           isa, (unsigned long long)count, worst, worst_x, sum_ulp / (double)count,
           100.0 * (double)over_half / (double)count, wrong_special ? "WRONG" : "ok");
    return wrong_special != 0 || worst > 2.0;
}

int main(int argc, char **argv)
{
    const char *isa = argc > 1 ? argv[1] : "avx512";
    const int f64 = argc > 2 && strcmp(argv[2], "f64") == 0;
    uint32_t step = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : (f64 ? 0 : 1);
    const int avx2 = strcmp(isa, "avx2") == 0;
    const int have = avx2 ? __builtin_cpu_supports("avx2") : __builtin_cpu_supports("avx512f");
    if (!have) {
        fprintf(stderr, "this CPU has no %s\n", isa);
        return 2;
    }
    if (f64)
        return sweep_f64(isa, avx2 ? softmax_kernels_f64_avx2.exp : softmax_kernels_f64_avx512.exp, step);
    exp_fn f = avx2 ? softmax_kernels_f32_avx2.exp : softmax_kernels_f32_avx512.exp;
    static float in[CHUNK], out[CHUNK];
    double worst = 0, worst_x = 0, sum_ulp = 0;
    uint64_t count = 0, wrong_special = 0, over_half = 0;

    /* two ranges of bit patterns: negative floats -0 .. -104 and positive 0 .. 89 */
    const uint32_t ranges[2][2] = {
        {0x80000000u, to_bits(-104.0f)},
        {0x00000000u, to_bits(89.0f)},
    };
    for (int rg = 0; rg < 2; rg++) {
        for (uint64_t u = ranges[rg][0]; u <= ranges[rg][1];) {
            int k = 0;
            for (; k < CHUNK && u <= ranges[rg][1]; k++, u += step)
                in[k] = from_bits((uint32_t)u);
            f(out, in, k);
            for (int i = 0; i < k; i++) {
                const double e = exp((double)in[i]);
                double err;
                if (isinf(out[i]) || e > 0x1.fffffep127) {
                    /* past FLT_MAX: must be inf exactly when the rounded value is */
                    const int should_inf = (float)e == INFINITY;
                    err = (isinf(out[i]) == should_inf) ? 0 : 1e9;
                } else {
                    err = fabs((double)out[i] - e) / ulp_at(e);
                }
                if (err > worst) {
                    worst = err;
                    worst_x = in[i];
                }
                if (err > 0.5)
                    over_half++;
                sum_ulp += err;
                count++;
            }
        }
    }
    /* special values */
    const float sp_in[8] = {NAN, -NAN, -INFINITY, INFINITY, -1e30f, 1e30f, -0.0f, 0.0f};
    const float sp_want[8] = {NAN, NAN, 0.0f, INFINITY, 0.0f, INFINITY, 1.0f, 1.0f};
    float sp_out[8];
    f(sp_out, sp_in, 8);
    for (int i = 0; i < 8; i++) {
        const int ok = isnan(sp_want[i]) ? isnan(sp_out[i]) : sp_out[i] == sp_want[i];
        if (!ok) {
            fprintf(stderr, "exp(%g) = %g, want %g\n", sp_in[i], sp_out[i], sp_want[i]);
            wrong_special++;
        }
    }
    printf("%s f32: %llu floats in [-104, 89] (step %u): max error %.3f ulp at x = %.9g, "
           "mean %.4f ulp, %.3f%% not correctly rounded; special values %s\n",
           isa, (unsigned long long)count, step, worst, worst_x, sum_ulp / (double)count,
           100.0 * (double)over_half / (double)count, wrong_special ? "WRONG" : "ok");
    return wrong_special != 0 || worst > 2.0;
}
