"""simcomm launch with what a script may do besides torch.distributed (issue 21): torch.compile, locks in shared
modules, subprocesses, threading waits, event loops, children that fail, intra-op threads, huge launches. Never a
hang; simulated time deterministic; torch's own exceptions where torch raises them."""
import ctypes
import ctypes.util
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import simcomm.distributed.watchdog as watchdog
from simcomm.backends.launch import launch
from simcomm.cli import main
from simcomm.distributed.spawn import spawn
from simcomm.errors import DeadlockError, SimcommError


def write(path, body: str):
    path.write_text(textwrap.dedent(body))
    return path


def elapsed(result) -> float:
    return result.worlds[0].elapsed


def test_torch_compile_runs_on_two_ranks(tmp_path, capsys):
    """Inductor loads each compiled kernel through a variable it puts in os.environ just before (a rank's os.environ
    must reach C's getenv), probes the CPU in a subprocess while it holds torch's compile lock (the wait must not
    hand the turn to a rank that then blocks on that lock), and keeps compiled code on the function's code object
    and its global in the function's module (each rank compiles its own copy of the script)."""
    script = write(tmp_path / "compiled.py", """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        def f(x):
            return torch.sin(x) * 2 + 1
        y = torch.compile(f)(torch.arange(4.0))
        dist.all_reduce(y)
        print(dist.get_rank(), [round(v, 5) for v in y.tolist()])
    """)
    assert launch(script, nproc_per_node=2, cluster="cpu-host").ok
    expected = [round(2 * (2 * float(torch.sin(torch.tensor(float(i)))) + 1), 5) for i in range(4)]
    assert sorted(capsys.readouterr().out.splitlines()) == [f"{r} {expected}" for r in range(2)]


def test_a_rank_writes_reach_getenv_and_are_undone(tmp_path):
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.getenv.restype = ctypes.c_char_p
    script = write(tmp_path / "env.py", """
        import ctypes, ctypes.util, os
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.getenv.restype = ctypes.c_char_p
        os.environ["SIMCOMM_TEST_VAR"] = "rank" + os.environ["RANK"]
        assert libc.getenv(b"SIMCOMM_TEST_VAR") == ("rank" + os.environ["RANK"]).encode()
        del os.environ["SIMCOMM_TEST_VAR"]
        assert libc.getenv(b"SIMCOMM_TEST_VAR") is None
        os.environ["SIMCOMM_TEST_VAR"] = "left"
    """)
    assert launch(script, nproc_per_node=2, cluster="cpu-host").ok
    assert libc.getenv(b"SIMCOMM_TEST_VAR") is None


SHARED_LOCK = """
    import threading, time
    LOCK = threading.Lock()
    RLOCK = threading.RLock()
    def work(seconds):
        with LOCK:
            with RLOCK, RLOCK:  # re-entrant
                time.sleep(seconds)
        return time.monotonic()
"""


def test_a_lock_in_a_shared_module_waits_in_simulated_time(tmp_path, capsys):
    """A module the ranks share, made during the launch: a rank that wants its lock while another rank holds it
    (asleep in simulated time) waits for it in simulated time, so the ranks take it in turn."""
    write(tmp_path / "shared_lock_mod.py", SHARED_LOCK)
    script = write(tmp_path / "locker.py", """
        import os, time, shared_lock_mod
        t0 = time.monotonic()
        shared_lock_mod.work(0.5)
        print(os.environ["RANK"], round(time.monotonic() - t0, 9))
    """)
    sys.modules.pop("shared_lock_mod", None)
    runs = []
    for _ in range(2):
        result = launch(script, nproc_per_node=3, cluster="cpu-host")
        sys.modules.pop("shared_lock_mod", None)
        runs.append((sorted(capsys.readouterr().out.splitlines()), elapsed(result)))
    assert runs[0] == runs[1] == (["0 0.5", "1 1.0", "2 1.5"], pytest.approx(1.5))


