/* myatt.vjp(fn, *args, **kwargs) -> (result, pullback), as torch.func.vjp and
 * jax.vjp: the forward runs once, and the pullback (a myatt.Pullback) holds
 * what the backward reads, so that pullback(*cotangents) does not recompute it.
 *
 * What a pullback holds, always private copies (never the caller's memory, nor
 * the arrays handed out in `result`), so that a change made in place after vjp
 * to an input, a parameter or the result cannot reach the gradients:
 *   linear:  input, weight, bias (in the result's dtype)
 *   softmax: the output (and dim)
 *   bmm:     input, mat2
 *   Linear:  input (in the layer's dtype), weight, bias
 *   MyAtt:   Q[0], K[0], V[0], the four parameters, attn_weights and applied
 *   scaled_dot_product_attention: query, key, value, attn_mask (in the
 *            result's dtype; a bool mask as it is), the output and one
 *            log-sum-exp per query row (never the [L, S] weights), the
 *            dropout seed (the forward's mask again)
 *   MultiheadAttention: query, key, value (one copy of an array passed
 *            twice), the masks, the parameters, and the kernel's buffers
 *            (mha.h, mha_saved: projections, heads, weights or flash output
 *            and log-sum-exp), the dropout seed
 * The saved arrays are only read: a pullback may be called more than once, and
 * from several threads at a time. */
#include "vjp.h"

#include "checks.h"
#include "interop.h"
#include "linear_ops.h"
#include "linear_type.h"
#include "pieces.h"
#include "state.h"

#include <string.h>

#include <structmember.h>

enum { VJP_LINEAR, VJP_SOFTMAX, VJP_BMM, VJP_LINEAR_OBJ, VJP_MYATT, VJP_SDPA, VJP_MHA };

/* The names in reprs, and the stateless backward a function's pullback calls. */
static const char *const kind_names[] = {"linear", "softmax", "bmm", "Linear", "MyAtt",
                                         "scaled_dot_product_attention", "MultiheadAttention"};
static const char *const backward_names[] = {"linear_backward", "softmax_backward",
                                             "bmm_backward"};
static const char *const saved_names[][3] = {
    {"input", "weight", "bias"}, {"output", "dim", NULL}, {"input", "mat2", NULL},
    {"input", "weight", "bias"},
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;     /* Pullback_vectorcall: pullback(g) without a tuple */
    int kind;                      /* VJP_* */
    PyObject *backward;            /* functions: myatt.<name>_backward */
    PyObject *saved[3];            /* functions and Linear: what follows grad_output */
    int nsaved;
    const myatt_dtype *dtype;      /* Linear and MyAtt: the object's dtype */
    int out_ndim;                  /* grad_output's shape: the result's */
    npy_intp out_dims[NPY_MAXDIMS];
    myatt_kept kept;               /* MyAtt */
    sdpa_kept skept;               /* scaled_dot_product_attention */
    mha_kept mkept;                /* MultiheadAttention */
} PullbackObject;

void myatt_kept_inputs(const myatt_kept *kept, tutorial_inputs *in)
{
    *in = (tutorial_inputs){
        .q = kept->q, .k = kept->k, .v = kept->v, .w_attn = kept->w_attn,
        .w_comb = kept->w_comb, .b_attn = kept->b_attn, .b_comb = kept->b_comb,
    };
}

/* The names and shapes of what a MyAtt pullback holds, in its repr's order. */
static const char *const myatt_kept_names[MYATT_KEPT_ARRAYS] = {
    "Q[0]", "K[0]", "V[0]", "attn.weight", "attn.bias", "attn_combine.weight",
    "attn_combine.bias", "attn_weights", "applied"};

void myatt_kept_shapes(const tutorial_inputs *in, int ndim[MYATT_KEPT_ARRAYS],
                       npy_intp dims[MYATT_KEPT_ARRAYS][2])
{
    const npy_intp S = in->q.rows, v1 = in->w_attn.rows, o = in->w_comb.rows;
    const npy_intp shapes[MYATT_KEPT_ARRAYS][2] = {
        {S, in->q.cols}, {S, in->k.cols}, {v1, in->v.cols}, {v1, in->w_attn.cols}, {v1, 1},
        {o, in->w_comb.cols}, {o, 1}, {S, v1}, {S, in->v.cols}};
    for (int i = 0; i < MYATT_KEPT_ARRAYS; i++) {
        ndim[i] = i == 4 || i == 6 ? 1 : 2;   /* the biases */
        dims[i][0] = shapes[i][0];
        dims[i][1] = shapes[i][1];
    }
}

