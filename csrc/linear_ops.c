/* The glue around the linear kernel that myatt.linear, myatt.linear_backward
 * and Linear share (linear_ops.h). */
#include "linear_ops.h"

#include "kernels/gemm/gemm_bf16.h"
#include "kernels/gemm/gemm_cpublas.h"
#include "kernels/linear/colsum.h"
#include "kernels/linear/linear.h"
#include "kernels/runtime/alloc.h"
#include "kernels/runtime/copy.h"
#include "kernels/runtime/cpu.h"

DTYPE_KERNELS(linear_forward);
DTYPE_KERNELS(linear_backward);

/* The count of a [..., d]'s rows: its leading dimensions' product (1 for 1-D),
 * which cannot overflow: a exists with these dimensions */
static npy_intp row_count(PyArrayObject *a)
{
    npy_intp m = 1;
    for (int i = 0; i < PyArray_NDIM(a) - 1; i++)
        m *= PyArray_DIM(a, i);
    return m;
}

/* The result's shape (x's with its last axis n) into dims; the count of rows m. */
static npy_intp result_shape(PyArrayObject *x, npy_intp n, npy_intp *dims)
{
    const int ndim = PyArray_NDIM(x);
    for (int i = 0; i < ndim - 1; i++)
        dims[i] = PyArray_DIM(x, i);
    dims[ndim - 1] = n;
    return row_count(x);
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
    if (!mk_cpu_bf16_dot() || cpublas_runs(MYATT_DTYPE(bf16), (double)m * (double)k * (double)n))
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
                              mk_cmat_c(PyArray_DATA(wc), n, k),
                              bc != NULL ? PyArray_DATA(bc) : NULL, 0, m, n, k, 0);
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
    npy_intp k = PyArray_DIM(x, ndim - 1), m = row_count(x);
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

/* ---- half precision in torch's naive GEMM orders ----------------------------- */

int cpublas_runs(const myatt_dtype *dt, double work)
{
    return dt == MYATT_DTYPE(f16) || (dt == MYATT_DTYPE(bf16) && work <= 4096.0);
}

/* a [..., d] as torch's mm sees its rows [m, d] (for the order only: no data):
 * a 2-D array's strides, a contiguous matrix otherwise (torch flattens a
 * contiguous input and copies another). */
static mk_cmat rows_layout(PyArrayObject *a)
{
    const int ndim = PyArray_NDIM(a);
    return ndim == 2 ? cmat_of(a) : mk_cmat_c(NULL, row_count(a), PyArray_DIM(a, ndim - 1));
}

/* a (any real dtype) as float32 rows [m, d] (*v; rs 0 for 1-D), the array
 * holding them; NULL with an exception. */
static PyArrayObject *f32_rows(PyArrayObject *a, const char *what, mk_cmat *v)
{
    PyArrayObject *f = cast_array(a, NPY_FLOAT, 0, what), *rows;
    if (f == NULL)
        return NULL;
    npy_intp rs, cs;
    rows = as_rows(f, &rs, &cs);
    Py_DECREF(f);
    if (rows == NULL) {
        name_allocation_error(what);
        return NULL;
    }
    *v = (mk_cmat){PyArray_DATA(rows), row_count(rows),
                   PyArray_DIM(rows, PyArray_NDIM(rows) - 1), rs, cs};
    return rows;
}

/* gemm_cpublas without the GIL: 0, or -1 with MemoryError */
static int cpublas_run(mk_mat c, mk_cmat a, mk_cmat b, const float *bias, cpublas_order order)
{
    int rc;
    MYATT_BEGIN_COMPUTE((double)c.rows * (double)c.cols * (double)a.cols)
    rc = gemm_cpublas(c, a, b, bias, order);
    MYATT_END_COMPUTE
    if (rc < 0)
        PyErr_NoMemory();
    return rc;
}

PyObject *linear_cpublas(PyArrayObject *x, PyArrayObject *weight, PyArrayObject *bias,
                         const char *const *what)
{
    const cpublas_order order = cpublas_order_of(rows_layout(x), mk_t(cmat_of(weight)));
    npy_intp dims[NPY_MAXDIMS];
    const npy_intp n = PyArray_DIM(weight, 0);
    const npy_intp m = result_shape(x, n, dims);
    mk_cmat xv, wv;
    PyArrayObject *xr = NULL, *wr = NULL, *b = NULL;
    PyObject *out = NULL;
    if ((xr = f32_rows(x, what[0], &xv)) != NULL && (wr = f32_rows(weight, what[1], &wv)) != NULL
            && (bias == NULL || (b = cast_array(bias, NPY_FLOAT, 1, what[2])) != NULL)
            && (out = new_array(PyArray_NDIM(x), dims, NPY_FLOAT, "linear: the result")) != NULL
            && cpublas_run(mk_mat_c(PyArray_DATA((PyArrayObject *)out), m, n), xv, mk_t(wv),
                           b != NULL ? PyArray_DATA(b) : NULL, order) < 0)
        Py_CLEAR(out);
    Py_XDECREF(xr);
    Py_XDECREF(wr);
    Py_XDECREF(b);
    return out;
}

