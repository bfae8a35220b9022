/* Inside the softmax family: the implementations that softmax.c dispatches to.
 * Every path has the contract of softmax.h.  Along the last axis each one is
 * torch's kernel for the same instruction set, bit for bit (portable: torch's
 * DEFAULT build, libm's exp; AVX2 / AVX-512: Sleef's exp, softmax_exp_sleef.h);
 * tests/test_softmax.py and tests/test_softmax_paths.py check it against torch. */
#ifndef MYATT_KERNELS_SOFTMAX_INTERNAL_H
#define MYATT_KERNELS_SOFTMAX_INTERNAL_H

#include <stdint.h>

#include "cpu.h"

void softmax_forward_f32_portable(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner);
void softmax_forward_f64_portable(double *out, const double *inp, int64_t outer, int64_t n, int64_t inner);
void softmax_backward_f32_portable(float *grad_inp, const float *grad_out, const float *out,
                                   int64_t outer, int64_t n, int64_t inner);
void softmax_backward_f64_portable(double *grad_inp, const double *grad_out, const double *out,
                                   int64_t outer, int64_t n, int64_t inner);

#ifdef MYATT_X86
void softmax_forward_f32_avx2(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner);
void softmax_forward_f32_avx512(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner);
void softmax_forward_f64_avx2(double *out, const double *inp, int64_t outer, int64_t n, int64_t inner);
void softmax_forward_f64_avx512(double *out, const double *inp, int64_t outer, int64_t n, int64_t inner);

/* the backward along the last axis: rows of n (softmax_simd_tmpl.h) */
void softmax_backward_rows_f32_avx2(float *gx, const float *g, const float *y, int64_t rows, int64_t n);
void softmax_backward_rows_f32_avx512(float *gx, const float *g, const float *y, int64_t rows, int64_t n);
void softmax_backward_rows_f64_avx2(double *gx, const double *g, const double *y, int64_t rows, int64_t n);
void softmax_backward_rows_f64_avx512(double *gx, const double *g, const double *y, int64_t rows,
                                      int64_t n);

/* out[i] = exp(inp[i]) with the vector exp of each path (for the ulp sweep) */
void softmax_exp_f32_avx2(float *out, const float *inp, int64_t n);
void softmax_exp_f32_avx512(float *out, const float *inp, int64_t n);
void softmax_exp_f64_avx2(double *out, const double *inp, int64_t n);
void softmax_exp_f64_avx512(double *out, const double *inp, int64_t n);
#endif

#endif
