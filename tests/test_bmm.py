"""myatt.bmm(input, mat2) against torch.bmm."""
import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import myatt
from oracle import assert_matches, opinfo_samples, to_torch
from helpers import ALL_REAL, PROMO_DTYPES, data, dtype_id, result_dtype, scaled


def torch_bmm(a, b, dtype):
    return torch.bmm(to_torch(a, dtype), to_torch(b, dtype))


@pytest.mark.parametrize("p", [1, 3, 63, 64, 257])
@pytest.mark.parametrize("m", [1, 3, 17, 63, 64, 65, 257])
@pytest.mark.parametrize("n", [1, 17, 65, 257])
def test_sizes(rng, dtype, n, m, p):
    a = data(rng, (2, n, m), dtype)
    b = scaled(rng, (2, m, p), dtype, m)
    out = myatt.bmm(a, b)
    assert out.shape == (2, n, p)
    assert_matches(out, torch_bmm(a, b, dtype))


@pytest.mark.parametrize("batch", [1, 2, 3, 17, 64, 65])
def test_batch_sizes(rng, dtype, batch):
    a = data(rng, (batch, 5, 7), dtype)
    b = data(rng, (batch, 7, 9), dtype)
    assert_matches(myatt.bmm(a, b), torch_bmm(a, b, dtype))


@pytest.mark.parametrize("b,n,m,p", [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 0, 5), (2, 3, 4, 0),
                                     (0, 0, 0, 0), (1, 0, 0, 7), (3, 5, 0, 0)], ids=str)
def test_empty(rng, dtype, b, n, m, p):
    """Any size may be 0; m == 0 gives zeros, as in torch."""
    a = data(rng, (b, n, m), dtype)
    c = data(rng, (b, m, p), dtype)
    out = myatt.bmm(a, c)
    assert out.shape == (b, n, p)
    assert_matches(out, torch_bmm(a, c, dtype))


@pytest.mark.parametrize("b,n,m,p", [(3, 300, 129, 200), (1, 129, 500, 96), (2, 96, 96, 300),
                                     (1, 1, 300, 257), (1, 300, 257, 1)], ids=str)
def test_hundreds(rng, dtype, b, n, m, p):
    a = data(rng, (b, n, m), dtype)
    c = scaled(rng, (b, m, p), dtype, m)
    assert_matches(myatt.bmm(a, c), torch_bmm(a, c, dtype))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_many_small_items_over_threads(rng, dtype, threads):
    """Items too small for the gemm's own threads are dealt out to threads whole:
    the same results as torch (and as one thread) for any thread count, forward
    and backward."""
    saved = myatt.get_num_threads()
    try:
        myatt.set_num_threads(threads)
        a = data(rng, (37, 64, 48), dtype)
        c = scaled(rng, (37, 48, 80), dtype, 48)
        go = scaled(rng, (37, 64, 80), dtype, 80)
        assert_matches(myatt.bmm(a, c), torch_bmm(a, c, dtype))
        ta, tc = to_torch(a, dtype).requires_grad_(), to_torch(c, dtype).requires_grad_()
        want = torch.autograd.grad(torch.bmm(ta, tc), (ta, tc), to_torch(go, dtype))
        for got, expected in zip(myatt.bmm_backward(go, a, c), want):
            assert_matches(got, expected)
    finally:
        myatt.set_num_threads(saved)


def test_batches_are_independent(rng, dtype):
    """Each batch item is its own product (no mixing of batch strides)."""
    a = data(rng, (4, 6, 5), dtype)
    c = data(rng, (4, 5, 3), dtype)
    out = myatt.bmm(a, c)
    for i in range(4):
        assert_matches(np.ascontiguousarray(out[i]), to_torch(a[i], dtype) @ to_torch(c[i], dtype))


@pytest.mark.parametrize("ad,bd", list(itertools.product(PROMO_DTYPES, PROMO_DTYPES)),
                         ids=dtype_id)
def test_promotion(rng, ad, bd):
    a = data(rng, (2, 4, 6), ad)
    b = data(rng, (2, 6, 3), bd)
    rd = result_dtype(ad, bd)
    out = myatt.bmm(a, b)
    assert out.dtype == rd
    assert_matches(out, torch_bmm(a, b, rd))


@pytest.mark.parametrize("d", ALL_REAL, ids=dtype_id)
def test_every_real_dtype(rng, d):
    a = data(rng, (2, 3, 4), d)
    b = data(rng, (2, 4, 5), d)
    rd = result_dtype(d)
    out = myatt.bmm(a, b)
    assert out.dtype == rd
    assert_matches(out, torch_bmm(a, b, rd))


def test_nonfinite_propagation(rng, dtype):
    a = data(rng, (2, 5, 4), dtype)
    b = data(rng, (2, 4, 3), dtype)
    a[0, 0, 1] = np.nan          # NaN row
    a[0, 1, 2] = np.inf          # inf times a zero: NaN
    b[0, 2, 0] = 0.0
    a[1, 2, :] = -np.inf         # -inf times both signs: NaN
    b[1, 0, 2] = np.inf          # inf in mat2: a column of inf/NaN
    out = myatt.bmm(a, b)
    assert_matches(out, torch_bmm(a, b, dtype), equal_nan=True)
    assert np.isnan(out[0, 0]).all()
    assert np.isnan(out[0, 1, 0])


@given(b=st.integers(0, 4), n=st.integers(0, 40), m=st.integers(0, 40), p=st.integers(0, 40),
       use64=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_property_random_shapes(b, n, m, p, use64, seed):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if use64 else np.float32
    a = rng.standard_normal((b, n, m)).astype(dtype)
    c = (rng.standard_normal((b, m, p)) / np.sqrt(max(m, 1))).astype(dtype)
    assert_matches(myatt.bmm(a, c), torch_bmm(a, c, dtype))


def test_opinfo_samples():
    """torch's OpInfo samples of torch.bmm (its plain and triton_optimized variants: outer
    products of k = 1 among them), float32 and float64: the result as torch gives it, and
    the gradients through myatt.vjp as torch's autograd gives them.

    float32 samples get their values rounded to quarters (in OpInfo's [-9, 9]) and
    cotangents of quarters in [-1, 1], on which every order of summation is exact: the
    input's gradient of `[8, 128, 1] @ [8, 1, 256]` sums 256 products of ~9 in MKL's lanes
    (its n = 1 is outside the region where MKL sums in our order), and two correct sums of
    those differ by up to 3.4e-5, past float32's atol.  float64 samples are as drawn."""
    rng = np.random.default_rng(4)
    for variant in ("", "triton_optimized"):
        for s in opinfo_samples("bmm", variant):
            exact = s.input.dtype == torch.float32
            leaves = [(torch.round(t * 4) / 4 if exact else t).detach().requires_grad_()
                      for t in (s.input, s.args[0])]
            theirs = torch.bmm(*leaves)
            ours, pull = myatt.vjp(myatt.bmm, *(t.detach().numpy() for t in leaves))
            assert_matches(ours, theirs)
            g = (rng.integers(-4, 5, ours.shape) / 4 if exact
                 else rng.uniform(-1, 1, ours.shape)).astype(ours.dtype)
            for got, want in zip(pull(g), torch.autograd.grad(theirs, leaves, torch.from_numpy(g))):
                assert_matches(got, want)
