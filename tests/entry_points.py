"""The registry of myatt's entry points, read by every cross-cutting test.

test_bad_inputs.py (every array argument crossed with every bad value), test_errors.py
and test_backward_kernels.py (bad types), test_leaks.py (reference counts and memory),
test_threads.py (concurrent calls, bit for bit), test_properties.py (random shapes,
layouts and dtypes against torch), test_layouts.py (every layout of every argument),
test_call_paths.py (keywords) and fuzz/fuzz_python.py (atheris) take their entry points
from ENTRY_POINTS below, so that a new entry point, declared here once, is covered by all
of them; test_entry_points.py fails while the extension has one not declared here.

Each entry declares:
  name     what the tests call it: "linear", "Linear.__call__", "MyAtt.backward", ...
  kind     "function" (myatt.<name>), "method" (of an object `make` builds), "setter"
           (an assignment or a load into such an object) or "constructor"
  args     its array arguments, in call order, each an Arg: its name (as error messages
           name it), its shape in a valid call at the sizes `s` (a Sizes), whether None
           is allowed (optional), whether leading dimensions are free (any number of
           batch dimensions) or the ndim is free altogether (softmax); a mask
           (scaled_dot_product_attention's attn_mask) broadcasts, does not take part in
           the result dtype (promotes=False; also a pullback's grad_output, converted
           to the forward's dtype) and is bool or floating (floating=True)
  call     call(obj, *arrays, **kw) -> result (obj is None for functions and
           constructors; kw: softmax's dim, from the sizes: see invoke())
  make     make(s, dtype) -> the Linear / MyAtt the method is called on (or None)
  result   "array", "arrays" (a tuple; None for an absent bias gradient), "grads" (a dict),
           "none" (setters: None, or load_state_dict's key lists) or "object" (constructors)
  torch    torch(obj, *tensors) -> torch's result in the same structure (tensors in the
           result dtype, None for an omitted optional argument); None where no test
           needs one. torch is imported only when a torch reference is called: the
           registry itself needs NumPy only (the fuzz harness runs without torch).
  sizes_of which Sizes fields the entry's shapes use (the property test draws those).
  module_dtype  results in the object's dtype (else the kernels' promotion rule).
  shapes   shapes(s) -> the shapes of a valid call's result arrays, in flat() order.
  plain    plain(obj, *arrays) -> the result in the same structure from tests/reference.py
           (float64, NumPy only), for the entries that compute.
  keywords False for the entries called through myatt.vjp (vjp(fn, *args) and its
           pullbacks), whose registry arguments are not one callable's keywords
           (test_call_paths.py); the names are "vjp" and "<fn>.vjp.pullback" / "vjp.<fn>.pullback"
           (two dots: declared beyond what test_entry_points.py finds on the module).
           Likewise MultiheadAttention's calls with attn_mask, a keyword that follows
           need_weights in the positional order.
  options  the keyword arguments beside the arrays to vary, sets of them ({} first: the
           defaults), e.g. ({}, {"approximate": "tanh"}) for gelu; call, torch and plain
           take them as keywords (invoke(ep, obj, arrays, s, opt)).  softmax's dim comes
           from the sizes instead (its valid values depend on the shape).
"""
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

import myatt
import reference


# --------------------------------------------------------------------------- #
# Sizes of a valid call
# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Sizes:
    """Every size an entry point's shapes are written in (one namespace for all)."""
    batch: Tuple[int, ...] = (4,)  # linear's leading (batch) dimensions
    in_f: int = 6                  # linear's in_features
    out_f: int = 3                 # linear's out_features
    b: int = 2                     # bmm: [b, n, m] @ [b, m, p]
    n: int = 4
    m: int = 6
    p: int = 5
    shape: Tuple[int, ...] = (4, 6)  # softmax's input
    dim: int = -1                  # softmax's dim
    Bq: int = 1                    # MyAtt: Q [Bq, S, q], K [Bk, S, k], V [1, v1, v2]
    Bk: int = 1
    S: int = 4
    q: int = 3
    k: int = 4
    v1: int = 5
    v2: int = 6
    o: int = 2
    L: int = 3                     # scaled_dot_product_attention: query [batch..., L, E],
    Skv: int = 5                   # key [batch..., Skv, E], value [batch..., Skv, Ev],
    E: int = 4                     # attn_mask [L, Skv] (broadcast over the batch)
    Ev: int = 3
    N: int = 2                     # MultiheadAttention: query [L, N, embed], key and value
    heads: int = 2                 # [Skv, N, embed], key_padding_mask [N, Skv], attn_mask
    embed: int = 4                 # [L, Skv]; num_heads = heads, embed_dim = embed
    kdim: int = 3                  # (and a module with kdim, vdim and bias_k / bias_v
    vdim: int = 5                  # for the setters of those parameters)


SMALL = Sizes()


def sizes(**kw):
    """SMALL with some sizes replaced."""
    return replace(SMALL, **kw)


@dataclass(frozen=True)
class Arg:
    name: str
    shape: Callable[[Sizes], Tuple[int, ...]]
    optional: bool = False        # None is a valid value (no bias, no grad_attn_weights)
    batch_free: bool = False      # any number of leading dimensions
    ndim_free: bool = False       # any shape at all (softmax): no shape errors
    fan_in: Optional[Callable[[Sizes], int]] = None   # scaled by 1/sqrt(fan_in) in data
    # names a message may give instead of this one when this argument's size disagrees
    # with another's (MyAtt: "K has S rows but Q has ...")
    also_named: Tuple[str, ...] = ()
    # attn_mask's: broadcast against its shape (a 0-D value is valid), its dtype converted
    # to the result dtype rather than taking part in it, and bool or floating point only
    broadcasts: bool = False
    promotes: bool = True
    floating: bool = False


