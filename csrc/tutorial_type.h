/* myatt.MyAtt (the tutorial's module): its object layout, which tutorial_type.c
 * (the type) and tutorial_forward.c (its calls) share, and the calls the
 * type's tables name. */
#ifndef MYATT_TUTORIAL_TYPE_H
#define MYATT_TUTORIAL_TYPE_H

#include "interop.h"
#include "linear_type.h"

#include "kernels/tutorial/tutorial.h"

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

/* tutorial_forward.c: m(Q, K, V) and its methods; their docstrings */
PyObject *MyAtt_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames);
PyObject *MyAtt_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
PyObject *MyAtt_forward_fast(MyAttObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
PyObject *MyAtt_backward(MyAttObject *self, PyObject *args, PyObject *kwds);
extern const char MyAtt_call_doc[], MyAtt_forward_doc[], MyAtt_backward_doc[];

#endif
