/* myatt.MultiheadAttention: torch.nn.MultiheadAttention as an extension type.
 * It owns its input-projection parameters and a Linear (out_proj), and runs
 * the composed kernel of kernels/mha.c on them. */
#include "interop.h"
#include "vjp.h"
#include "linear_type.h"
#include "pieces.h"
#include "state_dict.h"

#include "kernels/mha/mha.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include <structmember.h>

#define OWNER "MultiheadAttention"
#define FWD "MultiheadAttention.forward(): "

/* The parameters in torch's state_dict order; NULL where the configuration has none. */
enum { P_IN, P_Q, P_K, P_V, P_IN_BIAS, P_BIAS_K, P_BIAS_V, P_COUNT };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;    /* MHA_vectorcall: m(query, key, value) without a tuple */
    module_init_state init;       /* built in __init__ or not (interop.h: module_head) */
    int training;                 /* torch's mode (interop.h: module_head) */
    Py_ssize_t embed_dim, num_heads, head_dim, kdim, vdim;
    int batch_first, add_zero_attn, bias;
    double dropout;
    const myatt_dtype *dtype;
    PyArrayObject *param[P_COUNT];   /* in_proj_weight [3E, E] or q/k/v_proj_weight
                                        [E, E], [E, kdim], [E, vdim]; in_proj_bias [3E];
                                        bias_k, bias_v [1, 1, E] */
    LinearObject *out_proj;          /* Linear(E, E, bias) */
} MHAObject;
MODULE_HEAD_ASSERT(MHAObject);

static const char *const param_names[P_COUNT] = {
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
    "in_proj_bias", "bias_k", "bias_v",
};

static PyObject *MHA_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames);

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
 * gives the same bits in both layouts. */
