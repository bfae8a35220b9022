/* Linear's calls: layer(x) and forward, backward, and its vjp kind (vjp.h), on
 * linear_ops.c's products; the type itself is linear_type.c's. */
#include "linear_type.h"

#include "checks.h"
#include "entry.h"
#include "linear_ops.h"
#include "vjp.h"

/* A layer's products in its dtype on arrays of it: linear_apply's and
 * linear_grad_apply's; for a half row, myatt.linear's and linear_backward's own
 * calls (module: myatt's), as torch's nn.Linear calls F.linear (float32
 * arithmetic, each result rounded once; bfloat16 on vdpbf16ps where the CPU
 * has it).  bias: its array or None. */
static PyObject *layer_output(PyObject *module, PyArrayObject *x, PyArrayObject *w,
                              PyObject *bias, const myatt_dtype *dt)
{
    if (!dtype_is_half(dt))
        return linear_apply(x, cmat_of(w), bias != Py_None ? PyArray_DATA((PyArrayObject *)bias)
                                                           : NULL, dt);
    PyObject *objs[3] = {(PyObject *)x, (PyObject *)w, bias};
    return module == NULL ? NULL : entry_call_objects(&linear_entry, module, objs, 3);
}

/* (input, weight, bias or None): the gradients, as layer_output's */
static PyObject *layer_grads(PyObject *module, PyArrayObject *x, PyArrayObject *g,
                             PyArrayObject *w, PyObject *bias, const myatt_dtype *dt)
{
    if (!dtype_is_half(dt))
        return linear_grad_apply(x, g, cmat_of(w), bias != Py_None, dt);
    PyObject *objs[4] = {(PyObject *)g, (PyObject *)x, (PyObject *)w, bias};
    return module == NULL ? NULL : entry_call_objects(&linear_backward_entry, module, objs, 4);
}

/* layer(input).  With `saved` (myatt.vjp) the same result, computed from private
 * copies of the parameters and the input (in the layer's dtype), which
 * saved[0..2] get (input, weight, bias or None; the caller releases them, also
 * when NULL is returned): the pullback reads what the forward read. */
static PyObject *linear_forward_impl(LinearObject *self, PyObject *input, PyObject *saved[3])
{
    if (module_built((PyObject *)self, "Linear") < 0)
        return NULL;
    PyArrayObject *raw = as_real_array(input, "Linear: input");
    if (raw == NULL)
        return NULL;
    if (check_in_features("Linear: input", raw, self->in_features) < 0) {
        Py_DECREF(raw);
        return NULL;
    }
    PyArrayObject *weight = self->weight;
    PyObject *bias = self->bias ? (PyObject *)self->bias : Py_None;
    if (saved != NULL) {   /* the parameters once the input is checked (its __array__ ran) */
        if ((saved[1] = (PyObject *)copy_array(self->weight)) == NULL
            || (saved[2] = self->bias ? (PyObject *)copy_array(self->bias)
                                      : Py_NewRef(Py_None)) == NULL) {
            name_memory_error("vjp(): a copy of the Linear's parameters");
            Py_DECREF(raw);
            return NULL;
        }
        weight = (PyArrayObject *)saved[1];
        bias = saved[2];
    }
    PyArrayObject *x = saved != NULL ? private_cast(raw, self->dtype->typenum, "Linear: input")
                                     : cast_array(raw, self->dtype->typenum, 0, "Linear: input");
    Py_DECREF(raw);
    if (x == NULL)
        return NULL;
    PyObject *out = layer_output(myatt_module_of_type(Py_TYPE(self)), x, weight, bias,
                                 self->dtype);
    if (saved != NULL)
        saved[0] = (PyObject *)x;
    else
        Py_DECREF(x);
    return out;
}

static PyObject *linear_forward(LinearObject *self, PyObject *input)
{
    return linear_forward_impl(self, input, NULL);
}

static PyObject *Linear_call(LinearObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", NULL};
    PyObject *input;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Linear.__call__", kwlist, &input))
        return NULL;
    return linear_forward(self, input);
}

static PyObject *Linear_forward(LinearObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", NULL};
    PyObject *input;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Linear.forward", kwlist, &input))
        return NULL;
    return linear_forward(self, input);
}

/* layer(x) (a subclass's own forward if it has one) and layer.forward(x): one
 * positional argument goes straight to linear_forward; any other call takes
 * the tuple path above (same parsing and messages as before). */
