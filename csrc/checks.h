/* Argument checks that more than one entry point makes, written once
 * (checks.c).  Each returns 0, or -1 with ValueError (numpy's AxisError for
 * an axis) naming the argument: `fn` is the entry point ("linear()"), `what`
 * the argument with it ("Linear: input"). */
#ifndef MYATT_CHECKS_H
#define MYATT_CHECKS_H

#include "state.h"

/* linear's operands: weight [n, k] 2-D, input [..., k], bias [n] or NULL
 * (myatt.linear, myatt.linear_backward). */
int check_linear_operands(const char *fn, PyArrayObject *x, PyArrayObject *w, PyArrayObject *b);

/* A layer's input x [..., in_features] (Linear forward and backward). */
int check_in_features(const char *what, PyArrayObject *x, Py_ssize_t in_features);

/* grad_output of a linear: x's leading dimensions, then n (linear_backward,
 * Linear.backward); x has at least one dimension. */
int check_grad_output_rows(const char *fn, PyArrayObject *x, PyArrayObject *g, npy_intp n);

/* bmm's operands: an [b, n, m], bn [b, m, p], named an and bn in messages
 * (bmm, bmm_backward: input, mat2; _baddbmm: batch1, batch2). */
int check_bmm_operands(const char *fn, const char *an, PyArrayObject *a, const char *bn,
                       PyArrayObject *b);

/* `dim` of softmax and softmax_backward: an integer in [-ndim, ndim) (0-d
 * takes 0 or -1), as a non-negative axis; TypeError or numpy's AxisError
 * (from the state of `module`) otherwise. */
int axis_arg(PyObject *module, PyObject *dim_obj, int ndim, const char *what, int *axis);

/* The [outer, n, inner] view of `a` around `axis` (a 0-d array is [1, 1, 1]). */
void axis_split(PyArrayObject *a, int axis, npy_intp *outer, npy_intp *n, npy_intp *inner);

/* Fill the state's axis_error (numpy.exceptions.AxisError): module init. */
int checks_setup(myatt_state *st);

#endif
