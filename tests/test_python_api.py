"""Issue 6: signatures for help()/inspect/Jupyter, pickle and copy, from_torch, _repr_html_."""
import abc
import copy
import gc
import inspect
import pickle
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest
import torch

import myatt
import oracle
from oracle import assert_matches, run, torch_dtype

SIZES = (3, 4, 5, 6, 7)   # query_size, key_size, value_size1, value_size2, output_size


def params(obj):
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(obj).parameters.values()]


def assert_same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], strict=True)


def torch_seed_module(dtype, sizes=SIZES, seed=5):
    torch.manual_seed(seed)
    return oracle.MyAtt(*sizes).to(torch_dtype(dtype))


# --------------------------------------------------------------------------- #
# Signatures: inspect.signature works everywhere (help(), Jupyter's ? and completion)
# --------------------------------------------------------------------------- #
E = inspect.Parameter.empty


def test_type_signatures():
    assert params(myatt.Linear) == [
        ("in_features", "POSITIONAL_OR_KEYWORD", E), ("out_features", "POSITIONAL_OR_KEYWORD", E),
        ("bias", "POSITIONAL_OR_KEYWORD", True), ("dtype", "KEYWORD_ONLY", "float32")]
    assert params(myatt.MyAtt) == [
        (n, "POSITIONAL_OR_KEYWORD", E) for n in
        ("query_size", "key_size", "value_size1", "value_size2", "output_size")
    ] + [("dtype", "KEYWORD_ONLY", "float32")]


def test_signature_defaults_are_what_the_constructor_does():
    """The text signature's default dtype is the constructor's real default."""
    for t, args in ((myatt.Linear, (2, 3)), (myatt.MyAtt, SIZES)):
        default = inspect.signature(t).parameters["dtype"].default
        assert t(*args).dtype == np.dtype(default) == np.float32
        bound = inspect.signature(t).bind(*args, dtype="float64")   # binds like a call
        assert t(*bound.args, **bound.kwargs).dtype == np.float64


def test_call_signatures_on_instances():
    """inspect.signature(m) (Jupyter's `m?`) shows the call's own arguments."""
    assert params(myatt.Linear(2, 3)) == [("input", "POSITIONAL_OR_KEYWORD", E)]
    assert params(myatt.MyAtt(*SIZES)) == [(n, "POSITIONAL_OR_KEYWORD", E) for n in "QKV"]


@pytest.mark.parametrize("name", sorted(set(myatt.__all__) - {"Comparison", "ResultComparison"}))
def test_every_public_function_has_a_signature_and_doc(name):
    obj = getattr(myatt, name)
    inspect.signature(obj)
    assert inspect.getdoc(obj)
    # one line: Sphinx's autodoc (the API page) splits a text signature at its newlines
    assert "\n" not in (getattr(obj, "__text_signature__", None) or "")


@pytest.mark.parametrize("cls", [myatt.Linear, myatt.MyAtt, myatt.MultiheadAttention])
def test_every_method_has_a_signature_and_doc(cls):
    names = [n for n in dir(cls) if not n.startswith("__") or n in ("__call__", "__reduce__")]
    for n in names:
        attr = getattr(cls, n)
        if callable(attr):
            inspect.signature(attr)
            assert "\n" not in (getattr(attr, "__text_signature__", None) or ""), n
        assert inspect.getdoc(attr), n


def test_keyword_arguments_match_the_signatures(rng):
    lin = myatt.Linear(3, 2)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_array_equal(lin(input=x), lin.forward(input=x))
    m = myatt.MyAtt(*SIZES)
    Q, K, V = (rng.standard_normal(s) for s in ((1, 2, 3), (1, 2, 4), (1, 5, 6)))
    a, b = m(Q=Q, K=K, V=V), m.forward(Q=Q, K=K, V=V)
    for x1, x2 in zip(a, b):
        np.testing.assert_array_equal(x1, x2)


def test_help_renders():
    import pydoc

    text = pydoc.render_doc(myatt.MyAtt, renderer=pydoc.plaintext)
    assert "from_torch" in text and "dtype='float32'" in text


