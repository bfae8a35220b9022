"""float16 and bfloat16 (ml_dtypes') against torch's own half-precision results
(docs/numerics.md, "Half precision"): every kernel function and its gradient through
myatt.vjp at assert_close's defaults for the dtype, and bit for bit where myatt computes
what torch's kernel computes (scaled_dot_product_attention's flash kernel, softmax over the
last axis, bfloat16's linear and bmm).  Then the dtype rules: results in the half dtype,
torch's promotion, torch.bfloat16 tensors read through their bits, the rounding of float32
results (ties, overflow, subnormals), and the errors."""
import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")

import helpers  # noqa: E402
import myatt  # noqa: E402
import oracle  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.testing import assert_close  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALVES = [(F16, torch.float16), (BF16, torch.bfloat16)]
IDS = ["float16", "bfloat16"]


def half(rng, shape, dt, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dt)


def to_torch(a):
    """A half ndarray as a torch tensor of its dtype, through its bits."""
    tdt = torch.bfloat16 if a.dtype == BF16 else torch.float16
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(tdt)


def check(got, want, bits=False, equal_nan=False):
    """got (myatt's half ndarray) against want (torch's half tensor): its dtype, then
    assert_close at the dtype's defaults, and with `bits` the same bits (NaN as NaN)."""
    assert isinstance(got, np.ndarray)
    want_np = want.detach().view(torch.int16).numpy().view(BF16 if want.dtype == torch.bfloat16
                                                           else F16)
    assert got.dtype == want_np.dtype
    assert_close(to_torch(got), want.detach(), equal_nan=equal_nan)
    if bits:
        same = (got.view(np.uint16) == want_np.view(np.uint16)) | (np.isnan(got.astype(np.float32))
                                                                   & np.isnan(want_np.astype(np.float32)))
        assert same.all(), f"{(~same).sum()} of {same.size} elements differ in their bits"


#: bfloat16 products on AVX512_BF16's vdpbf16ps (the default path of a CPU that has it:
#: MYATT_KERNEL unset), where linear sums in the order of torch's oneDNN kernel for
#: avx512_core_bf16 (on a CPU with AMX, torch's oneDNN takes its AMX kernel instead)
BF16_DOT = (not os.environ.get("MYATT_KERNEL") and myatt.kernel_path() == "avx512"
            and "avx512_bf16" in helpers.cpu_flags() and "amx_bf16" not in helpers.cpu_flags())


@pytest.fixture(params=HALVES, ids=IDS)
def dts(request):
    return request.param


# (m, k, n): oneDNN's threshold (m k n > 4096), its k blocks (512 up to k = 1024, then
# 1024), an odd k's last element, the 14 x 32 tiles' edges, one row, one output
ONEDNN_SHAPES = [(16, 16, 17), (16, 16, 16), (1, 4097, 3), (64, 777, 96), (15, 33, 31),
                 (14, 512, 32), (29, 513, 33), (3, 1023, 70), (5, 1024, 64), (7, 1025, 40),
                 (37, 2500, 65), (4, 5001, 20), (200, 64, 1), (300, 2, 300), (3, 1, 2000)]


@pytest.mark.parametrize("mkn", ONEDNN_SHAPES, ids=str)
def test_bfloat16_linear_is_onednns_bits(rng, mkn):
    """bfloat16 linear on vdpbf16ps: torch's bits (its oneDNN kernel above m k n = 4096;
    cpublas's below, which myatt's float32 kernels approach, as on the paths without
    vdpbf16ps), with a bias and without, from rows of any stride."""
    m, k, n = mkn
    x = half(rng, (m, 2 * k), BF16)[:, ::2]        # rows not contiguous: a copy first
    w, b = half(rng, (n, k), BF16, k ** -0.5), half(rng, (n,), BF16)
    for bias in (None, b):
        y = myatt.linear(x, w, bias)
        check(y, F.linear(to_torch(x), to_torch(w), None if bias is None else to_torch(b)),
              bits=BF16_DOT and m * k * n > 4096)


def test_bfloat16_linear_subnormals():
    """On vdpbf16ps, subnormals read as 0 and subnormal sums flushed, as torch's oneDNN
    kernel gives them (infinities, NaN and signed zeros as there); on the other paths,
    float32 products rounded once: subnormals kept (the spec's rule)."""
    x = np.ones((20, 30), BF16)
    w = np.zeros((40, 30), BF16)
    w[:, 0] = 1e-39                                  # a subnormal weight
    x[:, 1], w[3, 1] = 1e-20, 1e-20                  # a product below float32's normals
    w[4, 2], w[5, 3], w[6] = np.inf, np.nan, 3e38    # inf, NaN, overflow
    b = np.zeros(40, BF16)
    b[1], b[2] = 1e-39, -1e-39                       # subnormal biases
    for bias in (None, b):
        y = myatt.linear(x, w, bias)
        if BF16_DOT:
            check(y, F.linear(to_torch(x), to_torch(w),
                              None if bias is None else to_torch(b)), bits=True, equal_nan=True)
        else:    # (the sums here are exact in any order)
            with np.errstate(over="ignore"):
                want = x.astype(np.float32) @ w.astype(np.float32).T
            want = (want + (0 if bias is None else b.astype(np.float32))).astype(BF16)
            np.testing.assert_array_equal(y.view(np.uint16)[:, :5], want.view(np.uint16)[:, :5])
            assert np.isnan(y[:, 5].astype(np.float32)).all()
    assert y[0, 4] == np.inf
    if BF16_DOT:     # 1e-39 (w) read as 0; 0 + -1e-39 (the bias) flushed to -0
        assert y[0, 0] == 0 and np.signbit(y[0, 2])
    else:
        assert y[0, 0] == np.float32(1e-39).astype(BF16) != 0


