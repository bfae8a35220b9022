"""The GEMM under linear and bmm: every kernel path, blocking edges, layouts, threads, fork.

The GEMM has three instruction-set paths (myatt.kernel_path(): "portable", "avx2",
"avx512"), chosen once per process from the CPU and the environment variable
MYATT_KERNEL. This file tests the path of the running process (CI runs the whole
suite once per path) and, through subprocesses, every path this CPU supports.

Sizes are chosen around every kernel's blocking: micro-tiles MR x NR (float32 /
float64) of 4 x 8 / 4 x 4 (portable), 6 x 16 / 4 x 12 (avx2), 6 x 64 / 8 x 24 (avx512),
KC = the float32 summation block (k, k // 2 or 192) and 64 / 2048 (float64 portable / SIMD),
MC = 6 .. 256, NC = 504 .. 4096 (n cut into equal blocks of at most NC), and the small
direct loop (m * n * k <= 2048; m < MR, or m <= 16 and m * n * k <= 4 M, with contiguous
rows of B; one row, and on the SIMD paths up to 4, against B = weight^T at any size). The
SIMD paths read A in place where its rows have contiguous columns (the C-ordered operands
here) and pack it where they do not or a tile is an edge tile, so a test with edge tiles runs
both. Operands are scaled as nn.Linear initialises a weight, so products stay unit-scale and default assert_close
tolerances apply (see test_long_reductions.py for unit-scale long sums).
"""
import json
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from helpers import data, scaled
from oracle import assert_matches, run, torch_myatt

PATHS = ["portable", "avx2", "avx512"]

# m, n, k values one below, at and one above each kernel's MR, NR, KC, MC boundary.
M_EDGES = [1, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 23, 24, 25, 63, 64, 65, 119, 120, 121, 239, 240, 241,
           257]
N_EDGES = [1, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49, 63, 64, 65,
           95, 96, 97, 127, 128, 129]
K_EDGES = [1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 200, 383, 384, 385, 386, 769, 2047, 2048,
           2049, 4097]


@pytest.fixture
def threads():
    """Restore myatt's thread count after a test that changes it."""
    saved = myatt.get_num_threads()
    yield
    myatt.set_num_threads(saved)


def operands(rng, m, n, k, dtype):
    """a [m, k] and b [k, n], scaled so a @ b is unit-scale."""
    return scaled(rng, (m, k), dtype, k), data(rng, (k, n), dtype)


def check_bmm(a, b):
    expected = torch.bmm(torch.from_numpy(np.ascontiguousarray(a))[None],
                         torch.from_numpy(np.ascontiguousarray(b))[None])
    assert_matches(myatt.bmm(a[None], b[None]), expected)


def check_linear(x, w, bias=None):
    expected = F.linear(torch.from_numpy(np.ascontiguousarray(x)),
                        torch.from_numpy(np.ascontiguousarray(w)),
                        None if bias is None else torch.from_numpy(bias))
    assert_matches(myatt.linear(x, w, bias), expected)


def test_kernel_path_is_a_known_name():
    path = myatt.kernel_path()
    assert path in PATHS
    requested = os.environ.get("MYATT_KERNEL")
    if requested in PATHS and requested != path:
        # only a fallback to a lower path, for a CPU that cannot run the request
        assert PATHS.index(path) < PATHS.index(requested)


# --------------------------------------------------------------------------- #
# Blocking edges, on this process's path
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("m", M_EDGES)
def test_edges_m(rng, dtype, m):
    a, b = operands(rng, m, 37, 70, dtype)
    check_bmm(a, b)
    check_linear(a, np.ascontiguousarray(b.T))


@pytest.mark.parametrize("n", N_EDGES)
def test_edges_n(rng, dtype, n):
    a, b = operands(rng, 26, n, 70, dtype)
    check_bmm(a, b)
    check_linear(a, np.ascontiguousarray(b.T), rng.standard_normal(n).astype(dtype))


@pytest.mark.parametrize("k", K_EDGES)
def test_edges_k(rng, dtype, k):
    a, b = operands(rng, 25, 35, k, dtype)
    check_bmm(a, b)
    check_linear(a, np.ascontiguousarray(b.T))


