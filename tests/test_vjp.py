"""myatt.vjp: the result is the call's, bit for bit; every pullback's gradients are
torch.autograd.grad's (default tolerances) and the stateless backward's bits; a pullback
may be called twice and from several threads; changes in place after vjp (an input, a
parameter, the result) do not reach the gradients; bad cotangents and bad fn raise.
(The registry entries vjp, vjp.<fn>.pullback, <Type>.vjp.* of entry_points.py add the
bad-input, leak, thread, layout and property coverage.)"""
import re
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from entry_points import ENTRY_POINTS
from helpers import data, scaled
from oracle import assert_matches, to_torch
from test_backward_kernels import leaf, torch_grads
from test_backward_module import KEYS, torch_myatt_grads, upstream
from test_myatt import SEED_SIZES, SIZE_CASES, inputs


def same_bits(got, want):
    """Tuples / dicts of arrays (None allowed) equal bit for bit, dtypes included."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want)
        got, want = [got[k] for k in sorted(got)], [want[k] for k in sorted(want)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            np.testing.assert_array_equal(g, w, strict=True)


# --------------------------------------------------------------------------- #
# MyAtt
# --------------------------------------------------------------------------- #
def check_myatt(rng, m, Q, K, V, with_ga):
    (out, aw), pull = myatt.vjp(m, Q, K, V)
    out0, aw0 = m(Q, K, V)
    same_bits((out, aw), (out0, aw0))
    S = Q.shape[1]
    go, ga = upstream(rng, m, S, np.dtype(m.dtype), with_ga)
    g = pull(go, ga)
    expected = torch_myatt_grads(m, Q, K, V, go, ga)
    for k in KEYS:
        assert g[k].dtype == m.dtype, k
        assert_matches(g[k], expected[k])
    same_bits(g, m.backward(Q, K, V, go, ga))
    return pull, go, ga, g


@pytest.mark.parametrize("with_ga", [False, True], ids=["no_ga", "ga"])
@pytest.mark.parametrize("sizes", [SEED_SIZES] + SIZE_CASES, ids=str)
@pytest.mark.parametrize("S", [0, 1, 7, 300])
def test_myatt(rng, dtype, sizes, S, with_ga):
    m = myatt.MyAtt(*sizes, dtype=dtype)
    check_myatt(rng, m, *inputs(rng, sizes, S, dtype), with_ga)


@pytest.mark.parametrize("S", [64, 150])
def test_myatt_several_row_blocks(rng, dtype, S):
    """A value_size2 wide enough for R = 64 rows per block of the backward: the
    pullback reads the kept panels block by block, the same bits as the stateless one."""
    v2 = (4 << 20) // np.dtype(dtype).itemsize // 64 + 3
    sizes = (5, 4, 7, v2, 3)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    check_myatt(rng, m, *inputs(rng, sizes, S, dtype), True)


@pytest.mark.parametrize("layout", ["c", "every_other_column"])
def test_myatt_copies_by_threads(rng, dtype, layout):
    """Q[0] of 8.4 MB (float32) or more: vjp copies it in bands of rows on every thread
    (kernels/runtime/copy.c), column by column when its columns are strided; the pullback's
    gradients are the stateless backward's bits, and torch's."""
    sizes = (1024, 3, 5, 4, 6)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    S = 2051   # rows that do not divide into equal bands
    Q, K, V = inputs(rng, sizes, S, dtype)
    if layout == "every_other_column":
        Q = np.repeat(Q, 2, axis=2)[:, :, ::2]
    saved = myatt.get_num_threads()
    try:
        myatt.set_num_threads(2)
        check_myatt(rng, m, Q, K, V, True)
    finally:
        myatt.set_num_threads(saved)


@pytest.mark.parametrize("Bq,Bk", [(2, 1), (1, 3)])
def test_myatt_batches_and_conversion(rng, dtype, Bq, Bk):
    """Batch items beyond 0 get zero gradients; float64 / strided inputs are converted as
    the forward converts them."""
    m = myatt.MyAtt(*SEED_SIZES, dtype=dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 6, np.float64, Bq=Bq, Bk=Bk)
    pull, *_ , g = check_myatt(rng, m, Q[:, :, :], np.asfortranarray(K), V, True)
    assert g["Q"].shape == Q.shape and not g["Q"][1:].any() and not g["K"][1:].any()


def test_myatt_subclass_and_keywords(rng, dtype):
    class Sub(myatt.MyAtt):
        pass
    m = Sub(*SEED_SIZES, dtype=dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 5, dtype)
    (out, aw), pull = myatt.vjp(m, Q=Q, K=K, V=V)
    same_bits((out, aw), m(Q, K, V))
    go, ga = upstream(rng, m, 5, dtype, True)
    same_bits(pull(grad_output=go, grad_attn_weights=ga), m.backward(Q, K, V, go, ga))
    same_bits(pull(go, grad_attn_weights=None), m.backward(Q, K, V, go))


# --------------------------------------------------------------------------- #
# linear, softmax, bmm, Linear
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("batch,in_f,out_f", [((), 3, 4), ((5,), 17, 64), ((2, 3), 65, 1),
                                              ((0,), 3, 2), ((4,), 257, 65)])
def test_linear(rng, dtype, batch, in_f, out_f, with_bias):
    x = data(rng, batch + (in_f,), dtype)
    w = scaled(rng, (out_f, in_f), dtype, in_f)
    b = data(rng, (out_f,), dtype) if with_bias else None
    y, pull = myatt.vjp(myatt.linear, x, w, b)
    same_bits((y,), (myatt.linear(x, w, b),))
    go = scaled(rng, y.shape, dtype, max(int(np.prod(batch)), 1))
    got = pull(go)
    expected = torch_grads(F.linear, (leaf(x, dtype), leaf(w, dtype),
                                      leaf(b, dtype) if with_bias else None), to_torch(go, dtype))
    for g, e in zip(got, expected):
        assert_matches(g, e)
    assert (got[2] is None) == (not with_bias)
    same_bits(got, myatt.linear_backward(go, x, w, b))


@pytest.mark.parametrize("shape,dim", [((4, 6), -1), ((3, 5, 7), 1), ((2, 3, 4), 0),
                                       ((1, 257), -1), ((0, 3), -1), ((5,), 0)])
def test_softmax(rng, dtype, shape, dim):
    x = 3 * data(rng, shape, dtype)
    y, pull = myatt.vjp(myatt.softmax, x, dim)
    same_bits((y,), (myatt.softmax(x, dim),))
    go = data(rng, shape, dtype)
    got = pull(go)
    assert isinstance(got, tuple) and len(got) == 1
    tx = leaf(x, dtype)
    (expected,) = torch_grads(lambda t: torch.softmax(t, dim), (tx,), to_torch(go, dtype))
    assert_matches(got[0], expected)
    same_bits(got, (myatt.softmax_backward(go, y, dim),))
    # dim by keyword, and the default
    _, pull2 = myatt.vjp(myatt.softmax, x, dim=dim)
    same_bits(pull2(go), got)
    if dim == -1:
        same_bits(myatt.vjp(myatt.softmax, x)[1](go), got)


@pytest.mark.parametrize("b,n,m,p", [(1, 1, 1, 1), (2, 3, 17, 5), (3, 64, 65, 7), (0, 2, 3, 4),
                                     (2, 0, 3, 4)])
def test_bmm(rng, dtype, b, n, m, p):
    a = data(rng, (b, n, m), dtype)
    c = scaled(rng, (b, m, p), dtype, m)
    y, pull = myatt.vjp(myatt.bmm, a, c)
    same_bits((y,), (myatt.bmm(a, c),))
    go = data(rng, y.shape, dtype)
    got = pull(go)
    expected = torch_grads(torch.bmm, (leaf(a, dtype), leaf(c, dtype)), to_torch(go, dtype))
    for g, e in zip(got, expected):
        assert_matches(g, e)
    same_bits(got, myatt.bmm_backward(go, a, c))


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_layer(rng, dtype, with_bias):
    class Sub(myatt.Linear):
        pass
    for cls in (myatt.Linear, Sub):
        lin = cls(17, 5, bias=with_bias, dtype=dtype)
        x = data(rng, (3, 4, 17), np.float64)          # converted to the layer's dtype
        y, pull = myatt.vjp(lin, x)
        same_bits((y,), (lin(x),))
        go = data(rng, y.shape, dtype)
        got = pull(go)
        t = torch.nn.Linear(17, 5, bias=with_bias, dtype=to_torch(lin.weight, dtype).dtype)
        with torch.no_grad():
            t.weight.copy_(to_torch(lin.weight, dtype))
            if with_bias:
                t.bias.copy_(to_torch(lin.bias, dtype))
        tx = leaf(x, dtype)
        wanted = [tx, t.weight] + ([t.bias] if with_bias else [])
        expected = torch.autograd.grad((t(tx) * to_torch(go, dtype)).sum(), wanted)
        assert_matches(got["input"], expected[0])
        assert_matches(got["weight"], expected[1])
        if with_bias:
            assert_matches(got["bias"], expected[2])
        same_bits(got, lin.backward(x, go))
        same_bits(pull(grad_output=go), got)


def test_functions_keywords_and_none_bias(rng, dtype):
    """The arguments as the functions take them: keywords, a bias of None given."""
    x, w = data(rng, (3, 4), dtype), data(rng, (2, 4), dtype)
    go = data(rng, (3, 2), dtype)
    want = myatt.linear_backward(go, x, w)
    for args, kw in [((x, w, None), {}), ((), {"input": x, "weight": w, "bias": None}),
                     ((x,), {"weight": w})]:
        y, pull = myatt.vjp(myatt.linear, *args, **kw)
        same_bits((y,), (myatt.linear(x, w),))
        same_bits(pull(go), want)
    a, c = data(rng, (2, 3, 4), dtype), data(rng, (2, 4, 5), dtype)
    gb = data(rng, (2, 3, 5), dtype)
    _, pull = myatt.vjp(myatt.bmm, input=a, mat2=c)
    same_bits(pull(gb), myatt.bmm_backward(gb, a, c))
    y, pull = myatt.vjp(myatt.softmax, a, dim=np.int64(1))
    same_bits((y,), (myatt.softmax(a, 1),))
    same_bits(pull(a), (myatt.softmax_backward(a, y, 1),))
    with pytest.raises(TypeError, match="mat2"):
        myatt.vjp(myatt.bmm, input=a)


def test_float64_cotangent_promotes_as_the_stateless_backward(rng):
    x, w = data(rng, (3, 4), np.float32), data(rng, (2, 4), np.float32)
    y, pull = myatt.vjp(myatt.linear, x, w)
    go = data(rng, y.shape, np.float64)
    same_bits(pull(go), myatt.linear_backward(go, x, w))
    assert pull(go)[0].dtype == np.float64
    lin = myatt.Linear(4, 2)
    y, pull = myatt.vjp(lin, x)
    same_bits(pull(go), lin.backward(x, go))                 # the layer's dtype
    same_bits(pull(go.tolist()), lin.backward(x, go))        # array-likes


# --------------------------------------------------------------------------- #
# Twice, threads, in-place changes
# --------------------------------------------------------------------------- #
def _all_pullbacks(rng, dtype):
    """(pullback, cotangents, expected gradients) for each kind of fn."""
    x, w, b = data(rng, (5, 6), dtype), data(rng, (3, 6), dtype), data(rng, (3,), dtype)
    a, c = data(rng, (2, 4, 6), dtype), data(rng, (2, 6, 3), dtype)
    lin = myatt.Linear(6, 3, dtype=dtype)
    m = myatt.MyAtt(*SEED_SIZES, dtype=dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 9, dtype)
    go_l, go_b = data(rng, (5, 3), dtype), data(rng, (2, 4, 3), dtype)
    go_s = data(rng, (5, 6), dtype)
    go, ga = upstream(rng, m, 9, dtype, True)
    y = myatt.softmax(x)
    return [
        (myatt.vjp(myatt.linear, x, w, b)[1], (go_l,), myatt.linear_backward(go_l, x, w, b)),
        (myatt.vjp(myatt.softmax, x)[1], (go_s,), (myatt.softmax_backward(go_s, y),)),
        (myatt.vjp(myatt.bmm, a, c)[1], (go_b,), myatt.bmm_backward(go_b, a, c)),
        (myatt.vjp(lin, x)[1], (go_l,), lin.backward(x, go_l)),
        (myatt.vjp(m, Q, K, V)[1], (go, ga), m.backward(Q, K, V, go, ga)),
    ]


def test_called_twice_and_from_threads(rng, dtype):
    for pull, cot, want in _all_pullbacks(rng, dtype):
        same_bits(pull(*cot), want)
        same_bits(pull(*cot), want)                        # the saved panels are unchanged
        errors, results = [], []

        def work():
            try:
                for _ in range(3):
                    results.append(pull(*cot))
            except Exception as e:                     # noqa: BLE001 (reported below)
                errors.append(e)
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for r in results:
            same_bits(r, want)


def test_in_place_changes_after_vjp(rng, dtype):
    """The pullback gives the gradients at the values the forward saw: inputs, the
    parameters and the returned results modified in place afterwards change nothing."""
    x, w, b = data(rng, (5, 6), dtype), data(rng, (3, 6), dtype), data(rng, (3,), dtype)
    go = data(rng, (5, 3), dtype)
    want = myatt.linear_backward(go, x, w, b)
    y, pull = myatt.vjp(myatt.linear, x, w, b)
    x += 1
    w *= 2
    y[:] = 0
    same_bits(pull(go), want)

    xs = data(rng, (4, 6), dtype)
    gs = data(rng, (4, 6), dtype)
    want = (myatt.softmax_backward(gs, myatt.softmax(xs)),)
    y, pull = myatt.vjp(myatt.softmax, xs)
    y[:] = 0.5                                               # the result handed out
    same_bits(pull(gs), want)

    a, c = data(rng, (2, 4, 6), dtype), data(rng, (2, 6, 3), dtype)
    gb = data(rng, (2, 4, 3), dtype)
    want = myatt.bmm_backward(gb, a, c)
    _, pull = myatt.vjp(myatt.bmm, a, c)
    a[:] = 0
    c[:] = 1
    same_bits(pull(gb), want)

    lin = myatt.Linear(6, 3, dtype=dtype)
    want = lin.backward(x, go)
    _, pull = myatt.vjp(lin, x)
    x[:] = 3
    lin.weight = np.zeros((3, 6))
    lin.bias[...] = 7                                        # the live parameter view
    same_bits(pull(go), want)

    m = myatt.MyAtt(*SEED_SIZES, dtype=dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 9, dtype)
    g1, g2 = upstream(rng, m, 9, dtype, True)
    want = m.backward(Q, K, V, g1, g2)
    (out, aw), pull = myatt.vjp(m, Q, K, V)
    Q[:] = 0
    K *= 2
    V += 1
    out[:] = 0
    aw[:] = 0
    m.attn.weight[...] = 0
    m.attn_combine.bias[...] = 1
    m.load_state_dict({k: v + 1 for k, v in m.state_dict().items()})
    same_bits(pull(g1, g2), want)


class _Drifting:
    """An array-like whose every conversion gives new values (as a list that
    another thread keeps changing)."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        self.a = self.a + 1
        return self.a if dtype is None else self.a.astype(dtype)


