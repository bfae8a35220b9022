/* myatt.vjp(fn, *args, **kwargs) -> (result, pullback), as torch.func.vjp and
 * jax.vjp: the forward runs once, and the pullback (a myatt.Pullback) holds
 * what the backward reads, so that pullback(*cotangents) does not recompute it.
 * What each kind keeps and how it pulls back: vjp.h's vjp_kind, one per
 * differentiable type (beside its forward) and the one below for the kernel
 * functions that declare a backward (entry.h):
 *   SAVES_ARGUMENTS (linear, bmm): the forward runs on private copies of its
 *       array arguments, converted to the result dtype, which the pullback
 *       hands to the backward after grad_output (with the value arguments);
 *   SAVES_RESULT (softmax): a copy of the result, then the value arguments. */
#include "vjp.h"

#include "entry.h"
#include "pieces.h"

#include <string.h>

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;     /* Pullback_vectorcall: pullback(g) without a tuple */
    const vjp_kind *kind;
    const char *fn;                /* what vjp differentiated: the kind's or the function's name */
    int out_ndim;                  /* grad_output's shape: the result's (its first item's) */
    npy_intp out_dims[NPY_MAXDIMS];
    void *kept;                    /* kind->kept_size bytes (PyMem) */
} PullbackObject;

int held_append(PyObject *held, const char *name, PyObject *obj)
{
    PyObject *pair = obj == NULL ? NULL : Py_BuildValue("(sN)", name, obj);
    int rc = pair == NULL ? -1 : PyList_Append(held, pair);
    Py_XDECREF(pair);
    return rc;
}

int check_cotangent(PyArrayObject *g, int ndim, const npy_intp *want, const char *name)
{
    if (PyArray_NDIM(g) == ndim && PyArray_CompareLists(PyArray_DIMS(g), (npy_intp *)want, ndim))
        return 0;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    PyErr_Format(PyExc_ValueError, "pullback(): %s must have shape %s, got %s", name,
                 shape_str(s1, sizeof s1, ndim, want), SHAPE_OF(s2, g));
    return -1;
}

/* ---- the kind of the kernel functions with a backward ---------------------- */

typedef struct {
    const entry *e;
    const myatt_dtype *dt;             /* the forward's result dtype: the gradients' too */
    PyObject *saved[ENTRY_MAX_ARGS];   /* what follows grad_output in the backward's call */
} function_kept;

static PyObject *function_forward(PyObject *module, PyObject *fn, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames, void *kept_)
{
    function_kept *kept = kept_;
    const entry *e = kept->e = entry_of_function(module, fn);
    entry_call c;
    PyObject *result = NULL;
    if (entry_parse(e, module, args, nargs, kwnames, &c) < 0
            || (e->check != NULL && e->check(&c) < 0))
        goto done;
    kept->dt = c.dt;
    if (e->saves == SAVES_ARGUMENTS) {
        /* the forward reads private copies (converted as it converts them), which
         * the pullback keeps: it reads what the forward read, even where converting
         * an argument twice would not give the same values (a list another thread
         * changes) */
        for (int i = 0; e->params[i].name != NULL; i++) {
            if (c.arr[i] != NULL && e->params[i].kind == ARG_ARRAY) {
                PyArrayObject *copy = private_cast(c.arr[i], c.dt->typenum, e->what[i]);
                if (copy == NULL)
                    goto done;
                Py_SETREF(c.arr[i], copy);
            }
            kept->saved[i] = c.arr[i] != NULL ? Py_NewRef((PyObject *)c.arr[i])
                                              : Py_XNewRef(c.obj[i]);
        }
        result = entry_run(&c);
    } else {   /* SAVES_RESULT: a copy of the result (the caller may change it) */
        if ((result = entry_run(&c)) == NULL)
            goto done;
        kept->saved[0] = (PyObject *)copy_array((PyArrayObject *)result);
        if (kept->saved[0] == NULL) {
            name_memory_error("vjp(): a copy of the result");
            Py_CLEAR(result);
            goto done;
        }
        for (int i = 0, k = 1; e->params[i].name != NULL; i++)
            if (e->params[i].kind == ARG_VALUE)
                kept->saved[k++] = Py_XNewRef(c.obj[i]);
    }
done:
    entry_call_clear(&c);
    return result;
}

