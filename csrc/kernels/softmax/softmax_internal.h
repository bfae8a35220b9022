/* Inside the softmax family: the table of one path's kernels, of which
 * softmax.c takes the one of the path cpu.h chose (decided once per process),
 * as the GEMM takes its micro-kernel context (gemm_internal.h).  Every path has the contract of softmax.h.  Along
 * the last axis each one is torch's kernel for the same instruction set, bit
 * for bit (portable: torch's DEFAULT build, libm's exp; AVX2 / AVX-512: Sleef's
 * exp, simd_exp_sleef.h); tests/test_softmax.py and tests/test_softmax_paths.py
 * check it against torch.  Adding a path = one file (like softmax_avx2.c) with
 * its two tables and one case in softmax_select_f32 / _f64 (softmax.c). */
#ifndef MYATT_KERNELS_SOFTMAX_INTERNAL_H
#define MYATT_KERNELS_SOFTMAX_INTERNAL_H

#include <stdint.h>

#include "runtime/cpu.h"

typedef struct {
    const char *name;   /* "portable", "avx2", "avx512" */
    /* softmax_forward_f32's contract (softmax.h), on this thread */
    void (*forward)(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner);
    /* the backward along the last axis, rows of n (rows, n >= 1), or NULL:
     * then the portable backward (which also takes every other axis) */
    void (*backward_rows)(float *gx, const float *g, const float *y, int64_t rows, int64_t n);
    /* out[i] = exp(inp[i]) with the path's vector exp (benchmarks/exp_ulp.c's
     * sweep), or NULL (portable: libm) */
    void (*exp)(float *out, const float *inp, int64_t n);
} softmax_kernels_f32;

typedef struct {
    const char *name;
    void (*forward)(double *out, const double *inp, int64_t outer, int64_t n, int64_t inner);
    void (*backward_rows)(double *gx, const double *g, const double *y, int64_t rows, int64_t n);
    void (*exp)(double *out, const double *inp, int64_t n);
} softmax_kernels_f64;

/* The SIMD paths, each defined in its own file (softmax_avx2.c,
 * softmax_avx512.c) compiled for its ISA (MYATT_TARGET_PUSH, cpu.h).  Only x86. */
#ifdef MYATT_X86
extern const softmax_kernels_f32 softmax_kernels_f32_avx2, softmax_kernels_f32_avx512;
extern const softmax_kernels_f64 softmax_kernels_f64_avx2, softmax_kernels_f64_avx512;
#endif

#endif