@dataclass(frozen=True)
class EntryPoint:
    name: str
    kind: str
    args: Tuple[Arg, ...]
    call: Callable
    result: str
    make: Optional[Callable] = None
    torch: Optional[Callable] = None
    sizes_of: Tuple[str, ...] = ()
    shapes: Callable = lambda s: ()             # result shapes at sizes s, flat() order
    plain: Optional[Callable] = None            # the float64 reference (tests/reference.py)
    module_dtype: bool = False                  # results in the object's dtype
    keywords: bool = True                       # the args are one callable's keywords
    # the keyword arguments a call may add, each set passed to call, torch and plain (the
    # first, the defaults: what every suite runs; the others: test_entry_points.py runs
    # each, test_properties.py and the fuzzer draw one)
    options: Tuple[Dict[str, Any], ...] = ({},)

    def good(self, s=SMALL, dtype=np.float32, seed=0):
        """Valid arrays for every argument at sizes s (unit-scale, weights by fan-in)."""
        rng = np.random.default_rng(seed)
        out = []
        for a in self.args:
            x = rng.standard_normal(a.shape(s))
            if a.fan_in is not None:
                x = x / np.sqrt(max(a.fan_in(s), 1))
            out.append(x.astype(dtype))
        return out

    def target(self, s=SMALL, dtype=np.float32):
        """The object a method is called on (None for functions and constructors)."""
        return None if self.make is None else self.make(s, dtype)

    def result_shapes(self, s=SMALL):
        """The shapes of a valid call's result arrays at sizes s, in flat() order."""
        return self.shapes(s)


def flat(result, kind="arrays"):
    """A result of `kind` as a tuple of its arrays (a dict's in key order; None left
    out; nothing for a setter's or a constructor's)."""
    if kind in ("none", "object"):
        return ()
    if isinstance(result, dict):
        return tuple(result[k] for k in sorted(result) if result[k] is not None)
    if isinstance(result, tuple):
        return tuple(r for r in result if r is not None)
    return (result,)


# --------------------------------------------------------------------------- #
# torch references (torch imported when called)
# --------------------------------------------------------------------------- #
def _grads(f, tensors, grad_output):
    """torch.autograd.grad of sum(f(*tensors) * grad_output) w.r.t. every tensor given
    (None stays None; zeros for a tensor that takes no part, as torch's None means)."""
    import torch

    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in tensors]
    wanted = [t for t in leaves if t is not None]
    got = iter(torch.autograd.grad((f(*leaves) * grad_output).sum(), wanted, allow_unused=True))
    res = []
    for t in leaves:
        g = None if t is None else next(got)
        res.append(torch.zeros_like(t) if t is not None and g is None else g)
    return res


def _torch_linear(obj, x, w, b):
    import torch.nn.functional as F
    return F.linear(x, w, b)


def _torch_softmax(obj, x, dim):
    """torch's softmax; in half precision on one thread, whose bits myatt's are (over other
    axes than the last, torch's depend on its thread count: docs/numerics.md)."""
    import torch
    if x.dtype not in (torch.float16, torch.bfloat16):
        return torch.softmax(x, dim)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.softmax(x, dim)
    finally:
        torch.set_num_threads(n)


def _torch_bmm(obj, a, m2):
    import torch
    return torch.bmm(a, m2)


def _torch_baddbmm(obj, i, a, m2):
    import torch
    return torch.baddbmm(i, a, m2)


def _torch_linear_backward(obj, go, x, w, b):
    import torch.nn.functional as F
    return tuple(_grads(F.linear, (x, w, b), go))


def _torch_softmax_backward(obj, go, y, dim):
    import torch
    return torch._softmax_backward_data(go, y, dim, y.dtype)


def _torch_bmm_backward(obj, go, a, m2):
    import torch
    return tuple(_grads(torch.bmm, (a, m2), go))


def _torch_layer_call(obj, x):
    import torch
    from oracle import torch_linear
    with torch.no_grad():
        return torch_linear(obj)(x)


def _torch_layer_backward(obj, x, go):
    import torch
    from oracle import torch_linear
    t = torch_linear(obj)
    params = dict(t.named_parameters())
    leaf = x.detach().clone().requires_grad_(True)
    wanted = [leaf] + list(params.values())
    got = torch.autograd.grad((t(leaf) * go).sum(), wanted, allow_unused=True)
    got = [torch.zeros_like(w) if g is None else g for w, g in zip(wanted, got)]
    res = {"input": got[0], "weight": got[1], "bias": None}
    if "bias" in params:
        res["bias"] = got[2]
    return res


def _torch_sdpa(obj, q, k, v, mask=None, **kw):
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)


def _torch_sdpa_backward(obj, q, k, v, mask, go, **kw):
    import torch.nn.functional as F
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)  # noqa: E731
    return tuple(_grads(f, (q, k, v), go)) + (None,)


def _causal(q, k):
    """is_causal's mask: tril(ones(L, S)), aligned at the top left."""
    return np.tril(np.ones((np.shape(q)[-2], np.shape(k)[-2]), bool))


def _torch_gelu(obj, x, **kw):
    import torch.nn.functional as F
    return F.gelu(x, **kw)


def _torch_gelu_backward(obj, go, x, **kw):
    import torch.nn.functional as F
    return _grads(lambda x: F.gelu(x, **kw), (x,), go)[0]


def _torch_module_call(obj, Q, K, V):
    import torch
    from oracle import torch_myatt
    with torch.no_grad():
        return torch_myatt(obj)(Q, K, V)


def _torch_module_backward(obj, Q, K, V, go, ga):
    import torch
    from oracle import torch_myatt
    t = torch_myatt(obj)
    leaves = [x.detach().clone().requires_grad_(True) for x in (Q, K, V)]
    out, attn = t(*leaves)
    loss = (out * go).sum()
    if ga is not None:
        loss = loss + (attn * ga).sum()
    params = dict(t.named_parameters())
    wanted = leaves + list(params.values())
    got = torch.autograd.grad(loss, wanted, allow_unused=True)
    got = [torch.zeros_like(w) if g is None else g for w, g in zip(wanted, got)]
    return dict(zip(["Q", "K", "V"] + list(params), got))


def _torch_mha(obj, q, k, v, kpm, am, need_weights=True):
    from oracle import run_mha, torch_mha
    # torch's need_weights=False path cannot reshape an empty mask (a view(N, H, -1, S) of
    # no elements is ambiguous: RuntimeError); there its need_weights=True path gives the
    # same attn_output (no row has every key masked when a mask is empty)
    empty = 0 in (q.shape[0], q.shape[1], k.shape[0])
    if not need_weights and empty and (kpm is not None or am is not None):
        out, _ = run_mha(torch_mha(obj), q, k, v, dtype=obj.dtype, key_padding_mask=kpm,
                         attn_mask=am)
        return out, None
    return run_mha(torch_mha(obj), q, k, v, dtype=obj.dtype, key_padding_mask=kpm,
                   attn_mask=am, need_weights=need_weights)


