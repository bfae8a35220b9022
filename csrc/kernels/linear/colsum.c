/* torch's column sums (colsum.h), once per dtype via colsum_tmpl.h. */
#include "colsum.h"

#include <stdint.h>

#include "runtime/threads.h"

/* Threads only when each gets at least this many elements (~0.1 ms of sums). */
#define COLSUM_THREAD_MIN_ELEMS (256 * 1024)

#define T float
#define SUF(name) name##_f32
#include "colsum_tmpl.h"

#define T double
#define SUF(name) name##_f64
#include "colsum_tmpl.h"

void colsum_f32(void *out, mk_cmat x)
{
    colsum_body_f32(out, x.data, x.rs, x.cs, x.rows, x.cols, 0);
}

void colsum_f64(void *out, mk_cmat x)
{
    colsum_body_f64(out, x.data, x.rs, x.cs, x.rows, x.cols, 0);
}

void colsum_half_f32(void *out, mk_cmat x)
{
    colsum_body_f32(out, x.data, x.rs, x.cs, x.rows, x.cols, 1);
}
