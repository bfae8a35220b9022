"""myatt.compare: the drop-in validation report against a torch module."""
import copy
import re

import numpy as np
import pytest
import torch

import helpers
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


# --------------------------------------------------------------------------- #
# Functions without module=, keyword arguments, gradients (issue 38, point 3)
# --------------------------------------------------------------------------- #
def _sdpa_inputs(rng, dtype, hq=4, hkv=2):
    q = rng.standard_normal((2, hq, 5, 8)).astype(dtype)
    k = rng.standard_normal((2, hkv, 7, 8)).astype(dtype)
    v = rng.standard_normal((2, hkv, 7, 8)).astype(dtype)
    return q, k, v


def test_functions_need_no_module(rng, dtype):
    """Each torch function with a myatt twin: its twin by default, keyword arguments passed
    to both sides (they were a TypeError), forward and every gradient."""
    _functions_agree(rng, dtype)


@pytest.mark.parametrize("dtype", [np.float16] + helpers.BFLOAT16, ids=helpers.dtype_id)
def test_functions_in_half_precision(rng, dtype):
    """The same in float16 and bfloat16 (NumPy arrays of ml_dtypes'), with the float64
    columns: each side's error against torch's float64 rerun."""
    _functions_agree(rng, dtype)
    q = rng.standard_normal((2, 3, 9, 8)).astype(dtype)
    report = myatt.compare(torch.nn.functional.scaled_dot_product_attention, q, q, q,
                           backward=True)
    assert report.dtype == np.dtype(dtype).name and report.agree, report
    for r in report.results:
        assert r.dtype == r.torch_dtype == np.dtype(dtype).name
        assert r.err64_myatt is not None and r.err64_torch is not None
    rtol = {"float16": "0.001", "bfloat16": "0.016"}[np.dtype(dtype).name]   # assert_close's
    assert f"rtol={rtol}, atol=1e-05 (assert_close defaults)" in str(report)
    # bfloat16 with float16: float32, as torch promotes them
    x = rng.standard_normal((3, 4))
    mixed = myatt.compare(torch.nn.functional.linear, x.astype(np.float16), x.astype(dtype))
    assert mixed.dtype == ("float16" if dtype == np.float16 else "float32") and mixed.agree


def _functions_agree(rng, dtype):
    F = torch.nn.functional
    q, k, v = _sdpa_inputs(rng, dtype)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((3, 6), (4, 6), (4,)))
    a, c = rng.standard_normal((2, 3, 4)).astype(dtype), rng.standard_normal((2, 4, 5)).astype(dtype)
    mask = rng.standard_normal((5, 7)).astype(dtype)
    cases = [
        (F.scaled_dot_product_attention, (q, k, v), dict(enable_gqa=True, scale=0.3),
         ["output", "grad_query", "grad_key", "grad_value"]),
        (F.scaled_dot_product_attention, (q, q, q), dict(is_causal=True), None),
        (F.scaled_dot_product_attention, (q, k, v), dict(attn_mask=mask, enable_gqa=True), None),
        (F.linear, (x, w), dict(bias=b), ["output", "grad_input", "grad_weight", "grad_bias"]),
        (F.linear, (x, w, None), {}, ["output", "grad_input", "grad_weight"]),
        (torch.softmax, (x, 0), {}, ["output", "grad_input"]),
        (F.softmax, (x,), dict(dim=-1), None),
        (torch.bmm, (a, c), {}, ["output", "grad_input", "grad_mat2"]),
    ]
    for fn, args, kw, names in cases:
        forward = myatt.compare(fn, *args, **kw)
        assert forward.agree and [r.name for r in forward.results] == ["output"], forward
        report = myatt.compare(fn, *args, backward=True, **kw)
        assert report.agree, report
        if names is not None:
            assert [r.name for r in report.results] == names
        assert all(r.within_tolerance for r in report.results)   # these sizes: no long sums