# --------------------------------------------------------------------------- #
# plain references (tests/reference.py) in the structure of each entry's result
# --------------------------------------------------------------------------- #
def _plain_layer_backward(lin, x, go):
    gx, gw, gb = reference.linear_backward(go, x, lin.weight, lin.bias)
    return {"input": gx, "weight": gw, "bias": gb}


def _plain_module(m, Q, K, V):
    return reference.myatt_forward(m.state_dict(), Q, K, V)


def _plain_module_backward(m, Q, K, V, go, ga):
    return reference.myatt_backward(m.state_dict(), Q, K, V, go, ga)


def _additive_mask(mask, shape):
    """A MultiheadAttention mask as the float64 array added to the scores (bool: True =
    ignored, -inf), reshaped; zeros for None."""
    if mask is None:
        return np.zeros(shape)
    a = np.asarray(mask)
    a = np.where(a, -np.inf, 0.0) if a.dtype == bool else a.astype(np.float64)
    return a.reshape(shape)


def _plain_mha(m, query, key, value, key_padding_mask=None, attn_mask=None,
               need_weights=True):
    """(attn_output, attn_weights averaged over heads, or None) of torch's
    multi_head_attention_forward in float64, for a MultiheadAttention `m` (any options;
    batch_first and unbatched inputs as torch takes them; a bool mask: True = ignored)."""
    p = {k: np.asarray(v, np.float64) for k, v in m.state_dict().items()}
    E, H = m.embed_dim, m.num_heads
    hd = E // H
    q, k, v = (np.asarray(x, np.float64) for x in (query, key, value))
    batched = q.ndim == 3
    if not batched:                                    # [L, E] -> [L, 1, E]
        q, k, v = q[:, None], k[:, None], v[:, None]
    elif m.batch_first:                                # [N, L, E] -> [L, N, E]
        q, k, v = (x.swapaxes(0, 1) for x in (q, k, v))
    L, N, S = q.shape[0], q.shape[1], k.shape[0]

    kpm = _additive_mask(key_padding_mask, (N, 1, 1, S))
    am = _additive_mask(attn_mask, (1, 1, L, S) if attn_mask is None or np.ndim(attn_mask) == 2
                        else (N, H, L, S))
    if "in_proj_weight" in p:
        wq, wk, wv = np.split(p["in_proj_weight"], 3)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bq, bk, bv = np.split(p["in_proj_bias"], 3) if "in_proj_bias" in p else (None,) * 3
    qp, kp, vp = (reference.linear(x, w_, b_) for x, w_, b_ in
                  ((q, wq, bq), (k, wk, bk), (v, wv, bv)))
    if "bias_k" in p:                                  # one more key, never masked
        kp = np.concatenate([kp, np.broadcast_to(p["bias_k"], (1, N, E))])
        vp = np.concatenate([vp, np.broadcast_to(p["bias_v"], (1, N, E))])
    heads = [x.reshape(x.shape[0], N, H, hd).transpose(1, 2, 0, 3) for x in (qp, kp, vp)]
    qh, kh, vh = heads                                 # [N, H, len, hd]
    if m.add_zero_attn:
        kh, vh = (np.concatenate([x, np.zeros((N, H, 1, hd))], axis=2) for x in (kh, vh))
    pad = kh.shape[2] - S
    mask = np.pad(kpm + am, [(0, 0)] * 3 + [(0, pad)])
    scores = qh @ kh.swapaxes(-1, -2) / np.sqrt(hd) + mask
    w = reference.softmax(scores, -1)                  # a row with every key -inf: NaN
    if not need_weights:                               # (torch's SDPA: zeros there)
        hidden = np.all(np.broadcast_to(mask, scores.shape) == -np.inf, axis=-1)
        w = np.where(hidden[..., None], 0.0, w)
    out = (w @ vh).transpose(2, 0, 1, 3).reshape(L, N, E)
    out = reference.linear(out, p["out_proj.weight"], p.get("out_proj.bias"))
    w = w.mean(axis=1)                                 # [N, L, S']
    if not batched:
        out, w = out[:, 0], w[0]
    elif m.batch_first:
        out = out.swapaxes(0, 1)
    return out, (w if need_weights else None)


