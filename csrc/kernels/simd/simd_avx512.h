/* The AVX-512 (F + VL, FMA) vector vocabulary, one per dtype: the same names
 * and meanings as simd_avx2.h (see there), avx512_f32_*: 16 floats,
 * avx512_f64_*: 8 doubles; masks are opmask registers (__mmask16, __mmask8).
 *
 * Include only between MYATT_TARGET_PUSH(MYATT_TARGET_AVX512) and
 * MYATT_TARGET_POP() (cpu.h): the functions are compiled for that target. */
#ifndef MYATT_KERNELS_SIMD_AVX512_H
#define MYATT_KERNELS_SIMD_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#ifndef MYATT_SIMD_FN
#define MYATT_SIMD_FN static inline __attribute__((always_inline))
#endif

/* ---- float32: 16 lanes ---- */
typedef float avx512_f32_elem;
typedef __m512 avx512_f32_t;
typedef __mmask16 avx512_f32_mask;
typedef __m512i avx512_f32_i;
#define avx512_f32_len 16
#define avx512_f32_is_f64 0

MYATT_SIMD_FN __m512 avx512_f32_loadu(const float *p) { return _mm512_loadu_ps(p); }
MYATT_SIMD_FN void avx512_f32_storeu(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
MYATT_SIMD_FN __m512 avx512_f32_set1(float x) { return _mm512_set1_ps(x); }
MYATT_SIMD_FN __m512 avx512_f32_zero(void) { return _mm512_setzero_ps(); }
MYATT_SIMD_FN __m512 avx512_f32_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
MYATT_SIMD_FN __m512 avx512_f32_sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
MYATT_SIMD_FN __m512 avx512_f32_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
MYATT_SIMD_FN __m512 avx512_f32_max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
MYATT_SIMD_FN __m512 avx512_f32_max_nan(__m512 a, __m512 b)
{
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q),
                              _mm512_set1_ps(NAN));
}
MYATT_SIMD_FN __m512 avx512_f32_fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
MYATT_SIMD_FN float avx512_f32_first(__m512 v) { return _mm512_cvtss_f32(v); }
MYATT_SIMD_FN __m512 avx512_f32_xor_lanes(__m512 v, const int d)
{
    return d == 8 ? _mm512_shuffle_f32x4(v, v, 0x4E)
         : d == 4 ? _mm512_shuffle_f32x4(v, v, 0xB1)
         : d == 2 ? _mm512_shuffle_ps(v, v, 0x4E)
                  : _mm512_shuffle_ps(v, v, 0xB1);
}
MYATT_SIMD_FN __mmask16 avx512_f32_lt(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
MYATT_SIMD_FN __mmask16 avx512_f32_nlt(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_NLT_UQ); }
MYATT_SIMD_FN __m512 avx512_f32_blend(__mmask16 m, __m512 a, __m512 b) { return _mm512_mask_blend_ps(m, a, b); }
MYATT_SIMD_FN __mmask16 avx512_f32_mask_first(int k) { return (__mmask16)((1u << k) - 1u); }
MYATT_SIMD_FN __m512 avx512_f32_load_or(__mmask16 m, const float *p, __m512 fill)
{
    return _mm512_mask_loadu_ps(fill, m, p);
}
MYATT_SIMD_FN void avx512_f32_store_mask(float *p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
MYATT_SIMD_FN __m512 avx512_f32_zero_outside(__mmask16 m, __m512 v) { return _mm512_maskz_mov_ps(m, v); }
MYATT_SIMD_FN __m512i avx512_f32_round_i(__m512 x) { return _mm512_cvtps_epi32(x); }
MYATT_SIMD_FN __m512 avx512_f32_i_to_t(__m512i q) { return _mm512_cvtepi32_ps(q); }
MYATT_SIMD_FN __m512 avx512_f32_ldexp2k(__m512 u, __m512i q)
{
    const __m512i q1 = _mm512_srai_epi32(q, 1), q2 = _mm512_sub_epi32(q, q1);
    const __m512i bias = _mm512_set1_epi32(0x7f);
    u = _mm512_mul_ps(u, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(q1, bias), 23)));
    return _mm512_mul_ps(u, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(q2, bias), 23)));
}

