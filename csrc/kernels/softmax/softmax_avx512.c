/* softmax with AVX-512 (softmax_simd_tmpl.h, once per dtype): 16 float or
 * 8 double lanes, masked tails; along the last axis torch's AVX-512 kernel,
 * bit for bit.  Built without -march flags: compiled for AVX-512 by
 * MYATT_TARGET_PUSH (cpu.h) and only called after mk_cpu_isa() saw the CPU
 * (and OS) support it.  Its vocabulary, Sleef's exp and torch's reductions:
 * simd_avx512.h. */
#include "softmax_internal.h"

#ifdef MYATT_X86

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

#include "simd/simd_avx512.h"

#define T float
#define VEC(op) avx512_f32_##op
#define SOFTMAX_SIMD(name) name##_f32_avx512
#include "softmax_simd_tmpl.h"

#define T double
#define VEC(op) avx512_f64_##op
#define SOFTMAX_SIMD(name) name##_f64_avx512
#include "softmax_simd_tmpl.h"

const softmax_kernels_f32 softmax_kernels_f32_avx512 = {
    "avx512", softmax_forward_f32_avx512, softmax_backward_rows_f32_avx512, softmax_exp_f32_avx512,
};

const softmax_kernels_f64 softmax_kernels_f64_avx512 = {
    "avx512", softmax_forward_f64_avx512, softmax_backward_rows_f64_avx512, softmax_exp_f64_avx512,
};

MYATT_TARGET_POP()

#endif
