"""SGD and Adam over myatt's live parameters: torch.optim's update rules, in NumPy.

Parameters are NumPy views of a module's own memory, so an optimiser step is plain
in-place NumPy arithmetic; these classes only keep the state (momentum, moments, step
count) and apply torch's formulas in torch's order of operations and arithmetic: each
op computes in the parameter's dtype (float32 for float16 and bfloat16 parameters, whose
state is kept in their dtype and each op's result rounded once to it, torch's fused
multiply-adds fused), scalars cast as torch casts them::

    opt = myatt.Adam(m, lr=1e-3)          # m: a MyAtt or Linear (or a dict of arrays)
    grads = m.backward(Q, K, V, grad_output)
    opt.step(grads)                       # keys Q, K, V of the dict are ignored

Unlike torch, gradients are passed to step() (they are returned, never stored on the
parameters); a parameter whose key is missing from `grads` is skipped, as torch skips
a parameter whose .grad is None.  A key that names no parameter is a KeyError (a
misspelt name would otherwise leave its parameter unchanged without a word), except
the input gradients that backward() and pullbacks return beside the parameters' (Q, K,
V, input, query, key, value).  A step changes nothing until every gradient is checked,
and its arithmetic never warns or raises (overflow gives inf, as torch's does, also under
np.seterr(all="raise") or warnings turned into errors), so no step stops half way.
For float16 and bfloat16 parameters, against torch's AVX2 / AVX-512 kernels (its DEFAULT
build does not fuse), SGD's steps are torch's bits (torch's scalar loop over the last
elements of a thread's chunk, n % 32 here, rounds its add twice: there an ulp can differ);
Adam's agree but for an ulp in a few elements: torch's float32 sqrt (MKL's vector library)
is not always correctly rounded.  float32 and float64 steps agree to rounding, an ulp or so
(torch fuses its multiply-adds; NumPy does not, and an exact float64 detour cost 10x).
"""
import difflib
import numbers

import numpy as np

from ._interop import to_numpy

__all__ = ["SGD", "Adam"]

# What MyAtt.backward, Linear.backward and the pullbacks of myatt.vjp (MultiheadAttention's
# too) return beside the parameters' gradients.
INPUT_GRADIENTS = ("Q", "K", "V", "input", "query", "key", "value")

# The parameters' dtypes (bfloat16: ml_dtypes')
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _live_params(params):
    """{name: live ndarray}: a module's state_dict keys resolved as attribute paths
    ('attn.weight' -> params.attn.weight, a view of the module's memory), or a
    mapping of names to writeable float arrays, no two sharing memory (a parameter
    listed twice would be updated twice)."""
    if hasattr(params, "state_dict"):
        out = {}
        for key in params.state_dict():
            obj = params
            for part in key.split("."):
                obj = getattr(obj, part)
            out[key] = obj
    else:
        try:
            out = dict(params)
        except (TypeError, ValueError):
            raise TypeError("params must be a module with state_dict() or a mapping of names "
                            f"to arrays, got {type(params).__name__}") from None
    for k, v in out.items():
        if not (isinstance(v, np.ndarray) and v.dtype.name in _FLOATS and v.flags.writeable):
            raise TypeError(f"params[{k!r}] must be a writeable float16, bfloat16, float32 or "
                            f"float64 ndarray (updated in place), got {type(v).__name__}")
    # pairs whose byte ranges overlap, found by sorting the ranges: their memory checked
    names = list(out)
    spans = sorted((*_byte_span(out[k]), i) for i, k in enumerate(names) if out[k].size)
    for i, (_, hi, ia) in enumerate(spans):
        for lo, _, ib in spans[i + 1:]:
            if lo >= hi:
                break
            if np.shares_memory(out[names[ia]], out[names[ib]]):
                ia, ib = sorted((ia, ib))
                raise ValueError(f"params[{names[ia]!r}] and params[{names[ib]!r}] share "
                                 "memory: each parameter must be listed once")
    return out


def _byte_span(a):
    """[first byte, last byte + 1) of a non-empty array's elements."""
    lo = hi = a.__array_interface__["data"][0]
    for n, s in zip(a.shape, a.strides):
        lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    return lo, hi + a.itemsize


def _check_number(name, v, at_least_zero=False):
    """TypeError naming a value that is not a real number (a Python or NumPy number, or a
    0-d array or tensor of one, as torch takes; bools refused, as every float argument of
    myatt refuses them); with at_least_zero, ValueError for one that is not >= 0 (NaN
    included: torch's Adam refuses it, its SGD does not; a NaN learning rate only ever
    makes NaN parameters)."""
    dtype = str(getattr(v, "dtype", ""))   # NumPy's float64, uint8; torch's torch.float32
    zero_d = getattr(v, "ndim", None) == 0 and ("float" in dtype or "int" in dtype)
    if isinstance(v, (bool, np.bool_)) or not (isinstance(v, numbers.Real) or zero_d):
        raise TypeError(f"{name} must be a real number, got {v!r}")
    if at_least_zero and not v >= 0:
        raise ValueError(f"{name} must be >= 0, got {v!r}")