def _plain_mha_backward(m, query, key, value, key_padding_mask=None, attn_mask=None,
                        grad_output=None, grad_attn_weights=None):
    """The gradients of sum(attn_output * grad_output) (+ sum(attn_weights *
    grad_attn_weights), the weights averaged) of _plain_mha's forward (need_weights=True;
    float64, NumPy only) by the chain rule written out: a dict of query, key, value and
    every state_dict key."""
    p = {k: np.asarray(v, np.float64) for k, v in m.state_dict().items()}
    E, H = m.embed_dim, m.num_heads
    hd = E // H
    x = [np.asarray(a, np.float64) for a in (query, key, value)]
    g = np.asarray(grad_output, np.float64)
    batched = x[0].ndim == 3

    def to_lne(a):            # the layout of _plain_mha: [len, N, features]
        return a[:, None] if not batched else a.swapaxes(0, 1) if m.batch_first else a

    q, k, v = (to_lne(a) for a in x)
    g = to_lne(g)
    L, N, S = q.shape[0], q.shape[1], k.shape[0]

    mask = _additive_mask(key_padding_mask, (N, 1, 1, S)) + _additive_mask(
        attn_mask, (N, H, L, S) if np.ndim(attn_mask) == 3 else (1, 1, L, S))
    if "in_proj_weight" in p:
        ws = np.split(p["in_proj_weight"], 3)
    else:
        ws = [p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]]
    bs = np.split(p["in_proj_bias"], 3) if "in_proj_bias" in p else [None] * 3
    proj = [reference.linear(a, w_, b_) for a, w_, b_ in zip((q, k, v), ws, bs)]
    if "bias_k" in p:
        for t, name in ((1, "bias_k"), (2, "bias_v")):
            proj[t] = np.concatenate([proj[t], np.broadcast_to(p[name], (1, N, E))])
    qh, kh, vh = (a.reshape(a.shape[0], N, H, hd).transpose(1, 2, 0, 3) for a in proj)
    if m.add_zero_attn:
        kh, vh = (np.concatenate([a, np.zeros((N, H, 1, hd))], axis=2) for a in (kh, vh))
    mask = np.pad(mask, [(0, 0)] * 3 + [(0, kh.shape[2] - S)])
    w = reference.softmax(qh @ kh.swapaxes(-1, -2) / np.sqrt(hd) + mask, -1)
    heads = (w @ vh).transpose(2, 0, 1, 3).reshape(L, N, E)
    grads = {"out_proj.weight": g.reshape(-1, E).T @ heads.reshape(-1, E)}
    if "out_proj.bias" in p:
        grads["out_proj.bias"] = g.sum((0, 1))
    d_o = (g @ p["out_proj.weight"]).reshape(L, N, H, hd).transpose(1, 2, 0, 3)
    d_w = d_o @ vh.swapaxes(-1, -2)
    if grad_attn_weights is not None:     # mean over the heads' backward
        gw = np.asarray(grad_attn_weights, np.float64)
        d_w = d_w + (gw if batched else gw[None])[:, None] / H
    d_vh = w.swapaxes(-1, -2) @ d_o
    d_s = w * (d_w - (d_w * w).sum(-1, keepdims=True)) / np.sqrt(hd)
    d_h = [d_s @ kh, d_s.swapaxes(-1, -2) @ qh, d_vh]
    S1 = S + ("bias_k" in p)              # the zero row's gradient goes nowhere
    d_proj = [a[:, :, :(L if t == 0 else S1)].transpose(2, 0, 1, 3).reshape(-1, N, E)
              for t, a in enumerate(d_h)]
    if "bias_k" in p:
        for t, name in ((1, "bias_k"), (2, "bias_v")):
            grads[name] = d_proj[t][S].sum(0).reshape(1, 1, E)
            d_proj[t] = d_proj[t][:S]
    dws, dbs = [], []
    for t, name in enumerate(("query", "key", "value")):
        d_in = d_proj[t] @ ws[t]
        grads[name] = d_in[:, 0] if not batched else (
            d_in.swapaxes(0, 1) if m.batch_first else d_in)
        dws.append(d_proj[t].reshape(-1, E).T @ [q, k, v][t].reshape(-1, ws[t].shape[1]))
        dbs.append(d_proj[t].sum((0, 1)))
    if "in_proj_weight" in p:
        grads["in_proj_weight"] = np.concatenate(dws)
    else:
        grads.update(zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), dws))
    if "in_proj_bias" in p:
        grads["in_proj_bias"] = np.concatenate(dbs)
    return grads


def _torch_mha_backward(m, q, k, v, kpm, am, go, gw):
    import torch
    from oracle import mask_to_torch, torch_mha
    t = torch_mha(m)
    leaves = {n: x.detach().clone().requires_grad_(True)
              for n, x in (("query", q), ("key", k), ("value", v))}
    out, w = t(leaves["query"], leaves["key"], leaves["value"],
               key_padding_mask=mask_to_torch(kpm, m.dtype), attn_mask=mask_to_torch(am, m.dtype))
    loss = (out * go).sum() + ((w * gw).sum() if gw is not None else 0)
    wanted = dict(leaves, **dict(t.named_parameters()))
    got = torch.autograd.grad(loss, list(wanted.values()), allow_unused=True)
    return {n: torch.zeros_like(x) if g_ is None else g_
            for (n, x), g_ in zip(wanted.items(), got)}


def _mha_grads(s):              # sorted keys: in_proj_bias, in_proj_weight, key, ...
    shapes = {"query": (s.L, s.N, s.embed), "key": (s.Skv, s.N, s.embed),
              "value": (s.Skv, s.N, s.embed), "in_proj_weight": (3 * s.embed, s.embed),
              "in_proj_bias": (3 * s.embed,), "out_proj.weight": (s.embed, s.embed),
              "out_proj.bias": (s.embed,)}
    return tuple(shapes[k] for k in sorted(shapes))


# --------------------------------------------------------------------------- #
# The entries
# --------------------------------------------------------------------------- #
def _layer(s, dtype, bias=True):
    return myatt.Linear(s.in_f, s.out_f, bias=bias, dtype=dtype)


def _module(s, dtype):
    return myatt.MyAtt(s.q, s.k, s.v1, s.v2, s.o, dtype=dtype)


def _mha(s, dtype):
    return myatt.MultiheadAttention(s.embed, s.heads, dtype=dtype)


def _mha_eval(s, dtype):
    """A module with dropout in eval mode: it does not drop (torch's oracle: the same)."""
    return myatt.MultiheadAttention(s.embed, s.heads, dropout=0.4, dtype=dtype).eval()


def _mha_separate(s, dtype):
    return myatt.MultiheadAttention(s.embed, s.heads, add_bias_kv=True, kdim=s.kdim,
                                    vdim=s.vdim, dtype=dtype)


# linear's operands
X = Arg("input", lambda s: s.batch + (s.in_f,), batch_free=True)
W = Arg("weight", lambda s: (s.out_f, s.in_f), fan_in=lambda s: s.in_f)
B = Arg("bias", lambda s: (s.out_f,), optional=True)
GY = Arg("grad_output", lambda s: s.batch + (s.out_f,), batch_free=True,
         fan_in=lambda s: int(np.prod(s.batch)))
# bmm's
BA = Arg("input", lambda s: (s.b, s.n, s.m))
BM = Arg("mat2", lambda s: (s.b, s.m, s.p), fan_in=lambda s: s.m)
BG = Arg("grad_output", lambda s: (s.b, s.n, s.p))
# softmax's
SX = Arg("input", lambda s: s.shape, ndim_free=True)
# MyAtt's (a size disagreement between Q, K and V may be reported under Q's name)
MQ = Arg("Q", lambda s: (s.Bq, s.S, s.q))
MK = Arg("K", lambda s: (s.Bk, s.S, s.k), also_named=("Q",))
MV = Arg("V", lambda s: (1, s.v1, s.v2), also_named=("Q",))
MG = Arg("grad_output", lambda s: (1, s.S, s.o), fan_in=lambda s: s.S)
MGA = Arg("grad_attn_weights", lambda s: (s.S, s.v1), optional=True, fan_in=lambda s: s.S)

# scaled_dot_product_attention's (the mask: a float one, added to the scaled scores)
AQ = Arg("query", lambda s: s.batch + (s.L, s.E), batch_free=True)
AK = Arg("key", lambda s: s.batch + (s.Skv, s.E), batch_free=True, also_named=("query",))
AV = Arg("value", lambda s: s.batch + (s.Skv, s.Ev), batch_free=True,
         also_named=("query", "key"))
