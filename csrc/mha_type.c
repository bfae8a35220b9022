/* myatt.MultiheadAttention, torch.nn.MultiheadAttention as an extension type:
 * its construction, parameters and attributes, state_dict, pickling and method
 * table.  It owns its input-projection parameters and a Linear (out_proj); its
 * calls (forward, vjp) are mha_forward.c's. */
#include "mha_type.h"

#include "pieces.h"
#include "state_dict.h"

#include <stddef.h>
#include <string.h>

#include <structmember.h>

DTYPE_KERNELS(xavier_uniform);
DTYPE_KERNELS(xavier_normal);

static const char *const param_names[P_COUNT] = {
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
    "in_proj_bias", "bias_k", "bias_v",
};


/* ---- construction ---------------------------------------------------------- */

static int flag_arg(PyObject *obj, int *flag)
{
    if (obj == NULL)
        return 0;
    *flag = PyObject_IsTrue(obj);
    return *flag < 0 ? -1 : 0;
}

/* kdim / vdim: None (embed_dim) or a size. */
static int dim_arg(PyObject *obj, const char *what, Py_ssize_t embed_dim, Py_ssize_t *dim)
{
    *dim = embed_dim;
    return obj == NULL || obj == Py_None ? 0 : size_arg(obj, what, 0, dim);
}

/* A parameter of zeros.  The projections' weights (the input projections
 * here, out_proj's in linear_create) are stored transposed
 * (new_transposed_array): the attribute is a Fortran-ordered [rows, cols]
 * view.  A product of one token with a weight, x @ w^T, then reads w^T's
 * rows in place as they lie in memory (gemm's one-row loop,
 * gemm_small_tmpl.h), where a C-ordered weight is transposed in registers:
 * one token's [3E, E] in-projection at E = 512, float32, one Zen 5 core:
 * 40 -> 26 us.  Larger products pack the weight either way; every product
 * gives the same bits in both layouts.  A half-precision module's are
 * C-ordered, as torch's: its products run torch's GEMM orders, which follow
 * the operands' layouts (gemm_cpublas.h). */
static PyArrayObject *new_param(int ndim, npy_intp *dims, const myatt_dtype *dt, int p)
{
    char what[64];
    snprintf(what, sizeof what, OWNER "(): %s", param_names[p]);
    if (p <= P_V && !dtype_is_half(dt))
        return new_transposed_array(dims[0], dims[1], dt->typenum, what);
    PyArrayObject *a = (PyArrayObject *)new_array(ndim, dims, dt->typenum, what);
    if (a != NULL)
        memset(PyArray_DATA(a), 0, (size_t)PyArray_NBYTES(a));
    return a;
}

/* xavier_uniform_ of an input-projection weight: drawn in torch's order
 * (row-major over [rows, cols]) into a buffer, then stored. */
static int xavier_uniform_param(mt19937 *rng, const myatt_dtype *dt, PyArrayObject *w)
{
    void *buf = PyMem_Malloc((size_t)PyArray_NBYTES(w) + 1);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (dtype_is_half(dt))
        xavier_uniform_half(rng, buf, PyArray_DIM(w, 0), PyArray_DIM(w, 1), dtype_half_kind(dt));
    else
        xavier_uniform_kernels[dt->kernel](rng, buf, PyArray_DIM(w, 0), PyArray_DIM(w, 1));
    store_rows(w, buf);
    PyMem_Free(buf);
    return 0;
}

