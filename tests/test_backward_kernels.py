"""myatt.linear_backward, softmax_backward and bmm_backward against torch.autograd.grad,
and (float64, small sizes) against central finite differences of myatt's own forward
kernels, a second oracle that does not use torch.

The upstream gradients are random (never ones: the gradient of softmax(x).sum() is
zero) and, for float32, scaled like the gradient of a mean over the summed rows, so
that every gradient is unit-scale and the comparison is at assert_close's default
tolerances (see helpers.scaled and the spec's long-reduction note).
"""
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import myatt
from entry_points import ENTRY_POINTS, SMALL, invoke
from helpers import (PROMO_DTYPES, assert_same_bits, data, dtype_id, name_re, result_dtype, scaled,
                     shape_re, torch_runs_our_softmax)
from oracle import assert_matches, to_torch
from test_layouts import LAYOUTS, Guard

AxisError = np.exceptions.AxisError


def leaf(a, dtype):
    return to_torch(a, dtype).requires_grad_(True)


def torch_grads(f, inputs, grad_output):
    """torch.autograd.grad of sum(f(*inputs) * grad_output) w.r.t. every input that requires grad."""
    out = f(*inputs)
    wanted = [x for x in inputs if x is not None and x.requires_grad]
    return torch.autograd.grad(out, wanted, grad_output, allow_unused=False)


def fd_grad(loss, x, h=1e-5):
    """Central differences of the scalar loss() w.r.t. every element of the float64 array x
    (modified in place and restored)."""
    g = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        old = x[idx]
        x[idx] = old + h
        up = loss()
        x[idx] = old - h
        down = loss()
        x[idx] = old
        g[idx] = (up - down) / (2 * h)
    return g