# --------------------------------------------------------------------------- #
# repr and _repr_html_
# --------------------------------------------------------------------------- #
def test_repr_html_tables(dtype):
    m = myatt.MyAtt(*SIZES, dtype=dtype)
    h = m._repr_html_()
    assert h.startswith("<div>") and "<table" in h and repr(m) in h
    for key, p in m.state_dict().items():
        assert f"<code>{key}</code>" in h and str(list(p.shape)) in h
    total = sum(p.size for p in m.state_dict().values())
    assert f"{total:,}" in h
    lin = myatt.Linear(3, 2, bias=False)
    assert "<code>weight</code>" in lin._repr_html_() and "<code>bias</code>" not in lin._repr_html_()
    assert "<table" in myatt.MyAtt(0, 0, 0, 0, 0)._repr_html_()   # empty parameters


# --------------------------------------------------------------------------- #
# pickle, copy.copy, copy.deepcopy
# --------------------------------------------------------------------------- #
def copies(obj):
    yield "copy", copy.copy(obj)
    yield "deepcopy", copy.deepcopy(obj)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        yield f"pickle{protocol}", pickle.loads(pickle.dumps(obj, protocol=protocol))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_copies(rng, dtype, bias):
    lin = myatt.Linear(5, 3, bias=bias, dtype=dtype)
    x = rng.standard_normal((4, 5))
    for how, c in copies(lin):
        assert type(c) is myatt.Linear, how
        assert repr(c) == repr(lin) and c.dtype == dtype
        assert_same_weights(c, lin)
        np.testing.assert_array_equal(c(x), lin(x))
        c.weight += 1.0   # independent of the original
        assert not np.array_equal(c.weight, lin.weight)


def test_myatt_copies(rng, dtype):
    m = myatt.MyAtt(*SIZES, dtype=dtype)
    Q, K, V = (rng.standard_normal(s) for s in ((1, 2, 3), (1, 2, 4), (1, 5, 6)))
    for how, c in copies(m):
        assert type(c) is myatt.MyAtt, how
        assert repr(c) == repr(m)
        assert_same_weights(c, m)
        for a, b in zip(c(Q, K, V), m(Q, K, V)):
            np.testing.assert_array_equal(a, b)
        assert c.attn is not m.attn and c.attn.dtype == dtype
        c.attn.bias[:] = 0   # the copy's sub-modules are live and its own
        assert np.all(c.state_dict()["attn.bias"] == 0) and np.any(m.attn.bias != 0)


def test_copies_of_empty_modules():
    for obj in (myatt.MyAtt(0, 0, 0, 0, 0), myatt.Linear(0, 0)):
        for how, c in copies(obj):
            assert repr(c) == repr(obj), how


def test_copies_do_not_draw_from_the_generator():
    """Unpickling, copying and from_torch leave myatt's generator where it was."""
    myatt.manual_seed(11)
    first = myatt.MyAtt(*SIZES)
    second = myatt.MyAtt(*SIZES)   # the weights the next constructor gives
    myatt.manual_seed(11)
    again = myatt.MyAtt(*SIZES)
    list(copies(again))
    myatt.MyAtt.from_torch(torch_seed_module(np.float32))
    myatt.Linear.from_torch(torch.nn.Linear(3, 4))
    assert_same_weights(again, first)
    assert_same_weights(myatt.MyAtt(*SIZES), second)


class _SlowNew(myatt.Linear):
    """A subclass whose __new__ lets other threads run (while `gate` is set)."""
    gate = None

    def __new__(cls, *args, **kwargs):
        if cls.gate is not None:
            started, go = cls.gate
            started.set()
            go.wait(timeout=30)
        return super().__new__(cls, *args, **kwargs)


def test_copy_lets_other_threads_draw():
    """While one thread unpickles (its subclass __new__ releasing the GIL), another
    thread's constructor draws from the generator as usual, and the draws are not
    undone afterwards: every constructor gets the weights of the sequential order."""
    blob = pickle.dumps(_SlowNew(3, 4))
    myatt.manual_seed(5)
    want = [myatt.Linear(3, 4) for _ in range(2)]
    myatt.manual_seed(5)
    started, go = threading.Event(), threading.Event()
    _SlowNew.gate = (started, go)
    got = {}
    try:
        t = threading.Thread(target=lambda: got.setdefault("copy", pickle.loads(blob)))
        t.start()
        assert started.wait(timeout=30)
        got["other"] = myatt.Linear(3, 4)   # runs while the unpickling thread waits
        go.set()
        t.join(timeout=30)
    finally:
        _SlowNew.gate = None
    assert type(got["copy"]) is _SlowNew
    assert_same_weights(got["other"], want[0])
    assert_same_weights(myatt.Linear(3, 4), want[1])


