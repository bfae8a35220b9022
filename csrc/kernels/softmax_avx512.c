/* softmax with AVX-512F (softmax_simd_tmpl.h, once per dtype): 16 float or
 * 8 double lanes, masked tails.  Built without -march flags: every function
 * carries target("avx512f") and is only called after mk_cpu_isa() saw the
 * CPU (and OS) support it. */
#include "softmax_internal.h"

#ifdef MYATT_SOFTMAX_X86
#include <immintrin.h>

#include "softmax_exp_coef.h"

#define API __attribute__((target("avx512f")))
#define FN static inline __attribute__((always_inline, target("avx512f")))

/* exp(x), the steps of softmax_exp_coef.h.  max/min keep a NaN x (x86 returns
 * the second operand when one is NaN), and scalef applies 2^n with a single
 * rounding: denormal results and overflow to inf come out exact.  Max error,
 * measured by benchmarks/exp_ulp.c against a higher-precision exp:
 * float32 0.988 ulp (all floats), float64 see exp_avx512_f64. */
FN __m512 exp_avx512_f32(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(EXPF_LO), x);
    x = _mm512_min_ps(_mm512_set1_ps(EXPF_HI), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXPF_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPF_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPF_LN2_LO), r);
    __m512 q = _mm512_set1_ps(EXPF_Q5);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXPF_Q4));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXPF_Q3));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXPF_Q2));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXPF_Q1));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(EXPF_Q0));
    __m512 p = _mm512_fmadd_ps(q, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* float64: max error 0.972 ulp over 10^8 doubles spread over [-746, 710]
 * (benchmarks/exp_ulp.c, against long double expl) */
FN __m512d exp_avx512_f64(__m512d x)
{
    x = _mm512_max_pd(_mm512_set1_pd(EXPD_LO), x);
    x = _mm512_min_pd(_mm512_set1_pd(EXPD_HI), x);
    const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(EXPD_LOG2E)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(EXPD_LN2_HI), x);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(EXPD_LN2_LO), r);
    __m512d q = _mm512_set1_pd(EXPD_Q11);
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q10));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q9));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q8));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q7));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q6));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q5));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q4));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q3));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q2));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q1));
    q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXPD_Q0));
    __m512d p = _mm512_fmadd_pd(q, _mm512_mul_pd(r, r), r);
    p = _mm512_add_pd(p, _mm512_set1_pd(1.0));
    return _mm512_scalef_pd(p, n);
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
#define V_MAX(a, b) _mm512_max_ps((a), (b))
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
#define V_MAX(a, b) _mm512_max_pd((a), (b))
#define V_MASK_FIRST(k) ((__mmask8)((1u << (k)) - 1u))
#define V_LOAD_OR(m, p, fill) _mm512_mask_loadu_pd((fill), (m), (p))
#define V_STORE_MASK(p, m, v) _mm512_mask_storeu_pd((p), (m), (v))
#define V_ZERO_OUTSIDE(m, v) _mm512_maskz_mov_pd((m), (v))
#define V_EXP(v) exp_avx512_f64(v)
#include "softmax_simd_tmpl.h"
#include "softmax_simd_undef.h"

#endif
