/* bmm: out[b, n, p] = inp[b, n, m] @ mat2[b, m, p]   (torch.bmm)
 *
 * Operands are strided batch views (view.h): b = inp.batch, n = inp.rows,
 * m = inp.cols, p = mat2.cols; out is [b, n, p].  Any size may be 0.
 * Returns 0, or -1 when a workspace could not be allocated. */
#ifndef MYATT_KERNELS_BMM_H
#define MYATT_KERNELS_BMM_H

#include "view.h"

int bmm_forward_f32(mk_batch out, mk_cbatch inp, mk_cbatch mat2);
int bmm_forward_f64(mk_batch out, mk_cbatch inp, mk_cbatch mat2);

/* The gradients of bmm for an upstream gradient grad_out [b, n, p]:
 *
 *   grad_inp[b, n, m]  = grad_out @ mat2^T      (sum over p)
 *   grad_mat2[b, m, p] = inp^T @ grad_out       (sum over n)
 *
 * The results must not overlap the inputs.  Any size may be 0.
 * Returns 0, or -1 when a workspace could not be allocated. */
int bmm_backward_f32(mk_batch grad_inp, mk_batch grad_mat2,
                     mk_cbatch grad_out, mk_cbatch inp, mk_cbatch mat2);
int bmm_backward_f64(mk_batch grad_inp, mk_batch grad_mat2,
                     mk_cbatch grad_out, mk_cbatch inp, mk_cbatch mat2);

#endif
