/* softmax with AVX2 + FMA (softmax_simd_tmpl.h, once per dtype): 8 float or
 * 4 double lanes; along the last axis torch's AVX2 kernel, bit for bit.  Built
 * without -march flags: compiled for AVX2 + FMA by MYATT_TARGET_PUSH (cpu.h)
 * and only called after mk_cpu_isa() saw the CPU (and OS) support it.  Its
 * vocabulary, Sleef's exp and torch's reductions: simd_avx2.h. */
#include "softmax_internal.h"

#ifdef MYATT_X86

MYATT_TARGET_PUSH(MYATT_TARGET_AVX2)

#include "simd/simd_avx2.h"

#define T float
#define VEC(op) avx2_f32_##op
#define SOFTMAX_SIMD(name) name##_f32_avx2
#include "softmax_simd_tmpl.h"

#define T double
#define VEC(op) avx2_f64_##op
#define SOFTMAX_SIMD(name) name##_f64_avx2
#include "softmax_simd_tmpl.h"

const softmax_kernels_f32 softmax_kernels_f32_avx2 = {
    "avx2", softmax_forward_f32_avx2, softmax_backward_rows_f32_avx2, softmax_exp_f32_avx2,
};

const softmax_kernels_f64 softmax_kernels_f64_avx2 = {
    "avx2", softmax_forward_f64_avx2, softmax_backward_rows_f64_avx2, softmax_exp_f64_avx2,
};

MYATT_TARGET_POP()

#endif
