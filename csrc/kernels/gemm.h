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

#include "view.h"

/* c = (accumulate ? c : 0) + a @ b (+ bias[c.cols] on every row):
 * m = c.rows, n = c.cols, k = a.cols (b is [k, n]); bias is contiguous or NULL. */
int gemm_f32(mk_mat c, mk_cmat a, mk_cmat b, const void *bias, int accumulate);
int gemm_f64(mk_mat c, mk_cmat a, mk_cmat b, const void *bias, int accumulate);

/* The same with A = [a1 | a2] concatenated along k: columns [0, k1) of A are
 * a1 [m, k1], columns [k1, k) are a2 [m, k - k1] (k1 = a1.cols, k = a1.cols +
 * a2.cols), each with its own strides.  The whole k is ONE reduction in the
 * summation order of gemm_internal.h, as torch's cat + Linear sums it: the
 * same bits as gemm on a concatenated copy, without the copy. */
int gemm_cat_f32(mk_mat c, mk_cmat a1, mk_cmat a2, mk_cmat b, const void *bias, int accumulate);
int gemm_cat_f64(mk_mat c, mk_cmat a1, mk_cmat a2, mk_cmat b, const void *bias, int accumulate);

#endif