AM = Arg("attn_mask", lambda s: (s.L, s.Skv), optional=True, broadcasts=True, promotes=False,
         floating=True)
# the pullback's cotangent: converted to the forward's dtype, taking no part in it
AG = Arg("grad_output", lambda s: s.batch + (s.L, s.Ev), batch_free=True, promotes=False,
         fan_in=lambda s: s.L)

# MultiheadAttention's (float masks, added to the scores; of the module's dtype)
HQ = Arg("query", lambda s: (s.L, s.N, s.embed))
HK = Arg("key", lambda s: (s.Skv, s.N, s.embed), also_named=("query",))
HV = Arg("value", lambda s: (s.Skv, s.N, s.embed), also_named=("query", "key"))
HKPM = Arg("key_padding_mask", lambda s: (s.N, s.Skv), optional=True, promotes=False,
           floating=True)
HAM = Arg("attn_mask", lambda s: (s.L, s.Skv), optional=True, promotes=False, floating=True)

LINEAR_SIZES = ("batch", "in_f", "out_f")
SDPA_SIZES = ("batch", "L", "Skv", "E", "Ev")
BMM_SIZES = ("b", "n", "m", "p")
SOFTMAX_SIZES = ("shape", "dim")
MYATT_SIZES = ("Bq", "Bk", "S", "q", "k", "v1", "v2", "o")
MHA_SIZES = ("N", "L", "Skv")           # (embed and heads fixed: embed % heads == 0)


def _mha_shapes(s):             # attn_output, attn_weights (averaged over the heads)
    return ((s.L, s.N, s.embed), (s.N, s.L, s.Skv))


def _linear_shapes(s):
    return (s.batch + (s.out_f,),)


def _linear_grads(s):           # Linear.backward's dict in key order: bias, input, weight
    return ((s.out_f,), s.batch + (s.in_f,), (s.out_f, s.in_f))


def _myatt_grads(s):            # sorted keys: K, Q, V, attn.bias, attn.weight, ...
    shapes = {"Q": (s.Bq, s.S, s.q), "K": (s.Bk, s.S, s.k), "V": (1, s.v1, s.v2),
              "attn.weight": (s.v1, s.q + s.k), "attn.bias": (s.v1,),
              "attn_combine.weight": (s.o, s.q + s.v2), "attn_combine.bias": (s.o,)}
    return tuple(shapes[k] for k in sorted(shapes))


