"""Atheris harness over myatt's Python entry points: shapes, dtypes, strides, values.

Each input picks an entry point (linear, softmax, bmm, Linear of any dtype, MyAtt: construction,
calls, parameter assignment, load_state_dict, manual_seed, set_num_threads;
scaled_dot_product_attention with its options; and any entry point of the registry,
tests/entry_points.py, the gradients included) and its
arguments: arrays of any real or unsupported dtype, 0 to 4 dimensions, sizes 0 to 6
(sometimes huge, through zero strides), C/Fortran/transposed/sliced/reversed/
byte-swapped/read-only/unaligned layouts, NaN/inf/extreme values, lists, None and
objects with __array__. A call may raise only the spec's exceptions (TypeError,
ValueError incl. AxisError, KeyError, MemoryError, AttributeError, or the exception an
input's own __array__ raised); a failed call
leaves a module unchanged; a result is a new C-contiguous array of the right shape and
dtype, close to the plain float64 reference (tests/reference.py) when the inputs are
finite. Anything else (or a crash of the interpreter) is a finding.

Run: fuzz/run_python.sh [SECONDS] (README, "Reliability"). Without atheris, the module
still imports: tests/test_fuzz_regressions.py replays fuzz/regressions/python/ through
one_input().
"""
import dataclasses
import os
import shlex
import sys
import zlib

import numpy as np

import myatt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
import reference  # noqa: E402  (tests/reference.py: the plain float64 kernels)
from entry_points import WITH_ARRAYS, Sizes, flat, invoke  # noqa: E402  (the registry)


class InputError(Exception):
    """Raised by an input's own __array__: it reaches the caller as it is (SPEC, Errors)."""


ALLOWED = (TypeError, ValueError, KeyError, MemoryError, AttributeError)
REAL = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
try:                                   # NumPy's bfloat16, where ml_dtypes is installed
    import ml_dtypes
    REAL.append(ml_dtypes.bfloat16)
except ImportError:
    pass
HALF_MAX = {"float16": 65504.0, "bfloat16": 3.3895e38}   # the largest finite values
UNSUPPORTED = [np.complex64, np.complex128, object, "U3", "S3", "datetime64[s]",
               "timedelta64[ms]", np.longdouble, [("a", "f4")]]
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 3e38, -3e38, 1e308, 5e-324, 65504.0]


class Finding(AssertionError):
    """A property of myatt that does not hold for this input."""


class Reader:
    def __init__(self, data):
        self.data = bytes(data)
        self.pos = 0

    def u8(self):
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def below(self, n):
        return self.u8() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def chance(self, k):        # probability about 1/k
        return self.below(k) == 0


# The exceptions inputs' own __array__ raised during this input: one of them may reach
# the caller whatever its class (SPEC, Errors: "reaches the caller with its own class").
OWN_RAISED = []


class ArrayLike:
    def __init__(self, value):
        self.value = value

    def __array__(self, dtype=None, copy=None):
        if isinstance(self.value, BaseException):
            OWN_RAISED.append(self.value)
            raise self.value
        return self.value


def values(r, shape, dtype):
    n = int(np.prod(shape)) if shape else 1
    raw = np.array([r.u8() for _ in range(min(n, 64))] or [0], dtype=np.int64)
    vals = np.resize(raw, n).astype(np.float64)
    out = (vals - 128) / 16
    if n and r.chance(4):                               # special values here and there
        for _ in range(r.below(4) + 1):
            out[r.below(256) % n] = r.pick(SPECIAL)
    out = out.reshape(shape)
    dt = np.dtype(dtype)
    if dt.kind in "iub":
        out = np.nan_to_num(out, nan=0, posinf=1, neginf=-1).clip(-100, 100)
        if dt.kind in "ub":
            out = np.abs(out)
    with np.errstate(all="ignore"):
        return out.astype(dt)


