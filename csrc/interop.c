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
    static const char *const tutorial_grad_names[TUTORIAL_GRADS] = {
        "Q", "K", "V", "attn.weight", "attn.bias", "attn_combine.weight", "attn_combine.bias"};
    st->rebuild_token = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    st->rebuild_key = PyUnicode_InternFromString(REBUILD_KEY);
    if (st->rebuild_token == NULL || st->rebuild_key == NULL)
        return -1;
    for (int i = 0; i < LINEAR_GRADS; i++)
        if ((st->linear_grad_keys[i] = PyUnicode_InternFromString(linear_names[i])) == NULL)
            return -1;
    for (int i = 0; i < TUTORIAL_GRADS; i++)
        if ((st->tutorial_grad_keys[i] = PyUnicode_InternFromString(tutorial_grad_names[i])) == NULL)
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

/* The names of the sub-modules `self`'s type owns, as torch names them (NULL-ended). */
static const char *const *own_children(myatt_state *st, PyObject *self)
{
    static const char *const myatt[] = {"attn", "attn_combine", NULL};
    static const char *const mha[] = {"out_proj", NULL};
    static const char *const none[] = {NULL};
    return PyObject_TypeCheck(self, st->tutorial_type) ? myatt
           : PyObject_TypeCheck(self, st->mha_type) ? mha : none;
}

static int is_module(myatt_state *st, PyObject *obj)
{
    return PyObject_TypeCheck(obj, st->linear_type) || PyObject_TypeCheck(obj, st->tutorial_type)
           || PyObject_TypeCheck(obj, st->mha_type);
}

/* self.training = mode, then child.train(mode) for each sub-module, as torch's
 * Module.train: the layers the type owns, then the myatt modules held in a
 * subclass's __dict__ (as torch registers a module assigned to an attribute). */
