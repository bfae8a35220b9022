#!/usr/bin/env python3
"""myatt against PyTorch and plain NumPy, side by side, in one run.

    python benchmarks/bench.py            # full run (a few minutes)
    python benchmarks/bench.py --quick    # seconds: seed and mid sizes only

Measures the module forward, one training step (forward + backward through
myatt.vjp, and once with the stateless MyAtt.backward: every gradient, against torch autograd and hand-written NumPy gradients) and each kernel
alone (linear, softmax, gelu, bmm), float32 and float64, at the seed's shape, at mid and
at large sizes, at 1 thread and at all cores, the float16 and bfloat16 rows (linear,
softmax, the flash sdpa forward), plus a float32 GEMM alone and the
overhead of myatt.validate in shadow mode on a transformer layer; prints
one table with median times, the ratios
myatt/torch and myatt/NumPy, GFLOP/s and the share of the machine's FMA peak,
which it measures first with benchmarks/peak.c (compiled here with `cc`).

Needs torch (same weights, torch.no_grad(), torch.set_num_threads). threadpoolctl
(optional) reports numpy's BLAS and sets its thread count; matplotlib (optional)
draws --plot. For fair NumPy figures, run with OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset (see the README).
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

try:
    import myatt  # noqa: E402
except ImportError:   # run from a checkout built in place (setup.py build_ext --inplace)
    sys.path.insert(0, ROOT)
    import myatt  # noqa: E402

from myatt._interop import to_numpy, to_tensor  # noqa: E402   (bfloat16 through its bits)
from numpy_myatt import NumpyMyAtt  # noqa: E402
from numpy_myatt import bmm as np_bmm  # noqa: E402
from numpy_myatt import linear as np_linear  # noqa: E402
from numpy_myatt import sdpa as np_sdpa  # noqa: E402
from numpy_myatt import sdpa_train as np_sdpa_train  # noqa: E402
from numpy_myatt import softmax as np_softmax  # noqa: E402

try:   # NumPy's bfloat16 (myatt[bf16]): the bfloat16 rows
    import ml_dtypes
except ImportError:
    ml_dtypes = None

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("bench.py needs PyTorch to compare against: pip install torch "
             "(or the repo's test extra: pip install -e '.[test]')")

try:
    from threadpoolctl import threadpool_info, threadpool_limits
except ImportError:
    threadpool_info = threadpool_limits = None


# --------------------------------------------------------------------------- #
# The torch module: the tutorial's MyAtt (tests/oracle.py holds it verbatim)
# --------------------------------------------------------------------------- #
class TorchMyAtt(nn.Module):
    def __init__(self, query_size, key_size, value_size1, value_size2, output_size):
        super().__init__()
        self.attn = nn.Linear(query_size + key_size, value_size1)
        self.attn_combine = nn.Linear(query_size + value_size2, output_size)

    def forward(self, Q, K, V):
        attn_weights = F.softmax(self.attn(torch.cat((Q[0], K[0]), dim=-1)), dim=-1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), V)
        output = torch.cat((Q[0], attn_applied[0]), dim=-1)
        output = self.attn_combine(output).unsqueeze(0)
        return output, attn_weights


# --------------------------------------------------------------------------- #
# Machine facts
# --------------------------------------------------------------------------- #
def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def git_commit():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def numpy_blas():
    """A line naming numpy's BLAS, its kernel (core type) and thread count."""
    if threadpool_info is not None:
        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if infos:
            return "; ".join(f"{i.get('internal_api')} {i.get('version')} core={i.get('architecture')} "
                             f"threads={i.get('num_threads')} ({os.path.basename(i.get('filepath', ''))})"
                             for i in infos)
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        text = f"{blas.get('name')} {blas.get('version')}"
        if blas.get("openblas configuration"):
            text += f" [{blas['openblas configuration']}]"
        return text + " (install threadpoolctl for the kernel in use and thread control)"
    except Exception:   # older numpy: no dict config
        return "unknown (install threadpoolctl)"


