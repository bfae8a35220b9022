"""Threads: many Python threads calling the kernels and one shared MyAtt at once give
results equal bit for bit to the serial ones; results do not depend on
set_num_threads; a forked child computes correctly after the parent used its threads;
mutating parameters while other threads compute never crashes (README, "Reliability").
"""
import os
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import myatt
from entry_points import COMPUTING, flat, invoke, sizes

N_THREADS = 8
ROUNDS = 6
THREAD_COUNTS = [1, 2, 3, 4, 7]


@pytest.fixture(autouse=True)
def _restore_threads():
    n = myatt.get_num_threads()
    yield
    myatt.set_num_threads(n)


def _arr(rng, *shape, dtype=np.float32, scale=None):
    a = rng.standard_normal(shape)
    if scale is not None:
        a = a * scale
    return a.astype(dtype)


# The registry's calls: large enough for the packed GEMM path and several blocks
THREAD_SIZES = sizes(batch=(130,), in_f=300, out_f=270, b=3, n=70, m=90, p=110,
                     shape=(60, 33, 17), dim=-1, Bq=2, Bk=1, S=150, q=64, k=48, v1=96, v2=80,
                     o=72)


def _workload(dtype):
    """Calls large enough for the packed GEMM path, several blocks and several threads
    per call; each returns a tuple of arrays. Also a MyAtt of THREAD_SIZES' sizes."""
    rng = np.random.default_rng(11)
    k = 300
    w = _arr(rng, 270, k, dtype=dtype, scale=k ** -0.5)
    xs = _arr(rng, 2, 40, k, dtype=dtype)[:, ::2, ::-1]        # strided, reversed
    a = _arr(rng, 3, 70, 90, dtype=dtype)
    m2 = np.asfortranarray(_arr(rng, 3, 90, 110, dtype=dtype))
    a_many = _arr(rng, 40, 64, 48, dtype=dtype)                # items dealt out to threads
    m_many = _arr(rng, 40, 48, 70, dtype=dtype)
    go_many = _arr(rng, 40, 64, 70, dtype=dtype)
    sm = _arr(rng, 60, 33, 17, dtype=dtype)
    sm_big = _arr(rng, 40, 300, 9, dtype=dtype)               # slices dealt out to threads
    m = myatt.MyAtt(64, 48, 96, 80, 72, dtype=dtype)        # for the mutation test
    # every computing entry point of the registry (entry_points.py) at THREAD_SIZES ...
    calls = {}
    for ep in COMPUTING:
        obj, args = ep.target(THREAD_SIZES, dtype), ep.good(THREAD_SIZES, dtype, seed=11)
        calls[ep.name] = lambda ep=ep, obj=obj, args=args: flat(
            invoke(ep, obj, args, THREAD_SIZES), ep.result)
    # ... and other layouts and splits of the work
    variants = {
        "linear-strided": lambda: (myatt.linear(xs, w),),
        "bmm-fortran": lambda: (myatt.bmm(a, m2),),
        "bmm-many-items": lambda: (myatt.bmm(a_many, m_many),
                                   *myatt.bmm_backward(go_many, a_many, m_many)),
        "softmax-two-axes": lambda: (myatt.softmax(sm, 1), myatt.softmax(sm, -1)),
        "softmax-threads": lambda: (myatt.softmax(sm_big, 1), myatt.softmax(sm_big, -1),
                                    myatt.softmax_backward(sm_big[::-1], sm_big, -1)),
    }
    assert not set(calls) & set(variants)
    calls.update(variants)
    return calls, m


def _assert_bits_equal(got, want, what):
    assert len(got) == len(want), what
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape, what
        assert g.tobytes() == e.tobytes(), f"{what}: not bit-identical to the serial result"


def _run_threads(target, n):
    """Start n threads at a barrier; re-raise the first exception any of them hit.
    Returns the threads' native ids."""
    barrier = threading.Barrier(n)
    errors = []

    def body(i):
        try:
            barrier.wait(timeout=60)
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "a thread did not finish (deadlock?)"
    if errors:
        raise errors[0]
    return [t.native_id for t in threads]


@pytest.mark.parametrize("num_threads", [1, 2])
def test_concurrent_calls_bit_identical(dtype, num_threads):
    """N_THREADS Python threads run every call ROUNDS times, in different orders, on the
    same objects and inputs; every result equals the serial one bit for bit."""
    myatt.set_num_threads(num_threads)
    calls, _ = _workload(dtype)
    serial = {name: fn() for name, fn in calls.items()}
    names = list(calls)

    def target(i):
        order = names[i % len(names):] + names[:i % len(names)]
        for _ in range(ROUNDS):
            for name in order:
                _assert_bits_equal(calls[name](), serial[name], name)

    _run_threads(target, N_THREADS)


def test_results_independent_of_num_threads(dtype):
    calls, _ = _workload(dtype)
    myatt.set_num_threads(1)
    want = {name: fn() for name, fn in calls.items()}
    for n in THREAD_COUNTS[1:] + [myatt.get_num_threads()]:
        myatt.set_num_threads(n)
        assert myatt.get_num_threads() == n
        for name, fn in calls.items():
            _assert_bits_equal(fn(), want[name], f"{name} with {n} threads")


