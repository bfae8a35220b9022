/* The module state of myatt._myatt and its lookup from a type: the one
 * back-reference of the glue layers to the module (module.c defines
 * myatt_module_def and fills the state; nothing else includes module.c's
 * internals).  See docs/architecture.md. */
#ifndef MYATT_STATE_H
#define MYATT_STATE_H

#include "glue.h"

#include "kernels/runtime/rng.h"

#if PY_VERSION_HEX < 0x030B0000
#define PyType_GetModuleByDef _PyType_GetModuleByDef
#endif

enum { LINEAR_GRADS = 3, TUTORIAL_GRADS = 7 };   /* the gradients of Linear, of MyAtt */

struct vjp_kind;

/* The module types whose objects myatt.vjp differentiates, each with its kind
 * (vjp.h): module.c's table */
enum { MYATT_DIFFERENTIABLE_TYPES = 3 };
typedef struct {
    PyTypeObject *type;   /* borrowed: the state's field below holds it */
    const struct vjp_kind *vjp;
} differentiable_type;

typedef struct {
    PyTypeObject *linear_type;
    PyTypeObject *tutorial_type;   /* myatt.MyAtt, the tutorial's module (tutorial_type.c) */
    PyTypeObject *mha_type;        /* myatt.MultiheadAttention (mha_type.c) */
    PyTypeObject *pullback_type;   /* myatt.Pullback (vjp.c) */
    differentiable_type differentiable[MYATT_DIFFERENTIABLE_TYPES];
    char differentiable_names[96];     /* "Linear, MyAtt or MultiheadAttention" (vjp_setup) */
    PyObject *axis_error;     /* numpy.exceptions.AxisError */
    PyObject *rebuild_key;    /* interop.c's private constructor keyword ... */
    PyObject *rebuild_token;  /* ... and its value */
    /* the keys of the gradients' dicts of Linear and MyAtt (backward and their
     * pullbacks), interned once (interop.c): made from C strings per call, the
     * seed's step spent 0.2 of its 3.9 us making and hashing them */
    PyObject *linear_grad_keys[LINEAR_GRADS];
    PyObject *tutorial_grad_keys[TUTORIAL_GRADS];
    mt19937 rng;              /* myatt.manual_seed; used with the GIL held */
} myatt_state;

extern PyModuleDef myatt_module_def;

/* The module that defines `type` (or a base of it), borrowed, or NULL with
 * TypeError when `type` is not one of the module's. */
static inline PyObject *myatt_module_of_type(PyTypeObject *type)
{
    return PyType_GetModuleByDef(type, &myatt_module_def);
}

/* Its state, or NULL (likewise). */
static inline myatt_state *myatt_state_of_type(PyTypeObject *type)
{
    PyObject *module = myatt_module_of_type(type);
    return module == NULL ? NULL : (myatt_state *)PyModule_GetState(module);
}

/* The state of the module itself (a module function's `module` argument). */
static inline myatt_state *myatt_state_of_module(PyObject *module)
{
    return (myatt_state *)PyModule_GetState(module);
}

#endif
