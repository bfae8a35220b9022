#define _GNU_SOURCE
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
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

/* ---- the thread pool (see threads.h) -------------------------------------- */

#define MK_MAX_WORKERS 255

/* How long a thread that ran out of work polls for the next job (or the caller
 * for its job's last task) before it sleeps on a condition variable.  Waking a
 * sleeping thread took 50-100 us on a shared 2-core VM, as long as a whole
 * 128 x 256 x 256 product: the backward's dozen such products ran no faster on
 * 2 threads than on 1.  OpenMP runtimes spin the same way (GOMP_SPINCOUNT,
 * KMP_BLOCKTIME), for longer. */
#define MK_SPIN_NS 200000L

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;         /* workers: a new job was published */
    pthread_cond_t done;         /* the caller: the last task of its job finished */
    int nworkers;                /* threads started */
    int busy;                    /* a caller owns the pool */
    atomic_ulong generation;     /* bumped per job (written under lock, polled without) */
    mk_task_fn fn;               /* the current job */
    void *arg;
    int ntasks, next_task;
    atomic_ulong unfinished;     /* tasks of the job not yet returned (as generation) */
} mk_pool;

static long mk_elapsed_ns(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

/* Poll *x for up to MK_SPIN_NS while it equals value, without the lock and
 * without sleeping.  Only a shortcut: callers re-check under the lock and
 * sleep on their condition variable when the value did not change. */
static void mk_spin_while_equal(atomic_ulong *x, unsigned long value)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(x, memory_order_acquire) != value)
                return;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    } while (mk_elapsed_ns(&t0) < MK_SPIN_NS);
}

/* The process's pool, created on first need.  After fork() the child forgets
 * it (its threads do not exist in the child; its lock may be held by a thread
 * that does not exist either) and creates a new one when needed: the parent's
 * block is leaked, a few hundred bytes once per fork that uses threads. */
static mk_pool *mk_the_pool;
static pthread_mutex_t mk_pool_create_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t mk_atfork_once = PTHREAD_ONCE_INIT;

static void mk_pool_forget_in_child(void)
{
    mk_the_pool = NULL;
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    mk_pool_create_lock = fresh;
}

static void mk_register_atfork(void)
{
    pthread_atfork(NULL, NULL, mk_pool_forget_in_child);
}

/* Run tasks of the current job until none is left; called with p->lock held,
 * returns with it held. */
static void mk_pool_work(mk_pool *p)
{
    while (p->next_task < p->ntasks) {
        const int task = p->next_task++;
        mk_task_fn fn = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->lock);
        fn(arg, task);
        pthread_mutex_lock(&p->lock);
        if (atomic_fetch_sub(&p->unfinished, 1) == 1)
            pthread_cond_signal(&p->done);
    }
}

static void *mk_worker_main(void *pool)
{
    mk_pool *p = pool;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        /* A thread started for a job finds it already published: work first. */
        const unsigned long seen = atomic_load(&p->generation);
        mk_pool_work(p);
        if (atomic_load(&p->generation) == seen) {   /* poll a while, then sleep */
            pthread_mutex_unlock(&p->lock);
            mk_spin_while_equal(&p->generation, seen);
            pthread_mutex_lock(&p->lock);
        }
        while (atomic_load(&p->generation) == seen)
            pthread_cond_wait(&p->wake, &p->lock);
    }
    return NULL;   /* not reached: pool threads live as long as the process */
}

static mk_pool *mk_get_pool(void)
{
    pthread_once(&mk_atfork_once, mk_register_atfork);
    pthread_mutex_lock(&mk_pool_create_lock);
    mk_pool *p = mk_the_pool;
    if (p == NULL) {
        p = calloc(1, sizeof *p);   /* never freed: workers may outlive any caller */
        if (p != NULL && (pthread_mutex_init(&p->lock, NULL) != 0
                          || pthread_cond_init(&p->wake, NULL) != 0
                          || pthread_cond_init(&p->done, NULL) != 0)) {
            free(p);   /* (a failed init leaves nothing to destroy worth the code) */
            p = NULL;
        }
        mk_the_pool = p;
    }
    pthread_mutex_unlock(&mk_pool_create_lock);
    return p;
}

/* Start workers until there are `want` (or as many as can be started); called
 * with p->lock held.  Workers block every signal: Python handles signals in
 * the main thread, and a pool thread must never run a handler. */
static void mk_pool_grow(mk_pool *p, int want)
{
    if (want > MK_MAX_WORKERS)
        want = MK_MAX_WORKERS;
    if (p->nworkers >= want)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (p->nworkers < want) {
        pthread_t t;
        if (pthread_create(&t, &attr, mk_worker_main, p) != 0)
            break;
        p->nworkers++;
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void mk_parallel_run(int ntasks, mk_task_fn fn, void *arg)
{
    mk_pool *p = ntasks > 1 ? mk_get_pool() : NULL;
    if (p != NULL) {
        pthread_mutex_lock(&p->lock);
        if (p->busy) {
            pthread_mutex_unlock(&p->lock);
            p = NULL;
        }
    }
    if (p == NULL) {   /* one task, no pool, or the pool is someone else's now */
        for (int task = 0; task < ntasks; task++)
            fn(arg, task);
        return;
    }
    p->busy = 1;
    mk_pool_grow(p, ntasks - 1);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    p->next_task = 0;
    atomic_store(&p->unfinished, (unsigned long)ntasks);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    mk_pool_work(p);   /* the caller takes tasks too (all of them if no worker started) */
    if (atomic_load(&p->unfinished) > 0) {   /* poll a while, then sleep */
        pthread_mutex_unlock(&p->lock);
        mk_spin_while_equal(&p->unfinished, atomic_load(&p->unfinished));
        pthread_mutex_lock(&p->lock);
    }
    while (atomic_load(&p->unfinished) > 0)
        pthread_cond_wait(&p->done, &p->lock);
    p->fn = NULL;
    p->arg = NULL;
    p->busy = 0;
    pthread_mutex_unlock(&p->lock);
}

typedef struct {
    mk_band_fn fn;
    void *arg;
    int64_t n, band;
} mk_bands;

static void mk_band_task(void *arg, int task)
{
    const mk_bands *b = arg;
    const int64_t i0 = task * b->band;
    b->fn(b->arg, i0, i0 + b->band < b->n ? i0 + b->band : b->n);
}

void mk_parallel_bands(int64_t n, int64_t item_bytes, int64_t min_bytes, mk_band_fn fn,
                       void *arg)
{
    if (n <= 0)
        return;
    const int64_t bytes = n * item_bytes;
    int64_t nthreads = bytes < 2 * min_bytes ? 1 : mk_get_num_threads();
    if (nthreads > bytes / min_bytes)
        nthreads = bytes / min_bytes;
    if (nthreads > n)
        nthreads = n;
    if (nthreads <= 1) {
        fn(arg, 0, n);
        return;
    }
    mk_bands b = {fn, arg, n, (n + nthreads - 1) / nthreads};
    mk_parallel_run((int)((n + b.band - 1) / b.band), mk_band_task, &b);
}
