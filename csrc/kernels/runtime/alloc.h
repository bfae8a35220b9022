/* Memory for kernel workspaces (packed panels, row blocks) and for the data
 * of the arrays the glue returns.
 *
 * The kernels never call malloc directly: they go through this hook, which the
 * CPython glue points at PyMem_RawMalloc/PyMem_RawFree so that tracemalloc sees
 * kernel buffers.  All functions are safe to call without the GIL.
 * Blocks are 64-byte aligned (one cache line, one AVX-512 register).
 *
 * Freed blocks of MK_CACHE_MIN bytes and more are kept, up to 256 MiB in all
 * for workspaces and as much for array data, and handed out again (their pages
 * stay mapped from one call to the next); mk_empty_cache() gives them back.
 * Contents of a block are unspecified, as with malloc. */
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

/* Blocks for array data (the glue's NumPy memory handler): the same, from
 * malloc itself (NumPy tells tracemalloc about array data), with a cache of
 * their own.  glibc's free() hands blocks over its mmap threshold back to the
 * OS, and trims its heap, so each call's fresh results were faulted in page by
 * page (a mid-size vjp of MyAtt: 0.43 ms of work took 1.2 ms). */
void *mk_data_alloc(size_t bytes);
void mk_data_free(void *p);

/* The usable bytes of a block of either kind (at least what was asked). */
size_t mk_block_size(const void *p);

/* Blocks of at least this many bytes are cached when freed. */
#define MK_CACHE_MIN ((size_t)32 << 10)

/* Free every cached block of both caches (myatt.empty_cache()). */
void mk_empty_cache(void);

/* n * size as a byte count, or SIZE_MAX when it overflows (mk_alloc then fails). */
size_t mk_bytes(size_t n, size_t size);

#endif
