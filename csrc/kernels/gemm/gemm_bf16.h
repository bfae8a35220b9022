/* bfloat16 products on AVX512_BF16's dot product (vdpbf16ps), in the order of
 * torch's bfloat16 linear on the CPU (oneDNN's brgemm, avx512_core_bf16).
 *
 * Operands are bfloat16 bit patterns (uint16_t): x's rows `rs_x` elements
 * apart, their k elements contiguous; w a view [n, k] (view.h) whose rows or
 * columns are contiguous (a transposed view is packed as it lies).  Per output, as oneDNN sums it (measured:
 * docs/half-precision.md):
 *
 *   blocks of k from 0: 512 long when k <= 1024 or torch's x operand is a
 *     transposed view (x_transposed: grad_weight = g^T @ x, a bmm's transposed
 *     first operand: oneDNN's compute_blocking_heuristic_avx512), else 1024;
 *   each block from 0, one float32 chain over pairs, the odd element first
 *     (acc += x[p+1] w[p+1]; acc += x[p] w[p]: vdpbf16ps; an odd k's last
 *     element alone);
 *   the blocks added in order, then the bias (or baddbmm's input: torch adds
 *   it after the product, oneDNN's sum post-op); one rounding (vcvtneps2bf16).
 *
 * vdpbf16ps reads subnormal inputs and sums as zero and flushes subnormal
 * results (DAZ, FTZ), as torch's results do here. */
#ifndef MYATT_KERNELS_GEMM_BF16_H
#define MYATT_KERNELS_GEMM_BF16_H

#include <stdint.h>

#include "view.h"

/* y [m, n] = x [m, k] @ w [n, k]^T (+ bias, or NULL: row i adds the n
 * contiguous values at bias + i * rs_bias; rs_bias 0: one [n] row for all).
 * Returns 0, -1 when a workspace could not be allocated, or 1 when this CPU
 * path has no bfloat16 dot product (mk_cpu_bf16_dot() is 0): y untouched. */
int gemm_bf16_linear(uint16_t *y, int64_t rs_y, const uint16_t *x, int64_t rs_x, mk_cmat w,
                     const uint16_t *bias, int64_t rs_bias, int64_t m, int64_t n, int64_t k,
                     int x_transposed);

/* c[i] [n, p] = a[i] [n, k] @ b[i] [k, p] (+ add[i], or add NULL) for each
 * item of a batch, bfloat16 (c's items with contiguous rows; a's and b's any
 * strides; add's columns contiguous, its batch and row strides any, 0
 * included), per output as gemm_bf16_linear: torch's bfloat16 bmm and baddbmm
 * above oneDNN's threshold.  Returns 0, -1 when a workspace could not be
 * allocated, 1 without a bfloat16 dot product (c untouched). */
int gemm_bf16_bmm(mk_batch c, mk_cbatch a, mk_cbatch b, const mk_cbatch *add);

/* c [m, n] = x [m, k] @ w [n, k]^T, or += with accumulate, on the bfloat16 dot
 * product in gemm_bf16_linear's order, the sums left in float32: float32 views
 * whose values are bfloat16 (exactly: a bfloat16 flash forward's operands and
 * rounded weights), c's columns contiguous.  On the caller's thread.  Returns
 * 0, -1 when a workspace could not be allocated, or 1 without the dot product
 * (c untouched). */
int gemm_bf16_f32(mk_mat c, mk_cmat x, mk_cmat w, int accumulate);

/* The kernels (gemm_bf16_avx512.c), for the path that has the instructions. */
int gemm_bf16_f32_avx512(mk_mat c, mk_cmat x, mk_cmat w, int accumulate);
int gemm_bf16_linear_avx512(uint16_t *y, int64_t rs_y, const uint16_t *x, int64_t rs_x,
                            mk_cmat w, const uint16_t *bias, int64_t rs_bias, int64_t m,
                            int64_t n, int64_t k, int x_transposed);

#endif
