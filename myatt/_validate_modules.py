"""validate's global module hooks: the name of the module of each call, and the row of each
``nn.MultiheadAttention`` call (shadow mode), whichever path it takes.

``register_module_forward_pre_hook`` and a forward hook with ``always_call`` keep torch's
fast paths (a hook on the module itself, or a function mode, would switch them off). They
are installed once for all threads while any validation is active, and do nothing on a
thread that validates nothing.
"""
import contextlib
import inspect
import threading

import torch
import torch.nn.functional as F
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)
from torch.overrides import TorchFunctionMode

from . import _interop, _myatt
from . import torch as mt
from ._validate_calls import (add_record, describe, dtype_reason, local, note, Record,
                              resolve_pending, tensors_in, watch)
from ._validate_rerun import settle

_hooks_lock = threading.Lock()
_hooks: list = []
_hook_users = 0


class _Frame:
    __slots__ = ("module", "name", "names", "record")

    def __init__(self, module, name, names, record=None):
        self.module, self.name, self.names, self.record = module, name, names, record


def install_hooks():
    global _hook_users
    with _hooks_lock:
        if _hook_users == 0:
            _hooks[:] = [register_module_forward_pre_hook(pre_hook),
                         register_module_forward_hook(post_hook, with_kwargs=True,
                                                      always_call=True)]
        _hook_users += 1


def remove_hooks():
    global _hook_users
    with _hooks_lock:
        _hook_users -= 1
        if _hook_users == 0:
            for h in _hooks:
                h.remove()
            _hooks.clear()


def is_mha(module):
    return isinstance(module, torch.nn.MultiheadAttention)


def _names_of(root):
    session = local.sessions[0]
    names = session.names.get(id(root))
    if names is None:
        names = {id(m): n for n, m in root.named_modules(remove_duplicate=False)}
        session.names[id(root)] = names
        session.keep.append(root)      # the ids stay valid while the session lives
    return names


def pre_hook(module, args):
    loc = local
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
        if is_mha(module) and loc.sessions[0].mode == "shadow":
            # (replace mode sees its F.multi_head_attention_forward call instead)
            frame.record = Record("mha", "nn.MultiheadAttention", name)
            add_record(frame.record)
        loc.modules.append(frame)
    except Exception as e:     # never break the model: say it in the report instead
        note(f"module {type(module).__name__}: not followed ({type(e).__name__}: {e})")
    return None


def post_hook(module, args, kwargs, output=None):
    loc = local
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
        resolve_pending()
    if frame.record is not None:
        loc.busy += 1
        try:
            with _below(loc.mode):
                record_mha(frame.record, module, args, kwargs, output)
        except Exception as e:
            frame.record.skip = f"not recorded ({type(e).__name__}: {e})"
        finally:
            loc.busy -= 1
    return None


@contextlib.contextmanager
def _below(mode):
    """Run the block below the dispatch mode `mode` when it is the innermost one: the copies
    a hook makes for a row do not pay its toll (~4 us an op, and nothing of validation's
    own is recorded anyway). With another mode innermost (a user's, entered inside the
    block), the block runs as it is: that mode stays where it is."""
    depth = torch._C._len_torch_dispatch_stack()
    if mode is None or not depth or torch._C._get_dispatch_stack_at(depth - 1) is not mode:
        yield
        return
    torch._C._pop_torch_dispatch_stack(None)
    try:
        yield
    finally:
        torch._C._push_on_torch_dispatch_stack(mode)


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


