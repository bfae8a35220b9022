/* Products in the summation orders of torch's naive CPU GEMMs: what torch
 * 2.13 runs for float16 products (no oneDNN or MKL path for them), and for
 * bfloat16 ones below oneDNN's threshold (aten/src/ATen/native/cpu/
 * BlasKernel.cpp, ReducedPrecisionFloatGemvFastPathKernel.cpp; measured in
 * docs/half-precision.md, "float16 GEMMs").
 *
 * Operands are float32 views (view.h) holding half-precision values, so every
 * product is exact in float32 and only the order of the float32 additions
 * matters; the caller rounds the float32 result once to the half dtype.
 * Per output c[i, j] = sum over p of a[i, p] * b[p, j]:
 *
 *   CPUBLAS_DOT8   torch's 8-lane dot (its AVX2 build): 8 accumulators of 8
 *                  lanes over blocks of 64 p; accumulators r += r + 4, r += r + 2,
 *                  0 += 1; lanes l ^ 4, l ^ 2, l ^ 1; then blocks of 16 into a
 *                  ninth 8-lane accumulator (low 8, then high 8), reduced the
 *                  same way and added; then the last k % 16 products in order
 *   CPUBLAS_SUM4   4 interleaved partial sums (p mod 4), the k % 4 last into
 *                  the first, then ((s0 + s1) + s2) + s3
 *   CPUBLAS_CHAIN  one sum in increasing p
 *
 * then + bias[j] when bias is not NULL (torch's beta * c after the dot). */
#ifndef MYATT_KERNELS_GEMM_CPUBLAS_H
#define MYATT_KERNELS_GEMM_CPUBLAS_H

#include "view.h"

typedef enum { CPUBLAS_DOT8, CPUBLAS_SUM4, CPUBLAS_CHAIN } cpublas_order;

/* The order torch's GEMM runs for a [m, k] @ b [k, n] from the operands'
 * layouts (as torch.bmm(a, b) and torch.mm see them): a row-major matrix (its
 * columns contiguous) is N, a transposed view of one (its rows contiguous) T;
 * NT: DOT8, TN: CHAIN, NN and TT: SUM4. */
cpublas_order cpublas_order_of(mk_cmat a, mk_cmat b);

/* c [m, n] = a [m, k] @ b [k, n] (+ bias [n], contiguous, or NULL), float32,
 * in `order`; c must not overlap the operands.  Any size may be 0.  Returns
 * 0, or -1 when a workspace could not be allocated. */
int gemm_cpublas(mk_mat c, mk_cmat a, mk_cmat b, const float *bias, cpublas_order order);

/* gemm_cpublas on each item of a batch: c[i] = a[i] @ b[i], no bias. */
int bmm_cpublas(mk_batch c, mk_cbatch a, mk_cbatch b, cpublas_order order);

#endif