static PyObject *function_pull(PyObject *module, const void *kept_, PyArrayObject *go,
                               PyObject *ga)
{
    const function_kept *kept = kept_;
    const entry *b = kept->e->backward;
    /* grad_output in the forward's dtype, as torch's autograd casts a gradient to its
     * tensor's: the gradients are in that dtype too (the saved arrays are) */
    PyArrayObject *g = cast_array(go, kept->dt->typenum, 0, "pullback(): grad_output");
    if (g == NULL)
        return NULL;
    PyObject *objs[ENTRY_MAX_ARGS] = {(PyObject *)g};
    for (int i = 1; i < ENTRY_MAX_ARGS; i++)
        objs[i] = kept->saved[i - 1];
    PyObject *r = entry_call_objects(b, module, objs, ENTRY_MAX_ARGS);
    Py_DECREF(g);
    if (r != NULL && !PyTuple_Check(r))   /* one gradient per array argument */
        Py_SETREF(r, PyTuple_Pack(1, r));
    return r;
}

static int function_held(const void *kept_, PyObject *held)
{
    const function_kept *kept = kept_;
    const entry *e = kept->e;
    if (e->saves == SAVES_RESULT) {
        if (held_append(held, "output", Py_NewRef(kept->saved[0])) < 0)
            return -1;
        for (int i = 0, k = 1; e->params[i].name != NULL; i++) {
            if (e->params[i].kind != ARG_VALUE)
                continue;
            PyObject *value = kept->saved[k++];
            if (value != NULL && held_append(held, e->params[i].name, Py_NewRef(value)) < 0)
                return -1;
        }
        return 0;
    }
    for (int i = 0; e->params[i].name != NULL; i++)
        if (kept->saved[i] != NULL && kept->saved[i] != Py_None
                && held_append(held, e->params[i].name, Py_NewRef(kept->saved[i])) < 0)
            return -1;
    return 0;
}

static void function_clear(void *kept_)
{
    function_kept *kept = kept_;
    for (int i = 0; i < ENTRY_MAX_ARGS; i++)
        Py_CLEAR(kept->saved[i]);
}

static const vjp_kind function_vjp = {
    .name = NULL, .kept_size = sizeof(function_kept), .forward = function_forward,
    .pull = function_pull, .held = function_held, .clear = function_clear,
};

/* ---- the pullback ---------------------------------------------------------- */

static void Pullback_dealloc(PullbackObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->kept != NULL) {
        self->kind->clear(self->kept);
        PyMem_Free(self->kept);
    }
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* The gradients from the cotangents (GA: None or grad_attn_weights). */
static PyObject *pullback_run(PullbackObject *self, PyObject *GO, PyObject *GA)
{
    PyObject *module = myatt_module_of_type(Py_TYPE(self)), *r = NULL;
    PyArrayObject *g = module == NULL ? NULL : as_real_array(GO, "pullback(): grad_output");
    if (g != NULL && check_cotangent(g, self->out_ndim, self->out_dims, "grad_output") == 0)
        r = self->kind->pull(module, self->kept, g, GA == Py_None ? NULL : GA);
    Py_XDECREF(g);
    return r;
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
    const int two = self->kind->attn_weights;
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
    const Py_ssize_t most = ((PullbackObject *)self)->kind->attn_weights ? 2 : 1;
    if (nargs >= 1 && nargs <= most && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return pullback_run((PullbackObject *)self, args[0], nargs == 2 ? args[1] : Py_None);
    return call_with_tuple(self, args, nargs, kwnames, (ternaryfunc)Pullback_call);
}

/* The kind's held pairs, each array once (one array passed as query, key and
 * value), and the bytes: theirs and the kind's extra. */
static PyObject *held_of(PullbackObject *self, Py_ssize_t *bytes)
{
    PyObject *all = PyList_New(0), *held = PyList_New(0);
    if (all == NULL || held == NULL || self->kind->held(self->kept, all) < 0)
        goto fail;
    *bytes = self->kind->extra_bytes != NULL ? self->kind->extra_bytes(self->kept) : 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *pair = PyList_GET_ITEM(all, i), *obj = PyTuple_GET_ITEM(pair, 1);
        int seen = 0;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(held) && !seen; j++)
            seen = PyTuple_GET_ITEM(PyList_GET_ITEM(held, j), 1) == obj;
        if (seen)
            continue;
        if (PyList_Append(held, pair) < 0)
            goto fail;
        if (PyArray_Check(obj))
            *bytes += (Py_ssize_t)PyArray_NBYTES((PyArrayObject *)obj);
    }
    Py_DECREF(all);
    return held;
