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
    for rtol, atol in [(-1e-3, 0), (0, float("nan"))]:
        with pytest.raises(ValueError, match="rtol and atol must be >= 0"):
            myatt.compare(t, Q, K, V, rtol=rtol, atol=atol)


def test_inputs_myatt_refuses_are_refused(rng):
    """A complex or string input is refused as myatt refuses it (a cast to real with a
    warning had reported agreement)."""
    t = seed_module(np.float32)
    Q, K, V = seed_inputs(rng)
    with pytest.raises(TypeError, match=r"inputs\[1\] has dtype complex128"):
        myatt.compare(t, Q, K.astype(complex), V)
    with pytest.raises(TypeError, match=r"inputs\[0\] has dtype <U1"):
        myatt.compare(torch.softmax, [["a"]], -1, module=myatt.softmax)


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


def torch_results(t, *arrays):
    with torch.no_grad():
        return [r.numpy() for r in t(*(torch.from_numpy(a) for a in arrays))]


def test_nan_in_the_inputs_same_nans_agree(rng, dtype):
    """A NaN in Q: torch gives NaN rows, myatt the same ones. That agrees (equal_nan=True,
    the default), the NaN positions are counted apart, the errors are those of the
    finite values, and no 'worst' element is named where the two values are equal."""
    t = seed_module(dtype)
    Q, K, V = (x.astype(dtype) for x in seed_inputs(rng, S=4))
    Q[0, 1, 3] = np.nan
    t_out, t_w = torch_results(t, Q, K, V)
    report = myatt.compare(t, Q, K, V)
    assert report.agree
    for r, theirs in zip(report.results, (t_out, t_w)):
        assert r.nonfinite_same == np.count_nonzero(np.isnan(theirs)) > 0
        assert r.nonfinite_differ == 0 and r.mismatched == 0 and np.isfinite(r.max_abs_err)
        if r.worst_index is not None:
            assert r.myatt_value != r.torch_value
    text = str(report)
    assert "nan/inf same" in text and "NaN on both sides agrees (equal_nan=True)" in text

    strict = myatt.compare(t, Q, K, V, equal_nan=False)   # assert_close's own default
    assert not strict.agree
    for r, theirs in zip(strict.results, (t_out, t_w)):
        assert r.mismatched == np.count_nonzero(np.isnan(theirs))
        assert np.isnan(theirs[r.worst_index]) and np.isnan(r.myatt_value)
    assert "equal_nan=False" in str(strict)


def test_nan_or_inf_on_one_side_is_the_worst_mismatch(rng):
    t = seed_module(np.float64)
    Q, K, V = seed_inputs(rng)
    m = myatt.MyAtt.from_torch(t)
    for bad in (np.nan, np.inf):
        def spoilt(q, k, v):
            out, w = m(q, k, v)
            out[0, 2, 7] = bad
            return out, w

        report = myatt.compare(t, Q, K, V, module=spoilt)
        out = report["output"]
        assert not report.agree and report["attn_weights"].agree
        assert out.nonfinite_differ == 1 and out.nonfinite_same == 0 and out.mismatched == 1
        assert out.worst_index == (0, 2, 7)
        assert np.isfinite(out.torch_value) and not np.isfinite(out.myatt_value)
        assert np.isfinite(out.max_abs_err)
        assert "1 NaN/inf on one side only" in str(report)


class WithDropout(torch.nn.Module):
    """The tutorial's MyAtt with dropout on its output (as a user's model might have)."""

    def __init__(self, inner, p):
        super().__init__()
        self.inner, self.drop = inner, torch.nn.Dropout(p)

    def forward(self, Q, K, V):
        out, w = self.inner(Q, K, V)
        return self.drop(out), w


def test_training_mode_dropout_is_compared_in_eval_mode(rng):
    inner = seed_module(np.float64)
    t = WithDropout(inner, 0.5).train()
    Q, K, V = seed_inputs(rng)
    report = myatt.compare(t, Q, K, V, module=myatt.MyAtt.from_torch(inner))
    assert report.agree   # against random masks, half the outputs would be zeros
    assert len(report.notes) == 1 and "eval mode" in report.notes[0]
    assert "drop (p=0.5)" in report.notes[0] and "note: " in str(report)
    assert t.training and t.drop.training and inner.training   # restored
    t.eval()
    report = myatt.compare(t, Q, K, V, module=myatt.MyAtt.from_torch(inner))
    assert report.agree and report.notes == [] and not t.training
    t.train()
    t.drop.p = 0.0   # no dropout: nothing to say, the mode is left alone
    assert myatt.compare(t, Q, K, V, module=myatt.MyAtt.from_torch(inner)).notes == []


def test_plain_callable_names_and_float64_note(rng):
    """compare(fn, ..., module=m): the results are named after the myatt MyAtt, and the
    report says why the float64 columns are absent (fn runs a float32 module)."""
    t = seed_module(np.float32)
    Q, K, V = seed_inputs(rng)
    report = myatt.compare(lambda q, k, v: t(q, k, v), Q, K, V,
                           module=myatt.MyAtt.from_torch(t))
    assert report.agree
    assert [r.name for r in report.results] == ["output", "attn_weights"]
    assert all(r.err64_myatt is None for r in report.results)
    assert len(report.notes) == 1
    assert "no float64 columns" in report.notes[0] and "RuntimeError" in report.notes[0]
    assert "myatt vs f64" not in str(report) and "no float64 columns" in str(report)
    quiet = myatt.compare(lambda q, k, v: t(q, k, v), Q, K, V, module=myatt.MyAtt.from_torch(t),
                          float64_reference=False)
    assert quiet.notes == []
