/* What Linear and MyAtt share for pickling, copying, from_torch and Jupyter's
 * _repr_html_.  The types are immutable, so these live in C as
 * methods; where Python is the natural language (reading a torch module,
 * writing HTML) they call a small helper module of the package, imported on
 * first use: importing myatt never imports torch. */
#include "interop.h"

#include "pieces.h"

/* The keyword object_from_state hands tp_new (through a subclass's __new__,
 * which passes **kwargs on) so that it builds without drawing from the
 * generator; its value must be the module's own token object, so no caller
 * can ask for it by accident.  The key is made once (st->rebuild_key): a
 * string made per call would be interned and dropped again each time. */
#define REBUILD_KEY "_myatt_rebuild"

int interop_setup(myatt_state *st)
{
    static const char *const linear_names[LINEAR_GRADS] = {"input", "weight", "bias"};
    static const char *const myatt_names[MYATT_GRADS] = {
        "Q", "K", "V", "attn.weight", "attn.bias", "attn_combine.weight", "attn_combine.bias"};
    st->rebuild_token = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    st->rebuild_key = PyUnicode_InternFromString(REBUILD_KEY);
    if (st->rebuild_token == NULL || st->rebuild_key == NULL)
        return -1;
    for (int i = 0; i < LINEAR_GRADS; i++)
        if ((st->linear_grad_keys[i] = PyUnicode_InternFromString(linear_names[i])) == NULL)
            return -1;
    for (int i = 0; i < MYATT_GRADS; i++)
        if ((st->myatt_grad_keys[i] = PyUnicode_InternFromString(myatt_names[i])) == NULL)
            return -1;
    return 0;
}

PyObject *dict_of(PyObject *const keys[], PyObject *const values[], int n)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d != NULL && i < n; i++)
        if (PyDict_SetItem(d, keys[i], values[i]) < 0)
            Py_CLEAR(d);
    return d;
}

int rebuild_requested(myatt_state *st, PyObject *kwds, PyObject **rest)
{
    *rest = kwds;
    if (kwds == NULL || !PyDict_Check(kwds))
        return 0;
    PyObject *token = PyDict_GetItemWithError(kwds, st->rebuild_key);   /* borrowed */
    if (token == NULL && PyErr_Occurred())
        return -1;
    if (token == NULL || token != st->rebuild_token)
        return 0;   /* absent, or not ours: the parser refuses the keyword */
    PyObject *copy = PyDict_Copy(kwds);
    if (copy == NULL || PyDict_DelItem(copy, st->rebuild_key) < 0) {
        Py_XDECREF(copy);
        return -1;
    }
    *rest = copy;
    return 1;
}

PyObject *object_from_state(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            PyObject *state_dict)
{
    if (!PyTuple_Check(args) || (kwargs != Py_None && !PyDict_Check(kwargs))) {
        PyErr_Format(PyExc_TypeError, "%s._from_state(): args must be a tuple and kwargs a "
                     "dict or None", type_short_name(type));
        return NULL;
    }
    myatt_state *st = myatt_state_of_type(type);
    if (st == NULL)   /* not one of ours */
        return NULL;
    /* The constructor would draw torch's initial weights from myatt's generator,
     * only to overwrite them at once: asked to rebuild (the private keyword,
     * rebuild_requested) it draws nothing, so unpickling, copying and
     * from_torch never change which weights the next constructor gives after a
     * manual_seed.  The request travels with this call only: other threads,
     * which a Python subclass's __new__ may let run, construct and draw as usual. */
    PyObject *kw = kwargs == Py_None ? PyDict_New() : PyDict_Copy(kwargs);
    if (kw == NULL || PyDict_SetItem(kw, st->rebuild_key, st->rebuild_token) < 0) {
        Py_XDECREF(kw);
        return NULL;
    }
    PyObject *obj = type->tp_new(type, args, kw);
    Py_DECREF(kw);
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

int init_deferred(PyTypeObject *type, newfunc own)
{
    return type->tp_init != module_init && type->tp_new == own;
}

PyObject *deferred_placeholder(myatt_state *st, PyTypeObject *type, PyObject *args)
{
    PyObject *kw = args == NULL ? NULL : PyDict_New(), *obj = NULL;
    if (kw != NULL && PyDict_SetItem(kw, st->rebuild_key, st->rebuild_token) == 0)
        obj = type->tp_new(type, args, kw);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (obj != NULL)
        ((module_head *)obj)->init.state = INIT_DEFERRED;
    return obj;
}

static int built_already(PyTypeObject *base)
{
    PyErr_Format(PyExc_RuntimeError, "%s.__init__(): this module is built already; "
                 "construct a new one", type_short_name(base));
    return -1;
}

int module_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    module_init_state *init = &((module_head *)self)->init;
    PyTypeObject *base = Py_TYPE(self);   /* the module type: its base is object */
    while (base->tp_base != &PyBaseObject_Type)
        base = base->tp_base;
    if (init->state == INIT_PENDING) {
        init->state = INIT_DONE;
        return 0;
    }
    if (init->state == INIT_DONE)
        return built_already(base);
    PyObject *built = base->tp_new(base, args, kwds);
    if (built == NULL)
        return -1;
    if (init->state != INIT_DEFERRED) {   /* built meanwhile by code the arguments ran */
        Py_DECREF(built);
        return built_already(base);
    }
    /* swap the contents: self takes the module, `built` the placeholder's */
    char *a = (char *)self + sizeof(PyObject), *b = (char *)built + sizeof(PyObject);
    for (size_t i = 0; i < (size_t)base->tp_basicsize - sizeof(PyObject); i++) {
        const char t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
    init->state = INIT_DONE;
    init->retired = built;
    return 0;
}

int module_built(PyObject *self, const char *what)
{
    if (((module_head *)self)->init.state != INIT_DEFERRED)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "%s: the module is not built: %s.__init__ must call "
                 "super().__init__(...) first", what, Py_TYPE(self)->tp_name);
    return -1;
}

int refuse_abstract(PyTypeObject *type)
{
    if (!(type->tp_flags & Py_TPFLAGS_IS_ABSTRACT))
        return 0;
    PyObject *names = PyObject_GetAttrString((PyObject *)type, "__abstractmethods__");
    PyObject *sorted = names == NULL ? NULL : PySequence_List(names);
    PyObject *sep = PyUnicode_FromString("', '"), *joined = NULL;
    if (sorted != NULL && sep != NULL && PyList_Sort(sorted) == 0
            && (joined = PyUnicode_Join(sep, sorted)) != NULL)
        PyErr_Format(PyExc_TypeError, "Can't instantiate abstract class %s without an "
                     "implementation for abstract method%s '%U'", type->tp_name,
                     PyList_GET_SIZE(sorted) > 1 ? "s" : "", joined);
    Py_XDECREF(names);
    Py_XDECREF(sorted);
    Py_XDECREF(sep);
    Py_XDECREF(joined);
    return -1;
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
    /* what a Python subclass's instance holds besides (None for the types) */
    dict = call_package_helper("myatt._interop", "object_state", self);
    if (dict == NULL)
        goto done;
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