@pytest.mark.parametrize("m,n,k", [(13, 33, 65), (12, 32, 64), (121, 97, 129), (257, 65, 63),
                                   (5, 4100, 65), (3, 2050, 130), (241, 17, 300),
                                   (9, 481, 65), (17, 505, 64), (250, 1010, 70), (7, 1025, 64),
                                   (9, 1057, 65), (13, 2113, 40), (6, 1024, 65), (12, 1023, 193)])
def test_edges_combined(rng, dtype, m, n, k):
    a, b = operands(rng, m, n, k, dtype)
    check_bmm(a, b)
    check_linear(a, np.ascontiguousarray(b.T))


@pytest.mark.parametrize("m,n,k", [(20, 200, 5000), (8, 300, 9000), (9, 400, 12000)])
def test_k_cut_into_super_blocks(rng, dtype, m, n, k):
    """k so long that the packed B block (bounded in size) covers only part of it: fewer
    columns (NC) at once, and at k = 12000 also only part of k (super-blocks, SIMD paths)."""
    a, b = operands(rng, m, n, k, dtype)
    check_bmm(a, b)


@pytest.mark.parametrize("m,n,k", [(0, 5, 7), (5, 0, 7), (5, 7, 0), (0, 0, 0), (40, 50, 0)])
def test_zero_sizes(dtype, m, n, k):
    a = np.ones((m, k), dtype)
    b = np.ones((k, n), dtype)
    check_bmm(a, b)
    check_linear(a, np.ascontiguousarray(b.T), np.arange(n, dtype=dtype))


@pytest.mark.parametrize("m,n,k", [(1, 32, 64), (2, 16, 64), (1, 200, 300), (3, 1000, 64),
                                   (1, 7, 9), (2, 13, 70), (1, 31, 66), (3, 9, 75), (1, 17, 120),
                                   (1, 1, 2048), (4, 33, 15), (1, 64, 32), (1, 70, 29)])
def test_small_direct_loop(rng, dtype, m, n, k):
    """The seed's shape (1 x 64 @ 64 x 32) and the other products that skip packing."""
    x = scaled(rng, (m, k), dtype, k)
    w = scaled(rng, (n, k), dtype, k)
    bias = scaled(rng, (n,), dtype, k)
    check_linear(x, w, bias)
    check_bmm(x, np.ascontiguousarray(w.T))


def test_rows_do_not_depend_on_their_neighbours(rng, dtype):
    """Row i of a @ b has the same bits whether computed alone (the direct loop)
    or among 100 rows (packed panels): both paths sum in the same order."""
    a, b = operands(rng, 100, 48, 150, dtype)
    whole = myatt.bmm(a[None], b[None])[0]
    for i in [0, 1, 11, 12, 13, 57, 99]:
        alone = myatt.bmm(a[None, i:i + 1], b[None])[0]
        np.testing.assert_array_equal(alone[0], whole[i])


@pytest.mark.parametrize("k", [48, 1000])
def test_few_rows_equal_their_rows_among_many(rng, dtype, k):
    """Up to 16 rows against a B with contiguous rows (m * n * k up to 4 M) take the direct
    loop: 4 rows side by side on AVX-512 (2 on AVX2), the rows left over one at a time, in
    whole strips of columns and a last narrow one (n = 150); 100 rows take the packed
    panels. Each block of rows equals its rows among the 100, with a bias and without (the
    bias first in c: float64's chains continue from it, float32's block sums go onto it),
    k = 1000 in several float32 summation blocks."""
    a, b = operands(rng, 100, 150, k, dtype)
    bias = scaled(rng, (150,), dtype, k)
    w = b.T   # a weight whose transpose, b, has contiguous rows
    whole = myatt.bmm(a[None], b[None])[0]
    whole_lin = myatt.linear(a, w, bias)
    for i, m in [(0, 2), (5, 3), (10, 4), (20, 5), (30, 7), (50, 13), (80, 16)]:
        np.testing.assert_array_equal(myatt.bmm(a[None, i:i + m], b[None])[0], whole[i:i + m])
        np.testing.assert_array_equal(myatt.linear(a[i:i + m], w, bias), whole_lin[i:i + m])
    check_bmm(a[:7], b)
    check_linear(a[:13], w, bias)