class LinearSub(myatt.Linear):
    pass


def test_subclass_copies_keep_type_and_attributes():
    s = LinearSub(3, 2, dtype=np.float64)
    s.note = "kept"
    for how, c in copies(s):
        assert type(c) is LinearSub and c.note == "kept", how
        assert_same_weights(c, s)


class Locked(myatt.Linear):
    """A subclass that holds what cannot be pickled and says so in __getstate__."""
    def __init__(self, n):
        super().__init__(n, n)
        self.lock, self.note = threading.Lock(), "kept"

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "lock"}

    def __setstate__(self, state):
        self.__dict__.update(state, lock=threading.Lock())


class Slotted(myatt.MyAtt):
    __slots__ = ("extra",)


def test_subclass_copies_keep_getstate_and_slots():
    """Copies and pickles keep what any Python object's keep: a subclass's own
    __getstate__ (it read __dict__ itself: a lock failed to pickle) and its __slots__
    (lost before)."""
    s = Slotted(*SIZES)
    s.extra = [1]
    for obj, check in ((Locked(3), lambda c: c.note == "kept" and c.lock is not None),
                       (s, lambda c: c.extra == [1])):
        for how, c in copies(obj):
            assert type(c) is type(obj) and check(c), how
            assert_same_weights(c, obj)


class Block(myatt.MultiheadAttention):
    """torch's way: a constructor of its own that calls super().__init__."""
    def __init__(self, width, scale=2.0):
        super().__init__(width, 2, batch_first=True, dtype=np.float64)
        self.scale = scale


class Square(myatt.Linear):
    def __init__(self, n):
        super().__init__(n, n, bias=False)


class Seed(myatt.MyAtt):
    def __init__(self):
        super().__init__(*SIZES)


def test_subclass_init_builds_the_module():
    """A subclass whose __init__ has its own signature and calls super().__init__(...) gets
    the module those arguments build, with the weights the constructor draws after the same
    seed (drawn once: torch's, tested with the constructors); it pickles and copies."""
    pairs = [(lambda: Block(6), lambda: myatt.MultiheadAttention(6, 2, batch_first=True,
                                                                 dtype=np.float64)),
             (lambda: Square(5), lambda: myatt.Linear(5, 5, bias=False)),
             (Seed, lambda: myatt.MyAtt(*SIZES))]
    for ours, base in pairs:
        myatt.manual_seed(11)
        m, after = ours(), myatt.Linear(3, 3)   # the next draws: the generator moved as much
        myatt.manual_seed(11)
        assert_same_weights(m, base())
        assert_same_weights(after, myatt.Linear(3, 3))
        for how, c in copies(m):
            assert type(c) is type(m), how
            assert_same_weights(c, m)
    b = Block(4, scale=3.0)
    assert (b.embed_dim, b.batch_first, b.dtype, b.scale) == (4, True, np.float64, 3.0)
    assert all(c.scale == 3.0 for _, c in copies(b))


def test_init_builds_a_module_once():
    """__init__ on a built module is a RuntimeError and changes nothing (a kernel may be
    reading its parameters without the GIL); a subclass's super().__init__ with bad
    arguments raises as the constructor does; one that never calls it is refused by every
    entry that reads the parameters, as torch's module is unusable before
    Module.__init__."""
    for m, args in ((myatt.Linear(3, 2), (4, 4)), (myatt.MyAtt(*SIZES), SIZES),
                    (myatt.MultiheadAttention(4, 2), (8, 2)), (Square(3), (3,))):
        before = m.state_dict()
        with pytest.raises(RuntimeError, match="built already"):
            m.__init__(*args)
        for key, value in m.state_dict().items():
            np.testing.assert_array_equal(value, before[key])

    class Bad(myatt.MultiheadAttention):
        def __init__(self):
            super().__init__(6, 4)

    with pytest.raises(ValueError, match="divisible"):
        Bad()

    class Forgot(myatt.Linear):
        def __init__(self, n):
            self.n = n

    f = Forgot(3)
    assert (f.in_features, f.out_features) == (0, 0)
    for call in (lambda: f(np.ones(3)), lambda: f.forward(np.ones(0)),
                 lambda: f.backward(np.ones(0), np.ones(0)),
                 lambda: f.load_state_dict(f.state_dict()),
                 lambda: myatt.vjp(f, np.ones(0))):
        with pytest.raises(RuntimeError, match=r"not built: .*Forgot.__init__ must call "
                                               r"super\(\).__init__"):
            call()

    class Index:   # an argument whose conversion builds the module first
        def __init__(self, hook):
            self.hook = hook

        def __index__(self):
            self.hook()
            return 3

    class Reentrant(myatt.Linear):
        def __init__(self):
            super().__init__(Index(lambda: myatt.Linear.__init__(self, 5, 5)), 4)

    with pytest.raises(RuntimeError, match="built already"):
        Reentrant()


