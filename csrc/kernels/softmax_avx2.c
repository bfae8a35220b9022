/* softmax with AVX2 + FMA (softmax_simd_tmpl.h, once per dtype): 8 float or
 * 4 double lanes.  Built without -march flags: every function carries
 * target("avx2,fma") and is only called after mk_cpu_isa() saw the CPU (and
 * OS) support it. */
#include "softmax_internal.h"

#ifdef MYATT_SOFTMAX_X86
#include <immintrin.h>

#include "softmax_exp_coef.h"

#define API __attribute__((target("avx2,fma")))
#define FN static inline __attribute__((always_inline, target("avx2,fma")))

/* exp(x): the same steps and constants as softmax_avx512.c, so the two give the
 * same bits.  AVX2 has no scalef: 2^n is applied as 2^(n>>1) * 2^(n - (n>>1)),
 * both factors normal for every n of the clamped range, so p times the first
 * is exact and only the second product rounds (one rounding, denormals exact).
 * A NaN x is put back at the end (its n is no integer). */
FN __m256 exp_avx2_f32(__m256 x)
{
    const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 x0 = x;
    x = _mm256_max_ps(_mm256_set1_ps(EXPF_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(EXPF_HI), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXPF_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPF_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPF_LN2_LO), r);
    __m256 q = _mm256_set1_ps(EXPF_Q5);
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXPF_Q4));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXPF_Q3));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXPF_Q2));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXPF_Q1));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(EXPF_Q0));
    __m256 p = _mm256_fmadd_ps(q, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    /* n in [-150, 128]: halves in [-75, 64], biased exponents in [52, 191] */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(e, x0, is_nan);
}

FN __m256d exp_avx2_f64(__m256d x)
{
    const __m256d is_nan = _mm256_cmp_pd(x, x, _CMP_UNORD_Q);
    const __m256d x0 = x;
    x = _mm256_max_pd(_mm256_set1_pd(EXPD_LO), x);
    x = _mm256_min_pd(_mm256_set1_pd(EXPD_HI), x);
    const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(EXPD_LOG2E)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(EXPD_LN2_HI), x);
    r = _mm256_fnmadd_pd(n, _mm256_set1_pd(EXPD_LN2_LO), r);
    __m256d q = _mm256_set1_pd(EXPD_Q11);
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q10));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q9));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q8));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q7));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q6));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q5));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q4));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q3));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q2));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q1));
    q = _mm256_fmadd_pd(q, r, _mm256_set1_pd(EXPD_Q0));
    __m256d p = _mm256_fmadd_pd(q, _mm256_mul_pd(r, r), r);
    p = _mm256_add_pd(p, _mm256_set1_pd(1.0));
    /* n in [-1076, 1024]: halves in [-538, 512], biased exponents in [485, 1535] */
    const __m128i n32 = _mm256_cvtpd_epi32(n);
    const __m128i h1 = _mm_srai_epi32(n32, 1);
    const __m128i h2 = _mm_sub_epi32(n32, h1);
    const __m256i bias = _mm256_set1_epi64x(1023);
    const __m256d s1 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(h1), bias), 52));
    const __m256d s2 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(h2), bias), 52));
    const __m256d e = _mm256_mul_pd(_mm256_mul_pd(p, s1), s2);
    return _mm256_blendv_pd(e, x0, is_nan);
}

FN __m256i mask_first_f32_avx2(int k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

FN __m256i mask_first_f64_avx2(int k)
{
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_setr_epi64x(0, 1, 2, 3));
}

/* ---- float32 ---- */
#define T float
#define ISA(name) name##_f32_avx2
#define VF __m256
#define VMASK __m256i
#define VLEN 8
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define V_SUB(a, b) _mm256_sub_ps((a), (b))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_MAX(a, b) _mm256_max_ps((a), (b))
#define V_MASK_FIRST(k) mask_first_f32_avx2(k)
#define V_LOAD_OR(m, p, fill) \
    _mm256_blendv_ps((fill), _mm256_maskload_ps((p), (m)), _mm256_castsi256_ps(m))
#define V_STORE_MASK(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define V_ZERO_OUTSIDE(m, v) _mm256_and_ps(_mm256_castsi256_ps(m), (v))
#define V_EXP(v) exp_avx2_f32(v)
#include "softmax_simd_tmpl.h"
#include "softmax_simd_undef.h"

/* ---- float64 ---- */
#define T double
#define ISA(name) name##_f64_avx2
#define VF __m256d
#define VMASK __m256i
#define VLEN 4
#define V_SET1(x) _mm256_set1_pd(x)
#define V_LOADU(p) _mm256_loadu_pd(p)
#define V_STOREU(p, v) _mm256_storeu_pd((p), (v))
#define V_ADD(a, b) _mm256_add_pd((a), (b))
#define V_SUB(a, b) _mm256_sub_pd((a), (b))
#define V_MUL(a, b) _mm256_mul_pd((a), (b))
#define V_MAX(a, b) _mm256_max_pd((a), (b))
#define V_MASK_FIRST(k) mask_first_f64_avx2(k)
#define V_LOAD_OR(m, p, fill) \
    _mm256_blendv_pd((fill), _mm256_maskload_pd((p), (m)), _mm256_castsi256_pd(m))
#define V_STORE_MASK(p, m, v) _mm256_maskstore_pd((p), (m), (v))
#define V_ZERO_OUTSIDE(m, v) _mm256_and_pd(_mm256_castsi256_pd(m), (v))
#define V_EXP(v) exp_avx2_f64(v)
#include "softmax_simd_tmpl.h"
#include "softmax_simd_undef.h"

#endif
