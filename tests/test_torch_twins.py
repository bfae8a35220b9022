"""myatt.torch: the torch-facing twins, tensors in and out, gradients through myatt.vjp.

Each twin against its torch function on the same tensors: the result and the gradient of
every floating argument (torch's autograd through both) at assert_close's defaults.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import myatt.torch as mt


def _leaves(args):
    return [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor)
            and a.is_floating_point() and a.dim() > 0 else a for a in args]


def check_twin(torch_fn, twin, *args, **kwargs):
    """twin(*args, **kwargs) against torch_fn: results, and the gradients of every floating
    tensor argument for a random cotangent of each result."""
    ours_in, theirs_in = _leaves(args), _leaves(args)
    ours, theirs = twin(*ours_in, **kwargs), torch_fn(*theirs_in, **kwargs)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    cots = []
    for a, b in zip(ours, theirs):
        assert (a is None) == (b is None)
        if b is not None:
            assert a.dtype == b.dtype and a.device == b.device
            torch.testing.assert_close(a, b)
            cots.append(torch.randn_like(b))
    results = [(a, b) for a, b in zip(ours, theirs) if b is not None]
    leaves = [(a, b) for a, b in zip(ours_in, theirs_in)
              if isinstance(b, torch.Tensor) and b.requires_grad]
    g_ours = torch.autograd.grad([a for a, _ in results], [a for a, _ in leaves], cots,
                                 allow_unused=True)
    g_theirs = torch.autograd.grad([b for _, b in results], [b for _, b in leaves], cots,
                                   allow_unused=True)
    for g, h in zip(g_ours, g_theirs):
        assert (g is None) == (h is None)
        if h is not None:
            torch.testing.assert_close(g, h)
    # with no gradient to carry (under no_grad): myatt's plain forward, no autograd node,
    # the bits of the forward through the pullback
    with torch.no_grad():
        plain = twin(*ours_in, **kwargs)
    plain = plain if isinstance(plain, tuple) else (plain,)
    for p, a in zip(plain, ours):
        assert (p is None) == (a is None)
        if a is not None:
            assert p.grad_fn is None and not p.requires_grad and p.dtype == a.dtype
            assert torch.equal(p, a.detach())


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels(dtype):
    torch.manual_seed(0)
    r = lambda *s: torch.randn(*s, dtype=dtype)   # noqa: E731
    check_twin(F.linear, mt.linear, r(2, 3, 8), r(5, 8), r(5))
    check_twin(F.linear, mt.linear, r(8), r(5, 8))
    check_twin(F.softmax, mt.softmax, r(3, 4, 5), dim=1)
    check_twin(torch.softmax, mt.softmax, r(3, 4), -1)
    check_twin(torch.bmm, mt.bmm, r(2, 3, 4), r(2, 4, 5))


@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"scale": 0.3},
                                    {"attn_mask": "bool"}, {"attn_mask": "float"},
                                    {"enable_gqa": True}])
@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_dot_product_attention(kwargs, dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(*s, dtype=dtype) for s in ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6)))
    if kwargs.get("enable_gqa"):
        k, v = k[:, :2], v[:, :2]
    if kwargs.get("attn_mask") == "bool":
        kwargs = {"attn_mask": torch.rand(5, 7) < 0.7}
    elif kwargs.get("attn_mask") == "float":
        kwargs = {"attn_mask": torch.randn(2, 1, 5, 7, dtype=dtype)}
    check_twin(F.scaled_dot_product_attention, mt.scaled_dot_product_attention, q, k, v,
               **kwargs)


@pytest.mark.parametrize("case", ["packed", "masks", "need_weights=False", "separate",
                                  "separate, same sizes", "bias_kv", "unbatched"])
def test_multi_head_attention_forward(case):
    torch.manual_seed(0)
    E, H = 8, 2
    kdim = vdim = E
    if case == "separate":
        kdim, vdim = 6, 5
    m = nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, add_bias_kv=case == "bias_kv")
    q = torch.randn(5, 3, E) if case != "unbatched" else torch.randn(5, E)
    k = torch.randn(q.shape[:-1] + (kdim,)) if case == "separate" else q
    v = torch.randn(q.shape[:-1] + (vdim,)) if case == "separate" else q
    sd = {n: p.detach() for n, p in m.named_parameters()}
    args = [q, k, v, E, H, sd.get("in_proj_weight"), sd["in_proj_bias"], sd.get("bias_k"),
            sd.get("bias_v"), False, 0.0, sd["out_proj.weight"], sd["out_proj.bias"]]
    kwargs = {}
    if case == "masks":
        pad = torch.zeros(3, 5)
        pad[1, 3:] = float("-inf")             # float, as the attn_mask (torch warns otherwise)
        kwargs = dict(key_padding_mask=pad, attn_mask=torch.randn(5, 5))
    if case == "need_weights=False":
        kwargs = dict(need_weights=False)
    if case.startswith("separate"):
        w = [torch.randn(E, d) / 3 for d in (E, kdim, vdim)]
        args[5] = None
        kwargs = dict(use_separate_proj_weight=True, q_proj_weight=w[0], k_proj_weight=w[1],
                      v_proj_weight=w[2], average_attn_weights=False)
    check_twin(F.multi_head_attention_forward, mt.multi_head_attention_forward, *args,
               **kwargs)


def test_self_attention_keeps_one_tensor_one_product():
    # query is key is value: the twin passes one array to myatt (its one-product path),
    # and the tensor's gradient is the sum of the three, as torch's autograd gives it
    m = nn.MultiheadAttention(8, 2)
    x = torch.randn(4, 2, 8, requires_grad=True)
    args = (8, 2, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
            m.out_proj.weight, m.out_proj.bias)
    out, _ = mt.multi_head_attention_forward(x, x, x, *args)
    (g,) = torch.autograd.grad(out.sum(), [x])
    y = x.detach().clone().requires_grad_()
    (h,) = torch.autograd.grad(F.multi_head_attention_forward(y, y, y, *args)[0].sum(), [y])
    torch.testing.assert_close(g, h)


def test_dtypes_myatt_does_not_compute_are_a_type_error():
    x = torch.randn(3, 4).to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="input is torch.float8_e4m3fn; myatt computes it in "
                                        "float32, float64, float16 and bfloat16"):
        mt.linear(x, x)
    # multi_head_attention_forward runs on a myatt module, bfloat16 too: torch's bits
    m = nn.MultiheadAttention(8, 2).to(torch.bfloat16)
    q = torch.randn(3, 1, 8, dtype=torch.bfloat16)
    args = (q, q, q, 8, 2, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
            m.out_proj.weight, m.out_proj.bias)
    got, want = mt.multi_head_attention_forward(*args), F.multi_head_attention_forward(*args)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_no_double_backward_and_the_mask_gets_no_gradient():
    q = torch.randn(1, 1, 3, 4, requires_grad=True)
    mask = torch.randn(3, 3, requires_grad=True)
    out = mt.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    g, gm = torch.autograd.grad(out.sum(), [q, mask], create_graph=True, allow_unused=True)
    assert gm is None
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        torch.autograd.grad(g.sum(), [q])


def test_results_are_new_tensors_of_torch_dtype():
    a = torch.randn(2, 3, 4, dtype=torch.float64)
    out = mt.bmm(a, a.transpose(1, 2))
    assert out.dtype == torch.float64 and out.is_contiguous() and not out.requires_grad
    assert not np.shares_memory(out.numpy(), a.numpy())