ENTRY_POINTS = [
    # the kernel functions
    EntryPoint("linear", "function", (X, W, B), lambda o, x, w, b: myatt.linear(x, w, b),
               "array", torch=_torch_linear, sizes_of=LINEAR_SIZES,
               plain=lambda o, x, w, b: reference.linear(x, w, b),
               shapes=_linear_shapes),
    EntryPoint("softmax", "function", (SX,), lambda o, x, dim=-1: myatt.softmax(x, dim),
               "array", torch=_torch_softmax, sizes_of=SOFTMAX_SIZES,
               plain=lambda o, x, dim=-1: reference.softmax(x, dim),
               shapes=lambda s: (s.shape,)),
    EntryPoint("bmm", "function", (BA, BM), lambda o, a, m2: myatt.bmm(a, m2), "array",
               torch=_torch_bmm, sizes_of=BMM_SIZES, plain=lambda o, a, m2: reference.bmm(a, m2),
               shapes=lambda s: ((s.b, s.n, s.p),)),
    # private: MultiheadAttention's half-precision scores (torch's baddbmm(mask, q, k^T))
    EntryPoint("_baddbmm", "function",
               (Arg("input", lambda s: (s.b, s.n, s.p)), replace(BA, name="batch1"),
                replace(BM, name="batch2")),
               lambda o, i, a, m2: myatt._myatt._baddbmm(i, a, m2), "array",
               torch=_torch_baddbmm, sizes_of=BMM_SIZES,
               plain=lambda o, i, a, m2: reference.bmm(a, m2) + reference._f64(i),
               shapes=lambda s: ((s.b, s.n, s.p),)),
    EntryPoint("linear_backward", "function", (GY, X, W, B),
               lambda o, g, x, w, b: myatt.linear_backward(g, x, w, b), "arrays",
               torch=_torch_linear_backward, sizes_of=LINEAR_SIZES,
               plain=lambda o, g, x, w, b: reference.linear_backward(g, x, w, b),
               shapes=lambda s: (s.batch + (s.in_f,), (s.out_f, s.in_f), (s.out_f,))),
    EntryPoint("softmax_backward", "function",
               (Arg("grad_output", lambda s: s.shape, ndim_free=True),
                Arg("output", lambda s: s.shape, ndim_free=True)),
               lambda o, g, y, dim=-1: myatt.softmax_backward(g, y, dim), "array",
               torch=_torch_softmax_backward, sizes_of=SOFTMAX_SIZES,
               plain=lambda o, g, y, dim=-1: reference.softmax_backward(g, y, dim),
               shapes=lambda s: (s.shape,)),
    EntryPoint("bmm_backward", "function", (BG, BA, BM),
               lambda o, g, a, m2: myatt.bmm_backward(g, a, m2), "arrays",
               torch=_torch_bmm_backward, sizes_of=BMM_SIZES,
               plain=lambda o, g, a, m2: reference.bmm_backward(g, a, m2),
               shapes=lambda s: ((s.b, s.n, s.m), (s.b, s.m, s.p))),
    EntryPoint("scaled_dot_product_attention", "function", (AQ, AK, AV, AM),
               lambda o, q, k, v, m, **kw: myatt.scaled_dot_product_attention(
                   q, k, v, attn_mask=m, **kw),
               "array", torch=_torch_sdpa, sizes_of=SDPA_SIZES,
               plain=lambda o, q, k, v, m, **kw: reference.scaled_dot_product_attention(
                   q, k, v, m, **kw),
               shapes=lambda s: (s.batch + (s.L, s.Ev),), options=({}, {"scale": 0.3})),
    # is_causal (without a mask: with one, only torch's flash shapes take both)
    EntryPoint("scaled_dot_product_attention.causal", "function", (AQ, AK, AV),
               lambda o, q, k, v: myatt.scaled_dot_product_attention(q, k, v, is_causal=True),
               "array", torch=lambda o, q, k, v: _torch_sdpa(o, q, k, v, is_causal=True),
               sizes_of=SDPA_SIZES,
               plain=lambda o, q, k, v: reference.scaled_dot_product_attention(
                   q, k, v, _causal(q, k)),
               shapes=lambda s: (s.batch + (s.L, s.Ev),), keywords=False),
    EntryPoint("gelu", "function", (SX,), lambda o, x, **kw: myatt.gelu(x, **kw), "array",
               torch=_torch_gelu, sizes_of=("shape",),
               plain=lambda o, x, **kw: reference.gelu(x, **kw), shapes=lambda s: (s.shape,),
               options=({}, {"approximate": "tanh"})),
    EntryPoint("gelu_backward", "function",
               (Arg("grad_output", lambda s: s.shape, ndim_free=True), SX),
               lambda o, g, x, **kw: myatt.gelu_backward(g, x, **kw), "array",
               torch=_torch_gelu_backward, sizes_of=("shape",),
               plain=lambda o, g, x, **kw: reference.gelu_backward(g, x, **kw),
               shapes=lambda s: (s.shape,), options=({}, {"approximate": "tanh"})),
    # Linear
    EntryPoint("Linear", "constructor", (), lambda o: myatt.Linear(6, 3), "object"),
    EntryPoint("Linear.__call__", "method", (X,), lambda lin, x: lin(x), "array",
               make=_layer, torch=_torch_layer_call, sizes_of=LINEAR_SIZES, module_dtype=True,
               plain=lambda lin, x: reference.linear(x, lin.weight, lin.bias),
               shapes=_linear_shapes),
    EntryPoint("Linear.forward", "method", (X,), lambda lin, x: lin.forward(x), "array",
               make=_layer, torch=_torch_layer_call, sizes_of=LINEAR_SIZES, module_dtype=True,
               plain=lambda lin, x: reference.linear(x, lin.weight, lin.bias),
               shapes=_linear_shapes),
    EntryPoint("Linear.backward", "method", (X, GY), lambda lin, x, g: lin.backward(x, g),
               "grads", make=_layer, torch=_torch_layer_backward, sizes_of=LINEAR_SIZES,
               plain=_plain_layer_backward,
               module_dtype=True, shapes=_linear_grads),
    EntryPoint("Linear.weight=", "setter", (W,), lambda lin, w: setattr(lin, "weight", w),
               "none", make=_layer),
    EntryPoint("Linear.bias=", "setter", (Arg("bias", B.shape),),
               lambda lin, b: setattr(lin, "bias", b), "none", make=_layer),
    EntryPoint("Linear.load_state_dict", "setter", (W, Arg("bias", B.shape)),
               lambda lin, w, b: lin.load_state_dict({"weight": w, "bias": b}), "none",
               make=_layer),
    # MyAtt
    EntryPoint("MyAtt", "constructor", (), lambda o: myatt.MyAtt(3, 4, 5, 6, 2), "object"),
    EntryPoint("MyAtt.__call__", "method", (MQ, MK, MV), lambda m, Q, K, V: m(Q, K, V),
               "arrays", make=_module, torch=_torch_module_call, sizes_of=MYATT_SIZES,
               plain=_plain_module,
               module_dtype=True,
               shapes=lambda s: ((1, s.S, s.o), (s.S, s.v1))),
    EntryPoint("MyAtt.forward", "method", (MQ, MK, MV), lambda m, Q, K, V: m.forward(Q, K, V),
               "arrays", make=_module, torch=_torch_module_call, sizes_of=MYATT_SIZES,
               plain=_plain_module,
               module_dtype=True,
               shapes=lambda s: ((1, s.S, s.o), (s.S, s.v1))),
    EntryPoint("MyAtt.backward", "method", (MQ, MK, MV, MG, MGA),
               lambda m, Q, K, V, g, ga: m.backward(Q, K, V, g, ga), "grads", make=_module,
               torch=_torch_module_backward, sizes_of=MYATT_SIZES, module_dtype=True,
               plain=_plain_module_backward,
               shapes=_myatt_grads),
    EntryPoint("MyAtt.load_state_dict", "setter",
               (Arg("attn.weight", lambda s: (s.v1, s.q + s.k)),
                Arg("attn.bias", lambda s: (s.v1,)),
                Arg("attn_combine.weight", lambda s: (s.o, s.q + s.v2)),
                Arg("attn_combine.bias", lambda s: (s.o,))),
               lambda m, aw, ab, cw, cb: m.load_state_dict(
                   {"attn.weight": aw, "attn.bias": ab, "attn_combine.weight": cw,
                    "attn_combine.bias": cb}), "none", make=_module),
    EntryPoint("MyAtt.attn.weight=", "setter", (Arg("weight", lambda s: (s.v1, s.q + s.k)),),
               lambda m, w: setattr(m.attn, "weight", w), "none", make=_module),
    # MultiheadAttention: forward(query, key, value, key_padding_mask) (positional, so
    # keywords=True holds), and with attn_mask too, given by keyword since need_weights
    # sits before it (keywords=False): with the weights (need_weights=True: the linear, bmm
    # and softmax kernels) and without them (need_weights=False: the flash kernel)
    EntryPoint("MultiheadAttention", "constructor", (),
               lambda o: myatt.MultiheadAttention(4, 2), "object"),
    EntryPoint("MultiheadAttention.forward", "method", (HQ, HK, HV, HKPM),
               lambda m, q, k, v, kpm: m.forward(q, k, v, kpm), "arrays", make=_mha,
               torch=lambda o, q, k, v, kpm: _torch_mha(o, q, k, v, kpm, None),
               sizes_of=MHA_SIZES, plain=lambda o, q, k, v, kpm: _plain_mha(o, q, k, v, kpm),
               module_dtype=True, shapes=_mha_shapes),
    EntryPoint("MultiheadAttention.__call__", "method", (HQ, HK, HV, HKPM, HAM),
               lambda m, q, k, v, kpm, am: m(q, k, v, key_padding_mask=kpm, attn_mask=am),
               "arrays", make=_mha, torch=_torch_mha, sizes_of=MHA_SIZES, plain=_plain_mha,
               module_dtype=True, shapes=_mha_shapes, keywords=False),
    EntryPoint("MultiheadAttention.forward.need_weights=False", "method",
               (HQ, HK, HV, HKPM, HAM),
               lambda m, q, k, v, kpm, am: m.forward(q, k, v, key_padding_mask=kpm,
                                                     need_weights=False, attn_mask=am),
               "arrays", make=_mha,
               torch=lambda o, q, k, v, kpm, am: _torch_mha(o, q, k, v, kpm, am, False),
               sizes_of=MHA_SIZES,
               plain=lambda o, q, k, v, kpm, am: _plain_mha(o, q, k, v, kpm, am, False),
               module_dtype=True, shapes=lambda s: _mha_shapes(s)[:1], keywords=False),
    EntryPoint("MultiheadAttention.in_proj_weight=", "setter",
               (Arg("in_proj_weight", lambda s: (3 * s.embed, s.embed)),),
               lambda m, w: setattr(m, "in_proj_weight", w), "none", make=_mha),
    EntryPoint("MultiheadAttention.in_proj_bias=", "setter",
               (Arg("in_proj_bias", lambda s: (3 * s.embed,)),),
               lambda m, b: setattr(m, "in_proj_bias", b), "none", make=_mha),
    EntryPoint("MultiheadAttention.load_state_dict", "setter",
               (Arg("in_proj_weight", lambda s: (3 * s.embed, s.embed)),
                Arg("in_proj_bias", lambda s: (3 * s.embed,)),
                Arg("out_proj.weight", lambda s: (s.embed, s.embed)),
                Arg("out_proj.bias", lambda s: (s.embed,))),
               lambda m, w, b, ow, ob: m.load_state_dict(
                   {"in_proj_weight": w, "in_proj_bias": b, "out_proj.weight": ow,
                    "out_proj.bias": ob}), "none", make=_mha),
    EntryPoint("MultiheadAttention.out_proj.weight=", "setter",
               (Arg("weight", lambda s: (s.embed, s.embed)),),
               lambda m, w: setattr(m.out_proj, "weight", w), "none", make=_mha),
]

