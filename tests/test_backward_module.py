"""Linear.backward and MyAtt.backward against torch.autograd.grad on the seed's torch module
holding the same weights, and (float64, small sizes) against central finite differences
of myatt's own forward.

The loss is the spec's: sum(output * grad_output) + sum(attn_weights * grad_attn_weights),
the second term left out when grad_attn_weights is None. Upstream gradients are random
(never ones) and scaled by 1/sqrt(S), as the gradient of a mean over the S rows would be,
so that the parameter gradients (sums over S) stay unit-scale in float32 too.
"""
import threading

import numpy as np
import pytest
import torch

import myatt
from helpers import assert_same_bits, torch_runs_our_softmax
from mkl_order import torch_sums_in_our_order
from oracle import assert_matches, to_torch, torch_linear, torch_myatt
from test_backward_kernels import assert_fd, fd_grad
from test_layouts import LAYOUTS, Guard
from test_myatt import SEED_SIZES, SIZE_CASES, inputs

KEYS = ["Q", "K", "V", "attn.weight", "attn.bias", "attn_combine.weight", "attn_combine.bias"]


def upstream(rng, m, S, dtype, with_ga):
    scale = 1 / np.sqrt(max(S, 1))
    go = (scale * rng.standard_normal((1, S, m.output_size))).astype(dtype)
    ga = (scale * rng.standard_normal((S, m.value_size1))).astype(dtype) if with_ga else None
    return go, ga


def torch_myatt_grads(m, Q, K, V, go, ga):
    """torch.autograd.grad of the spec's loss for the seed module with m's weights."""
    dtype = np.dtype(m.dtype)
    t = torch_myatt(m)
    tQ, tK, tV = (to_torch(x, dtype).requires_grad_(True) for x in (Q, K, V))
    out, attn = t(tQ, tK, tV)
    loss = (out * to_torch(go, dtype)).sum()
    if ga is not None:
        loss = loss + (attn * to_torch(ga, dtype)).sum()
    params = dict(t.named_parameters())
    grads = torch.autograd.grad(loss, [tQ, tK, tV] + list(params.values()), allow_unused=True)
    result = dict(zip(["Q", "K", "V"] + list(params), grads))
    # a V (or parameter) that takes no part (S == 0, empty sizes) has grad None in torch: zeros
    for k, x in zip(["Q", "K", "V"] + list(params), [tQ, tK, tV] + list(params.values())):
        if result[k] is None:
            result[k] = torch.zeros_like(x)
    return result


def check(m, Q, K, V, go, ga):
    g = m.backward(Q, K, V, go, ga)
    assert sorted(g) == sorted(KEYS)
    expected = torch_myatt_grads(m, Q, K, V, go, ga)
    for k in KEYS:
        assert g[k].dtype == m.dtype, k
        assert_matches(g[k], expected[k])
    return g


# --------------------------------------------------------------------------- #
# MyAtt.backward vs torch
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("with_ga", [False, True], ids=["no_ga", "ga"])
def test_seed_demo_shapes(rng, dtype, with_ga):
    m = myatt.MyAtt(*SEED_SIZES, dtype=dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 1, dtype)
    check(m, Q, K, V, *upstream(rng, m, 1, dtype, with_ga))


@pytest.mark.parametrize("with_ga", [False, True], ids=["no_ga", "ga"])
@pytest.mark.parametrize("sizes", SIZE_CASES, ids=str)
@pytest.mark.parametrize("S", [0, 1, 7, 300])
def test_sizes(rng, dtype, sizes, S, with_ga):
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q, K, V = inputs(rng, sizes, S, dtype)
    check(m, Q, K, V, *upstream(rng, m, S, dtype, with_ga))


@pytest.mark.kernel_path
@pytest.mark.parametrize("with_ga", [False, True], ids=["no_ga", "ga"])
@pytest.mark.parametrize("sizes,S", [((48, 36, 48, 72, 36), 64), ((240, 264, 252, 264, 240), 128),
                                     ((48, 36, 96, 48, 48), 200)], ids=str)
