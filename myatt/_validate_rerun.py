"""Judging a recorded call: myatt's rerun of it, torch's float64 rerun (each side's error),
and the verdict of ``myatt._judge.judge``.

A call is judged as it is made, on its own tensors (``settle``), unless its gradients are
compared: those are judged when the block ends, from copies, with the cotangent the call's
output got in the model's backward pass (torch's autograd on the call, myatt's pullback
through its twin). Where a result is outside the tolerance myatt reruns the call in float64
too (the long-reduction rule needs the two float64 reruns to agree). A result within the
tolerance is judged by ``_within_tolerance`` (the judge's numbers in fewer passes, a chunk
at a time), any other by ``_judge.judge``.
"""
import math

import numpy as np
import torch

from . import _interop, _judge
from ._validate import ResultReport
from ._validate_calls import copies, local, snapshot, to64


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
    `grads` inputs given the cotangents, or None). Called with ``local.busy`` set (by the
    recording code, or ``Session.judge``): nothing it runs is recorded or replaced."""
    memo = {}
    if not grads:
        args, kwargs = (to64(record.args, memo), to64(record.kwargs, memo)) if wide else (
            record.args, record.kwargs)
        with torch.no_grad():
            out = fn(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return tuple(outs[i].detach() for i in record.select), None
    args = list(to64(record.args, memo) if wide else record.args)
    kwargs = dict(to64(record.kwargs, memo) if wide else record.kwargs)
    leaves = {}
    for _, key in grads:
        t = _get(args, kwargs, key)
        if id(t) not in leaves:
            leaves[id(t)] = t.detach().requires_grad_()
        _set(args, kwargs, key, leaves[id(t)])
    # one leaf per distinct tensor: the same object where the call had the same object
    for k, v in list(kwargs.items()):
        if isinstance(v, torch.Tensor) and id(v) in leaves:
            kwargs[k] = leaves[id(v)]
    with torch.enable_grad():
        out = fn(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    results = tuple(outs[i] for i in record.select)
    pairs = [(r, c) for r, c in zip(results, cotangents) if c is not None and r.requires_grad]
    targets = [_get(args, kwargs, key) for _, key in grads]
    if not pairs:
        return tuple(r.detach() for r in results), [None] * len(targets)
    g = torch.autograd.grad([r for r, _ in pairs],
                            targets,
                            [c.to(r.dtype) for r, c in pairs], allow_unused=True)
    return tuple(r.detach() for r in results), list(g)


def _np(t):
    return None if t is None else _interop.to_numpy(t)


def settle(record, args, kwargs, theirs):
    """What a recorded call keeps until its validations end, given its live inputs and
    torch's results as they flowed (`theirs`, or None in replace mode).

    Where no active validation compares gradients, the call is judged at once, on the live
    tensors, for each active validation: nothing is copied and the record keeps only the
    numbers (a model's weights are not copied for each call of them, and what the model
    does to its tensors afterwards cannot matter). The gradients need the cotangent the
    backward pass brings later: then the record keeps copies of the inputs and results and
    is judged when the block ends, as is a call whose judging raised here (judged again
    then, where its error is raised)."""
    sessions = [s for s in local.sessions if s.judges]
    if not sessions:
        return             # recorded for no report (replace mode's float64 run of a model)
    if not any(s.backward for s in sessions):
        record.args, record.kwargs, record.theirs = args, kwargs, theirs
        try:
            for s in sessions:
                judge_record(record, s.rtol, s.atol, False)
        except Exception:
            record.judged.clear()
        else:
            record.args = record.kwargs = record.theirs = None     # nothing more is needed
            return
    record.args, record.kwargs = snapshot(args, kwargs)
    record.theirs = None if theirs is None else copies(theirs)


def judge_record(record, rtol, atol, backward):
    """The CallReport fields of a record (cached: nested validations judge a call once)."""
    key = (rtol, atol, backward)
    if key in record.judged:
        return record.judged[key]
    if record.args is None:
        raise RuntimeError(f"internal error: call {record.op} was judged as it was made, "
                           f"and its tensors released, for other tolerances than {key}")
    fields = dict(op=record.op, module=record.module, shapes=record.shapes,
                  dtype=record.dtype, torch_op=record.torch_op)
    if record.skip is not None:
        fields.update(verdict="skipped", reason=record.skip)
        record.judged[key] = fields
        return fields
    rt, at = (rtol, atol) if rtol is not None else _judge.tolerances(record.dtype)
    wide = record.dtype != "float64"      # float32 and half calls are rerun in float64
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
    results = [judge_result(name, a, b, rt, at, None, b64) for name, a, b, b64, _ in compared]
    if wide and any(not r.agree for r in results):
        # myatt's float64 rerun, where a result is outside the tolerance: the long-reduction
        # rule needs both float64 reruns to agree before torch's is a referee (within the
        # tolerance the verdict does not need it: each side's error is against torch's)
        ours64 = _run(record.myatt_fn, record, True, grads, cot)
        results = [r if r.agree else
                   judge_result(name, a, b, rt, at, ours64[where[0]][where[1]], b64)
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


def judge_result(name, ours, theirs, rtol, atol, ours64, theirs64):
    if ours is None or theirs is None:
        side = "myatt" if ours is None else "torch"
        return ResultReport(name, (), False, float("nan"), float("nan"), None, None,
                            reason=f"{side} gave no gradient")
    a, b, a64, b64 = _np(ours), _np(theirs), _np(ours64), _np(theirs64)
    if a64 is None:
        quick = _within_tolerance(a, b, rtol, atol, b64)
        if quick is not None:
            return ResultReport(name, tuple(theirs.shape), True, *quick, 0, a.size, "")
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


#: elements judged at a time: the float64 temporaries (three arrays of CHUNK elements, kept
#: per thread) stay in the cache and are not allocated again for each result (fresh large
#: arrays cost their page faults: measured up to ~10 ns an element on a loaded machine,
#: several times the arithmetic)
CHUNK = 1 << 15


def _workspace():
    ws = getattr(local, "workspace", None)
    if ws is None or ws.shape[1] != CHUNK:
        ws = local.workspace = np.empty((3, CHUNK))
    return ws


def _within_tolerance(a, b, rtol, atol, b64):
    """(max_abs, max_rel, myatt's error, torch's error) as ``_judge.judge(a, b, rtol, atol,
    theirs64=b64)`` gives them, where every element of `a` and `b` is finite and within the
    tolerance (the usual row); None otherwise, and then ``_judge.judge`` decides. The same
    numbers (the same float64 operations; maxima are exact in any order) in fewer passes,
    chunk by chunk: |a - b| in float64 once, no masks of the non-finite (none can be there),
    the errors' maxima without a copy of the finite differences.
    """
    if a.shape != b.shape or not a.size:
        return None
    ref = b64.reshape(-1) if b64 is not None and b64.shape == a.shape else None
    a, b = a.reshape(-1), b.reshape(-1)        # (a copy only where not contiguous)
    diff, scale, work = _workspace()
    max_abs = max_rel = 0.0
    errors = [0.0, 0.0] if ref is not None else [None, None]
    with np.errstate(all="ignore"):
        for i in range(0, a.size, CHUNK):
            n = min(CHUNK, a.size - i)
            ac, bc, d, s, w = a[i:i + n], b[i:i + n], diff[:n], scale[:n], work[:n]
            np.subtract(ac, bc, out=d, dtype=np.float64)
            np.abs(d, out=d)
            m = float(d.max())
            if not math.isfinite(m):          # a NaN or an infinity, on either side
                return None
            np.abs(bc, out=s, dtype=np.float64)
            if m > atol:                      # (else within atol + rtol * |b| everywhere)
                np.multiply(s, rtol, out=w)   # atol + rtol * |b|, as _judge rounds it
                w += atol
                if not np.less_equal(d, w).all():
                    return None
            # |a - b| / |b|; where both are 0 it is 0/0 = NaN, which fmax skips (_judge: 0)
            np.divide(d, s, out=s)
            r = float(np.fmax.reduce(s))
            max_abs = max(max_abs, m)
            max_rel = max(max_rel, r) if r == r else max_rel
            if ref is not None:
                for k, x in enumerate((ac, bc)):
                    np.subtract(x, ref[i:i + n], out=w, dtype=np.float64)
                    np.abs(w, out=w)
                    e = float(w.max())
                    errors[k] = max(errors[k], e) if math.isfinite(e) else math.inf
    for k, x in enumerate((a, b)):
        if errors[k] is not None and not math.isfinite(errors[k]):
            # a NaN or an infinity in the float64 rerun: the maximum over the finite ones
            errors[k] = _judge._max_error(np.asarray(x, dtype=np.float64),
                                          np.asarray(ref, dtype=np.float64))
    return (max_abs, max_rel, errors[0], errors[1])