def layout(r, a):
    kind = r.below(10)
    if a.ndim == 0:
        return a
    if kind == 1:
        return np.asfortranarray(a)
    if kind == 2:
        return np.ascontiguousarray(a.T).T
    if kind == 3:                                        # every other element
        big = np.zeros(tuple(2 * s for s in a.shape), a.dtype)
        idx = tuple(slice(None, None, 2) for _ in a.shape)
        big[idx] = a
        return big[idx]
    if kind == 4:
        idx = tuple(slice(None, None, -1) for _ in a.shape)
        return a[idx].copy()[idx]
    if kind == 5 and a.dtype.kind not in "OV":
        return a.astype(a.dtype.newbyteorder())
    if kind == 6:
        b = a.copy()
        b.flags.writeable = False
        return b
    if kind == 7 and a.dtype.itemsize > 1 and a.dtype.kind != "O":   # unaligned
        buf = np.zeros(a.nbytes + a.itemsize + 1, np.uint8)
        u = buf[1:1 + a.nbytes].view(a.dtype).reshape(a.shape)
        u[...] = a
        return u
    if kind == 8 and a.shape[0] > 0:                     # zero stride on axis 0
        return np.broadcast_to(a[:1], a.shape)
    return a


def array(r, shape, dtype=None, plain=False):
    """An argument of (about) `shape`: usually a real array, sometimes anything."""
    shape = tuple(shape)
    if not plain:
        mode = r.below(24)
        if mode == 0:
            shape = shape + (r.below(3),)                 # an extra dimension
        elif mode == 1 and shape:
            shape = shape[:-1]                            # one dimension fewer
        elif mode == 2 and shape:
            i = r.below(len(shape))
            shape = shape[:i] + (r.below(7),) + shape[i + 1:]
        elif mode == 3:
            return r.pick([None, 1.5, "x", [[1.0], [1.0, 2.0]], {"a": 1}, object()])
        elif mode == 4:
            return ArrayLike(r.pick([ValueError("no"), InputError("no"), MemoryError(),
                                     np.ones(shape, np.float32), [1.0, 2.0]]))
        elif mode == 5:
            dtype = r.pick(UNSUPPORTED)
        elif mode == 6 and shape and all(shape[1:]):     # huge, without memory
            # never allocatable, and no other dimension 0: a huge empty input beside a huge
            # broadcast one (Linear.backward's x and grad_output) gets results that fit in
            # memory and a sum over 2**40 rows, minutes of honest work
            big = (2 ** r.pick([40, 50]),) + shape[1:]
            return np.broadcast_to(np.float32(1), big)
    if dtype is None:
        dtype = r.pick(REAL) if r.chance(3) else r.pick([np.float32, np.float64])
    try:
        a = values(r, shape, dtype if np.dtype(dtype).kind in "fiub" else np.float64)
        a = a.astype(dtype)
    except (TypeError, ValueError):
        a = np.zeros(shape, dtype)
    a = layout(r, a)
    if not plain and r.chance(12):
        return a.tolist()
    return a


def size_arg(r):
    return r.pick([0, 1, 2, 3, 4, 5, 6]) if not r.chance(16) else r.pick(
        [-1, -2 ** 63, 2 ** 40, 2 ** 62, 2 ** 70, 1.0, "3", None, True, np.int64(4)])
    # (never sizes that are absurd but allocatable, like 2**31: those ask for real memory)


def as_np(obj):
    try:
        return np.asarray(obj)
    except Exception:
        return None


def check_result(res, shape=None, dtype=None):
    if not (type(res) is np.ndarray):
        raise Finding(f"result is {type(res)!r}, not an ndarray")
    if not res.flags.c_contiguous or not res.dtype.isnative or not res.flags.writeable:
        raise Finding("result is not a fresh C-contiguous native array")
    if res.dtype.name not in ("float32", "float64", "float16", "bfloat16"):
        raise Finding(f"result dtype {res.dtype}")
    if shape is not None and res.shape != tuple(shape):
        raise Finding(f"result shape {res.shape}, expected {tuple(shape)}")
    if dtype is not None and res.dtype != dtype:
        raise Finding(f"result dtype {res.dtype}, expected {dtype}")


def result_dtype(*objs):
    """torch's promotion: the widest float; float16 with bfloat16 float32; no float: float32."""
    names = {a.dtype.newbyteorder("=").name for a in (as_np(o) for o in objs if o is not None)
             if a.dtype.kind == "f" or a.dtype.name == "bfloat16"}   # any byte order
    if "float64" in names:
        return np.dtype(np.float64)
    if len(names) == 1:
        return as_np([o for o in objs if o is not None and as_np(o).dtype.newbyteorder("=").name
                      in names][0]).dtype.newbyteorder("=")
    return np.dtype(np.float32)


