"""Replace mode: a ``TorchFunctionMode`` that calls myatt's twins (``myatt.torch``) instead
of ``F.linear``, softmax, ``bmm``, ``F.scaled_dot_product_attention`` and
``F.multi_head_attention_forward``, recording each call.

The twins are ``torch.autograd.Function``s whose backward is myatt's pullback, so gradients
flow as on torch's kernels. A call myatt cannot run (a dtype it lacks, dropout, an argument
it does not take) is left to torch, and its row says so.
"""
import inspect

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import torch as mt
from ._validate_calls import (add_record, describe, dtype_reason, local, module_name, note,
                              Record, resolve_pending, tensors_in, watch)
from ._validate_rerun import settle


def _softmax_call(input, dim=None, dtype=None, _stacklevel=3):
    return mt.softmax(input, dim, dtype, _stacklevel=_stacklevel + 1)


_REPLACE: dict = {}


def _replace_table():
    if _REPLACE:
        return _REPLACE
    table = [
        ("linear", F.linear, mt.linear, ("input", "weight", "bias"),
         (("input", "input"), ("weight", "weight"), ("bias", "bias"))),
        ("softmax", F.softmax, _softmax_call, ("input", "dim", "_stacklevel", "dtype"),
         (("input", "input"),)),
        ("softmax", torch.softmax, _softmax_call, ("input", "dim", "dtype"),
         (("input", "input"),)),
        ("softmax", torch.Tensor.softmax, _softmax_call, ("input", "dim", "dtype"),
         (("input", "input"),)),
        ("bmm", torch.bmm, mt.bmm, ("input", "mat2"), (("input", "input"), ("mat2", "mat2"))),
        ("bmm", torch.Tensor.bmm, mt.bmm, ("input", "mat2"),
         (("input", "input"), ("mat2", "mat2"))),
        ("sdpa", F.scaled_dot_product_attention, mt.scaled_dot_product_attention,
         ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
          "enable_gqa"), (("query", "query"), ("key", "key"), ("value", "value"))),
        ("mha", F.multi_head_attention_forward, mt.multi_head_attention_forward,
         tuple(inspect.signature(F.multi_head_attention_forward).parameters), None),
    ]
    for op, fn, twin, names, grads in table:
        _REPLACE[fn] = (op, twin, names, grads)
    return _REPLACE


def _torch_softmax(input, dim=None, dtype=None):
    return F.softmax(input, dim, dtype=dtype)


def _myatt_softmax(input, dim=None, dtype=None):
    return mt.softmax(input, dim, dtype)


# a replaced call's arguments are recorded by name: each side rerun with them as keywords
_TORCH_FN = {"linear": F.linear, "softmax": _torch_softmax, "bmm": torch.bmm,
             "sdpa": F.scaled_dot_product_attention, "mha": F.multi_head_attention_forward}
_MYATT_FN = {"linear": mt.linear, "softmax": _myatt_softmax, "bmm": mt.bmm,
             "sdpa": mt.scaled_dot_product_attention, "mha": mt.multi_head_attention_forward}


class ReplaceMode(TorchFunctionMode):
    """Calls myatt's twins instead of torch's functions, recording each call."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        loc = local
        entry = _replace_table().get(func)
        if entry is None or loc.busy or not loc.sessions:
            return func(*args, **kwargs)
        if loc.pending:
            resolve_pending()
        op, twin, names, grads = entry
        loc.busy += 1
        try:
            record, call = self._record(func, op, twin, names, grads, args, kwargs)
        except Exception as e:       # never break the model: torch runs the call instead
            note(f"{getattr(func, '__name__', func)}: a call not recorded, torch ran it "
                 f"({type(e).__name__}: {e})")
            record = None
        finally:
            loc.busy -= 1
        if record is None or record.skip is not None:
            return func(*args, **kwargs)
        try:
            out = twin(*args, **kwargs)
        except Exception as e:
            # torch's own call decides: its result flows on, or its error reaches the model
            first = str(e).splitlines()[0] if str(e) else ""
            record.skip = (f"myatt could not run it ({type(e).__name__}: {first}); torch ran "
                           f"this call")
            return func(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        loc.busy += 1
        try:
            watch(record, [outs[i] for i in record.select], later=False)
            settle(record, (), call, None)
        finally:
            loc.busy -= 1
        return out

    @staticmethod
    def _record(func, op, twin, names, grads, args, kwargs):
        call = dict(zip(names, args))
        call.update(kwargs)
        call.pop("_stacklevel", None)
        tensors = tensors_in(call)
        record = Record(op, getattr(func, "__name__", str(func)), module_name())
        describe(record, [t for t in tensors])
        reason = dtype_reason(tensors)
        if op == "sdpa" and call.get("dropout_p", 0.0) > 0:
            reason = ("dropout_p > 0: torch and myatt draw different random masks; torch ran "
                      "this call")
        if op == "mha":
            if call.get("training", True) and call.get("dropout_p", 0.0) > 0:
                reason = ("dropout > 0 in training mode: torch and myatt draw different random "
                          "masks; torch ran this call")
            elif call.get("static_k") is not None or call.get("static_v") is not None:
                reason = "static_k / static_v: not supported by myatt; torch ran this call"
            elif (call.get("in_proj_bias") is None) != (call.get("out_proj_bias") is None):
                reason = "an input projection bias without an output one: torch ran this call"
            need = call.get("need_weights", True)
            record.select = (0, 1) if need else (0,)
            record.names = ("attn_output", "attn_weights")[:len(record.select)]
            grads = tuple((n, n) for n in ("query", "key", "value", "in_proj_weight",
                                           "in_proj_bias", "bias_k", "bias_v",
                                           "out_proj_weight", "out_proj_bias",
                                           "q_proj_weight", "k_proj_weight", "v_proj_weight"))
        if reason is not None:
            record.skip = reason
            add_record(record)
            return record, call
        record.torch_fn = _TORCH_FN[op]
        record.myatt_fn = _MYATT_FN[op]
        seen = set()
        record.grads = tuple(
            (n, k) for n, k in grads
            if isinstance(call.get(k), torch.Tensor) and call[k].requires_grad
            and call[k].is_floating_point()
            and not (id(call[k]) in seen or seen.add(id(call[k]))))
        add_record(record)
        return record, call
