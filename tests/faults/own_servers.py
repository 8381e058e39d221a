"""Servers of a test's own, which it kills or pauses: started in its folder, stopped after
whatever happens; and a kill that waits until the process is gone."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from infra import servers
from infra.servers.process import alive


def own(start: Callable[[Path], servers.Server], folder: Path) -> Iterator[servers.Server]:
    """For a fixture: ``yield from own(servers.start_slurm, tmp_path / "slurm")``."""
    server = start(folder)
    try:
        yield server
    finally:
        servers.stop(server)


def kill(pid: int, patience_s: float = 60) -> None:
    """SIGKILL `pid` and wait until it is gone (at most `patience_s`)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + patience_s
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} outlived its SIGKILL"
        time.sleep(0.1)
