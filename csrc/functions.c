/* The kernel functions of myatt._myatt: linear, softmax and bmm (their
 * backward: backward.c).  Exports functions_methods (pieces.h). */
#include "checks.h"
#include "linear_ops.h"
#include "pieces.h"
#include "state.h"

/* The METH_FASTCALL entry points: positional calls go straight to the work,
 * any other call through the tuple parser (same parsing and messages). */
#define NO_KWNAMES(kwnames) ((kwnames) == NULL || PyTuple_GET_SIZE(kwnames) == 0)

/* ---- linear ---------------------------------------------------------------- */

PyDoc_STRVAR(linear_doc,
"linear($module, input, weight, bias=None)\n--\n\n"
"Apply a linear map, as torch.nn.functional.linear.\n"
"\n"
"Computes ``input @ weight.T + bias`` over the last axis of `input`.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, shape (..., in_features)\n"
"    Real numbers (bool, integer, float16, float32 or float64), any number of\n"
"    leading dimensions (a 1-D input is one row).\n"
"weight : array_like, shape (out_features, in_features)\n"
"bias : array_like, shape (out_features,), optional\n"
"    Added to every row; none when None.\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape (..., out_features)\n"
"    float64 if any operand is float64, else float32; always a new\n"
"    C-contiguous array.\n"
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

static PyObject *linear_impl(PyObject *input_obj, PyObject *weight_obj, PyObject *bias_obj)
{
    PyObject *result = NULL;
    PyArrayObject *rx = NULL, *rw = NULL, *rb = NULL, *x = NULL, *w = NULL, *b = NULL;
    if ((rx = as_real_array(input_obj, "linear(): input")) == NULL
            || (rw = as_real_array(weight_obj, "linear(): weight")) == NULL
            || (bias_obj != Py_None
                && (rb = as_real_array(bias_obj, "linear(): bias")) == NULL))
        goto fail;
    if (check_linear_operands("linear()", rx, rw, rb) < 0)
        goto fail;
    PyArrayObject *ops[3] = {rx, rw, rb};
    const myatt_dtype *dt = result_dtype(ops, 3);
    if ((x = cast_array(rx, dt->typenum, 0, "linear(): input")) == NULL
            || (w = cast_array(rw, dt->typenum, 0, "linear(): weight")) == NULL
            || (rb != NULL && (b = cast_array(rb, dt->typenum, 1, "linear(): bias")) == NULL))
        goto fail;
    result = linear_apply(x, cmat_of(w), b ? PyArray_DATA(b) : NULL, dt);
fail:
    Py_XDECREF(rx);
    Py_XDECREF(rw);
    Py_XDECREF(rb);
    Py_XDECREF(x);
    Py_XDECREF(w);
    Py_XDECREF(b);
    return result;
}

static PyObject *myatt_linear(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "weight", "bias", NULL};
    PyObject *input_obj, *weight_obj, *bias_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:linear", kwlist,
                                     &input_obj, &weight_obj, &bias_obj))
        return NULL;
    return linear_impl(input_obj, weight_obj, bias_obj);
}

static PyObject *myatt_linear_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    if ((nargs == 2 || nargs == 3) && NO_KWNAMES(kwnames))
        return linear_impl(args[0], args[1], nargs == 3 ? args[2] : Py_None);
    return call_with_tuple(module, args, nargs, kwnames, myatt_linear);
}

/* ---- softmax --------------------------------------------------------------- */

PyDoc_STRVAR(softmax_doc,
"softmax($module, input, dim=-1)\n--\n\n"
"Softmax along one axis, as torch.softmax.\n"
"\n"
"Computes ``exp(x - max) / sum(exp(x - max))`` over each slice along `dim`.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, any shape\n"
"    Real numbers (bool, integer, float16, float32 or float64); a 0-d input\n"
"    gives a 0-d array.\n"
"dim : int, optional\n"
"    The axis, negative counting from the end (default: the last).\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape of `input`\n"
"    float64 if `input` is float64, else float32; always a new C-contiguous\n"
"    array. A NaN in a slice makes the whole slice NaN.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `input` is not an array of real numbers, or `dim` is not an integer.\n"
"AxisError\n"
"    If `dim` is out of range for ``input.ndim`` (NumPy's, a ValueError\n"
"    and an IndexError).\n"
"MemoryError\n"
"    If the result or a contiguous copy of `input` cannot be allocated.\n"
"\n"
"See Also\n"
"--------\n"
"softmax_backward : its gradient.\n"
"\n"
"Examples\n"
"--------\n"
">>> p = myatt.softmax(np.zeros((2, 4)))\n"
">>> p\n"
"array([[0.25, 0.25, 0.25, 0.25],\n"
"       [0.25, 0.25, 0.25, 0.25]])\n"
">>> myatt.softmax(np.zeros((3, 2)), dim=0).sum(axis=0)\n"
"array([1., 1.])");

