"""The local path: signal the workload's processes directly, when no scheduler answers in time.

Which processes are the workload's is configured (``[local]``): a regular expression on the
command line, or a substring of the process's cgroup path (``kubepods`` catches every container
the kubelet started). They get SIGTERM, then SIGKILL for what is left after the grace time
(capped by the notice's deadline); the drain is verified by looking again.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from agent.config import LocalConfig
from agent.drain.base import DrainContext, DrainResult
from schemas.events import DrainPath

_PROC = Path("/proc")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> str:
    stat = _read(_PROC / str(pid) / "stat").decode(errors="replace")
    _, _, rest = stat.rpartition(")")
    fields = rest.split()
    return fields[0] if fields else ""


def alive(pid: int) -> bool:
    """Running and not a zombie (a zombie has let go of everything but its exit status)."""
    state = _state(pid)
    return state not in ("", "Z", "X")


class LocalDrain:
    name: DrainPath = "local"

    def __init__(self, config: LocalConfig, *, protect: Iterable[int] = ()) -> None:
        self._cmdline = [re.compile(p) for p in config.match_cmdline]
        self._cgroup = list(config.match_cgroup)
        self.term_grace_s = config.term_grace_s
        self._protect = {os.getpid(), os.getppid(), 1, *protect}

    @property
    def configured(self) -> bool:
        return bool(self._cmdline or self._cgroup)

    def find(self) -> list[int]:
        """The pids of the workload's live processes on this node."""
        if not self.configured:
            return []
        found = []
        for entry in os.scandir(_PROC):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid not in self._protect and self._matches(pid) and alive(pid):
                found.append(pid)
        return found

    def _matches(self, pid: int) -> bool:
        if self._cmdline:
            raw = _read(_PROC / str(pid) / "cmdline").rstrip(b"\0")
            cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
            if any(p.search(cmdline) for p in self._cmdline):
                return True
        if self._cgroup:
            cgroup = _read(_PROC / str(pid) / "cgroup").decode(errors="replace")
            return any(part in cgroup for part in self._cgroup)
        return False

    def drain(self, ctx: DrainContext, grace_s: float | None = None) -> DrainResult:
        """SIGTERM, wait (bounded by the deadline), SIGKILL the rest, verify."""
        pids = self.find()
        signalled = _signal_all(pids, signal.SIGTERM)
        ctx.mark_signal()
        grace = ctx.deadline.cap(self.term_grace_s if grace_s is None else grace_s)
        left = _wait_gone(pids, grace)
        if left:
            _signal_all(left, signal.SIGKILL)
            left = _wait_gone(left, ctx.deadline.cap(2.0))
        remaining = [pid for pid in self.find() if pid not in pids] + left
        detail = f"{signalled} processes signalled"
        if remaining:
            detail += f"; {len(remaining)} still running"
        return DrainResult("local", not remaining, False, detail, signalled)


def _signal_all(pids: Iterable[int], sig: signal.Signals) -> int:
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            pass
        except PermissionError:
            pass  # not ours to signal; verification reports it still running
    return sent


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        left = [pid for pid in left if alive(pid)]
    return left