def measure_peak():
    """{'avx512': GFLOP/s, 'avx2': GFLOP/s} of one core, float32 FMA, and 'avx512_bf16' (the
    bfloat16 dot product's peak) where the CPU has it; {} without a compiler."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or platform.machine() not in ("x86_64", "AMD64", "i686"):
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "peak")
        build = subprocess.run([cc, "-O2", "-o", exe, os.path.join(HERE, "peak.c")],
                               capture_output=True, text=True)
        if build.returncode != 0:
            print(f"note: could not build peak.c ({build.stderr.strip()[:200]})")
            return {}
        out = subprocess.run([exe], capture_output=True, text=True, timeout=120).stdout
    peak = {}
    for line in out.splitlines():
        isa, value = line.split()
        peak[isa] = float(value)
    return peak


# --------------------------------------------------------------------------- #
# Timing
# --------------------------------------------------------------------------- #
# longer than the idle polling of the thread pools in the process: OpenBLAS's
# (2**28 cycles by default, ~0.1 s) and OpenMP's (GOMP_SPINCOUNT, KMP_BLOCKTIME)
QUIET_SECONDS = 0.2
# a call slower than this is timed twice after its warm-up (the mean of the two)
SLOW_CALL_SECONDS = 2.0


class Timing:
    def __init__(self, min_total, min_reps, min_sample):
        self.min_total = min_total     # seconds of timed calls per measurement, at least
        self.min_reps = min_reps       # samples per measurement, at least
        self.min_sample = min_sample   # seconds per sample (fast calls are batched)

    def __call__(self, fn, quiet_first=False):
        """(median, best): seconds per call over samples of batched calls.

        quiet_first: wait until the other libraries' idle threads have stopped
        spinning first (OpenBLAS's and OpenMP's workers poll for milliseconds
        after each call; on a 2-core machine they took the core a 2-thread call
        of the next library needed)."""
        if quiet_first:
            time.sleep(QUIET_SECONDS)
        fn()                                   # warm-up (allocations, caches, thread pools)
        t0 = time.perf_counter()
        fn()
        one = time.perf_counter() - t0
        if one > SLOW_CALL_SECONDS:            # NumPy's attention at 4096^2: one more call
            t0 = time.perf_counter()
            fn()
            two = time.perf_counter() - t0
            return (one + two) / 2, min(one, two)
        per = max(1, int(self.min_sample / max(one, 1e-7)))
        samples = []
        start = time.perf_counter()
        while len(samples) < self.min_reps or time.perf_counter() - start < self.min_total:
            t0 = time.perf_counter()
            for _ in range(per):
                fn()
            samples.append((time.perf_counter() - t0) / per)
        return statistics.median(samples), min(samples)


class Threads:
    """myatt, torch and (with threadpoolctl) numpy's BLAS at n threads."""

    def __init__(self, n):
        self.n = n
        self.limits = None

    def __enter__(self):
        myatt.set_num_threads(self.n)
        torch.set_num_threads(self.n)
        if threadpool_limits is not None:
            self.limits = threadpool_limits(limits=self.n)
        return self

    def __exit__(self, *exc):
        if self.limits is not None:
            self.limits.restore_original_limits()


# --------------------------------------------------------------------------- #
# Cases
# --------------------------------------------------------------------------- #
LEVELS = {
    # name: (S, (query_size, key_size, value_size1, value_size2, output_size))
    "seed": (1, (32, 32, 32, 64, 32)),
    "mid": (128, (256, 256, 256, 256, 256)),
    "large": (1024, (1024, 1024, 1024, 1024, 1024)),
}


