/* The constants of Sleef's expf_u10 and exp_u10 (SLEEF 3.x, sleefsimdsp.c
 * xexpf and sleefsimddp.c xexp), which torch's Vectorized<float/double>::exp()
 * calls on AVX2 and AVX-512: the vector paths compute exp with exactly these
 * steps, so that the softmax gives torch's bits.  Error: under 1 ulp (Sleef's
 * "u10"); measured by benchmarks/exp_ulp.c.
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
#ifndef MYATT_KERNELS_SOFTMAX_EXP_SLEEF_H
#define MYATT_KERNELS_SOFTMAX_EXP_SLEEF_H

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
