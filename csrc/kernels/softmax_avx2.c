/* softmax with AVX2 + FMA (softmax_simd_tmpl.h, once per dtype): 8 float or
 * 4 double lanes; along the last axis torch's AVX2 kernel, bit for bit.  Built
 * without -march flags: compiled for AVX2 + FMA by MYATT_TARGET_PUSH (cpu.h)
 * and only called after mk_cpu_isa() saw the CPU (and OS) support it. */
#include "softmax_internal.h"

#ifdef MYATT_X86
#include <immintrin.h>
#include <math.h>

#include "softmax_exp_sleef.h"

MYATT_TARGET_PUSH(MYATT_TARGET_AVX2)

#define API
#define FN static inline __attribute__((always_inline))

/* exp(x): Sleef's expf_u10 / exp_u10, step for step (softmax_exp_sleef.h), as
 * torch's Vectorized<float/double>::exp() computes it on AVX2: the same
 * operations as softmax_avx512.c, so the two paths give the same exp bits. */
FN __m256 exp_avx2_f32(__m256 d)
{
    const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(d, _mm256_set1_ps(SLEEF_R_LN2F)));
    const __m256 qf = _mm256_cvtepi32_ps(q);
    __m256 s = _mm256_fmadd_ps(qf, _mm256_set1_ps(-SLEEF_L2UF), d);
    s = _mm256_fmadd_ps(qf, _mm256_set1_ps(-SLEEF_L2LF), s);
    __m256 u = _mm256_set1_ps(SLEEF_EXPF_C5);
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(SLEEF_EXPF_C4));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(SLEEF_EXPF_C3));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(SLEEF_EXPF_C2));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(SLEEF_EXPF_C1));
    u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(0.5f));
    u = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
    const __m256i q1 = _mm256_srai_epi32(q, 1), q2 = _mm256_sub_epi32(q, q1);
    const __m256i bias = _mm256_set1_epi32(0x7f);
    u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(q1, bias), 23)));
    u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(q2, bias), 23)));
    u = _mm256_andnot_ps(_mm256_cmp_ps(d, _mm256_set1_ps(SLEEF_EXPF_ZERO_BELOW), _CMP_LT_OQ), u);
    return _mm256_blendv_ps(u, _mm256_set1_ps(INFINITY),
                            _mm256_cmp_ps(_mm256_set1_ps(SLEEF_EXPF_INF_ABOVE), d, _CMP_LT_OQ));
}

FN __m256d exp_avx2_f64(__m256d d)
{
    const __m256d u0 = _mm256_round_pd(_mm256_mul_pd(d, _mm256_set1_pd(SLEEF_R_LN2)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i q = _mm256_cvtpd_epi32(u0);
    __m256d s = _mm256_fmadd_pd(u0, _mm256_set1_pd(-SLEEF_L2U), d);
    s = _mm256_fmadd_pd(u0, _mm256_set1_pd(-SLEEF_L2L), s);
    const __m256d s2 = _mm256_mul_pd(s, s), s4 = _mm256_mul_pd(s2, s2), s8 = _mm256_mul_pd(s4, s4);
#define C(i) _mm256_set1_pd(SLEEF_EXP_C##i)
#define MLA(a, b, c) _mm256_fmadd_pd((a), (b), (c))
    __m256d u = MLA(s8, MLA(s, C(10), C(9)),
                    MLA(s4, MLA(s2, MLA(s, C(8), C(7)), MLA(s, C(6), C(5))),
                        MLA(s2, MLA(s, C(4), C(3)), MLA(s, C(2), C(1)))));
#undef C
#undef MLA
    u = _mm256_fmadd_pd(u, s, _mm256_set1_pd(0.5));
    u = _mm256_fmadd_pd(u, s, _mm256_set1_pd(1.0));
    u = _mm256_fmadd_pd(u, s, _mm256_set1_pd(1.0));
    const __m128i q1 = _mm_srai_epi32(q, 1), q2 = _mm_sub_epi32(q, q1);
    const __m128i bias = _mm_set1_epi32(0x3ff);
    u = _mm256_mul_pd(u, _mm256_castsi256_pd(
            _mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(q1, bias)), 52)));
    u = _mm256_mul_pd(u, _mm256_castsi256_pd(
            _mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(q2, bias)), 52)));
    u = _mm256_blendv_pd(u, _mm256_set1_pd(INFINITY),
                         _mm256_cmp_pd(d, _mm256_set1_pd(SLEEF_EXP_INF_ABOVE), _CMP_GT_OQ));
    return _mm256_andnot_pd(_mm256_cmp_pd(d, _mm256_set1_pd(SLEEF_EXP_ZERO_BELOW), _CMP_LT_OQ), u);
}

/* at::vec::maximum: NaN if either lane is NaN */
FN __m256 max_nan_avx2_f32(__m256 a, __m256 b)
{
    return _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

FN __m256d max_nan_avx2_f64(__m256d a, __m256d b)
{
    return _mm256_or_pd(_mm256_max_pd(a, b), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}

/* torch's horizontal reduction of 8 float lanes on AVX2 (VecReduceAllSIMD):
 * lane i with i ^ 4, then i ^ 2, i ^ 1; lane 0 is the result */
#define HREDUCE_AVX2_F32(v, OP)                                     \
    do {                                                            \
        v = OP(v, _mm256_permute2f128_ps(v, v, 0x1));               \
        v = OP(v, _mm256_shuffle_ps(v, v, 0x4E));                   \
        v = OP(v, _mm256_shuffle_ps(v, v, 0xB1));                   \
    } while (0)

FN float hsum_avx2_f32(__m256 v)
{
    HREDUCE_AVX2_F32(v, _mm256_add_ps);
    return _mm256_cvtss_f32(v);
}

FN float hmax_avx2_f32(__m256 v)
{
    HREDUCE_AVX2_F32(v, max_nan_avx2_f32);
    return _mm256_cvtss_f32(v);
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
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_MAX(a, b) _mm256_max_ps((a), (b))
#define V_MAX_NAN(a, b) max_nan_avx2_f32((a), (b))
#define V_BLEND(m, a, b) _mm256_blendv_ps((a), (b), _mm256_castsi256_ps(m))
#define V_HSUM(v) hsum_avx2_f32(v)
#define V_HMAX(v) hmax_avx2_f32(v)
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
#define V_FMA(a, b, c) _mm256_fmadd_pd((a), (b), (c))
#define V_MAX(a, b) _mm256_max_pd((a), (b))
#define V_MAX_NAN(a, b) max_nan_avx2_f64((a), (b))
#define V_BLEND(m, a, b) _mm256_blendv_pd((a), (b), _mm256_castsi256_pd(m))
#define V_HSUM(v) ISA(fold_sum)(v)   /* torch has no AVX2 reduction for double: */
#define V_HMAX(v) ISA(fold_max)(v)   /* lanes folded in order */
#define V_MASK_FIRST(k) mask_first_f64_avx2(k)
#define V_LOAD_OR(m, p, fill) \
    _mm256_blendv_pd((fill), _mm256_maskload_pd((p), (m)), _mm256_castsi256_pd(m))
#define V_STORE_MASK(p, m, v) _mm256_maskstore_pd((p), (m), (v))
#define V_ZERO_OUTSIDE(m, v) _mm256_and_pd(_mm256_castsi256_pd(m), (v))
#define V_EXP(v) exp_avx2_f64(v)
#include "softmax_simd_tmpl.h"
#include "softmax_simd_undef.h"

MYATT_TARGET_POP()

#endif
