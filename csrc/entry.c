/* What every kernel function's declaration derives (entry.h): the parsing and
 * conversion of its arguments, its text signature and method table, and the
 * names in messages. */
#include "entry.h"

#include <string.h>

/* Parsing: CPython's rules for a signature of positional-or-keyword
 * parameters (args[0:nargs] positional, then kwnames' values), its messages. */
static int parse_args(const entry *e, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, PyObject **obj)
{
    const int n = e->nparams;
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d argument%s (%zd given)",
                     e->name, n, n == 1 ? "" : "s", nargs);
        return -1;
    }
    for (int i = 0; i < n; i++)
        obj[i] = i < nargs ? args[i] : NULL;
    const Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < n && PyUnicode_CompareWithASCIIString(key, e->params[i].name) != 0)
            i++;
        if (i == n) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R",
                         e->name, key);
            return -1;
        }
        if (obj[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "argument for %s() given by name ('%s') and "
                         "position (%d)", e->name, e->params[i].name, i + 1);
            return -1;
        }
        obj[i] = args[nargs + k];
    }
    for (int i = (int)nargs; i < n; i++)   /* (a keyword for a position given is refused) */
        if (obj[i] == NULL && e->params[i].dflt == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)",
                         e->name, e->params[i].name, i + 1);
            return -1;
        }
    return 0;
}

int entry_parse(const entry *e, PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames, entry_call *c)
{
    /* (only the parameters' slots are set: zeroing the whole struct, which gcc
     * does with rep stos, was a third of a small call's glue) */
    c->module = module;
    c->e = e;
    c->dt = c->result = NULL;
    for (int i = 0; i < e->nparams; i++)
        c->arr[i] = NULL;
    if (parse_args(e, args, nargs, kwnames, c->obj) < 0)
        return -1;
    return entry_convert(c);
}

int entry_convert(entry_call *c)
{
    const entry *e = c->e;
    PyArrayObject *promoting[ENTRY_MAX_ARGS];
    int np = 0;
    for (int i = 0; i < e->nparams; i++) {
        const entry_param *p = &e->params[i];
        if (p->kind == ARG_VALUE || c->obj[i] == NULL
                || (c->obj[i] == Py_None && p->dflt != NULL))   /* None: defaults to None */
            continue;
        if ((c->arr[i] = as_real_array(c->obj[i], e->what[i])) == NULL)
            return -1;
        if (p->kind == ARG_ARRAY)
            promoting[np++] = c->arr[i];
    }
    c->dt = c->result = result_dtype(promoting, np);
    return 0;
}

int entry_half_operands(entry_call *c)
{
    const myatt_dtype *half = c->result;
    for (int i = 0; i < c->e->nparams; i++)
        if (c->arr[i] != NULL && c->e->params[i].kind == ARG_ARRAY
                && PyArray_TYPE(c->arr[i]) != half->typenum) {
            PyArrayObject *h = cast_array(c->arr[i], half->typenum, 0, c->e->what[i]);
            if (h == NULL)
                return -1;
            Py_SETREF(c->arr[i], h);
        }
    c->dt = &myatt_dtypes[half->kernel];
    return 0;
}

PyObject *entry_run(entry_call *c)
{
    const myatt_dtype *half = c->result;
    if (!dtype_is_half(half))
        return c->e->run(c);
    if (entry_half_operands(c) < 0)
        return NULL;
    PyObject *r = c->e->run(c);
    c->dt = half;
    return round_results(r, half, c->e->name);
}

PyObject *entry_call_objects(const entry *e, PyObject *module, PyObject *const *objs, int n)
{
    entry_call c = {.module = module, .e = e};
    for (int i = 0; i < n; i++)
        c.obj[i] = objs[i];
    PyObject *r = NULL;
    if (entry_convert(&c) == 0 && (e->check == NULL || e->check(&c) == 0))
        r = entry_run(&c);
    entry_call_clear(&c);
    return r;
}

void entry_call_clear(entry_call *c)
{
    for (int i = 0; i < c->e->nparams; i++)
        Py_CLEAR(c->arr[i]);
}

