/* myatt.scaled_dot_product_attention, declared (entry.h): checks the
 * arguments, works out the broadcast batch shape and every operand's strides
 * along it, releases the GIL and calls the flash kernel (kernels/sdpa/sdpa.h).
 * Its vjp kind (vjp.h): the forward that keeps private copies of the operands,
 * the output and the log-sum-exp, and the pullback's backward on what it kept. */
#include "entry.h"
#include "vjp.h"

#include "kernels/sdpa/sdpa.h"

#include <math.h>
#include <string.h>

DTYPE_KERNELS(sdpa_forward);
DTYPE_KERNELS(sdpa_backward);

static const char sdpa_doc[] =
"Attention: softmax(query @ key^T * scale + attn_mask) @ value.\n"
"\n"
"As torch.nn.functional.scaled_dot_product_attention of torch 2.13, computed\n"
"flash-style by myatt's kernels: an online softmax over blocks of keys, so the\n"
"[L, S] weights are never built and the workspace is bounded whatever L and S.\n"
"\n"
"Parameters\n"
"----------\n"
"query : array_like, shape (..., L, E)\n"
"    At least 2-D; the leading dimensions broadcast against key's and value's.\n"
"key : array_like, shape (..., S, E)\n"
"value : array_like, shape (..., S, Ev)\n"
"attn_mask : array_like or None, broadcastable to (..., L, S)\n"
"    bool (True: the key takes part) or floating point (added to the scores,\n"
"    converted to the result dtype).\n"
"dropout_p : float in [0, 1]\n"
"    Each weight dropped with this probability by myatt's generator\n"
"    (myatt.manual_seed; not torch's stream), the kept ones scaled by\n"
"    1 / (1 - dropout_p); 1 drops everything.\n"
"is_causal : bool\n"
"    Key j takes part in query row i only if j <= i (tril(ones(L, S)), aligned\n"
"    at the top left); blocks above the diagonal are skipped. With attn_mask\n"
"    too, both apply where torch's CPU kernel takes both: 4-D inputs with\n"
"    E == Ev, a 2-D or 4-D mask and no dropout (its flash path).\n"
"scale : float or None\n"
"    The scores' factor; default 1 / sqrt(E).\n"
"enable_gqa : bool\n"
"    The query's heads (dimension -3) a multiple of key's and value's, whose\n"
"    heads are repeated as repeat_interleave does.\n"
"\n"
"Returns\n"
"-------\n"
"numpy.ndarray, shape (..., L, Ev)\n"
"    The promoted dtype of query, key, value (the widest float; see\n"
"    Conventions). A query row with every key masked gives zeros; NaN and inf\n"
"    propagate.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    An operand or mask of an unsupported dtype (complex, object, an integer\n"
"    mask), or a dropout_p or scale that is not a real number.\n"
"ValueError\n"
"    Fewer than 2 dimensions, E or S that do not match, batch dimensions or\n"
"    head counts that do not broadcast or divide, a mask of the wrong shape,\n"
"    attn_mask with is_causal=True where torch refuses them (its math path:\n"
"    not 4-D, E != Ev, a mask of other than 2 or 4 dimensions, dropout),\n"
"    dropout_p outside [0, 1].\n"
"OverflowError\n"
"    An integer dropout_p or scale too large for a float.\n"
"MemoryError\n"
"    If the result, a converted copy of an operand or the workspace cannot be\n"
"    allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> q, k = np.ones((2, 3, 4)), np.ones((2, 5, 4))\n"
">>> v = np.arange(60.0).reshape(2, 5, 6)\n"
">>> out = myatt.scaled_dot_product_attention(q, k, v)\n"
">>> out.shape, out.dtype\n"
"((2, 3, 6), dtype('float64'))\n"
">>> bool(np.allclose(out, v.mean(axis=1, keepdims=True)))   # equal scores: the mean\n"
"True\n"
">>> myatt.scaled_dot_product_attention(q, k, v, attn_mask=np.zeros((3, 5), bool))[0, 0]\n"
"array([0., 0., 0., 0., 0., 0.])";

#define WHAT "scaled_dot_product_attention(): "