def test_subclass_new_builds_and_abstract_subclasses_refused():
    """A subclass with a __new__ of its own builds there (with the arguments it passes on),
    whatever its __init__ does; an abstract one cannot be instantiated, as object's."""
    class Built(myatt.Linear):
        def __new__(cls, n, scale=1.0):
            return super().__new__(cls, n, n)

        def __init__(self, n, scale=1.0):
            self.scale = scale

    b = Built(3, scale=2.0)
    assert (b.in_features, b.out_features, b.scale) == (3, 3, 2.0)

    class Abstract(myatt.MultiheadAttention, abc.ABC):
        @abc.abstractmethod
        def forward(self, x):
            ...

    with pytest.raises(TypeError, match="abstract class Abstract .* 'forward'"):
        Abstract(4, 2)


def test_deepcopy_memo_keeps_identity():
    m = myatt.MyAtt(*SIZES)
    a, b = copy.deepcopy([m, m])
    assert a is b and a is not m


# --------------------------------------------------------------------------- #
# from_torch
# --------------------------------------------------------------------------- #
def test_myatt_from_torch(rng, dtype):
    t = torch_seed_module(dtype)
    m = myatt.MyAtt.from_torch(t)
    assert type(m) is myatt.MyAtt and m.dtype == dtype
    assert (m.query_size, m.key_size, m.value_size1, m.value_size2, m.output_size) == SIZES
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k], v.numpy(), strict=True)
    Q, K, V = (rng.standard_normal(s).astype(dtype) for s in ((1, 2, 3), (1, 2, 4), (1, 5, 6)))
    out, w = m(Q, K, V)
    t_out, t_w = run(t, Q, K, V, dtype=dtype)
    assert_matches(out, t_out)
    assert_matches(w, t_w)


def test_from_torch_copies(dtype):
    """The weights are copied: changing either side afterwards leaves the other alone."""
    t = torch_seed_module(dtype)
    m = myatt.MyAtt.from_torch(t)
    before = t.attn.weight.detach().clone()
    m.attn.weight += 1
    torch.testing.assert_close(t.attn.weight.detach(), before)
    with torch.no_grad():
        t.attn_combine.bias.zero_()
    assert np.any(m.attn_combine.bias != 0)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_from_torch(rng, dtype, bias):
    torch.manual_seed(3)
    t = torch.nn.Linear(6, 4, bias=bias, dtype=torch_dtype(dtype))
    lin = myatt.Linear.from_torch(t)
    assert (lin.in_features, lin.out_features, lin.dtype) == (6, 4, dtype)
    assert (lin.bias is None) == (not bias)
    x = rng.standard_normal((3, 6)).astype(dtype)
    assert_matches(lin(x), run(t, x, dtype=dtype))


def test_from_torch_subclass():
    lin = LinearSub.from_torch(torch.nn.Linear(2, 3))
    assert type(lin) is LinearSub


@pytest.mark.filterwarnings("ignore:Complex modules are a new feature")
@pytest.mark.parametrize("tdtype", [torch.complex64, torch.complex128])
def test_from_torch_other_dtypes_raise(tdtype):
    """Linear and MyAtt hold half precision too (test_half.py), no other dtype."""
    with pytest.raises(TypeError, match="float32, float64, float16, bfloat16"):
        myatt.MyAtt.from_torch(oracle.MyAtt(*SIZES).to(tdtype))