def test_forward_and_pullback_read_the_same_values(rng, dtype):
    """The pullback's gradients are those at the values the result was computed
    from: an input converted once, a layer's own forward on the copies it keeps
    (a subclass's __call__ is not called, as for MyAtt and MultiheadAttention)."""
    go = data(rng, (5, 6), dtype)
    w = np.eye(6, dtype=dtype)                       # y is the x the forward read
    x = _Drifting(data(rng, (5, 6), dtype))
    y, pull = myatt.vjp(myatt.linear, x, w)
    same_bits(pull(go), myatt.linear_backward(go, y, w))
    a = _Drifting(data(rng, (1, 5, 6), dtype))
    y, pull = myatt.vjp(myatt.bmm, a, w[None])
    same_bits(pull(go[None]), myatt.bmm_backward(go[None], y, w[None]))

    class Rogue(myatt.Linear):
        def __call__(self, x):                       # another shape, and the weights gone
            self.weight[...] = 0
            return np.zeros(1, dtype)

    lin = Rogue(6, 50_000, dtype=dtype)
    saved = lin.weight.copy()
    x = data(rng, (2, 6), dtype)
    y, pull = myatt.vjp(lin, x)
    same_bits(lin.weight, saved)
    same_bits((y,), (myatt.Linear.__call__(lin, x),))
    with pytest.raises(ValueError, match=r"grad_output must have shape \(2, 50000\)"):
        pull(np.ones(1, dtype))
    go = data(rng, (2, 50_000), dtype)
    same_bits(pull(go), lin.backward(x, go))
    x = _Drifting(data(rng, (2, 6), dtype))
    lin = myatt.Linear(6, 6, bias=False, dtype=dtype)
    lin.weight = np.eye(6)
    y, pull = myatt.vjp(lin, x)
    same_bits(pull(go[:, :6]), lin.backward(y, go[:, :6]))


