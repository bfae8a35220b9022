/* linear: out[m, n] = inp[m, k] @ weight[n, k]^T + bias[n]   (torch.nn.functional.linear)
 *
 * One gemm call: b[k, n] = weight^T is weight read through swapped strides,
 * B[p, j] = weight[j, p] = weight[j * rs_w + p * cs_w], so rs_b = cs_w, cs_b = rs_w.
 * No copy of the weight is made; packing absorbs the transpose. */
#include "linear.h"

#include <stddef.h>

#include "colsum.h"
#include "gemm.h"

int linear_forward_f32(float *out,
                       const float *inp, int64_t rs_inp, int64_t cs_inp,
                       const float *weight, int64_t rs_w, int64_t cs_w,
                       const float *bias,
                       int64_t m, int64_t k, int64_t n)
{
    /*             c [m, n], contiguous   a = inp [m, k]        b = weight^T [k, n] */
    return gemm_f32(out, n, 1, inp, rs_inp, cs_inp, weight, cs_w, rs_w,
                    bias, m, n, k, 0);
}

int linear_forward_f64(double *out,
                       const double *inp, int64_t rs_inp, int64_t cs_inp,
                       const double *weight, int64_t rs_w, int64_t cs_w,
                       const double *bias,
                       int64_t m, int64_t k, int64_t n)
{
    return gemm_f64(out, n, 1, inp, rs_inp, cs_inp, weight, cs_w, rs_w,
                    bias, m, n, k, 0);
}

/* Backward: three gemm calls, transposes through swapped strides again:
 *   grad_inp    [m, k] = grad_out [m, n] @ weight [n, k]
 *   grad_weight [n, k] = grad_out^T [n, m] (rs = cs_go, cs = rs_go) @ inp [m, k]
 * and the bias gradient, the column sums of grad_out, in torch's order (colsum.h). */
int linear_backward_f32(float *grad_inp, float *grad_weight, float *grad_bias,
                        const float *grad_out, int64_t rs_go, int64_t cs_go,
                        const float *inp, int64_t rs_inp, int64_t cs_inp,
                        const float *weight, int64_t rs_w, int64_t cs_w,
                        int64_t m, int64_t k, int64_t n)
{
    int status = 0;
    status |= gemm_f32(grad_inp, k, 1, grad_out, rs_go, cs_go, weight, rs_w, cs_w,
                       NULL, m, k, n, 0);
    status |= gemm_f32(grad_weight, k, 1, grad_out, cs_go, rs_go, inp, rs_inp, cs_inp,
                       NULL, n, k, m, 0);
    if (grad_bias != NULL)
        colsum_f32(grad_bias, grad_out, rs_go, cs_go, m, n);
    return status == 0 ? 0 : -1;
}

int linear_backward_f64(double *grad_inp, double *grad_weight, double *grad_bias,
                        const double *grad_out, int64_t rs_go, int64_t cs_go,
                        const double *inp, int64_t rs_inp, int64_t cs_inp,
                        const double *weight, int64_t rs_w, int64_t cs_w,
                        int64_t m, int64_t k, int64_t n)
{
    int status = 0;
    status |= gemm_f64(grad_inp, k, 1, grad_out, rs_go, cs_go, weight, rs_w, cs_w,
                       NULL, m, k, n, 0);
    status |= gemm_f64(grad_weight, k, 1, grad_out, cs_go, rs_go, inp, rs_inp, cs_inp,
                       NULL, n, k, m, 0);
    if (grad_bias != NULL)
        colsum_f64(grad_bias, grad_out, rs_go, cs_go, m, n);
    return status == 0 ? 0 : -1;
}
