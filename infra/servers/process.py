"""The life of a server process: spawn it, wait until it answers, stop it, and remember it.

Each server runs from its own data directory and leaves a state file ``server.json`` there (name,
address, pid, log path, timings), so that ``stop`` and ``server_status`` work from any process.
Stopping is bounded: a clean signal, a grace period, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_FILE = "server.json"
PORTS_FILE = "ports.json"
LOG_TAIL_LINES = 40

# Processes started by this Python process, kept so that they can be reaped (no zombies, no
# "subprocess still running" warnings) when they are stopped from here.
_children: dict[int, subprocess.Popen[bytes]] = {}


def cache_dir() -> Path:
    """Where fetched and built tools are cached: $SPOTCAP_CACHE, else ~/.cache/spotcap."""
    return Path(os.environ.get("SPOTCAP_CACHE") or Path.home() / ".cache" / "spotcap").expanduser()


class ServerError(RuntimeError):
    """A server could not be fetched, started or stopped.

    The message names the server, says what failed, quotes the tail of its log and says how to fix.
    """

    def __init__(
        self, name: str, what: str, *, log_path: Path | None = None, fix: str = ""
    ) -> None:
        parts = [f"{name}: {what}"]
        if log_path is not None:
            tail = _log_tail(log_path)
            parts.append(f"--- last {LOG_TAIL_LINES} lines of {log_path} ---\n{tail}\n---")
        if fix:
            parts.append(f"How to fix: {fix}")
        super().__init__("\n".join(parts))
        self.name = name
        self.log_path = log_path


@dataclass(frozen=True)
class Server:
    """A running server."""

    name: str  # "kafka" | "postgres" | "nats" | "openbao"
    # kafka "127.0.0.1:PORT"; postgres a libpq URI; nats "nats://127.0.0.1:PORT";
    # openbao "http://127.0.0.1:PORT"
    address: str
    pid: int
    data_dir: Path
    log_path: Path


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"


def append_log(path: Path, line: str) -> None:
    """Add a timestamped line of spotcap's own to a server's log."""
    with path.open("a", encoding="utf-8") as f:
        f.write(f"[spotcap infra {time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")


def free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on 127.0.0.1 (all sockets held open until all are chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _bindable(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port`` (connections of a stopped server in TIME_WAIT do
    not count: servers bind with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ports_of(data_dir: Path, count: int) -> list[int]:
    """The ports of the server of ``data_dir``: those it had before (``ports.json``) when all
    are free again, so that clients that knew its address reconnect after a restart (a crash,
    a SIGKILL, a stop); else free ones, remembered for the next start."""
    path = data_dir / PORTS_FILE
    with contextlib.suppress(OSError, ValueError, TypeError):
        had = [int(p) for p in json.loads(path.read_text())]
        if len(had) == count and all(map(_bindable, had)):
            return had
    ports = free_ports(count)
    path.write_text(json.dumps(ports) + "\n")
    return ports


def ports_had(data_dir: Path, count: int) -> list[int] | None:
    """The ports ``ports.json`` remembers for the server of ``data_dir``, bound or not (a part
    of a server started again beside parts still running must take the ports it had)."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        had = [int(p) for p in json.loads((data_dir / PORTS_FILE).read_text())]
        if len(had) == count:
            return had
    return None


