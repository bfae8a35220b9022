"""myatt's twin of each torch callable that ``compare`` runs beside it, and the same call
through ``myatt.vjp`` and in float64.

- ``function_twin(fn, torch)``: the myatt function of a torch function
  (``F.scaled_dot_product_attention``, ``F.linear``, ``torch.softmax`` / ``F.softmax``,
  ``torch.bmm``, ``F.multi_head_attention_forward``), or None.
- ``module_twin(module)``: ``MyAtt`` / ``MultiheadAttention`` / ``Linear.from_torch``.
- ``multi_head_attention_forward``: torch's function on a ``myatt.MultiheadAttention``
  holding the weights it is given.
- ``vjp(twin, args, kwargs)``: ``myatt.vjp`` of the call, its gradients keyed by the names
  of the twin's arguments (a function's parameters; a module's inputs and ``state_dict``
  keys).
- ``in_float64(twin)``: the twin computing in float64 (a module rebuilt in float64), or
  None when it is not one of myatt's.

torch is never imported here: the callers pass it in.
"""
import inspect

import numpy as np

from . import _interop, _myatt

FUNCTIONS = (_myatt.linear, _myatt.softmax, _myatt.bmm, _myatt.scaled_dot_product_attention)
MODULE_TYPES = (_myatt.Linear, _myatt.MyAtt, _myatt.MultiheadAttention)
# the arguments that are masks: never differentiated (myatt's gradients of them are None)
MASKS = ("attn_mask", "key_padding_mask")


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """``torch.nn.functional.multi_head_attention_forward`` on myatt's kernels: a
    ``myatt.MultiheadAttention`` holding the weights given, in the mode `training` says,
    called with the masks and flags (inputs ``[L, N, E]`` or unbatched ``[L, E]``, as
    torch's function takes them)."""
    m, _ = _mha_module(**locals())
    return m(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
             is_causal)


_MHA_PARAMS = list(inspect.signature(multi_head_attention_forward).parameters)
# state_dict key -> the function's argument holding it
_MHA_WEIGHTS = {"in_proj_weight": "in_proj_weight", "q_proj_weight": "q_proj_weight",
                "k_proj_weight": "k_proj_weight", "v_proj_weight": "v_proj_weight",
                "in_proj_bias": "in_proj_bias", "bias_k": "bias_k", "bias_v": "bias_v",
                "out_proj.weight": "out_proj_weight", "out_proj.bias": "out_proj_bias"}


def _mha_module(**a):
    """(the MultiheadAttention of multi_head_attention_forward's arguments `a`, the
    state_dict key -> argument name of its parameters)."""
    if a["static_k"] is not None or a["static_v"] is not None:
        raise TypeError("multi_head_attention_forward: myatt's MultiheadAttention has no "
                        "static_k / static_v")
    if (a["in_proj_bias"] is None) != (a["out_proj_bias"] is None):
        raise TypeError("multi_head_attention_forward: myatt's MultiheadAttention has both "
                        "in_proj_bias and out_proj_bias, or neither")
    arrays = [np.asarray(x) for x in a.values() if x is not None and not np.isscalar(x)
              and not isinstance(x, bool)]
    floats = {x.dtype for x in arrays if x.dtype.kind == "f" or x.dtype.name == "bfloat16"}
    # torch's function takes one dtype: a half one stays (its module computes as torch's)
    dtype = (np.float64 if np.dtype(np.float64) in floats else floats.pop()
             if len(floats) == 1 and next(iter(floats)).itemsize == 2 else np.float32)
    E, H = int(a["embed_dim_to_check"]), int(a["num_heads"])
    separate = bool(a["use_separate_proj_weight"])
    kdim = np.shape(a["k_proj_weight"])[1] if separate else E
    vdim = np.shape(a["v_proj_weight"])[1] if separate else E
    m = _myatt.MultiheadAttention(E, H, dropout=float(a["dropout_p"]),
                                  bias=a["in_proj_bias"] is not None,
                                  add_bias_kv=a["bias_k"] is not None,
                                  add_zero_attn=bool(a["add_zero_attn"]), kdim=kdim, vdim=vdim,
                                  dtype=dtype)
    keys = m.state_dict().keys()
    names = {k: v for k, v in _MHA_WEIGHTS.items() if k in keys}
    m.load_state_dict({k: a[v] for k, v in names.items()})
    return m.train(bool(a["training"])), names


