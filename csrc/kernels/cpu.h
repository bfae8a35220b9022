/* Which instruction set the kernels use: detected once, overridable by the
 * environment, and the one place every ISA-specific choice is made.
 *
 *   MYATT_KERNEL=portable|avx2|avx512   forces a path.  A path the CPU (or the
 *   OS, for the AVX register state) does not support falls back to the best
 *   supported one; an unknown name falls back too.  Either way mk_cpu_note()
 *   then says what happened (the glue turns it into a RuntimeWarning).
 *
 * The choice is made on first use and cached (pthread_once), so the
 * variable must be set before the first kernel call of the process. */
#ifndef MYATT_KERNELS_CPU_H
#define MYATT_KERNELS_CPU_H

typedef enum {
    MK_ISA_PORTABLE = 0,   /* plain C (SSE2 baseline), no FMA */
    MK_ISA_AVX2 = 1,       /* AVX2 + FMA3, 16 ymm registers */
    MK_ISA_AVX512 = 2,     /* AVX-512 F + VL (+ FMA), 32 zmm registers */
} mk_isa;

/* The best path this CPU and OS support (no environment override). */
mk_isa mk_cpu_best_isa(void);

/* The path the kernels use: the override if supported, else the best. */
mk_isa mk_cpu_isa(void);

/* "portable", "avx2" or "avx512". */
const char *mk_isa_name(mk_isa isa);

/* NULL, or a sentence on why MYATT_KERNEL was not followed. */
const char *mk_cpu_note(void);

#endif
