/* The glue around the linear kernel that myatt.linear, myatt.linear_backward
 * and Linear share (linear_ops.c): arrays in, new arrays out. */
#ifndef MYATT_LINEAR_OPS_H
#define MYATT_LINEAR_OPS_H

#include "glue.h"

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

/* Whether torch runs a product of `work` multiply-adds with operands of dtype
 * dt in its naive GEMM orders (gemm_cpublas.h): float16 always, bfloat16 up
 * to oneDNN's threshold (4096). */
int cpublas_runs(const myatt_dtype *dt, double work);

/* linear of half-precision x [..., k], weight [n, k], bias [n] or NULL (of one
 * half dtype, checked by the caller; what[0..2] name them in messages) in the
 * order of torch's naive GEMM for their layouts (kernels/gemm/gemm_cpublas.h:
 * F.linear on row-major operands is the 8-lane dot), the bias added after the
 * sum: torch's float16 linear, and its bfloat16 one where oneDNN does not run
 * it.  A new float32 array (the caller rounds it once), or NULL. */
PyObject *linear_cpublas(PyArrayObject *x, PyArrayObject *weight, PyArrayObject *bias,
                         const char *const *what);

/* The gradients of linear: x [..., k] and grad_out [..., n] already of
 * `dtype`, aligned, native, their shapes checked by the caller; weight a view
 * [n, k].  Returns the new tuple (grad_input shaped like x, grad_weight [n, k],
 * grad_bias [n] or None when !with_bias), or NULL. */
PyObject *linear_grad_apply(PyArrayObject *x, PyArrayObject *grad_out, mk_cmat weight,
                            int with_bias, const myatt_dtype *dtype);

/* linear_grad_apply for bfloat16 x, grad_out, weight (shapes checked by the
 * caller; what[0..2] name grad_out, x, weight) on the CPU's bfloat16 dot
 * product in oneDNN's order (kernels/gemm/gemm_bf16.h: grad_input and
 * grad_weight bfloat16, grad_bias the float32 column sums for the caller to
 * round); Py_NotImplemented (new reference) where torch does not run oneDNN
 * (m * k * n <= 4096) or this CPU has no bfloat16 dot product.  A new tuple as
 * linear_grad_apply's, or NULL. */
PyObject *linear_grad_bf16(PyArrayObject *x, PyArrayObject *grad_out, PyArrayObject *weight,
                           int with_bias, const char *const *what);

/* linear_grad_apply for half-precision operands in torch's naive GEMM orders
 * (grad_input = grad_out @ weight, grad_weight = grad_out^T @ x: the orders of
 * their layouts, kernels/gemm/gemm_cpublas.h; grad_bias the float32 column
 * sums), float32 results (the caller rounds them once). */
PyObject *linear_grad_cpublas(PyArrayObject *x, PyArrayObject *grad_out, PyArrayObject *weight,
                              int with_bias, const char *const *what);

#endif
