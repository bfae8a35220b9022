/* bmm: out[b, n, p] = inp[b, n, m] @ mat2[b, m, p]   (torch.bmm)
 *
 * inp and mat2 are strided (batch, row and column strides in elements); out is
 * a C-contiguous [b, n, p] block.  Any size may be 0.
 * Returns 0, or -1 when a workspace could not be allocated. */
#ifndef MYATT_KERNELS_BMM_H
#define MYATT_KERNELS_BMM_H

#include <stdint.h>

int bmm_forward_f32(float *out,
                    const float *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                    const float *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                    int64_t b, int64_t n, int64_t m, int64_t p);

int bmm_forward_f64(double *out,
                    const double *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                    const double *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                    int64_t b, int64_t n, int64_t m, int64_t p);

/* The gradients of bmm for an upstream gradient grad_out [b, n, p]:
 *
 *   grad_inp[b, n, m]  = grad_out @ mat2^T      (sum over p)
 *   grad_mat2[b, m, p] = inp^T @ grad_out       (sum over n)
 *
 * grad_out, inp and mat2 are strided; the results are C-contiguous and must not
 * overlap the inputs.  Any size may be 0.
 * Returns 0, or -1 when a workspace could not be allocated. */
int bmm_backward_f32(float *grad_inp, float *grad_mat2,
                     const float *grad_out, int64_t bs_go, int64_t rs_go, int64_t cs_go,
                     const float *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                     const float *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                     int64_t b, int64_t n, int64_t m, int64_t p);

int bmm_backward_f64(double *grad_inp, double *grad_mat2,
                     const double *grad_out, int64_t bs_go, int64_t rs_go, int64_t cs_go,
                     const double *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                     const double *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                     int64_t b, int64_t n, int64_t m, int64_t p);

#endif
