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

/* The entry points, operands as pointer and strides in elements (A = [a1 | a2]
 * as in gemm_cat below; k1 >= k for a single source).  Kernels call them
 * through the view forms that follow: those are inline, so that a view's
 * fields reach the call as scalars.  (A view is a 40-byte struct, which the
 * x86-64 ABI passes through memory: handed over by value, the ~10 GEMMs of
 * the seed's backward copied 120 bytes each through the stack, with stalls
 * in the loads that read them back.) */
int gemm_strided_f32(void *c, int64_t rs_c, int64_t cs_c,
                     const void *a1, int64_t rs_a1, int64_t cs_a1, int64_t k1,
                     const void *a2, int64_t rs_a2, int64_t cs_a2,
                     const void *b, int64_t rs_b, int64_t cs_b, const void *bias,
                     int64_t m, int64_t n, int64_t k, int accumulate);
int gemm_strided_f64(void *c, int64_t rs_c, int64_t cs_c,
                     const void *a1, int64_t rs_a1, int64_t cs_a1, int64_t k1,
                     const void *a2, int64_t rs_a2, int64_t cs_a2,
                     const void *b, int64_t rs_b, int64_t cs_b, const void *bias,
                     int64_t m, int64_t n, int64_t k, int accumulate);

/* c = (accumulate ? c : 0) + a @ b (+ bias[c.cols] on every row):
 * m = c.rows, n = c.cols, k = a.cols (b is [k, n]); bias is contiguous or NULL. */
static inline int gemm_f32(mk_mat c, mk_cmat a, mk_cmat b, const void *bias, int accumulate)
{
    return gemm_strided_f32(c.data, c.rs, c.cs, a.data, a.rs, a.cs, a.cols, NULL, 0, 0,
                            b.data, b.rs, b.cs, bias, c.rows, c.cols, a.cols, accumulate);
}

static inline int gemm_f64(mk_mat c, mk_cmat a, mk_cmat b, const void *bias, int accumulate)
{
    return gemm_strided_f64(c.data, c.rs, c.cs, a.data, a.rs, a.cs, a.cols, NULL, 0, 0,
                            b.data, b.rs, b.cs, bias, c.rows, c.cols, a.cols, accumulate);
}

/* The same with A = [a1 | a2] concatenated along k: columns [0, k1) of A are
 * a1 [m, k1], columns [k1, k) are a2 [m, k - k1] (k1 = a1.cols, k = a1.cols +
 * a2.cols), each with its own strides.  The whole k is ONE reduction in the
 * summation order of gemm_internal.h, as torch's cat + Linear sums it: the
 * same bits as gemm on a concatenated copy, without the copy. */
static inline int gemm_cat_f32(mk_mat c, mk_cmat a1, mk_cmat a2, mk_cmat b, const void *bias,
                               int accumulate)
{
    return gemm_strided_f32(c.data, c.rs, c.cs, a1.data, a1.rs, a1.cs, a1.cols,
                            a2.data, a2.rs, a2.cs, b.data, b.rs, b.cs, bias,
                            c.rows, c.cols, a1.cols + a2.cols, accumulate);
}

static inline int gemm_cat_f64(mk_mat c, mk_cmat a1, mk_cmat a2, mk_cmat b, const void *bias,
                               int accumulate)
{
    return gemm_strided_f64(c.data, c.rs, c.cs, a1.data, a1.rs, a1.cs, a1.cols,
                            a2.data, a2.rs, a2.cs, b.data, b.rs, b.cs, bias,
                            c.rows, c.cols, a1.cols + a2.cols, accumulate);
}

/* dst [m, k] (C-contiguous) = A, a transposed operand A[i, p] = a[i + p * cs]
 * (rows 1 apart, columns cs apart), by the path's transposing copy on up to
 * nthreads threads: how gemm turns such an A into rows before multiplying, so
 * a caller with one transposed A for several products copies it once (the same
 * bits).  Returns 0, or -1 when the path has no such copy (the portable one):
 * dst is then untouched. */
int gemm_transpose_f32(float *dst, const float *a, int64_t cs, int64_t m, int64_t k,
                       int nthreads);
int gemm_transpose_f64(double *dst, const double *a, int64_t cs, int64_t m, int64_t k,
                       int nthreads);

#endif