@pytest.mark.parametrize("n,k", [(32, 64), (30, 60), (17, 120), (9, 200), (64, 31), (70, 29),
                                 (37, 33), (1, 3), (4, 1), (100, 5), (16, 1000), (33, 400),
                                 (24, 7), (40, 193), (26, 66)])
def test_linear_rows_do_not_depend_on_their_neighbours(rng, dtype, n, k):
    """The same for linear (B = weight^T, read through swapped strides): one row
    alone takes the direct loop (on the SIMD paths the weight transposed in
    registers, 32 columns at a time (AVX-512: float32 two groups of 16, then one;
    float64 four groups of 8, then one, 8 terms a step, then the last 1-7 terms one
    at a time), then groups of 8 (float32) or 4 (float64), then single columns;
    float32 in its summation blocks, k = 1000, 400 and 193 cut into several), 50
    rows the packed panels."""
    x = scaled(rng, (50, k), dtype, k)
    w = scaled(rng, (n, k), dtype, k)
    bias = scaled(rng, (n,), dtype, k)
    whole = myatt.linear(x, w, bias)
    x_f = np.asfortranarray(x)   # its rows are strided
    for i in [0, 3, 12, 49]:
        np.testing.assert_array_equal(myatt.linear(x[i], w, bias), whole[i])
        np.testing.assert_array_equal(myatt.linear(x_f[i], w, bias), whole[i])
        np.testing.assert_array_equal(myatt.linear(x[i], w), myatt.linear(x[i:i + 1], w)[0])
    check_linear(x[:1], w, bias)


@pytest.mark.parametrize("n,k,width", [(33, 64, 64), (100, 300, 300), (40, 500, 512),
                                       (72, 1000, 1024), (9, 130, 256), (1030, 5, 5),
                                       (50, 256, 256)])
def test_few_rows_against_weight_equal_their_rows_among_many(rng, dtype, n, k, width):
    """2-4 rows against a C-ordered weight (B = weight^T) take the direct loop at any size on
    the SIMD paths, each block of the weight (AVX-512: 16 x 16 float32, 8 x 8 float64; AVX2:
    8 x 4, 4 x 2) transposed in registers once for all of them, on AVX-512 the columns past
    the last whole group by the AVX2 loop (AVX2 float32 below 32 K multiply-adds: the strip
    copy, n = 33); so do 5-8 rows, 4 at a time, where they are more than one tile of the
    packed path and not a whole number of them (float32: 7 and 8; AVX2 float64: 5-7); the
    others the packed panels, as every size on the portable path.
    Weight rows 1-4 KiB apart (width 256, 512, 1024: fewer of them at once, on AVX-512 shared
    even where they fall in one set of L1), float32 k in several summation blocks (300, 500,
    1000), an input with strided rows. Each block of rows equals its rows among 50, with bias
    and without, and torch."""
    x = scaled(rng, (50, k), dtype, k)
    w = scaled(rng, (n, width), dtype, k)[:, :k]
    bias = scaled(rng, (n,), dtype, k)
    whole = myatt.linear(x, w, bias)
    whole_nb = myatt.linear(x, w)
    x_f = np.asfortranarray(x)
    for i, m in [(0, 2), (7, 3), (20, 4), (45, 5), (10, 6), (30, 7), (40, 8)]:
        np.testing.assert_array_equal(myatt.linear(x[i:i + m], w, bias), whole[i:i + m])
        np.testing.assert_array_equal(myatt.linear(x_f[i:i + m], w, bias), whole[i:i + m])
        np.testing.assert_array_equal(myatt.linear(x[i:i + m], w), whole_nb[i:i + m])
    check_linear(x[:3], w, bias)
    check_linear(x[:7], w, bias)


@pytest.mark.parametrize("n,k,width", [(33, 512, 512), (40, 500, 512), (56, 256, 512),
                                       (100, 121, 512), (9, 64, 512), (72, 1000, 1024),
                                       (48, 256, 256), (40, 120, 128)])