def test_torchs_bits(rng, dtype, sizes, S, with_ga):
    """Where MKL keeps to its main kernel's order (rows in whole groups of 4, columns in
    whole groups of 12: docs/torch-summation-order.md) and torch runs the softmax kernel
    our path reproduces, every gradient is torch autograd's, bit for bit: the products
    sum in MKL's order, the softmax backward and the bias sums are torch's kernels, and
    the two gradients of Q (and of attn_weights) are added as autograd adds them."""
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q, K, V = inputs(rng, sizes, S, dtype)
    go, ga = upstream(rng, m, S, dtype, with_ga)
    g = check(m, Q, K, V, go, ga)
    if torch_runs_our_softmax() and torch_sums_in_our_order(dtype) and torch.get_num_threads() > 1:
        expected = torch_myatt_grads(m, Q, K, V, go, ga)
        for k in KEYS:
            assert_same_bits(g[k], expected[k])


@pytest.mark.parametrize("S", [2, 3, 17, 64, 65, 257])
def test_sequence_lengths(rng, dtype, S):
    """Row blocks of the fused kernel: one, exactly full, one row over, several."""
    m = myatt.MyAtt(*SEED_SIZES, dtype=dtype)
    check(m, *inputs(rng, SEED_SIZES, S, dtype), *upstream(rng, m, S, dtype, True))


@pytest.mark.parametrize("with_ga", [False, True], ids=["no_ga", "ga"])
@pytest.mark.parametrize("Bq,Bk", [(2, 1), (1, 3), (3, 2), (4, 4)])
def test_batches_beyond_item_0_get_zeros(rng, dtype, Bq, Bk, with_ga):
    m = myatt.MyAtt(*SEED_SIZES, dtype=dtype)
    Q, K, V = inputs(rng, SEED_SIZES, 6, dtype, Bq=Bq, Bk=Bk)
    g = check(m, Q, K, V, *upstream(rng, m, 6, dtype, with_ga))
    assert g["Q"].shape == Q.shape and g["K"].shape == K.shape
    assert not g["Q"][1:].any() and not g["K"][1:].any()
    assert g["Q"][0].any() and g["K"][0].any()


def test_hundreds_with_batches(rng, dtype):
    sizes = (129, 96, 300, 257, 200)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q, K, V = inputs(rng, sizes, 257, dtype, Bq=2, Bk=3)
    check(m, Q, K, V, *upstream(rng, m, 257, dtype, True))


def test_query_feature_size_quirk(rng, dtype):
    """A Q feature size other than query_size, accepted when the sums match (decisions 9)."""
    m = myatt.MyAtt(32, 32, 8, 16, 5, dtype=dtype)
    for dq in (40, 24, 0, 48):
        Q = rng.standard_normal((2, 3, dq)).astype(dtype)
        K = rng.standard_normal((1, 3, 64 - dq)).astype(dtype)
        V = rng.standard_normal((1, 8, 48 - dq)).astype(dtype)
        check(m, Q, K, V, *upstream(rng, m, 3, dtype, True))


@pytest.mark.parametrize("in_dtype", [np.float64, np.float32, np.int64, np.bool_, np.float16],
                         ids=lambda d: np.dtype(d).name)
def test_inputs_converted_to_module_dtype(rng, dtype, in_dtype):
    sizes = (5, 6, 7, 8, 9)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q, K, V = ((rng.standard_normal(s) * 2).astype(in_dtype)
               for s in ((1, 4, 5), (1, 4, 6), (1, 7, 8)))
    go, ga = upstream(rng, m, 4, in_dtype, True)
    g = m.backward(Q, K, V, go, ga)
    expected = torch_myatt_grads(m, Q, K, V, go, ga)
    for k in KEYS:
        assert g[k].dtype == dtype
        assert_matches(g[k], expected[k])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layouts(rng, dtype, layout):
    sizes = (4, 5, 6, 7, 3)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q, K, V = inputs(rng, sizes, 5, dtype, Bq=2)
    go, ga = upstream(rng, m, 5, dtype, True)
    objs = [LAYOUTS[layout](a) for a in (Q, K, V, go, ga)]
    guard = Guard(*objs)
    g = m.backward(*objs)
    guard.check(*g.values())
    expected = m.backward(Q, K, V, go, ga)
    for k in KEYS:
        np.testing.assert_array_equal(g[k], expected[k], strict=True)


