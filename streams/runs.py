"""Run markers: whether the last run that wrote a region's events finished.

A command that writes a region's history (`spotcap demo`) writes a marker when it starts
(process id, host, command line, start time) and marks it finished when it ends cleanly, or
failed when it stops with an error. A run killed with SIGKILL, or by a power loss, leaves the
marker saying "running" for a process that no longer exists: `spotcap topics list` shows it,
so a person knows the region's log holds a partial run.

The markers live in a folder beside the log they describe (`runs_dir`, which the composition
root calls): ``<home>/log/_runs/`` for the embedded log; for Kafka, in the home directory of the
machine that ran the command, ``<home>/runs/kafka-<bootstrap>/`` (nothing is written to Kafka
for them, so another machine's runs against the same cluster are not seen). Each region's
marker is ``<region>.json`` there.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


def runs_dir(home: Path, log_dir: Path, kafka_bootstrap: str | None) -> Path:
    """Where the run markers of a log live: under `log_dir` for the embedded log, else under
    `home`, named for the Kafka cluster at `kafka_bootstrap`."""
    if kafka_bootstrap:
        name = re.sub(r"[^A-Za-z0-9.-]+", "_", kafka_bootstrap)
        return home / "runs" / f"kafka-{name}"
    return log_dir / "_runs"


@dataclass(frozen=True, slots=True)
class RunMarker:
    region: str
    command: str
    pid: int
    host: str
    process_start: str  # the process's start time as the kernel counts it (tells pids apart)
    started_at: str  # UTC, ISO 8601
    ended_at: str | None = None
    outcome: str = "running"  # "running" | "finished" | "failed"
    error: str = ""

    @property
    def state(self) -> str:
        """ "finished", "failed", "running" (its process is alive) or "killed" (it is gone)."""
        if self.outcome != "running":
            return self.outcome
        return "running" if _alive(self) else "killed"

    def as_json(self) -> dict[str, Any]:
        """The marker as JSON, with its `state`."""
        return {**asdict(self), "state": self.state}

    def describe(self) -> str:
        """One line a person reads under the topics table."""
        state = self.state
        head = f"last run writing region {self.region}: `{self.command}` (pid {self.pid})"
        if state == "finished":
            return f"{head} started {self.started_at}, finished {self.ended_at}"
        if state == "failed":
            return f"{head} started {self.started_at}, failed {self.ended_at}: {self.error}"
        if state == "running":
            return f"{head} started {self.started_at}, still running"
        return (
            f"{head} started {self.started_at} and did not finish: its process is gone "
            "(killed?); the region's topics hold a partial run"
        )


def last_run(runs_dir: Path, region: str) -> RunMarker | None:
    """The marker of the last run that wrote `region` (None: none recorded, or unreadable)."""
    path = runs_dir / f"{region}.json"
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
        return RunMarker(**raw)
    except (OSError, ValueError, TypeError):
        return None


@contextmanager
def run_marker(runs_dir: Path, region: str) -> Iterator[RunMarker]:
    """Mark a run writing `region`: running now; finished or failed when the block ends."""
    marker = RunMarker(
        region=region,
        command=" ".join(["spotcap", *sys.argv[1:]]) if sys.argv else "spotcap",
        pid=os.getpid(),
        host=socket.gethostname(),
        process_start=_process_start(os.getpid()),
        started_at=_now(),
    )
    path = runs_dir / f"{region}.json"
    _write(path, marker)
    try:
        yield marker
    except BaseException as error:  # Ctrl-C too: the run did not finish
        reason = str(error) or type(error).__name__
        if isinstance(error, KeyboardInterrupt):
            reason = "interrupted (Ctrl-C)"
        _write(path, _ended(marker, "failed", reason))
        raise
    _write(path, _ended(marker, "finished", ""))


def _ended(marker: RunMarker, outcome: str, error: str) -> RunMarker:
    fields = asdict(marker) | {"ended_at": _now(), "outcome": outcome, "error": error}
    return RunMarker(**fields)


def _write(path: Path, marker: RunMarker) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as handle:
        json.dump(asdict(marker), handle, sort_keys=True, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux); "" where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]


def _alive(marker: RunMarker) -> bool:
    if marker.host != socket.gethostname():
        return True  # another machine's process: it cannot be checked from here
    try:
        os.kill(marker.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    start = _process_start(marker.pid)
    return not (marker.process_start and start and start != marker.process_start)