def level_ops(level, dtype, rng):
    """[(op, flops or None, elements, myatt_fn, torch_fn, numpy_fn, check)] for one size level."""
    S, sizes = LEVELS[level]
    q, k, v1, v2, o = sizes
    m = myatt.MyAtt(*sizes, dtype=dtype)
    tm = TorchMyAtt(*sizes).to(torch.float64 if dtype == np.float64 else torch.float32)
    tm.load_state_dict({key: torch.from_numpy(val) for key, val in m.state_dict().items()})
    tm.eval()
    nm = NumpyMyAtt(m.state_dict(), dtype)

    Q = rng.standard_normal((1, S, q)).astype(dtype)
    K = rng.standard_normal((1, S, k)).astype(dtype)
    V = rng.standard_normal((1, v1, v2)).astype(dtype)
    tQ, tK, tV = (torch.from_numpy(a) for a in (Q, K, V))

    w1, b1 = m.attn.weight, m.attn.bias
    tw1, tb1 = torch.from_numpy(w1), torch.from_numpy(b1)
    x1 = np.ascontiguousarray(np.concatenate((Q[0], K[0]), axis=-1))   # [S, q + k]
    tx1 = torch.from_numpy(x1)
    scores = np.ascontiguousarray(np_linear(x1, w1, b1))               # [S, v1]
    tscores = torch.from_numpy(scores)
    aw = np.ascontiguousarray(np_softmax(scores)[None])                # [1, S, v1]
    taw = torch.from_numpy(aw)

    # one training step: forward, then every gradient for random upstream gradients
    gout = rng.standard_normal((1, S, o)).astype(dtype)
    gaw = rng.standard_normal((S, v1)).astype(dtype)
    tgout, tgaw = torch.from_numpy(gout), torch.from_numpy(gaw)
    tinputs = [t.clone().requires_grad_() for t in (tQ, tK, tV)]
    tparams = dict(tm.named_parameters())
    names = ["Q", "K", "V", *tparams]

    def myatt_train():               # through vjp: the backward reuses the forward's panels
        _, pullback = myatt.vjp(m, Q, K, V)
        return pullback(gout, gaw)

    def myatt_train_stateless():     # forward, then the stateless backward (recomputes them)
        m(Q, K, V)
        return m.backward(Q, K, V, gout, gaw)

    def torch_train():
        with torch.enable_grad():
            out, attn_weights = tm(*tinputs)
            grads = torch.autograd.grad((out, attn_weights), [*tinputs, *tparams.values()],
                                        (tgout, tgaw))
        return dict(zip(names, grads))

    flops_lin1 = 2 * S * (q + k) * v1
    flops_bmm = 2 * S * v1 * v2
    flops_lin2 = 2 * S * (q + v2) * o
    flops_module = flops_lin1 + flops_bmm + flops_lin2
    return [
        ("module", flops_module, None,
         lambda: m(Q, K, V), lambda: tm(tQ, tK, tV), lambda: nm(Q, K, V)),
        # autograd's count: the backward of each product is two products of its size
        ("train", 3 * flops_module, None,
         myatt_train, torch_train, lambda: nm.train_step(Q, K, V, gout, gaw)),
        ("train-stateless", 3 * flops_module, None,
         myatt_train_stateless, torch_train, lambda: nm.train_step(Q, K, V, gout, gaw)),
        ("linear", flops_lin1, None,
         lambda: myatt.linear(x1, w1, b1), lambda: F.linear(tx1, tw1, tb1),
         lambda: np_linear(x1, w1, b1)),
        ("softmax", None, S * v1,
         lambda: myatt.softmax(scores, -1), lambda: torch.softmax(tscores, -1),
         lambda: np_softmax(scores, -1)),
        # (NumPy has no erf: no NumPy column)
        ("gelu", None, S * v1, lambda: myatt.gelu(scores), lambda: F.gelu(tscores), None),
        ("bmm", flops_bmm, None,
         lambda: myatt.bmm(aw, V), lambda: torch.bmm(taw, tV), lambda: np_bmm(aw, V)),
    ]


def half_ops(dtype, rng, quick, gemm_n):
    """[(case, flops, elements, myatt_fn, torch_fn, numpy_fn)] of the half-precision rows:
    linear n^3, softmax [n, n], the flash sdpa forward.  myatt computes them as torch does,
    float32 arithmetic and each result rounded (docs/numerics.md; bfloat16 linear and the
    flash forward's products on vdpbf16ps where the CPU has it); NumPy only where it has the dtype and a kernel worth
    timing (float16 softmax; its float16 matmul is not BLAS).  In float32: the rows the
    half ones are held against."""
    def both(shape, scale=1.0):
        a = (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)
        return a, to_tensor(a, torch)

    n = gemm_n // 2 if quick else gemm_n
    x, tx = both((n, n))
    w, tw = both((n, n), n ** -0.5)
    s, ts = both((n, n), 3.0)
    L = 1024 if quick else 4096
    q, tq = both((1, 8, L, 64))
    k, tk = both((1, 8, L, 64))
    v, tv = both((1, 8, L, 64))
    sdpa = myatt.scaled_dot_product_attention
    numpy_softmax = (lambda: np_softmax(s, -1)) if dtype == np.float16 else None
    return [
        (f"linear {n}^3", 2 * n ** 3, None, lambda: myatt.linear(x, w),
         lambda: F.linear(tx, tw), None),
        (f"softmax {n}x{n}", None, n * n, lambda: myatt.softmax(s, -1),
         lambda: torch.softmax(ts, -1), numpy_softmax),
        (f"sdpa forward 1x8x{L}x{L}x64", 4 * 8 * L * L * 64, None, lambda: sdpa(q, k, v),
         lambda: F.scaled_dot_product_attention(tq, tk, tv), None),
    ]


