/* half.h's conversion loops (half_tmpl.h) compiled for AVX-512 whatever the
 * build's flags; used only when mk_cpu_isa() chose that path. */
#include "cpu.h"

#ifdef MYATT_X86

#include "half_internal.h"

#include <immintrin.h>

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

/* 16 at a time at full width (the compiler's vectorisation of half_tmpl.h's
 * loops narrows through 128-bit registers: 3x slower), the same bits as
 * mk_bf16_of_f32 / mk_f16_of_f32 (NaN: quiet, 0x7e00 for float16) and their
 * inverses; the tails by those. */
static void narrow16(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    int64_t i = 0;
    if (kind == MK_HALF_BF16) {
        const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff),
                      quiet = _mm512_set1_epi32(0x40);
        for (; i + 16 <= n; i += 16) {
            const __m512i u = _mm512_loadu_si512(src + i), hi = _mm512_srli_epi32(u, 16);
            __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(hi, one));
            r = _mm512_srli_epi32(r, 16);
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
            r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
        }
        for (; i < n; i++)
            dst[i] = mk_bf16_of_f32(src[i]);
    } else {
        const __m512i nan_h = _mm512_set1_epi32(0x7e00), sign = _mm512_set1_epi32(0x8000);
        for (; i + 16 <= n; i += 16) {
            const __m512 x = _mm512_loadu_ps(src + i);
            const __m512i u = _mm512_castps_si512(x);
            __m512i r = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
            r = _mm512_mask_mov_epi32(
                r, nan, _mm512_or_si512(nan_h, _mm512_and_si512(_mm512_srli_epi32(u, 16), sign)));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
        }
        for (; i < n; i++)
            dst[i] = mk_f16_of_f32(src[i]);
    }
}

static void widen16(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind)
{
    int64_t i = 0;
    if (kind == MK_HALF_BF16) {
        for (; i + 16 <= n; i += 16) {
            const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
            _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
        }
        for (; i < n; i++)
            dst[i] = mk_f32_of_bf16(src[i]);
    } else {
        for (; i + 16 <= n; i += 16)   /* (a signalling NaN quieted, as mk_f32_of_f16) */
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
        for (; i < n; i++)
            dst[i] = mk_f32_of_f16(src[i]);
    }
}

#define HALF_NARROW narrow16
#define HALF_WIDEN widen16
#define SUF(name) name##_avx512
#include "half_tmpl.h"

MYATT_TARGET_POP()

#endif
