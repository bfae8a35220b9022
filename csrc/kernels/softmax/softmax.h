/* softmax along one axis of a C-contiguous array viewed as [outer, n, inner]:
 *
 *   out[o, j, i] = exp(inp[o, j, i] - max_j inp[o, :, i]) / sum_j exp(...)
 *
 * (the axis is the middle one; inner == 1 is the last-axis case). out and inp
 * are both contiguous and may be the same buffer (in place).  NaN anywhere in a
 * slice makes the whole slice NaN, and a slice of -inf only is NaN, as in torch.
 * Any size may be 0.  Large inputs are split over threads in runs of whole
 * slices (threads.h); the bits do not depend on the thread count.  The data
 * are float (_f32) or double (_f64), passed as void * as every public kernel's
 * (view.h), so that the glue holds one table of them per dtype. */
#ifndef MYATT_KERNELS_SOFTMAX_H
#define MYATT_KERNELS_SOFTMAX_H

#include <stdint.h>

void softmax_forward_f32(void *out, const void *inp, int64_t outer, int64_t n, int64_t inner);
void softmax_forward_f64(void *out, const void *inp, int64_t outer, int64_t n, int64_t inner);

/* The float32 softmax of a half-precision input along a middle axis (inner >
 * 1), whose result the caller rounds once more to the half dtype `half`
 * (runtime/half.h), as torch 2.13 computes it on one thread: per plane
 * [n, inner], each group of whole columns (from column 0 of the row; 32
 * columns on the avx512 path, 16 on the others, torch's vector there)
 * e = exp(x - max), its float32 sum down the column in order, out = e / sum;
 * the columns left: out = round(e) / sum, the exp rounded to the
 * half dtype first (torch's scalar path; with more threads torch sends the
 * columns of a chunk that fill no group there too, so its bits depend on its
 * thread count: docs/numerics.md).  One thread; any size may be 0. */
void softmax_half_cols(float *out, const float *inp, int64_t outer, int64_t n, int64_t inner,
                       int half);

/* softmax_forward_f32 along the last axis (rows [rows, n]) of a float16 or
 * bfloat16 input (`half`, runtime/half.h), read and written in that dtype:
 * each row widened to float32 in a small buffer, the float32 kernel's row,
 * the result rounded once (torch's reduced-precision softmax on the last
 * axis, the float32 kernel's bits).  Threads as softmax_forward_f32's.
 * Returns 0, or -1 when a buffer could not be allocated. */
int softmax_forward_half_rows(uint16_t *out, const uint16_t *inp, int64_t rows, int64_t n,
                              int half);

/* The gradient of the softmax's input, from the softmax's output and the
 * gradient of that output, along the middle axis of [outer, n, inner]:
 *
 *   grad_inp[o, j, i] = out[o, j, i] * (grad_out[o, j, i] - sum_j grad_out * out)
 *
 * (torch's _softmax_backward_data).  All three are contiguous; grad_inp may be
 * the same buffer as grad_out or out (in place).  Any size may be 0. */
void softmax_backward_f32(void *grad_inp, const void *grad_out, const void *out,
                          int64_t outer, int64_t n, int64_t inner);

/* softmax_backward_f32 along the last axis of float16 or bfloat16 arrays, read
 * and written in that dtype, as softmax_forward_half_rows: 0, or -1 when a
 * buffer could not be allocated. */
int softmax_backward_half_rows(uint16_t *grad_inp, const uint16_t *grad_out,
                               const uint16_t *out, int64_t rows, int64_t n, int half);
void softmax_backward_f64(void *grad_inp, const void *grad_out, const void *out,
                          int64_t outer, int64_t n, int64_t inner);

#endif
