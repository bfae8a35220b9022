/* myatt.Linear: the extension type holding one linear layer's parameters: its
 * construction, attributes, state_dict, pickling and method table.  Its calls
 * (forward, backward, vjp) are linear_forward.c's.  Exports linear_type_spec
 * (pieces.h) and linear_create (linear_type.h). */
#include "linear_type.h"

#include "interop.h"
#include "pieces.h"
#include "state_dict.h"

#include <stddef.h>
#include <string.h>

#include <structmember.h>

DTYPE_KERNELS(linear_init);

/* ---- construction ---------------------------------------------------------- */

/* nn.Linear's initial weight [out, in] (C-ordered) and bias [out] (or NULL) in
 * `dt`, drawn from the module's generator as torch draws them */
static void draw(myatt_state *st, const myatt_dtype *dt, void *w, void *b, Py_ssize_t out,
                 Py_ssize_t in)
{
    if (dtype_is_half(dt))
        linear_init_half(&st->rng, w, b, out, in, dtype_half_kind(dt));
    else
        linear_init_kernels[dt->kernel](&st->rng, w, b, out, in);
}

LinearObject *linear_create(myatt_state *st, PyTypeObject *type, Py_ssize_t in_features,
                            Py_ssize_t out_features, int bias, const myatt_dtype *dtype,
                            linear_init init, int transposed, const char *name)
{
    char what_w[128], what_b[128];   /* a MemoryError names the parameter */
    snprintf(what_w, sizeof what_w, "%sweight [out_features, in_features]", name);
    snprintf(what_b, sizeof what_b, "%sbias [out_features]", name);
    npy_intp wdims[2] = {out_features, in_features};
    LinearObject *self = (LinearObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = Linear_vectorcall;
    self->training = 1;
    self->in_features = in_features;
    self->out_features = out_features;
    self->dtype = dtype;
    self->weight = transposed
                   ? new_transposed_array(out_features, in_features, dtype->typenum, what_w)
                   : (PyArrayObject *)new_array(2, wdims, dtype->typenum, what_w);
    if (self->weight == NULL)
        goto fail;
    if (bias) {
        self->bias = (PyArrayObject *)new_array(1, wdims, dtype->typenum, what_b);
        if (self->bias == NULL)
            goto fail;
    }
    void *b = bias ? PyArray_DATA(self->bias) : NULL;
    if (init == LINEAR_INIT_ZEROS) {   /* object_from_state loads the parameters next */
        memset(PyArray_DATA(self->weight), 0, (size_t)PyArray_NBYTES(self->weight));
        if (b != NULL)
            memset(b, 0, (size_t)PyArray_NBYTES(self->bias));
    } else if (!transposed) {
        draw(st, dtype, PyArray_DATA(self->weight), b, out_features, in_features);
    } else {   /* drawn in torch's order into a buffer, then stored */
        void *w = PyMem_Malloc((size_t)PyArray_NBYTES(self->weight) + 1);
        if (w == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        draw(st, dtype, w, b, out_features, in_features);
        store_rows(self->weight, w);
        PyMem_Free(w);
    }
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
    const myatt_dtype *dtype = MYATT_DTYPE_DEFAULT;
    myatt_state *st = myatt_state_of_type(type);
    if (st == NULL || refuse_abstract(type) < 0)
        return NULL;
    PyObject *rest;
    int rebuild = rebuild_requested(st, kwds, &rest);
    if (rebuild < 0)
        return NULL;
    if (!rebuild && init_deferred(type, Linear_new))   /* its __init__ builds it */
        return deferred_placeholder(st, type, Py_BuildValue("(ii)", 0, 0));
    int ok = PyArg_ParseTupleAndKeywords(args, rest, "OO|O$O:Linear", kwlist,
                                         &in_obj, &out_obj, &bias_obj, &dtype_obj);
    if (rebuild)
        Py_DECREF(rest);
    if (!ok)
        return NULL;
    if (size_arg(in_obj, "Linear(): in_features", 0, &in_features) < 0
            || size_arg(out_obj, "Linear(): out_features", 0, &out_features) < 0)
        return NULL;
    if (dtype_obj != NULL && dtype_arg(dtype_obj, "Linear", 1, &dtype) < 0)
        return NULL;
    int bias = PyObject_IsTrue(bias_obj);
    if (bias < 0)
        return NULL;
    LinearObject *self = linear_create(st, type, in_features, out_features, bias, dtype,
                                       rebuild ? LINEAR_INIT_ZEROS : LINEAR_INIT_TORCH, 0,
                                       "Linear(): ");
    if (self != NULL)
        self->init.state = rebuild ? INIT_DONE : INIT_PENDING;
    return (PyObject *)self;
}

static void Linear_dealloc(LinearObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(self->weight);
    Py_XDECREF(self->bias);
    Py_XDECREF(self->init.retired);
    tp->tp_free(self);
    Py_DECREF(tp);
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
                                     &d, &strict)
            || module_built((PyObject *)self, "Linear.load_state_dict()") < 0)
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
    return (PyObject *)PyArray_DescrFromType(self->dtype->typenum);
}

