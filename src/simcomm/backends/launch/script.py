"""Running a script file as `__main__` in a rank thread, and the `__main__` every rank sees as its own."""
from __future__ import annotations

import builtins
import types
from pathlib import Path

from ...errors import RankFailed, SimcommError
from .context import current_context


class ScriptExit(RankFailed):
    """A launched rank called sys.exit with a non-zero status."""

    def __init__(self, rank: int, script: str, status):
        SimcommError.__init__(self, f"rank {rank}: {script} exited with status {status}")
        self.rank, self.original, self.status = rank, None, status


class Script:
    """A script read once; each rank runs it in a fresh module named __main__, compiled afresh (as each process
    does: torch.compile keeps what it compiled on a function's code object and puts the compiled function in that
    function's module, so ranks sharing code objects would find another rank's compiled code and miss its global)."""

    def __init__(self, path):
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise SimcommError(f"script {path!r} not found")
        self.source = self.path.read_bytes()
        try:
            compile(self.source, str(self.path), "exec")
        except SyntaxError as exc:
            raise SimcommError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None

    def new_module(self) -> types.ModuleType:
        module = types.ModuleType("__main__")
        module.__file__ = str(self.path)
        module.__builtins__ = builtins
        module.__spec__ = None
        return module

    def run(self, module: types.ModuleType, rank: int) -> None:
        """Execute the script in module; sys.exit(0) ends the rank normally, any other status is an error."""
        try:
            exec(compile(self.source, str(self.path), "exec"), module.__dict__)  # noqa: S102 - the user's script
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise ScriptExit(rank, self.path.name, exc.code) from None


class MainProxy(types.ModuleType):
    """sys.modules['__main__'] during a launch: attribute lookups go to the calling rank's own __main__, so
    pickling a class the script defined (object collectives) finds that rank's class."""

    def __init__(self, fallback: types.ModuleType):
        super().__init__("__main__")
        object.__setattr__(self, "_fallback", fallback)

    def __getattr__(self, name):
        ctx = current_context()
        module = ctx.main_module if ctx is not None and ctx.main_module is not None else self._fallback
        return getattr(module, name)
