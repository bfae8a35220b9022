/* myatt.MyAtt, the tutorial's attention module, as an extension type: its
 * construction, attributes, state_dict, pickling and method table.  It owns two
 * Linear objects (attn, attn_combine); its calls (forward, backward, vjp) are
 * tutorial_forward.c's. */
#include "tutorial_type.h"

#include "pieces.h"
#include "state_dict.h"

#include <stddef.h>

#include <structmember.h>


static PyObject *MyAtt_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"query_size", "key_size", "value_size1", "value_size2",
                             "output_size", "dtype", NULL};
    static const char *const what[] = {"MyAtt(): query_size", "MyAtt(): key_size",
                                       "MyAtt(): value_size1", "MyAtt(): value_size2",
                                       "MyAtt(): output_size"};
    PyObject *objs[5], *dtype_obj = NULL;
    Py_ssize_t sizes[5];
    const myatt_dtype *dtype = MYATT_DTYPE_DEFAULT;
    myatt_state *st = myatt_state_of_type(type);
    if (st == NULL || refuse_abstract(type) < 0)
        return NULL;
    PyObject *rest;
    int rebuild = rebuild_requested(st, kwds, &rest);
    if (rebuild < 0)
        return NULL;
    if (!rebuild && init_deferred(type, MyAtt_new))   /* its __init__ builds it */
        return deferred_placeholder(st, type, Py_BuildValue("(iiiii)", 0, 0, 0, 0, 0));
    int ok = PyArg_ParseTupleAndKeywords(args, rest, "OOOOO|$O:MyAtt", kwlist, &objs[0],
                                         &objs[1], &objs[2], &objs[3], &objs[4], &dtype_obj);
    if (rebuild)
        Py_DECREF(rest);
    if (!ok)
        return NULL;
    const linear_init init = rebuild ? LINEAR_INIT_ZEROS : LINEAR_INIT_TORCH;
    for (int i = 0; i < 5; i++)
        if (size_arg(objs[i], what[i], 0, &sizes[i]) < 0)
            return NULL;
    if (dtype_obj != NULL && dtype_arg(dtype_obj, "MyAtt", 1, &dtype) < 0)
        return NULL;
    Py_ssize_t qs = sizes[0], ks = sizes[1], v1 = sizes[2], v2 = sizes[3], os = sizes[4];
    if (ks > PY_SSIZE_T_MAX - qs || v2 > PY_SSIZE_T_MAX - qs) {
        PyErr_SetString(PyExc_MemoryError, "MyAtt(): sizes too large to allocate");
        return NULL;
    }
    MyAttObject *self = (MyAttObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = MyAtt_vectorcall;
    self->training = 1;
    self->query_size = qs;
    self->key_size = ks;
    self->value_size1 = v1;
    self->value_size2 = v2;
    self->output_size = os;
    self->dtype = dtype;
    /* torch's order of draws: attn's weight and bias, then attn_combine's. */
    self->attn = linear_create(st, st->linear_type, qs + ks, v1, 1, self->dtype, init, 0,
                               "MyAtt(): attn.");
    if (self->attn == NULL)
        goto fail;
    self->attn_combine = linear_create(st, st->linear_type, qs + v2, os, 1, self->dtype, init, 0,
                                       "MyAtt(): attn_combine.");
    if (self->attn_combine == NULL)
        goto fail;
    self->init.state = rebuild ? INIT_DONE : INIT_PENDING;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static void MyAtt_dealloc(MyAttObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(self->attn);
    Py_XDECREF(self->attn_combine);
    Py_XDECREF(self->init.retired);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* ---- state_dict ------------------------------------------------------------ */

static const char *const tutorial_keys[] = {"attn.weight", "attn.bias",
                                         "attn_combine.weight", "attn_combine.bias"};

static PyObject *MyAtt_state_dict(MyAttObject *self, PyObject *Py_UNUSED(ignored))
{
    PyArrayObject *params[] = {self->attn->weight, self->attn->bias,
                               self->attn_combine->weight, self->attn_combine->bias};
    return state_dict_build(tutorial_keys, params, 4);
}

static PyObject *MyAtt_load_state_dict(MyAttObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"state_dict", "strict", NULL};
    PyObject *d;
    int strict = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:MyAtt.load_state_dict", kwlist,
                                     &d, &strict)
            || module_built((PyObject *)self, "MyAtt.load_state_dict()") < 0)
        return NULL;
    PyArrayObject *params[] = {self->attn->weight, self->attn->bias,
                               self->attn_combine->weight, self->attn_combine->bias};
    return state_dict_load(d, strict, tutorial_keys, params, 4, "MyAtt");
}