def tcp_connects(port: int, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace")


def alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (reaps it when it is our child)."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            _children.pop(pid, None)
            return False
        return True
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owns(pid: int, data_dir: Path) -> bool:
    """The process ``pid`` is alive and is the server of ``data_dir`` (guards against pid reuse)."""
    return alive(pid) and str(data_dir) in _cmdline(pid)


def write_state(data_dir: Path, state: dict[str, Any]) -> None:
    """Replace ``data_dir``'s state file atomically (write a temporary file, then rename)."""
    tmp = data_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(data_dir / STATE_FILE)


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """What ``data_dir``'s state file holds, if it holds anything readable."""
    return _read_state(data_dir)


def live_companion(state: Mapping[str, Any] | None, name: str, data_dir: Path) -> int | None:
    """The pid of the companion process ``name`` the state file names, if it still runs (and
    is still that process: its command line names its folder)."""
    for companion in (state or {}).get("companions", ()):
        if companion.get("name") != name:
            continue
        pid = int(companion.get("pid", 0))
        if pid > 0 and alive(pid) and str(companion.get("match", data_dir)) in _cmdline(pid):
            return pid
    return None


def _read_state(data_dir: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def state_of(server: Server, **extra: Any) -> dict[str, Any]:
    """What the state file holds for ``server``, plus ``extra`` (ports, timings)."""
    return {
        "name": server.name,
        "address": server.address,
        "pid": server.pid,
        "data_dir": str(server.data_dir),
        "log_path": str(server.log_path),
        **extra,
    }


def _server_from_state(state: dict[str, Any]) -> Server:
    return Server(
        name=str(state["name"]),
        address=str(state["address"]),
        pid=int(state["pid"]),
        data_dir=Path(state["data_dir"]),
        log_path=Path(state["log_path"]),
    )


def running(data_dir: Path, name: str) -> Server | None:
    """The server already running from ``data_dir``, if any."""
    state = _read_state(data_dir)
    if state is None or state.get("name") != name:
        return None
    server = _server_from_state(state)
    return server if owns(server.pid, data_dir) else None


def prepare_dir(data_dir: Path | str) -> Path:
    """The absolute data directory, created if missing."""
    path = Path(data_dir).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def spawn(
    name: str,
    argv: list[str],
    log_path: Path,
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` detached (own session), stdout and stderr appended to ``log_path``.

    ``env`` is added to this process's environment (for values kept off the command line).
    """
    append_log(log_path, "starting: " + " ".join(argv))
    with log_path.open("ab") as log:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**os.environ, **env} if env else None,
                start_new_session=True,
            )
        except OSError as exc:
            append_log(log_path, f"cannot execute {argv[0]!r}: {exc}")
            raise ServerError(
                name,
                f"cannot execute {argv[0]!r}: {exc}",
                log_path=log_path,
                fix=f"install it or point spotcap at a working {Path(argv[0]).name}",
            ) from exc
    _children[proc.pid] = proc
    return proc


def wait_ready(
    name: str,
    proc: subprocess.Popen[bytes],
    probe: Callable[[float], bool],
    timeout_s: float,
    *,
    log_path: Path,
    fix: str,
) -> float:
    """Call ``probe(remaining_s)`` until it returns True; returns the seconds it took.

    Kills the process and raises ServerError if it exits or the time runs out.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            _children.pop(proc.pid, None)
            raise ServerError(
                name,
                f"process exited with code {code} before answering",
                log_path=log_path,
                fix=fix,
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            error = ServerError(  # quote the log as it was, not the shutdown that follows
                name,
                f"did not answer within {timeout_s:.0f} s (process {proc.pid} stopped)",
                log_path=log_path,
                fix=fix,
            )
            kill(proc.pid, name)
            raise error
        if probe(min(remaining, 5.0)):
            return time.monotonic() - started
        time.sleep(0.1)


def wait_probe(
    name: str, probe: Callable[[float], bool], timeout_s: float, *, log_path: Path, fix: str
) -> float:
    """Call ``probe(remaining_s)`` until it returns True (a server of which only a part was
    started again, no process of this call to watch); returns the seconds it took, or raises
    ServerError when the time runs out."""
    started = time.monotonic()
    while (left := timeout_s - (time.monotonic() - started)) > 0:
        if probe(min(left, 5.0)):
            return time.monotonic() - started
        time.sleep(0.2)
    raise ServerError(name, f"did not answer within {timeout_s:.0f} s of a restart",
                      log_path=log_path, fix=fix)  # fmt: skip


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def kill(pid: int, name: str, grace_s: float | None = None) -> None:
    """Stop ``pid`` cleanly (bounded), then SIGKILL; reaps it if it is our child."""
    first = signal.SIGINT if name == "postgres" else signal.SIGTERM  # PG: fast shutdown
    if grace_s is None:
        grace_s = {"kafka": 60.0, "postgres": 30.0}.get(name, 15.0)
    if alive(pid):
        _signal(pid, first)
        if not _wait_gone(pid, grace_s):
            _signal(pid, signal.SIGKILL)
            _wait_gone(pid, 10.0)
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def stop(server_or_data_dir: Server | Path | str) -> None:
    """Stop the server (SIGTERM, or SIGINT for PostgreSQL's fast shutdown; bounded wait; then
    SIGKILL). Idempotent: stopping a stopped server, or a directory without one, does nothing."""
    if isinstance(server_or_data_dir, Server):
        data_dir = server_or_data_dir.data_dir.resolve()
        state: dict[str, Any] | None = _read_state(data_dir) or state_of(server_or_data_dir)
    else:
        data_dir = Path(server_or_data_dir).expanduser().resolve()
        state = _read_state(data_dir)
    if state is None:
        return
    name, pid = str(state.get("name", "?")), int(state.get("pid", 0))
    _run_pre_stop(state)
    # Companion processes (Slurm's slurmrestd, slurmd and munged), stopped first, in order;
    # those marked "after" (kube-apiserver's etcd, which it needs to shut down) after it.
    companions = list(state.get("companions", ()))
    _stop_companions([c for c in companions if not c.get("after")], data_dir, name)
    if pid > 0 and owns(pid, data_dir):
        kill(pid, name)
        if alive(pid):
            raise ServerError(
                name,
                f"process {pid} survived SIGKILL",
                log_path=Path(state["log_path"]) if "log_path" in state else None,
                fix=f"kill {pid} by hand",
            )
    else:
        _children.pop(pid, None)
    _stop_companions([c for c in companions if c.get("after")], data_dir, name)
    for folder in state.get("remove_after_stop", ()):  # outside data_dir (Slurm's under /run)
        shutil.rmtree(folder, ignore_errors=True)
    (data_dir / STATE_FILE).unlink(missing_ok=True)


def _stop_companions(companions: list[dict[str, Any]], data_dir: Path, name: str) -> None:
    for companion in companions:
        other = int(companion.get("pid", 0))
        if other > 0 and alive(other) and str(companion.get("match", data_dir)) in _cmdline(other):
            kill(other, str(companion.get("name", name)))


def _run_pre_stop(state: Mapping[str, Any]) -> None:
    """A server's own clean-up command before its processes stop (bounded; failures ignored)."""
    argv = state.get("pre_stop")
    if not argv:
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [str(a) for a in argv],
            env={**os.environ, **dict(state.get("pre_stop_env", {}))},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )


def server_status(data_dir: Path | str) -> dict[str, Any]:
    """What ``data_dir``'s state file says, plus ``running`` (the process is alive)."""
    path = Path(data_dir).expanduser().resolve()
    state = _read_state(path)
    if state is None:
        return {"data_dir": str(path), "running": False}
    state["running"] = owns(int(state.get("pid", 0)), path)
    return state
