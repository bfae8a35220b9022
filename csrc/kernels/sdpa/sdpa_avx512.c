/* SDPA's forward with AVX-512 (sdpa_simd_tmpl.h, once per dtype): register
 * tiles as the GEMM's (float32 6 x 64, float64 8 x 24: 24 accumulators of the
 * 32 zmm registers), the exp of torch's AVX-512 flash forward (float32: its
 * exp_u20, below; float64: Sleef's exp_u10, simd_exp_sleef.h).  Compiled for
 * AVX-512 by MYATT_TARGET_PUSH (cpu.h) and only called after mk_cpu_isa() saw
 * the CPU (and OS) support it. */
#include "sdpa_internal.h"

#ifdef MYATT_X86

#include <immintrin.h>
#include <math.h>

#include "gemm/gemm_internal.h"

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

#include "simd/simd_avx512.h"
#include "gemm/gemm_copy_avx.h"

/* torch's Vectorized<float>::exp_u20 on AVX-512 (vec512_float.h): x clamped
 * to [ln FLT_MIN, ln FLT_MAX], n = floor(x log2 e + 1/2), r = x - n ln 2,
 * exp(r) by a degree-5 polynomial (Horner, FMA), times 2^(n - 1) and 2 (0
 * below ln FLT_MIN).  Its error: benchmarks/exp_ulp.c.  One change: NaN gives
 * NaN (torch's clamp turns it into 2^128-ish), so that NaN scores propagate. */
static inline __attribute__((always_inline)) __m512 sdpa_avx512_exp_u20(__m512 x)
{
    const __m512 ln_flt_min = _mm512_castsi512_ps(_mm512_set1_epi32(0xc2aeac50));
    const __m512 ln_flt_max = _mm512_castsi512_ps(_mm512_set1_epi32(0x42b17218));
    const __mmask16 below = _mm512_cmp_ps_mask(x, ln_flt_min, _CMP_LT_OS);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 src = _mm512_max_ps(_mm512_min_ps(x, ln_flt_max), ln_flt_min);
    __m512 fx = _mm512_fmadd_ps(src, _mm512_castsi512_ps(_mm512_set1_epi32(0x3fb8aa3b)),
                                _mm512_set1_ps(0.5f));
    fx = _mm512_cvtepi32_ps(_mm512_cvt_roundps_epi32(fx, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    const __m512 r = _mm512_fnmadd_ps(fx, _mm512_castsi512_ps(_mm512_set1_epi32(0x3f317218)), src);
    __m512 y = _mm512_fmadd_ps(r, _mm512_set1_ps(0.00828929059f), _mm512_set1_ps(0.0418978221f));
    y = _mm512_fmadd_ps(r, y, _mm512_set1_ps(0.166676521f));
    y = _mm512_fmadd_ps(r, y, _mm512_set1_ps(0.499991506f));
    y = _mm512_fmadd_ps(r, y, _mm512_set1_ps(0.999999701f));
    y = _mm512_fmadd_ps(r, y, _mm512_set1_ps(1.0f));
    const __m512i n1 = _mm512_cvtps_epi32(_mm512_sub_ps(fx, _mm512_set1_ps(1.0f)));
    __m512 pow2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23));
    pow2 = _mm512_mask_blend_ps(below, pow2, _mm512_setzero_ps());
    y = _mm512_mul_ps(_mm512_mul_ps(y, pow2), _mm512_set1_ps(2.0f));
    return _mm512_mask_blend_ps(nan, y, x);
}

/* the lanes whose mask byte is nonzero */
static inline __attribute__((always_inline)) __mmask16 sdpa_avx512_keep16(const unsigned char *m)
{
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)m));
    return _mm512_test_epi32_mask(b, b);
}

static inline __attribute__((always_inline)) __mmask8 sdpa_avx512_keep8(const unsigned char *m)
{
    const __m512i b = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)m));
    return _mm512_test_epi64_mask(b, b);
}

#define T float
#define SDPA_COPY_T gemm_copy_t_f32
#define VEC(op) avx512_f32_##op
#define SDPA_MR 6
#define SDPA_NV 4
#define SDPA_VEXP(x) sdpa_avx512_exp_u20(x)
#define SDPA_EXP(x) expf(x)
#define SDPA_KEEP(m) sdpa_avx512_keep16(m)
#define SDPA_NAME sdpa_f32_avx512
#include "sdpa_simd_tmpl.h"

#define T double
#define SDPA_COPY_T gemm_copy_t_f64
#define VEC(op) avx512_f64_##op
#define SDPA_MR 8
#define SDPA_NV 3
#define SDPA_VEXP(x) avx512_f64_exp(x)
#define SDPA_EXP(x) exp(x)
#define SDPA_KEEP(m) sdpa_avx512_keep8(m)
#define SDPA_NAME sdpa_f64_avx512
#include "sdpa_simd_tmpl.h"

/* torch's fexp_u20 on AVX-512 (sdpa_kernels_f32.fexp_u20), 16 lanes at a
 * time, the last ones masked. */
static void sdpa_avx512_fexp_u20(float *out, const float *in, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(m, in + i);
        const __m512 src = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
        const __m512 fr = _mm512_sub_ps(
            src, _mm512_roundscale_ps(src, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
        __m512 r = _mm512_fmadd_ps(fr, _mm512_set1_ps(-0.079204240219773236f),
                                   _mm512_set1_ps(-0.22433836478672356f));
        r = _mm512_fmadd_ps(fr, r, _mm512_set1_ps(0.30354260500649682f));
        r = _mm512_fmadd_ps(fr, r, _mm512_set1_ps(0.00010703434948458272f));
        const __m512 t = _mm512_fmadd_ps(_mm512_set1_ps(8388608.0f), _mm512_sub_ps(src, r),
                                         _mm512_set1_ps(8388608.0f * 127.0f));
        __m512 y = _mm512_castsi512_ps(_mm512_cvttps_epi32(t));
        y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ),
                                 y, _mm512_setzero_ps());
        y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
        _mm512_mask_storeu_ps(out + i, m, y);
    }
}

const sdpa_kernels_f32 sdpa_kernels_f32_avx512 = {
    "avx512", sdpa_f32_avx512_ws_elems, sdpa_f32_avx512_state, sdpa_f32_avx512_exp,
    sdpa_avx512_fexp_u20,
};

const sdpa_kernels_f64 sdpa_kernels_f64_avx512 = {
    "avx512", sdpa_f64_avx512_ws_elems, sdpa_f64_avx512_state, sdpa_f64_avx512_exp,
};

MYATT_TARGET_POP()

#endif