def torch_bits(dt, work):
    """Whether myatt's product of `work` multiply-adds is torch's bit for bit: float16 and
    bfloat16 up to oneDNN's threshold in torch's naive GEMM orders (any kernel path: each
    pairs with torch's build for its instruction set), bfloat16 above it on vdpbf16ps."""
    return dt == F16 or work <= 4096 or BF16_DOT


@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 130), (24,), (40, 1000), (2, 3), (1500, 40)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(rng, dts, shape, bias):
    dt, _ = dts
    k = shape[-1]
    x, w = half(rng, shape, dt), half(rng, (33, k), dt, k ** -0.5)
    b = half(rng, (33,), dt, k ** -0.5) if bias else None
    tb = to_torch(b) if bias else None
    y, pull = myatt.vjp(myatt.linear, x, w, b)
    tx, tw = to_torch(x).requires_grad_(), to_torch(w).requires_grad_()
    if bias:
        tb.requires_grad_()
    ty = F.linear(tx, tw, tb)
    bits = torch_bits(dt, y.size * k)
    check(y, ty, bits=bits)
    g = half(rng, ty.shape, dt)
    ty.backward(to_torch(g))
    grads = pull(g)
    check(grads[0], tx.grad, bits=bits)
    check(grads[1], tw.grad, bits=bits)
    if bias:
        check(grads[2], tb.grad, bits=True)
    else:
        assert grads[2] is None


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (3, 40, 64, 48), (2, 70, 600, 30),
                                   (2, 20, 2100, 10)])
def test_bmm(rng, dts, shape, layout):
    """Each operand row-major (N) or a transposed view (T): torch's order for the layout
    (docs/numerics.md; bfloat16 above 1024 multiply-adds a sum: oneDNN's blocks of 1024,
    of 512 for a transposed first operand), forward and both gradients."""
    dt, _ = dts
    b, n, m, p = shape

    def operand(rows, cols, t, scale=1.0):
        return (half(rng, (b, cols, rows), dt, scale).transpose(0, 2, 1) if t == "T"
                else half(rng, (b, rows, cols), dt, scale))

    def tensor(a):   # the same layout in torch
        return (to_torch(a.transpose(0, 2, 1)).transpose(1, 2) if a.strides[1] < a.strides[2]
                else to_torch(a))

    a, c = operand(n, m, layout[0]), operand(m, p, layout[1], m ** -0.5)
    y, pull = myatt.vjp(myatt.bmm, a, c)
    ta, tc = tensor(a).requires_grad_(), tensor(c).requires_grad_()
    ty = torch.bmm(ta, tc)
    bits = torch_bits(dt, b * n * m * p) or n * m * p < 400
    check(y, ty, bits=bits)
    g = half(rng, ty.shape, dt)
    ty.backward(to_torch(g))
    ga, gc = pull(g)
    check(ga, ta.grad, bits=bits)
    check(gc, tc.grad, bits=bits)


@pytest.fixture
def torch_one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("shape,dim", [((6, 100), -1), ((3, 4, 37), -1), ((40, 70), 0),
                                       ((5, 33, 6), 1), ((3, 2), 0), ((2, 9, 80), 1)])
def test_softmax(rng, dts, shape, dim, torch_one_thread):
    """Bit for bit against torch on one thread: along other axes than the last, torch
    rounds the exp of the columns that fill no group of 32 in its thread's chunk, so its
    bits depend on its thread count (docs/numerics.md); myatt's are torch's on one."""
    dt, _ = dts
    x = half(rng, shape, dt, 3.0)
    y, pull = myatt.vjp(myatt.softmax, x, dim=dim)
    tx = to_torch(x).requires_grad_()
    ty = torch.softmax(tx, dim)
    check(y, ty, bits=True)
    g = half(rng, shape, dt)
    ty.backward(to_torch(g))
    check(pull(g)[0], tx.grad, bits=True)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(rng, dts, approximate):
    dt, _ = dts
    x = half(rng, (50, 41), dt, 2.0)
    y, pull = myatt.vjp(myatt.gelu, x, approximate=approximate)
    tx = to_torch(x).requires_grad_()
    ty = F.gelu(tx, approximate=approximate)
    check(y, ty)
    g = half(rng, x.shape, dt)
    ty.backward(to_torch(g))
    check(pull(g)[0], tx.grad)


