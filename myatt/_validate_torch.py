"""The torch side of ``myatt.validate``: where calls are seen, recorded, rerun and judged.

Imported only when a validation starts (it imports torch). How the calls are seen:

- shadow mode: a ``TorchDispatchMode``. It sees the aten ops below autograd, after torch
  chose its path, and changes nothing torch runs (a ``TorchFunctionMode`` would: torch's
  modules test ``has_torch_function`` and leave their fast paths when any such mode is on).
  The ops it maps back to myatt's functions: ``addmm`` / ``mm`` (linear: ``F.linear`` and
  products with a weight), ``bmm`` and ``baddbmm``, ``_softmax`` and ``_safe_softmax`` (the
  math path's), ``_scaled_dot_product_flash_attention_for_cpu`` (scaled-dot-product
  attention, grouped-query heads included). Fused ops myatt has no twin for
  (``_transformer_encoder_layer_fwd``, other backends' attention) are skipped rows.
- both modes: global module hooks (``register_module_forward_pre_hook`` and a forward hook
  with ``always_call``), which keep the fast paths, name the module of each call and make a
  row of each ``nn.MultiheadAttention`` call, whichever path it takes.
- replace mode: a ``TorchFunctionMode`` that calls myatt's twins (``myatt.torch``) instead of
  ``F.linear``, softmax, ``bmm``, ``F.scaled_dot_product_attention`` and
  ``F.multi_head_attention_forward``: torch.autograd.Functions whose backward is myatt's
  pullback, so gradients flow as on torch's kernels.

Each call is recorded with copies of its inputs (and, in shadow mode, of torch's result) and
judged when the validation ends by ``myatt._judge.judge``: myatt's result on the same inputs,
torch's float64 rerun (each side's error), and where a result is outside the tolerance
myatt's float64 rerun too (the long-reduction rule needs the two reruns to agree). With
``backward=True`` a tensor hook on the call's output
keeps its cotangent, and both sides' gradients are computed from it (torch's autograd on the
call, myatt's pullback through its twin).
"""
import contextlib
import inspect
import threading

import torch
import torch.nn.functional as F
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import _judge
from . import torch as mt
from ._validate import CallReport, ResultReport, Validation

aten = torch.ops.aten

#: a progress bar (tqdm, when installed) from this many calls to judge
PROGRESS_FROM = 200


# --------------------------------------------------------------------------------------- #
# Thread-local state and the global module hooks
# --------------------------------------------------------------------------------------- #
class _Local(threading.local):
    def __init__(self):
        self.sessions = []    # the validations active on this thread, outermost first
        self.modules = []     # _Frame of each module being called, outermost first
        self.pending = []     # (record, outputs) whose autograd history is not set yet
        self.busy = 0         # > 0 while validation's own code runs torch (reruns, copies)


_local = _Local()
_hooks_lock = threading.Lock()
_hooks: list = []
_hook_users = 0


class _Frame:
    __slots__ = ("module", "name", "names", "record")

    def __init__(self, module, name, names, record=None):
        self.module, self.name, self.names, self.record = module, name, names, record


def _install_hooks():
    global _hook_users
    with _hooks_lock:
        if _hook_users == 0:
            _hooks[:] = [register_module_forward_pre_hook(_pre_hook),
                         register_module_forward_hook(_post_hook, with_kwargs=True,
                                                      always_call=True)]
        _hook_users += 1


def _remove_hooks():
    global _hook_users
    with _hooks_lock:
        _hook_users -= 1
        if _hook_users == 0:
            for h in _hooks:
                h.remove()
            _hooks.clear()


def _is_mha(module):
    return isinstance(module, torch.nn.MultiheadAttention)


def _names_of(root):
    session = _local.sessions[0]
    names = session.names.get(id(root))
    if names is None:
        names = {id(m): n for n, m in root.named_modules(remove_duplicate=False)}
        session.names[id(root)] = names
        session.keep.append(root)      # the ids stay valid while the session lives
    return names


