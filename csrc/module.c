/* The module myatt._myatt: init (multi-phase), per-module state, and the kernel
 * functions linear, softmax and bmm and their backward, manual_seed and the
 * thread count. */
#define MYATT_IMPORTS_NUMPY
#include "glue.h"
#include "sdpa_function.h"

#include "kernels/alloc.h"
#include "kernels/bmm.h"
#include "kernels/cpu.h"
#include "kernels/softmax.h"
#include "kernels/threads.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

myatt_state *myatt_state_of_type(PyTypeObject *type)
{
    PyObject *module = PyType_GetModuleByDef(type, &myatt_module_def);
    return module == NULL ? NULL : (myatt_state *)PyModule_GetState(module);
}

/* ---- linear ---------------------------------------------------------------- */

PyDoc_STRVAR(linear_doc,
"linear($module, input, weight, bias=None)\n--\n\n"
"input[..., in] @ weight[out, in].T + bias[out], as torch.nn.functional.linear.\n\n"
"float64 if any operand is float64, else float32; always a new C-contiguous array.");

static PyObject *linear_impl(PyObject *input_obj, PyObject *weight_obj, PyObject *bias_obj)
{
    PyObject *result = NULL;
    PyArrayObject *rx = NULL, *rw = NULL, *rb = NULL, *x = NULL, *w = NULL, *b = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if ((rx = as_real_array(input_obj, "linear(): input")) == NULL
            || (rw = as_real_array(weight_obj, "linear(): weight")) == NULL
            || (bias_obj != Py_None
                && (rb = as_real_array(bias_obj, "linear(): bias")) == NULL))
        goto fail;
    if (PyArray_NDIM(rw) != 2) {
        PyErr_Format(PyExc_ValueError, "linear(): weight must be 2-D [out_features, "
                     "in_features], got shape %s", SHAPE_OF(s1, rw));
        goto fail;
    }
    npy_intp n = PyArray_DIM(rw, 0), k = PyArray_DIM(rw, 1);
    if (PyArray_NDIM(rx) == 0 || PyArray_DIM(rx, PyArray_NDIM(rx) - 1) != k) {
        PyErr_Format(PyExc_ValueError, "linear(): input must have shape (..., %zd) to match "
                     "weight %s, got %s", (Py_ssize_t)k, SHAPE_OF(s1, rw), SHAPE_OF(s2, rx));
        goto fail;
    }
    if (rb != NULL && (PyArray_NDIM(rb) != 1 || PyArray_DIM(rb, 0) != n)) {
        PyErr_Format(PyExc_ValueError, "linear(): bias must have shape (%zd,) to match "
                     "weight %s, got %s", (Py_ssize_t)n, SHAPE_OF(s1, rw), SHAPE_OF(s2, rb));
        goto fail;
    }
    int typenum = result_typenum(rx, rw, rb);
    if ((x = cast_array(rx, typenum, 0)) == NULL
            || (w = cast_array(rw, typenum, 0)) == NULL
            || (rb != NULL && (b = cast_array(rb, typenum, 1)) == NULL))
        goto fail;
    result = linear_apply(x, PyArray_DATA(w), ESTRIDE(w, 0), ESTRIDE(w, 1),
                          b ? PyArray_DATA(b) : NULL, n, typenum);
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

/* The module functions' METH_FASTCALL entry points: positional calls go
 * straight to the work, any other call through the tuple parser above (same
 * parsing and messages as before). */
#define NO_KWNAMES(kwnames) ((kwnames) == NULL || PyTuple_GET_SIZE(kwnames) == 0)

static PyObject *myatt_linear_fast(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    if ((nargs == 2 || nargs == 3) && NO_KWNAMES(kwnames))
        return linear_impl(args[0], args[1], nargs == 3 ? args[2] : Py_None);
    return call_with_tuple(module, args, nargs, kwnames, myatt_linear);
}

/* ---- softmax --------------------------------------------------------------- */

/* `dim` of softmax and softmax_backward: an integer in [-ndim, ndim) (0-d takes 0 or -1), as a
 * non-negative axis; TypeError or numpy's AxisError otherwise. */
static int axis_arg(PyObject *module, PyObject *dim_obj, int ndim, const char *what, int *axis)
{
    Py_ssize_t dim = -1;
    if (dim_obj != NULL) {
        if (PyBool_Check(dim_obj) || !PyIndex_Check(dim_obj)) {
            PyErr_Format(PyExc_TypeError, "%s must be an integer, got %.100s", what,
                         Py_TYPE(dim_obj)->tp_name);
            return -1;
        }
        dim = PyNumber_AsSsize_t(dim_obj, NULL);   /* clamps: out of range either way */
        if (dim == -1 && PyErr_Occurred())
            return -1;
    }
    int span = ndim > 0 ? ndim : 1;
    if (dim < -span || dim >= span) {
        myatt_state *st = PyModule_GetState(module);
        PyObject *exc = PyObject_CallFunction(st->axis_error, "nis", dim, span, what);
        if (exc != NULL) {
            PyErr_SetObject(st->axis_error, exc);
            Py_DECREF(exc);
        }
        return -1;
    }
    *axis = (int)(dim < 0 ? dim + span : dim);
    return 0;
}

/* The [outer, n, inner] view of `a` around `axis` (a 0-d array is [1, 1, 1]). */
static void axis_split(PyArrayObject *a, int axis, npy_intp *outer, npy_intp *n, npy_intp *inner)
{
    int ndim = PyArray_NDIM(a);
    *outer = 1;
    *n = ndim > 0 ? PyArray_DIM(a, axis) : 1;
    *inner = 1;
    for (int i = 0; i < ndim; i++) {
        if (i < axis)
            *outer *= PyArray_DIM(a, i);
        else if (i > axis)
            *inner *= PyArray_DIM(a, i);
    }
}

PyDoc_STRVAR(softmax_doc,
"softmax($module, input, dim=-1)\n--\n\n"
"exp(x - max) / sum(exp(x - max)) along `dim`, as torch.softmax.\n\n"
"Any ndim and axis (a 0-d input gives a 0-d array); NaN in a slice makes the\n"
"slice NaN. Always a new C-contiguous array.");

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
    int typenum = result_typenum(raw, NULL, NULL);
    PyArrayObject *x = cast_array(raw, typenum, 1);
    Py_DECREF(raw);
    if (x == NULL) {
        name_memory_error("softmax(): a contiguous copy of input");
        return NULL;
    }
    PyObject *out = new_array(ndim, PyArray_DIMS(x), typenum, "softmax(): the result");
    if (out == NULL) {
        Py_DECREF(x);
        return NULL;
    }
    npy_intp outer, n, inner;
    axis_split(x, axis, &outer, &n, &inner);
    const void *xd = PyArray_DATA(x);
    void *od = PyArray_DATA((PyArrayObject *)out);
    MYATT_BEGIN_COMPUTE(8.0 * (double)outer * (double)n * (double)inner)
    if (typenum == NPY_FLOAT)
        softmax_forward_f32(od, xd, outer, n, inner);
    else
        softmax_forward_f64(od, xd, outer, n, inner);
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
"[b, n, m] @ [b, m, p] -> [b, n, p], as torch.bmm.\n\n"
"float64 if either operand is float64, else float32; always a new C-contiguous array.");

