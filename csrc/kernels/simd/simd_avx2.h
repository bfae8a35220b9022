/* The AVX2 + FMA vector vocabulary, one per dtype: the operations every SIMD
 * kernel (GEMM micro-kernels, softmax, attention to come) is written in.  A
 * template names them through one parameter, VEC(op): with
 *   #define VEC(op) avx2_f32_##op
 * VEC(loadu)(p) is avx2_f32_loadu(p), VEC(len) is 8.  simd_avx512.h has the same
 * names for AVX-512; the templates do not depend on which one they get.
 *
 * Include only between MYATT_TARGET_PUSH(MYATT_TARGET_AVX2) and
 * MYATT_TARGET_POP() (cpu.h): the functions are compiled for that target.
 *
 * Per dtype (avx2_f32_*: 8 floats, avx2_f64_*: 4 doubles):
 *   elem, t          the element type (float, double) and the vector type
 *   len, is_f64      the lanes, whether elem is double (0 or 1)
 *   mask             a lane mask (here an integer vector of all-ones lanes)
 *   i                the integer vector of the lanes' exponents (exp)
 *   loadu(p) storeu(p, v) set1(x) zero()
 *   add sub mul (a, b)   max(a, b): b when either lane is NaN (the instruction)
 *   max_nan(a, b)        NaN when either lane is NaN (at::vec::maximum)
 *   fma(a, b, c)         a * b + c in one rounding
 *   first(v)             lane 0
 *   xor_lanes(v, d)      lane l takes lane l ^ d (d a power of two < len,
 *                        constant at the call: the steps of a shuffle tree;
 *                        float32 only, the one dtype torch reduces by a tree)
 *   lt(a, b)             the mask of a < b (ordered: false when either is NaN)
 *   nlt(a, b)            its complement (true when either is NaN)
 *   blend(m, a, b)       lanes in m from b, the others from a
 *   mask_first(k)        the first k lanes (0 <= k <= len)
 *   load_or(m, p, fill)  lanes in m from p, the others fill (reads only m's lanes)
 *   store_mask(p, m, v)  writes only the lanes in m
 *   zero_outside(m, v)   lanes outside m set to 0
 *   round_i(x)           x rounded to the nearest integer, ties to even, as an i
 *   i_to_t(q)            back to T (float32 only: float64's exp uses rint)
 *   rint(x)              the same as a T (float64 only)
 *   ldexp2k(u, q)        u * 2^(q >> 1) * 2^(q - (q >> 1)): Sleef's vldexp2
 * and, from their own headers (included at the end),
 *   exp(v)               Sleef's exp_u10 / expf_u10, as torch (simd_exp_sleef.h)
 *   reduce_add(v) reduce_max(v)   torch's reductions of the lanes, and
 *   lane_max_nan(a, b)            its scalar maximum (simd_reduce_torch.h)
 * Every function is static inline, always inlined: the same instructions as
 * the intrinsics written out. */
#ifndef MYATT_KERNELS_SIMD_AVX2_H
#define MYATT_KERNELS_SIMD_AVX2_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#ifndef MYATT_SIMD_FN
#define MYATT_SIMD_FN static inline __attribute__((always_inline))
#endif

/* ---- float32: 8 lanes ---- */
typedef float avx2_f32_elem;
typedef __m256 avx2_f32_t;
typedef __m256i avx2_f32_mask;
typedef __m256i avx2_f32_i;
#define avx2_f32_len 8
#define avx2_f32_is_f64 0

MYATT_SIMD_FN __m256 avx2_f32_loadu(const float *p) { return _mm256_loadu_ps(p); }
MYATT_SIMD_FN void avx2_f32_storeu(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
MYATT_SIMD_FN __m256 avx2_f32_set1(float x) { return _mm256_set1_ps(x); }
MYATT_SIMD_FN __m256 avx2_f32_zero(void) { return _mm256_setzero_ps(); }
MYATT_SIMD_FN __m256 avx2_f32_add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
MYATT_SIMD_FN __m256 avx2_f32_sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
MYATT_SIMD_FN __m256 avx2_f32_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
MYATT_SIMD_FN __m256 avx2_f32_max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
MYATT_SIMD_FN __m256 avx2_f32_max_nan(__m256 a, __m256 b)
{
    return _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
MYATT_SIMD_FN __m256 avx2_f32_fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
MYATT_SIMD_FN float avx2_f32_first(__m256 v) { return _mm256_cvtss_f32(v); }
MYATT_SIMD_FN __m256 avx2_f32_xor_lanes(__m256 v, const int d)
{
    return d == 4 ? _mm256_permute2f128_ps(v, v, 0x1)
         : d == 2 ? _mm256_shuffle_ps(v, v, 0x4E)
                  : _mm256_shuffle_ps(v, v, 0xB1);
}
MYATT_SIMD_FN __m256i avx2_f32_lt(__m256 a, __m256 b)
{
    return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
MYATT_SIMD_FN __m256i avx2_f32_nlt(__m256 a, __m256 b)
{
    return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_NLT_UQ));
}
MYATT_SIMD_FN __m256 avx2_f32_blend(__m256i m, __m256 a, __m256 b)
{
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(m));
}
MYATT_SIMD_FN __m256i avx2_f32_mask_first(int k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
MYATT_SIMD_FN __m256 avx2_f32_load_or(__m256i m, const float *p, __m256 fill)
{
    return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
MYATT_SIMD_FN void avx2_f32_store_mask(float *p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }
MYATT_SIMD_FN __m256 avx2_f32_zero_outside(__m256i m, __m256 v)
{
    return _mm256_and_ps(_mm256_castsi256_ps(m), v);
}
MYATT_SIMD_FN __m256i avx2_f32_round_i(__m256 x) { return _mm256_cvtps_epi32(x); }
MYATT_SIMD_FN __m256 avx2_f32_i_to_t(__m256i q) { return _mm256_cvtepi32_ps(q); }
MYATT_SIMD_FN __m256 avx2_f32_ldexp2k(__m256 u, __m256i q)
{
    const __m256i q1 = _mm256_srai_epi32(q, 1), q2 = _mm256_sub_epi32(q, q1);
    const __m256i bias = _mm256_set1_epi32(0x7f);
    u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(q1, bias), 23)));
    return _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(q2, bias), 23)));
}

