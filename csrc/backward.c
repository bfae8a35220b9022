/* The backward of the kernel functions: linear_backward, softmax_backward and
 * bmm_backward.  Exports backward_methods (pieces.h). */
#include "checks.h"
#include "linear_ops.h"
#include "pieces.h"
#include "state.h"

PyDoc_STRVAR(linear_backward_doc,
"linear_backward($module, grad_output, input, weight, bias=None)\n--\n\n"
"Gradients of sum(linear(input, weight, bias) * grad_output), as torch's autograd\n"
"gives them: (grad_input, grad_weight, grad_bias), grad_bias None when bias is None.\n\n"
"grad_output has shape input.shape[:-1] + (out,). float64 if any operand is\n"
"float64, else float32; always new C-contiguous arrays.");

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
    if ((g = cast_array(rg, dt->typenum, 0)) == NULL
            || (x = cast_array(rx, dt->typenum, 0)) == NULL
            || (w = cast_array(rw, dt->typenum, 0)) == NULL)
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
"The gradient of softmax's input, from its output y = softmax(x, dim) and the\n"
"gradient of y: y * (grad_output - sum(grad_output * y, dim)), as torch's autograd.\n\n"
"grad_output and output have the same shape. float64 if either is float64.");

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
    if ((g = cast_array(rg, dt->typenum, 1)) == NULL
            || (y = cast_array(ry, dt->typenum, 1)) == NULL
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
"Gradients of sum(bmm(input, mat2) * grad_output), as torch's autograd gives\n"
"them: (grad_input [b, n, m], grad_mat2 [b, m, p]) for grad_output [b, n, p].\n\n"
"float64 if any operand is float64, else float32; always new C-contiguous arrays.");

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
    if ((g = cast_array(rg, dt->typenum, 0)) == NULL
            || (a = cast_array(ra, dt->typenum, 0)) == NULL
            || (b = cast_array(rb, dt->typenum, 0)) == NULL
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
