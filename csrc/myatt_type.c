/* myatt.MyAtt: the seed's attention module as an extension type.  It owns two
 * Linear objects (attn, attn_combine) and runs the fused kernel of
 * kernels/myatt.c on their parameters. */
#include "interop.h"
#include "linear_type.h"
#include "pieces.h"
#include "state_dict.h"

#include "kernels/runtime/alloc.h"
#include "kernels/runtime/copy.h"
#include "kernels/tutorial/tutorial.h"
#include "vjp.h"

#include <stddef.h>

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;    /* MyAtt_vectorcall: m(Q, K, V) without an args tuple */
    module_init_state init;       /* built in __init__ or not (interop.h: module_head) */
    int training;                 /* torch's mode (interop.h: module_head) */
    Py_ssize_t query_size, key_size, value_size1, value_size2, output_size;
    const myatt_dtype *dtype;     /* a row of the dtype table (dtype.h) */
    LinearObject *attn;           /* Linear(query_size + key_size, value_size1)   */
    LinearObject *attn_combine;   /* Linear(query_size + value_size2, output_size) */
} MyAttObject;
MODULE_HEAD_ASSERT(MyAttObject);

static PyObject *MyAtt_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames);

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
    if (dtype_obj != NULL && dtype_arg(dtype_obj, "MyAtt", &dtype) < 0)
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

/* ---- forward --------------------------------------------------------------- */

/* Batch item 0 of a checked 3-D array, in the module's dtype (only it is used,
 * so only it is converted). */
static PyArrayObject *batch0(PyArrayObject *a, int typenum, const char *what)
{
    PyObject *item = PySequence_GetItem((PyObject *)a, 0);
    if (item == NULL)
        return NULL;
    PyArrayObject *cast = cast_array((PyArrayObject *)item, typenum, 0, what);
    Py_DECREF(item);
    return cast;
}

/* What view m (elements of `item` bytes) shows, copied C-contiguous to dst
 * (by all threads when large); the copy's view. */
static mk_cmat copy_view(void *dst, const mk_cmat *m, int64_t item)
{
    mk_copy_view(dst, *m, item);
    return mk_cmat_c(dst, m->rows, m->cols);
}

/* Batch item 0 of a checked 3-D array as the kernel reads it: a view.  An
 * array already of `typenum`, aligned and in native byte order is read in
 * place (no view object: the same pointer and strides the view a[0] would
 * have); anything else goes through batch0, and *hold keeps the converted copy
 * alive (NULL when reading in place). */
int batch0_view(PyArrayObject *a, int typenum, const char *what, PyArrayObject **hold,
                mk_cmat *m)
{
    if (PyArray_TYPE(a) == typenum && PyArray_ISALIGNED(a) && PyArray_ISNOTSWAPPED(a)) {
        const npy_intp item = (npy_intp)PyArray_ITEMSIZE(a);
        *hold = NULL;
        *m = (mk_cmat){PyArray_DATA(a), PyArray_DIM(a, 1), PyArray_DIM(a, 2),
                       PyArray_STRIDES(a)[1] / item, PyArray_STRIDES(a)[2] / item};
        return 0;
    }
    if ((*hold = batch0(a, typenum, what)) == NULL)
        return -1;
    *m = cmat_of(*hold);
    return 0;
}

/* The kernel's inputs: batch item 0 views q, k, v and the parameters. */
static tutorial_inputs myatt_inputs_of(MyAttObject *self, mk_cmat q, mk_cmat k, mk_cmat v)
{
    LinearObject *a = self->attn, *c = self->attn_combine;
    return (tutorial_inputs){
        .q = q, .k = k, .v = v,
        .w_attn = cmat_of(a->weight), .w_comb = cmat_of(c->weight),
        .b_attn = PyArray_DATA(a->bias), .b_comb = PyArray_DATA(c->bias),
    };
}

/* What torch would fail on, in the order torch meets it; 0 or -1 with ValueError. */
static int check_qkv_fail(MyAttObject *self, PyArrayObject *q, PyArrayObject *k,
                          PyArrayObject *v);

