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