static PyObject *Linear_repr(LinearObject *self)
{
    return PyUnicode_FromFormat("%s(in_features=%zd, out_features=%zd, bias=%s, dtype=%s)",
                                type_short_name(Py_TYPE(self)), self->in_features,
                                self->out_features, self->bias ? "True" : "False",
                                self->dtype->name);
}

/* ---- pickling, copying, from_torch, _repr_html_ (helpers in interop.c) ---- */

static PyObject *Linear_reduce(LinearObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *args = Py_BuildValue("(nnO)", self->in_features, self->out_features,
                                   self->bias ? Py_True : Py_False);
    return reduce_object((PyObject *)self, args, self->dtype);   /* args stolen */
}

static PyObject *Linear_from_torch(PyTypeObject *cls, PyObject *module)
{
    return from_torch_with(cls, module, "linear_spec");
}

PyDoc_STRVAR(Linear_reduce_doc,
"__reduce__($self, /)\n--\n\n"
"Pickle and copy support: the sizes, the dtype and a copy of the parameters.\n"
"Unpickling and copy.copy/deepcopy give an independent Linear with equal\n"
"weights and do not draw from myatt's generator.");

PyDoc_STRVAR(Linear_from_state_doc,
"_from_state($type, args, kwargs, state_dict, modes=None, /)\n--\n\n"
"cls(*args, **kwargs) without drawing from myatt's generator, then\n"
"load_state_dict(state_dict), and the modes (training) of the module and its\n"
"sub-modules from `modes` ({'': bool, 'attn': bool, ...}). What unpickling calls.");

PyDoc_STRVAR(Linear_from_torch_doc,
"from_torch($type, module, /)\n--\n\n"
"A Linear holding a copy of the weights of a torch.nn.Linear.\n"
"\n"
"myatt's generator is not drawn from.\n"
"\n"
"Parameters\n"
"----------\n"
"module : torch.nn.Linear\n"
"    Sizes and bias from the module; the dtype from its weight.\n"
"\n"
"Returns\n"
"-------\n"
"Linear\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `module` is not a torch.nn.Linear, or its weight is neither\n"
"    torch.float32 nor torch.float64.\n"
"\n"
"Examples\n"
"--------\n"
">>> import torch\n"
">>> t = torch.nn.Linear(3, 2, dtype=torch.float64)\n"
">>> m = myatt.Linear.from_torch(t)\n"
">>> m\n"
"Linear(in_features=3, out_features=2, bias=True, dtype=float64)\n"
">>> bool((m.weight == t.weight.detach().numpy()).all())\n"
"True");

PyDoc_STRVAR(Linear_repr_html_doc,
"_repr_html_($self, /)\n--\n\n"
"An HTML table of the layer's parameters, for Jupyter.");


/* ---- the type -------------------------------------------------------------- */

PyDoc_STRVAR(Linear_doc,
"Linear(in_features, out_features, bias=True, *, dtype='float32')\n--\n\n"
"A linear layer, ``y = x @ weight.T + bias``, as torch.nn.Linear.\n"
"\n"
"The initial weights are torch's for the same seed: after\n"
"``myatt.manual_seed(s)`` a new Linear holds what ``torch.manual_seed(s)`` and\n"
"``torch.nn.Linear`` give. Calling the layer is `forward`.\n"
"\n"
"Parameters\n"
"----------\n"
"in_features : int\n"
"    Size of each input row (the last axis of the input), >= 0.\n"
"out_features : int\n"
"    Size of each output row, >= 0.\n"
"bias : bool, optional\n"
"    Whether the layer has a bias (default True).\n"
"dtype : str, numpy.dtype, type or torch.dtype, optional\n"
"    float32 (the default), float64, float16 or bfloat16 (ml_dtypes'; the name\n"
"    'bfloat16' imports it): anything ``numpy.dtype()`` reads as one of them, or\n"
"    a torch dtype (``torch.bfloat16``). The parameters and every result are of\n"
"    this dtype. A half-precision layer computes as torch's does: its products\n"
"    are `linear`'s (float32 sums, each result rounded once), its initial\n"
"    weights torch's for that dtype.\n"
"\n"
"Attributes\n"
"----------\n"
"weight : ndarray, shape (out_features, in_features)\n"
"    Shares the layer's memory: ``m.weight -= lr * g`` updates the layer in\n"
"    place; assigning an array copies it in after checking its shape.\n"
"bias : ndarray, shape (out_features,), or None\n"
"    The same, None without a bias.\n"
"in_features, out_features : int\n"
"dtype : numpy.dtype\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If a size is not an integer, or `dtype` is none of those (bfloat16:\n"
"    also without ml_dtypes installed).\n"
"ValueError\n"
"    If a size is negative.\n"
"MemoryError\n"
"    If the parameters cannot be allocated.\n"
"\n"
"See Also\n"
"--------\n"
"linear : the function.\n"
"MyAtt : the attention module built of two of them.\n"
"\n"
"Notes\n"
"-----\n"
"``Linear.from_torch(module)`` copies a torch.nn.Linear; pickle, copy.copy and\n"
"copy.deepcopy keep the dtype and the weights.\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.manual_seed(0)\n"
">>> m = myatt.Linear(3, 4)\n"
">>> m\n"
"Linear(in_features=3, out_features=4, bias=True, dtype=float32)\n"
">>> m.weight.shape, m.bias.shape, m.dtype\n"
"((4, 3), (4,), dtype('float32'))\n"
">>> m.weight[...] = 0.5\n"
">>> m.bias[...] = 0\n"
">>> m(np.ones((2, 3)))\n"
"array([[1.5, 1.5, 1.5, 1.5],\n"
"       [1.5, 1.5, 1.5, 1.5]], dtype=float32)\n"
">>> myatt.Linear(3, 4, bias=False, dtype='float64').bias is None\n"
"True");