static PyArrayObject *new_param(int ndim, npy_intp *dims, const myatt_dtype *dt, int p)
{
    char what[64];
    snprintf(what, sizeof what, OWNER "(): %s", param_names[p]);
    if (p <= P_V)
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
    dt->k->xavier_uniform(rng, buf, PyArray_DIM(w, 0), PyArray_DIM(w, 1));
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
    if (dtype_obj != NULL && dtype_arg(dtype_obj, OWNER, &dtype) < 0)
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
                                   rebuild ? LINEAR_INIT_ZEROS : LINEAR_INIT_TORCH, 1,
                                   OWNER "(): out_proj.");
    if (self->out_proj == NULL)
        goto fail;
    if (!rebuild) {
        const myatt_kernels *k = dtype->k;
        for (int p = P_IN; p <= P_V; p++)
            if (self->param[p] != NULL && xavier_uniform_param(&st->rng, dtype, self->param[p]) < 0)
                goto fail;
        if (bias)
            memset(PyArray_DATA(self->out_proj->bias), 0,
                   (size_t)PyArray_NBYTES(self->out_proj->bias));
        for (int p = P_BIAS_K; p <= P_BIAS_V; p++)
            if (self->param[p] != NULL)
                k->xavier_normal(&st->rng, PyArray_DATA(self->param[p]), 1, 1, E);
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

/* ---- forward --------------------------------------------------------------- */

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
    if (t != NPY_BOOL && !PyTypeNum_ISFLOAT(t)) {
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
        if (dt->itemsize == 4) {
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

/* Converts and checks the inputs in torch's order (_mha_shape_check, then the
 * sizes); fills *a and the problem's sizes.  0, or -1 with an exception. */
static int forward_args(MHAObject *self, PyObject *q_obj, PyObject *k_obj, PyObject *v_obj,
                        PyObject *kpm_obj, PyObject *am_obj, mha_args *a, mha_problem *p,
                        int *batched)
{
    const myatt_dtype *dt = self->dtype;
    PyArrayObject *rq = NULL, *rk = NULL, *rv = NULL, *rkpm = NULL, *ram = NULL;
    char want[SHAPE_STR_LEN];
    int rc = -1;
    memset(a, 0, sizeof *a);
    if ((rq = as_real_array(q_obj, FWD "query")) == NULL)
        goto done;
    rk = k_obj == q_obj ? (PyArrayObject *)Py_NewRef(rq) : as_real_array(k_obj, FWD "key");
    if (rk == NULL)
        goto done;
    rv = v_obj == k_obj ? (PyArrayObject *)Py_NewRef(rk)
         : v_obj == q_obj ? (PyArrayObject *)Py_NewRef(rq) : as_real_array(v_obj, FWD "value");
    if (rv == NULL)
        goto done;
    if (kpm_obj != Py_None && (rkpm = as_real_array(kpm_obj, FWD "key_padding_mask")) == NULL)
        goto done;
    if (am_obj != Py_None && (ram = as_real_array(am_obj, FWD "attn_mask")) == NULL)
        goto done;

    /* 1. _mha_shape_check: batched (3-D) or unbatched (2-D) */
    const int nq = PyArray_NDIM(rq);
    if (nq != 2 && nq != 3) {
        PyErr_Format(PyExc_ValueError, FWD "query must be 2-D (unbatched) or 3-D (batched), "
                     "got shape %s", SHAPE_OF(want, rq));
        goto done;
    }
    *batched = nq == 3;
    if (PyArray_NDIM(rk) != nq || PyArray_NDIM(rv) != nq) {
        char sk[SHAPE_STR_LEN], sv[SHAPE_STR_LEN];
        PyErr_Format(PyExc_ValueError, FWD "for a %d-D query, key and value must be %d-D too, "
                     "got shapes %s and %s", nq, nq, SHAPE_OF(sk, rk), SHAPE_OF(sv, rv));
        goto done;
    }
    if (rkpm != NULL && PyArray_NDIM(rkpm) != nq - 1) {
        PyErr_Format(PyExc_ValueError, FWD "for a %d-D query, key_padding_mask must be %d-D, "
                     "got shape %s", nq, nq - 1, SHAPE_OF(want, rkpm));
        goto done;
    }
    if (ram != NULL && PyArray_NDIM(ram) != 2 && PyArray_NDIM(ram) != 3) {
        PyErr_Format(PyExc_ValueError, FWD "attn_mask must be 2-D or 3-D, got shape %s",
                     SHAPE_OF(want, ram));
        goto done;
    }

    /* 2. sizes: (L, N, E) of query, (S, N) of key and value; batch_first swaps */
    const int bf = *batched && self->batch_first;
    const int ax_len = bf ? 1 : 0, ax_n = bf ? 0 : 1;
    const npy_intp L = PyArray_DIM(rq, *batched ? ax_len : 0);
    const npy_intp S = PyArray_DIM(rk, *batched ? ax_len : 0);
    const npy_intp N = *batched ? PyArray_DIM(rq, ax_n) : 1;
    const npy_intp E = self->embed_dim, H = self->num_heads;
    const char *form = !*batched ? "[L, E]" : bf ? "[N, L, E]" : "[L, N, E]";
    if (PyArray_DIM(rq, nq - 1) != E) {
        snprintf(want, sizeof want, "%s with E = embed_dim = %zd", form, (Py_ssize_t)E);
        shape_error("query", want, rq);
        goto done;
    }
    const char *kform = !*batched ? "[S, %s = %zd]" : bf ? "[N = %zd, S, %s = %zd]"
                                                         : "[S, N = %zd, %s = %zd]";
    PyArrayObject *kv[2] = {rk, rv};
    const char *kv_names[2] = {"key", "value"}, *dim_names[2] = {"kdim", "vdim"};
    const Py_ssize_t dims[2] = {self->kdim, self->vdim};
    for (int t = 0; t < 2; t++) {
        PyArrayObject *x = kv[t];
        int bad = PyArray_DIM(x, nq - 1) != dims[t]
                  || (*batched && PyArray_DIM(x, ax_n) != N) || PyArray_DIM(x, *batched ? ax_len : 0) != S;
        if (bad) {
            if (*batched)
                snprintf(want, sizeof want, kform, (Py_ssize_t)N, dim_names[t], dims[t]);
            else
                snprintf(want, sizeof want, kform, dim_names[t], dims[t]);
            if (t == 1)   /* as many rows as key */
                snprintf(want + strlen(want), sizeof want - strlen(want), " with key's S = %zd",
                         (Py_ssize_t)S);
            shape_error(kv_names[t], want, x);
            goto done;
        }
    }
    if (rkpm != NULL) {
        int bad = *batched ? PyArray_DIM(rkpm, 0) != N || PyArray_DIM(rkpm, 1) != S
                           : PyArray_DIM(rkpm, 0) != S;
        if (bad) {
            if (*batched)
                snprintf(want, sizeof want, "(N, S) = (%zd, %zd)", (Py_ssize_t)N, (Py_ssize_t)S);
            else
                snprintf(want, sizeof want, "(S,) = (%zd,)", (Py_ssize_t)S);
            shape_error("key_padding_mask", want, rkpm);
            goto done;
        }
    }
    if (ram != NULL) {
        const int n3 = PyArray_NDIM(ram) == 3;
        const npy_intp b3 = *batched ? N * H : H;
        int bad = PyArray_DIM(ram, n3) != L || PyArray_DIM(ram, n3 + 1) != S
                  || (n3 && PyArray_DIM(ram, 0) != b3);
        if (bad) {
            if (n3)
                snprintf(want, sizeof want, "(%s, L, S) = (%zd, %zd, %zd)",
                         *batched ? "N * num_heads" : "num_heads", (Py_ssize_t)b3,
                         (Py_ssize_t)L, (Py_ssize_t)S);
            else
                snprintf(want, sizeof want, "(L, S) = (%zd, %zd)", (Py_ssize_t)L, (Py_ssize_t)S);
            shape_error("attn_mask", want, ram);
            goto done;
        }
    }

    /* 3. conversion to the module's dtype, C-contiguous (one copy of a shared array) */
    if ((a->q = cast_array(rq, dt->typenum, 1, FWD "query")) == NULL)
        goto done;
    a->k = rk == rq ? (PyArrayObject *)Py_NewRef(a->q)
                    : cast_array(rk, dt->typenum, 1, FWD "key");
    if (a->k == NULL)
        goto done;
    a->v = rv == rk ? (PyArrayObject *)Py_NewRef(a->k)
           : rv == rq ? (PyArrayObject *)Py_NewRef(a->q)
                      : cast_array(rv, dt->typenum, 1, FWD "value");
    if (a->v == NULL)
        goto done;
    if (rkpm != NULL && (a->kpm = canonical_mask(rkpm, "key_padding_mask", dt)) == NULL)
        goto done;
    if (ram != NULL) {
        /* a 3-D mask that is one [L, S] broadcast over its N*H items (np.broadcast_to,
         * torch's expand) is converted once: its zero-stride item dimension becomes 1;
         * an [L, S] mask is read as [L, S] whatever its strides */
        PyArrayObject *m = squeeze_broadcast(ram, PyArray_NDIM(ram) == 3 ? 1 : 0);
        if (m == NULL)
            goto done;
        a->am = canonical_mask(m, "attn_mask", dt);
        Py_DECREF(m);
        if (a->am == NULL)
            goto done;
    }

    memset(p, 0, sizeof *p);
    p->L = L;
    p->S = S;
    p->N = N;
    p->E = E;
    p->H = H;
    p->batch_first = bf;
    p->query = PyArray_DATA(a->q);
    p->key = PyArray_DATA(a->k);
    p->value = PyArray_DATA(a->v);
    p->key_padding_mask = a->kpm != NULL ? PyArray_DATA(a->kpm) : NULL;
    p->attn_mask = a->am != NULL ? PyArray_DATA(a->am) : NULL;
    p->attn_mask_3d = a->am != NULL && PyArray_NDIM(a->am) == 3;
    p->attn_mask_stride = p->attn_mask_3d && PyArray_DIM(a->am, 0) > 1 ? L * S : 0;
    /* torch's _in_projection_packed: one GEMM for query is key is value (the
     * same object), two for key is value; separate weights: three */
    const int packed = self->param[P_IN] != NULL;
    p->qkv_same = packed && q_obj == k_obj && k_obj == v_obj;
    p->kv_same = packed && !p->qkv_same && k_obj == v_obj;
    rc = 0;
done:
    Py_XDECREF(rq);
    Py_XDECREF(rk);
    Py_XDECREF(rv);
    Py_XDECREF(rkpm);
    Py_XDECREF(ram);
    if (rc < 0) {
        args_clear(a);
        memset(a, 0, sizeof *a);
    }
    return rc;
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

static void all_params(MHAObject *self, PyArrayObject **params);

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
    all_params(self, params);
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
    all_params(self, params);
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
        rc = self->dtype->k->mha_forward(od, wd, &keep->p, &keep->s);
    } else {
        rc = self->dtype->k->mha_forward(od, wd, &p, NULL);
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

/* ---- myatt.vjp ------------------------------------------------------------- */

PyObject *mha_forward_keep(PyObject *self, PyObject *args, PyObject *kwds, mha_kept *kept)
{
    return mha_call((MHAObject *)self, args, kwds, kept);
}

const char *const mha_kept_names[MHA_KEPT_INPUTS + MHA_KEPT_PARAMS] = {
    "query", "key", "value", "key_padding_mask", "attn_mask",
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
    "bias_k", "bias_v", "out_proj.weight", "out_proj.bias",
};

void mha_kept_clear(mha_kept *kept)
{
    for (int i = 0; i < MHA_KEPT_INPUTS; i++)
        Py_CLEAR(kept->inputs[i]);
    for (int i = 0; i < MHA_KEPT_PARAMS; i++)
        Py_CLEAR(kept->params[i]);
    mha_saved_free(&kept->s);
}

PyObject *mha_grads_run(const mha_kept *kept, PyArrayObject *grad_output, PyArrayObject *gw)
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
    rc = dt->k->mha_backward(&grads, p, &kept->s);
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

/* m.forward(query, key, value) with three positional arguments goes straight
 * to mha_forward; any other call is parsed by MHA_call. */
static PyObject *MHA_forward_fast(MHAObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    if (nargs == 3 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return mha_forward(self, args[0], args[1], args[2], Py_None, 1, Py_None, 1, 0, NULL);
    return call_with_tuple((PyObject *)self, args, nargs, kwnames, (ternaryfunc)MHA_call);
}

/* m(...): a subclass's own forward if it has one, else as m.forward(...). */
static PyObject *MHA_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames)
{
    PyObject *result;
    if (subclass_forward(self, (PyCFunction)(void (*)(void))MHA_forward_fast, args, nargsf,
                         kwnames, &result))
        return result;
    return MHA_forward_fast((MHAObject *)self, args, PyVectorcall_NARGS(nargsf), kwnames);
}

static PyObject *MHA_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    return MHA_vectorcall(self, args, (size_t)nargs, kwnames);
}

/* ---- state_dict ------------------------------------------------------------ */

/* torch's keys in its order: own parameters, then out_proj's. */
static const char *const mha_keys[P_COUNT + 2] = {
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
    "bias_k", "bias_v", "out_proj.weight", "out_proj.bias",
};

static void all_params(MHAObject *self, PyArrayObject **params)
{
    for (int p = 0; p < P_COUNT; p++)
        params[p] = self->param[p];
    params[P_COUNT] = self->out_proj->weight;
    params[P_COUNT + 1] = self->out_proj->bias;
}

static PyObject *MHA_state_dict(MHAObject *self, PyObject *Py_UNUSED(ignored))
{
    PyArrayObject *params[P_COUNT + 2];
    all_params(self, params);
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
    all_params(self, params);
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
    PyObject *kwargs = Py_BuildValue("{ss}", "dtype", self->dtype->name);
    PyObject *r = args && kwargs ? reduce_object((PyObject *)self, args, kwargs) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return r;
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
"    If `module` lacks those attributes, or its weights are neither\n"
"    torch.float32 nor torch.float64.\n"
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

PyDoc_STRVAR(MHA_call_doc,
"__call__($self, query, key, value, key_padding_mask=None, need_weights=True, "
"attn_mask=None, average_attn_weights=True, is_causal=False)\n--\n\n"
FORWARD_DOC_BODY);

PyDoc_STRVAR(MHA_forward_doc,
"forward($self, query, key, value, key_padding_mask=None, need_weights=True, "
"attn_mask=None, average_attn_weights=True, is_causal=False)\n--\n\n"
FORWARD_DOC_BODY);

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
"    float32 (the default) or float64.\n"
"\n"
"Attributes\n"
"----------\n"
"in_proj_weight : ndarray, shape (3 * embed_dim, embed_dim), or None\n"
"q_proj_weight, k_proj_weight, v_proj_weight : ndarray or None\n"
"    (E, E), (E, kdim), (E, vdim) when kdim or vdim differs from embed_dim\n"
"    (in_proj_weight is then None).  Like out_proj.weight, views of the\n"
"    module's memory stored transposed (Fortran-ordered), for one token's\n"
"    products; state_dict() gives C-contiguous copies.\n"
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
"    float32 or float64.\n"
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
    {"forward", (PyCFunction)(void (*)(void))MHA_forward_fast, METH_FASTCALL | METH_KEYWORDS,
     MHA_forward_doc},
    {"state_dict", (PyCFunction)MHA_state_dict, METH_NOARGS, MHA_state_dict_doc},
    {"load_state_dict", (PyCFunction)(void (*)(void))MHA_load_state_dict,
     METH_VARARGS | METH_KEYWORDS, MHA_load_state_dict_doc},
    {"__call__", (PyCFunction)(void (*)(void))MHA_call_fast,
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST, MHA_call_doc},
    {"__reduce__", (PyCFunction)MHA_reduce, METH_NOARGS, MHA_reduce_doc},
    {"_from_state", (PyCFunction)from_state_method, METH_VARARGS | METH_CLASS,
     MHA_from_state_doc},
    {"from_torch", (PyCFunction)MHA_from_torch, METH_O | METH_CLASS, MHA_from_torch_doc},
    {"_repr_html_", (PyCFunction)repr_html_method, METH_NOARGS, MHA_repr_html_doc},
    MODULE_MODE_METHODS,
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
                               "Fortran-ordered view."),
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
     "The dtype of the parameters and the results: float32 or float64.", NULL},
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