def assert_fd(ours, fd):
    """Central differences with h = 1e-5 in float64: truncation ~h**2, rounding ~1e-16/h.
    Not a torch comparison: its own tolerance, far below any real error."""
    np.testing.assert_allclose(ours, fd, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- #
# linear_backward
# --------------------------------------------------------------------------- #
def check_linear(rng, dtype, batch, in_f, out_f, with_bias):
    m = int(np.prod(batch)) if batch else 1
    x = data(rng, batch + (in_f,), dtype)
    w = scaled(rng, (out_f, in_f), dtype, out_f)
    b = data(rng, (out_f,), dtype) if with_bias else None
    go = scaled(rng, batch + (out_f,), dtype, m)
    gx, gw, gb = myatt.linear_backward(go, x, w, b)
    tx, tw = leaf(x, dtype), leaf(w, dtype)
    tb = leaf(b, dtype) if with_bias else None
    expected = torch_grads(F.linear, (tx, tw, tb), to_torch(go, dtype))
    assert_matches(gx, expected[0])
    assert_matches(gw, expected[1])
    if with_bias:
        assert_matches(gb, expected[2])
    else:
        assert gb is None


SIZES = [1, 3, 17, 64, 65, 257]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("in_f,out_f", list(itertools.product(SIZES, SIZES)), ids=str)
def test_linear_sizes(rng, dtype, in_f, out_f, with_bias):
    check_linear(rng, dtype, (7,), in_f, out_f, with_bias)


BATCH_SHAPES = [(), (1,), (2,), (0,), (5, 0), (0, 5), (2, 3), (2, 3, 4), (1, 1, 1, 3),
                (64,), (65,), (300,)]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("batch", BATCH_SHAPES, ids=str)
def test_linear_batch_shapes(rng, dtype, batch, with_bias):
    check_linear(rng, dtype, batch, 17, 65, with_bias)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("in_f,out_f", [(0, 5), (5, 0), (0, 0)])
@pytest.mark.parametrize("batch", [(4,), (0,), (2, 3)], ids=str)
def test_linear_empty(rng, dtype, batch, in_f, out_f, with_bias):
    check_linear(rng, dtype, batch, in_f, out_f, with_bias)


@pytest.mark.parametrize("batch,in_f,out_f", [((300,), 257, 129), ((3, 100), 200, 150),
                                              ((129,), 96, 300), ((1,), 500, 257)], ids=str)
def test_linear_hundreds(rng, dtype, batch, in_f, out_f):
    check_linear(rng, dtype, batch, in_f, out_f, True)


@pytest.mark.parametrize("gd,xd,wd", [(a, b, c) for a, b, c in
                                      itertools.product(PROMO_DTYPES, repeat=3)
                                      if len({a, b, c}) <= 2], ids=str)
def test_linear_promotion(rng, gd, xd, wd):
    go, x, w = data(rng, (4, 3), gd), data(rng, (4, 5), xd), data(rng, (3, 5), wd)
    gx, gw, gb = myatt.linear_backward(go, x, w)
    expected_dtype = result_dtype(gd, xd, wd)
    assert gx.dtype == gw.dtype == expected_dtype and gb is None
    t = torch_grads(F.linear, (leaf(x, expected_dtype), leaf(w, expected_dtype)),
                    to_torch(go, expected_dtype))
    assert_matches(gx, t[0])
    assert_matches(gw, t[1])


def test_linear_bias_dtype_counts(rng):
    """A float64 bias makes the result float64, as for linear()."""
    go, x, w = (data(rng, s, np.float32) for s in ((4, 3), (4, 5), (3, 5)))
    gx, gw, gb = myatt.linear_backward(go, x, w, np.zeros(3))
    assert gx.dtype == gw.dtype == gb.dtype == np.float64


def test_linear_keywords(rng, dtype):
    go, x, w, b = (data(rng, s, dtype) for s in ((4, 3), (4, 5), (3, 5), (3,)))
    a = myatt.linear_backward(go, x, w, b)
    k = myatt.linear_backward(grad_output=go, input=x, weight=w, bias=b)
    for r1, r2 in zip(a, k):
        np.testing.assert_array_equal(r1, r2, strict=True)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_linear_layouts(rng, dtype, layout):
    go, x, w, b = (data(rng, s, dtype) for s in ((4, 3), (4, 5), (3, 5), (3,)))
    objs = [LAYOUTS[layout](a) for a in (go, x, w, b)]
    guard = Guard(*objs)
    res = myatt.linear_backward(*objs)
    guard.check(*res)
    # (a list of float32 values becomes float64, as numpy.asarray makes it)
    for r, e in zip(res, myatt.linear_backward(*(a.astype(res[0].dtype) for a in (go, x, w, b)))):
        np.testing.assert_array_equal(r, e, strict=True)


def test_linear_finite_differences(rng):
    x, w, b = data(rng, (2, 3, 4), np.float64), data(rng, (5, 4), np.float64), data(rng, (5,), np.float64)
    go = data(rng, (2, 3, 5), np.float64)
    gx, gw, gb = myatt.linear_backward(go, x, w, b)

    def loss():
        return float((myatt.linear(x, w, b) * go).sum())

    assert_fd(gx, fd_grad(loss, x))
    assert_fd(gw, fd_grad(loss, w))
    assert_fd(gb, fd_grad(loss, b))


# --------------------------------------------------------------------------- #
# softmax_backward
# --------------------------------------------------------------------------- #
SOFTMAX_SHAPES = [
    (),
    (1,), (3,), (17,), (64,), (65,), (257,), (0,),
    (3, 17), (65, 63), (1, 257), (257, 1), (0, 5), (5, 0), (300, 17),
    (3, 17, 5), (2, 0, 3), (4, 65, 3), (1, 1, 1), (3, 257, 2), (2, 3, 130),
    (2, 3, 17, 5), (2, 2, 0, 2), (5, 4, 3, 2), (1, 64, 1, 3),
]
SOFTMAX_CASES = [(s, d) for s in SOFTMAX_SHAPES for d in ([-1, 0] if not s else range(-len(s), len(s)))]


def check_softmax(rng, dtype, shape, dim, scale=3.0):
    x = (scale * rng.standard_normal(shape)).astype(dtype)
    go = data(rng, shape, dtype)
    tx = leaf(x, dtype)
    y = torch.softmax(tx, dim)
    (expected,) = torch.autograd.grad(y, tx, to_torch(go, dtype))
    ours = myatt.softmax_backward(go, y.detach().numpy(), dim)
    assert_matches(ours, expected)
    return ours


@pytest.mark.kernel_path
@pytest.mark.parametrize("shape,dim", SOFTMAX_CASES, ids=[f"{s}-dim{d}" for s, d in SOFTMAX_CASES])
def test_softmax_every_axis(rng, dtype, shape, dim):
    check_softmax(rng, dtype, shape, dim)


@pytest.mark.kernel_path
@pytest.mark.parametrize("rows", [1, 2, 5])
@pytest.mark.parametrize("cols", [1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 255, 1000, 4097])
def test_softmax_last_axis_is_torchs_bits(rng, dtype, rows, cols):
    """Along the last axis each path is torch's softmax backward for the matching CPU
    capability, bit for bit (docs/torch-softmax.md), including torch's FMA in the float32
    tail of a single row.  (torch's float32 result for several rows on 1 torch thread
    differs from its own result on 2+: we follow the multi-threaded one.)"""
    x = (3.0 * rng.standard_normal((rows, cols))).astype(dtype)
    go = data(rng, (rows, cols), dtype)
    tx = leaf(x, dtype)
    y = torch.softmax(tx, -1)
    (expected,) = torch.autograd.grad(y, tx, to_torch(go, dtype))
    ours = myatt.softmax_backward(go, y.detach().numpy(), -1)
    if torch_runs_our_softmax() and (rows == 1 or torch.get_num_threads() > 1):
        assert_same_bits(ours, expected)
    else:
        assert_matches(ours, expected)


@pytest.mark.kernel_path
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 7, 8, 16, 17, 33, 64, 100, 128, 129, 257, 1000, 4096])
@pytest.mark.parametrize("cols", [1, 3, 12, 16, 17, 32, 36, 48, 100, 256, 300])
def test_linear_bias_gradient_is_torchs_bits(rng, dtype, rows, cols):
    """The bias gradient is torch's grad.sum(0) (its cascade sum, colsum.h), bit for bit
    on every path: magnitudes spread over six decades, so any other order shows."""
    go = (rng.standard_normal((rows, cols)) * 10.0 ** rng.integers(-3, 4, (rows, cols))).astype(dtype)
    x, w = data(rng, (rows, 5), dtype), data(rng, (cols, 5), dtype)
    _, _, gb = myatt.linear_backward(go, x, w, np.zeros(cols, dtype))
    tb = leaf(np.zeros(cols, dtype), dtype)
    (expected,) = torch.autograd.grad(F.linear(to_torch(x, dtype), to_torch(w, dtype), tb), tb,
                                      to_torch(go, dtype))
    assert_same_bits(gb, expected)


