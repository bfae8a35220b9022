"""myatt.SGD and myatt.Adam against torch.optim.SGD / Adam over many steps.

Both sides start from the same parameters and see the same gradients; after every step
the parameters must agree at assert_close's default tolerances.  A second test trains a
MyAtt and the seed's torch module side by side, each with its own gradients.
"""
import numpy as np
import pytest
import torch

import myatt
from oracle import assert_matches, to_torch, torch_dtype, torch_myatt
from test_myatt import inputs

STEPS = 100

SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
    dict(lr=0.01, maximize=True, momentum=0.5),
]
ADAM_CASES = [
    dict(lr=1e-2),
    dict(lr=1e-3, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=1e-2, weight_decay=0.05),
    dict(lr=1e-2, weight_decay=0.05, decoupled_weight_decay=True),
    dict(lr=1e-2, amsgrad=True),
    dict(lr=1e-2, maximize=True, betas=(0.3, 0.9)),
    dict(lr=1e-2, betas=(0.6, 0.999)),   # lerp weight 0.4: still the small-weight branch
    dict(lr=1e-2, betas=(0.2, 0.999)),   # lerp weight 0.8: the other branch
]


def run_both(rng, dtype, ours_cls, torch_cls, kwargs):
    shapes = {"w": (7, 5), "b": (7,), "scalar_like": (1,)}
    params = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    t_params = {k: torch.from_numpy(v.copy()).requires_grad_(True) for k, v in params.items()}
    opt = ours_cls(params, **kwargs)
    t_opt = torch_cls(list(t_params.values()), foreach=False, **kwargs)
    for _ in range(STEPS):
        grads = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
        opt.step(grads)
        for k, p in t_params.items():
            p.grad = torch.from_numpy(grads[k].copy())
        t_opt.step()
        for k in params:
            assert_matches(params[k], t_params[k])


@pytest.mark.parametrize("kwargs", SGD_CASES, ids=str)
def test_sgd_matches_torch(rng, dtype, kwargs):
    run_both(rng, dtype, myatt.SGD, torch.optim.SGD, kwargs)


@pytest.mark.parametrize("kwargs", ADAM_CASES, ids=str)
def test_adam_matches_torch(rng, dtype, kwargs):
    run_both(rng, dtype, myatt.Adam, torch.optim.Adam, kwargs)


@pytest.mark.parametrize("opt_name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9)),
                                             ("Adam", dict(lr=1e-2))])
def test_training_myatt_side_by_side(rng, dtype, opt_name, kwargs):
    """m.backward + myatt optimiser == loss.backward() + torch.optim, step after step."""
    sizes = (6, 5, 8, 7, 4)
    m = myatt.MyAtt(*sizes, dtype=dtype)
    t = torch_myatt(m)
    opt = getattr(myatt, opt_name)(m, **kwargs)
    t_opt = getattr(torch.optim, opt_name)(t.parameters(), foreach=False, **kwargs)
    for step in range(30):
        Q, K, V = inputs(rng, sizes, 9, dtype)
        target = rng.standard_normal((1, 9, 4)).astype(dtype)
        out, attn = m(Q, K, V)
        grads = m.backward(Q, K, V, (2 / out.size) * (out - target))     # mean squared error
        opt.step(grads)
        t_opt.zero_grad()
        t_out, _ = t(*(to_torch(x, dtype) for x in (Q, K, V)))
        torch.nn.functional.mse_loss(t_out, to_torch(target, dtype)).backward()
        t_opt.step()
        for k, v in t.state_dict().items():
            assert_matches(m.state_dict()[k], v)


def test_module_params_are_live(rng):
    m = myatt.Linear(3, 2)
    opt = myatt.SGD(m, lr=0.5)
    w0, b0 = m.weight.copy(), m.bias.copy()
    opt.step({"weight": np.ones((2, 3)), "bias": np.ones(2)})
    np.testing.assert_array_equal(m.weight, w0 - np.float32(0.5))
    np.testing.assert_array_equal(m.bias, b0 - np.float32(0.5))
    opt.step({"weight": np.ones((2, 3))})          # a missing key: that parameter is skipped
    np.testing.assert_array_equal(m.bias, b0 - np.float32(0.5))