def test_from_torch_wrong_modules_raise():
    with pytest.raises(TypeError, match="torch.nn.Linear"):
        myatt.Linear.from_torch(torch.nn.ReLU())
    with pytest.raises(TypeError, match="query_size"):
        myatt.MyAtt.from_torch(torch.nn.Linear(2, 3))
    with pytest.raises(TypeError):
        myatt.MyAtt.from_torch(np.zeros(3))
    t = oracle.MyAtt(*SIZES)
    t.query_size = 4   # attributes that do not fit the weights
    with pytest.raises(ValueError, match="shape"):
        myatt.MyAtt.from_torch(t)
    t = oracle.MyAtt(*SIZES)
    t.attn_combine.double()
    with pytest.raises(TypeError, match="different dtypes"):
        myatt.MyAtt.from_torch(t)


def test_from_torch_extra_parameters_are_refused():
    t = oracle.MyAtt(*SIZES)
    t.extra = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(KeyError, match="extra"):
        myatt.MyAtt.from_torch(t)


def test_import_imports_neither_torch_nor_matplotlib():
    code = ("import sys, myatt; m = myatt.MyAtt(2, 2, 2, 2, 2); m._repr_html_(); "
            "import pickle; pickle.loads(pickle.dumps(m)); "
            "print(sorted(k for k in ('torch', 'matplotlib') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("base, args, call", [
    (myatt.Linear, (64, 64), lambda m, x: m(x)),
    (myatt.MyAtt, (64, 64, 8, 8, 4), lambda m, x: m(np.ones((1, 64, 64), np.float32), x,
                                                     np.ones((1, 8, 8), np.float32))),
    (myatt.MyAtt, (64, 64, 8, 8, 4), lambda m, x: myatt.vjp(m, np.ones((1, 64, 64)), x,
                                                              np.ones((1, 8, 8)))),
    (myatt.MyAtt, (64, 64, 8, 8, 4),
     lambda m, x: m.backward(x, x, np.ones((1, 8, 8)), np.ones((1, 64, 4)))),
    (myatt.MultiheadAttention, (64, 8), lambda m, x: m(x, x, x, need_weights=False)),
    (myatt.MultiheadAttention, (64, 8), lambda m, x: m.load_state_dict({"in_proj_weight": x})),
])
def test_an_argument_building_the_module_mid_call(base, args, call):
    """An unbuilt subclass whose call's argument builds it (with another dtype) while the
    call converts it: refused from the start, never half the old module and half the new
    (the float64 module read float32 inputs cast for the placeholder: a crash)."""
    class Sub(base):
        def __init__(self):
            pass

    m = Sub()

    class Builds:
        def __array__(self, dtype=None, copy=None):
            base.__init__(m, *args, dtype="float64")
            return np.ones((1, 64, 64), np.float32)

    with pytest.raises(RuntimeError, match="not built"):
        call(m, Builds())


def test_subclass_weak_references():
    """Python subclasses are weakly referenceable, as torch's modules (Python classes) are:
    a weakref's callback runs when the module goes, also one the module holds itself, and
    a subclass may declare the __weakref__ slot."""
    class Slots(myatt.Linear):
        __slots__ = ("__weakref__",)

    class Holds(myatt.MultiheadAttention):
        def __init__(self, gone):
            super().__init__(8, 2)
            self.ref = weakref.ref(self, gone.append)

    gone = []
    for make in (lambda: Slots(2, 3), lambda: Holds(gone), lambda: Square(3)):
        m = make()
        ref = weakref.ref(m, gone.append)
        cache = weakref.WeakKeyDictionary({m: 1})
        assert ref() is m and len(cache) == 1
        del m
        gc.collect()
        assert ref() is None and len(cache) == 0
    assert len(gone) == 4


def test_vjp_of_a_module_built_while_its_arguments_are_parsed():
    """The pullback takes the module's dtype once the forward ran: a keyword whose
    comparison builds the placeholder as float64 gave float32 reads of float64 arrays
    (gradients of 1e33; a reviewer session's find)."""
    class Lazy(myatt.Linear):
        def __init__(self):
            pass

    m = Lazy()

    class Key(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            if m.in_features == 0:
                myatt.Linear.__init__(m, 3, 4, dtype=np.float64)
            return str.__eq__(self, other)

    x = np.arange(6.0).reshape(2, 3)
    y, pullback = myatt.vjp(m, **{Key("input"): x})
    assert y.dtype == np.float64
    for key, value in pullback(np.ones((2, 4))).items():
        np.testing.assert_array_equal(value, m.backward(x, np.ones((2, 4)))[key])
