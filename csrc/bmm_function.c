/* myatt.bmm and myatt.bmm_backward, declared (entry.h). */
#include "checks.h"
#include "entry.h"

#include "kernels/bmm/bmm.h"
#include "kernels/gemm/gemm_bf16.h"
#include "kernels/gemm/gemm_cpublas.h"
#include "kernels/runtime/cpu.h"
#include "linear_ops.h"

DTYPE_KERNELS(bmm_forward);
DTYPE_KERNELS(bmm_backward);

PyDoc_STRVAR(bmm_doc,
"Batched matrix product, as torch.bmm.\n"
"\n"
"``out[i] = input[i] @ mat2[i]`` for each of the b matrices.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, shape (b, n, m)\n"
"    Real numbers (bool, integer, float16, bfloat16, float32 or float64).\n"
"mat2 : array_like, shape (b, m, p)\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape (b, n, p)\n"
"    The operands' promoted dtype (the widest float; see Conventions);\n"
"    always a new C-contiguous array.\n"
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

static const entry_param bmm_params[] = {{"input", ARG_ARRAY}, {"mat2", ARG_ARRAY}, {NULL}};

static int bmm_check(const entry_call *c)
{
    return check_bmm_operands("bmm()", "input", c->arr[0], "mat2", c->arr[1]);
}

/* Whether torch computes a @ b ([b, n, m] @ [b, m, p], views of operands of
 * half dtype dt) in its naive orders (below 400 multiply-adds a matrix, one
 * chain whatever the layouts; bfloat16 above oneDNN's threshold: no), and in
 * which: *order. */
static int bmm_cpublas_order(const myatt_dtype *dt, mk_cbatch a, mk_cbatch b,
                             cpublas_order *order)
{
    if (!dtype_is_half(dt))
        return 0;
    const double nmp = (double)a.rows * (double)a.cols * (double)b.cols;
    *order = nmp < 400.0 ? CPUBLAS_CHAIN
                         : cpublas_order_of(mk_citem(a, 0, 0), mk_citem(b, 0, 0));
    return nmp < 400.0 || cpublas_runs(dt, nmp * (double)a.batch);
}

/* The transpose of each item: no data moved */
static mk_cbatch cbatch_t(mk_cbatch x)
{
    return (mk_cbatch){x.data, x.batch, x.cols, x.rows, x.bs, x.cs, x.rs};
}

/* count bfloat16 products out[i] = a[i] @ b[i] (+ add[i] if add: bfloat16
 * views) into new arrays of shape dims[i] (names[i] in messages) on the CPU's
 * bfloat16 dot product, in oneDNN's order (the addend its sum post-op): 0, 1
 * when this CPU has none (out[] NULL), or -1 with an exception (out[]
 * released). */
static int bf16_bmm(int count, PyArrayObject **out, const mk_cbatch *a, const mk_cbatch *b,
                    const mk_cbatch *add, npy_intp (*dims)[3], int typenum,
                    const char *const *names)
{
    if (!mk_cpu_bf16_dot())
        return 1;
    int rc = 0;
    for (int i = 0; i < count; i++)
        if ((out[i] = (PyArrayObject *)new_array(3, dims[i], typenum, names[i])) == NULL)
            rc = -1;
    double work = 0;
    for (int i = 0; i < count; i++)
        work += (double)a[i].batch * (double)a[i].rows * (double)a[i].cols * (double)b[i].cols;
    if (rc == 0) {
        MYATT_BEGIN_COMPUTE(work)
        for (int i = 0; i < count && rc == 0; i++)
            rc = gemm_bf16_bmm(batch_of(out[i]), a[i], b[i], add ? &add[i] : NULL);
        MYATT_END_COMPUTE
        if (rc != 0)
            PyErr_NoMemory();
    }
    if (rc != 0)
        for (int i = 0; i < count; i++)
            Py_CLEAR(out[i]);
    return rc;
}

static PyObject *bmm_run(const entry_call *c)
{
    cpublas_order order = CPUBLAS_CHAIN;
    const mk_cbatch a0 = cbatch_of(c->arr[0]), b0 = cbatch_of(c->arr[1]);
    const int cpublas = bmm_cpublas_order(c->result, a0, b0, &order);
    if (!cpublas && c->result == MYATT_DTYPE(bf16)) {
        npy_intp dims[1][3] = {{a0.batch, a0.rows, b0.cols}};
        static const char *const name = "bmm(): the result";
        PyArrayObject *y;
        const int rc = bf16_bmm(1, &y, &a0, &b0, NULL, dims, c->result->typenum, &name);
        if (rc <= 0)
            return (PyObject *)y;
    }
    const int typenum = c->dt->typenum;
    PyArrayObject *a = NULL, *b = NULL;
    PyObject *out = NULL;
    if ((a = cast_array(c->arr[0], typenum, 0, c->e->what[0])) == NULL
            || (b = cast_array(c->arr[1], typenum, 0, c->e->what[1])) == NULL)
        goto done;
    npy_intp bt = PyArray_DIM(a, 0), n = PyArray_DIM(a, 1), m = PyArray_DIM(a, 2);
    npy_intp p = PyArray_DIM(b, 2), dims[3] = {bt, n, p};
    if ((out = new_array(3, dims, typenum, "bmm(): the result")) == NULL)
        goto done;
    const mk_batch ov = batch_of((PyArrayObject *)out);
    const mk_cbatch av = cbatch_of(a), bv = cbatch_of(b);
    int rc;
    MYATT_BEGIN_COMPUTE((double)bt * (double)n * (double)m * (double)p)
    rc = cpublas ? bmm_cpublas(ov, av, bv, order) : bmm_forward_kernels[c->dt->kernel](ov, av, bv);
    MYATT_END_COMPUTE
    if (rc < 0) {
        Py_CLEAR(out);
        PyErr_NoMemory();
    }
done:
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

ENTRY(bmm_entry, .name = "bmm", .params = bmm_params, .doc = bmm_doc, .check = bmm_check,
      .run = bmm_run, .backward = &bmm_backward_entry, .saves = SAVES_ARGUMENTS)

PyDoc_STRVAR(baddbmm_doc,
"Private: ``input + bmm(batch1, batch2)``, as torch.baddbmm with beta = alpha = 1.\n"
"\n"
"MultiheadAttention's half-precision weights (torch's ``baddbmm(attn_mask,\n"
"q_scaled, k^T)``): the product in torch's order for the dtype, `input`\n"
"(3-D, each dimension the result's or 1) added to its float32 sum, one\n"
"rounding.  float32 and float64: myatt's bmm, then the addition.");

static const entry_param baddbmm_params[] = {
    {"input", ARG_ARRAY}, {"batch1", ARG_ARRAY}, {"batch2", ARG_ARRAY}, {NULL}};

static int baddbmm_check(const entry_call *c)
{
    PyArrayObject *in = c->arr[0], *a = c->arr[1], *b = c->arr[2];
    if (check_bmm_operands("_baddbmm()", "batch1", a, "batch2", b) < 0)
        return -1;
    const npy_intp want[3] = {PyArray_DIM(a, 0), PyArray_DIM(a, 1), PyArray_DIM(b, 2)};
    int ok = PyArray_NDIM(in) == 3;
    for (int d = 0; ok && d < 3; d++)
        ok = PyArray_DIM(in, d) == want[d] || PyArray_DIM(in, d) == 1;
    if (!ok) {
        char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
        PyErr_Format(PyExc_ValueError, "_baddbmm(): input must be 3-D and broadcast to %s, "
                     "got %s", shape_str(s1, sizeof s1, 3, want), SHAPE_OF(s2, in));
        return -1;
    }
    return 0;
}

/* x (3-D, each dimension 1 or dims') as a view of dims: stride 0 where it is 1 */
static mk_cbatch cbatch_broadcast(PyArrayObject *x, const npy_intp *dims)
{
    mk_cbatch v = cbatch_of(x);
    v.batch = dims[0];
    v.rows = dims[1];
    v.cols = dims[2];
    if (PyArray_DIM(x, 0) == 1)
        v.bs = 0;
    if (PyArray_DIM(x, 1) == 1)
        v.rs = 0;
    if (PyArray_DIM(x, 2) == 1)
        v.cs = 0;
    return v;
}

static PyObject *baddbmm_run(const entry_call *c)
{
    const mk_cbatch a0 = cbatch_of(c->arr[1]), b0 = cbatch_of(c->arr[2]);
    npy_intp dims[3] = {a0.batch, a0.rows, b0.cols};
    cpublas_order order = CPUBLAS_CHAIN;
    const int cpublas = bmm_cpublas_order(c->result, a0, b0, &order);
    PyArrayObject *in = NULL, *a = NULL, *b = NULL;
    PyObject *out = NULL;
    if (!cpublas && c->result == MYATT_DTYPE(bf16) && mk_cpu_bf16_dot()) {
        /* oneDNN's: the addend in bfloat16 beside the float32 sums, columns contiguous */
        const int t = c->result->typenum;
        if ((in = cast_array(c->arr[0], t, 1, c->e->what[0])) == NULL)
            return NULL;
        if (PyArray_DIM(in, 2) == 1 && dims[2] > 1) {   /* (one column: repeated) */
            npy_intp wide[3] = {PyArray_DIM(in, 0), PyArray_DIM(in, 1), dims[2]};
            PyArrayObject *w = (PyArrayObject *)new_array(3, wide, t, c->e->what[0]);
            if (w == NULL)
                goto done;
            const uint16_t *src = PyArray_DATA(in);
            uint16_t *dst = PyArray_DATA(w);
            for (npy_intp r = 0; r < wide[0] * wide[1]; r++)
                for (npy_intp j = 0; j < wide[2]; j++)
                    dst[r * wide[2] + j] = src[r];
            Py_SETREF(in, w);
        }
        const mk_cbatch addv = cbatch_broadcast(in, dims);
        static const char *const name = "_baddbmm(): the result";
        PyArrayObject *y;
        bf16_bmm(1, &y, &a0, &b0, &addv, &dims, t, &name);
        out = (PyObject *)y;
        goto done;
    }
    /* a float32 (float64) product, the addend added to it; entry_run rounds a half one */
    const int typenum = c->dt->typenum;
    if ((in = cast_array(c->arr[0], typenum, 0, c->e->what[0])) == NULL
            || (a = cast_array(c->arr[1], typenum, 0, c->e->what[1])) == NULL
            || (b = cast_array(c->arr[2], typenum, 0, c->e->what[2])) == NULL
            || (out = new_array(3, dims, typenum, "_baddbmm(): the result")) == NULL)
        goto done;
    const mk_batch ov = batch_of((PyArrayObject *)out);
    const mk_cbatch av = cbatch_of(a), bv = cbatch_of(b), iv = cbatch_broadcast(in, dims);
    int rc;
    MYATT_BEGIN_COMPUTE((double)dims[0] * (double)dims[1] * (double)a0.cols * (double)dims[2])
    rc = cpublas ? bmm_cpublas(ov, av, bv, order) : bmm_forward_kernels[c->dt->kernel](ov, av, bv);
    if (rc == 0)
        for (int64_t i = 0; i < ov.batch; i++)
            for (int64_t r = 0; r < ov.rows; r++) {
                const int64_t o = i * ov.bs + r * ov.rs, s = i * iv.bs + r * iv.rs;
                if (c->dt->itemsize == 4) {
                    float *y = (float *)ov.data + o;
                    const float *x = (const float *)iv.data + s;
                    for (int64_t j = 0; j < ov.cols; j++)
                        y[j] += x[j * iv.cs];
                } else {
                    double *y = (double *)ov.data + o;
                    const double *x = (const double *)iv.data + s;
                    for (int64_t j = 0; j < ov.cols; j++)
                        y[j] += x[j * iv.cs];
                }
            }
    MYATT_END_COMPUTE
    if (rc < 0)
        Py_SETREF(out, PyErr_NoMemory());
done:
    Py_XDECREF(in);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

ENTRY(baddbmm_entry, .name = "_baddbmm", .params = baddbmm_params, .doc = baddbmm_doc,
      .check = baddbmm_check, .run = baddbmm_run)

PyDoc_STRVAR(bmm_backward_doc,
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
"    Both in the operands' promoted dtype (the widest float; see\n"
"    Conventions); always new C-contiguous arrays.\n"
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

static const entry_param bmm_backward_params[] = {
    {"grad_output", ARG_ARRAY}, {"input", ARG_ARRAY}, {"mat2", ARG_ARRAY}, {NULL}};

static int bmm_backward_check(const entry_call *c)
{
    PyArrayObject *g = c->arr[0], *a = c->arr[1], *b = c->arr[2];
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN], s3[SHAPE_STR_LEN], s4[SHAPE_STR_LEN];
    if (check_bmm_operands("bmm_backward()", "input", a, "mat2", b) < 0)
        return -1;
    npy_intp want[3] = {PyArray_DIM(a, 0), PyArray_DIM(a, 1), PyArray_DIM(b, 2)};
    if (PyArray_NDIM(g) != 3 || !PyArray_CompareLists(want, PyArray_DIMS(g), 3)) {
        PyErr_Format(PyExc_ValueError, "bmm_backward(): grad_output must have shape %s (the "
                     "shape of bmm(input %s, mat2 %s)), got %s", shape_str(s1, sizeof s1, 3, want),
                     SHAPE_OF(s2, a), SHAPE_OF(s3, b), SHAPE_OF(s4, g));
        return -1;
    }
    return 0;
}

static PyObject *bmm_backward_run(const entry_call *c)
{
    /* grad_input = grad_output @ mat2^T, grad_mat2 = input^T @ grad_output:
     * torch's bmm of those views */
    const mk_cbatch g0 = cbatch_of(c->arr[0]), a0 = cbatch_of(c->arr[1]);
    const mk_cbatch b0 = cbatch_of(c->arr[2]);
    cpublas_order order_a = CPUBLAS_CHAIN, order_b = CPUBLAS_CHAIN;
    const int cpublas = bmm_cpublas_order(c->result, g0, cbatch_t(b0), &order_a)
                        && bmm_cpublas_order(c->result, cbatch_t(a0), g0, &order_b);
    if (!cpublas && c->result == MYATT_DTYPE(bf16)) {
        const mk_cbatch as[2] = {g0, cbatch_t(a0)}, bs[2] = {cbatch_t(b0), g0};
        npy_intp dims[2][3] = {{a0.batch, a0.rows, a0.cols}, {b0.batch, b0.rows, b0.cols}};
        static const char *const names[2] = {"bmm_backward(): grad_input",
                                             "bmm_backward(): grad_mat2"};
        PyArrayObject *grads[2];
        const int rc = bf16_bmm(2, grads, as, bs, NULL, dims, c->result->typenum, names);
        if (rc < 0)
            return NULL;
        if (rc == 0) {
            PyObject *r = PyTuple_Pack(2, (PyObject *)grads[0], (PyObject *)grads[1]);
            Py_DECREF(grads[0]);
            Py_DECREF(grads[1]);
            return r;
        }
    }
    const int typenum = c->dt->typenum;
    PyArrayObject *g = NULL, *a = NULL, *b = NULL, *ga = NULL, *gb = NULL;
    PyObject *result = NULL;
    if ((g = cast_array(c->arr[0], typenum, 0, c->e->what[0])) == NULL
            || (a = cast_array(c->arr[1], typenum, 0, c->e->what[1])) == NULL
            || (b = cast_array(c->arr[2], typenum, 0, c->e->what[2])) == NULL
            || (ga = (PyArrayObject *)new_array(3, PyArray_DIMS(a), typenum,
                                                "bmm_backward(): grad_input")) == NULL
            || (gb = (PyArrayObject *)new_array(3, PyArray_DIMS(b), typenum,
                                                "bmm_backward(): grad_mat2")) == NULL)
        goto done;
    const mk_batch gav = batch_of(ga), gbv = batch_of(gb);
    const mk_cbatch gv = cbatch_of(g), av = cbatch_of(a), bv = cbatch_of(b);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = !cpublas ? bmm_backward_kernels[c->dt->kernel](gav, gbv, gv, av, bv)
         : bmm_cpublas(gav, gv, cbatch_t(bv), order_a) < 0
               || bmm_cpublas(gbv, cbatch_t(av), gv, order_b) < 0 ? -1 : 0;
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_NoMemory();
    else
        result = PyTuple_Pack(2, (PyObject *)ga, (PyObject *)gb);
done:
    Py_XDECREF(g);
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(ga);
    Py_XDECREF(gb);
    return result;
}

ENTRY(bmm_backward_entry, .name = "bmm_backward", .params = bmm_backward_params,
      .doc = bmm_backward_doc, .check = bmm_backward_check, .run = bmm_backward_run)