PyObject *Linear_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames)
{
    PyObject *result;
    if (subclass_forward(self, (PyCFunction)(void (*)(void))Linear_forward_fast, args, nargsf,
                         kwnames, &result))
        return result;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 1 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return linear_forward((LinearObject *)self, args[0]);
    return call_with_tuple(self, args, nargs, kwnames, (ternaryfunc)Linear_call);
}

/* The __call__ method.  A Python subclass's m(...) arrives here too (its tp_call
 * is slot_tp_call, which finds this method), on a type without the vectorcall
 * flag before 3.12: so Linear_vectorcall itself, not PyVectorcall_Function. */
PyObject *Linear_call_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    return Linear_vectorcall(self, args, (size_t)nargs, kwnames);
}

PyObject *Linear_forward_fast(LinearObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 1 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0))
        return linear_forward(self, args[0]);
    return call_with_tuple((PyObject *)self, args, nargs, kwnames, (ternaryfunc)Linear_forward);
}

/* ---- myatt.vjp (vjp.h) ------------------------------------------------------ */

/* What a Linear's pullback keeps: private copies of the input (in the layer's
 * dtype) and the parameters, and that dtype. */
typedef struct {
    PyObject *saved[3];        /* input, weight, bias or None */
    const myatt_dtype *dtype;
} linear_kept;

static PyObject *linear_vjp_forward(PyObject *module, PyObject *fn, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames, void *kept_)
{
    linear_kept *kept = kept_;
    PyObject *tuple, *kwds = NULL, *input, *result = NULL;
    static char *kwlist[] = {"input", NULL};
    if ((tuple = tuple_and_kwargs(args, nargs, kwnames, &kwds)) == NULL)
        return NULL;
    if (PyArg_ParseTupleAndKeywords(tuple, kwds, "O:Linear.__call__", kwlist, &input))
        result = linear_forward_impl((LinearObject *)fn, input, kept->saved);
    /* read once the forward ran: an argument's parsing may have built a placeholder */
    kept->dtype = ((LinearObject *)fn)->dtype;
    Py_DECREF(tuple);
    Py_XDECREF(kwds);
    return result;
}

static PyObject *linear_vjp_pull(PyObject *module, const void *kept_, PyArrayObject *raw,
                                 PyObject *ga)
{
    const linear_kept *kept = kept_;
    PyArrayObject *g = cast_array(raw, kept->dtype->typenum, 0, "pullback(): grad_output");
    if (g == NULL)
        return NULL;
    PyObject *grads = layer_grads(module, (PyArrayObject *)kept->saved[0], g,
                                  (PyArrayObject *)kept->saved[1], kept->saved[2], kept->dtype);
    Py_DECREF(g);
    if (grads == NULL)
        return NULL;
    const myatt_state *st = myatt_state_of_module(module);
    PyObject *result = dict_of(st->linear_grad_keys, &PyTuple_GET_ITEM(grads, 0), LINEAR_GRADS);
    Py_DECREF(grads);
    return result;
}

static int linear_vjp_held(const void *kept_, PyObject *held)
{
    const linear_kept *kept = kept_;
    static const char *const names[3] = {"input", "weight", "bias"};
    for (int i = 0; i < 3; i++)
        if (kept->saved[i] != NULL && kept->saved[i] != Py_None
                && held_append(held, names[i], Py_NewRef(kept->saved[i])) < 0)
            return -1;
    return 0;
}

static void linear_vjp_clear(void *kept_)
{
    linear_kept *kept = kept_;
    for (int i = 0; i < 3; i++)
        Py_CLEAR(kept->saved[i]);
}

const vjp_kind linear_vjp = {
    .name = "Linear", .kept_size = sizeof(linear_kept), .forward = linear_vjp_forward,
    .pull = linear_vjp_pull, .held = linear_vjp_held, .clear = linear_vjp_clear,
};


/* ---- backward --------------------------------------------------------------- */