def test_a_lock_held_across_a_sleep_and_a_collective_is_a_named_deadlock(tmp_path):
    write(tmp_path / "shared_lock_mod2.py", SHARED_LOCK)
    script = write(tmp_path / "locker2.py", """
        import torch, torch.distributed as dist, shared_lock_mod2
        dist.init_process_group("gloo")
        with shared_lock_mod2.LOCK:
            dist.barrier()
    """)
    sys.modules.pop("shared_lock_mod2", None)
    with pytest.raises(DeadlockError, match=r"rank 0 waits in barrier.*rank 1 waits in acquire of a lock \(made at "
                                            r"shared_lock_mod2.py:3\) held by rank 0"):
        launch(script, nproc_per_node=2, cluster="cpu-host")
    sys.modules.pop("shared_lock_mod2", None)


def test_a_rank_blocked_on_a_lock_made_before_the_launch_is_stopped_naming_it(tmp_path, monkeypatch):
    """The watchdog: a lock the simulator does not know, held by a rank asleep in simulated time, blocks the next
    rank outside the simulator; the run stops with an error naming the rank, the line and where the holder waits."""
    monkeypatch.setattr(watchdog, "WATCH_S", 0.2)
    monkeypatch.setattr(watchdog, "STALL_S", 1.0)
    monkeypatch.syspath_prepend(str(tmp_path))
    write(tmp_path / "early_lock_mod.py", SHARED_LOCK)
    import early_lock_mod  # noqa: F401 - made now, before the launch: a real lock
    script = write(tmp_path / "early.py", "import early_lock_mod\nearly_lock_mod.work(0.5)\n")
    t0 = time.perf_counter()
    idle_child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # as a forkserver is
    try:
        with pytest.raises(DeadlockError) as info:
            launch(script, nproc_per_node=2, cluster="cpu-host")
    finally:
        idle_child.kill()
        idle_child.wait()
    text = str(info.value)
    assert "rank 1 is blocked outside the simulator at early_lock_mod.py:6 in work (`with LOCK:`)" in text
    assert "rank 0 waits in sleep(0.5 s) at early_lock_mod.py:8 in work (`time.sleep(seconds)`)" in text
    assert 'early.py", line 2, in <module>' in text and time.perf_counter() - t0 < 30
    sys.modules.pop("early_lock_mod", None)


def test_a_rank_waiting_on_a_busy_child_is_left_alone(tmp_path, monkeypatch, capsys):
    """The watchdog's other side: a rank waiting on a condition while a process it started works (a compiler, a
    worker pool) is making progress, however long it waits."""
    monkeypatch.setattr(watchdog, "WATCH_S", 0.2)
    monkeypatch.setattr(watchdog, "STALL_S", 1.0)
    script = write(tmp_path / "busy.py", """
        import os, subprocess, sys, threading, time
        if os.environ["RANK"] == "1":
            time.sleep(1)  # waits in the simulator meanwhile
        else:
            time.sleep(0.001)
            busy = "import time\\nt = time.perf_counter()\\nwhile time.perf_counter() - t < 3: pass"
            child = subprocess.Popen([sys.executable, "-c", busy])
            done = threading.Event()
            threading.Thread(target=lambda: (child.wait(), done.set())).start()
            done.wait()
            print("child exit", child.returncode)
    """)
    assert launch(script, nproc_per_node=2, cluster="cpu-host").ok
    assert capsys.readouterr().out == "child exit 0\n"


def test_waits_outside_the_simulator_take_real_time_and_no_simulated_time(tmp_path, capsys):
    """subprocess's wait loop, asyncio, concurrent.futures and threading keep the real clock in a rank; the
    script's own sleeps and clock reads are simulated. Same numbers on every run."""
    script = write(tmp_path / "waits.py", """
        import asyncio, concurrent.futures, subprocess, sys, threading, time
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3)"], timeout=30, check=True)
        t1 = time.monotonic()
        assert not threading.Event().wait(0.05)
        asyncio.run(asyncio.sleep(0.05))
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert pool.submit(lambda: 7).result(timeout=10) == 7
        t2 = time.monotonic()
        time.sleep(0.25)
        print(t1 - t0, t2 - t1, time.monotonic() - t2, time.perf_counter() - t0 == time.monotonic() - t0)
    """)
    outs = []
    for _ in range(2):
        real = time.perf_counter()
        result = launch(script, cluster="cpu-host")
        assert time.perf_counter() - real >= 0.3  # the child process did run
        outs.append((capsys.readouterr().out, elapsed(result)))
    assert outs[0] == outs[1] == ("0.0 0.0 0.25 True\n", pytest.approx(0.25))