def test_keywords_and_none(rng, dtype):
    m = myatt.MyAtt(3, 4, 5, 6, 2, dtype=dtype)
    Q, K, V = inputs(rng, (3, 4, 5, 6, 2), 4, dtype)
    go, ga = upstream(rng, m, 4, dtype, True)
    a = m.backward(Q, K, V, go)
    b = m.backward(Q=Q, K=K, V=V, grad_output=go, grad_attn_weights=None)
    c = m.backward(Q, K, V, go, np.zeros_like(ga))
    for k in KEYS:
        np.testing.assert_array_equal(a[k], b[k], strict=True)
        np.testing.assert_array_equal(a[k], c[k], strict=True)


def test_backward_changes_nothing(rng, dtype):
    m = myatt.MyAtt(3, 4, 5, 6, 2, dtype=dtype)
    before = {k: v.copy() for k, v in m.state_dict().items()}
    Q, K, V = inputs(rng, (3, 4, 5, 6, 2), 4, dtype)
    out0, attn0 = m(Q, K, V)
    g = m.backward(Q, K, V, *upstream(rng, m, 4, dtype, True))
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k], strict=True)
        assert not np.shares_memory(g[k], getattr(getattr(m, k.split(".")[0]), k.split(".")[1]))
    out1, attn1 = m(Q, K, V)
    np.testing.assert_array_equal(out0, out1, strict=True)


def test_threads_and_concurrency(rng, dtype):
    """Results do not depend on the thread count, nor on other Python threads running."""
    sizes = (40, 30, 70, 50, 20)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q, K, V = inputs(rng, sizes, 150, dtype)
    go, ga = upstream(rng, m, 150, dtype, True)
    n = myatt.get_num_threads()
    try:
        myatt.set_num_threads(1)
        ref = m.backward(Q, K, V, go, ga)
        myatt.set_num_threads(3)
        again = m.backward(Q, K, V, go, ga)
    finally:
        myatt.set_num_threads(n)
    results = [None] * 4

    def work(i):
        results[i] = m.backward(Q, K, V, go, ga)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in [again] + results:
        for k in KEYS:
            np.testing.assert_array_equal(r[k], ref[k], strict=True)


def test_finite_differences():
    """float64, small sizes, batches of Q and K beyond 0: torch-free second oracle."""
    rng = np.random.default_rng(7)
    sizes = (3, 2, 4, 5, 3)
    m = myatt.MyAtt(*sizes, dtype=np.float64)
    Q, K, V = inputs(rng, sizes, 5, np.float64, Bq=2, Bk=2)
    go = rng.standard_normal((1, 5, 3))
    ga = rng.standard_normal((5, 4))
    for with_ga in (False, True):
        g = m.backward(Q, K, V, go, ga if with_ga else None)

        def loss():
            out, attn = m(Q, K, V)
            return float((out * go).sum() + ((attn * ga).sum() if with_ga else 0.0))

        for name, x in [("Q", Q), ("K", K), ("V", V)]:
            assert_fd(g[name], fd_grad(loss, x))
        for layer in ("attn", "attn_combine"):
            lin = getattr(m, layer)
            for p in ("weight", "bias"):
                assert_fd(g[f"{layer}.{p}"], fd_grad(loss, getattr(lin, p)))   # live views


# --------------------------------------------------------------------------- #
# Errors
# --------------------------------------------------------------------------- #
def _args(rng):
    m = myatt.MyAtt(3, 4, 5, 6, 2)
    Q, K, V = inputs(rng, (3, 4, 5, 6, 2), 4, np.float32)
    go, ga = upstream(rng, m, 4, np.float32, True)
    return m, [Q, K, V, go, ga]


@pytest.mark.parametrize("pos,bad,name", [
    (3, np.zeros((4, 2)), "grad_output"),
    (3, np.zeros((1, 4, 3)), "grad_output"),
    (3, np.zeros((2, 4, 2)), "grad_output"),
    (4, np.zeros((4, 6)), "grad_attn_weights"),
    (4, np.zeros((1, 4, 5)), "grad_attn_weights"),
    (0, np.zeros((1, 3, 3)), "Q"),
    (2, np.zeros((2, 5, 6)), "V"),
])
def test_bad_shapes(rng, pos, bad, name):
    m, args = _args(rng)
    args[pos] = bad
    with pytest.raises(ValueError, match=name) as info:
        m.backward(*args)
    assert str(bad.shape).replace(" ", "") in str(info.value).replace(" ", "")


@pytest.mark.parametrize("pos,name", [(0, "Q"), (3, "grad_output"), (4, "grad_attn_weights")])
@pytest.mark.parametrize("bad", [np.ones((1, 4, 2), dtype=np.complex64), object(), "x"],
                         ids=["complex", "object", "str"])