const char Linear_backward_doc[] = PyDoc_STR(
"backward($self, input, grad_output)\n--\n\n"
"Gradients of the layer, as torch's autograd gives them.\n"
"\n"
"The gradients of ``sum(self(input) * grad_output)`` with respect to the\n"
"input and the parameters. The layer is not changed.\n"
"\n"
"Parameters\n"
"----------\n"
"input : array_like, shape (..., in_features)\n"
"    The input of the forward pass.\n"
"grad_output : array_like, shape (..., out_features)\n"
"    The gradient of its result; its leading dimensions are `input`'s.\n"
"\n"
"Returns\n"
"-------\n"
"dict\n"
"    ``{'input': (..., in_features), 'weight': (out_features, in_features),\n"
"    'bias': (out_features,) or None}``: new arrays in the layer's dtype.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If an operand is not an array of real numbers.\n"
"ValueError\n"
"    If the shapes do not match (the message gives them).\n"
"MemoryError\n"
"    If a result cannot be allocated.\n"
"\n"
"Examples\n"
"--------\n"
">>> m = myatt.Linear(3, 2)\n"
">>> g = m.backward(np.ones((4, 3)), np.ones((4, 2)))\n"
">>> sorted(g)\n"
"['bias', 'input', 'weight']\n"
">>> g['weight']\n"
"array([[4., 4., 4.],\n"
"       [4., 4., 4.]], dtype=float32)\n"
">>> g['bias']\n"
"array([4., 4.], dtype=float32)");

PyObject *Linear_backward(LinearObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"input", "grad_output", NULL};
    PyObject *input_obj, *go_obj, *grads = NULL, *result = NULL;
    PyArrayObject *rx = NULL, *rg = NULL, *x = NULL, *g = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:Linear.backward", kwlist,
                                     &input_obj, &go_obj)
            || module_built((PyObject *)self, "Linear.backward()") < 0)
        return NULL;
    if ((rx = as_real_array(input_obj, "Linear.backward(): input")) == NULL
            || (rg = as_real_array(go_obj, "Linear.backward(): grad_output")) == NULL)
        goto fail;
    if (check_in_features("Linear.backward(): input", rx, self->in_features) < 0
            || check_grad_output_rows("Linear.backward()", rx, rg, self->out_features) < 0)
        goto fail;
    if ((x = cast_array(rx, self->dtype->typenum, 0, "Linear.backward(): input")) == NULL
            || (g = cast_array(rg, self->dtype->typenum, 0, "Linear.backward(): grad_output"))
                   == NULL
            || (grads = layer_grads(myatt_module_of_type(Py_TYPE(self)), x, g, self->weight,
                                    self->bias ? (PyObject *)self->bias : Py_None,
                                    self->dtype)) == NULL)
        goto fail;
    const myatt_state *st = myatt_state_of_type(Py_TYPE(self));
    if (st != NULL)
        result = dict_of(st->linear_grad_keys, &PyTuple_GET_ITEM(grads, 0), LINEAR_GRADS);
fail:
    Py_XDECREF(rx);
    Py_XDECREF(rg);
    Py_XDECREF(x);
    Py_XDECREF(g);
    Py_XDECREF(grads);
    return result;
}


/* forward's and __call__'s docstrings but for their first lines and examples */
#define LINEAR_APPLY_DOC                                                        \
"\n"                                                                            \
"Parameters\n"                                                                  \
"----------\n"                                                                  \
"input : array_like, shape (..., in_features)\n"                                \
"    Real numbers; converted to the layer's dtype.\n"                           \
"\n"                                                                            \
"Returns\n"                                                                     \
"-------\n"                                                                     \
"ndarray, shape (..., out_features)\n"                                          \
"    In the layer's dtype; a new C-contiguous array.\n"                         \
"\n"                                                                            \
"Raises\n"                                                                      \
"------\n"                                                                      \
"TypeError\n"                                                                   \
"    If `input` is not an array of real numbers.\n"                             \
"ValueError\n"                                                                  \
"    If the last axis of `input` is not `in_features` long.\n"                  \
"MemoryError\n"                                                                 \
"    If the result cannot be allocated.\n"                                      \
"\n"                                                                            \
"Examples\n"                                                                    \
"--------\n"                                                                    \
">>> m = myatt.Linear(3, 2, dtype='float64')\n"

const char Linear_call_doc[] = PyDoc_STR(
"__call__($self, input)\n--\n\n"
"Apply the layer: the same as `forward`.\n"
LINEAR_APPLY_DOC
">>> m(np.ones((5, 7, 3))).shape\n"
"(5, 7, 2)");

const char Linear_forward_doc[] = PyDoc_STR(
"forward($self, input)\n--\n\n"
"Apply the layer: ``input @ weight.T + bias``.\n"
LINEAR_APPLY_DOC
">>> m.forward(np.ones((5, 7, 3))).shape\n"
"(5, 7, 2)");