SDPA_CASES = {
    # name: (q shape, k shape, v shape, mask shape or None, mask kind, kwargs)
    "plain": ((2, 3, 40, 16), (2, 3, 40, 16), (2, 3, 40, 16), None, None, {}),
    "long S": ((1, 2, 20, 32), (1, 2, 600, 32), (1, 2, 600, 32), None, None, {}),
    "L blocks": ((1, 1, 200, 8), (1, 1, 77, 8), (1, 1, 77, 8), None, None, {}),
    "bool mask": ((2, 2, 24, 16), (2, 2, 48, 16), (2, 2, 48, 16), (2, 1, 24, 48), bool, {}),
    "float mask": ((2, 2, 24, 16), (2, 2, 48, 16), (2, 2, 48, 16), (24, 48), "float", {}),
    "causal": ((1, 4, 50, 16), (1, 4, 50, 16), (1, 4, 50, 16), None, None,
               {"is_causal": True}),
    "gqa": ((1, 8, 30, 16), (1, 2, 30, 16), (1, 2, 30, 16), None, None, {"enable_gqa": True}),
    "scale": ((1, 2, 30, 16), (1, 2, 30, 16), (1, 2, 30, 16), None, None, {"scale": 0.7}),
    "math path": ((3, 30, 16), (3, 40, 16), (3, 40, 8), None, None, {}),
}


def check_flash_grad(got, t, ref):
    """A gradient of torch's flash backward in a half dtype, whose float32 sums come from
    MKL's half-precision GEMMs in an order of MKL's own (not reconstructed: docs/numerics.md):
    the same bits for 97 % of the elements or more (measured: float16 98.3-100 %, bfloat16
    99.5-100 %; float32 sums rounded once instead of torch's accumulation in the half dtype
    give 56-71 %), and an error against the float64
    gradient `ref` (of the same inputs) no larger than torch's own, on average."""
    want = t.grad.view(torch.int16).numpy()
    share = (got.view(np.int16) == want).mean()
    assert share >= 0.97, f"{share:.2%} of the bits are torch's"
    ref = ref.detach().numpy()
    err = np.abs(got.astype(np.float64) - ref).mean()
    torch_err = np.abs(t.grad.double().numpy() - ref).mean()
    assert err <= 1.01 * torch_err, (err, torch_err)


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_scaled_dot_product_attention(rng, dts, case):
    dt, tdt = dts
    qs, ks, vs, ms, mkind, kw = SDPA_CASES[case]
    q, k, v = half(rng, qs, dt), half(rng, ks, dt), half(rng, vs, dt)
    mask = tmask = None
    if mkind is bool:
        mask = rng.random(ms) < 0.8
        mask[..., 3, :] = False   # a fully masked row: zeros
        tmask = torch.from_numpy(mask)
    elif mkind == "float":
        mask = half(rng, ms, dt)
        tmask = to_torch(mask)
    out, pull = myatt.vjp(myatt.scaled_dot_product_attention, q, k, v, mask, **kw)
    tq, tk, tv = (to_torch(a).requires_grad_() for a in (q, k, v))
    tout = F.scaled_dot_product_attention(tq, tk, tv, tmask, **kw)
    # the flash kernel's steps are ours (its exp, the weights rounded before @ v), its
    # float32 sums of q @ k^T and weights @ v MKL's (measured: 99.4-100 % of the bits);
    # the math path: float32 and one rounding
    check(out, tout)
    share = (out.view(np.int16) == tout.detach().view(torch.int16).numpy()).mean()
    assert share >= 0.99, f"{share:.2%} of the bits are torch's"
    g = half(rng, tout.shape, dt)
    tout.backward(to_torch(g))
    r64 = [torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (q, k, v)]
    m64 = None if mask is None else torch.from_numpy(mask if mask.dtype == bool
                                                     else mask.astype(np.float64))
    F.scaled_dot_product_attention(*r64, m64, **kw).backward(
        torch.from_numpy(g.astype(np.float64)))
    for got, t, ref in zip(pull(g), (tq, tk, tv), r64):
        if case == "math path":   # torch's float32 math path, rounded once: as ours
            check(got, t.grad)
        else:
            check_flash_grad(got, t, ref.grad)


def test_promotion(rng):
    x16, xb = np.ones((2, 3), F16), np.ones((2, 3), BF16)
    w16, wb = np.ones((4, 3), F16), np.ones((4, 3), BF16)
    assert myatt.linear(x16, w16).dtype == F16
    assert myatt.linear(xb, wb).dtype == BF16
    assert myatt.linear(x16, wb).dtype == np.float32          # torch.promote_types
    assert myatt.linear(xb, w16.astype(np.float32)).dtype == np.float32
    assert myatt.linear(xb, w16.astype(np.float64)).dtype == np.float64
    assert myatt.linear(np.ones((2, 3), np.int64), wb).dtype == BF16
    assert myatt.linear([[1, 2, 3]], w16).dtype == F16
    assert myatt.softmax(np.arange(3)).dtype == np.float32


def test_torch_bfloat16_tensors(rng):
    x = half(rng, (5, 8), BF16)
    w = half(rng, (3, 8), BF16)
    t = to_torch(x).requires_grad_()   # requires grad: read detached
    got = myatt.linear(t, to_torch(w)[:, ::1])
    assert got.dtype == BF16
    assert_close(to_torch(got), F.linear(to_torch(x), to_torch(w)))
    strided = to_torch(np.ascontiguousarray(x.T)).T   # non-contiguous: the view keeps strides
    assert np.array_equal(myatt.softmax(strided).view(np.uint16),
                          myatt.softmax(x).view(np.uint16))