/* ---- float64: 8 lanes ---- */
typedef double avx512_f64_elem;
typedef __m512d avx512_f64_t;
typedef __mmask8 avx512_f64_mask;
typedef __m256i avx512_f64_i;
#define avx512_f64_len 8
#define avx512_f64_is_f64 1

MYATT_SIMD_FN __m512d avx512_f64_loadu(const double *p) { return _mm512_loadu_pd(p); }
MYATT_SIMD_FN void avx512_f64_storeu(double *p, __m512d v) { _mm512_storeu_pd(p, v); }
MYATT_SIMD_FN __m512d avx512_f64_set1(double x) { return _mm512_set1_pd(x); }
MYATT_SIMD_FN __m512d avx512_f64_zero(void) { return _mm512_setzero_pd(); }
MYATT_SIMD_FN __m512d avx512_f64_add(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
MYATT_SIMD_FN __m512d avx512_f64_sub(__m512d a, __m512d b) { return _mm512_sub_pd(a, b); }
MYATT_SIMD_FN __m512d avx512_f64_mul(__m512d a, __m512d b) { return _mm512_mul_pd(a, b); }
MYATT_SIMD_FN __m512d avx512_f64_max(__m512d a, __m512d b) { return _mm512_max_pd(a, b); }
MYATT_SIMD_FN __m512d avx512_f64_max_nan(__m512d a, __m512d b)
{
    return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q),
                              _mm512_set1_pd(NAN));
}
MYATT_SIMD_FN __m512d avx512_f64_fma(__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); }
MYATT_SIMD_FN double avx512_f64_first(__m512d v) { return _mm512_cvtsd_f64(v); }
MYATT_SIMD_FN __mmask8 avx512_f64_lt(__m512d a, __m512d b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
MYATT_SIMD_FN __mmask8 avx512_f64_nlt(__m512d a, __m512d b) { return _mm512_cmp_pd_mask(a, b, _CMP_NLT_UQ); }
MYATT_SIMD_FN __m512d avx512_f64_blend(__mmask8 m, __m512d a, __m512d b) { return _mm512_mask_blend_pd(m, a, b); }
MYATT_SIMD_FN __mmask8 avx512_f64_mask_first(int k) { return (__mmask8)((1u << k) - 1u); }
MYATT_SIMD_FN __m512d avx512_f64_load_or(__mmask8 m, const double *p, __m512d fill)
{
    return _mm512_mask_loadu_pd(fill, m, p);
}
MYATT_SIMD_FN void avx512_f64_store_mask(double *p, __mmask8 m, __m512d v) { _mm512_mask_storeu_pd(p, m, v); }
MYATT_SIMD_FN __m512d avx512_f64_zero_outside(__mmask8 m, __m512d v) { return _mm512_maskz_mov_pd(m, v); }
MYATT_SIMD_FN __m512d avx512_f64_rint(__m512d x)
{
    return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
MYATT_SIMD_FN __m256i avx512_f64_round_i(__m512d x) { return _mm512_cvtpd_epi32(x); }
MYATT_SIMD_FN __m512d avx512_f64_ldexp2k(__m512d u, __m256i q)
{
    const __m256i q1 = _mm256_srai_epi32(q, 1), q2 = _mm256_sub_epi32(q, q1);
    const __m256i bias = _mm256_set1_epi32(0x3ff);
    u = _mm512_mul_pd(u, _mm512_castsi512_pd(
            _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(q1, bias)), 52)));
    return _mm512_mul_pd(u, _mm512_castsi512_pd(
            _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(q2, bias)), 52)));
}

/* Sleef's exp (VEC(exp)) and torch's reductions (VEC(reduce_add),
 * VEC(reduce_max)) of each dtype, in their own headers. */
#define VEC(op) avx512_f32_##op
#include "simd_exp_sleef.h"
#define VEC(op) avx512_f32_##op
#include "simd_reduce_torch.h"
#define VEC(op) avx512_f64_##op
#include "simd_exp_sleef.h"
#define VEC(op) avx512_f64_##op
#include "simd_reduce_torch.h"

#endif
