/* General matrix multiply, the engine under linear, bmm and the fused MyAtt.
 *
 *   c[m, n] = (accumulate ? c : 0) + a[m, k] @ b[k, n] (+ bias[n] on every row)
 *
 * Every operand is addressed through a row stride and a column stride, counted
 * in elements (not bytes), so a transposed weight (rs = 1, cs = ld) or a column
 * slice of one needs no copy.  Strides of a and b may be zero or negative; c must
 * not overlap a, b or bias.  m, n or k may be 0 (k == 0 gives bias or zeros).
 *
 * Returns 0, or -1 when a workspace could not be allocated (c is then
 * unspecified).  The result does not depend on the number of threads: work is
 * split over blocks of c, never over k. */
#ifndef MYATT_KERNELS_GEMM_H
#define MYATT_KERNELS_GEMM_H

#include <stdint.h>

int gemm_f32(float *c, int64_t rs_c, int64_t cs_c,
             const float *a, int64_t rs_a, int64_t cs_a,
             const float *b, int64_t rs_b, int64_t cs_b,
             const float *bias,
             int64_t m, int64_t n, int64_t k, int accumulate);

int gemm_f64(double *c, int64_t rs_c, int64_t cs_c,
             const double *a, int64_t rs_a, int64_t cs_a,
             const double *b, int64_t rs_b, int64_t cs_b,
             const double *bias,
             int64_t m, int64_t n, int64_t k, int accumulate);

/* The same with A = [a1 | a2] concatenated along k: columns [0, k1) of A are
 * a1[m, k1], columns [k1, k) are a2[m, k - k1] (0 <= k1 <= k), each with its
 * own strides.  The whole k is ONE reduction in the summation order of
 * gemm_internal.h, as torch's cat + Linear sums it: the same bits as gemm on
 * a concatenated copy, without the copy. */
int gemm_cat_f32(float *c, int64_t rs_c, int64_t cs_c,
                 const float *a1, int64_t rs_a1, int64_t cs_a1, int64_t k1,
                 const float *a2, int64_t rs_a2, int64_t cs_a2,
                 const float *b, int64_t rs_b, int64_t cs_b,
                 const float *bias,
                 int64_t m, int64_t n, int64_t k, int accumulate);

int gemm_cat_f64(double *c, int64_t rs_c, int64_t cs_c,
                 const double *a1, int64_t rs_a1, int64_t cs_a1, int64_t k1,
                 const double *a2, int64_t rs_a2, int64_t cs_a2,
                 const double *b, int64_t rs_b, int64_t cs_b,
                 const double *bias,
                 int64_t m, int64_t n, int64_t k, int accumulate);

#endif
