/* The backward of the kernel functions: linear_backward, softmax_backward and
 * bmm_backward.  Exports backward_methods (pieces.h). */
#include "checks.h"
#include "linear_ops.h"
#include "pieces.h"
#include "state.h"

PyDoc_STRVAR(linear_backward_doc,
"linear_backward($module, grad_output, input, weight, bias=None)\n--\n\n"
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
"    All float64 if any operand is float64, else float32; always new\n"
"    C-contiguous arrays.\n"
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

static PyObject *myatt_linear_backward(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grad_output", "input", "weight", "bias", NULL};
    PyObject *go_obj, *input_obj, *weight_obj, *bias_obj = Py_None, *result = NULL;
    PyArrayObject *rg = NULL, *rx = NULL, *rw = NULL, *rb = NULL, *g = NULL, *x = NULL, *w = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|O:linear_backward", kwlist,
                                     &go_obj, &input_obj, &weight_obj, &bias_obj))
        return NULL;
    if ((rg = as_real_array(go_obj, "linear_backward(): grad_output")) == NULL
            || (rx = as_real_array(input_obj, "linear_backward(): input")) == NULL
            || (rw = as_real_array(weight_obj, "linear_backward(): weight")) == NULL
            || (bias_obj != Py_None
                && (rb = as_real_array(bias_obj, "linear_backward(): bias")) == NULL))
        goto fail;
    if (check_linear_operands("linear_backward()", rx, rw, rb) < 0
            || check_grad_output_rows("linear_backward()", rx, rg, PyArray_DIM(rw, 0)) < 0)
        goto fail;
    PyArrayObject *ops[4] = {rg, rx, rw, rb};
    const myatt_dtype *dt = result_dtype(ops, 4);
    if ((g = cast_array(rg, dt->typenum, 0, "linear_backward(): grad_output")) == NULL
            || (x = cast_array(rx, dt->typenum, 0, "linear_backward(): input")) == NULL
            || (w = cast_array(rw, dt->typenum, 0, "linear_backward(): weight")) == NULL)
        goto fail;
    result = linear_grad_apply(x, g, cmat_of(w), rb != NULL, dt);
fail:
    Py_XDECREF(rg);
    Py_XDECREF(rx);
    Py_XDECREF(rw);
    Py_XDECREF(rb);
    Py_XDECREF(g);
    Py_XDECREF(x);
    Py_XDECREF(w);
    return result;
}

PyDoc_STRVAR(softmax_backward_doc,
"softmax_backward($module, grad_output, output, dim=-1)\n--\n\n"
"Gradient of softmax, as torch's autograd gives it.\n"
"\n"
"From softmax's result ``y = softmax(x, dim)`` and the gradient of `y`, the\n"
"gradient of `x`: ``y * (grad_output - sum(grad_output * y, dim))``.\n"
"\n"
"Parameters\n"
"----------\n"
"grad_output : array_like, any shape\n"
"    The gradient of softmax's result.\n"
"output : array_like, shape of `grad_output`\n"
"    Softmax's result `y` (not its input).\n"
"dim : int, optional\n"
"    The axis softmax was taken along (default: the last).\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape of `output`\n"
"    float64 if either operand is float64, else float32; always a new\n"
"    C-contiguous array.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers, or `dim` is not an integer.\n"
"ValueError\n"
"    If the shapes differ.\n"
"AxisError\n"
"    If `dim` is out of range (NumPy's, a ValueError and an IndexError).\n"
"MemoryError\n"
"    If the result or a converted copy of an operand cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> y = myatt.softmax(np.zeros((2, 4)))\n"
">>> myatt.softmax_backward(np.ones((2, 4)), y)\n"
"array([[0., 0., 0., 0.],\n"
"       [0., 0., 0., 0.]])\n"
">>> myatt.softmax_backward(np.eye(2)[:1], np.array([[0.5, 0.5]]))\n"
"array([[ 0.25, -0.25]])");

static PyObject *myatt_softmax_backward(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grad_output", "output", "dim", NULL};
    PyObject *go_obj, *y_obj, *dim_obj = NULL, *out = NULL;
    PyArrayObject *rg = NULL, *ry = NULL, *g = NULL, *y = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    int axis;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:softmax_backward", kwlist,
                                     &go_obj, &y_obj, &dim_obj))
        return NULL;
    if ((rg = as_real_array(go_obj, "softmax_backward(): grad_output")) == NULL
            || (ry = as_real_array(y_obj, "softmax_backward(): output")) == NULL)
        goto fail;
    int ndim = PyArray_NDIM(ry);
    if (!PyArray_SAMESHAPE(rg, ry)) {
        PyErr_Format(PyExc_ValueError, "softmax_backward(): grad_output must have the shape "
                     "of output %s, got %s", SHAPE_OF(s1, ry), SHAPE_OF(s2, rg));
        goto fail;
    }
    if (axis_arg(module, dim_obj, ndim, "softmax_backward(): dim", &axis) < 0)
        goto fail;
    PyArrayObject *ops[2] = {rg, ry};
    const myatt_dtype *dt = result_dtype(ops, 2);
    if ((g = cast_array(rg, dt->typenum, 1, "softmax_backward(): grad_output")) == NULL
            || (y = cast_array(ry, dt->typenum, 1, "softmax_backward(): output")) == NULL
            || (out = new_array(ndim, PyArray_DIMS(y), dt->typenum,
                                "softmax_backward(): the result")) == NULL)
        goto fail;
    npy_intp outer, n, inner;
    axis_split(y, axis, &outer, &n, &inner);
    const void *gd = PyArray_DATA(g), *yd = PyArray_DATA(y);
    void *od = PyArray_DATA((PyArrayObject *)out);
    Py_BEGIN_ALLOW_THREADS
    dt->k->softmax_backward(od, gd, yd, outer, n, inner);
    Py_END_ALLOW_THREADS