static PyObject *MHA_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"embed_dim", "num_heads", "dropout", "bias", "add_bias_kv",
                             "add_zero_attn", "kdim", "vdim", "batch_first", "dtype", NULL};
    PyObject *e_obj, *h_obj, *dropout_obj = NULL, *bias_obj = NULL, *bkv_obj = NULL;
    PyObject *zero_obj = NULL, *kdim_obj = NULL, *vdim_obj = NULL, *bf_obj = NULL;
    PyObject *dtype_obj = NULL;
    const myatt_dtype *dtype = MYATT_DTYPE_DEFAULT;
    myatt_state *st = myatt_state_of_type(type);
    if (st == NULL || refuse_abstract(type) < 0)
        return NULL;
    PyObject *rest;
    int rebuild = rebuild_requested(st, kwds, &rest);
    if (rebuild < 0)
        return NULL;
    if (!rebuild && init_deferred(type, MHA_new))   /* its __init__ builds it */
        return deferred_placeholder(st, type, Py_BuildValue("(ii)", 1, 1));
    int ok = PyArg_ParseTupleAndKeywords(args, rest, "OO|OOOOOOO$O:" OWNER, kwlist, &e_obj,
                                         &h_obj, &dropout_obj, &bias_obj, &bkv_obj, &zero_obj,
                                         &kdim_obj, &vdim_obj, &bf_obj, &dtype_obj);
    if (rebuild)
        Py_DECREF(rest);
    if (!ok)
        return NULL;
    Py_ssize_t E, H, kdim, vdim;
    int bias = 1, add_bias_kv = 0, add_zero_attn = 0, batch_first = 0;
    double dropout = 0.0;
    if (size_arg(e_obj, OWNER "(): embed_dim", 1, &E) < 0
            || size_arg(h_obj, OWNER "(): num_heads", 1, &H) < 0)
        return NULL;
    if (E % H != 0) {
        PyErr_Format(PyExc_ValueError, OWNER "(): embed_dim must be divisible by num_heads, "
                     "got embed_dim=%zd and num_heads=%zd", E, H);
        return NULL;
    }
    if ((dropout_obj != NULL && probability_arg(dropout_obj, OWNER "(): dropout", &dropout) < 0)
            || flag_arg(bias_obj, &bias) < 0
            || flag_arg(bkv_obj, &add_bias_kv) < 0 || flag_arg(zero_obj, &add_zero_attn) < 0
            || dim_arg(kdim_obj, OWNER "(): kdim", E, &kdim) < 0
            || dim_arg(vdim_obj, OWNER "(): vdim", E, &vdim) < 0
            || flag_arg(bf_obj, &batch_first) < 0)
        return NULL;
    if (dtype_obj != NULL && dtype_arg(dtype_obj, OWNER, 1, &dtype) < 0)
        return NULL;
    if (E > PY_SSIZE_T_MAX / 3) {
        PyErr_SetString(PyExc_MemoryError, OWNER "(): embed_dim too large to allocate");
        return NULL;
    }

    MHAObject *self = (MHAObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = MHA_vectorcall;
    self->training = 1;
    self->embed_dim = E;
    self->num_heads = H;
    self->head_dim = E / H;
    self->kdim = kdim;
    self->vdim = vdim;
    self->batch_first = batch_first;
    self->add_zero_attn = add_zero_attn;
    self->bias = bias;
    self->dropout = dropout;
    self->dtype = dtype;
    const int packed = kdim == E && vdim == E;
    npy_intp in_dims[2] = {3 * E, E}, q_dims[2] = {E, E}, k_dims[2] = {E, kdim};
    npy_intp v_dims[2] = {E, vdim}, b_dims[1] = {3 * E}, kv_dims[3] = {1, 1, E};
    if (packed ? (self->param[P_IN] = new_param(2, in_dims, dtype, P_IN)) == NULL
               : (self->param[P_Q] = new_param(2, q_dims, dtype, P_Q)) == NULL
                 || (self->param[P_K] = new_param(2, k_dims, dtype, P_K)) == NULL
                 || (self->param[P_V] = new_param(2, v_dims, dtype, P_V)) == NULL)
        goto fail;
    if (bias && (self->param[P_IN_BIAS] = new_param(1, b_dims, dtype, P_IN_BIAS)) == NULL)
        goto fail;
    if (add_bias_kv && ((self->param[P_BIAS_K] = new_param(3, kv_dims, dtype, P_BIAS_K)) == NULL
                        || (self->param[P_BIAS_V] = new_param(3, kv_dims, dtype, P_BIAS_V))
                           == NULL))
        goto fail;
    /* torch's draws: out_proj's Linear init (weight, bias), then _reset_parameters:
     * xavier_uniform_ of the input projections, zeros for in_proj_bias and
     * out_proj.bias, xavier_normal_ of bias_k then bias_v. */
    self->out_proj = linear_create(st, st->linear_type, E, E, bias, dtype,
                                   rebuild ? LINEAR_INIT_ZEROS : LINEAR_INIT_TORCH,
                                   !dtype_is_half(dtype),
                                   OWNER "(): out_proj.");
    if (self->out_proj == NULL)
        goto fail;
    if (!rebuild) {
        for (int p = P_IN; p <= P_V; p++)
            if (self->param[p] != NULL && xavier_uniform_param(&st->rng, dtype, self->param[p]) < 0)
                goto fail;
        if (bias)
            memset(PyArray_DATA(self->out_proj->bias), 0,
                   (size_t)PyArray_NBYTES(self->out_proj->bias));
        for (int p = P_BIAS_K; p <= P_BIAS_V; p++)
            if (self->param[p] != NULL && dtype_is_half(dtype))
                xavier_normal_half(&st->rng, PyArray_DATA(self->param[p]), 1, 1, E,
                                   dtype_half_kind(dtype));
            else if (self->param[p] != NULL)
                xavier_normal_kernels[dtype->kernel](&st->rng, PyArray_DATA(self->param[p]), 1, 1,
                                                    E);
    }
    self->init.state = rebuild ? INIT_DONE : INIT_PENDING;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static void MHA_dealloc(MHAObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    for (int p = 0; p < P_COUNT; p++)
        Py_XDECREF(self->param[p]);
    Py_XDECREF(self->out_proj);
    Py_XDECREF(self->init.retired);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* ---- state_dict ------------------------------------------------------------ */

/* torch's keys in its order: own parameters, then out_proj's. */
static const char *const mha_keys[P_COUNT + 2] = {
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
    "bias_k", "bias_v", "out_proj.weight", "out_proj.bias",
};


static PyObject *MHA_state_dict(MHAObject *self, PyObject *Py_UNUSED(ignored))
{
    PyArrayObject *params[P_COUNT + 2];
    mha_all_params(self, params);
    return state_dict_build(mha_keys, params, P_COUNT + 2);
}

static PyObject *MHA_load_state_dict(MHAObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"state_dict", "strict", NULL};
    PyObject *d;
    int strict = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:" OWNER ".load_state_dict", kwlist, &d,
                                     &strict)
            || module_built((PyObject *)self, OWNER ".load_state_dict()") < 0)
        return NULL;
    PyArrayObject *params[P_COUNT + 2];
    mha_all_params(self, params);
    return state_dict_load(d, strict, mha_keys, params, P_COUNT + 2, OWNER);
}