/* ---- float64: 4 lanes ---- */
typedef double avx2_f64_elem;
typedef __m256d avx2_f64_t;
typedef __m256i avx2_f64_mask;
typedef __m128i avx2_f64_i;
#define avx2_f64_len 4
#define avx2_f64_is_f64 1

MYATT_SIMD_FN __m256d avx2_f64_loadu(const double *p) { return _mm256_loadu_pd(p); }
MYATT_SIMD_FN void avx2_f64_storeu(double *p, __m256d v) { _mm256_storeu_pd(p, v); }
MYATT_SIMD_FN __m256d avx2_f64_set1(double x) { return _mm256_set1_pd(x); }
MYATT_SIMD_FN __m256d avx2_f64_zero(void) { return _mm256_setzero_pd(); }
MYATT_SIMD_FN __m256d avx2_f64_add(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
MYATT_SIMD_FN __m256d avx2_f64_sub(__m256d a, __m256d b) { return _mm256_sub_pd(a, b); }
MYATT_SIMD_FN __m256d avx2_f64_mul(__m256d a, __m256d b) { return _mm256_mul_pd(a, b); }
MYATT_SIMD_FN __m256d avx2_f64_max(__m256d a, __m256d b) { return _mm256_max_pd(a, b); }
MYATT_SIMD_FN __m256d avx2_f64_max_nan(__m256d a, __m256d b)
{
    return _mm256_or_pd(_mm256_max_pd(a, b), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}
MYATT_SIMD_FN __m256d avx2_f64_fma(__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); }
MYATT_SIMD_FN double avx2_f64_first(__m256d v) { return _mm256_cvtsd_f64(v); }
MYATT_SIMD_FN __m256i avx2_f64_lt(__m256d a, __m256d b)
{
    return _mm256_castpd_si256(_mm256_cmp_pd(a, b, _CMP_LT_OQ));
}
MYATT_SIMD_FN __m256i avx2_f64_nlt(__m256d a, __m256d b)
{
    return _mm256_castpd_si256(_mm256_cmp_pd(a, b, _CMP_NLT_UQ));
}
MYATT_SIMD_FN __m256d avx2_f64_blend(__m256i m, __m256d a, __m256d b)
{
    return _mm256_blendv_pd(a, b, _mm256_castsi256_pd(m));
}
MYATT_SIMD_FN __m256i avx2_f64_mask_first(int k)
{
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_setr_epi64x(0, 1, 2, 3));
}
MYATT_SIMD_FN __m256d avx2_f64_load_or(__m256i m, const double *p, __m256d fill)
{
    return _mm256_blendv_pd(fill, _mm256_maskload_pd(p, m), _mm256_castsi256_pd(m));
}
MYATT_SIMD_FN void avx2_f64_store_mask(double *p, __m256i m, __m256d v) { _mm256_maskstore_pd(p, m, v); }
MYATT_SIMD_FN __m256d avx2_f64_zero_outside(__m256i m, __m256d v)
{
    return _mm256_and_pd(_mm256_castsi256_pd(m), v);
}
MYATT_SIMD_FN __m256d avx2_f64_rint(__m256d x)
{
    return _mm256_round_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
MYATT_SIMD_FN __m128i avx2_f64_round_i(__m256d x) { return _mm256_cvtpd_epi32(x); }
MYATT_SIMD_FN __m256d avx2_f64_ldexp2k(__m256d u, __m128i q)
{
    const __m128i q1 = _mm_srai_epi32(q, 1), q2 = _mm_sub_epi32(q, q1);
    const __m128i bias = _mm_set1_epi32(0x3ff);
    u = _mm256_mul_pd(u, _mm256_castsi256_pd(
            _mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(q1, bias)), 52)));
    return _mm256_mul_pd(u, _mm256_castsi256_pd(
            _mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(q2, bias)), 52)));
}

/* Sleef's exp (VEC(exp)) and torch's reductions (VEC(reduce_add),
 * VEC(reduce_max)) of each dtype, in their own headers. */
#define VEC(op) avx2_f32_##op
#include "simd_exp_sleef.h"
#define VEC(op) avx2_f32_##op
#include "simd_reduce_torch.h"
#define VEC(op) avx2_f64_##op
#include "simd_exp_sleef.h"
#define VEC(op) avx2_f64_##op
#include "simd_reduce_torch.h"

#endif