@pytest.mark.kernel_path
@pytest.mark.parametrize("rows", [2, 5, 8, 15, 16, 17, 33, 100, 1000])
@pytest.mark.parametrize("cols", [2, 7, 40])
def test_linear_bias_gradient_of_a_transposed_gradient(rng, dtype, rows, cols):
    """A grad_output whose columns are contiguous (a transposed view, as autograd hands
    an unbatched key's projection its gradient): torch sums each column as an inner
    dimension (vector lanes along it, SumKernel.cpp's vectorized_inner_sum), not as
    columns side by side; myatt too (colsum.h), bit for bit."""
    go = (rng.standard_normal((cols, rows)) * 10.0 ** rng.integers(-3, 4, (cols, rows))).astype(dtype).T
    x, w = data(rng, (rows, 5), dtype), data(rng, (cols, 5), dtype)
    _, _, gb = myatt.linear_backward(go, x, w, np.zeros(cols, dtype))
    assert_same_bits(gb, to_torch(go.T, dtype).t().sum(0))   # (torch's view: transposed too)


@pytest.mark.kernel_path
def test_softmax_default_dim_and_keywords(rng, dtype):
    go, y = data(rng, (4, 6), dtype), myatt.softmax(data(rng, (4, 6), dtype))
    a = myatt.softmax_backward(go, y)
    b = myatt.softmax_backward(grad_output=go, output=y, dim=np.int64(-1))
    c = myatt.softmax_backward(go, y, 1)
    np.testing.assert_array_equal(a, b, strict=True)
    np.testing.assert_array_equal(a, c, strict=True)