/* Whether torch 2.13 on a CPU runs these shapes through its flash kernel
 * (sdp_utils_cpp.cpp, use_flash_attention_cpp) rather than its math path:
 * 4-D query, key and value of one batch size, equal head counts (or, with
 * enable_gqa, key's and value's equal and dividing the query's), E == Ev,
 * L and S nonzero, and a mask of 2 dimensions, or 4 whose first two are 1 or
 * the batch and head counts, its last two L or 1 and S or 1.  (torch also
 * asks for unit strides along E; myatt decides on shapes only.)  The kernel
 * rounds the scores as the chosen path does (sdpa_problem.prescale). */
static int torch_takes_flash(PyArrayObject *q, PyArrayObject *k, PyArrayObject *v,
                             PyArrayObject *mask, int enable_gqa)
{
    if (PyArray_NDIM(q) != 4 || PyArray_NDIM(k) != 4 || PyArray_NDIM(v) != 4)
        return 0;
    const npy_intp *qd = PyArray_DIMS(q), *kd = PyArray_DIMS(k), *vd = PyArray_DIMS(v);
    if (qd[0] != kd[0] || qd[0] != vd[0])
        return 0;
    if (enable_gqa) {
        if (kd[1] != vd[1] || kd[1] == 0 || qd[1] % kd[1] != 0)
            return 0;
    }
    else if (qd[1] != kd[1] || qd[1] != vd[1]) {
        return 0;
    }
    if (qd[3] != kd[3] || qd[3] != vd[3] || qd[2] == 0 || kd[2] == 0)
        return 0;
    if (mask != NULL) {
        const int nm = PyArray_NDIM(mask);
        if (nm != 2 && nm != 4)
            return 0;
        const npy_intp *md = PyArray_DIMS(mask);
        if ((md[nm - 2] != qd[2] && md[nm - 2] != 1) || (md[nm - 1] != kd[2] && md[nm - 1] != 1))
            return 0;
        if (nm == 4 && ((md[0] != 1 && md[0] != qd[0]) || (md[1] != 1 && md[1] != qd[1])))
            return 0;
    }
    return 1;
}

/* The strides of `a` (its last two dimensions rows and columns) along the
 * nb batch dimensions `batch` of the output: 0 where `a` has no such
 * dimension or a dimension of 1. */
static void operand_strides(sdpa_operand *op, PyArrayObject *a, int nb)
{
    const int nd = PyArray_NDIM(a), ab = nd - 2;
    for (int d = 0; d < nb; d++) {
        const int ad = d - (nb - ab);
        op->bs[d] = ad >= 0 && PyArray_DIM(a, ad) != 1 ? ESTRIDE(a, ad) : 0;
        op->bd[d] = ad >= 0 ? PyArray_DIM(a, ad) : 1;
    }
    op->data = PyArray_DATA(a);
    op->rs = PyArray_DIM(a, nd - 2) == 1 ? 0 : ESTRIDE(a, nd - 2);
    op->cs = PyArray_DIM(a, nd - 1) == 1 ? 0 : ESTRIDE(a, nd - 1);
}

/* Broadcast the batch dimensions of `a` (all but its last two) into
 * dims[0:nb] (right-aligned; dims start as 1).  `heads` >= 0 replaces its
 * dimension -3 (GQA: key's heads repeated to the query's).  0, or -1 when they
 * do not broadcast. */
static int broadcast_batch(npy_intp *dims, int nb, PyArrayObject *a, npy_intp heads)
{
    const int ab = PyArray_NDIM(a) - 2;
    for (int i = 0; i < ab; i++) {
        npy_intp n = PyArray_DIM(a, i);
        if (i == ab - 1 && heads >= 0)
            n = heads;
        npy_intp *d = &dims[nb - ab + i];
        if (n == *d || n == 1)
            continue;
        if (*d != 1)
            return -1;
        *d = n;
    }
    return 0;
}

/* A call's arguments as the kernels read them, and what its pullback keeps:
 * with `private` (myatt.vjp), copies that nothing else writes. */
typedef struct {
    PyArrayObject *q, *k, *v, *mask;   /* converted (mask NULL without one), any strides */
    sdpa_problem *problem;             /* PyMem; its operands point into q, k, v, mask */
    int typenum;                       /* the dtype computed in */
    const myatt_dtype *result;         /* the result's: typenum's row, or a half row */
    PyArrayObject *out, *lse;          /* vjp: the forward's output [batch..., L, Ev] and
                                          log-sum-exp [batch..., L] (C-contiguous;
                                          float64 for both dtypes, sdpa.h) */
} sdpa_kept;