static int check_qkv(MyAttObject *self, PyArrayObject *q, PyArrayObject *k, PyArrayObject *v)
{
    /* the common case without formatting any shape; the messages: check_qkv_fail */
    if (PyArray_NDIM(q) == 3 && PyArray_NDIM(k) == 3 && PyArray_NDIM(v) == 3
            && PyArray_DIM(q, 0) != 0 && PyArray_DIM(k, 0) != 0
            && PyArray_DIM(q, 1) == PyArray_DIM(k, 1)
            && PyArray_DIM(q, 2) + PyArray_DIM(k, 2) == self->attn->in_features
            && PyArray_DIM(v, 0) == 1 && PyArray_DIM(v, 1) == self->value_size1
            && PyArray_DIM(q, 2) + PyArray_DIM(v, 2) == self->attn_combine->in_features)
        return 0;
    return check_qkv_fail(self, q, k, v);
}

static int check_qkv_fail(MyAttObject *self, PyArrayObject *q, PyArrayObject *k,
                          PyArrayObject *v)
{
    char sq[SHAPE_STR_LEN], sk[SHAPE_STR_LEN], sv[SHAPE_STR_LEN];
    SHAPE_OF(sq, q);
    SHAPE_OF(sk, k);
    SHAPE_OF(sv, v);
    PyArrayObject *arrs[3] = {q, k, v};
    const char *names[3] = {"Q", "K", "V"}, *shapes[3] = {sq, sk, sv};
    for (int i = 0; i < 3; i++)
        if (PyArray_NDIM(arrs[i]) != 3) {
            PyErr_Format(PyExc_ValueError, "MyAtt: %s must be 3-D [batch, rows, features], "
                         "got shape %s", names[i], shapes[i]);
            return -1;
        }
    for (int i = 0; i < 2; i++)
        if (PyArray_DIM(arrs[i], 0) == 0) {
            PyErr_Format(PyExc_ValueError, "MyAtt: %s needs at least one batch item (only "
                         "%s[0] is used), got shape %s", names[i], names[i], shapes[i]);
            return -1;
        }
    npy_intp dq = PyArray_DIM(q, 2), dk = PyArray_DIM(k, 2), dv = PyArray_DIM(v, 2);
    if (PyArray_DIM(q, 1) != PyArray_DIM(k, 1)) {
        PyErr_Format(PyExc_ValueError, "MyAtt: Q and K must have the same number of rows "
                     "(dimension 1), got Q %s and K %s", sq, sk);
        return -1;
    }
    if (dq + dk != self->attn->in_features) {
        PyErr_Format(PyExc_ValueError, "MyAtt: Q.shape[2] + K.shape[2] must equal "
                     "query_size + key_size = %zd, got Q %s and K %s",
                     self->attn->in_features, sq, sk);
        return -1;
    }
    if (PyArray_DIM(v, 0) != 1 || PyArray_DIM(v, 1) != self->value_size1) {
        PyErr_Format(PyExc_ValueError, "MyAtt: V must have shape (1, value_size1 = %zd, ...), "
                     "got %s", self->value_size1, sv);
        return -1;
    }
    if (dq + dv != self->attn_combine->in_features) {
        PyErr_Format(PyExc_ValueError, "MyAtt: Q.shape[2] + V.shape[2] must equal "
                     "query_size + value_size2 = %zd, got Q %s and V %s",
                     self->attn_combine->in_features, sq, sv);
        return -1;
    }
    return 0;
}

/* myatt.vjp: one block in *kept with copies of what *in reads (views of Q[0],
 * K[0], V[0] in the module's dtype, and the parameters), and room for
 * attn_weights and applied; *in then reads the copies.  0, or -1 with
 * MemoryError. */
