/* The glue around the linear kernel that myatt.linear, myatt.linear_backward
 * and Linear share (linear_ops.c): arrays in, new arrays out. */
#ifndef MYATT_LINEAR_OPS_H
#define MYATT_LINEAR_OPS_H

#include "entry.h"
#include "glue.h"

/* myatt.linear and myatt.linear_backward (linear_function.c): a half-precision
 * Linear's products are their calls */
extern entry linear_entry, linear_backward_entry;

/* out[..., n] = x[..., k] @ weight[n, k]^T + bias, for x already of `dtype`,
 * aligned and in native byte order, x.shape[-1] == k checked by the caller.
 * weight is a view [n, k]; bias is contiguous or NULL.
 * A new C-contiguous array, or NULL with an exception set. */
PyObject *linear_apply(PyArrayObject *x, mk_cmat weight, const void *bias,
                       const myatt_dtype *dtype);

/* linear of bfloat16 x [..., k], weight [n, k], bias [n] or NULL (checked by
 * the caller; what[0..2] name them in messages) on the CPU's bfloat16 dot
 * product, in the order of torch's oneDNN path (kernels/gemm/gemm_bf16.h);
 * Py_NotImplemented (new reference) where that is not what torch runs or this
 * CPU path cannot: m * k * n <= 4096 (torch's cpublas kernels), no
 * AVX512_BF16.  A new array, or NULL. */
PyObject *linear_bf16(PyArrayObject *x, PyArrayObject *weight, PyArrayObject *bias,
                      const char *const *what);

/* The gradients of linear: x [..., k] and grad_out [..., n] already of
 * `dtype`, aligned, native, their shapes checked by the caller; weight a view
 * [n, k].  Returns the new tuple (grad_input shaped like x, grad_weight [n, k],
 * grad_bias [n] or None when !with_bias), or NULL. */
PyObject *linear_grad_apply(PyArrayObject *x, PyArrayObject *grad_out, mk_cmat weight,
                            int with_bias, const myatt_dtype *dtype);

#endif
