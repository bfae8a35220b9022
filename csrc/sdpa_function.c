/* myatt.scaled_dot_product_attention: converts and checks the arguments,
 * works out the broadcast batch shape and every operand's strides along it,
 * releases the GIL and calls the flash kernel (kernels/sdpa.h). */
#include "glue.h"
#include "pieces.h"
#include "state.h"

#include "kernels/sdpa.h"

#include <math.h>
#include <string.h>

static const char myatt_scaled_dot_product_attention_doc[] =
"scaled_dot_product_attention($module, query, key, value, attn_mask=None, dropout_p=0.0,\n"
"                             is_causal=False, scale=None, enable_gqa=False)\n--\n\n"
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
"    at the top left); blocks above the diagonal are skipped.\n"
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
"    mask).\n"
"ValueError\n"
"    Fewer than 2 dimensions, E or S that do not match, batch dimensions or\n"
"    head counts that do not broadcast or divide, a mask of the wrong shape,\n"
"    attn_mask with is_causal=True, dropout_p outside [0, 1].\n"
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

/* The backward of a checked problem: grad_output converted and checked
 * against the output's shape dims[0:nb+2], the forward run for out and lse,
 * then the gradients.  A new (dq, dk, dv) tuple, or NULL. */
static PyObject *sdpa_backward_call(PyObject *grad_obj, const sdpa_problem *p,
                                    PyArrayObject *q, PyArrayObject *k, PyArrayObject *v,
                                    const npy_intp *dims, int typenum, double dropout_p)
{
    const int nb = p->nbatch;
    PyArrayObject *rg = NULL, *g = NULL;
    PyObject *out = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL, *result = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN];
    int kv_differ = p->k_group != p->v_group;
    for (int d = 0; d < nb; d++)
        kv_differ |= p->k.bd[d] != p->v.bd[d];
    if (kv_differ) {
        PyErr_SetString(PyExc_ValueError, "_sdpa_backward(): key and value must have the "
                        "same batch shape, for now");
        return NULL;
    }
    if ((rg = as_real_array(grad_obj, "_sdpa_backward(): grad_output")) == NULL)
        return NULL;
    if (PyArray_NDIM(rg) != nb + 2 || !PyArray_CompareLists(PyArray_DIMS(rg), dims, nb + 2)) {
        PyErr_Format(PyExc_ValueError, "_sdpa_backward(): grad_output must have the output's "
                     "shape %s, got %s", shape_str(s1, sizeof s1, nb + 2, dims),
                     SHAPE_OF(s2, rg));
        goto fail;
    }
    if ((g = cast_array(rg, typenum, 1)) == NULL)
        goto fail;
    if ((out = new_array(nb + 2, dims, typenum, "_sdpa_backward(): the output")) == NULL
            || (lse = new_array(nb + 1, dims, typenum, "_sdpa_backward(): the lse")) == NULL
            || (dq = new_array(PyArray_NDIM(q), PyArray_DIMS(q), typenum,
                               "_sdpa_backward(): grad_query")) == NULL
            || (dk = new_array(PyArray_NDIM(k), PyArray_DIMS(k), typenum,
                               "_sdpa_backward(): grad_key")) == NULL
            || (dv = new_array(PyArray_NDIM(v), PyArray_DIMS(v), typenum,
                               "_sdpa_backward(): grad_value")) == NULL)
        goto fail;
    double work = 3.0 * (double)p->L * (double)p->S * (double)(p->E + p->Ev);
    for (int d = 0; d < nb; d++)
        work *= (double)dims[d];
#define DATA(a) PyArray_DATA((PyArrayObject *)(a))
    int rc;
    MYATT_BEGIN_COMPUTE(work)
    const myatt_kernels *kern = dtype_of_typenum(typenum)->k;
    const sdpa_grads grads = {DATA(dq), DATA(dk), DATA(dv), DATA(g), DATA(out), DATA(lse)};
    rc = kern->sdpa_forward(DATA(out), DATA(lse), p) < 0 || kern->sdpa_backward(&grads, p) < 0;
    MYATT_END_COMPUTE
