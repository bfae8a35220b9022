/* SDPA's forward with AVX2 + FMA (sdpa_simd_tmpl.h, once per dtype): register
 * tiles as the GEMM's (float32 6 x 16, float64 4 x 12: 12 accumulators of the
 * 16 ymm registers), the exp of torch's AVX2 flash forward (float32: its
 * exp_u20, below; float64: Sleef's exp_u10, simd_exp_sleef.h).  Compiled for
 * AVX2 by MYATT_TARGET_PUSH (cpu.h) and only called after mk_cpu_isa() saw
 * the CPU (and OS) support it. */
#include "sdpa_internal.h"

#ifdef MYATT_X86

#include <immintrin.h>
#include <math.h>

#include "gemm/gemm_internal.h"

MYATT_TARGET_PUSH(MYATT_TARGET_AVX2)

#include "simd/simd_avx2.h"
#include "gemm/gemm_copy_avx.h"

/* torch's Vectorized<float>::exp_u20 on AVX2 (vec256_float.h): the steps of
 * sdpa_avx512.c's, with a floor instead of a rounding conversion (the same
 * values); NaN gives NaN. */
static inline __attribute__((always_inline)) __m256 sdpa_avx2_exp_u20(__m256 x)
{
    const __m256 ln_flt_min = _mm256_castsi256_ps(_mm256_set1_epi32((int)0xc2aeac50));
    const __m256 ln_flt_max = _mm256_castsi256_ps(_mm256_set1_epi32(0x42b17218));
    const __m256 below = _mm256_cmp_ps(x, ln_flt_min, _CMP_LT_OS);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 src = _mm256_max_ps(_mm256_min_ps(x, ln_flt_max), ln_flt_min);
    __m256 fx = _mm256_fmadd_ps(src, _mm256_castsi256_ps(_mm256_set1_epi32(0x3fb8aa3b)),
                                _mm256_set1_ps(0.5f));
    fx = _mm256_floor_ps(fx);
    const __m256 r = _mm256_fnmadd_ps(fx, _mm256_castsi256_ps(_mm256_set1_epi32(0x3f317218)), src);
    __m256 y = _mm256_fmadd_ps(r, _mm256_set1_ps(0.00828929059f), _mm256_set1_ps(0.0418978221f));
    y = _mm256_fmadd_ps(r, y, _mm256_set1_ps(0.166676521f));
    y = _mm256_fmadd_ps(r, y, _mm256_set1_ps(0.499991506f));
    y = _mm256_fmadd_ps(r, y, _mm256_set1_ps(0.999999701f));
    y = _mm256_fmadd_ps(r, y, _mm256_set1_ps(1.0f));
    const __m256i n1 = _mm256_cvtps_epi32(_mm256_sub_ps(fx, _mm256_set1_ps(1.0f)));
    __m256 pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    pow2 = _mm256_blendv_ps(pow2, _mm256_setzero_ps(), below);
    y = _mm256_mul_ps(_mm256_mul_ps(y, pow2), _mm256_set1_ps(2.0f));
    return _mm256_blendv_ps(y, x, nan);
}

/* the lanes whose mask byte is nonzero (all-ones lanes, as the vocabulary's masks) */
static inline __attribute__((always_inline)) __m256i sdpa_avx2_keep8(const unsigned char *m)
{
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)m));
    return _mm256_xor_si256(_mm256_cmpeq_epi32(b, _mm256_setzero_si256()), _mm256_set1_epi32(-1));
}

static inline __attribute__((always_inline)) __m256i sdpa_avx2_keep4(const unsigned char *m)
{
    int32_t w;
    __builtin_memcpy(&w, m, 4);
    const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(w));
    return _mm256_xor_si256(_mm256_cmpeq_epi64(b, _mm256_setzero_si256()), _mm256_set1_epi32(-1));
}

#define T float
#define SDPA_COPY_T gemm_copy_t_f32
#define VEC(op) avx2_f32_##op
#define SDPA_MR 6
#define SDPA_NV 2
#define SDPA_VEXP(x) sdpa_avx2_exp_u20(x)
#define SDPA_EXP(x) expf(x)
#define SDPA_KEEP(m) sdpa_avx2_keep8(m)
#define SDPA_NAME sdpa_f32_avx2
#include "sdpa_simd_tmpl.h"

#define T double
#define SDPA_COPY_T gemm_copy_t_f64
#define VEC(op) avx2_f64_##op
#define SDPA_MR 4
#define SDPA_NV 3
#define SDPA_VEXP(x) avx2_f64_exp(x)
#define SDPA_EXP(x) exp(x)
#define SDPA_KEEP(m) sdpa_avx2_keep4(m)
#define SDPA_NAME sdpa_f64_avx2
#include "sdpa_simd_tmpl.h"

/* torch's fexp_u20 on AVX2 (sdpa_kernels_f32.fexp_u20), 8 lanes at a time,
 * the last ones masked. */
static void sdpa_avx2_fexp_u20(float *out, const float *in, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        const int left = n - i >= 8 ? 8 : (int)(n - i);
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 x = _mm256_maskload_ps(in + i, m);
        const __m256 src = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504f));
        const __m256 fr = _mm256_sub_ps(src, _mm256_floor_ps(src));
        __m256 r = _mm256_fmadd_ps(fr, _mm256_set1_ps(-0.079204240219773236f),
                                   _mm256_set1_ps(-0.22433836478672356f));
        r = _mm256_fmadd_ps(fr, r, _mm256_set1_ps(0.30354260500649682f));
        r = _mm256_fmadd_ps(fr, r, _mm256_set1_ps(0.00010703434948458272f));
        const __m256 t = _mm256_fmadd_ps(_mm256_set1_ps(8388608.0f), _mm256_sub_ps(src, r),
                                         _mm256_set1_ps(8388608.0f * 127.0f));
        __m256 y = _mm256_castsi256_ps(_mm256_cvttps_epi32(t));
        y = _mm256_blendv_ps(y, _mm256_setzero_ps(),
                             _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ));
        y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        _mm256_maskstore_ps(out + i, m, y);
    }
}

const sdpa_kernels_f32 sdpa_kernels_f32_avx2 = {
    "avx2", sdpa_f32_avx2_ws_elems, sdpa_f32_avx2_state, sdpa_f32_avx2_exp,
    sdpa_avx2_fexp_u20,
};

const sdpa_kernels_f64 sdpa_kernels_f64_avx2 = {
    "avx2", sdpa_f64_avx2_ws_elems, sdpa_f64_avx2_state, sdpa_f64_avx2_exp,
};

MYATT_TARGET_POP()

#endif
