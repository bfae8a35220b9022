"""Reductions thousands long over unit-scale data.

Two correct float32 kernels may then differ by more than assert_close's float32
tolerances, so the spec's bar is: myatt's error against a float64 computation is
no larger than torch's own float32 error against it (factor exactly 1.0, ties allowed).

"Error" is measured as the root-mean-square error over all outputs, not the maximum:
the maximum of thousands of independent rounding errors is an extreme-value
statistic that flips between two equally accurate kernels from one random draw to
the next (measured: myatt/torch max-error ratio 0.78..1.5 over 20 draws of the same
4096-long linear, while the RMS ratio stays within 0.76..0.94). The RMS error is a
stable measure of a kernel's accuracy, so the comparison means something with a
fixed seed. Every test uses many independent outputs (rows/columns) for that reason.
The float64 path still meets assert_close against torch float64.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from oracle import assert_matches


def _np(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def errors(approx, exact):
    """(RMS error, max abs error) of a float32 result against the float64 reference."""
    a, e = _np(approx), _np(exact)
    assert a.shape == e.shape
    d = a.astype(np.float64) - e
    return float(np.sqrt(np.mean(d * d))), float(np.max(np.abs(d)))


def assert_no_worse_than_torch(ours, torch32, exact64):
    assert type(ours) is np.ndarray and ours.dtype == np.float32 and ours.flags.c_contiguous
    assert np.isfinite(ours).all()
    assert _np(exact64).dtype == np.float64
    ours_rms, ours_max = errors(ours, exact64)
    torch_rms, torch_max = errors(torch32, exact64)
    assert ours_rms <= 1.0 * torch_rms, (
        f"myatt float32 RMS error {ours_rms:.4e} > torch's {torch_rms:.4e} "
        f"(max abs errors: myatt {ours_max:.4e}, torch {torch_max:.4e})")


@pytest.mark.parametrize("in_features", [4096, 4097, 6000])
def test_linear_long_in_features(rng, in_features):
    x = rng.standard_normal((64, in_features)).astype(np.float32)
    w = rng.standard_normal((96, in_features)).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    # float64 computation on the same (float32-valued) data
    exact = F.linear(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                     torch.from_numpy(b).double()).numpy()
    theirs = F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))
    assert_no_worse_than_torch(myatt.linear(x, w, b), theirs, exact)


@pytest.mark.parametrize("in_features", [4096, 6000])
def test_linear_long_float64_meets_assert_close(rng, in_features):
    x = rng.standard_normal((64, in_features))
    w = rng.standard_normal((96, in_features))
    b = rng.standard_normal(96)
    expected = F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))
    assert_matches(myatt.linear(x, w, b), expected)


@pytest.mark.parametrize("m", [4096, 4099, 8192])
def test_bmm_long_inner(rng, m):
    a = rng.standard_normal((2, 48, m)).astype(np.float32)
    c = rng.standard_normal((2, m, 40)).astype(np.float32)
    exact = torch.bmm(torch.from_numpy(a).double(), torch.from_numpy(c).double()).numpy()
    theirs = torch.bmm(torch.from_numpy(a), torch.from_numpy(c))
    assert_no_worse_than_torch(myatt.bmm(a, c), theirs, exact)


@pytest.mark.parametrize("m", [4096, 8192])
def test_bmm_long_inner_float64_meets_assert_close(rng, m):
    a = rng.standard_normal((2, 48, m))
    c = rng.standard_normal((2, m, 40))
    assert_matches(myatt.bmm(a, c), torch.bmm(torch.from_numpy(a), torch.from_numpy(c)))


@pytest.mark.kernel_path
@pytest.mark.parametrize("n,dim", [(10000, -1), (10000, 0), (10001, -1), (30000, -1)])
def test_softmax_long_slices(rng, n, dim):
    shape = (32, n) if dim == -1 else (n, 32)
    x = rng.standard_normal(shape).astype(np.float32)
    exact = torch.softmax(torch.from_numpy(x).double(), dim).numpy()
    theirs = torch.softmax(torch.from_numpy(x), dim)
    assert_no_worse_than_torch(myatt.softmax(x, dim), theirs, exact)


@pytest.mark.kernel_path
@pytest.mark.parametrize("n,dim", [(10000, -1), (10000, 0)])
def test_softmax_long_slices_float64_meets_assert_close(rng, n, dim):
    shape = (8, n) if dim == -1 else (n, 8)
    x = rng.standard_normal(shape)
    assert_matches(myatt.softmax(x, dim), torch.softmax(torch.from_numpy(x), dim))


def test_myatt_long_features():
    """The fused module with reductions thousands long (features and value_size1):
    output and attn_weights no worse than torch float32 against torch float64."""
    import oracle

    rng = np.random.default_rng(11)
    sizes = (2048, 2048, 4096, 64, 16)
    m = myatt.MyAtt(*sizes)
    Q = rng.standard_normal((1, 24, 2048)).astype(np.float32)
    K = rng.standard_normal((1, 24, 2048)).astype(np.float32)
    V = rng.standard_normal((1, 4096, 64)).astype(np.float32)
    t32 = oracle.torch_myatt(m)
    t64 = oracle.torch_myatt(m).double()
    out32, attn32 = oracle.run(t32, Q, K, V, dtype=np.float32)
    with torch.no_grad():
        out64, attn64 = t64(*(torch.from_numpy(a).double() for a in (Q, K, V)))
    out, attn = m(Q, K, V)
    assert_no_worse_than_torch(attn, attn32, attn64.numpy())
    assert_no_worse_than_torch(out, out32, out64.numpy())
