/* Memory for kernel workspaces: 64-byte aligned blocks on top of a replaceable
 * malloc/free pair, and a small cache of freed blocks (see alloc.h). */
#include "alloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define MK_ALIGN 64

/* The hook: set once, before any kernel runs (the glue does it at module
 * init), so reads need no lock. */
static mk_malloc_fn mk_malloc_hook = malloc;
static mk_free_fn mk_free_hook = free;

/* The caches: up to MK_CACHE_SLOTS freed blocks of at least MK_CACHE_MIN bytes,
 * `max` bytes in all, handed out again best-fit.  Without one, every
 * call's packed panels were returned to the OS by free() and faulted back in
 * (zeroed page by page) by the next call: 30 % of a mid-size backward.  The
 * workspaces' cache takes its blocks from the hook, the arrays' cache
 * (mk_data_alloc) from malloc.  The arrays' cache holds more: a large training
 * step frees and allocates again ~150 MB of results and vjp copies (float64,
 * sizes 1024), and with 32 MiB it faulted most of them in afresh each step
 * (10 % of the step on Zen 5).  The workspaces' cache holds as much: a
 * MultiheadAttention forward with need_weights at N = 8, L = 512, E = 512
 * takes ~105 MB of workspace (the per-head weights 64 MB, the projections 25),
 * and with 32 MiB faulted most of it in afresh: 99 -> 73 ms on one Zen 5 core,
 * 67 -> 42 ms on two (page faults contend for the process's memory map). */
#define MK_CACHE_SLOTS 32
#define MK_WORK_CACHE_MAX ((size_t)256 << 20)
#define MK_DATA_CACHE_MAX ((size_t)256 << 20)

typedef struct {
    void *raw;       /* what the allocator returned, or NULL: an empty slot */
    size_t size;     /* usable bytes from the aligned start */
} mk_block;

typedef struct {
    mk_block slot[MK_CACHE_SLOTS];
    size_t bytes;
    size_t max;      /* bytes at most */
    pthread_mutex_t lock;
} mk_cache;

static mk_cache mk_work_cache = {.max = MK_WORK_CACHE_MAX, .lock = PTHREAD_MUTEX_INITIALIZER};
static mk_cache mk_data_cache = {.max = MK_DATA_CACHE_MAX, .lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t mk_cache_atfork_once = PTHREAD_ONCE_INIT;

/* A forked child may inherit a lock held by a thread it does not have. */
static void mk_cache_reset_lock_in_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    mk_work_cache.lock = fresh;
    mk_data_cache.lock = fresh;
}

static void mk_cache_register_atfork(void)
{
    pthread_atfork(NULL, NULL, mk_cache_reset_lock_in_child);
}

void mk_set_allocator(mk_malloc_fn malloc_fn, mk_free_fn free_fn)
{
    /* NULL restores the default for that half; a pair must match, so set both. */
    mk_malloc_hook = malloc_fn ? malloc_fn : malloc;
    mk_free_hook = free_fn ? free_fn : free;
}

size_t mk_bytes(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return SIZE_MAX;
    return n * size;
}

/* Layout of one block:
 *
 *   raw                                 aligned (returned, multiple of 64)
 *   | padding ... | raw | usable size | bytes ...                          |
 *
 * Over-allocate by MK_ALIGN + two words: wherever raw lands, there is room for
 * the header just before an aligned address.  bytes == 0 still gets a unique,
 * valid (non-NULL) block, so callers can treat NULL as failure. */
#define MK_HEADER (2 * sizeof(void *))

static void *mk_block_start(void *raw, size_t size)
{
    uintptr_t aligned = ((uintptr_t)raw + MK_HEADER + (MK_ALIGN - 1)) & ~(uintptr_t)(MK_ALIGN - 1);
    ((void **)aligned)[-2] = raw;
    ((size_t *)aligned)[-1] = size;
    return (void *)aligned;
}

size_t mk_block_size(const void *p)
{
    return ((const size_t *)p)[-1];
}

static void *cache_alloc(mk_cache *cache, mk_malloc_fn malloc_fn, size_t bytes)
{
    if (bytes >= MK_CACHE_MIN) {   /* the smallest cached block that is large enough */
        pthread_once(&mk_cache_atfork_once, mk_cache_register_atfork);
        pthread_mutex_lock(&cache->lock);
        int best = -1;
        for (int i = 0; i < MK_CACHE_SLOTS; i++)
            if (cache->slot[i].raw != NULL && cache->slot[i].size >= bytes
                && (best < 0 || cache->slot[i].size < cache->slot[best].size))
                best = i;
        mk_block found = {NULL, 0};
        if (best >= 0) {
            found = cache->slot[best];
            cache->slot[best].raw = NULL;
            cache->bytes -= found.size;
        }
        pthread_mutex_unlock(&cache->lock);
        if (found.raw != NULL)
            return mk_block_start(found.raw, found.size);
    }
    const size_t extra = MK_ALIGN + MK_HEADER;
    if (bytes > SIZE_MAX - extra)
        return NULL;
    void *raw = malloc_fn(bytes + extra);
    return raw == NULL ? NULL : mk_block_start(raw, bytes);
}

static void cache_free(mk_cache *cache, mk_free_fn free_fn, void *p)
{
    if (p == NULL)
        return;
    mk_block block = {((void **)p)[-2], ((size_t *)p)[-1]};
    if (block.size >= MK_CACHE_MIN && block.size <= cache->max) {
        pthread_once(&mk_cache_atfork_once, mk_cache_register_atfork);
        pthread_mutex_lock(&cache->lock);
        for (int i = 0; i < MK_CACHE_SLOTS; i++)
            if (cache->slot[i].raw == NULL && cache->bytes + block.size <= cache->max) {
                cache->slot[i] = block;
                cache->bytes += block.size;
                block.raw = NULL;
                break;
            }
        pthread_mutex_unlock(&cache->lock);
    }
    if (block.raw != NULL)
        free_fn(block.raw);
}

static void cache_empty(mk_cache *cache, mk_free_fn free_fn)
{
    pthread_once(&mk_cache_atfork_once, mk_cache_register_atfork);
    pthread_mutex_lock(&cache->lock);
    mk_block taken[MK_CACHE_SLOTS];
    for (int i = 0; i < MK_CACHE_SLOTS; i++) {
        taken[i] = cache->slot[i];
        cache->slot[i].raw = NULL;
    }
    cache->bytes = 0;
    pthread_mutex_unlock(&cache->lock);
    for (int i = 0; i < MK_CACHE_SLOTS; i++)
        if (taken[i].raw != NULL)
            free_fn(taken[i].raw);
}

void *mk_alloc(size_t bytes)
{
    return cache_alloc(&mk_work_cache, mk_malloc_hook, bytes);
}

void mk_free(void *p)
{
    cache_free(&mk_work_cache, mk_free_hook, p);
}

void *mk_data_alloc(size_t bytes)
{
    return cache_alloc(&mk_data_cache, malloc, bytes);
}

void mk_data_free(void *p)
{
    cache_free(&mk_data_cache, free, p);
}

void mk_empty_cache(void)
{
    cache_empty(&mk_work_cache, mk_free_hook);
    cache_empty(&mk_data_cache, free);
}
