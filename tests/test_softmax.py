"""myatt.softmax(input, dim=-1) against torch.softmax(input, dim)."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import myatt
from helpers import assert_same_bits, result_dtype, torch_runs_our_softmax
from oracle import assert_matches, opinfo_samples, to_torch, torch_dtype

# every softmax test depends on the kernel path
pytestmark = pytest.mark.kernel_path

SHAPES = [
    (),
    (1,), (3,), (17,), (63,), (64,), (65,), (257,), (0,),
    (3, 17), (65, 63), (1, 257), (257, 1), (0, 5), (5, 0), (64, 64), (300, 17),
    (3, 17, 5), (2, 0, 3), (4, 65, 3), (1, 1, 1), (17, 3, 63), (3, 257, 2),
    (2, 3, 17, 5), (3, 1, 4, 65), (2, 2, 0, 2), (5, 4, 3, 2), (1, 64, 1, 3),
    # "any ndim": beyond 4 too
    (2, 1, 3, 1, 2, 3), (1, 2, 1, 2, 1, 2, 1, 2, 1, 3),
]


def dims_of(shape):
    """Every valid dim of a shape, negative ones included (a 0-d input takes -1 and 0)."""
    n = len(shape)
    return [-1, 0] if n == 0 else list(range(-n, n))


CASES = [(shape, d) for shape in SHAPES for d in dims_of(shape)]


def case_id(case):
    shape, d = case
    return f"{shape}-dim{d}"


@pytest.mark.parametrize("shape,dim", CASES, ids=[case_id(c) for c in CASES])
def test_every_axis(rng, dtype, shape, dim):
    x = (3.0 * rng.standard_normal(shape)).astype(dtype)
    assert_matches(myatt.softmax(x, dim), torch.softmax(to_torch(x, dtype), dim))


@pytest.mark.parametrize("cols", [1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 255, 256, 1000,
                                  1024, 4097])
@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 100.0])
def test_last_axis_is_torchs_bits(rng, dtype, cols, scale):
    """Along the last axis each path is torch's kernel for the matching CPU capability
    (helpers.TORCH_CAPABILITY): the same vector width, reduction orders and exp, so the
    same bits, including rows of -inf, with +inf or NaN.  Where torch runs another
    kernel (a path forced below torch's), the usual tolerance applies."""
    x = (scale * rng.standard_normal((9, cols))).astype(dtype)
    x[1] = -np.inf
    x[2, cols // 2:] = -np.inf
    x[3, cols // 3] = np.inf
    x[4, cols // 2] = np.nan
    x[5] += 1e4
    x[6] -= 200.0                                       # exp underflows to 0 at the end
    out = myatt.softmax(x, -1)
    expected = torch.softmax(to_torch(x, dtype), -1)
    if torch_runs_our_softmax():
        assert_same_bits(out, expected)
    else:
        assert_matches(out, expected, equal_nan=True)


def test_default_dim_is_last(rng, dtype):
    x = rng.standard_normal((4, 5, 6)).astype(dtype)
    expected = torch.softmax(to_torch(x, dtype), -1)
    assert_matches(myatt.softmax(x), expected)
    assert_matches(myatt.softmax(x, dim=-1), expected)


def test_dim_keyword_and_numpy_integer(rng, dtype):
    x = rng.standard_normal((4, 5, 6)).astype(dtype)
    expected = torch.softmax(to_torch(x, dtype), 1)
    assert_matches(myatt.softmax(x, dim=1), expected)
    assert_matches(myatt.softmax(x, np.int64(1)), expected)
    assert_matches(myatt.softmax(x, dim=np.intp(-2)), expected)


@pytest.mark.parametrize("value", [2.5, 0.0, -7.0, np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dim", [-1, 0])
def test_zero_dim_input(dtype, value, dim):
    """A 0-d input behaves as in torch, and the result is a 0-d ndarray (not a scalar)."""
    x = np.array(value, dtype=dtype)
    out = myatt.softmax(x, dim)
    assert type(out) is np.ndarray
    assert out.shape == ()
    assert out.dtype == dtype
    assert_matches(out, torch.softmax(to_torch(x, dtype), dim), equal_nan=True)


@pytest.mark.parametrize("scalar_type", [np.float32, np.float64])
def test_numpy_scalar_input(scalar_type):
    """A NumPy scalar is a 0-d array-like: the result is a 0-d ndarray of its dtype."""
    out = myatt.softmax(scalar_type(1.5))
    assert type(out) is np.ndarray
    assert out.shape == ()
    assert out.dtype == scalar_type
    assert_matches(out, torch.softmax(torch.tensor(1.5, dtype=torch_dtype(scalar_type)), -1))


@pytest.mark.parametrize("in_dtype", [np.float16, np.bool_, np.int8, np.int16, np.int32, np.int64,
                                      np.uint8, np.uint16, np.uint32, np.uint64, np.float32,
                                      np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_dtype_promotion(rng, in_dtype):
    """float64 stays float64, float16 float16 (test_half.py); bool and integers become
    float32."""
    d = np.dtype(in_dtype)
    if d == np.bool_:
        x = rng.integers(0, 2, size=(5, 7)).astype(bool)
    elif d.kind in "iu":
        x = rng.integers(0 if d.kind == "u" else -5, 6, size=(5, 7)).astype(d)
    else:
        x = rng.standard_normal((5, 7)).astype(d)
    rd = result_dtype(d)
    for dim in (0, 1):
        out = myatt.softmax(x, dim)
        assert out.dtype == rd
        assert_matches(out, torch.softmax(to_torch(x, rd), dim))


# --------------------------------------------------------------------------- #
# NaN and inf: as in torch. A NaN anywhere in a slice makes the slice NaN; a
# slice of -inf only is NaN; +inf in a slice gives NaN (inf - inf) as in torch.
# --------------------------------------------------------------------------- #
NONFINITE_SHAPES = [(7, 9), (65, 17), (3, 257), (4, 5, 6), (2, 3, 17, 5)]
NONFINITE_CASES = [(s, d) for s in NONFINITE_SHAPES for d in range(len(s))]


def with_nonfinite(rng, shape, dtype, dim):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    n = flat.size
    idx = rng.choice(n, size=max(3, n // 40), replace=False)
    k = len(idx) // 3
    flat[idx[:k]] = np.nan
    flat[idx[k:2 * k]] = np.inf
    flat[idx[2 * k:]] = -np.inf
    # one whole slice along `dim` of -inf only
    sl = [0] * len(shape)
    sl[dim] = slice(None)
    x[tuple(sl)] = -np.inf
    return x


@pytest.mark.parametrize("shape,dim", NONFINITE_CASES, ids=[case_id(c) for c in NONFINITE_CASES])
def test_nonfinite_like_torch(rng, dtype, shape, dim):
    x = with_nonfinite(rng, shape, dtype, dim)
    out = myatt.softmax(x, dim)
    assert_matches(out, torch.softmax(to_torch(x, dtype), dim), equal_nan=True)
    # independent of torch: every slice holding a NaN, or of -inf only, is entirely NaN
    moved_x = np.moveaxis(x, dim, -1).reshape(-1, shape[dim])
    moved_out = np.moveaxis(out, dim, -1).reshape(-1, shape[dim])
    has_nan = np.isnan(moved_x).any(axis=1)
    all_neg_inf = (moved_x == -np.inf).all(axis=1)
    assert np.isnan(moved_out[has_nan | all_neg_inf]).all()
    assert (has_nan | all_neg_inf).any()


@pytest.mark.parametrize("row", [
    [1.0, np.nan, 2.0],
    [np.nan, np.nan, np.nan],
    [-np.inf, -np.inf, -np.inf],
    [np.inf, 1.0, 2.0],
    [np.inf, np.inf, 1.0],
    [-np.inf, 1.0, 2.0],
    [-np.inf, -np.inf, 0.0],
    [np.nan, -np.inf, np.inf],
    [np.nan],
    [-np.inf],
    [np.inf],
], ids=str)
def test_nonfinite_rows(dtype, row):
    """Hand-written rows, along the last and the first axis."""
    x = np.array([row, [0.5] * len(row)], dtype=dtype)
    assert_matches(myatt.softmax(x, -1), torch.softmax(to_torch(x, dtype), -1), equal_nan=True)
    xt = np.ascontiguousarray(x.T)
    assert_matches(myatt.softmax(xt, 0), torch.softmax(to_torch(xt, dtype), 0), equal_nan=True)
    if np.isnan(row).any():
        assert np.isnan(myatt.softmax(x, -1)[0]).all()


@pytest.mark.parametrize("scale,shift", [(1e4, 0.0), (1.0, 100.0), (1.0, -100.0), (1e30, 0.0),
                                         (1.0, 1e6)], ids=str)
def test_large_magnitudes(rng, dtype, scale, shift):
    """No overflow from exp: the kernel subtracts the slice maximum, as torch does."""
    x = (scale * rng.standard_normal((9, 33)) + shift).astype(dtype)
    for dim in (0, 1):
        out = myatt.softmax(x, dim)
        assert np.isfinite(out).all()
        assert_matches(out, torch.softmax(to_torch(x, dtype), dim))


@given(shape=st.lists(st.integers(0, 9), min_size=0, max_size=4), data=st.data(),
       use64=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_property_random_shapes(shape, data, use64, seed):
    shape = tuple(shape)
    dim = data.draw(st.sampled_from(dims_of(shape)), label="dim")
    dtype = np.float64 if use64 else np.float32
    x = (4.0 * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)
    assert_matches(myatt.softmax(x, dim), torch.softmax(to_torch(x, dtype), dim))


@pytest.mark.parametrize("variant", ["", "with_dtype"])
def test_opinfo_samples(variant):
    """torch's OpInfo samples of torch.softmax (every axis, 0-d and empty inputs) and of its
    with_dtype variant (the input cast to float64 first: myatt's softmax of the cast input),
    float32 and float64: the result as torch gives it (its bits along the last axis where
    torch runs the kernel myatt's path reproduces), and the gradient through myatt.vjp as
    torch's autograd gives it."""
    rng = np.random.default_rng(5)
    bits = torch_runs_our_softmax()
    for s in opinfo_samples("softmax", variant):
        dim = s.args[0]
        x = s.input.to(s.kwargs.get("dtype", s.input.dtype)).requires_grad_()
        theirs = torch.softmax(x, dim)
        ours, pull = myatt.vjp(myatt.softmax, x.detach().numpy(), dim)
        assert_matches(ours, theirs)
        if bits and x.dim() > 0 and dim in (-1, x.dim() - 1):
            assert_same_bits(ours, theirs)
        g = rng.uniform(-1, 1, ours.shape).astype(ours.dtype)
        assert_matches(pull(g)[0], torch.autograd.grad(theirs, x, torch.from_numpy(g))[0])
