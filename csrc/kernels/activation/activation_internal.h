/* Inside the activation family: the table of one path's float32 gelu kernels
 * (approximate='none', torch's oneDNN computation: gelu_onednn.h), of which
 * activation.c takes the one of the path cpu.h chose, as softmax.c does
 * (softmax_internal.h).  Every path gives the same bits. */
#ifndef MYATT_KERNELS_ACTIVATION_INTERNAL_H
#define MYATT_KERNELS_ACTIVATION_INTERNAL_H

#include <stdint.h>

#include "runtime/cpu.h"

typedef struct {
    const char *name;   /* "portable", "avx2", "avx512" */
    /* out[i] = gelu(inp[i]), the forward of AVX-512 CPUs (the minimax polynomials) */
    void (*minimax)(float *out, const float *inp, int64_t n);
    /* the same, of other CPUs (Abramowitz and Stegun's erf) */
    void (*as)(float *out, const float *inp, int64_t n);
    /* grad_inp[i] = grad_out[i] * gelu'(inp[i]) */
    void (*grad)(float *grad_inp, const float *grad_out, const float *inp, int64_t n);
} gelu_erf_kernels;

#ifdef MYATT_X86
extern const gelu_erf_kernels gelu_erf_kernels_avx2, gelu_erf_kernels_avx512;
#endif

#endif
