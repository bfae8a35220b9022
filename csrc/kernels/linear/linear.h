/* linear: out[m, n] = inp[m, k] @ weight[n, k]^T + bias[n]   (torch.nn.functional.linear)
 *
 * Operands are strided views (view.h): m = inp.rows, k = inp.cols,
 * n = weight.rows; out is [m, n]; bias is [n] contiguous, or NULL.
 * Returns 0, or -1 when a workspace could not be allocated. */
#ifndef MYATT_KERNELS_LINEAR_H
#define MYATT_KERNELS_LINEAR_H

#include "view.h"

int linear_forward_f32(mk_mat out, mk_cmat inp, mk_cmat weight, const void *bias);
int linear_forward_f64(mk_mat out, mk_cmat inp, mk_cmat weight, const void *bias);

/* The gradients of linear for an upstream gradient grad_out [m, n]:
 *
 *   grad_inp[m, k]    = grad_out @ weight           (sum over n)
 *   grad_weight[n, k] = grad_out^T @ inp            (sum over m)
 *   grad_bias[n]      = sum over m of grad_out      (only when grad_bias != NULL;
 *                                                    contiguous)
 *
 * The results must not overlap the inputs.  Any size may be 0 (m == 0 gives
 * zero weight and bias gradients).  Returns 0, or -1 when a workspace could
 * not be allocated. */
int linear_backward_f32(mk_mat grad_inp, mk_mat grad_weight, void *grad_bias,
                        mk_cmat grad_out, mk_cmat inp, mk_cmat weight);
int linear_backward_f64(mk_mat grad_inp, mk_mat grad_weight, void *grad_bias,
                        mk_cmat grad_out, mk_cmat inp, mk_cmat weight);

#endif
