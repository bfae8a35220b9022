"""Shadow mode: a ``TorchDispatchMode`` that sees torch's aten ops and records those myatt
reruns, mapped back to myatt's twins (``myatt.torch``).

It sees the ops below autograd, after torch chose its path, and changes nothing torch runs
(a ``TorchFunctionMode`` would: torch's modules test ``has_torch_function`` and leave their
fast paths when any such mode is on). The ops it maps: ``addmm`` / ``mm`` (linear:
``F.linear`` and products with a weight), ``bmm`` and ``baddbmm``, ``_softmax`` and
``_safe_softmax`` (the math path's), ``_scaled_dot_product_flash_attention_for_cpu``
(scaled-dot-product attention, grouped-query heads included), and under
``torch.inference_mode`` the composite ops it then sees whole (``linear``, ``softmax``,
``scaled_dot_product_attention``, ``matmul``). Fused ops myatt has no twin for
(``_transformer_encoder_layer_fwd``, other backends' attention) are skipped rows.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import torch as mt
from ._validate_calls import (add_record, describe, dtype_name, dtype_reason, local,
                              module_name, note, Record, resolve_pending, tensors_in, watch)
from ._validate_modules import is_mha
from ._validate_rerun import settle

aten = torch.ops.aten


# A plan: (op, myatt's twin called as torch called the aten op, the inputs by name and
# position in myatt's order, the names given transposed). A linear's weight in addmm and mm
# is the op's mat2, the weight transposed: shown with the weight's shape, its gradient
# compared as mat2's.
def _plan_addmm(args, kwargs):
    bias, mat1, mat2 = args[:3]
    if kwargs.get("beta", 1) != 1 or kwargs.get("alpha", 1) != 1 or bias.dim() != 1:
        return "addmm with beta or alpha other than 1, or a bias that is not 1-D: not a linear call"
    return ("linear", lambda b, x, w, **kw: mt.linear(x, w.t(), b),
            (("input", 1), ("weight", 2), ("bias", 0)), {"weight"})


def _plan_mm(args, kwargs):
    return ("linear", lambda x, w: mt.linear(x, w.t()), (("input", 0), ("weight", 1)),
            {"weight"})


def _plan_bmm(args, kwargs):
    return ("bmm", mt.bmm, (("input", 0), ("mat2", 1)), ())


def _plan_baddbmm(args, kwargs):
    if kwargs.get("beta", 1) != 1 or kwargs.get("alpha", 1) != 1:
        return "baddbmm with beta or alpha other than 1"
    # bmm, then the added term (a mask) by torch: one more rounding, as torch's
    return ("bmm", lambda s, a, b, **kw: mt.bmm(a, b) + s,
            (("input", 1), ("mat2", 2), ("added", 0)), ())


def _plan_softmax(args, kwargs):
    if len(args) > 2 and args[2]:
        return "softmax of a half-precision input into float32 (half_to_float)"
    return ("softmax", lambda x, dim, *a: mt.softmax(x, dim), (("input", 0),), ())


def _safe_softmax(x, dim, dtype=None):
    """torch's _safe_softmax (its math path's): a row of -inf only gives zeros."""
    if dtype is not None:
        x = x.to(dtype)
    y = mt.softmax(x, dim)
    return torch.where((x == float("-inf")).all(dim, keepdim=True), 0.0, y)


def _plan_safe_softmax(args, kwargs):
    return ("softmax", _safe_softmax, (("input", 0),), ())


def _flash(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    return mt.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                           scale=scale, enable_gqa=q.shape[-3] != k.shape[-3])


_DROPOUT = ("dropout_p > 0: torch and myatt draw different random masks (validate the model "
            "in eval mode, or with dropout 0)")


def _plan_flash(args, kwargs):
    dropout_p = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
    if dropout_p > 0:
        return _DROPOUT
    return ("sdpa", _flash, (("query", 0), ("key", 1), ("value", 2)), ())


# Under torch.inference_mode the dispatch mode sees torch's composite ops whole (autograd's
# keys are off, so they reach the Python key before they decompose): linear, softmax,
# scaled_dot_product_attention, matmul.
def _plan_linear(args, kwargs):
    return ("linear", mt.linear, (("input", 0), ("weight", 1), ("bias", 2)), ())


def _plan_softmax_int(args, kwargs):
    return ("softmax", mt.softmax, (("input", 0),), ())


def _plan_sdpa(args, kwargs):
    dropout_p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
    if dropout_p > 0:
        return _DROPOUT
    return ("sdpa", mt.scaled_dot_product_attention, (("query", 0), ("key", 1), ("value", 2)),
            ())


def _batched_matmul(a, b):
    out = mt.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.reshape(*a.shape[:-1], b.shape[-1])


def _plan_matmul(args, kwargs):
    a, b = args[:2]
    if a.dim() >= 2 and b.dim() == 2:
        return ("linear", lambda x, w: mt.linear(x, w.t()), (("input", 0), ("weight", 1)),
                {"weight"})
    if a.dim() >= 3 and a.shape[:-2] == b.shape[:-2]:
        return ("bmm", _batched_matmul, (("input", 0), ("mat2", 1)), ())
    return (f"matmul of shapes {tuple(a.shape)} and {tuple(b.shape)}: myatt reruns products "
            f"of a matrix, or of batches of the same shape (linear, bmm)")


_FUSED = {
    "_transformer_encoder_layer_fwd":
        "nn.TransformerEncoderLayer's fused fast path (eval mode, no grad): myatt has no twin "
        "for the whole layer, so its attention is not rerun; validate it in training mode, or "
        "with gradients enabled, to check its calls one by one",
    "_native_multi_head_attention":
        "MultiheadAttention's fused fast path called outside an nn.MultiheadAttention",
    "_native_decoder_only_multi_head_attention": "a fused attention op myatt has no twin for",
    "_scaled_dot_product_efficient_attention": "a fused attention op of another backend",
    "_scaled_dot_product_flash_attention": "a fused attention op of another backend",
    "_scaled_dot_product_cudnn_attention": "a fused attention op of another backend",
    "_scaled_dot_product_fused_attention_overrideable": "a fused attention op of another backend",
}

_ATEN: dict = {
    aten.addmm.default: _plan_addmm,
    aten.mm.default: _plan_mm,
    aten.bmm.default: _plan_bmm,
    aten.baddbmm.default: _plan_baddbmm,
    aten._softmax.default: _plan_softmax,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _plan_flash,
    aten.linear.default: _plan_linear,
    aten.softmax.int: _plan_softmax_int,
    aten.scaled_dot_product_attention.default: _plan_sdpa,
    aten.matmul.default: _plan_matmul,
}
_COMPOSITE = (aten.linear.default, aten.softmax.int, aten.scaled_dot_product_attention.default,
              aten.matmul.default)
_INFERENCE_NOTE = (
    "torch.inference_mode was on: torch then passes its composite ops (linear, softmax, "
    "scaled_dot_product_attention, matmul) to any dispatch mode whole, and computes some of "
    "them in another order with one active (measured: F.linear of a parameter, 2.4e-7), so "
    "the model's outputs may differ from a run without validation in the last bits; under "
    "torch.no_grad() they do not")
if hasattr(aten, "_safe_softmax"):
    _ATEN[aten._safe_softmax.default] = _plan_safe_softmax
for _name, _reason in _FUSED.items():
    if hasattr(aten, _name):
        _ATEN[getattr(aten, _name).default] = _reason


def _record_call(op_name, plan, fn, args, kwargs, outputs):
    """Record one call of the aten op `fn` and torch's `outputs` (shadow mode); `plan` is
    (op, myatt's twin, the inputs by name, those given transposed) or why it is skipped."""
    tensors = tensors_in(args) + tensors_in(kwargs) if kwargs else tensors_in(args)
    record = Record(plan[0] if isinstance(plan, tuple) else op_name, op_name, module_name())
    reason = plan if isinstance(plan, str) else dtype_reason(tensors)
    if reason is not None:
        describe(record, tensors)
        record.skip = reason
        add_record(record)
        return record
    record.op, record.myatt_fn, inputs, transposed = plan
    inputs = [(n, k) for n, k in inputs if k < len(args) and isinstance(args[k], torch.Tensor)]
    # the shapes: the named inputs in myatt's order (a transposed one as myatt takes it),
    # then the other tensors
    named = [args[k] for _, k in inputs]
    shapes = [tuple(t.shape)[::-1] if n in transposed else tuple(t.shape)
              for (n, _), t in zip(inputs, named)]
    shapes += [tuple(t.shape) for t in tensors if all(t is not u for u in named)]
    record.shapes = tuple(shapes)
    record.dtype = dtype_name(tensors)
    record.torch_fn = fn
    record.grads = tuple((n, k) for n, k in inputs if args[k].requires_grad)
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    theirs = tuple(outs[i] for i in record.select)
    watch(record, list(theirs), later=True)
    add_record(record)
    settle(record, args, kwargs, theirs)
    return record


_OP_NAMES: dict = {}


def _op_name(func):
    """The name a row gives an aten op ("aten.addmm"), made once per op."""
    name = _OP_NAMES.get(func)
    if name is None:
        name = _OP_NAMES[func] = str(func).replace(".default", "")
    return name


class ShadowMode(TorchDispatchMode):
    """Sees every aten op, records those myatt reruns; changes nothing torch runs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        loc = local
        if loc.busy or not loc.sessions:
            return out
        if loc.pending:
            resolve_pending()
        plan = _ATEN.get(func)
        if plan is None or torch._C._current_autograd_node() is not None:
            return out       # not ours, or an op of a backward pass
        if (func is aten._native_multi_head_attention.default and loc.modules
                and is_mha(loc.modules[-1].module)):
            return out       # the module's own row covers its fast path
        loc.busy += 1
        try:
            if func in _COMPOSITE:
                note(_INFERENCE_NOTE)
            if callable(plan):
                plan = plan(args, kwargs)
            _record_call(_op_name(func), plan, func, args, kwargs, out)
        except Exception as e:
            note(f"{func}: a call not recorded ({type(e).__name__}: {e})")
        finally:
            loc.busy -= 1
        return out
