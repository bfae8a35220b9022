/* The glue around the linear kernel that myatt.linear, myatt.linear_backward
 * and Linear share (linear_ops.h). */
#include "linear_ops.h"

#include "kernels/gemm/gemm_bf16.h"
#include "kernels/linear/linear.h"
#include "kernels/runtime/cpu.h"

DTYPE_KERNELS(linear_forward);
DTYPE_KERNELS(linear_backward);

/* The result's shape (x's with its last axis n) into dims; the count of rows m,
 * which cannot overflow: x exists with these dimensions. */
static npy_intp result_shape(PyArrayObject *x, npy_intp n, npy_intp *dims)
{
    const int ndim = PyArray_NDIM(x);
    npy_intp m = 1;
    for (int i = 0; i < ndim - 1; i++)
        m *= dims[i] = PyArray_DIM(x, i);
    dims[ndim - 1] = n;
    return m;
}

PyObject *linear_apply(PyArrayObject *x, mk_cmat weight, const void *bias,
                       const myatt_dtype *dtype)
{
    const npy_intp n = weight.rows;
    int ndim = PyArray_NDIM(x);
    npy_intp k = PyArray_DIM(x, ndim - 1);
    npy_intp out_dims[NPY_MAXDIMS];
    const npy_intp m = result_shape(x, n, out_dims);

    /* [..., k] viewed as rows [m, k]: strides as they are for 1-D and 2-D input,
     * a contiguous copy first for more dimensions that are not contiguous. */
    PyArrayObject *rows = (PyArrayObject *)Py_NewRef(x);
    if (ndim > 2 && !PyArray_IS_C_CONTIGUOUS(x)) {
        Py_SETREF(rows, (PyArrayObject *)PyArray_NewCopy(x, NPY_CORDER));
        if (rows == NULL) {
            name_allocation_error("linear: a contiguous copy of input");
            return NULL;
        }
    }
    npy_intp cs_x = ESTRIDE(rows, ndim - 1);
    npy_intp rs_x = ndim == 2 ? ESTRIDE(rows, 0) : ndim == 1 ? 0 : k;

    PyObject *out = new_array(ndim, out_dims, dtype->typenum, "linear: the result");
    if (out == NULL) {
        Py_DECREF(rows);
        return NULL;
    }
    const mk_cmat xv = {PyArray_DATA(rows), m, k, rs_x, cs_x};
    const mk_mat ov = mk_mat_c(PyArray_DATA((PyArrayObject *)out), m, n);
    int rc;
    MYATT_BEGIN_COMPUTE((double)m * (double)k * (double)n)
    rc = linear_forward_kernels[dtype->kernel](ov, xv, weight, bias);
    MYATT_END_COMPUTE
    Py_DECREF(rows);
    if (rc < 0) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
}

PyObject *linear_bf16(PyArrayObject *x, PyArrayObject *weight, PyArrayObject *bias,
                      const char *const *what)
{
    const int ndim = PyArray_NDIM(x);
    const npy_intp k = PyArray_DIM(x, ndim - 1), n = PyArray_DIM(weight, 0);
    npy_intp dims[NPY_MAXDIMS];
    const npy_intp m = result_shape(x, n, dims);
    if (!mk_cpu_bf16_dot() || (double)m * (double)k * (double)n <= 4096.0)
        return Py_NewRef(Py_NotImplemented);
    const int t = PyArray_TYPE(x);   /* (aligned and C-contiguous: a copy where not) */
    PyArrayObject *xc = cast_array(x, t, 1, what[0]), *wc = NULL, *bc = NULL;
    PyObject *out = NULL;
    if (xc != NULL && (wc = cast_array(weight, t, 1, what[1])) != NULL
            && (bias == NULL || (bc = cast_array(bias, t, 1, what[2])) != NULL)
            && (out = new_array(ndim, dims, t, "linear: the result")) != NULL) {
        int rc;
        MYATT_BEGIN_COMPUTE((double)m * (double)k * (double)n)
        rc = gemm_bf16_linear(PyArray_DATA((PyArrayObject *)out), n, PyArray_DATA(xc), k,
                              PyArray_DATA(wc), k, bc != NULL ? PyArray_DATA(bc) : NULL, m, n,
                              k);
        MYATT_END_COMPUTE
        if (rc != 0)
            Py_SETREF(out, PyErr_NoMemory());
    }
    Py_XDECREF(xc);
    Py_XDECREF(wc);
    Py_XDECREF(bc);
    return out;
}

/* a [..., d] as rows [m, d]: a itself for 1-D (one row, row stride 0) and 2-D
 * (its strides), else a C-contiguous version of it.  New reference or NULL. */
static PyArrayObject *as_rows(PyArrayObject *a, npy_intp *rs, npy_intp *cs)
{
    int ndim = PyArray_NDIM(a);
    PyArrayObject *rows = (PyArrayObject *)Py_NewRef(a);
    if (ndim > 2 && !PyArray_IS_C_CONTIGUOUS(a)) {
        Py_SETREF(rows, (PyArrayObject *)PyArray_NewCopy(a, NPY_CORDER));
        if (rows == NULL)
            return NULL;
    }
    *cs = ESTRIDE(rows, ndim - 1);
    *rs = ndim == 2 ? ESTRIDE(rows, 0) : ndim == 1 ? 0 : PyArray_DIM(rows, ndim - 1);
    return rows;
}

PyObject *linear_grad_apply(PyArrayObject *x, PyArrayObject *grad_out, mk_cmat weight,
                            int with_bias, const myatt_dtype *dtype)
{
    const npy_intp n = weight.rows;
    const int typenum = dtype->typenum;
    PyArrayObject *xr = NULL, *gr = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
    PyObject *result = NULL;
    int ndim = PyArray_NDIM(x);
    npy_intp k = PyArray_DIM(x, ndim - 1), m = 1;
    for (int i = 0; i < ndim - 1; i++)
        m *= PyArray_DIM(x, i);   /* cannot overflow: x exists with these dimensions */
    npy_intp rs_x, cs_x, rs_g, cs_g, wdims[2] = {n, k};
    if ((xr = as_rows(x, &rs_x, &cs_x)) == NULL || (gr = as_rows(grad_out, &rs_g, &cs_g)) == NULL
            || (gx = (PyArrayObject *)new_array(ndim, PyArray_DIMS(x), typenum,
                                                "linear backward: grad_input")) == NULL
            || (gw = (PyArrayObject *)new_array(2, wdims, typenum,
                                                "linear backward: grad_weight")) == NULL
            || (with_bias && (gb = (PyArrayObject *)new_array(1, wdims, typenum,
                                                              "linear backward: grad_bias")) == NULL))
        goto fail;
    const mk_cmat xv = {PyArray_DATA(xr), m, k, rs_x, cs_x};
    const mk_cmat gv = {PyArray_DATA(gr), m, n, rs_g, cs_g};
    const mk_mat gxv = mk_mat_c(PyArray_DATA(gx), m, k), gwv = mk_mat_c(PyArray_DATA(gw), n, k);
    void *gbd = gb ? PyArray_DATA(gb) : NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = linear_backward_kernels[dtype->kernel](gxv, gwv, gbd, gv, xv, weight);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    result = PyTuple_Pack(3, (PyObject *)gx, (PyObject *)gw, gb ? (PyObject *)gb : Py_None);
fail:
    Py_XDECREF(xr);
    Py_XDECREF(gr);
    Py_XDECREF(gx);
    Py_XDECREF(gw);
    Py_XDECREF(gb);
    return result;
}