/* ---- attributes ------------------------------------------------------------ */

static PyObject *MyAtt_get_attn(MyAttObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->attn);
}

static PyObject *MyAtt_get_attn_combine(MyAttObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->attn_combine);
}

static PyObject *MyAtt_get_size(MyAttObject *self, void *closure)
{
    return PyLong_FromSsize_t(*(Py_ssize_t *)((char *)self + (size_t)closure));
}

static PyObject *MyAtt_get_dtype(MyAttObject *self, void *Py_UNUSED(closure))
{
    return (PyObject *)PyArray_DescrFromType(self->dtype->typenum);
}

static PyObject *MyAtt_repr(MyAttObject *self)
{
    return PyUnicode_FromFormat("%s(query_size=%zd, key_size=%zd, value_size1=%zd, "
                                "value_size2=%zd, output_size=%zd, dtype=%s)",
                                type_short_name(Py_TYPE(self)), self->query_size,
                                self->key_size, self->value_size1, self->value_size2,
                                self->output_size, self->dtype->name);
}

/* ---- pickling, copying, from_torch, _repr_html_ (helpers in interop.c) ---- */

static PyObject *MyAtt_reduce(MyAttObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *args = Py_BuildValue("(nnnnn)", self->query_size, self->key_size,
                                   self->value_size1, self->value_size2, self->output_size);
    return reduce_object((PyObject *)self, args, self->dtype);   /* args stolen */
}

static PyObject *MyAtt_from_torch(PyTypeObject *cls, PyObject *module)
{
    return from_torch_with(cls, module, "tutorial_spec");
}

PyDoc_STRVAR(MyAtt_reduce_doc,
"__reduce__($self, /)\n--\n\n"
"Pickle and copy support: the five sizes, the dtype and a copy of the\n"
"parameters. Unpickling and copy.copy/deepcopy give an independent MyAtt with\n"
"equal weights and do not draw from myatt's generator.");

PyDoc_STRVAR(MyAtt_from_state_doc,
"_from_state($type, args, kwargs, state_dict, modes=None, /)\n--\n\n"
"cls(*args, **kwargs) without drawing from myatt's generator, then\n"
"load_state_dict(state_dict), and the modes (training) of the module and its\n"
"sub-modules from `modes` ({'': bool, 'attn': bool, ...}). What unpickling calls.");

PyDoc_STRVAR(MyAtt_from_torch_doc,
"from_torch($type, module, /)\n--\n\n"
"A MyAtt holding a copy of the weights of the tutorial's torch MyAtt.\n"
"\n"
"myatt's generator is not drawn from.\n"
"\n"
"Parameters\n"
"----------\n"
"module : torch.nn.Module\n"
"    The tutorial's MyAtt: the sizes come from its query_size, key_size,\n"
"    value_size1, value_size2 and output_size attributes, the weights from its\n"
"    ``state_dict()`` (attn.weight, attn.bias, attn_combine.weight,\n"
"    attn_combine.bias), the dtype from attn.weight.\n"
"\n"
"Returns\n"
"-------\n"
"MyAtt\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `module` lacks those attributes, or attn.weight is neither\n"
"    torch.float32 nor torch.float64.\n"
"\n"
"See Also\n"
"--------\n"
"compare : check the two against each other.\n"
"\n"
"Examples\n"
"--------\n"
">>> import torch\n"
">>> class TorchAtt(torch.nn.Module):  # what from_torch reads of the tutorial's\n"
"...     def __init__(self):\n"
"...         super().__init__()\n"
"...         self.query_size, self.key_size = 3, 2\n"
"...         self.value_size1, self.value_size2, self.output_size = 4, 5, 6\n"
"...         self.attn = torch.nn.Linear(5, 4)\n"
"...         self.attn_combine = torch.nn.Linear(8, 6)\n"
">>> t = TorchAtt()\n"
">>> m = myatt.MyAtt.from_torch(t)\n"
">>> m.output_size, m.dtype\n"
"(6, dtype('float32'))\n"
">>> bool((m.attn.weight == t.attn.weight.detach().numpy()).all())\n"
"True");