def test_bad_arguments():
    m = myatt.Linear(3, 2)
    with pytest.raises(ValueError):
        myatt.SGD(m, lr=-1)
    with pytest.raises(ValueError):
        myatt.SGD(m, lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        myatt.Adam(m, betas=(1.0, 0.9))
    for cls, name in [(myatt.SGD, "lr"), (myatt.SGD, "momentum"), (myatt.Adam, "lr"),
                      (myatt.Adam, "eps"), (myatt.Adam, "weight_decay")]:
        with pytest.raises(ValueError, match=f"^{name} must be >= 0, got nan$"):
            cls(m, **{name: float("nan")})
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0, 1\), got nan"):
        myatt.Adam(m, betas=(0.9, float("nan")))
    for betas in [(0.9,), (0.9, 0.99, 0.999)]:
        with pytest.raises(ValueError, match="betas must be two real numbers"):
            myatt.Adam(m, betas=betas)
    with pytest.raises(TypeError):
        myatt.SGD({"w": [1.0, 2.0]})
    with pytest.raises(TypeError):
        myatt.SGD(42)
    for cls, kwargs, exc, match in [
            (myatt.SGD, dict(lr=True), TypeError, "lr must be a real number, got True"),
            (myatt.SGD, dict(lr=None), TypeError, "lr must be a real number, got None"),
            (myatt.SGD, dict(lr="0.1"), TypeError, "lr must be a real number"),
            (myatt.SGD, dict(momentum=np.array([0.1, 0.2])), TypeError, "momentum must be"),
            (myatt.SGD, dict(dampening="x"), TypeError, "dampening must be"),
            (myatt.SGD, dict(nesterov="yes"), TypeError, "nesterov must be a bool"),
            (myatt.SGD, dict(maximize=2), TypeError, "maximize must be a bool"),
            (myatt.SGD, dict(lr=np.array([0.1])), TypeError, "lr must be a real number"),
            (myatt.SGD, dict(lr=torch.tensor(True)), TypeError, "lr must be a real number"),
            (myatt.Adam, dict(betas="ab"), TypeError, r"betas\[0\] must be a real number"),
            (myatt.Adam, dict(betas=0.9), ValueError, "betas must be two real numbers"),
            (myatt.Adam, dict(amsgrad="no"), TypeError, "amsgrad must be a bool"),
            (myatt.Adam, dict(decoupled_weight_decay=None), TypeError,
             "decoupled_weight_decay must be a bool")]:
        with pytest.raises(exc, match=match):
            cls(m, **kwargs)
    # taken, as torch takes them: NumPy scalars, 0-d arrays and tensors, flags 0 and 1, and
    # betas from any iterable (kept: checked again at each step)
    for kwargs in (dict(lr=np.float32(0.1), nesterov=np.bool_(False)), dict(lr=np.array(0.1)),
                   dict(lr=torch.tensor(0.1)), dict(momentum=0.9, nesterov=1)):
        myatt.SGD(m, **kwargs).step(m.backward(np.ones((1, 3)), np.ones((1, 2))))
    opt = myatt.Adam(m, betas=iter([0.9, 0.99]), amsgrad=0)
    opt.step(m.backward(np.ones((1, 3)), np.ones((1, 2))))
    assert opt.betas == (0.9, 0.99)
    with pytest.raises(TypeError, match=r"params\['weight'\] must be a writeable "
                                        r"float16, bfloat16, float32 or float64 ndarray .*got Parameter"):
        myatt.SGD(torch.nn.Linear(3, 2))
    w = np.ones((2, 3))
    with pytest.raises(ValueError, match=r"params\['a'\] and params\['b'\] share memory"):
        myatt.SGD({"a": w, "b": w[0]})
    myatt.SGD({"a": w[:, ::2], "b": w[:, 1::2]})   # interleaved, not shared
    opt = myatt.Adam(m)
    with pytest.raises(ValueError, match="weight"):
        opt.step({"weight": np.ones((3, 2))})
    with pytest.raises(TypeError, match="weight"):
        opt.step({"weight": np.ones((2, 3), dtype=complex)})
    assert "Adam(lr=0.001" in repr(opt)
    w0 = m.weight.copy()
    opt.step({"weight": torch.ones(2, 3, requires_grad=True)})   # taken as the C glue takes it
    assert (m.weight != w0).all()


