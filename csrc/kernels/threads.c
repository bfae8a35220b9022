#define _GNU_SOURCE
#include "threads.h"

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

static atomic_int num_threads;   /* 0: not set yet, use mk_available_cores() */

int mk_available_cores(void)
{
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void mk_set_num_threads(int n)
{
    atomic_store(&num_threads, n < 1 ? 1 : n);
}

int mk_get_num_threads(void)
{
    int n = atomic_load(&num_threads);
    return n > 0 ? n : mk_available_cores();
}
