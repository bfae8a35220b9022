/* The seed's MyAtt.forward, fused (see myatt.h), once per dtype via myatt_tmpl.h.
 *
 * torch.cat((Q[0], K[0]), -1) @ W^T is split into two gemm calls on column
 * slices of W (the second accumulating), so no concatenated copy is made, and
 * S is processed in blocks of MYATT_ROW_BLOCK rows so that the `applied`
 * workspace is [MYATT_ROW_BLOCK, v2] whatever S is.  The backward runs over the
 * same row blocks and recomputes each block's forward values (myatt_tmpl.h). */
#include "myatt.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "gemm.h"
#include "softmax.h"

/* Rows of S per block: large enough for full gemm tiles, small enough that the
 * block's attn_weights, applied and out rows stay in cache between steps. */
#define MYATT_ROW_BLOCK 64

#define T float
#define SUF(name) name##_f32
#include "myatt_tmpl.h"
#undef T
#undef SUF

#define T double
#define SUF(name) name##_f64
#include "myatt_tmpl.h"
#undef T
#undef SUF
