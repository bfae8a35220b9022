/* The pieces module.c assembles into myatt._myatt, one per file: method
 * tables, type specs, vjp kinds and the setup functions of module init.  Each
 * piece includes it for its own declaration and module.c to assemble them; no
 * piece calls another's export from here, nor anything of module.c. */
#ifndef MYATT_PIECES_H
#define MYATT_PIECES_H

#include "state.h"

struct vjp_kind;

extern PyMethodDef runtime_methods[];     /* runtime.c: manual_seed, threads, ... */
extern PyType_Spec linear_type_spec;      /* linear_type.c: myatt.Linear */
extern PyType_Spec tutorial_type_spec;    /* tutorial_type.c: myatt.MyAtt */
extern PyType_Spec mha_type_spec;         /* mha_type.c: myatt.MultiheadAttention */
extern PyMethodDef vjp_methods[];         /* vjp.c: myatt.vjp */
extern PyType_Spec pullback_type_spec;    /* vjp.c: myatt.Pullback, what vjp returns */
/* what vjp keeps of each type's objects: linear_type.c, tutorial_forward.c, mha_forward.c */
extern const struct vjp_kind linear_vjp, tutorial_vjp, mha_vjp;

/* Module init of the pieces that keep state: 0, or -1 with an exception. */
int runtime_setup(PyObject *module);      /* runtime.c: allocator, generator, ISA note */
int checks_setup(myatt_state *st);        /* checks.c: numpy's AxisError */
int interop_setup(myatt_state *st);       /* interop.c: the rebuild token, gradients' keys */
int entry_setup(PyObject *module);        /* entry.c: the kernel functions (entry.h) */
int vjp_setup(myatt_state *st);           /* vjp.c: what vjp differentiates, its docstring */

#endif
