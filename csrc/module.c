/* The module myatt._myatt: multi-phase init assembling the pieces (pieces.h)
 * into it, and the module state's lifetime.  Nothing depends on this file but
 * the one accepted back-reference, myatt_module_def (state.h). */
#define MYATT_IMPORTS_NUMPY
#include "pieces.h"
#include "state.h"

#include <stddef.h>

/* The type of `spec`, added to the module (a new reference for the state).  A
 * __vectorcalloffset__ member only tells PyType_FromSpec where the instances'
 * vectorcall pointer lives (the way for a heap type): dropped from the type's
 * dict once made, so that dir() and help() do not list it. */
static PyTypeObject *add_type(PyObject *module, PyType_Spec *spec)
{
    PyTypeObject *type = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
    if (type == NULL)
        return NULL;
    if (PyDict_GetItemString(type->tp_dict, "__vectorcalloffset__") != NULL) {
        if (PyDict_DelItemString(type->tp_dict, "__vectorcalloffset__") < 0) {
            Py_DECREF(type);
            return NULL;
        }
        PyType_Modified(type);
    }
    if (PyModule_AddType(module, type) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return type;
}

/* __all__: the sorted names of the module's public functions and types (what the
 * package re-exports: `from ._myatt import *`). */
static int add_all(PyObject *module)
{
    PyObject *dict = PyModule_GetDict(module), *key, *value, *all = PyList_New(0);
    Py_ssize_t pos = 0;
    while (all != NULL && PyDict_Next(dict, &pos, &key, &value)) {
        if (PyUnicode_READ_CHAR(key, 0) == '_' || !(PyCFunction_Check(value) || PyType_Check(value)))
            continue;
        if (PyList_Append(all, key) < 0)
            Py_CLEAR(all);
    }
    if (all == NULL || PyList_Sort(all) < 0 || PyModule_AddObjectRef(module, "__all__", all) < 0) {
        Py_XDECREF(all);
        return -1;
    }
    Py_DECREF(all);
    return 0;
}

/* The types: where the state holds each, and the vjp kind of its objects */
static const struct {
    PyType_Spec *spec;
    size_t field;                  /* offsetof(myatt_state, ...) */
    const struct vjp_kind *vjp;    /* NULL: vjp does not take its objects */
} types[] = {
    {&linear_type_spec, offsetof(myatt_state, linear_type), &linear_vjp},
    {&tutorial_type_spec, offsetof(myatt_state, tutorial_type), &tutorial_vjp},
    {&mha_type_spec, offsetof(myatt_state, mha_type), &mha_vjp},
    {&pullback_type_spec, offsetof(myatt_state, pullback_type), NULL},
};

static int myatt_exec(PyObject *module)
{
    myatt_state *st = myatt_state_of_module(module);
    if (PyArray_ImportNumPyAPI() < 0)
        return -1;
    if (runtime_setup(module) < 0 || checks_setup(st) < 0 || interop_setup(st) < 0)
        return -1;
    int n = 0;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        PyTypeObject **field = (PyTypeObject **)((char *)st + types[i].field);
        if ((*field = add_type(module, types[i].spec)) == NULL)
            return -1;
        if (types[i].vjp != NULL && n < MYATT_DIFFERENTIABLE_TYPES)
            st->differentiable[n++] = (differentiable_type){*field, types[i].vjp};
    }
    if (n != MYATT_DIFFERENTIABLE_TYPES) {
        PyErr_SetString(PyExc_SystemError, "state.h: MYATT_DIFFERENTIABLE_TYPES is not the "
                        "number of types with a vjp kind in module.c's table");
        return -1;
    }
    if (vjp_setup(st) < 0 || entry_setup(module) < 0
            || PyModule_AddFunctions(module, runtime_methods) < 0
            || PyModule_AddFunctions(module, vjp_methods) < 0)
        return -1;
    return add_all(module);
}

static int myatt_traverse(PyObject *module, visitproc visit, void *arg)
{
    myatt_state *st = myatt_state_of_module(module);
    Py_VISIT(st->linear_type);
    Py_VISIT(st->tutorial_type);
    Py_VISIT(st->mha_type);
    Py_VISIT(st->pullback_type);
    Py_VISIT(st->axis_error);
    Py_VISIT(st->rebuild_key);
    Py_VISIT(st->rebuild_token);
    for (int i = 0; i < LINEAR_GRADS; i++)
        Py_VISIT(st->linear_grad_keys[i]);
    for (int i = 0; i < TUTORIAL_GRADS; i++)
        Py_VISIT(st->tutorial_grad_keys[i]);
    return 0;
}

static int myatt_clear(PyObject *module)
{
    myatt_state *st = myatt_state_of_module(module);
    Py_CLEAR(st->linear_type);
    Py_CLEAR(st->tutorial_type);
    Py_CLEAR(st->mha_type);
    Py_CLEAR(st->pullback_type);
    Py_CLEAR(st->axis_error);
    Py_CLEAR(st->rebuild_key);
    Py_CLEAR(st->rebuild_token);
    for (int i = 0; i < LINEAR_GRADS; i++)
        Py_CLEAR(st->linear_grad_keys[i]);
    for (int i = 0; i < TUTORIAL_GRADS; i++)
        Py_CLEAR(st->tutorial_grad_keys[i]);
    return 0;
}

static void myatt_free(void *module)
{
    myatt_clear((PyObject *)module);
}

static PyModuleDef_Slot myatt_slots[] = {
    {Py_mod_exec, myatt_exec},
    {0, NULL},
};

PyDoc_STRVAR(module_doc,
"C kernels and extension types of myatt (use the package `myatt`, which\n"
"re-exports them).");

PyModuleDef myatt_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "myatt._myatt",
    .m_doc = module_doc,
    .m_size = sizeof(myatt_state),
    .m_slots = myatt_slots,
    .m_traverse = myatt_traverse,
    .m_clear = myatt_clear,
    .m_free = myatt_free,
};

PyMODINIT_FUNC PyInit__myatt(void)
{
    return PyModuleDef_Init(&myatt_module_def);
}