static void sdpa_kept_clear(void *kept_)
{
    sdpa_kept *kept = kept_;
    Py_CLEAR(kept->q);
    Py_CLEAR(kept->k);
    Py_CLEAR(kept->v);
    Py_CLEAR(kept->mask);
    Py_CLEAR(kept->out);
    Py_CLEAR(kept->lse);
    PyMem_Free(kept->problem);
    kept->problem = NULL;
}

/* The call's scalars and shapes, checked (sdpa_check), for sdpa_problem_of */
typedef struct {
    int is_causal, enable_gqa, flash;
    double dropout_p, scale;            /* scale: given, or 1 / sqrt(E) */
    npy_intp L, S, E, Ev;
    int nb;                             /* batch dimensions of the output */
    npy_intp dims[SDPA_MAX_BATCH_DIMS + 2];   /* the output's shape */
    npy_intp k_heads, v_heads, k_group, v_group;   /* GQA: key's and value's heads */
} sdpa_shape;

/* 1. Scalars: the flags bools (as torch's), dropout_p in [0, 1], scale a real
 * number or None; the mask bool or floating. */
static int sdpa_scalars(const entry_call *c, sdpa_shape *sh)
{
    PyObject *dropout = c->obj[4], *causal = c->obj[5], *scale = c->obj[6], *gqa = c->obj[7];
    PyArrayObject *rm = c->arr[3];
    if ((causal != NULL && bool_arg(causal, WHAT "is_causal", &sh->is_causal) < 0)
            || (gqa != NULL && bool_arg(gqa, WHAT "enable_gqa", &sh->enable_gqa) < 0)
            || (dropout != NULL && probability_arg(dropout, WHAT "dropout_p", &sh->dropout_p) < 0)
            || (scale != NULL && scale != Py_None
                && float_arg(scale, WHAT "scale", " or None", &sh->scale) < 0))
        return -1;
    const int mt = rm != NULL ? PyArray_TYPE(rm) : NPY_BOOL;
    if (mt != NPY_BOOL && mt != NPY_HALF && dtype_of_typenum(mt) == NULL) {
        PyErr_Format(PyExc_TypeError, WHAT "attn_mask must be bool or floating point, "
                     "got dtype %S", (PyObject *)PyArray_DESCR(rm));
        return -1;
    }
    return 0;
}

/* 2. query, key and value: at least 2-D, E and S agreeing; 3. GQA: key's and
 * value's heads (dimension -3) repeated to the query's. */
static int sdpa_operands(const entry_call *c, sdpa_shape *sh)
{
    static const char *const names[3] = {"query", "key", "value"};
    static const char *const forms[3] = {"[..., L, E]", "[..., S, E]", "[..., S, Ev]"};
    PyArrayObject *const *a = c->arr;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN], s3[SHAPE_STR_LEN];
    for (int i = 0; i < 3; i++)
        if (PyArray_NDIM(a[i]) < 2) {
            PyErr_Format(PyExc_ValueError, WHAT "%s must be at least 2-D %s, got shape %s",
                         names[i], forms[i], SHAPE_OF(s1, a[i]));
            return -1;
        }
    const int nq = PyArray_NDIM(a[0]), nk = PyArray_NDIM(a[1]), nv = PyArray_NDIM(a[2]);
    sh->L = PyArray_DIM(a[0], nq - 2);
    sh->E = PyArray_DIM(a[0], nq - 1);
    sh->S = PyArray_DIM(a[1], nk - 2);
    sh->Ev = PyArray_DIM(a[2], nv - 1);
    if (PyArray_DIM(a[1], nk - 1) != sh->E) {
        PyErr_Format(PyExc_ValueError, WHAT "key must have shape [..., S, %zd] (E of query "
                     "%s), got %s", (Py_ssize_t)sh->E, SHAPE_OF(s1, a[0]), SHAPE_OF(s2, a[1]));
        return -1;
    }
    if (PyArray_DIM(a[2], nv - 2) != sh->S) {
        PyErr_Format(PyExc_ValueError, WHAT "value must have shape [..., %zd, Ev] (S of key "
                     "%s), got %s", (Py_ssize_t)sh->S, SHAPE_OF(s1, a[1]), SHAPE_OF(s2, a[2]));
        return -1;
    }
    sh->k_heads = sh->v_heads = -1;
    sh->k_group = sh->v_group = 1;
    if (!sh->enable_gqa)
        return 0;
    if (nq < 3 || nk < 3 || nv < 3) {
        PyErr_Format(PyExc_ValueError, WHAT "enable_gqa needs query, key and value with "
                     "a head dimension (-3), got query %s, key %s, value %s",
                     SHAPE_OF(s1, a[0]), SHAPE_OF(s2, a[1]), SHAPE_OF(s3, a[2]));
        return -1;
    }
    const npy_intp hq = PyArray_DIM(a[0], nq - 3);
    for (int i = 1; i < 3; i++) {
        const npy_intp h = PyArray_DIM(a[i], PyArray_NDIM(a[i]) - 3);
        if (h == 0 ? hq != 0 : hq % h != 0) {
            PyErr_Format(PyExc_ValueError, WHAT "enable_gqa: the query's %zd heads "
                         "(dimension -3) must be a multiple of %s's %zd heads",
                         (Py_ssize_t)hq, names[i], (Py_ssize_t)h);
            return -1;
        }
        const npy_intp group = h == 0 ? 1 : hq / h;
        npy_intp *heads = i == 1 ? &sh->k_heads : &sh->v_heads;
        npy_intp *grp = i == 1 ? &sh->k_group : &sh->v_group;
        if (group > 1)       /* one head: plain broadcasting repeats it */
            *heads = hq;
        if (group > 1 && h > 1)
            *grp = group;
    }
    return 0;
}