class _SlowPath:
    """An ``nn.MultiheadAttention`` call as the module's slow path makes it, on the weights
    it had at the call (`state`): the inputs transposed for ``batch_first`` as the module
    does (self-attention stays one tensor), ``F.multi_head_attention_forward`` (torch's, or
    myatt's twin: `function`) with the module's settings, the output transposed back. What
    torch's module runs off its fast path, without the cost of calling the module
    (torch.func.functional_call, the module's checks) for each rerun."""

    def __init__(self, module, function):
        self.function = function
        self.batch_first = bool(module.batch_first)
        self.settings = (int(module.embed_dim), int(module.num_heads),
                         bool(module.add_zero_attn), float(module.dropout),
                         bool(module.training), not module._qkv_same_embed_dim)

    def __call__(self, state, query, key, value, key_padding_mask=None, need_weights=True,
                 attn_mask=None, average_attn_weights=True, is_causal=False):
        E, H, add_zero_attn, dropout, training, separate = self.settings
        batched = query.dim() == 3
        if self.batch_first and batched:
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        out, weights = self.function(
            query, key, value, E, H, state.get("in_proj_weight"), state.get("in_proj_bias"),
            state.get("bias_k"), state.get("bias_v"), add_zero_attn, dropout,
            state["out_proj.weight"], state.get("out_proj.bias"), training=training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=separate, q_proj_weight=state.get("q_proj_weight"),
            k_proj_weight=state.get("k_proj_weight"), v_proj_weight=state.get("v_proj_weight"),
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        return (out.transpose(1, 0) if self.batch_first and batched else out), weights


class _MyattModule:
    """myatt's rerun of an ``nn.MultiheadAttention`` call: a ``myatt.MultiheadAttention``
    with the module's settings and modes and the weights it had at the call (`state`),
    called as the module was (myatt's module does the ``batch_first`` transposes). Where
    gradients are compared (grad mode on), the slow path's call of myatt.torch's twin of
    ``F.multi_head_attention_forward`` instead, whose pullback carries them: myatt's module
    either way, with the same bits."""

    def __init__(self, module):
        # _interop.mha_spec's constructor arguments and modes, without reading the weights
        # (recorded apart: `state`)
        self.args = (int(module.embed_dim), int(module.num_heads), float(module.dropout),
                     module.in_proj_bias is not None, module.bias_k is not None,
                     bool(module.add_zero_attn), int(module.kdim), int(module.vdim),
                     bool(module.batch_first))
        self.modes = _interop._torch_modes(module)
        self.twin = _SlowPath(module, mt.multi_head_attention_forward)

    def __call__(self, state, query, key, value, key_padding_mask=None, need_weights=True,
                 attn_mask=None, average_attn_weights=True, is_causal=False):
        if torch.is_grad_enabled():
            return self.twin(state, query, key, value, key_padding_mask, need_weights,
                             attn_mask, average_attn_weights, is_causal)
        arrays = {}      # one array per tensor: self-attention stays one input

        def array(t):
            if t is None:
                return None
            if id(t) not in arrays:
                arrays[id(t)] = _interop.to_numpy(t)   # (bfloat16 through its bits)
            return arrays[id(t)]

        dtype = _interop.dtype_name(query, "query")
        m = _myatt.MultiheadAttention._from_state(
            self.args, {"dtype": dtype}, {k: array(v) for k, v in state.items()}, self.modes)
        out, weights = m(array(query), array(key), array(value), array(key_padding_mask),
                         bool(need_weights), array(attn_mask), bool(average_attn_weights),
                         bool(is_causal))
        return (_interop.to_tensor(out, torch),
                None if weights is None else _interop.to_tensor(weights, torch))


class _ModuleCall:
    """module(**arguments) with the parameters and the mode it had at the call: a subclass
    of nn.MultiheadAttention with a forward of its own."""

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


_signatures: dict = {}


def _signature(cls):
    """inspect.signature of cls.forward, once per class."""
    sig = _signatures.get(cls)
    if sig is None:
        sig = _signatures[cls] = inspect.signature(cls.forward)
    return sig


def _arguments(module, args, kwargs):
    """(the call's arguments by name, as its forward binds them, or None; why not): a
    forward's **kwargs are its arguments too; its *args have no names to rerun it with."""
    sig = _signature(type(module))
    bound = sig.bind(module, *args, **kwargs)
    arguments = {}
    for i, (name, value) in enumerate(bound.arguments.items()):
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                return None, (f"{type(module).__name__}.forward takes *{name}: its call is not "
                              f"rerun")
        elif i:                                   # (the first is the module itself)
            arguments[name] = value
    return arguments, None


def record_mha(record, module, args, kwargs, output):
    if output is None:
        record.skip = "the call raised"
        return
    arguments, reason = _arguments(module, args, kwargs)
    if reason is not None:
        record.skip = reason
        return
    state = {k: v for k, v in module.state_dict(keep_vars=True).items()}
    tensors = tensors_in(arguments) + [v for v in state.values()]
    describe(record, tensors_in(arguments))
    reason = dtype_reason(tensors)
    if reason is None and module.training and module.dropout > 0:
        reason = ("dropout > 0 in training mode: torch and myatt draw different random masks "
                  "(validate the model in eval mode)")
    if reason is not None:
        record.skip = reason
        return
    outs = output if isinstance(output, tuple) else (output,)
    record.select = (0, 1) if isinstance(outs[1], torch.Tensor) else (0,)
    record.names = ("attn_output", "attn_weights")[:len(record.select)]
    if type(module).forward is torch.nn.MultiheadAttention.forward:
        record.torch_fn = _SlowPath(module, F.multi_head_attention_forward)
        record.myatt_fn = _MyattModule(module)
    else:
        record.torch_fn = _ModuleCall(module, module.training, on_myatt=False)
        record.myatt_fn = _ModuleCall(module, module.training, on_myatt=True)
    grads = [(n, n) for n in ("query", "key", "value")
             if isinstance(arguments.get(n), torch.Tensor) and arguments[n].requires_grad]
    seen = set()
    record.grads = tuple((n, k) for n, k in grads
                         if not (id(arguments[n]) in seen or seen.add(id(arguments[n])))) + tuple(
        (n, ("state", n)) for n, v in state.items() if v.requires_grad)
    theirs = tuple(outs[i] for i in record.select)
    watch(record, list(theirs), later=False)
    settle(record, (), {**arguments, "state": state}, theirs)
