/* softmax along the middle axis of a contiguous [outer, n, inner] array, once
 * per dtype via softmax_tmpl.h.  libm's expf / exp: correctly rounded to within
 * an ulp, like torch's vectorised exp, and not affected by -ffast-math games. */
#include "softmax.h"

#include <math.h>
#include <stdint.h>

#define T float
#define SUF(name) name##_f32
#define EXP expf
#include "softmax_tmpl.h"
#undef T
#undef SUF
#undef EXP

#define T double
#define SUF(name) name##_f64
#define EXP exp
#include "softmax_tmpl.h"
#undef T
#undef SUF
#undef EXP
