/* linear: out[m, n] = inp[m, k] @ weight[n, k]^T + bias[n]   (torch.nn.functional.linear)
 *
 * One gemm call: b[k, n] = weight^T is weight read through swapped strides
 * (mk_t), B[p, j] = weight[j, p].  No copy of the weight is made; packing
 * absorbs the transpose.
 *
 * Backward: three kernel calls, transposes through swapped strides again:
 *   grad_inp    [m, k] = grad_out [m, n] @ weight [n, k]
 *   grad_weight [n, k] = grad_out^T [n, m] @ inp [m, k]
 * and the bias gradient, the column sums of grad_out, in torch's order (colsum.h). */
#include "linear.h"

#include <stddef.h>

#include "gemm/gemm.h"

#include "colsum.h"

int linear_forward_f32(mk_mat out, mk_cmat inp, mk_cmat weight, const void *bias)
{
    return gemm_f32(out, inp, mk_t(weight), bias, 0);
}

int linear_forward_f64(mk_mat out, mk_cmat inp, mk_cmat weight, const void *bias)
{
    return gemm_f64(out, inp, mk_t(weight), bias, 0);
}

int linear_backward_f32(mk_mat grad_inp, mk_mat grad_weight, void *grad_bias,
                        mk_cmat grad_out, mk_cmat inp, mk_cmat weight)
{
    int status = 0;
    status |= gemm_f32(grad_inp, grad_out, weight, NULL, 0);
    status |= gemm_f32(grad_weight, mk_t(grad_out), inp, NULL, 0);
    if (grad_bias != NULL)
        colsum_f32(grad_bias, grad_out);
    return status == 0 ? 0 : -1;
}

int linear_backward_f64(mk_mat grad_inp, mk_mat grad_weight, void *grad_bias,
                        mk_cmat grad_out, mk_cmat inp, mk_cmat weight)
{
    int status = 0;
    status |= gemm_f64(grad_inp, grad_out, weight, NULL, 0);
    status |= gemm_f64(grad_weight, mk_t(grad_out), inp, NULL, 0);
    if (grad_bias != NULL)
        colsum_f64(grad_bias, grad_out);
    return status == 0 ? 0 : -1;
}