PyDoc_STRVAR(MyAtt_repr_html_doc,
"_repr_html_($self, /)\n--\n\n"
"An HTML table of the sizes and parameters, for Jupyter.");


/* ---- the type -------------------------------------------------------------- */

PyDoc_STRVAR(MyAtt_doc,
"MyAtt(query_size, key_size, value_size1, value_size2, output_size, *, dtype='float32')\n--\n\n"
"The attention module of the tutorial, exact to its PyTorch original.\n"
"\n"
"Computes, from batch item 0 of `Q` and `K` and the single item of `V`::\n"
"\n"
"    attn_weights = softmax(attn(cat(Q[0], K[0])), dim=-1)    # (S, value_size1)\n"
"    attn_applied = attn_weights @ V[0]                       # (S, value_size2)\n"
"    output = attn_combine(cat(Q[0], attn_applied))[None]     # (1, S, output_size)\n"
"\n"
"The initial weights are torch's for the same seed (see `manual_seed`).\n"
"Calling the module is `forward`.\n"
"\n"
"Parameters\n"
"----------\n"
"query_size, key_size : int\n"
"    Feature sizes of `Q` and `K`, >= 0.\n"
"value_size1, value_size2 : int\n"
"    The shape of ``V[0]``: value_size1 is also the number of attention\n"
"    weights per row, value_size2 the size of the attended vector.\n"
"output_size : int\n"
"    Feature size of the output.\n"
"dtype : str, numpy.dtype, type or torch.dtype, optional\n"
"    float32 (the default), float64, float16 or bfloat16 (ml_dtypes'; the name\n"
"    'bfloat16' imports it): anything ``numpy.dtype()`` reads as one of them, or\n"
"    a torch dtype (``torch.bfloat16``). The parameters and every result are of\n"
"    this dtype. A half-precision module computes as torch's does: the seed's\n"
"    ops one after the other (cat, `linear`, `softmax`, `bmm`, cat, `linear`),\n"
"    each myatt's function of the dtype (float32 arithmetic, its result\n"
"    rounded once), its initial weights torch's for that dtype.\n"
"\n"
"Attributes\n"
"----------\n"
"attn : Linear\n"
"    ``Linear(query_size + key_size, value_size1)``: the scores.\n"
"attn_combine : Linear\n"
"    ``Linear(query_size + value_size2, output_size)``: the output.\n"
"query_size, key_size, value_size1, value_size2, output_size : int\n"
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
"compare : check a MyAtt against the torch module it came from.\n"
"vjp : the forward pass with its pullback.\n"
"\n"
"Notes\n"
"-----\n"
"``MyAtt.from_torch(module)`` copies the tutorial's torch module and\n"
"``myatt.compare(module, Q, K, V)`` checks the two against each other; pickle,\n"
"copy.copy and copy.deepcopy keep the dtype and the weights.\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.manual_seed(0)\n"
">>> m = myatt.MyAtt(3, 2, 4, 5, 6)\n"
">>> m  # doctest: +NORMALIZE_WHITESPACE\n"
"MyAtt(query_size=3, key_size=2, value_size1=4, value_size2=5,\n"
"      output_size=6, dtype=float32)\n"
">>> m.attn\n"
"Linear(in_features=5, out_features=4, bias=True, dtype=float32)\n"
">>> output, attn_weights = m(np.ones((1, 7, 3)), np.ones((1, 7, 2)), np.ones((1, 4, 5)))\n"
">>> output.shape, attn_weights.shape, output.dtype\n"
"((1, 7, 6), (7, 4), dtype('float32'))");