/* 4. The output's batch shape: query, key and value broadcast together;
 * 5. the mask broadcastable to [batch..., L, S] without enlarging it, and
 * with is_causal only where torch takes both. */
static int sdpa_batch(const entry_call *c, sdpa_shape *sh)
{
    PyArrayObject *const *a = c->arr, *rm = c->arr[3];
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN], s3[SHAPE_STR_LEN], s4[SHAPE_STR_LEN];
    int nb = 0;
    for (int i = 0; i < 3; i++)
        nb = PyArray_NDIM(a[i]) - 2 > nb ? PyArray_NDIM(a[i]) - 2 : nb;
    if (nb > SDPA_MAX_BATCH_DIMS) {
        PyErr_Format(PyExc_ValueError, WHAT "at most %d batch dimensions, got %d",
                     SDPA_MAX_BATCH_DIMS, nb);
        return -1;
    }
    npy_intp *dims = sh->dims;
    for (int d = 0; d < nb; d++)
        dims[d] = 1;
    if (broadcast_batch(dims, nb, a[0], -1) < 0 || broadcast_batch(dims, nb, a[1], sh->k_heads) < 0
            || broadcast_batch(dims, nb, a[2], sh->v_heads) < 0) {
        PyErr_Format(PyExc_ValueError, WHAT "the batch dimensions of query %s, key %s and "
                     "value %s do not broadcast%s", SHAPE_OF(s1, a[0]), SHAPE_OF(s2, a[1]),
                     SHAPE_OF(s3, a[2]), sh->enable_gqa ? "" : " (different head counts need "
                     "enable_gqa=True)");
        return -1;
    }
    sh->nb = nb;
    dims[nb] = sh->L;
    dims[nb + 1] = sh->Ev;
    if (rm != NULL) {
        const int nm = PyArray_NDIM(rm);
        int ok = nm <= nb + 2;
        for (int i = 0; ok && i < nm; i++) {
            const int od = nb + 2 - nm + i;
            const npy_intp n = PyArray_DIM(rm, i), want = od == nb ? sh->L
                                                          : od == nb + 1 ? sh->S : dims[od];
            ok = n == want || n == 1;
        }
        if (!ok) {
            npy_intp want[SDPA_MAX_BATCH_DIMS + 2];
            memcpy(want, dims, (size_t)nb * sizeof(npy_intp));
            want[nb] = sh->L;
            want[nb + 1] = sh->S;
            PyErr_Format(PyExc_ValueError, WHAT "attn_mask must be broadcastable to [..., L, "
                         "S] = %s, got shape %s", shape_str(s1, sizeof s1, nb + 2, want),
                         SHAPE_OF(s2, rm));
            return -1;
        }
    }
    /* attn_mask with is_causal: both applied where torch 2.13's CPU kernel takes them
     * (its flash path; also an empty result or no keys, which it returns at once),
     * refused where it refuses them (its math path) */
    sh->flash = sh->dropout_p == 0.0 && torch_takes_flash(a[0], a[1], a[2], rm, sh->enable_gqa);
    int empty = sh->S == 0;
    for (int d = 0; d < nb + 2; d++)
        empty |= dims[d] == 0;
    if (rm != NULL && sh->is_causal && !sh->flash && !empty) {
        PyErr_Format(PyExc_ValueError, WHAT "attn_mask and is_causal=True together need the "
                     "inputs of torch's flash kernel, which applies both (4-D query, key and "
                     "value, E == Ev, a 2-D or 4-D mask, dropout_p=0); got query %s, key %s, "
                     "value %s, attn_mask %s", SHAPE_OF(s1, a[0]), SHAPE_OF(s2, a[1]),
                     SHAPE_OF(s3, a[2]), SHAPE_OF(s4, rm));
        return -1;
    }
    return 0;
}