def _pre_hook(module, args):
    loc = _local
    if not loc.sessions or loc.busy:
        return None
    try:
        if loc.modules:
            parent = loc.modules[-1]
            names = parent.names
            name = names.get(id(module))
            if name is None:
                name = (parent.name + "." if parent.name else "") + type(module).__name__
        else:
            root = loc.sessions[0].model
            names = _names_of(root if isinstance(root, torch.nn.Module) else module)
            name = names.get(id(module), type(module).__name__)
        frame = _Frame(module, name, names)
        if _is_mha(module) and loc.sessions[0].mode == "shadow":
            # (replace mode sees its F.multi_head_attention_forward call instead)
            frame.record = _Record("mha", "nn.MultiheadAttention", name)
            _add(frame.record)
        loc.modules.append(frame)
    except Exception as e:     # never break the model: say it in the report instead
        _note(f"module {type(module).__name__}: not followed ({type(e).__name__}: {e})")
    return None


def _post_hook(module, args, kwargs, output=None):
    loc = _local
    if not loc.sessions or loc.busy:
        return None
    for i in range(len(loc.modules) - 1, -1, -1):
        if loc.modules[i].module is module:
            frame = loc.modules[i]
            del loc.modules[i:]
            break
    else:
        return None
    if loc.pending:
        _resolve_pending()
    if frame.record is not None:
        loc.busy += 1
        try:
            _record_mha(frame.record, module, args, kwargs, output)
        except Exception as e:
            frame.record.skip = f"not recorded ({type(e).__name__}: {e})"
        finally:
            loc.busy -= 1
    return None


def _note(text):
    for s in _local.sessions:
        if text not in s.report.notes:
            s.report.notes.append(text)


def _module_name():
    return _local.modules[-1].name if _local.modules else ""


# --------------------------------------------------------------------------------------- #
# A recorded call
# --------------------------------------------------------------------------------------- #
class _Record:
    """A call as recorded: enough to rerun it on both sides when the validation ends."""

    __slots__ = ("op", "torch_op", "module", "shapes", "dtype", "skip", "torch_fn",
                 "myatt_fn", "args", "kwargs", "select", "names", "theirs", "grads",
                 "cotangents", "judged")

    def __init__(self, op, torch_op, module):
        self.op, self.torch_op, self.module = op, torch_op, module
        self.shapes, self.dtype, self.skip = (), "", None
        self.torch_fn = self.myatt_fn = None
        self.args, self.kwargs = (), {}
        self.select, self.names = (0,), ("output",)
        self.theirs = None            # torch's results as they flowed (shadow), or None
        self.grads = ()               # (name, key) of the inputs whose gradients compare
        self.cotangents = None        # one per selected result, set by tensor hooks
        self.judged = {}              # (rtol, atol, backward) -> CallReport fields


def _add(record):
    for s in _local.sessions:
        s.records.append(record)


