/* What Linear and MyAtt share for pickling, copying, from_torch and Jupyter's
 * _repr_html_ (interop.c). */
#ifndef MYATT_INTEROP_H
#define MYATT_INTEROP_H

#include "state.h"

/* A new object of `type` from its tp_new(args, kwargs) (kwargs a dict or None),
 * loaded from state_dict with strict=True.  Draws nothing from myatt's
 * generator: tp_new is asked to rebuild (rebuild_requested), so the
 * parameters start as zeros.  Unpickling, copy and from_torch. */
PyObject *object_from_state(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            PyObject *state_dict);

/* For a tp_new: whether its keywords `kwds` (a dict or NULL) hold
 * object_from_state's private rebuild keyword (with the module's token as
 * value).  1 and *rest a new dict of the other keywords, 0 and *rest = kwds
 * (borrowed), or -1 with an exception. */
int rebuild_requested(myatt_state *st, PyObject *kwds, PyObject **rest);

/* __reduce__: (type(self)._from_state, (args, kwargs, self.state_dict()),
 * the instance __dict__ of a subclass or None). */
PyObject *reduce_object(PyObject *self, PyObject *args, PyObject *kwargs);

/* The methods both types share: _from_state (unpickling), from_torch (with the
 * myatt._interop function that reads the torch module: "linear_spec" or
 * "myatt_spec") and _repr_html_. */
PyObject *from_state_method(PyTypeObject *cls, PyObject *args);
PyObject *from_torch_with(PyTypeObject *cls, PyObject *module, const char *spec_func);
PyObject *repr_html_method(PyObject *self, PyObject *ignored);

/* {keys[i]: values[i] for i < n} (new references to both), or NULL with an
 * exception: the gradients' dicts, keyed by the state's interned names. */
PyObject *dict_of(PyObject *const keys[], PyObject *const values[], int n);

/* module.func(arg), `module` a helper module of the package ("myatt._interop"). */
PyObject *call_package_helper(const char *module, const char *func, PyObject *arg);

#endif
