/* MultiheadAttention's forward and vjp kind: the calls of the module
 * (mha_type.h) on the composed kernel of kernels/mha/ (linear, sdpa or bmm and
 * softmax, linear over strided views of its projections). */
#include "mha_type.h"

#include "vjp.h"

#include "kernels/mha/mha.h"
#include "kernels/runtime/half.h"

#include <math.h>
#include <string.h>

DTYPE_KERNELS(mha_forward);
DTYPE_KERNELS(mha_backward);

/* What a MultiheadAttention forward keeps for its pullback (myatt.vjp): private
 * copies (new references, C-contiguous, in the module's dtype) of query, key,
 * value (shared where the call passed one array), the masks as the kernel read
 * them, the parameters in state_dict order (NULL where the configuration has
 * none), the problem pointing into them, and the kernel's kept buffers. */
enum { MHA_IN_QUERY, MHA_IN_KEY, MHA_IN_VALUE, MHA_IN_KEY_PADDING_MASK, MHA_IN_ATTN_MASK,
       MHA_KEPT_INPUTS };
enum { MHA_KEPT_PARAMS = P_COUNT + 2 };
typedef struct {
    const myatt_dtype *dtype;
    PyArrayObject *inputs[MHA_KEPT_INPUTS];   /* by MHA_IN_* */
    PyArrayObject *params[MHA_KEPT_PARAMS];
    mha_problem p;
    mha_saved s;
    int wnd;                                  /* the weights' ndim (0: need_weights=False) */
    npy_intp wdims[4];
    PyObject *half_backward;                  /* a half module: _mha_half's backward */
} mha_kept;

void mha_all_params(MHAObject *self, PyArrayObject **params)
{
    for (int p = 0; p < P_COUNT; p++)
        params[p] = self->param[p];
    params[P_COUNT] = self->out_proj->weight;
    params[P_COUNT + 1] = self->out_proj->bias;
}

/* What forward converts and holds, released by args_clear. */
typedef struct {
    PyArrayObject *q, *k, *v;       /* C-contiguous, of the module's dtype */
    PyArrayObject *kpm, *am;        /* masks as float arrays of the module's dtype, or NULL */
} mha_args;

static void args_clear(mha_args *a)
{
    Py_XDECREF(a->q);
    Py_XDECREF(a->k);
    Py_XDECREF(a->v);
    Py_XDECREF(a->kpm);
    Py_XDECREF(a->am);
}

/* A mask as torch's _canonical_mask leaves it: a bool one as 0 / -inf (True =
 * ignored), a floating one as it is (in the module's dtype); other dtypes are
 * a TypeError.  New reference (C-contiguous), or NULL. */
static PyArrayObject *canonical_mask(PyArrayObject *m, const char *name, const myatt_dtype *dt)
{
    const int t = PyArray_TYPE(m);
    if (t != NPY_BOOL && !PyTypeNum_ISFLOAT(t) && dtype_of_typenum(t) == NULL) {   /* (bfloat16) */
        PyErr_Format(PyExc_TypeError, FWD "%s must be bool or floating point, got dtype %S",
                     name, (PyObject *)PyArray_DESCR(m));
        return NULL;
    }
    char what[64];
    snprintf(what, sizeof what, FWD "%s", name);
    if (t != NPY_BOOL)
        return cast_array(m, dt->typenum, 1, what);
    PyArrayObject *b = cast_array(m, NPY_BOOL, 1, what);
    if (b == NULL)
        return NULL;
    PyArrayObject *f = (PyArrayObject *)new_array(PyArray_NDIM(b), PyArray_DIMS(b),
                                                 dt->typenum, what);
    if (f != NULL) {
        const npy_bool *src = PyArray_DATA(b);
        const npy_intp n = PyArray_SIZE(b);
        if (dtype_is_half(dt)) {   /* -inf's bits in the dtype */
            const uint16_t inf = dtype_half_kind(dt) == MK_HALF_BF16 ? mk_bf16_of_f32(-INFINITY)
                                                                     : mk_f16_of_f32(-INFINITY);
            uint16_t *d = PyArray_DATA(f);
            for (npy_intp i = 0; i < n; i++)
                d[i] = src[i] ? inf : 0;
        } else if (dt->itemsize == 4) {
            float *d = PyArray_DATA(f);
            for (npy_intp i = 0; i < n; i++)
                d[i] = src[i] ? -INFINITY : 0.0f;
        } else {
            double *d = PyArray_DATA(f);
            for (npy_intp i = 0; i < n; i++)
                d[i] = src[i] ? -INFINITY : 0.0;
        }
    }
    Py_DECREF(b);
    return f;
}

static int shape_error(const char *what, const char *want, PyArrayObject *a)
{
    char got[SHAPE_STR_LEN];
    PyErr_Format(PyExc_ValueError, FWD "%s must have shape %s, got %s", what, want,
                 SHAPE_OF(got, a));
    return -1;
}