static PyObject *bmm_impl(PyObject *a_obj, PyObject *b_obj)
{
    PyObject *out = NULL;
    PyArrayObject *ra = NULL, *rb = NULL, *a = NULL, *b = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if ((ra = as_real_array(a_obj, "bmm(): input")) == NULL
            || (rb = as_real_array(b_obj, "bmm(): mat2")) == NULL)
        goto fail;
    if (PyArray_NDIM(ra) != 3 || PyArray_NDIM(rb) != 3) {
        PyErr_Format(PyExc_ValueError, "bmm(): input and mat2 must be 3-D, got input %s and "
                     "mat2 %s", SHAPE_OF(s1, ra), SHAPE_OF(s2, rb));
        goto fail;
    }
    if (PyArray_DIM(ra, 0) != PyArray_DIM(rb, 0) || PyArray_DIM(ra, 2) != PyArray_DIM(rb, 1)) {
        PyErr_Format(PyExc_ValueError, "bmm(): input [b, n, m] and mat2 [b, m, p] do not "
                     "match: input %s, mat2 %s", SHAPE_OF(s1, ra), SHAPE_OF(s2, rb));
        goto fail;
    }
    int typenum = result_typenum(ra, rb, NULL);
    if ((a = cast_array(ra, typenum, 0)) == NULL || (b = cast_array(rb, typenum, 0)) == NULL)
        goto fail;
    npy_intp bt = PyArray_DIM(a, 0), n = PyArray_DIM(a, 1), m = PyArray_DIM(a, 2);
    npy_intp p = PyArray_DIM(b, 2), dims[3] = {bt, n, p};
    out = new_array(3, dims, typenum, "bmm(): the result");
    if (out == NULL)
        goto fail;
    void *od = PyArray_DATA((PyArrayObject *)out);
    int rc;
    MYATT_BEGIN_COMPUTE((double)bt * (double)n * (double)m * (double)p)
    if (typenum == NPY_FLOAT)
        rc = bmm_forward_f32(od, PyArray_DATA(a), ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2),
                             PyArray_DATA(b), ESTRIDE(b, 0), ESTRIDE(b, 1), ESTRIDE(b, 2),
                             bt, n, m, p);
    else
        rc = bmm_forward_f64(od, PyArray_DATA(a), ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2),
                             PyArray_DATA(b), ESTRIDE(b, 0), ESTRIDE(b, 1), ESTRIDE(b, 2),
                             bt, n, m, p);
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

