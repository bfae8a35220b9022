/* GEMM internals: the micro-kernel interface that ISA-specific files plug into.
 *
 * gemm.c / gemm_tmpl.h hold the whole BLIS/Goto loop nest (NC, KC, MC blocks,
 * packing of A and B, edge tiles, threads); only the MR x NR micro-kernel below
 * and the direct loop for small products change per CPU.  Adding a CPU =
 * its vector vocabulary (like simd_avx2.h), one file (like gemm_avx2.c) with
 * the kernel and its gemm_microkernel_f32/f64 entries (the kernels come from
 * gemm_kernel_tmpl.h, the direct loop from gemm_small_tmpl.h), one mk_isa
 * value, its detection and target in cpu.c / cpu.h, and one case in
 * gemm_select_f32 / _f64.
 *
 * Micro-kernel contract (T = float or double):
 *
 *   void kernel(int64_t kc, const T *a_panel, const T *b_panel,
 *               T *c, int64_t rs_c, int64_t cs_c, int accumulate);
 *
 *   c[mr, nr] = (accumulate ? c : 0) + a_panel^T @ b_panel, where
 *     a_panel[p * mr + i] = A[i, p]   (kc columns of mr rows, "MR x KC panel")
 *     b_panel[p * nr + j] = B[p, j]   (kc rows of nr columns, "KC x NR panel")
 *   for 0 <= p < kc (kc >= 1), i < mr, j < nr; c[i, j] is c[i * rs_c + j * cs_c].
 *
 *   - Both panels start on a 64-byte boundary and are zero-padded by the packing
 *     routines, so the kernel always computes a full mr x nr tile.
 *   - The kernel always writes a full tile.  For edge tiles the driver passes a
 *     local, 64-byte aligned tile with rs_c = nr, cs_c = 1 and accumulate = 0,
 *     then copies or adds the valid part into c.  Interior tiles get c itself
 *     with the caller's strides (often cs_c == 1; a SIMD kernel may take a fast
 *     path for that and fall back to scalar stores otherwise).
 *   - accumulate == 0: c must not be read (it may hold garbage, even NaN).
 *   - Bias is never the kernel's business: the driver adds it once.
 *   - Summation order: torch's (MKL's, measured: docs/torch-summation-order.md),
 *     one FMA per term everywhere (fmaf / fma in the portable kernels):
 *       float32: k is cut into blocks of KC = gemm_sum_block(k) (k if k <= 192,
 *         floor(k / 2) if k <= 384, else 192); each block is summed from zero in
 *         increasing p, and the driver adds the block sums onto c in increasing
 *         order: c = ((bias or first block) + block 1) + block 2 ...
 *       float64 (GEMM_CHAINS): no summation blocks, one FMA chain per output in
 *         increasing p, starting from the bias or 0: with accumulate the kernel
 *         loads c into its accumulators and continues the chain (the driver's
 *         KC is then a cache block only).
 *     Either way a result does not depend on how c is split into tiles or over
 *     threads, nor on the cache blocking (float64).
 */
#ifndef MYATT_KERNELS_GEMM_INTERNAL_H
#define MYATT_KERNELS_GEMM_INTERNAL_H

#include <stdint.h>

#include "runtime/cpu.h"

/* Whether T's products are one FMA chain continuing from c (float64) rather
 * than block sums added onto c (float32): see the contract above. */
#define GEMM_CHAINS(T) (sizeof(T) == sizeof(double))

/* The float32 summation block for a reduction of length k (>= 1): torch's. */
static inline int64_t gemm_sum_block(int64_t k)
{
    return k <= 192 ? k : k <= 384 ? k / 2 : 192;
}

/* Largest micro-tile any kernel may use (the edge tile lives on the stack). */
#define GEMM_MAX_MR 32
#define GEMM_MAX_NR 64

/* Packed panels start on this boundary (bytes); mk_alloc gives the same. */
#define GEMM_PANEL_ALIGN 64

/* Up to this many multiply-adds (m * n * k) gemm skips packing and runs a
 * direct loop: for 1x64 @ 64x32 the packing and allocation would dominate.
 * (Measured crossover with the portable kernel: 2-4 K.)  The direct loop also
 * takes m < mr when B's rows are contiguous (cs_b == 1), e.g. 1 x 1024 @ 1024
 * x 1024 ran 2.6x faster that way.  Both paths give the same bits with the
 * portable kernel, so the choice is about speed only. */
#define GEMM_SMALL_WORK 2048.0

/* ... and m < mr up to this many multiply-adds when B is a transposed weight
 * (cs_b != 1): packing B and A for one row then runs a full MR-row tile of
 * which one row is kept (the seed's 1 x 96 @ 96 x 32: the direct loop, with
 * its transposing strip copy or, on the SIMD paths, one row transposed in
 * registers, skips both allocations).  One row against a transposed weight
 * (m == 1, rs_b == 1) takes the direct loop at any size: packing would copy the
 * whole weight to use each element once (MultiheadAttention's one token, 1 x 512
 * @ 512 x 1536 float32 on a Zen 3: 395 us packed, 141 us direct), and so do up
 * to the path's rows_wt rows (AVX-512 and AVX2: 4, sharing each block of the
 * weight transposed in registers), and up to twice that many in calls of
 * rows_wt rows where they are more than one MR tile and not a whole number of
 * tiles (gemm_small_rows in gemm_tmpl.h). */
