/* The number of threads the kernels may use (myatt.set_num_threads).
 * The value is read once at the start of each kernel call, so changing it while
 * another thread computes affects only later calls. */
#ifndef MYATT_KERNELS_THREADS_H
#define MYATT_KERNELS_THREADS_H

#include <stdint.h>

/* The cores this process may run on (sched_getaffinity), at least 1. */
int mk_available_cores(void);

void mk_set_num_threads(int n);   /* n >= 1 */
int mk_get_num_threads(void);

#endif

/* ---- the thread pool ------------------------------------------------------
 *
 * mk_parallel_run(ntasks, fn, arg) calls fn(arg, task) once for every task in
 * [0, ntasks) and returns when all have returned.  The caller runs tasks too;
 * up to ntasks - 1 pool threads (started on first need, kept for later calls)
 * run the rest.  Tasks must not depend on which thread runs them, or in which
 * order: when the pool is busy with another caller's work (concurrent calls
 * from several Python threads), or a thread cannot be started, the caller
 * simply runs the remaining tasks itself.
 *
 * Why our own small pthread pool and not OpenMP: GNU OpenMP's pool is not
 * re-created in a forked child (a child that uses it after the parent did can
 * hang), it would be a third pool beside torch's and NumPy's (OMP_NUM_THREADS
 * and friends would then act on us in surprising ways), and we need only
 * "run these n tasks and wait".  This pool is re-created in a forked child
 * (pthread_atfork) and never nests.  A thread out of work polls for up to
 * 0.2 ms before it sleeps on a condition variable (waking a sleeping thread
 * cost as much as a mid-size product: see MK_SPIN_NS in threads.c). */
typedef void (*mk_task_fn)(void *arg, int task);

void mk_parallel_run(int ntasks, mk_task_fn fn, void *arg);

/* mk_parallel_bands(n, item_bytes, min_bytes, fn, arg): fn(arg, i0, i1) over
 * [0, n) in bands, one task each, for memory-bound loops (copies,
 * conversions) of item_bytes bytes moved per index: on the calling thread
 * below 2 * min_bytes in all (waking a thread costs more than moving less
 * than min_bytes), else on up to mk_get_num_threads() threads with at least
 * min_bytes each. */
typedef void (*mk_band_fn)(void *arg, int64_t i0, int64_t i1);

void mk_parallel_bands(int64_t n, int64_t item_bytes, int64_t min_bytes, mk_band_fn fn,
                       void *arg);
