/* float32 softmax with AVX2 + FMA (softmax_simd_tmpl.h): 8 lanes.
 * Built without -march flags: every function carries target("avx2,fma") and is
 * only called after softmax_isa() saw the CPU (and OS) support it. */
#include "softmax_internal.h"

#ifdef MYATT_SOFTMAX_X86
#include <immintrin.h>

#define API __attribute__((target("avx2,fma")))
#define FN static inline __attribute__((always_inline, target("avx2,fma")))
#define ISA(name) name##_avx2

/* exp(x) for float32: the same steps and constants as exp_avx512 (see there),
 * so the two give the same bits.  AVX2 has no scalef: 2^n is applied as
 * 2^(n>>1) * 2^(n - (n>>1)), both factors normal for n in [-150, 128], so p
 * times the first is exact and only the second product rounds (one rounding,
 * denormals exact).  A NaN x is put back at the end (its n is no integer). */
FN __m256 exp_avx2(__m256 x)
{
    const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 x0 = x;
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182464599609375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-1.904654299957768e-09f), r);
    __m256 q = _mm256_set1_ps(0.00019826318020932376f);
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.0013946008402854204f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.008333430625498295f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.041666269302368164f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.1666666567325592f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.5f));
    __m256 p = _mm256_fmadd_ps(q, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(e, x0, is_nan);
}

FN __m256i mask_first_avx2(int k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

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
#define V_MASK_FIRST(k) mask_first_avx2(k)
#define V_LOAD_OR(m, p, fill) \
    _mm256_blendv_ps((fill), _mm256_maskload_ps((p), (m)), _mm256_castsi256_ps(m))
#define V_STORE_MASK(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define V_ZERO_OUTSIDE(m, v) _mm256_and_ps(_mm256_castsi256_ps(m), (v))
#define V_EXP(v) exp_avx2(v)

#include "softmax_simd_tmpl.h"

#endif