def test_linear_row_against_weight_rows_1kib_apart(rng, dtype, n, k, width):
    """Weight rows a multiple of 1 KiB apart, where the one-row direct loop takes a cache
    line of each row per visit of a group (gemm_row_avx.h), and takes fewer rows at once
    where they share sets of L1 (gemm_rows_fit_l1_sets): the first k columns of an
    [n, width] weight (width 512: rows 2 KiB apart in float32, 4 KiB in float64; 1024:
    float32's rows in one set: AVX2 takes 8 at a time, AVX-512 16, whole lines), so that the
    blocks end in steps of 4 (2) terms and single terms (k = 500, 121), with every tail of
    column groups.  One row alone equals its row of the packed path, and torch."""
    x = scaled(rng, (50, k), dtype, k)
    w = scaled(rng, (n, width), dtype, k)[:, :k]
    bias = scaled(rng, (n,), dtype, k)
    whole = myatt.linear(x, w, bias)
    for i in [0, 7, 49]:
        np.testing.assert_array_equal(myatt.linear(x[i], w, bias), whole[i])
        np.testing.assert_array_equal(myatt.linear(x[i], w), myatt.linear(x[i:i + 1], w)[0])
    check_linear(x[:1], w, bias)


@pytest.mark.parametrize("offset", range(16))
@pytest.mark.parametrize("k,width", [(5, 1024), (20, 1024), (193, 256), (1000, 1024)])
def test_few_rows_against_weight_at_every_alignment(rng, dtype, offset, k, width):
    """Weight rows a multiple of 64 bytes apart all start at the same place in a cache line:
    `offset` elements past it (NumPy gives 16-byte aligned data).  With rows 4 KiB apart
    (float32, width 1024) AVX-512 moves its 16-term windows onto the lines, with a part-window
    under a mask at each end of every summation block (k = 5 and 20: a block shorter than the
    first part; 1000: several blocks); 1 KiB apart (width 256, k = 193 in two blocks) it keeps
    them in place, a part-window at each block's end.  The terms keep their order: 1-4 rows
    equal their rows among 50, and torch."""
    n, itemsize = 40, np.dtype(dtype).itemsize
    buf = np.empty(n * width + 64 // itemsize + offset, dtype)
    start = (-buf.ctypes.data % 64) // itemsize + offset
    w = buf[start:start + n * width].reshape(n, width)[:, :k]
    w[...] = scaled(rng, (n, k), dtype, k)
    assert w.ctypes.data % 64 == offset * itemsize % 64
    x = scaled(rng, (50, k), dtype, k)
    bias = scaled(rng, (n,), dtype, k)
    whole = myatt.linear(x, w, bias)
    for i, m in [(0, 1), (5, 2), (10, 3), (20, 4)]:
        np.testing.assert_array_equal(myatt.linear(x[i:i + m], w, bias), whole[i:i + m])
    check_linear(x[:2], w, bias)


@pytest.mark.parametrize("n,k", [(64, 32), (96, 32), (128, 64), (100, 300), (72, 40),
                                 (200, 1000), (256, 7), (160, 513), (48, 9)])
def test_one_row_against_few_strips_of_b(rng, dtype, n, k):
    """One row against a B with contiguous rows up to GEMM_SMALL_ROWS strips of the direct
    loop wide (AVX-512: float64 2-4 strips of 32 columns, float32 of 64; AVX2: 2): all its
    strips side by side in one pass over k (float32 in its summation blocks: k = 1000 and
    513 take several), the columns past the last whole strip after them (n = 100, 72, 200,
    160). The row equals its row among 50 (packed panels), with bias and without, and torch."""
    x = scaled(rng, (50, k), dtype, k)
    wt = scaled(rng, (k, n), dtype, k)   # weight^T, C-contiguous
    bias = scaled(rng, (n,), dtype, k)
    whole = myatt.linear(x, wt.T, bias)
    whole_bmm = myatt.bmm(x[None], wt[None])[0]
    for i in [0, 17, 49]:
        np.testing.assert_array_equal(myatt.linear(x[i], wt.T, bias), whole[i])
        np.testing.assert_array_equal(myatt.bmm(x[None, i:i + 1], wt[None])[0, 0], whole_bmm[i])
    check_linear(x[:1], wt.T, bias)
    check_bmm(x[:1], wt)


@pytest.mark.parametrize("n,k", [(129, 64), (150, 200), (200, 385), (1536, 512), (2100, 300),
                                 (4500, 7), (257, 1000), (333, 3), (1030, 5)])
def test_one_row_against_rows_of_b(rng, dtype, n, k):
    """One row against a B whose rows are contiguous and longer than GEMM_SMALL_ROWS strips
    of the direct loop (a weight stored transposed, as MultiheadAttention's in-projections, or
    bmm's mat2): on the SIMD paths B's rows stream through sums held in a buffer, 8 KiB of
    columns at a time (n = 2100 and 4500 take several), four rows per sweep (k = 7, 5, 3:
    the last rows one at a time), the columns past the last whole vector one chain each.
    The row equals its row among 50 (packed panels), with bias and without, and torch."""
    x = scaled(rng, (50, k), dtype, k)
    wt = scaled(rng, (k, n), dtype, k)   # weight^T, C-contiguous
    w = wt.T
    bias = scaled(rng, (n,), dtype, k)
    whole = myatt.linear(x, w, bias)
    whole_bmm = myatt.bmm(x[None], wt[None])[0]
    for i in [0, 17, 49]:
        np.testing.assert_array_equal(myatt.linear(x[i], w, bias), whole[i])
        np.testing.assert_array_equal(myatt.bmm(x[None, i:i + 1], wt[None])[0, 0], whole_bmm[i])
    check_linear(x[:1], w, bias)
    check_bmm(x[:1], wt)


# --------------------------------------------------------------------------- #
# Layouts: strides reach the GEMM as they are (packing absorbs them)
# --------------------------------------------------------------------------- #
LAYOUTS = {
    "c": lambda a: a,
    "fortran": np.asfortranarray,
    "every_other_col": lambda a: np.repeat(a, 2, axis=1)[:, ::2],
    "every_other_row": lambda a: np.repeat(a, 2, axis=0)[::2],
    "negative": lambda a: a[::-1, ::-1].copy()[::-1, ::-1],
    "transposed_view": lambda a: np.ascontiguousarray(a.T).T,
}


@pytest.mark.parametrize("layout_a", list(LAYOUTS))
@pytest.mark.parametrize("layout_b", list(LAYOUTS))
@pytest.mark.parametrize("m,n,k", [(3, 20, 30), (70, 45, 130)])
def test_strided_operands(rng, dtype, layout_a, layout_b, m, n, k):
    a, b = operands(rng, m, n, k, dtype)
    la, lb = LAYOUTS[layout_a](a), LAYOUTS[layout_b](b)
    assert np.array_equal(la, a) and np.array_equal(lb, b)
    expected = myatt.bmm(a[None], b[None])
    got = myatt.bmm(la[None], lb[None])
    np.testing.assert_array_equal(got, expected)   # same arithmetic, whatever the strides
    check_bmm(la, lb)
    check_linear(la, LAYOUTS[layout_b](np.ascontiguousarray(b.T)))


@pytest.mark.parametrize("layout_q", ["c", "fortran", "every_other_row", "every_other_col"])
@pytest.mark.parametrize("layout_k", ["c", "fortran", "every_other_row"])
def test_two_source_operand_layouts(rng, dtype, layout_q, layout_k):
    """MyAtt's [Q | K] @ W^T and [Q | applied] @ W^T take A from two sources, and a
    KC block may straddle the seam (here at column 100 of k = 250, float32 blocks
    of 125, and of k = 150, one block): each source read in place when its rows
    are contiguous, else packed, each alone."""
    sizes = (100, 150, 130, 50, 70)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    S = 40
    Q = scaled(rng, (S, sizes[0]), dtype, 250)
    K = scaled(rng, (S, sizes[1]), dtype, 250)
    V = data(rng, (sizes[2], sizes[3]), dtype)
    expected = m(Q[None], K[None], V[None])
    lq, lk = LAYOUTS[layout_q](Q), LAYOUTS[layout_k](K)
    got = m(lq[None], lk[None], V[None])
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)   # the same arithmetic, whatever the layouts
    module = torch_myatt(m)
    t_out, t_attn = run(module, lq[None], lk[None], V[None], dtype=dtype)
    assert_matches(got[0], t_out)
    assert_matches(got[1], t_attn)


