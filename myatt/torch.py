"""torch-facing twins: myatt's kernels inside torch models, tensors in and out.

Each function takes what its torch namesake takes and returns a tensor of torch's dtype,
shape and device, computed by myatt's C kernels; gradients flow through :func:`myatt.vjp`
(a ``torch.autograd.Function`` whose backward is the forward's pullback), so a model that
calls them trains as it would on torch's kernels::

    import myatt.torch as mt
    out = mt.scaled_dot_product_attention(q, k, v, is_causal=True)   # q, k, v tensors
    out.sum().backward()                                              # myatt's gradients

=================================  ==============================================
``linear``                         ``torch.nn.functional.linear``
``softmax``                        ``torch.softmax`` / ``torch.nn.functional.softmax``
``bmm``                            ``torch.bmm``
``scaled_dot_product_attention``   ``torch.nn.functional.scaled_dot_product_attention``
``multi_head_attention_forward``   ``torch.nn.functional.multi_head_attention_forward``
=================================  ==============================================

:func:`register_transformers_attention` registers myatt's attention with ``transformers``'
``AttentionInterface`` (``attn_implementation="myatt"``). This module imports torch; the
package itself (``import myatt``) never does.

What differs from torch: myatt computes float32, float64, float16 and bfloat16 (as torch
computes the half ones on the CPU; bfloat16 needs ``ml_dtypes``), and
``multi_head_attention_forward`` float32 and float64 (other dtypes are a ``TypeError``:
call torch's function for them); dropout draws from myatt's generator
(``myatt.manual_seed``), not torch's; a float ``attn_mask`` gets no gradient; the
gradients are once-differentiable (no double backward).
"""
import numpy as np
import torch

from . import _interop, _myatt, _twins

__all__ = [
    "bmm",
    "linear",
    "multi_head_attention_forward",
    "register_transformers_attention",
    "scaled_dot_product_attention",
    "softmax",
]

#: torch dtypes myatt's functions and modules compute in (the half ones as torch does on
#: the CPU)
COMPUTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check_dtypes(caller, tensors):
    for name, t in tensors:
        if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
            continue
        if t.dtype not in COMPUTED_DTYPES:
            names = " and ".join(", ".join(str(d).replace("torch.", "") for d in COMPUTED_DTYPES)
                                 .rsplit(", ", 1))
            raise TypeError(f"myatt.torch.{caller}(): {name} is {t.dtype}; myatt computes it in "
                            f"{names}: call torch's function for it, or convert the tensors")
        if t.dtype == torch.bfloat16:
            _interop.bfloat16(f"myatt.torch.{caller}(): {name}")   # ml_dtypes, or TypeError


def _np(t):
    """A tensor (detached, on the CPU) or anything else as myatt takes it."""
    return _interop.to_numpy(t) if isinstance(t, torch.Tensor) else t


def _tensor(a, like):
    """A myatt result as a tensor on the device of `like` (a tensor)."""
    t = _interop.to_tensor(a, torch)
    return t.to(like.device) if like.device.type != "cpu" else t


def _grad(g, like):
    """A gradient from myatt for the tensor `like` (None stays None), in like's dtype."""
    if g is None or not isinstance(like, torch.Tensor):
        return None
    return _tensor(g, like).to(like.dtype)


class _Pullback(torch.autograd.Function):
    """Forward by `run(*arrays) -> (results, pullback)`; backward by the pullback.

    `tensors` are the call's tensor arguments (None for an absent one); the pullback gets
    one cotangent per result (None where no gradient reached it) and returns one gradient
    per tensor argument (None for those without one)."""

    @staticmethod
    def forward(ctx, run, n_results, *tensors):
        results, pullback = run(*(_np(t) if t is not None else None for t in tensors))
        ctx.pullback = pullback
        ctx.tensors = tensors
        ctx.set_materialize_grads(False)
        like = next(t for t in tensors if isinstance(t, torch.Tensor))
        outs = tuple(_tensor(r, like) if r is not None else like.new_empty(0) for r in results)
        for r, o in zip(results, outs):
            if r is None:
                ctx.mark_non_differentiable(o)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        # once_differentiable: a double backward raises instead of silently giving zeros
        return torch.autograd.function.once_differentiable(_pullback_backward)(ctx, *grads)


def _pullback_backward(ctx, *grads):
    """_Pullback's backward: the forward's pullback (no double backward: its gradients are
    computed by myatt, outside torch's graph)."""
    grads = tuple(None if g is None else _np(g) for g in grads)
    if all(g is None for g in grads):
        return (None, None) + (None,) * len(ctx.tensors)
    out = ctx.pullback(*grads)
    return (None, None) + tuple(_grad(g, t) for g, t in zip(out, ctx.tensors))


