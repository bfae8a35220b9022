/* linear: out[m, n] = inp[m, k] @ weight[n, k]^T + bias[n]   (torch.nn.functional.linear)
 *
 * inp and weight are strided (row stride, column stride in elements); out is a
 * C-contiguous [m, n] block; bias is [n] contiguous, or NULL.
 * Returns 0, or -1 when a workspace could not be allocated. */
#ifndef MYATT_KERNELS_LINEAR_H
#define MYATT_KERNELS_LINEAR_H

#include <stdint.h>

int linear_forward_f32(float *out,
                       const float *inp, int64_t rs_inp, int64_t cs_inp,
                       const float *weight, int64_t rs_w, int64_t cs_w,
                       const float *bias,
                       int64_t m, int64_t k, int64_t n);

int linear_forward_f64(double *out,
                       const double *inp, int64_t rs_inp, int64_t cs_inp,
                       const double *weight, int64_t rs_w, int64_t cs_w,
                       const double *bias,
                       int64_t m, int64_t k, int64_t n);

#endif
