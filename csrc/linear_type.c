/* myatt.Linear: the extension type holding one linear layer's parameters, and
 * linear_apply, the glue around the linear kernel that myatt.linear shares. */
#include "glue.h"

#include "kernels/linear.h"

#include <string.h>

/* ---- the computation, shared with myatt.linear ---------------------------- */

PyObject *linear_apply(PyArrayObject *x, const void *weight, npy_intp rs_w, npy_intp cs_w,
                       const void *bias, npy_intp n, int typenum)
{
    int ndim = PyArray_NDIM(x);
    npy_intp k = PyArray_DIM(x, ndim - 1);
    npy_intp out_dims[NPY_MAXDIMS];
    npy_intp m = 1;
    for (int i = 0; i < ndim - 1; i++) {
        out_dims[i] = PyArray_DIM(x, i);
        m *= out_dims[i];   /* cannot overflow: x exists with these dimensions */
    }
    out_dims[ndim - 1] = n;

    /* [..., k] viewed as rows [m, k]: strides as they are for 1-D and 2-D input,
     * a contiguous copy first for more dimensions that are not contiguous. */
    PyArrayObject *rows = (PyArrayObject *)Py_NewRef(x);
    if (ndim > 2 && !PyArray_IS_C_CONTIGUOUS(x)) {
        Py_SETREF(rows, (PyArrayObject *)PyArray_NewCopy(x, NPY_CORDER));
        if (rows == NULL) {
            name_memory_error("linear: a contiguous copy of input");
            return NULL;
        }
    }
    npy_intp cs_x = ESTRIDE(rows, ndim - 1);
    npy_intp rs_x = ndim == 2 ? ESTRIDE(rows, 0) : ndim == 1 ? 0 : k;

    PyObject *out = new_array(ndim, out_dims, typenum, "linear: the result");
    if (out == NULL) {
        Py_DECREF(rows);
        return NULL;
    }
    const void *xd = PyArray_DATA(rows);
    void *od = PyArray_DATA((PyArrayObject *)out);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (typenum == NPY_FLOAT)
        rc = linear_forward_f32(od, xd, rs_x, cs_x, weight, rs_w, cs_w, bias, m, k, n);
    else
        rc = linear_forward_f64(od, xd, rs_x, cs_x, weight, rs_w, cs_w, bias, m, k, n);
    Py_END_ALLOW_THREADS
    Py_DECREF(rows);
    if (rc < 0) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
}

/* ---- construction ---------------------------------------------------------- */

/* A new uninitialised parameter array; MemoryError naming it (not numpy's
 * ValueError) when its byte count overflows or it cannot be allocated. */
static PyArrayObject *new_param(int ndim, npy_intp *dims, int typenum, const char *what)
{
    return (PyArrayObject *)new_array(ndim, dims, typenum, what);
}

LinearObject *linear_create(myatt_state *st, PyTypeObject *type, Py_ssize_t in_features,
                            Py_ssize_t out_features, int bias, int typenum)
{
    npy_intp wdims[2] = {out_features, in_features};
    LinearObject *self = (LinearObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->in_features = in_features;
    self->out_features = out_features;
    self->typenum = typenum;
    self->weight = new_param(2, wdims, typenum,
                             "Linear(): weight [out_features, in_features]");
    if (self->weight == NULL)
        goto fail;
    if (bias) {
        self->bias = new_param(1, wdims, typenum, "Linear(): bias [out_features]");
        if (self->bias == NULL)
            goto fail;
    }
    void *b = bias ? PyArray_DATA(self->bias) : NULL;
    if (typenum == NPY_FLOAT)
        linear_init_f32(&st->rng, PyArray_DATA(self->weight), b, out_features, in_features);
    else
        linear_init_f64(&st->rng, PyArray_DATA(self->weight), b, out_features, in_features);
    return self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyObject *Linear_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"in_features", "out_features", "bias", "dtype", NULL};
    PyObject *in_obj, *out_obj, *bias_obj = Py_True, *dtype_obj = NULL;
    Py_ssize_t in_features, out_features;
    int typenum = NPY_FLOAT;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O$O:Linear", kwlist,
                                     &in_obj, &out_obj, &bias_obj, &dtype_obj))
        return NULL;
    if (size_arg(in_obj, "Linear(): in_features", &in_features) < 0
            || size_arg(out_obj, "Linear(): out_features", &out_features) < 0)
        return NULL;
    if (dtype_obj != NULL && !dtype_converter(dtype_obj, &typenum))
        return NULL;
    int bias = PyObject_IsTrue(bias_obj);
    if (bias < 0)
        return NULL;
    myatt_state *st = myatt_state_of_type(type);
    if (st == NULL)
        return NULL;
    return (PyObject *)linear_create(st, type, in_features, out_features, bias, typenum);
}

