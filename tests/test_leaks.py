"""No leaks: every entry point, on its success and its error paths, called thousands of
times, leaves the reference counts of its inputs and results as they were and grows
neither the memory tracemalloc traces nor the process's resident size.

Kernel workspaces (packed GEMM panels, MyAtt's row block) go through the kernels'
allocator hook, which the module points at PyMem_RawMalloc: tracemalloc sees them
(test_tracemalloc_sees_kernel_workspaces), so a leaked workspace would show here.
"""
import gc
import os
import pickle
import sys
import tracemalloc

import numpy as np
import pytest

import myatt
from entry_points import ENTRY_POINTS, SMALL, invoke, sizes

AxisError = getattr(np, "exceptions", np).AxisError   # numpy.exceptions: NumPy >= 1.25

N_CALLS = 2000          # calls per case for the reference counts
N_TRACED = 1000         # calls per case under tracemalloc (slower)
N_RSS = 3000            # calls per case for the resident size


def _arr(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype) / 4


class Inputs:
    """Everything the cases below call with, made once so that reference counts of the
    inputs can be compared before and after. `s`: the sizes of the registry's calls."""

    def __init__(self, s=SMALL):
        self.x = _arr(6, 24)
        self.x64 = _arr(6, 24, dtype=np.float64)
        self.xi = np.arange(6 * 24, dtype=np.int32).reshape(6, 24) % 5
        self.xf = np.asfortranarray(_arr(6, 24))
        self.x3 = _arr(2, 6, 24)[:, ::2]           # 3-D, not contiguous: copied by linear
        self.w = _arr(20, 24)
        self.b = _arr(20)
        self.bad_w = _arr(20, 23)
        self.cplx = np.ones((6, 24), np.complex64)
        self.a = _arr(3, 6, 24)
        self.m2 = _arr(3, 24, 5)
        self.lin = myatt.Linear(24, 20)
        self.lin64 = myatt.Linear(24, 20, dtype=np.float64)
        self.linnb = myatt.Linear(24, 20, bias=False)
        self.lin16 = myatt.Linear(24, 20, dtype=np.float16)
        self.mod = myatt.MyAtt(8, 6, 10, 12, 7)
        self.mod16 = myatt.MyAtt(8, 6, 10, 12, 7, dtype=np.float16)
        self.mha16 = myatt.MultiheadAttention(8, 2, add_bias_kv=True, dtype=np.float16)
        self.mha_x = _arr(5, 3, 8)
        self.mha_kpm = np.zeros((3, 5), bool)
        self.mha_kpm[:, 1] = True
        self.ga_mod = _arr(5, 10)
        self.Q = _arr(2, 5, 8)
        self.K = _arr(1, 5, 6)
        self.V = _arr(1, 10, 12)
        self.Vbad = _arr(1, 11, 12)
        self.sd = self.mod.state_dict()
        self.sd_bad = dict(self.sd, **{"attn.bias": np.zeros(3)})
        self.sd_lin = self.lin.state_dict()
        self.go = _arr(6, 20)
        self.gout = _arr(1, 5, 7)
        self.bmm_go = _arr(3, 6, 5)
        self.list_in = self.x.tolist()
        self.seed = 1234
        self.huge = 2 ** 40
        # every entry point of the registry: its object (float32), valid arrays, and for
        # its error cases a complex last argument and a last argument one larger
        self.ep = {}
        for ep in ENTRY_POINTS:
            good = ep.good(s)
            bad_dtype = bad_shape = None
            if ep.args:
                last = ep.args[-1].shape(s)
                bad_dtype = np.ones(last, np.complex64)
                if not ep.args[-1].ndim_free:
                    bad_shape = np.ones(tuple(d + 1 for d in last), np.float32)
            self.ep[ep.name] = (ep.target(s), good, bad_dtype, bad_shape)

    def objects(self):
        objs = [v for k, v in vars(self).items() if not isinstance(v, int) and k != "ep"]
        for obj, good, bad_dtype, bad_shape in self.ep.values():
            objs += [x for x in [obj, *good, bad_dtype, bad_shape] if x is not None]
        return objs


