/* AVX2 + FMA micro-kernels and direct loops for gemm (see gemm_internal.h for
 * the contract).  Compiled for AVX2 by MYATT_TARGET_PUSH below whatever the build
 * flags; only called when cpu.c found AVX2 and FMA usable.
 *
 * Tiles use the 16 ymm registers: 12 accumulators, the B row, and the
 * broadcast A element.
 *   f32 6 x 16: per p, B[p, 0:16] is two ymm, each A[i, p] multiplies both.
 *   f64 4 x 12: B[p, 0:12] is three ymm (7 loads per 12 FMAs instead of the
 *               8 of 6 x 8: ~5 % faster at 2048^3).
 * Same arithmetic per output as the AVX-512 kernels (float32: KC blocks summed
 * from zero by FMA in increasing p, then added onto c; float64: one FMA chain
 * continuing from c), hence the same bits.
 *
 * Each kernel reads A from a packed panel or in place from its rows
 * (kernel_rows): one body, inlined with the strides of each.
 *
 * Block sizes, as for AVX-512 (gemm_avx512.c): one or two A micro-panels at a
 * time (f32 MC = 12, f64 MC = 8) swept over a B block of KC x 1024
 * (f32, KC the summation block) or 2048 x 504 (f64).  Against A blocks sized
 * for L2 (240 / 64 rows) on Zen 4: 2048^3 f32 78 -> 83 % of peak, f64
 * 72 -> 87 %. */
#include "runtime/cpu.h"

#ifdef MYATT_X86

#include <immintrin.h>
#include <stdint.h>

#include "gemm_internal.h"

/* Everything below is compiled for this instruction set whatever the build's
 * flags (cpu.h). */
MYATT_TARGET_PUSH(MYATT_TARGET_AVX2)

#include "simd/simd_avx2.h"
#include "gemm_copy_avx.h"
#include "gemm_row_avx.h"

/* up to 4 rows against B = weight^T in the direct loop (GEMM_SMALL_ROWS_WT) */
GEMM_ROWS_WT_FN(float, gemm_rows_wt_f32_avx2, gemm_rows_wt_f32, )
GEMM_ROWS_WT_FN(double, gemm_rows_wt_f64_avx2, gemm_rows_wt_f64, )

/* float32: the 6 x 16 kernels (gemm_kernel_tmpl.h) and the direct loop, with
 * FMA (vectorised over up to four vector registers of columns) */
#define T float
#define VEC(op) avx2_f32_##op
#define GEMM_KERNEL_MR 6
#define GEMM_KERNEL_NV 2
#define GEMM_KERNEL_NAME gemm_f32_avx2
#include "gemm_kernel_tmpl.h"
#define T float
#define VEC(op) avx2_f32_##op
#define GEMM_MADD(s, x, y) __builtin_fmaf((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f32
#define GEMM_SMALL_ROWS_WT gemm_rows_wt_f32_avx2
#define GEMM_SMALL_ROWS_WT_MAX 4
/* below it, 2-4 rows ran faster through the strip copy (2 rows x 4 vectors of
 * sums side by side, where the transposing loop has 4 chains for 3-4 rows: Zen
 * 4, 4 x 64 @ W[32, 64]^T 0.49 against 0.65 us) */
#define GEMM_SMALL_ROWS_WT_WORK GEMM_SMALL_ROWS_WORK
#define GEMM_SMALL_COLS 32
#define GEMM_SMALL_ROWS 2
#define GEMM_SMALL_NAME gemm_f32_avx2_small
#include "gemm_small_tmpl.h"

/* float64: the same with 4 x 12 tiles */
#define T double
#define VEC(op) avx2_f64_##op
#define GEMM_KERNEL_MR 4
#define GEMM_KERNEL_NV 3
#define GEMM_KERNEL_NAME gemm_f64_avx2
#include "gemm_kernel_tmpl.h"
#define T double
#define VEC(op) avx2_f64_##op
#define GEMM_MADD(s, x, y) __builtin_fma((x), (y), (s))
#define GEMM_SMALL_COPY_T gemm_copy_t_f64
#define GEMM_SMALL_ROWS_WT gemm_rows_wt_f64_avx2
#define GEMM_SMALL_ROWS_WT_MAX 4
#define GEMM_SMALL_COLS 16
#define GEMM_SMALL_ROWS 2
#define GEMM_SMALL_NAME gemm_f64_avx2_small
#include "gemm_small_tmpl.h"

const gemm_microkernel_f32 gemm_microkernel_f32_avx2 = {
    "avx2", 6, 16, 12, 64, 1024, gemm_f32_avx2_kernel, gemm_f32_avx2_small, gemm_copy_t_f32, NULL,
    gemm_f32_avx2_kernel_rows, 4,
};

const gemm_microkernel_f64 gemm_microkernel_f64_avx2 = {
    "avx2", 4, 12, 8, 2048, 504, gemm_f64_avx2_kernel, gemm_f64_avx2_small, gemm_copy_t_f64, NULL,
    gemm_f64_avx2_kernel_rows, 4,
};

MYATT_TARGET_POP()

#endif