@pytest.mark.kernel_path
def test_softmax_gradient_of_sum_is_zero(rng, dtype):
    """Why the tests never use only .sum(): ones upstream give (nearly) zero."""
    y = myatt.softmax(data(rng, (5, 7), dtype))
    g = myatt.softmax_backward(np.ones_like(y), y)
    assert np.abs(g).max() < 1e-6


@pytest.mark.kernel_path
@pytest.mark.parametrize("gd,yd", list(itertools.product(PROMO_DTYPES, PROMO_DTYPES)), ids=str)
def test_softmax_promotion(rng, gd, yd):
    go, y = data(rng, (3, 4), gd), data(rng, (3, 4), yd)
    out = myatt.softmax_backward(go, y, 0)
    d = result_dtype(gd, yd)
    assert out.dtype == d
    tg, ty = to_torch(go, d), to_torch(y, d)
    # torch's own kernel (in half precision it rounds once, not after each op)
    assert_matches(out, torch._softmax_backward_data(tg, ty, 0, ty.dtype))


@pytest.mark.kernel_path
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [0, 1])
def test_softmax_layouts(rng, dtype, layout, dim):
    go, y = data(rng, (5, 6), dtype), myatt.softmax(data(rng, (5, 6), dtype), dim)
    objs = [LAYOUTS[layout](a) for a in (go, y)]
    guard = Guard(*objs)
    res = myatt.softmax_backward(*objs, dim)
    guard.check(res)
    expected = myatt.softmax_backward(go.astype(res.dtype), y.astype(res.dtype), dim)
    np.testing.assert_array_equal(res, expected, strict=True)


@pytest.mark.kernel_path
@pytest.mark.parametrize("shape,dim", [((4,), 0), ((3, 5), 0), ((3, 5), 1), ((2, 3, 4), 1)], ids=str)
def test_softmax_finite_differences(rng, shape, dim):
    x = data(rng, shape, np.float64)
    go = data(rng, shape, np.float64)
    g = myatt.softmax_backward(go, myatt.softmax(x, dim), dim)
    assert_fd(g, fd_grad(lambda: float((myatt.softmax(x, dim) * go).sum()), x))


# --------------------------------------------------------------------------- #
# bmm_backward
# --------------------------------------------------------------------------- #
def check_bmm(rng, dtype, b, n, m, p, a_dtype=None, c_dtype=None, g_dtype=None):
    a = data(rng, (b, n, m), a_dtype or dtype)
    c = scaled(rng, (b, m, p), c_dtype or dtype, p)
    go = scaled(rng, (b, n, p), g_dtype or dtype, n)
    ga, gc = myatt.bmm_backward(go, a, c)
    assert ga.shape == (b, n, m) and gc.shape == (b, m, p)
    expected = torch_grads(torch.bmm, (leaf(a, dtype), leaf(c, dtype)), to_torch(go, dtype))
    assert_matches(ga, expected[0])
    assert_matches(gc, expected[1])


@pytest.mark.parametrize("p", [1, 3, 64, 257])
@pytest.mark.parametrize("m", [1, 17, 65, 257])
@pytest.mark.parametrize("n", [1, 17, 65, 257])
def test_bmm_sizes(rng, dtype, n, m, p):
    check_bmm(rng, dtype, 2, n, m, p)


