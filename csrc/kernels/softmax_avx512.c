/* softmax with AVX-512F (softmax_simd_tmpl.h, once per dtype): 16 float or
 * 8 double lanes, masked tails; along the last axis torch's AVX-512 kernel,
 * bit for bit.  Built without -march flags: compiled for AVX-512 by
 * MYATT_TARGET_PUSH (cpu.h) and only called after mk_cpu_isa() saw the CPU
 * (and OS) support it. */
#include "softmax_internal.h"

#ifdef MYATT_X86
#include <immintrin.h>
#include <math.h>

#include "softmax_exp_sleef.h"

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

#define API
#define FN static inline __attribute__((always_inline))

/* exp(x): Sleef's expf_u10 / exp_u10, step for step (softmax_exp_sleef.h), as
 * torch's Vectorized<float/double>::exp() computes it on AVX-512. */
FN __m512 exp_avx512_f32(__m512 d)
{
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(d, _mm512_set1_ps(SLEEF_R_LN2F)));
    const __m512 qf = _mm512_cvtepi32_ps(q);
    __m512 s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-SLEEF_L2UF), d);
    s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-SLEEF_L2LF), s);
    __m512 u = _mm512_set1_ps(SLEEF_EXPF_C5);
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(SLEEF_EXPF_C4));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(SLEEF_EXPF_C3));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(SLEEF_EXPF_C2));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(SLEEF_EXPF_C1));
    u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.5f));
    u = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
    /* u * 2^(q >> 1) * 2^(q - (q >> 1)) */
    const __m512i q1 = _mm512_srai_epi32(q, 1), q2 = _mm512_sub_epi32(q, q1);
    const __m512i bias = _mm512_set1_epi32(0x7f);
    u = _mm512_mul_ps(u, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(q1, bias), 23)));
    u = _mm512_mul_ps(u, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(q2, bias), 23)));
    u = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, _mm512_set1_ps(SLEEF_EXPF_ZERO_BELOW), _CMP_NLT_UQ), u);
    return _mm512_mask_mov_ps(u, _mm512_cmp_ps_mask(_mm512_set1_ps(SLEEF_EXPF_INF_ABOVE), d, _CMP_LT_OQ),
                              _mm512_set1_ps(INFINITY));
}

FN __m512d exp_avx512_f64(__m512d d)
{
    const __m512d u0 = _mm512_roundscale_pd(_mm512_mul_pd(d, _mm512_set1_pd(SLEEF_R_LN2)),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i q = _mm512_cvtpd_epi32(u0);
    __m512d s = _mm512_fmadd_pd(u0, _mm512_set1_pd(-SLEEF_L2U), d);
    s = _mm512_fmadd_pd(u0, _mm512_set1_pd(-SLEEF_L2L), s);
    const __m512d s2 = _mm512_mul_pd(s, s), s4 = _mm512_mul_pd(s2, s2), s8 = _mm512_mul_pd(s4, s4);
#define C(i) _mm512_set1_pd(SLEEF_EXP_C##i)
#define MLA(a, b, c) _mm512_fmadd_pd((a), (b), (c))
    __m512d u = MLA(s8, MLA(s, C(10), C(9)),
                    MLA(s4, MLA(s2, MLA(s, C(8), C(7)), MLA(s, C(6), C(5))),
                        MLA(s2, MLA(s, C(4), C(3)), MLA(s, C(2), C(1)))));
#undef C
#undef MLA
    u = _mm512_fmadd_pd(u, s, _mm512_set1_pd(0.5));
    u = _mm512_fmadd_pd(u, s, _mm512_set1_pd(1.0));
    u = _mm512_fmadd_pd(u, s, _mm512_set1_pd(1.0));
    const __m256i q1 = _mm256_srai_epi32(q, 1), q2 = _mm256_sub_epi32(q, q1);
    const __m256i bias = _mm256_set1_epi32(0x3ff);
    u = _mm512_mul_pd(u, _mm512_castsi512_pd(
            _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(q1, bias)), 52)));
    u = _mm512_mul_pd(u, _mm512_castsi512_pd(
            _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(q2, bias)), 52)));
    u = _mm512_mask_mov_pd(u, _mm512_cmp_pd_mask(d, _mm512_set1_pd(SLEEF_EXP_INF_ABOVE), _CMP_GT_OQ),
                           _mm512_set1_pd(INFINITY));
    return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(d, _mm512_set1_pd(SLEEF_EXP_ZERO_BELOW), _CMP_NLT_UQ), u);
}