PyObject *entry_fastcall(const entry *e, PyObject *module, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames)
{
    entry_call c;
    PyObject *result = NULL;
    if (entry_parse(e, module, args, nargs, kwnames, &c) == 0
            && (e->check == NULL || e->check(&c) == 0))
        result = entry_run(&c);
    entry_call_clear(&c);
    return result;
}

/* ---- the method table ------------------------------------------------------ */

/* "name($module, a, b, c=None)\n--\n\n" + doc, in a new PyMem_Raw buffer. */
static char *signed_doc(const entry *e)
{
    size_t len = strlen(e->name) + strlen(e->doc) + 32;
    for (const entry_param *p = e->params; p->name != NULL; p++)
        len += strlen(p->name) + (p->dflt != NULL ? strlen(p->dflt) + 1 : 0) + 2;
    char *doc = PyMem_RawMalloc(len);
    if (doc == NULL)
        return NULL;
    char *end = doc + sprintf(doc, "%s($module", e->name);
    for (const entry_param *p = e->params; p->name != NULL; p++)
        end += sprintf(end, ", %s%s%s", p->name, p->dflt != NULL ? "=" : "",
                       p->dflt != NULL ? p->dflt : "");
    sprintf(end, ")\n--\n\n%s", e->doc);
    return doc;
}

/* The parameters' count, and "linear(): weight" for each, in PyMem_Raw buffers. */
static int make_whats(entry *e)
{
    e->nparams = 0;
    for (int i = 0; e->params[i].name != NULL; i++) {
        if (i >= ENTRY_MAX_ARGS)
            Py_FatalError("entry.h: raise ENTRY_MAX_ARGS");
        e->nparams = i + 1;
        const size_t len = strlen(e->name) + strlen(e->params[i].name) + 8;
        char *what = PyMem_RawMalloc(len);
        if (what == NULL)
            return -1;
        snprintf(what, len, "%s(): %s", e->name, e->params[i].name);
        e->what[i] = what;
    }
    return 0;
}

/* The method table and the messages' names, made once per process (they are
 * the same for every module object: subinterpreters, re-imports). */
static PyMethodDef *method_table(void)
{
    static PyMethodDef *table;
    if (table != NULL)
        return table;
    int n = 0;
    while (myatt_functions[n] != NULL)
        n++;
    PyMethodDef *t = PyMem_RawCalloc((size_t)n + 1, sizeof *t);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        entry *e = myatt_functions[i];
        char *doc = signed_doc(e);
        if (doc == NULL || make_whats(e) < 0)
            return NULL;   /* (the few bytes made so far stay: the import fails) */
        t[i] = (PyMethodDef){e->name, (PyCFunction)(void (*)(void))e->call,
                             METH_FASTCALL | METH_KEYWORDS, doc};
    }
    return table = t;
}

int entry_setup(PyObject *module)
{
    PyMethodDef *table = method_table();
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return PyModule_AddFunctions(module, table);
}

const entry *entry_of_function(PyObject *module, PyObject *fn)
{
    if (!PyCFunction_Check(fn) || PyCFunction_GET_SELF(fn) != module)
        return NULL;
    PyCFunction meth = PyCFunction_GET_FUNCTION(fn);
    for (int i = 0; myatt_functions[i] != NULL; i++)
        if ((PyCFunction)(void (*)(void))myatt_functions[i]->call == meth)
            return myatt_functions[i];
    return NULL;
}

const char *entry_differentiable_names(void)
{
    static char names[512];
    if (names[0] != '\0')
        return names;
    int n = 0;
    for (int i = 0; myatt_functions[i] != NULL; i++)
        n += myatt_functions[i]->backward != NULL || myatt_functions[i]->vjp != NULL;
    for (int i = 0, k = 0; myatt_functions[i] != NULL; i++) {
        const entry *e = myatt_functions[i];
        if (e->backward == NULL && e->vjp == NULL)
            continue;
        const size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%smyatt.%s",
                 k == 0 ? "" : k == n - 1 ? " or " : ", ", e->name);
        k++;
    }
    return names;
}