def test_multi_head_attention_forward_needs_no_module(rng, dtype):
    """F.multi_head_attention_forward against a myatt.MultiheadAttention holding the weights
    it is given: its gradients named after the function's arguments."""
    torch.manual_seed(2)
    t = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=6, add_bias_kv=True,
                                    dtype=oracle.torch_dtype(dtype))
    sd = {k: v.detach() for k, v in t.state_dict().items()}
    q = rng.standard_normal((4, 3, 8)).astype(dtype)
    k, v = rng.standard_normal((6, 3, 5)).astype(dtype), rng.standard_normal((6, 3, 6)).astype(dtype)
    pad = np.zeros((3, 6), bool)
    pad[1, 4:] = True
    args = (q, k, v, 8, 2, None, sd["in_proj_bias"], sd["bias_k"], sd["bias_v"], False, 0.0,
            sd["out_proj.weight"], sd["out_proj.bias"])
    kw = dict(key_padding_mask=pad, use_separate_proj_weight=True,
              q_proj_weight=sd["q_proj_weight"], k_proj_weight=sd["k_proj_weight"],
              v_proj_weight=sd["v_proj_weight"])
    report = myatt.compare(torch.nn.functional.multi_head_attention_forward, *args,
                           backward=True, **kw)
    assert report.agree, report
    names = [r.name for r in report.results]
    assert names[:2] == ["attn_output", "attn_weights"]
    assert set(names[2:]) == {"grad_query", "grad_key", "grad_value", "grad_in_proj_bias",
                              "grad_bias_k", "grad_bias_v", "grad_out_proj_weight",
                              "grad_out_proj_bias", "grad_q_proj_weight", "grad_k_proj_weight",
                              "grad_v_proj_weight"}
    no_weights = myatt.compare(torch.nn.functional.multi_head_attention_forward, *args,
                               need_weights=False, **kw)
    assert no_weights.agree and [r.name for r in no_weights.results] == ["attn_output"]


def test_other_callables_still_need_module():
    with pytest.raises(TypeError, match=r"no myatt twin for.*relu.*pass module="):
        myatt.compare(torch.relu, np.ones(3))
    with pytest.raises(TypeError, match=r"gradients need the myatt side"):
        myatt.compare(torch.relu, np.ones(3), module=lambda x: np.maximum(x, 0), backward=True)


@pytest.mark.parametrize("which", ["Linear", "MyAtt", "MultiheadAttention"])
def test_module_gradients(rng, dtype, which):
    """Every input's and parameter's gradient, torch's autograd against myatt's pullback,
    with cotangents of ones (backward=True) or given ones (grad_outputs, None leaving out
    attn_weights); a wrong parameter shows in the gradients that depend on it."""
    torch.manual_seed(3)
    tdt = oracle.torch_dtype(dtype)
    if which == "Linear":
        t, args, kw = torch.nn.Linear(6, 4, dtype=tdt), (rng.standard_normal((3, 6)),), {}
        want = {"grad_input", "grad_weight", "grad_bias"}
    elif which == "MyAtt":
        t, args, kw = seed_module(dtype), seed_inputs(rng), {}
        want = {"grad_Q", "grad_K", "grad_V", "grad_attn.weight", "grad_attn.bias",
                "grad_attn_combine.weight", "grad_attn_combine.bias"}
    else:
        t = torch.nn.MultiheadAttention(8, 2, dtype=tdt)
        x = rng.standard_normal((5, 2, 8))
        pad = np.zeros((2, 5), bool)
        pad[0, 3:] = True
        args, kw = (x, x, x), dict(key_padding_mask=pad, average_attn_weights=False)
        want = {"grad_query", "grad_key", "grad_value", "grad_in_proj_weight",
                "grad_in_proj_bias", "grad_out_proj.weight", "grad_out_proj.bias"}
    report = myatt.compare(t, *args, backward=True, **kw)
    assert report.agree, report
    assert {r.name for r in report.results if r.name.startswith("grad_")} == want
    outs = myatt.compare(t, *args, **kw).results
    given = [rng.standard_normal(r.shape) for r in outs[:1]] + [None] * (len(outs) - 1)
    assert myatt.compare(t, *args, grad_outputs=given, **kw).agree
    m = _twin(t)
    name = next(iter(m.state_dict()))
    changed = m.state_dict()[name]
    changed.flat[0] += 1e-3              # (a constant added to all of attn.weight cancels)
    m.load_state_dict(dict(m.state_dict(), **{name: changed}))
    wrong = myatt.compare(t, *args, module=m, backward=True, **kw)
    assert not wrong.agree
    assert any(not r.agree for r in wrong.results if r.name.startswith("grad_"))
    with pytest.raises(ValueError, match="grad_outputs"):
        myatt.compare(t, *args, grad_outputs=[None] * (len(outs) + 1), **kw)


