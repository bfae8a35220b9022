"""The fast call paths (vectorcall / METH_FASTCALL) and the tuple paths they fall back to.

A plain positional call (m(Q, K, V), layer(x), myatt.linear(x, w, b), ...) skips the
argument tuple; every other call (keywords, wrong counts) is parsed as before.  Both
must give the same results (checked against torch) and the same errors.
"""
import numpy as np
import pytest
import torch

import myatt
from entry_points import COMPUTING, SMALL, call_kwargs, flat, invoke
from oracle import assert_matches, run, torch_linear, torch_myatt

SEED = (32, 32, 32, 64, 32)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_myatt_call_forms_match_torch(rng, dtype):
    m = myatt.MyAtt(*SEED, dtype=dtype)
    Q = rng.standard_normal((1, 1, 32)).astype(dtype)
    K = rng.standard_normal((1, 1, 32)).astype(dtype)
    V = rng.standard_normal((1, 32, 64)).astype(dtype)
    out_t, aw_t = run(torch_myatt(m), Q, K, V, dtype=dtype)
    calls = [lambda: m(Q, K, V), lambda: m(Q, K, V=V), lambda: m(Q=Q, K=K, V=V),
             lambda: m.forward(Q, K, V), lambda: m.forward(Q, K=K, V=V),
             lambda: m.__call__(Q, K, V), lambda: myatt.MyAtt.__call__(m, Q, K, V)]
    for call in calls:
        out, aw = call()
        assert_matches(out, out_t)
        assert_matches(aw, aw_t)


@pytest.mark.parametrize("call", [
    lambda m, Q, K, V: m(Q, K),
    lambda m, Q, K, V: m(Q, K, V, V),
    lambda m, Q, K, V: m(Q, K, W=V),
    lambda m, Q, K, V: m.forward(),
    lambda m, Q, K, V: m.forward(Q, K, V, Q=Q),
])
def test_myatt_bad_calls_raise_type_error(rng, call):
    m = myatt.MyAtt(*SEED)
    Q = np.zeros((1, 1, 32), np.float32)
    V = np.zeros((1, 32, 64), np.float32)
    with pytest.raises(TypeError, match=r"MyAtt\.(__call__|forward)\(\)"):
        call(m, Q, Q, V)


def test_subclass_call_and_forward_overrides(rng):
    class Plain(myatt.MyAtt):
        pass

    class OwnCall(myatt.MyAtt):
        def __call__(self, *args):
            return "own"

    class OwnLinearCall(myatt.Linear):
        def __call__(self, x):
            return "own"

    Q = rng.standard_normal((1, 1, 32)).astype(np.float32)
    V = rng.standard_normal((1, 32, 64)).astype(np.float32)
    p = Plain(*SEED)
    out_t, aw_t = run(torch_myatt(p), Q, Q, V, dtype=np.float32)
    out, aw = p(Q, Q, V)
    assert_matches(out, out_t)
    assert_matches(aw, aw_t)
    assert OwnCall(*SEED)(Q, Q, V) == "own"
    assert OwnLinearCall(3, 2)(np.ones(3)) == "own"