static PyObject *softmax_impl(PyObject *module, PyObject *input_obj, PyObject *dim_obj)
{
    PyArrayObject *raw = as_real_array(input_obj, "softmax(): input");
    if (raw == NULL)
        return NULL;
    int ndim = PyArray_NDIM(raw), axis;
    if (axis_arg(module, dim_obj, ndim, "softmax(): dim", &axis) < 0) {
        Py_DECREF(raw);
        return NULL;
    }
    const myatt_dtype *dt = result_dtype(&raw, 1);
    PyArrayObject *x = cast_array(raw, dt->typenum, 1, "softmax(): a contiguous copy of input");
    Py_DECREF(raw);
    if (x == NULL)
        return NULL;
    PyObject *out = new_array(ndim, PyArray_DIMS(x), dt->typenum, "softmax(): the result");
    if (out == NULL) {
        Py_DECREF(x);
        return NULL;
    }
    npy_intp outer, n, inner;
    axis_split(x, axis, &outer, &n, &inner);
    const void *xd = PyArray_DATA(x);
    void *od = PyArray_DATA((PyArrayObject *)out);
    MYATT_BEGIN_COMPUTE(8.0 * (double)outer * (double)n * (double)inner)
    dt->k->softmax_forward(od, xd, outer, n, inner);
    MYATT_END_COMPUTE
    Py_DECREF(x);
    return out;
}

static PyObject *myatt_softmax(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "dim", NULL};
    PyObject *input_obj, *dim_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:softmax", kwlist, &input_obj, &dim_obj))
        return NULL;
    return softmax_impl(module, input_obj, dim_obj);
}

static PyObject *myatt_softmax_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    if ((nargs == 1 || nargs == 2) && NO_KWNAMES(kwnames))
        return softmax_impl(module, args[0], nargs == 2 ? args[1] : NULL);
    return call_with_tuple(module, args, nargs, kwnames, myatt_softmax);
}

/* ---- bmm ------------------------------------------------------------------- */

PyDoc_STRVAR(bmm_doc,
"bmm($module, input, mat2)\n--\n\n"
"Batched matrix product, as torch.bmm.\n"
"\n"
"``out[i] = input[i] @ mat2[i]`` for each of the b matrices.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, shape (b, n, m)\n"
"    Real numbers (bool, integer, float16, float32 or float64).\n"
"mat2 : array_like, shape (b, m, p)\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape (b, n, p)\n"
"    float64 if either operand is float64, else float32; always a new\n"
"    C-contiguous array.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers.\n"
"ValueError\n"
"    If an operand is not 3-D or the shapes do not match.\n"
"MemoryError\n"
"    If the result or its workspace cannot be allocated.\n"
"\n"
"See Also\n"
"--------\n"
"bmm_backward : its gradients.\n"
"\n"
"Examples\n"
"--------\n"
">>> a = np.ones((2, 3, 4))\n"
">>> b = np.full((2, 4, 5), 0.25)\n"
">>> c = myatt.bmm(a, b)\n"
">>> c.shape, c.dtype\n"
"((2, 3, 5), dtype('float64'))\n"
">>> c[1, 2]\n"
"array([1., 1., 1., 1., 1.])");

static PyObject *bmm_impl(PyObject *a_obj, PyObject *b_obj)
{
    PyObject *out = NULL;
    PyArrayObject *ra = NULL, *rb = NULL, *a = NULL, *b = NULL;
    if ((ra = as_real_array(a_obj, "bmm(): input")) == NULL
            || (rb = as_real_array(b_obj, "bmm(): mat2")) == NULL)
        goto fail;
    if (check_bmm_operands("bmm()", ra, rb) < 0)
        goto fail;
    PyArrayObject *ops[2] = {ra, rb};
    const myatt_dtype *dt = result_dtype(ops, 2);
    if ((a = cast_array(ra, dt->typenum, 0, "bmm(): input")) == NULL
            || (b = cast_array(rb, dt->typenum, 0, "bmm(): mat2")) == NULL)
        goto fail;
    npy_intp bt = PyArray_DIM(a, 0), n = PyArray_DIM(a, 1), m = PyArray_DIM(a, 2);
    npy_intp p = PyArray_DIM(b, 2), dims[3] = {bt, n, p};
    out = new_array(3, dims, dt->typenum, "bmm(): the result");
    if (out == NULL)
        goto fail;
    const mk_batch ov = batch_of((PyArrayObject *)out);
    const mk_cbatch av = cbatch_of(a), bv = cbatch_of(b);
    int rc;
    MYATT_BEGIN_COMPUTE((double)bt * (double)n * (double)m * (double)p)
    rc = dt->k->bmm_forward(ov, av, bv);
    MYATT_END_COMPUTE
    if (rc < 0) {
        Py_CLEAR(out);
        PyErr_NoMemory();
    }
fail:
    Py_XDECREF(ra);
    Py_XDECREF(rb);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

static PyObject *myatt_bmm(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "mat2", NULL};
    PyObject *a_obj, *b_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:bmm", kwlist, &a_obj, &b_obj))
        return NULL;
    return bmm_impl(a_obj, b_obj);
}

static PyObject *myatt_bmm_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    if (nargs == 2 && NO_KWNAMES(kwnames))
        return bmm_impl(args[0], args[1]);
    return call_with_tuple(module, args, nargs, kwnames, myatt_bmm);
}

PyMethodDef functions_methods[] = {
    {"linear", (PyCFunction)(void (*)(void))myatt_linear_fast, METH_FASTCALL | METH_KEYWORDS,
     linear_doc},
    {"softmax", (PyCFunction)(void (*)(void))myatt_softmax_fast, METH_FASTCALL | METH_KEYWORDS,
     softmax_doc},
    {"bmm", (PyCFunction)(void (*)(void))myatt_bmm_fast, METH_FASTCALL | METH_KEYWORDS,
     bmm_doc},
    {NULL, NULL, 0, NULL},
};