static int keep_inputs(MyAttObject *self, myatt_kept *kept, tutorial_inputs *in)
{
    const int64_t item = self->dtype->itemsize;
    int ndim[MYATT_KEPT_ARRAYS];
    npy_intp shapes[MYATT_KEPT_ARRAYS][2];
    myatt_kept_shapes(in, ndim, shapes);
    size_t at[MYATT_KEPT_ARRAYS + 1] = {0};   /* each one's start (a cache line); the total */
    for (int i = 0; i < MYATT_KEPT_ARRAYS; i++) {
        const size_t bytes = mk_bytes(mk_bytes((size_t)shapes[i][0], (size_t)shapes[i][1]),
                                      (size_t)item);
        at[i + 1] = at[i] == SIZE_MAX || bytes >= SIZE_MAX / 16
                        ? SIZE_MAX : at[i] + ((bytes + 63) & ~(size_t)63);
    }
    if (at[MYATT_KEPT_ARRAYS] == SIZE_MAX) {
        PyErr_SetString(PyExc_MemoryError, "myatt.vjp(): the saved arrays' size overflows");
        return -1;
    }
    char *block = private_block_alloc(at[MYATT_KEPT_ARRAYS], "myatt.vjp(): the saved arrays");
    if (block == NULL)
        return -1;
    kept->block = block;
    kept->dtype = self->dtype;
    kept->q = copy_view(block + at[0], &in->q, item);
    kept->k = copy_view(block + at[1], &in->k, item);
    kept->v = copy_view(block + at[2], &in->v, item);
    kept->w_attn = copy_view(block + at[3], &in->w_attn, item);
    kept->w_comb = copy_view(block + at[5], &in->w_comb, item);
    memcpy(block + at[4], in->b_attn, (size_t)(in->w_attn.rows * item));
    memcpy(block + at[6], in->b_comb, (size_t)(in->w_comb.rows * item));
    kept->b_attn = block + at[4];
    kept->b_comb = block + at[6];
    kept->aw = block + at[7];
    kept->applied = block + at[8];
    myatt_kept_inputs(kept, in);
    return 0;
}

/* kept == NULL: MyAtt.forward.  Otherwise (myatt.vjp) the same result, and
 * *kept (zero-filled by the caller; released by it, also on error) gets what
 * the pullback reads: private copies of Q[0], K[0], V[0] and the parameters,
 * attn_weights (the result gets a copy of it) and all of applied. */
