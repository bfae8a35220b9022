/* softmax along the middle axis of a contiguous [outer, n, inner] array.
 *
 * The portable path (softmax_tmpl.h, once per dtype) uses libm's expf / exp,
 * correctly rounded to within an ulp; it is the reference.  The vector paths
 * are in softmax_avx2.c and softmax_avx512.c (softmax_simd_tmpl.h), picked here
 * at run time.
 *
 * TODO(cpu.h): softmax_isa() is a stop-gap detection of its own; once
 * csrc/kernels/cpu.c lands, replace its body with the shared dispatch. */
#include "softmax.h"
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

/* ---- run-time choice of the path ----------------------------------------- */

static enum softmax_isa softmax_detect(void)
{
    enum softmax_isa best = SOFTMAX_PORTABLE;
#if defined(MYATT_SOFTMAX_X86) && (defined(__GNUC__) || defined(__clang__))
    /* __builtin_cpu_supports also checks that the OS saves the ymm/zmm state */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best = SOFTMAX_AVX2;
    if (best == SOFTMAX_AVX2 && __builtin_cpu_supports("avx512f"))
        best = SOFTMAX_AVX512;
#endif
    const char *want = getenv("MYATT_KERNEL");
    if (want != NULL) {
        enum softmax_isa asked = best;
        if (strcmp(want, "portable") == 0)
            asked = SOFTMAX_PORTABLE;
        else if (strcmp(want, "avx2") == 0)
            asked = SOFTMAX_AVX2;
        else if (strcmp(want, "avx512") == 0)
            asked = SOFTMAX_AVX512;
        if (asked < best)
            best = asked;
    }
    return best;
}

enum softmax_isa softmax_isa(void)
{
    /* racing first calls compute the same value: a plain int is enough */
    static volatile int isa = -1;
    if (isa < 0)
        isa = (int)softmax_detect();
    return (enum softmax_isa)isa;
}

const char *softmax_kernel_name(void)
{
    static const char *const names[] = {"portable", "avx2", "avx512"};
    return names[softmax_isa()];
}

void softmax_forward_f32(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner)
{
#ifdef MYATT_SOFTMAX_X86
    switch (softmax_isa()) {
    case SOFTMAX_AVX512:
        softmax_forward_f32_avx512(out, inp, outer, n, inner);
        return;
    case SOFTMAX_AVX2:
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
    switch (softmax_isa()) {
    case SOFTMAX_AVX512:
        softmax_forward_f64_avx512(out, inp, outer, n, inner);
        return;
    case SOFTMAX_AVX2:
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