/* 6. The operands in the result dtype (a float mask in it, a bool one as it is;
 * with `private`, copies: vjp's), into a. */
static int sdpa_operands_cast(const entry_call *c, int private, sdpa_kept *a)
{
    const int typenum = a->typenum = c->dt->typenum;
    a->result = c->result;
    PyArrayObject **const ops[3] = {&a->q, &a->k, &a->v};
    for (int i = 0; i < 3; i++)
        if ((*ops[i] = private ? private_cast(c->arr[i], typenum, c->e->what[i])
                               : cast_array(c->arr[i], typenum, 0, c->e->what[i])) == NULL)
            return -1;
    PyArrayObject *rm = c->arr[3];
    if (rm == NULL)
        return 0;
    const int mt = PyArray_TYPE(rm) == NPY_BOOL ? NPY_BOOL : typenum;
    PyArrayObject *m = squeeze_broadcast(rm, PyArray_NDIM(rm));
    if (m == NULL)
        return -1;
    a->mask = private ? private_cast(m, mt, WHAT "attn_mask")
                      : cast_array(m, mt, 0, WHAT "attn_mask");
    Py_DECREF(m);
    if (a->mask == NULL)
        return -1;
    if (PyArray_NDIM(a->mask) < 2) {   /* [S] or a scalar: as [1, S] or [1, 1] */
        npy_intp mdims[2] = {1, PyArray_NDIM(a->mask) == 1 ? PyArray_DIM(a->mask, 0) : 1};
        PyArray_Dims shape = {mdims, 2};
        Py_SETREF(a->mask, (PyArrayObject *)PyArray_Newshape(a->mask, &shape, NPY_ANYORDER));
        if (a->mask == NULL)
            return -1;
    }
    return 0;
}

/* A call's arguments, checked and converted, into *a (zero-filled by the caller,
 * which clears it with sdpa_kept_clear whatever this returns): the operands as
 * the kernels read them, 7. the problem with the dropout seed drawn (one draw of
 * myatt's generator when dropout_p > 0).  0, or -1 with an exception. */
static int sdpa_prepare(const entry_call *c, int private, sdpa_kept *a)
{
    sdpa_shape sh = {0};
    if (sdpa_scalars(c, &sh) < 0 || sdpa_operands(c, &sh) < 0 || sdpa_batch(c, &sh) < 0
            || sdpa_operands_cast(c, private, a) < 0)
        return -1;
    sdpa_problem *p = a->problem = PyMem_Calloc(1, sizeof *p);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const int nb = sh.nb;
    p->L = sh.L;
    p->S = sh.S;
    p->E = sh.E;
    p->Ev = sh.Ev;
    p->nbatch = nb;
    for (int d = 0; d < nb; d++)
        p->batch[d] = sh.dims[d];
    operand_strides(&p->q, a->q, nb);
    operand_strides(&p->k, a->k, nb);
    operand_strides(&p->v, a->v, nb);
    if (a->mask != NULL) {
        operand_strides(&p->mask, a->mask, nb);
        p->mask_kind = PyArray_TYPE(a->mask) == NPY_BOOL ? SDPA_MASK_BOOL : SDPA_MASK_FLOAT;
    }
    /* GQA: key's head stride taken along the query's heads, index h / group */
    if (sh.k_group > 1)
        p->k.bs[nb - 1] = ESTRIDE(a->k, PyArray_NDIM(a->k) - 3);
    if (sh.v_group > 1)
        p->v.bs[nb - 1] = ESTRIDE(a->v, PyArray_NDIM(a->v) - 3);
    p->k_group = sh.k_group;
    p->v_group = sh.v_group;
    p->is_causal = sh.is_causal;
    const PyObject *scale = c->obj[6];
    p->scale = scale != NULL && scale != Py_None ? sh.scale : 1.0 / sqrt((double)sh.E);
    p->prescale = !sh.flash;
    p->dropout_p = sh.dropout_p;
    p->round_weights = p->prescale ? MK_HALF_NONE : dtype_half_kind(a->result);
    if (sh.dropout_p > 0.0) {   /* one draw of myatt's generator (GIL held) seeds the mask */
        myatt_state *st = myatt_state_of_module(c->module);
        p->dropout_seed = mt19937_random64(&st->rng);
    }
    return 0;
}

