"""tests/reference.py, the plain float64 references, against torch in float64 (forward
by torch's functions, backward by torch's autograd), at assert_close's default
tolerances, on the shapes the kernels' own tests use: empty dimensions, batches,
every softmax axis, non-finite values."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import reference
from oracle import torch_myatt

import myatt


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def close(ours, theirs, equal_nan=False):
    assert isinstance(ours, np.ndarray) and ours.dtype == np.float64
    torch.testing.assert_close(torch.from_numpy(ours.copy(order="C")), theirs.detach(),
                               equal_nan=equal_nan)


def data(rng, *shape):
    return rng.standard_normal(shape)


@pytest.mark.parametrize("batch", [(), (5,), (0,), (2, 3)], ids=str)
@pytest.mark.parametrize("in_f,out_f", [(7, 4), (0, 3), (3, 0), (64, 33)], ids=str)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_linear_and_backward(rng, batch, in_f, out_f, with_bias):
    x, w = data(rng, *batch, in_f), data(rng, out_f, in_f)
    b = data(rng, out_f) if with_bias else None
    g = data(rng, *batch, out_f)
    tx, tw = t64(x, True), t64(w, True)
    tb = t64(b, True) if with_bias else None
    ty = F.linear(tx, tw, tb)
    close(reference.linear(x, w, b), ty)
    ty.backward(t64(g))
    gx, gw, gb = reference.linear_backward(g, x, w, b)
    close(gx, tx.grad if tx.grad is not None else torch.zeros_like(tx))
    close(gw, tw.grad if tw.grad is not None else torch.zeros_like(tw))
    if with_bias:
        close(gb, tb.grad if tb.grad is not None else torch.zeros_like(tb))
    else:
        assert gb is None


SOFTMAX_CASES = [((), 0), ((), -1), ((5,), 0), ((3, 7), 0), ((3, 7), 1), ((3, 7), -1),
                 ((2, 3, 4), 1), ((2, 0, 4), 2), ((0, 3), 0), ((2, 3, 4, 5), -3)]


@pytest.mark.parametrize("shape,dim", SOFTMAX_CASES, ids=str)
def test_softmax_and_backward(rng, shape, dim):
    x = 3 * data(rng, *shape)
    g = data(rng, *shape)
    tx = t64(x, True)
    ty = torch.softmax(tx, dim)
    y = reference.softmax(x, dim)
    close(y, ty)
    ty.backward(t64(g))
    close(reference.softmax_backward(g, y, dim), tx.grad)


def test_softmax_nonfinite(rng):
    x = data(rng, 6, 5)
    x[0, 1] = np.nan
    x[1, :] = -np.inf
    x[2, 3] = np.inf
    x[3, 0] = -np.inf
    x[4, 2] = 1e300
    with np.errstate(invalid="ignore"):
        ours = reference.softmax(x, -1)
    close(ours, torch.softmax(t64(x), -1), equal_nan=True)


@pytest.mark.parametrize("b,n,m,p", [(1, 1, 1, 1), (3, 4, 5, 6), (0, 2, 3, 4), (2, 0, 3, 4),
                                     (2, 3, 0, 4), (2, 3, 4, 0), (2, 65, 33, 17)], ids=str)
def test_bmm_and_backward(rng, b, n, m, p):
    a, c, g = data(rng, b, n, m), data(rng, b, m, p), data(rng, b, n, p)
    ta, tc = t64(a, True), t64(c, True)
    ty = torch.bmm(ta, tc)
    close(reference.bmm(a, c), ty)
    ty.backward(t64(g))
    ga, gc = reference.bmm_backward(g, a, c)
    close(ga, ta.grad)
    close(gc, tc.grad)


def test_inputs_of_any_dtype_computed_in_float64(rng):
    x = data(rng, 3, 4).astype(np.float32)
    w = np.arange(8, dtype=np.int32).reshape(2, 4)
    assert reference.linear(x, w).dtype == np.float64
    close(reference.linear(x, w), F.linear(t64(x), t64(w)))
    assert reference.softmax([True, False]).dtype == np.float64


@pytest.mark.parametrize("sizes,S,Bq,Bk", [
    ((3, 4, 5, 6, 2), 4, 1, 1), ((32, 32, 32, 64, 32), 1, 1, 1), ((5, 3, 7, 4, 6), 9, 2, 3),
    ((0, 3, 4, 2, 0), 2, 1, 1), ((3, 4, 5, 6, 2), 0, 1, 1)], ids=str)
@pytest.mark.parametrize("with_ga", [False, True], ids=["no_ga", "ga"])
def test_myatt_forward_and_backward(rng, sizes, S, Bq, Bk, with_ga):
    q, k, v1, v2, o = sizes
    m = myatt.MyAtt(*sizes, dtype=np.float64)
    sd = m.state_dict()
    Q, K, V = data(rng, Bq, S, q), data(rng, Bk, S, k), data(rng, 1, v1, v2)
    go = data(rng, 1, S, o)
    ga = data(rng, S, v1) if with_ga else None
    t = torch_myatt(m)
    tQ, tK, tV = t64(Q, True), t64(K, True), t64(V, True)
    t_out, t_attn = t(tQ, tK, tV)
    out, attn = reference.myatt_forward(sd, Q, K, V)
    close(out, t_out)
    close(attn, t_attn)
    loss = (t_out * t64(go)).sum()
    if with_ga:
        loss = loss + (t_attn * t64(ga)).sum()
    loss.backward()
    grads = reference.myatt_backward(sd, Q, K, V, go, ga)
    want = {"Q": tQ.grad, "K": tK.grad, "V": tV.grad}
    want.update({name: p.grad for name, p in t.named_parameters()})
    assert sorted(grads) == sorted(want)
    for key, g in want.items():
        shape = {"Q": tQ, "K": tK, "V": tV}[key].shape if key in "QKV" else dict(
            t.named_parameters())[key].shape
        close(grads[key], g if g is not None else torch.zeros(shape, dtype=torch.float64))


def test_myatt_backward_keys_match_the_module(rng):
    """The reference's gradients have MyAtt.backward's keys and shapes."""
    m = myatt.MyAtt(3, 4, 5, 6, 2, dtype=np.float64)
    Q, K, V, go = data(rng, 2, 4, 3), data(rng, 1, 4, 4), data(rng, 1, 5, 6), data(rng, 1, 4, 2)
    ours = m.backward(Q, K, V, go)
    ref = reference.myatt_backward(m.state_dict(), Q, K, V, go)
    assert sorted(ours) == sorted(ref)
    for key in ours:
        assert ours[key].shape == ref[key].shape, key
