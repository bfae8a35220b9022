"""The torch side of ``myatt.validate``: a validation's session and the whole-model runs.

Imported only when a validation starts (it imports torch). A ``Session`` is one
``validating()`` block (``validate`` opens one around its run of the model): on entering the
outermost block of a thread it installs the global module hooks and the mode that sees the
calls, each of which is judged as it is made; on leaving, it judges the calls whose gradients
are compared (their cotangents came with the backward pass) and fills its report. The parts:

- ``_validate_calls``: a recorded call (``Record``) and the per-thread state;
- ``_validate_modules``: the global module hooks (the module of each call, the row of each
  ``nn.MultiheadAttention`` call);
- ``_validate_shadow``: shadow mode's ``TorchDispatchMode`` and the aten ops it maps to
  myatt's twins;
- ``_validate_replace``: replace mode's ``TorchFunctionMode``, calling myatt's twins;
- ``_validate_rerun``: the reruns of a recorded call and its judgement.

This file also holds replace mode's end-to-end comparison: the model run on torch alone and,
in float64, on both sides.
"""
import contextlib

import torch

from . import _judge
from ._validate import CallReport, Validation
from ._validate_calls import local, resolve_pending, to64
from ._validate_modules import install_hooks, remove_hooks
from ._validate_replace import ReplaceMode
from ._validate_rerun import judge_record, judge_result
from ._validate_shadow import ShadowMode

#: a progress bar (tqdm, when installed) from this many calls to judge
PROGRESS_FROM = 200


class Session:
    """``with myatt.validating(...) as report``: records the calls of this thread."""

    def __init__(self, mode, backward, rtol, atol, model=None, title="validating block",
                 judges=True):
        self.mode, self.backward, self.rtol, self.atol = mode, backward, rtol, atol
        self.judges = judges          # False: its calls are run, not judged (no report)
        self.model = model
        self.records, self.names, self.keep = [], {}, []
        self.report = Validation(mode=mode, model=title, backward=backward, rtol=rtol,
                                 atol=atol)
        self._torch_mode = None
        self._entered = False

    def __enter__(self):
        if self._entered:
            raise RuntimeError("a validating block cannot be entered twice")
        loc = local
        if loc.sessions and loc.sessions[0].mode != self.mode:
            raise ValueError(f"a nested validating block must have the enclosing block's mode "
                             f"({loc.sessions[0].mode!r}), got {self.mode!r}")
        self._entered = True
        if not loc.sessions:
            install_hooks()
            self._torch_mode = ShadowMode() if self.mode == "shadow" else ReplaceMode()
            try:
                self._torch_mode.__enter__()
            except BaseException:
                remove_hooks()
                raise
            loc.mode = self._torch_mode if self.mode == "shadow" else None
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
        loc = local
        if self not in loc.sessions:
            return
        if loc.sessions[-1] is not self:
            raise RuntimeError("validating blocks must be left in the reverse order of "
                               "entering them")
        if loc.pending:
            resolve_pending()
        loc.sessions.pop()
        if not loc.sessions:
            loc.modules.clear()
            loc.pending.clear()
            loc.mode = None
            try:
                self._torch_mode.__exit__(None, None, None)
            finally:
                remove_hooks()

    def judge(self):
        """The report's rows: each recorded call's judgement (most were judged as they were
        made: those left are the calls whose gradients are compared)."""
        if not self.judges:
            return self.report
        records = self.records
        iterator = records
        key = (self.rtol, self.atol, self.backward)
        if sum(key not in r.judged for r in records) >= PROGRESS_FROM:
            try:
                from tqdm.auto import tqdm  # type: ignore[import-untyped]
                iterator = tqdm(records, desc="myatt.validate", unit="call", leave=False)
            except ImportError:
                pass
        calls = []
        local.busy += 1
        try:
            for i, record in enumerate(iterator):
                calls.append(CallReport(index=i, **judge_record(record, self.rtol, self.atol,
                                                                self.backward)))
        finally:
            local.busy -= 1
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
    # the parameters whose gradients the backward pass computes (with backward=True)
    params = list(model.named_parameters()) if backward and isinstance(
        model, torch.nn.Module) else []
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
            resolve_pending()
            if mode == "replace" or backward or grad_outputs is not None:
                # (shadow mode: the backward pass whose calls are judged; grad_outputs checked)
                ours = _loss_and_grads(out, grad_outputs, params, backward)
    if mode == "replace":
        _end_to_end(report, model, args, kwargs, out, ours, reference, grad_outputs, backward,
                    rtol, atol)
    return report