/* ---- attributes ------------------------------------------------------------ */

/* A parameter: a fresh view of it (None where the configuration has none);
 * assigning copies an array of its shape in. */
static PyObject *MHA_get_param(MHAObject *self, void *closure)
{
    PyArrayObject *a = self->param[(size_t)closure];
    if (a == NULL)
        Py_RETURN_NONE;
    return PyArray_View(a, NULL, NULL);
}

static int MHA_set_param(MHAObject *self, PyObject *value, void *closure)
{
    const int p = (int)(size_t)closure;
    PyArrayObject *a = self->param[p];
    char what[64];
    snprintf(what, sizeof what, OWNER ".%s", param_names[p]);
    if (a == NULL && value == Py_None)   /* None stays None, as torch's None parameter */
        return 0;
    if (value == NULL || value == Py_None || a == NULL) {
        PyErr_Format(PyExc_TypeError, "%s cannot be %s", what,
                     value == NULL ? "deleted" : a == NULL ? "set: this configuration has none"
                                                           : "set to None");
        return -1;
    }
    PyArrayObject *raw = as_real_array(value, what);
    if (raw == NULL)
        return -1;
    int rc = -1;
    if (!PyArray_SAMESHAPE(raw, a)) {
        char want[SHAPE_STR_LEN], got[SHAPE_STR_LEN];
        PyErr_Format(PyExc_ValueError, "%s must have shape %s, got %s", what, SHAPE_OF(want, a),
                     SHAPE_OF(got, raw));
    } else {
        rc = PyArray_CopyInto(a, raw);
    }
    Py_DECREF(raw);
    return rc;
}

