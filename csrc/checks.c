/* Argument checks that more than one entry point makes, written once
 * (checks.h). */
#include "checks.h"

#include <string.h>

int check_linear_operands(const char *fn, PyArrayObject *x, PyArrayObject *w, PyArrayObject *b)
{
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if (PyArray_NDIM(w) != 2) {
        PyErr_Format(PyExc_ValueError, "%s: weight must be 2-D [out_features, in_features], "
                     "got shape %s", fn, SHAPE_OF(s1, w));
        return -1;
    }
    npy_intp n = PyArray_DIM(w, 0), k = PyArray_DIM(w, 1);
    if (PyArray_NDIM(x) == 0 || PyArray_DIM(x, PyArray_NDIM(x) - 1) != k) {
        PyErr_Format(PyExc_ValueError, "%s: input must have shape (..., %zd) to match weight "
                     "%s, got %s", fn, (Py_ssize_t)k, SHAPE_OF(s1, w), SHAPE_OF(s2, x));
        return -1;
    }
    if (b != NULL && (PyArray_NDIM(b) != 1 || PyArray_DIM(b, 0) != n)) {
        PyErr_Format(PyExc_ValueError, "%s: bias must have shape (%zd,) to match weight %s, "
                     "got %s", fn, (Py_ssize_t)n, SHAPE_OF(s1, w), SHAPE_OF(s2, b));
        return -1;
    }
    return 0;
}

int check_in_features(const char *what, PyArrayObject *x, Py_ssize_t in_features)
{
    if (PyArray_NDIM(x) > 0 && PyArray_DIM(x, PyArray_NDIM(x) - 1) == in_features)
        return 0;
    char got[SHAPE_STR_LEN];
    PyErr_Format(PyExc_ValueError, "%s must have shape (..., %zd) (in_features = %zd), got %s",
                 what, in_features, in_features, SHAPE_OF(got, x));
    return -1;
}

int check_grad_output_rows(const char *fn, PyArrayObject *x, PyArrayObject *g, npy_intp n)
{
    int ndim = PyArray_NDIM(x);
    npy_intp want[NPY_MAXDIMS];
    memcpy(want, PyArray_DIMS(x), (size_t)ndim * sizeof(npy_intp));
    want[ndim - 1] = n;
    if (PyArray_NDIM(g) == ndim && PyArray_CompareLists(want, PyArray_DIMS(g), ndim))
        return 0;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    PyErr_Format(PyExc_ValueError, "%s: grad_output must have shape %s (input's leading "
                 "dimensions, out_features), got %s", fn, shape_str(s1, sizeof s1, ndim, want),
                 SHAPE_OF(s2, g));
    return -1;
}

int check_bmm_operands(const char *fn, const char *an, PyArrayObject *a, const char *bn,
                       PyArrayObject *b)
{
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if (PyArray_NDIM(a) != 3 || PyArray_NDIM(b) != 3) {
        PyErr_Format(PyExc_ValueError, "%s: %s and %s must be 3-D, got %s %s and %s %s", fn,
                     an, bn, an, SHAPE_OF(s1, a), bn, SHAPE_OF(s2, b));
        return -1;
    }
    if (PyArray_DIM(a, 0) != PyArray_DIM(b, 0) || PyArray_DIM(a, 2) != PyArray_DIM(b, 1)) {
        PyErr_Format(PyExc_ValueError, "%s: %s [b, n, m] and %s [b, m, p] do not match: "
                     "%s %s, %s %s", fn, an, bn, an, SHAPE_OF(s1, a), bn, SHAPE_OF(s2, b));
        return -1;
    }
    return 0;
}

/* `dim` of softmax and softmax_backward: an integer in [-ndim, ndim) (0-d takes 0 or -1), as a
 * non-negative axis; TypeError or numpy's AxisError otherwise. */
int axis_arg(PyObject *module, PyObject *dim_obj, int ndim, const char *what, int *axis)
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
        myatt_state *st = myatt_state_of_module(module);
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
void axis_split(PyArrayObject *a, int axis, npy_intp *outer, npy_intp *n, npy_intp *inner)
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

int checks_setup(myatt_state *st)
{
    PyObject *exceptions = PyImport_ImportModule("numpy.exceptions");
    if (exceptions == NULL) {   /* NumPy < 1.25 */
        PyErr_Clear();
        exceptions = PyImport_ImportModule("numpy");
        if (exceptions == NULL)
            return -1;
    }
    st->axis_error = PyObject_GetAttrString(exceptions, "AxisError");
    Py_DECREF(exceptions);
    return st->axis_error == NULL ? -1 : 0;
}
