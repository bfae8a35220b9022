/* myatt.MultiheadAttention: its object layout, which mha_type.c (the type) and
 * mha_forward.c (its calls) share, and the calls the type's tables name. */
#ifndef MYATT_MHA_TYPE_H
#define MYATT_MHA_TYPE_H

#include "interop.h"
#include "linear_type.h"

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

/* mha_forward.c: the parameters in state_dict order, the own ones then out_proj's
 * weight and bias (NULL where the configuration has none) */
void mha_all_params(MHAObject *self, PyArrayObject **params);

/* mha_forward.c: m(query, key, value, ...) and its methods; their docstrings */
PyObject *MHA_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                         PyObject *kwnames);
PyObject *MHA_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames);
PyObject *MHA_forward_fast(MHAObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
extern const char MHA_call_doc[], MHA_forward_doc[];

#endif
