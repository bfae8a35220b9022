/* Column sums as torch computes them: out[j] = sum_i x[i, j] for x [m, n]
 * (tensor.sum(0): the bias gradient autograd gives for linear), bit for bit.
 *
 * torch's cascade_sum (SumKernel.cpp) runs its AVX2 build even on AVX-512
 * machines (no AVX-512 build is registered), with vectors of 8 floats or 4
 * doubles whose lanes are columns: every column is an independent scalar sum,
 * in one of two orders chosen by its position (see colsum_tmpl.h and
 * docs/torch-softmax.md).  Threads split columns at whole blocks, so thread
 * counts never change torch's bits; so does this kernel, for large x.
 *
 * Where x's rows are contiguous (rs == 1: a transposed gradient) or n == 1,
 * torch reduces an inner dimension instead: each column alone, lanes along it
 * (colsum_tmpl.h, inner_sum).
 *
 * x [m, n] is a strided view; out [n] is contiguous.  m == 0 gives zeros.
 * Cannot fail. */
#ifndef MYATT_KERNELS_COLSUM_H
#define MYATT_KERNELS_COLSUM_H

#include "view.h"

void colsum_f32(void *out, mk_cmat x);
void colsum_f64(void *out, mk_cmat x);

/* The sums torch gives a float16 or bfloat16 x (float32 accumulation): x holds
 * its values as float32; where torch reduces an inner dimension (one column, or
 * a transposed x) its vector loads are of 16 half values, their two float32
 * halves added first. */
void colsum_half_f32(void *out, mk_cmat x);

#endif