static PyObject *myatt_forward_impl(MyAttObject *self, PyObject *Q, PyObject *K, PyObject *V,
                                    myatt_kept *kept)
{
    PyArrayObject *rq = NULL, *rk = NULL, *rv = NULL, *hq = NULL, *hk = NULL, *hv = NULL;
    mk_cmat q, k, v;
    PyArrayObject *out = NULL, *weights = NULL;
    PyObject *result = NULL;
    const myatt_dtype *dt = self->dtype;
    const int typenum = dt->typenum;

    if (module_built((PyObject *)self, "MyAtt") < 0
            || (rq = as_real_array(Q, "MyAtt: Q")) == NULL
            || (rk = as_real_array(K, "MyAtt: K")) == NULL
            || (rv = as_real_array(V, "MyAtt: V")) == NULL
            || check_qkv(self, rq, rk, rv) < 0
            || batch0_view(rq, typenum, "MyAtt: Q", &hq, &q) < 0
            || batch0_view(rk, typenum, "MyAtt: K", &hk, &k) < 0
            || batch0_view(rv, typenum, "MyAtt: V", &hv, &v) < 0)
        goto fail;
    tutorial_inputs in = myatt_inputs_of(self, q, k, v);
    if (kept != NULL) {
        memcpy(kept->dims[0], PyArray_DIMS(rq), sizeof kept->dims[0]);
        memcpy(kept->dims[1], PyArray_DIMS(rk), sizeof kept->dims[1]);
        memcpy(kept->dims[2], PyArray_DIMS(rv), sizeof kept->dims[2]);
        if (keep_inputs(self, kept, &in) < 0)
            goto fail;
    }

    npy_intp S = PyArray_DIM(rq, 1), dq = PyArray_DIM(rq, 2), dk = PyArray_DIM(rk, 2);
    npy_intp v1 = PyArray_DIM(rv, 1), v2 = PyArray_DIM(rv, 2), os = self->output_size;
    npy_intp out_dims[3] = {1, S, os}, w_dims[2] = {S, v1};
    if ((out = (PyArrayObject *)new_array(3, out_dims, typenum, "MyAtt: output")) == NULL
            || (weights = (PyArrayObject *)new_array(2, w_dims, typenum,
                                                     "MyAtt: attn_weights")) == NULL)
        goto fail;

    void *od = PyArray_DATA(out), *wd = PyArray_DATA(weights);
    const double work = (double)S * ((double)(dq + dk) * (double)v1 + (double)v1 * (double)v2
                                     + (double)(dq + v2) * (double)os);
    int rc;
    MYATT_BEGIN_COMPUTE(work)
    rc = kept != NULL ? dt->k->myatt_forward_kept(od, kept->aw, kept->applied, &in)
                      : dt->k->myatt_forward(od, wd, &in);
    MYATT_END_COMPUTE
    if (rc < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    if (kept != NULL)   /* the saved attn_weights is not the one handed out */
        mk_copy_view(wd, mk_cmat_c(kept->aw, S, v1), dt->itemsize);
    result = PyTuple_Pack(2, (PyObject *)out, (PyObject *)weights);

fail:
    Py_XDECREF(rq);
    Py_XDECREF(rk);
    Py_XDECREF(rv);
    Py_XDECREF(hq);
    Py_XDECREF(hk);
    Py_XDECREF(hv);
    Py_XDECREF(out);
    Py_XDECREF(weights);
    return result;
}

static PyObject *myatt_forward(MyAttObject *self, PyObject *Q, PyObject *K, PyObject *V)
{
    return myatt_forward_impl(self, Q, K, V, NULL);
}

/* Q, K, V of a call, parsed as the forward's methods parse them (`format` names
 * the method): 0, or -1 with the parser's TypeError. */
static int parse_qkv(PyObject *args, PyObject *kwds, const char *format, PyObject **Q,
                     PyObject **K, PyObject **V)
{
    static char *kwlist[] = {"Q", "K", "V", NULL};
    return PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, Q, K, V) ? 0 : -1;
}

PyObject *myatt_forward_keep(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, myatt_kept *kept)
{
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return myatt_forward_impl((MyAttObject *)self, args[0], args[1], args[2], kept);
    PyObject *kwds, *tuple = tuple_and_kwargs(args, nargs, kwnames, &kwds), *Q, *K, *V;
    PyObject *result = NULL;
    if (tuple != NULL && parse_qkv(tuple, kwds, "OOO:MyAtt.__call__", &Q, &K, &V) == 0)
        result = myatt_forward_impl((MyAttObject *)self, Q, K, V, kept);
    Py_XDECREF(tuple);
    Py_XDECREF(kwds);
    return result;
}

static PyObject *MyAtt_call(MyAttObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *Q, *K, *V;
    if (parse_qkv(args, kwds, "OOO:MyAtt.__call__", &Q, &K, &V) < 0)
        return NULL;
    return myatt_forward(self, Q, K, V);
}

static PyObject *MyAtt_forward(MyAttObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *Q, *K, *V;
    if (parse_qkv(args, kwds, "OOO:MyAtt.forward", &Q, &K, &V) < 0)
        return NULL;
    return myatt_forward(self, Q, K, V);
}

/* m(Q, K, V) (a subclass's own forward if it has one) and m.forward(Q, K, V):
 * three positional arguments go straight to myatt_forward; any other call
 * (keywords, a wrong count) takes the tuple path above, so its parsing and
 * messages are PyArg_ParseTupleAndKeywords'. */
static PyObject *MyAtt_forward_fast(MyAttObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return myatt_forward(self, args[0], args[1], args[2]);
    return call_with_tuple((PyObject *)self, args, nargs, kwnames, (ternaryfunc)MyAtt_forward);
}