static PyObject *set_mode(PyObject *self, int mode)
{
    myatt_state *st = myatt_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    ((module_head *)self)->training = mode;
    PyObject *flag = mode ? Py_True : Py_False;
    for (const char *const *name = own_children(st, self); *name != NULL; name++) {
        PyObject *child = PyObject_GetAttrString(self, *name);
        PyObject *r = child == NULL ? NULL : PyObject_CallMethod(child, "train", "O", flag);
        Py_XDECREF(child);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    PyObject *dict = PyObject_GenericGetDict(self, NULL);
    if (dict == NULL) {   /* the types have no __dict__, their subclasses may */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        return Py_NewRef(self);
    }
    PyObject *values = PyDict_Values(dict);
    Py_DECREF(dict);
    if (values == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (v == self || !is_module(st, v))
            continue;
        PyObject *r = PyObject_CallMethod(v, "train", "O", flag);
        if (r == NULL) {
            Py_DECREF(values);
            return NULL;
        }
        Py_DECREF(r);
    }
    Py_DECREF(values);
    return Py_NewRef(self);
}

/* {"": self.training, name: self.<name>.training for each sub-module it owns} */
static PyObject *module_modes(PyObject *self)
{
    myatt_state *st = myatt_state_of_type(Py_TYPE(self));
    PyObject *modes = st == NULL ? NULL : PyDict_New();
    if (modes == NULL || PyDict_SetItemString(modes, "", ((module_head *)self)->training
                                                         ? Py_True : Py_False) < 0)
        goto fail;
    for (const char *const *name = own_children(st, self); *name != NULL; name++) {
        PyObject *child = PyObject_GetAttrString(self, *name);
        if (child == NULL)
            goto fail;
        int rc = PyDict_SetItemString(modes, *name, ((module_head *)child)->training
                                                    ? Py_True : Py_False);
        Py_DECREF(child);
        if (rc < 0)
            goto fail;
    }
    return modes;
fail:
    Py_XDECREF(modes);
    return NULL;
}

/* obj's and its own sub-modules' training from `modes` (module_modes' dict; a name
 * it lacks is left as it is).  0, or -1 with an exception. */
static int set_modes(PyObject *obj, PyObject *modes)
{
    myatt_state *st = myatt_state_of_type(Py_TYPE(obj));
    if (st == NULL)
        return -1;
    if (!PyDict_Check(modes)) {
        PyErr_SetString(PyExc_TypeError, "_from_state(): modes must be a dict");
        return -1;
    }
    PyObject *flag = PyDict_GetItemString(modes, "");   /* borrowed */
    if (flag != NULL && bool_arg(flag, "_from_state(): modes['']",
                                 &((module_head *)obj)->training) < 0)
        return -1;
    for (const char *const *name = own_children(st, obj); *name != NULL; name++) {
        if ((flag = PyDict_GetItemString(modes, *name)) == NULL)
            continue;
        PyObject *child = PyObject_GetAttrString(obj, *name);
        int rc = child == NULL ? -1 : PyObject_SetAttrString(child, "training", flag);
        Py_XDECREF(child);
        if (rc < 0)
            return -1;
    }
    return 0;
}

PyObject *object_from_state(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            PyObject *state_dict, PyObject *modes)
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
    if (r == NULL || (modes != Py_None && set_modes(obj, modes) < 0)) {
        Py_XDECREF(r);
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

PyObject *reduce_object(PyObject *self, PyObject *args, const myatt_dtype *dt)
{
    PyObject *kwargs = NULL, *rebuild = NULL, *sd = NULL, *modes = NULL, *dict = NULL;
    PyObject *result = NULL;
    if (args == NULL || (kwargs = Py_BuildValue("{ss}", "dtype", dt->name)) == NULL
            || (rebuild = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "_from_state")) == NULL)
        goto done;
    sd = PyObject_CallMethod(self, "state_dict", NULL);
    if (sd == NULL || (modes = module_modes(self)) == NULL)
        goto done;
    /* what a Python subclass's instance holds besides (None for the types) */
    dict = call_package_helper("myatt._interop", "object_state", self);
    if (dict == NULL)
        goto done;
    result = Py_BuildValue("O(OOOO)O", rebuild, args, kwargs, sd, modes, dict);
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(rebuild);
    Py_XDECREF(sd);
    Py_XDECREF(modes);
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
    PyObject *cargs, *ckwargs, *sd, *modes = Py_None;
    if (!PyArg_ParseTuple(args, "OOO|O:_from_state", &cargs, &ckwargs, &sd, &modes))
        return NULL;
    return object_from_state(cls, cargs, ckwargs, sd, modes);
}

PyObject *from_torch_with(PyTypeObject *cls, PyObject *module, const char *spec_func)
{
    PyObject *spec = call_package_helper("myatt._interop", spec_func, module);
    if (spec == NULL)
        return NULL;
    PyObject *r = NULL, *cargs, *ckwargs, *sd, *modes;
    if (PyArg_ParseTuple(spec, "OOOO:from_torch", &cargs, &ckwargs, &sd, &modes))
        r = object_from_state(cls, cargs, ckwargs, sd, modes);
    Py_DECREF(spec);
    return r;
}

PyObject *repr_html_method(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return call_package_helper("myatt._display", "html", self);
}

const char module_training_doc[] =
    "Whether the module is in training mode (bool, torch's Module.training): dropout\n"
    "happens only while it is True. Set it with train() and eval(), or assign a bool.";

const char module_train_doc[] =
    "train($self, /, mode=True)\n--\n\n"
    "Set training mode (``mode=True``) or evaluation mode, as torch's Module.train.\n"
    "\n"
    "Sets ``training`` on the module and on its sub-modules (its Linear layers, and\n"
    "the myatt modules a subclass holds as attributes). Dropout happens only in\n"
    "training mode.\n"
    "\n"
    "Parameters\n"
    "----------\n"
    "mode : bool, default True\n"
    "\n"
    "Returns\n"
    "-------\n"
    "self\n"
    "\n"
    "Raises\n"
    "------\n"
    "TypeError\n"
    "    If `mode` is not a bool (torch: ValueError).\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> m = myatt.Linear(3, 2)\n"
    ">>> m.training, m.train(False).training, m.train().training\n"
    "(True, False, True)";

const char module_eval_doc[] =
    "eval($self, /)\n--\n\n"
    "Set evaluation mode: ``train(False)``, as torch's Module.eval.\n"
    "\n"
    "Returns\n"
    "-------\n"
    "self\n"
    "\n"
    "Examples\n"
    "--------\n"
    ">>> m = myatt.MultiheadAttention(8, 2, dropout=0.1).eval()\n"
    ">>> m.training, m.out_proj.training\n"
    "(False, False)";

PyObject *module_get_training(PyObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(((module_head *)self)->training);
}

int module_set_training(PyObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete the training attribute");
        return -1;
    }
    return bool_arg(value, "training", &((module_head *)self)->training);
}

PyObject *module_train(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"mode", NULL};
    PyObject *mode_obj = Py_True;
    int mode;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:train", kwlist, &mode_obj)
            || bool_arg(mode_obj, "train(): mode", &mode) < 0)
        return NULL;
    return set_mode(self, mode);
}

PyObject *module_eval(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return set_mode(self, 0);
}
