/* linear: out[m, n] = inp[m, k] @ weight[n, k]^T + bias[n]   (torch.nn.functional.linear)
 *
 * One gemm call: b[k, n] = weight^T is weight read through swapped strides,
 * B[p, j] = weight[j, p] = weight[j * rs_w + p * cs_w], so rs_b = cs_w, cs_b = rs_w.
 * No copy of the weight is made; packing absorbs the transpose. */
#include "linear.h"

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