def _check_flags(**flags):
    """TypeError naming a flag that is not a bool or the integer 0 or 1 (a string such
    as 'no' would be true)."""
    for name, v in flags.items():
        if not (isinstance(v, (bool, np.bool_)) or (isinstance(v, numbers.Integral)
                                                    and v in (0, 1))):
            raise TypeError(f"{name} must be a bool, got {v!r}")


def _arithmetic(p):
    """(T, f, r, fma, add) for torch's update of parameter p: T the type its ops compute
    in and cast scalars to (torch's opmath type: p's own, float32 for float16 and
    bfloat16), f(a) an operand in T, r(a) an op's result rounded to p's dtype (each torch op
    rounds once), fma(a, b, c) a * b + c, add(x, y, alpha) torch's ``x.add(y, alpha=alpha)``
    (its vector loop's ``fmadd(y, alpha, x)``, alpha first rounded to p's dtype as its ufunc
    casts it).  For a half-precision p, fma rounds once, as torch's fused multiply-add
    (through float64, where the product is exact, in blocks that stay in cache): its float32
    sums often land on the half dtype's ties, where a second rounding decides.  For float32
    and float64 it rounds twice, an ulp from torch's at most, at NumPy's speed (the float64
    detour made a float32 SGD step 10x slower)."""
    T = np.float32 if p.dtype.itemsize <= 4 else np.float64

    def fma(a, b, c):
        if p.dtype.itemsize > 2:
            return a * b + c
        it = np.nditer([a, b, c, None], ["external_loop", "buffered", "zerosize_ok"],
                       [["readonly"]] * 3 + [["writeonly", "allocate"]],
                       op_dtypes=[np.float64] * 3 + [T], casting="unsafe", buffersize=1 << 13)
        with it:
            for x, y, z, out in it:
                out[...] = x * y + z
            return it.operands[3]

    def add(x, y, alpha):
        return fma(T(np.asarray(alpha, T).astype(p.dtype)), y, x)

    return (T, (lambda a: a.astype(T, copy=False)), (lambda a: a.astype(p.dtype, copy=False)),
            fma, add)


class _Optimizer:
    def __init__(self, params):
        self.params = _live_params(params)
        self.state = {name: {} for name in self.params}

    def step(self, grads):
        """Update, in place, every parameter whose name is a key of `grads`.

        Every key and gradient is checked before any parameter changes. A parameter
        whose key is missing is skipped, as torch skips a parameter whose ``.grad`` is
        None. The input gradients beside the parameters' in :meth:`MyAtt.backward`'s
        and :meth:`Linear.backward`'s dicts and in pullbacks' (``Q``, ``K``, ``V``,
        ``input``, ``query``, ``key``, ``value``) are ignored; any other key that names
        no parameter is an error (a misspelt name would otherwise leave its parameter
        unchanged without a word). The settings are checked again first (one assigned
        since construction, such as ``opt.lr = None``, is refused before anything
        changes), and the arithmetic runs with NumPy's floating-point errors ignored:
        an overflow gives inf, as in torch, and never stops a step half way.

        Parameters
        ----------
        grads : mapping of str to array_like
            Gradients under the parameters' ``state_dict`` keys, such as the dict
            :meth:`MyAtt.backward` or :meth:`Linear.backward` returns. Each is converted
            to its parameter's dtype.

        Raises
        ------
        KeyError
            When a key names no parameter and no input gradient; the message names
            the key, the closest parameter name and all of them.
        TypeError
            When `grads` is not a mapping, or a gradient is not real numbers.
        ValueError
            When a gradient's shape is not its parameter's.
        """
        self._check()
        if not (hasattr(grads, "get") and hasattr(grads, "keys")):
            raise TypeError(f"grads must be a mapping, got {type(grads).__name__}")
        unknown = [k for k in grads.keys()
                   if k not in self.params and k not in INPUT_GRADIENTS]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), [str(k) for k in self.params], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise KeyError(f"grads[{key!r}]: no parameter of this optimiser has that name"
                           f"{hint}; its parameters are {', '.join(map(repr, self.params))} "
                           f"(the input gradients {', '.join(INPUT_GRADIENTS)} are ignored)")
        todo = []
        for name, p in self.params.items():
            g = grads.get(name)
            if g is None:
                continue
            g = to_numpy(g)   # a torch tensor (bfloat16 too), as the C glue takes it
            if g.dtype.kind not in "biuf" and g.dtype.name != "bfloat16":
                raise TypeError(f"grads[{name!r}] has dtype {g.dtype}; expected real numbers")
            if g.shape != p.shape:
                raise ValueError(f"grads[{name!r}] must have shape {p.shape}, got {g.shape}")
            if p.dtype.itemsize == 2 and g.dtype.itemsize > 4:
                g = g.astype(np.float32)   # to half through float32, as torch converts
            todo.append((name, p, g.astype(p.dtype)))
        with np.errstate(all="ignore"):
            for name, p, g in todo:
                self._update(self.state[name], p, g)

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({opts})"


