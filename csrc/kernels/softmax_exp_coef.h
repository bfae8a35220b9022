/* Constants of the vector exp of softmax_avx2.c and softmax_avx512.c (shared so
 * that the two ISAs compute the same bits).  exp(x) = 2^n exp(r) with
 * n = round(x log2 e), r = x - n ln2_hi - n ln2_lo (two FMA steps; ln2_hi is ln2
 * rounded to the type, whose last bit is 2^-24 / 2^-53, so the first step is
 * exact for the clamped x), exp(r) = 1 + (r + r^2 q(r)).
 *
 * float32: q of degree 5, a weighted least-squares (near-minimax) fit of
 *   (exp(r) - 1 - r) / r^2 on |r| <= ln2/2, relative error 6e-11;
 *   x clamped to [-104, 89] (exp(-104) rounds to 0, exp(89) to inf).
 * float64: q = the Taylor terms 1/2! .. 1/13! (truncation 4e-18 relative);
 *   x clamped to [-746, 710] (exp(-746) rounds to 0, exp(710) to inf). */
#ifndef MYATT_KERNELS_SOFTMAX_EXP_COEF_H
#define MYATT_KERNELS_SOFTMAX_EXP_COEF_H

#define EXPF_LO (-104.0f)
#define EXPF_HI 89.0f
#define EXPF_LOG2E 1.44269504088896341f
#define EXPF_LN2_HI 0.693147182464599609375f
#define EXPF_LN2_LO (-1.904654299957768e-09f)
#define EXPF_Q5 0.00019826318020932376f
#define EXPF_Q4 0.0013946008402854204f
#define EXPF_Q3 0.008333430625498295f
#define EXPF_Q2 0.041666269302368164f
#define EXPF_Q1 0.1666666567325592f
#define EXPF_Q0 0.5f

#define EXPD_LO (-746.0)
#define EXPD_HI 710.0
#define EXPD_LOG2E 1.4426950408889634
#define EXPD_LN2_HI 0.6931471805599453
#define EXPD_LN2_LO 2.3190468138462996e-17
/* 1/13!, 1/12!, ..., 1/2! */
#define EXPD_Q11 1.6059043836821613e-10
#define EXPD_Q10 2.08767569878681e-09
#define EXPD_Q9 2.505210838544172e-08
#define EXPD_Q8 2.755731922398589e-07
#define EXPD_Q7 2.7557319223985893e-06
#define EXPD_Q6 2.48015873015873e-05
#define EXPD_Q5 0.0001984126984126984
#define EXPD_Q4 0.001388888888888889
#define EXPD_Q3 0.008333333333333333
#define EXPD_Q2 0.041666666666666664
#define EXPD_Q1 0.16666666666666666
#define EXPD_Q0 0.5

#endif