fail:
    Py_XDECREF(rg);
    Py_XDECREF(ry);
    Py_XDECREF(g);
    Py_XDECREF(y);
    return out;
}

PyDoc_STRVAR(bmm_backward_doc,
"bmm_backward($module, grad_output, input, mat2)\n--\n\n"
"Gradients of bmm, as torch's autograd gives them.\n"
"\n"
"The gradients of ``sum(bmm(input, mat2) * grad_output)`` with respect to\n"
"`input` and `mat2`.\n"
"\n"
"Parameters\n"
"----------\n"
"grad_output : array_like, shape (b, n, p)\n"
"    The gradient of bmm's result.\n"
"input : array_like, shape (b, n, m)\n"
"mat2 : array_like, shape (b, m, p)\n"
"\n"
"Returns\n"
"-------\n"
"grad_input : ndarray, shape (b, n, m)\n"
"grad_mat2 : ndarray, shape (b, m, p)\n"
"    Both float64 if any operand is float64, else float32; always new\n"
"    C-contiguous arrays.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers.\n"
"ValueError\n"
"    If an operand is not 3-D or the shapes do not match.\n"
"MemoryError\n"
"    If a result or its workspace cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> a = np.ones((2, 3, 4))\n"
">>> b = np.full((2, 4, 5), 0.5)\n"
">>> ga, gb = myatt.bmm_backward(np.ones((2, 3, 5)), a, b)\n"
">>> ga.shape, gb.shape\n"
"((2, 3, 4), (2, 4, 5))\n"
">>> ga[0, 0], gb[0, 0]\n"
"(array([2.5, 2.5, 2.5, 2.5]), array([3., 3., 3., 3., 3.]))");

static PyObject *myatt_bmm_backward(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grad_output", "input", "mat2", NULL};
    PyObject *go_obj, *a_obj, *b_obj, *result = NULL;
    PyArrayObject *rg = NULL, *ra = NULL, *rb = NULL, *g = NULL, *a = NULL, *b = NULL;
    PyArrayObject *ga = NULL, *gb = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN], s3[SHAPE_STR_LEN], s4[SHAPE_STR_LEN];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:bmm_backward", kwlist,
                                     &go_obj, &a_obj, &b_obj))
        return NULL;
    if ((rg = as_real_array(go_obj, "bmm_backward(): grad_output")) == NULL
            || (ra = as_real_array(a_obj, "bmm_backward(): input")) == NULL
            || (rb = as_real_array(b_obj, "bmm_backward(): mat2")) == NULL)
        goto fail;
    if (check_bmm_operands("bmm_backward()", ra, rb) < 0)
        goto fail;
    npy_intp bt = PyArray_DIM(ra, 0), n = PyArray_DIM(ra, 1);
    npy_intp p = PyArray_DIM(rb, 2), want[3] = {bt, n, p};
    if (PyArray_NDIM(rg) != 3 || !PyArray_CompareLists(want, PyArray_DIMS(rg), 3)) {
        PyErr_Format(PyExc_ValueError, "bmm_backward(): grad_output must have shape %s (the "
                     "shape of bmm(input %s, mat2 %s)), got %s", shape_str(s1, sizeof s1, 3, want),
                     SHAPE_OF(s2, ra), SHAPE_OF(s3, rb), SHAPE_OF(s4, rg));
        goto fail;
    }
    PyArrayObject *ops[3] = {rg, ra, rb};
    const myatt_dtype *dt = result_dtype(ops, 3);
    if ((g = cast_array(rg, dt->typenum, 0, "bmm_backward(): grad_output")) == NULL
            || (a = cast_array(ra, dt->typenum, 0, "bmm_backward(): input")) == NULL
            || (b = cast_array(rb, dt->typenum, 0, "bmm_backward(): mat2")) == NULL
            || (ga = (PyArrayObject *)new_array(3, PyArray_DIMS(a), dt->typenum,
                                                "bmm_backward(): grad_input")) == NULL
            || (gb = (PyArrayObject *)new_array(3, PyArray_DIMS(b), dt->typenum,
                                                "bmm_backward(): grad_mat2")) == NULL)
        goto fail;
    const mk_batch gav = batch_of(ga), gbv = batch_of(gb);
    const mk_cbatch gv = cbatch_of(g), av = cbatch_of(a), bv = cbatch_of(b);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dt->k->bmm_backward(gav, gbv, gv, av, bv);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    result = PyTuple_Pack(2, (PyObject *)ga, (PyObject *)gb);
fail:
    Py_XDECREF(rg);
    Py_XDECREF(ra);
    Py_XDECREF(rb);
    Py_XDECREF(g);
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(ga);
    Py_XDECREF(gb);
    return result;
}

PyMethodDef backward_methods[] = {
    {"linear_backward", (PyCFunction)(void (*)(void))myatt_linear_backward,
     METH_VARARGS | METH_KEYWORDS, linear_backward_doc},
    {"softmax_backward", (PyCFunction)(void (*)(void))myatt_softmax_backward,
     METH_VARARGS | METH_KEYWORDS, softmax_backward_doc},
    {"bmm_backward", (PyCFunction)(void (*)(void))myatt_bmm_backward,
     METH_VARARGS | METH_KEYWORDS, bmm_backward_doc},
    {NULL, NULL, 0, NULL},
};
