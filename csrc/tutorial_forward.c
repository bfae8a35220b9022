/* MyAtt's forward, backward and vjp kind: the calls of the tutorial's module
 * (tutorial_type.h) on the fused kernels of kernels/tutorial/. */
#include "tutorial_type.h"

#include "entry.h"
#include "vjp.h"

#include "kernels/runtime/alloc.h"
#include "kernels/runtime/copy.h"

#include <string.h>

DTYPE_KERNELS(tutorial_forward);
DTYPE_KERNELS(tutorial_backward);
DTYPE_KERNELS(tutorial_forward_kept);
DTYPE_KERNELS(tutorial_backward_kept);

/* What a MyAtt forward keeps for its pullback (myatt.vjp): private copies
 * (C-contiguous, in the module's dtype) that nothing else writes, all in one
 * block (at the seed's shape, nine arrays cost more than the forward: vjp took
 * 2.2 us for its 0.7). */
enum { TUTORIAL_KEPT_ARRAYS = 9 };
typedef struct {
    const myatt_dtype *dtype;
    npy_intp dims[3][3];                 /* the shapes of Q, K, V as given */
    void *block;                         /* private_block_alloc: everything below */
    mk_cmat q, k, v;                     /* Q[0] [S, dq], K[0] [S, dk], V[0] [v1, v2] */
    mk_cmat w_attn, w_comb;              /* attn.weight, attn_combine.weight */
    const void *b_attn, *b_comb;         /* attn.bias [v1], attn_combine.bias [o] */
    void *aw, *applied;                  /* attn_weights [S, v1], applied [S, v2] */
} tutorial_kept;