/* The call's arrays as given (as_real_array; one reference where the call
 * passed one object twice), into r.  0, or -1 with an exception (r cleared). */
static int read_args(PyObject *q_obj, PyObject *k_obj, PyObject *v_obj, PyObject *kpm_obj,
                     PyObject *am_obj, mha_args *r)
{
    memset(r, 0, sizeof *r);
    if ((r->q = as_real_array(q_obj, FWD "query")) == NULL)
        goto fail;
    r->k = k_obj == q_obj ? (PyArrayObject *)Py_NewRef(r->q) : as_real_array(k_obj, FWD "key");
    if (r->k == NULL)
        goto fail;
    r->v = v_obj == k_obj ? (PyArrayObject *)Py_NewRef(r->k)
           : v_obj == q_obj ? (PyArrayObject *)Py_NewRef(r->q)
                            : as_real_array(v_obj, FWD "value");
    if (r->v == NULL)
        goto fail;
    if (kpm_obj != Py_None && (r->kpm = as_real_array(kpm_obj, FWD "key_padding_mask")) == NULL)
        goto fail;
    if (am_obj != Py_None && (r->am = as_real_array(am_obj, FWD "attn_mask")) == NULL)
        goto fail;
    return 0;
fail:
    args_clear(r);
    return -1;
}

/* 1. torch's _mha_shape_check: a batched (3-D) or unbatched (2-D) call, the
 * others' ndim matching.  1 (batched) or 0, or -1 with ValueError. */
static int check_ndims(const mha_args *r)
{
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    const int nq = PyArray_NDIM(r->q);
    if (nq != 2 && nq != 3) {
        PyErr_Format(PyExc_ValueError, FWD "query must be 2-D (unbatched) or 3-D (batched), "
                     "got shape %s", SHAPE_OF(s1, r->q));
        return -1;
    }
    if (PyArray_NDIM(r->k) != nq || PyArray_NDIM(r->v) != nq) {
        PyErr_Format(PyExc_ValueError, FWD "for a %d-D query, key and value must be %d-D too, "
                     "got shapes %s and %s", nq, nq, SHAPE_OF(s1, r->k), SHAPE_OF(s2, r->v));
        return -1;
    }
    if (r->kpm != NULL && PyArray_NDIM(r->kpm) != nq - 1) {
        PyErr_Format(PyExc_ValueError, FWD "for a %d-D query, key_padding_mask must be %d-D, "
                     "got shape %s", nq, nq - 1, SHAPE_OF(s1, r->kpm));
        return -1;
    }
    if (r->am != NULL && PyArray_NDIM(r->am) != 2 && PyArray_NDIM(r->am) != 3) {
        PyErr_Format(PyExc_ValueError, FWD "attn_mask must be 2-D or 3-D, got shape %s",
                     SHAPE_OF(s1, r->am));
        return -1;
    }
    return nq == 3;
}

/* 2. the sizes: (L, N, E) of query, (S, N) of key and value (batch_first
 * swaps L and N), into p; key and value checked against them.  0, or -1 with
 * ValueError. */
static int check_sizes(MHAObject *self, const mha_args *r, int batched, mha_problem *p)
{
    char want[SHAPE_STR_LEN];
    const int nq = PyArray_NDIM(r->q), bf = batched && self->batch_first;
    const int ax_len = bf ? 1 : 0, ax_n = bf ? 0 : 1;
    p->batch_first = bf;
    p->L = PyArray_DIM(r->q, batched ? ax_len : 0);
    p->S = PyArray_DIM(r->k, batched ? ax_len : 0);
    p->N = batched ? PyArray_DIM(r->q, ax_n) : 1;
    p->E = self->embed_dim;
    p->H = self->num_heads;
    const char *form = !batched ? "[L, E]" : bf ? "[N, L, E]" : "[L, N, E]";
    if (PyArray_DIM(r->q, nq - 1) != p->E) {
        snprintf(want, sizeof want, "%s with E = embed_dim = %zd", form, (Py_ssize_t)p->E);
        return shape_error("query", want, r->q);
    }
    const char *kform = !batched ? "[S, %s = %zd]" : bf ? "[N = %zd, S, %s = %zd]"
                                                        : "[S, N = %zd, %s = %zd]";
    PyArrayObject *kv[2] = {r->k, r->v};
    const char *kv_names[2] = {"key", "value"}, *dim_names[2] = {"kdim", "vdim"};
    const Py_ssize_t dims[2] = {self->kdim, self->vdim};
    for (int t = 0; t < 2; t++) {
        PyArrayObject *x = kv[t];
        if (PyArray_DIM(x, nq - 1) == dims[t] && (!batched || PyArray_DIM(x, ax_n) == p->N)
            && PyArray_DIM(x, batched ? ax_len : 0) == p->S)
            continue;
        if (batched)
            snprintf(want, sizeof want, kform, (Py_ssize_t)p->N, dim_names[t], dims[t]);
        else
            snprintf(want, sizeof want, kform, dim_names[t], dims[t]);
        if (t == 1)   /* as many rows as key */
            snprintf(want + strlen(want), sizeof want - strlen(want), " with key's S = %zd",
                     (Py_ssize_t)p->S);
        return shape_error(kv_names[t], want, x);
    }
    return 0;
}

