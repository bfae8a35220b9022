/* myatt.scaled_dot_product_attention: converts and checks the arguments,
 * works out the broadcast batch shape and every operand's strides along it,
 * releases the GIL and calls the flash kernel (kernels/sdpa.h).  For myatt.vjp
 * (vjp.h): the forward that keeps private copies of the operands, the output
 * and the log-sum-exp, and the pullback's backward on what it kept. */
#include "pieces.h"
#include "state.h"
#include "vjp.h"

#include "kernels/sdpa/sdpa.h"

#include <math.h>
#include <string.h>

static const char myatt_scaled_dot_product_attention_doc[] =
"scaled_dot_product_attention($module, query, key, value, attn_mask=None, dropout_p=0.0, "
"is_causal=False, scale=None, enable_gqa=False)\n--\n\n"
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
"    float64 if any of query, key, value is float64, else float32. A query row\n"
"    with every key masked gives zeros; NaN and inf propagate.\n"
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

void sdpa_kept_clear(sdpa_kept *kept)
{
    Py_CLEAR(kept->q);
    Py_CLEAR(kept->k);
    Py_CLEAR(kept->v);
    Py_CLEAR(kept->mask);
    Py_CLEAR(kept->out);
    Py_CLEAR(kept->lse);
    PyMem_Free(kept->problem);
    kept->problem = NULL;
}

/* The arguments of a call, converted and checked, into *a (zero-filled by the
 * caller, which clears it with sdpa_kept_clear whatever this returns): the
 * operands as the kernels read them (with `private`, copies that nothing else
 * holds: myatt.vjp's), the problem with the dropout seed drawn (one draw of
 * myatt's generator when dropout_p > 0).  0, or -1 with an exception. */