/* ---- backward kernels: linear_backward, softmax_backward, bmm_backward ------- */

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
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|O:linear_backward", kwlist,
                                     &go_obj, &input_obj, &weight_obj, &bias_obj))
        return NULL;
    if ((rg = as_real_array(go_obj, "linear_backward(): grad_output")) == NULL
            || (rx = as_real_array(input_obj, "linear_backward(): input")) == NULL
            || (rw = as_real_array(weight_obj, "linear_backward(): weight")) == NULL
            || (bias_obj != Py_None
                && (rb = as_real_array(bias_obj, "linear_backward(): bias")) == NULL))
        goto fail;
    if (PyArray_NDIM(rw) != 2) {
        PyErr_Format(PyExc_ValueError, "linear_backward(): weight must be 2-D [out_features, "
                     "in_features], got shape %s", SHAPE_OF(s1, rw));
        goto fail;
    }
    npy_intp n = PyArray_DIM(rw, 0), k = PyArray_DIM(rw, 1);
    int ndim = PyArray_NDIM(rx);
    if (ndim == 0 || PyArray_DIM(rx, ndim - 1) != k) {
        PyErr_Format(PyExc_ValueError, "linear_backward(): input must have shape (..., %zd) "
                     "to match weight %s, got %s", (Py_ssize_t)k, SHAPE_OF(s1, rw),
                     SHAPE_OF(s2, rx));
        goto fail;
    }
    if (rb != NULL && (PyArray_NDIM(rb) != 1 || PyArray_DIM(rb, 0) != n)) {
        PyErr_Format(PyExc_ValueError, "linear_backward(): bias must have shape (%zd,) to "
                     "match weight %s, got %s", (Py_ssize_t)n, SHAPE_OF(s1, rw),
                     SHAPE_OF(s2, rb));
        goto fail;
    }
    npy_intp want[NPY_MAXDIMS];
    memcpy(want, PyArray_DIMS(rx), (size_t)ndim * sizeof(npy_intp));
    want[ndim - 1] = n;
    if (PyArray_NDIM(rg) != ndim || !PyArray_CompareLists(want, PyArray_DIMS(rg), ndim)) {
        PyErr_Format(PyExc_ValueError, "linear_backward(): grad_output must have shape %s "
                     "(input's leading dimensions, out_features), got %s",
                     shape_str(s1, sizeof s1, ndim, want), SHAPE_OF(s2, rg));
        goto fail;
    }
    int typenum = result_typenum(rg, rx, rw);
    if (rb != NULL && PyArray_TYPE(rb) == NPY_DOUBLE)
        typenum = NPY_DOUBLE;
    if ((g = cast_array(rg, typenum, 0)) == NULL || (x = cast_array(rx, typenum, 0)) == NULL
            || (w = cast_array(rw, typenum, 0)) == NULL)
        goto fail;
    result = linear_grad_apply(x, g, PyArray_DATA(w), ESTRIDE(w, 0), ESTRIDE(w, 1), n,
                               rb != NULL, typenum);
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
    int typenum = result_typenum(rg, ry, NULL);
    if ((g = cast_array(rg, typenum, 1)) == NULL || (y = cast_array(ry, typenum, 1)) == NULL
            || (out = PyArray_SimpleNew(ndim, PyArray_DIMS(y), typenum)) == NULL)
        goto fail;
    npy_intp outer, n, inner;
    axis_split(y, axis, &outer, &n, &inner);
    const void *gd = PyArray_DATA(g), *yd = PyArray_DATA(y);
    void *od = PyArray_DATA((PyArrayObject *)out);
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        softmax_backward_f32(od, gd, yd, outer, n, inner);
    else
        softmax_backward_f64(od, gd, yd, outer, n, inner);
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
    if (PyArray_NDIM(ra) != 3 || PyArray_NDIM(rb) != 3) {
        PyErr_Format(PyExc_ValueError, "bmm_backward(): input and mat2 must be 3-D, got "
                     "input %s and mat2 %s", SHAPE_OF(s1, ra), SHAPE_OF(s2, rb));
        goto fail;
    }
    if (PyArray_DIM(ra, 0) != PyArray_DIM(rb, 0) || PyArray_DIM(ra, 2) != PyArray_DIM(rb, 1)) {
        PyErr_Format(PyExc_ValueError, "bmm_backward(): input [b, n, m] and mat2 [b, m, p] do "
                     "not match: input %s, mat2 %s", SHAPE_OF(s1, ra), SHAPE_OF(s2, rb));
        goto fail;
    }
    npy_intp bt = PyArray_DIM(ra, 0), n = PyArray_DIM(ra, 1), m = PyArray_DIM(ra, 2);
    npy_intp p = PyArray_DIM(rb, 2), want[3] = {bt, n, p};
    if (PyArray_NDIM(rg) != 3 || !PyArray_CompareLists(want, PyArray_DIMS(rg), 3)) {
        PyErr_Format(PyExc_ValueError, "bmm_backward(): grad_output must have shape %s (the "
                     "shape of bmm(input %s, mat2 %s)), got %s", shape_str(s1, sizeof s1, 3, want),
                     SHAPE_OF(s2, ra), SHAPE_OF(s3, rb), SHAPE_OF(s4, rg));
        goto fail;
    }
    int typenum = result_typenum(rg, ra, rb);
    if ((g = cast_array(rg, typenum, 0)) == NULL || (a = cast_array(ra, typenum, 0)) == NULL
            || (b = cast_array(rb, typenum, 0)) == NULL
            || (ga = (PyArrayObject *)PyArray_SimpleNew(3, PyArray_DIMS(a), typenum)) == NULL
            || (gb = (PyArrayObject *)PyArray_SimpleNew(3, PyArray_DIMS(b), typenum)) == NULL)
        goto fail;
    void *gad = PyArray_DATA(ga), *gbd = PyArray_DATA(gb);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        rc = bmm_backward_f32(gad, gbd,
                              PyArray_DATA(g), ESTRIDE(g, 0), ESTRIDE(g, 1), ESTRIDE(g, 2),
                              PyArray_DATA(a), ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2),
                              PyArray_DATA(b), ESTRIDE(b, 0), ESTRIDE(b, 1), ESTRIDE(b, 2),
                              bt, n, m, p);
    else
        rc = bmm_backward_f64(gad, gbd,
                              PyArray_DATA(g), ESTRIDE(g, 0), ESTRIDE(g, 1), ESTRIDE(g, 2),
                              PyArray_DATA(a), ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2),
                              PyArray_DATA(b), ESTRIDE(b, 0), ESTRIDE(b, 1), ESTRIDE(b, 2),
                              bt, n, m, p);
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