# scaled_dot_product_attention: (name, q shape, kv heads (GQA) or None, S, is_causal, train)
def sdpa_cases(quick):
    """The sdpa rows' shapes: [B, H, L, E] queries against S keys (E == Ev)."""
    if quick:
        return [("forward", (1, 8, 1024, 64), None, 1024, False, False),
                ("causal", (1, 8, 1024, 64), None, 1024, True, False),
                ("train causal", (1, 8, 512, 64), None, 512, True, True),
                ("decode gqa", (1, 32, 1, 128), 8, 1024, False, False)]
    return [("forward", (1, 8, 4096, 64), None, 4096, False, False),
            ("causal", (1, 8, 4096, 64), None, 4096, True, False),
            ("train causal", (1, 8, 2048, 64), None, 2048, True, True),
            ("decode gqa", (1, 32, 1, 128), 8, 4096, False, False)]


def sdpa_ops(dtype, rng, quick):
    """[(case, flops, myatt_fn, torch_fn, numpy_fn)] of the sdpa rows: flops 4*L*S*E per
    head (the two products), half of it causal, 3x that for forward + backward (autograd's
    count: the backward's four products; myatt's recomputes the scores, the weights and
    dP = dO V^T from the kept log-sum-exp, FlashAttention-2 style)."""
    ops = []
    sdpa = myatt.scaled_dot_product_attention
    for name, qshape, kv_heads, S, causal, train in sdpa_cases(quick):
        B, H, L, E = qshape
        Hk = kv_heads or H
        q = rng.standard_normal(qshape).astype(dtype)
        k = rng.standard_normal((B, Hk, S, E)).astype(dtype)
        v = rng.standard_normal((B, Hk, S, E)).astype(dtype)
        g = rng.standard_normal(qshape).astype(dtype)
        tq, tk, tv, tg = (torch.from_numpy(a) for a in (q, k, v, g))
        kw = dict(is_causal=causal, enable_gqa=kv_heads is not None)
        flops = 4 * B * H * L * S * E * (0.5 if causal else 1.0)
        if train:
            leaves = [t.clone().requires_grad_() for t in (tq, tk, tv)]

            def myatt_fn(q=q, k=k, v=v, g=g, kw=kw):        # through vjp: out and lse kept
                _, pullback = myatt.vjp(sdpa, q, k, v, **kw)
                return pullback(g)

            def torch_fn(leaves=leaves, tg=tg, kw=kw):
                with torch.enable_grad():
                    out = F.scaled_dot_product_attention(*leaves, **kw)
                    return torch.autograd.grad(out, leaves, tg)

            def numpy_fn(q=q, k=k, v=v, g=g, causal=causal):
                return np_sdpa_train(q, k, v, g, causal)
            ops.append((f"sdpa {name} {B}x{H}x{L}x{S}x{E}", 3 * flops, myatt_fn, torch_fn,
                        numpy_fn))
        else:
            heads = f"{H}/{Hk}" if kv_heads else f"{H}"
            ops.append((f"sdpa {name} {B}x{heads}x{L}x{S}x{E}", flops,
                        lambda q=q, k=k, v=v, kw=kw: sdpa(q, k, v, **kw),
                        lambda tq=tq, tk=tk, tv=tv, kw=kw: F.scaled_dot_product_attention(
                            tq, tk, tv, **kw),
                        lambda q=q, k=k, v=v, causal=causal, kw=kw: np_sdpa(
                            q, k, v, causal, kw["enable_gqa"])))
    return ops


def np_mha(x, sd, heads, need_weights):
    """torch's MultiheadAttention (self-attention, seq-first [L, N, E], no masks) in NumPy."""
    L, N, E = x.shape
    hd = E // heads
    qkv = x @ sd["in_proj_weight"].T + sd["in_proj_bias"]               # [L, N, 3E]
    q, k, v = (qkv[..., i * E:(i + 1) * E].reshape(L, N, heads, hd).transpose(1, 2, 0, 3)
               for i in range(3))                                       # [N, H, L, hd]
    w = np_softmax((q * np.sqrt(1.0 / hd).astype(x.dtype)) @ k.transpose(0, 1, 3, 2), -1)
    o = (w @ v).transpose(2, 0, 1, 3).reshape(L, N, E)
    out = o @ sd["out_proj.weight"].T + sd["out_proj.bias"]
    return out, (w.mean(axis=1) if need_weights else None)