static int sdpa_parse(PyObject *module, PyObject *args, PyObject *kwds, int private,
                      sdpa_kept *a)
{
    static char *kwlist[] = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal",
                             "scale", "enable_gqa", NULL};
    PyObject *q_obj, *k_obj, *v_obj, *mask_obj = Py_None, *scale_obj = Py_None;
    PyObject *dropout_obj = NULL, *causal_obj = Py_False, *gqa_obj = Py_False;
    int is_causal = 0, enable_gqa = 0, rc = -1;
    PyArrayObject *rq = NULL, *rk = NULL, *rv = NULL, *rm = NULL;
    sdpa_problem *p = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN], s3[SHAPE_STR_LEN], s4[SHAPE_STR_LEN];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OOOOO:scaled_dot_product_attention",
                                     kwlist, &q_obj, &k_obj, &v_obj, &mask_obj, &dropout_obj,
                                     &causal_obj, &scale_obj, &gqa_obj))
        return -1;

    /* 1. Scalars: the flags bools (as torch's), dropout_p in [0, 1], scale a real number
     * or None. */
    if (bool_arg(causal_obj, WHAT "is_causal", &is_causal) < 0
            || bool_arg(gqa_obj, WHAT "enable_gqa", &enable_gqa) < 0)
        return -1;
    double dropout_p = 0.0, scale = 0.0;
    if (dropout_obj != NULL && probability_arg(dropout_obj, WHAT "dropout_p", &dropout_p) < 0)
        return -1;
    if (scale_obj != Py_None && float_arg(scale_obj, WHAT "scale", " or None", &scale) < 0)
        return -1;

    /* 2. Arrays and their shapes. */
    if ((rq = as_real_array(q_obj, WHAT "query")) == NULL
            || (rk = as_real_array(k_obj, WHAT "key")) == NULL
            || (rv = as_real_array(v_obj, WHAT "value")) == NULL)
        goto fail;
    if (mask_obj != Py_None) {
        if ((rm = as_real_array(mask_obj, WHAT "attn_mask")) == NULL)
            goto fail;
        int mt = PyArray_TYPE(rm);
        if (mt != NPY_BOOL && mt != NPY_HALF && dtype_of_typenum(mt) == NULL) {
            PyErr_Format(PyExc_TypeError, WHAT "attn_mask must be bool or floating point, "
                         "got dtype %S", (PyObject *)PyArray_DESCR(rm));
            goto fail;
        }
    }
    PyArrayObject *const named[3] = {rq, rk, rv};
    const char *const names[3] = {"query", "key", "value"};
    const char *const forms[3] = {"[..., L, E]", "[..., S, E]", "[..., S, Ev]"};
    for (int i = 0; i < 3; i++)
        if (PyArray_NDIM(named[i]) < 2) {
            PyErr_Format(PyExc_ValueError, WHAT "%s must be at least 2-D %s, got shape %s",
                         names[i], forms[i], SHAPE_OF(s1, named[i]));
            goto fail;
        }
    const int nq = PyArray_NDIM(rq), nk = PyArray_NDIM(rk), nv = PyArray_NDIM(rv);
    const npy_intp L = PyArray_DIM(rq, nq - 2), E = PyArray_DIM(rq, nq - 1);
    const npy_intp S = PyArray_DIM(rk, nk - 2), Ev = PyArray_DIM(rv, nv - 1);
    if (PyArray_DIM(rk, nk - 1) != E) {
        PyErr_Format(PyExc_ValueError, WHAT "key must have shape [..., S, %zd] (E of query "
                     "%s), got %s", (Py_ssize_t)E, SHAPE_OF(s1, rq), SHAPE_OF(s2, rk));
        goto fail;
    }
    if (PyArray_DIM(rv, nv - 2) != S) {
        PyErr_Format(PyExc_ValueError, WHAT "value must have shape [..., %zd, Ev] (S of key "
                     "%s), got %s", (Py_ssize_t)S, SHAPE_OF(s1, rk), SHAPE_OF(s2, rv));
        goto fail;
    }

    /* 3. GQA: key's and value's heads (dimension -3) repeated to the query's. */
    npy_intp k_heads = -1, v_heads = -1, k_group = 1, v_group = 1;
    if (enable_gqa) {
        if (nq < 3 || nk < 3 || nv < 3) {
            PyErr_Format(PyExc_ValueError, WHAT "enable_gqa needs query, key and value with "
                         "a head dimension (-3), got query %s, key %s, value %s",
                         SHAPE_OF(s1, rq), SHAPE_OF(s2, rk), SHAPE_OF(s3, rv));
            goto fail;
        }
        const npy_intp hq = PyArray_DIM(rq, nq - 3);
        for (int i = 1; i < 3; i++) {
            const npy_intp h = PyArray_DIM(named[i], PyArray_NDIM(named[i]) - 3);
            if (h == 0 ? hq != 0 : hq % h != 0) {
                PyErr_Format(PyExc_ValueError, WHAT "enable_gqa: the query's %zd heads "
                             "(dimension -3) must be a multiple of %s's %zd heads",
                             (Py_ssize_t)hq, names[i], (Py_ssize_t)h);
                goto fail;
            }
            const npy_intp group = h == 0 ? 1 : hq / h;
            if (group > 1 && h > 1) {
                if (i == 1) { k_heads = hq; k_group = group; }
                else { v_heads = hq; v_group = group; }
            }
            else if (group > 1) {   /* one head: plain broadcasting repeats it */
                if (i == 1) k_heads = hq;
                else v_heads = hq;
            }
        }
    }

    /* 4. The output's batch shape: query, key and value broadcast together. */
    int nb = nq - 2;
    if (nk - 2 > nb) nb = nk - 2;
    if (nv - 2 > nb) nb = nv - 2;
    if (nb > SDPA_MAX_BATCH_DIMS) {
        PyErr_Format(PyExc_ValueError, WHAT "at most %d batch dimensions, got %d",
                     SDPA_MAX_BATCH_DIMS, nb);
        goto fail;
    }
    npy_intp dims[SDPA_MAX_BATCH_DIMS + 2];
    for (int d = 0; d < nb; d++)
        dims[d] = 1;
    if (broadcast_batch(dims, nb, rq, -1) < 0 || broadcast_batch(dims, nb, rk, k_heads) < 0
            || broadcast_batch(dims, nb, rv, v_heads) < 0) {
        PyErr_Format(PyExc_ValueError, WHAT "the batch dimensions of query %s, key %s and "
                     "value %s do not broadcast%s", SHAPE_OF(s1, rq), SHAPE_OF(s2, rk),
                     SHAPE_OF(s3, rv), enable_gqa ? "" : " (different head counts need "
                     "enable_gqa=True)");
        goto fail;
    }
    dims[nb] = L;
    dims[nb + 1] = Ev;

    /* 5. The mask: broadcastable to [batch..., L, S] without enlarging it. */
    if (rm != NULL) {
        const int nm = PyArray_NDIM(rm);
        int ok = nm <= nb + 2;
        for (int i = 0; ok && i < nm; i++) {
            const npy_intp n = PyArray_DIM(rm, i);
            const int od = nb + 2 - nm + i;
            const npy_intp want = od == nb ? L : od == nb + 1 ? S : dims[od];
            ok = n == want || n == 1;
        }
        if (!ok) {
            npy_intp want[SDPA_MAX_BATCH_DIMS + 2];
            memcpy(want, dims, (size_t)nb * sizeof(npy_intp));
            want[nb] = L;
            want[nb + 1] = S;
            PyErr_Format(PyExc_ValueError, WHAT "attn_mask must be broadcastable to [..., L, "
                         "S] = %s, got shape %s", shape_str(s1, sizeof s1, nb + 2, want),
                         SHAPE_OF(s2, rm));
            goto fail;
        }
    }

    /* attn_mask with is_causal: both applied where torch 2.13's CPU kernel takes them
     * (its flash path; also an empty result or no keys, which it returns at once),
     * refused where it refuses them (its math path) */
    const int flash = dropout_p == 0.0 && torch_takes_flash(rq, rk, rv, rm, enable_gqa);
    int empty = L == 0 || S == 0 || Ev == 0;
    for (int d = 0; d < nb; d++)
        empty |= dims[d] == 0;
    if (rm != NULL && is_causal && !flash && !empty) {
        PyErr_Format(PyExc_ValueError, WHAT "attn_mask and is_causal=True together need the "
                     "inputs of torch's flash kernel, which applies both (4-D query, key and "
                     "value, E == Ev, a 2-D or 4-D mask, dropout_p=0); got query %s, key %s, "
                     "value %s, attn_mask %s", SHAPE_OF(s1, rq), SHAPE_OF(s2, rk),
                     SHAPE_OF(s3, rv), SHAPE_OF(s4, rm));
        goto fail;
    }

    /* 6. dtypes: the kernels' rule; a float mask in that dtype, a bool one as it is. */
    const int typenum = result_typenum(rq, rk, rv);
    a->typenum = typenum;
    PyArrayObject **const ops[3] = {&a->q, &a->k, &a->v};
    static const char *const what[3] = {WHAT "query", WHAT "key", WHAT "value"};
    for (int i = 0; i < 3; i++)
        if ((*ops[i] = private ? private_cast(named[i], typenum, what[i])
                               : cast_array(named[i], typenum, 0, what[i])) == NULL)
            goto fail;
    if (rm != NULL) {
        const int mt = PyArray_TYPE(rm) == NPY_BOOL ? NPY_BOOL : typenum;
        PyArrayObject *m = squeeze_broadcast(rm, PyArray_NDIM(rm));
        if (m == NULL)
            goto fail;
        a->mask = private ? private_cast(m, mt, WHAT "attn_mask")
                          : cast_array(m, mt, 0, WHAT "attn_mask");
        Py_DECREF(m);
        if (a->mask == NULL)
            goto fail;
        if (PyArray_NDIM(a->mask) < 2) {   /* [S] or a scalar: as [1, S] or [1, 1] */
            npy_intp mdims[2] = {1, PyArray_NDIM(a->mask) == 1 ? PyArray_DIM(a->mask, 0) : 1};
            PyArray_Dims shape = {mdims, 2};
            PyArrayObject *m2 = (PyArrayObject *)PyArray_Newshape(a->mask, &shape, NPY_ANYORDER);
            Py_SETREF(a->mask, m2);
            if (a->mask == NULL)
                goto fail;
        }
    }

    /* 7. The problem. */
    if ((p = a->problem = PyMem_Calloc(1, sizeof *p)) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    p->L = L; p->S = S; p->E = E; p->Ev = Ev;
    p->nbatch = nb;
    for (int d = 0; d < nb; d++)
        p->batch[d] = dims[d];
    operand_strides(&p->q, a->q, nb);
    operand_strides(&p->k, a->k, nb);
    operand_strides(&p->v, a->v, nb);
    if (a->mask != NULL) {
        operand_strides(&p->mask, a->mask, nb);
        p->mask_kind = PyArray_TYPE(a->mask) == NPY_BOOL ? SDPA_MASK_BOOL : SDPA_MASK_FLOAT;
    }
    /* GQA: key's head stride taken along the query's heads, index h / group */
    if (k_group > 1)
        p->k.bs[nb - 1] = ESTRIDE(a->k, nk - 3);
    if (v_group > 1)
        p->v.bs[nb - 1] = ESTRIDE(a->v, nv - 3);
    p->k_group = k_group;
    p->v_group = v_group;
    p->is_causal = is_causal;
    p->scale = scale_obj != Py_None ? scale : 1.0 / sqrt((double)E);
    p->prescale = !flash;
    p->dropout_p = dropout_p;
    if (dropout_p > 0.0) {   /* one draw of myatt's generator (GIL held) seeds the mask */
        myatt_state *st = myatt_state_of_module(module);
        p->dropout_seed = mt19937_random64(&st->rng);
    }
    rc = 0;
fail:
    Py_XDECREF(rq);
    Py_XDECREF(rk);
    Py_XDECREF(rv);
    Py_XDECREF(rm);
    return rc;
}