static void tutorial_kept_inputs(const tutorial_kept *kept, tutorial_inputs *in);
static void tutorial_kept_shapes(const tutorial_inputs *in, int ndim[TUTORIAL_KEPT_ARRAYS],
                                 npy_intp dims[TUTORIAL_KEPT_ARRAYS][2]);

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
static int batch0_view(PyArrayObject *a, int typenum, const char *what, PyArrayObject **hold,
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
static tutorial_inputs tutorial_inputs_of(MyAttObject *self, mk_cmat q, mk_cmat k, mk_cmat v)
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
static int keep_inputs(MyAttObject *self, tutorial_kept *kept, tutorial_inputs *in)
{
    const int64_t item = self->dtype->itemsize;
    int ndim[TUTORIAL_KEPT_ARRAYS];
    npy_intp shapes[TUTORIAL_KEPT_ARRAYS][2];
    tutorial_kept_shapes(in, ndim, shapes);
    size_t at[TUTORIAL_KEPT_ARRAYS + 1] = {0};   /* each one's start (a cache line); the total */
    for (int i = 0; i < TUTORIAL_KEPT_ARRAYS; i++) {
        const size_t bytes = mk_bytes(mk_bytes((size_t)shapes[i][0], (size_t)shapes[i][1]),
                                      (size_t)item);
        at[i + 1] = at[i] == SIZE_MAX || bytes >= SIZE_MAX / 16
                        ? SIZE_MAX : at[i] + ((bytes + 63) & ~(size_t)63);
    }
    if (at[TUTORIAL_KEPT_ARRAYS] == SIZE_MAX) {
        PyErr_SetString(PyExc_MemoryError, "myatt.vjp(): the saved arrays' size overflows");
        return -1;
    }
    char *block = private_block_alloc(at[TUTORIAL_KEPT_ARRAYS], "myatt.vjp(): the saved arrays");
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
    tutorial_kept_inputs(kept, in);
    return 0;
}

/* ---- half precision: torch's ops one by one ------------------------------- */

/* A module of float16 or bfloat16 parameters computes what torch's MyAtt does
 * in that dtype: its ops one after the other, each myatt's own function
 * (entry_call_objects: torch's arithmetic for the op, its result rounded
 * once), on arrays of the dtype: cat, linear, softmax, bmm, cat, linear; the
 * backward as torch's autograd runs it (each op's backward, the two
 * gradients of attn_weights and of Q[0] added in the dtype). */

/* A view (rs, cs in elements; a 1-D one when cols < 0) of dt's data as an
 * array that does not own it (read only), or NULL */
static PyObject *view_array(const void *data, int64_t rows, int64_t cols, int64_t rs,
                            int64_t cs, const myatt_dtype *dt)
{
    npy_intp dims[2] = {rows, cols}, strides[2] = {rs * dt->itemsize, cs * dt->itemsize};
    if (cols < 0)
        strides[0] = cs * dt->itemsize;
    return PyArray_New(&PyArray_Type, cols < 0 ? 1 : 2, dims, dt->typenum, strides,
                       (void *)data, dt->itemsize, 0, NULL);
}

static PyObject *cmat_array(mk_cmat m, const myatt_dtype *dt)
{
    return view_array(m.data, m.rows, m.cols, m.rs, m.cs, dt);
}

/* in's arrays, as views: Q[0], K[0], V (3-D: [1, v1, v2]), attn.weight,
 * attn.bias, attn_combine.weight, attn_combine.bias; 0, or -1 (a[] released) */
enum { HALF_Q, HALF_K, HALF_V, HALF_W1, HALF_B1, HALF_W2, HALF_B2, HALF_INPUTS };

static int half_inputs(const tutorial_inputs *in, const myatt_dtype *dt,
                       PyObject *a[HALF_INPUTS])
{
    a[HALF_Q] = cmat_array(in->q, dt);
    a[HALF_K] = cmat_array(in->k, dt);
    PyObject *v2 = cmat_array(in->v, dt);
    npy_intp vdims[3] = {1, in->v.rows, in->v.cols};
    PyArray_Dims shape = {vdims, 3};
    a[HALF_V] = v2 != NULL ? PyArray_Newshape((PyArrayObject *)v2, &shape, NPY_CORDER) : NULL;
    Py_XDECREF(v2);
    a[HALF_W1] = cmat_array(in->w_attn, dt);
    a[HALF_B1] = view_array(in->b_attn, in->w_attn.rows, -1, 0, 1, dt);
    a[HALF_W2] = cmat_array(in->w_comb, dt);
    a[HALF_B2] = view_array(in->b_comb, in->w_comb.rows, -1, 0, 1, dt);
    for (int i = 0; i < HALF_INPUTS; i++)
        if (a[i] == NULL) {
            for (int j = 0; j < HALF_INPUTS; j++)
                Py_CLEAR(a[j]);
            return -1;
        }
    return 0;
}

/* cat((a, b), dim=-1) of two 2-D arrays */
static PyObject *cat2(PyObject *a, PyObject *b)
{
    PyObject *t = PyTuple_Pack(2, a, b);
    PyObject *r = t != NULL ? PyArray_Concatenate(t, 1) : NULL;
    Py_XDECREF(t);
    return r;
}

/* a (an array) reshaped to nd dimensions, or NULL */
static PyObject *reshaped(PyObject *a, int nd, npy_intp d0, npy_intp d1, npy_intp d2)
{
    npy_intp dims[3] = {d0, d1, d2};
    PyArray_Dims shape = {dims, nd};
    return a != NULL ? PyArray_Newshape((PyArrayObject *)a, &shape, NPY_CORDER) : NULL;
}

/* e(args...) called from C: n arguments */
static PyObject *op(const entry *e, PyObject *module, int n, PyObject *a0, PyObject *a1,
                    PyObject *a2, PyObject *a3)
{
    PyObject *const objs[4] = {a0, a1, a2, a3};
    for (int i = 0; i < n; i++)
        if (objs[i] == NULL)
            return NULL;
    return entry_call_objects(e, module, objs, n);
}

/* The forward: (output [1, S, o], attn_weights [S, v1]), and with kept, its
 * attn_weights and applied written to kept->aw and kept->applied. */
static PyObject *half_forward(PyObject *module, const myatt_dtype *dt,
                              const tutorial_inputs *in, tutorial_kept *kept)
{
    PyObject *a[HALF_INPUTS], *c1 = NULL, *scores = NULL, *aw = NULL, *ap = NULL, *c2 = NULL;
    PyObject *y = NULL, *result = NULL;
    const npy_intp S = in->q.rows, v1 = in->v.rows, v2 = in->v.cols, o = in->w_comb.rows;
    if (module == NULL || half_inputs(in, dt, a) < 0)
        return NULL;
    PyObject *aw3 = NULL, *ap2 = NULL;
    c1 = cat2(a[HALF_Q], a[HALF_K]);
    scores = op(&linear_entry, module, 3, c1, a[HALF_W1], a[HALF_B1], NULL);
    aw = op(&softmax_entry, module, 1, scores, NULL, NULL, NULL);
    aw3 = reshaped(aw, 3, 1, S, v1);
    ap = op(&bmm_entry, module, 2, aw3, a[HALF_V], NULL, NULL);
    ap2 = reshaped(ap, 2, S, v2, 0);
    c2 = ap2 != NULL ? cat2(a[HALF_Q], ap2) : NULL;
    y = op(&linear_entry, module, 3, c2, a[HALF_W2], a[HALF_B2], NULL);
    PyObject *out = reshaped(y, 3, 1, S, o);
    if (out != NULL) {
        if (kept != NULL) {   /* (C-contiguous results of the ops) */
            memcpy(kept->aw, PyArray_DATA((PyArrayObject *)aw), (size_t)(S * v1) * dt->itemsize);
            memcpy(kept->applied, PyArray_DATA((PyArrayObject *)ap),
                   (size_t)(S * v2) * dt->itemsize);
        }
        result = PyTuple_Pack(2, out, aw);
        Py_DECREF(out);
    }
    for (int i = 0; i < HALF_INPUTS; i++)
        Py_DECREF(a[i]);
    Py_XDECREF(c1);
    Py_XDECREF(scores);
    Py_XDECREF(aw);
    Py_XDECREF(aw3);
    Py_XDECREF(ap);
    Py_XDECREF(ap2);
    Py_XDECREF(c2);
    Py_XDECREF(y);
    return result;
}

/* The gradients (tutorial_grads_run's, for a half dtype): attn_weights and
 * applied from the forward (kept_aw, kept_ap, C-contiguous) or recomputed. */
static PyObject *half_grads(PyObject *module, const myatt_dtype *dt, const npy_intp dims[3][3],
                            const tutorial_inputs *in, mk_cmat go, const mk_cmat *ga,
                            const void *kept_aw, const void *kept_ap,
                            PyObject *const keys[TUTORIAL_GRADS])
{
    const npy_intp S = in->q.rows, dq = in->q.cols, dk = in->k.cols, v1 = in->v.rows;
    const npy_intp v2 = in->v.cols;
    PyObject *a[HALF_INPUTS], *fwd = NULL, *aw = NULL, *ap = NULL, *g = NULL, *gaw_user = NULL;
    PyObject *c1 = NULL, *c2 = NULL, *lin2 = NULL, *bmm = NULL, *gaw = NULL, *gs = NULL;
    PyObject *lin1 = NULL, *gq = NULL, *result = NULL;
    PyObject *grads[TUTORIAL_GRADS] = {NULL};
    if (module == NULL || half_inputs(in, dt, a) < 0)
        return NULL;
    if (kept_aw != NULL) {
        aw = view_array(kept_aw, S, v1, v1, 1, dt);
        ap = view_array(kept_ap, S, v2, v2, 1, dt);
    } else if ((fwd = half_forward(module, dt, in, NULL)) != NULL) {
        /* applied again: the forward's ops, which its result does not keep */
        aw = Py_NewRef(PyTuple_GET_ITEM(fwd, 1));
        PyObject *aw3 = reshaped(aw, 3, 1, S, v1);
        PyObject *ap3 = op(&bmm_entry, module, 2, aw3, a[HALF_V], NULL, NULL);
        ap = reshaped(ap3, 2, S, v2, 0);
        Py_XDECREF(aw3);
        Py_XDECREF(ap3);
    }
    if (aw == NULL || ap == NULL || (g = cmat_array(go, dt)) == NULL
            || (ga != NULL && (gaw_user = cmat_array(*ga, dt)) == NULL))
        goto fail;
    /* out = linear(cat(q, applied), W2, b2) */
    c2 = cat2(a[HALF_Q], ap);
    if ((lin2 = op(&linear_backward_entry, module, 4, g, c2, a[HALF_W2], a[HALF_B2])) == NULL)
        goto fail;
    PyArrayObject *gc2 = (PyArrayObject *)PyTuple_GET_ITEM(lin2, 0);
    PyObject *gq2 = view_array(PyArray_DATA(gc2), S, dq, dq + v2, 1, dt);
    PyObject *gap2 = view_array((char *)PyArray_DATA(gc2) + dq * dt->itemsize, S, v2, dq + v2,
                                1, dt);
    PyObject *gap = reshaped(gap2, 3, 1, S, v2);
    Py_XDECREF(gap2);
    /* applied = bmm(attn_weights[None], V) */
    PyObject *aw3 = reshaped(aw, 3, 1, S, v1);
    bmm = op(&bmm_backward_entry, module, 3, gap, aw3, a[HALF_V], NULL);
    Py_XDECREF(gap);
    Py_XDECREF(aw3);
    if (bmm == NULL) {
        Py_XDECREF(gq2);
        goto fail;
    }
    /* attn_weights' gradient: from the bmm, plus the caller's, added in the dtype */
    gaw = reshaped(PyTuple_GET_ITEM(bmm, 0), 2, S, v1, 0);
    if (gaw != NULL && gaw_user != NULL)
        Py_SETREF(gaw, PyNumber_Add(gaw, gaw_user));
    /* attn_weights = softmax(linear(cat(q, k), W1, b1)) */
    gs = gaw != NULL ? op(&softmax_backward_entry, module, 2, gaw, aw, NULL, NULL) : NULL;
    c1 = cat2(a[HALF_Q], a[HALF_K]);
    lin1 = op(&linear_backward_entry, module, 4, gs, c1, a[HALF_W1], a[HALF_B1]);
    if (lin1 == NULL || gq2 == NULL) {
        Py_XDECREF(gq2);
        goto fail;
    }
    PyArrayObject *gc1 = (PyArrayObject *)PyTuple_GET_ITEM(lin1, 0);
    PyObject *gq1 = view_array(PyArray_DATA(gc1), S, dq, dq + dk, 1, dt);
    gq = gq1 != NULL ? PyNumber_Add(gq1, gq2) : NULL;   /* Q[0] met twice */
    Py_XDECREF(gq1);
    Py_DECREF(gq2);
    if (gq == NULL)
        goto fail;
    /* Q and K: zero but for item 0; V, the parameters: the ops' results */
    for (int i = 0; i < 2; i++)
        if ((grads[i] = PyArray_ZEROS(3, (npy_intp *)dims[i], dt->typenum, 0)) == NULL)
            goto fail;
    mk_copy_view(PyArray_DATA((PyArrayObject *)grads[0]), cmat_of((PyArrayObject *)gq),
                 dt->itemsize);
    const mk_cmat gk = {(char *)PyArray_DATA(gc1) + dq * dt->itemsize, S, dk, dq + dk, 1};
    mk_copy_view(PyArray_DATA((PyArrayObject *)grads[1]), gk, dt->itemsize);
    grads[2] = Py_NewRef(PyTuple_GET_ITEM(bmm, 1));
    grads[3] = Py_NewRef(PyTuple_GET_ITEM(lin1, 1));
    grads[4] = Py_NewRef(PyTuple_GET_ITEM(lin1, 2));
    grads[5] = Py_NewRef(PyTuple_GET_ITEM(lin2, 1));
    grads[6] = Py_NewRef(PyTuple_GET_ITEM(lin2, 2));
    result = dict_of(keys, grads, TUTORIAL_GRADS);
fail:
    for (int i = 0; i < HALF_INPUTS; i++)
        Py_DECREF(a[i]);
    for (int i = 0; i < TUTORIAL_GRADS; i++)
        Py_XDECREF(grads[i]);
    Py_XDECREF(fwd);
    Py_XDECREF(aw);
    Py_XDECREF(ap);
    Py_XDECREF(g);
    Py_XDECREF(gaw_user);
    Py_XDECREF(c1);
    Py_XDECREF(c2);
    Py_XDECREF(lin2);
    Py_XDECREF(bmm);
    Py_XDECREF(gaw);
    Py_XDECREF(gs);
    Py_XDECREF(lin1);
    Py_XDECREF(gq);
    return result;
}

/* kept == NULL: MyAtt.forward.  Otherwise (myatt.vjp) the same result, and
 * *kept (zero-filled by the caller; released by it, also on error) gets what
 * the pullback reads: private copies of Q[0], K[0], V[0] and the parameters,
 * attn_weights (the result gets a copy of it) and all of applied. */
static PyObject *tutorial_forward_impl(MyAttObject *self, PyObject *Q, PyObject *K, PyObject *V,
                                    tutorial_kept *kept)
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
    tutorial_inputs in = tutorial_inputs_of(self, q, k, v);
    if (kept != NULL) {
        memcpy(kept->dims[0], PyArray_DIMS(rq), sizeof kept->dims[0]);
        memcpy(kept->dims[1], PyArray_DIMS(rk), sizeof kept->dims[1]);
        memcpy(kept->dims[2], PyArray_DIMS(rv), sizeof kept->dims[2]);
        if (keep_inputs(self, kept, &in) < 0)
            goto fail;
    }

    if (dtype_is_half(dt)) {
        result = half_forward(myatt_module_of_type(Py_TYPE(self)), dt, &in, kept);
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
    rc = kept != NULL ? tutorial_forward_kept_kernels[dt->kernel](od, kept->aw, kept->applied, &in)
                      : tutorial_forward_kernels[dt->kernel](od, wd, &in);
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

static PyObject *tutorial_forward_qkv(MyAttObject *self, PyObject *Q, PyObject *K, PyObject *V)
{
    return tutorial_forward_impl(self, Q, K, V, NULL);
}

/* Q, K, V of a call, parsed as the forward's methods parse them (`format` names
 * the method): 0, or -1 with the parser's TypeError. */
static int parse_qkv(PyObject *args, PyObject *kwds, const char *format, PyObject **Q,
                     PyObject **K, PyObject **V)
{
    static char *kwlist[] = {"Q", "K", "V", NULL};
    return PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, Q, K, V) ? 0 : -1;
}


static PyObject *MyAtt_call(MyAttObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *Q, *K, *V;
    if (parse_qkv(args, kwds, "OOO:MyAtt.__call__", &Q, &K, &V) < 0)
        return NULL;
    return tutorial_forward_qkv(self, Q, K, V);
}

static PyObject *MyAtt_forward(MyAttObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *Q, *K, *V;
    if (parse_qkv(args, kwds, "OOO:MyAtt.forward", &Q, &K, &V) < 0)
        return NULL;
    return tutorial_forward_qkv(self, Q, K, V);
}

/* m(Q, K, V) (a subclass's own forward if it has one) and m.forward(Q, K, V):
 * three positional arguments go straight to myatt_forward; any other call
 * (keywords, a wrong count) takes the tuple path above, so its parsing and
 * messages are PyArg_ParseTupleAndKeywords'. */
PyObject *MyAtt_forward_fast(MyAttObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return tutorial_forward_qkv(self, args[0], args[1], args[2]);
    return call_with_tuple((PyObject *)self, args, nargs, kwnames, (ternaryfunc)MyAtt_forward);
}

PyObject *MyAtt_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames)
{
    PyObject *result;
    if (subclass_forward(self, (PyCFunction)(void (*)(void))MyAtt_forward_fast, args, nargsf,
                         kwnames, &result))
        return result;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return tutorial_forward_qkv((MyAttObject *)self, args[0], args[1], args[2]);
    return call_with_tuple(self, args, nargs, kwnames, (ternaryfunc)MyAtt_call);
}

