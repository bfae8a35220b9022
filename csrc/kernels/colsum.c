/* torch's column sums (colsum.h), once per dtype via colsum_tmpl.h. */
#include "colsum.h"

#include <stdint.h>

#define T float
#define SUF(name) name##_f32
#include "colsum_tmpl.h"
#undef T
#undef SUF

#define T double
#define SUF(name) name##_f64
#include "colsum_tmpl.h"
#undef T
#undef SUF
