/* myatt.Linear: the extension type holding one linear layer's parameters.
 * Its computations are linear_ops.c's (shared with myatt.linear).  Exports
 * linear_type_spec (pieces.h) and linear_create (linear_type.h). */
#include "linear_type.h"

#include "checks.h"
#include "interop.h"
#include "linear_ops.h"
#include "pieces.h"
#include "state_dict.h"

#include <stddef.h>
#include <string.h>

#include <structmember.h>

/* ---- construction ---------------------------------------------------------- */

/* A new uninitialised parameter array; MemoryError naming it (not numpy's
 * ValueError) when its byte count overflows or it cannot be allocated. */
static PyArrayObject *new_param(int ndim, npy_intp *dims, int typenum, const char *what)
{
    return (PyArrayObject *)new_array(ndim, dims, typenum, what);
}

static PyObject *Linear_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames);

LinearObject *linear_create(myatt_state *st, PyTypeObject *type, Py_ssize_t in_features,
                            Py_ssize_t out_features, int bias, const myatt_dtype *dtype,
                            linear_init init)
{
    npy_intp wdims[2] = {out_features, in_features};
    LinearObject *self = (LinearObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = Linear_vectorcall;
    self->in_features = in_features;
    self->out_features = out_features;
    self->dtype = dtype;
    self->weight = new_param(2, wdims, dtype->typenum,
                             "Linear(): weight [out_features, in_features]");
    if (self->weight == NULL)
        goto fail;
    if (bias) {
        self->bias = new_param(1, wdims, dtype->typenum, "Linear(): bias [out_features]");
        if (self->bias == NULL)
            goto fail;
    }
    void *b = bias ? PyArray_DATA(self->bias) : NULL;
    if (init == LINEAR_INIT_ZEROS) {   /* object_from_state loads the parameters next */
        memset(PyArray_DATA(self->weight), 0, (size_t)PyArray_NBYTES(self->weight));
        if (b != NULL)
            memset(b, 0, (size_t)PyArray_NBYTES(self->bias));
    } else
        dtype->k->linear_init(&st->rng, PyArray_DATA(self->weight), b, out_features,
                              in_features);
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
    if (st == NULL)
        return NULL;
    PyObject *rest;
    int rebuild = rebuild_requested(st, kwds, &rest);
    if (rebuild < 0)
        return NULL;
    int ok = PyArg_ParseTupleAndKeywords(args, rest, "OO|O$O:Linear", kwlist,
                                         &in_obj, &out_obj, &bias_obj, &dtype_obj);
    if (rebuild)
        Py_DECREF(rest);
    if (!ok)
        return NULL;
    if (size_arg(in_obj, "Linear(): in_features", &in_features) < 0
            || size_arg(out_obj, "Linear(): out_features", &out_features) < 0)
        return NULL;
    if (dtype_obj != NULL && dtype_arg(dtype_obj, "Linear", &dtype) < 0)
        return NULL;
    int bias = PyObject_IsTrue(bias_obj);
    if (bias < 0)
        return NULL;
    return (PyObject *)linear_create(st, type, in_features, out_features, bias, dtype,
                                     rebuild ? LINEAR_INIT_ZEROS : LINEAR_INIT_TORCH);
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
    if (check_in_features("Linear: input", raw, self->in_features) < 0) {
        Py_DECREF(raw);
        return NULL;
    }
    PyArrayObject *x = cast_array(raw, self->dtype->typenum, 0);
    Py_DECREF(raw);
    if (x == NULL)
        return NULL;
    PyObject *out = linear_apply(x, cmat_of(self->weight),
                                 self->bias ? PyArray_DATA(self->bias) : NULL, self->dtype);
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

/* layer(x) and layer.forward(x): one positional argument goes straight to
 * linear_forward; any other call takes the tuple path above (same parsing and
 * messages as before). */
static PyObject *Linear_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 1 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return linear_forward((LinearObject *)self, args[0]);
    return call_with_tuple(self, args, nargs, kwnames, (ternaryfunc)Linear_call);
}

static PyObject *Linear_forward_fast(LinearObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 1 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return linear_forward(self, args[0]);
    return call_with_tuple((PyObject *)self, args, nargs, kwnames, (ternaryfunc)Linear_forward);
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
    return (PyObject *)PyArray_DescrFromType(self->dtype->typenum);
}

static PyObject *Linear_repr(LinearObject *self)
{
    return PyUnicode_FromFormat("%s(in_features=%zd, out_features=%zd, bias=%s, dtype=%s)",
                                type_short_name(Py_TYPE(self)), self->in_features,
                                self->out_features, self->bias ? "True" : "False",
                                self->dtype->name);
}

/* ---- backward --------------------------------------------------------------- */

PyDoc_STRVAR(Linear_backward_doc,
"backward($self, input, grad_output)\n--\n\n"
"Gradients of sum(self(input) * grad_output), as torch's autograd gives them:\n"
"{'input': [..., in_features], 'weight': [out_features, in_features],\n"
"'bias': [out_features] or None}, in the layer's dtype. grad_output has shape\n"
"input.shape[:-1] + (out_features,).");

static PyObject *Linear_backward(LinearObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "grad_output", NULL};
    PyObject *input_obj, *go_obj, *grads = NULL, *result = NULL;
    PyArrayObject *rx = NULL, *rg = NULL, *x = NULL, *g = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:Linear.backward", kwlist,
                                     &input_obj, &go_obj))
        return NULL;
    if ((rx = as_real_array(input_obj, "Linear.backward(): input")) == NULL
            || (rg = as_real_array(go_obj, "Linear.backward(): grad_output")) == NULL)
        goto fail;
    if (check_in_features("Linear.backward(): input", rx, self->in_features) < 0
            || check_grad_output_rows("Linear.backward()", rx, rg, self->out_features) < 0)
        goto fail;
    if ((x = cast_array(rx, self->dtype->typenum, 0)) == NULL
            || (g = cast_array(rg, self->dtype->typenum, 0)) == NULL
            || (grads = linear_grad_apply(x, g, cmat_of(self->weight), self->bias != NULL,
                                          self->dtype)) == NULL)
        goto fail;
    result = Py_BuildValue("{sOsOsO}", "input", PyTuple_GET_ITEM(grads, 0),
                           "weight", PyTuple_GET_ITEM(grads, 1),
                           "bias", PyTuple_GET_ITEM(grads, 2));