def close(res, ref, scale):
    """res equals the float64 reference within its dtype's rounding of the terms' sizes."""
    if not np.all(np.isfinite(ref)) or not np.all(np.isfinite(scale)) or scale.max(initial=0) > 1e30:
        return
    half = res.dtype.itemsize == 2       # a rounding to 8 or 11 bits per op, overflow to inf
    if half:
        keep = np.abs(ref) < 0.99 * HALF_MAX[res.dtype.name]
        res, ref, scale = res.astype(np.float64)[keep], ref[keep], scale[keep]
    tol = (1e-2 if half else 1e-4 if res.dtype == np.float32 else 1e-10) * (scale + 1)
    if not np.all(np.abs(res - ref) <= tol):
        raise Finding(f"result differs from the float64 reference by "
                      f"{np.max(np.abs(res - ref) - tol):.3g} beyond tolerance")


def run_linear(r):
    k, n = r.below(7), r.below(7)
    batch = tuple(r.below(5) for _ in range(r.below(3)))
    x, w = array(r, batch + (k,)), array(r, (n, k))
    b = array(r, (n,)) if r.chance(2) else None
    res = myatt.linear(x, w, b)
    X, W, B = as_np(x), as_np(w), as_np(b) if b is not None else None
    check_result(res, X.shape[:-1] + (W.shape[0],), result_dtype(x, w, b))
    if res.size == 0 or X.size == 0:
        return          # (NumPy's own matmul may loop over 2**40 empty items)
    with np.errstate(all="ignore"):
        X64, W64 = X.astype(np.float64), W.astype(np.float64)
        B64 = None if B is None else B.astype(np.float64)
        ref = reference.linear(X64, W64, B64)
        scale = reference.linear(np.abs(X64), np.abs(W64), None if B is None else np.abs(B64))
    close(res, ref, scale)


def run_softmax(r):
    shape = tuple(r.below(6) for _ in range(r.below(5)))
    x = array(r, shape)
    dim = r.pick([-1, 0, 1, 2, 3, -2, -5, 7, 2 ** 70, 1.0, None]) if r.chance(3) else -1
    res = myatt.softmax(x, dim)
    X = as_np(x)
    check_result(res, X.shape, result_dtype(x))
    if X.ndim and res.size and X.dtype.kind in "fiub":
        with np.errstate(all="ignore"):
            ref = reference.softmax(X.astype(np.float64), dim)
        close(res, ref, np.ones_like(ref))


def run_bmm(r):
    b, n, m, p = r.below(4), r.below(6), r.below(6), r.below(6)
    x, y = array(r, (b, n, m)), array(r, (b, m, p))
    res = myatt.bmm(x, y)
    X, Y = as_np(x), as_np(y)
    check_result(res, (X.shape[0], X.shape[1], Y.shape[2]), result_dtype(x, y))
    if res.size == 0 or X.size == 0:
        return
    with np.errstate(all="ignore"):
        X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
        close(res, reference.bmm(X64, Y64), reference.bmm(np.abs(X64), np.abs(Y64)))


def snapshot(m):
    return {k: v.tobytes() for k, v in m.state_dict().items()}


def guarded(m, action):
    """action() on module m: an allowed exception (or an input's own) leaves m unchanged."""
    before = snapshot(m)
    try:
        return action()
    except Exception as e:
        if isinstance(e, ALLOWED) or any(e is own for own in OWN_RAISED):
            if snapshot(m) != before:
                raise Finding("a failed call changed the module")
        raise


def run_linear_type(r):
    dtype = r.pick([np.float32, np.float64, "float64", np.float16, "bfloat16", np.int32, None])
    kw = {} if dtype is None else {"dtype": dtype}
    lin = myatt.Linear(size_arg(r), size_arg(r), bias=r.chance(3) == 0, **kw)
    k, n = lin.in_features, lin.out_features
    for _ in range(r.below(4) + 1):
        what = r.below(5)
        if what == 0:
            batch = tuple(r.below(4) for _ in range(r.below(3)))
            x = array(r, batch + (k,))
            res = guarded(lin, lambda: lin(x))
            check_result(res, as_np(x).shape[:-1] + (n,), lin.dtype)
        elif what == 1:
            v = array(r, (n, k))
            guarded(lin, lambda: setattr(lin, "weight", v))
        elif what == 2:
            v = array(r, (n,))
            guarded(lin, lambda: setattr(lin, "bias", v))
        elif what == 3:
            sd = {"weight": array(r, (n, k)), "bias": array(r, (n,))}
            if r.chance(4):
                sd.pop(r.pick(["weight", "bias"]))
            guarded(lin, lambda: lin.load_state_dict(sd, strict=r.chance(3) != 0))
        elif r.chance(2):
            batch = tuple(r.below(4) for _ in range(r.below(3)))
            x, g = array(r, batch + (k,)), array(r, batch + (n,))
            res = guarded(lin, lambda: lin.backward(x, g))
            check_result(res["weight"], (n, k), lin.dtype)
        else:
            lin.weight *= 0.5
            repr(lin)


