"""The live region's processes: the real servers (started with ``python -m infra.servers``,
as an operator starts them, from the checkout that holds ``infra/``) and spotcap's services
(``spotcap ... run NAME`` child processes), each with its output in a file.

Every wait is bounded; a process that stops early is reported with the tail of its log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPOTCAP = str(Path(sys.executable).with_name("spotcap"))


def child_env() -> dict[str, str]:
    """The environment of every `spotcap` child of a live run: this one's, without its
    SPOTCAP_ settings (each child is told its home, region, log and database by option; a
    shared chdb path of this process, SPOTCAP_CHDB_PATH, is one a child could not open
    beside it)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}


class LiveError(RuntimeError):
    """The live region cannot go on; `hint` says what to do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class Servers:
    """Real servers started under `folder`, stopped by `stop`."""

    folder: Path
    started: list[str] = field(default_factory=list)

    def start(self, name: str, timeout_s: float = 300.0) -> str:
        """Start server `name`; its address."""
        if not (REPO / "infra" / "servers").is_dir():
            raise LiveError(
                f"no infra/servers beside {REPO}: the live region starts its servers from a "
                "checkout of spotcap",
                "run it from a checkout (make install), or give --kafka for the broker",
            )
        done = subprocess.run(
            [sys.executable, "-m", "infra.servers", name, "start", "--dir", str(self._dir(name))],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise LiveError(
                f"{name} did not start: {done.stderr.strip()[-2000:]}",
                "see the server's own error above (`python -m infra.servers --help`)",
            )
        self.started.append(name)
        return str(json.loads(done.stdout)["address"])

    def stop(self) -> None:
        for name in reversed(self.started):
            folder = str(self._dir(name))
            subprocess.run(
                [sys.executable, "-m", "infra.servers", name, "stop", "--dir", folder],
                cwd=REPO,
                capture_output=True,
                timeout=120,
                check=False,
            )
        self.started.clear()

    def _dir(self, name: str) -> Path:
        return self.folder / name


@dataclass
class Service:
    """One ``spotcap GLOBAL... ARGS...`` child process; stdout and stderr to files."""

    name: str
    argv: Sequence[str]
    folder: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def out(self) -> Path:
        return self.folder / f"{self.name}.out"

    @property
    def err(self) -> Path:
        return self.folder / f"{self.name}.log"

    def start(self) -> Service:
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [SPOTCAP, *self.argv], stdout=out, stderr=err, env=child_env()
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise `LiveError` if it stopped."""
        if self.proc is not None and self.proc.poll() is not None:
            raise LiveError(
                f"{self.name} stopped (exit {self.proc.returncode}); its log {self.err} ends:\n"
                f"{tail(self.err)}",
                "fix what its log says and run again",
            )

    def said(self) -> str:
        return tail(self.err, 100_000)

    def stop(self, timeout_s: float = 90.0) -> str:
        """SIGTERM, then SIGKILL after `timeout_s`; what it printed on stdout."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return tail(self.out, 20).strip()


def wait_until(
    done: Callable[[], bool], timeout_s: float, what: str, services: Sequence[Service] = (),
    every_s: float = 0.5,
) -> None:  # fmt: skip
    """Until `done()`, at most `timeout_s`; a stopped service or the time-out is a `LiveError`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        for service in services:
            service.check()
        if time.monotonic() > deadline:
            raise LiveError(
                f"{what}: not after {timeout_s:.0f} s",
                "the machine may be overloaded: run again with a longer --patience-s",
            )
        time.sleep(every_s)
