/* softmax_half_cols (softmax.h): torch's reduced-precision _vec_softmax on
 * one thread. */
#include "softmax.h"
#include "runtime/cpu.h"
#include "runtime/half.h"

#include <math.h>

/* The columns of one vector of torch's reduced-precision type: two of its
 * float vectors (mk_torch_float_lanes), 32 on AVX-512, 16 otherwise. */
#define SOFTMAX_HALF_GROUP 32

/* Columns [i0, i0 + ib) of the plane inp [n, inner] into out; with `scalar`,
 * torch's scalar path (the exp rounded to `half` before the division). */
static void half_group(float *out, const float *inp, int64_t n, int64_t inner, int64_t i0,
                       int64_t ib, int scalar, mk_half_kind half)
{
    float max[SOFTMAX_HALF_GROUP], sum[SOFTMAX_HALF_GROUP];
    for (int64_t i = 0; i < ib; i++) {
        max[i] = -INFINITY;
        sum[i] = 0;
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < ib; i++) {
            const float x = inp[j * inner + i0 + i];
            if (x > max[i] || isnan(x))
                max[i] = x;
        }
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < ib; i++) {
            const float e = expf(inp[j * inner + i0 + i] - max[i]);
            sum[i] += e;
            out[j * inner + i0 + i] = scalar ? mk_half_round(e, half) : e;
        }
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < ib; i++)
            out[j * inner + i0 + i] /= sum[i];
}

void softmax_half_cols(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner,
                       int half)
{
    const int64_t group = 2 * mk_torch_float_lanes();
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i0 = 0; i0 < inner; i0 += group) {
            const int64_t ib = inner - i0 < group ? inner - i0 : group;
            half_group(out + o * n * inner, inp + o * n * inner, n, inner, i0, ib, ib < group,
                       (mk_half_kind)half);
        }
}