def test_set_num_threads_while_computing(dtype):
    """One thread keeps changing the thread count while others compute: every result is
    still the serial one."""
    calls, _ = _workload(dtype)
    serial = {name: fn() for name, fn in calls.items()}
    stop = threading.Event()

    def target(i):
        if i == 0:
            j = 0
            while not stop.is_set():
                myatt.set_num_threads(THREAD_COUNTS[j % len(THREAD_COUNTS)])
                j += 1
                time.sleep(0.001)
            return
        try:
            for _ in range(ROUNDS):
                for name, fn in calls.items():
                    _assert_bits_equal(fn(), serial[name], name)
        finally:
            if i == 1:
                stop.set()

    _run_threads(target, 4)


def test_mutation_while_computing_never_crashes(dtype):
    """The README's rule: assigning or loading parameters while other threads run the
    module gives results from a mix of old and new values, but never a crash or a
    result of the wrong shape; once writes stop, results are exact again."""
    calls, m = _workload(dtype)
    rng = np.random.default_rng(5)
    states = [m.state_dict(), {k: (rng.standard_normal(v.shape) * 0.1).astype(v.dtype)
                               for k, v in m.state_dict().items()}]
    stop = threading.Event()
    Q, K, V = (_arr(rng, 1, 150, 64, dtype=dtype), _arr(rng, 1, 150, 48, dtype=dtype),
               _arr(rng, 1, 96, 80, dtype=dtype))

    def target(i):
        if i == 0:
            j = 0
            while not stop.is_set():
                sd = states[j % 2]
                if j % 3 == 0:
                    m.load_state_dict(sd)
                elif j % 3 == 1:
                    m.attn.weight = sd["attn.weight"]
                    m.attn_combine.bias = sd["attn_combine.bias"]
                else:
                    m.attn_combine.weight *= 1.0          # in place, through the view
                j += 1
            return
        try:
            for _ in range(4 * ROUNDS):
                out, attn = m(Q, K, V)
                assert out.shape == (1, 150, 72) and attn.shape == (150, 96)
                assert np.isfinite(out).all()
        finally:
            if i == 1:
                stop.set()

    _run_threads(target, 4)
    m.load_state_dict(states[1])
    fresh = myatt.MyAtt(64, 48, 96, 80, 72, dtype=dtype)
    fresh.load_state_dict(states[1])
    _assert_bits_equal(m(Q, K, V), fresh(Q, K, V), "after the writes")


def test_objects_created_and_dropped_concurrently():
    """Constructors, attribute reads and deallocation from many threads at once."""
    def target(i):
        for _ in range(50):
            m = myatt.MyAtt(8, 8, 16, 8, 4, dtype=np.float64 if i % 2 else np.float32)
            w = m.attn.weight
            del m                  # the view keeps the parameter alive
            w += 1.0
            lin = myatt.Linear(5, 3)
            lin.weight = np.ones((3, 5))
            assert lin(np.ones(5)).shape == (3,)

    _run_threads(target, N_THREADS)


def _wait_exited(native_ids, timeout=60):
    """Wait until these threads have left the process, not only Python.

    Thread.join returns once the thread's Python state is gone; the OS thread then
    still runs its exit path, which under the sanitized build (.ci/sanitize) includes
    ASan's thread teardown: it takes the ASan allocator's and thread registry's locks,
    and gcc 12's libasan does not take them around fork(). A fork in that window leaves
    the child a lock nobody will release: a hang of the sanitizer runtime, not of
    myatt (whose pool and workspace cache are reset in the child: threads.c, alloc.c).
    Threads that exist and wait (myatt's pool, torch's) are what the test is about."""
    deadline = time.monotonic() + timeout
    while set(native_ids) & {int(t) for t in os.listdir("/proc/self/task")}:
        assert time.monotonic() < deadline, "the test's threads did not exit"
        time.sleep(0.001)


def _wait_child(pid, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    # where it hangs, for the report (gdb where the machine has it)
    if shutil.which("gdb"):
        subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                       timeout=120, check=False)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung (thread pool after fork?)")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("child_threads", [None, 1, 3])
def test_fork_after_threads(dtype, child_threads):
    """The parent computes with several threads (kernel threads and Python threads);
    a forked child then computes the same results, with the inherited thread count or
    a new one. The child reports through its exit status."""
    calls, _ = _workload(dtype)
    myatt.set_num_threads(4)
    want = {name: fn() for name, fn in calls.items()}
    ids = _run_threads(lambda i: [calls[n]() for n in calls], 3)   # Python threads too
    if os.path.isdir("/proc/self/task"):
        _wait_exited(ids)

    pid = os.fork()
    if pid == 0:                                              # child
        code = 1
        try:
            if child_threads is not None:
                myatt.set_num_threads(child_threads)
            for name, fn in calls.items():
                _assert_bits_equal(fn(), want[name], name)
            # and threads started in the child
            _run_threads(lambda i: [_assert_bits_equal(calls[n](), want[n], n)
                                    for n in calls], 2)
            code = 0
        except BaseException:  # noqa: BLE001 - the exit status says it
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    status = _wait_child(pid)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
        f"the forked child failed (status {status}); see its traceback above"
    # and the parent still works
    for name, fn in calls.items():
        _assert_bits_equal(fn(), want[name], name)
