"""softmax on long slices, every vector-tail length, special values and underflow.

Run in-process on the default path (the best the CPU runs), and again by
test_softmax_paths.py once per path (MYATT_KERNEL=portable|avx2|avx512), so
every path meets torch at default tolerances on the same cases.
"""
import os

import numpy as np
import pytest
import torch

import myatt
import reference
from helpers import cpu_flags
from oracle import assert_matches, to_torch

# every softmax test depends on the kernel path
pytestmark = pytest.mark.kernel_path

PATHS = ("portable", "avx2", "avx512")
CPU_FLAG = {"avx2": "avx2", "avx512": "avx512f"}


def test_requested_path_in_use():
    """MYATT_KERNEL picks the float32 path whenever the CPU can run it."""
    kernel = myatt.kernel_path()
    assert kernel in PATHS
    want = os.environ.get("MYATT_KERNEL")
    if want in PATHS and (want == "portable" or CPU_FLAG[want] in cpu_flags()):
        assert kernel == want


def softmax_both(x, dim, dtype):
    out = myatt.softmax(x, dim)
    assert out.dtype == dtype and out.shape == x.shape
    return out, torch.softmax(to_torch(x, dtype), dim)


@pytest.mark.parametrize("shape,dim", [((3, 100000), -1), ((1, 100003), -1), ((100000, 3), 0),
                                       ((2, 100000, 17), 1), ((100001, 40), 0)], ids=str)
def test_long_slices(rng, dtype, shape, dim):
    """10^5-long slices of unit-scale logits.  (With larger logits one element of a
    slice carries a large share of the sum, and torch's float32 strided-axis sum,
    a plain sequential one, is then off by ~1e-4 relative: beyond assert_close.
    The second check holds every path to an extended-precision result instead.)"""
    x = rng.standard_normal(shape).astype(dtype)
    out, expected = softmax_both(x, dim, dtype)
    assert_matches(out, expected)
    np.testing.assert_allclose(out.sum(axis=dim, dtype=np.float64), 1.0, rtol=1e-5)
    x3 = (3.0 * x).astype(dtype)
    # the reference in extended precision (x86: 64-bit mantissa), pairwise sums
    xl = x3.astype(np.longdouble)
    el = np.exp(xl - xl.max(axis=dim, keepdims=True))
    exact = el / el.sum(axis=dim, keepdims=True)

    def rel_error(y):
        return (np.abs(np.asarray(y).astype(np.longdouble) - exact) / exact).max()

    rel = rel_error(myatt.softmax(x3, dim))
    if dim == -1:
        # the last axis is torch's kernel, bit for bit (test_softmax_paths.py), so
        # its error is torch's own: the spec's bar for long reductions
        assert rel <= rel_error(torch.softmax(to_torch(x3, dtype), dim))
        return
    # other axes sum in double: float32: x - max rounds by up to ulp(max)/2 (|max| ~
    # 13: ~4 eps relative after exp), exp adds <= 1 ulp, the sum and the product by
    # 1/sum about 1 each.  float64 sums 10^5 terms in float64 (measured: ~20 eps):
    # held to 1e-12, still 10^5 times tighter than assert_close's rtol.
    bound = 16 * np.finfo(np.float32).eps if dtype == np.float32 else 1e-12
    assert rel <= bound


def test_every_tail_length_last_axis(rng, dtype):
    """Rows of every length 1..100: full vectors, 4-vector blocks and masked tails."""
    for n in range(1, 101):
        x = (4.0 * rng.standard_normal((3, n))).astype(dtype)
        out, expected = softmax_both(x, -1, dtype)
        assert_matches(out, expected)


def test_every_tail_length_middle_axis(rng, dtype):
    """inner of every width 2..100: 4-vector chunks, single vectors and masked tails."""
    for inner in range(2, 101):
        x = (4.0 * rng.standard_normal((2, 7, inner))).astype(dtype)
        out, expected = softmax_both(x, 1, dtype)
        assert_matches(out, expected)