def test_rounding_of_results():
    """bmm(a, b) with a = [hi, lo], b = [1, 1]: the float32 sum hi + lo rounded to the half
    dtype, against NumPy's and ml_dtypes' conversion of that sum (round to nearest even,
    overflow to inf, subnormals kept)."""
    for dt, eps in [(F16, 2.0 ** -10), (BF16, 2.0 ** -7)]:
        with np.errstate(over="ignore"):   # 1e30 overflows float16: inf, on purpose
            hi = np.array([1.0, 1.0, 1.0 + eps, -1.0, 2.0 ** -20, 3.0, 65504.0, 65504.0, 6e-8,
                           -6e-8, 0.0, 1e30, np.inf], np.float32).astype(dt)
            lo = np.array([eps / 2, eps / 2 * 1.01, eps / 2, -eps / 2, 2.0 ** -30, 1e-3, 16.0,
                           15.0, 0.0, 0.0, -0.0, 1e30, 1.0], np.float32).astype(dt)
        a = np.stack([hi, lo], -1)[:, None, :]            # [n, 1, 2]
        b = np.ones((hi.size, 2, 1), dt)
        with np.errstate(over="ignore"):
            want = (hi.astype(np.float32) + lo.astype(np.float32)).astype(dt)
        got = myatt.bmm(a, b)[:, 0, 0]
        assert got.dtype == dt
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (got, want)
    nan = myatt.softmax(np.array([np.nan, 1.0], F16))
    assert np.isnan(nan.astype(np.float32)).all()


# ---- MultiheadAttention -------------------------------------------------------------
# torch's F.multi_head_attention_forward op by op (myatt/_mha_half.py).  Its need_weights
# path is torch's bits: every op is (the mask added before baddbmm's rounding), on torch's
# layouts.  Not bits, within assert_close: the flash path's backward (MKL's half GEMMs,
# check_flash_grad), and the in-projection bias's gradient with batch_first and separate
# inputs (torch sums a transposed 3-D gradient over two dimensions, accumulating in the
# half dtype).
MHA_CASES = {
    "self": {},
    "masks": dict(masks=True),
    "key-is-value": dict(masks=True, mode="kv"),
    "kdim": dict(masks=True, mode="sep", kdim=11),
    "bias_kv-zero_attn": dict(masks=True, add_bias_kv=True, add_zero_attn=True),
    "no-bias": dict(bias=False),
    "per-head": dict(masks=True, average=False),
    "batch_first": dict(masks=True, batch_first=True),
    "three-heads": dict(masks=True, E=18, H=3),   # (head_dim 6, the mean over 3)
    "mask-per-head": dict(masks="3d"),
    "causal-mask": dict(masks="causal"),
}


def run_mha(rng, dt, tdt, L=9, N=3, E=16, H=4, masks=False, mode="qkv", kdim=None,
            batch_first=False, batched=True, need_weights=True, average=True, **kw):
    """(myatt's (out, weights), gradients; torch's module, out, weights, inputs)."""
    kd = kdim or E
    t = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=kdim, batch_first=batch_first,
                                    dtype=tdt, **kw)
    with torch.no_grad():
        for p in t.parameters():
            p.copy_(to_torch(half(rng, p.shape, dt)))
    m = myatt.MultiheadAttention.from_torch(t)
    S = L + 2 if mode != "qkv" else L

    def arg(n, d):
        return half(rng, ((N, n, d) if batch_first else (n, N, d)) if batched else (n, d), dt)
    q = arg(L, E)
    k = q if mode == "qkv" else arg(S, kd)
    v = k if mode != "sep" else arg(S, kd)
    call = dict(need_weights=need_weights, average_attn_weights=average)
    if masks == "3d":       # a float mask per head and item
        call.update(attn_mask=half(rng, ((N if batched else 1) * H, L, S), dt))
    elif masks == "causal":   # a bool causal mask, with torch's is_causal hint
        call.update(attn_mask=np.triu(np.ones((L, S), bool), 1), is_causal=True)
    elif masks:
        kpm = np.zeros((N, S) if batched else (S,), bool)
        kpm[..., 1] = True
        call.update(key_padding_mask=kpm, attn_mask=half(rng, (L, S), dt))
    (out, w), pullback = myatt.vjp(m, q, k, v, **call)
    tq = to_torch(q).requires_grad_()
    tk = tq if mode == "qkv" else to_torch(k).requires_grad_()
    tv = tk if mode != "sep" else to_torch(v).requires_grad_()
    tcall = {key: torch.from_numpy(val) if val.dtype == bool else to_torch(val)
             for key, val in call.items() if isinstance(val, np.ndarray)}
    to, tw = t(tq, tk, tv, need_weights=need_weights, average_attn_weights=average,
               is_causal=call.get("is_causal", False), **tcall)
    go = half(rng, out.shape, dt)
    gw = half(rng, w.shape, dt) if need_weights else None
    torch.autograd.backward([to] + ([tw] if need_weights else []),
                            [to_torch(go)] + ([to_torch(gw)] if need_weights else []))
    grads = pullback(go, gw)
    run_mha.last = (tcall, go)   # (the masks and grad_output, for a float64 reference)
    return out, w, grads, t, to, tw, (tq, tk, tv)