/* ---- generator and threads ------------------------------------------------- */

PyDoc_STRVAR(manual_seed_doc,
"manual_seed($module, seed, /)\n--\n\n"
"Seed myatt's generator: a Linear or MyAtt built next holds exactly the weights\n"
"that torch.manual_seed(seed) and the torch constructor give.");

static PyObject *myatt_manual_seed(PyObject *module, PyObject *seed_obj)
{
    if (PyBool_Check(seed_obj) || !PyIndex_Check(seed_obj)) {
        PyErr_Format(PyExc_TypeError, "manual_seed(): seed must be an integer, got %.100s",
                     Py_TYPE(seed_obj)->tp_name);
        return NULL;
    }
    PyObject *index = PyNumber_Index(seed_obj);
    if (index == NULL)
        return NULL;
    /* torch's rule: [0, 2**64) as it is, [-2**63, 0) as its two's complement. */
    unsigned long long seed = PyLong_AsUnsignedLongLong(index);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        long long s = PyLong_AsLongLong(index);
        if (s == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "manual_seed(): seed must be in [-2**63, 2**64), got %R", seed_obj);
            Py_DECREF(index);
            return NULL;
        }
        seed = (unsigned long long)s;
    }
    Py_DECREF(index);
    mt19937_seed(&((myatt_state *)PyModule_GetState(module))->rng, seed);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_num_threads_doc,