/* 2, the masks: key_padding_mask (N, S) or (S,), attn_mask (L, S) or
 * (N * num_heads, L, S), against the sizes in p.  0, or -1 with ValueError. */
static int check_mask_sizes(const mha_args *r, int batched, const mha_problem *p)
{
    char want[SHAPE_STR_LEN];
    const Py_ssize_t L = p->L, S = p->S, N = p->N;
    if (r->kpm != NULL && (batched ? PyArray_DIM(r->kpm, 0) != N || PyArray_DIM(r->kpm, 1) != S
                                   : PyArray_DIM(r->kpm, 0) != S)) {
        if (batched)
            snprintf(want, sizeof want, "(N, S) = (%zd, %zd)", N, S);
        else
            snprintf(want, sizeof want, "(S,) = (%zd,)", S);
        return shape_error("key_padding_mask", want, r->kpm);
    }
    if (r->am != NULL) {
        const int n3 = PyArray_NDIM(r->am) == 3;
        const Py_ssize_t b3 = batched ? N * p->H : p->H;
        if (PyArray_DIM(r->am, n3) == L && PyArray_DIM(r->am, n3 + 1) == S
            && (!n3 || PyArray_DIM(r->am, 0) == b3))
            return 0;
        if (n3)
            snprintf(want, sizeof want, "(%s, L, S) = (%zd, %zd, %zd)",
                     batched ? "N * num_heads" : "num_heads", b3, L, S);
        else
            snprintf(want, sizeof want, "(L, S) = (%zd, %zd)", L, S);
        return shape_error("attn_mask", want, r->am);
    }
    return 0;
}

/* 3. the checked arrays r in the module's dtype, C-contiguous (one copy of a
 * shared array), the masks canonical, into a.  0, or -1 with an exception
 * (a cleared). */
static int convert_args(const myatt_dtype *dt, const mha_args *r, mha_args *a)
{
    memset(a, 0, sizeof *a);
    if ((a->q = cast_array(r->q, dt->typenum, 1, FWD "query")) == NULL)
        goto fail;
    a->k = r->k == r->q ? (PyArrayObject *)Py_NewRef(a->q)
                        : cast_array(r->k, dt->typenum, 1, FWD "key");
    if (a->k == NULL)
        goto fail;
    a->v = r->v == r->k ? (PyArrayObject *)Py_NewRef(a->k)
           : r->v == r->q ? (PyArrayObject *)Py_NewRef(a->q)
                          : cast_array(r->v, dt->typenum, 1, FWD "value");
    if (a->v == NULL)
        goto fail;
    if (r->kpm != NULL && (a->kpm = canonical_mask(r->kpm, "key_padding_mask", dt)) == NULL)
        goto fail;
    if (r->am != NULL) {
        /* a 3-D mask that is one [L, S] broadcast over its N*H items (np.broadcast_to,
         * torch's expand) is converted once: its zero-stride item dimension becomes 1;
         * an [L, S] mask is read as [L, S] whatever its strides */
        PyArrayObject *m = squeeze_broadcast(r->am, PyArray_NDIM(r->am) == 3 ? 1 : 0);
        if (m == NULL)
            goto fail;
        a->am = canonical_mask(m, "attn_mask", dt);
        Py_DECREF(m);
        if (a->am == NULL)
            goto fail;
    }
    return 0;
fail:
    args_clear(a);
    memset(a, 0, sizeof *a);
    return -1;
}

/* Converts and checks the inputs in torch's order (_mha_shape_check, then the
 * sizes); fills *a and the problem but for its parameters (problem_params).
 * 0, or -1 with an exception. */