@pytest.mark.parametrize("case", list(MHA_CASES), ids=list(MHA_CASES))
def test_mha_half_is_torchs(rng, dts, case):
    """MultiheadAttention(dtype=float16 / bfloat16) against torch's module in the dtype:
    the output, the weights and every gradient, bit for bit (bfloat16: where torch's
    products above oneDNN's threshold run on vdpbf16ps here)."""
    dt, tdt = dts
    kw = MHA_CASES[case]
    out, w, grads, t, to, tw, (tq, tk, tv) = run_mha(rng, dt, tdt, **kw)
    bits = torch_bits(dt, 1 << 20)
    check(out, to, bits)
    check(w, tw, bits)
    for name, p in t.named_parameters():
        check(grads[name], p.grad, bits)
    # one array passed twice or thrice: its whole gradient under its first name (torch's
    # one projection GEMM), the others zero
    role = {"qkv": [("query", tq)], "kv": [("query", tq), ("key", tk)],
            "sep": [("query", tq), ("key", tk), ("value", tv)]}[kw.get("mode", "qkv")]
    for name, x in role:
        check(grads[name], x.grad, bits)
    for name in ("query", "key", "value")[len(role):]:
        assert not grads[name].astype(np.float32).any()


@pytest.mark.parametrize("kw", [dict(mode="sep", batch_first=True), dict(batched=False)],
                         ids=["batch_first-separate", "unbatched"])
def test_mha_half_transposed_projection_gradients(rng, dts, kw):
    """batch_first with query, key and value apart, and an unbatched call, whose key's
    gradient reaches its projection transposed in torch: torch's bits (an unbatched bias
    gradient is torch's inner sum of that layout, colsum_half_f32) but batch_first's
    in-projection bias gradient, which torch sums over two dimensions of a transposed
    3-D gradient, accumulating in the half dtype (not reproduced): within assert_close.
    An unbatched call's query, key and value are three objects in torch (unsqueeze):
    three projections, whose gradients torch adds in the dtype as (key + value) + query."""
    dt, tdt = dts
    out, w, grads, t, to, tw, (tq, tk, tv) = run_mha(rng, dt, tdt, E=32, L=20, masks=True,
                                                     **kw)
    bits = torch_bits(dt, 1 << 20)
    unbatched = not kw.get("batched", True)
    check(out, to, bits)
    check(w, tw, bits)
    for name, p in t.named_parameters():
        check(grads[name], p.grad, bits and (unbatched or name != "in_proj_bias"))
    if unbatched:
        def add(a, b):
            return (a.astype(np.float32) + b.astype(np.float32)).astype(dt)
        check(add(add(grads["key"], grads["value"]), grads["query"]), tq.grad, bits)
    else:
        for name, x in zip(("query", "key", "value"), (tq, tk, tv)):
            check(grads[name], x.grad, bits)


@pytest.mark.parametrize("kw", [dict(masks=True), dict(batch_first=True),
                                dict(masks=True, batched=False), dict(masks="causal")],
                         ids=["masks", "batch_first", "unbatched", "is_causal"])
def test_mha_half_flash(rng, dts, kw):
    """need_weights=False: the heads through the flash kernel.  The output within
    assert_close; the parameters' gradients (torch's flash backward sums in MKL's order,
    check_flash_grad, and a chain of GEMMs after it) as close to the float64 module's as
    torch's own, on average."""
    dt, tdt = dts
    out, _, grads, t, to, _, (tq, _, _) = run_mha(rng, dt, tdt, E=32, L=20,
                                                    need_weights=False, **kw)
    check(out, to)
    tcall, go = run_mha.last
    t64 = copy.deepcopy(t).double()
    t64.zero_grad()
    x = tq.detach().double()
    o64, _ = t64(x, x, x, need_weights=False,
                 **{k: v if v.dtype == torch.bool else v.double() for k, v in tcall.items()})
    o64.backward(to_torch(go).double())
    for name, p in t64.named_parameters():
        ref = p.grad.numpy()
        ours = np.abs(grads[name].astype(np.float64) - ref).mean()
        theirs = np.abs(dict(t.named_parameters())[name].grad.double().numpy() - ref).mean()
        assert ours <= 1.25 * theirs + 1e-6, (name, ours, theirs)


@pytest.mark.parametrize("kw", [{}, dict(add_bias_kv=True, kdim=5, vdim=7),
                                dict(add_bias_kv=True, embed_dim=8)])
def test_mha_half_initialisation_is_torchs(dts, kw):
    """myatt.manual_seed(s) then MultiheadAttention(dtype=...) holds torch's parameters
    bit for bit (xavier_uniform_ in the dtype; bias_k and bias_v by normal_fill in the
    dtype, or below 16 values by float64 draws)."""
    dt, tdt = dts
    kw = dict(dict(embed_dim=24, num_heads=4), **kw)
    torch.manual_seed(3)
    t = torch.nn.MultiheadAttention(dtype=tdt, **kw)
    myatt.manual_seed(3)
    m = myatt.MultiheadAttention(dtype=dt, **kw)
    sd = m.state_dict()
    for name, p in t.state_dict().items():
        check(sd[name], p, bits=True)


def test_mha_half_state_and_errors():
    """A half module keeps its dtype through state_dict, pickling and from_torch; a mask of
    another dtype is converted to it; a wrong one is still named."""
    m = myatt.MultiheadAttention(8, 2, dtype="bfloat16")
    assert m.dtype == BF16 and m.in_proj_weight.dtype == BF16
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.dtype == BF16
    x = np.ones((3, 2, 8), np.float32)
    out, w = m(x, x, x, attn_mask=np.zeros((3, 3)))
    assert out.dtype == BF16 and w.dtype == BF16
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        m(x, x, x, attn_mask=np.zeros((2, 3), BF16))
    with pytest.raises(TypeError, match="attn_mask must be bool or floating"):
        m(x, x, x, attn_mask=np.zeros((3, 3), np.int32))


