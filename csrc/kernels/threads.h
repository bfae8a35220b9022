/* The number of threads the kernels may use (myatt.set_num_threads).
 * The value is read once at the start of each kernel call, so changing it while
 * another thread computes affects only later calls. */
#ifndef MYATT_KERNELS_THREADS_H
#define MYATT_KERNELS_THREADS_H

/* The cores this process may run on (sched_getaffinity), at least 1. */
int mk_available_cores(void);

void mk_set_num_threads(int n);   /* n >= 1 */
int mk_get_num_threads(void);

#endif