# --------------------------------------------------------------------------- #
# repr, errors
# --------------------------------------------------------------------------- #
def test_repr_and_attributes(dtype):
    m = myatt.MyAtt(1, 4, 1, 3, 2, dtype=dtype)
    _, pull = myatt.vjp(m, np.ones((1, 5, 1)), np.ones((1, 5, 4)), np.ones((1, 1, 3)))
    r = repr(pull)
    name = np.dtype(dtype).name
    for part in (f"attn_weights (5, 1) {name}", f"applied (5, 3) {name}", f"Q[0] (5, 1) {name}",
                 "attn_combine.bias (2,)", f"{pull.nbytes} bytes"):
        assert part in r
    assert r.startswith("Pullback(MyAtt: ") and pull.fn == "MyAtt"
    item = np.dtype(dtype).itemsize
    assert pull.nbytes == item * (5 + 20 + 3 + 5 + 1 + 2 * 4 + 2 + 5 + 15)
    _, pull = myatt.vjp(myatt.softmax, np.ones((2, 3), dtype), 0)
    assert repr(pull) == f"Pullback(softmax: output (2, 3) {name}, dim=0; {6 * item} bytes)"
    assert type(pull) is myatt.Pullback
    with pytest.raises(TypeError):
        myatt.Pullback()


