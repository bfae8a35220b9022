/* softmax along the middle axis of a contiguous [outer, n, inner] array.
 *
 * The portable path (softmax_tmpl.h, once per dtype) uses libm's expf / exp
 * and, along the last axis, torch's DEFAULT-build kernel.  The vector paths are
 * in softmax_avx2.c and softmax_avx512.c (softmax_simd_tmpl.h), picked here at
 * run time: the path is cpu.h's choice, the same as the GEMM's. */
#include "softmax.h"
#include "cpu.h"
#include "softmax_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define T float
#define SUF(name) name##_f32_portable
#define EXP expf
#include "softmax_tmpl.h"
#undef T
#undef SUF
#undef EXP

#define T double
#define SUF(name) name##_f64_portable
#define EXP exp
#include "softmax_tmpl.h"
#undef T
#undef SUF
#undef EXP

void softmax_forward_f32(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner)
{
#ifdef MYATT_SOFTMAX_X86
    switch (mk_cpu_isa()) {
    case MK_ISA_AVX512:
        softmax_forward_f32_avx512(out, inp, outer, n, inner);
        return;
    case MK_ISA_AVX2:
        softmax_forward_f32_avx2(out, inp, outer, n, inner);
        return;
    default:
        break;
    }
#endif
    softmax_forward_f32_portable(out, inp, outer, n, inner);
}

void softmax_forward_f64(double *out, const double *inp, int64_t outer, int64_t n, int64_t inner)
{
#ifdef MYATT_SOFTMAX_X86
    switch (mk_cpu_isa()) {
    case MK_ISA_AVX512:
        softmax_forward_f64_avx512(out, inp, outer, n, inner);
        return;
    case MK_ISA_AVX2:
        softmax_forward_f64_avx2(out, inp, outer, n, inner);
        return;
    default:
        break;
    }
#endif
    softmax_forward_f64_portable(out, inp, outer, n, inner);
}

/* The backward has the portable path only: one pass of a dot product and a
 * scale, bound by memory rather than by exp. */
void softmax_backward_f32(float *grad_inp, const float *grad_out, const float *out,
                          int64_t outer, int64_t n, int64_t inner)
{
    softmax_backward_f32_portable(grad_inp, grad_out, out, outer, n, inner);
}

void softmax_backward_f64(double *grad_inp, const double *grad_out, const double *out,
                          int64_t outer, int64_t n, int64_t inner)
{
    softmax_backward_f64_portable(grad_inp, grad_out, out, outer, n, inner);
}