"set_num_threads($module, n, /)\n--\n\n"
"Use n >= 1 threads in the kernels. Results do not depend on n.");

static PyObject *myatt_set_num_threads(PyObject *module, PyObject *n_obj)
{
    if (PyBool_Check(n_obj) || !PyLong_Check(n_obj)) {
        PyErr_Format(PyExc_TypeError, "set_num_threads(): n must be an integer, got %.100s",
                     Py_TYPE(n_obj)->tp_name);
        return NULL;
    }
    int overflow;
    long n = PyLong_AsLongAndOverflow(n_obj, &overflow);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (overflow != 0 || n < 1 || n > 4096) {
        PyErr_Format(PyExc_ValueError, "set_num_threads(): n must be in [1, 4096], got %R",
                     n_obj);
        return NULL;
    }
    mk_set_num_threads((int)n);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(get_num_threads_doc,
"get_num_threads($module, /)\n--\n\n"
"The number of threads the kernels use (default: the cores available).");

static PyObject *myatt_get_num_threads(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(mk_get_num_threads());
}

PyDoc_STRVAR(empty_cache_doc,
"empty_cache($module, /)\n--\n\n"
"Free the kernels' cached workspaces.\n\n"
"Kernels keep freed workspaces (packed panels, row blocks) of 32 KiB and more,\n"
"up to 32 MiB in all, and reuse them in later calls instead of asking the OS\n"
"for fresh pages each time.  This gives that memory back.");

static PyObject *myatt_empty_cache(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    Py_BEGIN_ALLOW_THREADS
    mk_empty_cache();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(kernel_path_doc,
"kernel_path($module, /)\n--\n\n"
"The instruction-set path of the kernels: 'avx512', 'avx2' or 'portable'.\n\n"
"The best one this CPU supports, unless the environment variable MYATT_KERNEL\n"
"(read once, at import) asks for another: a path the CPU cannot run falls back\n"
"to the best supported one, with a RuntimeWarning at import.");

static PyObject *myatt_kernel_path(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyUnicode_FromString(mk_isa_name(mk_cpu_isa()));
}

/* ---- the module ------------------------------------------------------------ */

static PyMethodDef myatt_methods[] = {
    {"linear", (PyCFunction)(void (*)(void))myatt_linear_fast, METH_FASTCALL | METH_KEYWORDS,
     linear_doc},
    {"softmax", (PyCFunction)(void (*)(void))myatt_softmax_fast, METH_FASTCALL | METH_KEYWORDS,
     softmax_doc},
    {"bmm", (PyCFunction)(void (*)(void))myatt_bmm_fast, METH_FASTCALL | METH_KEYWORDS,
     bmm_doc},
    {"linear_backward", (PyCFunction)(void (*)(void))myatt_linear_backward,
     METH_VARARGS | METH_KEYWORDS, linear_backward_doc},
    {"softmax_backward", (PyCFunction)(void (*)(void))myatt_softmax_backward,
     METH_VARARGS | METH_KEYWORDS, softmax_backward_doc},
    {"bmm_backward", (PyCFunction)(void (*)(void))myatt_bmm_backward,
     METH_VARARGS | METH_KEYWORDS, bmm_backward_doc},
    MYATT_SDPA_METHODS
    {"manual_seed", myatt_manual_seed, METH_O, manual_seed_doc},
    {"set_num_threads", myatt_set_num_threads, METH_O, set_num_threads_doc},
    {"get_num_threads", myatt_get_num_threads, METH_NOARGS, get_num_threads_doc},
    {"empty_cache", myatt_empty_cache, METH_NOARGS, empty_cache_doc},
    {"kernel_path", myatt_kernel_path, METH_NOARGS, kernel_path_doc},
    {NULL, NULL, 0, NULL},
};

/* A seed for an unseeded generator: OS entropy, else the clock and the pid. */
static uint64_t entropy_seed(void)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed)
        return seed;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
}

