/* What Linear and MyAtt share for pickling, copying, from_torch and Jupyter's
 * _repr_html_ (interop.c). */
#ifndef MYATT_INTEROP_H
#define MYATT_INTEROP_H

#include "state.h"

/* A new object of `type` from its tp_new(args, kwargs) (kwargs a dict or None),
 * loaded from state_dict with strict=True, its modes and its sub-modules' set from
 * `modes` ({"": bool, "attn": bool, ...}, myatt._interop.modes; None: training).
 * Draws nothing from myatt's generator: tp_new is asked to rebuild
 * (rebuild_requested), so the parameters start as zeros.  Unpickling, copy and
 * from_torch. */
PyObject *object_from_state(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            PyObject *state_dict, PyObject *modes);

/* For a tp_new: whether its keywords `kwds` (a dict or NULL) hold
 * object_from_state's private rebuild keyword (with the module's token as
 * value).  1 and *rest a new dict of the other keywords, 0 and *rest = kwds
 * (borrowed), or -1 with an exception. */
int rebuild_requested(myatt_state *st, PyObject *kwds, PyObject **rest);

/* Construction in __init__, as torch's modules: `class M(myatt.Linear)` whose
 * __init__ calls super().__init__(...) with the constructor's arguments (its own
 * signature may differ).  A module's `init` field says where it is:
 *   INIT_DONE      built (also zero-filled objects: sub-layers, rebuilt copies);
 *                  another __init__ is a RuntimeError (kernels may be reading its
 *                  parameters with the GIL released: never replaced);
 *   INIT_PENDING   built by tp_new from the call's arguments: the __init__ that
 *                  type() calls next does nothing;
 *   INIT_DEFERRED  a placeholder of the smallest sizes, from the tp_new of a
 *                  subclass with an __init__ of its own and the type's tp_new
 *                  (whose arguments it ignores, as object.__new__ does):
 *                  __init__ builds the module.  (A subclass with a __new__ of its
 *                  own builds there, with the arguments it passes on.) */
enum { INIT_DONE = 0, INIT_PENDING, INIT_DEFERRED };

typedef struct {
    int state;
    PyObject *retired;   /* the placeholder's contents once built: kept until the object
                            goes (a forward may be reading them without the GIL) */
} module_init_state;

/* How every module type's object begins (each type file asserts that its
 * struct does). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    module_init_state init;
    int training;   /* torch's Module.training: 1 from construction; dropout only while set */
} module_head;

#define MODULE_HEAD_ASSERT(type)                                                 \
    _Static_assert(offsetof(type, init) == offsetof(module_head, init)          \
                   && offsetof(type, training) == offsetof(module_head, training), \
                   "interop.h: module_head")

/* torch's modes, shared by the module types: the `training` attribute, train(mode=True)
 * and eval(), which set the object's flag and then call train(mode) on each of its
 * sub-modules (myatt._interop.children: its own Linear layers, and the myatt modules a
 * subclass holds as attributes, as torch registers them), and return the object. */
PyObject *module_get_training(PyObject *self, void *closure);
int module_set_training(PyObject *self, PyObject *value, void *closure);
PyObject *module_train(PyObject *self, PyObject *args, PyObject *kwds);
PyObject *module_eval(PyObject *self, PyObject *ignored);
extern const char module_train_doc[], module_eval_doc[], module_training_doc[];

#define MODULE_MODE_METHODS                                                                  \
    {"train", (PyCFunction)(void (*)(void))module_train, METH_VARARGS | METH_KEYWORDS,      \
     module_train_doc},                                                                      \
    {"eval", (PyCFunction)module_eval, METH_NOARGS, module_eval_doc}
/* The methods every module type has, named from its prefix P (P##_forward_fast,
 * P##_state_dict, ..., their P##_..._doc), its modes included: a type's method
 * table is MODULE_METHODS(P) and what it adds (MyAtt's and Linear's backward). */