static PyObject *MyAtt_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames)
{
    PyObject *result;
    if (subclass_forward(self, (PyCFunction)(void (*)(void))MyAtt_forward_fast, args, nargsf,
                         kwnames, &result))
        return result;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return myatt_forward((MyAttObject *)self, args[0], args[1], args[2]);
    return call_with_tuple(self, args, nargs, kwnames, (ternaryfunc)MyAtt_call);
}

static PyObject *MyAtt_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    return MyAtt_vectorcall(self, args, (size_t)nargs, kwnames);
}

/* ---- backward -------------------------------------------------------------- */

/* grad_output must be (1, S, output_size) and grad_attn_weights (S, value_size1),
 * exactly the shapes forward returns (torch's autograd.grad takes no other). */
static int check_grad_shape(PyArrayObject *g, int ndim, const npy_intp *want, const char *what)
{
    if (PyArray_NDIM(g) == ndim && PyArray_CompareLists(PyArray_DIMS(g), (npy_intp *)want, ndim))
        return 0;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    PyErr_Format(PyExc_ValueError, "MyAtt.backward(): %s must have shape %s (as forward "
                 "returns it), got %s", what, shape_str(s1, sizeof s1, ndim, want),
                 SHAPE_OF(s2, g));
    return -1;
}

PyObject *myatt_grads_run(const myatt_dtype *dt, const npy_intp dims[3][3],
                          const tutorial_inputs *in, mk_cmat go, const mk_cmat *ga,
                          const void *kept_aw, const void *kept_ap, const char *what,
                          PyObject *const keys[MYATT_GRADS])
{
    static const char *const grad_names[MYATT_GRADS] = {
        "the gradient of Q", "the gradient of K", "the gradient of V",
        "the gradient of attn.weight", "the gradient of attn.bias",
        "the gradient of attn_combine.weight", "the gradient of attn_combine.bias"};
    const int typenum = dt->typenum;
    const npy_intp v1 = in->w_attn.rows, o = in->w_comb.rows;
    const npy_intp shapes[4][2] = {{v1, in->w_attn.cols}, {v1}, {o, in->w_comb.cols}, {o}};
    PyArrayObject *g[MYATT_GRADS] = {NULL};
    PyObject *result = NULL;
    /* Q and K gradients are zero outside batch item 0, which the kernel writes. */
    for (int i = 0; i < MYATT_GRADS; i++) {
        g[i] = (PyArrayObject *)(i < 2 ? PyArray_ZEROS(3, (npy_intp *)dims[i], typenum, 0)
                                 : i == 2 ? new_array(3, dims[2], typenum, grad_names[i])
                                 : new_array(i % 2 ? 2 : 1, shapes[i - 3], typenum,
                                             grad_names[i]));
        if (g[i] == NULL) {   /* "<what>: the gradient of V of shape ..." */
            name_memory_error(what);
            goto fail;
        }
    }
    const tutorial_grads grads = {
        .q = PyArray_DATA(g[0]), .k = PyArray_DATA(g[1]), .v = PyArray_DATA(g[2]),
        .w_attn = PyArray_DATA(g[3]), .b_attn = PyArray_DATA(g[4]),
        .w_comb = PyArray_DATA(g[5]), .b_comb = PyArray_DATA(g[6]),
    };
    /* the forward's products twice (and once more when it recomputes them) */
    const double work = (kept_aw != NULL ? 2.0 : 3.0) * (double)go.rows
                        * ((double)in->w_attn.cols * (double)v1 + (double)v1 * (double)in->v.cols
                           + (double)in->w_comb.cols * (double)o);
    int rc;
    MYATT_BEGIN_COMPUTE(work)
    rc = kept_aw != NULL ? dt->k->myatt_backward_kept(&grads, go, ga, in, kept_aw, kept_ap)
                         : dt->k->myatt_backward(&grads, go, ga, in);
    MYATT_END_COMPUTE
    if (rc < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    result = dict_of(keys, (PyObject *const *)g, MYATT_GRADS);
fail:
    for (int i = 0; i < MYATT_GRADS; i++)
        Py_XDECREF(g[i]);
    return result;
}

static PyObject *myatt_backward(MyAttObject *self, PyObject *Q, PyObject *K, PyObject *V,
                                PyObject *GO, PyObject *GA)
{
    PyArrayObject *rq = NULL, *rk = NULL, *rv = NULL, *rgo = NULL, *rga = NULL;
    PyArrayObject *hq = NULL, *hk = NULL, *hv = NULL, *hgo = NULL, *ga = NULL;
    mk_cmat q, k, v, go;
    PyObject *result = NULL;
    const myatt_dtype *dt = self->dtype;
    const int typenum = dt->typenum;

    if (module_built((PyObject *)self, "MyAtt.backward()") < 0
            || (rq = as_real_array(Q, "MyAtt.backward(): Q")) == NULL
            || (rk = as_real_array(K, "MyAtt.backward(): K")) == NULL
            || (rv = as_real_array(V, "MyAtt.backward(): V")) == NULL
            || (rgo = as_real_array(GO, "MyAtt.backward(): grad_output")) == NULL
            || (GA != Py_None
                && (rga = as_real_array(GA, "MyAtt.backward(): grad_attn_weights")) == NULL)
            || check_qkv(self, rq, rk, rv) < 0)
        goto fail;
    npy_intp S = PyArray_DIM(rq, 1), v1 = self->value_size1, os = self->output_size;
    npy_intp go_dims[3] = {1, S, os}, ga_dims[2] = {S, v1};
    if (check_grad_shape(rgo, 3, go_dims, "grad_output") < 0
            || (rga != NULL && check_grad_shape(rga, 2, ga_dims, "grad_attn_weights") < 0))
        goto fail;
    if (batch0_view(rq, typenum, "MyAtt.backward(): Q", &hq, &q) < 0
            || batch0_view(rk, typenum, "MyAtt.backward(): K", &hk, &k) < 0
            || batch0_view(rv, typenum, "MyAtt.backward(): V", &hv, &v) < 0
            || batch0_view(rgo, typenum, "MyAtt.backward(): grad_output", &hgo, &go) < 0
            || (rga != NULL && (ga = cast_array(rga, typenum, 0,
                                                "MyAtt.backward(): grad_attn_weights")) == NULL))
        goto fail;

    npy_intp dims[3][3];
    memcpy(dims[0], PyArray_DIMS(rq), sizeof dims[0]);
    memcpy(dims[1], PyArray_DIMS(rk), sizeof dims[1]);
    memcpy(dims[2], PyArray_DIMS(rv), sizeof dims[2]);
    const tutorial_inputs in = myatt_inputs_of(self, q, k, v);
    const mk_cmat gav = ga != NULL ? cmat_of(ga) : (mk_cmat){NULL};
    const myatt_state *st = myatt_state_of_type(Py_TYPE(self));
    if (st == NULL)
        goto fail;
    result = myatt_grads_run(dt, (const npy_intp (*)[3])dims, &in, go,
                             ga != NULL ? &gav : NULL, NULL, NULL, "MyAtt.backward()",
                             st->myatt_grad_keys);
fail:
    Py_XDECREF(rq);
    Py_XDECREF(rk);
    Py_XDECREF(rv);
    Py_XDECREF(rgo);
    Py_XDECREF(rga);
    Py_XDECREF(hq);
    Py_XDECREF(hk);
    Py_XDECREF(hv);
    Py_XDECREF(hgo);
    Py_XDECREF(ga);
    return result;
}

PyDoc_STRVAR(MyAtt_backward_doc,
"backward($self, Q, K, V, grad_output, grad_attn_weights=None)\n--\n\n"
"Gradients of the module, as torch's autograd gives them.\n"
"\n"
"The gradients of ``sum(output * grad_output) + sum(attn_weights *\n"
"grad_attn_weights)`` (the second term left out when `grad_attn_weights` is\n"
"None) with respect to the inputs and the parameters. The forward pass is\n"
"recomputed block by block; the module is not changed.\n"
"\n"
"Parameters\n"
"----------\n"
"Q, K, V : array_like\n"
"    The inputs of the forward pass (see `forward`).\n"
"grad_output : array_like, shape (1, S, output_size)\n"
"    The gradient of `output`.\n"
"grad_attn_weights : array_like, shape (S, value_size1), optional\n"
"    The gradient of `attn_weights`.\n"
"\n"
"Returns\n"
"-------\n"
"dict\n"
"    ``'Q'``, ``'K'``, ``'V'`` shaped like them (batch items of `Q` and `K`\n"
"    other than 0 get zeros) and ``'attn.weight'``, ``'attn.bias'``,\n"
"    ``'attn_combine.weight'``, ``'attn_combine.bias'``: new arrays in the\n"
"    module's dtype.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers.\n"
"ValueError\n"
"    If a shape does not match (the message gives it).\n"
"MemoryError\n"
"    If a result or a workspace cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.MyAtt(3, 2, 4, 5, 6)\n"
">>> Q, K, V = np.ones((2, 7, 3)), np.ones((1, 7, 2)), np.ones((1, 4, 5))\n"
">>> g = m.backward(Q, K, V, np.ones((1, 7, 6)))\n"
">>> sorted(g)  # doctest: +NORMALIZE_WHITESPACE\n"
"['K', 'Q', 'V', 'attn.bias', 'attn.weight',\n"
" 'attn_combine.bias', 'attn_combine.weight']\n"
">>> g['Q'].shape, g['attn.weight'].shape\n"
"((2, 7, 3), (4, 5))\n"
">>> bool(g['Q'][1].any())\n"
"False");

static PyObject *MyAtt_backward(MyAttObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"Q", "K", "V", "grad_output", "grad_attn_weights", NULL};
    PyObject *Q, *K, *V, *GO, *GA = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|O:MyAtt.backward", kwlist,
                                     &Q, &K, &V, &GO, &GA))
        return NULL;
    return myatt_backward(self, Q, K, V, GO, GA);
}

