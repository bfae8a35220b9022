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

#endif
