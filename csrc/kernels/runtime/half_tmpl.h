/* The conversion loops of half.h, written once and compiled per path (half.c,
 * half_avx2.c, half_avx512.c: the same C, vectorised by the compiler for each
 * instruction set, so every path gives the same bits).  Included with
 * SUF(name) defined; defines the path's table SUF(mk_half_loops).  A path
 * with loops of its own (the same bits: half_avx2.c, half_avx512.c) defines
 * HALF_NARROW and HALF_WIDEN as their names first. */
#ifndef SUF
#error "half_tmpl.h needs SUF"
#endif

#ifndef HALF_NARROW
#define HALF_NARROW SUF(narrow)
#define HALF_WIDEN SUF(widen)

static void SUF(narrow)(uint16_t *dst, const float *src, int64_t n, mk_half_kind kind)
{
    if (kind == MK_HALF_BF16)   /* (one loop per kind: each vectorises) */
        for (int64_t i = 0; i < n; i++)
            dst[i] = mk_bf16_of_f32(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = mk_f16_of_f32(src[i]);
}

static void SUF(widen)(float *dst, const uint16_t *src, int64_t n, mk_half_kind kind)
{
    if (kind == MK_HALF_BF16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = mk_f32_of_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = mk_f32_of_f16(src[i]);
}

#endif

static void SUF(round)(float *x, int64_t n, mk_half_kind kind)
{
    if (kind == MK_HALF_BF16)
        for (int64_t i = 0; i < n; i++)
            x[i] = mk_half_round(x[i], MK_HALF_BF16);
    else if (kind == MK_HALF_F16)
        for (int64_t i = 0; i < n; i++)
            x[i] = mk_half_round(x[i], MK_HALF_F16);
}

const mk_half_loops SUF(mk_half_loops) = {HALF_NARROW, HALF_WIDEN, SUF(round)};

#undef SUF
#undef HALF_NARROW
#undef HALF_WIDEN