/* The problem's work in multiply-adds of the forward's two products. */
static double sdpa_work(const sdpa_problem *p)
{
    double work = (double)p->L * (double)p->S * (double)(p->E + p->Ev);
    for (int d = 0; d < p->nbatch; d++)
        work *= (double)p->batch[d];
    return work;
}

/* The forward of a prepared call: a new output (and, with `lse`, its
 * log-sum-exp written there), or NULL. */
static PyObject *sdpa_forward(const sdpa_kept *a, PyArrayObject *lse)
{
    const sdpa_problem *p = a->problem;
    npy_intp dims[SDPA_MAX_BATCH_DIMS + 2];
    for (int d = 0; d < p->nbatch; d++)
        dims[d] = p->batch[d];
    dims[p->nbatch] = p->L;
    dims[p->nbatch + 1] = p->Ev;
    PyObject *out = new_array(p->nbatch + 2, dims, a->typenum, WHAT "the result");
    if (out == NULL)
        return NULL;
    void *od = PyArray_DATA((PyArrayObject *)out);
    void *ld = lse != NULL ? PyArray_DATA(lse) : NULL;
    int rc = 0;
    /* An empty result (L or Ev 0) is written by nobody: no kernel run, whatever the
     * broadcast batch (a 2**40-item broadcast computed every item's scores), nor for
     * its log-sum-exp, which the backward of an empty result never reads (its
     * gradients are zeros): vjp's [L, S] scores of E = Ev = 0 ran for seconds. */
    if (PyArray_SIZE((PyArrayObject *)out) > 0) {
        MYATT_BEGIN_COMPUTE(sdpa_work(p))
        rc = sdpa_forward_kernels[dtype_of_typenum(a->typenum)->kernel](od, ld, p);
        MYATT_END_COMPUTE
    }
    if (rc < 0) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_MemoryError, WHAT "could not allocate the kernel's workspace");
        return NULL;
    }
    return out;
}

static PyObject *sdpa_run(const entry_call *c)
{
    sdpa_kept a = {0};
    PyObject *out = sdpa_prepare(c, 0, &a) < 0 ? NULL : sdpa_forward(&a, NULL);
    sdpa_kept_clear(&a);
    return out;
}

static const entry_param sdpa_params[] = {
    {"query", ARG_ARRAY}, {"key", ARG_ARRAY}, {"value", ARG_ARRAY},
    {"attn_mask", ARG_MASK, "None"}, {"dropout_p", ARG_VALUE, "0.0"},
    {"is_causal", ARG_VALUE, "False"}, {"scale", ARG_VALUE, "None"},
    {"enable_gqa", ARG_VALUE, "False"}, {NULL}};

static const vjp_kind sdpa_vjp;

ENTRY(sdpa_entry, .name = "scaled_dot_product_attention", .params = sdpa_params,
      .doc = sdpa_doc, .run = sdpa_run, .vjp = &sdpa_vjp)

/* ---- myatt.vjp -------------------------------------------------------------- */