static int forward_args(MHAObject *self, PyObject *q_obj, PyObject *k_obj, PyObject *v_obj,
                        PyObject *kpm_obj, PyObject *am_obj, mha_args *a, mha_problem *p,
                        int *batched)
{
    mha_args r;
    memset(a, 0, sizeof *a);
    memset(p, 0, sizeof *p);
    if (read_args(q_obj, k_obj, v_obj, kpm_obj, am_obj, &r) < 0)
        return -1;
    *batched = check_ndims(&r);
    const int ok = *batched >= 0 && check_sizes(self, &r, *batched, p) == 0
                   && check_mask_sizes(&r, *batched, p) == 0
                   && convert_args(self->dtype, &r, a) == 0;
    args_clear(&r);
    if (!ok)
        return -1;
    p->query = PyArray_DATA(a->q);
    p->key = PyArray_DATA(a->k);
    p->value = PyArray_DATA(a->v);
    p->key_padding_mask = a->kpm != NULL ? PyArray_DATA(a->kpm) : NULL;
    p->attn_mask = a->am != NULL ? PyArray_DATA(a->am) : NULL;
    p->attn_mask_3d = a->am != NULL && PyArray_NDIM(a->am) == 3;
    p->attn_mask_stride = p->attn_mask_3d && PyArray_DIM(a->am, 0) > 1 ? p->L * p->S : 0;
    /* torch's _in_projection_packed: one GEMM for query is key is value (the
     * same object), two for key is value; separate weights: three */
    const int packed = self->param[P_IN] != NULL;
    p->qkv_same = packed && q_obj == k_obj && k_obj == v_obj;
    p->kv_same = packed && !p->qkv_same && k_obj == v_obj;
    return 0;
}

/* The parameters' views in the problem, from params in state_dict order
 * (all_params). */
static void problem_params(MHAObject *self, PyArrayObject *const *params, mha_problem *p)
{
    const Py_ssize_t E = self->embed_dim;
    if (params[P_IN] != NULL) {   /* rows 0, E, 2E of [3E, E], in either layout */
        const mk_cmat w = cmat_of(params[P_IN]);
        const size_t isz = (size_t)self->dtype->itemsize;
        p->w_q = mk_cblock(w, 0, 0, E, E, isz);
        p->w_k = mk_cblock(w, E, 0, E, E, isz);
        p->w_v = mk_cblock(w, 2 * E, 0, E, E, isz);
    } else {
        p->w_q = cmat_of(params[P_Q]);
        p->w_k = cmat_of(params[P_K]);
        p->w_v = cmat_of(params[P_V]);
    }
    p->b_in = params[P_IN_BIAS] != NULL ? PyArray_DATA(params[P_IN_BIAS]) : NULL;
    p->bias_k = params[P_BIAS_K] != NULL ? PyArray_DATA(params[P_BIAS_K]) : NULL;
    p->bias_v = params[P_BIAS_V] != NULL ? PyArray_DATA(params[P_BIAS_V]) : NULL;
    p->add_zero_attn = self->add_zero_attn;
    p->w_out = cmat_of(params[P_COUNT]);
    p->b_out = params[P_COUNT + 1] != NULL ? PyArray_DATA(params[P_COUNT + 1]) : NULL;
}


/* myatt.vjp's private copies of the converted inputs (one copy of a shared
 * array) and of the parameters, and the problem pointed at them. */
static int keep_copies(MHAObject *self, const mha_args *a, mha_problem *p, mha_kept *keep)
{
    PyArrayObject *in[MHA_KEPT_INPUTS] = {a->q, a->k, a->v, a->kpm, a->am};   /* MHA_IN_* */
    for (int i = 0; i < MHA_KEPT_INPUTS; i++) {
        int j = 0;
        while (j < i && in[j] != in[i])
            j++;
        keep->inputs[i] = in[i] == NULL ? NULL
                          : j < i ? (PyArrayObject *)Py_NewRef(keep->inputs[j])
                          : copy_array(in[i]);
        if (in[i] != NULL && keep->inputs[i] == NULL)
            return -1;
    }
    PyArrayObject *params[MHA_KEPT_PARAMS];
    mha_all_params(self, params);
    for (int i = 0; i < MHA_KEPT_PARAMS; i++)
        if (params[i] != NULL
                && (keep->params[i] = copy_array(params[i]))
                   == NULL)
            return -1;
    keep->dtype = self->dtype;
    problem_params(self, keep->params, p);
    p->query = PyArray_DATA(keep->inputs[MHA_IN_QUERY]);
    p->key = PyArray_DATA(keep->inputs[MHA_IN_KEY]);
    p->value = PyArray_DATA(keep->inputs[MHA_IN_VALUE]);
    if (p->key_padding_mask != NULL)
        p->key_padding_mask = PyArray_DATA(keep->inputs[MHA_IN_KEY_PADDING_MASK]);
    if (p->attn_mask != NULL)
        p->attn_mask = PyArray_DATA(keep->inputs[MHA_IN_ATTN_MASK]);
    return 0;
}

/* A module of float16 or bfloat16 parameters computes what torch's does in
 * that dtype: torch's ops one by one, myatt's functions composed in
 * myatt/_mha_half.py on the checked arrays (in: MHA_IN_*, params in state_dict
 * order).  (out, weights or None); with backward, its callable is stored
 * there (myatt.vjp's pullback). */