def _tensors(x):
    """The tensors in x (nested lists, tuples, dicts), in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _map(x, f, memo):
    """x with every tensor t replaced by f(t), the same object for the same tensor."""
    if isinstance(x, torch.Tensor):
        if id(x) not in memo:
            memo[id(x)] = (x, f(x))
        return memo[id(x)][1]
    if isinstance(x, tuple):
        return tuple(_map(v, f, memo) for v in x)
    if isinstance(x, list):
        return [_map(v, f, memo) for v in x]
    if isinstance(x, dict):
        return {k: _map(v, f, memo) for k, v in x.items()}
    return x


def _copy(args, kwargs):
    memo = {}
    f = lambda t: t.detach().clone()   # noqa: E731
    return _map(args, f, memo), _map(kwargs, f, memo)


def _dtype_reason(tensors):
    """Why myatt cannot rerun a call of these tensors (its dtype), or None: the one place
    that says which dtypes myatt computes (myatt.torch.COMPUTED_DTYPES)."""
    for t in tensors:
        if t.is_floating_point() and t.dtype not in mt.COMPUTED_DTYPES:
            name = str(t.dtype).replace("torch.", "")
            return (f"{name}: myatt computes float32 and float64 (half precision comes in a "
                    f"later release)")
    return None


def _describe(record, tensors):
    record.shapes = tuple(tuple(t.shape) for t in tensors)
    floats = [t for t in tensors if t.is_floating_point()]
    record.dtype = str((floats or tensors or [torch.empty(0)])[0].dtype).replace("torch.", "")


# --------------------------------------------------------------------------------------- #
# aten ops (shadow mode) -> myatt's twins
# --------------------------------------------------------------------------------------- #
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
    tensors = [t for t in _tensors(args) + _tensors(kwargs)]
    record = _Record(plan[0] if isinstance(plan, tuple) else op_name, op_name, _module_name())
    _describe(record, tensors)
    reason = plan if isinstance(plan, str) else _dtype_reason(tensors)
    if reason is not None:
        record.skip = reason
        _add(record)
        return record
    record.op, record.myatt_fn, grads, transposed = plan
    grads = [(n, k) for n, k in grads if k < len(args) and isinstance(args[k], torch.Tensor)]
    named = [args[k] for _, k in grads]
    record.shapes = tuple(tuple(t.shape)[::-1] if n in transposed else tuple(t.shape)
                          for (n, _), t in zip(grads, named)) + tuple(
        tuple(t.shape) for t in tensors if not any(t is u for u in named))
    record.torch_fn = fn
    record.args, record.kwargs = _copy(args, kwargs)
    record.grads = tuple((n, k) for n, k in grads if args[k].requires_grad)
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    record.theirs = tuple(outs[i].detach().clone() for i in record.select)
    _watch(record, [outs[i] for i in record.select], later=True)
    _add(record)
    return record


def _watch(record, outputs, later):
    """Keep the cotangents of `outputs` for the sessions that compare gradients."""
    if not any(s.backward for s in _local.sessions) or not record.grads:
        return
    if not torch.is_grad_enabled():
        return
    if later:      # below autograd: the history is set when the op returns
        _local.pending.append((record, outputs))
    else:
        _hook_outputs(record, outputs)


def _hook_outputs(record, outputs):
    record.cotangents = [None] * len(outputs)
    for i, t in enumerate(outputs):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            def keep(g, i=i):
                record.cotangents[i] = g.detach().clone()
            t.register_hook(keep)


def _resolve_pending():
    pending, _local.pending = _local.pending, []
    for record, outputs in pending:
        _hook_outputs(record, outputs)


class _ShadowMode(TorchDispatchMode):
    """Sees every aten op, records those myatt reruns; changes nothing torch runs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        loc = _local
        if loc.busy or not loc.sessions:
            return out
        if loc.pending:
            _resolve_pending()
        plan = _ATEN.get(func)
        if plan is None or torch._C._current_autograd_node() is not None:
            return out       # not ours, or an op of a backward pass
        if (func is aten._native_multi_head_attention.default and loc.modules
                and _is_mha(loc.modules[-1].module)):
            return out       # the module's own row covers its fast path
        loc.busy += 1
        try:
            if func in _COMPOSITE:
                _note(_INFERENCE_NOTE)
            if callable(plan):
                plan = plan(args, kwargs)
            _record_call(str(func).replace(".default", ""), plan, func, args, kwargs, out)
        except Exception as e:
            _note(f"{func}: a call not recorded ({type(e).__name__}: {e})")
        finally:
            loc.busy -= 1
        return out


