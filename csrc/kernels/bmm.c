/* bmm: out[b, n, p] = inp[b, n, m] @ mat2[b, m, p]   (torch.bmm)
 *
 * One gemm per batch item; out is C-contiguous, so item i starts at i * n * p.
 * (Note the names: here m is the inner, summed dimension, as in torch's docs.) */
#include "bmm.h"

#include <stddef.h>

#include "gemm.h"

int bmm_forward_f32(float *out,
                    const float *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                    const float *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                    int64_t b, int64_t n, int64_t m, int64_t p)
{
    if (n <= 0 || p <= 0)   /* nothing to write; b may be huge (zero batch stride) */
        return 0;
    for (int64_t i = 0; i < b; i++) {
        float *out_i = out + i * n * p;               /* [n, p] */
        const float *inp_i = inp + i * bs_inp;        /* [n, m] */
        const float *mat2_i = mat2 + i * bs_mat2;     /* [m, p] */
        if (gemm_f32(out_i, p, 1, inp_i, rs_inp, cs_inp, mat2_i, rs_mat2, cs_mat2,
                     NULL, n, p, m, 0) != 0)
            return -1;
    }
    return 0;
}

int bmm_forward_f64(double *out,
                    const double *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                    const double *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                    int64_t b, int64_t n, int64_t m, int64_t p)
{
    if (n <= 0 || p <= 0)   /* nothing to write; b may be huge (zero batch stride) */
        return 0;
    for (int64_t i = 0; i < b; i++) {
        double *out_i = out + i * n * p;              /* [n, p] */
        const double *inp_i = inp + i * bs_inp;       /* [n, m] */
        const double *mat2_i = mat2 + i * bs_mat2;    /* [m, p] */
        if (gemm_f64(out_i, p, 1, inp_i, rs_inp, cs_inp, mat2_i, rs_mat2, cs_mat2,
                     NULL, n, p, m, 0) != 0)
            return -1;
    }
    return 0;
}

/* Backward: two gemm calls per batch item, transposes through swapped strides:
 *   grad_inp_i  [n, m] = grad_out_i [n, p] @ mat2_i^T [p, m]  (rs = cs_mat2, cs = rs_mat2)
 *   grad_mat2_i [m, p] = inp_i^T [m, n] (rs = cs_inp, cs = rs_inp) @ grad_out_i [n, p] */
int bmm_backward_f32(float *grad_inp, float *grad_mat2,
                     const float *grad_out, int64_t bs_go, int64_t rs_go, int64_t cs_go,
                     const float *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                     const float *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                     int64_t b, int64_t n, int64_t m, int64_t p)
{
    for (int64_t i = 0; i < b; i++) {
        const float *go_i = grad_out + i * bs_go;     /* [n, p] */
        const float *inp_i = inp + i * bs_inp;        /* [n, m] */
        const float *mat2_i = mat2 + i * bs_mat2;     /* [m, p] */
        if (gemm_f32(grad_inp + i * n * m, m, 1, go_i, rs_go, cs_go,
                     mat2_i, cs_mat2, rs_mat2, NULL, n, m, p, 0) != 0
                || gemm_f32(grad_mat2 + i * m * p, p, 1, inp_i, cs_inp, rs_inp,
                            go_i, rs_go, cs_go, NULL, m, p, n, 0) != 0)
            return -1;
    }
    return 0;
}

int bmm_backward_f64(double *grad_inp, double *grad_mat2,
                     const double *grad_out, int64_t bs_go, int64_t rs_go, int64_t cs_go,
                     const double *inp, int64_t bs_inp, int64_t rs_inp, int64_t cs_inp,
                     const double *mat2, int64_t bs_mat2, int64_t rs_mat2, int64_t cs_mat2,
                     int64_t b, int64_t n, int64_t m, int64_t p)
{
    for (int64_t i = 0; i < b; i++) {
        const double *go_i = grad_out + i * bs_go;    /* [n, p] */
        const double *inp_i = inp + i * bs_inp;       /* [n, m] */
        const double *mat2_i = mat2 + i * bs_mat2;    /* [m, p] */
        if (gemm_f64(grad_inp + i * n * m, m, 1, go_i, rs_go, cs_go,
                     mat2_i, cs_mat2, rs_mat2, NULL, n, m, p, 0) != 0
                || gemm_f64(grad_mat2 + i * m * p, p, 1, inp_i, cs_inp, rs_inp,
                            go_i, rs_go, cs_go, NULL, m, p, n, 0) != 0)
            return -1;
    }
    return 0;
}