static PyObject *half_forward(const mha_problem *p, PyArrayObject *const *in,
                              PyArrayObject *const *params, int batched, PyObject **backward)
{
    PyObject *mod = PyImport_ImportModule("myatt._mha_half");
    PyObject *ptuple = mod != NULL ? PyTuple_New(MHA_KEPT_PARAMS) : NULL, *r = NULL;
    if (ptuple == NULL)
        goto done;
    for (int i = 0; i < MHA_KEPT_PARAMS; i++)
        PyTuple_SET_ITEM(ptuple, i, Py_NewRef(params[i] != NULL ? (PyObject *)params[i] : Py_None));
#define OR_NONE(a) ((a) != NULL ? (PyObject *)(a) : Py_None)
    r = PyObject_CallMethod(mod, backward != NULL ? "forward_kept" : "forward",
                            "OOOOOOniiiiiiiidK", ptuple, in[MHA_IN_QUERY], in[MHA_IN_KEY],
                            in[MHA_IN_VALUE], OR_NONE(in[MHA_IN_KEY_PADDING_MASK]),
                            p->attn_mask != NULL ? (PyObject *)in[MHA_IN_ATTN_MASK] : Py_None,
                            (Py_ssize_t)p->H, batched, p->batch_first, p->qkv_same, p->kv_same,
                            p->add_zero_attn, p->need_weights, p->average_weights, p->is_causal,
                            p->dropout_p, (unsigned long long)p->dropout_seed);
#undef OR_NONE
    if (r != NULL && backward != NULL) {   /* ((out, weights), backward) */
        *backward = Py_NewRef(PyTuple_GET_ITEM(r, 1));
        Py_SETREF(r, Py_NewRef(PyTuple_GET_ITEM(r, 0)));
    }
done:
    Py_XDECREF(mod);
    Py_XDECREF(ptuple);
    return r;
}

/* The forward; keep: NULL, or what myatt.vjp keeps (mha_kept). */
static PyObject *mha_forward(MHAObject *self, PyObject *q_obj, PyObject *k_obj, PyObject *v_obj,
                             PyObject *kpm_obj, int need_weights, PyObject *am_obj, int average,
                             int is_causal, mha_kept *keep)
{
    mha_args a;
    mha_problem p;
    int batched;
    PyObject *out = NULL, *weights = NULL, *result = NULL;
    if (module_built((PyObject *)self, OWNER) < 0
            || forward_args(self, q_obj, k_obj, v_obj, kpm_obj, am_obj, &a, &p, &batched) < 0)
        return NULL;
    PyArrayObject *params[MHA_KEPT_PARAMS];
    mha_all_params(self, params);
    problem_params(self, params, &p);
    /* is_causal: torch's hint.  It needs attn_mask; on the flash path without a
     * key_padding_mask the causal triangle replaces attn_mask. */
    if (is_causal && a.am == NULL) {
        PyErr_SetString(PyExc_ValueError, FWD "is_causal=True needs attn_mask (it is a hint "
                        "that attn_mask is causal, as in torch)");
        goto done;
    }
    if (is_causal && a.kpm == NULL && !need_weights) {
        p.attn_mask = NULL;
        p.attn_mask_3d = 0;
        p.is_causal = 1;
    }
    p.need_weights = need_weights;
    p.average_weights = average;
    p.dropout_p = self->training ? self->dropout : 0.0;   /* torch: F.dropout(training=) */
    if (p.dropout_p > 0) {   /* one draw of myatt's generator (GIL held) seeds the mask */
        myatt_state *st = myatt_state_of_type(Py_TYPE(self));
        if (st == NULL)
            goto done;
        p.dropout_seed = mt19937_random64(&st->rng);
    }

    const npy_intp L = p.L, N = p.N, E = p.E, H = p.H;
    const npy_intp S2 = p.S + (p.bias_k != NULL) + p.add_zero_attn;
    npy_intp odims[3], wdims[4];
    int ond = 0, wnd = 0;
    if (!batched) {
        odims[ond++] = L;
    } else if (p.batch_first) {
        odims[ond++] = N;
        odims[ond++] = L;
    } else {
        odims[ond++] = L;
        odims[ond++] = N;
    }
    odims[ond++] = E;
    if (batched)
        wdims[wnd++] = N;
    if (!average)
        wdims[wnd++] = H;
    wdims[wnd++] = L;
    wdims[wnd++] = S2;
    if (dtype_is_half(self->dtype)) {
        if (keep == NULL) {
            PyArrayObject *const in[MHA_KEPT_INPUTS] = {a.q, a.k, a.v, a.kpm, a.am};
            result = half_forward(&p, in, params, batched, NULL);
        } else if (keep_copies(self, &a, &p, keep) == 0) {
            keep->wnd = need_weights ? wnd : 0;
            memcpy(keep->wdims, wdims, sizeof wdims);
            result = half_forward(&p, keep->inputs, keep->params, batched, &keep->half_backward);
        }
        goto done;
    }
    if ((out = new_array(ond, odims, self->dtype->typenum, FWD "attn_output")) == NULL)
        goto done;
    if (need_weights
            && (weights = new_array(wnd, wdims, self->dtype->typenum, FWD "attn_weights")) == NULL)
        goto done;
    if (keep != NULL) {
        if (keep_copies(self, &a, &p, keep) < 0)
            goto done;
        keep->wnd = need_weights ? wnd : 0;
        memcpy(keep->wdims, wdims, sizeof wdims);
    }
    const double hd = (double)self->head_dim, kv = (double)self->kdim + (double)self->vdim;
    const double work = (double)N * ((double)L * E * (2.0 * E) + (double)p.S * E * kv
                                     + (double)H * L * (double)S2 * 2.0 * hd);
    void *od = PyArray_DATA((PyArrayObject *)out);
    void *wd = weights != NULL ? PyArray_DATA((PyArrayObject *)weights) : NULL;
    int rc;
    MYATT_BEGIN_COMPUTE(work)
    if (keep != NULL) {
        keep->p = p;
        rc = mha_forward_kernels[self->dtype->kernel](od, wd, &keep->p, &keep->s);
    } else {
        rc = mha_forward_kernels[self->dtype->kernel](od, wd, &p, NULL);
    }
    MYATT_END_COMPUTE
    if (rc < 0) {
        PyErr_SetString(PyExc_MemoryError, FWD "could not allocate the kernel's workspace");
        goto done;
    }
    result = PyTuple_Pack(2, out, weights != NULL ? weights : Py_None);
done:
    args_clear(&a);
    Py_XDECREF(out);
    Py_XDECREF(weights);
    return result;
}

