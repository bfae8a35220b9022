/* myatt.Linear (linear_type.c): its object layout and the constructor that
 * MyAtt's sub-layers share. */
#ifndef MYATT_LINEAR_TYPE_H
#define MYATT_LINEAR_TYPE_H

#include <stddef.h>

#include "interop.h"
#include "state.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;  /* layer(x) without an args tuple (linear_type.c) */
    module_init_state init;     /* built in __init__ or not (interop.h: module_head) */
    int training;               /* torch's mode (interop.h: module_head) */
    Py_ssize_t in_features, out_features;
    const myatt_dtype *dtype;   /* a row of the dtype table (dtype.h) */
    PyArrayObject *weight;      /* [out, in], C-contiguous (MultiheadAttention's out_proj:
                                   stored transposed, Fortran-ordered); never handed out
                                   itself */
    PyArrayObject *bias;        /* [out], or NULL for bias=False */
} LinearObject;
MODULE_HEAD_ASSERT(LinearObject);

/* What a new Linear's parameters start as. */
typedef enum {
    LINEAR_INIT_TORCH,   /* torch's initial weights, drawn from the module's generator */
    LINEAR_INIT_ZEROS,   /* zeros, nothing drawn: a state_dict is loaded next (interop.c) */
} linear_init;

/* A new Linear (of `type`: Linear or a subclass), its parameters as `init` says,
 * its weight stored transposed when `transposed` (new_transposed_array); a
 * MemoryError names the parameter after `name` ("Linear(): ", "MyAtt(): attn."). */
LinearObject *linear_create(myatt_state *st, PyTypeObject *type, Py_ssize_t in_features,
                            Py_ssize_t out_features, int bias, const myatt_dtype *dtype,
                            linear_init init, int transposed, const char *name);

/* linear_forward.c: layer(x) and its methods; their docstrings */
PyObject *Linear_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames);
PyObject *Linear_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *Linear_forward_fast(LinearObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames);
PyObject *Linear_backward(LinearObject *self, PyObject *args, PyObject *kwds);
extern const char Linear_call_doc[], Linear_forward_doc[], Linear_backward_doc[];

#endif
