/* myatt.scaled_dot_product_attention (sdpa_function.c): its entry point and
 * its line of the module's method table. */
#ifndef MYATT_SDPA_FUNCTION_H
#define MYATT_SDPA_FUNCTION_H

#include "glue.h"

PyObject *myatt_scaled_dot_product_attention(PyObject *module, PyObject *args, PyObject *kwds);
extern const char myatt_scaled_dot_product_attention_doc[];
PyObject *myatt_sdpa_forward(PyObject *module, PyObject *args, PyObject *kwds);
extern const char myatt_sdpa_forward_doc[];
PyObject *myatt_sdpa_backward(PyObject *module, PyObject *args, PyObject *kwds);
extern const char myatt_sdpa_backward_doc[];

#define MYATT_SDPA_METHODS \
    {"scaled_dot_product_attention", (PyCFunction)(void (*)(void))myatt_scaled_dot_product_attention, \
     METH_VARARGS | METH_KEYWORDS, myatt_scaled_dot_product_attention_doc}, \
    {"_sdpa_forward", (PyCFunction)(void (*)(void))myatt_sdpa_forward, \
     METH_VARARGS | METH_KEYWORDS, myatt_sdpa_forward_doc}, \
    {"_sdpa_backward", (PyCFunction)(void (*)(void))myatt_sdpa_backward, \
     METH_VARARGS | METH_KEYWORDS, myatt_sdpa_backward_doc},

#endif