#undef DATA
    if (rc) {
        PyErr_SetString(PyExc_MemoryError, "_sdpa_backward(): could not allocate the kernel's "
                        "workspace");
        goto fail;
    }
    result = PyTuple_Pack(3, dq, dk, dv);
fail:
    Py_XDECREF(rg);
    Py_XDECREF(g);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    Py_XDECREF(dq);
    Py_XDECREF(dk);
    Py_XDECREF(dv);
    return result;
}

/* The forward (grad_obj NULL: returns the output, or with want_state the
 * tuple (output, lse, dropout seed)) or, with grad_obj, the gradients
 * (dq, dk, dv) of sum(output * grad_output): the forward is run for its out
 * and lse (its dropout mask from seed_obj), then the backward kernel. */
static PyObject *sdpa_call(PyObject *module, PyObject *args, PyObject *kwds, PyObject *grad_obj,
                           PyObject *seed_obj, int want_state)
{
    static char *kwlist[] = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal",
                             "scale", "enable_gqa", NULL};
    PyObject *q_obj, *k_obj, *v_obj, *mask_obj = Py_None, *scale_obj = Py_None;
    PyObject *dropout_obj = NULL, *out = NULL, *result = NULL, *lse = NULL;
    int is_causal = 0, enable_gqa = 0;
    PyArrayObject *rq = NULL, *rk = NULL, *rv = NULL, *rm = NULL;
    PyArrayObject *q = NULL, *k = NULL, *v = NULL, *m = NULL;
    sdpa_problem *p = NULL;
    char s1[SHAPE_STR_LEN], s2[SHAPE_STR_LEN], s3[SHAPE_STR_LEN];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|OOpOp:scaled_dot_product_attention",
                                     kwlist, &q_obj, &k_obj, &v_obj, &mask_obj, &dropout_obj,
                                     &is_causal, &scale_obj, &enable_gqa))
        return NULL;

    /* 1. Scalars: dropout_p in [0, 1], scale a real number or None. */
    double dropout_p = 0.0, scale = 0.0;
    if (dropout_obj != NULL) {
        if (PyBool_Check(dropout_obj) || !(PyFloat_Check(dropout_obj) || PyLong_Check(dropout_obj)
                                           || PyNumber_Check(dropout_obj))) {
            PyErr_Format(PyExc_TypeError, WHAT "dropout_p must be a float, got %.100s",
                         Py_TYPE(dropout_obj)->tp_name);
            return NULL;
        }
        dropout_p = PyFloat_AsDouble(dropout_obj);
        if (dropout_p == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) {
            PyErr_Format(PyExc_ValueError, WHAT "dropout_p must be in [0, 1], got %R",
                         dropout_obj);
            return NULL;
        }
    }
    if (scale_obj != Py_None) {
        if (PyBool_Check(scale_obj)) {
            PyErr_SetString(PyExc_TypeError, WHAT "scale must be a float or None, got bool");
            return NULL;
        }
        scale = PyFloat_AsDouble(scale_obj);
        if (scale == -1.0 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, WHAT "scale must be a float or None, got %.100s",
                             Py_TYPE(scale_obj)->tp_name);
            }
            return NULL;
        }
    }

    /* 2. Arrays and their shapes. */
    if ((rq = as_real_array(q_obj, WHAT "query")) == NULL
            || (rk = as_real_array(k_obj, WHAT "key")) == NULL
            || (rv = as_real_array(v_obj, WHAT "value")) == NULL)
        goto fail;
    if (mask_obj != Py_None) {
        if (is_causal) {
            PyErr_SetString(PyExc_ValueError, WHAT "attn_mask and is_causal=True cannot be "
                            "given together (is_causal is a mask of its own)");
            goto fail;
        }
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

    /* 6. dtypes: the kernels' rule; a float mask in that dtype, a bool one as it is. */
    const int typenum = result_typenum(rq, rk, rv);
    if ((q = cast_array(rq, typenum, 0)) == NULL || (k = cast_array(rk, typenum, 0)) == NULL
            || (v = cast_array(rv, typenum, 0)) == NULL)
        goto fail;
    if (rm != NULL) {
        if (PyArray_TYPE(rm) == NPY_BOOL)
            m = (PyArrayObject *)Py_NewRef(rm);
        else if ((m = cast_array(rm, typenum, 0)) == NULL)
            goto fail;
        if (PyArray_NDIM(m) < 2) {   /* [S] or a scalar: as [1, S] or [1, 1] */
            npy_intp mdims[2] = {1, PyArray_NDIM(m) == 1 ? PyArray_DIM(m, 0) : 1};
            PyArray_Dims shape = {mdims, 2};
            PyArrayObject *m2 = (PyArrayObject *)PyArray_Newshape(m, &shape, NPY_ANYORDER);
            Py_SETREF(m, m2);
            if (m == NULL)
                goto fail;
        }
    }

    /* 7. The problem, the result, the kernel without the GIL. */
    if ((p = PyMem_Calloc(1, sizeof *p)) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    p->L = L; p->S = S; p->E = E; p->Ev = Ev;
    p->nbatch = nb;
    for (int d = 0; d < nb; d++)
        p->batch[d] = dims[d];
    operand_strides(&p->q, q, nb);
    operand_strides(&p->k, k, nb);
    operand_strides(&p->v, v, nb);
    if (m != NULL) {
        operand_strides(&p->mask, m, nb);
        p->mask_kind = PyArray_TYPE(m) == NPY_BOOL ? SDPA_MASK_BOOL : SDPA_MASK_FLOAT;
    }
    /* GQA: key's head stride taken along the query's heads, index h / group */
    if (k_group > 1)
        p->k.bs[nb - 1] = ESTRIDE(k, nk - 3);
    if (v_group > 1)
        p->v.bs[nb - 1] = ESTRIDE(v, nv - 3);
    p->k_group = k_group;
    p->v_group = v_group;
    p->is_causal = is_causal;
    p->scale = scale_obj != Py_None ? scale : 1.0 / sqrt((double)E);
    p->prescale = dropout_p > 0.0 || !torch_takes_flash(rq, rk, rv, rm, enable_gqa);
    p->dropout_p = dropout_p;
    if (dropout_p > 0.0 && grad_obj != NULL) {   /* the forward's mask again */
        if (seed_obj == NULL || !PyLong_Check(seed_obj)) {
            PyErr_SetString(PyExc_TypeError, "_sdpa_backward(): dropout_p > 0 needs "
                            "dropout_seed, the integer _sdpa_forward returned");
            goto fail;
        }
        p->dropout_seed = PyLong_AsUnsignedLongLongMask(seed_obj);
        if (p->dropout_seed == (uint64_t)-1 && PyErr_Occurred())
            goto fail;
    }
    else if (dropout_p > 0.0) {   /* one draw of myatt's generator (GIL held) seeds the mask */
        myatt_state *st = myatt_state_of_module(module);
        p->dropout_seed = mt19937_random64(&st->rng);
    }

    if (grad_obj != NULL) {
        result = sdpa_backward_call(grad_obj, p, q, k, v, dims, typenum, dropout_p);
        goto fail;
    }
    if ((out = new_array(nb + 2, dims, typenum, WHAT "the result")) == NULL
            || (want_state && (lse = new_array(nb + 1, dims, typenum, WHAT "the lse")) == NULL))
        goto fail;
    double work = (double)L * (double)S * (double)(E + Ev);
    for (int d = 0; d < nb; d++)
        work *= (double)dims[d];
    void *od = PyArray_DATA((PyArrayObject *)out);
    void *ld = lse != NULL ? PyArray_DATA((PyArrayObject *)lse) : NULL;
    int rc = 0;
    /* An empty result (L or Ev 0) is written by nobody: no kernel run, whatever the
     * broadcast batch (a 2**40-item broadcast computed every item's scores). */
    if (ld != NULL || PyArray_SIZE((PyArrayObject *)out) > 0) {
        MYATT_BEGIN_COMPUTE(work)
        rc = dtype_of_typenum(typenum)->k->sdpa_forward(od, ld, p);
        MYATT_END_COMPUTE
    }
    if (rc < 0) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_MemoryError, WHAT "could not allocate the kernel's workspace");
    }
    else if (want_state) {
        result = Py_BuildValue("(OOK)", out, lse, (unsigned long long)p->dropout_seed);
    }
