/* myatt.vjp and its pullback type (vjp.c); the MyAtt forward that keeps what
 * the pullback reads (myatt_type.c), and scaled_dot_product_attention's
 * (sdpa_function.c). */
#ifndef MYATT_VJP_H
#define MYATT_VJP_H

#include "state.h"

/* layer(*args, **kwds) of a Linear `self` (args parsed as Linear.__call__), its
 * own forward on private copies of the input and the parameters, which saved[0],
 * saved[1], saved[2] get (input, weight, bias or None; NULL-filled by the
 * caller, which releases them, also when NULL is returned). */
PyObject *linear_forward_keep(PyObject *self, PyObject *args, PyObject *kwds,
                              PyObject *saved[3]);

/* What a MyAtt forward keeps for its pullback: private copies (C-contiguous,
 * in the module's dtype) that nothing else writes, all in one block (at the
 * seed's shape, nine arrays cost more than the forward: vjp took 2.2 us for
 * its 0.7). */
enum { MYATT_KEPT_ARRAYS = 9 };
typedef struct {
    const myatt_dtype *dtype;
    npy_intp dims[3][3];                 /* the shapes of Q, K, V as given */
    void *block;                         /* private_block_alloc: everything below */
    mk_cmat q, k, v;                     /* Q[0] [S, dq], K[0] [S, dk], V[0] [v1, v2] */
    mk_cmat w_attn, w_comb;              /* attn.weight, attn_combine.weight */
    const void *b_attn, *b_comb;         /* attn.bias [v1], attn_combine.bias [o] */
    void *aw, *applied;                  /* attn_weights [S, v1], applied [S, v2] */
} myatt_kept;

/* m(*args) of a MyAtt `self` (a vectorcall's arguments, parsed as
 * MyAtt.__call__), filling *kept (zero-filled by the caller, which releases it
 * with private_block_free(kept->block), also when NULL is returned). */
PyObject *myatt_forward_keep(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, myatt_kept *kept);

/* MyAtt.backward's dict (myatt_type.c; MyAtt.backward and the pullback share it):
 * allocates the gradients (Q, K shaped dims[0], dims[1], zero beyond batch item
 * 0; V dims[2]; the parameters' shapes from in), runs the fused backward on in,
 * recomputing attn_weights and applied, or reading kept_aw and kept_ap when
 * they are not NULL.  `what` starts the messages ("pullback()"), `keys` the
 * dict's (the module state's myatt_grad_keys).  NULL on error. */
PyObject *myatt_grads_run(const myatt_dtype *dt, const npy_intp dims[3][3],
                          const tutorial_inputs *in, mk_cmat go, const mk_cmat *ga,
                          const void *kept_aw, const void *kept_ap, const char *what,
                          PyObject *const keys[MYATT_GRADS]);

/* Batch item 0 of a checked 3-D array as a kernel reads it, *m: the array's own
 * memory (no view object; *hold NULL) when it is already of `typenum`, aligned
 * and in native byte order, else a converted copy that *hold keeps alive
 * (myatt_type.c; a MemoryError names `what`).  0, or -1 with the error set. */
int batch0_view(PyArrayObject *a, int typenum, const char *what, PyArrayObject **hold,
                mk_cmat *m);

/* The kernel inputs read from kept's copies (q, k, v and the parameters). */
void myatt_kept_inputs(const myatt_kept *kept, tutorial_inputs *in);

/* The shapes of what a MyAtt pullback keeps, in the block's and the repr's
 * order (Q[0], K[0], V[0], attn.weight, attn.bias, attn_combine.weight,
 * attn_combine.bias, attn_weights, applied), from in's views of q, k, v and
 * the weights: ndim[i] is 2, or 1 for the biases (their length dims[i][0]). */
void myatt_kept_shapes(const tutorial_inputs *in, int ndim[MYATT_KEPT_ARRAYS],
                       npy_intp dims[MYATT_KEPT_ARRAYS][2]);

/* scaled_dot_product_attention's arguments as its kernels read them, and what
 * its pullback keeps: private copies (new references) that nothing else writes. */
typedef struct {
    PyArrayObject *q, *k, *v, *mask;   /* converted (mask NULL without one), any strides */
    sdpa_problem *problem;             /* PyMem; its operands point into q, k, v, mask */
    int typenum;                       /* the result's dtype */
    PyArrayObject *out, *lse;          /* the forward's output [batch..., L, Ev] and
                                          log-sum-exp [batch..., L] (C-contiguous;
                                          float64 for both dtypes, sdpa.h) */
} sdpa_kept;

/* myatt.scaled_dot_product_attention(*args, **kwds) (a new result array),
 * filling *kept (zero-filled by the caller, which releases it with
 * sdpa_kept_clear, also when NULL is returned): the operands copied, the
 * problem (its dropout seed drawn, as the call draws it), out and lse. */
PyObject *sdpa_forward_keep(PyObject *module, PyObject *args, PyObject *kwds, sdpa_kept *kept);

/* The pullback's (grad_query, grad_key, grad_value, None) from kept and
 * grad_output (already of out's shape; converted to kept's dtype), with the
 * forward's out, lse and dropout mask.  NULL on error. */
PyObject *sdpa_grads_run(const sdpa_kept *kept, PyArrayObject *grad_output);

void sdpa_kept_clear(sdpa_kept *kept);

/* What a MultiheadAttention forward keeps for its pullback: private copies
 * (new references, C-contiguous, in the module's dtype) of query, key, value
 * (shared where the call passed one array), the masks as the kernel read them,
 * the parameters in state_dict order (NULL where the configuration has none),
 * the problem pointing into them, and the kernel's kept buffers. */
enum { MHA_IN_QUERY, MHA_IN_KEY, MHA_IN_VALUE, MHA_IN_KEY_PADDING_MASK, MHA_IN_ATTN_MASK,
       MHA_KEPT_INPUTS };
enum { MHA_KEPT_PARAMS = 9 };
typedef struct {
    const myatt_dtype *dtype;
    PyArrayObject *inputs[MHA_KEPT_INPUTS];   /* by MHA_IN_* */
    PyArrayObject *params[MHA_KEPT_PARAMS];
    mha_problem p;
    mha_saved s;
    int wnd;                                  /* the weights' ndim (0: need_weights=False) */
    npy_intp wdims[4];
} mha_kept;

/* m(*args, **kwds) of a MultiheadAttention `self` (args parsed as its
 * __call__), filling *kept (zero-filled by the caller, which releases it with
 * mha_kept_clear, also when NULL is returned). */
PyObject *mha_forward_keep(PyObject *self, PyObject *args, PyObject *kwds, mha_kept *kept);

/* The pullback's dict (query, key, value and every state_dict key) from kept,
 * grad_output (a real array of the output's shape) and grad_attn_weights (NULL,
 * or a real array of the weights' shape: vjp.c checks both).  NULL on error. */
PyObject *mha_grads_run(const mha_kept *kept, PyArrayObject *grad_output, PyArrayObject *gw);

/* The names of kept's arrays in reprs, state_dict order after the inputs. */
extern const char *const mha_kept_names[MHA_KEPT_INPUTS + MHA_KEPT_PARAMS];

void mha_kept_clear(mha_kept *kept);

#endif
