"""validate's record of a call, and the per-thread state every part of it shares.

A ``Record`` is one call as seen (by shadow mode's dispatch mode, replace mode's function
mode, or the module hooks' row of an ``nn.MultiheadAttention``): enough to rerun it on both
sides when the validation ends (``_validate_rerun``). ``local`` is the thread's state: its
active validations, the modules being called, the calls whose gradients are still to be
hooked, and whether validation's own code is running torch (then nothing is recorded).
"""
import threading

import torch

from . import _interop, torch as mt


class Local(threading.local):
    def __init__(self):
        self.sessions = []    # the validations active on this thread, outermost first
        self.modules = []     # _Frame of each module being called, outermost first
        self.pending = []     # (record, outputs) whose autograd history is not set yet
        self.busy = 0         # > 0 while validation's own code runs torch (reruns, copies)
        self.mode = None      # the outermost session's dispatch mode (shadow mode's)


local = Local()


def note(text):
    for s in local.sessions:
        if text not in s.report.notes:
            s.report.notes.append(text)


def module_name():
    return local.modules[-1].name if local.modules else ""


class Record:
    """A call as recorded: enough to rerun it on both sides when the validation ends."""

    __slots__ = ("op", "torch_op", "module", "shapes", "dtype", "skip", "torch_fn",
                 "myatt_fn", "args", "kwargs", "select", "names", "theirs", "grads",
                 "cotangents", "judged")

    def __init__(self, op, torch_op, module):
        self.op, self.torch_op, self.module = op, torch_op, module
        self.shapes, self.dtype, self.skip = (), "", None
        self.torch_fn = self.myatt_fn = None
        self.args, self.kwargs = (), {}   # its inputs (None once judged and released)
        self.select, self.names = (0,), ("output",)
        self.theirs = None            # torch's results as they flowed (shadow), or None
        self.grads = ()               # (name, key) of the inputs whose gradients compare
        self.cotangents = None        # one per selected result, set by tensor hooks
        self.judged = {}              # (rtol, atol, backward) -> CallReport fields


def add_record(record):
    for s in local.sessions:
        s.records.append(record)


def tensors_in(x):
    """The tensors in x (nested lists, tuples, dicts), in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors_in(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors_in(v)]
    return []


def map_tensors(x, f, memo):
    """x with every tensor t replaced by f(t), the same object for the same tensor."""
    if isinstance(x, torch.Tensor):
        if id(x) not in memo:
            memo[id(x)] = (x, f(x))
        return memo[id(x)][1]
    if isinstance(x, tuple):
        return tuple(map_tensors(v, f, memo) for v in x)
    if isinstance(x, list):
        return [map_tensors(v, f, memo) for v in x]
    if isinstance(x, dict):
        return {k: map_tensors(v, f, memo) for k, v in x.items()}
    return x


def snapshot(args, kwargs):
    """args and kwargs with copies of their tensors (one copy per tensor), detached: what
    the call saw, whatever is done to its tensors afterwards. (clone under no_grad: one op
    per tensor, where detach().clone() is two, each paying the dispatch mode's toll when
    the module hooks record.)"""
    memo = {}
    with torch.no_grad():
        return map_tensors(args, torch.clone, memo), map_tensors(kwargs, torch.clone, memo)


def copies(tensors):
    """Detached copies of `tensors` (torch's results as they flowed)."""
    with torch.no_grad():
        return tuple(t.clone() for t in tensors)


def dtype_reason(tensors):
    """Why myatt cannot rerun a call of these tensors (its dtype), or None: the one place
    that says which dtypes myatt reruns (myatt.torch's COMPUTED_DTYPES)."""
    for t in tensors:
        if t.is_floating_point() and t.dtype not in mt.COMPUTED_DTYPES:
            name = str(t.dtype).replace("torch.", "")
            return f"{name}: myatt computes float16, bfloat16, float32 and float64"
        if t.dtype == torch.bfloat16:
            try:
                _interop.bfloat16("the call's input")
            except TypeError as e:
                return str(e)
    return None


def describe(record, tensors):
    """The row's shapes (of `tensors`) and dtype."""
    record.shapes = tuple(tuple(t.shape) for t in tensors)
    record.dtype = dtype_name(tensors)


def dtype_name(tensors):
    """The dtype of a call of `tensors`, by name: its first floating tensor's ("float32")."""
    for t in tensors:
        if t.is_floating_point():
            return _DTYPE_NAMES.get(t.dtype) or str(t.dtype).replace("torch.", "")
    dtype = tensors[0].dtype if tensors else torch.get_default_dtype()
    return str(dtype).replace("torch.", "")


_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64"}


def to64(x, memo):
    return map_tensors(x, lambda t: t.to(torch.float64) if t.is_floating_point() else t, memo)


# --------------------------------------------------------------------------------------- #
# Cotangents (backward=True): tensor hooks on a call's outputs keep them
# --------------------------------------------------------------------------------------- #
def watch(record, outputs, later):
    """Keep the cotangents of `outputs` for the sessions that compare gradients."""
    if not any(s.backward for s in local.sessions) or not record.grads:
        return
    if not torch.is_grad_enabled():
        return
    if later:      # below autograd: the history is set when the op returns
        local.pending.append((record, outputs))
    else:
        _hook_outputs(record, outputs)


def _hook_outputs(record, outputs):
    record.cotangents = [None] * len(outputs)
    for i, t in enumerate(outputs):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            def keep(g, i=i):
                record.cotangents[i] = g.detach().clone()
            t.register_hook(keep)


def resolve_pending():
    pending, local.pending = local.pending, []
    for record, outputs in pending:
        _hook_outputs(record, outputs)