def test_subclass_forward_is_what_calling_runs(rng):
    """As torch's nn.Module.__call__: m(...) runs a subclass's forward, every call form,
    with the arguments as given (keywords too); super().forward is the C one; a forward
    set on the instance counts too.  A subclass that does not override forward, and
    myatt.vjp, run the type's own."""
    class Twice(myatt.Linear):
        def forward(self, x, scale=2):
            return super().forward(x) * scale

    class Shifted(myatt.MultiheadAttention):
        def forward(self, query, key, value, **kw):
            out, w = super().forward(query, key, value, **kw)
            return out + 1, w

    class Named(myatt.MyAtt):
        def forward(self, Q, K, V):
            return "own"

    layer = Twice(4, 3, dtype=np.float64)
    x = rng.standard_normal((2, 4))
    want = run(torch_linear(layer), x, dtype=np.float64)
    for call in (lambda: layer(x), lambda: layer(x=x), lambda: layer.__call__(x),
                 lambda: myatt.Linear.__call__(layer, x), lambda: layer.forward(x)):
        assert_matches(call(), 2 * want)
    assert_matches(layer(x, 3), 3 * want)
    assert_matches(myatt.Linear.forward(layer, x), want)
    y, _ = myatt.vjp(layer, x)
    assert_matches(y, want)
    layer.forward = lambda x: "instance"
    assert layer(x) == "instance"

    m = Shifted(4, 2)
    q = rng.standard_normal((3, 4)).astype(np.float32)
    base, w = myatt.MultiheadAttention.forward(m, q, q, q, need_weights=False)
    out, w = m(q, q, q, need_weights=False)
    np.testing.assert_array_equal(out, base + 1)
    assert w is None
    assert Named(*SEED)(1, 2, 3) == "own"
    with pytest.raises(TypeError, match=r"forward\(\) missing"):
        Named(*SEED)(1, 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_call_forms_match_torch(rng, dtype):
    layer = myatt.Linear(64, 32, dtype=dtype)
    x = rng.standard_normal((2, 64)).astype(dtype)
    want = run(torch_linear(layer), x, dtype=dtype)
    for call in (lambda: layer(x), lambda: layer(input=x), lambda: layer.forward(x),
                 lambda: layer.forward(input=x)):
        assert_matches(call(), want)
    for bad in (lambda: layer(), lambda: layer(x, x), lambda: layer.forward(x, input=x),
                lambda: layer(inp=x)):
        with pytest.raises(TypeError, match=r"Linear\.(__call__|forward)\(\)"):
            bad()


def test_module_functions_call_forms_match_torch(rng):
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = (rng.standard_normal((32, 64)) / 8).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
    lin = torch.nn.functional.linear(tx, tw, tb)
    for call in (lambda: myatt.linear(x, w, b), lambda: myatt.linear(x, w, bias=b),
                 lambda: myatt.linear(input=x, weight=w, bias=b)):
        assert_matches(call(), lin)
    assert_matches(myatt.linear(x, w), torch.nn.functional.linear(tx, tw))
    assert_matches(myatt.linear(x, w, None), torch.nn.functional.linear(tx, tw))

    for call in (lambda: myatt.softmax(x), lambda: myatt.softmax(x, -1),
                 lambda: myatt.softmax(x, dim=-1), lambda: myatt.softmax(input=x)):
        assert_matches(call(), torch.softmax(tx, -1))
    assert_matches(myatt.softmax(x, 0), torch.softmax(tx, 0))

    a = rng.standard_normal((2, 3, 4))
    c = rng.standard_normal((2, 4, 5))
    want = torch.bmm(torch.from_numpy(a), torch.from_numpy(c))
    for call in (lambda: myatt.bmm(a, c), lambda: myatt.bmm(a, mat2=c),
                 lambda: myatt.bmm(input=a, mat2=c)):
        assert_matches(call(), want)

    for bad, name in ((lambda: myatt.linear(x), "linear"),
                      (lambda: myatt.linear(x, w, b, b), "linear"),
                      (lambda: myatt.softmax(), "softmax"),
                      (lambda: myatt.softmax(x, 0, 1), "softmax"),
                      (lambda: myatt.softmax(x, axis=0), "softmax"),
                      (lambda: myatt.bmm(a), "bmm"),
                      (lambda: myatt.bmm(a, c, c), "bmm")):
        with pytest.raises(TypeError, match=rf"{name}\(\)"):
            bad()


def test_fast_path_reads_strided_and_other_dtypes(rng):
    """The in-place batch-0 read covers aligned native arrays of the module's dtype;
    strided, byte-swapped, other-dtype and non-array inputs take the converting path."""
    m = myatt.MyAtt(*SEED)
    tm = torch_myatt(m)
    Qb = rng.standard_normal((3, 2, 64)).astype(np.float32)
    Q = Qb[1:, :, ::2]                      # batch item 0 at an offset, column stride 2
    K = np.asfortranarray(rng.standard_normal((2, 2, 32)))          # float64, F order
    V = rng.standard_normal((1, 32, 64)).astype(">f4")              # byte-swapped
    out_t, aw_t = run(tm, Q[:1], K[:1], V, dtype=np.float32)
    for args in ((Q, K, V), (Q, K.tolist(), torch.from_numpy(V.astype(np.float32)))):
        out, aw = m(*args)
        assert_matches(out, out_t)
        assert_matches(aw, aw_t)


def _by_name(ep, obj):
    """The callable behind a registry entry: myatt.<name>, or the object's method."""
    if ep.kind == "function":   # (a private one: the extension's)
        return getattr(myatt._myatt if ep.name.startswith("_") else myatt, ep.name)
    return getattr(obj, ep.name.split(".", 1)[1])


# (vjp's entries pass their arrays through vjp(fn, *args) and then the pullback:
# test_vjp.py tests their keywords)
@pytest.mark.parametrize("ep", [ep for ep in COMPUTING if ep.keywords], ids=lambda e: e.name)
def test_registry_argument_names_are_the_keywords(ep):
    """Every computing entry of entry_points.py takes its arguments by the names the
    registry gives them (the names its error messages use): all by keyword, or the first
    positional and the rest by keyword, give the positional call's bits; an argument
    given twice or a name it does not take is a TypeError."""
    obj = ep.target(SMALL)
    good = ep.good(SMALL)
    extra = call_kwargs(ep, SMALL)
    want = flat(invoke(ep, obj, good), ep.result)
    fn = _by_name(ep, obj)
    names = [a.name for a in ep.args]
    for got in (fn(**dict(zip(names, good)), **extra),
                fn(good[0], **dict(zip(names[1:], good[1:])), **extra)):
        got = flat(got, ep.result)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, strict=True)
    with pytest.raises(TypeError):
        fn(*good, **{names[0]: good[0]}, **extra)
    with pytest.raises(TypeError):
        fn(*good, no_such_argument=1, **extra)
