/* The module myatt._myatt: multi-phase init assembling the pieces (pieces.h)
 * into it, and the module state's lifetime.  Nothing depends on this file but
 * the one accepted back-reference, myatt_module_def (state.h). */
#define MYATT_IMPORTS_NUMPY
#include "pieces.h"
#include "state.h"

static int myatt_exec(PyObject *module)
{
    myatt_state *st = myatt_state_of_module(module);
    if (PyArray_ImportNumPyAPI() < 0)
        return -1;
    if (runtime_setup(module) < 0 || checks_setup(st) < 0 || interop_setup(st) < 0)
        return -1;
    if (PyModule_AddFunctions(module, functions_methods) < 0
            || PyModule_AddFunctions(module, backward_methods) < 0
            || PyModule_AddFunctions(module, runtime_methods) < 0
            || PyModule_AddFunctions(module, vjp_methods) < 0
            || PyModule_AddFunctions(module, sdpa_methods) < 0)
        return -1;
    st->linear_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &linear_type_spec, NULL);
    if (st->linear_type == NULL || PyModule_AddType(module, st->linear_type) < 0)
        return -1;
    st->myatt_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &myatt_type_spec, NULL);
    if (st->myatt_type == NULL || PyModule_AddType(module, st->myatt_type) < 0)
        return -1;
    st->mha_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &mha_type_spec, NULL);
    if (st->mha_type == NULL || PyModule_AddType(module, st->mha_type) < 0)
        return -1;
    st->pullback_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &pullback_type_spec,
                                                                  NULL);
    if (st->pullback_type == NULL || PyModule_AddType(module, st->pullback_type) < 0)
        return -1;
    return 0;
}

static int myatt_traverse(PyObject *module, visitproc visit, void *arg)
{
    myatt_state *st = myatt_state_of_module(module);
    Py_VISIT(st->linear_type);
    Py_VISIT(st->myatt_type);
    Py_VISIT(st->mha_type);
    Py_VISIT(st->pullback_type);
    Py_VISIT(st->axis_error);
    Py_VISIT(st->rebuild_key);
    Py_VISIT(st->rebuild_token);
    for (int i = 0; i < LINEAR_GRADS; i++)
        Py_VISIT(st->linear_grad_keys[i]);
    for (int i = 0; i < MYATT_GRADS; i++)
        Py_VISIT(st->myatt_grad_keys[i]);
    return 0;
}

static int myatt_clear(PyObject *module)
{
    myatt_state *st = myatt_state_of_module(module);
    Py_CLEAR(st->linear_type);
    Py_CLEAR(st->myatt_type);
    Py_CLEAR(st->mha_type);
    Py_CLEAR(st->pullback_type);
    Py_CLEAR(st->axis_error);
    Py_CLEAR(st->rebuild_key);
    Py_CLEAR(st->rebuild_token);
    for (int i = 0; i < LINEAR_GRADS; i++)
        Py_CLEAR(st->linear_grad_keys[i]);
    for (int i = 0; i < MYATT_GRADS; i++)
        Py_CLEAR(st->myatt_grad_keys[i]);
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
