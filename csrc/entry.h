/* The kernel functions of myatt._myatt, each declared once (an `entry`): its
 * name, parameters, docstring, how its arguments are converted (the dtype
 * rule), its work, and how myatt.vjp differentiates it.  Everything else
 * derives from the declaration (entry.c): the text signature and the method
 * table, the parsing of positional and keyword arguments, the messages naming
 * an argument ("linear(): weight"), vjp's pullback of the function and its
 * repr, the list of differentiable functions in vjp's messages and docs.
 *
 * Declaring one (see linear_function.c): its parameters, a run function, and
 *     ENTRY(linear_entry, .name = "linear", .params = linear_params,
 *           .doc = linear_doc, .check = linear_check, .run = linear_run,
 *           .backward = &linear_backward_entry, .saves = SAVES_ARGUMENTS)
 * then one line in functions.c's list. */
#ifndef MYATT_ENTRY_H
#define MYATT_ENTRY_H

#include "state.h"

/* How an argument reaches run() */
typedef enum {
    ARG_ARRAY,   /* as_real_array's (None: NULL where the parameter allows None);
                    takes part in the result dtype (the kernels' rule) */
    ARG_MASK,    /* as_real_array's, taking no part in the result dtype */
    ARG_VALUE,   /* as given (an int, a float, a flag: run() checks it) */
} arg_kind;

typedef struct {
    const char *name;   /* "weight": the keyword, and in messages "linear(): weight" */
    arg_kind kind;
    const char *dflt;   /* the default as the signature shows it ("None", "-1"), or
                           NULL for a required argument; ARG_ARRAY and ARG_MASK may
                           only default to None */
} entry_param;

enum { ENTRY_MAX_ARGS = 8 };

/* What myatt.vjp keeps of a function (the pullback then calls `backward` on
 * grad_output followed by it) */
typedef enum {
    SAVES_NOTHING,     /* not differentiable by vjp, or a vjp kind of its own */
    SAVES_ARGUMENTS,   /* its array arguments converted to the result dtype: the
                          forward runs on private copies, which the pullback reads
                          (linear, bmm) */
    SAVES_RESULT,      /* a copy of its result, then its value arguments (softmax) */
} entry_saves;

typedef struct entry entry;
struct vjp_kind;

/* One call: the arguments as given and as converted, the result dtype. */
typedef struct {
    PyObject *module;
    const entry *e;
    PyObject *obj[ENTRY_MAX_ARGS];        /* as given, NULL where omitted */
    PyArrayObject *arr[ENTRY_MAX_ARGS];   /* ARG_ARRAY and ARG_MASK: as_real_array's,
                                             NULL for None or omitted */
    const myatt_dtype *dt;                /* the dtype run() computes in: the result
                                             dtype of the ARG_ARRAY ones, or for a
                                             half one the row computing it (float32) */
    const myatt_dtype *result;            /* the result dtype (dt, or a half row whose
                                             results entry_run rounds) */
} entry_call;

typedef PyObject *(*entry_fastcall_fn)(PyObject *module, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames);

struct entry {
    const char *name;
    const entry_param *params;    /* ended by {NULL} */
    const char *doc;              /* the docstring, without the signature line */
    /* The argument checks, before anything is copied (NULL: none): 0 or -1 */
    int (*check)(const entry_call *c);
    /* The work on c's arrays (of any real dtype: run casts them): a new
     * reference, or NULL with an exception */
    PyObject *(*run)(const entry_call *c);
    const entry *backward;        /* vjp: run on (grad_output, what `saves` kept) */
    entry_saves saves;
    const struct vjp_kind *vjp;   /* or vjp's own kind (scaled_dot_product_attention) */
    entry_fastcall_fn call;       /* its METH_FASTCALL | METH_KEYWORDS function */
    const char *what[ENTRY_MAX_ARGS];   /* "linear(): weight", made by entry_setup */
    int nparams;                  /* the parameters' count, counted by entry_setup */
};

/* The declaration `var` (fields given by name) and its METH_FASTCALL function */
#define ENTRY(var, ...)                                                                  \
    static PyObject *var##_fastcall(PyObject *, PyObject *const *, Py_ssize_t, PyObject *); \
    entry var = {__VA_ARGS__, .call = var##_fastcall};                                   \
    static PyObject *var##_fastcall(PyObject *module, PyObject *const *args,             \
                                    Py_ssize_t nargs, PyObject *kwnames)                 \
    {                                                                                    \
        return entry_fastcall(&var, module, args, nargs, kwnames);                       \
    }

/* Every kernel function, NULL-ended (functions.c) */
extern entry *const myatt_functions[];

/* The declarations, each in its family's file (linear_function.c, ...): for
 * the list, and for the modules whose half-precision products are their calls
 * (entry_call_objects) */
extern entry linear_entry, linear_backward_entry, softmax_entry, softmax_backward_entry,
    bmm_entry, bmm_backward_entry, baddbmm_entry, sdpa_entry, gelu_entry, gelu_backward_entry;

/* e(*args, **kwargs): parsed, converted, checked and run. */
PyObject *entry_fastcall(const entry *e, PyObject *module, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames);

/* The call parsed and converted into *c (which it initialises: released with
 * entry_call_clear whatever this returns): 0, or -1 with an exception. */
int entry_parse(const entry *e, PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames, entry_call *c);
void entry_call_clear(entry_call *c);

/* c->e->run(c) on a parsed and checked call: for a half result dtype, in
 * float32 (c->dt for the time of the call) with c->result the half row, the
 * result rounded once to it; integer and bool operands become that dtype
 * first, as torch converts them.  A new reference, or NULL. */
PyObject *entry_run(entry_call *c);

/* entry_run's first step, for a kind of vjp's own that runs a half-precision
 * call (sdpa): c's integer and bool operands in the half result dtype, c->dt
 * the row computing it (the caller then rounds the results: round_results).
 * 0, or -1 with an exception. */
int entry_half_operands(entry_call *c);

/* e(objs[0], ..., objs[n - 1]) called from C (a pullback's backward, a
 * half-precision module's products): converted, checked and run.  A new
 * reference, or NULL with an exception. */
PyObject *entry_call_objects(const entry *e, PyObject *module, PyObject *const *objs, int n);

/* c's arrays (arr, NULL on entry) and result dtype from its arguments (obj),
 * for a call made in C (a pullback's of the backward): 0, or -1 with an
 * exception. */
int entry_convert(entry_call *c);

/* The module's functions from myatt_functions (their text signatures and
 * messages' names built once): 0, or -1 with an exception. */
int entry_setup(PyObject *module);

/* The entry of one of the module's own function objects, or NULL. */
const entry *entry_of_function(PyObject *module, PyObject *fn);

/* "linear, softmax, ... and scaled_dot_product_attention": the differentiable
 * functions' names, for vjp's messages and docs (built by entry_setup). */
const char *entry_differentiable_names(void);

#endif