static PyObject *sdpa_vjp_forward(PyObject *module, PyObject *fn, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames, void *kept_)
{
    sdpa_kept *kept = kept_;
    entry_call c;
    PyObject *result = NULL;
    if (entry_parse(&sdpa_entry, module, args, nargs, kwnames, &c) < 0
            || (dtype_is_half(c.result) && entry_half_operands(&c) < 0)
            || sdpa_prepare(&c, 1, kept) < 0)
        goto done;
    const sdpa_problem *p = kept->problem;
    npy_intp dims[SDPA_MAX_BATCH_DIMS + 1];
    for (int d = 0; d < p->nbatch; d++)
        dims[d] = p->batch[d];
    dims[p->nbatch] = p->L;
    if ((kept->lse = (PyArrayObject *)new_array(p->nbatch + 1, dims, NPY_DOUBLE,
                                                "vjp(): the log-sum-exp")) == NULL   /* sdpa.h */
            || (kept->out = (PyArrayObject *)sdpa_forward(kept, kept->lse)) == NULL)
        goto done;
    if (PyArray_SIZE(kept->out) == 0)   /* not computed (sdpa_forward): zeros, never read */
        memset(PyArray_DATA(kept->lse), 0, (size_t)PyArray_NBYTES(kept->lse));
    if (dtype_is_half(kept->result))   /* the backward reads the output the caller got */
        mk_half_round_inplace(PyArray_DATA(kept->out), PyArray_SIZE(kept->out),
                              dtype_half_kind(kept->result));
    /* the caller's; ours stays unchanged */
    result = round_results((PyObject *)copy_array(kept->out), kept->result, WHAT "the result");
done:
    entry_call_clear(&c);
    return result;
}

/* (grad_query, grad_key, grad_value, None) from what the forward kept and
 * grad_output, converted to its dtype, with the forward's out, lse and
 * dropout mask. */
static PyObject *sdpa_vjp_pull(PyObject *module, const void *kept_, PyArrayObject *grad_output,
                               PyObject *ga)
{
    const sdpa_kept *kept = kept_;
    const sdpa_problem *p = kept->problem;
    const int typenum = kept->typenum;
    PyArrayObject *g = NULL;
    PyObject *dq = NULL, *dk = NULL, *dv = NULL, *result = NULL;
    /* (half precision: grad_output in the forward's dtype, then computed in float32) */
    PyArrayObject *go = cast_array(grad_output, kept->result->typenum, 0,
                                   "pullback(): grad_output");
    g = go == NULL ? NULL : cast_array(go, typenum, 1, "pullback(): grad_output");
    Py_XDECREF(go);
    if (g == NULL
            || (dq = new_array(PyArray_NDIM(kept->q), PyArray_DIMS(kept->q), typenum,
                               "pullback(): grad_query")) == NULL
            || (dk = new_array(PyArray_NDIM(kept->k), PyArray_DIMS(kept->k), typenum,
                               "pullback(): grad_key")) == NULL
            || (dv = new_array(PyArray_NDIM(kept->v), PyArray_DIMS(kept->v), typenum,
                               "pullback(): grad_value")) == NULL)
        goto fail;
#define DATA(a) PyArray_DATA((PyArrayObject *)(a))
    const sdpa_grads grads = {DATA(dq), DATA(dk), DATA(dv), DATA(g), DATA(kept->out),
                              DATA(kept->lse)};
#undef DATA
    int rc;
    /* the backward's products: the scores and dP = dO V^T in both passes, dV, dK, dQ
     * (3.5x the forward's two) */
    MYATT_BEGIN_COMPUTE(3.5 * sdpa_work(p))
    rc = sdpa_backward_kernels[dtype_of_typenum(typenum)->kernel](&grads, p);
    MYATT_END_COMPUTE
    if (rc < 0) {
        PyErr_SetString(PyExc_MemoryError, "pullback(): could not allocate the kernel's "
                        "workspace");
        goto fail;
    }
    result = round_results(PyTuple_Pack(4, dq, dk, dv, Py_None),   /* none for attn_mask */
                           kept->result, "pullback(): the gradients");
fail:
    Py_XDECREF(g);
    Py_XDECREF(dq);
    Py_XDECREF(dk);
    Py_XDECREF(dv);
    return result;
}

static int sdpa_vjp_held(const void *kept_, PyObject *held)
{
    const sdpa_kept *kept = kept_;
    const char *const names[6] = {"query", "key", "value", "output", "lse", "attn_mask"};
    PyArrayObject *const arrays[6] = {kept->q, kept->k, kept->v, kept->out, kept->lse,
                                      kept->mask};
    for (int i = 0; i < 6; i++)
        if (arrays[i] != NULL && held_append(held, names[i], Py_NewRef(arrays[i])) < 0)
            return -1;
    return 0;
}

static const vjp_kind sdpa_vjp = {
    .name = "scaled_dot_product_attention", .kept_size = sizeof(sdpa_kept),
    .forward = sdpa_vjp_forward, .pull = sdpa_vjp_pull, .held = sdpa_vjp_held,
    .clear = sdpa_kept_clear,
};
