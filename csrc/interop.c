/* What Linear and MyAtt share for pickling, copying, from_torch and Jupyter's
 * _repr_html_.  The types are immutable, so these live in C as
 * methods; where Python is the natural language (reading a torch module,
 * writing HTML) they call a small helper module of the package, imported on
 * first use: importing myatt never imports torch. */
#include "glue.h"

_Thread_local int myatt_rebuilding;

PyObject *object_from_state(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            PyObject *state_dict)
{
    if (!PyTuple_Check(args) || (kwargs != Py_None && !PyDict_Check(kwargs))) {
        PyErr_Format(PyExc_TypeError, "%s._from_state(): args must be a tuple and kwargs a "
                     "dict or None", type_short_name(type));
        return NULL;
    }
    if (myatt_state_of_type(type) == NULL)   /* not one of ours */
        return NULL;
    /* The constructor would draw torch's initial weights from myatt's generator,
     * only to overwrite them at once: while this thread rebuilds the object it
     * draws nothing (linear_create), so unpickling, copying and from_torch never
     * change which weights the next constructor gives after a manual_seed.  The
     * flag is this thread's: other threads, which a Python subclass's __new__
     * may let run, construct and draw as usual. */
    myatt_rebuilding++;
    PyObject *obj = type->tp_new(type, args, kwargs == Py_None ? NULL : kwargs);
    myatt_rebuilding--;
    if (obj == NULL)
        return NULL;
    PyObject *r = PyObject_CallMethod(obj, "load_state_dict", "O", state_dict);
    if (r == NULL) {
        Py_DECREF(obj);
        return NULL;
    }
    Py_DECREF(r);
    return obj;
}

PyObject *reduce_object(PyObject *self, PyObject *args, PyObject *kwargs)
{
    PyObject *rebuild = NULL, *sd = NULL, *dict = NULL, *result = NULL;
    rebuild = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "_from_state");
    if (rebuild == NULL)
        goto done;
    sd = PyObject_CallMethod(self, "state_dict", NULL);
    if (sd == NULL)
        goto done;
    /* The instance __dict__ of a Python subclass, if it has anything in it. */
    dict = PyObject_GetAttrString(self, "__dict__");
    if (dict == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            goto done;
        PyErr_Clear();
    }
    if (dict == NULL || (PyDict_Check(dict) && PyDict_GET_SIZE(dict) == 0))
        Py_XSETREF(dict, Py_NewRef(Py_None));
    result = Py_BuildValue("O(OOO)O", rebuild, args, kwargs, sd, dict);
done:
    Py_XDECREF(rebuild);
    Py_XDECREF(sd);
    Py_XDECREF(dict);
    return result;
}

PyObject *call_package_helper(const char *module, const char *func, PyObject *arg)
{
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL)
        return NULL;
    PyObject *result = PyObject_CallMethod(mod, func, "O", arg);
    Py_DECREF(mod);
    return result;
}

PyObject *from_state_method(PyTypeObject *cls, PyObject *args)
{
    PyObject *cargs, *ckwargs, *sd;
    if (!PyArg_ParseTuple(args, "OOO:_from_state", &cargs, &ckwargs, &sd))
        return NULL;
    return object_from_state(cls, cargs, ckwargs, sd);
}

PyObject *from_torch_with(PyTypeObject *cls, PyObject *module, const char *spec_func)
{
    PyObject *spec = call_package_helper("myatt._interop", spec_func, module);
    if (spec == NULL)
        return NULL;
    PyObject *r = NULL, *cargs, *ckwargs, *sd;
    if (PyArg_ParseTuple(spec, "OOO:from_torch", &cargs, &ckwargs, &sd))
        r = object_from_state(cls, cargs, ckwargs, sd);
    Py_DECREF(spec);
    return r;
}

PyObject *repr_html_method(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return call_package_helper("myatt._display", "html", self);
}