/* The problem's work in multiply-adds of the forward's two products. */
static double sdpa_work(const sdpa_problem *p)
{
    double work = (double)p->L * (double)p->S * (double)(p->E + p->Ev);
    for (int d = 0; d < p->nbatch; d++)
        work *= (double)p->batch[d];
    return work;
}

/* The forward of a parsed call: a new output (and, with `lse`, its log-sum-exp
 * written there), or NULL. */
static PyObject *sdpa_run(const sdpa_kept *a, PyArrayObject *lse)
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
        rc = dtype_of_typenum(a->typenum)->k->sdpa_forward(od, ld, p);
        MYATT_END_COMPUTE
    }
    if (rc < 0) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_MemoryError, WHAT "could not allocate the kernel's workspace");
        return NULL;
    }
    return out;
}

static PyObject *myatt_scaled_dot_product_attention(PyObject *module, PyObject *args, PyObject *kwds)
{
    sdpa_kept a = {0};
    PyObject *out = sdpa_parse(module, args, kwds, 0, &a) < 0 ? NULL : sdpa_run(&a, NULL);
    sdpa_kept_clear(&a);
    return out;
}

PyObject *sdpa_forward_keep(PyObject *module, PyObject *args, PyObject *kwds, sdpa_kept *kept)
{
    if (sdpa_parse(module, args, kwds, 1, kept) < 0)
        return NULL;
    const sdpa_problem *p = kept->problem;
    npy_intp dims[SDPA_MAX_BATCH_DIMS + 1];
    for (int d = 0; d < p->nbatch; d++)
        dims[d] = p->batch[d];
    dims[p->nbatch] = p->L;
    if ((kept->lse = (PyArrayObject *)new_array(p->nbatch + 1, dims, NPY_DOUBLE,
                                                "vjp(): the log-sum-exp")) == NULL   /* sdpa.h */
            || (kept->out = (PyArrayObject *)sdpa_run(kept, kept->lse)) == NULL)
        return NULL;
    if (PyArray_SIZE(kept->out) == 0)   /* not computed (sdpa_run): zeros, never read */
        memset(PyArray_DATA(kept->lse), 0, (size_t)PyArray_NBYTES(kept->lse));
    return (PyObject *)copy_array(kept->out);   /* the caller's; ours stays unchanged */
}

