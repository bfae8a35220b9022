/* myatt.gelu and myatt.gelu_backward, declared (entry.h). */
#include "entry.h"

#include "kernels/activation/activation.h"


DTYPE_KERNELS(gelu_forward);
DTYPE_KERNELS(gelu_backward);

PyDoc_STRVAR(gelu_doc,
"GELU, as torch.nn.functional.gelu.\n"
"\n"
"``x * 0.5 * (1 + erf(x / sqrt(2)))``, or with ``approximate='tanh'``\n"
"``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``, elementwise.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, any shape\n"
"    Real numbers (bool, integer, float16, bfloat16, float32 or float64).\n"
"approximate : {'none', 'tanh'}, optional\n"
"    The exact GELU (default) or torch's tanh approximation.\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape of `input`\n"
"    `input`'s dtype if a float one, else float32; always a new C-contiguous\n"
"    array. float32 with ``approximate='none'``: torch's bits on a CPU with\n"
"    AVX-512 (torch calls oneDNN there; see the numerics page).\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `input` is not an array of real numbers, or `approximate` not a str.\n"
"ValueError\n"
"    If `approximate` is neither 'none' nor 'tanh'.\n"
"\n"
"See Also\n"
"--------\n"
"gelu_backward : its gradient.\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.gelu(np.array([-1.0, 0.0, 1.0]))\n"
"array([-0.1587,  0.    ,  0.8413])\n"
">>> myatt.gelu(np.float32(1), approximate='tanh').dtype\n"
"dtype('float32')");

/* 'none' -> GELU_NONE, 'tanh' -> GELU_TANH (torch's names), or -1 with an error */
static int approximate_arg(PyObject *obj, const char *what)
{
    if (obj == NULL)
        return GELU_NONE;
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, 'none' or 'tanh', got %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyUnicode_CompareWithASCIIString(obj, "none") == 0)
        return GELU_NONE;
    if (PyUnicode_CompareWithASCIIString(obj, "tanh") == 0)
        return GELU_TANH;
    PyErr_Format(PyExc_ValueError, "%s must be 'none' or 'tanh', got %R", what, obj);
    return -1;
}

static int gelu_check(const entry_call *c)
{
    return approximate_arg(c->obj[1], c->e->what[1]) < 0 ? -1 : 0;
}

static PyObject *gelu_run(const entry_call *c)
{
    const int typenum = c->dt->typenum, approximate = approximate_arg(c->obj[1], c->e->what[1]);
    PyArrayObject *x = cast_array(c->arr[0], typenum, 1, c->e->what[0]);
    if (x == NULL)
        return NULL;
    PyObject *out = new_array(PyArray_NDIM(x), PyArray_DIMS(x), typenum, "gelu(): the result");
    if (out != NULL) {
        const npy_intp n = PyArray_SIZE(x);
        const void *xd = PyArray_DATA(x);
        void *od = PyArray_DATA((PyArrayObject *)out);
        MYATT_BEGIN_COMPUTE(8.0 * (double)n)
        gelu_forward_kernels[c->dt->kernel](od, xd, n, approximate);
        MYATT_END_COMPUTE
    }
    Py_DECREF(x);
    return out;
}

static const entry_param gelu_params[] = {
    {"input", ARG_ARRAY}, {"approximate", ARG_VALUE, "'none'"}, {NULL}};

ENTRY(gelu_entry, .name = "gelu", .params = gelu_params, .doc = gelu_doc, .check = gelu_check,
      .run = gelu_run, .backward = &gelu_backward_entry, .saves = SAVES_ARGUMENTS)

PyDoc_STRVAR(gelu_backward_doc,
"Gradient of gelu, as torch's autograd gives it (torch's gelu_backward).\n"
"\n"
"Parameters\n"
"----------\n"
"grad_output : array_like\n"
"    The gradient of gelu's result, of `input`'s shape.\n"
"input : array_like\n"
"    gelu's input (not its result).\n"
"approximate : {'none', 'tanh'}, optional\n"
"    As given to gelu.\n"
"\n"
"Returns\n"
"-------\n"
"ndarray, shape of `input`\n"
"    The operands' promoted dtype (the widest float; see Conventions).\n"
"    float32 with ``approximate='none'``: torch's bits on every CPU with AVX2\n"
"    or AVX-512.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers, or `approximate` not a str.\n"
"ValueError\n"
"    If the shapes differ, or `approximate` is neither 'none' nor 'tanh'.\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.gelu_backward(np.ones(3), np.zeros(3))\n"
"array([0.5, 0.5, 0.5])");

static int gelu_backward_check(const entry_call *c)
{
    PyArrayObject *g = c->arr[0], *x = c->arr[1];
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    if (!PyArray_SAMESHAPE(g, x)) {
        PyErr_Format(PyExc_ValueError, "gelu_backward(): grad_output must have the shape of "
                     "input %s, got %s", SHAPE_OF(s1, x), SHAPE_OF(s2, g));
        return -1;
    }
    return approximate_arg(c->obj[2], c->e->what[2]) < 0 ? -1 : 0;
}

static PyObject *gelu_backward_run(const entry_call *c)
{
    const int typenum = c->dt->typenum, approximate = approximate_arg(c->obj[2], c->e->what[2]);
    PyArrayObject *g = NULL, *x = NULL;
    PyObject *out = NULL;
    if ((g = cast_array(c->arr[0], typenum, 1, c->e->what[0])) != NULL
            && (x = cast_array(c->arr[1], typenum, 1, c->e->what[1])) != NULL
            && (out = new_array(PyArray_NDIM(x), PyArray_DIMS(x), typenum,
                                "gelu_backward(): the result")) != NULL) {
        const npy_intp n = PyArray_SIZE(x);
        const void *gd = PyArray_DATA(g), *xd = PyArray_DATA(x);
        void *od = PyArray_DATA((PyArrayObject *)out);
        MYATT_BEGIN_COMPUTE(12.0 * (double)n)
        gelu_backward_kernels[c->dt->kernel](od, gd, xd, n, approximate);
        MYATT_END_COMPUTE
    }
    Py_XDECREF(g);
    Py_XDECREF(x);
    return out;
}

static const entry_param gelu_backward_params[] = {
    {"grad_output", ARG_ARRAY}, {"input", ARG_ARRAY}, {"approximate", ARG_VALUE, "'none'"},
    {NULL}};

ENTRY(gelu_backward_entry, .name = "gelu_backward", .params = gelu_backward_params,
      .doc = gelu_backward_doc, .check = gelu_backward_check, .run = gelu_backward_run)