fail:
    Py_XDECREF(all);
    Py_XDECREF(held);
    return NULL;
}

/* "name (2, 3) float32" for an array, "name=-1" for anything else */
static PyObject *repr_part(PyObject *pair)
{
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0));
    PyObject *obj = PyTuple_GET_ITEM(pair, 1);
    if (name == NULL)
        return NULL;
    if (!PyArray_Check(obj))
        return PyUnicode_FromFormat("%s=%R", name, obj);
    PyArrayObject *a = (PyArrayObject *)obj;
    const myatt_dtype *dt = dtype_of_typenum(PyArray_TYPE(a));
    const char *type = dt != NULL ? dt->name : PyArray_TYPE(a) == NPY_BOOL ? "bool" : "?";
    char shape[SHAPE_STR_LEN];
    return PyUnicode_FromFormat("%s %s %s", name, SHAPE_OF(shape, a), type);
}

static PyObject *Pullback_repr(PullbackObject *self)
{
    Py_ssize_t bytes;
    PyObject *held = held_of(self, &bytes), *parts = NULL, *sep = NULL, *joined = NULL;
    PyObject *result = NULL;
    if (held == NULL || (parts = PyList_New(0)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(held); i++) {
        PyObject *part = repr_part(PyList_GET_ITEM(held, i));
        if (part == NULL || PyList_Append(parts, part) < 0) {
            Py_XDECREF(part);
            goto fail;
        }
        Py_DECREF(part);
    }
    const Py_ssize_t extra = self->kind->extra_bytes != NULL
                             ? self->kind->extra_bytes(self->kept) : 0;
    if (extra > 0) {   /* the kernel's buffers (MultiheadAttention's intermediates) */
        PyObject *part = PyUnicode_FromFormat("intermediates %zd bytes", extra);
        if (part == NULL || PyList_Append(parts, part) < 0) {
            Py_XDECREF(part);
            goto fail;
        }
        Py_DECREF(part);
    }
    if ((sep = PyUnicode_FromString(", ")) != NULL
            && (joined = PyUnicode_Join(sep, parts)) != NULL)
        result = PyUnicode_FromFormat("Pullback(%s: %U; %zd bytes)", self->fn, joined, bytes);
fail:
    Py_XDECREF(held);
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    Py_XDECREF(joined);
    return result;
}

static PyObject *Pullback_get_nbytes(PullbackObject *self, void *Py_UNUSED(closure))
{
    Py_ssize_t bytes;
    PyObject *held = held_of(self, &bytes);
    if (held == NULL)
        return NULL;
    Py_DECREF(held);
    return PyLong_FromSsize_t(bytes);
}

static PyObject *Pullback_get_fn(PullbackObject *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(self->fn);
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
     "What vjp differentiated (str): the function's name, or the type's (MyAtt).", NULL},
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

/* The kind of fn and its name (*name), or NULL with TypeError. */
static const vjp_kind *kind_of(PyObject *module, PyObject *fn, const char **name)
{
    myatt_state *st = myatt_state_of_module(module);
    const entry *e = entry_of_function(module, fn);
    if (e != NULL && (e->backward != NULL || e->vjp != NULL)) {
        *name = e->name;
        return e->vjp != NULL ? e->vjp : &function_vjp;
    }
    for (int i = 0; e == NULL && i < MYATT_DIFFERENTIABLE_TYPES; i++)
        if (PyObject_TypeCheck(fn, st->differentiable[i].type)) {
            *name = st->differentiable[i].vjp->name;
            return st->differentiable[i].vjp;
        }
    PyErr_Format(PyExc_TypeError, "vjp(): fn must be %s, or a %s object, got %.200R",
                 entry_differentiable_names(), st->differentiable_names, fn);
    return NULL;
}

static PyObject *myatt_vjp(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    myatt_state *st = myatt_state_of_module(module);
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "vjp() missing required argument 'fn' (pos 1)");
        return NULL;
    }
    PyObject *fn = args[0], *result = NULL, *pair = NULL;
    const char *name;
    const vjp_kind *kind = kind_of(module, fn, &name);
    if (kind == NULL)
        return NULL;
    PullbackObject *pb = PyObject_New(PullbackObject, st->pullback_type);
    if (pb == NULL)
        return NULL;
    pb->vectorcall = Pullback_vectorcall;
    pb->kind = kind;
    pb->fn = name;
    if ((pb->kept = PyMem_Calloc(1, kind->kept_size)) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if ((result = kind->forward(module, fn, args + 1, nargs - 1, kwnames, pb->kept)) == NULL)
        goto fail;
    PyArrayObject *out = (PyArrayObject *)(PyTuple_Check(result) ? PyTuple_GET_ITEM(result, 0)
                                                                  : result);
    pb->out_ndim = PyArray_NDIM(out);
    if (pb->out_ndim > 0)   /* a 0-d result (softmax of a 0-d input) has no dims */
        memcpy(pb->out_dims, PyArray_DIMS(out), (size_t)pb->out_ndim * sizeof(npy_intp));
    pair = PyTuple_Pack(2, result, (PyObject *)pb);
fail:
    Py_XDECREF(result);
    Py_DECREF(pb);
    return pair;
}