def _apply(run, n_results, *tensors):
    """run's results as tensors: through _Pullback where a gradient can reach a tensor
    argument; else `run(*arrays, pullback=False)`, myatt's plain forward (no vjp, no
    autograd node: what inference and validate's reruns cost)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        outs = _Pullback.apply(run, n_results, *tensors)
        return outs if isinstance(outs, tuple) else (outs,)
    results, _ = run(*(_np(t) if t is not None else None for t in tensors), pullback=False)
    like = next(t for t in tensors if isinstance(t, torch.Tensor))
    return tuple(_tensor(r, like) if r is not None else like.new_empty(0) for r in results)


def linear(input, weight, bias=None):
    """``torch.nn.functional.linear`` by :func:`myatt.linear`: ``input @ weight.T + bias``.

    Parameters
    ----------
    input : Tensor
        ``[..., in_features]`` (1 or more dims).
    weight : Tensor
        ``[out_features, in_features]``.
    bias : Tensor, optional
        ``[out_features]``.

    Returns
    -------
    Tensor
        ``[..., out_features]``; gradients of all three through myatt's pullback.

    Examples
    --------
    >>> import torch, myatt.torch as mt
    >>> x = torch.randn(3, 4, requires_grad=True)
    >>> w, b = torch.randn(2, 4), torch.randn(2)
    >>> y = mt.linear(x, w, b)
    >>> torch.testing.assert_close(y, torch.nn.functional.linear(x, w, b))
    >>> y.sum().backward()
    >>> x.grad.shape
    torch.Size([3, 4])
    """
    _check_dtypes("linear", [("input", input), ("weight", weight), ("bias", bias)])

    def run(x, w, b, pullback=True):
        if not pullback:
            return (_myatt.linear(x, w, b),), None
        y, pull = _myatt.vjp(_myatt.linear, x, w, b)
        return (y,), lambda g: pull(g)

    return _apply(run, 1, input, weight, bias)[0]


def softmax(input, dim=None, dtype=None, *, _stacklevel=3):
    """``torch.softmax(input, dim)`` by :func:`myatt.softmax` (``dtype``: the input is
    converted first, as torch does).

    Examples
    --------
    >>> import torch, myatt.torch as mt
    >>> x = torch.randn(2, 5)
    >>> torch.testing.assert_close(mt.softmax(x, dim=-1), torch.softmax(x, dim=-1))
    """
    if dim is None:
        dim = torch.nn.functional._get_softmax_dim("softmax", input.dim(), _stacklevel)
    if dtype is not None:
        input = input.to(dtype)
    _check_dtypes("softmax", [("input", input)])

    def run(x, pullback=True):
        if not pullback:
            return (_myatt.softmax(x, int(dim)),), None
        y, pull = _myatt.vjp(_myatt.softmax, x, int(dim))
        return (y,), lambda g: pull(g)

    return _apply(run, 1, input)[0]


def bmm(input, mat2):
    """``torch.bmm`` by :func:`myatt.bmm`: ``[b, n, m] @ [b, m, p] -> [b, n, p]``.

    Examples
    --------
    >>> import torch, myatt.torch as mt
    >>> a, c = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    >>> torch.testing.assert_close(mt.bmm(a, c), torch.bmm(a, c))
    """
    _check_dtypes("bmm", [("input", input), ("mat2", mat2)])

    def run(a, b, pullback=True):
        if not pullback:
            return (_myatt.bmm(a, b),), None
        y, pull = _myatt.vjp(_myatt.bmm, a, b)
        return (y,), lambda g: pull(g)

    return _apply(run, 1, input, mat2)[0]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``torch.nn.functional.scaled_dot_product_attention`` by
    :func:`myatt.scaled_dot_product_attention` (flash-style; gradients of query, key and
    value through its pullback, none for `attn_mask`).

    Examples
    --------
    >>> import torch, myatt.torch as mt
    >>> q, k, v = (torch.randn(1, 2, 5, 8, requires_grad=True) for _ in range(3))
    >>> out = mt.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(
    ...     q, k, v, is_causal=True))
    >>> out.sum().backward()
    >>> q.grad.shape
    torch.Size([1, 2, 5, 8])
    """
    _check_dtypes("scaled_dot_product_attention",
                  [("query", query), ("key", key), ("value", value)])
    mask = attn_mask
    if isinstance(mask, torch.Tensor) and mask.is_floating_point():
        mask = mask.detach()    # no gradient for a mask (as myatt's pullback gives none)

    def run(q, k, v, m, pullback=True):
        kwargs = dict(attn_mask=m, dropout_p=float(dropout_p), is_causal=bool(is_causal),
                      scale=scale, enable_gqa=bool(enable_gqa))
        if not pullback:
            return (_myatt.scaled_dot_product_attention(q, k, v, **kwargs),), None
        y, pull = _myatt.vjp(_myatt.scaled_dot_product_attention, q, k, v, **kwargs)
        return (y,), lambda g: pull(g)

    return _apply(run, 1, query, key, value, mask)[0]


