"""A watch on the rank that holds the baton (thread execution): a rank blocked outside the simulator must not hold the
run forever.

Ranks take turns, so while one runs every other waits for it. If the running rank blocks on something that only a
waiting rank can give back (a lock that rank took, unknown to the simulator, before it waited in simulated time),
nothing can ever move. The scheduler waits for the running rank in steps of WATCH_S; when the rank's thread has used
no CPU for STALL_S, nothing else in the process (nor any process it started) has either, and the rank is waiting on
a lock or condition (a `with` statement, an acquire/wait/join/get/put call, or inside threading or queue), the run
stops with a DeadlockError naming the rank, where it blocks and where every other rank waits. Any other wait outside
the simulator (a child process, a socket, a pipe: real things that end by themselves), and any wait while no other
rank waits in the simulator (none could hold what it waits for), is reported as progress every NOTE_S and left
alone.
"""
from __future__ import annotations

import dis
import os
import sys
import time
import traceback
from pathlib import Path

from ..errors import DeadlockError

WATCH_S = 1.0  # real seconds between looks
STALL_S = 10.0  # a rank idle this long on a lock, with nothing else in the process moving: stopped
NOTE_S = 60.0  # any other wait outside the simulator: a note on stderr this often
_PACKAGE = str(Path(__file__).resolve().parents[1])
_EXECUTION = Path(__file__).resolve().with_name("execution.py")
_LOCK_CALLS = {"acquire", "wait", "wait_for", "join", "get", "put", "__enter__"}
_WITH_OPS = {"BEFORE_WITH", "SETUP_WITH", "BEFORE_ASYNC_WITH", "SETUP_ASYNC_WITH"}
_SYNC_MODULES = ("threading", "queue")


def _thread_cpu(thread) -> float | None:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):  # not on this platform, or the thread has ended
        return None


def _descendants_cpu() -> float | None:
    """CPU seconds used so far by this process's live descendants (a compiler, a worker pool: what the rank may wait
    for), from /proc; None where there is no /proc or it cannot be read."""
    try:
        parent_of, cpu = {}, {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:  # it ended meanwhile
                continue
            parent_of[int(entry.name)] = int(fields[1])
            cpu[int(entry.name)] = int(fields[11]) + int(fields[12])
        ours, total, frontier = {os.getpid()}, 0, [os.getpid()]
        children: dict[int, list[int]] = {}
        for pid, ppid in parent_of.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for child in children.get(frontier.pop(), ()):
                if child not in ours:
                    ours.add(child)
                    total += cpu[child]
                    frontier.append(child)
        return total / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _ours(frame) -> bool:
    """Whether a frame is simcomm's own (or the threading machinery a rank waits in)."""
    path = Path(frame.f_code.co_filename).resolve()
    return str(path).startswith(_PACKAGE) or path.stem == "threading"


def user_frame(frame):
    """The innermost frame of the user's code (outside simcomm and threading), or the innermost frame."""
    f = frame
    while f is not None and _ours(f):
        f = f.f_back
    return f or frame


def user_stack(frame, limit: int = 6) -> str:
    """The user's frames of a thread's stack, innermost last, as a traceback shows them."""
    frames = []
    f = frame
    while f is not None and len(frames) < limit:
        if not _ours(f):
            frames.append(f)
        f = f.f_back
    return "".join(traceback.format_list([traceback.extract_stack(f, limit=1)[0] for f in reversed(frames)]))


def where(frame) -> str:
    """'file.py:12 in fn (`source line`)' for a frame."""
    (entry,) = traceback.extract_stack(frame, limit=1)
    return f"{Path(entry.filename).name}:{entry.lineno} in {entry.name}" + (f" (`{entry.line}`)" if entry.line else "")


def _scheduling(frame) -> bool:
    """Whether the thread waits in a scheduler's turn: a rank that started a world of its own (torch.multiprocessing
    in a launch) runs that world's scheduler, whose own watchdog looks at its ranks."""
    while frame is not None and Path(frame.f_code.co_filename).stem == "threading":
        frame = frame.f_back
    return frame is not None and Path(frame.f_code.co_filename).resolve() == _EXECUTION


def on_lock(frame) -> bool:
    """Whether a blocked thread whose innermost frame is `frame` waits on a lock, condition, event or queue."""
    if Path(frame.f_code.co_filename).stem in _SYNC_MODULES:
        return True
    instructions = [i for i in dis.get_instructions(frame.f_code) if i.offset <= frame.f_lasti]
    if instructions and instructions[-1].opname in _WITH_OPS:
        return True
    names = [i.argval for i in instructions[-6:] if i.opname in ("LOAD_METHOD", "LOAD_ATTR")]
    return bool(names) and names[-1] in _LOCK_CALLS


class Watchdog:
    """Looks at the running rank every WATCH_S until it hands the baton back (see the module docstring)."""

    def __init__(self, describe_waiting, nested: bool = False):
        self.describe_waiting = describe_waiting  # () -> what every other rank waits for, and where
        self.nested = nested  # the run was started by a rank of another run, which waits for it
        self._state = None

    def start(self, rank: int) -> None:
        self._state = {"rank": rank, "idle": 0.0, "cpu": None, "work": None, "noted": 0.0}

    def tick(self, rank: int, thread) -> None:
        """Called after each WATCH_S the running rank has not handed back; raises DeadlockError when it is stuck."""
        s = self._state
        frame = sys._current_frames().get(thread.ident)
        if frame is None or _scheduling(frame):
            return
        cpu = _thread_cpu(thread)
        key = cpu if cpu is not None else (id(frame), frame.f_lasti)
        children = _descendants_cpu() if key == s["cpu"] else None  # read /proc only once the rank looks idle
        work = (time.process_time() - time.thread_time(), children)  # the other threads, and what they started
        moved = s["work"] is None or work[0] - s["work"][0] > 0.01 * WATCH_S or children is None or \
            s["work"][1] is None or children - s["work"][1] > 0.01 * WATCH_S
        s["idle"] = s["idle"] + WATCH_S if key == s["cpu"] and not moved else 0.0
        s["cpu"], s["work"] = key, work
        if s["idle"] >= STALL_S and on_lock(frame) and (self.nested or self.describe_waiting()):
            raise self._stuck(rank, frame)  # only a rank waiting in the simulator can hold what it waits for
        if s["idle"] - s["noted"] >= NOTE_S:
            s["noted"] = s["idle"]
            sys.stderr.write(f"simcomm: rank {rank} has waited outside the simulator for {s['idle']:.0f} s of real "
                             f"time at {where(user_frame(frame))}\n")

    def _stuck(self, rank: int, frame) -> DeadlockError:
        stack = user_stack(frame)
        waiting = self.describe_waiting()
        others = "; ".join(f"rank {r} {what}" for r, what in waiting.items()) or "no other rank is live"
        if self.nested:
            others += "; the rank that started this world waits for it to end"
        at = where(user_frame(frame))
        msg = (f"rank {rank} is blocked outside the simulator at {at}, for {self._state['idle']:.0f} s of "
               f"real time with nothing else moving: it waits for a lock (or condition) that a rank took without the "
               f"simulator knowing and kept across a simulated wait, and no rank can run until it returns. The "
               f"others: {others}. Rank {rank}'s stack (innermost last):\n{stack}"
               "A lock made before the launch (or inside a C extension) must not be held across a sleep, a "
               "collective or a clock read; locks made while the script runs are simulated and wait in simulated "
               "time.")
        return DeadlockError(msg, {rank: f"blocked outside the simulator at {at}", **waiting})
