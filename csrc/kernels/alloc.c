/* Memory for kernel workspaces: 64-byte aligned blocks on top of a replaceable
 * malloc/free pair (see alloc.h). */
#include "alloc.h"

#include <stdint.h>
#include <stdlib.h>

#define MK_ALIGN 64

/* The hook: the only mutable state of the kernels.  Set once, before any kernel
 * runs (the glue does it at module init), so reads need no lock. */
static mk_malloc_fn mk_malloc_hook = malloc;
static mk_free_fn mk_free_hook = free;

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
 *   raw                                   aligned (returned, multiple of 64)
 *   | padding ... | original pointer raw | bytes ...                      |
 *
 * Over-allocate by MK_ALIGN + sizeof(void *): wherever raw lands, there is room
 * for the saved pointer just before an aligned address.  bytes == 0 still gets
 * a unique, valid (non-NULL) block, so callers can treat NULL as failure. */
void *mk_alloc(size_t bytes)
{
    const size_t extra = MK_ALIGN + sizeof(void *);
    if (bytes > SIZE_MAX - extra)
        return NULL;
    void *raw = mk_malloc_hook(bytes + extra);
    if (raw == NULL)
        return NULL;
    uintptr_t start = (uintptr_t)raw + sizeof(void *);
    uintptr_t aligned = (start + (MK_ALIGN - 1)) & ~(uintptr_t)(MK_ALIGN - 1);
    ((void **)aligned)[-1] = raw;
    return (void *)aligned;
}

void mk_free(void *p)
{
    if (p == NULL)
        return;
    mk_free_hook(((void **)p)[-1]);
}