/* ---- state_dict ------------------------------------------------------------ */

static const char *const myatt_keys[] = {"attn.weight", "attn.bias",
                                         "attn_combine.weight", "attn_combine.bias"};

static PyObject *MyAtt_state_dict(MyAttObject *self, PyObject *Py_UNUSED(ignored))
{
    PyArrayObject *params[] = {self->attn->weight, self->attn->bias,
                               self->attn_combine->weight, self->attn_combine->bias};
    return state_dict_build(myatt_keys, params, 4);
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
    return state_dict_load(d, strict, myatt_keys, params, 4, "MyAtt");
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
    PyObject *kwargs = Py_BuildValue("{ss}", "dtype", self->dtype->name);
    PyObject *r = args && kwargs ? reduce_object((PyObject *)self, args, kwargs) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return r;
}

static PyObject *MyAtt_from_torch(PyTypeObject *cls, PyObject *module)
{
    return from_torch_with(cls, module, "myatt_spec");
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

PyDoc_STRVAR(MyAtt_call_doc,
"__call__($self, Q, K, V)\n--\n\n"
"The attention: the same as `forward`.\n"
"\n"
"Only batch item 0 of `Q` and `K` is used, as in the original.\n"
"\n"
"Parameters\n"
"----------\n"
"Q : array_like, shape (Bq, S, query_size)\n"
"K : array_like, shape (Bk, S, key_size)\n"
"    As many rows S as `Q`.\n"
"V : array_like, shape (1, value_size1, value_size2)\n"
"\n"
"Returns\n"
"-------\n"
"output : ndarray, shape (1, S, output_size)\n"
"attn_weights : ndarray, shape (S, value_size1)\n"
"    Each row sums to 1. Both new arrays in the module's dtype.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers.\n"
"ValueError\n"
"    If an operand is not 3-D, a batch is empty, or the shapes do not match\n"
"    the sizes (the message gives them).\n"
"MemoryError\n"
"    If a result or a workspace cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.MyAtt(3, 2, 4, 5, 6, dtype='float64')\n"
">>> sd = {k: np.zeros(v.shape) for k, v in m.state_dict().items()}\n"
">>> sd['attn_combine.bias'] = np.arange(6.0)\n"
">>> m.load_state_dict(sd)\n"
"([], [])\n"
">>> Q, K, V = np.ones((2, 7, 3)), np.ones((1, 7, 2)), np.ones((1, 4, 5))\n"
">>> output, attn_weights = m(Q, K, V)\n"
">>> attn_weights[0]\n"
"array([0.25, 0.25, 0.25, 0.25])\n"
">>> output[0, 0]\n"
"array([0., 1., 2., 3., 4., 5.])");

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
"    float32 (the default) or float64: anything ``numpy.dtype()`` reads as one\n"
"    of them, or ``torch.float32`` / ``torch.float64``.\n"
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
"    If a size is not an integer, or `dtype` is not float32 or float64.\n"
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

PyDoc_STRVAR(MyAtt_forward_doc,
"forward($self, Q, K, V)\n--\n\n"
"The attention: output and attention weights.\n"
"\n"
"Only batch item 0 of `Q` and `K` is used, as in the original.\n"
"\n"
"Parameters\n"
"----------\n"
"Q : array_like, shape (Bq, S, query_size)\n"
"K : array_like, shape (Bk, S, key_size)\n"
"    As many rows S as `Q`.\n"
"V : array_like, shape (1, value_size1, value_size2)\n"
"\n"
"Returns\n"
"-------\n"
"output : ndarray, shape (1, S, output_size)\n"
"attn_weights : ndarray, shape (S, value_size1)\n"
"    Each row sums to 1. Both new arrays in the module's dtype.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers.\n"
"ValueError\n"
"    If an operand is not 3-D, a batch is empty, or the shapes do not match\n"
"    the sizes (the message gives them).\n"
"MemoryError\n"
"    If a result or a workspace cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.MyAtt(3, 2, 4, 5, 6, dtype='float64')\n"
">>> sd = {k: np.zeros(v.shape) for k, v in m.state_dict().items()}\n"
">>> sd['attn_combine.bias'] = np.arange(6.0)\n"
">>> m.load_state_dict(sd)\n"
"([], [])\n"
">>> Q, K, V = np.ones((2, 7, 3)), np.ones((1, 7, 2)), np.ones((1, 4, 5))\n"
">>> output, attn_weights = m.forward(Q, K, V)\n"
">>> attn_weights[0]\n"
"array([0.25, 0.25, 0.25, 0.25])\n"
">>> output[0, 0]\n"
"array([0., 1., 2., 3., 4., 5.])");

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
    {"forward", (PyCFunction)(void (*)(void))MyAtt_forward_fast, METH_FASTCALL | METH_KEYWORDS,
     MyAtt_forward_doc},
    {"backward", (PyCFunction)(void (*)(void))MyAtt_backward, METH_VARARGS | METH_KEYWORDS,
     MyAtt_backward_doc},
    {"state_dict", (PyCFunction)MyAtt_state_dict, METH_NOARGS, MyAtt_state_dict_doc},
    {"load_state_dict", (PyCFunction)(void (*)(void))MyAtt_load_state_dict,
     METH_VARARGS | METH_KEYWORDS, MyAtt_load_state_dict_doc},
    {"__call__", (PyCFunction)(void (*)(void))MyAtt_call_fast,
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST, MyAtt_call_doc},
    {"__reduce__", (PyCFunction)MyAtt_reduce, METH_NOARGS, MyAtt_reduce_doc},
    {"_from_state", (PyCFunction)from_state_method, METH_VARARGS | METH_CLASS,
     MyAtt_from_state_doc},
    {"from_torch", (PyCFunction)MyAtt_from_torch, METH_O | METH_CLASS,
     MyAtt_from_torch_doc},
    {"_repr_html_", (PyCFunction)repr_html_method, METH_NOARGS, MyAtt_repr_html_doc},
    MODULE_MODE_METHODS,
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
     "The dtype of the parameters and the results: float32 or float64.", NULL},
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

PyType_Spec myatt_type_spec = {
    .name = "myatt.MyAtt",
    .basicsize = sizeof(MyAttObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = MyAtt_slots,
};
