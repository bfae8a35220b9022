/* myatt.bmm and myatt.bmm_backward, declared (entry.h). */
#include "checks.h"
#include "entry.h"

#include "kernels/bmm/bmm.h"

extern entry bmm_backward_entry;

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
    return check_bmm_operands("bmm()", c->arr[0], c->arr[1]);
}

static PyObject *bmm_run(const entry_call *c)
{
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
    rc = bmm_forward_kernels[c->dt->kernel](ov, av, bv);
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
    if (check_bmm_operands("bmm_backward()", a, b) < 0)
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
    rc = bmm_backward_kernels[c->dt->kernel](gav, gbv, gv, av, bv);
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
