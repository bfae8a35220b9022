"""The benchmark compares like with like: its NumPy baseline (benchmarks/numpy_myatt.py)
and its torch module (benchmarks/bench.py) compute the tutorial's module, checked here
against the oracle at default tolerances.  (No timing here: bench.py measures.)"""
import os
import sys

import numpy as np
import pytest
import torch

import myatt
from oracle import assert_matches, run, torch_myatt

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import bench  # noqa: E402
import numpy_myatt  # noqa: E402

SIZES = [(1, (32, 32, 32, 64, 32)), (9, (16, 24, 40, 8, 12))]


@pytest.mark.parametrize("S,sizes", SIZES, ids=str)
def test_numpy_baseline_and_bench_torch_module_match_the_oracle(rng, dtype, S, sizes):
    q, k, v1, v2, o = sizes
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q = (rng.standard_normal((1, S, q)) / 4).astype(dtype)
    K = (rng.standard_normal((1, S, k)) / 4).astype(dtype)
    V = rng.standard_normal((1, v1, v2)).astype(dtype)
    expected_out, expected_aw = run(torch_myatt(m), Q, K, V, dtype=dtype)

    out, aw = numpy_myatt.NumpyMyAtt(m.state_dict(), dtype)(Q, K, V)
    assert out.dtype == dtype and aw.dtype == dtype
    assert_matches(out, expected_out)
    assert_matches(aw, expected_aw)

    tm = bench.TorchMyAtt(*sizes).to(torch.float64 if dtype == np.float64 else torch.float32)
    tm.load_state_dict({key: torch.from_numpy(val) for key, val in m.state_dict().items()})
    with torch.no_grad():
        t_out, t_aw = tm(*(torch.from_numpy(a) for a in (Q, K, V)))
    assert_matches(t_out.numpy(), expected_out)
    assert_matches(t_aw.numpy(), expected_aw)


def test_numpy_softmax_rows_and_columns(rng, dtype):
    x = (3 * rng.standard_normal((7, 33))).astype(dtype)
    for axis in (0, 1):
        assert_matches(numpy_myatt.softmax(x, axis), torch.softmax(torch.from_numpy(x), axis))


@pytest.mark.parametrize("is_causal", [False, True])
def test_numpy_sdpa_matches_torch(rng, dtype, is_causal, monkeypatch):
    """The benchmark's NumPy attention (forward, hand-written backward, GQA), computed in
    chunks of leading items as for its largest shapes (a small chunk forced here)."""
    import torch.nn.functional as F
    monkeypatch.setattr(numpy_myatt, "SDPA_CHUNK_BYTES", 3 * 9 * 11 * np.dtype(dtype).itemsize)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in [(2, 4, 9, 8), (2, 4, 11, 8),
                                                               (2, 4, 11, 5)])
    g = rng.standard_normal((2, 4, 9, 5)).astype(dtype)
    t = [torch.from_numpy(a).requires_grad_() for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*t, is_causal=is_causal)
    assert_matches(numpy_myatt.sdpa(q, k, v, is_causal), out)
    for ours, theirs in zip(numpy_myatt.sdpa_train(q, k, v, g, is_causal),
                            torch.autograd.grad(out, t, torch.from_numpy(g))):
        assert_matches(ours, theirs)
    tq = torch.from_numpy(q)
    assert_matches(numpy_myatt.sdpa(q, k[:, :2], v[:, :2], enable_gqa=True),
                   F.scaled_dot_product_attention(tq, t[1][:, :2].detach(), t[2][:, :2].detach(),
                                                  enable_gqa=True))