def run_myatt(r):
    sizes = [size_arg(r) for _ in range(5)]
    dtype = r.pick([np.float32, np.float64, np.float16, "bfloat16"])
    m = myatt.MyAtt(*sizes, dtype=dtype)
    q, k, v1, v2, o = (m.query_size, m.key_size, m.value_size1, m.value_size2, m.output_size)
    for _ in range(r.below(3) + 1):
        what = r.below(5)
        if what <= 1:
            S = r.below(6)
            Q = array(r, (1 + r.below(2), S, q))
            K = array(r, (1 + r.below(2), S, k))
            V = array(r, (1, v1, v2))
            out, attn = guarded(m, lambda: m(Q, K, V))
            check_result(out, (1, as_np(Q).shape[1], o), m.dtype)
            check_result(attn, (as_np(Q).shape[1], v1), m.dtype)
            if np.shares_memory(out, attn):
                raise Finding("output and attn_weights share memory")
        elif what == 4:
            S = r.below(6)
            Q, K, V = array(r, (1, S, q)), array(r, (1, S, k)), array(r, (1, v1, v2))
            go, ga = array(r, (1, S, o)), array(r, (S, v1)) if r.chance(2) else None
            grads = guarded(m, lambda: m.backward(Q, K, V, go, ga))
            check_result(grads["V"], (1, v1, v2), m.dtype)
            check_result(grads["attn.weight"], (v1, q + k), m.dtype)
        elif what == 2:
            sd = {key: array(r, val.shape) for key, val in m.state_dict().items()}
            guarded(m, lambda: m.load_state_dict(sd))
        else:
            v = array(r, (v1, q + k))
            guarded(m, lambda: setattr(m.attn, "weight", v))


def run_misc(r):
    what = r.below(3)
    if what == 0:
        myatt.manual_seed(r.pick([0, 1, -1, 2 ** 64 - 1, 2 ** 64, -2 ** 63 - 1, 1.5, None]))
    elif what == 1:
        n = r.pick([1, 2, 3, 0, -1, 5000, 2 ** 40, "2"])
        myatt.set_num_threads(n)
    else:
        myatt.set_num_threads(1 + r.below(4))


def pick_entry(word):
    """The registry entry an input's two bytes pick, by rendezvous hashing of the entries'
    names: the entry whose hash of (name, word) is the largest (the names' crc32 mixed
    with the word by splitmix64's finaliser).  An entry added to the
    registry takes over about 1/n of the words and leaves the others where they were, so
    the stored inputs and the seed corpus keep replaying what they were made for (an index
    into the list moved nearly all of them with each new entry)."""
    return max(WITH_ARRAYS, key=lambda ep: _mix(zlib.crc32(ep.name.encode()) << 16 | word))


