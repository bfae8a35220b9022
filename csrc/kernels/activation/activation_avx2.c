/* gelu (float32, approximate='none') with AVX2 + FMA: activation_simd_tmpl.h's
 * loops over 8 lanes, the minimax coefficients gathered.  Built without -march
 * flags: compiled for AVX2 by MYATT_TARGET_PUSH (cpu.h) and only called after
 * mk_cpu_isa() chose that path. */
#include "activation_internal.h"

#ifdef MYATT_X86

MYATT_TARGET_PUSH(MYATT_TARGET_AVX2)

#include <immintrin.h>

#include "gelu_onednn.h"

typedef __m256 V;
#define GV_LEN 8
#define GV_MASK __m256
#define GV_INT __m256i
#define GV(op) gv_##op
#define GELU_SIMD(name) gelu_##name##_avx2

static inline V gv_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void gv_store(float *p, V v) { _mm256_storeu_ps(p, v); }
static inline V gv_set1(float x) { return _mm256_set1_ps(x); }
static inline V gv_add(V a, V b) { return _mm256_add_ps(a, b); }
static inline V gv_mul(V a, V b) { return _mm256_mul_ps(a, b); }
static inline V gv_div(V a, V b) { return _mm256_div_ps(a, b); }
static inline V gv_fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
static inline V gv_min(V a, V b) { return _mm256_min_ps(a, b); }
static inline V gv_max(V a, V b) { return _mm256_max_ps(a, b); }
static inline V gv_floor(V a) { return _mm256_floor_ps(a); }
static inline V gv_abs(V a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
static inline V gv_signbit(V a) { return _mm256_and_ps(a, _mm256_set1_ps(-0.0f)); }
static inline V gv_xor(V a, V b) { return _mm256_xor_ps(a, b); }
static inline V gv_lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OS); }
static inline V gv_zero_where(V m, V a) { return _mm256_andnot_ps(m, a); }
/* 2^n for the integral n (-127 <= n <= 127: n + 127 in the exponent field) */
static inline V gv_pow2(V n)
{
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline __m256i gv_minimax_index(V pos)
{
    __m256i k = _mm256_add_epi32(_mm256_castps_si256(pos), _mm256_set1_epi32((int)GELU_MINIMAX_IDX_BIAS));
    k = _mm256_srai_epi32(k, 21);
    k = _mm256_min_epi32(_mm256_max_epi32(k, _mm256_set1_epi32(1)), _mm256_set1_epi32(24));
    const __m256i above = _mm256_castps_si256(_mm256_cmp_ps(gv_set1(mk_f32_of_bits(GELU_MINIMAX_RBOUND)), pos, _CMP_LT_OS));
    return _mm256_blendv_epi8(k, _mm256_set1_epi32(23), above);
}
static inline V gv_lookup(const uint32_t row[32], __m256i k)
{
    return _mm256_i32gather_ps((const float *)row, k, 4);
}

#include "activation_simd_tmpl.h"

const gelu_erf_kernels gelu_erf_kernels_avx2 = {
    "avx2", gelu_minimax_avx2, gelu_as_avx2, gelu_grad_avx2,
};

MYATT_TARGET_POP()

#endif