# What the registry differentiates through vjp (its vjp.<fn>.* and <Type>.vjp.* entries)
DIFFERENTIABLE = sorted({ep.name.split(".")[1] for ep in ENTRY_POINTS
                         if ep.name.startswith("vjp.")})
DIFFERENTIABLE_TYPES = sorted({ep.name.split(".")[0] for ep in ENTRY_POINTS
                               if ".vjp." in ep.name and not ep.name.startswith("vjp.")})


@pytest.mark.parametrize("fn", [len, lambda x: x, torch.nn.Linear(2, 2), myatt.linear_backward,
                                myatt.SGD, "linear", None])
def test_vjp_refuses_other_callables(fn):
    """The message names every function and type vjp takes (as the registry has them)."""
    with pytest.raises(TypeError, match=r"vjp\(\): fn must be myatt\.") as err:
        myatt.vjp(fn, np.ones((2, 2)))
    for name in DIFFERENTIABLE:
        assert f"myatt.{name}" in str(err.value)
    for name in DIFFERENTIABLE_TYPES:
        assert re.search(rf"\b{name}\b.* object", str(err.value))
    with pytest.raises(TypeError, match="fn"):
        myatt.vjp()


def test_vjp_takes_every_function_with_a_backward():
    """vjp differentiates each kernel function that has a *_backward, and names them."""
    with_backward = sorted(n[:-len("_backward")] for n in dir(myatt) if n.endswith("_backward"))
    assert set(with_backward) <= set(DIFFERENTIABLE)
    assert {"Linear", "MyAtt", "MultiheadAttention"} <= set(DIFFERENTIABLE_TYPES)
    for name in DIFFERENTIABLE:
        assert f"myatt.{name}" in myatt.vjp.__doc__


