/* torch's horizontal reductions of one vector (at::vec::vec_reduce_all, the
 * last step of vec::reduce_all and vec::map2_reduce_all), written once in a
 * vector vocabulary, so that a kernel summing or maximising lanes (the
 * softmax) gives torch's bits:
 *   float32 (VecReduceAllSIMD on AVX2 and AVX-512): a shuffle tree, lane l
 *     combined with lane l ^ (len / 2), then l ^ (len / 4) ... l ^ 1; lane 0
 *     is the result;
 *   float64 (no SIMD specialisation in torch): the lanes folded in order from
 *     lane 0.
 *
 * A template that extends a vocabulary: included (by simd_avx2.h and
 * simd_avx512.h, once per dtype) with VEC(op) naming the vocabulary's
 * operations, it defines
 *   VEC(lane_max_nan)(a, b)   at::vec::maximum on one lane: NaN if either is
 *   VEC(reduce_add)(v)        the lanes' sum in torch's order
 *   VEC(reduce_max)(v)        the lanes' maximum in torch's order (NaN wins)
 * and undefines VEC.  No include guard on purpose. */

#ifndef VEC
#error "simd_reduce_torch.h: define VEC(op), the vocabulary (simd_avx2.h)"
#endif

MYATT_SIMD_FN VEC(elem) VEC(lane_max_nan)(VEC(elem) a, VEC(elem) b)
{
    return isnan(a) || isnan(b) ? (VEC(elem))NAN : b > a ? b : a;
}

#if VEC(is_f64)
MYATT_SIMD_FN VEC(elem) VEC(reduce_add)(VEC(t) v)
{
    VEC(elem) a[VEC(len)];
    VEC(storeu)(a, v);
    VEC(elem) s = a[0];
    for (int l = 1; l < VEC(len); l++)
        s = s + a[l];
    return s;
}

MYATT_SIMD_FN VEC(elem) VEC(reduce_max)(VEC(t) v)
{
    VEC(elem) a[VEC(len)];
    VEC(storeu)(a, v);
    VEC(elem) m = a[0];
    for (int l = 1; l < VEC(len); l++)
        m = VEC(lane_max_nan)(m, a[l]);
    return m;
}
#else
MYATT_SIMD_FN VEC(elem) VEC(reduce_add)(VEC(t) v)
{
#pragma GCC unroll 4
    for (int d = VEC(len) / 2; d >= 1; d /= 2)
        v = VEC(add)(v, VEC(xor_lanes)(v, d));
    return VEC(first)(v);
}

MYATT_SIMD_FN VEC(elem) VEC(reduce_max)(VEC(t) v)
{
#pragma GCC unroll 4
    for (int d = VEC(len) / 2; d >= 1; d /= 2)
        v = VEC(max_nan)(v, VEC(xor_lanes)(v, d));
    return VEC(first)(v);
}
#endif

#undef VEC