class SGD(_Optimizer):
    """Stochastic gradient descent with torch.optim.SGD's update rule.

    Weight decay, momentum with dampening, Nesterov momentum and maximize, in torch's order
    of operations and arithmetic (see the module's docstring; half-precision parameters
    too). The parameters are updated in place by :meth:`step`, which takes the gradients.

    Parameters
    ----------
    params : MyAtt, Linear, MultiheadAttention or mapping of str to ndarray
        A module (its live parameters, under its ``state_dict`` keys) or a mapping of names
        to writeable float16, bfloat16, float32 or float64 arrays, updated in place.
    lr : float, default 1e-3
        The learning rate.
    momentum : float, default 0
        The momentum factor.
    dampening : float, default 0
        Dampening of the momentum.
    weight_decay : float, default 0
        L2 penalty added to the gradient.
    nesterov : bool, default False
        Nesterov momentum (needs a momentum and zero dampening).
    maximize : bool, default False
        Maximise the objective instead of minimising it.

    Raises
    ------
    ValueError
        When `lr`, `momentum` or `weight_decay` is negative or NaN, Nesterov is asked for
        without a momentum or with dampening, or two parameters share memory.
    TypeError
        When `params` is neither a module nor a mapping of writeable float arrays, a
        number is not a real number (or is a bool), or a flag is not a bool.

    Examples
    --------
    >>> myatt.manual_seed(0)
    >>> lin = myatt.Linear(3, 2)
    >>> x, grad_y = np.ones((4, 3)), np.ones((4, 2))
    >>> opt = myatt.SGD(lin, lr=0.1, momentum=0.9)
    >>> before = lin.weight.copy()
    >>> opt.step(lin.backward(x, grad_y))          # grad of weight: 4 everywhere
    >>> lin.weight - before
    array([[-0.4, -0.4, -0.4],
           [-0.4, -0.4, -0.4]], dtype=float32)
    """

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False):
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov, self.maximize = weight_decay, nesterov, maximize
        self._check()
        super().__init__(params)

    def _check(self):
        for name in ("lr", "momentum", "dampening", "weight_decay"):
            _check_number(name, getattr(self, name), at_least_zero=name != "dampening")
        _check_flags(nesterov=self.nesterov, maximize=self.maximize)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    @property
    def defaults(self):
        """The hyperparameters as a dict, as torch's ``optimizer.defaults``."""
        return dict(lr=self.lr, momentum=self.momentum, dampening=self.dampening,
                    weight_decay=self.weight_decay, nesterov=self.nesterov,
                    maximize=self.maximize)

    def _update(self, state, p, g):
        T, f, r, _, add = _arithmetic(p)
        if self.maximize:
            g = -g
        if self.weight_decay != 0:
            g = r(add(f(g), f(p), self.weight_decay))          # grad.add(param, alpha=wd)
        if self.momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = g.copy()
            else:
                buf[...] = f(buf) * T(self.momentum)          # buf.mul_(momentum)
                buf[...] = add(f(buf), f(g), 1 - self.dampening)   # .add_(grad, alpha=1 - dampening)
            g = r(add(f(g), f(buf), self.momentum)) if self.nesterov else buf
        p[...] = add(f(p), f(g), -self.lr)                    # param.add_(grad, alpha=-lr)


