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

/* The gradients of linear for an upstream gradient grad_out [m, n]:
 *
 *   grad_inp[m, k]    = grad_out @ weight           (sum over n)
 *   grad_weight[n, k] = grad_out^T @ inp            (sum over m)
 *   grad_bias[n]      = sum over m of grad_out      (only when grad_bias != NULL)
 *
 * grad_out, inp and weight are strided; the results are C-contiguous and must not
 * overlap the inputs.  Any size may be 0 (m == 0 gives zero weight and bias
 * gradients).  Returns 0, or -1 when a workspace could not be allocated. */
int linear_backward_f32(float *grad_inp, float *grad_weight, float *grad_bias,
                        const float *grad_out, int64_t rs_go, int64_t cs_go,
                        const float *inp, int64_t rs_inp, int64_t cs_inp,
                        const float *weight, int64_t rs_w, int64_t cs_w,
                        int64_t m, int64_t k, int64_t n);

int linear_backward_f64(double *grad_inp, double *grad_weight, double *grad_bias,
                        const double *grad_out, int64_t rs_go, int64_t cs_go,
                        const double *inp, int64_t rs_inp, int64_t cs_inp,
                        const double *weight, int64_t rs_w, int64_t cs_w,
                        int64_t m, int64_t k, int64_t n);

#endif