PyObject *linear_grad_cpublas(PyArrayObject *x, PyArrayObject *grad_out, PyArrayObject *weight,
                              int with_bias, const char *const *what)
{
    const mk_cmat gl = rows_layout(grad_out);
    const cpublas_order input_order = cpublas_order_of(gl, cmat_of(weight));
    const cpublas_order weight_order = cpublas_order_of(mk_t(gl), rows_layout(x));
    const npy_intp n = PyArray_DIM(weight, 0), k = PyArray_DIM(weight, 1), wdims[2] = {n, k};
    mk_cmat xv, gv, wv;
    PyArrayObject *xr = NULL, *gr = NULL, *wr = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
    PyObject *result = NULL;
    if ((gr = f32_rows(grad_out, what[0], &gv)) == NULL || (xr = f32_rows(x, what[1], &xv)) == NULL
            || (wr = f32_rows(weight, what[2], &wv)) == NULL
            || (gx = (PyArrayObject *)new_array(PyArray_NDIM(x), PyArray_DIMS(x), NPY_FLOAT,
                                                "linear backward: grad_input")) == NULL
            || (gw = (PyArrayObject *)new_array(2, wdims, NPY_FLOAT,
                                                "linear backward: grad_weight")) == NULL
            || (with_bias && (gb = (PyArrayObject *)new_array(1, wdims, NPY_FLOAT,
                                                              "linear backward: grad_bias")) == NULL)
            || cpublas_run(mk_mat_c(PyArray_DATA(gx), xv.rows, k), gv, wv, NULL, input_order) < 0
            || cpublas_run(mk_mat_c(PyArray_DATA(gw), n, k), mk_t(gv), xv, NULL, weight_order) < 0)
        goto fail;
    if (gb != NULL) {
        Py_BEGIN_ALLOW_THREADS
        colsum_half_f32(PyArray_DATA(gb), gv);
        Py_END_ALLOW_THREADS
    }
    result = PyTuple_Pack(3, (PyObject *)gx, (PyObject *)gw, gb ? (PyObject *)gb : Py_None);
fail:
    Py_XDECREF(xr);
    Py_XDECREF(gr);
    Py_XDECREF(wr);
    Py_XDECREF(gx);
    Py_XDECREF(gw);
    Py_XDECREF(gb);
    return result;
}

/* ---- bfloat16 gradients on the CPU's dot product --------------------------- */

/* x^T of a C-contiguous bfloat16 matrix [rows, cols] as a new [cols, rows] one
 * (mk_free it), or NULL */
static uint16_t *bf16_transposed(PyArrayObject *x, npy_intp rows, npy_intp cols)
{
    uint16_t *t = mk_alloc(mk_bytes(mk_bytes((size_t)rows, (size_t)cols), 2));
    if (t != NULL)
        mk_copy_view(t, mk_t(mk_cmat_c(PyArray_DATA(x), rows, cols)), 2);
    return t;
}

PyObject *linear_grad_bf16(PyArrayObject *x, PyArrayObject *grad_out, PyArrayObject *weight,
                           int with_bias, const char *const *what)
{
    const npy_intp n = PyArray_DIM(weight, 0), k = PyArray_DIM(weight, 1), wdims[2] = {n, k};
    const npy_intp m = row_count(x);
    if (!mk_cpu_bf16_dot() || cpublas_runs(MYATT_DTYPE(bf16), (double)m * (double)k * (double)n))
        return Py_NewRef(Py_NotImplemented);
    const int t = PyArray_TYPE(x);
    PyArrayObject *xc = NULL, *gc = NULL, *wc = NULL, *gf = NULL, *gx = NULL, *gw = NULL;
    PyArrayObject *gb = NULL;
    uint16_t *gt = NULL;
    PyObject *result = NULL;
    mk_cmat gv;
    if ((gc = cast_array(grad_out, t, 1, what[0])) == NULL
            || (xc = cast_array(x, t, 1, what[1])) == NULL
            || (wc = cast_array(weight, t, 1, what[2])) == NULL
            || (gx = (PyArrayObject *)new_array(PyArray_NDIM(x), PyArray_DIMS(x), t,
                                                "linear backward: grad_input")) == NULL
            || (gw = (PyArrayObject *)new_array(2, wdims, t,
                                                "linear backward: grad_weight")) == NULL
            || (with_bias && ((gf = f32_rows(grad_out, what[0], &gv)) == NULL
                              || (gb = (PyArrayObject *)new_array(1, wdims, NPY_FLOAT,
                                            "linear backward: grad_bias")) == NULL)))
        goto fail;
    int rc = -1;
    Py_BEGIN_ALLOW_THREADS
    /* grad_input = g [m, n] @ (W^T [k, n])^T, grad_weight = g^T [n, m] @ (x^T [k, m])^T:
     * W^T and x^T transposed views (packed as they lie), g^T copied (read in place) */
    if ((gt = bf16_transposed(gc, m, n)) != NULL)
        rc = gemm_bf16_linear(PyArray_DATA(gx), k, PyArray_DATA(gc), n,
                              mk_t(mk_cmat_c(PyArray_DATA(wc), n, k)), NULL, 0, m, k, n, 0)
             | gemm_bf16_linear(PyArray_DATA(gw), k, gt, m,
                                mk_t(mk_cmat_c(PyArray_DATA(xc), m, k)), NULL, 0, n, k, m, 1);
    if (rc == 0 && gb != NULL)
        colsum_half_f32(PyArray_DATA(gb), gv);
    Py_END_ALLOW_THREADS
    if (rc != 0)
        PyErr_NoMemory();
    else
        result = PyTuple_Pack(3, (PyObject *)gx, (PyObject *)gw, gb ? (PyObject *)gb : Py_None);
fail:
    mk_free(gt);
    Py_XDECREF(xc);
    Py_XDECREF(gc);
    Py_XDECREF(wc);
    Py_XDECREF(gf);
    Py_XDECREF(gx);
    Py_XDECREF(gw);
    Py_XDECREF(gb);
    return result;
}