def _end_to_end(report, model, args, kwargs, out, ours, reference, grad_outputs, backward,
                rtol, atol):
    """report.outputs: the model on myatt against the model on torch (and float64 reruns of
    both when the model is float32 or half and can be copied)."""
    out_ref, ref_grads = reference
    pairs = list(zip(_flatten(out), _flatten(out_ref)))
    pairs.append((("loss", ours[0]), ("loss", ref_grads[0])))
    pairs += [(("grad " + n, g), ("grad " + n, h))
              for (n, g), (_, h) in zip(ours[1], ref_grads[1]) if g is not None]
    wide = {}
    if any(t.is_floating_point() and t.dtype != torch.float64 for (_, t), _ in pairs):
        try:
            wide = _float64_runs(model, args, kwargs, grad_outputs, backward, rtol, atol)
        except Exception as e:
            report.notes.append(f"end to end: no float64 reruns ({type(e).__name__}: {e})")
    for (name, a), (_, b) in pairs:
        dt = str(b.dtype).replace("torch.", "")
        rt, at = (rtol, atol) if rtol is not None else _judge.tolerances(dt)
        a64, b64 = wide.get(name, (None, None)) if dt != "float64" else (None, None)
        report.outputs.append(judge_result(name, a, b, rt, at, a64, b64))


@contextlib.contextmanager
def _detached():
    """Validation's own runs of a model (replace mode's reference and float64 runs): the
    enclosing validating blocks of this thread neither record nor replace anything in them."""
    loc = local
    saved = loc.sessions, loc.modules, loc.pending, loc.mode
    loc.sessions, loc.modules, loc.pending, loc.mode = [], [], [], None
    try:
        yield
    finally:
        loc.sessions, loc.modules, loc.pending, loc.mode = saved


def _float64_runs(model, args, kwargs, grad_outputs, backward, rtol, atol):
    """The model in float64 on myatt and on torch (replace mode): {name: (myatt's, torch's)}
    for each end-to-end result."""
    import copy
    with _detached():
        model64 = copy.deepcopy(model).to(torch.float64) if isinstance(
            model, torch.nn.Module) else model
        memo = {}
        a64, k64 = to64(args, memo), to64(kwargs, memo)
        p64 = list(model64.named_parameters()) if isinstance(model64, torch.nn.Module) else []
        g64 = None if grad_outputs is None else to64(grad_outputs, {})
        grad_mode = torch.enable_grad() if backward else contextlib.nullcontext()
        rng = torch.random.get_rng_state()
        with grad_mode:
            r64 = model64(*a64, **k64)
            rg64 = _loss_and_grads(r64, g64, p64, backward)
        torch.random.set_rng_state(rng)
        inner = Session("replace", False, rtol, atol, model=model64, title="float64",
                        judges=False)             # its calls are not judged: only its outputs
        with inner, grad_mode:
            m64 = model64(*a64, **k64)
            mg64 = _loss_and_grads(m64, g64, p64, backward)
        torch.random.set_rng_state(rng)
    wide_pairs = list(zip(_flatten(m64), _flatten(r64)))
    wide_pairs.append((("loss", mg64[0]), ("loss", rg64[0])))
    wide_pairs += [(("grad " + n, g), ("grad " + n, h))
                   for (n, g), (_, h) in zip(mg64[1], rg64[1]) if g is not None]
    return {n: (a, b) for (n, a), (_, b) in wide_pairs}
