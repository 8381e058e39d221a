"""A kill of a test's own server that waits until the process is gone."""

from __future__ import annotations

import os
import signal
import time

from infra.servers.process import alive


def kill(pid: int, patience_s: float = 60) -> None:
    """SIGKILL `pid` and wait until it is gone (at most `patience_s`)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + patience_s
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} outlived its SIGKILL"
        time.sleep(0.1)
