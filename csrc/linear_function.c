/* myatt.linear and myatt.linear_backward, declared (entry.h). */
#include "checks.h"
#include "entry.h"
#include "linear_ops.h"

PyDoc_STRVAR(linear_doc,
"Apply a linear map, as torch.nn.functional.linear.\n"
"\n"
"Computes ``input @ weight.T + bias`` over the last axis of `input`.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, shape (..., in_features)\n"
"    Real numbers (bool, integer, float16, bfloat16, float32 or float64),\n"
"    any number of leading dimensions (a 1-D input is one row).\n"
"weight : array_like, shape (out_features, in_features)\n"
"bias : array_like, shape (out_features,), optional\n"
"    Added to every row; none when None.\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape (..., out_features)\n"
"    The operands' promoted dtype (the widest float; see Conventions);\n"
"    always a new C-contiguous array.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers (complex, strings, objects).\n"
"ValueError\n"
"    If `weight` is not 2-D or the shapes do not match (the message gives them).\n"
"MemoryError\n"
"    If the result or a converted copy of an operand cannot be allocated.\n"
"\n"
"See Also\n"
"--------\n"
"linear_backward : its gradients.\n"
"Linear : the module that holds `weight` and `bias`.\n"
"\n"
"Examples\n"
"--------\n"
">>> x = np.ones((2, 5, 3))\n"
">>> w = np.full((4, 3), 0.5)\n"
">>> y = myatt.linear(x, w, np.arange(4.0))\n"
">>> y.shape, y.dtype\n"
"((2, 5, 4), dtype('float64'))\n"
">>> y[0, 0]\n"
"array([1.5, 2.5, 3.5, 4.5])\n"
">>> myatt.linear(np.ones(3, np.float32), np.ones((2, 3), np.float32))\n"
"array([3., 3.], dtype=float32)");

static const entry_param linear_params[] = {
    {"input", ARG_ARRAY}, {"weight", ARG_ARRAY}, {"bias", ARG_ARRAY, "None"}, {NULL}};

static int linear_check(const entry_call *c)
{
    return check_linear_operands("linear()", c->arr[0], c->arr[1], c->arr[2]);
}

static PyObject *linear_run(const entry_call *c)
{
    if (c->result == MYATT_DTYPE(bf16)) {
        PyObject *y = linear_bf16(c->arr[0], c->arr[1], c->arr[2], c->e->what);
        if (y != Py_NotImplemented)
            return y;
        Py_DECREF(y);
    }
    PyArrayObject *x0 = c->arr[0];
    const double work = (double)PyArray_SIZE(x0) * (double)PyArray_DIM(c->arr[1], 0);
    if (cpublas_runs(c->result, work))
        return linear_cpublas(x0, c->arr[1], c->arr[2], c->e->what);
    const int typenum = c->dt->typenum;
    PyArrayObject *x = NULL, *w = NULL, *b = NULL;
    PyObject *result = NULL;
    if ((x = cast_array(c->arr[0], typenum, 0, c->e->what[0])) != NULL
            && (w = cast_array(c->arr[1], typenum, 0, c->e->what[1])) != NULL
            && (c->arr[2] == NULL || (b = cast_array(c->arr[2], typenum, 1, c->e->what[2])) != NULL))
        result = linear_apply(x, cmat_of(w), b != NULL ? PyArray_DATA(b) : NULL, c->dt);
    Py_XDECREF(x);
    Py_XDECREF(w);
    Py_XDECREF(b);
    return result;
}

ENTRY(linear_entry, .name = "linear", .params = linear_params, .doc = linear_doc,
      .check = linear_check, .run = linear_run, .backward = &linear_backward_entry,
      .saves = SAVES_ARGUMENTS)

PyDoc_STRVAR(linear_backward_doc,
"Gradients of linear, as torch's autograd gives them.\n"
"\n"
"The gradients of ``sum(linear(input, weight, bias) * grad_output)`` with\n"
"respect to `input`, `weight` and `bias`.\n"
"\n"
"Parameters\n"
"----------\n"
"grad_output : array_like, shape (..., out_features)\n"
"    The gradient of linear's result; its leading dimensions are `input`'s.\n"
"input : array_like, shape (..., in_features)\n"
"weight : array_like, shape (out_features, in_features)\n"
"bias : array_like, shape (out_features,), optional\n"
"    Only whether it is None matters (the gradient does not depend on it).\n"
"\n"
"Returns\n"
"-------\n"
"grad_input : ndarray, shape (..., in_features)\n"
"grad_weight : ndarray, shape (out_features, in_features)\n"
"grad_bias : ndarray, shape (out_features,), or None\n"
"    None when `bias` is None.\n"
"\n"
"    All in the operands' promoted dtype (the widest float; see\n"
"    Conventions); always new C-contiguous arrays.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers.\n"
"ValueError\n"
"    If the shapes do not match (the message gives them).\n"
"MemoryError\n"
"    If a result or a converted copy of an operand cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> x = np.ones((2, 3))\n"
">>> w = np.full((4, 3), 0.5)\n"
">>> gx, gw, gb = myatt.linear_backward(np.ones((2, 4)), x, w, np.zeros(4))\n"
">>> gx\n"
"array([[2., 2., 2.],\n"
"       [2., 2., 2.]])\n"
">>> gw.shape, gb\n"
"((4, 3), array([2., 2., 2., 2.]))\n"
">>> myatt.linear_backward(np.ones((2, 4)), x, w)[2] is None\n"
"True");

static const entry_param linear_backward_params[] = {
    {"grad_output", ARG_ARRAY}, {"input", ARG_ARRAY}, {"weight", ARG_ARRAY},
    {"bias", ARG_ARRAY, "None"}, {NULL}};

static int linear_backward_check(const entry_call *c)
{
    PyArrayObject *g = c->arr[0], *x = c->arr[1], *w = c->arr[2], *b = c->arr[3];
    if (check_linear_operands("linear_backward()", x, w, b) < 0)
        return -1;
    return check_grad_output_rows("linear_backward()", x, g, PyArray_DIM(w, 0));
}

static PyObject *linear_backward_run(const entry_call *c)
{
    if (c->result == MYATT_DTYPE(bf16)) {
        PyObject *r = linear_grad_bf16(c->arr[1], c->arr[0], c->arr[2], c->arr[3] != NULL,
                                       c->e->what);
        if (r != Py_NotImplemented)
            return r;
        Py_DECREF(r);
    }
    const double work = (double)PyArray_SIZE(c->arr[1]) * (double)PyArray_DIM(c->arr[2], 0);
    if (cpublas_runs(c->result, work))
        return linear_grad_cpublas(c->arr[1], c->arr[0], c->arr[2], c->arr[3] != NULL,
                                   c->e->what);
    const int typenum = c->dt->typenum;
    PyArrayObject *g = NULL, *x = NULL, *w = NULL;
    PyObject *result = NULL;
    if ((g = cast_array(c->arr[0], typenum, 0, c->e->what[0])) != NULL
            && (x = cast_array(c->arr[1], typenum, 0, c->e->what[1])) != NULL
            && (w = cast_array(c->arr[2], typenum, 0, c->e->what[2])) != NULL)
        result = linear_grad_apply(x, g, cmat_of(w), c->arr[3] != NULL, c->dt);
    Py_XDECREF(g);
    Py_XDECREF(x);
    Py_XDECREF(w);
    return result;
}

ENTRY(linear_backward_entry, .name = "linear_backward", .params = linear_backward_params,
      .doc = linear_backward_doc, .check = linear_backward_check, .run = linear_backward_run)