@pytest.mark.parametrize("dt", [F16, BF16], ids=IDS)
def test_every_half_value_is_read_and_written_exactly(dt):
    """All 65,536 values of the dtype through products by 1: as 65,536 matrices of one
    element (bmm's one float32 chain, torch's below 400 multiply-adds a matrix) read into
    float32 exactly and rounded back to themselves (subnormals, infinities, the largest
    values; NaN as NaN; -0 becomes 0, as 0 + -0 in any float32 sum); as one column, the
    bits of torch's bmm (bfloat16: oneDNN's on vdpbf16ps, which flushes subnormals)."""
    x = np.arange(65536, dtype=np.uint16).view(dt)
    ones = np.ones((65536, 1, 1), dt)
    for a in (x.reshape(-1, 1, 1), x[::-1].reshape(-1, 1, 1)):   # and a strided view
        y = myatt.bmm(a, ones)
        assert y.dtype == dt
        np.testing.assert_array_equal(y.astype(np.float32), a.astype(np.float32))
    if dt == F16 or BF16_DOT:
        col = x.reshape(1, -1, 1)
        check(myatt.bmm(col, ones[:1]), torch.bmm(to_torch(col), to_torch(ones[:1])),
              bits=True, equal_nan=True)


def test_bfloat16_without_ml_dtypes():
    """A torch.bfloat16 tensor where ml_dtypes cannot be imported: TypeError naming the
    argument and what to install; float16 still works."""
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import numpy as np, torch, myatt\n"
            "try:\n"
            "    myatt.softmax(torch.ones(3, dtype=torch.bfloat16))\n"
            "except TypeError as e:\n"
            "    print('TypeError:', e)\n"
            "import myatt.torch as mt\n"
            "try:\n"
            "    mt.linear(torch.ones(2, 3), torch.ones(4, 3, dtype=torch.bfloat16))\n"
            "except TypeError as e:\n"
            "    print('TypeError:', e)\n"
            "try:\n"
            "    myatt.Linear(2, 3, dtype='bfloat16')\n"
            "except TypeError as e:\n"
            "    print('TypeError:', e)\n"
            "print(myatt.softmax(np.ones(2, np.float16)).dtype)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert "TypeError: softmax(): input is a torch.bfloat16 tensor" in r.stdout
    assert "TypeError: myatt.torch.linear(): weight is bfloat16: myatt reads bfloat16 as " \
        "ml_dtypes' NumPy dtype, and ml_dtypes is not installed (pip install ml_dtypes, " \
        "or myatt[bf16])" in r.stdout
    assert "TypeError: Linear(): dtype bfloat16: myatt keeps bfloat16 as ml_dtypes' NumPy " \
        "dtype, and ml_dtypes is not installed (pip install ml_dtypes" in r.stdout
    assert r.stdout.strip().endswith("float16")


# ---- Linear with half-precision parameters ----------------------------------------------

def half_bits(a):
    """A half ndarray's or torch tensor's bits, as a uint16 ndarray."""
    if isinstance(a, torch.Tensor):
        return a.detach().contiguous().view(torch.int16).numpy().view(np.uint16)
    return np.ascontiguousarray(a).view(np.uint16)


@pytest.mark.parametrize("shape", [(5, 9, 300), (7, 300), (300,)], ids=str)
def test_linear_half_module_is_torchs(rng, dts, shape):
    """A half-precision Linear: its forward, backward, vjp and parameters against torch's
    nn.Linear of that dtype (the products are myatt.linear's: bfloat16's on vdpbf16ps
    are torch's oneDNN bits)."""
    dt, tdt = dts
    torch.manual_seed(1)
    t = torch.nn.Linear(300, 40, dtype=tdt)
    m = myatt.Linear.from_torch(t)
    assert repr(m) == f"Linear(in_features=300, out_features=40, bias=True, dtype={dt.name})"
    x = half(rng, shape, dt)
    tx = to_torch(x).requires_grad_()
    ty = t(tx)
    y = m(x)
    check(y, ty, bits=dt == BF16 and BF16_DOT and y.size * 300 > 4096)
    g = half(rng, ty.shape, dt)
    ty.backward(to_torch(g))
    grads = m.backward(x, g)
    out, pull = myatt.vjp(m, x)
    np.testing.assert_array_equal(half_bits(out), half_bits(y))
    for key, want in (("input", tx.grad), ("weight", t.weight.grad), ("bias", t.bias.grad)):
        check(grads[key], want)
        np.testing.assert_array_equal(half_bits(pull(g)[key]), half_bits(grads[key]))
    # inputs of other dtypes are converted to the layer's, as torch's module needs them
    check(m(x.astype(np.float64)), ty)


def test_linear_half_state_and_copies(rng, dts):
    dt, tdt = dts
    m = myatt.Linear(6, 4, dtype=dt)
    t = torch.nn.Linear(6, 4, dtype=tdt)
    m.load_state_dict(t.state_dict())                 # torch half tensors, bits kept
    for key, value in m.state_dict().items():
        assert value.dtype == dt
        np.testing.assert_array_equal(half_bits(value), half_bits(t.state_dict()[key]))
    w = rng.standard_normal((4, 6))                   # float64 values: rounded once
    m.load_state_dict({"weight": w, "bias": np.zeros(4)})
    np.testing.assert_array_equal(half_bits(m.weight), half_bits(w.astype(np.float32).astype(dt)))
    for c in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m), copy.copy(m)):
        assert c.dtype == dt and c.weight.dtype == dt
        np.testing.assert_array_equal(half_bits(c.weight), half_bits(m.weight))
    assert myatt.Linear(6, 4, dtype=str(tdt).split(".")[1]).dtype == dt
    assert myatt.Linear(6, 4, dtype=dt.name).dtype == dt