static void Linear_dealloc(LinearObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(self->weight);
    Py_XDECREF(self->bias);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* ---- forward --------------------------------------------------------------- */

static PyObject *linear_forward(LinearObject *self, PyObject *input)
{
    PyArrayObject *raw = as_real_array(input, "Linear: input");
    if (raw == NULL)
        return NULL;
    if (PyArray_NDIM(raw) == 0 || PyArray_DIM(raw, PyArray_NDIM(raw) - 1) != self->in_features) {
        char got[SHAPE_STR_LEN];
        PyErr_Format(PyExc_ValueError,
                     "Linear: input must have shape (..., %zd) (in_features = %zd), got %s",
                     self->in_features, self->in_features, SHAPE_OF(got, raw));
        Py_DECREF(raw);
        return NULL;
    }
    PyArrayObject *x = cast_array(raw, self->typenum, 0);
    Py_DECREF(raw);
    if (x == NULL)
        return NULL;
    PyObject *out = linear_apply(x, PyArray_DATA(self->weight), self->in_features, 1,
                                 self->bias ? PyArray_DATA(self->bias) : NULL,
                                 self->out_features, self->typenum);
    Py_DECREF(x);
    return out;
}

static PyObject *Linear_call(LinearObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", NULL};
    PyObject *input;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Linear.__call__", kwlist, &input))
        return NULL;
    return linear_forward(self, input);
}

static PyObject *Linear_forward(LinearObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", NULL};
    PyObject *input;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Linear.forward", kwlist, &input))
        return NULL;
    return linear_forward(self, input);
}

/* ---- state_dict ------------------------------------------------------------ */

static const char *const linear_keys[] = {"weight", "bias"};

static PyObject *Linear_state_dict(LinearObject *self, PyObject *Py_UNUSED(ignored))
{
    PyArrayObject *params[] = {self->weight, self->bias};
    return state_dict_build(linear_keys, params, 2);
}

static PyObject *Linear_load_state_dict(LinearObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"state_dict", "strict", NULL};
    PyObject *d;
    int strict = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:Linear.load_state_dict", kwlist,
                                     &d, &strict))
        return NULL;
    PyArrayObject *params[] = {self->weight, self->bias};
    return state_dict_load(d, strict, linear_keys, params, 2, "Linear");
}

/* ---- attributes ------------------------------------------------------------ */

/* A fresh view each time: in-place arithmetic on it updates the parameter, and
 * changing its shape or strides cannot touch the array the object computes with. */
static PyObject *param_view(PyArrayObject *param)
{
    if (param == NULL)
        Py_RETURN_NONE;
    return PyArray_View(param, NULL, NULL);
}

static int param_assign(PyArrayObject *param, PyObject *value, const char *what)
{
    if (value == NULL) {
        PyErr_Format(PyExc_TypeError, "%s cannot be deleted", what);
        return -1;
    }
    if (value == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s cannot be set to None: build the Linear with "
                     "bias=False instead", what);
        return -1;
    }
    PyArrayObject *raw = as_real_array(value, what);
    if (raw == NULL)
        return -1;
    if (!PyArray_SAMESHAPE(raw, param)) {
        char want[SHAPE_STR_LEN], got[SHAPE_STR_LEN];
        PyErr_Format(PyExc_ValueError, "%s must have shape %s, got %s", what,
                     SHAPE_OF(want, param), SHAPE_OF(got, raw));
        Py_DECREF(raw);
        return -1;
    }
    /* Converts to the parameter's dtype; copies through a temporary when the value
     * overlaps the parameter (m.weight = m.weight.T on a square one). */
    int rc = PyArray_CopyInto(param, raw);
    Py_DECREF(raw);
    return rc;
}

