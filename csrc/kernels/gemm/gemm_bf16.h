/* bfloat16 products on AVX512_BF16's dot product (vdpbf16ps), in the order of
 * torch's bfloat16 linear on the CPU (oneDNN's brgemm, avx512_core_bf16).
 *
 * Operands are bfloat16 bit patterns (uint16_t), rows `rs` elements apart,
 * their k elements contiguous.  Per output, as oneDNN sums it (measured:
 * docs/half-precision.md):
 *
 *   blocks of k from 0: 512 long when k <= 1024, else 1024 long;
 *   each block from 0, one float32 chain over pairs, the odd element first
 *     (acc += x[p+1] w[p+1]; acc += x[p] w[p]: vdpbf16ps; an odd k's last
 *     element alone);
 *   the blocks added in order, then the bias; one rounding (vcvtneps2bf16).
 *
 * vdpbf16ps reads subnormal inputs and sums as zero and flushes subnormal
 * results (DAZ, FTZ), as torch's results do here. */
#ifndef MYATT_KERNELS_GEMM_BF16_H
#define MYATT_KERNELS_GEMM_BF16_H

#include <stdint.h>

/* y [m, n] = x [m, k] @ w [n, k]^T (+ bias [n], contiguous, or NULL).
 * Returns 0, -1 when a workspace could not be allocated, or 1 when this CPU
 * path has no bfloat16 dot product (mk_cpu_bf16_dot() is 0): y untouched. */
int gemm_bf16_linear(uint16_t *y, int64_t rs_y, const uint16_t *x, int64_t rs_x,
                     const uint16_t *w, int64_t rs_w, const uint16_t *bias, int64_t m,
                     int64_t n, int64_t k);

/* Its kernel (gemm_bf16_avx512.c), for the path that has the instructions. */
int gemm_bf16_linear_avx512(uint16_t *y, int64_t rs_y, const uint16_t *x, int64_t rs_x,
                            const uint16_t *w, int64_t rs_w, const uint16_t *bias, int64_t m,
                            int64_t n, int64_t k);

#endif
