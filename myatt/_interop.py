"""Reading torch modules for ``Linear.from_torch`` and ``MyAtt.from_torch``.

The C classmethods call ``linear_spec`` / ``myatt_spec``, which return
``(args, kwargs, state_dict)``: what the constructor gets and what is then
loaded into the new object.  Nothing here imports torch: a module and its
tensors are read through their attributes (``.dtype``, ``.detach()``,
``.cpu()``, ``.numpy()``), so only a caller that already has torch pays for it.
"""
import numpy as np

MYATT_SIZES = ("query_size", "key_size", "value_size1", "value_size2", "output_size")

_DTYPES = {"torch.float32": "float32", "torch.float64": "float64"}


def dtype_name(tensor, what):
    """'float32' or 'float64' for a torch (or NumPy) float32/float64 tensor, else TypeError."""
    dt = getattr(tensor, "dtype", None)
    name = str(dt)
    if name in _DTYPES:
        return _DTYPES[name]
    if isinstance(dt, np.dtype) and dt in (np.float32, np.float64):
        return dt.name
    raise TypeError(f"{what} is {name}: myatt computes in float32 or float64 only; convert "
                    f"the module first (module.float() or module.double())")


def to_numpy(t):
    """A torch tensor (any device, requires_grad or not) or array-like as a NumPy array."""
    if hasattr(t, "detach"):
        t = t.detach()
    if hasattr(t, "cpu"):
        t = t.cpu()
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _state_dict(module, caller):
    if not callable(getattr(module, "state_dict", None)):
        raise TypeError(f"{caller}: expected a torch.nn.Module, got {type(module).__name__}")
    return {k: to_numpy(v) for k, v in module.state_dict().items()}


def linear_spec(module):
    """(args, kwargs, state_dict) of a myatt.Linear equal to the torch.nn.Linear `module`."""
    caller = "Linear.from_torch()"
    missing = [a for a in ("in_features", "out_features", "weight") if not hasattr(module, a)]
    if missing:
        raise TypeError(f"{caller}: expected a torch.nn.Linear, got {type(module).__name__} "
                        f"(it has no {', '.join(missing)})")
    bias = getattr(module, "bias", None) is not None
    dtype = dtype_name(module.weight, f"{caller}: the module's weight")
    if bias and dtype_name(module.bias, f"{caller}: the module's bias") != dtype:
        raise TypeError(f"{caller}: weight and bias have different dtypes "
                        f"({module.weight.dtype} and {module.bias.dtype})")
    args = (int(module.in_features), int(module.out_features), bias)
    return args, {"dtype": dtype}, _state_dict(module, caller)


def myatt_spec(module):
    """(args, kwargs, state_dict) of a myatt.MyAtt equal to the tutorial's torch MyAtt `module`."""
    caller = "MyAtt.from_torch()"
    missing = [a for a in MYATT_SIZES + ("attn", "attn_combine") if not hasattr(module, a)]
    if missing:
        raise TypeError(f"{caller}: expected the tutorial's MyAtt module (attributes "
                        f"{', '.join(MYATT_SIZES)}, attn, attn_combine), got "
                        f"{type(module).__name__} without {', '.join(missing)}")
    dtypes = {name: dtype_name(getattr(module, name).weight, f"{caller}: {name}.weight")
              for name in ("attn", "attn_combine")}
    if dtypes["attn"] != dtypes["attn_combine"]:
        raise TypeError(f"{caller}: attn and attn_combine have different dtypes "
                        f"({dtypes['attn']} and {dtypes['attn_combine']})")
    args = tuple(int(getattr(module, a)) for a in MYATT_SIZES)
    return args, {"dtype": dtypes["attn"]}, _state_dict(module, caller)


def mha_spec(module):
    """(args, kwargs, state_dict) of a myatt.MultiheadAttention equal to the
    torch.nn.MultiheadAttention `module`."""
    caller = "MultiheadAttention.from_torch()"
    attrs = ("embed_dim", "num_heads", "dropout", "kdim", "vdim", "batch_first",
             "add_zero_attn", "in_proj_bias", "bias_k", "out_proj")
    missing = [a for a in attrs if not hasattr(module, a)]
    if missing:
        raise TypeError(f"{caller}: expected a torch.nn.MultiheadAttention, got "
                        f"{type(module).__name__} (it has no {', '.join(missing)})")
    dtype = dtype_name(module.out_proj.weight, f"{caller}: the module's out_proj.weight")
    args = (int(module.embed_dim), int(module.num_heads), float(module.dropout),
            module.in_proj_bias is not None, module.bias_k is not None,
            bool(module.add_zero_attn), int(module.kdim), int(module.vdim),
            bool(module.batch_first))
    return args, {"dtype": dtype}, _state_dict(module, caller)