@pytest.mark.parametrize("b,n,m,p", [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 0, 5), (2, 3, 4, 0),
                                     (0, 0, 0, 0), (1, 0, 0, 7), (3, 5, 0, 0), (17, 3, 4, 5)],
                         ids=str)
def test_bmm_empty_and_batches(rng, dtype, b, n, m, p):
    check_bmm(rng, dtype, b, n, m, p)


@pytest.mark.parametrize("b,n,m,p", [(3, 300, 129, 200), (1, 129, 500, 96), (1, 300, 257, 1)],
                         ids=str)
def test_bmm_hundreds(rng, dtype, b, n, m, p):
    check_bmm(rng, dtype, b, n, m, p)


@pytest.mark.parametrize("gd,ad,cd", [(a, b, c) for a, b, c in
                                      itertools.product(PROMO_DTYPES, repeat=3)
                                      if len({a, b, c}) <= 2], ids=str)
def test_bmm_promotion(rng, gd, ad, cd):
    ga, gc = myatt.bmm_backward(data(rng, (2, 3, 4), gd), data(rng, (2, 3, 5), ad),
                                data(rng, (2, 5, 4), cd))
    assert ga.dtype == gc.dtype == result_dtype(gd, ad, cd)
    check_bmm(rng, result_dtype(gd, ad, cd), 2, 3, 5, 4, ad, cd, gd)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_bmm_layouts(rng, dtype, layout):
    go, a, c = data(rng, (2, 3, 4), dtype), data(rng, (2, 3, 5), dtype), data(rng, (2, 5, 4), dtype)
    objs = [LAYOUTS[layout](t) for t in (go, a, c)]
    guard = Guard(*objs)
    res = myatt.bmm_backward(*objs)
    guard.check(*res)
    for r, e in zip(res, myatt.bmm_backward(*(t.astype(res[0].dtype) for t in (go, a, c)))):
        np.testing.assert_array_equal(r, e, strict=True)


def test_bmm_finite_differences(rng):
    a, c, go = data(rng, (2, 3, 4), np.float64), data(rng, (2, 4, 5), np.float64), \
        data(rng, (2, 3, 5), np.float64)
    ga, gc = myatt.bmm_backward(go, a, c)

    def loss():
        return float((myatt.bmm(a, c) * go).sum())

    assert_fd(ga, fd_grad(loss, a))
    assert_fd(gc, fd_grad(loss, c))


# --------------------------------------------------------------------------- #
# Errors: the spec's classes, messages naming the argument and the shapes
# --------------------------------------------------------------------------- #
def A(*shape):
    return np.ones(shape, dtype=np.float32)


def raises(thunk, exc, names, shapes=()):
    with pytest.raises(exc, match=name_re(*names)) as info:
        thunk()
    msg = str(info.value)
    for s in shapes:
        assert __import__("re").search(shape_re(s), msg), f"{msg!r} lacks shape {s}"


