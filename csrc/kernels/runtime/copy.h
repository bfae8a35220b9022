/* Copies of strided views into C-contiguous memory, large ones by all threads
 * (vjp's private copies: at sizes 1024, a float64 training step copies
 * 72 MB, which one thread of two took 3-4 % of the step to do alone). */
#ifndef MYATT_KERNELS_COPY_H
#define MYATT_KERNELS_COPY_H

#include <stdint.h>

#include "view.h"

/* dst [m.rows, m.cols] (C-contiguous) = what m shows, elements of `item`
 * bytes (any strides, negative ones too).  Cannot fail. */
void mk_copy_view(void *dst, mk_cmat m, int64_t item);

#endif
