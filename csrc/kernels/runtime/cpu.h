/* Which instruction set the kernels use: detected once, overridable by the
 * environment, and the one place every ISA-specific choice is made.
 *
 *   MYATT_KERNEL=portable|avx2|avx512   forces a path.  A path the CPU (or the
 *   OS, for the AVX register state) does not support falls back to the best
 *   supported one; an unknown name falls back too.  Either way mk_cpu_note()
 *   then says what happened (the glue turns it into a RuntimeWarning).
 *   Unset, the AVX-512 path also uses AVX512_BF16's dot product for bfloat16
 *   where the CPU has it (mk_cpu_bf16_dot); a path named never does.
 *
 * The choice is made on first use and cached (pthread_once), so the
 * variable must be set before the first kernel call of the process. */
#ifndef MYATT_KERNELS_CPU_H
#define MYATT_KERNELS_CPU_H

/* Defined on x86 (32 or 64 bit): the SIMD paths exist only there.  The one
 * guard of every ISA-specific file and declaration. */
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#define MYATT_X86 1
#endif

/* The one way a file is compiled for an instruction set whatever the build's
 * flags: every function between
 *   MYATT_TARGET_PUSH("avx2,fma")  ...  MYATT_TARGET_POP()
 * (including the static inline ones of the headers included there: simd_*.h)
 * carries that target.  gcc takes a target pragma, clang the same attribute
 * pushed onto every function (it ignores the gcc pragma).  Such code may only
 * run after mk_cpu_isa() chose that path. */
#define MYATT_PRAGMA_(x) _Pragma(#x)
#if defined(__clang__)
#define MYATT_TARGET_PUSH(isa) \
    MYATT_PRAGMA_(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define MYATT_TARGET_POP() MYATT_PRAGMA_(clang attribute pop)
#else
#define MYATT_TARGET_PUSH(isa) MYATT_PRAGMA_(GCC push_options) MYATT_PRAGMA_(GCC target(isa))
#define MYATT_TARGET_POP() MYATT_PRAGMA_(GCC pop_options)
#endif

/* The targets of the two SIMD paths (cpu.c checks the same features). */
#define MYATT_TARGET_AVX2 "avx2,fma"
#define MYATT_TARGET_AVX512 "avx512f,avx512vl,fma"

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

/* 1 when the bfloat16 products use AVX512_BF16's dot product (vdpbf16ps):
 * the AVX-512 path on a CPU that has it, unless MYATT_KERNEL names a path
 * (MYATT_KERNEL=avx512 is AVX-512 with the bfloat16 operands converted to
 * float32, the path of CPUs without it). */
int mk_cpu_bf16_dot(void);

/* NULL, or a sentence on why MYATT_KERNEL was not followed. */
const char *mk_cpu_note(void);

/* The float32 lanes of torch's vectors (at::vec::Vectorized<float>) where
 * torch runs on the ATEN_CPU_CAPABILITY matching the path mk_cpu_isa() chose:
 * 16 on AVX-512, 8 on AVX2 and in its DEFAULT build.  The kernels that
 * reproduce torch's vector-by-vector roundings (half precision) go by it. */
int mk_torch_float_lanes(void);

#endif