BAD_SHAPES = [
    (lambda: myatt.linear_backward(A(4, 3), A(4, 5), A(3, 5, 1)), ["weight"], [(3, 5, 1)]),
    (lambda: myatt.linear_backward(A(4, 3), A(4, 6), A(3, 5)), ["input"], [(4, 6)]),
    (lambda: myatt.linear_backward(A(4, 3), A(), A(3, 5)), ["input"], [()]),
    (lambda: myatt.linear_backward(A(4, 2), A(4, 5), A(3, 5)), ["grad_output"], [(4, 2)]),
    (lambda: myatt.linear_backward(A(3), A(4, 5), A(3, 5)), ["grad_output"], [(3,)]),
    (lambda: myatt.linear_backward(A(4, 3), A(4, 5), A(3, 5), A(4)), ["bias"], [(4,)]),
    (lambda: myatt.softmax_backward(A(3, 4), A(3, 5)), ["grad_output"], [(3, 4), (3, 5)]),
    (lambda: myatt.softmax_backward(A(3, 4), A(3, 4, 1)), ["grad_output"], [(3, 4, 1)]),
    (lambda: myatt.bmm_backward(A(2, 3, 4), A(2, 3), A(2, 5, 4)), ["input"], [(2, 3)]),
    (lambda: myatt.bmm_backward(A(2, 3, 4), A(2, 3, 5), A(1, 5, 4)), ["mat2"], [(1, 5, 4)]),
    (lambda: myatt.bmm_backward(A(2, 3, 4), A(2, 3, 5), A(2, 6, 4)), ["mat2"], [(2, 6, 4)]),
    (lambda: myatt.bmm_backward(A(2, 3, 5), A(2, 3, 5), A(2, 5, 4)), ["grad_output"], [(2, 3, 5)]),
    (lambda: myatt.bmm_backward(A(3, 4), A(2, 3, 5), A(2, 5, 4)), ["grad_output"], [(3, 4)]),
]


@pytest.mark.parametrize("thunk,names,shapes", BAD_SHAPES)
def test_bad_shapes(thunk, names, shapes):
    raises(thunk, ValueError, names, shapes)


# the backward kernels of the registry (entry_points.py)
BACKWARD = [ep for ep in ENTRY_POINTS if ep.kind == "function" and ep.name.endswith("_backward")]
BAD_VALUES = [np.ones((3, 4), dtype=np.complex64), np.array([["a"]]), object(),
              np.ones(3, dtype=np.longdouble)]


@pytest.mark.parametrize("bad", BAD_VALUES, ids=["complex", "str", "object", "longdouble"])
@pytest.mark.parametrize("kernel,pos", [
    pytest.param(ep, i, id=f"{ep.name}-{i}",
                 marks=[pytest.mark.kernel_path] if ep.name == "softmax_backward" else [])
    for ep in BACKWARD for i in range(len(ep.args))])
def test_bad_types(kernel, pos, bad):
    args = [np.ones_like(a) for a in kernel.good(SMALL)]
    args[pos] = bad
    raises(lambda: invoke(kernel, None, args), TypeError, [kernel.args[pos].name])


@pytest.mark.kernel_path
@pytest.mark.parametrize("dim", [2, -3, 10])
def test_softmax_dim_out_of_range(dim):
    with pytest.raises(AxisError):
        myatt.softmax_backward(A(3, 4), A(3, 4), dim)


@pytest.mark.kernel_path
@pytest.mark.parametrize("dim", [1.0, "0", None, True])
def test_softmax_dim_not_an_integer(dim):
    raises(lambda: myatt.softmax_backward(A(3, 4), A(3, 4), dim), TypeError, ["dim"])


def test_wrong_argument_count():
    with pytest.raises(TypeError):
        myatt.linear_backward(A(4, 3), A(4, 5))
    with pytest.raises(TypeError):
        myatt.softmax_backward(A(3))
    with pytest.raises(TypeError):
        myatt.bmm_backward(A(2, 3, 4), A(2, 3, 5))


@pytest.mark.parametrize("n,m,p", [(4, 0, 3), (0, 1, 0)])
def test_bmm_empty_gradients_of_a_huge_broadcast_batch(n, m, p):
    """m == 0, or n == 0 and p == 0: both gradients are empty whatever the batch count,
    so a batch of 2**40 broadcast items returns at once (it looped over every item
    before; both found by fuzz/fuzz_python.py)."""
    a, b, g = (np.broadcast_to(np.float32(1), s)
               for s in [(2 ** 40, n, m), (2 ** 40, m, p), (2 ** 40, n, p)])
    ga, gb = myatt.bmm_backward(g, a, b)
    assert ga.shape == (2 ** 40, n, m) and gb.shape == (2 ** 40, m, p)
    assert ga.dtype == gb.dtype == np.float32
