/* float32 softmax with AVX-512F (softmax_simd_tmpl.h): 16 lanes, masked tails.
 * Built without -march flags: every function carries target("avx512f") and is
 * only called after softmax_isa() saw the CPU (and OS) support it. */
#include "softmax_internal.h"

#ifdef MYATT_SOFTMAX_X86
#include <immintrin.h>

#define API __attribute__((target("avx512f")))
#define FN static inline __attribute__((always_inline, target("avx512f")))
#define ISA(name) name##_avx512

/* exp(x) for float32, max error 0.988 ulp over the whole float range, measured
 * exhaustively against double exp (benchmarks/exp_ulp.c):
 *   x clamped to [-104, 89] (exp(-104) rounds to 0, exp(89) to inf; max/min
 *   keep a NaN x: x86 returns the second operand when one is NaN);
 *   n = round(x log2 e), r = x - n ln2 in two FMA steps (ln2_hi = float(ln2):
 *   the first step is exact), |r| <= ln2/2 + tiny;
 *   exp(r) = 1 + r + r^2 q(r), q a degree-5 minimax-style fit (rel. error 6e-11);
 *   result p * 2^n by scalef: one rounding, denormals and overflow exact. */
FN __m512 exp_avx512(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147182464599609375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-1.904654299957768e-09f), r);
    __m512 q = _mm512_set1_ps(0.00019826318020932376f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.0013946008402854204f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.008333430625498295f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.041666269302368164f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.1666666567325592f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.5f));
    __m512 p = _mm512_fmadd_ps(q, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

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
#define V_EXP(v) exp_avx512(v)

#include "softmax_simd_tmpl.h"

#endif