SPAWNER = """
    import sys
    import torch.multiprocessing as mp
    def child(rank, how):
        if rank == 1 and how == "raise":
            raise ValueError("child gives up")
        if rank == 1 and how == "exit":
            sys.exit(5)
    if __name__ == "__main__":
        try:
            mp.spawn(child, args=("raise",), nprocs=2)
        except mp.ProcessRaisedException as exc:
            print("raised", exc.error_index, "ValueError: child gives up" in str(exc), "in child" in str(exc))
        try:
            mp.spawn(child, args=("exit",), nprocs=3)
        except mp.ProcessExitedException as exc:
            print("exited", exc.error_index, exc.exit_code, exc)
        mp.spawn(child, args=("ok",), nprocs=2)
        print("done")
"""


def test_spawned_children_fail_as_torch_says_and_a_parent_may_handle_it(tmp_path, capsys):
    script = write(tmp_path / "spawner.py", SPAWNER)
    assert main(["launch", "--cluster", "cpu-host", str(script)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["raised 1 True True", "exited 1 5 process 1 terminated with exit code 5", "done"]
    assert err.count("world of") == 4 and err.count(": failed") == 2


def test_an_unhandled_child_failure_fails_the_parent_with_torchs_exception(tmp_path, capsys):
    script = write(tmp_path / "unhandled.py", """
        import torch.multiprocessing as mp
        def child(rank):
            if rank:
                raise ValueError("child gives up")
        mp.spawn(child, nprocs=2)
    """)
    assert main(["launch", "--cluster", "cpu-host", str(script)]) == 1
    err = capsys.readouterr().err
    assert "rank 0 raised ProcessRaisedException" in err and "-- Process 1 terminated with the following error" in err
    assert 'unhandled.py", line 5, in child' in err and "ValueError: child gives up" in err


def test_ranks_compute_with_the_threads_they_report(tmp_path, capsys):
    """torchrun's OMP_NUM_THREADS=1 holds in every rank thread from its first kernel: a GEMM whose result depends on
    the thread count (MKL splits its sum) equals the one-thread product bit for bit, and the rank reports 1."""
    a, b = torch.randn(1, 100_000, generator=torch.Generator().manual_seed(0)), torch.randn(100_000, 1)
    torch.save((a, b), tmp_path / "ab.pt")
    script = write(tmp_path / "gemm.py", f"""
        import torch
        a, b = torch.load({str(tmp_path / "ab.pt")!r})
        print((a @ b).item().hex(), torch.get_num_threads())
    """)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected = (a @ b).item().hex()
    finally:
        torch.set_num_threads(before)
    assert launch(script, nproc_per_node=2, cluster="cpu-host").ok
    assert capsys.readouterr().out.splitlines() == [f"{expected} 1"] * 2


def test_huge_launches_are_refused_before_any_work():
    with pytest.raises(SimcommError, match="nproc_per_node: expected a whole number from 1 to 4096, got 5000"):
        launch(__file__, nproc_per_node=5000, cluster="cpu-host")
    with pytest.raises(SimcommError, match="nprocs=5000: cpu-host is one host, which holds at most 4096 ranks"):
        spawn(lambda r: None, nprocs=5000, cluster="cpu-host")
    with pytest.raises(SimcommError, match="a launch runs at most 16384 ranks"):
        launch(__file__, nproc_per_node=8, nnodes=4096, cluster="hgx-h100")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(SimcommError, match="nproc_per_node: expected a whole number"):
            launch(__file__, nproc_per_node=bad, cluster="cpu-host")
    with pytest.raises(SimcommError, match="flop_rate: expected a finite number > 0"):
        launch(__file__, nproc_per_node=1, cluster="cpu-host", flop_rate=-1.0)


def test_the_command_line_refuses_a_huge_host():
    out = subprocess.run([sys.executable, "-m", "simcomm", "launch", "--nproc-per-node", "5000", "--cluster",
                          "cpu-host", __file__], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert ("argument --nproc-per-node/--nproc_per_node: expected a whole number from 1 to 4096, got 5000 (ranks on "
            "one host, as scenarios allow)") in out.stderr