static PyObject *mha_call(MHAObject *self, PyObject *args, PyObject *kwds, mha_kept *keep)
{
    static char *kwlist[] = {"query", "key", "value", "key_padding_mask", "need_weights",
                             "attn_mask", "average_attn_weights", "is_causal", NULL};
    PyObject *q, *k, *v, *kpm = Py_None, *am = Py_None;
    int need_weights = 1, average = 1, is_causal = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OpOpp:" OWNER ".forward", kwlist, &q, &k,
                                     &v, &kpm, &need_weights, &am, &average, &is_causal))
        return NULL;
    return mha_forward(self, q, k, v, kpm, need_weights, am, average, is_causal, keep);
}

static PyObject *MHA_call(MHAObject *self, PyObject *args, PyObject *kwds)
{
    return mha_call(self, args, kwds, NULL);
}

/* m.forward(query, key, value) with three positional arguments goes straight
 * to mha_forward; any other call is parsed by MHA_call. */
PyObject *MHA_forward_fast(MHAObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return mha_forward(self, args[0], args[1], args[2], Py_None, 1, Py_None, 1, 0, NULL);
    return call_with_tuple((PyObject *)self, args, nargs, kwnames, (ternaryfunc)MHA_call);
}

/* m(...): a subclass's own forward if it has one, else as m.forward(...). */
PyObject *MHA_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames)
{
    PyObject *result;
    if (subclass_forward(self, (PyCFunction)(void (*)(void))MHA_forward_fast, args, nargsf,
                         kwnames, &result))
        return result;
    return MHA_forward_fast((MHAObject *)self, args, PyVectorcall_NARGS(nargsf), kwnames);
}

PyObject *MHA_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    return MHA_vectorcall(self, args, (size_t)nargs, kwnames);
}

