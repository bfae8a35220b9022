/* Memory for kernel workspaces (packed panels, row blocks).
 *
 * The kernels never call malloc directly: they go through this hook, which the
 * CPython glue points at PyMem_RawMalloc/PyMem_RawFree so that tracemalloc sees
 * kernel buffers.  Both functions are safe to call without the GIL.
 * Blocks are 64-byte aligned (one cache line, one AVX-512 register).
 *
 * Freed blocks of 32 KiB and more are kept, up to 32 MiB in all, and handed
 * out again (a workspace's pages stay mapped from one call to the next);
 * mk_empty_cache() gives them back.  Contents of a block are unspecified, as
 * with malloc. */
#ifndef MYATT_KERNELS_ALLOC_H
#define MYATT_KERNELS_ALLOC_H

#include <stddef.h>

typedef void *(*mk_malloc_fn)(size_t);
typedef void (*mk_free_fn)(void *);

/* Replace the underlying allocator (default: malloc/free). Call before any kernel runs. */
void mk_set_allocator(mk_malloc_fn malloc_fn, mk_free_fn free_fn);

/* 64-byte aligned block of `bytes` bytes, or NULL when out of memory or when
 * `bytes` is too large to represent; mk_free(NULL) is a no-op. */
void *mk_alloc(size_t bytes);
void mk_free(void *p);

/* Free every cached block (myatt.empty_cache()). */
void mk_empty_cache(void);

/* n * size as a byte count, or SIZE_MAX when it overflows (mk_alloc then fails). */
size_t mk_bytes(size_t n, size_t size);

#endif