/* at::vec::maximum: NaN if either lane is NaN */
FN __m512 max_nan_avx512_f32(__m512 a, __m512 b)
{
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q),
                              _mm512_set1_ps(NAN));
}

FN __m512d max_nan_avx512_f64(__m512d a, __m512d b)
{
    return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q),
                              _mm512_set1_pd(NAN));
}

/* torch's horizontal reduction of 16 float lanes on AVX-512 (VecReduceAllSIMD):
 * lane i with i ^ 8, then i ^ 4, i ^ 2, i ^ 1; lane 0 is the result */
#define HREDUCE_AVX512_F32(v, OP)                                   \
    do {                                                            \
        v = OP(v, _mm512_shuffle_f32x4(v, v, 0x4E));                \
        v = OP(v, _mm512_shuffle_f32x4(v, v, 0xB1));                \
        v = OP(v, _mm512_shuffle_ps(v, v, 0x4E));                   \
        v = OP(v, _mm512_shuffle_ps(v, v, 0xB1));                   \
    } while (0)

FN float hsum_avx512_f32(__m512 v)
{
    HREDUCE_AVX512_F32(v, _mm512_add_ps);
    return _mm512_cvtss_f32(v);
}

FN float hmax_avx512_f32(__m512 v)
{
    HREDUCE_AVX512_F32(v, max_nan_avx512_f32);
    return _mm512_cvtss_f32(v);
}

/* ---- float32 ---- */
#define T float
#define ISA(name) name##_f32_avx512
#define VF __m512
#define VMASK __mmask16
#define VLEN 16
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define V_SUB(a, b) _mm512_sub_ps((a), (b))
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_MAX(a, b) _mm512_max_ps((a), (b))
#define V_MAX_NAN(a, b) max_nan_avx512_f32((a), (b))
#define V_BLEND(m, a, b) _mm512_mask_blend_ps((m), (a), (b))
#define V_HSUM(v) hsum_avx512_f32(v)
#define V_HMAX(v) hmax_avx512_f32(v)
#define V_MASK_FIRST(k) ((__mmask16)((1u << (k)) - 1u))
#define V_LOAD_OR(m, p, fill) _mm512_mask_loadu_ps((fill), (m), (p))
#define V_STORE_MASK(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define V_ZERO_OUTSIDE(m, v) _mm512_maskz_mov_ps((m), (v))
#define V_EXP(v) exp_avx512_f32(v)
#include "softmax_simd_tmpl.h"
#include "softmax_simd_undef.h"

/* ---- float64 ---- */
#define T double
#define ISA(name) name##_f64_avx512
#define VF __m512d
#define VMASK __mmask8
#define VLEN 8
#define V_SET1(x) _mm512_set1_pd(x)
#define V_LOADU(p) _mm512_loadu_pd(p)
#define V_STOREU(p, v) _mm512_storeu_pd((p), (v))
#define V_ADD(a, b) _mm512_add_pd((a), (b))
#define V_SUB(a, b) _mm512_sub_pd((a), (b))
#define V_MUL(a, b) _mm512_mul_pd((a), (b))
#define V_FMA(a, b, c) _mm512_fmadd_pd((a), (b), (c))
#define V_MAX(a, b) _mm512_max_pd((a), (b))
#define V_MAX_NAN(a, b) max_nan_avx512_f64((a), (b))
#define V_BLEND(m, a, b) _mm512_mask_blend_pd((m), (a), (b))
#define V_HSUM(v) ISA(fold_sum)(v)   /* torch has no AVX-512 reduction for double: */
#define V_HMAX(v) ISA(fold_max)(v)   /* lanes folded in order */
#define V_MASK_FIRST(k) ((__mmask8)((1u << (k)) - 1u))
#define V_LOAD_OR(m, p, fill) _mm512_mask_loadu_pd((fill), (m), (p))
#define V_STORE_MASK(p, m, v) _mm512_mask_storeu_pd((p), (m), (v))
#define V_ZERO_OUTSIDE(m, v) _mm512_maskz_mov_pd((m), (v))
#define V_EXP(v) exp_avx512_f64(v)
#include "softmax_simd_tmpl.h"
#include "softmax_simd_undef.h"

MYATT_TARGET_POP()

#endif