# MultiheadAttention's other parameters, on a module that has them (kdim and vdim other
# than embed_dim: separate q/k/v weights; add_bias_kv)
ENTRY_POINTS += [
    EntryPoint(f"MultiheadAttention.{name}=", "setter", (Arg(name, shape),),
               lambda m, x, name=name: setattr(m, name, x), "none", make=_mha_separate)
    for name, shape in (("q_proj_weight", lambda s: (s.embed, s.embed)),
                        ("k_proj_weight", lambda s: (s.embed, s.kdim)),
                        ("v_proj_weight", lambda s: (s.embed, s.vdim)),
                        ("bias_k", lambda s: (1, 1, s.embed)),
                        ("bias_v", lambda s: (1, 1, s.embed)))
]

# myatt.vjp: the forwards through it, and each pullback applied to a cotangent (the
# pullback of a fresh vjp of the other arguments), against the stateless backward's
# references.  A cotangent takes no part in the gradients' dtype: they are the
# forward's (promotes=False), as torch's autograd casts a gradient to its tensor's
# dtype.  PG: an elementwise function's (softmax's, gelu's)
PG = Arg("grad_output", lambda s: s.shape, ndim_free=True, promotes=False)
def _vjp_pull(fn, *args, **kw):
    return lambda g, *cot: myatt.vjp(fn, *args, **kw)[1](g, *cot)


ENTRY_POINTS += [
    EntryPoint("vjp", "function", (X, W, B), lambda o, x, w, b: myatt.vjp(myatt.linear, x, w, b)[0],
               "array", torch=_torch_linear, sizes_of=LINEAR_SIZES,
               plain=lambda o, x, w, b: reference.linear(x, w, b),
               shapes=_linear_shapes, keywords=False),
    EntryPoint("vjp.linear.pullback", "function", (X, W, B, replace(GY, promotes=False)),
               lambda o, x, w, b, g: _vjp_pull(myatt.linear, x, w, b)(g), "arrays",
               torch=lambda o, x, w, b, g: _torch_linear_backward(o, g, x, w, b),
               sizes_of=LINEAR_SIZES,
               plain=lambda o, x, w, b, g: reference.linear_backward(g, x, w, b),
               shapes=lambda s: (s.batch + (s.in_f,), (s.out_f, s.in_f), (s.out_f,)),
               keywords=False),
    EntryPoint("vjp.softmax.pullback", "function", (SX, PG),
               lambda o, x, g, dim=-1: _vjp_pull(myatt.softmax, x, dim)(g), "arrays",
               torch=lambda o, x, g, dim=-1: (_torch_softmax_backward(
                   o, g, _torch_softmax(o, x, dim), dim),),
               sizes_of=SOFTMAX_SIZES,
               plain=lambda o, x, g, dim=-1: (reference.softmax_backward(
                   g, reference.softmax(x, dim), dim),),
               shapes=lambda s: (s.shape,), keywords=False),
    EntryPoint("vjp.bmm.pullback", "function", (BA, BM, replace(BG, promotes=False)),
               lambda o, a, m2, g: _vjp_pull(myatt.bmm, a, m2)(g), "arrays",
               torch=lambda o, a, m2, g: _torch_bmm_backward(o, g, a, m2), sizes_of=BMM_SIZES,
               plain=lambda o, a, m2, g: reference.bmm_backward(g, a, m2),
               shapes=lambda s: ((s.b, s.n, s.m), (s.b, s.m, s.p)), keywords=False),
    EntryPoint("vjp.scaled_dot_product_attention.result", "function", (AQ, AK, AV, AM),
               lambda o, q, k, v, m, **kw: myatt.vjp(myatt.scaled_dot_product_attention,
                                                     q, k, v, attn_mask=m, **kw)[0],
               "array", torch=_torch_sdpa, sizes_of=SDPA_SIZES,
               plain=lambda o, q, k, v, m, **kw: reference.scaled_dot_product_attention(
                   q, k, v, m, **kw),
               shapes=lambda s: (s.batch + (s.L, s.Ev),), keywords=False,
               options=({}, {"scale": 0.3})),
    EntryPoint("vjp.scaled_dot_product_attention.pullback", "function", (AQ, AK, AV, AM, AG),
               lambda o, q, k, v, m, g, **kw: _vjp_pull(myatt.scaled_dot_product_attention,
                                                        q, k, v, attn_mask=m, **kw)(g),
               "arrays", torch=_torch_sdpa_backward, sizes_of=SDPA_SIZES,
               plain=lambda o, q, k, v, m, g, **kw: (
                   reference.scaled_dot_product_attention_backward(g, q, k, v, m, **kw)),
               shapes=lambda s: (s.batch + (s.L, s.E), s.batch + (s.Skv, s.E),
                                 s.batch + (s.Skv, s.Ev)), keywords=False,
               options=({}, {"scale": 0.3})),
    EntryPoint("vjp.scaled_dot_product_attention.causal.pullback", "function",
               (AQ, AK, AV, AG),
               lambda o, q, k, v, g: _vjp_pull(myatt.scaled_dot_product_attention, q, k, v,
                                               is_causal=True)(g),
               "arrays",
               torch=lambda o, q, k, v, g: _torch_sdpa_backward(o, q, k, v, None, g,
                                                                is_causal=True)[:3],
               sizes_of=SDPA_SIZES,
               plain=lambda o, q, k, v, g: reference.scaled_dot_product_attention_backward(
                   g, q, k, v, _causal(q, k))[:3],
               shapes=lambda s: (s.batch + (s.L, s.E), s.batch + (s.Skv, s.E),
                                 s.batch + (s.Skv, s.Ev)), keywords=False),
    EntryPoint("vjp.gelu.pullback", "function", (SX, PG),
               lambda o, x, g, **kw: _vjp_pull(myatt.gelu, x, **kw)(g), "arrays",
               torch=lambda o, x, g, **kw: (_torch_gelu_backward(o, g, x, **kw),),
               sizes_of=("shape",),
               plain=lambda o, x, g, **kw: (reference.gelu_backward(g, x, **kw),),
               shapes=lambda s: (s.shape,), keywords=False,
               options=({}, {"approximate": "tanh"})),
    EntryPoint("Linear.vjp.pullback", "method", (X, GY),
               lambda lin, x, g: _vjp_pull(lin, x)(g), "grads", make=_layer,
               torch=_torch_layer_backward, sizes_of=LINEAR_SIZES, plain=_plain_layer_backward,
               module_dtype=True, shapes=_linear_grads, keywords=False),
    EntryPoint("MyAtt.vjp.result", "method", (MQ, MK, MV),
               lambda m, Q, K, V: myatt.vjp(m, Q, K, V)[0],
               "arrays", make=_module, torch=_torch_module_call, sizes_of=MYATT_SIZES,
               plain=_plain_module, module_dtype=True,
               shapes=lambda s: ((1, s.S, s.o), (s.S, s.v1)), keywords=False),
    EntryPoint("MyAtt.vjp.pullback", "method", (MQ, MK, MV, MG, MGA),
               lambda m, Q, K, V, g, ga: _vjp_pull(m, Q, K, V)(g, ga), "grads", make=_module,
               torch=_torch_module_backward, sizes_of=MYATT_SIZES, module_dtype=True,
               plain=_plain_module_backward, shapes=_myatt_grads, keywords=False),
]

