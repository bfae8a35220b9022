/* gelu (float32, approximate='none') with AVX-512: activation_simd_tmpl.h's
 * loops over 16 lanes, the minimax coefficients looked up by vpermt2ps.  Built
 * without -march flags: compiled for AVX-512 by MYATT_TARGET_PUSH (cpu.h) and
 * only called after mk_cpu_isa() chose that path. */
#include "activation_internal.h"

#ifdef MYATT_X86

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

#include <immintrin.h>

#include "gelu_onednn.h"

typedef __m512 V;
#define GV_LEN 16
#define GV_MASK __mmask16
#define GV_INT __m512i
#define GV(op) gv_##op
#define GELU_SIMD(name) gelu_##name##_avx512

static inline V gv_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void gv_store(float *p, V v) { _mm512_storeu_ps(p, v); }
static inline V gv_set1(float x) { return _mm512_set1_ps(x); }
static inline V gv_add(V a, V b) { return _mm512_add_ps(a, b); }
static inline V gv_mul(V a, V b) { return _mm512_mul_ps(a, b); }
static inline V gv_div(V a, V b) { return _mm512_div_ps(a, b); }
static inline V gv_fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
static inline V gv_min(V a, V b) { return _mm512_min_ps(a, b); }
static inline V gv_max(V a, V b) { return _mm512_max_ps(a, b); }
static inline V gv_floor(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
static inline V gv_bits_and(V a, uint32_t m)
{
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)m)));
}
static inline V gv_abs(V a) { return gv_bits_and(a, 0x7fffffffu); }
static inline V gv_signbit(V a) { return gv_bits_and(a, 0x80000000u); }
static inline V gv_xor(V a, V b)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline __mmask16 gv_lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OS); }
static inline V gv_zero_where(__mmask16 m, V a) { return _mm512_maskz_mov_ps((__mmask16)~m, a); }
/* 2^n for the integral n (-127 <= n <= 127: n + 127 in the exponent field) */
static inline V gv_pow2(V n)
{
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
static inline __m512i gv_minimax_index(V pos)
{
    __m512i k = _mm512_add_epi32(_mm512_castps_si512(pos), _mm512_set1_epi32((int)GELU_MINIMAX_IDX_BIAS));
    k = _mm512_srai_epi32(k, 21);
    k = _mm512_min_epi32(_mm512_max_epi32(k, _mm512_set1_epi32(1)), _mm512_set1_epi32(24));
    const __mmask16 above = _mm512_cmp_ps_mask(gv_set1(mk_f32_of_bits(GELU_MINIMAX_RBOUND)), pos, _CMP_LT_OS);
    return _mm512_mask_mov_epi32(k, above, _mm512_set1_epi32(23));
}
static inline V gv_lookup(const uint32_t row[32], __m512i k)
{
    return _mm512_permutex2var_ps(_mm512_loadu_ps((const float *)row), k,
                                  _mm512_loadu_ps((const float *)row + 16));
}

#include "activation_simd_tmpl.h"

const gelu_erf_kernels gelu_erf_kernels_avx512 = {
    "avx512", gelu_minimax_avx512, gelu_as_avx512, gelu_grad_avx512,
};

MYATT_TARGET_POP()

#endif
