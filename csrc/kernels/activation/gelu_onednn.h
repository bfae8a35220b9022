/* torch's float32 F.gelu (approximate='none') and its backward: torch calls
 * oneDNN for both (an eltwise primitive, alg eltwise_gelu_erf; ONEDNN_VERBOSE=1
 * shows it), whose JIT code computes, per element, in float32 (oneDNN's
 * src/cpu/x64/injectors/jit_uni_eltwise_injector.cpp):
 *
 *   forward, CPUs with AVX-512 (oneDNN's avx512_core): 0.5 * (x * (1 + sign(x) p(|x|))),
 *     p one of 25 degree-5 minimax polynomials (Horner by FMAs), picked by the
 *     exponent and two mantissa bits of |x|; |x| above 5.54 takes erf = 1
 *     (gelu_erf_minimax_approx_compute_vector_fwd)
 *   forward, other CPUs: erf by Abramowitz and Stegun 7.1.26 and oneDNN's exp,
 *     S + S * erf(x / sqrt 2) with S = 0.5 x (gelu_erf_compute_vector_fwd)
 *   backward, every CPU: grad * (0.5 + R exp(-R^2) / sqrt(pi) + 0.5 erf(R)),
 *     R = x / sqrt 2, the same erf and exp (gelu_erf_compute_vector_bwd)
 *
 * Each step below is one instruction of that code, in its order, with its
 * roundings (fmaf for an FMA): the vector paths (activation_simd_tmpl.h) do the
 * same in lanes, so every path gives the same bits, torch's where oneDNN runs
 * the same variant.  Scalar versions here: the portable path, and the vector
 * paths' last elements.  Included by the activation family's files only. */
#ifndef MYATT_KERNELS_GELU_ONEDNN_H
#define MYATT_KERNELS_GELU_ONEDNN_H

#include <math.h>
#include <stdint.h>

#include "runtime/half.h"   /* mk_f32_bits, mk_f32_of_bits */

/* The minimax polynomials' coefficients: [degree][interval], 25 intervals
 * padded to 32 (activation.c) */
extern const uint32_t gelu_minimax_bits[6][32];

/* the constants, as oneDNN's tables give their bits */
#define GELU_MINIMAX_IDX_BIAS 0xc21fffffu    /* added to |x|'s bits, >> 21: the interval */
#define GELU_MINIMAX_RBOUND 0x40b15ceeu      /* 5.5419: above it, interval 23 (erf = 1) */
#define GELU_AS_P 0x3ea7ba05u                /* 0.3275911: t = 1 / (1 + p |R|) */
#define GELU_ONE_OVER_SQRT2 0x3f3504f3u
#define GELU_ONE_OVER_SQRTPI 0x3f106ebau
#define GELU_EXP_LOG2E 0x3fb8aa3bu
#define GELU_EXP_LN_FLT_MAX 0x42b17218u
#define GELU_EXP_LN_FLT_MIN 0xc2aeac50u
#define GELU_EXP_LN2 0x3f317218u

/* A&S 7.1.26's a1..a5 and oneDNN's exp polynomial's p1..p5, by degree */
static const uint32_t gelu_as_bits[5] = {0x3e827906u, 0xbe91a98eu, 0x3fb5f0e3u, 0xbfba00e3u,
                                         0x3f87dc22u};
static const uint32_t gelu_exp_bits[5] = {0x3f7ffffbu, 0x3efffee3u, 0x3e2aad40u, 0x3d2b9d0du,
                                          0x3c07cfceu};

/* vminps / vmaxps: the second operand where either is NaN */
static inline float gelu_minps(float a, float b) { return a < b ? a : b; }
static inline float gelu_maxps(float a, float b) { return a > b ? a : b; }

/* oneDNN's exp: 0 below log(FLT_MIN), clamped above log(FLT_MAX) (NaN too),
 * 2 * 2^(n-1) * p(r) with n = floor(x log2(e) + 0.5), r = x - n ln 2 */
static inline float gelu_onednn_exp(float x)
{
    const float lo = mk_f32_of_bits(GELU_EXP_LN_FLT_MIN);
    const int below = x < lo;
    x = gelu_maxps(gelu_minps(x, mk_f32_of_bits(GELU_EXP_LN_FLT_MAX)), lo);
    const float n = floorf(x * mk_f32_of_bits(GELU_EXP_LOG2E) + 0.5f);
    const float r = fmaf(-n, mk_f32_of_bits(GELU_EXP_LN2), x);
    const float scale = below ? 0.0f : mk_f32_of_bits((uint32_t)((int32_t)(n - 1.0f) + 127) << 23);
    float p = mk_f32_of_bits(gelu_exp_bits[4]);
    for (int d = 3; d >= 0; d--)
        p = fmaf(p, r, mk_f32_of_bits(gelu_exp_bits[d]));
    p = fmaf(p, r, 1.0f);
    return p * scale * 2.0f;
}

/* -(A&S's r(t) t exp(-R^2)) + 1 with R's sign: erf(R), t = 1 / (1 + p |R|); q = -exp(-R^2) */
static inline float gelu_as_erf(float R, float q)
{
    const float t = 1.0f / fmaf(mk_f32_of_bits(GELU_AS_P), fabsf(R), 1.0f);
    float r = mk_f32_of_bits(gelu_as_bits[4]);
    for (int d = 3; d >= 0; d--)
        r = fmaf(r, t, mk_f32_of_bits(gelu_as_bits[d]));
    return mk_f32_of_bits(mk_f32_bits(fmaf(q * t, r, 1.0f)) ^ (mk_f32_bits(R) & 0x80000000u));
}

/* the forward, AVX-512 CPUs: the minimax polynomial */
static inline float gelu_minimax_1(float x)
{
    const float pos = fabsf(x);
    int32_t i = (int32_t)(mk_f32_bits(pos) + GELU_MINIMAX_IDX_BIAS) >> 21;
    i = i < 1 ? 1 : i > 24 ? 24 : i;
    if (mk_f32_of_bits(GELU_MINIMAX_RBOUND) < pos)
        i = 23;
    float p = mk_f32_of_bits(gelu_minimax_bits[5][i]);
    for (int d = 4; d >= 0; d--)
        p = fmaf(p, pos, mk_f32_of_bits(gelu_minimax_bits[d][i]));
    p = mk_f32_of_bits(mk_f32_bits(p) ^ (mk_f32_bits(x) & 0x80000000u));
    return x * (p + 1.0f) * 0.5f;
}

/* the forward, other CPUs: S + S * erf(R) */
static inline float gelu_as_1(float x)
{
    const float R = x * mk_f32_of_bits(GELU_ONE_OVER_SQRT2);
    const float erf = gelu_as_erf(R, -gelu_onednn_exp(-(R * R)));
    const float s = x * 0.5f;
    return fmaf(erf, s, s);
}

/* the backward's derivative (times grad_output by the caller) */
static inline float gelu_as_grad_1(float x)
{
    const float R = x * mk_f32_of_bits(GELU_ONE_OVER_SQRT2);
    const float q = gelu_onednn_exp(-(R * R));
    const float T = R * mk_f32_of_bits(GELU_ONE_OVER_SQRTPI) * q;
    const float erf = gelu_as_erf(R, -q);
    return fmaf(erf, 0.5f, T + 0.5f);
}

#endif