def _expect(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc:
        return None
    raise AssertionError(f"{fn!r} did not raise {exc.__name__}")


def _registry_cases(I):
    """Every entry point of the registry (entry_points.py): a valid call (id: its name),
    and with its last array argument complex (TypeError) or one larger in every
    dimension (ValueError), so that the arguments converted before it are released."""
    c = {}
    for ep in ENTRY_POINTS:
        obj, good, bad_dtype, bad_shape = I.ep[ep.name]
        c[ep.name] = lambda ep=ep, obj=obj, good=good: invoke(ep, obj, good)
        if bad_dtype is not None:
            c[f"{ep.name}-err-last-dtype"] = lambda ep=ep, obj=obj, a=good[:-1] + [bad_dtype]: \
                _expect(TypeError, invoke, ep, obj, a)
        if bad_shape is not None:
            c[f"{ep.name}-err-last-shape"] = lambda ep=ep, obj=obj, a=good[:-1] + [bad_shape]: \
                _expect(ValueError, invoke, ep, obj, a)
    return c


def _cases(I):
    """(id, thunk) pairs: every entry point, success and error paths: the registry's
    cases, and variants of them (dtypes, layouts, other errors)."""
    c = _registry_cases(I)
    variants = {
        # kernels
        "linear-nobias": lambda: myatt.linear(I.x, I.w),
        "linear-f64-promote": lambda: myatt.linear(I.x64, I.w, I.b),
        "linear-int-input": lambda: myatt.linear(I.xi, I.w, I.b),
        "linear-fortran": lambda: myatt.linear(I.xf, I.w, I.b),
        "linear-3d-strided": lambda: myatt.linear(I.x3, I.w, I.b),
        "linear-list": lambda: myatt.linear(I.list_in, I.w, I.b),
        "linear-err-shape": lambda: _expect(ValueError, myatt.linear, I.x, I.bad_w),
        "linear-err-dtype": lambda: _expect(TypeError, myatt.linear, I.cplx, I.w),
        "linear-err-bias": lambda: _expect(ValueError, myatt.linear, I.x, I.w, I.w),
        "linear-err-type": lambda: _expect(TypeError, myatt.linear, I.x, None),
        "softmax-dim0": lambda: myatt.softmax(I.x, 0),
        "softmax-last": lambda: myatt.softmax(I.a),
        "softmax-err-axis": lambda: _expect(AxisError, myatt.softmax, I.x, 5),
        "softmax-err-dim-type": lambda: _expect(TypeError, myatt.softmax, I.x, 1.0),
        "softmax-err-dtype": lambda: _expect(TypeError, myatt.softmax, I.cplx),
        "bmm-err-shape": lambda: _expect(ValueError, myatt.bmm, I.a, I.a),
        "bmm-err-ndim": lambda: _expect(ValueError, myatt.bmm, I.x, I.m2),
        "bmm-err-kw": lambda: _expect(TypeError, myatt.bmm, I.a, I.m2, bogus=1),
        # Linear
        "Linear-new": lambda: myatt.Linear(24, 20),
        "Linear-new-f64-nobias": lambda: myatt.Linear(5, 3, bias=False, dtype="float64"),
        "Linear-new-err-size": lambda: _expect(ValueError, myatt.Linear, -1, 3),
        "Linear-new-err-dtype": lambda: _expect(TypeError, myatt.Linear, 3, 3, dtype=np.int8),
        "Linear-new-err-memory": lambda: _expect(MemoryError, myatt.Linear, I.huge, I.huge),
        "Linear-forward-f64": lambda: I.lin64.forward(I.x),
        "Linear-call-nobias": lambda: I.linnb(I.x),
        "Linear-call-err": lambda: _expect(ValueError, I.lin, I.bad_w),
        "Linear-get-weight": lambda: I.lin.weight,
        "Linear-get-bias": lambda: I.lin.bias,
        "Linear-get-bias-none": lambda: I.linnb.bias,
        "Linear-get-sizes": lambda: (I.lin.in_features, I.lin.out_features, I.lin.dtype),
        "Linear-set-weight": lambda: setattr(I.lin, "weight", I.w),
        "Linear-set-bias": lambda: setattr(I.lin, "bias", I.b),
        "Linear-set-err-shape": lambda: _expect(ValueError, setattr, I.lin, "weight", I.bad_w),
        "Linear-set-err-dtype": lambda: _expect(TypeError, setattr, I.lin, "weight", I.cplx),
        "Linear-set-err-none": lambda: _expect(TypeError, setattr, I.linnb, "bias", I.b),
        "Linear-del-err": lambda: _expect(TypeError, delattr, I.lin, "weight"),
        "Linear-inplace": lambda: I.lin.weight.__imul__(1.0),
        "Linear-state_dict": lambda: I.lin.state_dict(),
        "Linear-load": lambda: I.lin.load_state_dict(I.sd_lin),
        "Linear-load-err": lambda: _expect(KeyError, I.lin.load_state_dict, {"weight": I.w}),
        "Linear-repr": lambda: repr(I.lin),
        # a half-precision Linear: its products are linear's and linear_backward's calls
        "Linear-new-f16": lambda: myatt.Linear(5, 3, dtype="float16"),
        "Linear-call-f16": lambda: I.lin16(I.x),
        "Linear-backward-f16": lambda: I.lin16.backward(I.x, I.go),
        "Linear-vjp-f16": lambda: myatt.vjp(I.lin16, I.x)[1](I.go),
        "Linear-load-f16": lambda: I.lin16.load_state_dict(I.sd_lin),
        # MyAtt
        "MyAtt-new": lambda: myatt.MyAtt(8, 6, 10, 12, 7),
        "MyAtt-new-err-size": lambda: _expect(ValueError, myatt.MyAtt, 8, 6, -10, 12, 7),
        "MyAtt-new-err-type": lambda: _expect(TypeError, myatt.MyAtt, 8, 6, 1.5, 12, 7),
        "MyAtt-new-err-memory": lambda: _expect(MemoryError, myatt.MyAtt, I.huge, 1, I.huge,
                                                1, 1),
        "MyAtt-forward-f64-inputs": lambda: I.mod.forward(I.Q.astype(np.float64), I.K, I.V),
        "MyAtt-call-err-shape": lambda: _expect(ValueError, I.mod, I.Q, I.K, I.Vbad),
        "MyAtt-call-err-dtype": lambda: _expect(TypeError, I.mod, I.Q, I.K, I.cplx),
        "MyAtt-call-err-nargs": lambda: _expect(TypeError, I.mod, I.Q, I.K),
        # a half-precision MyAtt: its ops are the kernel functions' calls
        "MyAtt-new-f16": lambda: myatt.MyAtt(8, 6, 10, 12, 7, dtype="float16"),
        "MyAtt-call-f16": lambda: I.mod16(I.Q, I.K, I.V),
        "MyAtt-backward-f16": lambda: I.mod16.backward(I.Q, I.K, I.V, I.gout, I.ga_mod),
        "MyAtt-vjp-f16": lambda: myatt.vjp(I.mod16, I.Q, I.K, I.V)[1](I.gout, I.ga_mod),
        "MyAtt-load-f16": lambda: I.mod16.load_state_dict(I.sd),
        # a half-precision MultiheadAttention: torch's ops, myatt's functions (_mha_half.py)
        "MHA-new-f16": lambda: myatt.MultiheadAttention(8, 2, add_bias_kv=True, dtype="float16"),
        "MHA-call-f16": lambda: I.mha16(I.mha_x, I.mha_x, I.mha_x, key_padding_mask=I.mha_kpm),
        "MHA-call-flash-f16": lambda: I.mha16(I.mha_x, I.mha_x, I.mha_x, need_weights=False),
        "MHA-vjp-f16": lambda: myatt.vjp(I.mha16, I.mha_x, I.mha_x, I.mha_x)[1](I.mha_x),
        "MHA-vjp-flash-f16": lambda: myatt.vjp(I.mha16, I.mha_x, I.mha_x, I.mha_x,
                                               need_weights=False)[1](I.mha_x),
        "MHA-call-err-f16": lambda: _expect(ValueError, I.mha16, I.mha_x, I.mha_x, I.x),
        "MyAtt-attrs": lambda: (I.mod.attn, I.mod.attn_combine, I.mod.query_size, I.mod.dtype),
        "MyAtt-sub-weight": lambda: I.mod.attn.weight,
        "MyAtt-state_dict": lambda: I.mod.state_dict(),
        "MyAtt-load": lambda: I.mod.load_state_dict(I.sd),
        "MyAtt-load-nonstrict": lambda: I.mod.load_state_dict({"attn.bias": I.sd["attn.bias"]},
                                                               strict=False),
        "MyAtt-load-err": lambda: _expect(ValueError, I.mod.load_state_dict, I.sd_bad),
        "MyAtt-load-err-type": lambda: _expect(TypeError, I.mod.load_state_dict, [1, 2]),
        "MyAtt-set-err": lambda: _expect(AttributeError, setattr, I.mod, "attn", I.lin),
        "MyAtt-repr": lambda: repr(I.mod),
        # modes (train and eval reach the sub-layers through myatt._interop.children)
        "MyAtt-modes": lambda: (I.mod.eval(), I.mod.train(mode=True), I.mod.training),
        "MyAtt-modes-err": lambda: _expect(TypeError, I.mod.train, 1),
        "Linear-training=": lambda: setattr(I.lin, "training", True),
        "Linear-training=-err": lambda: _expect(TypeError, setattr, I.lin, "training", 1),
        # module functions
        "manual_seed": lambda: myatt.manual_seed(I.seed),
        "manual_seed-err": lambda: _expect(TypeError, myatt.manual_seed, 1.5),
        "get_num_threads": lambda: myatt.get_num_threads(),
        "set_num_threads-err": lambda: _expect(ValueError, myatt.set_num_threads, 0),
        # the gradients' other errors
        "linear_backward-err": lambda: _expect(ValueError, myatt.linear_backward,
                                               I.x, I.x, I.w, I.b),
        "softmax_backward-err": lambda: _expect(ValueError, myatt.softmax_backward,
                                                I.x, I.w, 0),
        "Linear-backward-err": lambda: _expect(ValueError, I.lin.backward, I.x, I.x),
        "MyAtt-backward-err": lambda: _expect(ValueError, I.mod.backward, I.Q, I.K, I.V,
                                              I.go),
    }
    assert not set(c) & set(variants), "a variant named like a registry case"
    c.update(variants)
    if _picklable():
        c["pickle-MyAtt"] = lambda: pickle.loads(pickle.dumps(I.mod))
        c["pickle-Linear"] = lambda: pickle.loads(pickle.dumps(I.lin))
    return c




def _picklable():
    try:
        pickle.loads(pickle.dumps(myatt.Linear(2, 2)))
        return True
    except Exception:
        return False


CASE_IDS = list(_cases(Inputs()))


@pytest.fixture(autouse=True)
def _restore_threads():
    n = myatt.get_num_threads()
    yield
    myatt.set_num_threads(n)


@pytest.mark.parametrize("case", CASE_IDS)
def test_references(case):
    """Inputs keep their reference counts; every fresh result is referenced only by the
    caller (an ndarray result has no hidden owner)."""
    I = Inputs()
    fn = _cases(I)[case]
    for _ in range(10):
        fn()
    gc.collect()
    objs = I.objects() + [myatt.Linear, myatt.MyAtt, np.float32, np.float64,
                          AxisError]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(N_CALLS):
        fn()
    gc.collect()
    after = [sys.getrefcount(o) for o in objs]
    grown = [(type(o).__name__, b, a) for o, b, a in zip(objs, before, after) if a != b]
    assert not grown, f"reference counts changed (type, before, after): {grown}"

    # (counts taken outside `assert`: pytest's rewriting would hold a reference)
    r = fn()
    counts = {}
    if isinstance(r, np.ndarray) and r.base is None:
        counts["result"] = sys.getrefcount(r) - 1
    elif isinstance(r, tuple):
        for i in range(len(r)):
            if isinstance(r[i], np.ndarray) and r[i].base is None:
                counts[i] = sys.getrefcount(r[i]) - 1
    elif isinstance(r, dict):
        for key in list(r):
            if isinstance(r[key], np.ndarray) and r[key].base is None:
                counts[key] = sys.getrefcount(r[key]) - 1
    hidden = {k: n for k, n in counts.items() if n != 1}
    assert not hidden, f"results with owners besides the caller: {hidden}"


def test_tracemalloc():
    """Memory traced by tracemalloc (Python objects, NumPy data, kernel workspaces) does
    not grow over N_TRACED calls of any case: a leaked result of these sizes (>= 100
    bytes) would add >= 100 KB. One tracing session for all cases (starting and
    stopping tracemalloc is slow beside torch's heap). A case that grew is measured over
    a second N_TRACED calls, and counts only if it grows there too: a leak grows with every
    call, a one-time allocation does not (CI, Python 3.10 with NumPy 1.23: one block of
    2.5 MiB, kept, allocated during the 1000 calls of a MultiheadAttention pullback after
    other tests ran, and nothing over the next 1000)."""
    I = Inputs()
    cases = _cases(I)
    for fn in cases.values():
        for _ in range(5):
            fn()
    gc.collect()
    grown = {}
    tracemalloc.start()
    try:
        for name, fn in cases.items():
            for _ in range(20):
                fn()
            for window in range(2):
                gc.collect(0)
                start, _ = tracemalloc.get_traced_memory()
                for _ in range(N_TRACED):
                    fn()
                gc.collect(0)
                end, _ = tracemalloc.get_traced_memory()
                if end - start < 32 * 1024:
                    break
            else:
                grown[name] = end - start
    finally:
        tracemalloc.stop()
    assert not grown, f"traced memory grew (bytes over {N_TRACED} calls): {grown}"


# the registry's calls in test_resident_size: results of several KB each
RSS_SIZES = sizes(batch=(64,), in_f=24, out_f=20, b=3, n=64, m=24, p=64, shape=(64, 24),
                  S=256, q=8, k=6, v1=10, v2=12, o=7)


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_resident_size():
    """The process's resident size does not grow over N_RSS calls of every case with
    inputs large enough that one leaked result per call would add tens of MB."""
    I = Inputs(RSS_SIZES)
    I.x = _arr(64, 24)                       # linear result 64 x 20 x 4 = 5 KB per call
    I.Q = _arr(1, 256, 8)                    # MyAtt results 256 x (7 + 10) x 4 = 17 KB
    I.K = _arr(1, 256, 6)
    I.a = _arr(3, 64, 24)
    I.m2 = _arr(3, 24, 64)                   # bmm result 48 KB
    I.go = _arr(64, 20)                      # gradients shaped like the results above
    I.gout = _arr(1, 256, 7)
    I.ga_mod = _arr(256, 10)
    I.bmm_go = _arr(3, 64, 64)
    cases = _cases(I)
    big = [ep.name for ep in ENTRY_POINTS]           # every entry point, at RSS_SIZES
    big += ["linear-3d-strided", "softmax-dim0", "MyAtt-state_dict", "Linear-new",
            "MyAtt-new", "linear-err-dtype", "MyAtt-call-err-shape", "MyAtt-load",
            "Linear-new-err-memory"]
    big += [k for k in cases if ("backward" in k or "pickle" in k) and k not in big]
    fns = [cases[k] for k in big]

    def round_():
        for fn in fns:
            fn()

    for _ in range(200):
        round_()
    gc.collect()
    start = _rss()
    for _ in range(N_RSS):
        round_()
    gc.collect()
    growth = _rss() - start
    assert growth < 16 * 2 ** 20, f"resident size grew by {growth / 2**20:.1f} MiB"


def test_tracemalloc_sees_kernel_workspaces():
    """The kernels' workspaces are allocated through PyMem_RawMalloc, so tracemalloc
    counts them: the peak during a packed GEMM exceeds the result by the workspace.
    When the call returns, the large ones stay in the workspace cache (bounded: 256 MiB)
    and the next call reuses them; empty_cache() frees them.  On one thread: on two, the
    two bands' packed B blocks were made one after the other (one block, reused) or side
    by side, as the pool thread woke in time or not, and a call after a sequential one
    found one block where it needed two (a CI run on a loaded machine: 720 KiB more)."""
    x = _arr(128, 256, dtype=np.float64)
    w = _arr(2048, 256, dtype=np.float64)           # packed B: 256 x 504 x 8 = 1 MiB
    saved = myatt.get_num_threads()
    try:
        myatt.set_num_threads(1)
        myatt.linear(x, w)
        myatt.empty_cache()
        gc.collect()
        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out = myatt.linear(x, w)
        after, peak = tracemalloc.get_traced_memory()
        cached = after - before - out.nbytes
        del out
        tracemalloc.reset_peak()
        again = myatt.linear(x, w)                        # served from the cache
        after_again, peak_again = tracemalloc.get_traced_memory()
        myatt.empty_cache()
        emptied, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        myatt.set_num_threads(saved)
    workspace = peak - before - again.nbytes
    assert workspace >= 64 * 1024, f"tracemalloc saw only {workspace} bytes of workspace"
    assert 64 * 1024 <= cached <= 32 * 2 ** 20             # what stayed: the cached panels
    assert after_again - after <= 4096                    # the same blocks, reused
    assert peak_again - after <= again.nbytes + 4096      # no new workspace allocated
    assert emptied - before <= again.nbytes + 4096        # empty_cache() freed them all


def test_myatt_workspace_traced():
    """MyAtt's row-block workspace and its GEMMs' panels are traced and freed too."""
    m = myatt.MyAtt(64, 64, 256, 256, 64, dtype=np.float64)
    Q, K, V = _arr(1, 256, 64), _arr(1, 256, 64), _arr(1, 256, 256)
    m(Q, K, V)
    myatt.empty_cache()
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out, attn = m(Q, K, V)
        myatt.empty_cache()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    results = out.nbytes + attn.nbytes
    converted = Q[0].nbytes * 2 + K[0].nbytes * 2 + V[0].nbytes * 2   # float32 -> float64
    assert after - before <= results + 4096
    assert peak - before - results - converted > 0


# A fresh interpreter (numpy and myatt only): glibc's mmap and trim thresholds still at
# their start, as in a user's training script (a pytest process full of torch's large
# frees has raised them already, and then even plain malloc reuses the pages).
FAULTS_SCRIPT = """
import resource, numpy as np, myatt
rng = np.random.default_rng(0)
def arr(*shape):
    return (rng.standard_normal(shape) / 4).astype(np.float32)
m = myatt.MyAtt(256, 256, 256, 256, 256)
Q, K, V, go, gaw = arr(1, 128, 256), arr(1, 128, 256), arr(1, 256, 256), arr(1, 128, 256), arr(128, 256)
def step():
    _, pullback = myatt.vjp(m, Q, K, V)
    return pullback(go, gaw)
for _ in range(20):
    grads = step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    grads = step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator")
def test_results_reuse_freed_pages():
    """Results of 32 KiB and more get their data through myatt's NumPy memory handler,
    from a cache of freed blocks: a loop of mid-size training steps (vjp's copies, the
    results, every gradient: ~2.4 MB a step) takes (almost) no page faults once warm
    (0 here), where glibc's free() gave those pages back to the OS and the next step
    faulted them in again (6778 faults in 20 steps with NumPy's allocator). The
    arrays own their data and resize as any other; empty_cache() frees the cache."""
    import subprocess
    out = subprocess.run([sys.executable, "-c", FAULTS_SCRIPT], capture_output=True, text=True,
                         check=True).stdout
    assert int(out) < 300, f"{out.strip()} page faults in 20 steps"

    get_handler_name = (getattr(np, "_core", None) or np.core).multiarray.get_handler_name
    m = myatt.MyAtt(256, 256, 256, 256, 256)
    _, pullback = myatt.vjp(m, _arr(1, 128, 256), _arr(1, 128, 256), _arr(1, 256, 256))
    w = pullback(_arr(1, 128, 256))["attn.weight"]   # 256 x 512 float32: 512 KiB
    assert get_handler_name(w) == "myatt" and w.flags.owndata and w.base is None
    small = myatt.linear(_arr(2, 3), _arr(4, 3))      # below 32 KiB: NumPy's allocator
    assert get_handler_name(small) == get_handler_name()
    expected = w.copy()
    w.resize((300, 512), refcheck=False)              # through the handler's realloc
    np.testing.assert_array_equal(w[:256], expected)
    del w
    myatt.empty_cache()
