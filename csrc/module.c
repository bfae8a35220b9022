/* The module myatt._myatt: init (multi-phase), per-module state, and the kernel
 * functions linear, softmax and bmm, manual_seed and the thread count. */
#define MYATT_IMPORTS_NUMPY
#include "glue.h"

#include "kernels/alloc.h"
#include "kernels/bmm.h"
#include "kernels/softmax.h"
#include "kernels/threads.h"

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

static PyObject *myatt_linear(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "weight", "bias", NULL};
    PyObject *input_obj, *weight_obj, *bias_obj = Py_None, *result = NULL;
    PyArrayObject *rx = NULL, *rw = NULL, *rb = NULL, *x = NULL, *w = NULL, *b = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:linear", kwlist,
                                     &input_obj, &weight_obj, &bias_obj))
        return NULL;
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

/* ---- softmax --------------------------------------------------------------- */

PyDoc_STRVAR(softmax_doc,
"softmax($module, input, dim=-1)\n--\n\n"
"exp(x - max) / sum(exp(x - max)) along `dim`, as torch.softmax.\n\n"
"Any ndim and axis (a 0-d input gives a 0-d array); NaN in a slice makes the\n"
"slice NaN. Always a new C-contiguous array.");

static PyObject *myatt_softmax(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "dim", NULL};
    PyObject *input_obj, *dim_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:softmax", kwlist, &input_obj, &dim_obj))
        return NULL;
    Py_ssize_t dim = -1;
    if (dim_obj != NULL) {
        if (PyBool_Check(dim_obj) || !PyIndex_Check(dim_obj)) {
            PyErr_Format(PyExc_TypeError, "softmax(): dim must be an integer, got %.100s",
                         Py_TYPE(dim_obj)->tp_name);
            return NULL;
        }
        dim = PyNumber_AsSsize_t(dim_obj, NULL);   /* clamps: out of range either way */
        if (dim == -1 && PyErr_Occurred())
            return NULL;
    }
    PyArrayObject *raw = as_real_array(input_obj, "softmax(): input");
    if (raw == NULL)
        return NULL;
    int ndim = PyArray_NDIM(raw);
    int span = ndim > 0 ? ndim : 1;   /* a 0-d input takes dim 0 or -1, as in torch */
    if (dim < -span || dim >= span) {
        myatt_state *st = PyModule_GetState(module);
        PyObject *exc = PyObject_CallFunction(st->axis_error, "nis", (Py_ssize_t)dim, span,
                                              "softmax(): dim");
        if (exc != NULL) {
            PyErr_SetObject(st->axis_error, exc);
            Py_DECREF(exc);
        }
        Py_DECREF(raw);
        return NULL;
    }
    if (dim < 0)
        dim += span;

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
    /* [outer, n, inner] around the axis. */
    npy_intp outer = 1, n = ndim > 0 ? PyArray_DIM(x, dim) : 1, inner = 1;
    for (int i = 0; i < ndim; i++) {
        if (i < dim)
            outer *= PyArray_DIM(x, i);
        else if (i > dim)
            inner *= PyArray_DIM(x, i);
    }
    const void *xd = PyArray_DATA(x);
    void *od = PyArray_DATA((PyArrayObject *)out);
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        softmax_forward_f32(od, xd, outer, n, inner);
    else
        softmax_forward_f64(od, xd, outer, n, inner);
    Py_END_ALLOW_THREADS
    Py_DECREF(x);
    return out;
}

/* ---- bmm ------------------------------------------------------------------- */

PyDoc_STRVAR(bmm_doc,
"bmm($module, input, mat2)\n--\n\n"
"[b, n, m] @ [b, m, p] -> [b, n, p], as torch.bmm.\n\n"
"float64 if either operand is float64, else float32; always a new C-contiguous array.");

static PyObject *myatt_bmm(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "mat2", NULL};
    PyObject *a_obj, *b_obj, *out = NULL;
    PyArrayObject *ra = NULL, *rb = NULL, *a = NULL, *b = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:bmm", kwlist, &a_obj, &b_obj))
        return NULL;
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
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        rc = bmm_forward_f32(od, PyArray_DATA(a), ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2),
                             PyArray_DATA(b), ESTRIDE(b, 0), ESTRIDE(b, 1), ESTRIDE(b, 2),
                             bt, n, m, p);
    else
        rc = bmm_forward_f64(od, PyArray_DATA(a), ESTRIDE(a, 0), ESTRIDE(a, 1), ESTRIDE(a, 2),
                             PyArray_DATA(b), ESTRIDE(b, 0), ESTRIDE(b, 1), ESTRIDE(b, 2),
                             bt, n, m, p);
    Py_END_ALLOW_THREADS
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

/* ---- the module ------------------------------------------------------------ */

static PyMethodDef myatt_methods[] = {
    {"linear", (PyCFunction)(void (*)(void))myatt_linear, METH_VARARGS | METH_KEYWORDS,
     linear_doc},
    {"softmax", (PyCFunction)(void (*)(void))myatt_softmax, METH_VARARGS | METH_KEYWORDS,
     softmax_doc},
    {"bmm", (PyCFunction)(void (*)(void))myatt_bmm, METH_VARARGS | METH_KEYWORDS, bmm_doc},
    {"manual_seed", myatt_manual_seed, METH_O, manual_seed_doc},
    {"set_num_threads", myatt_set_num_threads, METH_O, set_num_threads_doc},
    {"get_num_threads", myatt_get_num_threads, METH_NOARGS, get_num_threads_doc},
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
