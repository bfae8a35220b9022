"""myatt.linear(input, weight, bias=None) against torch.nn.functional.linear."""
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import myatt
from helpers import ALL_REAL, PROMO_DTYPES, data, dtype_id, result_dtype, scaled
from oracle import assert_matches, opinfo_samples, to_torch

SIZES = [1, 3, 17, 63, 64, 65, 257]


def torch_linear(x, w, b, dtype):
    """F.linear on the operands converted to `dtype` (torch wants one dtype)."""
    return F.linear(to_torch(x, dtype), to_torch(w, dtype), None if b is None else to_torch(b, dtype))


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("out_f", SIZES)
@pytest.mark.parametrize("in_f", SIZES)
def test_in_out_sizes(rng, dtype, in_f, out_f, with_bias):
    x = data(rng, (7, in_f), dtype)
    w = scaled(rng, (out_f, in_f), dtype, in_f)
    b = data(rng, (out_f,), dtype) if with_bias else None
    assert_matches(myatt.linear(x, w, b), torch_linear(x, w, b, dtype))


BATCH_SHAPES = [(), (1,), (2,), (0,), (5, 0), (0, 5), (2, 3), (2, 3, 4), (1, 1, 1, 3),
                (64,), (65,), (257,), (300,)]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("batch", BATCH_SHAPES, ids=str)
def test_batch_shapes(rng, dtype, batch, with_bias):
    """input[..., in] of any number of leading dims (including none: a 1-D input)."""
    x = data(rng, batch + (17,), dtype)
    w = scaled(rng, (65, 17), dtype, 17)
    b = data(rng, (65,), dtype) if with_bias else None
    out = myatt.linear(x, w, b)
    expected = torch_linear(x, w, b, dtype)
    assert out.shape == batch + (65,)
    assert_matches(out, expected)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("in_f,out_f", [(0, 5), (5, 0), (0, 0)])
@pytest.mark.parametrize("batch", [(4,), (0,), (2, 3)], ids=str)
def test_empty_features(rng, dtype, batch, in_f, out_f, with_bias):
    """in_features == 0 gives the bias (or zeros) on every row; out_features == 0 an empty last axis."""
    x = data(rng, batch + (in_f,), dtype)
    w = scaled(rng, (out_f, in_f), dtype, in_f)
    b = data(rng, (out_f,), dtype) if with_bias else None
    assert_matches(myatt.linear(x, w, b), torch_linear(x, w, b, dtype))


@pytest.mark.parametrize("xshape,wshape", [
    ((300, 257), (129, 257)),
    ((3, 100, 200), (150, 200)),
    ((129, 96), (300, 96)),
    ((1, 500), (257, 500)),
], ids=str)
def test_hundreds(rng, dtype, xshape, wshape):
    x = data(rng, xshape, dtype)
    w = scaled(rng, wshape, dtype, wshape[1])
    b = data(rng, wshape[:1], dtype)
    assert_matches(myatt.linear(x, w, b), torch_linear(x, w, b, dtype))


def test_bias_spellings(rng, dtype):
    """bias positional, by keyword, explicitly None, or left out."""
    x = data(rng, (5, 17), dtype)
    w = data(rng, (3, 17), dtype)
    b = data(rng, (3,), dtype)
    with_bias = torch_linear(x, w, b, dtype)
    without = torch_linear(x, w, None, dtype)
    assert_matches(myatt.linear(x, w, b), with_bias)
    assert_matches(myatt.linear(x, w, bias=b), with_bias)
    assert_matches(myatt.linear(x, w), without)
    assert_matches(myatt.linear(x, w, None), without)
    assert_matches(myatt.linear(x, w, bias=None), without)


# --------------------------------------------------------------------------- #
# dtype promotion: float64 if any array operand is float64, else float32.
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("xd,wd", list(itertools.product(PROMO_DTYPES, PROMO_DTYPES)),
                         ids=lambda d: np.dtype(d).name)
def test_promotion_input_weight(rng, xd, wd):
    x = data(rng, (4, 9), xd)
    w = data(rng, (5, 9), wd)
    rd = result_dtype(xd, wd)
    out = myatt.linear(x, w)
    assert out.dtype == rd
    assert_matches(out, torch_linear(x, w, None, rd))


