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

/* The cache: up to MK_CACHE_SLOTS freed blocks of at least MK_CACHE_MIN bytes,
 * MK_CACHE_MAX bytes in all, handed out again best-fit.  Without it, every
 * call's packed panels were returned to the OS by free() and faulted back in
 * (zeroed page by page) by the next call: 30 % of a mid-size backward. */
#define MK_CACHE_SLOTS 8
#define MK_CACHE_MIN ((size_t)32 << 10)
#define MK_CACHE_MAX ((size_t)32 << 20)

typedef struct {
    void *raw;       /* what the hook returned, or NULL: an empty slot */
    size_t size;     /* usable bytes from the aligned start */
} mk_block;

static mk_block mk_cache[MK_CACHE_SLOTS];
static size_t mk_cache_bytes;
static pthread_mutex_t mk_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t mk_cache_atfork_once = PTHREAD_ONCE_INIT;

/* A forked child may inherit the lock held by a thread it does not have. */
static void mk_cache_reset_lock_in_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    mk_cache_lock = fresh;
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

void *mk_alloc(size_t bytes)
{
    if (bytes >= MK_CACHE_MIN) {   /* the smallest cached block that is large enough */
        pthread_once(&mk_cache_atfork_once, mk_cache_register_atfork);
        pthread_mutex_lock(&mk_cache_lock);
        int best = -1;
        for (int i = 0; i < MK_CACHE_SLOTS; i++)
            if (mk_cache[i].raw != NULL && mk_cache[i].size >= bytes
                && (best < 0 || mk_cache[i].size < mk_cache[best].size))
                best = i;
        mk_block found = {NULL, 0};
        if (best >= 0) {
            found = mk_cache[best];
            mk_cache[best].raw = NULL;
            mk_cache_bytes -= found.size;
        }
        pthread_mutex_unlock(&mk_cache_lock);
        if (found.raw != NULL)
            return mk_block_start(found.raw, found.size);
    }
    const size_t extra = MK_ALIGN + MK_HEADER;
    if (bytes > SIZE_MAX - extra)
        return NULL;
    void *raw = mk_malloc_hook(bytes + extra);
    return raw == NULL ? NULL : mk_block_start(raw, bytes);
}

void mk_free(void *p)
{
    if (p == NULL)
        return;
    mk_block block = {((void **)p)[-2], ((size_t *)p)[-1]};
    if (block.size >= MK_CACHE_MIN && block.size <= MK_CACHE_MAX) {
        pthread_once(&mk_cache_atfork_once, mk_cache_register_atfork);
        pthread_mutex_lock(&mk_cache_lock);
        for (int i = 0; i < MK_CACHE_SLOTS; i++)
            if (mk_cache[i].raw == NULL && mk_cache_bytes + block.size <= MK_CACHE_MAX) {
                mk_cache[i] = block;
                mk_cache_bytes += block.size;
                block.raw = NULL;
                break;
            }
        pthread_mutex_unlock(&mk_cache_lock);
    }
    if (block.raw != NULL)
        mk_free_hook(block.raw);
}

void mk_empty_cache(void)
{
    pthread_once(&mk_cache_atfork_once, mk_cache_register_atfork);
    pthread_mutex_lock(&mk_cache_lock);
    mk_block taken[MK_CACHE_SLOTS];
    for (int i = 0; i < MK_CACHE_SLOTS; i++) {
        taken[i] = mk_cache[i];
        mk_cache[i].raw = NULL;
    }
    mk_cache_bytes = 0;
    pthread_mutex_unlock(&mk_cache_lock);
    for (int i = 0; i < MK_CACHE_SLOTS; i++)
        if (taken[i].raw != NULL)
            mk_free_hook(taken[i].raw);
}