/* vjp's docstring: its list of what it differentiates made by vjp_setup */
static const char vjp_doc_template[] =
"vjp($module, fn, /, *args, **kwargs)\n--\n\n"
"The result of a forward pass and its pullback, as torch.func.vjp.\n"
"\n"
"The pullback computes the gradients from what the forward kept instead of\n"
"recomputing it, and returns what the stateless backward returns.\n"
"\n"
"Parameters\n"
"----------\n"
"fn : callable\n"
"    %s;\n"
"    or a %s object (subclasses included:\n"
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
"    gives a function's gradients as its ``*_backward`` gives them, one per\n"
"    array argument (linear ``(grad_input, grad_weight, grad_bias or None)``,\n"
"    softmax ``(grad_input,)``), scaled_dot_product_attention\n"
"    ``(grad_query, grad_key, grad_value, None)`` (None for attn_mask; each\n"
"    gradient shaped as its input, summed over what was broadcast or repeated\n"
"    by enable_gqa), Linear the dict\n"
"    ``{'input', 'weight', 'bias'}``, MyAtt the dict of `MyAtt.backward`,\n"
"    MultiheadAttention a dict with 'query', 'key', 'value' and every\n"
"    state_dict key (query, key and value each its own gradient, also when\n"
"    one array is passed as all three: sum them for that array's; a float16\n"
"    or bfloat16 module gives such an array's whole gradient, torch's one\n"
"    projection's, under its first name, zeros under the others).\n"
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
"[(2, 3, 4), (2, 5, 4), (1, 5, 6), None]";



PyMethodDef vjp_methods[] = {
    {"vjp", (PyCFunction)(void (*)(void))myatt_vjp, METH_FASTCALL | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL},
};

int vjp_setup(myatt_state *st)
{
    /* what it differentiates, in its doc and messages: the differentiable
     * functions (entry.h) and types (module.c's table) */
    char *names = st->differentiable_names;
    names[0] = '\0';
    const int n = MYATT_DIFFERENTIABLE_TYPES;
    for (int i = 0; i < n; i++) {
        const size_t used = strlen(names);
        snprintf(names + used, sizeof st->differentiable_names - used, "%s%s",
                 i == 0 ? "" : i == n - 1 ? " or " : ", ", st->differentiable[i].vjp->name);
    }
    if (vjp_methods[0].ml_doc == NULL) {   /* once per process */
        const char *fns = entry_differentiable_names();
        size_t len = sizeof vjp_doc_template + strlen(fns) + strlen(names);
        char *doc = PyMem_RawMalloc(len);
        if (doc == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        snprintf(doc, len, vjp_doc_template, fns, names);
        vjp_methods[0].ml_doc = doc;
    }
    return 0;
}