#define MODULE_METHODS(P)                                                                    \
    {"forward", (PyCFunction)(void (*)(void))P##_forward_fast, METH_FASTCALL | METH_KEYWORDS, \
     P##_forward_doc},                                                                       \
    {"state_dict", (PyCFunction)P##_state_dict, METH_NOARGS, P##_state_dict_doc},           \
    {"load_state_dict", (PyCFunction)(void (*)(void))P##_load_state_dict,                   \
     METH_VARARGS | METH_KEYWORDS, P##_load_state_dict_doc},                                 \
    {"__call__", (PyCFunction)(void (*)(void))P##_call_fast,                                \
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST, P##_call_doc},                            \
    {"__reduce__", (PyCFunction)P##_reduce, METH_NOARGS, P##_reduce_doc},                   \
    {"_from_state", (PyCFunction)from_state_method, METH_VARARGS | METH_CLASS,              \
     P##_from_state_doc},                                                                    \
    {"from_torch", (PyCFunction)P##_from_torch, METH_O | METH_CLASS, P##_from_torch_doc},   \
    {"_repr_html_", (PyCFunction)repr_html_method, METH_NOARGS, P##_repr_html_doc},         \
    MODULE_MODE_METHODS
#define MODULE_MODE_GETSET \
    {"training", module_get_training, module_set_training, module_training_doc, NULL}

/* Whether tp_new (`own`) gives `type` a placeholder: a subclass with an
 * __init__ of its own and not a __new__. */
int init_deferred(PyTypeObject *type, newfunc own);

/* tp_new's placeholder: type->tp_new(type, args, rebuild) (args stolen: the
 * smallest sizes), nothing drawn, its state INIT_DEFERRED. */
PyObject *deferred_placeholder(myatt_state *st, PyTypeObject *type, PyObject *args);

/* tp_init of the module types: as the state says (above); a deferred module is
 * built by the base type's tp_new(base, args, kwds) and takes its contents (the
 * object after its PyObject header), the placeholder's kept in `retired`. */
int module_init(PyObject *self, PyObject *args, PyObject *kwds);

/* 0 when self is built, else (a subclass's placeholder whose __init__ has not
 * called super().__init__ yet) -1 with a RuntimeError naming `what`.  Every
 * entry that reads the parameters checks it first: once built, a module's
 * contents are never swapped, so what it read stays valid while the arguments'
 * own code runs (an __array__ may call __init__). */
int module_built(PyObject *self, const char *what);

/* TypeError for an abstract subclass (abc's @abstractmethod), as object.__new__
 * gives: -1, else 0. */
int refuse_abstract(PyTypeObject *type);

/* __reduce__: (type(self)._from_state, (args, {'dtype': dt's name}, self.state_dict(),
 * modes), myatt._interop.object_state(self): a subclass's __getstate__(), or its
 * __dict__ and __slots__, or None); modes: myatt._interop.modes(self).  args (the
 * constructor's positional arguments) is stolen; NULL (an error set) gives NULL. */
PyObject *reduce_object(PyObject *self, PyObject *args, const myatt_dtype *dt);

/* The methods both types share: _from_state (unpickling), from_torch (with the
 * myatt._interop function that reads the torch module: "linear_spec" or
 * "tutorial_spec") and _repr_html_. */
PyObject *from_state_method(PyTypeObject *cls, PyObject *args);
PyObject *from_torch_with(PyTypeObject *cls, PyObject *module, const char *spec_func);
PyObject *repr_html_method(PyObject *self, PyObject *ignored);

/* {keys[i]: values[i] for i < n} (new references to both), or NULL with an
 * exception: the gradients' dicts, keyed by the state's interned names. */
PyObject *dict_of(PyObject *const keys[], PyObject *const values[], int n);

/* module.func(arg), `module` a helper module of the package ("myatt._interop"). */
PyObject *call_package_helper(const char *module, const char *func, PyObject *arg);

#endif