#define FORWARD_DOC_BODY \
"Multi-head attention of query over key and value, as torch's module in\n" \
"its mode (dropout only in training mode, with myatt's generator).\n" \
"\n" \
"Parameters\n" \
"----------\n" \
"query : array_like, shape (L, N, E), (N, L, E) with batch_first, or (L, E)\n" \
"    E is embed_dim; a 2-D query is one unbatched sequence.\n" \
"key : array_like, shape (S, N, kdim), (N, S, kdim) or (S, kdim)\n" \
"value : array_like, shape (S, N, vdim), (N, S, vdim) or (S, vdim)\n" \
"    Passing one array as query, key and value (self-attention) computes\n" \
"    the three projections as one product.\n" \
"key_padding_mask : array_like of bool or float, shape (N, S) or (S,), optional\n" \
"    True (or -inf) where a key is ignored; a float mask is added to the\n" \
"    scores.\n" \
"need_weights : bool, optional\n" \
"    Whether to return the attention weights (default True). Without them\n" \
"    the heads run through the flash kernel.\n" \
"attn_mask : array_like of bool or float, shape (L, S) or (N * num_heads, L, S), optional\n" \
"    True (or -inf) where a query may not attend a key; a float mask is\n" \
"    added to the scores (and to key_padding_mask where both are given).\n" \
"average_attn_weights : bool, optional\n" \
"    Average the weights over the heads (default True).\n" \
"is_causal : bool, optional\n" \
"    torch's hint that attn_mask is causal: it needs attn_mask; with\n" \
"    need_weights=False and no key_padding_mask the causal triangle is used\n" \
"    instead of attn_mask.\n" \
"\n" \
"Returns\n" \
"-------\n" \
"attn_output : ndarray, shape of query with E features\n" \
"attn_weights : ndarray or None\n" \
"    (N, L, S') averaged or (N, num_heads, L, S') per head (no N for an\n" \
"    unbatched query); S' = S + 1 with bias_k, + 1 with add_zero_attn.\n" \
"    None when need_weights is false. A row with every key masked is NaN\n" \
"    here, and gives zeros in attn_output without the weights (as torch).\n" \
"\n" \
"Raises\n" \
"------\n" \
"TypeError\n" \
"    If an operand is not an array of real numbers, or a mask is neither\n" \
"    bool nor floating point.\n" \
"ValueError\n" \
"    If an operand has the wrong number of dimensions or the wrong shape\n" \
"    (the message gives both), or is_causal is given without attn_mask.\n" \
"MemoryError\n" \
"    If a result or a workspace cannot be allocated.\n" \
"\n" \
"Examples\n" \
"--------\n" \
">>> m = myatt.MultiheadAttention(8, 2, dtype='float64')\n" \
">>> x = np.ones((5, 3, 8))\n" \
">>> out, w = m(x, x, x)\n" \
">>> out.shape, w.shape\n" \
"((5, 3, 8), (3, 5, 5))\n" \
">>> w[0, 0]\n" \
"array([0.2, 0.2, 0.2, 0.2, 0.2])"

const char MHA_call_doc[] = PyDoc_STR(
"__call__($self, query, key, value, key_padding_mask=None, need_weights=True, "
"attn_mask=None, average_attn_weights=True, is_causal=False)\n--\n\n"
FORWARD_DOC_BODY);

const char MHA_forward_doc[] = PyDoc_STR(
"forward($self, query, key, value, key_padding_mask=None, need_weights=True, "
"attn_mask=None, average_attn_weights=True, is_causal=False)\n--\n\n"
FORWARD_DOC_BODY);

/* ---- myatt.vjp (vjp.h) ------------------------------------------------------ */

static const char *const mha_kept_names[MHA_KEPT_INPUTS + MHA_KEPT_PARAMS] = {
    "query", "key", "value", "key_padding_mask", "attn_mask",
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
    "bias_k", "bias_v", "out_proj.weight", "out_proj.bias",
};

static void mha_kept_clear(void *kept_)
{
    mha_kept *kept = kept_;
    for (int i = 0; i < MHA_KEPT_INPUTS; i++)
        Py_CLEAR(kept->inputs[i]);
    for (int i = 0; i < MHA_KEPT_PARAMS; i++)
        Py_CLEAR(kept->params[i]);
    Py_CLEAR(kept->half_backward);
    mha_saved_free(&kept->s);
}

/* The dict of query, key, value and every state_dict key from kept,
 * grad_output (a real array of the output's shape) and grad_attn_weights
 * (NULL, or a real array of the weights' shape). */