def _mix(x):
    """splitmix64's finaliser: a well-spread 64-bit hash of x (crc32 alone is linear)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def run_entry(r):
    """Any entry point of the registry (tests/entry_points.py) that takes arrays, at
    random sizes, every array argument drawn by array() (None, sometimes, where allowed):
    a failed call leaves its object unchanged; the results are fresh arrays of the
    result dtype, of the registry's shapes when every argument had its declared shape,
    and share no memory."""
    ep = pick_entry(r.u8() << 8 | r.u8())
    ndim = r.below(5)
    s = Sizes(batch=tuple(r.below(4) for _ in range(r.below(3))), in_f=r.below(7),
              out_f=r.below(7), b=r.below(4), n=r.below(6), m=r.below(6), p=r.below(6),
              shape=tuple(r.below(6) for _ in range(ndim)),
              dim=r.pick([-1, 0, 1, -2, ndim, 2 ** 70]) if r.chance(3) else -1,
              Bq=1 + r.below(2), Bk=1 + r.below(2), S=r.below(6), q=r.below(5), k=r.below(5),
              v1=r.below(5), v2=r.below(5), o=r.below(5))
    dtypes = [np.float32, np.float64]
    if ep.name.startswith("MultiheadAttention"):
        # (read here only, so that the stored inputs of the other entries replay as they did)
        heads = 1 + r.below(3)
        s = dataclasses.replace(s, L=r.below(5), Skv=r.below(5), N=r.below(4), heads=heads,
                                embed=heads * r.below(4), kdim=r.below(5), vdim=r.below(5))
        if r.chance(2):   # a half-precision module (torch's ops one by one)
            dtypes = [d for d in REAL if np.dtype(d).itemsize == 2 and np.dtype(d).kind != "i"]
    obj = ep.target(s, r.pick(dtypes))
    args = [None if a.optional and r.chance(3) else array(r, a.shape(s)) for a in ep.args]
    # A huge (broadcast, 2**40-long) non-empty argument can feed a reduction with a small
    # result: SDPA's keys and values (2**40 keys per query), Linear.backward's bias
    # gradient (a sum over 2**40 rows): valid calls that compute for hours, as torch's
    # would. Not made; an empty huge argument stays, since a call on it must return at
    # once (the bmm and bmm_backward hangs it found).
    if any(x is not None and x.ndim and x.shape[0] >= 2 ** 40 and x.size
           for x in map(as_np, args)):
        return
    if obj is None:
        res = invoke(ep, None, args, s)
    else:
        res = guarded(obj, lambda: invoke(ep, obj, args, s))
    arrays = flat(res, ep.result)
    # (an argument declared promotes=False, SDPA's mask, takes no part in the result dtype)
    dtype = (np.dtype(obj.dtype) if ep.module_dtype
             else result_dtype(*(x for x, a in zip(args, ep.args) if a.promotes)))
    declared = all(x is not None and as_np(x) is not None and as_np(x).shape == a.shape(s)
                   for x, a in zip(args, ep.args))
    shapes = ep.result_shapes(s) if declared else [None] * len(arrays)
    if len(shapes) != len(arrays):
        raise Finding(f"{ep.name}: {len(arrays)} result arrays, expected {len(shapes)}")
    for res_i, shape in zip(arrays, shapes):
        check_result(res_i, shape, dtype)
    for i in range(len(arrays)):
        for j in range(i):
            if np.shares_memory(arrays[i], arrays[j]):
                raise Finding(f"{ep.name}: two results share memory")


def run_sdpa(r):
    """scaled_dot_product_attention with its options drawn as well (the registry's entries
    pass attn_mask only): is_causal, scale (0, negative, NaN, inf, not a number),
    dropout_p (inside [0, 1] and out of it), enable_gqa with query heads a multiple of
    the key and value heads or not, a mask of the right shape or a wrong one; a third of
    the calls through vjp, then a pullback call. The result and the gradients are fresh
    arrays of the result dtype (the gradients shaped like query, key, value); without
    dropout, with finite inputs under 100, the result is the float64 reference's within
    the rounding of the scores (a score's error moves its weight by as much)."""
    batch = tuple(r.below(3) for _ in range(r.below(2)))
    hkv = 1 + r.below(3)
    hq = hkv * (1 + r.below(3)) if r.chance(2) else 1 + r.below(4)
    L, S, E, Ev = r.below(6), r.below(6), r.below(5), r.below(5)
    q, k, v = array(r, batch + (hq, L, E)), array(r, batch + (hkv, S, E)), array(r, batch + (hkv, S, Ev))
    mask = array(r, r.pick([(L, S), (1, S), (hq, L, S), (L, 1), (S,)])) if r.chance(2) else None
    kw = {}
    if r.chance(2):
        kw["is_causal"] = r.pick([True, False, True, 1, None, "yes"])
    if r.chance(2):
        kw["scale"] = r.pick([None, 0.5, 0.0, -2.0, 3, np.nan, np.inf, 1e308, "x"])
    if r.chance(3):
        kw["dropout_p"] = r.pick([0.0, 0.3, 1.0, -0.1, 1.5, np.nan, "0.1"])
    if r.chance(2):
        kw["enable_gqa"] = r.pick([True, False, True, 1])
    args = (q, k, v, mask)
    if any(x is not None and x.ndim and x.shape[0] >= 2 ** 40 and x.size   # hours (run_entry)
           for x in map(as_np, args)):
        return
    sdpa = myatt.scaled_dot_product_attention
    pull = None
    if r.chance(3):
        res, pull = myatt.vjp(sdpa, q, k, v, mask, **kw)
    else:
        res = sdpa(q, k, v, attn_mask=mask, **kw)
    dtype = result_dtype(q, k, v)
    check_result(res, None, dtype)
    Q, K, V = as_np(q), as_np(k), as_np(v)
    M = None if mask is None else as_np(mask)
    if pull is not None:
        grads = pull(array(r, res.shape))
        if len(grads) != 4 or grads[3] is not None:
            raise Finding(f"pullback gave {len(grads)} gradients, the mask's not None")
        for g, x in zip(grads[:3], (Q, K, V)):
            check_result(g, x.shape, dtype)
    plain = {"is_causal": (True, False), "scale": (None, 0.5, 0.0, -2.0, 3),
             "dropout_p": (0.0,), "enable_gqa": (True, False)}
    finite = all(x.dtype.kind in "fiub" and np.all(np.abs(x.astype(np.float64)) < 100)
                 for x in (Q, K, V) + (() if M is None else (M,)) if x.size)
    if not finite or res.size == 0 or any(not any(kw[o] is p for p in plain[o]) for o in kw):
        return
    if kw.get("is_causal") and kw.get("scale") is not None and kw["scale"] <= 0:
        return   # torch's kernel scales the hidden keys' -inf: NaN rows (sdpa.h; test_sdpa.py)
    if kw.get("enable_gqa") and Q.shape[-3] != K.shape[-3]:
        g = Q.shape[-3] // K.shape[-3]
        K, V = np.repeat(K, g, axis=-3), np.repeat(V, g, axis=-3)
    if kw.get("is_causal"):   # with a mask too (torch's flash shapes): both
        tril = np.tril(np.ones((Q.shape[-2], K.shape[-2]), bool))
        M = tril if M is None else (M.astype(bool) & tril if M.dtype == bool
                                    else np.where(tril, M.astype(np.float64), -np.inf))
    Q, K, V = (x.astype(np.float64) for x in (Q, K, V))
    sc = kw.get("scale")
    s = abs(sc) if sc is not None else 1 / np.sqrt(Q.shape[-1]) if Q.shape[-1] else 0.0
    eps = 1e-14 if res.dtype == np.float64 else 1e-6   # the scores: float32 for half inputs too
    # the weights and the result of a half-precision call are rounded to 8 or 11 bits
    out_eps = 1e-2 if res.dtype.itemsize == 2 else eps
    res = res.astype(np.float64)
    with np.errstate(all="ignore"):
        ref = reference.scaled_dot_product_attention(Q, K, V, M, sc)
        score_err = eps * (s * np.abs(Q) @ np.swapaxes(np.abs(K), -1, -2)
                           + (0 if M is None or M.dtype == bool else np.abs(M)))
        row_err = score_err.max(axis=-1, keepdims=True, initial=0)
        tol = (4 * row_err + out_eps) * (np.abs(V).max(initial=0) + 1)
        bad = ~(np.abs(res - ref) <= tol)
    if np.any(bad):
        raise Finding(f"result differs from the float64 reference by "
                      f"{np.max(np.abs(res - ref)[bad]):.3g} beyond tolerance")


OPS = [run_linear, run_softmax, run_bmm, run_linear_type, run_myatt, run_misc]


def one_input(data):
    r = Reader(data)
    # (the first byte picks the op; 240 and above the registry's entry points, 224 to
    # 239 scaled_dot_product_attention's options, which keeps what every stored
    # regression input replays)
    first = r.u8()
    op = run_entry if first >= 240 else run_sdpa if first >= 224 else OPS[first % len(OPS)]
    OWN_RAISED.clear()
    try:
        with np.errstate(all="ignore"):     # 1e308 -> float32 warns, as in NumPy
            op(r)
    except ALLOWED:
        pass
    except Exception as e:
        if not any(e is own for own in OWN_RAISED):
            raise


def main():
    import atheris
    # libFuzzer runs its argv[0] through the shell for -merge, -fork and -minimize_crash:
    # this file under this interpreter (it is not executable itself)
    self = " ".join(shlex.quote(p) for p in (sys.executable, os.path.abspath(__file__)))
    atheris.Setup([self] + sys.argv[1:], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
