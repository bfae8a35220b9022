#!/usr/bin/env python3
"""Two builds of myatt against each other: is a change slower anywhere?

    python benchmarks/ab.py OLD_TREE NEW_TREE [--rounds 3] [--quick]

Each tree is a checkout with the extension built in place (`python setup.py build_ext
--inplace`). The two run in alternating processes, `--rounds` times each, on the same
cases as bench.py's myatt column (module forward, training step, each kernel; seed, mid and
large sizes; float32 and float64; 1 and all threads; the 2048^3 GEMM). Per case it prints
the median time of each build over its rounds, NEW/OLD, and the run-to-run noise: the
spread (max/min) of each build's own medians. A change is slower than noise where NEW/OLD
exceeds the larger of the two spreads.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Run inside each child process: times every case of bench.py's myatt column.
CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import numpy as np
import myatt
from bench import LEVELS

def median_time(f, min_total=0.3, reps=7):
    f()
    n, t0 = 1, time.perf_counter()
    f()
    one = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(min_total / reps / one))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        times.append((time.perf_counter() - t0) / n)
    return sorted(times)[reps // 2]

levels = ["seed", "mid"] + ([] if sys.argv[3] == "quick" else ["large"])
rng = np.random.default_rng(0)
out = {}
for level in levels:
    S, sizes = LEVELS[level]
    for dtype in (np.float32, np.float64):
        myatt.manual_seed(0)
        m = myatt.MyAtt(*sizes, dtype=dtype)
        Q = rng.standard_normal((1, S, sizes[0])).astype(dtype)
        K = rng.standard_normal((1, S, sizes[1])).astype(dtype)
        V = rng.standard_normal((1, sizes[2], sizes[3])).astype(dtype)
        go = rng.standard_normal((1, S, sizes[4])).astype(dtype)
        x = np.concatenate((Q[0], K[0]), -1)
        w, b = m.attn.weight, m.attn.bias
        scores = myatt.linear(x, w, b)
        aw = myatt.softmax(scores, -1)
        cases = {"module": lambda: m(Q, K, V),
                 "train": lambda: m.backward(Q, K, V, go),
                 "linear": lambda: myatt.linear(x, w, b),
                 "softmax": lambda: myatt.softmax(scores, -1),
                 "bmm": lambda: myatt.bmm(aw[None], V)}
        for threads in sorted({1, os.cpu_count() or 1}):
            myatt.set_num_threads(threads)
            for name, f in cases.items():
                out[f"{level} {name} {np.dtype(dtype).name} t{threads}"] = median_time(f)
if sys.argv[3] != "quick":
    a = rng.standard_normal((1, 2048, 2048)).astype(np.float32)
    myatt.set_num_threads(1)
    out["gemm 2048^3 float32 t1"] = median_time(lambda: myatt.bmm(a, a), reps=5)
print(json.dumps(out))
"""


def run_tree(tree, quick):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    res = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), HERE,
                          "quick" if quick else "full"],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="seed and mid sizes only")
    args = p.parse_args(argv)
    runs = {"old": [], "new": []}
    for r in range(args.rounds):
        for which in ("old", "new"):
            runs[which].append(run_tree(getattr(args, which), args.quick))
            print(f"round {r + 1}/{args.rounds}: {which} done", file=sys.stderr, flush=True)
    print(f"{'case':34s} {'old':>10s} {'new':>10s} {'new/old':>8s} {'noise':>6s}")
    worst = []
    for case in runs["old"][0]:
        old = [x[case] for x in runs["old"]]
        new = [x[case] for x in runs["new"]]
        mo, mn = statistics.median(old), statistics.median(new)
        noise = max(max(old) / min(old), max(new) / min(new))
        flag = "  slower" if mn / mo > noise else ""
        worst.append((mn / mo, case))
        print(f"{case:34s} {mo * 1e6:9.1f}u {mn * 1e6:9.1f}u {mn / mo:8.3f} {noise:6.3f}{flag}")
    print("largest new/old: " + ", ".join(f"{c} {r:.3f}" for r, c in sorted(worst)[-3:]))


if __name__ == "__main__":
    main()