fail:
    Py_XDECREF(rx);
    Py_XDECREF(rg);
    Py_XDECREF(x);
    Py_XDECREF(g);
    Py_XDECREF(grads);
    return result;
}

/* ---- pickling, copying, from_torch, _repr_html_ (helpers in interop.c) ---- */

static PyObject *Linear_reduce(LinearObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *args = Py_BuildValue("(nnO)", self->in_features, self->out_features,
                                   self->bias ? Py_True : Py_False);
    PyObject *kwargs = Py_BuildValue("{ss}", "dtype", self->dtype->name);
    PyObject *r = args && kwargs ? reduce_object((PyObject *)self, args, kwargs) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return r;
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
"_from_state($type, args, kwargs, state_dict, /)\n--\n\n"
"cls(*args, **kwargs) without drawing from myatt's generator, then\n"
"load_state_dict(state_dict). What unpickling calls.");

PyDoc_STRVAR(Linear_from_torch_doc,
"from_torch($type, module, /)\n--\n\n"
"A Linear holding a copy of the weights of a torch.nn.Linear.\n\n"
"Sizes and bias from the module; dtype from its weight (torch.float32 or\n"
"torch.float64, else TypeError). myatt's generator is not drawn from.");

PyDoc_STRVAR(Linear_repr_html_doc,
"_repr_html_($self, /)\n--\n\n"
"An HTML table of the layer's parameters, for Jupyter.");

PyDoc_STRVAR(Linear_call_doc,
"__call__($self, input)\n--\n\n"
"input[..., in_features] -> [..., out_features], in the layer's dtype.");

/* ---- the type -------------------------------------------------------------- */

PyDoc_STRVAR(Linear_doc,
"Linear(in_features, out_features, bias=True, *, dtype='float32')\n"
"--\n\n"
"y = x @ weight.T + bias, as torch.nn.Linear.\n\n"
"weight [out_features, in_features] and bias [out_features] (or None) are NumPy\n"
"arrays sharing the object's memory: `m.weight -= lr * g` updates the layer in\n"
"place; assigning an array copies it in after checking its shape. The initial\n"
"values are torch's for the same seed (see myatt.manual_seed). dtype is\n"
"float32 or float64 (anything numpy.dtype() reads as one of them, or\n"
"torch.float32 / torch.float64).\n\n"
"Linear.from_torch(module) copies a torch.nn.Linear; pickle, copy.copy and\n"
"copy.deepcopy keep the dtype and the weights.");

PyDoc_STRVAR(Linear_forward_doc,
"forward($self, input)\n--\n\n"
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
    {"forward", (PyCFunction)(void (*)(void))Linear_forward_fast, METH_FASTCALL | METH_KEYWORDS,
     Linear_forward_doc},
    {"backward", (PyCFunction)(void (*)(void))Linear_backward, METH_VARARGS | METH_KEYWORDS,
     Linear_backward_doc},
    {"state_dict", (PyCFunction)Linear_state_dict, METH_NOARGS, Linear_state_dict_doc},
    {"load_state_dict", (PyCFunction)(void (*)(void))Linear_load_state_dict,
     METH_VARARGS | METH_KEYWORDS, Linear_load_state_dict_doc},
    {"__call__", (PyCFunction)(void (*)(void))Linear_call,
     METH_VARARGS | METH_KEYWORDS | METH_COEXIST, Linear_call_doc},
    {"__reduce__", (PyCFunction)Linear_reduce, METH_NOARGS, Linear_reduce_doc},
    {"_from_state", (PyCFunction)from_state_method, METH_VARARGS | METH_CLASS,
     Linear_from_state_doc},
    {"from_torch", (PyCFunction)Linear_from_torch, METH_O | METH_CLASS,
     Linear_from_torch_doc},
    {"_repr_html_", (PyCFunction)repr_html_method, METH_NOARGS, Linear_repr_html_doc},
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

static PyMemberDef Linear_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(LinearObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Linear_slots[] = {
    {Py_tp_members, Linear_members},
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
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = Linear_slots,
};