def test_failed_step_changes_nothing():
    m = myatt.Linear(3, 2)
    opt = myatt.SGD(m, lr=0.5)
    w0, b0 = m.weight.copy(), m.bias.copy()
    with pytest.raises(ValueError, match="bias"):
        opt.step({"weight": np.ones((2, 3)), "bias": np.ones(3)})
    opt.lr = None   # a setting changed since construction: checked before anything moves
    with pytest.raises(TypeError, match="lr must be a real number"):
        opt.step({"weight": np.ones((2, 3))})
    np.testing.assert_array_equal(m.weight, w0)
    np.testing.assert_array_equal(m.bias, b0)


@pytest.mark.parametrize("cls, kwargs", [(myatt.SGD, dict(lr=1.0, momentum=0.9)),
                                         (myatt.Adam, dict(lr=1.0))])
@pytest.mark.filterwarnings("error")
def test_overflow_neither_raises_nor_stops_a_step(cls, kwargs):
    """An overflow gives inf as in torch, also with warnings as errors or np.seterr(all=
    'raise'): a step that raised there left one parameter updated, the next not, and the
    optimiser's state moved (a reviewer session's find)."""
    params = {"a": np.ones(3, np.float32), "b": np.full(3, 3e38, np.float32)}
    tparams = {k: torch.from_numpy(v.copy()).requires_grad_() for k, v in params.items()}
    grads = {"a": np.ones(3, np.float32), "b": np.full(3, 3e38, np.float32)}
    opt, topt = cls(params, **kwargs), getattr(torch.optim, cls.__name__)(
        tparams.values(), foreach=False, **kwargs)
    for t, (k, g) in zip(tparams.values(), grads.items()):
        t.grad = torch.from_numpy(g)
    with np.errstate(all="raise"):
        for _ in range(2):
            opt.step(grads)
            topt.step()
    for k, t in tparams.items():
        torch.testing.assert_close(torch.from_numpy(params[k]), t.detach())
    assert any(np.isinf(a).any() for a in (params["b"], *opt.state["b"].values())
               if isinstance(a, np.ndarray))   # it did overflow


def test_takes_a_multihead_attention_pullback(rng):
    """The dict of a MultiheadAttention pullback (query, key and value beside the
    parameters' gradients) goes straight to step(), as MyAtt's and Linear's do."""
    m = myatt.MultiheadAttention(8, 2)
    x = rng.standard_normal((5, 3, 8)).astype(np.float32)
    (out, _), pullback = myatt.vjp(m, x, x, x)
    before = m.state_dict()
    myatt.Adam(m, lr=1e-2).step(pullback(np.ones_like(out)))
    assert all((m.state_dict()[k] != v).any() for k, v in before.items())


@pytest.mark.parametrize("cls", [myatt.SGD, myatt.Adam])
def test_unknown_key_is_an_error(rng, cls):
    """A misspelt key changed nothing and said nothing; torch's optimisers never see
    such a key (gradients live on the parameters). KeyError, naming the key, the
    parameters and the likely one, and no parameter changes."""
    m = myatt.MyAtt(4, 4, 6, 5, 3)
    opt = cls(m, lr=0.1)
    before = {k: v.copy() for k, v in m.state_dict().items()}
    g = np.ones_like(m.attn.weight)
    with pytest.raises(KeyError) as e:
        opt.step({"attn_combine.bias": np.ones(3), "atn.weight": g})
    msg = str(e.value)
    assert "'atn.weight'" in msg and "did you mean 'attn.weight'?" in msg
    assert all(repr(k) in msg for k in before)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    # backward()'s input gradients beside the parameters' are not parameters: ignored
    Q, K, V = rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 2, 4)), \
        rng.standard_normal((1, 6, 5))
    out, _ = m(Q, K, V)
    grads = m.backward(Q, K, V, np.ones_like(out))
    assert {"Q", "K", "V"} <= set(grads)
    opt.step(grads)
    lin = myatt.Linear(3, 2)
    x = rng.standard_normal((2, 3))
    cls(lin).step(lin.backward(x, np.ones((2, 2))))   # 'input' beside weight and bias
    with pytest.raises(KeyError, match="'w'"):
        cls(lin).step({"w": np.ones((2, 3))})
