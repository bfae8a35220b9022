/* gelu_onednn.h's three float32 loops in vector lanes, one instruction for
 * each of its steps, for one instruction set: included by activation_avx2.c and
 * activation_avx512.c after they define, for their vectors V (GV_LEN floats),
 * masks GV_MASK and 32-bit integers GV_INT, the operations GV(op) used below
 * (load, store, set1, add, mul, div, fma, abs, signbit, xor, min, max, floor,
 * lt, zero_where, pow2, minimax_index, lookup) and GELU_SIMD(name).  The last
 * n % GV_LEN elements take gelu_onednn.h's scalar steps: the same bits.  No
 * include guard on purpose. */
#include "gelu_onednn.h"

#define GV_C(bits) GV(set1)(mk_f32_of_bits(bits))

/* gelu_onednn_exp */
static inline V GELU_SIMD(exp)(V x)
{
    const V lo = GV_C(GELU_EXP_LN_FLT_MIN);
    const GV_MASK below = GV(lt)(x, lo);
    x = GV(max)(GV(min)(x, GV_C(GELU_EXP_LN_FLT_MAX)), lo);
    const V n = GV(floor)(GV(add)(GV(mul)(x, GV_C(GELU_EXP_LOG2E)), GV(set1)(0.5f)));
    const V r = GV(fma)(GV(xor)(n, GV(set1)(-0.0f)), GV_C(GELU_EXP_LN2), x);
    const V scale = GV(zero_where)(below, GV(pow2)(GV(add)(n, GV(set1)(-1.0f))));
    V p = GV_C(gelu_exp_bits[4]);
    for (int d = 3; d >= 0; d--)
        p = GV(fma)(p, r, GV_C(gelu_exp_bits[d]));
    p = GV(fma)(p, r, GV(set1)(1.0f));
    return GV(mul)(GV(mul)(p, scale), GV(set1)(2.0f));
}

/* gelu_as_erf */
static inline V GELU_SIMD(as_erf)(V R, V q)
{
    const V one = GV(set1)(1.0f);
    const V t = GV(div)(one, GV(fma)(GV_C(GELU_AS_P), GV(abs)(R), one));
    V r = GV_C(gelu_as_bits[4]);
    for (int d = 3; d >= 0; d--)
        r = GV(fma)(r, t, GV_C(gelu_as_bits[d]));
    return GV(xor)(GV(fma)(GV(mul)(q, t), r, one), GV(signbit)(R));
}

static void GELU_SIMD(minimax)(float *out, const float *inp, int64_t n)
{
    int64_t i = 0;
    for (; i + GV_LEN <= n; i += GV_LEN) {
        const V x = GV(load)(inp + i), pos = GV(abs)(x);
        const GV_INT k = GV(minimax_index)(pos);
        V p = GV(lookup)(gelu_minimax_bits[5], k);
        for (int d = 4; d >= 0; d--)
            p = GV(fma)(p, pos, GV(lookup)(gelu_minimax_bits[d], k));
        p = GV(xor)(p, GV(signbit)(x));
        GV(store)(out + i, GV(mul)(GV(mul)(x, GV(add)(p, GV(set1)(1.0f))), GV(set1)(0.5f)));
    }
    for (; i < n; i++)
        out[i] = gelu_minimax_1(inp[i]);
}

static void GELU_SIMD(as)(float *out, const float *inp, int64_t n)
{
    int64_t i = 0;
    for (; i + GV_LEN <= n; i += GV_LEN) {
        const V x = GV(load)(inp + i);
        const V R = GV(mul)(x, GV_C(GELU_ONE_OVER_SQRT2));
        const V q = GV(xor)(GELU_SIMD(exp)(GV(xor)(GV(mul)(R, R), GV(set1)(-0.0f))),
                            GV(set1)(-0.0f));
        const V erf = GELU_SIMD(as_erf)(R, q), s = GV(mul)(x, GV(set1)(0.5f));
        GV(store)(out + i, GV(fma)(erf, s, s));
    }
    for (; i < n; i++)
        out[i] = gelu_as_1(inp[i]);
}

static void GELU_SIMD(grad)(float *grad_inp, const float *grad_out, const float *inp, int64_t n)
{
    int64_t i = 0;
    for (; i + GV_LEN <= n; i += GV_LEN) {
        const V R = GV(mul)(GV(load)(inp + i), GV_C(GELU_ONE_OVER_SQRT2));
        const V q = GELU_SIMD(exp)(GV(xor)(GV(mul)(R, R), GV(set1)(-0.0f)));
        const V T = GV(mul)(GV(mul)(R, GV_C(GELU_ONE_OVER_SQRTPI)), q);
        const V erf = GELU_SIMD(as_erf)(R, GV(xor)(q, GV(set1)(-0.0f)));
        const V d = GV(fma)(erf, GV(set1)(0.5f), GV(add)(T, GV(set1)(0.5f)));
        GV(store)(grad_inp + i, GV(mul)(GV(load)(grad_out + i), d));
    }
    for (; i < n; i++)
        grad_inp[i] = grad_out[i] * gelu_as_grad_1(inp[i]);
}

#undef GV_C