def mha_ops(dtype, rng, quick):
    """MultiheadAttention rows: self-attention (N=8, L=512, E=512, 8 heads; quick: N=2,
    L=128) with and without the weights, and one token (N=1, L=1, E=512).  float16 and
    bfloat16: torch's ops one by one (myatt/_mha_half.py), no NumPy column."""
    ops = []
    half = np.dtype(dtype).itemsize == 2
    for N, L in ((2, 128) if quick else (8, 512), (1, 1)):
        E, H = 512, 8
        m = myatt.MultiheadAttention(E, H, dtype=dtype)
        tm = nn.MultiheadAttention(E, H, dtype=to_tensor(np.zeros(1, dtype), torch).dtype)
        tm.load_state_dict({key: to_tensor(val, torch) for key, val in m.state_dict().items()})
        sd = m.state_dict()
        x = rng.standard_normal((L, N, E)).astype(np.float32).astype(dtype)
        tx = to_tensor(x, torch)
        flops = 2 * N * L * E * 4 * E + 4 * N * L * L * E
        for nw in (False, True):
            ops.append((f"mha N={N} L={L} E={E} H={H} need_weights={nw}", flops, None,
                        lambda m=m, x=x, nw=nw: m(x, x, x, need_weights=nw),
                        lambda tm=tm, tx=tx, nw=nw: tm(tx, tx, tx, need_weights=nw),
                        None if half else lambda sd=sd, x=x, nw=nw: np_mha(x, sd, H, nw)))
        if L == 1:
            continue
        # forward + backward: myatt.vjp against torch's autograd (x one leaf), compared
        # on the in_proj_weight gradient; 3x the forward's flops; no NumPy column
        g = rng.standard_normal((L, N, E)).astype(np.float32).astype(dtype)
        tg = to_tensor(g, torch)
        for nw in (False, True):
            def myatt_fn(m=m, x=x, g=g, nw=nw):
                _, pullback = myatt.vjp(m, x, x, x, need_weights=nw)
                return (pullback(g)["in_proj_weight"],)

            def torch_fn(tm=tm, tx=tx, tg=tg, nw=nw):
                with torch.enable_grad():
                    leaf = tx.clone().requires_grad_()
                    out, _ = tm(leaf, leaf, leaf, need_weights=nw)
                    return torch.autograd.grad(out, [tm.in_proj_weight, leaf,
                                                     *tm.out_proj.parameters(),
                                                     tm.in_proj_bias], tg)
            ops.append((f"mha train N={N} L={L} E={E} H={H} need_weights={nw}", 3 * flops,
                        None, myatt_fn, torch_fn, None))
    return ops


def validate_cases(quick):
    """myatt.validate in shadow mode against the model's own forward: (case, model, input).
    nn.TransformerEncoderLayer in training mode, dropout 0 (off its fused fast path: every
    call recorded, rerun by myatt and by torch in float64, and judged), at the tests' sizes
    and, in a full run, two larger ones (where torch's float64 reruns are most of the cost)."""
    cases = [(2, 6, 16, 4), (4, 32, 64, 4)] + ([] if quick else [(4, 128, 256, 8),
                                                                 (8, 256, 512, 8)])
    out = []
    for N, L, E, H in cases:
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=2 * E, dropout=0.0,
                                           batch_first=True)
        out.append((f"validate shadow N={N} L={L} E={E}", layer,
                    torch.randn(N, L, E)))
    return out


def first(result):
    """The array a row compares: the output (forward), the attn.weight gradient (train),
    grad_query (sdpa train), the in_proj_weight gradient (mha train)."""
    if isinstance(result, dict):
        return result["attn.weight"]
    return result[0] if isinstance(result, tuple) else result


def np_of(t):
    """A result as an ndarray: a torch tensor's values (a bfloat16 one through its bits)."""
    return to_numpy(t) if isinstance(t, torch.Tensor) else t