def function_twin(fn, torch):
    """myatt's function for the torch function `fn`, or None."""
    F = torch.nn.functional
    twins = {F.scaled_dot_product_attention: _myatt.scaled_dot_product_attention,
             F.linear: _myatt.linear, torch.softmax: _myatt.softmax, F.softmax: _myatt.softmax,
             torch.bmm: _myatt.bmm, F.multi_head_attention_forward: multi_head_attention_forward}
    try:
        return twins.get(fn)
    except TypeError:   # unhashable
        return None


def module_twin(module):
    """The myatt module holding a copy of the torch `module` (from_torch), or None."""
    if all(hasattr(module, a) for a in _interop.MYATT_SIZES):
        return _myatt.MyAtt.from_torch(module)
    if all(hasattr(module, a) for a in ("embed_dim", "num_heads", "out_proj")):
        return _myatt.MultiheadAttention.from_torch(module)
    if hasattr(module, "in_features") and hasattr(module, "out_features"):
        return _myatt.Linear.from_torch(module)
    return None


def parameter_names(fn):
    """The names of the positional parameters of `fn` (of a module's forward), in order,
    or None when it has none that inspect can read (a C function without a text
    signature, a lambda taking *args)."""
    target = fn.forward if hasattr(fn, "forward") else fn
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params if p.name != "self" and p.kind in
             (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return names or None


def in_float64(twin):
    """The twin computing in float64: a module rebuilt in float64 with the same parameters
    and modes; a function as it is (it computes in its inputs' dtype); None for any other
    callable (a rerun of which would not be myatt's)."""
    if isinstance(twin, MODULE_TYPES):
        rebuild, (args, kwargs, state, modes), _ = twin.__reduce__()
        return rebuild(args, dict(kwargs or {}, dtype="float64"),
                       {k: v.astype(np.float64) for k, v in state.items()}, modes)
    if twin is multi_head_attention_forward or any(twin is f for f in FUNCTIONS):
        return twin
    return None


def vjp(twin, args, kwargs):
    """(result, pullback) of ``myatt.vjp`` of ``twin(*args, **kwargs)``; pullback(*cotangents)
    returns the gradients as a dict keyed by the twin's argument names (a function's
    parameters, None for a mask, left out; a module's inputs and state_dict keys)."""
    if twin is multi_head_attention_forward:
        bound = dict(zip(_MHA_PARAMS, args), **kwargs)
        full = {p: bound.get(p, inspect.signature(twin).parameters[p].default)
                for p in _MHA_PARAMS}
        m, names = _mha_module(**full)
        result, pull = _myatt.vjp(m, full["query"], full["key"], full["value"],
                                  full["key_padding_mask"], full["need_weights"],
                                  full["attn_mask"], full["average_attn_weights"],
                                  full["is_causal"])

        def pullback(*cotangents):
            g = pull(*cotangents)
            return dict({"query": g["query"], "key": g["key"], "value": g["value"]},
                        **{names[k]: g[k] for k in names})
        return result, pullback
    result, pull = _myatt.vjp(twin, *args, **kwargs)
    if isinstance(twin, MODULE_TYPES):
        return result, pull
    names = parameter_names(twin)

    def pullback_of_function(*cotangents):
        g = pull(*cotangents)
        return {n: x for n, x in zip(names, g if isinstance(g, tuple) else (g,)) if x is not None}
    return result, pullback_of_function