# MultiheadAttention through vjp: the forward, and the pullback of both cotangents
HG = Arg("grad_output", lambda s: (s.L, s.N, s.embed), fan_in=lambda s: s.L)
HGW = Arg("grad_attn_weights", lambda s: (s.N, s.L, s.Skv), optional=True)
ENTRY_POINTS += [
    EntryPoint("MultiheadAttention.vjp.result", "method", (HQ, HK, HV, HKPM, HAM),
               lambda m, q, k, v, kpm, am: myatt.vjp(m, q, k, v, key_padding_mask=kpm,
                                                     attn_mask=am)[0],
               "arrays", make=_mha, torch=_torch_mha, sizes_of=MHA_SIZES, plain=_plain_mha,
               module_dtype=True, shapes=_mha_shapes, keywords=False),
    EntryPoint("MultiheadAttention.vjp.pullback", "method", (HQ, HK, HV, HKPM, HAM, HG, HGW),
               lambda m, q, k, v, kpm, am, g, gw: _vjp_pull(
                   m, q, k, v, key_padding_mask=kpm, attn_mask=am)(g, gw),
               "grads", make=_mha, torch=_torch_mha_backward, sizes_of=MHA_SIZES,
               plain=_plain_mha_backward, module_dtype=True, shapes=_mha_grads,
               keywords=False),
]

# The modes: a module with dropout in eval mode computes as torch's in eval mode, forward
# and through vjp (in training mode it drops: test_mha.py, test_modes.py)
ENTRY_POINTS += [
    EntryPoint("MultiheadAttention.eval.__call__", "method", (HQ, HK, HV, HKPM, HAM),
               lambda m, q, k, v, kpm, am: m(q, k, v, key_padding_mask=kpm, attn_mask=am),
               "arrays", make=_mha_eval, torch=_torch_mha, sizes_of=MHA_SIZES, plain=_plain_mha,
               module_dtype=True, shapes=_mha_shapes, keywords=False),
    EntryPoint("MultiheadAttention.eval.vjp.pullback", "method", (HQ, HK, HV, HKPM, HAM, HG, HGW),
               lambda m, q, k, v, kpm, am, g, gw: _vjp_pull(
                   m, q, k, v, key_padding_mask=kpm, attn_mask=am)(g, gw),
               "grads", make=_mha_eval, torch=_torch_mha_backward, sizes_of=MHA_SIZES,
               plain=_plain_mha_backward, module_dtype=True, shapes=_mha_grads,
               keywords=False),
]

BY_NAME = {ep.name: ep for ep in ENTRY_POINTS}
assert len(BY_NAME) == len(ENTRY_POINTS), "entry point names must be unique"


def call_kwargs(ep, s, opt=None):
    """Keyword arguments beside the arrays: softmax's dim, and the option set opt."""
    return dict({"dim": s.dim} if "dim" in ep.sizes_of else {}, **(opt or {}))


def invoke(ep, obj, arrays, s=SMALL, opt=None):
    """ep called on obj with `arrays` at sizes s (with the keyword options opt)."""
    return ep.call(obj, *arrays, **call_kwargs(ep, s, opt))


def invoke_torch(ep, obj, tensors, s=SMALL, opt=None):
    return ep.torch(obj, *tensors, **call_kwargs(ep, s, opt))


def invoke_plain(ep, obj, arrays, s=SMALL, opt=None):
    return ep.plain(obj, *arrays, **call_kwargs(ep, s, opt))



# The ones that take arrays and compute (the thread, property and fuzz tests run these)
COMPUTING = [ep for ep in ENTRY_POINTS if ep.kind in ("function", "method")]
WITH_ARRAYS = [ep for ep in ENTRY_POINTS if ep.args]
