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

from streams import children

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

    def restart(self, name: str, timeout_s: float = 300.0) -> str:
        """Start server `name` again after it stopped (on the ports it had, so its clients
        reconnect); whoever started it first still stops it."""
        return self._start(name, timeout_s)

    def start(self, name: str, timeout_s: float = 300.0) -> str:
        """Start server `name`; its address. `stop` stops it."""
        address = self._start(name, timeout_s)
        if name not in self.started:
            self.started.append(name)
        return address

    def _start(self, name: str, timeout_s: float) -> str:
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
    """One ``spotcap GLOBAL... ARGS...`` child process; stdout and stderr to files.

    Supervised (`supervise`): a service that stops on its own (a crash, a SIGKILL, an error it
    exits on when a server it needs went away) is started again by `check`, after a backoff
    (1 s, doubled for each stop that follows a start within a minute, up to 30 s; back to 1 s
    after a minute's run), at most `max_restarts` times; each restart is recorded
    (`restarts`) and noted in its log. The services are built to be restarted: they go on from
    what the log, their state and the broker's committed offsets hold."""

    name: str
    argv: Sequence[str]
    folder: Path
    proc: subprocess.Popen[bytes] | None = None
    supervise: bool = True
    max_restarts: int = 20
    restarts: list[int] = field(default_factory=list)
    """The exit code of each stop that was followed by a restart."""
    _restart_at: float | None = None
    _started_at: float = 0.0
    _quick_stops: int = 0

    @property
    def out(self) -> Path:
        return self.folder / f"{self.name}.out"

    @property
    def err(self) -> Path:
        return self.folder / f"{self.name}.log"

    def start(self) -> Service:
        self.folder.mkdir(parents=True, exist_ok=True)
        mode = "ab" if self.restarts else "wb"
        self._started_at = time.monotonic()
        with self.out.open(mode) as out, self.err.open(mode) as err:
            self.proc = subprocess.Popen(  # it ends with the run, even a run killed
                children.argv([SPOTCAP, *self.argv]), stdout=out, stderr=err, env=child_env()
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise `LiveError` if it stopped and is not (or no longer) restarted; else start it
        again once its backoff is over."""
        if self.proc is None or self.proc.poll() is None:
            return
        code = self.proc.returncode
        if not self.supervise or len(self.restarts) >= self.max_restarts:
            raise LiveError(
                f"{self.name} stopped (exit {code}"
                f"{f', after {len(self.restarts)} restarts' if self.restarts else ''}); "
                f"its log {self.err} ends:\n{tail(self.err)}",
                "fix what its log says and run again",
            )
        now = time.monotonic()
        if self._restart_at is None:
            ran_s = now - self._started_at
            self._quick_stops = self._quick_stops + 1 if ran_s < 60.0 else 0
            wait_s = min(30.0, 2.0 ** max(0, self._quick_stops - 1))
            self._restart_at = now + wait_s
            with self.err.open("a") as err:
                err.write(f"[supervisor] {self.name} stopped (exit {code}); "
                          f"starting it again in {wait_s:.0f} s\n")  # fmt: skip
        if now >= self._restart_at:
            self._restart_at = None
            self.restarts.append(code)
            self.start()

    def said(self) -> str:
        return tail(self.err, 100_000)

    def stop(self, timeout_s: float = 90.0) -> str:
        """SIGTERM, then SIGKILL after `timeout_s`; what it printed on stdout."""
        self.supervise = False
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
