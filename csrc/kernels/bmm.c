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