def max_diff(a, b):
    a = np.asarray(a).astype(np.float64)
    b = np.asarray(np_of(b)).astype(np.float64)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def same_bits(a, b):
    """Fraction of the elements of a and b (same shape and dtype) that are bit-identical."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(np_of(b))
    if a.dtype != b.dtype or a.size != b.size:
        return 0.0
    if not a.size:
        return 1.0
    width = a.dtype.itemsize
    return float(np.mean(np.all(a.view(np.uint8).reshape(-1, width)
                                == b.view(np.uint8).reshape(-1, width), axis=1)))


# --------------------------------------------------------------------------- #
# Table
# --------------------------------------------------------------------------- #
def fmt_time(s):
    if s < 1e-3:
        return f"{s * 1e6:8.1f} us"
    if s < 1:
        return f"{s * 1e3:8.2f} ms"
    return f"{s:8.3f} s "


HEADER = (f"{'case':<40}{'thr':>4} {'myatt':>11} {'torch':>11} {'numpy':>11} "
          f"{'/torch':>7} {'/numpy':>7} {'myatt rate':>16} {'%peak':>6} {'|myatt-torch|':>14} "
          f"{'=torch':>7}")


def row_text(r):
    numpy_t = fmt_time(r["numpy"]) if r["numpy"] is not None else f"{'-':>11}"
    per_numpy = f"{r['myatt'] / r['numpy']:7.2f}" if r["numpy"] is not None else f"{'-':>7}"
    rate = "-"
    if r["gflops"] is not None:
        rate = f"{r['gflops']:.2f} GFLOP/s"
    elif r["gelems"] is not None:
        rate = f"{r['gelems']:.3f} Gelem/s"
    share = f"{100 * r['share']:.1f}" if r["share"] is not None else "-"
    return (f"{r['case']:<40}{r['threads']:>4} {fmt_time(r['myatt'])} {fmt_time(r['torch'])} "
            f"{numpy_t} {r['myatt'] / r['torch']:7.2f} {per_numpy} "
            f"{rate:>16} {share:>6} {r['diff']:14.2e} {100 * r['same']:6.1f}%")


def run(args):
    quick = args.quick
    timing = Timing(min_total=0.05 if quick else 0.5, min_reps=3, min_sample=0.002 if quick else 0.01)
    ncores = cores()
    thread_counts = sorted({1, ncores})
    levels = ["seed", "mid"] if quick else ["seed", "mid", "large"]
    if args.only not in (None, "module"):
        levels = []
    gemm_n = 1024 if quick else 2048

    # ---- header: machine, versions, BLAS ----
    print(f"machine: {cpu_model()}, {ncores} cores available ({os.cpu_count()} online), "
          f"{platform.system()} {platform.machine()}")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}   "
          f"commit: {git_commit()}   load average: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"myatt {getattr(myatt, '__version__', '?')} ({os.path.dirname(myatt.__file__)})")
    kernel = myatt.kernel_path()
    print(f"myatt softmax path: {kernel} (MYATT_KERNEL={os.environ.get('MYATT_KERNEL', 'unset')})")
    print(f"numpy BLAS: {numpy_blas()}")
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS"):
        if var in os.environ:
            print(f"  note: {var}={os.environ[var]} is set"
                  + (" (slows numpy's OpenBLAS: unset it for fair numpy figures)"
                     if var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") else ""))
    if threadpool_limits is None:
        print("  note: threadpoolctl missing: numpy's BLAS threads are not set per row")

    peak = measure_peak()
    fma_peak = {isa: g for isa, g in peak.items() if isa != "avx512_bf16"}
    peak_core = max(fma_peak.values()) if fma_peak else None
    if peak_core:
        print("float32 FMA peak of one core (benchmarks/peak.c): "
              + ", ".join(f"{isa} {g:.1f} GFLOP/s" for isa, g in fma_peak.items())
              + f"; %peak uses {peak_core:.1f} x threads (float64: half)")
        if "avx512_bf16" in peak:
            print(f"bfloat16 dot-product peak of one core (vdpbf16ps): "
                  f"{peak['avx512_bf16']:.1f} GFLOP/s")
    else:
        print("float32 FMA peak: not measured (no C compiler or not x86-64)")
    print("times: median per call; /torch and /numpy = myatt time / their time (< 1: myatt "
          "faster); rate and %peak: myatt's best sample")
    print()
    print(HEADER)
    print("-" * len(HEADER))

    rows = []
    rng = np.random.default_rng(0)
    myatt.manual_seed(0)

    def add(case, threads, flops, elems, dtype, fns, results, unit=None):
        (tm_, best), (tt_, _), (tn_, _) = ((None, None) if f is None
                                           else timing(f, quiet_first=threads > 1) for f in fns)
        # the rate and its share of the peak from the best sample, as peak.c measures the
        # peak (its best of 20): the run least disturbed by the machine's other work
        share = None
        gflops = flops / best / 1e9 if flops else None
        if gflops is not None and (unit or peak_core):   # unit: a peak of its own (bfloat16's)
            share = gflops / ((unit or peak_core) * threads
                              * (0.5 if dtype == np.float64 else 1.0))
        r = dict(case=case, threads=threads, myatt=tm_, torch=tt_, numpy=tn_, gflops=gflops,
                 gelems=elems / best / 1e9 if elems else None, share=share, myatt_best=best,
                 diff=max_diff(first(results[0]), first(results[1])),
                 same=same_bits(first(results[0]), first(results[1])))
        rows.append(r)
        print(row_text(r), flush=True)

    with torch.no_grad():
        if not quick and args.only in (None, "sdpa"):   # first: the lowest maximum RSS yet
            long_sequence(add, rng, max(thread_counts))
        for level in levels:
            S, sizes = LEVELS[level]
            print(f"[{level}] S={S}, MyAtt{sizes}; Q,K [1,{S},{sizes[0]}],[1,{S},{sizes[1]}], "
                  f"V [1,{sizes[2]},{sizes[3]}]")
            for dtype in (np.float32, np.float64):
                ops = level_ops(level, dtype, rng)
                for n in thread_counts:
                    with Threads(n):
                        for op, flops, elems, fm, ft, fn in ops:
                            add(f"{level} {op} {np.dtype(dtype).name}", n, flops, elems, dtype,
                                (fm, ft, fn), (fm(), ft()))
        # ---- scaled_dot_product_attention ----
        for dtype in (np.float32, np.float64) if args.only in (None, "sdpa") else ():
            ops = sdpa_ops(dtype, rng, quick)
            print(f"[sdpa] scaled_dot_product_attention {np.dtype(dtype).name}: case B x H x L x S "
                  f"x E (decode: query heads / key-value heads), E == Ev")
            for n in thread_counts:
                with Threads(n):
                    for case, flops, fm, ft, fn in ops:
                        add(f"{case} {np.dtype(dtype).name}", n, flops, None, dtype,
                            (fm, ft, fn), (fm(), ft()))
            del ops
        # ---- float16 and bfloat16 ----
        halves = [np.float16] + ([ml_dtypes.bfloat16] if ml_dtypes is not None else [])
        # bfloat16 linear and the flash forward's products on vdpbf16ps where myatt uses it
        # (docs/speed.md): their %peak is of that instruction's peak
        bf16_dot = (myatt.kernel_path() == "avx512" and not os.environ.get("MYATT_KERNEL")
                    and "avx512_bf16" in peak)
        if args.only in (None, "half"):   # the float32 linear and sdpa the half rows are held against
            print("[half] float32, the reference of the half rows")
            ops = [o for o in half_ops(np.float32, rng, quick, gemm_n)
                   if not o[0].startswith("softmax")]
            for n in thread_counts:
                with Threads(n):
                    for op, flops, elems, fm, ft, fn in ops:
                        add(f"{op} float32", n, flops, elems, np.float32, (fm, ft, fn),
                            (fm(), ft()))
            del ops
        for dtype in halves if args.only in (None, "half") else ():
            name = np.dtype(dtype).name
            dot = bf16_dot and name == "bfloat16"
            print(f"[half] {name}: computed in float32, each result rounded (%peak: of the "
                  f"float32 FMA peak{'; linear and sdpa on vdpbf16ps: of its peak' if dot else ''})")
            ops = half_ops(dtype, rng, quick, gemm_n)
            for n in thread_counts:
                with Threads(n):
                    for op, flops, elems, fm, ft, fn in ops:
                        unit = peak["avx512_bf16"] if dot and op.startswith(("linear", "sdpa")) else None
                        add(f"{op} {name}", n, flops, elems, np.float32, (fm, ft, fn),
                            (fm(), ft()), unit)
            del ops
        # ---- MultiheadAttention (torch's module in training mode, dropout 0) ----
        mha_dtypes = [np.float32, np.float64] + halves if args.only in (None, "mha") else []
        for dtype in mha_dtypes + (halves if args.only == "half" else []):
            print(f"[mha] MultiheadAttention {np.dtype(dtype).name}: self-attention, query = "
                  f"key = value [L, N, E]")
            ops = mha_ops(dtype, rng, quick)
            for n in thread_counts:
                with Threads(n):
                    for op, flops, elems, fm, ft, fn in ops:
                        add(f"{op} {np.dtype(dtype).name}", n, flops, elems,
                            np.float64 if dtype == np.float64 else np.float32,
                            (fm, ft, fn), (fm(), ft()))
        # ---- myatt.validate's overhead: shadow mode on a transformer layer ----
        if args.only in (None, "validate"):
            print("[validate] myatt.validate(layer, x), shadow mode, against layer(x): "
                  "nn.TransformerEncoderLayer float32 (training mode, dropout 0), 6 calls; "
                  "/torch is the overhead")
            for case, layer, x in validate_cases(quick):
                def shadow_out(layer=layer, x=x):
                    with myatt.validating():
                        return layer(x)
                for n in thread_counts:
                    with Threads(n):
                        fns = (lambda: myatt.validate(layer, x), lambda: layer(x), None)
                        add(f"{case} float32", n, None, None, np.float32, fns,
                            (shadow_out(), layer(x)))
        # ---- GEMM alone ----
        if not args.only:
            a = rng.standard_normal((1, gemm_n, gemm_n)).astype(np.float32)
            b = rng.standard_normal((1, gemm_n, gemm_n)).astype(np.float32)
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            print(f"[gemm] bmm [1,{gemm_n},{gemm_n}] @ [1,{gemm_n},{gemm_n}] float32")
            with Threads(1):
                fns = (lambda: myatt.bmm(a, b), lambda: torch.bmm(ta, tb), lambda: a @ b)
                add(f"gemm {gemm_n}^3 float32", 1, 2 * gemm_n ** 3, None, np.float32, fns,
                    (fns[0](), fns[1]()))
    print("-" * len(HEADER))
    print("|myatt-torch|: max abs difference of the outputs (a sanity check, not a test); "
          "=torch: share of output elements bit-identical to torch's (train: of the "
          "attn.weight gradient; sdpa train: of grad_query; mha train: of the in_proj_weight "
          "gradient); sdpa: 4*L*S*E flops per head "
          "(causal: half; train: 3x, forward + backward through myatt.vjp vs torch autograd "
          "vs NumPy gradients by hand from the materialised weights); train: forward + "
          "backward through myatt.vjp, every "
          "gradient, counted as 3x the forward's FLOPs (train-stateless: forward, then "
          "MyAtt.backward, which recomputes attn_weights and applied); rate: GFLOP/s (softmax, gelu: "
          "elements/s) of myatt's best sample (times: medians); %peak: that rate over the "
          "measured FMA peak (peak.c's best of 20) x threads")
    return dict(peak=peak, rows=rows, quick=quick, machine=cpu_model(), cores=ncores,
                commit=git_commit(), date=datetime.datetime.now(datetime.timezone.utc).isoformat())


def long_sequence(add, rng, threads, L=32768, E=64):
    """A float32 forward at L = S = 32768 (one head; its [L, S] weights would be 4 GiB, so
    no NumPy), with the memory it took: the peak traced by
    tracemalloc (myatt's kernel workspaces go through PyMem_RawMalloc, so it sees them, and
    NumPy's arrays; not torch's) and the growth of the process's maximum resident set
    (resource.getrusage; 0 when an earlier row already reached more)."""
    q, k, v = (rng.standard_normal((1, 1, L, E)).astype(np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    sdpa = myatt.scaled_dot_product_attention
    myatt.empty_cache()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    with Threads(threads):
        out = sdpa(q, k, v)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0   # KiB on Linux
    print(f"[sdpa long] L = S = {L}, E = {E}, float32, {threads} threads: peak traced memory "
          f"{peak / 2**20:.1f} MiB (the output alone {out.nbytes / 2**20:.1f} MiB), maximum RSS "
          f"+{rss / 1024:.1f} MiB; the [L, S] weights would be {L * L * 4 / 2**30:.0f} GiB")
    with Threads(threads):
        add(f"sdpa forward 1x1x{L}x{L}x{E} float32", threads, 4 * L * L * E, None, np.float32,
            (lambda: sdpa(q, k, v), lambda: F.scaled_dot_product_attention(tq, tk, tv), None),
            (out, F.scaled_dot_product_attention(tq, tk, tv)))


def plot(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: --plot needs matplotlib (pip install matplotlib); no plot drawn")
        return
    rows = result["rows"]
    labels = [f"{r['case']} t{r['threads']}" for r in rows]
    y = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(rows) + 1.5))
    ax.barh(y - 0.2, [r["myatt"] / r["torch"] for r in rows], 0.4, label="myatt / torch")
    ax.barh(y + 0.2, [r["myatt"] / r["numpy"] if r["numpy"] else np.nan for r in rows], 0.4,
            label="myatt / numpy")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio (< 1: myatt faster)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run (a minute or two): seed and mid "
                   "sizes, small sdpa and mha shapes")
    p.add_argument("--only", choices=["module", "sdpa", "half", "mha", "validate"],
                   help="only these rows (module: MyAtt's seed, mid and large rows; sdpa: the "
                   "scaled_dot_product_attention rows; half: float16 and bfloat16 rows; mha: "
                   "the MultiheadAttention rows; validate: myatt.validate's overhead in shadow "
                   "mode)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--plot", metavar="PATH", help="also draw the ratios (needs matplotlib)")
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
