"""myatt.compare: the drop-in validation report against a torch module."""
import re

import numpy as np
import pytest
import torch

import myatt
import oracle
from oracle import torch_dtype

SIZES = (32, 32, 32, 64, 32)   # the seed's


def seed_module(dtype, seed=0):
    torch.manual_seed(seed)
    return oracle.MyAtt(*SIZES).to(torch_dtype(dtype))


def seed_inputs(rng, S=3):
    return (rng.standard_normal((1, S, 32)), rng.standard_normal((1, S, 32)),
            rng.standard_normal((1, 32, 64)))


def test_seed_module_agrees(rng, dtype):
    t = seed_module(dtype)
    Q, K, V = seed_inputs(rng)
    report = myatt.compare(t, Q, K, V)
    assert report.agree and bool(report)
    report.assert_close()
    assert [r.name for r in report.results] == ["output", "attn_weights"]
    out, w = myatt.MyAtt.from_torch(t)(Q, K, V)
    with torch.no_grad():
        t_out, t_w = t(*(torch.from_numpy(x.astype(dtype)) for x in (Q, K, V)))
    for r, ours, theirs in zip(report.results, (out, w), (t_out, t_w)):
        diff = np.abs(ours.astype(np.float64) - theirs.double().numpy())
        assert r.max_abs_err == diff.max()   # the report's numbers are the real ones
        assert r.shape == r.torch_shape == ours.shape
        assert r.dtype == np.dtype(dtype).name and r.mismatched == 0
        assert (r.rtol, r.atol) == {np.float32: (1.3e-6, 1e-5),
                                    np.float64: (1e-7, 1e-7)}[dtype.type]
        # against float64: reported for float32 only
        assert (r.err64_myatt is None) == (dtype == np.float64)
    text = str(report)
    assert "AGREE" in text and "output" in text and "attn_weights" in text
    assert "Q (1, 3, 32)" in text and np.dtype(dtype).name in text
    assert repr(report) == text
    assert "<table" in report._repr_html_()


def test_differing_weights_are_reported(rng):
    t = seed_module(np.float32)
    m = myatt.MyAtt.from_torch(t)
    m.attn_combine.bias[5] += 1e-3   # changes output[..., 5] only
    Q, K, V = seed_inputs(rng, S=2)
    report = myatt.compare(t, Q, K, V, module=m)
    assert not report.agree and not report
    out = report["output"]
    assert not out.agree and out.mismatched == 2
    assert out.worst_index[2] == 5
    assert out.max_abs_err == pytest.approx(1e-3, rel=1e-3)
    assert "Mismatched elements" in out.message   # torch's own assert_close message
    assert out.err64_myatt > out.err64_torch
    assert report["attn_weights"].agree
    text = str(report)
    assert "DIFFER" in text and "2 of 64 elements" in text
    assert re.search(r"worst at \(0, [01], 5\)", text)
    with pytest.raises(AssertionError, match="DIFFER"):
        report.assert_close()
    with pytest.raises(KeyError):
        report["nothing"]


def test_inputs_of_any_kind(rng):
    t = seed_module(np.float64)
    Q, K, V = seed_inputs(rng)
    for conv in (np.asarray, torch.from_numpy, lambda a: a.tolist(),
                 lambda a: torch.from_numpy(a).float().requires_grad_()):
        assert myatt.compare(t, conv(Q), conv(K), conv(V)).agree


def test_linear_and_functions(rng, dtype):
    torch.manual_seed(1)
    lin = torch.nn.Linear(20, 7, dtype=torch_dtype(dtype))
    x = rng.standard_normal((5, 20)) / 5
    report = myatt.compare(lin, x)
    assert report.agree and [r.name for r in report.results] == ["output"]
    assert "Linear(in_features=20" in str(report)
    a = rng.standard_normal((3, 4)).astype(dtype)
    assert myatt.compare(torch.softmax, a, 0, module=myatt.softmax).agree
    w, b = rng.standard_normal((2, 4)).astype(dtype), None
    report = myatt.compare(torch.nn.functional.linear, a, w, b, module=myatt.linear)
    assert report.agree and "myatt.linear" in str(report)


def test_shape_mismatch_is_a_disagreement(rng):
    report = myatt.compare(torch.softmax, rng.standard_normal((3, 4)), -1,
                           module=lambda x, dim: myatt.softmax(x, dim)[:2])
    r = report.results[0]
    assert not report.agree and r.shape == (2, 4) and r.torch_shape == (3, 4)
    assert "shapes differ" in str(report)


def test_custom_tolerances(rng):
    t = seed_module(np.float32)
    m = myatt.MyAtt.from_torch(t)
    m.attn_combine.bias[0] += 1e-4
    Q, K, V = seed_inputs(rng)
    assert not myatt.compare(t, Q, K, V, module=m)
    loose = myatt.compare(t, Q, K, V, module=m, rtol=0, atol=1e-3)
    assert loose.agree and "rtol=0, atol=0.001" in str(loose)
    with pytest.raises(ValueError):
        myatt.compare(t, Q, K, V, rtol=1e-3)


def test_no_twin_raises():
    with pytest.raises(TypeError, match="module="):
        myatt.compare(torch.nn.ReLU(), np.ones(3))


def test_dtype_mismatch_is_refused(rng):
    t = seed_module(np.float32)
    m64 = myatt.MyAtt(*SIZES, dtype=np.float64)
    with pytest.raises(TypeError, match="torch.float32"):
        myatt.compare(t, *seed_inputs(rng), module=m64)


def test_integer_arguments_pass_through(rng):
    a = rng.standard_normal((3, 4))
    assert myatt.compare(torch.softmax, a, np.int64(0), module=myatt.softmax).agree
