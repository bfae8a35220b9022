/* myatt.vjp's kinds: for each differentiable function and type, what its
 * pullback keeps and how it computes the gradients, one struct each.  vjp.c
 * holds the Pullback type, vjp() and the kind of the kernel functions that
 * declare a backward (entry.h); each type's kind and scaled_dot_product_
 * attention's sit beside their forward, and module.c pairs each type with its
 * kind (myatt_state.types).
 *
 * A pullback keeps private copies (never the caller's memory, nor the arrays
 * handed out in the result), so that a change made in place after vjp to an
 * input, a parameter or the result cannot reach the gradients; it only reads
 * them, so it may be called more than once, from several threads at a time. */
#ifndef MYATT_VJP_H
#define MYATT_VJP_H

#include "state.h"

typedef struct vjp_kind {
    const char *name;        /* Pullback.fn and its repr: "MyAtt" (NULL: the function's) */
    size_t kept_size;        /* the bytes of what a pullback keeps (zero-filled first) */
    int attn_weights;        /* pullback(grad_output, grad_attn_weights=None) */
    /* fn(*args, **kwargs) as a vectorcall gives them: the result (an array, or a
     * tuple whose first item grad_output is shaped like), what the pullback
     * reads in *kept (released by clear whatever this returns) */
    PyObject *(*forward)(PyObject *module, PyObject *fn, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames, void *kept);
    /* The gradients: go a real array of the result's shape (checked), ga the
     * second cotangent (NULL when None or not taken) */
    PyObject *(*pull)(PyObject *module, const void *kept, PyArrayObject *go, PyObject *ga);
    /* What repr and nbytes show: (name, array or value) pairs appended to the
     * list `held`, 0 or -1; and the bytes held beside them (the kernel's
     * buffers; NULL: none) */
    int (*held)(const void *kept, PyObject *held);
    Py_ssize_t (*extra_bytes)(const void *kept);
    void (*clear)(void *kept);
} vjp_kind;

/* (name, obj) appended to the list `held`, obj a new reference (NULL: -1): 0 or -1 */
int held_append(PyObject *held, const char *name, PyObject *obj);

/* g must have `ndim` dimensions `want`: 0, or -1 with ValueError naming `name`
 * ("pullback(): grad_attn_weights must have shape ...") */
int check_cotangent(PyArrayObject *g, int ndim, const npy_intp *want, const char *name);

#endif
