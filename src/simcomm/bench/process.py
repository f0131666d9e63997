"""Run a command as a process of its own: wall seconds, what it printed, and the peak memory the kernel reports."""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass


@dataclass
class Finished:
    returncode: int
    out: str
    err: str
    wall_seconds: float
    peak_mb: float  # maximum resident set of the process and the children it waited for (wait4's ru_maxrss)
    timed_out: bool
    timeout: float = 0.0
    cpu_seconds: float = 0.0  # user + system CPU of the process and the children it waited for (wait4)

    @property
    def failure(self) -> str:
        """Why it failed, in one line: the time-out, or the last line it wrote to stderr, or its exit code."""
        if self.timed_out:
            return f"timed out after {self.timeout:g} s"
        return (self.err.strip().splitlines() or [f"exit code {self.returncode}"])[-1][:200]


def run_process(cmd: list[str], cwd=None, timeout: float = 600.0, env=None) -> Finished:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, text=True, env=env)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Finished(proc.returncode, out.read(), err.read(), wall, usage.ru_maxrss / 1024, wall >= timeout,
                        timeout, usage.ru_utime + usage.ru_stime)