PyDoc_STRVAR(Linear_state_dict_doc,
"state_dict($self, /)\n--\n\n"
"Copies of the parameters, by name, as torch's state_dict.\n"
"\n"
"Returns\n"
"-------\n"
"dict\n"
"    ``{'weight': ndarray, 'bias': ndarray}`` (no ``'bias'`` without one): new\n"
"    arrays, not views of the layer.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.Linear(3, 2)\n"
">>> sd = m.state_dict()\n"
">>> sorted(sd), sd['weight'].shape\n"
"(['bias', 'weight'], (2, 3))\n"
">>> sorted(myatt.Linear(3, 2, bias=False).state_dict())\n"
"['weight']");

PyDoc_STRVAR(Linear_load_state_dict_doc,
"load_state_dict($self, state_dict, strict=True)\n--\n\n"
"Copy parameters in from a mapping, as torch's load_state_dict.\n"
"\n"
"Everything is checked before anything is written: on an error the layer is\n"
"unchanged.\n"
"\n"
"Parameters\n"
"----------\n"
"state_dict : mapping\n"
"    Names (``'weight'``, ``'bias'``) to arrays, torch tensors or array-likes\n"
"    of the parameters' shapes.\n"
"strict : bool, optional\n"
"    If true (the default), missing or unexpected keys raise KeyError; else\n"
"    they are returned.\n"
"\n"
"Returns\n"
"-------\n"
"missing_keys, unexpected_keys : list of str\n"
"\n"
"Raises\n"
"------\n"
"KeyError\n"
"    With `strict`, if a key is missing or unexpected.\n"
"TypeError\n"
"    If `state_dict` is not a mapping, or a value is not an array of real\n"
"    numbers.\n"
"ValueError\n"
"    If a value has the wrong shape.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.Linear(3, 2)\n"
">>> m.load_state_dict({'weight': np.ones((2, 3)), 'bias': np.zeros(2)})\n"
"([], [])\n"
">>> m.load_state_dict({'weight': np.ones((2, 3))}, strict=False)\n"
"(['bias'], [])\n"
">>> m(np.ones(3))\n"
"array([3., 3.], dtype=float32)");

static PyMethodDef Linear_methods[] = {
    MODULE_METHODS(Linear),
    {"backward", (PyCFunction)(void (*)(void))Linear_backward, METH_VARARGS | METH_KEYWORDS,
     Linear_backward_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Linear_getset[] = {
    {"weight", (getter)Linear_get_weight, (setter)Linear_set_weight,
     "The weights, shape (out_features, in_features): a view of the layer's memory\n"
     "(assigning an array copies it in after checking its shape).", NULL},
    {"bias", (getter)Linear_get_bias, (setter)Linear_set_bias,
     "The bias, shape (out_features,): a view of the layer's memory; None without one.", NULL},
    {"in_features", (getter)Linear_get_in_features, NULL,
     "Size of each input row (int): the last axis of the input.", NULL},
    {"out_features", (getter)Linear_get_out_features, NULL,
     "Size of each output row (int): the last axis of the result.", NULL},
    {"dtype", (getter)Linear_get_dtype, NULL,
     "The dtype of the parameters and the results: float32, float64, float16 or bfloat16.",
     NULL},
    MODULE_MODE_GETSET,
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Linear_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(LinearObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Linear_slots[] = {
    {Py_tp_members, Linear_members},
    {Py_tp_new, Linear_new},
    {Py_tp_init, module_init},
    {Py_tp_dealloc, Linear_dealloc},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, Linear_repr},
    {Py_tp_doc, (void *)Linear_doc},
    {Py_tp_methods, Linear_methods},
    {Py_tp_getset, Linear_getset},
    {0, NULL},
};

PyType_Spec linear_type_spec = {
    .name = "myatt.Linear",
    .basicsize = sizeof(LinearObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = Linear_slots,
};