#define GEMM_SMALL_ROWS_WORK 32768.0

/* ... and up to GEMM_DIRECT_ROWS rows against a B with contiguous rows up to
 * GEMM_DIRECT_ROWS_WORK multiply-adds: the SIMD paths' direct loop runs 4 (AVX2:
 * 2) rows side by side against each vector of B, where the packed path's
 * packing and edge tiles dominate (Zen 5, bmm float32 8 x 256 @ 256 x 64 3.9 ->
 * 1.3 us, 16 x 256 @ 256 x 256 15.4 -> 10.3 us; at m = 32 or k = n = 1024 the
 * two were even, beyond them packed panels win). */
#define GEMM_DIRECT_ROWS 16
#define GEMM_DIRECT_ROWS_WORK 4194304.0

/* Most bytes one thread's packed B block may take (see gemm_packed in
 * gemm_tmpl.h).  It lives in L3 while every MC block of rows streams over it;
 * when k is so long that kc x NC does not fit, NC shrinks, so A is read (or
 * packed) again more often (measured at 2048^3 f64: 2 MiB ran 25 % slower than 8 MiB, A
 * then coming from memory 16 times instead of 4). */
#define GEMM_B_PACK_BYTES (8 << 20)

/* A transposed A of at most this many bytes is copied into rows before the
 * product (gemm_run_src): held in the workspace cache (alloc.h), the copy's
 * pages stay mapped from one call to the next. */
#define GEMM_TRANSPOSE_MAX_BYTES (32.0 * 1024 * 1024)

/* Fewest multiply-adds (m * n * k) per thread for gemm to use threads: below
 * about 1 M (2 MFLOP, ~50 us on one core) waking a thread does not pay. */
#define GEMM_THREAD_MIN_WORK (1024.0 * 1024.0)

/* ... where a multiply-add of the direct loop on fewer than MR rows counts this
 * many times (it reads an element of B from L2 or L3 for it). */
#define GEMM_ROWS_THREAD_WEIGHT 8.0

/* gemm_cat: a two-source A of at most this many bytes is copied (concatenated)
 * on the stack when the product takes the direct loop. */
#define GEMM_CAT_STACK_BYTES 4096


typedef void (*gemm_kernel_f32_fn)(int64_t kc, const float *a_panel, const float *b_panel,
                                   float *c, int64_t rs_c, int64_t cs_c, int accumulate);
typedef void (*gemm_kernel_f64_fn)(int64_t kc, const double *a_panel, const double *b_panel,
                                   double *c, int64_t rs_c, int64_t cs_c, int accumulate);

/* The direct (unpacked) loop of a path, for small products:
 *   c[m, n] = (c_holds_value ? c : 0) + a[m, k] @ b[k, n]
 * in the summation order of the contract above (float32: blocks of kc, each
 * summed from zero with FMA and added onto c; float64: one FMA chain from c, kc
 * a blocking size only): the same bits as the packed path of that kernel. */
typedef void (*gemm_small_f32_fn)(float *c, int64_t rs_c, int64_t cs_c,
                                  const float *a, int64_t rs_a, int64_t cs_a,
                                  const float *b, int64_t rs_b, int64_t cs_b,
                                  int64_t m, int64_t n, int64_t k, int64_t kc, int c_holds_value);
typedef void (*gemm_small_f64_fn)(double *c, int64_t rs_c, int64_t cs_c,
                                  const double *a, int64_t rs_a, int64_t cs_a,
                                  const double *b, int64_t rs_b, int64_t cs_b,
                                  int64_t m, int64_t n, int64_t k, int64_t kc, int c_holds_value);

/* An optional transposing copy (gemm_copy_avx.h), for packing a B whose
 * columns are contiguous (rs_b == 1: B = weight^T) into a KC x NR panel, and
 * an A with contiguous rows into an MR x KC panel (NB = mr, cs_b = rs_a):
 *   strip[p * NB + j] = b[p + j * cs_b]  (p < kb, j < nb), 0 for nb <= j < NB.
 * A copy only: it never changes the bits of a result. */
typedef void (*gemm_copy_t_f32_fn)(float *strip, int NB, const float *b, int64_t cs_b,
                                   int64_t kb, int64_t nb);
typedef void (*gemm_copy_t_f64_fn)(double *strip, int NB, const double *b, int64_t cs_b,
                                   int64_t kb, int64_t nb);

/* An optional edge micro-kernel: the same arithmetic as the path's kernel on
 * the same full panels, but only the valid m_r x n_r corner of c is read
 * (accumulate) and written, and only the vectors that hold valid columns are
 * computed.  Called for edge tiles with cs_c == 1 instead of the generic
 * local-tile copy (n = 256 with nr = 48 ran 10 % slower than n = 240). */
typedef void (*gemm_edge_f32_fn)(int64_t kc, const float *a_panel, const float *b_panel,
                                 float *c, int64_t rs_c, int accumulate, int m_r, int n_r);