static int myatt_exec(PyObject *module)
{
    myatt_state *st = PyModule_GetState(module);
    if (PyArray_ImportNumPyAPI() < 0)
        return -1;
    /* Kernel workspaces through Python's raw allocator, so tracemalloc sees them. */
    mk_set_allocator(PyMem_RawMalloc, PyMem_RawFree);
    mt19937_seed(&st->rng, entropy_seed());
    /* Decide the kernel path now (MYATT_KERNEL) and say so if the request was not followed. */
    const char *note = mk_cpu_note();
    if (note != NULL && PyErr_WarnEx(PyExc_RuntimeWarning, note, 1) < 0)
        return -1;

    PyObject *exceptions = PyImport_ImportModule("numpy.exceptions");
    if (exceptions == NULL) {   /* NumPy < 1.25 */
        PyErr_Clear();
        exceptions = PyImport_ImportModule("numpy");
        if (exceptions == NULL)
            return -1;
    }
    st->axis_error = PyObject_GetAttrString(exceptions, "AxisError");
    Py_DECREF(exceptions);
    if (st->axis_error == NULL)
        return -1;

    st->linear_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &linear_type_spec, NULL);
    if (st->linear_type == NULL || PyModule_AddType(module, st->linear_type) < 0)
        return -1;
    st->myatt_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &myatt_type_spec, NULL);
    if (st->myatt_type == NULL || PyModule_AddType(module, st->myatt_type) < 0)
        return -1;
    return 0;
}

static int myatt_traverse(PyObject *module, visitproc visit, void *arg)
{
    myatt_state *st = PyModule_GetState(module);
    Py_VISIT(st->linear_type);
    Py_VISIT(st->myatt_type);
    Py_VISIT(st->axis_error);
    return 0;
}

static int myatt_clear(PyObject *module)
{
    myatt_state *st = PyModule_GetState(module);
    Py_CLEAR(st->linear_type);
    Py_CLEAR(st->myatt_type);
    Py_CLEAR(st->axis_error);
    return 0;
}

static void myatt_free(void *module)
{
    myatt_clear((PyObject *)module);
}

static PyModuleDef_Slot myatt_slots[] = {
    {Py_mod_exec, myatt_exec},
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"C kernels and extension types of myatt (use the package `myatt`, which\n"
"re-exports them).");

PyModuleDef myatt_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "myatt._myatt",
    .m_doc = module_doc,
    .m_size = sizeof(myatt_state),
    .m_methods = myatt_methods,
    .m_slots = myatt_slots,
    .m_traverse = myatt_traverse,
    .m_clear = myatt_clear,
    .m_free = myatt_free,
};

PyMODINIT_FUNC PyInit__myatt(void)
{
    return PyModuleDef_Init(&myatt_module_def);
}
