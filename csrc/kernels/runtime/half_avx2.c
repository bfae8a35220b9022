/* half.h's conversion loops (half_tmpl.h) compiled for AVX2 whatever the
 * build's flags; used only when mk_cpu_isa() chose that path. */
#include "cpu.h"

#ifdef MYATT_X86

#include "half_internal.h"

#include <immintrin.h>

MYATT_TARGET_PUSH(MYATT_TARGET_AVX2)

/* bfloat16 8 at a time at full width (as half_avx512.c's; float16 through the
 * compiler's loops: F16C is not part of this path's target), the same bits. */
static void narrow8(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    int64_t i = 0;
    if (kind == MK_HALF_BF16) {
        const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff),
                      quiet = _mm256_set1_epi32(0x40), abs_mask = _mm256_set1_epi32(0x7fffffff),
                      inf = _mm256_set1_epi32(0x7f800000);
        for (; i + 8 <= n; i += 8) {
            const __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
            const __m256i hi = _mm256_srli_epi32(u, 16);
            __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(hi, one));
            r = _mm256_srli_epi32(r, 16);
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
            r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
            r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);   /* (all <= 0xffff) */
            _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(r));
        }
        for (; i < n; i++)
            dst[i] = mk_bf16_of_f32(src[i]);
    } else {
        for (; i < n; i++)
            dst[i] = mk_f16_of_f32(src[i]);
    }
}

static void widen8(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind)
{
    int64_t i = 0;
    if (kind == MK_HALF_BF16) {
        for (; i + 8 <= n; i += 8) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
            _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
        }
        for (; i < n; i++)
            dst[i] = mk_f32_of_bf16(src[i]);
    } else {
        for (; i < n; i++)
            dst[i] = mk_f32_of_f16(src[i]);
    }
}

#define HALF_NARROW narrow8
#define HALF_WIDEN widen8
#define SUF(name) name##_avx2
#include "half_tmpl.h"

MYATT_TARGET_POP()

#endif