static PyObject *MHA_get_out_proj(MHAObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->out_proj);
}

static PyObject *MHA_get_size(MHAObject *self, void *closure)
{
    return PyLong_FromSsize_t(*(Py_ssize_t *)((char *)self + (size_t)closure));
}

static PyObject *MHA_get_flag(MHAObject *self, void *closure)
{
    return PyBool_FromLong(*(int *)((char *)self + (size_t)closure));
}

static PyObject *MHA_get_dropout(MHAObject *self, void *Py_UNUSED(closure))
{
    return PyFloat_FromDouble(self->dropout);
}

/* torch's attribute is a plain float, checked by F.dropout when it drops: here when set. */
static int MHA_set_dropout(MHAObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, OWNER ": cannot delete dropout");
        return -1;
    }
    double p;
    if (probability_arg(value, OWNER ": dropout", &p) < 0)
        return -1;
    self->dropout = p;
    return 0;
}

static PyObject *MHA_get_dtype(MHAObject *self, void *Py_UNUSED(closure))
{
    return (PyObject *)PyArray_DescrFromType(self->dtype->typenum);
}

/* The constructor call that rebuilds the configuration. */
static PyObject *MHA_repr(MHAObject *self)
{
    PyObject *dropout = PyFloat_FromDouble(self->dropout);
    if (dropout == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat(
        "%s(embed_dim=%zd, num_heads=%zd, dropout=%R, bias=%s, add_bias_kv=%s, "
        "add_zero_attn=%s, kdim=%zd, vdim=%zd, batch_first=%s, dtype=%s)",
        type_short_name(Py_TYPE(self)), self->embed_dim, self->num_heads, dropout,
        self->bias ? "True" : "False", self->param[P_BIAS_K] ? "True" : "False",
        self->add_zero_attn ? "True" : "False", self->kdim, self->vdim,
        self->batch_first ? "True" : "False", self->dtype->name);
    Py_DECREF(dropout);
    return r;
}

/* ---- pickling, copying, from_torch, _repr_html_ (helpers in interop.c) ---- */

static PyObject *MHA_reduce(MHAObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *args = Py_BuildValue("(nndOOOnnO)", self->embed_dim, self->num_heads,
                                   self->dropout, self->bias ? Py_True : Py_False,
                                   self->param[P_BIAS_K] ? Py_True : Py_False,
                                   self->add_zero_attn ? Py_True : Py_False, self->kdim,
                                   self->vdim, self->batch_first ? Py_True : Py_False);
    return reduce_object((PyObject *)self, args, self->dtype);   /* args stolen */
}

static PyObject *MHA_from_torch(PyTypeObject *cls, PyObject *module)
{
    return from_torch_with(cls, module, "mha_spec");
}

PyDoc_STRVAR(MHA_reduce_doc,
"__reduce__($self, /)\n--\n\n"
"Pickle and copy support: the configuration, the dtype and a copy of the\n"
"parameters. Unpickling and copy.copy/deepcopy give an independent object with\n"
"equal weights and do not draw from myatt's generator.");

PyDoc_STRVAR(MHA_from_state_doc,
"_from_state($type, args, kwargs, state_dict, modes=None, /)\n--\n\n"
"cls(*args, **kwargs) without drawing from myatt's generator, then\n"
"load_state_dict(state_dict), and the modes (training) of the module and its\n"
"sub-modules from `modes` ({'': bool, 'attn': bool, ...}). What unpickling calls.");

PyDoc_STRVAR(MHA_from_torch_doc,
"from_torch($type, module, /)\n--\n\n"
"A MultiheadAttention holding a copy of a torch.nn.MultiheadAttention.\n"
"\n"
"myatt's generator is not drawn from.\n"
"\n"
"Parameters\n"
"----------\n"
"module : torch.nn.MultiheadAttention\n"
"    The configuration from its attributes (embed_dim, num_heads, dropout,\n"
"    kdim, vdim, batch_first, add_zero_attn, whether it has biases and\n"
"    bias_k), the weights from its ``state_dict()``, the dtype from\n"
"    out_proj.weight.\n"
"\n"
"Returns\n"
"-------\n"
"MultiheadAttention\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `module` lacks those attributes, or its weights are not of one\n"
"    dtype among float32, float64, float16 and bfloat16.\n"
"\n"
"Examples\n"
"--------\n"
">>> import torch\n"
">>> t = torch.nn.MultiheadAttention(8, 2, batch_first=True)\n"
">>> m = myatt.MultiheadAttention.from_torch(t)\n"
">>> m.batch_first, m.head_dim\n"
"(True, 4)\n"
">>> bool((m.in_proj_weight == t.in_proj_weight.detach().numpy()).all())\n"
"True");

PyDoc_STRVAR(MHA_repr_html_doc,
"_repr_html_($self, /)\n--\n\n"
"An HTML table of the configuration and parameters, for Jupyter.");


PyDoc_STRVAR(MHA_state_dict_doc,
"state_dict($self, /)\n--\n\n"
"Copies of the parameters under torch's keys, in torch's order.\n"
"\n"
"Returns\n"
"-------\n"
"dict\n"
"    ``in_proj_weight`` (or ``q_proj_weight``, ``k_proj_weight``,\n"
"    ``v_proj_weight`` when kdim or vdim differs from embed_dim),\n"
"    ``in_proj_bias``, ``bias_k``, ``bias_v``, ``out_proj.weight``,\n"
"    ``out_proj.bias`` (those the configuration has): new arrays.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.MultiheadAttention(8, 2, add_bias_kv=True)\n"
">>> {k: v.shape for k, v in m.state_dict().items()}  # doctest: +NORMALIZE_WHITESPACE\n"
"{'in_proj_weight': (24, 8), 'in_proj_bias': (24,), 'bias_k': (1, 1, 8),\n"
" 'bias_v': (1, 1, 8), 'out_proj.weight': (8, 8), 'out_proj.bias': (8,)}");

PyDoc_STRVAR(MHA_load_state_dict_doc,
"load_state_dict($self, state_dict, strict=True)\n--\n\n"
"Copy parameters in from a mapping under torch's keys.\n"
"\n"
"A torch ``state_dict()`` as it comes, NumPy arrays or array-likes. Everything\n"
"is checked before anything is written: on an error the module is unchanged.\n"
"\n"
"Parameters\n"
"----------\n"
"state_dict : mapping\n"
"    The keys of `state_dict` to arrays of the parameters' shapes.\n"
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
"    With `strict`, if a key is missing or unexpected (a state_dict of\n"
"    another configuration).\n"
"TypeError\n"
"    If `state_dict` is not a mapping, or a value is not an array of real\n"
"    numbers.\n"
"ValueError\n"
"    If a value has the wrong shape.\n"
"\n"
"Examples\n"
"--------\n"
">>> a, b = myatt.MultiheadAttention(8, 2), myatt.MultiheadAttention(8, 2)\n"
">>> b.load_state_dict(a.state_dict())\n"
"([], [])\n"
">>> bool((a.in_proj_weight == b.in_proj_weight).all())\n"
"True");

/* ---- the type -------------------------------------------------------------- */

PyDoc_STRVAR(MHA_doc,
"MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, "
"add_zero_attn=False, kdim=None, vdim=None, batch_first=False, *, dtype='float32')\n--\n\n"
"Multi-head attention, exact to torch.nn.MultiheadAttention.\n"
"\n"
"The input projections (one product for self-attention), the heads\n"
"(addressed by strides, through the flash kernel when the weights are not\n"
"wanted) and the output projection are C kernels. The forward is torch's\n"
"module's without its inference fast path; dropout happens in training mode\n"
"(the default; see train() and eval()), with myatt's generator. The initial\n"
"weights are torch's for the same seed (see `manual_seed`). Gradients:\n"
"``myatt.vjp(m, query, key, value, ...)``, whose pullback gives query, key,\n"
"value and every state_dict key.\n"
"\n"
"Parameters\n"
"----------\n"
"embed_dim : int\n"
"    E, the feature size of query and of the output, > 0.\n"
"num_heads : int\n"
"    The number of heads, > 0, dividing embed_dim.\n"
"dropout : float, optional\n"
"    Probability in [0, 1] of dropping an attention weight (default 0).\n"
"bias : bool, optional\n"
"    Biases of the input and output projections (default True).\n"
"add_bias_kv : bool, optional\n"
"    A learned key and value row (bias_k, bias_v) appended to every\n"
"    sequence's keys and values.\n"
"add_zero_attn : bool, optional\n"
"    A row of zeros appended to the keys and values (after bias_k).\n"
"kdim, vdim : int or None, optional\n"
"    The feature sizes of key and value (default embed_dim). If either\n"
"    differs from embed_dim the projections are separate arrays.\n"
"batch_first : bool, optional\n"
"    Batched inputs and output are (N, L, E) instead of (L, N, E).\n"
"dtype : str, numpy.dtype, type or torch.dtype, optional\n"
"    float32 (the default), float64, float16 or bfloat16 (ml_dtypes'): a\n"
"    half-precision module computes torch's ops one by one in its dtype\n"
"    (docs/half-precision.md, MultiheadAttention).\n"
"\n"
"Attributes\n"
"----------\n"
"in_proj_weight : ndarray, shape (3 * embed_dim, embed_dim), or None\n"
"q_proj_weight, k_proj_weight, v_proj_weight : ndarray or None\n"
"    (E, E), (E, kdim), (E, vdim) when kdim or vdim differs from embed_dim\n"
"    (in_proj_weight is then None).  Like out_proj.weight, views of the\n"
"    module's memory stored transposed (Fortran-ordered), for one token's\n"
"    products (float16 and bfloat16: C-ordered, as torch's, whose GEMM\n"
"    orders follow the layout); state_dict() gives C-contiguous copies.\n"
"in_proj_bias : ndarray, shape (3 * embed_dim,), or None\n"
"bias_k, bias_v : ndarray, shape (1, 1, embed_dim), or None\n"
"out_proj : Linear\n"
"    Linear(embed_dim, embed_dim, bias), the module's own.\n"
"embed_dim, num_heads, head_dim, kdim, vdim : int\n"
"batch_first, add_zero_attn : bool\n"
"dropout : float\n"
"dtype : numpy.dtype\n"

"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If a size is not an integer, dropout not a number, or `dtype` is not\n"
"    one of those.\n"
"ValueError\n"
"    If embed_dim or num_heads is not positive, embed_dim is not divisible\n"
"    by num_heads, kdim or vdim is negative, or dropout is outside [0, 1].\n"
"MemoryError\n"
"    If the parameters cannot be allocated.\n"
"\n"
"See Also\n"
"--------\n"
"scaled_dot_product_attention : the attention of one head.\n"
"compare : check a MultiheadAttention against the torch module it came from.\n"
"\n"
"Notes\n"
"-----\n"
"The parameters share the module's memory (in-place updates change it);\n"
"assigning an array copies it in after checking its shape.\n"
"``MultiheadAttention.from_torch(module)`` copies a torch module and\n"
"``myatt.compare(module, query, key, value)`` checks the two against each\n"
"other; pickle, copy.copy and copy.deepcopy keep the configuration and the\n"
"weights.\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.manual_seed(0)\n"
">>> m = myatt.MultiheadAttention(8, 2, batch_first=True)\n"
">>> m  # doctest: +NORMALIZE_WHITESPACE\n"
"MultiheadAttention(embed_dim=8, num_heads=2, dropout=0.0, bias=True,\n"
"                   add_bias_kv=False, add_zero_attn=False, kdim=8, vdim=8,\n"
"                   batch_first=True, dtype=float32)\n"
">>> x = np.ones((3, 5, 8))\n"
">>> out, w = m(x, x, x, need_weights=False)\n"
">>> out.shape, w is None\n"
"((3, 5, 8), True)");

static PyMethodDef MHA_methods[] = {
    MODULE_METHODS(MHA),
    {NULL, NULL, 0, NULL},
};

#define PARAM_ATTR(p, doc) \
    {#p, (getter)MHA_get_param, (setter)MHA_set_param, doc, (void *)(size_t)P_##p}
#define SIZE_ATTR(name, doc) \
    {#name, (getter)MHA_get_size, NULL, doc, (void *)offsetof(MHAObject, name)}
#define FLAG_ATTR(name, doc) \
    {#name, (getter)MHA_get_flag, NULL, doc, (void *)offsetof(MHAObject, name)}

enum { P_in_proj_weight = P_IN, P_q_proj_weight = P_Q, P_k_proj_weight = P_K,
       P_v_proj_weight = P_V, P_in_proj_bias = P_IN_BIAS, P_bias_k = P_BIAS_K,
       P_bias_v = P_BIAS_V };

static PyGetSetDef MHA_getset[] = {
    PARAM_ATTR(in_proj_weight, "The packed input projections [3E, E] (q, k, v rows), or None. "
                               "Like every projection weight, stored transposed: a "
                               "Fortran-ordered view (half precision: C-ordered)."),
    PARAM_ATTR(q_proj_weight, "The query projection [E, E] when kdim or vdim != E, else None."),
    PARAM_ATTR(k_proj_weight, "The key projection [E, kdim] when kdim or vdim != E, else None."),
    PARAM_ATTR(v_proj_weight, "The value projection [E, vdim] when kdim or vdim != E, else None."),
    PARAM_ATTR(in_proj_bias, "The input projections' biases [3E], or None (bias=False)."),
    PARAM_ATTR(bias_k, "The key row appended to the keys [1, 1, E], or None."),
    PARAM_ATTR(bias_v, "The value row appended to the values [1, 1, E], or None."),
    {"out_proj", (getter)MHA_get_out_proj, NULL,
     "The output projection, Linear(E, E, bias) (the module's own).", NULL},
    SIZE_ATTR(embed_dim, "E (int): the feature size of query and of the output."),
    SIZE_ATTR(num_heads, "The number of heads (int)."),
    SIZE_ATTR(head_dim, "embed_dim // num_heads (int)."),
    SIZE_ATTR(kdim, "The feature size of key (int)."),
    SIZE_ATTR(vdim, "The feature size of value (int)."),
    FLAG_ATTR(batch_first, "Whether batched inputs and output are [N, L, E] (bool)."),
    FLAG_ATTR(add_zero_attn, "Whether a row of zeros is appended to keys and values (bool)."),
    {"dropout", (getter)MHA_get_dropout, (setter)MHA_set_dropout,
     "The probability of dropping an attention weight (float in [0, 1]), in training mode.",
     NULL},
    {"dtype", (getter)MHA_get_dtype, NULL,
     "The dtype of the parameters and the results: float32, float64, float16 or bfloat16.", NULL},
    MODULE_MODE_GETSET,
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef MHA_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(MHAObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot MHA_slots[] = {
    {Py_tp_members, MHA_members},
    {Py_tp_new, MHA_new},
    {Py_tp_init, module_init},
    {Py_tp_dealloc, MHA_dealloc},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, MHA_repr},
    {Py_tp_doc, (void *)MHA_doc},
    {Py_tp_methods, MHA_methods},
    {Py_tp_getset, MHA_getset},
    {0, NULL},
};

PyType_Spec mha_type_spec = {
    .name = "myatt.MultiheadAttention",
    .basicsize = sizeof(MHAObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = MHA_slots,
};