# (query_size, key_size, value_size1, value_size2, output_size, S): the seed's demo, sizes
# whose products pass oneDNN's threshold (bfloat16) and whose softmax rows have a tail of
# n % 16, empty ones
MYATT_SIZES = [(32, 32, 32, 64, 32, 1), (64, 48, 80, 96, 40, 100), (64, 64, 128, 64, 64, 300),
               (3, 5, 7, 2, 4, 9), (8, 8, 16, 8, 8, 0), (4, 4, 0, 3, 5, 6)]


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("sizes", MYATT_SIZES, ids=str)
def test_myatt_half_module_is_torchs(rng, dts, sizes):
    """The seed's MyAtt in a half dtype (tests/oracle.py, verbatim) against
    myatt.MyAtt.from_torch of it: forward, backward and vjp, torch's ops one by one, each
    myatt's function of the dtype; where each of those is torch's bit for bit (torch_bits),
    so is the module."""
    dt, tdt = dts
    qs, ks, v1, v2, os_, S = sizes
    torch.manual_seed(0)
    t = oracle.MyAtt(qs, ks, v1, v2, os_).to(tdt)
    m = myatt.MyAtt.from_torch(t)
    assert m.dtype == dt and m.attn.weight.dtype == dt and m.attn_combine.dtype == dt
    Q, K, V = half(rng, (2, S, qs), dt), half(rng, (3, S, ks), dt), half(rng, (1, v1, v2), dt)
    tQ, tK, tV = (to_torch(a).requires_grad_() for a in (Q, K, V))
    out, aw = t(tQ, tK, tV)
    bits = dt == F16 or BF16_DOT
    y, w = m(Q, K, V)
    check(y, out, bits=bits)
    check(w, aw, bits=bits)
    go, ga = half(rng, out.shape, dt), half(rng, aw.shape, dt)
    params = dict(t.named_parameters())
    want = torch.autograd.grad((out, aw), [tQ, tK, tV] + list(params.values()),
                               (to_torch(go), to_torch(ga)), allow_unused=True)
    for with_ga in (True, False):
        grads = m.backward(Q, K, V, go, ga if with_ga else None)
        (y2, w2), pull = myatt.vjp(m, Q, K, V)
        pulled = pull(go, ga if with_ga else None)
        np.testing.assert_array_equal(half_bits(y2), half_bits(y))
        np.testing.assert_array_equal(half_bits(w2), half_bits(w))
        if with_ga:
            for key, tw in zip(["Q", "K", "V"] + list(params), want):
                tw = torch.zeros_like(dict(Q=tQ, K=tK, V=tV, **params)[key]) if tw is None else tw
                check(grads[key], tw, bits=bits)
        for key in grads:
            assert grads[key].dtype == dt
            np.testing.assert_array_equal(half_bits(pulled[key]), half_bits(grads[key]))


def test_myatt_half_state_hostile_inputs_and_copies(rng, dts):
    """State dicts of torch half tensors (bits kept); pickles and copies; inputs of other
    dtypes and layouts converted to the module's; the errors name the argument.  (Initial
    weights: tests/test_init.py.)"""
    dt, tdt = dts
    m = myatt.MyAtt(6, 5, 4, 3, 2, dtype=dt)
    t = oracle.MyAtt(6, 5, 4, 3, 2).to(tdt)
    assert repr(m) == ("MyAtt(query_size=6, key_size=5, value_size1=4, value_size2=3, "
                       f"output_size=2, dtype={dt.name})")
    m.load_state_dict(t.state_dict())
    for key, value in m.state_dict().items():
        assert value.dtype == dt
        np.testing.assert_array_equal(half_bits(value), half_bits(t.state_dict()[key]))
    for c in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m), copy.copy(m)):
        assert c.dtype == dt
        np.testing.assert_array_equal(half_bits(c.attn.weight), half_bits(m.attn.weight))
    Q, K, V = half(rng, (1, 7, 6), dt), half(rng, (1, 7, 5), dt), half(rng, (1, 4, 3), dt)
    want = t(to_torch(Q), to_torch(K), to_torch(V))
    for q in (Q.astype(np.float64), Q.astype(np.float32).tolist(), np.asfortranarray(Q),
              to_torch(Q), to_torch(Q).requires_grad_()):
        y, w = m(q, K, V)
        check(y, want[0])
        check(w, want[1])
    y, w = m(np.zeros((1, 0, 6)), np.zeros((1, 0, 5)), V)
    assert y.shape == (1, 0, 2) and y.dtype == dt and w.shape == (0, 4)
    Q[0, 2, 1] = np.nan
    y, w = m(Q, K, V)
    assert np.isnan(y[0, 2].astype(np.float32)).all()
    assert not np.isnan(np.delete(y[0], 2, axis=0).astype(np.float32)).any()
    with pytest.raises(ValueError, match="MyAtt: Q.shape"):
        m(np.ones((1, 7, 5), dt), K, V)
    with pytest.raises(ValueError, match="grad_output"):
        m.backward(Q, K, V, np.ones((1, 7, 3), dt))


