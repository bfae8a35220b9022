/* The pieces module.c assembles into myatt._myatt, one per file: method
 * tables, type specs and the setup functions of module init.  Each piece
 * includes it for its own declaration and module.c to assemble them; no
 * piece calls another's export from here, nor anything of module.c. */
#ifndef MYATT_PIECES_H
#define MYATT_PIECES_H

#include "state.h"

extern PyMethodDef functions_methods[];   /* functions.c: linear, softmax, bmm */
extern PyMethodDef backward_methods[];    /* backward.c: their backward */
extern PyMethodDef sdpa_methods[];       /* sdpa_function.c: scaled_dot_product_attention */
extern PyMethodDef runtime_methods[];     /* runtime.c: manual_seed, threads, ... */
extern PyType_Spec linear_type_spec;      /* linear_type.c: myatt.Linear */
extern PyType_Spec myatt_type_spec;       /* myatt_type.c: myatt.MyAtt */
extern PyType_Spec mha_type_spec;         /* mha_type.c: myatt.MultiheadAttention */
extern PyMethodDef vjp_methods[];         /* vjp.c: myatt.vjp */
extern PyType_Spec pullback_type_spec;    /* vjp.c: myatt.Pullback, what vjp returns */

/* Module init of the pieces that keep state: 0, or -1 with an exception. */
int runtime_setup(PyObject *module);      /* runtime.c: allocator, generator, ISA note */
int checks_setup(myatt_state *st);        /* checks.c: numpy's AxisError */
int interop_setup(myatt_state *st);       /* interop.c: the rebuild token, gradients' keys */

#endif
