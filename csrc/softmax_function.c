/* myatt.softmax and myatt.softmax_backward, declared (entry.h). */
#include "checks.h"
#include "entry.h"

#include "kernels/softmax/softmax.h"

DTYPE_KERNELS(softmax_forward);
DTYPE_KERNELS(softmax_backward);

PyDoc_STRVAR(softmax_doc,
"Softmax along one axis, as torch.softmax.\n"
"\n"
"Computes ``exp(x - max) / sum(exp(x - max))`` over each slice along `dim`.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, any shape\n"
"    Real numbers (bool, integer, float16, bfloat16, float32 or float64); a\n"
"    0-d input gives a 0-d array.\n"
"dim : int, optional\n"
"    The axis, negative counting from the end (default: the last).\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape of `input`\n"
"    `input`'s dtype if a float one, else float32; always a new C-contiguous\n"
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

static const entry_param softmax_params[] = {
    {"input", ARG_ARRAY}, {"dim", ARG_VALUE, "-1"}, {NULL}};

static PyObject *softmax_run(const entry_call *c)
{
    const int ndim = PyArray_NDIM(c->arr[0]);
    int axis;
    if (axis_arg(c->module, c->obj[1], ndim, c->e->what[1], &axis) < 0)
        return NULL;
    npy_intp outer, n, inner;
    axis_split(c->arr[0], axis, &outer, &n, &inner);
    /* a half-precision input along the last axis is read and written in its
     * dtype (rows through a float32 buffer); along others through float32 */
    const myatt_dtype *half = dtype_is_half(c->result) ? c->result : NULL;
    const int typenum = half != NULL && inner == 1 ? half->typenum : c->dt->typenum;
    PyArrayObject *x = cast_array(c->arr[0], typenum, 1, "softmax(): a contiguous copy of input");
    if (x == NULL)
        return NULL;
    PyObject *out = new_array(ndim, PyArray_DIMS(x), typenum, "softmax(): the result");
    if (out != NULL) {
        const void *xd = PyArray_DATA(x);
        void *od = PyArray_DATA((PyArrayObject *)out);
        int rc = 0;
        MYATT_BEGIN_COMPUTE(8.0 * (double)outer * (double)n * (double)inner)
        if (half != NULL && inner == 1)
            rc = softmax_forward_half_rows(od, xd, outer, n, dtype_half_kind(half));
        else if (half != NULL)   /* torch's rule for half columns */
            softmax_half_cols(od, xd, outer, n, inner, dtype_half_kind(half));
        else
            softmax_forward_kernels[c->dt->kernel](od, xd, outer, n, inner);
        MYATT_END_COMPUTE
        if (rc < 0)
            Py_SETREF(out, PyErr_NoMemory());
    }
    Py_DECREF(x);
    return out;
}

ENTRY(softmax_entry, .name = "softmax", .params = softmax_params, .doc = softmax_doc,
      .run = softmax_run, .backward = &softmax_backward_entry, .saves = SAVES_RESULT)

PyDoc_STRVAR(softmax_backward_doc,
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
"    The operands' promoted dtype (the widest float; see Conventions);\n"
"    always a new C-contiguous array.\n"
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

static const entry_param softmax_backward_params[] = {
    {"grad_output", ARG_ARRAY}, {"output", ARG_ARRAY}, {"dim", ARG_VALUE, "-1"}, {NULL}};

static int softmax_backward_check(const entry_call *c)
{
    PyArrayObject *g = c->arr[0], *y = c->arr[1];
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if (!PyArray_SAMESHAPE(g, y)) {
        PyErr_Format(PyExc_ValueError, "softmax_backward(): grad_output must have the shape "
                     "of output %s, got %s", SHAPE_OF(s1, y), SHAPE_OF(s2, g));
        return -1;
    }
    return 0;
}

static PyObject *softmax_backward_run(const entry_call *c)
{
    const int ndim = PyArray_NDIM(c->arr[1]);
    PyArrayObject *g = NULL, *y = NULL;
    PyObject *out = NULL;
    int axis;
    if (axis_arg(c->module, c->obj[2], ndim, c->e->what[2], &axis) < 0)
        return NULL;
    npy_intp outer, n, inner;
    axis_split(c->arr[1], axis, &outer, &n, &inner);
    /* half-precision rows in their dtype, as softmax_run's */
    const myatt_dtype *half = dtype_is_half(c->result) && inner == 1 ? c->result : NULL;
    const int typenum = half != NULL ? half->typenum : c->dt->typenum;
    if ((g = cast_array(c->arr[0], typenum, 1, c->e->what[0])) == NULL
            || (y = cast_array(c->arr[1], typenum, 1, c->e->what[1])) == NULL
            || (out = new_array(ndim, PyArray_DIMS(y), typenum,
                                "softmax_backward(): the result")) == NULL)
        goto done;
    const void *gd = PyArray_DATA(g), *yd = PyArray_DATA(y);
    void *od = PyArray_DATA((PyArrayObject *)out);
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    if (half != NULL)
        rc = softmax_backward_half_rows(od, gd, yd, outer, n, dtype_half_kind(half));
    else
        softmax_backward_kernels[c->dt->kernel](od, gd, yd, outer, n, inner);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        Py_SETREF(out, PyErr_NoMemory());
done:
    Py_XDECREF(g);
    Py_XDECREF(y);
    return out;
}

ENTRY(softmax_backward_entry, .name = "softmax_backward", .params = softmax_backward_params,
      .doc = softmax_backward_doc, .check = softmax_backward_check,
      .run = softmax_backward_run)