# --------------------------------------------------------------------------- #
# NaN and infinity
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("m,n,k", [(1, 32, 64), (30, 40, 70), (130, 70, 150)])
def test_nan_and_inf_propagate(rng, dtype, m, n, k):
    a, b = operands(rng, m, n, k, dtype)
    b = np.where(np.abs(b) < 1e-3, 0.5, b).astype(dtype)   # no zero for inf to meet
    a[0, k // 2] = np.nan                                  # row 0: NaN
    if m > 2:
        a[2, 1] = np.inf                                   # row 2: +-inf by the sign of b[1]
    b[k - 1, n - 1] = np.nan                               # last column: NaN
    expected = torch.from_numpy(a) @ torch.from_numpy(b)
    got = myatt.bmm(a[None], b[None])[0]
    assert_matches(got, expected, equal_nan=True)
    assert np.isnan(got[0]).all() and np.isnan(got[:, n - 1]).all()
    if m > 2:
        assert np.isinf(got[2, :n - 1]).all()


# --------------------------------------------------------------------------- #
# Threads
# --------------------------------------------------------------------------- #
THREAD_SHAPES = [(300, 500, 129), (1000, 40, 64), (40, 1000, 65), (97, 131, 700), (13, 2050, 70),
                 (3, 5000, 300), (1, 3000, 300)]   # the last two: the direct loop, in bands
                                                   # of columns


@pytest.mark.parametrize("m,n,k", THREAD_SHAPES)
def test_identical_for_any_thread_count(rng, dtype, threads, m, n, k):
    """The same bits for any thread count, also with A transposed (columns contiguous),
    which the threads first turn into rows together, in bands of 64 rows."""
    a, b = operands(rng, m, n, k, dtype)
    w = np.ascontiguousarray(b.T)
    a_t = np.asfortranarray(a)
    results = []
    for t in [1, 2, 3, 5]:
        myatt.set_num_threads(t)
        results.append((myatt.bmm(a[None], b[None]), myatt.linear(a, w),
                        myatt.bmm(a_t[None], b[None])))
    for bmm_t, linear_t, bmm_a_t in results:
        np.testing.assert_array_equal(bmm_t, results[0][0])
        np.testing.assert_array_equal(linear_t, results[0][1])
        np.testing.assert_array_equal(bmm_a_t, results[0][0])
    check_bmm(a, b)


def test_concurrent_calls_from_python_threads(rng, threads):
    """Many Python threads in the kernels at once (the GIL is released around
    them): the pool serves one caller at a time, the others compute alone."""
    myatt.set_num_threads(2)
    cases = [operands(rng, m, n, k, np.float32 if i % 2 else np.float64)
             for i, (m, n, k) in enumerate(THREAD_SHAPES * 2)]
    expected = [myatt.bmm(a[None], b[None]) for a, b in cases]
    errors = []

    def work(idx):
        try:
            for _ in range(3):
                for j in range(len(cases)):
                    a, b = cases[(idx + j) % len(cases)]
                    got = myatt.bmm(a[None], b[None])
                    if not np.array_equal(got, expected[(idx + j) % len(cases)]):
                        errors.append(f"thread {idx}, case {(idx + j) % len(cases)}")
        except BaseException as e:   # pragma: no cover - reported below
            errors.append(repr(e))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    assert not any(w.is_alive() for w in workers), "a thread hung"
    assert errors == []


def test_forked_child_computes_correctly(rng, threads):
    """After the parent ran the pool, a forked child (whose copy of the pool has
    no threads) re-creates it and gets the same bits, without hanging."""
    myatt.set_num_threads(2)
    a, b = operands(rng, 300, 400, 200, np.float32)
    expected = myatt.bmm(a[None], b[None])   # parent: the pool is up
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # "multi-threaded, fork()"
        pid = os.fork()
    if pid == 0:   # the child: never return into pytest
        code = 1
        try:
            ok = all(np.array_equal(myatt.bmm(a[None], b[None]), expected) for _ in range(3))
            myatt.set_num_threads(1)
            ok = ok and np.array_equal(myatt.bmm(a[None], b[None]), expected)
            code = 0 if ok else 2
        finally:
            os._exit(code)
    import time
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
    np.testing.assert_array_equal(myatt.bmm(a[None], b[None]), expected)   # parent still fine


# --------------------------------------------------------------------------- #
# Every path this CPU supports, each in its own process
# --------------------------------------------------------------------------- #
CHILD = r"""
import json, sys, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import myatt
out = {"path": myatt.kernel_path(), "warnings": [str(w.message) for w in caught]}
rng = np.random.default_rng(7)
arrays = {}
for dt in ("float32", "float64"):
    for m, n, k in [(1, 32, 64), (13, 33, 65), (130, 70, 150), (300, 500, 129), (1, 1100, 400)]:
        a = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        bias = rng.standard_normal(n).astype(dt)
        for t in (1, 2):
            myatt.set_num_threads(t)
            arrays[f"{dt}_{m}_{n}_{k}_a"] = a
            arrays[f"{dt}_{m}_{n}_{k}_b"] = b
            arrays[f"{dt}_{m}_{n}_{k}_bias"] = bias
            arrays[f"{dt}_{m}_{n}_{k}_bmm_t{t}"] = myatt.bmm(a[None], b[None])[0]
            arrays[f"{dt}_{m}_{n}_{k}_linear_t{t}"] = myatt.linear(a, np.ascontiguousarray(b.T), bias)
np.savez(sys.argv[1], **arrays)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def per_path(tmp_path_factory):
    """{requested path: (reported path, warnings, arrays)} from one subprocess each."""
    results = {}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in PATHS:
        npz = tmp_path_factory.mktemp("paths") / f"{path}.npz"
        env = dict(os.environ, MYATT_KERNEL=path)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [os.getcwd(), root, env.get("PYTHONPATH", "")] if p)
        proc = subprocess.run([sys.executable, "-c", CHILD, str(npz)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        with np.load(npz) as f:
            results[path] = (info["path"], info["warnings"], dict(f))
    return results


@pytest.mark.parametrize("path", PATHS)
def test_each_path_matches_torch(per_path, path):
    reported, warned, arrays = per_path[path]
    if reported != path:
        # A CPU without this path falls back to the best it has, and says so.
        assert PATHS.index(reported) < PATHS.index(path)
        assert any("MYATT_KERNEL=" + path in w for w in warned), warned
        assert reported == per_path["avx512"][0]   # the best this CPU has
    else:
        assert warned == []
    for key in [k for k in arrays if k.endswith("_bmm_t1")]:
        stem = key[:-len("_bmm_t1")]
        a = torch.from_numpy(arrays[stem + "_a"])
        b = torch.from_numpy(arrays[stem + "_b"])
        bias = torch.from_numpy(arrays[stem + "_bias"])
        for t in (1, 2):
            assert_matches(arrays[f"{stem}_bmm_t{t}"], a @ b)
            assert_matches(arrays[f"{stem}_linear_t{t}"], F.linear(a, b.T.contiguous(), bias))
            np.testing.assert_array_equal(arrays[f"{stem}_bmm_t{t}"], arrays[f"{stem}_bmm_t1"])


def test_all_paths_give_the_same_bits(per_path):
    """Every path does the same arithmetic (FMA in torch's summation order: fmaf /
    fma in the portable one), so they agree bit for bit.  (On a CPU without a SIMD
    path, its request falls back to another path: trivially equal.)"""
    _, _, portable = per_path["portable"]
    _, _, avx2 = per_path["avx2"]
    _, _, avx512 = per_path["avx512"]
    for key in avx2:
        np.testing.assert_array_equal(avx2[key], avx512[key], err_msg=key)
        np.testing.assert_array_equal(portable[key], avx512[key], err_msg=key)


def test_unknown_path_name_falls_back_with_a_warning():
    env = dict(os.environ, MYATT_KERNEL="sse9")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), root, env.get("PYTHONPATH", "")] if p)
    code = ("import warnings\nwith warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n    import myatt\n"
            "print(myatt.kernel_path()); print([str(x.message) for x in w])")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path, warned = proc.stdout.strip().splitlines()
    assert path in PATHS and "MYATT_KERNEL=sse9" in warned