PyDoc_STRVAR(MyAtt_state_dict_doc,
"state_dict($self, /)\n--\n\n"
"Copies of the parameters under torch's keys, as torch's state_dict.\n"
"\n"
"Returns\n"
"-------\n"
"dict\n"
"    ``'attn.weight'``, ``'attn.bias'``, ``'attn_combine.weight'`` and\n"
"    ``'attn_combine.bias'``: new arrays, not views of the module.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.MyAtt(3, 2, 4, 5, 6)\n"
">>> {k: v.shape for k, v in m.state_dict().items()}  # doctest: +NORMALIZE_WHITESPACE\n"
"{'attn.weight': (4, 5), 'attn.bias': (4,),\n"
" 'attn_combine.weight': (6, 8), 'attn_combine.bias': (6,)}");

PyDoc_STRVAR(MyAtt_load_state_dict_doc,
"load_state_dict($self, state_dict, strict=True)\n--\n\n"
"Copy parameters in from a mapping under torch's keys.\n"
"\n"
"A torch ``state_dict()`` as it comes, NumPy arrays or array-likes. Everything\n"
"is checked before anything is written: on an error the module is unchanged.\n"
"\n"
"Parameters\n"
"----------\n"
"state_dict : mapping\n"
"    ``'attn.weight'``, ``'attn.bias'``, ``'attn_combine.weight'``,\n"
"    ``'attn_combine.bias'`` to arrays of the parameters' shapes.\n"
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
">>> a, b = myatt.MyAtt(3, 2, 4, 5, 6), myatt.MyAtt(3, 2, 4, 5, 6)\n"
">>> b.load_state_dict(a.state_dict())\n"
"([], [])\n"
">>> bool((a.attn.weight == b.attn.weight).all())\n"
"True\n"
">>> b.load_state_dict({'attn.bias': np.zeros(4), 'extra': 1}, strict=False)\n"
"(['attn.weight', 'attn_combine.weight', 'attn_combine.bias'], ['extra'])");

static PyMethodDef MyAtt_methods[] = {
    MODULE_METHODS(MyAtt),
    {"backward", (PyCFunction)(void (*)(void))MyAtt_backward, METH_VARARGS | METH_KEYWORDS,
     MyAtt_backward_doc},
    {NULL, NULL, 0, NULL},
};

#define SIZE_ATTR(name, doc) \
    {#name, (getter)MyAtt_get_size, NULL, doc, (void *)offsetof(MyAttObject, name)}

static PyGetSetDef MyAtt_getset[] = {
    {"attn", (getter)MyAtt_get_attn, NULL,
     "The score layer, Linear(query_size + key_size, value_size1) (the module's own).", NULL},
    {"attn_combine", (getter)MyAtt_get_attn_combine, NULL,
     "The output layer, Linear(query_size + value_size2, output_size) (the module's own).",
     NULL},
    SIZE_ATTR(query_size, "Feature size of Q (int): Q.shape[2]."),
    SIZE_ATTR(key_size, "Feature size of K (int): K.shape[2]."),
    SIZE_ATTR(value_size1, "Rows of V[0] (int): the attention weights per row."),
    SIZE_ATTR(value_size2, "Columns of V[0] (int): the size of the attended vector."),
    SIZE_ATTR(output_size, "Feature size of the output (int): output.shape[2]."),
    {"dtype", (getter)MyAtt_get_dtype, NULL,
     "The dtype of the parameters and the results: float32, float64, float16 or bfloat16.", NULL},
    MODULE_MODE_GETSET,
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef MyAtt_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(MyAttObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot MyAtt_slots[] = {
    {Py_tp_members, MyAtt_members},
    {Py_tp_new, MyAtt_new},
    {Py_tp_init, module_init},
    {Py_tp_dealloc, MyAtt_dealloc},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, MyAtt_repr},
    {Py_tp_doc, (void *)MyAtt_doc},
    {Py_tp_methods, MyAtt_methods},
    {Py_tp_getset, MyAtt_getset},
    {0, NULL},
};

PyType_Spec tutorial_type_spec = {
    .name = "myatt.MyAtt",
    .basicsize = sizeof(MyAttObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = MyAtt_slots,
};