typedef void (*gemm_edge_f64_fn)(int64_t kc, const double *a_panel, const double *b_panel,
                                 double *c, int64_t rs_c, int accumulate, int m_r, int n_r);

/* An optional micro-kernel that reads A in place instead of from a packed
 * panel: the same arithmetic as the path's kernel (so the same bits), with
 *   A[i, p] = a1[i * rs_a1 + p]          for p < k1   (0 <= k1 <= kc)
 *   A[i, p] = a2[i * rs_a2 + (p - k1)]   for p >= k1
 * (rows of one or two sources with contiguous columns, any row strides: a
 * KC block of gemm_cat's [q | k] may straddle the two) and otherwise kernel's
 * contract.  The driver calls it for full tiles, whose A block is then never
 * packed: packing cost each NC block and each thread a full read and write of
 * A (4 % of 1024 x 2048 @ 2048 x 1024 on one thread; on two, each thread
 * packed all of A for its band of columns). */
typedef void (*gemm_kernel_rows_f32_fn)(int64_t kc, const float *a1, int64_t rs_a1, int64_t k1,
                                        const float *a2, int64_t rs_a2, const float *b_panel,
                                        float *c, int64_t rs_c, int64_t cs_c, int accumulate);
typedef void (*gemm_kernel_rows_f64_fn)(int64_t kc, const double *a1, int64_t rs_a1, int64_t k1,
                                        const double *a2, int64_t rs_a2, const double *b_panel,
                                        double *c, int64_t rs_c, int64_t cs_c, int accumulate);

/* One micro-kernel and the cache blocking that suits it.
 * Invariants: 1 <= mr <= GEMM_MAX_MR, 1 <= nr <= GEMM_MAX_NR,
 * mc % mr == 0, nc % nr == 0, kc >= 1. */
typedef struct {
    const char *name;          /* "portable", "avx2", "avx512": for tests and repr */
    int mr, nr;                /* micro-tile: mr rows of A by nr columns of B */
    int64_t mc, kc, nc;        /* block sizes: A block mc x kc, B block kc x nc;
                                * float32 sums in blocks of gemm_sum_block(k) instead of kc
                                * (the SIMD paths' choices: gemm_avx512.c, gemm_avx2.c) */
    gemm_kernel_f32_fn kernel;
    gemm_small_f32_fn small;   /* the direct loop with the same arithmetic */
    gemm_copy_t_f32_fn copy_t; /* packs A and B = weight^T panels faster, or NULL */
    gemm_edge_f32_fn edge;     /* edge tiles in place (cs_c == 1), or NULL */
    gemm_kernel_rows_f32_fn kernel_rows;   /* full tiles with A read in place, or NULL */
    int rows_wt;               /* up to this many rows against B = weight^T (rs_b == 1)
                                * take the direct loop at any size, which shares each
                                * block of B transposed in registers among them
                                * (GEMM_SMALL_ROWS_WT; more rows: gemm_use_direct);
                                * 0: only one row does */
} gemm_microkernel_f32;

typedef struct {
    const char *name;
    int mr, nr;
    int64_t mc, kc, nc;
    gemm_kernel_f64_fn kernel;
    gemm_small_f64_fn small;
    gemm_copy_t_f64_fn copy_t;
    gemm_edge_f64_fn edge;
    gemm_kernel_rows_f64_fn kernel_rows;
    int rows_wt;
} gemm_microkernel_f64;

/* The SIMD paths, each defined in its own file (gemm_avx2.c, gemm_avx512.c)
 * that is compiled for its ISA (MYATT_TARGET_PUSH, cpu.h).  Only x86. */
#ifdef MYATT_X86
extern const gemm_microkernel_f32 gemm_microkernel_f32_avx2, gemm_microkernel_f32_avx512;
extern const gemm_microkernel_f64 gemm_microkernel_f64_avx2, gemm_microkernel_f64_avx512;
#endif

/* The micro-kernel gemm_f32 / gemm_f64 use: the entry of the path cpu.h chose
 * (mk_cpu_isa: detection + MYATT_KERNEL).  Never NULL. */
const gemm_microkernel_f32 *gemm_select_f32(void);
const gemm_microkernel_f64 *gemm_select_f64(void);

/* gemm_f32 / gemm_f64 with an explicit micro-kernel, so that tests can run and
 * compare every path.  Same contract as gemm.h. */
int gemm_run_f32(const gemm_microkernel_f32 *uk,
                 float *c, int64_t rs_c, int64_t cs_c,
                 const float *a, int64_t rs_a, int64_t cs_a,
                 const float *b, int64_t rs_b, int64_t cs_b,
                 const float *bias,
                 int64_t m, int64_t n, int64_t k, int accumulate);
int gemm_run_f64(const gemm_microkernel_f64 *uk,
                 double *c, int64_t rs_c, int64_t cs_c,
                 const double *a, int64_t rs_a, int64_t cs_a,
                 const double *b, int64_t rs_b, int64_t cs_b,
                 const double *bias,
                 int64_t m, int64_t n, int64_t k, int accumulate);

#endif