# --------------------------------------------------------------------------------------- #
# nn.MultiheadAttention calls (shadow mode): one row per module call, on either path
# --------------------------------------------------------------------------------------- #
class _MhaOnMyatt(TorchFunctionMode):
    """Inside: F.multi_head_attention_forward runs on myatt's twin (and, as with any
    function mode, torch's module takes its slow path, which calls it)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.multi_head_attention_forward:
            return mt.multi_head_attention_forward(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


class _ModuleCall:
    """module(**arguments) with the parameters and the mode it had at the call."""

    def __init__(self, module, training, on_myatt):
        self.module, self.training, self.on_myatt = module, training, on_myatt

    def __call__(self, state, **arguments):
        m = self.module
        was = m.training
        m.train(self.training)
        try:
            with _MhaOnMyatt() if self.on_myatt else contextlib.nullcontext():
                return torch.func.functional_call(m, state, (), arguments)
        finally:
            m.train(was)


def _record_mha(record, module, args, kwargs, output):
    if output is None:
        record.skip = "the call raised"
        return
    bound = inspect.signature(type(module).forward).bind(module, *args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    state = {k: v for k, v in module.state_dict(keep_vars=True).items()}
    tensors = _tensors(arguments) + [v for v in state.values()]
    _describe(record, _tensors(arguments))
    reason = _dtype_reason(tensors)
    if reason is None and module.training and module.dropout > 0:
        reason = ("dropout > 0 in training mode: torch and myatt draw different random masks "
                  "(validate the model in eval mode)")
    if reason is not None:
        record.skip = reason
        return
    outs = output if isinstance(output, tuple) else (output,)
    record.select = (0, 1) if isinstance(outs[1], torch.Tensor) else (0,)
    record.names = ("attn_output", "attn_weights")[:len(record.select)]
    record.torch_fn = _ModuleCall(module, module.training, on_myatt=False)
    record.myatt_fn = _ModuleCall(module, module.training, on_myatt=True)
    record.args = ()
    kw = {**arguments, "state": state}
    _, record.kwargs = _copy((), kw)
    grads = [(n, n) for n in ("query", "key", "value")
             if isinstance(arguments.get(n), torch.Tensor) and arguments[n].requires_grad]
    seen = set()
    record.grads = tuple((n, k) for n, k in grads
                         if not (id(arguments[n]) in seen or seen.add(id(arguments[n])))) + tuple(
        (n, ("state", n)) for n, v in state.items() if v.requires_grad)
    record.theirs = tuple(outs[i].detach().clone() for i in record.select)
    _watch(record, [outs[i] for i in record.select], later=False)


# --------------------------------------------------------------------------------------- #
# torch functions (replace mode) -> myatt's twins
# --------------------------------------------------------------------------------------- #
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


class _ReplaceMode(TorchFunctionMode):
    """Calls myatt's twins instead of torch's functions, recording each call."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        loc = _local
        entry = _replace_table().get(func)
        if entry is None or loc.busy or not loc.sessions:
            return func(*args, **kwargs)
        if loc.pending:
            _resolve_pending()
        op, twin, names, grads = entry
        loc.busy += 1
        try:
            record = self._record(func, op, twin, names, grads, args, kwargs)
        except Exception as e:       # never break the model: torch runs the call instead
            _note(f"{getattr(func, '__name__', func)}: a call not recorded, torch ran it "
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
            _watch(record, [outs[i] for i in record.select], later=False)
        finally:
            loc.busy -= 1
        return out

    @staticmethod
    def _record(func, op, twin, names, grads, args, kwargs):
        call = dict(zip(names, args))
        call.update(kwargs)
        call.pop("_stacklevel", None)
        tensors = _tensors(call)
        record = _Record(op, getattr(func, "__name__", str(func)), _module_name())
        _describe(record, [t for t in tensors])
        reason = _dtype_reason(tensors)
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
            _add(record)
            return record
        record.torch_fn = _TORCH_FN[op]
        record.myatt_fn = _MYATT_FN[op]
        record.args, record.kwargs = _copy((), call)
        seen = set()
        record.grads = tuple(
            (n, k) for n, k in grads
            if isinstance(call.get(k), torch.Tensor) and call[k].requires_grad
            and call[k].is_floating_point()
            and not (id(call[k]) in seen or seen.add(id(call[k]))))
        _add(record)
        return record


# --------------------------------------------------------------------------------------- #
# Judging a record
# --------------------------------------------------------------------------------------- #
def _to64(x, memo):
    return _map(x, lambda t: t.to(torch.float64) if t.is_floating_point() else t, memo)


def _get(args, kwargs, key):
    if isinstance(key, int):
        return args[key]
    if isinstance(key, tuple):
        return kwargs[key[0]][key[1]]
    return kwargs[key]


def _set(args, kwargs, key, value):
    if isinstance(key, int):
        args[key] = value
    elif isinstance(key, tuple):
        kwargs[key[0]] = dict(kwargs[key[0]])
        kwargs[key[0]][key[1]] = value
    else:
        kwargs[key] = value


def _run(fn, record, wide, grads, cotangents):
    """fn on the record's inputs (float64 when `wide`): (selected results, gradients of the
    `grads` inputs given the cotangents, or None)."""
    memo = {}
    args = list(_to64(record.args, memo) if wide else record.args)
    kwargs = dict(_to64(record.kwargs, memo) if wide else record.kwargs)
    leaves = {}
    for _, key in grads:
        t = _get(args, kwargs, key)
        if id(t) not in leaves:
            leaves[id(t)] = t.detach().requires_grad_()
        _set(args, kwargs, key, leaves[id(t)])
    # one leaf per distinct tensor: the same object where the call had the same object
    if grads:
        for k, v in list(kwargs.items()):
            if isinstance(v, torch.Tensor) and id(v) in leaves:
                kwargs[k] = leaves[id(v)]
    with torch.enable_grad() if grads else torch.no_grad(), _own_work():
        out = fn(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    results = tuple(outs[i] for i in record.select)
    if not grads:
        return tuple(r.detach() for r in results), None
    pairs = [(r, c) for r, c in zip(results, cotangents) if c is not None and r.requires_grad]
    targets = [_get(args, kwargs, key) for _, key in grads]
    if not pairs:
        return tuple(r.detach() for r in results), [None] * len(targets)
    g = torch.autograd.grad([r for r, _ in pairs],
                            targets,
                            [c.to(r.dtype) for r, c in pairs], allow_unused=True)
    return tuple(r.detach() for r in results), list(g)


@contextlib.contextmanager
def _own_work():
    """Validation's own torch calls: not recorded, not replaced."""
    _local.busy += 1
    try:
        yield
    finally:
        _local.busy -= 1


def _np(t):
    return None if t is None else t.detach().cpu().numpy()


def _judge_record(record, rtol, atol, backward):
    """The CallReport fields of a record (cached: nested validations judge a call once)."""
    key = (rtol, atol, backward)
    if key in record.judged:
        return record.judged[key]
    fields = dict(op=record.op, module=record.module, shapes=record.shapes,
                  dtype=record.dtype, torch_op=record.torch_op)
    if record.skip is not None:
        fields.update(verdict="skipped", reason=record.skip)
        record.judged[key] = fields
        return fields
    rt, at = (rtol, atol) if rtol is not None else _judge.tolerances(record.dtype)
    wide = record.dtype == "float32"
    grads = record.grads if backward and record.cotangents is not None and any(
        c is not None for c in record.cotangents) else ()
    cot = record.cotangents
    ours, g_ours = _run(record.myatt_fn, record, False, grads, cot)
    if record.theirs is not None and not grads:
        theirs, g_theirs = record.theirs, None
    else:
        theirs, g_theirs = _run(record.torch_fn, record, False, grads, cot)
        if record.theirs is not None:
            theirs = record.theirs     # what flowed in the model
    theirs64 = g_theirs64 = None
    if wide:
        theirs64, g_theirs64 = _run(record.torch_fn, record, True, grads, cot)
    # (name, myatt's, torch's, torch's float64, where myatt's float64 is in its rerun)
    compared = [(name, ours[i], theirs[i], theirs64[i] if wide else None, (0, i))
                for i, name in enumerate(record.names)]
    compared += [("grad " + name, g_ours[j], g_theirs[j],
                  g_theirs64[j] if wide else None, (1, j))
                 for j, (name, _) in enumerate(grads)
                 if g_theirs is not None and not (g_ours[j] is None and g_theirs[j] is None)]
    results = [_result(name, a, b, rt, at, None, b64) for name, a, b, b64, _ in compared]
    if wide and any(not r.agree for r in results):
        # myatt's float64 rerun, where a result is outside the tolerance: the long-reduction
        # rule needs both float64 reruns to agree before torch's is a referee (within the
        # tolerance the verdict does not need it: each side's error is against torch's)
        ours64 = _run(record.myatt_fn, record, True, grads, cot)
        results = [r if r.agree else
                   _result(name, a, b, rt, at, ours64[where[0]][where[1]], b64)
                   for r, (name, a, b, b64, where) in zip(results, compared)]
    fields["results"] = results
    bad = [r for r in results if not r.agree]
    fields.update(max_abs=max(r.max_abs for r in results),
                  max_rel=max(r.max_rel for r in results),
                  myatt_error=_max([r.myatt_error for r in results]),
                  torch_error=_max([r.torch_error for r in results]),
                  verdict="differ" if bad else "agree",
                  reason="; ".join(f"{r.name}: {r.reason}" for r in bad) if bad else
                  "; ".join(f"{r.name}: {r.reason}" for r in results if r.reason))
    record.judged[key] = fields
    return fields


def _max(xs):
    xs = [x for x in xs if x is not None]
    return max(xs) if xs else None


def _result(name, ours, theirs, rtol, atol, ours64, theirs64):
    if ours is None or theirs is None:
        side = "myatt" if ours is None else "torch"
        return ResultReport(name, (), False, float("nan"), float("nan"), None, None,
                            reason=f"{side} gave no gradient")
    a, b, a64, b64 = _np(ours), _np(theirs), _np(ours64), _np(theirs64)
    j = _judge.judge(a, b, rtol, atol, ours64=a64, theirs64=b64)
    em, et, reason = j.err64_myatt, j.err64_torch, j.reason
    if j.agree64 is False:
        # The two float64 reruns disagree: neither is a referee (a broken kernel is broken
        # in float64 too). Each side's error is then against its own float64 rerun, and
        # the reason says so instead of naming a side nearer to torch's float64.
        em, et = _judge._max_error(a, a64), _judge._max_error(b, b64)
        reason = (f"{j.mismatched} of {j.size} elements outside rtol={rtol:g}, atol={atol:g}; "
                  f"the float64 reruns of myatt and torch differ too (by up to "
                  f"{_judge._max_error(a64, b64):.3g}): not rounding, the two sides compute "
                  f"different things (each side's error against its own float64 rerun: "
                  f"myatt {em:.3g}, torch {et:.3g})")
    return ResultReport(name, tuple(theirs.shape), j.agree, j.max_abs, j.max_rel,
                        em, et, j.mismatched, j.size, reason)


# --------------------------------------------------------------------------------------- #
# Sessions: validating() blocks and validate()
# --------------------------------------------------------------------------------------- #
class Session:
    """``with myatt.validating(...) as report``: records the calls of this thread."""

    def __init__(self, mode, backward, rtol, atol, model=None, title="validating block"):
        self.mode, self.backward, self.rtol, self.atol = mode, backward, rtol, atol
        self.model = model
        self.records, self.names, self.keep = [], {}, []
        self.report = Validation(mode=mode, model=title, backward=backward, rtol=rtol,
                                 atol=atol)
        self._torch_mode = None
        self._entered = False

    def __enter__(self):
        if self._entered:
            raise RuntimeError("a validating block cannot be entered twice")
        loc = _local
        if loc.sessions and loc.sessions[0].mode != self.mode:
            raise ValueError(f"a nested validating block must have the enclosing block's mode "
                             f"({loc.sessions[0].mode!r}), got {self.mode!r}")
        self._entered = True
        if not loc.sessions:
            _install_hooks()
            self._torch_mode = _ShadowMode() if self.mode == "shadow" else _ReplaceMode()
            try:
                self._torch_mode.__enter__()
            except BaseException:
                _remove_hooks()
                raise
            if self.model is not None and not isinstance(self.model, torch.nn.Module):
                self.model = None
        loc.sessions.append(self)
        return self.report

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        if exc_type is not None:
            self.report.notes.append(f"the block raised {exc_type.__name__}: the calls made "
                                     f"before it are judged")
        try:
            self.judge()
        except Exception as e:
            if exc_type is None:
                raise
            self.report.notes.append(f"judging failed too ({type(e).__name__}: {e})")
        return False

    def stop(self):
        loc = _local
        if self not in loc.sessions:
            return
        if loc.sessions[-1] is not self:
            raise RuntimeError("validating blocks must be left in the reverse order of "
                               "entering them")
        if loc.pending:
            _resolve_pending()
        loc.sessions.pop()
        if not loc.sessions:
            loc.modules.clear()
            loc.pending.clear()
            try:
                self._torch_mode.__exit__(None, None, None)
            finally:
                _remove_hooks()

    def judge(self):
        records = self.records
        iterator = records
        if len(records) >= PROGRESS_FROM:
            try:
                from tqdm.auto import tqdm  # type: ignore[import-untyped]
                iterator = tqdm(records, desc="myatt.validate", unit="call", leave=False)
            except ImportError:
                pass
        calls = []
        _local.busy += 1
        try:
            for i, record in enumerate(iterator):
                calls.append(CallReport(index=i, **_judge_record(record, self.rtol, self.atol,
                                                                 self.backward)))
        finally:
            _local.busy -= 1
        self.report.calls = calls
        if self.backward and any(r.grads and not any(c is not None for c in r.cotangents or ())
                                 for r in records if r.skip is None):
            self.report.notes.append("some calls got no gradient (no backward pass reached "
                                     "them): their rows compare the forward only")
        return self.report


def _flatten(x, prefix="output"):
    """(name, tensor) of the floating tensors in a model's output, in order."""
    if isinstance(x, torch.Tensor):
        return [(prefix, x)] if x.is_floating_point() else []
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in _flatten(v, f"{prefix}.{k}")]
    if isinstance(x, (list, tuple)):
        return [p for i, v in enumerate(x) for p in _flatten(v, f"{prefix}[{i}]")]
    return []


def _grad_outputs(outputs, grad_outputs):
    if grad_outputs is None:
        return [torch.ones_like(t) for _, t in outputs]
    if isinstance(grad_outputs, torch.Tensor):
        grad_outputs = [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad_outputs: {len(grad_outputs)} given for {len(outputs)} outputs "
                         f"that require grad ({', '.join(n for n, _ in outputs)})")
    return grad_outputs


def _loss_and_grads(outputs, grad_outputs, params, backward):
    """(the loss sum(output * grad_output) over the model's floating outputs, the gradient
    of each parameter that requires grad, by name): with `backward`, over the outputs that
    require grad, back-propagated by torch.autograd.grad (no .grad is touched); else the
    loss alone, over every floating output."""
    outs = [(n, t) for n, t in _flatten(outputs) if t.requires_grad or not backward]
    if backward and not outs:
        raise ValueError("backward=True: no output of the model requires grad (are its "
                         "parameters frozen, or does it run under torch.no_grad?)")
    cots = _grad_outputs(outs, grad_outputs)
    with torch.no_grad():
        loss = sum((t * c.to(t.dtype)).sum() for (_, t), c in zip(outs, cots))
    if not backward:
        return loss, []
    targets = [(n, p) for n, p in params if p.requires_grad]
    grads = torch.autograd.grad([t for _, t in outs], [p for _, p in targets], cots,
                                allow_unused=True) if targets else []
    return loss, list(zip([n for n, _ in targets], grads))


def validate(model, args, kwargs, mode, backward, grad_outputs, rtol, atol):
    title = type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(
        model, "__name__", type(model).__name__)
    params = list(model.named_parameters()) if isinstance(model, torch.nn.Module) else []
    session = Session(mode, backward, rtol, atol, model=model, title=title)
    grad_mode = torch.enable_grad() if backward else contextlib.nullcontext()
    reference = None
    if mode == "replace":      # the same model on torch alone, from the same random state
        rng = torch.random.get_rng_state()
        with _detached(), grad_mode:
            out_ref = model(*args, **kwargs)
            reference = (out_ref, _loss_and_grads(out_ref, grad_outputs, params, backward))
        torch.random.set_rng_state(rng)
    with session as report:
        with grad_mode:
            out = model(*args, **kwargs)
            _resolve_pending()
            ours = _loss_and_grads(out, grad_outputs, params, backward)
    if mode == "replace":
        _end_to_end(report, model, args, kwargs, out, ours, reference, grad_outputs, backward,
                    rtol, atol)
    return report


def _end_to_end(report, model, args, kwargs, out, ours, reference, grad_outputs, backward,
                rtol, atol):
    """report.outputs: the model on myatt against the model on torch (and float64 reruns of
    both when the model is float32 and can be copied)."""
    out_ref, ref_grads = reference
    pairs = list(zip(_flatten(out), _flatten(out_ref)))
    pairs.append((("loss", ours[0]), ("loss", ref_grads[0])))
    pairs += [(("grad " + n, g), ("grad " + n, h))
              for (n, g), (_, h) in zip(ours[1], ref_grads[1]) if g is not None]
    wide = {}
    if any(t.dtype == torch.float32 for (_, t), _ in pairs):
        try:
            wide = _float64_runs(model, args, kwargs, grad_outputs, backward, rtol, atol)
        except Exception as e:
            report.notes.append(f"end to end: no float64 reruns ({type(e).__name__}: {e})")
    for (name, a), (_, b) in pairs:
        dt = str(b.dtype).replace("torch.", "")
        rt, at = (rtol, atol) if rtol is not None else _judge.tolerances(dt)
        a64, b64 = wide.get(name, (None, None)) if dt == "float32" else (None, None)
        report.outputs.append(_result(name, a, b, rt, at, a64, b64))


@contextlib.contextmanager
def _detached():
    """Validation's own runs of a model (replace mode's reference and float64 runs): the
    enclosing validating blocks of this thread neither record nor replace anything in them."""
    loc = _local
    saved = loc.sessions, loc.modules, loc.pending
    loc.sessions, loc.modules, loc.pending = [], [], []
    try:
        yield
    finally:
        loc.sessions, loc.modules, loc.pending = saved


def _float64_runs(model, args, kwargs, grad_outputs, backward, rtol, atol):
    """The model in float64 on myatt and on torch (replace mode): {name: (myatt's, torch's)}
    for each end-to-end result."""
    import copy
    with _detached():
        model64 = copy.deepcopy(model).to(torch.float64) if isinstance(
            model, torch.nn.Module) else model
        memo = {}
        a64, k64 = _to64(args, memo), _to64(kwargs, memo)
        p64 = list(model64.named_parameters()) if isinstance(model64, torch.nn.Module) else []
        g64 = None if grad_outputs is None else _to64(grad_outputs, {})
        grad_mode = torch.enable_grad() if backward else contextlib.nullcontext()
        rng = torch.random.get_rng_state()
        with grad_mode:
            r64 = model64(*a64, **k64)
            rg64 = _loss_and_grads(r64, g64, p64, backward)
        torch.random.set_rng_state(rng)
        inner = Session("replace", False, rtol, atol, model=model64, title="float64")
        inner.judge = lambda: inner.report        # its calls are not judged: only its outputs
        with inner, grad_mode:
            m64 = model64(*a64, **k64)
            mg64 = _loss_and_grads(m64, g64, p64, backward)
        torch.random.set_rng_state(rng)
    wide_pairs = list(zip(_flatten(m64), _flatten(r64)))
    wide_pairs.append((("loss", mg64[0]), ("loss", rg64[0])))
    wide_pairs += [(("grad " + n, g), ("grad " + n, h))
                   for (n, g), (_, h) in zip(mg64[1], rg64[1]) if g is not None]
    return {n: (a, b) for (n, a), (_, b) in wide_pairs}