/* myatt_kept_shapes of what kept holds */
static void kept_shapes(const myatt_kept *kept, int ndim[MYATT_KEPT_ARRAYS],
                        npy_intp dims[MYATT_KEPT_ARRAYS][2])
{
    tutorial_inputs in;
    myatt_kept_inputs(kept, &in);
    myatt_kept_shapes(&in, ndim, dims);
}

/* ---- the pullback ---------------------------------------------------------- */

static void Pullback_dealloc(PullbackObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(self->backward);
    for (int i = 0; i < self->nsaved; i++)
        Py_XDECREF(self->saved[i]);
    private_block_free(self->kept.block);
    sdpa_kept_clear(&self->skept);
    mha_kept_clear(&self->mkept);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* g (converted) must have the shape `want`; 0, or -1 with ValueError. */
static int check_cotangent(PyArrayObject *g, int ndim, const npy_intp *want, const char *name)
{
    if (PyArray_NDIM(g) == ndim && PyArray_CompareLists(PyArray_DIMS(g), (npy_intp *)want, ndim))
        return 0;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    PyErr_Format(PyExc_ValueError, "pullback(): %s must have shape %s, got %s", name,
                 shape_str(s1, sizeof s1, ndim, want), SHAPE_OF(s2, g));
    return -1;
}

/* linear, softmax, bmm: their stateless backward on the saved arrays. */
static PyObject *pull_function(PullbackObject *self, PyArrayObject *g)
{
    PyObject *call[4] = {(PyObject *)g, NULL, NULL, NULL};
    for (int i = 0; i < self->nsaved; i++)
        call[1 + i] = self->saved[i];
    PyObject *r = PyObject_Vectorcall(self->backward, call, 1 + (size_t)self->nsaved, NULL);
    if (r == NULL || self->kind != VJP_SOFTMAX)
        return r;
    PyObject *t = PyTuple_Pack(1, r);   /* one entry per array argument */
    Py_DECREF(r);
    return t;
}

static PyObject *pull_linear_object(PullbackObject *self, PyArrayObject *raw)
{
    PyArrayObject *g = cast_array(raw, self->dtype->typenum, 0, "pullback(): grad_output");
    if (g == NULL)
        return NULL;
    PyArrayObject *x = (PyArrayObject *)self->saved[0], *w = (PyArrayObject *)self->saved[1];
    PyObject *grads = linear_grad_apply(x, g, cmat_of(w), self->saved[2] != Py_None,
                                        self->dtype);
    Py_DECREF(g);
    if (grads == NULL)
        return NULL;
    const myatt_state *st = myatt_state_of_type(Py_TYPE(self));
    PyObject *result = st == NULL ? NULL
                       : dict_of(st->linear_grad_keys, &PyTuple_GET_ITEM(grads, 0), LINEAR_GRADS);
    Py_DECREF(grads);
    return result;
}

static PyObject *pull_myatt(PullbackObject *self, PyArrayObject *rgo, PyObject *GA)
{
    const myatt_kept *kp = &self->kept;
    const int typenum = kp->dtype->typenum;
    PyArrayObject *rga = NULL, *hgo = NULL, *ga = NULL;
    PyObject *result = NULL;
    mk_cmat go;
    const npy_intp ga_dims[2] = {kp->q.rows, kp->w_attn.rows};   /* attn_weights' */
    if (GA != Py_None
            && ((rga = as_real_array(GA, "pullback(): grad_attn_weights")) == NULL
                || check_cotangent(rga, 2, ga_dims, "grad_attn_weights") < 0))
        goto fail;
    if (batch0_view(rgo, typenum, "pullback(): grad_output", &hgo, &go) < 0
            || (rga != NULL
                && (ga = cast_array(rga, typenum, 0, "pullback(): grad_attn_weights")) == NULL))
        goto fail;
    tutorial_inputs in;
    myatt_kept_inputs(kp, &in);
    const mk_cmat gav = ga != NULL ? cmat_of(ga) : (mk_cmat){NULL};
    const myatt_state *st = myatt_state_of_type(Py_TYPE(self));
    if (st == NULL)
        goto fail;
    result = myatt_grads_run(kp->dtype, (const npy_intp (*)[3])kp->dims, &in, go,
                             ga != NULL ? &gav : NULL, kp->aw, kp->applied, "pullback()",
                             st->myatt_grad_keys);
fail:
    Py_XDECREF(rga);
    Py_XDECREF(hgo);
    Py_XDECREF(ga);
    return result;
}

static PyObject *pull_mha(PullbackObject *self, PyArrayObject *go, PyObject *GA)
{
    const mha_kept *kp = &self->mkept;
    PyArrayObject *rga = NULL;
    if (GA != Py_None && kp->wnd == 0) {
        PyErr_SetString(PyExc_TypeError, "pullback(): grad_attn_weights must be None: the "
                        "forward had need_weights=False (its attn_weights was None)");
        return NULL;
    }
    if (GA != Py_None
            && ((rga = as_real_array(GA, "pullback(): grad_attn_weights")) == NULL
                || check_cotangent(rga, kp->wnd, kp->wdims, "grad_attn_weights") < 0)) {
        Py_XDECREF(rga);
        return NULL;
    }
    PyObject *result = mha_grads_run(kp, go, rga);
    Py_XDECREF(rga);
    return result;
}

/* The gradients from the cotangents (GA: None or grad_attn_weights). */
static PyObject *pullback_run(PullbackObject *self, PyObject *GO, PyObject *GA)
{
    PyObject *result = NULL;
    PyArrayObject *g = as_real_array(GO, "pullback(): grad_output");
    if (g == NULL || check_cotangent(g, self->out_ndim, self->out_dims, "grad_output") < 0)
        goto done;
    switch (self->kind) {
    case VJP_LINEAR_OBJ:
        result = pull_linear_object(self, g);
        break;
    case VJP_MYATT:
        result = pull_myatt(self, g, GA);
        break;
    case VJP_SDPA:
        result = sdpa_grads_run(&self->skept, g);
        break;
    case VJP_MHA:
        result = pull_mha(self, g, GA);
        break;
    default:
        result = pull_function(self, g);
    }
done:
    Py_XDECREF(g);
    return result;
}

PyDoc_STRVAR(Pullback_call_doc,
"__call__($self, /, grad_output, grad_attn_weights=None)\n--\n\n"
"The gradients at the values the forward saw, from the cotangents.\n"
"\n"
"May be called more than once; each call gives new arrays.\n"
"\n"
"Parameters\n"
"----------\n"
"grad_output : array_like\n"
"    Shaped like the result (for MyAtt: like its output, (1, S, output_size)).\n"
"    scaled_dot_product_attention converts it to the forward's dtype.\n"
"grad_attn_weights : array_like, optional\n"
"    For MyAtt (shape (S, value_size1)) and MultiheadAttention (the shape of\n"
"    its attn_weights; None when the forward had need_weights=False): the\n"
"    cotangent of attn_weights, or None.\n"
"\n"
"Returns\n"
"-------\n"
"tuple or dict\n"
"    What the stateless backward returns: a tuple for linear, softmax, bmm and\n"
"    scaled_dot_product_attention, a dict for Linear, MyAtt and\n"
"    MultiheadAttention (see `vjp`).\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If a cotangent is not an array of real numbers, or `grad_attn_weights`\n"
"    is given to a pullback of anything but MyAtt and MultiheadAttention\n"
"    (or of a MultiheadAttention forward with need_weights=False).\n"
"ValueError\n"
"    If a cotangent has the wrong shape.\n"
"MemoryError\n"
"    If a result cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> y, pullback = myatt.vjp(myatt.softmax, np.zeros(4))\n"
">>> pullback(np.ones(4))\n"
"(array([0., 0., 0., 0.]),)");

static PyObject *Pullback_call(PullbackObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw_two[] = {"grad_output", "grad_attn_weights", NULL};
    static char *kw_one[] = {"grad_output", NULL};
    PyObject *GO, *GA = Py_None, *key;
    const int two = self->kind == VJP_MYATT || self->kind == VJP_MHA;
    /* a keyword this pullback does not take, named (CPython's parser first counts
     * the arguments: "takes at most 1 argument (2 given)") */
    for (Py_ssize_t pos = 0; kwds != NULL && PyDict_Next(kwds, &pos, &key, NULL);)
        if (!PyUnicode_Check(key) || !(PyUnicode_CompareWithASCIIString(key, kw_two[0]) == 0
                                       || (two && PyUnicode_CompareWithASCIIString(
                                                      key, kw_two[1]) == 0))) {
            PyErr_Format(PyExc_TypeError, "pullback() got an unexpected keyword argument %R",
                         key);
            return NULL;
        }
    if (two
            ? !PyArg_ParseTupleAndKeywords(args, kwds, "O|O:pullback", kw_two, &GO, &GA)
            : !PyArg_ParseTupleAndKeywords(args, kwds, "O:pullback", kw_one, &GO))
        return NULL;
    return pullback_run(self, GO, GA);
}

/* pullback(grad_output[, grad_attn_weights]) with positional arguments goes
 * straight to pullback_run; any other call is parsed by Pullback_call. */
static PyObject *Pullback_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames)
{
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const int kind = ((PullbackObject *)self)->kind;
    const Py_ssize_t most = kind == VJP_MYATT || kind == VJP_MHA ? 2 : 1;
    if (nargs >= 1 && nargs <= most && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return pullback_run((PullbackObject *)self, args[0], nargs == 2 ? args[1] : Py_None);
    return call_with_tuple(self, args, nargs, kwnames, (ternaryfunc)Pullback_call);
}

/* s (a new reference, or NULL) appended to parts: 0 or -1. */
static int append_part(PyObject *parts, PyObject *s)
{
    if (s == NULL)
        return -1;
    int rc = PyList_Append(parts, s);
    Py_DECREF(s);
    return rc;
}

/* "name (2, 3) float32" */
static int repr_shape_part(PyObject *parts, const char *name, int ndim, const npy_intp *dims,
                           const char *type)
{
    char shape[SHAPE_STR_LEN];
    return append_part(parts, PyUnicode_FromFormat("%s %s %s", name,
                                                   shape_str(shape, sizeof shape, ndim, dims),
                                                   type));
}

/* "name (2, 3) float32" for an array, "name=-1" for anything else */
static int repr_part(PyObject *parts, const char *name, PyObject *obj)
{
    if (!PyArray_Check(obj))
        return append_part(parts, PyUnicode_FromFormat("%s=%R", name, obj));
    PyArrayObject *a = (PyArrayObject *)obj;
    const myatt_dtype *dt = dtype_of_typenum(PyArray_TYPE(a));
    const char *type = dt != NULL ? dt->name : PyArray_TYPE(a) == NPY_BOOL ? "bool" : "?";
    return repr_shape_part(parts, name, PyArray_NDIM(a), PyArray_DIMS(a), type);
}

/* The arrays an SDPA or MultiheadAttention pullback holds (each once), with
 * their names in reprs: their count (at most HELD_MAX). */
enum { HELD_MAX = MHA_KEPT_INPUTS + MHA_KEPT_PARAMS };
static int held_arrays(PullbackObject *self, const char **names, PyArrayObject **arrs)
{
    static const char *const sdpa_names[] = {"query", "key", "value", "output", "lse",
                                             "attn_mask"};
    const sdpa_kept *sk = &self->skept;
    const mha_kept *mk = &self->mkept;
    PyArrayObject *all[HELD_MAX];
    const char *const *all_names;
    int n;
    if (self->kind == VJP_SDPA) {
        PyArrayObject *held[6] = {sk->q, sk->k, sk->v, sk->out, sk->lse, sk->mask};
        memcpy(all, held, sizeof held);
        all_names = sdpa_names;
        n = 6;
    } else {
        memcpy(all, mk->inputs, sizeof mk->inputs);
        memcpy(all + MHA_KEPT_INPUTS, mk->params, sizeof mk->params);
        all_names = mha_kept_names;
        n = HELD_MAX;
    }
    int count = 0;
    for (int i = 0; i < n; i++) {
        int seen = all[i] == NULL;
        for (int j = 0; j < i && !seen; j++)
            seen = all[j] == all[i];   /* one array passed as query, key and value */
        if (!seen) {
            names[count] = all_names[i];
            arrs[count++] = all[i];
        }
    }
    return count;
}

/* The bytes a pullback holds: its arrays and (MultiheadAttention) the kernel's buffers. */
static Py_ssize_t held_bytes(PullbackObject *self)
{
    Py_ssize_t bytes = 0;
    if (self->kind == VJP_MYATT) {
        int ndim[MYATT_KEPT_ARRAYS];
        npy_intp dims[MYATT_KEPT_ARRAYS][2];
        kept_shapes(&self->kept, ndim, dims);
        for (int i = 0; i < MYATT_KEPT_ARRAYS; i++)
            bytes += dims[i][0] * dims[i][1] * self->kept.dtype->itemsize;
    } else if (self->kind == VJP_SDPA || self->kind == VJP_MHA) {
        const char *names[HELD_MAX];
        PyArrayObject *arrs[HELD_MAX];
        const int n = held_arrays(self, names, arrs);
        for (int i = 0; i < n; i++)
            bytes += (Py_ssize_t)PyArray_NBYTES(arrs[i]);
    } else {
        for (int i = 0; i < self->nsaved; i++)
            if (PyArray_Check(self->saved[i]))
                bytes += (Py_ssize_t)PyArray_NBYTES((PyArrayObject *)self->saved[i]);
    }
    return bytes + (self->kind == VJP_MHA ? (Py_ssize_t)self->mkept.s.nbytes : 0);
}

static PyObject *Pullback_repr(PullbackObject *self)
{
    PyObject *parts = PyList_New(0), *sep = NULL, *joined = NULL, *result = NULL;
    if (parts == NULL)
        return NULL;
    if (self->kind == VJP_MYATT) {
        int ndim[MYATT_KEPT_ARRAYS];
        npy_intp dims[MYATT_KEPT_ARRAYS][2];
        kept_shapes(&self->kept, ndim, dims);
        for (int i = 0; i < MYATT_KEPT_ARRAYS; i++)
            if (repr_shape_part(parts, myatt_kept_names[i], ndim[i], dims[i],
                                self->kept.dtype->name) < 0)
                goto fail;
    } else if (self->kind == VJP_SDPA || self->kind == VJP_MHA) {
        const char *names[HELD_MAX];
        PyArrayObject *arrs[HELD_MAX];
        const int n = held_arrays(self, names, arrs);
        for (int i = 0; i < n; i++)
            if (repr_part(parts, names[i], (PyObject *)arrs[i]) < 0)
                goto fail;
    } else {
        for (int i = 0; i < self->nsaved; i++)
            if (self->saved[i] != Py_None
                    && repr_part(parts, saved_names[self->kind][i], self->saved[i]) < 0)
                goto fail;
    }
    if (self->kind == VJP_MHA) {   /* the projections, heads, weights or flash output */
        if (append_part(parts, PyUnicode_FromFormat("intermediates %zd bytes",
                                                    (Py_ssize_t)self->mkept.s.nbytes)) < 0)
            goto fail;
    }
    if ((sep = PyUnicode_FromString(", ")) == NULL
            || (joined = PyUnicode_Join(sep, parts)) == NULL)
        goto fail;
    result = PyUnicode_FromFormat("Pullback(%s: %U; %zd bytes)", kind_names[self->kind],
                                  joined, held_bytes(self));
fail:
    Py_DECREF(parts);
    Py_XDECREF(sep);
    Py_XDECREF(joined);
    return result;
}

static PyObject *Pullback_get_nbytes(PullbackObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(held_bytes(self));
}

static PyObject *Pullback_get_fn(PullbackObject *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(kind_names[self->kind]);
}

static PyObject *Pullback_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyErr_SetString(PyExc_TypeError, "cannot create 'myatt.Pullback' instances: "
                    "myatt.vjp(fn, *args) returns them");
    return NULL;
}

