/* The runtime functions of myatt._myatt: the generator (manual_seed), the
 * kernels' threads, workspace cache and ISA path; and runtime_setup, the part
 * of the module's init they need.  Exports runtime_methods (pieces.h). */
#include "pieces.h"
#include "state.h"

#include "kernels/runtime/alloc.h"
#include "kernels/runtime/cpu.h"
#include "kernels/runtime/threads.h"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

PyDoc_STRVAR(manual_seed_doc,
"manual_seed($module, seed, /)\n--\n\n"
"Seed myatt's generator, as torch.manual_seed seeds torch's.\n"
"\n"
"A Linear or MyAtt built next holds exactly the weights that\n"
"``torch.manual_seed(seed)`` and the torch constructor give.\n"
"\n"
"Parameters\n"
"----------\n"
"seed : int\n"
"    In [-2**63, 2**64); a negative seed is taken as its two's complement,\n"
"    as torch does.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `seed` is not an integer (bool included).\n"
"ValueError\n"
"    If `seed` is out of range.\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.manual_seed(0)\n"
">>> a = myatt.Linear(3, 2)\n"
">>> myatt.manual_seed(0)\n"
">>> b = myatt.Linear(3, 2)\n"
">>> bool((a.weight == b.weight).all())\n"
"True");

static PyObject *myatt_manual_seed(PyObject *module, PyObject *seed_obj)
{
    if (PyBool_Check(seed_obj) || !PyIndex_Check(seed_obj)) {
        PyErr_Format(PyExc_TypeError, "manual_seed(): seed must be an integer, got %.100s",
                     Py_TYPE(seed_obj)->tp_name);
        return NULL;
    }
    PyObject *index = PyNumber_Index(seed_obj);
    if (index == NULL)
        return NULL;
    /* torch's rule: [0, 2**64) as it is, [-2**63, 0) as its two's complement. */
    unsigned long long seed = PyLong_AsUnsignedLongLong(index);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        long long s = PyLong_AsLongLong(index);
        if (s == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "manual_seed(): seed must be in [-2**63, 2**64), got %R", seed_obj);
            Py_DECREF(index);
            return NULL;
        }
        seed = (unsigned long long)s;
    }
    Py_DECREF(index);
    mt19937_seed(&myatt_state_of_module(module)->rng, seed);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_num_threads_doc,
"set_num_threads($module, n, /)\n--\n\n"
"Set the number of threads the kernels use.\n"
"\n"
"Results do not depend on it: every thread count gives the same bits.\n"
"\n"
"Parameters\n"
"----------\n"
"n : int\n"
"    In [1, 4096].\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    If `n` is not an int (bool included).\n"
"ValueError\n"
"    If `n` is out of range.\n"
"\n"
"See Also\n"
"--------\n"
"get_num_threads\n"
"\n"
"Examples\n"
"--------\n"
">>> old = myatt.get_num_threads()\n"
">>> myatt.set_num_threads(1)\n"
">>> myatt.get_num_threads()\n"
"1\n"
">>> myatt.set_num_threads(old)");

static PyObject *myatt_set_num_threads(PyObject *module, PyObject *n_obj)
{
    if (PyBool_Check(n_obj) || !PyLong_Check(n_obj)) {
        PyErr_Format(PyExc_TypeError, "set_num_threads(): n must be an integer, got %.100s",
                     Py_TYPE(n_obj)->tp_name);
        return NULL;
    }
    int overflow;
    long n = PyLong_AsLongAndOverflow(n_obj, &overflow);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (overflow != 0 || n < 1 || n > 4096) {
        PyErr_Format(PyExc_ValueError, "set_num_threads(): n must be in [1, 4096], got %R",
                     n_obj);
        return NULL;
    }
    mk_set_num_threads((int)n);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(get_num_threads_doc,
"get_num_threads($module, /)\n--\n\n"
"The number of threads the kernels use.\n"
"\n"
"Returns\n"
"-------\n"
"int\n"
"    The value last given to set_num_threads; by default the cores available\n"
"    to the process.\n"
"\n"
"See Also\n"
"--------\n"
"set_num_threads\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.get_num_threads() >= 1\n"
"True");

static PyObject *myatt_get_num_threads(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(mk_get_num_threads());
}

PyDoc_STRVAR(empty_cache_doc,
"empty_cache($module, /)\n--\n\n"
"Free the kernels' cached workspaces and the cached memory of freed results.\n"
"\n"
"Kernels keep freed workspaces (packed panels, row blocks) of 32 KiB and more,\n"
"up to 256 MiB in all, and reuse them in later calls instead of asking the OS\n"
"for fresh pages each time; the data of results of 32 KiB and more, once the\n"
"arrays are freed, is kept the same way (up to 256 MiB) for later\n"
"results. This gives that memory back; later calls allocate again as needed.\n"
"\n"
"Examples\n"
"--------\n"
">>> y = myatt.bmm(np.ones((4, 64, 64)), np.ones((4, 64, 64)))\n"
">>> myatt.empty_cache()");

static PyObject *myatt_empty_cache(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    Py_BEGIN_ALLOW_THREADS
    mk_empty_cache();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(kernel_path_doc,
"kernel_path($module, /)\n--\n\n"
"The instruction-set path of the kernels.\n"
"\n"
"The best one this CPU supports, unless the environment variable MYATT_KERNEL\n"
"(read once, at import) asks for another: a path the CPU cannot run falls back\n"
"to the best supported one, with a RuntimeWarning at import.  On a CPU with\n"
"AVX512_BF16 and no path named, the ``'avx512'`` path also multiplies bfloat16\n"
"linear operands with its bfloat16 dot product (``MYATT_KERNEL=avx512``: with\n"
"float32 FMAs, as without it).\n"
"\n"
"Returns\n"
"-------\n"
"str\n"
"    ``'avx512'``, ``'avx2'`` or ``'portable'``.\n"
"\n"
"Examples\n"
"--------\n"
">>> myatt.kernel_path() in ('avx512', 'avx2', 'portable')\n"
"True");

static PyObject *myatt_kernel_path(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyUnicode_FromString(mk_isa_name(mk_cpu_isa()));
}

PyMethodDef runtime_methods[] = {
    {"manual_seed", myatt_manual_seed, METH_O, manual_seed_doc},
    {"set_num_threads", myatt_set_num_threads, METH_O, set_num_threads_doc},
    {"get_num_threads", myatt_get_num_threads, METH_NOARGS, get_num_threads_doc},
    {"empty_cache", myatt_empty_cache, METH_NOARGS, empty_cache_doc},
    {"kernel_path", myatt_kernel_path, METH_NOARGS, kernel_path_doc},
    {NULL, NULL, 0, NULL},
};

/* A seed for an unseeded generator: OS entropy, else the clock and the pid. */
static uint64_t entropy_seed(void)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed)
        return seed;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
}

int runtime_setup(PyObject *module)
{
    myatt_state *st = myatt_state_of_module(module);
    /* Kernel workspaces through Python's raw allocator, so tracemalloc sees them. */
    mk_set_allocator(PyMem_RawMalloc, PyMem_RawFree);
    mt19937_seed(&st->rng, entropy_seed());
    /* Decide the kernel path now (MYATT_KERNEL) and say so if the request was not followed. */
    const char *note = mk_cpu_note();
    if (note != NULL && PyErr_WarnEx(PyExc_RuntimeWarning, note, 1) < 0)
        return -1;
    return 0;
}