fail:
    Py_XDECREF(lse);
    PyMem_Free(p);
    Py_XDECREF(rq);
    Py_XDECREF(rk);
    Py_XDECREF(rv);
    Py_XDECREF(rm);
    Py_XDECREF(q);
    Py_XDECREF(k);
    Py_XDECREF(v);
    Py_XDECREF(m);
    if (grad_obj != NULL || want_state) {
        Py_XDECREF(out);
        return result;
    }
    return out;
}

static PyObject *myatt_scaled_dot_product_attention(PyObject *module, PyObject *args, PyObject *kwds)
{
    return sdpa_call(module, args, kwds, NULL, NULL, 0);
}

static const char myatt_sdpa_forward_doc[] =
"_sdpa_forward($module, query, key, value, /, *args, **kwargs)\n--\n\n"
"scaled_dot_product_attention's (output, lse, dropout_seed): lse [..., L] the\n"
"log-sum-exp of each row's scores (0 for a fully masked row), dropout_seed the\n"
"draw of myatt's generator that seeded the dropout mask (0 without dropout).\n"
"Private: what _sdpa_backward (and myatt.vjp) needs to give the same mask.";

static PyObject *myatt_sdpa_forward(PyObject *module, PyObject *args, PyObject *kwds)
{
    return sdpa_call(module, args, kwds, NULL, NULL, 1);
}