class Adam(_Optimizer):
    """Adam with torch.optim.Adam's update rule.

    Bias-corrected moments, weight decay (or decoupled weight decay, as AdamW), amsgrad and
    maximize, in torch's order of operations and arithmetic (see the module's docstring;
    half-precision parameters too). The parameters are updated in place by :meth:`step`,
    which takes the gradients.

    Parameters
    ----------
    params : MyAtt, Linear, MultiheadAttention or mapping of str to ndarray
        A module (its live parameters, under its ``state_dict`` keys) or a mapping of names
        to writeable float16, bfloat16, float32 or float64 arrays, updated in place.
    lr : float, default 1e-3
        The learning rate.
    betas : (float, float), default (0.9, 0.999)
        The decay rates of the first and second moment estimates, each in [0, 1).
    eps : float, default 1e-8
        Added to the denominator.
    weight_decay : float, default 0
        L2 penalty added to the gradient (or, decoupled, applied to the parameter).
    amsgrad : bool, default False
        Use the maximum of the second moment estimates so far.
    maximize : bool, default False
        Maximise the objective instead of minimising it.
    decoupled_weight_decay : bool, default False
        Decay the parameters directly, as AdamW does.

    Raises
    ------
    ValueError
        When `lr`, `eps` or `weight_decay` is negative or NaN, `betas` is not two
        numbers in [0, 1), or two parameters share memory.
    TypeError
        When `params` is neither a module nor a mapping of writeable float arrays, a
        number is not a real number (or is a bool), or a flag is not a bool.

    Examples
    --------
    >>> myatt.manual_seed(0)
    >>> m = myatt.MyAtt(4, 4, 3, 5, 2)
    >>> Q, K, V = np.ones((1, 2, 4)), np.ones((1, 2, 4)), np.ones((1, 3, 5))
    >>> opt = myatt.Adam(m, lr=1e-2)
    >>> before = m.attn_combine.bias.copy()
    >>> opt.step(m.backward(Q, K, V, np.ones((1, 2, 2))))   # Q, K, V keys are ignored
    >>> m.attn_combine.bias - before           # Adam's first step: lr against the gradient's sign
    array([-0.01, -0.01], dtype=float32)
    >>> opt                                    # doctest: +NORMALIZE_WHITESPACE
    Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.0, amsgrad=False,
         maximize=False, decoupled_weight_decay=False)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False, decoupled_weight_decay=False):
        try:   # kept as a tuple (an iterator would be spent by the first check)
            betas = tuple(betas)
        except TypeError:
            pass   # refused by _check, with its name
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.amsgrad, self.maximize = amsgrad, maximize
        self.decoupled_weight_decay = decoupled_weight_decay
        self._check()
        super().__init__(params)

    def _check(self):
        for name in ("lr", "eps", "weight_decay"):
            _check_number(name, getattr(self, name), at_least_zero=True)
        _check_flags(amsgrad=self.amsgrad, maximize=self.maximize,
                     decoupled_weight_decay=self.decoupled_weight_decay)
        try:
            betas = tuple(self.betas)
        except TypeError:
            betas = None
        if betas is None or len(betas) != 2:
            raise ValueError(f"betas must be two real numbers, got {self.betas!r}")
        for i, b in enumerate(betas):
            _check_number(f"betas[{i}]", b)
            if not 0 <= b < 1:
                raise ValueError(f"betas[{i}] must be in [0, 1), got {b!r}")

    @property
    def defaults(self):
        """The hyperparameters as a dict, as torch's ``optimizer.defaults``."""
        return dict(lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay,
                    amsgrad=self.amsgrad, maximize=self.maximize,
                    decoupled_weight_decay=self.decoupled_weight_decay)

    def _update(self, state, p, g):
        T, f, r, fma, add = _arithmetic(p)
        beta1, beta2 = self.betas
        if not state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p)
            state["exp_avg_sq"] = np.zeros_like(p)
            if self.amsgrad:
                state["max_exp_avg_sq"] = np.zeros_like(p)
        state["step"] += 1
        step, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
        if self.maximize:
            g = -g
        if self.weight_decay != 0:
            if self.decoupled_weight_decay:
                p[...] = f(p) * T(1 - self.lr * self.weight_decay)   # param.mul_(1 - lr * wd)
            else:
                g = r(add(f(g), f(p), self.weight_decay))     # grad.add(param, alpha=wd)
        # exp_avg.lerp_(grad, 1 - beta1): torch's lerp_vec, one fused multiply-add
        w = T(1 - beta1)
        diff = f(g) - f(exp_avg)
        exp_avg[...] = fma(w, diff, f(exp_avg)) if abs(w) < 0.5 else fma(w - T(1), diff, f(g))
        exp_avg_sq[...] = f(exp_avg_sq) * T(beta2)            # exp_avg_sq.mul_(beta2)
        # .addcmul_(grad, grad, value=1 - beta2): value * grad, then one fused multiply-add
        exp_avg_sq[...] = fma(T(1 - beta2) * f(g), f(g), f(exp_avg_sq))
        bias_correction1 = 1 - beta1 ** step                  # Python floats, as torch
        bias_correction2 = 1 - beta2 ** step
        step_size = self.lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        if self.amsgrad:
            np.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
            second = state["max_exp_avg_sq"]
        else:
            second = exp_avg_sq
        # denom = (second.sqrt() / bias_correction2_sqrt).add_(eps): three ops
        denom = r(f(r(f(r(np.sqrt(f(second)))) / T(bias_correction2_sqrt))) + T(self.eps))
        p[...] = f(p) + T(-step_size) * f(exp_avg) / f(denom)   # param.addcdiv_(exp_avg, denom, -step_size)