PyObject *sdpa_grads_run(const sdpa_kept *kept, PyArrayObject *grad_output)
{
    const sdpa_problem *p = kept->problem;
    const int typenum = kept->typenum;
    PyArrayObject *g = NULL;
    PyObject *dq = NULL, *dk = NULL, *dv = NULL, *result = NULL;
    if ((g = cast_array(grad_output, typenum, 1, "pullback(): grad_output")) == NULL
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
    rc = dtype_of_typenum(typenum)->k->sdpa_backward(&grads, p);
    MYATT_END_COMPUTE
    if (rc < 0) {
        PyErr_SetString(PyExc_MemoryError, "pullback(): could not allocate the kernel's "
                        "workspace");
        goto fail;
    }
    result = PyTuple_Pack(4, dq, dk, dv, Py_None);   /* no gradient for attn_mask */
fail:
    Py_XDECREF(g);
    Py_XDECREF(dq);
    Py_XDECREF(dk);
    Py_XDECREF(dv);
    return result;
}

PyMethodDef sdpa_methods[] = {
    {"scaled_dot_product_attention",
     (PyCFunction)(void (*)(void))myatt_scaled_dot_product_attention,
     METH_VARARGS | METH_KEYWORDS, myatt_scaled_dot_product_attention_doc},
    {NULL, NULL, 0, NULL},
};