PyObject *MyAtt_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
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

static PyObject *tutorial_grads_run(PyObject *module, const myatt_dtype *dt,
                                    const npy_intp dims[3][3], const tutorial_inputs *in,
                                    mk_cmat go, const mk_cmat *ga, const void *kept_aw,
                                    const void *kept_ap, const char *what,
                                    PyObject *const keys[TUTORIAL_GRADS])
{
    if (dtype_is_half(dt))
        return half_grads(module, dt, dims, in, go, ga, kept_aw, kept_ap, keys);
    static const char *const grad_names[TUTORIAL_GRADS] = {
        "the gradient of Q", "the gradient of K", "the gradient of V",
        "the gradient of attn.weight", "the gradient of attn.bias",
        "the gradient of attn_combine.weight", "the gradient of attn_combine.bias"};
    const int typenum = dt->typenum;
    const npy_intp v1 = in->w_attn.rows, o = in->w_comb.rows;
    const npy_intp shapes[4][2] = {{v1, in->w_attn.cols}, {v1}, {o, in->w_comb.cols}, {o}};
    PyArrayObject *g[TUTORIAL_GRADS] = {NULL};
    PyObject *result = NULL;
    /* Q and K gradients are zero outside batch item 0, which the kernel writes. */
    for (int i = 0; i < TUTORIAL_GRADS; i++) {
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
    rc = kept_aw != NULL
             ? tutorial_backward_kept_kernels[dt->kernel](&grads, go, ga, in, kept_aw, kept_ap)
             : tutorial_backward_kernels[dt->kernel](&grads, go, ga, in);
    MYATT_END_COMPUTE
    if (rc < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    result = dict_of(keys, (PyObject *const *)g, TUTORIAL_GRADS);
fail:
    for (int i = 0; i < TUTORIAL_GRADS; i++)
        Py_XDECREF(g[i]);
    return result;
}

static PyObject *tutorial_backward_qkv(MyAttObject *self, PyObject *Q, PyObject *K, PyObject *V,
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
    const tutorial_inputs in = tutorial_inputs_of(self, q, k, v);
    const mk_cmat gav = ga != NULL ? cmat_of(ga) : (mk_cmat){NULL};
    const myatt_state *st = myatt_state_of_type(Py_TYPE(self));
    if (st == NULL)
        goto fail;
    result = tutorial_grads_run(myatt_module_of_type(Py_TYPE(self)), dt,
                                (const npy_intp (*)[3])dims, &in, go,
                             ga != NULL ? &gav : NULL, NULL, NULL, "MyAtt.backward()",
                             st->tutorial_grad_keys);
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

const char MyAtt_backward_doc[] = PyDoc_STR(
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

PyObject *MyAtt_backward(MyAttObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"Q", "K", "V", "grad_output", "grad_attn_weights", NULL};
    PyObject *Q, *K, *V, *GO, *GA = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|O:MyAtt.backward", kwlist,
                                     &Q, &K, &V, &GO, &GA))
        return NULL;
    return tutorial_backward_qkv(self, Q, K, V, GO, GA);
}

/* forward's and __call__'s docstrings but for their first lines and examples */
#define MYATT_APPLY_DOC                                                         \
"\n"                                                                            \
"Only batch item 0 of `Q` and `K` is used, as in the original.\n"               \
"\n"                                                                            \
"Parameters\n"                                                                  \
"----------\n"                                                                  \
"Q : array_like, shape (Bq, S, query_size)\n"                                   \
"K : array_like, shape (Bk, S, key_size)\n"                                     \
"    As many rows S as `Q`.\n"                                                  \
"V : array_like, shape (1, value_size1, value_size2)\n"                         \
"\n"                                                                            \
"Returns\n"                                                                     \
"-------\n"                                                                     \
"output : ndarray, shape (1, S, output_size)\n"                                 \
"attn_weights : ndarray, shape (S, value_size1)\n"                              \
"    Each row sums to 1. Both new arrays in the module's dtype.\n"              \
"\n"                                                                            \
"Raises\n"                                                                      \
"------\n"                                                                      \
"TypeError\n"                                                                   \
"    If an operand is not an array of real numbers.\n"                          \
"ValueError\n"                                                                  \
"    If an operand is not 3-D, a batch is empty, or the shapes do not match\n"  \
"    the sizes (the message gives them).\n"                                     \
"MemoryError\n"                                                                 \
"    If a result or a workspace cannot be allocated.\n"                         \
"\n"                                                                            \
"Examples\n"                                                                    \
"--------\n"                                                                    \
">>> m = myatt.MyAtt(3, 2, 4, 5, 6, dtype='float64')\n"                         \
">>> sd = {k: np.zeros(v.shape) for k, v in m.state_dict().items()}\n"          \
">>> sd['attn_combine.bias'] = np.arange(6.0)\n"                                \
">>> m.load_state_dict(sd)\n"                                                   \
"([], [])\n"                                                                    \
">>> Q, K, V = np.ones((2, 7, 3)), np.ones((1, 7, 2)), np.ones((1, 4, 5))\n"

#define MYATT_APPLY_DOC_END                                                     \
">>> attn_weights[0]\n"                                                         \
"array([0.25, 0.25, 0.25, 0.25])\n"                                             \
">>> output[0, 0]\n"                                                            \
"array([0., 1., 2., 3., 4., 5.])"

const char MyAtt_forward_doc[] = PyDoc_STR(
"forward($self, Q, K, V)\n--\n\n"
"The attention: output and attention weights.\n"
MYATT_APPLY_DOC
">>> output, attn_weights = m.forward(Q, K, V)\n"
MYATT_APPLY_DOC_END);

const char MyAtt_call_doc[] = PyDoc_STR(
"__call__($self, Q, K, V)\n--\n\n"
"The attention: the same as `forward`.\n"
MYATT_APPLY_DOC
">>> output, attn_weights = m(Q, K, V)\n"
MYATT_APPLY_DOC_END);

/* ---- myatt.vjp (vjp.h) ------------------------------------------------------ */

/* The shapes of what a MyAtt pullback keeps, in the block's and the repr's
 * order (Q[0], K[0], V[0], attn.weight, attn.bias, attn_combine.weight,
 * attn_combine.bias, attn_weights, applied), from in's views of q, k, v and
 * the weights: ndim[i] is 2, or 1 for the biases (their length dims[i][0]). */
static const char *const tutorial_kept_names[TUTORIAL_KEPT_ARRAYS] = {
    "Q[0]", "K[0]", "V[0]", "attn.weight", "attn.bias", "attn_combine.weight",
    "attn_combine.bias", "attn_weights", "applied"};

static void tutorial_kept_shapes(const tutorial_inputs *in, int ndim[TUTORIAL_KEPT_ARRAYS],
                                 npy_intp dims[TUTORIAL_KEPT_ARRAYS][2])
{
    const npy_intp S = in->q.rows, v1 = in->w_attn.rows, o = in->w_comb.rows;
    const npy_intp shapes[TUTORIAL_KEPT_ARRAYS][2] = {
        {S, in->q.cols}, {S, in->k.cols}, {v1, in->v.cols}, {v1, in->w_attn.cols}, {v1, 1},
        {o, in->w_comb.cols}, {o, 1}, {S, v1}, {S, in->v.cols}};
    for (int i = 0; i < TUTORIAL_KEPT_ARRAYS; i++) {
        ndim[i] = i == 4 || i == 6 ? 1 : 2;   /* the biases */
        dims[i][0] = shapes[i][0];
        dims[i][1] = shapes[i][1];
    }
}

/* The kernel inputs read from kept's copies (q, k, v and the parameters). */
static void tutorial_kept_inputs(const tutorial_kept *kept, tutorial_inputs *in)
{
    *in = (tutorial_inputs){
        .q = kept->q, .k = kept->k, .v = kept->v, .w_attn = kept->w_attn,
        .w_comb = kept->w_comb, .b_attn = kept->b_attn, .b_comb = kept->b_comb,
    };
}

/* m(*args) of a MyAtt (a vectorcall's arguments, parsed as MyAtt.__call__),
 * filling *kept */
static PyObject *tutorial_vjp_forward(PyObject *module, PyObject *self, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames, void *kept)
{
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return tutorial_forward_impl((MyAttObject *)self, args[0], args[1], args[2], kept);
    PyObject *kwds, *tuple = tuple_and_kwargs(args, nargs, kwnames, &kwds), *Q, *K, *V;
    PyObject *result = NULL;
    if (tuple != NULL && parse_qkv(tuple, kwds, "OOO:MyAtt.__call__", &Q, &K, &V) == 0)
        result = tutorial_forward_impl((MyAttObject *)self, Q, K, V, kept);
    Py_XDECREF(tuple);
    Py_XDECREF(kwds);
    return result;
}

static PyObject *tutorial_vjp_pull(PyObject *module, const void *kept_, PyArrayObject *rgo,
                                   PyObject *GA)
{
    const tutorial_kept *kp = kept_;
    const int typenum = kp->dtype->typenum;
    PyArrayObject *rga = NULL, *hgo = NULL, *ga = NULL;
    PyObject *result = NULL;
    mk_cmat go;
    const npy_intp ga_dims[2] = {kp->q.rows, kp->w_attn.rows};   /* attn_weights' */
    if (GA != NULL
            && ((rga = as_real_array(GA, "pullback(): grad_attn_weights")) == NULL
                || check_cotangent(rga, 2, ga_dims, "grad_attn_weights") < 0))
        goto fail;
    if (batch0_view(rgo, typenum, "pullback(): grad_output", &hgo, &go) < 0
            || (rga != NULL
                && (ga = cast_array(rga, typenum, 0, "pullback(): grad_attn_weights")) == NULL))
        goto fail;
    tutorial_inputs in;
    tutorial_kept_inputs(kp, &in);
    const mk_cmat gav = ga != NULL ? cmat_of(ga) : (mk_cmat){NULL};
    result = tutorial_grads_run(module, kp->dtype, (const npy_intp (*)[3])kp->dims, &in, go,
                                ga != NULL ? &gav : NULL, kp->aw, kp->applied, "pullback()",
                                myatt_state_of_module(module)->tutorial_grad_keys);
fail:
    Py_XDECREF(rga);
    Py_XDECREF(hgo);
    Py_XDECREF(ga);
    return result;
}

/* The kept arrays as views of the block (for repr and nbytes only) */
static int tutorial_vjp_held(const void *kept_, PyObject *held)
{
    const tutorial_kept *kept = kept_;
    if (kept->block == NULL)
        return 0;
    tutorial_inputs in;
    tutorial_kept_inputs(kept, &in);
    int ndim[TUTORIAL_KEPT_ARRAYS];
    npy_intp dims[TUTORIAL_KEPT_ARRAYS][2];
    tutorial_kept_shapes(&in, ndim, dims);
    const void *data[TUTORIAL_KEPT_ARRAYS] = {kept->q.data, kept->k.data, kept->v.data,
                                              kept->w_attn.data, kept->b_attn,
                                              kept->w_comb.data, kept->b_comb, kept->aw,
                                              kept->applied};
    for (int i = 0; i < TUTORIAL_KEPT_ARRAYS; i++) {
        PyObject *view = PyArray_SimpleNewFromData(ndim[i], dims[i], kept->dtype->typenum,
                                                   (void *)data[i]);
        if (held_append(held, tutorial_kept_names[i], view) < 0)
            return -1;
    }
    return 0;
}

static void tutorial_vjp_clear(void *kept)
{
    private_block_free(((tutorial_kept *)kept)->block);
    ((tutorial_kept *)kept)->block = NULL;
}

const vjp_kind tutorial_vjp = {
    .name = "MyAtt", .kept_size = sizeof(tutorial_kept), .attn_weights = 1,
    .forward = tutorial_vjp_forward, .pull = tutorial_vjp_pull, .held = tutorial_vjp_held,
    .clear = tutorial_vjp_clear,
};