def _twin(t):
    if isinstance(t, torch.nn.Linear):
        return myatt.Linear.from_torch(t)
    if isinstance(t, torch.nn.MultiheadAttention):
        return myatt.MultiheadAttention.from_torch(t)
    return myatt.MyAtt.from_torch(t)


def test_saturated_gradients_say_which_side_is_nearer():
    """Saturated scores (the softmax near one-hot): torch's and myatt's float32 grad_key
    differ beyond assert_close's tolerances, and myatt's is 6x nearer to float64; the report
    says so, and the row agrees by the spec's long-reduction rule. (Without the float64
    reruns, the rule cannot apply: the row differs.)"""
    rng = np.random.default_rng(8)
    q = (rng.standard_normal((1, 2, 16, 32)) * 8.0).astype(np.float32)
    k = rng.standard_normal((1, 2, 40, 32)).astype(np.float32)
    v = rng.standard_normal((1, 2, 40, 32)).astype(np.float32)
    F = torch.nn.functional
    report = myatt.compare(F.scaled_dot_product_attention, q, k, v, backward=True)
    r = report["grad_key"]
    assert not r.within_tolerance and r.agree and r.agree64
    assert r.err64_torch > 3 * r.err64_myatt
    assert "myatt is nearer to float64" in r.reason and "yes (f64)" in str(report)
    assert "1 by the float64 rule" in str(report)
    alone = myatt.compare(F.scaled_dot_product_attention, q, k, v, backward=True,
                          float64_reference=False)
    assert not alone.agree and not alone["grad_key"].agree


def test_either_side_that_would_drop_runs_in_eval_mode(rng):
    """torch's MultiheadAttention with its own dropout (no nn.Dropout submodule), myatt's
    with dropout given as module=, a function's dropout_p: both sides without dropout, the
    modes restored, a note naming the side."""
    torch.manual_seed(4)
    t = torch.nn.MultiheadAttention(8, 2, dropout=0.3)
    x = rng.standard_normal((5, 2, 8)).astype(np.float32)
    report = myatt.compare(t, x, x, x, backward=True)
    assert report.agree and len(report.notes) == 1
    assert "torch's MultiheadAttention (p=0.3)" in report.notes[0]
    assert "myatt's MultiheadAttention (p=0.3)" in report.notes[0]
    assert t.training
    t_off = copy.deepcopy(t)
    t_off.dropout = 0.0
    mine = myatt.MultiheadAttention.from_torch(t)        # it drops, torch's does not
    report = myatt.compare(t_off, x, x, x, module=mine)
    assert report.agree and "myatt's MultiheadAttention (p=0.3)" in report.notes[0]
    assert mine.training and mine.out_proj.training and t_off.training
    q, k, v = _sdpa_inputs(rng, np.float32, 2, 2)
    report = myatt.compare(torch.nn.functional.scaled_dot_product_attention, q, k, v,
                           dropout_p=0.5)
    assert report.agree and "dropout_p=0.5" in report.notes[0]