def test_bad_types(rng, pos, name, bad):
    m, args = _args(rng)
    args[pos] = bad
    with pytest.raises(TypeError, match=name):
        m.backward(*args)


def test_wrong_argument_count(rng):
    m, args = _args(rng)
    with pytest.raises(TypeError):
        m.backward(*args[:3])
    with pytest.raises(TypeError):
        m.backward(*args, None)


# --------------------------------------------------------------------------- #
# Linear.backward
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("batch,in_f,out_f", [((), 5, 3), ((7,), 17, 65), ((2, 3), 4, 6),
                                              ((0,), 5, 3), ((4,), 0, 3), ((4,), 3, 0),
                                              ((300,), 257, 129), ((2, 65), 64, 1)], ids=str)
def test_linear_backward(rng, dtype, batch, in_f, out_f, with_bias):
    lin = myatt.Linear(in_f, out_f, bias=with_bias, dtype=dtype)
    m = int(np.prod(batch)) if batch else 1
    x = rng.standard_normal(batch + (in_f,)).astype(dtype)
    go = (rng.standard_normal(batch + (out_f,)) / np.sqrt(max(m, 1))).astype(dtype)
    g = lin.backward(x, go)
    assert sorted(g) == ["bias", "input", "weight"]
    t = torch_linear(lin)
    tx = to_torch(x, dtype).requires_grad_(True)
    params = [t.weight] + ([t.bias] if with_bias else [])
    expected = torch.autograd.grad(t(tx), [tx] + params, to_torch(go, dtype))
    assert_matches(g["input"], expected[0])
    assert_matches(g["weight"], expected[1])
    if with_bias:
        assert_matches(g["bias"], expected[2])
    else:
        assert g["bias"] is None


def test_linear_backward_converts_and_checks(rng, dtype):
    lin = myatt.Linear(4, 3, dtype=dtype)
    g = lin.backward([[1, 2, 3, 4]], np.ones((1, 3), dtype=np.int64))
    assert all(v.dtype == dtype for v in g.values())
    g2 = lin.backward(input=np.array([[1.0, 2, 3, 4]]), grad_output=np.ones((1, 3)))
    for k in g:
        np.testing.assert_array_equal(g[k], g2[k], strict=True)
    with pytest.raises(ValueError, match="input"):
        lin.backward(np.ones((2, 5)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"grad_output.*\(2, 3\).*\(3, 3\)"):
        lin.backward(np.ones((2, 4)), np.ones((3, 3)))
    with pytest.raises(TypeError, match="grad_output"):
        lin.backward(np.ones((2, 4)), np.ones((2, 3), dtype=complex))


def test_linear_backward_finite_differences(rng):
    lin = myatt.Linear(4, 3, dtype=np.float64)
    x = rng.standard_normal((2, 5, 4))
    go = rng.standard_normal((2, 5, 3))
    g = lin.backward(x, go)

    def loss():
        return float((lin(x) * go).sum())

    assert_fd(g["input"], fd_grad(loss, x))
    assert_fd(g["weight"], fd_grad(loss, lin.weight))
    assert_fd(g["bias"], fd_grad(loss, lin.bias))


# --------------------------------------------------------------------------- #
# Row blocks: the fused kernels bound their workspace (4 MiB per [R, width] panel,
# R a multiple of 64), so a wide value_size2 forces several blocks of R = 64 rows.
# --------------------------------------------------------------------------- #
WORKSPACE_BYTES = 4 << 20


@pytest.mark.parametrize("S", [64, 150])
def test_several_row_blocks(rng, dtype, S):
    v2 = WORKSPACE_BYTES // np.dtype(dtype).itemsize // 64 + 3   # R = 64 rows per block
    sizes = (5, 4, 7, v2, 3)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    Q, K, V = inputs(rng, sizes, S, dtype)
    check(m, Q, K, V, *upstream(rng, m, S, dtype, True))
    # every row of the forward is computed alone: a prefix of S gives the same bits
    out, attn = m(Q, K, V)
    out1, attn1 = m(Q[:, :S - 37], K[:, :S - 37], V)
    np.testing.assert_array_equal(out1, out[:, :S - 37], strict=True)
    np.testing.assert_array_equal(attn1, attn[:S - 37], strict=True)
