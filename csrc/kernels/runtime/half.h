/* A float's bits and back (mk_f32_bits, mk_f32_of_bits), and
 * float32 <-> float16 and bfloat16, as torch and NumPy convert: round to
 * nearest even, overflow to inf (float16 from 65520 up), subnormals kept,
 * NaN stays NaN (quiet; the payload is not kept).  Pure bit arithmetic: the
 * same on every x86-64 path, and independent of the MXCSR's flush modes only
 * if they are off (they are: no -ffast-math, docs/numerics.md). */
#ifndef MYATT_KERNELS_HALF_H
#define MYATT_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

typedef enum {
    MK_HALF_NONE = 0,   /* float32 itself */
    MK_HALF_F16 = 1,
    MK_HALF_BF16 = 2,
} mk_half_kind;

static inline uint32_t mk_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mk_f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t mk_bf16_of_f32(float f)
{
    const uint32_t u = mk_f32_bits(f);
    /* NaN: quiet, as torch's scalar path (without branches, so that loops vectorise) */
    const uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)((((u + 0x7fffu + ((u >> 16) & 1)) >> 16) & ~nan) | (((u >> 16) | 0x40) & nan));
}

static inline float mk_f32_of_bf16(uint16_t h)
{
    return mk_f32_of_bits((uint32_t)h << 16);
}

/* F. Giesen's float_to_half_fast3_rtne: the subnormal range by one float
 * addition (round to nearest even), the normal range by integer rounding;
 * without branches (each case computed, one kept), so that loops vectorise. */
static inline uint16_t mk_f16_of_f32(float f)
{
    const uint32_t u = mk_f32_bits(f), a = u & 0x7fffffffu;
    const uint32_t sign = (u >> 16) & 0x8000u;
    /* 65536 and up, inf, NaN */
    const uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u);
    const uint32_t big_o = (0x7e00u & nan) | (0x7c00u & ~nan);
    /* below 2^-14: subnormal or zero (0.5's ulp is 2^-24) */
    const uint32_t small_o = mk_f32_bits(mk_f32_of_bits(a) + 0.5f) - 0x3f000000u;
    /* normal: exponent -112, rounding bias (65520 and up carry into inf) */
    const uint32_t normal_o = (a + 0xc8000fffu + ((a >> 13) & 1)) >> 13;
    const uint32_t big = 0u - (uint32_t)(a >= 0x47800000u);
    const uint32_t small = 0u - (uint32_t)(a < 0x38800000u);
    const uint32_t o = (big_o & big) | (small_o & small & ~big) | (normal_o & ~small & ~big);
    return (uint16_t)(o | sign);
}

/* Exact; without branches, as mk_f16_of_f32. */
static inline float mk_f32_of_f16(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    const uint32_t normal = ((e + 112) << 23) | (m << 13);
    const uint32_t sub = mk_f32_bits((float)(int32_t)m * 5.9604644775390625e-8f);  /* m 2^-24 */
    const uint32_t infnan = 0x7f800000u | (m << 13) | ((0u - (uint32_t)(m != 0)) & 0x400000u);
    const uint32_t zero_e = 0u - (uint32_t)(e == 0), max_e = 0u - (uint32_t)(e == 0x1f);
    return mk_f32_of_bits(sign | (sub & zero_e) | (infnan & max_e) | (normal & ~zero_e & ~max_e));
}

/* mk_f32_of_bf16(mk_bf16_of_f32(x)) and mk_f32_of_f16(mk_f16_of_f32(x)) on
 * the bits, without the 16-bit values between (the same bits on every
 * float32, checked once, all 2^32): the roundings of the flash kernel's
 * weights, in loops that vectorise at full width. */
static inline uint32_t mk_bf16_round_bits(uint32_t u)
{
    const uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
    return (rounded & ~nan) | ((u | 0x400000u) & 0xffff0000u & nan);
}

static inline uint32_t mk_f16_round_bits(uint32_t u)
{
    const uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
    /* normal float16 range: 11 significant bits, to nearest even; 65520 and up
     * (inf too) round past 65504: inf */
    uint32_t normal = (a + 0xfffu + ((a >> 13) & 1)) & 0xffffe000u;
    const uint32_t over = 0u - (uint32_t)(normal > 0x477fe000u);
    normal = (normal & ~over) | (0x7f800000u & over);
    /* below 2^-14: multiples of 2^-24, by one float addition (0.5's ulp) */
    const uint32_t sub = mk_f32_bits((mk_f32_of_bits(a) + 0.5f) - 0.5f);
    const uint32_t small = 0u - (uint32_t)(a < 0x38800000u);
    const uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u);
    const uint32_t r = (sub & small) | (normal & ~small);
    return sign | (r & ~nan) | (0x7fc00000u & nan);
}

/* x rounded to the nearest value of the half dtype `kind` (MK_HALF_NONE: x). */
static inline float mk_half_round(float x, mk_half_kind kind)
{
    return kind == MK_HALF_BF16 ? mk_f32_of_bits(mk_bf16_round_bits(mk_f32_bits(x)))
           : kind == MK_HALF_F16 ? mk_f32_of_bits(mk_f16_round_bits(mk_f32_bits(x))) : x;
}

/* dst[i] = src[i] rounded to `kind` (F16 or BF16), n elements, large arrays
 * by all threads.  Cannot fail. */
void mk_f32_to_half(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind);

/* dst[i] = src[i] (F16 or BF16) as float32, exact; n elements, large arrays
 * by all threads.  Cannot fail. */
void mk_half_to_f32(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind);

/* The same on the calling thread only (inside another kernel's threads). */
void mk_f32_to_half_here(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind);
void mk_half_to_f32_here(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind);

/* x[i] = mk_half_round(x[i], kind), n elements.  Cannot fail. */
void mk_half_round_inplace(float *x, int64_t n, mk_half_kind kind);

#endif