static PyObject *mha_grads_run(const mha_kept *kept, PyArrayObject *grad_output, PyArrayObject *gw)
{
    const myatt_dtype *dt = kept->dtype;
    const mha_problem *p = &kept->p;
    PyArrayObject *go = NULL, *gwc = NULL;
    PyArrayObject *g[MHA_KEPT_INPUTS + MHA_KEPT_PARAMS] = {NULL};   /* as mha_kept_names */
    PyObject *result = NULL;
    if (gw != NULL
            && (gwc = cast_array(gw, dt->typenum, 1, "pullback(): grad_attn_weights")) == NULL)
        goto done;
    if ((go = cast_array(grad_output, dt->typenum, 1, "pullback(): grad_output")) == NULL)
        goto done;
    if (kept->half_backward != NULL) {
        result = PyObject_CallFunctionObjArgs(kept->half_backward, go,
                                              gwc != NULL ? (PyObject *)gwc : Py_None, NULL);
        goto done;
    }
    /* every gradient shaped as what it differentiates; query, key and value apart */
    for (int i = 0; i < MHA_KEPT_INPUTS + MHA_KEPT_PARAMS; i++) {
        PyArrayObject *x = i < MHA_KEPT_INPUTS ? kept->inputs[i]
                                               : kept->params[i - MHA_KEPT_INPUTS];
        if (x == NULL || i == MHA_IN_KEY_PADDING_MASK || i == MHA_IN_ATTN_MASK)
            continue;
        if ((g[i] = (PyArrayObject *)new_array(PyArray_NDIM(x), PyArray_DIMS(x), dt->typenum,
                                               "pullback(): a gradient")) == NULL)
            goto done;
    }
    enum { G_IN = MHA_KEPT_INPUTS };
    void *d_w[3];
    if (g[G_IN + P_IN] != NULL) {
        char *w = PyArray_DATA(g[G_IN + P_IN]);
        const size_t blk = (size_t)(p->E * p->E) * (size_t)dt->itemsize;
        for (int t = 0; t < 3; t++)
            d_w[t] = w + (size_t)t * blk;
    } else {
        for (int t = 0; t < 3; t++)
            d_w[t] = PyArray_DATA(g[G_IN + P_Q + t]);
    }
#define DATA_OR_NULL(a) ((a) != NULL ? PyArray_DATA(a) : NULL)
    const mha_grads grads = {
        .d_query = PyArray_DATA(g[MHA_IN_QUERY]), .d_key = PyArray_DATA(g[MHA_IN_KEY]),
        .d_value = PyArray_DATA(g[MHA_IN_VALUE]),
        .d_w = {d_w[0], d_w[1], d_w[2]},
        .d_b_in = DATA_OR_NULL(g[G_IN + P_IN_BIAS]),
        .d_bias_k = DATA_OR_NULL(g[G_IN + P_BIAS_K]),
        .d_bias_v = DATA_OR_NULL(g[G_IN + P_BIAS_V]),
        .d_w_out = PyArray_DATA(g[G_IN + P_COUNT]),
        .d_b_out = DATA_OR_NULL(g[G_IN + P_COUNT + 1]),
        .d_out = PyArray_DATA(go),
        .d_weights = DATA_OR_NULL(gwc),
    };
#undef DATA_OR_NULL
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mha_backward_kernels[dt->kernel](&grads, p, &kept->s);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(PyExc_MemoryError, "pullback(): could not allocate the kernel's "
                        "workspace");
        goto done;
    }
    if ((result = PyDict_New()) == NULL)
        goto done;
    for (int i = 0; i < MHA_KEPT_INPUTS + MHA_KEPT_PARAMS; i++)
        if (g[i] != NULL && PyDict_SetItemString(result, mha_kept_names[i], (PyObject *)g[i]) < 0) {
            Py_CLEAR(result);
            break;
        }
done:
    for (int i = 0; i < MHA_KEPT_INPUTS + MHA_KEPT_PARAMS; i++)
        Py_XDECREF(g[i]);
    Py_XDECREF(go);
    Py_XDECREF(gwc);
    return result;
}


static PyObject *mha_vjp_forward(PyObject *module, PyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames, void *kept)
{
    PyObject *kwds, *tuple = tuple_and_kwargs(args, nargs, kwnames, &kwds), *result = NULL;
    if (tuple != NULL)
        result = mha_call((MHAObject *)self, tuple, kwds, kept);
    Py_XDECREF(tuple);
    Py_XDECREF(kwds);
    return result;
}

static PyObject *mha_vjp_pull(PyObject *module, const void *kept_, PyArrayObject *go,
                              PyObject *GA)
{
    const mha_kept *kp = kept_;
    PyArrayObject *rga = NULL;
    if (GA != NULL && kp->wnd == 0) {
        PyErr_SetString(PyExc_TypeError, "pullback(): grad_attn_weights must be None: the "
                        "forward had need_weights=False (its attn_weights was None)");
        return NULL;
    }
    if (GA != NULL
            && ((rga = as_real_array(GA, "pullback(): grad_attn_weights")) == NULL
                || check_cotangent(rga, kp->wnd, kp->wdims, "grad_attn_weights") < 0)) {
        Py_XDECREF(rga);
        return NULL;
    }
    PyObject *result = mha_grads_run(kp, go, rga);
    Py_XDECREF(rga);
    return result;
}

static int mha_vjp_held(const void *kept_, PyObject *held)
{
    const mha_kept *kept = kept_;
    for (int i = 0; i < MHA_KEPT_INPUTS + MHA_KEPT_PARAMS; i++) {
        PyArrayObject *a = i < MHA_KEPT_INPUTS ? kept->inputs[i]
                                               : kept->params[i - MHA_KEPT_INPUTS];
        if (a != NULL && held_append(held, mha_kept_names[i], Py_NewRef(a)) < 0)
            return -1;
    }
    return 0;
}

/* the kernel's buffers: projections, heads, weights or flash output and lse */
static Py_ssize_t mha_vjp_extra_bytes(const void *kept)
{
    return (Py_ssize_t)((const mha_kept *)kept)->s.nbytes;
}

const vjp_kind mha_vjp = {
    .name = "MultiheadAttention", .kept_size = sizeof(mha_kept), .attn_weights = 1,
    .forward = mha_vjp_forward, .pull = mha_vjp_pull, .held = mha_vjp_held,
    .extra_bytes = mha_vjp_extra_bytes, .clear = mha_kept_clear,
};