static PyMethodDef Pullback_methods[] = {
    {"__call__", (PyCFunction)(void (*)(void))Pullback_call,
     METH_VARARGS | METH_KEYWORDS | METH_COEXIST,
     Pullback_call_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Pullback_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PullbackObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Pullback_getset[] = {
    {"nbytes", (getter)Pullback_get_nbytes, NULL, "The bytes of the saved arrays (int).", NULL},
    {"fn", (getter)Pullback_get_fn, NULL,
     "What vjp differentiated (str): linear, softmax, bmm, scaled_dot_product_attention, "
     "Linear, MyAtt or MultiheadAttention.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Pullback_doc,
"The pullback that myatt.vjp returns, not built directly.\n\n"
"``pullback(*cotangents)`` gives the gradients at the values the forward saw,\n"
"from private copies of what the backward reads (its repr lists them, `nbytes`\n"
"counts them). It may be called more than once.\n\n"
"Attributes\n"
"----------\n"
"fn : str\n"
"    What vjp differentiated: 'linear', 'softmax', 'bmm',\n"
"    'scaled_dot_product_attention', 'Linear', 'MyAtt' or\n"
"    'MultiheadAttention'.\n"
"nbytes : int\n"
"    The bytes of the saved arrays.\n\n"
"See Also\n"
"--------\n"
"vjp\n\n"
"Examples\n"
"--------\n"
">>> y, pullback = myatt.vjp(myatt.linear, np.ones((2, 3)), np.ones((4, 3)))\n"
">>> pullback\n"
"Pullback(linear: input (2, 3) float64, weight (4, 3) float64; 144 bytes)\n"
">>> pullback.fn, pullback.nbytes\n"
"('linear', 144)");

static PyType_Slot Pullback_slots[] = {
    {Py_tp_doc, (void *)Pullback_doc},
    {Py_tp_new, Pullback_new},
    {Py_tp_dealloc, Pullback_dealloc},
    {Py_tp_call, Pullback_call},
    {Py_tp_repr, Pullback_repr},
    {Py_tp_methods, Pullback_methods},
    {Py_tp_getset, Pullback_getset},
    {Py_tp_members, Pullback_members},
    {0, NULL},
};

PyType_Spec pullback_type_spec = {
    .name = "myatt.Pullback",
    .basicsize = sizeof(PullbackObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION
             | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = Pullback_slots,
};

/* ---- vjp -------------------------------------------------------------------- */

/* The VJP_* of one of the module's own function objects, or -1. */
static int function_kind(PyObject *module, PyObject *fn)
{
    if (!PyCFunction_Check(fn) || PyCFunction_GET_SELF(fn) != module)
        return -1;
    const char *name = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    for (int i = VJP_LINEAR; i <= VJP_BMM; i++)
        if (strcmp(name, kind_names[i]) == 0)
            return i;
    return strcmp(name, kind_names[VJP_SDPA]) == 0 ? VJP_SDPA : -1;
}

/* fn(*args, **kwds) of a function, and what its pullback keeps.  linear and bmm
 * run on private copies of their array arguments (once they are checked),
 * converted as they convert them (to the result's dtype), which the pullback
 * keeps: it reads what the forward read, even where converting an argument
 * twice would not give the same values (a list that another thread changes).
 * softmax keeps a copy of its result (which the caller may change) and `dim`. */
static PyObject *function_forward_keep(PullbackObject *pb, PyObject *module, PyObject *fn,
                                       PyObject *args, PyObject *kwds)
{
    static char *kw_linear[] = {"input", "weight", "bias", NULL};
    static char *kw_softmax[] = {"input", "dim", NULL};
    static char *kw_bmm[] = {"input", "mat2", NULL};
    static const char *const what[][3] = {
        {"linear(): input", "linear(): weight", "linear(): bias"}, {NULL},
        {"bmm(): input", "bmm(): mat2", NULL}};
    PyObject *ops[3] = {NULL, NULL, NULL}, *result = NULL;
    if ((pb->backward = PyObject_GetAttrString(module, backward_names[pb->kind])) == NULL)
        return NULL;
    if (pb->kind == VJP_SOFTMAX) {
        if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:softmax", kw_softmax, &ops[0],
                                         &ops[1])
                || (result = PyObject_Call(fn, args, kwds)) == NULL)
            return NULL;
        pb->nsaved = ops[1] == NULL ? 1 : 2;
        if ((pb->saved[0] = (PyObject *)copy_array((PyArrayObject *)result)) == NULL)
            name_memory_error("vjp(): a copy of softmax's result");
        else if (ops[1] != NULL)   /* an int (softmax took it): no reference to anything */
            pb->saved[1] = PyNumber_Index(ops[1]);
    } else {
        if (pb->kind == VJP_LINEAR
                ? !PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:linear", kw_linear, &ops[0],
                                               &ops[1], &ops[2])
                : !PyArg_ParseTupleAndKeywords(args, kwds, "OO:bmm", kw_bmm, &ops[0], &ops[1]))
            return NULL;
        const int n = pb->kind == VJP_LINEAR ? 3 : 2;
        PyArrayObject *raw[3] = {NULL, NULL, NULL};
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            ok = (i == 2 && (ops[i] == NULL || ops[i] == Py_None))   /* no bias */
                 || (raw[i] = as_real_array(ops[i], what[pb->kind][i])) != NULL;
        ok = ok && (pb->kind == VJP_LINEAR ? check_linear_operands("linear()", raw[0], raw[1],
                                                                   raw[2])
                                           : check_bmm_operands("bmm()", raw[0], raw[1])) == 0;
        const int typenum = ok ? result_dtype(raw, n)->typenum : 0;
        pb->nsaved = n;
        for (int i = 0; i < n && ok; i++)
            ok = (pb->saved[i] = raw[i] == NULL ? Py_NewRef(Py_None)
                                 : (PyObject *)private_cast(raw[i], typenum,
                                                            what[pb->kind][i])) != NULL;
        for (int i = 0; i < n; i++)
            Py_XDECREF(raw[i]);
        if (ok)
            result = PyObject_Vectorcall(fn, pb->saved, (size_t)n, NULL);
    }
    for (int i = 0; i < pb->nsaved && result != NULL; i++)
        if (pb->saved[i] == NULL)
            Py_CLEAR(result);
    return result;
}

PyDoc_STRVAR(vjp_doc,
"vjp($module, fn, /, *args, **kwargs)\n--\n\n"
"The result of a forward pass and its pullback, as torch.func.vjp.\n"
"\n"
"The pullback computes the gradients from what the forward kept instead of\n"
"recomputing it, and returns what the stateless backward returns.\n"
"\n"
"Parameters\n"
"----------\n"
"fn : callable\n"
"    `linear`, `softmax`, `bmm`, `scaled_dot_product_attention`, or a\n"
"    `Linear`, `MyAtt` or `MultiheadAttention` object (subclasses included:\n"
"    vjp runs the type's own forward, not a `__call__` that overrides it).\n"
"*args, **kwargs\n"
"    The arguments of ``fn``, as it takes them.\n"
"\n"
"Returns\n"
"-------\n"
"result : ndarray or tuple of ndarray\n"
"    Exactly ``fn(*args, **kwargs)``.\n"
"pullback : Pullback\n"
"    ``pullback(grad_output)`` (MyAtt and MultiheadAttention:\n"
"    ``pullback(grad_output, grad_attn_weights=None)``), with `grad_output`\n"
"    shaped like the result (its first item for those two),\n"
"    gives linear ``(grad_input, grad_weight, grad_bias or None)``, softmax\n"
"    ``(grad_input,)``, bmm ``(grad_input, grad_mat2)``,\n"
"    scaled_dot_product_attention ``(grad_query, grad_key, grad_value, None)``\n"
"    (None for attn_mask; each gradient shaped as its input, summed over what\n"
"    was broadcast or repeated by enable_gqa), Linear the dict\n"
"    ``{'input', 'weight', 'bias'}``, MyAtt the dict of `MyAtt.backward`,\n"
"    MultiheadAttention a dict with 'query', 'key', 'value' and every\n"
"    state_dict key (query, key and value each its own gradient, also when\n"
"    one array is passed as all three: sum them for that array's).\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `fn` is none of those, or as ``fn(*args, **kwargs)`` raises.\n"
"ValueError, AxisError, MemoryError\n"
"    As ``fn(*args, **kwargs)`` raises them.\n"
"\n"
"Notes\n"
"-----\n"
"The pullback holds private copies of what it reads (inputs converted to the\n"
"kernel dtype, the parameters, softmax's output, MyAtt's attn_weights and\n"
"applied, scaled_dot_product_attention's output and one log-sum-exp per\n"
"query row, never the [L, S] weights; MultiheadAttention's projections, heads\n"
"and per-head weights, or with need_weights=False the flash kernel's output\n"
"and log-sum-exp), never the caller's arrays nor the\n"
"result: changing an input, a parameter or the result in place after vjp does\n"
"not change the gradients, which stay those at the values the forward saw.\n"
"With dropout (dropout_p > 0, MultiheadAttention's dropout) the pullback\n"
"uses the forward's dropout mask.\n"
"\n"
"Examples\n"
"--------\n"
">>> x, w = np.ones((2, 3)), np.full((4, 3), 0.5)\n"
">>> y, pullback = myatt.vjp(myatt.linear, x, w)\n"
">>> y.shape\n"
"(2, 4)\n"
">>> x[...] = 7  # the pullback kept its own copy\n"
">>> grad_input, grad_weight, grad_bias = pullback(np.ones((2, 4)))\n"
">>> grad_weight[0], grad_bias\n"
"(array([2., 2., 2.]), None)\n"
">>> m = myatt.MyAtt(3, 2, 4, 5, 6)\n"
">>> (output, attn_weights), pullback = myatt.vjp(\n"
"...     m, np.ones((1, 7, 3)), np.ones((1, 7, 2)), np.ones((1, 4, 5)))\n"
">>> pullback(np.ones((1, 7, 6)))['attn.weight'].shape\n"
"(4, 5)\n"
">>> q, k, v = np.ones((2, 3, 4)), np.ones((2, 5, 4)), np.ones((1, 5, 6))\n"
">>> out, pullback = myatt.vjp(myatt.scaled_dot_product_attention, q, k, v)\n"
">>> [None if g is None else g.shape for g in pullback(np.ones(out.shape))]\n"
"[(2, 3, 4), (2, 5, 4), (1, 5, 6), None]");

/* vjp(fn, *args, **kwargs): fn's arguments as a tuple and a dict (NULL when
 * there are no keywords), but a MyAtt's as they came (myatt_forward_keep). */
static PyObject *myatt_vjp(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    myatt_state *st = myatt_state_of_module(module);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "vjp() missing required argument 'fn' (pos 1)");
        return NULL;
    }
    PyObject *fn = args[0];
    int kind = function_kind(module, fn);
    if (kind < 0 && PyObject_TypeCheck(fn, st->linear_type))
        kind = VJP_LINEAR_OBJ;
    if (kind < 0 && PyObject_TypeCheck(fn, st->myatt_type))
        kind = VJP_MYATT;
    if (kind < 0 && PyObject_TypeCheck(fn, st->mha_type))
        kind = VJP_MHA;
    if (kind < 0) {
        PyErr_Format(PyExc_TypeError, "vjp(): fn must be myatt.linear, myatt.softmax, "
                     "myatt.bmm, myatt.scaled_dot_product_attention, or a Linear, MyAtt or "
                     "MultiheadAttention object, got %.200R", fn);
        return NULL;
    }
    PyObject *rest = NULL, *kwds = NULL, *result = NULL, *pair = NULL;
    if (kind != VJP_MYATT && (rest = tuple_and_kwargs(args + 1, nargs - 1, kwnames, &kwds)) == NULL)
        return NULL;
    PullbackObject *pb = PyObject_New(PullbackObject, st->pullback_type);
    if (pb == NULL)
        goto fail;
    pb->vectorcall = Pullback_vectorcall;
    pb->kind = kind;
    pb->backward = NULL;
    pb->saved[0] = pb->saved[1] = pb->saved[2] = NULL;
    pb->nsaved = 0;
    pb->dtype = NULL;
    memset(&pb->kept, 0, sizeof pb->kept);
    memset(&pb->skept, 0, sizeof pb->skept);
    memset(&pb->mkept, 0, sizeof pb->mkept);

    PyArrayObject *out;
    if (kind == VJP_LINEAR_OBJ) {
        pb->nsaved = 3;
        if ((result = linear_forward_keep(fn, rest, kwds, pb->saved)) == NULL)
            goto fail;
        /* read once the forward ran: an argument's parsing may have built a placeholder */
        pb->dtype = ((LinearObject *)fn)->dtype;
        out = (PyArrayObject *)result;
    } else if (kind == VJP_MYATT || kind == VJP_MHA) {
        result = kind == VJP_MYATT ? myatt_forward_keep(fn, args + 1, nargs - 1, kwnames,
                                                        &pb->kept)
                                   : mha_forward_keep(fn, rest, kwds, &pb->mkept);
        if (result == NULL)
            goto fail;
        out = (PyArrayObject *)PyTuple_GET_ITEM(result, 0);
    } else if (kind == VJP_SDPA) {
        if ((result = sdpa_forward_keep(module, rest, kwds, &pb->skept)) == NULL)
            goto fail;
        out = (PyArrayObject *)result;
    } else {
        if ((result = function_forward_keep(pb, module, fn, rest, kwds)) == NULL)
            goto fail;
        out = (PyArrayObject *)result;
    }
    pb->out_ndim = PyArray_NDIM(out);
    if (pb->out_ndim > 0)   /* a 0-d result (softmax of a 0-d input) has no dims */
        memcpy(pb->out_dims, PyArray_DIMS(out), (size_t)pb->out_ndim * sizeof(npy_intp));
    pair = PyTuple_Pack(2, result, (PyObject *)pb);
fail:
    Py_XDECREF(rest);
    Py_XDECREF(kwds);
    Py_XDECREF(result);
    Py_XDECREF(pb);
    return pair;
}

PyMethodDef vjp_methods[] = {
    {"vjp", (PyCFunction)(void (*)(void))myatt_vjp, METH_FASTCALL | METH_KEYWORDS, vjp_doc},
    {NULL, NULL, 0, NULL},
};
