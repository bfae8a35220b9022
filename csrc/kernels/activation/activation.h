/* Activations, as torch.nn.functional's, elementwise over n contiguous values
 * (data float for _f32, double for _f64, as void * like every public kernel's),
 * in torch's order of operations (aten/src/ATen/native/cpu/Activation.cpp) in
 * the dtype's own arithmetic.  out or grad_inp may be the same buffer as an
 * input (in place).  NaN and inf propagate as the formulas give them.
 *
 * gelu (GeluKernelImpl, GeluBackwardKernelImpl):
 *   GELU_NONE:  out = x * 0.5 * (1 + erf(x / sqrt(2)))
 *               grad_inp = grad_out * (cdf + x * pdf), cdf = 0.5 * (1 + erf(x / sqrt(2))),
 *               pdf = exp(-x^2 / 2) / sqrt(2 pi)
 *   GELU_TANH:  out = 0.5 * x * (1 + t), t = tanh(k (x + 0.044715 x^3)), k = sqrt(2 / pi)
 *               grad_inp = grad_out * (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)) */
#ifndef MYATT_KERNELS_ACTIVATION_H
#define MYATT_KERNELS_ACTIVATION_H

#include <stdint.h>

enum { GELU_NONE, GELU_TANH };

void gelu_forward_f32(void *out, const void *inp, int64_t n, int approximate);
void gelu_forward_f64(void *out, const void *inp, int64_t n, int approximate);
void gelu_backward_f32(void *grad_inp, const void *grad_out, const void *inp, int64_t n,
                       int approximate);
void gelu_backward_f64(void *grad_inp, const void *grad_out, const void *inp, int64_t n,
                       int approximate);

#endif
