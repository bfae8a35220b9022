/* half.h's conversion loops (half_tmpl.h) compiled for AVX-512 whatever the
 * build's flags; used only when mk_cpu_isa() chose that path. */
#include "cpu.h"

#ifdef MYATT_X86

#include "half_internal.h"

MYATT_TARGET_PUSH(MYATT_TARGET_AVX512)

#define SUF(name) name##_avx512
#include "half_tmpl.h"

MYATT_TARGET_POP()

#endif