static const char myatt_sdpa_backward_doc[] =
"_sdpa_backward($module, grad_output, query, key, value, /, *args, dropout_seed=None,\n"
"               **kwargs)\n--\n\n"
"The gradients (grad_query, grad_key, grad_value) of\n"
"sum(scaled_dot_product_attention(query, key, value, *args, **kwargs) * grad_output),\n"
"FlashAttention-2 style (no [L, S] buffer); each gradient shaped like its input\n"
"(summed where the input was broadcast or repeated by GQA).  Private: myatt.vjp\n"
"will wrap it.  With dropout_p > 0, dropout_seed= (from _sdpa_forward) gives the\n"
"forward's mask.  For now key and value must have the same batch shape.";

static PyObject *myatt_sdpa_backward(PyObject *module, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) < 1) {
        PyErr_SetString(PyExc_TypeError, "_sdpa_backward() missing its argument grad_output");
        return NULL;
    }
    PyObject *rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
    if (rest == NULL)
        return NULL;
    /* dropout_seed=: ours, not the forward's; the rest as the forward parses it */
    PyObject *fwd_kwds = kwds != NULL ? PyDict_Copy(kwds) : NULL, *seed = NULL;
    if (kwds != NULL && fwd_kwds == NULL) {
        Py_DECREF(rest);
        return NULL;
    }
    if (fwd_kwds != NULL) {
        seed = PyDict_GetItemString(fwd_kwds, "dropout_seed");
        Py_XINCREF(seed);
        if (seed != NULL && PyDict_DelItemString(fwd_kwds, "dropout_seed") < 0) {
            Py_DECREF(rest);
            Py_DECREF(fwd_kwds);
            Py_DECREF(seed);
            return NULL;
        }
    }
    PyObject *r = sdpa_call(module, rest, fwd_kwds, PyTuple_GET_ITEM(args, 0), seed, 0);
    Py_DECREF(rest);
    Py_XDECREF(fwd_kwds);
    Py_XDECREF(seed);
    return r;
}

PyMethodDef sdpa_methods[] = {
    {"scaled_dot_product_attention",
     (PyCFunction)(void (*)(void))myatt_scaled_dot_product_attention,
     METH_VARARGS | METH_KEYWORDS, myatt_scaled_dot_product_attention_doc},
    {"_sdpa_forward", (PyCFunction)(void (*)(void))myatt_sdpa_forward,
     METH_VARARGS | METH_KEYWORDS, myatt_sdpa_forward_doc},
    {"_sdpa_backward", (PyCFunction)(void (*)(void))myatt_sdpa_backward,
     METH_VARARGS | METH_KEYWORDS, myatt_sdpa_backward_doc},
    {NULL, NULL, 0, NULL},
};