OPTIMISERS = [("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
              ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
              ("SGD", dict(lr=0.05, momentum=0.5, dampening=0.3)),
              ("Adam", dict(lr=1e-2)), ("Adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
              ("Adam", dict(lr=1e-3, weight_decay=0.1, decoupled_weight_decay=True,
                            betas=(0.6, 0.9))),
              ("Adam", dict(lr=1e-3, eps=1e-3, maximize=True))]


@pytest.mark.parametrize("name,kwargs", OPTIMISERS, ids=str)
def test_optimisers_update_half_parameters_as_torch(dts, name, kwargs):
    """Steps of myatt's SGD and Adam on a half-precision Linear, each from torch's
    parameters and optimiser state, against torch.optim's step: every op in float32,
    rounded once to the dtype, torch's fused multiply-adds fused.  SGD's are torch's bits
    (sizes of whole vectors: torch's scalar loop over the last n % 32 elements rounds
    twice); Adam's differ in a few elements, where torch's float32 sqrt (MKL's vector
    library) is an ulp off the correctly rounded one.  (torch's vectorised kernels: its
    DEFAULT build fuses nothing, and .ci/run's portable run leaves this test out.)"""
    dt, tdt = dts
    torch.manual_seed(0)
    t = torch.nn.Linear(64, 64, dtype=tdt)
    topt = getattr(torch.optim, name)(t.parameters(), **kwargs)
    for step in range(4):
        m = myatt.Linear.from_torch(t)
        opt = getattr(myatt, name)(m, **kwargs)
        for key in ("weight", "bias"):
            for k, v in topt.state.get(getattr(t, key), {}).items():
                opt.state[key][k] = int(v) if k == "step" else myatt._interop.to_numpy(v.clone())
        x = torch.randn(16, 64, dtype=tdt)
        topt.zero_grad()
        (t(x) ** 2).mean().backward()
        topt.step()
        opt.step({"weight": t.weight.grad, "bias": t.bias.grad})   # torch tensors taken
        for key in ("weight", "bias"):
            check(getattr(m, key), getattr(t, key), bits=name == "SGD", equal_nan=True)


@pytest.mark.parametrize("name,kwargs", [OPTIMISERS[1], OPTIMISERS[5]], ids=str)
def test_myatt_half_training_steps_are_torchs(dts, name, kwargs):
    """Training steps of a half-precision MyAtt, each from torch's parameters and
    optimiser state, against the seed's module trained by torch in that dtype: myatt.vjp's
    gradients, then the optimiser's step (SGD's bits; Adam's but for torch's MKL sqrt, as
    the test above; tensors of whole vectors of 32)."""
    dt, tdt = dts
    torch.manual_seed(0)
    t = oracle.MyAtt(16, 16, 32, 16, 32).to(tdt)
    topt = getattr(torch.optim, name)(t.parameters(), **kwargs)
    params = dict(t.named_parameters())
    for step in range(3):
        m = myatt.MyAtt.from_torch(t)
        opt = getattr(myatt, name)(m, **kwargs)
        for key, p in params.items():
            for k, v in topt.state.get(p, {}).items():
                opt.state[key][k] = int(v) if k == "step" else myatt._interop.to_numpy(v.clone())
        Q, K = torch.randn(1, 5, 16, dtype=tdt), torch.randn(1, 5, 16, dtype=tdt)
        V = torch.randn(1, 32, 16, dtype=tdt)
        out, aw = t(Q, K, V)
        topt.zero_grad()
        out.backward(torch.ones_like(out))
        topt.step()
        (y, w), pull = myatt.vjp(m, Q, K, V)
        grads = pull(np.ones(y.shape, dt))
        opt.step({key: grads[key] for key in params})
        for key, p in params.items():
            check(m.state_dict()[key], p, bits=name == "SGD", equal_nan=True)


def test_linear_half_hostile_inputs(rng, dts):
    """What users pass a half-precision Linear: lists, float64, Fortran order, torch
    tensors, empty arrays, NaN, a wrong shape (the error names the argument)."""
    dt, tdt = dts
    m = myatt.Linear(4, 3, dtype=dt)
    t = torch.nn.Linear(4, 3, dtype=tdt)
    m.load_state_dict(t.state_dict())
    x = half(rng, (5, 4), dt)
    want = t(to_torch(x))
    for given in (x.astype(np.float64), x.astype(np.float32).tolist(), np.asfortranarray(x),
                  to_torch(x), to_torch(x).requires_grad_()):
        check(m(given), want)
    assert m(np.zeros((0, 4))).shape == (0, 3) and m(np.zeros((0, 4))).dtype == dt
    assert m.backward(np.zeros((2, 0, 4)), np.zeros((2, 0, 3)))["weight"].dtype == dt
    x[1, 2] = np.nan
    y = m(x).astype(np.float32)
    assert np.isnan(y[1]).all() and not np.isnan(np.delete(y, 1, axis=0)).any()
    with pytest.raises(ValueError, match="Linear: input"):
        m(np.ones((5, 3), dt))
    with pytest.raises(ValueError, match="grad_output"):
        m.backward(x, np.ones((5, 4)))