@pytest.mark.parametrize("bd", ALL_REAL, ids=dtype_id)
@pytest.mark.parametrize("xd,wd", [(np.float32, np.float32), (np.int64, np.float32),
                                   (np.float32, np.float64), (np.uint8, np.bool_)],
                         ids=lambda d: np.dtype(d).name)
def test_promotion_bias(rng, xd, wd, bd):
    x = data(rng, (4, 9), xd)
    w = data(rng, (5, 9), wd)
    b = data(rng, (5,), bd)
    rd = result_dtype(xd, wd, bd)
    out = myatt.linear(x, w, b)
    assert out.dtype == rd
    assert_matches(out, torch_linear(x, w, b, rd))


@pytest.mark.parametrize("d", ALL_REAL, ids=dtype_id)
def test_every_real_dtype_everywhere(rng, d):
    """All three operands of one integer/bool/float dtype."""
    x = data(rng, (3, 6), d)
    w = data(rng, (4, 6), d)
    b = data(rng, (4,), d)
    rd = result_dtype(d)
    out = myatt.linear(x, w, b)
    assert out.dtype == rd
    assert_matches(out, torch_linear(x, w, b, rd))


# --------------------------------------------------------------------------- #
# NaN and inf propagate as in torch (IEEE arithmetic, nothing skipped).
# --------------------------------------------------------------------------- #
def test_nonfinite_propagation(rng, dtype):
    x = data(rng, (6, 5), dtype)
    w = data(rng, (4, 5), dtype)
    b = data(rng, (4,), dtype)
    x[0, 1] = np.nan              # a NaN input makes its row NaN
    x[1, 2] = np.inf              # inf times a zero weight is NaN
    w[2, 2] = 0.0
    x[2, :] = -np.inf             # -inf times weights of both signs: NaN
    x[3, 0] = np.inf              # inf times a nonzero weight stays inf unless cancelled
    b[3] = np.nan                 # a NaN bias makes its column NaN
    out = myatt.linear(x, w, b)
    expected = torch_linear(x, w, b, dtype)
    assert_matches(out, expected, equal_nan=True)
    assert np.isnan(out[0]).all()
    assert np.isnan(out[1, 2])
    assert np.isnan(out[:, 3]).all()


# --------------------------------------------------------------------------- #
# Property: random shapes and data.
# --------------------------------------------------------------------------- #
@given(batch=st.lists(st.integers(0, 6), min_size=0, max_size=3),
       in_f=st.integers(0, 70), out_f=st.integers(0, 70), with_bias=st.booleans(),
       use64=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_property_random_shapes(batch, in_f, out_f, with_bias, use64, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if use64 else np.float32
    x = rng.standard_normal(tuple(batch) + (in_f,)).astype(dtype)
    w = (rng.standard_normal((out_f, in_f)) / np.sqrt(max(in_f, 1))).astype(dtype)
    b = rng.standard_normal(out_f).astype(dtype) if with_bias else None
    assert_matches(myatt.linear(x, w, b), torch_linear(x, w, b, dtype))


def test_opinfo_samples():
    """torch's OpInfo samples of F.linear (1-D to 5-D input, empty batches, with and without
    bias), float32 and float64: the result as torch gives it, and the gradients of input,
    weight and bias through myatt.vjp as torch's autograd gives them."""
    rng = np.random.default_rng(3)
    for s in opinfo_samples("nn.functional.linear"):
        args = (s.input,) + tuple(s.args)                # input, weight[, bias]
        dtype = np.dtype(str(s.input.dtype).replace("torch.", ""))
        leaves = [t.detach().clone().requires_grad_() for t in args]
        theirs = F.linear(*leaves)
        ours, pull = myatt.vjp(myatt.linear, *(t.numpy() for t in args))
        assert_matches(ours, theirs)
        g = rng.uniform(-1, 1, ours.shape).astype(dtype)
        grads = pull(g)
        assert (grads[2] is None) == (len(args) == 2)
        for got, want in zip(grads, torch.autograd.grad(theirs, leaves, torch.from_numpy(g))):
            assert_matches(got, want)