static PyObject *Linear_get_weight(LinearObject *self, void *Py_UNUSED(closure))
{
    return param_view(self->weight);
}

static int Linear_set_weight(LinearObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    return param_assign(self->weight, value, "Linear.weight");
}

static PyObject *Linear_get_bias(LinearObject *self, void *Py_UNUSED(closure))
{
    return param_view(self->bias);
}

static int Linear_set_bias(LinearObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (self->bias == NULL && value != NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "Linear.bias cannot be set: this Linear was built with bias=False");
        return -1;
    }
    return param_assign(self->bias, value, "Linear.bias");
}

static PyObject *Linear_get_in_features(LinearObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->in_features);
}

static PyObject *Linear_get_out_features(LinearObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->out_features);
}

static PyObject *Linear_get_dtype(LinearObject *self, void *Py_UNUSED(closure))
{
    return (PyObject *)PyArray_DescrFromType(self->typenum);
}

static PyObject *Linear_repr(LinearObject *self)
{
    return PyUnicode_FromFormat("%s(in_features=%zd, out_features=%zd, bias=%s, dtype=%s)",
                                type_short_name(Py_TYPE(self)), self->in_features,
                                self->out_features, self->bias ? "True" : "False",
                                self->typenum == NPY_FLOAT ? "float32" : "float64");
}

/* ---- the type -------------------------------------------------------------- */

PyDoc_STRVAR(Linear_doc,
"Linear(in_features, out_features, bias=True, *, dtype=numpy.float32)\n"
"--\n\n"
"y = x @ weight.T + bias, as torch.nn.Linear.\n\n"
"weight [out_features, in_features] and bias [out_features] (or None) are NumPy\n"
"arrays sharing the object's memory: `m.weight -= lr * g` updates the layer in\n"
"place; assigning an array copies it in after checking its shape. The initial\n"
"values are torch's for the same seed (see myatt.manual_seed).");

PyDoc_STRVAR(Linear_forward_doc,
"forward($self, input, /)\n--\n\n"
"input[..., in_features] -> [..., out_features], in the layer's dtype.");

PyDoc_STRVAR(Linear_state_dict_doc,
"state_dict($self, /)\n--\n\n"
"{'weight': ..., 'bias': ...}: copies of the parameters (no 'bias' without one).");

PyDoc_STRVAR(Linear_load_state_dict_doc,
"load_state_dict($self, state_dict, strict=True)\n--\n\n"
"Copy parameters in from a mapping of arrays, tensors or array-likes.\n\n"
"Everything is checked before anything is written. With strict, missing or\n"
"unexpected keys raise KeyError. Returns (missing_keys, unexpected_keys).");

static PyMethodDef Linear_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))Linear_forward, METH_VARARGS | METH_KEYWORDS,
     Linear_forward_doc},
    {"state_dict", (PyCFunction)Linear_state_dict, METH_NOARGS, Linear_state_dict_doc},
    {"load_state_dict", (PyCFunction)(void (*)(void))Linear_load_state_dict,
     METH_VARARGS | METH_KEYWORDS, Linear_load_state_dict_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Linear_getset[] = {
    {"weight", (getter)Linear_get_weight, (setter)Linear_set_weight,
     "[out_features, in_features] array sharing the layer's memory", NULL},
    {"bias", (getter)Linear_get_bias, (setter)Linear_set_bias,
     "[out_features] array sharing the layer's memory, or None", NULL},
    {"in_features", (getter)Linear_get_in_features, NULL, "int", NULL},
    {"out_features", (getter)Linear_get_out_features, NULL, "int", NULL},
    {"dtype", (getter)Linear_get_dtype, NULL, "numpy.dtype: float32 or float64", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Linear_slots[] = {
    {Py_tp_new, Linear_new},
    {Py_tp_dealloc, Linear_dealloc},
    {Py_tp_call, Linear_call},
    {Py_tp_repr, Linear_repr},
    {Py_tp_doc, (void *)Linear_doc},
    {Py_tp_methods, Linear_methods},
    {Py_tp_getset, Linear_getset},
    {0, NULL},
};

PyType_Spec linear_type_spec = {
    .name = "myatt.Linear",
    .basicsize = sizeof(LinearObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Linear_slots,
};