def test_narrow_planes(rng, dtype):
    """1 < inner < vector width: the plane is read flat (the column pattern repeats every
    `inner` vectors); slice lengths from 1 to past one summation block."""
    for inner in range(2, 17):
        for n in (1, 2, 5, 333, 2000):
            x = (4.0 * rng.standard_normal((2, n, inner))).astype(dtype)
            out, expected = softmax_both(x, 1, dtype)
            assert_matches(out, expected)


SPECIALS = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}


@pytest.mark.parametrize("n", [5, 37, 100, 1100])
@pytest.mark.parametrize("kind", ["nan", "inf", "-inf", "all-inf", "all-nan", "inf-and-nan"])
@pytest.mark.parametrize("dim", [-1, 0])
def test_special_values_at_every_position_kind(rng, dtype, n, kind, dim):
    """Special values in the vector body and in the tail, along either axis."""
    x = rng.standard_normal((n, 6) if dim == 0 else (6, n)).astype(dtype)
    xs = np.moveaxis(x, dim, -1)            # view: slices along the last axis
    positions = [0, n // 2, n - 1]
    if kind in SPECIALS:
        for r, p in enumerate(positions):   # one special value per slice, slices 0..2
            xs[r, p] = SPECIALS[kind]
    elif kind == "all-inf":
        xs[0, :] = -np.inf
        xs[1, :] = np.inf
    elif kind == "all-nan":
        xs[0, :] = np.nan
    else:
        xs[0, 0] = np.inf
        xs[0, n - 1] = np.nan
        xs[1, n // 2] = -np.inf
        xs[1, 0] = np.inf
    out, expected = softmax_both(x, dim, dtype)
    assert_matches(out, expected, equal_nan=True)
    outs = np.moveaxis(out, dim, -1)
    for r in range(xs.shape[0]):
        row = xs[r]
        if np.isnan(row).any() or np.isposinf(row).any() or np.isneginf(row).all():
            assert np.isnan(outs[r]).all()
        else:
            assert np.isfinite(outs[r]).all()


@pytest.mark.parametrize("n", [12, 40, 129])
@pytest.mark.parametrize("dim", [-1, 0])
def test_underflow_and_denormals(rng, dtype, n, dim):
    """x - max from 0 down to -1e30 and -inf: results are exp(x - max) / sum, exactly 0
    below the dtype's underflow, denormal where they should be, never garbage."""
    deltas = np.array([0.0, -1.0, -20.0, -80.0, -87.0, -88.5, -95.0, -100.0, -103.0, -103.9,
                       -104.5, -110.0, -200.0, -700.0, -740.0, -746.0, -1e4, -1e30, -np.inf])
    base = np.resize(deltas, n)
    rng.shuffle(base)
    base[0] = 0.0                              # the max of every slice is 7.5
    rows = [base + 7.5, np.roll(base, 5) + 7.5, np.roll(base, 11) + 7.5]
    x = np.array(rows, dtype=dtype)
    if dim == 0:
        x = np.ascontiguousarray(x.T)
    out, expected = softmax_both(x, dim, dtype)
    assert_matches(out, expected)
    # against float64 exp of the same (dtype-rounded) inputs, in units of the
    # dtype's smallest denormal: garbage would be off by far more than a few
    xd = x.astype(np.float64)
    with np.errstate(under="ignore"):
        ref = reference.softmax(xd, dim)
    tiny = np.finfo(dtype).smallest_subnormal
    eps = np.finfo(dtype).eps
    assert np.all(out >= 0)
    assert np.all(np.abs(out.astype(np.float64) - ref) <= 2 * tiny + 2 * eps * ref)


def test_large_spread_and_constant_rows(dtype):
    """A constant row is uniform exactly; huge magnitudes do not overflow."""
    for n in (1, 7, 16, 33, 1000):
        x = np.full((2, n), 3.25, dtype=dtype)
        x[1] = -1e30
        out = myatt.softmax(x, -1)
        assert_matches(out, torch.softmax(to_torch(x, dtype), -1))
        assert np.all(out == out[0, 0])
    x = np.array([[3e38, -3e38, 0.0, 1e38] * 9], dtype=dtype)
    out, expected = softmax_both(x, -1, dtype)
    assert_matches(out, expected)
    assert np.isfinite(out).all()
