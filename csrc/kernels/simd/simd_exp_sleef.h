/* Sleef's expf_u10 and exp_u10 (SLEEF 3.x, sleefsimdsp.c xexpf and
 * sleefsimddp.c xexp), which torch's Vectorized<float/double>::exp() calls on
 * AVX2 and AVX-512, written once in a vector vocabulary: exactly these steps,
 * so that a kernel using it (the softmax) gives torch's bits.  Error: under
 * 1 ulp (Sleef's "u10"); measured by benchmarks/exp_ulp.c.
 *
 * A template that extends a vocabulary: included (by simd_avx2.h and
 * simd_avx512.h, once per dtype) with VEC(op) naming the vocabulary's
 * operations, it defines VEC(exp)(v), e.g. avx2_f32_exp, and undefines VEC.
 * No include guard on purpose (the constants below have one).
 *
 * float32:
 *   q = round_to_int(d * R_LN2F);  s = fma(q, -L2UF, d);  s = fma(q, -L2LF, s)
 *   u = C5; u = fma(u, s, C4) ... fma(u, s, C1); u = fma(u, s, 0.5)
 *   u = 1 + fma(s * s, u, s);  u = (u * 2^(q >> 1)) * 2^(q - (q >> 1))
 *   d < ZERO_BELOW -> +0;  d > INF_ABOVE -> +inf
 * float64:
 *   u = rint(d * R_LN2);  q = (int)u;  s = fma(u, -L2U, d);  s = fma(u, -L2L, s)
 *   s2 = s * s, s4 = s2 * s2, s8 = s4 * s4
 *   u = fma(s8, fma(s, C10, C9), fma(s4, fma(s2, fma(s, C8, C7), fma(s, C6, C5)),
 *                                         fma(s2, fma(s, C4, C3), fma(s, C2, C1))))
 *   u = fma(u, s, 0.5);  u = fma(u, s, 1);  u = fma(u, s, 1)
 *   u = (u * 2^(q >> 1)) * 2^(q - (q >> 1));  d > INF_ABOVE -> +inf;  d < ZERO_BELOW -> +0 */

#ifndef VEC
#error "simd_exp_sleef.h: define VEC(op), the vocabulary (simd_avx2.h)"
#endif

#ifndef MYATT_KERNELS_SIMD_EXP_SLEEF_CONSTANTS
#define MYATT_KERNELS_SIMD_EXP_SLEEF_CONSTANTS
#define SLEEF_R_LN2F 1.442695040888963407359924681001892137426645954152985934135449406931f
#define SLEEF_L2UF 0.693145751953125f
#define SLEEF_L2LF 1.428606765330187045e-06f
#define SLEEF_EXPF_C5 0.000198527617612853646278381f
#define SLEEF_EXPF_C4 0.00139304355252534151077271f
#define SLEEF_EXPF_C3 0.00833336077630519866943359f
#define SLEEF_EXPF_C2 0.0416664853692054748535156f
#define SLEEF_EXPF_C1 0.166666671633720397949219f
#define SLEEF_EXPF_ZERO_BELOW (-104.0f)
#define SLEEF_EXPF_INF_ABOVE 100.0f

#define SLEEF_R_LN2 1.442695040888963407359924681001892137426645954152985934135449406931
#define SLEEF_L2U .69314718055966295651160180568695068359375
#define SLEEF_L2L .28235290563031577122588448175013436025525412068e-12
#define SLEEF_EXP_C10 +0.2081276378237164457e-8
#define SLEEF_EXP_C9 +0.2511210703042288022e-7
#define SLEEF_EXP_C8 +0.2755762628169491192e-6
#define SLEEF_EXP_C7 +0.2755723402025388239e-5
#define SLEEF_EXP_C6 +0.2480158687479686264e-4
#define SLEEF_EXP_C5 +0.1984126989855865850e-3
#define SLEEF_EXP_C4 +0.1388888888914497797e-2
#define SLEEF_EXP_C3 +0.8333333333314938210e-2
#define SLEEF_EXP_C2 +0.4166666666666602598e-1
#define SLEEF_EXP_C1 +0.1666666666666669072e+0
#define SLEEF_EXP_ZERO_BELOW (-1000.0)
#define SLEEF_EXP_INF_ABOVE 709.78271114955742909217217426
#endif

#if VEC(is_f64)
MYATT_SIMD_FN VEC(t) VEC(exp)(VEC(t) d)
{
    const VEC(t) u0 = VEC(rint)(VEC(mul)(d, VEC(set1)(SLEEF_R_LN2)));
    const VEC(i) q = VEC(round_i)(u0);
    VEC(t) s = VEC(fma)(u0, VEC(set1)(-SLEEF_L2U), d);
    s = VEC(fma)(u0, VEC(set1)(-SLEEF_L2L), s);
    const VEC(t) s2 = VEC(mul)(s, s), s4 = VEC(mul)(s2, s2), s8 = VEC(mul)(s4, s4);
#define C(i) VEC(set1)(SLEEF_EXP_C##i)
#define MLA(a, b, c) VEC(fma)((a), (b), (c))
    VEC(t) u = MLA(s8, MLA(s, C(10), C(9)),
                   MLA(s4, MLA(s2, MLA(s, C(8), C(7)), MLA(s, C(6), C(5))),
                       MLA(s2, MLA(s, C(4), C(3)), MLA(s, C(2), C(1)))));
#undef C
#undef MLA
    u = VEC(fma)(u, s, VEC(set1)(0.5));
    u = VEC(fma)(u, s, VEC(set1)(1.0));
    u = VEC(fma)(u, s, VEC(set1)(1.0));
    u = VEC(ldexp2k)(u, q);
    u = VEC(blend)(VEC(lt)(VEC(set1)(SLEEF_EXP_INF_ABOVE), d), u, VEC(set1)(INFINITY));
    return VEC(zero_outside)(VEC(nlt)(d, VEC(set1)(SLEEF_EXP_ZERO_BELOW)), u);
}
#else
MYATT_SIMD_FN VEC(t) VEC(exp)(VEC(t) d)
{
    const VEC(i) q = VEC(round_i)(VEC(mul)(d, VEC(set1)(SLEEF_R_LN2F)));
    const VEC(t) qf = VEC(i_to_t)(q);
    VEC(t) s = VEC(fma)(qf, VEC(set1)(-SLEEF_L2UF), d);
    s = VEC(fma)(qf, VEC(set1)(-SLEEF_L2LF), s);
    VEC(t) u = VEC(set1)(SLEEF_EXPF_C5);
    u = VEC(fma)(u, s, VEC(set1)(SLEEF_EXPF_C4));
    u = VEC(fma)(u, s, VEC(set1)(SLEEF_EXPF_C3));
    u = VEC(fma)(u, s, VEC(set1)(SLEEF_EXPF_C2));
    u = VEC(fma)(u, s, VEC(set1)(SLEEF_EXPF_C1));
    u = VEC(fma)(u, s, VEC(set1)(0.5f));
    u = VEC(add)(VEC(set1)(1.0f), VEC(fma)(VEC(mul)(s, s), u, s));
    u = VEC(ldexp2k)(u, q);
    u = VEC(zero_outside)(VEC(nlt)(d, VEC(set1)(SLEEF_EXPF_ZERO_BELOW)), u);
    return VEC(blend)(VEC(lt)(VEC(set1)(SLEEF_EXPF_INF_ABOVE), d), u, VEC(set1)(INFINITY));
}
#endif

#undef VEC