# multi_head_attention_forward's weight arguments, in the order their gradients return
_MHA_WEIGHTS = tuple(_twins._MHA_WEIGHTS.values())


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """``torch.nn.functional.multi_head_attention_forward`` by a
    :class:`myatt.MultiheadAttention` holding the given weights, in the mode `training`
    says (``[L, N, E]`` or unbatched ``[L, E]`` inputs, as torch's function); gradients of
    the inputs and of every weight through its pullback. Returns
    ``(attn_output, attn_weights or None)``.

    Raises
    ------
    TypeError
        For `static_k` / `static_v`, and for an input projection bias without an output
        projection bias (or the reverse), which myatt's module cannot hold.
    """
    call = dict(locals())
    E = query.shape[-1]
    if E != embed_dim_to_check:
        raise ValueError(f"multi_head_attention_forward(): was expecting embedding dimension "
                         f"of {embed_dim_to_check}, but got {E}")
    if use_separate_proj_weight and key.shape[-1] == E and value.shape[-1] == E:
        # myatt holds separate projections only for other key/value sizes: the three as one
        # [3E, E] weight (the same products; their gradients through torch.cat's backward)
        call.update(in_proj_weight=torch.cat([q_proj_weight, k_proj_weight, v_proj_weight]),
                    use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                    v_proj_weight=None)
    names = [n for n in _MHA_WEIGHTS if call[n] is not None]
    _check_dtypes("multi_head_attention_forward",
                  [(n, call[n]) for n in ("query", "key", "value", *names)])
    masks = {n: _np(call[n]) for n in ("key_padding_mask", "attn_mask") if call[n] is not None}

    def run(q, k, v, *params, pullback=True):
        arrays = dict(call, query=q, key=k, value=v, **dict(zip(names, params)))
        m, keys = _twins._mha_module(**dict(arrays, key_padding_mask=None, attn_mask=None))
        flags = dict(need_weights=bool(need_weights),
                     average_attn_weights=bool(average_attn_weights), is_causal=bool(is_causal))
        if not pullback:
            return m(q, k, v, **flags, **masks), None
        result, pull = _myatt.vjp(m, q, k, v, **flags, **masks)
        out, w = result
        state_key = {arg: key for key, arg in keys.items()}

        def back(g_out, g_w=None):
            if g_out is None:
                g_out = np.zeros_like(out)
            g = pull(g_out, g_w) if w is not None else pull(g_out)
            return (g["query"], g["key"], g["value"]) + tuple(g[state_key[n]] for n in names)

        return (out, w), back

    attn_output, attn_weights = _apply(run, 2, query, key, value, *(call[n] for n in names))
    return attn_output, (attn_weights if need_weights else None)


class _SDPAOnMyatt(torch.overrides.TorchFunctionMode):
    """Inside: torch.nn.functional.scaled_dot_product_attention runs on myatt's twin."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.scaled_dot_product_attention:
            return scaled_dot_product_attention(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def _transformers_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' own "sdpa" attention function (its masks, causal flag, grouped-query
    heads and cache handling), its torch.nn.functional.scaled_dot_product_attention call
    made by myatt's twin."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    with _SDPAOnMyatt():
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def register_transformers_attention(name="myatt"):
    """Register myatt's attention with ``transformers``' ``AttentionInterface`` under `name`.

    A model built or loaded with ``attn_implementation=name`` (or switched with
    ``model.set_attn_implementation(name)``) then runs its attention, forward and
    gradients, on :func:`scaled_dot_product_attention` (grouped-query heads through
    ``enable_gqa``), in ``generate()`` and in training alike. Returns `name`.

    Raises
    ------
    ImportError
        When ``transformers`` is not installed.
    """
    from transformers import AttentionInterface, AttentionMaskInterface
    AttentionInterface.register(name, _transformers_attention)
    try:
        from transformers.masking_utils import sdpa_mask
        AttentionMaskInterface.register(name, sdpa_mask)
    except ImportError:   # older transformers: masks by attention implementation's name
        pass
    return name