def test_forward_errors_are_the_calls(rng):
    with pytest.raises(ValueError, match="input"):
        myatt.vjp(myatt.linear, np.ones((2, 3)), np.ones((4, 5)))
    with pytest.raises(ValueError, match="K"):
        myatt.vjp(myatt.MyAtt(*SEED_SIZES), np.ones((1, 3, 32)), np.ones((1, 4, 32)),
                  np.ones((1, 32, 64)))
    with pytest.raises(TypeError):
        myatt.vjp(myatt.bmm, np.ones((1, 2, 2)))


def test_bad_cotangents(rng):
    m = myatt.MyAtt(3, 4, 5, 6, 32)
    (out, aw), pull = myatt.vjp(m, *inputs(rng, (3, 4, 5, 6, 32), 4, np.float32))
    with pytest.raises(ValueError, match=r"^pullback\(\): grad_output must have shape "
                                         r"\(1, 4, 32\), got \(1, 4, 31\)$"):
        pull(np.ones((1, 4, 31)))
    with pytest.raises(ValueError, match=r"grad_output must have shape \(1, 4, 32\), got \(4, 32\)"):
        pull(np.ones((4, 32)))
    with pytest.raises(ValueError, match=r"grad_attn_weights must have shape \(4, 5\), got \(4, 6\)"):
        pull(np.ones((1, 4, 32)), np.ones((4, 6)))
    with pytest.raises(TypeError, match="grad_output"):
        pull(np.ones((1, 4, 32), dtype=complex))
    with pytest.raises(TypeError, match="grad_attn_weights"):
        pull(np.ones((1, 4, 32)), "x")
    with pytest.raises(TypeError):
        pull()
    with pytest.raises(TypeError):
        pull(np.ones((1, 4, 32)), None, None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'grad_weights'"):
        pull(np.ones((1, 4, 32)), grad_weights=None)
    _, pull = myatt.vjp(myatt.linear, np.ones((2, 3)), np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"pullback\(\): grad_output must have shape \(2, 4\)"):
        pull(np.ones((2, 3)))
    with pytest.raises(TypeError):               # one cotangent for a function
        pull(np.ones((2, 4)), np.ones((2, 4)))
    with pytest.raises(TypeError, match="unexpected keyword argument 'grad_attn_weights'"):
        pull(np.ones((2, 4)), grad_attn_weights=None)
    with pytest.raises(TypeError, match="grad_output"):
        pull(None)


def test_in_place_changes_of_converted_and_torch_inputs(rng, dtype):
    """Inputs the forward converts (another dtype) or reads in place (torch tensors
    sharing their memory, strided views): the pullback still holds its own copy."""
    m = myatt.MyAtt(*SEED_SIZES, dtype=dtype)
    other = np.float64 if dtype == np.float32 else np.float32
    Q, K, V = inputs(rng, SEED_SIZES, 5, other)
    Qb = np.concatenate([Q, Q], axis=0)              # batch item 0 read as a view
    tK = torch.from_numpy(K.astype(dtype))           # shares memory with the array
    go, ga = upstream(rng, m, 5, dtype, True)
    want = m.backward(Qb, tK.numpy().copy(), V, go, ga)
    _, pull = myatt.vjp(m, Qb, tK, V)
    Qb[:] = 0
    with torch.no_grad():
        tK.mul_(3)
    V[:] = 1
    same_bits(pull(go, ga), want)
